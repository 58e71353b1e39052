"""The aggregation stages that reach beyond their input, through pymongo on one data node:
$lookup (equality and pipeline forms), $unionWith, $out (replacing the target, keeping its
indexes), $merge (each whenMatched/whenNotMatched mode, `on` fields and their unique index),
$facet, $collStats, $indexStats, and `aggregate: 1` with $documents; with MongoDB's error
codes."""

import pytest
from pymongo.errors import OperationFailure


@pytest.fixture
def db(node):
    return node.client().test


def codes(excinfo):
    return excinfo.value.code


def test_lookup_equality_and_pipeline(db):
    db.orders.insert_many([
        {"_id": 1, "item": "almonds", "qty": 2},
        {"_id": 2, "item": "pecans", "qty": 1},
        {"_id": 3},
    ])
    db.inventory.insert_many([
        {"_id": 1, "sku": "almonds", "stock": 120},
        {"_id": 2, "sku": "bread", "stock": 80},
        {"_id": 3, "sku": "pecans", "stock": 70},
        {"_id": 4},
    ])
    db.inventory.create_index("sku")
    got = list(db.orders.aggregate([
        {"$lookup": {"from": "inventory", "localField": "item", "foreignField": "sku",
                     "as": "inv"}},
        {"$project": {"inv.stock": 1, "inv._id": 1}},
        {"$sort": {"_id": 1}},
    ]))
    assert got == [
        {"_id": 1, "inv": [{"_id": 1, "stock": 120}]},
        {"_id": 2, "inv": [{"_id": 3, "stock": 70}]},
        # A missing local field matches foreign documents where the field is null or missing.
        {"_id": 3, "inv": [{"_id": 4}]},
    ]
    got = list(db.orders.aggregate([
        {"$match": {"_id": {"$in": [1, 2]}}},
        {"$lookup": {"from": "inventory", "let": {"need": "$qty", "it": "$item"},
                     "pipeline": [
                         {"$match": {"$expr": {"$and": [{"$eq": ["$sku", "$$it"]},
                                                        {"$gte": ["$stock", "$$need"]}]}}},
                         {"$project": {"_id": 0, "stock": 1}}],
                     "as": "ok"}},
        {"$sort": {"_id": 1}},
    ]))
    assert [d["ok"] for d in got] == [[{"stock": 120}], [{"stock": 70}]]
    # A lookup into the same collection, and into one that does not exist.
    got = list(db.orders.aggregate([
        {"$match": {"_id": 1}},
        {"$lookup": {"from": "orders", "localField": "_id", "foreignField": "_id", "as": "me"}},
        {"$lookup": {"from": "nothere", "localField": "_id", "foreignField": "x", "as": "no"}},
    ]))
    assert got == [{"_id": 1, "item": "almonds", "qty": 2,
                    "me": [{"_id": 1, "item": "almonds", "qty": 2}], "no": []}]
    with pytest.raises(OperationFailure) as e:
        list(db.orders.aggregate([{"$lookup": {"from": "inventory", "as": "x"}}]))
    assert codes(e) == 9
    with pytest.raises(OperationFailure) as e:
        list(db.orders.aggregate([{"$lookup": {"from": "inventory", "as": "x",
                                               "pipeline": [{"$out": "z"}]}}]))
    assert codes(e) == 51047


def test_union_with(db):
    db.a.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 2}])
    db.b.insert_many([{"_id": 10, "y": 1}, {"_id": 11, "y": 2}])
    got = list(db.a.aggregate([{"$unionWith": "b"}]))
    assert [d["_id"] for d in got] == [1, 2, 10, 11]
    got = list(db.a.aggregate([
        {"$match": {"x": 2}},
        {"$unionWith": {"coll": "b", "pipeline": [{"$match": {"y": 1}}, {"$set": {"from": "b"}}]}},
        {"$unionWith": {"coll": "missing"}},
    ]))
    assert got == [{"_id": 2, "x": 2}, {"_id": 10, "y": 1, "from": "b"}]
    got = list(db.a.aggregate([{"$unionWith": {"pipeline": [{"$documents": [{"d": 1}]}]}},
                               {"$count": "n"}]))
    assert got == [{"n": 3}]


def test_out_replaces_target_and_keeps_indexes(db):
    db.src.insert_many([{"_id": i, "k": i % 3} for i in range(9)])
    db.dst.insert_many([{"_id": 100, "old": True}])
    db.dst.create_index("total", name="total_1")
    res = list(db.src.aggregate([{"$group": {"_id": "$k", "total": {"$sum": 1}}},
                                 {"$sort": {"_id": 1}}, {"$out": "dst"}]))
    assert res == []
    assert list(db.dst.find().sort("_id", 1)) == [
        {"_id": 0, "total": 3}, {"_id": 1, "total": 3}, {"_id": 2, "total": 3}]
    assert "total_1" in db.dst.index_information()
    # No temporary collection is left behind.
    assert [n for n in db.list_collection_names() if n.startswith("tmp.agg_out")] == []
    # $out into a new collection, and the {db, coll} form.
    db.src.aggregate([{"$match": {"k": 0}}, {"$out": {"db": "test", "coll": "fresh"}}])
    assert db.fresh.count_documents({}) == 3
    # A duplicate _id fails the $out and leaves the target as it was.
    with pytest.raises(OperationFailure) as e:
        db.src.aggregate([{"$project": {"_id": "$k"}}, {"$out": "dst"}])
    assert codes(e) == 11000
    assert db.dst.count_documents({}) == 3
    assert [n for n in db.list_collection_names() if n.startswith("tmp.agg_out")] == []
    with pytest.raises(OperationFailure) as e:
        db.src.aggregate([{"$out": "dst"}, {"$match": {}}])
    assert codes(e) == 40601


def test_merge_modes(db):
    db.src.insert_many([{"_id": 1, "a": 1}, {"_id": 2, "a": 2}])

    def reset(docs):
        db.tgt.drop()
        if docs:
            db.tgt.insert_many(docs)

    reset([{"_id": 1, "b": 1}])
    db.src.aggregate([{"$merge": {"into": "tgt"}}])  # merge + insert
    assert list(db.tgt.find().sort("_id", 1)) == [{"_id": 1, "b": 1, "a": 1}, {"_id": 2, "a": 2}]

    reset([{"_id": 1, "b": 1}])
    db.src.aggregate([{"$merge": {"into": "tgt", "whenMatched": "replace",
                                  "whenNotMatched": "discard"}}])
    assert list(db.tgt.find()) == [{"_id": 1, "a": 1}]

    reset([{"_id": 1, "b": 1}])
    db.src.aggregate([{"$merge": {"into": "tgt", "whenMatched": "keepExisting"}}])
    assert list(db.tgt.find().sort("_id", 1)) == [{"_id": 1, "b": 1}, {"_id": 2, "a": 2}]

    reset([{"_id": 1, "b": 1}])
    with pytest.raises(OperationFailure) as e:
        db.src.aggregate([{"$merge": {"into": "tgt", "whenMatched": "fail"}}])
    assert codes(e) == 11000

    reset([{"_id": 1, "b": 1}])
    with pytest.raises(OperationFailure) as e:
        db.src.aggregate([{"$merge": {"into": "tgt", "whenMatched": "replace",
                                      "whenNotMatched": "fail"}}])
    assert codes(e) == 13113

    reset([{"_id": 1, "b": 10}])
    db.src.aggregate([{"$merge": {"into": "tgt", "let": {"inc": "$a"},
                                  "whenMatched": [{"$set": {"b": {"$add": ["$b", "$$inc"]}}}]}}])
    assert list(db.tgt.find().sort("_id", 1)) == [{"_id": 1, "b": 11}, {"_id": 2, "a": 2}]

    reset([{"_id": 1, "b": 10}])
    db.src.aggregate([{"$merge": {"into": "tgt",
                                  "whenMatched": [{"$set": {"seen": "$$new.a"}}],
                                  "whenNotMatched": "discard"}}])
    assert list(db.tgt.find()) == [{"_id": 1, "b": 10, "seen": 1}]

    # Custom 'on' fields need a unique index on exactly those fields.
    reset([{"_id": 50, "a": 1, "old": True}])
    with pytest.raises(OperationFailure) as e:
        db.src.aggregate([{"$project": {"_id": 0}}, {"$merge": {"into": "tgt", "on": "a"}}])
    assert codes(e) == 51183
    db.tgt.create_index("a", unique=True)
    db.src.aggregate([{"$project": {"_id": 0}}, {"$merge": {"into": "tgt", "on": "a"}}])
    assert db.tgt.count_documents({}) == 2
    assert db.tgt.find_one({"a": 1}) == {"_id": 50, "a": 1, "old": True}
    with pytest.raises(OperationFailure) as e:
        db.src.aggregate([{"$project": {"a": 0}}, {"$merge": {"into": "tgt", "on": "a"}}])
    assert codes(e) == 51132
    with pytest.raises(OperationFailure) as e:
        db.src.aggregate([{"$merge": {"into": "tgt", "whenMatched": "fail",
                                      "whenNotMatched": "discard"}}])
    assert codes(e) == 51181


def test_facet_and_bucket(db):
    db.p.insert_many([{"_id": i, "price": i * 10, "tag": "ab"[i % 2]} for i in range(10)])
    got = list(db.p.aggregate([{"$facet": {
        "byTag": [{"$sortByCount": "$tag"}, {"$sort": {"_id": 1}}],
        "byPrice": [{"$bucket": {"groupBy": "$price", "boundaries": [0, 50, 100],
                                 "output": {"n": {"$sum": 1}, "ids": {"$push": "$_id"}}}}],
        "auto": [{"$bucketAuto": {"groupBy": "$price", "buckets": 2}}],
        "top": [{"$group": {"_id": None, "t": {"$topN": {"n": 2, "output": "$_id",
                                                          "sortBy": {"price": -1}}},
                            "sd": {"$stdDevPop": "$price"}}}],
    }}]))
    assert got == [{
        "byTag": [{"_id": "a", "count": 5}, {"_id": "b", "count": 5}],
        "byPrice": [{"_id": 0, "n": 5, "ids": [0, 1, 2, 3, 4]},
                    {"_id": 50, "n": 5, "ids": [5, 6, 7, 8, 9]}],
        "auto": [{"_id": {"min": 0, "max": 50}, "count": 5},
                 {"_id": {"min": 50, "max": 90}, "count": 5}],
        "top": [{"_id": None, "t": [9, 8], "sd": pytest.approx(28.722813232690143)}],
    }]
    with pytest.raises(OperationFailure) as e:
        list(db.p.aggregate([{"$facet": {"x": [{"$out": "y"}]}}]))
    assert codes(e) == 40600


def test_sample(db):
    db.s.insert_many([{"_id": i} for i in range(50)])
    got = list(db.s.aggregate([{"$sample": {"size": 10}}]))
    assert len(got) == 10 and len({d["_id"] for d in got}) == 10
    assert len(list(db.s.aggregate([{"$sample": {"size": 500}}]))) == 50


def test_coll_stats_and_index_stats(db):
    db.st.insert_many([{"_id": i, "a": i} for i in range(5)])
    db.st.create_index("a")
    got = list(db.st.aggregate([{"$collStats": {"count": {}, "storageStats": {}}}]))
    assert len(got) == 1
    assert got[0]["ns"] == "test.st"
    assert got[0]["count"] == 5
    assert got[0]["storageStats"]["count"] == 5
    assert got[0]["storageStats"]["nindexes"] == 2
    assert set(got[0]["storageStats"]["indexSizes"]) == {"_id_", "a_1"}
    got = list(db.st.aggregate([{"$indexStats": {}}, {"$sort": {"name": 1}}]))
    assert [(d["name"], d["key"], d["accesses"]["ops"]) for d in got] == [
        ("_id_", {"_id": 1}, 0), ("a_1", {"a": 1}, 0)]
    with pytest.raises(OperationFailure) as e:
        list(db.nothere.aggregate([{"$collStats": {"count": {}}}]))
    assert codes(e) == 26
    with pytest.raises(OperationFailure) as e:
        list(db.st.aggregate([{"$match": {}}, {"$collStats": {}}]))
    assert codes(e) == 40602


def test_documents_collectionless(db):
    reply = db.command("aggregate", 1, pipeline=[
        {"$documents": [{"x": 1}, {"x": 2}, {"x": 3}]},
        {"$match": {"x": {"$gte": 2}}},
        {"$group": {"_id": None, "s": {"$sum": "$x"}, "m": {"$mergeObjects": {"y": "$x"}}}},
    ], cursor={})
    assert reply["cursor"]["firstBatch"] == [{"_id": None, "s": 5, "m": {"y": 3}}]
    assert reply["cursor"]["ns"] == "test.$cmd.aggregate"
    assert list(db.aggregate([{"$documents": [{"a": 1}]}])) == [{"a": 1}]
    # Batches and getMore on the collection-less cursor.
    got = list(db.aggregate([{"$documents": [{"i": i} for i in range(7)]}], batchSize=2))
    assert [d["i"] for d in got] == list(range(7))
    with pytest.raises(OperationFailure) as e:
        db.command("aggregate", 1, pipeline=[{"$match": {}}], cursor={})
    assert codes(e) == 73
    with pytest.raises(OperationFailure) as e:
        db.command("aggregate", 1, pipeline=[{"$currentOp": {}}], cursor={})
    assert codes(e) == 73  # $currentOp runs on the admin database only
    # $documents then $lookup into a collection.
    db.people.insert_many([{"_id": 1, "name": "ann"}])
    got = list(db.aggregate([{"$documents": [{"pid": 1}]},
                             {"$lookup": {"from": "people", "localField": "pid",
                                          "foreignField": "_id", "as": "p"}}]))
    assert got == [{"pid": 1, "p": [{"_id": 1, "name": "ann"}]}]


def test_out_and_merge_refused_in_transaction(rs_node):
    c = rs_node.client()
    c.test.t.insert_one({"_id": 1})
    with c.start_session() as s:
        for stage in ({"$out": "x"}, {"$merge": "x"}):
            # The refusal aborts the transaction, so each stage gets one of its own.
            s.start_transaction()
            with pytest.raises(OperationFailure) as e:
                list(c.test.t.aggregate([stage], session=s))
            # OperationNotSupportedInTransaction, as MongoDB.
            assert codes(e) == 263
            s.abort_transaction()
    assert "x" not in c.test.list_collection_names()


def test_streaming_cursor_with_lookup_across_get_more(db):
    db.big.insert_many([{"_id": i, "k": i % 5} for i in range(300)])
    db.keys.insert_many([{"_id": k, "name": "k%d" % k} for k in range(5)])
    reply = db.command("aggregate", "big", pipeline=[
        {"$lookup": {"from": "keys", "localField": "k", "foreignField": "_id", "as": "key"}},
        {"$project": {"name": {"$first": "$key.name"}}}], cursor={"batchSize": 10})
    assert len(reply["cursor"]["firstBatch"]) == 10
    cid = reply["cursor"]["id"]
    assert cid != 0
    more = db.command("getMore", cid, collection="big", batchSize=1000)
    got = reply["cursor"]["firstBatch"] + more["cursor"]["nextBatch"]
    assert more["cursor"]["id"] == 0
    assert [d["name"] for d in got] == ["k%d" % (i % 5) for i in range(300)]
    # A drop between batches ends the cursor, as a find's (the drop kills the collection's
    # cursors: CursorNotFound; QueryPlanKilled if the getMore raced the kill).
    reply = db.command("aggregate", "big", pipeline=[{"$match": {"k": 1}}],
                       cursor={"batchSize": 2})
    db.big.drop()
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", reply["cursor"]["id"], collection="big")
    assert codes(e) in (43, 175)
