"""MongoDB's failCommand fail point, used exactly as drivers' test suites use it
(errorCode, errorLabels, closeConnection, blockConnection + blockTimeMS,
writeConcernError, appName, times/skip), and configureFailPoint's availability."""

import time

import pymongo
import pytest

from shale_fixtures import fail_point


def fail(node, mode, **data):
    return fail_point(node.client(), "failCommand", mode, data)


def test_error_code_in_reply(node):
    c = node.client()
    r = fail(node, {"times": 1}, failCommands=["ping"], errorCode=2)
    assert r["ok"] == 1.0 and r["count"] == 0
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        c.admin.command("ping")
    assert e.value.code == 2
    assert e.value.details["codeName"] == "BadValue"
    assert e.value.details["ok"] == 0.0
    assert "failCommand" in e.value.details["errmsg"]
    # times: 1 is used up; other commands were never affected.
    assert c.admin.command("ping")["ok"] == 1.0
    assert c.admin.command("buildInfo")["ok"] == 1.0


def test_error_labels_override(node):
    c = node.client()
    fail(node, {"times": 1}, failCommands=["ping"], errorCode=112,
         errorLabels=["TransientTransactionError", "Custom"])
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        c.admin.command("ping")
    assert e.value.code == 112
    assert e.value.details["errorLabels"] == ["TransientTransactionError", "Custom"]
    assert e.value.has_error_label("Custom")
    # An empty list means: no labels at all.
    fail(node, {"times": 1}, failCommands=["ping"], errorCode=112, errorLabels=[])
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        c.admin.command("ping")
    assert e.value.details.get("errorLabels", []) == []


def test_close_connection(node):
    c = node.client()
    before = c.admin.command("serverStatus")["connections"]["totalCreated"]
    fail(node, {"times": 1}, failCommands=["ping"], closeConnection=True)
    with pytest.raises(pymongo.errors.AutoReconnect):
        c.admin.command("ping")
    # The next command works, on a new connection.
    assert c.admin.command("ping")["ok"] == 1.0
    after = c.admin.command("serverStatus")["connections"]["totalCreated"]
    assert after > before


def test_block_connection(node):
    c = node.client()
    c.admin.command("ping")  # connect first: the handshake is not what we time
    fail(node, {"times": 1}, failCommands=["ping"], blockConnection=True, blockTimeMS=400)
    t0 = time.monotonic()
    assert c.admin.command("ping")["ok"] == 1.0
    assert time.monotonic() - t0 >= 0.4
    # With an errorCode the command blocks and then fails.
    fail(node, {"times": 1}, failCommands=["ping"], blockConnection=True, blockTimeMS=200,
         errorCode=50)
    t0 = time.monotonic()
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        c.admin.command("ping")
    assert time.monotonic() - t0 >= 0.2
    assert e.value.code == 50


def test_write_concern_error(node):
    c = node.client()
    wce = {"code": 91, "codeName": "ShutdownInProgress", "errmsg": "Replication is being shut down",
           "errorLabels": ["RetryableWriteError"]}
    fail(node, {"times": 1}, failCommands=["ping"], writeConcernError=wce)
    r = c.admin.command("ping")
    assert r["ok"] == 1.0
    assert r["writeConcernError"] == wce
    assert "writeConcernError" not in c.admin.command("ping")


def test_write_concern_error_is_injected_after_the_command_ran(node):
    """MongoDB evaluates failCommand twice: before the command runs (closeConnection,
    blockConnection, errorCode) and, once it ran, for a writeConcernError -- each firing
    counts against times. The writeConcernError goes on an error reply too."""
    c = node.client()
    db = c.test
    db.wce_after.drop()
    wce = {"code": 64, "errmsg": "waiting for replication timed out"}
    # times: 1 is spent on the block before the command ran: no writeConcernError.
    fail(node, {"times": 1}, failCommands=["insert"], blockConnection=True, blockTimeMS=10,
         writeConcernError=wce)
    r = db.command({"insert": "wce_after", "documents": [{"_id": 1}]})
    assert r["n"] == 1 and "writeConcernError" not in r
    # times: 2 fires at both points.
    fail(node, {"times": 2}, failCommands=["insert"], blockConnection=True, blockTimeMS=10,
         writeConcernError=wce)
    r = db.command({"insert": "wce_after", "documents": [{"_id": 2}]})
    assert r["n"] == 1 and r["writeConcernError"] == wce
    assert "writeConcernError" not in db.command({"insert": "wce_after",
                                                  "documents": [{"_id": 3}]})
    # A command that failed while it ran still gets the writeConcernError.
    fail(node, {"times": 1}, failCommands=["findAndModify"], writeConcernError=wce)
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        db.command({"findAndModify": "wce_after", "query": {"_id": 1},
                    "update": {"$nosuch": {"a": 1}}})
    assert e.value.code == 9
    assert e.value.details["writeConcernError"] == wce
    assert db.wce_after.count_documents({}) == 3


def test_app_name_filter(node):
    victim = node.client(appname="victim")
    other = node.client(appname="other")
    plain = node.client()
    fail(node, "alwaysOn", failCommands=["ping"], errorCode=2, appName="victim")
    for _ in range(3):
        assert other.admin.command("ping")["ok"] == 1.0
        assert plain.admin.command("ping")["ok"] == 1.0
        with pytest.raises(pymongo.errors.OperationFailure) as e:
            victim.admin.command("ping")
        assert e.value.code == 2
    fail(node, "off")
    assert victim.admin.command("ping")["ok"] == 1.0


def test_times_counts_only_matching_commands(node):
    victim = node.client(appname="victim")
    other = node.client(appname="other")
    victim.admin.command("buildInfo")
    fail(node, {"times": 2}, failCommands=["ping"], errorCode=2, appName="victim")
    # Neither other clients' pings nor the victim's other commands use up an activation.
    for _ in range(5):
        assert other.admin.command("ping")["ok"] == 1.0
        assert victim.admin.command("buildInfo")["ok"] == 1.0
    for _ in range(2):
        with pytest.raises(pymongo.errors.OperationFailure):
            victim.admin.command("ping")
    assert victim.admin.command("ping")["ok"] == 1.0
    # configureFailPoint reports how often it fired.
    assert fail(node, "off")["count"] == 2


def test_skip_mode(node):
    c = node.client(appname="skipper")
    fail(node, {"skip": 2}, failCommands=["ping"], errorCode=2, appName="skipper")
    assert c.admin.command("ping")["ok"] == 1.0
    assert c.admin.command("ping")["ok"] == 1.0
    for _ in range(2):  # after the skips it fires every time
        with pytest.raises(pymongo.errors.OperationFailure):
            c.admin.command("ping")
    fail(node, "off")
    assert c.admin.command("ping")["ok"] == 1.0


def test_configure_fail_point_errors(node):
    c = node.client()
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        c.test.command({"configureFailPoint": "failCommand", "mode": "off"})
    assert e.value.code == 13
    with pytest.raises(pymongo.errors.OperationFailure):
        fail_point(c, "noSuchFailPoint", "alwaysOn")
    with pytest.raises(pymongo.errors.OperationFailure):
        fail_point(c, "failCommand", "sometimes")
    with pytest.raises(pymongo.errors.OperationFailure):
        c.admin.command({"configureFailPoint": "failCommand"})


def test_configure_fail_point_needs_test_commands(shale_process):
    prod = shale_process(["node"], name="prodnode", test_commands=False)
    c = prod.client()
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        fail_point(c, "failCommand", "alwaysOn", {"failCommands": ["ping"], "errorCode": 2})
    assert e.value.code == 59
    assert e.value.details["codeName"] == "CommandNotFound"
    assert "configureFailPoint" not in c.admin.command("listCommands")["commands"]
    assert c.admin.command({"getParameter": 1, "enableTestCommands": 1})["enableTestCommands"] \
        is False
    assert c.admin.command("ping")["ok"] == 1.0
