/*
 * cluster_write_wsk.c -- single writes without the shard key (MongoDB 7.0's two-phase write
 * protocol; docs/design/transactions.md "Internal transactions"): an updateOne / deleteOne /
 * findAndModify whose filter does not pin one shard runs, inside an internal transaction
 * (txn_api.h),
 *   1. _clusterQueryWithoutShardKey: a find {filter, limit: 1} on every shard the filter
 *      reaches; the first document by findAndModify's sort across them is chosen (no sort:
 *      the first shard's, in targeting order);
 *   2. _clusterWriteWithoutShardKey: the user's write with its filter narrowed to that
 *      document's _id and shard key, which routes it to the one shard owning it now.
 * Both steps are statements of one transaction, so a chunk migration between them cannot make
 * the write miss the document: a stale step is retried by the transaction's rules, and a
 * write phase that matched nothing (the document moved meanwhile) retries the transaction.
 */
#include <string.h>

#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "query/matcher.h"
#include "query/projection.h"
#include "query/sort.h"
#include "query/update.h"
#include "router/router_private.h"
#include "router/txn_api.h"
#include "router/txn_router_private.h"
#include "sharding/shard_key.h"

/* The statement being run and what it returned. */
typedef struct wsk {
    const char *db;
    const char *coll;
    const char *kind;   /* "update", "delete" or "findAndModify" */
    const bson_t *stmt; /* update/delete: the statement; findAndModify: the command */
    const bson_t *user; /* the user's command (let, collation, bypassDocumentValidation) */
    bson_t q;           /* the statement's filter (view) */
    int32_t user_stmt_id; /* the user's statement id */
    int32_t stmt_id;      /* ... in a retryable internal transaction, else -1 */
    bson_t reply;       /* the write phase's reply */
} wsk_t;

/* A filter no document matches: a probe statement runs without touching anything. */
static void
append_match_nothing(bson_t *cmd, const char *key)
{
    bson_t q, in, arr;

    BSON_APPEND_DOCUMENT_BEGIN(cmd, key, &q);
    BSON_APPEND_DOCUMENT_BEGIN(&q, "_id", &in);
    BSON_APPEND_ARRAY_BEGIN(&in, "$in", &arr);
    bson_append_array_end(&in, &arr);
    bson_append_document_end(&q, &in);
    bson_append_document_end(cmd, &q);
}

/*
 * The history probe of a retryable write's statement for one shard: the user's statement
 * with its stmtId but a filter that matches nothing (and no upsert). A shard whose earlier
 * internal transaction of the same write ran the statement answers it from that
 * (retriedStmtIds); the others match nothing. MongoDB's shards check a write's history the
 * same way before running it.
 */
static void
build_probe(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    const wsk_t *w = arg;
    bson_iter_t it;
    bson_t arr, stmt;

    (void)rr;
    (void)shard;
    if (strcmp(w->kind, "findAndModify") == 0) {
        static const char *const copy[] = {"update", "remove", "new", "fields", "arrayFilters",
                                           "bypassDocumentValidation", "let", "collation", NULL};
        BSON_APPEND_UTF8(cmd, "findAndModify", w->coll);
        append_match_nothing(cmd, "query");
        for (size_t i = 0; copy[i] != NULL; i++) {
            if (bson_iter_init_find(&it, w->user, copy[i])) {
                bson_append_iter(cmd, NULL, 0, &it);
            }
        }
        BSON_APPEND_INT32(cmd, "stmtId", w->stmt_id);
        return;
    }
    BSON_APPEND_UTF8(cmd, w->kind, w->coll);
    BSON_APPEND_ARRAY_BEGIN(cmd, strcmp(w->kind, "update") == 0 ? "updates" : "deletes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &stmt);
    append_match_nothing(&stmt, "q");
    bson_iter_init(&it, w->stmt);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "q") != 0 && strcmp(k, "upsert") != 0 && strcmp(k, "hint") != 0) {
            bson_append_iter(&stmt, NULL, 0, &it);
        }
    }
    bson_append_document_end(&arr, &stmt);
    bson_append_array_end(cmd, &arr);
    BSON_APPEND_ARRAY_BEGIN(cmd, "stmtIds", &arr);
    BSON_APPEND_INT32(&arr, "0", w->stmt_id);
    bson_append_array_end(cmd, &arr);
    if (bson_iter_init_find(&it, w->user, "let")) {
        bson_append_iter(cmd, NULL, 0, &it);
    }
}

/*
 * Whether a shard answered the probe from its history: *w->reply is then that answer. A
 * shard's error fails the attempt.
 */
static int
probe_history(shl_op_ctx_t *op, wsk_t *w, const char *ns, bool *answered, shl_status_t *st)
{
    shl_router_shard_result_t *res = NULL;
    size_t nres = 0;
    bool fam = strcmp(w->kind, "findAndModify") == 0;
    int ret = 0;

    *answered = false;
    router_txn_internal_probe(op->txn);
    SHL_ERR(shl_router_scatter(shl_router_get(op), op, ns, &w->q, build_probe, w, NULL, &res,
                               &nres, st));
    for (size_t i = 0; i < nres && !*answered; i++) {
        const bson_t *reply = &res[i].res.reply;
        bson_iter_t it;
        static const char *const keep[] = {"n",     "nModified", "upserted", "lastErrorObject",
                                           "value", NULL};
        if (res[i].res.code != 0) {
            *st = res[i].res.status;
            ret = st->code;
            goto done;
        }
        SHL_ERR(router_txn_api_reply_error(reply, st));
        if (!bson_has_field(reply, fam ? "retriedStmtId" : "retriedStmtIds")) {
            continue;
        }
        *answered = true;
        for (size_t k = 0; keep[k] != NULL; k++) {
            if (bson_iter_init_find(&it, reply, keep[k])) {
                bson_append_iter(&w->reply, NULL, 0, &it);
            }
        }
        if (fam) {
            BSON_APPEND_INT32(&w->reply, "retriedStmtId", w->stmt_id);
        } else {
            bson_t arr;
            BSON_APPEND_ARRAY_BEGIN(&w->reply, "retriedStmtIds", &arr);
            BSON_APPEND_INT32(&arr, "0", w->stmt_id);
            bson_append_array_end(&w->reply, &arr);
        }
    }
done:
    shl_router_scatter_results_free(res, nres);
    return ret;
}

/* The find of the query phase for one shard. */
static void
build_query(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    const wsk_t *w = arg;
    bson_iter_t it;
    static const char *const copy[] = {"collation", "let", "hint", "sort", NULL};
    const bson_t *src = strcmp(w->kind, "findAndModify") == 0 ? w->user : w->stmt;

    (void)rr;
    (void)shard;
    BSON_APPEND_UTF8(cmd, "find", w->coll);
    BSON_APPEND_DOCUMENT(cmd, "filter", &w->q);
    BSON_APPEND_INT64(cmd, "limit", 1);
    BSON_APPEND_BOOL(cmd, "singleBatch", true);
    for (size_t i = 0; copy[i] != NULL; i++) {
        if (bson_iter_init_find(&it, src, copy[i]) ||
            (strcmp(copy[i], "let") == 0 && bson_iter_init_find(&it, w->user, "let"))) {
            bson_append_iter(cmd, NULL, 0, &it);
        }
    }
}

/* The first document of a find reply's firstBatch (a view), if any. */
static bool
first_doc(const bson_t *reply, bson_t *doc)
{
    bson_iter_t it, b;
    const uint8_t *data;
    uint32_t len;

    if (!bson_iter_init(&it, reply) || !bson_iter_find_descendant(&it, "cursor.firstBatch", &b) ||
        !BSON_ITER_HOLDS_ARRAY(&b) || !bson_iter_recurse(&b, &it) || !bson_iter_next(&it) ||
        !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return false;
    }
    bson_iter_document(&it, &len, &data);
    return bson_init_static(doc, data, len);
}

/*
 * The user's filter narrowed to 'doc': its _id and every shard key path (so the write routes
 * to the owner). A filter without a top-level _id gets the fields beside its own (a positional
 * update still sees its own conditions); otherwise {$and: [filter, {...}]}.
 */
static void
narrowed_filter(const bson_t *q, const bson_t *doc, const bson_t *pattern, bool collated,
                bson_t *out)
{
    bson_t pin = BSON_INITIALIZER, arr;
    bson_iter_t it, v;

    if (bson_iter_init_find(&it, doc, "_id")) {
        bson_append_iter(&pin, "_id", 3, &it);
    }
    if (pattern != NULL && bson_iter_init(&it, pattern)) {
        while (shl_iter_next(&it)) {
            const char *path = shl_iter_key(&it);
            /* Under a collation the filter's own value may differ from the document's
             * ("B" for "b"): pin the document's, in the $and form targeting reads. */
            if (strcmp(path, "_id") == 0 || (!collated && bson_has_field(q, path))) {
                continue;
            }
            if (bson_iter_init(&v, doc) && bson_iter_find_descendant(&v, path, &v)) {
                bson_append_iter(&pin, path, -1, &v);
            } else {
                bson_append_null(&pin, path, -1);
            }
        }
    }
    bson_init(out);
    if (!collated && !bson_has_field(q, "_id")) {
        bson_concat(out, q);
        bson_concat(out, &pin);
    } else {
        BSON_APPEND_ARRAY_BEGIN(out, "$and", &arr);
        BSON_APPEND_DOCUMENT(&arr, "0", q);
        BSON_APPEND_DOCUMENT(&arr, "1", &pin);
        bson_append_array_end(out, &arr);
    }
    bson_destroy(&pin);
}

/* The write phase's command: the user's statement (or findAndModify) with filter 'nq'. */
static void write_stmt_cmd(const wsk_t *w, const bson_t *nq, bson_t *out);

static void
write_cmd(const wsk_t *w, const bson_t *nq, bson_t *out)
{
    bson_iter_t it;

    bson_init(out);
    if (strcmp(w->kind, "findAndModify") == 0) {
        bson_iter_init(&it, w->user);
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (strcmp(k, "query") == 0) {
                BSON_APPEND_DOCUMENT(out, "query", nq);
            } else if (strcmp(k, "sort") != 0 && strcmp(k, "stmtId") != 0 &&
                       strcmp(k, "upsert") != 0) {
                /* (The document exists: should it vanish, the attempt runs again.) */
                bson_append_iter(out, NULL, 0, &it);
            }
        }
    } else {
        write_stmt_cmd(w, nq, out);
    }
    if (w->stmt_id >= 0 && strcmp(w->kind, "findAndModify") == 0) {
        BSON_APPEND_INT32(out, "stmtId", w->stmt_id);
    } else if (w->stmt_id >= 0) {
        bson_t arr;
        BSON_APPEND_ARRAY_BEGIN(out, "stmtIds", &arr);
        BSON_APPEND_INT32(&arr, "0", w->stmt_id);
        bson_append_array_end(out, &arr);
    }
}

/* write_cmd for an update / delete statement. */
static void
write_stmt_cmd(const wsk_t *w, const bson_t *nq, bson_t *out)
{
    bson_iter_t it;
    bson_t arr, stmt;
    static const char *const copy[] = {"let", "bypassDocumentValidation", NULL};

    BSON_APPEND_UTF8(out, w->kind, w->coll);
    BSON_APPEND_ARRAY_BEGIN(out, strcmp(w->kind, "update") == 0 ? "updates" : "deletes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &stmt);
    bson_iter_init(&it, w->stmt);
    while (shl_iter_next(&it)) {
        if (strcmp(shl_iter_key(&it), "q") == 0) {
            BSON_APPEND_DOCUMENT(&stmt, "q", nq);
        } else if (strcmp(shl_iter_key(&it), "upsert") == 0) {
            /* The document exists: should it vanish, the attempt runs again and upserts. */
            BSON_APPEND_BOOL(&stmt, "upsert", false);
        } else {
            bson_append_iter(&stmt, NULL, 0, &it);
        }
    }
    bson_append_document_end(&arr, &stmt);
    bson_append_array_end(out, &arr);
    for (size_t i = 0; copy[i] != NULL; i++) {
        if (bson_iter_init_find(&it, w->user, copy[i])) {
            bson_append_iter(out, NULL, 0, &it);
        }
    }
}

static int
route(void *arg, const char *ns, bool create_db, shl_router_routing_t *out, shl_status_t *st)
{
    return shl_router_routing_init(arg, ns, create_db, out, st);
}

/* The statement's n (update/delete) or lastErrorObject.n (findAndModify). */
static int64_t
reply_n(const wsk_t *w, const bson_t *reply)
{
    bson_iter_t it;
    const char *path = strcmp(w->kind, "findAndModify") == 0 ? "lastErrorObject.n" : "n";

    return bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, path, &it) &&
                   BSON_ITER_HOLDS_NUMBER(&it)
               ? bson_iter_as_int64(&it)
               : 0;
}

static bool
is_upsert(const bson_t *stmt)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, stmt, "upsert") && bson_iter_as_bool(&it);
}

/* A findAndModify's reply once its upsert inserted 'doc': the new document ('new', projected
 * by 'fields') or null. */
static void
fam_upserted_reply(wsk_t *w, const bson_t *doc)
{
    bson_t le, fields, projected;
    bson_iter_t it;
    shl_projection_t *proj = NULL;
    shl_status_t pst = SHL_STATUS_INIT;
    bool want_new = bson_iter_init_find(&it, w->user, "new") && bson_iter_as_bool(&it);

    BSON_APPEND_DOCUMENT_BEGIN(&w->reply, "lastErrorObject", &le);
    BSON_APPEND_INT32(&le, "n", 1);
    BSON_APPEND_BOOL(&le, "updatedExisting", false);
    if (bson_iter_init_find(&it, doc, "_id")) {
        bson_append_iter(&le, "upserted", 8, &it);
    }
    bson_append_document_end(&w->reply, &le);
    if (!want_new) {
        BSON_APPEND_NULL(&w->reply, "value");
    } else if (shl_bson_get_subdoc(w->user, "fields", &fields) && !bson_empty(&fields) &&
               shl_projection_new(&fields, NULL, &proj, &pst) == 0 &&
               shl_projection_apply(proj, doc, NULL, NULL, &projected, &pst) == 0) {
        BSON_APPEND_DOCUMENT(&w->reply, "value", &projected);
        bson_destroy(&projected);
    } else {
        BSON_APPEND_DOCUMENT(&w->reply, "value", doc);
    }
    shl_projection_destroy(proj);
}

/*
 * Nothing matched an upsert: the document it inserts (the filter's equality fields, then the
 * update applied as an insert) goes to its owner; the reply is the update's {n: 1,
 * nModified: 0, upserted: [{index: 0, _id}]}.
 */
static int
upsert_new(shl_op_ctx_t *op, wsk_t *w, shl_status_t *st)
{
    shl_update_t *u = NULL;
    shl_matcher_t *m = NULL;
    shl_update_ctx_t uctx;
    bson_t doc = BSON_INITIALIZER, filters, ins = BSON_INITIALIZER, arr, up, reply;
    bson_iter_t it, id;
    bool fam = strcmp(w->kind, "findAndModify") == 0;
    const bson_t *src = fam ? w->user : w->stmt;
    int ret = 0;

    memset(&uctx, 0, sizeof(uctx));
    uctx.is_insert = true;
    uctx.vars = NULL;
    bson_init(&reply);
    if (!bson_iter_init_find(&it, src, fam ? "update" : "u")) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "update statement without 'u'");
    }
    SHL_ERR(shl_update_new(bson_iter_value(&it),
                           shl_bson_get_subdoc(src, "arrayFilters", &filters) ? &filters : NULL,
                           &u, st));
    SHL_ERR(shl_matcher_new(&w->q, SHL_MATCHER_DEFAULT | SHL_MATCHER_TEXT_DEFERRED, &m, st));
    bson_destroy(&doc);
    SHL_ERR(shl_update_upsert_doc(u, m, &uctx, &doc, st));
    BSON_APPEND_UTF8(&ins, "insert", w->coll);
    BSON_APPEND_ARRAY_BEGIN(&ins, "documents", &arr);
    BSON_APPEND_DOCUMENT(&arr, "0", &doc);
    bson_append_array_end(&ins, &arr);
    if (bson_iter_init_find(&it, w->user, "bypassDocumentValidation")) {
        bson_append_iter(&ins, NULL, 0, &it);
    }
    if (w->stmt_id >= 0) {
        BSON_APPEND_ARRAY_BEGIN(&ins, "stmtIds", &arr);
        BSON_APPEND_INT32(&arr, "0", w->stmt_id);
        bson_append_array_end(&ins, &arr);
    }
    router_txn_internal_statement(op->txn);
    SHL_ERR(router_write_run(op, &ins, route, shl_router_get(op), &reply, st));
    SHL_ERR(router_txn_api_reply_error(&reply, st));
    if (fam) {
        fam_upserted_reply(w, &doc);
        goto done;
    }
    BSON_APPEND_INT32(&w->reply, "n", 1);
    BSON_APPEND_INT32(&w->reply, "nModified", 0);
    BSON_APPEND_ARRAY_BEGIN(&w->reply, "upserted", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &up);
    BSON_APPEND_INT32(&up, "index", 0);
    if (bson_iter_init_find(&id, &doc, "_id")) {
        bson_append_iter(&up, "_id", 3, &id);
    }
    bson_append_document_end(&arr, &up);
    bson_append_array_end(&w->reply, &arr);
done:
    shl_update_destroy(u);
    shl_matcher_destroy(m);
    bson_destroy(&doc);
    bson_destroy(&ins);
    bson_destroy(&reply);
    return ret;
}

/* One attempt: the query phase, then the write phase on the chosen document. */
static int
wsk_fn(shl_op_ctx_t *op, void *arg, shl_status_t *st)
{
    wsk_t *w = arg;
    shl_router_t *r = shl_router_get(op);
    shl_router_routing_t rr;
    shl_router_shard_result_t *res = NULL;
    size_t nres = 0;
    char ns[SHL_NS_MAX + 1];
    bson_t doc, spec, nq = BSON_INITIALIZER, cmd = BSON_INITIALIZER, tq = BSON_INITIALIZER;
    shl_sort_pattern_t *sort = NULL;
    shl_collator_t *coll = NULL;
    const bson_t *holder = strcmp(w->kind, "findAndModify") == 0 ? w->user : w->stmt;
    bool found = false, collated = false;
    int ret = 0;

    memset(&rr, 0, sizeof(rr));
    bson_reinit(&w->reply);
    snprintf(ns, sizeof(ns), "%s.%s", w->db, w->coll);
    if (strcmp(w->kind, "findAndModify") == 0 && shl_bson_get_subdoc(w->user, "sort", &spec) &&
        !bson_empty(&spec)) {
        SHL_ERR(shl_sort_pattern_new(&spec, &sort, st));
        /* The shards sort under the write's collation: pick the first in that order. */
        SHL_ERR(shl_router_effective_collator(r, ns, holder, &coll, st));
        shl_sort_pattern_set_collator(sort, coll);
    }
    w->stmt_id = router_txn_api_stmt_id(op, w->user_stmt_id);
    if (w->stmt_id >= 0) {
        bool answered = false;
        SHL_ERR(probe_history(op, w, ns, &answered, st));
        if (answered) {
            goto done;
        }
    }
    /* _clusterQueryWithoutShardKey: targeted by what the write's collation lets target. */
    router_txn_internal_statement(op->txn);
    bson_destroy(&tq);
    shl_router_targeting_filter(holder, NULL, &w->q, &tq); /* the dispatch adds the default's */
    SHL_ERR(shl_router_scatter(r, op, ns, &tq, build_query, w, &rr, &res, &nres, st));
    for (size_t i = 0; i < nres && !(found && sort == NULL); i++) {
        bson_t cand;
        if (res[i].res.code != 0) {
            *st = res[i].res.status;
            ret = st->code;
            goto done;
        }
        /* The first document by the sort across shards (none: the first shard's). */
        if (first_doc(&res[i].res.reply, &cand) &&
            (!found || shl_sort_doc_compare(sort, &cand, &doc) < 0)) {
            /* A static bson_t points into itself: copy the view, never the struct. */
            bson_init_static(&doc, bson_get_data(&cand), cand.len);
            found = true;
        }
    }
    if (!found && is_upsert(strcmp(w->kind, "findAndModify") == 0 ? w->user : w->stmt)) {
        ret = upsert_new(op, w, st);
        goto done;
    }
    if (!found) {
        /* Nothing matches: the user's write matched nothing (an empty reply). */
        if (strcmp(w->kind, "findAndModify") == 0) {
            bson_t le;
            BSON_APPEND_DOCUMENT_BEGIN(&w->reply, "lastErrorObject", &le);
            BSON_APPEND_INT32(&le, "n", 0);
            if (!bson_has_field(w->user, "remove")) {
                BSON_APPEND_BOOL(&le, "updatedExisting", false);
            }
            bson_append_document_end(&w->reply, &le);
            BSON_APPEND_NULL(&w->reply, "value");
        } else {
            BSON_APPEND_INT32(&w->reply, "n", 0);
            if (strcmp(w->kind, "update") == 0) {
                BSON_APPEND_INT32(&w->reply, "nModified", 0);
            }
        }
        goto done;
    }
    /* _clusterWriteWithoutShardKey */
    bson_destroy(&nq);
    collated = shl_router_collation_strips(holder, &rr);
    narrowed_filter(&w->q, &doc,
                    rr.rt != NULL ? &shl_routing_table_key_pattern(rr.rt)->pattern : NULL,
                    collated, &nq);
    bson_destroy(&cmd);
    write_cmd(w, &nq, &cmd);
    if (collated) {
        BSON_APPEND_BOOL(&cmd, SHL_ROUTER_PINNED_FIELD, true);
    }
    router_txn_internal_statement(op->txn);
    if (strcmp(w->kind, "findAndModify") == 0) {
        SHL_ERR(router_find_and_modify_run(op, &cmd, route, r, &w->reply, st));
    } else {
        SHL_ERR(router_write_run(op, &cmd, route, r, &w->reply, st));
        SHL_ERR(router_txn_api_reply_error(&w->reply, st));
    }
    if (reply_n(w, &w->reply) == 0) {
        /* The document is not where the query phase found it any more: try again. */
        SHL_FAIL(st, SHL_CODE_WRITE_CONFLICT,
                 "the document chosen for a write without shard key changed meanwhile");
    }
done:
    if (ret != 0 && router_txn_transient(ret, false, false)) {
        shl_status_add_label(st, SHL_LABEL(TRANSIENT_TRANSACTION_ERROR));
    }
    shl_sort_pattern_destroy(sort);
    shl_collator_release(coll);
    shl_router_scatter_results_free(res, nres);
    shl_router_routing_cleanup(&rr);
    bson_destroy(&nq);
    bson_destroy(&cmd);
    bson_destroy(&tq);
    return ret;
}

int
router_write_without_shard_key(shl_op_ctx_t *op, const char *coll, const char *kind,
                               const bson_t *stmt, const bson_t *user_cmd, int32_t stmt_id,
                               bson_t *reply, shl_status_t *st)
{
    wsk_t w;
    int ret = 0;

    memset(&w, 0, sizeof(w));
    w.db = op->db;
    w.coll = coll;
    w.kind = kind;
    w.stmt = stmt;
    w.user = user_cmd;
    w.user_stmt_id = stmt_id;
    w.stmt_id = -1;
    bson_init(&w.reply);
    if (!shl_bson_get_subdoc(strcmp(kind, "findAndModify") == 0 ? user_cmd : stmt,
                             strcmp(kind, "findAndModify") == 0 ? "query" : "q", &w.q)) {
        bson_init(&w.q);
    }
    SHL_LOG_DEBUG(2, SHARDING, 7170001, "Running a single write without shard key", "kind",
                  BCON_UTF8(kind), "coll", BCON_UTF8(coll));
    ret = router_txn_api_run(op, user_cmd, wsk_fn, &w, st);
    if (ret == 0) {
        shl_router_copy_reply_fields(&w.reply, reply);
    }
    bson_destroy(&w.reply);
    return ret;
}
