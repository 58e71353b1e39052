"""The aggregate command through pymongo: $group/$sort/$unwind/... pipelines, count_documents,
cursor batches with getMore, MongoDB's error codes, and a differential check that
$match+$sort+$limit returns what the equivalent find returns."""

import random

import pytest
from pymongo.errors import OperationFailure


@pytest.fixture
def db(node):
    return node.client().test


def test_group_sort(db):
    db.c.insert_many([{"_id": i, "k": i % 3, "v": i} for i in range(30)])
    got = list(db.c.aggregate([
        {"$group": {"_id": "$k", "s": {"$sum": "$v"}, "n": {"$count": {}},
                    "mx": {"$max": "$v"}, "avg": {"$avg": "$v"}}},
        {"$sort": {"_id": 1}},
    ]))
    assert got == [
        {"_id": 0, "s": 135, "n": 10, "mx": 27, "avg": 13.5},
        {"_id": 1, "s": 145, "n": 10, "mx": 28, "avg": 14.5},
        {"_id": 2, "s": 155, "n": 10, "mx": 29, "avg": 15.5},
    ]


def test_unwind_sort_by_count_project(db):
    db.c.insert_many([{"_id": 1, "t": ["a", "b"]}, {"_id": 2, "t": ["b"]}, {"_id": 3, "t": []}])
    assert list(db.c.aggregate([{"$unwind": "$t"}, {"$sortByCount": "$t"}])) == [
        {"_id": "b", "count": 2}, {"_id": "a", "count": 1}]
    got = list(db.c.aggregate([
        {"$unwind": {"path": "$t", "includeArrayIndex": "i", "preserveNullAndEmptyArrays": True}},
        {"$project": {"_id": 1, "t": 1, "i": 1}},
    ]))
    assert got == [{"_id": 1, "t": "a", "i": 0}, {"_id": 1, "t": "b", "i": 1},
                   {"_id": 2, "t": "b", "i": 0}, {"_id": 3, "i": None}]
    got = list(db.c.aggregate([{"$match": {"_id": 2}}, {"$set": {"n": {"$size": "$t"}}},
                               {"$unset": "t"}, {"$replaceWith": {"x": "$n"}}]))
    assert got == [{"x": 1}]


def test_count_documents(db):
    db.c.insert_many([{"a": i % 4} for i in range(100)])
    assert db.c.count_documents({}) == 100
    assert db.c.count_documents({"a": 1}) == 25
    assert db.c.count_documents({"a": 1}, skip=5, limit=10) == 10
    assert db.missing.count_documents({}) == 0
    assert list(db.c.aggregate([{"$match": {"a": 2}}, {"$count": "n"}])) == [{"n": 25}]


def test_batches_and_get_more(db):
    db.c.insert_many([{"_id": i} for i in range(250)])
    reply = db.command("aggregate", "c", pipeline=[{"$sort": {"_id": -1}}],
                       cursor={"batchSize": 10})
    assert len(reply["cursor"]["firstBatch"]) == 10
    assert reply["cursor"]["id"] != 0
    got = [d["_id"] for d in db.c.aggregate([{"$sort": {"_id": -1}}], batchSize=7)]
    assert got == list(range(249, -1, -1))


def test_errors(db):
    db.c.insert_one({"a": 1})
    with pytest.raises(OperationFailure) as e:
        list(db.c.aggregate([{"$bogus": 1}]))
    assert e.value.code == 40324
    assert "Unrecognized pipeline stage name: '$bogus'" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        list(db.c.aggregate([{"$group": {"n": {"$sum": 1}}}]))
    assert e.value.code == 15955
    with pytest.raises(OperationFailure) as e:
        list(db.c.aggregate([{"$limit": 0}]))
    assert e.value.code == 15958
    with pytest.raises(OperationFailure) as e:
        list(db.c.aggregate([{"$replaceWith": "$a"}]))
    assert e.value.code == 40228


def test_explain_pushes_leading_match(db):
    db.c.insert_one({"a": 1})
    e = db.command("aggregate", "c", pipeline=[{"$match": {"a": 1}}, {"$limit": 1}], explain=True)
    assert e["stages"][0]["$cursor"]["queryPlanner"]["parsedQuery"] == {"a": 1}


def test_match_sort_limit_equals_find(db):
    rng = random.Random(5)
    db.c.insert_many([{"_id": i, "a": rng.randrange(20), "b": rng.randrange(5)}
                      for i in range(500)])
    db.c.create_index("a")
    for _ in range(25):
        lo = rng.randrange(20)
        filt = {"a": {"$gte": lo}, "b": {"$ne": rng.randrange(5)}}
        sort = [("a", rng.choice([1, -1])), ("_id", rng.choice([1, -1]))]
        limit = rng.randrange(1, 60)
        want = list(db.c.find(filt).sort(sort).limit(limit))
        got = list(db.c.aggregate([{"$match": filt}, {"$sort": dict(sort)}, {"$limit": limit}]))
        assert got == want, (filt, sort, limit)


def test_group_many_keys(db):
    db.c.insert_many([{"k": i % 3000, "v": 1} for i in range(9000)])
    got = list(db.c.aggregate([{"$group": {"_id": "$k", "n": {"$sum": "$v"}}},
                               {"$match": {"n": {"$ne": 3}}}]))
    assert got == []
    assert list(db.c.aggregate([{"$group": {"_id": "$k"}}, {"$count": "g"}])) == [{"g": 3000}]
