"""Regressions found by fuzzing and benchmarking the wire layer: each sends raw bytes
a driver would not, and checks what a client sees and that the server keeps serving."""

import socket
import struct

import bson


def op_msg(body_bytes, request_id=1):
    payload = struct.pack("<I", 0) + b"\x00" + body_bytes
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, 2013) + payload


def read_reply(sock):
    """One OP_MSG reply: (responseTo, body document)."""
    def exactly(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf
    hdr = exactly(16)
    length, _, response_to, opcode = struct.unpack("<iiii", hdr)
    assert opcode == 2013
    rest = exactly(length - 16)
    return response_to, bson.decode(rest[5:])


def nested(depth):
    doc = {"x": 1}
    for _ in range(depth):
        doc = {"a": doc}
    return doc


def deep_bytes(depth):
    """{'a': {'a': ... {}}} built by hand (the bson module refuses to encode it): each
    level is its length and the element header; all the EOO bytes come at the end."""
    n = 5 + 8 * depth
    heads = b"".join(struct.pack("<i", n - 8 * i) + b"\x03a\x00" for i in range(depth))
    return heads + struct.pack("<i", 5) + b"\x00" * (depth + 1)


def with_ping(doc_bytes):
    """{ping: 1, $db: 'admin', d: <doc_bytes>}"""
    elems = (b"\x10ping\x00" + struct.pack("<i", 1) + b"\x02$db\x00" + struct.pack("<i", 6) +
             b"admin\x00" + b"\x03d\x00" + doc_bytes)
    return struct.pack("<i", 4 + len(elems) + 1) + elems + b"\x00"


def test_deeply_nested_document_is_refused(node):
    # 100000 levels (800 KB) used to overflow the connection thread's stack in libbson.
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as s:
        s.sendall(op_msg(with_ping(deep_bytes(100000)), request_id=7))
        response_to, reply = read_reply(s)
        assert response_to == 7
        assert reply["ok"] == 0 and reply["code"] == 15 and reply["codeName"] == "Overflow"
        # MongoDB's limit: 200 levels below the top are fine.
        s.sendall(op_msg(with_ping(bson.encode(nested(198))), request_id=8))
        assert read_reply(s) == (8, {"ok": 1.0})
    assert node.client().admin.command("ping")["ok"] == 1.0


def test_nested_document_without_terminator_is_invalid_bson(node):
    inner = bytearray(bson.encode({"x": 1}))
    inner[-1] = 0x28  # not the EOO byte; another field follows, which hid it from libbson
    doc = (struct.pack("<i", 4 + 3 + len(inner) + 7 + 1) + b"\x03a\x00" + bytes(inner) +
           b"\x10b\x00" + struct.pack("<i", 1) + b"\x00")
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as s:
        s.sendall(op_msg(with_ping(doc), request_id=3))
        response_to, reply = read_reply(s)
        assert response_to == 3 and reply["code"] == 22 and reply["codeName"] == "InvalidBSON"
    assert node.client().admin.command("ping")["ok"] == 1.0


def test_requests_pipelined_in_one_write_are_all_answered(node):
    # The connection reads as much as has arrived; a second request in the same
    # segment (and one split across writes) must still be answered, in order.
    ping = bson.encode({"ping": 1, "$db": "admin"})
    msgs = b"".join(op_msg(ping, request_id=i) for i in range(1, 6))
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(msgs[:-7])
        s.sendall(msgs[-7:])
        for i in range(1, 6):
            assert read_reply(s) == (i, {"ok": 1.0})
