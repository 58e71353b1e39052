"""Logical sessions (issue 13 item 1, seeds/001 "Logical Sessions"): the logical session cache of
every process, config.system.sessions (sharded on {_id: 1} by the config server, TTL index
lsidTTLIndex), the session commands and stages with MongoDB's shapes and errors, kills of
cursors and running operations, expiry and the reap of expired sessions' config.transactions
records -- on single nodes and through a router."""

import datetime
import hashlib
import threading
import time
import uuid

import pytest
from bson.binary import Binary
from bson.int64 import Int64
from bson.son import SON
from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure

from shale_fixtures import config_db, error_code, fail_point, module_cluster, wait_until

NO_USER_UID = hashlib.sha256(b"").digest()


def new_lsid():
    return {"id": Binary(uuid.uuid4().bytes, 4)}


def id_bytes(v):
    """The 16 bytes of a session id as pymongo hands it back (UUID or Binary)."""
    return v.bytes if isinstance(v, uuid.UUID) else bytes(v)


def ids_of(docs):
    return {id_bytes(d["_id"]["id"]) for d in docs}


def sid(session):
    return id_bytes(session.session_id["id"])


def local_sessions(client, **spec):
    return list(client.admin.aggregate([{"$listLocalSessions": spec}]))


def stored_sessions(client):
    """$listSessions over config.system.sessions of the process behind 'client'."""
    return list(client.config.system.sessions.aggregate([{"$listSessions": {"allUsers": True}}]))


def refresh(client):
    return client.admin.command("refreshLogicalSessionCacheNow")


def errmsg(fn):
    with pytest.raises(OperationFailure) as e:
        fn()
    return e.value.code, e.value.details["errmsg"]


# ---------------------------------------------------------------- a sharded cluster

@pytest.fixture(scope="module")
def sc(request):
    with module_cluster(request, shards=2) as c:
        r = c.router_client()
        r.admin.command("enableSharding", "sess")
        r.sess.plain.insert_many([{"_id": i, "v": i} for i in range(20)])
        # The config server creates config.system.sessions at its first refresh.
        refresh(c.config_client())
        yield c


def owning_shard(c):
    cfg = config_db(c)
    chunks = list(cfg.chunks.find(
        {"uuid": cfg.collections.find_one({"_id": "config.system.sessions"})["uuid"]}))
    assert len(chunks) == 1
    return int(chunks[0]["shard"][len("shard"):])


def test_config_server_shards_the_sessions_collection(sc):
    cfg = sc.config_client().config
    coll = cfg.collections.find_one({"_id": "config.system.sessions"})
    assert coll["key"] == {"_id": 1}
    assert coll["maxChunkSizeBytes"] == 200000
    assert coll["noAutoSplit"] is True
    owner = owning_shard(sc)
    indexes = sc.shard_client(owner).config.system.sessions.index_information()
    assert indexes["lsidTTLIndex"]["key"] == [("lastUse", 1)]
    assert indexes["lsidTTLIndex"]["expireAfterSeconds"] == 30 * 60
    # A second refresh finds it there (and changes nothing).
    refresh(sc.config_client())
    assert cfg.collections.count_documents({"_id": "config.system.sessions"}) == 1


def test_hello_reports_the_session_timeout(sc):
    for client in (sc.router_client(), sc.shard_client(0), sc.config_client()):
        assert client.admin.command("hello")["logicalSessionTimeoutMinutes"] == 30


def test_session_used_through_router_is_persisted_by_router_and_shard(sc):
    r = sc.router_client()
    owner = sc.shard_client(owning_shard(sc))
    with r.start_session() as s:
        r.sess.plain.find_one({"_id": 3}, session=s)
        # The router recorded it; the shard that ran the find did too (the lsid is forwarded).
        assert sid(s) in ids_of(local_sessions(r))
        assert sid(s) in ids_of(local_sessions(sc.shard_client(0), allUsers=True))
        assert sid(s) not in ids_of(owner.config.system.sessions.find())
        refresh(r)
        docs = list(owner.config.system.sessions.find({"_id.id": s.session_id["id"]}))
        assert len(docs) == 1
        assert bytes(docs[0]["_id"]["uid"]) == NO_USER_UID
        assert isinstance(docs[0]["lastUse"], datetime.datetime)
        # The cache holds what was used since the last refresh, as MongoDB's.
        assert sid(s) not in ids_of(local_sessions(r))
        # $listSessions and find through the router read the sharded collection (on the
        # shard that owns its chunk, not on the config server).
        assert sid(s) in ids_of(stored_sessions(r))
        found = list(r.config.system.sessions.find({"_id.id": s.session_id["id"]}))
        assert [d["_id"] for d in found] == [docs[0]["_id"]]
        assert sid(s) in ids_of(r.config.system.sessions.find())
        mine = list(r.config.system.sessions.aggregate([{"$listSessions": {}}]))
        assert sid(s) in ids_of(mine)
        other = list(r.config.system.sessions.aggregate(
            [{"$listSessions": {"users": [{"user": "nobody", "db": "admin"}]}}]))
        assert other == []
        # The shard's own cache writes to the same collection.
        refresh(sc.shard_client(0))
        assert len(list(owner.config.system.sessions.find({"_id.id": s.session_id["id"]}))) == 1


def test_end_sessions_through_router_removes_at_next_refresh(sc):
    r = sc.router_client()
    owner = sc.shard_client(owning_shard(sc))
    s = r.start_session()
    r.admin.command("ping", session=s)  # recorded by the router only
    refresh(r)
    assert len(list(owner.config.system.sessions.find({"_id.id": s.session_id["id"]}))) == 1
    assert r.admin.command("endSessions", [s.session_id])["ok"] == 1
    assert len(list(owner.config.system.sessions.find({"_id.id": s.session_id["id"]}))) == 1
    refresh(r)
    assert list(owner.config.system.sessions.find({"_id.id": s.session_id["id"]})) == []


def test_kill_sessions_through_router_kills_cursors(sc):
    r = sc.router_client()
    with r.start_session() as s:
        cur = r.sess.plain.find({}, batch_size=2, session=s)
        assert len([next(cur), next(cur)]) == 2
        other = r.start_session()
        cur2 = r.sess.plain.find({}, batch_size=2, session=other)
        next(cur2)
        assert r.admin.command("killSessions", [s.session_id])["ok"] == 1
        with pytest.raises(OperationFailure) as e:
            list(cur)
        assert e.value.code == 43  # CursorNotFound
        # Another session's cursor lives on.
        assert len(list(cur2)) == 19
        other.end_session()


def test_kill_sessions_through_router_kills_running_operation(sc):
    r = sc.router_client()
    shard = sc.shard_client(0)
    s = r.start_session()
    errors = []
    fail_point(shard, "waitInFindBeforeMakingBatch", "alwaysOn", {"nss": "sess.plain"})

    def run():
        try:
            list(r.sess.plain.find({}, comment="kill-by-session", session=s))
        except OperationFailure as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    try:
        wait_until(lambda: shard.admin.command(
            SON([("currentOp", 1), ("command.comment", "kill-by-session")]))["inprog"],
            what="the find to be held on the shard")
        assert r.admin.command("killSessions", [s.session_id])["ok"] == 1
        t.join(30)
        assert [e.code for e in errors] == [11601]  # Interrupted
        # The shard's part was killed too, though the fail point is still on.
        wait_until(lambda: not shard.admin.command(
            SON([("currentOp", 1), ("command.comment", "kill-by-session")]))["inprog"],
            what="the shard operation to end")
    finally:
        fail_point(shard, "waitInFindBeforeMakingBatch", "off")
        t.join(30)
    # A killed session may be used again.
    assert r.sess.plain.count_documents({}, session=s) == 20
    s.end_session()


def test_kill_all_sessions_by_pattern_through_router(sc):
    r = sc.router_client()
    s = r.start_session()
    cur = r.sess.plain.find({}, batch_size=2, session=s)
    next(cur)
    pattern = {"lsid": {"id": s.session_id["id"], "uid": Binary(NO_USER_UID, 0)}}
    assert r.admin.command("killAllSessionsByPattern", [pattern])["ok"] == 1
    assert error_code(lambda: list(cur)) == 43
    # Every session of the unauthenticated user: {uid}, and killAllSessions of no user.
    cur = r.sess.plain.find({}, batch_size=2, session=s)
    next(cur)
    assert r.admin.command("killAllSessionsByPattern",
                           [{"uid": Binary(NO_USER_UID, 0)}])["ok"] == 1
    assert error_code(lambda: list(cur)) == 43
    cur = r.sess.plain.find({}, batch_size=2, session=s)
    next(cur)
    # Another user's sessions: not ours.
    assert r.admin.command("killAllSessions", [{"user": "u", "db": "admin"}])["ok"] == 1
    assert len(list(cur)) == 19
    s.end_session()


def test_list_local_sessions_and_commands_on_every_process(sc):
    for client in (sc.router_client(), sc.shard_client(1), sc.config_client()):
        res = client.admin.command("startSession")
        assert set(res) >= {"id", "timeoutMinutes", "ok"}
        assert set(res["id"]) == {"id"}
        assert res["timeoutMinutes"] == 30
        mine = [d for d in local_sessions(client)
                if id_bytes(d["_id"]["id"]) == id_bytes(res["id"]["id"])]
        assert len(mine) == 1
        assert set(mine[0]) == {"_id", "lastUse"}
        assert bytes(mine[0]["_id"]["uid"]) == NO_USER_UID
        # The rest of the pipeline runs over them.
        counted = list(client.admin.aggregate([{"$listLocalSessions": {"allUsers": True}},
                                               {"$count": "n"}]))
        assert counted[0]["n"] >= 1
        lsid = new_lsid()
        assert client.admin.command("refreshSessions", [lsid])["ok"] == 1
        assert id_bytes(lsid["id"]) in ids_of(local_sessions(client, allUsers=True))
        assert client.test.command("endSessions", [lsid])["ok"] == 1
        assert client.admin.command("killSessions", [lsid])["ok"] == 1


def test_refresh_before_the_collection_exists_fails_softly(request):
    # A cluster without shards: the config server cannot create the collection, the router
    # cannot find it; both refreshes fail with MongoDB's codes and nothing else breaks.
    from shale_fixtures import ShaleCluster
    c = ShaleCluster(shards=0)
    try:
        c.start()
        assert error_code(lambda: refresh(c.config_client())) == 70  # ShardNotFound
        assert error_code(lambda: refresh(c.router_client())) == 118  # NamespaceNotSharded
        assert c.router_client().admin.command("startSession")["ok"] == 1
    finally:
        failed = request.session.testsfailed > 0
        c.cleanup(keep_logs_prefix="test_sessions-noshards" if failed else None)


# ---------------------------------------------------------------- bad input (node and router)

def bad_input_cases(admin, config):
    """(call, code, errmsg or None) for every malformed argument of the session commands."""
    u = Binary(uuid.uuid4().bytes, 4)
    return [
        (lambda: admin.command("endSessions", 1), 14,
         "BSON field 'endSessions.endSessions' is the wrong type 'int', expected type 'array'"),
        (lambda: admin.command("refreshSessions", [1]), 14,
         "BSON field 'refreshSessions.refreshSessionsFromClient.0' is the wrong type 'int', "
         "expected type 'object'"),
        (lambda: admin.command("refreshSessions", [{}]), 40414,
         "BSON field 'refreshSessions.refreshSessionsFromClient.id' is missing but a required "
         "field"),
        (lambda: admin.command("endSessions", [{"id": 5}]), 14,
         "BSON field 'endSessions.endSessionsFromClient.id' is the wrong type 'int', expected "
         "type 'binData'"),
        (lambda: admin.command("endSessions", [{"id": Binary(b"x" * 16, 0)}]), 14,
         "BSON field 'endSessions.endSessionsFromClient.id' is the wrong binData type 'general', "
         "expected type 'UUID'"),
        (lambda: admin.command("endSessions", [{"id": Binary(b"x" * 3, 4)}]), 207,
         "uuid must be a 16-byte binary field with UUID (4) subtype"),
        (lambda: admin.command("endSessions", [{"id": u, "foo": 1}]), 40415,
         "BSON field 'endSessions.endSessionsFromClient.foo' is an unknown field."),
        (lambda: admin.command("endSessions", [{"id": u, "uid": Binary(b"x" * 5, 0)}]), 12,
         "Unsupported SHA256Block hash length: 5"),
        (lambda: admin.command(SON([("endSessions", []), ("foo", 1)])), 40415,
         "BSON field 'endSessions.foo' is an unknown field."),
        (lambda: admin.command("endSessions", [{"id": u, "txnNumber": Int64(1)}]), 72,
         "Cannot specify txnNumber in lsid without specifying txnUUID"),
        (lambda: admin.command("endSessions", [{"id": u, "txnUUID": u}]), 72, None),
        (lambda: admin.command("killSessions", "x"), 14,
         "BSON field 'KillSessionsCmd.killSessions' is the wrong type 'string', expected type "
         "'array'"),
        (lambda: admin.command("killAllSessions", [{"user": 1, "db": "x"}]), 14,
         "BSON field 'KillAllSessionsCmd.killAllSessions.user' is the wrong type 'int', "
         "expected type 'string'"),
        (lambda: admin.command("killAllSessions", [{"user": "a"}]), 40414,
         "BSON field 'KillAllSessionsCmd.killAllSessions.db' is missing but a required field"),
        (lambda: admin.command("killAllSessionsByPattern", ["x"]), 14,
         "BSON field 'KillAllSessionsByPatternCmd.killAllSessionsByPattern.0' is the wrong type "
         "'string', expected type 'object'"),
        (lambda: admin.command("killAllSessionsByPattern", [{"invalid": 1}]), 40415,
         "BSON field 'KillAllSessionsByPatternCmd.killAllSessionsByPattern.invalid' is an "
         "unknown field."),
        (lambda: admin.command("killAllSessionsByPattern", [{"lsid": {"id": u}}]), 40414,
         "BSON field 'KillAllSessionsByPatternCmd.killAllSessionsByPattern.lsid.uid' is missing "
         "but a required field"),
        (lambda: admin.command("killAllSessionsByPattern", [{"uid": Binary(b"x" * 32, 1)}]), 14,
         "BSON field 'KillAllSessionsByPatternCmd.killAllSessionsByPattern.uid' is the wrong "
         "binData type 'function', expected type 'general'"),
        (lambda: admin.command("killAllSessionsByPattern",
                               [{"users": [{"user": "a", "db": "b"}, {"user": "c", "db": "d"}]}]),
         2, "Too many users in impersonation data"),
        (lambda: list(admin.aggregate([{"$listLocalSessions": 1}])), 14,
         "$listLocalSessions options must be specified in an object, but found: int"),
        (lambda: list(admin.aggregate([{"$listLocalSessions": {"x": 1}}])), 40415,
         "BSON field '$listLocalSessions.x' is an unknown field."),
        (lambda: list(admin.aggregate([{"$listLocalSessions": {"allUsers": 1}}])), 14,
         "BSON field '$listLocalSessions.allUsers' is the wrong type 'int', expected type "
         "'bool'"),
        (lambda: list(admin.aggregate([{"$listLocalSessions": {
            "allUsers": True, "users": [{"user": "a", "db": "b"}]}}])), 12,
         "$listLocalSessions may not specify {allUsers:true} and {users:[...]} at the same time"),
        (lambda: list(admin.aggregate([{"$match": {}}, {"$listLocalSessions": {}}])), 40602,
         "$listLocalSessions is only valid as the first stage in a pipeline."),
        (lambda: list(admin.c.aggregate([{"$listLocalSessions": {}}])), 73,
         "$listLocalSessions must be run against the database with {aggregate: 1}, not a "
         "collection"),
        (lambda: list(config.other.aggregate([{"$listSessions": {}}])), 73,
         "$listSessions may only be run against config.system.sessions"),
        (lambda: list(config.system.sessions.aggregate([{"$match": {}},
                                                        {"$listSessions": {}}])), 40602,
         "$listSessions is only valid as the first stage in a pipeline."),
    ]


def check_bad_input(client):
    for call, code, msg in bad_input_cases(client.admin, client.config):
        got_code, got_msg = errmsg(call)
        assert got_code == code, (got_msg, code)
        if msg is not None:
            assert got_msg == msg


def test_bad_input_on_node(rs_node):
    check_bad_input(rs_node.client())


def test_bad_input_through_router(sc):
    check_bad_input(sc.router_client())


def test_kill_commands_ignore_their_own_session(rs_node):
    # killAllSessions runs in pymongo's implicit session: it must neither kill itself nor
    # record its session.
    c = rs_node.client()
    refresh(c)
    s = c.start_session()
    assert c.admin.command("killAllSessions", [], session=s)["ok"] == 1
    assert sid(s) not in ids_of(local_sessions(c, allUsers=True))
    assert c.admin.command("killSessions", [], session=s)["ok"] == 1
    assert c.admin.command("killAllSessionsByPattern", [], session=s)["ok"] == 1


# ---------------------------------------------------------------- single nodes

def test_node_persists_its_own_sessions(rs_node):
    c = rs_node.client()
    with c.start_session() as s:
        c.test.c.insert_one({"a": 1}, session=s)
        assert sid(s) in ids_of(local_sessions(c))
        refresh(c)
        assert sid(s) in ids_of(c.config.system.sessions.find())
        assert sid(s) in ids_of(stored_sessions(c))
        ttl = c.config.system.sessions.index_information()["lsidTTLIndex"]
        assert ttl["expireAfterSeconds"] == 1800
        # endSessions: gone at the next refresh, its cursors killed.
        c.test.c.insert_many([{"b": i} for i in range(10)])
        cur = c.test.c.find({}, batch_size=2, session=s)
        next(cur)
        c.admin.command("endSessions", [s.session_id])
        refresh(c)
        assert sid(s) not in ids_of(c.config.system.sessions.find())
        assert error_code(lambda: list(cur)) == 43


def test_standalone_has_sessions_too(node):
    c = node.client()
    res = c.admin.command("startSession")
    refresh(c)
    assert id_bytes(res["id"]["id"]) in ids_of(c.config.system.sessions.find())


def test_kill_sessions_on_node_kills_running_operation(rs_node):
    c = rs_node.client()
    c.test.held.insert_one({"_id": 1})
    other = rs_node.client()  # a session belongs to its client: the find runs on its own
    s = other.start_session()
    errors = []
    fail_point(c, "waitInFindBeforeMakingBatch", "alwaysOn", {"nss": "test.held"})

    def run():
        try:
            list(other.test.held.find({}, comment="held-node", session=s))
        except OperationFailure as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    try:
        wait_until(lambda: c.admin.command(
            SON([("currentOp", 1), ("command.comment", "held-node")]))["inprog"],
            what="the find to be held")
        assert c.admin.command("killSessions", [s.session_id])["ok"] == 1
        t.join(30)
        assert [(e.code, e.details["codeName"]) for e in errors] == [(11601, "Interrupted")]
    finally:
        fail_point(c, "waitInFindBeforeMakingBatch", "off")
        t.join(30)


def test_too_many_sessions(shale_process):
    p = shale_process(["node", "--replSet", "rs0"], name="maxsess", start=False)
    p.start(extra=["--setParameter", "maxSessions=3",
                   "--setParameter", "disableLogicalSessionCacheRefresh=true"])
    c = p.client()
    a = c.admin
    refresh(c)  # empties the cache (the readiness check's session was in it)
    # pymongo's implicit session is the first; two more fit.
    assert a.command("startSession")["ok"] == 1
    assert a.command("startSession")["ok"] == 1
    code, msg = errmsg(lambda: a.command("startSession"))
    assert code == 261  # TooManyLogicalSessions
    assert "number of active sessions is too high" in msg
    assert error_code(lambda: a.command("refreshSessions", [new_lsid() for _ in range(5)])) == 261
    # A refresh empties the cache: the sessions used since are what it holds.
    refresh(c)
    assert a.command("startSession")["ok"] == 1


# ---------------------------------------------------------------- expiry and reaping

def txn_record(lsid_id, uid, minutes_ago):
    return {"_id": {"id": lsid_id, "uid": Binary(uid, 0)}, "txnNum": Int64(3),
            "lastWriteOpTime": {"ts": Timestamp(1, 1), "t": Int64(1)},
            "lastWriteDate": datetime.datetime.utcnow() - datetime.timedelta(minutes=minutes_ago)}


def test_reap_removes_transaction_records_of_sessions_gone(shale_process):
    p = shale_process(["node", "--replSet", "rs0"], name="reap", start=False)
    p.start(extra=["--setParameter", "TransactionRecordMinimumLifetimeMinutes=0",
                   "--setParameter", "disableLogicalSessionCacheRefresh=true"])
    c = p.client()
    alive = c.start_session()
    c.admin.command("ping", session=alive)
    refresh(c)
    gone = Binary(uuid.uuid4().bytes, 4)
    c.config.transactions.insert_many([txn_record(gone, NO_USER_UID, 5),
                                       txn_record(alive.session_id["id"], NO_USER_UID, 5)])
    c.config.image_collection.insert_one({"_id": {"id": gone, "uid": Binary(NO_USER_UID, 0)},
                                          "txnNum": Int64(3), "imageKind": "preImage"})
    assert c.admin.command("reapLogicalSessionCacheNow")["ok"] == 1
    # (The inserts themselves were a retryable write: their session's record stays too.)
    left = {id_bytes(d["_id"]["id"]) for d in c.config.transactions.find()}
    assert sid(alive) in left
    assert id_bytes(gone) not in left
    assert c.config.image_collection.count_documents({}) == 0


def test_sessions_expire_with_a_lowered_timeout(shale_process):
    p = shale_process(["node", "--replSet", "rs0"], name="expiry", start=False)
    p.start(extra=["--setParameter", "localLogicalSessionTimeoutMinutes=1",
                   "--setParameter", "logicalSessionRefreshMillis=500",
                   "--setParameter", "ttlMonitorSleepSecs=1",
                   "--setParameter", "TransactionRecordMinimumLifetimeMinutes=0"])
    c = p.client()
    assert c.admin.command("hello")["logicalSessionTimeoutMinutes"] == 1
    assert c.admin.command("startSession")["timeoutMinutes"] == 1
    c.test.c.insert_many([{"i": i} for i in range(10)])
    s = c.start_session()
    cur = c.test.c.find({}, batch_size=2, session=s)
    next(cur)  # the cursor is open in the session, which is not used again
    c.config.transactions.insert_one(txn_record(s.session_id["id"], NO_USER_UID, 5))
    wait_until(lambda: sid(s) in ids_of(c.config.system.sessions.find()),
               what="the periodic refresh to store the session")
    ttl = c.config.system.sessions.index_information()["lsidTTLIndex"]
    assert ttl["expireAfterSeconds"] == 60
    # The TTL monitor removes it a minute after its last use; the next refresh finds it gone
    # and kills its cursor; the reap removes its transaction record.
    wait_until(lambda: sid(s) not in ids_of(c.config.system.sessions.find()), timeout=120,
               what="the session to expire")
    assert sid(s) not in ids_of(local_sessions(c, allUsers=True))
    wait_until(lambda: c.config.transactions.count_documents({"_id.id": s.session_id["id"]}) == 0,
               timeout=30,
               what="the reap of the expired session's record")
    # A getMore would use the session again: leave the refreshes a few rounds to kill it first.
    time.sleep(2)
    with pytest.raises(OperationFailure) as e:
        list(cur)
    assert e.value.code == 43
