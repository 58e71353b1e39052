"""The default write concern (issues 13/15/18): a write that carries no writeConcern runs as
MongoDB 5.0+'s implicit default {w: "majority"} -- on a shard (a replica set of one) that is
the journal -- through the router and on a replica set member reached directly, until
setDefaultRWConcern sets another cluster-wide default. Checked with kill -9 right after the
acknowledgement and with the shard's journal fsync count (serverStatus
wiredTiger.log."log sync operations": a majority write waits for one fsync of its own, a
{w: 1} write for none)."""
import pytest
from pymongo import WriteConcern

from shale_fixtures import FAST_ELECTIONS, module_cluster, wait_until

DB = "dwc"
N = 30  # sequential writes per measurement


@pytest.fixture(scope="module")
def cl(request):
    with module_cluster(request, shards=2) as c:
        r = c.router.client()
        r.admin.command("enableSharding", DB, primaryShard="shard0")
        ns = DB + ".sh"
        r.admin.command("shardCollection", ns, key={"x": 1})
        r.admin.command("split", ns, middle={"x": 0})
        r.admin.command("moveChunk", ns, find={"x": 0}, to="shard1")
        yield c


def syncs(client):
    return client.admin.command("serverStatus")["wiredTiger"]["log"]["log sync operations"]


def fsyncs_per_write(cl, write, shard=0):
    """Journal fsyncs on 'shard' over N sequential calls of write(i), per write."""
    before = syncs(cl.shard_client(shard))
    for i in range(N):
        write(i)
    return (syncs(cl.shard_client(shard)) - before) / N


def test_get_default_rw_concern_is_the_implicit_majority(cl):
    res = cl.router.client().admin.command("getDefaultRWConcern")
    assert res["defaultWriteConcern"] == {"w": "majority", "wtimeout": 0}
    assert res["defaultWriteConcernSource"] == "implicit"


def test_default_writes_through_the_router_wait_for_the_journal(cl):
    coll = cl.router.client()[DB].plain
    # The periodic flusher adds ~10 fsyncs a second; a journaled write at least one each.
    assert fsyncs_per_write(cl, lambda i: coll.insert_one({"_id": i})) >= 1
    assert fsyncs_per_write(cl, lambda i: coll.update_one({"_id": i}, {"$set": {"u": 1}})) >= 1
    assert fsyncs_per_write(cl, lambda i: coll.find_one_and_update(
        {"_id": i}, {"$set": {"f": 1}})) >= 1
    w1 = coll.with_options(write_concern=WriteConcern(w=1))
    assert fsyncs_per_write(cl, lambda i: w1.insert_one({"_id": "w1-%d" % i})) < 0.5
    # An empty writeConcern is no write concern: the default.
    db = cl.router.client()[DB]
    assert fsyncs_per_write(cl, lambda i: db.command(
        "insert", "plain", documents=[{"_id": "e%d" % i}], writeConcern={})) >= 1
    # Unacknowledged stays unacknowledged.
    w0 = coll.with_options(write_concern=WriteConcern(w=0))
    w0.insert_one({"_id": "w0"})


def test_default_transaction_commits_wait_for_the_journal(cl):
    r = cl.router.client()
    coll = r[DB].txn

    def commit(i):
        with r.start_session() as s:
            with s.start_transaction():
                coll.insert_one({"_id": i}, session=s)
    coll.insert_one({"_id": "create"})
    assert fsyncs_per_write(cl, commit) >= 1


def test_direct_writes_to_a_replica_set_member_default_to_majority(cl):
    coll = cl.shard_client(1)[DB].direct
    assert fsyncs_per_write(cl, lambda i: coll.insert_one({"_id": i}), shard=1) >= 1


def kill_and_restart(cl, shards):
    """kill -9 the shards right away, start them again; a new router client."""
    for i in shards:
        cl.shards[i].kill()
    for i in shards:
        cl.restart_shard(i)
    return cl.router.client()


def test_default_insert_and_commits_survive_kill9_after_the_ack(cl):
    """Each acknowledged default write is followed at once by kill -9 of its shard (a {w: 1}
    write would be in the journal only after the next periodic flush, up to 100 ms later)."""
    r = cl.router.client()
    with r.start_session() as s:  # two shards: two-phase commit
        with s.start_transaction():
            r[DB].sh.insert_one({"_id": "a", "x": -5}, session=s)
            r[DB].sh.insert_one({"_id": "b", "x": 5}, session=s)
    for i in range(5):
        r[DB].k.insert_one({"_id": i})
    r = kill_and_restart(cl, [0, 1])
    assert r[DB].k.count_documents({}) == 5
    assert sorted(d["_id"] for d in r[DB].sh.find({"_id": {"$in": ["a", "b"]}})) == ["a", "b"]
    with r.start_session() as s:  # one shard
        with s.start_transaction():
            r[DB].k.insert_one({"_id": "t1"}, session=s)
            r[DB].k.insert_one({"_id": "t2"}, session=s)
    r = kill_and_restart(cl, [0])
    assert r[DB].k.count_documents({}) == 7


def test_set_default_write_concern_w1_applies_to_routed_writes(cl):
    r = cl.router.client()
    coll = r[DB].plain2
    res = r.admin.command("setDefaultRWConcern", defaultWriteConcern={"w": 1})
    try:
        assert res["defaultWriteConcern"] == {"w": 1, "wtimeout": 0}
        res = r.admin.command("getDefaultRWConcern")
        assert res["defaultWriteConcern"] == {"w": 1, "wtimeout": 0}
        assert res["defaultWriteConcernSource"] == "global"
        assert fsyncs_per_write(cl, lambda i: coll.insert_one({"_id": i})) < 0.5

        def commit(i):
            with r.start_session() as s:
                with s.start_transaction():
                    coll.insert_one({"_id": "t%d" % i}, session=s)
        assert fsyncs_per_write(cl, commit) < 0.5
        # An explicit concern still wins over the cluster-wide default.
        wm = coll.with_options(write_concern=WriteConcern(w="majority"))
        assert fsyncs_per_write(cl, lambda i: wm.insert_one({"_id": "m%d" % i})) >= 1
    finally:
        # A set default cannot be unset: set the implicit one back for other tests.
        r.admin.command("setDefaultRWConcern", defaultWriteConcern={"w": "majority"})
    assert fsyncs_per_write(cl, lambda i: coll.insert_one({"_id": "b%d" % i})) >= 1


def test_a_set_with_an_arbiter_defaults_to_w1(shale_process):
    """MongoDB 5.0's arbiter rule: primary-secondary-arbiter has 2 data-bearing voters, not
    more than the voting majority (2), so its implicit default is {w: 1}: with the secondary
    down a default write is acknowledged while an explicit majority one cannot be."""
    nodes = [shale_process(["node", "--replSet", "psa"], name="psa%d" % i) for i in range(3)]
    members = [{"_id": i, "host": n.host} for i, n in enumerate(nodes)]
    members[2].update(arbiterOnly=True)
    primary = nodes[0].client(directConnection=True)
    primary.admin.command("replSetInitiate", {"_id": "psa", "members": members,
                                              "settings": dict(FAST_ELECTIONS)})
    wait_until(lambda: [m["stateStr"] for m in primary.admin.command(
        "replSetGetStatus")["members"]] == ["PRIMARY", "SECONDARY", "ARBITER"], 30, "PSA up")
    nodes[1].kill()
    db = primary.psa_db
    res = db.command("insert", "c", documents=[{"_id": 1}], maxTimeMS=10000)
    assert res["n"] == 1 and "writeConcernError" not in res, res
    res = db.command("insert", "c", documents=[{"_id": 2}],
                     writeConcern={"w": "majority", "wtimeout": 300})
    assert res["writeConcernError"]["code"] == 64, res
    assert res["writeConcernError"]["errInfo"]["writeConcern"]["provenance"] == "clientSupplied"
