/*
 * config_private.h -- what the config server's files share (docs/design/sharding-protocol.md):
 * the module state (client pool to the shards, cluster id, per-namespace commit locks), the
 * catalog client that reads and writes config.* by running the node's own commands
 * in-process, remote calls to shards, the changelog and the routing-table loader. Not used
 * outside src/config.
 */
#ifndef SHL_CONFIG_PRIVATE_H
#define SHL_CONFIG_PRIVATE_H

#include <bson/bson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/namespace.h"
#include "base/status.h"
#include "sharding/vector_clock.h"
#include "net/client.h"
#include "net/command.h"
#include "net/op_context.h"
#include "sharding/catalog_types.h"
#include "sharding/remote.h"
#include "sharding/routing_table.h"

/* Timeout of one command sent to a shard. */
#define CFG_REMOTE_TIMEOUT_MS 30000

/*
 * The config server's state: one per process (a node runs one role), set up by
 * shl_configsvr_init before the listener starts. 'pool' is thread-safe; the lock list
 * is guarded by 'locks_mu'.
 */
typedef struct cfg_state {
    shl_service_ctx_t *svc;
    shl_conn_pool_t *pool;
    bson_oid_t cluster_id;
    char conn_string[440]; /* this config server as "set/host:port" */
    pthread_mutex_t locks_mu;
    struct cfg_ns_lock *locks; /* guarded by locks_mu */
    pthread_mutex_t shards_mu; /* serializes addShard/removeShard */
    shl_vector_clock_t clock;  /* TopologyTime: newest config.shards topologyTime (lock-free) */
    /* The key manager thread (configsvr_keys.c): keys_stop guarded by keys_mu. */
    pthread_mutex_t keys_mu;
    pthread_cond_t keys_cv;
    bool keys_stop, keys_started;
    bool keys_kicked; /* look again now (a step-up); guarded by keys_mu */
    pthread_t keys_thread;
    /* The outgoing-command transport (remote.h; catalog_client.c's cfg_send): set at init,
     * constant after. */
    shl_remote_t remote;
} cfg_state_t;

/* The options of a command to a shard: one attempt of at most CFG_REMOTE_TIMEOUT_MS. */
extern const shl_remote_options_t cfg_remote_opts;

/* cfg_remote_init -- make cfg->remote the config server's transport: self in-process, a
 * shard by id resolved through config.shards (a shard's reply advances this node's clock to
 * the shard's time), a host as given, "config" is self. */
void cfg_remote_init(cfg_state_t *cfg);

/* cfg_get -- the process's config server state. */
cfg_state_t *cfg_get(void);

/*
 * cfg_lock_ns / cfg_unlock_ns --
 *     Serialize metadata commits on one namespace (or database name): a mutex per name,
 *     created on first use and kept for the process's life. Blocks.
 */
void cfg_lock_ns(const char *name);
void cfg_unlock_ns(const char *name);
/* cfg_user_ddl_drain_begin / _end -- wait until no DDL on a user namespace holds its lock
 * and keep new ones from starting, until _end (setUserWriteBlockMode). */
void cfg_user_ddl_drain_begin(void);
void cfg_user_ddl_drain_end(void);

/* ---- catalog client: config.* through the node's own commands ---- */

/* In-process commands go through cfg_get()->remote's self target (remote.h). */

/* A list of owned documents. */
typedef struct cfg_docs {
    bson_t **docs;
    size_t n;
} cfg_docs_t;

void cfg_docs_cleanup(cfg_docs_t *d);

/*
 * cfg_find --
 *     All documents of config.<coll> matching 'filter' (NULL: all) in 'sort' order (NULL:
 *     natural), copied into *out (initialised here; cfg_docs_cleanup it).
 */
int cfg_find(const char *coll, const bson_t *filter, const bson_t *sort, cfg_docs_t *out,
             shl_status_t *st);

/* cfg_find_one -- the first match into *out (initialised; empty when !*found). */
int cfg_find_one(const char *coll, const bson_t *filter, bson_t *out, bool *found,
                 shl_status_t *st);

/* cfg_insert -- insert 'n' documents into config.<coll> (w: majority). */
int cfg_insert(const char *coll, const bson_t *const *docs, size_t n, shl_status_t *st);

/* cfg_update -- one update statement; *matched (may be NULL) gets n. */
int cfg_update(const char *coll, const bson_t *q, const bson_t *u, bool upsert, bool multi,
               int64_t *matched, shl_status_t *st);

/* cfg_delete -- delete all (multi) or one; *deleted (may be NULL) gets n. */
int cfg_delete(const char *coll, const bson_t *q, bool multi, int64_t *deleted, shl_status_t *st);

/*
 * cfg_batch_t -- config.* changes committed together with applyOps (one storage
 * transaction: a crash leaves all of them or none). _upsert replaces (or inserts) the
 * document with doc's _id; _delete removes by _id. Operations run in the order added.
 */
typedef struct cfg_batch {
    bson_t ops; /* the applyOps array */
    uint32_t n;
} cfg_batch_t;

void cfg_batch_init(cfg_batch_t *b);
void cfg_batch_upsert(cfg_batch_t *b, const char *coll, const bson_t *doc);
void cfg_batch_delete(cfg_batch_t *b, const char *coll, const bson_value_t *id);
/* cfg_batch_commit -- applyOps with w: majority. Errors: the local command's. */
int cfg_batch_commit(cfg_batch_t *b, shl_status_t *st);
void cfg_batch_cleanup(cfg_batch_t *b);

/* ---- typed reads ---- */

/* cfg_get_shards -- config.shards sorted by _id; *out is an array of *n (free with
 * cfg_shards_free). */
int cfg_get_shards(shl_shard_type_t **out, size_t *n, shl_status_t *st);
void cfg_shards_free(shl_shard_type_t *s, size_t n);

/* cfg_get_shard -- one shard; ShardNotFound "Shard <name> does not exist" if unknown. */
int cfg_get_shard(const char *name, shl_shard_type_t *out, shl_status_t *st);

/* cfg_get_database -- config.databases entry; *found false if none. */
int cfg_get_database(const char *db, shl_database_type_t *out, bool *found, shl_status_t *st);

/* cfg_get_collection -- config.collections entry; *found false if none (or dropped). */
int cfg_get_collection(const char *ns, shl_collection_type_t *out, bool *found, shl_status_t *st);

/*
 * cfg_load_routing_table --
 *     The routing table of sharded collection 'ns' built from config.collections and
 *     config.chunks. NamespaceNotSharded if it is not sharded. *coll (may be NULL) gets
 *     the collection entry (caller cleans it up).
 */
int cfg_load_routing_table(const char *ns, shl_collection_type_t *coll, shl_routing_table_t **out,
                           shl_status_t *st);

/* ---- shards ---- */

/* Commands to a shard: shl_remote_run_shard(&cfg_get()->remote, <id>, ..., &cfg_remote_opts). */

/* cfg_flush_shards -- send _flushRoutingTableCacheUpdates: ns to each shard (best effort). */
void cfg_flush_shards(const char *ns, const char *const *shards, size_t n);

/* cfg_flush_all_shards -- the same to every shard of config.shards. */
void cfg_flush_all_shards(const char *ns);

/* cfg_flush_database_all_shards -- _flushDatabaseCacheUpdates: db to every shard (best effort). */
void cfg_flush_database_all_shards(const char *db);

/* ---- time, changelog ---- */

/* cfg_fresh_ts -- a new cluster time from this node's storage clock (later than any so far). */
shl_ts_t cfg_fresh_ts(void);

/*
 * cfg_changelog --
 *     Insert {_id, server, shard: "config", clientAddr, time, what, ns, details} into
 *     config.changelog (best effort: failures are logged).
 */
void cfg_changelog(shl_op_ctx_t *op, const char *what, const char *ns, const bson_t *details);

/* ---- command helpers ---- */

/* cfg_cmd_string -- the first field's string value (the target), or TypeMismatch. */
int cfg_cmd_string(const bson_t *cmd, const char **out, shl_status_t *st);

/* cfg_doc_field -- a document-valued field as a static view; *has false if absent.
 * TypeMismatch if present and not an object. */
int cfg_doc_field(const bson_t *cmd, const char *field, bson_t *view, bool *has, shl_status_t *st);

/* Command registration per file. */
void cfg_register_shard_commands(shl_command_registry_t *reg);
void cfg_register_ddl_commands(shl_command_registry_t *reg);
void cfg_register_drop_commands(shl_command_registry_t *reg); /* configsvr_drop.c */
void cfg_register_chunk_commands(shl_command_registry_t *reg);
void cfg_register_move_primary_commands(shl_command_registry_t *reg);
/* cfg_max_chunk_size_bytes -- the collection's chunk size in bytes: its maxChunkSizeBytes
 * (configureCollectionBalancing), else config.settings {_id: "chunksize"} value (MB), else
 * 128 MB. 'coll' may be NULL (the settings or the default). Errors: reading config.settings
 * (*out holds the default then). (configsvr_chunks.c) */
int cfg_max_chunk_size_bytes(const shl_collection_type_t *coll, int64_t *out, shl_status_t *st);

/* cfg_owned_data_size -- the bytes of collection 'ns' ("db.coll") that 'shard' owns: its
 * collStats size minus its orphans (numOrphanDocs x avgObjSize), as MongoDB's
 * _shardsvrGetStatsForBalancing reports them; 0 when it has none or does not answer. The
 * balancer and balancerCollectionStatus judge imbalance on it alike (configsvr_balancer.c). */
int64_t cfg_owned_data_size(const char *shard, const char *ns);

/* Zones and balancerCollectionStatus (configsvr_zones.c). */
void cfg_register_zone_commands(shl_command_registry_t *reg);
void cfg_register_uwb_commands(shl_command_registry_t *reg); /* configsvr_uwb.c */
/* cfg_uwb_sync_new_shard -- give the shard at 'host' (being added) the cluster's user write
 * blocking mode, before it is recorded in config.shards. Errors: network or its reply's. */
int cfg_uwb_sync_new_shard(const char *host, shl_status_t *st);

/* cfg_create_database -- _configsvrCreateDatabase's body (used by shardCollection too). */
int cfg_create_database(shl_op_ctx_t *op, const char *db, const char *primary,
                        shl_database_type_t *out, shl_status_t *st);

/*
 * cfg_shard_collection_info --
 *     listCollections {name: ns.coll} on 'shard': *exists, *uuid (when it exists and is not a
 *     view), *is_view, and the collection's options into 'options' (reinitialised; may be
 *     NULL). Errors: the shard's, network.
 */
int cfg_shard_collection_info(const char *shard, const shl_ns_t *ns, bool *exists, shl_uuid_t *uuid,
                              bool *is_view, bson_t *options, shl_status_t *st);

/* Rename of sharded collections (configsvr_rename.c): the catalog commit
 * _configsvrRenameCollectionMetadata. */
void cfg_register_rename_commands(shl_command_registry_t *reg);

/*
 * cfg_sessions_start / cfg_sessions_stop -- the config server's logical session cache over the
 * cluster's config.system.sessions, which its setup creates and shards (configsvr_sessions.c);
 * stop before the pool goes. Errors: the cache thread's start.
 */
int cfg_sessions_start(cfg_state_t *cfg, shl_status_t *st);
void cfg_sessions_stop(cfg_state_t *cfg);

/* ---- pure logic (config_logic.c) ---- */

/*
 * cfg_hashed_split_points --
 *     The n - 1 split points (ascending) of n initial chunks of a hashed shard key, as
 *     MongoDB computes them. 'out' has room for n; *nout gets n - 1.
 */
void cfg_hashed_split_points(int n, int64_t *out, int *nout);

/*
 * cfg_index_backs_key --
 *     Whether the index 'spec' (a listIndexes entry) can back shard key 'shard_key': its key
 *     starts with the shard key's fields in order with the same kind (ascending or hashed),
 *     and it is not sparse, partial, hidden or of a non-simple collation.
 */
bool cfg_index_backs_key(const bson_t *shard_key, const bson_t *spec);

/* cfg_host_of -- the first "host:port" of a connection string "set/host:port,..." or
 * "host:port" (config_logic.c). */
void cfg_host_of(const char *conn_string, char *out, size_t n);

/* cfg_target_of -- where to send to a shard of 'conn_string': the whole string for a replica
 * set of several members (the client finds its primary, net/rs_monitor.h), else
 * cfg_host_of's host (config_logic.c). */
void cfg_target_of(const char *conn_string, char *out, size_t n);

/* cfg_index_name -- MongoDB's default index name for 'key' ("a_1_b_hashed"). */
void cfg_index_name(const bson_t *key, char *out, size_t n);

/* A key admin.system.keys should get: its _id and expiresAt (packed Timestamps). */
typedef struct cfg_new_key {
    int64_t id;
    uint64_t expires_at;
} cfg_new_key_t;

/*
 * cfg_keys_plan --
 *     MongoDB's key generation rule at ClusterTime 'now' with keys valid for 'interval_secs':
 *     given the expiresAt of the HMAC keys that have not expired ('valid', ascending, each >
 *     now), the keys to insert so that there is a current key and a reserve one after it:
 *     none valid -> a current key expiring at now's seconds + interval and a reserve expiring
 *     one interval later; only a current one -> the reserve. Ids are now's packed value,
 *     counting up. Fills out[0..*n), *n <= 2.
 */
void cfg_keys_plan(uint64_t now, int64_t interval_secs, const uint64_t *valid, size_t nvalid,
                   cfg_new_key_t out[2], size_t *n);

/* ---- $clusterTime keys (configsvr_keys.c) ---- */

/*
 * cfg_keys_start / cfg_keys_stop --
 *     The key manager: makes the first keys now (errors: the local insert's), installs the
 *     process's key cache (svc->cluster_time, loaded from the local admin.system.keys), then
 *     a thread that makes the next key before the current one expires. Stop before storage
 *     closes.
 */
int cfg_keys_start(cfg_state_t *cfg, shl_status_t *st);
void cfg_keys_stop(cfg_state_t *cfg);
/* cfg_keys_kick -- make the key generator look again now (this member became primary). */
void cfg_keys_kick(cfg_state_t *cfg);

#endif
