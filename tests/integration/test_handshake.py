"""The driver handshake and the commands every process answers, through pymongo."""

import pymongo
import pytest


def test_ping_and_hello(node):
    c = node.client()
    assert c.admin.command("ping") == {"ok": 1.0}
    h = c.admin.command("hello")
    assert h["isWritablePrimary"] is True
    assert h["maxBsonObjectSize"] == 16 * 1024 * 1024
    assert h["maxMessageSizeBytes"] == 48000000
    assert h["maxWriteBatchSize"] == 100000
    assert h["minWireVersion"] == 0 and h["maxWireVersion"] == 21
    assert h["logicalSessionTimeoutMinutes"] == 30
    assert isinstance(h["connectionId"], int)
    assert "setName" not in h
    legacy = c.admin.command("isMaster")
    assert legacy["ismaster"] is True and "isWritablePrimary" not in legacy
    assert c.admin.command("hello", helloOk=True)["helloOk"] is True


def test_replica_set_of_one(rs_node):
    c = rs_node.client()
    h = c.admin.command("hello")
    assert h["setName"] == "rs0"
    assert h["hosts"] == [rs_node.host]
    assert h["primary"] == rs_node.host and h["me"] == rs_node.host
    assert h["secondary"] is False
    # A driver given the set name discovers the primary and uses it.
    rc = pymongo.MongoClient(rs_node.uri(replicaSet="rs0"), serverSelectionTimeoutMS=5000)
    assert rc.admin.command("ping")["ok"] == 1.0


def test_build_info(node):
    bi = node.client().admin.command("buildInfo")
    assert bi["version"] == "7.0.0"
    assert bi["versionArray"][:2] == [7, 0]


def test_unknown_command(node):
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        node.client().admin.command("noSuchCommand")
    assert e.value.code == 59
    assert e.value.details["codeName"] == "CommandNotFound"
