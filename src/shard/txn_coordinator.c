/*
 * txn_coordinator.c -- the two-phase-commit coordinator (txn_coordinator.h; seeds/000
 * "Two-phase Commit Protocol") as a type of the coordinator framework, and the
 * coordinateCommitTransaction command. Participants never decide alone: once a decision is
 * durable it is delivered until every participant acknowledges it, across restarts.
 */
#include "shard/txn_coordinator.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "db/node.h"
#include "shard/shard_private.h"

#define TC_COLL "transaction_coordinators"
/* One prepare attempt waits at most this long for a participant's answer. */
#define TC_PREPARE_TIMEOUT_MS 30000
#define TC_BACKOFF_MAX_MS 1000

/* ------------------------------------------------------------------------- helpers */

static void
sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

    while (ms > 0 && nanosleep(&ts, &ts) != 0) {
    }
}

/* The participants of a state document (a NULL-terminated array, bson_strfreev). */
static char **
participants_of(const bson_t *doc, size_t *n)
{
    bson_iter_t it, arr;
    char **names = bson_malloc0(sizeof(char *));
    size_t k = 0;

    if (bson_iter_init_find(&it, doc, "participants") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &arr)) {
        while (bson_iter_next(&arr)) {
            if (BSON_ITER_HOLDS_UTF8(&arr)) {
                names = bson_realloc(names, sizeof(char *) * (k + 2));
                names[k++] = bson_strdup(bson_iter_utf8(&arr, NULL));
                names[k] = NULL;
            }
        }
    }
    *n = k;
    return names;
}

/* {<name>: 1, lsid, txnNumber, autocommit: false} from the document's _id, plus 'extra'. */
static bson_t *
txn_command(const bson_t *doc, const char *name, const bson_t *extra)
{
    bson_t *cmd = bson_new();
    bson_iter_t it, id;

    BSON_APPEND_INT32(cmd, name, 1);
    if (extra != NULL) {
        bson_concat(cmd, extra);
    }
    if (bson_iter_init_find(&it, doc, "_id") && bson_iter_recurse(&it, &id)) {
        while (bson_iter_next(&id)) {
            bson_append_iter(cmd, bson_iter_key(&id), -1, &id);
        }
    }
    BSON_APPEND_BOOL(cmd, "autocommit", false);
    return cmd;
}

static bool
ts_less(uint32_t t1, uint32_t i1, uint32_t t2, uint32_t i2)
{
    return t1 < t2 || (t1 == t2 && i1 < i2);
}

/* A hash of a document's bytes (FNV-1a): the tables below compare it before the bytes. */
static uint64_t
doc_hash(const bson_t *doc)
{
    const uint8_t *p = bson_get_data(doc);
    uint64_t h = 1469598103934665603ULL;

    for (uint32_t k = 0; k < doc->len; k++) {
        h = (h ^ p[k]) * 1099511628211ULL;
    }
    return h;
}

/* The decision of a document: 1 commit, 0 abort, -1 none yet. */
static int
decision_of(const bson_t *doc, uint32_t *t, uint32_t *i, shl_status_t *abort_st)
{
    bson_iter_t it;
    int d = -1;

    if (bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, "decision.decision", &it) &&
        BSON_ITER_HOLDS_UTF8(&it)) {
        d = strcmp(bson_iter_utf8(&it, NULL), "commit") == 0 ? 1 : 0;
    }
    if (d == 1 && bson_iter_init(&it, doc) &&
        bson_iter_find_descendant(&it, "decision.commitTimestamp", &it) &&
        BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        bson_iter_timestamp(&it, t, i);
    }
    if (d == 0 && abort_st != NULL) {
        int code = SHL_CODE_NO_SUCH_TRANSACTION;
        const char *msg = "the transaction was aborted";
        bson_iter_t f;

        if (bson_iter_init(&f, doc) &&
            bson_iter_find_descendant(&f, "decision.abortStatus.code", &f) &&
            BSON_ITER_HOLDS_NUMBER(&f)) {
            code = (int)bson_iter_as_int64(&f);
        }
        if (bson_iter_init(&f, doc) &&
            bson_iter_find_descendant(&f, "decision.abortStatus.errmsg", &f) &&
            BSON_ITER_HOLDS_UTF8(&f)) {
            msg = bson_iter_utf8(&f, NULL);
        }
        shl_status_set(abort_st, code, "%s", msg);
    }
    return d;
}

/* The document with 'decision' set. */
static void
set_decision(shl_coord_t *c, bool commit, uint32_t t, uint32_t i, const shl_status_t *why)
{
    bson_t doc = BSON_INITIALIZER, dec, as;

    bson_copy_to_excluding_noinit(shl_coord_doc(c), &doc, "decision", NULL);
    BSON_APPEND_DOCUMENT_BEGIN(&doc, "decision", &dec);
    BSON_APPEND_UTF8(&dec, "decision", commit ? "commit" : "abort");
    if (commit) {
        BSON_APPEND_TIMESTAMP(&dec, "commitTimestamp", t, i);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(&dec, "abortStatus", &as);
        BSON_APPEND_INT32(&as, "code", why->code);
        BSON_APPEND_UTF8(&as, "codeName", shl_code_name(why->code));
        BSON_APPEND_UTF8(&as, "errmsg", why->reason);
        bson_append_document_end(&dec, &as);
    }
    bson_append_document_end(&doc, &dec);
    shl_coord_doc_set(c, &doc);
    bson_destroy(&doc);
}

/* ------------------------------------------------ deadlines of starting coordinators */

/* Each coordinator's deadline, from coordinateCommitTransaction to its first prepare round
 * (the state document keeps MongoDB's schema, which has no deadline). */
#define TC_DEADLINES 64

static struct {
    pthread_mutex_t mu;
    bson_t *ids[TC_DEADLINES];         /* guarded by mu: {_id: {lsid, txnNumber}}, or NULL */
    uint64_t hash[TC_DEADLINES];       /* guarded by mu: doc_hash of ids[k] */
    int64_t deadline_us[TC_DEADLINES]; /* guarded by mu */
    size_t next;                       /* guarded by mu */
} deadlines = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The transaction's lifetime limit in microseconds. */
static int64_t
lifetime_us(void)
{
    int64_t limit_s = shl_opt_int(SHL_OPT_transactionLifetimeLimitSeconds);

    if (limit_s <= 0) {
        limit_s = 60; /* options not loaded (unit tests): MongoDB's default */
    }
    return limit_s * 1000000;
}

static void
deadline_put(const bson_t *id, int64_t deadline_us)
{
    pthread_mutex_lock(&deadlines.mu);
    if (deadlines.ids[deadlines.next] != NULL) {
        bson_destroy(deadlines.ids[deadlines.next]);
    }
    deadlines.ids[deadlines.next] = bson_copy(id);
    deadlines.hash[deadlines.next] = doc_hash(id);
    deadlines.deadline_us[deadlines.next] = deadline_us;
    deadlines.next = (deadlines.next + 1) % TC_DEADLINES;
    pthread_mutex_unlock(&deadlines.mu);
}

/* The deadline put for the coordinator of state document 'doc' (taken off the table), or
 * transactionLifetimeLimitSeconds from now. */
static int64_t
deadline_take(const bson_t *doc)
{
    int64_t deadline_us = 0;
    bson_t id = BSON_INITIALIZER;
    bson_iter_t it;
    uint64_t h;

    if (bson_iter_init_find(&it, doc, "_id")) {
        bson_append_iter(&id, "_id", 3, &it);
    }
    h = doc_hash(&id);
    pthread_mutex_lock(&deadlines.mu);
    for (size_t k = 0; k < TC_DEADLINES && deadline_us == 0; k++) {
        if (deadlines.ids[k] != NULL && deadlines.hash[k] == h &&
            bson_equal(deadlines.ids[k], &id)) {
            deadline_us = deadlines.deadline_us[k];
            bson_destroy(deadlines.ids[k]);
            deadlines.ids[k] = NULL;
        }
    }
    pthread_mutex_unlock(&deadlines.mu);
    bson_destroy(&id);
    return deadline_us != 0 ? deadline_us : shl_clock_mono_us() + lifetime_us();
}

/* ------------------------------------------------------------------ transport */

/* The real transport, with the pool and registry created on first use. */
static void
shard_send(void *arg, const shl_remote_request_t *reqs, size_t n, int64_t timeout_ms,
           shl_remote_result_t *results)
{
    shard_state_t *s = arg;
    shl_remote_real_t real = {.svc = s->svc};
    shl_remote_t r;
    shl_status_t st = SHL_STATUS_INIT;

    if (shard_net_get(s, &real.pool, &real.registry, &st) != 0) {
        real.pool = NULL;
        real.registry = NULL;
    }
    shl_remote_init_real(&r, &real);
    r.send(r.arg, reqs, n, timeout_ms, results);
}

/* This shard's id when 'c' runs over the shard's real transport (shard_send, which knows
 * its shard state), else "" (a fake transport in unit tests). */
static void
own_shard_id(const shl_coord_t *c, char *out, size_t n)
{
    const shl_remote_t *r = shl_coord_remote(c);
    shard_identity_t id;

    out[0] = '\0';
    if (r->send == shard_send && shard_get_identity(r->arg, &id)) {
        snprintf(out, n, "%s", id.shard_name);
    }
}

/* ------------------------------------------------------------------------- phases */

static int
phase_write_participants(shl_coord_t *c, shl_status_t *st)
{
    /* The framework's checkpoint before this phase wrote the participant list. */
    (void)c;
    (void)st;
    return 0;
}

/* Send 'cmd' to the participants not yet done (only_self: only to this shard's own), once. */
static void
send_to(shl_coord_t *c, char **names, const bool *done, size_t n, const bson_t *cmd, bool only_self,
        int64_t timeout_ms, shl_remote_result_t *res, size_t *index, size_t *m)
{
    shl_remote_request_t *reqs = bson_malloc0(sizeof *reqs * (n ? n : 1));
    shl_remote_options_t opts = {.w = "majority", .timeout_ms = timeout_ms};
    char self[SHL_SHARD_ID_MAX];

    /* This shard's own participant runs in-process, while the others' requests are in
     * flight (shl_remote_init_real), not over the loopback. */
    own_shard_id(c, self, sizeof self);
    *m = 0;
    for (size_t k = 0; k < n; k++) {
        if (!done[k] && (!only_self || strcmp(names[k], self) == 0)) {
            reqs[*m].target = strcmp(names[k], self) == 0 ? shl_remote_target_self()
                                                          : shl_remote_target_shard(names[k]);
            reqs[*m].db = "admin";
            reqs[*m].cmd = cmd;
            index[(*m)++] = k;
        }
    }
    shl_remote_run_many(shl_coord_remote(c), reqs, *m, &opts, res);
    bson_free(reqs);
}

static int
phase_prepare(shl_coord_t *c, shl_status_t *st)
{
    size_t n, m;
    char **names = participants_of(shl_coord_doc(c), &n);
    bool *done = bson_malloc0(n + 1);
    size_t *index = bson_malloc0(sizeof *index * (n + 1));
    shl_remote_result_t *res = bson_malloc0(sizeof *res * (n + 1));
    bson_t *cmd = txn_command(shl_coord_doc(c), "prepareTransaction", NULL);
    shl_status_t abort_st = SHL_STATUS_INIT;
    uint32_t max_t = 0, max_i = 0;
    size_t left = n;
    int64_t backoff = 50;
    bool abort = false, flushed;
    int ret = 0;
    /* MongoDB creates the coordinator at the transaction's first statement on its shard,
     * with a deadline transactionLifetimeLimitSeconds later; ours knows that start from the
     * local participant (a resumed one counts from its resumption). Participants that do
     * not answer (unreachable, retryable errors) until then are votes to abort. */
    int64_t deadline_us = deadline_take(shl_coord_doc(c));
    /* The participant list went to disk without a flush of its own (first_insert_unflushed):
     * this shard's own prepare goes first and alone -- its journal wait covers the list,
     * written before it in the one log -- and the others are asked only once the list is
     * durable, so that no participant is ever prepared under a list a crash could lose. */
    bool gate = shl_coord_doc_unflushed(c);

    while (left > 0 && !abort) {
        int64_t left_ms = (deadline_us - shl_clock_mono_us()) / 1000;
        if (left_ms <= 0) {
            /* MongoDB's coordinator deadline: the votes not in by now count as abort. */
            shl_status_set(&abort_st, SHL_CODE_NO_SUCH_TRANSACTION,
                           "Transaction exceeded deadline: %zu participant(s) did not vote in "
                           "transactionLifetimeLimitSeconds",
                           left);
            SHL_LOG_INFO(TXN, 4170104, "transaction coordinator deadline passed before the votes",
                         "missing", BCON_INT64((int64_t)left));
            abort = true;
            break;
        }
        send_to(c, names, done, n, cmd, gate,
                left_ms < TC_PREPARE_TIMEOUT_MS ? left_ms : TC_PREPARE_TIMEOUT_MS, res, index, &m);
        for (size_t j = 0; j < m; j++) {
            size_t k = index[j];
            bson_iter_t it;

            if (res[j].code == 0 && bson_iter_init_find(&it, &res[j].reply, "prepareTimestamp") &&
                BSON_ITER_HOLDS_TIMESTAMP(&it)) {
                uint32_t t, i;
                bson_iter_timestamp(&it, &t, &i);
                if (ts_less(max_t, max_i, t, i)) {
                    max_t = t;
                    max_i = i;
                }
                done[k] = true;
                left--;
            } else if (res[j].code == SHL_CODE_TRANSACTION_COMMITTED) {
                /* Committed already: an earlier coordinator decided commit and delivered it
                 * (its document is gone), so this is a retry; commit stands. */
                done[k] = true;
                left--;
            } else if (res[j].code == 0) {
                /* An ok reply without a prepareTimestamp is not a vote to commit. */
                shl_status_set(&abort_st, SHL_CODE_NO_SUCH_TRANSACTION,
                               "participant %s answered prepareTransaction without a "
                               "prepareTimestamp",
                               names[k]);
                abort = true;
            } else if (!shl_remote_is_retryable(res[j].code)) {
                /* A vote to abort (NoSuchTransaction, TransactionTooOld, ...). */
                abort_st = res[j].status;
                abort_st.labels = 0;
                abort_st.extra_len = 0;
                abort = true;
                SHL_LOG_INFO(TXN, 4170101, "participant voted to abort", "shardId",
                             BCON_UTF8(names[k]), "code", BCON_INT32(res[j].code), "reason",
                             BCON_UTF8(res[j].status.reason));
            }
        }
        flushed = m == 1 && res[0].code == 0 && done[index[0]];
        shl_remote_results_cleanup(res, m);
        if (gate && !abort) {
            /* No vote of our own made the list durable (no local participant, or a failed
             * attempt): a durable write of it does, before any other participant is asked. */
            gate = false;
            if (!flushed && (ret = shl_coord_persist(c, st)) != 0) {
                break;
            }
            continue;
        }
        if (left > 0 && !abort) {
            if (shl_coord_interrupted(c)) {
                ret = shl_coord_check_halted(c, st);
                break;
            }
            sleep_ms(backoff);
            backoff = backoff * 2 > TC_BACKOFF_MAX_MS ? TC_BACKOFF_MAX_MS : backoff * 2;
        }
    }
    if (ret == 0 && !abort && max_t == 0 && max_i == 0) {
        /* Every participant had committed: any non-null time is accepted by a commit retry. */
        max_t = 1;
    }
    if (ret == 0) {
        set_decision(c, !abort, max_t, max_i, &abort_st);
    }
    bson_destroy(cmd);
    bson_free(res);
    bson_free(index);
    bson_free(done);
    bson_strfreev(names);
    return ret;
}

/* The result: {decision} of the state document. */
static void
set_decision_result(shl_coord_t *c)
{
    bson_t result = BSON_INITIALIZER;
    bson_iter_t it;

    if (bson_iter_init_find(&it, shl_coord_doc(c), "decision")) {
        bson_append_iter(&result, "decision", -1, &it);
    }
    shl_coord_set_result(c, &result);
    bson_destroy(&result);
}

/* The framework's checkpoint before this phase wrote the decision: it is the result, and the
 * phase answers the commit request (as MongoDB's coordinator does once its decision is
 * durable; the participants then block readers of the prepared writes until it reaches
 * them). */
static int
phase_write_decision(shl_coord_t *c, shl_status_t *st)
{
    (void)st;
    set_decision_result(c);
    return 0;
}

static int
phase_deliver(shl_coord_t *c, shl_status_t *st)
{
    size_t n, m;
    char **names = participants_of(shl_coord_doc(c), &n);
    bool *done = bson_malloc0(n + 1);
    size_t *index = bson_malloc0(sizeof *index * (n + 1));
    shl_remote_result_t *res = bson_malloc0(sizeof *res * (n + 1));
    uint32_t t = 0, i = 0;
    int d = decision_of(shl_coord_doc(c), &t, &i, NULL);
    bson_t extra = BSON_INITIALIZER;
    bson_t *cmd;
    size_t left = n;
    int64_t backoff = 50;
    int ret = 0;

    SHL_INVARIANT(d >= 0);
    set_decision_result(c); /* a coordinator resumed here did not run writingDecision */
    if (d == 1) {
        BSON_APPEND_TIMESTAMP(&extra, "commitTimestamp", t, i);
    }
    cmd = txn_command(shl_coord_doc(c), d == 1 ? "commitTransaction" : "abortTransaction", &extra);
    while (left > 0) {
        send_to(c, names, done, n, cmd, false, TC_PREPARE_TIMEOUT_MS, res, index, &m);
        for (size_t j = 0; j < m; j++) {
            int code = res[j].code;
            /* An abort is acknowledged by a participant that no longer has the transaction; a
             * commit by one whose session went on to a newer transaction, which a prepared
             * one never lets happen before its decision -- this one, delivered before a
             * restart of the coordinator. */
            bool acked = code == 0 || code == SHL_CODE_TRANSACTION_TOO_OLD ||
                         (d == 0 && code == SHL_CODE_NO_SUCH_TRANSACTION);
            if (acked) {
                done[index[j]] = true;
                left--;
            } else {
                SHL_LOG_INFO(TXN, 4170102, "participant did not acknowledge the decision yet",
                             "shardId", BCON_UTF8(names[index[j]]), "code", BCON_INT32(code),
                             "reason", BCON_UTF8(res[j].status.reason));
            }
        }
        shl_remote_results_cleanup(res, m);
        if (left > 0) {
            if (shl_coord_interrupted(c)) {
                ret = shl_coord_check_halted(c, st);
                break;
            }
            sleep_ms(backoff);
            backoff = backoff * 2 > TC_BACKOFF_MAX_MS ? TC_BACKOFF_MAX_MS : backoff * 2;
        }
    }
    bson_destroy(&extra);
    bson_destroy(cmd);
    bson_free(res);
    bson_free(index);
    bson_free(done);
    bson_strfreev(names);
    return ret;
}

static const shl_coord_phase_t tc_phases[] = {
    {"writingParticipantList", phase_write_participants, true},
    {"waitingForVotes", phase_prepare, false},
    {"writingDecision", phase_write_decision, true},
    {"waitingForDecisionAcks", phase_deliver, false},
};

/* A document without a decision prepares again (participants answer a repeated prepare
 * with their prepareTimestamp); one with a decision delivers it. */
static int
tc_resume_phase(const bson_t *doc)
{
    return decision_of(doc, &(uint32_t){0}, &(uint32_t){0}, NULL) >= 0 ? 3 : 1;
}

/* A second coordinateCommitTransaction for the same transaction joins, whatever its list. */
static bool
tc_same(const bson_t *running, const bson_t *request)
{
    (void)running;
    (void)request;
    return true;
}

/* MongoDB's coordinateCommitReturnImmediatelyAfterPersistingDecision: answer once the
 * decision is durable, or (7.0's default) once every participant acknowledged it -- then the
 * client's next transaction never meets a participant still prepared. */
static const char *
tc_answers_after(void)
{
    return shl_opt_bool(SHL_OPT_coordinateCommitReturnImmediatelyAfterPersistingDecision)
               ? "writingDecision"
               : "waitingForDecisionAcks";
}

const shl_coord_type_t shard_txn_coord_type = {
    .name = "TransactionCoordinator",
    .coll = TC_COLL,
    .phases = tc_phases,
    .nphases = sizeof tc_phases / sizeof tc_phases[0],
    .resume_phase = tc_resume_phase,
    .same = tc_same,
    .answers_after = "writingDecision",
    .answers_after_now = tc_answers_after,
    /* The participant list's flush is the local prepare's (phase_prepare). */
    .first_insert_unflushed = true,
    .max_attempts = -1, /* state document writes: until they succeed or the process stops */
    .backoff_ms = 100,
};

/* ------------------------------------------------- recent decisions, for late retries */

#define TC_RECENT 1024

static struct {
    pthread_mutex_t mu;
    bson_t *ids[TC_RECENT];          /* guarded by mu: {_id: {lsid, txnNumber}} */
    uint64_t hash[TC_RECENT];        /* guarded by mu: doc_hash of ids[k] */
    shl_status_t outcome[TC_RECENT]; /* guarded by mu: code 0 = committed */
    size_t next;                     /* guarded by mu */
} recent = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void
recent_put(const bson_t *id, int code, const shl_status_t *st)
{
    pthread_mutex_lock(&recent.mu);
    if (recent.ids[recent.next] != NULL) {
        bson_destroy(recent.ids[recent.next]);
    }
    recent.ids[recent.next] = bson_copy(id);
    recent.hash[recent.next] = doc_hash(id);
    shl_status_clear(&recent.outcome[recent.next]);
    if (code != 0) {
        recent.outcome[recent.next] = *st;
    }
    recent.next = (recent.next + 1) % TC_RECENT;
    pthread_mutex_unlock(&recent.mu);
}

static bool
recent_get(const bson_t *id, shl_status_t *out)
{
    bool found = false;
    uint64_t h = doc_hash(id);

    pthread_mutex_lock(&recent.mu);
    for (size_t k = 0; k < TC_RECENT && !found; k++) {
        if (recent.ids[k] != NULL && recent.hash[k] == h && bson_equal(recent.ids[k], id)) {
            *out = recent.outcome[k];
            found = true;
        }
    }
    pthread_mutex_unlock(&recent.mu);
    return found;
}

void
shard_txn_coord_forget_all(void)
{
    pthread_mutex_lock(&recent.mu);
    for (size_t k = 0; k < TC_RECENT; k++) {
        if (recent.ids[k] != NULL) {
            bson_destroy(recent.ids[k]);
            recent.ids[k] = NULL;
        }
    }
    recent.next = 0;
    pthread_mutex_unlock(&recent.mu);
}

/* ------------------------------------------------------------------------ entry point */

/*
 * No coordinator runs and none decided recently (a restart since): the local participant's
 * config.transactions record tells whether this transaction committed here (MongoDB's
 * coordinateCommitTransaction falls back to the local participant the same way). The
 * coordinator's shard is always a participant, so "committed" here is the decision.
 */
/* abortTransaction of (lsid, txn_number) on this shard's own participant, best effort (an
 * unknown or finished transaction answers an error that changes nothing). */
static void
abort_local(shl_coord_service_t *svc, const bson_t *lsid, int64_t txn_number)
{
    shl_remote_target_t self = shl_remote_target_self();
    shl_remote_options_t opts = {.backoff_ms = 50};
    bson_t cmd = BSON_INITIALIZER, reply;
    shl_status_t st = SHL_STATUS_INIT;

    BSON_APPEND_INT32(&cmd, "abortTransaction", 1);
    BSON_APPEND_DOCUMENT(&cmd, "lsid", lsid);
    BSON_APPEND_INT64(&cmd, "txnNumber", txn_number);
    BSON_APPEND_BOOL(&cmd, "autocommit", false);
    if (shl_remote_run(shl_coord_service_remote(svc), &self, "admin", &cmd, &opts, &reply, &st) ==
        0) {
        SHL_LOG_INFO(TXN, 4170105,
                     "aborted the local transaction the commit recovery found in "
                     "progress",
                     "txnNumber", BCON_INT64(txn_number));
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
}

static int
read_local_record(shl_coord_service_t *svc, const bson_t *lsid, int64_t txn_number,
                  bool *committed_out, bool *prepared_out, shl_status_t *st)
{
    shl_remote_target_t self = shl_remote_target_self();
    shl_remote_options_t opts = {.retry = SHL_REMOTE_RETRY_IDEMPOTENT, .backoff_ms = 50};
    bson_t cmd = BSON_INITIALIZER, filter, reply;
    bson_iter_t it, id, batch;
    bool committed = false, prepared = false;
    int ret;

    BSON_APPEND_UTF8(&cmd, "find", "transactions");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    if (bson_iter_init_find(&id, lsid, "id")) {
        bson_append_iter(&filter, "_id.id", -1, &id);
    }
    bson_append_document_end(&cmd, &filter);
    ret = shl_remote_run(shl_coord_service_remote(svc), &self, "config", &cmd, &opts, &reply, st);
    if (ret == 0 && bson_iter_init(&it, &reply) &&
        bson_iter_find_descendant(&it, "cursor.firstBatch", &batch) &&
        bson_iter_recurse(&batch, &it)) {
        while (bson_iter_next(&it) && !committed) {
            bson_t rec;
            bson_iter_t f, want;
            const uint8_t *data;
            uint32_t len;
            bool same_id, same_txn, is_committed;

            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
                continue;
            }
            bson_iter_document(&it, &len, &data);
            bson_init_static(&rec, data, len);
            same_id = bson_iter_init(&f, &rec) && bson_iter_find_descendant(&f, "_id.id", &f) &&
                      bson_iter_init_find(&want, lsid, "id") &&
                      bson_iter_value(&f)->value_type == BSON_TYPE_BINARY &&
                      bson_iter_value(&want)->value_type == BSON_TYPE_BINARY &&
                      bson_iter_value(&f)->value.v_binary.data_len ==
                          bson_iter_value(&want)->value.v_binary.data_len &&
                      memcmp(bson_iter_value(&f)->value.v_binary.data,
                             bson_iter_value(&want)->value.v_binary.data,
                             bson_iter_value(&f)->value.v_binary.data_len) == 0;
            same_txn = bson_iter_init_find(&f, &rec, "txnNum") && BSON_ITER_HOLDS_NUMBER(&f) &&
                       bson_iter_as_int64(&f) == txn_number;
            is_committed = bson_iter_init_find(&f, &rec, "state") && BSON_ITER_HOLDS_UTF8(&f) &&
                           strcmp(bson_iter_utf8(&f, NULL), "committed") == 0;
            committed = same_id && same_txn && is_committed;
            prepared = prepared || (same_id && same_txn && bson_iter_init_find(&f, &rec, "state") &&
                                    BSON_ITER_HOLDS_UTF8(&f) &&
                                    strcmp(bson_iter_utf8(&f, NULL), "prepared") == 0);
        }
    }
    *committed_out = committed;
    *prepared_out = prepared;
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return ret;
}

/* How long the recovery join waits for a prepared local transaction to be decided. */
#define TC_RECOVER_PREPARED_WAIT_MS 30000

static int
local_participant_decision(shl_coord_service_t *svc, const bson_t *lsid, int64_t txn_number,
                           shl_status_t *st)
{
    bool committed = false, prepared = false;
    int64_t waited_ms = 0;
    int ret;

    ret = read_local_record(svc, lsid, txn_number, &committed, &prepared, st);
    if (ret == 0 && !committed && !prepared) {
        /* As MongoDB: a local transaction still in progress is aborted before the answer,
         * so the original router cannot commit what this answer called aborted. */
        abort_local(svc, lsid, txn_number);
    }
    /* As MongoDB, a prepared one is waited for until it is decided. */
    while (ret == 0 && prepared && waited_ms < TC_RECOVER_PREPARED_WAIT_MS) {
        sleep_ms(50);
        waited_ms += 50;
        ret = read_local_record(svc, lsid, txn_number, &committed, &prepared, st);
    }
    if (ret == 0 && prepared) {
        /* Still undecided: the outcome is unknown to this answer (the router labels it so). */
        ret = shl_status_set(st, SHL_CODE_MAX_TIME_MS_EXPIRED,
                             "Recovering the transaction's outcome: the local participant is "
                             "still prepared");
    } else if (ret == 0 && !committed) {
        ret = shl_status_set(st, SHL_CODE_NO_SUCH_TRANSACTION,
                             "Recovering the transaction's outcome found the transaction aborted");
    }
    return ret;
}

int
shard_txn_coord_commit(shl_coord_service_t *svc, const bson_t *lsid, int64_t txn_number,
                       const char *const *participants, size_t n, shl_status_t *st)
{
    return shard_txn_coord_commit_started(svc, lsid, txn_number, participants, n, 0, st);
}

int
shard_txn_coord_commit_started(shl_coord_service_t *svc, const bson_t *lsid, int64_t txn_number,
                               const char *const *participants, size_t n, int64_t started_us,
                               shl_status_t *st)
{
    bson_t doc = BSON_INITIALIZER, id, arr, idonly = BSON_INITIALIZER, result;
    shl_status_t prior = SHL_STATUS_INIT;
    uint32_t t, i;
    int ret = 0;

    BSON_APPEND_DOCUMENT_BEGIN(&doc, "_id", &id);
    BSON_APPEND_DOCUMENT(&id, "lsid", lsid);
    BSON_APPEND_INT64(&id, "txnNumber", txn_number);
    bson_append_document_end(&doc, &id);
    bson_concat(&idonly, &doc);
    BSON_APPEND_ARRAY_BEGIN(&doc, "participants", &arr);
    for (size_t k = 0; k < n; k++) {
        char key[24];
        snprintf(key, sizeof key, "%zu", k);
        BSON_APPEND_UTF8(&arr, key, participants[k]);
    }
    bson_append_array_end(&doc, &arr);

    if (n == 0) {
        ret = shl_coord_join(svc, &shard_txn_coord_type, &idonly, 0, &result, st);
    } else if (recent_get(&idonly, &prior)) {
        /* A retry after the end: the decision, without running again. */
        bson_init(&result);
        ret = -1;
    } else {
        deadline_put(&idonly, (started_us > 0 ? started_us : shl_clock_mono_us()) + lifetime_us());
        ret = shl_coord_run(svc, &shard_txn_coord_type, &doc, 0, &result, st);
    }
    if (ret == -1 || (n == 0 && ret == SHL_CODE_NO_SUCH_KEY)) {
        if (ret == -1 || recent_get(&idonly, &prior)) {
            ret = prior.code;
            if (ret != 0) {
                *st = prior;
            }
        } else {
            ret = local_participant_decision(svc, lsid, txn_number, st);
        }
    } else if (ret == 0) {
        shl_status_t abort_st = SHL_STATUS_INIT;
        if (decision_of(&result, &t, &i, &abort_st) == 0) {
            /* The abort's own status, in context, as MongoDB answers it. */
            ret = shl_status_set(st, abort_st.code, "Transaction was aborted :: caused by :: %s",
                                 abort_st.reason);
        }
        recent_put(&idonly, ret, st);
    }
    bson_destroy(&result);
    bson_destroy(&idonly);
    bson_destroy(&doc);
    return ret;
}

static int
cmd_coordinate_commit(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    bson_iter_t it, arr, f;
    const char **names = NULL;
    size_t n = 0;
    int ret = 0;

    (void)reply;
    if (!op->has_lsid || !op->has_txn_number) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "coordinateCommitTransaction must be run with a session id and txnNumber");
    }
    if (s->coords == NULL) {
        SHL_FAIL(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED,
                 "Cannot accept sharding commands if sharding state has not been initialized");
    }
    if (!bson_iter_init_find(&it, cmd, "participants") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &arr)) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'coordinateCommitTransaction.participants' is missing but a "
                 "required field");
    }
    names = bson_malloc0(sizeof(char *));
    while (bson_iter_next(&arr)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bson_iter_recurse(&arr, &f) ||
            !bson_iter_find(&f, "shardId") || !BSON_ITER_HOLDS_UTF8(&f)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "each participant of coordinateCommitTransaction must be {shardId: string}");
        }
        for (size_t k = 0; k < n; k++) {
            if (strcmp(names[k], bson_iter_utf8(&f, NULL)) == 0) {
                SHL_FAIL(st, 51162, "Participant list contains duplicate shard %s", names[k]);
            }
        }
        names = bson_realloc(names, sizeof(char *) * (n + 2));
        names[n++] = bson_iter_utf8(&f, NULL);
        names[n] = NULL;
    }
    /* The coordinator's shard is the transaction's first participant: its local
     * transaction started with the transaction. */
    ret = shard_txn_coord_commit_started(
        s->coords, &op->lsid, op->txn_number, names, n,
        shl_node_txn_started_us(op->svc, &op->lsid_key, op->txn_number), st);
done:
    bson_free(names);
    return ret;
}

static const shl_command_t txn_coord_cmds[] = {
    {.name = "coordinateCommitTransaction",
     .run = cmd_coordinate_commit,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY | SHL_CMD_IN_TXN,
     .help = "internal: two-phase commit of a transaction over its participant shards"},
};

void
shard_txn_coord_register(shl_command_registry_t *reg)
{
    for (size_t k = 0; k < sizeof txn_coord_cmds / sizeof txn_coord_cmds[0]; k++) {
        shl_command_registry_add(reg, &txn_coord_cmds[k]);
    }
}

/* --------------------------------------------------- the shard's transport and service */

void
shard_txn_coord_init(shard_state_t *s)
{
    s->remote.send = shard_send;
    s->remote.arg = s;
    s->coords = shl_coord_service_new(&s->remote);
}

void
shard_txn_coord_recover(shard_state_t *s)
{
    shl_status_t st = SHL_STATUS_INIT;

    if (shl_coord_service_recover(s->coords, &shard_txn_coord_type, &st) != 0) {
        SHL_LOG_WARNING(TXN, 4170103, "could not read config.transaction_coordinators", "reason",
                        BCON_UTF8(st.reason));
    }
}

void
shard_txn_coord_shutdown(shard_state_t *s)
{
    shl_coord_service_destroy(s->coords);
    s->coords = NULL;
}
