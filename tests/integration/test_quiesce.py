"""Startup and shutdown as seeds/000 "Node startup and shutdown" describes: topologyVersion
and the awaitable (and streaming) hello on every process, the router's quiesce mode on
SIGTERM and on the shutdown command, and a router that does not serve before it has
loaded the sharding state from its config server (docs/design/startup_shutdown.md)."""

import signal
import socket
import subprocess
import threading
import time

import bson
import pymongo
import pytest
from bson.int64 import Int64
from bson.objectid import ObjectId
from pymongo import monitoring
from pymongo.errors import OperationFailure

import wire_util
from shale_fixtures import (Background, ShaleProcess, fail_point, free_port, module_cluster,
                            run_to_fail_point, wait_until)

EXHAUST_ALLOWED = 1 << 16
MORE_TO_COME = 1 << 1
QUIESCE_PARAM = "mongosShutdownTimeoutMillisForSignaledShutdown"


@pytest.fixture(scope="module")
def qc(request):
    with module_cluster(request) as c:
        yield c


def start_router(shale_process, qc, quiesce_ms, name="router-q"):
    r = shale_process(["router", "--configdb", qc.configdb], name=name, start=False)
    r.start(extra=["--setParameter", "%s=%d" % (QUIESCE_PARAM, quiesce_ms)])
    return r


def hello(client, **kw):
    return client.admin.command(dict({"hello": 1}, **kw))


def awaitable(client, tv, ms, name="hello"):
    return client.admin.command({name: 1, "topologyVersion": tv, "maxAwaitTimeMS": ms})


def clients_of(qc):
    return [("router", qc.router_client()), ("shard", qc.shard_client(0)),
            ("config", pymongo.MongoClient(qc.config.host, directConnection=True))]


# ------------------------------------------------------------------ topologyVersion


def test_every_hello_carries_a_topology_version(qc):
    for what, c in clients_of(qc):
        for name in ("hello", "isMaster", "ismaster"):
            r = c.admin.command({name: 1, "helloOk": True})
            tv = r["topologyVersion"]
            assert isinstance(tv["processId"], ObjectId), (what, r)
            assert isinstance(tv["counter"], Int64) and tv["counter"] >= 0, (what, r)
            assert set(tv) == {"processId", "counter"}
            assert r["helloOk"] is True
        # Another process, another processId.
    ids = {c.admin.command("hello")["topologyVersion"]["processId"] for _, c in clients_of(qc)}
    assert len(ids) == 3


def test_awaitable_hello_waits_for_max_await_time(qc):
    for what, c in clients_of(qc):
        tv = hello(c)["topologyVersion"]
        t0 = time.monotonic()
        r = awaitable(c, tv, 0)
        assert r["ok"] == 1 and r["topologyVersion"] == tv
        t0 = time.monotonic()
        r = awaitable(c, tv, 700)
        took = time.monotonic() - t0
        assert took >= 0.6, (what, took)
        assert r["topologyVersion"] == tv
        # A version from another process (the client talked to someone else): at once, and
        # its counter may be ahead.
        t0 = time.monotonic()
        awaitable(c, {"processId": ObjectId(), "counter": Int64(tv["counter"] + 5)}, 5000)
        assert time.monotonic() - t0 < 2, what
        # An older counter of ours: at once too (only when a change happened; the counter
        # starts at 0, so this is checked where it moved, in the quiesce tests).


def _codes(c, router):
    tv = hello(c)["topologyVersion"]
    pid = tv["processId"]
    return [
        ({"topologyVersion": {"processId": pid, "counter": Int64(tv["counter"] + 1)},
          "maxAwaitTimeMS": 0}, 51761 if router else 31382),
        ({"topologyVersion": "x", "maxAwaitTimeMS": 0}, 10065),
        ({"topologyVersion": {"processId": "pid1", "counter": tv["counter"]},
          "maxAwaitTimeMS": 0}, 14),
        ({"topologyVersion": {"processId": pid, "counter": 0}, "maxAwaitTimeMS": 0}, 14),
        ({"topologyVersion": {"processId": pid}, "maxAwaitTimeMS": 0}, 40414),
        ({"topologyVersion": {"counter": tv["counter"]}, "maxAwaitTimeMS": 0}, 40414),
        ({"topologyVersion": {"processId": pid, "counter": Int64(-1)}, "maxAwaitTimeMS": 0},
         51758 if router else 31372),
        ({"topologyVersion": dict(tv, extra=1), "maxAwaitTimeMS": 0}, 40415),
        ({"topologyVersion": tv}, 51760 if router else 31368),
        ({"maxAwaitTimeMS": 0}, 51760 if router else 31368),
        ({"topologyVersion": tv, "maxAwaitTimeMS": "x"}, 14),
        ({"topologyVersion": tv, "maxAwaitTimeMS": -1}, 51759 if router else 31373),
    ]


def test_awaitable_hello_bad_input(qc):
    for what, c in clients_of(qc):
        for name in ("hello", "isMaster"):
            for extra, code in _codes(c, what == "router"):
                with pytest.raises(OperationFailure) as e:
                    c.admin.command(dict({name: 1}, **extra))
                assert e.value.code == code, (what, name, extra, e.value.details)


# ------------------------------------------------------------------ streaming hello


def stream_first(port, tv, ms, name="hello"):
    """Open a raw connection and send an awaitable hello with exhaustAllowed; returns the
    socket and the first reply."""
    s = wire_util.connect(port)
    body = {name: 1, "topologyVersion": tv, "maxAwaitTimeMS": ms, "$db": "admin"}
    rid = wire_util.next_request_id()
    s.sendall(wire_util.op_msg(body, flags=EXHAUST_ALLOWED, request_id=rid))
    r = wire_util.recv_reply(s)
    assert r.response_to == rid
    return s, r


def test_streaming_hello_sends_replies_without_requests(qc):
    for what, c in clients_of(qc)[:2]:
        port = qc.router.port if what == "router" else qc.shards[0].port
        tv = hello(c)["topologyVersion"]
        s, first = stream_first(port, tv, 300)
        try:
            assert first.reply_flags & MORE_TO_COME, what
            assert first.doc["ok"] == 1 and first.doc["topologyVersion"] == tv
            assert c.admin.command("serverStatus")["connections"]["exhaustHello"] == 1
            prev = first
            t0 = time.monotonic()
            for _ in range(2):
                nxt = wire_util.recv_reply(s)
                assert nxt.reply_flags & MORE_TO_COME
                assert nxt.response_to == prev.request_id
                assert nxt.doc["ok"] == 1
                prev = nxt
            # Two more replies came, each after maxAwaitTimeMS.
            assert time.monotonic() - t0 >= 0.5
        finally:
            s.close()
        wait_until(lambda: c.admin.command("serverStatus")["connections"]["exhaustHello"] == 0,
                   what="the stream to end with its connection")


def test_pymongo_monitor_streams_from_a_router(qc):
    # pymongo's monitor uses the streaming protocol with servers that send topologyVersion.
    c = qc.router_client()
    c.admin.command("ping")
    wait_until(lambda: sum(c.admin.command("serverStatus")["connections"][k]
                           for k in ("exhaustHello", "exhaustIsMaster")) >= 1,
               what="a streaming monitor")


# ------------------------------------------------------------------ quiesce mode


def raw(sock, db, body):
    """A command on a raw connection (no driver: nothing re-routes it, as with the shell)."""
    return wire_util.command(sock, dict(body, **{"$db": db}))


def test_quiesce_on_sigterm(qc, shale_process):
    r = start_router(shale_process, qc, 60000)
    c = r.client(retryReads=False, retryWrites=False)
    c.admin.command("enableSharding", "qdb", primaryShard="shard0")
    c.qdb.c.insert_many([{"_id": i} for i in range(4)])
    cursor = c.qdb.command("find", "c", batchSize=2)["cursor"]
    tv = hello(c)["topologyVersion"]
    old = wire_util.connect(r.port)  # a connection opened before the shutdown
    assert raw(old, "admin", {"hello": 1})["ok"] == 1
    # An awaitable hello (not streamed) that waits: no reply within half a second.
    waiter = wire_util.connect(r.port)
    rid = wire_util.next_request_id()
    waiter.sendall(wire_util.op_msg({"hello": 1, "topologyVersion": tv,
                                     "maxAwaitTimeMS": 600000, "$db": "admin"},
                                    request_id=rid))
    waiter.settimeout(0.5)
    with pytest.raises(socket.timeout):
        wire_util.recv_reply(waiter)
    assert c.admin.command("serverStatus")["connections"]["awaitingTopologyChanges"] >= 1
    waiter.settimeout(10)
    s0 = qc.shard_client(0)
    held = run_to_fail_point(s0, "waitInFindBeforeMakingBatch",
                             lambda: len(list(c.qdb.c.find())))
    try:
        r.proc.send_signal(signal.SIGTERM)
        # The waiting hello answers at once with ShutdownInProgress and the next version.
        t0 = time.monotonic()
        answer = wire_util.recv_reply(waiter)
        assert time.monotonic() - t0 < 5
        assert answer.response_to == rid
        err = answer.doc
        assert err["ok"] == 0 and err["code"] == 91, err
        assert err["codeName"] == "ShutdownInProgress"
        moved = {"processId": tv["processId"], "counter": tv["counter"] + 1}
        assert err["topologyVersion"] == moved
        # So does every new hello.
        for name in ("hello", "isMaster", "ismaster"):
            err = raw(old, "admin", {name: 1})
            assert err["code"] == 91 and err["topologyVersion"] == moved, err
    finally:
        fail_point(s0, "waitInFindBeforeMakingBatch", "off")
    # The running operation finishes with its result.
    held.join(30)
    assert held.error is None and held.result == 4
    # getMore on a cursor opened before, new reads and writes: all served.
    more = raw(old, "qdb", {"getMore": cursor["id"], "collection": "c"})
    assert len(more["cursor"]["nextBatch"]) == 2, more
    assert raw(old, "qdb", {"insert": "c", "documents": [{"_id": 10}]})["n"] == 1
    assert raw(old, "qdb", {"count": "c"})["n"] == 5
    # A new connection is still accepted (the listener stays open in quiesce mode).
    new = wire_util.connect(r.port)
    assert raw(new, "qdb", {"find": "c", "filter": {"_id": 10}})["cursor"]["firstBatch"] == [
        {"_id": 10}]
    assert r.proc.poll() is None
    # Once no client is left the quiesce period ends early and the router exits cleanly.
    t0 = time.monotonic()
    for s in (old, new, waiter):
        s.close()
    c.close()
    assert r.proc.wait(30) == 0
    assert time.monotonic() - t0 < 20
    qc.router_client().qdb.command("dropDatabase")


def test_quiesce_lasts_the_configured_time(qc, shale_process):
    r = start_router(shale_process, qc, 1500)
    s = wire_util.connect(r.port)  # a client that stays (a driver would leave)
    t0 = time.monotonic()
    r.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: raw(s, "admin", {"hello": 1}).get("code") == 91, what="quiesce mode")
    assert raw(s, "admin", {"ping": 1})["ok"] == 1
    assert r.proc.wait(30) == 0
    took = time.monotonic() - t0
    # The client stayed connected, so the whole period passed.
    assert 1.3 <= took < 10, took
    s.close()


def test_shutdown_command_on_a_router_quiesces_for_timeout_secs(qc, shale_process):
    r = start_router(shale_process, qc, 100)
    c = r.client()
    other = wire_util.connect(r.port)
    tv = raw(other, "admin", {"hello": 1})["topologyVersion"]
    with pytest.raises(pymongo.errors.AutoReconnect):
        c.admin.command({"shutdown": 1, "timeoutSecs": 60})
    # 60 s of quiesce mode (not the 100 ms of the signal's parameter): hello is refused
    # while other commands are served.
    err = raw(other, "admin", {"hello": 1})
    assert err["code"] == 91 and err["topologyVersion"]["counter"] == tv["counter"] + 1
    with pytest.raises(subprocess.TimeoutExpired):
        r.proc.wait(1)
    assert raw(other, "admin", {"ping": 1})["ok"] == 1
    t0 = time.monotonic()
    other.close()
    c.close()
    assert r.proc.wait(30) == 0
    assert time.monotonic() - t0 < 20


class _ByRouter(monitoring.CommandListener):
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = {}
        self.failed = []

    def started(self, event):
        pass

    def succeeded(self, event):
        with self.lock:
            self.ok[event.connection_id[1]] = self.ok.get(event.connection_id[1], 0) + 1

    def failed(self, event):
        with self.lock:
            self.failed.append((event.command_name, event.failure))


def test_a_client_keeps_working_while_one_router_quiesces(qc, shale_process):
    r1 = start_router(shale_process, qc, 3000, name="router-a")
    r2 = start_router(shale_process, qc, 100, name="router-b")
    qc.router_client().admin.command("enableSharding", "movedb", primaryShard="shard1")
    seen = _ByRouter()
    # No retries: every operation the driver sends must succeed where it was sent.
    c = pymongo.MongoClient([r1.host, r2.host], retryWrites=False, retryReads=False,
                            localThresholdMS=10000, event_listeners=[seen],
                            serverSelectionTimeoutMS=10000)
    errors, stop = [], threading.Event()

    def work(k):
        i = 0
        while not stop.is_set():
            try:
                c.movedb.c.insert_one({"_id": "%d-%d" % (k, i)})
                assert c.movedb.c.find_one({"_id": "%d-%d" % (k, i)}) is not None
            except Exception as e:  # noqa: BLE001 -- any failure is the test's failure
                errors.append(repr(e))
            i += 1

    workers = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for w in workers:
        w.start()
    try:
        wait_until(lambda: seen.ok.get(r1.port, 0) > 20 and seen.ok.get(r2.port, 0) > 20,
                   what="operations through both routers")
        r1.proc.send_signal(signal.SIGTERM)
        assert r1.proc.wait(30) == 0
        after = seen.ok.get(r2.port, 0)
        wait_until(lambda: seen.ok.get(r2.port, 0) > after + 50, what="work after the stop")
    finally:
        stop.set()
        for w in workers:
            w.join(30)
    assert errors == [] and seen.failed == []
    c.close()
    qc.router_client().movedb.command("dropDatabase")


def test_a_data_node_answers_awaitable_hellos_when_it_shuts_down(shale_process):
    n = shale_process(["node", "--replSet", "rsq"], name="node-q")
    c = n.client(directConnection=True)
    tv = hello(c)["topologyVersion"]
    # A version of another process: the first reply comes at once, the next one waits.
    s, first = stream_first(n.port, {"processId": ObjectId(), "counter": Int64(0)}, 600000)
    try:
        assert first.reply_flags & MORE_TO_COME
        t0 = time.monotonic()
        n.proc.send_signal(signal.SIGTERM)
        last = wire_util.recv_reply(s)
        # The stream ends with the new version: the node is no longer writable primary.
        assert not last.reply_flags & MORE_TO_COME
        assert last.doc["topologyVersion"]["counter"] == tv["counter"] + 1
        assert last.doc["isWritablePrimary"] is False
        assert time.monotonic() - t0 < 5
    finally:
        s.close()
    c.close()
    assert n.proc.wait(30) == 0


def test_a_streaming_hello_to_a_router_ends_with_shutdown_in_progress(qc, shale_process):
    r = start_router(shale_process, qc, 100)
    c = r.client()
    tv = hello(c)["topologyVersion"]
    s, first = stream_first(r.port, {"processId": ObjectId(), "counter": Int64(0)}, 600000,
                            name="isMaster")
    try:
        assert first.reply_flags & MORE_TO_COME
        r.proc.send_signal(signal.SIGTERM)
        last = wire_util.recv_reply(s)
        assert not last.reply_flags & MORE_TO_COME
        assert last.doc["ok"] == 0 and last.doc["code"] == 91
        assert last.doc["topologyVersion"]["counter"] == tv["counter"] + 1
    finally:
        s.close()
    c.close()
    assert r.proc.wait(30) == 0


# ------------------------------------------------------------------ start-up


def _refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return False
    except OSError:
        return True


def test_router_does_not_serve_before_its_config_server_answers(shale_process):
    cfg_port = free_port()
    r = shale_process(["router", "--configdb", "csrs/127.0.0.1:%d" % cfg_port],
                      name="router-early", start=False)
    r.start(wait=False)
    # Phase 2 needs the config server: the router is up but not listening yet.
    time.sleep(1.5)
    assert r.proc.poll() is None
    assert _refused(r.port)
    cfg = shale_process(["node", "--configsvr", "--replSet", "csrs"], name="config-late",
                        port=cfg_port)
    r.wait_ready()
    c = r.client()
    assert c.admin.command("listShards")["shards"] == []
    assert c.admin.command("hello")["msg"] == "isdbgrid"
    c.close()
    assert cfg.proc.poll() is None


def test_sigterm_while_a_router_waits_for_its_config_server(shale_process):
    r = shale_process(["router", "--configdb", "csrs/127.0.0.1:%d" % free_port()],
                      name="router-never", start=False)
    r.start(wait=False)
    wait_until(lambda: "Error initializing sharding state" in r.read_log(),
               what="the router to wait for its config server")
    r.proc.send_signal(signal.SIGTERM)
    assert r.proc.wait(10) == 0


def test_node_driver_keeps_working_while_one_router_quiesces(qc, shale_process):
    import json
    import os
    from test_node_driver import HERE, node_binary
    r1 = start_router(shale_process, qc, 3000, name="router-na")
    r2 = start_router(shale_process, qc, 100, name="router-nb")
    qc.router_client().admin.command("enableSharding", "nodequiesce", primaryShard="shard0")
    reaper = Background(lambda: r1.proc.wait(90))  # so the script sees the pid go
    out = subprocess.run([node_binary(), os.path.join(HERE, "quiesce.js"),
                          "mongodb://%s,%s/" % (r1.host, r2.host), str(r1.proc.pid), r1.host],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    reaper.join(30)
    assert reaper.result == 0
    assert res["sentSignal"] and res["otherAtStop"] > 0, res
    assert res["nerrors"] == 0, res
    assert res["streaming"], res  # the driver's monitor used the streaming hello
    qc.router_client().nodequiesce.command("dropDatabase")


def test_operations_still_running_after_quiesce_are_interrupted(qc, shale_process):
    # As on mongos: once quiesce mode is over, what still runs ends at once with
    # InterruptedAtShutdown, which carries the topologyVersion.
    r = start_router(shale_process, qc, 300)
    c = r.client()
    c.admin.command("enableSharding", "idb", primaryShard="shard1")
    c.idb.c.insert_one({"_id": 1})
    tv = hello(c)["topologyVersion"]
    c.close()
    s1 = qc.shard_client(1)
    sock = wire_util.connect(r.port)
    try:
        held = run_to_fail_point(s1, "waitInFindBeforeMakingBatch",
                                 lambda: raw(sock, "idb", {"find": "c"}))
        t0 = time.monotonic()
        r.proc.send_signal(signal.SIGTERM)
        held.join(30)
        assert held.error is None, held.error
        err = held.result
        assert err["code"] == 11600, err
        assert err["topologyVersion"] == {"processId": tv["processId"],
                                          "counter": tv["counter"] + 1}
        assert r.proc.wait(30) == 0
        assert time.monotonic() - t0 < 10
    finally:
        fail_point(s1, "waitInFindBeforeMakingBatch", "off")
        sock.close()
    qc.router_client().idb.command("dropDatabase")


def test_sigterm_during_a_data_node_start_up_is_a_clean_stop(shale_process):
    # Signal handlers go in before the role starts: a SIGTERM during recovery and the
    # sharding start-up is honoured once the node is up (a clean shutdown with its
    # checkpoint), where it used to kill the process mid-recovery.
    n = shale_process(["node", "--shardsvr", "--replSet", "early"], name="node-early",
                      start=False)
    n.start(wait=False)
    wait_until(lambda: "Shale starting" in n.read_log(), what="the node to start")
    n.proc.send_signal(signal.SIGTERM)
    assert n.proc.wait(30) == 0
    assert "Now exiting" in n.read_log()
