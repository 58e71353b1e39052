/*
 * cluster_diag.c -- the router's diagnostic commands, in mongos's reply shapes: isdbgrid,
 * getShardVersion (the router's own routing table), validate and dataSize (routed like a
 * read of the whole collection, versioned; validate keeps every shard's reply under `raw`,
 * dataSize sums size/numObjects/millis).
 */
#include <string.h>
#include <unistd.h>

#include "base/str.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/command_args.h"
#include "router/cluster_routing.h"
#include "router/router_commands.h"
#include "router/router_private.h"
#include "sharding/sharding_types.h"

/* ---- isdbgrid ---- */

/* Tools (and old shells) ask this to tell a router from a data node. */
static int
cmd_isdbgrid(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    char host[256] = "";
    (void)op;
    (void)cmd;
    (void)st;

    if (gethostname(host, sizeof(host) - 1) != 0) {
        shl_str_copy(host, sizeof(host), "localhost");
    }
    BSON_APPEND_INT32(reply, "isdbgrid", 1);
    BSON_APPEND_UTF8(reply, "hostname", host);
    return 0;
}

/* ---- getShardVersion ---- */

/*
 * getShardVersion as mongos answers it, from the router's catalog cache: a database name
 * gives its primary shard and database version; a collection its collection version
 * (version, versionEpoch, versionTimestamp), and with fullMetadata every chunk's [min, max].
 * An unsharded collection is NamespaceNotSharded; an unknown database NamespaceNotFound.
 */
static int
cmd_get_shard_version(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    shl_router_routing_t rr;
    bson_iter_t it;
    const char *ns;
    bool full = false;
    int ret = 0;

    memset(&rr, 0, sizeof(rr));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "namespace has invalid type %s",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    ns = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, cmd, "fullMetadata")) {
        full = bson_iter_as_bool(&it);
    }
    if (strchr(ns, '.') == NULL) {
        shl_cached_database_t db;
        SHL_ERR(shl_ns_check_db(ns, st));
        SHL_ERR(shl_catalog_cache_get_database(r->cache, ns, &db, st));
        BSON_APPEND_UTF8(reply, "primaryShard", db.primary);
        shl_database_version_append(reply, "version", &db.version);
    } else {
        shl_chunk_version_t v;
        SHL_ERR(shl_router_routing_init(r, ns, false, &rr, st));
        if (rr.rt == NULL) {
            SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_SHARDED, "Collection %s is not sharded.", ns);
        }
        v = shl_routing_table_collection_version(rr.rt);
        shl_ts_append(reply, "version", (shl_ts_t){v.major, v.minor});
        BSON_APPEND_OID(reply, "versionEpoch", &v.epoch);
        shl_ts_append(reply, "versionTimestamp", v.timestamp);
        if (full) {
            bson_t chunks, pair;
            char key[24];
            BSON_APPEND_ARRAY_BEGIN(reply, "chunks", &chunks);
            for (size_t i = 0; i < shl_routing_table_nchunks(rr.rt); i++) {
                bson_t min, max;
                shl_routing_table_chunk_bounds(rr.rt, i, &min, &max);
                snprintf(key, sizeof(key), "%zu", i);
                BSON_APPEND_ARRAY_BEGIN(&chunks, key, &pair);
                BSON_APPEND_DOCUMENT(&pair, "0", &min);
                BSON_APPEND_DOCUMENT(&pair, "1", &max);
                bson_append_array_end(&chunks, &pair);
            }
            bson_append_array_end(reply, &chunks);
        }
    }
done:
    shl_router_routing_cleanup(&rr);
    return ret;
}

/* ---- validate ---- */

/* The collection namespace of a command whose first field names a collection of op->db. */
static int
coll_ns(shl_op_ctx_t *op, const bson_t *cmd, char *ns, size_t n, shl_status_t *st)
{
    bson_iter_t it;
    shl_ns_t parsed;
    int ret = 0;

    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "collection name has invalid type %s",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    SHL_ERR(shl_ns_make(&parsed, op->db, bson_iter_utf8(&it, NULL), st));
    shl_str_copy(ns, n, parsed.full);
done:
    return ret;
}

/*
 * validate as mongos runs it: sent, versioned, to the primary of an unsharded collection or
 * every shard owning chunks of a sharded one. `raw` holds each shard's reply by shard name
 * (a shard that could not be reached: {error: "..."}); an unsharded collection's reply is
 * its primary's, a sharded one's says only `valid` (every shard's valid). The first shard
 * that failed fails the command with its error.
 */
static int
cmd_validate(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    router_copy_as_t as = {cmd, "validate", NULL};
    shl_router_routing_t rr;
    shl_router_shard_result_t *res = NULL;
    size_t n = 0;
    char ns[SHL_NS_MAX + 1];
    bson_t raw = BSON_INITIALIZER;
    shl_status_t first = SHL_STATUS_INIT;
    bool valid = true;
    int ret = 0;

    memset(&rr, 0, sizeof(rr));
    SHL_ERR(coll_ns(op, cmd, ns, sizeof(ns), st));
    SHL_ERR(shl_router_scatter(r, op, ns, NULL, router_build_copy_as, &as, &rr, &res, &n, st));
    for (size_t i = 0; i < n; i++) {
        const shl_fanout_result_t *f = &res[i].res;
        bson_t one;
        bson_iter_t it;
        BSON_APPEND_DOCUMENT_BEGIN(&raw, res[i].shard, &one);
        if (f->code != 0 && bson_empty(&f->reply)) {
            /* No reply at all: the shard could not be reached. */
            char msg[SHL_STATUS_REASON_MAX + 64];
            snprintf(msg, sizeof(msg), "%s: %s", shl_code_name(f->code), f->status.reason);
            BSON_APPEND_UTF8(&one, "error", msg);
        } else if (f->code != 0) {
            shl_status_t copy = f->status;
            shl_status_append_reply(&copy, &one);
        } else {
            shl_router_copy_reply_fields(&f->reply, &one);
            BSON_APPEND_DOUBLE(&one, "ok", 1.0);
            if (bson_iter_init_find(&it, &f->reply, "valid") && !bson_iter_as_bool(&it)) {
                valid = false;
            }
        }
        bson_append_document_end(&raw, &one);
        if (f->code != 0 && first.code == 0) {
            first = f->status;
        }
    }
    if (first.code != 0) {
        *st = first;
        SHL_ERR(st->code);
    }
    if (rr.rt == NULL && n > 0) {
        shl_router_copy_reply_fields(&res[0].res.reply, reply);
    } else {
        BSON_APPEND_BOOL(reply, "valid", valid);
    }
    BSON_APPEND_DOCUMENT(reply, "raw", &raw);
done:
    shl_router_scatter_results_free(res, n);
    shl_router_routing_cleanup(&rr);
    bson_destroy(&raw);
    return ret;
}

/* ---- dataSize ---- */

/*
 * dataSize as mongos runs it: the namespace (a full "db.coll") is routed like a read of the
 * whole collection -- min/max/keyPattern do not narrow the shards -- sent versioned, and
 * each shard's size, numObjects and millis are summed. Any shard's error fails the command.
 */
static int
cmd_data_size(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    router_copy_as_t as = {cmd, "dataSize", NULL};
    shl_router_shard_result_t *res = NULL;
    size_t n = 0;
    bson_iter_t it;
    shl_ns_t ns;
    int64_t size = 0, objects = 0, millis = 0;
    int ret = 0;

    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'dataSize.dataSize' is the wrong type '%s', expected type 'string'",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    SHL_ERR(shl_ns_parse(&ns, bson_iter_utf8(&it, NULL), st));
    SHL_ERR(
        shl_router_scatter(r, op, ns.full, NULL, router_build_copy_as, &as, NULL, &res, &n, st));
    for (size_t i = 0; i < n; i++) {
        const bson_t *b = &res[i].res.reply;
        if (res[i].res.code != 0) {
            *st = res[i].res.status;
            SHL_ERR(st->code);
        }
        size += shl_bson_int64_at(b, "size");
        objects += shl_bson_int64_at(b, "numObjects");
        millis += shl_bson_int64_at(b, "millis");
    }
    BSON_APPEND_INT64(reply, "size", size);
    BSON_APPEND_INT64(reply, "numObjects", objects);
    BSON_APPEND_INT64(reply, "millis", millis);
done:
    shl_router_scatter_results_free(res, n);
    return ret;
}

/* ---- fsync ---- */

/*
 * fsync as mongos runs it: sent unversioned to the config server and every shard; the reply
 * is numFiles: 1 (a fixed value since MMAPv1) and all: {raw: {<conn string>: reply}}. Any
 * failure fails the command with every failing node's error. fsync with lock: true is
 * refused as MongoDB 7.0's mongos refuses it (data nodes cannot lock either).
 */
static int
cmd_fsync(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    size_t n = 0;
    shl_router_shard_result_t *res = NULL;
    router_copy_as_t as = {cmd, "fsync", NULL};
    bson_t all = BSON_INITIALIZER;
    bson_iter_t it;
    int ret = 0;

    if (bson_iter_init_find(&it, cmd, "lock") && bson_iter_as_bool(&it)) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "can't do lock through mongos: fsync lock is not supported by Shale");
    }
    SHL_ERR(shl_router_send_to_all(r, op, "admin", true, router_build_copy_as, &as, &res, &n, st));
    ret = router_append_raw(r, res, n, &all, st);
    SHL_ERR(ret);
    BSON_APPEND_INT32(reply, "numFiles", 1);
    BSON_APPEND_DOCUMENT(reply, "all", &all);
done:
    shl_router_scatter_results_free(res, n);
    bson_destroy(&all);
    return ret;
}

/* ---- setClusterParameter / getClusterParameter ---- */

/*
 * changeStreamOptions (the only cluster parameter Shale has; db/pre_images.c) is set on the
 * config server and every shard, each of which keeps it in its config.clusterParameters and
 * applies it to its own pre-images; any failure fails the command with every node's error.
 * A shard added later starts with the default ("off") until the next set.
 */
static int
cmd_set_cluster_parameter(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    size_t n = 0;
    shl_router_shard_result_t *res = NULL;
    router_copy_as_t as = {cmd, "setClusterParameter", NULL};
    bson_t raw = BSON_INITIALIZER;
    int ret = 0;

    (void)reply;
    SHL_ERR(shl_router_send_to_all(r, op, "admin", true, router_build_copy_as, &as, &res, &n, st));
    SHL_ERR(router_append_raw(r, res, n, &raw, st));
done:
    shl_router_scatter_results_free(res, n);
    bson_destroy(&raw);
    return ret;
}

/* The config server's values (the first target of the fan-out). */
static int
cmd_get_cluster_parameter(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    size_t n = 0;
    shl_router_shard_result_t *res = NULL;
    router_copy_as_t as = {cmd, "getClusterParameter", NULL};
    bson_iter_t it;
    int ret = 0;

    SHL_ERR(shl_router_send_to_all(r, op, "admin", true, router_build_copy_as, &as, &res, &n, st));
    SHL_INVARIANT(n > 0);
    if (res[0].res.code != 0) {
        *st = res[0].res.status;
        SHL_ERR(res[0].res.code);
    }
    if (bson_iter_init_find(&it, &res[0].res.reply, "clusterParameters")) {
        bson_append_iter(reply, "clusterParameters", -1, &it);
    }
done:
    shl_router_scatter_results_free(res, n);
    return ret;
}

/* ---- connPoolStats / shardConnPoolStats ---- */

/*
 * The router's connection pool to the config server and the shards, per host and in total,
 * with connPoolStats's field names. Shale has one pool and no connection refreshing or
 * leasing, so those counts are 0. 'legacy' gives shardConnPoolStats's (pre-5.0) shape.
 */
static void
append_pool_stats(shl_router_t *r, bool legacy, bson_t *reply)
{
    char **hosts = shl_conn_pool_hosts(r->pool);
    shl_conn_pool_stats_t total;
    bson_t h, one;

    shl_conn_pool_stats_get(r->pool, NULL, &total);
    if (!legacy) {
        BSON_APPEND_INT32(reply, "numClientConnections", 0);
        BSON_APPEND_INT32(reply, "numAScopedConnections", 0);
    }
    BSON_APPEND_INT64(reply, "totalInUse", total.in_use);
    BSON_APPEND_INT64(reply, "totalAvailable", total.idle);
    if (!legacy) {
        BSON_APPEND_INT64(reply, "totalLeased", 0);
    }
    BSON_APPEND_INT64(reply, "totalCreated", total.opened);
    BSON_APPEND_INT64(reply, "totalRefreshing", 0);
    if (!legacy) {
        BSON_APPEND_INT64(reply, "totalRefreshed", 0);
        BSON_APPEND_UTF8(reply, "replicaSetMatchingStrategy", "disabled");
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "hosts", &h);
    for (size_t i = 0; hosts[i] != NULL; i++) {
        shl_conn_pool_stats_t s;
        shl_conn_pool_stats_get(r->pool, hosts[i], &s);
        BSON_APPEND_DOCUMENT_BEGIN(&h, hosts[i], &one);
        BSON_APPEND_INT64(&one, "inUse", s.in_use);
        BSON_APPEND_INT64(&one, "available", s.idle);
        if (!legacy) {
            BSON_APPEND_INT64(&one, "leased", 0);
        }
        BSON_APPEND_INT64(&one, "created", s.opened);
        BSON_APPEND_INT64(&one, "refreshing", 0);
        bson_append_document_end(&h, &one);
    }
    bson_append_document_end(reply, &h);
    if (legacy) {
        bson_t threads;
        BSON_APPEND_ARRAY_BEGIN(reply, "threads", &threads);
        bson_append_array_end(reply, &threads);
    }
    bson_strfreev(hosts);
}

static int
cmd_conn_pool_stats(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)cmd;
    (void)st;
    append_pool_stats(shl_router_get(op), false, reply);
    return 0;
}

static int
cmd_shard_conn_pool_stats(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)cmd;
    (void)st;
    append_pool_stats(shl_router_get(op), true, reply);
    return 0;
}

static const shl_command_t k_diag_commands[] = {
    {"isdbgrid", {NULL}, cmd_isdbgrid, 0, "whether this process is a router (it is)"},
    {"getShardVersion",
     {"getshardversion"},
     cmd_get_shard_version,
     SHL_CMD_ADMIN_ONLY,
     "the router's version of a collection or database (fullMetadata: its chunks)"},
    {"validate", {NULL}, cmd_validate, 0, "validate a collection on every shard that holds it"},
    {"dataSize", {"datasize"}, cmd_data_size, 0, "bytes and documents of a collection, summed"},
    {"fsync",
     {NULL},
     cmd_fsync,
     SHL_CMD_ADMIN_ONLY,
     "invoke fsync on the config server and every shard"},
    {"setClusterParameter",
     {NULL},
     cmd_set_cluster_parameter,
     SHL_CMD_ADMIN_ONLY,
     "set a cluster parameter on the config server and every shard"},
    {"getClusterParameter",
     {NULL},
     cmd_get_cluster_parameter,
     SHL_CMD_ADMIN_ONLY,
     "read cluster parameters (the config server's)"},
    {"connPoolStats", {NULL}, cmd_conn_pool_stats, 0, "the router's connections to the cluster"},
    {"shardConnPoolStats",
     {NULL},
     cmd_shard_conn_pool_stats,
     0,
     "the router's connections to the cluster (the pre-5.0 shape)"},
};

void
shl_cluster_diag_commands_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(k_diag_commands) / sizeof(k_diag_commands[0]); i++) {
        shl_command_registry_add(reg, &k_diag_commands[i]);
    }
}
