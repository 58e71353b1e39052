"""The shard role (`shale node --shardsvr`, src/shard/): the shardIdentity the config
server sends with _addShard, and versioned requests (shardVersion / databaseVersion)
checked against the filtering metadata loaded from a config server
(docs/design/sharding-protocol.md "Config server -> shard", "Router -> shard")."""

import bson
import pytest
from bson import ObjectId
from pymongo.errors import OperationFailure


def _identity(name, cluster_id, config):
    return {"shardName": name, "clusterId": cluster_id,
            "configsvrConnectionString": "csrs/" + config}


def _add_shard(shard, name, cluster_id, config):
    return shard.client().admin.command(
        "_addShard", 1, shardIdentity=_identity(name, cluster_id, config))


def test_add_shard_stores_identity_and_survives_restart(shale_process):
    shard = shale_process(["node", "--shardsvr", "--replSet", "shard0"], name="shard0")
    c = shard.client()
    with pytest.raises(OperationFailure) as e:
        c.admin.command("getShardVersion", "db.c")
    assert e.value.code == 203  # ShardingStateNotInitialized

    cid = ObjectId()
    assert _add_shard(shard, "shard0", cid, "127.0.0.1:1")["ok"] == 1
    doc = c.admin.system.version.find_one({"_id": "shardIdentity"})
    assert doc == {"_id": "shardIdentity", "shardName": "shard0", "clusterId": cid,
                   "configsvrConnectionString": "csrs/127.0.0.1:1"}
    # The same identity again is fine; another name is refused.
    assert _add_shard(shard, "shard0", cid, "127.0.0.1:1")["ok"] == 1
    with pytest.raises(OperationFailure) as e:
        _add_shard(shard, "shard7", cid, "127.0.0.1:1")
    assert e.value.code == 20  # IllegalOperation
    with pytest.raises(OperationFailure) as e:
        c.admin.command("_addShard", 1, shardIdentity={"shardName": "x"})
    assert e.value.code == 40414  # a missing required field

    r = c.admin.command("getShardVersion", "db.c")
    assert r["configServer"] == "csrs/127.0.0.1:1"
    assert r["global"] == "UNKNOWN"
    assert c.admin.command("serverStatus")["sharding"]["configsvrConnectionString"] == \
        "csrs/127.0.0.1:1"
    c.close()

    shard.stop()
    shard.start()
    c = shard.client()
    # Reloaded at start-up: shard-aware again, and still refuses another name.
    assert c.admin.command("getShardVersion", "db.c")["configServer"] == "csrs/127.0.0.1:1"
    with pytest.raises(OperationFailure) as e:
        _add_shard(shard, "other", cid, "127.0.0.1:1")
    assert e.value.code == 20
    c.close()


# ---------------------------------------------------------------- versioned requests

import datetime
import uuid

from bson import Binary, MaxKey, MinKey, Timestamp

UNSHARDED = {"e": ObjectId("000000000000000000000000"), "t": Timestamp(0, 0),
             "v": Timestamp(0, 0)}
COLL_TS = Timestamp(1700000000, 1)


def _uuid():
    return Binary(uuid.uuid4().bytes, 4)


class HandCluster:
    """A config server node holding config.* written by hand, and one shard 'shard0'
    added to it. Chunks of 'test.c' (key {x: 1}): [MinKey, 0) on shard0 at 1|0,
    [0, MaxKey) on shard1 at 1|1, so shard0's version is 1|0."""

    def __init__(self, shale_process):
        self.cfg = shale_process(["node", "--configsvr", "--replSet", "csrs"], name="csrs")
        self.shard = shale_process(["node", "--shardsvr", "--replSet", "shard0"],
                                   name="shard0")
        self.cfgc = self.cfg.client()
        self.sc = self.shard.client()
        self.epoch = ObjectId()
        self.uuid = _uuid()
        self.db_version = {"uuid": _uuid(), "timestamp": Timestamp(1700000000, 2),
                           "lastMod": 1}
        _add_shard(self.shard, "shard0", ObjectId(), self.cfg.host)
        conf = self.cfgc.config
        conf.databases.insert_one({"_id": "test", "primary": "shard0",
                                   "version": self.db_version})
        conf.collections.insert_one({
            "_id": "test.c", "lastmodEpoch": self.epoch,
            "lastmod": datetime.datetime(2023, 11, 14), "timestamp": COLL_TS,
            "uuid": self.uuid, "key": {"x": 1}, "unique": False, "noBalance": False})
        self.chunk_ids = [ObjectId(), ObjectId()]
        conf.chunks.insert_many([
            {"_id": self.chunk_ids[0], "uuid": self.uuid, "min": {"x": MinKey()},
             "max": {"x": 0}, "shard": "shard0", "lastmod": Timestamp(1, 0),
             "history": [{"validAfter": Timestamp(1700000000, 1), "shard": "shard0"}]},
            {"_id": self.chunk_ids[1], "uuid": self.uuid, "min": {"x": 0},
             "max": {"x": MaxKey()}, "shard": "shard1", "lastmod": Timestamp(1, 1),
             "history": [{"validAfter": Timestamp(1700000000, 1), "shard": "shard1"}]},
        ])
        # Documents of both chunks on the shard, written directly (unversioned).
        self.sc.test.c.insert_many([{"_id": i, "x": i} for i in range(-5, 5)])

    def sv(self, major, minor, epoch=None, ts=COLL_TS):
        return {"e": epoch or self.epoch, "t": ts, "v": Timestamp(major, minor)}

    def move_upper_chunk_here(self):
        """The [0, MaxKey) chunk moves to shard0: shard0's version becomes 2|0."""
        self.cfgc.config.chunks.update_one(
            {"_id": self.chunk_ids[1]},
            {"$set": {"shard": "shard0", "lastmod": Timestamp(2, 0),
                      "history": [{"validAfter": Timestamp(1700000100, 1), "shard": "shard0"},
                                  {"validAfter": Timestamp(1700000000, 1),
                                   "shard": "shard1"}]}})


@pytest.fixture
def hc(shale_process):
    return HandCluster(shale_process)


def _stale(excinfo):
    e = excinfo.value
    return e.code, e.details


def test_versioned_reads_filter_orphans(hc):
    db = hc.sc.test
    sv = hc.sv(1, 0)
    r = db.command("find", "c", filter={}, sort={"x": 1}, shardVersion=sv)
    assert [d["x"] for d in r["cursor"]["firstBatch"]] == [-5, -4, -3, -2, -1]
    # Unversioned reads see everything, orphans included.
    assert db.c.count_documents({}) == 10
    assert len(db.command("find", "c")["cursor"]["firstBatch"]) == 10

    assert db.command("count", "c", shardVersion=sv)["n"] == 5
    assert db.command("count", "c", query={"x": {"$gte": -2}}, shardVersion=sv)["n"] == 2
    # With an index that answers the filter exactly, an unversioned count counts keys
    # (COUNT_SCAN); a versioned one still drops orphans (their keys are in the index too).
    db.c.create_index("x")
    assert db.command("count", "c", query={"x": {"$gte": -2}}, shardVersion=sv)["n"] == 2
    assert db.command("count", "c", query={"x": {"$gte": -2}})["n"] == 7
    e = db.command("explain", {"count": "c", "query": {"x": {"$gte": -2}}})
    assert e["queryPlanner"]["winningPlan"]["inputStage"]["stage"] == "COUNT_SCAN"
    r = db.command("find", "c", filter={"x": {"$gte": -2}}, projection={"_id": 0, "x": 1},
                   shardVersion=sv)
    assert r["cursor"]["firstBatch"] == [{"x": -2}, {"x": -1}]
    assert sorted(db.command("distinct", "c", key="x", shardVersion=sv)["values"]) == \
        [-5, -4, -3, -2, -1]
    r = db.command("aggregate", "c", pipeline=[{"$group": {"_id": None, "n": {"$sum": 1}}}],
                   cursor={}, shardVersion=sv)
    assert r["cursor"]["firstBatch"][0]["n"] == 5
    # skip/limit count owned documents only; _id lookups of orphans find nothing.
    r = db.command("find", "c", filter={}, sort={"x": -1}, skip=1, limit=2, shardVersion=sv)
    assert [d["x"] for d in r["cursor"]["firstBatch"]] == [-2, -3]
    r = db.command("find", "c", filter={"_id": 3}, shardVersion=sv)
    assert r["cursor"]["firstBatch"] == []
    r = db.command("find", "c", filter={"_id": -3}, shardVersion=sv)
    assert r["cursor"]["firstBatch"] == [{"_id": -3, "x": -3}]

    gsv = hc.sc.admin.command("getShardVersion", "test.c")
    assert gsv["global"] == Timestamp(1, 0)
    assert gsv["configServer"] == "csrs/" + hc.cfg.host
    full = hc.sc.admin.command("getShardVersion", "test.c", fullMetadata=True)
    assert full["metadata"]["collVersion"] == Timestamp(1, 1)
    assert full["metadata"]["chunks"] == [[{"x": MinKey()}, {"x": 0}]]


def test_stale_versions(hc):
    db = hc.sc.test
    assert db.command("count", "c", shardVersion=hc.sv(1, 0))["n"] == 5

    # Older than the shard's: StaleConfig at once, with MongoDB's extra info.
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", shardVersion=hc.sv(0, 5))
    code, info = _stale(e)
    assert code == 13388 and info["codeName"] == "StaleConfig"
    assert info["ns"] == "test.c"
    assert info["shardId"] == "shard0"
    assert info["vReceived"]["v"] == Timestamp(0, 5)
    assert info["vWanted"] == hc.sv(1, 0)

    # Another generation (epoch and timestamp): refreshed, still not it.
    other = hc.sv(1, 0, epoch=ObjectId(), ts=Timestamp(1700000500, 1))
    with pytest.raises(OperationFailure) as e:
        db.command("count", "c", shardVersion=other)
    code, info = _stale(e)
    assert code == 13388 and info["vWanted"] == hc.sv(1, 0)
    assert info["vReceived"]["e"] == other["e"]

    # UNSHARDED for a sharded collection, and a sharded version for an unsharded one.
    with pytest.raises(OperationFailure) as e:
        db.command("insert", "c", documents=[{"x": -10}], shardVersion=UNSHARDED)
    assert e.value.code == 13388
    with pytest.raises(OperationFailure) as e:
        db.command("find", "u", shardVersion=hc.sv(1, 0))
    code, info = _stale(e)
    assert code == 13388 and info["ns"] == "test.u"
    assert info["vWanted"] == UNSHARDED

    # A newer version than the shard knows (the config server moved a chunk here): the
    # shard refreshes and runs it; the old version is now stale.
    hc.move_upper_chunk_here()
    assert db.command("count", "c", shardVersion=hc.sv(2, 0))["n"] == 10
    assert hc.sc.admin.command("getShardVersion", "test.c")["global"] == Timestamp(2, 0)
    with pytest.raises(OperationFailure) as e:
        db.command("update", "c", updates=[{"q": {"x": 1}, "u": {"$set": {"y": 1}}}],
                   shardVersion=hc.sv(1, 0))
    code, info = _stale(e)
    assert code == 13388 and info["vWanted"] == hc.sv(2, 0)
    assert db.c.find_one({"x": 1}) == {"_id": 1, "x": 1}

    # Now that every chunk is here, a versioned multi-update touches every document.
    r = db.command("update", "c", updates=[{"q": {}, "u": {"$set": {"z": 1}}, "multi": True}],
                   shardVersion=hc.sv(2, 0))
    assert r["nModified"] == 10

    # Versioned writes with the current version run.
    r = db.command("insert", "c", documents=[{"_id": 100, "x": 100}],
                   shardVersion=hc.sv(2, 0))
    assert r["n"] == 1
    r = db.command("update", "c", updates=[{"q": {"x": 1}, "u": {"$set": {"y": 1}}}],
                   shardVersion=hc.sv(2, 0))
    assert r["nModified"] == 1
    r = db.command("delete", "c", deletes=[{"q": {"x": 100}, "limit": 1}],
                   shardVersion=hc.sv(2, 0))
    assert r["n"] == 1


def test_versioned_writes_skip_orphans(hc):
    db = hc.sc.test
    sv = hc.sv(1, 0)
    r = db.command("update", "c", updates=[{"q": {}, "u": {"$set": {"y": 1}}, "multi": True}],
                   shardVersion=sv)
    assert r["n"] == 5 and r["nModified"] == 5
    assert db.c.count_documents({"y": 1}) == 5
    assert db.c.count_documents({"y": 1, "x": {"$gte": 0}}) == 0
    r = db.command("findAndModify", "c", query={"x": 3}, update={"$set": {"y": 2}},
                   shardVersion=sv)
    assert r["value"] is None
    r = db.command("delete", "c", deletes=[{"q": {}, "limit": 0}], shardVersion=sv)
    assert r["n"] == 5
    # The orphans are still there for an unversioned reader.
    assert sorted(d["x"] for d in db.c.find()) == [0, 1, 2, 3, 4]
    # IGNORED skips the check but still filters.
    ignored = {"e": ObjectId(b"\x00" * 4 + b"\xff" * 8),
               "t": Timestamp(2**32 - 1, 2**32 - 1), "v": Timestamp(0, 0)}
    assert db.command("count", "c", shardVersion=ignored)["n"] == 0


def test_flush_routing_table_cache_updates(hc):
    admin = hc.sc.admin
    assert admin.command("_flushRoutingTableCacheUpdates", "test.nothing")["ok"] == 1
    assert admin.command("getShardVersion", "test.c")["global"] == "UNKNOWN"
    assert admin.command("_flushRoutingTableCacheUpdates", "test.c")["ok"] == 1
    assert admin.command("getShardVersion", "test.c")["global"] == Timestamp(1, 0)
    hc.move_upper_chunk_here()
    assert admin.command("_flushRoutingTableCacheUpdates", "test.c")["ok"] == 1
    assert admin.command("getShardVersion", "test.c")["global"] == Timestamp(2, 0)
    # Known now: the request runs without another refresh.
    assert hc.sc.test.command("count", "c", shardVersion=hc.sv(2, 0))["n"] == 10


def test_flush_database_cache_updates(hc):
    admin = hc.sc.admin
    db = hc.sc.test
    assert db.command("count", "c", shardVersion=hc.sv(1, 0))["n"] == 5
    hc.move_upper_chunk_here()
    assert admin.command("_flushDatabaseCacheUpdates", "test")["ok"] == 1
    assert admin.command("getShardVersion", "test.c")["global"] == "UNKNOWN"
    assert db.command("count", "c", shardVersion=hc.sv(2, 0))["n"] == 10
    assert admin.command("_flushDatabaseCacheUpdates", "nosuchdb")["ok"] == 1
    with pytest.raises(OperationFailure) as e:
        admin.command("_flushDatabaseCacheUpdates", 1)
    assert e.value.code == 14


def test_cursor_keeps_its_filter(hc):
    db = hc.sc.test
    r = db.command("find", "c", filter={}, sort={"x": 1}, batchSize=2,
                   shardVersion=hc.sv(1, 0))
    first = [d["x"] for d in r["cursor"]["firstBatch"]]
    cid = r["cursor"]["id"]
    assert first == [-5, -4] and cid != 0
    # The metadata changes under the open cursor: it now owns every document.
    hc.move_upper_chunk_here()
    assert db.command("count", "c", shardVersion=hc.sv(2, 0))["n"] == 10
    rest = db.command("getMore", cid, collection="c", batchSize=100)["cursor"]["nextBatch"]
    assert [d["x"] for d in rest] == [-3, -2, -1]


def test_database_version(hc):
    db = hc.sc.test
    db.u.insert_one({"_id": 1})
    r = db.command("find", "u", shardVersion=UNSHARDED, databaseVersion=hc.db_version)
    assert r["cursor"]["firstBatch"] == [{"_id": 1}]
    r = db.command("insert", "u", documents=[{"_id": 2}], shardVersion=UNSHARDED,
                   databaseVersion=hc.db_version)
    assert r["n"] == 1

    newer = dict(hc.db_version, lastMod=2)
    with pytest.raises(OperationFailure) as e:
        db.command("find", "u", shardVersion=UNSHARDED, databaseVersion=newer)
    code, info = _stale(e)
    assert code == 249 and info["codeName"] == "StaleDbVersion"
    assert info["db"] == "test"
    assert info["vReceived"]["lastMod"] == 2
    assert info["vWanted"]["lastMod"] == 1
    assert info["vWanted"]["timestamp"] == hc.db_version["timestamp"]

    # The database's primary moves away: this shard is no longer the one to ask.
    hc.cfgc.config.databases.update_one(
        {"_id": "test"}, {"$set": {"primary": "shard1", "version.lastMod": 2}})
    with pytest.raises(OperationFailure) as e:
        db.command("find", "u", shardVersion=UNSHARDED, databaseVersion=newer)
    code, info = _stale(e)
    assert code == 249 and "vWanted" not in info
