/*
 * cluster_find.c -- the router's read commands: find (targeted by the filter, limit+skip sent
 * to the shards, merged by the sort key, global skip/limit, projection at the router when
 * sorting), getMore and killCursors over router cursors (cluster_cursor_manager.h), count
 * (sum, then global skip/limit), distinct (union in canonical order), explain of find/count
 * (mongos's SINGLE_SHARD / SHARD_MERGE / SHARD_MERGE_SORT shape), and reads of config.* /
 * admin.* forwarded to the config server unversioned. Issue 6 item 3;
 * docs/design/sharding-protocol.md "Router -> shard".
 */
#include <string.h>

#include "base/clock.h"
#include "base/str.h"
#include "bson/bson_compare.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/command_args.h"
#include "net/message.h"
#include "query/expression.h"
#include "router/router_commands.h"
#include "router/router_private.h"
#include "session/sessions_collection.h"

/* IDL's "value must be >= 0" validator code. */
#define CODE_IDL_NEGATIVE 51024

/* ---------------------------------------------------------------- shared helpers */

bool
router_is_config_db(const char *db)
{
    return strcmp(db, "config") == 0 || strcmp(db, "admin") == 0;
}

static bool
in_list(const char *k, const char *const *list)
{
    bool found = false;
    for (size_t i = 0; !found && list != NULL && list[i] != NULL; i++) {
        found = list[i][0] == k[0] && strcmp(k, list[i]) == 0;
    }
    return found;
}

/* Generic arguments router_copy_command remembers in its one pass before falling back. */
#define COPY_DEFER_MAX 8

/* bson_iter_t is over-aligned, so an array of them needs a wrapper. */
typedef struct deferred_field {
    bson_iter_t it;
} deferred_field_t;

void
router_copy_command(const bson_t *cmd, const char *const *skip, bson_t *out)
{
    bson_iter_t it;
    deferred_field_t deferred[COPY_DEFER_MAX];
    size_t ndeferred = 0;
    bool overflow = false;

    /* One pass: the command's own fields now, the generic arguments the shard should see
     * after them (as shl_router_append_generic would add them, in their order). */
    if (bson_iter_init(&it, cmd)) {
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (shl_router_generic_passes(k)) {
                if (ndeferred < COPY_DEFER_MAX) {
                    deferred[ndeferred++].it = it;
                } else {
                    overflow = true;
                }
            }
            if (shl_cmd_is_generic_arg(k) || strcmp(k, "allowDiskUse") == 0 || in_list(k, skip)) {
                continue;
            }
            bson_append_iter(out, NULL, 0, &it);
        }
    }
    if (overflow) {
        shl_router_append_generic(cmd, out);
    } else {
        for (size_t i = 0; i < ndeferred; i++) {
            bson_append_iter(out, NULL, 0, &deferred[i].it);
        }
    }
}

int
router_run_on_config(shl_op_ctx_t *op, const char *db, const bson_t *cmd, bson_t *reply,
                     shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    bson_t fwd = BSON_INITIALIZER;
    int64_t remaining = shl_op_remaining_ms(op);
    int ret;

    router_copy_command(cmd, NULL, &fwd);
    ret = shl_client_run(
        r->pool, shl_shard_registry_config_host(r->registry), db, &fwd,
        remaining < 0 ? SHL_CONFIG_CMD_TIMEOUT_MS : (remaining == 0 ? 1 : remaining), reply, st);
    bson_destroy(&fwd);
    return ret;
}

void
router_shard_host(shl_router_t *r, const char *name, char *out, size_t n)
{
    shl_status_t st = SHL_STATUS_INIT;
    if (shl_shard_registry_host_for(r->registry, name, out, n, &st) != 0) {
        out[0] = '\0';
    }
}

int
router_cursor_from_results(shl_op_ctx_t *op, shl_router_t *r, const char *ns, const char *db,
                           const char *coll, shl_router_shard_result_t *results, size_t n,
                           bool allow_partial, shl_router_cursor_t **out, shl_status_t *st)
{
    shl_router_cursor_t *c = shl_router_cursor_new(r, ns, db, coll);
    int ret = 0;

    *out = NULL;
    shl_router_cursor_set_session(c, op);
    c->allow_partial = allow_partial;
    for (size_t i = 0; i < n; i++) {
        shl_status_t ignored = SHL_STATUS_INIT;
        if (results[i].res.code != 0) {
            if (allow_partial && shl_router_partial_ok(results[i].res.code)) {
                c->partial = true;
                continue;
            }
            if (ret == 0) {
                ret = results[i].res.code;
                *st = results[i].res.status;
            }
            continue;
        }
        if (shl_router_cursor_add_remote(c, results[i].shard, &results[i].res.reply,
                                         ret == 0 ? st : &ignored) != 0 &&
            ret == 0) {
            ret = st->code;
        } else if (results[i].res.host[0] != '\0') {
            /* A read served by a secondary: the cursor is on that member, not the primary. */
            shl_router_cursor_pin_last_remote(c, results[i].res.host);
        }
    }
    if (ret != 0) {
        shl_router_cursor_destroy(c); /* kills the cursors that did open */
    } else {
        *out = c;
    }
    return ret;
}

int
router_reply_cursor(shl_op_ctx_t *op, shl_router_cursor_t *c, int64_t batch_size, bool zero_batch,
                    bool single_batch, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    bson_t arr = BSON_INITIALIZER;
    bool exhausted = false, partial;
    uint64_t at;
    int64_t id = 0;
    char ns[SHL_NS_MAX + 1];
    int ret = 0;

    shl_str_copy(ns, sizeof(ns), c->ns);
    if (!zero_batch) {
        SHL_ERR(shl_router_cursor_fill_batch(op, c, batch_size, true, &arr, &exhausted, st));
    }
    partial = c->partial;
    at = c->at_cluster_time;
    if (exhausted || single_batch) {
        shl_router_cursor_destroy(c);
    } else {
        shl_op_user_digest(op, c->owner);
        id = shl_router_cursor_manager_register(r->cursors, c);
    }
    c = NULL;
    shl_router_cursor_reply_at(reply, ns, id, true, &arr, partial, at);
done:
    shl_router_cursor_destroy(c);
    bson_destroy(&arr);
    return ret;
}

int
router_config_cursor_read(shl_op_ctx_t *op, const char *ns, const char *db, const char *coll,
                          const bson_t *cmd, int64_t batch_size, bool zero_batch, bson_t *reply,
                          shl_status_t *st)
{
    bson_t res = BSON_INITIALIZER;
    shl_router_cursor_t *c = NULL;
    int ret = 0;

    bson_destroy(&res);
    SHL_ERR(router_run_on_config(op, db, cmd, &res, st));
    c = shl_router_cursor_new(shl_router_get(op), ns, db, coll);
    shl_router_cursor_set_session(c, op);
    SHL_ERR(shl_router_cursor_add_remote(c, NULL, &res, st));
    ret = router_reply_cursor(op, c, batch_size, zero_batch, false, reply, st);
    c = NULL;
done:
    shl_router_cursor_destroy(c);
    bson_destroy(&res);
    return ret;
}

/* The namespace of a command whose first field names the collection. */
static int
cmd_ns(shl_op_ctx_t *op, const bson_t *cmd, shl_ns_t *ns, shl_status_t *st)
{
    const char *coll = NULL;
    int ret = 0;

    SHL_ERR(shl_cmd_collection_arg(cmd, &coll, st));
    SHL_ERR(shl_ns_make(ns, op->db, coll, st));
done:
    return ret;
}

/* A non-negative integer field 'it' of 'cmd' (found already). */
static int
nonneg_iter(const bson_t *cmd, const bson_iter_t *it, int64_t *out, shl_status_t *st)
{
    const char *field = shl_iter_key(it);
    int ret = 0;

    *out = 0;
    if (!BSON_ITER_HOLDS_NUMBER(it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '%s.%s' is the wrong type '%s', expected type 'long'",
                 shl_cmd_name(cmd), field, shl_bson_type_name(shl_iter_type(it)));
    }
    *out = bson_iter_as_int64(it);
    if (*out < 0) {
        SHL_FAIL(st, CODE_IDL_NEGATIVE, "BSON field '%s' value must be >= 0, actual value '%lld'",
                 field, (long long)*out);
    }
done:
    return ret;
}

/* A non-negative integer field; 'found' says whether it was present. */
static int
nonneg_field(const bson_t *cmd, const char *field, int64_t *out, bool *found, shl_status_t *st)
{
    bson_iter_t it;
    int ret = 0;

    *found = false;
    *out = 0;
    if (!shl_bson_iter_find_key(&it, cmd, field)) {
        goto done;
    }
    *found = true;
    ret = nonneg_iter(cmd, &it, out, st);
done:
    return ret;
}

/*
 * No such database: nothing reaches a shard, but the filter must still parse (an unknown
 * top-level operator is refused as a shard would refuse it on an existing collection).
 */
static int
check_filter_unrouted(const bson_t *filter, shl_status_t *st)
{
    int ret = 0;
    shl_matcher_t *m = NULL;
    if (filter != NULL) {
        ret = shl_matcher_new(filter, SHL_MATCHER_DEFAULT | SHL_MATCHER_TEXT_DEFERRED, &m, st);
        shl_matcher_destroy(m);
    }
    return ret;
}

/* ---------------------------------------------------------------- find */

typedef struct find_args {
    const bson_t *cmd;
    bson_t filter, sort, projection;
    bool has_filter, has_sort, has_projection;
    int64_t skip, limit, batch_size;
    int64_t now_ms;        /* $$NOW for every shard */
    uint64_t cluster_time; /* $$CLUSTER_TIME for every shard (0: none) */
    bool has_batch_size, single_batch, no_cursor_timeout, allow_partial;
    bool sorted; /* a non-empty sort */
} find_args_t;

static int
parse_find(const bson_t *cmd, find_args_t *a, shl_status_t *st)
{
    int ret = 0;

    static const char *const fields[] = {"filter",
                                         "sort",
                                         "projection",
                                         "skip",
                                         "limit",
                                         "batchSize",
                                         "singleBatch",
                                         "noCursorTimeout",
                                         "allowPartialResults",
                                         "tailable",
                                         "awaitData",
                                         NULL};
    enum {
        F_FILTER,
        F_SORT,
        F_PROJECTION,
        F_SKIP,
        F_LIMIT,
        F_BATCH_SIZE,
        F_SINGLE_BATCH,
        F_NO_TIMEOUT,
        F_PARTIAL,
        F_TAILABLE,
        F_AWAIT_DATA
    };
    shl_cmd_field_t f[F_AWAIT_DATA + 1];
    uint32_t has = shl_cmd_fields_find(cmd, fields, f);
#define HAS(i) ((has & (1u << (i))) != 0)

    memset(a, 0, sizeof(*a));
    a->cmd = cmd;
    if (HAS(F_FILTER)) {
        SHL_ERR(shl_cmd_field_doc(cmd, &f[F_FILTER].it, &a->filter, st));
        a->has_filter = true;
    }
    if (HAS(F_SORT)) {
        SHL_ERR(shl_cmd_field_doc(cmd, &f[F_SORT].it, &a->sort, st));
        a->has_sort = true;
    }
    if (HAS(F_PROJECTION)) {
        SHL_ERR(shl_cmd_field_doc(cmd, &f[F_PROJECTION].it, &a->projection, st));
        a->has_projection = true;
    }
    if (HAS(F_SKIP)) {
        SHL_ERR(nonneg_iter(cmd, &f[F_SKIP].it, &a->skip, st));
    }
    if (HAS(F_LIMIT)) {
        SHL_ERR(nonneg_iter(cmd, &f[F_LIMIT].it, &a->limit, st));
    }
    if (HAS(F_BATCH_SIZE)) {
        SHL_ERR(nonneg_iter(cmd, &f[F_BATCH_SIZE].it, &a->batch_size, st));
        a->has_batch_size = true;
    }
    if (HAS(F_SINGLE_BATCH)) {
        SHL_ERR(shl_cmd_field_bool(cmd, &f[F_SINGLE_BATCH].it, &a->single_batch, st));
    }
    if (HAS(F_NO_TIMEOUT)) {
        SHL_ERR(shl_cmd_field_bool(cmd, &f[F_NO_TIMEOUT].it, &a->no_cursor_timeout, st));
    }
    if (HAS(F_PARTIAL)) {
        SHL_ERR(shl_cmd_field_bool(cmd, &f[F_PARTIAL].it, &a->allow_partial, st));
    }
    if (HAS(F_TAILABLE) || HAS(F_AWAIT_DATA)) {
        /* Data nodes serve tailable cursors, but router cursors do not follow them yet
         * (a merge would wait on every shard's awaitData): refuse, as before. */
        bool tailable = false, await_data = false;
        if (HAS(F_TAILABLE)) {
            SHL_ERR(shl_cmd_field_bool(cmd, &f[F_TAILABLE].it, &tailable, st));
        }
        if (HAS(F_AWAIT_DATA)) {
            SHL_ERR(shl_cmd_field_bool(cmd, &f[F_AWAIT_DATA].it, &await_data, st));
        }
        if (tailable || await_data) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "find.tailable is not supported through the router yet");
        }
    }
#undef HAS
    a->sorted = a->has_sort && !bson_empty(&a->sort);
    if (a->sorted) {
        /* {$natural: 1} is an order each shard applies itself: nothing to merge on. */
        bson_iter_t it;
        a->sorted = !(bson_iter_init(&it, &a->sort) && shl_iter_next(&it) &&
                      strcmp(shl_iter_key(&it), "$natural") == 0);
    }
done:
    return ret;
}

/* The find a shard runs: limit+skip, no skip, the projection only when not sorting. */
static void
build_find_body(const find_args_t *a, bson_t *out)
{
    static const char *const skip_sorted[] = {"skip",        "limit",      "batchSize",
                                              "singleBatch", "projection", NULL};
    static const char *const skip_plain[] = {"skip", "limit", "batchSize", "singleBatch", NULL};

    router_copy_command(a->cmd, a->sorted ? skip_sorted : skip_plain, out);
    if (a->limit > 0) {
        BSON_APPEND_INT64(out, "limit", a->limit + a->skip);
    }
    if (a->has_batch_size) {
        BSON_APPEND_INT64(out, "batchSize", a->batch_size + a->skip);
    }
    if (a->single_batch) {
        BSON_APPEND_BOOL(out, "singleBatch", true);
    }
    router_append_runtime_constants(a->now_ms, a->cluster_time, out);
}

static void
build_find(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    (void)rr;
    (void)shard;
    build_find_body(arg, cmd);
}

/*
 * The common targeted find: one shard answered with its whole result (cursor id 0) and the
 * router has nothing to apply (no merge sort, projection or skip, no zero first batch). The
 * shard's firstBatch is then exactly the batch a router cursor would rebuild document by
 * document, so it goes into the reply as it is, without a router cursor. True with *batch a
 * view of that array (borrowed from the result); false when the general path must run, which
 * also reports a malformed shard reply.
 */
static bool
single_exhausted_batch(const find_args_t *a, const shl_router_shard_result_t *res, size_t nresults,
                       bson_t *batch)
{
    bson_iter_t it, cur, docs;
    const uint8_t *data = NULL;
    uint32_t len = 0;
    int64_t id = -1, ndocs = 0, max_docs = SHL_ROUTER_CURSOR_FIRST_BATCH;
    bool have_id = false, have_batch = false, fits = true;

    if (nresults != 1 || res[0].res.code != 0 || a->sorted || a->skip != 0 ||
        (a->has_batch_size && a->batch_size == 0) ||
        !shl_bson_iter_find_key(&it, &res[0].res.reply, "cursor") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &cur)) {
        return false;
    }
    /* The same fields, and the same last-one-wins reading, as take_batch. */
    while (shl_iter_next(&cur)) {
        const char *k = shl_iter_key(&cur);
        if (strcmp(k, "id") == 0 && BSON_ITER_HOLDS_NUMBER(&cur)) {
            id = bson_iter_as_int64(&cur);
            have_id = true;
        } else if (strcmp(k, "firstBatch") == 0 && BSON_ITER_HOLDS_ARRAY(&cur)) {
            bson_iter_array(&cur, &len, &data);
            have_batch = true;
        }
    }
    if (!have_id || id != 0 || !have_batch || !bson_init_static(batch, data, len) ||
        !bson_iter_init(&docs, batch)) {
        return false;
    }
    /* A router cursor would skip non-documents, stop at the batch size, and split a batch
     * near the size limit: leave any of those to it. */
    if (a->has_batch_size && a->batch_size < max_docs) {
        max_docs = a->batch_size;
    }
    if (a->limit > 0 && a->limit < max_docs) {
        max_docs = a->limit;
    }
    while (fits && shl_iter_next(&docs)) {
        fits = BSON_ITER_HOLDS_DOCUMENT(&docs) && ++ndocs <= max_docs;
    }
    return fits && (uint64_t)len + 32 <= SHL_ROUTER_CURSOR_MAX_BATCH_BYTES;
}

static int
cmd_find(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    shl_ns_t ns;
    find_args_t a;
    shl_router_shard_result_t *results = NULL;
    size_t nresults = 0;
    shl_router_cursor_t *c = NULL;
    shl_sort_pattern_t *sort = NULL;
    shl_projection_t *proj = NULL;
    shl_matcher_t *matcher = NULL;
    bson_t batch;
    bool show_record_id = false, has_let = false;
    bson_t let;
    int ret = 0;

    SHL_ERR(cmd_ns(op, cmd, &ns, st));
    SHL_ERR(parse_find(cmd, &a, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "let", &let, &has_let, st));
    router_runtime_constants(op, &a.now_ms, &a.cluster_time);
    /* config.system.sessions is the one sharded collection of the config database: it is
     * read where its chunks are, like any other (the config server while it is unsharded). */
    if (router_is_config_db(ns.db) && strcmp(ns.full, SHL_SESSIONS_NS) != 0) {
        ret = router_config_cursor_read(op, ns.full, ns.db, ns.coll, cmd, a.batch_size,
                                        a.has_batch_size && a.batch_size == 0, reply, st);
        goto done;
    }
    /* Parse at the router first: its errors come before any shard is contacted. */
    if (a.sorted) {
        bson_iter_t rk;
        /* returnKey ignores the projection (the shards return index keys). */
        bool return_key = bson_iter_init_find(&rk, cmd, "returnKey") && bson_iter_as_bool(&rk);
        show_record_id = bson_iter_init_find(&rk, cmd, "showRecordId") && bson_iter_as_bool(&rk);
        SHL_ERR(shl_sort_pattern_new(&a.sort, &sort, st));
        {
            /* Shards sort under the command's collation: merge in the same order. */
            shl_collator_t *coll = NULL;
            SHL_ERR(shl_router_effective_collator(r, ns.full, cmd, &coll, st));
            shl_sort_pattern_set_collator(sort, coll);
            shl_collator_release(coll);
        }
        if (a.has_projection && !return_key) {
            SHL_ERR(shl_projection_new(&a.projection, a.has_filter ? &a.filter : NULL, &proj, st));
            if (shl_projection_needs_match_details(proj)) {
                SHL_ERR(shl_matcher_new(a.has_filter ? &a.filter : &(bson_t)BSON_INITIALIZER,
                                        SHL_MATCHER_DEFAULT | SHL_MATCHER_TEXT_DEFERRED, &matcher,
                                        st));
            }
        }
    }
    ret = shl_router_scatter(r, op, ns.full, a.has_filter ? &a.filter : NULL, build_find, &a, NULL,
                             &results, &nresults, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        /* No such database: an empty result, as MongoDB gives. */
        bson_t empty = BSON_INITIALIZER;
        SHL_ERR(check_filter_unrouted(a.has_filter ? &a.filter : NULL, st));
        shl_router_cursor_reply(reply, ns.full, 0, true, &empty, false);
        ret = 0;
        goto done;
    }
    SHL_ERR(ret);
    if (single_exhausted_batch(&a, results, nresults, &batch)) {
        /* What the general path checks before taking each document. */
        SHL_ERR(shl_op_check_interrupt(op, st));
        shl_router_cursor_reply_at(reply, ns.full, 0, true, &batch, false,
                                   shl_router_snapshot_time(op));
        goto done;
    }
    SHL_ERR(router_cursor_from_results(op, r, ns.full, ns.db, ns.coll, results, nresults,
                                       a.allow_partial, &c, st));
    c->sort = sort;
    sort = NULL;
    c->proj = proj;
    c->keep_record_id = show_record_id;
    proj = NULL;
    if (c->proj != NULL && has_let) {
        /* The projection the router applies sees the find's `let`, evaluated here. */
        bson_t vars;
        ret = shl_expr_let_vars(&let, 0, NULL, &vars, st);
        if (ret == 0) {
            c->vars = bson_copy(&vars);
        }
        bson_destroy(&vars);
        SHL_ERR(ret);
    }
    c->matcher = matcher;
    matcher = NULL;
    c->skip = a.skip;
    c->limit = a.limit;
    c->no_timeout = a.no_cursor_timeout;
    ret = router_reply_cursor(op, c, a.batch_size, a.has_batch_size && a.batch_size == 0,
                              a.single_batch, reply, st);
    c = NULL;
done:
    shl_router_cursor_destroy(c);
    if (sort != NULL) {
        shl_sort_pattern_destroy(sort);
    }
    shl_projection_destroy(proj);
    shl_matcher_destroy(matcher);
    shl_router_scatter_results_free(results, nresults);
    return router_view_retry(op, cmd, ret, reply, st);
}

/* ---------------------------------------------------------------- getMore, killCursors */

static const char *const getmore_fields[] = {"collection",
                                             "batchSize",
                                             "maxTimeMS",
                                             "term",
                                             "lastKnownCommittedOpTime",
                                             "comment",
                                             "includeQueryStatsMetrics",
                                             NULL};

static int
cmd_get_more(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    bson_iter_t it;
    int64_t id, batch_size = 0;
    const char *coll = NULL;
    bool found, exhausted = false, failed = true;
    shl_ns_t ns;
    shl_router_cursor_t *c = NULL;
    bson_t arr = BSON_INITIALIZER;
    int ret = 0;

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
    SHL_ERR(shl_router_cursor_manager_pin(r->cursors, id, ns.full, &c, st));
    if (!shl_op_may_use_owned(op, c->owner)) {
        failed = false; /* the owner may still use it */
        SHL_FAIL(st, SHL_CODE_UNAUTHORIZED,
                 "cursor id %lld was not created by the authenticated user", (long long)id);
    }
    if (c->change_stream) {
        bool dead = false;
        ret = router_change_stream_get_more(op, c, batch_size, reply, &dead, st);
        if (ret != 0) {
            shl_status_label_change_stream(st);
            goto done;
        }
        failed = false;
        exhausted = dead;
        goto done;
    }
    if (bson_has_field(cmd, "maxTimeMS")) {
        failed = false; /* a bad request does not end the cursor */
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "cannot set maxTimeMS on getMore command for a non-awaitData cursor");
    }
    SHL_ERR(shl_router_cursor_fill_batch(op, c, batch_size, false, &arr, &exhausted, st));
    failed = false;
    shl_router_cursor_reply_at(reply, ns.full, exhausted ? 0 : id, false, &arr, c->partial,
                               c->at_cluster_time);
done:
    if (c != NULL) {
        /* An error ends the cursor, as in MongoDB. */
        shl_router_cursor_manager_unpin(r->cursors, c, failed || exhausted);
    }
    bson_destroy(&arr);
    return ret;
}

typedef struct kill_arg {
    shl_router_t *router;
    shl_ns_t ns;
} kill_arg_t;

static bool
kill_one(void *arg, int64_t id)
{
    kill_arg_t *k = arg;
    return shl_router_cursor_manager_kill(k->router->cursors, id, k->ns.full);
}

static bool
owner_of(void *arg, int64_t id, uint8_t *out)
{
    kill_arg_t *k = arg;
    return shl_router_cursor_manager_owner(k->router->cursors, id, k->ns.full, out);
}

static int
cmd_kill_cursors(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    kill_arg_t k;
    int ret = 0;

    memset(&k, 0, sizeof(k));
    k.router = shl_router_get(op);

    SHL_ERR(cmd_ns(op, cmd, &k.ns, st));
    SHL_ERR(shl_cmd_kill_cursors_owned(op, k.ns.full, cmd, kill_one, owner_of, &k, reply, st));
done:
    return ret;
}

/* ---------------------------------------------------------------- count */

typedef struct count_args {
    const bson_t *cmd;
    bson_t query;
    bool has_query;
    int64_t skip, limit;
} count_args_t;

static int
parse_count(const bson_t *cmd, count_args_t *a, shl_status_t *st)
{
    bson_iter_t it;
    bool found;
    int ret = 0;

    memset(a, 0, sizeof(*a));
    a->cmd = cmd;
    SHL_ERR(shl_cmd_get_doc(cmd, "query", &a->query, &a->has_query, st));
    SHL_ERR(nonneg_field(cmd, "skip", &a->skip, &found, st));
    if (bson_iter_init_find(&it, cmd, "limit")) {
        if (!BSON_ITER_HOLDS_NUMBER(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field 'count.limit' is the wrong type '%s', expected type 'long'",
                     shl_bson_type_name(shl_iter_type(&it)));
        }
        /* A negative limit counts like its absolute value. */
        a->limit = bson_iter_as_int64(&it);
        a->limit = a->limit < 0 ? -a->limit : a->limit;
    }
done:
    return ret;
}

static void
build_count_body(const count_args_t *a, bson_t *out)
{
    static const char *const skip[] = {"skip", "limit", NULL};

    router_copy_command(a->cmd, skip, out);
    if (a->limit > 0) {
        BSON_APPEND_INT64(out, "limit", a->limit + a->skip);
    }
}

static void
build_count(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    (void)rr;
    (void)shard;
    build_count_body(arg, cmd);
}

static int
cmd_count(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    shl_ns_t ns;
    count_args_t a;
    shl_router_shard_result_t *results = NULL;
    size_t nresults = 0;
    int64_t total = 0;
    int ret = 0;

    SHL_ERR(cmd_ns(op, cmd, &ns, st));
    SHL_ERR(parse_count(cmd, &a, st));
    if (router_is_config_db(ns.db)) {
        bson_t res = BSON_INITIALIZER;
        bson_destroy(&res);
        ret = router_run_on_config(op, ns.db, cmd, &res, st);
        if (ret == 0) {
            shl_router_copy_reply_fields(&res, reply);
        }
        bson_destroy(&res);
        goto done;
    }
    ret = shl_router_scatter(r, op, ns.full, a.has_query ? &a.query : NULL, build_count, &a, NULL,
                             &results, &nresults, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        ret = check_filter_unrouted(a.has_query ? &a.query : NULL, st);
    }
    SHL_ERR(ret);
    for (size_t i = 0; i < nresults; i++) {
        bson_iter_t it;
        if (results[i].res.code != 0) {
            *st = results[i].res.status;
            SHL_ERR(results[i].res.code);
        }
        if (bson_iter_init_find(&it, &results[i].res.reply, "n") && BSON_ITER_HOLDS_NUMBER(&it)) {
            total += bson_iter_as_int64(&it);
        }
    }
    total = total > a.skip ? total - a.skip : 0;
    if (a.limit > 0 && total > a.limit) {
        total = a.limit;
    }
    if (total <= INT32_MAX) {
        BSON_APPEND_INT32(reply, "n", (int32_t)total);
    } else {
        BSON_APPEND_INT64(reply, "n", total);
    }
done:
    shl_router_scatter_results_free(results, nresults);
    return router_view_retry(op, cmd, ret, reply, st);
}

/* ---------------------------------------------------------------- distinct */

typedef struct distinct_args {
    const bson_t *cmd;
} distinct_args_t;

static void
build_distinct(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    const distinct_args_t *d = arg;
    (void)rr;
    (void)shard;
    router_copy_command(d->cmd, NULL, cmd);
}

static int
value_cmp(const void *a, const void *b, void *coll)
{
    return shl_bson_value_compare_coll(a, b, coll);
}

static int
cmd_distinct(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    shl_ns_t ns;
    bson_t query, arr;
    bool has_query = false, found;
    const char *key;
    shl_router_shard_result_t *results = NULL;
    size_t nresults = 0, nvals = 0, cap = 0, out = 0;
    bson_value_t *vals = NULL;
    distinct_args_t dargs = {cmd};
    shl_collator_t *coll = NULL;
    int ret = 0;

    SHL_ERR(cmd_ns(op, cmd, &ns, st));
    SHL_ERR(shl_cmd_get_string(cmd, "key", &key, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'distinct.key' is missing but a required field");
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "query", &query, &has_query, st));
    if (router_is_config_db(ns.db)) {
        bson_t res = BSON_INITIALIZER;
        bson_destroy(&res);
        ret = router_run_on_config(op, ns.db, cmd, &res, st);
        if (ret == 0) {
            shl_router_copy_reply_fields(&res, reply);
        }
        bson_destroy(&res);
        goto done;
    }
    if (op->txn != NULL) {
        /* As mongos: distinct does not filter orphans, so a transaction may not run it on a
         * sharded collection. */
        shl_router_routing_t rr;
        shl_status_t ignored = SHL_STATUS_INIT;
        bool sharded =
            shl_router_routing_init(r, ns.full, false, &rr, &ignored) == 0 && rr.rt != NULL;
        shl_router_routing_cleanup(&rr);
        if (sharded) {
            SHL_FAIL(st, SHL_CODE_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                     "Cannot run 'distinct' on a sharded collection in a multi-document "
                     "transaction. Please see http://dochub.mongodb.org/core/transaction-distinct "
                     "for a recommended alternative.");
        }
    }
    ret = shl_router_scatter(r, op, ns.full, has_query ? &query : NULL, build_distinct, &dargs,
                             NULL, &results, &nresults, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        ret = check_filter_unrouted(has_query ? &query : NULL, st);
    }
    SHL_ERR(ret);
    for (size_t i = 0; i < nresults; i++) {
        bson_iter_t it, v;
        if (results[i].res.code != 0) {
            *st = results[i].res.status;
            SHL_ERR(results[i].res.code);
        }
        if (!bson_iter_init_find(&it, &results[i].res.reply, "values") ||
            !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &v)) {
            continue;
        }
        while (shl_iter_next(&v)) {
            if (nvals == cap) {
                cap = cap ? cap * 2 : 64;
                vals = bson_realloc(vals, cap * sizeof(*vals));
            }
            bson_value_copy(bson_iter_value(&v), &vals[nvals++]);
        }
    }
    /* The union in canonical order, duplicates dropped (mongos's BSON set), strings
     * compared under the command's collation ("a" from one shard, "A" from another). */
    SHL_ERR(shl_router_effective_collator(r, ns.full, cmd, &coll, st));
    if (nvals > 0) {
        qsort_r(vals, nvals, sizeof(*vals), value_cmp, coll);
    }
    BSON_APPEND_ARRAY_BEGIN(reply, "values", &arr);
    for (size_t i = 0; i < nvals; i++) {
        char k[16];
        const char *kp;
        if (i > 0 && shl_bson_value_compare_coll(&vals[i - 1], &vals[i], coll) == 0) {
            continue;
        }
        /* Each shard's values fit; their union may not (MongoDB's mongos fails it too). */
        if ((size_t)arr.len +
                shl_bson_array_element_len((uint32_t)out, shl_bson_value_len(&vals[i])) >
            SHL_MAX_BSON_SIZE) {
            bson_append_array_end(reply, &arr);
            SHL_FAIL(st, 17217, "distinct too big, 16mb cap");
        }
        bson_uint32_to_string((uint32_t)out++, &kp, k, sizeof(k));
        bson_append_value(&arr, kp, -1, &vals[i]);
    }
    bson_append_array_end(reply, &arr);
done:
    for (size_t i = 0; i < nvals; i++) {
        bson_value_destroy(&vals[i]);
    }
    bson_free(vals);
    shl_collator_release(coll);
    shl_router_scatter_results_free(results, nresults);
    return router_view_retry(op, cmd, ret, reply, st);
}

/* ---------------------------------------------------------------- explain */

typedef struct explain_args {
    const char *verbosity;
    bool is_count;
    const bson_t *distinct; /* the user's distinct, sent as is; NULL otherwise */
    find_args_t find;
    count_args_t count;
} explain_args_t;

static void
build_explain(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    explain_args_t *e = arg;
    bson_t inner;
    (void)rr;
    (void)shard;

    BSON_APPEND_DOCUMENT_BEGIN(cmd, "explain", &inner);
    if (e->distinct != NULL) {
        router_copy_command(e->distinct, (const char *const[]){NULL}, &inner);
    } else if (e->is_count) {
        build_count_body(&e->count, &inner);
    } else {
        build_find_body(&e->find, &inner);
    }
    bson_append_document_end(cmd, &inner);
    BSON_APPEND_UTF8(cmd, "verbosity", e->verbosity);
}

/* A sub-document of 'doc' as a static view; false when absent. */
static bool
doc_sub(const bson_t *doc, const char *field, bson_t *out)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;
    if (!bson_iter_init_find(&it, doc, field) || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return false;
    }
    bson_iter_document(&it, &len, &data);
    return bson_init_static(out, data, len);
}

/*
 * mongos's explain: queryPlanner.winningPlan {stage, shards: [each shard's planner output]}
 * and, with execution stats, totals over the shards (nReturned after the router's skip and
 * limit when several shards answered), the root stage and each shard's own stats.
 */
static void
append_cluster_explain(shl_op_ctx_t *op, const char *stage, shl_router_shard_result_t *results,
                       size_t n, bool exec_stats, int64_t millis, int64_t skip, int64_t limit,
                       const bson_t *inner, bson_t *reply)
{
    shl_router_t *r = shl_router_get(op);
    bson_t qp, wp, shards, es, stages, si, sub, all;
    int64_t nret = 0, keys = 0, docs = 0, child_ms = 0, counted = 0;
    bool has_counted = false, has_all = false;
    char k[16];
    const char *kp;

    BSON_APPEND_UTF8(reply, "explainVersion", "1");
    BSON_APPEND_DOCUMENT_BEGIN(reply, "queryPlanner", &qp);
    BSON_APPEND_INT32(&qp, "mongosPlannerVersion", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&qp, "winningPlan", &wp);
    BSON_APPEND_UTF8(&wp, "stage", stage);
    BSON_APPEND_ARRAY_BEGIN(&wp, "shards", &shards);
    for (size_t i = 0; i < n; i++) {
        bson_t sh;
        bson_iter_t it;
        char host[SHL_CLIENT_HOST_MAX];
        router_shard_host(r, results[i].shard, host, sizeof(host));
        bson_uint32_to_string((uint32_t)i, &kp, k, sizeof(k));
        BSON_APPEND_DOCUMENT_BEGIN(&shards, kp, &sh);
        if (bson_iter_init_find(&it, &results[i].res.reply, "explainVersion")) {
            bson_append_iter(&sh, NULL, 0, &it);
        }
        BSON_APPEND_UTF8(&sh, "shardName", results[i].shard);
        BSON_APPEND_UTF8(&sh, "connectionString", host);
        if (doc_sub(&results[i].res.reply, "serverInfo", &sub)) {
            BSON_APPEND_DOCUMENT(&sh, "serverInfo", &sub);
        }
        if (doc_sub(&results[i].res.reply, "queryPlanner", &sub)) {
            bson_concat(&sh, &sub);
        }
        bson_append_document_end(&shards, &sh);
    }
    bson_append_array_end(&wp, &shards);
    bson_append_document_end(&qp, &wp);
    bson_append_document_end(reply, &qp);

    if (exec_stats) {
        for (size_t i = 0; i < n; i++) {
            bson_t ex;
            if (!doc_sub(&results[i].res.reply, "executionStats", &sub)) {
                continue;
            }
            nret += shl_bson_int64_at(&sub, "nReturned");
            keys += shl_bson_int64_at(&sub, "totalKeysExamined");
            docs += shl_bson_int64_at(&sub, "totalDocsExamined");
            child_ms += shl_bson_int64_at(&sub, "executionTimeMillis");
            has_all = has_all || bson_has_field(&sub, "allPlansExecution");
            if (doc_sub(&sub, "executionStages", &ex) && bson_has_field(&ex, "nCounted")) {
                counted += shl_bson_int64_at(&ex, "nCounted");
                has_counted = true;
            }
        }
        if (n > 1) {
            /* What the router returns after its own skip and limit. */
            nret = nret > skip ? nret - skip : 0;
            counted = counted > skip ? counted - skip : 0;
            if (limit > 0) {
                nret = nret < limit ? nret : limit;
                counted = counted < limit ? counted : limit;
            }
        }
        BSON_APPEND_DOCUMENT_BEGIN(reply, "executionStats", &es);
        BSON_APPEND_INT64(&es, "nReturned", nret);
        BSON_APPEND_INT64(&es, "executionTimeMillis", millis);
        BSON_APPEND_INT64(&es, "totalKeysExamined", keys);
        BSON_APPEND_INT64(&es, "totalDocsExamined", docs);
        BSON_APPEND_DOCUMENT_BEGIN(&es, "executionStages", &stages);
        BSON_APPEND_UTF8(&stages, "stage", stage);
        BSON_APPEND_INT64(&stages, "nReturned", nret);
        if (has_counted) {
            BSON_APPEND_INT64(&stages, "nCounted", counted);
        }
        if (n > 1 && limit > 0) {
            BSON_APPEND_INT64(&stages, "limitAmount", limit);
        }
        if (n > 1 && skip > 0) {
            BSON_APPEND_INT64(&stages, "skipAmount", skip);
        }
        BSON_APPEND_INT64(&stages, "executionTimeMillis", millis);
        BSON_APPEND_INT64(&stages, "totalKeysExamined", keys);
        BSON_APPEND_INT64(&stages, "totalDocsExamined", docs);
        BSON_APPEND_INT64(&stages, "totalChildMillis", child_ms);
        BSON_APPEND_ARRAY_BEGIN(&stages, "shards", &shards);
        for (size_t i = 0; i < n; i++) {
            bson_t sh;
            bson_uint32_to_string((uint32_t)i, &kp, k, sizeof(k));
            BSON_APPEND_DOCUMENT_BEGIN(&shards, kp, &sh);
            BSON_APPEND_UTF8(&sh, "shardName", results[i].shard);
            if (doc_sub(&results[i].res.reply, "executionStats", &sub)) {
                bson_concat(&sh, &sub);
            }
            bson_append_document_end(&shards, &sh);
        }
        bson_append_array_end(&stages, &shards);
        bson_append_document_end(&es, &stages);
        if (has_all) {
            BSON_APPEND_ARRAY_BEGIN(&es, "allPlansExecution", &all);
            for (size_t i = 0; i < n; i++) {
                bson_t sh;
                bson_iter_t it;
                bson_uint32_to_string((uint32_t)i, &kp, k, sizeof(k));
                BSON_APPEND_DOCUMENT_BEGIN(&all, kp, &sh);
                BSON_APPEND_UTF8(&sh, "shardName", results[i].shard);
                if (doc_sub(&results[i].res.reply, "executionStats", &sub) &&
                    bson_iter_init_find(&it, &sub, "allPlansExecution")) {
                    bson_append_value(&sh, "allPlans", -1, bson_iter_value(&it));
                }
                bson_append_document_end(&all, &sh);
            }
            bson_append_array_end(&es, &all);
        }
        bson_append_document_end(reply, &es);
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "serverInfo", &si);
    BSON_APPEND_UTF8(&si, "host", op->svc->me);
    bson_append_document_end(reply, &si);
    BSON_APPEND_DOCUMENT(reply, "command", inner);
}

static const char *const explain_fields[] = {"verbosity", NULL};

static int
cmd_explain(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    bson_iter_t it;
    bson_t inner, agg = BSON_INITIALIZER, distinct_query;
    bool found;
    const char *name, *stage;
    shl_ns_t ns;
    explain_args_t e;
    const bson_t *filter = NULL;
    shl_router_shard_result_t *results = NULL;
    size_t nresults = 0;
    int64_t t0 = shl_clock_mono_us();
    int ret = 0;

    memset(&e, 0, sizeof(e));
    e.verbosity = "allPlansExecution";
    SHL_ERR(shl_cmd_check_fields(cmd, explain_fields, st));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'explain.explain' is the wrong type '%s', expected type 'object'",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "explain", &inner, &found, st));
    SHL_ERR(shl_cmd_get_string(cmd, "verbosity", &e.verbosity, &found, st));
    if (strcmp(e.verbosity, "queryPlanner") != 0 && strcmp(e.verbosity, "executionStats") != 0 &&
        strcmp(e.verbosity, "allPlansExecution") != 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "Enumeration value '%s' for field 'explain.verbosity' is not a valid value.",
                 e.verbosity);
    }
    name = shl_cmd_name(&inner);
    if (strcmp(name, "aggregate") == 0) {
        router_copy_command(&inner, (const char *const[]){"explain", "cursor", NULL}, &agg);
        BSON_APPEND_BOOL(&agg, "explain", true);
        ret = router_cmd_aggregate(op, &agg, reply, st);
        goto done;
    }
    SHL_ERR(cmd_ns(op, &inner, &ns, st));
    if (strcmp(name, "find") == 0) {
        SHL_ERR(parse_find(&inner, &e.find, st));
        filter = e.find.has_filter ? &e.find.filter : NULL;
    } else if (strcmp(name, "count") == 0) {
        e.is_count = true;
        SHL_ERR(parse_count(&inner, &e.count, st));
        filter = e.count.has_query ? &e.count.query : NULL;
    } else if (strcmp(name, "distinct") == 0) {
        bool has_query = false;
        e.distinct = &inner;
        SHL_ERR(shl_cmd_get_doc(&inner, "query", &distinct_query, &has_query, st));
        filter = has_query ? &distinct_query : NULL;
    } else {
        SHL_FAIL(st, SHL_CODE_COMMAND_NOT_FOUND, "Explain failed due to unknown command: %s", name);
    }
    if (router_is_config_db(ns.db)) {
        bson_t res = BSON_INITIALIZER;
        bson_destroy(&res);
        ret = router_run_on_config(op, ns.db, cmd, &res, st);
        if (ret == 0) {
            shl_router_copy_reply_fields(&res, reply);
        }
        bson_destroy(&res);
        goto done;
    }
    SHL_ERR(shl_router_scatter(r, op, ns.full, filter, build_explain, &e, NULL, &results, &nresults,
                               st));
    for (size_t i = 0; i < nresults; i++) {
        if (results[i].res.code != 0) {
            *st = results[i].res.status;
            SHL_ERR(results[i].res.code);
        }
    }
    stage = nresults == 1 ? "SINGLE_SHARD"
                          : (!e.is_count && e.distinct == NULL && e.find.sorted ? "SHARD_MERGE_SORT"
                                                                                : "SHARD_MERGE");
    append_cluster_explain(op, stage, results, nresults, strcmp(e.verbosity, "queryPlanner") != 0,
                           (shl_clock_mono_us() - t0) / 1000,
                           e.distinct != NULL ? 0
                           : e.is_count       ? e.count.skip
                                              : e.find.skip,
                           e.distinct != NULL ? 0
                           : e.is_count       ? e.count.limit
                                              : e.find.limit,
                           &inner, reply);
done:
    bson_destroy(&agg);
    shl_router_scatter_results_free(results, nresults);
    return router_view_retry(op, cmd, ret, reply, st);
}

/* The snapshot reads (cluster_snapshot.c): the reply names the snapshot's atClusterTime. */
static int
cmd_find_snapshot(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = cmd_find(op, cmd, reply, st);
    if (ret == 0) {
        router_snapshot_reply(op, reply);
    }
    return ret;
}

static int
cmd_distinct_snapshot(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = cmd_distinct(op, cmd, reply, st);
    if (ret == 0) {
        router_snapshot_reply(op, reply);
    }
    return ret;
}

static int
cmd_aggregate_snapshot(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = router_cmd_aggregate(op, cmd, reply, st);
    if (ret == 0) {
        router_snapshot_reply(op, reply);
    }
    return ret;
}

static const shl_command_t k_find_commands[] = {
    {"find",
     {NULL},
     cmd_find_snapshot,
     SHL_CMD_IN_TXN | SHL_CMD_SNAPSHOT_READ,
     "query for documents"},
    {"getMore",
     {NULL},
     cmd_get_more,
     SHL_CMD_IN_TXN | SHL_CMD_SNAPSHOT_READ,
     "get more results from a cursor"},
    {"killCursors", {NULL}, cmd_kill_cursors, SHL_CMD_IN_TXN, "kill cursors"},
    {"count", {NULL}, cmd_count, 0, "count documents"},
    {"distinct",
     {NULL},
     cmd_distinct_snapshot,
     SHL_CMD_IN_TXN | SHL_CMD_SNAPSHOT_READ,
     "distinct values of a field"},
    {"explain", {NULL}, cmd_explain, 0, "explain a find, count, distinct or aggregate"},
    {"aggregate",
     {NULL},
     cmd_aggregate_snapshot,
     SHL_CMD_IN_TXN | SHL_CMD_SNAPSHOT_READ,
     "aggregation pipeline"},
};

void
shl_cluster_find_commands_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(k_find_commands) / sizeof(k_find_commands[0]); i++) {
        shl_command_registry_add(reg, &k_find_commands[i]);
    }
}
