/*
 * repl_test.c -- the pure parts of replication: configuration validation (MongoDB's rules
 * and error codes), the majority commit point and w: <n> counting.
 */
#include "base/unit_test.h"
#include "repl/repl_private.h"

static int
parse_code(const char *json)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *doc = shl_test_bson(json);
    repl_config_t cfg;
    int ret = repl_config_parse(doc, true, &cfg, &st);

    repl_config_cleanup(&cfg);
    bson_destroy(&cfg.doc);
    bson_destroy(doc);
    return ret;
}

SHL_TEST(repl_config_valid)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *doc = shl_test_bson(
        "{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1'}, {'_id': 1, 'host': 'b:2', "
        "'priority': 0, 'hidden': true}, {'_id': 2, 'host': 'c', 'arbiterOnly': true}], "
        "'settings': {'heartbeatIntervalMillis': 500}}");
    repl_config_t cfg;

    ASSERT_INT_EQ(repl_config_parse(doc, true, &cfg, &st), 0);
    ASSERT_STR_EQ(cfg.set_name, "rs");
    ASSERT_INT_EQ(cfg.version, 1);
    ASSERT_INT_EQ(cfg.n, 3);
    ASSERT_STR_EQ(cfg.members[2].host, "c:27017");
    ASSERT(cfg.members[2].arbiter);
    ASSERT(cfg.members[2].priority == 0);
    ASSERT(cfg.members[1].hidden);
    ASSERT_INT_EQ(cfg.heartbeat_interval_ms, 500);
    ASSERT_INT_EQ(cfg.election_timeout_ms, 10000);
    ASSERT_INT_EQ(repl_config_find(&cfg, "b:2"), 1);
    ASSERT_INT_EQ(repl_config_find(&cfg, "d:2"), -1);
    ASSERT_INT_EQ(repl_config_voters(&cfg), 3);
    ASSERT_INT_EQ(repl_config_majority(&cfg), 2);
    repl_config_cleanup(&cfg);
    bson_destroy(&cfg.doc);
    bson_destroy(doc);
}

SHL_TEST(repl_config_errors)
{
    /* MongoDB's InvalidReplicaSetConfig (93) for the member rules */
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1'}, {'_id': 0, "
                             "'host': 'b:1'}]}"),
                  93);
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1'}, {'_id': 1, "
                             "'host': 'a:1'}]}"),
                  93);
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1'}, {'_id': 1, "
                             "'host': 'b:1', 'hidden': true}]}"),
                  93);
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1'}, {'_id': 1, "
                             "'host': 'b:1', 'secondaryDelaySecs': 10}]}"),
                  93);
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1'}, {'_id': 1, "
                             "'host': 'b:1', 'arbiterOnly': true, 'votes': 0}]}"),
                  93);
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1'}, {'_id': 1, "
                             "'host': 'b:1', 'arbiterOnly': true, 'priority': 1}]}"),
                  93);
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1'}, {'_id': 1, "
                             "'host': 'b:1', 'votes': 0}]}"),
                  93);
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1', 'priority': "
                             "0}]}"),
                  93);
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': []}"), 93);
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1'}], "
                             "'protocolVersion': 0}"),
                  93);
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1', 'votes': 2}]}"),
                  SHL_CODE_BAD_VALUE);
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1', 'priority': "
                             "1001}]}"),
                  SHL_CODE_BAD_VALUE);
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1', 'bogus': 1}]}"),
                  SHL_CODE_BAD_VALUE);
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': [{'host': 'a:1'}]}"), SHL_CODE_NO_SUCH_KEY);
    /* eight voters */
    ASSERT_INT_EQ(parse_code("{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1'}, {'_id': 1, "
                             "'host': 'a:2'}, {'_id': 2, 'host': 'a:3'}, {'_id': 3, 'host': "
                             "'a:4'}, {'_id': 4, 'host': 'a:5'}, {'_id': 5, 'host': 'a:6'}, "
                             "{'_id': 6, 'host': 'a:7'}, {'_id': 7, 'host': 'a:8'}]}"),
                  93);
}

SHL_TEST(repl_optimes_compare_term_first)
{
    /* A newer term wins whatever the timestamps; within a term the timestamp decides. */
    ASSERT_INT_EQ(repl_optime_cmp(2, 40, 1, 100), 1);
    ASSERT_INT_EQ(repl_optime_cmp(1, 100, 2, 40), -1);
    ASSERT_INT_EQ(repl_optime_cmp(2, 40, 2, 50), -1);
    ASSERT_INT_EQ(repl_optime_cmp(2, 50, 2, 50), 0);
    ASSERT_INT_EQ(repl_optime_cmp(-1, 0, 1, 1), -1); /* none is older than any */
}

SHL_TEST(repl_commit_point_majority)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *doc = shl_test_bson("{'_id': 'rs', 'members': [{'_id': 0, 'host': 'a:1'}, {'_id': "
                                "1, 'host': 'b:1'}, {'_id': 2, 'host': 'c:1'}, {'_id': 3, "
                                "'host': 'd:1', 'votes': 0, 'priority': 0}]}");
    repl_config_t cfg;
    uint64_t durable[4] = {50, 30, 10, 100};

    ASSERT_INT_EQ(repl_config_parse(doc, true, &cfg, &st), 0);
    /* voters a, b, c: the second highest of {50, 30, 10}; the non-voter's 100 counts not */
    ASSERT_INT_EQ(repl_commit_point(&cfg, durable), 30);
    durable[2] = 40;
    ASSERT_INT_EQ(repl_commit_point(&cfg, durable), 40);
    /* w: n counts data-bearing members, voters or not */
    ASSERT_INT_EQ(repl_count_at(&cfg, durable, 40), 3);
    ASSERT_INT_EQ(repl_count_at(&cfg, durable, 60), 1);
    repl_config_cleanup(&cfg);
    bson_destroy(&cfg.doc);
    bson_destroy(doc);
}
