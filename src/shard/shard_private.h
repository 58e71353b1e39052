/*
 * shard_private.h -- what the shard module's files share: the shard's sharding state
 * (MongoDB's ShardingState + the CollectionShardingRuntime map) and its helpers. Not used
 * outside src/shard.
 */
#ifndef SHL_SHARD_PRIVATE_H
#define SHL_SHARD_PRIVATE_H

#include <bson/bson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "base/status.h"
#include "db/sharding_hooks.h"
#include "net/client.h"
#include "net/command.h"
#include "net/service_context.h"
#include "sharding/catalog_cache.h"
#include "sharding/chunk_version.h"
#include "sharding/routing_table.h"
#include "sharding/remote.h"
#include "sharding/shard_registry.h"
#include "net/cluster_time.h"
#include "sharding/vector_clock.h"

#define SHARD_CONN_STRING_MAX 512

/* The shardIdentity document's fields (admin.system.version {_id: "shardIdentity"}). */
typedef struct shard_identity {
    char shard_name[SHL_SHARD_ID_MAX];
    bson_oid_t cluster_id;
    char config_cs[SHARD_CONN_STRING_MAX];
} shard_identity_t;

/*
 * The filtering metadata of one namespace (MongoDB's CollectionMetadata): immutable and
 * refcounted; a refresh builds a new one and swaps it into the map. 'rt' is NULL when the
 * collection is not sharded (then this shard's version is UNSHARDED).
 */
typedef struct shard_coll_meta {
    shl_db_orphan_filter_t filter; /* first: the db-level orphan filter view */
    shl_routing_table_t *rt;       /* reference, or NULL for unsharded */
    char shard_name[SHL_SHARD_ID_MAX];
    shl_chunk_version_t shard_version; /* this shard's version in rt (UNSHARDED if !rt) */
    shl_chunk_version_t coll_version;  /* the collection version (UNSHARDED if !rt) */
    /* What every document's ownership comes down to, fixed per object (see meta_new):
     * this shard owns every chunk of rt (all but array shard keys are owned) or none. */
    bool owns_all_chunks, owns_no_chunk;
    /* MongoDB's CollectionMetadataTracker: every metadata object alive (held by the map,
     * a running query or a cursor) is on its shard's live list until its last release,
     * so the range deleter can wait for the queries that may still read a range. */
    struct shard_state *owner;
    struct shard_coll_meta *live_prev, *live_next; /* guarded by owner->meta_mu */
    /* Auto-split's ChunkWritesTracker (chunk_splitter.c): per chunk of rt, the bytes written
     * since its last split and whether it waits for the splitter. Lock-free (atomics). */
    size_t ncounters;
    atomic_int_fast64_t *chunk_bytes;
    atomic_bool *chunk_queued;
    /* The load policy's per-chunk operation counters (chunk_splitter.c): reads and writes
     * of the chunk's documents, decayed by 1/4 a second (about 4 x the ops/s). Atomics. */
    atomic_int_fast64_t *chunk_ops;
    /* Per chunk, a ring of the shard keys of sampled operations (one in 4, while the balancer
     * policy is "load"): their median is where a hot chunk splits. Guarded by load_mu
     * (initialised with chunk_ops). */
    pthread_mutex_t load_mu;
    struct shard_load_ring *load_rings;
} shard_coll_meta_t;

/* One entry of the ns -> metadata map (MongoDB's CollectionShardingRuntime). */
typedef struct shard_csr {
    char *ns;
    shard_coll_meta_t *meta;    /* reference or NULL (unknown: load on next use) */
    pthread_mutex_t refresh_mu; /* one refresh of this ns at a time */
    /* A donor's critical section (guarded by the state's mu, waited on with crit_cv):
     * SHARD_CRIT_WRITES blocks versioned writes, SHARD_CRIT_ALL also reads. */
    int crit;
    int inflight_writes;    /* versioned writes that passed the check and have not finished */
    int inflight_db_writes; /* those of them that carry a databaseVersion (movePrimary) */
    struct shard_csr *next;
} shard_csr_t;

enum { SHARD_CRIT_NONE = 0, SHARD_CRIT_WRITES = 1, SHARD_CRIT_ALL = 2 };

/* A database's critical section (movePrimary, move_primary.c): requests carrying a
 * databaseVersion for one of its namespaces wait at 'level' (SHARD_CRIT_*). */
typedef struct shard_db_crit {
    char *db;
    int level;
    struct shard_db_crit *next;
} shard_db_crit_t;

struct shard_donor;
struct shard_recipient;

/*
 * The range deleter (range_deleter.c): one thread per shard. 'gen' counts changes that may
 * make a task runnable (a task persisted ready, marked ready or removed, a tracked metadata
 * object released while the thread waits for one); waiters on 'cv' re-check on each.
 */
typedef struct shard_range_deleter {
    pthread_mutex_t mu; /* guards the fields up to 'thread' */
    pthread_cond_t cv;
    uint64_t gen;
    bool stop;
    bool started;
    pthread_t thread;
    atomic_bool waiting_for_queries; /* the thread waits for old metadata to be released */
    atomic_bool stop_flag;           /* 'stop', readable without 'mu' (fail point pauses) */
    atomic_int_fast64_t tasks;       /* tasks in config.rangeDeletions at the last pass */
    atomic_int_fast64_t docs_deleted;
    atomic_int_fast64_t bytes_deleted;
    struct rd_delay *delays; /* thread-only: when each delayed task's wait began */
} shard_range_deleter_t;

/* The shard's state: the hooks' arg. */
typedef struct shard_state {
    shl_service_ctx_t *svc;
    pthread_mutex_t mu; /* guards everything below */
    bool aware;         /* shardIdentity known */
    shard_identity_t id;
    /* Set when the shard becomes aware, then never changed until shutdown. */
    shl_conn_pool_t *pool;
    shl_shard_registry_t *registry;
    shl_catalog_cache_t *cache;
    shl_vector_clock_t clock;      /* gossip seen on the pool's replies (lock-free) */
    shard_csr_t *csrs;             /* ns -> filtering metadata */
    shard_db_crit_t *db_crits;     /* databases in a critical section (movePrimary) */
    pthread_mutex_t identity_mu;   /* serializes _addShard's read-modify-write */
    pthread_mutex_t meta_mu;       /* guards the live list (taken after mu, never before) */
    shard_coll_meta_t *live_metas; /* every metadata object not yet destroyed */
    shard_range_deleter_t rd;
    pthread_cond_t crit_cv; /* critical sections and in-flight writes changed */
    /* ActiveMigrationsRegistry (migration_source.c): one migration at a time, as donor
     * or recipient; guarded by mig_mu. */
    pthread_mutex_t mig_mu;
    pthread_cond_t mig_cv;
    struct shard_donor *donor;
    struct shard_recipient *recipient;
    atomic_int capturing; /* nonzero while a donor records writes (fast path) */
    /* Step-up work done for this member's current time as primary (shard_step_up.c);
     * written by the step-up thread, waited on with crit_cv under mu. */
    atomic_bool stepped_up;
    /* Migrations this donor gave up with LockTimeout waiting for transactions (serverStatus
     * shardingStatistics.countDonorMoveChunkLockTimeout). */
    atomic_llong donor_lock_timeouts;
    void (*prev_shutdown)(struct shl_service_ctx *svc);
    void (*prev_server_status)(struct shl_service_ctx *svc, bson_t *reply);
    struct shl_sessions_sharded *sessions; /* config.system.sessions (shard_sessions.c) */
    /* The vector clock's persister (shard_clock.c): vc_dirty / vc_stop guarded by
     * vc_persist_mu; vc_persisted (config.vectorClock as last written: ConfigTime,
     * TopologyTime) by the persister thread alone (init and shutdown run without it). */
    pthread_mutex_t vc_persist_mu;
    pthread_cond_t vc_cv;
    bool vc_dirty, vc_stop, vc_thread_started;
    pthread_t vc_thread;
    uint64_t vc_persisted[2];
    /* The coordinator framework (sharding/coordinator.h) and the outgoing-command transport
     * it uses (txn_coordinator.c); set at init, constant until shutdown. */
    struct shl_coord_service *coords;
    shl_remote_t remote;
    struct shard_splitter *splitter; /* auto-split (chunk_splitter.c); set at init */
    /* The DDL lock manager of the drop coordinators (ddl_lock.h, thread-safe itself); set at
     * init, constant until shutdown. */
    struct shard_ddl_locks *ddl_locks;
    /* setUserWriteBlockMode's prepare: new DDL coordinators are refused (atomic). */
    atomic_bool ddl_blocked;
} shard_state_t;

/*
 * The shard's vector clock (shard_clock.c; docs/design/vector_clock.md).
 * shard_clock_init -- before the listener: recover ConfigTime/TopologyTime from
 *     config.vectorClock, create the $clusterTime key cache, install the gossip hooks.
 * shard_clock_sync -- once aware: ask the config server, whose times are at least any the
 *     shard saw (a restart then never answers with older ones). Blocks up to 5 s.
 * shard_clock_observe -- advance from a message's gossip (a reply on the shard's pool, or a
 *     request from a cluster process); persists when ConfigTime/TopologyTime moved.
 * shard_clock_decorate_request -- the pool's decorate hook: $clusterTime, $configTime,
 *     $topologyTime on every request the shard sends.
 * shard_clock_shutdown -- persist what moved since the last write.
 * shard_keys_load -- shl_keys_loader_fn: the config server's admin.system.keys
 *     (ShardingStateNotInitialized until the shard is aware).
 */
int shard_clock_init(shard_state_t *s, shl_status_t *st);
void shard_clock_sync(shard_state_t *s);
void shard_clock_observe(shard_state_t *s, const bson_t *msg);
void shard_clock_decorate_request(void *arg, const char *host, const char *cmd_name, bson_t *cmd);
void shard_clock_shutdown(shard_state_t *s);
int shard_keys_load(void *arg, shl_hmac_key_t **keys, size_t *n, shl_status_t *st);

/* shard_sessions_start / _stop -- the shard's logical session cache persists into the
 * cluster's config.system.sessions (shard_sessions.c); stop before the catalog cache goes. */
int shard_sessions_start(shard_state_t *s, shl_status_t *st);
void shard_sessions_stop(shard_state_t *s);

/* shard_state -- the state of the process serving 'op' (NULL if not a shard). */
shard_state_t *shard_state(const shl_op_ctx_t *op);

/* ---- identity (sharding_state.c) ---- */

/* shard_identity_load -- read admin.system.version's shardIdentity; *found false if none.
 * Errors: storage; BadValue for a malformed document. */
int shard_identity_load(shard_state_t *s, shard_identity_t *out, bool *found, shl_status_t *st);

/* shard_identity_parse -- {shardName, clusterId, configsvrConnectionString} ('ctx' names
 * the structure in errors). Errors: IDLFailedToParse, TypeMismatch, BadValue. */
int shard_identity_parse(const bson_t *doc, const char *ctx, shard_identity_t *out,
                         shl_status_t *st);

/* shard_identity_store -- write the identity durably (insert or replace). */
int shard_identity_store(shard_state_t *s, const shard_identity_t *id, shl_status_t *st);

/*
 * shard_meta_forget --
 *     Forget the filtering metadata of 'ns' and its catalog-cache entry: the next request
 *     that needs them loads them from the config server (a migration whose commit outcome
 *     is unknown must not go on filtering with what it had). Errors:
 *     ShardingStateNotInitialized when not shard-aware.
 */
int shard_meta_forget(shard_state_t *s, const char *ns, shl_status_t *st);

/*
 * shard_meta_forget_all --
 *     Forget every collection's filtering metadata and the shard's catalog cache: the next
 *     versioned request of each namespace loads it from the config server (a new primary's
 *     step-up). Errors: ShardingStateNotInitialized when not shard-aware.
 */
int shard_meta_forget_all(shard_state_t *s, shl_status_t *st);

/* shard_crit_reset_all -- lift every collection's critical section (a new primary, which
 * as a secondary held only those of config.collection_critical_sections, reloads them). */
void shard_crit_reset_all(shard_state_t *s);

/* ---- step-up / step-down (shard_step_up.c) ---- */

/*
 * shard_step_up_register --
 *     At start-up, after the state is set up: register the step-up / step-down work with
 *     replication and, when this member is primary now (or no replica set), run the step-up
 *     work now. On a secondary nothing is resumed until it becomes primary.
 */
void shard_step_up_register(shard_state_t *s);

/*
 * shard_step_up_gate --
 *     A versioned request on a primary whose step-up work has not finished waits for it
 *     (within the op's deadline, checking interruption; at most 30 s). No wait on a
 *     secondary. Errors: the op's interruption.
 */
int shard_step_up_gate(shard_state_t *s, shl_op_ctx_t *op, shl_status_t *st);

/* shard_become_aware -- install 'id' in memory (creating the catalog cache once).
 * Takes s->mu. */
void shard_become_aware(shard_state_t *s, const shard_identity_t *id);

/* shard_get_identity -- copy the identity; false if not shard-aware. Takes s->mu. */
bool shard_get_identity(shard_state_t *s, shard_identity_t *out);

/* shard_key_of -- the db layer's shard_key hook ('arg' is the shard state). */
bool shard_key_of(void *arg, const char *ns, bson_t *out);

/* shard_name_of -- the db layer's shard_name hook ('arg' is the shard state). */
bool shard_name_of(void *arg, char *out, size_t n);

/* ---- filtering metadata (collection_metadata.c) ---- */

/*
 * shard_meta_get --
 *     The current filtering metadata of 'ns' (one reference; release with
 *     shard_meta_release), loading it through the catalog cache if unknown. Errors:
 *     ShardingStateNotInitialized when not shard-aware; the config server's.
 */
int shard_meta_get(shard_state_t *s, const char *ns, shard_coll_meta_t **out, shl_status_t *st);

/* shard_meta_refresh -- forget the cached routing info of 'ns' and load it again from the
 * config server; *out (may be NULL) receives a reference to the new metadata. */
int shard_meta_refresh(shard_state_t *s, const char *ns, shard_coll_meta_t **out, shl_status_t *st);

/* shard_db_refresh -- forget the cached entry of database 'db' and the filtering metadata
 * of its collections (reloaded lazily), then load the database entry again. Errors:
 * ShardingStateNotInitialized; the config server's (a missing database is not an error). */
int shard_db_refresh(shard_state_t *s, const char *db, shl_status_t *st);

/* shard_meta_peek -- the metadata known now without loading (a reference or NULL). */
shard_coll_meta_t *shard_meta_peek(shard_state_t *s, const char *ns);

void shard_meta_release(shard_coll_meta_t *m);

/* shard_ddl_check_db_version -- a DDL coordinator's databaseVersion check once it holds its
 * locks (shard_ddl_db_check_fn; 'arg' the shard state): StaleDbVersion unless 'dbv' is the
 * database's version (refreshed once) and this shard its primary. May block on a refresh. */
int shard_ddl_check_db_version(void *arg, const char *ns, const bson_t *dbv, shl_status_t *st);
/* shard_check_versions -- the db hook (shl_db_sharding_check_fn). */
int shard_check_versions(void *arg, shl_op_ctx_t *op, const char *ns, shl_db_shard_access_t access,
                         shl_db_orphan_filter_t **filter, shl_status_t *st);

/* shard_check_involved -- the db hook for another namespace a request reads or writes
 * (shl_db_sharding_check_involved_fn). */
int shard_check_involved(void *arg, shl_op_ctx_t *op, const char *ns,
                         const bson_iter_t *shard_version, const bson_iter_t *database_version,
                         shl_status_t *st);

/* shard_meta_destroy_all -- drop the map (shutdown). */
void shard_meta_destroy_all(shard_state_t *s);

/*
 * shard_meta_in_use_for_range --
 *     Whether a metadata object of collection 'uuid' other than 'current' (may be NULL)
 *     is still alive and gives this shard any part of [min, max): a query or cursor may
 *     still read documents there. Takes s->meta_mu; never blocks.
 */
bool shard_meta_in_use_for_range(shard_state_t *s, const shard_coll_meta_t *current,
                                 const shl_uuid_t *uuid, const bson_t *min, const bson_t *max);

/* shard_commands_register -- the shardsvr commands (shardsvr_commands.c). */
void shard_commands_register(shl_command_registry_t *reg);

/*
 * shard_crit_enter --
 *     Enter the critical section of 'ns' at 'level' (SHARD_CRIT_WRITES: new versioned
 *     writes wait; then waits until the writes in flight have finished; SHARD_CRIT_ALL:
 *     reads wait too). Errors: the operation's interruption (the section is left as it was).
 */
int shard_crit_enter(shard_state_t *s, shl_op_ctx_t *op, const char *ns, int level,
                     shl_status_t *st);

/* shard_crit_block -- block reads and writes of 'ns' at once, without waiting for writes in
 * flight (start-up: there are none). Leave with shard_crit_exit. */
void shard_crit_block(shard_state_t *s, const char *ns);

/* shard_crit_exit -- leave the critical section of 'ns'; the waiting operations go on
 * (checking their version against the metadata refreshed meanwhile). */
void shard_crit_exit(shard_state_t *s, const char *ns);

/*
 * shard_db_crit_enter --
 *     Enter database 'db''s critical section at 'level' (or raise it): requests carrying a
 *     databaseVersion for a namespace of 'db' wait -- writes and DDL from SHARD_CRIT_WRITES,
 *     reads too at SHARD_CRIT_ALL -- and then check their database version again. Waits
 *     until the versioned writes in flight on the database's namespaces have finished.
 *     Errors: the operation's interruption (the level is restored).
 */
int shard_db_crit_enter(shard_state_t *s, shl_op_ctx_t *op, const char *db, int level,
                        shl_status_t *st);

/* shard_db_crit_exit -- leave 'db''s critical section; the waiting requests go on. */
void shard_db_crit_exit(shard_state_t *s, const char *db);

/* ---- movePrimary (move_primary.c) ---- */

/* shard_move_primary_register -- _shardsvrMovePrimary. */
void shard_move_primary_register(shl_command_registry_t *reg);

/* ---- migrations (migration_source.c, migration_destination.c) ---- */

/* shard_migration_commands_register -- _shardsvrMoveRange, _migrateClone, _transferMods,
 * _recvChunkStart/Status/Commit/Abort. */
void shard_migration_commands_register(shl_command_registry_t *reg);

/* shard_migration_observe -- the op observer (sharding_hooks.h on_write). */
void shard_migration_observe(void *arg, const char *ns, const bson_t *pre, const bson_t *post);

/* shard_migration_observing -- whether a donor records writes now (hooks' observing). */
bool shard_migration_observing(void *arg, const char *ns);

/* shard_migration_recover_async -- once shard-aware, and after a commit sequence failed:
 * resume a "MigrationCoordinator" on the coordinator framework (s->coords) for every
 * document of config.migrationCoordinators not being finished yet (asks the config server
 * for a missing decision, then the commit or abort sequence). Returns once they started. */
void shard_migration_recover_async(shard_state_t *s);

/* shard_net_get -- the shard's connection pool and shard registry, created on first use
 * (borrowed until shutdown). Errors: ShardingStateNotInitialized before _addShard. */
int shard_net_get(shard_state_t *s, shl_conn_pool_t **pool, shl_shard_registry_t **registry,
                  shl_status_t *st);

/* shard_drop_participant_register -- the drop coordinators' participant commands
 * (shardsvr_drop_participant.c). */
void shard_drop_participant_register(shl_command_registry_t *reg);

/* shard_txn_coord_init -- the coordinator service and its transport (before commands run);
 * shard_txn_coord_recover -- once shard-aware: resume config.transaction_coordinators;
 * shard_txn_coord_shutdown -- stop the coordinators (their documents stay). */
void shard_txn_coord_init(shard_state_t *s);
void shard_txn_coord_recover(shard_state_t *s);
/* shard_ddl_coords_recover -- once shard-aware: resume the DDL coordinators' documents
 * (config.system.sharding_ddl_coordinators; ddl_coordinators.c). */
void shard_ddl_coords_recover(shard_state_t *s);
/* shard_ddl_check_primary -- a DDL request to the primary shard: sharding initialised, user
 * write blocking and the request's databaseVersion (ns "db.coll" or the bare db). Errors:
 * ShardingStateNotInitialized, UserWritesBlocked, StaleDbVersion. */
int shard_ddl_check_primary(shard_state_t *s, shl_op_ctx_t *op, const char *ns, shl_status_t *st);
/* shard_ddl_drain -- the db hook shl_db_ddl_drain_fn ('arg' the shard state): block (or
 * unblock) new DDL coordinators and movePrimary, and wait for the running ones to end. */
int shard_ddl_drain(void *arg, shl_op_ctx_t *op, bool block, shl_status_t *st);
void shard_txn_coord_shutdown(shard_state_t *s);

/* shard_recipient_abort_all -- shutdown: stop an incoming migration's thread. */
void shard_recipient_shutdown(shard_state_t *s);
/* shard_migration_active_on -- whether a migration of 'ns' runs on this shard now (as donor,
 * or as a recipient whose thread has not ended). Takes mig_mu. */
bool shard_migration_active_on(shard_state_t *s, const char *ns);
/* shard_migration_interrupt_donor -- a step-down or shutdown: kill the operation running
 * this shard's outgoing migration (its coordinator's), if any: it ends at its next
 * interruption check, before the commit as an abort; the new primary's recovery, or the
 * next start's, decides the migration from its document. Takes mig_mu. */
void shard_migration_interrupt_donor(shard_state_t *s);
/* shard_wait_migrations -- wait until no migration of 'ns' runs on this shard (a DDL
 * coordinator stopped new ones first). Errors: the operation's interruption; LockBusy (46,
 * retryable by the coordinator) after 30 s. */
int shard_wait_migrations(shard_state_t *s, shl_op_ctx_t *op, const char *ns, shl_status_t *st);

/*
 * shard_crit_sections_reload --
 *     Start-up: block every namespace of config.collection_critical_sections (the critical
 *     sections a rename participant persisted and has not released). Errors: storage.
 */
int shard_crit_sections_reload(shard_state_t *s, shl_status_t *st);

/*
 * shard_critical_section_persist --
 *     Persist (block: upsert {_id: <ns>, reason, blockReads: true}) or remove (!block) the
 *     critical-section documents of the 'n' namespaces 'names' in
 *     config.collection_critical_sections, journaled, in one local write. 'reason' is
 *     borrowed (unused when !block). Idempotent. Does not enter or leave the in-memory
 *     section (shard_crit_*). Errors: the local write's.
 */
int shard_critical_section_persist(shard_state_t *s, const char *const *names, size_t n,
                                   const bson_t *reason, bool block, shl_status_t *st);

/* shard_rename_participant_register -- _shardsvrRenameCollectionParticipant and
 * _shardsvrRenameCollectionUnblockParticipant (shardsvr_rename_participant.c). */
void shard_rename_participant_register(shl_command_registry_t *reg);

/* shard_create_participant_register -- _shardsvrCreateCollectionParticipant. */
void shard_create_participant_register(shl_command_registry_t *reg);

/* ---- range deletion (range_deleter.c) ---- */

/*
 * shard_key_index_serves -- does index 'idx' serve shard key pattern 'kp' (same leading
 * fields, hashed alike, ascending, holding every document: not sparse, partial or collated)?
 * shard_key_bound_keystring -- the KeyString of a range bound over the shard key's fields
 * (appended to 'ks'): an index walk from min's up to max's covers exactly [min, max).
 * Used by the range deleter and the migration donor's clone.
 */
struct shl_index;
struct shl_keystring;
bool shard_key_index_serves(const struct shl_index *idx, const bson_t *kp);
void shard_key_bound_keystring(const bson_t *bound, struct shl_keystring *ks);

/* shard_range_deleter_init / _start / _stop -- set up the state (in shl_shard_init), start
 * the thread (after the identity is loaded), stop and join it (shutdown; blocks until the
 * current batch ends). */
void shard_range_deleter_init(shard_state_t *s);
void shard_range_deleter_start(shard_state_t *s);
void shard_range_deleter_stop(shard_state_t *s);

/*
 * shard_orphan_count -- the orphan documents of the collection with 'uuid' on this shard:
 * the sum of numOrphanDocs over its config.rangeDeletions tasks (the db layer's
 * orphan_count hook, for collStats). 0 when there are none or the read fails.
 */
int64_t shard_orphan_count(void *arg, const uint8_t uuid[16]);

/* shard_range_deleter_wake -- tell the thread and the waiters that tasks changed. */
void shard_range_deleter_wake(shard_state_t *s);

/* shard_range_deleter_server_status -- append shardingStatistics' range deleter fields. */
void shard_range_deleter_server_status(shard_state_t *s, bson_t *section);

/* shard_range_deleter_commands_register -- cleanupOrphaned and the test-only
 * _shardsvrTestRangeDeletion. */
void shard_range_deleter_commands_register(shl_command_registry_t *reg);

#endif
