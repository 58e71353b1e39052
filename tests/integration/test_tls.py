"""TLS (issue 19 item 4): certificates made here with `openssl` (a CA, a server certificate
for localhost/127.0.0.1, client certificates from that CA and from another one). A node under
requireTLS refuses plain clients and clients without a trusted certificate; allowTLS takes
both; pymongo and the Node driver connect with tls=True; a whole cluster (config server, two
shards, router) under requireTLS, with the Unix socket off so its members talk TLS over TCP,
runs a migration."""

import os
import shutil
import subprocess
import tempfile

import pymongo
import pytest
from pymongo.errors import OperationFailure, PyMongoError

from shale_fixtures import ShaleProcess, error_code, module_cluster, wait_until
from test_node_driver import HERE, node_binary

SUBJ_SERVER = "/C=US/O=Shale/OU=servers/CN=localhost"
SUBJ_CLIENT = "/C=US/O=Shale/OU=clients/CN=alice"


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/O=Shale/CN=%s" % name, "-keyout", name + ".key", "-out", name + ".crt", cwd=d)


def make_cert(d, ca, name, subj, san=None):
    """name.pem: the certificate signed by 'ca' followed by its key."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subj, "-keyout", name + ".key",
            "-out", name + ".csr", cwd=d)
    ext = []
    if san:
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write("subjectAltName=%s\n" % san)
        ext = ["-extfile", name + ".ext"]
    openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
            "-CAcreateserial", "-days", "2", "-out", name + ".crt", *ext, cwd=d)
    with open(os.path.join(d, name + ".pem"), "w") as out:
        for part in (name + ".crt", name + ".key"):
            with open(os.path.join(d, part)) as f:
                out.write(f.read())
    return os.path.join(d, name + ".pem")


@pytest.fixture(scope="module")
def certs():
    d = tempfile.mkdtemp(prefix="shale-tls-")
    make_ca(d, "ca")
    make_ca(d, "otherca")
    c = {
        "dir": d,
        "ca": os.path.join(d, "ca.crt"),
        "server": make_cert(d, "ca", "server", SUBJ_SERVER, "DNS:localhost,IP:127.0.0.1"),
        "client": make_cert(d, "ca", "client", SUBJ_CLIENT),
        "stranger": make_cert(d, "otherca", "stranger", "/O=Elsewhere/CN=mallory"),
        "bob": make_cert(d, "ca", "bob", "/C=US/O=Shale/OU=clients/CN=bob"),
    }
    yield c
    shutil.rmtree(d, ignore_errors=True)


def tls_opts(certs, cert="client"):
    o = {"tls": True, "tlsCAFile": certs["ca"]}
    if cert:
        o["tlsCertificateKeyFile"] = certs[cert]
    return o


def server_args(certs, mode, *more):
    return ["--tlsMode", mode, "--tlsCertificateKeyFile", certs["server"], "--tlsCAFile",
            certs["ca"]] + list(more)


@pytest.fixture(scope="module")
def require_node(certs):
    p = ShaleProcess(["node"], name="tlsnode")
    p.client_opts = tls_opts(certs)
    p.start(extra=server_args(certs, "requireTLS"))
    yield p
    p.cleanup()


def refused(client):
    try:
        client.admin.command("ping")
        return False
    except PyMongoError:
        return True
    finally:
        client.close()


def fast(**kw):
    return dict(serverSelectionTimeoutMS=1500, connectTimeoutMS=1500, **kw)


def test_require_tls_serves_tls_clients(require_node):
    c = require_node.client()
    c.t.c.insert_one({"_id": 1, "x": "over tls"})
    assert c.t.c.find_one({"_id": 1})["x"] == "over tls"
    c.close()
    assert '"ssl":"on"' in require_node.read_log()


def test_require_tls_refuses_plain_clients(require_node):
    assert refused(pymongo.MongoClient(require_node.host, **fast()))
    wait_until(lambda: "The server is configured to only allow SSL connections" in
               require_node.read_log(), 10, "the refusal logged")
    assert '"id":22988' in require_node.read_log()


def test_client_certificate_required_with_a_ca(require_node, certs):
    # No certificate, or one from a CA the server does not trust: the handshake fails.
    assert refused(pymongo.MongoClient(require_node.host, **fast(**tls_opts(certs, None))))
    assert refused(pymongo.MongoClient(require_node.host, **fast(**tls_opts(certs, "stranger"))))


def test_client_checks_the_server_certificate(require_node, certs):
    # The server's certificate is not from the CA this client trusts.
    other = {"tls": True, "tlsCAFile": os.path.join(certs["dir"], "otherca.crt"),
             "tlsCertificateKeyFile": certs["client"]}
    assert refused(pymongo.MongoClient(require_node.host, **fast(**other)))


def test_node_driver_over_tls(require_node, certs):
    uri = require_node.uri(tls="true", tlsCAFile=certs["ca"],
                           tlsCertificateKeyFile=certs["client"])
    out = subprocess.run([node_binary(), os.path.join(HERE, "smoke.js"), uri],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert '"ping":{"ok":1' in out.stdout


def test_allow_tls_takes_both(certs):
    p = ShaleProcess(["node"], name="tlsallow")
    try:
        p.start(extra=server_args(certs, "allowTLS", "--tlsAllowConnectionsWithoutCertificates"))
        plain = p.client()
        assert plain.admin.command("ping")["ok"] == 1
        tls = p.client(**tls_opts(certs, None))  # no client certificate: allowed here
        assert tls.admin.command("ping")["ok"] == 1
        plain.close()
        tls.close()
    finally:
        p.cleanup()


def test_bad_tls_options_refuse_to_start(certs):
    for args, msg in ((["--tlsMode", "requireTLS"], "need tlsCertificateKeyFile"),
                      (["--tlsMode", "sometimes", "--tlsCertificateKeyFile", certs["server"]],
                       "Invalid tlsMode"),
                      (["--tlsMode", "requireTLS", "--tlsCertificateKeyFile",
                        os.path.join(certs["dir"], "missing.pem")], "Can not set up PEM key file")):
        p = ShaleProcess(["node"], name="tlsbad")
        try:
            p.start(extra=args, wait=False)
            assert p.proc.wait(30) != 0
            assert msg in p.read_log()
        finally:
            p.cleanup()


@pytest.fixture(scope="module")
def tls_cluster(request, certs):
    extra = server_args(certs, "requireTLS", "--nounixsocket")
    with module_cluster(request, shards=2, shard_extra=extra, config_extra=extra,
                        router_extra=extra, client_opts=tls_opts(certs)) as c:
        yield c


def test_cluster_under_require_tls_migrates(tls_cluster):
    r = tls_cluster.router_client()
    r.admin.command("enableSharding", "tdb", primaryShard="shard0")
    r.admin.command("shardCollection", "tdb.c", key={"x": 1})
    r.admin.command("split", "tdb.c", middle={"x": 50})
    r.tdb.c.insert_many([{"_id": i, "x": i} for i in range(100)])
    r.admin.command("moveChunk", "tdb.c", find={"x": 70}, to="shard1")
    assert r.tdb.c.count_documents({}) == 100
    assert tls_cluster.shard_client(1).tdb.c.count_documents({}) == 50
    r.close()
    # Members talked TLS to each other: no plain connection was refused anywhere.
    for p in tls_cluster.processes:
        assert "only allow SSL connections" not in p.read_log(), p.name


def test_status_over_tls(tls_cluster, certs):
    from test_cli_cluster import shale
    host = tls_cluster.router.host
    s = shale("status", "--host", host, "--tls", "--tlsCAFile", certs["ca"],
              "--tlsCertificateKeyFile", certs["client"])
    assert s.returncode == 0, s.stderr
    assert "shard1/" + tls_cluster.shards[1].host in s.stdout
    # Plain, or TLS without the client certificate the router requires: refused.
    assert shale("status", "--host", host).returncode != 0
    s = shale("status", "--host", host, "--tls", "--tlsCAFile", certs["ca"])
    assert s.returncode != 0


ALICE = "CN=alice,OU=clients,O=Shale,C=US"  # SUBJ_CLIENT in RFC 2253 form


@pytest.fixture(scope="module")
def auth_node(certs):
    p = ShaleProcess(["node"], name="x509node")
    p.client_opts = tls_opts(certs)
    p.start(extra=server_args(certs, "requireTLS", "--auth"))
    c = p.client()
    c.admin.command("createUser", "admin", pwd="pw", roles=["root"])
    c.close()
    admin = p.client(username="admin", password="pw")
    admin["$external"].command("createUser", ALICE, roles=[{"role": "readWrite", "db": "t"}])
    admin.close()
    yield p
    p.cleanup()


def test_x509_login(auth_node, certs):
    c = auth_node.client(authMechanism="MONGODB-X509")
    c.t.c.insert_one({"_id": 1})
    assert c.t.c.count_documents({}) == 1
    info = c.admin.command("connectionStatus")["authInfo"]
    assert info["authenticatedUsers"] == [{"user": ALICE, "db": "$external"}]
    assert error_code(lambda: c.other.c.find_one()) == 13
    c.close()
    assert "MONGODB-X509" in auth_node.read_log()


def test_x509_refusals(auth_node, certs):
    # A trusted certificate whose subject is no user.
    bob = auth_node.client(authMechanism="MONGODB-X509", **tls_opts(certs, "bob"))
    assert error_code(lambda: bob.t.c.find_one()) == 18
    bob.close()
    c = auth_node.client()
    # Another user's name than the certificate's, the wrong database, a SCRAM mechanism.
    assert error_code(lambda: c["$external"].command(
        "authenticate", mechanism="MONGODB-X509", user="CN=bob,OU=clients,O=Shale,C=US")) == 18
    assert error_code(lambda: c.admin.command("authenticate", mechanism="MONGODB-X509")) == 17
    assert error_code(lambda: c["$external"].command("authenticate",
                                                     mechanism="SCRAM-SHA-1")) == 334
    r = c["$external"].command("authenticate", mechanism="MONGODB-X509", user=ALICE)
    assert r["user"] == ALICE and r["dbname"] == "$external"
    assert c.t.c.count_documents({}) >= 0
    c.close()


def test_cluster_members_authenticate_with_certificates(request, certs):
    """--clusterAuthMode x509: members prove themselves with their certificates (same O/OU as
    this process's own), which makes them __system; clients still need users."""
    extra = server_args(certs, "requireTLS", "--nounixsocket", "--clusterAuthMode", "x509")
    with module_cluster(request, shards=1, key_file=True, shard_extra=extra, config_extra=extra,
                        router_extra=extra, client_opts=tls_opts(certs)) as c:
        r = c.router_client()
        r.admin.command("enableSharding", "xdb")
        r.xdb.c.insert_many([{"_id": i} for i in range(10)])
        assert r.xdb.c.count_documents({}) == 10
        plain = c.routers[0].client()  # TLS with the client certificate, no user
        assert error_code(lambda: plain.xdb.c.find_one()) == 13
        plain.close()
        r.close()
        assert '"mechanism":"MONGODB-X509","user":"__system"' in c.shards[0].read_log()


def test_node_driver_x509_login(auth_node, certs):
    uri = auth_node.uri(tls="true", tlsCAFile=certs["ca"], tlsCertificateKeyFile=certs["client"],
                        authMechanism="MONGODB-X509", authSource="%24external")
    out = subprocess.run([node_binary(), os.path.join(HERE, "smoke.js"), uri],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert '"ping":{"ok":1' in out.stdout
