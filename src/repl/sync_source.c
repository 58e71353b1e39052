/*
 * sync_source.c -- reading from a sync source for rollback and initial sync: a find whose
 * every batch is handed to a callback, the source's newest oplog entry, and appendOplogNote
 * there. docs/design/replication.md "Rollback", "Initial sync".
 */
#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "repl/repl_private.h"

int
repl_source_find(repl_coord_t *rc, const char *host, const char *db, const bson_t *cmd,
                 void (*fn)(const bson_t *doc, void *arg), void *arg, shl_status_t *st)
{
    shl_client_conn_t *conn = NULL;
    bson_t reply = BSON_INITIALIZER, more = BSON_INITIALIZER, cursor;
    const bson_t *req = cmd;
    char coll[256] = "";
    int64_t id = 1;
    bool first = true;
    int ret = 0;

    SHL_ERR(shl_conn_pool_checkout(rc->pool, host, REPL_SOURCE_TIMEOUT_MS, &conn, st));
    while (id != 0) {
        bson_iter_t it, b;
        bson_destroy(&reply);
        SHL_ERR(shl_client_conn_run(conn, db, req, REPL_SOURCE_TIMEOUT_MS, &reply, st));
        if (!shl_bson_get_subdoc(&reply, "cursor", &cursor) ||
            !bson_iter_init_find(&it, &cursor, "id")) {
            SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "find reply without a cursor");
        }
        id = bson_iter_as_int64(&it);
        if (first && bson_iter_init_find(&it, &cursor, "ns") && BSON_ITER_HOLDS_UTF8(&it)) {
            const char *dot = strchr(bson_iter_utf8(&it, NULL), '.');
            snprintf(coll, sizeof(coll), "%s", dot != NULL ? dot + 1 : "");
        }
        if (bson_iter_init_find(&it, &cursor, first ? "firstBatch" : "nextBatch") &&
            BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &b)) {
            while (bson_iter_next(&b)) {
                const uint8_t *data;
                uint32_t len;
                bson_t doc;
                if (BSON_ITER_HOLDS_DOCUMENT(&b)) {
                    bson_iter_document(&b, &len, &data);
                    if (bson_init_static(&doc, data, len)) {
                        fn(&doc, arg);
                    }
                }
            }
        }
        first = false;
        bson_reinit(&more);
        BSON_APPEND_INT64(&more, "getMore", id);
        BSON_APPEND_UTF8(&more, "collection", coll);
        req = &more;
    }
done:
    if (conn != NULL) {
        shl_conn_pool_checkin(rc->pool, conn);
    }
    bson_destroy(&reply);
    bson_destroy(&more);
    return ret;
}

/* The newest entry seen: its ts and term. */
typedef struct source_top {
    uint64_t ts;
    int64_t t;
} source_top_t;

static void
keep_ts(const bson_t *doc, void *arg)
{
    source_top_t *top = arg;
    uint64_t ts = repl_optime_ts(doc, "ts");
    bson_iter_t it;

    if (ts > top->ts) {
        top->ts = ts;
        top->t = bson_iter_init_find(&it, doc, "t") && BSON_ITER_HOLDS_NUMBER(&it)
                     ? bson_iter_as_int64(&it)
                     : -1;
    }
}

/* The newest entry of 'host''s oplog ('replicated': of the set's, local.* left out). */
static int
source_top(repl_coord_t *rc, const char *host, bool replicated, source_top_t *top,
           shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER, hint, proj;
    int ret;

    top->ts = 0;
    top->t = -1;
    BSON_APPEND_UTF8(&cmd, "find", "oplog.rs");
    if (replicated) {
        bson_t filter, ns, not;
        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "ns", &ns);
        BSON_APPEND_DOCUMENT_BEGIN(&ns, "$not", &not);
        BSON_APPEND_UTF8(&not, "$regex", "^local\\.");
        bson_append_document_end(&ns, &not);
        bson_append_document_end(&filter, &ns);
        bson_append_document_end(&cmd, &filter);
    }
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "hint", &hint);
    BSON_APPEND_INT32(&hint, "$natural", -1);
    bson_append_document_end(&cmd, &hint);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "projection", &proj);
    BSON_APPEND_INT32(&proj, "ts", 1);
    BSON_APPEND_INT32(&proj, "t", 1);
    bson_append_document_end(&cmd, &proj);
    BSON_APPEND_INT32(&cmd, "limit", 1);
    BSON_APPEND_BOOL(&cmd, "singleBatch", true);
    ret = repl_source_find(rc, host, "local", &cmd, keep_ts, top, st);
    bson_destroy(&cmd);
    return ret;
}

int
repl_source_top(repl_coord_t *rc, const char *host, uint64_t *top, shl_status_t *st)
{
    source_top_t t;
    int ret = source_top(rc, host, false, &t, st);

    *top = t.ts;
    return ret;
}

int
repl_source_top_replicated(repl_coord_t *rc, const char *host, uint64_t *top, int64_t *top_t,
                           shl_status_t *st)
{
    source_top_t t;
    int ret = source_top(rc, host, true, &t, st);

    *top = t.ts;
    *top_t = t.t;
    return ret;
}
