"""A sharded cluster used as a user would (issue 6, item 5): a config server, two shards
and a router started as real processes; pymongo talks to the router and, to check where
data really lives, to each shard directly."""

import random

import bson
import pymongo
import pytest
from pymongo.errors import OperationFailure

from shale_fixtures import standard_uuid_db, wait_until  # noqa: F401

N_DOCS = 20000


def _chunks(cfg, ns):
    # pymongo 3.11 re-encodes uuid.UUID as legacy subtype 3 unless told otherwise
    config = standard_uuid_db(cfg, "config")
    coll = config.collections.find_one({"_id": ns})
    assert coll is not None, "no config.collections entry for %s" % ns
    return coll, list(config.chunks.find({"uuid": coll["uuid"]}).sort("min", 1))


def _in_chunk(key, chunk):
    """Whether shard key value 'key' (a dict in pattern order) is in [min, max)."""
    def cmp(a, b):
        # Only MinKey/MaxKey/ints/longs appear in these tests' bounds.
        def norm(v):
            if isinstance(v, bson.min_key.MinKey):
                return (0, 0)
            if isinstance(v, bson.max_key.MaxKey):
                return (2, 0)
            return (1, v)
        for x, y in zip(a, b):
            nx, ny = norm(x), norm(y)
            if nx != ny:
                return -1 if nx < ny else 1
        return 0
    k = list(key.values())
    return cmp(list(chunk["min"].values()), k) <= 0 and cmp(k, list(chunk["max"].values())) < 0


@pytest.fixture(scope="module")
def sharded(cluster):
    """The cluster with a hashed-sharded and a range-sharded collection, 20k docs each."""
    r = cluster.router_client()
    r.admin.command("enableSharding", "app")
    r.admin.command("shardCollection", "app.hashed", key={"x": "hashed"})
    r.admin.command("shardCollection", "app.ranged", key={"x": 1})
    docs = [{"_id": i, "x": i, "g": i % 7, "s": "v%05d" % i} for i in range(N_DOCS)]
    r.app.hashed.insert_many(docs, ordered=False)
    r.app.ranged.insert_many(docs)
    return cluster


def test_router_is_a_sharded_topology(cluster):
    r = cluster.router_client()
    hello = r.admin.command("hello")
    assert hello["msg"] == "isdbgrid"
    assert "setName" not in hello
    shards = r.admin.command("listShards")["shards"]
    assert sorted(s["_id"] for s in shards) == ["shard0", "shard1"]
    assert all(s["state"] == 1 for s in shards)


def test_hashed_collection_is_presplit_and_each_shard_holds_its_chunks(sharded):
    cfg = sharded.config_client()
    coll, chunks = _chunks(cfg, "app.hashed")
    assert coll["key"] == {"x": "hashed"}
    assert {c["shard"] for c in chunks} == {"shard0", "shard1"}
    assert len(chunks) == 4  # MongoDB's default: two per shard
    owned = {"shard0": [], "shard1": []}
    for c in chunks:
        owned[c["shard"]].append(c)
    seen = set()
    for i, name in enumerate(["shard0", "shard1"]):
        direct = sharded.shard_client(i)
        got = list(direct.app.hashed.aggregate([
            {"$project": {"h": {"$toHashedIndexKey": "$x"}}}]))
        assert got, "shard %s holds nothing" % name
        for d in got:
            assert any(_in_chunk({"x": d["h"]}, c) for c in owned[name]), (name, d)
            seen.add(d["_id"])
    assert seen == set(range(N_DOCS))
    assert sharded.router_client().app.hashed.count_documents({}) == N_DOCS


def test_targeted_queries_reach_one_shard(sharded):
    r = sharded.router_client()
    for coll in ("hashed", "ranged"):
        exp = r.app.command("explain", {"find": coll, "filter": {"x": 1234}}, verbosity="queryPlanner")
        plan = exp["queryPlanner"]["winningPlan"]
        assert plan["stage"] == "SINGLE_SHARD", exp
        assert len(plan["shards"]) == 1
        assert r.app[coll].find_one({"x": 1234})["_id"] == 1234
    exp = r.app.command("explain", {"find": "hashed", "filter": {"g": 3}}, verbosity="queryPlanner")
    assert len(exp["queryPlanner"]["winningPlan"]["shards"]) == 2


def test_scatter_queries_match_an_unsharded_reference(sharded):
    r = sharded.router_client()
    ref = r.app.reference
    if ref.estimated_document_count() == 0:
        ref.insert_many([{"_id": i, "x": i, "g": i % 7, "s": "v%05d" % i} for i in range(N_DOCS)])
    rnd = random.Random(7)
    for _ in range(20):
        lo = rnd.randrange(N_DOCS)
        flt = {"x": {"$gte": lo, "$lt": lo + rnd.randrange(1, 3000)}, "g": {"$ne": rnd.randrange(7)}}
        sort = [("g", rnd.choice([1, -1])), ("x", rnd.choice([1, -1]))]
        skip, limit = rnd.randrange(50), rnd.randrange(1, 400)
        want = list(ref.find(flt, {"s": 0}).sort(sort).skip(skip).limit(limit))
        for coll in ("hashed", "ranged"):
            got = list(r.app[coll].find(flt, {"s": 0}).sort(sort).skip(skip).limit(limit)
                       .batch_size(37))
            assert got == want, (coll, flt, sort, skip, limit)
    assert r.app.hashed.count_documents({"g": 2}) == ref.count_documents({"g": 2})
    assert sorted(r.app.hashed.distinct("g")) == list(range(7))
    pipeline = [{"$match": {"x": {"$lt": 5000}}},
                {"$group": {"_id": "$g", "n": {"$sum": 1}, "avg": {"$avg": "$x"},
                            "lo": {"$min": "$x"}, "hi": {"$max": "$x"}}},
                {"$sort": {"_id": 1}}]
    assert list(r.app.hashed.aggregate(pipeline)) == list(ref.aggregate(pipeline))


def test_split_and_merge_bump_versions_as_specified(sharded):
    r, cfg = sharded.router_client(), sharded.config_client()
    _, before = _chunks(cfg, "app.ranged")
    assert len(before) == 1
    epoch, ts = before[0]["lastmod"], None
    r.admin.command("split", "app.ranged", middle={"x": 10000})
    coll, after = _chunks(cfg, "app.ranged")
    assert len(after) == 2
    assert [c["min"]["x"] for c in after][1] == 10000
    # split: minor versions above the old collection version, major unchanged
    assert sorted((c["lastmod"].time, c["lastmod"].inc) for c in after) == [
        (epoch.time, epoch.inc + 1), (epoch.time, epoch.inc + 2)]
    r.admin.command("split", "app.ranged", find={"x": 15000})  # the median of [10000, MaxKey)
    _, three = _chunks(cfg, "app.ranged")
    assert len(three) == 3
    with pytest.raises(OperationFailure):
        r.admin.command("split", "app.ranged", middle={"x": 10000})  # already a bound
    r.admin.command("mergeChunks", "app.ranged", bounds=[{"x": 10000}, {"x": bson.max_key.MaxKey()}])
    _, merged = _chunks(cfg, "app.ranged")
    assert len(merged) == 2
    top = max(merged, key=lambda c: (c["lastmod"].time, c["lastmod"].inc))
    assert top["min"] == {"x": 10000} and top["lastmod"].time == epoch.time
    # routing still right after all of it
    assert r.app.ranged.count_documents({"x": {"$gte": 9990, "$lt": 10010}}) == 20


def test_a_stale_second_router_returns_correct_results(sharded):
    r1 = sharded.router_client()
    r2 = sharded.add_router().client()
    assert r2.app.hashed.count_documents({}) == N_DOCS  # r2 caches the routing now
    # Drop and re-create with another key through r1; r2's cache is now stale.
    r1.app.recreated.insert_many([{"_id": i, "a": i, "b": -i} for i in range(1000)])
    r1.app.recreated.create_index("a")  # a non-empty collection needs the key's index
    r1.admin.command("shardCollection", "app.recreated", key={"a": 1})
    assert r2.app.recreated.count_documents({"a": {"$lt": 500}}) == 500
    r1.app.recreated.drop()
    r1.admin.command("shardCollection", "app.recreated", key={"b": "hashed"})
    r1.app.recreated.insert_many([{"_id": i, "a": i, "b": -i} for i in range(300)])
    assert r2.app.recreated.count_documents({}) == 300
    assert r2.app.recreated.find_one({"b": -7})["a"] == 7
    coll = sharded.config_client().config.collections.find_one({"_id": "app.recreated"})
    assert coll["key"] == {"b": "hashed"}


def test_bad_admin_input_gets_mongodb_errors(sharded):
    r = sharded.router_client()
    with pytest.raises(OperationFailure) as e:
        r.admin.command("addShard", "127.0.0.1:1")
    assert e.value.code in (6, 7, 89, 96)  # HostUnreachable / HostNotFound / NetworkTimeout / OperationFailed
    with pytest.raises(OperationFailure) as e:
        r.admin.command("shardCollection", "app.badkey", key={"x": 2})
    assert e.value.code == 2  # BadValue
    with pytest.raises(OperationFailure) as e:
        r.admin.command("shardCollection", "app.badkey", key={"x": "hashed", "y": "hashed"})
    assert e.value.code == 2
    with pytest.raises(OperationFailure):
        r.admin.command("removeShard", "nosuchshard")
    with pytest.raises(OperationFailure):
        r.admin.command("split", "app.ranged", middle={"nokey": 1})
    with pytest.raises(OperationFailure):
        r.admin.command("shardCollection", "app.ranged", key={"y": 1})  # already sharded


def test_insert_missing_or_array_shard_key(sharded):
    r = sharded.router_client()
    with pytest.raises(pymongo.errors.WriteError):
        r.app.ranged.insert_one({"_id": "arr", "x": [1, 2]})
    r.app.ranged.insert_one({"_id": "nokey"})  # MongoDB 7.0: missing key fields are null
    assert r.app.ranged.find_one({"_id": "nokey"}) == {"_id": "nokey"}
    r.app.ranged.delete_one({"_id": "nokey"})


def test_every_shard_holds_the_collection_under_its_cluster_wide_uuid(sharded):
    coll, _ = _chunks(sharded.config_client(), "app.hashed")
    for i in range(2):
        info = sharded.shard_client(i).app.command(
            "listCollections", filter={"name": "hashed"})["cursor"]["firstBatch"]
        assert len(info) == 1
        assert info[0]["info"]["uuid"] == coll["uuid"], i


def test_router_reports_itself_in_config_mongos(cluster):
    cfg = cluster.config_client()
    host = cluster.routers[0].host
    doc = wait_until(lambda: cfg.config.mongos.find_one({"_id": host}), timeout=10,
                     what="config.mongos entry")
    assert doc["mongoVersion"] == "7.0.0" and doc["up"] >= 0 and "ping" in doc


def test_lookup_from_a_sharded_collection_sees_every_shard(sharded):
    # A shard's local copy of a sharded foreign collection holds only its part: the router
    # runs the $lookup/$unionWith itself and reads the foreign collection through its own
    # routing (more cases in test_router_foreign.py).
    r = sharded.router_client()
    r.app.local_side.insert_many([{"_id": i, "x": i} for i in range(5)])
    got = list(r.app.local_side.aggregate([
        {"$lookup": {"from": "hashed", "localField": "x", "foreignField": "x", "as": "m"}},
        {"$sort": {"_id": 1}}]))
    assert [[m["_id"] for m in d["m"]] for d in got] == [[i] for i in range(5)]
    assert len(list(r.app.local_side.aggregate([{"$unionWith": "hashed"}]))) == N_DOCS + 5
    # from an unsharded foreign collection it works
    r.app.other.insert_many([{"_id": i, "x": i, "v": i * 10} for i in range(5)])
    got = list(r.app.local_side.aggregate([
        {"$lookup": {"from": "other", "localField": "x", "foreignField": "x", "as": "m"}},
        {"$sort": {"_id": 1}}]))
    assert [d["m"][0]["v"] for d in got] == [0, 10, 20, 30, 40]


def test_explain_distinct_through_the_router(sharded):
    r = sharded.router_client()
    from bson.son import SON
    one = r.app.command(SON([("explain", SON([("distinct", "hashed"), ("key", "g"),
                                                ("query", {"x": 77})])),
                             ("verbosity", "queryPlanner")]))
    assert one["queryPlanner"]["winningPlan"]["stage"] == "SINGLE_SHARD"
    both = r.app.command(SON([("explain", SON([("distinct", "hashed"), ("key", "g")])),
                              ("verbosity", "executionStats")]))
    assert both["queryPlanner"]["winningPlan"]["stage"] == "SHARD_MERGE"
    assert len(both["queryPlanner"]["winningPlan"]["shards"]) == 2


def test_shard_a_new_collection_on_id(cluster):
    """{_id: 1} is backed by the _id index: sharding a collection that does not exist yet
    creates it without a second, conflicting index on _id, and an existing one needs none."""
    r, cfg = cluster.router_client(), cluster.config_client()
    r.admin.command("enableSharding", "byid")
    r.admin.command("shardCollection", "byid.fresh", key={"_id": 1})
    r.byid.existing.insert_one({"_id": -1})
    r.admin.command("shardCollection", "byid.existing", key={"_id": 1}, unique=True)
    for name in ("fresh", "existing"):
        names = [i["name"] for i in r.byid[name].list_indexes()]
        assert names == ["_id_"], names
        r.byid[name].insert_many([{"_id": i} for i in range(100)])
        r.admin.command("split", "byid." + name, middle={"_id": 50})
        _, chunks = _chunks(cfg, "byid." + name)
        assert [c["min"]["_id"] for c in chunks][1] == 50
        assert r.byid[name].count_documents({"_id": {"$gte": 40, "$lt": 60}}) == 20


def test_unique_indexes_must_start_with_the_shard_key(cluster):
    """Uniqueness holds across shards only for unique indexes prefixed by the shard key (or
    by _id): MongoDB refuses the others when sharding (InvalidOptions) and when creating an
    index on a sharded collection (CannotCreateIndex); compatible ones are fine."""
    r = cluster.router_client()
    r.admin.command("enableSharding", "uniq")
    r.uniq.pre.create_index([("y", 1)], unique=True)
    with pytest.raises(OperationFailure) as e:
        r.admin.command("shardCollection", "uniq.pre", key={"k": 1})
    assert e.value.code == 72
    assert ("can't shard collection 'uniq.pre' with unique index on { y: 1 } and proposed shard "
            "key { k: 1 }. Uniqueness can't be maintained unless shard key is a prefix"
            in str(e.value))
    assert cluster.config_client().config.collections.find_one({"_id": "uniq.pre"}) is None
    r.admin.command("shardCollection", "uniq.c", key={"k": 1})
    for key in ([("x", 1)], [("x", 1), ("k", 1)]):
        with pytest.raises(OperationFailure) as e:
            r.uniq.c.create_index(key, unique=True)
        assert e.value.code == 67
        assert "cannot create unique index over" in str(e.value)
        assert "with shard key pattern { k: 1 }" in str(e.value)
    for key in ([("k", 1), ("x", 1)], [("_id", 1), ("z", 1)], [("x", 1)]):
        unique = key != [("x", 1)]  # a non-unique index on any field is fine
        r.uniq.c.create_index(key, unique=unique)
    names = sorted(i["name"] for i in r.uniq.c.list_indexes())
    assert names == ["_id_", "_id_1_z_1", "k_1", "k_1_x_1", "x_1"], names


def test_the_last_shard_key_index_stays(cluster):
    """MongoDB 6.0+: dropIndexes never removes the last index serving the shard key
    (CannotDropShardKeyIndex); "*" keeps every such index; with another one present, either
    may go."""
    r = cluster.router_client()
    r.admin.command("enableSharding", "keepidx")
    r.admin.command("shardCollection", "keepidx.c", key={"k": 1})
    c = r.keepidx.c
    c.insert_many([{"k": i, "x": i} for i in range(10)])
    c.create_index([("x", 1)])
    c.create_index([("k", 1), ("x", 1)], name="k_x")
    c.create_index([("k", 1), ("y", 1)], name="k_y_sparse", sparse=True)  # serves nothing
    c.drop_index("k_1")  # k_x still serves the key
    with pytest.raises(OperationFailure) as e:
        c.drop_index("k_x")
    assert e.value.code == 370
    assert "Cannot drop the only compatible index for this collection's shard key" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        r.keepidx.command("dropIndexes", "c", index=["x_1", "k_x"])
    assert e.value.code == 370
    assert sorted(i["name"] for i in c.list_indexes()) == ["_id_", "k_x", "k_y_sparse", "x_1"]
    r.keepidx.command("dropIndexes", "c", index="*")
    assert sorted(i["name"] for i in c.list_indexes()) == ["_id_", "k_x"]
    assert c.count_documents({"k": {"$gte": 5}}) == 5
    # MongoDB lets a hashed shard key's index go.
    r.admin.command("shardCollection", "keepidx.h", key={"k": "hashed"})
    r.keepidx.h.insert_many([{"k": i} for i in range(10)])
    r.keepidx.h.drop_index("k_hashed")
    assert [i["name"] for i in r.keepidx.h.list_indexes()] == ["_id_"]
    assert r.keepidx.h.count_documents({}) == 10


def test_full_batches_through_the_router_stay_within_the_reply_limit(cluster):
    """Issue 23: a shard's getMore batch counted only its documents' bytes, not their array
    keys, so 16 MiB of documents made a reply over the 16 MiB + 16 KiB every internal reader
    accepts, and the router failed the read ("BSONObj size ... is invalid"). 20,000
    documents of 1 KiB are enough to fill such a batch; the scale suite reads 5,000,000."""
    r = cluster.router_client()
    coll = r.bigbatch.c
    pad = "p" * 1000
    for lo in range(0, 20000, 5000):
        coll.insert_many([{"_id": i, "pad": pad} for i in range(lo, lo + 5000)])
    seen = 0
    for i, d in enumerate(coll.find({}, batch_size=0)):
        assert d["_id"] == i and len(d["pad"]) == 1000
        seen += 1
    assert seen == 20000
    # The same through an aggregation's cursor, and with a projection at the shard.
    assert sum(1 for _ in coll.aggregate([{"$match": {}}])) == 20000
    assert sum(1 for _ in coll.find({}, {"pad": 1, "_id": 0})) == 20000
    coll.drop()


def test_a_retryable_insert_many_over_16mib_is_split_for_its_shard(cluster):
    """A driver's insert_many of 17 MB for one shard, a retryable write: the router's
    sub-batches count the stmtIds they carry, so none is over a command's limit (one was
    refused with BSONObjectTooLarge before)."""
    r = cluster.router_client()
    coll = r.bigwrite.c
    pad = "p" * 1000
    assert len(coll.insert_many([{"_id": i, "pad": pad} for i in range(16500)]).inserted_ids) \
        == 16500
    assert coll.count_documents({}) == 16500
    coll.drop()
