"""The bank-transfer workload (issue 15 item 7): 8 threads move money between accounts spread
over the shards with pymongo's with_transaction through the router -- every transfer a
two-phase commit -- while the coordinator shard is killed with kill -9 before each step of
the protocol in turn (crashBeforeCoordinatorPhase) and a participant shard is killed while
the coordinator waits for its votes and for its acknowledgement; each killed shard is
restarted and the load goes on. Afterwards the total is what it was, no prepared transaction
or coordinator document is left, and a reader in snapshot transactions never saw another
total (no dirty read, repeatable reads)."""
import random
import threading

import pytest
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern

from shale_fixtures import ShaleCluster, fail_point, wait_until

PHASES = ["writingParticipantList", "waitingForVotes", "writingDecision",
          "waitingForDecisionAcks"]
PER_SHARD = 8
START = 1000


def setup_accounts(c, nshards):
    r = c.router_client()
    r.admin.command("enableSharding", "bank", primaryShard="shard0")
    r.admin.command("shardCollection", "bank.acct", key={"x": 1})
    for i in range(1, nshards):
        r.admin.command("split", "bank.acct", middle={"x": 100 * i})
        r.admin.command("moveChunk", "bank.acct", find={"x": 100 * i}, to="shard%d" % i)
    keys = [[100 * i + k for k in range(PER_SHARD)] for i in range(nshards)]
    r.bank.acct.insert_many([{"_id": x, "x": x, "bal": START} for ks in keys for x in ks])
    return keys


class Load:
    """Transfer threads and one snapshot reader over the router until stop()."""

    def __init__(self, c, keys, threads=8):
        self.c, self.keys = c, keys
        self.total = START * sum(len(k) for k in keys)
        self.stopping = threading.Event()
        self.committed = 0
        self.failures = []        # transfers with_transaction gave up on
        self.snapshots = []       # totals the reader saw
        self.unrepeatable = []    # two reads of one snapshot transaction that differed
        self.mu = threading.Lock()
        self.threads = [threading.Thread(target=self.transfer, args=(i,))
                        for i in range(threads)]
        self.threads.append(threading.Thread(target=self.read))
        for t in self.threads:
            t.start()

    def client(self):
        return self.c.router_client(socketTimeoutMS=30000, serverSelectionTimeoutMS=30000)

    def transfer(self, seed):
        rnd = random.Random(seed)
        client = self.client()
        acct = client.bank.acct
        try:
            while not self.stopping.is_set():
                # The first statement goes to shard0, so shard0 coordinates every commit; the
                # others are on the other shards (one each, or two on a 3-shard cluster).
                a = rnd.choice(self.keys[0])
                others = [rnd.choice(k) for k in self.keys[1:]]
                amount = rnd.randint(-20, 20)

                def body(s):
                    acct.update_one({"x": a}, {"$inc": {"bal": -amount * len(others)}},
                                    session=s)
                    for b in others:
                        acct.update_one({"x": b}, {"$inc": {"bal": amount}}, session=s)
                try:
                    with client.start_session() as s:
                        s.with_transaction(body)
                    with self.mu:
                        self.committed += 1
                except PyMongoError as e:
                    with self.mu:
                        self.failures.append(e)
        finally:
            client.close()

    def read(self):
        client = self.client()
        acct = client.bank.acct
        try:
            while not self.stopping.is_set():
                try:
                    with client.start_session() as s:
                        with s.start_transaction(read_concern=ReadConcern("snapshot")):
                            first = {d["_id"]: d["bal"] for d in acct.find({}, session=s)}
                            again = {d["_id"]: d["bal"] for d in acct.find({}, session=s)}
                except PyMongoError:
                    continue  # a shard is down or restarting: try again
                with self.mu:
                    self.snapshots.append(sum(first.values()))
                    if first != again:
                        self.unrepeatable.append((first, again))
        finally:
            client.close()

    def progress(self, n, what, timeout=60):
        """Wait until n more transfers have committed."""
        with self.mu:
            goal = self.committed + n
        wait_until(lambda: self.committed >= goal, timeout=timeout, what=what)

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(120)
        assert not any(t.is_alive() for t in self.threads), "a load thread hangs"


def crash_coordinator_before(c, phase):
    """Arm kill -9 of shard0 before 'phase' of its next commit, wait for it, restart it."""
    fail_point(c.shard_client(0), "crashBeforeCoordinatorPhase", "alwaysOn",
               {"type": "TransactionCoordinator", "phase": phase})
    c.shards[0].proc.wait(60)
    c.restart_shard(0)


def kill_participant_during(c, shard, phase):
    """Hold shard0's coordinators before 'phase', kill -9 participant 'shard' and restart it,
    then let the coordinators go on."""
    coord = c.shard_client(0)
    data = {"type": "TransactionCoordinator", "phase": phase}
    entered = fail_point(coord, "hangBeforeCoordinatorPhase", "alwaysOn", data)["count"]
    try:
        wait_until(lambda: fail_point(coord, "hangBeforeCoordinatorPhase", "alwaysOn",
                                      data)["count"] > entered,
                   timeout=60, what="a coordinator at " + phase)
        c.shards[shard].kill()
        c.restart_shard(shard)
    finally:
        fail_point(coord, "hangBeforeCoordinatorPhase", "off")


def settled(c, nshards):
    """Nothing prepared or coordinating is left on any shard."""
    for i in range(nshards):
        s = c.shard_client(i)
        if s.admin.command("serverStatus")["transactions"]["currentPrepared"] != 0:
            return False
        if s.config.transaction_coordinators.count_documents({}) != 0:
            return False
    return True


def check_end_state(c, load, keys, nshards):
    assert load.committed > 0
    # with_transaction retries transient errors and unknown commit results for two minutes:
    # no transfer should have been given up.
    assert not load.failures, load.failures[:3]
    try:
        wait_until(lambda: settled(c, nshards), timeout=60,
                   what="no prepared transaction or coordinator document left")
    except TimeoutError:
        state = [(c.shard_client(i).admin.command("serverStatus")["transactions"],
                  list(c.shard_client(i).config.transaction_coordinators.find()))
                 for i in range(nshards)]
        raise AssertionError(state)
    r = c.router_client()
    balances = {d["_id"]: d["bal"] for d in r.bank.acct.find()}
    assert len(balances) == sum(len(k) for k in keys)
    assert sum(balances.values()) == load.total
    # Each shard holds exactly its accounts, and their sum is the router's.
    direct = 0
    for i in range(nshards):
        docs = list(c.shard_client(i).bank.acct.find())
        assert sorted(d["_id"] for d in docs) == keys[i]
        direct += sum(d["bal"] for d in docs)
    assert direct == load.total
    # The snapshot reader saw the total every time, and the same data twice per transaction.
    assert load.snapshots, "the snapshot reader never got through"
    assert set(load.snapshots) == {load.total}, set(load.snapshots)
    assert not load.unrepeatable, load.unrepeatable[:1]


def test_bank_transfers_survive_kill9_at_every_two_phase_commit_step():
    c = ShaleCluster(shards=2).start()
    load, ok = None, False
    try:
        keys = setup_accounts(c, 2)
        load = Load(c, keys)
        load.progress(20, "transfers before any crash")
        for phase in PHASES:
            crash_coordinator_before(c, phase)
            load.progress(10, "transfers after the coordinator died before " + phase)
        for phase in ("waitingForVotes", "waitingForDecisionAcks"):
            kill_participant_during(c, 1, phase)
            load.progress(10, "transfers after the participant died during " + phase)
        load.stop()
        print("two shards: %d transfers committed, %d snapshot reads" %
              (load.committed, len(load.snapshots)))
        check_end_state(c, load, keys, 2)
        ok = True
    finally:
        if load is not None:
            load.stopping.set()
        c.cleanup(keep_logs_prefix=None if ok else "test_transactions_bank-2")


def test_bank_transfers_on_three_shards_survive_a_coordinator_and_a_participant_kill():
    c = ShaleCluster(shards=3).start()
    load, ok = None, False
    try:
        keys = setup_accounts(c, 3)
        load = Load(c, keys)
        load.progress(10, "transfers before any crash")
        crash_coordinator_before(c, "writingDecision")
        load.progress(10, "transfers after the coordinator died")
        kill_participant_during(c, 2, "waitingForDecisionAcks")
        load.progress(10, "transfers after the participant died")
        load.stop()
        print("three shards: %d transfers committed, %d snapshot reads" %
              (load.committed, len(load.snapshots)))
        check_end_state(c, load, keys, 3)
        ok = True
    finally:
        if load is not None:
            load.stopping.set()
        c.cleanup(keep_logs_prefix=None if ok else "test_transactions_bank-3")
