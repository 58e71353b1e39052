/*
 * cluster_write.c -- the router's write commands: insert, update, delete and findAndModify
 * (issue 6 item 3 "writes"; docs/design/sharding-protocol.md "Router -> shard"). A batch is
 * split into per-shard sub-batches that run in parallel; the replies are reassembled in the
 * user's order (n, nModified, upserted and writeErrors with the user's indexes). A shard that
 * answers StaleConfig / StaleDbVersion makes the router refresh and re-send only the
 * statements that did not run, at most SHL_ROUTER_MAX_STALE_RETRIES times.
 *
 * A retryable write (lsid + txnNumber outside a transaction; seeds/001 "Retryable writes")
 * reaches every shard it targets with the client's lsid (as {id, uid}), txnNumber and the
 * statement ids of exactly the statements in that sub-batch -- a statement keeps its id on
 * every shard and in every resend -- so each shard deduplicates its own statements. Its
 * requests are repeated after a retriable failure as MongoDB's router repeats them
 * (shl_router_send_retrying).
 */
#include <string.h>

#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/stmt_batch.h"
#include "router/cluster_routing.h"
#include "router/router_commands.h"
#include "router/router_private.h"
#include "query/projection.h"
#include "router/txn_api.h"
#include "router/txn_router_private.h"
#include "router/wc_error.h"
#include "session/session_args.h"
#include "sharding/shard_key.h"

/* A sub-batch is a write command a shard accepts (net/stmt_batch.h): its statements' array
 * within SHL_STMT_BATCH_MAX_BYTES (each counted with its widest array key), at most
 * SHL_MAX_WRITE_BATCH of them. */
#define SUB_BATCH_MAX_BYTES SHL_STMT_BATCH_MAX_BYTES
#define SUB_BATCH_MAX_ITEMS SHL_MAX_WRITE_BATCH

/* The insert's field that says an update moved its document (a data node's
 * DB_WCOS_INSERT_FIELD, txn_participant.h): a retry of that update is answered as one. */
#define WCOS_INSERT_FIELD "$_wouldChangeOwningShard"

typedef enum { KIND_INSERT, KIND_UPDATE, KIND_DELETE } write_kind_t;

typedef enum { ITEM_PENDING, ITEM_DONE, ITEM_ERROR } item_state_t;

/* One statement of the user's batch. */
typedef struct item {
    bson_t doc; /* the document (insert) or statement (update/delete), owned */
    item_state_t state;
    char **done_shards; /* shards that already ran it (multi-shard statements), NULL-ended */
    size_t ndone;
    bson_t error; /* ITEM_ERROR: {code, errmsg, ...} without index */
    bool upserted;
    bson_value_t upserted_id; /* owned copy */
    bool two_phase;           /* a single write without shard key (cluster_write_wsk.c), pending */
    bool id_first; /* ...a retryable exact _id match: broadcast first, two-phase if it missed */
    /* per round */
    bool in_round, round_stale, round_error, round_deferred;
} item_t;

/* The whole write command being routed. */
typedef struct write_op {
    write_kind_t kind;
    const shl_op_ctx_t *opctx;
    const bson_t *user_cmd;
    const char *coll;
    char ns[SHL_NS_MAX + 1];
    char db[128];
    bool ordered;
    /* $$NOW / $$CLUSTER_TIME of an update or delete, the same on every shard (0: none). */
    int64_t now_ms;
    uint64_t cluster_time;
    item_t *items;
    size_t n;
    int64_t n_total;
    int64_t n_modified;
    router_wce_list_t wces; /* the shards' write concern errors */
    shl_status_t last_stale;
    size_t scan_from;  /* every statement before it is done */
    bool retryable;    /* lsid + txnNumber outside a transaction: sub-batches carry stmtIds */
    bool txn_ids;      /* a retryable internal transaction's statement with the user's stmtIds:
                        * they go along too (txn_api.h router_txn_api_stmt_id) */
    int32_t *stmt_ids; /* statement i's id: the client's stmtIds[i], else (stmtId or 0) + i */
    int32_t *retried;  /* retriedStmtIds the shards reported, in the order they came */
    size_t nretried, cap_retried;
    bool ids_broadcast; /* a retryable exact _id match is only broadcast (run_id_broadcast) */
    bool pinned;        /* SHL_ROUTER_PINNED_FIELD: statements target by their pinned part */
    router_route_fn route;
    void *route_arg;
    bool shutdown_error; /* a local failure while this router shuts down (fails the command) */
    shl_status_t shutdown_status;
} write_op_t;

/* One request of a round: a shard and the user indexes of the statements it carries. */
typedef struct sub_batch {
    const char *shard;
    size_t *idx;
    size_t n, cap;
    size_t bytes;
} sub_batch_t;

static const char *
kind_cmd(write_kind_t k)
{
    return k == KIND_INSERT ? "insert" : (k == KIND_UPDATE ? "update" : "delete");
}

static const char *
kind_field(write_kind_t k)
{
    return k == KIND_INSERT ? "documents" : (k == KIND_UPDATE ? "updates" : "deletes");
}

/* ---- small helpers ---- */

/* Whether 'v' is an _id value an equality can pin exactly (MongoDB's isExactIdQuery). */
static bool
is_exact_value(const bson_iter_t *it)
{
    bson_iter_t sub;
    if (BSON_ITER_HOLDS_ARRAY(it) || BSON_ITER_HOLDS_REGEX(it)) {
        return false;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(it) && bson_iter_recurse(it, &sub) && shl_iter_next(&sub) &&
        shl_iter_key(&sub)[0] == '$') {
        return false;
    }
    return true;
}

/* {_id: v} or {_id: {$eq: v}} at the top level of 'q' (with anything else beside it). */
static bool
is_exact_id_query(const bson_t *q)
{
    bson_iter_t it, sub;
    if (!bson_iter_init_find(&it, q, "_id")) {
        return false;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub) && shl_iter_next(&sub) &&
        strcmp(shl_iter_key(&sub), "$eq") == 0) {
        return !shl_iter_next(&sub) && is_exact_value(&sub);
    }
    return is_exact_value(&it);
}

/* A view of the sub-document at 'key' in 'doc'; false if absent or not a document. */
static bool
get_doc(const bson_t *doc, const char *key, bson_t *out)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;
    if (!bson_iter_init_find(&it, doc, key) || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return false;
    }
    bson_iter_document(&it, &len, &data);
    return bson_init_static(out, data, len);
}

static bool
get_bool(const bson_t *doc, const char *key, bool dflt)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, key)) {
        return dflt;
    }
    return bson_iter_as_bool(&it);
}

/* The update statement's "u" is a replacement document (no $-operator, not a pipeline). */
static bool
is_replacement(const bson_t *u)
{
    bson_iter_t it;
    return bson_iter_init(&it, u) && (!shl_iter_next(&it) || shl_iter_key(&it)[0] != '$');
}

/* Build an error document {code, codeName?, errmsg, extra...} from a status. */
static void
error_from_status(const shl_status_t *st, bson_t *out)
{
    bson_t extra;
    bson_init(out);
    BSON_APPEND_INT32(out, "code", st->code);
    BSON_APPEND_UTF8(out, "errmsg", st->reason);
    if (shl_status_extra_get(st, &extra)) {
        BSON_APPEND_DOCUMENT(out, "errInfo", &extra);
    }
}

static void
item_set_error(item_t *it, const shl_status_t *st)
{
    if (it->state == ITEM_ERROR) {
        return;
    }
    bson_destroy(&it->error);
    error_from_status(st, &it->error);
    it->state = ITEM_ERROR;
    it->round_error = true;
}

static bool
item_done_on(const item_t *it, const char *shard)
{
    for (size_t i = 0; i < it->ndone; i++) {
        if (strcmp(it->done_shards[i], shard) == 0) {
            return true;
        }
    }
    return false;
}

static void
item_mark_done_on(item_t *it, const char *shard)
{
    if (item_done_on(it, shard)) {
        return;
    }
    it->done_shards = bson_realloc(it->done_shards, (it->ndone + 2) * sizeof(char *));
    it->done_shards[it->ndone++] = bson_strdup(shard);
    it->done_shards[it->ndone] = NULL;
}

static void
set_one(shl_router_shards_t *out, const char *shard)
{
    memset(out, 0, sizeof(*out));
    out->names = bson_malloc0(2 * sizeof(char *));
    out->names[0] = shard;
    out->n = 1;
}

/* The shard key pattern as text for error messages. */
static char *
key_pattern_json(const shl_router_routing_t *rr)
{
    return shl_bson_as_json(&shl_routing_table_key_pattern(rr->rt)->pattern);
}

/* ---- targeting one statement ---- */

/* The filter a statement targets by: its pinned part (a write phase), else what its
 * collation lets target (shl_router_targeting_filter). 'out' is initialised here. */
static void
targeting_query(const bson_t *stmt, const shl_router_routing_t *rr, const bson_t *q, bool pinned,
                bson_t *out)
{
    bson_t pin;
    if (pinned && shl_router_pinned_filter(q, &pin)) {
        bson_copy_to(&pin, out);
    } else {
        shl_router_targeting_filter(stmt, rr, q, out);
    }
}

/* target_update / target_delete: *two_phase (no shard, no error) for a single write that
 * does not pin one shard -- MongoDB 7.0's write without shard key. */
static int
target_update(const shl_router_routing_t *rr, const bson_t *stmt, bool pinned,
              shl_router_shards_t *out, bool *two_phase, shl_status_t *st)
{
    bson_t qv, q = BSON_INITIALIZER, u, key = BSON_INITIALIZER;
    bson_iter_t it;
    const char *shard;
    bool multi, upsert;
    char *json = NULL, *kp = NULL;
    int ret = 0;

    memset(out, 0, sizeof(*out));
    if (!get_doc(stmt, "q", &qv)) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'update.updates.q' is missing but a required field");
    }
    bson_destroy(&q);
    targeting_query(stmt, rr, &qv, pinned, &q);
    if (!bson_iter_init_find(&it, stmt, "u") ||
        !(BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it))) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'update.updates.u' is missing but a required field");
    }
    {
        const uint8_t *data;
        uint32_t len;
        if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_document(&it, &len, &data);
        } else {
            bson_iter_array(&it, &len, &data);
        }
        bson_init_static(&u, data, len);
    }
    multi = get_bool(stmt, "multi", false);
    upsert = get_bool(stmt, "upsert", false);
    if (rr->rt == NULL) {
        set_one(out, rr->db.primary);
        goto done;
    }
    if (upsert) {
        bson_destroy(&key);
        if (!shl_shard_key_extract_from_query(shl_routing_table_key_pattern(rr->rt), &q, &key)) {
            if (!multi) {
                *two_phase = true; /* MongoDB 7.0: upserted by the two-phase protocol */
                goto done;
            }
            SHL_FAIL(st, SHL_CODE_SHARD_KEY_NOT_FOUND,
                     "Failed to target upsert by query :: could not extract exact shard key");
        }
        SHL_ERR(shl_routing_table_shard_for_key(rr->rt, &key, NULL, &shard, st));
        set_one(out, shard);
        goto done;
    }
    shl_router_target_filter(rr, &q, out);
    if (out->n == 1) {
        goto done;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(&it) && is_replacement(&u)) {
        bson_t doc = BSON_INITIALIZER;
        bson_iter_t id;
        if (!bson_has_field(&u, "_id") && bson_iter_init_find(&id, &q, "_id")) {
            bson_append_iter(&doc, NULL, 0, &id);
        }
        bson_concat(&doc, &u);
        ret = shl_router_target_doc(rr, &doc, &shard, st);
        bson_destroy(&doc);
        if (ret != 0) {
            shl_status_set(st, ret, "Failed to target update by replacement document :: %s",
                           st->reason);
            goto done;
        }
        shl_router_shards_cleanup(out);
        set_one(out, shard);
        goto done;
    }
    if (!multi) {
        /* Also an exact _id match reaching several shards: a broadcast could miss the
         * document while a migration commits (docs/design/transactions.md). */
        shl_router_shards_cleanup(out);
        *two_phase = true;
        goto done;
    }
    if (!multi && !is_exact_id_query(&q)) {
        json = shl_bson_as_json(stmt);
        kp = key_pattern_json(rr);
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "A {multi:false} update on a sharded collection must contain an exact match on "
                 "_id (and have the collection default collation) or target a single shard (and "
                 "have the simple collation), but this update targeted %zu shards. Update "
                 "request: %s, shard key pattern: %s",
                 out->n, json, kp);
    }
done:
    if (ret != 0) {
        shl_router_shards_cleanup(out);
    }
    bson_free(json);
    bson_free(kp);
    bson_destroy(&key);
    bson_destroy(&q);
    return ret;
}

static int
target_delete(const shl_router_routing_t *rr, const bson_t *stmt, bool pinned,
              shl_router_shards_t *out, bool *two_phase, shl_status_t *st)
{
    bson_t qv, q = BSON_INITIALIZER, key = BSON_INITIALIZER;
    bson_iter_t it;
    const char *shard;
    bool multi;
    char *json = NULL, *kp = NULL;
    int ret = 0;

    memset(out, 0, sizeof(*out));
    if (!get_doc(stmt, "q", &qv)) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'delete.deletes.q' is missing but a required field");
    }
    bson_destroy(&q);
    targeting_query(stmt, rr, &qv, pinned, &q);
    if (!bson_iter_init_find(&it, stmt, "limit") || !BSON_ITER_HOLDS_NUMBER(&it)) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'delete.deletes.limit' is missing but a required field");
    }
    multi = bson_iter_as_int64(&it) == 0;
    if (rr->rt == NULL) {
        set_one(out, rr->db.primary);
        goto done;
    }
    bson_destroy(&key);
    if (shl_shard_key_extract_from_query(shl_routing_table_key_pattern(rr->rt), &q, &key) &&
        shl_routing_table_shard_for_key(rr->rt, &key, NULL, &shard, st) == 0) {
        set_one(out, shard);
        goto done;
    }
    if (!multi) {
        shl_router_target_filter(rr, &q, out);
        if (out->n > 1) {
            shl_router_shards_cleanup(out);
            *two_phase = true;
        }
        goto done;
    }
    if (!multi && !is_exact_id_query(&q)) {
        json = shl_bson_as_json(stmt);
        kp = key_pattern_json(rr);
        SHL_FAIL(st, SHL_CODE_SHARD_KEY_NOT_FOUND,
                 "A single delete on a sharded collection must contain an exact match on _id "
                 "(and have the collection default collation) or contain the shard key (and "
                 "have the simple collation). Delete request: %s, shard key pattern: %s",
                 json, kp);
    }
    shl_router_target_filter(rr, &q, out);
done:
    bson_free(json);
    bson_free(kp);
    bson_destroy(&key);
    bson_destroy(&q);
    return ret;
}

static bool
is_upsert_stmt(const bson_t *stmt)
{
    return get_bool(stmt, "upsert", false);
}

static int
target_item(const write_op_t *op, const shl_router_routing_t *rr, item_t *it,
            shl_router_shards_t *out, shl_status_t *st)
{
    const char *shard;
    int ret = 0;

    memset(out, 0, sizeof(*out));
    switch (op->kind) {
    case KIND_INSERT:
        SHL_ERR(shl_router_target_doc(rr, &it->doc, &shard, st));
        set_one(out, shard);
        break;
    case KIND_UPDATE:
        SHL_ERR(target_update(rr, &it->doc, op->pinned, out, &it->two_phase, st));
        break;
    case KIND_DELETE:
        SHL_ERR(target_delete(rr, &it->doc, op->pinned, out, &it->two_phase, st));
        break;
    }
    if (it->two_phase && op->retryable) {
        /* A retryable write's exact _id match is broadcast first (MongoDB 7.0): each shard
         * answers a retry of it from its own history, which an internal transaction does not
         * write yet; only when it matched nothing (a migration's commit can hide the
         * document from a broadcast) it runs two-phase (docs/design/transactions.md). */
        bson_t q;
        if (get_doc(&it->doc, "q", &q) && is_exact_id_query(&q) && !is_upsert_stmt(&it->doc)) {
            it->id_first = !op->ids_broadcast;
            if (op->ids_broadcast) {
                it->two_phase = false;
                shl_router_target_filter(rr, &q, out);
            }
        }
    }
done:
    return ret;
}

/* ---- rounds ---- */

static sub_batch_t *
batch_for(sub_batch_t **batches, size_t *nb, const char *shard)
{
    for (size_t i = 0; i < *nb; i++) {
        if (strcmp((*batches)[i].shard, shard) == 0) {
            return &(*batches)[i];
        }
    }
    *batches = bson_realloc(*batches, (*nb + 1) * sizeof(**batches));
    memset(&(*batches)[*nb], 0, sizeof(**batches));
    (*batches)[*nb].shard = shard;
    return &(*batches)[(*nb)++];
}

static void
batch_add(sub_batch_t *b, size_t idx, size_t bytes)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 16;
        b->idx = bson_realloc(b->idx, b->cap * sizeof(size_t));
    }
    b->idx[b->n++] = idx;
    b->bytes += bytes;
}

static void
batches_free(sub_batch_t *batches, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        bson_free(batches[i].idx);
    }
    bson_free(batches);
}

/*
 * Append the session arguments a write sends to a shard: the lsid in its full {id, uid} form
 * and the txnNumber (MongoDB's router serializes both onto every request it sends).
 */
static void
append_session(const shl_op_ctx_t *opctx, bson_t *cmd)
{
    if (opctx->has_lsid) {
        shl_lsid_append(cmd, "lsid", &opctx->lsid_key);
    }
    if (opctx->has_txn_number) {
        BSON_APPEND_INT64(cmd, "txnNumber", opctx->txn_number);
    }
}

/* The generic arguments of the user's command a shard sees, minus the session's. */
static void
append_generic_but_session(const bson_t *user_cmd, bson_t *cmd)
{
    bson_iter_t it;

    if (!bson_iter_init(&it, user_cmd)) {
        return;
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "lsid") != 0 && strcmp(k, "txnNumber") != 0 && shl_router_generic_passes(k)) {
            bson_append_iter(cmd, NULL, 0, &it);
        }
    }
}

/* Build the shard's command for sub-batch 'b'. */
static void
build_sub_command(const write_op_t *op, const shl_router_routing_t *rr, const sub_batch_t *b,
                  bson_t *cmd)
{
    static const char *const copy[] = {"bypassDocumentValidation", "let", WCOS_INSERT_FIELD,
                                       NULL};
    bson_t arr;
    bson_iter_t it;
    char key[16];
    const char *k;

    bson_init(cmd);
    BSON_APPEND_UTF8(cmd, kind_cmd(op->kind), op->coll);
    bson_append_array_begin(cmd, kind_field(op->kind), -1, &arr);
    for (size_t i = 0; i < b->n; i++) {
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
        bson_append_document(&arr, k, -1, &op->items[b->idx[i]].doc);
    }
    bson_append_array_end(cmd, &arr);
    BSON_APPEND_BOOL(cmd, "ordered", op->ordered);
    for (size_t c = 0; copy[c] != NULL; c++) {
        if (bson_iter_init_find(&it, op->user_cmd, copy[c])) {
            bson_append_iter(cmd, NULL, 0, &it);
        }
    }
    router_append_runtime_constants(op->now_ms, op->cluster_time, cmd);
    if (op->retryable || op->txn_ids) {
        /* Exactly this sub-batch's statements, each with the id it has in the client's batch
         * (MongoDB's getStmtIdForWriteAt), so the shard recognises a statement it already ran
         * whichever round or shard carries it. */
        bson_append_array_begin(cmd, "stmtIds", -1, &arr);
        for (size_t i = 0; i < b->n; i++) {
            bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
            bson_append_int32(&arr, k, -1, op->stmt_ids[b->idx[i]]);
        }
        bson_append_array_end(cmd, &arr);
    }
    append_generic_but_session(op->user_cmd, cmd);
    append_session(op->opctx, cmd);
    shl_router_append_versions(rr, b->shard, cmd);
}

/*
 * Plan the next round. Ordered: the first pending statement and the pending statements
 * after it that go to the same single shard (one request), or one multi-shard statement.
 * Unordered: every pending statement, grouped per shard. Statements that cannot be
 * targeted get their error here. Returns false when nothing is left to send.
 */
static bool
plan_round(write_op_t *op, const shl_router_routing_t *rr, sub_batch_t **batches, size_t *nb)
{
    shl_router_shards_t t;
    shl_status_t st = SHL_STATUS_INIT;
    const char *run_shard = NULL;
    int tret;

    *batches = NULL;
    *nb = 0;
    while (op->scan_from < op->n && op->items[op->scan_from].state == ITEM_DONE) {
        op->scan_from++;
    }
    for (size_t i = op->scan_from; i < op->n; i++) {
        item_t *it = &op->items[i];
        /* A statement costs its array element, and in a retryable write its stmtIds
         * element too (an int32 under the widest key), as mongos reserves for it. */
        size_t bytes = shl_bson_array_element_len(SUB_BATCH_MAX_ITEMS, it->doc.len) +
                       (op->retryable || op->txn_ids
                            ? shl_bson_array_element_len(SUB_BATCH_MAX_ITEMS, 4)
                            : 0);
        if (it->state == ITEM_ERROR && op->ordered) {
            break;
        }
        if (it->state != ITEM_PENDING) {
            continue;
        }
        it->in_round = it->round_stale = it->round_error = it->round_deferred = false;
        it->two_phase = false;
        tret = target_item(op, rr, it, &t, &st);
        if (tret == 0 && it->two_phase) {
            /* Run on its own after the rounds (ordered: before anything after it). */
            if (op->ordered) {
                break;
            }
            continue;
        }
        if (tret != 0) {
            if (op->ordered && run_shard != NULL) {
                break; /* reported when its turn comes */
            }
            item_set_error(it, &st);
            if (op->ordered) {
                break;
            }
            continue;
        }
        if (op->ordered) {
            if (run_shard == NULL && *nb == 0) {
                if (t.n == 1) {
                    run_shard = t.names[0];
                    batch_add(batch_for(batches, nb, run_shard), i, bytes);
                    it->in_round = true;
                    shl_router_shards_cleanup(&t);
                    continue;
                }
                for (size_t s = 0; s < t.n; s++) {
                    if (!item_done_on(it, t.names[s])) {
                        batch_add(batch_for(batches, nb, t.names[s]), i, bytes);
                    }
                }
                it->in_round = true;
                if (*nb == 0) {
                    it->state = ITEM_DONE; /* every target already ran it */
                }
                shl_router_shards_cleanup(&t);
                if (*nb == 0) {
                    continue;
                }
                break;
            }
            if (run_shard != NULL && t.n == 1 && strcmp(t.names[0], run_shard) == 0) {
                sub_batch_t *b = &(*batches)[0];
                shl_router_shards_cleanup(&t);
                if (b->n >= SUB_BATCH_MAX_ITEMS || b->bytes + bytes > SUB_BATCH_MAX_BYTES) {
                    break;
                }
                batch_add(b, i, bytes);
                it->in_round = true;
                continue;
            }
            shl_router_shards_cleanup(&t);
            break;
        }
        /* Unordered: everything at once, per shard (big groups are split later rounds). */
        {
            bool any = false;
            for (size_t s = 0; s < t.n; s++) {
                sub_batch_t *b;
                if (item_done_on(it, t.names[s])) {
                    continue;
                }
                b = batch_for(batches, nb, t.names[s]);
                if (b->n > 0 &&
                    (b->n >= SUB_BATCH_MAX_ITEMS || b->bytes + bytes > SUB_BATCH_MAX_BYTES)) {
                    it->round_deferred = true; /* next round */
                    continue;
                }
                batch_add(b, i, bytes);
                any = true;
            }
            it->in_round = any;
            if (!any && t.n > 0 && !it->round_deferred) {
                bool all_done = true;
                for (size_t s = 0; s < t.n; s++) {
                    all_done = all_done && item_done_on(it, t.names[s]);
                }
                if (all_done) {
                    it->state = ITEM_DONE;
                }
            } else if (t.n == 0) {
                it->state = ITEM_DONE; /* no shard owns data for it */
            }
        }
        shl_router_shards_cleanup(&t);
    }
    return *nb > 0;
}

/* Whether a result is the router's own failure to get a reply (network, no host, deadline)
 * rather than a shard's error reply. */
static bool
is_local_failure(const shl_fanout_result_t *res)
{
    return res->code != 0 && bson_count_keys(&res->reply) == 0;
}

static void
add_retried(write_op_t *op, int32_t id)
{
    if (op->nretried == op->cap_retried) {
        op->cap_retried = op->cap_retried ? op->cap_retried * 2 : 8;
        op->retried = bson_realloc(op->retried, op->cap_retried * sizeof(int32_t));
    }
    op->retried[op->nretried++] = id;
}

/*
 * Fold one shard's reply to sub-batch 'b' (sent to 'host', "" if its shard had none) into the
 * op. Returns true if anything was stale.
 */
static bool
absorb_reply(shl_router_t *r, write_op_t *op, const sub_batch_t *b, shl_fanout_result_t *res,
             const char *host)
{
    bson_iter_t it, arr, e;
    size_t first_unrun = b->n; /* ordered: statements from here on did not run */
    bool *errored = NULL, stale = false;

    if (res->code != 0) {
        shl_status_t est = res->status;
        /* A snapshot error of a transaction's first statement: router_txn_observe started the
         * transaction over at a newer atClusterTime, and the statement goes again (mongos). */
        if (shl_router_is_stale(r, op->ns, &res->status) ||
            (op->opctx->txn != NULL && router_txn_take_snapshot_retry(op->opctx->txn))) {
            op->last_stale = res->status;
            for (size_t i = 0; i < b->n; i++) {
                op->items[b->idx[i]].round_stale = true;
            }
            return true;
        }
        if (is_local_failure(res)) {
            if (shl_code_in_category(res->code, SHL_CAT_SHUTDOWN_ERROR) &&
                atomic_load(&op->opctx->svc->shutting_down)) {
                /* This router is shutting down: the whole command fails (as mongos does), and
                 * the client may retry it elsewhere. */
                op->shutdown_error = true;
                op->shutdown_status = res->status;
                return false;
            }
            /* MongoDB's router: the statements fail with the error in context, and the labels
             * of a reply that never came are the router's to decide (none). */
            if (host[0] != '\0') {
                shl_status_set(&est, res->code,
                               "Write results unavailable from %s :: caused by :: %s", host,
                               res->status.reason);
            } else {
                shl_status_set(&est, res->code,
                               "Write results unavailable from failing to target a host in the "
                               "shard %s :: caused by :: %s",
                               b->shard, res->status.reason);
            }
        }
        for (size_t i = 0; i < b->n; i++) {
            item_set_error(&op->items[b->idx[i]], &est);
            if (op->ordered) {
                break;
            }
        }
        return false;
    }
    if (bson_iter_init_find(&it, &res->reply, "retriedStmtIds") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &arr)) {
        while (shl_iter_next(&arr)) {
            if (BSON_ITER_HOLDS_INT32(&arr)) {
                add_retried(op, bson_iter_int32(&arr));
            }
        }
    }
    errored = bson_malloc0((b->n + 1) * sizeof(bool));
    if (bson_iter_init_find(&it, &res->reply, "n") && BSON_ITER_HOLDS_NUMBER(&it)) {
        op->n_total += bson_iter_as_int64(&it);
    }
    if (bson_iter_init_find(&it, &res->reply, "nModified") && BSON_ITER_HOLDS_NUMBER(&it)) {
        op->n_modified += bson_iter_as_int64(&it);
    }
    router_wce_note(&op->wces, b->shard, &res->reply);
    if (bson_iter_init_find(&it, &res->reply, "upserted") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &arr)) {
        while (shl_iter_next(&arr)) {
            bson_iter_t f;
            int64_t k = -1;
            if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bson_iter_recurse(&arr, &f)) {
                continue;
            }
            while (shl_iter_next(&f)) {
                if (strcmp(shl_iter_key(&f), "index") == 0) {
                    k = bson_iter_as_int64(&f);
                }
            }
            bson_iter_recurse(&arr, &f);
            if (k >= 0 && (size_t)k < b->n && bson_iter_find(&f, "_id")) {
                item_t *item = &op->items[b->idx[k]];
                if (item->upserted) {
                    bson_value_destroy(&item->upserted_id);
                }
                bson_value_copy(bson_iter_value(&f), &item->upserted_id);
                item->upserted = true;
            }
        }
    }
    if (bson_iter_init_find(&it, &res->reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &arr)) {
        while (shl_iter_next(&arr)) {
            bson_t edoc, rest = BSON_INITIALIZER;
            int64_t k = -1;
            shl_status_t est = SHL_STATUS_INIT;
            int code = 0;
            const char *msg = "";
            const uint8_t *data;
            uint32_t len;
            item_t *item;

            if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
                continue;
            }
            bson_iter_document(&arr, &len, &data);
            bson_init_static(&edoc, data, len);
            bson_iter_init(&e, &edoc);
            while (shl_iter_next(&e)) {
                const char *key = shl_iter_key(&e);
                if (strcmp(key, "index") == 0) {
                    k = bson_iter_as_int64(&e);
                } else if (strcmp(key, "code") == 0) {
                    code = (int)bson_iter_as_int64(&e);
                } else if (strcmp(key, "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&e)) {
                    msg = bson_iter_utf8(&e, NULL);
                }
                if (strcmp(key, "index") != 0) {
                    bson_append_iter(&rest, NULL, 0, &e);
                }
            }
            if (k < 0 || (size_t)k >= b->n) {
                bson_destroy(&rest);
                continue;
            }
            item = &op->items[b->idx[k]];
            errored[k] = true;
            if (op->ordered && (size_t)k + 1 < first_unrun) {
                first_unrun = (size_t)k + 1;
            }
            shl_status_set(&est, code, "%s", msg);
            {
                bson_iter_t info;
                if (bson_iter_init_find(&info, &edoc, "errInfo") &&
                    BSON_ITER_HOLDS_DOCUMENT(&info)) {
                    bson_t extra;
                    bson_iter_document(&info, &len, &data);
                    bson_init_static(&extra, data, len);
                    shl_status_set_extra(&est, &extra);
                }
            }
            if (shl_router_is_stale(r, op->ns, &est)) {
                op->last_stale = est;
                item->round_stale = true;
                stale = true;
            } else if (item->state != ITEM_ERROR) {
                bson_destroy(&item->error);
                bson_steal(&item->error, &rest); /* rest is left destroyed */
                bson_init(&rest);
                item->state = ITEM_ERROR;
                item->round_error = true;
            }
            bson_destroy(&rest);
        }
    }
    for (size_t i = 0; i < b->n; i++) {
        item_t *item = &op->items[b->idx[i]];
        if (i >= first_unrun && !errored[i]) {
            item->round_stale = true; /* did not run: send it again */
            continue;
        }
        if (!errored[i]) {
            item_mark_done_on(item, b->shard);
        }
    }
    bson_free(errored);
    return stale;
}

/* Run the batch until every statement is done or failed (ordered: up to the first error). */
static int
run_write(shl_op_ctx_t *opctx, write_op_t *op, bool create_db, router_route_fn route,
          void *route_arg, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(opctx);
    shl_router_routing_t rr;
    sub_batch_t *batches = NULL;
    size_t nb = 0;
    int stale_rounds = 0;
    int ret = 0;

    memset(&rr, 0, sizeof(rr));
    SHL_ERR(route(route_arg, op->ns, create_db, &rr, st));
    for (;;) {
        shl_router_request_t *reqs;
        shl_fanout_result_t *fres;
        char(*hosts)[SHL_CLIENT_HOST_MAX];
        bool stale = false, exhausted, gave_up = false;

        SHL_ERR(shl_op_check_interrupt(opctx, st));
        if (!plan_round(op, &rr, &batches, &nb)) {
            break;
        }
        reqs = bson_malloc0((nb + 1) * sizeof(*reqs));
        fres = bson_malloc0((nb + 1) * sizeof(*fres));
        hosts = bson_malloc0((nb + 1) * sizeof(*hosts));
        for (size_t i = 0; i < nb; i++) {
            reqs[i].shard = batches[i].shard;
            build_sub_command(op, &rr, &batches[i], &reqs[i].cmd);
        }
        /* A retryable write's sub-batches may be sent again as they are: the shards answer
         * the statements that already ran from their history. */
        shl_router_send_retrying(r, opctx, op->db, reqs, nb, op->retryable, fres, hosts);
        for (size_t i = 0; i < nb; i++) {
            stale = absorb_reply(r, op, &batches[i], &fres[i], hosts[i]) || stale;
        }
        shl_fanout_results_cleanup(fres, nb);
        shl_router_requests_cleanup(reqs, nb);
        bson_free(fres);
        bson_free(reqs);
        bson_free(hosts);
        if (op->shutdown_error) {
            *st = op->shutdown_status;
            ret = st->code;
            goto done;
        }
        /* Settle the round's statements (the round flags are cleared for the next one). */
        exhausted = stale && ++stale_rounds >= SHL_ROUTER_MAX_STALE_RETRIES;
        for (size_t i = 0; i < nb; i++) {
            for (size_t j = 0; j < batches[i].n; j++) {
                item_t *it = &op->items[batches[i].idx[j]];
                if (it->in_round && it->state == ITEM_PENDING && !it->round_stale &&
                    !it->round_deferred) {
                    it->state = ITEM_DONE;
                }
                if (exhausted && it->state == ITEM_PENDING && it->round_stale &&
                    !(op->ordered && gave_up)) {
                    item_set_error(it, &op->last_stale);
                    gave_up = true;
                }
            }
        }
        for (size_t i = 0; i < nb; i++) {
            for (size_t j = 0; j < batches[i].n; j++) {
                item_t *it = &op->items[batches[i].idx[j]];
                it->in_round = it->round_stale = it->round_error = it->round_deferred = false;
            }
        }
        batches_free(batches, nb);
        batches = NULL;
        nb = 0;
        if (exhausted) {
            break;
        }
        if (stale) {
            SHL_LOG_DEBUG(1, SHARDING, 4620030, "re-routing the unfinished part of a write batch",
                          "ns", BCON_UTF8(op->ns), "attempt", BCON_INT32(stale_rounds), "error",
                          BCON_UTF8(op->last_stale.reason));
            shl_router_routing_cleanup(&rr);
            SHL_ERR(route(route_arg, op->ns, create_db, &rr, st));
        }
    }
done:
    batches_free(batches, nb);
    shl_router_routing_cleanup(&rr);
    return ret;
}

/* Append n, nModified, upserted, writeErrors and writeConcernError in the user's order. */
static void
append_result(const write_op_t *op, bson_t *reply)
{
    bson_t arr, d;
    uint32_t k = 0;
    char key[16];
    const char *ks;

    BSON_APPEND_INT32(reply, "n", (int32_t)op->n_total);
    if (op->kind == KIND_UPDATE) {
        BSON_APPEND_INT32(reply, "nModified", (int32_t)op->n_modified);
        for (size_t i = 0; i < op->n; i++) {
            if (op->items[i].upserted) {
                if (k == 0) {
                    bson_append_array_begin(reply, "upserted", -1, &arr);
                }
                bson_uint32_to_string(k++, &ks, key, sizeof(key));
                bson_append_document_begin(&arr, ks, -1, &d);
                BSON_APPEND_INT32(&d, "index", (int32_t)i);
                BSON_APPEND_VALUE(&d, "_id", &op->items[i].upserted_id);
                bson_append_document_end(&arr, &d);
            }
        }
        if (k > 0) {
            bson_append_array_end(reply, &arr);
        }
    }
    k = 0;
    for (size_t i = 0; i < op->n; i++) {
        if (op->items[i].state == ITEM_ERROR) {
            if (k == 0) {
                bson_append_array_begin(reply, "writeErrors", -1, &arr);
            }
            bson_uint32_to_string(k++, &ks, key, sizeof(key));
            bson_append_document_begin(&arr, ks, -1, &d);
            BSON_APPEND_INT32(&d, "index", (int32_t)i);
            bson_concat(&d, &op->items[i].error);
            bson_append_document_end(&arr, &d);
            if (op->ordered) {
                break;
            }
        }
    }
    if (k > 0) {
        bson_append_array_end(reply, &arr);
    }
    router_wce_append(&op->wces, reply);
    if (op->nretried > 0) {
        /* The statements the shards answered from their history (MongoDB: only when any). */
        bson_append_array_begin(reply, "retriedStmtIds", -1, &arr);
        for (size_t i = 0; i < op->nretried; i++) {
            bson_uint32_to_string((uint32_t)i, &ks, key, sizeof(key));
            bson_append_int32(&arr, ks, -1, op->retried[i]);
        }
        bson_append_array_end(reply, &arr);
    }
}

static void
write_op_cleanup(write_op_t *op)
{
    for (size_t i = 0; i < op->n; i++) {
        item_t *it = &op->items[i];
        bson_destroy(&it->doc);
        bson_destroy(&it->error);
        if (it->done_shards != NULL) {
            bson_strfreev(it->done_shards);
        }
        if (it->upserted) {
            bson_value_destroy(&it->upserted_id);
        }
    }
    bson_free(op->items);
    bson_free(op->stmt_ids);
    bson_free(op->retried);
    router_wce_cleanup(&op->wces);
}

/* One required field of a statement, of one of two types (BSON_TYPE_EOD: only the first). */
static int
check_field(const bson_t *stmt, const char *cmd, const char *arr, const char *field, bson_type_t t1,
            bson_type_t t2, const char *want, shl_status_t *st)
{
    bson_iter_t it;
    int ret = 0;

    if (!bson_iter_init_find(&it, stmt, field)) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '%s.%s.%s' is missing but a required field", cmd, arr, field);
    }
    if (shl_iter_type(&it) != t1 && shl_iter_type(&it) != t2) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '%s.%s.%s' is the wrong type '%s', expected type %s", cmd, arr, field,
                 shl_bson_type_name(shl_iter_type(&it)), want);
    }
done:
    return ret;
}

/* A malformed statement fails the whole command, as MongoDB's parser does. */
static int
check_statement(write_kind_t kind, const bson_t *stmt, shl_status_t *st)
{
    const char *cmd = kind_cmd(kind), *arr = kind_field(kind);
    int ret = 0;

    if (kind == KIND_INSERT) {
        goto done;
    }
    SHL_ERR(check_field(stmt, cmd, arr, "q", BSON_TYPE_DOCUMENT, BSON_TYPE_EOD, "'object'", st));
    if (kind == KIND_UPDATE) {
        SHL_ERR(check_field(stmt, cmd, arr, "u", BSON_TYPE_DOCUMENT, BSON_TYPE_ARRAY,
                            "'object' or 'array'", st));
    } else {
        bson_iter_t it;
        SHL_ERR(check_field(stmt, cmd, arr, "limit", BSON_TYPE_INT32, BSON_TYPE_INT64,
                            "'int' or 'long'", st));
        bson_iter_init_find(&it, stmt, "limit");
        if (bson_iter_as_int64(&it) != 0 && bson_iter_as_int64(&it) != 1) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "The limit field in delete objects must be 0 "
                     "or 1. Got %lld",
                     (long long)bson_iter_as_int64(&it));
        }
    }
done:
    return ret;
}

/* ---- WouldChangeOwningShard: the document moves in a transaction ---- */

static int route_from_cache(void *arg, const char *ns, bool create_db, shl_router_routing_t *out,
                            shl_status_t *st);

/* One document to move from its pre-image to its post-image (txn_api.h callback). */
typedef struct wcos_move {
    const char *coll;
    bson_t pre, post; /* the shard's images (views) */
    bool changed;     /* the document is no longer the pre-image: the statement runs again */
    int32_t stmt_id;  /* the user's statement's id (a retryable write) */
    bool upsert;      /* shouldUpsert: an upsert's new document, to insert on its owner */
    bool answered;    /* a retry: a shard had inserted it already, as 'answered_id' */
    bson_value_t answered_id;
} wcos_move_t;

/*
 * A retried cross-shard upsert: whether a shard already inserted its document for the
 * user's statement (the insert carried its stmtId): the user's statement with its stmtId and
 * a filter no document matches, sent as a probe (txn_router_private.h) to every shard; one
 * that ran it answers with the _id it upserted.
 */
static int
upsert_probe(shl_op_ctx_t *op, wcos_move_t *m, shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, arr, stmt, q, in, empty;
    bson_iter_t it;
    int ret = 0;

    BSON_APPEND_UTF8(&cmd, "update", m->coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &stmt);
    BSON_APPEND_DOCUMENT_BEGIN(&stmt, "q", &q);
    BSON_APPEND_DOCUMENT_BEGIN(&q, "_id", &in);
    BSON_APPEND_ARRAY_BEGIN(&in, "$in", &empty);
    bson_append_array_end(&in, &empty);
    bson_append_document_end(&q, &in);
    bson_append_document_end(&stmt, &q);
    /* (multi: every shard gets it directly; it matches nothing, so it sets nothing) */
    BSON_APPEND_DOCUMENT_BEGIN(&stmt, "u", &in);
    BSON_APPEND_DOCUMENT_BEGIN(&in, "$set", &empty);
    BSON_APPEND_INT32(&empty, "_", 1);
    bson_append_document_end(&in, &empty);
    bson_append_document_end(&stmt, &in);
    BSON_APPEND_BOOL(&stmt, "multi", true);
    bson_append_document_end(&arr, &stmt);
    bson_append_array_end(&cmd, &arr);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "stmtIds", &arr);
    BSON_APPEND_INT32(&arr, "0", m->stmt_id);
    bson_append_array_end(&cmd, &arr);
    router_txn_internal_probe(op->txn);
    SHL_ERR(router_write_run(op, &cmd, route_from_cache, shl_router_get(op), &reply, st));
    SHL_ERR(router_txn_api_reply_error(&reply, st));
    if (bson_has_field(&reply, "retriedStmtIds") && bson_iter_init(&it, &reply) &&
        bson_iter_find_descendant(&it, "upserted.0._id", &it)) {
        bson_value_copy(bson_iter_value(&it), &m->answered_id);
        m->answered = true;
    }
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* {_id, <each shard key path>} of 'doc': an exact match that routes to the one owner. */
static int
owner_query(shl_op_ctx_t *op, const char *coll, const bson_t *doc, bson_t *q, shl_status_t *st)
{
    shl_router_routing_t rr;
    char ns[SHL_NS_MAX + 1];
    bson_iter_t it, v;
    int ret = 0;

    memset(&rr, 0, sizeof(rr));
    bson_init(q);
    if (bson_iter_init_find(&it, doc, "_id")) {
        bson_append_iter(q, "_id", 3, &it);
    }
    snprintf(ns, sizeof(ns), "%s.%s", op->db, coll);
    SHL_ERR(shl_router_routing_init(shl_router_get(op), ns, false, &rr, st));
    if (rr.rt != NULL && bson_iter_init(&it, &shl_routing_table_key_pattern(rr.rt)->pattern)) {
        while (shl_iter_next(&it)) {
            const char *path = shl_iter_key(&it);
            if (strcmp(path, "_id") == 0) {
                continue;
            }
            if (bson_iter_init(&v, doc) && bson_iter_find_descendant(&v, path, &v)) {
                bson_append_iter(q, path, -1, &v);
            } else {
                bson_append_null(q, path, -1);
            }
        }
    }
done:
    shl_router_routing_cleanup(&rr);
    return ret;
}

/* The statements: remove the pre-image on its owner (it must be unchanged), insert the
 * post-image on its own. */
static int
wcos_move_fn(shl_op_ctx_t *op, void *arg, shl_status_t *st)
{
    wcos_move_t *m = arg;
    bson_t q = BSON_INITIALIZER, del = BSON_INITIALIZER, ins = BSON_INITIALIZER, arr;
    bson_t reply = BSON_INITIALIZER, value, le;
    bson_iter_t it;
    shl_router_t *r = shl_router_get(op);
    int ret = 0;

    bson_destroy(&q);
    if (m->upsert && router_txn_api_stmt_id(op, m->stmt_id) >= 0) {
        SHL_ERR(upsert_probe(op, m, st));
        if (m->answered) {
            goto done;
        }
    }
    if (m->upsert) {
        goto insert; /* nothing to remove: the upsert matched nothing */
    }
    SHL_ERR(owner_query(op, m->coll, &m->pre, &q, st));
    BSON_APPEND_UTF8(&del, "findAndModify", m->coll);
    BSON_APPEND_DOCUMENT(&del, "query", &q);
    BSON_APPEND_BOOL(&del, "remove", true);
    if (router_txn_api_stmt_id(op, m->stmt_id) >= 0) {
        /* The old owner records the move as the user's statement: a retry of it sent there
         * is answered, not run again (the document is gone from there). */
        BSON_APPEND_INT32(&del, "stmtId", m->stmt_id);
        BSON_APPEND_DOCUMENT(&del, WCOS_INSERT_FIELD, &m->post);
    }
    router_txn_internal_statement(op->txn);
    SHL_ERR(router_find_and_modify_run(op, &del, route_from_cache, r, &reply, st));
    if (!shl_bson_get_subdoc(&reply, "lastErrorObject", &le) ||
        !bson_iter_init_find(&it, &le, "n") || bson_iter_as_int64(&it) != 1 ||
        !shl_bson_get_subdoc(&reply, "value", &value) || !bson_equal(&value, &m->pre)) {
        m->changed = true;
        SHL_FAIL(st, SHL_CODE_WOULD_CHANGE_OWNING_SHARD_DELETED_NO_DOCUMENT,
                 "The document to move to its new shard was changed or deleted meanwhile");
    }
insert:
    bson_reinit(&reply);
    BSON_APPEND_UTF8(&ins, "insert", m->coll);
    BSON_APPEND_ARRAY_BEGIN(&ins, "documents", &arr);
    BSON_APPEND_DOCUMENT(&arr, "0", &m->post);
    bson_append_array_end(&ins, &arr);
    if (router_txn_api_stmt_id(op, m->stmt_id) >= 0) {
        /* The new owner records it as the user's update too (a retry may be sent there). */
        BSON_APPEND_ARRAY_BEGIN(&ins, "stmtIds", &arr);
        BSON_APPEND_INT32(&arr, "0", m->stmt_id);
        bson_append_array_end(&ins, &arr);
        if (!m->upsert) {
            BSON_APPEND_BOOL(&ins, WCOS_INSERT_FIELD, true);
        }
    }
    router_txn_internal_statement(op->txn);
    SHL_ERR(router_write_run(op, &ins, route_from_cache, r, &reply, st));
    SHL_ERR(router_txn_api_reply_error(&reply, st));
done:
    bson_destroy(&q);
    bson_destroy(&del);
    bson_destroy(&ins);
    bson_destroy(&reply);
    return ret;
}

/*
 * A WouldChangeOwningShard answer 'err' (with preImage / postImage) to a single-document
 * update or findAndModify: move the document in an internal transaction (or in the client's
 * transaction). *pre_out / *post_out (optional) get copies of the images. *changed: the
 * document changed meanwhile, the statement is to run again. Errors: the transaction's.
 */
static int
wcos_handle(shl_op_ctx_t *opctx, const char *coll, const bson_t *user_cmd, int32_t stmt_id,
            const bson_t *err, bson_t *pre_out, bson_t *post_out, bool *changed, bool *upserted,
            bool *retried, shl_status_t *st)
{
    wcos_move_t m;
    int ret = 0;

    memset(&m, 0, sizeof(m));
    m.coll = coll;
    m.stmt_id = stmt_id;
    m.upsert = get_bool(err, "shouldUpsert", false);
    *upserted = m.upsert;
    *changed = false;
    if (!shl_bson_get_subdoc(err, "preImage", &m.pre) ||
        !shl_bson_get_subdoc(err, "postImage", &m.post)) {
        SHL_FAIL(st, SHL_CODE_WOULD_CHANGE_OWNING_SHARD,
                 "This update would cause the doc to change owning shards (its images were too "
                 "large to move it)");
    }
    ret = router_txn_api_run(opctx, user_cmd, wcos_move_fn, &m, st);
    *changed = ret != 0 && m.changed;
    if (*changed) {
        ret = 0;
    }
    if (ret == 0 && !*changed && pre_out != NULL) {
        bson_copy_to(&m.pre, pre_out);
        if (m.answered) {
            /* A retry: the document inserted the first time, with its _id. */
            bson_init(post_out);
            BSON_APPEND_VALUE(post_out, "_id", &m.answered_id);
            bson_copy_to_excluding_noinit(&m.post, post_out, "_id", NULL);
        } else {
            bson_copy_to(&m.post, post_out);
        }
    }
    *retried = ret == 0 && m.answered;
    if (m.answered) {
        bson_value_destroy(&m.answered_id);
    }
done:
    return ret;
}

/* Whether this command may move a document between shards (MongoDB: a retryable write or
 * a transaction's statement). */
static bool
may_move(const shl_op_ctx_t *opctx)
{
    return opctx->txn != NULL || (opctx->has_txn_number && !opctx->has_autocommit);
}

/* The error document's code. */
static int
error_code(const bson_t *err)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, err, "code") ? (int)bson_iter_as_int64(&it) : 0;
}

/*
 * After a round of run_write: move the documents of the update statements that answered
 * WouldChangeOwningShard (ordered: the first error only). Returns whether a statement is
 * pending again (moved, or to be re-run); a failed move is the statement's error.
 */
static bool
handle_wcos_items(shl_op_ctx_t *opctx, write_op_t *op)
{
    bool again = false;

    for (size_t i = 0; op->kind == KIND_UPDATE && may_move(opctx) && i < op->n; i++) {
        item_t *it = &op->items[i];
        bool changed = false, upserted = false, retried = false;
        bson_t pre = BSON_INITIALIZER, post = BSON_INITIALIZER;
        bson_iter_t id;
        shl_status_t mst = SHL_STATUS_INIT;
        if (it->state != ITEM_ERROR) {
            continue;
        }
        if (error_code(&it->error) == SHL_CODE_WOULD_CHANGE_OWNING_SHARD && op->ids_broadcast &&
            op->n_total > 0) {
            /* The broadcast of this one statement matched the document on another shard
             * already: the shards are not reached at one instant, and another client moved the
             * document between them meanwhile. Moving it would apply the statement twice. */
            bson_reinit(&it->error);
            it->state = ITEM_DONE;
            continue;
        }
        if (error_code(&it->error) == SHL_CODE_WOULD_CHANGE_OWNING_SHARD &&
            !get_bool(&it->doc, "multi", false)) {
            bson_destroy(&pre);
            bson_destroy(&post);
            if (wcos_handle(opctx, op->coll, op->user_cmd, op->stmt_ids[i], &it->error, &pre,
                            &post, &changed, &upserted, &retried, &mst) == 0) {
                if (retried) {
                    add_retried(op, op->stmt_ids[i]);
                }
                bson_reinit(&it->error);
                it->state = changed ? ITEM_PENDING : ITEM_DONE; /* pending: runs again */
                op->n_total += changed ? 0 : 1;
                op->n_modified += changed || upserted ? 0 : 1;
                if (!changed && upserted && bson_iter_init_find(&id, &post, "_id")) {
                    /* An upsert whose new document belongs to another shard. */
                    if (it->upserted) {
                        bson_value_destroy(&it->upserted_id);
                    }
                    bson_value_copy(bson_iter_value(&id), &it->upserted_id);
                    it->upserted = true;
                }
                again = true;
            } else {
                bson_destroy(&it->error);
                error_from_status(&mst, &it->error);
            }
        }
        bson_destroy(&pre);
        bson_destroy(&post);
        if (op->ordered) {
            break;
        }
    }
    return again;
}

static int run_write_command_ex(shl_op_ctx_t *opctx, const bson_t *cmd, write_kind_t kind,
                                router_route_fn route, void *route_arg, bool ids_broadcast,
                                bson_t *reply, shl_status_t *st);

/*
 * A retryable write's exact _id statement 'i' sent alone as a broadcast with its stmtId.
 * Returns true when it is settled (it matched, was answered from a shard's history, or
 * failed); false: it matched nothing, the two-phase protocol is to run.
 */
static bool
run_id_broadcast(shl_op_ctx_t *opctx, write_op_t *op, size_t i)
{
    static const char *const copy[] = {"let", "bypassDocumentValidation", "writeConcern", NULL};
    item_t *it = &op->items[i];
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, arr, e;
    bson_iter_t f, a;
    shl_status_t bst = SHL_STATUS_INIT;
    bool settled = true;
    int64_t n = 0;

    BSON_APPEND_UTF8(&cmd, kind_cmd(op->kind), op->coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, kind_field(op->kind), &arr);
    BSON_APPEND_DOCUMENT(&arr, "0", &it->doc);
    bson_append_array_end(&cmd, &arr);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "stmtIds", &arr);
    BSON_APPEND_INT32(&arr, "0", op->stmt_ids[i]);
    bson_append_array_end(&cmd, &arr);
    for (size_t k = 0; copy[k] != NULL; k++) {
        if (bson_iter_init_find(&f, op->user_cmd, copy[k])) {
            bson_append_iter(&cmd, NULL, 0, &f);
        }
    }
    bson_destroy(&reply);
    if (run_write_command_ex(opctx, &cmd, op->kind, op->route, op->route_arg, true, &reply, &bst) !=
        0) {
        item_set_error(it, &bst);
    } else if (bson_iter_init_find(&f, &reply, "writeErrors") && bson_iter_recurse(&f, &a) &&
               bson_iter_next(&a) && BSON_ITER_HOLDS_DOCUMENT(&a) && bson_iter_recurse(&a, &f)) {
        bson_init(&e);
        while (shl_iter_next(&f)) {
            if (strcmp(shl_iter_key(&f), "index") != 0) {
                bson_append_iter(&e, NULL, 0, &f);
            }
        }
        bson_destroy(&it->error);
        bson_steal(&it->error, &e);
        it->state = ITEM_ERROR;
    } else {
        if (bson_iter_init_find(&f, &reply, "n")) {
            n = bson_iter_as_int64(&f);
        }
        settled = n > 0 || bson_has_field(&reply, "retriedStmtIds");
        if (settled) {
            /* One single-document statement: a document an update moved between shards
             * answers a retry from both its old and its new owner. */
            it->state = ITEM_DONE;
            op->n_total += n > 1 ? 1 : n;
            if (bson_iter_init_find(&f, &reply, "nModified")) {
                op->n_modified += bson_iter_as_int64(&f) > 1 ? 1 : bson_iter_as_int64(&f);
            }
            if (bson_has_field(&reply, "retriedStmtIds")) {
                add_retried(op, op->stmt_ids[i]);
            }
        }
    }
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return settled;
}

/*
 * After a round of run_write: run the pending single writes without shard key, each in its
 * own internal transaction (ordered: only when it is the next statement). Returns whether
 * any ran.
 */
static bool
run_two_phase_items(shl_op_ctx_t *opctx, write_op_t *op)
{
    bool ran = false;

    for (size_t i = op->scan_from; i < op->n; i++) {
        item_t *it = &op->items[i];
        bson_t reply = BSON_INITIALIZER;
        shl_status_t wst = SHL_STATUS_INIT;
        bson_iter_t f;
        if (it->state == ITEM_DONE) {
            continue;
        }
        if (it->state != ITEM_PENDING || !it->two_phase) {
            if (op->ordered) {
                break;
            }
            continue;
        }
        it->two_phase = false;
        ran = true;
        if (it->id_first && run_id_broadcast(opctx, op, i)) {
            it->id_first = false;
            if (op->ordered) {
                break;
            }
            continue;
        }
        it->id_first = false;
        if (router_write_without_shard_key(opctx, op->coll, kind_cmd(op->kind), &it->doc,
                                           op->user_cmd, op->stmt_ids[i], &reply, &wst) != 0) {
            item_set_error(it, &wst);
        } else {
            it->state = ITEM_DONE;
            if (bson_has_field(&reply, "retriedStmtIds")) {
                add_retried(op, op->stmt_ids[i]);
            }
            if (bson_iter_init_find(&f, &reply, "n")) {
                op->n_total += bson_iter_as_int64(&f);
            }
            if (bson_iter_init_find(&f, &reply, "nModified")) {
                op->n_modified += bson_iter_as_int64(&f);
            }
            if (bson_iter_init(&f, &reply) && bson_iter_find_descendant(&f, "upserted.0._id", &f)) {
                it->upserted = true;
                bson_value_copy(bson_iter_value(&f), &it->upserted_id);
            }
        }
        bson_destroy(&reply);
        if (op->ordered) {
            break;
        }
    }
    return ran;
}

/* Parse the command's collection, ordered flag and statements into 'op'. */
static int
write_op_init(shl_op_ctx_t *opctx, const bson_t *cmd, write_kind_t kind, write_op_t *op,
              shl_status_t *st)
{
    bson_iter_t it, arr;
    size_t cap = 0;
    int ret = 0;

    memset(op, 0, sizeof(*op));
    router_wce_init(&op->wces);
    op->kind = kind;
    op->opctx = opctx;
    op->user_cmd = cmd;
    op->pinned = bson_has_field(cmd, SHL_ROUTER_PINNED_FIELD);
    op->retryable = opctx->has_txn_number && !opctx->has_autocommit;
    op->txn_ids = opctx->txn != NULL && bson_has_field(cmd, "stmtIds");
    op->ordered = true;
    snprintf(op->db, sizeof(op->db), "%s", opctx->db);
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "collection name has invalid type %s",
                 "(not a string)");
    }
    op->coll = bson_iter_utf8(&it, NULL);
    if (op->coll[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid namespace specified '%s.'", op->db);
    }
    snprintf(op->ns, sizeof(op->ns), "%s.%s", op->db, op->coll);
    if (bson_iter_init_find(&it, cmd, "ordered")) {
        op->ordered = bson_iter_as_bool(&it);
    }
    if (!bson_iter_init_find(&it, cmd, kind_field(kind))) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '%s.%s' is missing but a required field", kind_cmd(kind),
                 kind_field(kind));
    }
    if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &arr)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '%s.%s' is the wrong type, expected type "
                 "'array'",
                 kind_cmd(kind), kind_field(kind));
    }
    {
        bson_iter_t count = arr;
        while (shl_iter_next(&count)) {
            cap++;
        }
        op->items = bson_malloc0((cap + 1) * sizeof(item_t));
    }
    while (shl_iter_next(&arr)) {
        item_t *item;
        const uint8_t *data;
        uint32_t len;
        bson_t view;

        if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field '%s.%s' is the wrong type '%s', expected type 'object'",
                     kind_cmd(kind), kind_field(kind), shl_bson_type_name(shl_iter_type(&arr)));
        }
        bson_iter_document(&arr, &len, &data);
        bson_init_static(&view, data, len);
        SHL_ERR(check_statement(kind, &view, st));
        /* Allocated once: an item holds bson_t's, which must not move (no realloc). */
        SHL_INVARIANT(op->n < cap);
        item = &op->items[op->n++];
        memset(item, 0, sizeof(*item));
        bson_init(&item->error);
        if (kind == KIND_INSERT && !bson_has_field(&view, "_id")) {
            /* As mongos does: an _id chosen here makes a re-sent statement idempotent. */
            bson_oid_t oid;
            bson_oid_init(&oid, NULL);
            bson_init(&item->doc);
            BSON_APPEND_OID(&item->doc, "_id", &oid);
            bson_concat(&item->doc, &view);
        } else {
            bson_copy_to(&view, &item->doc);
        }
    }
    if (op->n == 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_LENGTH,
                 "Write batch sizes must be between 1 and 100000. "
                 "Got 0 operations.");
    }
    if (op->n > SUB_BATCH_MAX_ITEMS) {
        SHL_FAIL(st, SHL_CODE_INVALID_LENGTH,
                 "Write batch sizes must be between 1 and 100000. "
                 "Got %zu operations.",
                 op->n);
    }
    /* The client's stmtId / stmtIds are checked as MongoDB's router parses them (one id per
     * statement) and give the ids the sub-batches carry when this is a retryable write. */
    SHL_ERR(shl_session_stmt_ids(cmd, (uint32_t)op->n, &op->stmt_ids, st));
done:
    return ret;
}

/* The routing of 'ns' from the router's catalog cache (the seam's production side). */
static int
route_from_cache(void *arg, const char *ns, bool create_db, shl_router_routing_t *out,
                 shl_status_t *st)
{
    return shl_router_routing_init(arg, ns, create_db, out, st);
}

static int
run_write_command_ex(shl_op_ctx_t *opctx, const bson_t *cmd, write_kind_t kind,
                     router_route_fn route, void *route_arg, bool ids_broadcast, bson_t *reply,
                     shl_status_t *st)
{
    write_op_t op;
    bool create_db = kind != KIND_DELETE;
    int ret = 0;

    SHL_ERR(write_op_init(opctx, cmd, kind, &op, st));
    if (kind != KIND_INSERT) {
        router_runtime_constants(opctx, &op.now_ms, &op.cluster_time);
    }
    op.ids_broadcast = ids_broadcast;
    op.route = route;
    op.route_arg = route_arg;
    ret = run_write(opctx, &op, create_db, route, route_arg, st);
    for (size_t moves = 0; ret == 0 && moves < 4 * op.n + 100; moves++) {
        bool again = handle_wcos_items(opctx, &op);
        again = run_two_phase_items(opctx, &op) || again;
        if (!again) {
            break;
        }
        ret = run_write(opctx, &op, create_db, route, route_arg, st);
    }
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND && !create_db) {
        /* Deleting from a database that does not exist deletes nothing, but each filter
         * still parses: an unknown operator is the statement's error, as on a shard. */
        ret = 0;
        for (size_t i = 0; i < op.n; i++) {
            bson_t q;
            shl_matcher_t *m = NULL;
            shl_status_t qst = SHL_STATUS_INIT;
            if (shl_bson_get_subdoc(&op.items[i].doc, "q", &q) &&
                shl_matcher_new(&q, SHL_MATCHER_DEFAULT | SHL_MATCHER_TEXT_DEFERRED, &m, &qst) != 0) {
                item_set_error(&op.items[i], &qst);
                if (op.ordered) {
                    break;
                }
            }
            shl_matcher_destroy(m);
        }
    }
    SHL_ERR(ret);
    append_result(&op, reply);
done:
    write_op_cleanup(&op);
    return ret;
}

static int
run_write_command(shl_op_ctx_t *opctx, const bson_t *cmd, write_kind_t kind, router_route_fn route,
                  void *route_arg, bson_t *reply, shl_status_t *st)
{
    return run_write_command_ex(opctx, cmd, kind, route, route_arg, false, reply, st);
}

int
router_write_run(shl_op_ctx_t *op, const bson_t *cmd, router_route_fn route, void *route_arg,
                 bson_t *reply, shl_status_t *st)
{
    const char *name = op->cmd_name != NULL ? op->cmd_name : "";
    bson_iter_t it;
    write_kind_t kind = KIND_INSERT;

    if (bson_iter_init(&it, cmd) && shl_iter_next(&it)) {
        name = shl_iter_key(&it);
    }
    if (strcmp(name, "update") == 0) {
        kind = KIND_UPDATE;
    } else if (strcmp(name, "delete") == 0) {
        kind = KIND_DELETE;
    }
    return run_write_command(op, cmd, kind, route, route_arg, reply, st);
}

static int
cmd_insert(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return run_write_command(op, cmd, KIND_INSERT, route_from_cache, shl_router_get(op), reply, st);
}

static int
cmd_update(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return run_write_command(op, cmd, KIND_UPDATE, route_from_cache, shl_router_get(op), reply, st);
}

static int
cmd_delete(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return run_write_command(op, cmd, KIND_DELETE, route_from_cache, shl_router_get(op), reply, st);
}

/* ---- findAndModify ---- */

/*
 * The shards a findAndModify goes to: the owner of the shard key its query pins; if the
 * query reaches one shard anyway, that one; a retryable write's exact _id match, every shard
 * the query reaches (at most one holds the document). Otherwise *two_phase: MongoDB 7.0's
 * write without shard key (an upsert: ShardKeyNotFound).
 */
static int
target_find_and_modify(const shl_router_routing_t *rr, const bson_t *q, bool upsert, bool retryable,
                       shl_router_shards_t *out, bool *two_phase, shl_status_t *st)
{
    bson_t key = BSON_INITIALIZER;
    const char *shard;
    int ret = 0;

    memset(out, 0, sizeof(*out));
    if (rr->rt == NULL) {
        set_one(out, rr->db.primary);
        goto done;
    }
    bson_destroy(&key);
    if (shl_shard_key_extract_from_query(shl_routing_table_key_pattern(rr->rt), q, &key)) {
        SHL_ERR(shl_routing_table_shard_for_key(rr->rt, &key, NULL, &shard, st));
        set_one(out, shard);
    } else {
        /* An upsert without the full shard key goes two-phase too (MongoDB 7.0): the query
         * phase decides whether it updates, and its new document goes to its owner. */
        shl_router_target_filter(rr, q, out);
        if (out->n > 1 && !(retryable && !upsert && is_exact_id_query(q))) {
            /* MongoDB 7.0: the two-phase protocol (also for an exact _id match reaching
             * several shards, which a migration's commit could make miss). */
            shl_router_shards_cleanup(out);
            *two_phase = true;
        }
    }
done:
    if (ret != 0) {
        shl_router_shards_cleanup(out);
    }
    bson_destroy(&key);
    return ret;
}

/* What the user's findAndModify returns once its document moved: the pre- or post-image
 * ('new'), projected by 'fields'. */
static void
fam_moved_reply(const bson_t *cmd, bool upserted, const bson_t *pre, const bson_t *post,
                bson_t *reply)
{
    bson_t le, fields, projected;
    const bson_t *value = get_bool(cmd, "new", false) ? post : pre;
    shl_projection_t *proj = NULL;
    shl_status_t pst = SHL_STATUS_INIT;
    bool have_projected = false;
    bson_iter_t id;

    BSON_APPEND_DOCUMENT_BEGIN(reply, "lastErrorObject", &le);
    BSON_APPEND_INT32(&le, "n", 1);
    BSON_APPEND_BOOL(&le, "updatedExisting", !upserted);
    if (upserted && bson_iter_init_find(&id, post, "_id")) {
        bson_append_iter(&le, "upserted", 8, &id);
    }
    bson_append_document_end(reply, &le);
    if (upserted && !get_bool(cmd, "new", false)) {
        /* An upsert returns no document before it. */
        BSON_APPEND_NULL(reply, "value");
        return;
    }
    if (shl_bson_get_subdoc(cmd, "fields", &fields) && !bson_empty(&fields) &&
        shl_projection_new(&fields, NULL, &proj, &pst) == 0) {
        have_projected = true;
        if (shl_projection_apply(proj, value, NULL, NULL, &projected, &pst) == 0) {
            value = &projected;
        }
    }
    BSON_APPEND_DOCUMENT(reply, "value", value);
    shl_projection_destroy(proj);
    if (have_projected) {
        bson_destroy(&projected);
    }
}

/* Whether any shard's findAndModify reply says it matched (lastErrorObject.n > 0). */
static bool
fam_matched(const shl_fanout_result_t *fres, size_t n)
{
    bool matched = false;

    for (size_t i = 0; i < n && !matched; i++) {
        bson_iter_t le, f;
        matched = fres[i].code == 0 &&
                  bson_iter_init_find(&le, &fres[i].reply, "lastErrorObject") &&
                  BSON_ITER_HOLDS_DOCUMENT(&le) && bson_iter_recurse(&le, &f) &&
                  bson_iter_find(&f, "n") && bson_iter_as_int64(&f) > 0;
    }
    return matched;
}

/* A findAndModify's statement id: the client's stmtId, else 0 (MongoDB's router's). */
static int32_t
fam_stmt_id(const bson_t *cmd)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, cmd, "stmtId") && BSON_ITER_HOLDS_INT32(&it)
               ? bson_iter_int32(&it)
               : 0;
}

int
router_find_and_modify_run(shl_op_ctx_t *opctx, const bson_t *cmd, router_route_fn route,
                           void *route_arg, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(opctx);
    bool retryable = opctx->has_txn_number && !opctx->has_autocommit;
    shl_router_routing_t rr;
    shl_router_shards_t targets = {0};
    shl_router_request_t *reqs = NULL;
    shl_fanout_result_t *fres = NULL;
    char ns[SHL_NS_MAX + 1];
    bson_t q = BSON_INITIALIZER;
    bson_iter_t it;
    bool upsert, two_phase = false;
    int ret = 0;

    memset(&rr, 0, sizeof(rr));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "collection name has invalid type");
    }
    snprintf(ns, sizeof(ns), "%s.%s", opctx->db, bson_iter_utf8(&it, NULL));
    upsert = get_bool(cmd, "upsert", false);
    for (int attempt = 1;; attempt++) {
        size_t hit = SIZE_MAX, first_err = SIZE_MAX;
        bool stale = false;
        bson_t view;

        SHL_ERR(shl_op_check_interrupt(opctx, st));
        SHL_ERR(route(route_arg, ns, true, &rr, st));
        bson_reinit(&q);
        if (get_doc(cmd, "query", &view)) {
            /* Under a non-simple collation (the command's or the collection's default),
             * string predicates do not target. */
            bson_destroy(&q);
            targeting_query(cmd, &rr, &view, bson_has_field(cmd, SHL_ROUTER_PINNED_FIELD), &q);
        }
        SHL_ERR(target_find_and_modify(&rr, &q, upsert, retryable, &targets, &two_phase, st));
        if (two_phase) {
            ret = router_write_without_shard_key(opctx, ns + strlen(opctx->db) + 1, "findAndModify",
                                                 NULL, cmd, fam_stmt_id(cmd), reply, st);
            goto done;
        }
        reqs = bson_malloc0((targets.n + 1) * sizeof(*reqs));
        fres = bson_malloc0((targets.n + 1) * sizeof(*fres));
        for (size_t i = 0; i < targets.n; i++) {
            bson_iter_t f;
            reqs[i].shard = targets.names[i];
            bson_init(&reqs[i].cmd);
            bson_iter_init(&f, cmd);
            while (shl_iter_next(&f)) {
                const char *k = shl_iter_key(&f);
                if (strcmp(k, "$db") == 0 || strcmp(k, "lsid") == 0 ||
                    strcmp(k, SHL_ROUTER_PINNED_FIELD) == 0 ||
                    strcmp(k, "$clusterTime") == 0 || strcmp(k, "$readPreference") == 0 ||
                    strcmp(k, "txnNumber") == 0 || strcmp(k, "writeConcern") == 0 ||
                    strcmp(k, "shardVersion") == 0 || strcmp(k, "databaseVersion") == 0) {
                    continue;
                }
                bson_append_iter(&reqs[i].cmd, NULL, 0, &f);
            }
            if (retryable && !bson_has_field(cmd, "stmtId")) {
                /* As MongoDB's router: the one statement's id, unless the client gave it. */
                BSON_APPEND_INT32(&reqs[i].cmd, "stmtId", 0);
            }
            append_generic_but_session(cmd, &reqs[i].cmd);
            append_session(opctx, &reqs[i].cmd);
            shl_router_append_versions(&rr, targets.names[i], &reqs[i].cmd);
        }
        shl_router_send_retrying(r, opctx, opctx->db, reqs, targets.n, retryable, fres, NULL);
        for (size_t i = 0; i < targets.n; i++) {
            bson_iter_t le, n;
            if (fres[i].code != 0) {
                if (shl_router_is_stale(r, ns, &fres[i].status) ||
                    (opctx->txn != NULL && router_txn_take_snapshot_retry(opctx->txn))) {
                    stale = true;
                    *st = fres[i].status;
                } else if (first_err == SIZE_MAX) {
                    first_err = i;
                }
                continue;
            }
            if (hit == SIZE_MAX) {
                hit = i; /* a reply to pass through even if nothing matched */
            }
            if (bson_iter_init_find(&le, &fres[i].reply, "lastErrorObject") &&
                BSON_ITER_HOLDS_DOCUMENT(&le) && bson_iter_recurse(&le, &n) &&
                bson_iter_find(&n, "n") && bson_iter_as_int64(&n) > 0) {
                hit = i;
            }
        }
        if (stale && attempt < SHL_ROUTER_MAX_STALE_RETRIES) {
            /* Only a stale shard did not run it; the others matched nothing or ran it. */
            bool matched = false;
            for (size_t i = 0; i < targets.n && hit != SIZE_MAX; i++) {
                bson_iter_t le, n;
                if (fres[i].code == 0 &&
                    bson_iter_init_find(&le, &fres[i].reply, "lastErrorObject") &&
                    BSON_ITER_HOLDS_DOCUMENT(&le) && bson_iter_recurse(&le, &n) &&
                    bson_iter_find(&n, "n") && bson_iter_as_int64(&n) > 0) {
                    matched = true;
                }
            }
            if (!matched) {
                shl_fanout_results_cleanup(fres, targets.n);
                shl_router_requests_cleanup(reqs, targets.n);
                bson_free(fres);
                bson_free(reqs);
                fres = NULL;
                reqs = NULL;
                shl_router_shards_cleanup(&targets);
                shl_router_routing_cleanup(&rr);
                continue;
            }
        } else if (stale) {
            ret = st->code;
            goto done;
        }
        if (first_err != SIZE_MAX && fres[first_err].code == SHL_CODE_WOULD_CHANGE_OWNING_SHARD &&
            may_move(opctx) && attempt < SHL_ROUTER_MAX_STALE_RETRIES + 100) {
            bool changed = false;
            bson_t pre = BSON_INITIALIZER, post = BSON_INITIALIZER;
            bson_destroy(&pre);
            bson_destroy(&post);
            bool upserted = false, retried = false;
            ret = wcos_handle(opctx, ns + strlen(opctx->db) + 1, cmd, fam_stmt_id(cmd),
                              &fres[first_err].reply, &pre, &post, &changed, &upserted, &retried,
                              st);
            if (ret == 0 && !changed) {
                fam_moved_reply(cmd, upserted, &pre, &post, reply);
                if (retried) {
                    BSON_APPEND_INT32(reply, "retriedStmtId", fam_stmt_id(cmd));
                }
                bson_destroy(&pre);
                bson_destroy(&post);
            }
            if (ret != 0 || !changed) {
                goto done;
            }
            shl_fanout_results_cleanup(fres, targets.n);
            shl_router_requests_cleanup(reqs, targets.n);
            bson_free(fres);
            bson_free(reqs);
            fres = NULL;
            reqs = NULL;
            shl_router_shards_cleanup(&targets);
            shl_router_routing_cleanup(&rr);
            continue; /* the document changed meanwhile: run the statement again */
        }
        if (first_err != SIZE_MAX && (hit == SIZE_MAX || targets.n == 1)) {
            /* The shard's error becomes the command's; its labels are not passed on (MongoDB's
             * router rethrows the status and labels it as a router: shard errors never get
             * RetryableWriteError there, and shards label nothing for an internal client). */
            *st = fres[first_err].status;
            st->labels = 0;
            ret = st->code;
            goto done;
        }
        if (targets.n > 1 && !upsert && !fam_matched(fres, targets.n)) {
            /* A retryable exact _id match that matched nothing on any shard: a migration's
             * commit can hide the document from a broadcast, so it runs two-phase. */
            ret = router_write_without_shard_key(opctx, ns + strlen(opctx->db) + 1, "findAndModify",
                                                 NULL, cmd, fam_stmt_id(cmd), reply, st);
            goto done;
        }
        if (hit != SIZE_MAX) {
            shl_router_copy_reply_fields(&fres[hit].reply, reply);
        }
        break;
    }
done:
    if (fres != NULL) {
        shl_fanout_results_cleanup(fres, targets.n);
        bson_free(fres);
    }
    if (reqs != NULL) {
        shl_router_requests_cleanup(reqs, targets.n);
        bson_free(reqs);
    }
    shl_router_shards_cleanup(&targets);
    shl_router_routing_cleanup(&rr);
    bson_destroy(&q);
    return ret;
}

static int
cmd_find_and_modify(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return router_find_and_modify_run(op, cmd, route_from_cache, shl_router_get(op), reply, st);
}

static const shl_command_t k_write_commands[] = {
    {"insert",
     {NULL},
     cmd_insert,
     SHL_CMD_WRITE | SHL_CMD_IN_TXN | SHL_CMD_RETRYABLE_WRITE,
     "insert documents"},
    {"update",
     {NULL},
     cmd_update,
     SHL_CMD_WRITE | SHL_CMD_IN_TXN | SHL_CMD_RETRYABLE_WRITE,
     "update documents"},
    {"delete",
     {NULL},
     cmd_delete,
     SHL_CMD_WRITE | SHL_CMD_IN_TXN | SHL_CMD_RETRYABLE_WRITE,
     "delete documents"},
    {"findAndModify",
     {"findandmodify"},
     cmd_find_and_modify,
     SHL_CMD_WRITE | SHL_CMD_IN_TXN | SHL_CMD_RETRYABLE_WRITE,
     "modify and return a single document"},
};

void
shl_cluster_write_commands_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(k_write_commands) / sizeof(k_write_commands[0]); i++) {
        shl_command_registry_add(reg, &k_write_commands[i]);
    }
}
