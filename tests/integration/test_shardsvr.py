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
