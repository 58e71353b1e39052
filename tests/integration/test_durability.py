"""The durability contract, tested with kill -9: j:true / w:"majority" writes survive a
crash; j:false writes reach the journal within commitIntervalMs (100 ms); nothing is
ever half-applied (documents, their index entries and their oplog entries appear
together or not at all)."""

import random
import threading
import time

import pymongo
from pymongo import WriteConcern

from shale_fixtures import wait_until


def _restart(node):
    node.kill()
    node.start()
    return node.client()


def _check_consistent(c, coll="c"):
    db = c.test
    v = db.command("validate", coll)
    assert v["valid"] is True, v
    ids = {d["_id"] for d in db[coll].find({}, {"_id": 1})}
    # every document has its index entry: a hinted _id scan returns the same set
    via_index = {d["_id"] for d in db[coll].find({}, {"_id": 1}).hint("_id_")}
    assert ids == via_index
    # every document has its insert in the oplog (and the oplog names no ghost)
    inserted = {e["o"]["_id"] for e in c.local["oplog.rs"].find({"ns": "test." + coll,
                                                                 "op": "i"})}
    deleted = {e["o"]["_id"] for e in c.local["oplog.rs"].find({"ns": "test." + coll,
                                                                "op": "d"})}
    assert ids <= inserted
    assert ids == inserted - deleted
    return ids


def test_journaled_writes_survive_kill9(shale_process):
    node = shale_process(["node", "--replSet", "rs0"], name="dur")
    c = node.client()
    c.test.c.with_options(write_concern=WriteConcern(j=True)).insert_many(
        [{"_id": i} for i in range(100)])
    c.test.c.with_options(write_concern=WriteConcern(w="majority")).insert_one({"_id": "m"})
    c = _restart(node)
    assert c.test.c.count_documents({}) == 101
    _check_consistent(c)


def test_unjournaled_write_reaches_journal_within_commit_interval(shale_process):
    node = shale_process(["node", "--replSet", "rs0"], name="dur")
    c = node.client()
    c.test.c.insert_one({"_id": 1})
    # The bound under test is time itself: after 3x the commit interval the write
    # must be in the journal.
    time.sleep(0.3)
    c = _restart(node)
    assert c.test.c.find_one({"_id": 1}) == {"_id": 1}


def test_ddl_survives_kill9(shale_process):
    node = shale_process(["node", "--replSet", "rs0"], name="dur")
    c = node.client()
    wc = WriteConcern(j=True)
    c.test.create_collection("made")
    c.test.made.with_options(write_concern=wc).insert_one({"_id": 1, "a": 1})
    c.test.made.create_index("a", unique=True)
    c.test.gone.with_options(write_concern=wc).insert_one({"_id": 1})
    c.test.gone.drop()
    c.test.old.with_options(write_concern=wc).insert_one({"_id": 1})
    c.test.old.rename("new")
    c.test.c.with_options(write_concern=wc).insert_one({"_id": "last"})  # flush DDL too
    c = _restart(node)
    assert sorted(c.test.list_collection_names()) == ["c", "made", "new"]
    assert {i["name"] for i in c.test.made.list_indexes()} == {"_id_", "a_1"}
    with pytest_raises_dup():
        c.test.made.insert_one({"_id": 2, "a": 1})


class pytest_raises_dup:
    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        assert et is not None and issubclass(et, pymongo.errors.DuplicateKeyError)
        return True


def test_kill9_under_concurrent_writers(shale_process):
    """Random kill points under concurrent writers; invariants after each restart."""
    node = shale_process(["node", "--replSet", "rs0"], name="loop")
    rng = random.Random(12345)
    acked_j = set()
    lock = threading.Lock()
    for round_no in range(4):
        c = node.client()
        stop = threading.Event()

        def writer(w):
            cl = pymongo.MongoClient(node.host, serverSelectionTimeoutMS=2000,
                                     socketTimeoutMS=2000, retryWrites=False)
            coll = cl.test.c
            i = 0
            while not stop.is_set():
                key = "%d-%d-%d" % (round_no, w, i)
                i += 1
                try:
                    if i % 3 == 0:
                        coll.with_options(write_concern=WriteConcern(j=True)).insert_one(
                            {"_id": key, "w": w})
                        with lock:
                            acked_j.add(key)
                    elif i % 3 == 1:
                        coll.insert_many([{"_id": key + "-%d" % k} for k in range(5)])
                    else:
                        coll.delete_one({"_id": "%d-%d-%d" % (round_no, w, i - 2) + "-0"})
                except pymongo.errors.PyMongoError:
                    return
        threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        # Kill once some journaled writes of this round were acknowledged, at a random point.
        wait_until(lambda: any(k.startswith("%d-" % round_no) for k in list(acked_j)),
                   what="journaled writes")
        time.sleep(rng.uniform(0.0, 0.3))
        node.kill()
        stop.set()
        for t in threads:
            t.join()
        node.start()
        c = node.client()
        ids = _check_consistent(c)
        missing = acked_j - ids
        assert not missing, "lost journaled writes: %s" % sorted(missing)[:10]


def test_oplog_is_truncated_to_its_size_and_recovery_still_works(shale_process):
    # A 1 MB oplog and a checkpoint every second: after ~4 MB of writes the checkpointer
    # removes the oldest entries, but never those recovery needs, so kill -9 loses nothing.
    node = shale_process(["node", "--replSet", "rs0", "--oplogSize", "1",
                          "--setParameter", "syncdelay=1"], name="oplogtrunc")
    c = node.client()
    pad = "x" * 4000
    for batch in range(10):
        c.test.c.insert_many([{"_id": batch * 100 + i, "pad": pad} for i in range(100)])
    assert c.admin.command("getCmdLineOpts")["parsed"]["replication"]["oplogSizeMB"] == 1

    def oplog_bytes():
        return c.local.command("collStats", "oplog.rs")["size"]
    # One batch of 1000 entries may exceed the bound while the next pass runs.
    wait_until(lambda: oplog_bytes() < 1.5 * 1024 * 1024, timeout=30, what="oplog truncation")
    assert c.local["oplog.rs"].count_documents({"ns": "test.c", "op": "i"}) < 1000
    c.test.c.with_options(write_concern=WriteConcern(j=True)).insert_one({"_id": "last"})
    c = _restart(node)
    assert c.test.c.count_documents({}) == 1001
    v = c.test.command("validate", "c")
    assert v["valid"] is True, v
