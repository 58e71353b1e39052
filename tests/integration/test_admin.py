"""The diagnostic and administrative commands every Shale process answers, through
pymongo, checked against MongoDB 7.0's field names and BSON types; log lines; the
shutdown command and graceful SIGTERM."""

import datetime
import json
import os
import platform
import re
import signal
import threading
import time
import uuid

import pymongo
import pytest
from bson.binary import UUID_SUBTYPE, Binary
from bson.int64 import Int64

import wire_util as w
from shale_fixtures import fail_point, run_to_fail_point, wait_until

ADMIN_ONLY = ["getParameter", "setParameter", "getCmdLineOpts", "getLog", "shutdown"]
ALL_COMMANDS = ADMIN_ONLY + ["serverStatus", "hostInfo", "whatsmyuri", "connectionStatus",
                             "listCommands", "endSessions", "killAllSessions", "killSessions",
                             "refreshSessions", "hello", "isMaster", "ping", "buildInfo"]


def is_int32(v):
    return type(v) is int


def is_int64(v):
    return type(v) is Int64


def log_lines(node):
    """The complete lines of the node's log file. A line being written while the file is read
    can show up cut at a page boundary (one write() of a line is not atomic for a reader), so
    text after the last newline is left out."""
    text = node.read_log()
    return [line for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]


def assert_compact_json_line(line):
    """A MongoDB-style log line: JSON, fixed leading fields, rendered without spaces."""
    doc = json.loads(line)
    assert list(doc)[:6] == ["t", "s", "c", "id", "ctx", "msg"], line
    assert set(doc) <= {"t", "s", "c", "id", "ctx", "msg", "attr"}, line
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", doc["t"]["$date"])
    assert isinstance(doc["id"], int)
    assert json.dumps(doc, separators=(",", ":"), ensure_ascii=False) == line
    return doc


# ---------------------------------------------------------------- getParameter


def test_get_parameter_named(node):
    a = node.client().admin
    r = a.command({"getParameter": 1, "cursorTimeoutMillis": 1})
    assert r == {"cursorTimeoutMillis": 600000, "ok": 1.0}
    r = a.command({"getParameter": 1, "logLevel": 1, "ttlMonitorEnabled": 1, "nope": 1})
    assert r == {"logLevel": 0, "ttlMonitorEnabled": True, "ok": 1.0}
    assert is_int32(r["logLevel"])
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        a.command({"getParameter": 1, "noSuchParameter": 1})
    assert e.value.code == 72
    assert e.value.details["codeName"] == "InvalidOptions"
    assert e.value.details["errmsg"] == "no option found to get"


def test_get_parameter_star(node):
    a = node.client().admin
    r = a.command({"getParameter": "*"})
    assert r["featureCompatibilityVersion"] == {"version": "7.0"}
    assert r["enableTestCommands"] is True
    assert r["logLevel"] == 0
    assert r["cursorTimeoutMillis"] == 600000
    names = [k for k in r if k != "ok"]
    assert names == sorted(names)  # MongoDB keeps parameters in a sorted map
    # Command-line flags are not server parameters.
    assert "port" not in r and "dbpath" not in r
    assert a.command({"getParameter": {"allParameters": True}}) == r


def test_get_parameter_show_details_and_set_at(node):
    a = node.client().admin
    r = a.command({"getParameter": {"showDetails": True}, "logLevel": 1,
                   "enableTestCommands": 1, "featureCompatibilityVersion": 1})
    assert r["logLevel"] == {"value": 0, "settableAtRuntime": True, "settableAtStartup": True}
    assert r["enableTestCommands"] == {"value": True, "settableAtRuntime": False,
                                       "settableAtStartup": True}
    assert r["featureCompatibilityVersion"]["value"] == {"version": "7.0"}
    runtime = a.command({"getParameter": {"allParameters": True, "setAt": "runtime"}})
    assert "logLevel" in runtime and "enableTestCommands" not in runtime
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        a.command({"getParameter": {"bogus": True}, "logLevel": 1})
    assert e.value.code == 40415


# ---------------------------------------------------------------- setParameter


def test_set_parameter_round_trip(node):
    a = node.client().admin
    assert a.command({"setParameter": 1, "cursorTimeoutMillis": 1234}) == {"was": 600000,
                                                                         "ok": 1.0}
    assert a.command({"getParameter": 1, "cursorTimeoutMillis": 1})["cursorTimeoutMillis"] == 1234
    assert a.command({"setParameter": 1, "notablescan": True})["was"] is False
    assert a.command({"getParameter": 1, "notablescan": 1})["notablescan"] is True
    # Several at once: only the first (in name order) reports 'was', as in MongoDB.
    r = a.command({"setParameter": 1, "syncdelay": 30, "cursorTimeoutMillis": 600000})
    assert r == {"was": 1234, "ok": 1.0}
    r = a.command({"getParameter": 1, "syncdelay": 1, "cursorTimeoutMillis": 1})
    assert r["syncdelay"] == 30 and r["cursorTimeoutMillis"] == 600000
    # Generic arguments are not parameters.
    assert a.command({"setParameter": 1, "syncdelay": 60, "comment": "x"})["was"] == 30


@pytest.mark.parametrize("cmd,code,errmsg", [
    ({"noSuchParameter": 1}, 72,
     "attempted to set unrecognized parameter [noSuchParameter], use help:true to see options "),
    ({"port": 1}, 72,
     "attempted to set unrecognized parameter [port], use help:true to see options "),
    ({"enableTestCommands": False}, 20, "not allowed to change [enableTestCommands] at runtime"),
    ({"featureCompatibilityVersion": "7.0"}, 20,
     "not allowed to change [featureCompatibilityVersion] at runtime"),
    ({}, 72, "no option found to set, use help:true to see options "),
    ({"logLevel": -1}, 2, None),
    ({"cursorTimeoutMillis": "soon"}, 2, None),
    ({"cursorTimeoutMillis": 1.5}, 2, None),
])
def test_set_parameter_errors(node, cmd, code, errmsg):
    a = node.client().admin
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        a.command(dict({"setParameter": 1}, **cmd))
    assert e.value.code == code
    if errmsg is not None:
        assert e.value.details["errmsg"] == errmsg
    # Nothing changed.
    r = a.command({"getParameter": 1, "logLevel": 1, "cursorTimeoutMillis": 1})
    assert r["logLevel"] == 0 and r["cursorTimeoutMillis"] == 600000


def test_set_log_level_changes_verbosity(node):
    a = node.client().admin

    def debug_lines():
        return [l for l in a.command({"getLog": "global"})["log"] if '"s":"D1"' in l]

    with pytest.raises(pymongo.errors.OperationFailure):
        a.command("noSuchCommandA")
    assert debug_lines() == []
    assert a.command({"setParameter": 1, "logLevel": 1})["was"] == 0
    assert a.command({"getParameter": 1, "logLevel": 1})["logLevel"] == 1
    with pytest.raises(pymongo.errors.OperationFailure):
        a.command("noSuchCommandB")
    lines = debug_lines()
    assert any("noSuchCommandB" in l for l in lines), lines
    assert a.command({"setParameter": 1, "logLevel": 0})["was"] == 1
    with pytest.raises(pymongo.errors.OperationFailure):
        a.command("noSuchCommandC")
    assert not any("noSuchCommandC" in l for l in debug_lines())


def test_admin_only_commands_refused_on_other_databases(node):
    db = node.client().test
    for name in ADMIN_ONLY:
        with pytest.raises(pymongo.errors.OperationFailure) as e:
            db.command(name, 1)
        assert e.value.code == 13, name
        assert e.value.details["codeName"] == "Unauthorized"
        assert e.value.details["errmsg"] == "%s may only be run against the admin database." % name
    # shutdown was refused: the process still serves.
    assert node.proc.poll() is None
    assert node.client().admin.command("ping")["ok"] == 1.0
    # The others run on any database.
    for name in ["serverStatus", "hostInfo", "whatsmyuri", "connectionStatus", "listCommands"]:
        assert db.command(name)["ok"] == 1.0


# ---------------------------------------------------------------- status and host


def test_server_status(node):
    c = node.client()
    s = c.admin.command("serverStatus")
    assert isinstance(s["host"], str) and s["host"].endswith(":%d" % node.port)
    assert s["version"] == "7.0.0"
    assert s["process"] == "mongod"
    assert is_int64(s["pid"]) and s["pid"] == node.proc.pid
    assert type(s["uptime"]) is float and s["uptime"] >= 0
    assert is_int64(s["uptimeMillis"]) and is_int64(s["uptimeEstimate"])
    assert isinstance(s["localTime"], datetime.datetime)
    conns = s["connections"]
    for k in ["current", "available", "totalCreated", "active"]:
        assert is_int32(conns[k]), k
    assert conns["current"] >= 1 and conns["active"] >= 1  # this very command is active
    assert conns["current"] + conns["available"] == 1000000
    for k in ["insert", "query", "update", "delete", "getmore", "command"]:
        assert is_int64(s["opcounters"][k]), k
    for k in ["bytesIn", "bytesOut", "numRequests"]:
        assert is_int64(s["network"][k]), k
    mem = s["mem"]
    assert mem["bits"] == 64 and is_int32(mem["resident"]) and is_int32(mem["virtual"])
    assert 0 < mem["resident"] <= mem["virtual"]

    # The counters move with what clients do.
    for _ in range(5):
        c.admin.command("ping")
    other = node.client()
    other.admin.command("ping")
    t = c.admin.command("serverStatus")
    assert t["opcounters"]["command"] >= s["opcounters"]["command"] + 6
    assert t["network"]["numRequests"] >= s["network"]["numRequests"] + 6
    assert t["network"]["bytesIn"] > s["network"]["bytesIn"]
    assert t["network"]["bytesOut"] > s["network"]["bytesOut"]
    assert t["connections"]["totalCreated"] > conns["totalCreated"]
    assert t["uptimeMillis"] >= s["uptimeMillis"]
    # Sections can be left out, as with MongoDB's {serverStatus: 1, mem: 0}.
    u = c.admin.command({"serverStatus": 1, "mem": 0, "opcounters": 0})
    assert "mem" not in u and "opcounters" not in u and "connections" in u


def test_host_info(node):
    h = node.client().admin.command("hostInfo")
    assert list(h) == ["system", "os", "extra", "ok"]
    sys_ = h["system"]
    assert isinstance(sys_["currentTime"], datetime.datetime)
    assert isinstance(sys_["hostname"], str) and sys_["hostname"]
    assert sys_["cpuAddrSize"] == 64 and is_int32(sys_["cpuAddrSize"])
    assert is_int64(sys_["memSizeMB"]) and sys_["memSizeMB"] > 0
    assert is_int32(sys_["numCores"]) and sys_["numCores"] == os.cpu_count()
    assert sys_["cpuArch"] == platform.machine()
    assert sys_["numaEnabled"] is False
    assert h["os"]["type"] == "Linux"
    assert isinstance(h["os"]["name"], str) and h["os"]["name"]
    assert h["os"]["version"] == "Kernel " + platform.release()
    assert isinstance(h["extra"], dict)


def test_get_cmd_line_opts(node):
    r = node.client().admin.command("getCmdLineOpts")
    assert r["argv"] == node.cmdline
    # Nested as MongoDB's YAML configuration layout.
    assert r["parsed"]["net"]["port"] == node.port
    assert r["parsed"]["storage"]["dbPath"] == node.dbpath
    assert r["parsed"]["setParameter"] == {"enableTestCommands": "1"}


def test_get_cmd_line_opts_roles(shale_process):
    n = shale_process(["node", "--replSet", "rs9", "--shardsvr"], name="shardsvr")
    p = n.client().admin.command("getCmdLineOpts")["parsed"]
    assert p["replication"] == {"replSet": "rs9"}
    assert p["sharding"] == {"clusterRole": "shardsvr"}


def test_whatsmyuri_and_connection_status(node):
    s = w.connect(node.port)
    try:
        r = w.command(s, {"whatsmyuri": 1, "$db": "admin"})
        assert r == {"you": "127.0.0.1:%d" % s.getsockname()[1], "ok": 1.0}
    finally:
        s.close()
    a = node.client().admin
    assert a.command("connectionStatus") == {
        "authInfo": {"authenticatedUsers": [], "authenticatedUserRoles": []}, "ok": 1.0}
    r = a.command({"connectionStatus": 1, "showPrivileges": True})
    assert r["authInfo"]["authenticatedUserPrivileges"] == []


def test_list_commands(node):
    cmds = node.client().admin.command("listCommands")["commands"]
    for name in ALL_COMMANDS + ["configureFailPoint"]:
        assert name in cmds, name
        assert isinstance(cmds[name]["help"], str) and cmds[name]["help"]
        assert cmds[name]["adminOnly"] is (name in ADMIN_ONLY + ["configureFailPoint"]), name


def test_session_commands_are_accepted(node):
    a = node.client().admin
    lsid = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
    for name in ["endSessions", "killSessions", "refreshSessions"]:
        assert a.command(name, [lsid])["ok"] == 1.0
    assert a.command("killAllSessions", [])["ok"] == 1.0
    assert node.client().test.command("endSessions", [])["ok"] == 1.0
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        a.command("endSessions", 1)
    assert e.value.code == 14
    # pymongo ends its implicit sessions when it closes: that must be harmless.
    c = node.client()
    c.admin.command("ping", session=c.start_session())
    c.close()
    assert a.command("ping")["ok"] == 1.0


# ---------------------------------------------------------------- logs


def test_get_log(node):
    a = node.client(appname='we"ird\napp\\')
    a.admin.command("ping")
    a = a.admin
    assert a.command({"getLog": "*"}) == {"names": ["global", "startupWarnings"], "ok": 1.0}
    assert a.command({"getLog": "startupWarnings"}) == {"totalLinesWritten": 0, "log": [],
                                                         "ok": 1.0}
    g = a.command({"getLog": "global"})
    assert is_int64(g["totalLinesWritten"]) and g["totalLinesWritten"] >= len(g["log"]) > 0
    docs = [assert_compact_json_line(line) for line in g["log"]]
    accepted = [d for d in docs if d["id"] == 22943]
    assert accepted and accepted[0]["msg"] == "Connection accepted"
    assert accepted[0]["c"] == "NETWORK" and accepted[0]["s"] == "I"
    assert isinstance(accepted[0]["attr"]["connectionId"], int)
    meta = [d for d in docs if d["id"] == 51800]
    assert any(d["attr"]["client"] == 'we"ird\napp\\' for d in meta), meta
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        a.command({"getLog": "nope"})
    assert e.value.code == 96 and e.value.details["errmsg"] == "No log named 'nope'"
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        a.command({"getLog": 1})
    assert e.value.code == 14


def test_log_file_lines_are_compact_json(node):
    node.client(appname="tab\there").admin.command("ping")
    lines = log_lines(node)
    assert len(lines) >= 3
    ctxs = {assert_compact_json_line(line)["ctx"] for line in lines}
    assert "main" in ctxs and any(c.startswith("conn") for c in ctxs)


# ---------------------------------------------------------------- shutdown


def last_log_message(node):
    return json.loads(log_lines(node)[-1])["msg"]


def test_shutdown_command(node):
    c = node.client()
    assert c.admin.command("ping")["ok"] == 1.0
    with pytest.raises(pymongo.errors.ConnectionFailure):
        c.admin.command("shutdown")
    assert node.proc.wait(30) == 0
    assert last_log_message(node) == "Now exiting"
    assert any(json.loads(l)["id"] == 4695400 for l in log_lines(node))


def test_shutdown_command_force_and_timeout(node):
    c = node.client()
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        c.admin.command({"shutdown": 1, "timeoutSecs": "x"})
    assert e.value.code == 14
    with pytest.raises(pymongo.errors.ConnectionFailure):
        c.admin.command({"shutdown": 1, "force": True, "timeoutSecs": 5})
    assert node.proc.wait(30) == 0
    assert last_log_message(node) == "Now exiting"


def test_sigterm_is_graceful_for_running_commands(node):
    block_ms = 1500
    # Both clients connect first and their monitors stay quiet, so while we watch, the
    # only operations that can be active are the slow ping and our serverStatus.
    slow = node.client(appname="slowClient", heartbeatFrequencyMS=60000)
    watcher = node.client(heartbeatFrequencyMS=60000)
    slow.admin.command("buildInfo")
    fail_point(watcher, "failCommand", "alwaysOn",
               {"failCommands": ["ping"], "blockConnection": True, "blockTimeMS": block_ms,
                "appName": "slowClient"})
    result = {}

    def run():
        t0 = time.monotonic()
        try:
            result["reply"] = slow.admin.command("ping")
        except Exception as e:  # noqa: BLE001 -- reported by the assertion below
            result["error"] = e
        result["elapsed"] = time.monotonic() - t0

    t = threading.Thread(target=run)
    t.start()
    # The ping is running once two operations are active: it and this serverStatus.
    wait_until(lambda: watcher.admin.command("serverStatus")["connections"]["active"] >= 2,
               what="the slow ping to be running")
    node.proc.send_signal(signal.SIGTERM)
    t.join(30)
    assert "error" not in result, result
    assert result["reply"]["ok"] == 1.0
    assert result["elapsed"] >= block_ms / 1000.0
    assert node.proc.wait(30) == 0
    assert last_log_message(node) == "Now exiting"
    assert any(json.loads(l)["msg"] == "Shutting down" for l in log_lines(node))


def test_sigterm_exits_cleanly_when_idle(node):
    node.client().admin.command("ping")
    assert node.stop() == 0
    assert last_log_message(node) == "Now exiting"


def test_sigterm_interrupts_what_outlives_the_grace_period(shale_process):
    # A find held in a hang fail point watches only its kill flag: once the grace period
    # (shutdownTimeoutMillisForSignaledShutdown) is over, the shutdown interrupts it, so its
    # connection ends before storage closes, instead of the shutdown waiting 10 s more for
    # that connection and then closing WiredTiger under the running find.
    node = shale_process(["node"], name="node", start=False)
    node.start(extra=["--setParameter", "shutdownTimeoutMillisForSignaledShutdown=500"])
    c = node.client(retryReads=False)
    c.test.c.insert_one({"_id": 1})
    held = run_to_fail_point(c, "waitInFindBeforeMakingBatch", lambda: list(c.test.c.find()))
    t0 = time.monotonic()
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(30) == 0
    assert time.monotonic() - t0 < 8
    held.join(30)
    # The find is answered InterruptedAtShutdown (pymongo raises it as NotMasterError).
    assert isinstance(held.error, pymongo.errors.PyMongoError), held.error
    assert held.error.details["code"] == 11600, held.error
    events = [json.loads(line) for line in log_lines(node)]
    msgs = [e["msg"] for e in events]
    assert msgs[-1] == "Now exiting"
    assert any(e["msg"] == "Interrupting operations at shutdown" and e["attr"]["count"] == 1
               for e in events)
    # Every connection ended before storage closed.
    closed = msgs.index("WiredTiger closed")
    assert msgs.count("Connection accepted") == msgs[:closed].count("Connection ended")
    # (Not c.close(): its endSessions would wait for the stopped node to come back.)
