/*
 * shard_registry.c -- see shard_registry.h. The loaded list is an immutable array swapped
 * under 'mu'; a reload runs under 'reload_mu' so concurrent callers that find the list stale
 * reload it once between them.
 */
#include "sharding/shard_registry.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/str.h"
#include "net/rs_monitor.h"
#include "sharding/catalog_types.h"
#include "sharding/config_reader.h"

typedef struct reg_shard {
    char *name;
    char *host; /* first host:port of the connection string */
} reg_shard_t;

typedef struct reg_snapshot {
    reg_shard_t *shards; /* sorted by name */
    size_t n;
} reg_snapshot_t;

struct shl_shard_registry {
    shl_conn_pool_t *pool;                 /* borrowed; read-only */
    char config_host[SHL_CLIENT_HOST_MAX]; /* read-only */
    pthread_mutex_t reload_mu;             /* one reload at a time */
    pthread_mutex_t mu;                    /* guards snap, loaded_ms */
    reg_snapshot_t *snap;                  /* NULL until the first load */
    int64_t loaded_ms;                     /* monotonic ms of the last load; 0 = must reload */
};

int
shl_conn_string_first_host(const char *conn_string, char *out, size_t n, shl_status_t *st)
{
    const char *p = strchr(conn_string, '/');
    size_t len;
    int ret = 0;

    p = p == NULL ? conn_string : p + 1;
    len = strcspn(p, ",");
    if (shl_rs_monitor_is_set(conn_string)) {
        /* A set of several members: the client finds its primary (net/rs_monitor.h). */
        p = conn_string;
        len = strlen(conn_string);
    }
    if (len == 0 || len >= n) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "invalid connection string '%s'", conn_string);
    }
    memcpy(out, p, len);
    out[len] = '\0';
done:
    return ret;
}

static void
snapshot_free(reg_snapshot_t *s)
{
    if (s == NULL) {
        return;
    }
    for (size_t i = 0; i < s->n; i++) {
        bson_free(s->shards[i].name);
        bson_free(s->shards[i].host);
    }
    bson_free(s->shards);
    bson_free(s);
}

shl_shard_registry_t *
shl_shard_registry_new(shl_conn_pool_t *pool, const char *config_conn_string)
{
    shl_shard_registry_t *reg = bson_malloc0(sizeof(*reg));
    shl_status_t st = SHL_STATUS_INIT;

    reg->pool = pool;
    if (shl_conn_string_first_host(config_conn_string, reg->config_host, sizeof(reg->config_host),
                                   &st) != 0) {
        reg->config_host[0] = '\0';
    }
    pthread_mutex_init(&reg->reload_mu, NULL);
    pthread_mutex_init(&reg->mu, NULL);
    return reg;
}

void
shl_shard_registry_destroy(shl_shard_registry_t *reg)
{
    if (reg == NULL) {
        return;
    }
    snapshot_free(reg->snap);
    pthread_mutex_destroy(&reg->reload_mu);
    pthread_mutex_destroy(&reg->mu);
    bson_free(reg);
}

const char *
shl_shard_registry_config_host(const shl_shard_registry_t *reg)
{
    return reg->config_host;
}

shl_conn_pool_t *
shl_shard_registry_pool(const shl_shard_registry_t *reg)
{
    return reg->pool;
}

static int
cmp_shard(const void *a, const void *b)
{
    return strcmp(((const reg_shard_t *)a)->name, ((const reg_shard_t *)b)->name);
}

int
shl_shard_registry_reload(shl_shard_registry_t *reg, shl_status_t *st)
{
    shl_config_docs_t docs = {0};
    bson_t filter = BSON_INITIALIZER;
    reg_snapshot_t *snap = NULL, *old = NULL;
    int ret = 0;

    if (reg->config_host[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "no config server connection string");
    }
    SHL_ERR(shl_config_read(reg->pool, reg->config_host, "shards", &filter, NULL, &docs, st));
    snap = bson_malloc0(sizeof(*snap));
    snap->shards = bson_malloc0((docs.n + 1) * sizeof(reg_shard_t));
    for (size_t i = 0; i < docs.n; i++) {
        shl_shard_type_t t;
        char host[SHL_CLIENT_HOST_MAX];
        SHL_ERR(shl_shard_type_parse(docs.docs[i], &t, st));
        ret = shl_conn_string_first_host(t.host, host, sizeof(host), st);
        if (ret == 0) {
            snap->shards[snap->n].name = bson_strdup(t.name);
            snap->shards[snap->n].host = bson_strdup(host);
            snap->n++;
        }
        shl_shard_type_cleanup(&t);
        SHL_ERR(ret);
    }
    qsort(snap->shards, snap->n, sizeof(reg_shard_t), cmp_shard);
    pthread_mutex_lock(&reg->mu);
    old = reg->snap;
    reg->snap = snap;
    reg->loaded_ms = shl_clock_mono_us() / 1000;
    pthread_mutex_unlock(&reg->mu);
    snap = NULL;
    SHL_LOG_DEBUG(1, SHARDING, 4620001, "reloaded the shard registry", "shards",
                  BCON_INT64((int64_t)reg->snap->n));
done:
    snapshot_free(snap);
    snapshot_free(old);
    shl_config_docs_cleanup(&docs);
    bson_destroy(&filter);
    return ret;
}

void
shl_shard_registry_invalidate(shl_shard_registry_t *reg)
{
    pthread_mutex_lock(&reg->mu);
    reg->loaded_ms = 0;
    pthread_mutex_unlock(&reg->mu);
}

/* Whether the list is missing or older than the reload period. Caller holds reg->mu. */
static bool
is_stale_locked(const shl_shard_registry_t *reg)
{
    return reg->snap == NULL || reg->loaded_ms == 0 ||
           shl_clock_mono_us() / 1000 - reg->loaded_ms > SHL_SHARD_REGISTRY_RELOAD_MS;
}

/* Reload unless another thread reloaded while this one waited for reload_mu. */
static int
reload_if(shl_shard_registry_t *reg, int64_t seen_loaded_ms, shl_status_t *st)
{
    int ret = 0;
    int64_t now_loaded;

    pthread_mutex_lock(&reg->reload_mu);
    pthread_mutex_lock(&reg->mu);
    now_loaded = reg->loaded_ms;
    pthread_mutex_unlock(&reg->mu);
    if (now_loaded == seen_loaded_ms || now_loaded == 0) {
        ret = shl_shard_registry_reload(reg, st);
    }
    pthread_mutex_unlock(&reg->reload_mu);
    return ret;
}

/* Copy the host of 'name' into out; false if unknown. Caller holds reg->mu. */
static bool
lookup_locked(const shl_shard_registry_t *reg, const char *name, char *out, size_t n)
{
    reg_shard_t key = {.name = (char *)(uintptr_t)name};
    const reg_shard_t *s;

    if (reg->snap == NULL) {
        return false;
    }
    s = bsearch(&key, reg->snap->shards, reg->snap->n, sizeof(reg_shard_t), cmp_shard);
    if (s == NULL) {
        return false;
    }
    shl_str_copy(out, n, s->host);
    return true;
}

int
shl_shard_registry_host_for(shl_shard_registry_t *reg, const char *name, char *out, size_t n,
                            shl_status_t *st)
{
    int ret = 0;
    bool found, stale;
    int64_t seen;

    pthread_mutex_lock(&reg->mu);
    found = lookup_locked(reg, name, out, n);
    stale = is_stale_locked(reg);
    seen = reg->loaded_ms;
    pthread_mutex_unlock(&reg->mu);
    if (found && !stale) {
        goto done;
    }
    if ((ret = reload_if(reg, seen, st)) != 0 && found) {
        /* Only old: while the config server cannot be reached (a restart), the last list
         * still names the shard -- MongoDB's registry serves its cached data too -- so
         * shard-to-shard work (a migration, a movePrimary clone) goes on without it. */
        SHL_LOG_DEBUG(1, SHARDING, 4620004, "shard registry reload failed; using the last list",
                      "shard", BCON_UTF8(name), "error", BCON_UTF8(st->reason));
        shl_status_clear(st);
        ret = 0;
        goto done;
    }
    SHL_ERR(ret);
    pthread_mutex_lock(&reg->mu);
    found = lookup_locked(reg, name, out, n);
    pthread_mutex_unlock(&reg->mu);
    if (!found) {
        SHL_FAIL(st, SHL_CODE_SHARD_NOT_FOUND, "Shard %s not found", name);
    }
done:
    return ret;
}

int
shl_shard_registry_list(shl_shard_registry_t *reg, char ***names, shl_status_t *st)
{
    int ret = 0;
    bool stale;
    int64_t seen;

    *names = NULL;
    pthread_mutex_lock(&reg->mu);
    stale = is_stale_locked(reg);
    seen = reg->loaded_ms;
    pthread_mutex_unlock(&reg->mu);
    if (stale && (ret = reload_if(reg, seen, st)) != 0) {
        pthread_mutex_lock(&reg->mu);
        stale = reg->snap == NULL;
        pthread_mutex_unlock(&reg->mu);
        if (stale) {
            goto done;
        }
        shl_status_clear(st); /* the last list, as in shl_shard_registry_host_for */
        ret = 0;
    }
    pthread_mutex_lock(&reg->mu);
    {
        size_t n = reg->snap == NULL ? 0 : reg->snap->n;
        *names = bson_malloc0((n + 1) * sizeof(char *));
        for (size_t i = 0; i < n; i++) {
            (*names)[i] = bson_strdup(reg->snap->shards[i].name);
        }
    }
    pthread_mutex_unlock(&reg->mu);
done:
    return ret;
}
