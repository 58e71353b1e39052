"""The `cluster` fixture (ShaleCluster, like MongoDB's ShardingTest): what it starts is
what tests of the sharded cluster build on."""


def test_router_sees_the_shards(cluster):
    admin = cluster.router_client().admin
    assert admin.command("hello")["msg"] == "isdbgrid"
    shards = {s["_id"]: s["host"] for s in admin.command("listShards")["shards"]}
    assert shards == {"shard0": cluster.shard_conn_string(0),
                      "shard1": cluster.shard_conn_string(1)}


def test_each_process_runs_its_role(cluster):
    cfg = cluster.config_client().admin.command("hello")
    assert cfg["setName"] == "csrs" and cfg["isWritablePrimary"]
    for i in range(2):
        h = cluster.shard_client(i).admin.command("hello")
        assert h["setName"] == "shard%d" % i and h["isWritablePrimary"]
        # addShard gave each shard its identity (sharding-protocol.md).
        ident = cluster.shard_client(i).admin["system.version"].find_one({"_id": "shardIdentity"})
        assert ident["shardName"] == "shard%d" % i
        assert ident["configsvrConnectionString"] == cluster.configdb


def test_second_router(cluster):
    r = cluster.add_router()
    assert r is cluster.routers[1]
    admin = cluster.router_client(1).admin
    assert admin.command("hello")["msg"] == "isdbgrid"
    assert sorted(s["_id"] for s in admin.command("listShards")["shards"]) == ["shard0", "shard1"]
