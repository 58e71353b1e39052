"""`shale up` / `shale down` / `shale status`: a local cluster in one folder, started
and stopped the way a user does it, checked with pymongo."""

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile

import pymongo
import pytest

import shale_fixtures
from shale_fixtures import LOG_DIR, SHALE_BIN, ShaleProcess, wait_until


def port_range(n):
    """A base port such that base..base+n-1 are all free on 127.0.0.1 right now."""
    for _ in range(200):
        # Below Linux's ephemeral range (32768+), where free_port() and clients draw.
        base = random.randrange(20000, 32000)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def shale(*args, timeout=120):
    r = subprocess.run([SHALE_BIN] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout, universal_newlines=True)
    # The CLI process's own sanitizer report (a leak is reported as it exits) fails the run.
    report = shale_fixtures.sanitizer_report(r.stderr)
    if report:
        shale_fixtures.SANITIZER_REPORTS.append("shale %s: %s" % (args[0], report))
    return r


def pid_alive(pid):
    """Running and not a zombie (PID 1 here may not reap what `shale up` left)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


class Cli:
    """One cluster folder and its port range; stops whatever it recorded at the end."""

    def __init__(self, request, shards=2):
        self.request = request
        self.dir = tempfile.mkdtemp(prefix="shale-up-")
        self.shards = shards
        self.port = port_range(shards + 2)
        self.base_args = ["--dbpath", self.dir, "--port", self.port, "--shards", shards,
                          "--wiredTigerCacheSizeGB", "0.25"]

    def up(self, *extra):
        return shale("up", *(self.base_args + list(extra)))

    def layout(self):
        with open(os.path.join(self.dir, "cluster.json")) as f:
            return json.load(f)

    def pids(self):
        try:
            return {p["name"]: p["pid"] for p in self.layout()["processes"] if p["pid"] > 0}
        except OSError:
            return {}

    def finish(self):
        failed = getattr(self.request.node, "rep_failed", False)
        pids = self.pids()
        r = shale("down", "--dbpath", self.dir)
        if "ignored SIGTERM" in r.stderr:
            shale_fixtures.SHUTDOWN_FAILURES.append("shale down: " + r.stderr.strip())
            failed = True
        for pid in pids.values():
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        # The processes' stderr goes to DIR/<name>.log: a sanitizer report there (leaks are
        # reported at the exit `down` asked for) fails the run.
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.dir, name), "rb") as f:
                    report = shale_fixtures.sanitizer_report(f.read().decode("utf-8", "replace"))
                if report:
                    shale_fixtures.SANITIZER_REPORTS.append("%s (%s): %s" %
                                                            (name, self.dir, report))
                    failed = True
        if failed:
            os.makedirs(LOG_DIR, exist_ok=True)
            for name in os.listdir(self.dir):
                if name.endswith(".log") or name == "cluster.json":
                    shutil.copy(os.path.join(self.dir, name),
                                os.path.join(LOG_DIR, "%s-%s" % (self.request.node.name, name)))
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def cli(request):
    c = Cli(request)
    yield c
    c.finish()


def test_up_status_down(cli):
    r = cli.up()
    assert r.returncode == 0, r.stderr
    uri = "mongodb://127.0.0.1:%d/" % cli.port
    # stdout is the connection string alone, so `URI=$(shale up)` works.
    assert r.stdout.strip() == uri
    assert "shale down --dbpath" in r.stderr

    c = pymongo.MongoClient(r.stdout.strip(), serverSelectionTimeoutMS=10000)
    hello = c.admin.command("hello")
    assert hello["msg"] == "isdbgrid"
    shards = {s["_id"]: s["host"] for s in c.admin.command("listShards")["shards"]}
    assert shards == {"shard0": "shard0/127.0.0.1:%d" % (cli.port + 2),
                      "shard1": "shard1/127.0.0.1:%d" % (cli.port + 3)}
    c.close()

    lay = cli.layout()
    assert lay["port"] == cli.port
    names = [p["name"] for p in lay["processes"]]
    assert names == ["config", "shard0", "shard1", "router"]
    ports = {p["name"]: p["port"] for p in lay["processes"]}
    assert ports == {"router": cli.port, "config": cli.port + 1, "shard0": cli.port + 2,
                     "shard1": cli.port + 3}
    pids = cli.pids()
    assert len(pids) == 4 and all(pid_alive(p) for p in pids.values())
    for name, pid in pids.items():
        with open(os.path.join(cli.dir, name + ".pid")) as f:
            assert int(f.read()) == pid
        assert os.path.getsize(os.path.join(cli.dir, name + ".log")) > 0
    # Each shard is a replica set of its own name; the config server is "csrs".
    for name, port in ports.items():
        if name == "router":
            continue
        h = pymongo.MongoClient("127.0.0.1", port, directConnection=True).admin.command("hello")
        assert h["setName"] == ("csrs" if name == "config" else name)

    r = shale("status", "--dbpath", cli.dir)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for section in ("shardingVersion", "shards", "active mongoses", "balancer", "databases"):
        assert "\n%s\n" % section in "\n" + out
    assert "clusterId: ObjectId(" in out
    assert "host: 'shard0/127.0.0.1:%d'" % (cli.port + 2) in out
    assert "host: 'shard1/127.0.0.1:%d'" % (cli.port + 3) in out
    assert "state: 1" in out
    # The same through --host, as host:port or as the printed connection string.
    for host in ("127.0.0.1:%d" % cli.port, uri):
        r2 = shale("status", "--host", host)
        assert r2.returncode == 0 and "shard1/127.0.0.1" in r2.stdout

    r = shale("down", "--dbpath", cli.dir)
    assert r.returncode == 0, r.stderr
    assert "stopped" in r.stderr
    assert not any(pid_alive(p) for p in pids.values())
    assert cli.pids() == {}
    assert not any(n.endswith(".pid") for n in os.listdir(cli.dir))
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", cli.port), timeout=1).close()
    # Stopping a stopped cluster is fine.
    r = shale("down", "--dbpath", cli.dir)
    assert r.returncode == 0 and "was not running" in r.stderr


def test_up_shares_the_machine_between_the_nodes_caches(cli):
    """Without --wiredTigerCacheSizeGB each data node gets MongoDB's default cache for a whole
    machine, max(256 MiB, 50 % of (RAM - 1 GiB)), divided among the cluster's data nodes (a
    config server and two shards here), so together they stay within it."""
    cli.base_args = cli.base_args[:-2]  # no --wiredTigerCacheSizeGB
    r = cli.up()
    assert r.returncode == 0, r.stderr
    ram_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)
    want_mb = max(256, (ram_mb - 1024) // 2 // 3)
    for p in cli.layout()["processes"]:
        if p["name"] == "router":
            continue
        c = pymongo.MongoClient("127.0.0.1", p["port"], directConnection=True)
        got = c.admin.command("serverStatus")["wiredTiger"]["cache"]["maximum bytes configured"]
        c.close()
        assert abs(got / 1048576.0 - want_mb) <= 2, (p["name"], got, want_mb)


def test_up_twice_and_restart(cli):
    r = cli.up()
    assert r.returncode == 0, r.stderr
    first = cli.pids()
    uri = r.stdout.strip()
    # A document written directly on shard0 must survive the restart (same data folder).
    s0 = pymongo.MongoClient("127.0.0.1", cli.port + 2, directConnection=True)
    s0.upcheck.c.insert_one({"_id": 1, "v": "kept"}, )
    s0.close()

    # up on a running cluster changes nothing.
    r = cli.up()
    assert r.returncode == 0, r.stderr
    assert "already running" in r.stderr
    assert r.stdout.strip() == uri
    assert cli.pids() == first

    assert shale("down", "--dbpath", cli.dir).returncode == 0
    # Restart with only --dbpath: ports and shard count come from cluster.json.
    r = shale("up", "--dbpath", cli.dir, "--wiredTigerCacheSizeGB", "0.25")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == uri
    second = cli.pids()
    assert set(second) == set(first) and all(pid_alive(p) for p in second.values())
    assert not set(second.values()) & set(first.values())
    c = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)
    shards = c.admin.command("listShards")["shards"]
    assert sorted(s["_id"] for s in shards) == ["shard0", "shard1"]  # not added twice
    c.close()
    s0 = pymongo.MongoClient("127.0.0.1", cli.port + 2, directConnection=True)
    assert s0.upcheck.c.find_one({"_id": 1})["v"] == "kept"
    s0.close()

    # Another port on the same folder is refused: the shards are registered by port.
    r = shale("up", "--dbpath", cli.dir, "--port", cli.port + 100)
    assert r.returncode == 1
    assert "uses port %d" % cli.port in r.stderr


def test_up_restarts_a_process_that_died(cli):
    r = cli.up()
    assert r.returncode == 0, r.stderr
    pids = cli.pids()
    os.kill(pids["shard1"], signal.SIGKILL)
    wait_until(lambda: not pid_alive(pids["shard1"]), 10, "shard1 to die")
    r = cli.up()
    assert r.returncode == 0, r.stderr
    now = cli.pids()
    assert now["shard1"] != pids["shard1"] and pid_alive(now["shard1"])
    assert {k: v for k, v in now.items() if k != "shard1"} == \
        {k: v for k, v in pids.items() if k != "shard1"}


def test_up_with_more_shards_adds_them(cli):
    r = cli.up()
    assert r.returncode == 0, r.stderr
    before = cli.pids()
    r = shale("up", "--dbpath", cli.dir, "--shards", 3, "--wiredTigerCacheSizeGB", "0.25")
    assert r.returncode == 0, r.stderr
    now = cli.pids()
    assert {k: v for k, v in now.items() if k != "shard2"} == before
    c = pymongo.MongoClient(r.stdout.strip(), serverSelectionTimeoutMS=10000)
    shards = {s["_id"]: s["host"] for s in c.admin.command("listShards")["shards"]}
    assert shards["shard2"] == "shard2/127.0.0.1:%d" % (cli.port + 4)
    c.close()
    # Fewer shards than the folder holds is refused.
    r = shale("up", "--dbpath", cli.dir, "--shards", 2)
    assert r.returncode == 1 and "holds a cluster of 3 shards" in r.stderr


def test_up_with_replicas(request):
    """`shale up --replicas 2 --shards 1`: the config server and the shard are 2-member
    replica sets on consecutive ports, initiated, the shard added as "shard0/h1,h2"; status
    shows its members' states; the writes reach the secondary; --replicas cannot change on an
    existing folder."""
    c = Cli(request, shards=1)
    c.port = port_range(5)
    c.base_args[c.base_args.index("--port") + 1] = c.port
    try:
        r = c.up("--replicas", 2)
        assert r.returncode == 0, r.stderr
        lay = c.layout()
        assert lay["replicas"] == 2
        assert [(p["name"], p["port"]) for p in lay["processes"]] == [
            ("config", c.port + 1), ("config-1", c.port + 2), ("shard0", c.port + 3),
            ("shard0-1", c.port + 4), ("router", c.port)]
        cfg = pymongo.MongoClient("127.0.0.1", c.port + 2, directConnection=True)
        hello = cfg.admin.command("hello")
        assert hello["setName"] == "csrs" and len(hello["hosts"]) == 2
        cfg.close()
        members = "127.0.0.1:%d,127.0.0.1:%d" % (c.port + 3, c.port + 4)
        client = pymongo.MongoClient(r.stdout.strip(), serverSelectionTimeoutMS=10000)
        assert client.admin.command("listShards")["shards"][0]["host"] == "shard0/" + members
        client.rep.c.insert_one({"_id": 1}, )
        sec = pymongo.MongoClient("127.0.0.1", c.port + 4, directConnection=True,
                                  readPreference="secondaryPreferred")
        wait_until(lambda: sec.rep.c.find_one({"_id": 1}) is not None, 10,
                   "the write on the shard's secondary")
        sec.close()
        client.close()
        # Each set's second member joined by initial sync: STARTUP2 until its cloned data is
        # in a stable checkpoint, then SECONDARY (the config server's set too).
        states = ["'127.0.0.1:%d': '%s'" % (c.port + i, state) for i, state in
                  ((3, "PRIMARY"), (4, "SECONDARY"), (1, "PRIMARY"), (2, "SECONDARY"))]

        def status_shows_the_states():
            st = shale("status", "--host", "127.0.0.1:%d" % c.port)
            assert st.returncode == 0, st.stderr
            return "replica set members" in st.stdout and all(x in st.stdout for x in states)
        wait_until(status_shows_the_states, 30, "shale status to show every member's state")
        r = c.up("--replicas", 3)
        assert r.returncode == 1 and "2-member replica sets" in r.stderr
    finally:
        c.finish()


def test_busy_port_is_a_clear_error(cli):
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    busy.bind(("127.0.0.1", cli.port + 3))  # shard1's port
    busy.listen(1)
    try:
        r = cli.up()
    finally:
        busy.close()
    assert r.returncode == 1
    assert r.stdout == ""
    assert "port %d (for the shard1) is already in use" % (cli.port + 3) in r.stderr
    assert "stopped the processes" not in r.stderr  # nothing was started
    assert not os.path.exists(os.path.join(cli.dir, "cluster.json"))
    for p in range(cli.port, cli.port + 4):
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", p), timeout=1).close()
    # The folder is not tied to the ports that failed: other ports work.
    cli.port = port_range(4)
    r = shale("up", "--dbpath", cli.dir, "--port", cli.port, "--wiredTigerCacheSizeGB", "0.25")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "mongodb://127.0.0.1:%d/" % cli.port


def test_process_failing_at_start_is_reported_and_cleaned_up(cli):
    # An unknown --setParameter makes every process exit at once with code 2.
    r = cli.up("--setParameter", "noSuchParameter=1")
    assert r.returncode == 1
    assert "exited with code 2" in r.stderr
    assert "Unknown --setParameter 'noSuchParameter'" in r.stderr  # the log's last lines
    assert "stopped the processes it had started" in r.stderr
    assert cli.pids() == {}
    for p in range(cli.port, cli.port + 4):
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", p), timeout=1).close()


def test_bad_usage(cli):
    r = shale("up", "--shards", "0", "--dbpath", cli.dir)
    assert r.returncode == 2 and "--shards expects a number from 1 to 64" in r.stderr
    r = shale("up", "--bogus", "--dbpath", cli.dir)
    assert r.returncode == 2 and "unrecognised option '--bogus'" in r.stderr
    empty = os.path.join(cli.dir, "empty")
    r = shale("down", "--dbpath", empty)
    assert r.returncode == 1 and "no cluster in" in r.stderr
    r = shale("status", "--dbpath", empty)
    assert r.returncode == 1 and "no cluster in" in r.stderr
    r = shale("status", "--host", "127.0.0.1:%d" % cli.port)
    assert r.returncode == 1 and "127.0.0.1:%d" % cli.port in r.stderr


def test_status_prints_sharded_collections(shale_process):
    """The report itself, from config.* documents written by hand on a plain node (the
    status reads config.* through whatever it is pointed at)."""
    n = shale_process(["node"], name="cfgdocs")
    c = n.client()
    cfg = c.config
    uuid = __import__("uuid").UUID("12345678-1234-5678-1234-567812345678")
    from bson.binary import Binary, UUID_SUBTYPE
    from bson.max_key import MaxKey
    from bson.min_key import MinKey
    from bson.objectid import ObjectId
    from bson.timestamp import Timestamp
    buuid = Binary(uuid.bytes, UUID_SUBTYPE)
    cfg.version.insert_one({"_id": 1, "clusterId": ObjectId("0123456789abcdef01234567")})
    cfg.shards.insert_many([{"_id": "shard0", "host": "shard0/127.0.0.1:1", "state": 1},
                            {"_id": "shard1", "host": "shard1/127.0.0.1:2", "state": 1,
                             "tags": ["EU"]}])
    cfg.databases.insert_one({"_id": "app", "primary": "shard1",
                              "version": {"uuid": buuid, "lastMod": 1}})
    cfg.collections.insert_many([
        {"_id": "app.users", "uuid": buuid, "key": {"uid": 1}, "unique": True,
         "lastmodEpoch": ObjectId(), "timestamp": Timestamp(5, 1)},
        {"_id": "app.gone", "dropped": True, "key": {"x": 1}},
    ])
    cfg.chunks.insert_many([
        {"uuid": buuid, "min": {"uid": MinKey()}, "max": {"uid": 100}, "shard": "shard0",
         "lastmod": Timestamp(1, 0)},
        {"uuid": buuid, "min": {"uid": 100}, "max": {"uid": MaxKey()}, "shard": "shard1",
         "lastmod": Timestamp(1, 1)},
        {"uuid": buuid, "min": {"uid": 50}, "max": {"uid": 100}, "shard": "shard0",
         "lastmod": Timestamp(1, 2)},
    ])
    # Zone ranges (config.tags), listed per collection as sh.status() does.
    cfg.tags.insert_many([
        {"_id": ObjectId(), "ns": "app.users", "min": {"uid": 100}, "max": {"uid": MaxKey()},
         "tag": "EU"},
        {"_id": ObjectId(), "ns": "app.other", "min": {"uid": 0}, "max": {"uid": 1}, "tag": "X"},
    ])
    r = shale("status", "--host", n.host)
    assert r.returncode == 0, r.stderr
    # mongosh's layout breaks a document over lines when it is long; compare the text
    # with runs of white space folded into one.
    out = " ".join(r.stdout.split())
    assert r.stdout.startswith("shardingVersion\n")
    assert "shardingVersion { _id: 1, clusterId: ObjectId('0123456789abcdef01234567') }" in out
    assert "{ _id: 'shard0', host: 'shard0/127.0.0.1:1', state: 1 }" in out
    assert "database: { _id: 'config', primary: 'config', partitioned: true }" in out
    assert "_id: 'app'" in out and "primary: 'shard1'" in out
    assert "'app.users': {" in out
    assert "app.gone" not in out  # dropped
    assert "shardKey: { uid: 1 }" in out
    assert "unique: true" in out
    assert "chunkMetadata: [ { shard: 'shard0', nChunks: 2 }, { shard: 'shard1', nChunks: 1 } ]" \
        in out
    # Chunks in shard-key order, each with its shard and version.
    i0 = out.index("min: { uid: MinKey() }, max: { uid: 100 }")
    i1 = out.index("min: { uid: 50 }")
    i2 = out.index("min: { uid: 100 }, max: { uid: MaxKey() }")
    assert i0 < i1 < i2
    assert "'on shard': 'shard1'" in out
    assert "'last modified': Timestamp({ t: 1, i: 1 })" in out
    # The shard's zones, and the collection's one range (not the other namespace's).
    assert "{ _id: 'shard1', host: 'shard1/127.0.0.1:2', state: 1, tags: [ 'EU' ] }" in out
    assert "tags: [ { tag: 'EU', min: { uid: 100 }, max: { uid: MaxKey() } } ]" in out
    assert "tag: 'X'" not in out

    # 20 chunks or more: counted, not listed (unless --verbose).
    cfg.chunks.insert_many([
        {"uuid": buuid, "min": {"uid": 1000 + i}, "max": {"uid": 1001 + i}, "shard": "shard1",
         "lastmod": Timestamp(2, i)} for i in range(20)])
    r = shale("status", "--host", n.host)
    assert r.returncode == 0, r.stderr
    assert "too many chunks to print, use verbose if you want to force print" in r.stdout
    assert "{ shard: 'shard1', nChunks: 21 }" in " ".join(r.stdout.split())
    r = shale("status", "--host", n.host, "--verbose")
    assert "too many chunks" not in r.stdout and "min: { uid: 1019 }" in r.stdout
    c.close()


def test_make_run_script(cli):
    """scripts/run.sh (what `make run` calls) with PORT/SHARDS/DBPATH: the cluster is up,
    the connection string and the stop command are printed, the script returns."""
    run_sh = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                          "run.sh")
    env = dict(os.environ, PORT=str(cli.port), SHARDS="1", DBPATH=cli.dir)
    r = subprocess.run(["bash", run_sh, SHALE_BIN], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=env, timeout=120, universal_newlines=True)
    assert r.returncode == 0, r.stderr
    uri = "mongodb://127.0.0.1:%d/" % cli.port
    assert "Shale is running: " + uri in r.stdout
    assert "down --dbpath " + cli.dir in r.stdout
    c = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)
    assert [s["_id"] for s in c.admin.command("listShards")["shards"]] == ["shard0"]
    c.close()
    assert sorted(cli.pids()) == ["config", "router", "shard0"]
