"""Write commands in detail: document validation on insert, batches mixing good and bad
statements, update/upsert rules, findAndModify argument errors, and implicit
collection creation (insert, upsert, createIndexes) versus commands that never create."""

import bson
import pytest
from pymongo.errors import OperationFailure


@pytest.fixture
def db(node):
    return node.client().test


def test_insert_document_checks(db):
    bad = [
        ({"_id": [1]}, 2, "can't use an array for _id"),
        ({"_id": bson.Regex("a")}, 2, "can't use a regex for _id"),
        ({"_id": {"$a": 1}}, 52, "_id fields may not contain '$'-prefixed fields"),
    ]
    for doc, code, msg in bad:
        r = db.command("insert", "c", documents=[doc])
        assert r["n"] == 0
        assert r["writeErrors"][0]["code"] == code and msg in r["writeErrors"][0]["errmsg"]
    # Nesting deeper than MongoDB's 180 levels for stored documents.
    deep = {"_id": 1}
    cur = deep
    for _ in range(181):
        cur["a"] = {}
        cur = cur["a"]
    r = db.command("insert", "c", documents=[deep])
    assert r["writeErrors"][0]["code"] == 15
    # A top-level Timestamp(0, 0) is filled in with the current time.
    db.command("insert", "c", documents=[{"_id": "ts", "t": bson.Timestamp(0, 0),
                                          "n": {"t": bson.Timestamp(0, 0)}}])
    d = db.c.find_one({"_id": "ts"})
    assert d["t"].time > 0 and d["n"]["t"] == bson.Timestamp(0, 0)
    # _id is moved first; a missing one becomes an ObjectId.
    db.command("insert", "c", documents=[{"a": 1, "_id": "x"}, {"b": 2}])
    raw = db.command("find", "c", filter={"b": 2})["cursor"]["firstBatch"][0]
    assert list(raw)[0] == "_id" and isinstance(raw["_id"], bson.ObjectId)


def test_document_over_16mib_refused_by_the_server(db):
    # 14 bytes over maxBsonObjectSize: the command itself stays under the wire limit
    # (16 MiB + 16 KiB), so the server's own check answers, as MongoDB's insert does.
    big = {"_id": 1, "big": "x" * (16 * 1024 * 1024 - 10)}
    r = db.command("insert", "c", documents=[big, {"_id": 2}], ordered=False)
    assert r["n"] == 1
    assert r["writeErrors"][0]["index"] == 0 and r["writeErrors"][0]["code"] == 2
    assert "object to insert too large. size in bytes: 16777230, max size: 16777216" in \
        r["writeErrors"][0]["errmsg"]
    assert db.c.count_documents({}) == 1


def test_batches_mixing_valid_and_invalid_documents(db):
    docs = [{"_id": 1}, {"_id": [2]}, {"_id": 3}, {"_id": 1}, {"_id": 4}]
    r = db.command("insert", "c", documents=docs, ordered=False)
    assert r["n"] == 3
    assert [(w["index"], w["code"]) for w in r["writeErrors"]] == [(1, 2), (3, 11000)]
    db.c.drop()
    r = db.command("insert", "c", documents=docs, ordered=True)
    assert r["n"] == 1 and [w["index"] for w in r["writeErrors"]] == [1]
    assert db.c.count_documents({}) == 1


def test_large_insert_batches_group_and_fall_back(db):
    # 1000 documents with duplicates scattered through several write units.
    docs = [{"_id": i % 900} for i in range(1000)]
    r = db.command("insert", "c", documents=docs, ordered=False)
    assert r["n"] == 900
    assert [w["index"] for w in r["writeErrors"]] == list(range(900, 1000))
    assert db.c.count_documents({}) == 900


def test_update_rules(db):
    db.c.insert_one({"_id": 1, "a": [1, 2, 3], "s": "x"})
    r = db.command("update", "c", updates=[{"q": {"_id": 1}, "u": {"$bogus": {"a": 1}}}])
    assert r["writeErrors"][0]["code"] == 9 and r["n"] == 0
    r = db.command("update", "c", updates=[{"q": {"_id": 1}, "u": {"$inc": {"s": 1}}}])
    assert r["writeErrors"][0]["code"] == 14
    r = db.command("update", "c", updates=[{"q": {"_id": 1}, "u": {"_id": 2, "z": 1}}])
    assert r["writeErrors"][0]["code"] == 66
    # A replacement without _id keeps the document's _id, first.
    db.command("update", "c", updates=[{"q": {"_id": 1}, "u": {"z": 1, "a": [1, 2, 3]}}])
    raw = db.command("find", "c", filter={"_id": 1})["cursor"]["firstBatch"][0]
    assert raw == {"_id": 1, "z": 1, "a": [1, 2, 3]} and list(raw)[0] == "_id"
    # The positional operator uses the query's array match.
    db.command("update", "c", updates=[{"q": {"_id": 1, "a": 2}, "u": {"$set": {"a.$": 20}}}])
    assert db.c.find_one({"_id": 1})["a"] == [1, 20, 3]
    # arrayFilters
    db.command("update", "c", updates=[{"q": {"_id": 1}, "u": {"$inc": {"a.$[e]": 100}},
                                        "arrayFilters": [{"e": {"$gt": 2}}]}])
    assert db.c.find_one({"_id": 1})["a"] == [1, 120, 103]
    # A no-op update matches but does not modify (and writes no oplog entry).
    r = db.command("update", "c", updates=[{"q": {"_id": 1}, "u": {"$set": {"z": 1}}}])
    assert r["n"] == 1 and r["nModified"] == 0
    # Multi replacement is refused at parse time.
    with pytest.raises(OperationFailure) as e:
        db.command("update", "c", updates=[{"q": {}, "u": {"z": 2}, "multi": True}])
    assert e.value.code == 9


def test_upsert_documents(db):
    r = db.command("update", "c", updates=[
        {"q": {"a": 1, "b": {"$gt": 5}}, "u": {"$set": {"c": 1}}, "upsert": True},
        {"q": {"_id": 7, "x": 1}, "u": {"y": 2}, "upsert": True},
        {"q": {"k": 1}, "u": {"$setOnInsert": {"s": 1}, "$inc": {"n": 1}}, "upsert": True},
        {"q": {"k": 1}, "u": {"$setOnInsert": {"s": 2}, "$inc": {"n": 1}}, "upsert": True},
    ])
    assert r["n"] == 4 and r["nModified"] == 1
    assert [u["index"] for u in r["upserted"]] == [0, 1, 2]
    assert db.c.find_one({"a": 1}, {"_id": 0}) == {"a": 1, "c": 1}
    assert db.c.find_one({"_id": 7}) == {"_id": 7, "y": 2}
    assert db.c.find_one({"k": 1}, {"_id": 0}) == {"k": 1, "s": 1, "n": 2}


def test_find_and_modify_argument_errors(db):
    db.c.insert_one({"_id": 1})
    cases = [
        ({"query": {}}, 9),
        ({"query": {}, "remove": True, "update": {"$set": {"a": 1}}}, 9),
        ({"query": {}, "remove": True, "new": True}, 9),
        ({"query": {}, "remove": True, "upsert": True}, 9),
        ({"query": {}, "update": {"$set": {"_id": 5}}}, 66),
        ({"query": {}, "update": {"$set": {"a": 1}}, "bogus": 1}, 40415),
        ({"query": {}, "update": {"$set": {"a": 1}}, "hint": "nope_1"}, 2),
    ]
    for args, code in cases:
        with pytest.raises(OperationFailure) as e:
            db.command("findAndModify", "c", **args)
        assert e.value.code == code, args
    r = db.command("findAndModify", "c", query={"_id": 99}, remove=True)
    assert r["value"] is None and r["lastErrorObject"] == {"n": 0}
    r = db.command("findAndModify", "c", query={"_id": 99}, update={"$set": {"a": 1}})
    assert r["value"] is None
    assert r["lastErrorObject"] == {"n": 0, "updatedExisting": False}


def test_implicit_collection_creation(db):
    # Commands that never create a collection.
    db.command("update", "u1", updates=[{"q": {}, "u": {"$set": {"a": 1}}}])
    db.command("delete", "d1", deletes=[{"q": {}, "limit": 0}])
    db.command("findAndModify", "f1", query={}, update={"$set": {"a": 1}})
    list(db.r1.find())
    assert db.list_collection_names() == []
    # Commands that do.
    db.command("insert", "i1", documents=[{"_id": 1}])
    db.command("update", "u2", updates=[{"q": {"_id": 1}, "u": {"$set": {"a": 1}},
                                         "upsert": True}])
    db.command("findAndModify", "f2", query={"_id": 1}, update={"$set": {"a": 1}}, upsert=True)
    r = db.command("createIndexes", "x1", indexes=[{"key": {"a": 1}, "name": "a_1"}])
    assert r["createdCollectionAutomatically"] is True
    assert r["numIndexesBefore"] == 1 and r["numIndexesAfter"] == 2
    r = db.command("createIndexes", "x1", indexes=[{"key": {"a": 1}, "name": "a_1"}])
    assert r["createdCollectionAutomatically"] is False
    assert r["note"] == "all indexes already exist"
    assert sorted(db.list_collection_names()) == ["f2", "i1", "u2", "x1"]
    with pytest.raises(OperationFailure) as e:
        db.command("createIndexes", "x1", indexes=[{"key": {"b": 1}}])
    assert e.value.code == 9  # a name is required
    with pytest.raises(OperationFailure) as e:
        db.command("insert", "system.bogus", documents=[{"a": 1}])
    assert e.value.code == 73


def test_create_options(db):
    db.command("create", "cap", capped=True, size=4096, max=3)
    for i in range(5):
        db.cap.insert_one({"_id": i})
    assert [d["_id"] for d in db.cap.find()] == [2, 3, 4]
    info = db.command("listCollections", filter={"name": "cap"})["cursor"]["firstBatch"][0]
    assert info["options"]["capped"] is True and info["options"]["size"] == 4096
    with pytest.raises(OperationFailure) as e:
        db.command("create", "cap2", capped=True)
    assert e.value.code == 72
    # (validators are supported: test_validation.py)
    for opt in ({"timeseries": {"timeField": "t"}},):
        with pytest.raises(OperationFailure) as e:
            db.command("create", "v", **opt)
        assert e.value.code == 72, opt
    # (collations are supported: test_collation.py; views: test_let_and_views.py)


def test_find_and_modify_update_and_upsert_paths(db):
    """The update and upsert paths share one function: pin what each returns."""
    # Upsert without new: value null, upserted id reported, document built from the
    # query's equality fields plus the update, _id first.
    r = db.command("findAndModify", "fu", query={"k": 1, "_id": 5}, update={"$set": {"a": 1}},
                   upsert=True)
    assert r["value"] is None
    assert r["lastErrorObject"] == {"n": 1, "updatedExisting": False, "upserted": 5}
    assert list(db.fu.find_one({"_id": 5}).keys()) == ["_id", "k", "a"]
    # Upsert with a replacement and no _id anywhere: a generated ObjectId.
    r = db.command("findAndModify", "fu", query={"k": 2}, update={"k": 2, "b": 1},
                   upsert=True, new=True)
    oid = r["lastErrorObject"]["upserted"]
    assert isinstance(oid, bson.ObjectId)
    assert r["value"] == {"_id": oid, "k": 2, "b": 1}
    # Update that changes nothing: still updatedExisting, the document is returned.
    r = db.command("findAndModify", "fu", query={"_id": 5}, update={"$set": {"a": 1}},
                   new=True)
    assert r["lastErrorObject"] == {"n": 1, "updatedExisting": True}
    assert r["value"] == {"_id": 5, "k": 1, "a": 1}
    # Positional update through the matched array element; old document returned.
    db.fu.insert_one({"_id": 6, "arr": [1, 2, 3]})
    r = db.command("findAndModify", "fu", query={"_id": 6, "arr": 2},
                   update={"$set": {"arr.$": 20}})
    assert r["value"] == {"_id": 6, "arr": [1, 2, 3]}
    assert db.fu.find_one({"_id": 6}) == {"_id": 6, "arr": [1, 20, 3]}
    # An upsert whose document would break a unique index fails like an insert.
    db.fu2.create_index("u", unique=True)
    db.fu2.insert_one({"_id": 7, "u": 1})
    with pytest.raises(OperationFailure) as e:
        db.command("findAndModify", "fu2", query={"_id": 8}, update={"$set": {"u": 1}},
                   upsert=True)
    assert e.value.code == 11000
    assert db.fu2.count_documents({}) == 1
