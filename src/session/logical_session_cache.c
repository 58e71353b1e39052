/*
 * logical_session_cache.c -- the logical session cache (logical_session_cache.h; seeds/001
 * "The logical session cache", "How the logical session cache syncs with the sessions
 * collection", "Periodic cleanup of the session catalog and transactions table").
 */
#include "session/logical_session_cache.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "session/session_commands.h"
#include "session/session_private.h"

struct shl_lsc {
    shl_service_ctx_t *svc;
    shl_lsc_role_t role;      /* read-only after new */
    shl_sessions_coll_t coll; /* set once before start, then read-only */
    bool has_coll;

    pthread_mutex_t mu;
    lsid_map_t active; /* guarded by mu: used since the last refresh */
    lsid_map_t ending; /* guarded by mu: ended since the last refresh */

    pthread_mutex_t refresh_mu; /* one refresh or reap at a time */

    pthread_mutex_t thr_mu; /* guards the fields below */
    pthread_cond_t thr_cv;
    bool started, stop;
    pthread_t thread;
};

shl_lsc_t *
shl_lsc_new(shl_service_ctx_t *svc, const shl_lsc_role_t *role)
{
    shl_lsc_t *lsc = bson_malloc0(sizeof(*lsc));

    lsc->svc = svc;
    if (role != NULL) {
        lsc->role = *role;
    }
    pthread_mutex_init(&lsc->mu, NULL);
    pthread_mutex_init(&lsc->refresh_mu, NULL);
    pthread_mutex_init(&lsc->thr_mu, NULL);
    pthread_cond_init(&lsc->thr_cv, NULL);
    lsid_map_init(&lsc->active);
    lsid_map_init(&lsc->ending);
    svc->lsc = lsc;
    return lsc;
}

void
shl_lsc_set_collection(shl_lsc_t *lsc, const shl_sessions_coll_t *coll)
{
    pthread_mutex_lock(&lsc->refresh_mu);
    lsc->coll = *coll;
    lsc->has_coll = true;
    pthread_mutex_unlock(&lsc->refresh_mu);
}

/* ---------------------------------------------------------------- recording */

int
shl_lsc_vivify(shl_lsc_t *lsc, const shl_lsid_t *child_or_parent, shl_status_t *st)
{
    int ret = 0;
    lsid_entry_t *e;
    int64_t now = shl_clock_wall_ms();
    shl_lsid_t parent;
    const shl_lsid_t *lsid = &parent;

    /* An internal (child) session's use is its parent's (seeds/000 "Internal Transactions"). */
    shl_lsid_parent(child_or_parent, &parent);
    pthread_mutex_lock(&lsc->mu);
    if ((e = lsid_map_get(&lsc->active, lsid)) == NULL) {
        bool added;
        if ((int64_t)lsc->active.n >= shl_opt_int(SHL_OPT_maxSessions)) {
            char id[37];
            size_t n = lsc->active.n;
            pthread_mutex_unlock(&lsc->mu);
            shl_lsid_id_string(lsid, id);
            SHL_LOG_DEBUG(2, CONTROL, 20715,
                          "Unable to add session into the cache, too many active sessions",
                          "sessionId", BCON_UTF8(id), "sessionCount", BCON_INT64((int64_t)n),
                          "maxSessions", BCON_INT64(shl_opt_int(SHL_OPT_maxSessions)));
            SHL_FAIL(st, SHL_CODE_TOO_MANY_LOGICAL_SESSIONS,
                     "Unable to add session ID %s into the cache because the number of active "
                     "sessions is too high",
                     id);
        }
        e = lsid_map_put(&lsc->active, lsid, &added);
    }
    e->last_use_ms = now;
    pthread_mutex_unlock(&lsc->mu);
done:
    return ret;
}

int
shl_lsc_vivify_op(shl_lsc_t *lsc, const shl_op_ctx_t *op, const shl_command_t *cmd,
                  shl_status_t *st)
{
    if (lsc == NULL || !op->has_lsid || (cmd != NULL && shl_session_cmd_ignores_lsid(cmd))) {
        return 0;
    }
    return shl_lsc_vivify(lsc, &op->lsid_key, st);
}

void
shl_lsc_end(shl_lsc_t *lsc, const shl_lsid_t *ids, size_t n)
{
    pthread_mutex_lock(&lsc->mu);
    for (size_t i = 0; i < n; i++) {
        bool added;
        lsid_map_put(&lsc->ending, &ids[i], &added);
    }
    pthread_mutex_unlock(&lsc->mu);
}

size_t
shl_lsc_size(shl_lsc_t *lsc)
{
    size_t n;

    pthread_mutex_lock(&lsc->mu);
    n = lsc->active.n;
    pthread_mutex_unlock(&lsc->mu);
    return n;
}

void
shl_lsc_list(shl_lsc_t *lsc, bool all, const uint8_t (*uids)[SHL_LSID_UID_LEN], size_t nuids,
             bson_t *arr, uint32_t *k)
{
    pthread_mutex_lock(&lsc->mu);
    for (size_t i = 0; i < lsc->active.cap; i++) {
        const lsid_entry_t *e = &lsc->active.slots[i];
        bool match = all;
        char key[16];
        const char *kp;
        bson_t doc;
        if (!e->used) {
            continue;
        }
        for (size_t u = 0; !match && u < nuids; u++) {
            match = memcmp(uids[u], e->lsid.uid, SHL_LSID_UID_LEN) == 0;
        }
        if (!match) {
            continue;
        }
        bson_uint32_to_string((*k)++, &kp, key, sizeof(key));
        BSON_APPEND_DOCUMENT_BEGIN(arr, kp, &doc);
        shl_lsid_append(&doc, "_id", &e->lsid);
        BSON_APPEND_DATE_TIME(&doc, "lastUse", e->last_use_ms);
        bson_append_document_end(arr, &doc);
    }
    pthread_mutex_unlock(&lsc->mu);
}

/* ---------------------------------------------------------------- refresh */

/* A growable list of lsids. */
typedef struct lsid_list {
    shl_lsid_t *v;
    size_t n, cap;
} lsid_list_t;

static void
list_push(lsid_list_t *l, const shl_lsid_t *lsid)
{
    if (l->n == l->cap) {
        l->cap = l->cap == 0 ? 64 : l->cap * 2;
        l->v = bson_realloc(l->v, l->cap * sizeof(*l->v));
    }
    l->v[l->n++] = *lsid;
}

/* The keys of a map, in slot order. */
static void
list_from_map(const lsid_map_t *m, lsid_list_t *l)
{
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].used) {
            list_push(l, &m->slots[i].lsid);
        }
    }
}

/* Put the entries of 'from' back into 'into' (the cache's map, under mu): a session used again
 * meanwhile keeps its newer use. */
static void
merge_back(lsid_map_t *into, const lsid_map_t *from, const shl_lsid_t *only, size_t nonly)
{
    for (size_t i = 0; i < nonly; i++) {
        const lsid_entry_t *src = lsid_map_get(from, &only[i]);
        bool added;
        lsid_entry_t *e = lsid_map_put(into, &only[i], &added);
        if (added || (src != NULL && src->last_use_ms > e->last_use_ms)) {
            e->last_use_ms = src != NULL ? src->last_use_ms : shl_clock_wall_ms();
        }
    }
}

/* A running operation's session: refreshed too (shl_op_sessions callback). */
typedef struct op_sessions {
    lsid_map_t *active;
    const lsid_map_t *ending;
    int64_t now;
} op_sessions_t;

static void
add_op_session(void *arg, const shl_lsid_t *lsid)
{
    op_sessions_t *o = arg;
    bool added;
    lsid_entry_t *e;

    if (lsid_map_get(o->ending, lsid) != NULL) {
        return;
    }
    e = lsid_map_put(o->active, lsid, &added);
    if (added) {
        e->last_use_ms = o->now;
    }
}

static void
add_cursor_session(void *arg, const shl_lsid_t *lsid)
{
    lsid_map_t *m = arg;
    bool added;

    lsid_map_put(m, lsid, &added);
}

/*
 * The sessions of this process's open cursors that are gone from config.system.sessions
 * (expired) and were not used since the refresh began, into 'm'. Errors are ignored, as
 * MongoDB ignores them: the next refresh asks again.
 */
static void
find_expired(shl_lsc_t *lsc, shl_kill_matcher_t *m)
{
    lsid_map_t cursors;
    lsid_list_t ids = {0};
    bool *removed = NULL;
    shl_status_t st = SHL_STATUS_INIT;

    lsid_map_init(&cursors);
    if (lsc->role.cursor_sessions == NULL) {
        goto done;
    }
    lsc->role.cursor_sessions(lsc->role.arg, add_cursor_session, &cursors);
    /* A session used again since the refresh began is alive, whatever the collection says. */
    pthread_mutex_lock(&lsc->mu);
    for (size_t i = 0; i < lsc->active.cap; i++) {
        if (lsc->active.slots[i].used) {
            lsid_map_remove(&cursors, &lsc->active.slots[i].lsid);
        }
    }
    pthread_mutex_unlock(&lsc->mu);
    list_from_map(&cursors, &ids);
    if (ids.n == 0) {
        goto done;
    }
    removed = bson_malloc0(ids.n * sizeof(*removed));
    if (shl_lsc_find_removed(lsc, ids.v, ids.n, removed, &st) != 0) {
        SHL_LOG_DEBUG(1, CONTROL, 4410101, "Could not look up the sessions of open cursors",
                      "error", BCON_UTF8(st.reason));
        goto done;
    }
    for (size_t i = 0; i < ids.n; i++) {
        if (removed[i]) {
            shl_kill_matcher_add_lsid(m, &ids.v[i]);
        }
    }
done:
    bson_free(removed);
    bson_free(ids.v);
    lsid_map_cleanup(&cursors);
}

static int
refresh_locked(shl_lsc_t *lsc, shl_status_t *st)
{
    int ret = 0, first_err = 0;
    lsid_map_t active, ending;
    lsid_list_t ids = {0}, ended = {0};
    shl_kill_matcher_t m;
    shl_status_t batch_st = SHL_STATUS_INIT;
    op_sessions_t o;
    size_t refreshed = 0;

    lsid_map_init(&active);
    lsid_map_init(&ending);
    shl_kill_matcher_init(&m);
    if (!lsc->has_coll) {
        SHL_FAIL(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED,
                 "the sessions collection of this process is not set up yet");
    }
    SHL_ERR(lsc->coll.setup(lsc->coll.arg, st));

    /* Take what was used and ended so far; uses from now on go to a fresh map. */
    pthread_mutex_lock(&lsc->mu);
    lsid_map_swap(&active, &lsc->active);
    lsid_map_swap(&ending, &lsc->ending);
    pthread_mutex_unlock(&lsc->mu);
    list_from_map(&ending, &ended);
    for (size_t i = 0; i < ended.n; i++) {
        lsid_map_remove(&active, &ended.v[i]);
    }
    /* Sessions of running operations are refreshed too (a long operation keeps its session
     * alive), unless they were just ended. */
    o.active = &active;
    o.ending = &ending;
    o.now = shl_clock_wall_ms();
    shl_op_sessions(lsc->svc, add_op_session, &o);
    list_from_map(&active, &ids);

    for (size_t off = 0; off < ids.n; off += SHL_SESSIONS_MAX_BATCH) {
        size_t n = ids.n - off < SHL_SESSIONS_MAX_BATCH ? ids.n - off : SHL_SESSIONS_MAX_BATCH;
        if (lsc->coll.refresh(lsc->coll.arg, ids.v + off, n, &batch_st) != 0) {
            /* Retried at the next refresh. */
            if (first_err == 0) {
                first_err = batch_st.code;
                *st = batch_st;
            }
            SHL_LOG_ERROR(CONTROL, 94001000,
                          "Failed to refresh some active sessions, continuing without these",
                          "numFailed", BCON_INT64((int64_t)n), "totalAttempted",
                          BCON_INT64((int64_t)ids.n), "error", BCON_UTF8(batch_st.reason));
            pthread_mutex_lock(&lsc->mu);
            merge_back(&lsc->active, &active, ids.v + off, n);
            pthread_mutex_unlock(&lsc->mu);
        } else {
            refreshed += n;
        }
    }

    for (size_t off = 0; off < ended.n; off += SHL_SESSIONS_MAX_BATCH) {
        size_t n = ended.n - off < SHL_SESSIONS_MAX_BATCH ? ended.n - off : SHL_SESSIONS_MAX_BATCH;
        if ((ret = lsc->coll.remove(lsc->coll.arg, ended.v + off, n, st)) != 0) {
            /* The ended sessions stay ended: removed at the next refresh. */
            pthread_mutex_lock(&lsc->mu);
            for (size_t i = 0; i < ended.n; i++) {
                bool added;
                lsid_map_put(&lsc->ending, &ended.v[i], &added);
            }
            pthread_mutex_unlock(&lsc->mu);
            goto done;
        }
    }

    /* Cursors of expired and of ended sessions are killed. */
    find_expired(lsc, &m);
    for (size_t i = 0; i < ended.n; i++) {
        shl_kill_matcher_add_lsid(&m, &ended.v[i]);
    }
    if (m.n > 0 && lsc->role.kill_cursors != NULL) {
        int killed = lsc->role.kill_cursors(lsc->role.arg, &m);
        if (killed > 0) {
            SHL_LOG_INFO(CONTROL, 4410102, "Killed the cursors of ended or expired sessions",
                         "cursors", BCON_INT32(killed));
        }
    }
    SHL_LOG_DEBUG(1, CONTROL, 4410103, "Refreshed the logical session cache", "refreshed",
                  BCON_INT64((int64_t)refreshed), "ended", BCON_INT64((int64_t)ended.n));
    ret = first_err;
done:
    shl_kill_matcher_cleanup(&m);
    bson_free(ids.v);
    bson_free(ended.v);
    lsid_map_cleanup(&active);
    lsid_map_cleanup(&ending);
    return ret;
}

int
shl_lsc_refresh_now(shl_lsc_t *lsc, shl_status_t *st)
{
    int ret;

    pthread_mutex_lock(&lsc->refresh_mu);
    ret = refresh_locked(lsc, st);
    pthread_mutex_unlock(&lsc->refresh_mu);
    if (ret != 0) {
        SHL_LOG_INFO(CONTROL, 20714,
                     "Failed to refresh session cache, will try again at the next refresh "
                     "interval",
                     "error", BCON_UTF8(st->reason), "code", BCON_INT32(ret));
    }
    return ret;
}

/* ---------------------------------------------------------------- reap */

int
shl_lsc_find_removed(shl_lsc_t *lsc, const shl_lsid_t *ids, size_t n, bool *removed,
                     shl_status_t *st)
{
    int ret = 0;

    if (!lsc->has_coll) {
        SHL_FAIL(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED,
                 "the sessions collection of this process is not set up yet");
    }
    for (size_t off = 0; off < n; off += SHL_SESSIONS_MAX_BATCH) {
        size_t k = n - off < SHL_SESSIONS_MAX_BATCH ? n - off : SHL_SESSIONS_MAX_BATCH;
        for (size_t i = 0; i < k; i++) {
            removed[off + i] = true;
        }
        SHL_ERR(lsc->coll.find_removed(lsc->coll.arg, ids + off, k, removed + off, st));
    }
done:
    return ret;
}

static int
reap_locked(shl_lsc_t *lsc, shl_status_t *st)
{
    int ret = 0;
    int64_t n = 0, cutoff;
    shl_status_t check = SHL_STATUS_INIT;

    if (lsc->role.reap == NULL) {
        goto done;
    }
    if (!lsc->has_coll || lsc->coll.check(lsc->coll.arg, &check) != 0) {
        SHL_LOG_INFO(CONTROL, 20712,
                     "Sessions collection is not set up; waiting until next sessions reap "
                     "interval",
                     "error", BCON_UTF8(lsc->has_coll ? check.reason : "no collection yet"));
        goto done;
    }
    cutoff = shl_clock_wall_ms() -
             shl_opt_int(SHL_OPT_TransactionRecordMinimumLifetimeMinutes) * 60 * 1000;
    SHL_ERR(lsc->role.reap(lsc->role.arg, lsc, cutoff, &n, st));
    if (n > 0) {
        SHL_LOG_INFO(CONTROL, 4410104, "Reaped the transaction records of expired sessions",
                     "records", BCON_INT64(n));
    }
done:
    return ret;
}

int
shl_lsc_reap_now(shl_lsc_t *lsc, shl_status_t *st)
{
    int ret;

    pthread_mutex_lock(&lsc->refresh_mu);
    ret = reap_locked(lsc, st);
    pthread_mutex_unlock(&lsc->refresh_mu);
    return ret;
}

/* ---------------------------------------------------------------- kill */

int
shl_lsc_kill(shl_lsc_t *lsc, shl_op_ctx_t *op, const shl_kill_matcher_t *m, shl_status_t *st)
{
    int ret = 0;

    if (lsc->role.kill_cursors != NULL) {
        lsc->role.kill_cursors(lsc->role.arg, m);
    }
    shl_op_kill_sessions(lsc->svc, shl_kill_matcher_match, (void *)(uintptr_t)m, op);
    if (lsc->role.kill_remote != NULL) {
        SHL_ERR(lsc->role.kill_remote(lsc->role.arg, op, m, st));
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- the thread */

static void *
lsc_main(void *arg)
{
    shl_lsc_t *lsc = arg;

    shl_log_set_thread_ctx("LogicalSessionCacheRefresh");
    pthread_mutex_lock(&lsc->thr_mu);
    while (!lsc->stop) {
        shl_status_t st = SHL_STATUS_INIT;
        shl_cond_timedwait_ms(&lsc->thr_cv, &lsc->thr_mu,
                              shl_opt_int(SHL_OPT_logicalSessionRefreshMillis));
        if (lsc->stop) {
            break;
        }
        pthread_mutex_unlock(&lsc->thr_mu);
        if (shl_lsc_refresh_now(lsc, &st) != 0) {
            shl_status_clear(&st); /* logged; retried at the next round */
        }
        if (shl_lsc_reap_now(lsc, &st) != 0) {
            SHL_LOG_INFO(CONTROL, 20711, "Failed to reap transaction table", "error",
                         BCON_UTF8(st.reason));
        }
        pthread_mutex_lock(&lsc->thr_mu);
    }
    pthread_mutex_unlock(&lsc->thr_mu);
    return NULL;
}

int
shl_lsc_start(shl_lsc_t *lsc, shl_status_t *st)
{
    int ret = 0;

    pthread_mutex_lock(&lsc->thr_mu);
    if (!lsc->started && !shl_opt_bool(SHL_OPT_disableLogicalSessionCacheRefresh)) {
        if (pthread_create(&lsc->thread, NULL, lsc_main, lsc) != 0) {
            pthread_mutex_unlock(&lsc->thr_mu);
            SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR,
                     "cannot start the logical session cache's thread: %s", strerror(errno));
        }
        lsc->started = true;
    }
    pthread_mutex_unlock(&lsc->thr_mu);
done:
    return ret;
}

void
shl_lsc_stop(shl_lsc_t *lsc)
{
    bool join;

    if (lsc == NULL) {
        return;
    }
    pthread_mutex_lock(&lsc->thr_mu);
    lsc->stop = true;
    join = lsc->started;
    lsc->started = false;
    pthread_cond_broadcast(&lsc->thr_cv);
    pthread_mutex_unlock(&lsc->thr_mu);
    if (join) {
        pthread_join(lsc->thread, NULL);
    }
}

void
shl_lsc_destroy(shl_lsc_t *lsc)
{
    if (lsc == NULL) {
        return;
    }
    shl_lsc_stop(lsc);
    if (lsc->svc->lsc == lsc) {
        lsc->svc->lsc = NULL;
    }
    lsid_map_cleanup(&lsc->active);
    lsid_map_cleanup(&lsc->ending);
    pthread_mutex_destroy(&lsc->mu);
    pthread_mutex_destroy(&lsc->refresh_mu);
    pthread_mutex_destroy(&lsc->thr_mu);
    pthread_cond_destroy(&lsc->thr_cv);
    bson_free(lsc);
}
