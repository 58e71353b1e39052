/*
 * cluster_routing.h -- the router's core, shared by every cluster_* command: the router's
 * state, the routing of a namespace (database entry + routing table), targeting (which
 * shards a filter or a document reaches), attaching the versions a request was routed with,
 * sending to shards, and the stale-version retry loop (seeds/000 "Routing", "When the
 * routing table cache will refresh"; docs/design/sharding-protocol.md).
 */
#ifndef SHL_ROUTER_CLUSTER_ROUTING_H
#define SHL_ROUTER_CLUSTER_ROUTING_H

#include <bson/bson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/namespace.h"
#include "base/status.h"
#include "bson/collation.h"
#include "net/client.h"
#include "net/command.h"
#include "sharding/catalog_cache.h"
#include "sharding/remote.h"
#include "sharding/routing_table.h"
#include "sharding/shard_registry.h"
#include "sharding/keys_client.h"
#include "sharding/vector_clock.h"

/* MongoDB's kMaxNumStaleVersionRetries: a request is tried at most this many times. */
#define SHL_ROUTER_MAX_STALE_RETRIES 10

/* MongoDB's kMaxNumFailedHostRetryAttempts (async_requests_sender.cpp): a request the router
 * may repeat (a retryable write's) is sent at most this many more times after a retriable
 * failure. */
#define SHL_ROUTER_MAX_FAILED_HOST_RETRIES 3

/* Bound on one command sent to the config server. */
#define SHL_CONFIG_CMD_TIMEOUT_MS 60000

struct shl_router_cursor_manager;
struct shl_router_rwc;
struct shl_router_request;

/*
 * The outgoing-network seam for unit tests: when set, shl_router_send hands its requests to
 * it instead of resolving shards and sending (results[i] and hosts[i] for reqs[i], as
 * shl_router_send_ex fills them; results are initialised by the caller).
 */
typedef void (*shl_router_send_hook_fn)(void *arg, const char *db,
                                        const struct shl_router_request *reqs, size_t n,
                                        shl_fanout_result_t *results,
                                        char (*hosts)[SHL_CLIENT_HOST_MAX]);

/* The router's components (svc->role_state); created at start, read-only afterwards. */
typedef struct shl_router {
    shl_conn_pool_t *pool;
    shl_shard_registry_t *registry;
    shl_catalog_cache_t *cache;
    struct shl_router_cursor_manager *cursors; /* router cursors (cluster_cursor_manager.h) */
    char configdb[512];
    shl_vector_clock_t clock;          /* highest times gossiped by any node (lock-free) */
    struct shl_router_uptime *uptime;  /* config.mongos reporter */
    struct shl_router_rwc *rwc;        /* cluster-wide default read/write concerns (cache) */
    shl_router_send_hook_fn send_hook; /* tests only (see the type); NULL in a router */
    void *send_hook_arg;
    /* config.system.sessions, where the session cache persists (cluster_sessions.c) */
    struct shl_sessions_sharded *sessions;
    shl_keys_source_t keys; /* where the $clusterTime keys come from (the config server) */
    struct router_txn_catalog *txns; /* sessions' transactions (txn_router.h) */
    /* The outgoing-command interface over pool and registry (sharding/remote.h), for the
     * router's own calls to the config server (remote_real: its transport's state). */
    shl_remote_real_t remote_real;
    shl_remote_t remote;
} shl_router_t;

/* shl_router_get -- the router of the operation's process. */
shl_router_t *shl_router_get(const shl_op_ctx_t *op);

/*
 * The routing of one namespace as of one lookup: the database entry and the routing table
 * (NULL when the collection is not sharded). Caller's storage; cleanup releases the table.
 */
typedef struct shl_router_routing {
    char ns[SHL_NS_MAX + 1];
    shl_cached_database_t db;
    shl_routing_table_t *rt;
    /* A snapshot read's atClusterTime (seconds << 32 | increment; 0: now): targeting uses
     * the owners of the chunks at that time, from chunk history (seeds/000 "The historical
     * routing table"). shl_router_dispatch sets it from the request's readConcern. */
    uint64_t at;
} shl_router_routing_t;

/*
 * shl_router_routing_init --
 *     Look 'ns' up in the catalog cache. With 'create_db' a database the config server does
 *     not know yet is created first (_configsvrCreateDatabase), as MongoDB does before an
 *     implicitly creating write. Blocks on refreshes. Errors: NamespaceNotFound (database
 *     unknown and !create_db), InvalidNamespace, the config server's errors.
 *     'out' is initialised even on error; always clean it up.
 */
int shl_router_routing_init(shl_router_t *r, const char *ns, bool create_db,
                            shl_router_routing_t *out, shl_status_t *st);
void shl_router_routing_cleanup(shl_router_routing_t *rr);

/* shl_router_create_database -- _configsvrCreateDatabase db (idempotent), then forget the
 * cached entry. Errors: the config server's. */
int shl_router_create_database(shl_router_t *r, const char *db, shl_status_t *st);

/*
 * A set of shard names (borrowed from the routing or from the registry list held by the
 * set); at most one entry per shard, in name order.
 */
typedef struct shl_router_shards {
    const char **names;
    size_t n;
    char **owned; /* registry names the set owns (bson_strfreev), or NULL */
    /* Targeting at a past time (rr->at) that chunk history does not reach: StaleChunkHistory
     * (0: none); the dispatch fails with it. */
    int code;
    shl_status_t status;
} shl_router_shards_t;

void shl_router_shards_cleanup(shl_router_shards_t *s);

/*
 * shl_router_target_filter --
 *     The shards a query with 'filter' must reach: the database's primary shard for an
 *     unsharded collection; for a sharded one the owner of the exact shard key if the filter
 *     pins it (equality, $in of single values under the key, $or branches each pinning
 *     one), the owners of the key range for a range on the key's first field (range keys
 *     only), else every shard owning chunks. 'filter' may be NULL (= all). Borrows names
 *     from 'rr'.
 */
void shl_router_target_filter(const shl_router_routing_t *rr, const bson_t *filter,
                              shl_router_shards_t *out);

/*
 * shl_router_snapshot_time --
 *     The atClusterTime of the request's readConcern when its level is "snapshot" (the router
 *     put one there when the client gave none: router_snapshot_rewrite), else 0.
 */
uint64_t shl_router_snapshot_time(const shl_op_ctx_t *op);

/*
 * shl_router_target_doc --
 *     The shard a document belongs to (inserts, upserts): the primary for an unsharded
 *     collection, else the owner of its shard key. *shard is borrowed from 'rr'.
 *     Errors: ShardKeyNotFound for array values on the key path.
 */
int shl_router_target_doc(const shl_router_routing_t *rr, const bson_t *doc, const char **shard,
                          shl_status_t *st);

/*
 * shl_router_append_versions --
 *     Append to 'cmd' what a request routed with 'rr' to 'shard' carries: for a sharded
 *     collection `shardVersion` (the shard's version in the table); for an unsharded one
 *     `shardVersion: UNSHARDED` and the database's `databaseVersion`; nothing for the admin
 *     and config databases (the config server's own).
 */
void shl_router_append_versions(const shl_router_routing_t *rr, const char *shard, bson_t *cmd);

/*
 * shl_router_append_generic --
 *     Copy the generic arguments a shard should see from the user's command (writeConcern,
 *     readConcern, maxTimeMS, comment, lsid, txnNumber, ...) into 'cmd'.
 */
void shl_router_append_generic(const bson_t *user_cmd, bson_t *cmd);

/* shl_router_generic_passes -- whether shl_router_append_generic copies field 'field'. */
bool shl_router_generic_passes(const char *field);

/*
 * shl_router_deadline_results --
 *     Results that timed out (NetworkTimeout) because the operation's maxTimeMS ran out
 *     -- the network timeout of a remote request is the time the operation has left --
 *     become MaxTimeMSExpired, as mongos answers. Others are left alone.
 */
void shl_router_deadline_results(shl_op_ctx_t *op, shl_fanout_result_t *results, size_t n);

/* One request for one shard (what shl_router_send sends). */
typedef struct shl_router_request {
    const char *shard; /* borrowed */
    bson_t cmd;        /* owned; the complete command, versions included (no $db) */
} shl_router_request_t;

/*
 * shl_router_send --
 *     Send n requests (to database 'db') at once and collect the replies (results[i] for
 *     reqs[i]; always initialised, clean up with shl_fanout_results_cleanup). Shard hosts come
 *     from the registry ("config" is the config server, the primary of admin and config);
 *     an unknown shard gives ShardNotFound in its result. The call is
 *     bounded by the operation's deadline: a shard cut off by it gives MaxTimeMSExpired
 *     (shl_router_deadline_results). Blocks.
 */
void shl_router_send(shl_router_t *r, shl_op_ctx_t *op, const char *db,
                     const shl_router_request_t *reqs, size_t n, shl_fanout_result_t *results);

/*
 * shl_router_send_ex --
 *     shl_router_send, also telling which host each request went to: hosts[i] is the
 *     "host:port" reqs[i] was sent to, "" when its shard could not be resolved ('hosts' may
 *     be NULL).
 */
void shl_router_send_ex(shl_router_t *r, shl_op_ctx_t *op, const char *db,
                        const shl_router_request_t *reqs, size_t n, shl_fanout_result_t *results,
                        char (*hosts)[SHL_CLIENT_HOST_MAX]);

/*
 * shl_router_result_retriable --
 *     Whether a shard's answer is one MongoDB's router repeats a request for when it may
 *     (RetryPolicy::kIdempotent): a network error, an error reply or a writeConcernError whose
 *     code is in the RetriableError category (not-primary, shutdown, network, ...). Write
 *     errors inside an ok reply never are; neither is a request cut off by the operation's
 *     own interruption.
 */
bool shl_router_result_retriable(const shl_fanout_result_t *res);

/*
 * shl_router_send_retrying --
 *     shl_router_send_ex; with 'idempotent' (a retryable write: the shards deduplicate its
 *     statements by lsid, txnNumber and stmtId) every request whose result is retriable
 *     (shl_router_result_retriable) is sent again, unchanged, to its shard's current host, at
 *     most SHL_ROUTER_MAX_FAILED_HOST_RETRIES more times, as MongoDB's AsyncRequestsSender
 *     does; the last result is kept. Stops retrying when the operation is interrupted (killOp,
 *     deadline, shutdown). Blocks.
 */
void shl_router_send_retrying(shl_router_t *r, shl_op_ctx_t *op, const char *db,
                              const shl_router_request_t *reqs, size_t n, bool idempotent,
                              shl_fanout_result_t *results, char (*hosts)[SHL_CLIENT_HOST_MAX]);

/*
 * shl_router_result_move --
 *     Move one fan-out result from 'src' to 'dst' (uninitialised or cleaned up). A reply
 *     bson_t must never be copied by assignment: a heap-allocated one points into its own
 *     struct. 'src' must not be cleaned up afterwards.
 */
void shl_router_result_move(shl_fanout_result_t *dst, shl_fanout_result_t *src);

/* shl_router_requests_cleanup -- destroy the commands of n requests. */
void shl_router_requests_cleanup(shl_router_request_t *reqs, size_t n);

/*
 * shl_router_is_stale --
 *     Whether 'st' is a stale-routing error the router retries after a refresh (StaleConfig,
 *     StaleDbVersion, StaleEpoch, ShardNotFound). If so, tell the cache what went stale
 *     so the next routing lookup refreshes: the collection (StaleConfig's `ns`) or the
 *     database (StaleDbVersion's `db`) the error names -- which may be another namespace
 *     than the request's own -- else the collection of 'ns' or its database.
 */
bool shl_router_is_stale(shl_router_t *r, const char *ns, const shl_status_t *st);

/*
 * shl_router_collation_nonsimple -- whether 'holder' (a command or a write statement) has a
 * "collation" other than the simple one ({} or {locale: "simple"}).
 *
 * shl_router_targeting_filter --
 *     The part of 'filter' (may be NULL: {}) targeting may use under 'holder''s collation
 *     (or, naming none, the collection's default in 'rr'):
 *     all of it under the simple collation; else without the top-level predicates whose
 *     values hold strings (equal under the collation to values in other chunks). 'out' is
 *     initialised here; the caller destroys it.
 */
bool shl_router_collation_nonsimple(const bson_t *holder);

/*
 * The write phase of a write without shard key under a non-simple collation marks its
 * command with this field (never sent to a shard): its filter is {$and: [<the user's
 * filter>, <the document's _id and exact shard key values>]}, and it targets by the second
 * part, which the collation cannot widen beyond the one document the query phase chose.
 * shl_router_pinned_filter -- that second part (a view), or false.
 */
#define SHL_ROUTER_PINNED_FIELD "$_shalePinnedFilter"
bool shl_router_pinned_filter(const bson_t *filter, bson_t *pin);

/* shl_router_cmd_collator -- the collator of 'cmd''s "collation" (*out: a new reference, NULL
 * for none or simple), for merging shards' results in its order. Errors: shl_collator_new's. */
int shl_router_cmd_collator(const bson_t *cmd, shl_collator_t **out, shl_status_t *st);

/* shl_router_collation_strips -- whether string predicates cannot target: 'holder''s
 * collation is not simple, or it names none and the collection's default (the routing
 * table's; 'rr' may be NULL) is not simple. */
bool shl_router_collation_strips(const bson_t *holder, const shl_router_routing_t *rr);
void shl_router_targeting_filter(const bson_t *holder, const shl_router_routing_t *rr,
                                 const bson_t *filter, bson_t *out);

/* shl_router_effective_collator -- the collator 'cmd' on 'ns' runs under on the shards: its
 * own, else the sharded collection's default (*out: a new reference; NULL: simple). Errors:
 * shl_collator_new's. May refresh the routing cache. */
int shl_router_effective_collator(shl_router_t *r, const char *ns, const bson_t *cmd,
                                  shl_collator_t **out, shl_status_t *st);

/*
 * shl_router_scatter --
 *     The usual shape of a routed read: route 'ns' (creating nothing), target 'filter',
 *     build a command per shard with 'build' (which appends the command's own fields; this
 *     function then appends versions), send them all, and if any shard answers a stale error,
 *     refresh and do it all again (at most SHL_ROUTER_MAX_STALE_RETRIES times). On success
 *     *results (n = *nresults, array owned by the caller: shl_router_scatter_results_free)
 *     hold one reply per targeted shard, errors included; 'rr' (if not NULL) receives the
 *     routing that was used (caller cleans it up). Errors: routing errors; the last stale
 *     error when the retries are exhausted.
 */
typedef void (*shl_router_build_fn)(void *arg, const shl_router_routing_t *rr, const char *shard,
                                    bson_t *cmd);

typedef struct shl_router_shard_result {
    char shard[SHL_SHARD_ID_MAX];
    shl_fanout_result_t res; /* code/status/reply */
} shl_router_shard_result_t;

int shl_router_scatter(shl_router_t *r, shl_op_ctx_t *op, const char *ns, const bson_t *filter,
                       shl_router_build_fn build, void *arg, shl_router_routing_t *rr,
                       shl_router_shard_result_t **results, size_t *nresults, shl_status_t *st);
void shl_router_scatter_results_free(shl_router_shard_result_t *results, size_t n);

/*
 * shl_router_send_to_all --
 *     Send a command, without versions, to every shard in the registry on database 'db' (with
 *     'with_config', to the config server first, named "config"), in one fan-out; 'build'
 *     writes each target's command (its 'rr' is NULL). *results: one per target in that order,
 *     errors included (shl_router_scatter_results_free). Errors: the registry's.
 */
int shl_router_send_to_all(shl_router_t *r, shl_op_ctx_t *op, const char *db, bool with_config,
                           shl_router_build_fn build, void *arg,
                           shl_router_shard_result_t **results, size_t *nresults, shl_status_t *st);

/*
 * shl_router_dispatch --
 *     The general form of shl_router_scatter: 'target' (NULL: shl_router_target_filter with
 *     'filter') picks the shards from the routing; 'build' writes each shard's command; the
 *     versions attached are the full ones (shardVersion, or UNSHARDED + databaseVersion) or
 *     only the database version; 'create_db' creates a missing database first. 'prepare'
 *     (may be NULL) runs at the start of every attempt, after the routing lookup and before
 *     targeting: a command whose plan depends on other namespaces' routing (an aggregate's
 *     foreign collections and output target) re-plans there from the cache the previous
 *     attempt's stale error refreshed; its error ends the dispatch. Same retry, results and
 *     errors as shl_router_scatter.
 */
typedef void (*shl_router_target_fn)(void *arg, const shl_router_routing_t *rr,
                                     shl_router_shards_t *out);

typedef enum shl_router_versions {
    SHL_ROUTER_VERSIONS_FULL,   /* shardVersion (+ databaseVersion when unsharded) */
    SHL_ROUTER_VERSIONS_DB_ONLY /* databaseVersion only (database-level DDL) */
} shl_router_versions_t;

typedef int (*shl_router_prepare_fn)(void *arg, const shl_router_routing_t *rr, shl_status_t *st);

typedef struct shl_router_dispatch {
    bool create_db;
    shl_router_prepare_fn prepare; /* may be NULL */
    void *prepare_arg;
    shl_router_target_fn target;
    void *target_arg;
    const bson_t *filter;
    shl_router_build_fn build;
    void *build_arg;
    shl_router_versions_t versions;
} shl_router_dispatch_t;

int shl_router_dispatch(shl_router_t *r, shl_op_ctx_t *op, const char *ns,
                        const shl_router_dispatch_t *d, shl_router_routing_t *rr_out,
                        shl_router_shard_result_t **results, size_t *nresults, shl_status_t *st);

/*
 * shl_router_forward_to_config --
 *     Run 'cmd' on the config server's admin database and copy the reply's fields (except
 *     ok, $clusterTime, operationTime) into 'reply'. Returns the reply's error as a status.
 *     Waits as long as the operation's maxTimeMS allows, without limit when it has none.
 */
int shl_router_forward_to_config(shl_router_t *r, shl_op_ctx_t *op, const bson_t *cmd,
                                 bson_t *reply, shl_status_t *st);

/* shl_router_copy_reply_fields -- copy 'from' into 'to' except ok, errmsg, code, codeName,
 * $clusterTime, operationTime, $configTime, $topologyTime. */
void shl_router_copy_reply_fields(const bson_t *from, bson_t *to);

#endif
