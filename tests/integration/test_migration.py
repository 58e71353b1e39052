"""Live chunk migration (issue 7 items 1, 2, 4, 5): moveChunk / moveRange through the
router, the donor's and recipient's protocol (docs/design/sharding-protocol.md "Chunk
migration"), what users see during and after a migration, and crash safety of the
donor. Real processes: a config server, three shards, routers; pymongo on the router
and, to check where documents really are, on each shard directly."""

import threading
import time

import bson
import pymongo
import pytest
from bson.binary import STANDARD
from bson.codec_options import CodecOptions
from pymongo.errors import OperationFailure, PyMongoError

from shale_fixtures import ShaleCluster, fail_point, wait_until

N = 5000
MAXK = bson.max_key.MaxKey()
MINK = bson.min_key.MinKey()


@pytest.fixture(scope="module")
def mc(request):
    failed_before = request.session.testsfailed
    c = ShaleCluster(shards=3, shard_extra=["--setParameter", "orphanCleanupDelaySecs=0"])
    try:
        c.start()
    except Exception:
        c.cleanup(keep_logs_prefix="%s-start" % request.module.__name__)
        raise
    yield c
    failed = request.session.testsfailed > failed_before
    c.cleanup(keep_logs_prefix=request.module.__name__ if failed else None)


def _config(c):
    return c.config_client().get_database("config", codec_options=CodecOptions(
        uuid_representation=STANDARD))


def _chunks(c, ns):
    cfg = _config(c)
    coll = cfg.collections.find_one({"_id": ns})
    return list(cfg.chunks.find({"uuid": coll["uuid"]}).sort("min", 1))


def _chunk_at(c, ns, x):
    for ch in _chunks(c, ns):
        lo, hi = ch["min"]["x"], ch["max"]["x"]
        if (isinstance(lo, bson.min_key.MinKey) or lo <= x) and \
                (isinstance(hi, bson.max_key.MaxKey) or x < hi):
            return ch
    raise AssertionError("no chunk holds x=%r" % x)


def _setup(c, name, n=N, splits=(2500,)):
    r = c.router_client()
    ns = "mig." + name
    r.admin.command("enableSharding", "mig", primaryShard="shard0")
    r.admin.command("shardCollection", ns, key={"x": 1})
    for s in splits:
        r.admin.command("split", ns, middle={"x": s})
    r.mig[name].insert_many([{"_id": i, "x": i, "v": 0, "pad": "p" * 50} for i in range(n)])
    return r, ns


def _direct(c, i, name):
    return c.shard_client(i).mig[name]


def test_move_chunk_moves_documents_and_bumps_versions(mc):
    r, ns = _setup(mc, "basic")
    before = _chunk_at(mc, ns, 3000)
    low = _chunk_at(mc, ns, 0)
    assert before["shard"] == "shard0" and low["shard"] == "shard0"
    coll_major = max(ch["lastmod"].time for ch in _chunks(mc, ns))
    r.admin.command("moveChunk", ns, find={"x": 3000}, to="shard1")
    moved = _chunk_at(mc, ns, 3000)
    control = _chunk_at(mc, ns, 0)
    assert moved["shard"] == "shard1"
    assert (moved["lastmod"].time, moved["lastmod"].inc) == (coll_major + 1, 0)
    assert (control["lastmod"].time, control["lastmod"].inc) == (coll_major + 1, 1)
    assert moved["history"][0]["shard"] == "shard1"
    # Through the router: every document once.
    ids = [d["_id"] for d in r.mig.basic.find({}, {"_id": 1})]
    assert len(ids) == N and len(set(ids)) == N
    assert r.mig.basic.count_documents({"x": {"$gte": 2500}}) == N - 2500
    # The recipient holds the range; the donor's orphans are filtered from versioned reads.
    assert _direct(mc, 1, "basic").count_documents({"x": {"$gte": 2500}}) == N - 2500
    assert r.mig.basic.find_one({"x": 4000})["_id"] == 4000
    # The changelog has the commit.
    log = _config(mc).changelog.find_one({"what": "moveChunk.commit", "ns": ns})
    assert log is not None and log["details"]["to"] == "shard1"
