"""Field names and strings that are not UTF-8. MongoDB's check of incoming messages is
structural only (validateBSON's default mode; UTF-8 is checked only by its full mode), so
a node accepts such bytes, stores them and returns them byte for byte, as mongod does.
What Shale writes itself stays valid: an error message that echoes such a name has
U+FFFD in its place (so drivers can decode the reply), and log lines stay JSON.
docs/design/utf8.md has the details."""

import json
import struct

import bson
import pytest
from bson.codec_options import CodecOptions

import wire_util

# How a test reads documents that hold bytes that are not UTF-8: each such byte becomes
# a lone surrogate (U+DC80..U+DCFF), so they compare exactly.
RAW = CodecOptions(unicode_decode_error_handler="surrogateescape")


def doc(*elems):
    """A BSON document from raw elements (bson.encode refuses names that are not UTF-8)."""
    body = b"".join(elems)
    return struct.pack("<i", 4 + len(body) + 1) + body + b"\x00"


def e_int(name, v):
    return b"\x10" + name + b"\x00" + struct.pack("<i", v)


def e_str(name, value):
    return b"\x02" + name + b"\x00" + struct.pack("<i", len(value) + 1) + value + b"\x00"


def e_doc(name, d):
    return b"\x03" + name + b"\x00" + d


def e_arr(name, docs):
    return b"\x04" + name + b"\x00" + doc(*(e_doc(str(i).encode(), d) for i, d in enumerate(docs)))


def run(sock, body_bytes):
    """Send a raw command; its reply decoded (names not UTF-8 as surrogates) with the
    reply's raw bytes."""
    rid = wire_util.next_request_id()
    sock.sendall(wire_util.op_msg(None, raw_body=body_bytes, request_id=rid))
    r = wire_util.recv_reply(sock)
    assert r.response_to == rid and r.opcode == wire_util.OP_MSG
    raw = r.payload[5:5 + struct.unpack_from("<i", r.payload, 5)[0]]
    return bson.decode(raw, RAW), raw


def strict(raw):
    """What a driver with default options makes of a reply: it must decode."""
    return bson.decode(raw)


DB = e_str(b"$db", b"test")
ROW = doc(e_int(b"_id", 1), e_int(b"a\xff", 1), e_str(b"s", b"x\xffy"))


def test_command_name_not_utf8_is_command_not_found(node):
    with wire_util.connect(node.port) as s:
        reply, raw = run(s, doc(e_str(b"fi\xffnd", b"c"), DB))
        # MongoDB answers the same code; its errmsg would hold the raw byte, which a driver
        # cannot decode, so Shale's has U+FFFD in its place.
        assert strict(raw) == {"ok": 0.0, "errmsg": "no such command: 'fi\ufffdnd'",
                               "code": 59, "codeName": "CommandNotFound"}
        # The connection keeps serving.
        assert wire_util.command(s, {"ping": 1, "$db": "admin"}) == {"ok": 1.0}


def test_names_and_strings_not_utf8_are_stored_and_returned_byte_for_byte(node):
    with wire_util.connect(node.port) as s:
        reply, raw = run(s, doc(e_str(b"insert", b"c"), e_arr(b"documents", [ROW]), DB))
        assert strict(raw) == {"n": 1, "ok": 1.0}

        # Found by its name, returned with the very bytes it was sent with.
        reply, raw = run(s, doc(e_str(b"find", b"c"), e_doc(b"filter", doc(e_int(b"a\xff", 1))),
                                DB))
        assert reply["ok"] == 1.0
        assert reply["cursor"]["firstBatch"] == [{"_id": 1, "a\udcff": 1, "s": "x\udcffy"}]
        assert ROW in raw

        # Update operators, dotted paths and projection use such names like any other.
        upd = doc(e_doc(b"q", doc(e_int(b"_id", 1))),
                  e_doc(b"u", doc(e_doc(b"$inc", doc(e_int(b"a\xff", 1))),
                                  e_doc(b"$set", doc(e_int(b"b\xfe.c", 2))))))
        reply, raw = run(s, doc(e_str(b"update", b"c"), e_arr(b"updates", [upd]), DB))
        assert strict(raw) == {"n": 1, "nModified": 1, "ok": 1.0}
        reply, raw = run(s, doc(e_str(b"find", b"c"),
                                e_doc(b"projection", doc(e_int(b"a\xff", 1), e_int(b"b\xfe", 1))),
                                DB))
        assert reply["cursor"]["firstBatch"] == [{"_id": 1, "a\udcff": 2, "b\udcfe": {"c": 2}}]

        # An index on such a field, and a query it serves.
        idx = doc(e_doc(b"key", doc(e_int(b"a\xff", 1))), e_str(b"name", b"a_1"))
        reply, raw = run(s, doc(e_str(b"createIndexes", b"c"), e_arr(b"indexes", [idx]), DB))
        assert reply["ok"] == 1.0
        reply, raw = run(s, doc(e_str(b"find", b"c"), e_doc(b"filter", doc(e_int(b"a\xff", 2))),
                                e_str(b"hint", b"a_1"), DB))
        assert [d["_id"] for d in reply["cursor"]["firstBatch"]] == [1]

        # validate checks structure as MongoDB does: the document is not corrupt.
        reply = wire_util.command(s, {"validate": "c", "$db": "test"})
        assert reply["valid"] is True and reply["nInvalidDocuments"] == 0

        # An error that echoes the name: U+FFFD where the byte was, so the reply decodes.
        bad = doc(e_str(b"find", b"c"),
                  e_doc(b"filter", doc(e_doc(b"a\xff", doc(e_int(b"$n\xffpe", 1))))), DB)
        reply, raw = run(s, bad)
        assert strict(raw)["code"] == 2 and "$n\ufffdpe" in strict(raw)["errmsg"]

    # What a driver shows: by default pymongo refuses to decode the document (as it does
    # with mongod); with a lenient decoder it sees U+FFFD.
    with pytest.raises(bson.errors.InvalidBSON):
        node.client().test.c.find_one()
    lenient = node.client(unicode_decode_error_handler="replace")
    assert lenient.test.c.find_one() == {"_id": 1, "a\ufffd": 2, "s": "x\ufffdy",
                                         "b\ufffd": {"c": 2}}


def test_log_lines_stay_json_when_they_echo_such_a_name(node):
    admin = node.client().admin
    admin.command({"setParameter": 1, "logLevel": 1})
    with wire_util.connect(node.port) as s:
        run(s, doc(e_str(b"fi\xffnd", b"c"), DB))
        run(s, doc(e_str(b"find", b"c"),
                   e_doc(b"filter", doc(e_doc(b"a", doc(e_int(b"$n\xffpe", 1))))), DB))
    admin.command({"setParameter": 1, "logLevel": 0})
    with open(node.logpath, "rb") as f:
        lines = f.read().splitlines()
    events = [json.loads(line.decode("utf-8")) for line in lines]  # strict: valid UTF-8
    failed = [e["attr"] for e in events if e["id"] == 51803]
    assert {"command": "fi\ufffdnd", "code": 59,
            "errmsg": "no such command: 'fi\ufffdnd'"} in failed
    assert any(a["command"] == "find" and "$n\ufffdpe" in a["errmsg"] for a in failed)
