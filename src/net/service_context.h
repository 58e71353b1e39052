/*
 * service_context.h -- one per process: the role, the command registry, counters,
 * and the role's components. No other process-wide state exists besides the
 * options table, the fail point registry and the log. DESIGN.md section 3.
 *
 * Lower layers cannot name upper-layer types, so the role's components are
 * forward-declared pointers and role behaviour is reached through hooks that the
 * role installs before the listener starts.
 */
#ifndef SHL_NET_SERVICE_CONTEXT_H
#define SHL_NET_SERVICE_CONTEXT_H

#include <bson/bson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

struct shl_command;
struct shl_command_registry;
struct shl_op_ctx;
struct shl_conn;
struct shl_storage_engine;
struct shl_service_ctx;
struct shl_lsc;
struct shl_cluster_time;

typedef enum shl_role {
    SHL_ROLE_STANDALONE,
    SHL_ROLE_SHARDSVR,
    SHL_ROLE_CONFIGSVR,
    SHL_ROLE_ROUTER,
} shl_role_t;

/* Counters reported by serverStatus; all atomics. */
typedef struct shl_counters {
    atomic_llong conn_current;
    atomic_llong conn_total;
    atomic_llong conn_active;
    atomic_llong bytes_in;
    atomic_llong bytes_out;
    atomic_llong num_requests;
    atomic_llong op_insert;
    atomic_llong op_query;
    atomic_llong op_update;
    atomic_llong op_delete;
    atomic_llong op_getmore;
    atomic_llong op_command;
} shl_counters_t;

/*
 * The process's TopologyVersion (net/topology.h): what hello reports as
 * {processId, counter}, and the awaitable hellos waiting for it to move.
 */
typedef struct shl_topology {
    pthread_mutex_t mu;
    pthread_cond_t changed;         /* broadcast when counter moves */
    bson_oid_t process_id;          /* made at start-up; read-only */
    int64_t counter;                /* guarded by mu */
    atomic_bool quiescing;          /* a router in quiesce mode; written under mu, read without */
    int32_t waiting;                /* awaitable hellos waiting; guarded by mu */
    atomic_llong exhaust_hello;     /* connections streaming hello (exhaust); serverStatus */
    atomic_llong exhaust_is_master; /* the same for isMaster */
} shl_topology_t;

/* Hooks a role installs; any may be NULL. Called without service locks held. */
typedef struct shl_service_hooks {
    /* Role-specific fields of hello/isMaster (setName, hosts, msg: "isdbgrid", ...). */
    void (*append_hello)(struct shl_op_ctx *op, bson_t *reply);
    /*
     * A replica set member's topology fields of hello (isWritablePrimary or, for the legacy
     * name, ismaster; hosts, setName, setVersion, primary, secondary, me, electionId, ...)
     * instead of the set-of-one defaults. Installed by repl/; must not block.
     */
    void (*append_set_hello)(struct shl_op_ctx *op, bson_t *reply, bool legacy_name);
    /*
     * Whether the member's replication state lets 'cmd' run (NotWritablePrimary for a write
     * on a secondary, NotPrimaryNoSecondaryOk for a read without secondaryOk, ...). Called
     * once the generic arguments are read, before the session hooks. Installed by repl/.
     */
    int (*admit)(struct shl_op_ctx *op, const struct shl_command *cmd, shl_status_t *st);
    /*
     * A data node's storage is open and recovered, and nothing of the node runs yet (no
     * thread, no command): repl/ reads its configuration and pins what it must. Set before
     * the node starts (shl_repl_preinit); an error fails the start-up.
     */
    int (*storage_opened)(struct shl_service_ctx *svc, struct shl_storage_engine *eng,
                          shl_status_t *st);
    /*
     * A new request body to run instead of the one received, or NULL to run it as sent (the
     * router adds the cluster-wide default read/write concern to a command that carries
     * none). Called once the op's generic arguments are read and before it is registered;
     * the dispatcher re-reads them from the new body and destroys it after the command.
     */
    bson_t *(*rewrite_request)(struct shl_op_ctx *op, const struct shl_command *cmd);
    /*
     * The session arguments of a request (lsid, txnNumber, autocommit), once its generic
     * arguments are read and it is registered: the role checks them (an error fails the
     * command), records the session in its logical session cache and, on a data node,
     * checks the session out for a retryable write (op->session). session_end runs after
     * the command whenever session_begin succeeded.
     */
    int (*session_begin)(struct shl_op_ctx *op, const struct shl_command *cmd, shl_status_t *st);
    void (*session_end)(struct shl_op_ctx *op);
    /*
     * A statement of a multi-document transaction ended (before session_end; ret and st are
     * the command's result, reply its reply when it succeeded): the role keeps or aborts the
     * transaction and adds the error labels; returns the command's result (a write error
     * that fails a transaction becomes the command's error, as MongoDB's). Set by a role that runs
     * transactions; without it the dispatcher refuses autocommit / startTransaction
     * (IllegalOperation).
     */
    int (*txn_end)(struct shl_op_ctx *op, int ret, shl_status_t *st, const bson_t *reply);
    /*
     * More fields of a running operation's currentOp document 'doc' (a data node's
     * `transaction` sub-document). Called under ops_mu: must not block.
     */
    void (*append_op)(const struct shl_op_ctx *op, bson_t *doc);
    /*
     * A request's gossip, once its $clusterTime passed shl_cluster_time_gossip_in (signature
     * and advance limit): the role advances its clock to 'cluster_time' (0: none) and, for a
     * request from a cluster process (op->conn->internal), from $configTime/$topologyTime
     * in op->body. Runs before the command.
     */
    void (*gossip_in)(struct shl_op_ctx *op, uint64_t cluster_time);
    /* Fields every reply carries ($clusterTime, operationTime, ...). */
    void (*decorate_reply)(struct shl_op_ctx *op, bson_t *reply);
    /* Extra serverStatus sections (storage engine, sharding, ...). */
    void (*append_server_status)(struct shl_service_ctx *svc, bson_t *reply);
    /* Called once after the listener stopped and operations finished or timed out. */
    void (*shutdown)(struct shl_service_ctx *svc);
    /* currentOp: append the role's own entries (running coordinators, ...) to the array
     * 'inprog' from index *n (advanced). Called without ops_mu held. */
    void (*append_current_op)(struct shl_service_ctx *svc, bson_t *inprog, uint32_t *n);
    /*
     * Access control (auth/, installed by shl_auth_init): 'authorize' checks that the
     * operation's client may run 'cmd' (Unauthorized otherwise; in-process operations and
     * SHL_CMD_NO_AUTH commands are its to allow too); 'hello_auth' adds
     * speculativeAuthenticate / saslSupportedMechs to a hello's reply; 'conn_end' frees a
     * closing connection's conn->auth.
     */
    int (*authorize)(struct shl_op_ctx *op, const struct shl_command *cmd, shl_status_t *st);
    /* After a command 'authorize' let through succeeded: trim what its reply shows to what
     * the client may see (listDatabases's authorizedDatabases). */
    void (*authorize_reply)(struct shl_op_ctx *op, const struct shl_command *cmd, bson_t *reply);
    void (*hello_auth)(struct shl_op_ctx *op, const bson_t *cmd, bson_t *reply);
    void (*conn_end)(struct shl_conn *conn);
} shl_service_hooks_t;

typedef struct shl_service_ctx {
    shl_role_t role;                             /* set before start, then read-only */
    /* set before start, then read-only apart from its metrics counters (atomics) */
    struct shl_command_registry *commands;
    shl_service_hooks_t hooks;                   /* set before start, then read-only */
    char me[300];                                /* "host:port" of this process */
    char set_name[128];                          /* replSet name, "" for none */
    int64_t start_wall_ms;                       /* read-only */
    int64_t start_mono_us;                       /* read-only */
    bson_t *cmdline_argv;                        /* getCmdLineOpts argv; read-only */
    bson_t *cmdline_parsed;                      /* getCmdLineOpts parsed; read-only */
    shl_counters_t counters;
    atomic_bool shutting_down; /* set once by shutdown */
    atomic_int shutdown_exit_code;
    shl_topology_t topology; /* its own lock (see the type) */

    /* Operations in progress (currentOp / killOp; net/op_context.h). */
    pthread_mutex_t ops_mu;
    struct shl_op_ctx *ops; /* guarded by ops_mu */
    int32_t next_opid;      /* guarded by ops_mu */

    struct shl_storage_engine *storage; /* data nodes; NULL on the router */
    struct shl_lsc *lsc; /* the logical session cache (session/); set by the role at start-up */
    /* $clusterTime signing keys and validation (net/cluster_time.h); NULL until a cluster
     * role creates it at start-up, then read-only. */
    struct shl_cluster_time *cluster_time;
    void *role_state;    /* owned by the role's module */
    void *repl_state;    /* repl/'s coordinator (repl/repl.h); set at start-up, then read-only */
} shl_service_ctx_t;

/* shl_service_ctx_init -- zero the context and record start times. */
void shl_service_ctx_init(shl_service_ctx_t *svc, shl_role_t role);

/* shl_service_ctx_cleanup -- free what shl_service_ctx_init and start-up allocated. */
void shl_service_ctx_cleanup(shl_service_ctx_t *svc);

/* shl_service_is_data_node -- true for the roles that store data. */
bool shl_service_is_data_node(const shl_service_ctx_t *svc);

#endif
