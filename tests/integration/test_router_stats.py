"""Statistics and cluster information through the router, in mongos's shapes: dbStats
(summed over every shard, raw per shard), collStats (sharded: summed and per shard, with
nchunks; unsharded: the primary's), getShardMap, balancerStatus / balancerStart /
balancerStop. Each sum is checked against what the shards themselves answer."""

import pytest
from pymongo.errors import OperationFailure

from shale_fixtures import fail_point, wait_until

N = 1000


@pytest.fixture(scope="module")
def stats(cluster):
    """db 'st' (primary shard0): 'sh' sharded on {x: 1} and split at 500, [500, max) moved to
    shard1; 'plain' unsharded with an index; and 'st2' with nothing in it."""
    r = cluster.router_client()
    for i in range(2):  # the range deleter removes a donor's copies without waiting
        cluster.shard_client(i).admin.command("setParameter", 1, orphanCleanupDelaySecs=0)
    r.admin.command("enableSharding", "st", primaryShard="shard0")
    r.admin.command("shardCollection", "st.sh", key={"x": 1})
    r.st.sh.insert_many([{"_id": i, "x": i, "pad": "p" * (i % 50)} for i in range(N)])
    r.st.sh.create_index("pad")
    r.admin.command("split", "st.sh", middle={"x": 500})
    r.admin.command("moveChunk", "st.sh", find={"x": 700}, to="shard1", _waitForDelete=True)
    r.st.plain.insert_many([{"_id": i, "v": i} for i in range(300)])
    r.st.plain.create_index("v")
    return cluster


def _direct(cluster, i, db, *cmd, **kw):
    return cluster.shard_client(i)[db].command(*cmd, **kw)


# ---- dbStats ----


def test_db_stats_sums_every_shard(stats):
    r = stats.router_client()
    res = r.st.command("dbStats")
    per = [_direct(stats, i, "st", "dbStats") for i in range(2)]
    assert res["ok"] == 1
    assert res["db"] == "st"
    for f in ("collections", "views", "objects", "dataSize", "storageSize", "totalSize",
              "indexes", "indexSize"):
        assert res[f] == sum(p[f] for p in per), f
    assert res["objects"] == N + 300
    # shard0 holds st.sh and st.plain, shard1 st.sh: three collections in all.
    assert res["collections"] == 3
    assert res["scaleFactor"] == 1
    # Every shard reports its dbpath's file system; the router sums them.
    assert res["fsTotalSize"] == sum(p["fsTotalSize"] for p in per) > 0
    expected_avg = sum(p["avgObjSize"] * p["objects"] for p in per) / res["objects"]
    assert abs(res["avgObjSize"] - expected_avg) < 1e-6
    # raw: one entry per shard, keyed by its connection string, holding its own reply.
    assert set(res["raw"]) == {stats.shard_conn_string(0), stats.shard_conn_string(1)}
    for i in range(2):
        one = res["raw"][stats.shard_conn_string(i)]
        assert one["ok"] == 1
        assert one["objects"] == per[i]["objects"]


def test_db_stats_scale(stats):
    r = stats.router_client()
    res = r.st.command("dbStats", scale=1024)
    per = [_direct(stats, i, "st", "dbStats", scale=1024) for i in range(2)]
    assert res["scaleFactor"] == 1024
    for f in ("dataSize", "storageSize", "indexSize", "totalSize"):
        assert res[f] == sum(p[f] for p in per), f
    # avgObjSize is never scaled.
    assert res["avgObjSize"] == pytest.approx(r.st.command("dbStats")["avgObjSize"])
    # A fractional scale is truncated, as MongoDB does.
    assert r.st.command("dbStats", scale=1023.999)["scaleFactor"] == 1023


def test_db_stats_free_storage_accepted(stats):
    res = stats.router_client().st.command("dbStats", freeStorage=1)
    assert res["ok"] == 1 and res["objects"] == N + 300


def test_db_stats_of_a_missing_database_is_zero(stats):
    res = stats.router_client().nosuchdb.command("dbStats")
    assert res["ok"] == 1 and res["db"] == "nosuchdb"
    assert res["collections"] == 0 and res["objects"] == 0 and res["dataSize"] == 0
    assert res["avgObjSize"] == 0
    assert len(res["raw"]) == 2


@pytest.mark.parametrize("scale", [0, -1, 0.5])
def test_db_stats_bad_scale(stats, scale):
    with pytest.raises(OperationFailure) as e:
        stats.router_client().st.command("dbStats", scale=scale)
    assert e.value.code == 2  # BadValue
    assert "Scale must be greater than zero" in str(e.value)


def test_db_stats_scale_wrong_type(stats):
    with pytest.raises(OperationFailure) as e:
        stats.router_client().st.command("dbStats", scale="big")
    assert e.value.code == 14  # TypeMismatch


# ---- collStats ----


def test_coll_stats_sharded_counts_every_document_once(stats):
    r = stats.router_client()
    res = r.st.command("collStats", "sh")
    per = {"shard%d" % i: _direct(stats, i, "st", "collStats", "sh") for i in range(2)}
    assert res["ok"] == 1
    assert res["sharded"] is True and "primary" not in res
    assert res["ns"] == "st.sh"
    assert res["count"] == N
    assert {k: v["count"] for k, v in per.items()} == {"shard0": 500, "shard1": 500}
    for f in ("size", "storageSize", "totalIndexSize", "totalSize"):
        assert res[f] == sum(p[f] for p in per.values()), f
    assert res["nindexes"] == 3  # _id, x (the shard key), pad
    assert set(res["indexSizes"]) == {"_id_", "x_1", "pad_1"}
    for name, size in res["indexSizes"].items():
        assert size == sum(p["indexSizes"][name] for p in per.values())
    assert res["totalIndexSize"] == sum(res["indexSizes"].values())
    assert res["avgObjSize"] == pytest.approx(
        sum(p["avgObjSize"] * p["count"] for p in per.values()) / N)
    assert res["nchunks"] == 2
    assert res["scaleFactor"] == 1
    assert set(res["shards"]) == {"shard0", "shard1"}
    for name, p in per.items():
        assert res["shards"][name]["count"] == p["count"]
        assert res["shards"][name]["size"] == p["size"]
        assert res["shards"][name]["ns"] == "st.sh"


def test_coll_stats_counts_orphans_as_mongos_does(stats):
    """mongos sums the shards' record counts, so documents a donor still holds after a
    migration (orphans waiting for the range deleter) are counted until they are deleted."""
    r = stats.router_client()
    r.admin.command("shardCollection", "st.orph", key={"x": 1})
    r.st.orph.insert_many([{"_id": i, "x": i} for i in range(200)])
    r.admin.command("split", "st.orph", middle={"x": 150})
    donor = stats.shard_client(0)
    fail_point(donor, "suspendRangeDeletion", "alwaysOn")
    try:
        r.admin.command("moveChunk", "st.orph", find={"x": 160}, to="shard1")
        res = r.st.command("collStats", "orph")
        assert res["count"] == 200 + 50
        assert res["shards"]["shard0"]["count"] == 200
        assert res["shards"]["shard1"]["count"] == 50
        assert r.st.orph.count_documents({}) == 200  # reads filter the orphans out
        # The donor reports them as orphans (its range deletion task's count), as does
        # $collStats, which mongosh's getShardDistribution reads.
        assert res["shards"]["shard0"]["numOrphanDocs"] == 50
        assert res["shards"]["shard1"]["numOrphanDocs"] == 0
        assert res["numOrphanDocs"] == 50
        per = {d["shard"]: d["storageStats"]
               for d in r.st.orph.aggregate([{"$collStats": {"storageStats": {}}}])}
        assert per["shard0"]["numOrphanDocs"] == 50 and per["shard0"]["count"] == 200
        assert per["shard1"]["numOrphanDocs"] == 0
    finally:
        fail_point(donor, "suspendRangeDeletion", "off")
    wait_until(lambda: r.st.command("collStats", "orph")["count"] == 200,
               what="the donor's orphans to be deleted")
    assert r.st.command("collStats", "orph")["numOrphanDocs"] == 0


def test_coll_stats_scale(stats):
    r = stats.router_client()
    raw = r.st.command("collStats", "sh")
    res = r.st.command("collStats", "sh", scale=1024)
    assert res["scaleFactor"] == 1024
    # The router sums the unscaled sizes, then scales once.
    for f in ("size", "storageSize", "totalIndexSize", "totalSize"):
        assert res[f] == raw[f] // 1024, f
    for name, size in raw["indexSizes"].items():
        assert res["indexSizes"][name] == size // 1024
    assert res["count"] == raw["count"]
    assert res["avgObjSize"] == pytest.approx(raw["avgObjSize"])
    for name in ("shard0", "shard1"):
        assert res["shards"][name]["scaleFactor"] == 1024
        assert res["shards"][name]["size"] == raw["shards"][name]["size"] // 1024


def test_coll_stats_unsharded_goes_to_the_primary(stats):
    r = stats.router_client()
    res = r.st.command("collStats", "plain")
    direct = _direct(stats, 0, "st", "collStats", "plain")
    assert res["sharded"] is False
    assert res["primary"] == "shard0"
    assert res["ns"] == "st.plain"
    assert res["count"] == 300 == direct["count"]
    assert res["size"] == direct["size"]
    assert res["nindexes"] == 2
    assert set(res["indexSizes"]) == {"_id_", "v_1"}
    assert res["nchunks"] == 1
    assert list(res["shards"]) == ["shard0"]


def test_coll_stats_of_a_config_collection(stats):
    """config.* lives on the config server: unsharded, its primary is "config"."""
    res = stats.router_client().config.command("collStats", "shards")
    assert res["sharded"] is False and res["primary"] == "config"
    assert res["count"] == 2
    assert list(res["shards"]) == ["config"]
    # Each shard's entry is its statistics, without the gossip of its reply.
    assert not [k for k in res["shards"]["config"] if k.startswith("$")]
    assert "operationTime" not in res["shards"]["config"]


def test_coll_stats_missing_collection(stats):
    r = stats.router_client()
    with pytest.raises(OperationFailure) as e:
        r.st.command("collStats", "nothere")
    assert e.value.code == 26  # NamespaceNotFound
    with pytest.raises(OperationFailure) as e:
        r.nosuchdb2.command("collStats", "nothere")
    assert e.value.code == 26


@pytest.mark.parametrize("scale,code", [(0, 4390200), (-5, 4390200), (0.5, 4390200),
                                        ("x", 4390201), (True, 4390201)])
def test_coll_stats_bad_scale(stats, scale, code):
    with pytest.raises(OperationFailure) as e:
        stats.router_client().st.command("collStats", "sh", scale=scale)
    assert e.value.code == code


def test_coll_stats_false_scale_means_one(stats):
    res = stats.router_client().st.command("collStats", "sh", scale=False)
    assert res["scaleFactor"] == 1


def test_mongosh_style_helpers(stats):
    """What db.coll.stats() and db.stats() rely on, via pymongo's runCommand forms."""
    r = stats.router_client()
    assert r.st.command({"collstats": "plain"})["count"] == 300
    assert r.st.command({"dbstats": 1})["db"] == "st"


# ---- getShardMap ----


def test_get_shard_map(stats):
    r = stats.router_client()
    res = r.admin.command("getShardMap")
    cs0, cs1 = stats.shard_conn_string(0), stats.shard_conn_string(1)
    assert res["map"] == {"shard0": cs0, "shard1": cs1, "config": stats.configdb}
    assert res["hosts"] == {stats.shards[0].host: "shard0", stats.shards[1].host: "shard1",
                            stats.config.host: "config"}
    assert res["connStrings"] == {cs0: "shard0", cs1: "shard1", stats.configdb: "config"}
    with pytest.raises(OperationFailure) as e:
        r.st.command("getShardMap")
    assert e.value.code == 13  # Unauthorized: admin only


# ---- balancer ----


def test_balancer_status_start_stop(stats):
    r = stats.router_client()
    settings = stats.config_client().config.settings
    # A new cluster's balancer is on (MongoDB's default, docs/design/balancer.md), where
    # mongosh's sh.status() and sh.getBalancerState() look, consistent with balancerStatus.
    doc = settings.find_one({"_id": "balancer"})
    assert doc["mode"] == "full" and doc["stopped"] is False
    assert r.admin.command("balancerStatus")["mode"] == "full"
    # With no setting at all the balancer is on, MongoDB's default.
    settings.delete_one({"_id": "balancer"})
    assert r.admin.command("balancerStatus")["mode"] == "full"
    r.admin.command("balancerStop")
    rounds = r.admin.command("balancerStatus")["numBalancerRounds"]
    r.admin.command("balancerStart")
    doc = settings.find_one({"_id": "balancer"})
    assert doc["mode"] == "full" and doc["stopped"] is False
    assert r.admin.command("balancerStatus")["mode"] == "full"
    # balancerStart starts a round at once; the config server counts it.
    wait_until(lambda: r.admin.command("balancerStatus")["numBalancerRounds"] > rounds,
               what="a balancer round")
    r.admin.command("balancerStop")
    doc = settings.find_one({"_id": "balancer"})
    assert doc["mode"] == "off" and doc["stopped"] is True
    # balancerStop answers once the round in progress has ended.
    st = r.admin.command("balancerStatus")
    assert st["mode"] == "off" and st["inBalancerRound"] is False
    # The legacy form sh.stopBalancer() used to write: stopped only.
    settings.replace_one({"_id": "balancer"}, {"_id": "balancer", "stopped": False})
    assert r.admin.command("balancerStatus")["mode"] == "full"
    r.admin.command("balancerStop")
    with pytest.raises(OperationFailure) as e:
        r.st.command("balancerStatus")
    assert e.value.code == 13


def test_sharded_data_distribution(stats):
    """$shardedDataDistribution (what mongosh's sh.status() shows): per sharded collection
    and shard, owned and orphaned documents and bytes; later stages run on its output."""
    r = stats.router_client()
    r.admin.command("shardCollection", "st.dist", key={"x": 1})
    r.st.dist.insert_many([{"_id": i, "x": i, "pad": "p" * 50} for i in range(100)])
    r.admin.command("split", "st.dist", middle={"x": 60})
    donor = stats.shard_client(0)
    fail_point(donor, "suspendRangeDeletion", "alwaysOn")
    try:
        r.admin.command("moveChunk", "st.dist", find={"x": 70}, to="shard1")
        got = list(r.admin.aggregate([{"$shardedDataDistribution": {}},
                                      {"$match": {"ns": "st.dist"}}]))
        assert len(got) == 1 and got[0]["ns"] == "st.dist"
        per = {s["shardName"]: s for s in got[0]["shards"]}
        assert per["shard0"]["numOwnedDocuments"] == 60
        assert per["shard0"]["numOrphanedDocs"] == 40
        assert per["shard1"]["numOwnedDocuments"] == 40
        assert per["shard1"]["numOrphanedDocs"] == 0
        assert per["shard0"]["ownedSizeBytes"] > 0 and per["shard0"]["orphanedSizeBytes"] > 0
        assert per["shard1"]["orphanedSizeBytes"] == 0
    finally:
        fail_point(donor, "suspendRangeDeletion", "off")
    # Every sharded collection appears (st.sh from the fixture too).
    names = {d["ns"] for d in r.admin.aggregate([{"$shardedDataDistribution": {}}])}
    assert {"st.dist", "st.sh"} <= names
    with pytest.raises(OperationFailure) as e:
        list(r.st.aggregate([{"$shardedDataDistribution": {}}]))
    assert e.value.code == 73
    with pytest.raises(OperationFailure) as e:
        list(r.admin.aggregate([{"$shardedDataDistribution": {"x": 1}}]))
    assert e.value.code == 40415
