"""Stages reading another collection through the router ($lookup, $unionWith, $graphLookup,
also nested in sub-pipelines and $facet) when that collection is sharded: the router runs
them in its merger and reads the foreign collection with its own versioned, targeted find
(src/router/cluster_aggregate.c). Every pipeline is compared with the same pipeline over
unsharded copies of the collections in another database (which a shard runs whole).

A 2-shard ShaleCluster: fx.loc sharded on {k: 1}, fx.fr sharded on {fk: 1} (each split and
with chunks moved so both shards hold data), fx.tree sharded on {_id: "hashed"}; fx.uloc
and fx.ufr unsharded; fxref.* the reference copies."""

import pytest
from bson import ObjectId, Timestamp
from bson.binary import STANDARD
from bson.codec_options import CodecOptions
from pymongo.errors import OperationFailure

from shale_fixtures import fail_point, wait_until

LOC = [{"_id": i, "k": i, "fk": i % 13, "tag": "t%d" % (i % 4),
        "fks": [i % 13, (i + 5) % 13] if i % 3 == 0 else i % 13}
       for i in range(60)]
FR = [{"_id": 1000 + j, "fk": j % 13, "w": j, "tag": "t%d" % (j % 4)} for j in range(80)]
# A forest for $graphLookup: node i reports to i // 3 (0 is the root), so depth grows as log3.
TREE = [{"_id": i, "parent": (i - 1) // 3 if i > 0 else None, "name": "n%d" % i}
        for i in range(120)]


def _shard(r, ns, key, middles, moves):
    r.admin.command("shardCollection", ns, key=key)
    for m in middles:
        r.admin.command("split", ns, middle=m)
    for find in moves:
        r.admin.command("moveChunk", ns, find=find, to="shard1")


@pytest.fixture(scope="module")
def fx(cluster):
    r = cluster.router_client()
    r.admin.command("enableSharding", "fx", primaryShard="shard0")
    r.admin.command("enableSharding", "fxref", primaryShard="shard0")
    _shard(r, "fx.loc", {"k": 1}, [{"k": 30}], [{"k": 40}])
    _shard(r, "fx.fr", {"fk": 1}, [{"fk": 4}, {"fk": 9}], [{"fk": 5}])
    _shard(r, "fx.tree", {"_id": "hashed"}, [], [])  # presplit over both shards
    for db in (r.fx, r.fxref):
        db.loc.insert_many(LOC)
        db.fr.insert_many(FR)
        db.tree.insert_many(TREE)
    r.fx.uloc.insert_many(LOC)
    r.fx.ufr.insert_many(FR)
    # The data really is on both shards.
    for name in ("loc", "fr", "tree"):
        for i in range(2):
            assert cluster.shard_client(i).fx[name].count_documents({}) > 0, (name, i)
    return cluster


def _canon(v):
    """A comparable form, arrays of documents sorted (order-insensitive lookups)."""
    if isinstance(v, dict):
        return tuple(sorted((k, _canon(x)) for k, x in v.items()))
    if isinstance(v, list):
        items = [_canon(x) for x in v]
        return ("list", tuple(sorted(items, key=repr)))
    return v


def _same(got, want, ordered=False):
    if ordered:
        assert [_canon(d) for d in got] == [_canon(d) for d in want]
    else:
        assert sorted((_canon(d) for d in got), key=repr) == \
            sorted((_canon(d) for d in want), key=repr)


def _run(r, coll, pipeline, ref_coll=None, ref_pipeline=None, **kw):
    got = list(r.fx[coll].aggregate(pipeline, **kw))
    want = list(r.fxref[ref_coll or coll].aggregate(ref_pipeline or pipeline, **kw))
    return got, want


LOOKUP_EQ = {"$lookup": {"from": "fr", "localField": "fk", "foreignField": "fk", "as": "m"}}
LOOKUP_ARR = {"$lookup": {"from": "fr", "localField": "fks", "foreignField": "fk", "as": "m"}}
LOOKUP_LET = {"$lookup": {"from": "fr", "let": {"f": "$fk", "t": "$tag"}, "pipeline": [
    {"$match": {"$expr": {"$and": [{"$eq": ["$fk", "$$f"]}, {"$eq": ["$tag", "$$t"]}]}}},
    {"$project": {"_id": 0, "w": 1}}], "as": "m"}}
LOOKUP_CONCISE = {"$lookup": {"from": "fr", "localField": "fk", "foreignField": "fk",
                              "let": {"t": "$tag"},
                              "pipeline": [{"$match": {"$expr": {"$eq": ["$tag", "$$t"]}}},
                                           {"$project": {"w": 1}}], "as": "m"}}
GRAPH = {"$graphLookup": {"from": "tree", "startWith": "$parent", "connectFromField": "parent",
                          "connectToField": "_id", "as": "chain", "depthField": "d"}}


@pytest.mark.parametrize("coll", ["loc", "uloc"])
@pytest.mark.parametrize("stage", [LOOKUP_EQ, LOOKUP_ARR, LOOKUP_LET, LOOKUP_CONCISE],
                         ids=["eq", "array", "let", "concise"])
def test_lookup_of_a_sharded_collection(fx, coll, stage):
    r = fx.router_client()
    got, want = _run(r, coll, [{"$match": {"k": {"$lt": 50}}}, stage],
                     ref_coll="loc")
    assert len(got) == 50 and any(d["m"] for d in got)
    _same(got, want)


def test_lookup_then_sort_and_group_in_the_merger(fx):
    r = fx.router_client()
    pipeline = [LOOKUP_EQ, {"$project": {"k": 1, "n": {"$size": "$m"}}},
                {"$group": {"_id": "$n", "ks": {"$sum": "$k"}}}, {"$sort": {"_id": 1}}]
    got, want = _run(r, "loc", pipeline)
    _same(got, want, ordered=True)
    pipeline = [{"$sort": {"k": -1}}, {"$limit": 7}, LOOKUP_LET]
    got, want = _run(r, "loc", pipeline)
    _same(got, want, ordered=True)


def test_lookup_targeted_to_one_shard_of_the_local_collection(fx):
    # k < 10 is on one shard of fx.loc: the router would send the whole pipeline there,
    # but the foreign collection is sharded, so the $lookup runs in the merger.
    r = fx.router_client()
    got, want = _run(r, "loc", [{"$match": {"k": {"$lt": 10}}}, LOOKUP_EQ])
    assert sum(len(d["m"]) for d in got) > 0
    _same(got, want)


def test_lookup_of_an_unsharded_collection_from_a_sharded_one(fx):
    r = fx.router_client()
    pipeline = [{"$lookup": {"from": "ufr", "localField": "fk", "foreignField": "fk",
                             "as": "m"}}]
    ref = [{"$lookup": {"from": "fr", "localField": "fk", "foreignField": "fk", "as": "m"}}]
    got, want = _run(r, "loc", pipeline, ref_pipeline=ref)
    assert len(got) == 60
    _same(got, want)
    # targeted to the shard that is not the primary: the primary's copy must still be read
    pipeline = [{"$match": {"k": {"$gte": 45}}}] + pipeline
    ref = [{"$match": {"k": {"$gte": 45}}}] + ref
    got, want = _run(r, "loc", pipeline, ref_pipeline=ref)
    assert len(got) == 15 and all(d["m"] for d in got)
    _same(got, want)


@pytest.mark.parametrize("coll", ["loc", "uloc"])
def test_union_with_a_sharded_collection(fx, coll):
    r = fx.router_client()
    got, want = _run(r, coll, [{"$unionWith": "fr"}], ref_coll="loc")
    assert len(got) == len(LOC) + len(FR)
    _same(got, want)
    pipeline = [{"$match": {"k": {"$lt": 5}}},
                {"$unionWith": {"coll": "fr", "pipeline": [{"$match": {"fk": {"$in": [2, 7]}}},
                                                          {"$set": {"from_fr": True}}]}},
                {"$sort": {"_id": 1}}]
    got, want = _run(r, coll, pipeline, ref_coll="loc")
    assert len(got) == 5 + sum(1 for d in FR if d["fk"] in (2, 7))
    _same(got, want, ordered=True)


def test_union_with_then_group(fx):
    r = fx.router_client()
    pipeline = [{"$unionWith": {"coll": "fr", "pipeline": [{"$project": {"tag": 1}}]}},
                {"$group": {"_id": "$tag", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]
    got, want = _run(r, "loc", pipeline)
    _same(got, want, ordered=True)


@pytest.mark.parametrize("coll", ["loc", "uloc"])
def test_graph_lookup_over_a_sharded_collection(fx, coll):
    r = fx.router_client()
    pipeline = [{"$match": {"k": {"$lt": 40}}}, {"$project": {"k": 1, "parent": "$k"}}, GRAPH]
    got, want = _run(r, coll, pipeline, ref_coll="loc")
    assert len(got) == 40
    chain = {d["_id"]: sorted(x["_id"] for x in d["chain"]) for d in got}
    assert chain[13] == [0, 1, 4, 13]
    _same(got, want)
    limited = dict(GRAPH["$graphLookup"], maxDepth=1,
                   restrictSearchWithMatch={"name": {"$ne": "n0"}})
    pipeline = pipeline[:2] + [{"$graphLookup": limited}]
    got, want = _run(r, coll, pipeline, ref_coll="loc")
    _same(got, want)


def test_graph_lookup_from_the_sharded_collection_itself(fx):
    r = fx.router_client()
    pipeline = [{"$match": {"_id": {"$in": [5, 77, 119]}}}, GRAPH, {"$sort": {"_id": 1}}]
    got, want = _run(r, "tree", pipeline)
    assert [len(d["chain"]) for d in got] == [2, 4, 4]
    _same(got, want, ordered=True)


def test_stages_nested_in_sub_pipelines_and_facet(fx):
    r = fx.router_client()
    nested = {"$lookup": {"from": "uloc", "let": {"f": "$fk"}, "pipeline": [
        {"$match": {"$expr": {"$eq": ["$fk", "$$f"]}}}, {"$limit": 2}, LOOKUP_EQ,
        {"$project": {"k": 1, "n": {"$size": "$m"}}}], "as": "outer"}}
    ref_nested = {"$lookup": dict(nested["$lookup"], **{"from": "loc"})}
    got, want = _run(r, "loc", [{"$match": {"k": {"$lt": 20}}}, nested],
                     ref_pipeline=[{"$match": {"k": {"$lt": 20}}}, ref_nested])
    assert all(o["n"] > 0 for d in got for o in d["outer"])
    _same(got, want)
    facet = {"$facet": {
        "looked": [{"$match": {"k": {"$lt": 6}}}, LOOKUP_EQ, {"$sort": {"k": 1}}],
        "unioned": [{"$unionWith": "fr"}, {"$count": "n"}],
        "graph": [{"$match": {"k": 13}}, {"$project": {"parent": "$k"}}, GRAPH]}}
    got, want = _run(r, "uloc", [facet], ref_coll="loc")
    assert got[0]["unioned"] == [{"n": len(LOC) + len(FR)}]
    _same(got, want)


def test_explain_shows_the_stage_in_the_merger(fx):
    r = fx.router_client()
    out = r.fx.command("aggregate", "loc", pipeline=[{"$match": {"k": {"$lt": 10}}}, LOOKUP_EQ],
                       explain=True)
    assert out["mergeType"] == "mongos"
    assert list(out["splitPipeline"]["mergerPart"][0]) == ["$lookup"]
    out = r.fx.command("aggregate", "uloc", pipeline=[{"$unionWith": "fr"}], explain=True)
    assert out["splitPipeline"]["mergerPart"] == [{"$unionWith": "fr"}]


def _open_cursors(cluster):
    return [cluster.shard_client(i).admin.command("serverStatus")["metrics"]["cursor"]["open"]
            ["total"] for i in range(2)]


def test_getmore_and_a_killed_cursor_leave_no_foreign_cursor_behind(fx):
    r = fx.router_client()
    before = _open_cursors(fx)
    pipeline = [{"$unionWith": {"coll": "fr", "pipeline": [{"$sort": {"w": 1}}]}},
                {"$unionWith": "fr"}]
    big = list(r.fx.loc.aggregate(pipeline, batchSize=7))
    assert len(big) == len(LOC) + 2 * len(FR)
    cur = r.fx.loc.aggregate(pipeline, batchSize=1)
    for _ in range(len(LOC) + 3):  # into the foreign collection's cursors
        next(cur)
    cur.close()
    wait_until(lambda: _open_cursors(fx) == before, timeout=10,
               what="the shards' cursors to be closed")


def _error_code(db, coll, pipeline):
    with pytest.raises(OperationFailure) as e:
        list(db[coll].aggregate(pipeline))
    return e.value.code


def test_foreign_read_error_surfaces_with_its_code(fx):
    r = fx.router_client()
    for pipeline in (
            [{"$unionWith": {"coll": "fr", "pipeline": [
                {"$project": {"x": {"$divide": ["$w", 0]}}}]}}],
            [{"$lookup": {"from": "fr", "let": {"f": "$fk"}, "pipeline": [
                {"$match": {"$expr": {"$eq": ["$fk", "$$f"]}}},
                {"$project": {"x": {"$toInt": "$tag"}}}], "as": "m"}}]):
        code = _error_code(r.fx, "loc", pipeline)
        assert code not in (0, 238) and code == _error_code(r.fxref, "loc", pipeline)


def test_a_shard_error_on_the_foreign_read_surfaces_with_its_code(fx):
    r = fx.router_client()
    shard = fx.shard_client(1)
    fail_point(shard, "failCommand", "alwaysOn", {
        "failCommands": ["find"], "errorCode": 96, "failInternalCommands": True})
    try:
        for pipeline in ([LOOKUP_EQ], [{"$unionWith": "fr"}], [GRAPH]):
            with pytest.raises(OperationFailure) as e:
                list(r.fx.loc.aggregate([{"$project": {"k": 1, "fk": 1, "parent": "$k"}}] +
                                        pipeline))
            assert e.value.code == 96, pipeline
    finally:
        fail_point(shard, "failCommand", "off")
    assert len(list(r.fx.loc.aggregate([{"$unionWith": "fr"}]))) == len(LOC) + len(FR)


def test_a_stale_router_after_a_foreign_chunk_moved(fx):
    r1 = fx.router_client()
    r2 = fx.add_router().client()
    pipeline = [LOOKUP_EQ, {"$unionWith": "fr"}]
    got, want = _run(r2, "loc", pipeline)  # r2 caches fx.fr's routing now
    _same(got, want)
    # Move chunks of the foreign collection through r1: r2's routing of fx.fr is stale.
    # (Never back to a shard whose orphans of that range await deletion: that would wait.)
    r1.admin.command("moveChunk", "fx.fr", find={"fk": 10}, to="shard1")
    r1.admin.command("split", "fx.fr", middle={"fk": 2})
    r1.admin.command("moveChunk", "fx.fr", find={"fk": 3}, to="shard1")
    # The donor keeps the moved documents as orphans for now (orphanCleanupDelaySecs): the
    # foreign reads must filter them out, not count them twice.
    moved = sum(1 for d in FR if d["fk"] >= 9)
    assert fx.shard_client(1).fx.fr.count_documents({"fk": {"$gte": 9}}) == moved
    assert fx.shard_client(0).fx.fr.count_documents({"fk": {"$gte": 9}}) == moved
    got = list(r2.fx.loc.aggregate(pipeline))
    _same(got, want)
    got = list(r2.fx.uloc.aggregate([{"$match": {"k": 10}}, LOOKUP_EQ]))
    assert sorted(x["_id"] for x in got[0]["m"]) == [d["_id"] for d in FR if d["fk"] == 10]


# ---------------------------------------------------------------- a router that missed a
# shardCollection of the foreign collection
#
# Router B caches a database and its collections as unsharded; router A then shards the
# foreign collection and moves a chunk of it to the other shard. B still believes it is
# unsharded and sends the whole pipeline to the primary shard, which would read only its
# own part. The shard checks the version B assumed for the foreign collection (UNSHARDED,
# in $_involvedNamespaceVersions) and answers StaleConfig naming it, so B refreshes that
# collection and runs the stage in its merger.

STALE_LOC = [{"_id": i, "k": i, "fk": i % 10} for i in range(30)]
STALE_FR = [{"_id": 100 + j, "fk": j % 10, "w": j} for j in range(40)]
STALE_STAGES = {
    "lookup": [{"$lookup": {"from": "fr", "localField": "fk", "foreignField": "fk",
                            "as": "m"}}],
    "lookup_pipeline": [{"$lookup": {"from": "fr", "let": {"f": "$fk"}, "pipeline": [
        {"$match": {"$expr": {"$eq": ["$fk", "$$f"]}}}], "as": "m"}}],
    "union": [{"$unionWith": "fr"}],
    "union_in_facet": [{"$facet": {"all": [{"$unionWith": {"coll": "fr", "pipeline": [
        {"$match": {"w": {"$gte": 0}}}]}}]}}],
    "graph": [{"$graphLookup": {"from": "fr", "startWith": "$fk", "connectFromField": "fk",
                                "connectToField": "fk", "as": "m", "maxDepth": 0}}],
}


@pytest.fixture(scope="module")
def routers(fx):
    """Routers A (the fixture's) and B (another one, started once for these tests)."""
    return fx.router_client(), fx.add_router().client()


def _expected(stage, loc, fr):
    """What the pipeline returns over complete collections, computed here."""
    by_fk = {}
    for d in fr:
        by_fk.setdefault(d["fk"], []).append(d)
    if stage in ("lookup", "lookup_pipeline", "graph"):
        return [dict(d, m=by_fk.get(d["fk"], [])) for d in loc]
    if stage == "union":
        return loc + fr
    return [{"all": loc + fr}]


def _set_up_stale_b(a, b, db, stage):
    """Database 'db' (primary shard0) with unsharded loc and fr, cached so by B; then A
    shards fr on {fk: 1} with fk >= 5 on shard1 and inserts more documents on both."""
    a.admin.command("enableSharding", db, primaryShard="shard0")
    a[db].loc.insert_many(STALE_LOC)
    a[db].fr.insert_many(STALE_FR[:20])
    pipeline = STALE_STAGES[stage]
    _same(list(b[db].loc.aggregate(pipeline)), _expected(stage, STALE_LOC, STALE_FR[:20]))
    a[db].fr.create_index([("fk", 1)])
    a.admin.command("shardCollection", db + ".fr", key={"fk": 1})
    a.admin.command("split", db + ".fr", middle={"fk": 5})
    a.admin.command("moveChunk", db + ".fr", find={"fk": 5}, to="shard1")
    a[db].fr.insert_many(STALE_FR[20:])
    return pipeline


@pytest.mark.parametrize("stage", sorted(STALE_STAGES))
def test_a_router_that_missed_the_foreign_collection_being_sharded(fx, routers, stage):
    a, b = routers
    db = "stalefr_" + stage
    pipeline = _set_up_stale_b(a, b, db, stage)
    # Both shards hold part of the foreign collection now.
    on1 = fx.shard_client(1)[db].fr.count_documents({})
    assert on1 == sum(1 for d in STALE_FR if d["fk"] >= 5)
    assert fx.shard_client(0)[db].fr.count_documents({"fk": {"$lt": 5}}) == \
        sum(1 for d in STALE_FR if d["fk"] < 5)
    got = list(b[db].loc.aggregate(pipeline))
    _same(got, _expected(stage, STALE_LOC, STALE_FR))
    # B's routing of the foreign collection is fresh now: it runs the stage in its merger.
    explain = b[db].command("aggregate", "loc", pipeline=pipeline, explain=True)
    assert explain.get("mergeType") == "mongos", explain


def test_a_foreign_collection_sharded_while_a_cursor_is_open(fx, routers):
    # The shard runs the $lookup batch by batch; when the foreign collection gets sharded
    # and split across the shards between two getMores, the next getMore fails with
    # StaleConfig rather than return lookups over the primary's part only.
    a, b = routers
    db = "stalefr_getmore"
    a.admin.command("enableSharding", db, primaryShard="shard0")
    loc = [{"_id": i, "k": i, "fk": i % 10} for i in range(400)]
    a[db].loc.insert_many(loc)
    a[db].fr.insert_many(STALE_FR[:20])
    cursor = b[db].loc.aggregate(STALE_STAGES["lookup"], batchSize=5)
    first = [next(cursor) for _ in range(5)]
    assert all(d["m"] for d in first)
    a[db].fr.create_index([("fk", 1)])
    a.admin.command("shardCollection", db + ".fr", key={"fk": 1})
    a.admin.command("split", db + ".fr", middle={"fk": 5})
    a.admin.command("moveChunk", db + ".fr", find={"fk": 5}, to="shard1")
    with pytest.raises(OperationFailure) as e:
        list(cursor)
    assert e.value.code == 13388, e.value.details
    # A new aggregate through B is complete.
    _same(list(b[db].loc.aggregate(STALE_STAGES["lookup"])),
          _expected("lookup", loc, STALE_FR[:20]))


def test_a_stale_router_whose_pipeline_targets_the_primary_of_a_sharded_collection(fx, routers):
    # The aggregate's own collection is sharded too, and the pipeline reaches only the
    # primary shard's chunk: B sent the whole pipeline there (fr looked unsharded).
    a, b = routers
    db = "stalefr_sharded_local"
    a.admin.command("enableSharding", db, primaryShard="shard0")
    a.admin.command("shardCollection", db + ".loc", key={"k": 1})
    a.admin.command("split", db + ".loc", middle={"k": 20})
    a.admin.command("moveChunk", db + ".loc", find={"k": 25}, to="shard1")
    a[db].loc.insert_many(STALE_LOC)
    a[db].fr.insert_many(STALE_FR[:20])
    pipeline = [{"$match": {"k": {"$lt": 10}}}] + STALE_STAGES["lookup"]
    want_loc = [d for d in STALE_LOC if d["k"] < 10]
    _same(list(b[db].loc.aggregate(pipeline)), _expected("lookup", want_loc, STALE_FR[:20]))
    a[db].fr.create_index([("fk", 1)])
    a.admin.command("shardCollection", db + ".fr", key={"fk": 1})
    a.admin.command("split", db + ".fr", middle={"fk": 5})
    a.admin.command("moveChunk", db + ".fr", find={"fk": 5}, to="shard1")
    a[db].fr.insert_many(STALE_FR[20:])
    _same(list(b[db].loc.aggregate(pipeline)), _expected("lookup", want_loc, STALE_FR))


def test_a_stale_router_after_the_foreign_collection_was_recreated_unsharded(fx, routers):
    # The reverse: B caches fr as sharded; A drops it and re-creates it unsharded. B's
    # merger reads it with versioned finds, whose StaleConfig refreshes B.
    a, b = routers
    db = "stalefr_recreated"
    a.admin.command("enableSharding", db, primaryShard="shard0")
    a[db].loc.insert_many(STALE_LOC)
    a.admin.command("shardCollection", db + ".fr", key={"fk": 1})
    a.admin.command("split", db + ".fr", middle={"fk": 5})
    a.admin.command("moveChunk", db + ".fr", find={"fk": 5}, to="shard1")
    a[db].fr.insert_many(STALE_FR)
    for stage in ("lookup", "union"):
        _same(list(b[db].loc.aggregate(STALE_STAGES[stage])),
              _expected(stage, STALE_LOC, STALE_FR))
    a[db].fr.drop()
    a[db].fr.insert_many(STALE_FR[:15])
    assert fx.shard_client(1)[db].fr.count_documents({}) == 0
    for stage in ("lookup", "union"):
        _same(list(b[db].loc.aggregate(STALE_STAGES[stage])),
              _expected(stage, STALE_LOC, STALE_FR[:15]))


UNSHARDED = {"e": ObjectId("000000000000000000000000"), "t": Timestamp(0, 0),
             "v": Timestamp(0, 0)}
STD = CodecOptions(uuid_representation=STANDARD)  # databaseVersion.uuid is binData 4


def _involved_error(shard_db, coll, pipeline, involved, **versions):
    with pytest.raises(OperationFailure) as e:
        shard_db.command("aggregate", coll, pipeline=pipeline, cursor={}, codec_options=STD,
                         **{"$_involvedNamespaceVersions": involved}, **versions)
    return e.value


def test_the_shard_checks_the_involved_namespaces(fx):
    """The shard side of $_involvedNamespaceVersions, sent directly to the primary shard of
    fx: each entry is checked like the request's own versions, and the error names it."""
    s0 = fx.shard_client(0, uuidRepresentation="standard").fx
    dbv = fx.config_client(uuidRepresentation="standard").config.databases.find_one({"_id": "fx"})["version"]
    own = {"shardVersion": UNSHARDED, "databaseVersion": dbv}
    pipeline = [{"$match": {"k": 1}}, {"$lookup": {"from": "ufr", "localField": "fk",
                                                   "foreignField": "fk", "as": "m"}}]
    ok = [{"ns": "fx.ufr", "shardVersion": UNSHARDED, "databaseVersion": dbv}]
    r = s0.command("aggregate", "uloc", pipeline=pipeline, cursor={}, codec_options=STD,
                   **{"$_involvedNamespaceVersions": ok}, **own)
    assert len(r["cursor"]["firstBatch"]) == 1
    # fx.fr is sharded: StaleConfig for fx.fr, not for the aggregate's own fx.uloc.
    err = _involved_error(s0, "uloc", pipeline, ok + [
        {"ns": "fx.fr", "shardVersion": UNSHARDED, "databaseVersion": dbv}], **own)
    assert err.code == 13388, err.details
    assert err.details["ns"] == "fx.fr" and err.details["shardId"] == "shard0"
    assert err.details["vReceived"] == UNSHARDED
    assert err.details["vWanted"]["e"] != UNSHARDED["e"]
    # A database version other than the config server's: StaleDbVersion.
    other = dict(dbv, lastMod=dbv["lastMod"] + 1)
    err = _involved_error(s0, "uloc", pipeline, [
        {"ns": "fx.ufr", "shardVersion": UNSHARDED, "databaseVersion": other}], **own)
    assert err.code == 249 and err.details["db"] == "fx", err.details
    # shard1 is not the primary of fx: its copy of fx.ufr is not the collection.
    err = _involved_error(fx.shard_client(1, uuidRepresentation="standard").fx, "loc", [], ok)
    assert err.code == 249, err.details
    # Malformed.
    assert _involved_error(s0, "uloc", [], "x").code == 14
    assert _involved_error(s0, "uloc", [], [{"ns": "fx.ufr"}]).code == 9
