"""Administration and diagnostic commands through the router, in mongos's reply shapes:
isdbgrid, getShardVersion, validate, dataSize, currentOp / $currentOp / killOp, fsync,
getDefaultRWConcern / setDefaultRWConcern, connPoolStats / shardConnPoolStats, logRotate.
Each answer is checked against what the shards themselves say."""

import datetime
import glob
import os
import signal
import socket
import threading
import time

import pytest
from bson import SON, ObjectId, Timestamp
from pymongo.errors import OperationFailure, PyMongoError, WriteConcernError

from shale_fixtures import fail_point, run_to_fail_point, wait_until

N = 600


@pytest.fixture(scope="module")
def adm(cluster):
    """db 'adm' (primary shard0): 'sh' sharded on {x: 1}, split at 300, [300, max) on
    shard1; 'plain' unsharded."""
    r = cluster.router_client()
    for i in range(2):  # the range deleter removes a donor's copies without waiting
        cluster.shard_client(i).admin.command("setParameter", 1, orphanCleanupDelaySecs=0)
    r.admin.command("enableSharding", "adm", primaryShard="shard0")
    r.admin.command("shardCollection", "adm.sh", key={"x": 1})
    r.adm.sh.insert_many([{"_id": i, "x": i, "pad": "p" * (i % 40)} for i in range(N)])
    r.admin.command("split", "adm.sh", middle={"x": 300})
    r.admin.command("moveChunk", "adm.sh", find={"x": 400}, to="shard1", _waitForDelete=True)
    r.adm.plain.insert_many([{"_id": i, "v": i} for i in range(100)])
    r.adm.plain.create_index("v")
    return cluster


def _direct(cluster, i, db, *cmd, **kw):
    return cluster.shard_client(i)[db].command(*cmd, **kw)


# ---- isdbgrid ----


def test_isdbgrid(adm):
    res = adm.router_client().admin.command("isdbgrid")
    assert res["ok"] == 1
    assert res["isdbgrid"] == 1
    assert res["hostname"] == socket.gethostname()
    # Any database will do, as on mongos.
    assert adm.router_client().adm.command("isdbgrid")["isdbgrid"] == 1


def test_isdbgrid_is_not_on_data_nodes(adm):
    # A data node does not know it: that is how tools tell a router apart.
    with pytest.raises(OperationFailure) as e:
        adm.shard_client(0).admin.command("isdbgrid")
    assert e.value.code == 59


# ---- getShardVersion ----


def _config_chunks(cluster, ns):
    cfg = cluster.config_client(uuidRepresentation="standard").config
    uuid = cfg.collections.find_one({"_id": ns})["uuid"]
    return list(cfg.chunks.find({"uuid": uuid}).sort("min", 1))


def test_get_shard_version_collection(adm):
    r = adm.router_client()
    res = r.admin.command("getShardVersion", "adm.sh")
    coll = adm.config_client().config.collections.find_one({"_id": "adm.sh"})
    chunks = _config_chunks(adm, "adm.sh")
    top = max(c["lastmod"] for c in chunks)
    assert isinstance(res["version"], Timestamp)
    assert res["version"] == top
    assert res["versionEpoch"] == coll["lastmodEpoch"]
    assert isinstance(res["versionEpoch"], ObjectId)
    assert res["versionTimestamp"] == coll["timestamp"]
    assert "chunks" not in res


def test_get_shard_version_full_metadata(adm):
    res = adm.router_client().admin.command("getShardVersion", "adm.sh", fullMetadata=True)
    chunks = _config_chunks(adm, "adm.sh")
    assert res["chunks"] == [[c["min"], c["max"]] for c in chunks]
    assert len(res["chunks"]) == 2
    assert res["chunks"][0][1] == {"x": 300}


def test_get_shard_version_database(adm):
    res = adm.router_client().admin.command("getShardVersion", "adm")
    db = adm.config_client().config.databases.find_one({"_id": "adm"})
    assert res["primaryShard"] == "shard0"
    assert res["version"]["uuid"] == db["version"]["uuid"]
    assert res["version"]["lastMod"] == db["version"]["lastMod"]
    assert res["version"]["timestamp"] == db["version"]["timestamp"]


def test_get_shard_version_errors(adm):
    admin = adm.router_client().admin
    with pytest.raises(OperationFailure) as e:
        admin.command("getShardVersion", "adm.plain")
    assert e.value.code == 118  # NamespaceNotSharded
    assert "adm.plain is not sharded" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        admin.command("getShardVersion", "nosuchdb.c")
    assert e.value.code == 26  # NamespaceNotFound
    with pytest.raises(OperationFailure) as e:
        admin.command("getShardVersion", 5)
    assert e.value.code == 2  # BadValue: namespace has invalid type
    assert "namespace has invalid type" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        adm.router_client().adm.command("getShardVersion", "adm.sh")
    assert e.value.code == 13  # admin only


# ---- validate ----


def test_validate_sharded(adm):
    res = adm.router_client().adm.command("validate", "sh")
    assert res["ok"] == 1
    assert res["valid"] is True
    assert set(res["raw"]) == {"shard0", "shard1"}
    total = 0
    for i in range(2):
        one = res["raw"]["shard%d" % i]
        direct = _direct(adm, i, "adm", "validate", "sh")
        assert one["ok"] == 1 and one["valid"] is True
        assert one["ns"] == "adm.sh"
        assert one["nrecords"] == direct["nrecords"]
        total += one["nrecords"]
    assert total == N
    # A sharded collection's reply is only valid + raw, as on mongos.
    assert "nrecords" not in res


def test_validate_unsharded(adm):
    res = adm.router_client().adm.command("validate", "plain", full=True)
    assert res["valid"] is True
    assert res["ns"] == "adm.plain"
    assert res["nrecords"] == 100
    assert res["nIndexes"] == 2
    assert res["keysPerIndex"] == {"_id_": 100, "v_1": 100}
    assert list(res["raw"]) == ["shard0"]
    assert res["raw"]["shard0"]["nrecords"] == 100


def test_validate_errors(adm):
    db = adm.router_client().adm
    with pytest.raises(OperationFailure) as e:
        db.command("validate", "nosuch")
    assert e.value.code == 26
    with pytest.raises(OperationFailure) as e:
        db.command("validate", 12)
    assert e.value.code == 73  # InvalidNamespace
    assert "collection name has invalid type" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        adm.router_client().nosuchdb.command("validate", "c")
    assert e.value.code == 26


# ---- dataSize ----


def test_data_size_sharded_sums_shards(adm):
    res = adm.router_client().adm.command("dataSize", "adm.sh")
    per = [_direct(adm, i, "adm", "dataSize", "adm.sh") for i in range(2)]
    assert res["ok"] == 1
    assert res["numObjects"] == N == sum(p["numObjects"] for p in per)
    assert res["size"] == sum(p["size"] for p in per) > 0
    assert res["millis"] >= 0


def test_data_size_range_and_alias(adm):
    # The range is each shard's: min/max/keyPattern do not narrow the shards on mongos.
    res = adm.router_client().adm.command(
        {"datasize": "adm.sh", "keyPattern": {"x": 1}, "min": {"x": 250}, "max": {"x": 350}})
    assert res["numObjects"] == 100


def test_data_size_unsharded_and_missing(adm):
    db = adm.router_client().adm
    assert db.command("dataSize", "adm.plain")["numObjects"] == 100
    # A missing collection of a known database answers zeros (the primary's answer).
    res = db.command("dataSize", "adm.nosuch")
    assert (res["size"], res["numObjects"]) == (0, 0)


def test_data_size_errors(adm):
    db = adm.router_client().adm
    with pytest.raises(OperationFailure) as e:
        db.command("dataSize", 3)
    assert e.value.code == 14  # TypeMismatch
    with pytest.raises(OperationFailure) as e:
        db.command("dataSize", "nosuchdb.c")
    assert e.value.code == 26
    with pytest.raises(OperationFailure) as e:
        db.command("dataSize", "adm.sh", min={"x": 1})
    assert e.value.code == 2  # only one of min or max


# ---- currentOp / $currentOp / killOp ----


class BlockedFind:
    """A find on adm.plain through the router with a comment, held on shard0 by MongoDB's
    waitInFindBeforeMakingBatch fail point until killed or released."""

    def __init__(self, cluster, comment):
        self.cluster = cluster
        self.comment = comment
        self.error = None
        self.result = None
        fail_point(cluster.shard_client(0), "waitInFindBeforeMakingBatch", "alwaysOn",
                   {"nss": "adm.plain"})
        self.client = cluster.router_client()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self):
        try:
            self.result = list(self.client.adm.plain.find({"v": {"$gte": 0}}, comment=self.comment))
        except OperationFailure as e:
            self.error = e

    def release(self):
        fail_point(self.cluster.shard_client(0), "waitInFindBeforeMakingBatch", "off")
        self.thread.join(30)
        self.client.close()


def _ops(client, comment):
    """currentOp filtered by the operation's comment (the filter is the command's fields)."""
    return client.admin.command(SON([("currentOp", 1), ("command.comment", comment)]))["inprog"]


def test_current_op_lists_shard_ops_tagged(adm):
    b = BlockedFind(adm, "cop-list")
    try:
        r = adm.router_client()
        ops = wait_until(lambda: [o for o in r.admin.command("currentOp")["inprog"]
                                  if o.get("command", {}).get("comment") == "cop-list"])
        assert len(ops) == 1
        o = ops[0]
        assert o["shard"] == "shard0"
        shard, _, num = o["opid"].partition(":")
        assert shard == "shard0" and int(num) > 0
        assert "client_s" in o and "client" not in o
        assert o["ns"] == "adm.plain"
        assert o["op"] == "query"
        assert o["active"] is True
        assert o["command"]["find"] == "plain"
        assert o["secs_running"] >= 0 and o["microsecs_running"] >= 0
        # The filter is the command's other fields; the shard's own view has the plain opid.
        assert [x["opid"] for x in _ops(r, "cop-list")] == [o["opid"]]
        direct = _ops(adm.shard_client(0), "cop-list")
        assert [x["opid"] for x in direct] == [int(num)]
        assert "shard" not in direct[0] and "client" in direct[0]
        assert _ops(r, "no-such-comment") == []
    finally:
        b.release()
    assert b.error is None and len(b.result) == 100


def test_current_op_aggregation_stage(adm):
    b = BlockedFind(adm, "cop-agg")
    try:
        r = adm.router_client()
        pipeline = [{"$currentOp": {"allUsers": True, "idleConnections": False}},
                    {"$match": {"command.comment": "cop-agg"}},
                    {"$project": {"shard": 1, "opid": 1, "ns": 1}}]
        ops = wait_until(lambda: list(r.admin.aggregate(pipeline)))
        assert len(ops) == 1
        assert ops[0]["shard"] == "shard0" and ops[0]["ns"] == "adm.plain"
        assert ops[0]["opid"].startswith("shard0:")
        # localOps: the router's own operations -- the routed find is one of them.
        local = list(r.admin.aggregate([{"$currentOp": {"localOps": True}},
                                        {"$match": {"command.comment": "cop-agg"}}]))
        assert len(local) == 1
        assert isinstance(local[0]["opid"], int) and "shard" not in local[0]
        assert local[0]["ns"] == "adm.plain"
        assert local[0]["host"] == adm.router.host
    finally:
        b.release()
    assert b.error is None


def test_kill_op_through_router(adm):
    b = BlockedFind(adm, "cop-kill")
    try:
        r = adm.router_client()
        ops = wait_until(lambda: _ops(r, "cop-kill"))
        res = r.admin.command("killOp", op=ops[0]["opid"])
        assert res["ok"] == 1
        assert res["shard"] == "shard0"
        assert res["shardid"] == int(ops[0]["opid"].split(":")[1])
        b.thread.join(30)
        assert not b.thread.is_alive()
        assert b.error is not None and b.error.code == 11601  # Interrupted
        assert _ops(r, "cop-kill") == []
    finally:
        b.release()


def _local_ops(client, comment):
    """The router's own operations ($currentOp localOps) with this comment."""
    return list(client.admin.aggregate([{"$currentOp": {"localOps": True}},
                                        {"$match": {"command.comment": comment}}]))


def test_kill_op_of_router_op_interrupts_its_wait_and_the_shard_op(adm):
    # The find is held on shard0; killing the ROUTER's operation (a plain opid) must end the
    # router's wait for the shard at once -- the fail point stays on -- and, as mongos does
    # with _killOperations, the shard's part of it too.
    b = BlockedFind(adm, "cop-kill-local")
    try:
        r = adm.router_client()
        shard = adm.shard_client(0)
        wait_until(lambda: _ops(shard, "cop-kill-local"), what="the shard's find")
        local = wait_until(lambda: _local_ops(r, "cop-kill-local"), what="the router's find")
        assert len(local) == 1 and isinstance(local[0]["opid"], int)
        assert r.admin.command("killOp", op=local[0]["opid"])["ok"] == 1
        b.thread.join(10)
        assert not b.thread.is_alive(), "the router kept waiting for the shard"
        assert b.error is not None and b.error.code == 11601  # Interrupted
        assert b.error.details["codeName"] == "Interrupted"
        # The shard's operation was killed as well, though its fail point is still on.
        wait_until(lambda: _ops(shard, "cop-kill-local") == [], what="the shard op to end")
        assert _local_ops(r, "cop-kill-local") == []
    finally:
        b.release()
    # The router's connections to the shard still work after one was cut mid-request.
    assert len(list(adm.router_client().adm.plain.find({"v": {"$lt": 5}}))) == 5


def test_kill_operations_by_key(adm):
    # _killOperations (what the router sends) kills the operations carrying those keys.
    import uuid
    from bson.binary import Binary, UuidRepresentation
    shard = adm.shard_client(0)
    fail_point(shard, "waitInFindBeforeMakingBatch", "alwaysOn", {"nss": "adm.plain"})
    key = Binary.from_uuid(uuid.uuid4(), UuidRepresentation.STANDARD)
    errors = []

    def run():
        try:
            adm.shard_client(0).adm.command(SON([("find", "plain"), ("comment", "cop-key"),
                                                 ("clientOperationKey", key)]))
        except OperationFailure as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    try:
        wait_until(lambda: _ops(shard, "cop-key"))
        other = Binary.from_uuid(uuid.uuid4(), UuidRepresentation.STANDARD)
        assert shard.admin.command("_killOperations", operationKeys=[other])["ok"] == 1
        assert len(_ops(shard, "cop-key")) == 1
        assert shard.admin.command("_killOperations", operationKeys=[key])["ok"] == 1
        t.join(10)
        assert [e.code for e in errors] == [11601]
    finally:
        fail_point(shard, "waitInFindBeforeMakingBatch", "off")
        t.join(30)
    with pytest.raises(OperationFailure) as e:
        shard.admin.command("_killOperations", 1)
    assert e.value.code == 40414
    with pytest.raises(OperationFailure) as e:
        shard.admin.command("_killOperations", operationKeys=["x"])
    assert e.value.code == 14


def test_kill_op_on_data_node(adm):
    shard = adm.shard_client(0)
    fail_point(shard, "waitInFindBeforeMakingBatch", "alwaysOn", {"nss": "adm.plain"})
    errors = []

    def run():
        try:
            list(adm.shard_client(0).adm.plain.find({}, comment="cop-direct"))
        except OperationFailure as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    try:
        ops = wait_until(lambda: _ops(shard, "cop-direct"))
        assert shard.admin.command("killOp", op=ops[0]["opid"])["ok"] == 1
        t.join(30)
        assert [e.code for e in errors] == [11601]
    finally:
        fail_point(shard, "waitInFindBeforeMakingBatch", "off")
        t.join(30)


def test_current_op_aggregation_stage_on_data_node(adm):
    # $currentOp sent to a data node directly: the same documents as its currentOp command.
    shard = adm.shard_client(0)
    fail_point(shard, "waitInFindBeforeMakingBatch", "alwaysOn", {"nss": "adm.plain"})
    errors = []

    def run():
        try:
            list(adm.shard_client(0).adm.plain.find({}, comment="cop-node-agg"))
        except OperationFailure as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    try:
        cmd_ops = wait_until(lambda: _ops(shard, "cop-node-agg"))
        agg = list(shard.admin.aggregate([{"$currentOp": {"allUsers": True}},
                                          {"$match": {"command.comment": "cop-node-agg"}}]))
        assert len(agg) == 1 and len(cmd_ops) == 1
        moving = {"currentOpTime", "secs_running", "microsecs_running"}
        assert set(agg[0]) == set(cmd_ops[0])
        for f in set(agg[0]) - moving:
            assert agg[0][f] == cmd_ops[0][f], f
        assert isinstance(agg[0]["opid"], int) and "shard" not in agg[0]
        assert agg[0]["ns"] == "adm.plain" and agg[0]["op"] == "query"
        # The aggregate is in progress too; the later stages run over the list.
        mine = list(shard.admin.aggregate([{"$currentOp": {}},
                                           {"$match": {"command.aggregate": 1}},
                                           {"$project": {"ns": 1, "_id": 0}}]))
        assert mine == [{"ns": "admin.$cmd.aggregate"}]
        # localOps (a router's option) is accepted and changes nothing here.
        assert len(list(shard.admin.aggregate([{"$currentOp": {"localOps": True}},
                                               {"$match": {"command.comment": "cop-node-agg"}}]))) == 1
        # The opid it shows is the one killOp takes.
        assert shard.admin.command("killOp", op=agg[0]["opid"])["ok"] == 1
        t.join(30)
        assert [e.code for e in errors] == [11601]
    finally:
        fail_point(shard, "waitInFindBeforeMakingBatch", "off")
        t.join(30)


def test_current_op_aggregation_stage_errors_on_data_node(adm):
    shard = adm.shard_client(0)
    cases = [
        (shard.adm, "plain", [{"$currentOp": {}}], 73),  # not admin
        (shard.adm, 1, [{"$currentOp": {}}], 73),
        (shard.admin, "plain", [{"$currentOp": {}}], 73),  # a collection
        (shard.admin, 1, [{"$currentOp": {}}, {"$currentOp": {}}], 40602),
        (shard.admin, 1, [{"$match": {}}, {"$currentOp": {}}], 40602),
        (shard.admin, 1, [{"$currentOp": 1}], 14),
        (shard.admin, 1, [{"$currentOp": {"allUsers": 1}}], 14),
        (shard.admin, 1, [{"$currentOp": {"idleConnections": 1}}], 9),
        (shard.admin, 1, [{"$currentOp": {"bogus": True}}], 9),
        (shard.admin, 1, [{"$currentOp": {"targetAllNodes": True}}], 9),  # not a cluster
        (shard.admin, 1, [{"$currentOp": {}}, {"$bogus": {}}], 40324),
    ]
    for db, target, pipeline, code in cases:
        with pytest.raises(OperationFailure) as e:
            db.command("aggregate", target, pipeline=pipeline, cursor={})
        assert e.value.code == code, (db.name, target, pipeline)
    with pytest.raises(OperationFailure) as e:
        shard.admin.command("aggregate", 1, pipeline=[{"$currentOp": {}}])
    assert e.value.code == 9  # the cursor option is required


def test_current_op_and_kill_op_errors(adm):
    r = adm.router_client()
    with pytest.raises(OperationFailure) as e:
        r.adm.command("currentOp")
    assert e.value.code == 13  # admin only
    with pytest.raises(OperationFailure) as e:
        r.adm.command("aggregate", "plain", pipeline=[{"$currentOp": {}}], cursor={})
    assert e.value.code == 73
    with pytest.raises(OperationFailure) as e:
        r.adm.command("aggregate", 1, pipeline=[{"$currentOp": {}}], cursor={})
    assert e.value.code == 73
    with pytest.raises(OperationFailure) as e:
        list(r.admin.aggregate([{"$currentOp": {"bogus": True}}]))
    assert e.value.code == 9
    with pytest.raises(OperationFailure) as e:
        list(r.admin.aggregate([{"$currentOp": {"localOps": 1}}]))
    assert e.value.code == 14  # TypeMismatch: checked before the stage is built, as MongoDB
    with pytest.raises(OperationFailure) as e:
        list(r.admin.aggregate([{"$currentOp": {}}, {"$currentOp": {}}]))
    assert e.value.code == 40602
    with pytest.raises(OperationFailure) as e:
        r.admin.command("killOp")
    assert e.value.code == 50759
    with pytest.raises(OperationFailure) as e:
        r.admin.command("killOp", op="shard0")
    assert e.value.code == 28625
    with pytest.raises(OperationFailure) as e:
        r.admin.command("killOp", op=[1])
    assert e.value.code == 50760
    with pytest.raises(OperationFailure) as e:
        r.admin.command("killOp", op="nosuchshard:12")
    assert e.value.code == 70  # ShardNotFound
    # A router opid that is not running: success, as on mongos.
    assert r.admin.command("killOp", op=123456789)["ok"] == 1
    shard = adm.shard_client(0)
    with pytest.raises(OperationFailure) as e:
        shard.admin.command("killOp")
    assert e.value.code == 4  # NoSuchKey
    with pytest.raises(OperationFailure) as e:
        shard.admin.command("killOp", op="x")
    assert e.value.code == 14


# ---- fsync ----


def test_fsync_every_node(adm):
    res = adm.router_client().admin.command("fsync")
    assert res["ok"] == 1
    assert res["numFiles"] == 1
    raw = res["all"]["raw"]
    assert set(raw) == {adm.configdb, adm.shard_conn_string(0), adm.shard_conn_string(1)}
    for one in raw.values():
        assert one["ok"] == 1 and one["numFiles"] == 1


def test_fsync_data_node(adm):
    res = adm.shard_client(1).admin.command("fsync")
    assert res["ok"] == 1 and res["numFiles"] == 1
    with pytest.raises(OperationFailure) as e:
        adm.shard_client(1).admin.command("fsync", lock=True)
    assert e.value.code == 115  # CommandNotSupported: no fsync lock on data nodes
    with pytest.raises(OperationFailure) as e:
        adm.shard_client(1).admin.command("fsyncUnlock")
    assert e.value.code == 20
    assert "not locked" in str(e.value)


def test_fsync_errors(adm):
    r = adm.router_client()
    with pytest.raises(OperationFailure) as e:
        r.admin.command("fsync", lock=True)
    assert e.value.code == 20  # IllegalOperation
    assert "can't do lock through mongos" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        r.adm.command("fsync")
    assert e.value.code == 13  # admin only


# ---- logRotate ----


def _rotated(path):
    return sorted(glob.glob(path + ".*"))


def test_log_rotate_data_node(shale_process, tmp_path):
    path = str(tmp_path / "node.log")
    p = shale_process(["node", "--logpath", path], name="logrotate")
    c = p.client()
    assert c.admin.command("logRotate", 1)["ok"] == 1
    first = _rotated(path)
    assert len(first) == 1 and os.path.getsize(first[0]) > 0
    c.admin.command("ping")  # still logs, to the new file
    assert c.admin.command("logRotate", "server")["ok"] == 1
    assert len(_rotated(path)) == 2  # twice within a second keeps both
    assert os.path.exists(path)
    with pytest.raises(OperationFailure) as e:
        c.admin.command("logRotate", "audit")
    assert e.value.code == 4
    with pytest.raises(OperationFailure) as e:
        c.test.command("logRotate", 1)
    assert e.value.code == 13


def test_log_rotate_router(adm, shale_process, tmp_path):
    path = str(tmp_path / "router.log")
    p = shale_process(["router", "--configdb", adm.configdb, "--logpath", path],
                      dbpath=str(tmp_path / "r"), name="logrotate-router")
    c = p.client()
    before = os.path.getsize(path)
    assert before > 0
    assert c.admin.command("logRotate", 1)["ok"] == 1
    rotated = _rotated(path)
    assert len(rotated) == 1 and os.path.getsize(rotated[0]) >= before
    # The router's own log only: the shards' logs are untouched (mongos rotates its own).
    assert os.path.exists(path)


def test_log_rotate_without_logpath(adm):
    # Logging to stderr: nothing to rotate, and that is not an error.
    assert adm.router_client().admin.command("logRotate", 1)["ok"] == 1


# ---- getDefaultRWConcern / setDefaultRWConcern ----


def test_get_default_rw_concern_implicit(adm):
    res = adm.router_client().admin.command("getDefaultRWConcern")
    assert res["ok"] == 1
    assert res["defaultReadConcern"] == {"level": "local"}
    assert res["defaultWriteConcern"] == {"w": "majority", "wtimeout": 0}
    assert res["defaultReadConcernSource"] == "implicit"
    assert res["defaultWriteConcernSource"] == "implicit"
    assert isinstance(res["localUpdateWallClockTime"], datetime.datetime)
    assert "updateOpTime" not in res and "updateWallClockTime" not in res
    assert adm.router_client().admin.command("getDefaultRWConcern", inMemory=True)["ok"] == 1


def test_set_default_rw_concern(adm):
    admin = adm.router_client().admin
    res = admin.command("setDefaultRWConcern", defaultReadConcern={"level": "majority"})
    assert res["defaultReadConcern"] == {"level": "majority"}
    assert res["defaultReadConcernSource"] == "global"
    assert res["defaultWriteConcernSource"] == "implicit"
    assert isinstance(res["updateOpTime"], Timestamp)
    assert isinstance(res["updateWallClockTime"], datetime.datetime)
    # Stored on the config server in MongoDB's document.
    doc = adm.config_client().config.settings.find_one({"_id": "ReadWriteConcernDefaults"})
    assert doc["defaultReadConcern"] == {"level": "majority"}
    assert "defaultWriteConcern" not in doc
    res = admin.command("setDefaultRWConcern", defaultWriteConcern={"w": 1})
    assert res["defaultWriteConcern"] == {"w": 1, "wtimeout": 0}
    assert res["defaultWriteConcernSource"] == "global"
    assert res["defaultReadConcern"] == {"level": "majority"}  # kept
    # What every router reads back.
    got = admin.command("getDefaultRWConcern")
    for f in ("defaultReadConcern", "defaultWriteConcern", "updateOpTime",
              "defaultReadConcernSource", "defaultWriteConcernSource"):
        assert got[f] == res[f], f
    # {} unsets the read concern...
    res = admin.command("setDefaultRWConcern", defaultReadConcern={})
    assert res["defaultReadConcern"] == {"level": "local"}
    assert res["defaultReadConcernSource"] == "implicit"
    assert res["defaultWriteConcern"] == {"w": 1, "wtimeout": 0}
    # ...but a write concern once set cannot be unset.
    with pytest.raises(OperationFailure) as e:
        admin.command("setDefaultRWConcern", defaultWriteConcern={})
    assert e.value.code == 20
    res = admin.command("setDefaultRWConcern", defaultWriteConcern={"w": "majority",
                                                                    "wtimeout": 5000})
    assert res["defaultWriteConcern"] == {"w": "majority", "wtimeout": 5000}


def _restore_default_wc(admin, before):
    # A default write concern cannot be unset once set: put the previous one back.
    if before["defaultWriteConcernSource"] == "global":
        admin.command("setDefaultRWConcern", defaultWriteConcern=before["defaultWriteConcern"])
    else:
        admin.command("setDefaultRWConcern", defaultWriteConcern={"w": "majority"})


def test_default_write_concern_applies_through_router(adm):
    r = adm.router_client()
    admin = r.admin
    before = admin.command("getDefaultRWConcern")
    try:
        admin.command("setDefaultRWConcern", defaultWriteConcern={"w": 5})
        # Applied at once by the router it was set through, and what get reports.
        got = admin.command("getDefaultRWConcern")
        assert got["defaultWriteConcern"] == {"w": 5, "wtimeout": 0}
        assert got["defaultWriteConcernSource"] == "global"
        cached = admin.command("getDefaultRWConcern", inMemory=True)
        assert cached["defaultWriteConcern"] == {"w": 5, "wtimeout": 0} and cached["inMemory"]
        # A write without a writeConcern gets the default: the shards (sets of one) cannot
        # satisfy w: 5, and say where the concern came from.
        res = r.adm.command("insert", "plain", documents=[{"_id": "rwc-1", "v": -1}])
        assert res["n"] == 1
        wce = res["writeConcernError"]
        assert wce["code"] == 100 and wce["codeName"] == "UnsatisfiableWriteConcern"
        # As mongos merges its shards' errors, the shard's errInfo is in the message.
        assert "errInfo" not in wce
        assert wce["errmsg"].startswith("UnsatisfiableWriteConcern: ") and \
            "Error details: { writeConcern: { w: 5, wtimeout: 0, provenance: \"customDefault\" } }" \
            in wce["errmsg"] and wce["errmsg"].endswith(" at shard0"), wce
        # So does a driver write that leaves the concern to the server.
        with pytest.raises(WriteConcernError) as e:
            r.adm.sh.insert_one({"_id": "rwc-2", "x": 450})
        assert e.value.code == 100
        res = r.adm.command("update", "sh", updates=[{"q": {"x": 450}, "u": {"$set": {"y": 1}}}])
        assert res["nModified"] == 1 and res["writeConcernError"]["code"] == 100
        # An explicit writeConcern wins over the default.
        res = r.adm.command("insert", "plain", documents=[{"_id": "rwc-3", "v": -1}],
                            writeConcern={"w": 1})
        assert res["n"] == 1 and "writeConcernError" not in res
        res = r.adm.command("insert", "plain", documents=[{"_id": "rwc-4", "v": -1}],
                            writeConcern={"w": 2})
        assert "{ writeConcern: { w: 2, wtimeout: 0, provenance: \"clientSupplied\" } }" in \
            res["writeConcernError"]["errmsg"]
        # Reads take no write concern; a shard asked directly applies its own implicit default
        # (mongod reads the defaults from its own config.settings, which a shard never holds).
        assert r.adm.plain.count_documents({"v": -1}) == 3
        res = adm.shard_client(0).adm.command("insert", "plain",
                                              documents=[{"_id": "rwc-5", "v": -1}])
        assert "writeConcernError" not in res
    finally:
        _restore_default_wc(admin, before)
        r.adm.plain.delete_many({"v": -1})
        r.adm.sh.delete_many({"_id": "rwc-2"})
    res = r.adm.command("insert", "plain", documents=[{"_id": "rwc-6", "v": -1}])
    assert "writeConcernError" not in res
    r.adm.plain.delete_many({"v": -1})



def test_write_concern_errors_of_two_shards_are_merged(adm):
    """mongos merges the write concern errors of the shards a write reached into one: code 64
    and each shard's "<CodeName>: <errmsg>; Error details: <errInfo> at <shard>"."""
    r = adm.router_client()
    res = r.adm.command("update", "sh", updates=[{"q": {}, "u": {"$set": {"wce": 1}},
                                                   "multi": True}],
                        writeConcern={"w": 3})
    assert res["nModified"] > 0
    wce = res["writeConcernError"]
    assert wce["code"] == 64 and "errInfo" not in wce, wce
    msg = wce["errmsg"]
    assert msg.startswith("Multiple errors reported :: UnsatisfiableWriteConcern: "), msg
    parts = msg[len("Multiple errors reported :: "):].split(" :: and :: ")
    assert sorted(p.rsplit(" at ", 1)[1] for p in parts) == ["shard0", "shard1"], msg
    for p in parts:
        assert "; Error details: { writeConcern: { w: 3, wtimeout: 0, " \
            "provenance: \"clientSupplied\" } }" in p, p
    # One shard reached: its own code, the shard named.
    res = r.adm.command("update", "sh", updates=[{"q": {"x": 450}, "u": {"$set": {"wce": 2}}}],
                        writeConcern={"w": 3})
    wce = res["writeConcernError"]
    assert wce["code"] == 100 and wce["codeName"] == "UnsatisfiableWriteConcern"
    assert wce["errmsg"].startswith("UnsatisfiableWriteConcern: ") and \
        wce["errmsg"].endswith(" at shard1"), wce

def test_default_read_concern_applies_through_router(adm):
    # The read concern the router sends a shard shows in the shard's currentOp.
    admin = adm.router_client().admin
    admin.command("setDefaultRWConcern", defaultReadConcern={"level": "majority"})
    try:
        b = BlockedFind(adm, "rwc-read")
        try:
            ops = wait_until(lambda: _ops(adm.shard_client(0), "rwc-read"))
            assert ops[0]["command"]["readConcern"] == {"level": "majority",
                                                        "provenance": "customDefault"}
        finally:
            b.release()
        assert b.error is None and len(b.result) == 100
        # A readConcern of the request's own is sent as it is.
        fail_point(adm.shard_client(0), "waitInFindBeforeMakingBatch", "alwaysOn",
                   {"nss": "adm.plain"})
        c = adm.router_client()
        t = threading.Thread(target=lambda: c.adm.command(
            "find", "plain", comment="rwc-read-own", readConcern={"level": "local"}))
        t.start()
        try:
            ops = wait_until(lambda: _ops(adm.shard_client(0), "rwc-read-own"))
            assert ops[0]["command"]["readConcern"] == {"level": "local"}
        finally:
            fail_point(adm.shard_client(0), "waitInFindBeforeMakingBatch", "off")
            t.join(30)
            c.close()
    finally:
        admin.command("setDefaultRWConcern", defaultReadConcern={})
    assert admin.command("getDefaultRWConcern")["defaultReadConcernSource"] == "implicit"


def test_default_rw_concern_reaches_other_routers_by_periodic_refresh(adm):
    # Another router learns a change made through this one from its periodic refresh of
    # the defaults cache (every 30 s, as mongos's), without being asked for them.
    other = adm.add_router()
    try:
        o = other.client()
        assert o.admin.command("getDefaultRWConcern", inMemory=True)[
            "defaultReadConcernSource"] == "implicit"
        adm.router_client().admin.command("setDefaultRWConcern",
                                          defaultReadConcern={"level": "majority"})
        wait_until(lambda: o.admin.command("getDefaultRWConcern", inMemory=True)[
            "defaultReadConcern"] == {"level": "majority"}, timeout=45,
            what="the other router's refresh")
        o.close()
    finally:
        adm.router_client().admin.command("setDefaultRWConcern", defaultReadConcern={})
        other.stop()


def test_set_default_rw_concern_errors(adm):
    admin = adm.router_client().admin
    cases = [
        ({}, 2),
        ({"defaultReadConcern": {"level": "snapshot"}}, 2),
        ({"defaultReadConcern": {"level": "linearizable"}}, 2),
        ({"defaultReadConcern": {"afterClusterTime": Timestamp(1, 1)}}, 2),
        ({"defaultWriteConcern": {"w": 0}}, 2),
        ({"defaultWriteConcern": {"j": True}}, 2),
        ({"bogus": 1}, 40415),
    ]
    for extra, code in cases:
        with pytest.raises(OperationFailure) as e:
            admin.command(SON([("setDefaultRWConcern", 1)] + list(extra.items())))
        assert e.value.code == code, extra
    with pytest.raises(OperationFailure) as e:
        adm.router_client().adm.command("getDefaultRWConcern")
    assert e.value.code == 13


# ---- connPoolStats / shardConnPoolStats ----


def test_conn_pool_stats(adm):
    r = adm.router_client()
    list(r.adm.sh.find())  # reaches both shards
    res = r.admin.command("connPoolStats")
    hosts = res["hosts"]
    for p in [adm.config] + adm.shards:
        assert p.host in hosts, p.host
        one = hosts[p.host]
        assert one["created"] >= 1
        assert one["inUse"] >= 0 and one["available"] >= 0
        assert one["inUse"] + one["available"] <= one["created"]
    assert res["totalCreated"] == sum(h["created"] for h in hosts.values())
    assert res["totalAvailable"] == sum(h["available"] for h in hosts.values())
    assert res["totalInUse"] == sum(h["inUse"] for h in hosts.values())
    assert res["totalAvailable"] >= 1  # the find's connections went back to the pool
    # Any database will do.
    assert r.adm.command("connPoolStats")["ok"] == 1


def test_shard_conn_pool_stats(adm):
    r = adm.router_client()
    res = r.admin.command("shardConnPoolStats")
    assert res["ok"] == 1
    assert set(res["hosts"]) >= {p.host for p in adm.shards}
    for one in res["hosts"].values():
        assert set(one) >= {"available", "created"}
    assert res["totalCreated"] == sum(h["created"] for h in res["hosts"].values())
    assert res["threads"] == []


def test_conn_pool_stats_not_on_data_nodes(adm):
    # Data nodes keep no such pool report yet: they answer as for any unknown command.
    with pytest.raises(OperationFailure) as e:
        adm.shard_client(0).admin.command("shardConnPoolStats")
    assert e.value.code == 59


def test_sigterm_interrupts_a_command_waiting_for_a_shard(cluster, shale_process):
    # A find the router forwarded waits for a shard that holds it (a hang fail point):
    # once the grace period is over, the router's shutdown interrupts the wait, answers
    # InterruptedAtShutdown and exits 0 at once (it used to wait 10 s for the connection,
    # then abort in its connection pool's teardown with the call still running).
    r = shale_process(["router", "--configdb", cluster.configdb], name="router-stop",
                      start=False)
    r.start(extra=["--setParameter", "shutdownTimeoutMillisForSignaledShutdown=500"])
    c = r.client(retryReads=False)
    c.admin.command("enableSharding", "stopdb", primaryShard="shard0")
    c.stopdb.c.insert_one({"_id": 1})
    s0 = cluster.shard_client(0)
    try:
        held = run_to_fail_point(s0, "waitInFindBeforeMakingBatch",
                                 lambda: list(c.stopdb.c.find()))
        t0 = time.monotonic()
        r.proc.send_signal(signal.SIGTERM)
        assert r.proc.wait(30) == 0
        assert time.monotonic() - t0 < 8
        held.join(30)
    finally:
        fail_point(s0, "waitInFindBeforeMakingBatch", "off")
    # pymongo raises InterruptedAtShutdown as NotMasterError.
    assert isinstance(held.error, PyMongoError), held.error
    assert held.error.details["code"] == 11600, held.error
    # The shard's find, released, ends; the shard still serves the collection.
    assert s0.stopdb.c.find_one({"_id": 1}) == {"_id": 1}
