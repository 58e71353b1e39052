/*
 * views.c -- read-only views: definitions stored in <db>.system.views (one document per view,
 * {_id: "db.view", viewOn, pipeline[, collation]}, written by the node's own insert/update/
 * delete so they replicate and journal like any document), their resolution into the
 * collection and pipeline they read, and the rewrites that run find / count / distinct on a
 * view as an aggregate (MongoDB's query_request_conversion). See docs/design/views.md.
 */
#include <string.h>

#include "base/str.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "bson/collation.h"
#include "db/db_private.h"
#include "db/storage_api.h"
#include "db/txn_participant.h"
#include "db/views.h"
#include "net/command_args.h"
#include "query/view_rewrite.h"

#define VIEWS_COLL "system.views"

/* "<db>.system.views" into 'out'; false when it does not fit (no such namespace then). */
static bool
views_ns(const char *db, char *out, size_t n)
{
    /* Per find on every collection: no format machinery. */
    size_t dl = strlen(db), cl = sizeof(VIEWS_COLL) - 1;
    bool fits = dl + 1 + cl < n;

    if (fits) {
        memcpy(out, db, dl);
        out[dl] = '.';
        memcpy(out + dl + 1, VIEWS_COLL, cl + 1);
    }
    return fits;
}

static void
append_at(bson_t *arr, uint32_t i, const bson_t *doc)
{
    char k[16];
    const char *kp;
    bson_uint32_to_string(i, &kp, k, sizeof(k));
    bson_append_document(arr, kp, -1, doc);
}

int
db_view_get(shl_op_ctx_t *op, const char *ns, bson_t *def, bool *found, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    char vns[SHL_NS_MAX + 1], db[SHL_NS_MAX + 1];
    const char *dot = strchr(ns, '.');
    shl_collection_t *c = NULL;
    shl_storage_txn_t *txn = NULL;
    bson_t idq = BSON_INITIALIZER;
    bson_iter_t idit;
    const bson_value_t *id;

    bson_init(def);
    *found = false;
    {
        size_t dl = dot == NULL ? 0 : (size_t)(dot - ns);
        dl = dl < sizeof(db) ? dl : sizeof(db) - 1;
        memcpy(db, ns, dl);
        db[dl] = '\0';
    }
    if (!views_ns(db, vns, sizeof(vns))) {
        goto done;
    }
    /* Most databases have no views: no snapshot. No collection lock either: a reader may
     * already hold its own collection's (a $lookup of a view), and locks are not recursive;
     * the catalog reference keeps the definitions' collection valid, as env_open's plans. */
    c = shl_catalog_get(node->eng, vns);
    if (c == NULL) {
        goto done;
    }
    BSON_APPEND_UTF8(&idq, "_id", ns);
    bson_iter_init_find(&idit, &idq, "_id");
    id = bson_iter_value(&idit);
    bson_destroy(def);
    if (db_txn_storage(op) != NULL) {
        ret = shl_doc_find_by_id(db_txn_storage(op), c, id, def, NULL, found, st);
    } else {
        ret = shl_storage_txn_begin(node->eng, NULL, &txn, st);
        if (ret != 0) {
            bson_init(def);
            goto done;
        }
        ret = shl_doc_find_by_id(txn, c, id, def, NULL, found, st);
    }
done:
    bson_destroy(&idq);
    shl_storage_txn_abort(txn);
    shl_collection_release(c);
    return ret;
}

void
db_view_resolved_cleanup(db_view_resolved_t *r)
{
    bson_destroy(&r->pipeline);
    bson_destroy(&r->collation);
}

/*
 * Follow viewOn from 'ns' down to a collection: defs[0] is 'ns''s definition. 'extra' (may
 * be NULL) is a definition not stored yet: {_id, viewOn} of 'ns' itself (create, collMod).
 */
static int
view_chain(shl_op_ctx_t *op, const char *ns, const bson_t *extra, bson_t *defs, size_t *ndefs,
           char *bottom, shl_status_t *st)
{
    int ret = 0;
    char cur[SHL_NS_MAX + 1];
    const char *dot = strchr(ns, '.');
    int dblen = dot == NULL ? 0 : (int)(dot - ns);

    *ndefs = 0;
    shl_str_copy(cur, sizeof(cur), ns);
    for (;;) {
        bool found = false;
        bson_iter_t it;
        if (extra != NULL && *ndefs > 0 && strcmp(cur, ns) == 0) {
            /* The new definition leads back to itself. */
            SHL_FAIL(st, SHL_CODE_GRAPH_CONTAINS_CYCLE, "View cycle detected: %s", cur);
        }
        if (extra != NULL && *ndefs == 0) {
            bson_copy_to(extra, &defs[0]);
            found = true;
        } else {
            SHL_ERR(db_view_get(op, cur, &defs[*ndefs], &found, st));
        }
        if (!found) {
            bson_destroy(&defs[*ndefs]);
            break;
        }
        (*ndefs)++;
        for (size_t i = 0; i + 1 < *ndefs; i++) {
            bson_iter_t a;
            if (bson_iter_init_find(&a, &defs[i], "_id") && strcmp(bson_iter_utf8(&a, NULL), cur) == 0) {
                SHL_FAIL(st, SHL_CODE_GRAPH_CONTAINS_CYCLE, "View cycle detected: %s", cur);
            }
        }
        if (*ndefs > DB_VIEW_MAX_DEPTH) {
            SHL_FAIL(st, SHL_CODE_VIEW_DEPTH_LIMIT_EXCEEDED,
                     "View depth too deep or view cycle detected; maximum depth is %d",
                     DB_VIEW_MAX_DEPTH);
        }
        if (!bson_iter_init_find(&it, &defs[*ndefs - 1], "viewOn") || !BSON_ITER_HOLDS_UTF8(&it)) {
            SHL_FAIL(st, SHL_CODE_INVALID_VIEW_DEFINITION, "invalid view definition: %s", cur);
        }
        {
            int w = snprintf(cur, sizeof(cur), "%.*s.%s", dblen, ns, bson_iter_utf8(&it, NULL));
            if (w < 0 || (size_t)w >= sizeof(cur)) {
                SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Namespace too long: viewOn of %s", cur);
            }
        }
    }
    shl_str_copy(bottom, SHL_NS_MAX + 1, cur);
done:
    return ret;
}

static void
defs_destroy(bson_t *defs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bson_destroy(&defs[i]);
    }
}

int
db_view_resolve(shl_op_ctx_t *op, const shl_ns_t *ns, db_view_resolved_t *out, bool *is_view,
                shl_status_t *st)
{
    int ret = 0;
    bson_t defs[DB_VIEW_MAX_DEPTH + 1];
    size_t n = 0;
    uint32_t k = 0;
    bson_iter_t it;

    *is_view = false;
    memset(out, 0, sizeof(*out));
    bson_init(&out->pipeline);
    bson_init(&out->collation);
    SHL_ERR(view_chain(op, ns->full, NULL, defs, &n, out->ns, st));
    *is_view = n > 0;
    /* The innermost view's stages run first. */
    for (size_t i = n; i > 0; i--) {
        shl_view_append_stages(&defs[i - 1], "pipeline", &out->pipeline, &k);
    }
    if (n > 0 && bson_iter_init_find(&it, &defs[0], "collation") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t c;
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&c, data, len);
        bson_destroy(&out->collation);
        bson_copy_to(&c, &out->collation);
        out->has_collation = true;
    }
done:
    defs_destroy(defs, n);
    return ret;
}

void
db_view_resolved_append(const db_view_resolved_t *r, bson_t *out)
{
    bson_t rv;
    BSON_APPEND_DOCUMENT_BEGIN(out, "resolvedView", &rv);
    BSON_APPEND_UTF8(&rv, "ns", r->ns);
    BSON_APPEND_ARRAY(&rv, "pipeline", &r->pipeline);
    if (r->has_collation) {
        BSON_APPEND_DOCUMENT(&rv, "collation", &r->collation);
    }
    bson_append_document_end(out, &rv);
}

int
db_check_write_ns(shl_op_ctx_t *op, const shl_ns_t *ns, shl_status_t *st)
{
    int ret = 0;

    if (op->conn == NULL && strcmp(ns->coll, VIEWS_COLL) == 0) {
        goto done; /* this node's own definition writes */
    }
    SHL_ERR(db_check_user_write_ns(ns, st));
    SHL_ERR(db_refuse_view(op, ns, st));
done:
    return ret;
}

int
db_refuse_view(shl_op_ctx_t *op, const shl_ns_t *ns, shl_status_t *st)
{
    int ret = 0;
    bson_t def = BSON_INITIALIZER;
    bool found = false;

    SHL_ERR(db_view_get(op, ns->full, &def, &found, st));
    if (found) {
        SHL_FAIL(st, SHL_CODE_COMMAND_NOT_SUPPORTED_ON_VIEW,
                 "Namespace %s is a view, not a collection", ns->full);
    }
done:
    bson_destroy(&def);
    return ret;
}

/* ---------------------------------------------------------------- create, collMod, drop */

/* Options a view cannot have (MongoDB's create command with viewOn). */
static const char *const collection_only[] = {
    "capped", "autoIndexId", "idIndex", "size", "max", "storageEngine", "validator",
    "validationLevel", "validationAction", "indexOptionDefaults", "timeseries",
    "clusteredIndex", "expireAfterSeconds", "changeStreamPreAndPostImages", "encryptedFields",
    NULL};

/* Validate a view's pipeline: an array of stage documents, no output or change stream stage. */
static int
check_view_pipeline(const bson_t *pipeline, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    shl_pipeline_t *pl = NULL;

    bson_iter_init(&it, pipeline);
    while (shl_iter_next(&it)) {
        bson_iter_t stage;
        const char *name;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "Each element of the 'pipeline' array must be an object");
        }
        bson_iter_recurse(&it, &stage);
        if (!shl_iter_next(&stage)) {
            continue; /* the parse below reports it */
        }
        name = bson_iter_key(&stage);
        if (strcmp(name, "$out") == 0 || strcmp(name, "$merge") == 0 ||
            strcmp(name, "$changeStream") == 0) {
            SHL_FAIL(st, SHL_CODE_OPTION_NOT_SUPPORTED_ON_VIEW,
                     "%s cannot be used in a view definition", name);
        }
    }
    SHL_ERR(shl_pipeline_parse(pipeline, NULL, &pl, st));
done:
    if (pl != NULL) {
        shl_pipeline_destroy(pl);
    }
    return ret;
}

/*
 * Parse and check a definition's viewOn / pipeline / collation from 'cmd' (create or
 * collMod, which has both) into def {_id, viewOn, pipeline[, collation]}; 'keep_collation' (may be NULL) is
 * the collation a collMod keeps.
 */
static int
view_definition(shl_op_ctx_t *op, const shl_ns_t *ns, const bson_t *cmd,
                const bson_t *keep_collation, bson_t *def, shl_status_t *st)
{
    int ret = 0;
    const char *view_on = NULL;
    bool found = false, has_pipeline = false, has_coll = false;
    bson_t pipeline = BSON_INITIALIZER, chain[DB_VIEW_MAX_DEPTH + 1], under = BSON_INITIALIZER;
    size_t nchain = 0;
    char bottom[SHL_NS_MAX + 1], on_ns[SHL_NS_MAX + 1];
    shl_collator_t *coll = NULL, *under_coll = NULL;
    bson_iter_t it;

    bson_init(def);
    SHL_ERR(shl_cmd_get_string(cmd, "viewOn", &view_on, &found, st));
    if (!found || view_on[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "'viewOn' cannot be empty");
    }
    SHL_ERR(shl_cmd_get_array(cmd, "pipeline", &pipeline, &has_pipeline, st));
    SHL_ERR(check_view_pipeline(&pipeline, st));
    SHL_ERR(db_cmd_collator(cmd, "collation", &coll, &has_coll, st));
    if (!has_coll && keep_collation != NULL && !bson_empty(keep_collation)) {
        SHL_ERR(shl_collator_new(keep_collation, &coll, st));
    }
    BSON_APPEND_UTF8(def, "_id", ns->full);
    BSON_APPEND_UTF8(def, "viewOn", view_on);
    BSON_APPEND_ARRAY(def, "pipeline", &pipeline);
    if (coll != NULL) {
        shl_collator_append_spec(def, "collation", coll);
    }
    /* A view on a view has its collation; no cycle, no deeper than 20. */
    {
        int w = snprintf(on_ns, sizeof(on_ns), "%s.%s", ns->db, view_on);
        if (w < 0 || (size_t)w >= sizeof(on_ns)) {
            SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid namespace: viewOn '%s' is too long",
                     view_on);
        }
    }
    SHL_ERR(db_view_get(op, on_ns, &under, &found, st));
    if (found) {
        if (bson_iter_init_find(&it, &under, "collation") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            SHL_ERR(shl_collator_from_iter(&it, "collation", &under_coll, st));
        }
        if (!shl_collator_equal(coll, under_coll)) {
            SHL_FAIL(st, SHL_CODE_OPTION_NOT_SUPPORTED_ON_VIEW,
                     "View %s has a collation that does not match the collation of view %s",
                     ns->full, on_ns);
        }
    }
    SHL_ERR(view_chain(op, ns->full, def, chain, &nchain, bottom, st));
done:
    defs_destroy(chain, nchain);
    bson_destroy(&under);
    shl_collator_release(coll);
    shl_collator_release(under_coll);
    return ret;
}

int
db_view_create(shl_op_ctx_t *op, const shl_ns_t *ns, const bson_t *cmd, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    bson_t def = BSON_INITIALIZER, old = BSON_INITIALIZER, ins = BSON_INITIALIZER, docs, reply;
    bool found = false;
    shl_collection_t *c;

    bson_init(&reply);
    for (size_t i = 0; collection_only[i] != NULL; i++) {
        if (bson_has_field(cmd, collection_only[i])) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "option not supported on a view: %s",
                     collection_only[i]);
        }
    }
    bson_destroy(&def);
    SHL_ERR(view_definition(op, ns, cmd, NULL, &def, st));
    c = shl_catalog_get(node->eng, ns->full);
    if (c != NULL) {
        shl_collection_release(c);
        SHL_FAIL(st, SHL_CODE_NAMESPACE_EXISTS, "Namespace %s already exists", ns->full);
    }
    SHL_ERR(db_view_get(op, ns->full, &old, &found, st));
    if (found) {
        /* MongoDB 7.0: creating an existing view with the same definition succeeds. */
        if (!bson_equal(&old, &def)) {
            SHL_FAIL(st, SHL_CODE_NAMESPACE_EXISTS, "Namespace %s already exists", ns->full);
        }
        goto done;
    }
    BSON_APPEND_UTF8(&ins, "insert", VIEWS_COLL);
    BSON_APPEND_ARRAY_BEGIN(&ins, "documents", &docs);
    BSON_APPEND_DOCUMENT(&docs, "0", &def);
    bson_append_array_end(&ins, &docs);
    bson_destroy(&reply);
    SHL_ERR(db_run_command(op, ns->db, &ins, &reply, st));
done:
    bson_destroy(&def);
    bson_destroy(&old);
    bson_destroy(&ins);
    bson_destroy(&reply);
    return ret;
}

int
db_view_drop(shl_op_ctx_t *op, const shl_ns_t *ns, bool *dropped, shl_status_t *st)
{
    int ret = 0;
    bson_t def, del = BSON_INITIALIZER, arr, stmt, q, reply = BSON_INITIALIZER;
    bool found = false;

    *dropped = false;
    SHL_ERR(db_view_get(op, ns->full, &def, &found, st));
    if (!found) {
        goto done;
    }
    BSON_APPEND_UTF8(&del, "delete", VIEWS_COLL);
    BSON_APPEND_ARRAY_BEGIN(&del, "deletes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &stmt);
    BSON_APPEND_DOCUMENT_BEGIN(&stmt, "q", &q);
    BSON_APPEND_UTF8(&q, "_id", ns->full);
    bson_append_document_end(&stmt, &q);
    BSON_APPEND_INT32(&stmt, "limit", 1);
    bson_append_document_end(&arr, &stmt);
    bson_append_array_end(&del, &arr);
    bson_destroy(&reply);
    SHL_ERR(db_run_command(op, ns->db, &del, &reply, st));
    *dropped = true;
done:
    bson_destroy(&def);
    bson_destroy(&del);
    bson_destroy(&reply);
    return ret;
}

/* Command fields of collMod that are not options (generic arguments). */
static bool
coll_mod_generic(const char *k)
{
    return strcmp(k, "collMod") == 0 || strcmp(k, "writeConcern") == 0 || k[0] == '$' ||
           strcmp(k, "comment") == 0 || strcmp(k, "lsid") == 0 || strcmp(k, "txnNumber") == 0 ||
           strcmp(k, "maxTimeMS") == 0 || strcmp(k, "databaseVersion") == 0 ||
           strcmp(k, "shardVersion") == 0 || strcmp(k, "apiVersion") == 0 ||
           strcmp(k, "apiStrict") == 0 || strcmp(k, "apiDeprecationErrors") == 0;
}

int
db_view_coll_mod(shl_op_ctx_t *op, const shl_ns_t *ns, const bson_t *cmd, bool *handled,
                 shl_status_t *st)
{
    int ret = 0;
    bson_t old, def = BSON_INITIALIZER, upd = BSON_INITIALIZER, arr, stmt, q, reply,
                keep = BSON_INITIALIZER;
    bool found = false, has_on = bson_has_field(cmd, "viewOn"),
         has_pl = bson_has_field(cmd, "pipeline");
    bson_iter_t it;

    bson_init(&reply);
    *handled = false;
    SHL_ERR(db_view_get(op, ns->full, &old, &found, st));
    if (!found) {
        if (has_on || has_pl) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "option not supported on a non-view collection: %s",
                     has_on ? "viewOn" : "pipeline");
        }
        goto done;
    }
    *handled = true;
    bson_iter_init(&it, cmd);
    while (shl_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (!coll_mod_generic(k) && strcmp(k, "viewOn") != 0 && strcmp(k, "pipeline") != 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "option not supported on a view: %s", k);
        }
    }
    if (!has_on || !has_pl) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "Must specify both 'viewOn' and 'pipeline' when applying collMod to a view");
    }
    if (bson_iter_init_find(&it, &old, "collation") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&it, &len, &data);
        bson_destroy(&keep);
        bson_init_static(&keep, data, len);
    }
    bson_destroy(&def);
    SHL_ERR(view_definition(op, ns, cmd, &keep, &def, st));
    BSON_APPEND_UTF8(&upd, "update", VIEWS_COLL);
    BSON_APPEND_ARRAY_BEGIN(&upd, "updates", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &stmt);
    BSON_APPEND_DOCUMENT_BEGIN(&stmt, "q", &q);
    BSON_APPEND_UTF8(&q, "_id", ns->full);
    bson_append_document_end(&stmt, &q);
    BSON_APPEND_DOCUMENT(&stmt, "u", &def);
    bson_append_document_end(&arr, &stmt);
    bson_append_array_end(&upd, &arr);
    bson_destroy(&reply);
    SHL_ERR(db_run_command(op, ns->db, &upd, &reply, st));
done:
    bson_destroy(&old);
    bson_destroy(&def);
    bson_destroy(&upd);
    bson_destroy(&reply);
    return ret;
}

/* ---------------------------------------------------------------- listCollections */

int
db_view_list(shl_op_ctx_t *op, const char *db, bson_t *entries, uint32_t *n, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    bson_t find = BSON_INITIALIZER, reply = BSON_INITIALIZER, batch;
    char vns[SHL_NS_MAX + 1];
    bson_iter_t it, sub;
    shl_collection_t *c;

    if (!views_ns(db, vns, sizeof(vns))) {
        goto done;
    }
    c = shl_catalog_get(node->eng, vns);
    if (c == NULL) {
        goto done;
    }
    shl_collection_release(c);
    BSON_APPEND_UTF8(&find, "find", VIEWS_COLL);
    BSON_APPEND_INT64(&find, "batchSize", INT32_MAX);
    bson_destroy(&reply);
    SHL_ERR(db_run_command(op, db, &find, &reply, st));
    if (!bson_iter_init(&it, &reply) || !bson_iter_find_descendant(&it, "cursor.firstBatch", &sub) ||
        !BSON_ITER_HOLDS_ARRAY(&sub)) {
        goto done;
    }
    {
        const uint8_t *data;
        uint32_t len;
        bson_iter_array(&sub, &len, &data);
        bson_init_static(&batch, data, len);
    }
    bson_iter_init(&it, &batch);
    while (shl_iter_next(&it)) {
        bson_t def, e = BSON_INITIALIZER, opts, info;
        bson_iter_t f;
        const uint8_t *data;
        uint32_t len;
        const char *id;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            continue;
        }
        bson_iter_document(&it, &len, &data);
        bson_init_static(&def, data, len);
        if (!bson_iter_init_find(&f, &def, "_id") || !BSON_ITER_HOLDS_UTF8(&f)) {
            continue;
        }
        id = bson_iter_utf8(&f, NULL);
        if (strncmp(id, db, strlen(db)) != 0 || id[strlen(db)] != '.') {
            continue;
        }
        BSON_APPEND_UTF8(&e, "name", id + strlen(db) + 1);
        BSON_APPEND_UTF8(&e, "type", "view");
        {
            BSON_APPEND_DOCUMENT_BEGIN(&e, "options", &opts);
            bson_iter_init(&f, &def);
            while (shl_iter_next(&f)) {
                if (strcmp(bson_iter_key(&f), "_id") != 0) {
                    bson_append_iter(&opts, NULL, 0, &f);
                }
            }
            bson_append_document_end(&e, &opts);
            BSON_APPEND_DOCUMENT_BEGIN(&e, "info", &info);
            BSON_APPEND_BOOL(&info, "readOnly", true);
            bson_append_document_end(&e, &info);
        }
        append_at(entries, (*n)++, &e);
        bson_destroy(&e);
    }
done:
    bson_destroy(&find);
    bson_destroy(&reply);
    return ret;
}

/* ---------------------------------------------------------------- reads as aggregates */

int
db_view_aggregate_cmd(const bson_t *cmd, const db_view_resolved_t *r, bson_t *out,
                      shl_status_t *st)
{
    const char *dot = strchr(r->ns, '.');
    return shl_view_aggregate_cmd(cmd, dot == NULL ? r->ns : dot + 1, &r->pipeline,
                                  r->has_collation ? &r->collation : NULL, out, st);
}
