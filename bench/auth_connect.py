#!/usr/bin/env python3
"""auth_connect.py -- connection setup with authentication against without (issue 19 item
8): new connections per second to a `shale node`, each doing what a driver does before its
first command -- hello, then (with --auth) SCRAM-SHA-256 or SCRAM-SHA-1 in two round trips
(saslStart, saslContinue with skipEmptyExchange), or "+spec": saslStart inside the hello
(speculativeAuthenticate, as drivers do) and one saslContinue; then one ping -- and closing. The client
caches its salted password as drivers do, so the figures are the server's cost. Baseline: the
same without authentication, same build, same run. SHALE_BIN=build/src/main/shale;
SECONDS_EACH (default 3), PROCS (parallel clients, default 1 and 4)."""
import base64
import hashlib
import hmac
import multiprocessing
import os
import socket
import struct
import sys
import time

import bson

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from shale_fixtures import ShaleProcess  # noqa: E402

SECS = float(os.environ.get("SECONDS_EACH", "3"))
PROCS = [int(p) for p in os.environ.get("PROCS", "1,4").split(",")]
USER, PWD = "bench", "bench-pw"


def command(sock, doc, rid=[0]):
    rid[0] += 1
    body = bson.encode(doc)
    msg = struct.pack("<iiiiI", 16 + 4 + 1 + len(body), rid[0], 0, 2013, 0) + b"\0" + body
    sock.sendall(msg)
    hdr = b""
    while len(hdr) < 16:
        hdr += sock.recv(16 - len(hdr))
    n = struct.unpack("<i", hdr[:4])[0] - 16
    data = b""
    while len(data) < n:
        data += sock.recv(n - len(data))
    return bson.decode(data[5:])


_salted = {}


def scram(sock, mech, speculative=False):
    h = hashlib.sha1 if mech == "SCRAM-SHA-1" else hashlib.sha256
    pw = (hashlib.md5(("%s:mongo:%s" % (USER, PWD)).encode()).hexdigest()
          if mech == "SCRAM-SHA-1" else PWD)
    nonce = base64.b64encode(os.urandom(18)).decode()
    bare = "n=%s,r=%s" % (USER, nonce)
    start = {"saslStart": 1, "mechanism": mech, "payload": ("n,," + bare).encode(),
             "options": {"skipEmptyExchange": True}}
    if speculative:
        # The driver's way: the first step rides in the handshake's hello.
        start["db"] = "admin"
        r = command(sock, {"hello": 1, "speculativeAuthenticate": start, "$db": "admin"})
        r = r["speculativeAuthenticate"]
    else:
        r = command(sock, dict(start, **{"$db": "admin"}))
    first = bytes(r["payload"]).decode()
    f = dict(kv.split("=", 1) for kv in first.split(","))
    key = (mech, f["s"], f["i"])
    if key not in _salted:
        _salted[key] = hashlib.pbkdf2_hmac(h().name, pw.encode(), base64.b64decode(f["s"]),
                                           int(f["i"]))
    salted = _salted[key]
    ck = hmac.new(salted, b"Client Key", h).digest()
    final = "c=biws,r=%s" % f["r"]
    auth_msg = ("%s,%s,%s" % (bare, first, final)).encode()
    sig = hmac.new(h(ck).digest(), auth_msg, h).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(ck, sig))).decode()
    r = command(sock, {"saslContinue": 1, "conversationId": r["conversationId"],
                       "payload": ("%s,p=%s" % (final, proof)).encode(), "$db": "admin"})
    assert r["ok"] == 1 and r["done"], r


def worker(port, mech, secs, out):
    n = 0
    end = time.monotonic() + secs
    while time.monotonic() < end:
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if mech and mech.endswith("+spec"):
            scram(s, mech[:-5], speculative=True)
        else:
            assert command(s, {"hello": 1, "$db": "admin"})["ok"] == 1
            if mech:
                scram(s, mech)
        assert command(s, {"ping": 1, "$db": "admin"})["ok"] == 1
        s.close()
        n += 1
    out.put(n)


def rate(port, mech, procs):
    q = multiprocessing.Queue()
    ps = [multiprocessing.Process(target=worker, args=(port, mech, SECS, q))
          for _ in range(procs)]
    for p in ps:
        p.start()
    total = sum(q.get() for _ in ps)
    for p in ps:
        p.join()
    return total / SECS


def main():
    plain = ShaleProcess(["node"], name="bench-plain", test_commands=False)
    auth = ShaleProcess(["node", "--auth"], name="bench-auth", test_commands=False)
    try:
        plain.start()
        auth.start()
        c = auth.client()
        c.admin.command("createUser", USER, pwd=PWD, roles=["root"])
        c.close()
        for procs in PROCS:
            base = rate(plain.port, None, procs)
            print("%d client(s): no auth %.0f conn/s" % (procs, base))
            for mech in ("SCRAM-SHA-256+spec", "SCRAM-SHA-256", "SCRAM-SHA-1"):
                r = rate(auth.port, mech, procs)
                print("%d client(s): %s %.0f conn/s  ratio %.2f" % (procs, mech, r, r / base))
    finally:
        plain.cleanup()
        auth.cleanup()


if __name__ == "__main__":
    main()
