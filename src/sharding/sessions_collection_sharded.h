/*
 * sessions_collection_sharded.h -- config.system.sessions of a sharded cluster, as routers,
 * shards and config servers alike persist their logical session caches into it (seeds/001
 * "Sharded Cluster: Sessions collection is a regular sharded collection"; MongoDB's
 * SessionsCollectionSharded). Each session's document lives on the shard owning the chunk of
 * its _id; writes and reads are sent there with the shardVersion of the catalog cache's
 * routing table, and a stale answer (StaleConfig, StaleEpoch, ShardNotFound) marks the
 * routing stale and retries, at most SHL_SESSIONS_SHARDED_MAX_RETRIES times. Until the config
 * server has sharded the collection, every call fails with NamespaceNotSharded (the cache
 * logs it and tries again at its next refresh, as MongoDB's do).
 */
#ifndef SHL_SHARDING_SESSIONS_COLLECTION_SHARDED_H
#define SHL_SHARDING_SESSIONS_COLLECTION_SHARDED_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "session/sessions_collection.h"
#include "sharding/catalog_cache.h"

/* MongoDB's kMaxNumStaleVersionRetries. */
#define SHL_SESSIONS_SHARDED_MAX_RETRIES 10

typedef struct shl_sessions_sharded shl_sessions_sharded_t;

/*
 * shl_sessions_sharded_new --
 *     The collection as seen through the catalog cache 'get_cache(arg)' returns: a router's,
 *     a config server's, or a shard's once it is sharding-aware (NULL before:
 *     ShardingStateNotInitialized). 'setup' (may be NULL) replaces the default setup (which
 *     checks that the collection is sharded): the config server creates it there.
 */
shl_sessions_sharded_t *shl_sessions_sharded_new(shl_catalog_cache_t *(*get_cache)(void *arg),
                                                 void *arg,
                                                 int (*setup)(void *arg, shl_status_t *st));
void shl_sessions_sharded_destroy(shl_sessions_sharded_t *s);

/* shl_sessions_sharded_coll -- the cache's persistence interface over 's' (borrowed). */
void shl_sessions_sharded_coll(shl_sessions_sharded_t *s, shl_sessions_coll_t *out);

/*
 * shl_sessions_sharded_check --
 *     Whether the collection is sharded, refreshing the routing first when the cache calls
 *     it unsharded. Errors: ShardingStateNotInitialized, NamespaceNotSharded "Session
 *     collection 'config.system.sessions' is not sharded", the config server's.
 */
int shl_sessions_sharded_check(shl_sessions_sharded_t *s, shl_status_t *st);

/*
 * shl_sessions_sharded_create_ttl_index --
 *     The TTL index lsidTTLIndex (localLogicalSessionTimeoutMinutes) on every shard owning a
 *     chunk of the collection, sent versioned (createIndexes; an index of another timeout is
 *     changed with collMod). Errors: NamespaceNotSharded, a shard's.
 */
int shl_sessions_sharded_create_ttl_index(shl_sessions_sharded_t *s, shl_status_t *st);

#endif
