#!/usr/bin/env python3
"""repl_majority.py -- issue 18 item 8's latency figure: single-document insert latency with
w:"majority" against w:1 on a 3-member set (the test fixtures' set: 200 ms heartbeats), at 1
and 8 connections (CONNS), through loadgen (libmongoc, C threads: next to no client cost).
Each figure is an A/B run of loadgen (the two modes alternate every SLICE s in one run, so
both see the same machine); ROUNDS runs per connection count, medians of their p50/p99.

Printed per connection count: w:1 and w:"majority" p50/p99 and the ratio of the p50s (target
<= 2), then the floor measured the same way: w:1 against {w: 1, j: true} (one journal fsync
on the primary, group-committed). A majority write needs at least that: with
writeConcernMajorityJournalDefault the write must be in the journal of a majority, so some
member fsyncs after the write reached it; so j:true / w:1 is a lower bound of the ratio that
no implementation goes below on this disk (the secondary's fsync also comes after a network
hop and the position report, so the true floor is higher). Then `uptime`.

BASE_BIN=another build's shale: a second set runs it, and its w:"majority" p50/p99 is measured
against this build's in A/B runs too (a change's effect, same machine, same time).

SHALE_BIN=build-release/src/main/shale (loadgen from the same build: ../../bench/loadgen),
CONNS="1 8", SECONDS_=4 per run, ROUNDS=3, SLICE=0.25."""
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import shale_fixtures  # noqa: E402
from shale_fixtures import SHALE_BIN, cleanup_later, start_replica_set, wait_reaped  # noqa: E402

LOADGEN = os.environ.get("LOADGEN") or os.path.join(
    os.path.dirname(os.path.abspath(SHALE_BIN)), "..", "..", "bench", "loadgen")


def ab_run(host, threads, seconds, slice_s, a_opts, b_opts, host_b=None):
    """One loadgen A/B insert run: {'a': (p50_us, p99_us), 'b': (...)}."""
    uri = "mongodb://%s/?directConnection=true"
    out = subprocess.run([LOADGEN, "--uri", uri % host + a_opts, "--alt-uri",
                          uri % (host_b or host) + b_opts,
                          "--slice", str(slice_s), "--threads", str(threads), "--seconds",
                          str(seconds), "--op", "insert", "--wc", "uri"],
                         capture_output=True, text=True, check=True).stdout
    res = {}
    for line in out.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            assert r["errors"] == 0, r
            res[r["mode"]] = (r["p50_us"], r["p99_us"])
    return res


def medians(runs, mode):
    return (statistics.median(r[mode][0] for r in runs),
            statistics.median(r[mode][1] for r in runs))


def main():
    conns = [int(c) for c in os.environ.get("CONNS", "1 8").split()]
    seconds = float(os.environ.get("SECONDS_", "4"))
    rounds = int(os.environ.get("ROUNDS", "3"))
    slice_s = float(os.environ.get("SLICE", "0.25"))
    if not os.access(LOADGEN, os.X_OK):
        sys.exit("repl_majority: no loadgen at %s (make release; or LOADGEN=...)" % LOADGEN)
    nodes = start_replica_set("bm", "bm")
    base_bin = os.environ.get("BASE_BIN")
    lines = []
    try:
        host = nodes[0].host
        if base_bin:
            shale_fixtures.SHALE_BIN = base_bin
            nodes += start_replica_set("bb", "bb")
            shale_fixtures.SHALE_BIN = SHALE_BIN
        for c in conns:
            maj = [ab_run(host, c, seconds, slice_s, "&w=1", "&w=majority")
                   for _ in range(rounds)]
            floor = [ab_run(host, c, seconds, slice_s, "&w=1", "&w=1&journal=true")
                     for _ in range(rounds)]
            w1, wm = medians(maj, "a"), medians(maj, "b")
            f1, fj = medians(floor, "a"), medians(floor, "b")
            lines.append("x%d  w:1 p50 %.0f us p99 %.0f us | w:majority p50 %.0f us p99 %.0f us"
                         " | ratio p50 %.2f p99 %.2f (target p50 <= 2)" %
                         (c, w1[0], w1[1], wm[0], wm[1], wm[0] / w1[0], wm[1] / w1[1]))
            lines.append("x%d  floor: w:1 p50 %.0f us | w:1,j:true p50 %.0f us p99 %.0f us |"
                         " j/w1 p50 %.2f (no majority write is faster than j:true)" %
                         (c, f1[0], fj[0], fj[1], fj[0] / f1[0]))
            if base_bin:
                ab = [ab_run(host, c, seconds, slice_s, "&w=majority", "&w=majority",
                             nodes[3].host) for _ in range(rounds)]
                this, base = medians(ab, "a"), medians(ab, "b")
                lines.append("x%d  w:majority this build p50 %.0f us p99 %.0f us | BASE_BIN "
                             "p50 %.0f us p99 %.0f us | this / base p50 %.2f" %
                             (c, this[0], this[1], base[0], base[1], this[0] / base[0]))
    finally:
        cleanup_later(nodes, lambda i, p: None)
        wait_reaped()
    print("repl_majority: 3-member set, loadgen insert, %d A/B runs of %.0f s per figure "
          "(medians)" % (rounds, seconds))
    for line in lines:
        print(line)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
