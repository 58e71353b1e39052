/*
 * migration_steps_test.c -- the chunk migration's protocol steps (migration_steps.c) on the
 * fake remote: the recipient's _recvChunk* replies scripted (clone progress, catch-up, a
 * recipient that fails, a network error), the config server's commit failing with and
 * without a decision it can tell (a lost reply, StaleConfig, the config server unreachable),
 * the recipient's part of the commit and abort sequences, and the resolveDecision phase run
 * by the coordinator framework (a retryable error retried).
 */
#include <string.h>

#include "base/unit_test.h"
#include "shard/migration_private.h"
#include "sharding/coordinator.h"
#include "sharding/remote_fake.h"

#define NS "db.c"
#define REC "shB"
#define CHUNKS_OF(shard)                                                                          \
    "{'ok': 1, 'cursor': {'id': 0, 'ns': 'config.chunks', 'firstBatch': [{'shard': '" shard      \
    "'}]}}"

typedef struct env {
    shl_remote_fake_t *fake;
    shl_remote_t remote;
    mig_coord_t c;
} env_t;

static void
env_init(env_t *e)
{
    memset(e, 0, sizeof(*e));
    e->fake = shl_remote_fake_new();
    e->remote = shl_remote_fake_remote(e->fake);
    e->c.id = shl_uuid_new();
    e->c.coll_uuid = shl_uuid_new();
    snprintf(e->c.session_id, sizeof e->c.session_id, "shA_shB_1");
    snprintf(e->c.ns, sizeof e->c.ns, NS);
    snprintf(e->c.donor, sizeof e->c.donor, "shA");
    snprintf(e->c.recipient, sizeof e->c.recipient, REC);
    e->c.min = shl_test_bson("{'x': 0}");
    e->c.max = shl_test_bson("{'x': 10}");
    e->c.pre_version.major = 3;
    e->c.pre_version.minor = 1;
}

static void
env_cleanup(env_t *e)
{
    mig_coord_cleanup(&e->c);
    shl_remote_fake_destroy(e->fake);
}

/* The string field 'path' of the n-th 'cmd' sent to 'target' ("" if none). */
static const char *
sent_str(env_t *e, const char *target, const char *cmd, size_t n, const char *path, char *buf,
         size_t len)
{
    bson_t seen;
    bson_iter_t it;

    buf[0] = '\0';
    if (shl_remote_fake_nth(e->fake, target, cmd, n, &seen)) {
        if (bson_iter_init(&it, &seen) && bson_iter_find_descendant(&it, path, &it) &&
            BSON_ITER_HOLDS_UTF8(&it)) {
            snprintf(buf, len, "%s", bson_iter_utf8(&it, NULL));
        }
        bson_destroy(&seen);
    }
    return buf;
}

/* The check before each poll: counts the polls, never waits. */
static int
count_polls(void *arg, int polls, shl_status_t *st)
{
    (void)st;
    *(int *)arg = polls + 1;
    return 0;
}

/* The check of a donor whose captured writes overflowed at the 2nd poll. */
static int
overflow_at_second(void *arg, int polls, shl_status_t *st)
{
    (void)arg;
    return polls == 1 ? shl_status_set(st, SHL_CODE_EXCEEDED_MEMORY_LIMIT, "too many mods") : 0;
}

SHL_TEST(migration_document_round_trips)
{
    env_t e;
    bson_t doc;
    mig_coord_t back;
    shl_status_t st = SHL_STATUS_INIT;

    env_init(&e);
    e.c.decision = 1;
    mig_coord_to_bson(&e.c, &doc);
    ASSERT_INT_EQ(mig_coord_parse(&doc, &back, &st), 0);
    ASSERT(shl_uuid_eq(&back.id, &e.c.id));
    ASSERT(shl_uuid_eq(&back.coll_uuid, &e.c.coll_uuid));
    ASSERT_STR_EQ(back.ns, NS);
    ASSERT_STR_EQ(back.recipient, REC);
    ASSERT_STR_EQ(back.session_id, "shA_shB_1");
    ASSERT_INT_EQ(back.decision, 1);
    ASSERT_BSON_EQ(back.min, "{'x': 0}");
    ASSERT_BSON_EQ(back.max, "{'x': 10}");
    mig_coord_cleanup(&back);
    bson_destroy(&doc);
    /* A document without its range is refused. */
    {
        bson_t *bad = shl_test_bson("{'nss': 'db.c', 'recipientShardId': 'shB'}");
        ASSERT(mig_coord_parse(bad, &back, &st) != 0);
        bson_destroy(bad);
    }
    env_cleanup(&e);
}

SHL_TEST(migration_recv_chunk_start_carries_the_range_and_throttle)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *pattern = shl_test_bson("{'x': 1}");
    bson_t *req = shl_test_bson("{'_shardsvrMoveRange': 'db.c', 'secondaryThrottle': true}");
    bson_t seen;
    char buf[64];

    env_init(&e);
    ASSERT_INT_EQ(mig_send_recv_chunk_start(&e.remote, &e.c, pattern, req, &st), 0);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, REC, "_recvChunkStart"), 1);
    ASSERT_STR_EQ(sent_str(&e, REC, "_recvChunkStart", 0, "_recvChunkStart", buf, sizeof buf), NS);
    ASSERT_STR_EQ(sent_str(&e, REC, "_recvChunkStart", 0, "fromShardName", buf, sizeof buf),
                  "shA");
    ASSERT(shl_remote_fake_nth(e.fake, REC, "_recvChunkStart", 0, &seen));
    ASSERT(bson_has_field(&seen, "secondaryThrottle"));
    ASSERT(bson_has_field(&seen, "migrationId"));
    bson_destroy(&seen);
    /* The recipient busy with another migration: its error, as it came. */
    shl_remote_fake_script(e.fake, REC, "_recvChunkStart",
                           "{'ok': 0, 'code': 117, 'codeName': 'ConflictingOperationInProgress', "
                           "'errmsg': 'migration already in progress'}",
                           1);
    ASSERT_INT_EQ(mig_send_recv_chunk_start(&e.remote, &e.c, pattern, NULL, &st), 117);
    ASSERT(strstr(st.reason, "already in progress") != NULL);
    bson_destroy(pattern);
    bson_destroy(req);
    env_cleanup(&e);
}

SHL_TEST(migration_waits_through_clone_and_catch_up_until_steady)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    int polls = 0;
    char buf[64];

    env_init(&e);
    shl_remote_fake_script(e.fake, REC, "_recvChunkStatus", "{'ok': 1, 'state': 'ready'}", 1);
    shl_remote_fake_script(e.fake, REC, "_recvChunkStatus",
                           "{'ok': 1, 'state': 'clone', 'counts': {'cloned': 10}}", 2);
    shl_remote_fake_script(e.fake, REC, "_recvChunkStatus",
                           "{'ok': 1, 'state': 'catchup', 'counts': {'cloned': 20}}", 1);
    shl_remote_fake_script(e.fake, REC, "_recvChunkStatus", "{'ok': 1, 'state': 'steady'}", 1);
    shl_remote_fake_script(e.fake, REC, "_recvChunkStatus", "{'ok': 1, 'state': 'fail'}", -1);
    ASSERT_INT_EQ(mig_wait_steady(&e.remote, &e.c, count_polls, &polls, &st), 0);
    ASSERT_INT_EQ(polls, 5);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, REC, "_recvChunkStatus"), 5);
    ASSERT_STR_EQ(sent_str(&e, REC, "_recvChunkStatus", 4, "sessionId", buf, sizeof buf),
                  "shA_shB_1");
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "config", "*"), 0);
    env_cleanup(&e);
}

SHL_TEST(migration_recipient_failure_ends_the_wait)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    int polls = 0;

    env_init(&e);
    shl_remote_fake_script(e.fake, REC, "_recvChunkStatus", "{'ok': 1, 'state': 'clone'}", 1);
    shl_remote_fake_script(e.fake, REC, "_recvChunkStatus",
                           "{'ok': 1, 'state': 'fail', 'errmsg': 'disk full'}", 1);
    ASSERT_INT_EQ(mig_wait_steady(&e.remote, &e.c, count_polls, &polls, &st),
                  SHL_CODE_OPERATION_FAILED);
    ASSERT(strstr(st.reason, "reported state fail: disk full") != NULL);
    ASSERT(strstr(st.reason, REC) != NULL);
    ASSERT_INT_EQ(polls, 2);
    /* An aborted recipient too. */
    shl_status_clear(&st);
    shl_remote_fake_script(e.fake, REC, "_recvChunkStatus", "{'ok': 1, 'state': 'abort'}", 1);
    ASSERT_INT_EQ(mig_wait_steady(&e.remote, &e.c, count_polls, &polls, &st),
                  SHL_CODE_OPERATION_FAILED);
    /* The donor's own check (captured writes over the limit) ends it too. */
    shl_status_clear(&st);
    shl_remote_fake_script(e.fake, REC, "_recvChunkStatus", "{'ok': 1, 'state': 'catchup'}", -1);
    ASSERT_INT_EQ(mig_wait_steady(&e.remote, &e.c, overflow_at_second, NULL, &st),
                  SHL_CODE_EXCEEDED_MEMORY_LIMIT);
    env_cleanup(&e);
}

SHL_TEST(migration_network_error_while_polling_is_not_retried)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    int polls = 0;

    env_init(&e);
    /* _recvChunkStatus is sent once: a recipient that cannot be reached fails the migration
     * (the abort sequence tells it later), as MongoDB's donor. */
    shl_remote_fake_script_error(e.fake, REC, "_recvChunkStatus", SHL_CODE_HOST_UNREACHABLE, 1);
    ASSERT_INT_EQ(mig_wait_steady(&e.remote, &e.c, count_polls, &polls, &st),
                  SHL_CODE_HOST_UNREACHABLE);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, REC, "_recvChunkStatus"), 1);
    env_cleanup(&e);
}

SHL_TEST(migration_recv_chunk_commit_returns_the_recipient_reply)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t reply;
    bson_iter_t it;

    env_init(&e);
    shl_remote_fake_script(e.fake, REC, "_recvChunkCommit",
                           "{'ok': 1, 'state': 'done', 'operationTime': {'$timestamp': {'t': 5, "
                           "'i': 1}}}",
                           1);
    ASSERT_INT_EQ(mig_send_recv_chunk_commit(&e.remote, &e.c, &reply, &st), 0);
    ASSERT(bson_iter_init_find(&it, &reply, "operationTime"));
    bson_destroy(&reply);
    shl_remote_fake_script(e.fake, REC, "_recvChunkCommit",
                           "{'ok': 0, 'code': 96, 'errmsg': 'commit failed'}", 1);
    ASSERT_INT_EQ(mig_send_recv_chunk_commit(&e.remote, &e.c, &reply, &st), 96);
    bson_destroy(&reply);
    env_cleanup(&e);
}

static mig_commit_args_t
commit_args(void)
{
    mig_commit_args_t a;

    memset(&a, 0, sizeof a);
    a.chunk_version.major = 3;
    a.chunk_version.minor = 1;
    a.coll_version.major = 3;
    a.coll_version.minor = 4;
    a.valid_after = ((uint64_t)7 << 32) | 2;
    return a;
}

SHL_TEST(migration_commit_on_config_succeeds)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    mig_commit_args_t a = commit_args();
    bson_t seen;
    bson_iter_t it;
    char buf[64];

    env_init(&e);
    ASSERT_INT_EQ(mig_commit_on_config(&e.remote, &e.c, &a, &st), 1);
    ASSERT_INT_EQ(st.code, 0);
    ASSERT_STR_EQ(sent_str(&e, "config", "_configsvrCommitChunkMigration", 0, "toShard", buf,
                           sizeof buf),
                  REC);
    ASSERT_STR_EQ(sent_str(&e, "config", "_configsvrCommitChunkMigration", 0, "writeConcern.w",
                           buf, sizeof buf),
                  "majority");
    ASSERT(shl_remote_fake_nth(e.fake, "config", "_configsvrCommitChunkMigration", 0, &seen));
    ASSERT(bson_iter_init(&it, &seen) && bson_iter_find_descendant(&it, "migratedChunk.min.x", &it));
    ASSERT(bson_iter_init_find(&it, &seen, "validAfter") && BSON_ITER_HOLDS_TIMESTAMP(&it));
    bson_destroy(&seen);
    /* No need to ask anyone. */
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "config", "find"), 0);
    env_cleanup(&e);
}

SHL_TEST(migration_commit_reply_lost_but_committed)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    mig_commit_args_t a = commit_args();
    char buf[64];

    env_init(&e);
    /* The commit went through; its reply was lost. The config server says the recipient owns
     * the range: committed. */
    shl_remote_fake_script_error(e.fake, "config", "_configsvrCommitChunkMigration",
                                 SHL_CODE_HOST_UNREACHABLE, 1);
    shl_remote_fake_script(e.fake, "config", "find", CHUNKS_OF(REC), 1);
    ASSERT_INT_EQ(mig_commit_on_config(&e.remote, &e.c, &a, &st), 1);
    ASSERT_INT_EQ(st.code, 0);
    ASSERT_STR_EQ(sent_str(&e, "config", "find", 0, "readConcern.level", buf, sizeof buf),
                  "majority");
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "config", "_configsvrCommitChunkMigration"), 1);
    env_cleanup(&e);
}

SHL_TEST(migration_commit_refused_with_stale_config_aborts)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    mig_commit_args_t a = commit_args();

    env_init(&e);
    /* The config server refuses (the donor's collection version is stale); the donor still
     * owns the range: aborted with the refusal. */
    shl_remote_fake_script(e.fake, "config", "_configsvrCommitChunkMigration",
                           "{'ok': 0, 'code': 13388, 'codeName': 'StaleConfig', 'errmsg': "
                           "'collection version mismatch'}",
                           1);
    shl_remote_fake_script(e.fake, "config", "find", CHUNKS_OF("shA"), 1);
    ASSERT_INT_EQ(mig_commit_on_config(&e.remote, &e.c, &a, &st), -1);
    ASSERT_INT_EQ(st.code, SHL_CODE_STALE_CONFIG);
    ASSERT(strstr(st.reason, "collection version mismatch") != NULL);
    env_cleanup(&e);
}

SHL_TEST(migration_commit_outcome_unknown_without_the_config_server)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    mig_commit_args_t a = commit_args();

    env_init(&e);
    /* Neither the commit nor the question gets an answer: no decision (resolveDecision asks
     * on), and the request learns the commit's error. */
    shl_remote_fake_script_error(e.fake, "config", "*", SHL_CODE_HOST_UNREACHABLE, -1);
    ASSERT_INT_EQ(mig_commit_on_config(&e.remote, &e.c, &a, &st), 0);
    ASSERT_INT_EQ(st.code, SHL_CODE_HOST_UNREACHABLE);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "config", "find"), 1);
    env_cleanup(&e);
}

SHL_TEST(migration_recipient_finish_commit_and_abort)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t seen;
    bson_iter_t it;
    char buf[64];

    env_init(&e);
    /* Committed: the recipient leaves its critical section, then its task is deleted. */
    e.c.decision = 1;
    ASSERT_INT_EQ(mig_recipient_finish(&e.remote, &e.c, &st), 0);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, REC, "_recvChunkReleaseCritSec"), 1);
    ASSERT_STR_EQ(sent_str(&e, REC, "delete", 0, "delete", buf, sizeof buf), "rangeDeletions");
    ASSERT(shl_remote_fake_nth(e.fake, REC, "delete", 0, &seen));
    ASSERT(bson_iter_init(&it, &seen) && bson_iter_find_descendant(&it, "deletes.0.q._id", &it));
    bson_destroy(&seen);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, REC, "_recvChunkAbort"), 0);
    /* The recipient down: the sequence stops at its first step (the caller retries all). */
    shl_remote_fake_reset_calls(e.fake);
    shl_remote_fake_script_error(e.fake, REC, "_recvChunkReleaseCritSec",
                                 SHL_CODE_HOST_UNREACHABLE, 1);
    ASSERT_INT_EQ(mig_recipient_finish(&e.remote, &e.c, &st), SHL_CODE_HOST_UNREACHABLE);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, REC, "delete"), 0);
    /* A delete refused by a writeError fails the step (one reply-to-status policy). */
    shl_status_clear(&st);
    shl_remote_fake_script(e.fake, REC, "delete",
                           "{'ok': 1, 'n': 0, 'writeErrors': [{'index': 0, 'code': 11602, "
                           "'errmsg': 'interrupted'}]}",
                           1);
    ASSERT_INT_EQ(mig_recipient_finish(&e.remote, &e.c, &st), 11602);
    /* Aborted: _recvChunkAbort with the migration's id. */
    shl_status_clear(&st);
    shl_remote_fake_reset_calls(e.fake);
    e.c.decision = -1;
    ASSERT_INT_EQ(mig_recipient_finish(&e.remote, &e.c, &st), 0);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, REC, "_recvChunkAbort"), 1);
    ASSERT_STR_EQ(sent_str(&e, REC, "_recvChunkAbort", 0, "sessionId", buf, sizeof buf),
                  "shA_shB_1");
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, REC, "_recvChunkReleaseCritSec"), 0);
    env_cleanup(&e);
}

/* ---------------------------------------------------------------- resolveDecision */

/* The last phase of the test type: the document's decision as the result. */
static int
report_decision(shl_coord_t *c, shl_status_t *st)
{
    bson_t res = BSON_INITIALIZER;
    bson_iter_t it;

    (void)st;
    BSON_APPEND_UTF8(&res, "decision",
                     bson_iter_init_find(&it, shl_coord_doc(c), "decision") &&
                             BSON_ITER_HOLDS_UTF8(&it)
                         ? bson_iter_utf8(&it, NULL)
                         : "none");
    shl_coord_set_result(c, &res);
    bson_destroy(&res);
    return 0;
}

static const shl_coord_phase_t resolve_phases[] = {
    {"resolveDecision", mig_phase_resolve_decision, true},
    {"report", report_decision, false},
};

static const shl_coord_type_t resolve_type = {
    .name = "MigrationCoordinator",
    .coll = "migrationCoordinators",
    .phases = resolve_phases,
    .nphases = 2,
    .max_attempts = 5,
    .backoff_ms = 1,
};

/* Run the type over e's fake on c's document; the decision it reached into 'out'. */
static int
resolve(env_t *e, char *out, size_t len, shl_status_t *st)
{
    shl_coord_service_t *svc = shl_coord_service_new(&e->remote);
    bson_t doc, result;
    bson_iter_t it;
    int ret;

    mig_coord_to_bson(&e->c, &doc);
    ret = shl_coord_run(svc, &resolve_type, &doc, 0, &result, st);
    out[0] = '\0';
    if (ret == 0 && bson_iter_init_find(&it, &result, "decision")) {
        snprintf(out, len, "%s", bson_iter_utf8(&it, NULL));
    }
    if (ret == 0) {
        bson_destroy(&result);
    }
    bson_destroy(&doc);
    shl_coord_service_destroy(svc);
    return ret;
}

SHL_TEST(migration_resolve_decision_phase_asks_the_config_server)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    char d[32];

    env_init(&e);
    shl_remote_fake_store_self(e.fake);
    /* A document without a decision: the recipient owns the range -> committed. */
    shl_remote_fake_script(e.fake, "config", "find", CHUNKS_OF(REC), 1);
    ASSERT_INT_EQ(resolve(&e, d, sizeof d, &st), 0);
    ASSERT_STR_EQ(d, "committed");
    /* The donor still owns it -> aborted. */
    shl_remote_fake_script(e.fake, "config", "find", CHUNKS_OF("shA"), 1);
    ASSERT_INT_EQ(resolve(&e, d, sizeof d, &st), 0);
    ASSERT_STR_EQ(d, "aborted");
    /* The config server unreachable twice: the framework runs the phase again. */
    shl_remote_fake_reset_calls(e.fake);
    shl_remote_fake_script_error(e.fake, "config", "find", SHL_CODE_HOST_UNREACHABLE, 2);
    shl_remote_fake_script(e.fake, "config", "find", CHUNKS_OF(REC), 1);
    ASSERT_INT_EQ(resolve(&e, d, sizeof d, &st), 0);
    ASSERT_STR_EQ(d, "committed");
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "config", "find"), 3);
    /* A document with its decision already: nothing asked. */
    shl_remote_fake_reset_calls(e.fake);
    e.c.decision = -1;
    ASSERT_INT_EQ(resolve(&e, d, sizeof d, &st), 0);
    ASSERT_STR_EQ(d, "aborted");
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "config", "*"), 0);
    /* The framework deleted every document. */
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, "migrationCoordinators"), 0);
    env_cleanup(&e);
}
