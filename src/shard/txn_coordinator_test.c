/*
 * txn_coordinator_test.c -- the two-phase-commit coordinator's phases over the fake remote
 * (every decision path and each participant reply case), with "self" as the fake's in-memory
 * store of config.transaction_coordinators.
 */
#include <string.h>
#include <time.h>

#include "base/options.h"
#include "base/unit_test.h"
#include "shard/txn_coordinator.h"
#include "sharding/remote_fake.h"

#define TS(t, i) "{'$timestamp': {'t': " #t ", 'i': " #i "}}"
#define COLL "transaction_coordinators"

typedef struct env {
    shl_remote_fake_t *fake;
    shl_remote_t remote;
    shl_coord_service_t *svc;
    bson_t *lsid;
} env_t;

static void
env_init(env_t *e)
{
    shl_status_t st = SHL_STATUS_INIT;

    /* These cases read the phases after the answer (waitingForDecisionAcks) themselves. */
    SHL_INVARIANT(
        shl_opt_set_string(SHL_OPT_coordinateCommitReturnImmediatelyAfterPersistingDecision, "true",
                           &st) == 0);
    shard_txn_coord_forget_all();
    e->fake = shl_remote_fake_new();
    shl_remote_fake_store_self(e->fake);
    e->remote = shl_remote_fake_remote(e->fake);
    e->svc = shl_coord_service_new(&e->remote);
    e->lsid = BCON_NEW("id", BCON_INT32(42));
}

static void
env_cleanup(env_t *e)
{
    shl_coord_service_destroy(e->svc);
    shl_remote_fake_destroy(e->fake);
    bson_destroy(e->lsid);
}

static const char *const AB[] = {"shA", "shB"};

/* coordinateCommitTransaction: answered once the decision is durable; then (here) also the
 * coordinator's end, so the tests see every phase's requests. */
static int
commit(env_t *e, int64_t txn, const char *const *p, size_t n, shl_status_t *st)
{
    int ret = shard_txn_coord_commit(e->svc, e->lsid, txn, p, n, st);
    struct timespec ms = {0, 1000000};

    for (int i = 0; i < 10000 && shl_coord_service_count(e->svc) > 0; i++) {
        nanosleep(&ms, NULL);
    }
    return ret;
}

/* The n-th request of 'cmd' to 'target' equals 'json'. */
static bool
sent(env_t *e, const char *target, const char *cmd, size_t n, const char *json)
{
    bson_t seen;
    char *a = NULL, *b = NULL;
    bool eq = shl_remote_fake_nth(e->fake, target, cmd, n, &seen);

    if (eq) {
        eq = shl_test_bson_eq(&seen, json, &a, &b);
        if (!eq) {
            fprintf(stderr, "sent %s\nwanted %s\n", a, b);
        }
        bson_free(a);
        bson_free(b);
        bson_destroy(&seen);
    }
    return eq;
}

SHL_TEST(txn_coord_commits_at_the_largest_prepare_timestamp)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;

    env_init(&e);
    shl_remote_fake_script(e.fake, "shA", "prepareTransaction",
                           "{'ok': 1, 'prepareTimestamp': " TS(10, 1) "}", 1);
    shl_remote_fake_script(e.fake, "shB", "prepareTransaction",
                           "{'ok': 1, 'prepareTimestamp': " TS(12, 3) "}", 1);
    ASSERT_INT_EQ(commit(&e, 5, AB, 2, &st), 0);
    /* the participant list (inserted without a flush; with no local participant here to
     * flush it, written durably before any prepare), then the decision, durably; then the
     * document goes */
    ASSERT(sent(&e, "self", "insert", 0,
                "{'insert': 'transaction_coordinators', 'documents': [{'_id': {'lsid': {'id': "
                "42}, 'txnNumber': {'$numberLong': '5'}}, 'participants': ['shA', 'shB']}], "
                "'writeConcern': {'w': 1}}"));
    ASSERT(sent(&e, "self", "update", 0,
                "{'update': 'transaction_coordinators', 'updates': [{'q': {'_id': {'lsid': "
                "{'id': 42}, 'txnNumber': {'$numberLong': '5'}}}, 'u': {'_id': {'lsid': {'id': "
                "42}, 'txnNumber': {'$numberLong': '5'}}, 'participants': ['shA', 'shB']}}], "
                "'writeConcern': {'w': 'majority', 'j': true}}"));
    ASSERT(sent(&e, "self", "update", 1,
                "{'update': 'transaction_coordinators', 'updates': [{'q': {'_id': {'lsid': "
                "{'id': 42}, 'txnNumber': {'$numberLong': '5'}}}, 'u': {'_id': {'lsid': {'id': "
                "42}, 'txnNumber': {'$numberLong': '5'}}, 'participants': ['shA', 'shB'], "
                "'decision': {'decision': 'commit', 'commitTimestamp': " TS(12, 3) "}}}], "
                "'writeConcern': {'w': 'majority', 'j': true}}"));
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "self", "delete"), 1);
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, COLL), 0);
    ASSERT(sent(&e, "shA", "prepareTransaction", 0,
                "{'prepareTransaction': 1, 'lsid': {'id': 42}, 'txnNumber': {'$numberLong': "
                "'5'}, 'autocommit': false, 'writeConcern': {'w': 'majority'}}"));
    ASSERT(sent(&e, "shB", "commitTransaction", 0,
                "{'commitTransaction': 1, 'commitTimestamp': " TS(12, 3) ", 'lsid': {'id': 42}, "
                "'txnNumber': {'$numberLong': '5'}, 'autocommit': false, 'writeConcern': {'w': "
                "'majority'}}"));
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "shA", "commitTransaction"), 1);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "*", "abortTransaction"), 0);
    /* a retry after the end answers the decision without a second two-phase commit */
    ASSERT_INT_EQ(commit(&e, 5, AB, 2, &st), 0);
    ASSERT_INT_EQ(commit(&e, 5, NULL, 0, &st), 0);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "*", "prepareTransaction"), 2);
    env_cleanup(&e);
}

/* The participant list is inserted without a flush; with no vote of this shard's own to make
 * it durable (the fake has no local participant), a durable write of it comes before any
 * participant is asked to prepare -- never a prepared participant under a list a crash could
 * lose. */
SHL_TEST(txn_coord_makes_the_list_durable_before_any_prepare)
{
    static const char *const order[] = {"insert", "update", "prepareTransaction",
                                        "prepareTransaction"};
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;

    env_init(&e);
    shl_remote_fake_script(e.fake, "*", "prepareTransaction",
                           "{'ok': 1, 'prepareTimestamp': " TS(10, 1) "}", -1);
    ASSERT_INT_EQ(commit(&e, 7, AB, 2, &st), 0);
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        bson_t req;
        bson_iter_t it;

        ASSERT(shl_remote_fake_nth(e.fake, "*", "*", k, &req));
        ASSERT(bson_iter_init(&it, &req) && bson_iter_next(&it));
        ASSERT_STR_EQ(bson_iter_key(&it), order[k]);
        if (k == 1) {
            ASSERT(bson_iter_init(&it, &req) &&
                   bson_iter_find_descendant(&it, "writeConcern.j", &it) && bson_iter_as_bool(&it));
        }
        bson_destroy(&req);
    }
    env_cleanup(&e);
}

/* The commit request is answered once the decision is durable, while the decision still
 * goes out to a participant that does not acknowledge it (MongoDB's coordinator). */
SHL_TEST(txn_coord_answers_once_the_decision_is_durable)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;

    env_init(&e);
    shl_remote_fake_script(e.fake, "shA", "prepareTransaction",
                           "{'ok': 1, 'prepareTimestamp': " TS(10, 1) "}", 1);
    shl_remote_fake_script(e.fake, "shB", "prepareTransaction",
                           "{'ok': 1, 'prepareTimestamp': " TS(12, 3) "}", 1);
    shl_remote_fake_script_error(e.fake, "shB", "commitTransaction", 6, -1);
    ASSERT_INT_EQ(shard_txn_coord_commit(e.svc, e.lsid, 5, AB, 2, &st), 0);
    /* Still delivering to shB, its document (with the decision) kept until shB acknowledges. */
    ASSERT_INT_EQ(shl_coord_service_count(e.svc), 1);
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, COLL), 1);
    /* A retry joins the running coordinator and gets the same answer at once. */
    ASSERT_INT_EQ(shard_txn_coord_commit(e.svc, e.lsid, 5, AB, 2, &st), 0);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "*", "prepareTransaction"), 2);
    env_cleanup(&e);
}

SHL_TEST(txn_coord_aborts_on_a_vote_to_abort)
{
    static const struct {
        const char *reply; /* shB's prepare reply */
        int code;          /* what coordinateCommitTransaction answers */
    } cases[] = {
        {"{'ok': 0, 'code': 251, 'codeName': 'NoSuchTransaction', 'errmsg': 'gone'}", 251},
        {"{'ok': 0, 'code': 225, 'codeName': 'TransactionTooOld', 'errmsg': 'old'}", 225},
        {"{'ok': 0, 'code': 112, 'codeName': 'WriteConflict', 'errmsg': 'wc', "
         "'errorLabels': ['TransientTransactionError']}",
         112},
        /* an ok reply without a prepareTimestamp is no vote to commit */
        {"{'ok': 1}", 251},
    };

    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        env_t e;
        shl_status_t st = SHL_STATUS_INIT;
        bson_t doc;

        env_init(&e);
        shl_remote_fake_script(e.fake, "shA", "prepareTransaction",
                               "{'ok': 1, 'prepareTimestamp': " TS(10, 1) "}", 1);
        shl_remote_fake_script(e.fake, "shB", "prepareTransaction", cases[k].reply, 1);
        /* a participant that no longer has the transaction acknowledges the abort */
        shl_remote_fake_script(e.fake, "shB", "abortTransaction",
                               "{'ok': 0, 'code': 251, 'errmsg': 'gone'}", 1);
        ASSERT_INT_EQ(commit(&e, 6, AB, 2, &st), cases[k].code);
        ASSERT_INT_EQ(st.labels, 0); /* the router decides the labels */
        ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "shA", "abortTransaction"), 1);
        ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "shB", "abortTransaction"), 1);
        ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "*", "commitTransaction"), 0);
        ASSERT(shl_remote_fake_nth(e.fake, "self", "update", 1, &doc));
        {
            bson_iter_t it;
            ASSERT(bson_iter_init(&it, &doc) &&
                   bson_iter_find_descendant(&it, "updates.0.u.decision.abortStatus.code", &it));
            ASSERT_INT_EQ(bson_iter_as_int64(&it), cases[k].code);
        }
        bson_destroy(&doc);
        ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, COLL), 0);
        /* the retry after the end gets the same abort */
        ASSERT_INT_EQ(commit(&e, 6, NULL, 0, &st), cases[k].code);
        env_cleanup(&e);
    }
}

SHL_TEST(txn_coord_retries_prepare_and_delivery_on_retryable_errors)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;

    env_init(&e);
    shl_remote_fake_script_error(e.fake, "shA", "prepareTransaction", SHL_CODE_HOST_UNREACHABLE,
                                 2);
    shl_remote_fake_script(e.fake, "shA", "prepareTransaction",
                           "{'ok': 1, 'prepareTimestamp': " TS(20, 1) "}", 1);
    shl_remote_fake_script(e.fake, "shB", "prepareTransaction",
                           "{'ok': 1, 'prepareTimestamp': " TS(19, 1) "}", 1);
    /* the decision is delivered until acknowledged, whatever the error */
    shl_remote_fake_script_error(e.fake, "shB", "commitTransaction", SHL_CODE_HOST_UNREACHABLE,
                                 2);
    shl_remote_fake_script(e.fake, "shB", "commitTransaction",
                           "{'ok': 0, 'code': 91, 'errmsg': 'shutting down'}", 1);
    ASSERT_INT_EQ(commit(&e, 7, AB, 2, &st), 0);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "shA", "prepareTransaction"), 3);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "shB", "prepareTransaction"), 1);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "shA", "commitTransaction"), 1);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "shB", "commitTransaction"), 4);
    ASSERT(sent(&e, "shB", "commitTransaction", 3,
                "{'commitTransaction': 1, 'commitTimestamp': " TS(20, 1) ", 'lsid': {'id': 42}, "
                "'txnNumber': {'$numberLong': '7'}, 'autocommit': false, 'writeConcern': {'w': "
                "'majority'}}"));
    env_cleanup(&e);
}

static void
wait_idle(env_t *e)
{
    while (shl_coord_service_count(e->svc) > 0) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
}

SHL_TEST(txn_coord_resumes_from_its_document)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_error_t err;
    /* a decision was written before the crash: deliver it, prepare nothing */
    bson_t *decided = bson_new_from_json(
        (const uint8_t *)"{\"_id\": {\"lsid\": {\"id\": 42}, \"txnNumber\": {\"$numberLong\": "
                         "\"8\"}}, \"participants\": [\"shA\", \"shB\"], \"decision\": "
                         "{\"decision\": \"commit\", \"commitTimestamp\": {\"$timestamp\": "
                         "{\"t\": 30, \"i\": 2}}}}",
        -1, &err);
    /* only the participant list: prepare again, then decide */
    bson_t *listed = bson_new_from_json(
        (const uint8_t *)"{\"_id\": {\"lsid\": {\"id\": 42}, \"txnNumber\": {\"$numberLong\": "
                         "\"9\"}}, \"participants\": [\"shA\", \"shB\"]}",
        -1, &err);

    env_init(&e);
    shl_remote_fake_store_insert(e.fake, COLL, decided);
    shl_remote_fake_store_insert(e.fake, COLL, listed);
    shl_remote_fake_script(e.fake, "shA", "prepareTransaction",
                           "{'ok': 1, 'prepareTimestamp': " TS(31, 1) "}", 1);
    shl_remote_fake_script(e.fake, "shB", "prepareTransaction",
                           "{'ok': 0, 'code': 251, 'errmsg': 'aborted by the restart'}", 1);
    ASSERT_INT_EQ(shl_coord_service_recover(e.svc, &shard_txn_coord_type, &st), 0);
    wait_idle(&e);
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, COLL), 0);
    /* txn 8: commit at its persisted timestamp to both, no prepare */
    ASSERT(sent(&e, "shA", "commitTransaction", 0,
                "{'commitTransaction': 1, 'commitTimestamp': " TS(30, 2) ", 'lsid': {'id': 42}, "
                "'txnNumber': {'$numberLong': '8'}, 'autocommit': false, 'writeConcern': {'w': "
                "'majority'}}"));
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "shB", "commitTransaction"), 1);
    /* txn 9: prepared again, shB voted abort, both told to abort */
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "*", "prepareTransaction"), 2);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "*", "abortTransaction"), 2);
    bson_destroy(decided);
    bson_destroy(listed);
    env_cleanup(&e);
}

SHL_TEST(txn_coord_join_without_coordinator_asks_the_local_participant)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *lsid_bin = BCON_NEW("id", BCON_BIN(BSON_SUBTYPE_UUID, (const uint8_t *)"0123456789abcdef", 16));
    bson_t *other = BCON_NEW("id", BCON_BIN(BSON_SUBTYPE_UUID, (const uint8_t *)"fedcba9876543210", 16));
    bson_t *rec = BCON_NEW("_id", "{", "id", BCON_BIN(BSON_SUBTYPE_UUID,
                                                      (const uint8_t *)"0123456789abcdef", 16),
                           "}", "txnNum", BCON_INT64(11), "state", BCON_UTF8("committed"));

    env_init(&e);
    /* nothing known here: NoSuchTransaction */
    ASSERT_INT_EQ(commit(&e, 11, NULL, 0, &st), SHL_CODE_NO_SUCH_TRANSACTION);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "self", "find"), 1);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "*", "prepareTransaction"), 0);
    /* the local participant committed txn 11 of this session: committed */
    shl_remote_fake_store_insert(e.fake, "transactions", rec);
    ASSERT_INT_EQ(shard_txn_coord_commit(e.svc, lsid_bin, 11, NULL, 0, &st), 0);
    /* another txnNumber, or another session: not committed */
    ASSERT_INT_EQ(shard_txn_coord_commit(e.svc, lsid_bin, 12, NULL, 0, &st),
                  SHL_CODE_NO_SUCH_TRANSACTION);
    ASSERT_INT_EQ(shard_txn_coord_commit(e.svc, other, 11, NULL, 0, &st),
                  SHL_CODE_NO_SUCH_TRANSACTION);
    bson_destroy(rec);
    bson_destroy(other);
    bson_destroy(lsid_bin);
    env_cleanup(&e);
}

SHL_TEST(txn_coord_retry_after_commit_everywhere_commits)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;

    env_init(&e);
    /* a coordinator that forgot (a restart) is asked again: the participants committed */
    shl_remote_fake_script(e.fake, "*", "prepareTransaction",
                           "{'ok': 0, 'code': 256, 'errmsg': 'committed'}", -1);
    ASSERT_INT_EQ(commit(&e, 12, AB, 2, &st), 0);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "*", "commitTransaction"), 2);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "*", "abortTransaction"), 0);
    env_cleanup(&e);
}
