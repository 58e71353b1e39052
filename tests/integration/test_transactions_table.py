"""config.transactions as a user sees it (issue 13): whatever its physical layout (each
version of a session's record is stored under a new key, storage/catalog.h
SHL_COLL_OPT_VERSIONED), the collection holds one document per session with the newest
txnNum and lastWriteOpTime, is found and counted as any collection, lists its _id_ index,
and keeps deduplicating retries across a checkpoint and kill -9."""

from bson import Int64

from test_retryable_writes import Raw


def _table(client):
    return list(client.config.transactions.find({}, sort=[("_id", 1)]))


def test_one_document_per_session_with_the_newest_write(shale_process):
    node = shale_process(["node", "--replSet", "rs0"], name="txtable")
    a, b = Raw(node), Raw(node)
    for t in range(1, 301):
        assert a({"insert": "k", "documents": [{"_id": t}], "txnNumber": Int64(t)})["n"] == 1
    assert b({"insert": "k", "documents": [{"_id": -1}], "txnNumber": Int64(5)})["n"] == 1
    client = node.client()
    docs = _table(client)
    assert len(docs) == 2
    assert client.config.transactions.count_documents({}) == 2
    mine = client.config.transactions.find_one({"_id.id": a.lsid["id"]})
    assert mine is not None and mine["txnNum"] == 300
    # By its whole _id ({id, uid}; the id as sent, binary subtype 4): the _id index's lookup.
    whole = {"id": a.lsid["id"], "uid": mine["_id"]["uid"]}
    assert client.config.transactions.find_one({"_id": whole}) == mine
    assert client.config.transactions.count_documents({"_id": whole}) == 1
    assert client.config.transactions.count_documents({"_id": {"$lte": whole}}) >= 1
    assert set(mine) == {"_id", "txnNum", "lastWriteOpTime", "lastWriteDate"}
    entry = client.local.oplog.rs.find_one({"lsid.id": a.lsid["id"], "txnNumber": 300})
    assert entry is not None and mine["lastWriteOpTime"]["ts"] == entry["ts"]
    assert client.config.transactions.find_one({"_id.id": b.lsid["id"]})["txnNum"] == 5
    assert [i["name"] for i in client.config.transactions.list_indexes()] == ["_id_"]
    info = list(client.config.list_collections(filter={"name": "transactions"}))
    assert len(info) == 1 and info[0]["options"] == {}
    # A retry of the newest write is answered from history, an older txnNumber is too old.
    r = a({"insert": "k", "documents": [{"_id": 300}], "txnNumber": Int64(300)})
    assert r["n"] == 1 and r["retriedStmtIds"] == [0]
    assert a({"insert": "k", "documents": [{"_id": 0}], "txnNumber": Int64(299)})["code"] == 225
    assert client.test.k.count_documents({}) == 301
    a.close()
    b.close()


def test_the_newest_record_survives_checkpoint_and_kill9(shale_process):
    node = shale_process(["node", "--replSet", "rs0"], name="txtablekill")
    a = Raw(node)
    client = node.client()
    for t in range(1, 51):
        assert a({"insert": "k", "documents": [{"_id": t}], "txnNumber": Int64(t)})["n"] == 1
    client.admin.command("fsync")  # a checkpoint holds the record of txnNumber 50
    for t in range(51, 101):
        assert a({"insert": "k", "documents": [{"_id": t}], "txnNumber": Int64(t)},
                 writeConcern={"j": True})["n"] == 1
    a.close()
    node.kill()
    node.start()
    client = node.client()
    # Recovery re-derived the record from the replayed entries: still one, the newest.
    docs = _table(client)
    assert len(docs) == 1 and docs[0]["txnNum"] == 100
    a = Raw(node, a.lsid)
    r = a({"insert": "k", "documents": [{"_id": 100}], "txnNumber": Int64(100)})
    assert r["n"] == 1 and r["retriedStmtIds"] == [0]
    # Writes go on after the restart (the session found its record through the _id index).
    for t in range(101, 111):
        assert a({"insert": "k", "documents": [{"_id": t}], "txnNumber": Int64(t)})["n"] == 1
    docs = _table(client)
    assert len(docs) == 1 and docs[0]["txnNum"] == 110
    assert client.test.k.count_documents({}) == 110
    a.close()
