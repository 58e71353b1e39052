/*
 * configsvr_init.c -- config server start-up (docs/design/sharding-protocol.md "Catalog"):
 * MongoDB's indexes on config.*, config.version's clusterId, hello's configsvr: 2, the
 * client pool to the shards, and command registration.
 */
#include <string.h>

#include "base/log.h"
#include "bson/bson_util.h"
#include "net/server.h"
#include "storage/storage.h"
#include "config/balancer_private.h"
#include "config/config_private.h"
#include "config/configsvr.h"
#include "db/node.h"
#include "db/repl_hooks.h"
#include "base/clock.h"

/* The node's own hello decoration, chained before configsvr: 2. */
static void (*node_append_hello)(struct shl_op_ctx *op, bson_t *reply);

static void
append_hello(shl_op_ctx_t *op, bson_t *reply)
{
    if (node_append_hello != NULL) {
        node_append_hello(op, reply);
    }
    /* MongoDB's config servers answer configsvr: 2 (the CSRS protocol version). */
    BSON_APPEND_INT32(reply, "configsvr", 2);
}

static void (*node_decorate_reply)(struct shl_op_ctx *op, bson_t *reply);

/* Gossip (docs/design/vector_clock.md): the config server's replies to cluster processes
 * carry $configTime (its time of the newest metadata: the reply's operationTime, the
 * majority commit point of a set of one) and $topologyTime; clients see $clusterTime only. */
static void
decorate_reply(shl_op_ctx_t *op, bson_t *reply)
{
    cfg_state_t *cfg = cfg_get();
    bson_iter_t it;

    if (node_decorate_reply != NULL) {
        node_decorate_reply(op, reply);
    }
    if (bson_iter_init_find(&it, reply, "operationTime") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        uint32_t t, i;
        bson_iter_timestamp(&it, &t, &i);
        shl_vector_clock_advance(&cfg->clock, SHL_VC_CONFIG_TIME, ((uint64_t)t << 32) | i);
    }
    if (op->conn != NULL && op->conn->internal) {
        shl_vector_clock_append_config_gossip(&cfg->clock, reply);
    }
}

/* A request's $clusterTime (checked) moves the storage clock, whatever the command. */
static void
gossip_in(shl_op_ctx_t *op, uint64_t cluster_time)
{
    if (cluster_time != 0) {
        shl_storage_clock_advance(op->svc->storage, cluster_time);
    }
}

/* Requests to shards carry the config server's times; their replies move its clock. */
static void
decorate_request(void *arg, const char *host, const char *cmd_name, bson_t *cmd)
{
    cfg_state_t *cfg = arg;
    (void)host;
    (void)cmd_name;

    shl_vector_clock_append_internal_gossip(&cfg->clock, shl_storage_clock_now(cfg->svc->storage),
                                            cmd);
}

static void
observe_reply(void *arg, const char *host, const bson_t *reply)
{
    cfg_state_t *cfg = arg;
    bson_iter_t it, sub;
    (void)host;

    if (bson_iter_init_find(&it, reply, "$clusterTime") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &sub) && bson_iter_find(&sub, "clusterTime") &&
        BSON_ITER_HOLDS_TIMESTAMP(&sub)) {
        shl_storage_clock_advance(cfg->svc->storage, shl_bson_iter_timestamp_u64(&sub));
    }
}

/* TopologyTime at start-up: the newest topologyTime in config.shards. */
static int
load_topology_time(cfg_state_t *cfg, shl_status_t *st)
{
    shl_shard_type_t *shards = NULL;
    size_t n = 0;
    int ret = 0;

    SHL_ERR(cfg_get_shards(&shards, &n, st));
    for (size_t i = 0; i < n; i++) {
        if (shards[i].has_topology_time) {
            shl_vector_clock_advance(&cfg->clock, SHL_VC_TOPOLOGY_TIME,
                                     ((uint64_t)shards[i].topology_time.t << 32) |
                                         shards[i].topology_time.i);
        }
    }
done:
    cfg_shards_free(shards, n);
    return ret;
}

static void (*node_shutdown)(shl_service_ctx_t *svc);

static void
shutdown_hook(shl_service_ctx_t *svc)
{
    cfg_state_t *cfg = cfg_get();

    shl_db_repl_stop_listeners(svc);
    cfg_balancer_stop();
    cfg_sessions_stop(cfg);
    cfg_keys_stop(cfg);
    if (node_shutdown != NULL) {
        node_shutdown(svc);
    }
    shl_conn_pool_destroy(cfg->pool);
    cfg->pool = NULL;
}

typedef struct index_def {
    const char *coll;
    const char *name;
    const char *json;
    bool unique;
} index_def_t;

static const index_def_t k_indexes[] = {
    {"chunks", "uuid_1_min_1", "{\"uuid\": 1, \"min\": 1}", true},
    {"chunks", "uuid_1_shard_1_min_1", "{\"uuid\": 1, \"shard\": 1, \"min\": 1}", true},
    {"chunks", "uuid_1_lastmod_1", "{\"uuid\": 1, \"lastmod\": 1}", true},
    {"shards", "host_1", "{\"host\": 1}", true},
    {"tags", "ns_1_min_1", "{\"ns\": 1, \"min\": 1}", true},
    {"tags", "ns_1_tag_1", "{\"ns\": 1, \"tag\": 1}", false},
};

static int
create_indexes(shl_status_t *st)
{
    int ret = 0;

    for (size_t i = 0; i < sizeof(k_indexes) / sizeof(k_indexes[0]); i++) {
        const index_def_t *d = &k_indexes[i];
        bson_t cmd = BSON_INITIALIZER, reply, arr, spec;
        bson_t *key = bson_new_from_json((const uint8_t *)d->json, -1, NULL);

        SHL_INVARIANT(key != NULL);
        BSON_APPEND_UTF8(&cmd, "createIndexes", d->coll);
        BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &arr);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &spec);
        BSON_APPEND_DOCUMENT(&spec, "key", key);
        BSON_APPEND_UTF8(&spec, "name", d->name);
        if (d->unique) {
            BSON_APPEND_BOOL(&spec, "unique", true);
        }
        bson_append_document_end(&arr, &spec);
        bson_append_array_end(&cmd, &arr);
        ret = shl_remote_run_self(&cfg_get()->remote, "config", &cmd, NULL, &reply, st);
        bson_destroy(&cmd);
        bson_destroy(&reply);
        bson_destroy(key);
        if (ret != 0) {
            goto done;
        }
    }
done:
    return ret;
}

/* config.changelog is capped at 200 MB, as MongoDB creates it. */
static int
ensure_changelog(shl_status_t *st)
{
    int ret = 0;
    bson_t *cmd = BCON_NEW("create", BCON_UTF8("changelog"), "capped", BCON_BOOL(true), "size",
                           BCON_INT64(200LL * 1024 * 1024));
    bson_t reply;

    if (shl_remote_run_self(&cfg_get()->remote, "config", cmd, NULL, &reply, st) != 0) {
        if (st->code == SHL_CODE_NAMESPACE_EXISTS) {
            shl_status_clear(st);
        } else {
            ret = st->code;
        }
    }
    bson_destroy(cmd);
    bson_destroy(&reply);
    return ret;
}

static int
ensure_version(cfg_state_t *cfg, shl_status_t *st)
{
    int ret = 0;
    bson_t *q = BCON_NEW("_id", BCON_INT32(1));
    bson_t doc = BSON_INITIALIZER, found_doc;
    bool found = false;
    bson_iter_t it;
    const bson_t *docs[1] = {&doc};

    SHL_ERR(cfg_find_one("version", q, &found_doc, &found, st));
    if (found && bson_iter_init_find(&it, &found_doc, "clusterId") && BSON_ITER_HOLDS_OID(&it)) {
        bson_oid_copy(bson_iter_oid(&it), &cfg->cluster_id);
    } else {
        bson_oid_init(&cfg->cluster_id, NULL);
        BSON_APPEND_INT32(&doc, "_id", 1);
        BSON_APPEND_OID(&doc, "clusterId", &cfg->cluster_id);
        ret = cfg_insert("version", docs, 1, st);
    }
    bson_destroy(&found_doc);
done:
    bson_destroy(q);
    bson_destroy(&doc);
    return ret;
}

/*
 * config.settings {_id: "balancer"}: a new cluster's balancer is on, as MongoDB's (its
 * data-size policy never moves a collection smaller than three chunk sizes:
 * docs/design/balancer.md). Written so that mongosh's sh.status() and sh.getBalancerState()
 * read what balancerStatus answers. An existing document is kept.
 */
static int
ensure_balancer_setting(shl_status_t *st)
{
    int ret = 0;
    bson_t *q = BCON_NEW("_id", BCON_UTF8("balancer"));
    bson_t *doc = BCON_NEW("_id", BCON_UTF8("balancer"), "mode", BCON_UTF8("full"), "stopped",
                           BCON_BOOL(false));
    bson_t found_doc;
    bool found = false;
    const bson_t *docs[1] = {doc};

    SHL_ERR(cfg_find_one("settings", q, &found_doc, &found, st));
    bson_destroy(&found_doc);
    if (!found) {
        ret = cfg_insert("settings", docs, 1, st);
    }
done:
    bson_destroy(q);
    bson_destroy(doc);
    return ret;
}

/*
 * The catalog's set-up, on the primary: at start-up (a set of one, or the primary of a set)
 * and each time this member becomes the set's primary (docs/design/replication.md "Step-up
 * and step-down work"). A new set's members each make one before the set is initiated; the
 * initiator's is the one that stays (the others clone it in their initial sync). What is in
 * memory (clusterId, topologyTime) is read again from the catalog the set holds.
 */
static int
catalog_setup(cfg_state_t *cfg, shl_status_t *st)
{
    int ret = 0;

    SHL_ERR(ensure_changelog(st));
    SHL_ERR(create_indexes(st));
    SHL_ERR(ensure_version(cfg, st));
    SHL_ERR(ensure_balancer_setting(st));
    SHL_ERR(load_topology_time(cfg, st));
done:
    return ret;
}

/* This member became the config server set's primary: its catalog, then the balancer and
 * the key generator look again (they idle on a secondary). Retried while the member stays
 * primary (a write may need the majority that is still catching up). */
static void
step_up(void *arg)
{
    cfg_state_t *cfg = arg;
    shl_status_t st = SHL_STATUS_INIT;
    char cid[25];

    while (catalog_setup(cfg, &st) != 0) {
        SHL_LOG_WARNING(SHARDING, 4200105, "config server step-up: catalog set-up failed",
                        "error", BCON_UTF8(st.reason));
        if (!shl_db_repl_is_primary(cfg->svc)) {
            return;
        }
        shl_status_clear(&st);
        shl_sleep_ms(200);
    }
    cfg_keys_kick(cfg);
    cfg_balancer_kick();
    bson_oid_to_string(&cfg->cluster_id, cid);
    SHL_LOG_INFO(SHARDING, 4200103, "config server primary ready", "clusterId", BCON_UTF8(cid));
}

/* No longer primary: the balancer's round in progress fails on its next write (writes are
 * refused from now on) and no new round starts until the next step-up. */
static void
step_down(void *arg)
{
    (void)arg;
    SHL_LOG_INFO(SHARDING, 4200104, "config server stepped down");
    cfg_balancer_kick();
}

int
shl_configsvr_init(shl_service_ctx_t *svc, shl_command_registry_t *reg, shl_status_t *st)
{
    int ret = 0;
    cfg_state_t *cfg = cfg_get();
    char cid[25];

    memset(cfg, 0, sizeof(*cfg));
    cfg->svc = svc;
    pthread_mutex_init(&cfg->locks_mu, NULL);
    pthread_mutex_init(&cfg->shards_mu, NULL);
    snprintf(cfg->conn_string, sizeof(cfg->conn_string), "%s/%s",
             svc->set_name[0] != '\0' ? svc->set_name : "csrs", svc->me);
    {
        shl_conn_pool_options_t po = {0};
        po.hooks.decorate = decorate_request;
        po.hooks.observe = observe_reply;
        po.hooks.arg = cfg;
        cfg->pool = shl_conn_pool_new(&po);
    }
    cfg_remote_init(cfg);

    cfg_register_shard_commands(reg);
    cfg_register_ddl_commands(reg);
    cfg_register_drop_commands(reg);
    cfg_register_move_primary_commands(reg);
    cfg_register_chunk_commands(reg);
    cfg_register_rename_commands(reg);
    cfg_register_zone_commands(reg);
    cfg_register_uwb_commands(reg);
    cfg_register_balancer_commands(reg);

    node_append_hello = svc->hooks.append_hello;
    svc->hooks.append_hello = append_hello;
    node_shutdown = svc->hooks.shutdown;
    svc->hooks.shutdown = shutdown_hook;
    node_decorate_reply = svc->hooks.decorate_reply;
    svc->hooks.decorate_reply = decorate_reply;
    svc->hooks.gossip_in = gossip_in;
    shl_vector_clock_init(&cfg->clock);
    shl_node_clock_start_fresh(svc);
    /* ConfigTime after a restart: nothing is in flight, so everything up to the clock (which
     * starts at or past the last oplog entry) is committed, and no older time is given out. */
    shl_vector_clock_advance(&cfg->clock, SHL_VC_CONFIG_TIME, shl_storage_clock_now(svc->storage));

    {
        shl_db_repl_listener_t l = {.step_up = step_up, .step_down = step_down, .arg = cfg};
        /* A secondary of the config server's set sets nothing up: its catalog is the one it
         * replicates, and it makes its own only if it becomes primary. */
        if (shl_db_repl_add_listener(svc, &l)) {
            SHL_ERR(catalog_setup(cfg, st));
        }
    }
    SHL_ERR(cfg_keys_start(cfg, st));
    SHL_ERR(cfg_sessions_start(cfg, st));
    SHL_ERR(cfg_balancer_start(st));
    bson_oid_to_string(&cfg->cluster_id, cid);
    SHL_LOG_INFO(SHARDING, 4200100, "config server ready", "clusterId", BCON_UTF8(cid),
                 "connectionString", BCON_UTF8(cfg->conn_string));
done:
    return ret;
}
