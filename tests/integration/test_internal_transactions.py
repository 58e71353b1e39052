"""Internal transactions on the router (issue 15 item 5; docs/design/transactions.md
"Internal transactions"), as a pymongo user sees them on a 2-shard cluster: a single-document
update or findAndModify that changes the shard key so that the document belongs to the other
shard moves it (WouldChangeOwningShard handled by the router in an internal transaction on a
child session), in a retryable write and in a client transaction; outside both MongoDB
refuses it."""
import pytest
from pymongo import ReturnDocument, UpdateOne
from pymongo.errors import OperationFailure, WriteError

from shale_fixtures import module_cluster

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
