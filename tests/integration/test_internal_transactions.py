"""Internal transactions on the router (issue 15 item 5; docs/design/transactions.md
"Internal transactions"), as a pymongo user sees them on a 2-shard cluster: a single-document
update or findAndModify that changes the shard key so that the document belongs to the other
shard moves it (WouldChangeOwningShard handled by the router in an internal transaction on a
child session), in a retryable write and in a client transaction; outside both MongoDB
refuses it."""
import os
import uuid

import pytest
from bson import Binary, Int64
from bson.binary import UUID_SUBTYPE
from pymongo import ReturnDocument, UpdateOne
from pymongo.errors import OperationFailure, WriteError

import wire_util
from shale_fixtures import Background, fail_point, logged, module_cluster, wait_until

DB = "itx"
NS = DB + ".moves"


@pytest.fixture(scope="module")
def cl(request):
    """itx.moves sharded on x: x < 0 on shard0, x >= 0 on shard1."""
    with module_cluster(request, routers=1, shards=2) as c:
        r = c.router.client()
        r.admin.command("enableSharding", DB, primaryShard="shard0")
        r.admin.command("shardCollection", NS, key={"x": 1})
        r.admin.command("split", NS, middle={"x": 0})
        r.admin.command("moveChunk", NS, find={"x": 0}, to="shard1")
        yield c


def reshard(c, coll):
    """A fresh collection sharded on x: x < 0 on shard0, x >= 0 on shard1."""
    c[DB][coll].drop()
    c.admin.command("shardCollection", DB + "." + coll, key={"x": 1})
    c.admin.command("split", DB + "." + coll, middle={"x": 0})
    c.admin.command("moveChunk", DB + "." + coll, find={"x": 0}, to="shard1")


def on_shard(cl, i, _id):
    return cl.shard_client(i)[DB].moves.find_one({"_id": _id})


def test_update_one_moves_document_to_other_shard(cl):
    c = cl.router.client()  # retryWrites=True: a retryable write
    c[DB].moves.insert_one({"_id": "u1", "x": -5, "v": 1})
    res = c[DB].moves.update_one({"_id": "u1", "x": -5}, {"$set": {"x": 5}, "$inc": {"v": 1}})
    assert (res.matched_count, res.modified_count) == (1, 1)
    assert c[DB].moves.find_one({"_id": "u1"}) == {"_id": "u1", "x": 5, "v": 2}
    assert on_shard(cl, 0, "u1") is None
    assert on_shard(cl, 1, "u1") == {"_id": "u1", "x": 5, "v": 2}
    # And back again, by a replacement.
    res = c[DB].moves.replace_one({"x": 5}, {"_id": "u1", "x": -7, "v": 3})
    assert (res.matched_count, res.modified_count) == (1, 1)
    assert on_shard(cl, 0, "u1") == {"_id": "u1", "x": -7, "v": 3}
    assert on_shard(cl, 1, "u1") is None


def test_large_document_moves_to_other_shard(cl):
    """The shard's WouldChangeOwningShard answer carries images of any size."""
    c = cl.router.client()
    big = "b" * 300000
    c[DB].moves.insert_one({"_id": "big1", "x": -70, "pad": big})
    res = c[DB].moves.update_one({"_id": "big1", "x": -70}, {"$set": {"x": 70}})
    assert (res.matched_count, res.modified_count) == (1, 1)
    assert on_shard(cl, 0, "big1") is None
    assert on_shard(cl, 1, "big1") == {"_id": "big1", "x": 70, "pad": big}
    doc = c[DB].moves.find_one_and_update({"x": 70}, {"$set": {"x": -71}},
                                          return_document=ReturnDocument.AFTER)
    assert doc == {"_id": "big1", "x": -71, "pad": big}
    assert on_shard(cl, 0, "big1")["x"] == -71


def test_update_in_a_batch_moves_only_its_document(cl):
    c = cl.router.client()
    c[DB].moves.insert_many([{"_id": "b1", "x": -10}, {"_id": "b2", "x": -11}])
    res = c[DB].moves.bulk_write([
        UpdateOne({"x": -10}, {"$set": {"x": 10}}),
        UpdateOne({"x": -11}, {"$set": {"y": 1}}),
    ])
    assert (res.matched_count, res.modified_count) == (2, 2)
    assert on_shard(cl, 1, "b1") == {"_id": "b1", "x": 10}
    assert on_shard(cl, 0, "b2") == {"_id": "b2", "x": -11, "y": 1}


def test_find_one_and_update_moves_and_returns_images(cl):
    c = cl.router.client()
    c[DB].moves.insert_one({"_id": "f1", "x": -20, "v": 1})
    before = c[DB].moves.find_one_and_update({"x": -20}, {"$set": {"x": 20}})
    assert before == {"_id": "f1", "x": -20, "v": 1}
    after = c[DB].moves.find_one_and_update({"x": 20}, {"$set": {"x": -21}, "$inc": {"v": 1}},
                                            return_document=ReturnDocument.AFTER,
                                            projection={"_id": 0, "v": 1})
    assert after == {"v": 2}
    assert on_shard(cl, 0, "f1") == {"_id": "f1", "x": -21, "v": 2}
    assert on_shard(cl, 1, "f1") is None


def test_move_refused_outside_retryable_write_or_transaction(cl):
    c = cl.router.client(retryWrites=False)
    c[DB].moves.insert_one({"_id": "n1", "x": -30})
    with pytest.raises(WriteError) as e:
        c[DB].moves.update_one({"x": -30}, {"$set": {"x": 30}})
    assert e.value.code == 20  # IllegalOperation
    assert "retryWrites: true" in str(e.value)
    assert on_shard(cl, 0, "n1") == {"_id": "n1", "x": -30}


def test_move_inside_client_transaction(cl):
    c = cl.router.client()
    c[DB].moves.insert_one({"_id": "t1", "x": -40})

    def body(s):
        r = c[DB].moves.update_one({"x": -40}, {"$set": {"x": 40}}, session=s)
        assert r.modified_count == 1
        assert c[DB].moves.find_one({"_id": "t1"}, session=s)["x"] == 40

    with c.start_session() as s:
        s.with_transaction(body)
    assert on_shard(cl, 0, "t1") is None
    assert on_shard(cl, 1, "t1") == {"_id": "t1", "x": 40}


def test_aborted_client_transaction_leaves_document(cl):
    c = cl.router.client()
    c[DB].moves.insert_one({"_id": "t2", "x": -41})
    with c.start_session() as s:
        s.start_transaction()
        c[DB].moves.update_one({"x": -41}, {"$set": {"x": 41}}, session=s)
        s.abort_transaction()
    assert on_shard(cl, 0, "t2") == {"_id": "t2", "x": -41}
    assert on_shard(cl, 1, "t2") is None


def test_move_onto_existing_id_fails_with_duplicate_key(cl):
    c = cl.router.client()
    c[DB].moves.insert_many([{"_id": "d1", "x": -50}])
    # Another document with the same _id already sits on shard1 (written there directly).
    cl.shard_client(1)[DB].moves.insert_one({"_id": "d1", "x": 51})
    try:
        with pytest.raises(WriteError) as e:
            c[DB].moves.update_one({"x": -50}, {"$set": {"x": 50}})
        assert e.value.code == 11000
        # The internal transaction aborted: the document is still where it was.
        assert on_shard(cl, 0, "d1") == {"_id": "d1", "x": -50}
    finally:
        cl.shard_client(1)[DB].moves.delete_one({"_id": "d1"})


def test_internal_sessions_are_not_user_sessions(cl):
    c = cl.router.client()
    c[DB].moves.insert_one({"_id": "s1", "x": -60})
    with c.start_session() as s:
        c[DB].moves.update_one({"x": -60}, {"$set": {"x": 60}}, session=s)
        lsid = s.session_id
    # The shards recorded the internal transaction under a child session of the user's:
    # {id, uid, txnNumber, txnUUID} with the user's id.
    kids = [d for i in range(2)
            for d in cl.shard_client(i).config.transactions.find({"_id.id": lsid["id"]})
            if "txnUUID" in d["_id"]]
    assert kids, "no child session record"
    assert all("txnNumber" in k["_id"] for k in kids)


# ---------------------------------------------------------------- writes without shard key


def test_update_one_and_delete_one_without_shard_key(cl):
    c = cl.router.client()
    reshard(c, "nokey")
    c[DB].nokey.insert_many([{"_id": i, "x": x, "g": "a"} for i, x in enumerate((-3, -2, 2, 3))])
    res = c[DB].nokey.update_one({"g": "a"}, {"$set": {"hit": True}})
    assert (res.matched_count, res.modified_count) == (1, 1)
    assert c[DB].nokey.count_documents({"hit": True}) == 1
    # Only on the shard that holds a match.
    res = c[DB].nokey.update_one({"g": "a", "x": {"$gt": 0}}, {"$inc": {"n": 1}})
    assert res.modified_count == 1
    assert cl.shard_client(1)[DB].nokey.count_documents({"n": 1}) == 1
    # No match anywhere: nothing.
    res = c[DB].nokey.update_one({"g": "zzz"}, {"$set": {"hit": True}})
    assert (res.matched_count, res.modified_count) == (0, 0)
    res = c[DB].nokey.delete_one({"g": "a"})
    assert res.deleted_count == 1
    assert c[DB].nokey.count_documents({"g": "a"}) == 3
    # Ordered and unordered batches mixing both kinds of statements.
    r = c[DB].command("update", "nokey", updates=[
        {"q": {"x": -2}, "u": {"$set": {"b": 1}}},
        {"q": {"g": "a"}, "u": {"$set": {"b": 2}}},
        {"q": {"x": 3}, "u": {"$set": {"b": 3}}}], ordered=True)
    assert (r["n"], r["nModified"]) == (3, 3)
    r = c[DB].command("delete", "nokey", deletes=[
        {"q": {"g": "a"}, "limit": 1}, {"q": {"g": "a"}, "limit": 1},
        {"q": {"g": "nothing"}, "limit": 1}], ordered=False)
    assert r["n"] == 2
    assert c[DB].nokey.count_documents({}) == 1


def test_find_and_modify_without_shard_key(cl):
    c = cl.router.client()
    reshard(c, "famk")
    c[DB].famk.insert_many([{"_id": 1, "x": -1, "tag": "p"}, {"_id": 2, "x": 1, "tag": "q"}])
    doc = c[DB].famk.find_one_and_update({"tag": "q"}, {"$set": {"seen": 1}},
                                         return_document=ReturnDocument.AFTER)
    assert doc == {"_id": 2, "x": 1, "tag": "q", "seen": 1}
    assert c[DB].famk.find_one_and_update({"tag": "none"}, {"$set": {"seen": 1}}) is None
    assert c[DB].famk.find_one_and_delete({"tag": "p"}) == {"_id": 1, "x": -1, "tag": "p"}
    assert cl.shard_client(0)[DB].famk.count_documents({}) == 0
    # Changing the shard key of a document found without it moves it too.
    doc = c[DB].famk.find_one_and_update({"tag": "q"}, {"$set": {"x": -9}},
                                         return_document=ReturnDocument.AFTER)
    assert doc["x"] == -9
    assert cl.shard_client(0)[DB].famk.find_one({"_id": 2})["x"] == -9
    assert cl.shard_client(1)[DB].famk.count_documents({}) == 0


def test_write_without_shard_key_in_client_transaction(cl):
    c = cl.router.client()
    reshard(c, "nokey")
    c[DB].nokey.insert_many([{"_id": "t%d" % x, "x": x, "g": "t"} for x in (-1, 1)])

    def body(s):
        assert c[DB].nokey.update_one({"g": "t", "x": {"$gt": 0}}, {"$set": {"in": 1}},
                                      session=s).modified_count == 1
        assert c[DB].nokey.delete_one({"g": "t", "x": {"$lt": 0}}, session=s).deleted_count == 1

    with c.start_session() as s:
        s.with_transaction(body)
    assert sorted((d["_id"], d.get("in")) for d in c[DB].nokey.find({"g": "t"})) == [("t1", 1)]


def test_update_by_id_never_misses_during_migrations(cl):
    """updateOne({_id}) on a collection sharded on another key, while its chunk moves back and
    forth: every update finds the document (n: 1), none is lost."""
    import threading
    c = cl.router.client()
    ns = DB + ".mig"
    c[DB].mig.drop()
    c.admin.command("shardCollection", ns, key={"x": 1})
    c.admin.command("split", ns, middle={"x": 0})
    c[DB].mig.insert_many([{"_id": i, "x": i, "n": 0} for i in range(1, 6)])
    stop = threading.Event()
    moves = []
    errors = []

    def mover():
        a = cl.router.client()
        to = ["shard1", "shard0"]
        failed = 0
        while not stop.is_set():
            dest = to[len(moves) % 2]
            try:
                a.admin.command("moveChunk", ns, find={"x": 1}, to=dest,
                                _waitForDelete=True)
                moves.append(dest)
            except OperationFailure as e:
                # A migration that fails is not this test's subject (it is retried); one
                # that never succeeds is.
                failed += 1
                if failed > 20:
                    errors.append(e)
                    return

    clients = [c, cl.router.client(retryWrites=False)]
    t = threading.Thread(target=mover)
    t.start()
    updates = 0
    misses = []
    try:
        while len(moves) < int(os.environ.get("ITX_MOVES", "8")) and not errors:
            for i in range(1, 6):
                # Retryable (broadcast by _id) and not (two-phase) in turn.
                res = clients[i % 2][DB].mig.update_one({"_id": i}, {"$inc": {"n": 1}})
                updates += 1
                if res.matched_count != 1:
                    misses.append((i, len(moves)))
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert misses == []
    if sum(d["n"] for d in c[DB].mig.find()) != updates:
        # Known (issue 15 item 6, not this branch): a transaction committing on the donor
        # after the migration's last catch-up loses its write on the recipient.
        pytest.xfail("an update committed in a transaction during a migration was lost")


def test_non_retryable_update_by_id_runs_two_phase(cl):
    """Without retryWrites an exact _id match reaching both shards is a write without shard
    key too; a retryable one is broadcast, each shard deduplicating its own retries."""
    c = cl.router.client(retryWrites=False)
    reshard(c, "nokey")
    c[DB].nokey.insert_many([{"_id": "i1", "x": -1}, {"_id": "i2", "x": 1}])
    assert c[DB].nokey.update_one({"_id": "i2"}, {"$set": {"a": 1}}).modified_count == 1
    assert c[DB].nokey.delete_one({"_id": "i1"}).deleted_count == 1
    assert c[DB].nokey.find_one_and_update({"_id": "i2"}, {"$set": {"a": 2}})["a"] == 1
    assert list(c[DB].nokey.find({}, {"_id": 1, "a": 1})) == [{"_id": "i2", "a": 2}]


def test_find_and_modify_without_shard_key_follows_sort_across_shards(cl):
    c = cl.router.client()
    reshard(c, "famk")
    c[DB].famk.insert_many([{"_id": 10, "x": -3, "r": 5, "g": "s"},
                            {"_id": 11, "x": 3, "r": 1, "g": "s"},
                            {"_id": 12, "x": 4, "r": 9, "g": "s"}])
    doc = c[DB].famk.find_one_and_update({"g": "s"}, {"$set": {"picked": 1}}, sort=[("r", 1)])
    assert doc["_id"] == 11
    doc = c[DB].famk.find_one_and_delete({"g": "s"}, sort=[("r", -1)])
    assert doc["_id"] == 12
    assert sorted(d["_id"] for d in c[DB].famk.find({"g": "s"})) == [10, 11]


def test_concurrent_writes_without_shard_key_lose_no_update(cl):
    """Several clients increment the one matching document without its shard key: write
    conflicts between their internal transactions are retried, every increment lands once."""
    import threading
    c = cl.router.client()
    reshard(c, "nokey")
    c[DB].nokey.insert_many([{"_id": "c1", "x": 7, "g": "c", "n": 0},
                             {"_id": "c2", "x": -7, "g": "other"}])
    errors = []

    def worker(retryable):
        cli = cl.router.client(retryWrites=retryable)
        try:
            for _ in range(20):
                res = cli[DB].nokey.update_one({"g": "c"}, {"$inc": {"n": 1}})
                assert res.modified_count == 1
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i % 2 == 0,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert c[DB].nokey.find_one({"_id": "c1"})["n"] == 80


def test_concurrent_moves_keep_exactly_one_copy(cl):
    """Two clients keep moving the same document between the shards (and counting): it is
    never duplicated or lost, and every update that reported a match applied once. (An update
    by _id may match nothing while the other client's move commits on the two shards: reads
    outside a transaction are not one point in time across shards, as on MongoDB.)"""
    import threading
    c = cl.router.client()
    c[DB].moves.delete_many({"_id": "cm"})
    c[DB].moves.insert_one({"_id": "cm", "x": -1, "n": 0})
    errors = []
    matched = []

    def worker(sign):
        cli = cl.router.client()
        try:
            for i in range(15):
                res = cli[DB].moves.update_one({"_id": "cm"},
                                               {"$set": {"x": sign * (i + 1)}, "$inc": {"n": 1}})
                matched.append(res.matched_count)
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (1, -1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    copies = [d for i in range(2) for d in cl.shard_client(i)[DB].moves.find({"_id": "cm"})]
    assert len(copies) == 1
    assert len(matched) == 30 and sum(matched) >= 15
    assert copies[0]["n"] == sum(matched)


def test_broadcast_update_that_matched_does_not_move_the_document_again(cl):
    """A retryable updateOne by _id goes to both shards, which do not answer at one instant:
    it updates the document in place on shard0; another client then moves the document to
    shard1; the statement's late request to shard1 meets the document again and answers
    WouldChangeOwningShard. The statement matched once already: the router must not move
    the document back (that applied it a second time; the count was then one ahead of the
    updates reported, as test_concurrent_moves_keep_exactly_one_copy saw under load)."""
    c = cl.router.client()
    c[DB].moves.insert_one({"_id": "late", "x": -1, "n": 0})
    shard1 = cl.shard_client(1)
    data = {"failCommands": ["update"], "blockConnection": True, "blockTimeMS": 1500,
            "failInternalCommands": True}
    entered = fail_point(shard1, "failCommand", "alwaysOn", data)["count"]
    try:
        first = Background(lambda: cl.router.client()[DB].moves.update_one(
            {"_id": "late"}, {"$set": {"x": -2}, "$inc": {"n": 1}}))
        wait_until(lambda: fail_point(shard1, "failCommand", "alwaysOn", data)["count"] > entered,
                   what="the first update's request to shard1 to block")
    finally:
        fail_point(shard1, "failCommand", "off")
    assert on_shard(cl, 0, "late") == {"_id": "late", "x": -2, "n": 1}
    res = c[DB].moves.update_one({"_id": "late"}, {"$set": {"x": 5}, "$inc": {"n": 1}})
    assert res.matched_count == 1
    first.join(30)
    assert first.done and first.error is None, first.error
    assert first.result.matched_count == 1
    assert on_shard(cl, 0, "late") is None
    assert on_shard(cl, 1, "late") == {"_id": "late", "x": 5, "n": 2}


def test_upsert_without_shard_key(cl):
    c = cl.router.client()
    reshard(c, "nokey")
    res = c[DB].nokey.update_one({"g": "up"}, {"$set": {"x": 9, "v": 1}}, upsert=True)
    assert res.upserted_id is not None and res.matched_count == 0
    assert cl.shard_client(1)[DB].nokey.find_one({"g": "up"})["_id"] == res.upserted_id
    # Now it matches: updated, not inserted again.
    res = c[DB].nokey.update_one({"g": "up"}, {"$inc": {"v": 1}}, upsert=True)
    assert (res.matched_count, res.modified_count, res.upserted_id) == (1, 1, None)
    assert c[DB].nokey.count_documents({"g": "up"}) == 1
    # Without a shard key value the document goes where a null key belongs (x < 0).
    res = c[DB].nokey.update_one({"g": "nullkey"}, {"$set": {"v": 1}}, upsert=True)
    assert cl.shard_client(0)[DB].nokey.find_one({"_id": res.upserted_id})["g"] == "nullkey"
    r = c[DB].command("update", "nokey", updates=[
        {"q": {"g": "b1"}, "u": {"$set": {"x": -3}}, "upsert": True},
        {"q": {"g": "b2"}, "u": {"$set": {"x": 3}}, "upsert": True}], ordered=False)
    assert r["n"] == 2 and [u["index"] for u in r["upserted"]] == [0, 1]


# ---------------------------------------------------------------- retries of retryable writes
# A retryable write the router ran as an internal transaction, sent again with the same lsid
# and txnNumber (as a driver does when the reply was lost), is applied once and answered as
# the first time plus retriedStmtIds. Raw commands carry the exact lsid and txnNumber.


class Raw:
    """Raw commands to the router on one connection, all with one lsid."""

    def __init__(self, cl):
        import uuid
        from bson import Binary
        self.sock = wire_util.connect(cl.router.port)
        self.lsid = {"id": Binary(uuid.uuid4().bytes, 4)}

    def __call__(self, cmd, txn_number):
        from bson import Int64
        body = dict(cmd)
        body.update({"lsid": self.lsid, "txnNumber": Int64(txn_number), "$db": DB})
        r = wire_util.command(self.sock, body)
        for k in ("$clusterTime", "operationTime"):
            r.pop(k, None)
        return r

    def close(self):
        self.sock.close()


def _twice(raw, cmd, txn_number=1):
    first = raw(cmd, txn_number)
    second = raw(cmd, txn_number)
    assert first["ok"] == 1, first
    retried = second.pop("retriedStmtIds", None) or second.pop("retriedStmtId", None)
    assert retried is not None, second
    assert first == second
    return first


def test_retried_writes_without_shard_key_apply_once(cl):
    c = cl.router.client()
    reshard(c, "rty")
    c[DB].rty.insert_many([{"_id": 1, "x": -1, "g": "a", "v": 0},
                           {"_id": 2, "x": 1, "g": "a", "v": 0},
                           {"_id": 3, "x": -2, "g": "b"}, {"_id": 4, "x": 2, "g": "b"},
                           {"_id": 5, "x": -3, "g": "c"}, {"_id": 6, "x": 3, "g": "c"}])
    raw = Raw(cl)
    try:
        r = _twice(raw, {"update": "rty", "updates": [{"q": {"g": "a"}, "u": {"$inc": {"v": 1}}}]})
        assert (r["n"], r["nModified"]) == (1, 1)
        assert sum(d["v"] for d in c[DB].rty.find({"g": "a"})) == 1
        # The update makes its filter match nothing any more: the retry still answers n: 1,
        # and does not update the other document.
        r = _twice(raw, {"update": "rty", "updates": [{"q": {"g": "b"}, "u": {"$set": {"g": "B"}}}]},
                   2)
        assert (r["n"], r["nModified"]) == (1, 1)
        assert c[DB].rty.count_documents({"g": "B"}) == 1
        r = _twice(raw, {"delete": "rty", "deletes": [{"q": {"g": "c"}, "limit": 1}]}, 3)
        assert r["n"] == 1
        assert c[DB].rty.count_documents({"g": "c"}) == 1
        r = _twice(raw, {"findAndModify": "rty", "query": {"g": "a"}, "sort": {"x": 1},
                         "update": {"$inc": {"v": 10}}, "new": True}, 4)
        assert r["value"] == {"_id": 1, "x": -1, "g": "a", "v": 11}
        assert sum(d["v"] for d in c[DB].rty.find({"g": "a"})) == 11
        r = _twice(raw, {"update": "rty", "updates": [
            {"q": {"g": "up"}, "u": {"$set": {"x": 5}, "$inc": {"v": 1}}, "upsert": True}]}, 5)
        assert r["n"] == 1 and len(r["upserted"]) == 1
        assert c[DB].rty.count_documents({"g": "up"}) == 1
        # An older write of the session is refused now.
        r = raw({"update": "rty", "updates": [{"q": {"g": "a"}, "u": {"$inc": {"v": 1}}}]}, 1)
        # (mongos reports a shard's error as the statement's write error)
        assert [e["code"] for e in r["writeErrors"]] == [225], r
        assert sum(d["v"] for d in c[DB].rty.find({"g": "a"})) == 11
    finally:
        raw.close()


def test_retried_shard_key_update_moves_once(cl):
    c = cl.router.client()
    c[DB].moves.insert_many([{"_id": "r1", "x": -40, "v": 0}, {"_id": "r2", "x": -41, "v": 0}])
    raw = Raw(cl)
    try:
        r = _twice(raw, {"update": "moves", "updates": [
            {"q": {"_id": "r1", "x": -40}, "u": {"$set": {"x": 40}, "$inc": {"v": 1}}}]})
        assert (r["n"], r["nModified"]) == (1, 1)
        assert on_shard(cl, 1, "r1") == {"_id": "r1", "x": 40, "v": 1}
        assert on_shard(cl, 0, "r1") is None
        # By _id only (broadcast first), and through findAndModify.
        r = _twice(raw, {"update": "moves", "updates": [
            {"q": {"_id": "r1"}, "u": {"$set": {"x": -40}, "$inc": {"v": 1}}}]}, 2)
        assert (r["n"], r["nModified"]) == (1, 1)
        assert on_shard(cl, 0, "r1") == {"_id": "r1", "x": -40, "v": 2}
        r = _twice(raw, {"findAndModify": "moves", "query": {"_id": "r2", "x": -41},
                         "update": {"$set": {"x": 41}, "$inc": {"v": 1}}}, 3)
        assert r["value"] == {"_id": "r2", "x": -41, "v": 0}
        assert r["lastErrorObject"]["n"] == 1
        assert on_shard(cl, 1, "r2") == {"_id": "r2", "x": 41, "v": 1}
        r = _twice(raw, {"findAndModify": "moves", "query": {"_id": "r2", "x": 41},
                         "update": {"$set": {"x": -41}, "$inc": {"v": 1}}, "new": True}, 4)
        assert r["value"] == {"_id": "r2", "x": -41, "v": 2}
        assert on_shard(cl, 0, "r2") == {"_id": "r2", "x": -41, "v": 2}
    finally:
        raw.close()


def test_retry_after_chunk_migration_applies_once(cl):
    """The shard's history of the internal transaction moves with the chunk: a retry that
    reaches the recipient is answered from it."""
    c = cl.router.client()
    reshard(c, "rtm")
    c[DB].rtm.insert_many([{"_id": 1, "x": -5, "g": "m", "v": 0},
                           {"_id": 2, "x": -6, "g": "n", "v": 0},
                           {"_id": 3, "x": 6, "g": "z"}])
    raw, raw2 = Raw(cl), Raw(cl)
    try:
        upd = {"update": "rtm", "updates": [{"q": {"g": "m"}, "u": {"$inc": {"v": 1}}}]}
        fam = {"findAndModify": "rtm", "query": {"g": "n"}, "remove": True}
        first = raw(upd, 1)
        assert (first["n"], first["nModified"]) == (1, 1)
        assert raw2(fam, 1)["value"]["_id"] == 2
        c.admin.command("moveChunk", DB + ".rtm", find={"x": -5}, to="shard1")
        assert cl.shard_client(1)[DB].rtm.find_one({"_id": 1})["v"] == 1
        second = raw(upd, 1)
        assert second.pop("retriedStmtIds") == [0] and second == first
        assert c[DB].rtm.find_one({"_id": 1})["v"] == 1
        # The findAndModify's document came along as its image.
        r = raw2(fam, 1)
        assert r["retriedStmtId"] == 0 and r["value"] == {"_id": 2, "x": -6, "g": "n", "v": 0}
        # An older write of the session: refused there too.
        raw(upd, 2)
        r = raw(upd, 1)
        assert [e["code"] for e in r.get("writeErrors", [])] == [225] or r.get("code") == 225, r
        assert c[DB].rtm.find_one({"_id": 1})["v"] == 2
    finally:
        raw.close()
        raw2.close()


def test_upserts_whose_document_belongs_to_another_shard(cl):
    """The filter targets one shard, the upsert's new document belongs to the other: it is
    inserted there in an internal transaction (MongoDB's shouldUpsert)."""
    c = cl.router.client()
    reshard(c, "ups")
    res = c[DB].ups.update_one({"x": -1, "k": "a"}, {"$set": {"x": 1}}, upsert=True)
    assert res.upserted_id is not None and res.matched_count == 0
    assert cl.shard_client(1)[DB].ups.find_one({"k": "a"})["_id"] == res.upserted_id
    assert cl.shard_client(0)[DB].ups.count_documents({}) == 0
    doc = c[DB].ups.find_one_and_update({"x": -2, "k": "b"}, {"$set": {"x": 2}}, upsert=True,
                                        return_document=ReturnDocument.AFTER)
    assert doc["x"] == 2 and doc["k"] == "b"
    assert cl.shard_client(1)[DB].ups.find_one({"k": "b"}) == doc
    # Without retryWrites nor a transaction, as MongoDB: refused.
    nr = cl.router.client(retryWrites=False)
    with pytest.raises(WriteError) as e:
        nr[DB].ups.update_one({"x": -3, "k": "c"}, {"$set": {"x": 3}}, upsert=True)
    assert e.value.code == 20
    # A findAndModify upsert without the shard key: two-phase, then inserted on its owner.
    assert c[DB].ups.find_one_and_update({"k": "d"}, {"$set": {"x": 7}}, upsert=True) is None
    assert cl.shard_client(1)[DB].ups.find_one({"k": "d"})["x"] == 7
    doc = c[DB].ups.find_one_and_update({"k": "d"}, {"$inc": {"n": 1}}, upsert=True,
                                        return_document=ReturnDocument.AFTER)
    assert (doc["x"], doc["n"]) == (7, 1)
    assert c[DB].ups.count_documents({"k": "d"}) == 1
    # Retried with the same lsid and txnNumber: inserted once.
    raw = Raw(cl)
    try:
        r = _twice(raw, {"findAndModify": "ups", "query": {"k": "e"}, "update": {"$set": {"x": -8}},
                         "upsert": True, "new": True})
        assert r["value"]["x"] == -8 and r["lastErrorObject"]["upserted"] == r["value"]["_id"]
        assert c[DB].ups.count_documents({"k": "e"}) == 1
        # A cross-shard upsert retried: inserted once, the same _id answered.
        r = _twice(raw, {"update": "ups", "updates": [
            {"q": {"x": -9, "k": "f"}, "u": {"$set": {"x": 9}, "$inc": {"n": 1}},
             "upsert": True}]}, 2)
        assert r["n"] == 1 and len(r["upserted"]) == 1
        assert list(c[DB].ups.find({"k": "f"}, {"_id": 0})) == [{"x": 9, "k": "f", "n": 1}]
    finally:
        raw.close()


def test_retry_after_the_shard_restarted_applies_once(cl):
    """The answers of a committed retryable internal transaction are in its oplog entry: a
    shard killed and restarted still answers the retry."""
    c = cl.router.client()
    reshard(c, "rtk")
    c[DB].rtk.insert_many([{"_id": 1, "x": -1, "g": "k", "v": 0}, {"_id": 2, "x": 3}])
    raw = Raw(cl)
    upd = {"update": "rtk", "updates": [{"q": {"g": "k"}, "u": {"$inc": {"v": 1}}}],
           "writeConcern": {"w": 1, "j": True}}
    first = raw(upd, 1)
    assert (first["n"], first["nModified"]) == (1, 1)
    raw.close()
    cl.shards[0].kill()
    cl.restart_shard(0)
    again = Raw(cl)
    again.lsid = raw.lsid
    try:
        second = again(upd, 1)
        assert second.pop("retriedStmtIds", None) == [0], second
        assert second == first
        assert c[DB].rtk.find_one({"_id": 1})["v"] == 1
    finally:
        again.close()


def test_retry_meeting_its_open_first_attempt_aborts_it_once_then_waits(cl):
    """A retry of a retryable write as a new internal transaction (a new txnUUID, e.g. through
    a second router) that meets the first attempt's transaction still open and unprepared on
    the shard aborts it and runs (MongoDB 7.0's checkForConflictingInternalTransactions: the
    first attempt's client is taken to have given up); a later conflict for the same write
    waits for the open attempt instead (RetryableTransactionInProgress, waited out on the
    shard; bounded by maxTimeMS) and is then answered from its commit; a prepared attempt
    is always waited for."""
    shard = cl.shard_client(0)
    shard[DB].race.insert_one({"_id": "seed"})
    parent = None

    def child():
        return {"id": parent, "txnNumber": Int64(7), "txnUUID": Binary(uuid.uuid4().bytes,
                                                                        UUID_SUBTYPE)}

    def send(sock, lsid, cmd, db=DB, **extra):
        body = dict(cmd, lsid=lsid, txnNumber=Int64(0), autocommit=False, **extra)
        body["$db"] = db
        return wire_util.command(sock, body)

    def waiting():  # a retry's insert still running
        return [o for o in shard.admin.command("currentOp")["inprog"]
                if o.get("command", {}).get("insert") == "race"]

    insert = {"insert": "race", "documents": [{"_id": "once", "n": 1}], "stmtId": 0}
    socks = [wire_util.connect(cl.shards[0].port) for _ in range(3)]
    try:
        # The first conflict aborts the open first attempt; the retry runs the write.
        parent = Binary(uuid.uuid4().bytes, UUID_SUBTYPE)
        first, retry, late = child(), child(), child()
        assert send(socks[0], first, insert, startTransaction=True)["ok"] == 1
        r = send(socks[1], retry, insert, startTransaction=True, maxTimeMS=5000)
        assert r["ok"] == 1 and r["n"] == 1 and "retriedStmtIds" not in r, r
        r = send(socks[0], first, {"commitTransaction": 1}, db="admin")
        assert r["ok"] == 0 and r["code"] == 251, r
        # A second conflict for the same write waits for the open attempt (here until its
        # maxTimeMS) rather than aborting it ...
        r = send(socks[2], late, insert, startTransaction=True, maxTimeMS=200)
        assert r["code"] == 50, r
        res = Background(lambda: send(socks[2], child(), insert, startTransaction=True))
        wait_until(waiting, what="the second retry waiting for the open attempt")
        assert not res.done
        # ... which commits, and the waiting retry is answered from it.
        assert send(socks[1], retry, {"commitTransaction": 1}, db="admin")["ok"] == 1
        res.join(10)
        assert res.done and res.result["ok"] == 1 and res.result["n"] == 1, res.result
        assert res.result.get("retriedStmtIds") == [0], res.result
        assert shard[DB].race.count_documents({"_id": "once"}) == 1

        # A prepared first attempt is never aborted: the retry waits for its decision and is
        # answered from its commit.
        parent = Binary(uuid.uuid4().bytes, UUID_SUBTYPE)
        first, retry = child(), child()
        insert["documents"] = [{"_id": "prepared"}]
        assert send(socks[0], first, insert, startTransaction=True)["ok"] == 1
        prep = send(socks[0], first, {"prepareTransaction": 1}, db="admin")
        assert prep["ok"] == 1, prep
        res = Background(lambda: send(socks[1], retry, insert, startTransaction=True))
        wait_until(waiting, what="the retry waiting for the prepared first attempt")
        assert not res.done
        assert send(socks[0], first, {"commitTransaction": 1}, db="admin",
                    commitTimestamp=prep["prepareTimestamp"])["ok"] == 1
        res.join(10)
        assert res.done and res.result["ok"] == 1 and res.result["n"] == 1, res.result
        assert res.result.get("retriedStmtIds") == [0], res.result
        assert send(socks[1], retry, {"commitTransaction": 1}, db="admin")["ok"] == 1
        assert shard[DB].race.count_documents({"_id": "prepared"}) == 1
    finally:
        for s in socks:
            s.close()


def test_retry_through_a_second_router_aborts_the_stalled_first_attempt(cl):
    """Through the routers: a retryable updateOne without the shard key runs as an internal
    transaction; its first attempt is held open before its commit (a fail point on the
    first router), and the client retries the write through a second router. The retry's
    transaction meets the open attempt on the shards and aborts it (MongoDB 7.0) instead of
    waiting for transactionLifetimeLimitSeconds; when the first router goes on, its commit
    finds its attempt aborted, it runs again and is answered from the retry's commit: both
    routers answer n: 1 and the update applied once."""
    c = cl.router.client()
    reshard(c, "stall")
    c[DB].stall.insert_many([{"_id": 1, "x": -1, "g": "a", "v": 0},
                             {"_id": 2, "x": 1, "g": "b", "v": 0}])
    second = cl.add_router()
    lsid = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
    cmd = {"update": "stall", "updates": [{"q": {"g": "a"}, "u": {"$inc": {"v": 1}}}],
           "lsid": lsid, "txnNumber": Int64(4), "$db": DB}
    fp = "hangBeforeCommittingInternalTransaction"
    c.admin.command("configureFailPoint", fp, mode={"times": 1})
    socks = [wire_util.connect(p.port) for p in (cl.router, second)]
    try:
        first = Background(lambda: wire_util.command(socks[0], dict(cmd)))
        wait_until(lambda: logged(cl.router, 5918602),
                   what="the first attempt held before its commit")
        r = wire_util.command(socks[1], dict(cmd, maxTimeMS=20000))
        assert r["ok"] == 1 and (r["n"], r["nModified"]) == (1, 1), r
        c.admin.command("configureFailPoint", fp, mode="off")
        first.join(30)
        assert first.done and first.result["ok"] == 1, first.result
        assert (first.result["n"], first.result["nModified"]) == (1, 1), first.result
        assert c[DB].stall.find_one({"_id": 1})["v"] == 1
    finally:
        c.admin.command("configureFailPoint", fp, mode="off")
        for s in socks:
            s.close()
        second.stop()


def test_find_and_modify_retried_in_a_child_transaction_is_answered_from_its_image(cl):
    """A findAndModify that ran as a plain retryable write (here, or on a migration's donor
    that sent its history and image along) and is retried inside a retryable internal
    transaction of the same write is answered from its image, not refused (217) nor run
    again."""
    c = cl.router.client()
    reshard(c, "famimg")
    c[DB].famimg.insert_many([{"_id": 1, "x": -5, "v": 0}, {"_id": 2, "x": -6, "v": 0}])
    parent = Binary(uuid.uuid4().bytes, UUID_SUBTYPE)

    def run(shard, cmd, lsid, txn_number, db=DB, **extra):
        sock = wire_util.connect(cl.shards[shard].port)
        try:
            return wire_util.command(sock, dict(cmd, lsid=lsid, txnNumber=Int64(txn_number),
                                                 stmtId=0, **extra, **{"$db": db}))
        finally:
            sock.close()

    def retry_in_child(shard, cmd, n):
        child = {"id": parent, "txnNumber": Int64(n),
                 "txnUUID": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
        r = run(shard, cmd, child, 0, startTransaction=True, autocommit=False)
        commit = run(shard, {"commitTransaction": 1}, child, 0, db="admin", autocommit=False)
        assert commit["ok"] == 1, commit
        return r

    upd = {"findAndModify": "famimg", "query": {"_id": 1}, "update": {"$inc": {"v": 1}},
           "new": True}
    first = run(0, upd, {"id": parent}, 1)
    assert first["value"] == {"_id": 1, "x": -5, "v": 1}, first
    r = retry_in_child(0, upd, 1)
    assert r["ok"] == 1 and r["retriedStmtId"] == 0, r
    assert r["value"] == first["value"] and r["lastErrorObject"] == first["lastErrorObject"]
    # After a migration, on the recipient, from the image the donor sent.
    rem = {"findAndModify": "famimg", "query": {"_id": 2}, "remove": True}
    first = run(0, rem, {"id": parent}, 2)
    assert first["value"] == {"_id": 2, "x": -6, "v": 0}, first
    c.admin.command("moveChunk", DB + ".famimg", find={"x": -5}, to="shard1")
    r = retry_in_child(1, rem, 2)
    assert r["ok"] == 1 and r["retriedStmtId"] == 0, r
    assert r["value"] == first["value"]
    assert c[DB].famimg.find_one({"_id": 1})["v"] == 1
    assert c[DB].famimg.count_documents({"_id": 2}) == 0
