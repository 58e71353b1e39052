"""A stale router never misses documents right after a chunk migration (issue 17 item 5):
one router moves a chunk back and forth while the other, which has not seen the moves,
reads the whole collection after each one. The donor and the recipient both answer the
stale router's old versions with StaleConfig, so it refreshes and reads all of them."""
import threading

import pytest
from pymongo import WriteConcern
from pymongo.errors import PyMongoError

from shale_fixtures import (Background, fail_point, module_cluster, run_to_fail_point,
                            wait_until)


@pytest.fixture(scope="module")
def cl(request):
    with module_cluster(request, shards=2, routers=2) as c:
        yield c


def make_sharded(cl, db, n=20):
    r = cl.router_client()
    ns = "%s.c" % db
    r.admin.command("enableSharding", db, primaryShard=cl.shard_name(0))
    r.admin.command("shardCollection", ns, key={"a": 1})
    r.admin.command("split", ns, middle={"a": 0})
    r.admin.command("moveChunk", ns, find={"a": 0}, to=cl.shard_name(1))
    # Journaled: a test kills a shard and counts them after its restart.
    r[db].get_collection("c", write_concern=WriteConcern(j=True)).insert_many(
        [{"a": i - n // 2} for i in range(n)])
    return r, ns


def test_the_other_router_reads_everything_after_each_move(cl):
    r, ns = make_sharded(cl, "srm")
    other = cl.router_client(1)
    assert other.srm.c.count_documents({}) == 20  # its routing is loaded before the moves
    for k in range(6):
        r.admin.command("moveChunk", ns, find={"a": -5}, to=cl.shard_name((k + 1) % 2),
                        _waitForDelete=True)
        if k % 2 == 0:
            assert other.srm.c.count_documents({}) == 20, k
        else:
            assert len(list(other.srm.c.find({}, {"_id": 0}))) == 20, k


def test_after_a_refine_and_a_move(cl):
    r, ns = make_sharded(cl, "srf")
    other = cl.router_client(1)
    r.srf.c.create_index([("a", 1), ("b", 1)])
    other.admin.command("refineCollectionShardKey", ns, key={"a": 1, "b": 1})
    r.admin.command("moveChunk", ns, find={"a": -5, "b": 1}, to=cl.shard_name(1))
    assert other.srf.c.count_documents({}) == 20


def test_reads_during_the_moves_see_everything(cl):
    r, ns = make_sharded(cl, "srd")
    other = cl.router_client(1)
    seen = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            seen.append(other.srd.c.count_documents({}))

    t = threading.Thread(target=reader)
    t.start()
    try:
        for k in range(6):
            r.admin.command("moveChunk", ns, find={"a": -5}, to=cl.shard_name((k + 1) % 2),
                            _waitForDelete=True)
    finally:
        stop.set()
        t.join()
    assert seen and all(n == 20 for n in seen), [n for n in seen if n != 20]


def test_the_recipient_holds_reads_until_the_donor_releases_it(cl):
    # MongoDB 6.0+'s recipient critical section: from _recvChunkCommit until the donor's
    # _recvChunkReleaseCritSec, versioned reads of the collection wait on the recipient. The
    # donor is held after its commit and its own refresh, before it tells the recipient: a
    # read through the router that did not see the move waits, then sees all 20 documents.
    r, ns = make_sharded(cl, "srcs")
    other = cl.router_client(1)
    assert other.srcs.c.count_documents({}) == 20
    donor, recipient = cl.shard_client(0), cl.shard_client(1)
    move = run_to_fail_point(
        donor, "moveChunkHangAtStep5",
        lambda: r.admin.command("moveChunk", ns, find={"a": -5}, to=cl.shard_name(1)),
        catch=PyMongoError)
    read = None
    try:
        crit = recipient.config.collection_critical_sections.find_one({"_id": ns})
        assert crit is not None and crit["reason"]["command"] == "moveChunk"
        read = Background(lambda: other.srcs.c.count_documents({}))
        assert not read.join(0.5).done  # held by the recipient's critical section
    finally:
        fail_point(donor, "moveChunkHangAtStep5", "off")
    move.join(60)
    assert move.done and move.error is None, move.error
    read.join(60)
    assert read.done and read.result == 20, read.error
    assert recipient.config.collection_critical_sections.find_one({"_id": ns}) is None
    assert r.srcs.c.count_documents({}) == 20


def test_a_restarted_recipient_keeps_its_critical_section_until_released(cl):
    # kill -9 of the recipient while it holds the section: the restarted recipient restores
    # it from config.collection_critical_sections (reads still wait), and the donor's commit
    # sequence -- retried until the recipient is back -- releases it.
    r, ns = make_sharded(cl, "srck")
    other = cl.router_client(1)
    assert other.srck.c.count_documents({}) == 20
    donor = cl.shard_client(0)
    move = run_to_fail_point(
        donor, "moveChunkHangAtStep5",
        lambda: r.admin.command("moveChunk", ns, find={"a": -5}, to=cl.shard_name(1)),
        catch=PyMongoError)
    try:
        cl.shards[1].kill()
        cl.restart_shard(1)
        crit = cl.shard_client(1).config.collection_critical_sections.find_one({"_id": ns})
        assert crit is not None and crit["reason"]["command"] == "moveChunk"
    finally:
        fail_point(donor, "moveChunkHangAtStep5", "off")
    move.join(60)
    wait_until(lambda: cl.shard_client(1).config.collection_critical_sections.find_one(
        {"_id": ns}) is None, timeout=60, what="the donor to release the recipient")
    assert other.srck.c.count_documents({}) == 20
    assert r.srck.c.count_documents({}) == 20
