"""The config server (`shale node --configsvr`): the catalog in config.* and the
_configsvr* commands of docs/design/sharding-protocol.md, driven with pymongo against a
config server and two --shardsvr nodes (real processes). Checks what a router or a user
reading config.* would see: shards, databases, collections, chunks and their versions,
the changelog, and MongoDB's errors for bad input."""

import bson
import pymongo
import pytest
from bson import MaxKey, MinKey, ObjectId, Timestamp

from shale_fixtures import ShaleProcess, stop_all


@pytest.fixture(scope="module")
def cfgc(request):
    procs = []
    failed_before = request.session.testsfailed
    try:
        cs = ShaleProcess(["node", "--configsvr", "--replSet", "csrs"], name="cfg")
        procs.append(cs)
        shards = []
        for i in range(2):
            p = ShaleProcess(["node", "--shardsvr", "--replSet", "rs%d" % i], name="shard%d" % i)
            procs.append(p)
            shards.append(p)
        for p in procs:
            p.start(wait=False)
        for p in procs:
            p.wait_ready()
        c = cs.client(uuidRepresentation="standard")
        for p in shards:
            c.admin.command({"_configsvrAddShard": p.host})
        yield cs, shards, c
    finally:
        keep = request.session.testsfailed > failed_before
        stop_all(procs)
        for p in procs:
            p.cleanup(keep_log_as=("configsvr-" + p.name) if keep else None)


def cmd(client, body):
    return client.admin.command(body)


def err(client, body):
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        client.admin.command(body)
    return e.value


def chunks(c, ns):
    coll = c.config.collections.find_one({"_id": ns})
    return list(c.config.chunks.find({"uuid": coll["uuid"]}).sort("min", 1))


def chunk_versions(c, ns):
    return [(ch["lastmod"].time, ch["lastmod"].inc) for ch in chunks(c, ns)]


def test_hello_version_and_indexes(cfgc):
    cs, _, c = cfgc
    assert c.admin.command("hello")["configsvr"] == 2
    v = c.config.version.find_one({"_id": 1})
    assert isinstance(v["clusterId"], ObjectId)
    ix = c.config.chunks.index_information()
    assert ix["uuid_1_min_1"]["unique"] and ix["uuid_1_shard_1_min_1"]["unique"]
    assert ix["uuid_1_lastmod_1"]["unique"]
    assert c.config.shards.index_information()["host_1"]["unique"]
    assert c.config.tags.index_information()["ns_1_min_1"]["unique"]
    assert c.config.command("collStats", "changelog")["capped"] is True


def test_add_shard_and_list(cfgc):
    cs, shards, c = cfgc
    got = cmd(c, {"listShards": 1})["shards"]
    assert [s["_id"] for s in got] == ["shard0", "shard1"]
    assert got[0]["host"] == "rs0/" + shards[0].host
    assert got[0]["state"] == 1 and isinstance(got[0]["topologyTime"], Timestamp)
    # The shard stored its identity.
    ident = shards[0].client().admin.system.version.find_one({"_id": "shardIdentity"})
    assert ident["shardName"] == "shard0"
    assert ident["clusterId"] == c.config.version.find_one()["clusterId"]
    # The same request again is a success naming the existing shard.
    assert cmd(c, {"_configsvrAddShard": shards[0].host})["shardAdded"] == "shard0"
    # Same host under another name.
    e = err(c, {"_configsvrAddShard": shards[0].host, "name": "other"})
    assert e.code == 20 and "already a member of the existing shard" in str(e)
    # The config server itself.
    e = err(c, {"_configsvrAddShard": cs.host})
    assert e.code == 96 and "since it is a config server" in str(e)
    # Nothing listens there.
    from shale_fixtures import free_port
    e = err(c, {"_configsvrAddShard": "127.0.0.1:%d" % free_port()})
    assert e.code in (6, 9001, 89) and "when attempting to add shard" in str(e)
    # A wrong set name in the connection string.
    e = err(c, {"_configsvrAddShard": "nope/" + shards[1].host, "name": "x"})
    assert e.code in (20, 96)
    assert c.config.shards.count_documents({}) == 2
    entries = list(c.config.changelog.find({"what": "addShard"}))
    assert len(entries) == 2
    assert set(entries[0]) >= {"_id", "server", "shard", "clientAddr", "time", "what", "ns",
                               "details"}


def test_create_database(cfgc):
    _, shards, c = cfgc
    r = cmd(c, {"_configsvrCreateDatabase": "cdb"})
    v = r["databaseVersion"]
    assert isinstance(v["uuid"], bson.binary.Binary) or hasattr(v["uuid"], "hex")
    assert isinstance(v["timestamp"], Timestamp) and v["lastMod"] == 1
    doc = c.config.databases.find_one({"_id": "cdb"})
    assert doc["primary"] in ("shard0", "shard1") and doc["version"]["lastMod"] == 1
    # Idempotent: the same entry, the same version.
    assert cmd(c, {"_configsvrCreateDatabase": "cdb"})["databaseVersion"] == v
    assert err(c, {"_configsvrCreateDatabase": "admin"}).code == 72
    assert err(c, {"_configsvrCreateDatabase": "local"}).code == 72
    assert err(c, {"_configsvrCreateDatabase": "a.b"}).code == 73
    assert err(c, {"_configsvrCreateDatabase": "CDB"}).code == 13297
    assert err(c, {"_configsvrCreateDatabase": "cDb"}).code == 13297
    cmd(c, {"_configsvrCreateDatabase": "cd"})  # a prefix is another database
    assert err(c, {"_configsvrCreateDatabase": "zdb", "primaryShard": "nope"}).code == 70
    cmd(c, {"_configsvrCreateDatabase": "pdb", "primaryShard": "shard1"})
    assert c.config.databases.find_one({"_id": "pdb"})["primary"] == "shard1"


def test_shard_collection_range_split_merge(cfgc):
    _, shards, c = cfgc
    cmd(c, {"_configsvrCreateDatabase": "rdb", "primaryShard": "shard0"})
    r = cmd(c, {"_configsvrShardCollection": "rdb.c", "key": {"a": 1}})
    assert r["collectionsharded"] == "rdb.c"
    s0 = shards[0].client(uuidRepresentation="standard")
    info = s0.rdb.command("listCollections", filter={"name": "c"})["cursor"]["firstBatch"][0]
    assert r["collectionUUID"] == info["info"]["uuid"]
    assert "a_1" in s0.rdb.c.index_information()
    coll = c.config.collections.find_one({"_id": "rdb.c"})
    assert coll["key"] == {"a": 1} and coll["unique"] is False
    assert isinstance(coll["lastmodEpoch"], ObjectId) and isinstance(coll["timestamp"], Timestamp)
    ch = chunks(c, "rdb.c")
    assert len(ch) == 1 and ch[0]["min"] == {"a": MinKey()} and ch[0]["max"] == {"a": MaxKey()}
    assert ch[0]["shard"] == "shard0" and ch[0]["lastmod"] == Timestamp(1, 0)
    assert ch[0]["history"][0]["shard"] == "shard0"

    # Same key again: no-op success; another key: AlreadyInitialized.
    assert cmd(c, {"_configsvrShardCollection": "rdb.c", "key": {"a": 1}})["collectionUUID"] == \
        r["collectionUUID"]
    assert err(c, {"_configsvrShardCollection": "rdb.c", "key": {"b": 1}}).code == 23
    epoch = coll["lastmodEpoch"]

    # Split at middle: minor bumps, same generation.
    cmd(c, {"_configsvrSplitChunk": "rdb.c", "middle": {"a": 10}})
    assert chunk_versions(c, "rdb.c") == [(1, 1), (1, 2)]
    cmd(c, {"_configsvrSplitChunk": "rdb.c", "middle": {"a": 20}})
    ch = chunks(c, "rdb.c")
    assert [x["min"]["a"] for x in ch] == [MinKey(), 10, 20]
    assert chunk_versions(c, "rdb.c") == [(1, 1), (1, 3), (1, 4)]
    # The owning shard was told to refresh: it already knows the new shard version.
    assert s0.admin.command("getShardVersion", "rdb.c")["global"] == Timestamp(1, 4)
    assert c.config.collections.find_one({"_id": "rdb.c"})["lastmodEpoch"] == epoch
    # Splitting at a chunk bound, or with a non-key.
    e = err(c, {"_configsvrSplitChunk": "rdb.c", "middle": {"a": 10}})
    assert e.code == 72 and "lower bound" in str(e)
    assert err(c, {"_configsvrSplitChunk": "rdb.c", "middle": {"b": 1}}).code == 2
    assert err(c, {"_configsvrSplitChunk": "rdb.c"}).code == 2

    # Merge [10, MaxKey): one chunk with the next minor.
    cmd(c, {"_configsvrCommitChunksMerge": "rdb.c", "bounds": [{"a": 10}, {"a": MaxKey()}]})
    ch = chunks(c, "rdb.c")
    assert [(x["min"]["a"], x["max"]["a"]) for x in ch] == [(MinKey(), 10), (10, MaxKey())]
    assert chunk_versions(c, "rdb.c") == [(1, 1), (1, 5)]
    assert s0.admin.command("getShardVersion", "rdb.c")["global"] == Timestamp(1, 5)
    # One chunk, and bounds that are not chunk boundaries.
    assert err(c, {"_configsvrCommitChunksMerge": "rdb.c",
                   "bounds": [{"a": 10}, {"a": MaxKey()}]}).code == 20
    assert err(c, {"_configsvrCommitChunksMerge": "rdb.c",
                   "bounds": [{"a": 5}, {"a": MaxKey()}]}).code == 20

    whats = [e["what"] for e in c.config.changelog.find({"ns": "rdb.c"}).sort("time", 1)]
    assert "shardCollection.start" in whats and "split" in whats and "merge" in whats


def test_split_find_bounds_and_split_vector(cfgc):
    _, shards, c = cfgc
    cmd(c, {"_configsvrCreateDatabase": "fdb", "primaryShard": "shard1"})
    s1 = shards[1].client()
    s1.fdb.c.insert_many([{"k": i} for i in range(100)])
    # Non-empty without an index on the key: refused.
    e = err(c, {"_configsvrShardCollection": "fdb.c", "key": {"k": 1}})
    assert e.code == 72 and "Please create an index" in str(e)
    # splitVector needs that index too.
    e = err(s1, {"splitVector": "fdb.c", "keyPattern": {"k": 1}, "force": True})
    assert e.code == 27
    s1.fdb.c.create_index("k")
    r = cmd(s1, {"splitVector": "fdb.c", "keyPattern": {"k": 1}, "min": {"k": MinKey()},
                 "max": {"k": MaxKey()}, "force": True})
    assert r["splitKeys"] == [{"k": 50}]
    r = cmd(s1, {"splitVector": "fdb.c", "keyPattern": {"k": 1}, "maxChunkSizeBytes": 1024})
    assert len(r["splitKeys"]) > 1
    keys = [k["k"] for k in r["splitKeys"]]
    assert keys == sorted(keys)
    cmd(c, {"_configsvrShardCollection": "fdb.c", "key": {"k": 1}})
    # find: the median of the chunk holding k: 3 (the whole collection).
    cmd(c, {"_configsvrSplitChunk": "fdb.c", "find": {"k": 3}})
    ch = chunks(c, "fdb.c")
    assert [x["min"]["k"] for x in ch] == [MinKey(), 50]
    # bounds: the median of [50, MaxKey) is 75.
    cmd(c, {"_configsvrSplitChunk": "fdb.c", "bounds": [{"k": 50}, {"k": MaxKey()}]})
    assert [x["min"]["k"] for x in chunks(c, "fdb.c")] == [MinKey(), 50, 75]
    e = err(c, {"_configsvrSplitChunk": "fdb.c", "bounds": [{"k": 51}, {"k": MaxKey()}]})
    assert e.code == 72
    assert err(c, {"_configsvrSplitChunk": "no.such", "middle": {"k": 1}}).code == 118
    # An empty collection with a usable index under another name keeps it.
    s1.fdb.e.create_index([("k", 1)], name="mine")
    cmd(c, {"_configsvrShardCollection": "fdb.e", "key": {"k": 1}})
    assert sorted(s1.fdb.e.index_information()) == ["_id_", "mine"]
    # unique: true needs the index to be unique.
    s1.fdb.u.create_index([("k", 1)])
    e = err(c, {"_configsvrShardCollection": "fdb.u", "key": {"k": 1}, "unique": True})
    assert e.code == 72
    cmd(c, {"_configsvrShardCollection": "fdb.u2", "key": {"k": 1}, "unique": True})
    assert s1.fdb.u2.index_information()["k_1"]["unique"] is True
    assert c.config.collections.find_one({"_id": "fdb.u2"})["unique"] is True


def test_hashed_presplit(cfgc):
    _, shards, c = cfgc
    cmd(c, {"_configsvrShardCollection": "hdb.h", "key": {"x": "hashed"}})
    ch = chunks(c, "hdb.h")
    assert len(ch) == 4
    assert [x["shard"] for x in ch] == ["shard0", "shard1", "shard0", "shard1"]
    assert chunk_versions(c, "hdb.h") == [(1, 0), (1, 1), (1, 2), (1, 3)]
    assert ch[0]["min"] == {"x": MinKey()} and ch[-1]["max"] == {"x": MaxKey()}
    assert ch[1]["min"]["x"] < 0 < ch[3]["min"]["x"] and ch[2]["min"]["x"] == 0
    for s in shards:
        assert "x_hashed" in s.client().hdb.h.index_information()
    cmd(c, {"_configsvrShardCollection": "hdb.h6", "key": {"x": "hashed"},
            "numInitialChunks": 6})
    assert len(chunks(c, "hdb.h6")) == 6
    e = err(c, {"_configsvrShardCollection": "hdb.r", "key": {"x": 1}, "numInitialChunks": 4})
    assert e.code == 72
    e = err(c, {"_configsvrShardCollection": "hdb.u", "key": {"x": "hashed"}, "unique": True})
    assert e.code == 72
    # Adjacent chunks on different shards cannot be merged.
    ch = chunks(c, "hdb.h")
    e = err(c, {"_configsvrCommitChunksMerge": "hdb.h", "bounds": [ch[0]["min"], ch[1]["max"]]})
    assert e.code == 20
    # The chunks are empty: nothing to split at the median.
    e = err(c, {"_configsvrSplitChunk": "hdb.h", "find": {"x": 1}})
    assert e.code == 87
    # Split at a hashed value (middle is a shard key value: the hash).
    lo = chunks(c, "hdb.h")[2]
    cmd(c, {"_configsvrSplitChunk": "hdb.h", "middle": {"x": bson.int64.Int64(1 << 40)}})
    assert len(chunks(c, "hdb.h")) == 5
    assert chunks(c, "hdb.h")[3]["min"] == {"x": 1 << 40} and lo["min"] == {"x": 0}
    # splitVector over a hashed index answers hashed values.
    s0 = shards[0].client()
    s0.hdb.h.insert_many([{"x": i} for i in range(40)])
    r = cmd(s0, {"splitVector": "hdb.h", "keyPattern": {"x": "hashed"}, "force": True})
    assert len(r["splitKeys"]) == 1 and isinstance(r["splitKeys"][0]["x"], int)


def test_bad_shard_keys_and_namespaces(cfgc):
    _, _, c = cfgc
    for key in ({"a": 2}, {"a": "hashed", "b": "hashed"}, {}, {"a": "text"}):
        assert err(c, {"_configsvrShardCollection": "kdb.c", "key": key}).code == 2, key
    assert err(c, {"_configsvrShardCollection": "kdb.c"}).code == 40414
    assert err(c, {"_configsvrShardCollection": 5, "key": {"a": 1}}).code == 14
    assert err(c, {"_configsvrShardCollection": "kdb.c", "key": 1}).code == 14
    assert err(c, {"_configsvrShardCollection": "kdb", "key": {"a": 1}}).code == 73
    assert err(c, {"_configsvrShardCollection": "admin.c", "key": {"a": 1}}).code == 20
    assert c.config.collections.find_one({"_id": "kdb.c"}) is None


def test_refine_clear_jumbo_and_drop(cfgc):
    _, shards, c = cfgc
    cmd(c, {"_configsvrCreateDatabase": "xdb", "primaryShard": "shard0"})
    cmd(c, {"_configsvrShardCollection": "xdb.c", "key": {"a": 1}})
    cmd(c, {"_configsvrSplitChunk": "xdb.c", "middle": {"a": 0}})
    before = c.config.collections.find_one({"_id": "xdb.c"})
    versions = chunk_versions(c, "xdb.c")
    e = err(c, {"_configsvrRefineCollectionShardKey": "xdb.c", "key": {"a": 1, "b": 1}})
    assert e.code == 72  # no index yet
    assert err(c, {"_configsvrRefineCollectionShardKey": "xdb.c", "key": {"b": 1}}).code == 72
    shards[0].client().xdb.c.create_index([("a", 1), ("b", 1)])
    cmd(c, {"_configsvrRefineCollectionShardKey": "xdb.c", "key": {"a": 1, "b": 1}})
    after = c.config.collections.find_one({"_id": "xdb.c"})
    assert after["key"] == {"a": 1, "b": 1}
    assert after["lastmodEpoch"] != before["lastmodEpoch"]
    assert after["timestamp"] > before["timestamp"]
    ch = chunks(c, "xdb.c")
    assert ch[0]["min"] == {"a": MinKey(), "b": MinKey()}
    assert ch[1]["min"] == {"a": 0, "b": MinKey()}
    assert ch[1]["max"] == {"a": MaxKey(), "b": MaxKey()}
    assert chunk_versions(c, "xdb.c") == versions

    # clearJumboFlag: the flag goes and the chunk gets the next minor.
    c.config.chunks.update_one({"_id": ch[0]["_id"]}, {"$set": {"jumbo": True}})
    cmd(c, {"_configsvrClearJumboFlag": "xdb.c", "find": {"a": -5, "b": 1}})
    ch = chunks(c, "xdb.c")
    assert "jumbo" not in ch[0] and ch[0]["lastmod"] == Timestamp(1, 3)

    # The drop coordinators' catalog commits (the primary shard drops the data).
    cmd(c, {"_configsvrCommitDropCollection": "xdb.c", "collectionUUID": after["uuid"]})
    assert c.config.collections.find_one({"_id": "xdb.c"}) is None
    assert c.config.chunks.count_documents({"uuid": after["uuid"]}) == 0
    cmd(c, {"_configsvrCommitDropDatabase": "xdb"})
    assert c.config.databases.find_one({"_id": "xdb"}) is None
    # The one-shot config server drops are gone (MongoDB 7.0 has none).
    assert err(c, {"_configsvrDropCollection": "xdb.c"}).code == 59
    assert err(c, {"_configsvrDropDatabase": "xdb"}).code == 59


def test_remove_shard(cfgc):
    cs, shards, c = cfgc
    extra = ShaleProcess(["node", "--shardsvr", "--replSet", "rs9"], name="shard9")
    try:
        extra.start()
        # A database the cluster already has elsewhere refuses the shard.
        ec = extra.client()
        ec.rdb.stray.insert_one({"x": 1})
        e = err(c, {"_configsvrAddShard": extra.host})
        assert e.code == 96 and "rdb" in str(e)
        ec.drop_database("rdb")
        name = cmd(c, {"_configsvrAddShard": extra.host})["shardAdded"]
        assert name == "shard2"
        r = cmd(c, {"_configsvrRemoveShard": name})
        assert r["state"] == "started" and r["msg"] == "draining started successfully"
        assert r["dbsToMove"] == []
        assert c.config.shards.find_one({"_id": name})["draining"] is True
        r = cmd(c, {"_configsvrRemoveShard": name})
        assert r["state"] == "completed" and r["shard"] == name
        assert c.config.shards.find_one({"_id": name}) is None
    finally:
        extra.cleanup()
    assert err(c, {"_configsvrRemoveShard": "nope"}).code == 70
    # shard1 owns chunks and databases: draining stays ongoing.
    cmd(c, {"_configsvrRemoveShard": "shard1"})
    r = cmd(c, {"_configsvrRemoveShard": "shard1"})
    assert r["state"] == "ongoing" and r["remaining"]["chunks"] > 0
    assert "pdb" in r["dbsToMove"]
    # A draining shard is no candidate for new chunks.
    cmd(c, {"_configsvrShardCollection": "hdb.d", "key": {"x": "hashed"}})
    assert {x["shard"] for x in chunks(c, "hdb.d")} == {"shard0"}


def test_restart_keeps_cluster_id():
    cs = ShaleProcess(["node", "--configsvr", "--replSet", "csrs"], name="cfg-restart")
    try:
        cs.start()
        c = cs.client()
        cid = c.config.version.find_one({"_id": 1})["clusterId"]
        c.close()
        assert cs.stop() == 0
        cs.start()
        c = cs.client()
        assert list(c.config.version.find()) == [{"_id": 1, "clusterId": cid}]
        assert c.admin.command("hello")["configsvr"] == 2
        c.close()
    finally:
        cs.cleanup()


def test_concurrent_commits_are_serialized(cfgc):
    cs, _, c = cfgc
    import threading
    results, errors = [], []

    def run(body):
        cl = cs.client(uuidRepresentation="standard")
        try:
            results.append(cl.admin.command(body))
        except pymongo.errors.PyMongoError as e:
            errors.append(e)
        finally:
            cl.close()

    threads = [threading.Thread(target=run, args=({"_configsvrShardCollection": "cdb2.c",
                                                    "key": {"a": 1}},)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len({r["collectionUUID"] for r in results}) == 1
    assert len(chunks(c, "cdb2.c")) == 1
    results.clear()
    threads = [threading.Thread(target=run, args=({"_configsvrSplitChunk": "cdb2.c",
                                                    "middle": {"a": i * 10}},)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ch = chunks(c, "cdb2.c")
    assert [x["min"]["a"] for x in ch] == [MinKey()] + [i * 10 for i in range(8)]
    # Every split bumped the minor once: 9 chunks, versions 1|1 .. 1|16 without duplicates.
    versions = sorted(chunk_versions(c, "cdb2.c"))
    assert len(set(versions)) == 9 and max(versions) == (1, 16)
    for a, b in zip(ch, ch[1:]):
        assert a["max"] == b["min"]


def test_add_shard_refuses_what_is_not_a_shard(cfgc):
    cs, _, c = cfgc
    others = [ShaleProcess(["node", "--configsvr", "--replSet", "csrs2"], name="cfg2"),
              ShaleProcess(["router", "--configdb", "csrs/" + cs.host], name="router"),
              ShaleProcess(["node"], name="standalone")]
    try:
        for p in others:
            p.start(wait=False)
        for p in others:
            p.wait_ready()
        e = err(c, {"_configsvrAddShard": others[0].host})
        assert e.code == 96 and "since it is a config server" in str(e)
        e = err(c, {"_configsvrAddShard": others[1].host})
        assert e.code == 20 and "cannot add a mongos as a shard" in str(e)
        e = err(c, {"_configsvrAddShard": others[2].host})
        assert e.code == 96 and "did not return a set name" in str(e)
        e = err(c, {"_configsvrAddShard": others[0].host, "name": "config"})
        assert e.code == 2
        assert c.config.shards.count_documents({"host": {"$regex": "csrs2|standalone"}}) == 0
    finally:
        stop_all(others)
        for p in others:
            p.cleanup()
