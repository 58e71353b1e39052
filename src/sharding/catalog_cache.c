/*
 * catalog_cache.c -- see catalog_cache.h. Two small chained hash maps (databases,
 * collections) under one mutex; an entry being refreshed has 'refreshing' set and other
 * callers wait on the condition variable for that refresh instead of starting their own.
 * The refresh itself (reads from the config server) runs with no lock held.
 */
#include "sharding/catalog_cache.h"

#include <pthread.h>
#include <string.h>

#include "base/log.h"
#include "base/str.h"
#include "sharding/catalog_types.h"
#include "sharding/config_reader.h"

#define CC_BUCKETS 256
/* A refresh is tried this many times before its error is returned (1 + 2 retries). */
#define CC_REFRESH_ATTEMPTS 3

typedef struct cc_db {
    struct cc_db *next;
    char *name;
    bool refreshing;
    bool loaded;
    shl_cached_database_t info;
} cc_db_t;

typedef struct cc_coll {
    struct cc_coll *next;
    char *ns;
    bool refreshing;
    bool loaded;             /* 'rt' holds the result of a refresh */
    bool stale;              /* the next lookup refreshes */
    bool full;               /* the next refresh starts from scratch */
    shl_routing_table_t *rt; /* NULL: not sharded */
} cc_coll_t;

struct shl_catalog_cache {
    shl_shard_registry_t *registry; /* borrowed; read-only */
    pthread_mutex_t mu;             /* guards both maps and every entry's fields */
    pthread_cond_t refreshed;       /* broadcast when any refresh ends */
    cc_db_t *dbs[CC_BUCKETS];
    cc_coll_t *colls[CC_BUCKETS];
};

static size_t
bucket_of(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s != '\0'; s++) {
        h = (h ^ (uint8_t)*s) * 16777619u;
    }
    return h % CC_BUCKETS;
}

shl_catalog_cache_t *
shl_catalog_cache_new(shl_shard_registry_t *registry)
{
    shl_catalog_cache_t *cache = bson_malloc0(sizeof(*cache));
    cache->registry = registry;
    pthread_mutex_init(&cache->mu, NULL);
    pthread_cond_init(&cache->refreshed, NULL);
    return cache;
}

static void
coll_free(cc_coll_t *c)
{
    if (c->rt != NULL) {
        shl_routing_table_release(c->rt);
    }
    bson_free(c->ns);
    bson_free(c);
}

static void
db_free(cc_db_t *d)
{
    bson_free(d->name);
    bson_free(d);
}

void
shl_catalog_cache_destroy(shl_catalog_cache_t *cache)
{
    if (cache == NULL) {
        return;
    }
    shl_catalog_cache_purge(cache);
    pthread_mutex_destroy(&cache->mu);
    pthread_cond_destroy(&cache->refreshed);
    bson_free(cache);
}

shl_shard_registry_t *
shl_catalog_cache_registry(shl_catalog_cache_t *cache)
{
    return cache->registry;
}

/* ---- lookups under cache->mu ---- */

static cc_db_t *
find_db_locked(shl_catalog_cache_t *cache, const char *name, bool create)
{
    size_t b = bucket_of(name);
    cc_db_t *d;

    for (d = cache->dbs[b]; d != NULL; d = d->next) {
        if (strcmp(d->name, name) == 0) {
            return d;
        }
    }
    if (!create) {
        return NULL;
    }
    d = bson_malloc0(sizeof(*d));
    d->name = bson_strdup(name);
    d->next = cache->dbs[b];
    cache->dbs[b] = d;
    return d;
}

static cc_coll_t *
find_coll_locked(shl_catalog_cache_t *cache, const char *ns, bool create)
{
    size_t b = bucket_of(ns);
    cc_coll_t *c;

    for (c = cache->colls[b]; c != NULL; c = c->next) {
        if (strcmp(c->ns, ns) == 0) {
            return c;
        }
    }
    if (!create) {
        return NULL;
    }
    c = bson_malloc0(sizeof(*c));
    c->ns = bson_strdup(ns);
    c->next = cache->colls[b];
    cache->colls[b] = c;
    return c;
}

/* ---- databases ---- */

static int
load_database(shl_catalog_cache_t *cache, const char *db, shl_cached_database_t *out,
              shl_status_t *st)
{
    shl_config_docs_t docs = {0};
    shl_database_type_t t = {0};
    bson_t filter = BSON_INITIALIZER;
    int ret = 0;

    BSON_APPEND_UTF8(&filter, "_id", db);
    SHL_ERR(shl_config_read(shl_shard_registry_pool(cache->registry),
                            shl_shard_registry_config_host(cache->registry), "databases", &filter,
                            NULL, &docs, st));
    if (docs.n == 0) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "database %s not found", db);
    }
    SHL_ERR(shl_database_type_parse(docs.docs[0], &t, st));
    memset(out, 0, sizeof(*out));
    shl_str_copy(out->name, sizeof(out->name), t.name);
    shl_str_copy(out->primary, sizeof(out->primary), t.primary);
    out->version = t.version;
done:
    shl_database_type_cleanup(&t);
    shl_config_docs_cleanup(&docs);
    bson_destroy(&filter);
    return ret;
}

int
shl_catalog_cache_get_database(shl_catalog_cache_t *cache, const char *db,
                               shl_cached_database_t *out, shl_status_t *st)
{
    cc_db_t *d;
    shl_cached_database_t loaded;
    int ret = 0;

    memset(out, 0, sizeof(*out));
    if (strcmp(db, "admin") == 0 || strcmp(db, "config") == 0) {
        shl_str_copy(out->name, sizeof(out->name), db);
        snprintf(out->primary, sizeof(out->primary), "config");
        out->version = shl_database_version_fixed();
        goto done;
    }
    pthread_mutex_lock(&cache->mu);
    for (;;) {
        d = find_db_locked(cache, db, true);
        if (d->loaded) {
            *out = d->info;
            pthread_mutex_unlock(&cache->mu);
            goto done;
        }
        if (!d->refreshing) {
            break;
        }
        pthread_cond_wait(&cache->refreshed, &cache->mu);
    }
    d->refreshing = true;
    pthread_mutex_unlock(&cache->mu);

    for (int attempt = 0; attempt < CC_REFRESH_ATTEMPTS; attempt++) {
        ret = load_database(cache, db, &loaded, st);
        if (ret == 0 || ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
            break;
        }
    }

    pthread_mutex_lock(&cache->mu);
    d = find_db_locked(cache, db, true); /* an invalidation may have removed it */
    d->refreshing = false;
    if (ret == 0) {
        d->loaded = true;
        d->info = loaded;
        *out = loaded;
    }
    pthread_cond_broadcast(&cache->refreshed);
    pthread_mutex_unlock(&cache->mu);
done:
    return ret;
}

/* ---- collections ---- */

static int
read_chunks(shl_catalog_cache_t *cache, const shl_collection_type_t *coll,
            const shl_chunk_version_t *since, shl_chunk_type_t **chunks, size_t *n,
            shl_status_t *st)
{
    shl_config_docs_t docs = {0};
    bson_t filter = BSON_INITIALIZER, sort = BSON_INITIALIZER, gte;
    shl_chunk_version_t gen = shl_collection_type_generation(coll);
    int ret = 0;

    *chunks = NULL;
    *n = 0;
    shl_uuid_append(&filter, "uuid", &coll->uuid);
    if (since != NULL) {
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "lastmod", &gte);
        BSON_APPEND_TIMESTAMP(&gte, "$gte", since->major, since->minor);
        bson_append_document_end(&filter, &gte);
    }
    BSON_APPEND_INT32(&sort, "lastmod", 1);
    SHL_ERR(shl_config_read(shl_shard_registry_pool(cache->registry),
                            shl_shard_registry_config_host(cache->registry), "chunks", &filter,
                            &sort, &docs, st));
    *chunks = bson_malloc0((docs.n + 1) * sizeof(shl_chunk_type_t));
    for (size_t i = 0; i < docs.n; i++) {
        SHL_ERR(shl_chunk_type_parse_config(docs.docs[i], &gen, &(*chunks)[i], st));
        (*n)++;
    }
done:
    if (ret != 0 && *chunks != NULL) {
        shl_chunk_types_free(*chunks, *n);
        *chunks = NULL;
        *n = 0;
    }
    shl_config_docs_cleanup(&docs);
    bson_destroy(&filter);
    bson_destroy(&sort);
    return ret;
}

/*
 * The refresh: read the collection entry; with the same generation as 'old' (and not
 * 'full') read only the chunks changed since the cached collection version, else all.
 * *out is the new table (one reference) or NULL for an unsharded collection.
 */
static int
refresh_collection(shl_catalog_cache_t *cache, const char *ns, const shl_routing_table_t *old,
                   bool full, shl_routing_table_t **out, shl_status_t *st)
{
    shl_config_docs_t docs = {0};
    shl_collection_type_t coll = {0};
    shl_chunk_type_t *chunks = NULL;
    size_t nchunks = 0;
    bson_t filter = BSON_INITIALIZER;
    shl_routing_table_info_t info;
    bool incremental = false;
    shl_chunk_version_t since;
    int ret = 0;

    *out = NULL;
    BSON_APPEND_UTF8(&filter, "_id", ns);
    SHL_ERR(shl_config_read(shl_shard_registry_pool(cache->registry),
                            shl_shard_registry_config_host(cache->registry), "collections", &filter,
                            NULL, &docs, st));
    if (docs.n == 0) {
        goto done; /* not sharded */
    }
    SHL_ERR(shl_collection_type_parse(docs.docs[0], &coll, st));
    shl_routing_table_info_from_collection(&coll, &info);
    if (old != NULL && !full) {
        shl_chunk_version_t gen = shl_collection_type_generation(&coll);
        since = shl_routing_table_collection_version(old);
        incremental = shl_chunk_version_same_generation(&gen, &since) &&
                      shl_uuid_eq(shl_routing_table_uuid(old), &coll.uuid);
    }
    SHL_ERR(read_chunks(cache, &coll, incremental ? &since : NULL, &chunks, &nchunks, st));
    if (incremental) {
        SHL_ERR(shl_routing_table_update(old, chunks, nchunks, out, st));
    } else {
        SHL_ERR(shl_routing_table_new(&info, chunks, nchunks, out, st));
    }
done:
    if (chunks != NULL) {
        shl_chunk_types_free(chunks, nchunks);
    }
    shl_collection_type_cleanup(&coll);
    shl_config_docs_cleanup(&docs);
    bson_destroy(&filter);
    return ret;
}

int
shl_catalog_cache_get_collection(shl_catalog_cache_t *cache, const char *ns,
                                 shl_routing_table_t **rt, shl_status_t *st)
{
    cc_coll_t *c;
    shl_routing_table_t *old = NULL, *fresh = NULL;
    bool full;
    int ret = 0;

    *rt = NULL;
    pthread_mutex_lock(&cache->mu);
    for (;;) {
        c = find_coll_locked(cache, ns, true);
        if (c->loaded && !c->stale) {
            *rt = c->rt == NULL ? NULL : shl_routing_table_ref(c->rt);
            pthread_mutex_unlock(&cache->mu);
            goto done;
        }
        if (!c->refreshing) {
            break;
        }
        pthread_cond_wait(&cache->refreshed, &cache->mu);
    }
    c->refreshing = true;
    old = c->rt == NULL ? NULL : shl_routing_table_ref(c->rt);
    full = c->full || !c->loaded;
    pthread_mutex_unlock(&cache->mu);

    for (int attempt = 0; attempt < CC_REFRESH_ATTEMPTS; attempt++) {
        /* After a failed incremental refresh, start from scratch. */
        ret = refresh_collection(cache, ns, old, full || attempt > 0, &fresh, st);
        if (ret == 0) {
            break;
        }
        SHL_LOG_WARNING(SHARDING, 4620002, "routing table refresh failed", "ns", BCON_UTF8(ns),
                        "attempt", BCON_INT32(attempt + 1), "error", BCON_UTF8(st->reason));
    }

    pthread_mutex_lock(&cache->mu);
    c = find_coll_locked(cache, ns, true);
    c->refreshing = false;
    if (ret == 0) {
        if (c->rt != NULL) {
            shl_routing_table_release(c->rt);
        }
        c->rt = fresh;
        c->loaded = true;
        c->stale = false;
        c->full = false;
        *rt = fresh == NULL ? NULL : shl_routing_table_ref(fresh);
        fresh = NULL;
    }
    pthread_cond_broadcast(&cache->refreshed);
    pthread_mutex_unlock(&cache->mu);
    if (ret == 0) {
        char v[SHL_CHUNK_VERSION_STR_MAX] = "unsharded";
        if (*rt != NULL) {
            shl_chunk_version_t cv = shl_routing_table_collection_version(*rt);
            shl_chunk_version_to_string(&cv, v);
        }
        SHL_LOG_DEBUG(1, SHARDING, 4620003, "refreshed routing table", "ns", BCON_UTF8(ns),
                      "version", BCON_UTF8(v));
    }
done:
    if (old != NULL) {
        shl_routing_table_release(old);
    }
    return ret;
}

void
shl_catalog_cache_on_stale_shard(shl_catalog_cache_t *cache, const char *ns,
                                 const shl_chunk_version_t *wanted)
{
    cc_coll_t *c;

    pthread_mutex_lock(&cache->mu);
    c = find_coll_locked(cache, ns, false);
    if (c != NULL && c->loaded) {
        bool as_new = false;
        if (wanted != NULL && shl_chunk_version_is_set(wanted) && c->rt != NULL) {
            shl_chunk_version_t cv = shl_routing_table_collection_version(c->rt);
            if (shl_chunk_version_same_generation(wanted, &cv)) {
                as_new = !shl_chunk_version_is_older_than(&cv, wanted);
            } else {
                c->full = true;
            }
        }
        if (!as_new) {
            c->stale = true;
        }
    }
    pthread_mutex_unlock(&cache->mu);
}

void
shl_catalog_cache_invalidate_collection(shl_catalog_cache_t *cache, const char *ns)
{
    cc_coll_t *c;

    pthread_mutex_lock(&cache->mu);
    c = find_coll_locked(cache, ns, false);
    if (c != NULL) {
        c->stale = true;
        c->full = true;
    }
    pthread_mutex_unlock(&cache->mu);
}

void
shl_catalog_cache_invalidate_database(shl_catalog_cache_t *cache, const char *db)
{
    size_t dblen = strlen(db);
    cc_db_t *d;

    pthread_mutex_lock(&cache->mu);
    d = find_db_locked(cache, db, false);
    if (d != NULL) {
        d->loaded = false;
    }
    for (size_t b = 0; b < CC_BUCKETS; b++) {
        for (cc_coll_t *c = cache->colls[b]; c != NULL; c = c->next) {
            if (strncmp(c->ns, db, dblen) == 0 && c->ns[dblen] == '.') {
                c->stale = true;
                c->full = true;
            }
        }
    }
    pthread_mutex_unlock(&cache->mu);
}

void
shl_catalog_cache_purge(shl_catalog_cache_t *cache)
{
    pthread_mutex_lock(&cache->mu);
    /* Entries being refreshed stay (their refresher looks them up again); others go. */
    for (size_t b = 0; b < CC_BUCKETS; b++) {
        cc_db_t **dp = &cache->dbs[b];
        cc_coll_t **cp = &cache->colls[b];
        while (*dp != NULL) {
            cc_db_t *d = *dp;
            if (d->refreshing) {
                d->loaded = false;
                dp = &d->next;
            } else {
                *dp = d->next;
                db_free(d);
            }
        }
        while (*cp != NULL) {
            cc_coll_t *c = *cp;
            if (c->refreshing) {
                c->stale = c->full = true;
                cp = &c->next;
            } else {
                *cp = c->next;
                coll_free(c);
            }
        }
    }
    pthread_mutex_unlock(&cache->mu);
}
