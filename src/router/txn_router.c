/*
 * txn_router.c -- the router's per-session transaction state: checkout, begin/continue,
 * participants, the fields of each request, implicit abort and error labels
 * (txn_router.h; docs/design/transactions.md "Router").
 */
#include "router/txn_router.h"

#include <pthread.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "base/str.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "router/cluster_routing.h"
#include "router/txn_router_private.h"

#define CATALOG_BUCKETS 256

/* The shard the client's thread last answered a statement for (router_txn_end ->
 * router_txn_append_token, same request, same thread). */
static _Thread_local bool tl_has_token;
static _Thread_local char tl_token_shard[SHL_SHARD_ID_MAX];

struct router_txn_catalog {
    pthread_mutex_t mu;
    pthread_cond_t released;                /* broadcast when a state is checked in */
    router_txn_t *buckets[CATALOG_BUCKETS]; /* guarded by mu; states live until destroy */
};

router_txn_catalog_t *
router_txn_catalog_new(void)
{
    router_txn_catalog_t *c = bson_malloc0(sizeof(*c));

    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->released, NULL);
    return c;
}

void
router_txn_catalog_destroy(router_txn_catalog_t *c)
{
    if (c == NULL) {
        return;
    }
    for (size_t i = 0; i < CATALOG_BUCKETS; i++) {
        router_txn_t *t = c->buckets[i];
        while (t != NULL) {
            router_txn_t *next = t->next;
            bson_destroy(&t->read_concern);
            bson_free(t);
            t = next;
        }
    }
    pthread_cond_destroy(&c->released);
    pthread_mutex_destroy(&c->mu);
    bson_free(c);
}

/* The commands MongoDB runs inside a transaction (others: OperationNotSupportedInTransaction). */
static bool
allowed_in_txn(const char *name)
{
    static const char *const names[] = {"abortTransaction", "aggregate",     "commitTransaction",
                                        "create",           "createIndexes", "delete",
                                        "distinct",         "find",          "findandmodify",
                                        "findAndModify",    "getMore",       "insert",
                                        "killCursors",      "update",        NULL};
    bool found = false;

    for (size_t i = 0; !found && names[i] != NULL; i++) {
        found = strcmp(names[i], name) == 0;
    }
    return found;
}

static bool
is_decision(const char *name)
{
    return strcmp(name, "commitTransaction") == 0 || strcmp(name, "abortTransaction") == 0;
}

/* Reset 't' for transaction 'txn_number'. */
static void
reset_txn(router_txn_t *t, int64_t txn_number)
{
    t->txn_number = txn_number;
    t->nparts = 0;
    t->coordinator = -1;
    t->recovery_shard[0] = '\0';
    t->recovering_commit = false;
    t->has_read_concern = false;
    bson_reinit(&t->read_concern);
    t->at_cluster_time = 0;
    t->at_given = false;
    t->snapshot_retry = false;
    t->commit_type = ROUTER_COMMIT_NONE;
    t->stale_refused = false;
    t->stmt = 0;
    t->dead = false;
}

/* Keep the first statement's readConcern; snapshot: pick its atClusterTime. */
static void
set_read_concern(router_txn_t *t, const shl_op_ctx_t *op, uint64_t cluster_time)
{
    bson_iter_t it;
    bool snapshot = false;
    uint64_t at = 0, after = 0;

    if (!op->has_read_concern) {
        return;
    }
    t->has_read_concern = true;
    if (bson_iter_init(&it, &op->read_concern)) {
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (strcmp(k, "level") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
                snapshot = strcmp(bson_iter_utf8(&it, NULL), "snapshot") == 0;
            } else if (strcmp(k, "atClusterTime") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
                at = shl_bson_iter_timestamp_u64(&it);
            } else if (strcmp(k, "afterClusterTime") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
                after = shl_bson_iter_timestamp_u64(&it);
            }
        }
    }
    if (snapshot) {
        /* As mongos: the given time, else the newest this router knows (at least the
         * client's afterClusterTime), chosen once for every participant. */
        t->at_cluster_time = at != 0 ? at : (after > cluster_time ? after : cluster_time);
        t->at_given = at != 0;
    }
    bson_iter_init(&it, &op->read_concern);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bool drop =
            snapshot && (strcmp(k, "afterClusterTime") == 0 || strcmp(k, "atClusterTime") == 0);
        if (!drop) {
            bson_append_iter(&t->read_concern, NULL, 0, &it);
        }
    }
    if (snapshot && t->at_cluster_time != 0) {
        bson_append_timestamp(&t->read_concern, "atClusterTime", -1,
                              (uint32_t)(t->at_cluster_time >> 32),
                              (uint32_t)(t->at_cluster_time & 0xffffffffu));
    }
}

/* A new atClusterTime for the transaction's readConcern (a snapshot error's retry). */
static void
reset_at_cluster_time(router_txn_t *t, uint64_t at)
{
    bson_t rc = BSON_INITIALIZER;
    bson_iter_t it;

    t->at_cluster_time = at;
    if (bson_iter_init(&it, &t->read_concern)) {
        while (shl_iter_next(&it)) {
            if (strcmp(shl_iter_key(&it), "atClusterTime") != 0) {
                bson_append_iter(&rc, NULL, 0, &it);
            }
        }
    }
    bson_append_timestamp(&rc, "atClusterTime", -1, (uint32_t)(at >> 32),
                          (uint32_t)(at & 0xffffffffu));
    bson_reinit(&t->read_concern);
    bson_concat(&t->read_concern, &rc);
    bson_destroy(&rc);
}

/*
 * Free the states of bucket 'b' idle for longer than the logical session timeout (the
 * session itself expires then), except 'keep'. Under c->mu.
 */
static void
forget_idle(router_txn_catalog_t *c, size_t b, const shl_lsid_t *keep)
{
    int64_t limit_us = shl_opt_int(SHL_OPT_localLogicalSessionTimeoutMinutes) * 60 * 1000000;
    int64_t now = shl_clock_mono_us();
    router_txn_t **pp = &c->buckets[b];

    while (*pp != NULL) {
        router_txn_t *t = *pp;
        if (!t->checked_out && now - t->last_used_us > limit_us &&
            !shl_lsid_equal(&t->lsid, keep)) {
            *pp = t->next;
            bson_destroy(&t->read_concern);
            bson_free(t);
        } else {
            pp = &t->next;
        }
    }
}

/* Find or create the state of 'lsid' and wait until no one has it checked out (under mu). */
static int
checkout(router_txn_catalog_t *c, shl_op_ctx_t *op, router_txn_t **out, shl_status_t *st)
{
    size_t b = (size_t)(shl_lsid_hash(&op->lsid_key) % CATALOG_BUCKETS);
    router_txn_t *t;
    int ret = 0;

    *out = NULL;
    pthread_mutex_lock(&c->mu);
    forget_idle(c, b, &op->lsid_key);
    for (t = c->buckets[b]; t != NULL && !shl_lsid_equal(&t->lsid, &op->lsid_key); t = t->next) {
    }
    if (t == NULL) {
        t = bson_malloc0(sizeof(*t));
        t->lsid = op->lsid_key;
        bson_init(&t->read_concern);
        reset_txn(t, -1);
        t->next = c->buckets[b];
        c->buckets[b] = t;
    }
    while (t->checked_out && ret == 0) {
        (void)shl_cond_timedwait_ms(&c->released, &c->mu, 50);
        ret = shl_op_check_interrupt(op, st);
    }
    if (ret == 0) {
        t->checked_out = true;
        if (t->killed) {
            t->killed = false;
            t->dead = true;
        }
        *out = t;
    }
    pthread_mutex_unlock(&c->mu);
    return ret;
}

int
router_txn_catalog_kill(router_txn_catalog_t *c, bool (*match)(void *arg, const shl_lsid_t *lsid),
                        void *arg)
{
    int n = 0;

    pthread_mutex_lock(&c->mu);
    for (size_t b = 0; b < CATALOG_BUCKETS; b++) {
        for (router_txn_t *t = c->buckets[b]; t != NULL; t = t->next) {
            if (match(arg, &t->lsid)) {
                /* Applied by the next checkout, which owns the rest of the state. */
                t->killed = true;
                n++;
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

void
router_txn_release(router_txn_catalog_t *c, shl_op_ctx_t *op)
{
    router_txn_t *t = op->txn_session;

    if (t == NULL) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    t->checked_out = false;
    t->last_used_us = shl_clock_mono_us();
    pthread_cond_broadcast(&c->released);
    pthread_mutex_unlock(&c->mu);
    op->txn_session = NULL;
    op->txn = NULL;
}

/* The begin/continue rules of mongos's TransactionRouter for a checked-out state. */
static int
begin_or_continue(router_txn_t *t, shl_op_ctx_t *op, const shl_command_t *cmd,
                  uint64_t cluster_time, shl_status_t *st)
{
    bool commit = strcmp(cmd->name, "commitTransaction") == 0;
    char sid[37];
    int ret = 0;

    shl_lsid_id_string(&op->lsid_key, sid);
    if (op->txn_number < t->txn_number) {
        SHL_FAIL(st, SHL_CODE_TRANSACTION_TOO_OLD,
                 "txnNumber %lld is less than last txnNumber %lld seen in session %s",
                 (long long)op->txn_number, (long long)t->txn_number, sid);
    }
    if (op->start_transaction) {
        if (op->txn_number == t->txn_number) {
            SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                     "txnNumber %lld for session %s already started", (long long)op->txn_number,
                     sid);
        }
        reset_txn(t, op->txn_number);
        set_read_concern(t, op, cluster_time);
    } else if (op->txn_number > t->txn_number) {
        if (!commit) {
            SHL_FAIL(st, SHL_CODE_NO_SUCH_TRANSACTION,
                     "cannot continue txnId %lld for session %s with txnId %lld",
                     (long long)t->txn_number, sid, (long long)op->txn_number);
        }
        /* A commit this router never saw the statements of: recovered through its token. */
        reset_txn(t, op->txn_number);
        t->recovering_commit = true;
    } else if (t->dead) {
        /* killSessions ended it (mongos reaps a killed session's router state). */
        SHL_FAIL(st, SHL_CODE_NO_SUCH_TRANSACTION,
                 "Transaction %lld for session %s has been aborted by killSessions",
                 (long long)t->txn_number, sid);
    } else if (op->has_read_concern) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "Only the first command in a transaction may specify a readConcern");
    }
    t->stmt++;
    t->stale_refused = false;
done:
    return ret;
}

int
router_txn_begin(router_txn_catalog_t *c, shl_op_ctx_t *op, const shl_command_t *cmd,
                 uint64_t cluster_time, shl_status_t *st)
{
    router_txn_t *t = NULL;
    int ret = 0;

    if (op->start_transaction && !op->has_autocommit) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "Specifying startTransaction without autocommit=false is not allowed");
    }
    if (op->autocommit) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "autocommit must be false");
    }
    if (!op->has_txn_number || !op->has_lsid) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "'autocommit' field requires a transaction number to also be specified");
    }
    if (op->has_write_concern && !is_decision(cmd->name)) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "writeConcern is not allowed within a multi-statement transaction");
    }
    if (!allowed_in_txn(cmd->name)) {
        SHL_FAIL(st, SHL_CODE_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                 "Cannot run '%s' in a multi-document transaction.", cmd->name);
    }
    SHL_ERR(checkout(c, op, &t, st));
    op->txn_session = t;
    SHL_ERR(begin_or_continue(t, op, cmd, cluster_time, st));
    op->txn = t;
done:
    if (ret != 0 && t != NULL) {
        router_txn_release(c, op);
    }
    /* Labels as on any error of a transaction's command (NoSuchTransaction of a statement). */
    if (ret != 0 && op->has_autocommit && !op->autocommit &&
        router_txn_transient(ret, false, is_decision(cmd->name))) {
        shl_status_add_label(st, SHL_LABEL(TRANSIENT_TRANSACTION_ERROR));
    }
    return ret;
}

router_txn_t *
router_txn_internal_new(const shl_lsid_t *lsid, int64_t txn_number)
{
    router_txn_t *t = bson_malloc0(sizeof(*t));

    t->lsid = *lsid;
    t->checked_out = true;
    t->internal = true;
    bson_init(&t->read_concern);
    reset_txn(t, txn_number);
    return t;
}

void
router_txn_internal_free(router_txn_t *t)
{
    if (t != NULL) {
        bson_destroy(&t->read_concern);
        bson_free(t);
    }
}

void
router_txn_internal_statement(router_txn_t *t)
{
    t->stmt++;
    t->stale_refused = false;
    t->probe = false;
}

void
router_txn_internal_probe(router_txn_t *t)
{
    router_txn_internal_statement(t);
    t->probe = true;
}

/* ---------------------------------------------------------------- requests and replies */

static participant_t *
find_participant(router_txn_t *t, const char *shard)
{
    participant_t *p = NULL;

    for (size_t i = 0; p == NULL && i < t->nparts; i++) {
        if (strcmp(t->parts[i].shard, shard) == 0) {
            p = &t->parts[i];
        }
    }
    return p;
}

/* Fields of a statement the router writes itself for each participant. */
static bool
txn_field(const char *k)
{
    static const char *const names[] = {
        "lsid",        "txnNumber",   "autocommit",   "startTransaction",
        "readConcern", "coordinator", "writeConcern", NULL};
    bool found = false;

    for (size_t i = 0; !found && names[i] != NULL; i++) {
        found = strcmp(names[i], k) == 0;
    }
    return found;
}

void
router_txn_attach(router_txn_t *t, const char *shard, const bson_t *cmd, bson_t *out)
{
    participant_t *p;
    bson_iter_t it;
    bool first = false;

    if (t->raw_send || strcmp(shard, "config") == 0) {
        /* Decisions are written whole; the config server's own data is not in the
         * transaction (as mongos, which reads config/admin outside it). */
        bson_iter_init(&it, cmd);
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (t->raw_send ||
                (strcmp(k, "autocommit") != 0 && strcmp(k, "startTransaction") != 0 &&
                 strcmp(k, "txnNumber") != 0 && strcmp(k, "coordinator") != 0)) {
                bson_append_iter(out, NULL, 0, &it);
            }
        }
        return;
    }
    p = find_participant(t, shard);
    if (p == NULL && t->nparts < ROUTER_TXN_MAX_PARTICIPANTS) {
        p = &t->parts[t->nparts++];
        memset(p, 0, sizeof(*p));
        shl_str_copy(p->shard, sizeof(p->shard), shard);
        p->read_only = true;
        p->created_at = t->stmt;
        if (t->coordinator < 0) {
            t->coordinator = (int)(t->nparts - 1);
        }
        first = true;
    }
    if (p != NULL) {
        p->touched_at = t->stmt;
    }
    bson_iter_init(&it, cmd);
    while (shl_iter_next(&it)) {
        if (!txn_field(shl_iter_key(&it))) {
            bson_append_iter(out, NULL, 0, &it);
        }
    }
    shl_lsid_append(out, "lsid", &t->lsid);
    BSON_APPEND_INT64(out, "txnNumber", t->txn_number);
    BSON_APPEND_BOOL(out, "autocommit", false);
    if (first) {
        BSON_APPEND_BOOL(out, "startTransaction", true);
        if (t->has_read_concern) {
            BSON_APPEND_DOCUMENT(out, "readConcern", &t->read_concern);
        }
        if (t->coordinator >= 0 && &t->parts[t->coordinator] == p) {
            BSON_APPEND_BOOL(out, "coordinator", true);
        }
    }
}

/* Whether the request 'cmd' writes (when the reply does not say readOnly). */
static bool
command_writes(const bson_t *cmd)
{
    static const char *const writes[] = {
        "insert",        "update", "delete",        "findAndModify",
        "findandmodify", "create", "createIndexes", NULL};
    bson_iter_t it, st, last;
    const char *name;
    bool w = false;

    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it)) {
        return false;
    }
    name = bson_iter_key(&it);
    for (size_t i = 0; !w && writes[i] != NULL; i++) {
        w = strcmp(writes[i], name) == 0;
    }
    if (!w && strcmp(name, "aggregate") == 0 && bson_iter_init_find(&it, cmd, "pipeline") &&
        BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &st)) {
        bool any = false;
        while (bson_iter_next(&st)) {
            last = st;
            any = true;
        }
        if (any && BSON_ITER_HOLDS_DOCUMENT(&last) && bson_iter_recurse(&last, &st) &&
            bson_iter_next(&st)) {
            w = strcmp(bson_iter_key(&st), "$out") == 0 ||
                strcmp(bson_iter_key(&st), "$merge") == 0;
        }
    }
    return w;
}

static bool
stale_code(int code)
{
    return code == SHL_CODE_STALE_CONFIG || code == SHL_CODE_STALE_DB_VERSION ||
           code == SHL_CODE_STALE_EPOCH;
}

/* Send abortTransaction (best effort) to the participants 'pick' selects. */
static void
abort_some(struct shl_router *r, shl_op_ctx_t *op, router_txn_t *t, bool only_pending)
{
    shl_router_request_t reqs[ROUTER_TXN_MAX_PARTICIPANTS];
    shl_fanout_result_t res[ROUTER_TXN_MAX_PARTICIPANTS];
    size_t n = 0;

    for (size_t i = 0; i < t->nparts; i++) {
        if (only_pending && t->parts[i].created_at != t->stmt) {
            continue;
        }
        reqs[n].shard = t->parts[i].shard;
        bson_init(&reqs[n].cmd);
        BSON_APPEND_INT32(&reqs[n].cmd, "abortTransaction", 1);
        shl_lsid_append(&reqs[n].cmd, "lsid", &t->lsid);
        BSON_APPEND_INT64(&reqs[n].cmd, "txnNumber", t->txn_number);
        BSON_APPEND_BOOL(&reqs[n].cmd, "autocommit", false);
        n++;
    }
    if (n > 0) {
        bool was = t->raw_send;
        t->raw_send = true;
        shl_router_send(r, op, "admin", reqs, n, res);
        t->raw_send = was;
        shl_fanout_results_cleanup(res, n);
    }
    shl_router_requests_cleanup(reqs, n);
}

void
router_txn_observe(struct shl_router *r, shl_op_ctx_t *op, router_txn_t *t, const char *shard,
                   const bson_t *cmd, const shl_fanout_result_t *res)
{
    participant_t *p;
    bson_iter_t it;
    bool can_retry = true;

    if (t->raw_send || (p = find_participant(t, shard)) == NULL) {
        return;
    }
    if (res->code == 0) {
        bool wrote = bson_iter_init_find(&it, &res->reply, "readOnly") && BSON_ITER_HOLDS_BOOL(&it)
                         ? !bson_iter_bool(&it)
                         : command_writes(cmd);
        if (wrote && !t->probe) {
            p->read_only = false;
            if (t->recovery_shard[0] == '\0') {
                shl_str_copy(t->recovery_shard, sizeof(t->recovery_shard), p->shard);
            }
        }
        return;
    }
    if (shl_code_in_category(res->code, SHL_CAT_SNAPSHOT_ERROR)) {
        /* mongos: the first statement of a transaction whose atClusterTime the router chose
         * starts over at a newer time (every participant aborted and forgotten); later
         * statements fail (TransientTransactionError). */
        if (t->stmt == 1 && t->at_cluster_time != 0 && !t->at_given && !t->snapshot_retry) {
            uint64_t now = shl_vector_clock_get(&r->clock, SHL_VC_CLUSTER_TIME);
            SHL_LOG_DEBUG(1, TXN, 22881, "Retrying the first statement at a new atClusterTime",
                          "shardId", BCON_UTF8(shard), "error", BCON_UTF8(res->status.reason));
            abort_some(r, op, t, false);
            t->nparts = 0;
            t->coordinator = -1;
            t->recovery_shard[0] = '\0';
            reset_at_cluster_time(t, now > t->at_cluster_time ? now : t->at_cluster_time);
            t->snapshot_retry = true;
        }
        return;
    }
    if (!stale_code(res->code) || t->stale_refused) {
        return;
    }
    /* mongos retries a stale statement inside a transaction only when every participant it
     * reached was started by it: those are aborted and forgotten, and the retry starts them
     * again (seeds/000 "Transactions"). */
    for (size_t i = 0; i < t->nparts; i++) {
        if (t->parts[i].touched_at == t->stmt && t->parts[i].created_at != t->stmt) {
            can_retry = false;
        }
    }
    if (!can_retry) {
        t->stale_refused = true;
        t->stale_status = res->status;
        t->stale_result_code = res->code;
        return;
    }
    SHL_LOG_DEBUG(1, TXN, 22880, "Retrying a stale statement of a transaction", "shardId",
                  BCON_UTF8(shard), "error", BCON_UTF8(res->status.reason));
    abort_some(r, op, t, true);
    {
        size_t k = 0;
        int coord = -1;
        for (size_t i = 0; i < t->nparts; i++) {
            if (t->parts[i].created_at != t->stmt) {
                if ((int)i == t->coordinator) {
                    coord = (int)k;
                }
                t->parts[k++] = t->parts[i];
            }
        }
        t->nparts = k;
        t->coordinator = coord;
        if (find_participant(t, t->recovery_shard) == NULL) {
            t->recovery_shard[0] = '\0';
        }
    }
}

bool
router_txn_retry_refused(router_txn_t *t, shl_fanout_result_t *res)
{
    if (!t->stale_refused || t->raw_send) {
        return false;
    }
    res->code = t->stale_result_code;
    res->status = t->stale_status;
    bson_init(&res->reply);
    res->micros = 0;
    res->interrupted = false;
    return true;
}

/* ---------------------------------------------------------------- statement end, labels */

bool
router_txn_transient(int code, bool has_wce, bool commit_or_abort)
{
    bool transient;

    switch (code) {
    case SHL_CODE_WRITE_CONFLICT:
    case SHL_CODE_LOCK_TIMEOUT:
    case SHL_CODE_PREPARED_TRANSACTION_IN_PROGRESS:
    case SHL_CODE_STALE_DB_VERSION:
        transient = true;
        break;
    default:
        transient = shl_code_in_category(code, SHL_CAT_SNAPSHOT_ERROR) ||
                    shl_code_in_category(code, SHL_CAT_NEED_RETARGETTING_ERROR);
        break;
    }
    if (commit_or_abort) {
        transient = (transient || code == SHL_CODE_NO_SUCH_TRANSACTION) && !has_wce;
    } else {
        transient = transient || code == SHL_CODE_NO_SUCH_TRANSACTION ||
                    shl_code_in_category(code, SHL_CAT_RETRIABLE_ERROR);
    }
    return transient;
}

/*
 * As mongos's batch executor in a transaction: a write error that is a transient
 * transaction error fails the whole command with it (a top-level error, labelled).
 * Returns its code, or 0 when no write error is transient.
 */
static int
transient_write_error(const bson_t *reply, shl_status_t *st)
{
    bson_iter_t it, arr, e;
    int ret = 0;

    if (!bson_iter_init_find(&it, reply, "writeErrors") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &arr)) {
        return 0;
    }
    while (ret == 0 && bson_iter_next(&arr)) {
        int code = 0;
        const char *msg = "";
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bson_iter_recurse(&arr, &e)) {
            continue;
        }
        while (bson_iter_next(&e)) {
            if (strcmp(bson_iter_key(&e), "code") == 0 && BSON_ITER_HOLDS_NUMBER(&e)) {
                code = (int)bson_iter_as_int64(&e);
            } else if (strcmp(bson_iter_key(&e), "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&e)) {
                msg = bson_iter_utf8(&e, NULL);
            }
        }
        if (code != 0 && router_txn_transient(code, false, false)) {
            ret = shl_status_set(st, code, "%s", msg);
        }
    }
    return ret;
}

int
router_txn_end(struct shl_router *r, shl_op_ctx_t *op, int ret, shl_status_t *st,
               const bson_t *reply)
{
    router_txn_t *t = op->txn;
    bson_iter_t it;
    bool write_errors = ret == 0 && reply != NULL && bson_iter_init_find(&it, reply, "writeErrors");

    if (t == NULL || is_decision(op->cmd_name)) {
        return ret;
    }
    if (write_errors) {
        ret = transient_write_error(reply, st);
    }
    if (ret != 0 || write_errors) {
        /* mongos: a failed statement aborts the transaction on every participant. */
        SHL_LOG_DEBUG(1, TXN, 22883, "Implicitly aborting transaction after a failed statement",
                      "txnNumber", BCON_INT64(t->txn_number), "error",
                      BCON_UTF8(ret != 0 ? st->reason : "writeErrors"));
        abort_some(r, op, t, false);
        if (ret != 0 && router_txn_transient(st->code, false, false)) {
            shl_status_add_label(st, SHL_LABEL(TRANSIENT_TRANSACTION_ERROR));
        }
    }
    if (ret == 0) {
        tl_has_token = true;
        shl_str_copy(tl_token_shard, sizeof(tl_token_shard), t->recovery_shard);
    }
    return ret;
}

void
router_txn_set_token(const router_txn_t *t)
{
    tl_has_token = true;
    shl_str_copy(tl_token_shard, sizeof(tl_token_shard), t->recovery_shard);
}

void
router_txn_append_token(bson_t *reply)
{
    bson_t tok;

    if (!tl_has_token) {
        return;
    }
    tl_has_token = false;
    if (bson_has_field(reply, "recoveryToken")) {
        return;
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "recoveryToken", &tok);
    if (tl_token_shard[0] != '\0') {
        BSON_APPEND_UTF8(&tok, "recoveryShardId", tl_token_shard);
    }
    bson_append_document_end(reply, &tok);
}

/* ---------------------------------------------------------------- introspection */

size_t
router_txn_participants(const router_txn_t *t, const char **names, bool *read_only, size_t max)
{
    for (size_t i = 0; i < t->nparts && i < max; i++) {
        names[i] = t->parts[i].shard;
        read_only[i] = t->parts[i].read_only;
    }
    return t->nparts;
}

const char *
router_txn_coordinator(const router_txn_t *t)
{
    return t->coordinator >= 0 ? t->parts[t->coordinator].shard : "";
}

const char *
router_txn_recovery_shard(const router_txn_t *t)
{
    return t->recovery_shard;
}

router_commit_type_t
router_txn_commit_type(const router_txn_t *t)
{
    return t->commit_type;
}

uint64_t
router_txn_at_cluster_time(const router_txn_t *t)
{
    return t->at_cluster_time;
}

bool
router_txn_take_snapshot_retry(router_txn_t *t)
{
    bool retry = t->snapshot_retry;

    t->snapshot_retry = false;
    return retry;
}
