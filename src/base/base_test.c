/*
 * base_test.c -- unit tests for statuses, the code table, options and fail points.
 */
#include <string.h>

#include "base/failpoint.h"
#include "base/options.h"
#include "base/status.h"
#include "base/unit_test.h"
#include "base/utf8.h"

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

SHL_TEST(status_large_extra_lives_on_its_thread)
{
    shl_status_t st = SHL_STATUS_INIT, copy, other = SHL_STATUS_INIT;
    bson_t big = BSON_INITIALIZER, ex, reply = BSON_INITIALIZER;
    char pad[2000];

    memset(pad, 'p', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    BSON_APPEND_UTF8(&big, "preImage", pad);
    shl_status_set(&st, SHL_CODE_WOULD_CHANGE_OWNING_SHARD, "moves");
    shl_status_set_extra(&st, &big);
    copy = st;
    ASSERT(shl_status_extra_get(&copy, &ex));
    ASSERT(bson_equal(&ex, &big));
    shl_status_append_reply(&copy, &reply);
    ASSERT(bson_has_field(&reply, "preImage"));
    /* The thread's next large extra replaces it: the older status has none any more. */
    shl_status_set_extra(&other, &big);
    ASSERT(!shl_status_extra_get(&st, &ex));
    ASSERT(shl_status_extra_get(&other, &ex));
    bson_destroy(&big);
    bson_destroy(&reply);
}

SHL_TEST(utf8_checks_and_repair)
{
    static const char bad[] = {'a', (char)0xff, 'b', (char)0xc3};
    char out[16];

    ASSERT(shl_utf8_is_valid("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10));
    ASSERT(!shl_utf8_is_valid("\xff", 1));
    ASSERT(!shl_utf8_is_valid("\xc3", 1));             /* truncated */
    ASSERT(!shl_utf8_is_valid("\xc0\xaf", 2));         /* overlong '/' */
    ASSERT(!shl_utf8_is_valid("\xed\xa0\x80", 3));     /* a surrogate */
    ASSERT(!shl_utf8_is_valid("\xf4\x90\x80\x80", 4)); /* past U+10FFFF */
    ASSERT_INT_EQ(shl_utf8_copy_valid(out, sizeof(out), bad, sizeof(bad)), 8);
    ASSERT_STR_EQ(out, "a\uFFFDb\uFFFD"); /* U+FFFD is EF BF BD */
    /* Output stops before a character that would not fit, never inside one. */
    ASSERT_INT_EQ(shl_utf8_copy_valid(out, 4, "ab\xc3\xa9", 4), 2);
    ASSERT_STR_EQ(out, "ab");
    ASSERT_INT_EQ(shl_utf8_copy_valid(out, 4, "a\xff", 2), 1);
    ASSERT_STR_EQ(out, "a");
}

SHL_TEST(status_reason_is_valid_utf8)
{
    /* A reason may echo a client's field name, which need not be UTF-8; drivers decode
     * errmsg as UTF-8 and refuse the whole reply if it is not. */
    shl_status_t st = SHL_STATUS_INIT;
    char big[SHL_STATUS_REASON_MAX + 8];

    shl_status_set(&st, SHL_CODE_COMMAND_NOT_FOUND, "no such command: '%s'", "fi\xffnd");
    ASSERT_STR_EQ(st.reason, "no such command: 'fi\xef\xbf\xbdnd'");
    shl_status_set(&st, SHL_CODE_BAD_VALUE, "%s", "caf\xc3\xa9");
    ASSERT_STR_EQ(st.reason, "caf\xc3\xa9");
    /* Truncation to the reason's size must not leave half a character. */
    memset(big, 'x', sizeof(big));
    memcpy(big + SHL_STATUS_REASON_MAX - 2, "\xc3\xa9\xc3\xa9", 4);
    big[sizeof(big) - 1] = '\0';
    shl_status_set(&st, SHL_CODE_BAD_VALUE, "%s", big);
    ASSERT(shl_utf8_is_valid(st.reason, strlen(st.reason)));
    ASSERT_INT_EQ(strlen(st.reason), SHL_STATUS_REASON_MAX - 2);
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
