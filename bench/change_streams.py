#!/usr/bin/env python3
"""change_streams.py -- change streams through the router on a 2-shard collection (issue 21
item 5). 4 writer threads insert (w:1) into a collection with one chunk on each shard for
SECONDS while one collection stream reads; prints the write rate (the baseline, same run), the
event rate the stream delivered, their ratio (target: the stream keeps up, ratio ~1 and no
backlog at the end), and the added latency from a write's acknowledgement to its event at
p50/p99 (each event carries the time its writer got the acknowledgement).
SHALE_BIN=build/src/main/shale; SECONDS (default 5), WRITERS (4); IDLE_SHARD=1 makes every
writer write to shard0's chunk, so shard1 stays idle (the merge must wait for its mark)."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from shale_fixtures import ShaleCluster  # noqa: E402

SECONDS = float(os.environ.get("SECONDS", "5"))
WRITERS = int(os.environ.get("WRITERS", "4"))
IDLE_SHARD = os.environ.get("IDLE_SHARD") == "1"

c = ShaleCluster(shards=2)
c.start()
try:
    r = c.router.client()
    r.admin.command("enableSharding", "b", primaryShard="shard0")
    r.admin.command("shardCollection", "b.cs", key={"x": 1})
    r.admin.command("split", "b.cs", middle={"x": 0})
    r.admin.command("moveChunk", "b.cs", find={"x": 0}, to="shard1")
    acked = {}  # _id -> perf_counter at acknowledgement
    stop = threading.Event()
    counts = [0] * WRITERS

    def writer(k):
        w = c.router.client()
        coll = w.b.cs
        i = 0
        while not stop.is_set():
            _id = k * 10_000_000 + i
            x = -i - 1 if IDLE_SHARD or k % 2 == 0 else i
            coll.insert_one({"_id": _id, "x": x, "pad": "p" * 100})
            acked[_id] = time.perf_counter()
            i += 1
        counts[k] = i

    lat = []
    events = 0
    with r.b.cs.watch(max_await_time_ms=100) as s:
        threads = [threading.Thread(target=writer, args=(k,)) for k in range(WRITERS)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        # Read while the writers write; then until every write's event came.
        t_writes = None
        total = None
        deadline = t0 + SECONDS + 30
        while time.perf_counter() < deadline:
            if t_writes is None and time.perf_counter() - t0 >= SECONDS:
                stop.set()
                for t in threads:
                    t.join()
                t_writes = time.perf_counter() - t0
                total = sum(counts)
            if total is not None and events >= total:
                break
            ev = s.try_next()
            now = time.perf_counter()
            if ev is None:
                continue
            events += 1
            a = acked.get(ev["documentKey"]["_id"])
            if a is not None:
                lat.append((now - a) * 1e6)
        t_events = time.perf_counter() - t0
    lat.sort()
    p50 = lat[len(lat) // 2] if lat else float("nan")
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("nan")
    wr = total / t_writes
    er = events / t_events
    print('{"writes": %d, "write_rate": %.0f, "events": %d, "event_rate": %.0f, '
          '"ratio": %.3f, "backlog_s": %.2f, "lat_p50_us": %.0f, "lat_p99_us": %.0f, '
          '"lat_samples": %d}' % (total, wr, events, er, er / wr if wr else 0,
                                 t_events - t_writes, p50, p99, len(lat)))
    print("change stream, 2 shards, %d writers: %.0f writes/s, %.0f events/s delivered "
          "(%.2f of the write rate, %.2f s to drain after writes stopped); ack -> event "
          "p50 %.1f ms, p99 %.1f ms" % (WRITERS, wr, er, er / wr if wr else 0,
                                          t_events - t_writes, p50 / 1000, p99 / 1000))
finally:
    c.cleanup()
