"""Multi-document transactions on one data node (a replica set of one), as a user sees them
with pymongo: with_transaction, start_transaction / commit / abort, error labels, snapshot
isolation, prepare / commit / abort sent directly, recovery of committed and prepared
transactions after kill -9 (docs/design/transactions.md)."""

import threading
import uuid

import pytest
from bson import Int64, Timestamp
from bson.binary import Binary, UUID_SUBTYPE
from pymongo.errors import OperationFailure
from pymongo.read_concern import ReadConcern

import wire_util
from shale_fixtures import wait_until as shale_wait


def _client(rs_node):
    return rs_node.client()


class Raw:
    """Commands on one connection with an explicit session, sent as a router or coordinator
    would (pymongo would put its own implicit session on them)."""

    def __init__(self, node, lsid=None):
        self.sock = wire_util.connect(node.port)
        self.lsid = lsid or {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}

    def __call__(self, db, cmd, txn, start=False, **extra):
        c = dict(cmd)
        c.update(lsid=self.lsid, txnNumber=Int64(txn), autocommit=False)
        if start:
            c["startTransaction"] = True
        c.update(extra)
        c = {k: v for k, v in c.items() if v is not None}  # None drops a field (autocommit)
        c["$db"] = db
        return wire_util.command(self.sock, c)

    def close(self):
        self.sock.close()


def test_with_transaction_commits_all_or_nothing(rs_node):
    c = _client(rs_node)
    c.test.acct.insert_many([{"_id": "a", "bal": 100}, {"_id": "b", "bal": 0}])

    def transfer(s):
        c.test.acct.update_one({"_id": "a"}, {"$inc": {"bal": -30}}, session=s)
        c.test.acct.update_one({"_id": "b"}, {"$inc": {"bal": 30}}, session=s)
        c.test.log.insert_one({"_id": 1, "what": "transfer"}, session=s)
        # The transaction reads its own writes.
        assert c.test.acct.find_one({"_id": "a"}, session=s)["bal"] == 70

    with c.start_session() as s:
        s.with_transaction(transfer)
    assert {d["_id"]: d["bal"] for d in c.test.acct.find()} == {"a": 70, "b": 30}
    assert c.test.log.count_documents({}) == 1
    st = c.admin.command("serverStatus")["transactions"]
    assert st["totalCommitted"] >= 1 and st["totalStarted"] >= 1 and st["currentOpen"] == 0


def test_abort_rolls_back_and_no_dirty_reads(rs_node):
    c = _client(rs_node)
    c.test.t.insert_one({"_id": 1, "x": 1})
    with c.start_session() as s:
        s.start_transaction()
        c.test.t.update_one({"_id": 1}, {"$set": {"x": 2}}, session=s)
        c.test.t.insert_one({"_id": 2}, session=s)
        # Outside the transaction nothing of it is visible.
        assert c.test.t.find_one({"_id": 1})["x"] == 1
        assert c.test.t.find_one({"_id": 2}) is None
        s.abort_transaction()
    assert c.test.t.find_one({"_id": 1})["x"] == 1
    assert c.test.t.count_documents({}) == 1


def test_repeatable_reads_in_snapshot(rs_node):
    c = _client(rs_node)
    c.test.r.insert_many([{"_id": i} for i in range(3)])
    with c.start_session() as s:
        s.start_transaction(read_concern=ReadConcern("snapshot"))
        assert c.test.r.count_documents({}, session=s) == 3
        c.test.r.insert_one({"_id": 10})  # outside, committed
        assert len(list(c.test.r.find({}, session=s))) == 3
        assert c.test.r.find_one({"_id": 10}, session=s) is None
        s.commit_transaction()
    assert c.test.r.count_documents({}) == 4


def test_write_conflict_is_transient_and_aborts(rs_node):
    c = _client(rs_node)
    c.test.w.insert_one({"_id": 1, "n": 0})
    with c.start_session() as s1, c.start_session() as s2:
        s1.start_transaction()
        c.test.w.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=s1)
        s2.start_transaction()
        with pytest.raises(OperationFailure) as e:
            c.test.w.update_one({"_id": 1}, {"$inc": {"n": 10}}, session=s2)
        assert e.value.code == 112
        assert e.value.has_error_label("TransientTransactionError")
        # The loser's transaction is gone: its commit says so.
        with pytest.raises(OperationFailure) as e:
            s2.commit_transaction()
        assert e.value.code == 251
        s1.commit_transaction()
    assert c.test.w.find_one({"_id": 1})["n"] == 1


def test_errors_as_mongodb(rs_node):
    c = _client(rs_node)
    c.test.e.insert_one({"_id": 1})
    raw = Raw(rs_node)
    # Continuing a transaction that never started.
    r = raw("test", {"find": "e"}, 5)
    assert r["code"] == 251 and "TransientTransactionError" in r.get("errorLabels", [])
    assert raw("test", {"find": "e"}, 6, start=True)["ok"] == 1
    # A command MongoDB does not run in a transaction.
    r = raw("test", {"count": "e"}, 6)
    assert r["code"] == 263
    # A write error aborts the transaction.
    r = raw("test", {"insert": "e", "documents": [{"_id": 1}]}, 6)
    assert r["writeErrors"][0]["code"] == 11000
    r = raw("admin", {"commitTransaction": 1}, 6)
    assert r["code"] == 251 and "TransientTransactionError" in r["errorLabels"]
    # An older number is too old.
    r = raw("test", {"find": "e"}, 4, start=True)
    assert r["code"] == 225
    # autocommit true, and readConcern after the first statement.
    assert raw("test", {"find": "e"}, 7, start=True, autocommit=True)["code"] == 72
    assert raw("test", {"find": "e"}, 8, start=True)["ok"] == 1
    r = raw("test", {"find": "e"}, 8, readConcern={"level": "snapshot"})
    assert r["code"] == 72
    # Starting the same number twice; a restart after an abort is allowed (MongoDB 7.0).
    assert raw("test", {"find": "e"}, 9, start=True)["ok"] == 1
    assert raw("test", {"find": "e"}, 9, start=True)["code"] == 50911
    assert raw("admin", {"abortTransaction": 1}, 9)["ok"] == 1
    assert raw("test", {"find": "e"}, 9, start=True)["ok"] == 1
    # A retryable write with the transaction's number.
    r = wire_util.command(raw.sock, {"insert": "e", "documents": [{"_id": 99}], "lsid": raw.lsid,
                                     "txnNumber": Int64(9), "$db": "test"})
    assert r["code"] == 217
    # Commit twice is fine; abort after commit is not.
    assert raw("test", {"insert": "e", "documents": [{"_id": 9}]}, 9)["ok"] == 1
    assert raw("admin", {"commitTransaction": 1}, 9)["ok"] == 1
    assert raw("admin", {"commitTransaction": 1}, 9)["ok"] == 1
    assert raw("admin", {"abortTransaction": 1}, 9)["code"] == 256
    # A newer transaction aborts the open one.
    assert raw("test", {"insert": "e", "documents": [{"_id": 10}]}, 10, start=True)["ok"] == 1
    assert raw("test", {"find": "e"}, 11, start=True)["ok"] == 1
    assert raw("admin", {"commitTransaction": 1}, 10)["code"] == 225
    assert c.test.e.find_one({"_id": 10}) is None
    raw.close()


def test_cursor_in_transaction_and_getmore(rs_node):
    c = _client(rs_node)
    c.test.cur.insert_many([{"_id": i} for i in range(250)])
    with c.start_session() as s:
        with s.start_transaction():
            c.test.cur.insert_one({"_id": 1000}, session=s)
            ids = [d["_id"] for d in c.test.cur.find({}, session=s).batch_size(50)]
            assert len(ids) == 251 and 1000 in ids
    assert c.test.cur.count_documents({}) == 251


def test_oplog_entry_and_restart_replays_committed(rs_node):
    c = _client(rs_node)
    c.test.d.insert_one({"_id": 0})
    with c.start_session() as s:
        with s.start_transaction():
            c.test.d.insert_many([{"_id": i} for i in range(1, 6)], session=s)
            c.test.d.delete_one({"_id": 0}, session=s)
    entry = c.local.oplog.rs.find_one({"o.applyOps": {"$exists": True}},
                                      sort=[("$natural", -1)])
    assert entry["op"] == "c" and entry["ns"] == "admin.$cmd"
    assert len(entry["o"]["applyOps"]) == 6 and "lsid" in entry and entry["txnNumber"] >= 1
    rec = [r for r in c.config.transactions.find()
           if r["_id"]["id"] == entry["lsid"]["id"]][0]
    assert rec["state"] == "committed" and rec["txnNum"] == entry["txnNumber"]
    c.admin.command({"fsync": 1})  # nothing to replay below this
    with c.start_session() as s:
        with s.start_transaction():
            c.test.d.update_one({"_id": 1}, {"$set": {"y": 1}}, session=s)
            c.test.d.insert_one({"_id": 7}, session=s)
    c.test.d.insert_one({"_id": 8})
    # j: true through a retryable write: the journal holds the transaction before it.
    c.test.sync.insert_one({"_id": 1})
    c.test.command({"insert": "sync", "documents": [{"_id": 2}], "writeConcern": {"j": True}})
    rs_node.kill()
    rs_node.start()
    c = _client(rs_node)
    assert sorted(d["_id"] for d in c.test.d.find()) == [1, 2, 3, 4, 5, 7, 8]
    assert c.test.d.find_one({"_id": 1}) == {"_id": 1, "y": 1}


def _prepare(raw, txn, docs, coll="p"):
    # A transaction that created its collection cannot be prepared (MongoDB 7.0).
    r = wire_util.command(raw.sock, {"create": coll, "$db": "test"})
    assert r["ok"] == 1 or r["code"] == 48, r
    assert raw("test", {"insert": coll, "documents": docs}, txn, start=True)["ok"] == 1
    r = raw("admin", {"prepareTransaction": 1}, txn)
    assert r["ok"] == 1, r
    return r["prepareTimestamp"]


def test_prepare_commit_at_commit_timestamp(rs_node):
    c = _client(rs_node)
    c.test.p.insert_one({"_id": 0})
    raw = Raw(rs_node)
    pts = _prepare(raw, 1, [{"_id": 1}, {"_id": 2}])
    assert isinstance(pts, Timestamp)
    # A retried prepare answers the same time; other statements are refused.
    assert raw("admin", {"prepareTransaction": 1}, 1)["prepareTimestamp"] == pts
    assert raw("test", {"find": "p"}, 1)["code"] == 267
    # Commit without a commitTimestamp, or before the prepare, is refused.
    assert raw("admin", {"commitTransaction": 1}, 1)["code"] == 72
    r = raw("admin", {"commitTransaction": 1, "commitTimestamp": Timestamp(pts.time, 0)}, 1)
    assert r["code"] == 72
    entry = c.local.oplog.rs.find_one({"ts": pts})
    assert entry["o"]["prepare"] is True and len(entry["o"]["applyOps"]) == 2
    # A reader that touches the prepared documents waits for the decision.
    got = {}

    def reader():
        got["doc"] = _client(rs_node).test.p.find_one({"_id": 1})

    th = threading.Thread(target=reader)
    th.start()
    th.join(0.5)
    assert th.is_alive()
    assert c.test.p.find_one({"_id": 0}) == {"_id": 0}  # untouched documents are readable
    cts = Timestamp(pts.time, pts.inc + 1)
    assert raw("admin", {"commitTransaction": 1, "commitTimestamp": cts}, 1)["ok"] == 1
    th.join(10)
    assert got["doc"] == {"_id": 1}
    assert c.test.p.count_documents({}) == 3
    dec = c.local.oplog.rs.find_one({"o.commitTransaction": 1})
    assert dec["o"]["commitTimestamp"] == cts and dec["prevOpTime"]["ts"] == pts
    # The data is visible exactly from the commit timestamp.
    snap = c.test.command({"find": "p", "readConcern": {"level": "snapshot",
                                                        "atClusterTime": pts}})
    assert [d["_id"] for d in snap["cursor"]["firstBatch"]] == [0]
    st = c.admin.command("serverStatus")["transactions"]
    assert st["totalPrepared"] == 1 and st["totalPreparedThenCommitted"] == 1
    raw.close()


def test_prepare_then_abort_releases(rs_node):
    c = _client(rs_node)
    raw = Raw(rs_node)
    _prepare(raw, 3, [{"_id": 1}])
    assert raw("admin", {"abortTransaction": 1}, 3)["ok"] == 1
    assert c.test.p.find_one({"_id": 1}) is None
    c.test.p.insert_one({"_id": 1})
    assert c.local.oplog.rs.find_one({"o.abortTransaction": 1}) is not None
    raw.close()


def test_prepared_transaction_survives_kill9(rs_node):
    c = _client(rs_node)
    c.test.p.insert_one({"_id": 0, "v": 0})
    raw = Raw(rs_node)
    lsid = raw.lsid
    assert raw("test", {"update": "p", "updates": [{"q": {"_id": 0}, "u": {"$set": {"v": 1}}}]},
               4, start=True)["ok"] == 1
    assert raw("test", {"insert": "p", "documents": [{"_id": 5}]}, 4)["ok"] == 1
    pts = raw("admin", {"prepareTransaction": 1}, 4)["prepareTimestamp"]
    c.admin.command({"fsync": 1})  # a checkpoint while it is prepared
    c.test.other.insert_one({"_id": 1})
    c.test.command({"insert": "other", "documents": [{"_id": 2}], "writeConcern": {"j": True}})
    raw.close()
    rs_node.kill()
    rs_node.start()
    c = _client(rs_node)
    raw = Raw(rs_node, lsid)
    # Re-prepared: still undecided, and its documents wait for the decision.
    assert raw("test", {"find": "p"}, 4)["code"] == 267
    assert raw("admin", {"prepareTransaction": 1}, 4)["prepareTimestamp"] == pts
    cts = Timestamp(pts.time, pts.inc + 1)
    r = raw("admin", {"commitTransaction": 1, "commitTimestamp": cts}, 4)
    assert r["ok"] == 1, r
    assert c.test.p.find_one({"_id": 0}) == {"_id": 0, "v": 1}
    assert c.test.p.find_one({"_id": 5}) == {"_id": 5}
    assert c.test.other.count_documents({}) == 2
    # A clean restart keeps a prepared transaction too.
    assert raw("test", {"insert": "p", "documents": [{"_id": 6}]}, 5, start=True)["ok"] == 1
    pts5 = raw("admin", {"prepareTransaction": 1}, 5)["prepareTimestamp"]
    raw.close()
    rs_node.stop()
    rs_node.start()
    # ... and another crash after that restart (its recovery checkpoint stayed below it).
    c = _client(rs_node)
    c.admin.command({"fsync": 1})
    c.test.command({"insert": "other", "documents": [{"_id": 9}], "writeConcern": {"j": True}})
    rs_node.kill()
    rs_node.start()
    c = _client(rs_node)
    raw = Raw(rs_node, lsid)
    assert raw("admin", {"prepareTransaction": 1}, 5)["prepareTimestamp"] == pts5
    assert raw("admin", {"abortTransaction": 1}, 5)["ok"] == 1
    assert c.test.p.find_one({"_id": 6}) is None
    raw.close()
    # The commit itself survives another crash.
    c.test.command({"insert": "other", "documents": [{"_id": 3}], "writeConcern": {"j": True}})
    rs_node.kill()
    rs_node.start()
    c = _client(rs_node)
    assert c.test.p.find_one({"_id": 0}) == {"_id": 0, "v": 1}
    assert c.test.p.count_documents({}) == 2


def test_large_transaction_chains_entries_and_survives_kill9(rs_node):
    c = _client(rs_node)
    c.test.big.insert_one({"_id": "first"})
    c.admin.command({"fsync": 1})
    pad = "x" * (1024 * 1024)
    with c.start_session() as s:
        with s.start_transaction():
            for i in range(20):  # 20 MB of ops: more than one 16 MB entry
                c.test.big.insert_one({"_id": i, "pad": pad}, session=s)
    entries = list(c.local.oplog.rs.find({"o.applyOps": {"$exists": True}},
                                         sort=[("$natural", 1)]))
    assert len(entries) == 2
    assert entries[0]["o"]["partialTxn"] is True and "partialTxn" not in entries[1]["o"]
    assert entries[1]["prevOpTime"]["ts"] == entries[0]["ts"]
    assert entries[0]["prevOpTime"]["ts"] == Timestamp(0, 0)
    assert sum(len(e["o"]["applyOps"]) for e in entries) == 20
    c.test.command({"insert": "sync", "documents": [{"_id": 1}], "writeConcern": {"j": True}})
    rs_node.kill()
    rs_node.start()
    c = _client(rs_node)
    assert c.test.big.count_documents({}) == 21
    assert c.test.big.find_one({"_id": 19})["pad"] == pad


def test_lifetime_limit_aborts_old_transactions(rs_node):
    c = _client(rs_node)
    c.admin.command({"setParameter": 1, "transactionLifetimeLimitSeconds": 1})
    c.test.l.insert_one({"_id": 0})
    raw = Raw(rs_node)
    assert raw("test", {"insert": "l", "documents": [{"_id": 1}]}, 1, start=True)["ok"] == 1
    # A prepared one is never aborted by the limit.
    raw2 = Raw(rs_node)
    pts = _prepare(raw2, 1, [{"_id": 2}], coll="l2")

    def aborted():
        return c.admin.command("serverStatus")["transactions"]["totalAborted"] >= 1

    # The reaper runs every few seconds.
    shale_wait(aborted, timeout=20, what="the lifetime limit")
    assert raw("admin", {"commitTransaction": 1}, 1)["code"] == 251
    assert c.test.l.count_documents({}) == 1
    st = c.admin.command("serverStatus")["transactions"]
    assert st["totalAborted"] >= 1 and st["currentOpen"] == 1
    cts = Timestamp(pts.time, pts.inc + 1)
    assert raw2("admin", {"commitTransaction": 1, "commitTimestamp": cts}, 1)["ok"] == 1
    assert c.test.l2.count_documents({}) == 1
    raw.close()
    raw2.close()


def test_kill_sessions_aborts_and_current_op_shows(rs_node):
    c = _client(rs_node)
    raw = Raw(rs_node)
    assert raw("test", {"insert": "k", "documents": [{"_id": 1}]}, 2, start=True)["ok"] == 1
    ops = c.admin.command({"currentOp": 1, "type": "idleSession"})["inprog"]
    mine = [o for o in ops if o["lsid"]["id"] == uuid.UUID(bytes=bytes(raw.lsid["id"]))]
    assert mine, ops
    assert len(mine) == 1 and mine[0]["active"] is False
    tx = mine[0]["transaction"]
    assert tx["parameters"]["txnNumber"] == 2 and tx["parameters"]["autocommit"] is False
    assert "expiryTime" in tx and tx["timeOpenMicros"] >= 0
    st = c.admin.command("serverStatus")["transactions"]
    assert st["currentInactive"] == 1 and st["currentOpen"] == 1
    c.admin.command({"killSessions": [raw.lsid]})
    r = raw("admin", {"commitTransaction": 1}, 2)
    assert r["code"] == 251
    assert c.test.k.count_documents({}) == 0
    assert c.admin.command("serverStatus")["transactions"]["currentOpen"] == 0
    raw.close()


def test_prepare_conflicts_wait_interruptibly_and_writers_wait(rs_node):
    c = _client(rs_node)
    c.test.pc.insert_one({"_id": 1, "v": 0})
    raw = Raw(rs_node)
    assert raw("test", {"update": "pc", "updates": [{"q": {"_id": 1}, "u": {"$set": {"v": 1}}}]},
               1, start=True)["ok"] == 1
    pts = raw("admin", {"prepareTransaction": 1}, 1)["prepareTimestamp"]
    # A reader that waits for the decision ends at its maxTimeMS.
    with pytest.raises(OperationFailure) as e:
        c.test.command({"find": "pc", "maxTimeMS": 200})
    assert e.value.code == 50
    # A plain write of the prepared document waits, then applies on top of the commit.
    res = {}
    th = threading.Thread(target=lambda: res.update(
        r=_client(rs_node).test.pc.update_one({"_id": 1}, {"$inc": {"v": 10}}).modified_count))
    th.start()
    th.join(0.5)
    assert th.is_alive()
    # A transaction's statement waiting there shows in currentOp with its transaction.
    raw2 = Raw(rs_node)
    th2 = threading.Thread(target=lambda: res.update(
        f=raw2("test", {"find": "pc", "filter": {"_id": 1}}, 7, start=True)))
    th2.start()

    def waiting_txn():
        ops = c.admin.command({"currentOp": 1, "active": True})["inprog"]
        return [o for o in ops if o.get("transaction", {}).get("parameters", {})
                .get("txnNumber") == 7]

    mine = shale_wait(waiting_txn, timeout=10, what="the statement in currentOp")
    assert mine[0]["transaction"]["parameters"]["autocommit"] is False
    assert "expiryTime" in mine[0]["transaction"]
    cts = Timestamp(pts.time, pts.inc + 1)
    assert raw("admin", {"commitTransaction": 1, "commitTimestamp": cts}, 1)["ok"] == 1
    th.join(10)
    th2.join(10)
    assert res["r"] == 1 and c.test.pc.find_one({"_id": 1})["v"] == 11
    # The waiting statement completes once the decision is in.
    assert res["f"]["ok"] == 1 and len(res["f"]["cursor"]["firstBatch"]) == 1
    raw.close()
    raw2.close()


def test_concurrent_transfers_conserve_the_total(rs_node):
    c = _client(rs_node)
    c.test.bank.insert_many([{"_id": i, "bal": 100} for i in range(10)])
    errors = []

    def worker(seed):
        import random
        rnd = random.Random(seed)
        cl = _client(rs_node)
        for _ in range(15):
            a, b = rnd.sample(range(10), 2)

            def tx(s):
                cl.test.bank.update_one({"_id": a}, {"$inc": {"bal": -1}}, session=s)
                cl.test.bank.update_one({"_id": b}, {"$inc": {"bal": 1}}, session=s)
            try:
                with cl.start_session() as s:
                    s.with_transaction(tx)
            except Exception as e:  # noqa: BLE001 -- reported below
                errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(d["bal"] for d in c.test.bank.find()) == 1000
    st = c.admin.command("serverStatus")["transactions"]
    assert st["totalCommitted"] >= 90 and st["currentOpen"] == 0


def test_snapshot_at_cluster_time_as_a_router_sends_it(rs_node):
    c = _client(rs_node)
    t0 = c.test.command({"insert": "ct", "documents": [{"_id": 1, "v": 1}]})["operationTime"]
    c.test.ct.update_one({"_id": 1}, {"$set": {"v": 2}})
    raw = Raw(rs_node)
    r = raw("test", {"find": "ct"}, 1, start=True,
            readConcern={"level": "snapshot", "atClusterTime": t0}, coordinator=True)
    assert r["cursor"]["firstBatch"] == [{"_id": 1, "v": 1}]
    # A write of the transaction over a newer version conflicts (snapshot isolation).
    r = raw("test", {"update": "ct", "updates": [{"q": {"_id": 1}, "u": {"$set": {"v": 3}}}]}, 1)
    assert r["code"] == 112 and "TransientTransactionError" in r["errorLabels"]
    assert c.test.ct.find_one({"_id": 1})["v"] == 2
    # An unknown readConcern level is refused when the transaction starts.
    r = raw("test", {"find": "ct"}, 2, start=True, readConcern={"level": "available"})
    assert r["code"] == 72
    raw.close()


def test_ddl_in_a_transaction_as_mongodb_7(rs_node):
    c = _client(rs_node)
    c.test.old.insert_one({"_id": 1})
    with c.start_session() as s:
        s.start_transaction()
        c.test.create_collection("fresh", session=s)
        c.test.fresh.create_index("a", session=s)
        c.test.fresh.insert_one({"_id": 1, "a": 1}, session=s)
        c.test.implicit.insert_one({"_id": 1}, session=s)
        s.abort_transaction()
    names = c.test.list_collection_names()
    assert "fresh" not in names and "implicit" not in names
    with c.start_session() as s:
        with s.start_transaction():
            c.test.create_collection("fresh", session=s)
            c.test.fresh.create_index("a", session=s)
            c.test.fresh.insert_one({"_id": 1, "a": 1}, session=s)
            c.test.implicit.insert_one({"_id": 1}, session=s)
            # Invisible to others until the commit.
            names = c.test.list_collection_names()
            assert "fresh" not in names and "implicit" not in names
            assert c.test.fresh.index_information() == {}
    assert {"fresh", "implicit"} <= set(c.test.list_collection_names())
    assert "a_1" in c.test.fresh.index_information()
    assert c.test.fresh.find_one() == {"_id": 1, "a": 1}
    # An index on a collection that existed before the transaction, or other DDL: refused.
    with c.start_session() as s:
        s.start_transaction()
        with pytest.raises(OperationFailure) as e:
            c.test.old.create_index("b", session=s)
        assert e.value.code == 263
        s.abort_transaction()
        s.start_transaction()
        with pytest.raises(OperationFailure) as e:
            c.test.command({"drop": "old"}, session=s)
        assert e.value.code == 263
        s.abort_transaction()
    assert c.test.old.count_documents({}) == 1


def test_read_only_participant_prepares_and_commits(rs_node):
    c = _client(rs_node)
    c.test.ro.insert_one({"_id": 1})
    raw = Raw(rs_node)
    r = raw("test", {"find": "ro"}, 1, start=True)
    assert r["cursor"]["firstBatch"] == [{"_id": 1}]
    pts = raw("admin", {"prepareTransaction": 1}, 1)["prepareTimestamp"]
    entry = c.local.oplog.rs.find_one({"ts": pts})
    assert entry["o"] == {"applyOps": [], "prepare": True}
    r = raw("admin", {"commitTransaction": 1, "commitTimestamp": pts}, 1)
    assert r["ok"] == 1
    assert raw("admin", {"commitTransaction": 1, "commitTimestamp": pts}, 1)["ok"] == 1
    raw.close()


def test_new_transaction_on_a_session_waits_behind_its_prepared_one(rs_node):
    """MongoDB: a new transaction (or retryable write) on a session blocks behind the session's
    prepared transaction until its decision arrives, instead of failing with
    PreparedTransactionInProgress; a newer txnNumber without startTransaction is
    NoSuchTransaction at once; the wait ends at maxTimeMS."""
    c = _client(rs_node)
    raw = Raw(rs_node)
    pts = _prepare(raw, 1, [{"_id": "w1"}], coll="pw")
    # Error precedence: no startTransaction is no wait.
    assert raw("test", {"insert": "pw", "documents": [{"_id": "x"}]}, 2)["code"] == 251
    # The wait is bounded by the statement's maxTimeMS.
    r = raw("test", {"insert": "pw", "documents": [{"_id": "x"}]}, 2, start=True, maxTimeMS=200)
    assert r["code"] == 50, r
    res = {}
    later = Raw(rs_node, lsid=raw.lsid)

    def next_txn():
        res["ins"] = later("test", {"insert": "pw", "documents": [{"_id": "w2"}]}, 2, start=True)
        res["commit"] = later("admin", {"commitTransaction": 1}, 2)

    th = threading.Thread(target=next_txn)
    th.start()

    def waiting():
        ops = c.admin.command({"currentOp": 1, "active": True})["inprog"]
        return [o for o in ops if o.get("command", {}).get("insert") == "pw"]

    shale_wait(waiting, timeout=10, what="the new transaction waiting in currentOp")
    assert th.is_alive()
    cts = Timestamp(pts.time, pts.inc + 1)
    assert raw("admin", {"commitTransaction": 1, "commitTimestamp": cts}, 1)["ok"] == 1
    th.join(10)
    assert res["ins"]["ok"] == 1, res
    assert res["commit"]["ok"] == 1, res
    assert sorted(d["_id"] for d in c.test.pw.find()) == ["w1", "w2"]
    # A retryable write with a newer txnNumber waits for an abort decision the same way.
    _prepare(raw, 3, [{"_id": "w3"}], coll="pw")
    th = threading.Thread(target=lambda: res.update(rw=later(
        "test", {"insert": "pw", "documents": [{"_id": "w4"}]}, 4, autocommit=None)))
    th.start()
    shale_wait(waiting, timeout=10, what="the retryable write waiting in currentOp")
    assert raw("admin", {"abortTransaction": 1}, 3)["ok"] == 1
    th.join(10)
    assert res["rw"]["ok"] == 1 and res["rw"]["n"] == 1, res
    assert sorted(d["_id"] for d in c.test.pw.find()) == ["w1", "w2", "w4"]
    raw.close()
    later.close()


def test_others_wait_to_write_a_collection_a_transaction_creates(rs_node):
    """MongoDB: a collection created inside a transaction is the transaction's until it ends
    (its collection lock): a plain write waits (until its maxTimeMS), another transaction's
    statement gets LockTimeout (transient); after the commit the waiting write lands in it,
    after an abort the collection is gone and the write creates it anew."""
    c = _client(rs_node)
    other = _client(rs_node)
    for commit in (True, False):
        name = "pending_%s" % commit
        with c.start_session() as s:
            s.start_transaction()
            c.test.create_collection(name, session=s)
            c.test[name].insert_one({"_id": "txn"}, session=s)
            with pytest.raises(OperationFailure) as e:
                other.test.command({"insert": name, "documents": [{"_id": "x"}],
                                    "maxTimeMS": 200})
            assert e.value.code == 50
            with other.start_session() as s2:
                s2.start_transaction()
                with pytest.raises(OperationFailure) as e:
                    other.test[name].insert_one({"_id": "y"}, session=s2)
                assert e.value.code == 24 and e.value.has_error_label(
                    "TransientTransactionError")
                s2.abort_transaction()
            res = {}
            th = threading.Thread(target=lambda: res.update(
                id=other.test[name].insert_one({"_id": "later"}).inserted_id))
            th.start()
            shale_wait(lambda: [o for o in c.admin.command("currentOp")["inprog"]
                                if o.get("command", {}).get("insert") == name],
                       timeout=10, what="the plain insert waiting in currentOp")
            assert th.is_alive()
            if commit:
                s.commit_transaction()
            else:
                s.abort_transaction()
        th.join(10)
        assert res["id"] == "later"
        want = ["later", "txn"] if commit else ["later"]
        assert sorted(d["_id"] for d in c.test[name].find()) == want
