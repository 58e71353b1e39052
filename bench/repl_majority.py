#!/usr/bin/env python3
"""repl_majority.py -- issue 18 item 8's latency figure: single-document insert latency with
w:"majority" against w:1 on a 3-member set (the test fixtures' set: 200 ms heartbeats), at 1
and 8 connections (CONNS), through loadgen (libmongoc, C threads: next to no client cost).
Per connection count, ROUNDS rounds of one SECONDS_ run per mode in turn (w:1, w:"majority",
{w: 1, j: true}), each run starting once every secondary has applied the primary's newest
entry (a w:1 run at 8 connections leaves them behind, and a majority run right after it would
measure their catch-up; so modes are not interleaved in slices); medians of the p50/p99.

Printed per connection count: w:1 and w:"majority" p50/p99 and their ratios (target p50 <=
2), and the floor: {w: 1, j: true} (one journal fsync on the primary, group-committed). A
majority write needs at least that: with writeConcernMajorityJournalDefault the write must be
in the journal of a majority, so some member fsyncs after the write reached it; so j:true / w:1
is a ratio no implementation goes below on this disk (the secondary's fsync also comes after a
network hop and the position report, so the true floor is higher). Then `uptime`.

BASE_BIN=another build's shale: a second set runs it, with a w:"majority" run in each round
(a change's effect, same machine, same time).

SHALE_BIN=build-release/src/main/shale (loadgen from the same build: ../../bench/loadgen),
CONNS="1 8", SECONDS_=3, ROUNDS=3."""
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import shale_fixtures  # noqa: E402
from shale_fixtures import (SHALE_BIN, cleanup_later, start_replica_set,  # noqa: E402
                            wait_reaped, wait_until)

LOADGEN = os.environ.get("LOADGEN") or os.path.join(
    os.path.dirname(os.path.abspath(SHALE_BIN)), "..", "..", "bench", "loadgen")


def run(host, threads, seconds, opts):
    """One loadgen insert run on 'host' with URI options 'opts': (p50_us, p99_us)."""
    uri = "mongodb://%s/?directConnection=true%s" % (host, opts)
    out = subprocess.run([LOADGEN, "--uri", uri, "--threads", str(threads), "--seconds",
                          str(seconds), "--op", "insert", "--wc", "uri"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            assert r["errors"] == 0, r
            return (r["p50_us"], r["p99_us"])
    raise RuntimeError("loadgen printed no result: " + out)


def caught_up(primary):
    """Wait until every member has applied the primary's newest entry (a w:1 run leaves the
    secondaries behind; the next run must not pay for that lag)."""
    c = primary.client(directConnection=True)

    def done():
        ms = c.admin.command("replSetGetStatus")["members"]
        return len({m["optime"]["ts"] for m in ms}) == 1
    wait_until(done, 120, "the secondaries caught up")
    c.close()


def main():
    conns = [int(c) for c in os.environ.get("CONNS", "1 8").split()]
    seconds = float(os.environ.get("SECONDS_", "3"))
    rounds = int(os.environ.get("ROUNDS", "3"))
    if not os.access(LOADGEN, os.X_OK):
        sys.exit("repl_majority: no loadgen at %s (make release; or LOADGEN=...)" % LOADGEN)
    nodes = start_replica_set("bm", "bm")
    base_bin = os.environ.get("BASE_BIN")
    lines = []
    try:
        if base_bin:
            shale_fixtures.SHALE_BIN = base_bin
            nodes += start_replica_set("bb", "bb")
            shale_fixtures.SHALE_BIN = SHALE_BIN
        modes = [("w1", nodes[0], "&w=1"), ("majority", nodes[0], "&w=majority"),
                 ("j", nodes[0], "&w=1&journal=true")]
        if base_bin:
            modes.append(("base", nodes[3], "&w=majority"))
        for c in conns:
            res = {m[0]: [] for m in modes}
            for _ in range(rounds):
                for name, node, opts in modes:
                    caught_up(node)
                    res[name].append(run(node.host, c, seconds, opts))
            med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
                   for k, v in res.items()}
            w1, wm, wj = med["w1"], med["majority"], med["j"]
            lines.append("x%d  w:1 p50 %.0f us p99 %.0f us | w:majority p50 %.0f us p99 %.0f us"
                         " | ratio p50 %.2f p99 %.2f (target p50 <= 2)" %
                         (c, w1[0], w1[1], wm[0], wm[1], wm[0] / w1[0], wm[1] / w1[1]))
            lines.append("x%d  floor: w:1,j:true p50 %.0f us p99 %.0f us | j/w1 p50 %.2f (no "
                         "majority write is faster than j:true)" % (c, wj[0], wj[1], wj[0] / w1[0]))
            if base_bin:
                b = med["base"]
                lines.append("x%d  BASE_BIN w:majority p50 %.0f us p99 %.0f us | this / base "
                             "p50 %.2f" % (c, b[0], b[1], wm[0] / b[0]))
    finally:
        cleanup_later(nodes, lambda i, p: None)
        wait_reaped()
    print("repl_majority: 3-member set, loadgen insert, %d rounds of %.0f s runs per mode "
          "(medians; each run starts with the secondaries caught up)" % (rounds, seconds))
    for line in lines:
        print(line)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
