"""Migrations at scale (issue 23 item 3): a range of 1,000,000 documents moved while writers
add 200,000 more to it during its clone, and the range deletion of 1,000,000 orphans a
migration leaves on its donor. Documents are checked where they live: on each shard through
its own connection (no routing, no orphan filtering), and through the router."""

import pymongo
from pymongo.errors import PyMongoError

from scale_util import RECORDER, join_procs, load, run_procs, scaled
from shale_fixtures import Background, fail_point, wait_until

N = scaled(1_000_000)     # documents of the moved range, k = 0 .. N-1
CONTROL = scaled(10_000)  # documents k = N .. N+CONTROL-1 that stay on the donor
WRITES = scaled(200_000, 2 * 1000)  # inserts into the range during the clone
WRITE_BATCH = 1000
SLOW = 1800         # seconds: generous waits for this 2-core machine


def _setup(c, db, primary):
    """db.c sharded on {k: 1} with chunks [MinKey, 0), [0, N), [N, MaxKey), all on 'primary',
    holding N + CONTROL small documents; returns the router client."""
    r = c.router_client(socketTimeoutMS=0)
    r.admin.command("enableSharding", db, primaryShard=primary)
    r.admin.command("shardCollection", db + ".c", key={"k": 1})
    r.admin.command("split", db + ".c", middle={"k": 0})
    r.admin.command("split", db + ".c", middle={"k": N})
    load(c.uri(), db, "c", "small", 0, N + CONTROL)
    return r


def _chunk_shard(c, ns, lo):
    cfg = c.config_client(uuidRepresentation="standard").config
    coll = cfg.collections.find_one({"_id": ns})
    for ch in cfg.chunks.find({"uuid": coll["uuid"]}):
        if ch["min"]["k"] == lo:
            return ch["shard"]
    raise AssertionError("no chunk starts at %r" % lo)


def _sum_k(coll, flt=None):
    out = list(coll.aggregate([{"$match": flt or {}},
                               {"$group": {"_id": None, "n": {"$sum": 1}, "s": {"$sum": "$k"}}}]))
    return (out[0]["n"], out[0]["s"]) if out else (0, 0)


def _writer_k(j):
    """k of the j-th write during the clone: spread over the whole moving range."""
    return (j * 7919) % N


def _writer(uri, db, w, lo, hi):
    c = pymongo.MongoClient(uri, serverSelectionTimeoutMS=60000)
    coll = c[db].c
    for s in range(lo, hi, WRITE_BATCH):
        coll.insert_many([{"_id": "n-%d-%d" % (w, j), "k": _writer_k(j)}
                          for j in range(s, min(hi, s + WRITE_BATCH))], ordered=False)
    c.close()


def test_migrate_1m_range_while_writers_add_200k_during_the_clone(scale_cluster):
    c = scale_cluster
    db, ns = "scale_mig", "scale_mig.c"
    with RECORDER.phase("test_migrate_1m_range_while_writers_add_200k_during_the_clone",
                        "load 1,010,000 small docs"):
        r = _setup(c, db, "shard0")
    donor, recipient = c.shard_client(0), c.shard_client(1)
    # The recipient holds after its clone (before its catch-up) until the writers are done,
    # so all 200,000 writes are captured by the donor while the range is being cloned or
    # right after, and reach the recipient as transferred modifications.
    fail_point(recipient, "migrateThreadHangAtStep3", "alwaysOn")
    note = {}
    try:
        with RECORDER.phase("test_migrate_1m_range_while_writers_add_200k_during_the_clone",
                            "moveRange of 1,000,000 docs, +200,000 writes in its clone") as ph:
            m = Background(lambda: r.admin.command("moveRange", ns, min={"k": 0},
                                                   max={"k": N}, toShard="shard1"),
                           catch=PyMongoError)

            def cloning():
                if not m.is_alive():
                    return True  # failed early: reported below
                st = recipient.admin.command("_recvChunkStatus", ns)
                return st.get("state") == "clone" and st["counts"]["cloned"] > 0
            wait_until(cloning, SLOW, "the recipient to start cloning")
            assert m.error is None, m.error
            ps = run_procs(_writer, [(c.uri(), db, w, w * WRITES // 2, (w + 1) * WRITES // 2)
                                     for w in range(2)])
            join_procs(ps, "the writers")
            st = recipient.admin.command("_recvChunkStatus", ns)
            note["cloned"] = st["counts"]["cloned"]
            fail_point(recipient, "migrateThreadHangAtStep3", "off")
            m.join(SLOW)
            ph["note"] = "the writers finished with %d of %d documents cloned" % (
                note["cloned"], N)
    finally:
        fail_point(recipient, "migrateThreadHangAtStep3", "off")
    assert not m.is_alive(), "moveRange still running after %d s" % SLOW
    assert m.error is None, m.error

    with RECORDER.phase("test_migrate_1m_range_while_writers_add_200k_during_the_clone",
                        "check"):
        assert _chunk_shard(c, ns, 0) == "shard1"
        assert _chunk_shard(c, ns, N) == "shard0"
        in_range = {"k": {"$gte": 0, "$lt": N}}
        want_n = N + WRITES
        want_s = N * (N - 1) // 2 + sum(_writer_k(j) for j in range(WRITES))
        # The recipient holds every document of the range, old and new, exactly once.
        assert _sum_k(recipient[db].c, in_range) == (want_n, want_s)
        assert recipient[db].c.count_documents({"_id": {"$regex": "^n-"}}) == WRITES
        assert recipient[db].c.count_documents({"k": {"$gte": N}}) == 0
        # Through the router: the range once (the donor's copies are orphans, filtered).
        assert _sum_k(r[db].c, in_range) == (want_n, want_s)
        assert r[db].c.count_documents({}) == want_n + CONTROL
        assert donor[db].c.count_documents({"k": {"$gte": N}}) == CONTROL
        # The donor's range deletion task for the orphans (delayed: orphanCleanupDelaySecs).
        task = donor.config.rangeDeletions.find_one({"nss": ns})
        if task is not None:
            assert "pending" not in task
            assert task["numOrphanDocs"] == want_n
        status = recipient.admin.command("_recvChunkStatus", ns)
        assert status["state"] == "done"
        assert status["counts"]["cloned"] + status["counts"]["catchup"] + \
            status["counts"]["steady"] >= want_n


def test_range_deletion_of_1m_orphans(scale_cluster):
    """A quiet migration of 1,000,000 documents (shard1 -> shard0), then the donor's range
    deleter removes the 1,000,000 orphans it left: cleanupOrphaned returns once the task is
    gone; the donor keeps only the documents it owns."""
    c = scale_cluster
    db, ns = "scale_rd", "scale_rd.c"
    name = "test_range_deletion_of_1m_orphans"
    with RECORDER.phase(name, "load 1,010,000 small docs"):
        r = _setup(c, db, "shard1")
    donor, recipient = c.shard_client(1), c.shard_client(0)
    with RECORDER.phase(name, "quiet moveRange of 1,000,000 docs"):
        r.admin.command("moveRange", ns, min={"k": 0}, max={"k": N}, toShard="shard0")
    assert _chunk_shard(c, ns, 0) == "shard0"
    assert recipient[db].c.count_documents({}) == N
    # orphanCleanupDelaySecs (900 s) keeps the orphans until the test lets the deleter go.
    task = donor.config.rangeDeletions.find_one({"nss": ns})
    assert task is not None and "pending" not in task and task["numOrphanDocs"] == N
    assert donor[db].c.count_documents({}) == N + CONTROL
    before = donor.admin.command("serverStatus")["shardingStatistics"].get(
        "countDocsDeletedByRangeDeleter", 0)
    try:
        with RECORDER.phase(name, "range deletion of 1,000,000 orphans"):
            donor.admin.command("setParameter", 1, orphanCleanupDelaySecs=0)
            donor.admin.command("cleanupOrphaned", ns)
            wait_until(lambda: donor.config.rangeDeletions.find_one({"nss": ns}) is None, SLOW,
                       "the donor's range deletion task to be removed")
    finally:
        donor.admin.command("setParameter", 1, orphanCleanupDelaySecs=900)
    with RECORDER.phase(name, "check"):
        assert donor[db].c.count_documents({"k": {"$lt": N}}) == 0
        assert donor[db].c.count_documents({}) == CONTROL
        after = donor.admin.command("serverStatus")["shardingStatistics"][
            "countDocsDeletedByRangeDeleter"]
        assert after - before == N
        assert recipient[db].c.count_documents({}) == N
        assert _sum_k(r[db].c) == (N + CONTROL, (N + CONTROL) * (N + CONTROL - 1) // 2)
