"""A sharded cluster under --keyFile (issue 19): members authenticate to each other as
__system, users live on the config server and every router authorizes from them (a second
router sees a change within userCacheInvalidationIntervalSecs), shards keep their own users
for direct connections, migrations and DDL run as before, a member with the wrong key is
refused, and client $clusterTime signatures are checked."""

import base64
import os

import pymongo
import pytest
from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure

import wire_util
from shale_fixtures import ShaleProcess, error_code, module_cluster, wait_until


@pytest.fixture(scope="module")
def kc(request):
    with module_cluster(request, routers=2, shards=2, key_file=True,
                        router_extra=["--setParameter",
                                      "userCacheInvalidationIntervalSecs=1"]) as c:
        yield c


def login(proc, user, pwd, source="admin"):
    c = proc.client(username=user, password=pwd, authSource=source)
    c.admin.command("ping")
    return c


def test_unauthenticated_clients_get_nothing(kc):
    c = kc.routers[0].client()
    assert c.admin.command("hello")["msg"] == "isdbgrid"
    assert error_code(lambda: c.test.c.find_one()) == 13
    assert error_code(lambda: c.admin.command("listShards")) == 13
    for s in [kc.config] + kc.shards:
        d = s.client(directConnection=True)
        assert error_code(lambda: d.admin.command("serverStatus")) == 13
        d.close()
    c.close()


def test_migration_and_ddl_under_keyfile(kc):
    r = kc.router_client()
    r.admin.command("enableSharding", "kdb", primaryShard="shard0")
    r.admin.command("shardCollection", "kdb.c", key={"x": 1})
    r.admin.command("split", "kdb.c", middle={"x": 50})
    r.kdb.c.insert_many([{"_id": i, "x": i} for i in range(100)])
    r.admin.command("moveChunk", "kdb.c", find={"x": 70}, to="shard1")
    assert r.kdb.c.count_documents({}) == 100
    assert kc.config_client(username=kc.auth[0], password=kc.auth[1]).config.chunks.count_documents(
        {"shard": "shard1"}) >= 1
    r.kdb.c.create_index("y")
    assert "y_1" in r.kdb.c.index_information()
    r.kdb.c.drop()
    assert "c" not in r.kdb.list_collection_names()
    r.close()


def test_roles_checked_through_the_router(kc):
    r = kc.router_client()
    r.shop.command("createUser", "reader", pwd="r", roles=["read"])
    r.admin.command("createUser", "monitor", pwd="m", roles=["clusterMonitor"])
    r.shop.items.insert_many([{"_id": i} for i in range(3)])
    rd = login(kc.routers[0], "reader", "r", "shop")
    assert rd.shop.items.count_documents({}) == 3
    assert error_code(lambda: rd.shop.items.insert_one({})) == 13
    assert error_code(lambda: rd.admin.command("listShards")) == 13
    assert error_code(lambda: rd.admin.command("enableSharding", "shop")) == 13
    # Every family: reads and aggregation pass; writes, $out, DDL, users, admin do not.
    assert rd.shop.items.distinct("_id") == [0, 1, 2]
    assert len(list(rd.shop.items.aggregate([{"$match": {}}]))) == 3
    assert error_code(lambda: list(rd.shop.items.aggregate([{"$out": "copy"}]))) == 13
    assert error_code(lambda: rd.shop.items.create_index("a")) == 13
    assert error_code(lambda: rd.shop.items.drop()) == 13
    assert error_code(lambda: rd.shop.command("createUser", "x", pwd="x", roles=[])) == 13
    assert error_code(lambda: rd.admin.command("serverStatus")) == 13
    m = login(kc.routers[0], "monitor", "m")
    assert len(m.admin.command("listShards")["shards"]) == 2
    assert error_code(lambda: m.shop.items.find_one()) == 13
    assert error_code(lambda: m.admin.command("addShard", "x/127.0.0.1:1")) == 13
    for c in (rd, m, r):
        c.close()


def test_user_changes_reach_the_second_router(kc):
    r0 = kc.router_client(0)
    r0.app.command("createUser", "appuser", pwd="a", roles=["read"])
    # A new connection to the other router finds the user on the config server at once.
    c1 = login(kc.routers[1], "appuser", "a", "app")
    assert error_code(lambda: c1.app.c.insert_one({"v": 1})) == 13
    r0.app.command("grantRolesToUser", "appuser", roles=["readWrite"])

    def can_write():
        try:
            c1.app.c.insert_one({"v": 1})
            return True
        except OperationFailure as e:
            assert e.code == 13
            return False
    wait_until(can_write, timeout=10, what="router 1 to see the granted role")
    r0.app.command("dropUser", "appuser")
    def refused():
        try:
            c1.app.c.find_one()
            return False
        except OperationFailure as e:
            return e.code == 13
    wait_until(refused, timeout=10, what="router 1 to see the dropped user")
    c1.close()
    r0.close()


def test_shards_keep_their_own_users(kc):
    s = kc.shards[0]
    # The cluster's users are not a shard's.
    with pytest.raises(OperationFailure) as e:
        login(s, kc.auth[0], kc.auth[1])
    assert e.value.code == 18
    # A shard-local user through the shard's own localhost exception.
    d = s.client(directConnection=True)
    d.admin.command("createUser", "local_admin", pwd="l", roles=["root"])
    d.close()
    c = login(s, "local_admin", "l")
    assert c.admin.command("connectionStatus")["authInfo"]["authenticatedUsers"] == [
        {"user": "local_admin", "db": "admin"}]
    c.shop.command("createUser", "shard_reader", pwd="sr", roles=["read"])
    r = login(s, "shard_reader", "sr", "shop")
    r.shop.items.find_one()
    assert error_code(lambda: r.shop.items.insert_one({})) == 13
    r.close()
    c.close()


def test_client_cluster_time_must_be_signed(kc):
    sock = wire_util.connect(kc.routers[0].port)
    forged = {"clusterTime": Timestamp(2000000000, 1),
              "signature": {"hash": b"\0" * 20, "keyId": 1}}
    reply = wire_util.command(sock, {"ping": 1, "$db": "admin", "$clusterTime": forged})
    assert reply["ok"] == 0 and reply["code"] in (183, 211)  # TimeProofMismatch, KeyNotFound
    sock.close()


def test_member_with_the_wrong_key_is_refused(kc, tmp_path):
    key = tmp_path / "wrongkey"
    key.write_text(base64.b64encode(os.urandom(48)).decode())
    os.chmod(key, 0o600)
    p = ShaleProcess(["node", "--shardsvr", "--replSet", "shard9"], name="wrongkey")
    try:
        p.start(extra=["--keyFile", str(key)])
        r = kc.router_client()
        with pytest.raises(OperationFailure) as e:
            r.admin.command("addShard", "shard9/" + p.host, name="shard9")
        assert e.value.code == 18
        assert '"id":20249' in p.read_log()
        r.close()
    finally:
        p.cleanup()


def test_key_file_permissions_checked(tmp_path):
    key = tmp_path / "openkey"
    key.write_text("abcdefghijkl")
    os.chmod(key, 0o644)
    p = ShaleProcess(["node"], name="openkey")
    try:
        p.start(extra=["--keyFile", str(key)], wait=False)
        assert p.proc.wait(30) != 0
        assert "permissions on %s are too open" % key in p.read_log()
    finally:
        p.cleanup()


def test_shale_up_auth(tmp_path):
    """`shale up --auth`: a key file readable by its owner only, the first admin user printed
    once in the connection string, unauthenticated clients refused, `status` reads the
    cluster with the key file, a second `up` keeps access control on."""
    from test_cli_cluster import port_range, shale
    d = tmp_path / "c"
    port = port_range(3)
    r = shale("up", "--auth", "--shards", 1, "--dbpath", d, "--port", port,
              "--wiredTigerCacheSizeGB", "0.25")
    try:
        assert r.returncode == 0, r.stderr
        uri = r.stdout.strip()
        assert uri.startswith("mongodb://admin:") and uri.endswith("?authSource=admin")
        assert "shown only this once" in r.stderr
        assert oct(os.stat(d / "keyfile").st_mode & 0o777) == "0o600"
        c = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)
        c.t.c.insert_one({"a": 1})
        assert c.t.c.count_documents({}) == 1
        plain = pymongo.MongoClient("127.0.0.1:%d" % port, serverSelectionTimeoutMS=10000)
        assert error_code(lambda: plain.t.c.find_one()) == 13
        s = shale("status", "--dbpath", d)
        assert s.returncode == 0, s.stderr
        assert "shard0/127.0.0.1:%d" % (port + 2) in s.stdout
        # With a user's credentials instead of the folder's key file.
        pwd = uri.split("admin:", 1)[1].split("@", 1)[0]
        s = shale("status", "--host", "127.0.0.1:%d" % port, "--username", "admin",
                  "--password", pwd)
        assert s.returncode == 0, s.stderr
        assert "shard0/127.0.0.1:%d" % (port + 2) in s.stdout
        bad = shale("status", "--host", "127.0.0.1:%d" % port, "--username", "admin",
                    "--password", "wrong")
        assert bad.returncode != 0 and "Authentication failed" in bad.stderr
        assert shale("status", "--host", "127.0.0.1:%d" % port).returncode != 0
        again = shale("up", "--dbpath", d)
        assert again.returncode == 0, again.stderr
        assert "Access control is on" in again.stderr and "admin:" not in again.stdout
        c.close()
        plain.close()
    finally:
        shale("down", "--dbpath", d)


def test_node_driver_through_an_authenticating_router(kc):
    import json
    import subprocess
    from test_node_driver import HERE, node_binary
    r = kc.router_client()
    r.admin.command("createUser", "noderouter", pwd="n-r", roles=["readWriteAnyDatabase"])
    r.close()
    out = subprocess.run([node_binary(), os.path.join(HERE, "auth.js"), kc.routers[1].host,
                          "noderouter", "n-r"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    me = [{"user": "noderouter", "db": "admin"}]
    assert res["default"]["users"] == me and res["sha1"]["users"] == me
    assert res["sha256"]["n"] == 3 and res["wrong"]["code"] == 18


def test_router_cursors_belong_to_their_user(kc):
    r = kc.router_client()
    for u in ("cur_a", "cur_b"):
        r.admin.command("createUser", u, pwd="pw", roles=[{"role": "readWrite", "db": "curdb"}])
    r.curdb.c.insert_many([{"_id": i} for i in range(10)])
    a, b = login(kc.routers[0], "cur_a", "pw"), login(kc.routers[0], "cur_b", "pw")
    cid = a.curdb.command("find", "c", batchSize=2)["cursor"]["id"]
    assert error_code(lambda: b.curdb.command("getMore", cid, collection="c")) == 13
    assert error_code(lambda: b.curdb.command("killCursors", "c", cursors=[cid])) == 13
    more = a.curdb.command("getMore", cid, collection="c", batchSize=100)
    assert len(more["cursor"]["nextBatch"]) == 8
    for c in (a, b, r):
        c.close()


def test_up_auth_refuses_a_running_cluster_without_it(tmp_path):
    from test_cli_cluster import port_range, shale
    d = tmp_path / "plain"
    port = port_range(3)
    r = shale("up", "--shards", 1, "--dbpath", d, "--port", port, "--wiredTigerCacheSizeGB", "0.25")
    try:
        assert r.returncode == 0, r.stderr
        again = shale("up", "--auth", "--dbpath", d)
        assert again.returncode != 0
        assert "running without access control" in again.stderr
        assert not os.path.exists(d / "keyfile")
        # Nothing changed: the cluster still serves without authentication.
        c = pymongo.MongoClient("127.0.0.1:%d" % port, serverSelectionTimeoutMS=10000)
        assert c.admin.command("ping")["ok"] == 1
        c.close()
    finally:
        shale("down", "--dbpath", d)
