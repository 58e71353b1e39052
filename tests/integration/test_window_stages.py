"""$setWindowFields, $densify and $fill (src/query/window.c) through pymongo: on one data node
each window operator and bound kind is checked against a reference computed here in Python
(MongoDB 7.0's semantics: missing and null partition keys share a partition, no window means
the whole partition, range windows include ties, 'current' is the document itself), with
MongoDB's error codes for bad specifications and the memory / generated-documents limits. On
a 2-shard cluster the same pipelines over a collection with chunks on both shards give what
they give over an unsharded copy (the router runs these stages in its merger)."""

import datetime
import math
import random

import pytest
from pymongo.errors import OperationFailure

MISSING = object()


@pytest.fixture
def db(node):
    return node.client().wtest


def ticker_docs(n=60, seed=7):
    rnd = random.Random(seed)
    xs = list(range(n))
    rnd.shuffle(xs)
    docs = []
    for i in range(n):
        d = {"_id": i, "tick": "ABC"[i % 3], "x": xs[i], "grp": i % 4}
        r = rnd.random()
        if r < 0.1:
            pass  # price missing
        elif r < 0.15:
            d["price"] = None
        elif r < 0.2:
            d["price"] = "n/a"
        elif r < 0.6:
            d["price"] = rnd.randint(-50, 50)
        else:
            d["price"] = round(rnd.uniform(-50, 50), 3)
        docs.append(d)
    return docs


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def accumulate(op, vals):
    """What MongoDB's accumulator gives over the window's values (MISSING for a missing
    field)."""
    present = [v for v in vals if v is not MISSING]
    nums = [v for v in vals if is_num(v)]
    if op == "$sum":
        return sum(nums) if nums else 0
    if op == "$avg":
        return sum(nums) / len(nums) if nums else None
    if op == "$count":
        return len(vals)
    if op in ("$min", "$max"):
        cand = [v for v in present if v is not None]
        if not cand:
            return None
        # numbers sort before strings in BSON order
        key = (lambda v: (0, v) if is_num(v) else (1, v))
        return (min if op == "$min" else max)(cand, key=key)
    if op == "$push":
        return present
    if op == "$addToSet":
        out = []
        for v in present:
            if v not in out:
                out.append(v)
        return out
    if op == "$first":
        return None if not vals or vals[0] is MISSING else vals[0]
    if op == "$last":
        return None if not vals or vals[-1] is MISSING else vals[-1]
    if op in ("$stdDevPop", "$stdDevSamp"):
        div = len(nums) - (1 if op == "$stdDevSamp" else 0)
        if div <= 0:
            return None
        m = sum(nums) / len(nums)
        return math.sqrt(sum((v - m) ** 2 for v in nums) / div)
    raise AssertionError(op)


def doc_window(n, i, lo, hi):
    a = 0 if lo == "unbounded" else i if lo == "current" else i + lo
    b = n - 1 if hi == "unbounded" else i if hi == "current" else i + hi
    return range(max(a, 0), min(b, n - 1) + 1)


def range_window(rows, i, lo, hi, key):
    n = len(rows)
    v = rows[i][key]
    out = []
    for j in range(n):
        w = rows[j][key]
        ok_lo = lo == "unbounded" or (j >= i if lo == "current" else w >= v + lo)
        ok_hi = hi == "unbounded" or (j <= i if hi == "current" else w <= v + hi)
        if ok_lo and ok_hi:
            out.append(j)
    return out


def partitions(docs, pkey, skey):
    parts = {}
    for d in docs:
        parts.setdefault(d.get(pkey), []).append(d)
    for rows in parts.values():
        rows.sort(key=lambda d: d[skey])
    return parts


def same(got, want):
    if isinstance(want, float) or isinstance(got, float):
        return want is not None and got is not None and got == pytest.approx(want, rel=1e-9,
                                                                           abs=1e-9)
    return got == want


ACC_OPS = ["$sum", "$avg", "$min", "$max", "$count", "$push", "$addToSet", "$first", "$last",
           "$stdDevPop", "$stdDevSamp"]
DOC_BOUNDS = [["unbounded", "unbounded"], ["unbounded", "current"], ["current", "unbounded"],
              [-2, 1], [0, 0], [1, 3], [-3, -1], ["unbounded", -1], [2, "unbounded"]]


def test_documents_windows_every_accumulator(db):
    docs = ticker_docs()
    db.c.insert_many(docs)
    parts = partitions(docs, "tick", "x")
    for lo, hi in DOC_BOUNDS:
        output = {}
        for op in ACC_OPS:
            arg = {} if op == "$count" else "$price"
            output[op[1:]] = {op: arg, "window": {"documents": [lo, hi]}}
        got = {d["_id"]: d for d in db.c.aggregate([
            {"$setWindowFields": {"partitionBy": "$tick", "sortBy": {"x": 1},
                                  "output": output}}])}
        assert len(got) == len(docs)
        for rows in parts.values():
            for i, d in enumerate(rows):
                vals = [rows[j].get("price", MISSING) for j in doc_window(len(rows), i, lo, hi)]
                for op in ACC_OPS:
                    want = accumulate(op, vals)
                    have = got[d["_id"]][op[1:]]
                    if op == "$addToSet":
                        have, want = sorted(map(repr, have)), sorted(map(repr, want))
                    assert same(have, want), (lo, hi, op, d, have, want)


def test_output_order_and_default_window(db):
    db.c.insert_many([{"_id": 1, "k": "b", "x": 2, "v": 1}, {"_id": 2, "k": "a", "x": 9, "v": 2},
                      {"_id": 3, "k": "b", "x": 1, "v": 3}, {"_id": 4, "k": "a", "x": 3, "v": 4},
                      {"_id": 5, "x": 5, "v": 5}, {"_id": 6, "k": None, "x": 4, "v": 6}])
    # Sorted by partition key, then sortBy; no window means the whole partition.
    got = list(db.c.aggregate([{"$setWindowFields": {
        "partitionBy": "$k", "sortBy": {"x": 1},
        "output": {"tot": {"$sum": "$v"}, "all": {"$push": "$v"}, "n.deep": {"$count": {}}}}}]))
    assert [d["_id"] for d in got] == [6, 5, 4, 2, 3, 1]
    assert [d["tot"] for d in got] == [11, 11, 6, 6, 4, 4]
    assert got[0]["all"] == [6, 5] and got[2]["all"] == [4, 2]
    assert [d["n"] for d in got] == [{"deep": 2}] * 2 + [{"deep": 2}] * 4
    # An output field replaces an existing one in place.
    got = list(db.c.aggregate([{"$setWindowFields": {"sortBy": {"_id": 1},
                                                     "output": {"x": {"$documentNumber": {}}}}}]))
    assert list(got[0].keys()) == ["_id", "k", "x", "v"] and [d["x"] for d in got] == list(
        range(1, 7))
    # Without partitionBy and sortBy the input order is kept.
    got = list(db.c.aggregate([{"$sort": {"v": -1}},
                               {"$setWindowFields": {"output": {"m": {"$max": "$x"}}}}]))
    assert [d["_id"] for d in got] == [6, 5, 4, 3, 2, 1] and {d["m"] for d in got} == {9}
    # A constant partitionBy is one partition; an array one fails.
    got = list(db.c.aggregate([{"$setWindowFields": {"partitionBy": "const",
                                                     "output": {"n": {"$count": {}}}}}]))
    assert {d["n"] for d in got} == {6}
    db.c.insert_one({"_id": 7, "k": [1, 2]})
    with pytest.raises(OperationFailure) as e:
        list(db.c.aggregate([{"$setWindowFields": {"partitionBy": "$k",
                                                   "output": {"n": {"$count": {}}}}}]))
    assert e.value.code == 14


def test_range_windows_numbers_and_dates(db):
    rnd = random.Random(3)
    docs = [{"_id": i, "p": i % 2, "x": rnd.choice([0, 1, 1.5, 2, 3, 7, 7, 8, 20, 21.5]),
             "v": rnd.randint(0, 100)} for i in range(40)]
    db.c.insert_many(docs)
    parts = partitions(docs, "p", "x")
    for lo, hi in [[-1, 0], [-2, 2], ["unbounded", 0], [0, "unbounded"], ["current", 1],
                   [-5, "current"], [1, 3], ["unbounded", -1], [0.5, 1.5]]:
        got = {d["_id"]: d for d in db.c.aggregate([{"$setWindowFields": {
            "partitionBy": "$p", "sortBy": {"x": 1},
            "output": {"s": {"$sum": "$v", "window": {"range": [lo, hi]}},
                       "n": {"$count": {}, "window": {"range": [lo, hi]}},
                       "mn": {"$min": "$v", "window": {"range": [lo, hi]}},
                       "l": {"$last": "$v", "window": {"range": [lo, hi]}}}}}])}
        for rows in parts.values():
            # 'current' depends on the position among ties: read it from the server's order.
            order = [d for d in db.c.aggregate([{"$match": {"p": rows[0]["p"]}},
                                                {"$setWindowFields": {
                                                    "partitionBy": "$p", "sortBy": {"x": 1},
                                                    "output": {"i": {"$documentNumber": {}}}}}])]
            for i, d in enumerate(order):
                js = range_window(order, i, lo, hi, "x")
                assert got[d["_id"]]["s"] == sum(order[j]["v"] for j in js), (lo, hi, d)
                assert got[d["_id"]]["n"] == len(js), (lo, hi, d)
                assert got[d["_id"]]["mn"] == (min(order[j]["v"] for j in js) if js else None)
                assert got[d["_id"]]["l"] == (order[js[-1]]["v"] if js else None)
    # A descending sortBy: bounds count in the sort's direction.
    got = [d["y"] for d in db.c.aggregate([
        {"$match": {"p": 0}}, {"$group": {"_id": "$x"}}, {"$project": {"x": "$_id"}},
        {"$setWindowFields": {"sortBy": {"x": -1},
                              "output": {"y": {"$push": "$x", "window": {"range": [-1, 0]}}}}}])]
    xs = sorted({d["x"] for d in docs if d["p"] == 0}, reverse=True)
    assert got == [[w for w in xs if x <= w <= x + 1] for x in xs]

    # Dates with a unit; months are calendar months.
    db.t.insert_many([{"_id": i, "t": datetime.datetime(2021, 1 + i // 2, 1 + (i % 2) * 20)}
                      for i in range(10)])
    got = list(db.t.aggregate([{"$setWindowFields": {
        "sortBy": {"t": 1},
        "output": {"h": {"$push": "$_id", "window": {"range": [-1, 0], "unit": "month"}},
                   "d": {"$count": {}, "window": {"range": [-20, 0], "unit": "day"}}}}}]))
    assert [d["h"] for d in got] == [[0], [0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5],
                                     [4, 5, 6], [5, 6, 7], [6, 7, 8], [7, 8, 9]]
    assert [d["d"] for d in got] == [1] + [2] * 9

    # The sortBy value of a range window must be a number (a date with a unit).
    db.c.insert_one({"_id": 100, "p": 0, "x": "str"})
    for unit, code in [(None, 5429414), ("day", 5429513)]:
        window = {"range": ["unbounded", "unbounded"]}
        if unit:
            window["unit"] = unit
        with pytest.raises(OperationFailure) as e:
            list(db.c.aggregate([{"$setWindowFields": {
                "sortBy": {"x": 1}, "output": {"s": {"$sum": 1, "window": window}}}}]))
        assert e.value.code == code


def test_rank_functions_and_shift(db):
    db.c.insert_many([{"_id": i, "g": i % 2, "s": [5, 1, 5, 7, 1, 9, 3, 3][i]} for i in range(8)])
    got = list(db.c.aggregate([{"$setWindowFields": {
        "sortBy": {"s": 1},
        "output": {"r": {"$rank": {}}, "dr": {"$denseRank": {}}, "n": {"$documentNumber": {}},
                   "prev": {"$shift": {"output": "$s", "by": -1}},
                   "next2": {"$shift": {"output": "$_id", "by": 2, "default": "end"}}}}}]))
    assert [d["s"] for d in got] == [1, 1, 3, 3, 5, 5, 7, 9]
    assert [d["r"] for d in got] == [1, 1, 3, 3, 5, 5, 7, 8]
    assert [d["dr"] for d in got] == [1, 1, 2, 2, 3, 3, 4, 5]
    assert [d["n"] for d in got] == list(range(1, 9))
    assert [d["prev"] for d in got] == [None, 1, 1, 3, 3, 5, 5, 7]
    assert [d["next2"] for d in got[-2:]] == ["end", "end"]
    assert [d["next2"] for d in got[:-2]] == [d["_id"] for d in got[2:]]
    # Per partition, descending.
    got = list(db.c.aggregate([{"$setWindowFields": {
        "partitionBy": "$g", "sortBy": {"s": -1},
        "output": {"r": {"$rank": {}}, "nxt": {"$shift": {"output": "$s", "by": 1}}}}}]))
    assert [(d["g"], d["s"], d["r"], d["nxt"]) for d in got] == [
        (0, 5, 1, 5), (0, 5, 1, 3), (0, 3, 3, 1), (0, 1, 4, None),
        (1, 9, 1, 7), (1, 7, 2, 3), (1, 3, 3, 1), (1, 1, 4, None)]


def test_locf_and_linear_fill_functions(db):
    db.c.insert_many([{"_id": 1, "t": 1, "v": 10}, {"_id": 2, "t": 2},
                      {"_id": 3, "t": 4, "v": None}, {"_id": 4, "t": 5, "v": 40},
                      {"_id": 5, "t": 6}])
    got = list(db.c.aggregate([{"$setWindowFields": {
        "sortBy": {"t": 1}, "output": {"l": {"$locf": "$v"}, "lin": {"$linearFill": "$v"}}}}]))
    assert [d["l"] for d in got] == [10, 10, 10, 40, 40]
    assert [d["lin"] for d in got] == [10, 17.5, 32.5, 40, None]


def test_covariance(db):
    rnd = random.Random(5)
    docs = [{"_id": i, "x": rnd.uniform(-5, 5), "y": rnd.randint(-9, 9)} for i in range(30)]
    docs[4]["x"] = "skip"
    del docs[9]["y"]
    db.c.insert_many(docs)
    for lo, hi in DOC_BOUNDS:
        got = list(db.c.aggregate([{"$setWindowFields": {"sortBy": {"_id": 1}, "output": {
            "p": {"$covariancePop": ["$x", "$y"], "window": {"documents": [lo, hi]}},
            "s": {"$covarianceSamp": ["$x", "$y"], "window": {"documents": [lo, hi]}}}}}]))
        for i, d in enumerate(got):
            pairs = [(docs[j]["x"], docs[j]["y"]) for j in doc_window(len(docs), i, lo, hi)
                     if is_num(docs[j]["x"]) and is_num(docs[j].get("y"))]
            n = len(pairs)
            mx = sum(p[0] for p in pairs) / n if n else 0
            my = sum(p[1] for p in pairs) / n if n else 0
            c = sum((p[0] - mx) * (p[1] - my) for p in pairs)
            for got_v, want in [(d["p"], c / n if n >= 1 else None),
                                 (d["s"], c / (n - 1) if n >= 2 else None)]:
                assert (got_v is None and want is None) or abs(got_v - want) < 1e-9, (lo, hi, i)
    with pytest.raises(OperationFailure) as e:
        list(db.c.aggregate([{"$setWindowFields": {"output": {"v": {"$covariancePop": "$x"}}}}]))
    assert e.value.code == 9


def test_derivative(db):
    db.c.insert_many([{"t": t, "y": y} for t, y in
                      [(0, 100), (1, 105), (2, 108), (3, 108), (4, 115), (5, 115), (6, 118),
                       (7, 118)]])

    def run(sort, window, coll=None, unit=None):
        fn = {"input": "$y"}
        if unit:
            fn["unit"] = unit
        return [d["dy"] for d in (coll or db.c).aggregate([
            {"$setWindowFields": {"sortBy": sort, "output": {
                "dy": {"$derivative": fn, "window": window}}}}, {"$sort": {"t": 1}}])]
    want = [5, 8 / 2, 8 / 3, 15 / 4, 10 / 4, 10 / 4, 10 / 4, 3 / 3]
    assert run({"t": 1}, {"documents": [-3, 1]}) == want
    assert run({"t": -1}, {"documents": [-1, 3]}) == want
    assert run({"t": 1}, {"documents": [-1, 0]})[:3] == [None, 5, 3]
    db.r.insert_many([{"t": t, "y": y} for t, y in
                      [(0, 10), (10, 12), (11, 15), (12, 19), (13, 24), (20, 30)]])
    assert run({"t": 1}, {"range": [-10, 0]}, db.r) == [None, 0.2, 3, 3.5, 4, 1.8]
    # Dates need a unit (week or smaller), in which the slope is expressed.
    base = datetime.datetime(2020, 1, 1)
    db.d.insert_many([{"t": base + datetime.timedelta(minutes=i), "y": y}
                      for i, y in enumerate([5, 4, 6, 5])])
    assert run({"t": 1}, {"documents": [-1, 0]}, db.d, "minute") == [None, -1, 2, -1]
    got = run({"t": 1}, {"documents": [-1, 0]}, db.d, "millisecond")
    assert got[1] == pytest.approx(-1 / 60000)
    for coll, unit, code in [(db.d, None, 5624901), (db.c, "second", 5624900),
                             (db.d, "month", 5490710)]:
        with pytest.raises(OperationFailure) as e:
            run({"t": 1}, {"documents": [-1, 0]}, coll, unit)
        assert e.value.code == code
    for spec in [{"sortBy": {"t": 1}, "output": {"v": {"$derivative": {"input": "$y"}}}},
                 {"output": {"v": {"$derivative": {"input": "$y"},
                                   "window": {"documents": [-1, 0]}}}},
                 {"sortBy": {"t": 1}, "output": {"v": {"$derivative": {"x": "$y"},
                                                       "window": {"documents": [-1, 0]}}}}]:
        with pytest.raises(OperationFailure) as e:
            list(db.c.aggregate([{"$setWindowFields": spec}]))
        assert e.value.code in (9, 5339901), spec


def test_integral(db):
    db.c.insert_many([{"p": 1, "x": 0, "y": 1}, {"p": 1, "x": 1, "y": 2}, {"p": 1, "x": 2, "y": 1},
                      {"p": 1, "x": 3, "y": 4}, {"p": 2, "x": 0, "y": 100},
                      {"p": 2, "x": 2, "y": 105}, {"p": 2, "x": 4, "y": 107},
                      {"p": 2, "x": 6, "y": -100}])

    def run(sort, window, inp="$y", coll=None, unit=None):
        fn = {"input": inp}
        if unit:
            fn["unit"] = unit
        out = {"$integral": fn}
        if window:
            out["window"] = window
        return [d["i"] for d in (coll or db.c).aggregate([
            {"$setWindowFields": {"partitionBy": "$p", "sortBy": sort, "output": {"i": out}}},
            {"$sort": {"p": 1, "x": 1}}])]
    want = [0, 1.5, 1.5, 2.5, 0, 205, 212, 7]
    assert run({"x": 1}, {"documents": [-1, 0]}) == want
    assert run({"x": -1}, {"documents": [0, 1]}, {"$subtract": [0, "$y"]}) == want
    # The default window is the partition; sliding windows agree with a recomputation.
    assert run({"x": 1}, None) == [5.5] * 4 + [424] * 4
    assert run({"x": 1}, {"documents": ["current", "unbounded"]}) == [5.5, 4, 2.5, 0,
                                                                     424, 219, 7, 0]
    base = datetime.datetime(2020, 1, 1)
    db.d.insert_many([{"p": 0, "x": base + datetime.timedelta(seconds=s), "y": y}
                      for s, y in [(0, 0.0), (4, 2.4), (10, 5.6), (18, 6.8)]])
    got = [d["i"] for d in db.d.aggregate([{"$setWindowFields": {
        "sortBy": {"x": 1}, "output": {"i": {"$integral": {"input": "$y", "unit": "second"},
                                             "window": {"range": [-6, 6], "unit": "second"}}}}}])]
    assert got == pytest.approx([4.8, 28.8, 24.0, 0.0])
    got = [d["i"] for d in db.d.aggregate([{"$setWindowFields": {
        "sortBy": {"x": 1}, "output": {"i": {"$integral": {"input": "$y", "unit": "second"},
                                             "window": {"range": [-1, -1], "unit": "second"}}}}}])]
    assert got == [None] * 4
    for coll, unit, code in [(db.c, "second", 5423901), (db.d, None, 5423902),
                             (db.d, "year", 5490710)]:
        with pytest.raises(OperationFailure) as e:
            run({"x": 1}, None, coll=coll, unit=unit)
        assert e.value.code == code


def test_exp_moving_avg(db):
    prices = [10, 12.5, "x", 9, None, 20, 7]
    db.c.insert_many([{"_id": i, "g": i % 2, "p": v} for i, v in enumerate(prices)])
    for arg, alpha in [({"N": 3}, 0.5), ({"alpha": 0.279}, 0.279)]:
        got = [d["e"] for d in db.c.aggregate([{"$setWindowFields": {
            "sortBy": {"_id": 1},
            "output": {"e": {"$expMovingAvg": dict(input="$p", **arg)}}}}])]
        want, cur = [], None
        for v in prices:
            if is_num(v):
                cur = v if cur is None else v * alpha + cur * (1 - alpha)
            want.append(cur)
        assert len(got) == len(want) and all(same(g, w) for g, w in zip(got, want)), (got, want)
    # Per partition, and null while no number was seen.
    got = [(d["g"], d["e"]) for d in db.c.aggregate([
        {"$addFields": {"p": {"$cond": [{"$eq": ["$g", 0]}, "$p", "s"]}}},
        {"$setWindowFields": {"partitionBy": "$g", "sortBy": {"_id": 1},
                              "output": {"e": {"$expMovingAvg": {"input": "$p", "N": 1}}}}}])]
    assert got == [(0, 10), (0, 10), (0, 10), (0, 7), (1, None), (1, None), (1, None)]
    for spec in [{"input": "$p", "alpha": 0.5, "N": 2}, {"input": "$p", "N": 0.5},
                 {"input": "$p", "N": "food"}, {"str": "$p", "N": 2}, "$p",
                 {"input": "$p", "alpha": 1.0}, {"input": "$p", "alpha": 0}]:
        with pytest.raises(OperationFailure) as e:
            list(db.c.aggregate([{"$setWindowFields": {
                "sortBy": {"_id": 1}, "output": {"e": {"$expMovingAvg": spec}}}}]))
        assert e.value.code == 9, spec
    with pytest.raises(OperationFailure) as e:
        list(db.c.aggregate([{"$setWindowFields": {
            "output": {"e": {"$expMovingAvg": {"input": "$p", "N": 2}}}}}]))
    assert e.value.code == 9


SWF_ERRORS = [
    ("invalid", 9),
    ({"sortBy": "invalid", "output": {}}, 14),
    ({"output": "invalid"}, 14),
    ({"what_is_this": 1}, 40415),
    ({"partitionBy": "$a"}, 40414),
    ({"partitionBy": {"$notAnOperator": 1}, "output": {}}, 168),
    ({"output": {"a": {"b": {"$sum": "$a"}}}}, 9),
    ({"output": {"v": {}}}, 9),
    ({"output": {"v": {"$summ": "$x"}}}, 9),
    ({"output": {"v": {"$mergeObjects": "$a"}}}, 9),
    ({"output": {"v": {"$sum": 1, "window": [0, 1]}}}, 9),
    ({"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"documents": [0]}}}}, 9),
    ({"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"documents": [0.5, 1]}}}}, 9),
    ({"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"range": ["x", 1]}}}}, 9),
    ({"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"documents": [0, 1],
                                                                 "unit": "day"}}}}, 9),
    ({"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"documents": [1, -1]}}}},
     5339900),
    ({"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"range": ["current", -1],
                                                                 "unit": "day"}}}}, 5339900),
    ({"output": {"v": {"$sum": 1, "window": {"documents": ["unbounded", "current"]}}}}, 5339901),
    ({"output": {"v": {"$sum": 1, "window": {"range": ["unbounded", "unbounded"]}}}}, 5339902),
    ({"sortBy": {"a": 1, "b": 1}, "output": {"v": {"$sum": 1, "window": {"range": [-1, 1]}}}},
     5339902),
    ({"sortBy": {"a": 1}, "output": {"v": {"$rank": {}, "window": {"documents": [-1, 1]}}}},
     5371601),
    ({"output": {"v": {"$denseRank": {}}}}, 5371602),
    ({"sortBy": {"a": 1, "b": 1}, "output": {"v": {"$documentNumber": {}}}}, 5371602),
    ({"sortBy": {"a": 1}, "output": {"v": {"$rank": "$a"}}}, 5371603),
    ({"sortBy": {"a": 1}, "output": {"v": {"$shift": {"output": "$a"}}}}, 9),
    ({"sortBy": {"a": 1}, "output": {"v": {"$shift": {"output": "$a", "by": "1"}}}}, 9),
    ({"sortBy": {"a": 1}, "output": {"v": {"$shift": {"output": "$a", "by": 1.1}}}}, 9),
    ({"sortBy": {"a": 1}, "output": {"v": {"$shift": {"by": 1}}}}, 9),
    ({"sortBy": {"a": 1}, "output": {"v": {"$shift": {"output": "$a", "by": 1,
                                                      "default": "$a"}}}}, 9),
    ({"output": {"v": {"$shift": {"output": "$a", "by": 1}}}}, 9),
    ({"output": {"a": {"$sum": 1}, "a.b": {"$sum": 1}}}, 6307900),
    ({"output": {"": {"$sum": 1}}}, 40352),
    ({"output": {"$a": {"$sum": 1}}}, 16410),
    # MongoDB's window functions Shale does not have yet.
    ({"sortBy": {"a": 1}, "output": {"v": {"$median": {"input": "$a", "method": "approximate"}}}},
     238),
]


def test_set_window_fields_parse_errors(db):
    db.c.insert_one({"_id": 1, "a": 1})
    for spec, code in SWF_ERRORS:
        with pytest.raises(OperationFailure) as e:
            list(db.c.aggregate([{"$setWindowFields": spec}]))
        assert e.value.code == code, (spec, e.value.details)
    # What parses: constant expressions as bounds, $shift's constant default, 1.0 as 'by'.
    for spec in [
        {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {
            "documents": [{"$add": [-1, 0]}, {"$add": [2, 2]}]}}}},
        {"sortBy": {"a": 1}, "output": {"v": {"$shift": {"output": "$a", "by": 1.0,
                                                          "default": {"$add": [1, 1]}}}}},
        {"partitionBy": "$$NOW", "output": {}},
        {"output": {"v": {"$sum": "$a", "window": {"documents": ["unbounded", "unbounded"]}}}},
    ]:
        assert len(list(db.c.aggregate([{"$setWindowFields": spec}]))) == 1, spec


def test_set_window_fields_memory_limit(db, node):
    admin = node.client().admin
    db.c.insert_many([{"_id": i, "k": 1 + i // 10, "s": "x" * 1024} for i in range(20)])
    pipeline = [{"$setWindowFields": {"partitionBy": "$k", "sortBy": {"_id": 1},
                                      "output": {"v": {"$sum": "$_id"}}}}]
    admin.command("setParameter", 1, internalDocumentSourceSetWindowFieldsMaxMemoryBytes=4000)
    try:
        with pytest.raises(OperationFailure) as e:
            list(db.c.aggregate(pipeline))
        assert e.value.code == 5643011
        assert "DocumentSourceSetWindowFields" in str(e.value)
        # The limit is per partition: ten documents of 1 KB fit in 20 KB, all twenty do not.
        admin.command("setParameter", 1,
                      internalDocumentSourceSetWindowFieldsMaxMemoryBytes=20000)
        assert len(list(db.c.aggregate(pipeline))) == 20
        with pytest.raises(OperationFailure) as e:
            list(db.c.aggregate([{"$setWindowFields": {"sortBy": {"_id": 1},
                                                       "output": {"v": {"$sum": "$_id"}}}}]))
        assert e.value.code == 5643011
        # Without partitionBy and sortBy the input is the one partition.
        with pytest.raises(OperationFailure) as e:
            list(db.c.aggregate([{"$setWindowFields": {"output": {"v": {"$count": {}}}}}]))
        assert e.value.code == 5643011
        assert len(list(db.c.aggregate([{"$match": {"k": 1}}, {"$setWindowFields": {
            "output": {"v": {"$count": {}}}}}]))) == 10
        # So do the values a window function keeps.
        with pytest.raises(OperationFailure) as e:
            list(db.c.aggregate([{"$setWindowFields": {
                "partitionBy": "$k", "sortBy": {"_id": 1},
                "output": {"v": {"$push": "$s", "window": {"documents": [-9, 9]}}}}}]))
        assert e.value.code == 5643011
    finally:
        admin.command("setParameter", 1,
                      internalDocumentSourceSetWindowFieldsMaxMemoryBytes=100 * 1024 * 1024)


def densify_rows(coll, stage, *more):
    return [{k: v for k, v in d.items() if k != "_id"}
            for d in coll.aggregate([{"$densify": stage}, *more])]


def test_densify_numbers_dates_partitions(db):
    db.c.insert_many([{"v": 0, "p": "a"}, {"v": 4, "p": "a"}, {"v": 3, "p": "b"},
                      {"v": 9, "p": "b"}, {"p": "b"}, {"v": None, "p": "a"}])
    # full: the range of every partition's values, for every partition; nulls pass first.
    got = densify_rows(db.c, {"field": "v", "partitionByFields": ["p"],
                              "range": {"step": 3, "bounds": "full"}})
    assert got == [{"v": None, "p": "a"}, {"v": 0, "p": "a"}, {"p": "a", "v": 3},
                   {"v": 4, "p": "a"}, {"p": "a", "v": 6}, {"p": "a", "v": 9},
                   {"p": "b"}, {"p": "b", "v": 0}, {"v": 3, "p": "b"}, {"p": "b", "v": 6},
                   {"v": 9, "p": "b"}]
    # partition: each partition's own range.
    got = densify_rows(db.c, {"field": "v", "partitionByFields": ["p"],
                              "range": {"step": 2, "bounds": "partition"}},
                       {"$match": {"v": {"$ne": None}}})
    assert [(d["p"], d["v"]) for d in got] == [("a", 0), ("a", 2), ("a", 4), ("b", 3), ("b", 5),
                                               ("b", 7), ("b", 9)]
    # explicit bounds: [lo, hi), on steps from lo; documents outside pass through.
    got = densify_rows(db.c, {"field": "v", "range": {"step": 2.5, "bounds": [1, 9]}},
                       {"$match": {"v": {"$ne": None}}})
    assert [d["v"] for d in got] == [0, 1, 3, 3.5, 4, 6, 8.5, 9]
    # Dates, by calendar months; generated documents hold only the field and the partition.
    db.d.insert_many([{"t": datetime.datetime(2021, 1, 31), "k": {"a": 1}},
                      {"t": datetime.datetime(2021, 5, 1), "k": {"a": 1}}])
    got = densify_rows(db.d, {"field": "t", "partitionByFields": ["k.a"],
                              "range": {"step": 1, "unit": "month", "bounds": "full"}})
    assert got == [{"t": datetime.datetime(2021, 1, 31), "k": {"a": 1}},
                   {"k": {"a": 1}, "t": datetime.datetime(2021, 2, 28)},
                   {"k": {"a": 1}, "t": datetime.datetime(2021, 3, 28)},
                   {"k": {"a": 1}, "t": datetime.datetime(2021, 4, 28)},
                   {"t": datetime.datetime(2021, 5, 1), "k": {"a": 1}}]
    # No input: an explicit range alone.
    assert [d["v"] for d in db.empty.aggregate([
        {"$densify": {"field": "v", "range": {"step": 1, "bounds": [0, 3]}}}])] == [0, 1, 2]


DENSIFY_ERRORS = [
    ("x", 9),
    ({"field": "a", "range": {"step": 1.0}}, 40414),
    ({"range": {"step": 1.0, "bounds": "full"}}, 40414),
    ({"field": "a", "range": {"bounds": "full"}}, 40414),
    ({"field": 1.0, "range": {"step": 1.0, "bounds": "full"}}, 14),
    ({"field": "a", "range": {"step": "invalid", "bounds": "full"}}, 14),
    ({"field": "a", "partitionByFields": "x", "range": {"step": 1.0, "bounds": "full"}}, 14),
    ({"field": "a", "range": {"step": 1, "bounds": [1, 2], "unit": 1000}}, 14),
    ({"field": "a", "bogus": 1, "range": {"step": 1.0, "bounds": "full"}}, 40415),
    ({"field": "a", "range": {"step": 1.0, "bounds": [0, 1, 2]}}, 5733403),
    ({"field": "a", "range": {"step": -1.0, "bounds": [0, 1]}}, 5733401),
    ({"field": "$a", "range": {"step": 1.0, "bounds": [0, 1]}}, 16410),
    ({"field": "a", "partitionByFields": ["$b"], "range": {"step": 1.0, "bounds": [0, 1]}}, 16410),
    ({"field": "a", "range": {"step": 1.0, "bounds": "partition"}}, 5733408),
    ({"field": "a", "range": {"step": 1.0, "bounds": [2, 1]}}, 5733402),
    ({"field": "a", "range": {"step": 1.0, "bounds": [1, 2], "unit": "second"}}, 5733409),
    ({"field": "a", "range": {"step": 1.0, "bounds": [1, datetime.datetime(2020, 1, 1)]}},
     5733406),
    ({"field": "a", "range": {"step": 1.1, "unit": "second", "bounds": [
        datetime.datetime(2020, 1, 1), datetime.datetime(2020, 1, 3)]}}, 6586400),
]


def test_densify_errors_and_limit(db, node):
    db.c.insert_one({"a": 1})
    for spec, code in DENSIFY_ERRORS:
        with pytest.raises(OperationFailure) as e:
            list(db.c.aggregate([{"$densify": spec}]))
        assert e.value.code == code, (spec, e.value.details)
    db.s.insert_many([{"a": 1}, {"a": "x"}])
    with pytest.raises(OperationFailure) as e:
        list(db.s.aggregate([{"$densify": {"field": "a", "range": {"step": 1, "bounds": "full"}}}]))
    assert e.value.code == 5733201
    admin = node.client().admin
    admin.command("setParameter", 1, internalQueryMaxAllowedDensifyDocs=10)
    try:
        with pytest.raises(OperationFailure) as e:
            list(db.c.aggregate([{"$densify": {"field": "v", "range": {"step": 1,
                                                                          "bounds": [0, 11]}}}]))
        assert e.value.code == 5897900
        assert len(list(db.empty.aggregate([{"$densify": {
            "field": "v", "range": {"step": 1, "bounds": [0, 10]}}}]))) == 10
    finally:
        admin.command("setParameter", 1, internalQueryMaxAllowedDensifyDocs=500000)


def test_fill(db):
    db.c.insert_many([
        {"_id": 1, "t": 1, "k": "a", "v": 1, "q": "x"},
        {"_id": 2, "t": 2, "k": "a"},
        {"_id": 3, "t": 3, "k": "a", "v": 5, "q": None},
        {"_id": 4, "t": 1, "k": "b"},
        {"_id": 5, "t": 2, "k": "b", "v": 2, "q": "y"},
        {"_id": 6, "t": 3, "k": "b"},
    ])
    got = list(db.c.aggregate([{"$fill": {
        "sortBy": {"t": 1}, "partitionByFields": ["k"],
        "output": {"v": {"method": "linear"}, "q": {"method": "locf"},
                   "z": {"value": {"$concat": ["$k", "!"]}}}}}]))
    assert [(d["_id"], d["v"], d["q"], d["z"]) for d in got] == [
        (1, 1, "x", "a!"), (2, 3.0, "x", "a!"), (3, 5, "x", "a!"),
        (4, None, None, "b!"), (5, 2, "y", "b!"), (6, None, "y", "b!")]
    # partitionBy as an expression; a value fill alone keeps the input order.
    got = list(db.c.aggregate([{"$fill": {"partitionBy": {"$toUpper": "$k"}, "sortBy": {"t": -1},
                                          "output": {"q": {"method": "locf"}}}}]))
    assert [(d["_id"], d["q"]) for d in got] == [(3, None), (2, None), (1, "x"), (6, None),
                                                (5, "y"), (4, "y")]
    got = list(db.c.aggregate([{"$sort": {"_id": -1}},
                               {"$fill": {"output": {"v": {"value": 0}}}}]))
    assert [(d["_id"], d["v"]) for d in got] == [(6, 0), (5, 2), (4, 0), (3, 5), (2, 0), (1, 1)]
    for spec, code in [("x", 9), ({}, 40414), ({"output": {}}, 6050203),
                       ({"output": {"v": {"method": "random"}}}, 6050202),
                       ({"output": {"v": "random"}}, 6050200),
                       ({"output": {"v": {"method": "locf", "second": "locf"}}}, 40415),
                       ({"output": {"v": {"method": "locf"}}, "partitionBy": {"k": "$k"},
                         "partitionByFields": ["k"]}, 6050204),
                       ({"output": {"v": {"method": "linear"}}, "partitionBy": "$k"}, 605001)]:
        with pytest.raises(OperationFailure) as e:
            list(db.c.aggregate([{"$fill": spec}]))
        assert e.value.code == code, spec


# ---------------------------------------------------------------- a 2-shard cluster

CLUSTER_PIPELINES = [
    [{"$setWindowFields": {"partitionBy": "$tick", "sortBy": {"x": 1}, "output": {
        "s": {"$sum": "$price", "window": {"documents": [-2, "current"]}},
        "a": {"$avg": "$price", "window": {"range": [-5, 5]}},
        "p": {"$push": "$_id", "window": {"documents": ["unbounded", "current"]}},
        "r": {"$rank": {}}, "prev": {"$shift": {"output": "$price", "by": -1, "default": 0}},
        "sd": {"$stdDevSamp": "$price"}}}}],
    [{"$match": {"grp": {"$ne": 3}}},
     {"$setWindowFields": {"partitionBy": {"$mod": ["$x", 5]}, "sortBy": {"x": -1}, "output": {
         "mx": {"$max": "$price", "window": {"documents": [-1, 1]}},
         "n": {"$documentNumber": {}}, "dr": {"$denseRank": {}}}}},
     {"$project": {"tick": 0}}],
    [{"$setWindowFields": {"output": {"tot": {"$sum": "$x"}, "c": {"$count": {}}}}},
     {"$sort": {"_id": 1}}],
    [{"$setWindowFields": {"partitionBy": "$tick", "sortBy": {"x": 1},
                           "output": {"i": {"$documentNumber": {}}}}},
     {"$match": {"i": {"$lte": 3}}}, {"$limit": 7}],
    [{"$project": {"grp": 1, "x": 1}}, {"$match": {"x": {"$mod": [4, 0]}}},
     {"$densify": {"field": "x", "partitionByFields": ["grp"],
                   "range": {"step": 1, "bounds": "partition"}}},
     {"$sort": {"grp": 1, "x": 1}}],
    [{"$project": {"x": 1}}, {"$match": {"x": {"$mod": [7, 0]}}},
     {"$densify": {"field": "x", "range": {"step": 3, "bounds": [10, 30]}}}, {"$sort": {"x": 1}}],
    [{"$fill": {"sortBy": {"x": 1}, "partitionByFields": ["tick"],
                "output": {"price": {"method": "locf"}, "none": {"value": "filled"}}}}],
    [{"$match": {"price": {"$type": "number"}}}, {"$project": {"x": 1, "tick": 1}},
     {"$densify": {"field": "x", "partitionByFields": ["tick"], "range": {"step": 1,
                                                                         "bounds": "full"}}},
     {"$fill": {"sortBy": {"x": 1}, "partitionByFields": ["tick"],
                "output": {"_id": {"method": "locf"}}}},
     {"$sort": {"tick": 1, "x": 1}}],
]


@pytest.fixture(scope="module")
def wx(cluster):
    r = cluster.router_client()
    r.admin.command("enableSharding", "wx", primaryShard="shard0")
    docs = ticker_docs(90, seed=11)
    r.wx.sh.insert_many(docs)
    r.wx.ref.insert_many(docs)
    r.admin.command("shardCollection", "wx.sh", key={"_id": 1})
    for m in (30, 60):
        r.admin.command("split", "wx.sh", middle={"_id": m})
    r.admin.command("moveChunk", "wx.sh", find={"_id": 40}, to="shard1")
    return r.wx


def test_sharded_collection_matches_unsharded(wx, cluster):
    # Both shards hold documents of the sharded collection.
    for i in range(2):
        assert cluster.shard_client(i).wx.sh.count_documents({}) > 0
    for pipeline in CLUSTER_PIPELINES:
        want = list(wx.ref.aggregate(pipeline))
        got = list(wx.sh.aggregate(pipeline))
        assert len(got) == len(want) > 0, pipeline
        for g, w in zip(got, want):
            assert g.keys() == w.keys(), pipeline
            for k in w:
                assert same(g[k], w[k]), (pipeline, k, g, w)
    # Errors are MongoDB's there too.
    with pytest.raises(OperationFailure) as e:
        list(wx.sh.aggregate([{"$setWindowFields": {"output": {"v": {"$rank": {}}}}}]))
    assert e.value.code == 5371602
    with pytest.raises(OperationFailure) as e:
        list(wx.sh.aggregate([{"$setWindowFields": {
            "sortBy": {"tick": 1}, "output": {"v": {"$sum": 1, "window": {"range": [0, 1]}}}}}]))
    assert e.value.code == 5429414


def test_router_runs_window_stages_in_its_merger(wx):
    for stage in [{"$setWindowFields": {"sortBy": {"x": 1}, "output": {"r": {"$rank": {}}}}},
                  {"$densify": {"field": "x", "range": {"step": 1, "bounds": "full"}}},
                  {"$fill": {"output": {"price": {"value": 0}}}}]:
        name = next(iter(stage))
        e = wx.command("aggregate", "sh", pipeline=[{"$match": {"x": {"$gte": 5}}}, stage],
                       explain=True)
        assert e["mergeType"] == "mongos"
        assert e["splitPipeline"]["shardsPart"] == [{"$match": {"x": {"$gte": 5}}}]
        assert list(e["splitPipeline"]["mergerPart"][0]) == [name]
    # Inside $facet and $unionWith too.
    pipeline = [{"$facet": {"w": [{"$setWindowFields": {
        "partitionBy": "$tick", "sortBy": {"x": 1},
        "output": {"s": {"$sum": "$x", "window": {"documents": [-1, 0]}}}}}]}}]
    assert list(wx.sh.aggregate(pipeline)) == list(wx.ref.aggregate(pipeline))
    pipeline = [{"$match": {"_id": {"$lt": 3}}}, {"$unionWith": {"coll": "sh", "pipeline": [
        {"$densify": {"field": "x", "range": {"step": 50, "bounds": [0, 200]}}},
        {"$match": {"_id": {"$exists": False}}}]}}, {"$project": {"_id": 1, "x": 1}}]
    got = list(wx.ref.aggregate(pipeline))
    assert [d.get("x") for d in got[3:]] == [100, 150] and len(got) == 5  # 0, 50 exist
