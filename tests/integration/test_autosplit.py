"""Auto-split (issue 16 item 1; docs/design/balancer.md "Auto-split"): a shard counts the bytes
written to each of its chunks and, once a chunk took a fifth of the maximum chunk size, its
ChunkSplitter splits it at splitVector's points (the top chunk at its last key) and commits
the split on the config server; a chunk that cannot be split and is larger than the maximum
becomes jumbo. With the balancer on, ascending inserts spread over the shards by themselves.
The chunk size is config.settings {_id: "chunksize"} (MB) or the collection's
configureCollectionBalancing chunkSize."""

import pytest
from bson.min_key import MinKey
from pymongo.errors import OperationFailure

from shale_fixtures import config_db, fail_point, logged, module_cluster, wait_until

TIMEOUT = 60.0
PAD = "p" * 1000  # about 1 KB a document


@pytest.fixture(scope="module")
def cluster(request):
    with module_cluster(request, shards=2) as c:
        fail_point(c.config_client(), "overrideBalanceRoundInterval", "alwaysOn",
                   {"intervalMs": 200})
        cfg = config_db(c)
        # A new cluster's balancer is on, as MongoDB's.
        c.initial_balancer = c.router_client().admin.command("balancerStatus")
        cfg.settings.update_one({"_id": "balancer"}, {"$set": {"_waitForDelete": True}},
                                upsert=True)
        c.router_client().admin.command("balancerStop")
        yield c


def test_balancer_is_on_by_default(cluster):
    assert cluster.initial_balancer["mode"] == "full"


def chunks(cluster, ns):
    cfg = config_db(cluster)
    uuid = cfg.collections.find_one({"_id": ns})["uuid"]
    return list(cfg.chunks.find({"uuid": uuid}).sort("min", 1))


def chunk_counts(cluster, ns):
    counts = {}
    for ch in chunks(cluster, ns):
        counts[ch["shard"]] = counts.get(ch["shard"], 0) + 1
    return counts


def shard_collection(cluster, db, coll):
    r = cluster.router_client()
    r.admin.command("enableSharding", db, primaryShard="shard0")
    r.admin.command("shardCollection", "%s.%s" % (db, coll), key={"x": 1})
    return "%s.%s" % (db, coll)


def insert_ascending(cluster, db, coll, start, n, batch=200, key=None):
    c = cluster.router_client()[db][coll]
    for b in range(start, start + n, batch):
        c.insert_many([{"_id": i, "x": i if key is None else key, "pad": PAD}
                       for i in range(b, min(b + batch, start + n))])


@pytest.fixture
def chunksize_1mb(cluster):
    cfg = config_db(cluster)
    cfg.settings.update_one({"_id": "chunksize"}, {"$set": {"value": 1}}, upsert=True)
    yield
    cfg.settings.delete_one({"_id": "chunksize"})


def test_ascending_inserts_split_by_themselves(cluster, chunksize_1mb):
    ns = shard_collection(cluster, "as1", "c")
    assert len(chunks(cluster, ns)) == 1
    # 4 MB of ascending keys with 1 MB chunks: the shard splits the chunk it writes into.
    insert_ascending(cluster, "as1", "c", 0, 4000)
    wait_until(lambda: len(chunks(cluster, ns)) >= 3, timeout=TIMEOUT, what="auto-splits")
    cs = chunks(cluster, ns)
    # The balancer is off: every chunk stays on the shard that took the writes.
    assert {c["shard"] for c in cs} == {"shard0"}
    bounds = [c["min"]["x"] for c in cs[1:]]
    assert bounds == sorted(bounds) and all(0 < b < 4000 for b in bounds)
    cfg = config_db(cluster)
    splits = list(cfg.changelog.find({"ns": ns, "what": {"$in": ["split", "multi-split"]}}))
    assert splits and all(s["details"].get("fromChunkSplitter") is True for s in splits)
    # Nothing lost or duplicated, read through the router.
    r = cluster.router_client()
    assert r.as1.c.count_documents({}) == 4000
    assert sorted(d["_id"] for d in r.as1.c.find({}, {"_id": 1})) == list(range(4000))
    st = cluster.shard_client(0).admin.command("serverStatus")["shardingStatistics"]["autoSplit"]
    assert st["splits"] >= 1 and st["maxChunkSizeBytes"] == 1024 * 1024


def shard_chunk_size(cluster, i):
    st = cluster.shard_client(i).admin.command("serverStatus")["shardingStatistics"]
    return st["autoSplit"]["maxChunkSizeBytes"]


def test_top_chunk_is_split_at_its_last_key(cluster):
    # The shards have forgotten the 1 MB of the tests before.
    wait_until(lambda: shard_chunk_size(cluster, 0) == 128 * 1024 * 1024, timeout=TIMEOUT,
               what="the shard back at 128 MB chunks")
    ns = shard_collection(cluster, "as6", "c")
    insert_ascending(cluster, "as6", "c", 0, 3000)
    assert len(chunks(cluster, ns)) == 1  # 3 MB is nothing for 128 MB chunks
    cfg = config_db(cluster)
    # A smaller chunk size makes the chunk written before it due for a split (the shard
    # re-reads the setting within seconds).
    cfg.settings.update_one({"_id": "chunksize"}, {"$set": {"value": 1}}, upsert=True)
    try:
        wait_until(lambda: len(chunks(cluster, ns)) >= 3, timeout=TIMEOUT, what="the split")
    finally:
        cfg.settings.delete_one({"_id": "chunksize"})
    cs = chunks(cluster, ns)
    # splitVector's points every ~half chunk size, but the top chunk is cut at the greatest
    # key: it holds one document, where the next ascending inserts go.
    assert cs[-1]["min"] == {"x": 2999}, [c["min"] for c in cs]
    assert cluster.router_client().as6.c.count_documents({"x": {"$gte": cs[-2]["min"]["x"]}}) > 1
    entries = list(cfg.changelog.find({"ns": ns, "what": "multi-split"}).sort("details.number", 1))
    assert [e["details"]["number"] for e in entries] == list(range(1, len(cs) + 1))
    assert entries[-1]["details"]["chunk"]["min"] == {"x": 2999}


def test_top_chunk_moves_away_after_its_split(cluster, chunksize_1mb):
    ns = shard_collection(cluster, "as8", "c")
    r = cluster.router_client()
    # The earlier tests' collections sit unbalanced on shard0: keep the balancer off them
    # (sh.disableBalancing), or shard0 would be donating one of their chunks when the
    # splitter asks for this move, which is then refused (one migration per shard).
    cfg = config_db(cluster)
    others = {"_id": {"$ne": ns}, "noBalance": {"$ne": True}}
    held = [d["_id"] for d in cfg.collections.find(others, {"_id": 1})]
    cfg.collections.update_many({"_id": {"$in": held}}, {"$set": {"noBalance": True}})
    # Rounds every 10 s here: the move right after the split comes from the splitter's request.
    fail_point(cluster.config_client(), "overrideBalanceRoundInterval", "off")
    r.admin.command("balancerStart")
    try:
        insert_ascending(cluster, "as8", "c", 0, 3000)
        wait_until(lambda: logged(cluster.config, 4201631, ns="as8.c", to="shard1"),
                   timeout=TIMEOUT, what="the top chunk moved after its split")
    finally:
        r.admin.command("balancerStop")
        fail_point(cluster.config_client(), "overrideBalanceRoundInterval", "alwaysOn",
                   {"intervalMs": 200})
        cfg.collections.update_many({"_id": {"$in": held}}, {"$unset": {"noBalance": ""}})
    top = chunks(cluster, ns)[-1]
    assert top["shard"] == "shard1"
    # The ascending inserts after the move went to shard1.
    assert cluster.shard_client(1).as8.c.count_documents({}) > 0
    assert r.as8.c.count_documents({}) == 3000


def test_small_collection_is_not_split(cluster, chunksize_1mb):
    ns = shard_collection(cluster, "as2", "c")
    # 150 KB: under a fifth of a 1 MB chunk, no split task at all.
    insert_ascending(cluster, "as2", "c", 0, 150)
    # A larger collection written meanwhile gets split, so the splitter did run.
    ns_big = shard_collection(cluster, "as2", "big")
    insert_ascending(cluster, "as2", "big", 0, 3000)
    wait_until(lambda: len(chunks(cluster, ns_big)) >= 2, timeout=TIMEOUT, what="a split")
    assert len(chunks(cluster, ns)) == 1


def test_equal_keys_make_a_jumbo_chunk(cluster, chunksize_1mb):
    ns = shard_collection(cluster, "as3", "c")
    # 2 MB of documents with one shard key value: no split point exists.
    insert_ascending(cluster, "as3", "c", 0, 2000, key=7)
    wait_until(lambda: any(c.get("jumbo") for c in chunks(cluster, ns)), timeout=TIMEOUT,
               what="the chunk flagged jumbo")
    assert len(chunks(cluster, ns)) == 1
    assert config_db(cluster).changelog.count_documents({"ns": ns, "what": "markJumbo"}) == 1
    r = cluster.router_client()
    r.admin.command("clearJumboFlag", ns, find={"x": 7})
    assert not any(c.get("jumbo") for c in chunks(cluster, ns))


def test_ascending_inserts_spread_over_both_shards(cluster, chunksize_1mb):
    ns = shard_collection(cluster, "as4", "c")
    r = cluster.router_client()
    r.admin.command("balancerStart")
    try:
        insert_ascending(cluster, "as4", "c", 0, 6000)
        wait_until(lambda: len(chunk_counts(cluster, ns)) == 2, timeout=TIMEOUT,
                   what="chunks on both shards")
    finally:
        r.admin.command("balancerStop")
    assert r.as4.c.count_documents({}) == 6000
    assert sorted(d["_id"] for d in r.as4.c.find({}, {"_id": 1})) == list(range(6000))
    for i in range(2):
        n = cluster.shard_client(i).as4.c.count_documents({})
        assert n > 0, "shard%d holds nothing" % i


def test_configure_collection_balancing_chunk_size(cluster):
    r = cluster.router_client()
    ns = shard_collection(cluster, "as5", "c")
    cfg = config_db(cluster)
    res = r.admin.command("configureCollectionBalancing", ns, chunkSize=1, enableAutoMerger=False)
    assert res["ok"] == 1
    doc = cfg.collections.find_one({"_id": ns})
    assert doc["maxChunkSizeBytes"] == 1024 * 1024 and doc["enableAutoMerge"] is False
    assert r.admin.command("balancerCollectionStatus", ns)["chunkSize"] == 1
    # The cluster's chunksize is 128 MB; the collection's own 1 MB makes its chunks split.
    assert cfg.settings.find_one({"_id": "chunksize"}) is None
    insert_ascending(cluster, "as5", "c", 0, 3000)
    wait_until(lambda: len(chunks(cluster, ns)) >= 2, timeout=TIMEOUT,
               what="a split at the collection's chunk size")
    # chunkSize 0 goes back to the cluster's setting.
    r.admin.command("configureCollectionBalancing", ns, chunkSize=0)
    assert "maxChunkSizeBytes" not in cfg.collections.find_one({"_id": ns})
    assert r.admin.command("balancerCollectionStatus", ns)["chunkSize"] == 128
    with pytest.raises(OperationFailure) as e:
        r.admin.command("configureCollectionBalancing", ns, defragmentCollection=True)
    assert e.value.code == 115 and "defragment" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        r.admin.command("configureCollectionBalancing", ns, chunkSize=-1)
    assert e.value.code == 2  # BadValue
    r.as5.plain.insert_one({"x": 1})
    with pytest.raises(OperationFailure) as e:
        r.admin.command("configureCollectionBalancing", "as5.plain", chunkSize=1)
    assert e.value.code == 118  # NamespaceNotSharded


def test_too_big_chunk_is_refused_then_flagged_jumbo_by_the_balancer(cluster, chunksize_1mb):
    r = cluster.router_client()
    a = r.admin
    cfg = config_db(cluster)
    ns = shard_collection(cluster, "as7", "c")
    # No auto-split here (MongoDB 4.x's sh.disableAutoSplit()): the chunks stay as split by hand.
    cfg.settings.update_one({"_id": "autosplit"}, {"$set": {"enabled": False}}, upsert=True)
    wait_until(lambda: not cluster.shard_client(0).admin.command("serverStatus")[
        "shardingStatistics"]["autoSplit"]["enabled"], timeout=TIMEOUT, what="auto-split off")
    insert_ascending(cluster, "as7", "c", 0, 2500)
    a.command("split", ns, middle={"x": 2000})
    # 2000 documents of ~1 KB: more than 1.3 chunk sizes of 1 MB.
    with pytest.raises(OperationFailure) as e:
        a.command("moveChunk", ns, find={"x": 0}, to="shard1")
    assert e.value.code == 153 and "maximum number of documents for a chunk" in str(e.value)
    # A zone on shard1 for [MinKey, 2000): the balancer's migration fails for the size and
    # flags the chunk jumbo instead of trying it again round after round.
    a.command("addShardToZone", "shard1", zone="as7z")
    a.command("updateZoneKeyRange", ns, min={"x": MinKey()}, max={"x": 2000},
              zone="as7z")
    a.command("balancerStart")
    try:
        wait_until(lambda: chunks(cluster, ns)[0].get("jumbo"), timeout=TIMEOUT,
                   what="the big chunk flagged jumbo")
        assert chunks(cluster, ns)[0]["shard"] == "shard0"
        # attemptToBalanceJumboChunks lifts the size check once the flag is cleared.
        cfg.settings.update_one({"_id": "balancer"},
                                {"$set": {"attemptToBalanceJumboChunks": True}})
        a.command("clearJumboFlag", ns, find={"x": 0})
        wait_until(lambda: chunks(cluster, ns)[0]["shard"] == "shard1", timeout=TIMEOUT,
                   what="the big chunk moved into its zone")
    finally:
        a.command("balancerStop")
        cfg.settings.update_one({"_id": "balancer"},
                                {"$unset": {"attemptToBalanceJumboChunks": 1}})
        a.command("updateZoneKeyRange", ns, min={"x": MinKey()}, max={"x": 2000},
                  zone=None)
        a.command("removeShardFromZone", "shard1", zone="as7z")
        cfg.settings.delete_one({"_id": "autosplit"})
    assert r.as7.c.count_documents({}) == 2500
