"""Transactions and the rest of the cluster (issue 15 item 6) on a 2-shard cluster, through the
router with pymongo: a migration waits for a prepared transaction that wrote its collection and
then moves the committed data; an open transaction's statement inside the critical section
fails with a transient error instead of waiting; killSessions through the router ends the
router's and the shards' transaction state (docs/design/transactions.md)."""
import pytest
from pymongo.errors import OperationFailure

from shale_fixtures import Background, fail_point, logged, module_cluster, wait_until

DB = "txc"


@pytest.fixture(scope="module")
def cl(request):
    with module_cluster(request, shards=2) as c:
        r = c.router.client()
        r.admin.command("enableSharding", DB, primaryShard="shard0")
        yield c


def sharded(cl, name):
    """DB.name sharded on x: [MinKey, 0) and [0, 100) on shard0, [100, MaxKey) on shard1;
    documents x = -1, 50, 150 with bal 100."""
    r = cl.router.client()
    ns = "%s.%s" % (DB, name)
    r.admin.command("shardCollection", ns, key={"x": 1})
    r.admin.command("split", ns, middle={"x": 0})
    r.admin.command("split", ns, middle={"x": 100})
    r.admin.command("moveChunk", ns, find={"x": 100}, to="shard1")
    coll = r[DB][name]
    coll.insert_many([{"_id": x, "x": x, "bal": 100} for x in (-1, 50, 150)])
    return coll


def hold(client, name, data):
    """Switch fail point 'name' on with 'data'; returns wait() for the next time it is hit."""
    entered = fail_point(client, name, "alwaysOn", data)["count"]

    def wait(timeout=30.0):
        wait_until(lambda: fail_point(client, name, "alwaysOn", data)["count"] > entered,
                   timeout=timeout, what="fail point %s" % name)
    return wait


def move(cl, ns, x, to):
    return lambda: cl.router.client().admin.command("moveChunk", ns, find={"x": x}, to=to)


def commit_held_before_decision(cl, coll):
    """A transaction moving 10 from x=50 (shard0, its coordinator) to x=150 (shard1), its
    commit started in the background and held before the coordinator writes its decision.
    Returns (session, coordinator's client, wait() for both participants prepared, commit)."""
    s = coll.database.client.start_session()
    s.start_transaction()
    coll.update_one({"x": 50}, {"$inc": {"bal": -10}}, session=s)   # shard0: coordinator
    coll.update_one({"x": 150}, {"$inc": {"bal": 10}}, session=s)   # shard1
    coord = cl.shard_client(0)
    data = {"type": "TransactionCoordinator", "phase": "writingDecision"}
    wait = hold(coord, "hangBeforeCoordinatorPhase", data)
    return s, coord, wait, Background(s.commit_transaction)


def test_migration_waits_for_prepared_transaction(cl):
    coll = sharded(cl, "prep")
    ns = coll.full_name
    s, coord, wait, commit = commit_held_before_decision(cl, coll)
    mover = None
    try:
        wait()  # both participants are prepared
        mover = Background(move(cl, ns, 50, "shard1"))
        # The donor waits for the prepared transaction before it captures writes.
        wait_until(lambda: logged(cl.shards[0], 5100307, ns=ns, prepared=1),
                   what="the donor to wait for the prepared transaction")
        assert mover.is_alive() and commit.is_alive()
    finally:
        fail_point(coord, "hangBeforeCoordinatorPhase", "off")
    commit.join(60)
    assert commit.done, commit.error
    mover.join(60)
    assert mover.done, mover.error
    s.end_session()
    # The committed balances, the moved document on the recipient with its new balance.
    assert {d["_id"]: d["bal"] for d in coll.find()} == {-1: 100, 50: 90, 150: 110}
    assert cl.shard_client(1)[DB].prep.find_one({"_id": 50})["bal"] == 90
    assert cl.shard_client(1)[DB].prep.find_one({"_id": 150})["bal"] == 110
    wait_until(lambda: all(cl.shard_client(i).config.transaction_coordinators
                           .count_documents({}) == 0 for i in range(2)),
               what="the coordinator to deliver its decision and finish")


def test_migration_does_not_wait_for_prepared_transaction_outside_its_range(cl):
    """The critical section waits only for prepared transactions that wrote the migrating
    range (seeds: "a migration's critical section waits for prepared transactions in the
    range"): one that wrote another chunk of the collection after the capture began stays
    prepared while the chunk moves."""
    coll = sharded(cl, "rng")
    ns = coll.full_name
    c = coll.database.client
    donor = cl.shard_client(0)
    step = hold(donor, "moveChunkHangAtStep3", None)
    mover = Background(move(cl, ns, 50, "shard1"))
    commit = None
    coord = cl.shard_client(0)
    data = {"type": "TransactionCoordinator", "phase": "writingDecision"}
    try:
        step()  # capturing writes of [0, 100)
        s = c.start_session()
        s.start_transaction()
        coll.update_one({"x": -1}, {"$inc": {"bal": -10}}, session=s)   # shard0, [MinKey, 0)
        coll.update_one({"x": 150}, {"$inc": {"bal": 10}}, session=s)   # shard1
        wait = hold(coord, "hangBeforeCoordinatorPhase", data)
        commit = Background(s.commit_transaction)
        wait()  # both participants are prepared
        fail_point(donor, "moveChunkHangAtStep3", "off")
        mover.join(60)
        assert mover.done and mover.error is None, mover.error
        assert not commit.done  # still prepared when the chunk moved
    finally:
        fail_point(donor, "moveChunkHangAtStep3", "off")
        fail_point(coord, "hangBeforeCoordinatorPhase", "off")
    commit.join(60)
    assert commit.done and commit.error is None, commit.error
    s.end_session()
    assert {d["_id"]: d["bal"] for d in coll.find()} == {-1: 90, 50: 100, 150: 110}
    assert cl.shard_client(1)[DB].rng.find_one({"_id": 50})["bal"] == 100


def test_open_transaction_statement_in_migration_is_transient(cl):
    coll = sharded(cl, "open")
    ns = coll.full_name
    c = coll.database.client
    donor = cl.shard_client(0)
    donor.admin.command("setParameter", 1, migrationLockAcquisitionMaxWaitMS=30000)
    try:
        s = c.start_session()
        s.start_transaction()
        coll.update_one({"x": 50}, {"$inc": {"bal": -10}}, session=s)
        mover = Background(move(cl, ns, 50, "shard1"))
        wait_until(lambda: logged(cl.shards[0], 5100307, ns=ns, inProgress=1),
                   what="the donor to wait for the open transaction")
        # Its next statement does not wait for the critical section: StaleConfig, which the
        # router cannot retry inside the transaction -- a transient error, and the shard
        # aborts the transaction, so the migration goes on.
        with pytest.raises(OperationFailure) as e:
            coll.update_one({"x": -1}, {"$inc": {"bal": 10}}, session=s)
        assert e.value.has_error_label("TransientTransactionError"), e.value.details
        with pytest.raises(OperationFailure):
            s.commit_transaction()
        s.end_session()
        mover.join(60)
        assert mover.done, mover.error
    finally:
        donor.admin.command("setParameter", 1, migrationLockAcquisitionMaxWaitMS=500)
    assert {d["_id"]: d["bal"] for d in coll.find()} == {-1: 100, 50: 100, 150: 100}
    assert cl.shard_client(1)[DB].open.find_one({"_id": 50})["bal"] == 100


def test_migration_gives_up_on_an_idle_transaction_with_lock_timeout(cl):
    coll = sharded(cl, "idle")
    ns = coll.full_name
    c = coll.database.client
    s = c.start_session()
    s.start_transaction()
    coll.update_one({"x": 50}, {"$inc": {"bal": -10}}, session=s)
    stats = cl.shard_client(0).admin.command("serverStatus")["shardingStatistics"]
    timeouts = stats["countDonorMoveChunkLockTimeout"]
    with pytest.raises(OperationFailure) as e:
        move(cl, ns, 50, "shard1")()
    assert "LockTimeout" in str(e.value) or e.value.code == 24, e.value.details
    stats = cl.shard_client(0).admin.command("serverStatus")["shardingStatistics"]
    assert stats["countDonorMoveChunkLockTimeout"] == timeouts + 1
    # The transaction is untouched and commits; the chunk stayed.
    s.commit_transaction()
    s.end_session()
    assert coll.find_one({"x": 50})["bal"] == 90
    assert cl.shard_client(0)[DB].idle.find_one({"_id": 50})["bal"] == 90
    # Without a transaction in the way, the migration succeeds.
    move(cl, ns, 50, "shard1")()
    assert cl.shard_client(1)[DB].idle.find_one({"_id": 50})["bal"] == 90


def open_transactions(cl):
    return sum(cl.shard_client(i).admin.command("serverStatus")["transactions"]["currentOpen"]
               for i in range(2))


def test_kill_sessions_ends_the_transaction_on_router_and_shards(cl):
    coll = sharded(cl, "kill")
    c = coll.database.client
    s = c.start_session()
    s.start_transaction()
    assert coll.find_one({"x": -1}, session=s)["bal"] == 100      # shard0, read only
    coll.update_one({"x": 50}, {"$inc": {"bal": -10}}, session=s)  # shard0 writes
    assert open_transactions(cl) == 1
    c.admin.command("killSessions", [s.session_id])
    wait_until(lambda: open_transactions(cl) == 0, what="the shards to abort")
    # The next statement -- here to a shard the transaction has not reached yet, which
    # would otherwise start there afresh -- finds no transaction.
    with pytest.raises(OperationFailure) as e:
        coll.update_one({"x": 150}, {"$inc": {"bal": 10}}, session=s)
    assert e.value.code == 251, e.value.details
    assert e.value.has_error_label("TransientTransactionError")
    s.abort_transaction()
    assert open_transactions(cl) == 0
    assert {d["_id"]: d["bal"] for d in coll.find()} == {-1: 100, 50: 100, 150: 100}
    # The session goes on with a new transaction.
    s.start_transaction()
    coll.update_one({"x": 150}, {"$inc": {"bal": 10}}, session=s)
    s.commit_transaction()
    s.end_session()
    assert coll.find_one({"x": 150})["bal"] == 110


def test_kill_sessions_then_commit_is_no_such_transaction(cl):
    coll = sharded(cl, "killc")
    c = coll.database.client
    s = c.start_session()
    s.start_transaction()
    coll.update_one({"x": 50}, {"$inc": {"bal": -10}}, session=s)
    coll.update_one({"x": 150}, {"$inc": {"bal": 10}}, session=s)
    c.admin.command("killSessions", [s.session_id])
    with pytest.raises(OperationFailure) as e:
        s.commit_transaction()
    assert e.value.code == 251, e.value.details
    s.end_session()
    assert {d["_id"]: d["bal"] for d in coll.find()} == {-1: 100, 50: 100, 150: 100}


def unsharded(cl, name):
    coll = cl.router.client()[DB][name]
    coll.insert_one({"_id": 0, "n": 0})
    return coll


@pytest.mark.parametrize("ddl", ["drop", "createIndexes"])
def test_ddl_waits_for_an_open_transaction(cl, ddl):
    coll = unsharded(cl, "ddl_" + ddl)
    ns = coll.full_name
    c = coll.database.client
    s = c.start_session()
    s.start_transaction()
    coll.update_one({"_id": 0}, {"$inc": {"n": 1}}, session=s)
    if ddl == "drop":
        run = Background(coll.drop)
    else:
        run = Background(lambda: coll.create_index("n"))
    wait_until(lambda: logged(cl.shards[0], 5100307, ns=ns, writersOnly=False),
               what="the DDL to wait for the transaction")
    assert run.is_alive()
    # A transaction new to the collection does not queue behind the DDL for long: LockTimeout,
    # a transient error.
    with c.start_session() as s2:
        s2.start_transaction()
        with pytest.raises(OperationFailure) as e:
            coll.find_one({"_id": 0}, session=s2)
        assert e.value.code == 24, e.value.details
        assert e.value.has_error_label("TransientTransactionError")
    assert run.is_alive()
    s.commit_transaction()
    s.end_session()
    run.join(30)
    assert run.done, run.error
    if ddl == "drop":
        assert ns.split(".", 1)[1] not in coll.database.list_collection_names()
    else:
        assert "n_1" in coll.index_information()
        assert coll.find_one({"_id": 0})["n"] == 1


def test_create_indexes_that_exist_does_not_wait_for_a_prepared_transaction(cl):
    """createIndexes of indexes the collection already has changes nothing: as MongoDB's (under
    an intent lock) it answers at once while a transaction is prepared on the collection --
    which a migration's recipient relies on when it sends the donor's indexes."""
    coll = sharded(cl, "ixprep")
    coll.create_index("bal")
    s, coord, wait, commit = commit_held_before_decision(cl, coll)
    try:
        wait()  # both participants are prepared
        shard1 = cl.shard_client(1)[DB]
        reply = shard1.command("createIndexes", "ixprep", maxTimeMS=10000,
                               indexes=[{"key": {"x": 1}, "name": "x_1"},
                                        {"key": {"bal": 1}, "name": "bal_1"}])
        assert reply.get("note") == "all indexes already exist", reply
        assert reply["numIndexesBefore"] == reply["numIndexesAfter"] == 3, reply
        assert not commit.done  # still prepared
    finally:
        fail_point(coord, "hangBeforeCoordinatorPhase", "off")
    commit.join(60)
    assert commit.done and commit.error is None, commit.error
    s.end_session()
    assert {d["_id"]: d["bal"] for d in coll.find()} == {-1: 100, 50: 90, 150: 110}


def test_a_drop_past_its_max_time_ms_still_waits_for_the_transaction_then_drops(cl):
    """The caller's maxTimeMS ends the wait of the drop command, not the drop: as MongoDB 7.0's
    DDL coordinators, the primary shard's drop coordinator runs to its end. Its participant
    drop waits for the transaction that used the collection, the transaction commits, and
    then the collection is dropped."""
    coll = unsharded(cl, "ddl_maxtime")
    c = coll.database.client
    s = c.start_session()
    s.start_transaction()
    coll.update_one({"_id": 0}, {"$inc": {"n": 1}}, session=s)
    with pytest.raises(OperationFailure) as e:
        coll.database.command("drop", coll.name, maxTimeMS=300)
    assert e.value.code == 50, e.value.details
    assert coll.name in coll.database.list_collection_names()
    s.commit_transaction()
    s.end_session()
    wait_until(lambda: coll.name not in coll.database.list_collection_names(),
               what="the coordinator's drop to finish after the commit")
