"""pytest fixtures: `node` (a standalone `shale node`), `rs_node` (a replica set of
one), and `shale_process` to build others. Logs of failed tests are kept in logs/."""

import pytest

from shale_fixtures import ShaleProcess, fail_point  # noqa: F401

_started = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_failed = rep.failed


def _finish(request, procs):
    failed = getattr(request.node, "rep_failed", False)
    for i, p in enumerate(procs):
        p.cleanup(keep_log_as=("%s-%s-%d" % (request.node.name, p.name, i)) if failed else None)


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
