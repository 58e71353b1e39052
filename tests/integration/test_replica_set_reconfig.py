"""Changing a running set (issue 18): replSetReconfig with MongoDB's safe reconfig rules (a
member added initial-syncs and becomes a SECONDARY; a removed one is REMOVED; force on a
secondary), replSetFreeze, replSetMaintenance and replSetSyncFrom."""

import os
import signal
import time

import pymongo
import pytest
from pymongo.errors import NotMasterError as NotPrimaryError, OperationFailure

from shale_fixtures import ShaleProcess, cleanup_later, fail_point, wait_until

SET = "rc"


@pytest.fixture(scope="module")
def rs(request):
    nodes = [ShaleProcess(["node", "--replSet", SET], name="rc%d" % i) for i in range(3)]
    for n in nodes:
        n.start()
    cfg = {"_id": SET, "members": [{"_id": i, "host": n.host} for i, n in enumerate(nodes[:2])],
           "settings": {"heartbeatIntervalMillis": 200, "electionTimeoutMillis": 2000}}
    direct(nodes[0]).admin.command("replSetInitiate", cfg)
    wait_until(lambda: my_state(nodes[1]) == 2, 30, "a secondary")
    yield nodes
    failed = request.node.session.testsfailed > 0
    cleanup_later(nodes, lambda i, p: ("replica-set-reconfig-%s" % p.name) if failed else None)


def direct(node, **kw):
    return node.client(directConnection=True, **kw)


def my_state(node):
    return direct(node).admin.command("replSetGetStatus")["myState"]


def config(node):
    return direct(node).admin.command("replSetGetConfig")["config"]


def code_of(node, cmd, **kw):
    with pytest.raises((OperationFailure, NotPrimaryError)) as e:
        direct(node).admin.command(cmd, **kw)
    return e.value.details["code"]


def member(i, node, **kw):
    d = {"_id": i, "host": node.host}
    d.update(kw)
    return d


def test_reconfig_validation(rs):
    p, s, _ = rs
    cfg = config(p)
    assert code_of(s, {"replSetReconfig": cfg}) == 10107
    assert code_of(p, {"replSetReconfig": cfg}) == 103  # version not higher
    other = dict(cfg, _id="other", version=cfg["version"] + 1)
    assert code_of(p, {"replSetReconfig": other}) == 103
    two = dict(cfg, version=cfg["version"] + 1,
               members=cfg["members"] + [{"_id": 5, "host": "127.0.0.1:1"},
                                         {"_id": 6, "host": "127.0.0.1:2"}])
    assert code_of(p, {"replSetReconfig": two}) == 103  # two voters at once
    bad = dict(cfg, version=cfg["version"] + 1, members=[dict(cfg["members"][0], priority=-1)])
    assert code_of(p, {"replSetReconfig": bad}) in (2, 93)
    assert config(p)["version"] == cfg["version"]


def test_add_and_remove_a_member(rs):
    p, s, new = rs
    db = direct(p).test
    db.things.insert_many([{"_id": i} for i in range(200)])
    cfg = config(p)
    cfg["version"] += 1
    cfg["members"].append(member(2, new))
    direct(p).admin.command("replSetReconfig", cfg)
    assert config(p)["version"] == cfg["version"]
    wait_until(lambda: my_state(new) == 2, 30, "the added member syncs and is a secondary")
    assert config(new)["version"] == cfg["version"]
    assert direct(p).admin.command("hello")["hosts"] == [p.host, s.host, new.host]
    r = db.command("insert", "things", documents=[{"_id": "w3"}],
                   writeConcern={"w": 3, "wtimeout": 10000})
    assert "writeConcernError" not in r
    sec = direct(new, readPreference="secondaryPreferred")
    assert sec.test.things.count_documents({}) == 201

    cfg["version"] += 1
    cfg["members"] = cfg["members"][:2]
    direct(p).admin.command("replSetReconfig", cfg)
    wait_until(lambda: my_state(new) == 10, 10, "the removed member is REMOVED")
    assert direct(p).admin.command("hello")["hosts"] == [p.host, s.host]
    r = db.command("insert", "things", documents=[{"_id": "w3b"}],
                   writeConcern={"w": 3, "wtimeout": 500})
    assert r["writeConcernError"]["code"] == 100  # two data-bearing members now


def is_primary(node):
    return direct(node).admin.command("hello")["isWritablePrimary"]


def test_force_reconfig_and_priority_takeover(rs):
    p, s, _ = rs
    cfg = config(s)
    v = cfg["version"]
    cfg["members"][1]["priority"] = 2
    direct(s).admin.command("replSetReconfig", cfg, force=True)
    assert config(s)["version"] >= v + 10000
    wait_until(lambda: config(p)["version"] == config(s)["version"], 10,
               "the forced configuration reaches the primary")
    # the member with the higher priority, caught up, takes over
    wait_until(lambda: is_primary(s), 20, "a priority takeover")
    wait_until(lambda: not is_primary(p), 10, "the old primary steps down")
    r = direct(s).test.command("insert", "things", documents=[{"_id": "takeover"}],
                               writeConcern={"w": 2, "wtimeout": 10000})
    assert "writeConcernError" not in r
    # back to equal priorities, then replSetStepUp makes the other one primary at once
    cfg = config(s)
    cfg["version"] += 1
    cfg["members"][1]["priority"] = 1
    direct(s).admin.command("replSetReconfig", cfg)
    assert code_of(s, {"replSetStepUp": 1}) == 125
    wait_until(lambda: config(p)["version"] == cfg["version"], 10, "the new configuration")
    direct(p).admin.command("replSetStepUp")
    assert is_primary(p)
    wait_until(lambda: not is_primary(s), 10, "the other steps down")


def test_primary_without_a_majority_steps_down(rs):
    p, s, _ = rs
    wait_until(lambda: my_state(s) == 2, 20, "a secondary")
    os.kill(s.proc.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: not is_primary(p), 20, "the primary alone steps down")
        assert my_state(p) == 2
    finally:
        os.kill(s.proc.pid, signal.SIGCONT)
    wait_until(lambda: is_primary(p) or is_primary(s), 30, "a primary again")


def test_freeze_maintenance_sync_from(rs):
    p, s, _ = rs
    if not is_primary(p):
        p, s = s, p
    assert code_of(p, {"replSetFreeze": 10}) == 95
    assert direct(s).admin.command("replSetFreeze", 0)["info"] == "unfreezing"
    direct(s).admin.command("replSetFreeze", 5)
    direct(s).admin.command("replSetFreeze", 0)

    assert code_of(p, {"replSetMaintenance": True}) == 95
    direct(s).admin.command("replSetMaintenance", True)
    assert my_state(s) == 3
    with pytest.raises(pymongo.errors.PyMongoError):
        direct(s, readPreference="secondaryPreferred",
               serverSelectionTimeoutMS=500).test.things.find_one()
    direct(s).admin.command("replSetMaintenance", False)
    assert my_state(s) == 2
    assert code_of(s, {"replSetMaintenance": False}) == 96

    assert code_of(s, {"replSetSyncFrom": "127.0.0.1:1"}) == 74
    assert code_of(s, {"replSetSyncFrom": s.host}) == 72
    r = direct(s).admin.command("replSetSyncFrom", p.host)
    assert r["syncFromRequested"] == p.host


def test_tagged_write_concern(rs):
    p, s, _ = rs
    if not is_primary(p):
        p, s = s, p
    cfg = config(p)
    cfg["version"] += 1
    for m in cfg["members"]:
        m["tags"] = {"dc": "east" if m["host"] == p.host else "west", "rack": "r1"}
    cfg["settings"]["getLastErrorModes"] = {"twoDCs": {"dc": 2}, "oneDC": {"dc": 1},
                                            "threeDCs": {"dc": 3}}
    direct(p).admin.command("replSetReconfig", cfg)
    got = config(p)
    assert got["settings"]["getLastErrorModes"]["twoDCs"] == {"dc": 2}
    assert {m["tags"]["dc"] for m in got["members"]} == {"east", "west"}

    db = direct(p).test
    r = db.command("insert", "tagged", documents=[{"_id": 1}],
                   writeConcern={"w": "twoDCs", "wtimeout": 10000})
    assert r["n"] == 1 and "writeConcernError" not in r
    r = db.command("insert", "tagged", documents=[{"_id": 2}], writeConcern={"w": "threeDCs"})
    assert r["writeConcernError"]["code"] == 100
    r = db.command("insert", "tagged", documents=[{"_id": 3}], writeConcern={"w": "nope"})
    assert r["writeConcernError"]["code"] == 79

    fail_point(direct(s), "stopReplProducer", "alwaysOn")
    try:
        r = db.command("insert", "tagged", documents=[{"_id": 4}],
                       writeConcern={"w": "twoDCs", "wtimeout": 300})
        assert r["writeConcernError"]["code"] == 64
        r = db.command("insert", "tagged", documents=[{"_id": 5}],
                       writeConcern={"w": "oneDC", "wtimeout": 5000})
        assert "writeConcernError" not in r
    finally:
        fail_point(direct(s), "stopReplProducer", "off")
    r = db.command("insert", "tagged", documents=[{"_id": 6}],
                   writeConcern={"w": "twoDCs", "wtimeout": 10000})
    assert "writeConcernError" not in r

    bad = config(p)
    bad["version"] += 1
    bad["members"][0]["tags"] = {"dc": 5}
    assert code_of(p, {"replSetReconfig": bad}) == 14


def test_delayed_hidden_member(rs):
    p, s, late = rs
    if not is_primary(p):
        p, s = s, p
    cfg = config(p)
    cfg["version"] += 1
    cfg["members"].append(member(2, late, priority=0, hidden=True, votes=0,
                                 secondaryDelaySecs=2))
    direct(p).admin.command("replSetReconfig", cfg)
    wait_until(lambda: my_state(late) == 2, 30, "the re-added member is a secondary")
    assert late.host not in direct(p).admin.command("hello")["hosts"]
    assert direct(late).admin.command("hello")["hidden"] is True

    t0 = time.monotonic()
    direct(p).test.delayed.insert_one({"_id": 1})
    lc = direct(late, readPreference="secondaryPreferred").test.delayed
    time.sleep(0.5)
    assert lc.find_one({"_id": 1}) is None
    wait_until(lambda: lc.find_one({"_id": 1}) is not None, 15, "the delayed member applies it")
    assert time.monotonic() - t0 >= 1.9
