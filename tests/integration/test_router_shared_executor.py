"""A router on the shared service executor (--serviceExecutor shared, issue 22): its
single-shard finds and writes park while the shard answers (the worker serves other
connections meanwhile) and resume on whichever worker takes the reply. What a client sees
stays the same: results, maxTimeMS, killOp, StaleConfig retries, sessions, cursors and
transactions (which keep their worker)."""

import threading
import time

import pymongo
import pytest
from bson.son import SON
from pymongo.errors import OperationFailure

from shale_fixtures import Background, fail_point, module_cluster, shard_on_id, wait_until

SHARED = ["--setParameter", "serviceExecutor=shared"]
INTERRUPTED = 11601
MAX_TIME_MS_EXPIRED = 50


@pytest.fixture(scope="module")
def cluster(request):
    with module_cluster(request, shards=2, routers=2, router_extra=SHARED) as c:
        db = shard_on_id(c.router_client(), "ex", "c", middle=100)
        db.c.insert_many([{"_id": i, "v": i} for i in range(200)])
        yield c


def _parked(client):
    net = client.admin.command("serverStatus")["network"]
    return net["serviceExecutors"]["shared"]["parkedRequests"]


def test_routed_crud_from_many_clients_parks_and_answers_right(cluster):
    c = cluster.router_client(maxPoolSize=16)
    before = _parked(c)
    errors = []

    def worker(k):
        coll = c.ex.c
        try:
            for i in range(40):
                _id = 1000 + k * 100 + i
                coll.insert_one({"_id": _id, "v": 0})
                assert coll.find_one({"_id": _id}) == {"_id": _id, "v": 0}
                assert coll.update_one({"_id": _id}, {"$inc": {"v": k + 1}}).modified_count == 1
                assert coll.find_one({"_id": _id})["v"] == k + 1
                assert coll.find_one({"_id": i}) == {"_id": i, "v": i}
                assert coll.delete_one({"_id": _id}).deleted_count == 1
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert c.ex.c.count_documents({}) == 200
    # 8 x 40 x 6 single-shard requests: the most of them parked (a reply already there
    # when the request looks does not park).
    assert _parked(c) - before > 8 * 40
    c.close()


def test_parked_find_ends_at_max_time_ms(cluster):
    c = cluster.router_client()
    shard = cluster.shard_client(0)
    fail_point(shard, "failCommand", "alwaysOn",
               {"failCommands": ["find"], "blockConnection": True, "blockTimeMS": 5000,
                "failInternalCommands": True, "namespace": "ex.c"})
    try:
        t0 = time.monotonic()
        with pytest.raises(OperationFailure) as e:
            c.ex.c.find_one({"_id": 3}, max_time_ms=300)
        assert e.value.code == MAX_TIME_MS_EXPIRED
        assert time.monotonic() - t0 < 3
        # The router serves other requests meanwhile, and afterwards.
        assert c.ex.c.find_one({"_id": 150}) == {"_id": 150, "v": 150}
    finally:
        fail_point(shard, "failCommand", "off")
        shard.close()
    assert c.ex.c.find_one({"_id": 3}) == {"_id": 3, "v": 3}
    c.close()


def test_parked_find_is_ended_by_kill_op(cluster):
    c = cluster.router_client()
    shard = cluster.shard_client(0)
    fail_point(shard, "failCommand", "alwaysOn",
               {"failCommands": ["find"], "blockConnection": True, "blockTimeMS": 10000,
                "failInternalCommands": True, "namespace": "ex.c"})
    try:
        bg = Background(lambda: c.ex.c.find_one({"_id": 4}, comment="park-kill"),
                        catch=pymongo.errors.PyMongoError)
        ops = []

        def waiting():
            ops[:] = [op["opid"] for op in c.admin.command(
                SON([("currentOp", 1), ("command.comment", "park-kill")]))["inprog"]]
            return ops
        wait_until(waiting, what="the routed find to wait on the shard")
        t0 = time.monotonic()
        c.admin.command("killOp", op=ops[0])
        bg.join(30)
        assert time.monotonic() - t0 < 5
        assert isinstance(bg.error, OperationFailure), bg.error
        assert bg.error.code == INTERRUPTED
    finally:
        fail_point(shard, "failCommand", "off")
        shard.close()
    assert c.ex.c.find_one({"_id": 4}) == {"_id": 4, "v": 4}
    c.close()


def test_sessions_cursors_and_transactions_through_the_shared_router(cluster):
    c = cluster.router_client()
    coll = c.ex.c
    # A cursor over one shard: its getMores keep their worker and see every document.
    assert [d["_id"] for d in coll.find({"_id": {"$lt": 50}}, batch_size=7).sort("_id")] == \
        list(range(50))
    # A retryable write (lsid + txnNumber) parks like any other.
    with c.start_session() as s:
        coll.insert_one({"_id": 5000}, session=s)
        assert coll.find_one({"_id": 5000}, session=s) == {"_id": 5000}
        coll.delete_one({"_id": 5000}, session=s)
    # A transaction's statements keep their worker; it commits across both shards.
    with c.start_session() as s:
        with s.start_transaction():
            coll.insert_one({"_id": 5001}, session=s)
            coll.update_one({"_id": 150}, {"$set": {"t": 1}}, session=s)
    assert coll.find_one({"_id": 5001}) == {"_id": 5001}
    assert coll.find_one({"_id": 150})["t"] == 1
    coll.delete_one({"_id": 5001})
    coll.update_one({"_id": 150}, {"$unset": {"t": 1}})
    c.close()


def test_stale_router_retries_parked_requests(cluster):
    mover = cluster.router_client(1)
    stale = cluster.router_client(0)
    assert stale.ex.c.find_one({"_id": 60}) == {"_id": 60, "v": 60}
    # (The module's last test: the chunk stays moved. shard0 still holds the orphans of the
    # set-up's migration, so the chunk moves the other way.)
    mover.admin.command("split", "ex.c", middle={"_id": 50})
    mover.admin.command("moveChunk", "ex.c", find={"_id": 60}, to="shard1")
    # The first router's routing table still names shard0: StaleConfig, refresh, retry.
    assert stale.ex.c.find_one({"_id": 60}) == {"_id": 60, "v": 60}
    assert stale.ex.c.update_one({"_id": 61}, {"$set": {"w": 1}}).modified_count == 1
    assert stale.ex.c.find_one({"_id": 61}) == {"_id": 61, "v": 61, "w": 1}
    mover.close()
    stale.close()
