"""Zone sharding through the router, as mongos answers mongosh's sh.addShardTag /
sh.removeShardTag / sh.addTagRange / sh.updateZoneKeyRange / sh.removeRangeFromZone:
addShardToZone / removeShardFromZone (config.shards `tags`), updateZoneKeyRange (config.tags
{_id, ns, min, max, tag}), balancerCollectionStatus for compliant and violating layouts, and
`profile` on the router (mongos: levels 0 and -1 only) and on a data node."""

import pytest
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from pymongo.errors import OperationFailure

from shale_fixtures import module_cluster


@pytest.fixture(scope="module")
def zc(request):
    with module_cluster(request) as c:
        r = c.router_client()
        # These tests build non-compliant layouts on purpose (zone violations, draining shards)
        # and move chunks by hand: the balancer, on by default, would fix them meanwhile or
        # race the manual migrations. MongoDB's ShardingTest stops it the same way.
        r.admin.command("balancerStop")
        for i in range(2):
            c.shard_client(i).admin.command("setParameter", 1, orphanCleanupDelaySecs=0)
        r.admin.command("enableSharding", "zdb", primaryShard="shard0")
        yield c


def _fails(fn, code, *fragments):
    with pytest.raises(OperationFailure) as e:
        fn()
    assert e.value.code == code, e.value.details
    for f in fragments:
        assert f in str(e.value.details.get("errmsg")), e.value.details
    return e.value.details


def _tags(c, shard):
    return c.router_client().config.shards.find_one({"_id": shard}).get("tags")


def _ranges(c, ns):
    return list(c.router_client().config.tags.find({"ns": ns}, sort=[("min", 1)]))


# ---- addShardToZone / removeShardFromZone ----


def test_add_shard_to_zone_is_idempotent(zc):
    a = zc.router_client().admin
    # A shard in no zone has no tags field, and removing it from a zone does not add one.
    assert _tags(zc, "shard0") is None
    a.command("removeShardFromZone", "shard0", zone="Z1")
    assert _tags(zc, "shard0") is None
    res = a.command("addShardToZone", "shard0", zone="Z1")
    assert res["ok"] == 1
    assert _tags(zc, "shard0") == ["Z1"]
    a.command("addShardToZone", "shard0", zone="Z1")
    assert _tags(zc, "shard0") == ["Z1"]
    a.command("addShardToZone", "shard0", zone="Z2")
    assert _tags(zc, "shard0") == ["Z1", "Z2"]
    # The legacy lower-case name mongosh's old helpers used.
    a.command("addshardtozone", "shard1", zone="Z2")
    assert _tags(zc, "shard1") == ["Z2"]
    # listShards shows the tags too (it lists config.shards).
    shards = {s["_id"]: s for s in a.command("listShards")["shards"]}
    assert shards["shard0"]["tags"] == ["Z1", "Z2"]


def test_add_shard_to_zone_errors(zc):
    a = zc.router_client().admin
    _fails(lambda: a.command("addShardToZone", "nosuch", zone="Z1"), 70,
           "shard nosuch does not exist")
    _fails(lambda: a.command("addShardToZone", "shard0"), 4, 'Missing expected field "zone"')
    _fails(lambda: a.command("addShardToZone", "shard0", zone=5), 14)
    # Admin database only, as on mongos.
    _fails(lambda: zc.router_client().zdb.command("addShardToZone", "shard0", zone="Z1"), 13)


def test_remove_shard_from_zone(zc):
    a = zc.router_client().admin
    a.command("addShardToZone", "shard1", zone="R")
    assert "R" in _tags(zc, "shard1")
    a.command("removeShardFromZone", "shard1", zone="R")
    assert "R" not in _tags(zc, "shard1")
    # Removing again (or a zone the shard never had) is fine.
    a.command("removeShardFromZone", "shard1", zone="R")
    a.command("removeShardFromZone", "shard1", zone="never")
    _fails(lambda: a.command("removeShardFromZone", "nosuch", zone="R"), 70,
           "shard nosuch does not exist")
    _fails(lambda: a.command("removeShardFromZone", "shard1"), 4)


def test_remove_last_shard_of_a_zone_in_use(zc):
    a = zc.router_client().admin
    a.command("addShardToZone", "shard0", zone="USED")
    a.command("updateZoneKeyRange", "zdb.unsh", min={"k": 0}, max={"k": 10}, zone="USED")
    _fails(lambda: a.command("removeShardFromZone", "shard0", zone="USED"), 163,
           "cannot remove a shard from zone if a chunk range is associated with it")
    assert "USED" in _tags(zc, "shard0")
    # With another shard in the zone, this one may leave it.
    a.command("addShardToZone", "shard1", zone="USED")
    a.command("removeShardFromZone", "shard0", zone="USED")
    _fails(lambda: a.command("removeShardFromZone", "shard1", zone="USED"), 163)
    # Once the range is gone the zone may lose its last shard.
    a.command("updateZoneKeyRange", "zdb.unsh", min={"k": 0}, max={"k": 10}, zone=None)
    a.command("removeShardFromZone", "shard1", zone="USED")
    assert "USED" not in _tags(zc, "shard1")


# ---- updateZoneKeyRange ----


def test_update_zone_key_range_stores_config_tags(zc):
    r = zc.router_client()
    a = r.admin
    a.command("shardCollection", "zdb.rng", key={"x": 1})
    a.command("addShardToZone", "shard0", zone="LOW")
    a.command("addShardToZone", "shard1", zone="HIGH")
    res = a.command("updateZoneKeyRange", "zdb.rng", min={"x": MinKey()}, max={"x": 0},
                    zone="LOW")
    assert res["ok"] == 1
    a.command("updateZoneKeyRange", "zdb.rng", min={"x": 100}, max={"x": MaxKey()}, zone="HIGH")
    docs = _ranges(zc, "zdb.rng")
    assert [(d["min"], d["max"], d["tag"]) for d in docs] == [
        ({"x": MinKey()}, {"x": 0}, "LOW"), ({"x": 100}, {"x": MaxKey()}, "HIGH")]
    for d in docs:
        assert isinstance(d["_id"], ObjectId)
        assert set(d) == {"_id", "ns", "min", "max", "tag"}
    # The same range again changes nothing.
    a.command("updateZoneKeyRange", "zdb.rng", min={"x": 100}, max={"x": MaxKey()}, zone="HIGH")
    assert _ranges(zc, "zdb.rng") == docs
    # MongoDB's indexes on config.tags.
    idx = {i["name"]: i for i in r.config.tags.list_indexes()}
    assert idx["ns_1_min_1"]["key"] == {"ns": 1, "min": 1} and idx["ns_1_min_1"]["unique"]
    assert idx["ns_1_tag_1"]["key"] == {"ns": 1, "tag": 1}
    # mongosh's sh.status() reads config.tags per collection.
    assert r.config.tags.count_documents({"ns": "zdb.rng", "tag": "HIGH"}) == 1


def test_update_zone_key_range_errors(zc):
    a = zc.router_client().admin
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.rng", min={"x": 10}, max={"x": 20},
                             zone="nozone"), 177, "zone nozone does not exist")
    # Overlapping another zone's range, partially or contained, or the same range for
    # another zone.
    err = _fails(lambda: a.command("updateZoneKeyRange", "zdb.rng", min={"x": -5}, max={"x": 5},
                                   zone="HIGH"), 178, "is overlapping with existing")
    assert "LOW" in err["errmsg"]
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.rng", min={"x": 200}, max={"x": 300},
                             zone="LOW"), 178)
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.rng", min={"x": 100},
                             max={"x": MaxKey()}, zone="LOW"), 178)
    # min must sort before max.
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.rng", min={"x": 5}, max={"x": 5},
                             zone="LOW"), 9, "should be less than max")
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.rng", min={"x": 9}, max={"x": 5},
                             zone="LOW"), 9)
    # Bounds must be a prefix of the shard key.
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.rng", min={"y": 1}, max={"y": 5},
                             zone="LOW"), 61, "is not a prefix of the shard key")
    # Missing or mistyped fields.
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.rng", max={"x": 5}, zone="LOW"), 4,
           'Missing expected field "min"')
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.rng", min={"x": 1}, max={"x": 5}), 4)
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.rng", min={"x": 1}, max={"x": 5},
                           zone=3), 14)
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.rng", min=1, max={"x": 5}, zone="LOW"),
           14)
    _fails(lambda: a.command("updateZoneKeyRange", "bad", min={"x": 1}, max={"x": 5},
                             zone="LOW"), 73)
    # Nothing was written by the failures.
    assert len(_ranges(zc, "zdb.rng")) == 2


def test_remove_range_with_null_zone(zc):
    a = zc.router_client().admin
    a.command("updateZoneKeyRange", "zdb.rng", min={"x": 20}, max={"x": 30}, zone="LOW")
    assert len(_ranges(zc, "zdb.rng")) == 3
    # Only the exact range goes; a range that matches no document is fine.
    a.command("updateZoneKeyRange", "zdb.rng", min={"x": 20}, max={"x": 29}, zone=None)
    assert len(_ranges(zc, "zdb.rng")) == 3
    a.command("updateZoneKeyRange", "zdb.rng", min={"x": 20}, max={"x": 30}, zone=None)
    assert len(_ranges(zc, "zdb.rng")) == 2
    a.command("updateZoneKeyRange", "zdb.rng", min={"x": 20}, max={"x": 30}, zone=None)


def test_compound_key_prefix_is_extended_with_minkey(zc):
    a = zc.router_client().admin
    a.command("shardCollection", "zdb.comp", key={"a": 1, "b": 1})
    a.command("updateZoneKeyRange", "zdb.comp", min={"a": 1}, max={"a": 5}, zone="LOW")
    (doc,) = _ranges(zc, "zdb.comp")
    assert doc["min"] == {"a": 1, "b": MinKey()}
    assert doc["max"] == {"a": 5, "b": MinKey()}
    # The full-key form of the same range is the same range (no overlap), and removing it by
    # its prefix works.
    a.command("updateZoneKeyRange", "zdb.comp", min={"a": 1, "b": MinKey()},
              max={"a": 5, "b": MinKey()}, zone="LOW")
    assert len(_ranges(zc, "zdb.comp")) == 1
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.comp", min={"a": 4, "b": 0},
                             max={"a": 9}, zone="HIGH"), 178)
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.comp", min={"b": 1}, max={"b": 5},
                             zone="LOW"), 61, "min: { b: 1 } is not a prefix of the shard key")
    a.command("updateZoneKeyRange", "zdb.comp", min={"a": 1}, max={"a": 5}, zone=None)
    assert _ranges(zc, "zdb.comp") == []


def test_hashed_key_ranges_take_longs(zc):
    a = zc.router_client().admin
    a.command("shardCollection", "zdb.hashed", key={"h": "hashed"})
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.hashed", min={"h": 0}, max={"h": 10},
                             zone="LOW"), 72, "not of type NumberLong, MinKey, or MaxKey")
    a.command("updateZoneKeyRange", "zdb.hashed", min={"h": MinKey()}, max={"h": Int64(0)},
              zone="LOW")
    (doc,) = _ranges(zc, "zdb.hashed")
    assert doc["max"] == {"h": 0} and isinstance(doc["max"]["h"], Int64)


def test_unsharded_namespace_takes_ranges_as_given(zc):
    a = zc.router_client().admin
    a.command("updateZoneKeyRange", "zdb.later", min={"p": 1, "q": 1}, max={"p": 9, "q": 1},
              zone="LOW")
    (doc,) = _ranges(zc, "zdb.later")
    assert doc["min"] == {"p": 1, "q": 1}
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.later", min={"p": 1}, max={"q": 9},
                             zone="LOW"), 61, "doesn't match with the shard key of max")
    _fails(lambda: a.command("updateZoneKeyRange", "zdb.later", min={"p": 5, "q": 1},
                             max={"p": 20, "q": 1}, zone="HIGH"), 178)
    # Dropping the collection's metadata later removes its ranges (MongoDB keeps ranges of
    # an unsharded namespace until it is sharded or dropped); here: remove explicitly.
    a.command("updateZoneKeyRange", "zdb.later", min={"p": 1, "q": 1}, max={"p": 9, "q": 1},
              zone=None)
    assert _ranges(zc, "zdb.later") == []


def test_refine_shard_key_extends_zone_ranges(zc):
    """refineCollectionShardKey extends config.tags bounds as it extends the chunks': MinKey
    for the new fields, MaxKey for a range that ends at the global max."""
    r = zc.router_client()
    a = r.admin
    a.command("shardCollection", "zdb.refz", key={"a": 1})
    a.command("updateZoneKeyRange", "zdb.refz", min={"a": 0}, max={"a": 10}, zone="LOW")
    a.command("updateZoneKeyRange", "zdb.refz", min={"a": 10}, max={"a": MaxKey()},
              zone="HIGH")
    before = {d["tag"]: d["_id"] for d in _ranges(zc, "zdb.refz")}
    r.zdb.refz.create_index([("a", 1), ("b", 1)])
    a.command("refineCollectionShardKey", "zdb.refz", key={"a": 1, "b": 1})
    docs = _ranges(zc, "zdb.refz")
    assert [(d["min"], d["max"], d["tag"]) for d in docs] == [
        ({"a": 0, "b": MinKey()}, {"a": 10, "b": MinKey()}, "LOW"),
        ({"a": 10, "b": MinKey()}, {"a": MaxKey(), "b": MaxKey()}, "HIGH")]
    assert {d["tag"]: d["_id"] for d in docs} == before
    # The refined ranges are the ranges: the same range again is no overlap.
    a.command("updateZoneKeyRange", "zdb.refz", min={"a": 0}, max={"a": 10}, zone="LOW")
    assert len(_ranges(zc, "zdb.refz")) == 2


def test_drop_removes_zone_ranges(zc):
    r = zc.router_client()
    r.admin.command("shardCollection", "zdb.dropme", key={"x": 1})
    r.admin.command("updateZoneKeyRange", "zdb.dropme", min={"x": 0}, max={"x": 5}, zone="LOW")
    assert len(_ranges(zc, "zdb.dropme")) == 1
    r.zdb.dropme.drop()
    assert _ranges(zc, "zdb.dropme") == []


# ---- balancerCollectionStatus ----


def _status(c, ns):
    return c.router_client().admin.command("balancerCollectionStatus", ns)


def test_balancer_collection_status_compliant_and_errors(zc):
    r = zc.router_client()
    r.admin.command("shardCollection", "zdb.bal", key={"x": 1})
    r.zdb.bal.insert_many([{"x": i} for i in range(100)])
    res = _status(zc, "zdb.bal")
    assert res["ok"] == 1 and res["balancerCompliant"] is True
    assert "firstComplianceViolation" not in res
    assert res["chunkSize"] == 128
    _fails(lambda: _status(zc, "zdb.notsharded"), 118, "Collection unsharded or undefined")
    r.zdb.plain.insert_one({"a": 1})
    _fails(lambda: _status(zc, "zdb.plain"), 118)
    _fails(lambda: _status(zc, "nodots"), 73)
    _fails(lambda: r.zdb.command("balancerCollectionStatus", "zdb.bal"), 13)


def test_balancer_collection_status_zone_violation(zc):
    r = zc.router_client()
    a = r.admin
    a.command("shardCollection", "zdb.zv", key={"x": 1})
    r.zdb.zv.insert_many([{"x": i} for i in range(100)])
    a.command("split", "zdb.zv", middle={"x": 50})
    a.command("addShardToZone", "shard1", zone="ZV")
    # A zone boundary inside a chunk: the balancer would split it first.
    a.command("updateZoneKeyRange", "zdb.zv", min={"x": 50}, max={"x": 75}, zone="ZV")
    res = _status(zc, "zdb.zv")
    assert res["balancerCompliant"] is False
    assert res["firstComplianceViolation"] == "zoneViolation"
    a.command("updateZoneKeyRange", "zdb.zv", min={"x": 50}, max={"x": 75}, zone=None)
    # The zone covers the chunk [50, max) exactly, but the chunk is on shard0, not in ZV.
    a.command("updateZoneKeyRange", "zdb.zv", min={"x": 50}, max={"x": MaxKey()}, zone="ZV")
    res = _status(zc, "zdb.zv")
    assert (res["balancerCompliant"], res["firstComplianceViolation"]) == (False, "zoneViolation")
    # Moving it into its zone makes the collection compliant.
    a.command("moveChunk", "zdb.zv", find={"x": 60}, to="shard1", _waitForDelete=True)
    res = _status(zc, "zdb.zv")
    assert res["balancerCompliant"] is True, res
    # And moving it out again violates the zone once more.
    a.command("removeShardFromZone", "shard0", zone="ZV")
    a.command("moveChunk", "zdb.zv", find={"x": 60}, to="shard0", _waitForDelete=True)
    assert _status(zc, "zdb.zv")["firstComplianceViolation"] == "zoneViolation"
    a.command("moveChunk", "zdb.zv", find={"x": 60}, to="shard1", _waitForDelete=True)
    assert _status(zc, "zdb.zv")["balancerCompliant"] is True


def test_balancer_collection_status_chunks_imbalance(zc):
    r = zc.router_client()
    a = r.admin
    a.command("shardCollection", "zdb.imb", key={"x": 1})
    # ~4 MB on shard0, nothing on shard1: balanced for 128 MB chunks, not for 1 MB ones
    # (the threshold is three chunk sizes).
    pad = "p" * 4000
    r.zdb.imb.insert_many([{"x": i, "pad": pad} for i in range(1000)])
    assert _status(zc, "zdb.imb")["balancerCompliant"] is True
    r.config.settings.update_one({"_id": "chunksize"}, {"$set": {"value": 1}}, upsert=True)
    try:
        res = _status(zc, "zdb.imb")
        assert res["chunkSize"] == 1
        assert (res["balancerCompliant"], res.get("firstComplianceViolation")) == \
            (False, "chunksImbalance")
        # Half of it on each shard: within the threshold again. (2 MB is more than a 1 MB
        # chunk may hold to move: forceJumbo, as MongoDB's donor requires.)
        a.command("split", "zdb.imb", middle={"x": 500})
        a.command("moveChunk", "zdb.imb", find={"x": 700}, to="shard1", _waitForDelete=True,
                  forceJumbo=True)
        res = _status(zc, "zdb.imb")
        assert res["balancerCompliant"] is True, res
    finally:
        r.config.settings.delete_one({"_id": "chunksize"})


def test_balancer_collection_status_draining(zc):
    """A draining shard that still owns chunks. removeShard cannot be undone in 7.0, so the
    flag is set on the config server's document directly and cleared afterwards."""
    r = zc.router_client()
    r.admin.command("shardCollection", "zdb.dr", key={"x": 1})
    r.zdb.dr.insert_many([{"x": i} for i in range(10)])
    shards = zc.config_client().config.shards
    shards.update_one({"_id": "shard0"}, {"$set": {"draining": True}})
    try:
        res = _status(zc, "zdb.dr")
        assert (res["balancerCompliant"], res["firstComplianceViolation"]) == (False, "draining")
    finally:
        shards.update_one({"_id": "shard0"}, {"$unset": {"draining": 1}})
    assert _status(zc, "zdb.dr")["balancerCompliant"] is True


# ---- profile ----


def test_profile_on_the_router(zc):
    db = zc.router_client().zdb
    res = db.command("profile", -1)
    assert res["ok"] == 1 and res["was"] == 0
    assert res["slowms"] == 100 and res["sampleRate"] == 1.0
    res = db.command("profile", 0, slowms=250, sampleRate=0.5)
    assert (res["was"], res["slowms"], res["sampleRate"]) == (0, 100, 1.0)
    res = db.command("profile", -1)
    assert (res["was"], res["slowms"], res["sampleRate"]) == (0, 250, 0.5)
    res = db.command("profile", 0, filter={"millis": {"$gt": 5}})
    assert "note" in res and "filter" not in res
    # The filter is the database's (slowms and sampleRate are the process's).
    other = zc.router_client().otherdb.command("profile", -1)
    assert "filter" not in other and "note" not in other
    assert db.command("profile", -1)["filter"] == {"millis": {"$gt": 5}}
    res = db.command("profile", 0, filter="unset", slowms=100, sampleRate=1.0)
    assert res["filter"] == {"millis": {"$gt": 5}} and "note" in res
    res = db.command("profile", -1)
    assert "filter" not in res and res["slowms"] == 100
    for level in (1, 2, 5):
        _fails(lambda: db.command("profile", level), 2,
               "Profiling is not permitted on mongoS")
    _fails(lambda: db.command("profile", 0, sampleRate=2.0), 2,
           "'sampleRate' must be between 0.0 and 1.0 inclusive")
    _fails(lambda: db.command("profile", "x"), 14)


def test_profile_on_a_data_node(zc):
    db = zc.shard_client(0).zdb
    res = db.command("profile", -1)
    assert (res["was"], res["slowms"], res["sampleRate"]) == (0, 100, 1.0)
    db.command("profile", 0, slowms=30)
    assert db.command("profile", -1)["slowms"] == 30
    db.command("profile", 0, slowms=100)
    for level in (1, 2):
        _fails(lambda: db.command("profile", level), 2, "no system.profile collection")
    _fails(lambda: db.command("profile", 3), 2)
