/*
 * db_sessions.c -- a data node's part of the logical session cache (seeds/001 "The logical
 * session cache", "Periodic cleanup of the session catalog and transactions table"): its
 * cursors (the sessions they were opened in, and killing them), the reap of expired
 * sessions' config.transactions and config.image_collection records, and on a node outside a
 * cluster (no --shardsvr / --configsvr) config.system.sessions itself, kept in its own config
 * database with the TTL index (MongoDB's SessionsCollectionRS / Standalone). Shards and
 * config servers persist into the cluster's sharded collection instead (sharding/).
 * Every write goes through the node's own commands, in-process.
 */
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/db_private.h"
#include "db/txn_participant.h"
#include "db/session_catalog.h"
#include "db/storage_api.h"
#include "net/service.h"
#include "session/logical_session_cache.h"
#include "session/sessions_collection.h"

/* Run 'cmd' on local database 'db' in-process; *reply always initialised. */
static int
local_cmd(db_node_t *node, const char *db, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_service_run_command(node->svc, NULL, cmd, db, reply);
    return shl_sessions_write_status(reply, st);
}

/* ---------------------------------------------------------------- the local collection */

static int
local_setup(void *arg, shl_status_t *st)
{
    db_node_t *node = arg;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    int ret = 0;

    /* The collection and its TTL index (createIndexes creates the collection); an index of
     * another timeout (localLogicalSessionTimeoutMinutes changed) is altered with collMod. */
    bson_destroy(&reply);
    shl_sessions_ttl_index_cmd(&cmd);
    ret = local_cmd(node, SHL_SESSIONS_DB, &cmd, &reply, st);
    if (ret == SHL_CODE_INDEX_OPTIONS_CONFLICT || ret == SHL_CODE_INDEX_KEY_SPECS_CONFLICT) {
        shl_status_clear(st);
        bson_reinit(&cmd);
        bson_destroy(&reply);
        shl_sessions_collmod_cmd(&cmd);
        ret = local_cmd(node, SHL_SESSIONS_DB, &cmd, &reply, st);
    }
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

static int
local_check(void *arg, shl_status_t *st)
{
    db_node_t *node = arg;
    shl_collection_t *c = shl_catalog_get(node->eng, SHL_SESSIONS_NS);
    int ret = 0;

    if (c == NULL) {
        ret = shl_status_set(st, SHL_CODE_NAMESPACE_NOT_FOUND, "Collection %s is not set up",
                             SHL_SESSIONS_NS);
    }
    shl_collection_release(c);
    return ret;
}

static int
local_refresh(void *arg, const shl_lsid_t *ids, size_t n, shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    int ret;

    shl_sessions_refresh_cmd(ids, n, &cmd);
    ret = local_cmd(arg, SHL_SESSIONS_DB, &cmd, &reply, st);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

static int
local_remove(void *arg, const shl_lsid_t *ids, size_t n, shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    int ret;

    shl_sessions_remove_cmd(ids, n, &cmd);
    ret = local_cmd(arg, SHL_SESSIONS_DB, &cmd, &reply, st);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

static int
local_find_removed(void *arg, const shl_lsid_t *ids, size_t n, bool *removed, shl_status_t *st)
{
    db_node_t *node = arg;
    bson_t cmd = BSON_INITIALIZER, reply;
    int ret;

    shl_sessions_find_cmd(ids, n, &cmd);
    shl_service_run_command(node->svc, NULL, &cmd, SHL_SESSIONS_DB, &reply);
    ret = shl_sessions_mark_found(&reply, ids, n, removed, st);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* ---------------------------------------------------------------- role callbacks */

static void
cursor_sessions(void *arg, void (*fn)(void *fn_arg, const shl_lsid_t *lsid), void *fn_arg)
{
    db_node_t *node = arg;

    shl_cursor_manager_sessions(node->cursors, fn, fn_arg);
}

static int
kill_cursors(void *arg, const shl_kill_matcher_t *m)
{
    db_node_t *node = arg;

    /* The sessions' open transactions end too (their cursors with them). */
    (void)db_txn_abort_sessions(node->txns, node->sessions, node->svc, shl_kill_matcher_match,
                                (void *)(uintptr_t)m);
    return shl_cursor_manager_kill_sessions(node->cursors, shl_kill_matcher_match,
                                            (void *)(uintptr_t)m);
}

/* One expired transaction record: its _id as stored, and the (parent) session it belongs to. */
typedef struct txn_record {
    bson_value_t id;
    shl_lsid_t lsid;
} txn_record_t;

typedef struct txn_records {
    txn_record_t *v;
    size_t n, cap;
} txn_records_t;

static void
records_cleanup(txn_records_t *r)
{
    for (size_t i = 0; i < r->n; i++) {
        bson_value_destroy(&r->v[i].id);
    }
    bson_free(r->v);
    memset(r, 0, sizeof(*r));
}

/* Collect the {_id} documents of one batch array; an _id that is not a session is skipped. */
static void
collect_batch(bson_iter_t *batch, txn_records_t *out)
{
    while (shl_iter_next(batch)) {
        bson_iter_t doc, f;
        bson_t view = BSON_INITIALIZER, parent = BSON_INITIALIZER;
        shl_status_t ignored = SHL_STATUS_INIT;
        const uint8_t *data;
        uint32_t len;
        txn_record_t rec;

        if (!BSON_ITER_HOLDS_DOCUMENT(batch) || !bson_iter_recurse(batch, &doc) ||
            !bson_iter_find(&doc, "_id") || !BSON_ITER_HOLDS_DOCUMENT(&doc)) {
            continue;
        }
        bson_iter_document(&doc, &len, &data);
        bson_destroy(&view);
        bson_init_static(&view, data, len);
        /* A child session's record ({id, uid, txnNumber?, txnUUID}) goes with its parent. */
        bson_iter_init(&f, &view);
        while (shl_iter_next(&f)) {
            if (strcmp(shl_iter_key(&f), "id") == 0 || strcmp(shl_iter_key(&f), "uid") == 0) {
                bson_append_iter(&parent, NULL, 0, &f);
            }
        }
        if (shl_lsid_parse(&parent, &rec.lsid, &ignored) == 0) {
            bson_value_copy(bson_iter_value(&doc), &rec.id);
            if (out->n == out->cap) {
                out->cap = out->cap == 0 ? 64 : out->cap * 2;
                out->v = bson_realloc(out->v, out->cap * sizeof(*out->v));
            }
            out->v[out->n++] = rec;
        }
        bson_destroy(&parent);
    }
}

/* The config.transactions records last written before 'cutoff_ms', in _id order (a find and
 * its getMores). */
static int
old_records(db_node_t *node, int64_t cutoff_ms, txn_records_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_t *cmd = BCON_NEW("find", BCON_UTF8("transactions"), "filter", "{", "lastWriteDate", "{",
                           "$lt", BCON_DATE_TIME(cutoff_ms), "}", "}", "sort", "{", "_id",
                           BCON_INT32(1), "}", "projection", "{", "_id", BCON_INT32(1), "}");
    bson_t reply = BSON_INITIALIZER;
    int64_t cursor_id = 0;
    const char *key = "firstBatch";

    for (;;) {
        bson_iter_t it, cur;
        bson_destroy(&reply);
        shl_service_run_command(node->svc, NULL, cmd, "config", &reply);
        SHL_ERR(shl_status_from_reply(&reply, st));
        cursor_id = 0;
        if (bson_iter_init_find(&it, &reply, "cursor") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
            bson_iter_recurse(&it, &cur)) {
            while (shl_iter_next(&cur)) {
                if (strcmp(shl_iter_key(&cur), "id") == 0) {
                    cursor_id = bson_iter_as_int64(&cur);
                } else if (strcmp(shl_iter_key(&cur), key) == 0 && BSON_ITER_HOLDS_ARRAY(&cur)) {
                    bson_iter_t batch;
                    bson_iter_recurse(&cur, &batch);
                    collect_batch(&batch, out);
                }
            }
        }
        if (cursor_id == 0) {
            break;
        }
        bson_destroy(cmd);
        cmd = BCON_NEW("getMore", BCON_INT64(cursor_id), "collection", BCON_UTF8("transactions"));
        key = "nextBatch";
    }
done:
    bson_destroy(cmd);
    bson_destroy(&reply);
    return ret;
}

/* Delete the records of 'ids' (their stored _id values) from config.<coll>, unordered. */
static int
delete_records(db_node_t *node, const char *coll, const txn_record_t *const *recs, size_t n,
               int64_t *deleted, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, arr, d, q, reply = BSON_INITIALIZER;
    bson_iter_t it;

    BSON_APPEND_UTF8(&cmd, "delete", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "deletes", &arr);
    for (size_t i = 0; i < n; i++) {
        char key[16];
        const char *k;
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
        BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &d);
        BSON_APPEND_DOCUMENT_BEGIN(&d, "q", &q);
        BSON_APPEND_VALUE(&q, "_id", &recs[i]->id);
        bson_append_document_end(&d, &q);
        BSON_APPEND_INT32(&d, "limit", 1);
        bson_append_document_end(&arr, &d);
    }
    bson_append_array_end(&cmd, &arr);
    BSON_APPEND_BOOL(&cmd, "ordered", false);
    bson_destroy(&reply);
    SHL_ERR(local_cmd(node, "config", &cmd, &reply, st));
    if (deleted != NULL && bson_iter_init_find(&it, &reply, "n")) {
        *deleted += bson_iter_as_int64(&it);
    }
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/*
 * MongoDB's reapSessionsOlderThan: records last written before the cutoff whose session is
 * gone from config.system.sessions lose their config.image_collection entry first, then their
 * config.transactions document (a failure in between leaves only a dangling image reference,
 * found again next time), and the session's state leaves the session catalog.
 */
static int
reap(void *arg, shl_lsc_t *lsc, int64_t cutoff_ms, int64_t *n, shl_status_t *st)
{
    db_node_t *node = arg;
    int ret = 0;
    txn_records_t recs = {0};
    shl_lsid_t *ids = NULL;
    bool *removed = NULL;
    const txn_record_t **gone = NULL;
    size_t ngone = 0;

    *n = 0;
    if (!shl_db_repl_is_primary(node->svc)) {
        goto done; /* a secondary's records follow the primary's deletes */
    }
    SHL_ERR(old_records(node, cutoff_ms, &recs, st));
    if (recs.n == 0) {
        goto done;
    }
    ids = bson_malloc0(recs.n * sizeof(*ids));
    removed = bson_malloc0(recs.n * sizeof(*removed));
    gone = bson_malloc0(recs.n * sizeof(*gone));
    for (size_t i = 0; i < recs.n; i++) {
        ids[i] = recs.v[i].lsid;
    }
    SHL_ERR(shl_lsc_find_removed(lsc, ids, recs.n, removed, st));
    for (size_t i = 0; i < recs.n; i++) {
        if (!removed[i]) {
            continue;
        }
        /* A session checked out or awaited keeps its record until a later reap. */
        if (node->sessions != NULL && !db_session_catalog_forget(node->sessions, &recs.v[i].lsid)) {
            continue;
        }
        gone[ngone++] = &recs.v[i];
    }
    for (size_t off = 0; off < ngone; off += SHL_SESSIONS_MAX_BATCH) {
        size_t k = ngone - off < SHL_SESSIONS_MAX_BATCH ? ngone - off : SHL_SESSIONS_MAX_BATCH;
        SHL_ERR(delete_records(node, "image_collection", gone + off, k, NULL, st));
        SHL_ERR(delete_records(node, "transactions", gone + off, k, n, st));
    }
done:
    bson_free(gone);
    bson_free(removed);
    bson_free(ids);
    records_cleanup(&recs);
    return ret;
}

/* ---------------------------------------------------------------- start-up */

int
db_sessions_init(db_node_t *node, shl_status_t *st)
{
    int ret = 0;
    shl_lsc_role_t role = {0};
    shl_lsc_t *lsc;

    role.cursor_sessions = cursor_sessions;
    role.kill_cursors = kill_cursors;
    role.reap = reap;
    role.arg = node;
    lsc = shl_lsc_new(node->svc, &role);
    /* Shards and config servers persist into the cluster's collection: their role sets it. */
    if (node->svc->role == SHL_ROLE_STANDALONE) {
        shl_sessions_coll_t coll = {local_setup,  local_check,        local_refresh,
                                    local_remove, local_find_removed, node};
        shl_lsc_set_collection(lsc, &coll);
        SHL_ERR(shl_lsc_start(lsc, st));
    }
done:
    return ret;
}
