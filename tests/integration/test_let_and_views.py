"""Views (issue 20 item 3) as a user sees them, on a plain node and through a 2-shard router
(views on a sharded and on an unsharded collection): `create` with viewOn/pipeline/collation,
views on views, cycles and depth, listCollections with type "view", system.views, reads
(find, aggregate, count, distinct, explain) resolved into pipelines, getMore on a view's
cursor, writes refused with CommandNotSupportedOnView (166), collMod and drop of a view.
Spellings are pymongo's (create_collection(viewOn=...), find, count_documents, distinct)."""

import pytest
from pymongo.errors import OperationFailure, WriteError

from query_targets import target_fixtures

plain_node, routed, target = target_fixtures("vw", "views-node")

_seq = [0]

DOCS = [{"_id": i, "sk": i * 10, "a": i % 3, "s": ["x", "y", "X"][i % 3], "t": [i, i + 1]}
        for i in range(10)]


def make_coll(target, docs=DOCS):
    """A fresh collection holding 'docs', sharded on {sk: 1} with chunks on both shards for
    the 'sharded' target; returns (database, collection)."""
    kind, client = target
    _seq[0] += 1
    name = "c%d" % _seq[0]
    db = client["vw"] if kind != "node" else client["vwn"]
    coll = db.create_collection(name)
    if kind == "sharded":
        client.admin.command("shardCollection", "vw." + name, key={"sk": 1})
        client.admin.command("split", "vw." + name, middle={"sk": 50})
        client.admin.command("moveChunk", "vw." + name, find={"sk": 60}, to="shard1")
    if docs:
        coll.insert_many([dict(d) for d in docs])
    return db, coll


def code_of(fn):
    with pytest.raises((OperationFailure, WriteError)) as e:
        fn()
    return e.value.code


def make_view(db, name, on, pipeline, **kw):
    db.command("create", name, viewOn=on, pipeline=pipeline, **kw)
    return db[name]


def test_view_reads(target):
    db, coll = make_coll(target)
    v = make_view(db, coll.name + "_v", coll.name,
                  [{"$match": {"a": {"$gte": 1}}}, {"$project": {"a": 1, "s": 1, "t": 1}}])
    ids = [d["_id"] for d in DOCS if d["a"] >= 1]
    assert sorted(d["_id"] for d in v.find()) == ids
    got = list(v.find({"a": 2}, {"s": 1}).sort("_id", -1).skip(1).limit(2))
    assert got == [{"_id": 5, "s": "X"}, {"_id": 2, "s": "X"}]
    assert "sk" not in v.find_one({"_id": 1})
    assert v.count_documents({}) == len(ids)
    assert db.command("count", v.name)["n"] == len(ids)
    assert db.command("count", v.name, query={"a": 1}, skip=1, limit=2)["n"] == 2
    assert sorted(v.distinct("s")) == ["X", "y"]
    assert sorted(v.distinct("t", {"a": 1})) == [1, 2, 4, 5, 7, 8]
    got = list(v.aggregate([{"$group": {"_id": "$a", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]))
    assert got == [{"_id": 1, "n": 3}, {"_id": 2, "n": 3}]
    # A cursor named after the view, continued by getMore.
    r = db.command("find", v.name, batchSize=2)
    assert r["cursor"]["ns"] == db.name + "." + v.name and r["cursor"]["id"] != 0
    assert len(list(v.find(batch_size=2))) == len(ids)
    assert len(list(v.aggregate([], batchSize=1))) == len(ids)
    # Options an aggregate cannot express.
    assert code_of(lambda: db.command("find", v.name, showRecordId=True)) == 168
    assert code_of(lambda: db.command("find", v.name, returnKey=True)) == 168
    db.drop_collection(v.name)


def test_views_on_views_and_explain(target):
    db, coll = make_coll(target)
    make_view(db, coll.name + "_a", coll.name, [{"$match": {"a": 1}}])
    v2 = make_view(db, coll.name + "_b", coll.name + "_a",
                   [{"$addFields": {"twice": {"$multiply": ["$a", 2]}}}, {"$sort": {"_id": 1}}])
    got = list(v2.find({}, {"twice": 1}))
    assert got == [{"_id": i, "twice": 2} for i in (1, 4, 7)]
    assert v2.count_documents({"_id": {"$gt": 1}}) == 2
    # explain: the aggregate's, its $cursor reading the collection (on the shards through a
    # router).
    ex = db.command("explain", {"find": v2.name, "filter": {"_id": 4}})
    kind, _ = target
    plans = [ex] if kind == "node" else list(ex["shards"].values())
    assert any(p["stages"][0]["$cursor"]["queryPlanner"]["namespace"] == coll.full_name
               for p in plans)
    # Cycles and the depth limit.
    assert code_of(lambda: db.command("create", coll.name + "_self", viewOn=coll.name + "_self",
                                      pipeline=[])) == 5
    assert code_of(lambda: db.command("collMod", coll.name + "_a", viewOn=v2.name,
                                      pipeline=[])) == 5
    prev = coll.name
    for i in range(20):
        db.command("create", "%s_d%d" % (coll.name, i), viewOn=prev, pipeline=[])
        prev = "%s_d%d" % (coll.name, i)
    assert code_of(lambda: db.command("create", coll.name + "_deep", viewOn=prev,
                                      pipeline=[])) == 165


def test_view_definition_errors(target):
    db, coll = make_coll(target, docs=())
    name = coll.name + "_e"
    assert code_of(lambda: db.command("create", name, viewOn=coll.name,
                                      pipeline=[{"$out": "x"}])) == 167
    assert code_of(lambda: db.command("create", name, viewOn=coll.name,
                                      pipeline=[{"$bogus": 1}])) == 40324
    assert code_of(lambda: db.command("create", name, viewOn=1, pipeline=[])) == 14
    assert code_of(lambda: db.command("create", name, viewOn="", pipeline=[])) == 2
    assert code_of(lambda: db.command("create", name, pipeline=[])) == 72
    assert code_of(lambda: db.command("create", name, viewOn=coll.name, capped=True,
                                      size=100)) == 72
    assert code_of(lambda: db.command("create", coll.name, viewOn="x", pipeline=[])) == 48
    make_view(db, name, coll.name, [])
    # The same definition again is accepted; another is not; nor a collection of the name.
    db.command("create", name, viewOn=coll.name, pipeline=[])
    assert code_of(lambda: db.command("create", name, viewOn=coll.name,
                                      pipeline=[{"$match": {}}])) == 48
    assert code_of(lambda: db.command("create", name)) == 48


def test_writes_to_a_view_are_refused(target):
    db, coll = make_coll(target)
    v = make_view(db, coll.name + "_w", coll.name, [])
    assert code_of(lambda: v.insert_one({"_id": 100})) == 166
    assert code_of(lambda: v.update_one({"_id": 1}, {"$set": {"a": 5}})) == 166
    assert code_of(lambda: v.delete_many({})) == 166
    assert code_of(lambda: v.find_one_and_update({"_id": 1}, {"$set": {"a": 5}})) == 166
    assert code_of(lambda: v.create_index("a")) == 166
    if target[0] == "node":
        admin = target[1].admin
        assert code_of(lambda: admin.command("renameCollection", v.full_name,
                                             to=v.full_name + "x")) == 166
        assert code_of(lambda: admin.command("renameCollection", coll.full_name,
                                             to=v.full_name)) == 48
    assert code_of(lambda: db.system.views.insert_one({"_id": "x"})) == 73
    # Collection-only commands (MongoDB's CommandNotSupportedOnView).
    assert code_of(lambda: db.command("collStats", v.name)) == 166
    assert code_of(lambda: db.command("validate", v.name)) == 166
    assert code_of(lambda: db.command("dropIndexes", v.name, index="*")) == 166
    assert code_of(lambda: list(v.list_indexes())) == 166
    assert coll.count_documents({}) == len(DOCS)


def test_list_collections_coll_mod_and_drop(target):
    kind, _ = target
    db, coll = make_coll(target)
    v = make_view(db, coll.name + "_l", coll.name, [{"$match": {"a": 0}}])
    infos = {c["name"]: c for c in db.list_collections(filter={"type": "view"})}
    assert infos[v.name] == {"name": v.name, "type": "view",
                             "options": {"viewOn": coll.name, "pipeline": [{"$match": {"a": 0}}]},
                             "info": {"readOnly": True}}
    assert coll.name not in infos
    assert v.name in db.list_collection_names()
    assert {"name": v.name, "type": "view"} in list(
        db.list_collections(filter={"name": v.name}, nameOnly=True))
    if kind == "node":
        # The definition is a document of system.views.
        assert db.system.views.find_one({"_id": db.name + "." + v.name})["viewOn"] == coll.name
    # collMod replaces the definition (both fields); a collection takes no view options.
    db.command("collMod", v.name, viewOn=coll.name, pipeline=[{"$match": {"a": 2}}])
    assert sorted(d["_id"] for d in v.find()) == [2, 5, 8]
    assert code_of(lambda: db.command("collMod", v.name, pipeline=[])) == 72
    assert code_of(lambda: db.command("collMod", v.name, validator={"a": 1})) == 72
    assert code_of(lambda: db.command("collMod", coll.name, viewOn="x", pipeline=[])) == 72
    # drop: the view goes, its collection stays.
    db.drop_collection(v.name)
    assert v.name not in db.list_collection_names()
    assert list(v.find()) == []
    assert coll.count_documents({}) == len(DOCS)


def test_view_collation(target):
    db, coll = make_coll(target)
    v = make_view(db, coll.name + "_c", coll.name, [{"$project": {"s": 1}}],
                  collation={"locale": "en", "strength": 2})
    opts = next(db.list_collections(filter={"name": v.name}))["options"]
    assert opts["collation"]["locale"] == "en" and opts["collation"]["strength"] == 2
    # The view's collation applies: "x" and "X" are equal at strength 2.
    assert v.count_documents({"s": "x"}) == 7
    assert sorted(v.distinct("s")) in (["x", "y"], ["X", "y"])
    # ...and cannot be overridden.
    assert code_of(lambda: list(v.find({}, collation={"locale": "fr"}))) == 167
    assert code_of(lambda: list(v.find({}, collation={"locale": "simple"}))) == 167
    # A view without one is simple even over a collection with a default.
    assert code_of(lambda: db.command("create", v.name + "2", viewOn=v.name, pipeline=[])) == 167


# ---------------------------------------------------------------- $$NOW / $$CLUSTER_TIME

def test_now_and_cluster_time_are_one_value_across_shards(target):
    """A router binds $$NOW and $$CLUSTER_TIME once per command and sends them to every
    shard (legacyRuntimeConstants), as mongos does: all documents see the same values."""
    kind, _ = target
    db, coll = make_coll(target, docs=[{"_id": i, "sk": i * 10} for i in range(10)])
    for _ in range(3):
        got = list(coll.find({}, {"now": "$$NOW"}))
        assert len(got) == 10 and len({d["now"] for d in got}) == 1
        got = list(coll.aggregate([{"$project": {"now": "$$NOW"}}]))
        assert len(got) == 10 and len({d["now"] for d in got}) == 1
        got = list(db.command("find", coll.name, filter={"$expr": {"$lte": ["$$NOW", "$$NOW"]}},
                              let={"x": 1})["cursor"]["firstBatch"])
        assert len(got) == 10
    # Updates and deletes too.
    coll.update_many({}, [{"$set": {"t": "$$NOW"}}])
    assert len({d["t"] for d in coll.find()}) == 1
    assert coll.delete_many({"$expr": {"$gt": ["$t", "$$NOW"]}}).deleted_count == 0
    if kind != "node":
        got = list(coll.aggregate([{"$project": {"ct": "$$CLUSTER_TIME"}}]))
        assert len(got) == 10 and len({d["ct"] for d in got}) == 1
        # A view's pipeline sees them too.
        v = make_view(db, coll.name + "_now", coll.name, [{"$addFields": {"now": "$$NOW"}}])
        got = list(v.find())
        assert len(got) == 10 and len({d["now"] for d in got}) == 1


# ---------------------------------------------------------------- the Node driver

@pytest.mark.parametrize("where", ["node", "sharded"])
def test_node_driver_views(where, plain_node, routed):
    import json
    import os
    import subprocess
    from test_node_driver import HERE, node_binary
    args = [plain_node.uri()] if where == "node" else [routed.uri(), "sharded"]
    out = subprocess.run([node_binary(), os.path.join(HERE, "views.js")] + args,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["find"] == [{"_id": 2, "a": 2}, {"_id": 5, "a": 2}, {"_id": 8, "a": 2}]
    assert r["batches"] == 6
    assert r["count"] == 3
    assert r["distinct"] == [1, 2]
    assert r["agg"] == [{"_id": None, "n": 6}]
    assert r["list"] == [{"name": "v", "viewOn": "c"}]
    assert r["insert"] == 166
    assert r["dropped"] is True and r["after"] == 0


def test_search_meta_and_bad_variable_names(target):
    """$$SEARCH_META is defined only after $search (Atlas Search, which Shale does not have):
    reading it fails with 6347902, assigning it with FailedToParse; user variables must start
    with a lowercase letter (16867) and hold only letters, digits and '_' (16868)."""
    db, coll = make_coll(target, docs=[{"_id": 1, "sk": 1}])
    assert code_of(lambda: list(coll.aggregate([{"$project": {"m": "$$SEARCH_META"}}]))) == 6347902
    assert code_of(lambda: list(coll.aggregate([{"$lookup": {
        "from": coll.name, "let": {"SEARCH_META": "$sk"}, "as": "j", "pipeline": []}}]))) == 9
    assert code_of(lambda: db.command("find", coll.name, let={"SEARCH_META": 1})) == 9
    assert code_of(lambda: db.command("aggregate", coll.name, pipeline=[], cursor={},
                                      let={"NOW": 1})) == 16867
    assert code_of(lambda: db.command("find", coll.name, let={"a-b": 1})) == 16868
    # A node refuses the command; through a router the shard's refusal is the statement's.
    r = db.command("delete", coll.name, let={"Bad": 1}, deletes=[{"q": {}, "limit": 0}],
                   check=False)
    assert r.get("code") == 16867 or r["writeErrors"][0]["code"] == 16867
    assert coll.count_documents({}) == 1


def test_lookup_and_union_with_from_a_view(target):
    db, coll = make_coll(target)
    v = make_view(db, coll.name + "_lk", coll.name,
                  [{"$match": {"a": 2}}, {"$project": {"a": 1, "tag": {"$literal": "v"}}}])
    got = list(coll.aggregate([
        {"$match": {"_id": {"$in": [1, 2]}}}, {"$sort": {"_id": 1}},
        {"$lookup": {"from": v.name, "localField": "a", "foreignField": "a", "as": "j"}},
        {"$project": {"n": {"$size": "$j"}, "tags": "$j.tag"}}]))
    assert got == [{"_id": 1, "n": 0, "tags": []}, {"_id": 2, "n": 3, "tags": ["v"] * 3}]
    got = list(coll.aggregate([{"$match": {"_id": 0}}, {"$unionWith": v.name},
                               {"$sort": {"_id": 1}}, {"$project": {"_id": 1}}]))
    assert [d["_id"] for d in got] == [0, 2, 5, 8]


def test_lookup_of_a_large_view(target):
    """A view read by $lookup/$unionWith through the router's merger comes whole, however
    many batches it takes (a view on a sharded collection is the router's own aggregate)."""
    db, coll = make_coll(target, [{"_id": i, "sk": i % 100, "a": i % 3} for i in range(450)])
    v = make_view(db, coll.name + "_big", coll.name, [{"$match": {"a": {"$lt": 2}}}])
    want = sum(1 for i in range(450) if i % 3 < 2)
    got = list(coll.aggregate([{"$match": {"_id": 0}}, {"$unionWith": v.name},
                               {"$count": "n"}]))
    assert got == [{"n": want + 1}]
    got = list(coll.aggregate([
        {"$match": {"_id": {"$in": [0, 1]}}}, {"$sort": {"_id": 1}},
        {"$lookup": {"from": v.name, "localField": "a", "foreignField": "a", "as": "j"}},
        {"$project": {"n": {"$size": "$j"}}}]))
    assert got == [{"_id": 0, "n": 150}, {"_id": 1, "n": 150}]
