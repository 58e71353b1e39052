"""Causal consistency (issue 14 item 3; docs/design/causal_consistency.md): operationTime on the
replies of every process, readConcern afterClusterTime waits on data nodes (bounded by
maxTimeMS, interruptible, without locks) and through routers, and the readConcern
combinations MongoDB refuses, with its codes and messages."""

import time

import pymongo
import pytest
from bson import Timestamp
from pymongo import monitoring

from shale_fixtures import Background, error_code, module_cluster, wait_until

BAD_VALUE = 2
FAILED_TO_PARSE = 9
TYPE_MISMATCH = 14
INTERRUPTED = 11601
MAX_TIME_MS_EXPIRED = 50
INVALID_OPTIONS = 72


def rc_error(db, rc, cmd="find", **kw):
    """(code, errmsg) of a command with readConcern 'rc' that must fail."""
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        db.command(cmd, "c", readConcern=rc, **kw)
    return e.value.code, e.value.details.get("errmsg", "")


# ---------------------------------------------------------------- a replica set of one


def test_refused_combinations(rs_node):
    db = rs_node.client().test
    t = db.command("insert", "c", documents=[{"_id": 1}])["operationTime"]
    # afterClusterTime: not with available or linearizable (MongoDB's ReadConcernArgs).
    for level in ("available", "linearizable"):
        code, msg = rc_error(db, {"level": level, "afterClusterTime": t})
        assert code == INVALID_OPTIONS
        assert msg == ("afterClusterTime field can be set only if level is equal to majority, "
                       "local, or snapshot")
    opt = {"ts": t, "t": 1}
    assert rc_error(db, {"afterClusterTime": t, "afterOpTime": opt}) == (
        INVALID_OPTIONS, "Can not specify both afterClusterTime and afterOpTime")
    assert rc_error(db, {"level": "snapshot", "afterOpTime": opt}) == (
        INVALID_OPTIONS, "afterOpTime field cannot be set if level is equal to snapshot")
    assert rc_error(db, {"level": "linearizable", "afterOpTime": opt}) == (
        FAILED_TO_PARSE, "afterOpTime not compatible with linearizable read concern")
    assert rc_error(db, {"level": "majority", "afterClusterTime": Timestamp(0, 0)}) == (
        INVALID_OPTIONS, "afterClusterTime cannot be a null timestamp")
    assert rc_error(db, {"level": "majority", "afterClusterTime": 10})[0] == TYPE_MISMATCH
    assert rc_error(db, {"level": "majority", "afterClusterTime": {}})[0] == TYPE_MISMATCH
    assert rc_error(db, {"level": "eventual"})[0] == BAD_VALUE
    # A time past the node's cluster time (nothing gossiped it) is refused, not waited for.
    ahead = Timestamp(t.time + 3600, 1)
    code, msg = rc_error(db, {"level": "local", "afterClusterTime": ahead})
    assert code == INVALID_OPTIONS
    assert msg.startswith("readConcern afterClusterTime value must not be greater than the "
                          "current clusterTime. Requested clusterTime: { ts: Timestamp(%d, 1) }"
                          % ahead.time)


def test_commands_refuse_levels_they_do_not_support(rs_node):
    db = rs_node.client().test
    db.command("insert", "c", documents=[{"_id": 1, "x": 1}])
    # Every command takes "local"; an insert takes nothing else.
    db.command("insert", "c", documents=[{"_id": 2}], readConcern={"level": "local"})
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        db.command("insert", "c", documents=[{"_id": 3}], readConcern={"level": "majority"})
    assert e.value.code == INVALID_OPTIONS
    assert e.value.details["errmsg"] == (
        'Command insert does not support { readConcern: { level: "majority", provenance: '
        '"clientSupplied" } } :: caused by :: read concern not supported')
    assert db.c.count_documents({"_id": 3}) == 0
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        db.command("insert", "c", documents=[{"_id": 3}], readConcern={"level": "snapshot"})
    assert e.value.details["errmsg"] == (
        'Command insert does not support { readConcern: { level: "snapshot", provenance: '
        '"clientSupplied" } } :: caused by :: read concern not supported')
    # Reads take every level.
    for level in ("local", "available", "majority", "linearizable"):
        for cmd, kw in (("find", {}), ("count", {}), ("distinct", {"key": "x"}),
                        ("aggregate", {"pipeline": [], "cursor": {}})):
            assert db.command(cmd, "c", readConcern={"level": level}, **kw)["ok"] == 1
    # $out / $merge write: not with linearizable (other levels are fine).
    for stage in ({"$out": "o"}, {"$merge": {"into": "m"}}):
        name = next(iter(stage))
        code, msg = rc_error(db, {"level": "linearizable"}, cmd="aggregate",
                             pipeline=[{"$match": {}}, stage], cursor={})
        assert code == INVALID_OPTIONS
        assert msg == ('Command aggregate does not support { readConcern: { level: '
                       '"linearizable", provenance: "clientSupplied" } } :: caused by :: %s '
                       "cannot be used with a 'linearizable' read concern level" % name)
        db.command("aggregate", "c", pipeline=[stage], cursor={},
                   readConcern={"level": "majority"})
    # getMore reads with its cursor's read concern and takes no afterClusterTime.
    db.c.insert_many([{"i": i} for i in range(10)])
    cid = db.command("find", "c", batchSize=2)["cursor"]["id"]
    assert db.command("getMore", cid, collection="c",
                      readConcern={"level": "linearizable"})["ok"] == 1
    t = db.command("ping")["operationTime"]
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        db.command("getMore", cid, collection="c", readConcern={"afterClusterTime": t})
    assert e.value.code == INVALID_OPTIONS
    assert e.value.details["errmsg"] == "afterClusterTime is not allowed for this command"


def test_operation_time_on_every_reply(rs_node):
    c = rs_node.client()
    db = c.test
    times = []

    def note(r):
        assert isinstance(r["operationTime"], Timestamp)
        assert r["operationTime"] <= r["$clusterTime"]["clusterTime"]
        times.append(r["operationTime"])
        return r

    w = note(db.command("insert", "c", documents=[{"_id": 1}]))
    note(db.command("find", "c"))
    note(db.command("find", "c", readConcern={"level": "majority"}))
    note(db.command("count", "c"))
    note(db.command("hello"))
    u = note(db.command("update", "c", updates=[{"q": {"_id": 1}, "u": {"$set": {"a": 1}}}]))
    assert u["operationTime"] > w["operationTime"]  # a write: the time of its oplog entry
    entry = c.local["oplog.rs"].find_one({"ts": u["operationTime"]})
    assert entry["op"] == "u" and entry["ns"] == "test.c"
    # Error replies carry it too (MongoDB's appendClusterAndOperationTime).
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        db.command("insert", "c", documents=[{"_id": 2}], readConcern={"level": "majority"})
    note(e.value.details)
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        db.command("find", "c", readConcern={"level": "bogus"})
    note(e.value.details)
    for bad in ({"noSuchCommand": 1}, {"find": "c", "maxTimeMS": -1}):
        with pytest.raises(pymongo.errors.OperationFailure) as e:
            db.command(bad)
        note(e.value.details)
    note(db.command("delete", "c", deletes=[{"q": {"_id": 1}, "limit": 1}]))
    assert times == sorted(times), times


def test_plain_set_waits_for_a_write_at_the_time(rs_node):
    """A plain replica set member writes no no-op for afterClusterTime (MongoDB does that only
    in a sharded cluster): a time the client gossiped ahead of the last write is reached by
    the next write -- which proceeds while the read waits, so the wait holds no lock -- and
    the wait is bounded by maxTimeMS and ended by killOp."""
    c = rs_node.client()
    db = c.test
    t0 = db.command("insert", "c", documents=[{"_id": 0}])["operationTime"]
    ahead = Timestamp(t0.time + 30, 1)
    sig = db.command("ping")["$clusterTime"]["signature"]

    def read(**kw):
        with c.start_session(causal_consistency=False) as s:
            s.advance_cluster_time({"clusterTime": ahead, "signature": sig})
            return db.command("find", "c", readConcern={"afterClusterTime": ahead},
                              session=s, **kw)

    assert error_code(lambda: read(maxTimeMS=300)) == MAX_TIME_MS_EXPIRED

    def waiting_read():
        bg = Background(read)
        wait_until(lambda: any(op.get("command", {}).get("readConcern") for op in
                               c.admin.command("currentOp")["inprog"]), what="the read waiting")
        assert bg.is_alive()
        return bg

    # A waiting read holds no lock: an index build on its collection (which takes it
    # exclusively) goes on meanwhile -- and, a write after the time, releases it.
    bg = waiting_read()
    db.c.create_index("z")
    bg.join(30)
    assert bg.done, bg.error
    assert [d["_id"] for d in bg.result["cursor"]["firstBatch"]] == [0]
    assert bg.result["operationTime"] >= ahead
    # An insert after the time releases a waiting read, which sees it.
    ahead = Timestamp(bg.result["$clusterTime"]["clusterTime"].time + 30, 1)
    bg = waiting_read()
    w = db.command("insert", "c", documents=[{"_id": 1}])
    assert w["operationTime"] > ahead
    bg.join(30)
    assert bg.done, bg.error
    assert sorted(d["_id"] for d in bg.result["cursor"]["firstBatch"]) == [0, 1]
    assert bg.result["operationTime"] >= ahead
    # killOp ends a waiting read with Interrupted.
    ahead = Timestamp(w["operationTime"].time + 30, 1)
    bg = Background(read, catch=pymongo.errors.PyMongoError)
    ops = []

    def waiting():
        ops[:] = [op["opid"] for op in c.admin.command("currentOp")["inprog"]
                  if op.get("command", {}).get("readConcern")]
        return ops
    wait_until(waiting, what="the read waiting")
    c.admin.command("killOp", op=ops[0])
    bg.join(30)
    assert isinstance(bg.error, pymongo.errors.OperationFailure)
    assert bg.error.code == INTERRUPTED


def test_shutdown_ends_a_waiting_read(rs_node):
    c = rs_node.client()
    db = c.test
    t0 = db.command("insert", "c", documents=[{"_id": 0}])["operationTime"]
    ahead = Timestamp(t0.time + 30, 1)
    sig = db.command("ping")["$clusterTime"]["signature"]

    def read():
        with c.start_session(causal_consistency=False) as s:
            s.advance_cluster_time({"clusterTime": ahead, "signature": sig})
            return db.command("find", "c", readConcern={"afterClusterTime": ahead}, session=s)

    bg = Background(read, catch=pymongo.errors.PyMongoError)
    wait_until(lambda: any(op.get("command", {}).get("readConcern") for op in
                           c.admin.command("currentOp")["inprog"]), what="the read waiting")
    start = time.monotonic()
    assert rs_node.stop() == 0
    assert time.monotonic() - start < 8  # not the 10 s a periodic no-op would take
    bg.join(30)
    assert not bg.done
    assert bg.error.details["code"] == 11600  # InterruptedAtShutdown, with operationTime
    assert bg.error.details["operationTime"] == t0


# ---------------------------------------------------------------- a cluster


@pytest.fixture(scope="module")
def cc(request):
    with module_cluster(request, shards=2, routers=2) as c:
        r = c.router_client()
        r.admin.command("enableSharding", "cc", primaryShard="shard0")
        r.admin.command("shardCollection", "cc.c", key={"x": 1})
        r.admin.command("split", "cc.c", middle={"x": 0})
        r.admin.command("moveChunk", "cc.c", find={"x": 0}, to="shard1")
        yield c


class ReadConcerns(monitoring.CommandListener):
    """The readConcern of every command a client sends."""

    def __init__(self):
        self.sent = []

    def started(self, event):
        self.sent.append((event.command_name, event.command.get("readConcern")))

    def succeeded(self, event):
        pass

    def failed(self, event):
        pass


def test_read_own_write_through_a_second_router(cc):
    listener = ReadConcerns()
    a = cc.router_client(0)
    b = cc.router_client(1, event_listeners=[listener])
    with a.start_session(causal_consistency=True) as sa:
        a.cc.c.insert_one({"_id": "w1", "x": 5}, session=sa)
        a.cc.c.update_one({"_id": "w1", "x": 5}, {"$set": {"v": 1}}, session=sa)
        a.cc.c.insert_one({"_id": "w2", "x": -5, "v": 1}, session=sa)
        write_time = sa.operation_time
        # The router answered with the shard's time of the write (its oplog entry).
        entry = cc.shard_client(0).local["oplog.rs"].find_one({"ts": write_time})
        assert entry["op"] == "i" and entry["o"]["_id"] == "w2"
        with b.start_session(causal_consistency=True) as sb:
            sb.advance_cluster_time(sa.cluster_time)
            sb.advance_operation_time(sa.operation_time)
            # Both shards: a scatter read after the time one shard ticked.
            docs = list(b.cc.c.find({"v": 1}, session=sb).sort("_id"))
            assert [d["_id"] for d in docs] == ["w1", "w2"]
            assert b.cc.c.count_documents({"v": 1}, session=sb) == 2
            assert sorted(b.cc.c.distinct("_id", {"v": 1}, session=sb)) == ["w1", "w2"]
            for level in ("local", "majority"):
                n = b.cc.command("count", "c", query={"v": 1}, session=sb,
                                 readConcern={"level": level, "afterClusterTime": write_time})
                assert n["n"] == 2
            assert sb.operation_time >= write_time
    # The driver asked for it: the first read carried afterClusterTime = the write's time.
    sent = [rc for name, rc in listener.sent if name in ("find", "aggregate", "distinct")]
    assert sent[0] == {"afterClusterTime": write_time}


def test_router_operation_time_is_the_shards(cc):
    r = cc.router_client(0)
    db = r.cc
    res = db.command("insert", "c", documents=[{"_id": "t1", "x": 7}])
    entry = cc.shard_client(1).local["oplog.rs"].find_one({"ts": res["operationTime"]})
    assert entry["op"] == "i" and entry["o"]["_id"] == "t1"
    assert res["operationTime"] <= res["$clusterTime"]["clusterTime"]
    # Replies that reached no shard carry the router's cluster time; errors carry it too.
    ping = db.command("ping")
    assert ping["operationTime"] == ping["$clusterTime"]["clusterTime"]
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        db.command("insert", "c", documents=[{"x": 1}], readConcern={"level": "majority"})
    assert e.value.code == INVALID_OPTIONS
    assert isinstance(e.value.details["operationTime"], Timestamp)
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        db.command("noSuchCommand")
    assert isinstance(e.value.details["operationTime"], Timestamp)
    # Monotonic for one client on one shard's data, reads and writes interleaved.
    times = []
    for i in range(5):
        times.append(db.command("insert", "c", documents=[{"x": 10 + i}])["operationTime"])
        times.append(db.command("find", "c", filter={"x": 10 + i})["operationTime"])
    assert times == sorted(times), times


def test_every_process_replies_with_operation_time(cc):
    for client in ([cc.config_client()] + [cc.shard_client(i) for i in range(2)]
                   + [cc.router_client(i) for i in range(2)]):
        seen = []
        for _ in range(3):
            for cmd in ({"ping": 1}, {"hello": 1}, {"find": "nothing"}):
                r = client.cc.command(cmd)
                assert isinstance(r["operationTime"], Timestamp)
                seen.append(r["operationTime"])
        assert seen == sorted(seen), seen


def test_after_cluster_time_ahead_of_a_shard_clock(cc):
    """On a shard a time ahead of its last write (gossiped first, as a router does) is reached
    at once: MongoDB writes a no-op there; Shale's committed point follows the clock."""
    shard = cc.shard_client(0)
    db = shard.cc
    t = db.command("ping")["$clusterTime"]
    ahead = Timestamp(t["clusterTime"].time + 60, 1)
    with shard.start_session(causal_consistency=False) as s:
        s.advance_cluster_time({"clusterTime": ahead, "signature": t["signature"]})
        for level in ("local", "majority"):
            r = db.command("find", "c", readConcern={"level": level, "afterClusterTime": ahead},
                           session=s, maxTimeMS=5000)
            assert r["operationTime"] >= ahead
    # Through a router: the client's time travels to the shards it targets.
    r = cc.router_client(1)
    later = Timestamp(ahead.time + 60, 1)
    with r.start_session(causal_consistency=False) as s:
        s.advance_cluster_time({"clusterTime": later, "signature": t["signature"]})
        res = r.cc.command("find", "c", readConcern={"afterClusterTime": later}, session=s,
                           maxTimeMS=5000)
        assert res["operationTime"] >= later
    # Without gossip a shard refuses a time past its clock (MongoDB's InvalidOptions).
    code = error_code(lambda: db.command(
        "find", "c", readConcern={"afterClusterTime": Timestamp(later.time + 3600, 1)}))
    assert code == INVALID_OPTIONS


def test_router_refusals(cc):
    db = cc.router_client(0).cc
    t = db.command("ping")["operationTime"]
    for rc, code in (({"level": "available", "afterClusterTime": t}, INVALID_OPTIONS),
                     ({"level": "linearizable", "afterClusterTime": t}, INVALID_OPTIONS),
                     ({"level": "eventual"}, BAD_VALUE)):
        assert rc_error(db, rc)[0] == code
    code, msg = rc_error(db, {"level": "linearizable"}, cmd="aggregate",
                         pipeline=[{"$out": "o"}], cursor={})
    assert code == INVALID_OPTIONS and "$out cannot be used" in msg
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        db.command("insert", "c", documents=[{"x": 1}], readConcern={"level": "available"})
    assert e.value.code == INVALID_OPTIONS
    assert "Command insert does not support" in e.value.details["errmsg"]
    # Linearizable reads go through a router to every shard they target.
    db.c.insert_many([{"x": -1, "lin": 1}, {"x": 1, "lin": 1}])
    r = db.command("find", "c", filter={"lin": 1}, readConcern={"level": "linearizable"})
    assert sorted(d["x"] for d in r["cursor"]["firstBatch"]) == [-1, 1]


def test_node_driver_reads_its_write_through_a_second_router(cc):
    import json
    import os
    import subprocess

    from test_node_driver import HERE, node_binary

    r = cc.router_client()
    r.admin.command("enableSharding", "ccnode", primaryShard="shard0")
    r.admin.command("shardCollection", "ccnode.c", key={"x": 1})
    r.admin.command("split", "ccnode.c", middle={"x": 0})
    r.admin.command("moveChunk", "ccnode.c", find={"x": 0}, to="shard1")
    out = subprocess.run([node_binary(), os.path.join(HERE, "causal.js"), cc.uri(0), cc.uri(1),
                          "ccnode"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["read"] == ["n1", "n2"] and res["count"] == 2
    # The driver sent the write's operationTime as afterClusterTime.
    assert res["afterClusterTime"] == res["writeTime"]
    assert res["refused"] == INVALID_OPTIONS
    assert res["replies"] > 0 and res["withOpTime"] == res["replies"]
