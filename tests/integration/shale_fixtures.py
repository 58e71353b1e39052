"""Fixtures that start real `shale` processes on free loopback ports in temporary
folders, wait until they answer, and stop them by pid. Modelled on MongoDB's
ShardingTest/ReplSetTest: tests talk to them with pymongo as any user would."""

import base64
import contextlib
import json
import os
import queue
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pymongo
import pytest
from bson.binary import STANDARD
from bson.codec_options import CodecOptions

SHALE_BIN = os.environ.get("SHALE_BIN", os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "src", "main", "shale"))
LOG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "logs")


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(cond, timeout=30.0, what="condition"):
    """Poll cond() until it returns a truthy value; raise after timeout seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError("timed out waiting for " + what)
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


class ShaleProcess:
    """One `shale` process (node or router). Start with start(); stop() sends
    SIGTERM and waits; kill() sends SIGKILL (a crash)."""

    def __init__(self, args, dbpath=None, port=None, name="node", test_commands=True,
                 nofile=None):
        self.port = port or free_port()
        # Test-only commands (configureFailPoint, ...) need enableTestCommands=1, which
        # is how every test starts a process unless it asks for a production one.
        self.test_commands = test_commands
        self.nofile = nofile  # RLIMIT_NOFILE for the process, when given
        self.args = list(args)
        self.name = name
        self.own_dir = dbpath is None
        self.dbpath = dbpath or tempfile.mkdtemp(prefix="shale-%s-" % name)
        if not os.path.isdir(self.dbpath) and not (args and args[0] == "router"):
            os.makedirs(self.dbpath)
        self.logpath = os.path.join(self.dbpath, "..", os.path.basename(self.dbpath) + ".log")
        self.logpath = os.path.abspath(self.logpath)
        self.proc = None
        self.bad_exit = False  # set when a stop went wrong (SHUTDOWN_FAILURES)
        # pymongo options every client of this process needs (tls=True... under requireTLS)
        self.client_opts = {}

    @property
    def host(self):
        return "127.0.0.1:%d" % self.port

    def uri(self, **opts):
        q = "&".join("%s=%s" % kv for kv in opts.items())
        return "mongodb://%s/%s" % (self.host, ("?" + q) if q else "")

    def start(self, extra=(), wait=True):
        cmd = [SHALE_BIN] + self.args + ["--port", str(self.port)]
        if not (self.args and self.args[0] == "router"):
            cmd += ["--dbpath", self.dbpath]  # a router keeps no data
        if self.test_commands:
            cmd += ["--setParameter", "enableTestCommands=1"]
        if self.args and self.args[0] == "node":
            # Many nodes share one small machine in the tests.
            cmd += ["--wiredTigerCacheSizeGB", "0.25"]
        if (self.args and self.args[0] == "router" and
                not any("mongosShutdownTimeoutMillisForSignaledShutdown" in str(a)
                        for a in extra)):
            # A router's quiesce mode lasts 15 s by default; tests that stop routers do not
            # wait for it unless they ask (MongoDB's own tests use 100 ms too).
            cmd += ["--setParameter", "mongosShutdownTimeoutMillisForSignaledShutdown=100"]
        cmd += list(extra)
        self.cmdline = cmd
        self.log = open(self.logpath, "ab")
        preexec = None
        if self.nofile is not None:
            def preexec():
                resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     preexec_fn=preexec)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=120.0):
        """Wait until the process answers ping. A restart after kill -9 replays the oplog
        written since the last checkpoint (up to syncdelay, 60 s, of writes): on a loaded
        2-core machine that alone took 38 s once, hence the long deadline."""
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %s; log: %s" % (self.name, self.proc.returncode,
                                                                   self.read_log()[-2000:]))
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    pass
            except OSError:
                return False
            try:
                c = pymongo.MongoClient(self.host, serverSelectionTimeoutMS=500,
                                        connectTimeoutMS=500, **self.client_opts)
                c.admin.command("ping")
                c.close()
                return True
            except pymongo.errors.PyMongoError:
                return False
        wait_until(ready, timeout, "%s on port %d" % (self.name, self.port))

    def client(self, **kw):
        kw.setdefault("serverSelectionTimeoutMS", 10000)
        for k, v in self.client_opts.items():
            kw.setdefault(k, v)
        return pymongo.MongoClient(self.host, **kw)

    def read_log(self):
        try:
            with open(self.logpath, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, timeout=30):
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self):
        """SIGKILL: a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def cleanup(self, keep_log_as=None):
        """Stop the process the way an operator does (SIGTERM, a bounded wait for a clean
        exit, SIGKILL after SHUTDOWN_TIMEOUT; a hang or crash is recorded) -- a test that wanted a
        crash has already called kill() -- so a sanitizer build runs its exit-time leak
        check; then collect any sanitizer report from the log and remove the folder."""
        stop_all([self])
        if getattr(self, "log", None):
            self.log.close()
        report = sanitizer_report(self.read_log())
        if report:
            # A sanitizer build (make asan) found a bug in this process: keep its log and
            # let the session fail (conftest.py), whatever the test itself saw.
            SANITIZER_REPORTS.append("%s (%s): %s" % (self.name, self.logpath, report))
            keep_log_as = keep_log_as or "sanitizer-%s-%d" % (self.name, self.port)
        if self.bad_exit:
            keep_log_as = keep_log_as or "shutdown-%s-%d" % (self.name, self.port)
        if keep_log_as:
            os.makedirs(LOG_DIR, exist_ok=True)
            try:
                shutil.copy(self.logpath, os.path.join(LOG_DIR, keep_log_as + ".log"))
            except OSError:
                pass
        if self.own_dir:
            shutil.rmtree(self.dbpath, ignore_errors=True)
        try:
            os.unlink(self.logpath)
        except OSError:
            pass


# What sanitizer builds print when they find a bug (ASan, LSan, UBSan, TSan).
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error: ",
                     "WARNING: ThreadSanitizer")
SANITIZER_REPORTS = []


def sanitizer_report(log):
    """The first line of a sanitizer report in a process log, or None."""
    for line in log.splitlines():
        if any(m in line for m in SANITIZER_MARKERS):
            return line.strip()
    return None


# Seconds a process gets to exit cleanly after SIGTERM at teardown. A data node waits at
# most shutdownTimeoutMillisForSignaledShutdown (15 s) for running operations and 10 s for
# its connections to leave, so a process still alive after this is stuck in its shutdown.
SHUTDOWN_TIMEOUT = 30
# Processes that hung or failed in their shutdown ("name (log): what").
SHUTDOWN_FAILURES = []


def _wait_or_kill(p, timeout, check_code=False):
    """Wait up to 'timeout' seconds for p's process to exit after the SIGTERM it was sent;
    past that, record a shutdown hang, keep its log and SIGKILL it. With check_code, an exit
    code other than 0 (a crash in the shutdown) is recorded too. Whether it exited by
    itself."""
    try:
        p.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        SHUTDOWN_FAILURES.append("%s (%s): still running %d s after SIGTERM" %
                                 (p.name, p.logpath, timeout))
        p.bad_exit = True
        p.proc.kill()
        p.proc.wait()
        return False
    if check_code and p.proc.returncode != 0:
        SHUTDOWN_FAILURES.append("%s (%s): exited with code %d after SIGTERM" %
                                 (p.name, p.logpath, p.proc.returncode))
        p.bad_exit = True
    return True


def stop_all(procs, timeout=SHUTDOWN_TIMEOUT):
    """SIGTERM every process at once, then wait for each (SIGKILL after timeout; that, or an
    exit code other than 0, is recorded as a failed shutdown): data nodes take a checkpoint
    on the way out, so stopping them together saves time."""
    live = [p for p in procs if p.proc is not None and p.proc.poll() is None]
    for p in live:
        p.proc.send_signal(signal.SIGTERM)
    for p in live:
        _wait_or_kill(p, timeout, check_code=True)


# Processes a test's teardown stopped but did not wait for: (process, keep_log_as).
_reap_queue = queue.Queue()
_reaper = None


def _reap_forever():
    while True:
        p, keep_log_as = _reap_queue.get()
        try:
            if p.proc is not None and p.proc.poll() is None:
                _wait_or_kill(p, SHUTDOWN_TIMEOUT, check_code=True)
            p.cleanup(keep_log_as=keep_log_as)
        finally:
            _reap_queue.task_done()


def cleanup_later(procs, keep_log_as):
    """A test's teardown: SIGTERM every process now and leave waiting for their exits, the
    sanitizer check of their logs and the removal of their folders (cleanup()) to a reaper
    thread, so the next test starts while these take their shutdown checkpoint (a data
    node's clean exit would otherwise add tens of milliseconds to every test).
    keep_log_as(i, p) names the kept log of procs[i] or returns None. wait_reaped()
    waits for all of them (the session's end does)."""
    global _reaper
    for p in procs:
        if p.proc is not None and p.proc.poll() is None:
            p.proc.send_signal(signal.SIGTERM)
    if _reaper is None:
        _reaper = threading.Thread(target=_reap_forever, name="shale-reaper", daemon=True)
        _reaper.start()
    for i, p in enumerate(procs):
        _reap_queue.put((p, keep_log_as(i, p)))


def wait_reaped():
    """Wait until every process given to cleanup_later() exited and was cleaned up."""
    _reap_queue.join()


class ShaleCluster:
    """A sharded cluster like MongoDB's ShardingTest: a config server (replica set
    "csrs"), N shards (replica sets "shard0", ...) and one router, each a ShaleProcess
    on a free port in one temporary folder (logs beside the data folders). start()
    waits until each answers and adds the shards through the router with addShard
    (names "shard0", ...). add_router() starts another router on the same config
    server. stop() / cleanup() stop every process by pid."""

    def __init__(self, shards=2, test_commands=True, base=None, shard_extra=(), config_extra=(),
                 router_extra=(), key_file=False, admin=("admin", "admin-pw"), client_opts=None):
        self.own_base = base is None
        self.shard_extra = list(shard_extra)  # more arguments for every shard
        self.config_extra = list(config_extra)  # more arguments for the config server
        self.router_extra = list(router_extra)  # more arguments for every router
        # SHALE_ROUTER_ARGS: more for every router of every test, e.g. "--setParameter
        # serviceExecutor=shared" to run a test file against routers on the shared executor.
        self.router_extra += os.environ.get("SHALE_ROUTER_ARGS", "").split()
        self.base = base or tempfile.mkdtemp(prefix="shale-cluster-")
        # key_file: every process runs with --keyFile (access control on, members
        # authenticate to each other); the first router creates 'admin' (root) through the
        # localhost exception and router_client() authenticates as it.
        self.auth = None
        if key_file:
            self.key_file = os.path.join(self.base, "keyfile")
            with open(self.key_file, "w") as f:
                f.write(base64.b64encode(os.urandom(48)).decode() + "\n")
            os.chmod(self.key_file, 0o600)
            extra = ["--keyFile", self.key_file]
            self.shard_extra += extra
            self.config_extra += extra
            self.router_extra += extra
            self.auth = admin
        self.test_commands = test_commands
        self.client_opts = dict(client_opts or {})  # pymongo options for every process
        self.config = ShaleProcess(["node", "--configsvr", "--replSet", "csrs"],
                                   dbpath=os.path.join(self.base, "config"), name="config",
                                   test_commands=test_commands)
        self.shards = [
            ShaleProcess(["node", "--shardsvr", "--replSet", "shard%d" % i],
                         dbpath=os.path.join(self.base, "shard%d" % i), name="shard%d" % i,
                         test_commands=test_commands)
            for i in range(shards)]
        self.routers = []
        for p in [self.config] + self.shards:
            p.client_opts = self.client_opts

    @property
    def configdb(self):
        """The --configdb string routers are started with."""
        return "csrs/" + self.config.host

    @property
    def router(self):
        return self.routers[0]

    @property
    def processes(self):
        return [self.config] + self.shards + self.routers

    def shard_name(self, i):
        return "shard%d" % i

    def shard_conn_string(self, i):
        """config.shards.host of shard i: "<setName>/host:port"."""
        return "shard%d/%s" % (i, self.shards[i].host)

    def start(self):
        # Data nodes start together; the router needs the config server.
        for p in [self.config] + self.shards:
            p.start(extra=self.shard_extra if p in self.shards else self.config_extra, wait=False)
        for p in [self.config] + self.shards:
            p.wait_ready()
        self.add_router()
        if self.auth is not None:
            c = self.routers[0].client()
            try:
                c.admin.command("createUser", self.auth[0], pwd=self.auth[1], roles=["root"])
            except pymongo.errors.OperationFailure as e:
                if e.code not in (13, 51003):  # a restarted cluster has its user already
                    raise
            c.close()
        admin = self.router_client().admin
        listed = {s["_id"] for s in admin.command("listShards")["shards"]}
        for i in range(len(self.shards)):
            if self.shard_name(i) not in listed:
                admin.command("addShard", self.shard_conn_string(i), name=self.shard_name(i))
        return self

    def add_router(self):
        """Start another router on this cluster's config server; returns its ShaleProcess."""
        n = len(self.routers)
        r = ShaleProcess(["router", "--configdb", self.configdb],
                         dbpath=os.path.join(self.base, "router%d" % n), name="router%d" % n,
                         test_commands=self.test_commands)
        self.routers.append(r)
        r.client_opts = self.client_opts
        r.start(extra=self.router_extra)
        return r

    def restart_shard(self, i):
        """Start shard i again (after stop() or kill()) on its port and folder."""
        self.shards[i].start(extra=self.shard_extra)
        return self.shards[i]

    def restart_config(self):
        """Start the config server again (after stop() or kill()) on its port and folder."""
        self.config.start(extra=self.config_extra)
        return self.config

    def router_client(self, i=0, **kw):
        if self.auth is not None and "username" not in kw:
            kw.update(username=self.auth[0], password=self.auth[1])
        return self.routers[i].client(**kw)

    def shard_client(self, i, **kw):
        """A direct connection to shard i (unversioned requests, no orphan filtering)."""
        return self.shards[i].client(**kw)

    def config_client(self, **kw):
        return self.config.client(**kw)

    def uri(self, i=0, **opts):
        return self.routers[i].uri(**opts)

    def stop(self, timeout=SHUTDOWN_TIMEOUT):
        """Stop the routers, then every data node (SIGTERM, waited for, by pid)."""
        stop_all(self.routers, timeout)
        stop_all([self.config] + self.shards, timeout)

    def cleanup(self, keep_logs_prefix=None):
        """Stop (SIGKILL what is left), keep the logs as logs/<prefix>-<name>.log when
        asked, and remove the folder."""
        try:
            self.stop()
        finally:
            for p in self.processes:
                p.cleanup(keep_log_as=("%s-%s" % (keep_logs_prefix, p.name))
                          if keep_logs_prefix else None)
            if self.own_base:
                shutil.rmtree(self.base, ignore_errors=True)


def fail_point(client, name, mode, data=None):
    """configureFailPoint on the process behind 'client'."""
    cmd = {"configureFailPoint": name, "mode": mode}
    if data is not None:
        cmd["data"] = data
    return client.admin.command(cmd)


def hang(client, name, what=None):
    """Switch the fail point 'name' on (alwaysOn) on the process behind 'client'; returns a
    function wait(timeout=30) that waits until the fail point has been reached since (its
    count went up), 'what' naming the wait in its timeout error."""
    entered = fail_point(client, name, "alwaysOn")["count"]

    def wait(timeout=30.0):
        wait_until(lambda: fail_point(client, name, "alwaysOn")["count"] > entered,
                   timeout=timeout, what=what or "the operation to reach %s" % name)
    return wait


class Background:
    """fn() in a thread of its own, started at once (a command that hangs in a fail point
    or dies with the process it talks to). Once fn returned, .done is true and .result
    holds what it returned; .error holds the exception it raised when that is of a type in
    'catch' (another one ends the thread as an uncaught exception would)."""

    def __init__(self, fn, catch=Exception):
        self.done = False
        self.result = None
        self.error = None

        def run():
            try:
                self.result = fn()
                self.done = True
            except catch as e:
                self.error = e
        self.thread = threading.Thread(target=run)
        self.thread.start()

    def join(self, timeout=None):
        self.thread.join(timeout)
        return self

    def is_alive(self):
        return self.thread.is_alive()


def run_to_fail_point(client, name, fn, catch=Exception):
    """Switch the fail point 'name' on (alwaysOn) on the process behind 'client', run fn() in
    the background and wait until it is held there; returns its Background (the caller
    switches the fail point off, or kills the process)."""
    wait = hang(client, name)
    t = Background(fn, catch=catch)
    wait()
    return t


def logged(proc, log_id, **attr):
    """Whether proc's log (one JSON event a line) has an event 'log_id' whose attr holds
    every given field with the given value."""
    for line in proc.read_log().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("id") == log_id and all(e.get("attr", {}).get(k) == v
                                         for k, v in attr.items()):
            return True
    return False


def error_code(fn):
    """The code of the OperationFailure fn() raises (the test fails if it raises none)."""
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        fn()
    return e.value.code


def standard_uuid_db(client, name):
    """Database 'name' of 'client' with UUIDs decoded as standard (subtype 4) UUIDs, as the
    config.* collections and listCollections' info.uuid hold them."""
    return client.get_database(name, codec_options=CodecOptions(uuid_representation=STANDARD))


def config_db(cluster):
    """config on the cluster's config server (standard UUIDs)."""
    return standard_uuid_db(cluster.config_client(), "config")


@contextlib.contextmanager
def module_cluster(request, routers=1, **kw):
    """A started ShaleCluster(**kw) with 'routers' routers, for a fixture of one test module
    (`with module_cluster(request) as c: yield c`); stopped at the end, its logs kept in logs/
    (named after the module) when any test of the module failed, or when it failed to start."""
    failed_before = request.session.testsfailed
    c = ShaleCluster(**kw)
    try:
        c.start()
        for _ in range(routers - 1):
            c.add_router()
    except Exception:
        c.cleanup(keep_logs_prefix="%s-start" % request.module.__name__)
        raise
    try:
        yield c
    finally:
        failed = request.session.testsfailed > failed_before
        c.cleanup(keep_logs_prefix=request.module.__name__ if failed else None)


def shard_on_id(client, db, coll, middle=10):
    """Shard db.coll (through router 'client') on {_id: 1}: _id < middle on shard0 (the
    database's primary), the rest on shard1. Returns the router's database."""
    client.admin.command("enableSharding", db, primaryShard="shard0")
    client.admin.command("shardCollection", "%s.%s" % (db, coll), key={"_id": 1})
    client.admin.command("split", "%s.%s" % (db, coll), middle={"_id": middle})
    client.admin.command("moveChunk", "%s.%s" % (db, coll), find={"_id": middle}, to="shard1")
    return client[db]


FAST_ELECTIONS = {"heartbeatIntervalMillis": 200, "electionTimeoutMillis": 2000}


def start_replica_set(set_name, prefix, members=3, args=()):
    """Start `members` nodes of replica set `set_name` (named prefix0, prefix1, ...; `args`
    added to each one's command line), initiate them with 200 ms heartbeats and a 2 s election
    timeout, and wait for one primary and the others secondaries (members cloning in STARTUP2
    first). Returns the ShaleProcesses; the caller stops them (cleanup_later)."""
    nodes = [ShaleProcess(["node", "--replSet", set_name] + list(args), name="%s%d" % (prefix, i))
             for i in range(members)]
    for n in nodes:
        n.start()
    cfg = {"_id": set_name, "members": [{"_id": i, "host": n.host} for i, n in enumerate(nodes)],
           "settings": dict(FAST_ELECTIONS)}
    c = nodes[0].client(directConnection=True)
    c.admin.command("replSetInitiate", cfg)
    c.close()
    want = ["PRIMARY"] + ["SECONDARY"] * (members - 1)

    def all_up():
        s = nodes[0].client(directConnection=True).admin.command("replSetGetStatus")
        return [m["stateStr"] for m in s["members"]] == want
    wait_until(all_up, 30, "a primary and %d secondaries" % (members - 1))
    return nodes


def set_primary(nodes, timeout=30):
    """The one member of `nodes` (ShaleProcesses of a replica set) that answers hello with
    isWritablePrimary, waiting up to `timeout` s until exactly one does (dead processes are
    skipped)."""
    found = []

    def one_primary():
        found[:] = []
        for n in nodes:
            if n.proc is None or n.proc.poll() is not None:
                continue
            try:
                c = n.client(directConnection=True, serverSelectionTimeoutMS=2000)
                if c.admin.command("hello").get("isWritablePrimary"):
                    found.append(n)
            except pymongo.errors.PyMongoError:
                pass
        return len(found) == 1
    wait_until(one_primary, timeout, "one primary")
    return found[0]


def set_string(name, nodes):
    """The connection string "name/h1,h2,..." of a replica set's ShaleProcesses."""
    return "%s/%s" % (name, ",".join(n.host for n in nodes))


@contextlib.contextmanager
def set_and_single_cluster(request, prefix, keep_as, extra=()):
    """A sharded cluster for failover tests: a config server of one member, a 3-member shard
    set "rs0" with fast elections (heartbeats 200 ms, election timeout 2 s), a one-member
    shard "one" and a router, both shards added. Yields {"cfg", "rs", "one", "router"}; at
    the end every process stops, their logs kept as "<keep_as>-<name>" when a test of the
    session failed. 'extra': arguments for every data node."""
    cfg = ShaleProcess(["node", "--configsvr", "--replSet", "csrs"], name=prefix + "-cfg")
    rs = [ShaleProcess(["node", "--shardsvr", "--replSet", "rs0"],
                       name="%s-rs0-%d" % (prefix, i)) for i in range(3)]
    one = ShaleProcess(["node", "--shardsvr", "--replSet", "one"], name=prefix + "-one")
    procs = [cfg] + rs + [one]
    try:
        for n in procs:
            n.start(extra=extra, wait=False)
        for n in procs:
            n.wait_ready()
        rs[0].client(directConnection=True).admin.command("replSetInitiate", {
            "_id": "rs0",
            "settings": {"heartbeatIntervalMillis": 200, "electionTimeoutMillis": 2000},
            "members": [{"_id": i, "host": n.host} for i, n in enumerate(rs)]})

        def all_up():
            s = rs[0].client(directConnection=True).admin.command("replSetGetStatus")
            return sorted(m["stateStr"] for m in s["members"]) == ["PRIMARY", "SECONDARY",
                                                                     "SECONDARY"]
        wait_until(all_up, 30, "the shard set")
        router = ShaleProcess(["router", "--configdb", "csrs/" + cfg.host],
                              name=prefix + "-router")
        procs.append(router)
        router.start()
        admin = router.client().admin
        admin.command("addShard", set_string("rs0", rs), name="rs0")
        admin.command("addShard", "one/" + one.host, name="one")
        yield {"cfg": cfg, "rs": rs, "one": one, "router": router}
    finally:
        failed = request.node.session.testsfailed > 0
        cleanup_later(procs, lambda i, p: ("%s-%s" % (keep_as, p.name)) if failed else None)
