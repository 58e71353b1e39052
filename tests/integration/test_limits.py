"""Every buffer that grows with the data is bounded, and passing a bound answers MongoDB's
error (docs/limits.md). Knobs are lowered to keep the data small; each test sets back what it
lowered or runs on a node of its own."""

import pytest
from bson import ObjectId
from pymongo.errors import OperationFailure

from shale_fixtures import error_code

MB = 1024 * 1024
DEFAULT = 100 * MB


def _set(db, **knobs):
    db.client.admin.command("setParameter", 1, **knobs)


def _agg(coll, pipeline, **kw):
    return list(coll.aggregate(pipeline, **kw))


def test_knobs_have_mongodb_names_and_defaults(node):
    admin = node.client().admin
    for name in ("internalQueryMaxBlockingSortMemoryUsageBytes",
                 "internalDocumentSourceGroupMaxMemoryBytes",
                 "internalDocumentSourceBucketAutoMaxMemoryBytes",
                 "internalDocumentSourceGraphLookupMaxMemoryBytes",
                 "internalLookupStageIntermediateDocumentMaxSizeBytes",
                 "internalQueryFacetBufferSizeBytes",
                 "internalQueryFacetMaxOutputDocSizeBytes",
                 "internalQueryMaxPushBytes",
                 "internalQueryMaxAddToSetBytes",
                 "internalDocumentSourceSetWindowFieldsMaxMemoryBytes"):
        assert admin.command("getParameter", 1, **{name: 1})[name] == DEFAULT, name


def test_push_and_add_to_set_are_bounded_per_accumulator(node):
    """MongoDB bounds each $push / $addToSet on its own (ExceededMemoryLimit), below the
    $group's limit."""
    db = node.client().test
    db.c.insert_many([{"k": 1, "s": "%04d" % i + "x" * 60} for i in range(100)])
    _set(db, internalQueryMaxPushBytes=2000, internalQueryMaxAddToSetBytes=2000)
    for acc in ("$push", "$addToSet"):
        code = error_code(lambda: _agg(db.c, [{"$group": {"_id": "$k", "a": {acc: "$s"}}}]))
        assert code == 146, acc
        # The same accumulator over less data, and the $group itself, are fine.
        out = _agg(db.c, [{"$match": {"s": {"$lt": "0010"}}},
                          {"$group": {"_id": "$k", "a": {acc: "$s"}}}])
        assert len(out[0]["a"]) == 10
    # $setWindowFields' $push folds through the same accumulator.
    code = error_code(lambda: _agg(db.c, [{"$setWindowFields": {
        "sortBy": {"s": 1}, "output": {"a": {"$push": "$s"}}}}]))
    assert code == 146


def test_stage_memory_knobs(node):
    """Each buffering stage reads its MongoDB knob: 292 past it, allowDiskUse or not (Shale
    does not spill; the message says so)."""
    db = node.client().test
    db.c.insert_many([{"_id": i, "k": i, "s": "x" * 100} for i in range(200)])
    _set(db, internalDocumentSourceGroupMaxMemoryBytes=4000)
    assert error_code(lambda: _agg(db.c, [{"$group": {"_id": "$k"}}])) == 292
    with pytest.raises(OperationFailure) as e:
        _agg(db.c, [{"$group": {"_id": "$k"}}], allowDiskUse=True)
    assert e.value.code == 292
    assert "internalDocumentSourceGroupMaxMemoryBytes" in str(e.value)
    _set(db, internalDocumentSourceGroupMaxMemoryBytes=DEFAULT)
    assert len(_agg(db.c, [{"$group": {"_id": "$k"}}])) == 200
    # The blocking sort knob bounds the pipeline's $sort (which ignored it) and find's sort.
    _set(db, internalQueryMaxBlockingSortMemoryUsageBytes=4000)
    assert error_code(lambda: _agg(db.c, [{"$sort": {"s": 1, "k": -1}}])) == 292
    assert error_code(lambda: list(db.c.find().sort([("s", 1), ("k", -1)]))) == 292
    assert error_code(lambda: _agg(db.c, [{"$sample": {"size": 150}}])) == 292
    _set(db, internalQueryMaxBlockingSortMemoryUsageBytes=DEFAULT)
    _set(db, internalDocumentSourceBucketAutoMaxMemoryBytes=4000)
    assert error_code(lambda: _agg(db.c, [{"$bucketAuto": {"groupBy": "$k",
                                                           "buckets": 2}}])) == 292
    _set(db, internalDocumentSourceBucketAutoMaxMemoryBytes=DEFAULT)
    _set(db, internalDocumentSourceGraphLookupMaxMemoryBytes=4000)
    db.g.insert_many([{"_id": i, "to": i + 1, "s": "x" * 100} for i in range(100)])
    assert error_code(lambda: _agg(db.c, [{"$limit": 1}, {"$graphLookup": {
        "from": "g", "startWith": 0, "connectFromField": "to", "connectToField": "_id",
        "as": "r"}}])) == 40099


def test_lookup_joined_documents_are_bounded(node):
    """4568 past internalLookupStageIntermediateDocumentMaxSizeBytes, with localField and with
    a pipeline (one form had no bound at all: the array could pass libbson's 2 GiB)."""
    db = node.client().test
    db.local.insert_one({"_id": 0, "k": 1})
    db.foreign.insert_many([{"fk": 1, "s": "x" * 100} for _ in range(100)])
    _set(db, internalLookupStageIntermediateDocumentMaxSizeBytes=5000)
    code = error_code(lambda: _agg(db.local, [{"$lookup": {
        "from": "foreign", "localField": "k", "foreignField": "fk", "as": "j"}}]))
    assert code == 4568
    code = error_code(lambda: _agg(db.local, [{"$lookup": {
        "from": "foreign", "pipeline": [{"$match": {"fk": 1}}], "as": "j"}}]))
    assert code == 4568
    _set(db, internalLookupStageIntermediateDocumentMaxSizeBytes=DEFAULT)
    out = _agg(db.local, [{"$lookup": {"from": "foreign", "localField": "k",
                                       "foreignField": "fk", "as": "j"}},
                          {"$project": {"n": {"$size": "$j"}}}])
    assert out == [{"_id": 0, "n": 100}]


def _one_mib_docs(coll, n, extra=0):
    coll.insert_many([{"_id": i, "s": "x" * (MB + extra)} for i in range(n)])


def test_facet_output_bounded_by_its_knob_not_by_16_mib(node):
    """A $facet's document may pass 16 MiB inside the pipeline (MongoDB: up to
    internalQueryFacetMaxOutputDocSizeBytes, 4031700 past it); Shale failed it at 16 MiB."""
    db = node.client().test
    _one_mib_docs(db.c, 17)
    facet = [{"$facet": {"a": [{"$match": {}}]}}, {"$project": {"n": {"$size": "$a"}}}]
    assert _agg(db.c, facet) == [{"n": 17}]
    _set(db, internalQueryFacetMaxOutputDocSizeBytes=10 * MB)
    assert error_code(lambda: _agg(db.c, facet)) == 4031700
    _set(db, internalQueryFacetMaxOutputDocSizeBytes=DEFAULT,
         internalQueryFacetBufferSizeBytes=10 * MB)
    assert error_code(lambda: _agg(db.c, facet)) == 146
    _set(db, internalQueryFacetBufferSizeBytes=DEFAULT)


def test_result_document_no_reply_can_carry(node):
    """A pipeline may build a 17 MiB document; returning it is BSONObjectTooLarge, as in
    MongoDB, not a 17 MiB reply (the router refuses one from a shard). A document just over
    16 MiB still comes back, as MongoDB's does."""
    client = node.client()
    db = client.test
    _one_mib_docs(db.c, 17)
    code = error_code(lambda: _agg(db.c, [{"$group": {"_id": None, "a": {"$push": "$s"}}}]))
    assert code == 10334
    assert client.admin.command("ping")["ok"] == 1.0
    db.d.insert_many([{"_id": i, "s": "y" * (MB + 600)} for i in range(16)])
    out = _agg(db.d, [{"$group": {"_id": None, "a": {"$push": "$s"}}}])
    assert len(out[0]["a"]) == 16


def _oid_arrays(n_docs, per_doc):
    return [[ObjectId() for _ in range(per_doc)] for _ in range(n_docs)]


def test_distinct_counts_the_reply_it_builds(node):
    """distinct's 16 MiB cap (17217) counts each value as the reply holds it: ObjectIds were
    counted 16 bytes for their 20, so 900,000 of them made an 18 MiB reply."""
    db = node.client().test
    for i, arr in enumerate(_oid_arrays(2, 450000)):
        db.c.insert_one({"_id": i, "v": arr})
    assert error_code(lambda: db.c.distinct("v")) == 17217
    assert len(db.c.distinct("v", {"_id": 0})) == 450000


def test_collectionless_aggregate_streams(node):
    """aggregate: 1 ($documents) is served batch by batch like any aggregate, not computed
    whole into memory first: a late error comes with the getMore that reaches it."""
    db = node.client().test
    db.c.insert_many([{"_id": i, "d": 0 if i == 19 else 1} for i in range(20)])
    pipeline = [{"$documents": [{"_id": -1, "d": 1}]}, {"$unionWith": "c"},
                {"$project": {"x": {"$divide": [1, "$d"]}}}]
    first = db.command("aggregate", 1, pipeline=pipeline, cursor={"batchSize": 5})
    assert first["cursor"]["id"] != 0
    assert first["cursor"]["ns"] == "test.$cmd.aggregate"
    assert [d["_id"] for d in first["cursor"]["firstBatch"]] == [-1, 0, 1, 2, 3]
    more = db.command("getMore", first["cursor"]["id"], collection="$cmd.aggregate",
                      batchSize=5)
    assert [d["_id"] for d in more["cursor"]["nextBatch"]] == [4, 5, 6, 7, 8]
    code = error_code(lambda: db.command("getMore", first["cursor"]["id"],
                                         collection="$cmd.aggregate"))
    assert code == 16608
    # Without the failing document, the whole result comes through the cursor.
    db.c.delete_one({"_id": 19})
    assert len(list(db.aggregate(pipeline, batchSize=3))) == 20


# ---------------------------------------------------------------- through the router


def test_router_distinct_union_is_capped(cluster):
    """Each shard's distinct fits; their union is checked against the same 16 MiB cap
    (17217) instead of going out as a 21 MiB reply."""
    r = cluster.router_client()
    ns = "lim.d"
    r.admin.command("enableSharding", "lim", primaryShard="shard0")
    r.admin.command("shardCollection", ns, key={"k": 1})
    r.admin.command("split", ns, middle={"k": 0})
    r.admin.command("moveChunk", ns, find={"k": 0}, to="shard1")
    arrays = _oid_arrays(4, 250000)
    for k, arr in zip((-2, -1, 1, 2), arrays):
        r.lim.d.insert_one({"k": k, "v": arr})
    assert len(cluster.shard_client(0).lim.d.distinct("v")) == 500000
    assert len(cluster.shard_client(1).lim.d.distinct("v")) == 500000
    assert error_code(lambda: r.lim.d.distinct("v")) == 17217
    assert len(r.lim.d.distinct("v", {"k": {"$lt": 0}})) == 500000


def test_router_listings_are_cursors(cluster):
    """listCollections and listIndexes through the router are served batch by batch from
    the shard's cursor (they were gathered into one reply, unbounded)."""
    r = cluster.router_client()
    db = r.many
    names = {"c%03d" % i for i in range(120)}
    for n in sorted(names):
        db.create_collection(n)
    first = db.command("listCollections", 1, nameOnly=True, cursor={"batchSize": 10})
    assert first["cursor"]["id"] != 0
    assert first["cursor"]["ns"] == "many.$cmd.listCollections"
    assert len(first["cursor"]["firstBatch"]) == 10
    assert set(db.list_collection_names()) == names
    seen = [c["name"] for c in first["cursor"]["firstBatch"]]
    cursor_id = first["cursor"]["id"]
    while cursor_id != 0:
        more = db.command("getMore", cursor_id, collection="$cmd.listCollections", batchSize=7)
        assert len(more["cursor"]["nextBatch"]) <= 7
        seen += [c["name"] for c in more["cursor"]["nextBatch"]]
        cursor_id = more["cursor"]["id"]
    assert sorted(seen) == sorted(names)
    empty = db.command("listCollections", 1, cursor={"batchSize": 0})
    assert empty["cursor"]["firstBatch"] == [] and empty["cursor"]["id"] != 0
    more = db.command("getMore", empty["cursor"]["id"], collection="$cmd.listCollections")
    assert len(more["cursor"]["nextBatch"]) == 120 and more["cursor"]["id"] == 0
    for i in range(6):
        db.c000.create_index("f%d" % i)
    first = db.command("listIndexes", "c000", cursor={"batchSize": 2})
    assert first["cursor"]["id"] != 0 and len(first["cursor"]["firstBatch"]) == 2
    assert len(list(db.c000.list_indexes())) == 7
    # The config server's databases are listed through the same cursors.
    assert "collections" in r.config.list_collection_names()
    assert error_code(lambda: db.command("listCollections", 1, cursor={"batchSize": -1})) \
        == 51024
    assert r.nosuchdb.list_collection_names() == []


def test_move_primary_moves_more_collections_than_one_batch(cluster):
    """movePrimary lists the database's collections with listCollections: all of them, not
    the first batch of 101 (the others stayed behind, invisible through the router)."""
    r = cluster.router_client()
    r.admin.command("enableSharding", "mp", primaryShard="shard0")
    names = ["c%03d" % i for i in range(130)]
    for n in names:
        r.mp[n].insert_one({"_id": n})
    r.admin.command("movePrimary", "mp", to="shard1")
    moved = cluster.shard_client(1).mp.list_collection_names()
    assert sorted(n for n in moved if not n.startswith("system.")) == names
    assert [n for n in cluster.shard_client(0).mp.list_collection_names()
            if not n.startswith("system.")] == []
    assert all(r.mp[n].find_one() == {"_id": n} for n in names)
