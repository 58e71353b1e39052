"""Aggregation expressions through pymongo: the operator families in $project/$addFields,
$expr in find, update pipelines, and MongoDB's error codes reaching the driver."""

import datetime

import pytest
from bson.int64 import Int64
from bson.objectid import ObjectId
from pymongo.errors import OperationFailure


@pytest.fixture
def db(node):
    return node.client().test


def _one(db, expr, doc=None):
    db.e.drop()
    db.e.insert_one(doc or {"_id": 1})
    return list(db.e.aggregate([{"$project": {"_id": 0, "v": expr}}]))[0].get("v", "MISSING")


def test_families(db):
    doc = {"_id": 1, "a": [3, 1, 2], "s": "  Hello World  ", "n": 7,
           "d": datetime.datetime(2021, 3, 15, 10, 20, 30)}
    assert _one(db, {"$subtract": ["$n", 2]}, doc) == 5
    assert _one(db, {"$round": [{"$divide": ["$n", 3]}, 2]}, doc) == 2.33
    assert _one(db, {"$trim": {"input": "$s"}}, doc) == "Hello World"
    assert _one(db, {"$split": [{"$trim": {"input": "$s"}}, " "]}, doc) == ["Hello", "World"]
    assert _one(db, {"$regexFind": {"input": "$s", "regex": "w(or)", "options": "i"}}, doc) == {
        "match": "Wor", "idx": 8, "captures": ["or"]}
    assert _one(db, {"$sortArray": {"input": "$a", "sortBy": -1}}, doc) == [3, 2, 1]
    assert _one(db, {"$reduce": {"input": "$a", "initialValue": 0,
                                 "in": {"$add": ["$$value", "$$this"]}}}, doc) == 6
    assert _one(db, {"$map": {"input": "$a", "as": "x", "in": {"$multiply": ["$$x", "$n"]}}},
                doc) == [21, 7, 14]
    assert _one(db, {"$setUnion": ["$a", [4, 1]]}, doc) == [1, 2, 3, 4]
    assert _one(db, {"$dateToString": {"date": "$d", "format": "%Y-%m-%d %H:%M",
                                       "timezone": "+02:00"}}, doc) == "2021-03-15 12:20"
    assert _one(db, {"$isoWeek": "$d"}, doc) == 11
    assert _one(db, {"$hour": {"date": "$d", "timezone": "Europe/Paris"}}, doc) == 11
    assert _one(db, {"$dateToString": {"date": "$d", "format": "%d %b %Y"}}, doc) == "15 Mar 2021"
    assert _one(db, {"$dateAdd": {"startDate": "$d", "unit": "day", "amount": 20}}, doc) == \
        datetime.datetime(2021, 4, 4, 10, 20, 30)
    assert _one(db, {"$type": "$nope"}, doc) == "missing"
    assert _one(db, {"$type": "$n"}, doc) == "int"
    assert _one(db, {"$toLong": "$n"}, doc) == Int64(7)
    assert _one(db, {"$convert": {"input": "abc", "to": "int", "onError": "bad"}}, doc) == "bad"
    oid = ObjectId()
    assert _one(db, {"$toString": oid}, doc) == str(oid)
    assert _one(db, {"$let": {"vars": {"m": {"$max": "$a"}}, "in": {"$gt": ["$$m", 2]}}},
                doc) is True
    assert _one(db, {"$switch": {"branches": [{"case": {"$gt": ["$n", 10]}, "then": "big"}],
                                 "default": "small"}}, doc) == "small"
    assert _one(db, {"$getField": "n"}, doc) == 7
    assert _one(db, {"$arrayElemAt": ["$a", 10]}, doc) == "MISSING"


def test_expr_in_find(db):
    db.c.insert_many([{"_id": i, "a": i, "b": 10 - i, "s": "x" * i} for i in range(10)])
    got = [d["_id"] for d in db.c.find({"$expr": {"$gt": [{"$strLenCP": "$s"}, "$b"]}})]
    assert got == [6, 7, 8, 9]
    got = [d["_id"] for d in db.c.find(
        {"$expr": {"$in": [{"$mod": ["$a", 4]}, [0, 3]]}}).sort("_id", 1)]
    assert got == [0, 3, 4, 7, 8]


def test_update_pipeline(db):
    db.c.insert_one({"_id": 1, "tags": ["b", "a", "b"], "name": "ada lovelace"})
    db.c.update_one({"_id": 1}, [{"$set": {
        "tags": {"$setUnion": ["$tags", []]},
        "name": {"$toUpper": {"$substrCP": ["$name", 0, 1]}},
    }}])
    assert db.c.find_one({"_id": 1}) == {"_id": 1, "tags": ["a", "b"], "name": "A"}


@pytest.mark.parametrize("expr,code", [
    ({"$divide": [1, 0]}, 16608),
    ({"$switch": {"branches": [{"case": False, "then": 1}]}}, 40066),
    ({"$range": [0, 2000000000]}, 146),
    ({"$substrBytes": ["abc", -1, 1]}, 50752),
    ({"$toInt": "x"}, 241),
    ({"$filter": {"input": [1], "cond": True, "limit": 0}}, 327392),
    ({"$hour": {"date": "$$NOW", "timezone": "Europe/Nowhere"}}, 40485),
])
def test_errors_reach_the_driver(db, expr, code):
    db.c.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as e:
        list(db.c.aggregate([{"$project": {"v": expr}}]))
    assert e.value.code == code


def test_deep_nesting_is_refused(db):
    db.c.insert_one({"_id": 1})
    expr = 1
    for _ in range(170):
        expr = {"$abs": expr}
    with pytest.raises(OperationFailure):
        list(db.c.aggregate([{"$project": {"v": expr}}]))
