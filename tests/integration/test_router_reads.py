"""Reads through the router (src/router/cluster_find.c, cluster_aggregate.c,
cluster_cursor_manager.c): find/getMore/killCursors, count, distinct, aggregate and explain
against a sharded collection on two shards, compared with the same documents in one
collection on a plain node; and config.* reads forwarded to the config server.

The cluster is built by hand: a config server node whose config.* documents are written
directly (schemas: src/sharding/catalog_types.h), two shard nodes holding the documents of
their chunks, and a router."""

import datetime
import uuid

import pytest
from bson import Binary, Int64, MaxKey, MinKey, ObjectId, Timestamp
from pymongo.errors import OperationFailure

from shale_fixtures import ShaleProcess, stop_all, wait_until

COLL_TS = Timestamp(1700000000, 1)


def _uuid():
    return Binary(uuid.uuid4().bytes, 4)


def _doc(i):
    d = {"_id": i, "x": i, "a": "abcde"[i % 5], "v": (i * 7) % 13, "g": i % 3}
    if i % 4 == 0:
        d["arr"] = [i, i + 1, "s%d" % (i % 3)]
    if i % 10 == 0:
        d["v"] = "not a number"  # $sum/$avg ignore it
    if i % 11 == 0:
        del d["v"]
    return d


DOCS = [_doc(i) for i in range(-60, 120)]

# test.c is sharded on {x: 1}: [MinKey, 0) and [50, MaxKey) on shard0, [0, 50) on shard1.
CHUNKS = [({"x": MinKey()}, {"x": 0}, "shard0", (1, 0)),
          ({"x": 0}, {"x": 50}, "shard1", (1, 1)),
          ({"x": 50}, {"x": MaxKey()}, "shard0", (1, 2))]


def _owner(x):
    return "shard1" if 0 <= x < 50 else "shard0"


class Cluster:
    def __init__(self):
        self.procs = []
        self.cfg = self._start(["node", "--configsvr", "--replSet", "csrs"], "csrs")
        self.shards = {name: self._start(["node", "--shardsvr", "--replSet", name], name)
                       for name in ("shard0", "shard1")}
        self.ref_node = self._start(["node"], "ref")
        cfgc = self.cfg.client()
        conf = cfgc.config
        cluster_id = ObjectId()
        for name, p in self.shards.items():
            conf.shards.insert_one({"_id": name, "host": "%s/%s" % (name, p.host), "state": 1})
            try:  # shard-aware once the shard role is there (branch shardsvr)
                p.client().admin.command("_addShard", 1, shardIdentity={
                    "shardName": name, "clusterId": cluster_id,
                    "configsvrConnectionString": "csrs/" + self.cfg.host})
            except OperationFailure:
                pass
        conf.databases.insert_one({"_id": "test", "primary": "shard0", "version": {
            "uuid": _uuid(), "timestamp": Timestamp(1700000000, 2), "lastMod": 1}})
        coll_uuid = _uuid()
        conf.collections.insert_one({
            "_id": "test.c", "lastmodEpoch": ObjectId(),
            "lastmod": datetime.datetime(2023, 11, 14), "timestamp": COLL_TS,
            "uuid": coll_uuid, "key": {"x": 1}, "unique": False, "noBalance": False})
        conf.chunks.insert_many([
            {"_id": ObjectId(), "uuid": coll_uuid, "min": lo, "max": hi, "shard": shard,
             "lastmod": Timestamp(*v), "history": [{"validAfter": COLL_TS, "shard": shard}]}
            for lo, hi, shard, v in CHUNKS])
        cfgc.close()
        for name, p in self.shards.items():
            c = p.client()
            c.test.c.insert_many([d for d in DOCS if _owner(d["x"]) == name])
            c.close()
        # An unsharded collection lives on the primary shard.
        c = self.shards["shard0"].client()
        c.test.u.insert_many([{"_id": i, "k": i % 4} for i in range(30)])
        c.close()
        ref = self.ref_node.client()
        ref.test.c.insert_many(DOCS)
        ref.test.u.insert_many([{"_id": i, "k": i % 4} for i in range(30)])
        self.router = self._start(["router", "--configdb", "csrs/" + self.cfg.host], "router")
        self.rc = self.router.client()
        self.ref = ref

    def _start(self, args, name):
        p = ShaleProcess(args, name=name)
        self.procs.append(p)
        p.start()
        return p

    def shard_open_cursors(self):
        total = 0
        for p in self.shards.values():
            c = p.client()
            total += c.admin.command("serverStatus")["metrics"]["cursor"]["open"]["total"]
            c.close()
        return total

    def close(self, failed):
        self.rc.close()
        self.ref.close()
        stop_all(self.procs)
        for i, p in enumerate(self.procs):
            p.cleanup(keep_log_as=("router_reads-%s-%d" % (p.name, i)) if failed else None)


@pytest.fixture(scope="module")
def cluster(request):
    c = Cluster()
    yield c
    c.close(request.session.testsfailed > 0)


def both(cluster, fn):
    """fn(db) on the router and on the reference node."""
    return fn(cluster.rc.test), fn(cluster.ref.test)


# ---------------------------------------------------------------- find


@pytest.mark.parametrize("kw", [
    dict(sort=[("x", 1)]),
    dict(sort=[("x", -1)], limit=17),
    dict(sort=[("x", 1)], skip=23, limit=40),
    dict(sort=[("a", 1), ("x", -1)], skip=5),
    dict(sort=[("v", 1), ("x", 1)], projection={"v": 1, "_id": 0}),
    dict(sort=[("x", 1)], projection={"arr": {"$slice": 1}, "x": 1}),
    dict(filter={"x": {"$gte": -10, "$lt": 70}}, sort=[("g", 1), ("x", 1)], batch_size=7),
    dict(filter={"a": "c"}, sort=[("x", 1)], skip=3, limit=9, batch_size=2),
    dict(filter={"arr": "s1"}, sort=[("arr", -1), ("x", 1)]),
])
def test_find_sorted_matches_reference(cluster, kw):
    def run(db):
        kw2 = dict(kw)
        cur = db.c.find(kw2.pop("filter", {}), kw2.pop("projection", None))
        cur = cur.sort(kw2.pop("sort"))
        if "skip" in kw2:
            cur = cur.skip(kw2.pop("skip"))
        if "limit" in kw2:
            cur = cur.limit(kw2.pop("limit"))
        if "batch_size" in kw2:
            cur = cur.batch_size(kw2.pop("batch_size"))
        return list(cur)
    got, want = both(cluster, run)
    assert got == want


def test_find_unsorted_projection_and_limit(cluster):
    got, want = both(cluster, lambda db: list(db.c.find({"g": 1}, {"x": 1, "_id": 0})))
    assert sorted(d["x"] for d in got) == sorted(d["x"] for d in want)
    assert all(set(d) == {"x"} for d in got)
    got = list(cluster.rc.test.c.find({}).skip(10).limit(25))
    assert len(got) == 25
    assert len({d["_id"] for d in got}) == 25
    assert len(list(cluster.rc.test.c.find({}).skip(170))) == 10
    # {$natural: 1} is each shard's own order: nothing to merge on, nothing lost.
    assert len(list(cluster.rc.test.c.find({}, {"x": 1}).sort("$natural", 1))) == 180
    # A filter that targets no chunk reaches no shard.
    assert list(cluster.rc.test.c.find({"x": {"$in": []}})) == []
    assert cluster.rc.test.c.count_documents({"x": {"$in": []}}) == 0


def test_find_batches_and_get_more(cluster):
    db = cluster.rc.test
    r = db.command("find", "c", filter={}, sort={"x": 1}, batchSize=7)
    cur = r["cursor"]
    assert cur["ns"] == "test.c"
    assert [d["x"] for d in cur["firstBatch"]] == list(range(-60, -53))
    assert cur["id"] != 0
    seen = [d["x"] for d in cur["firstBatch"]]
    r = db.command("getMore", cur["id"], collection="c", batchSize=50)
    assert len(r["cursor"]["nextBatch"]) == 50
    assert r["cursor"]["id"] == cur["id"]
    seen += [d["x"] for d in r["cursor"]["nextBatch"]]
    r = db.command("getMore", cur["id"], collection="c")
    seen += [d["x"] for d in r["cursor"]["nextBatch"]]
    assert r["cursor"]["id"] == 0
    assert seen == list(range(-60, 120))
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", cur["id"], collection="c")
    assert e.value.code == 43  # CursorNotFound

    # batchSize 0: an empty first batch and a cursor; singleBatch: no cursor.
    r = db.command("find", "c", sort={"x": -1}, batchSize=0)
    assert r["cursor"]["firstBatch"] == [] and r["cursor"]["id"] != 0
    r2 = db.command("getMore", r["cursor"]["id"], collection="c", batchSize=3)
    assert [d["x"] for d in r2["cursor"]["nextBatch"]] == [119, 118, 117]
    db.command("killCursors", "c", cursors=[r["cursor"]["id"]])
    r = db.command("find", "c", sort={"x": 1}, batchSize=5, singleBatch=True)
    assert len(r["cursor"]["firstBatch"]) == 5 and r["cursor"]["id"] == 0
    # A limit that ends inside the first batch closes the cursor.
    r = db.command("find", "c", sort={"x": 1}, limit=4)
    assert [d["x"] for d in r["cursor"]["firstBatch"]] == [-60, -59, -58, -57]
    assert r["cursor"]["id"] == 0
    # The other namespace's getMore is refused.
    r = db.command("find", "c", batchSize=1)
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", r["cursor"]["id"], collection="u")
    assert e.value.code == 13
    db.command("killCursors", "c", cursors=[r["cursor"]["id"]])


def test_kill_cursors_kills_remote_cursors(cluster):
    db = cluster.rc.test
    base = cluster.shard_open_cursors()
    r = db.command("find", "c", filter={}, sort={"x": 1}, batchSize=2)
    cid = r["cursor"]["id"]
    assert cid != 0
    assert cluster.shard_open_cursors() == base + 2  # one per shard
    r = db.command("killCursors", "c", cursors=[cid, Int64(12345)])
    assert r["cursorsKilled"] == [cid]
    assert r["cursorsNotFound"] == [12345]
    assert r["cursorsAlive"] == [] and r["cursorsUnknown"] == []
    assert cluster.shard_open_cursors() == base
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", cid, collection="c")
    assert e.value.code == 43


def test_idle_router_cursor_times_out(cluster):
    admin, db = cluster.rc.admin, cluster.rc.test
    old = admin.command("getParameter", 1, cursorTimeoutMillis=1)["cursorTimeoutMillis"]
    base = cluster.shard_open_cursors()
    admin.command("setParameter", 1, cursorTimeoutMillis=300)
    try:
        cid = db.command("find", "c", sort={"x": 1}, batchSize=2)["cursor"]["id"]
        assert cluster.shard_open_cursors() == base + 2
        # The reaper (every 4 s) kills the router cursor and its shard cursors.
        wait_until(lambda: cluster.shard_open_cursors() == base, timeout=15,
                   what="the idle cursor to be reaped")
        with pytest.raises(OperationFailure) as e:
            db.command("getMore", cid, collection="c")
        assert e.value.code == 43
    finally:
        admin.command("setParameter", 1, cursorTimeoutMillis=old)


def test_limit_reached_closes_remote_cursors(cluster):
    base = cluster.shard_open_cursors()
    got = list(cluster.rc.test.c.find({}).sort("x", 1).limit(3).batch_size(2))
    assert [d["x"] for d in got] == [-60, -59, -58]
    assert cluster.shard_open_cursors() == base


def test_shard_error_is_the_command_error(cluster):
    with pytest.raises(OperationFailure) as e:
        list(cluster.rc.test.c.find({"x": {"$foo": 1}}))
    assert e.value.code == 2  # BadValue from the shards
    with pytest.raises(OperationFailure) as e:
        list(cluster.rc.test.c.find({}).sort("x", 2))
    assert e.value.code == 15975


def test_missing_database_reads_are_empty(cluster):
    db = cluster.rc.nosuchdb
    assert list(db.c.find()) == []
    assert db.c.count_documents({}) == 0
    assert db.c.distinct("x") == []
    assert list(db.c.aggregate([{"$match": {}}])) == []


# ---------------------------------------------------------------- explain / targeting


def _explain_find(db, flt, **kw):
    return db.command("explain", {"find": "c", "filter": flt, **kw}, verbosity="executionStats")


def test_targeted_find_reaches_one_shard(cluster):
    db = cluster.rc.test
    e = _explain_find(db, {"x": 10})
    wp = e["queryPlanner"]["winningPlan"]
    assert wp["stage"] == "SINGLE_SHARD"
    assert [s["shardName"] for s in wp["shards"]] == ["shard1"]
    assert wp["shards"][0]["connectionString"] == cluster.shards["shard1"].host
    assert e["executionStats"]["nReturned"] == 1
    assert e["executionStats"]["executionStages"]["shards"][0]["shardName"] == "shard1"

    e = _explain_find(db, {"x": {"$gte": 60, "$lt": 80}})
    assert e["queryPlanner"]["winningPlan"]["stage"] == "SINGLE_SHARD"
    assert e["queryPlanner"]["winningPlan"]["shards"][0]["shardName"] == "shard0"
    e = _explain_find(db, {"x": {"$in": [-3, 7]}})
    assert sorted(s["shardName"] for s in e["queryPlanner"]["winningPlan"]["shards"]) == \
        ["shard0", "shard1"]

    e = _explain_find(db, {"a": "b"})
    assert e["queryPlanner"]["winningPlan"]["stage"] == "SHARD_MERGE"
    assert e["executionStats"]["nReturned"] == 36
    e = _explain_find(db, {}, sort={"x": 1})
    assert e["queryPlanner"]["winningPlan"]["stage"] == "SHARD_MERGE_SORT"
    assert len(e["queryPlanner"]["winningPlan"]["shards"]) == 2
    # Totals are what the router returns: after its skip and limit.
    e = _explain_find(db, {}, sort={"x": 1}, skip=3, limit=5)
    stats = e["executionStats"]
    assert stats["nReturned"] == 5
    assert stats["executionStages"]["limitAmount"] == 5
    assert stats["executionStages"]["skipAmount"] == 3
    assert sum(s["nReturned"] for s in stats["executionStages"]["shards"]) == 16
    assert stats["totalDocsExamined"] == 180

    e = db.command("explain", {"count": "c", "query": {"x": 3}})
    assert e["queryPlanner"]["winningPlan"]["stage"] == "SINGLE_SHARD"
    # The unsharded collection is read on the primary shard.
    e = db.command("explain", {"find": "u", "filter": {}})
    assert e["queryPlanner"]["winningPlan"]["stage"] == "SINGLE_SHARD"
    assert e["queryPlanner"]["winningPlan"]["shards"][0]["shardName"] == "shard0"

    # pymongo's own explain() goes through the same command.
    e = db.c.find({"x": 99}).explain()
    assert e["queryPlanner"]["winningPlan"]["shards"][0]["shardName"] == "shard0"


def test_targeted_results(cluster):
    got, want = both(cluster, lambda db: list(db.c.find({"x": {"$in": [-3, 7, 99]}}).sort("x")))
    assert got == want
    got, want = both(cluster, lambda db: list(db.u.find({"k": 2}).sort("_id", -1)))
    assert got == want


# ---------------------------------------------------------------- count / distinct


@pytest.mark.parametrize("flt,kw", [
    ({}, {}),
    ({"a": "c"}, {}),
    ({"x": {"$gte": 40, "$lt": 55}}, {}),
    ({}, {"skip": 30}),
    ({}, {"limit": 25}),
    ({"g": 2}, {"skip": 10, "limit": 20}),
    ({"g": 2}, {"skip": 100}),
    ({"x": 5}, {}),
])
def test_count_matches_reference(cluster, flt, kw):
    got, want = both(cluster, lambda db: db.command("count", "c", query=flt, **kw)["n"])
    assert got == want
    got, want = both(cluster, lambda db: db.c.count_documents(flt, **kw))
    assert got == want


def test_count_negative_limit(cluster):
    assert cluster.rc.test.command("count", "c", limit=-7)["n"] == 7


@pytest.mark.parametrize("key,flt", [("a", {}), ("g", {"x": {"$lt": 10}}), ("arr", {}),
                                     ("v", {"a": {"$in": ["a", "e"]}}), ("x", {"x": 3})])
def test_distinct_matches_reference(cluster, key, flt):
    got, want = both(cluster, lambda db: db.c.distinct(key, flt))
    assert len(got) == len(want)
    assert sorted(map(repr, got)) == sorted(map(repr, want))
    # In canonical BSON order (numbers before strings), without duplicates.
    nums = [v for v in got if isinstance(v, (int, float))]
    strs = [v for v in got if isinstance(v, str)]
    assert got == sorted(nums) + sorted(strs)


# ---------------------------------------------------------------- aggregate


PIPELINES = [
    [{"$match": {"x": {"$gte": -20}}}, {"$group": {"_id": "$a", "n": {"$sum": 1},
                                                   "s": {"$sum": "$v"}}},
     {"$sort": {"_id": 1}}],
    [{"$group": {"_id": "$g", "avg": {"$avg": "$v"}, "lo": {"$min": "$v"},
                 "hi": {"$max": "$x"}, "c": {"$count": {}}}}, {"$sort": {"_id": -1}}],
    [{"$group": {"_id": None, "avg": {"$avg": "$x"}, "total": {"$sum": "$x"}}}],
    [{"$group": {"_id": {"a": "$a", "g": "$g"}, "n": {"$sum": 1}}},
     {"$sort": {"_id.a": 1, "_id.g": 1}}, {"$limit": 7}],
    [{"$sort": {"x": 1}}, {"$group": {"_id": "$a", "first": {"$first": "$x"},
                                      "last": {"$last": "$x"}}}, {"$sort": {"_id": 1}}],
    [{"$match": {"a": "b"}}, {"$sort": {"x": -1}}, {"$skip": 3}, {"$limit": 5}],
    [{"$sort": {"v": 1, "x": 1}}, {"$limit": 12}, {"$project": {"v": 1, "x": 1}}],
    [{"$match": {"g": 0}}, {"$count": "howmany"}],
    [{"$count": "all"}],
    [{"$unwind": "$arr"}, {"$match": {"arr": {"$type": "string"}}},
     {"$group": {"_id": "$arr", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}],
    [{"$unwind": {"path": "$arr", "includeArrayIndex": "i"}}, {"$sort": {"x": 1, "i": 1}},
     {"$limit": 20}],
    [{"$project": {"a": 1, "y": {"$multiply": ["$x", 2]}}}, {"$sort": {"y": -1}},
     {"$limit": 5}],
    [{"$group": {"_id": "$a", "xs": {"$push": "$x"}, "gs": {"$addToSet": "$g"}}},
     {"$sort": {"_id": 1}}],
    [{"$match": {"x": {"$gte": 0, "$lt": 50}}}, {"$group": {"_id": "$g", "n": {"$sum": 1}}},
     {"$sort": {"_id": 1}}],
    [{"$group": {"_id": "$a", "n": {"$sum": 1}}}, {"$match": {"n": {"$gt": 35}}},
     {"$sort": {"_id": 1}}],
    [{"$sortByCount": {"$cond": [{"$lt": ["$x", 0]}, "neg",
                                 {"$cond": [{"$lt": ["$x", 100]}, "mid", "high"]}]}}],
]


def _normalise(docs):
    """$push/$addToSet order depends on document order; compare them sorted."""
    out = []
    for d in docs:
        d = dict(d)
        for k in ("xs", "gs"):
            if k in d:
                d[k] = sorted(d[k])
        out.append(d)
    return out


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_aggregate_matches_reference(cluster, pipeline):
    got, want = both(cluster, lambda db: list(db.c.aggregate(pipeline)))
    assert _normalise(got) == _normalise(want)


def test_aggregate_avg_field_order_and_nulls(cluster):
    got, want = both(cluster, lambda db: list(db.c.aggregate([
        {"$match": {"x": {"$in": [0, 10, 20, 30, 40, 50]}}},  # v is a string or missing
        {"$group": {"_id": None, "a": {"$avg": "$v"}, "b": {"$sum": 1}}}])))
    assert got == want
    assert list(got[0]) == ["_id", "a", "b"]
    assert got[0]["a"] is None


def test_aggregate_batches_and_get_more(cluster):
    db = cluster.rc.test
    r = db.command("aggregate", "c", pipeline=[{"$sort": {"x": 1}}], cursor={"batchSize": 4})
    assert [d["x"] for d in r["cursor"]["firstBatch"]] == [-60, -59, -58, -57]
    cid = r["cursor"]["id"]
    assert cid != 0
    r = db.command("getMore", cid, collection="c", batchSize=100)
    assert [d["x"] for d in r["cursor"]["nextBatch"]] == list(range(-56, 44))
    r = db.command("getMore", cid, collection="c")
    assert [d["x"] for d in r["cursor"]["nextBatch"]] == list(range(44, 120))
    assert r["cursor"]["id"] == 0

    r = db.command("aggregate", "c", pipeline=[{"$group": {"_id": "$x"}}],
                   cursor={"batchSize": 0})
    assert r["cursor"]["firstBatch"] == [] and r["cursor"]["id"] != 0
    r = db.command("killCursors", "c", cursors=[r["cursor"]["id"]])
    assert len(r["cursorsKilled"]) == 1

    with pytest.raises(OperationFailure) as e:
        db.command("aggregate", "c", pipeline=[{"$bogus": {}}], cursor={})
    assert e.value.code == 40324
    with pytest.raises(OperationFailure) as e:
        db.command("aggregate", "c", pipeline=[])
    assert e.value.code == 9


def test_aggregate_explain(cluster):
    db = cluster.rc.test
    e = db.command("aggregate", "c", pipeline=[{"$group": {"_id": "$a", "m": {"$avg": "$x"}}}],
                   explain=True)
    assert e["mergeType"] == "mongos"
    assert e["splitPipeline"]["shardsPart"][0]["$group"]["_id"] == "$a"
    assert e["splitPipeline"]["mergerPart"][0]["$group"]["_id"] == "$_id"
    assert sorted(e["shards"]) == ["shard0", "shard1"]
    assert e["shards"]["shard1"]["host"] == cluster.shards["shard1"].host
    # Targeted to one shard: the whole pipeline runs there.
    e = db.command("explain", {"aggregate": "c", "pipeline": [
        {"$match": {"x": 12}}, {"$group": {"_id": "$a"}}], "cursor": {}})
    assert e["splitPipeline"] is None
    assert list(e["shards"]) == ["shard1"]


# ---------------------------------------------------------------- config.*


def test_config_reads_go_to_the_config_server(cluster):
    conf = cluster.rc.config
    shards = list(conf.shards.find().sort("_id", 1))
    assert [s["_id"] for s in shards] == ["shard0", "shard1"]
    assert shards[1]["host"] == "shard1/" + cluster.shards["shard1"].host
    assert conf.chunks.count_documents({}) == 3
    assert conf.command("count", "chunks", query={"shard": "shard0"})["n"] == 2
    assert sorted(conf.chunks.distinct("shard")) == ["shard0", "shard1"]
    colls = list(conf.collections.aggregate([{"$match": {"_id": "test.c"}},
                                            {"$project": {"key": 1}}]))
    assert colls == [{"_id": "test.c", "key": {"x": 1}}]
    dbs = list(conf.databases.find({}, {"primary": 1}))
    assert dbs == [{"_id": "test", "primary": "shard0"}]
    # sh.status()'s chunk summary.
    coll = conf.collections.find_one({"_id": "test.c"})
    coll_uuid = Binary(coll["uuid"].bytes, 4)  # pymongo 3 would re-encode a UUID as subtype 3
    got = list(conf.chunks.aggregate([
        {"$match": {"uuid": coll_uuid}}, {"$group": {"_id": "$shard", "cnt": {"$sum": 1}}},
        {"$project": {"_id": 0, "shard": "$_id", "nChunks": "$cnt"}}, {"$sort": {"shard": 1}}]))
    assert got == [{"shard": "shard0", "nChunks": 2}, {"shard": "shard1", "nChunks": 1}]
    assert conf.version.count_documents({}) <= 1
    # A cursor on config.* is served by the router too.
    r = conf.command("find", "chunks", batchSize=1)
    assert len(r["cursor"]["firstBatch"]) == 1
    r = conf.command("getMore", r["cursor"]["id"], collection="chunks")
    assert len(r["cursor"]["nextBatch"]) == 2 and r["cursor"]["id"] == 0


# ---------------------------------------------------------------- newer stages (issue 5)


@pytest.mark.parametrize("pipeline", [
    [{"$bucket": {"groupBy": "$x", "boundaries": [-100, 0, 50, 200],
                  "output": {"n": {"$sum": 1}, "sd": {"$stdDevPop": "$x"}}}}],
    [{"$bucketAuto": {"groupBy": "$x", "buckets": 4}}],
    [{"$group": {"_id": "$g", "t": {"$topN": {"n": 3, "output": "$x", "sortBy": {"x": -1}}},
                 "mn": {"$minN": {"input": "$x", "n": 2}}}}, {"$sort": {"_id": 1}}],
    [{"$match": {"x": {"$lt": 10}}},
     {"$facet": {"n": [{"$count": "n"}], "a": [{"$group": {"_id": "$a"}}, {"$sort": {"_id": 1}}]}}],
])
def test_new_stages_on_sharded_collection(cluster, pipeline):
    got, want = both(cluster, lambda db: list(db.c.aggregate(pipeline)))
    assert got == want


def test_lookup_union_out_on_unsharded_collection(cluster):
    db = cluster.rc.test
    got = list(db.u.aggregate([
        {"$match": {"_id": {"$lt": 2}}},
        {"$lookup": {"from": "u", "localField": "k", "foreignField": "k", "as": "same"}},
        {"$project": {"n": {"$size": "$same"}}}]))
    assert got == [{"_id": 0, "n": 8}, {"_id": 1, "n": 8}]
    assert len(list(db.u.aggregate([{"$unionWith": "u"}]))) == 60
    db.u.aggregate([{"$match": {"k": 3}}, {"$out": "u_out"}])
    assert sorted(d["_id"] for d in db.u_out.find()) == [3, 7, 11, 15, 19, 23, 27]
    db.u_out.drop()


def test_out_from_sharded_collection(cluster):
    """The router writes the merged documents (test_router_out_merge.py has the details)."""
    db = cluster.rc.test
    group = [{"$group": {"_id": "$a", "n": {"$sum": 1}}}]
    assert list(db.c.aggregate(group + [{"$out": "c_out"}])) == []
    assert sorted(db.c_out.find(), key=repr) == sorted(db.c.aggregate(group), key=repr)
    db.c_out.drop()


def test_documents_through_router(cluster):
    r = cluster.rc.test.command("aggregate", 1, pipeline=[
        {"$documents": [{"v": 1}, {"v": 2}]}, {"$group": {"_id": None, "s": {"$sum": "$v"}}}],
        cursor={})
    assert r["cursor"]["firstBatch"] == [{"_id": None, "s": 3}]
    with pytest.raises(OperationFailure) as e:
        cluster.rc.test.command("aggregate", 1, pipeline=[{"$match": {}}], cursor={})
    assert e.value.code == 73


# ---------------------------------------------------------------- last: a shard goes away


def test_allow_partial_results_when_a_shard_is_down(cluster):
    db = cluster.rc.test
    # Warm the router's connections, then lose shard1 (it holds x in [0, 50)).
    assert len(list(db.c.find({}))) == 180
    cluster.shards["shard1"].kill()
    with pytest.raises(OperationFailure):
        list(db.c.find({}))
    r = db.command("find", "c", filter={}, sort={"x": 1}, allowPartialResults=True,
                   batchSize=1000)
    xs = [d["x"] for d in r["cursor"]["firstBatch"]]
    assert xs == [x for x in range(-60, 120) if not 0 <= x < 50]
    assert r["cursor"]["partialResultsReturned"] is True
    got = list(db.c.find({"x": {"$gte": 100}}, allow_partial_results=True))
    assert len(got) == 20  # targeted to shard0 only: nothing is missing


def test_tailable_find_refused_through_the_router(cluster):
    """Shards serve tailable cursors; router cursors do not follow them yet, so the router
    refuses them with a clear error instead of waiting on every shard."""
    db = cluster.rc.test
    db.drop_collection("tail_cap")
    db.create_collection("tail_cap", capped=True, size=100000)
    for cmd in ({"find": "tail_cap", "tailable": True},
                {"find": "tail_cap", "tailable": True, "awaitData": True}):
        with pytest.raises(OperationFailure) as e:
            db.command(cmd)
        assert e.value.code == 72
        assert "tailable" in str(e.value)
