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
    kind = rng.choice(["eq", "in", "gt", "range", "lte", "eqop", "em"])
    if kind == "em":
        lo, hi = sorted([rng.randint(0, 9), rng.randint(0, 9)])
        return {"$elemMatch": {rng.choice(["$gt", "$gte"]): lo, rng.choice(["$lt", "$lte"]): hi}}
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


def test_explain_of_writes_distinct_and_aggregate_never_writes(node):
    # explain for distinct/update/delete/findAndModify/aggregate (issue 4 item 6): MongoDB's
    # shapes (UPDATE/DELETE over the read plan, $cursor + stages), and nothing is written.
    from bson.son import SON
    c = node.client()
    c.t.c.insert_many([{"_id": i, "a": i % 10} for i in range(100)])
    c.t.c.create_index("a")

    def explain(inner, verbosity="executionStats"):
        return c.t.command(SON([("explain", inner), ("verbosity", verbosity)]))
    d = explain(SON([("distinct", "c"), ("key", "a"), ("query", {"a": {"$gt": 5}})]))
    assert d["queryPlanner"]["winningPlan"]["inputStage"]["stage"] == "IXSCAN"
    u = explain(SON([("update", "c"), ("updates", [{"q": {"a": 3}, "u": {"$set": {"b": 1}},
                                                    "multi": True}])]))
    assert u["queryPlanner"]["winningPlan"]["stage"] == "UPDATE"
    assert u["executionStats"]["executionStages"]["nMatched"] == 10
    dl = explain(SON([("delete", "c"), ("deletes", [{"q": {"a": 4}, "limit": 0}])]))
    assert dl["queryPlanner"]["winningPlan"]["stage"] == "DELETE"
    assert dl["queryPlanner"]["winningPlan"]["inputStage"]["inputStage"]["stage"] == "IXSCAN"
    fm = explain(SON([("findAndModify", "c"), ("query", {"a": 5}), ("remove", True)]))
    assert fm["queryPlanner"]["winningPlan"]["stage"] == "DELETE"
    ag = explain(SON([("aggregate", "c"), ("pipeline", [{"$match": {"a": 3}},
                                                        {"$group": {"_id": "$a"}}]),
                      ("cursor", {})]), "queryPlanner")
    assert ag["stages"][0]["$cursor"]["queryPlanner"]["winningPlan"]["stage"] == "FETCH"
    assert list(ag["stages"][1]) == ["$group"]
    assert c.t.c.count_documents({}) == 100 and c.t.c.count_documents({"b": 1}) == 0


def plan_stages(plan):
    """Stage names of a plan tree, depth first (inputStage and inputStages)."""
    out = [plan["stage"]]
    if "inputStage" in plan:
        out += plan_stages(plan["inputStage"])
    for s in plan.get("inputStages", []):
        out += plan_stages(s)
    return out


def rand_doc(rng, i):
    d = {"_id": i}
    arr = rng.choice("abc")  # at most one array per document (no parallel arrays)
    for k in "abc":
        r = rng.random()
        if r < 0.1:
            continue  # missing
        if r < 0.3 and k == arr:
            d[k] = [rand_value(rng) for _ in range(rng.randint(0, 3))]
        else:
            d[k] = rand_value(rng)
    return d


def rand_or_filter(rng):
    branches = [rand_filter(rng) for _ in range(rng.randint(1, 3))]
    f = {"$or": branches}
    if rng.random() < 0.3:
        f[rng.choice(["a", "b", "c"])] = rand_pred(rng)
    return f


def rand_projection(rng):
    fields = rng.sample(["a", "b", "c"], rng.randint(1, 2))
    p = {k: 1 for k in fields}
    if rng.random() < 0.7:
        p["_id"] = 0
    return p


def test_plans_match_collection_scan_with_arrays_or_and_projections(db):
    """Differential: whatever plan the planner picks (OR, multi-plan winner, covered,
    COUNT_SCAN) returns what a collection scan returns, over documents with arrays,
    nulls and missing fields; two collections: one whose indexes stay non-multikey."""
    import random
    rng = random.Random(9090)
    db.m.insert_many([rand_doc(rng, i) for i in range(300)])
    db.s.insert_many([{"_id": i, **{k: rand_value(rng) for k in "abc" if rng.random() < 0.9}}
                      for i in range(300)])
    for coll in (db.m, db.s):
        for ix in INDEXES:
            coll.create_index(ix)
        coll.create_index([("b", 1), ("c", 1)])
    kinds = set()
    for _ in range(250):
        f = rand_or_filter(rng) if rng.random() < 0.5 else rand_filter(rng)
        proj = rand_projection(rng) if rng.random() < 0.5 else None
        for coll in (db.m, db.s):
            want = sorted((d for d in coll.find(f, proj).hint([("$natural", 1)])),
                          key=lambda d: repr(sorted(d.items())))
            got = sorted((d for d in coll.find(f, proj)), key=lambda d: repr(sorted(d.items())))
            assert got == want, (coll.name, f, proj)
            assert coll.count_documents(f) == len(want), (coll.name, f)
            n = db.command("count", coll.name, query=f)["n"]
            assert n == len(want), (coll.name, f)
            e = db.command("explain", {"find": coll.name, "filter": f,
                                       **({"projection": proj} if proj else {})})
            kinds.update(plan_stages(e["queryPlanner"]["winningPlan"]))
            if e["queryPlanner"]["rejectedPlans"]:
                kinds.add("rejected")
            e = db.command("explain", {"count": coll.name, "query": f})
            kinds.update(plan_stages(e["queryPlanner"]["winningPlan"]))
        # Sorted and limited (the sort-giving index competes): same sort keys as a scan.
        k, d, lim = rng.choice("abc"), rng.choice([1, -1]), rng.choice([0, 3, 20])
        got = list(db.s.find(f).sort(k, d).limit(lim))
        want = list(db.s.find(f).sort(k, d).limit(lim).hint([("$natural", 1)]))
        assert [sort_key(x, k) for x in got] == [sort_key(x, k) for x in want], (f, k, d, lim)
        if lim == 0:
            assert sorted(x["_id"] for x in got) == sorted(x["_id"] for x in want)
    assert {"OR", "PROJECTION_COVERED", "COUNT_SCAN", "rejected", "IXSCAN"} <= kinds, kinds


def test_or_plan_explain(db):
    db.c.insert_many([{"_id": i, "a": i % 20, "b": i % 7, "c": i} for i in range(200)])
    db.c.create_index("a")
    db.c.create_index("b")
    f = {"$or": [{"a": 3}, {"b": {"$in": [1, 2]}}]}
    e = db.command("explain", {"find": "c", "filter": f}, verbosity="executionStats")
    plan = e["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "FETCH"
    assert plan["inputStage"]["stage"] == "OR"
    ins = plan["inputStage"]["inputStages"]
    assert [s["stage"] for s in ins] == ["IXSCAN", "IXSCAN"]
    assert [s["indexName"] for s in ins] == ["a_1", "b_1"]
    assert ins[1]["indexBounds"] == {"b": ["[1, 1]", "[2, 2]"]}
    want = [d for d in db.c.find(f).hint([("$natural", 1)])]
    stats = e["executionStats"]
    assert stats["nReturned"] == len(want)
    # Documents in both branches are fetched once (the OR drops duplicate RecordIds).
    assert stats["totalDocsExamined"] == len(want)
    both = sum(1 for d in want if d["a"] == 3 and d["b"] in (1, 2))
    assert both > 0
    assert stats["executionStages"]["inputStage"]["dupsDropped"] == both
    # A branch no index can bound: a collection scan.
    f = {"$or": [{"a": 3}, {"c": 5}]}
    plan = db.command("explain", {"find": "c", "filter": f})["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "COLLSCAN"
    assert sorted(d["_id"] for d in db.c.find(f)) == \
        sorted(d["_id"] for d in db.c.find(f).hint([("$natural", 1)]))


def test_multi_plan_picks_productive_index_and_reports_rejected(db):
    # 'a' is nearly constant, 'b' nearly unique: {a: 1, b: 5} is answered best by b_1.
    db.c.insert_many([{"_id": i, "a": 1 if i % 50 else 2, "b": i} for i in range(2000)])
    db.c.create_index("a")
    db.c.create_index("b")
    e = db.command("explain", {"find": "c", "filter": {"a": 1, "b": {"$gte": 5, "$lt": 8}}},
                   verbosity="executionStats")
    qp = e["queryPlanner"]
    assert qp["winningPlan"]["inputStage"]["indexName"] == "b_1"
    assert [p["inputStage"]["indexName"] for p in qp["rejectedPlans"]] == ["a_1"]
    assert e["executionStats"]["nReturned"] == 3
    assert e["executionStats"]["totalKeysExamined"] <= 4
    # The other way round: a rare 'a' value beats a wide range on 'b'.
    e = db.command("explain", {"find": "c", "filter": {"a": 2, "b": {"$gte": 0}}})
    qp = e["queryPlanner"]
    assert qp["winningPlan"]["inputStage"]["indexName"] == "a_1"
    assert [p["inputStage"]["indexName"] for p in qp["rejectedPlans"]] == ["b_1"]
    # One candidate: nothing rejected.
    e = db.command("explain", {"find": "c", "filter": {"b": 5}})
    assert e["queryPlanner"]["rejectedPlans"] == []
    # A sort: an index that gives it streams, the others wait behind a blocking SORT.
    e = db.command("explain", {"find": "c", "filter": {"a": {"$gte": 1}}, "sort": {"b": -1},
                               "limit": 5}, verbosity="executionStats")
    qp = e["queryPlanner"]
    assert plan_stages(qp["winningPlan"]) == ["LIMIT", "FETCH", "IXSCAN"]
    assert qp["winningPlan"]["inputStage"]["inputStage"]["indexName"] == "b_1"
    assert [plan_stages(p) for p in qp["rejectedPlans"]] == [["FETCH", "IXSCAN"]]
    assert e["executionStats"]["totalKeysExamined"] <= 6
    assert [d["b"] for d in db.c.find({"a": {"$gte": 1}}).sort("b", -1).limit(5)] == \
        [1999, 1998, 1997, 1996, 1995]
    # ... unless the selective index ends first.
    e = db.command("explain", {"find": "c", "filter": {"a": 2, "b": {"$lt": 200}},
                               "sort": {"b": -1}})
    plan = e["queryPlanner"]["winningPlan"]
    assert plan_stages(plan) == ["SORT", "FETCH", "IXSCAN"]
    assert plan["inputStage"]["inputStage"]["indexName"] == "a_1"


def test_covered_queries(db):
    db.c.insert_many([{"_id": i, "s": "k%03d" % i, "t": "v%d" % (i % 5), "n": i}
                      for i in range(100)])
    db.c.create_index([("s", 1), ("t", 1)])
    e = db.command("explain", {"find": "c", "filter": {"s": {"$gte": "k010", "$lt": "k020"}},
                               "projection": {"_id": 0, "s": 1, "t": 1}},
                   verbosity="executionStats")
    assert plan_stages(e["queryPlanner"]["winningPlan"]) == ["PROJECTION_COVERED", "IXSCAN"]
    assert e["executionStats"]["totalDocsExamined"] == 0
    assert e["executionStats"]["nReturned"] == 10
    got = list(db.c.find({"s": {"$gte": "k010", "$lt": "k020"}}, {"_id": 0, "s": 1, "t": 1}))
    assert got == [{"s": "k%03d" % i, "t": "v%d" % (i % 5)} for i in range(10, 20)]
    # A residual filter on an index field runs on the key.
    got = list(db.c.find({"s": {"$gte": "k010", "$lt": "k020"}, "t": "v1"},
                         {"_id": 0, "t": 1, "s": 1}))
    assert got == [{"s": "k011", "t": "v1"}, {"s": "k016", "t": "v1"}]
    # _id included (not in the index), a field outside the index: FETCH.
    for proj in ({"s": 1}, {"_id": 0, "s": 1, "n": 1}):
        e = db.command("explain", {"find": "c", "filter": {"s": "k001"}, "projection": proj})
        assert "FETCH" in plan_stages(e["queryPlanner"]["winningPlan"]), proj
    # The _id index covers a projection of _id alone.
    db.f.insert_many([{"_id": c, "n": 1} for c in "abcde"])
    e = db.command("explain", {"find": "f", "filter": {"_id": {"$gte": "c"}},
                               "projection": {"_id": 1}}, verbosity="executionStats")
    assert plan_stages(e["queryPlanner"]["winningPlan"]) == ["PROJECTION_COVERED", "IXSCAN"]
    assert e["executionStats"]["totalDocsExamined"] == 0
    assert list(db.f.find({"_id": {"$gte": "c"}}, {"_id": 1})) == [{"_id": c} for c in "cde"]
    # Numbers keep their BSON type: values the key cannot restore are read from the record.
    db.d.insert_many([{"_id": 1, "x": 1.0}, {"_id": 2, "x": 2}])
    db.d.create_index("x")
    got = list(db.d.find({"x": {"$gte": 0}}, {"_id": 0, "x": 1}))
    assert [type(d["x"]) for d in got] == [float, int]
    e = db.command("explain", {"find": "d", "filter": {"x": {"$gte": 0}},
                               "projection": {"_id": 0, "x": 1}}, verbosity="executionStats")
    assert e["executionStats"]["totalDocsExamined"] == 2
    # A field that only ever held one numeric type is restored from the key alone.
    from bson.int64 import Int64
    db.h.create_index([("i", 1), ("l", 1), ("f", 1)])
    db.h.insert_many([{"_id": k, "i": k, "l": Int64(k * 10), "f": k + 0.5} for k in range(5)])
    proj = {"_id": 0, "i": 1, "l": 1, "f": 1}
    e = db.command("explain", {"find": "h", "filter": {"i": {"$gte": 1}}, "projection": proj},
                   verbosity="executionStats")
    assert plan_stages(e["queryPlanner"]["winningPlan"]) == ["PROJECTION_COVERED", "IXSCAN"]
    assert e["executionStats"]["totalDocsExamined"] == 0
    got = list(db.h.find({"i": {"$gte": 1}}, proj))
    assert got == [{"i": k, "l": k * 10, "f": k + 0.5} for k in range(1, 5)]
    assert all(type(d["i"]) is int and isinstance(d["l"], Int64) and type(d["f"]) is float
               for d in got)
    # Missing vs null: {a: null} matches both, and only the null one has the field.
    db.e.insert_many([{"_id": 1, "a": None}, {"_id": 2}, {"_id": 3, "a": "x"}])
    db.e.create_index("a")
    got = sorted(db.e.find({"a": None}, {"_id": 0, "a": 1}), key=repr)
    assert got == sorted([{"a": None}, {}], key=repr)
    # As in MongoDB, a null comparison is not covered (the key cannot tell null from missing).
    e = db.command("explain", {"find": "e", "filter": {"a": None}, "projection": {"_id": 0, "a": 1}})
    assert "FETCH" in plan_stages(e["queryPlanner"]["winningPlan"])
    # Elsewhere a null key value is read from the record: {t: 1} documents without t.
    db.g.insert_many([{"_id": 1, "s": "a", "t": "x"}, {"_id": 2, "s": "b"}])
    db.g.create_index([("s", 1), ("t", 1)])
    e = db.command("explain", {"find": "g", "filter": {"s": {"$gte": "a"}},
                               "projection": {"_id": 0, "s": 1, "t": 1}}, verbosity="executionStats")
    assert plan_stages(e["queryPlanner"]["winningPlan"]) == ["PROJECTION_COVERED", "IXSCAN"]
    assert e["executionStats"]["totalDocsExamined"] == 1
    assert list(db.g.find({"s": {"$gte": "a"}}, {"_id": 0, "s": 1, "t": 1})) == \
        [{"s": "a", "t": "x"}, {"s": "b"}]
    # A multikey index never covers (one-element arrays included).
    db.e.insert_one({"_id": 4, "a": ["y"]})
    e = db.command("explain", {"find": "e", "filter": {"a": "y"}, "projection": {"_id": 0, "a": 1}})
    assert "FETCH" in plan_stages(e["queryPlanner"]["winningPlan"])
    assert list(db.e.find({"a": "y"}, {"_id": 0, "a": 1})) == [{"a": ["y"]}]


def test_count_scan(db):
    from bson.decimal128 import Decimal128
    db.c.insert_many([{"_id": i, "a": i % 10, "b": i % 3, "s": "x%d" % (i % 4)}
                      for i in range(300)])
    db.c.create_index([("a", 1), ("b", -1)])
    db.c.create_index("s")
    cases = [
        ({"a": 3}, None),
        ({"a": 3, "b": 1}, None),
        ({"a": 3, "b": {"$gt": 0}}, None),
        ({"a": {"$gte": 2, "$lt": 5}}, None),
        ({"a": {"$gt": 7}}, None),
        ({"a": {"$lte": 1}}, None),
        ({"s": {"$gt": "x1", "$lte": "x3"}}, None),
        ({"s": "x2"}, None),
        ({"a": {"$in": [1, 2]}}, "FETCH"),   # several intervals
        ({"b": 1}, "COLLSCAN"),              # not a prefix
        ({"s": {"$gt": "x1"}}, "FETCH"),     # one-sided string range: not exact
        ({"a": 3, "n": 1}, "FETCH"),         # a field outside the index
        ({"a": {"$gt": Decimal128("NaN")}}, "FETCH"),  # decimals: not bounded exactly
    ]
    for f, other in cases:
        want = sum(1 for _ in db.c.find(f).hint([("$natural", 1)]))
        assert db.command("count", "c", query=f)["n"] == want, f
        assert db.command("count", "c", query=f, skip=2, limit=5)["n"] == \
            max(0, min(5, want - 2)), f
        e = db.command("explain", {"count": "c", "query": f}, verbosity="executionStats")
        names = plan_stages(e["queryPlanner"]["winningPlan"])
        assert names[0] == "COUNT", f
        if other is None:
            assert names == ["COUNT", "COUNT_SCAN"], f
            assert e["executionStats"]["totalDocsExamined"] == 0
            assert e["executionStats"]["executionStages"]["nCounted"] == want
        else:
            assert other in names, (f, names)
    e = db.command("explain", {"count": "c", "query": {"a": 3, "b": {"$gt": 0}}})
    b = e["queryPlanner"]["winningPlan"]["inputStage"]["indexBounds"]
    assert b["startKey"] == {"a": 3, "b": {"$maxKey": 1}} or b["startKey"]["a"] == 3
    assert b["endKeyInclusive"] is False


def test_multikey_paths_bound_non_array_fields(node):
    db = node.client().test
    db.c.create_index([("a", 1), ("b", 1)])
    db.c.insert_many([{"_id": i, "a": [i % 5, i % 7], "b": i % 11} for i in range(200)])
    db.c.insert_one({"_id": 1000, "a": 3, "b": [1, 2]})  # b holds an array too now
    db.d.create_index([("a", 1), ("b", 1)])
    db.d.insert_many([{"_id": i, "a": [i % 5, i % 7], "b": i % 11} for i in range(200)])
    f = {"a": 3, "b": {"$gte": 2, "$lte": 4}}
    e = db.command("explain", {"find": "d", "filter": f}, verbosity="executionStats")
    ix = e["queryPlanner"]["winningPlan"]["inputStage"]
    assert ix["isMultiKey"] is True
    assert ix["multiKeyPaths"] == {"a": ["a"], "b": []}
    # b never held an array: both sides of its range bound the scan.
    assert ix["indexBounds"] == {"a": ["[3, 3]"], "b": ["[2, 4]"]}
    want = [d for d in db.d.find(f).hint([("$natural", 1)])]
    assert sorted(d["_id"] for d in db.d.find(f)) == sorted(d["_id"] for d in want)
    assert e["executionStats"]["totalKeysExamined"] <= len(want) + 1
    # On the array field a range keeps one side; on c (b also arrays) likewise.
    e = db.command("explain", {"find": "d", "filter": {"a": {"$gt": 1, "$lt": 3}}})
    assert e["queryPlanner"]["winningPlan"]["inputStage"]["indexBounds"]["a"] == ["(1, MaxKey]"]
    # Both sides of one $elemMatch hold for one element: they bound the array field together.
    em = {"a": {"$elemMatch": {"$gt": 1, "$lt": 3}}}
    e = db.command("explain", {"find": "d", "filter": em})
    assert e["queryPlanner"]["winningPlan"]["inputStage"]["indexBounds"]["a"] == ["(1, 3)"]
    e = db.command("explain", {"find": "c", "filter": f})
    ix = e["queryPlanner"]["winningPlan"]["inputStage"]
    assert ix["multiKeyPaths"] == {"a": ["a"], "b": ["b"]}
    assert ix["indexBounds"] == {"a": ["[3, 3]"], "b": ["[2, MaxKey]"]}
    for coll in ("c", "d"):
        for g in (f, {"a": {"$gt": 1, "$lt": 3}}, {"a": 2, "b": {"$lt": 3}}, em,
                  {"a": {"$elemMatch": {"$gte": 2, "$lte": 2}, "$gt": 3}},
                  {"a": {"$in": [1, 4]}, "b": {"$gt": 5, "$lte": 9}}):
            got = sorted(d["_id"] for d in db[coll].find(g))
            want = sorted(d["_id"] for d in db[coll].find(g).hint([("$natural", 1)]))
            assert got == want, (coll, g)
    # The per-field paths survive a restart.
    node.stop()
    node.start()
    db = node.client().test
    e = db.command("explain", {"find": "d", "filter": f})
    assert e["queryPlanner"]["winningPlan"]["inputStage"]["multiKeyPaths"] == {"a": ["a"], "b": []}


def test_or_cursor_killed_when_any_of_its_indexes_is_dropped(db):
    from pymongo.errors import OperationFailure
    db.c.insert_many([{"_id": i, "a": i % 10, "b": i % 9} for i in range(100)])
    db.c.create_index("a")
    db.c.create_index("b")
    f = {"$or": [{"a": 1}, {"b": 2}]}
    r = db.command("find", "c", filter=f, batchSize=2)
    assert r["cursor"]["id"] != 0
    ok = db.command("find", "c", filter=f, batchSize=2)["cursor"]["id"]
    db.c.drop_index("b_1")
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", r["cursor"]["id"], collection="c")
    assert e.value.code == 175  # QueryPlanKilled
    assert "b_1" in str(e.value)
    db.command("killCursors", "c", cursors=[ok])
