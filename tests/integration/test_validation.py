"""Schema validation and collMod on data nodes (MongoDB's "Schema Validation" and
"collMod"): create with validator / validationLevel / validationAction, enforcement on
insert, update, upsert and findAndModify (strict and moderate, error and warn,
bypassDocumentValidation), collMod of the validator and of an index's expireAfterSeconds
/ hidden, their durability across kill -9, bad input, and the same through a router on
sharded and unsharded collections."""

import json

import pymongo
import pytest
from pymongo import ReturnDocument, WriteConcern
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

from shale_fixtures import wait_until

VALIDATOR = {"qty": {"$gte": 0}, "name": {"$type": "string"}}


def _options(db, name):
    infos = list(db.list_collections(filter={"name": name}))
    assert len(infos) == 1, infos
    return infos[0]["options"]


def _index(coll, name):
    for ix in coll.list_indexes():
        if ix["name"] == name:
            return ix
    raise AssertionError("no index %s" % name)


def _winning_stage_names(explain):
    names = []

    def walk(plan):
        names.append(plan["stage"])
        if "inputStage" in plan:
            walk(plan["inputStage"])
        for s in plan.get("inputStages", []):
            walk(s)
    walk(explain["queryPlanner"]["winningPlan"])
    return names


# ---------------------------------------------------------------- create and listCollections

def test_create_with_validator_is_listed(node):
    db = node.client().test
    db.create_collection("v", validator=VALIDATOR, validationLevel="moderate",
                         validationAction="warn")
    opts = _options(db, "v")
    assert opts["validator"] == VALIDATOR
    assert opts["validationLevel"] == "moderate"
    assert opts["validationAction"] == "warn"
    # the same create again is fine, a different one is not
    db.command("create", "v", validator=VALIDATOR, validationLevel="moderate",
               validationAction="warn")
    with pytest.raises(OperationFailure) as e:
        db.command("create", "v", validator={"x": 1})
    assert e.value.code == 48


def test_create_bad_validation_options(node):
    db = node.client().test
    cases = [
        ({"validator": 5}, 14),
        ({"validator": {"a": {"$foo": 1}}}, 2),
        ({"validator": {"$where": "true"}}, None),
        ({"validator": {"$jsonSchema": {"required": "a"}}}, 14),
        ({"validator": {"$jsonSchema": {"format": "email"}}}, 9),
        ({"validator": {"$jsonSchema": {"nope": 1}}}, 9),
        ({"validationLevel": "sometimes"}, 2),
        ({"validationLevel": 1}, 14),
        ({"validationAction": "explode"}, 2),
    ]
    for i, (opts, code) in enumerate(cases):
        with pytest.raises(OperationFailure) as e:
            db.command("create", "bad%d" % i, **opts)
        if code is not None:
            assert e.value.code == code, (opts, e.value.details)
        assert "bad%d" % i not in db.list_collection_names()
    e = pytest.raises(OperationFailure, db.command, "create", "bad",
                      validationLevel="sometimes").value
    assert e.details["errmsg"] == ("Enumeration value 'sometimes' for field "
                                   "'create.validationLevel' is not a valid value.")
    # validators are refused in the internal databases
    with pytest.raises(OperationFailure) as e:
        node.client().admin.command("create", "v", validator={"a": 1})
    assert e.value.code == 72


# ---------------------------------------------------------------- enforcement

def test_insert_is_validated(node):
    db = node.client().test
    db.create_collection("c", validator=VALIDATOR)
    db.c.insert_one({"_id": 1, "qty": 5, "name": "ok"})
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"_id": 2, "qty": -1, "name": "bad"})
    err = e.value
    assert err.code == 121
    assert err.details["errmsg"] == "Document failed validation"
    assert err.details["errInfo"]["failingDocumentId"] == 2
    # an unordered batch writes the valid ones and reports each invalid one
    with pytest.raises(BulkWriteError) as e:
        db.c.insert_many([{"_id": 3, "qty": 1, "name": "a"}, {"_id": 4, "qty": "x"},
                          {"_id": 5, "qty": 2, "name": "b"}, {"_id": 6}], ordered=False)
    res = e.value.details
    assert res["nInserted"] == 2
    assert [(w["index"], w["code"], w["errInfo"]["failingDocumentId"])
            for w in res["writeErrors"]] == [(1, 121, 4), (3, 121, 6)]
    # an ordered batch stops at the first invalid document
    with pytest.raises(BulkWriteError) as e:
        db.c.insert_many([{"_id": 7, "qty": 1, "name": "a"}, {"_id": 8},
                          {"_id": 9, "qty": 1, "name": "c"}])
    assert e.value.details["nInserted"] == 1
    assert sorted(d["_id"] for d in db.c.find()) == [1, 3, 5, 7]
    # a generated _id is the one reported
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"qty": -5})
    assert isinstance(e.value.details["errInfo"]["failingDocumentId"], pymongo.collection.ObjectId)


def test_update_upsert_and_find_and_modify_are_validated(node):
    db = node.client().test
    db.create_collection("c", validator={"qty": {"$gte": 0}})
    db.c.insert_many([{"_id": i, "qty": i} for i in range(3)])
    with pytest.raises(WriteError) as e:
        db.c.update_one({"_id": 1}, {"$set": {"qty": -1}})
    assert e.value.code == 121
    assert e.value.details["errInfo"]["failingDocumentId"] == 1
    with pytest.raises(WriteError) as e:
        db.c.replace_one({"_id": 2}, {"qty": "many"})
    assert e.value.code == 121
    # a multi-update that makes one document invalid fails as a whole
    with pytest.raises(WriteError):
        db.c.update_many({}, {"$inc": {"qty": -1}})
    assert sorted(d["qty"] for d in db.c.find()) == [0, 1, 2]
    # upserts validate the inserted document
    with pytest.raises(WriteError) as e:
        db.c.update_one({"_id": 10}, {"$set": {"qty": -3}}, upsert=True)
    assert e.value.details["errInfo"]["failingDocumentId"] == 10
    db.c.update_one({"_id": 11}, {"$set": {"qty": 3}}, upsert=True)
    # findAndModify: a command error with errInfo
    with pytest.raises(OperationFailure) as e:
        db.c.find_one_and_update({"_id": 0}, {"$set": {"qty": -1}})
    assert e.value.code == 121
    assert e.value.details["errInfo"]["failingDocumentId"] == 0
    with pytest.raises(OperationFailure) as e:
        db.c.find_one_and_update({"_id": 12}, {"$set": {"qty": -1}}, upsert=True)
    assert e.value.code == 121
    assert db.c.find_one({"_id": 12}) is None
    doc = db.c.find_one_and_update({"_id": 0}, {"$inc": {"qty": 4}},
                                   return_document=ReturnDocument.AFTER)
    assert doc == {"_id": 0, "qty": 4}
    # deletes are never validated
    assert db.c.delete_one({"_id": 0}).deleted_count == 1
    assert db.c.find_one_and_delete({"_id": 1}) == {"_id": 1, "qty": 1}


def test_bypass_document_validation(node):
    db = node.client().test
    db.create_collection("c", validator={"qty": {"$gte": 0}})
    db.c.insert_one({"_id": 1, "qty": -1}, bypass_document_validation=True)
    db.c.insert_many([{"_id": 2, "qty": -2}], bypass_document_validation=True)
    db.c.update_one({"_id": 3}, {"$set": {"qty": -3}}, upsert=True,
                    bypass_document_validation=True)
    db.command("findAndModify", "c", query={"_id": 1}, update={"$set": {"qty": -10}},
               bypassDocumentValidation=True)
    db.command("insert", "c", documents=[{"_id": 4, "qty": -4}], bypassDocumentValidation=True)
    assert sorted(d["qty"] for d in db.c.find()) == [-10, -4, -3, -2]
    with pytest.raises(OperationFailure) as e:
        db.command("insert", "c", documents=[{"_id": 5}], bypassDocumentValidation="yes")
    assert e.value.code == 14


def test_validation_level_moderate_and_off(node):
    db = node.client().test
    db.c.insert_many([{"_id": 1, "qty": -1}, {"_id": 2, "qty": 1}])
    db.command("collMod", "c", validator={"qty": {"$gte": 0}}, validationLevel="moderate")
    # an existing invalid document may be updated (even to another invalid value)...
    db.c.update_one({"_id": 1}, {"$set": {"qty": -5}})
    # ...a valid one must stay valid, and inserts are always checked
    with pytest.raises(WriteError):
        db.c.update_one({"_id": 2}, {"$set": {"qty": -5}})
    with pytest.raises(WriteError):
        db.c.insert_one({"_id": 3, "qty": -1})
    with pytest.raises(OperationFailure):
        db.c.find_one_and_update({"_id": 2}, {"$set": {"qty": -5}})
    db.c.find_one_and_update({"_id": 1}, {"$set": {"qty": -6}})
    # strict checks every update
    db.command("collMod", "c", validationLevel="strict")
    with pytest.raises(WriteError):
        db.c.update_one({"_id": 1}, {"$set": {"qty": -7}})
    # off checks nothing
    db.command("collMod", "c", validationLevel="off")
    db.c.insert_one({"_id": 4, "qty": -4})
    assert _options(db, "c")["validationLevel"] == "off"
    assert db.c.find_one({"_id": 1})["qty"] == -6


def test_validation_action_warn_logs_and_allows(node):
    db = node.client().test
    db.create_collection("c", validator={"qty": {"$gte": 0}}, validationAction="warn")
    db.c.insert_one({"_id": "warned", "qty": -1})
    db.c.update_one({"_id": "warned"}, {"$set": {"qty": -2}})
    assert db.c.find_one({"_id": "warned"})["qty"] == -2
    wait_until(lambda: "Document would fail validation" in node.read_log(),
               what="the validation warning in the log")
    lines = [json.loads(line) for line in node.read_log().splitlines()
             if "Document would fail validation" in line]
    assert (lines[0]["c"], lines[0]["id"], lines[0]["s"]) == ("STORAGE", 20294, "W")
    assert lines[0]["attr"]["namespace"] == "test.c"
    assert lines[0]["attr"]["document"] == {"_id": "warned", "qty": -1}
    assert lines[0]["attr"]["errInfo"] == {"failingDocumentId": "warned", "details": {
        "operatorName": "$gte", "specifiedAs": {"qty": {"$gte": 0}},
        "reason": "comparison failed", "consideredValue": -1}}
    db.command("collMod", "c", validationAction="error")
    with pytest.raises(WriteError):
        db.c.insert_one({"_id": "refused", "qty": -1})


def test_expr_validator_and_removing_the_validator(node):
    db = node.client().test
    db.create_collection("c", validator={"$expr": {"$lt": ["$lo", "$hi"]}})
    db.c.insert_one({"_id": 1, "lo": 1, "hi": 2})
    with pytest.raises(WriteError):
        db.c.insert_one({"_id": 2, "lo": 3, "hi": 2})
    db.command("collMod", "c", validator={})
    db.c.insert_one({"_id": 2, "lo": 3, "hi": 2})
    assert _options(db, "c")["validator"] == {}


def test_aggregate_out_and_merge_are_validated_unless_bypassed(node):
    db = node.client().test
    db.src.insert_many([{"_id": 1, "qty": 1}, {"_id": 2, "qty": -1}])
    db.create_collection("dst", validator={"qty": {"$gte": 0}})
    with pytest.raises(OperationFailure) as e:
        list(db.src.aggregate([{"$merge": {"into": "dst"}}]))
    assert e.value.code == 121
    with pytest.raises(OperationFailure) as e:
        list(db.src.aggregate([{"$out": "dst"}]))
    assert e.value.code == 121
    assert _options(db, "dst") == {"validator": {"qty": {"$gte": 0}}}
    list(db.src.aggregate([{"$out": "dst"}], bypassDocumentValidation=True))
    assert db.dst.count_documents({}) == 2
    assert _options(db, "dst") == {"validator": {"qty": {"$gte": 0}}}
    db.src.update_one({"_id": 2}, {"$set": {"qty": -2}})
    list(db.src.aggregate([{"$merge": {"into": "dst"}}], bypassDocumentValidation=True))
    assert db.dst.find_one({"_id": 2})["qty"] == -2


def test_json_schema_validator(node):
    db = node.client().test
    schema = {
        "bsonType": "object",
        "required": ["name", "year"],
        "properties": {
            "name": {"bsonType": "string", "description": "must be a string"},
            "year": {"bsonType": "int", "minimum": 2017, "maximum": 3017},
            "gpa": {"bsonType": ["double"], "minimum": 0},
            "tags": {"bsonType": "array", "items": {"bsonType": "string"}, "uniqueItems": True},
            "address": {"bsonType": "object", "required": ["city"],
                        "properties": {"city": {"bsonType": "string", "minLength": 1}}},
            "kind": {"enum": ["student", "teacher"]},
        },
    }
    db.create_collection("s", validator={"$jsonSchema": schema})
    assert _options(db, "s")["validator"] == {"$jsonSchema": schema}
    db.s.insert_one({"_id": 1, "name": "Alice", "year": 2019, "gpa": 3.5, "tags": ["a", "b"],
                     "address": {"city": "Lyon"}, "kind": "student"})
    bad = [
        {"_id": 2, "name": "Bob"},                                   # year missing
        {"_id": 3, "name": "Bob", "year": 2000},                     # below minimum
        {"_id": 4, "name": 5, "year": 2019},                         # wrong type
        {"_id": 5, "name": "Bob", "year": 2019, "gpa": 3},           # int is not double
        {"_id": 6, "name": "Bob", "year": 2019, "tags": ["a", "a"]},  # not unique
        {"_id": 7, "name": "Bob", "year": 2019, "address": {"zip": 1}},
        {"_id": 8, "name": "Bob", "year": 2019, "address": {"city": ""}},
        {"_id": 9, "name": "Bob", "year": 2019, "kind": "parent"},
    ]
    for doc in bad:
        with pytest.raises(WriteError) as e:
            db.s.insert_one(doc)
        assert e.value.code == 121, doc
        assert e.value.details["errInfo"]["failingDocumentId"] == doc["_id"]
    with pytest.raises(WriteError):
        db.s.update_one({"_id": 1}, {"$unset": {"name": 1}})
    db.s.update_one({"_id": 1}, {"$set": {"year": 2020}})
    # the same operator in a query
    assert [d["_id"] for d in db.s.find({"$jsonSchema": {"required": ["gpa"]}})] == [1]
    assert db.s.count_documents({"$jsonSchema": {"properties": {"year": {"maximum": 2019}}}}) == 0


# ---------------------------------------------------------------- collMod

def test_coll_mod_validator_then_existing_documents_stay(node):
    db = node.client().test
    db.c.insert_many([{"_id": 1, "a": 1}, {"_id": 2, "a": "x"}])
    reply = db.command("collMod", "c", validator={"a": {"$type": "number"}})
    assert reply["ok"] == 1
    assert _options(db, "c") == {"validator": {"a": {"$type": "number"}}}
    assert db.c.count_documents({}) == 2
    with pytest.raises(WriteError):
        db.c.insert_one({"_id": 3, "a": "y"})
    db.command("collMod", "c", validationAction="warn", validationLevel="moderate")
    assert _options(db, "c") == {"validator": {"a": {"$type": "number"}},
                                 "validationAction": "warn", "validationLevel": "moderate"}


def test_coll_mod_ttl_index(node):
    db = node.client().test
    db.c.create_index("t", expireAfterSeconds=3600)
    reply = db.command("collMod", "c", index={"keyPattern": {"t": 1}, "expireAfterSeconds": 60})
    assert reply["expireAfterSeconds_old"] == 3600
    assert reply["expireAfterSeconds_new"] == 60
    assert _index(db.c, "t_1")["expireAfterSeconds"] == 60
    reply = db.command("collMod", "c", index={"name": "t_1", "expireAfterSeconds": 120})
    assert (reply["expireAfterSeconds_old"], reply["expireAfterSeconds_new"]) == (60, 120)
    # a plain single-field index becomes a TTL index (MongoDB 5.1+): no _old
    db.c.create_index("u")
    reply = db.command("collMod", "c", index={"name": "u_1", "expireAfterSeconds": 10})
    assert "expireAfterSeconds_old" not in reply
    assert reply["expireAfterSeconds_new"] == 10
    assert _index(db.c, "u_1")["expireAfterSeconds"] == 10


def test_coll_mod_ttl_change_is_used_by_the_ttl_monitor(shale_process):
    import datetime
    node = shale_process(["node", "--setParameter", "ttlMonitorSleepSecs=1"], name="ttl")
    db = node.client().test
    db.c.create_index("t", expireAfterSeconds=10 ** 6)
    db.c.insert_one({"_id": 1, "t": datetime.datetime.utcnow() - datetime.timedelta(hours=1)})
    # both at once; a hidden TTL index still expires documents
    reply = db.command("collMod", "c", index={"name": "t_1", "expireAfterSeconds": 1,
                                              "hidden": True})
    assert (reply["expireAfterSeconds_new"], reply["hidden_new"]) == (1, True)
    wait_until(lambda: db.c.count_documents({}) == 0, what="the TTL monitor to delete")


def test_coll_mod_hidden_index(node):
    db = node.client().test
    db.c.insert_many([{"_id": i, "a": i % 10} for i in range(200)])
    db.c.create_index("a")
    assert "IXSCAN" in _winning_stage_names(db.c.find({"a": 3}).explain())
    reply = db.command("collMod", "c", index={"name": "a_1", "hidden": True})
    assert (reply["hidden_old"], reply["hidden_new"]) == (False, True)
    assert _index(db.c, "a_1")["hidden"] is True
    assert "IXSCAN" not in _winning_stage_names(db.c.find({"a": 3}).explain())
    # a hidden index cannot be hinted, and is still maintained
    with pytest.raises(OperationFailure) as e:
        list(db.c.find({"a": 3}).hint("a_1"))
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        list(db.c.find({"a": 3}).hint([("a", 1)]))
    assert e.value.code == 2
    db.c.insert_one({"_id": 1000, "a": 3})
    assert db.c.count_documents({"a": 3}) == 21
    # hiding a hidden index reports nothing
    reply = db.command("collMod", "c", index={"name": "a_1", "hidden": True})
    assert "hidden_old" not in reply and "hidden_new" not in reply
    reply = db.command("collMod", "c", index={"keyPattern": {"a": 1}, "hidden": False})
    assert (reply["hidden_old"], reply["hidden_new"]) == (True, False)
    assert "hidden" not in _index(db.c, "a_1")
    assert "IXSCAN" in _winning_stage_names(db.c.find({"a": 3}).explain())
    assert len(list(db.c.find({"a": 3}).hint("a_1"))) == 21
    # createIndexes may create a hidden index; hidden: false is not stored
    db.command("createIndexes", "c", indexes=[{"key": {"b": 1}, "name": "b_1", "hidden": True},
                                              {"key": {"y": 1}, "name": "y_1", "hidden": False}])
    assert _index(db.c, "b_1")["hidden"] is True
    assert "hidden" not in _index(db.c, "y_1")
    # unique indexes keep enforcing while hidden
    db.c.create_index("u", unique=True, sparse=True)
    db.command("collMod", "c", index={"name": "u_1", "hidden": True})
    db.c.insert_one({"_id": 2000, "u": 1})
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"_id": 2001, "u": 1})
    assert e.value.code == 11000


def test_coll_mod_bad_input(node):
    db = node.client().test
    db.c.create_index("a")
    db.c.create_index([("x", 1), ("y", 1)])
    db.c.create_index("t", expireAfterSeconds=5)
    cases = [
        ({"foo": 1}, 40415, "BSON field 'collMod.foo' is an unknown field."),
        ({"index": {"name": "a_1", "hidden": True, "bogus": 1}}, 40415, None),
        ({"index": 5}, 14, None),
        ({"index": {"name": "a_1"}}, 72, "no expireAfterSeconds or hidden field"),
        ({"index": {"hidden": True}}, 72, "Must specify either index name or key pattern."),
        ({"index": {"name": "a_1", "keyPattern": {"a": 1}, "hidden": True}}, 72,
         "Cannot specify both key pattern and name."),
        ({"index": {"name": "nope", "hidden": True}}, 27,
         "cannot find index nope for ns test.c"),
        ({"index": {"keyPattern": {"zz": 1}, "hidden": True}}, 27, None),
        ({"index": {"name": "a_1", "hidden": 1}}, 14, None),
        ({"index": {"name": "t_1", "expireAfterSeconds": "soon"}}, 14, None),
        ({"index": {"name": "t_1", "expireAfterSeconds": -1}}, 72, None),
        ({"index": {"name": "t_1", "expireAfterSeconds": 2 ** 40}}, 72, None),
        ({"index": {"name": "x_1_y_1", "expireAfterSeconds": 5}}, 72, None),
        ({"index": {"name": "_id_", "expireAfterSeconds": 5}}, 72, None),
        ({"index": {"name": "_id_", "hidden": True}}, 2, "can't hide _id index"),
        ({"validator": "x"}, 14, None),
        ({"validator": {"$foo": 1}}, 2, None),
        ({"validationLevel": "lax"}, 2,
         "Enumeration value 'lax' for field 'collMod.validationLevel' is not a valid value."),
        ({"validationAction": "shout"}, 2, None),
        ({"viewOn": "c", "pipeline": []}, 72, None),
        ({"cappedSize": 4096}, 72, None),
        ({"index": {"name": "t_1", "expireAfterSeconds": 1, "hidden": True}, "bogus": 1}, 40415,
         None),
    ]
    for opts, code, msg in cases:
        with pytest.raises(OperationFailure) as e:
            db.command("collMod", "c", **opts)
        assert e.value.code == code, (opts, e.value.details)
        if msg is not None:
            assert e.value.details["errmsg"] == msg, opts
    # nothing changed
    assert _options(db, "c") == {}
    assert _index(db.c, "t_1")["expireAfterSeconds"] == 5
    assert "hidden" not in _index(db.c, "a_1")
    # a missing collection
    with pytest.raises(OperationFailure) as e:
        db.command("collMod", "missing", validator={"a": 1})
    assert e.value.code == 26
    assert e.value.details["codeName"] == "NamespaceNotFound"
    assert "missing" not in db.list_collection_names()
    # indexes of system collections cannot be hidden
    db.system.js.create_index("a")
    with pytest.raises(OperationFailure) as e:
        db.command("collMod", "system.js", index={"name": "a_1", "hidden": True})
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        db.system.js.create_index("b", hidden=True)
    assert e.value.code == 2
    assert "b_1" not in [i["name"] for i in db.system.js.list_indexes()]


def test_coll_mod_is_in_the_oplog(rs_node):
    c = rs_node.client()
    c.test.c.insert_one({"_id": 1})
    c.test.c.create_index("a")
    c.test.command("collMod", "c", validator={"a": 1}, index={"name": "a_1", "hidden": True})
    e = c.local["oplog.rs"].find({"op": "c", "ns": "test.$cmd"}).sort("$natural", -1)[0]
    assert e["o"] == {"collMod": "c", "validator": {"a": 1},
                      "index": {"name": "a_1", "hidden": True}}


# ---------------------------------------------------------------- durability

def test_validator_and_collmod_survive_kill9(shale_process):
    node = shale_process(["node", "--replSet", "rs0"], name="dur")
    c = node.client()
    db = c.test
    db.create_collection("made", validator={"a": {"$gt": 0}}, validationAction="error")
    db.later.insert_one({"_id": 1, "t": 1})
    db.later.create_index("t", expireAfterSeconds=100)
    db.later.create_index("h")
    db.command("collMod", "later", validator={"b": {"$exists": True}},
               validationLevel="moderate", index={"name": "t_1", "expireAfterSeconds": 7})
    db.command("collMod", "later", index={"name": "h_1", "hidden": True})
    # j:true makes the DDL before it durable too (the oplog is the journal)
    db.made.with_options(write_concern=WriteConcern(j=True)).insert_one({"_id": 1, "a": 1})
    node.kill()
    node.start()
    db = node.client().test
    assert _options(db, "made") == {"validator": {"a": {"$gt": 0}}, "validationAction": "error"}
    assert _options(db, "later") == {"validator": {"b": {"$exists": True}},
                                     "validationLevel": "moderate"}
    assert _index(db.later, "t_1")["expireAfterSeconds"] == 7
    assert _index(db.later, "h_1")["hidden"] is True
    with pytest.raises(WriteError) as e:
        db.made.insert_one({"_id": 2, "a": 0})
    assert e.value.code == 121
    with pytest.raises(WriteError):
        db.later.insert_one({"_id": 2})
    # and again after a clean restart (from the checkpointed catalog, not the oplog)
    node.stop()
    node.start()
    db = node.client().test
    assert _options(db, "later")["validationLevel"] == "moderate"
    with pytest.raises(WriteError):
        db.made.insert_one({"_id": 3, "a": -1})


# ---------------------------------------------------------------- through the router

def test_router_unsharded_collection(cluster):
    r = cluster.router_client()
    db = r.rv
    db.create_collection("u", validator={"qty": {"$gte": 0}})
    assert _options(db, "u") == {"validator": {"qty": {"$gte": 0}}}
    db.u.insert_one({"_id": 1, "qty": 1})
    with pytest.raises(WriteError) as e:
        db.u.insert_one({"_id": 2, "qty": -1})
    assert e.value.code == 121
    assert e.value.details["errInfo"]["failingDocumentId"] == 2
    with pytest.raises(OperationFailure) as e:
        db.u.find_one_and_update({"_id": 1}, {"$set": {"qty": -1}})
    assert e.value.code == 121
    db.command("collMod", "u", validator={"qty": {"$lt": 0}})
    assert _options(db, "u") == {"validator": {"qty": {"$lt": 0}}}
    db.u.insert_one({"_id": 3, "qty": -1})
    db.u.create_index("t", expireAfterSeconds=50)
    reply = db.command("collMod", "u", index={"name": "t_1", "expireAfterSeconds": 5})
    assert reply["ok"] == 1
    assert (reply["expireAfterSeconds_old"], reply["expireAfterSeconds_new"]) == (50, 5)
    assert _index(db.u, "t_1")["expireAfterSeconds"] == 5
    with pytest.raises(OperationFailure) as e:
        db.command("collMod", "nothere", validator={"a": 1})
    assert e.value.code == 26
    with pytest.raises(OperationFailure) as e:
        db.command("collMod", "u", bogus=1)
    assert e.value.code == 40415


def test_router_sharded_collection(cluster):
    r = cluster.router_client()
    r.admin.command("enableSharding", "rvs", primaryShard=cluster.shard_name(0))
    r.admin.command("shardCollection", "rvs.s", key={"x": 1})
    r.admin.command("split", "rvs.s", middle={"x": 0})
    r.admin.command("moveChunk", "rvs.s", find={"x": 10}, to=cluster.shard_name(1))
    db = r.rvs
    db.s.insert_many([{"_id": i, "x": i} for i in range(-5, 5)])
    reply = db.command("collMod", "s", validator={"x": {"$type": "int"}, "v": {"$gte": 0}},
                       validationLevel="moderate")
    assert reply["ok"] == 1
    # each shard enforces it (moderate: the old documents without v may still change)
    for x in (-3, 3):
        with pytest.raises(WriteError) as e:
            db.s.insert_one({"_id": 100 + x, "x": x, "v": -1})
        assert e.value.code == 121
        db.s.insert_one({"_id": 200 + x, "x": x, "v": 1})
        db.s.update_one({"x": x}, {"$set": {"w": 1}})
        with pytest.raises(WriteError):
            db.s.update_one({"_id": 200 + x}, {"$set": {"v": -9}})
    # both shards hold the options
    for i in range(2):
        opts = _options(cluster.shard_client(i).rvs, "s")
        assert opts["validator"] == {"x": {"$type": "int"}, "v": {"$gte": 0}}, (i, opts)
        assert opts["validationLevel"] == "moderate"
    assert _options(db, "s")["validationLevel"] == "moderate"
    db.s.create_index("h")
    reply = db.command("collMod", "s", index={"keyPattern": {"h": 1}, "hidden": True})
    assert (reply["hidden_old"], reply["hidden_new"]) == (False, True)
    for i in range(2):
        assert _index(cluster.shard_client(i).rvs.s, "h_1")["hidden"] is True
    # bypass through the router
    db.s.insert_one({"_id": 300, "x": 7, "v": -1}, bypass_document_validation=True)
    assert db.s.find_one({"_id": 300})["v"] == -1


def test_migration_is_not_validated_and_carries_the_validator(cluster):
    """Documents that fail the validator (written before it, or with bypass) still move
    with their chunk, and a shard that receives its first chunk gets the validator."""
    r = cluster.router_client()
    r.admin.command("enableSharding", "rvm", primaryShard=cluster.shard_name(0))
    r.admin.command("shardCollection", "rvm.m", key={"x": 1})
    db = r.rvm
    db.m.insert_many([{"_id": i, "x": i, "v": -1} for i in range(20)])
    db.command("collMod", "m", validator={"v": {"$gte": 0}})
    r.admin.command("split", "rvm.m", middle={"x": 10})
    r.admin.command("moveChunk", "rvm.m", find={"x": 15}, to=cluster.shard_name(1))
    assert cluster.shard_client(1).rvm.m.count_documents({}) == 10
    assert db.m.count_documents({}) == 20
    assert _options(cluster.shard_client(1).rvm, "m") == {"validator": {"v": {"$gte": 0}}}
    with pytest.raises(WriteError):
        db.m.insert_one({"_id": 50, "x": 50, "v": -1})


def test_a_shard_that_missed_a_coll_mod_catches_up_when_it_receives_a_chunk(cluster):
    """collMod goes to the shards owning chunks (and the primary); a shard that held chunks
    before keeps its copy of the collection and gets the donor's validator and index options
    on its next chunk (its older TTL would otherwise conflict with the donor's index)."""
    r = cluster.router_client()
    for i in range(2):
        cluster.shard_client(i).admin.command("setParameter", 1, orphanCleanupDelaySecs=0)
    r.admin.command("enableSharding", "rvc", primaryShard=cluster.shard_name(0))
    r.admin.command("shardCollection", "rvc.c", key={"x": 1})
    r.rvc.c.create_index("t", expireAfterSeconds=1000)
    r.rvc.c.create_index("h")
    r.admin.command("split", "rvc.c", middle={"x": 0})
    r.admin.command("moveChunk", "rvc.c", find={"x": 1}, to=cluster.shard_name(1),
                    _waitForDelete=True)
    r.admin.command("moveChunk", "rvc.c", find={"x": 1}, to=cluster.shard_name(0),
                    _waitForDelete=True)
    r.rvc.command("collMod", "c", validator={"v": {"$gte": 0}})
    r.rvc.command("collMod", "c", index={"name": "t_1", "expireAfterSeconds": 5})
    r.rvc.command("collMod", "c", index={"name": "h_1", "hidden": True})
    s1 = cluster.shard_client(1).rvc
    assert "validator" not in _options(s1, "c")
    assert _index(s1.c, "t_1")["expireAfterSeconds"] == 1000
    r.admin.command("moveChunk", "rvc.c", find={"x": 1}, to=cluster.shard_name(1),
                    _waitForDelete=True)
    assert _options(s1, "c") == {"validator": {"v": {"$gte": 0}}}
    assert _index(s1.c, "t_1")["expireAfterSeconds"] == 5
    assert _index(s1.c, "h_1")["hidden"] is True
    with pytest.raises(WriteError) as e:
        r.rvc.c.insert_one({"_id": 1, "x": 5, "v": -1})
    assert e.value.code == 121


def test_hashed_shard_collection_gives_every_shard_the_validator(cluster):
    """shardCollection of an empty collection on a hashed key spreads chunks at once: the
    shards that get the collection then get its options from the primary too."""
    r = cluster.router_client()
    r.admin.command("enableSharding", "rvh", primaryShard=cluster.shard_name(0))
    r.rvh.create_collection("h", validator={"n": {"$type": "int"}}, validationAction="error")
    r.admin.command("shardCollection", "rvh.h", key={"k": "hashed"})
    for i in range(2):
        assert _options(cluster.shard_client(i).rvh, "h") == {
            "validator": {"n": {"$type": "int"}}, "validationAction": "error"}, i
    with pytest.raises(BulkWriteError) as e:
        r.rvh.h.insert_many([{"_id": k, "k": k, "n": "x"} for k in range(20)], ordered=False)
    assert e.value.details["nInserted"] == 0
    assert len(e.value.details["writeErrors"]) == 20
    assert {w["code"] for w in e.value.details["writeErrors"]} == {121}
    r.rvh.h.insert_many([{"_id": k, "k": k, "n": k} for k in range(20)])
    assert all(cluster.shard_client(i).rvh.h.count_documents({}) > 0 for i in range(2))
