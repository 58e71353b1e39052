/*
 * cmd_list.c -- catalog listings of a data node: listDatabases (sizes, nameOnly, filter),
 * listCollections (filter, nameOnly, cursor reply) and listIndexes (cursor reply), in
 * MongoDB 7.0's shapes. Listings are built from one consistent catalog snapshot.
 */
#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/db_private.h"
#include "db/views.h"
#include "db/txn_participant.h"
#include "db/storage_api.h"
#include "net/command_args.h"
#include "query/matcher.h"

static int64_t
collection_disk_size(shl_storage_engine_t *eng, const shl_collection_t *c)
{
    int64_t size = shl_storage_ident_size(eng, c->ident);
    for (size_t i = 0; i < c->nindexes; i++) {
        size += shl_storage_ident_size(eng, c->indexes[i]->ident);
    }
    return size;
}

static void
append_index(bson_t *arr, uint32_t i, const bson_t *doc)
{
    char k[16];
    const char *kp;
    bson_uint32_to_string(i, &kp, k, sizeof(k));
    bson_append_document(arr, kp, -1, doc);
}

/* ---------------------------------------------------------------- listDatabases */

static const char *const list_databases_fields[] = {"filter", "nameOnly", "authorizedDatabases",
                                                    NULL};

static int
cmd_list_databases(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    bson_t filter, arr;
    bool has_filter = false, name_only = false, auth = false;
    shl_matcher_t *m = NULL;
    char **dbs = NULL;
    int64_t total = 0;
    uint32_t n = 0;

    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, list_databases_fields, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "filter", &filter, &has_filter, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "nameOnly", &name_only, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "authorizedDatabases", &auth, st));
    if (has_filter) {
        SHL_ERR(shl_matcher_new(&filter, SHL_MATCHER_NO_SPECIAL, &m, st));
    }
    shl_catalog_list_databases(node->eng, &dbs);
    BSON_APPEND_ARRAY_BEGIN(reply, "databases", &arr);
    for (size_t i = 0; dbs != NULL && dbs[i] != NULL; i++) {
        bson_t doc = BSON_INITIALIZER;
        shl_collection_t **list = NULL;
        size_t nl = 0;
        int64_t size = 0, records = 0;
        bool matched = true;

        BSON_APPEND_UTF8(&doc, "name", dbs[i]);
        if (!name_only) {
            shl_catalog_list(node->eng, dbs[i], &list, &nl);
            for (size_t j = 0; j < nl; j++) {
                size += collection_disk_size(node->eng, list[j]);
                records += shl_collection_num_records(list[j]);
            }
            shl_catalog_list_free(list, nl);
            BSON_APPEND_INT64(&doc, "sizeOnDisk", size);
            BSON_APPEND_BOOL(&doc, "empty", records == 0 && size == 0);
        }
        if (m != NULL) {
            ret = shl_matcher_match(m, &doc, NULL, &matched, st);
        }
        if (ret == 0 && matched) {
            append_index(&arr, n++, &doc);
            total += size;
        }
        bson_destroy(&doc);
        if (ret != 0) {
            bson_append_array_end(reply, &arr);
            goto done;
        }
    }
    bson_append_array_end(reply, &arr);
    if (!name_only) {
        BSON_APPEND_INT64(reply, "totalSize", total);
        BSON_APPEND_INT64(reply, "totalSizeMb", total / (1024 * 1024));
    }
done:
    bson_strfreev(dbs);
    shl_matcher_destroy(m);
    return ret;
}

/* ---------------------------------------------------------------- listCollections */

static const char *const list_collections_fields[] = {
    "filter", "nameOnly", "authorizedCollections", "cursor", "includePendingDrops", NULL};

static void
collection_info(const shl_collection_t *c, bool name_only, bson_t *doc)
{
    bson_t info, idx, key;

    BSON_APPEND_UTF8(doc, "name", c->coll_name);
    BSON_APPEND_UTF8(doc, "type", "collection");
    if (name_only) {
        return;
    }
    if (c->options != NULL) {
        BSON_APPEND_DOCUMENT(doc, "options", c->options);
    } else {
        bson_t empty = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(doc, "options", &empty);
    }
    BSON_APPEND_DOCUMENT_BEGIN(doc, "info", &info);
    BSON_APPEND_BOOL(&info, "readOnly", false);
    shl_bson_append_uuid(&info, "uuid", c->uuid);
    bson_append_document_end(doc, &info);
    if (!c->is_oplog) {
        BSON_APPEND_DOCUMENT_BEGIN(doc, "idIndex", &idx);
        BSON_APPEND_INT32(&idx, "v", 2);
        BSON_APPEND_DOCUMENT_BEGIN(&idx, "key", &key);
        BSON_APPEND_INT32(&key, "_id", 1);
        bson_append_document_end(&idx, &key);
        BSON_APPEND_UTF8(&idx, "name", "_id_");
        bson_append_document_end(doc, &idx);
    }
}

static int
cmd_list_collections(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    bson_t filter, *docs = NULL;
    bool has_filter = false, name_only = false, auth = false, pending = false;
    shl_matcher_t *m = NULL;
    shl_collection_t **list = NULL;
    size_t nl = 0;
    uint32_t n = 0;
    int64_t batch_size = 0;
    char ns[SHL_NS_MAX + 1];

    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, list_collections_fields, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "filter", &filter, &has_filter, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "nameOnly", &name_only, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "authorizedCollections", &auth, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "includePendingDrops", &pending, st));
    SHL_ERR(db_cursor_batch_size(cmd, &batch_size, st));
    /* A router's request carries the databaseVersion: this shard must still be the
     * primary (a movePrimary's commit phase holds it; a stale router gets StaleDbVersion). */
    SHL_ERR(db_sharding_check_no_filter(op, op->db, SHL_DB_SHARD_CATALOG, st));
    if (has_filter) {
        SHL_ERR(shl_matcher_new(&filter, SHL_MATCHER_NO_SPECIAL, &m, st));
    }
    docs = bson_new();
    shl_catalog_list(node->eng, op->db, &list, &nl);
    for (size_t i = 0; i < nl; i++) {
        bson_t doc = BSON_INITIALIZER, full = BSON_INITIALIZER;
        bool matched = true;
        if (db_txn_ns_hidden(op, list[i]->ns)) {
            continue; /* an open transaction's new collection (txn_participant.h) */
        }
        collection_info(list[i], name_only, &doc);
        if (m != NULL) {
            /* MongoDB applies the filter to the full document even with nameOnly when the
             * filter names other fields; matching the full form covers both. */
            collection_info(list[i], false, &full);
            ret = shl_matcher_match(m, &full, NULL, &matched, st);
        }
        if (ret == 0 && matched) {
            append_index(docs, n++, &doc);
        }
        bson_destroy(&doc);
        bson_destroy(&full);
        SHL_ERR(ret);
    }
    {
        /* The views, from system.views, filtered as the collections. */
        bson_t views = BSON_INITIALIZER;
        uint32_t nv = 0;
        bson_iter_t vi;
        ret = db_view_list(op, op->db, &views, &nv, st);
        bson_iter_init(&vi, &views);
        while (ret == 0 && shl_iter_next(&vi)) {
            bson_t full, name = BSON_INITIALIZER;
            bool matched = true;
            bson_iter_t f;
            const uint8_t *data;
            uint32_t len;
            bson_iter_document(&vi, &len, &data);
            bson_init_static(&full, data, len);
            if (m != NULL) {
                ret = shl_matcher_match(m, &full, NULL, &matched, st);
            }
            if (ret == 0 && matched && name_only) {
                bson_iter_init(&f, &full);
                while (shl_iter_next(&f) && (strcmp(bson_iter_key(&f), "name") == 0 ||
                                             strcmp(bson_iter_key(&f), "type") == 0)) {
                    bson_append_iter(&name, NULL, 0, &f);
                }
                append_index(docs, n++, &name);
            } else if (ret == 0 && matched) {
                append_index(docs, n++, &full);
            }
            bson_destroy(&name);
        }
        bson_destroy(&views);
        SHL_ERR(ret);
    }
    snprintf(ns, sizeof(ns), "%s.$cmd.listCollections", op->db);
    db_reply_array_cursor(op, ns, docs, batch_size, reply);
    docs = NULL;
done:
    shl_catalog_list_free(list, nl);
    shl_matcher_destroy(m);
    if (docs != NULL) {
        bson_destroy(docs);
    }
    return ret;
}

/* ---------------------------------------------------------------- listIndexes */

static const char *const list_indexes_fields[] = {"cursor", "collectionUUID", "includeBuildUUIDs",
                                                  "includeIndexBuildInfo", NULL};

static int
cmd_list_indexes(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    shl_ns_t ns;
    shl_collection_t *coll = NULL;
    bson_t *docs = NULL;
    int64_t batch_size = 0;
    char cns[2 * SHL_NS_MAX + 64];

    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, list_indexes_fields, st));
    SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
    SHL_ERR(db_sharding_check_no_filter(op, ns.full, SHL_DB_SHARD_CATALOG, st));
    SHL_ERR(db_cursor_batch_size(cmd, &batch_size, st));
    coll = db_txn_ns_hidden(op, ns.full) ? NULL : shl_catalog_get(node->eng, ns.full);
    if (coll == NULL) {
        SHL_ERR(db_refuse_view(op, &ns, st));
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "ns does not exist: %s", ns.full);
    }
    docs = bson_new();
    for (size_t i = 0; i < coll->nindexes; i++) {
        append_index(docs, (uint32_t)i, coll->indexes[i]->spec);
    }
    snprintf(cns, sizeof(cns), "%s.$cmd.listIndexes.%s", ns.db, ns.coll);
    db_reply_array_cursor(op, cns, docs, batch_size, reply);
    docs = NULL;
done:
    shl_collection_release(coll);
    if (docs != NULL) {
        bson_destroy(docs);
    }
    return ret;
}

static const shl_command_t list_commands[] = {
    {"listDatabases", {NULL}, cmd_list_databases, SHL_CMD_ADMIN_ONLY, "list databases"},
    {"listCollections", {NULL}, cmd_list_collections, SHL_CMD_IN_TXN, "list collections"},
    {"listIndexes", {NULL}, cmd_list_indexes, SHL_CMD_IN_TXN, "list indexes"},
};

void
db_register_list_commands(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(list_commands) / sizeof(list_commands[0]); i++) {
        shl_command_registry_add(reg, &list_commands[i]);
    }
}
