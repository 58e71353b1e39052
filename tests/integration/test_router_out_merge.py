"""$out and $merge through the router when the end of the pipeline runs there (a sharded
source split into a shards part and a merger, or $documents): the router writes the merged
documents through its own write path (src/router/cluster_agg_output.c). $out fills a
temporary collection on the target database's primary shard and renames it over the target;
$merge sends updates/upserts/inserts routed by the target's shard key.

A 2-shard ShaleCluster: om.src sharded on {k: 1} with chunks on both shards; omref.src an
unsharded copy (a data node then runs the whole pipeline, its $out/$merge included), used as
the reference. om2's primary is shard1, om's and omref's shard0."""

import pytest
from pymongo.errors import OperationFailure
from pymongo.write_concern import WriteConcern

from shale_fixtures import error_code

SRC = [{"_id": i, "k": i, "g": i % 5, "v": i * 3, "name": "n%d" % (i % 7)} for i in range(60)]

GROUP = [{"$group": {"_id": "$g", "total": {"$sum": "$v"}, "avg": {"$avg": "$v"},
                     "n": {"$sum": 1}, "lo": {"$min": "$k"}}}]

# The target before each $merge: two documents whose _id the pipeline produces (0 and 1),
# one it does not (99).
TARGET = [{"_id": 0, "total": -1, "old": True}, {"_id": 1, "total": -2, "old": True},
          {"_id": 99, "old": True}]


@pytest.fixture(scope="module")
def om(cluster):
    r = cluster.router_client()
    r.admin.command("enableSharding", "om", primaryShard="shard0")
    r.admin.command("enableSharding", "omref", primaryShard="shard0")
    r.admin.command("enableSharding", "om2", primaryShard="shard1")
    r.admin.command("shardCollection", "om.src", key={"k": 1})
    r.admin.command("split", "om.src", middle={"k": 30})
    r.admin.command("moveChunk", "om.src", find={"k": 40}, to="shard1")
    r.om.src.insert_many(SRC)
    r.omref.src.insert_many(SRC)
    r.om.usrc.insert_many(SRC)  # unsharded, on shard0
    for i in range(2):
        assert cluster.shard_client(i).om.src.count_documents({}) > 0
    # A sharded $merge target: by _id, chunks on both shards.
    r.admin.command("shardCollection", "om.ms", key={"_id": 1})
    r.admin.command("split", "om.ms", middle={"_id": 2})
    r.admin.command("moveChunk", "om.ms", find={"_id": 3}, to="shard1")
    # A sharded target whose key is not _id.
    r.admin.command("shardCollection", "om.mk", key={"grp": 1})
    r.admin.command("split", "om.mk", middle={"grp": 2})
    r.admin.command("moveChunk", "om.mk", find={"grp": 3}, to="shard1")
    return cluster


def _sorted(docs):
    return sorted(docs, key=lambda d: repr(d["_id"]))


def _tmp_colls(db):
    return [n for n in db.list_collection_names() if n.startswith("tmp.agg_out")]


# ---------------------------------------------------------------- $out


def test_group_out_equals_reference(om):
    r = om.router_client()
    pipeline = GROUP + [{"$out": "report"}]
    assert list(r.om.src.aggregate(pipeline)) == []
    r.omref.src.aggregate(pipeline)
    got = _sorted(r.om.report.find())
    assert got == _sorted(r.omref.report.find())
    assert len(got) == 5
    assert _tmp_colls(r.om) == []


def test_out_and_merge_with_write_concern(om):
    r = om.router_client()
    src = r.om.get_collection("src", write_concern=WriteConcern(w="majority", wtimeout=10000))
    src.aggregate(GROUP + [{"$out": "wc_out"}])
    src.aggregate(GROUP + [{"$merge": {"into": "wc_merge"}}])
    assert r.om.wc_out.count_documents({}) == 5
    assert r.om.wc_merge.count_documents({}) == 5


def test_out_reply_is_empty_cursor(om):
    r = om.router_client()
    res = r.om.command("aggregate", "src", pipeline=GROUP + [{"$out": "report_c"}], cursor={})
    assert res["ok"] == 1
    assert res["cursor"]["id"] == 0
    assert res["cursor"]["firstBatch"] == []
    assert res["cursor"]["ns"] == "om.src"


def test_out_sorted_limit_and_avg_split(om):
    """Other merge parts: a merge by sort key with a limit, and a split $avg."""
    r = om.router_client()
    for pipeline in ([{"$sort": {"k": -1}}, {"$limit": 7}, {"$out": "top"}],
                     [{"$match": {"k": {"$gte": 10}}},
                      {"$group": {"_id": "$name", "a": {"$avg": "$v"}}},
                      {"$out": "avgs"}],
                     [{"$project": {"k": 1, "g": 1}}, {"$out": "copy"}]):
        r.om.src.aggregate(pipeline)
        r.omref.src.aggregate(pipeline)
        name = pipeline[-1]["$out"]
        assert _sorted(r.om[name].find()) == _sorted(r.omref[name].find()), name
    assert r.om.copy.count_documents({}) == 60


def test_out_replaces_target_keeping_indexes_and_options(om):
    r = om.router_client()
    r.om.drop_collection("rep")
    r.om.create_collection("rep", validator={"total": {"$exists": True}})
    r.om.rep.insert_many([{"_id": "old%d" % i, "total": i} for i in range(10)])
    r.om.rep.create_index([("total", 1)], name="total_1")
    r.om.rep.create_index([("avg", -1), ("n", 1)], name="avg_n")
    r.om.src.aggregate(GROUP + [{"$out": "rep"}])
    docs = _sorted(r.om.rep.find())
    assert [d["_id"] for d in docs] == [0, 1, 2, 3, 4]
    info = r.om.rep.index_information()
    assert set(info) == {"_id_", "total_1", "avg_n"}
    assert info["avg_n"]["key"] == [("avg", -1), ("n", 1)]
    opts = r.om.rep.options()
    assert opts.get("validator") == {"total": {"$exists": True}}
    assert _tmp_colls(r.om) == []


def test_out_to_other_database(om):
    r = om.router_client()
    r.om2.drop_collection("res")
    r.om2.res.insert_one({"_id": "stale"})
    r.om.src.aggregate(GROUP + [{"$out": {"db": "om2", "coll": "res"}}])
    r.omref.src.aggregate(GROUP + [{"$out": "res"}])
    assert _sorted(r.om2.res.find()) == _sorted(r.omref.res.find())
    # The collection lives on om2's primary shard.
    assert om.shard_client(1).om2.res.count_documents({}) == 5
    assert _tmp_colls(r.om2) == []


def test_out_from_single_shard_to_database_on_other_shard(om):
    """An unsharded source on shard0 with $out into om2 (primary shard1): a shard would only
    write its local copy, so the router writes."""
    r = om.router_client()
    r.om2.drop_collection("from_u")
    r.om.usrc.aggregate([{"$match": {"g": 1}}, {"$out": {"db": "om2", "coll": "from_u"}}])
    assert r.om2.from_u.count_documents({}) == 12
    assert om.shard_client(1).om2.from_u.count_documents({}) == 12
    assert "from_u" not in om.shard_client(0).om2.list_collection_names()


def test_out_after_lookup_of_sharded_collection(om):
    """An unsharded source whose $lookup reads the sharded om.src: the merger runs at the
    router, and so does the $out."""
    r = om.router_client()
    r.om.usrc.aggregate([{"$match": {"k": {"$lt": 5}}},
                         {"$lookup": {"from": "src", "localField": "g", "foreignField": "g",
                                      "as": "m"}},
                         {"$project": {"n": {"$size": "$m"}}}, {"$out": "lk"}])
    assert _sorted(r.om.lk.find()) == [{"_id": i, "n": 12} for i in range(5)]


def test_explain_writes_nothing(om):
    r = om.router_client()
    r.om.drop_collection("never")
    res = r.om.command("aggregate", "src", pipeline=GROUP + [{"$out": "never"}], explain=True)
    assert res["splitPipeline"]["mergerPart"][-1] == {"$out": "never"} or \
        "$out" in res["splitPipeline"]["mergerPart"][-1]
    assert "never" not in r.om.list_collection_names()
    assert error_code(lambda: r.om.command("aggregate", "src", pipeline=[{"$out": "ms"}],
                                      explain=True)) == 28769


def test_out_new_database(om):
    r = om.router_client()
    r.drop_database("omnew")
    r.om.src.aggregate(GROUP + [{"$out": {"db": "omnew", "coll": "r"}}])
    assert r.omnew.r.count_documents({}) == 5


def test_out_to_sharded_target_refused(om):
    r = om.router_client()
    before = _sorted(r.om.ms.find())
    assert error_code(lambda: r.om.src.aggregate(GROUP + [{"$out": "ms"}])) == 28769
    assert error_code(lambda: r.om.usrc.aggregate([{"$out": "ms"}])) == 28769
    assert _sorted(r.om.ms.find()) == before


def test_out_failure_leaves_target_intact(om):
    r = om.router_client()
    r.om.drop_collection("keep")
    r.om.keep.insert_many([{"_id": i, "x": i} for i in range(3)])
    r.om.keep.create_index([("x", 1)], unique=True, name="x_u")
    # Every output document has x: 1: the unique index (copied to the temporary
    # collection) refuses the second one.
    code = error_code(lambda: r.om.src.aggregate(GROUP + [{"$set": {"x": 1}}, {"$out": "keep"}]))
    assert code == 11000
    assert _sorted(r.om.keep.find()) == [{"_id": i, "x": i} for i in range(3)]
    assert _tmp_colls(r.om) == []
    # A runtime error in the merger after the temporary collection exists.
    code = error_code(lambda: r.om.src.aggregate(
        GROUP + [{"$set": {"bad": {"$divide": ["$total", {"$subtract": ["$_id", 3]}]}}},
                 {"$out": "keep"}]))
    assert code not in (0, 238)
    assert _sorted(r.om.keep.find()) == [{"_id": i, "x": i} for i in range(3)]
    assert _tmp_colls(r.om) == []
    assert "x_u" in r.om.keep.index_information()


def test_out_and_merge_bypass_document_validation(om):
    r = om.router_client()
    for name in ("val_out", "val_merge"):
        r.om.drop_collection(name)
        r.om.create_collection(name, validator={"total": {"$lt": 0}})
        r.om[name].insert_one({"_id": "keep", "total": -1})
    # The temporary collection has the target's validator: the documents fail it.
    assert error_code(lambda: r.om.src.aggregate(GROUP + [{"$out": "val_out"}])) == 121
    assert list(r.om.val_out.find()) == [{"_id": "keep", "total": -1}]
    assert error_code(lambda: r.om.src.aggregate(GROUP + [{"$merge": "val_merge"}])) == 121
    r.om.src.aggregate(GROUP + [{"$out": "val_out"}], bypassDocumentValidation=True)
    r.om.src.aggregate(GROUP + [{"$merge": "val_merge"}], bypassDocumentValidation=True)
    assert r.om.val_out.count_documents({}) == 5
    assert r.om.val_out.options()["validator"] == {"total": {"$lt": 0}}
    assert r.om.val_merge.count_documents({}) == 6


def test_out_capped_target_refused(om):
    r = om.router_client()
    r.om.drop_collection("capped")
    r.om.create_collection("capped", capped=True, size=4096)
    assert error_code(lambda: r.om.src.aggregate(GROUP + [{"$out": "capped"}])) == 17152


def test_out_in_transaction_refused(om):
    r = om.router_client()
    codes = []

    class Leave(Exception):
        pass

    with r.start_session() as s:
        for stage in ({"$out": "txn"}, {"$merge": "txn"}):
            # Leaving the block by an exception aborts (pymongo ignores the abort's errors).
            with pytest.raises(Leave):
                with s.start_transaction():
                    codes.append(error_code(lambda: r.om.src.aggregate(GROUP + [stage], session=s)))
                    raise Leave()
    # OperationNotSupportedInTransaction, as mongos.
    assert codes == [263, 263]
    assert "txn" not in r.om.list_collection_names()


# ---------------------------------------------------------------- $merge

MODES = [
    ("replace", "insert"), ("replace", "discard"), ("replace", "fail"),
    ("keepExisting", "insert"),
    ("merge", "insert"), ("merge", "discard"), ("merge", "fail"),
    ("fail", "insert"),
    ("pipeline", "insert"), ("pipeline", "discard"), ("pipeline", "fail"),
]

UPDATE_PIPELINE = [{"$set": {"total": {"$add": [{"$ifNull": ["$total", 0]}, "$$new.total"]},
                             "merged": True}}]


def _merge_spec(into, matched, not_matched):
    spec = {"into": into, "whenNotMatched": not_matched}
    spec["whenMatched"] = UPDATE_PIPELINE if matched == "pipeline" else matched
    return spec


def _reset(coll):
    coll.delete_many({})
    coll.insert_many(TARGET)


def _merge_outcome(coll, source, pipeline):
    """(error code or None, target contents) of running 'pipeline' on 'source'."""
    code = None
    try:
        source.aggregate(pipeline)
    except OperationFailure as e:
        code = e.code
    return code, _sorted(coll.find())


@pytest.mark.parametrize("target", ["mu", "ms"])
@pytest.mark.parametrize("matched,not_matched", MODES)
def test_merge_modes_equal_reference(om, target, matched, not_matched):
    r = om.router_client()
    _reset(r.om[target])
    _reset(r.omref.mref)
    got = _merge_outcome(r.om[target], r.om.src,
                         GROUP + [{"$merge": _merge_spec(target, matched, not_matched)}])
    want = _merge_outcome(r.omref.mref, r.omref.src,
                          GROUP + [{"$merge": _merge_spec("mref", matched, not_matched)}])
    assert got[0] == want[0]
    if want[0] is None:
        assert got[1] == want[1]
    if matched == "fail":
        assert got[0] == 11000
    if not_matched == "fail":
        assert got[0] == 13113
        # Nothing was inserted.
        assert {d["_id"] for d in got[1]} == {0, 1, 99}


def test_merge_expected_contents(om):
    """Spot-check the result in Python: the defaults (merge/insert) into the sharded target."""
    r = om.router_client()
    _reset(r.om.ms)
    r.om.src.aggregate(GROUP + [{"$merge": {"into": "ms"}}])
    want = {d["_id"]: d for d in r.om.src.aggregate(GROUP)}
    want[99] = {"_id": 99, "old": True}
    want[0]["old"] = want[1]["old"] = True  # merged into, not replaced
    assert {d["_id"]: d for d in r.om.ms.find()} == want
    # Both shards hold part of the target.
    for i in range(2):
        assert om.shard_client(i).om.ms.count_documents({}) > 0


def test_merge_let_variables(om):
    r = om.router_client()
    _reset(r.om.mu)
    _reset(r.omref.mref)
    spec = {"let": {"t": "$total", "m": "$lo"},
            "whenMatched": [{"$set": {"t": "$$t", "m": "$$m"}}], "whenNotMatched": "discard"}
    r.om.src.aggregate(GROUP + [{"$merge": dict(spec, into="mu")}])
    r.omref.src.aggregate(GROUP + [{"$merge": dict(spec, into="mref")}])
    assert _sorted(r.om.mu.find()) == _sorted(r.omref.mref.find())
    assert r.om.mu.find_one({"_id": 1})["t"] == sum(d["v"] for d in SRC if d["g"] == 1)


def test_merge_sharded_target_other_key(om):
    """Target sharded on {grp: 1}: the default 'on' is _id and grp; an explicit 'on' must
    include grp."""
    r = om.router_client()
    r.om.mk.delete_many({})
    pipeline = GROUP + [{"$set": {"grp": "$_id"}}]
    r.om.src.aggregate(pipeline + [{"$merge": {"into": "mk"}}])
    want = _sorted(r.om.src.aggregate(pipeline))
    assert _sorted(r.om.mk.find()) == want
    # Again, merging: the same _id/grp pairs match.
    r.om.src.aggregate(pipeline + [{"$set": {"again": 1}},
                                   {"$merge": {"into": "mk", "whenMatched": "merge"}}])
    assert r.om.mk.count_documents({"again": 1}) == 5
    for i in range(2):
        assert om.shard_client(i).om.mk.count_documents({}) > 0
    code = error_code(lambda: r.om.src.aggregate(
        pipeline + [{"$merge": {"into": "mk", "on": "_id"}}]))
    assert code == 51190


def test_merge_on_needs_unique_index(om):
    r = om.router_client()
    r.om.drop_collection("mon")
    r.om.mon.insert_one({"_id": "x", "name": "zzz"})
    pipeline = [{"$group": {"_id": "$name", "c": {"$sum": 1}}},
                {"$project": {"_id": 0, "name": "$_id", "c": 1}}]
    code = error_code(lambda: r.om.src.aggregate(pipeline + [{"$merge": {"into": "mon",
                                                                    "on": "name"}}]))
    assert code in (51183, 51190)
    r.om.mon.create_index([("name", 1)], unique=True)
    r.om.src.aggregate(pipeline + [{"$merge": {"into": "mon", "on": "name"}}])
    got = {d["name"]: d.get("c") for d in r.om.mon.find()}
    want = {"n%d" % j: sum(1 for d in SRC if d["name"] == "n%d" % j) for j in range(7)}
    want["zzz"] = None
    assert got == want


def test_merge_on_field_missing(om):
    r = om.router_client()
    r.om.drop_collection("mon2")
    r.om.mon2.create_index([("name", 1)], unique=True)
    code = error_code(lambda: r.om.src.aggregate(GROUP + [{"$merge": {"into": "mon2",
                                                                 "on": "name"}}]))
    assert code == 51132


def test_merge_into_new_collection_other_db(om):
    r = om.router_client()
    r.om2.drop_collection("mnew")
    r.om.src.aggregate(GROUP + [{"$merge": {"into": {"db": "om2", "coll": "mnew"}}}])
    assert _sorted(r.om2.mnew.find()) == _sorted(r.om.src.aggregate(GROUP))
    assert om.shard_client(1).om2.mnew.count_documents({}) == 5


def test_merge_from_single_shard_into_sharded_target(om):
    """A pipeline that reaches one shard, merging into a sharded target: the router writes,
    so documents land on the shard owning their chunk."""
    r = om.router_client()
    r.om.ms.delete_many({})
    r.om.src.aggregate([{"$match": {"k": {"$lt": 5}}}, {"$project": {"k": 1}},
                        {"$merge": {"into": "ms"}}])
    assert _sorted(r.om.ms.find()) == [{"_id": i, "k": i} for i in range(5)]
    assert om.shard_client(1).om.ms.count_documents({}) == 3  # _id 2, 3, 4


# ---------------------------------------------------------------- $documents


def test_documents_out_and_merge(om):
    r = om.router_client()
    docs = [{"_id": i, "x": i * i} for i in range(4)]
    r.om.drop_collection("dout")
    assert list(r.om.aggregate([{"$documents": docs}, {"$out": "dout"}])) == []
    assert _sorted(r.om.dout.find()) == docs
    r.om.aggregate([{"$documents": [{"_id": 1, "y": 1}, {"_id": 9, "y": 9}]},
                    {"$merge": {"into": "dout", "whenMatched": "merge"}}])
    got = _sorted(r.om.dout.find())
    assert got[1] == {"_id": 1, "x": 1, "y": 1}
    assert got[-1] == {"_id": 9, "y": 9}
    _reset(r.om.ms)
    r.om.aggregate([{"$documents": [{"_id": 0, "z": 1}, {"_id": 4, "z": 4}]},
                    {"$merge": {"into": "ms", "whenMatched": "replace"}}])
    assert r.om.ms.find_one({"_id": 0}) == {"_id": 0, "z": 1}
    assert r.om.ms.find_one({"_id": 4}) == {"_id": 4, "z": 4}
    assert om.shard_client(1).om.ms.count_documents({"_id": 4}) == 1


# ---------------------------------------------------------------- a router that missed the
# target being sharded
#
# Router B caches the target as unsharded, router A then shards it and moves a chunk. B
# would send the whole pipeline to the primary shard, which would write every document
# into its local copy ($merge: orphans no router returns) or $out over a sharded
# collection. The shard checks the version B assumed for the target (UNSHARDED, in
# $_involvedNamespaceVersions) and answers StaleConfig naming it: B refreshes the target and
# answers as a router that knew ($merge routed by the shard key, $out refused).

STALE_SRC = [{"_id": i, "k": i * 2} for i in range(100)]


@pytest.fixture(scope="module")
def stale(om):
    a = om.router_client()
    b = om.add_router().client()
    a.admin.command("enableSharding", "omstale", primaryShard="shard0")
    a.omstale.src.insert_many(STALE_SRC)
    return a, b


def _shard_target(a, ns):
    a.admin.command("shardCollection", ns, key={"_id": 1})
    a.admin.command("split", ns, middle={"_id": 50})
    a.admin.command("moveChunk", ns, find={"_id": 60}, to="shard1")


def test_merge_by_a_router_that_missed_the_target_being_sharded(om, stale):
    a, b = stale
    b.omstale.src.aggregate([{"$match": {"_id": {"$lt": 10}}}, {"$merge": {"into": "mt"}}])
    assert _sorted(a.omstale.mt.find()) == _sorted(STALE_SRC[:10])  # B caches mt as unsharded
    _shard_target(a, "omstale.mt")
    b.omstale.src.aggregate([{"$set": {"x": 1}},
                             {"$merge": {"into": "mt", "whenMatched": "merge"}}])
    want = [dict(d, x=1) for d in STALE_SRC]
    assert _sorted(a.omstale.mt.find()) == _sorted(want)
    assert _sorted(b.omstale.mt.find()) == _sorted(want)
    # Each document went to the shard owning its _id: none was left on the primary shard
    # as an orphan that no router returns.
    s0, s1 = om.shard_client(0).omstale.mt, om.shard_client(1).omstale.mt
    assert _sorted(s0.find()) == _sorted(want[:50])
    assert _sorted(s1.find()) == _sorted(want[50:])


def test_merge_with_a_lookup_by_a_router_that_missed_both_being_sharded(om, stale):
    a, b = stale
    a.omstale.fr.insert_many([{"_id": i, "w": i} for i in range(100)])
    pipeline = [{"$lookup": {"from": "fr", "localField": "_id", "foreignField": "_id",
                             "as": "m"}},
                {"$set": {"w": {"$first": "$m.w"}}}, {"$unset": "m"},
                {"$merge": {"into": "mlt"}}]
    b.omstale.src.aggregate([{"$match": {"_id": {"$lt": 3}}}] + pipeline)
    assert a.omstale.mlt.count_documents({}) == 3
    a.omstale.fr.create_index([("w", 1)])
    a.admin.command("shardCollection", "omstale.fr", key={"w": 1})
    a.admin.command("split", "omstale.fr", middle={"w": 50})
    a.admin.command("moveChunk", "omstale.fr", find={"w": 60}, to="shard1")
    _shard_target(a, "omstale.mlt")
    b.omstale.src.aggregate(pipeline)
    want = [dict(d, w=d["_id"]) for d in STALE_SRC]
    assert _sorted(a.omstale.mlt.find()) == _sorted(want)
    assert om.shard_client(0).omstale.mlt.count_documents({"_id": {"$gte": 50}}) == 0
    assert om.shard_client(1).omstale.mlt.count_documents({}) == 50


def test_out_by_a_router_that_missed_the_target_being_sharded(om, stale):
    a, b = stale
    b.omstale.src.aggregate([{"$match": {"_id": {"$lt": 10}}}, {"$out": "ot"}])
    assert _sorted(a.omstale.ot.find()) == _sorted(STALE_SRC[:10])  # B caches ot as unsharded
    _shard_target(a, "omstale.ot")
    before = _sorted(a.omstale.ot.find())
    # As through a router that knows (test_out_to_sharded_target_refused).
    assert error_code(lambda: b.omstale.src.aggregate([{"$out": "ot"}])) == 28769
    assert _sorted(a.omstale.ot.find()) == before
    assert _tmp_colls(om.shard_client(0).omstale) == []
    assert error_code(lambda: b.omstale.src.aggregate([{"$out": "ot"}])) == 28769
