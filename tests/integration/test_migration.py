

def test_internal_migration_commands_reject_bad_input(mc):
    shard, cfg = mc.shard_client(2), mc.config_client()
    uuid = bson.binary.Binary(b"\x01" * 16, 4)
    bad_shard = [
        {"_shardsvrMoveRange": "mig.x"},
        {"_shardsvrMoveRange": 5, "toShard": "shard1", "min": {}, "max": {}},
        {"_shardsvrMoveRange": "mig.x", "toShard": "shard1", "min": 1, "max": {}},
        {"_shardsvrMoveRange": "mig.x", "toShard": "shard1", "min": {"x": 0}, "max": {"x": 1}},
        {"_migrateClone": "mig.x"},
        {"_migrateClone": "mig.x", "sessionId": "nope"},
        {"_transferMods": "mig.x", "sessionId": 3},
        {"_recvChunkStart": "mig.x"},
        {"_recvChunkStart": "mig.x", "sessionId": "s", "fromShardName": "shard0",
         "toShardName": "shard2", "min": {"x": 0}, "max": {"x": 1},
         "shardKeyPattern": {"x": 1}, "migrationId": "not a uuid", "uuid": uuid},
        {"_recvChunkStart": "mig.x", "sessionId": "s", "fromShardName": "shard0",
         "toShardName": "shard2", "min": {"x": 0}, "max": {"x": 1},
         "shardKeyPattern": {"x": "bogus"}, "migrationId": uuid, "uuid": uuid},
        {"_recvChunkCommit": "mig.x", "sessionId": "nope"},
        {"_recvChunkAbort": "mig.x", "migrationId": 7},
    ]
    for cmd in bad_shard:
        with pytest.raises(OperationFailure):
            shard.admin.command(bson.SON(cmd))
    assert shard.admin.command("_recvChunkStatus", "mig.x")["ok"] == 1
    bad_config = [
        {"_configsvrMoveRange": "mig.x", "toShard": "shard1", "min": {"x": 0}},
        {"_configsvrMoveRange": "mig.basic"},
        {"_configsvrMoveRange": "mig.basic", "toShard": "shard1"},
        {"_configsvrMoveRange": "mig.basic", "toShard": "shard1", "min": {"y": 0}},
        {"_configsvrMoveRange": "mig.basic", "toShard": "shard1", "bounds": [{"x": 0}]},
        {"_configsvrMoveRange": "mig.basic", "toShard": "shard1", "find": {"x": 1},
         "min": {"x": 0}},
        {"_configsvrCommitChunkMigration": "mig.basic"},
        {"_configsvrCommitChunkMigration": "mig.basic", "fromShard": "shard0",
         "toShard": "shard1", "migratedChunk": {"min": {"x": 0}}},
        {"_configsvrCommitChunkMigration": "mig.basic", "fromShard": "shard0",
         "toShard": "shard1", "migratedChunk": {"min": {"x": 7}, "max": {"x": 8}}},
    ]
    for cmd in bad_config:
        with pytest.raises(OperationFailure):
            cfg.admin.command(bson.SON(cmd))
    r = mc.router_client()
    for cmd in [{"moveChunk": "mig.basic", "find": {"x": 1}},
                {"moveChunk": "mig.basic", "find": {"x": 1}, "to": 5},
                {"moveChunk": "mig.basic", "find": {"x": 1}, "bounds": [{}, {}], "to": "s"},
                {"moveChunk": "mig.basic", "find": {"x": 1}, "to": "shard1", "bogus": 1},
                {"moveRange": "mig.basic", "toShard": "shard1"},
                {"moveRange": "nodot", "min": {"x": 1}, "toShard": "shard1"}]:
        with pytest.raises(OperationFailure):
            r.admin.command(bson.SON(cmd))
    # Everything still works.
    assert r.mig.basic.count_documents({}) == N
