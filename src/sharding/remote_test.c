/*
 * remote_test.c -- the outgoing-command interface over the fake remote: the one
 * reply-to-status policy, write concern, the retry policy for idempotent commands.
 */
#include "base/unit_test.h"
#include "sharding/remote_fake.h"

static int
run_json(shl_remote_t *r, const char *target, const char *json, const shl_remote_options_t *o,
         shl_status_t *st)
{
    bson_t *cmd = bson_new_from_json((const uint8_t *)json, -1, NULL);
    shl_remote_target_t t = shl_remote_target_shard(target);
    bson_t reply;
    int ret = shl_remote_run(r, &t, "admin", cmd, o, &reply, st);

    bson_destroy(&reply);
    bson_destroy(cmd);
    return ret;
}

SHL_TEST(remote_reply_policy)
{
    shl_remote_fake_t *f = shl_remote_fake_new();
    shl_remote_t r = shl_remote_fake_remote(f);
    shl_status_t st = SHL_STATUS_INIT;

    shl_remote_fake_script(f, "a", "ping",
                           "{'ok': 0, 'code': 251, 'errmsg': 'gone', "
                           "'errorLabels': ['TransientTransactionError']}",
                           1);
    shl_remote_fake_script(f, "a", "insert",
                           "{'ok': 1, 'n': 0, 'writeErrors': [{'index': 0, 'code': 11000, "
                           "'errmsg': 'dup'}]}",
                           1);
    shl_remote_fake_script(f, "a", "insert",
                           "{'ok': 1, 'n': 1, 'writeConcernError': {'code': 64, 'errmsg': 'wc'}}",
                           1);
    ASSERT_INT_EQ(run_json(&r, "a", "{\"ping\": 1}", NULL, &st), 251);
    ASSERT_STR_EQ(st.reason, "gone");
    ASSERT(st.labels & SHL_LABEL(TRANSIENT_TRANSACTION_ERROR));
    ASSERT_INT_EQ(run_json(&r, "a", "{\"insert\": \"c\"}", NULL, &st), 11000);
    ASSERT_INT_EQ(run_json(&r, "a", "{\"insert\": \"c\"}", NULL, &st), 64);
    ASSERT_INT_EQ(run_json(&r, "a", "{\"insert\": \"c\"}", NULL, &st), 0);
    ASSERT_INT_EQ(shl_remote_fake_count(f, "a", "insert"), 3);
    shl_remote_fake_destroy(f);
}

SHL_TEST(remote_write_concern_added)
{
    shl_remote_fake_t *f = shl_remote_fake_new();
    shl_remote_t r = shl_remote_fake_remote(f);
    shl_status_t st = SHL_STATUS_INIT;
    shl_remote_options_t o = {.w = "majority", .j = true};
    bson_t seen;

    ASSERT_INT_EQ(run_json(&r, "a", "{\"insert\": \"c\"}", &o, &st), 0);
    ASSERT(shl_remote_fake_nth(f, "a", "insert", 0, &seen));
    ASSERT_BSON_EQ(&seen, "{'insert': 'c', 'writeConcern': {'w': 'majority', 'j': true}}");
    bson_destroy(&seen);
    /* a command's own writeConcern wins */
    ASSERT_INT_EQ(run_json(&r, "a", "{\"insert\": \"c\", \"writeConcern\": {\"w\": 1}}", &o, &st),
                  0);
    ASSERT(shl_remote_fake_nth(f, "a", "insert", 1, &seen));
    ASSERT_BSON_EQ(&seen, "{'insert': 'c', 'writeConcern': {'w': 1}}");
    bson_destroy(&seen);
    shl_remote_fake_destroy(f);
}

SHL_TEST(remote_retry_idempotent_only)
{
    shl_remote_fake_t *f = shl_remote_fake_new();
    shl_remote_t r = shl_remote_fake_remote(f);
    shl_status_t st = SHL_STATUS_INIT;
    shl_remote_options_t retry = {.retry = SHL_REMOTE_RETRY_IDEMPOTENT, .max_attempts = 3};

    /* no retry by default */
    shl_remote_fake_script_error(f, "a", "ping", SHL_CODE_HOST_UNREACHABLE, 1);
    ASSERT_INT_EQ(run_json(&r, "a", "{\"ping\": 1}", NULL, &st), SHL_CODE_HOST_UNREACHABLE);
    ASSERT_INT_EQ(shl_remote_fake_count(f, "a", "ping"), 1);
    /* two retryable failures, then the answer */
    shl_remote_fake_script_error(f, "a", "ping", SHL_CODE_HOST_UNREACHABLE, 1);
    shl_remote_fake_script(f, "a", "ping", "{'ok': 0, 'code': 189, 'errmsg': 'stepping down'}", 1);
    ASSERT_INT_EQ(run_json(&r, "a", "{\"ping\": 1}", &retry, &st), 0);
    ASSERT_INT_EQ(shl_remote_fake_count(f, "a", "ping"), 4);
    /* bounded: the third failure is returned */
    shl_remote_fake_script_error(f, "a", "ping", SHL_CODE_HOST_UNREACHABLE, 3);
    ASSERT_INT_EQ(run_json(&r, "a", "{\"ping\": 1}", &retry, &st), SHL_CODE_HOST_UNREACHABLE);
    ASSERT_INT_EQ(shl_remote_fake_count(f, "a", "ping"), 7);
    /* a non-retryable error is not retried */
    shl_remote_fake_script(f, "a", "ping", "{'ok': 0, 'code': 251, 'errmsg': 'no'}", 1);
    ASSERT_INT_EQ(run_json(&r, "a", "{\"ping\": 1}", &retry, &st), 251);
    ASSERT_INT_EQ(shl_remote_fake_count(f, "a", "ping"), 8);
    shl_remote_fake_destroy(f);
}

SHL_TEST(remote_run_many_retries_failed_only)
{
    shl_remote_fake_t *f = shl_remote_fake_new();
    shl_remote_t r = shl_remote_fake_remote(f);
    shl_remote_options_t retry = {.retry = SHL_REMOTE_RETRY_IDEMPOTENT};
    bson_t *cmd = BCON_NEW("ping", BCON_INT32(1));
    shl_remote_request_t reqs[2] = {
        {.target = shl_remote_target_shard("a"), .db = "admin", .cmd = cmd},
        {.target = shl_remote_target_shard("b"), .db = "admin", .cmd = cmd},
    };
    shl_remote_result_t res[2];

    shl_remote_fake_script_error(f, "b", "ping", SHL_CODE_HOST_UNREACHABLE, 2);
    shl_remote_run_many(&r, reqs, 2, &retry, res);
    ASSERT_INT_EQ(res[0].code, 0);
    ASSERT_INT_EQ(res[1].code, 0);
    ASSERT_INT_EQ(shl_remote_fake_count(f, "a", "ping"), 1);
    ASSERT_INT_EQ(shl_remote_fake_count(f, "b", "ping"), 3);
    shl_remote_results_cleanup(res, 2);
    bson_destroy(cmd);
    shl_remote_fake_destroy(f);
}
