/*
 * router.c -- the router role's start-up: its components (pool, shard registry, catalog
 * cache), its hooks (hello says "isdbgrid"; replies carry the highest cluster time the
 * router has seen, since routers never tick the clock -- DESIGN.md section 7) and its
 * command registry.
 */
#include "router/router.h"

#include <pthread.h>
#include <string.h>

#include "base/log.h"
#include "net/common_commands.h"
#include "router/cluster_cursor_manager.h"
#include "router/cluster_routing.h"
#include "router/router_commands.h"
#include "router/router_uptime.h"
#include "sharding/sharding_types.h"

/* Gossip: advance the vector clock from every reply of a cluster node; a newer
 * TopologyTime means the set of shards changed, so the shard registry reloads. */
static void
observe_reply(void *arg, const char *host, const bson_t *reply)
{
    shl_router_t *r = arg;
    (void)host;

    if (shl_vector_clock_observe(&r->clock, reply) & SHL_VC_ADVANCED(SHL_VC_TOPOLOGY_TIME)) {
        shl_shard_registry_invalidate(r->registry);
    }
}

static void
append_hello(shl_op_ctx_t *op, bson_t *reply)
{
    (void)op;
    BSON_APPEND_UTF8(reply, "msg", "isdbgrid");
}

/* The $clusterTime signature a router without keys sends: {hash: 20 zero bytes, keyId: 0}. */
static bson_t unsigned_signature;
static pthread_once_t unsigned_signature_once = PTHREAD_ONCE_INIT;

static void
unsigned_signature_init(void)
{
    static const uint8_t zero_hash[20] = {0};

    bson_init(&unsigned_signature);
    bson_append_binary(&unsigned_signature, "hash", 4, BSON_SUBTYPE_BINARY, zero_hash,
                       sizeof(zero_hash));
    BSON_APPEND_INT64(&unsigned_signature, "keyId", 0);
}

/* Both decorations as one document, {operationTime: T, $clusterTime: {clusterTime: T,
 * signature}}, built once; a reply gets a copy with T written at the two offsets. */
static bson_t decorations;
static size_t op_time_off, cluster_time_off;
static pthread_once_t decorations_once = PTHREAD_ONCE_INIT;

static void
decorations_init(void)
{
    bson_t ct;
    bson_iter_t it, child;

    pthread_once(&unsigned_signature_once, unsigned_signature_init);
    bson_init(&decorations);
    BSON_APPEND_TIMESTAMP(&decorations, "operationTime", 0, 0);
    bson_init(&ct);
    BSON_APPEND_TIMESTAMP(&ct, "clusterTime", 0, 0);
    BSON_APPEND_DOCUMENT(&ct, "signature", &unsigned_signature);
    BSON_APPEND_DOCUMENT(&decorations, "$clusterTime", &ct);
    bson_destroy(&ct);
    SHL_INVARIANT(bson_iter_init_find(&it, &decorations, "operationTime"));
    op_time_off = it.d1;
    SHL_INVARIANT(bson_iter_init(&it, &decorations) &&
                  bson_iter_find_descendant(&it, "$clusterTime.clusterTime", &child));
    cluster_time_off = (size_t)(child.raw - bson_get_data(&decorations)) + child.d1;
}

static void
decorate_reply(shl_op_ctx_t *op, bson_t *reply)
{
    shl_router_t *r = shl_router_get(op);
    uint64_t ts = shl_vector_clock_get(&r->clock, SHL_VC_CLUSTER_TIME);
    bson_t ct;
    bson_iter_t it;
    bool has_op_time = false, has_cluster_time = false;

    if (ts == 0) {
        return;
    }
    /* One pass over the reply's top level for both fields. */
    if (bson_iter_init(&it, reply)) {
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (k[0] == 'o' && strcmp(k, "operationTime") == 0) {
                has_op_time = true;
            } else if (k[0] == '$' && strcmp(k, "$clusterTime") == 0) {
                has_cluster_time = true;
            }
        }
    }
    if (!has_op_time && !has_cluster_time) {
        /* Every ordinary reply: one concat of the prebuilt pair, the same bytes. */
        uint8_t buf[256]; /* 130 bytes */
        uint64_t le = BSON_UINT64_TO_LE(ts);
        bson_t view;

        pthread_once(&decorations_once, decorations_init);
        SHL_INVARIANT(decorations.len <= sizeof(buf));
        memcpy(buf, bson_get_data(&decorations), decorations.len);
        memcpy(buf + op_time_off, &le, sizeof(le));
        memcpy(buf + cluster_time_off, &le, sizeof(le));
        SHL_INVARIANT(bson_init_static(&view, buf, decorations.len));
        bson_concat(reply, &view);
        return;
    }
    if (!has_op_time) {
        BSON_APPEND_TIMESTAMP(reply, "operationTime", (uint32_t)(ts >> 32), (uint32_t)ts);
    }
    if (!has_cluster_time) {
        /* Built beside the reply and appended whole: cheaper than nested appends. */
        pthread_once(&unsigned_signature_once, unsigned_signature_init);
        bson_init(&ct);
        BSON_APPEND_TIMESTAMP(&ct, "clusterTime", (uint32_t)(ts >> 32), (uint32_t)ts);
        BSON_APPEND_DOCUMENT(&ct, "signature", &unsigned_signature);
        BSON_APPEND_DOCUMENT(reply, "$clusterTime", &ct);
        bson_destroy(&ct);
    }
}

static void
shutdown_router(shl_service_ctx_t *svc)
{
    shl_router_t *r = svc->role_state;

    if (r == NULL) {
        return;
    }
    shl_router_uptime_stop(r->uptime);
    shl_router_cursor_manager_destroy(r->cursors);
    shl_catalog_cache_destroy(r->cache);
    shl_shard_registry_destroy(r->registry);
    shl_conn_pool_destroy(r->pool);
    bson_free(r);
    svc->role_state = NULL;
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
    popts.hooks.observe = observe_reply;
    popts.hooks.arg = r;
    r->pool = shl_conn_pool_new(&popts);
    r->registry = shl_shard_registry_new(r->pool, configdb);
    r->cache = shl_catalog_cache_new(r->registry);
    r->cursors = shl_router_cursor_manager_new();
    svc->role_state = r;
    svc->hooks.append_hello = append_hello;
    svc->hooks.decorate_reply = decorate_reply;
    svc->hooks.shutdown = shutdown_router;
    r->uptime = shl_router_uptime_start(r, svc->me);
    shl_common_commands_register(reg);
    shl_router_commands_register(reg);
    SHL_LOG_INFO(SHARDING, 4620020, "router configured", "configdb", BCON_UTF8(configdb));
done:
    return ret;
}
