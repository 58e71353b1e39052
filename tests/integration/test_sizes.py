"""Record counts and data sizes persisted in the _sizes table (MongoDB's sizeStorer):
exact after a clean restart; after kill -9 possibly off by the writes since the last
checkpoint, and corrected by validate."""

import threading

import pymongo
from pymongo import WriteConcern

from shale_fixtures import wait_until


def _stats(db, coll):
    s = db.command("collStats", coll)
    return s["count"], s["size"]


def test_counts_exact_after_clean_restart(shale_process):
    node = shale_process(["node"], name="sizes")
    db = node.client().test
    db.c.insert_many([{"_id": i, "pad": "x" * (i % 50)} for i in range(3000)])
    db.c.delete_many({"_id": {"$lt": 500}})
    db.c.update_many({"_id": {"$gte": 2500}}, {"$set": {"grown": "y" * 100}})
    db.other.insert_many([{"_id": i} for i in range(10)])
    db.other.drop()
    before = _stats(db, "c")
    assert before[0] == 2500
    assert node.stop() == 0
    node.start()
    db = node.client().test
    assert _stats(db, "c") == before
    assert db.c.estimated_document_count() == 2500
    v = db.command("validate", "c")
    assert v["valid"] and v["nrecords"] == 2500 and v["warnings"] == []


def test_counts_after_kill9_corrected_by_validate(shale_process):
    node = shale_process(["node", "--replSet", "rs0"], name="sizes")
    c = node.client()
    coll = c.test.c.with_options(write_concern=WriteConcern(j=True))
    coll.insert_many([{"_id": i} for i in range(2000)])
    # Concurrent journaled writes right up to the crash.
    stop = threading.Event()
    acked = []

    def writer(base):
        cl = node.client()
        w = cl.test.c.with_options(write_concern=WriteConcern(j=True))
        i = 0
        while not stop.is_set():
            try:
                w.insert_one({"_id": base + i})
                acked.append(base + i)
            except pymongo.errors.PyMongoError:
                return
            i += 1

    threads = [threading.Thread(target=writer, args=(100000 * (k + 1),)) for k in range(2)]
    for t in threads:
        t.start()
    wait_until(lambda: len(acked) >= 300, what="300 acknowledged writes")
    node.kill()
    stop.set()
    for t in threads:
        t.join()
    node.start()
    db = node.client().test
    n = db.c.count_documents({})  # a real count, not the fast count
    assert n >= 2000 + len(acked)
    v = db.command("validate", "c")
    assert v["valid"], v
    assert v["nrecords"] == n
    # Whatever the fast count was, validate set it to what is there.
    assert _stats(db, "c")[0] == n
    assert db.c.estimated_document_count() == n
    assert db.command("validate", "c")["warnings"] == []
