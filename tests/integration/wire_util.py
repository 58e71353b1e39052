"""Raw MongoDB wire-protocol messages over plain sockets, for tests that must send what
no driver would (malformed frames, legacy opcodes, odd flags) and read the reply
bytes exactly as a server wrote them."""

import socket
import struct

import bson

OP_REPLY = 1
OP_UPDATE = 2001
OP_INSERT = 2002
OP_QUERY = 2004
OP_GET_MORE = 2005
OP_MSG = 2013

CHECKSUM_PRESENT = 1 << 0
MORE_TO_COME = 1 << 1

_next_id = [1000]


def next_request_id():
    _next_id[0] += 1
    return _next_id[0]


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data):
    """CRC-32C (Castagnoli), the OP_MSG checksum."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def header(length, request_id, opcode, response_to=0):
    return struct.pack("<iiii", length, request_id, response_to, opcode)


def frame(opcode, payload, request_id=None):
    """A whole message: header (with the right length) + payload."""
    rid = request_id if request_id is not None else next_request_id()
    return header(16 + len(payload), rid, opcode) + payload


def op_msg(body, flags=0, sequences=(), request_id=None, raw_body=None, checksum=False):
    """An OP_MSG. 'body' is a dict (or raw BSON bytes in raw_body); 'sequences' is a list
    of (identifier, [docs]) sent as kind-1 sections."""
    if checksum:
        flags |= CHECKSUM_PRESENT
    payload = struct.pack("<I", flags)
    payload += b"\x00" + (raw_body if raw_body is not None else bson.encode(body))
    for ident, docs in sequences:
        data = ident.encode() + b"\x00" + b"".join(bson.encode(d) for d in docs)
        payload += b"\x01" + struct.pack("<i", 4 + len(data)) + data
    rid = request_id if request_id is not None else next_request_id()
    if not checksum:
        return frame(OP_MSG, payload, rid)
    msg = header(16 + len(payload) + 4, rid, OP_MSG) + payload
    return msg + struct.pack("<I", crc32c(msg))


def op_query(ns, query, request_id=None, n_to_return=-1):
    payload = struct.pack("<i", 0) + ns.encode() + b"\x00"
    payload += struct.pack("<ii", 0, n_to_return) + bson.encode(query)
    return frame(OP_QUERY, payload, request_id)


def connect(port, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return buf


class Reply:
    def __init__(self, length, request_id, response_to, opcode, payload):
        self.length = length
        self.request_id = request_id
        self.response_to = response_to
        self.opcode = opcode
        self.payload = payload

    @property
    def doc(self):
        """The reply document: OP_MSG's body section, OP_REPLY's first document."""
        if self.opcode == OP_MSG:
            flags, kind = struct.unpack_from("<IB", self.payload)
            assert kind == 0, "first section of a reply must be the body"
            return bson.decode(self.payload[5:5 + struct.unpack_from("<i", self.payload, 5)[0]])
        if self.opcode == OP_REPLY:
            _flags, _cursor, _start, nret = struct.unpack_from("<iqii", self.payload)
            assert nret == 1
            return bson.decode(self.payload[20:])
        raise AssertionError("unexpected reply opcode %d" % self.opcode)

    @property
    def reply_flags(self):
        return struct.unpack_from("<i", self.payload)[0]


def recv_reply(sock):
    """Read one whole message; raises ConnectionError if the server closed first."""
    hdr = _recv_exact(sock, 16)
    length, rid, rto, opcode = struct.unpack("<iiii", hdr)
    return Reply(length, rid, rto, opcode, _recv_exact(sock, length - 16))


def command(sock, body, **kw):
    """Send an OP_MSG command and return the reply document."""
    rid = next_request_id()
    sock.sendall(op_msg(body, request_id=rid, **kw))
    r = recv_reply(sock)
    assert r.response_to == rid
    return r.doc


def is_closed(sock, timeout=10.0):
    """True when the server closed the connection (EOF or reset) within 'timeout'
    seconds; False if bytes arrived instead."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(1)
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return data == b""
