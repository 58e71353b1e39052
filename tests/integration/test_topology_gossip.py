"""Vector clock gossip (DESIGN.md section 7): the config server's replies to cluster
processes carry $configTime and $topologyTime; a router that sees TopologyTime advance reloads
its shard registry at once instead of trusting it for 30 s."""

import pytest

import wire_util
from shale_fixtures import ShaleProcess


def test_config_server_replies_carry_config_and_topology_time(cluster):
    cfg = cluster.config_client()
    s = wire_util.connect(cluster.config.port)
    try:
        # As a cluster process: hello says internalClient (clients see $clusterTime only).
        wire_util.command(s, {"hello": 1, "$db": "admin",
                              "internalClient": {"minWireVersion": 0, "maxWireVersion": 21}})
        reply = wire_util.command(s, {"ping": 1, "$db": "admin"})
    finally:
        s.close()
    assert "$configTime" in reply and "$topologyTime" in reply
    assert reply["$configTime"] >= reply["$topologyTime"]
    shards = list(cfg.config.shards.find())
    assert reply["$topologyTime"] == max(s["topologyTime"] for s in shards)


def test_stale_router_follows_a_shard_replaced_under_the_same_name(cluster, shale_process):
    r1 = cluster.router_client()
    r2 = cluster.add_router().client()
    old = shale_process(["node", "--shardsvr", "--replSet", "shardX"], name="shardX-old")
    r1.admin.command("addShard", "shardX/" + old.host, name="shardX")
    r1.admin.command("enableSharding", "gossip1", primaryShard="shardX")
    r2.gossip1.c.insert_one({"_id": 1})  # r2's registry now maps shardX -> old
    assert old.client().gossip1.c.count_documents({}) == 1
    # Empty shardX and remove it, then add another process under the same name.
    r1.gossip1.command("dropDatabase")
    assert r1.admin.command("removeShard", "shardX")["state"] == "started"
    assert r1.admin.command("removeShard", "shardX")["state"] == "completed"
    old.stop()
    new = shale_process(["node", "--shardsvr", "--replSet", "shardX"], name="shardX-new")
    r1.admin.command("addShard", "shardX/" + new.host, name="shardX")
    r1.admin.command("enableSharding", "gossip2", primaryShard="shardX")
    # r2 loaded its registry moments ago; the $topologyTime on the config server's replies
    # (r2 reads config.databases for gossip2) tells it the shards changed.
    r2.gossip2.c.insert_one({"_id": 2})
    assert new.client().gossip2.c.count_documents({}) == 1
    r1.gossip2.command("dropDatabase")
    r1.admin.command("removeShard", "shardX")
    r1.admin.command("removeShard", "shardX")
