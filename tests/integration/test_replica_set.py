"""Replica sets (issue 18): three real `shale node --replSet rs` processes initiated as one
set; replSetInitiate's validation, replSetGetStatus / replSetGetConfig / hello, replication of
writes to the secondaries, pymongo's replicaSet discovery and read preferences, the
not-primary errors, and write concerns waited on the members' progress."""

import os
import signal
import time

import pymongo
import pytest
from bson import Timestamp
from pymongo import ReadPreference
from pymongo.errors import NotMasterError as NotPrimaryError, OperationFailure
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

import wire_util
from shale_fixtures import cleanup_later, start_replica_set, wait_until

SET = "rs"
FROZEN = []  # the member test_step_down stepped down (frozen for 30 s)


@pytest.fixture(scope="module")
def rs(request):
    nodes = start_replica_set(SET, "rs")
    yield nodes
    failed = request.node.session.testsfailed > 0
    cleanup_later(nodes, lambda i, p: ("replica-set-%s" % p.name) if failed else None)


def direct(node, **kw):
    return node.client(directConnection=True, **kw)


def set_client(nodes, **kw):
    hosts = ",".join(n.host for n in nodes)
    return pymongo.MongoClient("mongodb://%s/?replicaSet=%s" % (hosts, SET),
                               serverSelectionTimeoutMS=15000, **kw)


def test_status_config_and_hello(rs):
    primary, s1, _ = rs
    st = direct(primary).admin.command("replSetGetStatus")
    assert st["set"] == SET and st["myState"] == 1 and st["term"] == 1
    assert [m["name"] for m in st["members"]] == [n.host for n in rs]
    assert st["members"][0]["self"] is True
    assert all(m["health"] == 1 for m in st["members"])
    assert st["majorityVoteCount"] == 2

    cfg = direct(s1).admin.command("replSetGetConfig")["config"]
    assert cfg["_id"] == SET and cfg["version"] == 1 and cfg["protocolVersion"] == 1
    assert cfg["members"][1]["host"] == s1.host
    assert cfg["members"][1]["priority"] == 1 and cfg["members"][1]["votes"] == 1
    assert cfg["settings"]["heartbeatIntervalMillis"] == 200
    assert cfg["settings"]["electionTimeoutMillis"] == 2000

    h = direct(primary).admin.command("hello")
    assert h["isWritablePrimary"] is True and h["secondary"] is False
    assert h["hosts"] == [n.host for n in rs]
    assert h["setName"] == SET and h["setVersion"] == 1
    assert h["primary"] == primary.host and h["me"] == primary.host
    assert "electionId" in h and "topologyVersion" in h and "lastWrite" in h

    def secondary_knows_primary():
        h2 = direct(s1).admin.command("hello")
        return h2["secondary"] is True and h2.get("primary") == primary.host
    wait_until(secondary_knows_primary, 10, "the secondary's hello names the primary")
    h2 = direct(s1).admin.command("hello")
    assert h2["isWritablePrimary"] is False and h2["me"] == s1.host
    assert "electionId" not in h2


def test_initiate_validation(rs, shale_process):
    spare = shale_process(["node", "--replSet", "other"])
    adm = direct(spare).admin

    def code(cfg):
        with pytest.raises(OperationFailure) as e:
            adm.command("replSetInitiate", cfg)
        return e.value.code

    me = {"_id": 0, "host": spare.host}
    assert code({"_id": "wrong", "members": [me]}) == 93
    assert code({"_id": "other", "members": [me, dict(me, _id=1)]}) == 93  # same host
    assert code({"_id": "other", "members": [me, {"_id": 0, "host": "127.0.0.1:1"}]}) == 93
    assert code({"_id": "other", "members": [me, {"_id": 1, "host": "127.0.0.1:1",
                                                  "hidden": True}]}) == 93
    assert code({"_id": "other", "members": [me, {"_id": 1, "host": "127.0.0.1:1",
                                                  "secondaryDelaySecs": 5}]}) == 93
    assert code({"_id": "other", "members": [me, {"_id": 1, "host": "127.0.0.1:1",
                                                  "arbiterOnly": True, "votes": 0}]}) == 93
    assert code({"_id": "other", "members": [dict(me, votes=2)]}) == 2
    assert code({"_id": "other", "members": [{"_id": 0, "host": "127.0.0.1:1"}]}) == 74
    # a member that does not answer fails the quorum check (NodeNotFound)
    assert code({"_id": "other", "members": [me, {"_id": 1, "host": "127.0.0.1:1"}]}) == 74
    # a configured member refuses a second initiate
    with pytest.raises(OperationFailure) as e:
        direct(rs[1]).admin.command("replSetInitiate", {"_id": SET, "members": [me]})
    assert e.value.code == 23
    # rs.initiate() without a configuration: a set of this node; then the node stays primary
    adm.command("replSetInitiate")
    assert adm.command("replSetGetConfig")["config"]["members"][0]["host"] == spare.host
    assert adm.command("hello")["isWritablePrimary"] is True
    direct(spare).test.c.insert_one({"_id": 1}, )


def test_writes_replicate_to_secondaries(rs):
    primary, s1, s2 = rs
    coll = direct(primary).test.get_collection("repl", write_concern=WriteConcern(w="majority", wtimeout=10000))
    coll.insert_many([{"_id": i, "v": i} for i in range(100)])
    coll.update_one({"_id": 1}, {"$set": {"v": "changed"}})
    coll.delete_one({"_id": 2})
    coll.create_index("v")
    coll.insert_one({"_id": "last"})

    for sec in (s1, s2):
        c = direct(sec, readPreference="secondaryPreferred").test.repl
        wait_until(lambda: c.find_one({"_id": "last"}) is not None, 10, "replication")
        assert c.count_documents({}) == 100
        assert c.find_one({"_id": 1})["v"] == "changed"
        assert c.find_one({"_id": 2}) is None
        assert "v_1" in c.index_information()
    # the secondary's oplog holds the primary's entries at the primary's timestamps
    top = direct(primary).local.oplog.rs.find_one({"o._id": "last"})
    mine = direct(s1, readPreference="secondaryPreferred").local.oplog.rs.find_one(
        {"o._id": "last"})
    assert mine["ts"] == top["ts"] and mine["op"] == "i" and mine["ui"] == top["ui"]


def test_secondaries_keep_change_stream_pre_images(rs):
    """A pre-image is written with its update; secondaries write it while applying the entry
    (as MongoDB's), so a stream on any member finds it (issue 21)."""
    primary, s1, s2 = rs
    db = direct(primary).test
    db.create_collection("pre", changeStreamPreAndPostImages={"enabled": True})
    coll = db.get_collection("pre", write_concern=WriteConcern(w=3, wtimeout=10000))
    coll.insert_one({"_id": 1, "v": 1})
    coll.update_one({"_id": 1}, {"$set": {"v": 2}})
    coll.delete_one({"_id": 1})
    want = list(direct(primary).config["system.preimages"].find({}, sort=[("_id.ts", 1)]))
    assert [r["preImage"] for r in want[-2:]] == [{"_id": 1, "v": 1}, {"_id": 1, "v": 2}]
    for sec in (s1, s2):
        got = direct(sec, readPreference="secondaryPreferred").config["system.preimages"]
        assert list(got.find({}, sort=[("_id.ts", 1)])) == want


def test_driver_discovers_the_set(rs):
    c = set_client(rs)
    # w:3: the reads below go to either secondary (one could otherwise still lack it)
    c.test.get_collection("disc", write_concern=WriteConcern(w=3, wtimeout=10000)).insert_one(
        {"_id": 1, "x": "y"})
    assert c.primary == ("127.0.0.1", rs[0].port)
    wait_until(lambda: len(c.secondaries) == 2, 15, "the driver sees two secondaries")
    sec = c.test.get_collection("disc", read_preference=ReadPreference.SECONDARY)
    wait_until(lambda: sec.find_one({"_id": 1}) is not None, 10, "a secondary read")
    assert sec.find_one({"_id": 1})["x"] == "y"
    c.close()


def test_not_primary_errors(rs):
    _, s1, _ = rs
    with pytest.raises(NotPrimaryError) as e:
        direct(s1).test.np.insert_one({"_id": 1})
    assert e.value.details["code"] == 10107
    with pytest.raises((OperationFailure, NotPrimaryError)) as e:
        direct(s1).test.command("create", "np2")
    assert e.value.details["code"] == 10107
    # a read that does not allow secondaries (no $readPreference: primary)
    sock = wire_util.connect(s1.port)
    reply = wire_util.command(sock, {"find": "repl", "$db": "test"})
    assert reply["ok"] == 0 and reply["code"] == 13435, reply
    reply = wire_util.command(sock, {"find": "repl", "$db": "test",
                                     "$readPreference": {"mode": "secondaryPreferred"}})
    assert reply["ok"] == 1
    # the local database is the member's own
    reply = wire_util.command(sock, {"find": "oplog.rs", "$db": "local", "limit": 1})
    assert reply["ok"] == 1
    sock.close()


def test_write_concern_waits_for_members(rs):
    primary, _, s2 = rs
    db = direct(primary).test
    r = db.command("insert", "wc", documents=[{"_id": 1}], writeConcern={"w": 3})
    assert r["n"] == 1 and "writeConcernError" not in r
    r = db.command("insert", "wc", documents=[{"_id": 2}], writeConcern={"w": 4})
    assert r["writeConcernError"]["code"] == 100
    r = db.command("insert", "wc", documents=[{"_id": 3}], writeConcern={"w": "nope"})
    assert r["writeConcernError"]["code"] == 79

    # a stopped secondary: w: 3 times out, w: "majority" (2 of 3) still succeeds
    os.kill(s2.proc.pid, signal.SIGSTOP)
    try:
        r = db.command("insert", "wc", documents=[{"_id": 4}],
                       writeConcern={"w": 3, "wtimeout": 300})
        wce = r["writeConcernError"]
        assert wce["code"] == 64 and wce["errInfo"]["wtimeout"] is True
        assert r["n"] == 1
        r = db.command("insert", "wc", documents=[{"_id": 5}],
                       writeConcern={"w": "majority", "wtimeout": 5000})
        assert "writeConcernError" not in r
    finally:
        os.kill(s2.proc.pid, signal.SIGCONT)
    r = db.command("insert", "wc", documents=[{"_id": 6}], writeConcern={"w": 3, "wtimeout": 10000})
    assert "writeConcernError" not in r


def test_majority_reads(rs):
    primary, s1, _ = rs
    coll = direct(primary).test.get_collection("maj", write_concern=WriteConcern(w="majority", wtimeout=10000))
    coll.insert_one({"_id": 1})
    rc = direct(primary).test.get_collection("maj", read_concern=ReadConcern("majority"))
    assert rc.find_one({"_id": 1}) == {"_id": 1}
    st = direct(primary).admin.command("replSetGetStatus")
    committed = st["optimes"]["lastCommittedOpTime"]["ts"]
    assert isinstance(committed, Timestamp) and committed.time > 0
    # the secondary learns the commit point and reads at it
    sec = direct(s1, readPreference="secondaryPreferred").test.get_collection(
        "maj", read_concern=ReadConcern("majority"))
    wait_until(lambda: sec.find_one({"_id": 1}) is not None, 10, "a majority read on a secondary")


def test_secondary_restart_catches_up(rs):
    primary, _, s2 = rs
    s2.stop()
    coll = direct(primary).test.get_collection("restart", write_concern=WriteConcern(w=2, wtimeout=10000))
    coll.insert_many([{"_id": i} for i in range(50)])
    s2.start()
    c = direct(s2, readPreference="secondaryPreferred").test.restart
    wait_until(lambda: c.count_documents({}) == 50, 20, "the restarted secondary catches up")
    st = direct(s2).admin.command("replSetGetStatus")
    assert st["myState"] == 2
    r = direct(primary).test.command("insert", "restart", documents=[{"_id": 99}],
                                     writeConcern={"w": 3, "wtimeout": 10000})
    assert "writeConcernError" not in r


def test_step_down(rs):
    primary = rs[0]
    with pytest.raises((OperationFailure, NotPrimaryError)) as e:
        direct(rs[1]).admin.command("replSetStepDown", 10)
    assert e.value.details["code"] == 10107
    with pytest.raises(OperationFailure) as e:
        direct(primary).admin.command("replSetStepDown", 5, secondaryCatchUpPeriodSecs=10)
    assert e.value.code == 2
    direct(primary).admin.command("replSetStepDown", 30, secondaryCatchUpPeriodSecs=10)
    assert direct(primary).admin.command("hello")["isWritablePrimary"] is False

    def other_primary():
        return any(direct(n).admin.command("hello")["isWritablePrimary"] for n in rs[1:])
    wait_until(other_primary, 20, "another member is elected")
    new = [n for n in rs[1:] if direct(n).admin.command("hello")["isWritablePrimary"]][0]
    # the set keeps taking majority writes, and the stepped-down member replicates them
    r = direct(new).test.command("insert", "sd", documents=[{"_id": 1}],
                                 writeConcern={"w": 3, "wtimeout": 10000})
    assert "writeConcernError" not in r
    # the next test kills whichever member is primary: put the new one in front. The
    # stepped-down member stays frozen for its 30 s, so only the third member can win the
    # next election, with the stepped-down member's vote (its own local.* writes must not
    # make it refuse a candidate that has every replicated entry)
    i = rs.index(new)
    rs[0], rs[i] = rs[i], rs[0]
    FROZEN.append(primary)


def test_kill_primary_elects_another(rs):
    """Last in the module: kill -9 of the primary; a secondary is elected in a new term, no
    majority-acknowledged write is lost, and the old primary comes back as a secondary."""
    old = rs[0]
    c = set_client(rs)
    coll = c.test.get_collection("fo", write_concern=WriteConcern(w="majority", wtimeout=10000))
    coll.insert_many([{"_id": i} for i in range(20)])
    # every member has every entry (a member lacking a majority-acknowledged one must not win:
    # the frozen one would refuse it, and no one could be elected before its freeze ends)
    coll.with_options(write_concern=WriteConcern(w=3, wtimeout=10000)).insert_one({"_id": "all"})
    t0 = time.monotonic()
    old.kill()

    def write():
        try:
            coll.insert_one({"_id": "after-%f" % time.monotonic()})
            return True
        except pymongo.errors.PyMongoError:
            return False
    wait_until(write, 40, "a write after the primary died")
    failover = time.monotonic() - t0
    new = [n for n in rs[1:] if direct(n).admin.command("hello")["isWritablePrimary"]]
    assert len(new) == 1
    if FROZEN:
        # elected with the frozen, stepped-down member's vote, well before its freeze ends
        assert new[0] is not FROZEN[0] and failover < 20
    st = direct(new[0]).admin.command("replSetGetStatus")
    assert st["term"] >= 2
    assert [m["stateStr"] for m in st["members"]].count("PRIMARY") == 1
    assert coll.count_documents({"_id": {"$lt": 100}}) == 20
    print("failover: %.1f s from kill -9 to the first acknowledged write" % failover)

    # The old primary comes back as a secondary, never as a second primary (an entry it wrote
    # that no one received is rolled back first: test_replica_set_rollback.py).
    old.start()
    oc = direct(old, readPreference="secondaryPreferred")
    wait_until(lambda: oc.admin.command("replSetGetStatus")["myState"] == 2, 20,
               "the old primary rejoins as a secondary")
    assert oc.admin.command("hello")["isWritablePrimary"] is False
    c.close()
