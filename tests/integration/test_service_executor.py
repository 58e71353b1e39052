"""The shared service executor (--serviceExecutor shared, issue 22): connections wait in one
epoll set and a few workers serve them. The connection-load tests run again against it (a
storm of connections, a client that stops reading an 8 MB reply, thousands of idle
connections), requests that wait long (awaitable hellos) do not starve the workers, and a
bad value stops the start."""

import select
import subprocess
import time

import pytest

import wire_util
from shale_fixtures import SHALE_BIN
# The same behaviours, collected again here against this module's `node` (shared executor).
from test_connection_load import (test_connection_storm_no_error_no_leak,  # noqa: F401
                                  test_many_idle_connections_cost_no_cpu,
                                  test_slow_client_does_not_block_others)


@pytest.fixture
def node(shale_process):
    return shale_process(["node", "--setParameter", "serviceExecutor=shared"],
                         name="node-shared")


def test_waiting_hellos_do_not_starve_the_workers(node):
    c = node.client()
    coll = c.test.exec
    coll.insert_many([{"_id": i} for i in range(10)])
    # More awaitable hellos than the machine has cores (the executor's workers), each
    # waiting for a topology change that does not come.
    waiting = []
    for _ in range(8):
        s = wire_util.connect(node.port)
        tv = wire_util.command(s, {"hello": 1, "$db": "admin"})["topologyVersion"]
        s.sendall(wire_util.op_msg({"hello": 1, "topologyVersion": tv, "maxAwaitTimeMS": 20000,
                                    "$db": "admin"}))
        waiting.append(s)
    t0 = time.monotonic()
    for i in range(200):
        assert coll.find_one({"_id": i % 10})["_id"] == i % 10
    fresh = wire_util.connect(node.port)
    r = wire_util.command(fresh, {"find": "exec", "filter": {"_id": 3}, "$db": "test"})
    assert r["cursor"]["firstBatch"] == [{"_id": 3}], r
    fresh.close()
    assert time.monotonic() - t0 < 10
    readable, _, _ = select.select(waiting, [], [], 0)
    assert readable == [], "a hello answered early: the test proves nothing"
    for s in waiting:
        s.close()


def test_bad_service_executor_value_stops_the_start(tmp_path):
    r = subprocess.run([SHALE_BIN, "node", "--port", "0", "--dbpath", str(tmp_path),
                        "--setParameter", "serviceExecutor=bogus"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    assert r.returncode != 0
    assert b"serviceExecutor must be dedicated or shared" in r.stdout, r.stdout[-2000:]
