/*
 * cluster_txn.c -- commitTransaction / abortTransaction on the router: the commit paths of
 * seeds/000 "Committing a Transaction" (no participant, single shard, read-only shards,
 * single write shard, two-phase commit through coordinateCommitTransaction, recovery with
 * a recoveryToken) and the abort of every participant (txn_router.h).
 */
#include <string.h>

#include "base/log.h"
#include "base/str.h"
#include "bson/bson_iter.h"
#include "router/router_commands.h"
#include "router/router_private.h"
#include "router/txn_router_private.h"

/* {name: 1, lsid, txnNumber, autocommit: false} plus the user's writeConcern / maxTimeMS. */
static void
decision_cmd(const router_txn_t *t, const char *name, const bson_t *user, bson_t *out)
{
    bson_iter_t it;

    bson_init(out);
    BSON_APPEND_INT32(out, name, 1);
    shl_lsid_append(out, "lsid", &t->lsid);
    BSON_APPEND_INT64(out, "txnNumber", t->txn_number);
    BSON_APPEND_BOOL(out, "autocommit", false);
    if (bson_iter_init(&it, user)) {
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (strcmp(k, "writeConcern") == 0 || strcmp(k, "maxTimeMS") == 0) {
                bson_append_iter(out, NULL, 0, &it);
            }
        }
    }
}

/*
 * Send 'n' decision requests and fold their results: the first error is returned (in 'st'),
 * the first writeConcernError is copied to 'reply' (*wce set).
 */
static int
send_decisions(shl_router_t *r, shl_op_ctx_t *op, router_txn_t *t, shl_router_request_t *reqs,
               size_t n, bson_t *reply, bool *wce, shl_status_t *st)
{
    shl_fanout_result_t res[ROUTER_TXN_MAX_PARTICIPANTS + 1];
    bson_iter_t it;
    int ret = 0;

    t->raw_send = true;
    shl_router_send(r, op, "admin", reqs, n, res);
    t->raw_send = false;
    for (size_t i = 0; i < n; i++) {
        if (res[i].code != 0) {
            if (ret == 0) {
                *st = res[i].status;
                ret = res[i].code;
            }
            continue;
        }
        if (!*wce && bson_iter_init_find(&it, &res[i].reply, "writeConcernError")) {
            bson_append_iter(reply, NULL, 0, &it);
            *wce = true;
        }
    }
    shl_fanout_results_cleanup(res, n);
    shl_router_requests_cleanup(reqs, n);
    return ret;
}

/* commitTransaction to the participants whose read-only flag is 'read_only' (all: any). */
static int
commit_some(shl_router_t *r, shl_op_ctx_t *op, router_txn_t *t, const bson_t *cmd, int read_only,
            bson_t *reply, bool *wce, shl_status_t *st)
{
    shl_router_request_t reqs[ROUTER_TXN_MAX_PARTICIPANTS];
    size_t n = 0;

    for (size_t i = 0; i < t->nparts; i++) {
        if (read_only < 0 || (bool)read_only == t->parts[i].read_only) {
            reqs[n].shard = t->parts[i].shard;
            decision_cmd(t, "commitTransaction", cmd, &reqs[n].cmd);
            n++;
        }
    }
    return n == 0 ? 0 : send_decisions(r, op, t, reqs, n, reply, wce, st);
}

/* coordinateCommitTransaction with 'participants' (all of t's, or none) to 'shard'. */
static int
coordinate_commit(shl_router_t *r, shl_op_ctx_t *op, router_txn_t *t, const bson_t *cmd,
                  const char *shard, bool with_participants, bson_t *reply, bool *wce,
                  shl_status_t *st)
{
    shl_router_request_t req;
    bson_t arr, p;

    req.shard = shard;
    decision_cmd(t, "coordinateCommitTransaction", cmd, &req.cmd);
    BSON_APPEND_ARRAY_BEGIN(&req.cmd, "participants", &arr);
    for (size_t i = 0; with_participants && i < t->nparts; i++) {
        char key[24];
        snprintf(key, sizeof(key), "%zu", i);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, key, &p);
        BSON_APPEND_UTF8(&p, "shardId", t->parts[i].shard);
        bson_append_document_end(&arr, &p);
    }
    bson_append_array_end(&req.cmd, &arr);
    return send_decisions(r, op, t, &req, 1, reply, wce, st);
}

/* The recoveryToken's recoveryShardId of the user's commit (*has_token: a token at all). */
static void
token_shard(const bson_t *cmd, bool *has_token, char *out, size_t n)
{
    bson_iter_t it, tok;

    *has_token = false;
    out[0] = '\0';
    if (bson_iter_init_find(&it, cmd, "recoveryToken") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &tok)) {
        *has_token = true;
        if (bson_iter_find(&tok, "recoveryShardId") && BSON_ITER_HOLDS_UTF8(&tok)) {
            shl_str_copy(out, n, bson_iter_utf8(&tok, NULL));
        }
    }
}

/* The commit path for t's participants (seeds/000 "Committing a Transaction"). */
static router_commit_type_t
commit_type(const router_txn_t *t, size_t *writers)
{
    router_commit_type_t type;

    *writers = 0;
    for (size_t i = 0; i < t->nparts; i++) {
        *writers += t->parts[i].read_only ? 0 : 1;
    }
    if (t->recovering_commit) {
        type = ROUTER_COMMIT_RECOVER_TOKEN;
    } else if (t->nparts == 0) {
        type = ROUTER_COMMIT_NO_SHARDS;
    } else if (t->nparts == 1) {
        type = ROUTER_COMMIT_SINGLE_SHARD;
    } else if (*writers == 0) {
        type = ROUTER_COMMIT_READ_ONLY;
    } else if (*writers == 1) {
        type = ROUTER_COMMIT_SINGLE_WRITE;
    } else {
        type = ROUTER_COMMIT_TWO_PHASE;
    }
    return type;
}

/* MongoDB's labels on a commit's error or write concern error. */
static void
label_commit(int code, bool wce, shl_status_t *st, bson_t *reply)
{
    bool unknown = wce || shl_code_in_category(code, SHL_CAT_RETRIABLE_ERROR) ||
                   shl_code_in_category(code, SHL_CAT_NETWORK_ERROR) ||
                   shl_code_in_category(code, SHL_CAT_EXCEEDED_TIME_LIMIT_ERROR) ||
                   code == SHL_CODE_MAX_TIME_MS_EXPIRED;

    if (code != 0) {
        if (router_txn_transient(code, wce, true)) {
            shl_status_add_label(st, SHL_LABEL(TRANSIENT_TRANSACTION_ERROR));
        }
        if (unknown) {
            shl_status_add_label(st, SHL_LABEL(UNKNOWN_TRANSACTION_COMMIT_RESULT));
        }
    } else if (unknown) {
        bson_t labels;
        BSON_APPEND_ARRAY_BEGIN(reply, "errorLabels", &labels);
        BSON_APPEND_UTF8(&labels, "0", "UnknownTransactionCommitResult");
        bson_append_array_end(reply, &labels);
    }
}

int
router_txn_commit(shl_router_t *r, shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply,
                  shl_status_t *st)
{
    router_txn_t *t = op->txn;
    char shard[SHL_SHARD_ID_MAX];
    bool has_token = false, wce = false;
    size_t writers = 0;
    int ret = 0;

    if (t == NULL) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "commitTransaction must be run within a transaction");
    }
    t->commit_type = commit_type(t, &writers);
    SHL_LOG_DEBUG(1, TXN, 22890, "Committing transaction", "txnNumber", BCON_INT64(t->txn_number),
                  "commitType", BCON_INT32((int32_t)t->commit_type), "participants",
                  BCON_INT64((int64_t)t->nparts));
    switch (t->commit_type) {
    case ROUTER_COMMIT_RECOVER_TOKEN:
        token_shard(cmd, &has_token, shard, sizeof(shard));
        if (!has_token) {
            SHL_FAIL(st, 50940, "Cannot commit without participants");
        }
        if (shard[0] == '\0') {
            SHL_FAIL(st, SHL_CODE_NO_SUCH_TRANSACTION,
                     "Recovery token is empty, meaning the transaction only performed reads "
                     "and can be safely retried");
        }
        ret = coordinate_commit(r, op, t, cmd, shard, false, reply, &wce, st);
        break;
    case ROUTER_COMMIT_NO_SHARDS:
        break;
    case ROUTER_COMMIT_SINGLE_SHARD:
    case ROUTER_COMMIT_READ_ONLY:
        ret = commit_some(r, op, t, cmd, -1, reply, &wce, st);
        break;
    case ROUTER_COMMIT_SINGLE_WRITE:
        /* The read-only ones first: the write shard commits only when they all did. */
        ret = commit_some(r, op, t, cmd, 1, reply, &wce, st);
        if (ret == 0 && !wce) {
            ret = commit_some(r, op, t, cmd, 0, reply, &wce, st);
        }
        break;
    case ROUTER_COMMIT_TWO_PHASE:
    case ROUTER_COMMIT_NONE:
        ret = coordinate_commit(r, op, t, cmd,
                                t->parts[t->coordinator < 0 ? 0 : t->coordinator].shard, true,
                                reply, &wce, st);
        break;
    }
    if (ret == 0) {
        router_txn_set_token(t);
    }
done:
    label_commit(ret, wce, st, reply);
    return ret;
}

int
router_txn_abort(shl_router_t *r, shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply,
                 shl_status_t *st)
{
    router_txn_t *t = op->txn;
    shl_router_request_t reqs[ROUTER_TXN_MAX_PARTICIPANTS];
    bool wce = false;
    int ret = 0;

    if (t == NULL) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "abortTransaction must be run within a transaction");
    }
    if (t->nparts == 0) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_TRANSACTION,
                 "no known command has been sent by this router for this transaction");
    }
    for (size_t i = 0; i < t->nparts; i++) {
        reqs[i].shard = t->parts[i].shard;
        decision_cmd(t, "abortTransaction", cmd, &reqs[i].cmd);
    }
    ret = send_decisions(r, op, t, reqs, t->nparts, reply, &wce, st);
    if (ret != 0 && router_txn_transient(ret, wce, true)) {
        shl_status_add_label(st, SHL_LABEL(TRANSIENT_TRANSACTION_ERROR));
    }
    if (ret == 0) {
        router_txn_set_token(t);
    }
done:
    return ret;
}

static int
cmd_commit(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return router_txn_commit(shl_router_get(op), op, cmd, reply, st);
}

static int
cmd_abort(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return router_txn_abort(shl_router_get(op), op, cmd, reply, st);
}

static const shl_command_t k_txn_commands[] = {
    {"commitTransaction",
     {NULL},
     cmd_commit,
     SHL_CMD_ADMIN_ONLY | SHL_CMD_IN_TXN,
     "commit a multi-document transaction on its participants"},
    {"abortTransaction",
     {NULL},
     cmd_abort,
     SHL_CMD_ADMIN_ONLY | SHL_CMD_IN_TXN,
     "abort a multi-document transaction on its participants"},
};

void
shl_cluster_txn_commands_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(k_txn_commands) / sizeof(k_txn_commands[0]); i++) {
        shl_command_registry_add(reg, &k_txn_commands[i]);
    }
}
