#!/usr/bin/env python3
"""repl_majority.py -- issue 18 item 8's figure: single-document insert latency with
w:"majority" against w:1 on a 3-member set (test fixtures' 200 ms heartbeats), one
connection, the two interleaved in rounds so both see the same machine. Prints p50/p99 of
each, the ratio of the p50s (target <= 2), and `uptime`. Raw OP_MSG over one socket (no
driver overhead in either figure); DRIVER=1: through pymongo instead (what a user sees, as
repl18b measured). SHALE_BIN=build/src/main/shale, N=600 per kind, ROUNDS=3."""
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import wire_util  # noqa: E402
from shale_fixtures import cleanup_later, start_replica_set, wait_reaped  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main():
    n = int(os.environ.get("N", "600"))
    rounds = int(os.environ.get("ROUNDS", "3"))
    nodes = start_replica_set("bm", "bm")
    try:
        sock = wire_util.connect(nodes[0].port)
        client = nodes[0].client(directConnection=True) if os.environ.get("DRIVER") else None
        lat = {"w1": [], "majority": []}
        k = 0
        for _ in range(rounds):
            for kind, wc in (("w1", {"w": 1}), ("majority", {"w": "majority"})):
                for _ in range(n // rounds):
                    k += 1
                    body = {"insert": "m", "documents": [{"_id": k, "x": "y" * 32}],
                            "writeConcern": wc, "$db": "bench"}
                    t0 = time.perf_counter()
                    if client is not None:
                        r = client.bench.command("insert", "m", documents=body["documents"],
                                                 writeConcern=wc)
                    else:
                        r = wire_util.command(sock, body)
                    lat[kind].append((time.perf_counter() - t0) * 1e3)
                    assert r["ok"] == 1 and "writeConcernError" not in r, r
        sock.close()
        if client is not None:
            client.close()
    finally:
        cleanup_later(nodes, lambda i, p: None)
        wait_reaped()
    for kind in ("w1", "majority"):
        print("%-9s p50 %.3f ms  p99 %.3f ms  (%d inserts)" %
              (kind, statistics.median(lat[kind]), pct(lat[kind], 0.99), len(lat[kind])))
    print("ratio of p50s (majority / w1): %.2f" %
          (statistics.median(lat["majority"]) / statistics.median(lat["w1"])))
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
