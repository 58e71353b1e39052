"""Text indexes (issue 20 item 5, first part): createIndexes with text keys as pymongo spells
them, the normalised spec listIndexes shows (textIndexVersion 3), MongoDB's errors, one text
index per collection, documents indexed in their language (an unsupported one refused), and
the index kept out of ordinary query plans; on a node and through a 2-shard router.
docs/design/text_search.md says what is left ($text queries, textScore)."""

import pytest
from pymongo import ASCENDING, TEXT
from pymongo.errors import OperationFailure, WriteError

from shale_fixtures import shard_on_id


@pytest.fixture(scope="module")
def routed(cluster):
    return shard_on_id(cluster.router_client(), "textdb", "sh")


@pytest.fixture(params=["node", "router"])
def coll(request, module_node, routed):
    if request.param == "node":
        c = module_node.client().textdb.c
        c.drop()
    else:
        c = routed.sh
        c.delete_many({})
        c.drop_indexes()
    return c


def spec_of(c, name):
    return next(i for i in c.list_indexes() if i["name"] == name)


def test_create_and_list(coll):
    name = coll.create_index([("title", TEXT), ("body", TEXT)], weights={"title": 10},
                             default_language="french", language_override="lang")
    assert name == "title_text_body_text"
    s = spec_of(coll, name)
    assert s["key"] == {"_fts": "text", "_ftsx": 1}
    assert s["weights"] == {"body": 1, "title": 10}
    assert s["default_language"] == "french"
    assert s["language_override"] == "lang"
    assert s["textIndexVersion"] == 3
    # The same index again is a no-op; another text index is refused.
    coll.create_index([("title", TEXT), ("body", TEXT)], weights={"title": 10},
                      default_language="french", language_override="lang")
    with pytest.raises(OperationFailure) as e:
        coll.create_index([("other", TEXT)])
    assert e.value.code == 85


def test_compound_and_wildcard(coll):
    coll.create_index([("cat", ASCENDING), ("$**", TEXT)], name="cat_all")
    s = spec_of(coll, "cat_all")
    assert list(s["key"].items()) == [("cat", 1), ("_fts", "text"), ("_ftsx", 1)]
    assert s["weights"] == {"$**": 1}
    assert s["default_language"] == "english" and s["language_override"] == "language"


BAD = [
    ({"weights": {"t": 0}}, 67),
    ({"weights": {"t": 100000}}, 67),
    ({"weights": {"t": "x"}}, 67),
    ({"default_language": "klingon"}, 17262),
    ({"textIndexVersion": 2}, 67),
]


@pytest.mark.parametrize("opts,code", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_specs(coll, opts, code):
    with pytest.raises(OperationFailure) as e:
        coll.create_index([("t", TEXT)], **opts)
    assert e.value.code == code


def test_documents_and_plans(coll):
    coll.create_index([("t", TEXT)])
    coll.insert_many([{"_id": 1, "t": "running shoes", "n": 1},
                      {"_id": 11, "t": "Le café", "language": "french", "n": 2},
                      {"_id": 12, "t": ["red", "blue"], "n": 3},
                      {"_id": 13, "n": 4}])
    # A document naming an unsupported language is refused, and nothing else harmed.
    with pytest.raises(WriteError) as e:
        coll.insert_one({"_id": 2, "t": "x", "language": "klingon"})
    assert e.value.code == 17262
    coll.update_one({"_id": 1}, {"$set": {"t": "walking"}})
    coll.delete_one({"_id": 12})
    # Ordinary queries never use the text index (its keys are terms).
    assert sorted(d["_id"] for d in coll.find({"n": {"$gte": 1}})) == [1, 11, 13]
    assert [d["_id"] for d in coll.find({"t": "walking"})] == [1]
    plan = coll.find({"t": "walking"}).explain()["queryPlanner"]["winningPlan"]
    assert "t_text" not in str(plan)
    coll.drop_index("t_text")
    assert [i["name"] for i in coll.list_indexes()] == ["_id_"]


def test_text_index_survives_restart(node):
    c = node.client().textdb.r
    c.create_index([("t", TEXT)], weights={"t": 3})
    c.database.command("insert", "r", documents=[{"_id": 1, "t": "x"}],
                       writeConcern={"j": True})
    node.kill()
    node.start()
    c = node.client().textdb.r
    s = spec_of(c, "t_text")
    assert s["weights"] == {"t": 3} and s["key"] == {"_fts": "text", "_ftsx": 1}
    with pytest.raises(WriteError) as e:
        c.insert_one({"_id": 2, "t": "x", "language": "klingon"})
    assert e.value.code == 17262


def _node_gaps(uri, *args):
    import json
    import os
    import subprocess
    from test_node_driver import node_binary, HERE
    out = subprocess.run([node_binary(), os.path.join(HERE, "query_gaps2.js"), uri] +
                         list(args), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["addToSet"] == ["Apple"]
    assert r["arrayFilter"] == 1
    assert r["setUnion"] == 2
    assert r["dollarDoc"] == {"_id": 2, "$price": 5, "a.b": 1, "n": {"$db": "x"}}
    assert r["replaceCode"] == 52
    assert r["getField"] == 5
    assert r["textName"] == "title_text_body_text"
    assert r["textSpec"] == {"key": {"_fts": "text", "_ftsx": 1},
                             "weights": {"body": 1, "title": 5}, "lang": "spanish",
                             "version": 3}
    assert r["secondTextCode"] == 85
    # weight 5 x one term of one; "gato gato perro": 1.5 x (0.5 + 0.5 x 2/3)
    assert r["textScores"] == [[3, 5], [12, 1.25]]


def test_node_driver_spellings(module_node):
    """Collation gaps, '$' field names and text indexes through the Node driver."""
    _node_gaps(module_node.uri())


def test_node_driver_spellings_sharded(routed, cluster):
    _node_gaps(cluster.uri(), "sharded")


DOCS = [{"_id": 1, "t": "running shoes for men", "n": 1},
        {"_id": 2, "t": "Coffee and tea", "n": 2},
        {"_id": 11, "t": "Le caf\u00e9 cr\u00e8me", "language": "french", "n": 3},
        {"_id": 12, "t": "iced coffee", "n": 1, "tags": ["cold", "Summer"]},
        {"_id": 13, "t": "the"}]

SEARCHES = [
    ({"$search": "run"}, [1]),
    ({"$search": "RUNS"}, [1]),
    ({"$search": "coffee"}, [2, 12]),
    ({"$search": "coffee -tea"}, [12]),
    ({"$search": "\"iced coffee\""}, [12]),
    ({"$search": "-coffee"}, []),
    ({"$search": "the"}, []),
    ({"$search": "summer"}, [12]),
    ({"$search": "Coffee", "$caseSensitive": True}, [2]),
    ({"$search": "cafe", "$language": "french"}, [11]),
]


@pytest.mark.parametrize("text,want", SEARCHES, ids=[str(i) for i in range(len(SEARCHES))])
def test_text_queries(coll, text, want):
    """$text as find, count, aggregate's first $match, update and delete filters see it;
    differential: the same documents whatever the other predicates' plan."""
    coll.create_index([("t", TEXT), ("tags", TEXT)])
    coll.create_index("n")
    coll.insert_many(DOCS)
    assert sorted(d["_id"] for d in coll.find({"$text": text})) == want
    assert coll.count_documents({"$text": text}) == len(want)
    got = coll.aggregate([{"$match": {"$text": text}}, {"$project": {"_id": 1}}])
    assert sorted(d["_id"] for d in got) == want
    with_n = sorted(d["_id"] for d in coll.find({"$text": text, "n": 1}))
    assert with_n == [i for i in want if i in (1, 12)]


def test_text_query_errors(coll):
    coll.insert_many(DOCS)
    with pytest.raises(OperationFailure) as e:
        list(coll.find({"$text": {"$search": "x"}}))
    assert e.value.code == 27  # no text index
    coll.create_index([("t", TEXT)])
    for bad, code in (({"$search": 1}, 2), ({"$search": "x", "$language": "xx"}, 17262),
                      ({"$search": "x", "$other": 1}, 2)):
        with pytest.raises(OperationFailure) as e:
            list(coll.find({"$text": bad}))
        assert e.value.code == code
    # Only at the top level, and only in the first $match.
    with pytest.raises(OperationFailure):
        list(coll.find({"$or": [{"$text": {"$search": "x"}}, {"n": 1}]}))
    with pytest.raises(OperationFailure):
        list(coll.aggregate([{"$match": {"n": 1}}, {"$match": {"$text": {"$search": "x"}}}]))
    # Writes by $text.
    assert coll.update_many({"$text": {"$search": "coffee"}},
                            {"$set": {"hit": True}}).modified_count == 2
    assert coll.delete_many({"$text": {"$search": "shoe"}}).deleted_count == 1
    assert sorted(d["_id"] for d in coll.find({"hit": True})) == [2, 12]


# MongoDB's scores (weight x damped frequency x (0.5 + 0.5 x share), 1.1 for a whole-string
# term): "coffee" 1.0; "coffee coffee tea": coffe 1.5 x 5/6 = 1.25, tea 1 x 2/3; "iced
# coffee" 0.75; "Tea" is its own term: 1.1; title (weight 10) "coffee": 10.
SCORED = [{"_id": 1, "t": "coffee"},
          {"_id": 2, "t": "coffee coffee tea"},
          {"_id": 11, "t": "iced coffee"},
          {"_id": 12, "t": "Tea"},
          {"_id": 13, "t": "juice", "title": "coffee"}]


def _scored(coll):
    coll.create_index([("t", TEXT), ("title", TEXT)], weights={"title": 10})
    coll.insert_many(SCORED)


def test_text_score_find(coll):
    """{$meta: "textScore"} in find's projection and sort; the router merges the shards'
    results by score; no document shows the score it did not ask for."""
    _scored(coll)
    got = list(coll.find({"$text": {"$search": "coffee"}}, {"s": {"$meta": "textScore"}})
               .sort([("s", {"$meta": "textScore"})]))
    assert [d["_id"] for d in got] == [13, 2, 1, 11]
    assert [round(d["s"], 4) for d in got] == [10.0, 1.25, 1.0, 0.75]
    assert set(got[1]) == {"_id", "t", "s"}  # {$meta} alone keeps the other fields
    # Sorted by score, projected without it; and with other predicates.
    got = list(coll.find({"$text": {"$search": "coffee tea"}}, {"_id": 1})
               .sort([("x", {"$meta": "textScore"})]))
    assert [d for d in got] == [{"_id": 13}, {"_id": 2}, {"_id": 12}, {"_id": 1}, {"_id": 11}]
    got = list(coll.find({"$text": {"$search": "coffee"}}).sort([("s", {"$meta": "textScore"})])
               .limit(2))
    assert [sorted(d) for d in got] == [["_id", "t", "title"], ["_id", "t"]]
    # Across getMores too.
    got = list(coll.find({"$text": {"$search": "coffee tea"}}).sort([("s", {"$meta": "textScore"})])
               .batch_size(2))
    assert [d["_id"] for d in got] == [13, 2, 12, 1, 11]
    assert all(set(d) <= {"_id", "t", "title"} for d in got)
    got = list(coll.find({"$text": {"$search": "tea"}}, {"t": 0, "s": {"$meta": "textScore"}}))
    assert sorted((d["_id"], round(d["s"], 4)) for d in got) == [(2, 0.6667), (12, 1.1)]
    with pytest.raises(OperationFailure) as e:
        list(coll.find({}, {"s": {"$meta": "textScore"}}))
    assert e.value.code == 40218


def test_text_score_aggregate(coll):
    _scored(coll)
    got = list(coll.aggregate([
        {"$match": {"$text": {"$search": "coffee tea"}}},
        {"$sort": {"s": {"$meta": "textScore"}}},
        {"$addFields": {"s": {"$meta": "textScore"}}},
        {"$project": {"t": 0, "title": 0}}]))
    assert [d["_id"] for d in got] == [13, 2, 12, 1, 11]
    assert round(got[1]["s"], 4) == round(1.25 + 2 / 3, 4)
    assert all(set(d) == {"_id", "s"} for d in got)
    got = list(coll.aggregate([{"$match": {"$text": {"$search": "coffee"}}},
                               {"$project": {"s": {"$meta": "textScore"}}},
                               {"$match": {"s": {"$gt": 0.9}}}]))
    assert sorted(d["_id"] for d in got) == [1, 2, 13]
    # The score is metadata: an inclusion $project keeps it for later stages.
    got = list(coll.aggregate([{"$match": {"$text": {"$search": "coffee"}}},
                               {"$project": {"t": 1}},
                               {"$sort": {"s": {"$meta": "textScore"}}},
                               {"$addFields": {"s": {"$meta": "textScore"}}}]))
    assert [(d["_id"], round(d["s"], 4)) for d in got] == [(13, 10.0), (2, 1.25), (1, 1.0),
                                                          (11, 0.75)]
    assert all(set(d) == {"_id", "t", "s"} for d in got)
    with pytest.raises(OperationFailure) as e:
        list(coll.aggregate([{"$match": {"t": "x"}}, {"$sort": {"s": {"$meta": "textScore"}}}]))
    assert e.value.code == 40218
    # $replaceRoot/$replaceWith keep the score (metadata); $group's output has none.
    got = list(coll.aggregate([{"$match": {"$text": {"$search": "coffee"}}},
                               {"$replaceWith": {"k": "$_id"}},
                               {"$sort": {"s": {"$meta": "textScore"}}},
                               {"$addFields": {"s": {"$meta": "textScore"}}}]))
    assert [(d["k"], round(d["s"], 4)) for d in got] == [(13, 10.0), (2, 1.25), (1, 1.0),
                                                         (11, 0.75)]
    assert all(set(d) == {"k", "s"} for d in got)
    got = list(coll.aggregate([{"$match": {"$text": {"$search": "coffee"}}},
                               {"$group": {"_id": None, "m": {"$max": {"$meta": "textScore"}}}},
                               {"$addFields": {"s": {"$meta": "textScore"}}}]))
    assert got == [{"_id": None, "m": 10.0}]
    # Whole documents come back without the score they carried.
    got = list(coll.aggregate([{"$match": {"$text": {"$search": "tea"}}}]))
    assert sorted(sorted(d) for d in got) == [["_id", "t"], ["_id", "t"]]


def test_text_index_scan(coll):
    """$text reads the text index: only the documents holding a term are fetched."""
    _scored(coll)
    coll.insert_many([{"_id": 100 + i, "t": "water %d" % i} for i in range(30)])
    ex = coll.database.command("explain", {"find": coll.name,
                                           "filter": {"$text": {"$search": "coffee"}}},
                               verbosity="executionStats")
    text = str(ex)
    assert "TEXT_MATCH" in text and "TEXT_OR" in text and "t_text_title_text" in text
    assert "COLLSCAN" not in text
    stats = ex["executionStats"]
    assert stats["totalDocsExamined"] == 4 and stats["nReturned"] == 4


def test_compound_text_index(coll):
    coll.create_index([("cat", ASCENDING), ("t", TEXT)])
    coll.insert_many([{"_id": 1, "cat": 1, "t": "red apple"}, {"_id": 2, "cat": 2, "t": "apple"},
                      {"_id": 11, "cat": 1, "t": "apple pie"}, {"_id": 12, "cat": 1, "t": "pie"}])
    got = coll.find({"cat": 1, "$text": {"$search": "apple"}})
    assert sorted(d["_id"] for d in got) == [1, 11]
    with pytest.raises(OperationFailure) as e:
        list(coll.find({"$text": {"$search": "apple"}}))
    assert e.value.code == 291  # the prefix needs an equality predicate


def test_text_under_and_or(coll):
    """$text under $and; under $or when every other clause can use an index (291 otherwise,
    as MongoDB); two $text are refused."""
    _scored(coll)
    coll.update_many({"_id": {"$in": [1, 12]}}, {"$set": {"n": 1}})
    got = coll.find({"$and": [{"n": 1}, {"$text": {"$search": "coffee"}}]})
    assert sorted(d["_id"] for d in got) == [1]
    with pytest.raises(OperationFailure) as e:
        list(coll.find({"$or": [{"$text": {"$search": "coffee"}}, {"n": 1}]}))
    assert e.value.code == 291
    coll.create_index("n")
    got = list(coll.find({"$or": [{"$text": {"$search": "coffee"}}, {"n": 1}]},
                         {"s": {"$meta": "textScore"}}))
    assert sorted(d["_id"] for d in got) == [1, 2, 11, 12, 13]
    assert {d["_id"]: round(d.get("s", 0), 4) for d in got}[12] == 0  # matched by n alone
    assert coll.count_documents({"$or": [{"$text": {"$search": "tea"}}, {"n": 1}]}) == 3
    with pytest.raises(OperationFailure) as e:
        list(coll.find({"$text": {"$search": "a"}, "$and": [{"$text": {"$search": "b"}}]}))
    assert e.value.code == 2


def test_text_score_unsharded_through_router(cluster):
    """An unsharded collection's shard answers the router whole: the score still never
    reaches the client unasked."""
    c = cluster.router_client().textdb_unsharded.c
    c.drop()
    _scored(c)
    got = list(c.find({"$text": {"$search": "coffee"}}).sort([("s", {"$meta": "textScore"})]))
    assert [d["_id"] for d in got] == [13, 2, 1, 11]
    assert all(set(d) <= {"_id", "t", "title"} for d in got)
    got = list(c.aggregate([{"$match": {"$text": {"$search": "coffee"}}},
                            {"$sort": {"s": {"$meta": "textScore"}}}]))
    assert [d["_id"] for d in got] == [13, 2, 1, 11]
    assert all(set(d) <= {"_id", "t", "title"} for d in got)
    got = list(c.find({"$text": {"$search": "tea"}}, {"s": {"$meta": "textScore"}, "_id": 0,
                                                      "t": 0}))
    assert sorted(round(d["s"], 4) for d in got) == [0.6667, 1.1]
