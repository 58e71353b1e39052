"""The request path under connection load (issue 22 item 4): a storm of connections opened
and closed while a driver's point finds run leaves no error and no leak (the node's
descriptors, threads and memory come back near where they started), and a client that
stops reading a large reply does not hold up anyone else."""

import os
import socket
import threading
import time

import pytest

import wire_util
from shale_fixtures import wait_until

STORM_CONNECTIONS = 2000
# Connections held open at once during the storm (the driver's own come on top).
STORM_WAVE = 200


def _proc_status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.split()[0] if v.split() else ""
    return {"rss_kb": int(out["VmRSS"]), "threads": int(out["Threads"]),
            "fds": len(os.listdir("/proc/%d/fd" % pid))}


def _sanitized(pid):
    """Whether the process runs under ASan or TSan, whose allocators keep freed memory
    (quarantine) so its RSS says nothing about leaks (LeakSanitizer checks at exit)."""
    with open("/proc/%d/maps" % pid) as f:
        maps = f.read()
    return "libasan" in maps or "libtsan" in maps


def _current_connections(client):
    return client.admin.command("serverStatus")["connections"]["current"]


class _Finds:
    """Point finds by _id back to back on a few threads through one pymongo client,
    counting results and keeping the first error."""

    def __init__(self, coll, nthreads=4):
        self.coll = coll
        self.stop = threading.Event()
        self.count = 0
        self.errors = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(nthreads)]

    def _run(self, i):
        k = i
        while not self.stop.is_set():
            try:
                doc = self.coll.find_one({"_id": k % 100})
                assert doc is not None and doc["_id"] == k % 100, doc
                with self.lock:
                    self.count += 1
            except Exception as e:  # noqa: BLE001 -- any failure fails the test
                self.errors.append(e)
                return
            k += 7

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()


def _hello_and_close(port, opened):
    """One short-lived connection: a handshake as a driver sends it, then close."""
    s = wire_util.connect(port)
    try:
        r = wire_util.command(s, {"hello": 1, "$db": "admin",
                                  "client": {"application": {"name": "storm"}}})
        assert r["ok"] == 1.0, r
        opened.append(1)
    finally:
        s.close()


def test_connection_storm_no_error_no_leak(node):
    c = node.client()
    c.test.storm.insert_many([{"_id": i, "v": "x" * 100} for i in range(100)])
    pid = node.proc.pid
    # The finds' own client, its pool filled before the counts start (a client's
    # streaming hello connection outlives its close by up to maxAwaitTimeMS, as mongod's).
    alone = _current_connections(c)
    fc = node.client(maxPoolSize=4, minPoolSize=4)
    wait_until(lambda: _current_connections(c) >= alone + 5, 10, "the finds' pool")
    base_conns = _current_connections(c)
    before = _proc_status(pid)

    opened = []
    start = time.monotonic()
    with _Finds(fc.test.storm) as finds:
        for _ in range((STORM_CONNECTIONS - 200) // STORM_WAVE):
            # Open a wave of connections together (they overlap on the server), then
            # handshake and close each.
            socks = [wire_util.connect(node.port) for _ in range(STORM_WAVE)]
            for s in socks:
                r = wire_util.command(s, {"hello": 1, "$db": "admin"})
                assert r["ok"] == 1.0, r
                opened.append(1)
            for s in socks:
                s.close()
        # And some that open and close one after another.
        for _ in range(200):
            _hello_and_close(node.port, opened)
    elapsed = time.monotonic() - start
    assert not finds.errors, finds.errors[0]
    assert finds.count > 0
    assert len(opened) == STORM_CONNECTIONS

    # Every storm connection's thread has left: the server counts only ours again and its
    # descriptors and threads are back where they were.
    wait_until(lambda: _current_connections(c) <= base_conns, 20,
               "connections back to %d" % base_conns)
    after = {}

    def settled():
        after.update(_proc_status(pid))
        return after["fds"] <= before["fds"] + 2 and after["threads"] <= before["threads"] + 2

    wait_until(settled, 20, "descriptors and threads back")
    # Memory: the threads' stacks are given back; allow the allocator's arenas some growth.
    assert _sanitized(pid) or after["rss_kb"] - before["rss_kb"] < 64 * 1024, (before, after)
    status = c.admin.command("serverStatus")["connections"]
    assert status["totalCreated"] >= STORM_CONNECTIONS
    print("storm: %d connections in %.1f s with %d finds; before %s after %s"
          % (len(opened), elapsed, finds.count, before, after))


def test_slow_client_does_not_block_others(node):
    c = node.client()
    coll = c.test.slow
    # About 8 MB in one batch: more than the socket buffers of a connection that does not
    # read take (the receiver's window only grows as its application reads).
    big = "y" * (64 * 1024)
    coll.insert_many([{"_id": i, "pad": big} for i in range(128)])
    coll.insert_many([{"_id": 1000 + i} for i in range(10)])
    base_conns = _current_connections(c)

    stalled = wire_util.connect(node.port)
    rid = wire_util.next_request_id()
    stalled.sendall(wire_util.op_msg({"find": "slow", "filter": {"_id": {"$lt": 1000}},
                                      "batchSize": 1000, "$db": "test"}, request_id=rid))

    # The server's thread for it is stuck sending: its connection stays active (the
    # serverStatus asking counts itself too).
    def stuck(n=1):
        return c.admin.command("serverStatus")["connections"]["active"] >= 1 + n

    wait_until(stuck, 10, "the stalled find's connection to be active")

    # Everyone else is served meanwhile, on existing and new connections.
    t0 = time.monotonic()
    for i in range(200):
        assert coll.find_one({"_id": 1000 + i % 10})["_id"] == 1000 + i % 10
    assert coll.count_documents({"_id": {"$gte": 1000}}) == 10
    fresh = wire_util.connect(node.port)
    r = wire_util.command(fresh, {"find": "slow", "filter": {"_id": 1001}, "$db": "test"})
    assert r["cursor"]["firstBatch"] == [{"_id": 1001}], r
    fresh.close()
    assert time.monotonic() - t0 < 10
    assert stuck(), "the stalled reply was sent meanwhile: the test proves nothing"

    # The stalled client reads at last and gets the whole, correct reply.
    stalled.settimeout(30)
    r = wire_util.recv_reply(stalled)
    assert r.response_to == rid
    doc = r.doc
    assert doc["ok"] == 1.0
    assert len(doc["cursor"]["firstBatch"]) == 128

    # A client that stalls and then goes away frees its connection.
    stalled2 = wire_util.connect(node.port)
    stalled2.sendall(wire_util.op_msg({"find": "slow", "filter": {"_id": {"$lt": 1000}},
                                       "batchSize": 1000, "$db": "test"}))
    wait_until(stuck, 10, "the second stalled find's connection to be active")
    stalled.close()
    stalled2.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    stalled2.close()  # a reset: the server's send fails
    wait_until(lambda: _current_connections(c) <= base_conns, 20,
               "connections back to %d" % base_conns)
    assert not stuck()


@pytest.mark.parametrize("n", [300])
def test_many_idle_connections_cost_no_cpu(node, n):
    """Idle connections cost memory, not CPU: with hundreds open and silent, the node's
    CPU time barely moves."""
    c = node.client()
    socks = []
    try:
        for _ in range(n):
            s = wire_util.connect(node.port)
            assert wire_util.command(s, {"hello": 1, "$db": "admin"})["ok"] == 1.0
            socks.append(s)
        wait_until(lambda: _current_connections(c) >= n, 10, "idle connections counted")
        pid = node.proc.pid
        tck = os.sysconf("SC_CLK_TCK")

        def cpu_s():
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / tck

        t0 = cpu_s()
        time.sleep(2.0)  # measuring idle cost over a fixed period: the wait is the test
        used = cpu_s() - t0
        # A node with nothing to do spends a few ms a second on its own timers.
        assert used < 0.2, "%d idle connections cost %.2f s of CPU in 2 s" % (n, used)
        for s in socks:
            assert wire_util.command(s, {"ping": 1, "$db": "admin"})["ok"] == 1.0
    finally:
        for s in socks:
            s.close()
