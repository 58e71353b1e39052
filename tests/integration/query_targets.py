"""The three places a query-language table test runs (issue 20): a plain node, and a
2-shard router over a sharded and over an unsharded collection. `target_fixtures(db, name)`
returns the module's `plain_node`, `routed` and `target` fixtures (bind them at module level
under those names); `target` gives (kind, client) with kind in TARGETS, and `routed` has
enabled sharding on database 'db' with shard0 its primary."""

import pytest

from shale_fixtures import ShaleProcess, stop_all

TARGETS = ["node", "sharded", "unsharded"]


def target_fixtures(db, node_name):
    @pytest.fixture(scope="module", name="plain_node")
    def plain_node():
        p = ShaleProcess(["node"], name=node_name)
        p.start()
        yield p
        stop_all([p])
        p.cleanup()

    @pytest.fixture(scope="module", name="routed")
    def routed(cluster):
        r = cluster.router_client()
        r.admin.command("enableSharding", db, primaryShard="shard0")
        return cluster

    @pytest.fixture(params=TARGETS, name="target")
    def target(request, plain_node, routed):
        kind = request.param
        client = plain_node.client() if kind == "node" else routed.router_client()
        return kind, client

    return plain_node, routed, target
