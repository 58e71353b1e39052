/*
 * base_test.c -- unit tests for statuses, the code table, options and fail points.
 */
#include "base/failpoint.h"
#include "base/options.h"
#include "base/status.h"
#include "base/unit_test.h"

SHL_FAILPOINT_DEFINE(baseTestFailPoint)

SHL_TEST(code_table_names_and_numbers)
{
    ASSERT_STR_EQ(shl_code_name(13388), "StaleConfig");
    ASSERT_STR_EQ(shl_code_name(SHL_CODE_STALE_DB_VERSION), "StaleDbVersion");
    ASSERT_STR_EQ(shl_code_name(59), "CommandNotFound");
    ASSERT_STR_EQ(shl_code_name(40571), "Location40571");
    ASSERT_INT_EQ(shl_code_from_name("WriteConflict"), 112);
    ASSERT_INT_EQ(shl_code_from_name("NoSuchThing"), -1);
    ASSERT(shl_code_in_category(SHL_CODE_STALE_CONFIG, SHL_CAT_STALE_SHARD_VERSION_ERROR));
    ASSERT(shl_code_in_category(SHL_CODE_INTERRUPTED_AT_SHUTDOWN, SHL_CAT_SHUTDOWN_ERROR));
    ASSERT(!shl_code_in_category(SHL_CODE_BAD_VALUE, ~0u));
}

SHL_TEST(status_reply_round_trip)
{
    shl_status_t st = SHL_STATUS_INIT, back = SHL_STATUS_INIT;
    bson_t *extra = shl_test_bson("{'ns': 'db.c', 'shardId': 'shard0'}");
    bson_t reply = BSON_INITIALIZER;

    ASSERT_INT_EQ(shl_status_set(&st, SHL_CODE_STALE_CONFIG, "stale %s", "db.c"), 13388);
    shl_status_set_extra(&st, extra);
    shl_status_add_label(&st, SHL_LABEL(RETRYABLE_WRITE_ERROR));
    shl_status_append_reply(&st, &reply);
    ASSERT_BSON_EQ(&reply, "{'ok': 0.0, 'errmsg': 'stale db.c', 'code': 13388, 'codeName': "
                           "'StaleConfig', 'ns': 'db.c', 'shardId': 'shard0', "
                           "'errorLabels': ['RetryableWriteError']}");
    ASSERT_INT_EQ(shl_status_from_reply(&reply, &back), 13388);
    ASSERT_STR_EQ(back.reason, "stale db.c");
    ASSERT_INT_EQ(back.labels, SHL_LABEL(RETRYABLE_WRITE_ERROR));
    bson_t ex;
    ASSERT(shl_status_extra_get(&back, &ex));
    ASSERT_BSON_EQ(&ex, "{'ns': 'db.c', 'shardId': 'shard0'}");
    bson_destroy(extra);
    bson_destroy(&reply);
}

SHL_TEST(options_defaults_and_parse)
{
    shl_status_t st;
    shl_options_init();
    ASSERT_INT_EQ(shl_opt_int(SHL_OPT_cursorTimeoutMillis), 600000);
    ASSERT(!shl_opt_bool(SHL_OPT_enableTestCommands));
    ASSERT_INT_EQ(shl_opt_set_string(SHL_OPT_enableTestCommands, "1", &st), 0);
    ASSERT(shl_opt_bool(SHL_OPT_enableTestCommands));
    ASSERT_INT_EQ(shl_opt_set_string(SHL_OPT_port, "12x", &st), SHL_CODE_BAD_VALUE);
    ASSERT_INT_EQ(shl_opt_find("orphanCleanupDelaySecs"), SHL_OPT_orphanCleanupDelaySecs);
    ASSERT_STR_EQ(shl_opt_str(SHL_OPT_bind_ip), "127.0.0.1");
}

SHL_TEST(failpoint_times_and_filter)
{
    shl_failpoint_t *fp = shl_failpoint_find("baseTestFailPoint");
    bson_t *cmd = shl_test_bson("{'mode': {'times': 2}, 'data': {'x': 1}}");
    bson_iter_t mode;
    bson_t data, got;
    int64_t entered = -1;
    shl_status_t st;

    ASSERT(fp != NULL);
    ASSERT(!SHL_FAILPOINT_FIRES(baseTestFailPoint));
    ASSERT(bson_iter_init_find(&mode, cmd, "mode"));
    bson_iter_t d;
    ASSERT(bson_iter_init_find(&d, cmd, "data"));
    const uint8_t *buf;
    uint32_t len;
    bson_iter_document(&d, &len, &buf);
    ASSERT(bson_init_static(&data, buf, len));
    ASSERT_INT_EQ(shl_failpoint_configure(fp, &mode, &data, &entered, &st), 0);
    ASSERT_INT_EQ(entered, 0);
    ASSERT(shl_failpoint_evaluate(fp, NULL, NULL, &got));
    ASSERT_BSON_EQ(&got, "{'x': 1}");
    bson_destroy(&got);
    ASSERT(SHL_FAILPOINT_FIRES(baseTestFailPoint));
    ASSERT(!SHL_FAILPOINT_FIRES(baseTestFailPoint));
    bson_destroy(cmd);
}

#include "base/namespace.h"

SHL_TEST(namespace_rules)
{
    shl_ns_t ns;
    shl_status_t st;
    ASSERT_INT_EQ(shl_ns_make(&ns, "test", "coll", &st), 0);
    ASSERT_STR_EQ(ns.full, "test.coll");
    ASSERT_INT_EQ(shl_ns_parse(&ns, "a.b.c", &st), 0);
    ASSERT_STR_EQ(ns.db, "a");
    ASSERT_STR_EQ(ns.coll, "b.c");
    ASSERT_INT_EQ(shl_ns_make(&ns, "te st", "c", &st), SHL_CODE_INVALID_NAMESPACE);
    ASSERT_INT_EQ(shl_ns_make(&ns, "test", "", &st), SHL_CODE_INVALID_NAMESPACE);
    ASSERT_INT_EQ(shl_ns_make(&ns, "test", "a$b", &st), SHL_CODE_INVALID_NAMESPACE);
    ASSERT_INT_EQ(shl_ns_make(&ns, "test", ".a", &st), SHL_CODE_INVALID_NAMESPACE);
    ASSERT_INT_EQ(shl_ns_parse(&ns, "nodot", &st), SHL_CODE_INVALID_NAMESPACE);
    char longname[300];
    memset(longname, 'x', 299);
    longname[299] = '\0';
    ASSERT_INT_EQ(shl_ns_make(&ns, "test", longname, &st), SHL_CODE_INVALID_NAMESPACE);
}
