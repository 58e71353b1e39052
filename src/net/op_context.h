/*
 * op_context.h -- one per request: who sent it, the command's generic arguments
 * (session, transaction, read/write concern, versions, deadline) and the kill flag.
 * Every blocking wait checks shl_op_check_interrupt(). DESIGN.md section 3.
 */
#ifndef SHL_NET_OP_CONTEXT_H
#define SHL_NET_OP_CONTEXT_H

#include <bson/bson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "net/lsid.h"
#include "net/service_context.h"

/*
 * SHL_INVOLVED_VERSIONS_FIELD -- an internal argument of the aggregate a router sends to a
 * shard: [{ns: "db.coll", shardVersion, databaseVersion?}, ...], the versions the router
 * routed with for the other namespaces the pipeline reads ($lookup, $unionWith,
 * $graphLookup) or writes ($out, $merge) on that shard -- UNSHARDED, as a shard runs those
 * stages over its local copy only for collections the router believes unsharded. The
 * shard checks each like the request's own shardVersion (StaleConfig / StaleDbVersion
 * naming that namespace), so a router that missed a shardCollection refreshes it and
 * retries (docs/design/sharding-protocol.md "Router -> shard").
 */
#define SHL_INVOLVED_VERSIONS_FIELD "$_involvedNamespaceVersions"

struct shl_conn;

/* An operation key (MongoDB's clientOperationKey) is a UUID: BSON binary subtype 4. */
#define SHL_OP_KEY_LEN 16

typedef struct shl_op_ctx {
    shl_service_ctx_t *svc;
    struct shl_conn *conn; /* NULL for operations started internally */
    const char *cmd_name;  /* borrowed from the request body */
    char db[128];          /* $db */
    const bson_t *body;    /* the whole command; borrowed for the request */

    /* Generic arguments; each 'has_' says whether the field was present. */
    bool has_lsid;
    bson_t lsid;         /* static view into body when has_lsid */
    shl_lsid_t lsid_key; /* the lsid parsed, uid filled in, when has_lsid */
    bool has_txn_number;
    int64_t txn_number;
    bool has_autocommit;
    bool autocommit;
    bool start_transaction;
    bool has_read_concern;
    bson_t read_concern; /* static view */
    bool has_write_concern;
    bson_t write_concern; /* static view */
    bool has_shard_version;
    bson_t shard_version; /* static view (document or legacy array) */
    bool has_database_version;
    bson_t database_version; /* static view */
    bool has_cluster_time;
    bson_t cluster_time;      /* static view of $clusterTime */
    /* $clusterTime's time once it passed shl_cluster_time_gossip_in (signature, advance
     * limit); 0 when absent or not checked (yet). Only this may move a clock. */
    uint64_t cluster_time_checked;
    const char *comment_json; /* NULL when absent; never used for logic */

    /* clientOperationKey: the key the sender gave this operation (_killOperations names it). */
    bool has_op_key;
    uint8_t op_key[SHL_OP_KEY_LEN];
    /* The key this operation gives the requests it sends (shl_op_remote_key), or none. */
    bool has_remote_key;
    uint8_t remote_key[SHL_OP_KEY_LEN];

    /* The session this operation checked out (a data node's retryable write), owned by the
     * role's session catalog; set and cleared by the service's session hooks. */
    void *session;
    /* The multi-document transaction this operation's statement runs in (a data node's
     * db_txn_t), set and cleared by the role's session hooks; NULL outside one. */
    void *txn;
    void *txn_session; /* the session a transaction's statement checked out */

    int64_t deadline_us; /* monotonic; 0 = none (maxTimeMS) */
    atomic_bool killed;  /* set by killOp or shutdown */
    int64_t start_mono_us;

    /* The in-progress list (currentOp / killOp); set by shl_op_register, guarded by
     * svc->ops_mu while registered. */
    int32_t opid;         /* 0 when not registered */
    const char *app_name; /* the connection's appName as of registration, or NULL */
    struct shl_op_ctx *ops_prev, *ops_next;
} shl_op_ctx_t;

/*
 * shl_op_ctx_init --
 *     Fill generic arguments from 'body' (borrowed for the op's lifetime) and the
 *     deadline from maxTimeMS. Errors: BadValue / TypeMismatch for malformed
 *     generic arguments (e.g. negative maxTimeMS).
 */
int shl_op_ctx_init(shl_op_ctx_t *op, shl_service_ctx_t *svc, struct shl_conn *conn,
                    const bson_t *body, const char *db, shl_status_t *st);

/*
 * shl_op_check_interrupt --
 *     0 if the operation may continue; MaxTimeMSExpired past its deadline,
 *     Interrupted if killed, InterruptedAtShutdown during shutdown.
 */
int shl_op_check_interrupt(shl_op_ctx_t *op, shl_status_t *st);

/*
 * shl_op_register / shl_op_unregister --
 *     Add the operation to its process's in-progress list with a new opid (positive, unique
 *     for the process's life until it wraps at 2^31), so that currentOp lists it and killOp
 *     can set its kill flag; remove it before its request (op->body) is freed. Takes
 *     svc->ops_mu briefly.
 */
void shl_op_register(shl_op_ctx_t *op);
void shl_op_unregister(shl_op_ctx_t *op);

/*
 * shl_op_kill --
 *     Set the kill flag of the in-progress operation 'opid' of 'svc' (blocking waits see
 *     it through shl_op_check_interrupt). Returns whether such an operation was running.
 */
bool shl_op_kill(shl_service_ctx_t *svc, int64_t opid);

/*
 * shl_op_kill_by_key --
 *     Set the kill flag of every in-progress operation of 'svc' whose clientOperationKey is
 *     'key' (SHL_OP_KEY_LEN bytes), as _killOperations does. Returns how many there were.
 *     Takes svc->ops_mu.
 */
int shl_op_kill_by_key(shl_service_ctx_t *svc, const uint8_t *key);

/*
 * shl_op_kill_sessions --
 *     Set the kill flag of every in-progress operation of 'svc' that runs in a session
 *     'match' accepts (called under svc->ops_mu: it must not block or call back into the
 *     op list), except 'self' (the killing operation; may be NULL). A killed operation ends
 *     with Interrupted. Returns how many were flagged. Takes svc->ops_mu.
 */
int shl_op_kill_sessions(shl_service_ctx_t *svc, bool (*match)(void *arg, const shl_lsid_t *lsid),
                         void *arg, const shl_op_ctx_t *self);

/*
 * shl_op_sessions --
 *     Call fn(arg, lsid) for the session of every in-progress operation of 'svc' that runs
 *     in one (the logical session cache refreshes them), under svc->ops_mu: 'fn' must not
 *     block or call back into the op list.
 */
void shl_op_sessions(shl_service_ctx_t *svc, void (*fn)(void *arg, const shl_lsid_t *lsid),
                     void *arg);

/*
 * shl_op_remote_key --
 *     The operation key 'op' attaches to the requests it sends to other nodes (as
 *     clientOperationKey), made on first use: unique for the process's life and never the
 *     key 'op' itself received, since a node may be sent several requests for one operation.
 *     Killing the operation can then kill its remote parts with _killOperations. Borrowed
 *     for the op's life; the operation's own thread only.
 */
const uint8_t *shl_op_remote_key(shl_op_ctx_t *op);

/*
 * shl_op_kill_all --
 *     Set the kill flag of every in-progress operation of 'svc' (the shutdown does, once
 *     running operations had their time to finish): blocking waits and hang fail points end
 *     with InterruptedAtShutdown once svc->shutting_down is set. Returns how many were
 *     flagged. Takes svc->ops_mu briefly.
 */
int shl_op_kill_all(shl_service_ctx_t *svc);

/*
 * shl_op_list_append --
 *     Append to the array 'arr' one currentOp document per in-progress operation of 'svc'
 *     (type, host, desc, connectionId, client, appName, active, currentOpTime, opid,
 *     secs_running, microsecs_running, op, ns, command, numYields, locks, waitingForLock,
 *     killPending), numbering them from *n (advanced). Takes svc->ops_mu.
 */
void shl_op_list_append(shl_service_ctx_t *svc, bson_t *arr, uint32_t *n);

/* The options of a $currentOp stage (all false when absent). */
typedef struct shl_current_op_spec {
    bool all_users;
    bool idle_connections;
    bool idle_cursors;
    bool idle_sessions;
    bool local_ops;
    bool truncate_ops;
    bool backtrace;
    bool target_all_nodes;
} shl_current_op_spec_t;

/*
 * shl_current_op_append_match --
 *     Append to the pipeline array 'stages', at index 'key', the $match stage the currentOp
 *     command's filter makes: every field but currentOp's own ($all, $ownOps, $truncateOps)
 *     and the generic arguments, as MongoDB turns the command into $currentOp + $match.
 */
void shl_current_op_append_match(const bson_t *cmd, const char *key, bson_t *stages);

/*
 * shl_current_op_spec_parse --
 *     Parse the value of a $currentOp stage ('stage' is at the "$currentOp" element) as
 *     MongoDB does: first the checks its lite parse makes (TypeMismatch for a non-object, a
 *     non-boolean allUsers or localOps), then the full parse's (FailedToParse for another
 *     non-boolean option, an unknown one, localOps with targetAllNodes, or targetAllNodes
 *     outside a cluster -- 'in_cluster' is false on a data node asked directly).
 */
int shl_current_op_spec_parse(const bson_iter_t *stage, bool in_cluster, shl_current_op_spec_t *out,
                              shl_status_t *st);

/*
 * shl_op_may_use_owned --
 *     Whether 'op' may use a cursor or session owned by the user whose digest is 'owner'
 *     (shl_op_user_digest of the operation that made it): always without access control, for
 *     an operation started internally, and for __system; otherwise only its own user's.
 */
bool shl_op_may_use_owned(const shl_op_ctx_t *op, const uint8_t owner[SHL_LSID_UID_LEN]);

/* shl_op_acts_for_all_users -- whether 'op' may use every user's cursors and sessions:
 * without access control, started internally, or as __system. */
bool shl_op_acts_for_all_users(const shl_op_ctx_t *op);

/* shl_op_user_digest -- the digest of the operation's authenticated user (the empty name's
 * without a connection or a user). */
void shl_op_user_digest(const shl_op_ctx_t *op, uint8_t out[SHL_LSID_UID_LEN]);

/* shl_op_remaining_ms -- milliseconds until the deadline, or -1 if none. */
int64_t shl_op_remaining_ms(const shl_op_ctx_t *op);

/*
 * shl_op_may_bypass_write_blocking --
 *     MongoDB's WriteBlockBypass for 'op': true for an operation started internally (no
 *     connection); the request's mayBypassWriteBlocking when it carries one (a router's
 *     verdict); otherwise the client's privilege, which is "may bypass" while authentication
 *     is off (as in MongoDB) unless the fail point userWriteBlockingTreatClientsAsUnprivileged
 *     is on (tests: the client is taken as a user without bypassWriteBlockingMode).
 *     docs/design/user_write_blocking.md.
 */
bool shl_op_may_bypass_write_blocking(const shl_op_ctx_t *op);

#endif
