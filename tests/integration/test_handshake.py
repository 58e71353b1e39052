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


def test_unix_domain_socket_like_mongod(shale_process):
    # mongod's default: a 0700 socket <unixSocketPrefix>/mongodb-<port>.sock, removed at
    # clean shutdown; drivers reach it with a percent-encoded path.
    import os
    import stat
    import tempfile
    import urllib.parse
    import pymongo
    import shutil
    # Short and under /tmp: a socket path must fit sun_path's 108 bytes.
    prefix = tempfile.mkdtemp(prefix="shale-sock-")
    try:
        node = shale_process(["node", "--unixSocketPrefix", prefix], name="unixsock")
        path = os.path.join(prefix, "mongodb-%d.sock" % node.port)
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
        c = pymongo.MongoClient("mongodb://" + urllib.parse.quote_plus(path),
                                serverSelectionTimeoutMS=5000)
        c.test.c.insert_one({"_id": 1})
        assert c.test.c.find_one() == {"_id": 1}
        assert c.admin.command("whatsmyuri")["you"]  # a unix peer has a name too
        c.close()
        assert node.stop() == 0
        assert not os.path.exists(path)
        off = shale_process(["node", "--unixSocketPrefix", prefix, "--nounixsocket"],
                            name="nosock")
        assert not os.path.exists(os.path.join(prefix, "mongodb-%d.sock" % off.port))
    finally:
        shutil.rmtree(prefix, ignore_errors=True)
