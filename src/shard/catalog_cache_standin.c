/*
 * catalog_cache_standin.c -- a stand-in for src/sharding/catalog_cache.c and
 * shard_registry.c while those are being written on main: the subset of their contracts
 * the shard uses, without caching (every lookup reads config.* with find commands, so
 * invalidation has nothing to do). Built only when src/sharding/catalog_cache.c does not
 * exist (src/shard/CMakeLists.txt); delete it once main has the real ones.
 */
#include <string.h>

#include "sharding/catalog_cache.h"
#include "sharding/catalog_types.h"
#include "sharding/shard_registry.h"

#define STANDIN_TIMEOUT_MS 30000

struct shl_shard_registry {
    shl_conn_pool_t *pool;
    char config_host[256];
};

struct shl_catalog_cache {
    shl_shard_registry_t *registry;
};

int
shl_conn_string_first_host(const char *conn_string, char *out, size_t n, shl_status_t *st)
{
    const char *p = strchr(conn_string, '/');
    size_t len;

    p = p != NULL ? p + 1 : conn_string;
    len = strcspn(p, ",");
    if (len == 0 || len >= n) {
        return shl_status_set(st, SHL_CODE_FAILED_TO_PARSE, "invalid connection string '%s'",
                              conn_string);
    }
    memcpy(out, p, len);
    out[len] = '\0';
    return 0;
}

shl_shard_registry_t *
shl_shard_registry_new(shl_conn_pool_t *pool, const char *config_conn_string)
{
    shl_shard_registry_t *r = bson_malloc0(sizeof(*r));
    shl_status_t st = SHL_STATUS_INIT;

    r->pool = pool;
    if (shl_conn_string_first_host(config_conn_string, r->config_host, sizeof(r->config_host),
                                   &st) != 0) {
        r->config_host[0] = '\0';
    }
    return r;
}

void
shl_shard_registry_destroy(shl_shard_registry_t *reg)
{
    bson_free(reg);
}

shl_catalog_cache_t *
shl_catalog_cache_new(shl_shard_registry_t *registry)
{
    shl_catalog_cache_t *c = bson_malloc0(sizeof(*c));

    c->registry = registry;
    return c;
}

void
shl_catalog_cache_destroy(shl_catalog_cache_t *cache)
{
    bson_free(cache);
}

void
shl_catalog_cache_invalidate_collection(shl_catalog_cache_t *cache, const char *ns)
{
    (void)cache;
    (void)ns;
}

void
shl_catalog_cache_invalidate_database(shl_catalog_cache_t *cache, const char *db)
{
    (void)cache;
    (void)db;
}

/* Every document of config.<coll> matching 'filter' into the array 'docs' (initialised
 * here; the caller destroys it), following the cursor. */
static int
find_all(shl_catalog_cache_t *cache, const char *coll, const bson_t *filter, bson_t *docs,
         shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    int64_t id = 0;
    uint32_t n = 0;
    bool first = true;

    bson_init(docs);
    do {
        bson_iter_t it, cur, batch;
        bson_destroy(&cmd);
        bson_init(&cmd);
        if (first) {
            BSON_APPEND_UTF8(&cmd, "find", coll);
            BSON_APPEND_DOCUMENT(&cmd, "filter", filter);
            BSON_APPEND_INT64(&cmd, "batchSize", 100000);
        } else {
            BSON_APPEND_INT64(&cmd, "getMore", id);
            BSON_APPEND_UTF8(&cmd, "collection", coll);
        }
        bson_destroy(&reply);
        SHL_ERR(shl_client_run(cache->registry->pool, cache->registry->config_host, "config",
                               &cmd, STANDIN_TIMEOUT_MS, &reply, st));
        if (!bson_iter_init_find(&it, &reply, "cursor") || !bson_iter_recurse(&it, &cur)) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "find on config.%s: no cursor in reply", coll);
        }
        id = 0;
        while (bson_iter_next(&cur)) {
            const char *k = bson_iter_key(&cur);
            if (strcmp(k, "id") == 0) {
                id = bson_iter_as_int64(&cur);
            } else if ((strcmp(k, "firstBatch") == 0 || strcmp(k, "nextBatch") == 0) &&
                       bson_iter_recurse(&cur, &batch)) {
                while (bson_iter_next(&batch)) {
                    char key[16];
                    const char *kp;
                    bson_uint32_to_string(n++, &kp, key, sizeof(key));
                    bson_append_iter(docs, kp, -1, &batch);
                }
            }
        }
        first = false;
    } while (id != 0);
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* The first document of 'docs' as a view; false if none. */
static bool
first_doc(const bson_t *docs, bson_t *view)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    if (!bson_iter_init(&it, docs) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return false;
    }
    bson_iter_document(&it, &len, &data);
    return bson_init_static(view, data, len);
}

int
shl_catalog_cache_get_database(shl_catalog_cache_t *cache, const char *db,
                               shl_cached_database_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_t filter = BSON_INITIALIZER, docs = BSON_INITIALIZER, view;
    shl_database_type_t t;
    bool parsed = false;

    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", db);
    if (strcmp(db, "admin") == 0 || strcmp(db, "config") == 0) {
        snprintf(out->primary, sizeof(out->primary), "config");
        out->version = shl_database_version_fixed();
        goto done;
    }
    BSON_APPEND_UTF8(&filter, "_id", db);
    bson_destroy(&docs);
    SHL_ERR(find_all(cache, "databases", &filter, &docs, st));
    if (!first_doc(&docs, &view)) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "database %s not found", db);
    }
    SHL_ERR(shl_database_type_parse(&view, &t, st));
    parsed = true;
    snprintf(out->primary, sizeof(out->primary), "%s", t.primary);
    out->version = t.version;
done:
    if (parsed) {
        shl_database_type_cleanup(&t);
    }
    bson_destroy(&filter);
    bson_destroy(&docs);
    return ret;
}

int
shl_catalog_cache_get_collection(shl_catalog_cache_t *cache, const char *ns,
                                 shl_routing_table_t **rt, shl_status_t *st)
{
    int ret = 0;
    bson_t filter = BSON_INITIALIZER, docs = BSON_INITIALIZER, chunks = BSON_INITIALIZER, view;
    shl_collection_type_t coll;
    bool parsed = false;
    shl_chunk_type_t *arr = NULL;
    size_t n = 0, cap;
    shl_routing_table_info_t info;
    shl_chunk_version_t gen;
    bson_iter_t it;

    *rt = NULL;
    BSON_APPEND_UTF8(&filter, "_id", ns);
    bson_destroy(&docs);
    SHL_ERR(find_all(cache, "collections", &filter, &docs, st));
    if (!first_doc(&docs, &view)) {
        goto done; /* not sharded */
    }
    SHL_ERR(shl_collection_type_parse(&view, &coll, st));
    parsed = true;
    gen = shl_collection_type_generation(&coll);
    bson_reinit(&filter);
    shl_uuid_append(&filter, "uuid", &coll.uuid);
    bson_destroy(&chunks);
    SHL_ERR(find_all(cache, "chunks", &filter, &chunks, st));
    cap = bson_count_keys(&chunks);
    arr = bson_malloc0((cap + 1) * sizeof(*arr));
    bson_iter_init(&it, &chunks);
    while (bson_iter_next(&it)) {
        const uint8_t *data;
        uint32_t len;
        bson_t c;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&c, data, len);
        SHL_ERR(shl_chunk_type_parse_config(&c, &gen, &arr[n], st));
        n++;
    }
    shl_routing_table_info_from_collection(&coll, &info);
    SHL_ERR(shl_routing_table_new(&info, arr, n, rt, st));
done:
    if (arr != NULL) {
        shl_chunk_types_free(arr, n);
    }
    if (parsed) {
        shl_collection_type_cleanup(&coll);
    }
    bson_destroy(&filter);
    bson_destroy(&docs);
    bson_destroy(&chunks);
    return ret;
}
