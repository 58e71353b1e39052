#!/usr/bin/env python3
"""text.py -- issue 20 item 8: $text query throughput on DOCS documents (100000) of a few
words each ({_id, t: 6 words from a 2000-word vocabulary, n}) with a text index on t: finds of
one random vocabulary word ($search, whole result drained) per second, and the same for a
two-word search with a negation. $text reads the text index (TEXT_MATCH over TEXT_OR over one
index scan per term, docs/design/text_search.md): only documents holding a term are fetched
and scored. SHALE_BIN (release build preferred); DOCS, N
queries per round (20), ROUNDS (3)."""
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from shale_fixtures import ShaleProcess, stop_all  # noqa: E402

DOCS = int(os.environ.get("DOCS", "100000"))
N = int(os.environ.get("N", "20"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))

rng = random.Random(20)
SYLL = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "xe", "zu"]
vocab = sorted({"".join(rng.choice(SYLL) for _ in range(rng.randint(2, 4)))
                for _ in range(3000)})[:2000]

p = ShaleProcess(["node"], name="bench-text")
p.start()
try:
    c = p.client().bench.text
    c.drop()
    for i in range(0, DOCS, 10000):
        c.insert_many([{"_id": k, "t": " ".join(rng.choice(vocab) for _ in range(6)), "n": k}
                       for k in range(i, min(DOCS, i + 10000))], ordered=False)
    c.create_index([("t", "text")])

    def one(search):
        return sum(1 for _ in c.find({"$text": {"$search": search}}, {"_id": 1}))

    res = {"word": [], "negated": []}
    for _ in range(ROUNDS):
        for key in res:
            t0 = time.perf_counter()
            for _ in range(N):
                w = rng.choice(vocab)
                one(w if key == "word" else "%s %s -%s" % (w, rng.choice(vocab),
                                                           rng.choice(vocab)))
            res[key].append(N / (time.perf_counter() - t0))
    print("$text on %d docs (text index scan): one word %.2f queries/s, two words "
          "and a negation %.2f queries/s" % (DOCS, statistics.median(res["word"]),
                                              statistics.median(res["negated"])))
finally:
    stop_all([p])
    p.cleanup()
