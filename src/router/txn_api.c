/*
 * txn_api.c -- the router's transaction API (txn_api.h): internal transactions on child
 * sessions, retried on transient errors, committed through the TransactionRouter's own
 * commit paths (cluster_txn.c).
 */
#include "router/txn_api.h"

#include <pthread.h>
#include <string.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "bson/bson_iter.h"
#include "net/service_context.h"
#include "router/router_private.h"
#include "router/txn_router_private.h"

/* Holds an internal transaction whose statements ran, before its commit (tests: a retry
 * through another router meets this attempt open on the shards). */
SHL_FAILPOINT_DEFINE(hangBeforeCommittingInternalTransaction)

/* The operation's transaction fields while an internal transaction's statements run. */
typedef struct saved_op {
    void *txn;
    bool has_autocommit, autocommit, start_transaction;
} saved_op_t;

static void
set_txn(shl_op_ctx_t *op, void *txn)
{
    pthread_mutex_lock(&op->svc->ops_mu);
    op->txn = txn;
    pthread_mutex_unlock(&op->svc->ops_mu);
}

static void
enter(shl_op_ctx_t *op, router_txn_t *t, saved_op_t *saved)
{
    saved->txn = op->txn;
    saved->has_autocommit = op->has_autocommit;
    saved->autocommit = op->autocommit;
    saved->start_transaction = op->start_transaction;
    op->has_autocommit = true;
    op->autocommit = false;
    op->start_transaction = false;
    set_txn(op, t);
}

static void
leave(shl_op_ctx_t *op, const saved_op_t *saved)
{
    op->has_autocommit = saved->has_autocommit;
    op->autocommit = saved->autocommit;
    op->start_transaction = saved->start_transaction;
    set_txn(op, saved->txn);
}

/* {name: 1} plus the user's writeConcern / maxTimeMS (the decision commands take them). */
static void
decision_cmd(const char *name, const bson_t *user_cmd, bson_t *out)
{
    bson_iter_t it;

    bson_init(out);
    BSON_APPEND_INT32(out, name, 1);
    if (user_cmd != NULL && bson_iter_init(&it, user_cmd)) {
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (strcmp(k, "writeConcern") == 0 || strcmp(k, "maxTimeMS") == 0) {
                bson_append_iter(out, NULL, 0, &it);
            }
        }
    }
}

static bool
has_label(const shl_status_t *st, uint32_t label)
{
    return (st->labels & label) != 0;
}

/* Abort t's participants, best effort; forget the recoveryToken it leaves for the reply. */
static void
abort_attempt(shl_router_t *r, shl_op_ctx_t *op, router_txn_t *t, const bson_t *user_cmd)
{
    bson_t cmd, reply = BSON_INITIALIZER, scratch = BSON_INITIALIZER;
    shl_status_t ignored = SHL_STATUS_INIT;

    if (t->nparts > 0) {
        decision_cmd("abortTransaction", user_cmd, &cmd);
        (void)router_txn_abort(r, op, &cmd, &reply, &ignored);
        bson_destroy(&cmd);
    }
    router_txn_append_token(&scratch);
    bson_destroy(&scratch);
    bson_destroy(&reply);
}

/*
 * Commit t, retrying while the outcome is unknown. Returns 0, or the error (its labels say
 * whether the whole transaction may run again).
 */
static int
commit_attempt(shl_router_t *r, shl_op_ctx_t *op, router_txn_t *t, const bson_t *user_cmd,
               int *attempts, shl_status_t *st)
{
    int ret = 0;

    for (;;) {
        bson_t cmd, reply = BSON_INITIALIZER, scratch = BSON_INITIALIZER;
        decision_cmd("commitTransaction", user_cmd, &cmd);
        shl_status_clear(st);
        ret = router_txn_commit(r, op, &cmd, &reply, st);
        if (ret == 0 && bson_has_field(&reply, "writeConcernError")) {
            bson_iter_t it, e;
            if (bson_iter_init_find(&it, &reply, "writeConcernError") &&
                bson_iter_recurse(&it, &e) && bson_iter_find(&e, "code")) {
                ret = shl_status_set(st, (int)bson_iter_as_int64(&e),
                                     "write concern error committing an internal transaction");
            }
        }
        router_txn_append_token(&scratch);
        bson_destroy(&scratch);
        bson_destroy(&cmd);
        bson_destroy(&reply);
        if (ret == 0 || !has_label(st, SHL_LABEL(UNKNOWN_TRANSACTION_COMMIT_RESULT)) ||
            ++*attempts >= ROUTER_TXN_API_MAX_RETRIES || shl_op_check_interrupt(op, NULL) != 0) {
            break;
        }
        SHL_LOG_DEBUG(1, TXN, 5918600, "Retrying the commit of an internal transaction",
                      "txnNumber", BCON_INT64(t->txn_number), "error", BCON_UTF8(st->reason));
    }
    return ret;
}

int
router_txn_api_run(shl_op_ctx_t *op, const bson_t *user_cmd, router_txn_api_fn fn, void *arg,
                   shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    shl_lsid_t parent, child;
    int attempts = 0;
    int ret = 0;

    if (op->txn != NULL) {
        /* A client transaction: its statements are the client's to retry. */
        router_txn_internal_statement(op->txn);
        ret = fn(op, arg, st);
        goto done;
    }
    if (op->has_lsid) {
        parent = op->lsid_key;
    } else {
        shl_lsid_new(&parent); /* MongoDB takes one from its internal session pool */
    }
    shl_lsid_new_child(&parent, op->has_txn_number && !op->has_autocommit, op->txn_number, &child);
    for (int64_t txn_number = 0;; txn_number++) {
        router_txn_t *t = router_txn_internal_new(&child, txn_number);
        saved_op_t saved;
        bool transient;

        enter(op, t, &saved);
        shl_status_clear(st);
        ret = fn(op, arg, st);
        if (ret == 0 && SHL_FAILPOINT_FIRES(hangBeforeCommittingInternalTransaction)) {
            SHL_LOG_INFO(TXN, 5918602, "internal transaction hangs before its commit (fail point)",
                         "txnNumber", BCON_INT64(txn_number));
            shl_failpoint_pause_while_set(SHL_FAILPOINT(hangBeforeCommittingInternalTransaction),
                                          NULL);
        }
        if (ret == 0) {
            ret = commit_attempt(r, op, t, user_cmd, &attempts, st);
            transient = ret != 0 && has_label(st, SHL_LABEL(TRANSIENT_TRANSACTION_ERROR));
        } else {
            transient = has_label(st, SHL_LABEL(TRANSIENT_TRANSACTION_ERROR)) ||
                        router_txn_transient(ret, false, false);
            abort_attempt(r, op, t, user_cmd);
        }
        leave(op, &saved);
        router_txn_internal_free(t);
        if (ret == 0 || !transient || ++attempts >= ROUTER_TXN_API_MAX_RETRIES) {
            break;
        }
        if (shl_op_check_interrupt(op, NULL) != 0) {
            break;
        }
        SHL_LOG_DEBUG(1, TXN, 5918601, "Retrying an internal transaction", "txnNumber",
                      BCON_INT64(txn_number), "error", BCON_UTF8(st->reason));
        /* A conflicting transaction (a prepared one above all) needs time to finish: back off
         * a little more each attempt (at most 20 ms; 120 attempts stay within ~2 s). */
        shl_sleep_ms(attempts < 20 ? attempts : 20);
    }
    if (ret != 0) {
        /* The labels were the internal transaction's, not the user's command's. */
        st->labels = 0;
    }
done:
    return ret;
}

int32_t
router_txn_api_stmt_id(const shl_op_ctx_t *op, int32_t stmt_id)
{
    const router_txn_t *t = op->txn;

    return t != NULL && t->internal && t->lsid.child && t->lsid.has_parent_txn_number &&
                   stmt_id >= 0
               ? stmt_id
               : -1;
}

int
router_txn_api_reply_error(const bson_t *reply, shl_status_t *st)
{
    bson_iter_t it, arr, e;
    int ret = 0;

    if (bson_iter_init_find(&it, reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &arr) && shl_iter_next(&arr) && BSON_ITER_HOLDS_DOCUMENT(&arr) &&
        bson_iter_recurse(&arr, &e)) {
        int code = SHL_CODE_UNKNOWN_ERROR;
        const char *msg = "";
        while (shl_iter_next(&e)) {
            if (strcmp(shl_iter_key(&e), "code") == 0 && BSON_ITER_HOLDS_NUMBER(&e)) {
                code = (int)bson_iter_as_int64(&e);
            } else if (strcmp(shl_iter_key(&e), "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&e)) {
                msg = bson_iter_utf8(&e, NULL);
            }
        }
        ret = shl_status_set(st, code, "%s", msg);
        if (router_txn_transient(code, false, false)) {
            shl_status_add_label(st, SHL_LABEL(TRANSIENT_TRANSACTION_ERROR));
        }
    }
    return ret;
}
