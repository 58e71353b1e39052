/*
 * ddl_drop_indexes.c -- _shardsvrDropIndexes on the database's primary shard (MongoDB 6.0+;
 * docs/design/coordinators.md "dropIndexes"). The router sends {_shardsvrDropIndexes: <coll>,
 * index, databaseVersion} here; the primary takes the collection's DDL locks (the database
 * in IX, the collection in X) -- so a dropIndexes waits for a running drop, rename, collMod,
 * shardCollection or refine of the collection, and they wait for it -- then broadcasts
 * dropIndexes with shard versions to every shard owning chunks and to itself, refreshing its
 * routing and sending again when a shard answers with a stale-version error. Not a
 * coordinator (MongoDB 8.2 made it one): nothing is persisted; a retry finishes a partial drop.
 */
#include <string.h>

#include "base/log.h"
#include "base/namespace.h"
#include "net/command_args.h"
#include "shard/ddl_coordinators.h"
#include "shard/shard_private.h"
#include "sharding/routing_table.h"

/* How often a broadcast is sent again after stale versions (MongoDB's
 * kMaxNumStaleVersionRetries). */
#define DROP_INDEXES_STALE_RETRIES 10

static bool
op_interrupted(void *arg)
{
    shl_status_t st = SHL_STATUS_INIT;

    return shl_op_check_interrupt(arg, &st) != 0;
}

/* The targets of one attempt: every shard owning a chunk of the collection, and the primary
 * (the only one for an unsharded collection). *names: n borrowed strings; returns n. */
static size_t
targets_of(const shl_routing_table_t *rt, const char *primary, const char **names, size_t max)
{
    size_t n = 0;
    bool has_primary = false;

    for (size_t i = 0; rt != NULL && i < shl_routing_table_nshard_names(rt) && n + 1 < max; i++) {
        const char *name = shl_routing_table_shard_name(rt, i);
        shl_chunk_version_t v = shl_routing_table_shard_version(rt, name);
        if (v.major != 0 || v.minor != 0) {
            names[n++] = name;
            has_primary = has_primary || strcmp(name, primary) == 0;
        }
    }
    if (!has_primary) {
        names[n++] = primary;
    }
    return n;
}

/* 'body' plus the versions a router would attach for 'shard' (as shl_router_append_versions). */
static void
versioned(const bson_t *body, const shl_routing_table_t *rt, const shl_cached_database_t *db,
          const char *shard, bson_t *out)
{
    shl_shard_version_t sv;

    bson_copy_to(body, out);
    if (rt != NULL) {
        shl_chunk_version_t v = shl_routing_table_shard_version(rt, shard);
        if (v.major == 0 && v.minor == 0) {
            v = shl_routing_table_collection_version(rt);
            v.major = v.minor = 0; /* owns no chunk: the collection's generation */
        }
        sv = shl_shard_version_make(&v);
    } else {
        sv = shl_shard_version_unsharded();
        if (!shl_database_version_is_fixed(&db->version)) {
            shl_database_version_append(out, "databaseVersion", &db->version);
        }
    }
    shl_shard_version_append(out, "shardVersion", &sv);
}

/* The replies of one broadcast into 'reply': raw {"<shard>/<host>": reply or error},
 * nIndexesWas of the first shard answering it; the first error (all of them in its message). */
static int
merge_replies(shard_state_t *s, const char **names, shl_remote_result_t *res, size_t n,
              bson_t *reply, shl_status_t *st)
{
    char cs[SHL_CLIENT_HOST_MAX + SHL_SHARD_ID_MAX + 2], host[SHL_CLIENT_HOST_MAX];
    char msg[SHL_STATUS_REASON_MAX] = "";
    bson_t raw, was = BSON_INITIALIZER;
    bool have_was = false;
    int code = 0, ret = 0;

    BSON_APPEND_DOCUMENT_BEGIN(reply, "raw", &raw);
    for (size_t i = 0; i < n; i++) {
        shl_status_t ignored = SHL_STATUS_INIT;
        bson_t one;
        bson_iter_t it;
        if (shl_shard_registry_host_for(s->registry, names[i], host, sizeof(host), &ignored) == 0) {
            snprintf(cs, sizeof(cs), "%s/%s", names[i], host);
        } else {
            snprintf(cs, sizeof(cs), "%s", names[i]);
        }
        BSON_APPEND_DOCUMENT_BEGIN(&raw, cs, &one);
        if (res[i].code != 0) {
            size_t len = strlen(msg);
            shl_status_append_reply(&res[i].status, &one);
            snprintf(msg + len, sizeof(msg) - len, "%s%s: %s", len ? "; " : "", cs,
                     res[i].status.reason);
            code = code != 0 ? code : res[i].code;
        } else {
            if (bson_iter_init_find(&it, &res[i].reply, "nIndexesWas")) {
                bson_append_iter(&one, NULL, 0, &it);
                if (!have_was) {
                    bson_append_iter(&was, NULL, 0, &it); /* after raw closes */
                    have_was = true;
                }
            }
            BSON_APPEND_DOUBLE(&one, "ok", 1.0);
        }
        bson_append_document_end(&raw, &one);
    }
    bson_append_document_end(reply, &raw);
    bson_concat(reply, &was);
    bson_destroy(&was);
    if (code != 0) {
        ret = shl_status_set(st, code, "%s", msg);
    }
    return ret;
}

/* Whether any shard answered that the versions sent were stale (then the routing of ns is
 * refreshed before the next attempt). */
static bool
any_stale(shard_state_t *s, const char *ns, const char *db, shl_remote_result_t *res, size_t n)
{
    bool stale = false;

    for (size_t i = 0; i < n; i++) {
        if (res[i].code != 0 &&
            shl_code_in_category(res[i].code, SHL_CAT_STALE_SHARD_VERSION_ERROR)) {
            stale = true;
        }
    }
    if (stale) {
        shl_catalog_cache_invalidate_collection(s->cache, ns);
        shl_catalog_cache_invalidate_database(s->cache, db);
    }
    return stale;
}

/* Broadcast 'body' (a dropIndexes) for 'ns' with shard versions; see the file comment. */
static int
broadcast(shard_state_t *s, shl_op_ctx_t *op, const shl_ns_t *ns, const bson_t *body,
          bson_t *reply, shl_status_t *st)
{
    const shl_remote_options_t opts = {.timeout_ms = 0};
    int ret = 0;

    for (int attempt = 1;; attempt++) {
        shl_routing_table_t *rt = NULL;
        shl_cached_database_t db;
        const char *names[64];
        shl_remote_request_t reqs[64];
        shl_remote_result_t res[64];
        bson_t cmds[64];
        size_t n;
        bool stale;

        SHL_ERR(shl_op_check_interrupt(op, st));
        SHL_ERR(shl_catalog_cache_get_database(s->cache, ns->db, &db, st));
        SHL_ERR(shl_catalog_cache_get_collection(s->cache, ns->full, &rt, st));
        n = targets_of(rt, db.primary, names, 64);
        for (size_t i = 0; i < n; i++) {
            versioned(body, rt, &db, names[i], &cmds[i]);
            reqs[i] = (shl_remote_request_t){
                .target = shl_remote_target_shard(names[i]), .db = ns->db, .cmd = &cmds[i]};
        }
        shl_remote_run_many(&s->remote, reqs, n, &opts, res);
        stale = any_stale(s, ns->full, ns->db, res, n) && attempt < DROP_INDEXES_STALE_RETRIES;
        if (!stale) {
            ret = merge_replies(s, names, res, n, reply, st);
        }
        shl_remote_results_cleanup(res, n);
        for (size_t i = 0; i < n; i++) {
            bson_destroy(&cmds[i]);
        }
        if (rt != NULL) {
            shl_routing_table_release(rt);
        }
        if (!stale) {
            break;
        }
    }
done:
    return ret;
}

/* _shardsvrDropIndexes: <coll>, index, writeConcern?, databaseVersion?. */
static int
cmd_shardsvr_drop_indexes(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    const char *coll = NULL;
    bson_t body = BSON_INITIALIZER, dbv_view;
    const bson_t *dbv = shard_ddl_cmd_dbv(cmd, &dbv_view);
    bool db_locked = false, coll_locked = false;
    bson_iter_t it;
    shl_ns_t ns;
    int ret = 0;

    SHL_ERR(shl_cmd_collection_arg(cmd, &coll, st));
    SHL_ERR(shl_ns_make(&ns, op->db, coll, st));
    BSON_APPEND_UTF8(&body, "dropIndexes", coll);
    if (!bson_iter_init_find(&it, cmd, "index")) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '_shardsvrDropIndexes.index' is missing but a required field");
    }
    bson_append_iter(&body, "index", -1, &it);
    if (bson_iter_init_find(&it, cmd, "writeConcern")) {
        bson_append_iter(&body, NULL, 0, &it);
    }
    SHL_ERR(shard_ddl_check_primary(s, op, ns.full, st));
    SHL_ERR(shard_ddl_lock_acquire(s->ddl_locks, ns.db, SHARD_DDL_IX, "dropIndexes", 0,
                                   op_interrupted, op, st));
    db_locked = true;
    SHL_ERR(shard_ddl_lock_acquire(s->ddl_locks, ns.full, SHARD_DDL_X, "dropIndexes", 0,
                                   op_interrupted, op, st));
    coll_locked = true;
    /* The database may have moved or been re-created while this waited for the locks. */
    if (dbv != NULL) {
        SHL_ERR(shard_ddl_check_db_version(s, ns.full, dbv, st));
    }
    SHL_ERR(broadcast(s, op, &ns, &body, reply, st));
done:
    if (coll_locked) {
        shard_ddl_lock_release(s->ddl_locks, ns.full, SHARD_DDL_X);
    }
    if (db_locked) {
        shard_ddl_lock_release(s->ddl_locks, ns.db, SHARD_DDL_IX);
    }
    bson_destroy(&body);
    return ret;
}

static const shl_command_t drop_indexes_cmd = {
    .name = "_shardsvrDropIndexes",
    .run = cmd_shardsvr_drop_indexes,
    .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
    .help = "internal: drop indexes of a collection of this primary shard's database on every "
            "shard holding it"};

void
shard_ddl_drop_indexes_register(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &drop_indexes_cmd);
}
