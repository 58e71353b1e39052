/*
 * ttl.c -- the TTL monitor of a data node (MongoDB's TTLMonitor): every
 * ttlMonitorSleepSecs, while ttlMonitorEnabled, each expireAfterSeconds index deletes
 * the documents whose indexed date (an array's earliest date) is older than now minus
 * expireAfterSeconds, through the normal delete path so oplog entries are written.
 */
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "db/db_private.h"
#include "db/exec.h"
#include "db/index_kinds.h"
#include "db/storage_api.h"
#include "storage/write.h"

typedef struct ttl_unit {
    shl_collection_t *coll;
    const char *ns;
    exec_query_t *q;
    int64_t n;
} ttl_unit_t;

static int
ttl_unit_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    ttl_unit_t *u = arg;
    exec_plan_t *plan = NULL;
    int ret = 0;

    u->n = 0;
    SHL_ERR(exec_plan_build(shl_storage_txn_engine(txn), txn, 0, u->coll, u->ns, u->q, &plan, st));
    for (;;) {
        exec_row_t row;
        bool eof;
        SHL_ERR(exec_plan_next(plan, NULL, &row, &eof, st));
        if (eof) {
            break;
        }
        SHL_ERR(shl_doc_delete(txn, u->coll, row.rid, row.doc, NULL, st));
        u->n++;
    }
done:
    exec_plan_destroy(plan);
    return ret;
}

int
db_delete_matching(db_node_t *node, const char *ns, const bson_t *filter, const char *index,
                   int64_t *deleted, shl_status_t *st)
{
    shl_coll_handle_t h;
    bool locked = false;
    exec_query_t q;
    ttl_unit_t u = {0};
    int ret = 0;

    *deleted = 0;
    memset(&q, 0, sizeof(q));
    SHL_ERR(exec_query_init(&q, filter, NULL, NULL, st));
    if (index != NULL) {
        q.has_hint = true;
        q.hint_hidden_ok = true; /* a hidden TTL index still expires documents */
        q.hint.value_type = BSON_TYPE_UTF8;
        q.hint.value.v_utf8.str = (char *)(uintptr_t)index;
        q.hint.value.v_utf8.len = (uint32_t)strlen(index);
    }
    SHL_ERR(shl_storage_coll_acquire(node->eng, ns, SHL_LOCK_SHARED, &h, st));
    locked = true;
    if (h.coll == NULL || (index != NULL && shl_collection_find_index(h.coll, index) == NULL)) {
        goto done; /* dropped meanwhile */
    }
    u.coll = h.coll;
    u.ns = ns;
    u.q = &q;
    SHL_ERR(shl_storage_write_retry(node->eng, ttl_unit_fn, &u, NULL, st));
    *deleted = u.n;
done:
    if (locked) {
        shl_storage_coll_release(&h);
    }
    exec_query_cleanup(&q);
    return ret;
}

/* Delete the expired documents of one TTL index; returns how many. */
static int64_t
ttl_delete(db_node_t *node, const char *ns, char *index, const char *field, int64_t secs)
{
    shl_status_t st;
    bson_t filter = BSON_INITIALIZER, cond;
    int64_t cutoff = shl_clock_wall_ms() - secs * 1000, n = 0;

    shl_status_clear(&st);
    bson_append_document_begin(&filter, field, -1, &cond);
    BSON_APPEND_DATE_TIME(&cond, "$lt", cutoff);
    bson_append_document_end(&filter, &cond);
    if (db_delete_matching(node, ns, &filter, index, &n, &st) != 0) {
        SHL_LOG_WARNING(STORAGE, 22542, "Error processing TTL index", "namespace", BCON_UTF8(ns),
                        "index", BCON_UTF8(index), "error", BCON_UTF8(st.reason));
        n = 0;
    } else if (n > 0) {
        SHL_LOG_INFO(STORAGE, 5479200, "Deleted expired documents using index", "namespace",
                     BCON_UTF8(ns), "index", BCON_UTF8(index), "numDeleted", BCON_INT64(n));
    }
    bson_destroy(&filter);
    return n;
}

/* One pass over every TTL index of every collection. */
static void
ttl_pass(db_node_t *node)
{
    shl_collection_t **list = NULL;
    size_t n = 0;

    shl_catalog_list(node->eng, NULL, &list, &n);
    for (size_t i = 0; i < n; i++) {
        const shl_collection_t *c = list[i];
        if (c->is_oplog || c->capped) {
            continue;
        }
        for (size_t j = 0; j < c->nindexes; j++) {
            int64_t secs;
            const char *field;
            if (db_index_ttl_seconds(c->indexes[j]->spec, &secs, &field)) {
                char *name = bson_strdup(c->indexes[j]->name);
                int64_t d = ttl_delete(node, c->ns, name, field, secs);
                bson_free(name);
                __atomic_add_fetch(&node->ttl_deleted, d, __ATOMIC_RELAXED);
            }
        }
    }
    shl_catalog_list_free(list, n);
    __atomic_add_fetch(&node->ttl_passes, 1, __ATOMIC_RELAXED);
}

void *
db_ttl_main(void *arg)
{
    db_node_t *node = arg;

    shl_log_set_thread_ctx("TTLMonitor");
    pthread_mutex_lock(&node->reaper_lock);
    while (!node->reaper_stop) {
        struct timespec ts;
        int64_t secs = shl_opt_int(SHL_OPT_ttlMonitorSleepSecs);

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += secs > 0 ? secs : 1;
        pthread_cond_timedwait(&node->reaper_cond, &node->reaper_lock, &ts);
        if (node->reaper_stop) {
            break;
        }
        pthread_mutex_unlock(&node->reaper_lock);
        /* As MongoDB's: only a primary deletes; secondaries apply its deletes. */
        if (shl_opt_bool(SHL_OPT_ttlMonitorEnabled) && shl_db_repl_is_primary(node->svc)) {
            ttl_pass(node);
        }
        pthread_mutex_lock(&node->reaper_lock);
    }
    pthread_mutex_unlock(&node->reaper_lock);
    return NULL;
}
