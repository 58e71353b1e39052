"""Bad input through the router gets MongoDB-format errors and harms nothing: for each
malformed command the router answers ok: 0 with a code, keeps serving, and the data is
intact. Also the config server and a shard given the internal commands' bad input."""

import bson
import pytest

import wire_util
from bson.son import SON
from pymongo.errors import OperationFailure

BAD_ROUTER_COMMANDS = [
    ("app", SON([("find", 5)])),
    ("app", SON([("find", "c"), ("filter", 5)])),
    ("app", SON([("find", "c"), ("filter", {"$bogus": 1})])),
    ("app", SON([("find", "c"), ("sort", "x")])),
    ("app", SON([("find", "c"), ("sort", {"x": "sideways"})])),
    ("app", SON([("find", "c"), ("projection", {"a": 1, "b": 0})])),
    ("app", SON([("find", "c"), ("limit", -1), ("skip", -5)])),
    ("app", SON([("find", "c"), ("batchSize", "many")])),
    ("app", SON([("find", "c"), ("hint", 7)])),
    ("app", SON([("getMore", 12345), ("collection", "c")])),
    ("app", SON([("getMore", "x"), ("collection", "c")])),
    ("app", SON([("killCursors", "c"), ("cursors", "all")])),
    ("app", SON([("update", "c"), ("updates", [{"q": {}}])])),
    ("app", SON([("update", "c"), ("updates", [{"q": 1, "u": {}}])])),
    ("app", SON([("delete", "c"), ("deletes", [{"q": {}, "limit": 7}])])),
    ("app", SON([("findAndModify", "c")])),
    ("app", SON([("findAndModify", "c"), ("query", {"k": 1}), ("remove", True),
                 ("update", {"$set": {"a": 1}})])),
    ("app", SON([("count", "c"), ("query", 3)])),
    ("app", SON([("distinct", "c")])),
    ("app", SON([("distinct", "c"), ("key", 5)])),
    ("app", SON([("aggregate", "c"), ("pipeline", "x"), ("cursor", {})])),
    ("app", SON([("aggregate", "c"), ("pipeline", [{"$nosuchstage": {}}]), ("cursor", {})])),
    ("app", SON([("aggregate", "c"), ("pipeline", [{"$group": {"n": {"$sum": 1}}}]),
                 ("cursor", {})])),
    ("app", SON([("aggregate", "c"), ("pipeline", [])])),
    ("app", SON([("createIndexes", "c"), ("indexes", [{"key": {}}])])),
    ("app", SON([("createIndexes", "c"), ("indexes", "x")])),
    ("app", SON([("dropIndexes", "c"), ("index", "nosuch_1")])),
    ("app", SON([("create", "bad$name")])),
    ("app", SON([("renameCollection", "app.c"), ("to", 5)])),
    ("app", SON([("explain", {"find": 5})])),
    ("admin", SON([("shardCollection", 5), ("key", {"k": 1})])),
    ("admin", SON([("shardCollection", "app.x"), ("key", "k")])),
    ("admin", SON([("shardCollection", "noDot"), ("key", {"k": 1})])),
    ("admin", SON([("shardCollection", "app.x"), ("key", {"k": 1}), ("numInitialChunks", -3)])),
    ("admin", SON([("split", "app.c"), ("middle", "x")])),
    ("admin", SON([("split", "app.c"), ("middle", {"k": 1}), ("find", {"k": 1})])),
    ("admin", SON([("split", "app.nosuch"), ("middle", {"k": 1})])),
    ("admin", SON([("mergeChunks", "app.c"), ("bounds", [{"k": 1}])])),
    ("admin", SON([("mergeChunks", "app.c"), ("bounds", "x")])),
    ("admin", SON([("addShard", 7)])),
    ("admin", SON([("addShard", "")])),
    ("admin", SON([("removeShard", 5)])),
    ("admin", SON([("enableSharding", 5)])),
    ("admin", SON([("enableSharding", "")])),
    ("admin", SON([("enableSharding", "admin")])),
    ("admin", SON([("refineCollectionShardKey", "app.c"), ("key", {"z": 1})])),
    ("admin", SON([("clearJumboFlag", "app.c"), ("find", "x")])),
    ("app", SON([("shardCollection", "app.x"), ("key", {"k": 1})])),  # not on admin
]


@pytest.fixture(scope="module")
def loaded(cluster):
    r = cluster.router_client()
    r.admin.command("enableSharding", "app")
    r.admin.command("shardCollection", "app.c", key={"k": 1})
    r.app.c.insert_many([{"_id": i, "k": i} for i in range(200)])
    return cluster


@pytest.mark.parametrize("db,cmd", BAD_ROUTER_COMMANDS,
                         ids=["%s-%d" % (c[1].keys().__iter__().__next__(), i)
                              for i, c in enumerate(BAD_ROUTER_COMMANDS)])
def test_bad_command_gets_an_error_and_harms_nothing(loaded, db, cmd):
    r = loaded.router_client()
    with pytest.raises(OperationFailure) as e:
        r[db].command(cmd)
    assert isinstance(e.value.code, int) and e.value.code != 0, e.value.details
    assert e.value.details.get("ok") == 0
    assert isinstance(e.value.details.get("errmsg"), str)
    # still serving, data intact
    assert r.admin.command("ping")["ok"] == 1
    assert r.app.c.count_documents({}) == 200


def test_internal_commands_reject_bad_input(loaded):
    cfg = loaded.config_client()
    for cmd in (SON([("_configsvrShardCollection", 5)]),
                SON([("_configsvrSplitChunk", "app.c"), ("middle", 5)]),
                SON([("_configsvrCommitChunksMerge", "app.c"), ("bounds", 5)]),
                SON([("_configsvrAddShard", {"x": 1})]),
                SON([("_configsvrCreateDatabase", 5)]),
                SON([("_configsvrCommitDropCollection", 5)])):
        with pytest.raises(OperationFailure):
            cfg.admin.command(cmd)
    shard = loaded.shard_client(0)
    for cmd in (SON([("_addShard", 1), ("shardIdentity", 5)]),
                SON([("_flushRoutingTableCacheUpdates", 5)]),
                SON([("find", "c"), ("shardVersion", "x")]),
                SON([("find", "c"), ("shardVersion", {"e": 5, "t": 1, "v": 2})]),
                SON([("find", "c"), ("databaseVersion", {"uuid": 1})]),
                SON([("_shardsvrCreateCollectionParticipant", "c2")]),
                SON([("splitVector", "app.c"), ("keyPattern", 5)])):
        with pytest.raises(OperationFailure):
            shard[("admin" if cmd.keys().__iter__().__next__().startswith("_") else "app")].command(cmd)
    assert cfg.admin.command("ping")["ok"] == 1 and shard.admin.command("ping")["ok"] == 1
    assert loaded.router_client().app.c.count_documents({}) == 200


# Malformed write batches pymongo refuses to send: sent as raw OP_MSG bodies.
BAD_RAW_WRITES = [
    {"insert": "c", "documents": "nope", "$db": "app"},
    {"insert": "c", "documents": [1, 2], "$db": "app"},
    {"insert": "c", "documents": [], "$db": "app"},
    {"delete": "c", "deletes": "x", "$db": "app"},
    {"update": "c", "updates": [5], "$db": "app"},
]


@pytest.mark.parametrize("body", BAD_RAW_WRITES, ids=[str(i) for i in range(len(BAD_RAW_WRITES))])
def test_malformed_write_batch_gets_an_error(loaded, body):
    sock = wire_util.connect(loaded.routers[0].port)
    try:
        reply = wire_util.command(sock, body)
    finally:
        sock.close()
    assert reply["ok"] == 0 and isinstance(reply["code"], int) and reply["code"] != 0, reply
    assert loaded.router_client().app.c.count_documents({}) == 200


def test_unknown_update_operator_is_a_write_error(loaded):
    r = loaded.router_client()
    reply = r.app.command(SON([("update", "c"),
                               ("updates", [{"q": {"k": 1}, "u": {"$nope": {"a": 1}}}])]))
    assert reply["ok"] == 1 and reply["n"] == 0
    assert reply["writeErrors"][0]["code"] == 9  # FailedToParse, as MongoDB's
    assert r.app.c.find_one({"k": 1}) == {"_id": 1, "k": 1}
