"""The two-phase-commit coordinator on a shard (issue 15 item 4) on a 2-shard cluster:
coordinateCommitTransaction sent to a shard directly, as a router does, over transactions
whose statements were sent to each shard directly; the decision paths; and kill -9 of the
coordinator shard before each phase (the crashBeforeCoordinatorPhase fail point), after which
the transaction is committed everywhere or aborted everywhere."""
import uuid

import pytest
from bson import Binary, Int64
from bson.binary import UUID_SUBTYPE
from pymongo.errors import PyMongoError

import wire_util
from shale_fixtures import ShaleCluster, fail_point, module_cluster, wait_until

PHASES = ["writingParticipantList", "waitingForVotes", "writingDecision",
          "waitingForDecisionAcks"]


@pytest.fixture(scope="module")
def cl(request):
    with module_cluster(request, shards=2) as c:
        for i in range(2):
            c.shard_client(i).test.tc.insert_one({"_id": "seed"})
        yield c


class Raw:
    """Commands with an explicit session on one connection, as a router sends them."""

    def __init__(self, node, lsid):
        self.sock = wire_util.connect(node.port)
        self.lsid = lsid

    def __call__(self, db, cmd, txn, start=False, **extra):
        c = dict(cmd)
        c.update(lsid=self.lsid, txnNumber=Int64(txn), autocommit=False)
        if start:
            c["startTransaction"] = True
        c.update(extra)
        c["$db"] = db
        return wire_util.command(self.sock, c)

    def close(self):
        self.sock.close()


def new_lsid():
    return {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}


def write_on(cl, shard, lsid, txn, doc_id):
    raw = Raw(cl.shards[shard], lsid)
    r = raw("test", {"insert": "tc", "documents": [{"_id": doc_id}]}, txn, start=True)
    raw.close()
    assert r["ok"] == 1, r


def coordinate(cl, shard, lsid, txn, participants, timeout=60.0):
    raw = Raw(cl.shards[shard], lsid)
    raw.sock.settimeout(timeout)
    try:
        return raw("admin", {"coordinateCommitTransaction": 1,
                             "participants": [{"shardId": cl.shard_name(p)}
                                              for p in participants]}, txn)
    finally:
        raw.close()


def visible(cl, shard, doc_id):
    """Whether doc_id is committed on 'shard' (None while a prepared write hides it)."""
    try:
        return cl.shard_client(shard).test.tc.find_one({"_id": doc_id}, max_time_ms=300) \
            is not None
    except PyMongoError:
        return None


def coordinator_docs(cl, shard):
    return list(cl.shard_client(shard).config.transaction_coordinators.find())


def coordinators_done(cl, shards=(0,)):
    """The coordinator answers once its decision is durable (as MongoDB's) and then delivers
    it: wait until it has finished and removed its document."""
    wait_until(lambda: all(coordinator_docs(cl, i) == [] for i in shards),
               what="the coordinator to deliver its decision and finish")


def test_commit_across_two_shards(cl):
    lsid = new_lsid()
    write_on(cl, 0, lsid, 1, "c0")
    write_on(cl, 1, lsid, 1, "c1")
    assert not visible(cl, 0, "c0") and not visible(cl, 1, "c1")
    r = coordinate(cl, 0, lsid, 1, [0, 1])
    assert r["ok"] == 1, r
    coordinators_done(cl)
    assert visible(cl, 0, "c0") and visible(cl, 1, "c1")
    # A retry of the commit, and a join with no participants (the recoveryToken path),
    # answer the decision.
    assert coordinate(cl, 0, lsid, 1, [0, 1])["ok"] == 1
    assert coordinate(cl, 0, lsid, 1, [])["ok"] == 1


def test_vote_to_abort_aborts_everywhere(cl):
    lsid = new_lsid()
    write_on(cl, 0, lsid, 1, "a0")
    # shard1 never saw the transaction: it votes NoSuchTransaction.
    r = coordinate(cl, 0, lsid, 1, [0, 1])
    assert r["ok"] == 0 and r["code"] == 251, r
    assert r["codeName"] == "NoSuchTransaction"
    assert r["errmsg"].startswith("Transaction was aborted :: caused by :: "), r
    coordinators_done(cl)
    assert not visible(cl, 0, "a0")
    # The transaction is gone on the coordinator's own shard too.
    raw = Raw(cl.shards[0], lsid)
    assert raw("admin", {"commitTransaction": 1}, 1)["code"] == 251
    raw.close()


def test_join_without_coordinator_is_no_such_transaction(cl):
    r = coordinate(cl, 0, new_lsid(), 3, [])
    assert r["ok"] == 0 and r["code"] == 251, r


def test_duplicate_participants_are_refused(cl):
    r = coordinate(cl, 0, new_lsid(), 1, [0, 1, 0])
    assert r["ok"] == 0 and r["code"] == 51162, r
    assert r["errmsg"] == "Participant list contains duplicate shard shard0"


def test_coordinator_needs_a_session(cl):
    c = cl.shard_client(0)
    with pytest.raises(PyMongoError):
        c.admin.command({"coordinateCommitTransaction": 1, "participants": []})


def test_current_op_shows_a_running_coordinator(cl):
    lsid = new_lsid()
    write_on(cl, 0, lsid, 1, "o0")
    write_on(cl, 1, lsid, 1, "o1")
    admin = cl.shard_client(0).admin
    fail_point(cl.shard_client(0), "hangBeforeCoordinatorPhase", "alwaysOn",
               {"type": "TransactionCoordinator", "phase": "waitingForVotes"})
    from shale_fixtures import Background
    t = Background(lambda: coordinate(cl, 0, lsid, 1, [0, 1]))
    try:
        def running():
            ops = admin.command("currentOp")["inprog"]
            return [o for o in ops if o.get("desc") == "TransactionCoordinator"]
        # It shows from its first phase on; the fail point holds it at waitingForVotes.
        wait_until(lambda: [o for o in running() if o.get("currentPhase") == "waitingForVotes"],
                   what="the coordinator in currentOp, waiting for votes")
        op = running()[0]
        assert op["currentPhase"] == "waitingForVotes"
        assert op["_id"]["txnNumber"] == 1
        # Its participant list is durable before the votes are asked for.
        assert [d["participants"] for d in coordinator_docs(cl, 0)] == [["shard0", "shard1"]]
    finally:
        fail_point(cl.shard_client(0), "hangBeforeCoordinatorPhase", "off")
    t.join(60)
    assert t.result["ok"] == 1, t.result
    assert visible(cl, 0, "o0") and visible(cl, 1, "o1")


@pytest.mark.parametrize("phase,committed", [
    ("writingParticipantList", False),  # nothing durable: the transaction is lost
    ("waitingForVotes", False),         # shard0's unprepared part died: prepare again -> abort
    ("writingDecision", True),          # both prepared (kept across the crash): commit
    ("waitingForDecisionAcks", True),   # the decision is durable: delivered after restart
])
def test_kill9_of_the_coordinator_before_each_phase(phase, committed, tmp_path_factory):
    c = ShaleCluster(shards=2).start()
    try:
        for i in range(2):
            c.shard_client(i).test.tc.insert_one({"_id": "seed"})
        lsid = new_lsid()
        write_on(c, 0, lsid, 1, "k0")
        write_on(c, 1, lsid, 1, "k1")
        fail_point(c.shard_client(0), "crashBeforeCoordinatorPhase", "alwaysOn",
                   {"type": "TransactionCoordinator", "phase": phase})
        try:
            r = coordinate(c, 0, lsid, 1, [0, 1], timeout=30)
        except (OSError, PyMongoError, EOFError):
            r = None
        # The coordinator answers once its decision is durable, so a crash before the
        # delivery may come after the answer (ok); before that phase there is no answer.
        assert r is None or (phase == "waitingForDecisionAcks" and r["ok"] == 1), r
        c.shards[0].proc.wait(30)
        c.restart_shard(0)
        # The restarted coordinator finishes what its document says; then both shards agree.
        wait_until(lambda: coordinator_docs(c, 0) == [], timeout=60,
                   what="the coordinator document to go")
        wait_until(lambda: visible(c, 0, "k0") is not None and visible(c, 1, "k1") is not None,
                   timeout=60, what="no prepared transaction left")
        if not committed:
            # shard1's transaction was never prepared: abort it as the router would.
            raw = Raw(c.shards[1], lsid)
            raw("admin", {"abortTransaction": 1}, 1)
            raw.close()
        assert visible(c, 0, "k0") == committed
        assert visible(c, 1, "k1") == committed
        # A join with no participants (the recoveryToken path) after the restart asks the
        # local participant; a retry with the list answers the same outcome too.
        r = coordinate(c, 0, lsid, 1, [])
        assert (r["ok"] == 1) if committed else (r["code"] == 251), r
        r = coordinate(c, 0, lsid, 1, [0, 1])
        if committed:
            assert r["ok"] == 1, r
        else:
            assert r["ok"] == 0 and r["code"] == 251, r
        assert visible(c, 0, "k0") == committed and visible(c, 1, "k1") == committed
    finally:
        c.cleanup()


# ------------------------------------------------------------- through the router (txn-router)

def sharded_accounts(cl, ns_db="bank"):
    r = cl.router_client()
    r.admin.command("enableSharding", ns_db, primaryShard="shard0")
    r.admin.command("shardCollection", ns_db + ".acct", key={"x": 1})
    r.admin.command("split", ns_db + ".acct", middle={"x": 100})
    r.admin.command("moveChunk", ns_db + ".acct", find={"x": 150}, to="shard1")
    r[ns_db].acct.insert_many([{"_id": "a", "x": 1, "bal": 100}, {"_id": "b", "x": 200, "bal": 0}])
    return r


def test_with_transaction_through_the_router_commits_on_both_shards(cl):
    r = sharded_accounts(cl)
    acct = r.bank.acct

    def transfer(s):
        acct.update_one({"x": 1}, {"$inc": {"bal": -30}}, session=s)
        acct.update_one({"x": 200}, {"$inc": {"bal": 30}}, session=s)

    prepared = [cl.shard_client(i).admin.command("serverStatus")["transactions"]
                ["totalPreparedThenCommitted"] for i in range(2)]
    with r.start_session() as s:
        s.with_transaction(transfer)
    assert {d["_id"]: d["bal"] for d in acct.find()} == {"a": 70, "b": 30}
    # Each shard holds its half, committed; no coordinator document is left.
    coordinators_done(cl, (0, 1))
    assert cl.shard_client(0).bank.acct.find_one({"_id": "a"})["bal"] == 70
    assert cl.shard_client(1).bank.acct.find_one({"_id": "b"})["bal"] == 30
    # It went through two-phase commit: each participant committed a prepared transaction.
    for i in range(2):
        st = cl.shard_client(i).admin.command("serverStatus")["transactions"]
        assert st["totalPreparedThenCommitted"] == prepared[i] + 1, st


def test_abort_through_the_router_leaves_no_change(cl):
    r = cl.router_client()
    acct = r.bank.acct
    before = {d["_id"]: d["bal"] for d in acct.find()}
    with r.start_session() as s:
        s.start_transaction()
        acct.update_one({"x": 1}, {"$inc": {"bal": -5}}, session=s)
        acct.update_one({"x": 200}, {"$inc": {"bal": 5}}, session=s)
        s.abort_transaction()
    assert {d["_id"]: d["bal"] for d in acct.find()} == before


def test_kill9_of_the_coordinator_under_the_router_then_commit_retry():
    """The router's commit meets a coordinator that dies after both participants prepared:
    the driver sees UnknownTransactionCommitResult; after the restart the coordinator finishes
    from its document and the driver's commit retry answers committed."""
    c = ShaleCluster(shards=2).start()
    try:
        r = sharded_accounts(c)
        acct = r.bank.acct
        fail_point(c.shard_client(0), "crashBeforeCoordinatorPhase", "alwaysOn",
                   {"type": "TransactionCoordinator", "phase": "writingDecision"})
        with r.start_session() as s:
            s.start_transaction()
            acct.update_one({"x": 1}, {"$inc": {"bal": -30}}, session=s)
            acct.update_one({"x": 200}, {"$inc": {"bal": 30}}, session=s)
            with pytest.raises(PyMongoError) as e:
                s.commit_transaction()
            assert e.value.has_error_label("UnknownTransactionCommitResult"), e.value
            c.shards[0].proc.wait(30)
            c.restart_shard(0)
            wait_until(lambda: coordinator_docs(c, 0) == [], timeout=60,
                       what="the coordinator document to go")
            s.commit_transaction()
        assert {d["_id"]: d["bal"] for d in acct.find()} == {"a": 70, "b": 30}
    finally:
        c.cleanup()


def test_concurrent_transfers_across_shards_conserve_the_total(cl):
    """Many two-phase commits at once (several coordinators at a time): every transfer
    commits or aborts whole, so the total never changes. Write conflicts between transfers
    abort them; with_transaction retries those the router labels TransientTransactionError
    (today the router passes a statement's WriteConflict on as a writeError without the label,
    a txn-router matter, so such a transfer ends with that error here)."""
    import random
    import threading
    from pymongo.errors import PyMongoError as Failure
    r = cl.router_client()
    r.admin.command("enableSharding", "bank2", primaryShard="shard0")
    r.admin.command("shardCollection", "bank2.acct", key={"x": 1})
    r.admin.command("split", "bank2.acct", middle={"x": 100})
    r.admin.command("moveChunk", "bank2.acct", find={"x": 150}, to="shard1")
    keys = [1, 2, 3, 101, 102, 103]
    r.bank2.acct.insert_many([{"_id": k, "x": k, "bal": 100} for k in keys])
    errors, committed = [], []

    def worker(seed):
        rnd = random.Random(seed)
        c = cl.router_client()
        acct = c.bank2.acct
        for _ in range(15):
            a, b = rnd.choice(keys[:3]), rnd.choice(keys[3:])
            if rnd.random() < 0.5:
                a, b = b, a
            amount = rnd.randint(1, 10)

            def transfer(s):
                acct.update_one({"x": a}, {"$inc": {"bal": -amount}}, session=s)
                acct.update_one({"x": b}, {"$inc": {"bal": amount}}, session=s)
            try:
                with c.start_session() as s:
                    s.with_transaction(transfer)
                committed.append(1)
            except Failure as e:
                errors.append(e)
        c.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads)
    assert all(getattr(e, "code", None) == 112 for e in errors), errors[:3]
    assert len(committed) + len(errors) == 60 and len(committed) > 0
    assert sum(d["bal"] for d in r.bank2.acct.find()) == 600
    coordinators_done(cl, (0, 1))


def test_commit_through_a_second_router_with_the_recovery_token(cl):
    """A router that never saw the transaction commits it from the recoveryToken: it asks the
    recovery shard (coordinateCommitTransaction without participants), which answers from its
    coordinator, its remembered decision or its local participant."""
    sharded = cl.router_client()
    if "bank" not in sharded.list_database_names():
        sharded_accounts(cl)
    second = cl.routers[1] if len(cl.routers) > 1 else cl.add_router()
    lsid = new_lsid()

    def run(router, txn, ops, commit, token=None):
        raw = Raw(router, lsid)
        try:
            replies = [raw("bank", op, txn, start=(k == 0)) for k, op in enumerate(ops)]
            for r in replies:
                assert r["ok"] == 1, r
            extra = {"recoveryToken": token} if token is not None else {}
            return replies, raw("admin", {commit: 1}, txn, **extra)
        finally:
            raw.close()

    moves = [{"update": "acct", "updates": [{"q": {"x": 1}, "u": {"$inc": {"bal": -1}}}]},
             {"update": "acct", "updates": [{"q": {"x": 200}, "u": {"$inc": {"bal": 1}}}]}]
    before = {d["_id"]: d["bal"] for d in sharded.bank.acct.find()}
    replies, done = run(cl.routers[0], 1, moves, "commitTransaction")
    assert done["ok"] == 1, done
    token = done.get("recoveryToken") or replies[-1]["recoveryToken"]
    assert token["recoveryShardId"] in ("shard0", "shard1")
    # The second router has only the token.
    raw = Raw(second, lsid)
    r = raw("admin", {"commitTransaction": 1, "recoveryToken": token}, 1)
    raw.close()
    assert r["ok"] == 1, r
    after = {d["_id"]: d["bal"] for d in sharded.bank.acct.find()}
    assert after == {"a": before["a"] - 1, "b": before["b"] + 1}
    # An aborted transaction is reported aborted through the second router.
    replies, done = run(cl.routers[0], 2, moves, "abortTransaction")
    assert done["ok"] == 1, done
    raw = Raw(second, lsid)
    r = raw("admin", {"commitTransaction": 1, "recoveryToken": token}, 2)
    raw.close()
    assert r["ok"] == 0 and r["code"] == 251, r
    assert {d["_id"]: d["bal"] for d in sharded.bank.acct.find()} == after


@pytest.mark.parametrize("phase,committed", [
    ("waitingForVotes", False),         # shard1 dies unprepared: it votes NoSuchTransaction
    ("waitingForDecisionAcks", True),   # shard1 dies prepared: re-prepared, then committed
])
def test_kill9_of_a_participant_during_two_phase_commit(phase, committed):
    c = ShaleCluster(shards=2).start()
    try:
        for i in range(2):
            c.shard_client(i).test.tc.insert_one({"_id": "seed"})
        lsid = new_lsid()
        write_on(c, 0, lsid, 1, "p0")
        write_on(c, 1, lsid, 1, "p1")
        from shale_fixtures import Background
        coord = c.shard_client(0)
        entered = fail_point(coord, "hangBeforeCoordinatorPhase", "alwaysOn",
                             {"type": "TransactionCoordinator", "phase": phase})["count"]
        t = Background(lambda: coordinate(c, 0, lsid, 1, [0, 1], timeout=120))
        wait_until(lambda: fail_point(coord, "hangBeforeCoordinatorPhase", "alwaysOn",
                                      {"type": "TransactionCoordinator", "phase": phase}
                                      )["count"] > entered, what="the coordinator at " + phase)
        c.shards[1].kill()
        c.restart_shard(1)
        fail_point(coord, "hangBeforeCoordinatorPhase", "off")
        t.join(120)
        assert t.done, t.error
        r = t.result
        assert (r["ok"] == 1) if committed else (r["ok"] == 0 and r["code"] == 251), r
        coordinators_done(c)
        assert visible(c, 0, "p0") == committed
        assert visible(c, 1, "p1") == committed
    finally:
        c.cleanup()


def test_recovery_join_aborts_a_local_transaction_in_progress(cl):
    """coordinateCommitTransaction without participants (a commit recovered through the
    recoveryToken) finds neither a coordinator nor a commit: it answers NoSuchTransaction and
    aborts the local transaction still in progress, so the original router cannot commit it
    afterwards."""
    lsid = new_lsid()
    write_on(cl, 0, lsid, 1, "r0")
    r = coordinate(cl, 0, lsid, 1, [])
    assert r["ok"] == 0 and r["code"] == 251, r
    raw = Raw(cl.shards[0], lsid)
    r = raw("admin", {"commitTransaction": 1}, 1)
    raw.close()
    assert r["ok"] == 0 and r["code"] == 251, r
    assert not visible(cl, 0, "r0")


def test_coordinator_deadline_aborts_when_a_participant_never_votes(cl):
    """A participant that keeps answering prepare with a retryable error counts as a vote to
    abort once transactionLifetimeLimitSeconds has passed (MongoDB's coordinator deadline)."""
    lsid = new_lsid()
    write_on(cl, 0, lsid, 1, "d0")
    write_on(cl, 1, lsid, 1, "d1")
    coord, other = cl.shard_client(0), cl.shard_client(1)
    coord.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=3)
    fail_point(other, "failCommand", "alwaysOn",
               {"failCommands": ["prepareTransaction"], "errorCode": 189,
                "failInternalCommands": True})
    try:
        r = coordinate(cl, 0, lsid, 1, [0, 1], timeout=30)
    finally:
        fail_point(other, "failCommand", "off")
        coord.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=60)
    assert r["ok"] == 0 and r["code"] == 251, r
    assert "exceeded deadline" in r["errmsg"], r
    coordinators_done(cl)
    assert not visible(cl, 0, "d0")
    # The participant that never voted learns the abort too.
    wait_until(lambda: other.admin.command("serverStatus")["transactions"]["currentOpen"] == 0,
               what="the abort to reach the silent participant")
    assert not visible(cl, 1, "d1")


def test_coordinator_deadline_counts_from_the_transaction_start(cl):
    """MongoDB's coordinator deadline ties to the transaction's lifetime (the coordinator is
    created at the transaction's first statement on its shard): a commit that arrives 2.5 s
    into a transaction with a 4 s limit, while a participant cannot prepare, aborts about
    1.5 s later -- not 4 s after the commit -- and releases the coordinator's prepared part."""
    import time
    coord, other = cl.shard_client(0), cl.shard_client(1)
    coord.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=4)
    lsid = new_lsid()
    try:
        started = time.monotonic()
        write_on(cl, 0, lsid, 1, "s0")
        write_on(cl, 1, lsid, 1, "s1")
        fail_point(other, "failCommand", "alwaysOn",
                   {"failCommands": ["prepareTransaction"], "errorCode": 189,
                    "failInternalCommands": True})
        time.sleep(2.5)  # the transaction's age is what is tested
        asked = time.monotonic()
        r = coordinate(cl, 0, lsid, 1, [0, 1], timeout=30)
        answered = time.monotonic()
    finally:
        fail_point(other, "failCommand", "off")
        coord.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=60)
    assert r["ok"] == 0 and r["code"] == 251 and "exceeded deadline" in r["errmsg"], r
    assert answered - started >= 3.9, (answered - started)
    assert answered - asked < 3.2, (answered - asked)
    coordinators_done(cl)
    assert coord.admin.command("serverStatus")["transactions"]["currentPrepared"] == 0
    assert not visible(cl, 0, "s0")
    # The released document takes a write at once.
    coord.test.tc.insert_one({"_id": "s0"})


def test_retried_commit_after_kill9_answers_committed():
    """A participant killed with kill -9 right after committing (before any checkpoint) still
    answers a retried commitTransaction -- the coordinator's delivery after its own restart,
    or a client's retry -- with ok: replay restores the session record's committed state."""
    from bson import Timestamp
    c = ShaleCluster(shards=2).start()
    try:
        for i in range(2):
            c.shard_client(i).test.tc.insert_one({"_id": "seed"})
        plain, two = new_lsid(), new_lsid()
        # An unprepared transaction committed directly on shard0 ...
        raw = Raw(c.shards[0], plain)
        assert raw("test", {"insert": "tc", "documents": [{"_id": "u0"}]}, 1,
                   start=True)["ok"] == 1
        assert raw("admin", {"commitTransaction": 1}, 1)["ok"] == 1
        raw.close()
        # ... and a prepared one committed through the coordinator.
        write_on(c, 0, two, 1, "t0")
        write_on(c, 1, two, 1, "t1")
        assert coordinate(c, 0, two, 1, [0, 1])["ok"] == 1
        c.shards[0].kill()
        c.restart_shard(0)
        assert visible(c, 0, "u0") and visible(c, 0, "t0")
        raw = Raw(c.shards[0], plain)
        r = raw("admin", {"commitTransaction": 1}, 1)
        assert r["ok"] == 1, r
        raw.close()
        raw = Raw(c.shards[0], two)
        r = raw("admin", {"commitTransaction": 1}, 1, commitTimestamp=Timestamp(1, 1))
        assert r["ok"] == 1, r
        # A statement of it is TransactionCommitted, as before the restart.
        r = raw("test", {"find": "tc"}, 1)
        assert r["ok"] == 0 and r["code"] == 256, r
        raw.close()
    finally:
        c.cleanup()
