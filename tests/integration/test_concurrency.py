"""Many connections reading and writing at once: no global lock, WriteConflict retries
that lose no update, DDL on one collection running beside CRUD on another, and CRUD
racing drops/re-creation of its own collection without errors or corruption."""

import threading

import pymongo
import pytest


def run_threads(n, fn):
    errors = []

    def wrap(i):
        try:
            fn(i)
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    return threads, errors


def test_concurrent_writers_and_ddl_on_another_collection(node):
    host = node.host
    stop = threading.Event()
    ddl_rounds = [0]

    def ddl(_):
        c = pymongo.MongoClient(host)
        db = c.test
        while not stop.is_set():
            db.create_collection("ddl") if "ddl" not in db.list_collection_names() else None
            db.ddl.create_index("x")
            db.ddl.insert_one({"x": 1})
            db.ddl.drop_index("x_1")
            db.ddl.drop()
            ddl_rounds[0] += 1
        c.close()

    per_thread = 300

    def writer(i):
        c = pymongo.MongoClient(host)
        coll = c.test.hot
        for k in range(per_thread):
            coll.insert_one({"_id": "%d-%d" % (i, k), "w": i})
            # Every thread increments the same document: conflicts are retried, not lost.
            coll.update_one({"_id": "counter"}, {"$inc": {"n": 1}}, upsert=True)
            if k % 50 == 0:
                assert coll.count_documents({"w": i}) == k + 1
        c.close()

    ddl_threads, ddl_errors = run_threads(1, ddl)
    writers, errors = run_threads(6, writer)
    for t in writers:
        t.join()
    stop.set()
    for t in ddl_threads:
        t.join()
    assert errors == [] and ddl_errors == []
    db = node.client().test
    assert db.hot.count_documents({"w": {"$exists": True}}) == 6 * per_thread
    assert db.hot.find_one({"_id": "counter"})["n"] == 6 * per_thread
    assert db.command("validate", "hot")["valid"] is True
    assert ddl_rounds[0] > 0


def test_crud_racing_drops_of_its_own_collection(node):
    host = node.host
    stop = threading.Event()

    def dropper(_):
        # Bounded: every re-creation makes new tables that storage removes only after a
        # checkpoint covers the drop (thousands per second would exhaust descriptors).
        c = pymongo.MongoClient(host)
        drops = 0
        while not stop.is_set() and drops < 300:
            if c.test.command("drop", "churn").get("ns"):
                drops += 1
        c.close()

    def writer(i):
        c = pymongo.MongoClient(host)
        coll = c.test.churn
        for k in range(200):
            # Inserts re-create the collection implicitly; reads see it or not at all.
            coll.insert_one({"_id": "%d-%d" % (i, k)})
            coll.update_many({}, {"$set": {"seen": True}})
            list(coll.find().batch_size(3).limit(10))
        c.close()

    droppers, drop_errors = run_threads(1, dropper)
    writers, errors = run_threads(4, writer)
    for t in writers:
        t.join()
    stop.set()
    for t in droppers:
        t.join()
    # A cursor whose collection was dropped between batches may be killed (43 or 175);
    # anything else is a bug.
    unexpected = [e for e in errors + drop_errors
                  if "CursorNotFound" not in e and "QueryPlanKilled" not in e
                  and "cursor id" not in e and "collection dropped" not in e]
    assert unexpected == []
    db = node.client().test
    if "churn" in db.list_collection_names():
        assert db.command("validate", "churn")["valid"] is True


@pytest.mark.parametrize("readers", [8])
def test_concurrent_readers_see_consistent_snapshots(node, readers):
    db = node.client().test
    db.snap.insert_many([{"_id": i, "v": 0} for i in range(500)])
    host = node.host
    stop = threading.Event()

    def bumper(_):
        # Each update moves every document to the same new version in one statement
        # (one write unit), so a snapshot sees a single version across all batches.
        c = pymongo.MongoClient(host)
        v = 0
        while not stop.is_set():
            v += 1
            c.test.snap.update_many({}, {"$set": {"v": v}})
        c.close()

    def reader(_):
        c = pymongo.MongoClient(host)
        for _ in range(20):
            versions = {d["v"] for d in c.test.snap.find().batch_size(50)}
            assert len(versions) == 1, versions
        c.close()

    bumpers, bump_errors = run_threads(1, bumper)
    rs, errors = run_threads(readers, reader)
    for t in rs:
        t.join()
    stop.set()
    for t in bumpers:
        t.join()
    assert errors == [] and bump_errors == []


def test_create_drop_churn_does_not_exhaust_descriptors(shale_process):
    """Dropped tables keep their files until a checkpoint covers the drop; a burst of
    drops must bring that checkpoint forward instead of running out of descriptors
    (WiredTiger panics when it cannot open a file). With 256 descriptors and the default
    60 s checkpoint interval, 400 create/drop cycles (two tables each) would not fit."""
    node = shale_process(["node", "--replSet", "rs0"], name="churn", nofile=256)
    c = node.client()
    for i in range(400):
        c.test["t%d" % i].insert_one({"_id": i})
        c.test.drop_collection("t%d" % i)
    c.test.survivor.insert_one({"_id": 1})
    assert c.test.list_collection_names() == ["survivor"]
    assert c.admin.command("ping")["ok"] == 1.0
