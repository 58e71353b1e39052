/*
 * cluster_admin.c -- the router's sharding admin commands. Each is forwarded to the config
 * server as its internal _configsvr* form (docs/design/sharding-protocol.md); after one that
 * changes a collection's or database's routing, the router forgets its cached entry so its
 * next request routes with the new metadata.
 */
#include <string.h>

#include "base/log.h"
#include "base/namespace.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "router/cluster_routing.h"
#include "router/router_commands.h"
#include "router/router_private.h"
#include "net/command_args.h"
#include "sharding/sharding_types.h"

/* Fields of the user's command that are not forwarded to the config server. */
static bool
is_dropped_field(const char *k)
{
    static const char *const drop[] = {
        "$db",          "lsid",        "$clusterTime",  "$readPreference",
        "writeConcern", "$configTime", "$topologyTime", NULL};
    for (size_t i = 0; drop[i] != NULL; i++) {
        if (strcmp(k, drop[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* Run 'cmd' on the config server as 'name' (its first field renamed), w: majority. */
static int
forward_renamed(shl_op_ctx_t *op, const bson_t *cmd, const char *name, bson_t *reply,
                shl_status_t *st)
{
    bson_t fwd = BSON_INITIALIZER, wc;
    bson_iter_t it;
    bool first = true;
    int ret = 0;

    if (bson_iter_init(&it, cmd)) {
        while (shl_iter_next(&it)) {
            if (first) {
                bson_append_value(&fwd, name, -1, bson_iter_value(&it));
                first = false;
            } else if (!is_dropped_field(shl_iter_key(&it))) {
                bson_append_iter(&fwd, NULL, 0, &it);
            }
        }
    }
    BSON_APPEND_DOCUMENT_BEGIN(&fwd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&fwd, &wc);
    ret = shl_router_forward_to_config(shl_router_get(op), op, &fwd, reply, st);
    bson_destroy(&fwd);
    return ret;
}

/* The first field as a namespace string, or InvalidNamespace / TypeMismatch. */
static int
ns_arg(const bson_t *cmd, const char **ns, shl_status_t *st)
{
    bson_iter_t it;
    shl_ns_t parsed;
    int ret = 0;

    *ns = NULL;
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "the namespace must be of type string");
    }
    *ns = bson_iter_utf8(&it, NULL);
    SHL_ERR(shl_ns_parse(&parsed, *ns, st));
done:
    return ret;
}

static int
cmd_add_shard(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = forward_renamed(op, cmd, "_configsvrAddShard", reply, st);
    shl_shard_registry_invalidate(shl_router_get(op)->registry);
    return ret;
}

static int
cmd_list_shards(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return forward_renamed(op, cmd, "listShards", reply, st);
}

/* setUserWriteBlockMode {global}: the config server coordinates every shard
 * (docs/design/user_write_blocking.md). */
static int
cmd_set_user_write_block_mode(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    if (!bson_iter_init_find(&it, cmd, "global")) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'setUserWriteBlockMode.global' is missing but a required field");
    }
    if (!BSON_ITER_HOLDS_BOOL(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'setUserWriteBlockMode.global' is the wrong type '%s', expected "
                 "type 'bool'",
                 shl_bson_type_name(bson_iter_type(&it)));
    }
    ret = forward_renamed(op, cmd, "_configsvrSetUserWriteBlockMode", reply, st);
done:
    return ret;
}

static int
cmd_remove_shard(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = forward_renamed(op, cmd, "_configsvrRemoveShard", reply, st);
    shl_shard_registry_invalidate(shl_router_get(op)->registry);
    return ret;
}

static int
cmd_enable_sharding(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_t ignored = BSON_INITIALIZER;
    bson_iter_t it;
    int ret = 0;

    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "'enableSharding' must be of type string");
    }
    SHL_ERR(forward_renamed(op, cmd, "_configsvrCreateDatabase", &ignored, st));
    shl_catalog_cache_invalidate_database(shl_router_get(op)->cache, bson_iter_utf8(&it, NULL));
    (void)reply; /* MongoDB's reply is just ok: 1 */
done:
    bson_destroy(&ignored);
    return ret;
}

/* Forward a collection-level admin command, then drop the cached routing of its ns. */
static int
forward_for_ns(shl_op_ctx_t *op, const bson_t *cmd, const char *name, bson_t *reply,
               shl_status_t *st)
{
    const char *ns;
    int ret = 0;

    SHL_ERR(ns_arg(cmd, &ns, st));
    ret = forward_renamed(op, cmd, name, reply, st);
    shl_catalog_cache_invalidate_collection(shl_router_get(op)->cache, ns);
done:
    return ret;
}

/* shardCollection's fields the primary shard's _shardsvrCreateCollection takes, by its
 * names. */
static const struct {
    const char *user, *internal;
} k_shard_coll_fields[] = {
    {"key", "shardKey"},
    {"unique", "unique"},
    {"numInitialChunks", "numInitialChunks"},
    {"collation", "collation"},
    {"writeConcern", "writeConcern"},
};

typedef struct shard_coll_body {
    const char *coll;
    const bson_t *cmd;
} shard_coll_body_t;

static void
build_create_collection(void *arg, const shl_cached_database_t *db, bson_t *out)
{
    shard_coll_body_t *b = arg;
    bson_iter_t it;
    bson_t wc;

    (void)db;
    BSON_APPEND_UTF8(out, "_shardsvrCreateCollection", b->coll);
    for (size_t k = 0; k < sizeof k_shard_coll_fields / sizeof k_shard_coll_fields[0]; k++) {
        if (bson_iter_init_find(&it, b->cmd, k_shard_coll_fields[k].user)) {
            bson_append_iter(out, k_shard_coll_fields[k].internal, -1, &it);
        }
    }
    if (!bson_has_field(out, "writeConcern")) {
        BSON_APPEND_DOCUMENT_BEGIN(out, "writeConcern", &wc);
        BSON_APPEND_UTF8(&wc, "w", "majority");
        bson_append_document_end(out, &wc);
    }
}

/*
 * shardCollection: the database is created first (the config server picks its primary),
 * then the primary shard's createCollection coordinator shards the collection
 * (_shardsvrCreateCollection, MongoDB 7.0). admin and config collections stay with the
 * config server.
 */
static int
cmd_shard_collection(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    const char *ns_str = NULL;
    shl_ns_t ns;
    shard_coll_body_t b;
    bson_t key, got = BSON_INITIALIZER;
    bool found = false;
    int ret = 0;

    SHL_ERR(ns_arg(cmd, &ns_str, st));
    SHL_ERR(shl_ns_parse(&ns, ns_str, st));
    if (strcmp(ns.db, "admin") == 0 || strcmp(ns.db, "config") == 0) {
        SHL_ERR(forward_for_ns(op, cmd, "_configsvrShardCollection", reply, st));
        goto done;
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "key", &key, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'shardCollection.key' is missing but a required field");
    }
    SHL_ERR(shl_router_create_database(r, ns.db, st));
    b.coll = ns.coll;
    b.cmd = cmd;
    bson_destroy(&got);
    ret = router_send_to_primary(op, ns.db, ns.full, build_create_collection, &b, &found, &got,
                                 NULL, 0, st);
    shl_catalog_cache_invalidate_collection(r->cache, ns.full);
    SHL_ERR(ret);
    if (!found) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "database %s not found", ns.db);
    }
    shl_router_copy_reply_fields(&got, reply);
done:
    bson_destroy(&got);
    return ret;
}

static int
cmd_split(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return forward_for_ns(op, cmd, "_configsvrSplitChunk", reply, st);
}

static int
cmd_configure_coll_balancing(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return forward_for_ns(op, cmd, "_configsvrConfigureCollectionBalancing", reply, st);
}

static int
cmd_merge_chunks(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return forward_for_ns(op, cmd, "_configsvrCommitChunksMerge", reply, st);
}

static int
cmd_clear_jumbo(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return forward_for_ns(op, cmd, "_configsvrClearJumboFlag", reply, st);
}

static void
build_refine(void *arg, const shl_cached_database_t *db, bson_t *out)
{
    shard_coll_body_t *b = arg;
    bson_iter_t it;
    bson_t wc;

    (void)db;
    BSON_APPEND_UTF8(out, "_shardsvrRefineCollectionShardKey", b->coll);
    if (bson_iter_init_find(&it, b->cmd, "key")) {
        bson_append_iter(out, "newShardKey", -1, &it);
    }
    if (bson_iter_init_find(&it, b->cmd, "writeConcern")) {
        bson_append_iter(out, "writeConcern", -1, &it);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(out, "writeConcern", &wc);
        BSON_APPEND_UTF8(&wc, "w", "majority");
        bson_append_document_end(out, &wc);
    }
}

/* refineCollectionShardKey: the primary shard's coordinator (MongoDB 7.0's
 * _shardsvrRefineCollectionShardKey). */
static int
cmd_refine(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    const char *ns_str = NULL;
    shl_ns_t ns;
    shard_coll_body_t b;
    bson_t key, got = BSON_INITIALIZER;
    bool found = false;
    int ret = 0;

    (void)reply;
    SHL_ERR(ns_arg(cmd, &ns_str, st));
    SHL_ERR(shl_ns_parse(&ns, ns_str, st));
    if (strcmp(ns.db, "admin") == 0 || strcmp(ns.db, "config") == 0) {
        SHL_ERR(forward_for_ns(op, cmd, "_configsvrRefineCollectionShardKey", reply, st));
        goto done;
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "key", &key, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'refineCollectionShardKey.key' is missing but a required field");
    }
    b.coll = ns.coll;
    b.cmd = cmd;
    bson_destroy(&got);
    ret = router_send_to_primary(op, ns.db, ns.full, build_refine, &b, &found, &got, NULL, 0, st);
    shl_catalog_cache_invalidate_collection(r->cache, ns.full);
    SHL_ERR(ret);
    if (!found) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "database %s not found", ns.db);
    }
done:
    bson_destroy(&got);
    return ret;
}

/* Build _configsvrMoveRange from moveChunk / moveRange (renamed fields), forward it, then
 * forget the collection's routing (the chunk moved). */
static int
forward_move(shl_op_ctx_t *op, const bson_t *cmd, bool is_move_chunk, bson_t *reply,
             shl_status_t *st)
{
    int ret = 0;
    const char *ns = NULL;
    bson_t fwd = BSON_INITIALIZER;
    bson_iter_t it;
    bool has_to = false, has_find = false, has_bounds = false, has_min = false, has_max = false;
    bool throttle = false;

    SHL_ERR(ns_arg(cmd, &ns, st));
    BSON_APPEND_UTF8(&fwd, "_configsvrMoveRange", ns);
    bson_iter_init(&it, cmd);
    shl_iter_next(&it);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (is_dropped_field(k)) {
            continue;
        }
        if (is_move_chunk && strcmp(k, "to") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'moveChunk.to' is the wrong type, expected type 'string'");
            }
            BSON_APPEND_UTF8(&fwd, "toShard", bson_iter_utf8(&it, NULL));
            has_to = true;
        } else if (!is_move_chunk && strcmp(k, "toShard") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'moveRange.toShard' is the wrong type, expected type "
                         "'string'");
            }
            bson_append_iter(&fwd, NULL, 0, &it);
            has_to = true;
        } else if (is_move_chunk && strcmp(k, "_waitForDelete") == 0) {
            BSON_APPEND_BOOL(&fwd, "waitForDelete", bson_iter_as_bool(&it));
        } else if (strcmp(k, is_move_chunk ? "_secondaryThrottle" : "secondaryThrottle") == 0) {
            throttle = bson_iter_as_bool(&it);
        } else if (strcmp(k, "waitForDelete") == 0 || strcmp(k, "forceJumbo") == 0 ||
                   strcmp(k, "secondaryThrottle") == 0 || strcmp(k, "maxChunkSizeBytes") == 0) {
            bson_append_iter(&fwd, NULL, 0, &it);
        } else if (is_move_chunk && (strcmp(k, "find") == 0 || strcmp(k, "bounds") == 0)) {
            bson_append_iter(&fwd, NULL, 0, &it);
            has_find |= strcmp(k, "find") == 0;
            has_bounds |= strcmp(k, "bounds") == 0;
        } else if (!is_move_chunk && (strcmp(k, "min") == 0 || strcmp(k, "max") == 0)) {
            bson_append_iter(&fwd, NULL, 0, &it);
            has_min |= strcmp(k, "min") == 0;
            has_max |= strcmp(k, "max") == 0;
        } else if (strcmp(k, "maxTimeMS") == 0 || strcmp(k, "comment") == 0 ||
                   strcmp(k, "_secondaryThrottle") == 0) {
            /* generic or legacy: not forwarded */
        } else {
            SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD, "BSON field '%s.%s' is an unknown field.",
                     is_move_chunk ? "moveChunk" : "moveRange", k);
        }
    }
    if (!has_to) {
        SHL_ERR(shl_idl_missing(is_move_chunk ? "moveChunk" : "moveRange",
                                is_move_chunk ? "to" : "toShard", st));
    }
    if (is_move_chunk && (int)has_find + (int)has_bounds != 1) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "need to specify either a find query, or both lower and upper bounds.");
    }
    if (!is_move_chunk && !has_min && !has_max) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Missing required parameter 'min' or 'max'");
    }
    if (throttle) {
        /* The recipient waits for the user's writeConcern (else w: "majority") on its set
         * after each cloned batch (migration_throttle.c). */
        if (bson_iter_init_find(&it, cmd, "writeConcern") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_append_iter(&fwd, "secondaryThrottle", -1, &it);
        } else {
            BSON_APPEND_BOOL(&fwd, "secondaryThrottle", true);
        }
    }
    {
        bson_t wc;
        BSON_APPEND_DOCUMENT_BEGIN(&fwd, "writeConcern", &wc);
        BSON_APPEND_UTF8(&wc, "w", "majority");
        bson_append_document_end(&fwd, &wc);
    }
    ret = shl_router_forward_to_config(shl_router_get(op), op, &fwd, reply, st);
    shl_catalog_cache_invalidate_collection(shl_router_get(op)->cache, ns);
done:
    bson_destroy(&fwd);
    return ret;
}

static int
cmd_move_chunk(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return forward_move(op, cmd, true, reply, st);
}

static int
cmd_move_range(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return forward_move(op, cmd, false, reply, st);
}

/* The command for the primary shard: {_shardsvrMovePrimary: <db>, to, writeConcern}. */
typedef struct move_primary_req {
    const char *db, *to;
} move_primary_req_t;

static void
build_move_primary(void *arg, const shl_cached_database_t *db, bson_t *out)
{
    const move_primary_req_t *m = arg;
    bson_t wc;

    (void)db;
    BSON_APPEND_UTF8(out, "_shardsvrMovePrimary", m->db);
    BSON_APPEND_UTF8(out, "to", m->to);
    BSON_APPEND_DOCUMENT_BEGIN(out, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(out, &wc);
}

/*
 * movePrimary: db, to -> _shardsvrMovePrimary to the database's primary shard with its
 * databaseVersion (MongoDB 7.0's flow; StaleDbVersion: refresh and retry), which takes the
 * database's DDL lock, moves the data and has the config server commit the new primary.
 * Whatever the outcome, the router forgets its entry of the database, so its next request
 * learns the primary anew.
 */
static int
cmd_move_primary(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    move_primary_req_t m = {NULL, NULL};
    bson_iter_t it;
    bson_t got = BSON_INITIALIZER;
    bool found = false;
    int ret = 0;

    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "'movePrimary' must be of type string");
    }
    m.db = bson_iter_utf8(&it, NULL);
    if (!bson_iter_init_find(&it, cmd, "to")) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'movePrimary.to' is missing but a required field");
    }
    if (!BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_ERR(shl_idl_wrong_type(&it, "movePrimary", "string", st));
    }
    m.to = bson_iter_utf8(&it, NULL);
    if (strcmp(m.db, "admin") == 0 || strcmp(m.db, "config") == 0 || strcmp(m.db, "local") == 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Can't move primary for %s database", m.db);
    }
    if (m.db[0] == '\0' || shl_ns_check_db(m.db, st) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "invalid db name specified: %s", m.db);
    }
    if (m.to[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "you have to specify where you want to move it");
    }
    bson_destroy(&got);
    ret = router_send_to_primary(op, m.db, m.db, build_move_primary, &m, &found, &got, NULL, 0, st);
    shl_catalog_cache_invalidate_database(shl_router_get(op)->cache, m.db);
    SHL_ERR(ret);
    if (!found) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "Database %s not found", m.db);
    }
done:
    (void)reply;
    bson_destroy(&got);
    return ret;
}

static int
cmd_flush_router_config(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    bson_iter_t it;
    (void)st;

    if (bson_iter_init(&it, cmd) && shl_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it)) {
        const char *what = bson_iter_utf8(&it, NULL);
        if (strchr(what, '.') != NULL) {
            shl_catalog_cache_invalidate_collection(r->cache, what);
        } else {
            shl_catalog_cache_invalidate_database(r->cache, what);
        }
    } else {
        shl_catalog_cache_purge(r->cache);
        shl_shard_registry_invalidate(r->registry);
    }
    BSON_APPEND_BOOL(reply, "flushed", true);
    return 0;
}

/* addShardToZone / removeShardFromZone: shard, zone -> the config server's _configsvr* form;
 * the shards' zones are in config.shards, which the router does not cache. */
static int
cmd_add_shard_to_zone(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return forward_renamed(op, cmd, "_configsvrAddShardToZone", reply, st);
}

static int
cmd_remove_shard_from_zone(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return forward_renamed(op, cmd, "_configsvrRemoveShardFromZone", reply, st);
}

/* updateZoneKeyRange: ns, min, max, zone (null removes the range) -> config.tags. Routing is
 * unchanged (zones only guide the balancer), so nothing cached is dropped. */
static int
cmd_update_zone_key_range(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    const char *ns;
    int ret = 0;

    SHL_ERR(ns_arg(cmd, &ns, st));
    ret = forward_renamed(op, cmd, "_configsvrUpdateZoneKeyRange", reply, st);
done:
    return ret;
}

/* balancerCollectionStatus: ns -> {chunkSize, balancerCompliant, firstComplianceViolation?}. */
static int
cmd_balancer_collection_status(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    const char *ns;
    int ret = 0;

    SHL_ERR(ns_arg(cmd, &ns, st));
    ret = forward_renamed(op, cmd, "_configsvrBalancerCollectionStatus", reply, st);
done:
    return ret;
}

static const shl_command_t k_admin_commands[] = {
    {"addShard", {"addshard"}, cmd_add_shard, SHL_CMD_ADMIN_ONLY, "add a shard to the cluster"},
    {"listShards", {"listshards"}, cmd_list_shards, SHL_CMD_ADMIN_ONLY, "list the shards"},
    {"setUserWriteBlockMode",
     {NULL},
     cmd_set_user_write_block_mode,
     SHL_CMD_ADMIN_ONLY,
     "block or allow user writes cluster-wide"},
    {"removeShard",
     {"removeshard"},
     cmd_remove_shard,
     SHL_CMD_ADMIN_ONLY,
     "drain and remove a shard"},
    {"enableSharding",
     {"enablesharding"},
     cmd_enable_sharding,
     SHL_CMD_ADMIN_ONLY,
     "create a database in the sharding catalog"},
    {"shardCollection",
     {"shardcollection"},
     cmd_shard_collection,
     SHL_CMD_ADMIN_ONLY,
     "shard a collection"},
    {"split", {NULL}, cmd_split, SHL_CMD_ADMIN_ONLY, "split a chunk"},
    {"mergeChunks", {NULL}, cmd_merge_chunks, SHL_CMD_ADMIN_ONLY, "merge contiguous chunks"},
    {"clearJumboFlag", {NULL}, cmd_clear_jumbo, SHL_CMD_ADMIN_ONLY, "clear a chunk's jumbo flag"},
    {"configureCollectionBalancing",
     {NULL},
     cmd_configure_coll_balancing,
     SHL_CMD_ADMIN_ONLY,
     "a sharded collection's chunk size and auto-merge setting"},
    {"refineCollectionShardKey",
     {NULL},
     cmd_refine,
     SHL_CMD_ADMIN_ONLY,
     "add suffix fields to a shard key"},
    {"moveChunk", {"movechunk"}, cmd_move_chunk, SHL_CMD_ADMIN_ONLY, "move a chunk to a shard"},
    {"moveRange", {NULL}, cmd_move_range, SHL_CMD_ADMIN_ONLY, "move a range to a shard"},
    {"movePrimary",
     {"moveprimary"},
     cmd_move_primary,
     SHL_CMD_ADMIN_ONLY,
     "move a database's unsharded collections to another shard"},
    {"addShardToZone",
     {"addshardtozone"},
     cmd_add_shard_to_zone,
     SHL_CMD_ADMIN_ONLY,
     "add a shard to a zone"},
    {"removeShardFromZone",
     {"removeshardfromzone"},
     cmd_remove_shard_from_zone,
     SHL_CMD_ADMIN_ONLY,
     "remove a shard from a zone"},
    {"updateZoneKeyRange",
     {"updatezonekeyrange"},
     cmd_update_zone_key_range,
     SHL_CMD_ADMIN_ONLY,
     "assign a range of a collection's shard key to a zone, or remove it"},
    {"balancerCollectionStatus",
     {NULL},
     cmd_balancer_collection_status,
     SHL_CMD_ADMIN_ONLY,
     "whether a collection's chunks are where the balancer wants them"},
    {"flushRouterConfig",
     {"flushrouterconfig"},
     cmd_flush_router_config,
     SHL_CMD_ADMIN_ONLY,
     "forget cached routing information"},
};

void
shl_cluster_admin_commands_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(k_admin_commands) / sizeof(k_admin_commands[0]); i++) {
        shl_command_registry_add(reg, &k_admin_commands[i]);
    }
}
