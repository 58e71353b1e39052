/*
 * cluster_ddl.c -- the router's DDL and catalog commands (issue 6 item 3 "DDL";
 * docs/design/sharding-protocol.md): create, drop, dropDatabase, createIndexes, dropIndexes,
 * collMod, listIndexes, listCollections, listDatabases and renameCollection. Collection
 * commands go to the database's primary shard (unsharded) or to every shard owning chunks
 * plus the primary (sharded), with versions attached and the stale retry loop; drop and
 * dropDatabase go to the primary shard as _shardsvrDropCollection / _shardsvrDropDatabase,
 * whose coordinator drops everywhere (shard/ddl_coordinators.h).
 */
#include <string.h>

#include "base/log.h"
#include "base/str.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/command_args.h"
#include "query/matcher.h"
#include "router/cluster_routing.h"
#include "router/router_commands.h"
#include "router/router_private.h"
#include "sharding/chunk_version.h"

/* Which shards a collection command goes to. */
typedef enum {
    TO_PRIMARY,            /* the database's primary shard */
    TO_OWNERS_AND_PRIMARY, /* every shard owning chunks, plus the primary */
    TO_ONE_OWNER,          /* the primary if it owns chunks (or unsharded), else one owner */
} ddl_target_t;

/* Which versions a request carries. */
typedef enum { VERS_FULL, VERS_DB_ONLY } ddl_versions_t;

/* Fields of the user's command a shard must not see again (the router adds its own). */
static bool
is_router_field(const char *k)
{
    static const char *const skip[] = {
        "$db",           "$clusterTime", "$readPreference", "$configTime",
        "$topologyTime", "shardVersion", "databaseVersion", NULL};
    for (size_t i = 0; skip[i] != NULL; i++) {
        if (strcmp(k, skip[i]) == 0) {
            return true;
        }
    }
    return false;
}

static void
copy_passthrough(const bson_t *cmd, bson_t *out)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, cmd)) {
        return;
    }
    while (shl_iter_next(&it)) {
        if (!is_router_field(shl_iter_key(&it))) {
            bson_append_iter(out, NULL, 0, &it);
        }
    }
}

/* The collection namespace of a command whose first field is the collection name. */
static int
coll_ns(shl_op_ctx_t *op, const bson_t *cmd, char *ns, size_t n, shl_status_t *st)
{
    bson_iter_t it;
    shl_ns_t parsed;
    int ret = 0;

    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "collection name has invalid type");
    }
    snprintf(ns, n, "%s.%s", op->db, bson_iter_utf8(&it, NULL));
    SHL_ERR(shl_ns_parse(&parsed, ns, st));
done:
    return ret;
}

static void
add_target(shl_router_shards_t *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(s->names[i], name) == 0) {
            return;
        }
    }
    s->names[s->n++] = name;
}

static void
targets_for(const shl_router_routing_t *rr, ddl_target_t which, shl_router_shards_t *out)
{
    size_t cap = rr->rt != NULL ? shl_routing_table_nshard_names(rr->rt) + 2 : 2;

    memset(out, 0, sizeof(*out));
    out->names = bson_malloc0(cap * sizeof(char *));
    if (rr->rt == NULL || which == TO_PRIMARY) {
        add_target(out, rr->db.primary);
        return;
    }
    if (which == TO_ONE_OWNER) {
        shl_chunk_version_t v = shl_routing_table_shard_version(rr->rt, rr->db.primary);
        if (v.major != 0 || v.minor != 0) {
            add_target(out, rr->db.primary);
            return;
        }
    }
    for (size_t i = 0; i < shl_routing_table_nshard_names(rr->rt); i++) {
        const char *name = shl_routing_table_shard_name(rr->rt, i);
        shl_chunk_version_t v = shl_routing_table_shard_version(rr->rt, name);
        if (v.major != 0 || v.minor != 0) {
            add_target(out, name);
            if (which == TO_ONE_OWNER) {
                return;
            }
        }
    }
    add_target(out, rr->db.primary);
}

/* ddl_send's adapters to the core's dispatch callbacks. */
static void
ddl_target(void *arg, const shl_router_routing_t *rr, shl_router_shards_t *out)
{
    targets_for(rr, *(const ddl_target_t *)arg, out);
}

static void
ddl_build(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    (void)rr;
    (void)shard;
    copy_passthrough(arg, cmd);
}

/*
 * Send 'cmd' (the user's, passed through) for 'ns' to the shards 'which' selects, with
 * versions, retrying on stale errors; 'prepare' (may be NULL) checks 'cmd' against the
 * routing at every attempt (its error ends the send). On success *results hold one reply per
 * shard (errors included); 'rr_out' (if not NULL) receives the routing used. Errors: routing
 * errors, prepare's, the last stale error.
 */
static int
ddl_send(shl_op_ctx_t *op, const char *ns, bool create_db, ddl_target_t which, ddl_versions_t vers,
         const bson_t *cmd, shl_router_prepare_fn prepare, shl_router_routing_t *rr_out,
         shl_router_shard_result_t **results, size_t *nresults, shl_status_t *st)
{
    shl_router_dispatch_t d = {
        .create_db = create_db,
        .prepare = prepare,
        .prepare_arg = (void *)(uintptr_t)cmd,
        .target = ddl_target,
        .target_arg = &which,
        .build = ddl_build,
        .build_arg = (void *)(uintptr_t)cmd,
        .versions = vers == VERS_FULL ? SHL_ROUTER_VERSIONS_FULL : SHL_ROUTER_VERSIONS_DB_ONLY,
    };

    return shl_router_dispatch(shl_router_get(op), op, ns, &d, rr_out, results, nresults, st);
}

/* The connection string of a shard as config.shards has it ("<name>/<host:port>"). */
static void
shard_conn_string(shl_router_t *r, const char *shard, char *out, size_t n)
{
    char host[SHL_CLIENT_HOST_MAX];
    shl_status_t ignored = SHL_STATUS_INIT;

    if (strcmp(shard, "config") == 0) {
        shl_str_copy(out, n, r->configdb); /* the config server's "csrs/host:port" */
    } else if (shl_shard_registry_host_for(r->registry, shard, host, sizeof(host), &ignored) == 0) {
        snprintf(out, n, "%s/%s", shard, host);
    } else {
        snprintf(out, n, "%s", shard);
    }
}

/* See router_private.h (shared with cluster_stats.c). */
int
router_append_raw(shl_router_t *r, shl_router_shard_result_t *res, size_t n, bson_t *reply,
                  shl_status_t *st)
{
    bson_t raw;
    char cs[SHL_CLIENT_HOST_MAX + SHL_SHARD_ID_MAX + 2];
    char msg[SHL_STATUS_REASON_MAX] = "";
    int code = 0, ret = 0;
    bool wce = false;

    BSON_APPEND_DOCUMENT_BEGIN(reply, "raw", &raw);
    for (size_t i = 0; i < n; i++) {
        bson_t one;
        shard_conn_string(r, res[i].shard, cs, sizeof(cs));
        BSON_APPEND_DOCUMENT_BEGIN(&raw, cs, &one);
        if (res[i].res.code != 0) {
            size_t len = strlen(msg);
            shl_status_append_reply(&res[i].res.status, &one);
            snprintf(msg + len, sizeof(msg) - len, "%s%s: %s", len ? "; " : "", cs,
                     res[i].res.status.reason);
            if (code == 0) {
                code = res[i].res.code;
            }
        } else {
            bson_iter_t it;
            shl_router_copy_reply_fields(&res[i].res.reply, &one);
            BSON_APPEND_DOUBLE(&one, "ok", 1.0);
            if (!wce && bson_iter_init_find(&it, &res[i].res.reply, "writeConcernError")) {
                wce = true;
            }
        }
        bson_append_document_end(&raw, &one);
    }
    bson_append_document_end(reply, &raw);
    if (code != 0) {
        ret = shl_status_set(st, code, "%s", msg);
    }
    for (size_t i = 0; i < n && wce && ret == 0; i++) {
        bson_iter_t it;
        if (res[i].res.code == 0 &&
            bson_iter_init_find(&it, &res[i].res.reply, "writeConcernError")) {
            bson_append_iter(reply, NULL, 0, &it);
            break;
        }
    }
    return ret;
}

/* ---- create / drop ---- */

static int
cmd_create(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    shl_router_shard_result_t *res = NULL;
    size_t n = 0;
    int ret = 0;

    SHL_ERR(coll_ns(op, cmd, ns, sizeof(ns), st));
    SHL_ERR(ddl_send(op, ns, true, TO_PRIMARY, VERS_DB_ONLY, cmd, NULL, NULL, &res, &n, st));
    if (res[0].res.code != 0) {
        *st = res[0].res.status;
        SHL_ERR(st->code);
    }
    shl_router_copy_reply_fields(&res[0].res.reply, reply);
done:
    shl_router_scatter_results_free(res, n);
    return ret;
}

int
router_send_to_primary(shl_op_ctx_t *op, const char *dbname, const char *ns,
                       router_primary_build_fn build, void *arg, bool *found, bson_t *reply,
                       char *primary, size_t nprimary, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    shl_cached_database_t db;
    shl_router_request_t req;
    shl_fanout_result_t res;
    bool sent = false;
    int ret = 0;

    *found = true;
    bson_init(reply);
    memset(&req, 0, sizeof(req));
    bson_init(&req.cmd);
    for (int attempt = 1;; attempt++) {
        ret = shl_catalog_cache_get_database(r->cache, dbname, &db, st);
        if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
            ret = 0;
            *found = false;
            goto done;
        }
        SHL_ERR(ret);
        bson_reinit(&req.cmd);
        build(arg, &db, &req.cmd);
        if (!shl_database_version_is_fixed(&db.version)) {
            shl_database_version_append(&req.cmd, "databaseVersion", &db.version);
        }
        req.shard = db.primary;
        if (sent) {
            shl_fanout_results_cleanup(&res, 1);
        }
        shl_router_send(r, op, dbname, &req, 1, &res);
        sent = true;
        if (res.code != 0 && shl_router_is_stale(r, ns, &res.status) &&
            attempt < SHL_ROUTER_MAX_STALE_RETRIES) {
            continue;
        }
        break;
    }
    if (res.code != 0) {
        *st = res.status;
        SHL_ERR(st->code);
    }
    bson_concat(reply, &res.reply);
    if (primary != NULL) {
        bson_strncpy(primary, db.primary, nprimary);
    }
done:
    if (sent) {
        shl_fanout_results_cleanup(&res, 1);
    }
    bson_destroy(&req.cmd);
    return ret;
}

/* A DDL command for the primary shard: 'body' with the user's writeConcern (else majority);
 * admin and config live on the config server, which gets the user's own command. */
typedef struct ddl_body {
    const bson_t *cmd;  /* the user's */
    const bson_t *body; /* the internal command */
} ddl_body_t;

static void
build_ddl_body(void *arg, const shl_cached_database_t *db, bson_t *out)
{
    ddl_body_t *b = arg;
    bson_iter_t it;
    bson_t wc;

    if (strcmp(db->primary, "config") == 0) {
        copy_passthrough(b->cmd, out);
    } else {
        bson_concat(out, b->body);
    }
    if (bson_has_field(out, "writeConcern")) {
        /* the user's, passed through */
    } else if (bson_iter_init_find(&it, b->cmd, "writeConcern")) {
        bson_append_iter(out, NULL, 0, &it);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(out, "writeConcern", &wc);
        BSON_APPEND_UTF8(&wc, "w", "majority");
        bson_append_document_end(out, &wc);
    }
}

/*
 * Send the DDL command 'body' (writeConcern added from the user's 'cmd', else majority) to
 * the database's primary shard with its databaseVersion, retrying when the routing was
 * stale; the primary shard's coordinator does the rest (issue 17 item 3). *found is false
 * when the database does not exist (nothing sent). On success 'reply' gets the shard's
 * reply fields. 'ns' names what a stale error invalidates.
 */
static int
send_to_primary(shl_op_ctx_t *op, const char *ns, const bson_t *cmd, const bson_t *body,
                bool *found, bson_t *reply, shl_status_t *st)
{
    ddl_body_t b = {cmd, body};
    bson_t got;
    int ret = router_send_to_primary(op, op->db, ns, build_ddl_body, &b, found, &got, NULL, 0, st);

    if (ret == 0) {
        shl_router_copy_reply_fields(&got, reply);
    }
    bson_destroy(&got);
    return ret;
}

static int
cmd_drop(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    char ns[SHL_NS_MAX + 1];
    bson_t body = BSON_INITIALIZER, got = BSON_INITIALIZER;
    bool found = false;
    int ret = 0;

    SHL_ERR(coll_ns(op, cmd, ns, sizeof(ns), st));
    BSON_APPEND_UTF8(&body, "_shardsvrDropCollection", ns + strlen(op->db) + 1);
    ret = send_to_primary(op, ns, cmd, &body, &found, &got, st);
    shl_catalog_cache_invalidate_collection(r->cache, ns);
    SHL_ERR(ret); /* MongoDB 7.0: dropping what does not exist succeeds */
    if (found) {
        BSON_APPEND_UTF8(reply, "ns", ns);
    }
done:
    bson_destroy(&body);
    bson_destroy(&got);
    return ret;
}

static int
cmd_drop_database(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    char ns[SHL_NS_MAX + 1];
    bson_t body = BSON_INITIALIZER, got = BSON_INITIALIZER;
    bool found = false;
    int ret = 0;

    if (strcmp(op->db, "admin") == 0 || strcmp(op->db, "config") == 0 ||
        strcmp(op->db, "local") == 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "Cannot drop the '%s' database", op->db);
    }
    snprintf(ns, sizeof(ns), "%s.$cmd", op->db);
    BSON_APPEND_INT32(&body, "_shardsvrDropDatabase", 1);
    ret = send_to_primary(op, ns, cmd, &body, &found, &got, st);
    shl_catalog_cache_invalidate_database(r->cache, op->db);
    SHL_ERR(ret); /* nothing to drop: ok */
    if (found) {
        BSON_APPEND_UTF8(reply, "dropped", op->db);
    }
done:
    bson_destroy(&body);
    bson_destroy(&got);
    return ret;
}

/* ---- indexes and collMod ---- */

/* Run 'cmd' on the shards owning the collection and its primary; 'fields' (NULL-terminated,
 * may be NULL) are copied into the reply from the first shard that answered with them. */
static int
run_on_owners(shl_op_ctx_t *op, const bson_t *cmd, bool create_db, bson_t *reply,
              const char *const *fields, shl_router_prepare_fn prepare, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    shl_router_shard_result_t *res = NULL;
    size_t n = 0;
    int ret = 0;

    SHL_ERR(coll_ns(op, cmd, ns, sizeof(ns), st));
    ret = ddl_send(op, ns, create_db, TO_OWNERS_AND_PRIMARY, VERS_FULL, cmd, prepare, NULL, &res,
                   &n, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND && !create_db) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "ns not found %s", ns);
    }
    SHL_ERR(ret);
    SHL_ERR(router_append_raw(shl_router_get(op), res, n, reply, st));
    for (size_t f = 0; fields != NULL && fields[f] != NULL; f++) {
        for (size_t i = 0; i < n; i++) {
            bson_iter_t it;
            if (res[i].res.code == 0 && bson_iter_init_find(&it, &res[i].res.reply, fields[f])) {
                bson_append_iter(reply, NULL, 0, &it);
                break;
            }
        }
    }
done:
    shl_router_scatter_results_free(res, n);
    return ret;
}

/*
 * createIndexes' check at every routing attempt: on a sharded collection a unique index must
 * start with the shard key (or _id), or uniqueness could not hold across shards.
 */
static int
unique_indexes_fit_key(void *arg, const shl_router_routing_t *rr, shl_status_t *st)
{
    const bson_t *cmd = arg;
    bson_iter_t it, specs;
    int ret = 0;

    if (rr->rt == NULL || !bson_iter_init_find(&it, cmd, "indexes") ||
        !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &specs)) {
        goto done; /* unsharded; a malformed list is the shards' to refuse */
    }
    while (shl_iter_next(&specs)) {
        bson_iter_t f, k;
        bson_t spec, key;
        uint32_t len;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&specs)) {
            continue;
        }
        bson_iter_document(&specs, &len, &data);
        if (!bson_init_static(&spec, data, len) || !bson_iter_init_find(&f, &spec, "unique") ||
            !bson_iter_as_bool(&f) || !bson_iter_init_find(&k, &spec, "key") ||
            !BSON_ITER_HOLDS_DOCUMENT(&k)) {
            continue;
        }
        bson_iter_document(&k, &len, &data);
        if (bson_init_static(&key, data, len) && !shl_shard_key_is_unique_index_compatible(
                                                     shl_routing_table_key_pattern(rr->rt), &key)) {
            char *a = shl_bson_to_string(&key);
            char *b = shl_bson_to_string(&shl_routing_table_key_pattern(rr->rt)->pattern);
            ret = shl_status_set(st, SHL_CODE_CANNOT_CREATE_INDEX,
                                 "cannot create unique index over %s with shard key pattern %s", a,
                                 b);
            bson_free(a);
            bson_free(b);
            goto done;
        }
    }
done:
    return ret;
}

static int
cmd_create_indexes(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return run_on_owners(op, cmd, true, reply, NULL, unique_indexes_fit_key, st);
}

/* dropIndexes: the primary shard takes the collection's DDL locks and broadcasts it with
 * shard versions (_shardsvrDropIndexes, MongoDB 6.0+); its reply has raw and nIndexesWas. */
static int
cmd_drop_indexes(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    bson_t body = BSON_INITIALIZER, got = BSON_INITIALIZER;
    bson_iter_t it;
    bool found = false;
    int ret = 0;

    SHL_ERR(coll_ns(op, cmd, ns, sizeof(ns), st));
    BSON_APPEND_UTF8(&body, "_shardsvrDropIndexes", ns + strlen(op->db) + 1);
    if (bson_iter_init_find(&it, cmd, "index")) {
        bson_append_iter(&body, NULL, 0, &it);
    }
    SHL_ERR(send_to_primary(op, ns, cmd, &body, &found, &got, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "ns not found %s", ns);
    }
    bson_concat(reply, &got);
done:
    bson_destroy(&body);
    bson_destroy(&got);
    return ret;
}

/* collMod: the primary shard's CollModCoordinator applies it on every shard holding the
 * collection (_shardsvrCollMod, MongoDB 7.0). */
static int
cmd_coll_mod(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    char ns[SHL_NS_MAX + 1];
    bson_t body = BSON_INITIALIZER, request = BSON_INITIALIZER, got = BSON_INITIALIZER;
    bson_iter_t it;
    bool found = false, first = true;
    int ret = 0;

    SHL_ERR(coll_ns(op, cmd, ns, sizeof(ns), st));
    if (bson_iter_init(&it, cmd)) {
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (!first && !shl_cmd_is_generic_arg(k) && !is_router_field(k)) {
                bson_append_iter(&request, k, -1, &it);
            }
            first = false;
        }
    }
    BSON_APPEND_UTF8(&body, "_shardsvrCollMod", ns + strlen(op->db) + 1);
    BSON_APPEND_DOCUMENT(&body, "collModRequest", &request);
    ret = send_to_primary(op, ns, cmd, &body, &found, &got, st);
    shl_catalog_cache_invalidate_collection(r->cache, ns);
    SHL_ERR(ret);
    if (!found) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "ns not found %s", ns);
    }
    bson_concat(reply, &got);
done:
    bson_destroy(&body);
    bson_destroy(&request);
    bson_destroy(&got);
    return ret;
}

/* ---- listing ---- */

/*
 * The collection a shard's cursor reply names in its ns ("$cmd.listCollections",
 * "$cmd.listIndexes.c"): what getMore on that shard must say.
 */
static void
remote_cursor_coll(const bson_t *reply, char *coll, size_t n)
{
    bson_iter_t it, cur;

    coll[0] = '\0';
    if (bson_iter_init_find(&it, reply, "cursor") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &cur) && bson_iter_find(&cur, "ns") && BSON_ITER_HOLDS_UTF8(&cur)) {
        const char *ns = bson_iter_utf8(&cur, NULL);
        const char *dot = strchr(ns, '.');
        snprintf(coll, n, "%s", dot != NULL ? dot + 1 : ns);
    }
}

/*
 * Serve the cursor a shard opened for a listing (its reply 'first') through a router cursor
 * named 'ns', batch by batch as the user asks: a database's collections or a collection's
 * indexes may be more than one reply can carry, so the router does not gather them into one.
 */
static int
reply_listing_cursor(shl_op_ctx_t *op, const char *ns, const char *shard, int64_t batch_size,
                     bool zero_batch, const bson_t *first, bson_t *reply, shl_status_t *st)
{
    shl_router_cursor_t *c = NULL;
    char coll[SHL_NS_MAX + 1];
    int ret = 0;

    remote_cursor_coll(first, coll, sizeof(coll));
    c = shl_router_cursor_new(shl_router_get(op), ns, op->db, coll);
    shl_router_cursor_set_session(c, op);
    /* admin and config live on the config server: a remote without a shard name. */
    SHL_ERR(
        shl_router_cursor_add_remote(c, strcmp(shard, "config") == 0 ? NULL : shard, first, st));
    ret = router_reply_cursor(op, c, batch_size, zero_batch, false, reply, st);
    c = NULL;
done:
    shl_router_cursor_destroy(c);
    return ret;
}

/* Append the router's cursor reply {cursor: {id: 0, ns, firstBatch}} from an array. */
static void
append_cursor(bson_t *reply, const char *ns, const bson_t *batch)
{
    bson_t cur;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_INT64(&cur, "id", 0);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    BSON_APPEND_ARRAY(&cur, "firstBatch", batch);
    bson_append_document_end(reply, &cur);
}

/* The user's command without its cursor options (the router serves the batches). */
static void
strip_cursor(const bson_t *cmd, bson_t *out)
{
    bson_init(out);
    bson_copy_to_excluding_noinit(cmd, out, "cursor", NULL);
}

static int
cmd_list_indexes(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    shl_router_shard_result_t *res = NULL;
    size_t n = 0;
    bson_t fwd;
    int64_t batch_size;
    bool zero_batch;
    int ret = 0;

    strip_cursor(cmd, &fwd);
    SHL_ERR(coll_ns(op, cmd, ns, sizeof(ns), st));
    SHL_ERR(router_cursor_batch_size(cmd, &batch_size, &zero_batch, st));
    ret = ddl_send(op, ns, false, TO_ONE_OWNER, VERS_FULL, &fwd, NULL, NULL, &res, &n, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "ns does not exist: %s", ns);
    }
    SHL_ERR(ret);
    if (res[0].res.code != 0) {
        *st = res[0].res.status;
        SHL_ERR(st->code);
    }
    SHL_ERR(reply_listing_cursor(op, ns, res[0].shard, batch_size, zero_batch, &res[0].res.reply,
                                 reply, st));
done:
    shl_router_scatter_results_free(res, n);
    bson_destroy(&fwd);
    return ret;
}

/* listCollections for the primary: the user's command without its cursor options. */
static void
build_list_collections(void *arg, const shl_cached_database_t *db, bson_t *out)
{
    bson_t tmp, pass = BSON_INITIALIZER;

    (void)db;
    copy_passthrough(arg, &pass);
    strip_cursor(&pass, &tmp);
    bson_concat(out, &tmp);
    bson_destroy(&tmp);
    bson_destroy(&pass);
}

static int
cmd_list_collections(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1], primary[SHL_SHARD_ID_MAX];
    bson_t empty = BSON_INITIALIZER, got = BSON_INITIALIZER;
    int64_t batch_size;
    bool zero_batch, found = false;
    int ret = 0;

    snprintf(ns, sizeof(ns), "%s.$cmd.listCollections", op->db);
    SHL_ERR(router_cursor_batch_size(cmd, &batch_size, &zero_batch, st));
    bson_destroy(&got);
    SHL_ERR(router_send_to_primary(op, op->db, ns, build_list_collections, (void *)(uintptr_t)cmd,
                                   &found, &got, primary, sizeof primary, st));
    if (!found) {
        /* a database that does not exist has no collections */
        append_cursor(reply, ns, &empty);
        goto done;
    }
    SHL_ERR(reply_listing_cursor(op, ns, primary, batch_size, zero_batch, &got, reply, st));
done:
    bson_destroy(&got);
    bson_destroy(&empty);
    return ret;
}

/* One database in the merged listDatabases answer. */
typedef struct db_entry {
    char *name;
    int64_t size;
    bool empty;
    bson_t *shards; /* {shard: size}; a pointer, since entries are reallocated */
} db_entry_t;

static db_entry_t *
db_entry_get(db_entry_t **list, size_t *n, const char *name)
{
    for (size_t i = 0; i < *n; i++) {
        if (strcmp((*list)[i].name, name) == 0) {
            return &(*list)[i];
        }
    }
    *list = bson_realloc(*list, (*n + 1) * sizeof(**list));
    memset(&(*list)[*n], 0, sizeof(**list));
    (*list)[*n].name = bson_strdup(name);
    (*list)[*n].empty = true;
    (*list)[*n].shards = bson_new();
    return &(*list)[(*n)++];
}

/* Fold one node's listDatabases reply; 'only_internal' keeps admin/config, else skips them. */
static void
fold_databases(const bson_t *reply, const char *shard, bool only_internal, db_entry_t **list,
               size_t *n)
{
    bson_iter_t it, dbs, f;

    if (!bson_iter_init_find(&it, reply, "databases") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &dbs)) {
        return;
    }
    while (shl_iter_next(&dbs)) {
        const char *name = NULL;
        int64_t size = 0;
        bool empty = true, internal;
        db_entry_t *e;
        if (!BSON_ITER_HOLDS_DOCUMENT(&dbs) || !bson_iter_recurse(&dbs, &f)) {
            continue;
        }
        while (shl_iter_next(&f)) {
            const char *k = shl_iter_key(&f);
            if (strcmp(k, "name") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                name = bson_iter_utf8(&f, NULL);
            } else if (strcmp(k, "sizeOnDisk") == 0 && BSON_ITER_HOLDS_NUMBER(&f)) {
                size = bson_iter_as_int64(&f);
            } else if (strcmp(k, "empty") == 0) {
                empty = bson_iter_as_bool(&f);
            }
        }
        if (name == NULL || strcmp(name, "local") == 0) {
            continue; /* a router does not show any node's local database */
        }
        internal = strcmp(name, "admin") == 0 || strcmp(name, "config") == 0;
        if (internal != only_internal) {
            continue;
        }
        e = db_entry_get(list, n, name);
        e->size += size;
        e->empty = e->empty && empty;
        BSON_APPEND_INT64(e->shards, shard, size);
    }
}

/* What each shard is asked: listDatabases, names only when the router needs no sizes. */
static void
list_databases_build(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    (void)rr;
    (void)shard;
    BSON_APPEND_INT32(cmd, "listDatabases", 1);
    if (*(const bool *)arg) {
        BSON_APPEND_BOOL(cmd, "nameOnly", true);
    }
}

static int
cmd_list_databases(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    size_t nshards = 0, ndb = 0;
    shl_router_shard_result_t *res = NULL;
    bool names_only;
    db_entry_t *list = NULL;
    shl_matcher_t *m = NULL;
    bson_t cfg_cmd = BSON_INITIALIZER, cfg_reply = BSON_INITIALIZER, arr, filter;
    bson_iter_t it;
    bool name_only = false;
    int64_t total = 0;
    uint32_t k = 0;
    int ret = 0;

    if (bson_iter_init_find(&it, cmd, "nameOnly")) {
        name_only = bson_iter_as_bool(&it);
    }
    if (bson_iter_init_find(&it, cmd, "filter")) {
        const uint8_t *data;
        uint32_t len;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field 'listDatabases.filter' is the wrong type, expected type 'object'");
        }
        bson_iter_document(&it, &len, &data);
        bson_init_static(&filter, data, len);
        SHL_ERR(shl_matcher_new(&filter, 0, &m, st));
    }
    names_only = name_only && m == NULL;
    SHL_ERR(shl_router_send_to_all(r, op, "admin", false, list_databases_build, &names_only, &res,
                                   &nshards, st));
    for (size_t i = 0; i < nshards; i++) {
        if (res[i].res.code != 0) {
            *st = res[i].res.status;
            SHL_ERR(st->code);
        }
        fold_databases(&res[i].res.reply, res[i].shard, false, &list, &ndb);
    }
    BSON_APPEND_INT32(&cfg_cmd, "listDatabases", 1);
    SHL_ERR(shl_router_forward_to_config(r, op, &cfg_cmd, &cfg_reply, st));
    fold_databases(&cfg_reply, "config", true, &list, &ndb);

    bson_append_array_begin(reply, "databases", -1, &arr);
    for (size_t i = 0; i < ndb; i++) {
        bson_t d = BSON_INITIALIZER;
        char key[16];
        const char *ks;
        BSON_APPEND_UTF8(&d, "name", list[i].name);
        if (!name_only || m != NULL) {
            BSON_APPEND_INT64(&d, "sizeOnDisk", list[i].size);
            BSON_APPEND_BOOL(&d, "empty", list[i].empty);
            BSON_APPEND_DOCUMENT(&d, "shards", list[i].shards);
        }
        if (m != NULL && !shl_matcher_matches(m, &d)) {
            bson_destroy(&d);
            continue;
        }
        if (name_only && m != NULL) {
            bson_t only = BSON_INITIALIZER;
            BSON_APPEND_UTF8(&only, "name", list[i].name);
            bson_destroy(&d);
            bson_steal(&d, &only);
        }
        total += list[i].size;
        bson_uint32_to_string(k++, &ks, key, sizeof(key));
        bson_append_document(&arr, ks, -1, &d);
        bson_destroy(&d);
    }
    bson_append_array_end(reply, &arr);
    if (!name_only) {
        BSON_APPEND_INT64(reply, "totalSize", total);
        BSON_APPEND_INT64(reply, "totalSizeMb", total / (1024 * 1024));
    }
done:
    for (size_t i = 0; i < ndb; i++) {
        bson_free(list[i].name);
        bson_destroy(list[i].shards);
    }
    bson_free(list);
    shl_router_scatter_results_free(res, nshards);
    if (m != NULL) {
        shl_matcher_destroy(m);
    }
    bson_destroy(&cfg_cmd);
    bson_destroy(&cfg_reply);
    return ret;
}

/* ---- renameCollection ---- */

/* Whether 'ns' is sharded now: the cached entry is dropped first, so a collection sharded
 * or renamed through another router is seen (renames are rare; one config read each). */
static int
fresh_routing(shl_router_t *r, const char *ns, bool create_db, shl_router_routing_t *out,
              shl_status_t *st)
{
    shl_catalog_cache_invalidate_collection(r->cache, ns);
    return shl_router_routing_init(r, ns, create_db, out, st);
}

/* A rename where the source or the target is sharded: the primary shard's
 * RenameCollectionCoordinator runs it (_shardsvrRenameCollection, MongoDB 7.0;
 * docs/design/coordinators.md). */
static int
rename_sharded(shl_router_t *r, shl_op_ctx_t *op, const bson_t *cmd, const shl_ns_t *src,
               const char *dst, bson_t *reply, shl_status_t *st)
{
    bson_t body = BSON_INITIALIZER, got = BSON_INITIALIZER;
    bson_iter_t it;
    ddl_body_t b = {cmd, &body};
    bool found = false;
    int ret = 0;

    (void)reply;
    BSON_APPEND_UTF8(&body, "_shardsvrRenameCollection", src->coll);
    BSON_APPEND_UTF8(&body, "to", dst);
    if (bson_iter_init_find(&it, cmd, "dropTarget")) {
        BSON_APPEND_BOOL(&body, "dropTarget", bson_iter_as_bool(&it));
    }
    bson_destroy(&got);
    ret = router_send_to_primary(op, src->db, src->full, build_ddl_body, &b, &found, &got, NULL,
                                 0, st);
    shl_catalog_cache_invalidate_collection(r->cache, src->full);
    shl_catalog_cache_invalidate_collection(r->cache, dst);
    if (ret == 0 && !found) {
        ret = shl_status_set(st, SHL_CODE_NAMESPACE_NOT_FOUND,
                             "Source collection %s does not exist", src->full);
    }
    bson_destroy(&body);
    bson_destroy(&got);
    return ret;
}

static int
cmd_rename_collection(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    shl_router_routing_t from, to;
    shl_router_request_t req;
    shl_fanout_result_t res;
    bson_iter_t it;
    const char *src, *dst;
    shl_ns_t src_ns, dst_ns;
    bool sent = false;
    int ret = 0;

    memset(&from, 0, sizeof(from));
    memset(&to, 0, sizeof(to));
    memset(&req, 0, sizeof(req));
    bson_init(&req.cmd);
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "'renameCollection' must be of type string");
    }
    src = bson_iter_utf8(&it, NULL);
    if (!bson_iter_init_find(&it, cmd, "to") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "'to' must be of type string");
    }
    dst = bson_iter_utf8(&it, NULL);
    if (shl_ns_parse(&src_ns, src, st) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid source namespace: %s", src);
    }
    if (shl_ns_parse(&dst_ns, dst, st) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid target namespace: %s", dst);
    }
    ret = fresh_routing(r, src, false, &from, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "Source collection %s does not exist", src);
    }
    SHL_ERR(ret);
    if (from.rt != NULL && strcmp(src_ns.db, dst_ns.db) != 0) {
        /* MongoDB 5.0+: a sharded collection is renamed within its database only. */
        SHL_FAIL(st, SHL_CODE_COMMAND_FAILED,
                 "Source and destination collections must be on the same database.");
    }
    SHL_ERR(fresh_routing(r, dst, true, &to, st));
    if (from.rt != NULL || to.rt != NULL) {
        if (strcmp(src_ns.db, dst_ns.db) != 0) {
            SHL_FAIL(st, SHL_CODE_COMMAND_FAILED,
                     "Source and destination collections must be on the same database.");
        }
        SHL_ERR(rename_sharded(r, op, cmd, &src_ns, dst, reply, st));
        goto done;
    }
    if (strcmp(from.db.primary, to.db.primary) != 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "Source and destination collections must be on the same database primary "
                 "shard (%s, %s)",
                 from.db.primary, to.db.primary);
    }
    copy_passthrough(cmd, &req.cmd);
    if (!shl_database_version_is_fixed(&from.db.version)) {
        shl_database_version_append(&req.cmd, "databaseVersion", &from.db.version);
    }
    req.shard = from.db.primary;
    shl_router_send(r, op, "admin", &req, 1, &res);
    sent = true;
    shl_catalog_cache_invalidate_collection(r->cache, src);
    shl_catalog_cache_invalidate_collection(r->cache, dst);
    if (res.code != 0) {
        if (shl_router_is_stale(r, src, &res.status)) {
            /* The client may retry; the database entry is refreshed by then. */
        }
        *st = res.status;
        SHL_ERR(st->code);
    }
    shl_router_copy_reply_fields(&res.reply, reply);
done:
    if (sent) {
        shl_fanout_results_cleanup(&res, 1);
    }
    bson_destroy(&req.cmd);
    shl_router_routing_cleanup(&from);
    shl_router_routing_cleanup(&to);
    return ret;
}

static const shl_command_t k_ddl_commands[] = {
    {"create", {NULL}, cmd_create, 0, "create a collection"},
    {"drop", {NULL}, cmd_drop, 0, "drop a collection"},
    {"dropDatabase", {NULL}, cmd_drop_database, 0, "drop a database"},
    {"createIndexes", {"createindexes"}, cmd_create_indexes, 0, "create indexes"},
    {"dropIndexes", {"dropindexes", "deleteIndexes"}, cmd_drop_indexes, 0, "drop indexes"},
    {"collMod", {"collmod"}, cmd_coll_mod, 0, "modify a collection's options"},
    {"listIndexes", {"listindexes"}, cmd_list_indexes, 0, "list a collection's indexes"},
    {"listCollections",
     {"listcollections"},
     cmd_list_collections,
     0,
     "list a database's collections"},
    {"listDatabases",
     {"listdatabases"},
     cmd_list_databases,
     SHL_CMD_ADMIN_ONLY,
     "list the cluster's databases"},
    {"renameCollection",
     {"renamecollection"},
     cmd_rename_collection,
     SHL_CMD_ADMIN_ONLY,
     "rename a collection (sharded ones through the config server)"},
};

void
shl_cluster_ddl_commands_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(k_ddl_commands) / sizeof(k_ddl_commands[0]); i++) {
        shl_command_registry_add(reg, &k_ddl_commands[i]);
    }
}
