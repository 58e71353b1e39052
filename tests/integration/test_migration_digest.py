"""Checksum-verified migrations (issue 16 item 5, beyond MongoDB): in the critical section,
before the commit, donor and recipient each compute an order-independent digest of the range
(count, sum and xor of per-document hashes); a mismatch aborts the migration with
DataCorruptionDetected and both digests logged (id 4200220), the data stays on the donor;
a match is recorded in the moveChunk.commit changelog entry (details.rangeDigest). The
recipient's fail point migrationCorruptDigest forces a mismatch."""

import pytest

from shale_fixtures import config_db, error_code, fail_point, logged, module_cluster, wait_until

N = 2000


@pytest.fixture(scope="module")
def mc(request):
    with module_cluster(request, shards=2,
                        shard_extra=["--setParameter", "orphanCleanupDelaySecs=0"]) as c:
        c.router_client().admin.command("balancerStop")
        yield c


def _setup(c, name):
    r = c.router_client()
    ns = "dig." + name
    r.admin.command("enableSharding", "dig", primaryShard="shard0")
    r.admin.command("shardCollection", ns, key={"x": 1})
    r.admin.command("split", ns, middle={"x": N // 2})
    r.dig[name].insert_many([{"_id": i, "x": i, "pad": "p" * 40} for i in range(N)])
    return r, ns


def _owner(c, ns, x):
    cfg = config_db(c)
    uuid = cfg.collections.find_one({"_id": ns})["uuid"]
    for ch in cfg.chunks.find({"uuid": uuid}):
        lo, hi = ch["min"]["x"], ch["max"]["x"]
        if (not isinstance(lo, int) or lo <= x) and (not isinstance(hi, int) or x < hi):
            return ch["shard"]
    raise AssertionError("no chunk holds x=%r" % x)


def test_matching_digest_recorded_in_changelog(mc):
    r, ns = _setup(mc, "ok")
    r.admin.command("moveChunk", ns, find={"x": N // 2}, to="shard1", _waitForDelete=True)
    assert _owner(mc, ns, N // 2) == "shard1"
    entry = config_db(mc).changelog.find_one({"what": "moveChunk.commit", "ns": ns})
    dg = entry["details"]["rangeDigest"]
    assert dg["count"] == N // 2
    assert isinstance(dg["sum"], int) and isinstance(dg["xor"], int) and dg["sum"] != 0
    assert logged(mc.shards[0], 4200221, ns=ns)
    assert r.dig.ok.count_documents({}) == N
    assert mc.shard_client(1).dig.ok.count_documents({}) == N // 2
    assert mc.shard_client(0).dig.ok.count_documents({}) == N // 2


def test_forced_mismatch_aborts_and_later_migration_succeeds(mc):
    r, ns = _setup(mc, "bad")
    # Writes during the migration are covered too: one update lands before the move.
    r.dig.bad.update_one({"x": N - 1}, {"$set": {"pad": "changed"}})
    fail_point(mc.shard_client(1), "migrationCorruptDigest", "alwaysOn")
    try:
        code = error_code(lambda: r.admin.command("moveChunk", ns, find={"x": N // 2},
                                                  to="shard1", _waitForDelete=True))
    finally:
        fail_point(mc.shard_client(1), "migrationCorruptDigest", "off")
    assert code == 301  # DataCorruptionDetected
    assert logged(mc.shards[0], 4200220, ns=ns)
    # Nothing committed: the chunk and its documents stay on the donor...
    assert _owner(mc, ns, N // 2) == "shard0"
    assert config_db(mc).changelog.count_documents({"what": "moveChunk.commit", "ns": ns}) == 0
    assert r.dig.bad.count_documents({}) == N
    assert mc.shard_client(0).dig.bad.count_documents({}) == N
    # ...and the recipient's copy is deleted as on any abort.
    wait_until(lambda: mc.shard_client(1).dig.bad.count_documents({}) == 0,
               what="the recipient's copy deleted")
    # A later migration of the same chunk succeeds, with the update in it.
    r.admin.command("moveChunk", ns, find={"x": N // 2}, to="shard1", _waitForDelete=True)
    assert _owner(mc, ns, N // 2) == "shard1"
    assert mc.shard_client(1).dig.bad.count_documents({}) == N // 2
    assert r.dig.bad.find_one({"x": N - 1})["pad"] == "changed"
    assert r.dig.bad.count_documents({}) == N
    entry = config_db(mc).changelog.find_one({"what": "moveChunk.commit", "ns": ns})
    assert entry["details"]["rangeDigest"]["count"] == N // 2
