#!/usr/bin/env python3
"""balancer.py -- the balancer at scale (issue 16 item 8), one run on a 2-shard cluster:
1. from one shard holding MB megabytes (1 KB documents, ascending key, config.settings
   chunksize CHUNK_MB) to balanced over the two shards by the balancer alone (MongoDB 7.0's
   rule: data sizes within three chunk sizes; balancerCollectionStatus): wall time and MB/s;
   a client's single inserts (j:false, through the router, into a collection of their own on
   each shard, taking turns) timed
   while nothing moves and while the balancer moves chunks: p50 and p99 of each, and the
   ratio of the p99s (target <= 3), over all inserts and per shard (donor, recipient);
2. a skewed workload (80 % of reads and updates on 10 % of the key range) under the load policy
   (config.settings balancer policy "load"): each shard's share of the operations before and
   after the balancer acted (target: no shard above 60 %).
SHALE_BIN (default build-release/src/main/shale), MB (default 1024), CHUNK_MB (64),
SKEW_SECONDS (how long part 2 waits for the balancer, default 90; 0 skips part 2), PACING=0
(the shards' setParameter migrationCachePacing false: no clone batch waits for the cache),
SHARD_ARGS (more command-line arguments for both shards, split at spaces; e.g.
--wiredTigerEngineConfigString=eviction_dirty_trigger=30 for an A/B of a WiredTiger setting)."""
import os
import random
import statistics
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("SHALE_BIN", os.path.join(here, "..", "build-release", "src", "main",
                                                "shale"))
sys.path.insert(0, os.path.join(here, "..", "tests", "integration"))
import pymongo  # noqa: E402
from pymongo.write_concern import WriteConcern  # noqa: E402
from shale_fixtures import ShaleCluster, config_db  # noqa: E402

MB = int(os.environ.get("MB", "1024"))
CHUNK_MB = int(os.environ.get("CHUNK_MB", "64"))
SKEW_SECONDS = float(os.environ.get("SKEW_SECONDS", "90"))
PACING = os.environ.get("PACING", "1") != "0"
SHARD_ARGS = os.environ.get("SHARD_ARGS", "").split()
PAD = "x" * 960  # {_id, x, pad}: about 1 KB of BSON


class Background:
    """A daemon thread running self.run() until close(); 'phase' names what is measured."""

    def start(self):
        self.phase = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def close(self):
        self.stop.set()
        self.thread.join(30)


class Prober(Background):
    """Single inserts through the router, back to back, timed; one thread takes turns over the
    targets (a collection of its own on each shard: 'probe0' has shard0, the donor, as its
    primary, 'probe1' shard1, the recipient), so the figures say whose migration work hurts
    other clients; latencies kept per phase and target."""

    TARGETS = ("probe0", "probe1")

    def __init__(self, uri):
        self.client = pymongo.MongoClient(uri)
        wc = WriteConcern(w=1, j=False)
        self.colls = [self.client[db].t.with_options(write_concern=wc) for db in self.TARGETS]
        self.lat = {}
        self.start()

    def run(self):
        n = 0
        while not self.stop.is_set():
            phase = self.phase
            k = n % len(self.colls)
            t = time.perf_counter()
            self.colls[k].insert_one({"_id": n})
            if phase is not None:
                us = (time.perf_counter() - t) * 1e6
                self.lat.setdefault((phase, None), []).append(us)
                self.lat.setdefault((phase, self.TARGETS[k]), []).append(us)
            n += 1

    def p50_p99(self, phase, target=None):
        v = sorted(self.lat.get((phase, target), [0]))
        return v[len(v) // 2], v[min(len(v) - 1, int(len(v) * 0.99))], len(v)

    def close(self):
        Background.close(self)
        self.client.close()


class CacheSampler(Background):
    """Each shard's WiredTiger cache (serverStatus wiredTiger.cache) twice a second: the highest
    dirty and used shares of the cache seen per phase (WiredTiger's application threads evict,
    and a client's write waits, past 20 % dirty or 95 % used) and the shortest history window
    (storage/history_window.c shrinks it under cache pressure)."""

    def __init__(self, c, n):
        self.clients = [c.shard_client(i) for i in range(n)]
        self.peak = {}
        self.app = {}  # (phase, shard) -> [first, last] (evicting, waiting) microseconds
        self.start()

    def run(self):
        while not self.stop.wait(0.5):
            phase = self.phase
            if phase is None:
                continue
            for i, cl in enumerate(self.clients):
                try:
                    wt = cl.admin.command("serverStatus")["wiredTiger"]
                    ca = wt["cache"]
                    win = wt["snapshot-window-settings"][
                        "current available snapshots window size in seconds"]
                    ty = wt.get("thread-yield", {})
                    app = (ty.get("application thread time evicting (usecs)", 0),
                           ty.get("application thread time waiting for cache (usecs)", 0))
                    tx = wt.get("transaction", {})
                    pinned = tx.get("transaction range of timestamps currently pinned", 0) >> 32
                    ids = tx.get("transaction range of IDs currently pinned", 0)
                except (pymongo.errors.PyMongoError, KeyError):
                    continue
                mx = float(max(1, ca["maximum bytes configured"]))
                d = ca["tracked dirty bytes in the cache"] / mx
                u = ca["bytes currently in the cache"] / mx
                old = self.peak.get((phase, i), (0.0, 0.0, 1e9, 0, 0))
                self.peak[(phase, i)] = (max(old[0], d), max(old[1], u), min(old[2], win),
                                         max(old[3], pinned), max(old[4], ids))
                self.app.setdefault((phase, i), [app, app])[1] = app

    def report(self, phase, i):
        d, u, w, p, ids = self.peak.get((phase, i), (0.0, 0.0, 0, 0, 0))
        a = self.app.get((phase, i), [(0, 0), (0, 0)])
        return ("dirty <= %.0f %%, used <= %.0f %%, history window >= %d s, pinned <= %d s "
                "(<= %d transaction ids); application threads evicting %.2f s, waiting for "
                "cache %.2f s" % (d * 100, u * 100, w, p, ids, (a[1][0] - a[0][0]) / 1e6,
                                  (a[1][1] - a[0][1]) / 1e6))


def chunk_counts(cfg, uuid):
    counts = {}
    for ch in cfg.chunks.find({"uuid": uuid}, {"shard": 1}):
        counts[ch["shard"]] = counts.get(ch["shard"], 0) + 1
    return counts


def spread(c, r, cfg):
    r.admin.command("balancerStop")
    cfg.settings.update_one({"_id": "chunksize"}, {"$set": {"value": CHUNK_MB}}, upsert=True)
    r.admin.command("enableSharding", "bench", primaryShard="shard0")
    r.admin.command("enableSharding", "probe0", primaryShard="shard0")
    r.admin.command("enableSharding", "probe1", primaryShard="shard1")
    r.admin.command("shardCollection", "bench.big", key={"x": 1})
    uuid = cfg.collections.find_one({"_id": "bench.big"})["uuid"]
    coll = r.bench.big.with_options(write_concern=WriteConcern(w=1, j=False))
    ndocs = MB * 1024
    t0 = time.monotonic()
    for lo in range(0, ndocs, 1000):
        coll.insert_many([{"_id": i, "x": i, "pad": PAD} for i in range(lo, min(ndocs, lo + 1000))],
                         ordered=False)
    load_s = time.monotonic() - t0
    # The auto-splitter splits behind the writes; wait for it to settle (no new chunk for 5 s).
    # MongoDB 4.x's rule (the ChunkSplitter): a chunk is looked at after chunksize / 5 bytes of
    # writes and split every chunksize / 2 of data; the top chunk is cut at its last key, so
    # behind ascending inserts the first chunk reaches chunksize, the next ones chunksize / 2
    # to chunksize / 2 + chunksize / 5 (0.6 chunksize on average).
    want = 1 + max(0, MB - CHUNK_MB) * 10 // (6 * CHUNK_MB)
    last, since, t1 = -1, time.monotonic(), time.monotonic()
    while time.monotonic() - since < 5 and time.monotonic() - t1 < 120:
        n = sum(chunk_counts(cfg, uuid).values())
        if n != last:
            last, since = n, time.monotonic()
        time.sleep(0.5)
    counts = chunk_counts(cfg, uuid)
    print("loaded %d MB (%d documents) in %.1f s (%.1f MB/s); %d chunks by the auto-splitter "
          "(chunksize %d MB: about %d by MongoDB 4.x's rule), on %s"
          % (MB, ndocs, load_s, MB / load_s, sum(counts.values()), CHUNK_MB, want, counts))
    sys.stdout.flush()
    probe = Prober(c.uri())
    cache = CacheSampler(c, 2)
    try:
        time.sleep(1)
        probe.phase = cache.phase = "idle"
        # The same background as while balancing: the status is asked every 0.2 s there.
        t_idle = time.monotonic()
        while time.monotonic() - t_idle < 10:
            r.admin.command("balancerCollectionStatus", "bench.big")
            time.sleep(0.2)
        probe.phase = cache.phase = None
        t2 = time.monotonic()
        r.admin.command("balancerStart")
        probe.phase = cache.phase = "balancing"
        while True:
            # Balanced as MongoDB 7.0 judges it: the shards' data sizes differ by less than
            # three chunk sizes (balancerCollectionStatus says balancerCompliant).
            st = r.admin.command("balancerCollectionStatus", "bench.big")
            if st["balancerCompliant"] and len(chunk_counts(cfg, uuid)) == 2:
                break
            if time.monotonic() - t2 > 3600:
                raise SystemExit("balancer bench: not balanced after an hour: %s" % st)
            time.sleep(0.2)
        wall = time.monotonic() - t2
        probe.phase = cache.phase = None
    finally:
        probe.close()
        cache.close()
    counts = chunk_counts(cfg, uuid)
    moved = cfg.changelog.count_documents({"what": "moveChunk.commit", "ns": "bench.big"})
    # Owned data: collStats size less the orphans the donor's range deleter has yet to remove.
    stats = [c.shard_client(i).bench.command("collStats", "big") for i in range(2)]
    sizes = [(s["size"] - s.get("numOrphanDocs", 0) * s.get("avgObjSize", 0)) / 1048576.0
             for s in stats]
    print("balanced in %.1f s: %d migrations, chunks %s, owned data %.0f / %.0f MB on shard0 / "
          "shard1: %.1f MB/s moved" % (wall, moved, counts, sizes[0], sizes[1], sizes[1] / wall))
    for target, what in ((None, "all"), ("probe0", "on shard0 (donor)"),
                         ("probe1", "on shard1 (recipient)")):
        idle, busy = probe.p50_p99("idle", target), probe.p50_p99("balancing", target)
        print("client inserts %s idle: p50 %.0f us p99 %.0f us (%d); while balancing: p50 %.0f "
              "us p99 %.0f us (%d); p99 balancing / idle %.2fx (target <= 3)"
              % (what, idle[0], idle[1], idle[2], busy[0], busy[1], busy[2],
                 busy[1] / max(1.0, idle[1])))
    for i in range(2):
        print("shard%d WiredTiger cache idle: %s; while balancing: %s"
              % (i, cache.report("idle", i), cache.report("balancing", i)))
    r.admin.command("balancerStop")


def op_count(c, i):
    oc = c.shard_client(i).admin.command("serverStatus")["opcounters"]
    return oc["query"] + oc["update"]


def shares(c, seconds):
    before = [op_count(c, i) for i in range(2)]
    time.sleep(seconds)
    d = [op_count(c, i) - before[i] for i in range(2)]
    return [x / float(max(1, sum(d))) for x in d]


def skewed(c, r, cfg):
    """8 chunks of 1000 documents, 4 per shard; 80 % of operations on x in [0, 800) (10 % of
    the range, inside shard0's first chunk)."""
    ns, per, nchunks = "skew.c", 1000, 8
    r.admin.command("enableSharding", "skew", primaryShard="shard0")
    r.admin.command("shardCollection", ns, key={"x": 1})
    r.skew.c.insert_many([{"_id": i, "x": i, "n": 0} for i in range(per * nchunks)])
    for k in range(1, nchunks):
        r.admin.command("split", ns, middle={"x": k * per})
    for k in range(nchunks // 2, nchunks):
        r.admin.command("moveChunk", ns, find={"x": k * per}, to="shard1", _waitForDelete=True)
    cfg.settings.update_one({"_id": "balancer"}, {"$set": {"policy": "load"}}, upsert=True)
    stop = threading.Event()

    def work(seed):
        client = pymongo.MongoClient(c.uri())
        coll = client.skew.c
        rnd = random.Random(seed)
        n = 0
        while not stop.is_set():
            x = rnd.randrange(0, per * nchunks // 10) if rnd.random() < 0.8 else \
                rnd.randrange(0, per * nchunks)
            if n % 2:
                coll.update_one({"x": x}, {"$inc": {"n": 1}})
            else:
                coll.find_one({"x": x})
            n += 1
        client.close()
    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    try:
        before = shares(c, 5)
        r.admin.command("balancerStart")
        time.sleep(SKEW_SECONDS)
        after = shares(c, 5)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        r.admin.command("balancerStop")
    uuid = cfg.collections.find_one({"_id": ns})["uuid"]
    print("skewed workload under policy load: operation shares shard0/shard1 before %.2f/%.2f, "
          "%.0f s after balancerStart %.2f/%.2f (target: none above 0.60); chunks %s"
          % (before[0], before[1], SKEW_SECONDS, after[0], after[1], chunk_counts(cfg, uuid)))


def uptime():
    with open("/proc/loadavg") as f:
        return "load average " + " ".join(f.read().split()[:3])


def main():
    c = ShaleCluster(shards=2, shard_extra=SHARD_ARGS)
    c.start()
    try:
        r = c.router_client()
        cfg = config_db(c)
        for i in range(2):
            c.shard_client(i).admin.command("setParameter", 1, migrationCachePacing=PACING)
        print("== %d cores; 2-shard cluster; %d MB, chunksize %d MB; migrationCachePacing %s"
              % (os.cpu_count(), MB, CHUNK_MB, PACING))
        print("load: %s; shard arguments %s" % (uptime(), SHARD_ARGS))
        spread(c, r, cfg)
        print("load: %s" % uptime())
        if SKEW_SECONDS > 0:
            skewed(c, r, cfg)
            print("load: %s" % uptime())
    finally:
        c.stop()
        c.cleanup()


if __name__ == "__main__":
    main()
