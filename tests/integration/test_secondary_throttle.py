"""_secondaryThrottle (issue 18 item 3, issue 16 item 2; repl18e): moveChunk with
_secondaryThrottle and a writeConcern makes the recipient wait for that write concern on its
replica set after each batch it cloned (a wait that times out is logged and the migration goes
on, as MongoDB's); the balancer passes config.settings' _secondaryThrottle to the migrations it
starts. The recipient is a 2-member set whose secondary stops fetching (stopReplProducer), so
every throttled batch times out its {w: 2, wtimeout: 300} and says so in the recipient's log;
an unthrottled migration waits only once, at its end."""

import pymongo
import pytest

from shale_fixtures import (Background, ShaleProcess, cleanup_later, fail_point, logged,
                            wait_until)

FAST = {"heartbeatIntervalMillis": 200, "electionTimeoutMillis": 2000}
THROTTLE_TIMED_OUT = 4200230


def direct(node, **kw):
    return node.client(directConnection=True, **kw)


@pytest.fixture(scope="module")
def cluster(request):
    cfg = ShaleProcess(["node", "--configsvr", "--replSet", "csrs"], name="st-cfg")
    donor = ShaleProcess(["node", "--shardsvr", "--replSet", "don"], name="st-donor")
    rs = [ShaleProcess(["node", "--shardsvr", "--replSet", "rcp"], name="st-rcp%d" % i)
          for i in range(2)]
    procs = [cfg, donor] + rs
    try:
        for n in procs:
            n.start(wait=False)
        for n in procs:
            n.wait_ready()
        # the secondary must not stand for election while it fetches nothing
        direct(rs[0]).admin.command("replSetInitiate", {
            "_id": "rcp", "settings": FAST,
            "members": [{"_id": 0, "host": rs[0].host},
                        {"_id": 1, "host": rs[1].host, "priority": 0}]})

        def up():
            s = direct(rs[0]).admin.command("replSetGetStatus")
            return [m["stateStr"] for m in s["members"]] == ["PRIMARY", "SECONDARY"]
        wait_until(up, 30, "the recipient set")
        router = ShaleProcess(["router", "--configdb", "csrs/" + cfg.host], name="st-router")
        procs.append(router)
        router.start()
        admin = router.client().admin
        admin.command("addShard", "don/" + donor.host, name="don")
        admin.command("addShard", "rcp/%s,%s" % (rs[0].host, rs[1].host), name="rcp")
        yield {"cfg": cfg, "donor": donor, "rs": rs, "router": router}
    finally:
        failed = request.node.session.testsfailed > 0
        cleanup_later(procs, lambda i, p: ("throttle-%s" % p.name) if failed else None)


def throttle_warnings(node):
    return sum(1 for line in node.read_log().splitlines()
               if '"id":%d' % THROTTLE_TIMED_OUT in line.replace(" ", ""))


def make(cluster, db):
    client = cluster["router"].client()
    admin = client.admin
    admin.command("enableSharding", db, primaryShard="don")
    admin.command("shardCollection", db + ".c", key={"_id": 1})
    client[db].c.insert_many([{"_id": i, "pad": "x" * 100} for i in range(400)])
    admin.command("split", db + ".c", middle={"_id": 200})
    return client


def with_secondary_stopped(cluster, fn):
    """Run fn() in the background while the recipient's secondary fetches nothing; wait for
    the first throttle timeout in the recipient primary's log, then let replication go on."""
    primary, secondary = cluster["rs"]
    before = throttle_warnings(primary)
    fail_point(direct(secondary), "stopReplProducer", "alwaysOn")
    try:
        t = Background(fn)
        wait_until(lambda: throttle_warnings(primary) > before, 30,
                   "a throttled batch to time out on the recipient")
    finally:
        fail_point(direct(secondary), "stopReplProducer", "off")
    t.join(60)
    assert t.done, t.error
    return throttle_warnings(primary) - before


def test_move_chunk_waits_per_batch(cluster):
    client = make(cluster, "thr")
    n = with_secondary_stopped(cluster, lambda: client.admin.command(
        "moveChunk", "thr.c", find={"_id": 300}, to="rcp", _secondaryThrottle=True,
        writeConcern={"w": 2, "wtimeout": 300}))
    assert n >= 1
    assert client.thr.c.count_documents({}) == 400
    # the secondary has every migrated document once the migration is done
    sec = direct(cluster["rs"][1], readPreference="secondaryPreferred")
    wait_until(lambda: sec.thr.c.count_documents({}) == 200, 10, "the copy on the secondary")


def test_no_throttle_no_wait(cluster):
    client = make(cluster, "nothr")
    before = throttle_warnings(cluster["rs"][0])
    client.admin.command("moveChunk", "nothr.c", find={"_id": 300}, to="rcp")
    assert throttle_warnings(cluster["rs"][0]) == before
    assert client.nothr.c.count_documents({}) == 400


def test_bad_throttle_write_concern_is_refused(cluster):
    client = make(cluster, "badthr")
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        client.admin.command("moveChunk", "badthr.c", find={"_id": 300}, to="rcp",
                             _secondaryThrottle=True, writeConcern={"w": "majority", "j": "x"})
    assert e.value.code in (9, 14)  # FailedToParse / TypeMismatch: nothing moved
    assert client.badthr.c.count_documents({}) == 400


def test_balancer_passes_its_secondary_throttle(cluster):
    client = make(cluster, "bal")
    cfg = direct(cluster["cfg"])
    fail_point(cfg, "overrideBalanceRoundInterval", "alwaysOn", {"intervalMs": 200})
    cfg.config.settings.update_one(
        {"_id": "balancer"}, {"$set": {"policy": "chunkCount",
                                       "_secondaryThrottle": {"w": 2, "wtimeout": 300}}})

    def balanced():
        uuid = cfg.config.collections.find_one({"_id": "bal.c"})["uuid"]
        return {c["shard"] for c in cfg.config.chunks.find() if c["uuid"] == uuid} == {
            "don", "rcp"}
    try:
        with_secondary_stopped(cluster, lambda: wait_until(balanced, 60, "a balancer move"))
    finally:
        cfg.config.settings.update_one({"_id": "balancer"}, {"$set": {"mode": "off"}})
        fail_point(cfg, "overrideBalanceRoundInterval", "off")
    assert client.bal.c.count_documents({}) == 400
