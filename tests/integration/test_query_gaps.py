"""Query-language gaps of issue 20 (items 2, 4 and 6) as a user sees them, on a plain node
and through a 2-shard router (a sharded and an unsharded collection): find's min/max/
returnKey/showRecordId, $collStats of a capped collection, a validation failure's
errInfo.details, unknown top-level operators on a missing database, '$'-prefixed field
names, and `let` / system variables on find, update, delete, findAndModify and aggregate.
Spellings are pymongo's (cursor.min/max/hint, return_key, show_record_id) where it has
them, else the command documents drivers send."""

import datetime

import pytest
from bson import Int64, Timestamp
from pymongo.errors import OperationFailure, WriteError

from query_targets import target_fixtures

plain_node, routed, target = target_fixtures("qg", "qgaps-node")

_seq = [0]


def make_coll(target, docs=(), indexes=()):
    """A fresh collection on the target, holding 'docs' (each with an 'sk' field), with
    'indexes'; sharded on {sk: 1} with chunks on both shards for the 'sharded' target."""
    kind, client = target
    _seq[0] += 1
    name = "c%d" % _seq[0]
    db = client["qg"] if kind != "node" else client["qgn"]
    coll = db.create_collection(name)
    for key in indexes:
        coll.create_index(key)
    if kind == "sharded":
        client.admin.command("shardCollection", "qg." + name, key={"sk": 1})
        client.admin.command("split", "qg." + name, middle={"sk": 50})
        client.admin.command("moveChunk", "qg." + name, find={"sk": 60}, to="shard1")
    if docs:
        coll.insert_many([dict(d) for d in docs])
    return coll


def code_of(fn):
    with pytest.raises((OperationFailure, WriteError)) as e:
        fn()
    return e.value.code


# ---------------------------------------------------------------- min / max / returnKey

AB = [{"_id": i, "sk": i * 20, "a": a, "b": b}
      for i, (a, b) in enumerate([(1, 1), (1, 2), (2, 1), (2, 2)])]

# (hint, min, max, expected number of documents) -- MongoDB's jstests/core/minmax.js cases.
MINMAX_CASES = [
    ([("a", 1), ("b", 1)], {"a": 1, "b": 2}, {"a": 2, "b": 1}, 1),
    ([("a", 1), ("b", 1)], {"a": 1, "b": 2}, {"a": 2, "b": 1.5}, 2),
    ([("a", 1), ("b", 1)], {"a": 1, "b": 2}, {"a": 2, "b": 2}, 2),
    ([("a", 1), ("b", 1)], {"a": 1, "b": 2}, None, 3),
    ([("a", 1), ("b", 1)], None, {"a": 2, "b": 1.5}, 3),
    ("a_1_b_1", None, {"a": 2, "b": 1.5}, 3),
]


def _son(d):
    return None if d is None else list(d.items())


@pytest.mark.parametrize("hint,lo,hi,n", MINMAX_CASES)
def test_min_max_bound_the_hinted_index(target, hint, lo, hi, n):
    coll = make_coll(target, AB, [[("a", 1), ("b", 1)]])
    cur = coll.find().hint(hint)
    if lo is not None:
        cur = cur.min(_son(lo))
    if hi is not None:
        cur = cur.max(_son(hi))
    assert len(list(cur)) == n


def test_min_max_descending_index(target):
    coll = make_coll(target, AB, [[("a", 1), ("b", -1)]])
    h = [("a", 1), ("b", -1)]
    assert len(list(coll.find().hint(h).min([("a", 1), ("b", 2)]))) == 4
    assert len(list(coll.find().hint(h).max([("a", 2), ("b", 0.5)]))) == 4
    assert len(list(coll.find().hint(h).min([("a", 2), ("b", 1)]))) == 1
    assert len(list(coll.find().hint(h).max([("a", 1), ("b", 1.5)]))) == 1


def test_min_max_with_filter_and_sort(target):
    docs = [{"_id": i, "sk": i, "a": i} for i in range(100)]
    coll = make_coll(target, docs, [[("a", 1)]])
    got = [d["a"] for d in coll.find({"a": {"$mod": [2, 0]}}).hint([("a", 1)])
           .min([("a", 10)]).max([("a", 70)]).sort("a", -1)]
    assert got == list(range(68, 9, -2))


@pytest.mark.parametrize("cmd,code", [
    ({"min": {"a": 1, "b": 2}, "max": {"a": 2, "b": 1}}, 51173),  # no hint
    ({"min": {"a": 1}, "hint": {"a": 1, "b": -1}}, 51174),  # not the key pattern
    ({"min": {"a": 1, "b": 1}, "max": {"a": 1}, "hint": {"a": 1, "b": -1}}, 51176),
    ({"min": {"b": 1}, "max": {"a": 1, "b": 2}, "hint": {"a": 1, "b": -1}}, 51176),
    ({"min": {"a": 1}, "hint": {"$natural": 1}}, 2),
    ({"max": {"a": 1}, "hint": {"$natural": 1}}, 2),
    ({"min": {"a": 2, "b": 1}, "max": {"a": 2, "b": 1}, "hint": {"a": 1, "b": -1}}, 51175),
    ({"min": {"a": 2, "b": 0}, "max": {"a": 2, "b": 1}, "hint": {"a": 1, "b": -1}}, 51175),
    ({"min": "x"}, 14),
])
def test_min_max_errors(target, cmd, code):
    coll = make_coll(target, AB, [[("a", 1), ("b", -1)]])
    assert code_of(lambda: coll.database.command("find", coll.name, **cmd)) == code


def test_return_key(target):
    docs = [{"_id": i, "sk": i * 10, "a": i, "b": {"c": i * 2}} for i in range(10)]
    coll = make_coll(target, docs, [[("a", 1), ("b.c", -1)]])
    got = list(coll.find({"a": {"$gte": 7}}, return_key=True).hint([("a", 1), ("b.c", -1)])
               .sort("a", 1))
    assert got == [{"a": 7, "b.c": 14}, {"a": 8, "b.c": 16}, {"a": 9, "b.c": 18}]
    # A projection is ignored; a collection scan has no key: empty documents.
    assert list(coll.find({"a": 1}, {"a": 0}, return_key=True).hint([("$natural", 1)])) == [{}]
    # The _id index by a point query.
    assert list(coll.find({"_id": 3}, return_key=True)) == [{"_id": 3}]
    # A multikey document gives the entry the scan found.
    coll.insert_one({"_id": 50, "sk": 50, "a": [30, 20, 40], "b": {"c": 1}})
    assert list(coll.find({"a": 40}, return_key=True).hint([("a", 1), ("b.c", -1)])) == [
        {"a": 40, "b.c": 1}]


def test_show_record_id(target):
    docs = [{"_id": i, "sk": i * 10, "a": i} for i in range(6)]
    coll = make_coll(target, docs, [[("a", 1)]])
    plain = list(coll.find({}, show_record_id=True))
    assert len(plain) == 6
    assert all(isinstance(d["$recordId"], Int64) and list(d)[-1] == "$recordId" for d in plain)
    # Through a blocking sort and a projection: the ids stay and follow their documents.
    by_id = {d["_id"]: d["$recordId"] for d in plain}
    sorted_docs = list(coll.find({}, {"a": 1}, show_record_id=True).sort("a", -1))
    assert [d["a"] for d in sorted_docs] == [5, 4, 3, 2, 1, 0]
    assert all(by_id[d["_id"]] == d["$recordId"] for d in sorted_docs)
    keyed = list(coll.find({"a": 2}, return_key=True, show_record_id=True).hint([("a", 1)]))
    assert keyed == [{"a": 2, "$recordId": by_id[2]}]


# ---------------------------------------------------------------- $collStats, errInfo

def test_collstats_capped_storage_stats(target):
    kind, client = target
    if kind == "sharded":
        pytest.skip("capped collections cannot be sharded")
    db = client["qgcap"]
    db.drop_collection("cap")
    db.create_collection("cap", capped=True, size=8192, max=10)
    db.cap.insert_one({"x": 1})
    stats = list(db.cap.aggregate([{"$collStats": {"storageStats": {}}}]))
    ss = stats[0]["storageStats"]
    assert ss["capped"] is True and ss["maxSize"] == 8192 and ss["max"] == 10
    assert list(db.cap.aggregate([{"$collStats": {"storageStats": {"scale": 1024}}}]))[0][
        "storageStats"]["maxSize"] == 8


def _validated(target, validator):
    kind, client = target
    coll = make_coll(target)
    coll.database.command("collMod", coll.name, validator=validator)
    return coll


def test_validation_details_of_a_query_validator(target):
    coll = _validated(target, {"a": {"$gt": 5}, "b": {"$type": "string"}})
    with pytest.raises(WriteError) as e:
        coll.insert_one({"_id": 1, "sk": 1, "a": 1, "b": 2})
    info = e.value.details["errInfo"]
    assert info["failingDocumentId"] == 1
    assert info["details"] == {
        "operatorName": "$and",
        "clausesNotSatisfied": [
            {"index": 0, "details": {"operatorName": "$gt", "specifiedAs": {"a": {"$gt": 5}},
                                     "reason": "comparison failed", "consideredValue": 1}},
            {"index": 1, "details": {"operatorName": "$type",
                                     "specifiedAs": {"b": {"$type": "string"}},
                                     "reason": "type did not match", "consideredValue": 2,
                                     "consideredType": "int"}}]}
    # Only the failing clauses of the $and are listed, by their index.
    with pytest.raises(WriteError) as e:
        coll.insert_one({"_id": 2, "sk": 2, "a": 9})
    assert e.value.details["errInfo"]["details"] == {
        "operatorName": "$and", "clausesNotSatisfied": [{"index": 1, "details": {
            "operatorName": "$type", "specifiedAs": {"b": {"$type": "string"}},
            "reason": "field was missing"}}]}
    # A validator of one predicate is described without an $and.
    coll.database.command("collMod", coll.name, validator={"a": {"$gt": 5}})
    with pytest.raises(WriteError) as e:
        coll.insert_one({"_id": 3, "sk": 3, "a": 2})
    assert e.value.details["errInfo"]["details"] == {
        "operatorName": "$gt", "specifiedAs": {"a": {"$gt": 5}}, "reason": "comparison failed",
        "consideredValue": 2}


def test_validation_details_of_a_json_schema(target):
    coll = _validated(target, {"$jsonSchema": {
        "bsonType": "object", "required": ["name", "sk"],
        "properties": {"age": {"bsonType": "int", "minimum": 0}, "name": {"bsonType": "string"}}}})
    with pytest.raises(WriteError) as e:
        coll.insert_one({"_id": 5, "sk": 5, "age": -3})
    d = e.value.details["errInfo"]["details"]
    assert d["operatorName"] == "$jsonSchema"
    rules = {r["operatorName"]: r for r in d["schemaRulesNotSatisfied"]}
    assert rules["required"]["missingProperties"] == ["name"]
    assert rules["required"]["specifiedAs"] == {"required": ["name", "sk"]}
    props = rules["properties"]["propertiesNotSatisfied"]
    assert [p["propertyName"] for p in props] == ["age"]
    assert props[0]["details"] == [{"operatorName": "minimum", "specifiedAs": {"minimum": 0},
                                    "reason": "comparison failed", "consideredValue": -3}]
    # findAndModify's command error carries it too.
    with pytest.raises(OperationFailure) as e:
        coll.database.command("findAndModify", coll.name, query={"_id": 9, "sk": 9},
                              update={"$set": {"name": "n", "age": 1.5}}, upsert=True)
    assert e.value.code == 121
    d = e.value.details["errInfo"]["details"]["schemaRulesNotSatisfied"][0]
    assert d["propertiesNotSatisfied"][0]["details"][0] == {
        "operatorName": "bsonType", "specifiedAs": {"bsonType": "int"},
        "reason": "type did not match", "consideredValue": 1.5, "consideredType": "double"}
    # Updates fail with the same shape.
    coll.insert_one({"_id": 6, "sk": 6, "name": "x", "age": 1})
    with pytest.raises(WriteError) as e:
        coll.update_one({"_id": 6, "sk": 6}, {"$set": {"name": 7}})
    props = e.value.details["errInfo"]["details"]["schemaRulesNotSatisfied"][0]
    assert props["propertiesNotSatisfied"][0]["details"][0]["consideredType"] == "int"


def test_unknown_top_level_operator_on_a_missing_database(target):
    kind, client = target
    db = client["qg_missing_db_%s" % kind]
    assert code_of(lambda: list(db.c.find({"$foo": 1}))) == 2
    assert code_of(lambda: db.command("count", "c", query={"$foo": 1})) == 2
    assert code_of(lambda: db.command("distinct", "c", key="a", query={"$bar": 1})) == 2
    assert list(db.c.find({"a": 1})) == []
    r = db.command("delete", "c", deletes=[{"q": {"$foo": 1}, "limit": 0}])
    assert r["n"] == 0 and r["writeErrors"][0]["code"] == 2


def test_replacement_upsert_needs_the_whole_id(target):
    """A replacement upsert takes _id from the query whole: sub-paths of it are
    NotExactValueField (111); an operator upsert builds _id from them."""
    coll = make_coll(target)
    assert code_of(lambda: coll.replace_one({"_id.a": 1, "sk": 5}, {"sk": 5, "x": 1},
                                            upsert=True)) == 111
    assert code_of(lambda: coll.find_one_and_replace({"_id.a": 1, "sk": 5}, {"sk": 5},
                                                     upsert=True)) == 111
    assert coll.count_documents({}) == 0
    coll.update_one({"_id.a": 1, "sk": 5}, {"$set": {"x": 2}}, upsert=True)
    assert coll.find_one({"sk": 5}) == {"_id": {"a": 1}, "sk": 5, "x": 2}
    coll.replace_one({"_id": 7, "sk": 6}, {"sk": 6}, upsert=True)
    assert coll.find_one({"sk": 6}) == {"_id": 7, "sk": 6}


# ---------------------------------------------------------------- '$'-prefixed field names

def test_dollar_prefixed_fields(target):
    coll = make_coll(target)
    db = coll.database
    # Inserts take them at the top level and nested (pymongo 3.11 refuses them client-side).
    db.command("insert", coll.name, documents=[
        {"_id": 1, "sk": 1, "$price": 50, "loc": {"$db": "novels", "$inc": True}, "q": 1}])
    assert coll.find_one({"_id": 1}) == {"_id": 1, "sk": 1, "$price": 50,
                                         "loc": {"$db": "novels", "$inc": True}, "q": 1}
    # Operator updates: nested '$' fields directly; a document holding a top-level one
    # may be modified elsewhere.
    db.command("update", coll.name, updates=[
        {"q": {"_id": 1, "sk": 1}, "u": {"$set": {"loc.$db": "poems"}, "$inc": {"q": 1}}}])
    assert coll.find_one({"_id": 1})["loc"] == {"$db": "poems", "$inc": True}
    # ...but not a top-level '$' field of an existing document.
    r = db.command("update", coll.name, updates=[
        {"q": {"_id": 1, "sk": 1}, "u": {"$set": {"$price": 60}}}])
    assert r["nModified"] == 0 and r["writeErrors"][0]["code"] == 52
    # An upsert that inserts is an insert: it may create one.
    r = db.command("update", coll.name, updates=[
        {"q": {"_id": 2, "sk": 2}, "u": {"$set": {"$hotel": 320}}, "upsert": True}])
    assert r["upserted"][0]["_id"] == 2
    assert coll.find_one({"_id": 2}) == {"_id": 2, "sk": 2, "$hotel": 320}
    # Replacements: nested ones only.
    r = db.command("update", coll.name, updates=[
        {"q": {"_id": 2, "sk": 2}, "u": {"sk": 2, "$x": 1}}])
    assert r["writeErrors"][0]["code"] == 52
    db.command("update", coll.name, updates=[
        {"q": {"_id": 2, "sk": 2}, "u": {"sk": 2, "n": {"$x": 1}}}])
    assert coll.find_one({"_id": 2}) == {"_id": 2, "sk": 2, "n": {"$x": 1}}
    # Pipelines reach top-level ones with $getField / $setField / $unsetField / $literal.
    db.command("update", coll.name, updates=[{"q": {"_id": 1, "sk": 1}, "u": [
        {"$replaceWith": {"$setField": {"field": {"$literal": "$price"}, "input": "$$ROOT",
                                        "value": {"$add": [{"$getField": {"$literal": "$price"}},
                                                           5]}}}}]}])
    got = list(coll.aggregate([{"$match": {"_id": 1}},
                               {"$project": {"p": {"$getField": {"$literal": "$price"}}}}]))
    assert got == [{"_id": 1, "p": 55}]
    db.command("update", coll.name, updates=[{"q": {"_id": 1, "sk": 1}, "u": [
        {"$replaceWith": {"$unsetField": {"field": {"$literal": "$price"},
                                          "input": "$$ROOT"}}}]}])
    assert "$price" not in coll.find_one({"_id": 1})
    # Dotted field names are stored as names by inserts and replacements.
    db.command("update", coll.name, updates=[
        {"q": {"_id": 2, "sk": 2}, "u": {"sk": 2, "a.b": 1, "x": {"y.z": 2}}}])
    assert coll.find_one({"_id": 2}) == {"_id": 2, "sk": 2, "a.b": 1, "x": {"y.z": 2}}
    # _id documents never hold '$' fields.
    r = db.command("insert", coll.name, documents=[{"_id": {"$x": 1}, "sk": 3}])
    assert r["writeErrors"][0]["code"] == 52


# ---------------------------------------------------------------- let and system variables

LETDOCS = [{"_id": i, "sk": i * 20, "a": i % 3} for i in range(6)]


def test_find_let(target):
    coll = make_coll(target, LETDOCS)
    r = coll.database.command("find", coll.name, filter={"$expr": {"$eq": ["$a", "$$want"]}},
                              let={"want": {"$add": [1, 1]}}, sort={"_id": 1})
    assert [d["_id"] for d in r["cursor"]["firstBatch"]] == [2, 5]
    # Projections see them too, also where a router sorts and projects itself.
    r = coll.database.command("find", coll.name, filter={"a": 1}, sort={"_id": -1},
                              projection={"_id": 1, "v": {"$concat": ["$$p", "!"]}},
                              let={"p": "hi"})
    assert r["cursor"]["firstBatch"] == [{"_id": 4, "v": "hi!"}, {"_id": 1, "v": "hi!"}]
    assert code_of(lambda: coll.database.command(
        "find", coll.name, filter={"$expr": {"$eq": ["$a", "$$nope"]}}, let={"want": 1})) == 17276
    assert code_of(lambda: coll.database.command("find", coll.name, let={"Bad": 1})) == 16867
    assert code_of(lambda: coll.database.command("find", coll.name, let=5)) == 14
    assert code_of(lambda: coll.database.command("find", coll.name, filter={"_id": 1},
                                                 let={"Bad": 1})) == 16867


def test_update_delete_and_find_and_modify_let(target):
    coll = make_coll(target, LETDOCS)
    db = coll.database
    r = db.command("update", coll.name, let={"t": 1, "v": "one"}, updates=[
        {"q": {"$expr": {"$eq": ["$a", "$$t"]}}, "u": [{"$set": {"tag": "$$v"}}], "multi": True}])
    assert r["nModified"] == 2
    assert sorted(d["_id"] for d in coll.find({"tag": "one"})) == [1, 4]
    r = db.command("findAndModify", coll.name,
                   query={"sk": 60, "$expr": {"$eq": ["$_id", "$$id"]}},
                   update=[{"$set": {"tag": "$$v"}}], let={"id": 3, "v": "three"}, new=True)
    assert r["value"]["tag"] == "three"
    r = db.command("delete", coll.name, let={"t": 0},
                   deletes=[{"q": {"$expr": {"$eq": ["$a", "$$t"]}}, "limit": 0}])
    assert r["n"] == 2
    assert coll.count_documents({}) == 4


def test_aggregate_let_and_system_variables(target):
    kind, _ = target
    coll = make_coll(target, LETDOCS)
    got = list(coll.aggregate([
        {"$match": {"$expr": {"$eq": ["$a", "$$t"]}}},
        {"$project": {"_id": 1, "now": "$$NOW", "root": "$$ROOT._id", "cur": "$$CURRENT.a",
                      "gone": "$$REMOVE", "t": "$$t"}},
        {"$sort": {"_id": 1}}], let={"t": 2}))
    assert [d["_id"] for d in got] == [2, 5]
    assert all(isinstance(d["now"], datetime.datetime) and "gone" not in d for d in got)
    if kind != "sharded":
        # One $$NOW for the whole command (each shard fixes its own).
        assert got[0]["now"] == got[1]["now"]
    assert [(d["root"], d["cur"], d["t"]) for d in got] == [(2, 2, 2), (5, 2, 2)]
    # `let` values are expressions, evaluated once; after a $group they reach the stages a
    # router runs itself.
    got = list(coll.aggregate([{"$group": {"_id": None, "n": {"$sum": "$$one"}}},
                               {"$project": {"_id": 0, "n": 1, "x": "$$x"}}],
                              let={"one": 1, "x": {"$add": [1, 2]}}))
    assert got == [{"n": 6, "x": 3}]
    # ...and $lookup sub-pipelines see them.
    got = list(coll.aggregate([
        {"$match": {"_id": 0}},
        {"$lookup": {"from": coll.name, "as": "same", "let": {"mine": "$a"}, "pipeline": [
            {"$match": {"$expr": {"$and": [{"$eq": ["$a", "$$mine"]}, {"$gt": ["$_id", "$$lo"]}]}}},
            {"$project": {"_id": 1}}]}}], let={"lo": 1}))
    assert [d["_id"] for d in got[0]["same"]] == [3]
    # ...and so does $merge's whenMatched pipeline, beside its own `let`.
    db = coll.database
    db.mtarget.drop()
    db.mtarget.insert_many([{"_id": 1, "sk": 20}, {"_id": 2, "sk": 40}])
    list(coll.aggregate([{"$match": {"_id": {"$in": [1, 2]}}}, {"$merge": {
        "into": "mtarget", "let": {"mine": "$a"},
        "whenMatched": [{"$set": {"tag": "$$tag", "a": "$$mine"}}]}}], let={"tag": "z"}))
    assert list(db.mtarget.find().sort("_id", 1)) == [
        {"_id": 1, "sk": 20, "tag": "z", "a": 1}, {"_id": 2, "sk": 40, "tag": "z", "a": 2}]
    ct = [{"$match": {"_id": 0}}, {"$project": {"ct": "$$CLUSTER_TIME"}}]
    if kind == "node":
        # A standalone has no cluster time.
        assert code_of(lambda: list(coll.aggregate(ct))) == 51144
    else:
        assert isinstance(list(coll.aggregate(ct))[0]["ct"], Timestamp)
        # After a $group, where a router runs the rest itself.
        got = list(coll.aggregate([{"$group": {"_id": None}}, {"$project": {"ct": "$$CLUSTER_TIME",
                                                                          "now": "$$NOW"}}]))
        assert isinstance(got[0]["ct"], Timestamp)
        assert isinstance(got[0]["now"], datetime.datetime)
        r = coll.database.command("find", coll.name, filter={
            "$expr": {"$lt": [{"$literal": Timestamp(1, 1)}, "$$CLUSTER_TIME"]}})
        assert len(r["cursor"]["firstBatch"]) == 6


# ---------------------------------------------------------------- the Node driver

def _node_smoke(uri, *args):
    import json
    import os
    import subprocess
    from test_node_driver import HERE, node_binary
    out = subprocess.run([node_binary(), os.path.join(HERE, "query_gaps.js"), uri] + list(args),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("where", ["node", "sharded"])
def test_node_driver_spellings(where, plain_node, routed):
    r = _node_smoke(plain_node.uri()) if where == "node" else _node_smoke(routed.uri(), "sharded")
    assert r["minMax"] == [1, 2, 6, 7]
    assert r["returnKey"] == [{"a": 4}, {"a": 4}]
    assert r["showRecordId"] == ["number"]
    assert r["findLet"] == [2, 7]
    assert r["updateLet"] == 2
    assert r["famLet"]["_id"] == 4 and r["famLet"]["f"] == 1
    assert r["aggLet"] == [{"_id": 5, "v": "five"}]
    assert r["deleteLet"] == 2
    assert r["dollar"] == {"_id": 100, "sk": 5, "$price": 3, "n": {"$q": 1}}
    assert r["getField"] == [{"_id": 100, "p": 3}]
