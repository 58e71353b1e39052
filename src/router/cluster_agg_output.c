/*
 * cluster_agg_output.c -- $out and $merge of an aggregation whose last stages run at the
 * router (a pipeline split over several shards, or $documents): the merged documents are
 * written through the router's own commands, so they are routed like a user's writes. $out
 * fills a temporary collection on the target database's primary shard (with the target's
 * options and indexes, named as a data node's $out names it) and renames it over the target
 * with dropTarget, as MongoDB does; $merge sends batched updates (upserts) or inserts keyed
 * by its 'on' fields, targeted by the target's shard key. Issue 6 item 3 ("reads").
 */
#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/command.h"
#include "router/cluster_routing.h"
#include "router/router_private.h"

/* Statements per write command, and the size at which a command is sent early. */
#define OUT_BATCH_DOCS 1000
#define OUT_BATCH_BYTES (8 * 1024 * 1024)

struct router_agg_out {
    shl_op_ctx_t *op;
    const shl_pipeline_t *p; /* the parsed pipeline ending with the stage (borrowed) */
    const shl_pipeline_output_t *o;
    shl_ns_t target;
    bool bypass;
    /* $out */
    char tmp[64];
    bool tmp_created;
    /* $merge: the 'on' fields in effect (owned) */
    char **on;
    size_t non;
};

/*
 * run_command --
 *     Run the router's command 'cmd' on database 'db' as an internal operation (no session),
 *     under op's deadline and kill flag ('cleanup': neither, so a temporary collection is
 *     dropped even after the operation timed out). A reply with writeErrors becomes its first
 *     error's status. *reply is always initialised.
 */
static int
run_command_ex(shl_op_ctx_t *op, bool cleanup, const char *db, const bson_t *cmd, bson_t *reply,
               shl_status_t *st)
{
    int ret = 0;
    shl_op_ctx_t sub;
    const shl_command_t *c;
    bson_iter_t it;
    bson_t full = BSON_INITIALIZER;
    const char *name;

    bson_init(reply);
    bson_iter_init(&it, cmd);
    shl_iter_next(&it);
    name = shl_iter_key(&it);
    c = shl_command_registry_find(op->svc->commands, name);
    SHL_INVARIANT(c != NULL);
    bson_concat(&full, cmd);
    if (op->has_write_concern && strncmp(name, "list", 4) != 0) {
        /* The writes are the aggregate's: they wait for its write concern. */
        BSON_APPEND_DOCUMENT(&full, "writeConcern", &op->write_concern);
    }
    SHL_ERR(shl_op_ctx_init(&sub, op->svc, NULL, &full, db, st));
    sub.deadline_us = cleanup ? 0 : op->deadline_us;
    if (!cleanup) {
        SHL_ERR(shl_op_check_interrupt(op, st));
    }
    SHL_ERR(c->run(&sub, &full, reply, st));
    SHL_ERR(shl_status_from_write_errors(reply, st));
done:
    bson_destroy(&full);
    return ret;
}

static int
run_command(shl_op_ctx_t *op, const char *db, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return run_command_ex(op, false, db, cmd, reply, st);
}

/* The documents of the first batch of a cursor reply (the router's listCollections and
 * listIndexes drain their cursors, so it is all of them), as a static view. */
static bool
first_batch(const bson_t *reply, bson_t *out)
{
    bson_iter_t it, b;
    const uint8_t *data;
    uint32_t len;

    if (!bson_iter_init_find(&it, reply, "cursor") || !bson_iter_recurse(&it, &b) ||
        !bson_iter_find(&b, "firstBatch") || !BSON_ITER_HOLDS_ARRAY(&b)) {
        return false;
    }
    bson_iter_array(&b, &len, &data);
    return bson_init_static(out, data, len);
}

/* A static view of the document 'it' holds. */
static void
iter_doc(const bson_iter_t *it, bson_t *out)
{
    const uint8_t *data;
    uint32_t len;
    bson_iter_document(it, &len, &data);
    bson_init_static(out, data, len);
}

/*
 * list_indexes --
 *     The target's index specs into *specs (an array; empty when the collection does not
 *     exist). *specs is always initialised.
 */
static int
list_indexes(router_agg_out_t *w, bson_t *specs, shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, batch;
    int ret = 0;

    bson_init(specs);
    BSON_APPEND_UTF8(&cmd, "listIndexes", w->target.coll);
    bson_destroy(&reply);
    ret = run_command(w->op, w->target.db, &cmd, &reply, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        shl_status_clear(st);
        ret = 0;
        goto done;
    }
    SHL_ERR(ret);
    if (first_batch(&reply, &batch)) {
        bson_destroy(specs);
        bson_copy_to(&batch, specs);
    }
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* ---------------------------------------------------------------- $out */

static int
out_begin(router_agg_out_t *w, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(w->op);
    shl_routing_table_t *rt = NULL;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, batch, filter, specs, arr;
    bson_iter_t it, f;
    uint8_t rnd[16];
    uint32_t n = 0;
    int ret = 0;

    bson_init(&specs);
    SHL_ERR(shl_catalog_cache_get_collection(r->cache, w->target.full, &rt, st));
    if (rt != NULL) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_CANNOT_BE_SHARDED,
                 "$out cannot output to a sharded collection: %s", w->target.full);
    }
    /* The target's options: the temporary collection gets them (idIndex and uuid aside). */
    BSON_APPEND_INT32(&cmd, "listCollections", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    BSON_APPEND_UTF8(&filter, "name", w->target.coll);
    bson_append_document_end(&cmd, &filter);
    bson_destroy(&reply);
    SHL_ERR(run_command(w->op, w->target.db, &cmd, &reply, st));
    shl_uuid_gen(rnd);
    snprintf(w->tmp, sizeof(w->tmp), "tmp.agg_out.%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1],
             rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    bson_reinit(&cmd);
    BSON_APPEND_UTF8(&cmd, "create", w->tmp);
    if (first_batch(&reply, &batch) && bson_iter_init(&it, &batch) && shl_iter_next(&it) &&
        BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t info, opts;
        iter_doc(&it, &info);
        if (bson_iter_init_find(&f, &info, "type") && BSON_ITER_HOLDS_UTF8(&f) &&
            strcmp(bson_iter_utf8(&f, NULL), "view") == 0) {
            SHL_FAIL(st, SHL_CODE_COMMAND_NOT_SUPPORTED_ON_VIEW,
                     "Cannot write to a view: %s is a view, not a collection", w->target.full);
        }
        if (bson_iter_init_find(&f, &info, "options") && BSON_ITER_HOLDS_DOCUMENT(&f)) {
            bson_iter_t o;
            iter_doc(&f, &opts);
            bson_iter_init(&o, &opts);
            while (shl_iter_next(&o)) {
                const char *k = shl_iter_key(&o);
                if (strcmp(k, "capped") == 0 && bson_iter_as_bool(&o)) {
                    SHL_FAIL(st, 17152, "namespace '%s' is capped so it can't be used for $out",
                             w->target.full);
                }
                if (strcmp(k, "idIndex") != 0 && strcmp(k, "uuid") != 0) {
                    bson_append_iter(&cmd, k, -1, &o);
                }
            }
        }
    }
    bson_destroy(&specs);
    SHL_ERR(list_indexes(w, &specs, st));
    bson_destroy(&reply);
    SHL_ERR(run_command(w->op, w->target.db, &cmd, &reply, st));
    w->tmp_created = true;
    bson_reinit(&cmd);
    BSON_APPEND_UTF8(&cmd, "createIndexes", w->tmp);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &arr);
    bson_iter_init(&it, &specs);
    while (shl_iter_next(&it)) {
        bson_t spec, copy = BSON_INITIALIZER;
        char key[16];
        const char *kp;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            continue;
        }
        iter_doc(&it, &spec);
        if (bson_iter_init_find(&f, &spec, "name") && BSON_ITER_HOLDS_UTF8(&f) &&
            strcmp(bson_iter_utf8(&f, NULL), "_id_") == 0) {
            bson_destroy(&copy);
            continue;
        }
        bson_copy_to_excluding_noinit(&spec, &copy, "ns", NULL);
        bson_uint32_to_string(n++, &kp, key, sizeof(key));
        BSON_APPEND_DOCUMENT(&arr, kp, &copy);
        bson_destroy(&copy);
    }
    bson_append_array_end(&cmd, &arr);
    if (n > 0) {
        bson_destroy(&reply);
        SHL_ERR(run_command(w->op, w->target.db, &cmd, &reply, st));
    }
done:
    if (rt != NULL) {
        shl_routing_table_release(rt);
    }
    bson_destroy(&cmd);
    bson_destroy(&reply);
    bson_destroy(&specs);
    return ret;
}

/* Insert the array 'docs' into the target's database's 'coll' in ordered batches. */
static int
insert_docs(router_agg_out_t *w, const char *coll, const bson_t *docs, shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, arr;
    bson_iter_t it;
    bool more;
    int ret = 0;

    bson_iter_init(&it, docs);
    more = shl_iter_next(&it);
    while (more) {
        uint32_t n = 0;
        bson_reinit(&cmd);
        BSON_APPEND_UTF8(&cmd, "insert", coll);
        BSON_APPEND_BOOL(&cmd, "ordered", true);
        if (w->bypass) {
            BSON_APPEND_BOOL(&cmd, "bypassDocumentValidation", true);
        }
        BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &arr);
        while (more && n < OUT_BATCH_DOCS && arr.len < OUT_BATCH_BYTES) {
            char key[16];
            const char *kp;
            bson_uint32_to_string(n++, &kp, key, sizeof(key));
            bson_append_iter(&arr, kp, -1, &it);
            more = shl_iter_next(&it);
        }
        bson_append_array_end(&cmd, &arr);
        bson_destroy(&reply);
        SHL_ERR(run_command(w->op, w->target.db, &cmd, &reply, st));
    }
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

static int
out_commit(router_agg_out_t *w, shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    char tmp_full[SHL_NS_MAX + 80];
    int ret = 0;

    snprintf(tmp_full, sizeof(tmp_full), "%s.%s", w->target.db, w->tmp);
    BSON_APPEND_UTF8(&cmd, "renameCollection", tmp_full);
    BSON_APPEND_UTF8(&cmd, "to", w->target.full);
    BSON_APPEND_BOOL(&cmd, "dropTarget", true);
    bson_destroy(&reply);
    SHL_ERR(run_command(w->op, "admin", &cmd, &reply, st));
    w->tmp_created = false;
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* ---------------------------------------------------------------- $merge */

/* Whether the index 'spec' is unique (not partial, no collation) with exactly the 'on' keys. */
static bool
index_supports_on(const bson_t *spec, char **on, size_t non)
{
    bson_iter_t it, k;
    size_t n = 0;

    if (!bson_iter_init_find(&it, spec, "unique") || !bson_iter_as_bool(&it) ||
        bson_has_field(spec, "partialFilterExpression") || bson_has_field(spec, "collation") ||
        !bson_iter_init_find(&it, spec, "key") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &k)) {
        return false;
    }
    while (shl_iter_next(&k)) {
        bool found = false;
        for (size_t i = 0; i < non; i++) {
            found = found || strcmp(on[i], shl_iter_key(&k)) == 0;
        }
        if (!found || BSON_ITER_HOLDS_UTF8(&k)) { /* hashed, text, ... are not unique keys */
            return false;
        }
        n++;
    }
    return n == non;
}

static bool
has_on(const router_agg_out_t *w, const char *path)
{
    for (size_t i = 0; i < w->non; i++) {
        if (strcmp(w->on[i], path) == 0) {
            return true;
        }
    }
    return false;
}

static void
add_on(router_agg_out_t *w, const char *path)
{
    if (has_on(w, path)) {
        return;
    }
    w->on = bson_realloc(w->on, (w->non + 2) * sizeof(char *));
    w->on[w->non++] = bson_strdup(path);
    w->on[w->non] = NULL;
}

static int
merge_begin(router_agg_out_t *w, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(w->op);
    shl_routing_table_t *rt = NULL;
    bson_t specs = BSON_INITIALIZER;
    bson_iter_t it;
    bool supported;
    int ret = 0;

    SHL_ERR(shl_catalog_cache_get_collection(r->cache, w->target.full, &rt, st));
    if (rt != NULL && !w->o->on_given) {
        /* A sharded target's default 'on' is _id and the shard key, as MongoDB's. */
        const shl_shard_key_pattern_t *kp = shl_routing_table_key_pattern(rt);
        add_on(w, "_id");
        for (size_t i = 0; i < kp->nfields; i++) {
            add_on(w, kp->paths[i]);
        }
        goto done;
    }
    for (size_t i = 0; i < w->o->non; i++) {
        add_on(w, w->o->on[i]);
    }
    if (rt != NULL) {
        /* Updates keyed by 'on' are routed by the shard key, so it must be part of it. */
        const shl_shard_key_pattern_t *kp = shl_routing_table_key_pattern(rt);
        for (size_t i = 0; i < kp->nfields; i++) {
            if (!has_on(w, kp->paths[i])) {
                SHL_FAIL(st, 51190,
                         "Cannot find index to verify that join fields will be unique: the "
                         "'on' fields of $merge into the sharded collection %s must include "
                         "its shard key field '%s'",
                         w->target.full, kp->paths[i]);
            }
        }
    }
    supported = w->non == 1 && strcmp(w->on[0], "_id") == 0;
    if (!supported) {
        bson_destroy(&specs);
        SHL_ERR(list_indexes(w, &specs, st));
        bson_iter_init(&it, &specs);
        while (!supported && shl_iter_next(&it)) {
            bson_t spec;
            if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                iter_doc(&it, &spec);
                supported = index_supports_on(&spec, w->on, w->non);
            }
        }
    }
    if (!supported) {
        SHL_FAIL(st, 51190, "Cannot find index to verify that join fields will be unique");
    }
done:
    if (rt != NULL) {
        shl_routing_table_release(rt);
    }
    bson_destroy(&specs);
    return ret;
}

/*
 * merge_prepare --
 *     The output document as written (*doc: with a new _id when _id is an 'on' field and the
 *     document has none, as MongoDB's $merge) and its 'on' values (*q). Both are initialised
 *     here. Errors: 51132 for a missing, null, undefined or array 'on' value.
 */
static int
merge_prepare(const router_agg_out_t *w, const bson_t *in, bson_t *doc, bson_t *q, shl_status_t *st)
{
    int ret = 0;

    bson_init(doc);
    bson_init(q);
    if (has_on(w, "_id") && !bson_has_field(in, "_id")) {
        bson_oid_t oid;
        shl_bson_oid_gen(&oid);
        BSON_APPEND_OID(doc, "_id", &oid);
    }
    bson_concat(doc, in);
    for (size_t i = 0; i < w->non; i++) {
        bson_iter_t d, f;
        if (!bson_iter_init(&d, doc) || !bson_iter_find_descendant(&d, w->on[i], &f) ||
            BSON_ITER_HOLDS_NULL(&f) || BSON_ITER_HOLDS_UNDEFINED(&f) ||
            BSON_ITER_HOLDS_ARRAY(&f)) {
            SHL_FAIL(st, 51132,
                     "$merge write error: 'on' field '%s' cannot be missing, null, undefined or "
                     "an array",
                     w->on[i]);
        }
        bson_append_value(q, w->on[i], -1, bson_iter_value(&f));
    }
done:
    return ret;
}

/* Append one update statement for 'doc' (keyed by 'q') to the array 'arr'. */
static int
append_update(const router_agg_out_t *w, const bson_t *doc, const bson_t *q, bool upsert,
              bson_t *arr, uint32_t n, shl_status_t *st)
{
    bson_t stmt, u, vars = BSON_INITIALIZER;
    char key[16];
    const char *kp;
    int ret = 0;

    if (w->o->when_matched == SHL_MERGE_PIPELINE) {
        bson_destroy(&vars);
        SHL_ERR(shl_pipeline_merge_vars(w->p, doc, &vars, st));
    }
    bson_uint32_to_string(n, &kp, key, sizeof(key));
    BSON_APPEND_DOCUMENT_BEGIN(arr, kp, &stmt);
    BSON_APPEND_DOCUMENT(&stmt, "q", q);
    switch (w->o->when_matched) {
    case SHL_MERGE_REPLACE:
        BSON_APPEND_DOCUMENT(&stmt, "u", doc);
        break;
    case SHL_MERGE_KEEP_EXISTING:
        BSON_APPEND_DOCUMENT_BEGIN(&stmt, "u", &u);
        BSON_APPEND_DOCUMENT(&u, "$setOnInsert", doc);
        bson_append_document_end(&stmt, &u);
        break;
    case SHL_MERGE_MERGE:
        BSON_APPEND_DOCUMENT_BEGIN(&stmt, "u", &u);
        BSON_APPEND_DOCUMENT(&u, "$set", doc);
        bson_append_document_end(&stmt, &u);
        break;
    case SHL_MERGE_PIPELINE:
        BSON_APPEND_ARRAY(&stmt, "u", w->o->update_pipeline);
        BSON_APPEND_DOCUMENT(&stmt, "c", &vars);
        break;
    case SHL_MERGE_FAIL:
        break;
    }
    BSON_APPEND_BOOL(&stmt, "upsert", upsert);
    BSON_APPEND_BOOL(&stmt, "multi", false);
    bson_append_document_end(arr, &stmt);
done:
    bson_destroy(&vars);
    return ret;
}

/* Send the update command 'cmd' with 'n' statements; *matched: its n. */
static int
send_updates(router_agg_out_t *w, bson_t *cmd, bson_t *arr, int64_t *matched, shl_status_t *st)
{
    bson_t reply = BSON_INITIALIZER;
    bson_iter_t it;
    int ret = 0;

    *matched = 0;
    bson_append_array_end(cmd, arr);
    bson_destroy(&reply);
    SHL_ERR(run_command(w->op, w->target.db, cmd, &reply, st));
    if (bson_iter_init_find(&it, &reply, "n") && BSON_ITER_HOLDS_NUMBER(&it)) {
        *matched = bson_iter_as_int64(&it);
    }
done:
    bson_destroy(&reply);
    return ret;
}

static void
start_updates(const router_agg_out_t *w, bson_t *cmd, bson_t *arr)
{
    bson_reinit(cmd);
    BSON_APPEND_UTF8(cmd, "update", w->target.coll);
    BSON_APPEND_BOOL(cmd, "ordered", true);
    if (w->bypass) {
        BSON_APPEND_BOOL(cmd, "bypassDocumentValidation", true);
    }
    BSON_APPEND_ARRAY_BEGIN(cmd, "updates", arr);
}

static int
no_match_error(shl_status_t *st)
{
    return shl_status_set(st, 13113,
                          "$merge could not find a matching document in the target collection "
                          "for at least one document in the source collection");
}

/*
 * merge_write --
 *     Apply whenMatched/whenNotMatched for each document of the array 'docs': whenMatched
 *     fail inserts them (a duplicate 'on' key is DuplicateKey); a pipeline with
 *     whenNotMatched insert updates one by one and inserts what matched nothing; every other
 *     mode sends ordered batches of updates (upserts for whenNotMatched insert), and
 *     whenNotMatched fail is 13113 when a batch matched fewer documents than it has.
 */
static int
merge_write(router_agg_out_t *w, const bson_t *docs, shl_status_t *st)
{
    const shl_pipeline_output_t *o = w->o;
    bson_t cmd = BSON_INITIALIZER, arr, inserts = BSON_INITIALIZER, doc, q;
    bson_iter_t it;
    bool one_by_one =
        o->when_matched == SHL_MERGE_PIPELINE && o->when_not_matched == SHL_MERGE_INSERT;
    bool upsert = o->when_not_matched == SHL_MERGE_INSERT && o->when_matched != SHL_MERGE_PIPELINE;
    uint32_t n = 0;
    int64_t matched;
    int ret = 0;

    bson_init(&doc);
    bson_init(&q);
    start_updates(w, &cmd, &arr);
    bson_iter_init(&it, docs);
    while (shl_iter_next(&it)) {
        bson_t in;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            continue;
        }
        iter_doc(&it, &in);
        bson_destroy(&doc);
        bson_destroy(&q);
        SHL_ERR(merge_prepare(w, &in, &doc, &q, st));
        if (o->when_matched == SHL_MERGE_FAIL) {
            char key[16];
            const char *kp;
            bson_uint32_to_string(n++, &kp, key, sizeof(key));
            BSON_APPEND_DOCUMENT(&inserts, kp, &doc);
            continue;
        }
        SHL_ERR(append_update(w, &doc, &q, upsert, &arr, n++, st));
        if (one_by_one) {
            SHL_ERR(send_updates(w, &cmd, &arr, &matched, st));
            if (matched == 0) {
                bson_t one = BSON_INITIALIZER;
                BSON_APPEND_DOCUMENT(&one, "0", &doc);
                ret = insert_docs(w, w->target.coll, &one, st);
                bson_destroy(&one);
                SHL_ERR(ret);
            }
            start_updates(w, &cmd, &arr);
            n = 0;
        } else if (n >= OUT_BATCH_DOCS || cmd.len + arr.len >= OUT_BATCH_BYTES) {
            SHL_ERR(send_updates(w, &cmd, &arr, &matched, st));
            if (o->when_not_matched == SHL_MERGE_NOT_MATCHED_FAIL && matched < n) {
                SHL_ERR(no_match_error(st));
            }
            start_updates(w, &cmd, &arr);
            n = 0;
        }
    }
    if (o->when_matched == SHL_MERGE_FAIL) {
        ret = insert_docs(w, w->target.coll, &inserts, st);
        if (ret == SHL_CODE_DUPLICATE_KEY) {
            SHL_FAIL(st, SHL_CODE_DUPLICATE_KEY,
                     "$merge with whenMatched: fail found an existing document with the same "
                     "values for the 'on' fields: %s",
                     st->reason);
        }
        SHL_ERR(ret);
    } else if (n > 0) {
        SHL_ERR(send_updates(w, &cmd, &arr, &matched, st));
        if (o->when_not_matched == SHL_MERGE_NOT_MATCHED_FAIL && matched < n) {
            SHL_ERR(no_match_error(st));
        }
    }
done:
    bson_destroy(&cmd);
    bson_destroy(&inserts);
    bson_destroy(&doc);
    bson_destroy(&q);
    return ret;
}

/* ---------------------------------------------------------------- entry points */

void
router_agg_out_locate(shl_router_t *r, const shl_pipeline_output_t *o, const char *db,
                      bool *sharded, char *primary, size_t n, shl_database_version_t *dbv)
{
    shl_cached_database_t info;
    shl_routing_table_t *rt = NULL;
    shl_status_t st = SHL_STATUS_INIT;
    char ns[SHL_NS_MAX + 1];
    const char *tdb = o->db != NULL ? o->db : db;

    *sharded = false;
    primary[0] = '\0';
    if (shl_catalog_cache_get_database(r->cache, tdb, &info, &st) != 0) {
        shl_status_clear(&st);
        return;
    }
    snprintf(primary, n, "%s", info.primary);
    *dbv = info.version;
    snprintf(ns, sizeof(ns), "%s.%s", tdb, o->coll);
    if (shl_catalog_cache_get_collection(r->cache, ns, &rt, &st) != 0) {
        shl_status_clear(&st);
        primary[0] = '\0'; /* unknown: the router writes */
        return;
    }
    if (rt != NULL) {
        *sharded = true;
        shl_routing_table_release(rt);
    }
}

int
router_agg_out_begin(shl_op_ctx_t *op, const shl_pipeline_t *p, const char *db, bool bypass,
                     router_agg_out_t **out, shl_status_t *st)
{
    router_agg_out_t *w = bson_malloc0(sizeof(*w));
    int ret = 0;

    *out = NULL;
    w->op = op;
    w->p = p;
    w->o = shl_pipeline_output(p);
    w->bypass = bypass;
    SHL_INVARIANT(w->o != NULL);
    if (op->has_autocommit && !op->autocommit) {
        SHL_FAIL(st, SHL_CODE_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                 "%s cannot be used in a transaction", w->o->is_merge ? "$merge" : "$out");
    }
    SHL_ERR(shl_ns_make(&w->target, w->o->db != NULL ? w->o->db : db, w->o->coll, st));
    if (w->o->is_merge) {
        SHL_ERR(merge_begin(w, st));
    } else {
        SHL_ERR(out_begin(w, st));
    }
    *out = w;
    w = NULL;
done:
    router_agg_out_destroy(w);
    return ret;
}

int
router_agg_out_write(router_agg_out_t *w, const bson_t *docs, shl_status_t *st)
{
    if (w->o->is_merge) {
        return merge_write(w, docs, st);
    }
    return insert_docs(w, w->tmp, docs, st);
}

int
router_agg_out_commit(router_agg_out_t *w, shl_status_t *st)
{
    if (w->o->is_merge) {
        return 0;
    }
    return out_commit(w, st);
}

void
router_agg_out_destroy(router_agg_out_t *w)
{
    if (w == NULL) {
        return;
    }
    if (w->tmp_created) {
        bson_t cmd = BSON_INITIALIZER, reply;
        shl_status_t ignored = SHL_STATUS_INIT;
        BSON_APPEND_UTF8(&cmd, "drop", w->tmp);
        /* Cleanup runs even past the deadline or after a kill. */
        (void)run_command_ex(w->op, true, w->target.db, &cmd, &reply, &ignored);
        shl_status_clear(&ignored);
        bson_destroy(&cmd);
        bson_destroy(&reply);
    }
    if (w->on != NULL) {
        bson_strfreev(w->on);
    }
    bson_free(w);
}
