"""benchlib.py -- what the Python parts of bench/ share: grouping a run's JSON result rows
into medians, latency percentiles of a timed loop, and the 2-shard collection the
transaction benchmarks use."""
import json
import statistics
import time


def load_medians(path):
    """Print the JSON rows of `path` (one result per line, with "label" and "threads") and
    return {(label, threads): {field: median over the rows}} for the numeric fields."""
    rows = [json.loads(line) for line in open(path)]
    for r in rows:
        print(json.dumps(r))
    groups = {}
    for r in rows:
        groups.setdefault((r["label"], r["threads"]), []).append(r)
    med = {}
    for k, rs in groups.items():
        med[k] = {f: statistics.median(x[f] for x in rs) for f in rs[0]
                  if isinstance(rs[0][f], (int, float)) and f != "threads"}
        med[k]["rounds"] = len(rs)
    return med


def paired_ratios(path, num, den, threads, field="ops_per_sec"):
    """Per-round ratios num/den of `field` at `threads`, pairing the rows of the two labels in
    file order (round k of one with round k of the other), and their median. Interleaved
    rounds share the machine's state, so the paired ratio cancels drift between rounds that a
    ratio of separate medians keeps. Returns (ratios, median) or ([], None)."""
    rows = [json.loads(line) for line in open(path)]
    a = [r[field] for r in rows if r["label"] == num and r["threads"] == threads]
    b = [r[field] for r in rows if r["label"] == den and r["threads"] == threads]
    ratios = [x / y for x, y in zip(a, b) if y]
    return ratios, (statistics.median(ratios) if ratios else None)


def by_threads(med):
    """The keys of load_medians' result, by thread count then label."""
    return sorted(med, key=lambda k: (k[1], k[0]))


def p50_p99(fn, n):
    """fn() called n times: (p50, p99) of its latency in microseconds."""
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        lat.append((time.perf_counter() - t0) * 1e6)
    lat.sort()
    return lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]


def median_p50_p99(rounds):
    """The medians of a list of (p50, p99) pairs."""
    return (statistics.median(x[0] for x in rounds), statistics.median(x[1] for x in rounds))


def two_shard_collection(router):
    """b.t sharded on {x: 1}, split at x: 0, [0, max) on shard1 (b's primary is shard0)."""
    router.admin.command("enableSharding", "b", primaryShard="shard0")
    router.admin.command("shardCollection", "b.t", key={"x": 1})
    router.admin.command("split", "b.t", middle={"x": 0})
    router.admin.command("moveChunk", "b.t", find={"x": 0}, to="shard1")
    return router.b.t
