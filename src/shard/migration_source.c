/*
 * migration_source.c -- the donor side of a chunk migration (seeds/000 "Migrations",
 * docs/design/sharding-protocol.md "Chunk migration"): MongoDB's ActiveMigrationsRegistry
 * (one migration per shard, as donor or recipient; the same range again joins) and the
 * migration itself as the coordinator type "MigrationCoordinator" (docs/design/
 * coordinators.md "The migration coordinator"), started by _shardsvrMoveRange: pending range
 * deletion task, write capture, _recvChunkStart, status polling, critical section,
 * _recvChunkCommit, _configsvrCommitChunkMigration, refresh, then the commit or abort
 * sequence -- the same phases finish the documents a crash left.
 *
 * Cloner: _migrateClone serves the documents of the range, walking the shard key index over
 * [min, max) (a local cursor over the whole collection when there is no such index); the op
 * observer (called by db after each write unit commits) records the _id of every document
 * written in the range from the moment cloning starts; _transferMods drains those _ids in order,
 * sending each one's current document when it is (still) in the range and its _id as a delete
 * otherwise. Sending the current state rather than each write makes the result independent of the
 * order the observer saw concurrent writes in; the last drain runs in the critical section, when no
 * write is in flight, so the recipient ends with exactly the donor's documents.
 */
#include <string.h>
#include <time.h>

#include "base/failpoint.h"
#include "base/log.h"
#include "base/options.h"
#include "base/clock.h"
#include "bson/bson_compare.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "bson/keystring.h"
#include "net/command_args.h"
#include "net/service.h"
#include "db/repl_hooks.h"
#include "shard/migration_private.h"
#include "sharding/coordinator.h"
#include "shard/range_deleter.h"
#include "storage/catalog.h"
#include "storage/index.h"
#include "storage/record_store.h"
#include "storage/storage.h"

SHL_FAILPOINT_DEFINE(moveChunkHangAtStep1)
SHL_FAILPOINT_DEFINE(moveChunkHangAtStep2)
SHL_FAILPOINT_DEFINE(moveChunkHangAtStep3)
SHL_FAILPOINT_DEFINE(moveChunkHangAtStep4)
SHL_FAILPOINT_DEFINE(moveChunkHangAtStep5)
SHL_FAILPOINT_DEFINE(moveChunkHangAtStep6)
SHL_FAILPOINT_DEFINE(hangBeforeCommitMigration)

/* Captured changes a migration may hold before it aborts: migrationCaptureMaxBytes
 * (MongoDB's fixed 500 MB by default; lower it to test the abort). */
static int64_t
mods_max_bytes(void)
{
    return shl_opt_int(SHL_OPT_migrationCaptureMaxBytes);
}
SHL_FAILPOINT_DEFINE(hangBeforeLeavingCriticalSection)

#define COORD_COLL "migrationCoordinators"

/* One outgoing migration (MigrationSourceManager + cloner); guarded by the state's mig_mu. */
typedef struct shard_donor {
    int refs; /* the runner and the joiners */
    char ns[SHL_NS_MAX + 1];
    char to[SHL_SHARD_ID_MAX];
    bson_t *min, *max;
    bool finished;
    int result;
    shl_status_t result_st;
    /* Set once the metadata is checked. */
    shl_shard_key_pattern_t pattern;
    bool has_pattern;
    char session_id[200];
    /* Capture. */
    bool capturing;
    bson_t **mods; /* {_id: v} in the order written */
    size_t nmods, capmods;
    int64_t mods_bytes; /* memory the captured _ids hold */
    bool mods_overflow; /* past mods_max_bytes(): the migration must abort */
    /* Clone position (used by one _migrateClone at a time: the recipient's thread): the
     * shard key index entry the walk stopped at, or a local find cursor without that index. */
    int64_t cursor_id;
    bool cursor_open, cursor_done;
    bool clone_by_index;
    uint8_t *clone_resume; /* the last index entry read (owned), NULL before the first */
    size_t clone_resume_len;
    bson_t **pending; /* fetched documents of the range not sent yet (owned) */
    size_t npending, pending_pos;
    int64_t cloned;
    int64_t paced_ms; /* time _migrateClone waited for the cache (mig_cache_pace) */
    /* The range's retryable-write history (_getNextSessionMods, the recipient's thread). */
    mig_session_source_t *sessions;
    shl_op_ctx_t *runner; /* the operation running it: the request while it checks the range,
                           * then the coordinator's (a step-down kills it) */
    /* Set by the request before its coordinator starts; constant afterwards. */
    shl_uuid_t id;            /* the migrationId: the coordinator document's _id */
    struct donor_live *live;  /* the live run's state (the coordinator's thread); NULL when
                               * the request failed before starting it */
} shard_donor_t;

static void donor_live_free(struct donor_live *l);

/* ---------------------------------------------------------------- helpers */

bool
mig_doc_in_range(const shl_shard_key_pattern_t *p, const bson_t *doc, const bson_t *min,
                 const bson_t *max)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t key;
    bool in = false;

    if (shl_shard_key_extract_from_doc(p, doc, &key, &st) == 0) {
        in = shl_shard_key_compare(&key, min) >= 0 && shl_shard_key_compare(&key, max) < 0;
    }
    bson_destroy(&key);
    return in;
}

int
mig_sleep(shl_op_ctx_t *op, int64_t ms, shl_status_t *st)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
    return shl_op_check_interrupt(op, st);
}

void
mig_internal_op(shard_state_t *s, shl_op_ctx_t *op)
{
    memset(op, 0, sizeof(*op));
    op->svc = s->svc;
    op->cmd_name = "migration";
    snprintf(op->db, sizeof(op->db), "admin");
    atomic_init(&op->killed, false);
}

size_t
mig_docs_of(const bson_t *reply, const char *field, bson_t **out)
{
    bson_iter_t it, arr;
    size_t n = 0, cap = 0;

    *out = NULL;
    if (!bson_iter_init_find(&it, reply, field) || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &arr)) {
        return 0;
    }
    /* Count first: a static bson_t points into itself, so the array is never moved. */
    {
        bson_iter_t c = arr;
        while (shl_iter_next(&c)) {
            cap += BSON_ITER_HOLDS_DOCUMENT(&c) ? 1 : 0;
        }
    }
    if (cap == 0) {
        return 0;
    }
    *out = bson_aligned_alloc0(BSON_ALIGNOF(bson_t), cap * sizeof(**out));
    while (shl_iter_next(&arr) && n < cap) {
        const uint8_t *data;
        uint32_t len;
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
            continue;
        }
        bson_iter_document(&arr, &len, &data);
        if (bson_init_static(&(*out)[n], data, len)) {
            n++;
        }
    }
    return n;
}

size_t
mig_cursor_docs(const bson_t *reply, bson_t **out)
{
    bson_iter_t it;
    size_t n = 0;

    *out = NULL;
    if (bson_iter_init_find(&it, reply, "cursor") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t cur;
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&it, &len, &data);
        if (bson_init_static(&cur, data, len)) {
            n = mig_docs_of(&cur, bson_has_field(&cur, "firstBatch") ? "firstBatch" : "nextBatch",
                            out);
        }
    }
    return n;
}

int64_t
mig_cursor_id(const bson_t *reply)
{
    bson_iter_t it;
    return bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "cursor.id", &it)
               ? bson_iter_as_int64(&it)
               : 0;
}

static void
range_to_string(const bson_t *min, const bson_t *max, char *out, size_t n)
{
    char *a = shl_bson_as_json(min);
    char *b = shl_bson_as_json(max);

    snprintf(out, n, "[%s, %s)", a, b);
    bson_free(a);
    bson_free(b);
}

static void
pause_at(shl_failpoint_t *fp, shl_op_ctx_t *op)
{
    if (atomic_load_explicit(&fp->active, memory_order_relaxed) &&
        shl_failpoint_evaluate(fp, NULL, NULL, NULL)) {
        SHL_LOG_INFO(SHARDING, 4200201, "Hanging at a migration fail point", "failPoint",
                     BCON_UTF8(fp->name));
        shl_failpoint_pause_while_set(fp, &op->killed);
    }
}

/* ---------------------------------------------------------------- registry */

int
mig_check_idle_locked(shard_state_t *s, shl_status_t *st)
{
    int ret = 0;
    char r[512];

    if (s->donor != NULL && !s->donor->finished) {
        range_to_string(s->donor->min, s->donor->max, r, sizeof(r));
        SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                 "Unable to start new balancer operation because this shard is currently "
                 "donating range '%s' for namespace %s to shard %s",
                 r, s->donor->ns, s->donor->to);
    }
    if (s->recipient != NULL && !s->recipient->finished) {
        range_to_string(s->recipient->min, s->recipient->max, r, sizeof(r));
        SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                 "Unable to start new balancer operation because this shard is currently "
                 "receiving range '%s' for namespace %s from shard %s",
                 r, s->recipient->ns, s->recipient->from);
    }
done:
    return ret;
}

static void
pending_clear(shard_donor_t *d)
{
    for (size_t i = d->pending_pos; i < d->npending; i++) {
        bson_destroy(d->pending[i]);
    }
    bson_free(d->pending);
    d->pending = NULL;
    d->npending = d->pending_pos = 0;
}

static void
donor_free(shard_donor_t *d)
{
    donor_live_free(d->live);
    pending_clear(d);
    mig_session_source_destroy(d->sessions);
    bson_free(d->clone_resume);
    for (size_t i = 0; i < d->nmods; i++) {
        bson_destroy(d->mods[i]);
    }
    bson_free(d->mods);
    if (d->has_pattern) {
        shl_shard_key_pattern_cleanup(&d->pattern);
    }
    bson_destroy(d->min);
    bson_destroy(d->max);
    bson_free(d);
}

/* Drop one reference (mig_mu held). */
static void
donor_unref_locked(shard_donor_t *d)
{
    if (--d->refs == 0) {
        donor_free(d);
    }
}

/*
 * Register an outgoing migration of [min, max) of ns to 'to': *out is the new donor
 * (*join false: the caller runs it) or the identical one in progress (*join true: wait for
 * its result). Waits for start-up recovery first. Errors: ConflictingOperationInProgress.
 */
static bool recovering(shard_state_t *s);

static int
registry_donor(shard_state_t *s, shl_op_ctx_t *op, const char *ns, const bson_t *min,
               const bson_t *max, const char *to, shard_donor_t **out, bool *join, shl_status_t *st)
{
    int ret = 0;
    shard_donor_t *d;

    *out = NULL;
    *join = false;
    pthread_mutex_lock(&s->mig_mu);
    for (;;) {
        d = s->donor;
        if (d != NULL && !d->finished && strcmp(d->ns, ns) == 0 && strcmp(d->to, to) == 0 &&
            shl_shard_key_compare(d->min, min) == 0 && shl_shard_key_compare(d->max, max) == 0) {
            d->refs++;
            *out = d;
            *join = true;
            goto done;
        }
        SHL_ERR(mig_check_idle_locked(s, st));
        /* Migration coordinators still finishing (left by a crash, or answered and still
         * completing their commit or abort sequence) end first. */
        if (!recovering(s)) {
            break;
        }
        pthread_mutex_unlock(&s->mig_mu);
        ret = mig_sleep(op, 20, st);
        pthread_mutex_lock(&s->mig_mu);
        if (ret != 0) {
            goto done;
        }
    }
    d = bson_malloc0(sizeof(*d));
    d->refs = 1;
    snprintf(d->ns, sizeof(d->ns), "%s", ns);
    snprintf(d->to, sizeof(d->to), "%s", to);
    d->min = bson_copy(min);
    d->max = bson_copy(max);
    if (s->donor != NULL) {
        donor_unref_locked(s->donor);
    }
    s->donor = d;
    d->refs++; /* the registry's */
    *out = d;
done:
    pthread_mutex_unlock(&s->mig_mu);
    return ret;
}

/* ---------------------------------------------------------------- op observer */

/* The memory one captured _id holds (its document, the bson_t, the queue slot). */
static int64_t
mod_bytes(const bson_t *id)
{
    return (int64_t)id->len + (int64_t)sizeof(bson_t) + (int64_t)sizeof(bson_t *);
}

void
shard_migration_observe(void *arg, const char *ns, const bson_t *pre, const bson_t *post)
{
    shard_state_t *s = arg;
    shard_donor_t *d;
    bson_iter_t it;
    const bson_t *doc = post != NULL ? post : pre;

    if (atomic_load_explicit(&s->capturing, memory_order_acquire) == 0 || doc == NULL) {
        return;
    }
    pthread_mutex_lock(&s->mig_mu);
    d = s->donor;
    if (d != NULL && d->capturing && strcmp(d->ns, ns) == 0 &&
        ((pre != NULL && mig_doc_in_range(&d->pattern, pre, d->min, d->max)) ||
         (post != NULL && mig_doc_in_range(&d->pattern, post, d->min, d->max))) &&
        bson_iter_init_find(&it, doc, "_id")) {
        bson_t *id;
        if (d->mods_overflow || d->mods_bytes > mods_max_bytes()) {
            /* MongoDB aborts a migration whose captured changes pass 500 MB rather than
             * let a write-heavy range exhaust the donor's memory. */
            d->mods_overflow = true;
            pthread_mutex_unlock(&s->mig_mu);
            return;
        }
        id = bson_new();
        bson_append_value(id, "_id", 3, bson_iter_value(&it));
        d->mods_bytes += mod_bytes(id);
        if (d->nmods == d->capmods) {
            d->capmods = d->capmods == 0 ? 256 : d->capmods * 2;
            d->mods = bson_realloc(d->mods, d->capmods * sizeof(*d->mods));
        }
        d->mods[d->nmods++] = id;
    }
    pthread_mutex_unlock(&s->mig_mu);
}

bool
shard_migration_observing(void *arg, const char *ns)
{
    shard_state_t *s = arg;

    (void)ns;
    return atomic_load_explicit(&s->capturing, memory_order_acquire) != 0;
}

/* Whether 'doc' (a written document's image) is in the migrating range of donor 'arg'. */
static bool
donor_range_holds(void *arg, const bson_t *doc)
{
    const shard_donor_t *d = arg;

    return mig_doc_in_range(&d->pattern, doc, d->min, d->max);
}

/*
 * Wait for the open transactions of this shard that wrote 'ns' (with writes blocked by the
 * critical section, so no new one starts writing it), as MongoDB's donor waits for the
 * collection lock they hold: a prepared one until its coordinator's decision arrives (its
 * writes, reported at commit, then reach the capture), one in progress at most
 * migrationLockAcquisitionMaxWaitMS, after which the migration fails with LockTimeout.
 */
static int
wait_txn_writers(shard_state_t *s, shl_op_ctx_t *op, const char *ns, shard_donor_t *range,
                 shl_status_t *st)
{
    int ret = shl_db_txn_wait_writers(op, ns, range != NULL ? donor_range_holds : NULL, range,
                                      shl_opt_int(SHL_OPT_migrationLockAcquisitionMaxWaitMS), st);

    if (ret == SHL_CODE_LOCK_TIMEOUT) {
        atomic_fetch_add(&s->donor_lock_timeouts, 1);
    }
    return ret;
}

/*
 * Start recording writes in d's range. Like MongoDB installing its cloner under the
 * collection's exclusive lock, the versioned writes in flight finish first (new ones wait a
 * moment), so every write that commits from here on is reported to the observer; the
 * clone, which starts later, sees every write committed before.
 */
static int
capture_start(shard_state_t *s, shl_op_ctx_t *op, shard_donor_t *d, shl_status_t *st)
{
    int ret = 0;

    SHL_ERR(shard_crit_enter(s, op, d->ns, SHARD_CRIT_WRITES, st));
    /* A transaction that already wrote the collection reports its writes when it commits,
     * unobserved by a capture that was not running then: it must end first. */
    if ((ret = wait_txn_writers(s, op, d->ns, NULL, st)) != 0) {
        shard_crit_exit(s, d->ns);
        goto done;
    }
    pthread_mutex_lock(&s->mig_mu);
    d->capturing = true;
    atomic_fetch_add(&s->capturing, 1);
    pthread_mutex_unlock(&s->mig_mu);
    shard_crit_exit(s, d->ns);
done:
    return ret;
}

static void
capture_stop(shard_state_t *s, shard_donor_t *d)
{
    pthread_mutex_lock(&s->mig_mu);
    if (d->capturing) {
        d->capturing = false;
        atomic_fetch_sub(&s->capturing, 1);
    }
    pthread_mutex_unlock(&s->mig_mu);
}

/* ---------------------------------------------------------------- cloner commands */

static const char *const clone_fields[] = {"sessionId", NULL};

/* The donor whose session is cmd's sessionId (a reference), or NoSuchKey-like failure. */
static int
donor_for_session(shard_state_t *s, const bson_t *cmd, const char *ctx, shard_donor_t **out,
                  shl_status_t *st)
{
    int ret = 0;
    const char *sid = NULL;
    bool found = false;

    *out = NULL;
    SHL_ERR(shl_cmd_get_string(cmd, "sessionId", &sid, &found, st));
    if (!found) {
        SHL_ERR(shl_idl_missing(ctx, "sessionId", st));
    }
    pthread_mutex_lock(&s->mig_mu);
    if (s->donor != NULL && !s->donor->finished && strcmp(s->donor->session_id, sid) == 0) {
        *out = s->donor;
        s->donor->refs++;
    }
    pthread_mutex_unlock(&s->mig_mu);
    if (*out == NULL) {
        SHL_FAIL(st, SHL_CODE_NOT_YET_INITIALIZED, "No active migration session %s on this shard",
                 sid);
    }
done:
    return ret;
}

static void
donor_release(shard_state_t *s, shard_donor_t *d)
{
    pthread_mutex_lock(&s->mig_mu);
    donor_unref_locked(d);
    pthread_mutex_unlock(&s->mig_mu);
}

/* Index entries one clone fetch reads at most (the find path's batch size). */
#define CLONE_FETCH_ENTRIES 1000

/*
 * Read the next entries of the shard key index over [min, max) into d->pending (the
 * documents, copied): at most CLONE_FETCH_ENTRIES entries or MIG_BATCH_BYTES of documents
 * (one at least), in a snapshot of their own, continuing after the entry the previous fetch
 * stopped at. A later snapshot than the previous fetch's is safe: writes in the range are
 * captured from before the first fetch, so a document the walk misses or sees twice is sent
 * again by _transferMods (the recipient keeps the first copy of a cloned _id). *no_index: the
 * collection has no such index (first fetch only; the caller scans the collection instead).
 */
static int
clone_fetch_index(shard_state_t *s, shard_donor_t *d, bool *no_index, shl_status_t *st)
{
    int ret = 0;
    shl_storage_engine_t *eng = s->svc->storage;
    shl_coll_handle_t h;
    bool locked = false;
    const shl_index_t *idx = NULL;
    shl_storage_txn_t *txn = NULL;
    shl_index_cursor_t *ic = NULL;
    shl_keystring_t kmin, kmax;
    size_t cap = 0, bytes = 0;
    int64_t entries = 0;
    uint8_t *last = NULL;
    size_t last_len = 0;

    *no_index = false;
    shl_keystring_init(&kmin);
    shl_keystring_init(&kmax);
    memset(&h, 0, sizeof(h));
    SHL_ERR(shl_storage_coll_acquire(eng, d->ns, SHL_LOCK_SHARED, &h, st));
    locked = true;
    if (h.coll == NULL) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "%s was dropped during the migration", d->ns);
    }
    for (size_t i = 0; i < h.coll->nindexes && idx == NULL; i++) {
        if (shard_key_index_serves(h.coll->indexes[i], &d->pattern.pattern)) {
            idx = h.coll->indexes[i];
        }
    }
    if (idx == NULL) {
        if (!d->cursor_open) {
            *no_index = true;
            goto done;
        }
        SHL_FAIL(st, SHL_CODE_OPERATION_FAILED,
                 "the shard key index of %s was dropped during the migration", d->ns);
    }
    d->cursor_open = true;
    d->clone_by_index = true;
    shard_key_bound_keystring(d->min, &kmin);
    shard_key_bound_keystring(d->max, &kmax);
    SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
    {
        shl_key_bound_t start = {kmin.data, kmin.len}, end = {kmax.data, kmax.len};
        if (d->clone_resume != NULL) {
            start.data = d->clone_resume;
            start.len = d->clone_resume_len;
        }
        SHL_ERR(shl_index_cursor_open(txn, idx, &start, &end, true, &ic, st));
    }
    while (entries < CLONE_FETCH_ENTRIES && bytes < MIG_BATCH_BYTES) {
        int64_t rid;
        const uint8_t *k;
        size_t klen;
        bool eof, found = false;
        bson_t doc;
        SHL_ERR(shl_index_cursor_next(ic, &rid, &k, &klen, &eof, st));
        if (eof) {
            d->cursor_done = true;
            break;
        }
        if (d->clone_resume != NULL && klen == d->clone_resume_len &&
            memcmp(k, d->clone_resume, klen) == 0) {
            continue; /* where the previous fetch stopped: sent already */
        }
        last = bson_realloc(last, klen);
        memcpy(last, k, klen);
        last_len = klen;
        entries++;
        ret = shl_record_get(txn, h.coll, rid, &doc, &found, st);
        if (ret == 0 && found && mig_doc_in_range(&d->pattern, &doc, d->min, d->max)) {
            if (d->npending == cap) {
                cap = cap == 0 ? 64 : cap * 2;
                d->pending = bson_realloc(d->pending, cap * sizeof(*d->pending));
            }
            bytes += doc.len;
            d->pending[d->npending++] = bson_copy(&doc);
        }
        bson_destroy(&doc);
        SHL_ERR(ret);
    }
    if (last != NULL) {
        bson_free(d->clone_resume);
        d->clone_resume = last;
        d->clone_resume_len = last_len;
        last = NULL;
    }
done:
    shl_index_cursor_close(ic);
    shl_storage_txn_abort(txn);
    if (locked) {
        shl_storage_coll_release(&h);
    }
    bson_free(last);
    shl_keystring_cleanup(&kmin);
    shl_keystring_cleanup(&kmax);
    return ret;
}

/* Fetch the next documents of the range into d->pending (copied): by the shard key index
 * when there is one (clone_fetch_index), else from a local cursor over the collection. */
static int
clone_fetch(shard_state_t *s, shard_donor_t *d, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, *docs = NULL;
    shl_ns_t ns;
    bson_iter_t it;
    size_t n = 0;
    bool no_index = false;

    pending_clear(d);
    if (!d->cursor_open || d->clone_by_index) {
        SHL_ERR(clone_fetch_index(s, d, &no_index, st));
        if (!no_index) {
            goto done;
        }
        SHL_LOG_INFO(SHARDING, 4200208,
                     "No shard key index: the migration clone scans the whole collection", "ns",
                     BCON_UTF8(d->ns));
    }
    SHL_ERR(shl_ns_parse(&ns, d->ns, st));
    if (!d->cursor_open) {
        bson_t filter = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&cmd, "find", ns.coll);
        BSON_APPEND_DOCUMENT(&cmd, "filter", &filter);
        BSON_APPEND_INT32(&cmd, "batchSize", 1000);
        bson_destroy(&filter);
        d->cursor_open = true;
    } else {
        BSON_APPEND_INT64(&cmd, "getMore", d->cursor_id);
        BSON_APPEND_UTF8(&cmd, "collection", ns.coll);
        BSON_APPEND_INT32(&cmd, "batchSize", 1000);
    }
    bson_destroy(&reply);
    SHL_ERR(shl_remote_run_self(&s->remote, ns.db, &cmd, NULL, &reply, st));
    d->cursor_id = 0;
    if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.id", &it)) {
        d->cursor_id = bson_iter_as_int64(&it);
    }
    if (bson_iter_init_find(&it, &reply, "cursor") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t cur;
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&cur, data, len);
        n = mig_docs_of(&cur, bson_has_field(&cur, "firstBatch") ? "firstBatch" : "nextBatch",
                        &docs);
    }
    if (n > 0) {
        d->pending = bson_malloc(n * sizeof(*d->pending));
    }
    for (size_t i = 0; i < n; i++) {
        if (mig_doc_in_range(&d->pattern, &docs[i], d->min, d->max)) {
            d->pending[d->npending++] = bson_copy(&docs[i]);
        }
    }
    if (d->cursor_id == 0) {
        d->cursor_done = true;
    }
done:
    bson_free(docs);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* _migrateClone: {objects: [documents of the range]}, about MIG_BATCH_BYTES / 4 a reply
 * (one document at least, never past MIG_BATCH_BYTES unless it alone is larger); empty when
 * all were sent. */
static int
cmd_migrate_clone(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    shard_donor_t *d = NULL;
    bson_t objects;
    size_t nobj = 0, bytes = 0;
    bool open = false, full = false;
    char key[24];
    const char *k;

    SHL_ERR(shl_cmd_check_fields(cmd, clone_fields, st));
    SHL_ERR(donor_for_session(s, cmd, "_migrateClone", &d, st));
    /* Reading the range fills the cache: the batch waits while eviction catches up, so
     * clients' reads and writes here do not evict. */
    SHL_ERR(mig_cache_pace(s, op, false, &d->paced_ms, st));
    BSON_APPEND_ARRAY_BEGIN(reply, "objects", &objects);
    open = true;
    while (!full && bytes < MIG_BATCH_BYTES / 4) {
        if (d->pending_pos == d->npending) {
            if (d->cursor_done) {
                break;
            }
            SHL_ERR(clone_fetch(s, d, st));
            continue;
        }
        {
            bson_t *doc = d->pending[d->pending_pos];
            if (!shl_bson_array_has_room(&objects, (uint32_t)nobj, doc->len, MIG_BATCH_BYTES)) {
                full = true;
                break;
            }
            bson_uint32_to_string((uint32_t)nobj, &k, key, sizeof(key));
            BSON_APPEND_DOCUMENT(&objects, k, doc);
            nobj++;
            bytes += doc->len;
            bson_destroy(doc);
            d->pending_pos++;
        }
    }
    d->cloned += (int64_t)nobj;
    if (nobj == 0) {
        SHL_LOG_INFO(SHARDING, 4200305, "Outgoing migration cloned", "ns", BCON_UTF8(d->ns),
                     "documents", BCON_INT64(d->cloned), "pacedMillis", BCON_INT64(d->paced_ms));
    }
done:
    if (open) {
        bson_append_array_end(reply, &objects);
    }
    if (d != NULL) {
        donor_release(s, d);
    }
    return ret;
}

/* The documents of ns whose _id is one of ids[0..n) (copies into *out, *nout). */
static int
lookup_ids(shard_state_t *s, const shl_ns_t *ns, bson_t **ids, size_t n, bson_t ***out,
           size_t *nout, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, filter, idf, in, *docs = NULL;
    int64_t cursor_id = 0;
    size_t cap = 0;
    char key[24];
    const char *k;

    *out = NULL;
    *nout = 0;
    BSON_APPEND_UTF8(&cmd, "find", ns->coll);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &idf);
    BSON_APPEND_ARRAY_BEGIN(&idf, "$in", &in);
    for (size_t i = 0; i < n; i++) {
        bson_iter_t it;
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
        if (bson_iter_init_find(&it, ids[i], "_id")) {
            bson_append_value(&in, k, -1, bson_iter_value(&it));
        }
    }
    bson_append_array_end(&idf, &in);
    bson_append_document_end(&filter, &idf);
    bson_append_document_end(&cmd, &filter);
    BSON_APPEND_INT32(&cmd, "batchSize", 100000);
    for (;;) {
        bson_iter_t it;
        size_t nd = 0;
        bson_destroy(&reply);
        SHL_ERR(shl_remote_run_self(&s->remote, ns->db, &cmd, NULL, &reply, st));
        cursor_id = 0;
        if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.id", &it)) {
            cursor_id = bson_iter_as_int64(&it);
        }
        if (bson_iter_init_find(&it, &reply, "cursor") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_t cur;
            const uint8_t *data;
            uint32_t len;
            bson_iter_document(&it, &len, &data);
            bson_init_static(&cur, data, len);
            nd = mig_docs_of(&cur, bson_has_field(&cur, "firstBatch") ? "firstBatch" : "nextBatch",
                             &docs);
        }
        for (size_t i = 0; i < nd; i++) {
            if (*nout == cap) {
                cap = cap == 0 ? 64 : cap * 2;
                *out = bson_realloc(*out, cap * sizeof(**out));
            }
            (*out)[(*nout)++] = bson_copy(&docs[i]);
        }
        bson_free(docs);
        docs = NULL;
        if (cursor_id == 0) {
            break;
        }
        bson_reinit(&cmd);
        BSON_APPEND_INT64(&cmd, "getMore", cursor_id);
        BSON_APPEND_UTF8(&cmd, "collection", ns->coll);
    }
done:
    if (ret != 0) {
        for (size_t i = 0; i < *nout; i++) {
            bson_destroy((*out)[i]);
        }
        bson_free(*out);
        *out = NULL;
        *nout = 0;
    }
    bson_free(docs);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/*
 * Drain up to 50 captured _ids, in order: each one's current document when it is (still) in
 * the range goes to 'reload', else its _id to 'deleted'. Stops before 'bytes' would pass
 * MIG_BATCH_BYTES (putting the rest back, first in line); *more says whether ids remain.
 */
static int
drain_mods(shard_state_t *s, shard_donor_t *d, bson_t *reload, bson_t *deleted, size_t *nrel,
           size_t *ndel, size_t *bytes, bool *more, shl_status_t *st)
{
    int ret = 0;
    bson_t **ids = NULL, **docs = NULL;
    size_t nids = 0, ndocs = 0, i = 0;
    shl_ns_t ns;
    char key[24];
    const char *k;

    *more = false;
    SHL_ERR(shl_ns_parse(&ns, d->ns, st));
    pthread_mutex_lock(&s->mig_mu);
    nids = d->nmods < 50 ? d->nmods : 50;
    if (nids > 0) {
        ids = bson_malloc(nids * sizeof(*ids));
        memcpy(ids, d->mods, nids * sizeof(*ids));
        memmove(d->mods, d->mods + nids, (d->nmods - nids) * sizeof(*d->mods));
        d->nmods -= nids;
        for (size_t j = 0; j < nids; j++) {
            d->mods_bytes -= mod_bytes(ids[j]);
        }
    }
    pthread_mutex_unlock(&s->mig_mu);
    if (nids == 0) {
        goto done;
    }
    SHL_ERR(lookup_ids(s, &ns, ids, nids, &docs, &ndocs, st));
    for (i = 0; i < nids; i++) {
        bson_iter_t a;
        const bson_t *hit = NULL;
        bool dup = false;
        if (!bson_iter_init_find(&a, ids[i], "_id")) {
            continue;
        }
        for (size_t j = i + 1; j < nids && !dup; j++) {
            dup = ids[i]->len == ids[j]->len &&
                  memcmp(bson_get_data(ids[i]), bson_get_data(ids[j]), ids[i]->len) == 0;
        }
        if (dup) {
            continue; /* its later entry sends it */
        }
        for (size_t j = 0; j < ndocs && hit == NULL; j++) {
            bson_iter_t b;
            if (bson_iter_init_find(&b, docs[j], "_id") &&
                shl_bson_value_equal(bson_iter_value(&a), bson_iter_value(&b))) {
                hit = docs[j];
            }
        }
        if (hit != NULL && mig_doc_in_range(&d->pattern, hit, d->min, d->max)) {
            size_t len = shl_bson_array_element_len((uint32_t)*nrel, hit->len);
            if (*nrel + *ndel > 0 && *bytes + len > MIG_BATCH_BYTES) {
                break; /* the next reply sends it */
            }
            bson_uint32_to_string((uint32_t)*nrel, &k, key, sizeof(key));
            BSON_APPEND_DOCUMENT(reload, k, hit);
            (*nrel)++;
            *bytes += len;
        } else {
            bson_uint32_to_string((uint32_t)*ndel, &k, key, sizeof(key));
            BSON_APPEND_DOCUMENT(deleted, k, ids[i]);
            *bytes += shl_bson_array_element_len((uint32_t)*ndel, ids[i]->len);
            (*ndel)++;
        }
    }
done:
    if (i < nids) {
        /* Not sent: back in front of the queue, in order. */
        size_t left = nids - i;
        pthread_mutex_lock(&s->mig_mu);
        if (d->nmods + left > d->capmods) {
            d->capmods = d->nmods + left + 256;
            d->mods = bson_realloc(d->mods, d->capmods * sizeof(*d->mods));
        }
        memmove(d->mods + left, d->mods, d->nmods * sizeof(*d->mods));
        memcpy(d->mods, ids + i, left * sizeof(*ids));
        d->nmods += left;
        for (size_t j = i; j < i + left; j++) {
            d->mods_bytes += mod_bytes(ids[j]);
        }
        pthread_mutex_unlock(&s->mig_mu);
        nids = i;
    }
    pthread_mutex_lock(&s->mig_mu);
    *more = d->nmods > 0;
    pthread_mutex_unlock(&s->mig_mu);
    for (size_t j = 0; j < nids; j++) {
        bson_destroy(ids[j]);
    }
    bson_free(ids);
    for (size_t j = 0; j < ndocs; j++) {
        bson_destroy(docs[j]);
    }
    bson_free(docs);
    return ret;
}

/* _getNextSessionMods: {oplog: [entries]}, the range's retryable-write history
 * (migration_session.c); empty when the donor has nothing more for now. */
static int
cmd_get_next_session_mods(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    shard_donor_t *d = NULL;
    bson_t arr = BSON_INITIALIZER;

    SHL_ERR(shl_cmd_check_fields(cmd, clone_fields, st));
    SHL_ERR(donor_for_session(s, cmd, "_getNextSessionMods", &d, st));
    if (d->sessions == NULL) {
        d->sessions = mig_session_source_new(d->ns, &d->pattern, d->min, d->max, true);
    }
    SHL_ERR(mig_session_source_next(s, d->sessions, &arr, st));
    BSON_APPEND_ARRAY(reply, "oplog", &arr);
done:
    if (d != NULL) {
        donor_release(s, d);
    }
    bson_destroy(&arr);
    return ret;
}

/* _transferMods: {reload: [documents], deleted: [{_id}], size}; empty when caught up. */
static int
cmd_transfer_mods(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    shard_donor_t *d = NULL;
    bson_t reload = BSON_INITIALIZER, deleted = BSON_INITIALIZER;
    size_t nrel = 0, ndel = 0, bytes = 0, before;
    bool more = true;

    SHL_ERR(shl_cmd_check_fields(cmd, clone_fields, st));
    SHL_ERR(donor_for_session(s, cmd, "_transferMods", &d, st));
    while (more && bytes < MIG_BATCH_BYTES / 2) {
        before = nrel + ndel;
        SHL_ERR(drain_mods(s, d, &reload, &deleted, &nrel, &ndel, &bytes, &more, st));
        if (nrel + ndel == before && more) {
            break; /* the next document is too large for this reply */
        }
    }
    BSON_APPEND_ARRAY(reply, "reload", &reload);
    BSON_APPEND_ARRAY(reply, "deleted", &deleted);
    BSON_APPEND_INT64(reply, "size", (int64_t)bytes);
done:
    if (d != NULL) {
        donor_release(s, d);
    }
    bson_destroy(&reload);
    bson_destroy(&deleted);
    return ret;
}

/* ---------------------------------------------------------------- coordinator */

/*
 * The number of documents of ns (collection 'uuid') in [min, max) of shard key 'pattern' on
 * this shard: the entries of the shard key index there, else a collection scan. *out is -1
 * when the collection is gone or was recreated.
 */
static int
count_doc(void *arg, const bson_t *doc, shl_status_t *st)
{
    (void)doc;
    (void)st;
    (*(int64_t *)arg)++;
    return 0;
}

static int
count_range_docs(shard_state_t *s, const char *ns, const shl_uuid_t *uuid, const bson_t *pattern,
                 const bson_t *min, const bson_t *max, int64_t *out, shl_status_t *st)
{
    int ret = 0;
    int64_t n = 0;
    bool present;

    *out = -1;
    SHL_ERR(mig_range_walk(s, ns, uuid, pattern, min, max, false, count_doc, &n, &present, st));
    *out = present ? n : -1;
done:
    return ret;
}

int
mig_mark_task_ready_counted(shard_state_t *s, shl_op_ctx_t *op, const shl_uuid_t *id,
                            shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, filter, *docs = NULL;
    size_t n = 0;
    int64_t orphans = -1;
    shl_range_task_t t;
    bool parsed = false;
    shard_coll_meta_t *m = NULL;

    memset(&t, 0, sizeof(t));
    BSON_APPEND_UTF8(&cmd, "find", "rangeDeletions");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    shl_uuid_append(&filter, "_id", id);
    bson_append_document_end(&cmd, &filter);
    bson_destroy(&reply);
    SHL_ERR(shl_remote_run_self(&s->remote, "config", &cmd, NULL, &reply, st));
    n = mig_cursor_docs(&reply, &docs);
    if (n > 0 && shl_range_task_parse(&docs[0], &t, st) == 0) {
        const bson_t *pattern = t.key_pattern;
        parsed = true;
        if (pattern == NULL && (m = shard_meta_peek(s, t.ns)) != NULL && m->rt != NULL) {
            pattern = &shl_routing_table_key_pattern(m->rt)->pattern;
        }
        if (t.pending && pattern != NULL &&
            count_range_docs(s, t.ns, &t.collection_uuid, pattern, t.min, t.max, &orphans, st) !=
                0) {
            orphans = -1;
        }
    }
    shl_status_clear(st); /* without a count the task is marked ready all the same */
    ret = shl_range_deletion_mark_ready_orphans(op, id, orphans, st);
done:
    if (parsed) {
        shl_range_task_cleanup(&t);
    }
    shard_meta_release(m);
    bson_free(docs);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/*
 * The commit sequence (decision committed): the recipient's critical section released
 * (_recvChunkReleaseCritSec), its task removed (a delete of its config.rangeDeletions
 * document, as MongoDB's donor sends), the donor's marked ready. The abort sequence: the
 * donor's task removed, the recipient told _recvChunkAbort (its task marked ready, its
 * critical section left). Idempotent; the decision was persisted before (the checkpoint of
 * completeMigration) and the framework deletes the document after.
 */
static int
coord_finish(shard_state_t *s, shl_op_ctx_t *op, const shl_remote_t *r, mig_coord_t *c,
             shl_status_t *st)
{
    int ret = 0;

    if (c->decision > 0) {
        SHL_ERR(mig_recipient_finish(r, c, st));
        /* The donated documents are this shard's orphans now: numOrphanDocs of the task
         * (MongoDB copies the recipient's count; the donor's own count is the same, the
         * range having been in the critical section until the commit). */
        ret = mig_mark_task_ready_counted(s, op, &c->id, st);
        if (ret == SHL_CODE_NO_SUCH_KEY) {
            shl_status_clear(st);
            ret = 0;
        }
        SHL_ERR(ret);
    } else {
        SHL_ERR(shl_range_deletion_remove(op, &c->id, st));
        SHL_ERR(mig_recipient_finish(r, c, st));
    }
    pause_at(SHL_FAILPOINT(moveChunkHangAtStep6), op);
done:
    return ret;
}

/* ---------------------------------------------------------------- the donor */

typedef struct move_args {
    const char *ns;
    const char *to;
    bson_t min, max;
    bool wait_for_delete;
    const bson_t *req; /* the _shardsvrMoveRange command (its secondaryThrottle) */
} move_args_t;

/* ExceededMemoryLimit once the captured writes passed mods_max_bytes() (some were then
 * not recorded, so the recipient could not catch up: the migration must abort). */
static int
check_mods_memory(shard_state_t *s, shard_donor_t *d, shl_status_t *st)
{
    int ret = 0;
    bool overflow;

    pthread_mutex_lock(&s->mig_mu);
    overflow = d->mods_overflow;
    pthread_mutex_unlock(&s->mig_mu);
    if (overflow) {
        SHL_FAIL(st, SHL_CODE_EXCEEDED_MEMORY_LIMIT,
                 "Aborting migration because of high memory usage: the writes captured in the "
                 "range and not yet sent passed %lld bytes (migrationCaptureMaxBytes)",
                 (long long)mods_max_bytes());
    }
done:
    return ret;
}

/* The donor's check before each _recvChunkStatus of wait_steady (mig_wait_steady): the
 * coordinator interrupted (shutdown) ends the wait with InterruptedAtShutdown, too many
 * captured writes with ExceededMemoryLimit; a pause of 20 ms between polls. */
typedef struct steady_check {
    shard_state_t *s;
    shl_op_ctx_t *op;
    const shl_coord_t *fc;
    shard_donor_t *d;
} steady_check_t;

static int
steady_check(void *arg, int polls, shl_status_t *st)
{
    steady_check_t *k = arg;
    int ret = 0;

    if (polls > 0) {
        SHL_ERR(mig_sleep(k->op, 20, st));
    }
    if (shl_coord_interrupted(k->fc)) {
        SHL_FAIL(st, SHL_CODE_INTERRUPTED_AT_SHUTDOWN, "migration interrupted at shutdown");
    }
    SHL_ERR(check_mods_memory(k->s, k->d, st));
done:
    return ret;
}

/*
 * The time the recipient's ownership starts (the chunk history's validAfter, seeds/000 "The
 * historical routing table"), as MongoDB's donor takes its cluster time once the recipient
 * has committed: above every timestamp the recipient gave the migrated documents (its
 * _recvChunkCommit reply's $clusterTime / operationTime) and every write this donor made
 * (writes to the range are blocked by now), so a snapshot read at validAfter or later finds
 * everything on the recipient and an earlier one on the donor. The donor's clock moves past it.
 */
static uint64_t
commit_valid_after(shard_state_t *s, const bson_t *recipient_reply)
{
    shl_storage_engine_t *eng = s->svc->storage;
    uint64_t ts = shl_storage_clock_now(eng);
    bson_iter_t it, sub;

    if (bson_iter_init_find(&it, recipient_reply, "$clusterTime") &&
        BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub) &&
        bson_iter_find(&sub, "clusterTime") && BSON_ITER_HOLDS_TIMESTAMP(&sub) &&
        shl_bson_iter_timestamp_u64(&sub) > ts) {
        ts = shl_bson_iter_timestamp_u64(&sub);
    }
    if (bson_iter_init_find(&it, recipient_reply, "operationTime") &&
        BSON_ITER_HOLDS_TIMESTAMP(&it) && shl_bson_iter_timestamp_u64(&it) > ts) {
        ts = shl_bson_iter_timestamp_u64(&it);
    }
    ts++;
    shl_storage_clock_advance(eng, ts);
    return ts;
}

/*
 * The donor's digest of the range, computed by a thread of its own while the recipient
 * computes its digest (both in the critical section: the donor's range no longer changes once
 * writes are blocked and the transactions that wrote it are done).
 */
typedef struct digest_job {
    shard_state_t *s;
    const mig_coord_t *c;
    const shl_shard_key_pattern_t *kp;
    mig_digest_t digest;
    int ret;
    shl_status_t st;
    int64_t micros;
    pthread_t thread;
} digest_job_t;

static void *
digest_main(void *arg)
{
    digest_job_t *j = arg;
    int64_t start_us = shl_clock_mono_us();

    j->ret = mig_range_digest(j->s, j->c->ns, &j->c->coll_uuid, &j->kp->pattern, j->c->min,
                              j->c->max, &j->digest, &j->st);
    j->micros = shl_clock_mono_us() - start_us;
    return NULL;
}

/* Start the donor's digest ('started' false: pthread_create failed, run it inline). */
static void
digest_start(digest_job_t *j, shard_state_t *s, const mig_coord_t *c,
             const shl_shard_key_pattern_t *kp, bool *started)
{
    memset(j, 0, sizeof(*j));
    j->s = s;
    j->c = c;
    j->kp = kp;
    j->st = (shl_status_t)SHL_STATUS_INIT;
    *started = pthread_create(&j->thread, NULL, digest_main, j) == 0;
}

/*
 * Compare the donor's digest (job 'j', joined here) with the recipient's ('theirs'; NULL when
 * its reply had none, which fails too: every Shale recipient sends one). A mismatch logs both
 * (4200220) and fails with DataCorruptionDetected: the caller aborts the migration.
 */
static int
verify_digest(digest_job_t *j, bool *started, const mig_digest_t *theirs, shl_status_t *st)
{
    int ret = 0;
    char a[128], b[128];

    if (*started) {
        pthread_join(j->thread, NULL);
        *started = false;
    } else {
        digest_main(j);
    }
    if (j->ret != 0) {
        *st = j->st;
        ret = j->ret;
        goto done;
    }
    mig_digest_format(&j->digest, a, sizeof(a));
    if (theirs == NULL || !mig_digest_eq(theirs, &j->digest)) {
        if (theirs != NULL) {
            mig_digest_format(theirs, b, sizeof(b));
        } else {
            snprintf(b, sizeof(b), "none");
        }
        SHL_LOG_ERROR(SHARDING, 4200220, "Migration range digest mismatch; aborting", "ns",
                      BCON_UTF8(j->c->ns), "donorDigest", BCON_UTF8(a), "recipientDigest",
                      BCON_UTF8(b));
        SHL_FAIL(st, SHL_CODE_DATA_CORRUPTION_DETECTED,
                 "Range digest mismatch between donor (%s) and recipient %s (%s)", a,
                 j->c->recipient, b);
    }
    SHL_LOG_INFO(SHARDING, 4200221, "Migration range digests match", "ns", BCON_UTF8(j->c->ns),
                 "digest", BCON_UTF8(a), "durationMicros", BCON_INT64(j->micros));
done:
    return ret;
}

/* Refresh the filtering metadata of ns, retrying a few times (the config server may be
 * briefly unreachable). */
static int
refresh_retrying(shard_state_t *s, shl_op_ctx_t *op, const char *ns, shl_status_t *st)
{
    int ret = 0;

    for (int i = 0; i < 50; i++) {
        shl_status_clear(st);
        ret = shard_meta_refresh(s, ns, NULL, st);
        if (ret == 0 || shl_op_check_interrupt(op, st) != 0) {
            break;
        }
        mig_sleep(op, 100, st);
    }
    return ret;
}

/* ---------------------------------------------------------------- the migration coordinator */

/*
 * The migration is the coordinator type "MigrationCoordinator" over
 * config.migrationCoordinators (docs/design/coordinators.md "The migration coordinator"): the
 * live run and the finishing of a document a crash left are one code path. The phases up to
 * the commit use the live run's memory (donor_live_t), which a restart loses: a resumed
 * document goes to resolveDecision or completeMigration.
 */
typedef struct donor_live {
    shl_op_ctx_t op; /* the migration's own operation (a step-down kills it) */
    mig_coord_t c;   /* the document's facts (its decision lives in the document) */
    bson_t *req;     /* the _shardsvrMoveRange command (its secondaryThrottle) */
    bool wait_for_delete;
    shard_coll_meta_t *m;     /* the metadata the range was checked against, until the commit */
    shl_chunk_version_t chunk_version;
    bool crit;                /* the donor's critical section is held */
    bool failed;              /* a phase failed before the commit: the decision is abort */
    bool committed;           /* the config server committed */
    bool verify, digesting, has_digest;
    mig_digest_t recv_digest;
    digest_job_t dj;
    uint64_t valid_after;
    int step;                 /* the next of live_steps */
    bool inserted;            /* the document was written (else nothing is to be undone) */
    int err;                  /* what the request is answered with (0: ok) */
    shl_status_t err_st;
    int64_t start_us;
} donor_live_t;

static void
donor_live_free(donor_live_t *l)
{
    if (l != NULL) {
        mig_coord_cleanup(&l->c);
        if (l->req != NULL) {
            bson_destroy(l->req);
        }
        bson_free(l);
    }
}

/* The donor whose live run coordinator c is, or NULL (a resumed coordinator, or the request
 * was answered already). Only c's thread ends it, so it stays valid until donor_answer. */
static shard_donor_t *
live_donor(shard_state_t *s, const shl_coord_t *c)
{
    shard_donor_t *d = NULL;
    shl_status_t st = SHL_STATUS_INIT;
    shl_uuid_t id;
    bson_iter_t it;

    if (bson_iter_init_find(&it, shl_coord_doc(c), "_id") &&
        shl_idl_read_uuid(&it, "MigrationCoordinatorDocument", &id, &st) == 0) {
        pthread_mutex_lock(&s->mig_mu);
        d = s->donor;
        if (d != NULL && (d->finished || d->live == NULL || !shl_uuid_eq(&d->id, &id))) {
            d = NULL;
        }
        pthread_mutex_unlock(&s->mig_mu);
    }
    return d;
}

/* Answer the request and its joiners with (ret, *st); the donor leaves the registry (the
 * registry's reference goes: d must not be used afterwards). A new migration still waits
 * for the coordinator's end (registry_donor). */
static void
donor_answer(shard_state_t *s, shard_donor_t *d, int ret, const shl_status_t *st)
{
    if (d->live != NULL) {
        shard_meta_release(d->live->m);
        d->live->m = NULL;
    }
    pthread_mutex_lock(&s->mig_mu);
    d->runner = NULL;
    d->finished = true;
    d->result = ret;
    if (ret != 0) {
        d->result_st = *st;
    }
    if (s->donor == d) {
        s->donor = NULL;
        donor_unref_locked(d);
    }
    pthread_cond_broadcast(&s->mig_cv);
    pthread_mutex_unlock(&s->mig_mu);
}

/* End the live run's in-memory state: the digest thread joined, the capture stopped, the
 * critical section left (after a refresh when committed). */
static void
donor_stop_live(shard_state_t *s, shard_donor_t *d)
{
    donor_live_t *l = d->live;

    if (l->digesting) {
        pthread_join(l->dj.thread, NULL); /* it reads l->c and d->pattern */
        l->digesting = false;
    }
    capture_stop(s, d);
    if (l->crit) {
        shl_status_t tmp = SHL_STATUS_INIT;
        if (l->committed) {
            refresh_retrying(s, &l->op, l->c.ns, &tmp);
        }
        shard_crit_exit(s, l->c.ns);
        l->crit = false;
    }
}

/* start (checkpoint: the document inserted): the donor's pending range deletion task. */
static int
step_start(shard_state_t *s, shl_coord_t *c, shard_donor_t *d, shl_status_t *st)
{
    donor_live_t *l = d->live;
    shl_range_task_t t;

    (void)s;
    (void)c;
    memset(&t, 0, sizeof(t));
    t.id = l->c.id;
    snprintf(t.ns, sizeof(t.ns), "%s", l->c.ns);
    t.collection_uuid = l->c.coll_uuid;
    snprintf(t.donor_shard, sizeof(t.donor_shard), "%s", l->c.donor);
    t.min = l->c.min;
    t.max = l->c.max;
    t.key_pattern = &d->pattern.pattern;
    t.pending = true;
    /* waitForDelete cleans up at once, as MongoDB's donor asks ("now", not "delayed"). */
    t.when_now = l->wait_for_delete;
    t.pre_migration_version = l->c.pre_version;
    return shl_range_deletion_persist(&l->op, &t, st);
}

/* clone: capture the range's writes from before the first document is cloned, start the
 * recipient. */
static int
step_clone(shard_state_t *s, shl_coord_t *c, shard_donor_t *d, shl_status_t *st)
{
    int ret = 0;
    donor_live_t *l = d->live;

    (void)c;
    SHL_ERR(capture_start(s, &l->op, d, st));
    pause_at(SHL_FAILPOINT(moveChunkHangAtStep2), &l->op);
    SHL_ERR(mig_send_recv_chunk_start(shl_coord_remote(c), &l->c, &d->pattern.pattern, l->req, st));
    pause_at(SHL_FAILPOINT(moveChunkHangAtStep3), &l->op);
    SHL_ERR(shl_op_check_interrupt(&l->op, st)); /* killed by a step-down (shard_step_up.c) */
done:
    return ret;
}

/* catchUp: until the recipient has cloned and caught up ("steady"). */
static int
step_catch_up(shard_state_t *s, shl_coord_t *c, shard_donor_t *d, shl_status_t *st)
{
    int ret = 0;
    donor_live_t *l = d->live;
    steady_check_t k = {.s = s, .op = &l->op, .fc = c, .d = d};

    SHL_ERR(mig_wait_steady(shl_coord_remote(c), &l->c, steady_check, &k, st));
    pause_at(SHL_FAILPOINT(moveChunkHangAtStep4), &l->op);
    SHL_ERR(shl_op_check_interrupt(&l->op, st));
done:
    return ret;
}

/* enterCriticalSection: writes wait, the recipient takes the last changes
 * (_recvChunkCommit), then reads wait too; the digests compared. */
static int
step_enter_crit(shard_state_t *s, shl_coord_t *c, shard_donor_t *d, shl_status_t *st)
{
    int ret = 0;
    donor_live_t *l = d->live;
    bson_t reply = BSON_INITIALIZER;

    (void)c;
    SHL_ERR(shard_crit_enter(s, &l->op, l->c.ns, SHARD_CRIT_WRITES, st));
    l->crit = true;
    /* Transactions that wrote the range since the capture began commit (and are captured)
     * or abort before the last drain; those that wrote only outside it go on (every write of
     * theirs since the capture began is observed: capture_start waited for the earlier). */
    SHL_ERR(wait_txn_writers(s, &l->op, l->c.ns, d, st));
    /* The last writes before the critical section may have passed the limit. */
    SHL_ERR(check_mods_memory(s, d, st));
    l->verify = shl_opt_bool(SHL_OPT_migrationVerifyDigest);
    if (l->verify) {
        /* The donor's range is final now: digest it while the recipient digests its copy. */
        digest_start(&l->dj, s, &l->c, &d->pattern, &l->digesting);
    }
    bson_destroy(&reply);
    SHL_ERR(mig_send_recv_chunk_commit(shl_coord_remote(c), &l->c, &reply, st));
    l->valid_after = commit_valid_after(s, &reply);
    SHL_ERR(mig_digest_parse(&reply, MIG_DIGEST_FIELD, &l->recv_digest, &l->has_digest, st));
    SHL_ERR(shard_crit_enter(s, &l->op, l->c.ns, SHARD_CRIT_ALL, st));
    capture_stop(s, d);
    /* Checksum verification: no write reaches the range now (migration_digest.h). */
    if (l->verify) {
        SHL_ERR(verify_digest(&l->dj, &l->digesting, l->has_digest ? &l->recv_digest : NULL, st));
    }
    pause_at(SHL_FAILPOINT(hangBeforeCommitMigration), &l->op);
    /* Only a primary commits: a member that stepped down leaves the decision to the new
     * primary's recovery, from the coordinator document. */
    SHL_ERR(shl_op_check_interrupt(&l->op, st));
    if (!shl_db_repl_is_primary(s->svc)) {
        SHL_FAIL(st, SHL_CODE_NOT_WRITABLE_PRIMARY, "not primary: the migration does not commit");
    }
done:
    bson_destroy(&reply);
    return ret;
}

/* commitOnConfig: _configsvrCommitChunkMigration; an unknown outcome is asked of the config
 * server; committed, the donor refreshes and leaves its critical section. */
static int
step_commit(shard_state_t *s, shl_coord_t *c, shard_donor_t *d, shl_status_t *st)
{
    donor_live_t *l = d->live;
    mig_commit_args_t a = {.chunk_version = l->chunk_version,
                           .coll_version = l->m->coll_version,
                           .valid_after = l->valid_after,
                           .digest = l->verify ? &l->dj.digest : NULL};
    int decision = mig_commit_on_config(shl_coord_remote(c), &l->c, &a, st);

    if (decision == 0) {
        /* Still unknown: the request gets the commit's error, resolveDecision goes on asking
         * (retried by the framework). The range may belong to the recipient now: the donor
         * forgets what it filtered with before it leaves the critical section, so that no
         * request is served with it (each loads the config server's, or fails while it
         * cannot). */
        shl_status_t why = *st;
        SHL_LOG_WARNING(SHARDING, 4200202,
                        "Migration outcome unknown; the coordinator resolves it with the "
                        "config server",
                        "ns", BCON_UTF8(l->c.ns), "error", BCON_UTF8(why.reason));
        shard_meta_release(l->m);
        l->m = NULL;
        if (shard_meta_forget(s, l->c.ns, st) != 0) {
            SHL_LOG_WARNING(SHARDING, 4200217,
                            "Could not forget the filtering metadata of a migration with an "
                            "unknown outcome",
                            "ns", BCON_UTF8(l->c.ns), "error", BCON_UTF8(st->reason));
            shl_status_clear(st);
        }
        donor_stop_live(s, d);
        donor_answer(s, d, why.code, &why);
        shl_status_clear(st);
        return 0;
    }
    if (decision < 0) {
        return st->code;
    }
    l->committed = true;
    mig_coord_set_decision(c, &l->c, 1);
    /* The pre-migration metadata must not outlive the migration: the range deleter waits
     * for every holder of metadata that owned the range. */
    shard_meta_release(l->m);
    l->m = NULL;
    /* The donor's new metadata, then the waiting operations go on (and get StaleConfig). */
    if (refresh_retrying(s, &l->op, l->c.ns, st) != 0) {
        l->err = st->code != 0 ? st->code : SHL_CODE_OPERATION_FAILED;
        l->err_st = *st;
        shl_status_clear(st);
    }
    pause_at(SHL_FAILPOINT(hangBeforeLeavingCriticalSection), &l->op);
    if (l->err == 0) {
        shard_crit_exit(s, l->c.ns);
        l->crit = false;
    }
    donor_stop_live(s, d); /* after a failed refresh: tries again, then leaves */
    pause_at(SHL_FAILPOINT(moveChunkHangAtStep5), &l->op);
    return 0;
}

/* The live run's steps, one per phase from start to commitOnConfig, in order. */
typedef int (*live_step_fn)(shard_state_t *s, shl_coord_t *c, shard_donor_t *d,
                            shl_status_t *st);
static const struct {
    const char *phase;
    live_step_fn run;
    bool persist; /* the document written first (inserted by "start") */
} live_steps[] = {
    {"start", step_start, true},
    {"clone", step_clone, true},
    {"catchUp", step_catch_up, true},
    {"enterCriticalSection", step_enter_crit, true},
    {"commitOnConfig", step_commit, false}, /* in the critical section: no extra write */
};

/* Write the document durably with "phase": 'phase' (the framework's checkpoint, done by
 * the phase itself so that a refused write -- a step-down -- ends the live run like any
 * other error instead of holding it before the phase). */
static int
persist_phase(shl_coord_t *c, const char *phase, shl_status_t *st)
{
    bson_t doc = BSON_INITIALIZER;

    bson_copy_to_excluding_noinit(shl_coord_doc(c), &doc, "phase", NULL);
    BSON_APPEND_UTF8(&doc, "phase", phase);
    shl_coord_doc_set(c, &doc);
    bson_destroy(&doc);
    return shl_coord_persist(c, st);
}

/* A phase of the live run: its next step; an error before the commit makes the decision
 * abort (the later steps are skipped). Nothing without the live run (a resumed document). */
static int
phase_live(shl_coord_t *c, shl_status_t *st)
{
    shard_state_t *s = shl_coord_type_arg(c);
    shard_donor_t *d = live_donor(s, c);
    donor_live_t *l = d != NULL ? d->live : NULL;
    int ret = 0;

    if (l == NULL || l->failed || l->committed ||
        l->step >= (int)(sizeof(live_steps) / sizeof(live_steps[0]))) {
        return 0;
    }
    if (live_steps[l->step].persist) {
        ret = persist_phase(c, live_steps[l->step].phase, st);
        l->inserted = l->inserted || ret == 0;
    }
    if (ret == 0) {
        ret = live_steps[l->step].run(s, c, d, st);
    }
    l->step++;
    if (ret != 0) {
        l->failed = true;
        l->err = ret;
        l->err_st = *st;
        l->err_st.code = ret;
        donor_stop_live(s, d);
        mig_coord_set_decision(c, &l->c, -1);
        shl_status_clear(st);
    }
    return 0;
}

/*
 * completeMigration (the decision persisted first): the commit or abort sequence
 * (coord_finish), retried on any error until it is done or the process stops, as MongoDB's
 * retryIdempotentWorkAsPrimaryUntilSuccessOrStepdown; the live request is answered after
 * the first attempt (committed: ok whatever the cleanup; aborted: the error that aborted).
 */
static int
phase_complete_migration(shl_coord_t *c, shl_status_t *st)
{
    shard_state_t *s = shl_coord_type_arg(c);
    shard_donor_t *d = live_donor(s, c);
    shl_status_t ignored = SHL_STATUS_INIT;
    bool persisted = false;
    int64_t backoff = 500;
    shl_op_ctx_t op;
    mig_coord_t mc;
    int ret = 0;

    memset(&mc, 0, sizeof(mc));
    mig_internal_op(s, &op);
    SHL_ERR(mig_coord_parse(shl_coord_doc(c), &mc, st));
    if (d != NULL && !d->live->inserted) {
        donor_answer(s, d, d->live->err, &d->live->err_st); /* nothing persisted nor sent */
        goto done;
    }
    if (d == NULL) {
        SHL_LOG_INFO(SHARDING, 4200205, "Recovering a migration", "ns", BCON_UTF8(mc.ns),
                     "decision", BCON_UTF8(mc.decision > 0 ? "committed" : "aborted"));
        shard_meta_refresh(s, mc.ns, NULL, &ignored);
    } else {
        donor_stop_live(s, d);
    }
    for (;;) {
        shl_status_clear(st);
        ret = persisted ? 0 : persist_phase(c, "completeMigration", st); /* the decision */
        persisted = ret == 0;
        if (ret == 0) {
            ret = coord_finish(s, &op, shl_coord_remote(c), &mc, st);
        }
        if (d != NULL) {
            donor_live_t *l = d->live;
            if (ret != 0) {
                SHL_LOG_WARNING(SHARDING, 4200207,
                                "Migration commit or abort sequence failed; retrying", "ns",
                                BCON_UTF8(mc.ns), "error", BCON_UTF8(st->reason));
            } else if (l->committed) {
                SHL_LOG_INFO(SHARDING, 4200203, "Migration committed", "ns", BCON_UTF8(mc.ns),
                             "to", BCON_UTF8(mc.recipient), "durationMillis",
                             BCON_INT64((shl_clock_mono_us() - l->start_us) / 1000));
            }
            donor_answer(s, d, l->err, &l->err_st);
            d = NULL;
        }
        if (ret == 0 || shl_coord_interrupted(c) || !shl_db_repl_is_primary(s->svc)) {
            break; /* stepped down: the framework retries, the new primary resumes it */
        }
        mig_sleep(&op, backoff, &ignored);
        backoff = backoff < 5000 ? backoff * 2 : 5000;
    }
done:
    mig_coord_cleanup(&mc);
    return ret;
}

/* The coordinator ended before it answered its request (shutdown, a state document write
 * refused): the live state ends and the request gets an error (ok when committed). */
static void
migration_release(shl_coord_t *c)
{
    shard_state_t *s = shl_coord_type_arg(c);
    shard_donor_t *d = live_donor(s, c);
    shl_status_t st = SHL_STATUS_INIT;
    int ret;

    if (d == NULL) {
        return;
    }
    donor_stop_live(s, d);
    ret = d->live->err;
    st = d->live->err_st;
    if (ret == 0 && !d->live->committed) {
        ret = shl_status_set(&st,
                             shl_coord_interrupted(c) ? SHL_CODE_INTERRUPTED_AT_SHUTDOWN
                                                      : SHL_CODE_OPERATION_FAILED,
                             "the migration's coordinator stopped before the migration ended; "
                             "its document is finished at the next start");
    }
    donor_answer(s, d, ret, &st);
}

/* A document without a decision resumes at resolveDecision, one with it at
 * completeMigration (the phases before need the live run's memory). */
static int
migration_resume_phase(const bson_t *doc)
{
    return bson_has_field(doc, "decision") ? 6 : 5;
}

static const shl_coord_phase_t migration_phases[] = {
    {"start", phase_live, false}, /* phase_live and completeMigration write the document */
    {"clone", phase_live, false},
    {"catchUp", phase_live, false},
    {"enterCriticalSection", phase_live, false},
    {"commitOnConfig", phase_live, false},
    {"resolveDecision", mig_phase_resolve_decision, false},
    {"completeMigration", phase_complete_migration, false},
};

/* 'arg' is the shard state, set before the first coordinator starts (one shard per
 * process). */
static shl_coord_type_t migration_coord_type = {
    .name = "MigrationCoordinator",
    .coll = COORD_COLL,
    .phases = migration_phases,
    .nphases = sizeof(migration_phases) / sizeof(migration_phases[0]),
    .resume_phase = migration_resume_phase,
    .release = migration_release,
    .max_attempts = -1,
    .backoff_ms = 500,
};

/* ---------------------------------------------------------------- the request */

/*
 * Check [a->min, a->max) against this shard's metadata (exactly a chunk it owns, to another
 * shard) and build the migration's document (*doc) and d's live state, as MongoDB's
 * MigrationSourceManager does before anything is persisted. Errors: the refresh's,
 * NamespaceNotSharded, IllegalOperation, InvalidOptions, interruption.
 */
static int
donor_prepare(shard_state_t *s, shl_op_ctx_t *op, shard_donor_t *d, const move_args_t *a,
              bson_t *doc, shl_status_t *st)
{
    int ret = 0;
    shard_coll_meta_t *m = NULL;
    shard_identity_t id;
    donor_live_t *l = NULL;
    size_t idx = 0;
    bson_t cmin, cmax;
    char r[512];

    if (!shard_get_identity(s, &id)) {
        SHL_FAIL(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED,
                 "Cannot accept sharding commands if sharding state has not been initialized "
                 "with a shardIdentity document");
    }
    SHL_ERR(shard_meta_refresh(s, a->ns, &m, st));
    range_to_string(&a->min, &a->max, r, sizeof(r));
    if (m->rt == NULL) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_SHARDED, "%s is not sharded", a->ns);
    }
    if (shl_routing_table_find_chunk(m->rt, &a->min, &idx, st) != 0) {
        shl_status_clear(st);
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "no chunk of %s starts at %s", a->ns, r);
    }
    shl_routing_table_chunk_bounds(m->rt, idx, &cmin, &cmax);
    if (shl_shard_key_compare(&cmin, &a->min) != 0 || shl_shard_key_compare(&cmax, &a->max) != 0 ||
        strcmp(shl_routing_table_chunk_shard(m->rt, idx), id.shard_name) != 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "Range %s of %s is not a chunk owned by this shard (%s)", r, a->ns, id.shard_name);
    }
    if (strcmp(a->to, id.shard_name) == 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Destination shard cannot be the same as source");
    }
    pthread_mutex_lock(&s->mig_mu);
    ret = shl_shard_key_pattern_init(&d->pattern, &shl_routing_table_key_pattern(m->rt)->pattern,
                                     st);
    d->has_pattern = ret == 0;
    pthread_mutex_unlock(&s->mig_mu);
    SHL_ERR(ret);

    pause_at(SHL_FAILPOINT(moveChunkHangAtStep1), op);
    SHL_ERR(shl_op_check_interrupt(op, st));

    l = bson_malloc0(sizeof(*l));
    mig_internal_op(s, &l->op);
    l->start_us = shl_clock_mono_us();
    l->c.id = shl_uuid_new();
    {
        char u[37];
        shl_uuid_to_string(&l->c.id, u);
        snprintf(l->c.session_id, sizeof(l->c.session_id), "%s_%s_%s", id.shard_name, a->to, u);
    }
    snprintf(l->c.ns, sizeof(l->c.ns), "%s", a->ns);
    l->c.coll_uuid = *shl_routing_table_uuid(m->rt);
    snprintf(l->c.donor, sizeof(l->c.donor), "%s", id.shard_name);
    snprintf(l->c.recipient, sizeof(l->c.recipient), "%s", a->to);
    l->c.min = bson_copy(&a->min);
    l->c.max = bson_copy(&a->max);
    l->c.pre_version = m->shard_version;
    l->req = bson_copy(a->req);
    l->wait_for_delete = a->wait_for_delete;
    l->chunk_version = shl_routing_table_chunk_version(m->rt, idx);
    l->m = m;
    m = NULL;
    mig_coord_to_bson(&l->c, doc);
    pthread_mutex_lock(&s->mig_mu);
    d->id = l->c.id;
    snprintf(d->session_id, sizeof(d->session_id), "%s", l->c.session_id);
    d->live = l;
    d->runner = &l->op;
    pthread_mutex_unlock(&s->mig_mu);
done:
    shard_meta_release(m);
    return ret;
}

/* Wait until d is answered (op killed: leave; the migration goes on); its result. */
static int
donor_wait(shard_state_t *s, shl_op_ctx_t *op, shard_donor_t *d, shl_status_t *st)
{
    int ret = 0;

    pthread_mutex_lock(&s->mig_mu);
    while (!d->finished && ret == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->mig_cv, &s->mig_mu, &ts);
        ret = d->finished ? 0 : shl_op_check_interrupt(op, st);
    }
    if (ret == 0 && d->result != 0) {
        *st = d->result_st;
        ret = d->result;
    }
    pthread_mutex_unlock(&s->mig_mu);
    return ret;
}

/* waitForDelete: until the range deleter has removed the donor's task 'id'. */
static int
wait_task_deleted(shard_state_t *s, shl_op_ctx_t *op, const shl_uuid_t *id, shl_status_t *st)
{
    int ret = 0;
    int64_t n = 1;

    while (n > 0) {
        bson_t cmd = BSON_INITIALIZER, reply, filter;
        bson_iter_t it;
        BSON_APPEND_UTF8(&cmd, "count", "rangeDeletions");
        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "query", &filter);
        shl_uuid_append(&filter, "_id", id);
        bson_append_document_end(&cmd, &filter);
        ret = shl_remote_run_self(&s->remote, "config", &cmd, NULL, &reply, st);
        n = ret == 0 && bson_iter_init_find(&it, &reply, "n") ? bson_iter_as_int64(&it) : 0;
        bson_destroy(&cmd);
        bson_destroy(&reply);
        SHL_ERR(ret);
        if (n > 0) {
            SHL_ERR(mig_sleep(op, 50, st));
        }
    }
done:
    return ret;
}

static const char *const move_fields[] = {"toShard",
                                          "min",
                                          "max",
                                          "waitForDelete",
                                          "forceJumbo",
                                          "secondaryThrottle",
                                          "epoch",
                                          "collectionTimestamp",
                                          "maxChunkSizeBytes",
                                          "fromShard",
                                          NULL};

/* _shardsvrMoveRange: ns, toShard, min, max, waitForDelete -- runs (or joins) the migration
 * and replies when it has finished. */
static int
cmd_shardsvr_move_range(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    move_args_t a;
    bson_iter_t it;
    bool found = false, join = false;
    shard_donor_t *d = NULL;
    shl_ns_t parsed;

    (void)reply;
    memset(&a, 0, sizeof(a));
    SHL_ERR(shl_cmd_check_fields(cmd, move_fields, st));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '_shardsvrMoveRange._shardsvrMoveRange' is the wrong type, "
                 "expected type 'string'");
    }
    a.ns = bson_iter_utf8(&it, NULL);
    SHL_ERR(shl_ns_parse(&parsed, a.ns, st));
    SHL_ERR(shl_cmd_get_string(cmd, "toShard", &a.to, &found, st));
    if (!found) {
        SHL_ERR(shl_idl_missing("_shardsvrMoveRange", "toShard", st));
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "min", &a.min, &found, st));
    if (!found) {
        SHL_ERR(shl_idl_missing("_shardsvrMoveRange", "min", st));
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "max", &a.max, &found, st));
    if (!found) {
        SHL_ERR(shl_idl_missing("_shardsvrMoveRange", "max", st));
    }
    SHL_ERR(shl_cmd_get_bool(cmd, "waitForDelete", &a.wait_for_delete, st));
    {
        bool throttle;
        shl_write_concern_t wc;
        SHL_ERR(mig_throttle_parse(cmd, &throttle, &wc, st)); /* refused here, not later */
    }
    a.req = cmd;
    SHL_ERR(registry_donor(s, op, a.ns, &a.min, &a.max, a.to, &d, &join, st));
    if (!join) {
        bson_t doc = BSON_INITIALIZER;
        pthread_mutex_lock(&s->mig_mu);
        d->runner = op;
        pthread_mutex_unlock(&s->mig_mu);
        ret = donor_prepare(s, op, d, &a, &doc, st);
        if (ret == 0 && s->coords == NULL) {
            ret = shl_status_set(st, SHL_CODE_SHUTDOWN_IN_PROGRESS, "the shard is shutting down");
        }
        if (ret == 0) {
            migration_coord_type.arg = s;
            ret = shl_coord_start(s->coords, &migration_coord_type, &doc, st);
        }
        bson_destroy(&doc);
        if (ret != 0) {
            donor_answer(s, d, ret, st); /* nothing was persisted */
        }
    }
    ret = donor_wait(s, op, d, st);
    if (ret == 0 && !join && a.wait_for_delete) {
        ret = wait_task_deleted(s, op, &d->id, st);
    }
    pthread_mutex_lock(&s->mig_mu);
    donor_unref_locked(d);
    pthread_mutex_unlock(&s->mig_mu);
done:
    return ret;
}

/* ---------------------------------------------------------------- recovery */

/* Whether migration coordinators left behind are being finished (mig_mu not needed). */
static bool
recovering(shard_state_t *s)
{
    return s->coords != NULL && shl_coord_service_count_coll(s->coords, COORD_COLL) > 0;
}

void
shard_migration_recover_async(shard_state_t *s)
{
    shl_status_t st = SHL_STATUS_INIT;

    if (s->coords == NULL) {
        return;
    }
    migration_coord_type.arg = s;
    /* The documents already being finished are left to their coordinators. */
    if (shl_coord_service_recover(s->coords, &migration_coord_type, &st) != 0) {
        SHL_LOG_WARNING(SHARDING, 4200206, "could not read the migration coordinators' documents",
                        "error", BCON_UTF8(st.reason));
    }
}

/* ---------------------------------------------------------------- registration */

static const shl_command_t migration_commands[] = {
    {.name = "_shardsvrMoveRange",
     .run = cmd_shardsvr_move_range,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
     .help = "internal: donate a chunk to another shard (the donor runs the migration)"},
    {.name = "_migrateClone",
     .run = cmd_migrate_clone,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     .help = "internal: the next batch of documents of the migrating range"},
    {.name = "_transferMods",
     .run = cmd_transfer_mods,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     .help = "internal: the writes captured in the migrating range since the last call"},
    {.name = "_getNextSessionMods",
     .run = cmd_get_next_session_mods,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     .help = "internal: the retryable-write history of the migrating range"},
    /* Sent with the migration's session (lsid + txnNumber), as MongoDB's donor sends it:
     * MongoDB counts it among the retryable write commands. */
    {.name = "_recvChunkStart",
     .run = mig_recv_chunk_start,
     .flags =
         SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY | SHL_CMD_RETRYABLE_WRITE,
     .help = "internal: start receiving a chunk from a donor shard"},
    {.name = "_recvChunkStatus",
     .run = mig_recv_chunk_status,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     .help = "internal: the state of the incoming migration"},
    {.name = "_recvChunkCommit",
     .run = mig_recv_chunk_commit,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     .help = "internal: apply the last writes of the incoming migration"},
    {.name = "_recvChunkAbort",
     .run = mig_recv_chunk_abort,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     .help = "internal: abort the incoming migration"},
    {.name = "_recvChunkReleaseCritSec",
     .run = mig_recv_chunk_release_crit,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     .help = "internal: the incoming migration committed; leave the recipient's critical "
             "section"},
};

void
shard_migration_commands_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(migration_commands) / sizeof(migration_commands[0]); i++) {
        shl_command_registry_add(reg, &migration_commands[i]);
    }
}

void
shard_migration_interrupt_donor(shard_state_t *s)
{
    pthread_mutex_lock(&s->mig_mu);
    if (s->donor != NULL && s->donor->runner != NULL) {
        atomic_store(&s->donor->runner->killed, true);
        SHL_LOG_INFO(SHARDING, 4200146, "stepped down: interrupting the outgoing migration", "ns",
                     BCON_UTF8(s->donor->ns));
    }
    pthread_mutex_unlock(&s->mig_mu);
}

bool
shard_migration_active_on(shard_state_t *s, const char *ns)
{
    bool active = false;

    pthread_mutex_lock(&s->mig_mu);
    if (s->donor != NULL && strcmp(s->donor->ns, ns) == 0) {
        active = true;
    }
    if (s->recipient != NULL && !s->recipient->finished && strcmp(s->recipient->ns, ns) == 0) {
        active = true;
    }
    pthread_mutex_unlock(&s->mig_mu);
    return active;
}
