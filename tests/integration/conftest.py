"""pytest fixtures: `node` (a standalone `shale node`), `rs_node` (a replica set of
one), `cluster` (a sharded cluster: config server, 2 shards, router; one per test
module), and `shale_process` to build others. Logs of failed tests are kept in logs/."""

import pytest

import shale_fixtures
from shale_fixtures import ShaleCluster, ShaleProcess, fail_point, module_cluster  # noqa: F401
from shale_fixtures import cleanup_later

_started = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_failed = rep.failed


def _finish(request, procs):
    failed = getattr(request.node, "rep_failed", False)
    name = request.node.name
    cleanup_later(procs, lambda i, p: ("%s-%s-%d" % (name, p.name, i)) if failed else None)


@pytest.fixture
def shale_process(request):
    """Factory: shale_process(args, **kw) -> started ShaleProcess, stopped at teardown."""
    procs = []

    def make(args, start=True, **kw):
        p = ShaleProcess(args, **kw)
        procs.append(p)
        if start:
            p.start()
        return p
    yield make
    _finish(request, procs)


@pytest.fixture
def node(shale_process):
    return shale_process(["node"], name="node")


@pytest.fixture
def rs_node(shale_process):
    return shale_process(["node", "--replSet", "rs0"], name="rsnode")


@pytest.fixture(scope="module")
def module_node(request):
    """A started plain `shale node` shared by the tests of one module."""
    p = ShaleProcess(["node"], name=request.module.__name__ + "-node")
    p.start()
    yield p
    shale_fixtures.stop_all([p])
    p.cleanup()


@pytest.fixture(scope="module")
def cluster(request):
    """A started ShaleCluster with 2 shards, shared by the tests of one module. Its logs
    are kept in logs/ when any test of the module failed."""
    with module_cluster(request, shards=2) as c:
        yield c


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when any process logged a sanitizer report (make asan builds; leaks are
    reported when a process exits after SIGTERM), or hung or crashed in the shutdown a
    teardown asked for, even in a test that passed: the bug is real whether or not the
    test's assertions noticed it."""
    shale_fixtures.wait_reaped()
    for what, reports in (("sanitizer report(s) in process logs",
                           shale_fixtures.SANITIZER_REPORTS),
                          ("process(es) that hung or crashed in their shutdown",
                           shale_fixtures.SHUTDOWN_FAILURES)):
        if reports:
            print("\n%d %s (logs kept in logs/):" % (len(reports), what))
            for r in reports:
                print("  " + r)
            session.exitstatus = 1
