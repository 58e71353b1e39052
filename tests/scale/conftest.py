"""Scale suite (issue 23): long tests on a release build, run by `make scale`, never by
`make test`. They reuse the integration fixtures (tests/integration/shale_fixtures.py): real
processes on free ports in temporary folders. Each module gets its own 2-shard cluster
(`scale_cluster`); the recorder (scale_util.py) times every test and phase and reads the peak
RSS of each process, and the session prints the figures as a table and writes them to
build-release/scale-report.md (SCALE_REPORT overrides the path)."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", ".."))
os.environ.setdefault("SHALE_BIN", os.path.join(TOP, "build-release", "src", "main", "shale"))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))

import shale_fixtures  # noqa: E402
from shale_fixtures import module_cluster  # noqa: E402

from scale_util import RECORDER  # noqa: E402

shale_fixtures.LOG_DIR = os.path.join(HERE, "logs")
REPORT = os.environ.get("SCALE_REPORT", os.path.join(TOP, "build-release", "scale-report.md"))

# Shards get a 1 GB WiredTiger cache (the integration fixtures give every node 0.25 GB, as many
# share the machine there; the last --wiredTigerCacheSizeGB wins).
SHARD_EXTRA = ["--wiredTigerCacheSizeGB", "1"]


@pytest.fixture(scope="module")
def scale_cluster(request):
    """A started 2-shard ShaleCluster for one test module, whose processes the recorder
    watches. Logs are kept in tests/scale/logs/ when a test of the module failed."""
    with module_cluster(request, shards=2, shard_extra=SHARD_EXTRA) as c:
        RECORDER.attach(c)
        try:
            yield c
        finally:
            RECORDER.detach(c)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_call = rep


@pytest.fixture(autouse=True)
def figures(request):
    """Time the test and record each process's peak RSS during it (module fixtures, such as
    the loads, were set up before and are recorded as phases of their own)."""
    RECORDER.begin_test()
    yield
    rep = getattr(request.node, "rep_call", None)
    result = "passed" if rep is not None and rep.passed else \
        ("skipped" if rep is not None and rep.skipped else "FAILED")
    RECORDER.end_test(request.node.name, result)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not RECORDER.rows:
        return
    text = RECORDER.header(os.environ["SHALE_BIN"]) + "\n\n" + RECORDER.table() + "\n"
    terminalreporter.write_sep("=", "scale figures")
    terminalreporter.write_line(text)
    try:
        os.makedirs(os.path.dirname(REPORT), exist_ok=True)
        with open(REPORT, "w") as f:
            f.write("# Scale figures\n\n" + text)
        terminalreporter.write_line("(written to %s)" % REPORT)
    except OSError as e:
        terminalreporter.write_line("could not write %s: %s" % (REPORT, e))


def pytest_sessionfinish(session, exitstatus):
    """As the integration suite: a process that hung or crashed in its shutdown fails the
    run even when its tests passed."""
    shale_fixtures.wait_reaped()
    if shale_fixtures.SHUTDOWN_FAILURES or shale_fixtures.SANITIZER_REPORTS:
        print("\nprocess(es) that hung or crashed in their shutdown, or sanitizer reports "
              "(logs kept in tests/scale/logs/):")
        for r in shale_fixtures.SHUTDOWN_FAILURES + shale_fixtures.SANITIZER_REPORTS:
            print("  " + r)
        session.exitstatus = 1
