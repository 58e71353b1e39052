/*
 * sessions_collection.c -- the commands every config.system.sessions implementation sends
 * (sessions_collection.h).
 */
#include "session/sessions_collection.h"

#include <string.h>

#include "base/options.h"
#include "bson/bson_iter.h"

static void
append_majority(bson_t *cmd)
{
    bson_t wc;

    BSON_APPEND_DOCUMENT_BEGIN(cmd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    BSON_APPEND_INT32(&wc, "wtimeout", SHL_SESSIONS_WTIMEOUT_MS);
    bson_append_document_end(cmd, &wc);
}

void
shl_sessions_id_doc(const shl_lsid_t *lsid, bson_t *doc)
{
    shl_lsid_append(doc, "_id", lsid);
}

void
shl_sessions_refresh_cmd(const shl_lsid_t *ids, size_t n, bson_t *cmd)
{
    bson_t arr, u, q, pipe, set, fields;
    char key[16];
    const char *k;

    BSON_APPEND_UTF8(cmd, "update", SHL_SESSIONS_COLL);
    BSON_APPEND_ARRAY_BEGIN(cmd, "updates", &arr);
    for (size_t i = 0; i < n; i++) {
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
        BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &u);
        BSON_APPEND_DOCUMENT_BEGIN(&u, "q", &q);
        shl_sessions_id_doc(&ids[i], &q);
        bson_append_document_end(&u, &q);
        /* [{$set: {lastUse: "$$NOW"}}]: the storing node's clock, as MongoDB's. */
        BSON_APPEND_ARRAY_BEGIN(&u, "u", &pipe);
        BSON_APPEND_DOCUMENT_BEGIN(&pipe, "0", &set);
        BSON_APPEND_DOCUMENT_BEGIN(&set, "$set", &fields);
        BSON_APPEND_UTF8(&fields, "lastUse", "$$NOW");
        bson_append_document_end(&set, &fields);
        bson_append_document_end(&pipe, &set);
        bson_append_array_end(&u, &pipe);
        BSON_APPEND_BOOL(&u, "upsert", true);
        bson_append_document_end(&arr, &u);
    }
    bson_append_array_end(cmd, &arr);
    BSON_APPEND_BOOL(cmd, "ordered", false);
    append_majority(cmd);
}

void
shl_sessions_remove_cmd(const shl_lsid_t *ids, size_t n, bson_t *cmd)
{
    bson_t arr, d, q;
    char key[16];
    const char *k;

    BSON_APPEND_UTF8(cmd, "delete", SHL_SESSIONS_COLL);
    BSON_APPEND_ARRAY_BEGIN(cmd, "deletes", &arr);
    for (size_t i = 0; i < n; i++) {
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
        BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &d);
        BSON_APPEND_DOCUMENT_BEGIN(&d, "q", &q);
        shl_sessions_id_doc(&ids[i], &q);
        bson_append_document_end(&d, &q);
        BSON_APPEND_INT32(&d, "limit", 1);
        bson_append_document_end(&arr, &d);
    }
    bson_append_array_end(cmd, &arr);
    BSON_APPEND_BOOL(cmd, "ordered", false);
    append_majority(cmd);
}

void
shl_sessions_find_cmd(const shl_lsid_t *ids, size_t n, bson_t *cmd)
{
    bson_t filter, id, in, proj, rc;
    char key[16];
    const char *k;

    BSON_APPEND_UTF8(cmd, "find", SHL_SESSIONS_COLL);
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "filter", &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &id);
    BSON_APPEND_ARRAY_BEGIN(&id, "$in", &in);
    for (size_t i = 0; i < n; i++) {
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
        shl_lsid_append(&in, k, &ids[i]);
    }
    bson_append_array_end(&id, &in);
    bson_append_document_end(&filter, &id);
    bson_append_document_end(cmd, &filter);
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "projection", &proj);
    BSON_APPEND_INT32(&proj, "_id", 1);
    bson_append_document_end(cmd, &proj);
    BSON_APPEND_INT64(cmd, "batchSize", (int64_t)(n > 0 ? n : 1));
    BSON_APPEND_INT64(cmd, "limit", (int64_t)(n > 0 ? n : 1));
    BSON_APPEND_BOOL(cmd, "singleBatch", true);
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "readConcern", &rc);
    BSON_APPEND_UTF8(&rc, "level", "local");
    bson_append_document_end(cmd, &rc);
}

static int64_t
ttl_seconds(void)
{
    return shl_opt_int(SHL_OPT_localLogicalSessionTimeoutMinutes) * 60;
}

void
shl_sessions_ttl_index_cmd(bson_t *cmd)
{
    bson_t arr, spec, key;

    BSON_APPEND_UTF8(cmd, "createIndexes", SHL_SESSIONS_COLL);
    BSON_APPEND_ARRAY_BEGIN(cmd, "indexes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &spec);
    BSON_APPEND_DOCUMENT_BEGIN(&spec, "key", &key);
    BSON_APPEND_INT32(&key, "lastUse", 1);
    bson_append_document_end(&spec, &key);
    BSON_APPEND_UTF8(&spec, "name", SHL_SESSIONS_TTL_INDEX);
    BSON_APPEND_INT32(&spec, "expireAfterSeconds", (int32_t)ttl_seconds());
    bson_append_document_end(&arr, &spec);
    bson_append_array_end(cmd, &arr);
}

void
shl_sessions_collmod_cmd(bson_t *cmd)
{
    bson_t index;

    BSON_APPEND_UTF8(cmd, "collMod", SHL_SESSIONS_COLL);
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "index", &index);
    BSON_APPEND_UTF8(&index, "name", SHL_SESSIONS_TTL_INDEX);
    BSON_APPEND_INT64(&index, "expireAfterSeconds", ttl_seconds());
    bson_append_document_end(cmd, &index);
}

int
shl_sessions_write_status(const bson_t *reply, shl_status_t *st)
{
    int ret = 0;

    SHL_ERR(shl_status_from_reply(reply, st));
    SHL_ERR(shl_status_from_write_errors(reply, st));
    SHL_ERR(shl_status_from_write_concern_error(reply, st));
done:
    return ret;
}

int
shl_sessions_mark_found(const bson_t *reply, const shl_lsid_t *ids, size_t n, bool *removed,
                        shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, cur, batch, doc;

    SHL_ERR(shl_status_from_reply(reply, st));
    if (!bson_iter_init_find(&it, reply, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &cur) || !bson_iter_find(&cur, "firstBatch") ||
        !BSON_ITER_HOLDS_ARRAY(&cur) || !bson_iter_recurse(&cur, &batch)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "a find reply without cursor.firstBatch");
    }
    while (shl_iter_next(&batch)) {
        bson_t view;
        shl_lsid_t lsid;
        shl_status_t ignored = SHL_STATUS_INIT;
        const uint8_t *data;
        uint32_t len;
        if (!BSON_ITER_HOLDS_DOCUMENT(&batch) || !bson_iter_recurse(&batch, &doc) ||
            !bson_iter_find(&doc, "_id") || !BSON_ITER_HOLDS_DOCUMENT(&doc)) {
            continue;
        }
        bson_iter_document(&doc, &len, &data);
        if (!bson_init_static(&view, data, len) || shl_lsid_parse(&view, &lsid, &ignored) != 0) {
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            if (shl_lsid_equal(&ids[i], &lsid)) {
                removed[i] = false;
            }
        }
    }
done:
    return ret;
}
