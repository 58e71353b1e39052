"""'$'-prefixed and dotted field names (issue 20 item 4) as MongoDB 5.0+ permits and refuses
them, as a table of raw commands (pymongo 3.11 refuses such names client-side in its CRUD
helpers, so statements go through db.command): inserts, replacements, operator updates,
upserts, pipeline updates, findAndModify and aggregation stages, on a node and through a
2-shard router (the collection sharded on _id)."""

import pytest
from pymongo.errors import OperationFailure

from shale_fixtures import shard_on_id

DOLLAR = 52          # DollarPrefixedFieldName
FAILED_TO_PARSE = 9
IMMUTABLE = 66
NOT_EXACT = 107      # NotExactValueField


@pytest.fixture(scope="module")
def routed(cluster):
    return shard_on_id(cluster.router_client(), "dollar", "c")


@pytest.fixture(params=["node", "router"])
def db(request, module_node, routed):
    d = module_node.client().dollar if request.param == "node" else routed
    d.c.delete_many({})
    d.c.insert_many([{"_id": 0, "a": 1}, {"_id": 10, "a": 1}])
    return d


def write_code(reply):
    """The first write error's code of an insert/update reply (0: none)."""
    errs = reply.get("writeErrors", [])
    return errs[0]["code"] if errs else 0


INSERTS = [
    ({"_id": 1, "a.b": 1}, 0),
    ({"_id": 1, "$a": 1, "valid": 1}, 0),
    ({"_id": 1, "$a": {"$b": 1}}, 0),
    ({"_id": 1, "$id": 1, "$db": 1, "b": {"$db": 1}}, 0),
    ({"_id": 1, "a": {"_id": {"$b": 1}}}, 0),
    ({"_id": {"a.b": 1}}, 0),
    ({"_id": {"$b": 1}}, DOLLAR),
    ({"_id": {"a": 1, "$b": 1}}, DOLLAR),
    ({"_id": {"a": {"$b": 1}}, "x": 1}, DOLLAR),  # SERVER-75880: at any depth
    ({"_id": 11, "_id.$gt": 4}, 0),
]


@pytest.mark.parametrize("doc,code", INSERTS, ids=[str(i) for i in range(len(INSERTS))])
def test_insert(db, doc, code):
    assert write_code(db.command("insert", "c", documents=[doc])) == code
    if code == 0:
        assert db.c.find_one({"_id": doc["_id"]}) == doc


# (filter, update, upsert, expected code, expected document of _id 0 afterwards or None)
UPDATES = [
    # replacements: nested '$' fields and dotted names are stored as names
    ({"_id": 0}, {"a": {"$c": 1, "b": {"$d": 4}}}, False, 0, {"_id": 0, "a": {"$c": 1, "b": {"$d": 4}}}),
    ({"_id": 0}, {"a.b": 3}, False, 0, {"_id": 0, "a.b": 3}),
    ({"_id": 0}, {"a": {"$id": 1}}, False, 0, {"_id": 0, "a": {"$id": 1}}),
    # a top-level '$' name first makes it an operator update; later, a refused replacement
    ({"_id": 0}, {"$c": 1}, False, FAILED_TO_PARSE, None),
    ({"_id": 0}, {"$ref": 1}, False, FAILED_TO_PARSE, None),
    ({"_id": 0}, {"x": 1, "$c": 1}, False, DOLLAR, None),
    ({"_id": 0}, {"_id": {"a": {"$b": 1}}}, False, DOLLAR, None),
    # operator updates: nested ones fine, top-level ones of an existing document refused
    ({"_id": 0}, {"$set": {"n": {"$x": 1}}}, False, 0, {"_id": 0, "a": 1, "n": {"$x": 1}}),
    ({"_id": 0}, {"$set": {"$x": 1}}, False, DOLLAR, None),
    ({"_id": 0}, {"$set": {"a.b": 1}}, False, 28, None),  # a path: PathNotViable on a: 1
    # upserts are inserts: '$' fields fine, but never in _id
    ({"_id": 5}, {"$set": {"$hotel": 1}}, True, 0, None),
    ({"x": 1}, {"$set": {"_id": {"$invalid": 1}}}, True, DOLLAR, None),
    ({"x": 1}, {"$set": {"_id.$gt": 1}}, True, DOLLAR, None),
    ({"x": 1}, {"$setOnInsert": {"_id": {"$invalid": 1}}}, True, DOLLAR, None),
    ({"x": 1}, {"_id": {"$invalid": 1}}, True, DOLLAR, None),
    ({"_id.$gt": 1}, {"$set": {"a": 1}}, True, DOLLAR, None),
    # pipeline updates may write any name through $literal
    ({"_id": 0}, [{"$replaceWith": {"$literal": {"_id": 0, "$a": 1, "b.c": 2}}}], False, 0,
     {"_id": 0, "$a": 1, "b.c": 2}),
    ({"_id": 0}, [{"$replaceWith": {"$literal": {"_id": {"a": {"$b": 1}}}}}], False, DOLLAR,
     None),
]


@pytest.mark.parametrize("q,u,upsert,code,after", UPDATES,
                         ids=[str(i) for i in range(len(UPDATES))])
def test_update(db, q, u, upsert, code, after):
    r = db.command("update", "c", updates=[{"q": q, "u": u, "upsert": upsert}])
    assert write_code(r) == code, r
    if after is not None:
        assert db.c.find_one({"_id": 0}) == after
    if code != 0:
        assert db.c.find_one({"_id": 0}) == {"_id": 0, "a": 1}  # nothing harmed


FAMS = [
    ({"_id": 0}, {"_id": 0, "a.b": 1}, 0, {"_id": 0, "a.b": 1}),
    ({"_id": 0}, {"_id": 0, "$invalid": 1}, DOLLAR, None),
    ({"_id": 0}, {"$set": {"$invalid": 1}}, DOLLAR, None),
    ({"_id": 0}, {"_id": 0, "out": {"$in": 1, "x": 2}}, 0, {"_id": 0, "out": {"$in": 1, "x": 2}}),
    ({"_id": 0}, [{"$replaceWith": {"$literal": {"_id": 0, "$in": 2}}}], 0, {"_id": 0, "$in": 2}),
    ({"_id": 0}, {"_id": {"a": {"$b": 1}}}, DOLLAR, None),
]


@pytest.mark.parametrize("q,u,code,after", FAMS, ids=[str(i) for i in range(len(FAMS))])
def test_find_and_modify(db, q, u, code, after):
    if code:
        with pytest.raises(OperationFailure) as e:
            db.command("findAndModify", "c", query=q, update=u)
        assert e.value.code == code
        assert db.c.find_one({"_id": 0}) == {"_id": 0, "a": 1}
    else:
        db.command("findAndModify", "c", query=q, update=u)
        assert db.c.find_one({"_id": 0}) == after


def test_queries_and_pipelines(db):
    db.command("insert", "c", documents=[{"_id": 1, "$price": 5, "p": {"$q": 2}, "a.b": 3},
                                         {"_id": 11, "$price": 6}])
    # A top-level '$' name in a filter is an operator; $expr + $getField reach the field.
    with pytest.raises(OperationFailure) as e:
        list(db.c.find({"$price": 5}))
    assert e.value.code == 2
    got = db.c.find({"$expr": {"$gte": [{"$getField": {"$literal": "$price"}}, 5]}})
    assert sorted(d["_id"] for d in got) == [1, 11]
    # Nested '$' names are paths of their own.
    assert [d["_id"] for d in db.c.find({"p.$q": 2})] == [1]
    # A dotted name is not a path: only $getField reaches it.
    assert list(db.c.find({"a.b": 3})) == []
    got = list(db.c.aggregate([{"$match": {"_id": 1}},
                               {"$project": {"v": {"$getField": "a.b"}}}]))
    assert got == [{"_id": 1, "v": 3}]
    # $setField / $unsetField write such names in pipelines.
    got = list(db.c.aggregate([
        {"$match": {"_id": 1}},
        {"$replaceWith": {"$setField": {"field": {"$literal": "$price"}, "input": "$$ROOT",
                                        "value": 9}}},
        {"$replaceWith": {"$unsetField": {"field": "a.b", "input": "$$ROOT"}}}]))
    assert got == [{"_id": 1, "$price": 9, "p": {"$q": 2}}]
    # Stages refuse '$' names as output fields.
    for stage in ({"$project": {"$n": 1}}, {"$addFields": {"$n": 1}},
                  {"$group": {"_id": None, "$n": {"$sum": 1}}}):
        with pytest.raises(OperationFailure):
            list(db.c.aggregate([stage]))
    with pytest.raises(OperationFailure):
        list(db.c.aggregate([{"$group": {"_id": None, "e.f": {"$sum": 1}}}]))
