/*
 * router.c -- the router role's start-up: its components (pool, shard registry, catalog
 * cache), its hooks (hello says "isdbgrid"; replies carry the highest cluster time the
 * router has seen, since routers never tick the clock -- DESIGN.md section 7) and its
 * command registry.
 */
#include "router/router.h"

#include <pthread.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/str.h"
#include "bson/bson_util.h"
#include "net/common_commands.h"
#include "net/cluster_time.h"
#include "net/fiber.h"
#include "net/reply_times.h"
#include "net/server.h"
#include "router/cluster_cursor_manager.h"
#include "router/cluster_routing.h"
#include "router/router_commands.h"
#include "router/router_private.h"
#include "router/router_uptime.h"
#include "router/txn_router.h"
#include "session/logical_session_cache.h"
#include "session/session_args.h"
#include "session/session_commands.h"
#include "sharding/sharding_types.h"

/*
 * The newest operationTime the shards and the config server replied with to the operation
 * this thread serves (mongos's OperationTimeTracker): a request runs on its connection's
 * thread, and so do the replies to the requests it sends (client.h), so the tracker is
 * thread-local; rewrite_request clears it when an operation starts, decorate_reply takes it.
 */
static __thread uint64_t op_time_seen;

/* The tracker belongs to the operation: it follows a parked request (net/fiber.h). */
static void *
op_time_seen_addr(void)
{
    return &op_time_seen;
}

/* Gossip: advance the vector clock from every reply of a cluster node; a newer
 * TopologyTime means the set of shards changed, so the shard registry reloads. */
static void
observe_reply(void *arg, const char *host, const bson_t *reply)
{
    shl_router_t *r = arg;
    bson_iter_t it;
    (void)host;

    if (bson_iter_init_find(&it, reply, "operationTime") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        uint64_t t = shl_bson_iter_timestamp_u64(&it);
        if (t > op_time_seen) {
            op_time_seen = t;
        }
    }
    if (shl_vector_clock_observe(&r->clock, reply) & SHL_VC_ADVANCED(SHL_VC_TOPOLOGY_TIME)) {
        shl_shard_registry_invalidate(r->registry);
    }
}

/* Gossip out: every request to a cluster process carries the router's $clusterTime,
 * $configTime and $topologyTime (docs/design/vector_clock.md). */
static void
decorate_request(void *arg, const char *host, const char *cmd_name, bson_t *cmd)
{
    shl_router_t *r = arg;
    (void)host;
    (void)cmd_name;

    shl_vector_clock_append_internal_gossip(&r->clock, 0, cmd);
}

/* Gossip in from a request (already checked by shl_cluster_time_gossip_in): ClusterTime
 * from anyone, ConfigTime and TopologyTime only from cluster processes. */
static void
gossip_in(shl_op_ctx_t *op, uint64_t cluster_time)
{
    shl_router_t *r = shl_router_get(op);

    if (op->conn != NULL && op->conn->internal) {
        if (shl_vector_clock_observe(&r->clock, op->body) &
            SHL_VC_ADVANCED(SHL_VC_TOPOLOGY_TIME)) {
            shl_shard_registry_invalidate(r->registry);
        }
    } else if (cluster_time != 0) {
        shl_vector_clock_advance(&r->clock, SHL_VC_CLUSTER_TIME, cluster_time);
    }
}

/*
 * A router keeps no time of its own, so after a restart it must not answer with a time older
 * than one it gave out before: it asks every shard (and the config server) once at start-up,
 * whose durable clocks are at least as new as anything it ever saw from them.
 */
static void
sync_clock(shl_router_t *r)
{
    shl_status_t st = SHL_STATUS_INIT;
    char **names = NULL;
    char hosts[64][SHL_CLIENT_HOST_MAX];
    shl_fanout_req_t reqs[65];
    shl_fanout_result_t res[65];
    bson_t *ping = BCON_NEW("ping", BCON_INT32(1));
    size_t n = 0;

    reqs[n].host = shl_shard_registry_config_host(r->registry);
    reqs[n].db = "admin";
    reqs[n].cmd = ping;
    reqs[n].op_key = NULL;
    n++;
    if (shl_shard_registry_list(r->registry, &names, &st) == 0) {
        for (size_t i = 0; names[i] != NULL && n < 65; i++) {
            if (shl_shard_registry_host_for(r->registry, names[i], hosts[n - 1],
                                            sizeof(hosts[0]), &st) == 0) {
                reqs[n].host = hosts[n - 1];
                reqs[n].db = "admin";
                reqs[n].cmd = ping;
                reqs[n].op_key = NULL;
                n++;
            }
        }
    }
    shl_client_fanout(r->pool, reqs, n, 5000, res);
    shl_fanout_results_cleanup(res, n);
    bson_strfreev(names);
    bson_destroy(ping);
}

static void
append_hello(shl_op_ctx_t *op, bson_t *reply)
{
    (void)op;
    BSON_APPEND_UTF8(reply, "msg", "isdbgrid");
}

/*
 * operationTime as mongos gives it: the newest one the nodes this operation reached replied
 * with; if it reached none, the cluster time (later than the operation, so still safe for a
 * causally consistent client). Never above the $clusterTime it goes with: observing a reply
 * advanced the clock to that reply's $clusterTime, which is at least its operationTime.
 */
static void
decorate_reply(shl_op_ctx_t *op, bson_t *reply)
{
    shl_router_t *r = shl_router_get(op);
    uint64_t ts = shl_vector_clock_get(&r->clock, SHL_VC_CLUSTER_TIME);
    uint64_t op_time = 0;

    /* A command the router runs in-process for another (op->conn NULL: $out's writes, ...)
     * leaves the tracker to the operation it serves. */
    if (op->conn != NULL) {
        op_time = op_time_seen;
        op_time_seen = 0;
        router_txn_append_token(reply); /* a transaction statement's recoveryToken */
    }
    if (ts != 0) {
        shl_cluster_time_append_reply(op, reply, op_time != 0 && op_time <= ts ? op_time : ts,
                                      ts);
    }
    if (op->conn != NULL && op->conn->internal) {
        shl_vector_clock_append_config_gossip(&r->clock, reply);
    }
}

static bson_t *
rewrite_request(shl_op_ctx_t *op, const shl_command_t *cmd)
{
    shl_router_t *r = shl_router_get(op);
    bson_t *body;

    if (op->conn != NULL) {
        op_time_seen = 0; /* a client's new operation: see decorate_reply */
    }
    body = router_rwc_apply(r, op, cmd);
    /* A transaction chooses its atClusterTime itself, once (txn_router.h). */
    bson_t *snap = op->has_autocommit
                       ? NULL
                       : router_snapshot_rewrite(r, cmd, body != NULL ? body : op->body);

    if (snap != NULL) {
        if (body != NULL) {
            bson_destroy(body);
        }
        body = snap;
    }
    return body;
}

/* The session arguments every request is checked for (a router is never a standalone). */
static int
session_begin(shl_op_ctx_t *op, const shl_command_t *cmd, shl_status_t *st)
{
    int ret = 0;

    SHL_ERR(shl_lsc_vivify_op(op->svc->lsc, op, cmd, st));
    SHL_ERR(shl_session_check_args(op, cmd, true, st));
    if (op->has_autocommit || op->start_transaction) {
        shl_router_t *r = shl_router_get(op);
        SHL_ERR(router_txn_begin(r->txns, op, cmd,
                                 shl_vector_clock_get(&r->clock, SHL_VC_CLUSTER_TIME), st));
    }
done:
    return ret;
}

/* A statement's session state goes back to the catalog (txn_router.h). */
static void
session_end(shl_op_ctx_t *op)
{
    router_txn_release(shl_router_get(op)->txns, op);
}

static int
txn_end(shl_op_ctx_t *op, int ret, shl_status_t *st, const bson_t *reply)
{
    return router_txn_end(shl_router_get(op), op, ret, st, reply);
}

static void
shutdown_router(shl_service_ctx_t *svc)
{
    shl_router_t *r = svc->role_state;

    if (r == NULL) {
        return;
    }
    shl_router_uptime_stop(r->uptime);
    router_sessions_shutdown(r, svc);
    shl_router_cursor_manager_destroy(r->cursors);
    router_rwc_destroy(r->rwc);
    router_txn_catalog_destroy(r->txns);
    shl_catalog_cache_destroy(r->cache);
    shl_shard_registry_destroy(r->registry);
    shl_conn_pool_destroy(r->pool);
    bson_free(r);
    svc->role_state = NULL;
}

/*
 * Start-up phase 2 (seeds/000 "Mongos initialization"): the sharding state comes from the
 * config server, so a router does not listen before it has loaded the shard registry from
 * it; while the config server cannot be reached it retries, as mongos does. A signal ends
 * the wait (InterruptedAtShutdown).
 */
static int
wait_for_config_server(shl_router_t *r, shl_status_t *st)
{
    int ret = 0;
    bool logged = false;

    while (shl_shard_registry_reload(r->registry, st) != 0) {
        if (!logged) {
            SHL_LOG_WARNING(SHARDING, 22857,
                            "Error initializing sharding state, retrying every second", "error",
                            BCON_UTF8(st->reason));
            logged = true;
        }
        for (int i = 0; i < 10 && !shl_server_shutdown_requested(); i++) {
            shl_sleep_ms(100);
        }
        if (shl_server_shutdown_requested()) {
            SHL_FAIL(st, SHL_CODE_INTERRUPTED_AT_SHUTDOWN,
                     "shutdown requested while waiting for the config server");
        }
    }
    shl_status_clear(st);
done:
    return ret;
}

int
shl_router_init(shl_service_ctx_t *svc, shl_command_registry_t *reg, const char *configdb,
                shl_status_t *st)
{
    shl_router_t *r = NULL;
    shl_conn_pool_options_t popts = {0};
    char first[SHL_CLIENT_HOST_MAX];
    int ret = 0;

    if (configdb == NULL || configdb[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "a router needs --configdb <setName>/<host:port>");
    }
    SHL_ERR(shl_conn_string_first_host(configdb, first, sizeof(first), st));
    r = bson_malloc0(sizeof(*r));
    shl_vector_clock_init(&r->clock);
    snprintf(r->configdb, sizeof(r->configdb), "%s", configdb);
    /* On the shared executor a routed call parks its request instead of its worker. */
    shl_fiber_local_register(op_time_seen_addr, sizeof(op_time_seen));
    shl_fiber_want();
    popts.hooks.observe = observe_reply;
    popts.hooks.decorate = decorate_request;
    popts.hooks.arg = r;
    r->pool = shl_conn_pool_new(&popts);
    r->registry = shl_shard_registry_new(r->pool, configdb);
    r->remote_real = (shl_remote_real_t){.svc = NULL, .pool = r->pool, .registry = r->registry};
    shl_remote_init_real(&r->remote, &r->remote_real);
    r->cache = shl_catalog_cache_new(r->registry);
    r->cursors = shl_router_cursor_manager_new();
    r->rwc = router_rwc_new();
    r->txns = router_txn_catalog_new();
    svc->role_state = r;
    svc->hooks.append_hello = append_hello;
    svc->hooks.decorate_reply = decorate_reply;
    svc->hooks.gossip_in = gossip_in;
    svc->hooks.rewrite_request = rewrite_request;
    svc->hooks.session_begin = session_begin;
    svc->hooks.session_end = session_end;
    svc->hooks.txn_end = txn_end;
    svc->hooks.shutdown = shutdown_router;
    r->uptime = shl_router_uptime_start(r, svc->me);
    shl_common_commands_register(reg);
    shl_router_commands_register(reg);
    shl_session_commands_register(reg);
    SHL_ERR(router_sessions_init(r, svc, st));
    SHL_ERR(wait_for_config_server(r, st));
    r->keys.pool = r->pool;
    shl_str_copy(r->keys.host, sizeof(r->keys.host), shl_shard_registry_config_host(r->registry));
    svc->cluster_time = shl_cluster_time_new();
    shl_cluster_time_set_loader(svc->cluster_time, shl_keys_client_load, &r->keys);
    sync_clock(r);
    SHL_LOG_INFO(SHARDING, 4620020, "router configured", "configdb", BCON_UTF8(configdb));
done:
    return ret;
}
