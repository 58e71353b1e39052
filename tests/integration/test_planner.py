"""The planner: multikey tracking shown by explain (isMultiKey), and index results
compared with a hinted collection scan ({$natural: 1})."""

import pytest


@pytest.fixture
def db(node):
    return node.client().test


def ixscan(db, filter, hint=None):
    cmd = {"find": "c", "filter": filter}
    if hint is not None:
        cmd["hint"] = hint
    plan = db.command("explain", cmd)["queryPlanner"]["winningPlan"]
    while plan.get("stage") != "IXSCAN":
        plan = plan["inputStage"]
    return plan


def test_multikey_flag_in_explain_and_durable(node):
    db = node.client().test
    db.c.create_index("a")
    db.c.create_index("b")
    db.c.insert_many([{"_id": 1, "a": 1, "b": 1}, {"_id": 2, "a": 3, "b": 2}])
    assert ixscan(db, {"a": 1}, "a_1")["isMultiKey"] is False
    db.c.insert_one({"_id": 3, "a": [4, 5], "b": 3})
    assert ixscan(db, {"a": 1}, "a_1")["isMultiKey"] is True
    # As in MongoDB, one array element is enough (the path holds an array).
    db.e.create_index("a")
    db.e.insert_one({"_id": 1, "a": [7]})
    assert ixscan(db, {"a": 7}, "a_1")["isMultiKey"] is True
    # An update that makes an array sets it too; a failed write does not.
    db.c.update_one({"_id": 1}, {"$set": {"b": [7, 8]}})
    assert ixscan(db, {"b": 1}, "b_1")["isMultiKey"] is True
    db.d.create_index("x")
    db.d.insert_one({"_id": 1, "x": 1})
    with pytest.raises(Exception):
        db.d.insert_one({"_id": 1, "x": [1, 2]})
    e = db.command("explain", {"find": "d", "filter": {"x": 1}, "hint": "x_1"})
    plan = e["queryPlanner"]["winningPlan"]["inputStage"]
    assert plan["isMultiKey"] is False
    # Never cleared: removing the arrays keeps the flag, across a restart.
    db.c.delete_many({})
    node.stop()
    node.start()
    db = node.client().test
    assert ixscan(db, {"a": 1}, "a_1")["isMultiKey"] is True
    assert ixscan(db, {"b": 1}, "b_1")["isMultiKey"] is True
    assert ixscan(db, {"_id": {"$gt": 1}}, "_id_")["isMultiKey"] is False


def rand_value(rng):
    r = rng.random()
    if r < 0.75:
        return rng.randint(0, 9)
    if r < 0.85:
        return rng.choice(["x", "y", "z"])
    if r < 0.9:
        return None
    return rng.randint(0, 9) + 0.5


def rand_pred(rng):
    kind = rng.choice(["eq", "in", "gt", "range", "lte", "eqop"])
    if kind == "eq":
        return rand_value(rng)
    if kind == "eqop":
        return {"$eq": rand_value(rng)}
    if kind == "in":
        return {"$in": [rand_value(rng) for _ in range(rng.randint(1, 4))]}
    if kind == "gt":
        return {rng.choice(["$gt", "$gte"]): rand_value(rng)}
    if kind == "lte":
        return {rng.choice(["$lt", "$lte"]): rand_value(rng)}
    lo, hi = sorted([rng.randint(0, 9), rng.randint(0, 9)])
    return {rng.choice(["$gt", "$gte"]): lo, rng.choice(["$lt", "$lte"]): hi}


def rand_filter(rng):
    fields = rng.sample(["a", "b", "c"], rng.randint(1, 3))
    f = {k: rand_pred(rng) for k in fields}
    if rng.random() < 0.4:
        extra = rng.choice(["a", "b", "c"])
        f = {"$and": [f, {extra: rand_pred(rng)}]}
    return f


INDEXES = [[("a", 1)], [("a", 1), ("b", 1)], [("a", 1), ("b", -1), ("c", 1)],
           [("b", -1)], [("c", 1), ("a", -1)]]


def test_bounds_match_collection_scan(db):
    import random
    rng = random.Random(4242)
    docs = []
    for i in range(400):
        d = {"_id": i}
        for k in "abc":
            if rng.random() < 0.9:
                d[k] = rand_value(rng)
        docs.append(d)
    db.c.insert_many(docs)
    names = [db.c.create_index(ix) for ix in INDEXES]
    checked = 0
    for _ in range(300):
        f = rand_filter(rng)
        want = sorted(d["_id"] for d in db.c.find(f).hint([("$natural", 1)]))
        got = sorted(d["_id"] for d in db.c.find(f))
        assert got == want, f
        for name in names:
            got = sorted(d["_id"] for d in db.c.find(f).hint(name))
            assert got == want, (f, name)
        checked += 1
    assert checked == 300
    # Both sides of a range and the equality prefix bound the scan.
    e = db.command("explain", {"find": "c", "filter": {"a": 3, "b": {"$gt": 2, "$lt": 5}},
                               "hint": "a_1_b_1"}, verbosity="executionStats")
    n = e["executionStats"]["nReturned"]
    assert n == sum(1 for d in docs if d.get("a") == 3 and isinstance(d.get("b"), (int, float))
                    and 2 < d["b"] < 5)
    # Bounds are inclusive at both ends (the filter decides on 2 and 5).
    loose = sum(1 for d in docs if d.get("a") == 3 and isinstance(d.get("b"), (int, float))
                and 2 <= d["b"] <= 5)
    assert n < loose < sum(1 for d in docs if d.get("a") == 3)
    assert e["executionStats"]["totalKeysExamined"] <= loose + 1
    plan = ixscan(db, {"a": {"$in": [5, 1]}, "b": 2}, "a_1_b_1")
    assert plan["indexBounds"] == {"a": ["[1, 1]", "[5, 5]"], "b": ["[2, 2]"]}
    plan = ixscan(db, {"$and": [{"a": {"$gte": 2}}, {"a": {"$lt": 7}}]}, "a_1")
    assert plan["indexBounds"] == {"a": ["[2, 7)"]}
    plan = ixscan(db, {"a": 1, "b": {"$gte": 2}}, "a_1_b_-1_c_1")
    assert plan["indexBounds"] == {"a": ["[1, 1]"], "b": ["[MaxKey, 2]"],
                                   "c": ["[MinKey, MaxKey]"]}


def stages(plan):
    out = []
    while plan:
        out.append(plan["stage"])
        plan = plan.get("inputStage")
    return out


def sort_key(d, field):
    # MongoDB's order for the values used here: missing/null < numbers < strings.
    v = d.get(field)
    if v is None:
        return (0, 0)
    if isinstance(v, str):
        return (2, v)
    return (1, v)


def test_sort_from_index(db):
    import random
    rng = random.Random(77)
    docs = [{"_id": i, **{k: rand_value(rng) for k in "abc" if rng.random() < 0.9}}
            for i in range(300)]
    db.c.insert_many(docs)
    db.c.create_index([("a", 1), ("b", -1)])
    cases = [
        ({}, [("a", 1), ("b", -1)], True),
        ({}, [("a", -1), ("b", 1)], True),
        ({}, [("a", 1)], True),
        ({"a": 3}, [("b", -1)], True),
        ({"a": 3}, [("b", 1)], True),
        ({"a": {"$in": [2, 5, 3]}}, [("a", -1)], True),
        ({"a": {"$gt": 2, "$lte": 6}}, [("a", 1), ("b", -1)], True),
        ({"a": {"$in": [2, 5]}}, [("b", 1)], False),
        ({}, [("a", 1), ("b", 1)], False),
        ({"a": {"$gt": 2}}, [("b", 1)], False),
    ]
    for f, sort, by_index in cases:
        cmd = {"find": "c", "filter": f, "sort": dict(sort)}
        plan = db.command("explain", cmd)["queryPlanner"]["winningPlan"]
        assert ("SORT" not in stages(plan)) == by_index, (f, sort, stages(plan))
        got = list(db.c.find(f).sort(sort))
        want = list(db.c.find(f).sort(sort).hint([("$natural", 1)]))
        # Same documents, in the same sort-key order as the in-memory SORT (ties may differ).
        assert [tuple(sort_key(d, k) for k, _ in sort) for d in got] == \
            [tuple(sort_key(d, k) for k, _ in sort) for d in want], (f, sort)
        assert sorted(d["_id"] for d in got) == sorted(d["_id"] for d in want)
    # With a limit, the index scan stops early (no blocking sort).
    e = db.command("explain", {"find": "c", "filter": {}, "sort": {"a": -1, "b": 1},
                               "limit": 5}, verbosity="executionStats")
    assert e["executionStats"]["totalKeysExamined"] <= 6
    assert e["executionStats"]["nReturned"] == 5
