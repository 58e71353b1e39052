/*
 * catalog_cache.h -- the routing information cache (seeds/000 "The routing table cache",
 * "When the routing table cache will refresh"): per database its primary shard and database
 * version (config.databases), per collection its routing table (config.collections +
 * config.chunks) or "not sharded". Loaded lazily from the config server with find commands;
 * a collection marked stale is refreshed on its next lookup -- incrementally (chunks with
 * lastmod >= the cached collection version) when the generation is unchanged, from scratch
 * when it changed. A failed refresh is retried twice before the error is returned.
 *
 * Used by the router (targeting) and by shards (filtering metadata).
 *
 * Thread-safety: every function may be called from any thread. Entries are guarded by the
 * cache's mutex; a refresh of one entry runs outside it, one at a time per entry (callers
 * asking for an entry being refreshed wait for that refresh and share its result). Routing
 * tables handed out are immutable and refcounted (release them).
 */
#ifndef SHL_SHARDING_CATALOG_CACHE_H
#define SHL_SHARDING_CATALOG_CACHE_H

#include <bson/bson.h>
#include <stdbool.h>

#include "base/status.h"
#include "sharding/chunk_version.h"
#include "sharding/routing_table.h"
#include "sharding/shard_registry.h"

typedef struct shl_catalog_cache shl_catalog_cache_t;

/* What the cache knows about a database. */
typedef struct shl_cached_database {
    char name[SHL_DB_NAME_MAX + 1];
    char primary[SHL_SHARD_ID_MAX];
    shl_database_version_t version;
} shl_cached_database_t;

/* shl_catalog_cache_new -- a cache over 'registry' (borrowed; reads from its config host). */
shl_catalog_cache_t *shl_catalog_cache_new(shl_shard_registry_t *registry);
void shl_catalog_cache_destroy(shl_catalog_cache_t *cache);

/*
 * shl_catalog_cache_get_database --
 *     The database's entry, loading it if not cached. Errors: NamespaceNotFound (26)
 *     "database <db> not found" when config.databases has no entry; the config server's.
 *     "admin" and "config" are answered without a lookup: primary "config", fixed version.
 */
int shl_catalog_cache_get_database(shl_catalog_cache_t *cache, const char *db,
                                   shl_cached_database_t *out, shl_status_t *st);

/*
 * shl_catalog_cache_get_collection --
 *     The routing table of 'ns' into *rt (one reference; release it), or *rt = NULL when the
 *     collection is not sharded. Refreshes first if the entry is missing or marked stale.
 *     Errors: the config server's (after two retries); ConflictingOperationInProgress when
 *     the chunks read are inconsistent after the retries.
 */
int shl_catalog_cache_get_collection(shl_catalog_cache_t *cache, const char *ns,
                                     shl_routing_table_t **rt, shl_status_t *st);

/*
 * shl_catalog_cache_on_stale_shard --
 *     A shard reported StaleConfig for 'ns': mark the entry stale so the next lookup
 *     refreshes it -- unless 'wanted' (may be NULL) is set and not newer than the cached
 *     collection version of the same generation, in which case the cache is already as new.
 */
void shl_catalog_cache_on_stale_shard(shl_catalog_cache_t *cache, const char *ns,
                                      const shl_chunk_version_t *wanted);

/* shl_catalog_cache_invalidate_collection -- forget 'ns'; the next lookup reloads it fully. */
void shl_catalog_cache_invalidate_collection(shl_catalog_cache_t *cache, const char *ns);

/* shl_catalog_cache_invalidate_database -- forget the database entry (StaleDbVersion,
 * dropDatabase) and all its collections. */
void shl_catalog_cache_invalidate_database(shl_catalog_cache_t *cache, const char *db);

/* shl_catalog_cache_purge -- forget everything (flushRouterConfig). */
void shl_catalog_cache_purge(shl_catalog_cache_t *cache);

/* shl_catalog_cache_registry -- the registry it was made with (borrowed). */
shl_shard_registry_t *shl_catalog_cache_registry(shl_catalog_cache_t *cache);

#endif
