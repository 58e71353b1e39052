/*
 * locks.c -- database and collection locks: a table of named reader/writer locks
 * created on first use and freed when unused (up to SHL_LOCKS_IDLE_MAX unused ones are
 * kept for the next request). CRUD holds its database and collection
 * shared; collection DDL holds the collection exclusive; dropDatabase the database
 * exclusive. Lock order and rules: docs/design/locking.md.
 */
#include "storage/storage_private.h"

#include <string.h>
#include <time.h>

#include "storage/catalog.h"

static unsigned
hash_name(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s != '\0'; s++) {
        h = (h ^ (unsigned char)*s) * 16777619u;
    }
    return h % SHL_LOCK_BUCKETS;
}

void
shl_locks_init(shl_storage_engine_t *eng)
{
    pthread_mutex_init(&eng->locks_mu, NULL);
}

static void
lock_free(shl_named_lock_t *l)
{
    pthread_rwlock_destroy(&l->rw);
    bson_free(l->name);
    bson_free(l);
}

/* Unlink 'l' (no users) from the table and free it, or keep it for reuse. Caller holds
 * locks_mu. */
static void
lock_unused(shl_storage_engine_t *eng, shl_named_lock_t *l)
{
    shl_named_lock_t **pp;

    if (eng->locks_idle < SHL_LOCKS_IDLE_MAX) {
        eng->locks_idle++;
        return;
    }
    pp = &eng->locks[hash_name(l->name)];
    while (*pp != l) {
        pp = &(*pp)->next;
    }
    *pp = l->next;
    lock_free(l);
}

void
shl_locks_cleanup(shl_storage_engine_t *eng)
{
    for (int i = 0; i < SHL_LOCK_BUCKETS; i++) {
        while (eng->locks[i] != NULL) {
            shl_named_lock_t *l = eng->locks[i];
            SHL_INVARIANT(l->users == 0);
            eng->locks[i] = l->next;
            lock_free(l);
        }
    }
    pthread_mutex_destroy(&eng->locks_mu);
}

/* The lock wait bound of the calling thread's operation (shl_storage_set_lock_timeout). */
static _Thread_local int64_t tl_lock_timeout_ms = -1;

void
shl_storage_set_lock_timeout(int64_t ms)
{
    tl_lock_timeout_ms = ms;
}

static shl_named_lock_t *lock_take_timed(shl_storage_engine_t *eng, const char *name,
                                         bool exclusive, int64_t timeout_ms);

shl_named_lock_t *
shl_lock_take(shl_storage_engine_t *eng, const char *name, bool exclusive)
{
    return lock_take_timed(eng, name, exclusive, -1);
}

/* Take the lock, waiting at most 'timeout_ms' (-1: forever); NULL when the wait timed out. */
static shl_named_lock_t *
lock_take_timed(shl_storage_engine_t *eng, const char *name, bool exclusive, int64_t timeout_ms)
{
    unsigned b = hash_name(name);
    shl_named_lock_t *l;

    pthread_mutex_lock(&eng->locks_mu);
    for (l = eng->locks[b]; l != NULL && strcmp(l->name, name) != 0; l = l->next) {
    }
    if (l == NULL) {
        pthread_rwlockattr_t attr;
        l = bson_malloc0(sizeof(*l));
        l->name = bson_strdup(name);
        /* Writer preference: a DDL waiting for a busy collection is not starved by a
         * stream of CRUD. The price is that shared locks are not recursive. */
        pthread_rwlockattr_init(&attr);
        pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        pthread_rwlock_init(&l->rw, &attr);
        pthread_rwlockattr_destroy(&attr);
        l->next = eng->locks[b];
        eng->locks[b] = l;
    } else if (l->users == 0) {
        eng->locks_idle--;
    }
    l->users++;
    pthread_mutex_unlock(&eng->locks_mu);

    if (timeout_ms < 0) {
        if (exclusive) {
            pthread_rwlock_wrlock(&l->rw);
        } else {
            pthread_rwlock_rdlock(&l->rw);
        }
    } else {
        struct timespec until;
        int rc;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (timeout_ms % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        rc = exclusive ? pthread_rwlock_timedwrlock(&l->rw, &until)
                       : pthread_rwlock_timedrdlock(&l->rw, &until);
        if (rc != 0) {
            /* Give the entry back as shl_lock_drop does, without unlocking. */
            pthread_mutex_lock(&eng->locks_mu);
            if (--l->users == 0) {
                lock_unused(eng, l);
            }
            pthread_mutex_unlock(&eng->locks_mu);
            l = NULL;
        }
    }
    return l;
}

void
shl_lock_drop(shl_storage_engine_t *eng, shl_named_lock_t *l)
{
    if (l == NULL) {
        return;
    }
    pthread_rwlock_unlock(&l->rw);
    pthread_mutex_lock(&eng->locks_mu);
    if (--l->users == 0) {
        lock_unused(eng, l);
    }
    pthread_mutex_unlock(&eng->locks_mu);
}

int
shl_storage_coll_acquire(shl_storage_engine_t *eng, const char *ns, shl_lock_mode_t mode,
                         shl_coll_handle_t *h, shl_status_t *st)
{
    const char *dot = strchr(ns, '.');
    char db[SHL_DB_NAME_MAX + 2];
    int ret = 0;

    memset(h, 0, sizeof(*h));
    h->eng = eng;
    h->mode = mode;
    if (dot == NULL || dot == ns || dot[1] == '\0' || (size_t)(dot - ns) > SHL_DB_NAME_MAX) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid namespace specified '%s'", ns);
    }
    memcpy(db, ns, (size_t)(dot - ns));
    db[dot - ns] = '\0';
    h->db_lock_ = lock_take_timed(eng, db, false, tl_lock_timeout_ms);
    if (h->db_lock_ == NULL) {
        h->eng = NULL;
        SHL_FAIL(st, SHL_CODE_LOCK_TIMEOUT, "Unable to acquire IS lock on '%s' within %lldms.", db,
                 (long long)tl_lock_timeout_ms);
    }
    h->coll_lock_ = lock_take_timed(eng, ns, mode == SHL_LOCK_EXCLUSIVE, tl_lock_timeout_ms);
    if (h->coll_lock_ == NULL) {
        shl_lock_drop(eng, h->db_lock_);
        h->db_lock_ = NULL;
        h->eng = NULL;
        SHL_FAIL(st, SHL_CODE_LOCK_TIMEOUT, "Unable to acquire %s lock on '%s' within %lldms.",
                 mode == SHL_LOCK_EXCLUSIVE ? "X" : "IS", ns, (long long)tl_lock_timeout_ms);
    }
    h->coll = shl_catalog_get(eng, ns);
done:
    return ret;
}

void
shl_storage_coll_release(shl_coll_handle_t *h)
{
    if (h->eng == NULL) {
        return;
    }
    shl_collection_release(h->coll);
    h->coll = NULL;
    shl_lock_drop(h->eng, h->coll_lock_);
    shl_lock_drop(h->eng, h->db_lock_);
    h->coll_lock_ = NULL;
    h->db_lock_ = NULL;
    h->eng = NULL;
}
