"""Sharding on replica sets (issue 18 item 5): two shards of three members each and a
three-member config server set, all real processes, a router started with
--configdb cfg/h1,h2,h3 and the shards added as "shardN/h1,h2,h3". CRUD and a migration
through the router; reads with readPreference secondary served by a shard secondary; kill -9
of a shard primary under w:majority retryable writes (every acknowledged write is there once
the set elects a new primary and the router finds it). The config server's failover:
test_config_server_set.py."""

import threading
import time

import pymongo
import pytest
from pymongo import ReadPreference
from pymongo.write_concern import WriteConcern

from shale_fixtures import ShaleProcess, cleanup_later, set_primary, set_string, wait_until

FAST = {"heartbeatIntervalMillis": 200, "electionTimeoutMillis": 2000}


def direct(node, **kw):
    return node.client(directConnection=True, **kw)


def initiate(name, nodes, configsvr=False):
    cfg = {"_id": name, "members": [{"_id": i, "host": n.host} for i, n in enumerate(nodes)],
           "settings": FAST}
    if configsvr:
        cfg["configsvr"] = True
    direct(nodes[0]).admin.command("replSetInitiate", cfg)


@pytest.fixture(scope="module")
def cluster(request):
    cfg = [ShaleProcess(["node", "--configsvr", "--replSet", "cfg"], name="cfg%d" % i)
           for i in range(3)]
    shards = [[ShaleProcess(["node", "--shardsvr", "--replSet", "rs%d" % s],
                            name="rs%d-%d" % (s, i)) for i in range(3)] for s in range(2)]
    nodes = cfg + shards[0] + shards[1]
    procs = list(nodes)
    try:
        for n in nodes:
            n.start(wait=False)
        for n in nodes:
            n.wait_ready()
        # A config server writes its catalog at start-up. Until initial sync exists, a member
        # whose own entries share the second of the set's first entry takes one of them for
        # the set's (OplogStartMissing forever): initiate in a later second.
        time.sleep(1.1)
        initiate("cfg", cfg, configsvr=True)
        for s in range(2):
            initiate("rs%d" % s, shards[s])
        for group in [cfg] + shards:
            set_primary(group)
        router = ShaleProcess(["router", "--configdb", set_string("cfg", cfg)], name="router")
        procs.append(router)
        router.start()
        admin = router.client().admin
        for s in range(2):
            admin.command("addShard", set_string("rs%d" % s, shards[s]), name="rs%d" % s)
        yield {"cfg": cfg, "shards": shards, "router": router}
    finally:
        failed = request.node.session.testsfailed > 0
        cleanup_later(procs, lambda i, p: ("sharding-rs-%s" % p.name) if failed else None)


def test_shards_are_sets(cluster):
    admin = cluster["router"].client().admin
    shards = {s["_id"]: s["host"] for s in admin.command("listShards")["shards"]}
    for s in range(2):
        assert shards["rs%d" % s] == set_string("rs%d" % s, cluster["shards"][s])
    # any member of a shard's set is known as that shard's
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        admin.command("addShard", "wrong/" + cluster["shards"][0][2].host, name="wrong")
    assert e.value.code == 20  # IllegalOperation: already a member of shard rs0


def test_crud_migration_and_secondary_reads(cluster):
    client = cluster["router"].client()
    admin = client.admin
    admin.command("enableSharding", "app", primaryShard="rs0")
    admin.command("shardCollection", "app.c", key={"_id": 1})
    coll = client.app.get_collection("c", write_concern=WriteConcern(w="majority"))
    coll.insert_many([{"_id": i, "v": i} for i in range(200)])
    coll.update_one({"_id": 5}, {"$set": {"v": "five"}})
    coll.delete_one({"_id": 6})
    admin.command("split", "app.c", middle={"_id": 100})
    admin.command("moveChunk", "app.c", find={"_id": 150}, to="rs1",
                  _secondaryThrottle=True, writeConcern={"w": "majority"})
    assert coll.count_documents({}) == 199
    assert coll.find_one({"_id": 5})["v"] == "five"
    # the recipient waited for a majority of its set before the commit: a secondary has every
    # migrated document as soon as moveChunk returns
    rs1_primary = set_primary(cluster["shards"][1])
    counts = [direct(n, readPreference="secondaryPreferred").app.c.count_documents(
        {"_id": {"$gte": 100}}) for n in cluster["shards"][1] if n is not rs1_primary]
    assert 100 in counts
    for n in cluster["shards"][1]:
        if n is not rs1_primary:
            c = direct(n, readPreference="secondaryPreferred").app.c
            wait_until(lambda: c.count_documents({"_id": {"$gte": 100}}) == 100, 10,
                       "the migrated documents on a recipient secondary")
    # a read with readPreference secondary is served by a secondary of the owning shard
    sec = client.app.get_collection("c", read_preference=ReadPreference.SECONDARY)
    wait_until(lambda: sec.count_documents({"_id": {"$lt": 100}}) == 99, 10,
               "secondary reads see the majority-written data")
    before = {n.host: direct(n).admin.command("serverStatus")["opcounters"]["query"]
              for n in cluster["shards"][0]}
    assert sec.find_one({"_id": 7})["v"] == 7
    after = {n.host: direct(n).admin.command("serverStatus")["opcounters"]["query"]
             for n in cluster["shards"][0]}
    rs0_primary = set_primary(cluster["shards"][0])
    served = [h for h in before if after[h] > before[h]]
    assert served and rs0_primary.host not in served


def test_secondary_cursor_get_more(cluster):
    """A cursor opened on a shard's secondary (readPreference secondary through the router)
    lives there: the router's getMores go to that member, not to the primary (which has no
    such cursor: CursorNotFound)."""
    client = cluster["router"].client()
    sec = client.app.get_collection("c", read_preference=ReadPreference.SECONDARY)
    getmores = {n.host: direct(n).admin.command("serverStatus")["opcounters"]["getmore"]
                for s in cluster["shards"] for n in s}
    docs = list(sec.find({}, batch_size=10).sort("_id", 1))
    assert [d["_id"] for d in docs] == [i for i in range(200) if i != 6]
    after = {n.host: direct(n).admin.command("serverStatus")["opcounters"]["getmore"]
             for s in cluster["shards"] for n in s}
    # A getMore sent to a primary would fail (CursorNotFound): the complete result above says
    # none was. The secondaries served the ~19 getMores of 199 documents in batches of 10 (a
    # primary's own count also grows with its secondaries' oplog fetching, so it says nothing).
    primaries = {set_primary(s).host for s in cluster["shards"]}
    on_secondaries = sum(after[h] - getmores[h] for h in getmores if h not in primaries)
    assert on_secondaries >= 17, (getmores, after, primaries)


def test_kill_shard_primary_under_majority_writes(cluster):
    client = cluster["router"].client(retryWrites=True)
    coll = client.app.get_collection("c", write_concern=WriteConcern(w="majority"))
    acked, times = [], []
    stop = threading.Event()

    def writer():
        i = -1  # below 100: the chunk shard rs0 owns
        while not stop.is_set():
            try:
                coll.insert_one({"_id": i, "w": True})
                acked.append(i)
                times.append(time.monotonic())
            except pymongo.errors.PyMongoError:
                pass
            i -= 1
    t = threading.Thread(target=writer)
    t.start()
    wait_until(lambda: len(acked) > 20, 20, "writes before the kill")
    victim = set_primary(cluster["shards"][0])
    victim.kill()
    killed_at = time.monotonic()
    n_at_kill = len(acked)
    try:
        wait_until(lambda: len(acked) > n_at_kill + 20, 30,
                   "writes acknowledged after the shard primary's failover")
    finally:
        stop.set()
        t.join()
    # the failover shows as the longest pause between two acknowledged writes
    gap = max(b - a for a, b in zip(times, times[1:]) if b > killed_at)
    print("writes paused by the shard primary's kill -9: %.2f s" % gap)
    new_primary = set_primary(cluster["shards"][0])
    assert new_primary is not victim
    have = {d["_id"] for d in coll.find({"w": True}, {"_id": 1})}
    missing = [i for i in acked if i not in have]
    assert missing == []
    victim.start()  # it rejoins as a secondary
