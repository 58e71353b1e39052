"""Live chunk migration (issue 7 items 1, 2, 4, 5): moveChunk / moveRange through the
router, the donor's and recipient's protocol (docs/design/sharding-protocol.md "Chunk
migration"), what users see during and after a migration, and crash safety of the
donor. Real processes: a config server, three shards, routers; pymongo on the router
and, to check where documents really are, on each shard directly."""

import threading

import bson
import pymongo
import pytest
from pymongo.errors import OperationFailure, PyMongoError

from shale_fixtures import (Background, config_db, error_code, fail_point, hang, module_cluster,
                            run_to_fail_point, standard_uuid_db, wait_until)

N = 5000
MAXK = bson.max_key.MaxKey()
MINK = bson.min_key.MinKey()


@pytest.fixture(scope="module")
def mc(request):
    with module_cluster(request, shards=3,
                        shard_extra=["--setParameter", "orphanCleanupDelaySecs=0"]) as c:
        yield c


def _chunks(c, ns):
    cfg = config_db(c)
    coll = cfg.collections.find_one({"_id": ns})
    return list(cfg.chunks.find({"uuid": coll["uuid"]}).sort("min", 1))


def _chunk_at(c, ns, x):
    for ch in _chunks(c, ns):
        lo, hi = ch["min"]["x"], ch["max"]["x"]
        if (isinstance(lo, bson.min_key.MinKey) or lo <= x) and \
                (isinstance(hi, bson.max_key.MaxKey) or x < hi):
            return ch
    raise AssertionError("no chunk holds x=%r" % x)


def _setup(c, name, n=N, splits=(2500,)):
    r = c.router_client()
    ns = "mig." + name
    r.admin.command("enableSharding", "mig", primaryShard="shard0")
    r.admin.command("shardCollection", ns, key={"x": 1})
    for s in splits:
        r.admin.command("split", ns, middle={"x": s})
    r.mig[name].insert_many([{"_id": i, "x": i, "v": 0, "pad": "p" * 50} for i in range(n)])
    return r, ns


def _wait_writes(inserted, lock, n):
    """Wait until the writers have had n more inserts acknowledged."""
    with lock:
        base = len(inserted)

    def grown():
        with lock:
            return len(inserted) >= base + n
    wait_until(grown, what="%d more acknowledged inserts" % n)


def _direct(c, i, name):
    return c.shard_client(i).mig[name]


def test_move_chunk_moves_documents_and_bumps_versions(mc):
    r, ns = _setup(mc, "basic")
    before = _chunk_at(mc, ns, 3000)
    low = _chunk_at(mc, ns, 0)
    assert before["shard"] == "shard0" and low["shard"] == "shard0"
    coll_major = max(ch["lastmod"].time for ch in _chunks(mc, ns))
    r.admin.command("moveChunk", ns, find={"x": 3000}, to="shard1")
    moved = _chunk_at(mc, ns, 3000)
    control = _chunk_at(mc, ns, 0)
    assert moved["shard"] == "shard1"
    assert (moved["lastmod"].time, moved["lastmod"].inc) == (coll_major + 1, 0)
    assert (control["lastmod"].time, control["lastmod"].inc) == (coll_major + 1, 1)
    assert moved["history"][0]["shard"] == "shard1"
    # Through the router: every document once.
    ids = [d["_id"] for d in r.mig.basic.find({}, {"_id": 1})]
    assert len(ids) == N and len(set(ids)) == N
    assert r.mig.basic.count_documents({"x": {"$gte": 2500}}) == N - 2500
    # The recipient holds the range; the donor's orphans are filtered from versioned reads.
    assert _direct(mc, 1, "basic").count_documents({"x": {"$gte": 2500}}) == N - 2500
    assert r.mig.basic.find_one({"x": 4000})["_id"] == 4000
    # The recipient's collection has the cluster-wide UUID.
    uuid = config_db(mc).collections.find_one({"_id": ns})["uuid"]
    db1 = standard_uuid_db(mc.shard_client(1), "mig")
    assert next(db1.list_collections(filter={"name": "basic"}))["info"]["uuid"] == uuid
    # The changelog has the commit.
    log = config_db(mc).changelog.find_one({"what": "moveChunk.commit", "ns": ns})
    assert log is not None and log["details"]["to"] == "shard1"


def test_move_range_and_a_stale_router_after_several_migrations(mc):
    r, ns = _setup(mc, "several", splits=(1000, 2500, 4000))
    r2 = mc.add_router().client()
    assert r2.mig.several.count_documents({}) == N  # r2 caches the routing now
    r.admin.command("moveRange", ns, min={"x": 1000}, toShard="shard2")
    r.admin.command("moveRange", ns, min={"x": 2500}, max={"x": 4000}, toShard="shard1")
    r.admin.command("moveChunk", ns, bounds=[{"x": 4000}, {"x": MAXK}], to="shard2")
    r.admin.command("moveRange", ns, min={"x": 1000}, toShard="shard1")
    assert [ch["shard"] for ch in _chunks(mc, ns)] == ["shard0", "shard1", "shard1", "shard2"]
    # A range inside a chunk is split out of it first.
    r.admin.command("moveRange", ns, min={"x": 100}, max={"x": 200}, toShard="shard2")
    r.admin.command("moveRange", ns, min={"x": 4500}, toShard="shard0")
    assert [(ch["min"]["x"], ch["shard"]) for ch in _chunks(mc, ns)][1:3] == [
        (100, "shard2"), (200, "shard0")]
    assert [(ch["min"]["x"], ch["shard"]) for ch in _chunks(mc, ns)][-2:] == [
        (4000, "shard2"), (4500, "shard0")]
    # Versions stay unique and the collection version grew by one major per migration.
    versions = [(ch["lastmod"].time, ch["lastmod"].inc) for ch in _chunks(mc, ns)]
    assert len(set(versions)) == len(versions)
    # The stale router still sees every document exactly once, and targeted reads work.
    ids = [d["_id"] for d in r2.mig.several.find({}, {"_id": 1})]
    assert sorted(ids) == list(range(N))
    assert r2.mig.several.find_one({"x": 3000})["_id"] == 3000
    assert r2.mig.several.count_documents({"x": {"$gte": 900, "$lt": 4100}}) == 3200
    assert r2.mig.several.count_documents({"x": {"$gte": 50, "$lt": 250}}) == 200
    r2.mig.several.update_one({"x": 4200}, {"$set": {"v": 7}})
    assert r.mig.several.find_one({"x": 4200})["v"] == 7
    assert _direct(mc, 2, "several").find_one({"x": 4200})["v"] == 7


def _max_docs(mc, shard, name, max_bytes):
    """Documents of about max_bytes on that shard: MongoDB's autoSplitVector estimate."""
    stats = mc.shard_client(shard).mig.command("collStats", name)
    return max_bytes // (stats["size"] // stats["count"])


def test_move_range_with_one_bound_moves_about_a_chunk_size(mc):
    r, ns = _setup(mc, "onebound", splits=(2500,))
    per = _max_docs(mc, 0, "onebound", 20000)
    assert 100 < per < 400
    # min only: [1000, ~1000 + per) is split out of [MinKey, 2500) and moved.
    r.admin.command("moveRange", ns, min={"x": 1000}, toShard="shard1", maxChunkSizeBytes=20000)
    bounds = [(ch["min"]["x"], ch["shard"]) for ch in _chunks(mc, ns)]
    assert bounds[0] == (MINK, "shard0") and bounds[1][0] == 1000 and bounds[1][1] == "shard1"
    hi = bounds[2][0]
    assert abs((hi - 1000) - per) <= 2, (hi, per)
    assert bounds[2][1] == "shard0" and bounds[3] == (2500, "shard0")
    assert _direct(mc, 1, "onebound").count_documents({}) == hi - 1000
    # max only: [~2500 - per, 2500) is split off the top of [hi, 2500) and moved.
    r.admin.command("moveRange", ns, max={"x": 2500}, toShard="shard2", maxChunkSizeBytes=20000)
    lo = _chunk_at(mc, ns, 2499)["min"]["x"]
    assert abs((2500 - lo) - per) <= 2, (lo, per)
    assert _chunk_at(mc, ns, 2499)["shard"] == "shard2"
    assert _chunk_at(mc, ns, lo - 1)["shard"] == "shard0"
    assert _chunk_at(mc, ns, lo - 1)["min"]["x"] == hi
    assert _direct(mc, 2, "onebound").count_documents({}) == 2500 - lo
    # A max that is inside a chunk bounds the range there too.
    r.admin.command("moveRange", ns, max={"x": 4000}, toShard="shard2", maxChunkSizeBytes=20000)
    assert _chunk_at(mc, ns, 3999)["shard"] == "shard2"
    assert _chunk_at(mc, ns, 4000)["shard"] == "shard0"
    lo2 = _chunk_at(mc, ns, 3999)["min"]["x"]
    assert abs((4000 - lo2) - per) <= 2 and _chunk_at(mc, ns, lo2 - 1)["shard"] == "shard0"
    # Less than a chunk size left in the chunk: the whole rest of it moves.
    r.admin.command("moveRange", ns, min={"x": 4950}, toShard="shard1", maxChunkSizeBytes=20000)
    assert _chunk_at(mc, ns, 4950)["max"]["x"] == MAXK
    assert _chunk_at(mc, ns, 4950)["shard"] == "shard1"
    # Every document once, each on the shard that owns its chunk.
    ids = [d["_id"] for d in r.mig.onebound.find({}, {"_id": 1})]
    assert sorted(ids) == list(range(N))
    for ch in _chunks(mc, ns):
        lo_x = -1 if ch["min"]["x"] == MINK else ch["min"]["x"]
        hi_x = N if ch["max"]["x"] == MAXK else ch["max"]["x"]
        i = int(ch["shard"][-1])
        assert _direct(mc, i, "onebound").count_documents(
            {"x": {"$gte": lo_x, "$lt": hi_x}}) == hi_x - max(lo_x, 0), ch
    log = config_db(mc).changelog.find_one({"what": "split", "ns": ns,
                                          "details.right.min.x": hi})
    assert log is not None


def test_auto_split_vector_on_a_shard(mc):
    """autoSplitVector (what moveRange with one bound asks the owning shard): a key every
    maxChunkSizeBytes / avgObjSize index entries, from min up or (forward: false) from max
    down; MongoDB's errors."""
    _setup(mc, "asv", splits=())
    db = mc.shard_client(0).mig
    per = _max_docs(mc, 0, "asv", 20000)

    def asv(**kw):
        args = dict(keyPattern={"x": 1}, min={"x": MINK}, max={"x": MAXK},
                    maxChunkSizeBytes=20000)
        args.update(kw)
        return db.command("autoSplitVector", "asv", **args)["splitKeys"]

    assert asv(limit=1) == [{"x": per - 1}]
    assert asv(limit=1, max={"x": 2500}, forward=False) == [{"x": 2500 - per}]
    assert asv(limit=1, min={"x": 100}) == [{"x": 100 + per - 1}]
    keys = asv()
    assert len(keys) in (N // per - 1, N // per) and keys[0] == {"x": per - 1}
    assert [k["x"] for k in keys] == sorted(k["x"] for k in keys)
    assert asv(limit=1, maxChunkSizeBytes=10 ** 9) == []  # the collection is smaller
    assert asv(limit=1, min={"x": 4950}) == []  # less than a chunk size left
    with pytest.raises(OperationFailure) as e:
        asv(limit=0)
    assert e.value.code == 72  # InvalidOptions
    with pytest.raises(OperationFailure) as e:
        asv(keyPattern={"nope": 1})
    assert e.value.code == 27  # IndexNotFound
    with pytest.raises(OperationFailure) as e:
        db.command("autoSplitVector", "asv", keyPattern={"x": 1}, min={"x": 0})
    assert e.value.code == 40414  # IDLFailedToParse: max, maxChunkSizeBytes missing


def test_move_range_with_one_bound_uses_the_configured_chunk_size(mc):
    r = mc.router_client()
    ns = "mig.chunksize"
    r.admin.command("enableSharding", "mig", primaryShard="shard0")
    r.admin.command("shardCollection", ns, key={"x": 1})
    r.mig.chunksize.insert_many([{"_id": i, "x": i, "pad": "p" * 400} for i in range(N)])
    per = _max_docs(mc, 0, "chunksize", 1024 * 1024)
    assert per < N // 2
    cfg = config_db(mc)
    cfg.settings.update_one({"_id": "chunksize"}, {"$set": {"value": 1}}, upsert=True)
    try:
        r.admin.command("moveRange", ns, min={"x": 0}, toShard="shard1")
    finally:
        cfg.settings.delete_one({"_id": "chunksize"})
    moved = _chunk_at(mc, ns, 0)
    assert moved["shard"] == "shard1" and abs(moved["max"]["x"] - per) <= 2, (moved, per)
    assert _chunk_at(mc, ns, moved["max"]["x"])["shard"] == "shard0"
    assert r.mig.chunksize.count_documents({}) == N
    # Without a setting: 128 MB, more than the collection, so the whole chunk moves.
    r.admin.command("moveRange", ns, min={"x": 4000}, toShard="shard2")
    assert _chunk_at(mc, ns, 4000)["max"]["x"] == MAXK
    assert _direct(mc, 2, "chunksize").count_documents({}) == N - 4000


def test_bad_migration_requests_get_errors(mc):
    r, ns = _setup(mc, "bad")
    with pytest.raises(OperationFailure) as e:
        r.admin.command("moveChunk", ns, find={"x": 1}, to="nosuchshard")
    assert e.value.code == 70  # ShardNotFound
    with pytest.raises(OperationFailure) as e:
        r.admin.command("moveChunk", ns, find={"x": 1}, to="shard0")  # already there
    assert e.value.code == 20  # IllegalOperation
    with pytest.raises(OperationFailure) as e:
        r.admin.command("moveChunk", ns, to="shard1")
    assert e.value.code == 2 or e.value.code == 72
    with pytest.raises(OperationFailure) as e:  # spans two chunks
        r.admin.command("moveRange", ns, min={"x": 17}, max={"x": 3000}, toShard="shard1")
    assert e.value.code == 72  # InvalidOptions
    with pytest.raises(OperationFailure) as e:
        r.admin.command("moveChunk", "mig.unsharded_nope", find={"x": 1}, to="shard1")
    assert r.mig.bad.count_documents({}) == N


def test_concurrent_writers_and_readers_see_every_acknowledged_write_once(mc):
    r, ns = _setup(mc, "live")
    donor = mc.shard_client(0)
    stop = threading.Event()
    errors = []
    inserted, deleted, updated = set(), set(), {}
    lock = threading.Lock()

    def writer(k):
        c = mc.router_client()
        coll = c.mig.live
        i = 0
        while not stop.is_set():
            nid = 100000 + k * 100000 + i
            try:
                # inserts into the moving range, updates of a non-key field, deletes
                coll.insert_one({"_id": nid, "x": 2500 + (nid % 2500), "v": 0})
                with lock:
                    inserted.add(nid)
                target = 2500 + k * 600 + (i % 600)
                if i % 3 == 0:
                    coll.find_one_and_update({"_id": target, "x": target}, {"$inc": {"v": 1}})
                else:
                    coll.update_one({"_id": target}, {"$inc": {"v": 1}})
                with lock:
                    updated[target] = updated.get(target, 0) + 1
                if i % 5 == 0:
                    victim = 2500 + k * 600 + 300 + (i // 5) % 300
                    res = coll.delete_one({"_id": victim})
                    with lock:
                        deleted.add(victim)
                        if res.deleted_count == 0 and victim not in deleted:
                            errors.append("delete of %d found nothing" % victim)
            except PyMongoError as e:
                errors.append("writer %d: %r" % (k, e))
                return
            i += 1

    stable = set(range(0, 2500))  # never written: must always be seen exactly once

    def reader():
        c = mc.router_client()
        while not stop.is_set():
            try:
                ids = [d["_id"] for d in c.mig.live.find({}, {"_id": 1})]
            except PyMongoError as e:
                errors.append("reader: %r" % e)
                return
            if len(ids) != len(set(ids)):
                errors.append("reader saw a document twice")
                return
            if not stable <= set(ids):
                errors.append("reader missed documents")
                return

    wait_step3 = hang(donor, "moveChunkHangAtStep3")
    wait_step4 = hang(donor, "moveChunkHangAtStep4")
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    threads.append(threading.Thread(target=reader))
    for t in threads:
        t.start()
    m = Background(lambda: r.admin.command("moveChunk", ns, find={"x": 3000}, to="shard1"),
                   catch=PyMongoError)
    try:
        # writes land while the range is cloned, and while the recipient catches up
        wait_step3()
        _wait_writes(inserted, lock, 30)
        fail_point(donor, "moveChunkHangAtStep3", "off")
        wait_step4()
        _wait_writes(inserted, lock, 30)
        fail_point(donor, "moveChunkHangAtStep4", "off")
        m.join(60)
        _wait_writes(inserted, lock, 30)  # after the commit, through the new routing
    finally:
        fail_point(donor, "moveChunkHangAtStep3", "off")
        fail_point(donor, "moveChunkHangAtStep4", "off")
        stop.set()
        for t in threads:
            t.join(30)
    assert m.error is None, m.error
    assert not errors, errors[:5]
    assert _chunk_at(mc, ns, 3000)["shard"] == "shard1"
    docs = {d["_id"]: d for d in r.mig.live.find({})}
    expect = (set(range(N)) | inserted) - deleted
    assert set(docs) == expect
    for k, n in updated.items():
        if k not in deleted:
            assert docs[k]["v"] == n, (k, docs[k], n)
    assert len(inserted) > 0 and len(updated) > 0
    # The writes made during the migration reached the recipient as captured mods.
    status = mc.shard_client(1).admin.command("_recvChunkStatus", ns)
    assert status["state"] == "done" and status["active"] is False
    assert status["counts"]["cloned"] >= N - 2500
    assert status["counts"]["catchup"] + status["counts"]["steady"] > 0
    # the recipient has exactly the range's documents
    on_recipient = {d["_id"] for d in _direct(mc, 1, "live").find({"x": {"$gte": 2500}})}
    assert on_recipient == {i for i in expect if docs[i]["x"] >= 2500}


def test_critical_section_holds_operations_then_sends_them_to_the_new_owner(mc):
    r, ns = _setup(mc, "crit")
    donor = mc.shard_client(0)
    wait_commit = hang(donor, "hangBeforeCommitMigration")

    def run(fn):
        return Background(lambda: fn(mc.router_client().mig.crit), catch=PyMongoError)

    mover = run(lambda c: r.admin.command("moveChunk", ns, find={"x": 3000}, to="shard1"))
    try:
        wait_commit()
        ops = [run(lambda c: c.update_one({"x": 3000}, {"$set": {"v": 5}}).modified_count),
               run(lambda c: c.count_documents({"x": {"$gte": 2500}})),
               run(lambda c: c.count_documents({"x": {"$lt": 2500}}))]
        ops[0].join(0.5)
        # Reads and writes of the migrating collection on the donor wait in its critical section.
        assert ops[0].is_alive() and ops[1].is_alive() and ops[2].is_alive()
    finally:
        fail_point(donor, "hangBeforeCommitMigration", "off")
    mover.join(60)
    for t in ops:
        t.join(60)
    errs = [t.error for t in [mover] + ops if t.error is not None]
    assert not errs, errs
    assert [t.result for t in ops] == [1, N - 2500, 2500]
    # The held write was retried on the new owner.
    assert _direct(mc, 1, "crit").find_one({"x": 3000})["v"] == 5
    assert r.mig.crit.find_one({"x": 3000})["v"] == 5


def test_cursor_opened_before_the_commit_returns_the_donated_documents(mc):
    r, ns = _setup(mc, "cursor")
    cur = r.mig.cursor.find({"x": {"$gte": 2500}}).batch_size(100)
    first = [next(cur) for _ in range(100)]
    r.admin.command("moveChunk", ns, find={"x": 3000}, to="shard1")
    rest = list(cur)
    ids = [d["_id"] for d in first + rest]
    assert sorted(ids) == list(range(2500, N))


def test_conflicting_migration_refused_and_the_same_one_joined(mc):
    r, ns = _setup(mc, "conflict", splits=(1000, 2500))
    ns2 = "mig.conflict2"
    r.admin.command("shardCollection", ns2, key={"x": 1})
    r.mig.conflict2.insert_many([{"x": i} for i in range(10)])
    r.admin.command("moveChunk", ns2, find={"x": 1}, to="shard2")
    donor = mc.shard_client(0)

    def move(**kw):
        return Background(lambda: mc.router_client().admin.command("moveChunk", ns, **kw),
                          catch=PyMongoError)

    wait_step3 = hang(donor, "moveChunkHangAtStep3")
    try:
        t1 = move(find={"x": 3000}, to="shard1")
        wait_step3()
        t2 = move(find={"x": 2600}, to="shard1")
        # Another chunk of the same donor: refused while the first one runs.
        assert error_code(lambda: r.admin.command("moveChunk", ns, find={"x": 10},
                                                  to="shard2")) == 117  # ConflictingOperation...
        # The recipient is busy too (shard2 -> shard1).
        assert error_code(lambda: r.admin.command("moveChunk", ns2, find={"x": 1},
                                                  to="shard1")) == 117
        t2.join(0.3)
        assert t2.is_alive()  # joined: waits for the first one
    finally:
        fail_point(donor, "moveChunkHangAtStep3", "off")
    t1.join(60)
    t2.join(60)
    assert t1.done and t1.result["ok"] == 1, t1.error
    assert t2.done and t2.result["ok"] == 1, t2.error
    assert _chunk_at(mc, ns, 3000)["shard"] == "shard1"
    assert sorted(d["_id"] for d in r.mig.conflict.find({}, {"_id": 1})) == list(range(N))


_deleter = {}


def test_donor_orphans_are_filtered_then_deleted(mc):
    r, ns = _setup(mc, "orphans")
    r.admin.command("moveChunk", ns, find={"x": 3000}, to="shard1")
    donor = _direct(mc, 0, "orphans")
    assert donor.count_documents({"x": {"$gte": 2500}}) <= N - 2500  # deletion may have begun
    # Versioned reads filter whatever the donor still holds of the range.
    assert r.mig.orphans.count_documents({}) == N
    assert r.mig.orphans.count_documents({"x": {"$gte": 2500}}) == N - 2500
    task = mc.shard_client(0).config.rangeDeletions.find_one({"nss": ns})
    assert task is None or not task.get("pending")
    # orphanCleanupDelaySecs=0: the range deleter removes the donor's copies.
    try:
        wait_until(lambda: donor.count_documents({"x": {"$gte": 2500}}) == 0, timeout=10,
                   what="the donor's orphans to be deleted")
    except TimeoutError:
        _deleter["missing"] = True
        pytest.skip("no range deleter in this build yet (branch rangedel)")
    wait_until(lambda: mc.shard_client(0).config.rangeDeletions.find_one({"nss": ns}) is None,
               what="the donor's range deletion task to be removed")
    assert donor.count_documents({}) == 2500
    assert r.mig.orphans.count_documents({}) == N


def test_donor_task_counts_the_donated_documents_as_orphans(mc):
    """numOrphanDocs of the donor's range deletion task: the documents of the migrated
    range (MongoDB's count), which the deleter then counts down to the task's removal."""
    r, ns = _setup(mc, "numorphans")
    donor = mc.shard_client(0)
    donor.admin.command("configureFailPoint", "suspendRangeDeletion", mode="alwaysOn")
    try:
        r.admin.command("moveRange", ns, min={"x": 2500}, max={"x": 4000}, toShard="shard1")
        task = donor.config.rangeDeletions.find_one({"nss": ns})
        assert task is not None and "pending" not in task
        assert task["numOrphanDocs"] == 1500
        assert isinstance(task["numOrphanDocs"], int)
        # The recipient's task went with the commit.
        assert mc.shard_client(1).config.rangeDeletions.find_one({"nss": ns}) is None
    finally:
        donor.admin.command("configureFailPoint", "suspendRangeDeletion", mode="off")
    wait_until(lambda: donor.config.rangeDeletions.find_one({"nss": ns}) is None,
               what="the donor's range deletion task to be removed")
    assert _direct(mc, 0, "numorphans").count_documents({}) == N - 1500
    assert r.mig.numorphans.count_documents({}) == N


def test_wait_for_delete(mc):
    if _deleter.get("missing"):
        pytest.skip("no range deleter in this build yet (branch rangedel)")
    r, ns = _setup(mc, "waitdel")
    r.admin.command("moveChunk", ns, find={"x": 3000}, to="shard2", _waitForDelete=True)
    assert _direct(mc, 0, "waitdel").count_documents({"x": {"$gte": 2500}}) == 0
    assert r.mig.waitdel.count_documents({}) == N


def test_commit_outcome_unknown_or_failed(mc):
    r, ns = _setup(mc, "outcome")
    donor = mc.shard_client(0)
    # The commit's reply is lost: the donor asks the config server and finishes the commit.
    fail_point(donor, "migrationCommitNetworkError", {"times": 1})
    r.admin.command("moveChunk", ns, find={"x": 3000}, to="shard1")
    assert _chunk_at(mc, ns, 3000)["shard"] == "shard1"
    assert donor.config.migrationCoordinators.count_documents({}) == 0
    # The commit fails: the migration is aborted, nothing moved, the copies are to be deleted.
    fail_point(mc.shard_client(1), "failMigrationCommit", {"times": 1})
    with pytest.raises(OperationFailure):
        r.admin.command("moveChunk", ns, find={"x": 3000}, to="shard2")
    assert _chunk_at(mc, ns, 3000)["shard"] == "shard1"
    assert mc.shard_client(1).config.migrationCoordinators.count_documents({}) == 0
    pending = list(mc.shard_client(2).config.rangeDeletions.find({"nss": ns}))
    assert all(not d.get("pending") for d in pending)
    assert not mc.shard_client(1).config.rangeDeletions.find_one({"nss": ns, "pending": True})
    assert sorted(d["_id"] for d in r.mig.outcome.find({}, {"_id": 1})) == list(range(N))
    # The write path still works after the aborted critical section.
    r.mig.outcome.update_one({"x": 3000}, {"$set": {"v": 1}})
    assert r.mig.outcome.find_one({"x": 3000})["v"] == 1


def test_unknown_commit_outcome_keeps_stale_routers_off_the_donor(mc):
    # The commit happens on the config server, but the donor gets no reply and cannot ask
    # who owns the range: it must not go on serving the range with its old metadata.
    r, ns = _setup(mc, "unknown")
    if len(mc.routers) < 2:
        mc.add_router()
    stale = mc.router_client(1)
    assert stale.mig.unknown.count_documents({"x": {"$gte": 2500}}) == N - 2500
    donor = mc.shard_client(0)
    fail_point(donor, "migrationCommitNetworkError", {"times": 1})
    fail_point(donor, "migrationDecisionQueryError", "alwaysOn")
    try:
        with pytest.raises(PyMongoError):
            r.admin.command("moveChunk", ns, find={"x": 3000}, to="shard1")
        assert _chunk_at(mc, ns, 3000)["shard"] == "shard1"
        # A router that still routes the range to the donor, with the donor's old version:
        # the donor sends it on (StaleConfig), the recipient holds it in its critical
        # section until the decision is known.
        w = Background(lambda: stale.mig.unknown.insert_one({"_id": N, "x": 3001, "v": 0}))
        recipient = mc.shard_client(1)
        wait_until(lambda: any(o.get("ns") == ns and o.get("op") == "insert" for o in
                               recipient.admin.command("currentOp")["inprog"]),
                   what="the stale router's insert to wait on the recipient")
        assert not w.done
        assert _direct(mc, 0, "unknown").find_one({"_id": N}) is None
    finally:
        fail_point(donor, "migrationDecisionQueryError", "off")
    w.join(60)
    assert w.done, w.error
    assert _direct(mc, 1, "unknown").find_one({"_id": N}) is not None
    wait_until(lambda: donor.config.migrationCoordinators.count_documents({}) == 0,
               what="the migration's decision to be resolved")
    wait_until(lambda: _direct(mc, 0, "unknown").count_documents({"x": {"$gte": 2500}}) == 0,
               what="the donor's copy of the range to be deleted")
    assert sorted(d["_id"] for d in r.mig.unknown.find({}, {"_id": 1})) == list(range(N + 1))
    assert stale.mig.unknown.count_documents({"x": {"$gte": 2500}}) == N - 2500 + 1


@pytest.mark.parametrize("step,committed", [
    ("moveChunkHangAtStep3", False),      # cloning / catching up
    ("hangBeforeCommitMigration", False),  # in the critical section, before the commit
    ("moveChunkHangAtStep5", True),        # committed, coordinator not finished
])
def test_donor_killed_mid_migration_loses_and_duplicates_nothing(mc, step, committed):
    name = "crash_" + step
    r, ns = _crash_setup(mc, name)
    donor = mc.shard_client(0)
    t = run_to_fail_point(donor, step, _mover(mc, ns), catch=PyMongoError)
    mc.shards[0].kill()
    t.join(90)
    assert t.error is not None, "moveChunk succeeded although its donor was killed"
    mc.restart_shard(0)
    donor = mc.shard_client(0)
    # Start-up recovery finishes the migration from its coordinator document.
    wait_until(lambda: donor.config.migrationCoordinators.count_documents({}) == 0,
               what="the coordinator document to be finished")
    owner = _chunk_at(mc, ns, 3000)["shard"]
    assert owner == ("shard1" if committed else "shard0")
    ids = [d["_id"] for d in r.mig[name].find({}, {"_id": 1})]
    assert sorted(ids) == list(range(N))
    assert r.mig[name].count_documents({"x": {"$gte": 2500}}) == N - 2500
    # The range deletion tasks follow the decision: the loser's copy is to be deleted.
    rd_donor = list(donor.config.rangeDeletions.find({"nss": ns}))
    rd_recipient = list(mc.shard_client(1).config.rangeDeletions.find({"nss": ns}))
    if committed:
        assert all(not d.get("pending") for d in rd_donor)
        assert rd_recipient == []
    else:
        assert rd_donor == []
        assert all(not d.get("pending") for d in rd_recipient)
        # The recipient's copies are deleted (whenToClean "now").
        wait_until(lambda: _direct(mc, 1, name).count_documents({}) == 0,
                   what="the aborted migration's copies to be deleted on the recipient")
    # The shards take part in migrations again.
    target = "shard0" if committed else "shard1"
    r.admin.command("moveChunk", ns, find={"x": 3000}, to=target)
    assert sorted(d["_id"] for d in r.mig[name].find({}, {"_id": 1})) == list(range(N))


def test_hashed_collection_chunk_moves(mc):
    r = mc.router_client()
    ns = "mig.hashed"
    r.admin.command("enableSharding", "mig", primaryShard="shard0")
    r.admin.command("shardCollection", ns, key={"x": "hashed"})
    r.mig.hashed.insert_many([{"_id": i, "x": i} for i in range(N)])
    chunks = _chunks(mc, ns)
    src = next(ch for ch in chunks if ch["shard"] == "shard0")
    before2 = _direct(mc, 2, "hashed").count_documents({})
    r.admin.command("moveChunk", ns, bounds=[src["min"], src["max"]], to="shard2")
    assert sorted(d["_id"] for d in r.mig.hashed.find({}, {"_id": 1})) == list(range(N))
    assert _direct(mc, 2, "hashed").count_documents({}) > before2
    # Once the donor's orphans are gone every document is on exactly one shard.
    wait_until(lambda: sum(_direct(mc, i, "hashed").count_documents({})
                           for i in range(3)) == N,
               what="the donor's orphans to be deleted")
    assert r.mig.hashed.find_one({"x": 1234})["_id"] == 1234
    # moveRange with only min: a range of about the chunk size, in hashed key space.
    src = next(ch for ch in _chunks(mc, ns) if ch["shard"] == "shard0")
    owner = _direct(mc, 0, "hashed")
    in_src = owner.count_documents({})
    before1 = _direct(mc, 1, "hashed").count_documents({})
    r.admin.command("moveRange", ns, min=src["min"], toShard="shard1", maxChunkSizeBytes=2000)
    moved = next(ch for ch in _chunks(mc, ns) if ch["min"] == src["min"])
    assert moved["shard"] == "shard1" and moved["max"] != src["max"]
    got = _direct(mc, 1, "hashed").count_documents({}) - before1
    assert 0 < got < in_src
    assert sorted(d["_id"] for d in r.mig.hashed.find({}, {"_id": 1})) == list(range(N))


def test_internal_migration_commands_reject_bad_input(mc):
    r, ns = _setup(mc, "badinput")
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
        {"_configsvrMoveRange": ns},
        {"_configsvrMoveRange": ns, "toShard": "shard1"},
        {"_configsvrMoveRange": ns, "toShard": "shard1", "min": {"y": 0}},
        {"_configsvrMoveRange": ns, "toShard": "shard1", "bounds": [{"x": 0}]},
        {"_configsvrMoveRange": ns, "toShard": "shard1", "find": {"x": 1},
         "min": {"x": 0}},
        {"_configsvrCommitChunkMigration": ns},
        {"_configsvrCommitChunkMigration": ns, "fromShard": "shard0",
         "toShard": "shard1", "migratedChunk": {"min": {"x": 0}}},
        {"_configsvrCommitChunkMigration": ns, "fromShard": "shard0",
         "toShard": "shard1", "migratedChunk": {"min": {"x": 7}, "max": {"x": 8}}},
    ]
    for cmd in bad_config:
        with pytest.raises(OperationFailure):
            cfg.admin.command(bson.SON(cmd))
    for cmd in [{"moveChunk": ns, "find": {"x": 1}},
                {"moveChunk": ns, "find": {"x": 1}, "to": 5},
                {"moveChunk": ns, "find": {"x": 1}, "bounds": [{}, {}], "to": "s"},
                {"moveChunk": ns, "find": {"x": 1}, "to": "shard1", "bogus": 1},
                {"moveRange": ns, "toShard": "shard1"},
                {"moveRange": "nodot", "min": {"x": 1}, "toShard": "shard1"}]:
        with pytest.raises(OperationFailure):
            r.admin.command(bson.SON(cmd))
    # Everything still works.
    assert r.mig.badinput.count_documents({}) == N


def test_clone_without_a_shard_key_index_scans_the_collection(mc):
    """The donor's clone walks the shard key index; without one (dropped on the shard
    directly) it falls back to a collection scan and still moves exactly the range."""
    r, ns = _setup(mc, "noindex")
    _direct(mc, 0, "noindex").drop_index("x_1")
    r.admin.command("moveChunk", ns, find={"x": 3000}, to="shard1")
    assert _direct(mc, 1, "noindex").count_documents({}) == N - 2500
    assert _direct(mc, 1, "noindex").count_documents({"x": {"$lt": 2500}}) == 0
    ids = [d["_id"] for d in r.mig.noindex.find({}, {"_id": 1})]
    assert sorted(ids) == list(range(N))


def test_large_documents_are_batched(mc):
    r = mc.router_client()
    ns = "mig.large"
    r.admin.command("enableSharding", "mig", primaryShard="shard0")
    r.admin.command("shardCollection", ns, key={"x": 1})
    big = 4 * 1024 * 1024
    for i in range(8):
        r.mig.large.insert_one({"_id": i, "x": i, "v": 0, "blob": chr(65 + i) * big})
    donor = mc.shard_client(0)
    wait_step4 = hang(donor, "moveChunkHangAtStep4")
    t = Background(_mover(mc, ns, x=0), catch=PyMongoError)
    try:
        wait_step4()
        # The recipient holds the clone but does not own it yet: versioned reads filter it.
        assert _direct(mc, 1, "large").count_documents({}) == 8
        assert r.mig.large.count_documents({}) == 8
        assert len(list(r.mig.large.find({}, {"_id": 1}))) == 8
        # Captured while the recipient is steady: four 4 MB documents to transfer again.
        for i in range(4):
            r.mig.large.update_one({"_id": i}, {"$set": {"v": 1, "blob": chr(97 + i) * big}})
    finally:
        fail_point(donor, "moveChunkHangAtStep4", "off")
    t.join(120)
    assert t.error is None, t.error
    assert _chunk_at(mc, ns, 0)["shard"] == "shard1"
    status = mc.shard_client(1).admin.command("_recvChunkStatus", ns)
    assert status["counts"]["cloned"] == 8 and status["counts"]["catchup"] + \
        status["counts"]["steady"] >= 4
    for d in r.mig.large.find({}):
        i = d["_id"]
        want = chr(97 + i) if i < 4 else chr(65 + i)
        assert d["v"] == (1 if i < 4 else 0) and d["blob"] == want * big, i


def test_captured_writes_over_a_write_batch_are_applied_in_batches(request):
    """Issue 23: 150,000 small documents inserted into the range while the recipient is held
    after its clone all reach it through _transferMods, which must apply them in write
    batches of at most 100,000 statements (one batch used to fail the migration with
    "Write batch sizes must be between 1 and 100000", and every later one too). A cluster
    of its own: the module's kill -9 tests should not replay these writes' oplog."""
    with module_cluster(request, shards=2) as c:
        _many_mods(c)


def _many_mods(mc):
    r, ns = _setup(mc, "manymods", n=10)
    recipient = mc.shard_client(1)
    wait_recipient_step3 = hang(recipient, "migrateThreadHangAtStep3")
    try:
        t = Background(_mover(mc, ns), catch=PyMongoError)
        wait_recipient_step3()
        extra = 150000
        r.mig.manymods.insert_many([{"_id": 10 + i, "x": 3000 + i} for i in range(extra)],
                                   ordered=False)
    finally:
        fail_point(recipient, "migrateThreadHangAtStep3", "off")
    t.join(300)
    assert t.error is None, t.error
    assert t.done, "the migration is still running after 300 s"
    assert _chunk_at(mc, ns, 3000)["shard"] == "shard1"
    status = recipient.admin.command("_recvChunkStatus", ns)
    assert status["counts"]["catchup"] + status["counts"]["steady"] >= extra
    assert _direct(mc, 1, "manymods").count_documents({}) == extra  # x 0..9 stay
    assert r.mig.manymods.count_documents({}) == extra + 10


def _crash_setup(mc, name):
    r = mc.router_client()
    ns = "mig." + name
    r.admin.command("enableSharding", "mig", primaryShard="shard0")
    r.admin.command("shardCollection", ns, key={"x": 1})
    r.admin.command("split", ns, middle={"x": 2500})
    r.mig.get_collection(name, write_concern=pymongo.WriteConcern(j=True)).insert_many(
        [{"_id": i, "x": i} for i in range(N)])
    return r, ns


def _mover(mc, ns, x=3000, to="shard1"):
    """A function that moves the chunk holding x (for a Background)."""
    return lambda: mc.router_client().admin.command("moveChunk", ns, find={"x": x}, to=to)


def test_captured_writes_past_the_memory_limit_abort_the_migration(mc):
    """MongoDB aborts a migration whose captured, unsent writes pass 500 MB (ExceededMemoryLimit
    146); Shale's migrationCaptureMaxBytes lowers the limit. The recipient is held after its
    clone (migrateThreadHangAtStep3), so nothing drains the writes made meanwhile."""
    r, ns = _setup(mc, "memlimit")
    donor, recipient = mc.shard_client(0), mc.shard_client(1)
    assert donor.admin.command("getParameter", 1, migrationCaptureMaxBytes=1)[
        "migrationCaptureMaxBytes"] == 500 * 1024 * 1024
    donor.admin.command("setParameter", 1, migrationCaptureMaxBytes=4000)
    wait_recipient_step3 = hang(recipient, "migrateThreadHangAtStep3")
    fail_point(recipient, "suspendRangeDeletion", "alwaysOn")
    try:
        t = Background(_mover(mc, ns), catch=PyMongoError)
        wait_recipient_step3()
        for i in range(2500, 2800):
            r.mig.memlimit.update_one({"x": i}, {"$set": {"v": 1}})
        fail_point(recipient, "migrateThreadHangAtStep3", "off")
        t.join(120)
        # The recipient's task is ready and counts the documents it had cloned.
        task = recipient.config.rangeDeletions.find_one({"nss": ns})
        assert task is not None and "pending" not in task and task["numOrphanDocs"] == N - 2500
    finally:
        fail_point(recipient, "migrateThreadHangAtStep3", "off")
        fail_point(recipient, "suspendRangeDeletion", "off")
        donor.admin.command("setParameter", 1, migrationCaptureMaxBytes=500 * 1024 * 1024)
    assert getattr(t.error, "code", None) == 146, t.error  # ExceededMemoryLimit
    assert "high memory usage" in str(t.error)
    assert _chunk_at(mc, ns, 3000)["shard"] == "shard0"
    # Nothing lost, every write kept; the donor's state is cleaned up.
    docs = {d["_id"]: d for d in r.mig.memlimit.find({})}
    assert sorted(docs) == list(range(N))
    assert sum(1 for d in docs.values() if d["v"] == 1) == 300
    assert donor.config.migrationCoordinators.count_documents({}) == 0
    assert donor.config.rangeDeletions.find_one({"nss": ns}) is None
    # The recipient's partial copy is deleted.
    wait_until(lambda: _direct(mc, 1, "memlimit").count_documents({}) == 0,
               what="the recipient's partial copy to be deleted")
    # The next attempt, within the limit, moves the chunk with the updated documents.
    r.admin.command("moveChunk", ns, find={"x": 3000}, to="shard1")
    assert _chunk_at(mc, ns, 3000)["shard"] == "shard1"
    assert _direct(mc, 1, "memlimit").count_documents({"v": 1}) == 300
    assert r.mig.memlimit.count_documents({}) == N


@pytest.mark.parametrize("step", ["moveChunkHangAtStep3",   # the recipient clones
                                  "moveChunkHangAtStep4"])  # it is caught up (steady)
def test_recipient_killed_mid_migration_aborts_and_cleans_up(mc, step):
    # Item 4: kill -9 of the recipient while it clones, or once it is caught up and the donor
    # is in its critical section; the donor aborts, the router still sees every document
    # once, and the recipient's partial copy is deleted once it is back.
    name = "crash_recipient_" + step
    r, ns = _crash_setup(mc, name)
    donor = mc.shard_client(0)
    t = run_to_fail_point(donor, step, _mover(mc, ns), catch=PyMongoError)
    mc.shards[1].kill()
    fail_point(donor, step, "off")
    t.join(120)
    assert t.error is not None, "moveChunk succeeded although its recipient was killed"
    assert _chunk_at(mc, ns, 3000)["shard"] == "shard0"
    assert sorted(d["_id"] for d in r.mig[name].find({}, {"_id": 1})) == list(range(N))
    mc.restart_shard(1)
    wait_until(lambda: donor.config.migrationCoordinators.count_documents({}) == 0,
               timeout=60, what="the donor to finish the abort")
    wait_until(lambda: _direct(mc, 1, name).count_documents({}) == 0, timeout=60,
               what="the recipient's partial copy to be deleted")
    assert sorted(d["_id"] for d in r.mig[name].find({}, {"_id": 1})) == list(range(N))
    r.admin.command("moveChunk", ns, find={"x": 3000}, to="shard1")
    assert _chunk_at(mc, ns, 3000)["shard"] == "shard1"
    assert sorted(d["_id"] for d in r.mig[name].find({}, {"_id": 1})) == list(range(N))


def test_config_server_killed_before_the_commit_aborts_after_it_returns(mc):
    # Item 4: kill -9 of the config server in the critical section, before the commit; when
    # it is back the donor learns the commit never happened and aborts; nothing is lost.
    name = "crash_config"
    r, ns = _crash_setup(mc, name)
    donor = mc.shard_client(0)
    t = run_to_fail_point(donor, "hangBeforeCommitMigration", _mover(mc, ns), catch=PyMongoError)
    mc.config.kill()
    fail_point(donor, "hangBeforeCommitMigration", "off")
    t.join(120)
    assert t.error is not None, "moveChunk succeeded although the config server was killed"
    mc.config.start()
    wait_until(lambda: donor.config.migrationCoordinators.count_documents({}) == 0,
               timeout=120, what="the donor to resolve the migration with the config server")
    assert _chunk_at(mc, ns, 3000)["shard"] == "shard0"
    r = mc.router_client()
    assert sorted(d["_id"] for d in r.mig[name].find({}, {"_id": 1})) == list(range(N))
    wait_until(lambda: _direct(mc, 1, name).count_documents({}) == 0, timeout=60,
               what="the recipient's copy to be deleted")
    r.admin.command("moveChunk", ns, find={"x": 3000}, to="shard1")
    assert sorted(d["_id"] for d in r.mig[name].find({}, {"_id": 1})) == list(range(N))


def test_config_server_killed_after_the_commit_finishes_the_commit(mc):
    # Item 4: the config server committed, then dies before the donor finished; once it is
    # back the donor completes the commit sequence (its refresh needs the config server).
    name = "crash_config_after"
    r, ns = _crash_setup(mc, name)
    donor = mc.shard_client(0)
    t = run_to_fail_point(donor, "moveChunkHangAtStep5", _mover(mc, ns), catch=PyMongoError)
    mc.config.kill()
    fail_point(donor, "moveChunkHangAtStep5", "off")
    t.join(120)
    mc.config.start()
    wait_until(lambda: donor.config.migrationCoordinators.count_documents({}) == 0,
               timeout=120, what="the donor to finish the committed migration")
    assert _chunk_at(mc, ns, 3000)["shard"] == "shard1"
    r = mc.router_client()
    assert sorted(d["_id"] for d in r.mig[name].find({}, {"_id": 1})) == list(range(N))
    wait_until(lambda: _direct(mc, 0, name).count_documents({"x": {"$gte": 2500}}) == 0,
               timeout=60, what="the donor's orphans to be deleted")
    assert _direct(mc, 1, name).count_documents({}) == N - 2500


def test_recipient_killed_after_its_commit_keeps_the_documents(mc):
    # The recipient has applied the last changes and answered _recvChunkCommit; the donor
    # then commits. A kill -9 of the recipient right then must not lose what it now owns
    # (it makes its writes durable before it answers).
    name = "crash_recipient_after"
    r, ns = _crash_setup(mc, name)
    # The longest commit interval MongoDB allows: unjournaled writes would be lost.
    mc.shard_client(1).admin.command("setParameter", 1, journalCommitInterval=500)
    donor = mc.shard_client(0)
    t = run_to_fail_point(donor, "hangBeforeCommitMigration", _mover(mc, ns), catch=PyMongoError)
    mc.shards[1].kill()
    fail_point(donor, "hangBeforeCommitMigration", "off")
    t.join(120)
    mc.restart_shard(1)
    wait_until(lambda: donor.config.migrationCoordinators.count_documents({}) == 0,
               timeout=120, what="the donor to finish the migration")
    assert _chunk_at(mc, ns, 3000)["shard"] == "shard1"
    assert _direct(mc, 1, name).count_documents({}) == N - 2500
    r = mc.router_client()
    assert sorted(d["_id"] for d in r.mig[name].find({}, {"_id": 1})) == list(range(N))
