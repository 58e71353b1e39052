/*
 * agg_stages.c -- what the aggregation engine (src/query/pipeline.h) needs from a data node
 * beyond its input: other collections of the same database for $lookup and $unionWith, the
 * documents of $collStats and $indexStats, and the writes of $out (a temporary collection
 * renamed over the target, as MongoDB does) and $merge (one update or insert per document).
 * Writes go through the node's own insert/update/create/renameCollection commands.
 */
#include <string.h>

#include "base/clock.h"
#include "bson/bson_compare.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/db_private.h"
#include "db/exec.h"
#include "db/sharding_hooks.h"
#include "db/views.h"
#include "net/command_args.h"
#include "net/stmt_batch.h"
#include "query/view_rewrite.h"

/* ---------------------------------------------------------------- reading other collections */

typedef struct agg_cursor {
    exec_query_t q;
    exec_plan_t *plan;
    shl_op_ctx_t *op;
    /* A view's source: its pipeline (then the caller's filter) over the plan of its
     * collection; the stages array the pipeline borrows. NULL: a collection's source. */
    shl_pipeline_t *view_pl;
    bson_t *view_stages;
} agg_cursor_t;

static int
cursor_next(void *arg, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    agg_cursor_t *c = arg;
    exec_row_t row;
    bool eof;

    *doc = NULL;
    if (c->plan == NULL) {
        goto done;
    }
    SHL_ERR(exec_plan_next(c->plan, c->op, &row, &eof, st));
    if (!eof) {
        *doc = row.doc;
    }
done:
    return ret;
}

static int
view_cursor_next(void *arg, const bson_t **doc, shl_status_t *st)
{
    agg_cursor_t *c = arg;
    return shl_pipeline_next(c->view_pl, doc, st);
}

static void
agg_cursor_free(agg_cursor_t *c)
{
    if (c != NULL) {
        shl_pipeline_destroy(c->view_pl);
        if (c->view_stages != NULL) {
            bson_destroy(c->view_stages);
        }
        exec_plan_destroy(c->plan);
        exec_query_cleanup(&c->q);
        bson_free(c);
    }
}

/*
 * A $lookup / $unionWith of view 'r': its pipeline, then 'filter', over the documents of its
 * collection (c->plan, built by the caller), as the source 'src'.
 */
static int
open_view(db_agg_env_t *e, agg_cursor_t *c, const db_view_resolved_t *r, const bson_t *filter,
          shl_pipeline_source_t *src, shl_status_t *st)
{
    int ret = 0;
    uint32_t n = 0;
    shl_pipeline_opts_t opts;

    c->view_stages = bson_new();
    {
        bson_t holder = BSON_INITIALIZER;
        BSON_APPEND_ARRAY(&holder, "pipeline", &r->pipeline);
        shl_view_append_stages(&holder, "pipeline", c->view_stages, &n);
        bson_destroy(&holder);
    }
    if (filter != NULL && !bson_empty(filter)) {
        char k[16];
        const char *kp;
        bson_t d;
        bson_uint32_to_string(n++, &kp, k, sizeof(k));
        BSON_APPEND_DOCUMENT_BEGIN(c->view_stages, kp, &d);
        BSON_APPEND_DOCUMENT(&d, "$match", filter);
        bson_append_document_end(c->view_stages, &d);
    }
    memset(&opts, 0, sizeof(opts));
    opts.env = &e->env;
    SHL_ERR(shl_pipeline_parse(c->view_stages, &opts, &c->view_pl, st));
    shl_pipeline_set_source(c->view_pl, &(shl_pipeline_source_t){cursor_next, c});
    src->next = view_cursor_next;
    src->arg = c;
done:
    return ret;
}

/*
 * env_open --
 *     A plan over 'coll' of the aggregate's database in its own snapshot at the aggregate's
 *     read timestamp. No collection lock is taken: the caller already holds its own
 *     collection's, locks are not recursive (a $lookup of the same collection would
 *     deadlock), and a plan keeps its collection reference and snapshot valid (as a cursor
 *     does between getMores). The filter goes to the planner, so an index on the foreign
 *     field serves an equality $lookup.
 */
static int
env_open(void *arg, const char *coll, const bson_t *filter, shl_pipeline_source_t *src,
         void **cursor, shl_status_t *st)
{
    int ret = 0;
    db_agg_env_t *e = arg;
    db_node_t *node = db_node(e->op);
    agg_cursor_t *c = bson_aligned_alloc0(BSON_ALIGNOF(agg_cursor_t), sizeof(*c));
    shl_collection_t *meta = NULL;
    shl_ns_t ns;
    db_view_resolved_t view;
    bool is_view = false;

    SHL_ERR(shl_ns_make(&ns, e->db, coll, st));
    /* A view: its collection's documents through its pipeline, the filter after it. */
    SHL_ERR(db_view_resolve(e->op, &ns, &view, &is_view, st));
    if (is_view) {
        SHL_ERR(shl_ns_make(&ns, e->db, strchr(view.ns, '.') + 1, st));
    }
    SHL_ERR(exec_query_init(&c->q, is_view ? NULL : filter, NULL, NULL, st));
    exec_query_set_collator(&c->q, e->collator, true); /* MongoDB: the aggregate's collation */
    c->op = e->op;
    meta = shl_catalog_get(node->eng, ns.full);
    if (meta != NULL) {
        SHL_ERR(exec_plan_build(node->eng, NULL, e->read_ts, meta, ns.full, &c->q, &c->plan, st));
    }
    src->next = cursor_next;
    src->arg = c;
    if (is_view) {
        SHL_ERR(open_view(e, c, &view, filter, src, st));
    }
    *cursor = c;
    c = NULL;
done:
    if (is_view) {
        db_view_resolved_cleanup(&view);
    }
    shl_collection_release(meta);
    agg_cursor_free(c);
    return ret;
}

static void
env_close(void *arg, void *cursor)
{
    (void)arg;
    agg_cursor_free(cursor);
}

/* ---------------------------------------------------------------- $collStats, $indexStats */

static void
append_now(bson_t *doc, const char *key)
{
    BSON_APPEND_DATE_TIME(doc, key, shl_clock_wall_ms());
}

static int
env_stats(void *arg, const char *stage, const bson_t *spec, bson_t *docs, shl_status_t *st)
{
    int ret = 0;
    db_agg_env_t *e = arg;
    db_node_t *node = db_node(e->op);
    shl_collection_t *coll = shl_catalog_get(node->eng, e->ns);
    bson_t d;
    bson_iter_t it;
    char shard[128];
    bool have_shard = shl_db_shard_name(e->op, shard, sizeof(shard));

    if (strcmp(stage, "$collStats") == 0) {
        bool want_count = bson_has_field(spec, "count");
        bool want_storage = bson_has_field(spec, "storageStats");
        if ((want_count || want_storage) && coll == NULL) {
            SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND,
                     "Unable to retrieve %s in $collStats stage :: caused by :: Collection [%s] "
                     "not found.",
                     want_storage ? "storageStats" : "count", e->ns);
        }
        BSON_APPEND_DOCUMENT_BEGIN(docs, "0", &d);
        BSON_APPEND_UTF8(&d, "ns", e->ns);
        if (have_shard) {
            BSON_APPEND_UTF8(&d, "shard", shard);
        }
        BSON_APPEND_UTF8(&d, "host", e->op->svc->me);
        append_now(&d, "localTime");
        if (want_storage) {
            bson_t ss, sizes;
            int64_t scale = 1, count = shl_collection_num_records(coll);
            int64_t size = shl_collection_data_size(coll);
            int64_t storage = shl_storage_ident_size(node->eng, coll->ident), total = 0;
            bson_t sview;
            if (bson_iter_init_find(&it, spec, "storageStats") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
                const uint8_t *data;
                uint32_t len;
                bson_iter_t sc;
                bson_iter_document(&it, &len, &data);
                if (bson_init_static(&sview, data, len) &&
                    bson_iter_init_find(&sc, &sview, "scale") && BSON_ITER_HOLDS_NUMBER(&sc)) {
                    scale = bson_iter_as_int64(&sc);
                    if (scale < 1) {
                        bson_append_document_end(docs, &d);
                        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "scale has to be > 0");
                    }
                }
            }
            BSON_APPEND_DOCUMENT_BEGIN(&d, "storageStats", &ss);
            BSON_APPEND_INT64(&ss, "size", size / scale);
            BSON_APPEND_INT64(&ss, "count", count);
            if (count > 0) {
                BSON_APPEND_INT64(&ss, "avgObjSize", size / count);
            }
            BSON_APPEND_INT64(&ss, "numOrphanDocs", shl_db_orphan_count(e->op, coll->uuid));
            BSON_APPEND_INT64(&ss, "storageSize", storage / scale);
            BSON_APPEND_INT64(&ss, "freeStorageSize", 0);
            BSON_APPEND_BOOL(&ss, "capped", coll->capped);
            if (coll->capped) {
                /* As collStats shows them (cmd_stats.c). */
                BSON_APPEND_INT64(&ss, "max", coll->capped_max);
                BSON_APPEND_INT64(&ss, "maxSize", coll->capped_size / scale);
            }
            BSON_APPEND_INT32(&ss, "nindexes", (int32_t)coll->nindexes);
            BSON_APPEND_DOCUMENT_BEGIN(&ss, "indexSizes", &sizes);
            for (size_t i = 0; i < coll->nindexes; i++) {
                int64_t s = shl_storage_ident_size(node->eng, coll->indexes[i]->ident);
                total += s;
                BSON_APPEND_INT64(&sizes, coll->indexes[i]->name, s / scale);
            }
            bson_append_document_end(&ss, &sizes);
            BSON_APPEND_INT64(&ss, "totalIndexSize", total / scale);
            BSON_APPEND_INT64(&ss, "totalSize", (storage + total) / scale);
            BSON_APPEND_INT64(&ss, "scaleFactor", scale);
            bson_append_document_end(&d, &ss);
        }
        if (want_count) {
            BSON_APPEND_INT64(&d, "count", shl_collection_num_records(coll));
        }
        bson_append_document_end(docs, &d);
    } else {
        /* $indexStats: Shale does not count index accesses yet; ops stay 0. */
        for (size_t i = 0; coll != NULL && i < coll->nindexes; i++) {
            const shl_index_t *idx = coll->indexes[i];
            char key[16];
            const char *kp;
            bson_t acc;
            bson_uint32_to_string((uint32_t)i, &kp, key, sizeof(key));
            BSON_APPEND_DOCUMENT_BEGIN(docs, kp, &d);
            BSON_APPEND_UTF8(&d, "name", idx->name);
            BSON_APPEND_DOCUMENT(&d, "key", idx->key_pattern);
            BSON_APPEND_UTF8(&d, "host", e->op->svc->me);
            if (have_shard) {
                BSON_APPEND_UTF8(&d, "shard", shard);
            }
            BSON_APPEND_DOCUMENT_BEGIN(&d, "accesses", &acc);
            BSON_APPEND_INT64(&acc, "ops", 0);
            append_now(&acc, "since");
            bson_append_document_end(&d, &acc);
            BSON_APPEND_DOCUMENT(&d, "spec", idx->spec);
            bson_append_document_end(docs, &d);
        }
    }
done:
    shl_collection_release(coll);
    return ret;
}

void
db_agg_env_init(db_agg_env_t *e, shl_op_ctx_t *op, const char *db, uint64_t read_ts)
{
    memset(e, 0, sizeof(*e));
    e->op = op;
    snprintf(e->db, sizeof(e->db), "%s", db);
    e->read_ts = read_ts;
    e->env.open = env_open;
    e->env.close = env_close;
    e->env.stats = env_stats;
    e->env.arg = e;
}

/* ---------------------------------------------------------------- writes: $out, $merge */

/*
 * run_command --
 *     Run one of this node's commands on database 'db' as an internal operation (no session,
 *     no shard version). A reply with writeErrors becomes the first error's status.
 */
static int
run_command(shl_op_ctx_t *op, const char *db, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shl_op_ctx_t sub;
    const shl_command_t *c;
    bson_iter_t it;

    bson_init(reply);
    bson_iter_init(&it, cmd);
    shl_iter_next(&it);
    c = shl_command_registry_find(op->svc->commands, shl_iter_key(&it));
    SHL_INVARIANT(c != NULL);
    SHL_ERR(shl_op_ctx_init(&sub, op->svc, NULL, cmd, db, st));
    sub.deadline_us = op->deadline_us;
    SHL_ERR(c->run(&sub, cmd, reply, st));
    SHL_ERR(shl_status_from_write_errors(reply, st));
done:
    return ret;
}

int
db_run_command(shl_op_ctx_t *op, const char *db, const bson_t *cmd, bson_t *reply,
               shl_status_t *st)
{
    return run_command(op, db, cmd, reply, st);
}

/* Insert the statements of 'b' into db.coll (ordered), then empty it. */
static int
flush_inserts(shl_op_ctx_t *op, const char *db, const char *coll, shl_stmt_batch_t *b, bool bypass,
              shl_status_t *st)
{
    int ret;
    bson_t cmd = BSON_INITIALIZER, reply;

    BSON_APPEND_UTF8(&cmd, "insert", coll);
    BSON_APPEND_BOOL(&cmd, "ordered", true);
    if (bypass) {
        BSON_APPEND_BOOL(&cmd, "bypassDocumentValidation", true);
    }
    shl_stmt_batch_append_to(b, &cmd, "documents");
    ret = run_command(op, db, &cmd, &reply, st);
    shl_stmt_batch_clear(b);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* Insert the documents of the array 'docs' into db.coll in batches an insert accepts. */
static int
insert_all(shl_op_ctx_t *op, const char *db, const char *coll, const bson_t *docs, bool bypass,
           shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    shl_stmt_batch_t b;

    shl_stmt_batch_init(&b);
    bson_iter_init(&it, docs);
    while (shl_iter_next(&it)) {
        bson_t d;
        const uint8_t *data;
        uint32_t len;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            continue;
        }
        bson_iter_document(&it, &len, &data);
        bson_init_static(&d, data, len);
        if (!shl_stmt_batch_has_room(&b, d.len)) {
            SHL_ERR(flush_inserts(op, db, coll, &b, bypass, st));
        }
        shl_stmt_batch_append(&b, &d);
    }
    if (b.n > 0) {
        SHL_ERR(flush_inserts(op, db, coll, &b, bypass, st));
    }
done:
    shl_stmt_batch_cleanup(&b);
    return ret;
}

/* $out or $merge under way (db_agg_out_begin .. db_agg_out_destroy). */
struct db_agg_out {
    shl_op_ctx_t *op;
    const shl_pipeline_t *p;
    const shl_pipeline_output_t *o;
    shl_ns_t target;
    bool bypass;
    char tmp[64]; /* $out: the temporary collection, while it exists ("" otherwise) */
};

/* $out: create the temporary collection with the target's options and indexes. */
static int
out_begin(db_agg_out_t *w, shl_status_t *st)
{
    int ret = 0;
    shl_op_ctx_t *op = w->op;
    db_node_t *node = db_node(op);
    shl_collection_t *existing = NULL;
    char tmp[64];
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    uint8_t rnd[16];

    existing = shl_catalog_get(node->eng, w->target.full);
    if (existing != NULL && existing->capped) {
        SHL_FAIL(st, 17152, "namespace '%s' is capped so it can't be used for $out",
                 w->target.full);
    }
    shl_uuid_gen(rnd);
    snprintf(tmp, sizeof(tmp), "tmp.agg_out.%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1],
             rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    /* The temporary collection gets the target's options and indexes, so the rename keeps
     * them (MongoDB's $out does the same). */
    BSON_APPEND_UTF8(&cmd, "create", tmp);
    if (existing != NULL && existing->options != NULL) {
        bson_iter_t it;
        bson_iter_init(&it, existing->options);
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (strcmp(k, "idIndex") != 0 && strcmp(k, "uuid") != 0) {
                bson_append_iter(&cmd, k, -1, &it);
            }
        }
    }
    SHL_ERR(run_command(op, w->target.db, &cmd, &reply, st));
    snprintf(w->tmp, sizeof(w->tmp), "%s", tmp);
    if (existing != NULL && existing->nindexes > 1) {
        bson_t arr;
        uint32_t n = 0;
        bson_reinit(&cmd);
        BSON_APPEND_UTF8(&cmd, "createIndexes", tmp);
        BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &arr);
        for (size_t i = 0; i < existing->nindexes; i++) {
            char key[16];
            const char *kp;
            if (existing->indexes[i]->is_id) {
                continue;
            }
            bson_uint32_to_string(n++, &kp, key, sizeof(key));
            BSON_APPEND_DOCUMENT(&arr, kp, existing->indexes[i]->spec);
        }
        bson_append_array_end(&cmd, &arr);
        bson_destroy(&reply);
        SHL_ERR(run_command(op, w->target.db, &cmd, &reply, st));
    }
done:
    shl_collection_release(existing);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* $out: rename the temporary collection over the target. */
static int
out_commit(db_agg_out_t *w, shl_status_t *st)
{
    int ret;
    char tmp_full[SHL_NS_MAX + 80];
    bson_t cmd = BSON_INITIALIZER, reply;

    snprintf(tmp_full, sizeof(tmp_full), "%s.%s", w->target.db, w->tmp);
    BSON_APPEND_UTF8(&cmd, "renameCollection", tmp_full);
    BSON_APPEND_UTF8(&cmd, "to", w->target.full);
    BSON_APPEND_BOOL(&cmd, "dropTarget", true);
    ret = run_command(w->op, "admin", &cmd, &reply, st);
    if (ret == 0) {
        w->tmp[0] = '\0';
    }
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* Whether 'idx' is a unique index whose key fields are exactly the 'on' fields. */
static bool
index_supports_on(const shl_index_t *idx, const shl_pipeline_output_t *o)
{
    bson_iter_t it;
    size_t n = 0;

    if (!idx->unique || bson_has_field(idx->spec, "partialFilterExpression") ||
        bson_has_field(idx->spec, "collation")) {
        return false;
    }
    bson_iter_init(&it, idx->key_pattern);
    while (shl_iter_next(&it)) {
        bool found = false;
        for (size_t i = 0; i < o->non; i++) {
            found = found || strcmp(o->on[i], shl_iter_key(&it)) == 0;
        }
        if (!found || BSON_ITER_HOLDS_UTF8(&it)) { /* hashed, text, ... are not unique keys */
            return false;
        }
        n++;
    }
    return n == o->non;
}

static int
merge_one(shl_op_ctx_t *op, const shl_pipeline_t *p, const shl_pipeline_output_t *o,
          const shl_ns_t *target, const bson_t *doc_in, bool bypass, shl_status_t *st)
{
    int ret = 0;
    bson_t doc = BSON_INITIALIZER, q = BSON_INITIALIZER, cmd = BSON_INITIALIZER;
    bson_t reply = BSON_INITIALIZER, arr, stmt, u, vars = BSON_INITIALIZER;
    bson_iter_t it, f;
    bool upsert = o->when_not_matched == SHL_MERGE_INSERT;
    int64_t n = 0;

    /* A document without _id gets one when _id is an 'on' field (MongoDB's $merge does the
     * same); otherwise an inserted document gets its _id from the insert. */
    bool on_id = false;
    for (size_t i = 0; i < o->non; i++) {
        on_id = on_id || strcmp(o->on[i], "_id") == 0;
    }
    if (on_id && !bson_has_field(doc_in, "_id")) {
        bson_oid_t oid;
        shl_bson_oid_gen(&oid);
        BSON_APPEND_OID(&doc, "_id", &oid);
    }
    bson_concat(&doc, doc_in);
    for (size_t i = 0; i < o->non; i++) {
        bson_iter_t d;
        if (!bson_iter_init(&d, &doc) || !bson_iter_find_descendant(&d, o->on[i], &f) ||
            BSON_ITER_HOLDS_NULL(&f) || BSON_ITER_HOLDS_UNDEFINED(&f) ||
            BSON_ITER_HOLDS_ARRAY(&f)) {
            SHL_FAIL(st, 51132,
                     "$merge write error: 'on' field '%s' cannot be missing, null, undefined or "
                     "an array",
                     o->on[i]);
        }
        bson_append_value(&q, o->on[i], -1, bson_iter_value(&f));
    }
    if (o->when_matched == SHL_MERGE_FAIL) {
        bson_t one = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(&one, "0", &doc);
        ret = insert_all(op, target->db, target->coll, &one, bypass, st);
        bson_destroy(&one);
        if (ret == SHL_CODE_DUPLICATE_KEY) {
            SHL_FAIL(st, SHL_CODE_DUPLICATE_KEY,
                     "$merge with whenMatched: fail found an existing document with the same "
                     "values for the 'on' fields: %s",
                     st->reason);
        }
        SHL_ERR(ret);
        goto done;
    }
    if (o->when_matched == SHL_MERGE_PIPELINE) {
        SHL_ERR(shl_pipeline_merge_vars(p, &doc, &vars, st));
        upsert = false;
    }
    BSON_APPEND_UTF8(&cmd, "update", target->coll);
    BSON_APPEND_BOOL(&cmd, "ordered", true);
    if (bypass) {
        BSON_APPEND_BOOL(&cmd, "bypassDocumentValidation", true);
    }
    BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &stmt);
    BSON_APPEND_DOCUMENT(&stmt, "q", &q);
    switch (o->when_matched) {
    case SHL_MERGE_REPLACE:
        BSON_APPEND_DOCUMENT(&stmt, "u", &doc);
        break;
    case SHL_MERGE_KEEP_EXISTING:
        BSON_APPEND_DOCUMENT_BEGIN(&stmt, "u", &u);
        BSON_APPEND_DOCUMENT(&u, "$setOnInsert", &doc);
        bson_append_document_end(&stmt, &u);
        break;
    case SHL_MERGE_MERGE:
        BSON_APPEND_DOCUMENT_BEGIN(&stmt, "u", &u);
        BSON_APPEND_DOCUMENT(&u, "$set", &doc);
        bson_append_document_end(&stmt, &u);
        break;
    case SHL_MERGE_PIPELINE:
        BSON_APPEND_ARRAY(&stmt, "u", o->update_pipeline);
        BSON_APPEND_DOCUMENT(&stmt, "c", &vars);
        break;
    case SHL_MERGE_FAIL:
        break;
    }
    BSON_APPEND_BOOL(&stmt, "upsert", upsert);
    BSON_APPEND_BOOL(&stmt, "multi", false);
    bson_append_document_end(&arr, &stmt);
    bson_append_array_end(&cmd, &arr);
    SHL_ERR(run_command(op, target->db, &cmd, &reply, st));
    if (bson_iter_init_find(&it, &reply, "n") && BSON_ITER_HOLDS_NUMBER(&it)) {
        n = bson_iter_as_int64(&it);
    }
    if (n == 0 && o->when_not_matched == SHL_MERGE_NOT_MATCHED_FAIL) {
        SHL_FAIL(st, 13113,
                 "$merge could not find a matching document in the target collection for at "
                 "least one document in the source collection");
    }
    if (n == 0 && o->when_matched == SHL_MERGE_PIPELINE &&
        o->when_not_matched == SHL_MERGE_INSERT) {
        bson_t one = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(&one, "0", &doc);
        ret = insert_all(op, target->db, target->coll, &one, bypass, st);
        bson_destroy(&one);
        SHL_ERR(ret);
    }
done:
    bson_destroy(&doc);
    bson_destroy(&q);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    bson_destroy(&vars);
    return ret;
}

/* $merge: the 'on' fields need a unique index on the target (or are just _id). */
static int
merge_begin(db_agg_out_t *w, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(w->op);
    shl_collection_t *coll = shl_catalog_get(node->eng, w->target.full);
    bool supported = w->o->non == 1 && strcmp(w->o->on[0], "_id") == 0;

    for (size_t i = 0; !supported && coll != NULL && i < coll->nindexes; i++) {
        supported = index_supports_on(coll->indexes[i], w->o);
    }
    if (!supported) {
        SHL_FAIL(st, 51183, "Cannot find index to verify that join fields will be unique");
    }
done:
    shl_collection_release(coll);
    return ret;
}

static int
merge_write(db_agg_out_t *w, const bson_t *docs, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    bson_iter_init(&it, docs);
    while (shl_iter_next(&it)) {
        bson_t d;
        const uint8_t *data;
        uint32_t len;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            continue;
        }
        bson_iter_document(&it, &len, &data);
        bson_init_static(&d, data, len);
        SHL_ERR(shl_op_check_interrupt(w->op, st));
        SHL_ERR(merge_one(w->op, w->p, w->o, &w->target, &d, w->bypass, st));
    }
done:
    return ret;
}

int
db_agg_out_begin(shl_op_ctx_t *op, const shl_pipeline_t *p, const char *db, bool bypass,
                 db_agg_out_t **out, shl_status_t *st)
{
    int ret = 0;
    db_agg_out_t *w = bson_malloc0(sizeof(*w));

    w->op = op;
    w->p = p;
    w->o = shl_pipeline_output(p);
    w->bypass = bypass;
    SHL_INVARIANT(w->o != NULL);
    SHL_ERR(shl_ns_make(&w->target, w->o->db != NULL ? w->o->db : db, w->o->coll, st));
    SHL_ERR(db_check_user_write_ns(&w->target, st));
    SHL_ERR(db_uwb_check(op, w->target.full, st));
    SHL_ERR(w->o->is_merge ? merge_begin(w, st) : out_begin(w, st));
done:
    if (ret != 0) {
        db_agg_out_destroy(w);
        w = NULL;
    }
    *out = w;
    return ret;
}

int
db_agg_out_write(db_agg_out_t *w, const bson_t *docs, shl_status_t *st)
{
    if (w->o->is_merge) {
        return merge_write(w, docs, st);
    }
    return insert_all(w->op, w->target.db, w->tmp, docs, w->bypass, st);
}

int
db_agg_out_commit(db_agg_out_t *w, shl_status_t *st)
{
    return w->o->is_merge ? 0 : out_commit(w, st);
}

void
db_agg_out_destroy(db_agg_out_t *w)
{
    if (w == NULL) {
        return;
    }
    if (w->tmp[0] != '\0') {
        /* Not committed: the temporary collection goes (even after a kill or timeout). */
        shl_status_t ignored = SHL_STATUS_INIT;
        bson_t cmd = BSON_INITIALIZER, reply;
        BSON_APPEND_UTF8(&cmd, "drop", w->tmp);
        (void)run_command(w->op, w->target.db, &cmd, &reply, &ignored);
        shl_status_clear(&ignored);
        bson_destroy(&cmd);
        bson_destroy(&reply);
    }
    bson_free(w);
}
