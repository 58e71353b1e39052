/*
 * cmd_stats.c -- sizes and checks: collStats, dbStats, dataSize (with keyPattern/min/max,
 * as the chunk splitter will use it) and validate (record store <-> index consistency:
 * every document's keys are in every index and every index entry points at a document).
 */
#include <stdarg.h>
#include <string.h>
#include <sys/statvfs.h>

#include "base/clock.h"
#include "base/options.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "bson/keystring.h"
#include "db/db_private.h"
#include "db/exec.h"
#include "db/sharding_hooks.h"
#include "db/storage_api.h"
#include "db/views.h"
#include "net/command_args.h"
#include "net/message.h"

static int
get_scale(const bson_t *cmd, int64_t *scale, shl_status_t *st)
{
    int ret = 0;
    bool found;
    *scale = 1;
    SHL_ERR(shl_cmd_get_int64(cmd, "scale", scale, &found, st));
    if (found && *scale < 1) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "scale has to be >= 1");
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- collStats */

static const char *const coll_stats_fields[] = {"scale", "verbose", "waitForLock", NULL};

static int
cmd_coll_stats(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    shl_ns_t ns;
    shl_collection_t *coll = NULL;
    int64_t scale, count, size, storage, index_total = 0;
    bson_t sizes, builds;

    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, coll_stats_fields, st));
    SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
    SHL_ERR(get_scale(cmd, &scale, st));
    coll = shl_catalog_get(node->eng, ns.full);
    if (coll == NULL) {
        SHL_ERR(db_refuse_view(op, &ns, st));
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "Collection [%s] not found.", ns.full);
    }
    count = shl_collection_num_records(coll);
    size = shl_collection_data_size(coll);
    storage = shl_storage_ident_size(node->eng, coll->ident);
    BSON_APPEND_UTF8(reply, "ns", ns.full);
    BSON_APPEND_INT64(reply, "size", size / scale);
    BSON_APPEND_INT64(reply, "count", count);
    if (count > 0) {
        BSON_APPEND_INT64(reply, "avgObjSize", size / count);
    }
    BSON_APPEND_INT64(reply, "numOrphanDocs", shl_db_orphan_count(op, coll->uuid));
    BSON_APPEND_INT64(reply, "storageSize", storage / scale);
    BSON_APPEND_INT64(reply, "freeStorageSize", 0);
    BSON_APPEND_BOOL(reply, "capped", coll->capped);
    if (coll->capped) {
        BSON_APPEND_INT64(reply, "max", coll->capped_max);
        BSON_APPEND_INT64(reply, "maxSize", coll->capped_size / scale);
    }
    BSON_APPEND_INT32(reply, "nindexes", (int32_t)coll->nindexes);
    BSON_APPEND_ARRAY_BEGIN(reply, "indexBuilds", &builds);
    bson_append_array_end(reply, &builds);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "indexSizes", &sizes);
    for (size_t i = 0; i < coll->nindexes; i++) {
        int64_t s = shl_storage_ident_size(node->eng, coll->indexes[i]->ident);
        index_total += s;
        BSON_APPEND_INT64(&sizes, coll->indexes[i]->name, s / scale);
    }
    bson_append_document_end(reply, &sizes);
    BSON_APPEND_INT64(reply, "totalIndexSize", index_total / scale);
    BSON_APPEND_INT64(reply, "totalSize", (storage + index_total) / scale);
    BSON_APPEND_INT64(reply, "scaleFactor", scale);
done:
    shl_collection_release(coll);
    return ret;
}

/* ---------------------------------------------------------------- dbStats */

static const char *const db_stats_fields[] = {"scale", "freeStorage", NULL};

static int
cmd_db_stats(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    int64_t scale, objects = 0, data = 0, storage = 0, indexes = 0, index_size = 0;
    shl_collection_t **list = NULL;
    size_t nl = 0;
    bool free_storage = false;

    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, db_stats_fields, st));
    SHL_ERR(get_scale(cmd, &scale, st));
    {
        bool found;
        int64_t fs = 0;
        SHL_ERR(shl_cmd_get_int64(cmd, "freeStorage", &fs, &found, st));
        free_storage = fs != 0;
    }
    shl_catalog_list(node->eng, op->db, &list, &nl);
    for (size_t i = 0; i < nl; i++) {
        objects += shl_collection_num_records(list[i]);
        data += shl_collection_data_size(list[i]);
        storage += shl_storage_ident_size(node->eng, list[i]->ident);
        indexes += (int64_t)list[i]->nindexes;
        for (size_t j = 0; j < list[i]->nindexes; j++) {
            index_size += shl_storage_ident_size(node->eng, list[i]->indexes[j]->ident);
        }
    }
    BSON_APPEND_UTF8(reply, "db", op->db);
    BSON_APPEND_INT64(reply, "collections", (int64_t)nl);
    BSON_APPEND_INT64(reply, "views", 0);
    BSON_APPEND_INT64(reply, "objects", objects);
    BSON_APPEND_DOUBLE(reply, "avgObjSize", objects > 0 ? (double)data / (double)objects : 0.0);
    BSON_APPEND_DOUBLE(reply, "dataSize", (double)(data / scale));
    BSON_APPEND_DOUBLE(reply, "storageSize", (double)(storage / scale));
    if (free_storage) {
        BSON_APPEND_DOUBLE(reply, "freeStorageSize", 0.0);
    }
    BSON_APPEND_INT64(reply, "indexes", indexes);
    BSON_APPEND_DOUBLE(reply, "indexSize", (double)(index_size / scale));
    BSON_APPEND_DOUBLE(reply, "totalSize", (double)((storage + index_size) / scale));
    BSON_APPEND_INT64(reply, "scaleFactor", scale);
    {
        /* The file system holding --dbpath, as mongod reports it. */
        struct statvfs fs;
        if (statvfs(shl_opt_str(SHL_OPT_dbpath), &fs) == 0) {
            double frag = (double)fs.f_frsize;
            BSON_APPEND_DOUBLE(reply, "fsUsedSize",
                               (double)(fs.f_blocks - fs.f_bfree) * frag / (double)scale);
            BSON_APPEND_DOUBLE(reply, "fsTotalSize", (double)fs.f_blocks * frag / (double)scale);
        }
    }
done:
    shl_catalog_list_free(list, nl);
    return ret;
}

/* ---------------------------------------------------------------- dataSize */

static const char *const data_size_fields[] = {"keyPattern", "min",        "max", "estimate",
                                               "maxSize",    "maxObjects", NULL};

/* KeyString of the values of 'bound' (fields in key pattern order, with its directions). */
static void
bound_key(const bson_t *pattern, const bson_t *bound, shl_keystring_t *ks)
{
    bson_iter_t p, b;
    bson_iter_init(&p, pattern);
    bson_iter_init(&b, bound);
    while (shl_iter_next(&p) && shl_iter_next(&b)) {
        bool desc = BSON_ITER_HOLDS_NUMBER(&p) && bson_iter_as_double(&p) < 0;
        shl_keystring_append_iter(ks, &b, desc);
    }
}

static int
cmd_data_size(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    bson_iter_t it;
    shl_ns_t ns;
    bson_t pattern, min, max;
    bool has_pattern, has_min, has_max, found;
    int64_t max_size = 0, max_objects = 0, size = 0, n = 0, t0 = shl_clock_mono_us();
    shl_coll_handle_t h;
    bool locked = false;
    shl_storage_txn_t *txn = NULL;
    exec_stage_t *plan = NULL;
    shl_keystring_t k0, k1;

    shl_keystring_init(&k0);
    shl_keystring_init(&k1);
    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, data_size_fields, st));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'dataSize.dataSize' is the wrong type '%s', expected type "
                 "'string'",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    SHL_ERR(shl_ns_parse(&ns, bson_iter_utf8(&it, NULL), st));
    SHL_ERR(shl_cmd_get_doc(cmd, "keyPattern", &pattern, &has_pattern, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "min", &min, &has_min, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "max", &max, &has_max, st));
    SHL_ERR(shl_cmd_get_int64(cmd, "maxSize", &max_size, &found, st));
    SHL_ERR(shl_cmd_get_int64(cmd, "maxObjects", &max_objects, &found, st));
    if (has_min != has_max) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "only one of min or max specified");
    }
    SHL_ERR(shl_storage_coll_acquire(node->eng, ns.full, SHL_LOCK_SHARED, &h, st));
    locked = true;
    if (h.coll == NULL) {
        /* MongoDB answers a missing collection with zero sizes. */
        goto reply;
    }
    if (!has_min && !has_pattern) {
        size = shl_collection_data_size(h.coll);
        n = shl_collection_num_records(h.coll);
        goto reply;
    }
    {
        const shl_index_t *idx = NULL;
        if (!has_pattern) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "no key pattern found in dataSize");
        }
        for (size_t i = 0; i < h.coll->nindexes && idx == NULL; i++) {
            /* An index whose key pattern starts with 'pattern' serves the range. */
            bson_iter_t a, b;
            bool prefix = true;
            bson_iter_init(&a, &pattern);
            bson_iter_init(&b, h.coll->indexes[i]->key_pattern);
            while (prefix && shl_iter_next(&a)) {
                prefix = shl_iter_next(&b) && strcmp(shl_iter_key(&a), shl_iter_key(&b)) == 0;
            }
            if (prefix) {
                idx = h.coll->indexes[i];
            }
        }
        if (idx == NULL) {
            SHL_FAIL(st, SHL_CODE_OPERATION_FAILED,
                     "couldn't find valid index containing key pattern");
        }
        if (has_min) {
            bound_key(idx->key_pattern, &min, &k0);
            bound_key(idx->key_pattern, &max, &k1);
        }
        {
            shl_key_bound_t b0 = {has_min ? k0.data : NULL, k0.len};
            shl_key_bound_t b1 = {has_max ? k1.data : NULL, k1.len};
            exec_ctx_t ctx;
            /* A size estimate: prepared writes are passed over, not waited for (the
             * config server's moveRange checks sizes while transactions may be prepared). */
            shl_storage_txn_opts_t o = {.ignore_prepare = true};
            plan = exec_fetch_new(exec_ixscan_new(idx, &b0, &b1, true, ""), h.coll, NULL);
            SHL_ERR(shl_storage_txn_begin(node->eng, &o, &txn, st));
            ctx.op = op;
            ctx.txn = txn;
            for (;;) {
                exec_row_t row;
                bool eof;
                SHL_ERR(exec_stage_next(plan, &ctx, &row, &eof, st));
                if (eof) {
                    break;
                }
                size += row.doc->len;
                n++;
                if ((max_size > 0 && size > max_size) || (max_objects > 0 && n > max_objects)) {
                    break;
                }
            }
        }
    }
reply:
    BSON_APPEND_BOOL(reply, "estimate", false);
    BSON_APPEND_INT64(reply, "size", size);
    BSON_APPEND_INT64(reply, "numObjects", n);
    BSON_APPEND_INT64(reply, "millis", (shl_clock_mono_us() - t0) / 1000);
done:
    exec_stage_destroy(plan);
    shl_storage_txn_abort(txn);
    if (locked) {
        shl_storage_coll_release(&h);
    }
    shl_keystring_cleanup(&k0);
    shl_keystring_cleanup(&k1);
    return ret;
}

/* ---------------------------------------------------------------- validate */

static const char *const validate_fields[] = {
    "full",     "background", "repair", "metadata", "checkBSONConformance", "enforceFastCount",
    "scandata", NULL};

typedef struct vstate {
    int64_t nrecords;
    int64_t data_size;
    int64_t *keys;    /* per index: keys the documents generate */
    int64_t *entries; /* per index: entries found in the index */
    int64_t missing;  /* document keys absent from their index */
    int64_t extra;    /* index entries pointing at no document */
    int64_t invalid_docs;
    bson_t errors;
    uint32_t nerrors;
} vstate_t;

static void add_error(vstate_t *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
add_error(vstate_t *v, const char *fmt, ...)
{
    char msg[512], k[16];
    const char *kp;
    va_list ap;
    if (v->nerrors >= 100) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    bson_uint32_to_string(v->nerrors++, &kp, k, sizeof(k));
    bson_append_utf8(&v->errors, kp, -1, msg, -1);
}

/* Is (key, rid) present in 'idx'? */
static int
has_entry(shl_storage_txn_t *txn, const shl_index_t *idx, const uint8_t *key, size_t len,
          int64_t rid, bool *present, shl_status_t *st)
{
    int ret = 0;
    *present = false;
    if (idx->unique) {
        int64_t got;
        bool found;
        SHL_ERR(shl_index_lookup(txn, idx, key, len, &got, &found, st));
        *present = found && got == rid;
    } else {
        shl_keystring_t a, b;
        shl_index_cursor_t *c = NULL;
        shl_keystring_init(&a);
        shl_keystring_init(&b);
        /* [key || rid, key || rid+1): exactly this entry. */
        a.data = bson_malloc(len + SHL_KEYSTRING_RECORD_ID_SIZE + 16);
        a.cap = len + SHL_KEYSTRING_RECORD_ID_SIZE + 16;
        memcpy(a.data, key, len);
        a.len = len;
        shl_keystring_append_record_id(&a, rid);
        b.data = bson_malloc(len + SHL_KEYSTRING_RECORD_ID_SIZE + 16);
        b.cap = len + SHL_KEYSTRING_RECORD_ID_SIZE + 16;
        memcpy(b.data, key, len);
        b.len = len;
        shl_keystring_append_record_id(&b, rid + 1);
        {
            shl_key_bound_t b0 = {a.data, a.len}, b1 = {b.data, b.len};
            ret = shl_index_cursor_open(txn, idx, &b0, &b1, true, &c, st);
            if (ret == 0) {
                int64_t got;
                bool eof = true;
                ret = shl_index_cursor_next(c, &got, NULL, NULL, &eof, st);
                *present = ret == 0 && !eof && got == rid;
            }
        }
        shl_index_cursor_close(c);
        shl_keystring_cleanup(&a);
        shl_keystring_cleanup(&b);
    }
done:
    return ret;
}

static int
validate_collection(shl_op_ctx_t *op, shl_storage_txn_t *txn, const shl_collection_t *coll,
                    vstate_t *v, shl_status_t *st)
{
    int ret = 0;
    shl_record_cursor_t *rc = NULL;
    shl_keyset_t ks;

    shl_keyset_init(&ks);
    SHL_ERR(shl_record_cursor_open(txn, coll, true, &rc, st));
    for (;;) {
        int64_t rid;
        bson_t doc;
        bool eof = false;

        if ((v->nrecords & 127) == 0) {
            SHL_ERR(shl_op_check_interrupt(op, st));
        }
        SHL_ERR(shl_record_cursor_next(rc, &rid, &doc, &eof, st));
        if (eof) {
            break;
        }
        v->nrecords++;
        v->data_size += doc.len;
        /* MongoDB's validate checks structure, not UTF-8 (unless checkBSONConformance):
         * a field name that is not UTF-8 was accepted on insert and is not corruption. */
        if (shl_msg_check_bson(bson_get_data(&doc), doc.len, &(shl_status_t){0}) != 0) {
            v->invalid_docs++;
            add_error(v, "invalid BSON in record %lld", (long long)rid);
            continue;
        }
        for (size_t i = 0; i < coll->nindexes; i++) {
            const shl_index_t *idx = coll->indexes[i];
            shl_status_t kst = SHL_STATUS_INIT;
            shl_keyset_clear(&ks);
            if (shl_index_keys_for_doc(idx, &doc, &ks, &kst) != 0) {
                add_error(v, "cannot generate keys of index %s for record %lld", idx->name,
                          (long long)rid);
                continue;
            }
            v->keys[i] += (int64_t)ks.n;
            for (size_t k = 0; k < ks.n; k++) {
                size_t len;
                const uint8_t *key = shl_keyset_key(&ks, k, &len);
                bool present;
                SHL_ERR(has_entry(txn, idx, key, len, rid, &present, st));
                if (!present) {
                    v->missing++;
                    add_error(v, "index %s is missing a key of record %lld", idx->name,
                              (long long)rid);
                }
            }
        }
    }
    shl_record_cursor_close(rc);
    rc = NULL;
    /* Count entries and check each one names an existing record. */
    for (size_t i = 0; i < coll->nindexes; i++) {
        shl_index_cursor_t *c = NULL;
        shl_key_bound_t none = {NULL, 0};
        SHL_ERR(shl_index_cursor_open(txn, coll->indexes[i], &none, &none, true, &c, st));
        for (;;) {
            int64_t rid;
            bool eof = false, found = false;
            bson_t doc;
            ret = shl_index_cursor_next(c, &rid, NULL, NULL, &eof, st);
            if (ret != 0 || eof) {
                break;
            }
            v->entries[i]++;
            ret = shl_record_get(txn, coll, rid, &doc, &found, st);
            bson_destroy(&doc);
            if (ret != 0) {
                break;
            }
            if (!found) {
                v->extra++;
                add_error(v, "index %s has an entry for missing record %lld",
                          coll->indexes[i]->name, (long long)rid);
            }
        }
        shl_index_cursor_close(c);
        SHL_ERR(ret);
        if (v->entries[i] != v->keys[i]) {
            add_error(v, "index %s has %lld entries but the documents have %lld keys",
                      coll->indexes[i]->name, (long long)v->entries[i], (long long)v->keys[i]);
        }
    }
done:
    shl_record_cursor_close(rc);
    shl_keyset_cleanup(&ks);
    return ret;
}

static int
cmd_validate(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    shl_ns_t ns;
    shl_coll_handle_t h;
    bool locked = false, enforce = false, valid;
    shl_storage_txn_t *txn = NULL;
    vstate_t v;
    bson_t sub, empty, warnings = BSON_INITIALIZER;

    db_cmd_begin(op);
    memset(&v, 0, sizeof(v));
    bson_init(&v.errors);
    SHL_ERR(shl_cmd_check_fields(cmd, validate_fields, st));
    SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "enforceFastCount", &enforce, st));
    {
        bool repair = false;
        SHL_ERR(shl_cmd_get_bool(cmd, "repair", &repair, st));
        if (repair) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "validate.repair is not supported yet");
        }
    }
    /* Exclusive, as MongoDB's foreground validate: the counts it finds are the
     * collection's, so it can correct the fast count. */
    SHL_ERR(shl_storage_coll_acquire(node->eng, ns.full, SHL_LOCK_EXCLUSIVE, &h, st));
    locked = true;
    if (h.coll == NULL) {
        SHL_ERR(db_refuse_view(op, &ns, st));
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "Collection '%s' does not exist to validate.",
                 ns.full);
    }
    v.keys = bson_malloc0((h.coll->nindexes + 1) * sizeof(int64_t));
    v.entries = bson_malloc0((h.coll->nindexes + 1) * sizeof(int64_t));
    SHL_ERR(shl_storage_txn_begin(node->eng, NULL, &txn, st));
    SHL_ERR(validate_collection(op, txn, h.coll, &v, st));
    if (enforce && v.nrecords != shl_collection_num_records(h.coll)) {
        add_error(&v, "fast count %lld disagrees with the number of records %lld",
                  (long long)shl_collection_num_records(h.coll), (long long)v.nrecords);
    } else if (v.nerrors == 0 && (v.nrecords != shl_collection_num_records(h.coll) ||
                                  v.data_size != shl_collection_data_size(h.coll))) {
        /* Counts persist at checkpoints only, so a crash can leave them off: correct them
         * (MongoDB's validate does the same). */
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "fast count and size were %lld records / %lld bytes; corrected to %lld / %lld",
                 (long long)shl_collection_num_records(h.coll),
                 (long long)shl_collection_data_size(h.coll), (long long)v.nrecords,
                 (long long)v.data_size);
        shl_collection_set_counts(h.coll, v.nrecords, v.data_size);
        BSON_APPEND_UTF8(&warnings, "0", msg);
    }
    valid = v.nerrors == 0;

    BSON_APPEND_UTF8(reply, "ns", ns.full);
    shl_bson_append_uuid(reply, "uuid", h.coll->uuid);
    BSON_APPEND_INT64(reply, "nInvalidDocuments", v.invalid_docs);
    BSON_APPEND_INT64(reply, "nNonCompliantDocuments", 0);
    BSON_APPEND_INT64(reply, "nrecords", v.nrecords);
    BSON_APPEND_INT32(reply, "nIndexes", (int32_t)h.coll->nindexes);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "keysPerIndex", &sub);
    for (size_t i = 0; i < h.coll->nindexes; i++) {
        BSON_APPEND_INT64(&sub, h.coll->indexes[i]->name, v.entries[i]);
    }
    bson_append_document_end(reply, &sub);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "indexDetails", &sub);
    for (size_t i = 0; i < h.coll->nindexes; i++) {
        bson_t d;
        BSON_APPEND_DOCUMENT_BEGIN(&sub, h.coll->indexes[i]->name, &d);
        BSON_APPEND_BOOL(&d, "valid", v.entries[i] == v.keys[i]);
        bson_append_document_end(&sub, &d);
    }
    bson_append_document_end(reply, &sub);
    BSON_APPEND_BOOL(reply, "valid", valid);
    BSON_APPEND_BOOL(reply, "repaired", false);
    bson_init(&empty);
    BSON_APPEND_ARRAY(reply, "warnings", &warnings);
    BSON_APPEND_ARRAY(reply, "errors", &v.errors);
    BSON_APPEND_ARRAY(reply, "extraIndexEntries", &empty);
    BSON_APPEND_ARRAY(reply, "missingIndexEntries", &empty);
    BSON_APPEND_ARRAY(reply, "corruptRecords", &empty);
    bson_destroy(&empty);
done:
    shl_storage_txn_abort(txn);
    if (locked) {
        shl_storage_coll_release(&h);
    }
    bson_free(v.keys);
    bson_free(v.entries);
    bson_destroy(&v.errors);
    bson_destroy(&warnings);
    return ret;
}

static const shl_command_t stats_commands[] = {
    {"collStats", {NULL}, cmd_coll_stats, 0, "collection statistics"},
    {"dbStats", {NULL}, cmd_db_stats, 0, "database statistics"},
    {"dataSize", {"datasize", NULL}, cmd_data_size, 0, "bytes of a collection or key range"},
    {"validate", {NULL}, cmd_validate, 0, "check a collection's records and indexes"},
};

void
db_register_stats_commands(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(stats_commands) / sizeof(stats_commands[0]); i++) {
        shl_command_registry_add(reg, &stats_commands[i]);
    }
}
