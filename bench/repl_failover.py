#!/usr/bin/env python3
"""repl_failover.py -- issue 18 item 8's failover figure: the time from kill -9 of a shard's
primary to the first write acknowledged through the router, with default settings (a
`shale up --shards 1 --replicas 3` cluster: heartbeats 2 s, electionTimeoutMillis 10 s; target
<= 12 s). A client of the router (pymongo, retryable writes, w:"majority") inserts one
document after another, each a new attempt as soon as the last one failed; the figure is from
the kill to the first insert acknowledged after it. The killed member is then started again
(`shale up` on the folder restarts what is not running) and the next round kills the new
primary. Prints each round, the median and `uptime`.

SHALE_BIN=build-release/src/main/shale, ROUNDS=3."""
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import pymongo

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from shale_fixtures import SHALE_BIN, wait_until  # noqa: E402


def free_block(n):
    """A port P such that P..P+n-1 are free on the loopback."""
    for base in range(24000, 60000, n + 1):
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            pass
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free ports")


def shard_members(folder):
    """[(name, port, pid)] of the shard set's members, from cluster.json."""
    with open(os.path.join(folder, "cluster.json")) as f:
        lay = json.load(f)
    return [(p["name"], p["port"], p["pid"]) for p in lay["processes"]
            if p.get("role") == "shardsvr"]


def hello(port):
    c = pymongo.MongoClient("127.0.0.1", port, directConnection=True,
                            serverSelectionTimeoutMS=1000)
    try:
        return c.admin.command("hello")
    finally:
        c.close()


def set_healthy(folder):
    """The shard set's primary (name, port, pid) once it has one and two secondaries."""
    states = {}
    for name, port, pid in shard_members(folder):
        try:
            h = hello(port)
        except pymongo.errors.PyMongoError:
            return None
        states[(name, port, pid)] = ("P" if h.get("isWritablePrimary") else
                                     "S" if h.get("secondary") else "?")
    prim = [m for m, s in states.items() if s == "P"]
    if len(prim) == 1 and sorted(states.values()) == ["P", "S", "S"]:
        return prim[0]
    return None


def shale_up(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("repl_failover: %s failed:\n%s%s" % (" ".join(args), r.stdout, r.stderr))


def main():
    rounds = int(os.environ.get("ROUNDS", "3"))
    folder = tempfile.mkdtemp(prefix="shale-failover-")
    port = free_block(8)
    up = [SHALE_BIN, "up", "--shards", "1", "--replicas", "3", "--dbpath", folder]
    times = []
    try:
        shale_up(up + ["--port", str(port)])
        client = pymongo.MongoClient("127.0.0.1", port, serverSelectionTimeoutMS=30000,
                                     socketTimeoutMS=60000, w="majority")
        coll = client.bench.failover
        coll.drop()
        k = 0
        for r in range(rounds):
            prim = wait_until(lambda: set_healthy(folder), 120, "a primary and 2 secondaries")
            for _ in range(20):  # the router knows the primary and the collection
                k += 1
                coll.insert_one({"_id": k})
            os.kill(prim[2], signal.SIGKILL)
            t0 = time.monotonic()
            while True:
                k += 1
                try:
                    coll.insert_one({"_id": k})
                    break
                except pymongo.errors.PyMongoError:
                    if time.monotonic() - t0 > 120:
                        raise
                    time.sleep(0.01)
            times.append(time.monotonic() - t0)
            print("round %d: killed %s (pid %d); first write acknowledged after %.2f s" %
                  (r + 1, prim[0], prim[2], times[-1]), flush=True)
            shale_up(up)
        client.close()
    finally:
        subprocess.run([SHALE_BIN, "down", "--dbpath", folder], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(folder, ignore_errors=True)
    print("failover (kill -9 of the shard primary -> first write through the router, default "
          "settings): median %.2f s, max %.2f s over %d rounds (target <= 12 s)" %
          (statistics.median(times), max(times), len(times)))
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
