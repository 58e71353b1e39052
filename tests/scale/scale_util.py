"""Helpers of the scale suite (tests/scale, issue 23): the figures recorder (wall time and the
peak RSS of every server process, per test and per phase of a test), fast parallel loaders,
and the document shapes the tests load and check.

Peak RSS is VmHWM of /proc/<pid>/status. It is the peak since the process started, so the
recorder resets it (writing 5 to /proc/<pid>/clear_refs sets VmHWM back to the current RSS)
at the start of every phase and test, and reads it at their end."""

import contextlib
import datetime
import multiprocessing
import os
import platform
import subprocess
import time

import pymongo

MB = 1024 * 1024

# SCALE_FRACTION (default 1) shrinks every data set, to try changes to the suite itself in
# minutes; the figures and the RSS limit only mean something at 1.
FRACTION = float(os.environ.get("SCALE_FRACTION", "1"))


def scaled(n, multiple=1):
    """n documents at SCALE_FRACTION, rounded down to a multiple of 'multiple'."""
    return max(multiple, int(n * FRACTION) // multiple * multiple)

# ---------------------------------------------------------------- peak RSS


def vm_hwm_kb(pid):
    """VmHWM (peak resident set size since the process started or since its last reset) of
    pid in kB, or None when the process is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_hwm(pid):
    """Reset pid's VmHWM to its current RSS; whether the kernel let us."""
    try:
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Recorder:
    """Rows of figures for the session's report. The cluster of the running module is
    attached with attach(); every process of it (routers, config server, shards) gets a column,
    named after its ShaleProcess (router0, config, shard0, ...)."""

    COLUMNS = ["router0", "config", "shard0", "shard1"]

    def __init__(self):
        self.rows = []  # dicts: test, phase, result, seconds, rss {name: kB}, note
        self.cluster = None
        self.reset_ok = True
        self._test_peaks = None  # name -> kB, the running maximum of the current test

    def attach(self, cluster):
        self.cluster = cluster

    def detach(self, cluster):
        if self.cluster is cluster:
            self.cluster = None

    def _procs(self):
        if self.cluster is None:
            return []
        return [p for p in self.cluster.processes if p.proc is not None and p.proc.poll() is None]

    def _read(self):
        out = {}
        for p in self._procs():
            kb = vm_hwm_kb(p.proc.pid)
            if kb is not None:
                out[p.name] = kb
        return out

    def _fold(self, peaks):
        if self._test_peaks is not None:
            for k, v in peaks.items():
                self._test_peaks[k] = max(self._test_peaks.get(k, 0), v)

    def _reset(self):
        self._fold(self._read())  # the test's peak so far survives the phase's reset
        for p in self._procs():
            self.reset_ok = reset_hwm(p.proc.pid) and self.reset_ok

    # A test: begin_test() / end_test() around its call, by the autouse fixture in conftest.
    def begin_test(self):
        self._test_peaks = None  # what came before (a fixture's load) is not the test's
        self._reset()
        self._test_peaks = {}
        self._test_start = time.monotonic()

    def end_test(self, name, result):
        peaks = self._read()
        self._fold(peaks)
        self.rows.append({"test": name, "phase": "(whole test)", "result": result,
                          "seconds": time.monotonic() - self._test_start,
                          "rss": dict(self._test_peaks), "note": ""})
        self._test_peaks = None

    @contextlib.contextmanager
    def phase(self, test, phase, note=""):
        """Time one phase of a test (or of a fixture's load); yields a dict whose 'rss' holds
        the phase's peak RSS per process (kB) once the block is over, and whose 'note' the
        block may set (shown in the report)."""
        self._reset()
        info = {"rss": {}, "note": note, "seconds": None}
        row = {"test": test, "phase": phase, "result": "failed", "seconds": None, "rss": {},
               "note": note}
        self.rows.append(row)
        t0 = time.monotonic()
        try:
            yield info
            row["result"] = "ok"
        finally:
            row["seconds"] = info["seconds"] = time.monotonic() - t0
            row["rss"] = info["rss"] = self._read()
            row["note"] = info["note"]
            self._fold(row["rss"])
            print("\n[scale] %s / %s: %.1f s, peak RSS %s%s" % (
                test, phase, row["seconds"],
                ", ".join("%s %.0f MB" % (k, v / 1024.0) for k, v in sorted(row["rss"].items())),
                ("; " + row["note"]) if row["note"] else ""), flush=True)

    def table(self):
        """The figures as a Markdown table."""
        cols = list(self.COLUMNS)
        for r in self.rows:
            for k in r["rss"]:
                if k not in cols:
                    cols.append(k)
        head = ["test", "phase", "result", "seconds"] + ["%s peak RSS (MB)" % c for c in cols] \
            + ["note"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.rows:
            cells = [r["test"], r["phase"], r["result"],
                     "%.1f" % r["seconds"] if r["seconds"] is not None else "-"]
            cells += ["%.0f" % (r["rss"][c] / 1024.0) if c in r["rss"] else "-" for c in cols]
            cells.append(r["note"])
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def header(self, binary):
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True, cwd=os.path.dirname(os.path.abspath(__file__))
                                    ).stdout.strip()
        except OSError:
            commit = "?"
        mem = 0
        try:
            with open("/proc/meminfo") as f:
                mem = int(f.readline().split()[1]) // 1024
        except OSError:
            pass
        return ("Shale scale suite (make scale)%s, %s, commit %s, binary %s; %d CPUs, %d MB RAM, "
                "%s.\nPeak RSS is VmHWM, reset (clear_refs) at the start of each phase and test%s."
                % ("" if FRACTION == 1 else " AT SCALE_FRACTION=%g" % FRACTION,
                   datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), commit or "?", binary,
                   os.cpu_count() or 0, mem, platform.platform(),
                   "" if self.reset_ok else
                   " -- RESET FAILED on this machine: the figures are peaks since process start"))


RECORDER = Recorder()

# ---------------------------------------------------------------- documents

# The small documents of the issue ({_id: "w-1-2", k: 2}): writer w's document of key k.


def small_doc(w, k):
    return {"_id": "w-%d-%d" % (w, k), "k": k}


# 1 KB documents: {_id: i, g: i % G, pad: "x" * 993} is 1024 bytes of BSON (_id and g int32).
PAD = "x" * 993
KB_DOC_SIZE = 1024


def kb_doc(i, groups):
    return {"_id": i, "g": i % groups, "pad": PAD}


def _docs(kind, w, lo, hi, arg):
    if kind == "small":
        return [small_doc(w, k) for k in range(lo, hi)]
    if kind == "kb":
        return [kb_doc(i, arg) for i in range(lo, hi)]
    raise ValueError(kind)


def _load_worker(uri, db, coll, kind, w, lo, hi, batch, arg):
    c = pymongo.MongoClient(uri, serverSelectionTimeoutMS=60000)
    try:
        target = c[db][coll]
        for s in range(lo, hi, batch):
            target.insert_many(_docs(kind, w, s, min(hi, s + batch), arg), ordered=False)
    finally:
        c.close()


def load(uri, db, coll, kind, lo, hi, procs=2, batch=None, arg=None):
    """Insert documents lo .. hi-1 of 'kind' ("small": small_doc(w, k) with writer w the loader's
    number; "kb": kb_doc(i, arg)) into db.coll at uri with 'procs' loader processes (each its
    own client, unordered insert_many of 'batch' documents). Raises when a loader failed."""
    # 8,000 documents of 1 KB (8 MB) a call: within one internal command per shard, so the
    # load does not depend on how the router splits a larger batch (test_writes.py does).
    batch = batch or (100000 if kind == "small" else 8000)
    ctx = multiprocessing.get_context("fork")
    n = hi - lo
    ps = []
    for w in range(procs):
        a, b = lo + n * w // procs, lo + n * (w + 1) // procs
        p = ctx.Process(target=_load_worker, args=(uri, db, coll, kind, w, a, b, batch, arg))
        p.start()
        ps.append(p)
    for p in ps:
        p.join()
    bad = [p.exitcode for p in ps if p.exitcode != 0]
    if bad:
        raise RuntimeError("a loader of %s.%s failed (exit codes %s)" % (db, coll, bad))


def run_procs(target, args_list):
    """Run target(*args) in one forked process per args; raise when any failed."""
    ctx = multiprocessing.get_context("fork")
    ps = [ctx.Process(target=target, args=a) for a in args_list]
    for p in ps:
        p.start()
    return ps


def join_procs(ps, what):
    for p in ps:
        p.join()
    bad = [p.exitcode for p in ps if p.exitcode != 0]
    if bad:
        raise RuntimeError("%s failed (exit codes %s)" % (what, bad))
