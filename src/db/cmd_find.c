/*
 * cmd_find.c -- the read commands of a data node: find (with the IDHACK fast path and
 * local.oplog.rs), getMore, killCursors, count, distinct, explain and aggregate, with MongoDB
 * 7.0's request fields, errors and reply shapes. Reads run in a storage snapshot that a
 * cursor keeps across getMores; the collection lock is held (shared) only while a batch
 * is produced, so DDL on the collection waits for batches, not for idle cursors.
 */
#include <string.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "bson/bson_compare.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/db_private.h"
#include "db/views.h"
#include "db/txn_participant.h"
#include "db/exec.h"
#include "db/change_stream.h"
#include "db/tail_cursor.h"
#include "net/command_args.h"
#include "net/message.h"
#include "query/pipeline.h"
#include "query/text.h"
#include "query/view_rewrite.h"
#include "session/session_commands.h"

/*
 * MongoDB's waitInFindBeforeMakingBatch: a find (of data.nss only, when given) waits here
 * until the fail point is switched off or the operation is killed (killOp, shutdown).
 */
SHL_FAILPOINT_DEFINE(waitInFindBeforeMakingBatch)

static bool
nss_filter(const bson_t *data, void *arg)
{
    bson_iter_t it;
    return !bson_iter_init_find(&it, data, "nss") || !BSON_ITER_HOLDS_UTF8(&it) ||
           strcmp(bson_iter_utf8(&it, NULL), (const char *)arg) == 0;
}

/* IDL's "value must be >= 0" validator code. */
#define CODE_IDL_NEGATIVE 51024

static int
nonneg_field(const bson_t *cmd, const char *field, int64_t *out, bool *found, shl_status_t *st)
{
    int ret = 0;
    SHL_ERR(shl_cmd_get_int64(cmd, field, out, found, st));
    if (*found && *out < 0) {
        SHL_FAIL(st, CODE_IDL_NEGATIVE, "BSON field '%s' value must be >= 0, actual value '%lld'",
                 field, (long long)*out);
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- find */

/* A tailable cursor outlives the end of the data; only its limit ends it. */
static bool
tail_alive(const shl_cursor_t *c)
{
    return c->tailable && !(c->limit > 0 && c->n_returned >= c->limit);
}

typedef struct find_args {
    bson_t filter, sort, projection;
    bson_t collation_cmd; /* view of {collation: ...} inside the command, when has_collation */
    bool has_collation;
    bool has_filter, has_sort, has_projection;
    bool has_hint;
    bson_value_t hint;
    int64_t skip, limit, batch_size;
    bool has_batch_size;
    bool single_batch, no_cursor_timeout;
    bool tailable, await_data;
    bson_t min, max; /* {} counts as absent, as in MongoDB */
    bool has_min, has_max;
    bool return_key, show_record_id;
} find_args_t;

enum {
    F_UNKNOWN,
    F_FILTER,
    F_PROJECTION,
    F_SORT,
    F_HINT,
    F_SKIP,
    F_LIMIT,
    F_BATCH_SIZE,
    F_SINGLE_BATCH,
    F_NO_CURSOR_TIMEOUT,
    F_TAILABLE,
    F_AWAIT_DATA,
    F_BOOL, /* accepted booleans with no effect here */
    F_COLLATION,
    F_ACCEPTED, /* accepted, any type (handled elsewhere or ignored as MongoDB does) */
    F_REFUSED,  /* MongoDB has it, Shale does not yet */
    F_MIN,
    F_MAX,
    F_RETURN_KEY,
    F_SHOW_RECORD_ID,
};

static const struct {
    const char *name;
    int id;
} find_field_ids[] = {
    {"filter", F_FILTER},
    {"projection", F_PROJECTION},
    {"sort", F_SORT},
    {"hint", F_HINT},
    {"skip", F_SKIP},
    {"limit", F_LIMIT},
    {"batchSize", F_BATCH_SIZE},
    {"singleBatch", F_SINGLE_BATCH},
    {"noCursorTimeout", F_NO_CURSOR_TIMEOUT},
    {"allowDiskUse", F_BOOL},
    {"allowPartialResults", F_BOOL},
    {"readOnce", F_BOOL},
    {"oplogReplay", F_BOOL},
    {"collation", F_COLLATION},
    {"comment", F_ACCEPTED},
    {"maxTimeMS", F_ACCEPTED},
    {"readConcern", F_ACCEPTED},
    {"term", F_ACCEPTED},
    {"includeQueryStatsMetrics", F_ACCEPTED},
    {"allowSpeculativeMajorityRead", F_ACCEPTED},
    {"max", F_MAX},
    {"min", F_MIN},
    {"returnKey", F_RETURN_KEY},
    {"showRecordId", F_SHOW_RECORD_ID},
    {"tailable", F_TAILABLE},
    {"awaitData", F_AWAIT_DATA},
    {"let", F_ACCEPTED}, /* evaluated by db_let_vars */
    {"legacyRuntimeConstants", F_ACCEPTED}, /* a router's $$NOW/$$CLUSTER_TIME: db_let_vars */
    {"$_requestResumeToken", F_REFUSED},
    {"$_resumeAfter", F_REFUSED},
    {"$_startAt", F_REFUSED},
};

static int
find_field_id(const char *k)
{
    for (size_t i = 0; i < sizeof(find_field_ids) / sizeof(find_field_ids[0]); i++) {
        /* The first byte rules out most names before a full compare. */
        if (find_field_ids[i].name[0] == k[0] && strcmp(find_field_ids[i].name, k) == 0) {
            return find_field_ids[i].id;
        }
    }
    return F_UNKNOWN;
}

static int
wrong_type(const char *field, const bson_iter_t *it, const char *expected, shl_status_t *st)
{
    return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                          "BSON field 'find.%s' is the wrong type '%s', expected type '%s'", field,
                          shl_bson_type_name(shl_iter_type(it)), expected);
}

static int
doc_field(const bson_iter_t *it, bson_t *out, bool *has, shl_status_t *st)
{
    const uint8_t *data;
    uint32_t len;
    if (!BSON_ITER_HOLDS_DOCUMENT(it)) {
        return wrong_type(shl_iter_key(it), it, "object", st);
    }
    bson_iter_document(it, &len, &data);
    bson_init_static(out, data, len);
    *has = true;
    return 0;
}

static int
nonneg_iter(const bson_iter_t *it, int64_t *out, shl_status_t *st)
{
    if (!BSON_ITER_HOLDS_NUMBER(it)) {
        return wrong_type(shl_iter_key(it), it, "long", st);
    }
    if (BSON_ITER_HOLDS_DOUBLE(it)) {
        double d = bson_iter_double(it);
        if (d != d || d >= 9.2233720368547758e18 || d < -9.2233720368547758e18) {
            return shl_status_set(st, SHL_CODE_BAD_VALUE,
                                  "BSON field 'find.%s' has a value out of range",
                                  shl_iter_key(it));
        }
    }
    *out = bson_iter_as_int64(it);
    if (*out < 0) {
        return shl_status_set(st, CODE_IDL_NEGATIVE,
                              "BSON field '%s' value must be >= 0, actual value '%lld'",
                              shl_iter_key(it), (long long)*out);
    }
    return 0;
}

static int
bool_iter(const bson_iter_t *it, bool *out, shl_status_t *st)
{
    /* MongoDB's IDL accepts numbers for bool ("safeBool"). */
    if (!BSON_ITER_HOLDS_BOOL(it) && !BSON_ITER_HOLDS_NUMBER(it)) {
        return wrong_type(shl_iter_key(it), it, "bool", st);
    }
    *out = bson_iter_as_bool(it);
    return 0;
}

/* MongoDB's rules for the tailable modes (query_request validation). */
static int
check_tailable(const find_args_t *a, shl_status_t *st)
{
    int ret = 0;
    if (a->await_data && !a->tailable) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "Cannot set 'awaitData' without also setting 'tailable'");
    }
    if (!a->tailable) {
        goto done;
    }
    if (a->has_sort && !bson_empty(&a->sort)) {
        bson_iter_t it;
        if (!bson_iter_init(&it, &a->sort) || !shl_iter_next(&it) ||
            strcmp(shl_iter_key(&it), "$natural") != 0 || !BSON_ITER_HOLDS_NUMBER(&it) ||
            bson_iter_as_int64(&it) != 1 || shl_iter_next(&it)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "cannot use tailable option with a sort other than {$natural: 1}");
        }
    }
    if (a->single_batch) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "cannot use tailable option with the 'singleBatch' option");
    }
done:
    return ret;
}

/* min and max name the same fields in the same order (MongoDB's request validation). */
static int
check_minmax(const find_args_t *a, shl_status_t *st)
{
    bson_iter_t i, j;
    bool same = true, mi, mj;
    if (!a->has_min || !a->has_max) {
        return 0;
    }
    if (bson_iter_init(&i, &a->min) && bson_iter_init(&j, &a->max)) {
        do {
            mi = shl_iter_next(&i);
            mj = shl_iter_next(&j);
            same = mi == mj && (!mi || strcmp(shl_iter_key(&i), shl_iter_key(&j)) == 0);
        } while (same && mi);
    }
    return same ? 0 : shl_status_set(st, 51176, "min and max must have the same field names");
}

/* One pass over the command: find is the hot path of point reads. */
static int
parse_find(const bson_t *cmd, find_args_t *a, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool b;

    memset(a, 0, sizeof(*a));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it)) {
        SHL_FAIL(st, SHL_CODE_INVALID_BSON, "invalid command");
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        switch (find_field_id(k)) {
        case F_FILTER:
            SHL_ERR(doc_field(&it, &a->filter, &a->has_filter, st));
            break;
        case F_PROJECTION:
            SHL_ERR(doc_field(&it, &a->projection, &a->has_projection, st));
            break;
        case F_SORT:
            SHL_ERR(doc_field(&it, &a->sort, &a->has_sort, st));
            break;
        case F_HINT:
            if (!BSON_ITER_HOLDS_UTF8(&it) && !BSON_ITER_HOLDS_DOCUMENT(&it)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "hint must be a string or an object");
            }
            a->hint = *bson_iter_value(&it);
            /* {} and "" mean no hint, as in MongoDB. */
            a->has_hint = !(BSON_ITER_HOLDS_UTF8(&it) && a->hint.value.v_utf8.len == 0) &&
                          !(BSON_ITER_HOLDS_DOCUMENT(&it) && a->hint.value.v_doc.data_len <= 5);
            break;
        case F_SKIP:
            SHL_ERR(nonneg_iter(&it, &a->skip, st));
            break;
        case F_LIMIT:
            SHL_ERR(nonneg_iter(&it, &a->limit, st));
            break;
        case F_BATCH_SIZE:
            SHL_ERR(nonneg_iter(&it, &a->batch_size, st));
            a->has_batch_size = true;
            break;
        case F_SINGLE_BATCH:
            SHL_ERR(bool_iter(&it, &a->single_batch, st));
            break;
        case F_NO_CURSOR_TIMEOUT:
            SHL_ERR(bool_iter(&it, &a->no_cursor_timeout, st));
            break;
        case F_TAILABLE:
            SHL_ERR(bool_iter(&it, &a->tailable, st));
            break;
        case F_AWAIT_DATA:
            SHL_ERR(bool_iter(&it, &a->await_data, st));
            break;
        case F_BOOL:
            SHL_ERR(bool_iter(&it, &b, st));
            break;
        case F_MIN:
            SHL_ERR(doc_field(&it, &a->min, &a->has_min, st));
            a->has_min = !bson_empty(&a->min);
            break;
        case F_MAX:
            SHL_ERR(doc_field(&it, &a->max, &a->has_max, st));
            a->has_max = !bson_empty(&a->max);
            break;
        case F_RETURN_KEY:
            SHL_ERR(bool_iter(&it, &a->return_key, st));
            break;
        case F_SHOW_RECORD_ID:
            SHL_ERR(bool_iter(&it, &a->show_record_id, st));
            break;
        case F_COLLATION:
            SHL_ERR(db_check_collation(cmd, "collation", st));
            /* The element alone, as a one-field document viewed in place is not possible:
             * keep the command itself (it outlives the query). */
            bson_init_static(&a->collation_cmd, bson_get_data(cmd), cmd->len);
            a->has_collation = true;
            break;
        case F_ACCEPTED:
            break;
        case F_REFUSED:
            if (!(BSON_ITER_HOLDS_BOOL(&it) && !bson_iter_bool(&it))) {
                SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "find.%s is not supported yet", k);
            }
            break;
        default:
            if (!shl_cmd_is_generic_arg(k)) {
                SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD, "BSON field '%s.%s' is an unknown field.",
                         shl_cmd_name(cmd), k);
            }
            break;
        }
    }
    SHL_ERR(check_minmax(a, st));
    SHL_ERR(check_tailable(a, st));
done:
    return ret;
}

/* find {_id: v} without sort, projection, hint or skip: one index lookup, no plan. */
static bool
idhack_eligible(const find_args_t *a, const char *ns, bson_value_t *id)
{
    if (!a->has_filter || a->has_sort || a->has_projection || a->has_hint || a->skip > 0 ||
        a->has_min || a->has_max || a->return_key || a->show_record_id ||
        a->tailable || (a->has_batch_size && a->batch_size == 0) || db_ns_is_oplog(ns) ||
        a->has_collation) {
        /* (Without a collation the query's is the collection's default, the _id index's:
         * the lookup compares as the query does.) */
        return false;
    }
    /* exec_query_init's {_id: v} test, without building a matcher. */
    {
        bson_iter_t it, v;
        if (!bson_iter_init(&it, &a->filter) || !shl_iter_next(&it) ||
            strcmp(shl_iter_key(&it), "_id") != 0) {
            return false;
        }
        v = it;
        if (shl_iter_next(&it)) {
            return false;
        }
        if (BSON_ITER_HOLDS_ARRAY(&v) || BSON_ITER_HOLDS_REGEX(&v) ||
            BSON_ITER_HOLDS_UNDEFINED(&v)) {
            return false;
        }
        if (BSON_ITER_HOLDS_DOCUMENT(&v)) {
            bson_iter_t sub;
            if (bson_iter_recurse(&v, &sub) && shl_iter_next(&sub) &&
                shl_iter_key(&sub)[0] == '$') {
                return false;
            }
        }
        *id = *bson_iter_value(&v);
    }
    return true;
}

static int
find_by_id(shl_op_ctx_t *op, const shl_ns_t *ns, const bson_value_t *id, uint64_t read_ts,
           const shl_db_orphan_filter_t *filter, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    shl_coll_handle_t h;
    shl_storage_txn_t *txn = NULL;
    bson_t doc, arr = BSON_INITIALIZER;
    bool found = false, have_doc = false, locked = false;

    SHL_ERR(shl_storage_coll_acquire(node->eng, ns->full, SHL_LOCK_SHARED, &h, st));
    locked = true;
    SHL_ERR(shl_collection_check_visible(h.coll, read_ts, st));
    if (h.coll != NULL) {
        shl_storage_txn_opts_t o = {.read_timestamp = read_ts};
        if (db_txn_storage(op) != NULL) {
            /* A transaction's statement reads in the transaction's snapshot. */
            ret = shl_doc_find_by_id(db_txn_storage(op), h.coll, id, &doc, NULL, &found, st);
            have_doc = true;
            SHL_ERR(ret);
            goto found;
        }
        SHL_ERR(shl_storage_txn_begin(node->eng, read_ts ? &o : NULL, &txn, st));
        ret = shl_doc_find_by_id(txn, h.coll, id, &doc, NULL, &found, st);
        have_doc = true;
        SHL_ERR(ret);
    found:
        /* A versioned read never returns an orphan (the SHARDING_FILTER of a plan). */
        if (found && shl_db_orphan_filter_owns(filter, &doc)) {
            bson_append_document(&arr, "0", 1, &doc);
        }
    }
    shl_cursor_reply(reply, ns->full, 0, true, &arr);
done:
    if (have_doc) {
        bson_destroy(&doc);
    }
    shl_storage_txn_abort(txn);
    if (locked) {
        shl_storage_coll_release(&h);
    }
    bson_destroy(&arr);
    return ret;
}

/*
 * Build the plan of a find over 'ns' (collection lock held by the caller in 'h').
 * On success *out owns 'q'.
 */
static int
build_find_plan(db_node_t *node, shl_storage_txn_t *txn, const shl_ns_t *ns, shl_coll_handle_t *h,
                exec_query_t *q, uint64_t read_ts, exec_plan_t **out, shl_status_t *st)
{
    return exec_plan_build(node->eng, txn, read_ts, h->coll, ns->full, q, out, st);
}

/* Whether a filter reads $$CLUSTER_TIME (the one variable a find without `let` may need). */
static bool
mentions_cluster_time(const find_args_t *a)
{
    return a->has_filter &&
           memmem(bson_get_data(&a->filter), a->filter.len, "$$CLUSTER_TIME", 14) != NULL;
}

static int
parse_query(const find_args_t *a, const bson_t *vars, exec_query_t **out, shl_status_t *st)
{
    int ret = 0;
    exec_query_t *q = bson_aligned_alloc0(BSON_ALIGNOF(exec_query_t), sizeof(*q));
    bson_iter_t it;
    bool natural = a->has_sort && bson_iter_init(&it, &a->sort) && shl_iter_next(&it) &&
                   strcmp(shl_iter_key(&it), "$natural") == 0 && !shl_iter_next(&it);

    *out = NULL;
    ret = exec_query_init(q, a->has_filter ? &a->filter : NULL,
                          a->has_sort && !natural ? &a->sort : NULL,
                          a->has_projection && !a->return_key ? &a->projection : NULL, st);
    if (ret != 0) {
        exec_query_cleanup(q);
        bson_free(q);
        return ret;
    }
    if (vars != NULL) {
        exec_query_set_let(q, vars);
    }
    q->text_score = (a->has_sort && shl_text_score_wanted(&a->sort)) ||
                    (a->has_projection && !a->return_key && shl_text_score_wanted(&a->projection));
    if (q->text_score && !q->has_text) {
        exec_query_cleanup(q);
        bson_free(q);
        return shl_status_set(st, 40218,
                              "query requires text score metadata, but it is not available");
    }
    if (a->has_collation) {
        ret = db_query_collation(&a->collation_cmd, "collation", q, st);
        if (ret != 0) {
            exec_query_cleanup(q);
            bson_free(q);
            return ret;
        }
    }
    q->has_hint = a->has_hint;
    q->hint = a->hint;
    if (natural && !a->has_hint) {
        /* sort {$natural: 1|-1} is a collection scan in that direction, like the hint. */
        q->has_hint = true;
        q->hint.value_type = BSON_TYPE_DOCUMENT;
        q->hint.value.v_doc.data = (uint8_t *)(uintptr_t)bson_get_data(&a->sort);
        q->hint.value.v_doc.data_len = a->sort.len;
    }
    q->skip = a->skip;
    q->limit = a->limit;
    if (a->has_min) {
        bson_init_static(&q->min, bson_get_data(&a->min), a->min.len);
        q->has_min = true;
    }
    if (a->has_max) {
        bson_init_static(&q->max, bson_get_data(&a->max), a->max.len);
        q->has_max = true;
    }
    q->return_key = a->return_key;
    q->show_record_id = a->show_record_id;
    *out = q;
    return ret;
}

static int aggregate_run(shl_op_ctx_t *op, const bson_t *cmd, const char *view_ns, bson_t *reply,
                         shl_status_t *st);

/*
 * A read (find, count, distinct, aggregate) of 'ns': when 'ns' is a view (*handled), run as
 * the aggregate of its resolution, or -- a router's read of a view on a sharded collection,
 * or its explain -- refused with CommandOnShardedViewNotSupportedOnMongod (169) carrying the
 * resolved view, which the router runs itself (as a shard of MongoDB 7.0 answers mongos).
 */
static int
view_read(shl_op_ctx_t *op, const bson_t *cmd, const shl_ns_t *ns, bson_t *reply, bool *handled,
          shl_status_t *st)
{
    int ret = 0;
    db_view_resolved_t r;
    bool is_view = false;
    bson_t agg = BSON_INITIALIZER, agg_reply = BSON_INITIALIZER, key = BSON_INITIALIZER;

    *handled = false;
    SHL_ERR(db_view_resolve(op, ns, &r, &is_view, st));
    if (!is_view) {
        goto done;
    }
    *handled = true;
    if ((op->has_shard_version || op->has_database_version) &&
        (shl_db_shard_key(op, r.ns, &key) || shl_bson_has_key(cmd, "explain"))) {
        bson_t extra = BSON_INITIALIZER;
        db_view_resolved_append(&r, &extra);
        shl_status_set(st, SHL_CODE_COMMAND_ON_SHARDED_VIEW_NOT_SUPPORTED_ON_MONGOD,
                       "Resolved views on sharded collections must be executed by mongos");
        shl_status_set_extra(st, &extra);
        bson_destroy(&extra);
        ret = SHL_CODE_COMMAND_ON_SHARDED_VIEW_NOT_SUPPORTED_ON_MONGOD;
        goto done;
    }
    bson_destroy(&agg);
    SHL_ERR(db_view_aggregate_cmd(cmd, &r, &agg, st));
    SHL_ERR(aggregate_run(op, &agg, ns->full, &agg_reply, st));
    /* An explain's reply is the aggregate's explain. */
    SHL_ERR(shl_view_reply(shl_bson_has_key(cmd, "explain") ? "aggregate" : shl_cmd_name(cmd),
                          &agg_reply, reply, st));
done:
    if (is_view) {
        db_view_resolved_cleanup(&r);
    }
    bson_destroy(&agg);
    bson_destroy(&agg_reply);
    bson_destroy(&key);
    return ret;
}

static int
cmd_find(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    shl_ns_t ns;
    find_args_t a;
    db_read_concern_t rc;
    uint64_t read_ts;
    bson_value_t id;
    exec_query_t *q = NULL;
    exec_plan_t *plan = NULL;
    shl_cursor_t *c = NULL;
    shl_coll_handle_t h;
    bool locked = false, exhausted = false;
    bson_t arr = BSON_INITIALIZER;
    int64_t cursor_id = 0;
    shl_db_orphan_filter_t *filter = NULL;
    bson_t vars = BSON_INITIALIZER;
    bool has_vars = false;

    db_cmd_begin(op);
    SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
    SHL_ERR(parse_find(cmd, &a, st));
    {
        bool view = false;
        SHL_ERR(view_read(op, cmd, &ns, reply, &view, st));
        if (view) {
            goto done;
        }
    }
    if (atomic_load_explicit(&SHL_FAILPOINT(waitInFindBeforeMakingBatch)->active,
                             memory_order_relaxed) &&
        shl_failpoint_evaluate(SHL_FAILPOINT(waitInFindBeforeMakingBatch), nss_filter, ns.full,
                               NULL)) {
        shl_failpoint_pause_while_set(SHL_FAILPOINT(waitInFindBeforeMakingBatch), &op->killed);
        SHL_ERR(shl_op_check_interrupt(op, st));
    }
    SHL_ERR(db_read_concern_get(op, &rc, st));
    SHL_ERR(shl_db_sharding_check(op, ns.full, SHL_DB_SHARD_READ, &filter, st));
    SHL_ERR(db_read_ts_for(op, &rc, ns.full, &read_ts, st));
    if (rc.level == DB_RC_SNAPSHOT && a.tailable) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "Tailable cursors are not supported with readConcern level 'snapshot'");
    }
    /* Before the _id fast path too: a bad `let` fails every find. */
    SHL_ERR(db_let_vars(op, cmd, mentions_cluster_time(&a), &vars, &has_vars, st));
    if (idhack_eligible(&a, ns.full, &id)) {
        SHL_ERR(find_by_id(op, &ns, &id, read_ts, filter, reply, st));
        goto done;
    }
    SHL_ERR(parse_query(&a, has_vars ? &vars : NULL, &q, st));
    /* A router merging the shards' results by score reads it from the documents. */
    /* (A router sorting gets whole documents and projects them itself, so it gets the score
     * whenever it sorts.) */
    if (op->has_shard_version && a.has_sort && q->has_text) {
        q->text_score = true;
        q->text_score_keep = true;
    }
    /* The query (owned by the plan, then the cursor) keeps the filter for its life. */
    q->orphan_filter = filter;
    filter = NULL;
    SHL_ERR(shl_storage_coll_acquire(node->eng, ns.full, SHL_LOCK_SHARED, &h, st));
    locked = true;
    if (a.tailable && h.coll != NULL) {
        if (!h.coll->capped && !h.coll->is_oplog) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "error processing query: ns=%s tailable cursor requested on non capped "
                     "collection",
                     ns.full);
        }
        /* A tailable cursor reads the latest data round after round, not one snapshot. */
        c = shl_cursor_new(ns.full, &db_tail_cursor_ops, db_tail_source_new(node->eng, h.coll, q));
        q = NULL;
        c->tailable = true;
        c->await_data = a.await_data;
    } else {
        SHL_ERR(build_find_plan(node, db_txn_storage(op), &ns, &h, q, read_ts, &plan, st));
        exec_plan_own_query(plan);
        q = NULL;
        c = shl_cursor_new(ns.full, &exec_plan_cursor_ops, plan);
        plan = NULL;
    }
    c->at_cluster_time = rc.level == DB_RC_SNAPSHOT ? rc.at_cluster_time : 0;
    c->limit = a.limit;
    c->no_timeout = a.no_cursor_timeout;
    if (!(a.has_batch_size && a.batch_size == 0)) {
        SHL_ERR(shl_cursor_fill_batch(op, c, a.batch_size, true, &arr, &exhausted, st));
    }
    if (c->tailable) {
        db_tail_source_end_round(c->state);
    }
    shl_storage_coll_release(&h);
    locked = false;
    if ((exhausted && !tail_alive(c)) || a.single_batch) {
        shl_cursor_destroy(c);
    } else {
        cursor_id = shl_cursor_manager_register(node->cursors, c, op);
    }
    c = NULL;
    shl_cursor_reply_at(reply, ns.full, cursor_id, true, &arr,
                        rc.level == DB_RC_SNAPSHOT ? rc.at_cluster_time : 0);
done:
    if (locked) {
        shl_storage_coll_release(&h);
    }
    shl_cursor_destroy(c);
    exec_plan_destroy(plan);
    if (q != NULL) {
        exec_query_cleanup(q);
        bson_free(q);
    }
    shl_db_orphan_filter_release(filter);
    bson_destroy(&arr);
    bson_destroy(&vars);
    return ret;
}

/* ---------------------------------------------------------------- getMore */

static const char *const getmore_fields[] = {"collection",
                                             "batchSize",
                                             "maxTimeMS",
                                             "term",
                                             "lastKnownCommittedOpTime",
                                             "comment",
                                             "includeQueryStatsMetrics",
                                             NULL};

/* ---------------------------------------------------------------- aggregate cursors */

/* The pipeline's source: the executor's plan over the collection. */
typedef struct agg_source {
    exec_plan_t *plan;
    shl_op_ctx_t *op;
} agg_source_t;

static int
agg_source_next(void *arg, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    agg_source_t *src = arg;
    exec_row_t row;
    bool eof;

    *doc = NULL;
    if (src->plan == NULL) {
        goto done;
    }
    SHL_ERR(exec_plan_next(src->plan, src->op, &row, &eof, st));
    if (!eof) {
        *doc = row.doc;
    }
done:
    return ret;
}

/*
 * An aggregate's state, which its cursor keeps across getMores (the pipeline streams: each
 * batch is produced under the collection lock, as a find's). The pipeline borrows 'let' and
 * 'env'; the plan owns its query.
 */
typedef struct agg_state {
    shl_pipeline_t *pl;
    exec_plan_t *plan;
    agg_source_t src;
    db_agg_env_t env;
    bson_t *let;
    /* {SHL_INVOLVED_VERSIONS_FIELD: [...]} of the aggregate (NULL: none): the collections
     * its stages read or write over local copies because the router routed them as
     * unsharded, checked again by every getMore -- a collection sharded meanwhile ends the
     * cursor with StaleConfig instead of returning the local part of it. */
    bson_t *involved;
    /* The aggregate's collation (its own or the collection's default; NULL: simple), which
     * the pipeline borrows. */
    shl_collator_t *collator;
    /* A view's aggregate: the collection read, which getMores lock (the cursor is named
     * after the view); empty otherwise. */
    char source_ns[SHL_NS_MAX + 1];
} agg_state_t;

static int
agg_cursor_next(void *state, shl_op_ctx_t *op, const bson_t **doc, shl_status_t *st)
{
    agg_state_t *a = state;
    a->src.op = op;
    a->env.op = op;
    return shl_pipeline_next(a->pl, doc, st);
}

static void
agg_state_destroy(void *state)
{
    agg_state_t *a = state;
    if (a == NULL) {
        return;
    }
    /* Stages may hold sources of the environment: the pipeline goes first. */
    shl_pipeline_destroy(a->pl);
    exec_plan_destroy(a->plan);
    shl_collator_release(a->collator);
    if (a->let != NULL) {
        bson_destroy(a->let);
    }
    if (a->involved != NULL) {
        bson_destroy(a->involved);
    }
    bson_free(a);
}

static const shl_cursor_source_ops_t agg_cursor_ops = {agg_cursor_next, agg_state_destroy};

/* A plan cursor may only go on if its collection is still the one it started on. */
static int
check_plan_cursor(const shl_cursor_t *c, const shl_coll_handle_t *h, shl_status_t *st)
{
    const exec_plan_t *p =
        c->ops == &agg_cursor_ops ? ((const agg_state_t *)c->state)->plan : c->state;
    if (p == NULL || p->coll == NULL) {
        return 0;
    }
    if (h->coll == NULL || memcmp(h->coll->uuid, p->coll->uuid, 16) != 0) {
        return shl_status_set(st, SHL_CODE_QUERY_PLAN_KILLED, "collection dropped. ns: %s", c->ns);
    }
    if (exec_plan_dropped_index(p, h->coll) != NULL) {
        return shl_status_set(st, SHL_CODE_QUERY_PLAN_KILLED, "index '%s' dropped",
                              exec_plan_dropped_index(p, h->coll));
    }
    return 0;
}

/* A tailable cursor may only go on while its collection is the one it started on. */
static int
check_tail_cursor(const shl_cursor_t *c, const shl_coll_handle_t *h, shl_status_t *st)
{
    const shl_collection_t *coll = db_tail_source_coll(c->state);
    if (h->coll == NULL || memcmp(h->coll->uuid, coll->uuid, 16) != 0) {
        return shl_status_set(st, SHL_CODE_QUERY_PLAN_KILLED, "collection dropped. ns: %s", c->ns);
    }
    return 0;
}

/* awaitData getMores wait 1 s by default (MongoDB's default await time). */
#define AWAIT_DATA_DEFAULT_MS 1000
/* Slice of an await, after which kills and shutdown are checked. */
#define AWAIT_SLICE_US 500000

/*
 * Wait for a commit on the cursor's collection after 'seen' until 'deadline_us'.
 * *woken: a commit came (look again); false: the await time is over.
 */
static int
await_commit(shl_op_ctx_t *op, const shl_cursor_t *c, uint64_t seen, int64_t deadline_us,
             bool *woken, shl_status_t *st)
{
    int ret = 0;
    const shl_collection_t *coll = db_tail_source_coll(c->state);

    *woken = false;
    for (;;) {
        int64_t now = shl_clock_mono_us();
        if (now >= deadline_us) {
            break;
        }
        if (shl_collection_wait_commit(coll, seen,
                                       deadline_us - now > AWAIT_SLICE_US ? now + AWAIT_SLICE_US
                                                                          : deadline_us)) {
            *woken = true;
            break;
        }
        SHL_ERR(shl_op_check_interrupt(op, st));
    }
done:
    return ret;
}

static int
cmd_get_more(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    bson_iter_t it;
    int64_t id, batch_size = 0, await_deadline_us = 0;
    const char *coll = NULL;
    bool found, locked = false, exhausted = false, failed = true, is_tail, keep = false;
    shl_ns_t ns;
    shl_cursor_t *c = NULL;
    shl_coll_handle_t h;
    bson_t arr = BSON_INITIALIZER;

    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, getmore_fields, st));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_INT64(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'getMore.getMore' is the wrong type '%s', expected type 'long'",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    id = bson_iter_int64(&it);
    SHL_ERR(shl_cmd_get_string(cmd, "collection", &coll, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'getMore.collection' is missing but a required field");
    }
    SHL_ERR(shl_ns_make(&ns, op->db, coll, st));
    SHL_ERR(nonneg_field(cmd, "batchSize", &batch_size, &found, st));
    SHL_ERR(shl_cursor_manager_pin(node->cursors, id, ns.full, &c, st));
    if (!shl_op_may_use_owned(op, c->owner)) {
        keep = true; /* the owner may still use it */
        SHL_FAIL(st, SHL_CODE_UNAUTHORIZED,
                 "cursor id %lld was not created by the authenticated user", (long long)id);
    }
    if (shl_bson_has_key(cmd, "maxTimeMS") && !c->await_data) {
        keep = true; /* a bad request does not end the cursor */
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "cannot set maxTimeMS on getMore command for a non-awaitData cursor");
    }
    if (c->await_data) {
        /* maxTimeMS of an awaitData getMore is how long to wait for new data, not a
         * limit whose expiry fails the command. */
        await_deadline_us = op->deadline_us != 0 ? op->deadline_us
                                                 : op->start_mono_us + AWAIT_DATA_DEFAULT_MS * 1000;
        op->deadline_us = 0;
    }
    if (db_change_stream_is_cursor(c)) {
        bool dead = false;
        ret = db_change_stream_get_more(op, c, batch_size, await_deadline_us, reply, &dead, st);
        if (ret != 0) {
            shl_status_label_change_stream(st);
            goto done;
        }
        failed = false;
        exhausted = dead;
        goto done;
    }
    is_tail = c->ops == &db_tail_cursor_ops;
    if (c->ops == &agg_cursor_ops && ((const agg_state_t *)c->state)->involved != NULL) {
        /* Before the lock: it may refresh from the config server. */
        SHL_ERR(shl_db_sharding_check_involved(op, ((const agg_state_t *)c->state)->involved, st));
    }
    for (;;) {
        uint64_t seq = 0;
        bool woken = false;

        if (c->ops == &exec_plan_cursor_ops || c->ops == &agg_cursor_ops || is_tail) {
            const char *lock_ns = ns.full;
            if (c->ops == &agg_cursor_ops && ((const agg_state_t *)c->state)->source_ns[0]) {
                lock_ns = ((const agg_state_t *)c->state)->source_ns; /* a view's collection */
            }
            SHL_ERR(shl_storage_coll_acquire(node->eng, lock_ns, SHL_LOCK_SHARED, &h, st));
            locked = true;
            SHL_ERR(is_tail ? check_tail_cursor(c, &h, st) : check_plan_cursor(c, &h, st));
        }
        if (is_tail) {
            /* Read before looking, so a commit after our look is never missed. */
            seq = shl_collection_commit_seq(db_tail_source_coll(c->state));
        }
        ret = shl_cursor_fill_batch(op, c, batch_size, false, &arr, &exhausted, st);
        if (is_tail) {
            db_tail_source_end_round(c->state);
        }
        SHL_ERR(ret);
        if (locked) {
            shl_storage_coll_release(&h);
            locked = false;
        }
        if (!is_tail || !c->await_data || !bson_empty(&arr) || !exhausted || !tail_alive(c)) {
            break;
        }
        SHL_ERR(await_commit(op, c, seq, await_deadline_us, &woken, st));
        if (!woken) {
            break;
        }
    }
    failed = false;
    if (exhausted && tail_alive(c)) {
        exhausted = false;
    }
    shl_cursor_reply_at(reply, ns.full, exhausted ? 0 : id, false, &arr, c->at_cluster_time);
done:
    if (locked) {
        shl_storage_coll_release(&h);
    }
    if (c != NULL) {
        /* An error ends the cursor, as in MongoDB. */
        shl_cursor_manager_unpin(node->cursors, c, (failed && !keep) || exhausted);
    }
    bson_destroy(&arr);
    return ret;
}

/* ---------------------------------------------------------------- killCursors */

typedef struct kill_arg {
    db_node_t *node;
    shl_ns_t ns;
} kill_arg_t;

static bool
kill_one(void *arg, int64_t id)
{
    kill_arg_t *k = arg;
    return shl_cursor_manager_kill(k->node->cursors, id, k->ns.full) == SHL_CURSOR_KILLED;
}

static bool
owner_of(void *arg, int64_t id, uint8_t *out)
{
    kill_arg_t *k = arg;
    return shl_cursor_manager_owner(k->node->cursors, id, k->ns.full, out);
}

static int
cmd_kill_cursors(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    kill_arg_t k;

    memset(&k, 0, sizeof(k));
    k.node = db_node(op);

    db_cmd_begin(op);
    SHL_ERR(db_ns_from_cmd(op, cmd, &k.ns, st));
    SHL_ERR(shl_cmd_kill_cursors_owned(op, k.ns.full, cmd, kill_one, owner_of, &k, reply, st));
done:
    return ret;
}

/* ---------------------------------------------------------------- count */

static const char *const count_fields[] = {
    "query",       "limit",  "skip",    "hint",      "collation",
    "readConcern", "fields", "comment", "maxTimeMS", "encryptionInformation",
    NULL};

/* Run 'q' over ns and count results ('plan_out' keeps the plan for explain). */
static int
run_count(shl_op_ctx_t *op, const shl_ns_t *ns, exec_query_t *q, uint64_t read_ts, int64_t *n,
          exec_plan_t **plan_out, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    shl_coll_handle_t h;
    bool locked = false;
    exec_plan_t *plan = NULL;

    *n = 0;
    SHL_ERR(shl_storage_coll_acquire(node->eng, ns->full, SHL_LOCK_SHARED, &h, st));
    locked = true;
    SHL_ERR(
        exec_plan_build(node->eng, db_txn_storage(op), read_ts, h.coll, ns->full, q, &plan, st));
    for (;;) {
        exec_row_t row;
        bool eof;
        SHL_ERR(exec_plan_next(plan, op, &row, &eof, st));
        if (eof) {
            break;
        }
        (*n)++;
    }
done:
    if (locked) {
        shl_storage_coll_release(&h);
    }
    if (plan_out != NULL && ret == 0) {
        *plan_out = plan;
    } else {
        exec_plan_destroy(plan);
    }
    return ret;
}

static int
parse_count(const bson_t *cmd, exec_query_t *q, bool *fast, shl_status_t *st)
{
    int ret = 0;
    bson_t query;
    bool has_query, found;
    int64_t limit = 0, skip = 0;

    memset(q, 0, sizeof(*q));
    bson_init(&q->filter);
    SHL_ERR(shl_cmd_check_fields(cmd, count_fields, st));
    SHL_ERR(db_check_collation(cmd, "collation", st));
    SHL_ERR(shl_cmd_get_doc(cmd, "query", &query, &has_query, st));
    SHL_ERR(shl_cmd_get_int64(cmd, "limit", &limit, &found, st));
    SHL_ERR(nonneg_field(cmd, "skip", &skip, &found, st));
    SHL_ERR(exec_query_init(q, has_query ? &query : NULL, NULL, NULL, st));
    SHL_ERR(db_query_collation(cmd, "collation", q, st));
    SHL_ERR(db_cmd_get_hint(cmd, &q->has_hint, &q->hint, st));
    /* A negative limit counts like its absolute value. */
    q->limit = limit < 0 ? -limit : limit;
    q->skip = skip;
    q->count_only = true;
    *fast = shl_matcher_is_trivial(q->matcher) && !q->has_hint;
done:
    return ret;
}

static int
cmd_count(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    shl_ns_t ns;
    exec_query_t q;
    db_read_concern_t rc;
    bool fast = false;
    int64_t n = 0;

    db_cmd_begin(op);
    memset(&q, 0, sizeof(q));
    SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
    {
        bool view = false;
        SHL_ERR(view_read(op, cmd, &ns, reply, &view, st));
        if (view) {
            goto done;
        }
    }
    SHL_ERR(parse_count(cmd, &q, &fast, st));
    SHL_ERR(db_read_concern_get(op, &rc, st));
    SHL_ERR(shl_db_sharding_check(op, ns.full, SHL_DB_SHARD_READ, &q.orphan_filter, st));
    if (fast && rc.level != DB_RC_MAJORITY && q.orphan_filter == NULL) {
        /* RECORD_STORE_FAST_COUNT: the committed record count. */
        shl_collection_t *coll = shl_catalog_get(node->eng, ns.full);
        n = coll != NULL ? shl_collection_num_records(coll) : 0;
        shl_collection_release(coll);
        n = n > q.skip ? n - q.skip : 0;
        if (q.limit > 0 && n > q.limit) {
            n = q.limit;
        }
    } else {
        uint64_t read_ts;
        SHL_ERR(db_read_ts_for(op, &rc, ns.full, &read_ts, st));
        SHL_ERR(run_count(op, &ns, &q, read_ts, &n, NULL, st));
    }
    /* MongoDB appends the count as an int when it fits. */
    if (n <= INT32_MAX) {
        BSON_APPEND_INT32(reply, "n", (int32_t)n);
    } else {
        BSON_APPEND_INT64(reply, "n", n);
    }
done:
    exec_query_cleanup(&q);
    return ret;
}

/* ---------------------------------------------------------------- distinct */

static const char *const distinct_fields[] = {"key",  "query",   "collation", "readConcern",
                                              "hint", "comment", "maxTimeMS", NULL};

typedef struct distinct_set {
    bson_value_t *vals; /* copies, in first-seen order */
    size_t n, cap;
    size_t *order; /* indexes into vals sorted by canonical order */
    size_t bytes;
    const shl_collator_t *coll; /* the query's collation: equal strings are one value */
} distinct_set_t;

static int
distinct_add(distinct_set_t *d, const bson_value_t *v, shl_status_t *st)
{
    size_t lo = 0, hi = d->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = shl_bson_value_compare_coll(&d->vals[d->order[mid]], v, d->coll);
        if (c == 0) {
            return 0;
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 64;
        d->vals = bson_realloc(d->vals, d->cap * sizeof(bson_value_t));
        d->order = bson_realloc(d->order, d->cap * sizeof(size_t));
    }
    bson_value_copy(v, &d->vals[d->n]);
    memmove(&d->order[lo + 1], &d->order[lo], (d->n - lo) * sizeof(size_t));
    d->order[lo] = d->n;
    /* The reply's values array grows by exactly this element (its key depends only on the
     * count, not on the order), so the reply stays within the user limit as MongoDB's. */
    d->bytes += shl_bson_array_element_len((uint32_t)d->n, shl_bson_value_len(v));
    d->n++;
    if (d->bytes + 5 > SHL_MAX_BSON_SIZE) {
        return shl_status_set(st, 17217, "distinct too big, 16mb cap");
    }
    return 0;
}

/* Collect the values at dotted 'path' of the value under 'it', traversing arrays. */
static int
distinct_collect(distinct_set_t *d, const bson_iter_t *it, const char *path, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t sub;

    if (*path == '\0') {
        if (BSON_ITER_HOLDS_ARRAY(it)) {
            bson_iter_recurse(it, &sub);
            while (shl_iter_next(&sub)) {
                SHL_ERR(distinct_add(d, bson_iter_value(&sub), st));
            }
        } else {
            bson_iter_t copy = *it;
            SHL_ERR(distinct_add(d, bson_iter_value(&copy), st));
        }
        goto done;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        const char *rest = dot ? dot + 1 : path + n;
        bson_iter_recurse(it, &sub);
        while (shl_iter_next(&sub)) {
            if (strlen(shl_iter_key(&sub)) == n && memcmp(shl_iter_key(&sub), path, n) == 0) {
                SHL_ERR(distinct_collect(d, &sub, rest, st));
                break;
            }
        }
    } else if (BSON_ITER_HOLDS_ARRAY(it)) {
        /* Implicit traversal: apply the remaining path to each document element. */
        bson_iter_recurse(it, &sub);
        while (shl_iter_next(&sub)) {
            if (BSON_ITER_HOLDS_DOCUMENT(&sub)) {
                SHL_ERR(distinct_collect(d, &sub, path, st));
            }
        }
    }
done:
    return ret;
}

static int
cmd_distinct(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    shl_ns_t ns;
    exec_query_t q;
    db_read_concern_t rc;
    const char *key = NULL;
    bson_t query, arr;
    bool has_query, found, locked = false;
    shl_coll_handle_t h;
    exec_plan_t *plan = NULL;
    distinct_set_t d;
    uint64_t read_ts = 0;

    db_cmd_begin(op);
    memset(&q, 0, sizeof(q));
    memset(&d, 0, sizeof(d));
    SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
    {
        bool view = false;
        SHL_ERR(view_read(op, cmd, &ns, reply, &view, st));
        if (view) {
            goto done;
        }
    }
    SHL_ERR(shl_cmd_check_fields(cmd, distinct_fields, st));
    SHL_ERR(db_check_collation(cmd, "collation", st));
    SHL_ERR(shl_cmd_get_string(cmd, "key", &key, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'distinct.key' is missing but a required field");
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "query", &query, &has_query, st));
    SHL_ERR(exec_query_init(&q, has_query ? &query : NULL, NULL, NULL, st));
    SHL_ERR(db_query_collation(cmd, "collation", &q, st));
    SHL_ERR(db_cmd_get_hint(cmd, &q.has_hint, &q.hint, st));
    SHL_ERR(db_read_concern_get(op, &rc, st));
    SHL_ERR(shl_db_sharding_check(op, ns.full, SHL_DB_SHARD_READ, &q.orphan_filter, st));
    SHL_ERR(db_read_ts_for(op, &rc, ns.full, &read_ts, st));
    SHL_ERR(shl_storage_coll_acquire(node->eng, ns.full, SHL_LOCK_SHARED, &h, st));
    locked = true;
    SHL_ERR(exec_plan_build(node->eng, db_txn_storage(op), read_ts, h.coll, ns.full, &q, &plan,
                            st));
    d.coll = q.collator;
    for (;;) {
        exec_row_t row;
        bool eof;
        bson_iter_t root;
        bson_t wrap = BSON_INITIALIZER;

        SHL_ERR(exec_plan_next(plan, op, &row, &eof, st));
        if (eof) {
            break;
        }
        /* Treat the document as a value so the path walk starts the same way. */
        BSON_APPEND_DOCUMENT(&wrap, "d", row.doc);
        bson_iter_init_find(&root, &wrap, "d");
        ret = distinct_collect(&d, &root, key, st);
        bson_destroy(&wrap);
        SHL_ERR(ret);
    }
    BSON_APPEND_ARRAY_BEGIN(reply, "values", &arr);
    for (size_t i = 0; i < d.n; i++) {
        char k[16];
        const char *kp;
        bson_uint32_to_string((uint32_t)i, &kp, k, sizeof(k));
        bson_append_value(&arr, kp, -1, &d.vals[i]);
    }
    bson_append_array_end(reply, &arr);
    db_snapshot_append_time(&rc, reply);
done:
    if (locked) {
        shl_storage_coll_release(&h);
    }
    exec_plan_destroy(plan);
    exec_query_cleanup(&q);
    for (size_t i = 0; i < d.n; i++) {
        bson_value_destroy(&d.vals[i]);
    }
    bson_free(d.vals);
    bson_free(d.order);
    return ret;
}

/* ---------------------------------------------------------------- explain */

static int cmd_aggregate(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st);


/*
 * The query of a write explained (update/delete statement 0, or findAndModify): its
 * filter, sort and hint into a new exec query; *stage is MongoDB's stage name for the
 * write ("UPDATE" / "DELETE"). Errors: FailedToParse for a missing statement; the
 * query's parse errors.
 */
static int
explain_write_query(const char *name, const bson_t *inner, exec_query_t *q, const char **stage,
                    shl_status_t *st)
{
    /* The plan keeps a view of the filter: it must point into 'inner' (an absent filter is
     * the plan's own empty one), never into a document of this frame. */
    bson_t stmts, stmt, filter, sort;
    bson_iter_t it, sit;
    bool found = false, has_sort = false, remove = false, has_filter = false;
    int ret = 0;

    if (strcmp(name, "findAndModify") == 0 || strcmp(name, "findandmodify") == 0) {
        has_filter = shl_bson_get_subdoc(inner, "query", &filter);
        has_sort = shl_bson_get_subdoc(inner, "sort", &sort);
        remove = bson_iter_init_find(&it, inner, "remove") && bson_iter_as_bool(&it);
        *stage = remove ? "DELETE" : "UPDATE";
    } else {
        const char *field = strcmp(name, "update") == 0 ? "updates" : "deletes";
        *stage = strcmp(name, "update") == 0 ? "UPDATE" : "DELETE";
        SHL_ERR(shl_cmd_get_array(inner, field, &stmts, &found, st));
        if (!found || !bson_iter_init(&sit, &stmts) || !shl_iter_next(&sit) ||
            !BSON_ITER_HOLDS_DOCUMENT(&sit)) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "explain of %s needs one statement in '%s'",
                     name, field);
        }
        {
            const uint8_t *data;
            uint32_t len;
            bson_iter_document(&sit, &len, &data);
            bson_init_static(&stmt, data, len);
            has_filter = shl_bson_get_subdoc(&stmt, "q", &filter);
        }
    }
    SHL_ERR(exec_query_init(q, has_filter ? &filter : NULL, has_sort ? &sort : NULL, NULL, st));
    SHL_ERR(db_cmd_get_hint(found ? &stmt : inner, &q->has_hint, &q->hint, st));
done:
    return ret;
}

/* Wrap 'plan' (a winningPlan or executionStages document) in MongoDB's write stage. */
static void
wrap_write_stage(const bson_t *plan, const char *stage, bool stats, int64_t n, bson_t *out)
{
    BSON_APPEND_UTF8(out, "stage", stage);
    if (stats) {
        BSON_APPEND_INT64(out, "nReturned", 0);
        BSON_APPEND_INT64(out, strcmp(stage, "UPDATE") == 0 ? "nMatched" : "nWouldDelete", n);
        if (strcmp(stage, "UPDATE") == 0) {
            BSON_APPEND_INT64(out, "nWouldModify", n);
        }
    }
    BSON_APPEND_DOCUMENT(out, "inputStage", plan);
}

/* Copy an explain reply, wrapping winningPlan and executionStages in the write stage. */
static void
rewrite_for_write(const bson_t *in, const char *stage, int64_t n, bson_t *out)
{
    bson_iter_t it, sub;

    bson_iter_init(&it, in);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bool qp = strcmp(k, "queryPlanner") == 0, es = strcmp(k, "executionStats") == 0;
        if ((qp || es) && BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub)) {
            bson_t child;
            BSON_APPEND_DOCUMENT_BEGIN(out, k, &child);
            while (shl_iter_next(&sub)) {
                const char *sk = shl_iter_key(&sub);
                if (((qp && strcmp(sk, "winningPlan") == 0) ||
                     (es && strcmp(sk, "executionStages") == 0)) &&
                    BSON_ITER_HOLDS_DOCUMENT(&sub)) {
                    const uint8_t *data;
                    uint32_t len;
                    bson_t plan, wrapped;
                    bson_iter_document(&sub, &len, &data);
                    bson_init_static(&plan, data, len);
                    BSON_APPEND_DOCUMENT_BEGIN(&child, sk, &wrapped);
                    wrap_write_stage(&plan, stage, es, n, &wrapped);
                    bson_append_document_end(&child, &wrapped);
                } else if (es && strcmp(sk, "nReturned") == 0) {
                    BSON_APPEND_INT64(&child, "nReturned", 0);
                } else {
                    bson_append_iter(&child, sk, -1, &sub);
                }
            }
            bson_append_document_end(out, &child);
        } else {
            bson_append_iter(out, k, -1, &it);
        }
    }
}

static const char *const explain_fields[] = {"verbosity", NULL};

static int
cmd_explain(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    bson_iter_t it;
    bson_t inner;
    const char *verbosity = "allPlansExecution", *name, *write_stage = NULL;
    bool found, exec_stats, locked = false;
    shl_ns_t ns;
    exec_query_t *q = NULL;
    exec_plan_t *plan = NULL;
    shl_coll_handle_t h;
    db_read_concern_t rc;
    int64_t n = 0, t0 = shl_clock_mono_us();

    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, explain_fields, st));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'explain.explain' is the wrong type '%s', expected type 'object'",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "explain", &inner, &found, st));
    SHL_ERR(shl_cmd_get_string(cmd, "verbosity", &verbosity, &found, st));
    if (strcmp(verbosity, "queryPlanner") != 0 && strcmp(verbosity, "executionStats") != 0 &&
        strcmp(verbosity, "allPlansExecution") != 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "Enumeration value '%s' for field 'explain.verbosity' is not a valid value.",
                 verbosity);
    }
    exec_stats = strcmp(verbosity, "queryPlanner") != 0;
    name = shl_cmd_name(&inner);
    SHL_ERR(db_ns_from_cmd(op, &inner, &ns, st));
    {
        /* A view's explain is its aggregate's. */
        bson_t with = BSON_INITIALIZER;
        bool view = false;
        bson_concat(&with, &inner);
        if (!shl_bson_has_key(&inner, "explain")) {
            BSON_APPEND_BOOL(&with, "explain", true);
        }
        ret = view_read(op, &with, &ns, reply, &view, st);
        bson_destroy(&with);
        SHL_ERR(ret);
        if (view) {
            goto done;
        }
    }
    SHL_ERR(db_read_concern_get(op, &rc, st));
    if (strcmp(name, "find") == 0) {
        find_args_t a;
        bson_t vars;
        bool has_vars;
        SHL_ERR(parse_find(&inner, &a, st));
        ret = db_let_vars(op, &inner, mentions_cluster_time(&a), &vars, &has_vars, st);
        if (ret == 0) {
            ret = parse_query(&a, has_vars ? &vars : NULL, &q, st);
        }
        bson_destroy(&vars);
        SHL_ERR(ret);
    } else if (strcmp(name, "count") == 0) {
        bool fast;
        q = bson_aligned_alloc0(BSON_ALIGNOF(exec_query_t), sizeof(*q));
        SHL_ERR(parse_count(&inner, q, &fast, st));
    } else if (strcmp(name, "distinct") == 0) {
        /* The plan keeps a view of the filter: it must point into 'inner', not into a
         * document of this block (an absent query is the plan's own empty filter). */
        bson_t view;
        bool has_query = shl_bson_get_subdoc(&inner, "query", &view);
        q = bson_aligned_alloc0(BSON_ALIGNOF(exec_query_t), sizeof(*q));
        SHL_ERR(exec_query_init(q, has_query ? &view : NULL, NULL, NULL, st));
    } else if (strcmp(name, "update") == 0 || strcmp(name, "delete") == 0 ||
               strcmp(name, "findAndModify") == 0 || strcmp(name, "findandmodify") == 0) {
        q = bson_aligned_alloc0(BSON_ALIGNOF(exec_query_t), sizeof(*q));
        SHL_ERR(explain_write_query(name, &inner, q, &write_stage, st));
    } else if (strcmp(name, "aggregate") == 0) {
        /* The aggregate command's own explain form, with this command's verbosity. */
        bson_t agg = BSON_INITIALIZER;
        bson_iter_t ai;
        bson_iter_init(&ai, &inner);
        while (shl_iter_next(&ai)) {
            if (strcmp(shl_iter_key(&ai), "cursor") != 0 &&
                strcmp(shl_iter_key(&ai), "explain") != 0) {
                bson_append_iter(&agg, NULL, 0, &ai);
            }
        }
        BSON_APPEND_BOOL(&agg, "explain", true);
        ret = cmd_aggregate(op, &agg, reply, st);
        bson_destroy(&agg);
        goto done;
    } else {
        SHL_FAIL(st, SHL_CODE_COMMAND_NOT_FOUND, "Explain failed due to unknown command: %s", name);
    }
    SHL_ERR(shl_db_sharding_check(op, ns.full, SHL_DB_SHARD_READ, &q->orphan_filter, st));
    SHL_ERR(shl_storage_coll_acquire(node->eng, ns.full, SHL_LOCK_SHARED, &h, st));
    locked = true;
    SHL_ERR(exec_plan_build(node->eng, db_txn_storage(op), db_read_timestamp(node, &rc), h.coll,
                            ns.full, q, &plan, st));
    if (exec_stats) {
        for (;;) {
            exec_row_t row;
            bool eof;
            SHL_ERR(exec_plan_next(plan, op, &row, &eof, st));
            if (eof) {
                break;
            }
            n++;
        }
    }
    BSON_APPEND_UTF8(reply, "explainVersion", "1");
    if (write_stage == NULL) {
        exec_plan_explain(plan, exec_stats, n, (shl_clock_mono_us() - t0) / 1000, reply);
    } else {
        /* Explain never writes: the plan runs to count what the write would touch. */
        bson_t plain = BSON_INITIALIZER;
        exec_plan_explain(plan, exec_stats, n, (shl_clock_mono_us() - t0) / 1000, &plain);
        rewrite_for_write(&plain, write_stage, n, reply);
        bson_destroy(&plain);
    }
    BSON_APPEND_DOCUMENT(reply, "command", &inner);
    {
        bson_t si;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "serverInfo", &si);
        BSON_APPEND_UTF8(&si, "host", op->svc->me);
        bson_append_document_end(reply, &si);
    }
done:
    if (locked) {
        shl_storage_coll_release(&h);
    }
    exec_plan_destroy(plan);
    if (q != NULL) {
        exec_query_cleanup(q);
        bson_free(q);
    }
    return ret;
}

/* ---------------------------------------------------------------- aggregate */

static const char *const aggregate_fields[] = {"pipeline",
                                               "legacyRuntimeConstants",
                                               "cursor",
                                               "explain",
                                               "allowDiskUse",
                                               "collation",
                                               "hint",
                                               "readConcern",
                                               "let",
                                               "bypassDocumentValidation",
                                               "comment",
                                               "maxTimeMS",
                                               SHL_INVOLVED_VERSIONS_FIELD,
                                               NULL};

/*
 * Run the pipeline of cursor 'c' (an aggregate's, ending in $out/$merge) to the end, feeding
 * its writes batch by batch: each batch is read under the collection lock, as a getMore's,
 * and written after the lock is released (the target may be the collection read), so
 * neither memory nor the write commands grow with the output.
 */
static int
agg_write_output(shl_op_ctx_t *op, const shl_ns_t *ns, shl_cursor_t *c, bool collectionless,
                 bool bypass, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    const agg_state_t *a = c->state;
    db_agg_out_t *w = NULL;
    bson_t arr = BSON_INITIALIZER;
    shl_coll_handle_t h;
    bool locked = false, exhausted = false;

    SHL_ERR(db_agg_out_begin(op, a->pl, op->db, bypass, &w, st));
    while (!exhausted) {
        bson_reinit(&arr);
        if (!collectionless) {
            SHL_ERR(shl_storage_coll_acquire(node->eng, ns->full, SHL_LOCK_SHARED, &h, st));
            locked = true;
            SHL_ERR(check_plan_cursor(c, &h, st));
        }
        SHL_ERR(shl_cursor_fill_batch(op, c, SHL_MAX_WRITE_BATCH, false, &arr, &exhausted, st));
        if (locked) {
            shl_storage_coll_release(&h);
            locked = false;
        }
        SHL_ERR(db_agg_out_write(w, &arr, st));
    }
    SHL_ERR(db_agg_out_commit(w, st));
done:
    if (locked) {
        shl_storage_coll_release(&h);
    }
    db_agg_out_destroy(w);
    bson_destroy(&arr);
    return ret;
}

/* Whether the command's first field is the number 1 (`aggregate: 1`, no collection). */
static bool
agg_collectionless(const bson_t *cmd)
{
    bson_iter_t it;
    return bson_iter_init(&it, cmd) && shl_iter_next(&it) && BSON_ITER_HOLDS_NUMBER(&it) &&
           bson_iter_as_double(&it) == 1.0;
}

/*
 * cmd_aggregate --
 *     Run a pipeline (src/query/pipeline.h) over the collection: a leading $match becomes
 *     the executor's filter (so the planner can use indexes), the rest pulls from the plan;
 *     $lookup/$unionWith/$collStats/$indexStats use the node's environment (agg_stages.c).
 *     Results stream under the collection lock and are served by the cursor manager
 *     (batchSize, getMore); a pipeline ending in $out/$merge writes them batch by batch,
 *     each after the lock is released, and replies with an empty cursor. `aggregate: 1` runs
 * collection-less pipelines ($documents). explain: true describes the stages without running them.
 */
static int
cmd_aggregate(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return aggregate_run(op, cmd, NULL, reply, st);
}

/*
 * The aggregate 'cmd'; 'view_ns' (NULL: none) is the view it runs for: its cursor is named
 * after the view and the collection it reads is the command's.
 */
static int
aggregate_run(shl_op_ctx_t *op, const bson_t *cmd, const char *view_ns, bson_t *reply,
              shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    shl_ns_t ns;
    bson_t pipeline, let, arr;
    const char *cursor_ns;
    bool handled = false;
    bool found, has_let = false, locked = false, explain = false, allow_disk = false;
    bool collectionless = agg_collectionless(cmd), exhausted = false, bypass = false;
    exec_query_t *q = bson_aligned_alloc0(BSON_ALIGNOF(exec_query_t), sizeof(*q)); /* plan owns */
    int64_t batch_size = 0, cursor_id = 0;
    db_read_concern_t rc;
    shl_coll_handle_t h;
    agg_state_t *a = bson_malloc0(sizeof(*a));
    shl_pipeline_t *pl = NULL;
    shl_cursor_t *cur = NULL;
    const bson_t *filter;
    shl_pipeline_opts_t opts;
    bson_iter_t it_involved;
    bson_t sessions_pipeline = BSON_INITIALIZER;

    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, aggregate_fields, st));
    if (collectionless) {
        SHL_ERR(shl_ns_make(&ns, op->db, "$cmd.aggregate", st));
    } else {
        SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
        if (view_ns == NULL) {
            SHL_ERR(view_read(op, cmd, &ns, reply, &handled, st));
            if (handled) {
                goto done;
            }
        }
    }
    cursor_ns = view_ns != NULL ? view_ns : ns.full;
    SHL_ERR(shl_cmd_get_array(cmd, "pipeline", &pipeline, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'aggregate.pipeline' is missing but a required field");
    }
    switch (shl_pipeline_stage_position(&pipeline, "$changeStream")) {
    case 1:
        ret = db_change_stream_aggregate(op, cmd, &ns, collectionless, &pipeline, reply, st);
        goto done;
    case 2:
        SHL_FAIL(st, 40602, "$changeStream is only valid as the first stage in a pipeline.");
    default:
        break;
    }
    SHL_ERR(shl_cmd_get_bool(cmd, "explain", &explain, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "allowDiskUse", &allow_disk, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "bypassDocumentValidation", &bypass, st));
    if (!shl_bson_has_key(cmd, "cursor") && !explain) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "The 'cursor' option is required, except for aggregate with the explain "
                 "argument");
    }
    switch (db_pipeline_current_op(&pipeline)) {
    case 1:
        ret = db_current_op_aggregate(op, cmd, &pipeline, reply, st);
        goto done;
    case 2:
        SHL_FAIL(st, 40602, "$currentOp is only valid as the first stage in a pipeline");
    default:
        break;
    }
    /* The session stages: this process's cache, or a $match on config.system.sessions. */
    switch (shl_pipeline_stage_position(&pipeline, "$listLocalSessions")) {
    case 1:
        ret = shl_list_local_sessions_aggregate(op, cmd, &pipeline, shl_pipeline_run_array, reply,
                                                st);
        goto done;
    case 2:
        SHL_FAIL(st, 40602, "$listLocalSessions is only valid as the first stage in a pipeline.");
    default:
        break;
    }
    switch (shl_pipeline_stage_position(&pipeline, "$listSessions")) {
    case 1:
        bson_destroy(&sessions_pipeline);
        SHL_ERR(shl_list_sessions_rewrite(op, ns.full, &pipeline, &sessions_pipeline, st));
        bson_init_static(&pipeline, bson_get_data(&sessions_pipeline), sessions_pipeline.len);
        break;
    case 2:
        SHL_FAIL(st, 40602, "$listSessions is only valid as the first stage in a pipeline.");
    default:
        break;
    }
    SHL_ERR(db_cursor_batch_size(cmd, &batch_size, st));
    {
        bool has_coll = false;
        SHL_ERR(db_cmd_collator(cmd, "collation", &a->collator, &has_coll, st));
        if (!has_coll && !collectionless) {
            shl_collection_t *c = shl_catalog_get(node->eng, ns.full);
            a->collator = exec_collection_collator(c);
            shl_collection_release(c);
        }
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "let", &let, &has_let, st));
    db_agg_env_init(&a->env, op, op->db, 0);
    snprintf(a->env.ns, sizeof(a->env.ns), "%s", ns.full);
    a->env.collator = a->collator;
    {
        /* `let` evaluated once, with $$CLUSTER_TIME, for every stage and the $cursor. */
        bson_t vars;
        bool has_vars;
        ret = db_let_vars(op, cmd, true, &vars, &has_vars, st);
        a->let = ret == 0 && has_vars ? bson_copy(&vars) : NULL;
        bson_destroy(&vars);
        SHL_ERR(ret);
    }
    memset(&opts, 0, sizeof(opts));
    opts.vars = a->let;
    opts.allow_disk_use = allow_disk;
    opts.env = &a->env.env;
    opts.collator = a->collator;
    opts.leading_text = !collectionless; /* the first $match becomes the plan's query */
    /* A router merges by the score; what $out/$merge write never holds it. */
    opts.keep_text_score = op->has_shard_version &&
                           shl_pipeline_stage_position(&pipeline, "$out") == 0 &&
                           shl_pipeline_stage_position(&pipeline, "$merge") == 0;
    SHL_ERR(shl_pipeline_parse(&pipeline, &opts, &a->pl, st));
    pl = a->pl;
    if (collectionless) {
        const char *first = shl_pipeline_first_stage(pl);
        if (first == NULL) {
            SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE,
                     "{aggregate: 1} is not valid for an empty pipeline.");
        }
        if (strcmp(first, "$documents") != 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE,
                     "{aggregate: 1} is not valid for '%s'; a collection is required.", first);
        }
    }
    if (shl_pipeline_output(pl) != NULL && op->has_autocommit && !op->autocommit) {
        SHL_FAIL(st, SHL_CODE_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                 "%s cannot be used in a transaction",
                 shl_pipeline_output(pl)->is_merge ? "$merge" : "$out");
    }
    /* The other collections the router routed as unsharded to this shard: still so here? */
    SHL_ERR(shl_db_sharding_check_involved(op, cmd, st));
    if (bson_iter_init_find(&it_involved, cmd, SHL_INVOLVED_VERSIONS_FIELD)) {
        a->involved = bson_new();
        bson_append_iter(a->involved, NULL, 0, &it_involved);
    }
    filter = collectionless ? NULL : shl_pipeline_leading_match(pl);
    SHL_ERR(exec_query_init(q, filter, NULL, NULL, st));
    /* The pipeline reads the score ({$meta: "textScore"}) and removes it from its output. */
    q->text_score = q->has_text;
    q->text_score_keep = true;
    if (!q->has_text && !collectionless && shl_text_score_wanted(&pipeline)) {
        SHL_FAIL(st, 40218, "query requires text score metadata, but it is not available");
    }
    exec_query_set_collator(q, a->collator, true);
    if (a->let != NULL) {
        shl_matcher_bind_vars(q->matcher, a->let);
    }
    if (filter != NULL) {
        shl_pipeline_drop_leading_match(pl);
    }
    SHL_ERR(db_cmd_get_hint(cmd, &q->has_hint, &q->hint, st));
    if (explain) {
        /* MongoDB's shape: stages [{$cursor: {queryPlanner}}, <the remaining stages>]; the
         * $cursor's plan is built (not run) as the aggregate would build it. */
        bson_t stages, c, qp, described;
        bson_iter_t dit;
        uint32_t i = 1;
        bool skip_first = filter != NULL;
        BSON_APPEND_UTF8(reply, "explainVersion", "1");
        BSON_APPEND_ARRAY_BEGIN(reply, "stages", &stages);
        BSON_APPEND_DOCUMENT_BEGIN(&stages, "0", &c);
        BSON_APPEND_DOCUMENT_BEGIN(&c, "$cursor", &qp);
        if (collectionless) {
            bson_t planner;
            BSON_APPEND_DOCUMENT_BEGIN(&qp, "queryPlanner", &planner);
            BSON_APPEND_UTF8(&planner, "namespace", ns.full);
            bson_append_document_end(&qp, &planner);
        } else {
            exec_plan_t *xp = NULL;
            SHL_ERR(db_read_concern_get(op, &rc, st));
            SHL_ERR(shl_db_sharding_check(op, ns.full, SHL_DB_SHARD_READ, &q->orphan_filter, st));
            SHL_ERR(shl_storage_coll_acquire(node->eng, ns.full, SHL_LOCK_SHARED, &h, st));
            locked = true;
            ret = exec_plan_build(node->eng, db_txn_storage(op), db_read_timestamp(node, &rc),
                                  h.coll, ns.full, q, &xp, st);
            if (ret == 0) {
                exec_plan_explain(xp, false, 0, 0, &qp);
            }
            exec_plan_destroy(xp);
            SHL_ERR(ret);
        }
        bson_append_document_end(&c, &qp);
        bson_append_document_end(&stages, &c);
        bson_init(&described);
        shl_pipeline_describe(pl, &described);
        bson_iter_init(&dit, &described);
        while (shl_iter_next(&dit)) {
            char k[16];
            const char *kp;
            if (skip_first) {
                skip_first = false; /* the $match became the $cursor's filter */
                continue;
            }
            bson_uint32_to_string(i++, &kp, k, sizeof(k));
            bson_append_iter(&stages, kp, -1, &dit);
        }
        bson_destroy(&described);
        bson_append_array_end(reply, &stages);
        goto done;
    }
    SHL_ERR(db_read_concern_get(op, &rc, st));
    if (rc.level == DB_RC_SNAPSHOT && shl_pipeline_output(pl) != NULL) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "Command aggregate does not support { readConcern: { level: \"snapshot\" } } "
                 ":: caused by :: %s cannot be used with readConcern level 'snapshot'",
                 shl_pipeline_output(pl)->is_merge ? "$merge" : "$out");
    }
    a->env.read_ts = db_read_timestamp(node, &rc);
    if (!collectionless) {
        uint64_t read_ts;
        SHL_ERR(shl_db_sharding_check(op, ns.full, SHL_DB_SHARD_READ, &q->orphan_filter, st));
        SHL_ERR(db_read_ts_for(op, &rc, ns.full, &read_ts, st));
        if (op->txn == NULL) {
            a->env.read_ts = read_ts; /* a majority read may have waited for a newer point */
        }
        SHL_ERR(shl_storage_coll_acquire(node->eng, ns.full, SHL_LOCK_SHARED, &h, st));
        locked = true;
        SHL_ERR(exec_plan_build(node->eng, db_txn_storage(op), read_ts, h.coll, ns.full, q,
                                &a->plan, st));
        exec_plan_own_query(a->plan);
        q = NULL;
        a->src.plan = a->plan;
        a->src.op = op;
        shl_pipeline_set_source(pl, &(shl_pipeline_source_t){agg_source_next, &a->src});
    }
    if (shl_pipeline_output(pl) != NULL) {
        /* $out/$merge: the documents go to the target as they come; the reply's cursor is
         * empty, as MongoDB's. */
        if (locked) {
            shl_storage_coll_release(&h);
            locked = false;
        }
        cur = shl_cursor_new(cursor_ns, &agg_cursor_ops, a);
        a = NULL;
        ret = agg_write_output(op, &ns, cur, collectionless, bypass, st);
        shl_cursor_destroy(cur);
        cur = NULL;
        SHL_ERR(ret);
        db_reply_array_cursor(op, cursor_ns, bson_new(), batch_size, reply);
        goto done;
    }
    /* Stream: the first batch now, the rest by getMore under the lock each time. A
     * collection-less pipeline ($documents) streams too, with no lock to hold (its getMores
     * lock only the name db.$cmd.aggregate): the stages it may add ($lookup, $unionWith)
     * read whole collections, which no single reply could carry. */
    if (view_ns != NULL) {
        snprintf(a->source_ns, sizeof(a->source_ns), "%s", ns.full);
    }
    cur = shl_cursor_new(cursor_ns, &agg_cursor_ops, a);
    a = NULL;
    cur->at_cluster_time = rc.level == DB_RC_SNAPSHOT ? rc.at_cluster_time : 0;
    bson_init(&arr);
    ret = shl_cursor_fill_batch(op, cur, batch_size, true, &arr, &exhausted, st);
    if (locked) {
        shl_storage_coll_release(&h);
        locked = false;
    }
    if (ret != 0) {
        bson_destroy(&arr);
        goto done;
    }
    if (exhausted) {
        shl_cursor_destroy(cur);
    } else {
        cursor_id = shl_cursor_manager_register(node->cursors, cur, op);
    }
    cur = NULL;
    shl_cursor_reply_at(reply, cursor_ns, cursor_id, true, &arr,
                        rc.level == DB_RC_SNAPSHOT ? rc.at_cluster_time : 0);
    bson_destroy(&arr);
done:
    if (locked) {
        shl_storage_coll_release(&h);
    }
    shl_cursor_destroy(cur);
    agg_state_destroy(a);
    if (q != NULL) {
        exec_query_cleanup(q);
        bson_free(q);
    }
    bson_destroy(&sessions_pipeline);
    return ret;
}

static const shl_command_t find_commands[] = {
    {"find", {NULL}, cmd_find, SHL_CMD_IN_TXN | SHL_CMD_SNAPSHOT_READ, "query for documents"},
    {"getMore",
     {NULL},
     cmd_get_more,
     SHL_CMD_IN_TXN | SHL_CMD_SNAPSHOT_READ,
     "get more results from a cursor"},
    {"killCursors", {NULL}, cmd_kill_cursors, SHL_CMD_IN_TXN, "kill cursors"},
    {"count", {NULL}, cmd_count, 0, "count documents"},
    {"distinct",
     {NULL},
     cmd_distinct,
     SHL_CMD_IN_TXN | SHL_CMD_SNAPSHOT_READ,
     "distinct values of a field"},
    {"explain",
     {NULL},
     cmd_explain,
     0,
     "explain find, count, distinct, update, delete, findAndModify or aggregate"},
    {"aggregate",
     {NULL},
     cmd_aggregate,
     SHL_CMD_IN_TXN | SHL_CMD_SNAPSHOT_READ,
     "aggregation pipeline"},
};

void
db_register_find_commands(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(find_commands) / sizeof(find_commands[0]); i++) {
        shl_command_registry_add(reg, &find_commands[i]);
    }
}
