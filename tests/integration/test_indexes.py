"""Index kinds on the data node: hashed (single and compound), partial, sparse + unique,
createIndexes option validation with MongoDB's codes, and TTL expiry by the monitor."""

import datetime
import time

import pytest
from pymongo.errors import DuplicateKeyError, OperationFailure, WriteError

from shale_fixtures import wait_until


@pytest.fixture
def db(node):
    return node.client().test


def hinted(db, index, filter=None):
    """Documents reachable through 'index' (a hinted scan), sorted by _id."""
    return sorted(d["_id"] for d in db.c.find(filter or {}).hint(index))


def keys_examined(db, index, filter):
    e = db.command("explain", {"find": "c", "filter": filter, "hint": index},
                   verbosity="executionStats")
    return e["executionStats"]["totalKeysExamined"], e["executionStats"]["nReturned"]


def test_hashed_index_point_lookup(db):
    db.c.insert_many([{"_id": i, "a": i % 20} for i in range(200)])
    assert db.c.create_index([("a", "hashed")]) == "a_hashed"
    spec = [i for i in db.c.list_indexes() if i["name"] == "a_hashed"][0]
    assert spec["key"] == {"a": "hashed"}
    assert hinted(db, "a_hashed", {"a": 7}) == list(range(7, 200, 20))
    keys, n = keys_examined(db, "a_hashed", {"a": 7})
    assert n == 10 and keys <= 11
    plan, _ = winning(db, {"a": 7})  # the planner picks the hashed index for equality
    assert plan["indexName"] == "a_hashed"
    (iv,) = plan["indexBounds"]["a"]
    lo, hi = iv.strip("[]").split(", ")
    assert lo == hi and int(lo) != 7
    # MongoDB's hash64 of 42 (and of 42.0, NumberLong(42)), as its explain shows it.
    db.c.insert_one({"_id": 5000, "a": 42})
    plan, stats = winning(db, {"a": 42})
    assert plan["indexBounds"] == {"a": ["[-944302157085130861, -944302157085130861]"]}
    assert stats["nReturned"] == 1
    # Numbers hash by value across types: 7.0 and NumberLong(7) find the same documents.
    assert hinted(db, "a_hashed", {"a": 7.0}) == list(range(7, 200, 20))
    # Missing field indexes as null.
    db.c.insert_one({"_id": 1000})
    assert hinted(db, "a_hashed", {"a": None}) == [1000]
    assert len(hinted(db, "a_hashed")) == 202


def test_hashed_index_refuses_arrays(db):
    db.c.create_index([("a.b", "hashed")])
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"_id": 1, "a": {"b": [1, 2]}})
    assert e.value.code == 16766
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"_id": 2, "a": [{"b": 1}]})
    assert e.value.code == 16766
    db.c.insert_one({"_id": 3, "a": {"b": {"c": [1]}}})  # an array inside the value is fine
    assert db.c.count_documents({}) == 1
    # An existing array makes the index build fail.
    db.d.insert_one({"x": [1]})
    with pytest.raises(OperationFailure) as e:
        db.d.create_index([("x", "hashed")])
    assert e.value.code == 16766


def test_compound_hashed_index(db):
    db.c.insert_many([{"_id": i, "a": i % 3, "b": i % 5, "tags": [i, i + 1]} for i in range(30)])
    db.c.create_index([("b", "hashed"), ("a", 1)])
    assert hinted(db, "b_hashed_a_1", {"b": 2}) == [i for i in range(30) if i % 5 == 2]
    # A non-hashed field may be multikey.
    db.c.create_index([("tags", 1), ("a", "hashed")])
    assert hinted(db, "tags_1_a_hashed", {"tags": 4}) == [3, 4]
    with pytest.raises(OperationFailure) as e:
        db.c.create_index([("a", "hashed"), ("b", "hashed")])
    assert e.value.code == 31303
    with pytest.raises(OperationFailure) as e:
        db.c.create_index([("x", "hashed")], unique=True)
    assert e.value.code == 16764


def test_hashed_sparse(db):
    db.c.insert_many([{"_id": 1, "a": 1}, {"_id": 2}, {"_id": 3, "a": None}])
    db.c.create_index([("a", "hashed")], sparse=True)
    assert hinted(db, "a_hashed") == [1, 3]


def test_partial_index(db):
    db.c.insert_many([{"_id": i, "a": i % 4, "b": i} for i in range(20)])
    db.c.create_index("a", partialFilterExpression={"b": {"$gte": 10}})
    spec = [i for i in db.c.list_indexes() if i["name"] == "a_1"][0]
    assert spec["partialFilterExpression"] == {"b": {"$gte": 10}}
    assert hinted(db, "a_1") == list(range(10, 20))
    # Writes keep the index in step: in, out, and back in.
    db.c.update_one({"_id": 12}, {"$set": {"b": 0}})
    db.c.update_one({"_id": 3}, {"$set": {"b": 50}})
    db.c.insert_one({"_id": 100, "a": 1, "b": 1})
    assert hinted(db, "a_1") == [3] + [i for i in range(10, 20) if i != 12]
    db.c.delete_one({"_id": 3})
    assert hinted(db, "a_1") == [i for i in range(10, 20) if i != 12]


def test_partial_unique_index(db):
    db.u.create_index("email", unique=True, partialFilterExpression={"active": True})
    db.u.insert_one({"email": "x", "active": False})
    db.u.insert_one({"email": "x", "active": False})
    db.u.insert_one({"email": "x", "active": True})
    with pytest.raises(DuplicateKeyError):
        db.u.insert_one({"email": "x", "active": True})
    assert db.u.count_documents({}) == 3


def test_partial_index_errors(db):
    with pytest.raises(OperationFailure) as e:
        db.c.create_index("a", partialFilterExpression={"b": 1}, sparse=True)
    assert e.value.code == 67
    for bad in ({"b": {"$ne": 1}}, {"$nor": [{"b": 1}]}, {"b": {"$not": {"$gt": 1}}},
                {"b": {"$exists": False}}):
        with pytest.raises(OperationFailure) as e:
            db.c.create_index("a", partialFilterExpression=bad)
        assert e.value.code == 67, bad
        assert "Expression not supported in partial index" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        db.c.create_index("a", partialFilterExpression={"b": {"$bogus": 1}})
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        db.c.create_index("a", partialFilterExpression=5)
    assert e.value.code == 14
    # Allowed forms.
    db.c.create_index("a", partialFilterExpression={
        "$and": [{"b": {"$gt": 1, "$lte": 9}}, {"c": {"$exists": True}}, {"d": {"$type": "string"}},
                 {"e": 3}, {"f": {"$in": [1, 2]}}]})


def test_sparse_unique_index(db):
    db.c.create_index("a", unique=True, sparse=True)
    db.c.insert_many([{"_id": 1}, {"_id": 2}, {"_id": 3, "a": 1}])
    with pytest.raises(DuplicateKeyError):
        db.c.insert_one({"_id": 4, "a": 1})
    # null is a value, not a missing field: only one document may hold it.
    db.c.insert_one({"_id": 5, "a": None})
    with pytest.raises(DuplicateKeyError):
        db.c.insert_one({"_id": 6, "a": None})
    assert hinted(db, "a_1") == [3, 5]
    # Compound sparse: indexed when any key field is present.
    db.c.create_index([("x", 1), ("y", 1)], unique=True, sparse=True)
    db.c.insert_one({"_id": 7, "y": 1})
    with pytest.raises(DuplicateKeyError):
        db.c.insert_one({"_id": 8, "y": 1})


@pytest.mark.parametrize("key,opts,code,msg", [
    ({"a": 1}, {"bogus": True}, 197,
     "The field 'bogus' is not valid for an index specification"),
    ({"a": 0}, {}, 67, "Values in the index key pattern cannot be 0."),
    ({"a": "foo"}, {}, 67, "Unknown index plugin 'foo'"),
    ({"a": True}, {}, 67, "Values in v:2 index key pattern cannot be of type bool"),
    ({"a": {"x": 1}}, {}, 67, "cannot be of type object"),
    ({"a": ""}, {}, 67, "Values in the index key pattern cannot be empty strings"),
    ({"$a": 1}, {}, 67, "field name starts with '$'"),
    ({"a..b": 1}, {}, 67, "Index keys cannot contain an empty field."),
    ({"a": "2d", "b": "hashed"}, {}, 67, "Can't use more than one index plugin"),
    ({"a": 1, "b": "2dsphere"}, {}, 67, "Index type '2dsphere' is not supported yet"),
    ({"a": 1}, {"expireAfterSeconds": "x"}, 67,
     "TTL index 'expireAfterSeconds' option must be numeric"),
    ({"a": 1}, {"expireAfterSeconds": -1}, 67, "cannot be less than 0"),
    ({"a": 1}, {"expireAfterSeconds": 2 ** 40}, 67, "within an acceptable range"),
    ({"a": 1, "b": 1}, {"expireAfterSeconds": 5}, 67, "compound indexes do not support TTL"),
    ({"_id": 1}, {"expireAfterSeconds": 5}, 197,
     "The field 'expireAfterSeconds' is not valid for an _id index specification"),
    ({"_id": 1}, {"unique": True}, 197,
     "The field 'unique' is not valid for an _id index specification"),
])
def test_index_spec_validation(db, key, opts, code, msg):
    spec = {"key": key, "name": "ix", **opts}
    with pytest.raises(OperationFailure) as e:
        db.command("createIndexes", "c", indexes=[spec])
    assert e.value.code == code
    assert msg in e.value.details["errmsg"]
    assert e.value.details["errmsg"].startswith("Error in specification ")
    assert [i["name"] for i in db.c.list_indexes()] in ([], ["_id_"])


def test_index_kinds_survive_restart(node):
    n = node
    db = n.client().test
    db.c.create_index([("a", "hashed")])
    db.c.create_index("b", partialFilterExpression={"b": {"$gt": 5}})
    db.c.insert_many([{"_id": i, "a": i, "b": i} for i in range(10)])
    n.stop()
    n.start()
    db = n.client().test
    db.c.insert_one({"_id": 10, "a": 10, "b": 10})
    assert hinted(db, "a_hashed", {"a": 10}) == [10]
    assert hinted(db, "b_1") == [6, 7, 8, 9, 10]


def ttl_node(shale_process, *args):
    return shale_process(["node", *args, "--setParameter", "ttlMonitorSleepSecs=1"], name="ttl")


def ttl_metrics(client):
    return client.admin.command("serverStatus")["metrics"]["ttl"]


def test_ttl_monitor_deletes_expired_documents(shale_process):
    n = ttl_node(shale_process, "--replSet", "rs0")
    client = n.client()
    db = client.test
    now = datetime.datetime.utcnow()
    old, recent, future = (now - datetime.timedelta(hours=1), now - datetime.timedelta(seconds=5),
                           now + datetime.timedelta(hours=1))
    db.c.insert_many([
        {"_id": "old", "t": old},
        {"_id": "recent", "t": recent},
        {"_id": "future", "t": future},
        {"_id": "string", "t": "2000-01-01"},
        {"_id": "number", "t": 0},
        {"_id": "missing"},
        {"_id": "array-old", "t": [future, old]},   # the earliest date counts
        {"_id": "array-new", "t": [future, recent]},
        {"_id": "nested", "t": {"d": old}},
    ])
    assert db.c.create_index("t", expireAfterSeconds=600) == "t_1"
    spec = [i for i in db.c.list_indexes() if i["name"] == "t_1"][0]
    assert spec["expireAfterSeconds"] == 600
    wait_until(lambda: db.c.find_one({"_id": "old"}) is None, what="TTL deletion")
    wait_until(lambda: db.c.find_one({"_id": "array-old"}) is None, what="TTL deletion")
    assert sorted(d["_id"] for d in db.c.find()) == sorted(
        ["recent", "future", "string", "number", "missing", "array-new", "nested"])
    # Deletions went through the delete path: oplog entries exist.
    ops = list(client.local.oplog.rs.find({"op": "d", "ns": "test.c"}))
    assert sorted(o["o"]["_id"] for o in ops) == ["array-old", "old"]
    assert ttl_metrics(client)["deletedDocuments"] >= 2


def test_ttl_monitor_can_be_disabled(shale_process):
    n = ttl_node(shale_process)
    client = n.client()
    db = client.test
    client.admin.command("setParameter", 1, ttlMonitorEnabled=False)
    db.c.create_index("t", expireAfterSeconds=0)
    db.c.insert_one({"_id": 1, "t": datetime.datetime.utcnow() - datetime.timedelta(minutes=1)})
    passes = ttl_metrics(client)["passes"]
    # Disabled: nothing happens, so there is no event to await; give the monitor (1 s
    # period) a few periods and check that it neither passed nor deleted.
    time.sleep(2.5)
    assert ttl_metrics(client)["passes"] == passes
    assert db.c.count_documents({}) == 1
    client.admin.command("setParameter", 1, ttlMonitorEnabled=True)
    wait_until(lambda: db.c.count_documents({}) == 0, what="TTL deletion after enabling")


# ---------------------------------------------------------------- planner


def winning(db, filter, **kw):
    e = db.command("explain", {"find": "c", "filter": filter, **kw}, verbosity="executionStats")
    plan = e["queryPlanner"]["winningPlan"]
    while plan.get("stage") not in ("IXSCAN", "COLLSCAN", "IDHACK", "EOF") and plan.get("inputStage"):
        plan = plan["inputStage"]
    return plan, e["executionStats"]


def test_planner_chooses_an_index(db):
    db.c.insert_many([{"_id": i, "a": i % 50, "b": i % 7, "c": i} for i in range(1000)])
    db.c.create_index("a")
    db.c.create_index([("b", -1), ("c", 1)])
    plan, stats = winning(db, {"a": 3})
    assert plan["stage"] == "IXSCAN"
    assert plan["indexName"] == "a_1" and plan["keyPattern"] == {"a": 1}
    assert plan["indexBounds"] == {"a": ["[3, 3]"]}
    assert stats["nReturned"] == 20 and stats["totalKeysExamined"] <= 21
    assert stats["totalDocsExamined"] == 20
    # Equality beats a range on another index.
    plan, _ = winning(db, {"a": {"$gt": 10}, "b": 2})
    assert plan["indexName"] == "b_-1_c_1"
    assert plan["indexBounds"] == {"b": ["[2, 2]"], "c": ["[MinKey, MaxKey]"]}
    plan, stats = winning(db, {"b": {"$lt": 3}})
    assert plan["indexBounds"] == {"b": ["(3, MinKey]"], "c": ["[MinKey, MaxKey]"]}
    assert stats["nReturned"] == len([i for i in range(1000) if i % 7 < 3])
    plan, stats = winning(db, {"a": {"$gte": 48}})
    assert plan["indexName"] == "a_1" and stats["nReturned"] == 40
    assert plan["indexBounds"] == {"a": ["[48, MaxKey]"]}
    plan, stats = winning(db, {"a": {"$in": [2, 1]}})
    assert plan["indexName"] == "a_1" and stats["nReturned"] == 40
    assert plan["indexBounds"] == {"a": ["[1, 1]", "[2, 2]"]}  # point intervals
    assert plan["isSparse"] is False and plan["isPartial"] is False
    # No usable predicate: a collection scan; $natural forces one.
    assert winning(db, {"c": 5})[0]["stage"] == "COLLSCAN"
    assert winning(db, {"a": 3}, hint={"$natural": 1})[0]["stage"] == "COLLSCAN"
    # Partial and sparse indexes are not chosen without a hint (they may miss documents).
    db.c.create_index("c", sparse=True)
    assert winning(db, {"c": None})[0]["stage"] == "COLLSCAN"
    # count, distinct, update and delete plan the same way.
    assert db.c.count_documents({"a": 3}) == 20
    assert sorted(db.c.distinct("b", {"a": 3})) == sorted({i % 7 for i in range(3, 1000, 50)})
    assert db.c.update_many({"a": 3}, {"$set": {"u": 1}}).modified_count == 20
    assert db.c.delete_many({"a": 4}).deleted_count == 20


def test_planner_differential(db):
    """Random documents and queries: every result with the planner's choice equals the
    result of a collection scan."""
    import random
    rnd = random.Random(4242)
    values = [None, 0, 1, 2, 2.5, -1, "a", "b", "", True, False, [], [1, 2], [2, 3], ["a", 1],
              {"x": 1}, datetime.datetime(2020, 1, 1), 10 ** 12]
    docs = []
    for i in range(400):
        d = {"_id": i}
        for f in ("a", "b", "c"):
            if rnd.random() < 0.85:
                d[f] = rnd.choice(values)
        if rnd.random() < 0.5:
            d["n"] = {"a": rnd.choice(values)}
        if rnd.random() < 0.8:
            d["h"] = rnd.choice([v for v in values if not isinstance(v, list)])
        docs.append(d)
    db.c.insert_many(docs)
    db.c.create_index("a")
    db.c.create_index([("b", -1)])
    db.c.create_index([("c", 1), ("h", -1)])
    db.c.create_index("n.a")
    db.c.create_index([("h", "hashed")])
    scalars = [v for v in values if not isinstance(v, (list, dict))]
    used = 0
    for _ in range(300):
        f = rnd.choice(["a", "b", "c", "n.a", "h"])
        v = rnd.choice(scalars)
        kind = rnd.randrange(6)
        if kind == 0:
            q = {f: v}
        elif kind == 1:
            q = {f: {rnd.choice(["$gt", "$gte", "$lt", "$lte"]): v}}
        elif kind == 2:
            q = {f: {"$in": rnd.sample(scalars, 3)}}
        elif kind == 3:
            q = {f: {"$gt": v, "$lt": rnd.choice(scalars)}}
        elif kind == 4:
            q = {f: v, rnd.choice(["a", "b", "c"]): {"$ne": rnd.choice(scalars)}}
        else:
            q = {f: {"$eq": v}, "_id": {"$lt": rnd.randrange(400)}}
        got = sorted(d["_id"] for d in db.c.find(q))
        want = sorted(d["_id"] for d in db.c.find(q).hint([("$natural", 1)]))
        assert got == want, q
        if winning(db, q)[0]["stage"] == "IXSCAN":
            used += 1
        assert db.c.count_documents(q) == len(want), q
    assert used > 100


def test_index_build_over_200k_documents_under_concurrent_readers(node):
    """A batched foreground build: readers of the collection wait for it and then see
    consistent results; readers of other collections are not held up; the finished
    index is complete (validate) and usable."""
    import threading

    client = node.client()
    db = client.test
    n = 200000
    for start in range(0, n, 20000):
        db.big.insert_many([{"_id": i, "a": i % 1000, "s": "v%d" % i}
                            for i in range(start, start + 20000)], ordered=False)
    db.small.insert_many([{"_id": i} for i in range(10)])
    errors = []
    reads = {"big": 0, "small": 0}
    stop = threading.Event()

    def reader(coll, check):
        c = node.client()
        i = 0
        while not stop.is_set():
            try:
                check(c.test[coll], i)
                reads[coll] += 1
            except Exception as e:  # noqa: BLE001 -- collected and asserted below
                errors.append(repr(e))
                return
            i += 1

    def check_big(coll, i):
        k = (i * 7919) % n
        assert coll.find_one({"_id": k}) == {"_id": k, "a": k % 1000, "s": "v%d" % k}

    def check_small(coll, i):
        assert coll.count_documents({}) == 10

    threads = [threading.Thread(target=reader, args=("big", check_big)) for _ in range(2)]
    threads.append(threading.Thread(target=reader, args=("small", check_small)))
    for t in threads:
        t.start()
    try:
        r = db.command("createIndexes", "big", indexes=[{"key": {"a": 1}, "name": "a_1"}])
        assert r["ok"] == 1 and r["numIndexesAfter"] == 2
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert errors == []
    assert reads["big"] > 0 and reads["small"] > 0
    v = db.command("validate", "big")
    assert v["valid"] and v["keysPerIndex"] == {"_id_": n, "a_1": n}
    assert db.big.count_documents({"a": 7}, hint="a_1") == n // 1000
    assert sorted(d["_id"] for d in db.big.find({"a": 999}, {"_id": 1}).hint("a_1"))[:3] == \
        [999, 1999, 2999]
