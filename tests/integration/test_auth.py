"""Authentication and authorization on a single node started with --auth (issue 19):
the localhost exception, SCRAM-SHA-1 and SCRAM-SHA-256 (and speculative authentication)
through pymongo, AuthenticationFailed with no hint, what an unauthenticated connection may
run, users and roles, built-in role checks and user-defined roles, connectionStatus."""

import pymongo
import pytest
from bson.binary import Binary
from pymongo.errors import OperationFailure

from shale_fixtures import ShaleProcess, error_code

ROOT = ("admin", "s3cret-root")


@pytest.fixture(scope="module")
def auth_node():
    p = ShaleProcess(["node", "--auth"], name="authnode")
    p.start()
    # The localhost exception: the first user, created before anyone authenticates.
    c = p.client()
    c.admin.command("createUser", ROOT[0], pwd=ROOT[1], roles=["root"])
    c.close()
    yield p
    p.cleanup()


def login(node, user, pwd, source="admin", mech=None):
    kw = {"username": user, "password": pwd, "authSource": source}
    if mech:
        kw["authMechanism"] = mech
    c = node.client(**kw)
    c.admin.command("ping")
    return c


@pytest.fixture(scope="module")
def root(auth_node):
    c = login(auth_node, *ROOT)
    yield c
    c.close()


def test_unauthenticated_may_only_handshake(auth_node):
    c = auth_node.client()
    assert c.admin.command("hello")["isWritablePrimary"] is True
    c.admin.command("ping")
    c.admin.command("buildInfo")
    st = c.admin.command("connectionStatus")
    assert st["authInfo"] == {"authenticatedUsers": [], "authenticatedUserRoles": []}
    for fn in (lambda: c.test.c.find_one(), lambda: c.test.c.insert_one({}),
               lambda: c.admin.command("serverStatus"), lambda: c.list_database_names(),
               lambda: c.admin.command("usersInfo", 1)):
        with pytest.raises(OperationFailure) as e:
            fn()
        assert e.value.code == 13
    with pytest.raises(OperationFailure) as e:
        c.test.command("find", "c")
    assert e.value.details["errmsg"] == "Command find requires authentication"
    # The localhost exception is over once a user exists.
    with pytest.raises(OperationFailure) as e:
        c.admin.command("createUser", "sneaky", pwd="x", roles=["root"])
    assert e.value.code == 13
    c.close()


@pytest.mark.parametrize("mech", ["SCRAM-SHA-1", "SCRAM-SHA-256", None])
def test_scram_login(auth_node, root, mech):
    root.test.command("createUser", "u_%s" % (mech or "default"), pwd="pw\u00e9", roles=["read"])
    c = login(auth_node, "u_%s" % (mech or "default"), "pw\u00e9", source="test", mech=mech)
    st = c.test.command("connectionStatus", showPrivileges=True)["authInfo"]
    assert st["authenticatedUsers"] == [{"user": "u_%s" % (mech or "default"), "db": "test"}]
    assert st["authenticatedUserRoles"] == [{"role": "read", "db": "test"}]
    assert any("find" in p["actions"] for p in st["authenticatedUserPrivileges"])
    c.test.c.find_one()
    c.close()


def test_wrong_password_and_unknown_user_look_the_same(auth_node, root):
    root.admin.command("createUser", "alice", pwd="right", roles=[])
    errs = []
    for user, pwd in (("alice", "wrong"), ("nobody", "right")):
        for mech in ("SCRAM-SHA-1", "SCRAM-SHA-256"):
            with pytest.raises(OperationFailure) as e:
                login(auth_node, user, pwd, mech=mech)
            errs.append((e.value.code, e.value.details.get("errmsg")))
    assert set(errs) == {(18, "Authentication failed.")}
    log = auth_node.read_log()
    assert '"id":20249' in log and "right" not in log.split('"id":20249', 1)[1][:400]


def test_sasl_conversation_by_hand(auth_node, root):
    """Reply shapes of saslStart/saslContinue, bad input fails cleanly and the connection
    stays usable."""
    c = auth_node.client()
    with pytest.raises(OperationFailure) as e:
        c.admin.command("saslStart", 1, mechanism="PLAIN", payload=Binary(b"\0a\0b"))
    assert e.value.code == 334
    with pytest.raises(OperationFailure) as e:
        c.admin.command("saslStart", 1, mechanism="SCRAM-SHA-256", payload=Binary(b"x" * 100000))
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        c.admin.command("saslContinue", 1, conversationId=1, payload=Binary(b""))
    assert e.value.code == 17
    r = c.admin.command("saslStart", 1, mechanism="SCRAM-SHA-256",
                        payload=Binary(b"n,,n=admin,r=abcdefghijklmnop"))
    assert r["conversationId"] == 1 and r["done"] is False
    first = bytes(r["payload"]).decode()
    assert first.startswith("r=abcdefghijklmnop") and ",s=" in first and first.endswith(",i=15000")
    # A forged proof fails, and the conversation cannot be replayed.
    nonce = first.split(",")[0][2:]
    final = "c=biws,r=%s,p=%s" % (nonce, "A" * 43 + "=")
    for _ in range(2):
        with pytest.raises(OperationFailure) as e:
            c.admin.command("saslContinue", 1, conversationId=1, payload=Binary(final.encode()))
        assert e.value.code in (17, 18)
    c.admin.command("ping")
    c.close()


def test_credentials_stored_salted(root):
    doc = root.admin.system.users.find_one({"_id": "admin.admin"})
    creds = doc["credentials"]
    assert creds["SCRAM-SHA-1"]["iterationCount"] == 10000
    assert creds["SCRAM-SHA-256"]["iterationCount"] == 15000
    assert set(creds["SCRAM-SHA-256"]) == {"iterationCount", "salt", "storedKey", "serverKey"}
    assert ROOT[1] not in str(doc)
    assert doc["roles"] == [{"role": "root", "db": "admin"}]


def test_builtin_roles_checked(auth_node, root):
    root.shop.command("createUser", "reader", pwd="r", roles=["read"])
    root.shop.command("createUser", "writer", pwd="w", roles=["readWrite"])
    root.admin.command("createUser", "mon", pwd="m", roles=["clusterMonitor"])
    root.shop.items.insert_one({"_id": 1})
    r = login(auth_node, "reader", "r", "shop")
    w = login(auth_node, "writer", "w", "shop")
    m = login(auth_node, "mon", "m")
    assert r.shop.items.find_one() == {"_id": 1}
    assert error_code(lambda: r.shop.items.insert_one({"_id": 2})) == 13
    assert error_code(lambda: r.other.items.find_one()) == 13
    assert error_code(lambda: r.admin.command("serverStatus")) == 13
    w.shop.items.insert_one({"_id": 2})
    w.shop.items.update_one({"_id": 2}, {"$set": {"a": 1}})
    w.shop.items.delete_one({"_id": 2})
    assert error_code(lambda: w.shop.command("dropDatabase")) == 13
    assert error_code(lambda: w.admin.command("createUser", "x", pwd="x", roles=[])) == 13
    assert m.admin.command("serverStatus")["ok"] == 1
    # listDatabases: everything for a holder of the action, else the databases it may use.
    assert {"shop", "admin"} <= set(m.list_database_names())
    assert r.list_database_names() == ["shop"]
    assert error_code(lambda: m.shop.items.insert_one({})) == 13
    assert error_code(lambda: m.admin.command("shutdown")) == 13
    # Roles change under a live connection: its next command sees the change.
    root.shop.command("grantRolesToUser", "reader", roles=["readWrite"])
    r.shop.items.insert_one({"_id": 3})
    root.shop.command("revokeRolesFromUser", "reader", roles=["readWrite"])
    assert error_code(lambda: r.shop.items.insert_one({"_id": 4})) == 13
    for c in (r, w, m):
        c.close()


def test_cluster_parameter_actions(auth_node, root):
    """setClusterParameter / getClusterParameter need their own actions (clusterManager has
    them), not setParameter / getParameter (hostManager's, clusterMonitor's), as MongoDB."""
    root.admin.command("createUser", "cpman", pwd="c", roles=["clusterManager"])
    root.admin.command("createUser", "cphost", pwd="h", roles=["hostManager", "clusterMonitor"])
    man = login(auth_node, "cpman", "c")
    host = login(auth_node, "cphost", "h")
    set_cmd = {"setClusterParameter": {"changeStreamOptions": {
        "preAndPostImages": {"expireAfterSeconds": "off"}}}}
    for cmd in (set_cmd, {"getClusterParameter": "changeStreamOptions"}):
        assert error_code(lambda: host.admin.command(cmd)) == 13
        try:
            man.admin.command(cmd)
        except pymongo.errors.OperationFailure as e:
            assert e.code != 13, e
    man.close()
    host.close()


def test_user_management(auth_node, root):
    db = root.mgmt
    db.command("createUser", "bob", pwd="one", roles=[{"role": "read", "db": "mgmt"}],
               customData={"team": "x"})
    assert error_code(lambda: db.command("createUser", "bob", pwd="one", roles=[])) == 51003
    assert error_code(lambda: db.command("createUser", "eve", pwd="e", roles=["nope"])) == 31
    info = db.command("usersInfo", "bob")["users"]
    assert len(info) == 1 and info[0]["user"] == "bob" and info[0]["db"] == "mgmt"
    assert info[0]["customData"] == {"team": "x"}
    assert info[0]["mechanisms"] == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
    assert "credentials" not in info[0]
    assert "credentials" in db.command("usersInfo", "bob", showCredentials=True)["users"][0]
    db.command("updateUser", "bob", pwd="two")
    with pytest.raises(OperationFailure):
        login(auth_node, "bob", "one", "mgmt")
    b = login(auth_node, "bob", "two", "mgmt")
    # A user may always look itself up.
    assert b.mgmt.command("usersInfo", "bob")["users"][0]["user"] == "bob"
    b.close()
    db.command("createUser", "carl", pwd="c", roles=[], mechanisms=["SCRAM-SHA-256"])
    assert db.command("usersInfo", "carl")["users"][0]["mechanisms"] == ["SCRAM-SHA-256"]
    with pytest.raises(OperationFailure):
        login(auth_node, "carl", "c", "mgmt", mech="SCRAM-SHA-1")
    login(auth_node, "carl", "c", "mgmt", mech="SCRAM-SHA-256").close()
    assert {u["user"] for u in db.command("usersInfo", 1)["users"]} == {"bob", "carl"}
    both = db.command("usersInfo", ["bob", {"user": "carl", "db": "mgmt"}])["users"]
    assert sorted(u["user"] for u in both) == ["bob", "carl"]
    assert db.command("usersInfo", [])["users"] == []
    assert db.command("usersInfo", {"user": "bob", "db": "other"})["users"] == []
    db.command("dropUser", "carl")
    assert error_code(lambda: db.command("dropUser", "carl")) == 11
    assert db.command("dropAllUsersFromDatabase")["n"] == 1
    assert db.command("usersInfo", 1)["users"] == []


def test_user_defined_roles(auth_node, root):
    db = root.rl
    db.things.insert_many([{"_id": 1}, {"_id": 2}])
    db.command("createRole", "thingReader",
               privileges=[{"resource": {"db": "rl", "collection": "things"}, "actions": ["find"]}],
               roles=[])
    assert error_code(lambda: db.command("createRole", "thingReader", privileges=[],
                                         roles=[])) == 51002
    db.command("createUser", "tr", pwd="t", roles=["thingReader"])
    c = login(auth_node, "tr", "t", "rl")
    assert c.rl.things.count_documents({}) == 2
    assert error_code(lambda: c.rl.other.find_one()) == 13
    assert error_code(lambda: c.rl.things.insert_one({})) == 13
    db.command("grantPrivilegesToRole", "thingReader",
               privileges=[{"resource": {"db": "rl", "collection": "things"},
                            "actions": ["insert"]}])
    c.rl.things.insert_one({"_id": 3})
    info = db.command("rolesInfo", "thingReader", showPrivileges=True)["roles"][0]
    assert info["isBuiltin"] is False
    assert sorted(info["privileges"][0]["actions"]) == ["find", "insert"]
    db.command("revokePrivilegesFromRole", "thingReader",
               privileges=[{"resource": {"db": "rl", "collection": "things"},
                            "actions": ["insert"]}])
    assert error_code(lambda: c.rl.things.insert_one({})) == 13
    # A role inheriting a built-in role.
    db.command("updateRole", "thingReader", roles=["readWrite"])
    c.rl.other.insert_one({"x": 1})
    assert db.command("rolesInfo", "read", showPrivileges=True)["roles"][0]["isBuiltin"] is True
    roles = db.command("rolesInfo", ["thingReader", {"role": "read", "db": "rl"}])["roles"]
    assert sorted(r["role"] for r in roles) == ["read", "thingReader"]
    assert {r["role"] for r in db.command("rolesInfo", 1, showBuiltinRoles=True)["roles"]} >= {
        "read", "readWrite", "dbAdmin", "dbOwner", "userAdmin", "thingReader"}
    db.command("dropRole", "thingReader")
    assert db.command("usersInfo", "tr")["users"][0]["roles"] == []
    assert error_code(lambda: c.rl.things.find_one()) == 13
    assert error_code(lambda: db.command("dropRole", "thingReader")) == 31
    c.close()


def test_logout(auth_node, root):
    c = login(auth_node, *ROOT)
    c.admin.command("logout")
    # pymongo's pool re-authenticates new sockets; this one stays logged out.
    st = c.admin.command("connectionStatus")
    assert st["authInfo"]["authenticatedUsers"] in ([], [{"user": "admin", "db": "admin"}])
    c.close()


def test_without_auth_nothing_changes(shale_process):
    """A node without --auth runs everything unauthenticated, user commands included."""
    p = shale_process(["node"], name="noauth")
    c = p.client()
    c.test.c.insert_one({"_id": 1})
    c.admin.command("createUser", "u", pwd="p", roles=["root"])
    assert c.test.c.find_one() == {"_id": 1}
    # ...and a user can still authenticate.
    login(p, "u", "p").close()
    c.close()


def test_node_driver_authenticates(auth_node, root):
    """The current Node.js driver: SCRAM-SHA-256 (speculative in its handshake), SCRAM-SHA-1,
    and AuthenticationFailed for a wrong password."""
    import json
    import os
    import subprocess
    from test_node_driver import HERE, node_binary
    root.admin.command("createUser", "nodeuser", pwd="n0de-pw", roles=["readWriteAnyDatabase"])
    out = subprocess.run([node_binary(), os.path.join(HERE, "auth.js"), auth_node.host,
                          "nodeuser", "n0de-pw"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    me = [{"user": "nodeuser", "db": "admin"}]
    assert r["default"]["users"] == me and r["sha1"]["users"] == me
    assert r["sha256"]["users"] == me and r["sha256"]["n"] == 3
    assert r["wrong"]["code"] == 18
    assert '"isSpeculative":true' in auth_node.read_log()


def test_failed_login_delay(auth_node, root):
    """authFailedDelayMs holds every failed login's answer (a brake on password guessing)."""
    import time
    root.admin.command("setParameter", 1, authFailedDelayMs=300)
    try:
        t = time.monotonic()
        with pytest.raises(OperationFailure) as e:
            login(auth_node, *ROOT[:1], "not-the-password")
        assert e.value.code == 18 and time.monotonic() - t >= 0.3
        login(auth_node, *ROOT).close()
    finally:
        root.admin.command("setParameter", 1, authFailedDelayMs=0)


def _two_users(root):
    for u in ("owner_a", "owner_b"):
        try:
            root.admin.command("createUser", u, pwd="pw", roles=[{"role": "readWrite",
                                                                  "db": "owned"}])
        except OperationFailure as e:
            if e.code != 51003:
                raise


def test_cursors_belong_to_their_user(auth_node, root):
    _two_users(root)
    root.owned.c.drop()
    root.owned.c.insert_many([{"_id": i} for i in range(10)])
    a = login(auth_node, "owner_a", "pw")
    b = login(auth_node, "owner_b", "pw")
    cid = a.owned.command("find", "c", batchSize=2)["cursor"]["id"]
    assert cid != 0
    # Another user may neither read nor kill it, and the owner keeps it.
    assert error_code(lambda: b.owned.command("getMore", cid, collection="c")) == 13
    assert error_code(lambda: b.owned.command("killCursors", "c", cursors=[cid])) == 13
    more = a.owned.command("getMore", cid, collection="c", batchSize=2)
    assert [d["_id"] for d in more["cursor"]["nextBatch"]] == [2, 3]
    assert a.owned.command("killCursors", "c", cursors=[cid])["cursorsKilled"] == [cid]
    a.close()
    b.close()


def test_sessions_belong_to_their_user(auth_node, root):
    import hashlib
    import uuid
    _two_users(root)
    a = login(auth_node, "owner_a", "pw")
    b = login(auth_node, "owner_b", "pw")
    # lsid.uid is the SHA-256 of the user's "user@db" ($listLocalSessions shows it).
    with a.start_session() as s:
        a.owned.c.find_one({}, session=s)
        sid = uuid.UUID(bytes=bytes(s.session_id["id"]))
        mine = [x["_id"] for x in root.admin.aggregate([{"$listLocalSessions": {"allUsers": True}}])
                if x["_id"]["id"] == sid]
        assert [x["uid"] for x in mine] == [hashlib.sha256(b"owner_a@admin").digest()]
        # $listLocalSessions without allUsers: the caller's own sessions only.
        def listed(client):
            return [x["_id"]["id"] for x in client.admin.aggregate([{"$listLocalSessions": {}}])]
        assert sid in listed(a) and sid not in listed(b)
    # b's killSessions [] ends b's sessions only: a's cursor in a session lives on.
    with a.start_session() as s:
        cur = a.owned.c.find({}, batch_size=2, session=s)
        first = next(cur)
        b.admin.command("killSessions", [])
        assert [first["_id"]] + [d["_id"] for d in cur] == list(range(10))
    a.close()
    b.close()
