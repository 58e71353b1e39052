"""Prepared transactions across a shard failover (issue 18, repl18g, repl18h): a secondary
applying a prepare entry holds the transaction prepared, and owns it on step-up; a restart of
every member brings it back from the oplog; a step-down interrupts the running coordinator at
once; a rollback prepares again what was prepared at its common point. Cross-shard
transactions through the router (pymongo)
between a 3-member shard set "rs0" (fast elections) and a single-member shard "one"; the
coordinator held by hangBeforeCoordinatorPhase while a primary of rs0 is killed -9."""

import pymongo
import pytest
from pymongo.errors import PyMongoError

from shale_fixtures import (Background, fail_point, logged, set_and_single_cluster,
                            set_primary, wait_until)

def direct(node, **kw):
    return node.client(directConnection=True, **kw)


@pytest.fixture(scope="module")
def cluster(request):
    with set_and_single_cluster(request, "pf", "prepfail") as c:
        client = c["router"].client()
        majority = pymongo.WriteConcern(w="majority")
        client.admin.command("enableSharding", "pa", primaryShard="one")
        client.admin.command("enableSharding", "pb", primaryShard="rs0")
        client.pa.get_collection("c", write_concern=majority).insert_one({"_id": "seed"})
        client.pb.get_collection("c", write_concern=majority).insert_one({"_id": "seed"})
        yield c


def hold_coordinator(node, phase):
    """Hold the 2PC coordinator of 'node' before 'phase'; returns wait() for it to get there."""
    data = {"type": "TransactionCoordinator", "phase": phase}
    entered = fail_point(direct(node), "hangBeforeCoordinatorPhase", "alwaysOn", data)["count"]

    def wait():
        wait_until(lambda: fail_point(direct(node), "hangBeforeCoordinatorPhase", "alwaysOn",
                                      data)["count"] > entered, 30, "the coordinator at " + phase)
    return wait


def release_coordinator(node):
    fail_point(direct(node), "hangBeforeCoordinatorPhase", "off")


def start_commit(cluster, first, second, doc_id):
    """A transaction through the router writing doc_id to first.c then second.c (the first
    write's shard coordinates), its commit started in the background."""
    client = cluster["router"].client(retryWrites=False)
    # Outside a transaction the router follows a changed primary (a statement of a
    # transaction fails instead): let it learn rs0's current one first.
    for db in (first, second):
        client[db].c.find_one({"_id": "seed"})
    session = client.start_session()
    session.start_transaction(write_concern=pymongo.WriteConcern(w="majority"))
    client[first].c.insert_one({"_id": doc_id}, session=session)
    client[second].c.insert_one({"_id": doc_id}, session=session)
    return Background(session.commit_transaction, catch=PyMongoError)


def members_with(nodes, db, doc_id):
    """How many times each live member of 'nodes' holds doc_id in db.c (None: unreadable)."""
    out = []
    for n in nodes:
        if n.proc is None or n.proc.poll() is not None:
            continue
        try:
            c = direct(n, readPreference="secondaryPreferred")
            out.append(c[db].c.count_documents({"_id": doc_id}, maxTimeMS=500))
        except PyMongoError:
            out.append(None)
    return out


def committed_everywhere(cluster, doc_id):
    return (members_with(cluster["rs"], "pb", doc_id) == [1, 1, 1] and
            members_with([cluster["one"]], "pa", doc_id) == [1])


def rejoin(victim):
    victim.start()
    wait_until(lambda: direct(victim).admin.command("hello").get("secondary") is True, 60,
               "the killed member back as a secondary")


def test_participant_primary_killed_while_prepared(cluster):
    """The participant shard's primary dies after its prepare, before the decision: the new
    primary holds the prepared transaction and commits it when the coordinator asks."""
    one = cluster["one"]
    reached = hold_coordinator(one, "writingDecision")
    commit = start_commit(cluster, "pa", "pb", "t1")
    try:
        reached()
        victim = set_primary(cluster["rs"])
        # the prepared write is invisible (a prepare conflict) on every member of rs0
        assert members_with(cluster["rs"], "pb", "t1") == [None, None, None]
        victim.kill()
        new = set_primary([n for n in cluster["rs"] if n is not victim], 30)
        status = direct(new).admin.command("serverStatus")["transactions"]
        assert status["currentPrepared"] == 1, status
    finally:
        release_coordinator(one)
    commit.join(60)
    assert commit.done and commit.error is None, commit.error
    rejoin(victim)
    wait_until(lambda: committed_everywhere(cluster, "t1"), 30,
               "the transaction committed once on every member")
    assert cluster["router"].client().pb.c.count_documents({"_id": "t1"}) == 1


def test_coordinator_primary_killed_after_decision(cluster):
    """The coordinator shard's primary dies with the commit decision durable: the new primary
    resumes the coordinator and commits its own participant, which it holds prepared."""
    victim = set_primary(cluster["rs"])
    reached = hold_coordinator(victim, "waitingForDecisionAcks")
    commit = start_commit(cluster, "pb", "pa", "t2")
    reached()
    victim.kill()
    new = set_primary([n for n in cluster["rs"] if n is not victim], 30)
    wait_until(lambda: direct(new).config.transaction_coordinators.count_documents({}) == 0, 30,
               "the new primary to finish the resumed coordinator")
    commit.join(60)
    rejoin(victim)
    wait_until(lambda: committed_everywhere(cluster, "t2"), 30,
               "the transaction committed once on every member")
    assert cluster["router"].client().pa.c.count_documents({"_id": "t2"}) == 1


def test_every_member_restarted_while_prepared(cluster):
    """kill -9 of every member of the participant shard while its transaction is prepared:
    the members rebuild it from their oplogs, and the coordinator's commit finds it."""
    one = cluster["one"]
    for n in cluster["rs"]:
        # a stable checkpoint to recover from (as the periodic one gives a longer-lived set)
        direct(n).admin.command("fsync")
    reached = hold_coordinator(one, "writingDecision")
    commit = start_commit(cluster, "pa", "pb", "t3")
    try:
        reached()
        for n in cluster["rs"]:
            n.kill()
        for n in cluster["rs"]:
            n.start(wait=False)
        for n in cluster["rs"]:
            n.wait_ready()
        new = set_primary(cluster["rs"], 30)
        wait_until(lambda: direct(new).admin.command("serverStatus")["transactions"][
            "currentPrepared"] == 1, 10, "the prepared transaction on the new primary")
    finally:
        release_coordinator(one)
    commit.join(60)
    assert commit.done and commit.error is None, commit.error
    wait_until(lambda: committed_everywhere(cluster, "t3"), 30,
               "the transaction committed once on every member")


def test_step_down_interrupts_the_coordinator(cluster):
    """replSetStepDown of the coordinator shard's primary while its coordinator is held after
    the decision: the coordinator stops at once (InterruptedDueToReplStateChange, its fail
    point still on), the new primary resumes it from its document and commits everywhere;
    the stepped-down member commits its own prepared transaction from the decision entry; the
    client's commit succeeds (the router sent coordinateCommitTransaction again to the new
    primary)."""
    victim = set_primary(cluster["rs"])
    reached = hold_coordinator(victim, "waitingForDecisionAcks")
    try:
        commit = start_commit(cluster, "pb", "pa", "t4")
        reached()
        try:
            direct(victim).admin.command("replSetStepDown", 10, secondaryCatchUpPeriodSecs=5)
        except PyMongoError:
            pass  # the step-down may close the connection
        wait_until(lambda: logged(victim, 4170005, code=11602), 10,
                   "the coordinator interrupted by the step-down")
    finally:
        release_coordinator(victim)
    new = set_primary([n for n in cluster["rs"] if n is not victim], 30)
    wait_until(lambda: direct(new).config.transaction_coordinators.count_documents({}) == 0, 30,
               "the new primary to finish the resumed coordinator")
    commit.join(60)
    # the client's commit waited for the coordinator, which the step-down interrupted
    # (InterruptedDueToReplStateChange): the router sends the decision again to the new
    # primary, as mongos retries it, and the client gets the commit's answer
    assert commit.done and commit.error is None, commit.error
    wait_until(lambda: committed_everywhere(cluster, "t4"), 30,
               "the transaction committed once on every member")


def test_rolled_back_prepare_is_aborted(cluster):
    """The participant's primary writes its prepare entry, which no secondary fetches, and
    dies: the coordinator aborts (the new primary never heard of the transaction). The old
    primary comes back with the transaction prepared from its oplog; its rollback of the
    prepare entry aborts it, so its documents are not held on that member."""
    victim = set_primary(cluster["rs"])
    others = [n for n in cluster["rs"] if n is not victim]
    for s in others:
        fail_point(direct(s), "stopReplProducer", "alwaysOn")
    try:
        commit = start_commit(cluster, "pa", "pb", "t5")
        wait_until(lambda: direct(victim).admin.command("serverStatus")["transactions"][
            "currentPrepared"] == 1, 30, "the prepare on the participant's primary")
        # the prepare entry journaled (it waits for a majority that never comes): the restart
        # finds it and prepares the transaction again, else there is nothing to roll back
        direct(victim).admin.command("fsync")
        victim.kill()
    finally:
        for s in others:
            fail_point(direct(s), "stopReplProducer", "off")
    set_primary(others, 30)
    commit.join(90)
    assert not commit.done  # aborted: NoSuchTransaction from the new primary
    rejoin(victim)
    wait_until(lambda: logged(victim, 5100311), 30, "the rollback to abort the prepare")
    status = direct(victim).admin.command("serverStatus")["transactions"]
    assert status["currentPrepared"] == 0, status
    # nothing of it anywhere, and readable (no prepare conflict) on every member
    wait_until(lambda: members_with(cluster["rs"], "pb", "t5") == [0, 0, 0], 30,
               "the aborted write gone from every member")
    assert members_with([cluster["one"]], "pa", "t5") == [0]


def test_prepared_at_the_common_point_is_prepared_again(cluster):
    """The participant's primary holds a transaction prepared on every member (the
    coordinator held before its decision), then takes a j:true write no secondary fetches and
    dies. Back as a secondary it rolls that write back to a common point after the prepare:
    the rollback takes the prepared transaction out of storage first and prepares it again
    after (as MongoDB reconstructs it), and the member commits it from the decision entry.

    The set's initiator plays the killed primary: another member's own "initial sync done"
    flag is a local write that kill -9 can lose (the open local-write hole), and it would then
    resync instead of rolling back (its initial sync aborts the prepared transaction)."""
    one = cluster["one"]
    victim = cluster["rs"][0]

    def initiator_primary():
        if set_primary(cluster["rs"]) is victim:
            return True
        try:
            direct(victim).admin.command("replSetStepUp")
        except PyMongoError:
            pass  # not caught up yet, or an election in progress
        return False
    wait_until(initiator_primary, 30, "the set's initiator as primary")
    others = [n for n in cluster["rs"] if n is not victim]
    reached = hold_coordinator(one, "writingDecision")
    commit = start_commit(cluster, "pa", "pb", "t6")
    try:
        reached()
        wait_until(lambda: all(direct(n).admin.command("serverStatus")["transactions"][
            "currentPrepared"] == 1 for n in cluster["rs"]), 30, "the prepare on every member")
        for s in others:
            fail_point(direct(s), "stopReplProducer", "alwaysOn")
        try:
            journaled = pymongo.WriteConcern(w=1, j=True)
            direct(victim).pb.get_collection("c", write_concern=journaled).insert_one(
                {"_id": "lost6"})
            victim.kill()
        finally:
            for s in others:
                fail_point(direct(s), "stopReplProducer", "off")
        set_primary(others, 30)
    finally:
        release_coordinator(one)
    commit.join(60)
    assert commit.done and commit.error is None, commit.error
    rejoin(victim)
    # taken out of storage for the rollback, prepared again after it
    wait_until(lambda: logged(victim, 5100312), 30, "the rollback to take the prepare out")
    wait_until(lambda: committed_everywhere(cluster, "t6"), 30,
               "the transaction committed once on every member")
    assert members_with(cluster["rs"], "pb", "lost6") == [0, 0, 0]
