"""serverStatus metrics.commands (issue 17 item 6) on every process of a 1-shard cluster:
{total, failed} per command, "<UNKNOWN>" for names no command has, internal commands
included (the router's _shardsvr* requests counted on the shard, the shard's _configsvr*
requests on the config server)."""
import pytest
from pymongo.errors import OperationFailure

from shale_fixtures import module_cluster


@pytest.fixture(scope="module")
def cl(request):
    with module_cluster(request, shards=1) as c:
        yield c


def commands(client):
    return client.admin.command("serverStatus")["metrics"]["commands"]


def test_router_counts_total_failed_and_unknown(cl):
    r = cl.router_client()
    before = commands(r)
    for _ in range(3):
        r.admin.command("ping")
    with pytest.raises(OperationFailure):
        r.test.command({"find": 5})
    with pytest.raises(OperationFailure):
        r.test.command("noSuchCommandAnywhere")
    after = commands(r)
    assert after["ping"]["total"] - before["ping"]["total"] == 3
    assert after["ping"]["failed"] == before["ping"]["failed"]
    assert after["find"]["total"] - before["find"]["total"] == 1
    assert after["find"]["failed"] - before["find"]["failed"] == 1
    assert after["<UNKNOWN>"] - before["<UNKNOWN>"] == 1
    # every registered command is listed, by name, with both counters
    names = [k for k in after if k != "<UNKNOWN>"]
    assert names == sorted(names) and "serverStatus" in names
    assert all(set(after[k]) == {"failed", "total"} for k in names)


def test_internal_commands_are_counted_on_shards_and_config(cl):
    r = cl.router_client()
    shard, cfg = cl.shard_client(0), cl.config_client()
    r.admin.command("enableSharding", "cm", primaryShard=cl.shard_name(0))
    r.admin.command("shardCollection", "cm.c", key={"x": 1})
    s_before, c_before = commands(shard), commands(cfg)
    r.cm.command("drop", "c")
    s_after, c_after = commands(shard), commands(cfg)

    def delta(before, after, name):
        return after[name]["total"] - before[name]["total"]
    assert delta(s_before, s_after, "_shardsvrDropCollection") == 1
    assert delta(s_before, s_after, "_shardsvrDropCollectionParticipant") == 1
    assert delta(s_before, s_after, "_shardsvrParticipantBlock") == 2  # block, unblock
    assert delta(c_before, c_after, "_configsvrCommitDropCollection") == 1
    assert delta(c_before, c_after, "_configsvrSetAllowMigrations") == 1
    assert s_after["_shardsvrDropCollection"]["failed"] == \
        s_before["_shardsvrDropCollection"]["failed"]
