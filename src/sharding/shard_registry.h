/*
 * shard_registry.h -- the shard registry (seeds/000 "Shard registry"): the cluster's shards
 * (config.shards) as name -> connection string, loaded from the config server lazily, again
 * when a caller asks for a shard it does not know, and when older than the reload period
 * (30 s). Also knows the config server's own connection string. Used by routers and by
 * shards (which route during DDL and migrations).
 *
 * Thread-safety: all functions may be called from any thread. A reload runs under
 * 'reload_mu' (one at a time; other callers wait for it and share its result); the snapshot
 * of shards is immutable and refcounted, swapped under a short mutex.
 */
#ifndef SHL_SHARDING_SHARD_REGISTRY_H
#define SHL_SHARDING_SHARD_REGISTRY_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "net/client.h"
#include "sharding/sharding_types.h"

typedef struct shl_shard_registry shl_shard_registry_t;

/* How long a loaded registry is trusted before the next lookup reloads it. */
#define SHL_SHARD_REGISTRY_RELOAD_MS 30000

/*
 * shl_conn_string_first_host --
 *     The address the internal client is to send to for a connection string, into 'out'
 *     (size 'n'): for a replica set of several members "set/h1:p1,h2:p2" the whole string
 *     (the client resolves it to the set's primary, net/rs_monitor.h); else its first
 *     "host:port". Errors: FailedToParse (empty or too long).
 */
int shl_conn_string_first_host(const char *conn_string, char *out, size_t n, shl_status_t *st);

/*
 * shl_shard_registry_new --
 *     A registry that reads config.shards from 'config_conn_string' through 'pool' (both
 *     borrowed; the pool must outlive the registry). Does no I/O.
 */
shl_shard_registry_t *shl_shard_registry_new(shl_conn_pool_t *pool, const char *config_conn_string);
void shl_shard_registry_destroy(shl_shard_registry_t *reg);

/* shl_shard_registry_config_host -- the config server's address for the internal client
 * ("host:port", or "set/h1,h2,..." for a config server replica set; borrowed, constant). */
const char *shl_shard_registry_config_host(const shl_shard_registry_t *reg);

/* shl_shard_registry_pool -- the pool it was made with (borrowed). */
shl_conn_pool_t *shl_shard_registry_pool(const shl_shard_registry_t *reg);

/*
 * shl_shard_registry_host_for --
 *     The address (as shl_conn_string_first_host) to send to for shard 'name' into 'out'
 *     (size 'n'), reloading once if the name is unknown or the registry is older than
 *     SHL_SHARD_REGISTRY_RELOAD_MS. When that reload fails, a shard the old list names is
 *     still answered from it. Errors: ShardNotFound (70) "Shard <name> not found"; the
 *     config server's errors (only for a name the list does not hold).
 */
int shl_shard_registry_host_for(shl_shard_registry_t *reg, const char *name, char *out, size_t n,
                                shl_status_t *st);

/*
 * shl_shard_registry_list --
 *     The names of all shards (sorted), reloading if stale (a failed reload falls back on
 *     the last list). *names is a NULL-terminated array the caller frees with
 *     bson_strfreev. Errors: the config server's, when there is no list yet.
 */
int shl_shard_registry_list(shl_shard_registry_t *reg, char ***names, shl_status_t *st);

/* shl_shard_registry_reload -- load config.shards now. Errors: the config server's. */
int shl_shard_registry_reload(shl_shard_registry_t *reg, shl_status_t *st);

/* shl_shard_registry_invalidate -- the next lookup reloads. */
void shl_shard_registry_invalidate(shl_shard_registry_t *reg);

#endif
