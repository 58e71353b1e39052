"""The wire layer against raw sockets: malformed, truncated and oversized messages
get what MongoDB 7.0 gives them (a closed connection for framing errors, an error
reply for content errors) and never disturb other clients; OP_MSG flags and
document sequences; the legacy OP_QUERY handshake; many concurrent clients."""

import os
import resource
import socket
import struct
import threading
import time

import bson
import pymongo

import wire_util as w
from shale_fixtures import wait_until

PING = {"ping": 1, "$db": "admin"}


def others_still_served(node):
    """A separate driver client is unaffected."""
    c = node.client()
    assert c.admin.command("ping")["ok"] == 1.0
    c.close()


def assert_error_reply_then_usable(sock, code):
    """The reply on 'sock' is an error with 'code', and the same connection still works."""
    r = w.recv_reply(sock)
    assert r.opcode == w.OP_MSG
    doc = r.doc
    assert doc["ok"] == 0.0 and doc["code"] == code, doc
    assert isinstance(doc["errmsg"], str) and isinstance(doc["codeName"], str)
    assert w.command(sock, PING) == {"ok": 1.0}


# ---------------------------------------------------------------- framing errors: close


def test_garbage_bytes_close_the_connection(node):
    s = w.connect(node.port)
    s.sendall(b"\xde\xad\xbe\xef" * 64)
    assert w.is_closed(s)
    others_still_served(node)


def test_header_claiming_100mb_closes(node):
    s = w.connect(node.port)
    s.sendall(w.header(100 * 1024 * 1024, 1, w.OP_MSG) + b"\x00" * 64)
    assert w.is_closed(s)
    # Just above maxMessageSizeBytes (48000000) is refused the same way.
    s = w.connect(node.port)
    s.sendall(w.header(48000001, 1, w.OP_MSG))
    assert w.is_closed(s)
    # And a length too small to hold a header.
    s = w.connect(node.port)
    s.sendall(w.header(8, 1, w.OP_MSG))
    assert w.is_closed(s)
    others_still_served(node)


def connection_log(node, event, port):
    """Whether the server logged 'event' ("Connection accepted"/"Connection ended")
    for the client connection from local port 'port'."""
    remote = '"remote":"127.0.0.1:%d"' % port
    return any(('"msg":"%s"' % event) in line and remote in line
               for line in node.read_log().splitlines())


def test_truncated_message_then_close(node):
    s = w.connect(node.port)
    port = s.getsockname()[1]
    msg = w.op_msg(PING)
    s.sendall(msg[:len(msg) - 5])
    wait_until(lambda: connection_log(node, "Connection accepted", port),
               what="the raw connection to be accepted")
    assert not connection_log(node, "Connection ended", port)
    s.close()
    # The server notices the half message's end and lets the connection go.
    wait_until(lambda: connection_log(node, "Connection ended", port),
               what="the truncated connection to be cleaned up")
    others_still_served(node)


def test_bad_checksum_closes(node):
    s = w.connect(node.port)
    good = w.op_msg(PING, checksum=True)
    # A correct checksum is accepted...
    s.sendall(good)
    assert w.recv_reply(s).doc == {"ok": 1.0}
    # ...a wrong one (ChecksumMismatch is connection-fatal in MongoDB) closes.
    bad = bytearray(w.op_msg(PING, checksum=True))
    bad[-1] ^= 0xFF
    s.sendall(bytes(bad))
    assert w.is_closed(s)
    others_still_served(node)


def test_removed_legacy_write_opcode_closes(node):
    s = w.connect(node.port)
    payload = struct.pack("<i", 0) + b"test.c\x00" + struct.pack("<i", 0)
    payload += bson.encode({"a": 1}) + bson.encode({"$set": {"a": 2}})
    s.sendall(w.frame(w.OP_UPDATE, payload))
    assert w.is_closed(s)
    s = w.connect(node.port)
    s.sendall(w.frame(w.OP_INSERT, struct.pack("<i", 0) + b"test.c\x00" + bson.encode({"a": 1})))
    assert w.is_closed(s)
    others_still_served(node)


def test_unknown_opcode_is_ignored(node):
    # MongoDB logs an opcode it does not know and answers nothing; the connection stays.
    s = w.connect(node.port)
    s.sendall(w.frame(9999, b"\x00" * 20))
    assert w.command(s, PING) == {"ok": 1.0}
    assert "Operation is not supported" in node.read_log()


def test_op_get_more_gets_legacy_error_reply(node):
    s = w.connect(node.port)
    rid = w.next_request_id()
    payload = struct.pack("<i", 0) + b"test.c\x00" + struct.pack("<iq", 0, 12345)
    s.sendall(w.frame(w.OP_GET_MORE, payload, rid))
    r = w.recv_reply(s)
    assert r.opcode == w.OP_REPLY and r.response_to == rid
    assert r.reply_flags == 2  # QueryFailure
    assert r.doc["code"] == 5739101 and r.doc["ok"] == 0.0
    assert r.doc["$err"].startswith("OP_GET_MORE is no longer supported.")
    assert w.command(s, PING) == {"ok": 1.0}


# ---------------------------------------------------------------- content errors: reply


def test_invalid_bson_body_gets_error_reply(node):
    s = w.connect(node.port)
    body = bytearray(bson.encode(PING))
    body[4] = 0x42  # the first element's type byte: no such BSON type
    s.sendall(w.op_msg(None, raw_body=bytes(body)))
    assert_error_reply_then_usable(s, 22)  # InvalidBSON
    # A body whose length runs past the message.
    body = bytearray(bson.encode(PING))
    body[0:4] = struct.pack("<i", len(body) + 100)
    s.sendall(w.op_msg(None, raw_body=bytes(body)))
    assert_error_reply_then_usable(s, 22)
    others_still_served(node)


def test_deeply_nested_bson_refused_not_crashing(node):
    # 100000 levels of {a: {a: ...}} would overflow any recursive validator's stack.
    depth = 100000
    size = 5 + depth * 8
    pre = bytearray()
    for _ in range(depth):
        pre += struct.pack("<i", size) + b"\x03a\x00"
        size -= 8
    nested = bytes(pre) + b"\x05\x00\x00\x00\x00" + b"\x00" * depth
    elems = bson.encode(PING)[4:-1] + b"\x03x\x00" + nested
    body = struct.pack("<i", 4 + len(elems) + 1) + elems + b"\x00"
    s = w.connect(node.port)
    s.sendall(w.op_msg(None, raw_body=body))
    r = w.recv_reply(s).doc
    assert r["code"] == 15 and r["codeName"] == "Overflow"
    assert r["errmsg"] == "BSONObj exceeded maximum nested object depth: 200"
    assert w.command(s, PING) == {"ok": 1.0}
    others_still_served(node)


def test_body_larger_than_internal_limit(node):
    limit = 16 * 1024 * 1024 + 16 * 1024
    s = w.connect(node.port, timeout=60)
    pad = b"x" * (limit + 1 - len(bson.encode(dict(PING, pad=""))))
    doc = bson.encode(dict(PING, pad=pad.decode()))
    assert len(doc) == limit + 1
    s.sendall(w.op_msg(None, raw_body=doc))
    r = w.recv_reply(s).doc
    assert r["ok"] == 0.0 and r["code"] == 10334 and r["codeName"] == "BSONObjectTooLarge"
    # Exactly the limit is a valid command (maxBsonObjectSize + 16 KiB for the envelope).
    pad = b"x" * (limit - len(bson.encode(dict(PING, pad=""))))
    s.sendall(w.op_msg(None, raw_body=bson.encode(dict(PING, pad=pad.decode()))))
    assert w.recv_reply(s).doc["ok"] == 1.0
    others_still_served(node)


def test_missing_db_and_empty_body(node):
    s = w.connect(node.port)
    r = w.command(s, {"ping": 1})
    assert r["code"] == 40571 and r["ok"] == 0.0
    assert r["errmsg"] == "OP_MSG requests require a $db argument"
    r = w.command(s, {})
    assert r["ok"] == 0.0
    assert w.command(s, PING) == {"ok": 1.0}


def test_illegal_flag_bit_closes(node):
    s = w.connect(node.port)
    s.sendall(w.op_msg(PING, flags=1 << 3))  # unknown "required" bit: IllegalOpMsgFlag
    assert w.is_closed(s)
    # Unknown optional bits (16 and up) are ignored.
    s = w.connect(node.port)
    assert w.command(s, PING, flags=1 << 20) == {"ok": 1.0}


# ---------------------------------------------------------------- OP_MSG features


def test_more_to_come_gets_no_reply(node):
    s = w.connect(node.port)
    s.sendall(w.op_msg(PING, flags=w.MORE_TO_COME))
    # Nor does a fire-and-forget request that fails.
    s.sendall(w.op_msg({"noSuchCommand": 1, "$db": "admin"}, flags=w.MORE_TO_COME))
    rid = w.next_request_id()
    s.sendall(w.op_msg({"ping": 1, "$db": "admin"}, request_id=rid))
    r = w.recv_reply(s)
    assert r.response_to == rid  # the first reply on the wire answers the third message
    assert r.doc == {"ok": 1.0}


def test_document_sequences_are_merged(node):
    s = w.connect(node.port)
    docs = [{"_id": i, "v": "x" * i} for i in range(50)]
    r = w.command(s, {"ping": 1, "$db": "admin"}, sequences=[("documents", docs)])
    assert r == {"ok": 1.0}
    # Two sequences with the same identifier, or one clashing with a body field, are
    # content errors: a reply, and the connection stays.
    s.sendall(w.op_msg(PING, sequences=[("documents", docs), ("documents", docs)]))
    assert_error_reply_then_usable(s, 40431)
    s.sendall(w.op_msg(dict(PING, documents=[]), sequences=[("documents", docs)]))
    assert_error_reply_then_usable(s, 40433)
    # An empty sequence is an empty array; one holding bytes that are not a document
    # is InvalidBSON.
    assert w.command(s, PING, sequences=[("documents", [])]) == {"ok": 1.0}
    data = b"documents\x00" + b"\x07\x00\x00\x00\x01\x02\x03"
    payload = struct.pack("<I", 0) + b"\x00" + bson.encode(PING)
    payload += b"\x01" + struct.pack("<i", 4 + len(data)) + data
    s.sendall(w.frame(w.OP_MSG, payload))
    assert_error_reply_then_usable(s, 22)


def test_op_query_handshake(node):
    s = w.connect(node.port)
    rid = w.next_request_id()
    s.sendall(w.op_query("admin.$cmd", {"isMaster": 1, "helloOk": True}, request_id=rid))
    r = w.recv_reply(s)
    assert r.opcode == w.OP_REPLY and r.response_to == rid
    doc = r.doc
    assert doc["ismaster"] is True and doc["helloOk"] is True and doc["ok"] == 1.0
    assert doc["maxWireVersion"] == 21
    # The legacy {$query: ...} wrapping is understood too.
    s.sendall(w.op_query("admin.$cmd", {"$query": {"hello": 1}, "$readPreference": {}}))
    assert w.recv_reply(s).doc["isWritablePrimary"] is True
    # After the legacy handshake, the connection speaks OP_MSG.
    assert w.command(s, PING) == {"ok": 1.0}


def test_op_query_other_commands_unsupported(node):
    s = w.connect(node.port)
    for cmd in ({"ping": 1}, {"find": "c"}, {"noSuchCommand": 1}):
        s.sendall(w.op_query("admin.$cmd", cmd))
        r = w.recv_reply(s)
        assert r.opcode == w.OP_REPLY
        name = next(iter(cmd))
        assert r.doc["code"] == 352, r.doc
        assert r.doc["codeName"] == "UnsupportedOpQueryCommand"
        assert r.doc["errmsg"] == "Unsupported OP_QUERY command: %s" % name
    # A query on a collection (not $cmd): MongoDB's legacy removal error.
    s.sendall(w.op_query("test.c", {}))
    r = w.recv_reply(s)
    assert r.opcode == w.OP_REPLY and r.reply_flags == 2
    assert r.doc["code"] == 5739101 and r.doc["$err"].startswith("OP_QUERY is no longer supported")
    assert w.command(s, PING) == {"ok": 1.0}


# ---------------------------------------------------------------- concurrency


def test_many_concurrent_clients(node):
    n_threads, n_pings = 50, 20
    errors = []
    barrier = threading.Barrier(n_threads)

    def worker(i):
        try:
            c = pymongo.MongoClient(node.host, serverSelectionTimeoutMS=10000, appname="w%d" % i)
            barrier.wait(30)
            for _ in range(n_pings):
                assert c.admin.command("ping")["ok"] == 1.0
            c.close()
        except Exception as e:  # noqa: BLE001 -- collected and asserted below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    s = node.client().admin.command("serverStatus")
    assert s["connections"]["totalCreated"] >= n_threads
    assert s["opcounters"]["command"] >= n_threads * n_pings


def test_out_of_descriptors_backs_off(node):
    """With no file descriptors left, pending connections cannot be accepted: the
    listener must back off rather than spin on poll(), and recover once fds free up."""
    def cpu_seconds():
        fields = open("/proc/%d/stat" % node.proc.pid).read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    soft, hard = resource.prlimit(node.proc.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(node.proc.pid, resource.RLIMIT_NOFILE, (24, hard))
    socks = [socket.create_connection(("127.0.0.1", node.port)) for _ in range(40)]
    try:
        wait_until(lambda: "Error accepting new connection" in node.read_log(),
                   what="the descriptor limit to be hit")
        before = cpu_seconds()
        time.sleep(1.0)  # a measuring window, not a wait for a condition
        assert cpu_seconds() - before < 0.3
    finally:
        for s in socks:
            s.close()
    resource.prlimit(node.proc.pid, resource.RLIMIT_NOFILE, (soft, hard))
    wait_until(lambda: node.client(serverSelectionTimeoutMS=500).admin.command("ping"),
               what="the server to accept again")
