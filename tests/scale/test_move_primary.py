"""movePrimary of a 1 GB database (issue 23 item 3): four unsharded collections of 1 KB
documents (1 GiB in all, one with a secondary index) cloned from shard0 to shard1 through
the router's movePrimary; the new primary then holds every collection with its documents and
indexes, the old one none, and the router reads them there."""

from scale_util import KB_DOC_SIZE, RECORDER, load, scaled

DB = "scale_mp"
COLLS = ["c%d" % i for i in range(4)]
PER = scaled(1024 * 1024 * 1024 // KB_DOC_SIZE // len(COLLS))  # 262,144 docs of 1 KB each
GROUPS = 1000
NAME = "test_move_primary_of_a_1gb_database"


def _user_names(client):
    return sorted(n for n in client[DB].list_collection_names() if not n.startswith("system."))


def _sum_id(coll):
    out = list(coll.aggregate([{"$group": {"_id": None, "n": {"$sum": 1},
                                           "s": {"$sum": "$_id"}}}]))
    return (out[0]["n"], out[0]["s"]) if out else (0, 0)


def test_move_primary_of_a_1gb_database(scale_cluster):
    c = scale_cluster
    r = c.router_client(socketTimeoutMS=0)
    r.admin.command("enableSharding", DB, primaryShard="shard0")
    with RECORDER.phase(NAME, "load 1 GiB (4 x 262,144 docs of 1 KB)"):
        for name in COLLS:
            load(c.uri(), DB, name, "kb", 0, PER, arg=GROUPS)
        r[DB].c0.create_index("g", name="g_1")
    s0, s1 = c.shard_client(0), c.shard_client(1)
    assert _user_names(s0) == COLLS
    size = sum(s0[DB].command("collStats", n)["size"] for n in COLLS)
    assert size == len(COLLS) * PER * KB_DOC_SIZE
    indexes = sorted((i["name"], tuple(i["key"].items())) for i in s0[DB].c0.list_indexes())

    with RECORDER.phase(NAME, "movePrimary of 1 GiB shard0 -> shard1"):
        r.admin.command("movePrimary", DB, to="shard1")

    with RECORDER.phase(NAME, "check"):
        cfg = c.config_client().config
        assert cfg.databases.find_one({"_id": DB})["primary"] == "shard1"
        # The new primary holds each collection, with all its documents and indexes...
        assert _user_names(s1) == COLLS
        for name in COLLS:
            assert _sum_id(s1[DB][name]) == (PER, PER * (PER - 1) // 2), name
            assert s1[DB].command("collStats", name)["size"] == PER * KB_DOC_SIZE
        assert sorted((i["name"], tuple(i["key"].items()))
                      for i in s1[DB].c0.list_indexes()) == indexes
        assert s1[DB].c0.count_documents({"g": 7}) == PER // GROUPS + (
            1 if 7 < PER % GROUPS else 0)
        # ...the old one none...
        assert _user_names(s0) == []
        # ...and the router reads and writes there.
        for name in COLLS:
            assert r[DB].command("count", name)["n"] == PER
        r[DB].c3.insert_one({"_id": -1})
        assert s1[DB].c3.find_one({"_id": -1}) == {"_id": -1}
