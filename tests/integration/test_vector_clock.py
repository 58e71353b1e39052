"""The vector clock (docs/design/vector_clock.md; seeds/000 "The vector clock and causal
consistency"): HMAC keys in admin.system.keys and their rotation, signed $clusterTime for
clients that may not advance the clock (the test-only switch
testTreatClientsAsUnauthorizedForClusterTime stands in for authentication), validation
(TimeProofMismatch 204, KeyNotFound 211), the advance limit (ClusterTimeFailsRateLimiter 205),
gossip between cluster processes, and times that never go back across kill -9 of any role."""

import hashlib
import hmac
import struct
import time

import bson
import pymongo
import pytest
from bson.int64 import Int64
from bson.timestamp import Timestamp
from pymongo import WriteConcern

import wire_util
from shale_fixtures import ShaleCluster, fail_point, wait_until

SWITCH = "testTreatClientsAsUnauthorizedForClusterTime"
ROTATION_SECS = 4


@pytest.fixture(scope="module")
def kc(request):
    """A 2-shard cluster whose keys rotate every ROTATION_SECS seconds."""
    c = ShaleCluster(config_extra=["--setParameter", "KeysRotationIntervalSec=%d" % ROTATION_SECS])
    failed_before = request.session.testsfailed
    try:
        c.start()
    except Exception:
        c.cleanup(keep_logs_prefix="test_vector_clock-start")
        raise
    yield c
    failed = request.session.testsfailed > failed_before
    c.cleanup(keep_logs_prefix="test_vector_clock" if failed else None)


def ts_u64(t):
    return (t.time << 32) | t.inc


def proof(key, t):
    """MongoDB's time proof: HMAC-SHA1 over the little-endian ts | 0xFFFF."""
    return hmac.new(key, struct.pack("<Q", ts_u64(t) | 0xFFFF), hashlib.sha1).digest()


def keys(c):
    return {k["_id"]: k for k in c.config_client().admin["system.keys"].find()}


def switch(client, on):
    client.admin.command("setParameter", 1, **{SWITCH: on})


def raw(proc, body, internal=False):
    """One command on a fresh connection; 'internal' says internalClient in hello first, as
    a cluster process does."""
    s = wire_util.connect(proc.port)
    try:
        if internal:
            wire_util.command(s, {"hello": 1, "$db": "admin",
                                  "internalClient": {"minWireVersion": 0, "maxWireVersion": 21}})
        body = dict(body)
        body.setdefault("$db", "admin")
        return wire_util.command(s, body)
    finally:
        s.close()


def signed(t, key_id, h):
    return {"clusterTime": t, "signature": {"hash": bson.Binary(h), "keyId": Int64(key_id)}}


def check_signed(c, reply):
    ct = reply["$clusterTime"]
    kid = ct["signature"]["keyId"]
    assert kid != 0
    k = keys(c)[kid]
    assert bytes(ct["signature"]["hash"]) == proof(bytes(k["key"]), ct["clusterTime"])
    return kid


def test_keys_documents_have_mongodb_shape(kc):
    ks = sorted(keys(kc).values(), key=lambda k: k["expiresAt"].time)
    assert len(ks) >= 2  # a current key and a reserve
    for k in ks:
        assert isinstance(k["_id"], Int64) or isinstance(k["_id"], int)
        assert k["purpose"] == "HMAC"
        assert len(bytes(k["key"])) == 20
        assert isinstance(k["expiresAt"], Timestamp) and k["expiresAt"].inc == 0
    # The reserve expires one interval after the key before it.
    assert ks[-1]["expiresAt"].time - ks[-2]["expiresAt"].time == ROTATION_SECS


def test_replies_are_dummy_signed_while_clients_may_advance_the_clock(kc):
    for client in (kc.router_client(), kc.shard_client(0), kc.config_client()):
        sig = client.admin.command("ping")["$clusterTime"]["signature"]
        assert sig["keyId"] == 0 and bytes(sig["hash"]) == b"\0" * 20


def test_switch_needs_test_commands(shale_process):
    p = shale_process(["node", "--replSet", "rs"], start=False, test_commands=False)
    p.start(extra=["--setParameter", SWITCH + "=true"], wait=False)
    assert p.proc.wait(30) != 0
    assert SWITCH in p.read_log()
    q = shale_process(["node", "--replSet", "rs"], test_commands=False)
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        switch(q.client(), True)
    assert e.value.code == 20  # IllegalOperation


def test_signed_replies_on_every_role_and_key_rotation(kc):
    clients = [kc.router_client(), kc.shard_client(0), kc.config_client()]
    for c in clients:
        switch(c, True)
    try:
        first = {}
        for i, c in enumerate(clients):
            reply = c.admin.command("ping")
            first[i] = check_signed(kc, reply)
            assert "operationTime" in reply
        # Keys rotate: a new key appears, signatures move to it once the signed time is past
        # the old key's expiry (a write moves the time), and the old key has expired.
        old = first[0]

        def moved(i):
            def check():
                clients[i].vc_rot.t.insert_one({})  # ticks the clock (the router's: by gossip)
                return check_signed(kc, clients[i].admin.command("ping")) != old
            return check
        for i in (0, 1):
            wait_until(moved(i), timeout=4 * ROTATION_SECS, what="client %d switching key" % i)
        wait_until(lambda: check_signed(kc, clients[2].admin.command("ping")) != old,
                   timeout=4 * ROTATION_SECS, what="the config server switching key")
        now = clients[0].admin.command("ping")["$clusterTime"]["clusterTime"]
        assert keys(kc)[old]["expiresAt"] <= now
        assert len(keys(kc)) >= 3  # old keys stay, for times signed with them
        # ... so a time signed with the expired key still passes a full check.
        old_key = keys(kc)[old]
        t_old = Timestamp(old_key["expiresAt"].time - 1, 3)
        fail_point(clients[0], "alwaysValidateClientsClusterTime", "alwaysOn")
        try:
            got = raw(kc.router, {"ping": 1, "$clusterTime": signed(
                t_old, old, proof(bytes(old_key["key"]), t_old))})
            assert got["ok"] == 1, got
        finally:
            fail_point(clients[0], "alwaysValidateClientsClusterTime", "off")
    finally:
        for c in clients:
            switch(c, False)


def test_tampered_signature_and_unknown_key_refused(kc):
    r = kc.router_client()
    switch(r, True)
    try:
        reply = r.admin.command("ping")
        kid = check_signed(kc, reply)
        t = reply["$clusterTime"]["clusterTime"]
        ahead = Timestamp(t.time + 1, 1)  # newer than anything the router signed, and a key
        # (the reserve) still signs it
        good = proof(bytes(keys(kc)[kid]["key"]), ahead)
        bad = bytes([good[0] ^ 1]) + good[1:]
        got = raw(kc.router, {"ping": 1, "$clusterTime": signed(ahead, kid, bad)})
        assert got["ok"] == 0 and got["code"] == 204, got
        assert got["codeName"] == "TimeProofMismatch"
        got = raw(kc.router, {"ping": 1, "$clusterTime": signed(ahead, 12345, good)})
        assert got["ok"] == 0 and got["code"] == 211 and got["codeName"] == "KeyNotFound", got
        # A correct proof is accepted and moves the router's clock.
        got = raw(kc.router, {"ping": 1, "$clusterTime": signed(ahead, kid, good)})
        assert got["ok"] == 1, got
        assert got["$clusterTime"]["clusterTime"] >= ahead
        # Times at or below the newest good one are not checked again, unless asked.
        seen = signed(t, kid, b"\1" * 20)
        assert raw(kc.router, {"ping": 1, "$clusterTime": seen})["ok"] == 1
        fail_point(r, "alwaysValidateClientsClusterTime", "alwaysOn")
        try:
            assert raw(kc.router, {"ping": 1, "$clusterTime": seen})["code"] == 204
        finally:
            fail_point(r, "alwaysValidateClientsClusterTime", "off")
        # A shard checks the same way.
        s = kc.shard_client(0)
        switch(s, True)
        try:
            got = raw(kc.shards[0], {"ping": 1, "$clusterTime": signed(ahead, kid, bad)})
            assert got["code"] == 204, got
        finally:
            switch(s, False)
    finally:
        switch(r, False)
    # With the switch off (no authentication) the proof is not checked, as in MongoDB.
    got = raw(kc.router, {"ping": 1, "$clusterTime": signed(Timestamp(int(time.time()), 1), 1,
                                                            b"\7" * 20)})
    assert got["ok"] == 1, got


def test_far_future_time_refused_on_every_role(kc):
    far = Timestamp(int(time.time()) + 2 * 365 * 24 * 3600, 1)
    for proc in [kc.router, kc.shards[0], kc.config]:
        got = raw(proc, {"ping": 1, "$clusterTime": signed(far, 0, b"\0" * 20)})
        assert got["ok"] == 0 and got["code"] == 205, (proc.name, got)
        assert got["codeName"] == "ClusterTimeFailsRateLimiter"
        assert "is too far from this node's wall clock time" in got["errmsg"]
        # The clock did not move.
        ct = raw(proc, {"ping": 1})["$clusterTime"]["clusterTime"]
        assert ct.time < far.time - 300 * 24 * 3600
    # A year ahead is still within the limit of a year (and 30 days over is not).
    near = Timestamp(int(time.time()) + 30, 0)
    assert raw(kc.shards[1], {"ping": 1, "$clusterTime": signed(near, 0, b"\0" * 20)})["ok"] == 1


def test_config_and_topology_time_only_between_cluster_processes(kc):
    for proc in [kc.router, kc.shards[0], kc.config]:
        ext = raw(proc, {"ping": 1})
        assert "$configTime" not in ext and "$topologyTime" not in ext, proc.name
        assert "$clusterTime" in ext
        inn = raw(proc, {"ping": 1}, internal=True)
        assert inn["$clusterTime"]["clusterTime"] >= inn["$configTime"] >= inn["$topologyTime"]
        shards = list(kc.config_client().config.shards.find())
        assert inn["$topologyTime"] == max(s["topologyTime"] for s in shards), proc.name


def test_router_gossips_cluster_time_to_the_shards_it_targets(kc):
    r = kc.router_client()
    r.admin.command("enableSharding", "vc_a", primaryShard="shard0")
    r.admin.command("enableSharding", "vc_b", primaryShard="shard1")
    r.vc_b.c.insert_one({"_id": 0})
    # Move shard0's clock well ahead of shard1's by advancing it directly.
    ahead = Timestamp(int(time.time()) + 20, 5)
    assert raw(kc.shards[0], {"ping": 1, "$clusterTime": signed(ahead, 0, b"\0" * 20)})["ok"] == 1
    t = r.vc_a.command("insert", "c", documents=[{"_id": 1}])["operationTime"]
    assert t >= ahead
    # The router's next request to shard1 carries that time: shard1's clock is past it.
    r.vc_b.c.find_one({"_id": 0})
    assert raw(kc.shards[1], {"ping": 1})["$clusterTime"]["clusterTime"] >= t
    # And shard1's next write is later than the write on shard0.
    op = r.vc_b.command("insert", "c", documents=[{"_id": 2}])["operationTime"]
    assert op > t


def internal_times(proc):
    got = raw(proc, {"ping": 1}, internal=True)
    return (got["$clusterTime"]["clusterTime"], got.get("$configTime"), got.get("$topologyTime"))


@pytest.mark.parametrize("role", ["config", "shard", "router"])
def test_times_never_go_back_across_kill_9(kc, role):
    r = kc.router_client()
    r.admin.command("enableSharding", "vc_k", primaryShard="shard0")
    r.vc_k.get_collection("c", write_concern=WriteConcern(j=True)).insert_one({"x": role})
    r.admin.command("ping")
    procs = {"config": kc.config, "shard": kc.shards[0], "router": kc.router}
    proc = procs[role]
    # Make this process's times as new as the cluster's, then record them.
    raw(proc, {"ping": 1, "$clusterTime": r.admin.command("ping")["$clusterTime"]})
    before = internal_times(proc)
    assert before[1] is not None and before[2] is not None
    proc.kill()
    if role == "config":
        kc.restart_config()
    elif role == "shard":
        kc.restart_shard(0)
    else:
        proc.start()
    after = internal_times(proc)
    assert after[0] >= before[0], (before, after)
    assert after[1] >= before[1], (before, after)
    assert after[2] >= before[2], (before, after)
    # The cluster still works through the restarted process.
    wait_until(lambda: kc.router_client().vc_k.c.count_documents({}) >= 1,
               what="reads through the router")


def test_shard_recovers_config_and_topology_time_from_config_vector_clock(kc):
    """With the config server down, a shard restarted after kill -9 has only what it wrote to
    config.vectorClock ({_id: "vectorClockState", configTime, topologyTime})."""
    r = kc.router_client()
    r.admin.command("enableSharding", "vc_p", primaryShard="shard1")
    r.vc_p.get_collection("c", write_concern=WriteConcern(j=True)).insert_one({"_id": 1})
    before = internal_times(kc.shards[1])
    doc = {}

    def persisted():
        doc.update(kc.shard_client(1).config.vectorClock.find_one({"_id": "vectorClockState"}) or {})
        return doc and doc["configTime"] >= before[1] and doc["topologyTime"] >= before[2]
    wait_until(persisted, what="config.vectorClock on shard1")
    assert set(doc) == {"_id", "configTime", "topologyTime"}
    kc.config.kill()
    try:
        kc.shards[1].kill()
        kc.restart_shard(1)
        after = internal_times(kc.shards[1])
        assert after[0] >= before[0] and after[1] >= before[1] and after[2] >= before[2], (
            before, after)
    finally:
        kc.restart_config()
    wait_until(lambda: r.vc_p.c.find_one({"_id": 1}) is not None, what="reads through the router")


def test_node_driver_works_with_signed_cluster_time(kc):
    """The Node.js driver gossips back the signed $clusterTime it is given; the router checks
    it on every request (the driver's whole smoke run passes with the switch on)."""
    import json
    import os
    import subprocess
    from test_node_driver import HERE, node_binary
    r = kc.router_client()
    switch(r, True)
    try:
        out = subprocess.run([node_binary(), os.path.join(HERE, "cluster_smoke.js"), kc.uri()],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout)
        assert res["inserted"] == 1000 and res["deleted"] == 1
        check_signed(kc, r.admin.command("ping"))
    finally:
        switch(r, False)


def test_standalone_ignores_cluster_time_and_replica_set_member_limits_it(node, rs_node):
    far = Timestamp(int(time.time()) + 2 * 365 * 24 * 3600, 1)
    got = raw(node, {"ping": 1, "$clusterTime": signed(far, 0, b"\0" * 20)})
    assert got["ok"] == 1 and "$clusterTime" not in got, got
    got = raw(rs_node, {"ping": 1, "$clusterTime": signed(far, 0, b"\0" * 20)})
    assert got["ok"] == 0 and got["code"] == 205, got
