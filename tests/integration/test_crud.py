"""Everyday CRUD through pymongo against a single `shale node`: what a user sees,
including MongoDB's errors."""

import uuid

import bson
import pymongo
import pytest
from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.errors import (BulkWriteError, DuplicateKeyError, OperationFailure,
                            WriteError)


@pytest.fixture
def db(node):
    return node.client().test


# ---------------------------------------------------------------- insert

def test_insert_one_assigns_objectid(db):
    r = db.c.insert_one({"x": 1})
    assert isinstance(r.inserted_id, ObjectId)
    doc = db.c.find_one({"_id": r.inserted_id})
    assert doc == {"_id": r.inserted_id, "x": 1}


def test_insert_many_and_count(db):
    db.c.insert_many([{"_id": i, "v": i * i} for i in range(1000)])
    assert db.c.count_documents({}) == 1000
    assert db.c.estimated_document_count() == 1000
    assert db.c.find_one({"_id": 31}) == {"_id": 31, "v": 961}


def test_id_is_first_field(db):
    db.c.insert_one({"a": 1, "_id": 5})
    raw = db.command("find", "c", filter={"_id": 5})["cursor"]["firstBatch"][0]
    assert list(raw.keys())[0] == "_id"


def test_duplicate_key_error_shape(db):
    db.c.insert_one({"_id": 1})
    with pytest.raises(DuplicateKeyError) as e:
        db.c.insert_one({"_id": 1})
    err = e.value.details
    assert err["code"] == 11000
    assert "E11000 duplicate key error collection: test.c index: _id_ dup key: { _id: 1 }" \
        in err["errmsg"]
    assert err["keyPattern"] == {"_id": 1}
    assert err["keyValue"] == {"_id": 1}


def test_ordered_insert_stops_at_first_error(db):
    with pytest.raises(BulkWriteError) as e:
        db.c.insert_many([{"_id": 1}, {"_id": 1}, {"_id": 2}], ordered=True)
    res = e.value.details
    assert res["nInserted"] == 1
    assert [w["index"] for w in res["writeErrors"]] == [1]
    assert db.c.count_documents({}) == 1


def test_unordered_insert_continues(db):
    with pytest.raises(BulkWriteError) as e:
        db.c.insert_many([{"_id": 1}, {"_id": 1}, {"_id": 2}, {"_id": 2}], ordered=False)
    res = e.value.details
    assert res["nInserted"] == 2
    assert [w["index"] for w in res["writeErrors"]] == [1, 3]
    assert all(w["code"] == 11000 for w in res["writeErrors"])


def test_id_cannot_be_array_or_regex(db):
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"_id": [1, 2]})
    assert e.value.code == 2
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"_id": bson.Regex("a")})
    assert e.value.code == 2


def test_document_too_large(db):
    with pytest.raises((WriteError, pymongo.errors.DocumentTooLarge, OperationFailure)):
        db.c.insert_one({"_id": 1, "big": "x" * (16 * 1024 * 1024)})
    assert db.c.count_documents({}) == 0


def test_field_names_with_dollar_allowed_but_not_top_level_operators(db):
    # MongoDB 5.0+ allows $-prefixed and dotted field names in inserted documents (top
    # level too), but not "$"-led top-level fields in replacement updates. Debian's
    # pymongo 3.11 refuses such keys client-side in insert_one, so send the command.
    db.command("insert", "c", documents=[{"_id": 1, "a": {"b.c": 1}, "$p": 2}])
    assert db.c.find_one({"_id": 1}) == {"_id": 1, "a": {"b.c": 1}, "$p": 2}
    # ...but not inside an _id document (DollarPrefixedFieldName).
    r = db.command("insert", "c", documents=[{"_id": {"$x": 1}}])
    assert r["n"] == 0 and r["writeErrors"][0]["code"] == 52


def test_bad_namespace(node):
    c = node.client()
    with pytest.raises(OperationFailure) as e:
        c["test"].command("insert", "", documents=[{"a": 1}])
    assert e.value.code == 73
    with pytest.raises((OperationFailure, pymongo.errors.InvalidName)):
        c["bad.db"]["c"].insert_one({"a": 1})


def test_unknown_field_rejected(db):
    with pytest.raises(OperationFailure) as e:
        db.command({"insert": "c", "documents": [{"a": 1}], "bogus": 1})
    assert e.value.code == 40415


# ---------------------------------------------------------------- find / cursors

def test_find_filter_sort_projection_skip_limit(db):
    db.c.insert_many([{"_id": i, "g": i % 3, "v": i, "w": "x"} for i in range(100)])
    got = list(db.c.find({"g": 1}, {"v": 1, "_id": 0}).sort("v", -1).skip(2).limit(5))
    assert got == [{"v": v} for v in [91, 88, 85, 82, 79]]


def test_find_batches_and_getmore(db):
    db.c.insert_many([{"_id": i} for i in range(250)])
    r = db.command("find", "c", batchSize=10)
    assert len(r["cursor"]["firstBatch"]) == 10
    assert r["cursor"]["ns"] == "test.c"
    cid = r["cursor"]["id"]
    assert cid != 0
    r2 = db.command("getMore", cid, collection="c", batchSize=100)
    assert len(r2["cursor"]["nextBatch"]) == 100
    assert r2["cursor"]["id"] == cid
    r3 = db.command("getMore", cid, collection="c")
    assert len(r3["cursor"]["nextBatch"]) == 140
    assert r3["cursor"]["id"] == 0
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", cid, collection="c")
    assert e.value.code == 43


def test_default_first_batch_is_101(db):
    db.c.insert_many([{"_id": i} for i in range(300)])
    r = db.command("find", "c")
    assert len(r["cursor"]["firstBatch"]) == 101
    assert sum(1 for _ in db.c.find()) == 300


def test_single_batch_and_limit_close_cursor(db):
    db.c.insert_many([{"_id": i} for i in range(50)])
    r = db.command("find", "c", batchSize=5, singleBatch=True)
    assert len(r["cursor"]["firstBatch"]) == 5 and r["cursor"]["id"] == 0
    r = db.command("find", "c", limit=7)
    assert len(r["cursor"]["firstBatch"]) == 7 and r["cursor"]["id"] == 0


def test_kill_cursors_reply(db):
    db.c.insert_many([{"_id": i} for i in range(20)])
    cid = db.command("find", "c", batchSize=2)["cursor"]["id"]
    # cursors is array<long> in MongoDB's IDL: an int32 id is a TypeMismatch there too.
    r = db.command("killCursors", "c", cursors=[cid, bson.Int64(12345)])
    assert r["cursorsKilled"] == [cid]
    assert r["cursorsNotFound"] == [12345]
    assert r["cursorsAlive"] == [] and r["cursorsUnknown"] == []


def test_find_on_missing_collection_is_empty(db):
    assert list(db.nope.find()) == []
    assert db.nope.count_documents({}) == 0


def test_cursor_sees_consistent_snapshot(db):
    db.c.insert_many([{"_id": i} for i in range(300)])
    cur = db.c.find().batch_size(10)
    first = next(cur)
    db.c.insert_many([{"_id": 1000 + i} for i in range(100)])
    db.c.delete_many({"_id": {"$lt": 200}})
    rest = [first] + list(cur)
    assert len(rest) == 300


def test_max_time_ms(node, db):
    db.c.insert_many([{"_id": i} for i in range(10)])
    c = node.client()
    c.admin.command("configureFailPoint", "failCommand", mode={"times": 1},
                    data={"failCommands": ["find"], "blockConnection": True, "blockTimeMS": 50})
    assert len(list(c.test.c.find().max_time_ms(10000))) == 10
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", maxTimeMS=-1)
    assert e.value.code == 2


def test_hint_by_name_and_pattern(db):
    db.c.insert_many([{"_id": i, "a": i} for i in range(10)])
    db.c.create_index("a")
    assert len(list(db.c.find({"a": {"$gt": 4}}).hint("a_1"))) == 5
    assert len(list(db.c.find({"a": {"$gt": 4}}).hint([("a", 1)]))) == 5
    with pytest.raises(OperationFailure) as e:
        list(db.c.find().hint("nope_1"))
    assert e.value.code == 2


# ---------------------------------------------------------------- update / delete

def test_update_operators_and_counts(db):
    db.c.insert_many([{"_id": i, "n": i} for i in range(5)])
    r = db.c.update_many({"n": {"$gte": 2}}, {"$inc": {"n": 10}, "$set": {"t": True}})
    assert (r.matched_count, r.modified_count) == (3, 3)
    assert db.c.find_one({"_id": 4}) == {"_id": 4, "n": 14, "t": True}
    r = db.c.update_one({"_id": 0}, {"$set": {"n": 0}})
    assert (r.matched_count, r.modified_count) == (1, 0)
    r = db.c.update_one({"_id": 1}, {"$unset": {"n": ""}})
    assert db.c.find_one({"_id": 1}) == {"_id": 1}


def test_replacement_and_upsert(db):
    r = db.c.replace_one({"_id": 7}, {"x": 1}, upsert=True)
    assert r.upserted_id == 7
    assert db.c.find_one({"_id": 7}) == {"_id": 7, "x": 1}
    r = db.c.update_one({"k": "a"}, {"$set": {"v": 1}}, upsert=True)
    assert isinstance(r.upserted_id, ObjectId)
    assert db.c.find_one({"k": "a"}, {"_id": 0}) == {"k": "a", "v": 1}
    r = db.c.replace_one({"_id": 7}, {"y": 2})
    assert r.modified_count == 1
    assert db.c.find_one({"_id": 7}) == {"_id": 7, "y": 2}


def test_update_id_immutable(db):
    db.c.insert_one({"_id": 1})
    with pytest.raises(WriteError) as e:
        db.c.update_one({"_id": 1}, {"$set": {"_id": 2}})
    assert e.value.code == 66


def test_update_reply_fields(db):
    db.c.insert_one({"_id": 1})
    r = db.command("update", "c", updates=[{"q": {"_id": 1}, "u": {"$set": {"a": 1}}},
                                           {"q": {"_id": 2}, "u": {"$set": {"a": 1}},
                                            "upsert": True}])
    assert r["n"] == 2 and r["nModified"] == 1
    assert r["upserted"] == [{"index": 1, "_id": 2}]


def test_delete_limit(db):
    db.c.insert_many([{"_id": i, "g": i % 2} for i in range(10)])
    assert db.c.delete_one({"g": 0}).deleted_count == 1
    assert db.c.delete_many({"g": 0}).deleted_count == 4
    assert db.c.count_documents({}) == 5
    with pytest.raises(OperationFailure):
        db.command("delete", "c", deletes=[{"q": {}, "limit": 5}])


def test_find_and_modify(db):
    db.c.insert_many([{"_id": i, "n": i} for i in range(3)])
    before = db.c.find_one_and_update({"_id": 1}, {"$inc": {"n": 5}})
    assert before == {"_id": 1, "n": 1}
    after = db.c.find_one_and_update({"_id": 1}, {"$inc": {"n": 5}},
                                     return_document=ReturnDocument.AFTER,
                                     projection={"_id": 0})
    assert after == {"n": 11}
    up = db.c.find_one_and_update({"_id": 9}, {"$set": {"n": 9}}, upsert=True,
                                  return_document=ReturnDocument.AFTER)
    assert up == {"_id": 9, "n": 9}
    gone = db.c.find_one_and_delete({}, sort=[("n", -1)])
    assert gone == {"_id": 1, "n": 11}
    r = db.command("findAndModify", "c", query={"_id": 100}, update={"$set": {"a": 1}},
                   upsert=True, new=True)
    assert r["lastErrorObject"]["upserted"] == 100
    assert r["lastErrorObject"]["updatedExisting"] is False
    assert r["value"] == {"_id": 100, "a": 1}
    assert db.c.find_one_and_replace({"_id": 0}, {"z": 1}) == {"_id": 0, "n": 0}


# ---------------------------------------------------------------- count / distinct

def test_count_and_distinct(db):
    db.c.insert_many([{"_id": i, "g": i % 4, "t": [i % 2, 9]} for i in range(40)])
    assert db.command("count", "c")["n"] == 40
    assert db.command("count", "c", query={"g": 1})["n"] == 10
    assert db.command("count", "c", query={"g": 1}, skip=3, limit=5)["n"] == 5
    assert sorted(db.c.distinct("g")) == [0, 1, 2, 3]
    assert sorted(db.c.distinct("t")) == [0, 1, 9]
    assert db.c.distinct("g", {"g": {"$lt": 2}}) == [0, 1]


# ---------------------------------------------------------------- DDL

def test_create_drop_list_collections(db):
    db.create_collection("a")
    # MongoDB 7.0: create on an existing collection with identical options succeeds;
    # with other options it fails with NamespaceExists. (pymongo 3.11's create_collection
    # checks listCollections client-side, so use the command.)
    assert db.command("create", "a")["ok"] == 1
    with pytest.raises(OperationFailure) as e:
        db.command("create", "a", capped=True, size=4096)
    assert e.value.code == 48
    db.b.insert_one({})  # implicit creation
    names = sorted(db.list_collection_names())
    assert names == ["a", "b"]
    infos = list(db.list_collections(filter={"name": "a"}))
    assert len(infos) == 1 and infos[0]["type"] == "collection"
    assert "uuid" in infos[0]["info"]
    r = db.command("listCollections", nameOnly=True)
    assert sorted(d["name"] for d in r["cursor"]["firstBatch"]) == ["a", "b"]
    assert db.drop_collection("a")["ok"] == 1
    assert db.list_collection_names() == ["b"]
    # MongoDB 7.0 (SERVER-43894): dropping a missing collection succeeds.
    assert db.command("drop", "nope")["ok"] == 1


def test_list_and_drop_databases(node):
    c = node.client()
    c.d1.c.insert_one({"x": 1})
    c.d2.c.insert_one({"x": 1})
    r = c.admin.command("listDatabases")
    names = {d["name"] for d in r["databases"]}
    assert {"d1", "d2"} <= names
    assert all("sizeOnDisk" in d and "empty" in d for d in r["databases"])
    assert "totalSize" in r
    assert c.admin.command("listDatabases", nameOnly=True)["databases"][0].keys() == {"name"}
    assert [d["name"] for d in c.admin.command("listDatabases",
                                               filter={"name": "d1"})["databases"]] == ["d1"]
    c.drop_database("d1")
    assert "d1" not in c.list_database_names()


def test_indexes(db):
    db.c.insert_many([{"_id": i, "a": i, "b": -i} for i in range(100)])
    name = db.c.create_index([("a", 1), ("b", -1)])
    assert name == "a_1_b_-1"
    idx = {i["name"]: i for i in db.c.list_indexes()}
    assert set(idx) == {"_id_", "a_1_b_-1"}
    assert idx["a_1_b_-1"]["key"] == {"a": 1, "b": -1}
    assert idx["_id_"]["v"] == 2
    # sparse: the 100 documents have no "u", and a plain unique index on it would
    # fail to build on their 100 null keys (E11000 dup key: { u: null }), as in MongoDB.
    r = db.command("createIndexes", "c", indexes=[{"key": {"u": 1}, "name": "u_1",
                                                   "unique": True, "sparse": True}])
    assert r["numIndexesBefore"] == 2 and r["numIndexesAfter"] == 3
    # insert_many reports a duplicate as a BulkWriteError (DuplicateKeyError is insert_one's).
    with pytest.raises(BulkWriteError) as e:
        db.c.insert_many([{"_id": 1000, "u": 5}, {"_id": 1001, "u": 5}])
    assert [w["code"] for w in e.value.details["writeErrors"]] == [11000]
    db.c.drop_index("a_1_b_-1")
    assert {i["name"] for i in db.c.list_indexes()} == {"_id_", "u_1"}
    with pytest.raises(OperationFailure) as e:
        db.c.drop_index("nope")
    assert e.value.code == 27


def test_unique_index_build_fails_on_duplicates(db):
    db.c.insert_many([{"_id": 1, "a": 1}, {"_id": 2, "a": 1}])
    with pytest.raises(OperationFailure) as e:
        db.c.create_index("a", unique=True)
    assert e.value.code == 11000
    assert {i["name"] for i in db.c.list_indexes()} == {"_id_"}


def test_rename_collection(node, db):
    db.a.insert_many([{"_id": i} for i in range(10)])
    db.a.rename("b")
    assert db.list_collection_names() == ["b"]
    assert db.b.count_documents({}) == 10
    db.c.insert_one({})
    with pytest.raises(OperationFailure) as e:
        db.b.rename("c")
    assert e.value.code == 48
    db.b.rename("c", dropTarget=True)
    assert db.c.count_documents({}) == 10


def test_stats_and_validate(db):
    db.c.insert_many([{"_id": i, "pad": "x" * 100} for i in range(100)])
    s = db.command("collStats", "c")
    assert s["count"] == 100 and s["size"] > 100 * 100 and s["nindexes"] == 1
    assert s["ns"] == "test.c"
    d = db.command("dbStats")
    assert d["collections"] == 1 and d["objects"] == 100
    assert 0 < d["fsUsedSize"] <= d["fsTotalSize"]  # the file system holding --dbpath
    k = db.command("dbStats", scale=1024)
    assert abs(k["fsTotalSize"] - d["fsTotalSize"] / 1024) < 1
    ds = db.command("dataSize", "test.c", keyPattern={"_id": 1}, min={"_id": 10},
                    max={"_id": 20})
    assert ds["numObjects"] == 10 and ds["size"] > 1000
    v = db.command("validate", "c")
    assert v["valid"] is True and v["nrecords"] == 100


# ---------------------------------------------------------------- concerns and times

def test_write_concerns(db):
    db.c.with_options(write_concern=pymongo.WriteConcern(w=1, j=True)).insert_one({"_id": 1})
    db.c.with_options(write_concern=pymongo.WriteConcern(w="majority")).insert_one({"_id": 2})
    db.c.with_options(write_concern=pymongo.WriteConcern(w=0)).insert_one({"_id": 3})
    assert db.c.count_documents({}) == 3


def test_operation_time_in_replies(rs_node):
    db = rs_node.client().test
    r = db.command("insert", "c", documents=[{"_id": 1}])
    assert isinstance(r["operationTime"], bson.Timestamp)
    assert "$clusterTime" in r
    r2 = db.command("insert", "c", documents=[{"_id": 2}])
    assert r2["operationTime"] > r["operationTime"]


def test_oplog_is_readable(rs_node):
    c = rs_node.client()
    c.test.c.insert_one({"_id": 1, "x": 1})
    c.test.c.update_one({"_id": 1}, {"$set": {"x": 2}})
    c.test.c.delete_one({"_id": 1})
    ops = [e for e in c.local["oplog.rs"].find({"ns": "test.c"})]
    assert [e["op"] for e in ops] == ["i", "u", "d"]
    assert ops[0]["o"] == {"_id": 1, "x": 1}
    assert all(isinstance(e["ts"], bson.Timestamp) for e in ops)
    assert ops[0]["ts"] < ops[1]["ts"] < ops[2]["ts"]
    # pymongo 3.11 decodes BinData subtype 4 as uuid.UUID.
    assert isinstance(ops[0]["ui"], (uuid.UUID, bson.binary.Binary))


def test_transaction_statements_are_refused_on_a_standalone(node):
    # Transactions need a replica set member (tests/integration/test_transactions_node.py),
    # as in MongoDB.
    client = node.client()
    coll = client.test.txn_refused
    with client.start_session() as s:
        with pytest.raises(OperationFailure) as e:
            with s.start_transaction():
                coll.insert_one({"a": 1}, session=s)
        assert e.value.code == 20
    assert coll.count_documents({}) == 0
    # A raw statement continuing a transaction (autocommit: false) is refused too.
    with pytest.raises(OperationFailure) as e:
        client.test.command("find", "txn_refused", lsid={"id": bson.Binary(uuid.uuid4().bytes, 4)},
                            txnNumber=bson.Int64(1), autocommit=False)
    assert e.value.code == 20
