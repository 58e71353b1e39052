"""Initial sync (issue 18): a member with none of the set's data -- every member right after
replSetInitiate, or one whose dbpath was wiped -- clones every database from its sync source
(collections with their UUIDs and options, indexes, documents) while the set takes writes,
applies the oplog from where the clone began, and goes STARTUP2 -> SECONDARY."""

import shutil
import threading

import pymongo
import pytest

from shale_fixtures import cleanup_later, fail_point, start_replica_set, logged, wait_until

SET = "is"


@pytest.fixture(scope="module")
def rs(request):
    # no-ops every idle second: only the primary may write them (test below)
    nodes = start_replica_set(SET, "is", args=["--setParameter", "periodicNoopIntervalSecs=1"])
    yield nodes
    failed = request.node.session.testsfailed > 0
    cleanup_later(nodes, lambda i, p: ("initial-sync-%s" % p.name) if failed else None)


def direct(node, **kw):
    return node.client(directConnection=True, **kw)


def states(node):
    return [m["stateStr"] for m in direct(node).admin.command("replSetGetStatus")["members"]]


def uuids(node, db):
    return {c["name"]: c["info"]["uuid"]
            for c in direct(node, readPreference="secondaryPreferred")[db].list_collections()}


def test_members_clone_the_initiators_collections(rs):
    """Each member created config.system.sessions on its own before initiate; initial sync
    replaces it with the primary's, so the primary's later writes to it apply everywhere."""
    primary, s1, s2 = rs
    assert all(logged(s, 2180041) for s in (s1, s2))
    c = direct(primary)
    with c.start_session() as sess:
        c.test.sessions.insert_one({"_id": 1}, session=sess)
        c.admin.command("refreshLogicalSessionCacheNow")
    want = uuids(primary, "config")
    assert "system.sessions" in want
    n = c.config.system.sessions.count_documents({})
    assert n >= 1
    for s in (s1, s2):
        wait_until(lambda: uuids(s, "config") == want, 10, "the primary's config collections")
        sc = direct(s, readPreference="secondaryPreferred")
        wait_until(lambda: sc.config.system.sessions.count_documents({}) >= n, 10,
                   "the primary's session records replicate")


def set_entries(node):
    """The (ts, t) of every entry of node's oplog outside the local database."""
    oplog = direct(node, readPreference="secondaryPreferred").local["oplog.rs"]
    return {(e["ts"], e.get("t")) for e in oplog.find({"ns": {"$not": {"$regex": "^local\\."}}},
                                                    {"ts": 1, "t": 1})}


def test_members_keep_none_of_their_own_entries(rs):
    """The members' own start-up entries (config.system.sessions, created before initiate in
    the same second as the set's first entry) leave their oplogs at initial sync: every
    non-local entry a secondary has is the set's, so none can pass for the newest of the
    set's entries (the fetcher would ask the source for it: OplogStartMissing)."""
    primary, s1, s2 = rs
    direct(primary).test.own.insert_one({"_id": 1})
    # idle seconds in which the secondaries receive nothing: the primary writes periodic
    # no-ops, the secondaries none of their own (an entry the set never had: rolled back
    # later, and once counted in elections)
    oplog = direct(primary).local["oplog.rs"]
    last = oplog.find_one({"o._id": 1, "ns": "test.own"})["ts"]
    for s in (s1, s2):
        fail_point(direct(s), "stopReplProducer", "alwaysOn")
    try:
        wait_until(lambda: oplog.count_documents({"ts": {"$gt": last},
                                                 "o.msg": "periodic noop"}) >= 3, 15,
                   "three periodic no-ops on the primary")
    finally:
        for s in (s1, s2):
            fail_point(direct(s), "stopReplProducer", "off")
    for s in (s1, s2):
        so = direct(s, readPreference="secondaryPreferred").local["oplog.rs"]
        wait_until(lambda: so.find_one({"ts": {"$gt": last}, "o.msg": "periodic noop"}), 10,
                   "the primary's no-op replicated")
    mine = set_entries(primary)
    for s in (s1, s2):
        wait_until(lambda: direct(s, readPreference="secondaryPreferred").test.own.find_one()
                   is not None, 10, "the insert replicates")
        extra = set_entries(s) - mine
        assert not extra, "%s has entries the primary never wrote: %s" % (s.name, sorted(extra))
    # a restart resumes from the newest of the set's entries and syncs at once
    s1.stop()
    s1.start()
    wait_until(lambda: states(primary)[1] == "SECONDARY", 15, "the restarted member syncs")
    direct(primary).test.own.insert_one({"_id": 2})
    wait_until(lambda: direct(s1, readPreference="secondaryPreferred").test.own
               .count_documents({}) == 2, 10, "the restarted member applies new entries")


def test_wiped_member_resyncs_under_writes(rs):
    primary, s1, s2 = rs
    db = direct(primary).test
    db.create_collection("capped", capped=True, size=1 << 20)
    db.plain.create_index([("a", 1)], unique=True, name="a_1")
    db.plain.create_index([("b", -1), ("c", 1)], name="b_c")
    db.plain.insert_many([{"_id": i, "a": i, "b": i % 7, "c": "x" * 100} for i in range(3000)])
    db.capped.insert_many([{"_id": i} for i in range(100)])
    direct(primary).other.things.insert_one({"_id": "t"})

    s2.stop()
    shutil.rmtree(s2.dbpath)

    stop = threading.Event()
    written = []

    def writer():
        c = direct(primary)
        i = 10000
        while not stop.is_set():
            c.test.plain.insert_one({"_id": i, "a": i, "b": 0})
            c.test.plain.update_one({"_id": i - 5000 if i > 12000 else 5}, {"$set": {"u": i}})
            written.append(i)
            i += 1
        c.close()

    t = threading.Thread(target=writer)
    t.start()
    try:
        s2.start()
        wait_until(lambda: logged(s2, 2180041), 60, "the wiped member clones the set")
        sc = direct(s2)
        wait_until(lambda: sc.admin.command("replSetGetStatus")["myState"] == 2, 60,
                   "the wiped member becomes a secondary")
        wait_until(lambda: len(written) > 20, 30, "writes during the sync")
    finally:
        stop.set()
        t.join()
    r = db.command("insert", "plain", documents=[{"_id": "last", "a": "last"}],
                   writeConcern={"w": 3, "wtimeout": 20000})
    assert "writeConcernError" not in r

    sec = direct(s2, readPreference="secondaryPreferred")
    assert sorted(sec.test.plain.find(), key=lambda d: str(d["_id"])) == \
        sorted(db.plain.find(), key=lambda d: str(d["_id"]))
    assert sec.test.capped.count_documents({}) == 100
    assert sec.other.things.find_one() == {"_id": "t"}
    for name in ("test", "other", "config", "admin"):
        assert uuids(s2, name) == uuids(primary, name)
    assert sec.test.capped.options()["capped"] is True
    want = {i["name"]: (i["key"], i.get("unique", False)) for i in db.plain.list_indexes()}
    got = {i["name"]: (i["key"], i.get("unique", False)) for i in sec.test.plain.list_indexes()}
    assert got == want
    # a unique index cloned as unique: the secondary's index answers the hinted query
    assert sec.test.plain.find({"a": 7}).hint("a_1").next()["_id"] == 7
    with pytest.raises(pymongo.errors.PyMongoError):
        direct(s2).test.plain.insert_one({"_id": "no"})
