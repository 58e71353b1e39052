/*
 * ddl_lock.c -- the DDL lock manager (ddl_lock.h): named resources with an IX count and an
 * exclusive flag under one mutex; waiters sleep on one condition variable and check their
 * interruption every 100 ms. The table is small (one entry per resource held or awaited),
 * so a list is enough.
 */
#include "shard/ddl_lock.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

typedef struct ddl_res {
    char *name;
    int ix;       /* IX holders */
    bool x;       /* held exclusively */
    int waiters;  /* threads waiting for it */
    char *reason; /* the last holder's reason */
    struct ddl_res *next;
} ddl_res_t;

struct shard_ddl_locks {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* broadcast at every release */
    ddl_res_t *res;    /* guarded by mu */
};

shard_ddl_locks_t *
shard_ddl_locks_new(void)
{
    shard_ddl_locks_t *l = bson_malloc0(sizeof *l);

    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    return l;
}

void
shard_ddl_locks_destroy(shard_ddl_locks_t *l)
{
    if (l != NULL) {
        while (l->res != NULL) {
            ddl_res_t *r = l->res;
            l->res = r->next;
            bson_free(r->name);
            bson_free(r->reason);
            bson_free(r);
        }
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        bson_free(l);
    }
}

/* The entry of 'name', created if missing. l->mu held. */
static ddl_res_t *
res_get(shard_ddl_locks_t *l, const char *name)
{
    ddl_res_t *r = l->res;

    while (r != NULL && strcmp(r->name, name) != 0) {
        r = r->next;
    }
    if (r == NULL) {
        r = bson_malloc0(sizeof *r);
        r->name = bson_strdup(name);
        r->next = l->res;
        l->res = r;
    }
    return r;
}

/* Drop 'r' once nobody holds or awaits it. l->mu held. */
static void
res_gc(shard_ddl_locks_t *l, ddl_res_t *r)
{
    if (r->ix == 0 && !r->x && r->waiters == 0) {
        for (ddl_res_t **p = &l->res; *p != NULL; p = &(*p)->next) {
            if (*p == r) {
                *p = r->next;
                break;
            }
        }
        bson_free(r->name);
        bson_free(r->reason);
        bson_free(r);
    }
}

static bool
compatible(const ddl_res_t *r, shard_ddl_mode_t mode)
{
    return !r->x && (mode == SHARD_DDL_IX || r->ix == 0);
}

int
shard_ddl_lock_acquire(shard_ddl_locks_t *l, const char *resource, shard_ddl_mode_t mode,
                       const char *reason, int64_t timeout_ms, bool (*interrupted)(void *),
                       void *arg, shl_status_t *st)
{
    struct timespec start, now;
    ddl_res_t *r;
    int ret = 0;

    clock_gettime(CLOCK_MONOTONIC, &start);
    pthread_mutex_lock(&l->mu);
    r = res_get(l, resource);
    r->waiters++;
    while (!compatible(r, mode) && ret == 0) {
        struct timespec until;
        int64_t waited;

        clock_gettime(CLOCK_MONOTONIC, &now);
        waited = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (interrupted != NULL && interrupted(arg)) {
            ret = shl_status_set(st, SHL_CODE_INTERRUPTED_AT_SHUTDOWN,
                                 "interrupted while waiting for the DDL lock of '%s'", resource);
        } else if (timeout_ms > 0 && waited >= timeout_ms) {
            ret = shl_status_set(st, SHL_CODE_LOCK_BUSY,
                                 "Failed to acquire DDL lock for '%s' in mode %s after %lld ms "
                                 "that is currently locked with reason '%s'",
                                 resource, mode == SHARD_DDL_X ? "X" : "IX", (long long)waited,
                                 r->reason ? r->reason : "");
        } else {
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 100 * 1000000;
            if (until.tv_nsec >= 1000000000) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&l->cv, &l->mu, &until);
        }
    }
    r->waiters--;
    if (ret == 0) {
        if (mode == SHARD_DDL_X) {
            r->x = true;
        } else {
            r->ix++;
        }
        bson_free(r->reason);
        r->reason = bson_strdup(reason ? reason : "");
    } else {
        res_gc(l, r);
    }
    pthread_mutex_unlock(&l->mu);
    return ret;
}

void
shard_ddl_lock_release(shard_ddl_locks_t *l, const char *resource, shard_ddl_mode_t mode)
{
    ddl_res_t *r;

    pthread_mutex_lock(&l->mu);
    r = res_get(l, resource);
    if (mode == SHARD_DDL_X) {
        SHL_INVARIANT(r->x);
        r->x = false;
    } else {
        SHL_INVARIANT(r->ix > 0);
        r->ix--;
    }
    res_gc(l, r);
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void
shard_ddl_locks_report(shard_ddl_locks_t *l, bson_t *out)
{
    uint32_t n = 0;

    pthread_mutex_lock(&l->mu);
    for (ddl_res_t *r = l->res; r != NULL; r = r->next) {
        char key[16];
        bson_t one;

        if (r->ix == 0 && !r->x) {
            continue;
        }
        snprintf(key, sizeof key, "%u", n++);
        BSON_APPEND_DOCUMENT_BEGIN(out, key, &one);
        BSON_APPEND_UTF8(&one, "resource", r->name);
        BSON_APPEND_UTF8(&one, "type", strchr(r->name, '.') ? "DDLCollection" : "DDLDatabase");
        BSON_APPEND_UTF8(&one, "mode", r->x ? "X" : "IX");
        BSON_APPEND_INT32(&one, "holders", r->x ? 1 : r->ix);
        BSON_APPEND_UTF8(&one, "reason", r->reason ? r->reason : "");
        bson_append_document_end(out, &one);
    }
    pthread_mutex_unlock(&l->mu);
}

/* Holders (or waiters) of 'resource' now; takes l->mu. */
static int
count_of(shard_ddl_locks_t *l, const char *resource, bool waiters)
{
    int n = 0;

    pthread_mutex_lock(&l->mu);
    for (ddl_res_t *r = l->res; r != NULL; r = r->next) {
        if (strcmp(r->name, resource) == 0) {
            n = waiters ? r->waiters : r->x ? 1 : r->ix;
        }
    }
    pthread_mutex_unlock(&l->mu);
    return n;
}

int
shard_ddl_locks_held(shard_ddl_locks_t *l, const char *resource)
{
    return count_of(l, resource, false);
}

int
shard_ddl_locks_waiting(shard_ddl_locks_t *l, const char *resource)
{
    return count_of(l, resource, true);
}
