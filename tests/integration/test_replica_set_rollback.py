"""Rollback (issue 18): a primary that acknowledged w:1 writes no other member received is
killed; the others elect a new primary that takes writes; the old primary restarts, finds the
common point with its sync source, saves its versions of the rolled-back documents under
<dbpath>/rollback/ and comes back as a SECONDARY with the set's data. Writes acknowledged with
w: "majority" are never rolled back."""

import glob
import os
import threading
import time

import bson
import pymongo
import pytest
from bson.timestamp import Timestamp
from pymongo.write_concern import WriteConcern

from shale_fixtures import (ShaleProcess, cleanup_later, fail_point, logged, start_replica_set,
                            wait_until)

SET = "rb"


@pytest.fixture(scope="module")
def rs(request):
    nodes = start_replica_set(SET, "rb")
    yield nodes
    failed = request.node.session.testsfailed > 0
    cleanup_later(nodes, lambda i, p: ("replica-set-rollback-%s" % p.name) if failed else None)


def direct(node, **kw):
    return node.client(directConnection=True, **kw)


def primary_of(nodes):
    for n in nodes:
        try:
            if direct(n).admin.command("hello")["isWritablePrimary"]:
                return n
        except pymongo.errors.PyMongoError:
            pass
    return None


def test_killed_primary_rolls_back_unreplicated_writes(rs):
    old, s1, s2 = rs
    maj = direct(old).test.get_collection("rb", write_concern=WriteConcern(w="majority",
                                                                           wtimeout=10000))
    maj.insert_many([{"_id": i, "v": "majority"} for i in range(5)])

    # Neither secondary receives what the primary acknowledges now with w:1.
    for s in (s1, s2):
        fail_point(direct(s), "stopReplProducer", "alwaysOn")
    try:
        w1 = direct(old).test.get_collection("rb", write_concern=WriteConcern(w=1))
        w1.insert_many([{"_id": "lost-%d" % i, "v": "w1"} for i in range(3)])
        w1.update_one({"_id": 1}, {"$set": {"v": "lost-update"}})
        # j: these entries survive the kill, so the restarted member has them to roll back
        w1.with_options(write_concern=WriteConcern(w=1, j=True)).delete_one({"_id": 2})
        # a w:"majority" write now cannot be acknowledged
        r = direct(old).test.command("insert", "rb", documents=[{"_id": "unacked"}],
                                     writeConcern={"w": "majority", "wtimeout": 300})
        assert r["writeConcernError"]["code"] == 64
        old.kill()
    finally:
        for s in (s1, s2):
            fail_point(direct(s), "stopReplProducer", "off")

    wait_until(lambda: primary_of([s1, s2]) is not None, 30, "a new primary")
    new = primary_of([s1, s2])
    new.client(directConnection=True).test.command(
        "insert", "rb", documents=[{"_id": "new", "v": "term2"}],
        writeConcern={"w": "majority", "wtimeout": 10000})

    old.start()
    oc = direct(old, readPreference="secondaryPreferred")
    # it comes back as a secondary, finds it diverged, rolls back, recovers, and is one again
    wait_until(lambda: logged(old, 2180033), 30, "the old primary rolls back")
    wait_until(lambda: oc.admin.command("replSetGetStatus")["myState"] == 2, 30,
               "the old primary is a secondary again")

    want = sorted(direct(new).test.rb.find(), key=lambda d: str(d["_id"]))
    wait_until(lambda: sorted(oc.test.rb.find(), key=lambda d: str(d["_id"])) == want, 20,
               "the old primary has the set's documents")
    # every majority-acknowledged write is there, nothing acknowledged with w:1 only
    assert {"_id": 1, "v": "majority"} in want and {"_id": 2, "v": "majority"} in want
    assert {"_id": "new", "v": "term2"} in want
    assert not any(str(d["_id"]).startswith("lost") or d["_id"] == "unacked" for d in want)

    # our versions of the rolled-back documents, in MongoDB's rollback file layout
    files = glob.glob(os.path.join(old.dbpath, "rollback", "*", "removed.*.bson"))
    saved = []
    for path in files:
        with open(path, "rb") as f:
            saved += bson.decode_all(f.read())
    assert {"_id": "lost-0", "v": "w1"} in saved
    assert {"_id": 1, "v": "lost-update"} in saved
    assert {"_id": "unacked"} in saved

    # the old primary replicates new writes again
    r = direct(new).test.command("insert", "rb", documents=[{"_id": "after"}],
                                 writeConcern={"w": 3, "wtimeout": 10000})
    assert "writeConcernError" not in r


def test_after_step_down_and_kill_the_set_recovers(rs):
    """The sequence of issue 18's stuck apply: the primary steps down (and stays frozen), the
    member elected instead acknowledges w:1 writes no one receives and is killed -9; the
    remaining secondary is elected with the frozen member's vote, the killed member rolls
    back its entries when it restarts and then applies the new primary's entries, so w:3
    and w:"majority" writes are acknowledged again."""
    first = primary_of(rs)
    direct(first).admin.command("replSetStepDown", 60, secondaryCatchUpPeriodSecs=10)
    others = [n for n in rs if n is not first]
    wait_until(lambda: primary_of(others) is not None, 20, "another member is elected")
    doomed = primary_of(others)
    third = [n for n in others if n is not doomed][0]
    for s in (first, third):
        fail_point(direct(s), "stopReplProducer", "alwaysOn")
    try:
        # w: 1 explicitly: the default (majority) would wait for members that do not fetch.
        direct(doomed).test.get_collection("rb2", write_concern=WriteConcern(w=1)).insert_many(
            [{"_id": "lost-%d" % i} for i in range(2)])
        doomed.kill()
    finally:
        for s in (first, third):
            fail_point(direct(s), "stopReplProducer", "off")
    wait_until(lambda: primary_of([third]) is not None, 20,
               "the remaining secondary is elected with the frozen member's vote")
    doomed.start()
    dc = direct(doomed, readPreference="secondaryPreferred")
    wait_until(lambda: dc.admin.command("replSetGetStatus")["myState"] == 2, 30,
               "the killed member rolls back and is a secondary again")
    r = direct(third).test.command("insert", "rb2", documents=[{"_id": "kept"}],
                                   writeConcern={"w": 3, "wtimeout": 15000})
    assert "writeConcernError" not in r
    r = direct(third).test.command("insert", "rb2", documents=[{"_id": "kept2"}],
                                   writeConcern={"w": "majority", "wtimeout": 10000})
    assert "writeConcernError" not in r
    wait_until(lambda: dc.test.rb2.count_documents({}) == 2, 10, "the set's documents")
    assert dc.test.rb2.count_documents({"_id": {"$regex": "^lost"}}) == 0


def newest_entry(node):
    return direct(node, readPreference="secondaryPreferred").local.oplog.rs.find(
        {"ns": {"$not": {"$regex": "^local\\."}}}).sort("$natural", -1).limit(1)[0]["ts"]


def rollbacks_of(node):
    """How many rollbacks node's log reports done (its log runs on across restarts)."""
    return node.read_log().count('"id":2180033,')


def test_killed_primary_ahead_of_the_set_applies_the_new_entries(rs):
    """Issue 18's stuck apply, made certain: the primary's clock runs 30 s ahead (a client's
    $clusterTime moved it), it stops exchanging heartbeats (so no one hears how far), writes
    w:1 entries no one receives and is killed -9. The new primary's entries then have
    timestamps between the common point and the killed member's newest entry. The killed
    member restarts, rolls back and must apply them: its stable timestamp never passed the
    majority commit point (it used to follow its own writes, and every apply then failed
    with "timestamp_transaction: Invalid argument").
"""
    old, others, top = kill_primary_ahead(rs, "ahead")
    wait_until(lambda: primary_of(others) is not None, 30, "a new primary")
    new = primary_of(others)
    r = direct(new).test.command("insert", "ahead", documents=[{"_id": "kept"}],
                                 writeConcern={"w": "majority", "wtimeout": 10000})
    assert "writeConcernError" not in r
    # the condition of the bug: the new primary writes below the killed member's newest entry
    assert newest_entry(new) < top

    rollbacks = rollbacks_of(old)
    old.start()
    oc = direct(old, readPreference="secondaryPreferred")
    wait_until(lambda: rollbacks_of(old) > rollbacks, 30, "the killed member rolls back")
    wait_until(lambda: oc.admin.command("replSetGetStatus")["myState"] == 2, 30,
               "the killed member is a secondary again")
    r = direct(new).test.command("insert", "ahead", documents=[{"_id": "kept2"}],
                                 writeConcern={"w": 3, "wtimeout": 10000})
    assert "writeConcernError" not in r
    assert sorted(d["_id"] for d in oc.test.ahead.find()) == ["kept", "kept2", "majority"]
    assert "timestamp_transaction" not in old.read_log()


def kill_primary_ahead(rs, coll):
    """Make the initiator primary with its clock 30 s ahead (a client's $clusterTime moved
    it) and its heartbeats dropped (no one hears how far), write w:1 entries no one receives
    (the others' fetchers stopped) into test.<coll>, kill it -9. Returns (killed, the others,
    its newest entry's ts)."""
    if primary_of(rs) is not rs[0]:
        t, out = step_up_in_background(rs[0])
        t.join(60)
        assert out and not isinstance(out[0], Exception), out
    wait_until(lambda: primary_of(rs) is rs[0], 30, "the initiator as primary")
    old = rs[0]
    others = [n for n in rs if n is not old]
    direct(old).test.command("insert", coll, documents=[{"_id": "majority"}],
                             writeConcern={"w": "majority", "wtimeout": 10000})
    for s in others:
        fail_point(direct(s), "stopReplProducer", "alwaysOn")
    try:
        oc = direct(old)
        fail_point(oc, "dropHeartbeats", "alwaysOn")
        ahead = Timestamp(int(time.time()) + 30, 1)
        with oc.start_session() as sess:
            sess.advance_cluster_time({"clusterTime": ahead,
                                       "signature": {"hash": b"\0" * 20, "keyId": 0}})
            # j: the entries survive the kill, so the restarted member has them to roll back
            oc.test.get_collection(coll, write_concern=WriteConcern(w=1, j=True)).insert_many(
                [{"_id": "lost-%d" % i} for i in range(3)], session=sess)
        top = newest_entry(old)
        assert top.time >= ahead.time
        old.kill()
    finally:
        for s in others:
            fail_point(direct(s), "stopReplProducer", "off")
    return old, others, top


def test_a_divergent_newest_entry_does_not_count_for_write_concern(rs):
    """Optimes compare as (term, timestamp): a killed primary restarted with a w:1 entry of
    its old term whose timestamp is above the new primary's writes (its clock ran ahead) has
    not reached those writes. Until it rolls back (its fetcher stopped from the start) it
    counts neither for w:3 nor for the majority (the remaining secondary stopped too); once
    it has rolled back, w:3 is satisfied."""
    old, others, top = kill_primary_ahead(rs, "optimes")
    wait_until(lambda: primary_of(others) is not None, 30, "a new primary")
    new = primary_of(others)
    other = [n for n in others if n is not new][0]
    pc = direct(new)
    assert "writeConcernError" not in pc.test.command(
        "insert", "optimes", documents=[{"_id": "kept"}],
        writeConcern={"w": "majority", "wtimeout": 10000})
    rollbacks = rollbacks_of(old)
    old.start(extra=["--setParameter", 'failpoint.stopReplProducer={"mode": "alwaysOn"}'])
    term = pc.admin.command("replSetGetStatus")["term"]

    def old_reported():
        m = [m for m in pc.admin.command("replSetGetStatus")["members"]
             if m["name"] == old.host][0]
        return m["stateStr"] == "SECONDARY" and m["optime"]["ts"] == top
    wait_until(old_reported, 30, "the new primary hears the restarted member's position")
    assert [m["optime"]["t"] for m in pc.admin.command("replSetGetStatus")["members"]
            if m["name"] == old.host][0] < term
    r = pc.test.command("insert", "optimes", documents=[{"_id": "w3"}],
                        writeConcern={"w": 3, "wtimeout": 1500})
    assert r["writeConcernError"]["code"] == 64, r
    fail_point(direct(other), "stopReplProducer", "alwaysOn")
    try:
        r = pc.test.command("insert", "optimes", documents=[{"_id": "majority2"}],
                            writeConcern={"w": "majority", "wtimeout": 1500})
        assert r["writeConcernError"]["code"] == 64, r
    finally:
        fail_point(direct(other), "stopReplProducer", "off")
    assert newest_entry(new) < top  # the condition: the new writes are below its entry
    assert rollbacks_of(old) == rollbacks
    fail_point(direct(old), "stopReplProducer", "off")
    wait_until(lambda: rollbacks_of(old) > rollbacks, 30, "the killed member rolls back")
    r = pc.test.command("insert", "optimes", documents=[{"_id": "w3b"}],
                        writeConcern={"w": 3, "wtimeout": 10000})
    assert "writeConcernError" not in r
    oc = direct(old, readPreference="secondaryPreferred")
    assert sorted(d["_id"] for d in oc.test.optimes.find()) == [
        "kept", "majority", "majority2", "w3", "w3b"]


def step_up_in_background(node):
    """replSetStepUp on node in a thread (it returns once the member is primary); the thread
    and a list that receives the reply or the error."""
    out = []

    def run():
        try:
            out.append(direct(node).admin.command("replSetStepUp"))
        except pymongo.errors.PyMongoError as e:
            out.append(e)
    t = threading.Thread(target=run)
    t.start()
    return t, out


def test_new_primary_catches_up_then_abort(rs):
    """Primary catch-up: a lagging member elected by stepUp (with the vote of another lagging
    member) fetches what the former primary wrote before it takes writes, so nothing is rolled
    back; replSetAbortPrimaryCatchUp ends a catch-up that cannot progress, and then the former
    primary's unreplicated writes are rolled back."""
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        direct(rs[0]).admin.command("replSetAbortPrimaryCatchUp")
    assert e.value.code == 20  # IllegalOperation: not in catch-up mode
    for round_, abort in ((0, False), (1, True)):
        old = primary_of(rs)
        lag, other = [n for n in rs if n is not old]
        for s in (lag, other):
            fail_point(direct(s), "stopReplProducer", "alwaysOn")
        try:
            direct(old).test.get_collection("cu", write_concern=WriteConcern(w=1)).insert_many(
                [{"_id": "r%d-%d" % (round_, i)} for i in range(3)])  # not replicated: w: 1
            t, out = step_up_in_background(lag)
            wait_until(lambda: logged(lag, 2180060), 10, "the lagging member enters catch-up")
            if abort:
                direct(lag).admin.command("replSetAbortPrimaryCatchUp")
            else:
                fail_point(direct(lag), "stopReplProducer", "off")
            t.join(15)
            assert out and isinstance(out[0], dict) and out[0]["ok"] == 1, out
        finally:
            for s in (lag, other):
                fail_point(direct(s), "stopReplProducer", "off")
        assert direct(lag).admin.command("hello")["isWritablePrimary"]
        have = direct(lag).test.cu.count_documents({"_id": {"$regex": "^r%d-" % round_}})
        assert have == (0 if abort else 3)
        r = direct(lag).test.command("insert", "cu", documents=[{"_id": "after-%d" % round_}],
                                     writeConcern={"w": 3, "wtimeout": 15000})
        assert "writeConcernError" not in r
    # the aborted catch-up's entries were rolled back on the former primary
    oc = direct(old, readPreference="secondaryPreferred")
    # (w:3 counted its position a moment before it left RECOVERING)
    wait_until(lambda: oc.admin.command("replSetGetStatus")["myState"] == 2, 10,
               "the former primary is a secondary again")
    assert oc.test.cu.count_documents({"_id": {"$regex": "^r1-"}}) == 0


def request_vote(node, term, candidate):
    return direct(node).admin.command(
        "replSetRequestVotes", 1, setName=SET, dryRun=False, term=term,
        candidateIndex=candidate, configVersion=1,
        lastAppliedOpTime={"ts": Timestamp(2 ** 32 - 1, 0), "t": term})


def test_a_vote_survives_kill_9(rs):
    """A member's vote is durable on its own (its _local table): killed -9 right after
    it voted, and after the set's entries took the vote's oplog slot where they could (the
    primary's first write of the second, which a secondary not fetching also takes for its
    vote), it does not vote for another candidate in that term after its restart."""
    primary = primary_of(rs)
    voter = [n for n in rs if n is not primary][0]
    idx = {n: i for i, n in enumerate(rs)}
    others = [i for n, i in idx.items() if n is not voter]
    fail_point(direct(voter), "stopReplProducer", "alwaysOn")
    # no one hears of the new term from the voter (the primary would step down, and an
    # election would move every term past it before the voter asks again)
    fail_point(direct(voter), "dropHeartbeats", "alwaysOn")
    try:
        term = direct(voter).admin.command("replSetGetStatus")["term"] + 1
        r = request_vote(voter, term, others[0])
        assert r["voteGranted"], r
        # the set's entry for the same slot, before the primary hears of the new term
        direct(primary).test.command("insert", "votes", documents=[{"_id": term}])
    finally:
        fail_point(direct(voter), "stopReplProducer", "off")
    wait_until(lambda: direct(voter, readPreference="secondaryPreferred").test.votes.find_one(
        {"_id": term}) is not None, 20, "the voter applies the set's entry")
    voter.kill()  # its fail points go with it
    voter.start()
    r = request_vote(voter, term, others[1])
    assert not r["voteGranted"] and "already voted" in r["reason"], r
    wait_until(lambda: primary_of(rs) is not None, 30, "the set has a primary again")


def test_a_vote_that_cannot_be_stored_is_not_given(rs):
    """A voter that cannot store its vote durably does not grant it (as MongoDB), and once it
    can, it grants the same candidate in that term (the vote was held in memory: no other
    candidate could have had it)."""
    primary = primary_of(rs)
    voter = [n for n in rs if n is not primary][0]
    idx = {n: i for i, n in enumerate(rs)}
    candidate = [i for n, i in idx.items() if n is not voter][0]
    # no one hears of the new term from the voter (as in the test above)
    fail_point(direct(voter), "dropHeartbeats", "alwaysOn")
    try:
        term = direct(voter).admin.command("replSetGetStatus")["term"] + 1
        fail_point(direct(voter), "failVoteStore", "alwaysOn")
        try:
            r = request_vote(voter, term, candidate)
        finally:
            fail_point(direct(voter), "failVoteStore", "off")
        assert not r["voteGranted"] and r["reason"] == "failed to store the vote", r
        r = request_vote(voter, term, candidate)
        assert r["voteGranted"], r
    finally:
        fail_point(direct(voter), "dropHeartbeats", "off")
    wait_until(lambda: primary_of(rs) is not None, 30, "the set has a primary again")


def reconfig(rs, change):
    """replSetReconfig on the set's primary with its members changed by change(members),
    again on the next primary if the primary changed meanwhile (a loaded machine's elections)."""
    def attempt():
        p = primary_of(rs)
        if p is None:
            return False
        try:
            cfg = direct(p).admin.command("replSetGetConfig")["config"]
            cfg["version"] += 1
            cfg["members"] = change(cfg["members"])
            direct(p).admin.command("replSetReconfig", cfg)
            return True
        except (pymongo.errors.NotMasterError, pymongo.errors.AutoReconnect):
            return False
    wait_until(attempt, 30, "a reconfig on the primary")


def test_a_joined_member_killed_after_its_initial_sync_does_not_sync_again(rs, request):
    """A member that joined by initial sync keeps its 'initial sync done' flag and the data it
    cloned through kill -9 right after it became SECONDARY (the clone is in a stable checkpoint
    and the flag, a write of its own in its _local table, is stored before it leaves STARTUP2):
    it restarts as a SECONDARY that catches up from the set, not with a new initial sync."""
    wait_until(lambda: primary_of(rs) is not None, 30, "a primary")
    direct(primary_of(rs)).test.command("insert", "joined", documents=[{"_id": "cloned"}],
                                        writeConcern={"w": "majority"})
    late = ShaleProcess(["node", "--replSet", SET], name="rb-late")
    late.start()
    try:
        reconfig(rs, lambda members: members + [
            {"_id": 9, "host": late.host, "votes": 0, "priority": 0}])
        wait_until(lambda: direct(late).admin.command("replSetGetStatus")["myState"] == 2, 30,
                   "the added member syncs and is a secondary")
        late.kill()
        assert sum('"id":2180040' in line for line in late.read_log().splitlines()) == 1
        wait_until(lambda: primary_of(rs) is not None, 30, "a primary")
        direct(primary_of(rs)).test.joined.insert_one({"_id": "after the kill"})
        late.start()
        wait_until(lambda: direct(late).admin.command("replSetGetStatus")["myState"] == 2, 30,
                   "the restarted member is a secondary")
        wait_until(lambda: direct(late, readPreference="secondaryPreferred").test.joined.find_one(
            {"_id": "after the kill"}) is not None, 20, "the restarted member catches up")
        assert sum('"id":2180040' in line for line in late.read_log().splitlines()) == 1, \
            "a new initial sync ran"
        # what the initial sync cloned is durable too (it was in a stable checkpoint before
        # the member left STARTUP2)
        assert direct(late, readPreference="secondaryPreferred").test.joined.find_one(
            {"_id": "cloned"}) is not None
        reconfig(rs, lambda members: [m for m in members if m["host"] != late.host])
    finally:
        failed = request.node.session.testsfailed > 0
        cleanup_later([late], lambda i, p: "replica-set-rollback-late" if failed else None)
