"""Writes and DDL through the router (`shale router`): batches split per shard and
reassembled in the user's order, single-document writes targeted by the shard key or _id,
MongoDB's errors for untargetable writes, and the DDL/catalog commands. Real processes: a
config server, two shards and a router; the sharding catalog is written directly on the
config server (schemas: src/sharding/catalog_types.h), and each shard is read directly to
check where documents landed."""

import datetime
import time
import uuid

import pymongo
import pytest
from bson import ObjectId, Timestamp
from bson.binary import Binary, UUID_SUBTYPE
from bson.max_key import MaxKey
from bson.min_key import MinKey
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

from shale_fixtures import ShaleProcess, stop_all

DB = "rw"


def _uuid():
    return Binary(uuid.uuid4().bytes, UUID_SUBTYPE)


class HandCluster:
    """A config server, two shards and a router, with the catalog written by hand."""

    def __init__(self):
        self.procs = []
        self.cfg = self._start(["node", "--configsvr", "--replSet", "csrs"], "cfg")
        self.shards = [self._start(["node", "--shardsvr", "--replSet", "shard%d" % i],
                                   "shard%d" % i) for i in range(2)]
        self.cfgc = pymongo.MongoClient(self.cfg.host, serverSelectionTimeoutMS=10000)
        version = self.cfgc.config.version.find_one({"_id": 1})
        cluster_id = version["clusterId"] if version else ObjectId()
        for i, s in enumerate(self.shards):
            self.cfgc.config.shards.insert_one(
                {"_id": "shard%d" % i, "host": "shard%d/%s" % (i, s.host), "state": 1})
            # What addShard tells a shard (docs/design/sharding-protocol.md); a shard without
            # the shard role's commands yet answers CommandNotFound and stays unversioned.
            try:
                s.client().admin.command(
                    "_addShard", 1, shardIdentity={"shardName": "shard%d" % i,
                                                   "clusterId": cluster_id,
                                                   "configsvrConnectionString":
                                                   "csrs/" + self.cfg.host})
            except OperationFailure as e:
                if e.code != 59:
                    raise
        self.router = self._start(["router", "--configdb", "csrs/" + self.cfg.host], "router")
        self.clients = [s.client() for s in self.shards]

    def _start(self, args, name):
        p = ShaleProcess(args, name=name)
        self.procs.append(p)
        return p.start()

    def add_db(self, name, primary):
        self.cfgc.config.databases.insert_one(
            {"_id": name, "primary": primary,
             "version": {"uuid": _uuid(), "timestamp": Timestamp(int(time.time()), 1),
                         "lastMod": 1}})

    def shard_collection(self, ns, key, chunks):
        """chunks: [(min, max, shard)] covering the key space in order."""
        epoch, coll_uuid = ObjectId(), _uuid()
        ts = Timestamp(int(time.time()), 2)
        self.cfgc.config.collections.insert_one(
            {"_id": ns, "lastmodEpoch": epoch, "lastmod": datetime.datetime.utcnow(),
             "timestamp": ts, "uuid": coll_uuid, "key": key, "unique": False,
             "noBalance": False})
        for i, (lo, hi, shard) in enumerate(chunks):
            self.cfgc.config.chunks.insert_one(
                {"_id": ObjectId(), "uuid": coll_uuid, "min": lo, "max": hi, "shard": shard,
                 "lastmod": Timestamp(1, i), "history": [{"validAfter": ts, "shard": shard}]})
        # pymongo 3's legacy UUID handling would re-encode a decoded uuid as subtype 3, so
        # queries use the Binary returned here.
        return coll_uuid

    def on_shard(self, i, coll):
        return self.clients[i][DB][coll]

    def close(self, failed):
        self.cfgc.close()
        for c in self.clients:
            c.close()
        stop_all(self.procs)
        for p in reversed(self.procs):
            p.cleanup(keep_log_as=("router_writes-%s" % p.name) if failed else None)


@pytest.fixture(scope="module")
def cluster(request):
    c = HandCluster()
    # rw's primary is shard1, so "went to the primary" and "went to the first shard" differ.
    c.add_db(DB, "shard1")
    # x < 0 and x >= 100 on shard0, [0, 100) on shard1.
    for name in ("ins", "ord", "upd", "fam"):
        c.shard_collection("%s.%s" % (DB, name), {"x": 1},
                           [({"x": MinKey()}, {"x": 0}, "shard0"),
                            ({"x": 0}, {"x": 100}, "shard1"),
                            ({"x": 100}, {"x": MaxKey()}, "shard0")])
    c.router_client = c.router.client()
    yield c
    c.router_client.close()
    c.close(getattr(request.node, "rep_failed", False))


def owner(x):
    return 1 if x is not None and 0 <= x < 100 else 0


def xs_on(cluster, i, coll):
    return sorted(d.get("x") for d in cluster.on_shard(i, coll).find({}, {"x": 1})
                  if d.get("x") is not None)


def test_insert_lands_on_the_owning_shard(cluster):
    db = cluster.router_client[DB]
    for ordered in (True, False):
        db.ins.delete_many({"x": {"$gte": -1000}})
        docs = [{"_id": "%s-%d" % (ordered, x), "x": x} for x in range(-60, 160, 3)]
        res = db.ins.insert_many(docs, ordered=ordered)
        assert len(res.inserted_ids) == len(docs)
        for i in (0, 1):
            want = sorted(d["x"] for d in docs if owner(d["x"]) == i)
            assert xs_on(cluster, i, "ins") == want
    # Without _id the router chooses an ObjectId before routing (as mongos does).
    reply = db.command("insert", "ins", documents=[{"x": 7000}, {"x": 41}])
    assert reply["n"] == 2
    on0 = cluster.on_shard(0, "ins").find_one({"x": 7000})
    on1 = cluster.on_shard(1, "ins").find_one({"x": 41})
    assert isinstance(on0["_id"], ObjectId) and isinstance(on1["_id"], ObjectId)


def test_ordered_batch_stops_at_the_first_error_in_user_order(cluster):
    db = cluster.router_client[DB]
    db.ord.insert_many([{"_id": "dup", "x": -5}])
    # shard0, shard1, shard0 (duplicate), shard1: two inserted, error at index 2, stop.
    docs = [{"_id": "a", "x": -1}, {"_id": "b", "x": 1}, {"_id": "dup", "x": -2},
            {"_id": "c", "x": 2}]
    with pytest.raises(BulkWriteError) as e:
        db.ord.insert_many(docs, ordered=True)
    details = e.value.details
    assert details["nInserted"] == 2
    assert [(w["index"], w["code"]) for w in details["writeErrors"]] == [(2, 11000)]
    assert cluster.on_shard(1, "ord").find_one({"_id": "c"}) is None
    assert cluster.on_shard(0, "ord").find_one({"_id": "a"}) is not None
    assert cluster.on_shard(1, "ord").find_one({"_id": "b"}) is not None


def test_unordered_batch_reports_every_error_at_its_index(cluster):
    db = cluster.router_client[DB]
    db.ord.insert_many([{"_id": "u-dup0", "x": -7}, {"_id": "u-dup1", "x": 7}])
    docs = [{"_id": "u1", "x": -10}, {"_id": "u2", "x": 10}, {"_id": "u-dup1", "x": 8},
            {"_id": "u3", "x": 120}, {"_id": "u-dup0", "x": -8}, {"_id": "u4", "x": 11}]
    with pytest.raises(BulkWriteError) as e:
        db.ord.insert_many(docs, ordered=False)
    details = e.value.details
    assert details["nInserted"] == 4
    assert [(w["index"], w["code"]) for w in details["writeErrors"]] == [(2, 11000), (4, 11000)]
    assert details["writeErrors"][0]["keyValue"] == {"_id": "u-dup1"}
    for _id, x in (("u1", -10), ("u2", 10), ("u3", 120), ("u4", 11)):
        assert cluster.on_shard(owner(x), "ord").find_one({"_id": _id})["x"] == x


def test_a_batch_larger_than_one_shard_command_is_split(cluster):
    # 20 MB for shard1 does not fit in one 16 MB command: the router sends it in two.
    db = cluster.router_client[DB]
    big = "b" * (1024 * 1024)
    docs = [{"_id": "big%d" % i, "x": 1000 + i if i == 0 else i, "s": big} for i in range(21)]
    res = db.ins.insert_many(docs, ordered=False)
    assert len(res.inserted_ids) == 21
    assert cluster.on_shard(1, "ins").count_documents({"_id": {"$regex": "^big"}}) == 20
    assert cluster.on_shard(0, "ins").count_documents({"_id": {"$regex": "^big"}}) == 1
    db.ins.delete_many({"_id": {"$regex": "^big"}})


def test_missing_and_array_shard_keys(cluster):
    db = cluster.router_client[DB]
    # MongoDB 7.0: a missing shard key field is routed as null (below every number).
    reply = db.command("insert", "ins", documents=[{"_id": "nokey", "y": 1},
                                                   {"_id": "arr", "x": [1, 2]},
                                                   {"_id": "after", "x": 50}], ordered=False)
    assert reply["n"] == 2
    assert [(w["index"], w["code"]) for w in reply["writeErrors"]] == [(1, 61)]
    assert "array" in reply["writeErrors"][0]["errmsg"]
    assert cluster.on_shard(0, "ins").find_one({"_id": "nokey"}) == {"_id": "nokey", "y": 1}
    assert cluster.on_shard(1, "ins").find_one({"_id": "after"})["x"] == 50
    assert cluster.on_shard(1, "ins").find_one({"_id": "arr"}) is None


def test_multi_update_and_delete_reach_every_shard(cluster):
    db = cluster.router_client[DB]
    docs = [{"_id": "m%d" % x, "x": x, "g": "multi"} for x in (-30, -20, 10, 20, 130)]
    db.upd.insert_many(docs)
    res = db.upd.update_many({"g": "multi"}, {"$set": {"seen": True}})
    assert (res.matched_count, res.modified_count) == (5, 5)
    for i in (0, 1):
        assert cluster.on_shard(i, "upd").count_documents({"g": "multi", "seen": True}) == \
            sum(1 for d in docs if owner(d["x"]) == i)
    res = db.upd.delete_many({"g": "multi", "x": {"$lt": 15}})
    assert res.deleted_count == 3
    assert xs_on(cluster, 0, "upd") == [130]
    assert xs_on(cluster, 1, "upd") == [20]
    db.upd.delete_many({"g": "multi"})


def test_single_writes_target_by_shard_key_or_id(cluster):
    db = cluster.router_client[DB]
    db.upd.insert_many([{"_id": "s1", "x": 5, "k": 1}, {"_id": "s2", "x": 105, "k": 1}])
    res = db.upd.update_one({"x": 105}, {"$inc": {"n": 1}})
    assert (res.matched_count, res.modified_count) == (1, 1)
    assert cluster.on_shard(0, "upd").find_one({"_id": "s2"})["n"] == 1
    # No shard key, but an exact _id: every shard is asked, one matches (MongoDB 7.0).
    res = db.upd.update_one({"_id": "s1"}, {"$inc": {"n": 5}})
    assert (res.matched_count, res.modified_count) == (1, 1)
    assert cluster.on_shard(1, "upd").find_one({"_id": "s1"})["n"] == 5
    # Neither: MongoDB 7.0's write without shard key (one document, found first).
    res = db.upd.update_one({"k": 1}, {"$set": {"n": 0}})
    assert (res.matched_count, res.modified_count) == (1, 1)
    assert db.upd.count_documents({"k": 1, "n": 0}) == 1
    res = db.upd.delete_one({"k": 1, "x": 5})
    assert res.deleted_count == 1
    db.upd.insert_one({"_id": "s1", "x": 5, "k": 1})
    # Moving a document to another shard by changing its key moves it.
    assert db.upd.update_one({"x": 5}, {"$set": {"x": 150}}).modified_count == 1
    assert cluster.on_shard(0, "upd").find_one({"_id": "s1"})["x"] == 150
    db.upd.update_one({"x": 150}, {"$set": {"x": 5}})
    assert cluster.on_shard(1, "upd").find_one({"_id": "s1"})["x"] == 5
    # Within the same shard it is fine.
    db.upd.update_one({"x": 5}, {"$set": {"x": 6}})
    assert cluster.on_shard(1, "upd").find_one({"_id": "s1"})["x"] == 6
    res = db.upd.delete_one({"_id": "s2"})
    assert res.deleted_count == 1
    assert cluster.on_shard(0, "upd").find_one({"_id": "s2"}) is None
    db.upd.delete_many({"k": 1})


def test_upserts_land_on_the_owning_shard(cluster):
    db = cluster.router_client[DB]
    res = db.upd.update_one({"x": 77}, {"$set": {"up": 1}}, upsert=True)
    assert res.upserted_id is not None
    assert cluster.on_shard(1, "upd").find_one({"_id": res.upserted_id})["x"] == 77
    assert cluster.on_shard(0, "upd").find_one({"x": 77}) is None
    # Without the shard key: MongoDB 7.0 upserts by the two-phase protocol (null key: shard0).
    res = db.upd.update_one({"up": 2}, {"$set": {"up": 3}}, upsert=True)
    assert cluster.on_shard(0, "upd").find_one({"_id": res.upserted_id})["up"] == 3
    db.upd.delete_one({"_id": res.upserted_id})
    # upserted entries carry the user's statement index.
    reply = db.command("update", "upd", updates=[
        {"q": {"x": 77}, "u": {"$inc": {"up": 1}}},
        {"q": {"x": -77}, "u": {"$set": {"up": 1}}, "upsert": True},
        {"q": {"x": 177}, "u": {"$set": {"up": 1}}, "upsert": True}], ordered=False)
    assert reply["n"] == 3 and reply["nModified"] == 1
    assert [u["index"] for u in reply["upserted"]] == [1, 2]
    assert xs_on(cluster, 0, "upd") == [-77, 177]
    db.upd.delete_many({"up": {"$exists": True}})


def test_find_and_modify(cluster):
    db = cluster.router_client[DB]
    db.fam.insert_many([{"_id": 1, "x": 3, "v": 0}, {"_id": 2, "x": 300, "v": 0}])
    doc = db.fam.find_one_and_update({"x": 300}, {"$inc": {"v": 1}},
                                     return_document=pymongo.ReturnDocument.AFTER)
    assert doc == {"_id": 2, "x": 300, "v": 1}
    doc = db.fam.find_one_and_update({"_id": 1}, {"$inc": {"v": 1}},
                                     return_document=pymongo.ReturnDocument.AFTER)
    assert doc == {"_id": 1, "x": 3, "v": 1}
    assert db.fam.find_one_and_delete({"_id": 404}) is None
    # Without the shard key: MongoDB 7.0's two-phase write (both documents have v 1).
    assert db.fam.find_one_and_update({"v": 1}, {"$inc": {"v": 1}})["v"] == 1
    assert sorted(d["v"] for d in db.fam.find()) == [1, 2]
    db.fam.update_many({}, {"$set": {"v": 1}})
    doc = db.fam.find_one_and_update({"x": 50}, {"$set": {"v": 9}}, upsert=True,
                                     return_document=pymongo.ReturnDocument.AFTER)
    assert doc["x"] == 50 and cluster.on_shard(1, "fam").find_one({"x": 50})["v"] == 9
    assert db.fam.find_one_and_delete({"x": 3})["_id"] == 1
    assert cluster.on_shard(1, "fam").find_one({"_id": 1}) is None


def test_unsharded_collection_goes_to_the_primary(cluster):
    db = cluster.router_client[DB]
    db.plain.insert_many([{"_id": i} for i in range(5)])
    assert cluster.on_shard(1, "plain").count_documents({}) == 5
    assert cluster.on_shard(0, "plain").count_documents({}) == 0
    assert db.plain.update_one({}, {"$set": {"a": 1}}).modified_count == 1
    assert db.plain.delete_one({"a": 1}).deleted_count == 1
    assert cluster.on_shard(1, "plain").count_documents({}) == 4


def test_indexes_through_the_router(cluster):
    db = cluster.router_client[DB]
    reply = db.command("createIndexes", "ins", indexes=[{"key": {"a": 1}, "name": "a_1"}])
    # Every shard owning chunks (both) plus the primary (shard1), keyed by connection string.
    assert sorted(reply["raw"]) == sorted("shard%d/%s" % (i, s.host)
                                          for i, s in enumerate(cluster.shards))
    for i in (0, 1):
        names = [ix["name"] for ix in cluster.on_shard(i, "ins").list_indexes()]
        assert "a_1" in names
    names = sorted(ix["name"] for ix in db.ins.list_indexes())
    assert names == ["_id_", "a_1"]
    reply = db.command("listIndexes", "ins")
    assert reply["cursor"]["ns"] == DB + ".ins" and reply["cursor"]["id"] == 0
    reply = db.command("dropIndexes", "ins", index="a_1")
    assert reply["nIndexesWas"] == 2
    for i in (0, 1):
        assert "a_1" not in [ix["name"] for ix in cluster.on_shard(i, "ins").list_indexes()]
    with pytest.raises(OperationFailure) as e:
        db.command("listIndexes", "nothere")
    assert e.value.code == 26
    # An unsharded collection: only the primary.
    db.command("create", "made")
    db.made.create_index("b")
    assert "b_1" in [ix["name"] for ix in cluster.on_shard(1, "made").list_indexes()]
    assert "made" not in cluster.on_shard(0, "made").database.list_collection_names()


def test_catalog_listings(cluster):
    client = cluster.router_client
    db = client[DB]
    db.plain.insert_one({"_id": "listing"})
    names = db.list_collection_names()
    assert "plain" in names
    reply = db.command("listCollections", 1)
    assert reply["cursor"]["ns"] == DB + ".$cmd.listCollections"
    assert client.nodb_rw.list_collection_names() == []
    dbs = client.admin.command("listDatabases")
    entry = [d for d in dbs["databases"] if d["name"] == DB][0]
    assert sorted(entry["shards"]) == ["shard0", "shard1"]
    assert entry["sizeOnDisk"] == sum(entry["shards"].values())
    assert dbs["totalSize"] == sum(d["sizeOnDisk"] for d in dbs["databases"])
    assert "config" in [d["name"] for d in dbs["databases"]]
    assert "local" not in [d["name"] for d in dbs["databases"]]
    only = client.admin.command("listDatabases", nameOnly=True, filter={"name": DB})
    assert only["databases"] == [{"name": DB}]


def test_drop_and_rename(cluster):
    client = cluster.router_client
    db = client[DB]
    db.tmp.insert_one({"_id": 1})
    client.admin.command("renameCollection", DB + ".tmp", to=DB + ".tmp2")
    assert cluster.on_shard(1, "tmp2").count_documents({}) == 1
    # A sharded collection is renamed through the config server (test_rename_sharded.py);
    # in this hand-made cluster the shards' copies have other UUIDs than config.collections,
    # so the config server refuses before anything changes.
    before = db.ins.count_documents({})
    with pytest.raises(OperationFailure) as e:
        client.admin.command("renameCollection", DB + ".ins", to=DB + ".ins2")
    assert e.value.code == 361  # CollectionUUIDMismatch
    assert db.ins.count_documents({}) == before
    assert "ins2" not in cluster.on_shard(0, "ins").database.list_collection_names()
    db.drop_collection("tmp2")
    assert "tmp2" not in cluster.on_shard(1, "tmp2").database.list_collection_names()
    # Dropping what does not exist succeeds (MongoDB 7.0), in a known or unknown database.
    assert db.command("drop", "never")["ok"] == 1
    assert client.nodb_rw.command("drop", "never")["ok"] == 1
    assert client.nodb_rw.command("dropDatabase")["ok"] == 1


def test_drop_sharded_collection_and_database(cluster):
    client = cluster.router_client
    client.dropme.plain.insert_one({"_id": 1})
    assert client.dropme.command("dropDatabase")["dropped"] == "dropme"
    assert "dropme" not in client.list_database_names()
    # A sharded collection is dropped through the config server; afterwards the router
    # routes the name as a new unsharded collection on the primary.
    client.admin.command("enableSharding", "dropme2")
    client.admin.command("shardCollection", "dropme2.s", key={"x": 1})
    client.dropme2.s.insert_one({"x": 1})
    client.dropme2.drop_collection("s")
    assert cluster.cfgc.config.collections.find_one({"_id": "dropme2.s"}) is None
    client.dropme2.s.insert_one({"x": 2})
    primary = cluster.cfgc.config.databases.find_one({"_id": "dropme2"})["primary"]
    assert [d["x"] for d in cluster.clients[int(primary[-1])].dropme2.s.find()] == [2]
    client.drop_database("dropme2")


def _shard_role(cluster):
    try:
        cluster.clients[0].admin.command("_flushRoutingTableCacheUpdates", DB + ".none")
    except OperationFailure as e:
        return e.code != 59
    return True


def test_stale_shard_makes_the_router_resend_only_its_sub_batch(cluster):
    if not _shard_role(cluster):
        pytest.skip("shards do not check versions yet (branch shardsvr not merged)")
    ns = DB + ".stale"
    coll_uuid = cluster.shard_collection(ns, {"x": 1}, [({"x": MinKey()}, {"x": 0}, "shard0"),
                                                       ({"x": 0}, {"x": MaxKey()}, "shard1")])
    db = cluster.router_client[DB]
    db.stale.insert_many([{"_id": "warm0", "x": -1}, {"_id": "warm1", "x": 1}])
    # Split shard1's chunk behind the router's back (minor version bump on shard1 only), and
    # let shard1 learn it: the router's cached version for shard1 is now stale, shard0's not.
    chunk = cluster.cfgc.config.chunks.find_one({"uuid": coll_uuid, "shard": "shard1"})
    cluster.cfgc.config.chunks.update_one({"_id": chunk["_id"]},
                                          {"$set": {"max": {"x": 50}, "lastmod": Timestamp(1, 2)}})
    cluster.cfgc.config.chunks.insert_one(
        {"_id": ObjectId(), "uuid": coll_uuid, "min": {"x": 50}, "max": {"x": MaxKey()},
         "shard": "shard1", "lastmod": Timestamp(1, 3), "history": chunk["history"]})
    cluster.clients[1].admin.command("_flushRoutingTableCacheUpdates", ns)

    def bump(minor):
        cluster.cfgc.config.chunks.update_one({"uuid": coll_uuid, "min": {"x": 50}},
                                              {"$set": {"lastmod": Timestamp(1, minor)}})
        cluster.clients[1].admin.command("_flushRoutingTableCacheUpdates", ns)

    for ordered, minor in ((True, None), (False, 4)):
        if minor is not None:
            bump(minor)
        docs = [{"_id": "%s%d" % (ordered, x), "x": x} for x in (-3, 3, -4, 60, 4)]
        reply = db.command("insert", "stale", documents=docs, ordered=ordered)
        # A re-sent shard0 sub-batch would report duplicate keys.
        assert reply["n"] == 5 and "writeErrors" not in reply
        for d in docs:
            assert cluster.on_shard(owner(d["x"]), "stale").find_one({"_id": d["_id"]}) == d
    # A multi update after another bump is applied exactly once on every shard.
    bump(5)
    res = db.stale.update_many({}, {"$inc": {"n": 1}})
    assert res.modified_count == 12
    assert sorted(d.get("n") for i in (0, 1) for d in cluster.on_shard(i, "stale").find()) == \
        [1] * 12


def test_stale_database_version_is_retried(cluster):
    if not _shard_role(cluster):
        pytest.skip("shards do not check versions yet (branch shardsvr not merged)")
    cluster.add_db("rwdbv", "shard0")
    client = cluster.router_client
    client.rwdbv.c.insert_one({"_id": 1})
    cluster.cfgc.config.databases.update_one({"_id": "rwdbv"}, {"$set": {"version.lastMod": 2}})
    try:
        cluster.clients[0].admin.command("_flushDatabaseCacheUpdates", "rwdbv")
    except OperationFailure as e:
        if e.code == 59:
            pytest.skip("shards have no _flushDatabaseCacheUpdates yet")
        raise
    client.rwdbv.c.insert_one({"_id": 2})
    assert sorted(d["_id"] for d in cluster.clients[0].rwdbv.c.find()) == [1, 2]


def test_config_and_admin_go_to_the_config_server(cluster):
    client = cluster.router_client
    client.config.rw_notes.insert_one({"_id": 1})
    client.config.rw_notes.update_one({"_id": 1}, {"$set": {"a": 1}})
    assert cluster.cfgc.config.rw_notes.find_one() == {"_id": 1, "a": 1}
    assert "rw_notes" in client.config.list_collection_names()
    assert cluster.clients[0].config.rw_notes.find_one() is None


def test_malformed_statements_fail_the_command(cluster):
    db = cluster.router_client[DB]
    with pytest.raises(OperationFailure) as e:
        db.command("update", "upd", updates=[{"q": {"x": 1}, "u": {"$set": {"a": 1}}},
                                             {"q": {"x": 2}}])
    assert e.value.code == 40414
    with pytest.raises(OperationFailure) as e:
        db.command("delete", "upd", deletes=[{"q": {"x": 1}, "limit": 2}])
    assert e.value.code == 9


def test_transaction_statements_run_in_the_transaction(cluster):
    """A statement of a transaction runs in it (docs/design/transactions.md "Router"): an
    aborted transaction leaves nothing, and the session keeps working outside one."""
    client = cluster.router_client
    coll = client[DB]["txn_refused"]
    with client.start_session() as s:
        s.start_transaction()
        coll.insert_one({"x": 7}, session=s)
        s.abort_transaction()
    assert coll.count_documents({}) == 0
    coll.insert_one({"x": 8})
    assert [d["x"] for d in coll.find({}, {"_id": 0})] == [8]


def test_shard_key_changes_follow_mongodb_rules(cluster):
    """The shard decides, for every update form (operators, pipelines, replacements,
    findAndModify, upserts): a multi-update may not change a shard key value (72); a single
    one only as a retryable write (20 otherwise); one that moves the document to another
    shard runs in an internal transaction; nothing is written when refused, so no document
    ends up on a shard that does not own it."""
    db = cluster.router_client[DB]
    plain = cluster.router.client(retryWrites=False)[DB]
    db.upd.delete_many({})
    db.upd.insert_many([{"_id": "m1", "x": 10, "g": 1}, {"_id": "m2", "x": 20, "g": 1}])

    def where():
        return {i: sorted((d["_id"], d["x"]) for d in cluster.on_shard(i, "upd").find())
                for i in (0, 1)}

    before = where()
    assert before == {0: [], 1: [("m1", 10), ("m2", 20)]}
    for update in ({"$set": {"x": 150}}, [{"$set": {"x": {"$add": ["$x", 200]}}}],
                   {"$inc": {"x": 1}}):
        with pytest.raises(WriteError) as e:
            db.upd.update_many({"g": 1}, update)
        assert e.value.code == 72, update
        assert "Multi-update operations are not allowed when updating the shard key" in str(
            e.value)
    # A multi-update that leaves the key alone is fine.
    assert db.upd.update_many({"g": 1}, {"$set": {"y": 1}}).modified_count == 2
    # Without retryWrites, even a change within the shard is refused.
    with pytest.raises(WriteError) as e:
        plain.upd.update_one({"x": 10}, {"$set": {"x": 11}})
    assert e.value.code == 20 and "retryWrites: true" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        plain.upd.find_one_and_update({"x": 10}, {"$set": {"x": 11}})
    assert e.value.code == 20
    # As a retryable write it works while the document stays on its shard...
    db.upd.replace_one({"x": 10}, {"x": 12, "g": 1})
    # ...and when it would move, the router moves it in an internal transaction
    # (test_internal_transactions.py), never leaving it on two shards or none.
    def m1():
        return [(i, x) for i, docs in where().items() for (_id, x) in docs if _id == "m1"]

    assert db.upd.update_one({"x": 12}, {"$set": {"x": 500}}).modified_count == 1
    assert [x for _, x in m1()] == [500]
    assert db.upd.replace_one({"x": 500}, {"x": 12, "g": 1}).modified_count == 1
    assert m1() == [(1, 12)]
    assert db.upd.find_one_and_update({"x": 12}, {"$set": {"x": -5}})["x"] == 12
    assert [x for _, x in m1()] == [-5]
    db.upd.find_one_and_update({"x": -5}, {"$set": {"x": 12}})
    assert m1() == [(1, 12)]
    # An upsert whose new document belongs to another shard is inserted there (7.0: an
    # internal transaction), once.
    res = db.upd.update_one({"x": 30}, {"$set": {"x": 130}}, upsert=True)
    assert res.upserted_id is not None
    assert db.upd.find_one_and_update({"x": 31}, {"$set": {"x": 131}}, upsert=True) is None
    on_shards = sorted(x for docs in where().values() for _, x in docs)
    assert on_shards == [12, 20, 130, 131]
    assert db.upd.count_documents({}) == 4
    db.upd.delete_many({})
