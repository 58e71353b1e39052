/*
 * cluster_stats.c -- the router's statistics and cluster-information commands, in mongos's
 * reply shapes: dbStats (every shard, unversioned, summed, raw per shard), collStats (the
 * shards the routing table targets, versioned, summed, scaled by the router, shards per
 * shard), getShardMap (config.shards and the config server), and balancerStatus /
 * balancerStart / balancerStop (forwarded to the config server's balancer).
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/str.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/command_args.h"
#include "router/cluster_routing.h"
#include "router/router_commands.h"
#include "router/router_private.h"

void
router_copy_command_as(const bson_t *cmd, const char *name, const char *const *skip, bson_t *out)
{
    bson_t tmp = BSON_INITIALIZER;
    bson_iter_t it;

    router_copy_command(cmd, skip, &tmp);
    if (bson_iter_init(&it, &tmp) && shl_iter_next(&it)) {
        bson_append_value(out, name, -1, bson_iter_value(&it));
        while (shl_iter_next(&it)) {
            bson_append_iter(out, NULL, 0, &it);
        }
    }
    bson_destroy(&tmp);
}

void
router_build_copy_as(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    const router_copy_as_t *a = arg;

    (void)rr;
    (void)shard;
    router_copy_command_as(a->cmd, a->name, a->skip, cmd);
}

/* ---- dbStats ---- */

/*
 * dbStats as mongos runs it: sent unversioned to every shard in the registry (a database
 * that does not exist answers zeros on each, so it answers zeros here too); any shard's
 * failure fails the command with OperationFailed. The shards scale their own sizes; the
 * router sums them and recomputes avgObjSize from the shards' unscaled averages.
 */
static int
cmd_db_stats(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    size_t n = 0;
    shl_router_shard_result_t *res = NULL;
    router_copy_as_t as = {cmd, "dbStats", NULL};
    bson_t raw = BSON_INITIALIZER;
    int64_t scale = 1, collections = 0, views = 0, objects = 0, indexes = 0;
    double unscaled = 0, data = 0, storage = 0, total = 0, index_size = 0, fs_used = 0,
           fs_total = 0;
    bool found = false;
    int ret = 0;

    SHL_ERR(shl_cmd_get_int64(cmd, "scale", &scale, &found, st));
    if (found && scale <= 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Scale must be greater than zero");
    }
    SHL_ERR(shl_router_send_to_all(r, op, op->db, false, router_build_copy_as, &as, &res, &n, st));
    if (router_append_raw(r, res, n, &raw, st) != 0) {
        /* mongos: every shard's error in errmsg, as OperationFailed. */
        SHL_FAIL(st, SHL_CODE_OPERATION_FAILED, "%s", st->reason);
    }
    for (size_t i = 0; i < n; i++) {
        const bson_t *b = &res[i].res.reply;
        int64_t objs = shl_bson_int64_at(b, "objects");
        collections += shl_bson_int64_at(b, "collections");
        views += shl_bson_int64_at(b, "views");
        objects += objs;
        unscaled += shl_bson_double_at(b, "avgObjSize") * (double)objs;
        data += shl_bson_double_at(b, "dataSize");
        storage += shl_bson_double_at(b, "storageSize");
        total += shl_bson_double_at(b, "totalSize");
        indexes += shl_bson_int64_at(b, "indexes");
        index_size += shl_bson_double_at(b, "indexSize");
        fs_used += shl_bson_double_at(b, "fsUsedSize");
        fs_total += shl_bson_double_at(b, "fsTotalSize");
    }
    bson_concat(reply, &raw);
    BSON_APPEND_UTF8(reply, "db", op->db);
    BSON_APPEND_INT64(reply, "collections", collections);
    BSON_APPEND_INT64(reply, "views", views);
    BSON_APPEND_INT64(reply, "objects", objects);
    BSON_APPEND_DOUBLE(reply, "avgObjSize", objects == 0 ? 0.0 : unscaled / (double)objects);
    BSON_APPEND_DOUBLE(reply, "dataSize", data);
    BSON_APPEND_DOUBLE(reply, "storageSize", storage);
    BSON_APPEND_DOUBLE(reply, "totalSize", total);
    BSON_APPEND_INT64(reply, "indexes", indexes);
    BSON_APPEND_DOUBLE(reply, "indexSize", index_size);
    BSON_APPEND_INT64(reply, "scaleFactor", scale);
    BSON_APPEND_DOUBLE(reply, "fsUsedSize", fs_used);
    BSON_APPEND_DOUBLE(reply, "fsTotalSize", fs_total);
done:
    shl_router_scatter_results_free(res, n);
    bson_destroy(&raw);
    return ret;
}

/* ---- collStats ---- */

/* Whether 'k' is one of the NULL-terminated 'list'. */
static bool
is_any(const char *k, const char *const *list)
{
    for (size_t i = 0; list[i] != NULL; i++) {
        if (strcmp(k, list[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* Sizes the router scales (the shards answer unscaled: the router sends no scale). */
static const char *const k_scaled[] = {"size",           "maxSize",   "storageSize",
                                       "totalIndexSize", "totalSize", NULL};

/* Summed over the shards, in the order mongos prints them (its map is sorted by name). */
static const char *const k_summed[] = {"count",          "numOrphanDocs", "size", "storageSize",
                                       "totalIndexSize", "totalSize",     NULL};
#define N_SUMMED 6

/* Copied from the first shard that has them: they must match across shards. */
static const char *const k_first[] = {"userFlags",    "capped",     "max", "paddingFactorNote",
                                      "indexDetails", "wiredTiger", NULL};

/* One shard's collStats with the router's scale applied (mongos's per-shard entry). */
static void
append_scaled_shard(const bson_t *stats, int64_t scale, bson_t *out)
{
    bson_iter_t it, idx;

    if (!bson_iter_init(&it, stats)) {
        return;
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (is_any(k, k_scaled) && BSON_ITER_HOLDS_NUMBER(&it)) {
            BSON_APPEND_INT64(out, k, bson_iter_as_int64(&it) / scale);
        } else if (strcmp(k, "scaleFactor") == 0) {
            BSON_APPEND_INT64(out, k, scale);
        } else if (strcmp(k, "indexSizes") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it) &&
                   bson_iter_recurse(&it, &idx)) {
            bson_t sizes;
            BSON_APPEND_DOCUMENT_BEGIN(out, k, &sizes);
            while (shl_iter_next(&idx)) {
                bson_append_int64(&sizes, shl_iter_key(&idx), -1, bson_iter_as_int64(&idx) / scale);
            }
            bson_append_document_end(out, &sizes);
        } else if (strcmp(k, "ok") != 0 && strcmp(k, "operationTime") != 0 && k[0] != '$') {
            /* Not ok (appended last) nor the gossip ($clusterTime, $configTime, ...). */
            bson_append_iter(out, NULL, 0, &it);
        }
    }
    BSON_APPEND_DOUBLE(out, "ok", 1.0);
}

/* The per-index size sums, kept sorted by name on output. */
typedef struct index_size {
    char *name;
    int64_t size;
} index_size_t;

static void
index_size_add(index_size_t **list, size_t *n, const char *name, int64_t size)
{
    for (size_t i = 0; i < *n; i++) {
        if (strcmp((*list)[i].name, name) == 0) {
            (*list)[i].size += size;
            return;
        }
    }
    *list = bson_realloc(*list, (*n + 1) * sizeof(**list));
    (*list)[*n].name = bson_strdup(name);
    (*list)[*n].size = size;
    (*n)++;
}

static int
index_size_cmp(const void *a, const void *b)
{
    return strcmp(((const index_size_t *)a)->name, ((const index_size_t *)b)->name);
}

/*
 * collStats' scale as mongos reads it: a number (truncated to an int) that must be >= 1;
 * any other value that is "true" is refused; false/null mean 1.
 */
static int
coll_stats_scale(const bson_t *cmd, int64_t *scale, shl_status_t *st)
{
    bson_iter_t it;
    int ret = 0;

    *scale = 1;
    if (!bson_iter_init_find(&it, cmd, "scale")) {
        goto done;
    }
    if (BSON_ITER_HOLDS_NUMBER(&it)) {
        /* safeNumberInt: truncated; NaN is 0; out-of-range values saturate. */
        double d = bson_iter_as_double(&it);
        if (d != d) {
            *scale = 0;
        } else if (d >= 2147483647.0) {
            *scale = 2147483647;
        } else if (d <= -2147483648.0) {
            *scale = -1;
        } else {
            *scale = (int64_t)d;
        }
        if (*scale < 1) {
            SHL_FAIL(st, 4390200, "scale has to be >= 1");
        }
    } else if (bson_iter_as_bool(&it)) {
        SHL_FAIL(st, 4390201, "scale has to be a number >= 1");
    }
done:
    return ret;
}

/*
 * collStats as mongos runs it: routed like a read of the whole collection (the primary for
 * an unsharded one, every shard owning chunks for a sharded one), versioned, without the
 * scale; the router sums the shards' unscaled numbers and then scales, so rounding happens
 * once. Counts are the shards' record counts: orphaned documents a shard still holds are
 * counted, as mongos counts them.
 */
static int
cmd_coll_stats(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    static const char *const skip[] = {"scale", NULL};
    router_copy_as_t as = {cmd, "collStats", skip};
    shl_router_routing_t rr;
    shl_router_shard_result_t *res = NULL;
    size_t n = 0, nsizes = 0;
    index_size_t *sizes = NULL;
    bson_t first = BSON_INITIALIZER, shards = BSON_INITIALIZER, isz;
    bson_iter_t it;
    char ns[SHL_NS_MAX + 1];
    int64_t scale = 1, sums[N_SUMMED] = {0}, max_size = 0;
    double unscaled = 0;
    int32_t nindexes = 0;
    bool warned = false;
    int ret = 0;

    memset(&rr, 0, sizeof(rr));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "collection name has invalid type %s",
                 shl_iter_key(&it)[0] != '\0' ? shl_bson_type_name(shl_iter_type(&it)) : "");
    }
    snprintf(ns, sizeof(ns), "%s.%s", op->db, bson_iter_utf8(&it, NULL));
    SHL_ERR(coll_stats_scale(cmd, &scale, st));
    ret = shl_router_scatter(r, op, ns, NULL, router_build_copy_as, &as, &rr, &res, &n, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "Collection [%s] not found.", ns);
    }
    SHL_ERR(ret);
    for (size_t i = 0; i < n; i++) {
        const bson_t *b = &res[i].res.reply;
        int64_t count = shl_bson_int64_at(b, "count");
        bson_t one;
        if (res[i].res.code != 0) {
            *st = res[i].res.status;
            SHL_ERR(st->code);
        }
        bson_iter_init(&it, b);
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            size_t s;
            for (s = 0; s < N_SUMMED && strcmp(k, k_summed[s]) != 0; s++) {
            }
            if (s < N_SUMMED) {
                sums[s] += bson_iter_as_int64(&it);
            } else if (is_any(k, k_first)) {
                bson_iter_t seen;
                if (!bson_iter_init_find(&seen, &first, k)) {
                    bson_append_iter(&first, NULL, 0, &it);
                }
            } else if (strcmp(k, "avgObjSize") == 0) {
                unscaled += (double)bson_iter_as_int64(&it) * (double)count;
            } else if (strcmp(k, "maxSize") == 0) {
                max_size = bson_iter_as_int64(&it) > max_size ? bson_iter_as_int64(&it) : max_size;
            } else if (strcmp(k, "indexSizes") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
                bson_iter_t idx;
                bson_iter_recurse(&it, &idx);
                while (shl_iter_next(&idx)) {
                    index_size_add(&sizes, &nsizes, shl_iter_key(&idx), bson_iter_as_int64(&idx));
                }
            } else if (strcmp(k, "nindexes") == 0) {
                int32_t mine = (int32_t)bson_iter_as_int64(&it);
                if (nindexes != 0 && mine != nindexes) {
                    warned = true; /* an index build on some shards, hopefully */
                }
                nindexes = mine > nindexes ? mine : nindexes;
            }
        }
        BSON_APPEND_DOCUMENT_BEGIN(&shards, res[i].shard, &one);
        append_scaled_shard(b, scale, &one);
        bson_append_document_end(&shards, &one);
    }
    BSON_APPEND_BOOL(reply, "sharded", rr.rt != NULL);
    if (rr.rt == NULL) {
        BSON_APPEND_UTF8(reply, "primary", rr.db.primary);
    }
    bson_concat(reply, &first);
    if (warned) {
        BSON_APPEND_UTF8(reply, "warning",
                         "indexes don't all match - ok if ensureIndex is running");
    }
    BSON_APPEND_UTF8(reply, "ns", ns);
    for (size_t s = 0; s < N_SUMMED; s++) {
        bool scaled = is_any(k_summed[s], k_scaled);
        BSON_APPEND_INT64(reply, k_summed[s], scaled ? sums[s] / scale : sums[s]);
    }
    qsort(sizes, nsizes, sizeof(*sizes), index_size_cmp);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "indexSizes", &isz);
    for (size_t i = 0; i < nsizes; i++) {
        bson_append_int64(&isz, sizes[i].name, -1, sizes[i].size / scale);
    }
    bson_append_document_end(reply, &isz);
    /* The shards' averages are unscaled, so the mean of them is too. */
    BSON_APPEND_DOUBLE(reply, "avgObjSize", sums[0] > 0 ? unscaled / (double)sums[0] : 0.0);
    BSON_APPEND_INT64(reply, "maxSize", max_size / scale);
    BSON_APPEND_INT32(reply, "nindexes", nindexes);
    BSON_APPEND_INT32(reply, "scaleFactor", (int32_t)scale);
    BSON_APPEND_INT32(reply, "nchunks",
                      rr.rt != NULL ? (int32_t)shl_routing_table_nchunks(rr.rt) : 1);
    BSON_APPEND_DOCUMENT(reply, "shards", &shards);
done:
    for (size_t i = 0; i < nsizes; i++) {
        bson_free(sizes[i].name);
    }
    bson_free(sizes);
    shl_router_scatter_results_free(res, n);
    shl_router_routing_cleanup(&rr);
    bson_destroy(&first);
    bson_destroy(&shards);
    return ret;
}

/* ---- getShardMap ---- */

/* Add {host: name} to 'hosts' for each host of connection string 'cs' ("set/h1,h2" or "h1,h2"). */
static void
add_hosts(bson_t *hosts, const char *cs, const char *name)
{
    const char *p = strchr(cs, '/');
    p = p != NULL ? p + 1 : cs;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len > 0) {
            bson_append_utf8(hosts, p, (int)len, name, -1);
        }
        p += len;
        if (*p == ',') {
            p++;
        }
    }
}

/*
 * getShardMap: every shard's and the config server's connection string by name (map), the
 * owner of each host (hosts), and the name behind each connection string (connStrings),
 * read from config.shards.
 */
static int
cmd_get_shard_map(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    bson_t list_cmd = BSON_INITIALIZER, listed = BSON_INITIALIZER;
    bson_t map = BSON_INITIALIZER, hosts = BSON_INITIALIZER, conns = BSON_INITIALIZER;
    bson_iter_t it, shards, f;
    int ret = 0;
    (void)cmd;

    BSON_APPEND_INT32(&list_cmd, "listShards", 1);
    SHL_ERR(shl_router_forward_to_config(r, op, &list_cmd, &listed, st));
    if (bson_iter_init_find(&it, &listed, "shards") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &shards)) {
        while (shl_iter_next(&shards)) {
            const char *name = NULL, *host = NULL;
            if (!BSON_ITER_HOLDS_DOCUMENT(&shards) || !bson_iter_recurse(&shards, &f)) {
                continue;
            }
            while (shl_iter_next(&f)) {
                if (strcmp(shl_iter_key(&f), "_id") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                    name = bson_iter_utf8(&f, NULL);
                } else if (strcmp(shl_iter_key(&f), "host") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                    host = bson_iter_utf8(&f, NULL);
                }
            }
            if (name == NULL || host == NULL) {
                continue;
            }
            BSON_APPEND_UTF8(&map, name, host);
            add_hosts(&hosts, host, name);
            BSON_APPEND_UTF8(&conns, host, name);
        }
    }
    BSON_APPEND_UTF8(&map, "config", r->configdb);
    add_hosts(&hosts, r->configdb, "config");
    BSON_APPEND_UTF8(&conns, r->configdb, "config");
    BSON_APPEND_DOCUMENT(reply, "map", &map);
    BSON_APPEND_DOCUMENT(reply, "hosts", &hosts);
    BSON_APPEND_DOCUMENT(reply, "connStrings", &conns);
done:
    bson_destroy(&list_cmd);
    bson_destroy(&listed);
    bson_destroy(&map);
    bson_destroy(&hosts);
    bson_destroy(&conns);
    return ret;
}

/* ---- balancer ---- */

/*
 * balancerStatus / balancerStart / balancerStop: forwarded to the config server, which runs the
 * balancer (src/config/configsvr_balancer.c) and answers {mode, inBalancerRound,
 * numBalancerRounds}; balancerStop answers once the round in progress has ended.
 */
static int
forward_balancer(shl_op_ctx_t *op, const char *name, bson_t *reply, shl_status_t *st)
{
    bson_t fwd = BSON_INITIALIZER, wc;
    int ret;

    BSON_APPEND_INT32(&fwd, name, 1);
    BSON_APPEND_DOCUMENT_BEGIN(&fwd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&fwd, &wc);
    ret = shl_router_forward_to_config(shl_router_get(op), op, &fwd, reply, st);
    bson_destroy(&fwd);
    return ret;
}

static int
cmd_balancer_status(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)cmd;
    return forward_balancer(op, "_configsvrBalancerStatus", reply, st);
}

int
router_write_setting(shl_op_ctx_t *op, const char *id, const bson_t *u, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    bson_t upd = BSON_INITIALIZER, res = BSON_INITIALIZER, arr, one, q, wc;
    int64_t remaining = shl_op_remaining_ms(op);
    int ret = 0;

    BSON_APPEND_UTF8(&upd, "update", "settings");
    BSON_APPEND_ARRAY_BEGIN(&upd, "updates", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &one);
    BSON_APPEND_DOCUMENT_BEGIN(&one, "q", &q);
    BSON_APPEND_UTF8(&q, "_id", id);
    bson_append_document_end(&one, &q);
    BSON_APPEND_DOCUMENT(&one, "u", u);
    BSON_APPEND_BOOL(&one, "upsert", true);
    bson_append_document_end(&arr, &one);
    bson_append_array_end(&upd, &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&upd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&upd, &wc);
    bson_destroy(&res);
    /* The one reply-to-status policy: writeErrors and writeConcernError fail it too. */
    SHL_ERR(shl_remote_run_config(
        &r->remote, "config", &upd,
        &(shl_remote_options_t){
            .timeout_ms =
                remaining < 0 ? SHL_CONFIG_CMD_TIMEOUT_MS : (remaining == 0 ? 1 : remaining)},
        &res, st));
done:
    bson_destroy(&upd);
    bson_destroy(&res);
    return ret;
}

static int
cmd_balancer_start(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)cmd;
    return forward_balancer(op, "_configsvrBalancerStart", reply, st);
}

static int
cmd_balancer_stop(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)cmd;
    return forward_balancer(op, "_configsvrBalancerStop", reply, st);
}

static const shl_command_t k_stats_commands[] = {
    {"dbStats", {"dbstats"}, cmd_db_stats, 0, "database statistics summed over the shards"},
    {"collStats", {"collstats"}, cmd_coll_stats, 0, "collection statistics over its shards"},
    {"getShardMap",
     {NULL},
     cmd_get_shard_map,
     SHL_CMD_ADMIN_ONLY,
     "the connection strings and hosts of the shards and the config server"},
    {"balancerStatus",
     {NULL},
     cmd_balancer_status,
     SHL_CMD_ADMIN_ONLY,
     "the balancer's mode, whether it is in a round, its rounds"},
    {"balancerStart", {NULL}, cmd_balancer_start, SHL_CMD_ADMIN_ONLY, "set the balancer on"},
    {"balancerStop", {NULL}, cmd_balancer_stop, SHL_CMD_ADMIN_ONLY, "set the balancer off"},
};

void
shl_cluster_stats_commands_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(k_stats_commands) / sizeof(k_stats_commands[0]); i++) {
        shl_command_registry_add(reg, &k_stats_commands[i]);
    }
}
