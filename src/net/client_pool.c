/*
 * client_pool.c -- the internal client's connection pool (client.h): a small hash map
 * from "host:port" to that host's idle connections, under one mutex. The lock guards
 * only list and counter updates; connecting, handshakes, liveness checks and close(2)
 * all happen outside it, so a slow or dead host never stalls callers of other hosts.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "net/client_private.h"

#define DEFAULT_MAX_IDLE 16
#define DEFAULT_CONNECT_TIMEOUT_MS 10000
#define INITIAL_BUCKETS 16

struct pool_host {
    char *key;               /* "host:port" as the callers spell it */
    pool_host_t *chain;      /* next entry in the same bucket */
    shl_client_conn_t *idle; /* most recently used first */
    shl_conn_pool_stats_t stats;
};

struct shl_conn_pool {
    pthread_mutex_t lock; /* guards everything below except 'opts' (immutable) */
    pool_host_t **buckets;
    size_t nbuckets;
    size_t nhosts;
    shl_client_hooks_t hooks;
    int64_t active_calls; /* connections acquired and not yet released */
    shl_conn_pool_options_t opts;
};

/* FNV-1a: host names are short and few; anything reasonable will do. */
static size_t
hash_key(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s != '\0'; s++) {
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    }
    return (size_t)h;
}

static void
grow(shl_conn_pool_t *pool)
{
    size_t n = pool->nbuckets * 2;
    pool_host_t **b = bson_malloc0(n * sizeof(*b));

    for (size_t i = 0; i < pool->nbuckets; i++) {
        pool_host_t *hp = pool->buckets[i];
        while (hp != NULL) {
            pool_host_t *next = hp->chain;
            size_t j = hash_key(hp->key) & (n - 1);
            hp->chain = b[j];
            b[j] = hp;
            hp = next;
        }
    }
    bson_free(pool->buckets);
    pool->buckets = b;
    pool->nbuckets = n;
}

/* Caller holds pool->lock. */
static pool_host_t *
find_host(shl_conn_pool_t *pool, const char *host, bool create)
{
    size_t i = hash_key(host) & (pool->nbuckets - 1);
    pool_host_t *hp;

    for (hp = pool->buckets[i]; hp != NULL; hp = hp->chain) {
        if (strcmp(hp->key, host) == 0) {
            return hp;
        }
    }
    if (!create) {
        return NULL;
    }
    if (pool->nhosts >= pool->nbuckets) {
        grow(pool);
        i = hash_key(host) & (pool->nbuckets - 1);
    }
    hp = bson_malloc0(sizeof(*hp));
    hp->key = bson_strdup(host);
    hp->chain = pool->buckets[i];
    pool->buckets[i] = hp;
    pool->nhosts++;
    return hp;
}

shl_conn_pool_t *
shl_conn_pool_new(const shl_conn_pool_options_t *opts)
{
    shl_conn_pool_t *pool = bson_malloc0(sizeof(*pool));

    pthread_mutex_init(&pool->lock, NULL);
    pool->nbuckets = INITIAL_BUCKETS;
    pool->buckets = bson_malloc0(pool->nbuckets * sizeof(*pool->buckets));
    if (opts != NULL) {
        pool->opts = *opts;
    }
    if (pool->opts.max_idle_per_host <= 0) {
        pool->opts.max_idle_per_host = DEFAULT_MAX_IDLE;
    }
    if (pool->opts.connect_timeout_ms <= 0) {
        pool->opts.connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
    }
    pool->hooks = pool->opts.hooks;
    return pool;
}

void
shl_conn_pool_destroy(shl_conn_pool_t *pool)
{
    if (pool == NULL) {
        return;
    }
    SHL_INVARIANT(pool->active_calls == 0);
    for (size_t i = 0; i < pool->nbuckets; i++) {
        pool_host_t *hp = pool->buckets[i];
        while (hp != NULL) {
            pool_host_t *next = hp->chain;
            while (hp->idle != NULL) {
                shl_client_conn_t *c = hp->idle;
                hp->idle = c->next;
                client_conn_close(c);
            }
            bson_free(hp->key);
            bson_free(hp);
            hp = next;
        }
    }
    bson_free(pool->buckets);
    pthread_mutex_destroy(&pool->lock);
    bson_free(pool);
}

void
shl_conn_pool_set_hooks(shl_conn_pool_t *pool, const shl_client_hooks_t *hooks)
{
    pthread_mutex_lock(&pool->lock);
    if (hooks != NULL) {
        pool->hooks = *hooks;
    } else {
        memset(&pool->hooks, 0, sizeof(pool->hooks));
    }
    pthread_mutex_unlock(&pool->lock);
}

void
client_pool_hooks(shl_conn_pool_t *pool, shl_client_hooks_t *hooks)
{
    pthread_mutex_lock(&pool->lock);
    *hooks = pool->hooks;
    pthread_mutex_unlock(&pool->lock);
}

int64_t
client_pool_connect_timeout_ms(const shl_conn_pool_t *pool)
{
    return pool->opts.connect_timeout_ms;
}

shl_client_conn_t *
client_pool_acquire(shl_conn_pool_t *pool, const char *host)
{
    shl_client_conn_t *c;
    pool_host_t *hp;

    pthread_mutex_lock(&pool->lock);
    hp = find_host(pool, host, true);
    c = hp->idle;
    if (c != NULL) {
        hp->idle = c->next;
        hp->stats.idle--;
        c->next = NULL;
    } else {
        hp->stats.opened++;
    }
    hp->stats.in_use++;
    pool->active_calls++;
    pthread_mutex_unlock(&pool->lock);

    if (c == NULL) {
        /* Allocation happens outside the lock; the caller connects it. */
        c = bson_malloc0(sizeof(*c));
        c->fd = -1;
        c->pool = pool;
        c->hp = hp;
        snprintf(c->host, sizeof(c->host), "%s", host);
    }
    return c;
}

void
client_pool_release(shl_conn_pool_t *pool, shl_client_conn_t *conn)
{
    pool_host_t *hp = conn->hp;
    bool keep;

    if (conn->ready && !conn->failed) {
        conn->idle_since_us = shl_clock_mono_us(); /* outside the lock */
    }
    pthread_mutex_lock(&pool->lock);
    hp->stats.in_use--;
    pool->active_calls--;
    keep = conn->ready && !conn->failed && hp->stats.idle < pool->opts.max_idle_per_host;
    if (keep) {
        conn->next = hp->idle;
        hp->idle = conn;
        hp->stats.idle++;
    } else {
        hp->stats.discarded++;
    }
    pthread_mutex_unlock(&pool->lock);

    if (!keep) {
        client_conn_close(conn);
    }
}

void
shl_conn_pool_checkin(shl_conn_pool_t *pool, shl_client_conn_t *conn)
{
    if (conn != NULL) {
        SHL_INVARIANT(conn->pool == pool);
        client_pool_release(pool, conn);
    }
}

void
shl_conn_pool_drop_host(shl_conn_pool_t *pool, const char *host)
{
    shl_client_conn_t *list = NULL;
    pool_host_t *hp;

    pthread_mutex_lock(&pool->lock);
    hp = find_host(pool, host, false);
    if (hp != NULL) {
        list = hp->idle;
        hp->idle = NULL;
        hp->stats.discarded += hp->stats.idle;
        hp->stats.idle = 0;
    }
    pthread_mutex_unlock(&pool->lock);

    if (list != NULL) {
        SHL_LOG_INFO(NETWORK, 22572, "Dropping all pooled connections", "hostAndPort",
                     BCON_UTF8(host));
    }
    while (list != NULL) {
        shl_client_conn_t *next = list->next;
        client_conn_close(list);
        list = next;
    }
}

void
shl_conn_pool_stats_get(shl_conn_pool_t *pool, const char *host, shl_conn_pool_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&pool->lock);
    for (size_t i = 0; i < pool->nbuckets; i++) {
        for (pool_host_t *hp = pool->buckets[i]; hp != NULL; hp = hp->chain) {
            if (host == NULL || strcmp(hp->key, host) == 0) {
                out->idle += hp->stats.idle;
                out->in_use += hp->stats.in_use;
                out->opened += hp->stats.opened;
                out->discarded += hp->stats.discarded;
            }
        }
    }
    pthread_mutex_unlock(&pool->lock);
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char **
shl_conn_pool_hosts(shl_conn_pool_t *pool)
{
    char **out;
    size_t n = 0;

    pthread_mutex_lock(&pool->lock);
    out = bson_malloc0((pool->nhosts + 1) * sizeof(*out));
    for (size_t i = 0; i < pool->nbuckets; i++) {
        for (pool_host_t *hp = pool->buckets[i]; hp != NULL && n < pool->nhosts; hp = hp->chain) {
            out[n++] = bson_strdup(hp->key);
        }
    }
    pthread_mutex_unlock(&pool->lock);
    qsort(out, n, sizeof(*out), cmp_str);
    return out;
}
