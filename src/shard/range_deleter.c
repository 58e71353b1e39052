/*
 * range_deleter.c -- orphaned range deletion on a shard (range_deleter.h; seeds/000
 * "Orphaned range deletion" and "Orphan filtering"): the config.rangeDeletions task
 * documents (MongoDB 7.0's RangeDeletionTask), written through the node's own commands with
 * a journaled write concern, and the deleter thread that runs the tasks which are not
 * pending: wait for the queries that may still read the range (metadata objects that gave
 * this shard part of it), then orphanCleanupDelaySecs for "delayed" tasks, then delete the
 * range in batches through the storage write path (oplog entries carry fromMigrate: true),
 * then remove the task document.
 */
#include "bson/bson_iter.h"
#include "shard/range_deleter.h"

#include <limits.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "base/namespace.h"
#include "base/options.h"
#include "bson/bson_util.h"
#include "bson/keystring.h"
#include "net/command_args.h"
#include "net/service.h"
#include "shard/migration_private.h"
#include "db/repl_hooks.h"
#include "shard/shard_private.h"
#include "sharding/shard_key.h"
#include "storage/catalog.h"
#include "storage/index.h"
#include "storage/record_store.h"
#include "storage/write.h"

#define RD_DB "config"
#define RD_COLL "rangeDeletions"
#define RD_NS "config.rangeDeletions"
#define RD_INDEX_NAME "collectionUuid_1_range.min_1_range.max_1"
#define RD_CTX "rangeDeletionTask"

/* MongoDB 7.0's rangeDeleterBatchSize default (INT_MAX) means "the whole range in one batch",
 * with no rangeDeleterBatchDelayMS pause inside it. Shale keeps each write unit bounded: that
 * value (and <= 0) deletes the range in units of RD_UNBOUNDED_UNIT documents without pauses;
 * a set value is the batch size (capped at RD_BATCH_CAP), with the pause between batches. */
#define RD_UNBOUNDED_UNIT 512
#define RD_BATCH_CAP 10000
/* How often the idle thread looks at config.rangeDeletions (documents written by other
 * means than this file's functions are picked up this way). */
#define RD_POLL_MS 1000

/* Hold the deleter before it deletes anything (MongoDB's suspendRangeDeletion). */
SHL_FAILPOINT_DEFINE(suspendRangeDeletion)
/* Hold the deleter after each batch (MongoDB's hangAfterDoingDeletion). */
SHL_FAILPOINT_DEFINE(hangAfterDoingDeletion)

/* ---------------------------------------------------------------- task documents */

void
shl_range_task_cleanup(shl_range_task_t *t)
{
    if (t->min != NULL) {
        bson_destroy(t->min);
        t->min = NULL;
    }
    if (t->max != NULL) {
        bson_destroy(t->max);
        t->max = NULL;
    }
    if (t->key_pattern != NULL) {
        bson_destroy(t->key_pattern);
        t->key_pattern = NULL;
    }
}

void
shl_range_task_to_bson(const shl_range_task_t *t, bson_t *out)
{
    bson_t range, empty = BSON_INITIALIZER;

    bson_init(out);
    shl_uuid_append(out, "_id", &t->id);
    BSON_APPEND_UTF8(out, "nss", t->ns);
    shl_uuid_append(out, "collectionUuid", &t->collection_uuid);
    BSON_APPEND_UTF8(out, "donorShardId", t->donor_shard);
    BSON_APPEND_DOCUMENT_BEGIN(out, "range", &range);
    BSON_APPEND_DOCUMENT(&range, "min", t->min != NULL ? t->min : &empty);
    BSON_APPEND_DOCUMENT(&range, "max", t->max != NULL ? t->max : &empty);
    bson_append_document_end(out, &range);
    /* Written only when true, as MongoDB's optional bool. */
    if (t->pending) {
        BSON_APPEND_BOOL(out, "pending", true);
    }
    if (t->processing) {
        BSON_APPEND_BOOL(out, "processing", true);
    }
    BSON_APPEND_UTF8(out, "whenToClean", t->when_now ? "now" : "delayed");
    if (t->has_timestamp) {
        shl_ts_append(out, "timestamp", t->timestamp);
    }
    BSON_APPEND_INT64(out, "numOrphanDocs", t->num_orphan_docs);
    if (t->key_pattern != NULL) {
        BSON_APPEND_DOCUMENT(out, "keyPattern", t->key_pattern);
    }
    if (shl_chunk_version_is_set(&t->pre_migration_version) ||
        shl_chunk_version_is_ignored(&t->pre_migration_version)) {
        shl_chunk_version_append(out, "preMigrationShardVersion", &t->pre_migration_version);
    }
    bson_destroy(&empty);
}

static int
parse_range(const bson_iter_t *it, shl_range_task_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_t range;
    bson_iter_t r;

    SHL_ERR(shl_idl_read_doc(it, RD_CTX, &range, st));
    bson_iter_init(&r, &range);
    while (shl_iter_next(&r)) {
        bson_t v;
        const char *k = shl_iter_key(&r);
        if (strcmp(k, "min") != 0 && strcmp(k, "max") != 0) {
            continue;
        }
        SHL_ERR(shl_idl_read_doc(&r, "ChunkRange", &v, st));
        if (k[1] == 'i') {
            if (out->min != NULL) {
                bson_destroy(out->min);
            }
            out->min = bson_copy(&v);
        } else {
            if (out->max != NULL) {
                bson_destroy(out->max);
            }
            out->max = bson_copy(&v);
        }
    }
    if (out->min == NULL) {
        SHL_ERR(shl_idl_missing("ChunkRange", "min", st));
    }
    if (out->max == NULL) {
        SHL_ERR(shl_idl_missing("ChunkRange", "max", st));
    }
done:
    return ret;
}

int
shl_range_task_parse(const bson_t *doc, shl_range_task_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool have_id = false, have_nss = false, have_uuid = false, have_donor = false;
    bool have_range = false, have_when = false;

    memset(out, 0, sizeof(*out));
    bson_iter_init(&it, doc);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "_id") == 0) {
            SHL_ERR(shl_idl_read_uuid(&it, RD_CTX, &out->id, st));
            have_id = true;
        } else if (strcmp(k, "nss") == 0) {
            uint32_t len;
            const char *s;
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_ERR(shl_idl_wrong_type(&it, RD_CTX, "string", st));
            }
            s = bson_iter_utf8(&it, &len);
            if (len > SHL_NS_MAX) {
                SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid namespace: %s", s);
            }
            memcpy(out->ns, s, len + 1);
            have_nss = true;
        } else if (strcmp(k, "collectionUuid") == 0) {
            SHL_ERR(shl_idl_read_uuid(&it, RD_CTX, &out->collection_uuid, st));
            have_uuid = true;
        } else if (strcmp(k, "donorShardId") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_ERR(shl_idl_wrong_type(&it, RD_CTX, "string", st));
            }
            snprintf(out->donor_shard, sizeof(out->donor_shard), "%s", bson_iter_utf8(&it, NULL));
            have_donor = true;
        } else if (strcmp(k, "range") == 0) {
            SHL_ERR(parse_range(&it, out, st));
            have_range = true;
        } else if (strcmp(k, "pending") == 0) {
            SHL_ERR(shl_idl_read_bool(&it, RD_CTX, &out->pending, st));
        } else if (strcmp(k, "processing") == 0) {
            SHL_ERR(shl_idl_read_bool(&it, RD_CTX, &out->processing, st));
        } else if (strcmp(k, "whenToClean") == 0) {
            const char *w;
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_ERR(shl_idl_wrong_type(&it, RD_CTX, "string", st));
            }
            w = bson_iter_utf8(&it, NULL);
            if (strcmp(w, "now") == 0) {
                out->when_now = true;
            } else if (strcmp(w, "delayed") == 0) {
                out->when_now = false;
            } else {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "Enumeration value '%s' for field '" RD_CTX ".whenToClean' is not a "
                         "valid value.",
                         w);
            }
            have_when = true;
        } else if (strcmp(k, "timestamp") == 0) {
            SHL_ERR(shl_idl_read_ts(&it, RD_CTX, &out->timestamp, st));
            out->has_timestamp = true;
        } else if (strcmp(k, "numOrphanDocs") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it)) {
                SHL_ERR(shl_idl_wrong_type(&it, RD_CTX, "long", st));
            }
            out->num_orphan_docs = bson_iter_as_int64(&it);
        } else if (strcmp(k, "keyPattern") == 0) {
            bson_t kp;
            SHL_ERR(shl_idl_read_doc(&it, RD_CTX, &kp, st));
            out->key_pattern = bson_copy(&kp);
        } else if (strcmp(k, "preMigrationShardVersion") == 0) {
            SHL_ERR(shl_chunk_version_parse(&it, &out->pre_migration_version, st));
        }
        /* strict: false -- other fields are ignored */
    }
    if (!have_id) {
        SHL_ERR(shl_idl_missing(RD_CTX, "_id", st));
    }
    if (!have_nss) {
        SHL_ERR(shl_idl_missing(RD_CTX, "nss", st));
    }
    if (!have_uuid) {
        SHL_ERR(shl_idl_missing(RD_CTX, "collectionUuid", st));
    }
    if (!have_donor) {
        SHL_ERR(shl_idl_missing(RD_CTX, "donorShardId", st));
    }
    if (!have_range) {
        SHL_ERR(shl_idl_missing(RD_CTX, "range", st));
    }
    if (!have_when) {
        SHL_ERR(shl_idl_missing(RD_CTX, "whenToClean", st));
    }
done:
    if (ret != 0) {
        shl_range_task_cleanup(out);
    }
    return ret;
}

bool
shl_range_overlaps(const bson_t *min1, const bson_t *max1, const bson_t *min2, const bson_t *max2)
{
    return shl_shard_key_compare(min1, max2) < 0 && shl_shard_key_compare(min2, max1) < 0;
}

/* ---------------------------------------------------------------- the command path */

/*
 * Run 'cmd' against the config database in-process; an error reply, the first writeError
 * and a writeConcernError become the status. *reply is always initialised.
 */
static int
local_cmd(shl_service_ctx_t *svc, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, f;

    shl_service_run_command(svc, NULL, cmd, RD_DB, reply);
    SHL_ERR(shl_status_from_reply(reply, st));
    SHL_ERR(shl_status_from_write_errors(reply, st));
    if (bson_iter_init_find(&it, reply, "writeConcernError") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        int code = SHL_CODE_WRITE_CONCERN_TIMEOUT;
        const char *msg = "write concern error";
        bson_iter_recurse(&it, &f);
        while (shl_iter_next(&f)) {
            if (strcmp(shl_iter_key(&f), "code") == 0) {
                code = (int)bson_iter_as_int64(&f);
            } else if (strcmp(shl_iter_key(&f), "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                msg = bson_iter_utf8(&f, NULL);
            }
        }
        SHL_FAIL(st, code, "%s", msg);
    }
done:
    return ret;
}

static void
append_wc(bson_t *cmd, bool journal)
{
    bson_t wc;

    BSON_APPEND_DOCUMENT_BEGIN(cmd, "writeConcern", &wc);
    BSON_APPEND_INT32(&wc, "w", 1);
    if (journal) {
        BSON_APPEND_BOOL(&wc, "j", true);
    }
    bson_append_document_end(cmd, &wc);
}

static int64_t
reply_n(const bson_t *reply)
{
    bson_iter_t it;

    return bson_iter_init_find(&it, reply, "n") ? bson_iter_as_int64(&it) : 0;
}

/* The index MongoDB keeps on config.rangeDeletions (created if missing). */
static int
ensure_index(shl_service_ctx_t *svc, shl_status_t *st)
{
    int ret;
    bson_t cmd = BSON_INITIALIZER, reply, arr, spec, key;

    BSON_APPEND_UTF8(&cmd, "createIndexes", RD_COLL);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &spec);
    BSON_APPEND_DOCUMENT_BEGIN(&spec, "key", &key);
    BSON_APPEND_INT32(&key, "collectionUuid", 1);
    BSON_APPEND_INT32(&key, "range.min", 1);
    BSON_APPEND_INT32(&key, "range.max", 1);
    bson_append_document_end(&spec, &key);
    BSON_APPEND_UTF8(&spec, "name", RD_INDEX_NAME);
    BSON_APPEND_BOOL(&spec, "unique", true);
    bson_append_document_end(&arr, &spec);
    bson_append_array_end(&cmd, &arr);
    ret = local_cmd(svc, &cmd, &reply, st);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

static shard_state_t *
op_shard(shl_op_ctx_t *op, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);

    if (s == NULL) {
        shl_status_set(st, SHL_CODE_ILLEGAL_OPERATION,
                       "range deletion tasks exist only on a shard server");
    }
    return s;
}

int
shl_range_deletion_persist(shl_op_ctx_t *op, const shl_range_task_t *t, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = op_shard(op, st);
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, arr, doc;

    if (s == NULL) {
        ret = st->code;
        goto done;
    }
    SHL_ERR(ensure_index(op->svc, st));
    shl_range_task_to_bson(t, &doc);
    BSON_APPEND_UTF8(&cmd, "insert", RD_COLL);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &arr);
    BSON_APPEND_DOCUMENT(&arr, "0", &doc);
    bson_append_array_end(&cmd, &arr);
    bson_destroy(&doc);
    append_wc(&cmd, true);
    bson_destroy(&reply);
    SHL_ERR(local_cmd(op->svc, &cmd, &reply, st));
    {
        char id[37];
        shl_uuid_to_string(&t->id, id);
        SHL_LOG_DEBUG(1, SHARDING, 7546501, "Persisted range deletion task", "migrationId",
                      BCON_UTF8(id), "namespace", BCON_UTF8(t->ns), "pending",
                      BCON_BOOL(t->pending));
    }
    shard_range_deleter_wake(s);
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* Unset 'pending' of task 'id' (only when still pending if 'only_pending'), setting
 * numOrphanDocs too when num_orphans >= 0; *n gets the number of matched tasks. */
static int
unset_pending(shl_op_ctx_t *op, const shl_uuid_t *id, bool only_pending, int64_t num_orphans,
              int64_t *n, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, arr, stmt, q, u, unset, set;

    BSON_APPEND_UTF8(&cmd, "update", RD_COLL);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &stmt);
    BSON_APPEND_DOCUMENT_BEGIN(&stmt, "q", &q);
    shl_uuid_append(&q, "_id", id);
    if (only_pending) {
        BSON_APPEND_BOOL(&q, "pending", true);
    }
    bson_append_document_end(&stmt, &q);
    BSON_APPEND_DOCUMENT_BEGIN(&stmt, "u", &u);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$unset", &unset);
    BSON_APPEND_UTF8(&unset, "pending", "");
    bson_append_document_end(&u, &unset);
    if (num_orphans >= 0) {
        BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
        BSON_APPEND_INT64(&set, "numOrphanDocs", num_orphans);
        bson_append_document_end(&u, &set);
    }
    bson_append_document_end(&stmt, &u);
    bson_append_document_end(&arr, &stmt);
    bson_append_array_end(&cmd, &arr);
    append_wc(&cmd, true);
    bson_destroy(&reply);
    SHL_ERR(local_cmd(op->svc, &cmd, &reply, st));
    *n = reply_n(&reply);
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

int
shl_range_deletion_mark_ready(shl_op_ctx_t *op, const shl_uuid_t *id, shl_status_t *st)
{
    return shl_range_deletion_mark_ready_orphans(op, id, -1, st);
}

int
shl_range_deletion_mark_ready_orphans(shl_op_ctx_t *op, const shl_uuid_t *id, int64_t num_orphans,
                                      shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = op_shard(op, st);
    int64_t n = 0;
    char ids[37];

    if (s == NULL) {
        ret = st->code;
        goto done;
    }
    /* The count is set while the task is pending only: once ready, the deleter keeps it. */
    if (num_orphans >= 0) {
        SHL_ERR(unset_pending(op, id, true, num_orphans, &n, st));
    }
    if (n == 0) {
        SHL_ERR(unset_pending(op, id, false, -1, &n, st));
    }
    shl_uuid_to_string(id, ids);
    if (n == 0) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "No range deletion task with id %s", ids);
    }
    SHL_LOG_DEBUG(1, SHARDING, 7546502, "Marked range deletion task ready", "migrationId",
                  BCON_UTF8(ids));
    shard_range_deleter_wake(s);
done:
    return ret;
}

/* Delete task 'id' (journaled when 'journal'); *n (may be NULL) gets how many went. */
static int
remove_task(shl_service_ctx_t *svc, const shl_uuid_t *id, bool journal, int64_t *n,
            shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, arr, stmt, q;

    BSON_APPEND_UTF8(&cmd, "delete", RD_COLL);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "deletes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &stmt);
    BSON_APPEND_DOCUMENT_BEGIN(&stmt, "q", &q);
    shl_uuid_append(&q, "_id", id);
    bson_append_document_end(&stmt, &q);
    BSON_APPEND_INT32(&stmt, "limit", 1);
    bson_append_document_end(&arr, &stmt);
    bson_append_array_end(&cmd, &arr);
    append_wc(&cmd, journal);
    bson_destroy(&reply);
    SHL_ERR(local_cmd(svc, &cmd, &reply, st));
    if (n != NULL) {
        *n = reply_n(&reply);
    }
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

int
shl_range_deletion_remove(shl_op_ctx_t *op, const shl_uuid_t *id, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = op_shard(op, st);

    if (s == NULL) {
        ret = st->code;
        goto done;
    }
    SHL_ERR(remove_task(op->svc, id, true, NULL, st));
    shard_range_deleter_wake(s);
done:
    return ret;
}

/* ---------------------------------------------------------------- reading tasks */

typedef struct task_list {
    shl_range_task_t *v;
    size_t n, cap;
} task_list_t;

static void
task_list_cleanup(task_list_t *l)
{
    for (size_t i = 0; i < l->n; i++) {
        shl_range_task_cleanup(&l->v[i]);
    }
    bson_free(l->v);
    memset(l, 0, sizeof(*l));
}

/*
 * The tasks of config.rangeDeletions (those of collection 'uuid' when not NULL), read from
 * storage directly (no command: the thread polls, and a poll should not count as a query).
 * Documents that do not parse are skipped with a warning.
 */
static int
load_tasks(shl_storage_engine_t *eng, const shl_uuid_t *uuid, task_list_t *out, shl_status_t *st)
{
    int ret = 0;
    shl_coll_handle_t h = {0};
    shl_storage_txn_t *txn = NULL;
    shl_record_cursor_t *c = NULL;
    bool locked = false;

    memset(out, 0, sizeof(*out));
    SHL_ERR(shl_storage_coll_acquire(eng, RD_NS, SHL_LOCK_SHARED, &h, st));
    locked = true;
    if (h.coll == NULL) {
        goto done;
    }
    SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
    SHL_ERR(shl_record_cursor_open(txn, h.coll, true, &c, st));
    for (;;) {
        bool eof = false;
        int64_t rid;
        bson_t view;
        shl_range_task_t t;
        shl_status_t pst = SHL_STATUS_INIT;
        SHL_ERR(shl_record_cursor_next(c, &rid, &view, &eof, st));
        if (eof) {
            break;
        }
        if (shl_range_task_parse(&view, &t, &pst) != 0) {
            SHL_LOG_WARNING(SHARDING, 7546503, "Ignoring a malformed range deletion task", "error",
                            BCON_UTF8(pst.reason));
            continue;
        }
        if (uuid != NULL && !shl_uuid_eq(uuid, &t.collection_uuid)) {
            shl_range_task_cleanup(&t);
            continue;
        }
        if (out->n == out->cap) {
            out->cap = out->cap ? out->cap * 2 : 8;
            out->v = bson_realloc(out->v, out->cap * sizeof(*out->v));
        }
        out->v[out->n++] = t;
    }
done:
    shl_record_cursor_close(c);
    shl_storage_txn_abort(txn);
    if (locked) {
        shl_storage_coll_release(&h);
    }
    if (ret != 0) {
        task_list_cleanup(out);
    }
    return ret;
}

/* The current state of task 'id': *found, and whether it is pending. */
static int
task_state(shl_storage_engine_t *eng, const shl_uuid_t *id, bool *found, bool *pending,
           shl_status_t *st)
{
    int ret = 0;
    task_list_t l;

    *found = false;
    *pending = false;
    SHL_ERR(load_tasks(eng, NULL, &l, st));
    for (size_t i = 0; i < l.n; i++) {
        if (shl_uuid_eq(&l.v[i].id, id)) {
            *found = true;
            *pending = l.v[i].pending;
        }
    }
    task_list_cleanup(&l);
done:
    return ret;
}

/* ---------------------------------------------------------------- waiting */

void
shard_range_deleter_wake(shard_state_t *s)
{
    pthread_mutex_lock(&s->rd.mu);
    s->rd.gen++;
    pthread_cond_broadcast(&s->rd.cv);
    pthread_mutex_unlock(&s->rd.mu);
}

/* Wait on the deleter's condition until 'gen' changes or 'ms' pass. Called with rd.mu. */
static void
timed_wait_locked(shard_state_t *s, int64_t ms)
{
    shl_cond_timedwait_ms(&s->rd.cv, &s->rd.mu, ms);
}

/*
 * Block 'op' until no task of 'uuid' overlapping [min, max) remains (any range when min
 * is NULL), for at most 'timeout_ms' (< 0: no limit but the operation's). Wakes on every
 * task change, and checks the operation's interruption.
 */
static int
wait_no_tasks(shl_op_ctx_t *op, shard_state_t *s, const shl_uuid_t *uuid, const bson_t *min,
              const bson_t *max, int64_t timeout_ms, shl_status_t *st)
{
    int ret = 0;
    bool logged = false;
    int64_t give_up_us = timeout_ms >= 0 ? shl_clock_mono_us() + timeout_ms * 1000 : 0;

    for (;;) {
        task_list_t l;
        size_t n = 0;
        uint64_t gen;
        pthread_mutex_lock(&s->rd.mu);
        gen = s->rd.gen;
        pthread_mutex_unlock(&s->rd.mu);
        SHL_ERR(load_tasks(op->svc->storage, uuid, &l, st));
        for (size_t i = 0; i < l.n; i++) {
            if (min == NULL || shl_range_overlaps(l.v[i].min, l.v[i].max, min, max)) {
                n++;
            }
        }
        task_list_cleanup(&l);
        if (n == 0) {
            break;
        }
        if (!logged) {
            char u[37];
            shl_uuid_to_string(uuid, u);
            SHL_LOG_INFO(SHARDING, 4416003, "Going to wait for range deletion tasks to complete",
                         "collectionUUID", BCON_UTF8(u), "numRemainingDeletionTasks",
                         BCON_INT64((int64_t)n));
            logged = true;
        }
        SHL_ERR(shl_op_check_interrupt(op, st));
        if (give_up_us != 0 && shl_clock_mono_us() >= give_up_us) {
            char u[37];
            shl_uuid_to_string(uuid, u);
            SHL_FAIL(st, SHL_CODE_EXCEEDED_TIME_LIMIT,
                     "timed out after %lld ms waiting for the deletion of %zu range(s) of "
                     "collection %s that overlap the incoming range (orphans of an earlier "
                     "migration; see orphanCleanupDelaySecs and "
                     "receiveChunkWaitForRangeDeleterTimeoutMS)",
                     (long long)timeout_ms, n, u);
        }
        pthread_mutex_lock(&s->rd.mu);
        if (s->rd.gen == gen) {
            int64_t left = shl_op_remaining_ms(op);
            timed_wait_locked(s, left >= 0 && left < 200 ? (left > 0 ? left : 1) : 200);
        }
        pthread_mutex_unlock(&s->rd.mu);
    }
done:
    return ret;
}

int
shl_range_deletion_wait_overlapping(shl_op_ctx_t *op, const shl_uuid_t *collection_uuid,
                                    const bson_t *min, const bson_t *max, int64_t timeout_ms,
                                    shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = op_shard(op, st);

    if (s == NULL) {
        ret = st->code;
        goto done;
    }
    SHL_ERR(wait_no_tasks(op, s, collection_uuid, min, max, timeout_ms, st));
done:
    return ret;
}

/* ---------------------------------------------------------------- deleting a range */

/* What the thread remembers about a task between passes (lost on restart, as MongoDB's
 * in-memory queue: a resumed delayed task waits its delay again). */
typedef struct rd_delay {
    shl_uuid_t id;
    bool refreshed;       /* the filtering metadata was refreshed for this task */
    bool logged_waiting;  /* "waiting for ongoing queries" was logged */
    bool logged_error;    /* a failed attempt was logged (once per task, then debug) */
    int64_t queries_done; /* monotonic us when no old metadata held the range, 0: not yet */
    struct rd_delay *next;
} rd_delay_t;

static rd_delay_t *
delay_get(shard_state_t *s, const shl_uuid_t *id)
{
    rd_delay_t *d;

    for (d = s->rd.delays; d != NULL; d = d->next) {
        if (shl_uuid_eq(&d->id, id)) {
            return d;
        }
    }
    d = bson_malloc0(sizeof(*d));
    d->id = *id;
    d->next = s->rd.delays;
    s->rd.delays = d;
    return d;
}

/* Forget the tasks that are gone (or all when 'l' is NULL). */
static void
delay_prune(shard_state_t *s, const task_list_t *l)
{
    rd_delay_t **pp = &s->rd.delays;

    while (*pp != NULL) {
        rd_delay_t *d = *pp;
        bool keep = false;
        for (size_t i = 0; l != NULL && i < l->n && !keep; i++) {
            keep = shl_uuid_eq(&l->v[i].id, &d->id);
        }
        if (keep) {
            pp = &d->next;
        } else {
            *pp = d->next;
            bson_free(d);
        }
    }
}

static bool
stopping(shard_state_t *s)
{
    bool stop;

    pthread_mutex_lock(&s->rd.mu);
    stop = s->rd.stop;
    pthread_mutex_unlock(&s->rd.mu);
    return stop;
}

/* Sleep 'ms' unless the thread is stopped meanwhile. */
static void
sleep_unless_stopped(shard_state_t *s, int64_t ms)
{
    int64_t until = shl_clock_mono_us() + ms * 1000;

    pthread_mutex_lock(&s->rd.mu);
    while (!s->rd.stop) {
        int64_t left = (until - shl_clock_mono_us()) / 1000;
        if (left <= 0) {
            break;
        }
        timed_wait_locked(s, left);
    }
    pthread_mutex_unlock(&s->rd.mu);
}

bool
shard_key_index_serves(const shl_index_t *idx, const bson_t *kp)
{
    bson_iter_t a, b;

    if (bson_has_field(idx->spec, "sparse") ||
        bson_has_field(idx->spec, "partialFilterExpression") ||
        idx->collator != NULL) { /* a collated index: keys are ICU sort keys */
        return false;
    }
    if (!bson_iter_init(&a, kp) || !bson_iter_init(&b, idx->key_pattern)) {
        return false;
    }
    while (shl_iter_next(&a)) {
        bool hashed_a = BSON_ITER_HOLDS_UTF8(&a);
        if (!shl_iter_next(&b) || strcmp(shl_iter_key(&a), shl_iter_key(&b)) != 0) {
            return false;
        }
        if (hashed_a != BSON_ITER_HOLDS_UTF8(&b)) {
            return false;
        }
        if (hashed_a && strcmp(bson_iter_utf8(&a, NULL), bson_iter_utf8(&b, NULL)) != 0) {
            return false;
        }
        if (!hashed_a && (!BSON_ITER_HOLDS_NUMBER(&b) || bson_iter_as_double(&b) < 0)) {
            return false;
        }
    }
    return true;
}

void
shard_key_bound_keystring(const bson_t *bound, shl_keystring_t *ks)
{
    bson_iter_t it;

    bson_iter_init(&it, bound);
    while (shl_iter_next(&it)) {
        shl_keystring_append_iter(ks, &it, false);
    }
}

typedef struct batch {
    const shl_collection_t *coll;
    const shl_index_t *idx; /* the shard key index, or NULL: scan the collection */
    const shl_shard_key_pattern_t *kp;
    const bson_t *min, *max;
    const shard_coll_meta_t *meta; /* the current filtering metadata (never delete owned) */
    int64_t limit;
    shl_keystring_t kmin, kmax;
    /* Where the previous batch stopped (committed batches only). */
    uint8_t *resume;
    size_t resume_len;
    int64_t resume_rid;
    /* This attempt's outcome (reset on entry: the unit may run again). */
    int64_t deleted, bytes, scanned, owned;
    bool eof;
    uint8_t *next_resume;
    size_t next_resume_len, next_resume_cap;
    int64_t next_rid;
    bson_t oplog_extra;
} batch_t;

/* Delete record 'rid' if its shard key is in the range and not owned now. */
static int
consider(shl_storage_txn_t *txn, batch_t *b, int64_t rid, const bson_t *view, shl_status_t *st)
{
    int ret = 0;
    bson_t doc = BSON_INITIALIZER, key = BSON_INITIALIZER;
    bool found = true;
    shl_status_t kst = SHL_STATUS_INIT;
    shl_write_opts_t wo = {.oplog_extra = &b->oplog_extra};

    bson_destroy(&doc);
    if (view != NULL) {
        bson_copy_to(view, &doc);
    } else {
        SHL_ERR(shl_record_get(txn, b->coll, rid, &doc, &found, st));
    }
    bson_destroy(&key);
    if (!found || shl_shard_key_extract_from_doc(b->kp, &doc, &key, &kst) != 0) {
        goto done; /* gone, or no shard key (arrays): never in a chunk range */
    }
    if (shl_shard_key_compare(b->min, &key) > 0 || shl_shard_key_compare(&key, b->max) >= 0) {
        goto done;
    }
    /* The range may have come back to this shard: what it owns now stays. */
    if (b->meta != NULL && b->meta->rt != NULL && b->meta->filter.owns(&b->meta->filter, &doc)) {
        b->owned++;
        goto done;
    }
    SHL_ERR(shl_doc_delete(txn, b->coll, rid, &doc, &wo, st));
    b->deleted++;
    b->bytes += doc.len;
done:
    bson_destroy(&doc);
    bson_destroy(&key);
    return ret;
}

static void
remember_key(batch_t *b, const uint8_t *key, size_t len)
{
    if (len > b->next_resume_cap) {
        b->next_resume = bson_realloc(b->next_resume, len);
        b->next_resume_cap = len;
    }
    memcpy(b->next_resume, key, len);
    b->next_resume_len = len;
}

static int
batch_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    int ret = 0;
    batch_t *b = arg;
    shl_index_cursor_t *ic = NULL;
    shl_record_cursor_t *rc = NULL;

    b->deleted = b->bytes = b->scanned = b->owned = 0;
    b->eof = false;
    b->next_resume_len = 0;
    b->next_rid = b->resume_rid;
    if (b->idx != NULL) {
        shl_key_bound_t start = {b->kmin.data, b->kmin.len}, end = {b->kmax.data, b->kmax.len};
        if (b->resume != NULL) {
            start.data = b->resume;
            start.len = b->resume_len;
        }
        SHL_ERR(shl_index_cursor_open(txn, b->idx, &start, &end, true, &ic, st));
        while (b->scanned < b->limit) {
            int64_t rid;
            const uint8_t *k;
            size_t klen;
            SHL_ERR(shl_index_cursor_next(ic, &rid, &k, &klen, &b->eof, st));
            if (b->eof) {
                break;
            }
            if (b->resume != NULL && klen == b->resume_len && memcmp(k, b->resume, klen) == 0) {
                continue; /* the last entry of the previous batch */
            }
            remember_key(b, k, klen);
            b->scanned++;
            SHL_ERR(consider(txn, b, rid, NULL, st));
        }
    } else {
        SHL_ERR(shl_record_cursor_open(txn, b->coll, true, &rc, st));
        shl_record_cursor_seek(rc, b->resume_rid);
        while (b->scanned < b->limit) {
            int64_t rid;
            bson_t view;
            SHL_ERR(shl_record_cursor_next(rc, &rid, &view, &b->eof, st));
            if (b->eof) {
                break;
            }
            b->next_rid = rid + 1;
            b->scanned++;
            SHL_ERR(consider(txn, b, rid, &view, st));
        }
    }
done:
    shl_index_cursor_close(ic);
    shl_record_cursor_close(rc);
    return ret;
}

/* The documents per write unit; *pause whether rangeDeleterBatchDelayMS separates them. */
static int64_t
batch_size(bool *pause)
{
    int64_t n = shl_opt_int(SHL_OPT_rangeDeleterBatchSize);

    *pause = n > 0 && n < INT_MAX;
    if (!*pause) {
        return RD_UNBOUNDED_UNIT;
    }
    return n > RD_BATCH_CAP ? RD_BATCH_CAP : n;
}

static void
range_string(const shl_range_task_t *t, char *buf, size_t len)
{
    char *a = shl_bson_as_json(t->min);
    char *b = shl_bson_as_json(t->max);

    snprintf(buf, len, "[%s, %s)", a, b);
    bson_free(a);
    bson_free(b);
}

/* $set processing / $inc numOrphanDocs on task 'id' (journaled when 'journal'). */
static int
update_task(shl_service_ctx_t *svc, const shl_uuid_t *id, const bson_t *u, bool journal,
            shl_status_t *st)
{
    int ret;
    bson_t cmd = BSON_INITIALIZER, reply, arr, stmt, q;

    BSON_APPEND_UTF8(&cmd, "update", RD_COLL);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &stmt);
    BSON_APPEND_DOCUMENT_BEGIN(&stmt, "q", &q);
    shl_uuid_append(&q, "_id", id);
    bson_append_document_end(&stmt, &q);
    BSON_APPEND_DOCUMENT(&stmt, "u", u);
    bson_append_document_end(&arr, &stmt);
    bson_append_array_end(&cmd, &arr);
    append_wc(&cmd, journal);
    ret = local_cmd(svc, &cmd, &reply, st);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/*
 * Delete the documents of task 't' in batches; 'meta' is the current filtering metadata
 * (a reference, may be NULL). Returns 0 when the range is clean (the caller removes the
 * task), RangeDeletionAbandonedBecause... when the collection or the task went away, or
 * another error (the task is retried on a later pass).
 */
static int
delete_range(shard_state_t *s, const shl_range_task_t *t, const shard_coll_meta_t *meta,
             int64_t *total, shl_status_t *st)
{
    int ret = 0;
    shl_storage_engine_t *eng = s->svc->storage;
    shl_shard_key_pattern_t kp;
    bool kp_init = false, locked = false, pause = true;
    shl_coll_handle_t h = {0};
    batch_t b;
    const bson_t *pattern = t->key_pattern;
    bson_t set = BSON_INITIALIZER, inner;

    memset(&b, 0, sizeof(b));
    bson_init(&b.oplog_extra);
    BSON_APPEND_BOOL(&b.oplog_extra, "fromMigrate", true);
    shl_keystring_init(&b.kmin);
    shl_keystring_init(&b.kmax);
    *total = 0;
    /* A dropped collection first: its task goes even without a key pattern. */
    SHL_ERR(shl_storage_coll_acquire(eng, t->ns, SHL_LOCK_SHARED, &h, st));
    locked = true;
    if (h.coll == NULL || memcmp(h.coll->uuid, t->collection_uuid.bytes, 16) != 0) {
        SHL_FAIL(st, SHL_CODE_RANGE_DELETION_ABANDONED_BECAUSE_COLLECTION_WITH_UUID_DOES_NOT_EXIST,
                 "Collection has been dropped since enqueuing this range deletion task. No "
                 "need to delete documents.");
    }
    shl_storage_coll_release(&h);
    locked = false;
    if (pattern == NULL && meta != NULL && meta->rt != NULL) {
        pattern = &shl_routing_table_key_pattern(meta->rt)->pattern;
    }
    if (pattern == NULL) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_SHARDED,
                 "no shard key pattern for the range deletion task of %s", t->ns);
    }
    SHL_ERR(shl_shard_key_pattern_init(&kp, pattern, st));
    kp_init = true;
    b.kp = &kp;
    b.min = t->min;
    b.max = t->max;
    b.meta = meta;
    shard_key_bound_keystring(t->min, &b.kmin);
    shard_key_bound_keystring(t->max, &b.kmax);

    /* Resumed after a restart, a started task does not wait its delay again (journaled:
     * some of the range may be gone before a crash). */
    BSON_APPEND_DOCUMENT_BEGIN(&set, "$set", &inner);
    BSON_APPEND_BOOL(&inner, "processing", true);
    BSON_APPEND_UTF8(&inner, "whenToClean", "now");
    bson_append_document_end(&set, &inner);
    SHL_ERR(update_task(s->svc, &t->id, &set, true, st));

    for (;;) {
        bool found, pending;
        if (stopping(s)) {
            SHL_FAIL(st, SHL_CODE_INTERRUPTED_AT_SHUTDOWN, "range deleter shutting down");
        }
        /* Only this thread removes a ready task, but a migration may have dropped it. */
        SHL_ERR(task_state(eng, &t->id, &found, &pending, st));
        if (!found || pending) {
            SHL_FAIL(st, SHL_CODE_RANGE_DELETION_ABANDONED_BECAUSE_TASK_DOCUMENT_DOES_NOT_EXIST,
                     "Range deletion task no longer exists");
        }
        SHL_ERR(shl_storage_coll_acquire(eng, t->ns, SHL_LOCK_SHARED, &h, st));
        locked = true;
        if (h.coll == NULL || memcmp(h.coll->uuid, t->collection_uuid.bytes, 16) != 0) {
            SHL_FAIL(st,
                     SHL_CODE_RANGE_DELETION_ABANDONED_BECAUSE_COLLECTION_WITH_UUID_DOES_NOT_EXIST,
                     "Collection has been dropped since enqueuing this range deletion task. No "
                     "need to delete documents.");
        }
        b.coll = h.coll;
        b.idx = NULL;
        for (size_t i = 0; i < h.coll->nindexes && b.idx == NULL; i++) {
            if (shard_key_index_serves(h.coll->indexes[i], pattern)) {
                b.idx = h.coll->indexes[i];
            }
        }
        b.limit = batch_size(&pause);
        SHL_ERR(shl_storage_write_retry(eng, batch_fn, &b, NULL, st));
        shl_storage_coll_release(&h);
        locked = false;
        /* The batch committed: continue after its last entry. */
        if (b.idx != NULL && b.next_resume_len > 0) {
            b.resume = bson_realloc(b.resume, b.next_resume_len);
            memcpy(b.resume, b.next_resume, b.next_resume_len);
            b.resume_len = b.next_resume_len;
        }
        b.resume_rid = b.next_rid;
        *total += b.deleted;
        atomic_fetch_add(&s->rd.docs_deleted, b.deleted);
        atomic_fetch_add(&s->rd.bytes_deleted, b.bytes);
        if (b.deleted > 0) {
            bson_t inc = BSON_INITIALIZER, f;
            shl_status_t ust = SHL_STATUS_INIT;
            BSON_APPEND_DOCUMENT_BEGIN(&inc, "$inc", &f);
            BSON_APPEND_INT64(&f, "numOrphanDocs", -b.deleted);
            bson_append_document_end(&inc, &f);
            (void)update_task(s->svc, &t->id, &inc, false, &ust); /* an estimate */
            bson_destroy(&inc);
        }
        if (SHL_FAILPOINT_FIRES(hangAfterDoingDeletion)) {
            shl_failpoint_pause_while_set(SHL_FAILPOINT(hangAfterDoingDeletion), &s->rd.stop_flag);
        }
        SHL_LOG_DEBUG(1, SHARDING, 23769, "Deleted documents in pass", "numDeleted",
                      BCON_INT64(b.deleted), "namespace", BCON_UTF8(t->ns), "numOwnedSkipped",
                      BCON_INT64(b.owned));
        if (b.eof) {
            break;
        }
        if (b.deleted > 0 && pause) {
            sleep_unless_stopped(s, shl_opt_int(SHL_OPT_rangeDeleterBatchDelayMS));
        }
    }
done:
    if (locked) {
        shl_storage_coll_release(&h);
    }
    if (kp_init) {
        shl_shard_key_pattern_cleanup(&kp);
    }
    shl_keystring_cleanup(&b.kmin);
    shl_keystring_cleanup(&b.kmax);
    bson_free(b.resume);
    bson_free(b.next_resume);
    bson_destroy(&b.oplog_extra);
    bson_destroy(&set);
    return ret;
}

/* ---------------------------------------------------------------- the thread */

/*
 * Try to run task 't' (not pending). Returns true when it ran (finished or abandoned), so
 * the caller starts a new pass. *next_ms is lowered to when a delayed task becomes due;
 * *waiting set when the task waits for queries using old metadata.
 */
/* Whether task t's document now names another namespace (a rename moved it). */
static bool
task_renamed(shard_state_t *s, const shl_range_task_t *t)
{
    shl_status_t st = SHL_STATUS_INIT;
    task_list_t l;
    bool renamed = false;

    if (load_tasks(s->svc->storage, &t->collection_uuid, &l, &st) != 0) {
        return false;
    }
    for (size_t i = 0; i < l.n; i++) {
        if (shl_uuid_eq(&l.v[i].id, &t->id) && strcmp(l.v[i].ns, t->ns) != 0) {
            renamed = true;
        }
    }
    task_list_cleanup(&l);
    return renamed;
}

static bool
try_task(shard_state_t *s, const shl_range_task_t *t, int64_t *next_ms, bool *waiting)
{
    shl_status_t st = SHL_STATUS_INIT;
    shard_coll_meta_t *cur = NULL;
    rd_delay_t *d = delay_get(s, &t->id);
    shard_identity_t id;
    bool ran = false;
    char uuid[37], range[1024];
    int64_t now = shl_clock_mono_us(), total = 0;
    int rc;

    shl_uuid_to_string(&t->collection_uuid, uuid);
    range_string(t, range, sizeof(range));
    if (!shard_get_identity(s, &id)) {
        goto done; /* not shard-aware yet: no filtering metadata to check against */
    }
    /* Once per task: learn the placement the task was written for. */
    if (!d->refreshed) {
        if (shard_meta_refresh(s, t->ns, &cur, &st) != 0) {
            SHL_LOG_DEBUG(1, SHARDING, 7546504,
                          "Range deleter could not refresh the filtering metadata; will retry",
                          "namespace", BCON_UTF8(t->ns), "error", BCON_UTF8(st.reason));
            goto done;
        }
        d->refreshed = true;
    } else if (shard_meta_get(s, t->ns, &cur, &st) != 0) {
        goto done;
    }
    /* (a) the queries that may still read the range with metadata that owned it. The
     * flag goes up before the look, so a release right after it still wakes the thread. */
    atomic_store(&s->rd.waiting_for_queries, true);
    if (shard_meta_in_use_for_range(s, cur, &t->collection_uuid, t->min, t->max)) {
        *waiting = true;
        if (!d->logged_waiting) {
            SHL_LOG_INFO(SHARDING, 7536600,
                         "Waiting for ongoing queries to finish before "
                         "deleting the range",
                         "namespace", BCON_UTF8(t->ns), "collectionUUID", BCON_UTF8(uuid), "range",
                         BCON_UTF8(range));
            d->logged_waiting = true;
        }
        goto done;
    }
    if (d->queries_done == 0) {
        d->queries_done = now;
        if (d->logged_waiting) {
            SHL_LOG_INFO(SHARDING, 7536601, "Finished waiting for ongoing queries", "namespace",
                         BCON_UTF8(t->ns), "collectionUUID", BCON_UTF8(uuid), "range",
                         BCON_UTF8(range));
        }
    }
    /* (b) orphanCleanupDelaySecs, for the queries of secondaries in MongoDB */
    if (!t->when_now && !t->processing) {
        int64_t due = d->queries_done + shl_opt_int(SHL_OPT_orphanCleanupDelaySecs) * 1000000;
        if (now < due) {
            int64_t ms = (due - now) / 1000 + 1;
            if (ms < *next_ms) {
                *next_ms = ms;
            }
            goto done;
        }
    }
    if (SHL_FAILPOINT_FIRES(suspendRangeDeletion)) {
        if (*next_ms > 100) {
            *next_ms = 100;
        }
        goto done;
    }
    /* (c) the documents, (d) the task */
    if (!d->logged_error) { /* not again for each retry of a failing task */
        SHL_LOG_INFO(SHARDING, 6872501, "Beginning deletion of documents in orphan range",
                     "namespace", BCON_UTF8(t->ns), "collectionUUID", BCON_UTF8(uuid), "range",
                     BCON_UTF8(range));
    }
    rc = delete_range(s, t, cur, &total, &st);
    if (rc == SHL_CODE_RANGE_DELETION_ABANDONED_BECAUSE_TASK_DOCUMENT_DOES_NOT_EXIST) {
        SHL_LOG_INFO(SHARDING, 6872502, "Abandoned range deletion", "namespace", BCON_UTF8(t->ns),
                     "range", BCON_UTF8(range), "reason", BCON_UTF8(st.reason));
        ran = true;
        goto done;
    }
    if (rc == SHL_CODE_RANGE_DELETION_ABANDONED_BECAUSE_COLLECTION_WITH_UUID_DOES_NOT_EXIST &&
        task_renamed(s, t)) {
        /* The collection was renamed under the task (shardsvr_rename_participant.c moved the
         * task to the new name): the next pass deletes there. */
        *next_ms = 0;
        goto done;
    }
    if (rc != 0 &&
        rc != SHL_CODE_RANGE_DELETION_ABANDONED_BECAUSE_COLLECTION_WITH_UUID_DOES_NOT_EXIST) {
        if (rc != SHL_CODE_INTERRUPTED_AT_SHUTDOWN && !d->logged_error) {
            SHL_LOG_WARNING(SHARDING, 6872503, "Range deletion failed; will retry", "namespace",
                            BCON_UTF8(t->ns), "range", BCON_UTF8(range), "error",
                            BCON_UTF8(st.reason));
            d->logged_error = true;
        } else if (rc != SHL_CODE_INTERRUPTED_AT_SHUTDOWN) {
            SHL_LOG_DEBUG(1, SHARDING, 6872506, "Range deletion failed; will retry", "namespace",
                          BCON_UTF8(t->ns), "range", BCON_UTF8(range), "error",
                          BCON_UTF8(st.reason));
        }
        goto done;
    }
    if (rc != 0) {
        SHL_LOG_INFO(SHARDING, 6872505, "Abandoned range deletion", "namespace", BCON_UTF8(t->ns),
                     "range", BCON_UTF8(range), "reason", BCON_UTF8(st.reason));
    }
    shl_status_clear(&st);
    if (remove_task(s->svc, &t->id, true, NULL, &st) != 0) {
        SHL_LOG_WARNING(SHARDING, 6872507, "Could not remove the range deletion task; will retry",
                        "namespace", BCON_UTF8(t->ns), "error", BCON_UTF8(st.reason));
        goto done;
    }
    SHL_LOG_INFO(SHARDING, 6872504, "Completed removal of persistent range deletion task",
                 "namespace", BCON_UTF8(t->ns), "collectionUUID", BCON_UTF8(uuid), "range",
                 BCON_UTF8(range), "numDeleted", BCON_INT64(total));
    shard_range_deleter_wake(s); /* cleanupOrphaned and recipients wait for this */
    ran = true;
done:
    shard_meta_release(cur);
    return ran;
}

/* One look at the tasks; returns how long to sleep (0: look again now). */
static int64_t
run_pass(shard_state_t *s)
{
    shl_status_t st = SHL_STATUS_INIT;
    task_list_t l;
    int64_t next_ms = RD_POLL_MS;
    bool waiting = false, ran = false;

    if (!shl_db_repl_is_primary(s->svc)) {
        return RD_POLL_MS; /* a secondary's tasks are its primary's to run (replicated) */
    }
    if (load_tasks(s->svc->storage, NULL, &l, &st) != 0) {
        SHL_LOG_WARNING(SHARDING, 7546505, "Range deleter could not read config.rangeDeletions",
                        "error", BCON_UTF8(st.reason));
        return RD_POLL_MS;
    }
    {
        int_fast64_t ready = 0;
        for (size_t i = 0; i < l.n; i++) {
            ready += !l.v[i].pending;
        }
        atomic_store(&s->rd.tasks, ready); /* MongoDB counts the ready and running ones */
    }
    delay_prune(s, &l);
    /* Tasks that were being deleted when the node stopped go first, as in MongoDB. */
    for (int round = 0; round < 2 && !ran; round++) {
        for (size_t i = 0; i < l.n && !ran && !stopping(s); i++) {
            const shl_range_task_t *t = &l.v[i];
            if (t->pending || t->processing != (round == 0)) {
                continue;
            }
            ran = try_task(s, t, &next_ms, &waiting);
        }
    }
    atomic_store(&s->rd.waiting_for_queries, waiting && !ran);
    task_list_cleanup(&l);
    return ran ? 0 : next_ms;
}

static void *
rd_main(void *arg)
{
    shard_state_t *s = arg;

    shl_log_set_thread_ctx("RangeDeleter");
    pthread_mutex_lock(&s->rd.mu);
    while (!s->rd.stop) {
        uint64_t gen = s->rd.gen;
        int64_t ms;
        pthread_mutex_unlock(&s->rd.mu);
        ms = run_pass(s);
        pthread_mutex_lock(&s->rd.mu);
        if (!s->rd.stop && s->rd.gen == gen && ms > 0) {
            timed_wait_locked(s, ms);
        }
    }
    pthread_mutex_unlock(&s->rd.mu);
    delay_prune(s, NULL);
    return NULL;
}

int64_t
shard_orphan_count(void *arg, const uint8_t uuid[16])
{
    shard_state_t *s = arg;
    shl_status_t st;
    shl_uuid_t u;
    bson_t cmd = BSON_INITIALIZER, filter, proj, reply = BSON_INITIALIZER, *docs = NULL;
    bson_iter_t it;
    size_t n;
    int64_t total = 0;

    memcpy(u.bytes, uuid, sizeof(u.bytes));
    BSON_APPEND_UTF8(&cmd, "find", "rangeDeletions");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    shl_uuid_append(&filter, "collectionUuid", &u);
    bson_append_document_end(&cmd, &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "projection", &proj);
    BSON_APPEND_INT32(&proj, "numOrphanDocs", 1);
    bson_append_document_end(&cmd, &proj);
    BSON_APPEND_INT32(&cmd, "batchSize", 10000);
    bson_destroy(&reply);
    if (shl_remote_run_self(&s->remote, "config", &cmd, NULL, &reply, &st) == 0) {
        n = mig_cursor_docs(&reply, &docs);
        for (size_t i = 0; i < n; i++) {
            if (bson_iter_init_find(&it, &docs[i], "numOrphanDocs") &&
                BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_int64(&it) > 0) {
                total += bson_iter_as_int64(&it);
            }
        }
    }
    bson_free(docs);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return total;
}

void
shard_range_deleter_init(shard_state_t *s)
{
    pthread_mutex_init(&s->rd.mu, NULL);
    pthread_cond_init(&s->rd.cv, NULL);
    atomic_init(&s->rd.waiting_for_queries, false);
    atomic_init(&s->rd.stop_flag, false);
    atomic_init(&s->rd.tasks, 0);
    atomic_init(&s->rd.docs_deleted, 0);
    atomic_init(&s->rd.bytes_deleted, 0);
}

void
shard_range_deleter_start(shard_state_t *s)
{
    pthread_mutex_lock(&s->rd.mu);
    if (!s->rd.started) {
        SHL_INVARIANT(pthread_create(&s->rd.thread, NULL, rd_main, s) == 0);
        s->rd.started = true;
    }
    pthread_mutex_unlock(&s->rd.mu);
}

void
shard_range_deleter_stop(shard_state_t *s)
{
    bool started;

    pthread_mutex_lock(&s->rd.mu);
    s->rd.stop = true;
    atomic_store(&s->rd.stop_flag, true);
    started = s->rd.started;
    pthread_cond_broadcast(&s->rd.cv);
    pthread_mutex_unlock(&s->rd.mu);
    if (started) {
        pthread_join(s->rd.thread, NULL);
    }
    atomic_store(&s->rd.waiting_for_queries, false);
}

void
shard_range_deleter_server_status(shard_state_t *s, bson_t *section)
{
    BSON_APPEND_INT64(section, "countDocsDeletedByRangeDeleter",
                      (int64_t)atomic_load(&s->rd.docs_deleted));
    BSON_APPEND_INT64(section, "countBytesDeletedByRangeDeleter",
                      (int64_t)atomic_load(&s->rd.bytes_deleted));
    BSON_APPEND_INT64(section, "rangeDeleterTasks", (int64_t)atomic_load(&s->rd.tasks));
}
