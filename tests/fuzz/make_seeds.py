#!/usr/bin/python3
"""Writes the seed corpora committed beside this script: a few valid wire-protocol
messages (corpus/message) and BSON documents of every type (corpus/bson). Run it
again only to change the seeds:
`/usr/bin/python3 tests/fuzz/make_seeds.py` (needs Debian's python3-bson)."""

import datetime
import os
import struct
import uuid

import bson
from bson import Binary, Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp

HERE = os.path.dirname(os.path.abspath(__file__))
OP_QUERY, OP_MSG = 2004, 2013


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def op_msg(body, sequences=(), flags=0, request_id=1):
    payload = struct.pack("<I", flags) + b"\x00" + bson.encode(body)
    for ident, docs in sequences:
        seq = ident.encode() + b"\x00" + b"".join(bson.encode(d) for d in docs)
        payload += b"\x01" + struct.pack("<i", 4 + len(seq)) + seq
    n = 16 + len(payload) + (4 if flags & 1 else 0)
    msg = struct.pack("<iiii", n, request_id, 0, OP_MSG) + payload
    if flags & 1:
        msg += struct.pack("<I", crc32c(msg))
    return msg


def op_query(ns, query, request_id=1):
    payload = struct.pack("<i", 0) + ns.encode() + b"\x00" + struct.pack("<ii", 0, -1)
    payload += bson.encode(query)
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, OP_QUERY) + payload


MESSAGES = {
    "ping": op_msg({"ping": 1, "$db": "admin"}),
    "hello_checksum": op_msg({"hello": 1, "helloOk": True, "$db": "admin"}, flags=1),
    "insert_sequence": op_msg({"insert": "c", "ordered": True, "$db": "test"},
                              [("documents", [{"_id": 1, "a": "x"}, {"_id": 2, "a": [1, 2]}])]),
    "update_two_sequences": op_msg({"update": "c", "$db": "test"},
                                   [("updates", [{"q": {}, "u": {"$set": {"a": 1}}}]),
                                    ("let", [{"x": 1}])]),
    "ping_more_to_come": op_msg({"ping": 1, "$db": "admin"}, flags=2),
    "hello_exhaust": op_msg({"hello": 1, "$db": "admin"}, flags=1 << 16),
    "query_ismaster": op_query("admin.$cmd", {"isMaster": 1, "client": {"driver": {
        "name": "seed", "version": "1"}}}),
    "query_wrapped": op_query("admin.$cmd", {"$query": {"ismaster": 1},
                                             "$readPreference": {"mode": "primary"}}),
}

DOCS = {
    "hello": {"hello": 1, "$db": "admin"},
    "all_types": {
        "double": 1.5, "string": "héllo", "doc": {"a": {"b": [1, {"c": None}]}},
        "array": [1, "two", 3.0], "bin": Binary(b"\x00\x01\x02", 0),
        "uuid": Binary(uuid.UUID(int=1).bytes, 4), "oid": ObjectId("0123456789abcdef01234567"),
        "bool": True, "date": datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc),
        "null": None, "regex": Regex("^a.*b$", "im"), "code": Code("function(){}"),
        "codews": Code("function(){return x}", {"x": 1}), "int32": 7,
        "ts": Timestamp(1700000000, 3), "int64": Int64(1 << 40),
        "dec": Decimal128("1.2345E-10"), "min": MinKey(), "max": MaxKey(),
        "dbref": DBRef("c", 1, "db"),
    },
    "deep": {"a": {"b": {"c": {"d": {"e": [[[{"f": 1}]]]}}}}},
    "empty": {},
}


def raw_doc(elements):
    """A document from raw element bytes (bson.encode refuses names that are not UTF-8)."""
    return struct.pack("<i", 4 + len(elements) + 1) + elements + b"\x00"


def write(folder, name, data):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def main():
    for name, data in MESSAGES.items():
        write(os.path.join(HERE, "corpus", "message"), name, data)
    for name, doc in DOCS.items():
        write(os.path.join(HERE, "corpus", "bson"), name, bson.encode(doc))
    # Legacy types pymongo no longer writes: undefined (0x06), DBPointer (0x0C), symbol (0x0E).
    legacy = (b"\x06u\x00" + b"\x0cp\x00" + struct.pack("<i", 4) + b"a.b\x00" + b"\x01" * 12 +
              b"\x0es\x00" + struct.pack("<i", 4) + b"sym\x00")
    write(os.path.join(HERE, "corpus", "bson"), "legacy_types",
          struct.pack("<i", 4 + len(legacy) + 1) + legacy + b"\x00")
    # Names and strings that are not UTF-8, which MongoDB accepts (docs/design/utf8.md), at
    # the top and nested, after a code-with-scope element: libbson 1.23's bson_validate
    # stops checking there, so the old oracle took them for valid and the parser refused
    # them (make fuzz's first failure).
    cws = bson.encode({"c": Code("f", {"x": 1})})[4:-1]
    names = (cws + b"\x10fi\xffnd\x00" + struct.pack("<i", 1) +
             b"\x03d\x00" + raw_doc(b"\x02$r\x9bf\x00" + struct.pack("<i", 4) + b"x\xc3y\x00"))
    write(os.path.join(HERE, "corpus", "bson"), "names_not_utf8", raw_doc(names))
    body = raw_doc(b"\x02insert\x00" + struct.pack("<i", 2) + b"c\x00" +
                   b"\x02$db\x00" + struct.pack("<i", 5) + b"test\x00")
    seq = b"docs\xfe\x00" + raw_doc(b"\x10a\xff\x00" + struct.pack("<i", 1))
    payload = (struct.pack("<I", 0) + b"\x00" + body + b"\x01" +
               struct.pack("<i", 4 + len(seq)) + seq)
    write(os.path.join(HERE, "corpus", "message"), "sequence_names_not_utf8",
          struct.pack("<iiii", 16 + len(payload), 1, 0, OP_MSG) + payload)


if __name__ == "__main__":
    main()
