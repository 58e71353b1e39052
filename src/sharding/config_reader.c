/*
 * config_reader.c -- see config_reader.h. A find with a large batch size, then getMore
 * while the server keeps the cursor open.
 */
#include "bson/bson_iter.h"
#include "sharding/config_reader.h"

#include <string.h>

static void
docs_push(shl_config_docs_t *out, const bson_t *doc, size_t *cap)
{
    if (out->n == *cap) {
        *cap = *cap == 0 ? 16 : *cap * 2;
        out->docs = bson_realloc(out->docs, *cap * sizeof(bson_t *));
    }
    out->docs[out->n++] = bson_copy(doc);
}

/* Append the documents of reply.cursor.<batch_field> and read the cursor id. */
static int
take_batch(const bson_t *reply, const char *batch_field, shl_config_docs_t *out, size_t *cap,
           int64_t *cursor_id, shl_status_t *st)
{
    bson_iter_t it, cur, batch;
    int ret = 0;

    *cursor_id = 0;
    if (!bson_iter_init_find(&it, reply, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &cur)) {
        SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "config server reply without a cursor");
    }
    while (shl_iter_next(&cur)) {
        const char *k = shl_iter_key(&cur);
        if (strcmp(k, "id") == 0 && BSON_ITER_HOLDS_INT64(&cur)) {
            *cursor_id = bson_iter_int64(&cur);
        } else if (strcmp(k, batch_field) == 0 && BSON_ITER_HOLDS_ARRAY(&cur) &&
                   bson_iter_recurse(&cur, &batch)) {
            while (shl_iter_next(&batch)) {
                const uint8_t *data;
                uint32_t len;
                bson_t doc;
                if (!BSON_ITER_HOLDS_DOCUMENT(&batch)) {
                    SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR,
                             "config server batch holds a non-document");
                }
                bson_iter_document(&batch, &len, &data);
                if (!bson_init_static(&doc, data, len)) {
                    SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR,
                             "config server sent a malformed document");
                }
                docs_push(out, &doc, cap);
            }
        }
    }
done:
    return ret;
}

int
shl_config_read(shl_conn_pool_t *pool, const char *host, const char *coll, const bson_t *filter,
                const bson_t *sort, shl_config_docs_t *out, shl_status_t *st)
{
    return shl_config_read_db(pool, host, "config", coll, filter, sort, out, st);
}

int
shl_config_read_db(shl_conn_pool_t *pool, const char *host, const char *db, const char *coll,
                   const bson_t *filter, const bson_t *sort, shl_config_docs_t *out,
                   shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    shl_client_conn_t *conn = NULL;
    size_t cap = 0;
    int64_t cursor_id = 0;
    int ret = 0;

    memset(out, 0, sizeof(*out));
    SHL_ERR(shl_conn_pool_checkout(pool, host, SHL_CONFIG_READ_TIMEOUT_MS, &conn, st));
    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_DOCUMENT(&cmd, "filter", filter);
    if (sort != NULL) {
        BSON_APPEND_DOCUMENT(&cmd, "sort", sort);
    }
    BSON_APPEND_INT32(&cmd, "batchSize", 100000);
    bson_destroy(&reply);
    SHL_ERR(shl_client_conn_run(conn, db, &cmd, SHL_CONFIG_READ_TIMEOUT_MS, &reply, st));
    SHL_ERR(take_batch(&reply, "firstBatch", out, &cap, &cursor_id, st));
    while (cursor_id != 0) {
        bson_reinit(&cmd);
        BSON_APPEND_INT64(&cmd, "getMore", cursor_id);
        BSON_APPEND_UTF8(&cmd, "collection", coll);
        BSON_APPEND_INT32(&cmd, "batchSize", 100000);
        bson_destroy(&reply);
        SHL_ERR(shl_client_conn_run(conn, db, &cmd, SHL_CONFIG_READ_TIMEOUT_MS, &reply, st));
        SHL_ERR(take_batch(&reply, "nextBatch", out, &cap, &cursor_id, st));
    }
done:
    shl_conn_pool_checkin(pool, conn);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    if (ret != 0) {
        shl_config_docs_cleanup(out);
    }
    return ret;
}

void
shl_config_docs_cleanup(shl_config_docs_t *docs)
{
    for (size_t i = 0; i < docs->n; i++) {
        bson_destroy(docs->docs[i]);
    }
    bson_free(docs->docs);
    memset(docs, 0, sizeof(*docs));
}
