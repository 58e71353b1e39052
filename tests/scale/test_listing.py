"""A database of 1,000 collections listed through the router (issue 23 item 3): the
router's listCollections of the primary shard, in one batch and in many (getMore)."""

from scale_util import RECORDER

N_COLLS = 1000
DB = "scale_list"


def _names():
    return ["c%04d" % i for i in range(N_COLLS)]


def test_list_a_database_of_1000_collections(scale_cluster):
    r = scale_cluster.router_client(socketTimeoutMS=0)
    r.admin.command("enableSharding", DB, primaryShard="shard0")
    db = r[DB]
    with RECORDER.phase("test_list_a_database_of_1000_collections", "create 1,000 collections"):
        for i, name in enumerate(_names()):
            db.create_collection(name)
            if i % 10 == 0:  # every tenth one holds a document and a secondary index
                db[name].insert_one({"_id": i, "x": i})
                db[name].create_index("x")
    want = set(_names())
    with RECORDER.phase("test_list_a_database_of_1000_collections",
                        "listCollections (driver default batches)"):
        infos = list(db.list_collections())
    assert {c["name"] for c in infos} == want and len(infos) == N_COLLS
    assert all(c["type"] == "collection" and "uuid" in c["info"] for c in infos)
    with RECORDER.phase("test_list_a_database_of_1000_collections",
                        "listCollections nameOnly, batchSize 7") as ph:
        # (mongos answers in batches of 7 and getMores: the note tells how many there were)
        reply = db.command("listCollections", nameOnly=True, cursor={"batchSize": 7})
        cur = reply["cursor"]
        names = [c["name"] for c in cur["firstBatch"]]
        batches = 1
        while cur["id"] != 0:
            cur = db.command("getMore", cur["id"], collection="$cmd.listCollections",
                             batchSize=7)["cursor"]
            names += [c["name"] for c in cur["nextBatch"]]
            batches += 1
        ph["note"] = "%d batch(es)" % batches
    assert sorted(names) == sorted(want) and len(names) == N_COLLS
    with RECORDER.phase("test_list_a_database_of_1000_collections",
                        "listCollections filter, listDatabases, dbStats"):
        got = db.list_collection_names(filter={"name": {"$regex": "^c09"}})
        assert sorted(got) == ["c%04d" % i for i in range(900, 1000)]
        dbs = {d["name"]: d for d in r.admin.command("listDatabases")["databases"]}
        assert DB in dbs
        stats = db.command("dbStats")
        assert stats["collections"] == N_COLLS
        assert stats["objects"] == N_COLLS // 10
    # The primary shard holds them all.
    direct = scale_cluster.shard_client(0)[DB].list_collection_names()
    assert set(direct) >= want
