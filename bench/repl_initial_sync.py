#!/usr/bin/env python3
"""repl_initial_sync.py -- issue 18 item 8's initial sync figure: a 3-member set (the test
fixtures' set) is loaded with MB megabytes of 1 KB documents (one collection with an index on
a field besides _id), then one secondary is stopped, its dbpath wiped and it is started again:
it clones the set from the primary and catches up. The figure is the data size (dbStats
dataSize of the loaded database: BSON bytes) over the time from the wiped member's start to
its SECONDARY state, in MB/s, and the clone alone (the member's log: "initial sync cloned
the databases", durationMillis); WRITERS=1 keeps one writer inserting on the primary meanwhile
(the oplog catch-up then has work). Prints the figure and `uptime`.

SHALE_BIN=build-release/src/main/shale, MB=128, WRITERS=0."""
import json
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from shale_fixtures import cleanup_later, start_replica_set, wait_reaped, wait_until  # noqa: E402

DOC_PAD = 1000


def load(db, mb):
    n = mb * 1024 * 1024 // (DOC_PAD + 40)
    batch = 1000
    for i in range(0, n, batch):
        db.data.insert_many([{"_id": k, "a": k % 9973, "pad": "%08d" % k * (DOC_PAD // 8)}
                             for k in range(i, min(n, i + batch))], ordered=False)
    db.data.create_index([("a", 1)])
    return n


def clone_ms(proc):
    """durationMillis of the member's last "initial sync cloned the databases" (2180041)."""
    ms = None
    for line in proc.read_log().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("id") == 2180041:
            ms = e["attr"]["durationMillis"]
    return ms


def main():
    mb = int(os.environ.get("MB", "128"))
    writers = int(os.environ.get("WRITERS", "0"))
    nodes = start_replica_set("isb", "isb")
    stop = threading.Event()
    threads = []
    try:
        primary, _, wiped = nodes
        pc = primary.client(directConnection=True, w=1)
        t0 = time.monotonic()
        ndocs = load(pc.bench, mb)
        load_s = time.monotonic() - t0
        size = pc.bench.command("dbStats")["dataSize"]
        print("loaded %d documents, %.1f MB (dataSize) in %.1f s" %
              (ndocs, size / 1048576, load_s), flush=True)
        wait_until(lambda: wiped.client(directConnection=True).admin.command(
            "replSetGetStatus")["optimes"]["appliedOpTime"] == pc.admin.command(
            "replSetGetStatus")["optimes"]["appliedOpTime"], 300, "the member caught up")
        wiped.stop()
        shutil.rmtree(wiped.dbpath)

        def writer():
            c = primary.client(directConnection=True, w=1)
            k = -1
            while not stop.is_set():
                c.bench.during.insert_one({"_id": k, "pad": "x" * DOC_PAD})
                k -= 1
            c.close()
        for _ in range(writers):
            threads.append(threading.Thread(target=writer))
            threads[-1].start()
        t0 = time.monotonic()
        wiped.start()
        sc = wiped.client(directConnection=True)
        wait_until(lambda: sc.admin.command("replSetGetStatus")["myState"] == 2, 1800,
                   "the wiped member becomes a secondary")
        sync_s = time.monotonic() - t0
        stop.set()
        for t in threads:
            t.join()
        clone_s = clone_ms(wiped) / 1000.0
        got = sc.bench.data.estimated_document_count()
        assert got == ndocs, (got, ndocs)
        sc.close()
        pc.close()
    finally:
        stop.set()
        cleanup_later(nodes, lambda i, p: None)
        wait_reaped()
    print("initial sync of a wiped member: %.1f MB cloned in %.1f s = %.1f MB/s (its log's "
          "durationMillis); start to SECONDARY %.1f s = %.1f MB/s (process start, config by "
          "heartbeat, clone, catch-up; %d writers on the primary meanwhile)" %
          (size / 1048576, clone_s, size / 1048576 / clone_s, sync_s, size / 1048576 / sync_s,
           writers))
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
