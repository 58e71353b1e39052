#!/usr/bin/env python3
"""collation.py -- issue 20 item 8: find by equality on a string field through an index of a
case-insensitive collation ({locale: "en", strength: 2}: keys are ICU sort keys, the query's
value is turned into one) against the same find through a simple-collation index, same data,
same node, interleaved rounds. Two collections hold the same DOCS documents {_id, w: word,
pad}; each has one index on w (simple / case-insensitive). Prints finds/s of each, and the
ratio (target >= 0.7). SHALE_BIN (release build preferred); DOCS (100000), N finds per
round (2000), ROUNDS (3)."""
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from pymongo.collation import Collation  # noqa: E402

from shale_fixtures import ShaleProcess, stop_all  # noqa: E402

DOCS = int(os.environ.get("DOCS", "100000"))
N = int(os.environ.get("N", "2000"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
CI = Collation("en", strength=2)

rng = random.Random(20)
words = ["%s%06d" % (rng.choice(["alpha", "Beta", "GAMMA", "delta", "Épsilon"]), i)
         for i in range(DOCS)]

p = ShaleProcess(["node"], name="bench-collation")
p.start()
try:
    db = p.client().bench
    for name, coll in (("simple", None), ("ci", CI)):
        db.drop_collection(name)
        c = db[name]
        for i in range(0, DOCS, 10000):
            c.insert_many([{"_id": k, "w": words[k], "pad": "x" * 100}
                           for k in range(i, min(DOCS, i + 10000))], ordered=False)
        kw = {"collation": coll} if coll else {}
        c.create_index([("w", 1)], name="w", **kw)

    def find_simple(v):
        return db.simple.find_one({"w": v})

    def find_ci(v):
        # Another case than stored: only the collation makes it match.
        return db.ci.find_one({"w": v.upper()}, collation=CI)

    # Both must use their index.
    for name, cmd in (("simple", {"find": "simple", "filter": {"w": words[0]}}),
                      ("ci", {"find": "ci", "filter": {"w": words[0]},
                              "collation": CI.document})):
        plan = str(db.command("explain", cmd)["queryPlanner"]["winningPlan"])
        assert "IXSCAN" in plan, (name, plan)

    def run_block(fn, n, acc, key):
        vals = [rng.choice(words) for _ in range(n)]
        t0 = time.perf_counter()
        for v in vals:
            assert fn(v) is not None
        acc[key] += time.perf_counter() - t0

    # Blocks of 50 finds alternate between the two, so a busy machine slows both alike.
    for fn in (find_simple, find_ci):
        run_block(fn, 100, {"w": 0.0}, "w")
    res = {"simple": [], "ci": []}
    for _ in range(ROUNDS):
        acc = {"simple": 0.0, "ci": 0.0}
        for _ in range(max(1, N // 50)):
            run_block(find_simple, 50, acc, "simple")
            run_block(find_ci, 50, acc, "ci")
        for k in acc:
            res[k].append(max(1, N // 50) * 50 / acc[k])
    s = statistics.median(res["simple"])
    ci = statistics.median(res["ci"])
    print("find by equality, %d docs: simple-collation index %.0f/s, case-insensitive "
          "collation index %.0f/s, ratio %.2f (target >= 0.70)" % (DOCS, s, ci, ci / s))
finally:
    stop_all([p])
    p.cleanup()
