"""Large insert batches through the router (issue 23: found by the scale suite's loads): a
driver sends up to 48 MB of documents in one OP_MSG; the router splits what each shard gets
into commands within the 16 MiB (+16 KiB) internal limit, as mongos does, so the whole batch
is inserted."""

from scale_util import KB_DOC_SIZE, RECORDER, kb_doc

N_UNSHARDED = 20_000  # 20 MB of 1 KB documents in one insert_many: one shard gets them all
N_SHARDED = 40_000    # 40 MB, split between two shards: 20 MB each


def test_insert_many_of_20mb_and_40mb_through_the_router(scale_cluster):
    c = scale_cluster
    r = c.router_client(socketTimeoutMS=0)
    r.admin.command("enableSharding", "scale_w", primaryShard="shard0")
    r.admin.command("shardCollection", "scale_w.sh", key={"_id": 1})
    r.admin.command("split", "scale_w.sh", middle={"_id": N_SHARDED // 2})
    r.admin.command("moveChunk", "scale_w.sh", find={"_id": N_SHARDED // 2}, to="shard1")
    name = "test_insert_many_of_20mb_and_40mb_through_the_router"
    with RECORDER.phase(name, "insert_many 20,000 x 1 KB, unsharded"):
        res = r.scale_w.plain.insert_many([kb_doc(i, 100) for i in range(N_UNSHARDED)])
    assert len(res.inserted_ids) == N_UNSHARDED
    assert r.scale_w.plain.count_documents({}) == N_UNSHARDED
    assert r.scale_w.command("collStats", "plain")["size"] == N_UNSHARDED * KB_DOC_SIZE
    with RECORDER.phase(name, "insert_many 40,000 x 1 KB, sharded over 2 shards"):
        res = r.scale_w.sh.insert_many([kb_doc(i, 100) for i in range(N_SHARDED)],
                                       ordered=False)
    assert len(res.inserted_ids) == N_SHARDED
    for i in (0, 1):
        assert c.shard_client(i).scale_w.sh.count_documents({}) == N_SHARDED // 2
