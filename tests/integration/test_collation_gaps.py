"""Collation where issue 20's first round left it out (docs/design/collation.md "Not yet"):
update operators ($addToSet, $pull, $pullAll, $min/$max, $push $sort), arrayFilters,
pipeline updates and the set operators ($setUnion ...) compare strings under the command's
collation or the collection's default, on a node and through a 2-shard router."""

import pytest
from pymongo.collation import Collation

from shale_fixtures import shard_on_id

CI = Collation("en", strength=2)  # case-insensitive


@pytest.fixture(scope="module")
def routed(cluster):
    """colgap.sh sharded on {_id: 1}, _id 0-9 on shard0 and 10+ on shard1."""
    return shard_on_id(cluster.router_client(), "colgap", "sh")


@pytest.fixture(params=["node", "router"])
def coll(request, module_node, routed):
    """A fresh collection: on a node, or the sharded one through the router (both shards)."""
    if request.param == "node":
        c = module_node.client().colgap.c
        c.drop()
    else:
        c = routed.sh
        c.delete_many({})
    return c


# Each case: the document, the update, the expected field 'a' after it under CI, and
# (when it differs) the expected 'a' under the simple collation.
UPDATE_CASES = [
    ("addToSet", ["Apple"], {"$addToSet": {"a": "apple"}}, ["Apple"], ["Apple", "apple"]),
    ("addToSet_each", ["x"], {"$addToSet": {"a": {"$each": ["X", "y", "Y"]}}}, ["x", "y"],
     ["x", "X", "y", "Y"]),
    ("pull", ["A", "b", "a"], {"$pull": {"a": "a"}}, ["b"], ["A", "b"]),
    ("pull_cond", ["A", "b", "C"], {"$pull": {"a": {"$in": ["a", "c"]}}}, ["b"],
     ["A", "b", "C"]),
    ("pullAll", ["A", "b", "B"], {"$pullAll": {"a": ["b"]}}, ["A"], ["A", "B"]),
    ("min", "b", {"$min": {"a": "B"}}, "b", "B"),
    ("max", "B", {"$max": {"a": "a"}}, "B", "a"),
    ("push_sort", ["b", "C"], {"$push": {"a": {"$each": ["a"], "$sort": 1}}},
     ["a", "b", "C"], ["C", "a", "b"]),
]


@pytest.mark.parametrize("case", UPDATE_CASES, ids=[c[0] for c in UPDATE_CASES])
def test_update_operators_under_collation(coll, case):
    _, a, upd, want_ci, want_simple = case
    coll.insert_many([{"_id": 1, "a": a}, {"_id": 11, "a": a}])
    assert coll.update_one({"_id": 1}, upd, collation=CI).matched_count == 1
    assert coll.update_one({"_id": 11}, upd).matched_count == 1
    assert coll.find_one({"_id": 1})["a"] == want_ci
    assert coll.find_one({"_id": 11})["a"] == want_simple
    # findAndModify takes the same collation.
    coll.replace_one({"_id": 1}, {"a": a})
    doc = coll.find_one_and_update({"_id": 1}, upd, collation=CI, return_document=True)
    assert doc["a"] == want_ci


def test_array_filters_under_collation(coll):
    coll.insert_one({"_id": 2, "a": [{"k": "X", "v": 0}, {"k": "y", "v": 0}]})
    coll.update_one({"_id": 2}, {"$set": {"a.$[e].v": 1}}, array_filters=[{"e.k": "x"}],
                    collation=CI)
    assert [e["v"] for e in coll.find_one({"_id": 2})["a"]] == [1, 0]
    coll.update_one({"_id": 2}, {"$set": {"a.$[e].v": 2}}, array_filters=[{"e.k": "Y"}])
    assert [e["v"] for e in coll.find_one({"_id": 2})["a"]] == [1, 0]


def test_pipeline_update_under_collation(coll):
    coll.insert_one({"_id": 3, "s": "abc"})
    coll.update_one({"_id": 3}, [{"$set": {"eq": {"$eq": ["$s", "ABC"]}}}], collation=CI)
    assert coll.find_one({"_id": 3})["eq"] is True
    coll.update_one({"_id": 3}, [{"$set": {"eq": {"$eq": ["$s", "ABC"]}}}])
    assert coll.find_one({"_id": 3})["eq"] is False


def test_collection_default_applies_to_update_operators(module_node):
    d = module_node.client().colgap
    d.drop_collection("dflt")
    c = d.create_collection("dflt", collation=CI)
    c.insert_one({"_id": 1, "a": ["Apple"]})
    c.update_one({"_id": 1}, {"$addToSet": {"a": "APPLE"}})
    assert c.find_one({"_id": 1})["a"] == ["Apple"]
    # An explicit simple collation overrides the default.
    c.update_one({"_id": 1}, {"$addToSet": {"a": "APPLE"}}, collation=Collation("simple"))
    assert c.find_one({"_id": 1})["a"] == ["Apple", "APPLE"]


SET_CASES = [
    ({"$setUnion": [["a", "B"], ["A", "b", "c"]]}, 3, 5),
    ({"$setIntersection": [["a", "B"], ["A", "x"]]}, 1, 0),
    ({"$setDifference": [["a", "B", "c"], ["A"]]}, 2, 3),
    ({"$setEquals": [["a", "B"], ["b", "A", "a"]]}, True, False),
    ({"$setIsSubset": [["a"], ["A", "B"]]}, True, False),
]


@pytest.mark.parametrize("expr,ci,simple", SET_CASES,
                         ids=[next(iter(c[0])) for c in SET_CASES])
def test_set_operators_under_collation(coll, expr, ci, simple):
    coll.insert_many([{"_id": 4}, {"_id": 14}])

    def run(**kw):
        out = list(coll.aggregate([{"$project": {"r": expr}}], **kw))
        assert len(out) == 2
        r = out[0]["r"]
        assert all(d["r"] == r for d in out)  # both shards agree
        return len(r) if isinstance(r, list) else r
    assert run(collation=CI) == ci
    assert run() == simple


def test_lookup_and_graph_lookup_under_collation(coll):
    """The foreign collection is matched under the aggregate's collation, not its own."""
    db = coll.database
    db.colors.drop()
    db.colors.insert_many([{"_id": 1, "name": "Red", "next": "GREEN"},
                           {"_id": 2, "name": "green", "next": "blue"},
                           {"_id": 3, "name": "BLUE"}])
    coll.insert_many([{"_id": 5, "c": "red"}, {"_id": 15, "c": "RED"}])

    def lookup(**kw):
        out = coll.aggregate([{"$lookup": {"from": "colors", "localField": "c",
                                           "foreignField": "name", "as": "m"}},
                              {"$sort": {"_id": 1}}], **kw)
        return [len(d["m"]) for d in out]
    assert lookup(collation=CI) == [1, 1]
    assert lookup() == [0, 0]

    def chain(**kw):
        out = list(coll.aggregate([{"$match": {"_id": 5}},
                                   {"$graphLookup": {"from": "colors", "startWith": "$c",
                                                     "connectFromField": "next",
                                                     "connectToField": "name", "as": "g"}}],
                                  **kw))
        return sorted(x["_id"] for x in out[0]["g"])
    assert chain(collation=CI) == [1, 2, 3]
    assert chain() == []


def test_set_window_fields_under_collation(coll):
    coll.insert_many([{"_id": 6, "p": "a", "s": "b"}, {"_id": 7, "p": "A", "s": "C"},
                      {"_id": 16, "p": "a", "s": "a"}])

    def run(**kw):
        out = coll.aggregate([{"$setWindowFields": {
            "partitionBy": "$p", "sortBy": {"s": 1},
            "output": {"n": {"$documentNumber": {}}, "c": {"$count": {}}}}}], **kw)
        return sorted((d["_id"], d["n"], d["c"]) for d in out)
    # One partition of three under CI, sorted a < b < C; two partitions otherwise.
    assert run(collation=CI) == [(6, 2, 3), (7, 3, 3), (16, 1, 3)]
    assert run() == [(6, 2, 2), (7, 1, 1), (16, 1, 2)]


def test_explain_prints_collation_keys(module_node):
    """A collated index's bounds hold collation keys: explain prints them as MongoDB does,
    CollationKey(0x<hex>), and a simple index's bounds stay plain strings; the IXSCAN stage
    shows the index's collation."""
    c = module_node.client().colgap.explained
    c.drop()
    c.create_index("w", name="w_ci", collation=CI)
    c.create_index("v", name="v_simple")
    c.insert_one({"w": "Apple", "v": "Apple"})

    def bounds(field, val, **kw):
        cmd = {"find": "explained", "filter": {field: val}}
        cmd.update(kw)
        plan = c.database.command("explain", cmd)["queryPlanner"]["winningPlan"]
        while "inputStage" in plan:
            plan = plan["inputStage"]
        # The scan names its index's collation (the full spec), only when it has one.
        assert plan.get("collation", {}).get("locale") == ("en" if field == "w" else None)
        return plan["indexBounds"][field]
    got = bounds("w", "apple", collation=CI.document)
    assert len(got) == 1 and got[0].startswith("[CollationKey(0x")
    lo, hi = got[0][1:-1].split(", ")
    assert lo == hi and all(ch in "0123456789abcdef" for ch in lo[len("CollationKey(0x"):-1])
    assert bounds("v", "Apple") == ['["Apple", "Apple"]']
    got = bounds("w", {"$in": ["a", "b"]}, collation=CI.document)
    assert got[0].count("CollationKey(0x") == 2


def test_window_min_max_rank_under_collation(coll):
    """Window $min/$max (sliding and whole-partition), $group's $max, and $rank/$denseRank
    ties compare strings under the aggregate's collation."""
    coll.insert_many([{"_id": 1, "s": "a"}, {"_id": 2, "s": "B"}, {"_id": 11, "s": "A"}])

    def run(**kw):
        out = coll.aggregate([{"$setWindowFields": {"sortBy": {"_id": 1}, "output": {
            "mx": {"$max": "$s", "window": {"documents": ["unbounded", "unbounded"]}},
            "mn": {"$min": "$s", "window": {"documents": [-1, 0]}}}}},
            {"$sort": {"_id": 1}}], **kw)
        return [(d["mx"], d["mn"]) for d in out]
    assert run(collation=CI) == [("B", "a"), ("B", "a"), ("B", "A")]
    assert run() == [("a", "a"), ("a", "B"), ("a", "A")]

    def rank(**kw):
        out = coll.aggregate([{"$setWindowFields": {"sortBy": {"s": 1}, "output": {
            "r": {"$rank": {}}, "d": {"$denseRank": {}}}}}], **kw)
        return sorted((d["_id"], d["r"], d["d"]) for d in out)
    assert rank(collation=CI) == [(1, 1, 1), (2, 3, 2), (11, 1, 1)]
    assert rank() == [(1, 3, 3), (2, 2, 2), (11, 1, 1)]
    grp = list(coll.aggregate([{"$group": {"_id": None, "m": {"$max": "$s"},
                                           "set": {"$addToSet": "$s"}}}], collation=CI))
    assert grp[0]["m"] == "B" and len(grp[0]["set"]) == 2


def test_densify_partitions_under_collation(coll):
    coll.insert_many([{"_id": 1, "p": "a", "x": 1}, {"_id": 11, "p": "A", "x": 3}])

    def run(**kw):
        out = coll.aggregate([{"$densify": {"field": "x", "partitionByFields": ["p"],
                                            "range": {"step": 1, "bounds": "partition"}}},
                              {"$project": {"_id": 0, "x": 1}}], **kw)
        return sorted(d["x"] for d in out)
    assert run(collation=CI) == [1, 2, 3]  # one partition: "a" and "A" are equal
    assert run() == [1, 3]


def test_graph_lookup_visited_under_collation(coll):
    """Documents whose _ids are equal under the collation are one visited document."""
    db = coll.database
    db.nodes.drop()
    db.nodes.insert_many([{"_id": "n", "name": "x"}, {"_id": "N", "name": "x"}])
    coll.insert_one({"_id": 5, "c": "x"})

    def run(**kw):
        out = list(coll.aggregate([{"$graphLookup": {
            "from": "nodes", "startWith": "$c", "connectFromField": "name",
            "connectToField": "name", "as": "g"}}], **kw))
        return len(out[0]["g"])
    assert run(collation=CI) == 1
    assert run() == 2
