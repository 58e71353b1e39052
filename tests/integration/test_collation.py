"""Collation (issue 20 item 1) as a user sees it through pymongo: MongoDB's validation errors
and normalised spec, collation-aware find/sort/count/distinct/update/delete/findAndModify/
aggregate, collection default collations, indexes with a collation (keys from ICU sort keys,
differential: index plan vs collection scan), on a plain node and through a 2-shard router
(sharded and unsharded collections)."""

import pytest
from pymongo import ASCENDING
from pymongo.collation import Collation
from pymongo.errors import OperationFailure

from shale_fixtures import ShaleProcess, stop_all

CI = Collation("en", strength=2)          # case-insensitive
NUM = Collation("en", numericOrdering=True)
WORDS = ["apple", "Apple", "APPLE", "banana", "Banana", "cherry", "éclair", "eclair", "10",
         "9", "100", "Zebra", "zebra"]


@pytest.fixture(scope="module")
def plain_node():
    p = ShaleProcess(["node"], name="coll-node")
    p.start()
    yield p
    stop_all([p])
    p.cleanup()


@pytest.fixture(scope="module")
def db(plain_node):
    client = plain_node.client()
    d = client.colltest
    d.words.drop()
    d.words.insert_many([{"_id": i, "w": w} for i, w in enumerate(WORDS)])
    return d


def plan_indexes(db, cmd):
    """Every indexName in the winning plan of 'cmd' (explained)."""
    names = set()

    def walk(p):
        if isinstance(p, dict):
            if "indexName" in p:
                names.add(p["indexName"])
            for v in p.values():
                walk(v)
        elif isinstance(p, list):
            for v in p:
                walk(v)
    walk(db.command("explain", cmd)["queryPlanner"]["winningPlan"])
    return names


def ws(docs):
    return [d["w"] for d in docs]


# ---------------------------------------------------------------- the spec

BAD_SPECS = [
    ({"strength": 2}, 4),                              # NoSuchKey: locale
    ({"locale": 1}, 14),
    ({"locale": "simple", "strength": 1}, 9),
    ({"locale": "xx_bogus"}, 2),
    ({"locale": ""}, 2),
    ({"locale": "en", "strength": 6}, 9),
    ({"locale": "en", "strength": 1.5}, 2),
    ({"locale": "en", "caseLevel": 1}, 14),
    ({"locale": "en", "caseFirst": "middle"}, 9),
    ({"locale": "en", "alternate": "ignore"}, 9),
    ({"locale": "en", "maxVariable": "all"}, 9),
    ({"locale": "en", "unknownField": True}, 9),
    ({"locale": "en", "version": "1.0"}, 161),
    ({"locale": "en", "strength": 1, "backwards": True}, 2),
    ({"locale": "en", "strength": 2, "caseFirst": "upper"}, 2),
]


@pytest.mark.parametrize("spec,code", BAD_SPECS)
def test_bad_collation_spec(db, spec, code):
    with pytest.raises(OperationFailure) as e:
        db.command("find", "words", filter={}, collation=spec)
    assert e.value.code == code, e.value.details


def test_bad_collation_type(db):
    with pytest.raises(OperationFailure) as e:
        db.command("find", "words", filter={}, collation="en")
    assert e.value.code == 14


def test_unknown_locale_suggests(db):
    with pytest.raises(OperationFailure) as e:
        db.command("find", "words", filter={}, collation={"locale": "en_us"})
    assert e.value.code == 2
    assert "Did you mean 'en_US'" in str(e.value)


# ---------------------------------------------------------------- queries on a node

def test_find_equality_range_in(db):
    assert sorted(ws(db.words.find({"w": "apple"}, collation=CI))) == ["APPLE", "Apple", "apple"]
    assert ws(db.words.find({"w": "apple"})) == ["apple"]
    assert sorted(ws(db.words.find({"w": {"$in": ["BANANA", "zebra"]}}, collation=CI))) == \
        ["Banana", "Zebra", "banana", "zebra"]
    assert sorted(ws(db.words.find({"w": {"$nin": ["APPLE", "banana", "9", "10", "100"]}},
                                   collation=CI))) == \
        ["Zebra", "cherry", "eclair", "zebra", "éclair"]
    # With the locale's order, "b" < "Z": a range the simple collation would not give.
    assert sorted(ws(db.words.find({"w": {"$gte": "b", "$lt": "d"}}, collation=CI))) == \
        ["Banana", "banana", "cherry"]
    assert sorted(ws(db.words.find({"w": {"$gte": "b", "$lt": "d"}}))) == \
        ["banana", "cherry"]
    # Secondary strength keeps accents apart; primary does not.
    assert ws(db.words.find({"w": "eclair"}, collation=CI)) == ["eclair"]
    assert sorted(ws(db.words.find({"w": "ECLAIR"}, collation=Collation("en", strength=1)))) \
        == ["eclair", "éclair"]


def test_sort(db):
    got = ws(db.words.find({"w": {"$in": ["10", "9", "100"]}}).sort("w", 1).collation(NUM))
    assert got == ["9", "10", "100"]
    got = ws(db.words.find({"w": {"$in": ["10", "9", "100"]}}).sort("w", 1))
    assert got == ["10", "100", "9"]
    got = ws(db.words.find({"w": {"$regex": "^[aA]"}}).sort("w", -1).collation(
        Collation("en", caseFirst="upper")))
    assert got == ["apple", "Apple", "APPLE"]
    got = ws(db.words.find({"w": {"$regex": "^[zZbB]"}}).sort("w", 1).collation(CI))
    assert [w.lower() for w in got] == ["banana", "banana", "zebra", "zebra"]


def test_count_distinct_aggregate(db):
    assert db.words.count_documents({"w": "APPLE"}, collation=CI) == 3
    assert db.command("count", "words", query={"w": "APPLE"},
                      collation={"locale": "en", "strength": 2})["n"] == 3
    vals = db.words.distinct("w", {"w": {"$regex": "^[aAbB]"}}, collation=CI)
    assert sorted(v.lower() for v in vals) == ["apple", "banana"]
    assert len(db.words.distinct("w", {"w": {"$regex": "^[aAbB]"}})) == 5
    out = list(db.words.aggregate([
        {"$match": {"w": {"$in": ["apple", "banana"]}}},
        {"$group": {"_id": "$w", "n": {"$sum": 1}}},
        {"$sort": {"n": -1}}], collation=CI))
    assert [d["n"] for d in out] == [3, 2]
    out = list(db.words.aggregate([{"$sort": {"w": 1}}, {"$limit": 3}], collation=NUM))
    assert ws(out) == ["9", "10", "100"]
    # Expressions compare under the collation too ($eq, $in, $cmp), in $expr and stages.
    assert db.words.count_documents({"$expr": {"$eq": ["$w", "APPLE"]}}, collation=CI) == 3
    out = list(db.words.aggregate([
        {"$match": {"w": {"$in": ["apple", "zebra"]}}},
        {"$project": {"_id": 0, "w": 1, "is": {"$in": ["$w", ["ZEBRA"]]},
                      "c": {"$cmp": ["$w", "APPLE"]}}},
        {"$sort": {"w": 1}}], collation=CI))
    assert [(d["is"], d["c"]) for d in out] == [(False, 0)] * 3 + [(True, 1)] * 2, out


def test_writes_with_collation(db):
    c = db.writes
    c.drop()
    c.insert_many([{"_id": i, "w": w} for i, w in enumerate(["a", "A", "b", "B"])])
    r = c.update_many({"w": "a"}, {"$set": {"hit": True}}, collation=CI)
    assert r.matched_count == 2
    r = c.update_one({"w": "b"}, {"$set": {"one": True}})
    assert r.matched_count == 1
    doc = c.find_one_and_update({"w": "B"}, {"$set": {"fam": 1}}, collation=CI,
                                sort=[("_id", ASCENDING)])
    assert doc["w"] == "b"
    assert c.delete_many({"w": "A"}, collation=CI).deleted_count == 2
    assert c.delete_many({"w": "B"}).deleted_count == 1
    assert ws(c.find()) == ["b"]


# ---------------------------------------------------------------- collection defaults

def test_collection_default_collation(db):
    db.drop_collection("dflt")
    db.create_collection("dflt", collation=CI)
    info = db.command("listCollections", filter={"name": "dflt"})["cursor"]["firstBatch"][0]
    spec = info["options"]["collation"]
    assert spec["locale"] == "en" and spec["strength"] == 2
    assert spec["caseLevel"] is False and spec["caseFirst"] == "off"
    assert spec["numericOrdering"] is False and spec["alternate"] == "non-ignorable"
    assert spec["maxVariable"] == "punct" and spec["normalization"] is False
    assert spec["backwards"] is False and isinstance(spec["version"], str)
    c = db.dflt
    c.insert_many([{"_id": 1, "w": "x"}, {"_id": 2, "w": "X"}, {"_id": 3, "w": "y"}])
    assert c.count_documents({"w": "x"}) == 2                       # inherited
    assert c.count_documents({"w": "x"}, collation=Collation("simple")) == 1
    assert sorted(c.distinct("w", {"w": {"$ne": "y"}})) in (["X"], ["x"])
    assert c.update_many({"w": "X"}, {"$set": {"u": 1}}).matched_count == 2
    assert len(list(c.aggregate([{"$match": {"w": "X"}}]))) == 2
    # A simple collation is not stored.
    db.drop_collection("plain")
    db.create_collection("plain", collation=Collation("simple"))
    info = db.command("listCollections", filter={"name": "plain"})["cursor"]["firstBatch"][0]
    assert "collation" not in info["options"]


def test_id_index_takes_the_default_collation(db):
    db.drop_collection("ids")
    db.create_collection("ids", collation=CI)
    spec = {i["name"]: i for i in db.ids.list_indexes()}["_id_"]
    assert spec["collation"]["locale"] == "en" and spec["collation"]["strength"] == 2
    db.ids.insert_one({"_id": "key", "v": 1})
    with pytest.raises(OperationFailure) as e:
        db.ids.insert_one({"_id": "KEY"})
    assert e.value.code == 11000
    assert db.ids.find_one({"_id": "KEY"})["v"] == 1                     # point lookup
    assert db.ids.find_one({"_id": "KEY"}, collation=Collation("simple")) is None
    assert db.ids.find_one({"_id": "key"}, collation=Collation("simple"))["v"] == 1
    assert db.ids.update_one({"_id": "Key"}, {"$set": {"v": 2}}).modified_count == 1
    assert db.ids.find_one({"_id": "key"})["v"] == 2


def test_create_with_bad_collation(db):
    with pytest.raises(OperationFailure) as e:
        db.create_collection("badcoll", collation={"locale": "en", "strength": 9})
    assert e.value.code == 9


# ---------------------------------------------------------------- indexes

def test_index_with_collation(db):
    c = db.idx
    c.drop()
    c.insert_many([{"_id": i, "w": w, "n": i} for i, w in enumerate(WORDS * 3)])
    c.create_index([("w", 1)], name="w_ci", collation=CI)
    c.create_index([("n", 1)], name="n_simple")
    specs = {i["name"]: i for i in c.list_indexes()}
    assert specs["w_ci"]["collation"]["locale"] == "en"
    assert specs["w_ci"]["collation"]["strength"] == 2
    assert "collation" not in specs["n_simple"]
    # Differential: hinted collection scan vs the planner's choice, under both collations.
    for coll in (CI, None, NUM):
        for flt in ({"w": "apple"}, {"w": {"$gt": "b"}}, {"w": {"$in": ["ZEBRA", "9"]}},
                    {"n": {"$lt": 5}, "w": {"$lte": "Banana"}}):
            kw = {"collation": coll} if coll else {}
            planned = sorted(d["_id"] for d in c.find(flt, **kw))
            scanned = sorted(d["_id"] for d in c.find(flt, **kw).hint([("$natural", 1)]))
            assert planned == scanned, (flt, coll)
    # The planner uses the collated index only for a query of the same collation, and
    # never for a regex under it.
    assert "w_ci" in plan_indexes(db, {"find": "idx", "filter": {"w": "APPLE"},
                                       "collation": CI.document})
    assert "w_ci" in plan_indexes(db, {"find": "idx", "filter": {"w": {"$gt": "x"}},
                                       "sort": {"w": 1}, "collation": CI.document})
    assert "w_ci" not in plan_indexes(db, {"find": "idx", "filter": {"w": "APPLE"}})
    assert "w_ci" not in plan_indexes(db, {"find": "idx", "filter": {"w": "APPLE"},
                                           "collation": NUM.document})
    assert "w_ci" not in plan_indexes(db, {"find": "idx", "filter": {"w": {"$regex": "^a"}},
                                           "collation": CI.document})
    assert c.count_documents({"w": "APPLE"}, collation=CI) == 9
    # The bounds hold ICU sort keys: explain still decodes (bytes past ASCII as \xNN).
    for v in ("ÉCLAIR", "Ωmega", "日本"):
        assert "w_ci" in plan_indexes(db, {"find": "idx", "filter": {"w": v},
                                           "collation": CI.document})
    assert sorted(ws(c.find({"w": "ÉCLAIR"}, collation=CI))) == ["éclair"] * 3
    got = ws(c.find({"w": {"$gte": "Y"}}, collation=CI).sort("w", 1))
    assert [w.lower() for w in got] == ["zebra"] * 6
    # Predicates comparing no string use any index, whatever its collation (bounds on
    # numbers do not depend on it), but only an index of the query's collation gives a sort.
    assert "n_simple" in plan_indexes(db, {"find": "idx", "filter": {"n": {"$lt": 5}},
                                           "collation": CI.document})
    assert "w_ci" in plan_indexes(db, {"find": "idx", "filter": {"w": {"$gt": 5}}})
    got = [d["_id"] for d in c.find({"n": {"$lt": 5}}, collation=CI).sort("w", 1)]
    assert got == [0, 1, 2, 3, 4]
    # A collated index never covers: its keys are ICU sort keys.
    got = list(c.find({"w": {"$exists": True}, "n": 0}, {"_id": 0, "w": 1}).hint("w_ci"))
    assert got == [{"w": "apple"}]
    # A hinted index of another collation still answers correctly (a full index scan).
    assert sorted(d["_id"] for d in c.find({"w": "apple"}).hint("w_ci")) == [0, 13, 26]
    # A unique collated index refuses values equal under its collation.
    u = db.uniq
    u.drop()
    u.create_index([("w", 1)], unique=True, collation=CI)
    u.insert_one({"w": "Hello"})
    with pytest.raises(OperationFailure) as e:
        u.insert_one({"w": "hello"})
    assert e.value.code == 11000
    u.insert_one({"w": "héllo"})


def test_index_inherits_collection_default(db):
    db.drop_collection("inh")
    db.create_collection("inh", collation=CI)
    db.inh.create_index([("w", 1)], name="w_1")
    spec = {i["name"]: i for i in db.inh.list_indexes()}["w_1"]
    assert spec["collation"]["locale"] == "en" and spec["collation"]["strength"] == 2


# ---------------------------------------------------------------- through the router

@pytest.fixture(scope="module")
def routed(cluster):
    """colr.sh sharded on {sk: 1} with "A".."Z" on shard0 and "a".."z" on shard1 (split at
    "M"... upper case sorts before lower case in bytes), and colr.un unsharded."""
    client = cluster.router_client()
    client.admin.command("enableSharding", "colr", primaryShard="shard0")
    d = client.colr
    d.create_collection("sh")
    client.admin.command("shardCollection", "colr.sh", key={"sk": 1})
    client.admin.command("split", "colr.sh", middle={"sk": "_"})
    client.admin.command("moveChunk", "colr.sh", find={"sk": "z"}, to="shard1")
    docs = [{"_id": i, "sk": w, "n": i} for i, w in
            enumerate(["apple", "Apple", "APPLE", "banana", "Banana", "cherry", "10", "9"])]
    d.sh.insert_many(docs)
    d.un.insert_many([dict(x) for x in docs])
    return d


@pytest.mark.parametrize("name", ["sh", "un"])
def test_router_reads_with_collation(routed, name):
    c = routed[name]
    assert sorted(d["_id"] for d in c.find({"sk": "apple"}, collation=CI)) == [0, 1, 2]
    assert [d["_id"] for d in c.find({"sk": "apple"})] == [0]
    assert c.count_documents({"sk": "APPLE"}, collation=CI) == 3
    got = [d["sk"].lower() for d in c.find({"sk": {"$regex": "^[a-cA-C]"}}).sort("sk", 1)
           .collation(CI)]
    assert got == ["apple"] * 3 + ["banana"] * 2 + ["cherry"]
    got = [d["sk"] for d in c.find({"sk": {"$in": ["9", "10"]}}).sort("sk", -1).collation(NUM)]
    assert got == ["10", "9"]
    vals = c.distinct("sk", {"sk": {"$regex": "^[aAbB]"}}, collation=CI)
    assert sorted(v.lower() for v in vals) == ["apple", "banana"]
    out = list(c.aggregate([{"$match": {"sk": {"$in": ["apple", "banana"]}}},
                            {"$group": {"_id": "$sk", "n": {"$sum": 1}}},
                            {"$sort": {"n": -1}}], collation=CI))
    assert [d["n"] for d in out] == [3, 2]
    out = list(c.aggregate([{"$sort": {"sk": 1}}, {"$limit": 2}], collation=NUM))
    assert [d["sk"] for d in out] == ["9", "10"]


def test_router_targeting(routed):
    """An equality on the string shard key targets one shard under the simple collation and
    every shard under a case-insensitive one (the key's values are no longer distinct)."""
    def nshards(cmd):
        plan = routed.command("explain", cmd)["queryPlanner"]["winningPlan"]
        return len(plan["shards"])
    assert nshards({"find": "sh", "filter": {"sk": "apple"}}) == 1
    assert nshards({"find": "sh", "filter": {"sk": "apple"},
                    "collation": {"locale": "simple"}}) == 1
    assert nshards({"find": "sh", "filter": {"sk": "apple"}, "collation": CI.document}) == 2
    assert nshards({"find": "sh", "filter": {"sk": {"$in": ["9", "10"]}, "n": 6},
                    "collation": CI.document}) == 2


def test_router_writes_with_collation(routed):
    c = routed.shw
    c.drop()
    routed.client.admin.command("shardCollection", "colr.shw", key={"sk": 1})
    routed.client.admin.command("split", "colr.shw", middle={"sk": "_"})
    routed.client.admin.command("moveChunk", "colr.shw", find={"sk": "z"}, to="shard1")
    c.insert_many([{"_id": i, "sk": w} for i, w in enumerate(["a", "A", "b", "B", "c"])])
    assert c.update_many({"sk": "a"}, {"$set": {"u": 1}}, collation=CI).modified_count == 2
    # A single update whose shard key only matches under the collation: not targeted by it.
    r = c.update_one({"sk": "B"}, {"$set": {"one": 1}}, collation=CI)
    assert r.matched_count == 1
    doc = c.find_one_and_update({"sk": "C"}, {"$set": {"f": 1}}, collation=CI)
    assert doc is not None and doc["sk"] == "c"
    assert c.delete_many({"sk": "A"}, collation=CI).deleted_count == 2
    assert sorted(d["sk"] for d in c.find()) == ["B", "b", "c"]


def test_collations_survive_kill_and_restart(node):
    """Stored specs bring their collations back: the default, the _id index's and a
    secondary index's (keys were built from ICU sort keys), after kill -9 and recovery."""
    c = node.client().crash.c
    c.database.create_collection("c", collation=CI)
    c.create_index([("w", 1)], name="w_num", collation=NUM, unique=True)
    c.insert_many([{"_id": "a", "w": "10"}, {"_id": "b", "w": "9"}])
    c.database.command("insert", "c", documents=[{"_id": "C", "w": "11"}],
                       writeConcern={"j": True})
    node.kill()
    node.start()
    c = node.client().crash.c
    assert c.find_one({"_id": "c"})["w"] == "11"
    with pytest.raises(OperationFailure) as e:
        c.insert_one({"_id": "A"})
    assert e.value.code == 11000
    got = [d["w"] for d in c.find({"w": {"$gte": "9"}}, collation=NUM).sort("w", 1)]
    assert got == ["9", "10", "11"]
    assert "w_num" in plan_indexes(c.database, {"find": "c", "filter": {"w": {"$gte": "9"}},
                                                "collation": NUM.document})


def _node_collation(uri, *args):
    import json
    import os
    import subprocess
    from test_node_driver import node_binary, HERE
    out = subprocess.run([node_binary(), os.path.join(HERE, "collation.js"), uri] + list(args),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["find"] == [0, 1, 2]
    assert r["sorted"] == ["9", "10"]
    assert r["count"] == 2
    assert r["distinct"] == 1
    assert r["groups"] == [3, 2]
    assert r["updated"] == 3
    assert r["fam"]["_id"] == 3 and r["fam"]["f"] == 1
    assert r["deleted"] == 3
    assert r["defaultStrength"] == 2 and r["defaultCount"] == 2
    assert r["badCode"] == 9


def test_node_driver_collation(plain_node):
    _node_collation(plain_node.uri())


def test_node_driver_collation_sharded(routed, cluster):
    _node_collation(cluster.uri(), "sharded")


def test_sharding_a_collection_with_a_default_collation(routed, cluster):
    """A collection with a case-insensitive default is sharded with a simple shard key
    index (MongoDB's rule): chunks split and move by bytes, queries keep the default."""
    client = cluster.router_client()
    d = client.colr
    d.drop_collection("dflt")
    d.create_collection("dflt", collation=CI)
    client.admin.command("shardCollection", "colr.dflt", key={"sk": 1},
                         collation={"locale": "simple"})
    client.admin.command("split", "colr.dflt", middle={"sk": "_"})
    d.dflt.insert_many([{"_id": i, "sk": w} for i, w in enumerate(["a", "A", "b", "B"])])
    client.admin.command("moveChunk", "colr.dflt", find={"sk": "z"}, to="shard1")
    for i in range(2):
        specs = {x["name"]: x for x in cluster.shard_client(i).colr.dflt.list_indexes()}
        assert specs["sk_1"]["collation"] == {"locale": "simple"}, specs
        assert specs["_id_"]["collation"]["strength"] == 2
    on1 = [x["sk"] for x in cluster.shard_client(1).colr.dflt.find()]
    assert sorted(on1) == ["a", "b"]
    assert d.dflt.count_documents({"sk": "a"}, collation={"locale": "simple"}) == 1
    # Without a collation the router targets and merges under the collection's default.
    assert d.dflt.count_documents({"sk": "a"}) == 2
    assert sorted(x["_id"] for x in d.dflt.find({"sk": "B"})) == [2, 3]
    assert [x["sk"].lower() for x in d.dflt.find({}, sort=[("sk", -1)])] == ["b", "b", "a", "a"]
    assert len(d.dflt.distinct("sk")) == 2
    assert d.dflt.update_one({"sk": "A"}, {"$set": {"u": 1}}).modified_count == 1
    assert d.dflt.delete_many({"sk": "b"}).deleted_count == 2
