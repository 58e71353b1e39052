"""The balancer (issue 16; docs/design/balancer.md): a background service of the config server
that, once balancerStart turns it on, spreads a collection's chunks evenly over the shards by
itself, gives a new shard its share, drains a shard being removed so that removeShard
completes, honours balancerStop and noBalance, and records its rounds in config.actionlog.
Rounds run every 200 ms here (the config server's overrideBalanceRoundInterval fail point)."""

import time

import pytest

from shale_fixtures import (Background, ShaleProcess, config_db, fail_point, hang, logged,
                            module_cluster, wait_until)

BALANCE_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def cluster(request):
    with module_cluster(request, shards=2) as c:
        fail_point(c.config_client(), "overrideBalanceRoundInterval", "alwaysOn",
                   {"intervalMs": 200})
        # Migrations delete the donor's copy before they end (MongoDB's balancer setting), so a
        # chunk may come back to a shard at once (otherwise the recipient waits for the
        # orphans' deletion, orphanCleanupDelaySecs later).
        # These tests exercise the seeds' chunk-count policy on small collections (the default,
        # MongoDB 7.0's data-size policy, never moves a collection under three chunk sizes: see
        # test_autosplit.py), and start the balancer themselves.
        config_db(c).settings.update_one(
            {"_id": "balancer"}, {"$set": {"_waitForDelete": True, "policy": "chunkCount"}})
        c.router_client().admin.command("balancerStop")
        yield c


def chunk_counts(cluster, ns):
    """{shard: number of chunks} of 'ns' from config.chunks."""
    cfg = config_db(cluster)
    uuid = cfg.collections.find_one({"_id": ns})["uuid"]
    counts = {}
    for ch in cfg.chunks.find({"uuid": uuid}):
        counts[ch["shard"]] = counts.get(ch["shard"], 0) + 1
    return counts


def make_collection(cluster, db, coll, nchunks, primary="shard0", ndocs=None):
    """db.coll sharded on {x: 1} with 'nchunks' chunks on 'primary', 20 documents a chunk."""
    r = cluster.router_client()
    ns = "%s.%s" % (db, coll)
    r.admin.command("enableSharding", db, primaryShard=primary)
    r.admin.command("shardCollection", ns, key={"x": 1})
    ndocs = ndocs if ndocs is not None else nchunks * 20
    r[db][coll].insert_many([{"_id": i, "x": i, "pad": "p" * 100} for i in range(ndocs)])
    for k in range(1, nchunks):
        r.admin.command("split", ns, middle={"x": k * 20})
    assert chunk_counts(cluster, ns) == {primary: nchunks}
    return ns


def all_ids(cluster, db, coll):
    return sorted(d["_id"] for d in cluster.router_client()[db][coll].find({}, {"_id": 1}))


def test_spreads_evenly_and_logs_rounds(cluster):
    r = cluster.router_client()
    ns = make_collection(cluster, "bal1", "c", 8)
    before = r.admin.command("balancerStatus")["numBalancerRounds"]
    r.admin.command("balancerStart")
    try:
        wait_until(lambda: chunk_counts(cluster, ns) == {"shard0": 4, "shard1": 4},
                   timeout=BALANCE_TIMEOUT, what="8 chunks spread 4/4")
    finally:
        r.admin.command("balancerStop")
    st = r.admin.command("balancerStatus")
    assert st["mode"] == "off" and st["inBalancerRound"] is False
    assert st["numBalancerRounds"] > before
    # Every document is still there exactly once, read through the router.
    assert all_ids(cluster, "bal1", "c") == list(range(160))
    assert r.bal1.c.count_documents({}) == 160
    # The rounds are in config.actionlog as MongoDB writes them, the migrations in the changelog.
    cfg = config_db(cluster)
    rounds = list(cfg.actionlog.find({"what": "balancer.round"}))
    assert rounds, "no balancer.round in config.actionlog"
    assert all(d["shard"] == "config" and "executionTimeMillis" in d["details"] for d in rounds)
    assert sum(d["details"].get("chunksMoved", 0) for d in rounds) >= 4
    assert all(d["details"]["errorOccured"] is False for d in rounds)
    commits = cfg.changelog.count_documents({"what": "moveChunk.commit", "ns": ns,
                                             "details.to": "shard1"})
    assert commits == 4


def test_balancing_under_writes_and_reads(cluster):
    """Writers and readers through the router while the balancer moves chunks: every
    acknowledged insert and update is there exactly once afterwards."""
    r = cluster.router_client()
    ns = make_collection(cluster, "bal6", "c", 10)
    coll = r.bal6.c
    stop = []
    unmatched = []

    def write():
        n = 0
        while not stop:
            i = 1000 + n
            coll.insert_one({"_id": i, "x": n % 200, "pad": "w"})
            # By shard key (x == _id for the first 200 documents): one shard is targeted.
            res = coll.update_one({"x": n % 200, "_id": n % 200}, {"$inc": {"n": 1}})
            if res.matched_count != 1:
                unmatched.append((n % 200, res.raw_result))
            n += 1
        return n

    def read():
        seen = 0
        while not stop:
            assert coll.count_documents({"_id": {"$lt": 200}}) == 200
            seen += 1
        return seen

    w, rd = Background(write), Background(read)
    r.admin.command("balancerStart")
    try:
        wait_until(lambda: chunk_counts(cluster, ns) == {"shard0": 5, "shard1": 5},
                   timeout=BALANCE_TIMEOUT, what="10 chunks spread 5/5")
    finally:
        stop.append(True)
        r.admin.command("balancerStop")
        w.join(60)
        rd.join(60)
    assert w.error is None and rd.error is None, (w.error, rd.error)
    n = w.result
    assert n > 0 and rd.result > 0
    assert unmatched == []
    ids = all_ids(cluster, "bal6", "c")
    assert ids == list(range(200)) + list(range(1000, 1000 + n))
    # Each update landed exactly once: n updates over the 200 original documents.
    total = sum(d.get("n", 0) for d in coll.find({"_id": {"$lt": 200}}))
    assert total == n


def test_stop_and_no_balance_respected(cluster):
    r = cluster.router_client()
    r.admin.command("balancerStop")
    ns = make_collection(cluster, "bal2", "c", 6)
    # Stopped: rounds neither run nor move anything over many round intervals.
    rounds = r.admin.command("balancerStatus")["numBalancerRounds"]
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        assert chunk_counts(cluster, ns) == {"shard0": 6}
        time.sleep(0.1)
    assert r.admin.command("balancerStatus")["numBalancerRounds"] == rounds
    # noBalance: the balancer runs and evens out another collection, but leaves this one.
    config_db(cluster).collections.update_one({"_id": ns}, {"$set": {"noBalance": True}})
    other = make_collection(cluster, "bal2", "d", 4)
    r.admin.command("balancerStart")
    try:
        wait_until(lambda: chunk_counts(cluster, other) == {"shard0": 2, "shard1": 2},
                   timeout=BALANCE_TIMEOUT, what="the other collection balanced")
        assert chunk_counts(cluster, ns) == {"shard0": 6}
        config_db(cluster).collections.update_one({"_id": ns}, {"$unset": {"noBalance": 1}})
        wait_until(lambda: chunk_counts(cluster, ns) == {"shard0": 3, "shard1": 3},
                   timeout=BALANCE_TIMEOUT, what="balanced once noBalance is gone")
    finally:
        r.admin.command("balancerStop")
    assert all_ids(cluster, "bal2", "c") == list(range(120))


def test_active_window(cluster):
    """settings.balancer.activeWindow {start, stop} (the config server's local time): no
    round outside it, balancing inside it."""
    r = cluster.router_client()
    settings = config_db(cluster).settings
    ns = make_collection(cluster, "bal4", "c", 4)
    now = time.localtime()
    later = lambda h: "%02d:%02d" % ((now.tm_hour + h) % 24, now.tm_min)
    settings.update_one({"_id": "balancer"},
                        {"$set": {"activeWindow": {"start": later(2), "stop": later(3)}}})
    r.admin.command("balancerStart")
    try:
        rounds = r.admin.command("balancerStatus")["numBalancerRounds"]
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert chunk_counts(cluster, ns) == {"shard0": 4}
            time.sleep(0.1)
        st = r.admin.command("balancerStatus")
        assert st["mode"] == "full" and st["numBalancerRounds"] == rounds
        # A window around now (it spans midnight when now is late): balancing starts.
        settings.update_one({"_id": "balancer"},
                            {"$set": {"activeWindow": {"start": later(-1), "stop": later(1)}}})
        wait_until(lambda: chunk_counts(cluster, ns) == {"shard0": 2, "shard1": 2},
                   timeout=BALANCE_TIMEOUT, what="balanced inside the window")
    finally:
        settings.update_one({"_id": "balancer"}, {"$unset": {"activeWindow": 1}})
        r.admin.command("balancerStop")


def test_zones_enforced(cluster):
    """A zone range inside a chunk: the round splits the chunk at the zone's bounds, moves
    the zone's chunk to the zone's shard, then evens out the rest."""
    r = cluster.router_client()
    ns = make_collection(cluster, "bal5", "c", 2, ndocs=120)
    r.admin.command("addShardToZone", "shard1", zone="Z")
    r.admin.command("updateZoneKeyRange", ns, min={"x": 50}, max={"x": 90}, zone="Z")
    assert r.admin.command("balancerCollectionStatus", ns)["balancerCompliant"] is False
    cfg = config_db(cluster)
    uuid = cfg.collections.find_one({"_id": ns})["uuid"]

    def placed():
        chunks = {(c["min"]["x"], c["max"]["x"]): c["shard"]
                  for c in cfg.chunks.find({"uuid": uuid})}
        return chunks.get((50, 90)) == "shard1" and chunk_counts(cluster, ns) == {
            "shard0": 2, "shard1": 2}

    r.admin.command("balancerStart")
    try:
        wait_until(placed, timeout=BALANCE_TIMEOUT, what="the zone's chunk on shard1")
    finally:
        r.admin.command("balancerStop")
    assert r.admin.command("balancerCollectionStatus", ns)["balancerCompliant"] is True
    assert all_ids(cluster, "bal5", "c") == list(range(120))
    r.admin.command("updateZoneKeyRange", ns, min={"x": 50}, max={"x": 90}, zone=None)
    r.admin.command("removeShardFromZone", "shard1", zone="Z")


def test_new_shard_filled_then_removed(cluster):
    r = cluster.router_client()
    ns = make_collection(cluster, "bal3", "c", 9)
    extra = ShaleProcess(["node", "--shardsvr", "--replSet", "shard2"],
                         name="shard2", test_commands=True)
    try:
        extra.start()
        r.admin.command("addShard", "shard2/" + extra.host, name="shard2")
        r.admin.command("balancerStart")
        # A third shard receives its share without any manual step.
        wait_until(lambda: chunk_counts(cluster, ns) == {"shard0": 3, "shard1": 3, "shard2": 3},
                   timeout=BALANCE_TIMEOUT, what="9 chunks spread 3/3/3")
        assert all_ids(cluster, "bal3", "c") == list(range(180))

        # A database whose primary is the draining shard keeps removeShard ongoing until
        # movePrimary.
        r.admin.command("enableSharding", "bal3p", primaryShard="shard2")
        r.bal3p.u.insert_one({"_id": 1})
        topo_before = max(s.get("topologyTime") for s in config_db(cluster).shards.find())
        res = r.admin.command("removeShard", "shard2")
        assert res["state"] == "started" and res["dbsToMove"] == ["bal3p"]

        def drained():
            res = r.admin.command("removeShard", "shard2")
            assert res["state"] == "ongoing", res
            assert set(res["remaining"]) >= {"chunks", "dbs", "jumboChunks"}
            assert res["remaining"]["dbs"] == 1 and res["dbsToMove"] == ["bal3p"]
            return res["remaining"]["chunks"] == 0

        wait_until(drained, timeout=BALANCE_TIMEOUT, what="shard2 drained")
        counts = chunk_counts(cluster, ns)
        assert "shard2" not in counts and sum(counts.values()) == 9
        assert abs(counts["shard0"] - counts["shard1"]) <= 1
        r.admin.command("movePrimary", "bal3p", to="shard0")
        res = r.admin.command("removeShard", "shard2")
        assert res["state"] == "completed", res
        assert "shard2" not in {s["_id"] for s in r.admin.command("listShards")["shards"]}
        topo_after = max(s.get("topologyTime") for s in config_db(cluster).shards.find())
        assert topo_after > topo_before
        assert all_ids(cluster, "bal3", "c") == list(range(180))
        assert r.bal3p.u.find_one({"_id": 1}) == {"_id": 1}
    finally:
        r.admin.command("balancerStop")
        extra.stop()
        extra.cleanup()


def test_shard_down_is_skipped(cluster):
    """A shard that is down takes no part in rounds (no migration to it is tried, so none
    fails), and balancing resumes once it is back."""
    r = cluster.router_client()
    ns = make_collection(cluster, "bal7", "c", 4)
    cluster.shards[1].kill()
    r.admin.command("balancerStart")
    try:
        rounds = r.admin.command("balancerStatus")["numBalancerRounds"]
        wait_until(lambda: r.admin.command("balancerStatus")["numBalancerRounds"] >= rounds + 3,
                   timeout=BALANCE_TIMEOUT, what="three rounds with shard1 down")
        assert logged(cluster.config, 4200510, shard="shard1")
        assert not logged(cluster.config, 4200504, ns=ns)
        assert chunk_counts(cluster, ns) == {"shard0": 4}
        cluster.restart_shard(1)
        wait_until(lambda: chunk_counts(cluster, ns) == {"shard0": 2, "shard1": 2},
                   timeout=BALANCE_TIMEOUT, what="balanced once shard1 is back")
    finally:
        r.admin.command("balancerStop")
    assert all_ids(cluster, "bal7", "c") == list(range(80))


def test_config_server_killed_mid_round(cluster):
    """kill -9 of the config server while a balancer migration is in flight: after the
    restart the catalog is consistent, the balancer (its setting persisted) resumes and
    finishes, and no document is lost or doubled."""
    r = cluster.router_client()
    ns = make_collection(cluster, "bal8", "c", 6)
    donor = cluster.shard_client(0)
    wait = hang(donor, "moveChunkHangAtStep3")
    r.admin.command("balancerStart")
    try:
        wait()
        cluster.config.kill()
        fail_point(donor, "moveChunkHangAtStep3", "off")
        cluster.config.start()
        fail_point(cluster.config_client(), "overrideBalanceRoundInterval", "alwaysOn",
                   {"intervalMs": 200})
        assert r.admin.command("balancerStatus")["mode"] == "full"
        wait_until(lambda: chunk_counts(cluster, ns) == {"shard0": 3, "shard1": 3},
                   timeout=BALANCE_TIMEOUT, what="balanced after the config server restart")
    finally:
        fail_point(donor, "moveChunkHangAtStep3", "off")
        r.admin.command("balancerStop")
    assert r.admin.command("balancerStatus")["numBalancerRounds"] >= 1
    assert all_ids(cluster, "bal8", "c") == list(range(120))
    assert r.bal8.c.count_documents({}) == 120


def test_collection_status_counts_owned_data_not_orphans(cluster):
    """balancerCollectionStatus judges imbalance on the data each shard owns, as the balancer
    does: a donor's orphans (left until its range deleter gets to them; held here) are not its
    data. 8 MB with chunkSize 1 MB, half moved to shard1:
    compliant, though shard0's collStats still counts all 8 MB."""
    r = cluster.router_client()
    ns = "bal9.c"
    r.admin.command("enableSharding", "bal9", primaryShard="shard0")
    # The data goes in before the collection is sharded, so the auto-splitter (which counts
    # writes to a sharded collection's chunks) leaves the eight 1024-document chunks alone.
    pad = "p" * 1000
    r.bal9.c.insert_many([{"_id": i, "x": i, "pad": pad} for i in range(8192)])
    r.bal9.c.create_index("x")
    r.admin.command("shardCollection", ns, key={"x": 1})
    r.admin.command("configureCollectionBalancing", ns, chunkSize=1)
    for k in range(1, 8):
        r.admin.command("split", ns, middle={"x": k * 1024})
    assert r.admin.command("balancerCollectionStatus", ns)["balancerCompliant"] is False
    # The donor keeps its orphans while its range deleter is held.
    fail_point(cluster.shard_client(0), "suspendRangeDeletion", "alwaysOn")
    try:
        for k in range(4, 8):
            r.admin.command("moveChunk", ns, find={"x": k * 1024}, to="shard1")
        # The donor counts its orphans once the range deletion tasks are registered.
        wait_until(lambda: cluster.shard_client(0).bal9.command("collStats", "c")[
            "numOrphanDocs"] == 4096, what="the donor's 4096 orphans counted")
        assert cluster.shard_client(0).bal9.command("collStats", "c")["count"] == 8192
        st = r.admin.command("balancerCollectionStatus", ns)
        assert st["balancerCompliant"] is True, st
    finally:
        fail_point(cluster.shard_client(0), "suspendRangeDeletion", "off")
