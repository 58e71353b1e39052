/*
 * cmd_ddl.c -- collection and index DDL on a data node: create, drop, dropDatabase,
 * renameCollection, createIndexes, dropIndexes, collMod, with MongoDB 7.0's fields, errors and
 * replies. The storage catalog takes the collection locks exclusively (DDL excludes CRUD
 * on that collection only) and writes the oplog 'c' entries; here cursors on dropped or
 * renamed namespaces are killed and write concerns waited for.
 */
#include <string.h>

#include "bson/bson_compare.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/db_private.h"
#include "db/views.h"
#include "db/exec.h"
#include "db/index_kinds.h"
#include "db/txn_participant.h"
#include "db/sharding_hooks.h"
#include "db/storage_api.h"
#include "net/command_args.h"

/* Copy a command's options: every field but the first (the command name) and generic
 * arguments. */
static void
command_options(const bson_t *cmd, bson_t *out)
{
    bson_iter_t it;
    bool first = true;
    bson_init(out);
    bson_iter_init(&it, cmd);
    while (shl_iter_next(&it)) {
        if (first) {
            first = false;
            continue;
        }
        if (strcmp(shl_iter_key(&it), "collation") == 0) {
            /* Stored normalised (what listCollections shows); the simple one not at all. */
            shl_collator_t *c = NULL;
            shl_status_t ignored = SHL_STATUS_INIT;
            if (shl_collator_from_iter(&it, "collation", &c, &ignored) == 0 && c != NULL) {
                BSON_APPEND_DOCUMENT(out, "collation", shl_collator_spec(c));
            }
            shl_collator_release(c);
            continue;
        }
        if (!shl_cmd_is_generic_arg(shl_iter_key(&it))) {
            bson_append_iter(out, shl_iter_key(&it), -1, &it);
        }
    }
}

static int
finish_ddl(shl_op_ctx_t *op, const shl_write_concern_t *wc, uint64_t ts, bson_t *reply)
{
    db_op_note_write_ts(ts);
    db_write_concern_wait(op, wc, reply);
    return 0;
}

/* ---------------------------------------------------------------- create */

/* changeStreamPreAndPostImages: {enabled: <bool>} (MongoDB's IDL errors). */
static int
check_pre_images_option(const char *cmd_name, const bson_iter_t *it, shl_status_t *st)
{
    bson_iter_t sub;
    bool has_enabled = false;

    if (!BSON_ITER_HOLDS_DOCUMENT(it)) {
        return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                              "BSON field '%s.changeStreamPreAndPostImages' is the wrong type "
                              "'%s', expected type 'object'",
                              cmd_name, shl_bson_type_name(shl_iter_type(it)));
    }
    bson_iter_recurse(it, &sub);
    while (shl_iter_next(&sub)) {
        if (strcmp(shl_iter_key(&sub), "enabled") != 0) {
            return shl_status_set(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                                  "BSON field '%s.changeStreamPreAndPostImages.%s' is an unknown "
                                  "field.",
                                  cmd_name, shl_iter_key(&sub));
        }
        if (!BSON_ITER_HOLDS_BOOL(&sub)) {
            return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                                  "BSON field '%s.changeStreamPreAndPostImages.enabled' is the "
                                  "wrong type '%s', expected type 'bool'",
                                  cmd_name, shl_bson_type_name(shl_iter_type(&sub)));
        }
        has_enabled = true;
    }
    if (!has_enabled) {
        return shl_status_set(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                              "BSON field '%s.changeStreamPreAndPostImages.enabled' is missing "
                              "but a required field",
                              cmd_name);
    }
    return 0;
}

static const char *const create_fields[] = {"capped",
                                            "autoIndexId",
                                            "idIndex",
                                            "size",
                                            "max",
                                            "storageEngine",
                                            "validator",
                                            "validationLevel",
                                            "validationAction",
                                            "indexOptionDefaults",
                                            "viewOn",
                                            "pipeline",
                                            "collation",
                                            "timeseries",
                                            "clusteredIndex",
                                            "recordIdsReplicated",
                                            "changeStreamPreAndPostImages",
                                            "expireAfterSeconds",
                                            "encryptedFields",
                                            "temp",
                                            "flags",
                                            NULL};

/* Options MongoDB has and Shale does not implement yet: refuse them rather than
 * pretend. The validator is checked here and enforced by every user write (validation.c). */
static int
check_create_options(const bson_t *cmd, const shl_ns_t *ns, shl_status_t *st)
{
    static const char *const refused[] = {
        "timeseries", "clusteredIndex", "encryptedFields", "expireAfterSeconds",
        "recordIdsReplicated", NULL};
    bson_iter_t it;
    for (int i = 0; refused[i] != NULL; i++) {
        if (bson_has_field(cmd, refused[i])) {
            return shl_status_set(st, SHL_CODE_INVALID_OPTIONS, "create.%s is not supported yet",
                                  refused[i]);
        }
    }
    {
        int ret = db_validation_options_check("create", cmd, ns, st);
        if (ret != 0) {
            return ret;
        }
    }
    if (bson_iter_init_find(&it, cmd, "changeStreamPreAndPostImages")) {
        int ret = check_pre_images_option("create", &it, st);
        if (ret != 0) {
            return ret;
        }
    }
    if (bson_iter_init_find(&it, cmd, "capped") && bson_iter_as_bool(&it) &&
        !bson_has_field(cmd, "size")) {
        return shl_status_set(st, SHL_CODE_INVALID_OPTIONS,
                              "the 'size' field is required when 'capped' is true");
    }
    return db_check_collation(cmd, "collation", st);
}

static int
cmd_create(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    shl_ns_t ns;
    shl_write_concern_t wc;
    bson_t opts;
    uint64_t ts = 0;

    db_cmd_begin(op);
    bson_init(&opts);
    SHL_ERR(shl_cmd_check_fields(cmd, create_fields, st));
    SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
    SHL_ERR(db_sharding_check_no_filter(op, ns.full, SHL_DB_SHARD_DDL, st));
    SHL_ERR(db_check_user_write_ns(&ns, st));
    SHL_ERR(db_write_concern_get(op, &wc, st));
    if (bson_has_field(cmd, "viewOn")) {
        SHL_ERR(db_view_create(op, &ns, cmd, st));
        finish_ddl(op, &wc, 0, reply);
        goto done;
    }
    if (bson_has_field(cmd, "pipeline")) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "'pipeline' requires 'viewOn' to also be specified");
    }
    SHL_ERR(check_create_options(cmd, &ns, st));
    {
        bson_t def;
        bool is_view = false;
        ret = db_view_get(op, ns.full, &def, &is_view, st);
        bson_destroy(&def);
        SHL_ERR(ret);
        if (is_view) {
            SHL_FAIL(st, SHL_CODE_NAMESPACE_EXISTS, "Namespace %s already exists", ns.full);
        }
    }
    bson_destroy(&opts);
    command_options(cmd, &opts);
    if (db_txn_storage(op) != NULL) {
        ret = shl_catalog_create_collection_in_txn(db_txn_storage(op), ns.full, &opts, st);
        if (ret == 0) {
            /* Others' writes and DDL on it wait for the transaction from now on. */
            db_txn_note_created(op, ns.full);
        }
    } else {
        ret = shl_catalog_create_collection(node->eng, ns.full, &opts, NULL, &ts, st);
    }
    if (ret == SHL_CODE_NAMESPACE_EXISTS) {
        /* MongoDB 7.0: creating an existing collection with identical options succeeds. */
        shl_collection_t *coll = shl_catalog_get(node->eng, ns.full);
        bool same = coll != NULL && coll->options != NULL && bson_equal(coll->options, &opts);
        same = same || (coll != NULL && coll->options == NULL && bson_empty(&opts));
        shl_collection_release(coll);
        if (same) {
            ret = 0;
            shl_status_clear(st);
        } else {
            SHL_FAIL(st, SHL_CODE_NAMESPACE_EXISTS, "Collection %s already exists.", ns.full);
        }
    }
    SHL_ERR(ret);
    finish_ddl(op, &wc, ts, reply);
done:
    bson_destroy(&opts);
    return ret;
}

/*
 * A DDL operation on 'ns' (database 'ns' when db_wide) waits for the open transactions that
 * use it, as MongoDB's exclusive lock waits for theirs (docs/design/transactions.md "DDL and
 * open transactions"); *held says the caller ends it with ddl_txns_end.
 */
static int
ddl_txns_wait(shl_op_ctx_t *op, const char *ns, bool db_wide, bool *held, shl_status_t *st)
{
    int ret = db_txn_ddl_begin(db_node(op)->txns, op, ns, db_wide, st);

    *held = ret == 0;
    return ret;
}

static void
ddl_txns_end(shl_op_ctx_t *op, const char *ns, bool db_wide, bool held)
{
    if (held) {
        db_txn_ddl_end(db_node(op)->txns, ns, db_wide);
    }
}

/* ---------------------------------------------------------------- drop */

static const char *const drop_fields[] = {"collectionUUID", NULL};

static int
cmd_drop(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bool ddl_held = false;
    db_node_t *node = db_node(op);
    shl_ns_t ns;
    shl_write_concern_t wc;
    uint64_t ts = 0;
    shl_collection_t *coll;
    int64_t nindexes = 0;

    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, drop_fields, st));
    SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
    SHL_ERR(db_sharding_check_no_filter(op, ns.full, SHL_DB_SHARD_DDL, st));
    SHL_ERR(ddl_txns_wait(op, ns.full, false, &ddl_held, st));
    SHL_ERR(db_write_concern_get(op, &wc, st));
    if (db_ns_is_oplog(ns.full)) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "can't drop live oplog while replicating");
    }
    coll = shl_catalog_get(node->eng, ns.full);
    if (coll != NULL) {
        nindexes = (int64_t)coll->nindexes;
    } else {
        bool dropped = false;
        SHL_ERR(db_view_drop(op, &ns, &dropped, st));
        if (dropped) {
            BSON_APPEND_UTF8(reply, "ns", ns.full);
            finish_ddl(op, &wc, 0, reply);
            goto done;
        }
    }
    shl_collection_release(coll);
    ret = shl_catalog_drop_collection(node->eng, ns.full, &ts, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        /* MongoDB 7.0 (SERVER-43894): dropping a missing collection is a no-op. */
        shl_status_clear(st);
        ret = 0;
        finish_ddl(op, &wc, 0, reply);
        goto done;
    }
    SHL_ERR(ret);
    shl_cursor_manager_kill_ns(node->cursors, ns.full);
    BSON_APPEND_INT32(reply, "nIndexesWas", (int32_t)nindexes);
    BSON_APPEND_UTF8(reply, "ns", ns.full);
    finish_ddl(op, &wc, ts, reply);
done:
    ddl_txns_end(op, ns.full, false, ddl_held);
    return ret;
}

/* ---------------------------------------------------------------- dropDatabase */

static const char *const dropdb_fields[] = {NULL};

static int
cmd_drop_database(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bool ddl_held = false;
    db_node_t *node = db_node(op);
    shl_write_concern_t wc;
    uint64_t ts = 0;
    bson_iter_t it;

    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, dropdb_fields, st));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_NUMBER(&it) ||
        bson_iter_as_int64(&it) != 1) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "have to pass 1 as db parameter");
    }
    SHL_ERR(db_uwb_check(op, op->db, st));
    SHL_ERR(ddl_txns_wait(op, op->db, true, &ddl_held, st));
    SHL_ERR(db_write_concern_get(op, &wc, st));
    SHL_ERR(shl_catalog_drop_database(node->eng, op->db, &ts, st));
    shl_cursor_manager_kill_db(node->cursors, op->db);
    finish_ddl(op, &wc, ts, reply);
done:
    ddl_txns_end(op, op->db, true, ddl_held);
    return ret;
}

/* ---------------------------------------------------------------- renameCollection */

static const char *const rename_fields[] = {
    "to", "dropTarget", "stayTemp", "collectionUUID", "dropTargetUUID", "newTargetCollectionUuid",
    NULL};

static int
cmd_rename_collection(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bool ddl_held = false;
    db_node_t *node = db_node(op);
    shl_write_concern_t wc;
    const char *from_s, *to_s = NULL;
    shl_ns_t from, to;
    bool found, drop_target = false, stay_temp = false;
    bson_iter_t it;
    uint64_t ts = 0;

    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, rename_fields, st));
    bson_iter_init(&it, cmd);
    shl_iter_next(&it);
    if (!BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'renameCollection.renameCollection' is the wrong type '%s', "
                 "expected type 'string'",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    from_s = bson_iter_utf8(&it, NULL);
    SHL_ERR(shl_cmd_get_string(cmd, "to", &to_s, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'renameCollection.to' is missing but a required field");
    }
    SHL_ERR(shl_cmd_get_bool(cmd, "dropTarget", &drop_target, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "stayTemp", &stay_temp, st));
    if (shl_ns_parse(&from, from_s, st) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid source namespace: %s", from_s);
    }
    if (shl_ns_parse(&to, to_s, st) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid target namespace: %s", to_s);
    }
    SHL_ERR(db_write_concern_get(op, &wc, st));
    if (strcmp(from.full, to.full) == 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "Can't rename a collection to itself");
    }
    if (db_ns_is_oplog(from.full) || db_ns_is_oplog(to.full)) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "Cannot rename collections to or from %s",
                 "local.oplog.rs");
    }
    SHL_ERR(db_check_user_write_ns(&to, st));
    {
        /* Views are not renamed, nor replaced by a rename (MongoDB's rules). */
        bson_t def;
        bool from_view = false, to_view = false;
        ret = db_view_get(op, from.full, &def, &from_view, st);
        bson_destroy(&def);
        SHL_ERR(ret);
        ret = db_view_get(op, to.full, &def, &to_view, st);
        bson_destroy(&def);
        SHL_ERR(ret);
        if (from_view) {
            SHL_FAIL(st, SHL_CODE_COMMAND_NOT_SUPPORTED_ON_VIEW, "cannot rename view: %s",
                     from.full);
        }
        if (to_view) {
            SHL_FAIL(st, SHL_CODE_NAMESPACE_EXISTS, "a view already exists with that name: %s",
                     to.full);
        }
    }
    SHL_ERR(db_uwb_check(op, from.full, st));
    SHL_ERR(db_uwb_check(op, to.full, st));
    SHL_ERR(ddl_txns_wait(op, from.full, false, &ddl_held, st));
    if (strcmp(from.db, to.db) != 0) {
        /* TODO(#3): MongoDB copies across databases; not implemented yet. */
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "renameCollection across databases is not supported yet");
    }
    ret = shl_catalog_rename_collection(node->eng, from.full, to.full, drop_target, &ts, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "Source collection %s does not exist",
                 from.full);
    }
    SHL_ERR(ret);
    shl_cursor_manager_kill_ns(node->cursors, from.full);
    if (drop_target) {
        shl_cursor_manager_kill_ns(node->cursors, to.full);
    }
    finish_ddl(op, &wc, ts, reply);
done:
    ddl_txns_end(op, from.full, false, ddl_held);
    return ret;
}

/* ---------------------------------------------------------------- createIndexes */

static const char *const create_indexes_fields[] = {"indexes",
                                                    "commitQuorum",
                                                    "ignoreUnknownIndexOptions",
                                                    "isTimeseriesNamespace",
                                                    "collectionUUID",
                                                    "returnOnStart",
                                                    NULL};

static int
check_index_spec(const bson_t *spec, shl_status_t *st)
{
    bson_iter_t it;
    char *s;
    int ret = 0;

    if (!bson_iter_init_find(&it, spec, "key") || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        s = shl_bson_to_string(spec);
        shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                       "Error in specification %s :: caused by :: The 'key' field is a "
                       "required property of an index specification",
                       s);
        bson_free(s);
        return SHL_CODE_FAILED_TO_PARSE;
    }
    if (!bson_iter_init_find(&it, spec, "name") || !BSON_ITER_HOLDS_UTF8(&it)) {
        s = shl_bson_to_string(spec);
        shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                       "Error in specification %s :: caused by :: The 'name' field is a "
                       "required property of an index specification",
                       s);
        bson_free(s);
        return SHL_CODE_FAILED_TO_PARSE;
    }
    ret = db_index_spec_validate(spec, st);
    if (ret != 0) {
        char *reason = bson_strdup(st->reason);
        s = shl_bson_to_string(spec);
        shl_status_set(st, ret, "Error in specification %s :: caused by :: %s", s, reason);
        bson_free(s);
        bson_free(reason);
    }
    return ret;
}

/*
 * The spec as stored: its collation normalised (the simple one dropped), or the collection's
 * default when it names none -- MongoDB's rules, so listIndexes shows the full collation.
 */
static int
index_spec_with_collation(const bson_t *spec, const shl_collection_t *coll, bson_t *out,
                          shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    shl_collator_t *c = NULL;
    bool has = bson_iter_init_find(&it, spec, "collation");

    shl_collator_t *def = exec_collection_collator(coll);

    bson_init(out);
    if (has) {
        SHL_ERR(shl_collator_from_iter(&it, "collation", &c, st));
    } else {
        c = shl_collator_ref(def);
    }
    bson_iter_init(&it, spec);
    while (shl_iter_next(&it)) {
        if (strcmp(shl_iter_key(&it), "collation") != 0) {
            bson_append_iter(out, shl_iter_key(&it), -1, &it);
        }
    }
    if (c != NULL) {
        BSON_APPEND_DOCUMENT(out, "collation", shl_collator_spec(c));
    } else if (def != NULL) {
        /* A simple index on a collection with a default says so, or a copy of its spec
         * (movePrimary, a new shard's participant) would take the default. */
        bson_t simple;
        BSON_APPEND_DOCUMENT_BEGIN(out, "collation", &simple);
        BSON_APPEND_UTF8(&simple, "locale", "simple");
        bson_append_document_end(out, &simple);
    }
done:
    shl_collator_release(c);
    shl_collator_release(def);
    return ret;
}

/*
 * A text index's spec as stored ('spec' replaced by its normalised form), and MongoDB's one
 * text index per collection: another text index of a different name is IndexOptionsConflict
 * (the same name goes on to the catalog's own comparison of specs).
 */
static int
text_index_spec(db_node_t *node, const char *ns, bson_t *spec, shl_status_t *st)
{
    int ret = 0;
    bson_t norm;
    bson_iter_t it;
    const char *name = bson_iter_init_find(&it, spec, "name") ? bson_iter_utf8(&it, NULL) : "";
    shl_collection_t *coll = shl_catalog_get(node->eng, ns);

    ret = db_text_index_normalize(spec, &norm, st);
    for (size_t i = 0; ret == 0 && coll != NULL && i < coll->nindexes; i++) {
        const shl_index_t *idx = coll->indexes[i];
        if (db_index_is_text(idx->spec) && strcmp(idx->name, name) != 0) {
            ret = shl_status_set(st, SHL_CODE_INDEX_OPTIONS_CONFLICT,
                                 "only one text index per collection allowed, found existing text "
                                 "index \"%s\"",
                                 idx->name);
        }
    }
    if (ret == 0) {
        bson_destroy(spec);
        bson_copy_to(&norm, spec);
    }
    bson_destroy(&norm);
    shl_collection_release(coll);
    return ret;
}

/* Whether every spec of 'specs' (validated) names an index 'coll' already has, identical
 * once completed as the build below completes it: createIndexes would change nothing. */
static bool
all_indexes_exist(db_node_t *node, const shl_collection_t *coll, const bson_t *specs)
{
    bson_iter_t it;
    bool all = true;
    shl_status_t st = SHL_STATUS_INIT;

    bson_iter_init(&it, specs);
    while (all && shl_iter_next(&it)) {
        bson_t spec, full;
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&spec, data, len);
        all = index_spec_with_collation(&spec, coll, &full, &st) == 0;
        if (all && db_index_is_text(&full)) {
            all = text_index_spec(node, coll->ns, &full, &st) == 0;
        }
        all = all && shl_collection_has_index(coll, &full);
        bson_destroy(&full);
    }
    return all;
}

static int
cmd_create_indexes(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bool ddl_held = false;
    db_node_t *node = db_node(op);
    shl_ns_t ns;
    shl_write_concern_t wc;
    bson_t specs;
    bool found, created_coll = false, any_created = false;
    bson_iter_t it;
    shl_collection_t *coll = NULL;
    int64_t before = 0, after = 0;
    uint64_t ts = 0;

    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, create_indexes_fields, st));
    SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
    SHL_ERR(db_sharding_check_no_filter(op, ns.full, SHL_DB_SHARD_DDL, st));
    SHL_ERR(db_check_write_ns(op, &ns, st));
    SHL_ERR(db_write_concern_get(op, &wc, st));
    SHL_ERR(shl_cmd_get_array(cmd, "indexes", &specs, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'createIndexes.indexes' is missing but a required field");
    }
    if (bson_empty(&specs)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Must specify at least one index to create");
    }
    bson_iter_init(&it, &specs);
    while (shl_iter_next(&it)) {
        bson_t spec;
        const uint8_t *data;
        uint32_t len;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field 'createIndexes.indexes.%s' is the wrong type '%s', expected "
                     "type 'object'",
                     shl_iter_key(&it), shl_bson_type_name(shl_iter_type(&it)));
        }
        bson_iter_document(&it, &len, &data);
        bson_init_static(&spec, data, len);
        SHL_ERR(check_index_spec(&spec, st));
        SHL_ERR(db_check_collation(&spec, "collation", st));
        {
            bson_iter_t h;
            if (strncmp(ns.coll, "system.", 7) == 0 && bson_iter_init_find(&h, &spec, "hidden") &&
                bson_iter_as_bool(&h)) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Can't hide index on system collection: %s",
                         ns.full);
            }
        }
    }
    coll = shl_catalog_get(node->eng, ns.full);
    if (coll != NULL && db_txn_storage(op) == NULL && all_indexes_exist(node, coll, &specs)) {
        /* Nothing to build: MongoDB answers under an intent lock, so neither does this wait
         * for the open or prepared transactions on the collection (a migration's recipient
         * sends the donor's indexes while one may be prepared here). */
        BSON_APPEND_INT32(reply, "numIndexesBefore", (int32_t)coll->nindexes);
        BSON_APPEND_INT32(reply, "numIndexesAfter", (int32_t)coll->nindexes);
        BSON_APPEND_UTF8(reply, "note", "all indexes already exist");
        BSON_APPEND_BOOL(reply, "createdCollectionAutomatically", false);
        finish_ddl(op, &wc, 0, reply);
        goto done;
    }
    shl_collection_release(coll);
    coll = NULL;
    SHL_ERR(ddl_txns_wait(op, ns.full, false, &ddl_held, st));
    coll = shl_catalog_get(node->eng, ns.full);
    if (coll == NULL) {
        bool in_txn = db_txn_storage(op) != NULL;
        ret = in_txn ? shl_catalog_create_collection_in_txn(db_txn_storage(op), ns.full, NULL, st)
                     : shl_catalog_create_collection(node->eng, ns.full, NULL, NULL, &ts, st);
        if (ret == SHL_CODE_NAMESPACE_EXISTS) {
            ret = 0;
        } else if (ret == 0) {
            created_coll = true;
            db_op_note_write_ts(ts);
            if (in_txn) {
                db_txn_note_created(op, ns.full);
            }
        }
        SHL_ERR(ret);
        coll = shl_catalog_get(node->eng, ns.full);
    }
    before = coll != NULL ? (int64_t)coll->nindexes : 0;
    bson_iter_init(&it, &specs);
    while (shl_iter_next(&it)) {
        bson_t spec, full;
        const uint8_t *data;
        uint32_t len;
        bool created = false;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&spec, data, len);
        ret = index_spec_with_collation(&spec, coll, &full, st);
        if (ret == 0 && db_index_is_text(&full)) {
            ret = text_index_spec(node, ns.full, &full, st);
        }
        if (ret == 0) {
            ret = db_txn_storage(op) != NULL
                      ? shl_catalog_create_index_in_txn(db_txn_storage(op), ns.full, &full,
                                                        &created, st)
                      : shl_catalog_create_index(node->eng, ns.full, &full, &created, &ts, st);
        }
        bson_destroy(&full);
        SHL_ERR(ret);
        if (created) {
            any_created = true;
            db_op_note_write_ts(ts);
        }
    }
    shl_collection_release(coll);
    coll = shl_catalog_get(node->eng, ns.full);
    after = coll != NULL ? (int64_t)coll->nindexes : before;
    BSON_APPEND_INT32(reply, "numIndexesBefore", (int32_t)before);
    BSON_APPEND_INT32(reply, "numIndexesAfter", (int32_t)after);
    if (!any_created) {
        BSON_APPEND_UTF8(reply, "note", "all indexes already exist");
    }
    BSON_APPEND_BOOL(reply, "createdCollectionAutomatically", created_coll);
    finish_ddl(op, &wc, 0, reply);
done:
    ddl_txns_end(op, ns.full, false, ddl_held);
    shl_collection_release(coll);
    return ret;
}

/* ---------------------------------------------------------------- dropIndexes */

static const char *const drop_indexes_fields[] = {"index", "collectionUUID", NULL};

static int
drop_one_index(db_node_t *node, const shl_ns_t *ns, const char *name, shl_status_t *st)
{
    uint64_t ts = 0;
    int ret = shl_catalog_drop_index(node->eng, ns->full, name, &ts, st);
    if (ret == 0) {
        db_op_note_write_ts(ts);
    }
    return ret;
}

/*
 * Whether 'idx' can serve shard key 'key' (what migrations and range deletions scan): its key
 * pattern starts with the shard key's fields and values, and it is complete (not sparse,
 * partial or hidden) and uses the simple collation -- MongoDB's rules for the index that may
 * not be dropped (a multikey one still counts there).
 */
static bool
index_serves_shard_key(const shl_index_t *idx, const bson_t *key)
{
    bson_iter_t a, b;
    bool fits = bson_iter_init(&a, key) && bson_iter_init(&b, idx->key_pattern);

    while (fits && shl_iter_next(&a)) {
        fits = shl_iter_next(&b) && strcmp(shl_iter_key(&a), shl_iter_key(&b)) == 0 &&
               shl_bson_iter_compare(&a, &b) == 0;
    }
    if (fits) {
        bson_iter_t f;
        fits = !bson_has_field(idx->spec, "partialFilterExpression") &&
               !bson_has_field(idx->spec, "collation") &&
               !(bson_iter_init_find(&f, idx->spec, "sparse") && bson_iter_as_bool(&f)) &&
               !(bson_iter_init_find(&f, idx->spec, "hidden") && bson_iter_as_bool(&f));
    }
    return fits;
}

/* Whether a key pattern has a hashed field. */
static bool
key_is_hashed(const bson_t *key)
{
    bson_iter_t it;
    bool hashed = false;

    if (bson_iter_init(&it, key)) {
        while (!hashed && shl_iter_next(&it)) {
            hashed = BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), "hashed") == 0;
        }
    }
    return hashed;
}

static bool
name_listed(char **names, size_t n, const char *name)
{
    bool found = false;
    for (size_t i = 0; i < n && !found; i++) {
        found = strcmp(names[i], name) == 0;
    }
    return found;
}

/*
 * On a collection sharded by a ranged key (MongoDB lets hashed shard key indexes go) the last
 * index serving the shard key stays: "*" keeps every such index, and a named drop that would
 * remove the last one fails with CannotDropShardKeyIndex.
 * Drops the kept names from 'names'. Applies to requests a router sent (versioned); an
 * administrator connected to the shard itself may still drop it (to rebuild it, say) -- the
 * donor's clone then scans the collection.
 */
static int
keep_shard_key_index(shl_op_ctx_t *op, const shl_collection_t *coll, bool all, char **names,
                     size_t *nnames, shl_status_t *st)
{
    int ret = 0;
    bson_t key = BSON_INITIALIZER;
    bool dropping = false, remains = false;

    if (!op->has_shard_version || !shl_db_shard_key(op, coll->ns, &key) || key_is_hashed(&key)) {
        goto done;
    }
    for (size_t i = 0; i < coll->nindexes; i++) {
        const shl_index_t *idx = coll->indexes[i];
        if (!index_serves_shard_key(idx, &key)) {
            continue;
        }
        if (!name_listed(names, *nnames, idx->name)) {
            remains = true;
        } else if (all) {
            /* "*" leaves the indexes serving the shard key. */
            for (size_t j = 0; j < *nnames; j++) {
                if (strcmp(names[j], idx->name) == 0) {
                    bson_free(names[j]);
                    names[j] = names[--*nnames];
                    break;
                }
            }
        } else {
            dropping = true;
        }
    }
    if (dropping && !remains) {
        SHL_FAIL(st, SHL_CODE_CANNOT_DROP_SHARD_KEY_INDEX,
                 "Cannot drop the only compatible index for this collection's shard key");
    }
done:
    bson_destroy(&key);
    return ret;
}

static int
cmd_drop_indexes(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bool ddl_held = false;
    db_node_t *node = db_node(op);
    shl_ns_t ns;
    shl_write_concern_t wc;
    bson_iter_t it;
    shl_collection_t *coll = NULL;
    char **names = NULL;
    size_t nnames = 0;
    bool all = false;

    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, drop_indexes_fields, st));
    SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
    SHL_ERR(db_sharding_check_no_filter(op, ns.full, SHL_DB_SHARD_DDL, st));
    SHL_ERR(ddl_txns_wait(op, ns.full, false, &ddl_held, st));
    SHL_ERR(db_write_concern_get(op, &wc, st));
    if (!bson_iter_init_find(&it, cmd, "index")) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'dropIndexes.index' is missing but a required field");
    }
    coll = shl_catalog_get(node->eng, ns.full);
    if (coll == NULL) {
        SHL_ERR(db_refuse_view(op, &ns, st));
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "ns not found %s", ns.full);
    }
    names = bson_malloc0((coll->nindexes + 1) * sizeof(char *));
    if (BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), "*") == 0) {
        all = true;
        for (size_t i = 0; i < coll->nindexes; i++) {
            if (!coll->indexes[i]->is_id) {
                names[nnames++] = bson_strdup(coll->indexes[i]->name);
            }
        }
    } else if (BSON_ITER_HOLDS_UTF8(&it)) {
        const char *name = bson_iter_utf8(&it, NULL);
        names[nnames++] = bson_strdup(name);
    } else if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t pattern;
        const uint8_t *data;
        uint32_t len;
        const shl_index_t *idx;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&pattern, data, len);
        idx = shl_collection_find_index_by_key(coll, &pattern);
        if (idx == NULL) {
            char *s = shl_bson_to_string(&pattern);
            shl_status_set(st, SHL_CODE_INDEX_NOT_FOUND, "can't find index with key: %s", s);
            bson_free(s);
            ret = SHL_CODE_INDEX_NOT_FOUND;
            goto done;
        }
        names[nnames++] = bson_strdup(idx->name);
    } else if (BSON_ITER_HOLDS_ARRAY(&it)) {
        bson_iter_t sub;
        size_t cap = coll->nindexes + 1;
        bson_iter_recurse(&it, &sub);
        while (shl_iter_next(&sub)) {
            if (!BSON_ITER_HOLDS_UTF8(&sub)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "dropIndexes 'index' array must contain only strings");
            }
            if (nnames + 1 >= cap) {
                cap *= 2;
                names = bson_realloc(names, cap * sizeof(char *));
            }
            names[nnames++] = bson_strdup(bson_iter_utf8(&sub, NULL));
        }
        /* Every name must exist before any is dropped. */
        for (size_t i = 0; i < nnames; i++) {
            if (shl_collection_find_index(coll, names[i]) == NULL) {
                SHL_FAIL(st, SHL_CODE_INDEX_NOT_FOUND, "index not found with name [%s]", names[i]);
            }
        }
    } else {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'dropIndexes.index' is the wrong type '%s', expected types "
                 "'[string, object, array]'",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    SHL_ERR(keep_shard_key_index(op, coll, all, names, &nnames, st));
    BSON_APPEND_INT32(reply, "nIndexesWas", (int32_t)coll->nindexes);
    for (size_t i = 0; i < nnames; i++) {
        SHL_ERR(drop_one_index(node, &ns, names[i], st));
    }
    if (all) {
        BSON_APPEND_UTF8(reply, "msg", "non-_id indexes dropped for collection");
    }
    finish_ddl(op, &wc, 0, reply);
done:
    ddl_txns_end(op, ns.full, false, ddl_held);
    for (size_t i = 0; i < nnames; i++) {
        bson_free(names[i]);
    }
    bson_free(names);
    shl_collection_release(coll);
    return ret;
}

/* ---------------------------------------------------------------- collMod */

static const char *const coll_mod_fields[] = {"index",
                                              "validator",
                                              "validationLevel",
                                              "validationAction",
                                              "viewOn",
                                              "pipeline",
                                              "recordPreImages",
                                              "changeStreamPreAndPostImages",
                                              "expireAfterSeconds",
                                              "timeseries",
                                              "dryRun",
                                              "cappedSize",
                                              "cappedMax",
                                              "collectionUUID",
                                              "isTimeseriesNamespace",
                                              NULL};

static const char *const coll_mod_index_fields[] = {
    "keyPattern",    "name",   "expireAfterSeconds", "hidden",
    "prepareUnique", "unique", "forceNonUnique",     NULL};

/* The 'index' option: its fields, types and ranges (the index itself is found by storage,
 * under the collection lock). */
static int
check_coll_mod_index(const bson_t *cmd, shl_status_t *st)
{
    bson_iter_t it, f;
    bool has_name = false, has_key = false, has_ttl = false, has_hidden = false;
    int ret = 0;

    if (!bson_iter_init_find(&it, cmd, "index")) {
        goto done;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'collMod.index' is the wrong type '%s', expected type 'object'",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    bson_iter_recurse(&it, &f);
    while (shl_iter_next(&f)) {
        const char *k = shl_iter_key(&f);
        bool known = false;
        for (int i = 0; coll_mod_index_fields[i] != NULL; i++) {
            known = known || strcmp(k, coll_mod_index_fields[i]) == 0;
        }
        if (!known) {
            SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                     "BSON field 'collMod.index.%s' is an unknown field.", k);
        }
        if (strcmp(k, "prepareUnique") == 0 || strcmp(k, "unique") == 0 ||
            strcmp(k, "forceNonUnique") == 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "collMod.index.%s is not supported yet", k);
        }
        if (strcmp(k, "name") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&f)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'collMod.index.name' is the wrong type '%s', expected type "
                         "'string'",
                         shl_bson_type_name(shl_iter_type(&f)));
            }
            has_name = true;
        } else if (strcmp(k, "keyPattern") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&f)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'collMod.index.keyPattern' is the wrong type '%s', expected "
                         "type 'object'",
                         shl_bson_type_name(shl_iter_type(&f)));
            }
            has_key = true;
        } else if (strcmp(k, "expireAfterSeconds") == 0) {
            double secs;
            if (!BSON_ITER_HOLDS_NUMBER(&f)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'collMod.index.expireAfterSeconds' is the wrong type '%s', "
                         "expected types '[long, int, decimal, double]'",
                         shl_bson_type_name(shl_iter_type(&f)));
            }
            secs = bson_iter_as_double(&f);
            if (secs < 0) {
                SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                         "TTL index 'expireAfterSeconds' option cannot be less than 0.");
            }
            if (!(secs <= (double)INT32_MAX)) {
                SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                         "TTL index 'expireAfterSeconds' option must be within an acceptable "
                         "range, try a lower number.");
            }
            has_ttl = true;
        } else if (strcmp(k, "hidden") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&f)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'collMod.index.hidden' is the wrong type '%s', expected "
                         "type 'bool'",
                         shl_bson_type_name(shl_iter_type(&f)));
            }
            has_hidden = true;
        }
    }
    if (has_name && has_key) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Cannot specify both key pattern and name.");
    }
    if (!has_name && !has_key) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Must specify either index name or key pattern.");
    }
    if (!has_ttl && !has_hidden) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "no expireAfterSeconds or hidden field");
    }
done:
    return ret;
}

static int
cmd_coll_mod(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    static const char *const refused[] = {"recordPreImages",
                                          "expireAfterSeconds",
                                          "timeseries",
                                          "dryRun",
                                          "cappedSize",
                                          "cappedMax",
                                          NULL};
    static const char *const applied[] = {"validator", "validationLevel", "validationAction",
                                          "index", "changeStreamPreAndPostImages", NULL};
    int ret = 0;
    bool ddl_held = false;
    db_node_t *node = db_node(op);
    shl_ns_t ns;
    shl_write_concern_t wc;
    bson_t mod = BSON_INITIALIZER, info = BSON_INITIALIZER;
    bson_iter_t it;
    uint64_t ts = 0;

    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, coll_mod_fields, st));
    SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
    SHL_ERR(db_sharding_check_no_filter(op, ns.full, SHL_DB_SHARD_DDL, st));
    SHL_ERR(ddl_txns_wait(op, ns.full, false, &ddl_held, st));
    SHL_ERR(db_write_concern_get(op, &wc, st));
    if (db_ns_is_oplog(ns.full)) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "cannot modify the oplog");
    }
    {
        bool view = false;
        SHL_ERR(db_view_coll_mod(op, &ns, cmd, &view, st));
        if (view) {
            finish_ddl(op, &wc, 0, reply);
            goto done;
        }
    }
    for (int i = 0; refused[i] != NULL; i++) {
        if (bson_has_field(cmd, refused[i])) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "collMod.%s is not supported yet", refused[i]);
        }
    }
    SHL_ERR(db_validation_options_check("collMod", cmd, &ns, st));
    if (bson_iter_init_find(&it, cmd, "changeStreamPreAndPostImages")) {
        SHL_ERR(check_pre_images_option("collMod", &it, st));
    }
    SHL_ERR(check_coll_mod_index(cmd, st));
    if (strncmp(ns.coll, "system.", 7) == 0 && bson_iter_init_find(&it, cmd, "index") &&
        bson_iter_recurse(&it, &it) && bson_iter_find(&it, "hidden")) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Can't hide index on system collection: %s", ns.full);
    }
    for (int i = 0; applied[i] != NULL; i++) {
        if (bson_iter_init_find(&it, cmd, applied[i])) {
            bson_append_iter(&mod, applied[i], -1, &it);
        }
    }
    bson_destroy(&info);
    ret = shl_catalog_coll_mod(node->eng, ns.full, &mod, &info, &ts, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "ns does not exist: %s", ns.full);
    }
    SHL_ERR(ret);
    bson_concat(reply, &info);
    finish_ddl(op, &wc, ts, reply);
done:
    ddl_txns_end(op, ns.full, false, ddl_held);
    bson_destroy(&mod);
    bson_destroy(&info);
    return ret;
}

static const shl_command_t ddl_commands[] = {
    {"create", {NULL}, cmd_create, SHL_CMD_NEEDS_PRIMARY | SHL_CMD_IN_TXN, "create a collection"},
    {"drop", {NULL}, cmd_drop, SHL_CMD_NEEDS_PRIMARY, "drop a collection"},
    {"dropDatabase", {NULL}, cmd_drop_database, SHL_CMD_NEEDS_PRIMARY, "drop a database"},
    {"renameCollection",
     {NULL},
     cmd_rename_collection,
     SHL_CMD_NEEDS_PRIMARY | SHL_CMD_ADMIN_ONLY,
     "rename a collection"},
    {"createIndexes",
     {NULL},
     cmd_create_indexes,
     SHL_CMD_NEEDS_PRIMARY | SHL_CMD_IN_TXN,
     "create indexes"},
    {"dropIndexes",
     {"deleteIndexes", NULL},
     cmd_drop_indexes,
     SHL_CMD_NEEDS_PRIMARY,
     "drop indexes"},
    {"collMod",
     {NULL},
     cmd_coll_mod,
     SHL_CMD_NEEDS_PRIMARY,
     "modify a collection's validator or an index's expireAfterSeconds / hidden"},
};

void
db_register_ddl_commands(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(ddl_commands) / sizeof(ddl_commands[0]); i++) {
        shl_command_registry_add(reg, &ddl_commands[i]);
    }
}
