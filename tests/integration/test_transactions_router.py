"""Multi-document transactions through the router (issue 15 item 3) on a 2-shard cluster, as a
user sees them with pymongo: with_transaction on one shard and on two (two-phase commit
through the coordinator shard), read-only transactions, abort, implicit abort with
TransientTransactionError, the recoveryToken in replies and a commit through a second router
with it (docs/design/transactions.md "Router")."""
import uuid

import pytest
from bson import Binary, Int64
from bson.binary import UUID_SUBTYPE
from pymongo.errors import OperationFailure
from pymongo.read_concern import ReadConcern

import wire_util
from shale_fixtures import Background, fail_point, module_cluster, wait_until

NS = "txr.acct"


@pytest.fixture(scope="module")
def cl(request):
    """Two routers; txr.acct sharded on x: x < 0 on shard0, x >= 0 on shard1."""
    with module_cluster(request, routers=2, shards=2) as c:
        r = c.router.client()
        r.admin.command("enableSharding", "txr", primaryShard="shard0")
        r.admin.command("shardCollection", NS, key={"x": 1})
        r.admin.command("split", NS, middle={"x": 0})
        r.admin.command("moveChunk", NS, find={"x": 0}, to="shard1")
        r.txr.acct.insert_many([{"_id": "a", "x": -1, "bal": 100},
                                {"_id": "b", "x": 1, "bal": 100}])
        r.txr.plain.insert_one({"_id": 0, "n": 0})
        yield c


def balances(client):
    return {d["_id"]: d["bal"] for d in client.txr.acct.find()}


def test_single_shard_transaction_commits(cl):
    c = cl.router.client()

    def body(s):
        c.txr.plain.update_one({"_id": 0}, {"$inc": {"n": 1}}, session=s)
        c.txr.plain.insert_one({"_id": 1}, session=s)
        assert c.txr.plain.find_one({"_id": 0}, session=s)["n"] == 1

    with c.start_session() as s:
        s.with_transaction(body)
    assert c.txr.plain.find_one({"_id": 0})["n"] == 1
    assert c.txr.plain.find_one({"_id": 1}) is not None
    c.txr.plain.delete_one({"_id": 1})


def test_two_shard_transfer_commits_on_both(cl):
    c = cl.router.client()

    def transfer(s):
        c.txr.acct.update_one({"x": -1}, {"$inc": {"bal": -10}}, session=s)
        c.txr.acct.update_one({"x": 1}, {"$inc": {"bal": 10}}, session=s)

    before = balances(c)
    with c.start_session() as s:
        s.with_transaction(transfer)
    after = balances(c)
    assert after == {"a": before["a"] - 10, "b": before["b"] + 10}
    # Each shard holds its own document's new balance.
    assert cl.shard_client(0).txr.acct.find_one({"_id": "a"})["bal"] == after["a"]
    assert cl.shard_client(1).txr.acct.find_one({"_id": "b"})["bal"] == after["b"]
    # Nothing left behind by the coordinator (it answers once its decision is durable, then
    # delivers it).
    wait_until(lambda: all(cl.shard_client(i).config.transaction_coordinators
                           .count_documents({}) == 0 for i in range(2)),
               what="the coordinator to deliver its decision and finish")


def test_snapshot_read_only_transaction_across_shards(cl):
    c = cl.router.client()
    with c.start_session() as s:
        with s.start_transaction(read_concern=ReadConcern("snapshot")):
            total = sum(d["bal"] for d in c.txr.acct.find({}, session=s))
    assert total == sum(balances(c).values())


def test_abort_leaves_nothing(cl):
    c = cl.router.client()
    before = balances(c)
    with c.start_session() as s:
        s.start_transaction()
        c.txr.acct.update_one({"x": -1}, {"$inc": {"bal": -50}}, session=s)
        c.txr.acct.update_one({"x": 1}, {"$inc": {"bal": 50}}, session=s)
        s.abort_transaction()
    assert balances(c) == before


def test_failed_statement_aborts_with_transient_label(cl):
    c = cl.router.client()
    before = balances(c)
    lsid = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
    sock = wire_util.connect(cl.router.port)

    def cmd(body, **kw):
        body = dict(body, lsid=lsid, txnNumber=Int64(1), autocommit=False, **kw)
        body["$db"] = "txr"
        return wire_util.command(sock, body)

    r = cmd({"update": "acct", "updates": [{"q": {"x": 1}, "u": {"$inc": {"bal": 5}}}]},
            startTransaction=True)
    assert r["ok"] == 1 and r["nModified"] == 1, r
    assert "recoveryToken" in r
    # count is not allowed in a transaction: refused before it reaches the transaction.
    r = cmd({"count": "acct"})
    assert r["ok"] == 0 and r["code"] == 263, r
    r = cmd({"find": "acct", "filter": {"x": 1}})
    assert r["ok"] == 1 and r["cursor"]["firstBatch"][0]["bal"] == before["b"] + 5, r
    # A duplicate key fails the statement: the router aborts the transaction everywhere.
    r = cmd({"insert": "acct", "documents": [{"_id": "b", "x": 1}]})
    assert r["writeErrors"][0]["code"] == 11000, r
    r = cmd({"find": "acct", "filter": {"x": 1}})
    assert r["ok"] == 0 and r["codeName"] == "NoSuchTransaction", r
    assert "TransientTransactionError" in r.get("errorLabels", []), r
    sock.close()
    assert balances(c) == before


def test_commit_through_second_router_with_recovery_token(cl):
    c = cl.router.client()
    before = balances(c)
    lsid = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
    s1 = wire_util.connect(cl.routers[0].port)
    s2 = wire_util.connect(cl.routers[1].port)

    def cmd(sock, db, body, txn=7, **kw):
        body = dict(body, lsid=lsid, txnNumber=Int64(txn), autocommit=False, **kw)
        body["$db"] = db
        return wire_util.command(sock, body)

    r = cmd(s1, "txr", {"update": "acct", "updates": [{"q": {"x": -1},
                                                      "u": {"$inc": {"bal": -1}}}]},
            startTransaction=True)
    assert r["ok"] == 1, r
    r = cmd(s1, "txr", {"update": "acct", "updates": [{"q": {"x": 1},
                                                      "u": {"$inc": {"bal": 1}}}]})
    assert r["ok"] == 1, r
    token = r["recoveryToken"]
    assert token == {"recoveryShardId": "shard0"}, token
    # The second router never saw the transaction: it asks the token's shard, which knows
    # no commit of it yet. As MongoDB, that shard aborts its part still in progress and
    # answers NoSuchTransaction -- so the first router cannot commit it any more.
    r = cmd(s2, "admin", {"commitTransaction": 1}, recoveryToken=token)
    assert r["ok"] == 0 and r["codeName"] == "NoSuchTransaction", r
    r = cmd(s1, "admin", {"commitTransaction": 1})
    assert r["ok"] == 0 and r["codeName"] == "NoSuchTransaction", r
    assert balances(c) == before
    # The next transaction is committed through the first router (two-phase commit) ...
    r = cmd(s1, "txr", {"update": "acct", "updates": [{"q": {"x": -1},
                                                      "u": {"$inc": {"bal": -1}}}]},
            startTransaction=True, txn=8)
    assert r["ok"] == 1, r
    r = cmd(s1, "txr", {"update": "acct", "updates": [{"q": {"x": 1},
                                                      "u": {"$inc": {"bal": 1}}}]}, txn=8)
    assert r["ok"] == 1, r
    r = cmd(s1, "admin", {"commitTransaction": 1}, txn=8)
    assert r["ok"] == 1 and r["recoveryToken"] == token, r
    # ... and a retry of the commit through the second router learns the decision.
    r = cmd(s2, "admin", {"commitTransaction": 1}, recoveryToken=token, txn=8)
    assert r["ok"] == 1, r
    s1.close()
    s2.close()
    assert balances(c) == {"a": before["a"] - 1, "b": before["b"] + 1}


def test_commit_without_token_on_unknown_router(cl):
    lsid = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
    s2 = wire_util.connect(cl.routers[1].port)
    r = wire_util.command(s2, {"commitTransaction": 1, "lsid": lsid, "txnNumber": Int64(3),
                               "autocommit": False, "$db": "admin"})
    s2.close()
    assert r["ok"] == 0 and r["code"] == 50940, r


def test_concurrent_transfers_conserve_total(cl):
    import threading
    c = cl.router.client()
    total = sum(balances(c).values())
    errors = []

    def worker(sign):
        try:
            for _ in range(5):
                def body(s):
                    c.txr.acct.update_one({"x": -1}, {"$inc": {"bal": -sign}}, session=s)
                    c.txr.acct.update_one({"x": 1}, {"$inc": {"bal": sign}}, session=s)
                with c.start_session() as s:
                    s.with_transaction(body)
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in (1, -1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert sum(balances(c).values()) == total
    with pytest.raises(OperationFailure):
        c.admin.command("abortTransaction")


def test_get_more_stays_in_the_transaction(cl):
    c = cl.router.client()
    c.txr.many.insert_many([{"_id": i, "x": i} for i in range(-10, 10)])
    with c.start_session() as s:
        with s.start_transaction():
            c.txr.many.insert_one({"_id": 100, "x": 100}, session=s)
            # Batches of 3: the getMores run in the transaction and see its own write.
            ids = [d["_id"] for d in c.txr.many.find({}, batch_size=3, session=s)]
            assert sorted(ids) == sorted(list(range(-10, 10)) + [100])
            s.abort_transaction()
    assert c.txr.many.count_documents({}) == 20


def test_stale_router_retries_first_statement(cl):
    """A router whose routing is stale sends the first statement to the old owner, which
    answers StaleConfig: the router drops that participant and retries at the new owner."""
    r1 = cl.routers[0].client()
    r2 = cl.routers[1].client()
    ns = "txr.st"
    r1.admin.command("shardCollection", ns, key={"x": 1})
    r1.admin.command("split", ns, middle={"x": 0})
    r1.txr.st.insert_one({"_id": "seed", "x": -1})
    assert r2.txr.st.find_one({"x": -1}) is not None  # r2 caches the routing
    r1.admin.command("moveChunk", ns, find={"x": 0}, to="shard1")

    def body(s):
        r2.txr.st.insert_one({"_id": "moved", "x": 5}, session=s)
        r2.txr.st.insert_one({"_id": "stays", "x": -5}, session=s)

    with r2.start_session() as s:
        s.with_transaction(body)
    assert cl.shard_client(1).txr.st.find_one({"_id": "moved"}) is not None
    assert cl.shard_client(0).txr.st.find_one({"_id": "moved"}) is None
    assert cl.shard_client(0).txr.st.find_one({"_id": "stays"}) is not None


def test_cluster_default_concerns_apply_to_start_and_commit_only(cl):
    """With cluster-wide defaults set, a transaction's later statements get no readConcern
    and its statements no writeConcern (the shards would refuse both); it commits."""
    c = cl.router.client()
    c.admin.command("setDefaultRWConcern", defaultReadConcern={"level": "local"},
                    defaultWriteConcern={"w": 1})
    c.admin.command("getDefaultRWConcern")  # this router's cache holds the new defaults

    def body(s):
        c.txr.acct.update_one({"x": -1}, {"$inc": {"bal": -2}}, session=s)
        c.txr.acct.update_one({"x": 1}, {"$inc": {"bal": 2}}, session=s)
        assert c.txr.acct.find_one({"x": 1}, session=s) is not None

    before = balances(c)
    with c.start_session() as s:
        s.with_transaction(body)
    assert balances(c) == {"a": before["a"] - 2, "b": before["b"] + 2}


def test_read_on_one_shard_write_on_other(cl):
    """One participant reads, the other writes: the single-write-shard commit path."""
    c = cl.router.client()
    before = balances(c)

    def body(s):
        a = c.txr.acct.find_one({"x": -1}, session=s)
        c.txr.acct.update_one({"x": 1}, {"$set": {"bal": a["bal"]}}, session=s)

    with c.start_session() as s:
        s.with_transaction(body)
    assert balances(c) == {"a": before["a"], "b": before["a"]}
    # Restore the total for the tests that follow.
    c.txr.acct.update_one({"x": 1}, {"$set": {"bal": before["b"]}})


def test_unknown_transaction_statement_is_transient(cl):
    lsid = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
    sock = wire_util.connect(cl.router.port)
    r = wire_util.command(sock, {"find": "acct", "lsid": lsid, "txnNumber": Int64(4),
                                 "autocommit": False, "$db": "txr"})
    sock.close()
    assert r["ok"] == 0 and r["codeName"] == "NoSuchTransaction", r
    assert r["errorLabels"] == ["TransientTransactionError"], r


def test_snapshot_transaction_reads_one_point_in_time_across_shards(cl):
    """The router picks atClusterTime on the first statement: a shard first reached later
    reads as of that time, not the newer write committed in between."""
    c = cl.router.client()
    b0 = c.txr.acct.find_one({"x": 1})["bal"]
    with c.start_session() as s:
        with s.start_transaction(read_concern=ReadConcern("snapshot")):
            assert c.txr.acct.find_one({"x": -1}, session=s) is not None  # shard0 only
            c.txr.acct.update_one({"x": 1}, {"$inc": {"bal": 1000}})  # outside, committed
            assert c.txr.acct.find_one({"x": 1}, session=s)["bal"] == b0  # shard1, later
    assert c.txr.acct.find_one({"x": 1})["bal"] == b0 + 1000
    c.txr.acct.update_one({"x": 1}, {"$inc": {"bal": -1000}})


def test_distinct_in_a_transaction_only_on_unsharded_collections(cl):
    c = cl.router.client()
    with c.start_session() as s:
        with s.start_transaction():
            assert c.txr.plain.distinct("_id", session=s) == [0]
    with c.start_session() as s:
        s.start_transaction()
        with pytest.raises(OperationFailure) as e:
            c.txr.acct.distinct("x", session=s)
        assert e.value.code == 263
        s.abort_transaction()  # (the driver ignores the abort's NoSuchTransaction)


def test_snapshot_error_on_first_statement_retries_at_a_new_time(cl):
    """A snapshot error on the first statement of a snapshot transaction (the router chose its
    time): the router starts over at a newer atClusterTime, as mongos; the user sees success."""
    from shale_fixtures import fail_point
    c = cl.router.client()
    shard1 = cl.shard_client(1)
    fail_point(shard1, "failCommand", {"times": 1}, {"failCommands": ["find"], "errorCode": 239,
                                                     "failInternalCommands": True})
    try:
        with c.start_session() as s:
            with s.start_transaction(read_concern=ReadConcern("snapshot")):
                assert c.txr.acct.find_one({"x": 1}, session=s) is not None
    finally:
        fail_point(shard1, "failCommand", "off")


def test_snapshot_error_on_a_write_retries_only_as_the_first_statement(cl):
    """The write path as mongos: a snapshot error of the first statement starts the
    transaction over at a newer atClusterTime (the user sees success, the write applies
    once); on a later statement it fails with TransientTransactionError."""
    c = cl.router.client()
    shard1 = cl.shard_client(1)
    before = balances(c)["b"]
    snap = ReadConcern("snapshot")
    # Only the test's own updates (internal ones, such as the vector clock's, also run).
    fail_point(shard1, "failCommand", {"times": 1}, {"failCommands": ["update"],
                                                     "namespace": "txr.acct",
                                                     "errorCode": 239,
                                                     "failInternalCommands": True})
    try:
        with c.start_session() as s:
            with s.start_transaction(read_concern=snap):
                c.txr.acct.update_one({"x": 1}, {"$inc": {"bal": 1}}, session=s)
        assert balances(c)["b"] == before + 1
        fail_point(shard1, "failCommand", {"times": 1}, {"failCommands": ["update"],
                                                         "namespace": "txr.acct",
                                                         "errorCode": 239,
                                                         "failInternalCommands": True})
        with c.start_session() as s:
            s.start_transaction(read_concern=snap)
            assert c.txr.acct.find_one({"x": -1}, session=s) is not None
            with pytest.raises(OperationFailure) as e:
                c.txr.acct.update_one({"x": 1}, {"$inc": {"bal": 1}}, session=s)
            assert e.value.code == 239
            assert e.value.has_error_label("TransientTransactionError"), e.value.details
            s.abort_transaction()
    finally:
        fail_point(shard1, "failCommand", "off")
    assert balances(c)["b"] == before + 1


def test_node_driver_with_transaction_through_the_router(cl):
    import json
    import os
    import subprocess
    from test_node_driver import HERE, node_binary
    c = cl.router.client()
    before = balances(c)
    out = subprocess.run([node_binary(), os.path.join(HERE, "txn_router.js"), cl.uri(1), "txr"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["commits"] == 5 and res["aborted"] == "callback refuses", res
    assert res["bal"] == {"a": before["a"] - 50, "b": before["b"] + 50}, res


def test_create_collection_inside_a_transaction(cl):
    """MongoDB 7.0 creates collections (explicitly or by an insert) inside a transaction."""
    c = cl.router.client()
    with c.start_session() as s:
        with s.start_transaction():
            c.txr.create_collection("made_in_txn", session=s)
            c.txr.made_in_txn.insert_one({"_id": 1}, session=s)
            c.txr.implicit_in_txn.insert_one({"_id": 2}, session=s)
    assert c.txr.made_in_txn.find_one({"_id": 1}) is not None
    assert c.txr.implicit_in_txn.find_one({"_id": 2}) is not None
    with c.start_session() as s:
        s.start_transaction()
        c.txr.gone_with_abort.insert_one({"_id": 3}, session=s)
        s.abort_transaction()
    assert "gone_with_abort" not in c.txr.list_collection_names()


def test_next_transaction_waits_for_the_previous_decision(cl):
    """With coordinateCommitReturnImmediatelyAfterPersistingDecision true (MongoDB 7.0's
    default is false) the coordinator answers commitTransaction once its decision is durable,
    before it delivers it: the session's next transaction reaches participants still prepared
    and waits there (as MongoDB's do) instead of failing with PreparedTransactionInProgress."""
    c = cl.router.client()
    coord = cl.shard_client(0)
    coord.admin.command("setParameter", 1,
                        coordinateCommitReturnImmediatelyAfterPersistingDecision=True)
    try:
        _next_transaction_waits(c, coord)
    finally:
        coord.admin.command("setParameter", 1,
                            coordinateCommitReturnImmediatelyAfterPersistingDecision=False)


def _next_transaction_waits(c, coord):
    runs = []

    def transfer(s):
        runs.append(1)
        c.txr.acct.update_one({"x": -1}, {"$inc": {"bal": -1}}, session=s)
        c.txr.acct.update_one({"x": 1}, {"$inc": {"bal": 1}}, session=s)

    total = sum(balances(c).values())
    with c.start_session() as s:
        # Held before delivering: the first commit answers, both shards stay prepared.
        data = {"type": "TransactionCoordinator", "phase": "waitingForDecisionAcks"}
        entered = fail_point(coord, "hangBeforeCoordinatorPhase", "alwaysOn", data)["count"]
        try:
            s.with_transaction(transfer)
            wait_until(lambda: fail_point(coord, "hangBeforeCoordinatorPhase", "alwaysOn",
                                          data)["count"] > entered,
                       what="the coordinator to hold its decision's delivery")
            nxt = Background(lambda: s.with_transaction(transfer))
            wait_until(lambda: [o for o in coord.admin.command("currentOp")["inprog"]
                                if o.get("command", {}).get("update") == "acct"],
                       what="the next transaction's statement waiting on shard0")
            assert not nxt.done
        finally:
            fail_point(coord, "hangBeforeCoordinatorPhase", "off")
        nxt.join(30)
        assert nxt.done and nxt.error is None, nxt.error
        # Back to back, many times: every start meets (or not) the last one still prepared,
        # and waits: no attempt fails with a transient error and runs again.
        for _ in range(40):
            s.with_transaction(transfer)
    assert len(runs) == 42
    assert sum(balances(c).values()) == total


def test_create_in_a_cross_shard_write_transaction_fails_commit(cl):
    """MongoDB 7.0: a collection created in a transaction cannot be prepared, so a transaction
    that creates one and writes on another shard fails its commit with
    OperationNotSupportedInTransaction (263) and leaves nothing; with one write shard (the
    others only read) it commits."""
    c = cl.router.client()
    before = balances(c)
    with c.start_session() as s:
        s.start_transaction()
        c.txr.create_collection("made_cross", session=s)
        c.txr.acct.update_one({"x": 1}, {"$inc": {"bal": 5}}, session=s)
        with pytest.raises(OperationFailure) as e:
            s.commit_transaction()
        assert e.value.code == 263, e.value.details
    assert "made_cross" not in c.txr.list_collection_names()
    assert balances(c) == before
    with c.start_session() as s:
        s.start_transaction()
        c.txr.create_collection("made_single", session=s)
        assert c.txr.acct.find_one({"x": 1}, session=s)["_id"] == "b"  # shard1 only reads
        s.commit_transaction()
    assert "made_single" in c.txr.list_collection_names()
