/*
 * configsvr_shards.c -- the cluster's membership (docs/design/sharding-protocol.md):
 * _configsvrAddShard (validate the host with hello, give it its shardIdentity, record it
 * in config.shards), listShards and _configsvrRemoveShard (draining, then completion once
 * the shard owns no chunk and is primary of no database). Errors and replies as MongoDB's
 * ShardingCatalogManager::addShard/removeShard.
 */
#include <string.h>

#include "base/log.h"
#include "bson/bson_iter.h"
#include "config/config_private.h"
#include "net/server.h"

/* ---------------------------------------------------------------- addShard */

/* Whether 'host' is one of the members of connection string 'conn_string'. */
static bool
has_member(const char *conn_string, const char *host)
{
    const char *slash = strchr(conn_string, '/');
    size_t hlen = strlen(host);

    for (const char *p = slash != NULL ? slash + 1 : conn_string; *p != '\0';) {
        size_t len = strcspn(p, ",");
        if (len == hlen && strncmp(p, host, len) == 0) {
            return true;
        }
        p += len;
        p += *p == ',' ? 1 : 0;
    }
    return false;
}

/* Whether an existing shard already holds 'host' (as any of its members); fills the MongoDB
 * error if the options differ, or *existing with its name if the request repeats it. */
static int
check_existing(const shl_shard_type_t *shards, size_t n, const char *host, const char *name,
               const char **existing, shl_status_t *st)
{
    int ret = 0;

    *existing = NULL;
    for (size_t i = 0; i < n; i++) {
        if (has_member(shards[i].host, host)) {
            if (name == NULL || strcmp(name, shards[i].name) == 0) {
                *existing = shards[i].name;
                goto done;
            }
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                     "'%s' is already a member of the existing shard '%s' (%s).", host,
                     shards[i].host, shards[i].name);
        }
        if (name != NULL && strcmp(name, shards[i].name) == 0) {
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "A shard named %s already exists", name);
        }
    }
done:
    return ret;
}

/* The members a hello reply lists ("h1,h2,..."), or 'host' if it lists none. */
static void
hello_members(const bson_t *reply, const char *host, char *out, size_t n)
{
    bson_iter_t it, arr;
    size_t len = 0;

    snprintf(out, n, "%s", host);
    if (!bson_iter_init_find(&it, reply, "hosts") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &arr)) {
        return;
    }
    out[0] = '\0';
    while (bson_iter_next(&arr)) {
        if (BSON_ITER_HOLDS_UTF8(&arr) && len + 2 < n) {
            int w = snprintf(out + len, n - len, "%s%s", len > 0 ? "," : "",
                             bson_iter_utf8(&arr, NULL));
            len = w < 0 || (size_t)w >= n - len ? n - 1 : len + (size_t)w;
        }
    }
    if (out[0] == '\0') {
        snprintf(out, n, "%s", host);
    }
}

/* hello on the candidate with MongoDB's checks; *set_name receives its replica set name and
 * 'members' the set's hosts (its hello's 'hosts'). 'host' may be a set's connection string:
 * the client asks its primary. */
static int
validate_host(const char *conn_string, const char *host, const char *provided_set, char *set_name,
              size_t set_name_len, char *members, size_t members_len, shl_status_t *st)
{
    int ret = 0;
    bson_t *cmd = BCON_NEW("hello", BCON_INT32(1));
    bson_t reply;
    bson_iter_t it;
    shl_status_t inner = SHL_STATUS_INIT;
    const char *found = "";
    shl_remote_target_t t = shl_remote_target_host(host);

    if (shl_remote_run(&cfg_get()->remote, &t, "admin", cmd, &cfg_remote_opts, &reply, &inner) !=
        0) {
        SHL_FAIL(st, inner.code,
                 "failed to run command { hello: 1 } when attempting to add shard %s :: caused "
                 "by :: %s",
                 conn_string, inner.reason);
    }
    if (bson_iter_init_find(&it, &reply, "msg") && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), "isdbgrid") == 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "cannot add a mongos as a shard");
    }
    if (bson_iter_init_find(&it, &reply, "isWritablePrimary") && !bson_iter_as_bool(&it)) {
        SHL_FAIL(st, SHL_CODE_NOT_WRITABLE_PRIMARY,
                 "%s does not have a master. If this is a replica set, ensure that it has a "
                 "healthy primary and that the set has been properly initiated.",
                 conn_string);
    }
    if (bson_iter_init_find(&it, &reply, "setName") && BSON_ITER_HOLDS_UTF8(&it)) {
        found = bson_iter_utf8(&it, NULL);
    }
    if (found[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_OPERATION_FAILED,
                 "host did not return a set name; is the replica set still initializing? "
                 "(%s is not a replica set member; start it with --replSet)",
                 conn_string);
    }
    if (provided_set != NULL && strcmp(provided_set, found) != 0) {
        SHL_FAIL(st, SHL_CODE_OPERATION_FAILED,
                 "the provided connection string (%s) does not match the actual set name %s",
                 conn_string, found);
    }
    if (bson_iter_init_find(&it, &reply, "configsvr")) {
        SHL_FAIL(st, SHL_CODE_OPERATION_FAILED,
                 "Cannot add %s as a shard since it is a config server", conn_string);
    }
    snprintf(set_name, set_name_len, "%s", found);
    hello_members(&reply, host, members, members_len);
done:
    bson_destroy(cmd);
    bson_destroy(&reply);
    return ret;
}

/* A database on the candidate that the cluster already has elsewhere refuses the add. */
static int
check_databases(const char *host, const char *conn_string, shl_status_t *st)
{
    int ret = 0;
    bson_t *cmd = BCON_NEW("listDatabases", BCON_INT32(1), "nameOnly", BCON_BOOL(true));
    bson_t reply;
    bson_iter_t it, arr, f;
    shl_remote_target_t t = shl_remote_target_host(host);

    SHL_ERR(shl_remote_run(&cfg_get()->remote, &t, "admin", cmd, &cfg_remote_opts, &reply, st));
    if (!bson_iter_init_find(&it, &reply, "databases") || !bson_iter_recurse(&it, &arr)) {
        goto done;
    }
    while (shl_iter_next(&arr)) {
        const char *name;
        shl_database_type_t db;
        bool found = false;
        if (!bson_iter_recurse(&arr, &f) || !bson_iter_find(&f, "name") ||
            !BSON_ITER_HOLDS_UTF8(&f)) {
            continue;
        }
        name = bson_iter_utf8(&f, NULL);
        if (strcmp(name, "admin") == 0 || strcmp(name, "config") == 0 ||
            strcmp(name, "local") == 0) {
            continue;
        }
        SHL_ERR(cfg_get_database(name, &db, &found, st));
        if (found) {
            ret = shl_status_set(st, SHL_CODE_OPERATION_FAILED,
                                 "can't add shard '%s' because a local database '%s' exists in "
                                 "another %s",
                                 conn_string, name, db.primary);
            shl_database_type_cleanup(&db);
            goto done;
        }
    }
done:
    bson_destroy(cmd);
    bson_destroy(&reply);
    return ret;
}

/*
 * The config server's connection string as shards are told it: "<set>/<its members>" from
 * this node's own hello, so a config server replica set initiated after start-up is named
 * with every member (the shards then follow its primary). Caller holds cfg->shards_mu.
 */
static void
refresh_conn_string(cfg_state_t *cfg, shl_op_ctx_t *op)
{
    bson_t *cmd = BCON_NEW("hello", BCON_INT32(1));
    bson_t reply;
    shl_status_t ignored = SHL_STATUS_INIT;
    char members[SHL_CLIENT_HOST_MAX];
    shl_remote_target_t me = shl_remote_target_host(op->svc->me);

    if (shl_remote_run(&cfg->remote, &me, "admin", cmd, &cfg_remote_opts, &reply, &ignored) == 0 &&
        op->svc->set_name[0] != '\0') {
        hello_members(&reply, op->svc->me, members, sizeof(members));
        if (strchr(members, ',') != NULL) {
            snprintf(cfg->conn_string, sizeof(cfg->conn_string), "%s/%s", op->svc->set_name,
                     members);
        }
    }
    bson_destroy(&reply);
    bson_destroy(cmd);
}

static int
cmd_add_shard(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    cfg_state_t *cfg = cfg_get();
    const char *target = NULL, *name = NULL, *existing = NULL;
    char host[SHL_CLIENT_HOST_MAX], provided_set[128] = "", set_name[128] = "";
    char send_to[SHL_CLIENT_HOST_MAX], members[SHL_CLIENT_HOST_MAX];
    char gen_name[32], shard_host[400], cid[25];
    shl_shard_type_t *shards = NULL;
    size_t nshards = 0;
    bson_iter_t it;
    bson_t add = BSON_INITIALIZER, ident, add_reply = BSON_INITIALIZER, doc, details;
    shl_shard_type_t t;
    bool locked = false;
    const bson_t *docs[1] = {&doc};

    bson_init(&doc);
    SHL_ERR(cfg_cmd_string(cmd, &target, st));
    if (bson_iter_init_find(&it, cmd, "name")) {
        if (!BSON_ITER_HOLDS_UTF8(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field '_configsvrAddShard.name' is the wrong type, expected type "
                     "'string'");
        }
        name = bson_iter_utf8(&it, NULL);
        if (name[0] == '\0') {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "shard name cannot be empty");
        }
        if (strcmp(name, "config") == 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "use of shard replica set with name 'config' is not allowed");
        }
    }
    if (target[0] == '\0' || strlen(target) >= SHL_CLIENT_HOST_MAX) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Invalid connection string %s", target);
    }
    {
        const char *slash = strchr(target, '/');
        if (slash != NULL) {
            snprintf(provided_set, sizeof(provided_set), "%.*s", (int)(slash - target), target);
            if (provided_set[0] == '\0') {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Invalid connection string %s", target);
            }
        }
    }
    cfg_host_of(target, host, sizeof(host));
    cfg_target_of(target, send_to, sizeof(send_to));
    if (host[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Invalid connection string %s", target);
    }
    if (strcmp(host, op->svc->me) == 0) {
        SHL_FAIL(st, SHL_CODE_OPERATION_FAILED,
                 "Cannot add %s as a shard since it is a config server", target);
    }

    pthread_mutex_lock(&cfg->shards_mu);
    locked = true;
    SHL_ERR(cfg_get_shards(&shards, &nshards, st));
    SHL_ERR(check_existing(shards, nshards, host, name, &existing, st));
    if (existing != NULL) {
        BSON_APPEND_UTF8(reply, "shardAdded", existing);
        goto done;
    }
    SHL_ERR(validate_host(target, send_to, provided_set[0] ? provided_set : NULL, set_name,
                          sizeof(set_name), members, sizeof(members), st));
    for (size_t i = 0; i < nshards; i++) {
        const char *slash = strchr(shards[i].host, '/');
        if (slash != NULL && (size_t)(slash - shards[i].host) == strlen(set_name) &&
            strncmp(shards[i].host, set_name, strlen(set_name)) == 0) {
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                     "A shard already exists containing the replica set '%s'", set_name);
        }
    }
    SHL_ERR(check_databases(send_to, target, st));
    if (name == NULL) {
        /* shard<N>: the first free number from the shard count on. */
        for (size_t k = nshards;; k++) {
            bool used = false;
            snprintf(gen_name, sizeof(gen_name), "shard%zu", k);
            for (size_t i = 0; i < nshards; i++) {
                used = used || strcmp(shards[i].name, gen_name) == 0;
            }
            if (!used) {
                break;
            }
        }
        name = gen_name;
    }

    /* The shard learns its identity first, so a shard in config.shards is always aware. */
    bson_oid_to_string(&cfg->cluster_id, cid);
    refresh_conn_string(cfg, op);
    BSON_APPEND_INT32(&add, "_addShard", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&add, "shardIdentity", &ident);
    BSON_APPEND_UTF8(&ident, "shardName", name);
    BSON_APPEND_OID(&ident, "clusterId", &cfg->cluster_id);
    BSON_APPEND_UTF8(&ident, "configsvrConnectionString", cfg->conn_string);
    bson_append_document_end(&add, &ident);
    {
        shl_status_t inner = SHL_STATUS_INIT;
        shl_remote_target_t dest = shl_remote_target_host(send_to);
        bson_destroy(&add_reply);
        if (shl_remote_run(&cfg->remote, &dest, "admin", &add, &cfg_remote_opts, &add_reply,
                           &inner) != 0) {
            SHL_FAIL(st, inner.code,
                     "addShard: error adding shard %s: failed to run command _addShard :: "
                     "caused by :: %s",
                     target, inner.reason);
        }
    }

    /* ... and the cluster's user write blocking mode (docs/design/user_write_blocking.md). */
    SHL_ERR(cfg_uwb_sync_new_shard(send_to, st));
    snprintf(shard_host, sizeof(shard_host), "%s/%s", set_name, members);
    memset(&t, 0, sizeof(t));
    t.name = (char *)(uintptr_t)name;
    t.host = shard_host;
    t.has_state = true;
    t.state = SHL_SHARD_STATE_SHARD_AWARE;
    t.has_topology_time = true;
    t.topology_time = cfg_fresh_ts();
    bson_destroy(&doc);
    shl_shard_type_to_bson(&t, &doc);
    SHL_ERR(cfg_insert("shards", docs, 1, st));
    shl_vector_clock_advance(&cfg_get()->clock, SHL_VC_TOPOLOGY_TIME,
                             ((uint64_t)t.topology_time.t << 32) | t.topology_time.i);

    bson_init(&details);
    BSON_APPEND_UTF8(&details, "name", name);
    BSON_APPEND_UTF8(&details, "host", shard_host);
    cfg_changelog(op, "addShard", "", &details);
    bson_destroy(&details);
    SHL_LOG_INFO(SHARDING, 4200110, "added shard", "name", BCON_UTF8(name), "host",
                 BCON_UTF8(shard_host));
    BSON_APPEND_UTF8(reply, "shardAdded", name);
done:
    if (locked) {
        pthread_mutex_unlock(&cfg->shards_mu);
    }
    if (shards != NULL) {
        cfg_shards_free(shards, nshards);
    }
    bson_destroy(&add);
    bson_destroy(&add_reply);
    bson_destroy(&doc);
    return ret;
}

/* ---------------------------------------------------------------- listShards */

static int
cmd_list_shards(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    cfg_docs_t d = {0};
    bson_t *sort = BCON_NEW("_id", BCON_INT32(1));
    bson_t arr;
    char key[24];

    (void)op;
    (void)cmd;
    SHL_ERR(cfg_find("shards", NULL, sort, &d, st));
    BSON_APPEND_ARRAY_BEGIN(reply, "shards", &arr);
    for (size_t i = 0; i < d.n; i++) {
        snprintf(key, sizeof(key), "%zu", i);
        BSON_APPEND_DOCUMENT(&arr, key, d.docs[i]);
    }
    bson_append_array_end(reply, &arr);
done:
    cfg_docs_cleanup(&d);
    bson_destroy(sort);
    return ret;
}

/* ---------------------------------------------------------------- removeShard */

static int
count_docs(const char *coll, const bson_t *q, int64_t *n, shl_status_t *st)
{
    int ret = 0;
    cfg_docs_t d = {0};

    SHL_ERR(cfg_find(coll, q, NULL, &d, st));
    *n = (int64_t)d.n;
    cfg_docs_cleanup(&d);
done:
    return ret;
}

static int
append_dbs_to_move(const char *shard, bson_t *reply, int64_t *ndbs, shl_status_t *st)
{
    int ret = 0;
    bson_t *q = BCON_NEW("primary", BCON_UTF8(shard));
    bson_t *sort = BCON_NEW("_id", BCON_INT32(1));
    cfg_docs_t d = {0};
    bson_t arr;
    bson_iter_t it;
    char key[24];

    SHL_ERR(cfg_find("databases", q, sort, &d, st));
    BSON_APPEND_UTF8(reply, "note", "you need to drop or movePrimary these databases");
    BSON_APPEND_ARRAY_BEGIN(reply, "dbsToMove", &arr);
    for (size_t i = 0; i < d.n; i++) {
        snprintf(key, sizeof(key), "%zu", i);
        if (bson_iter_init_find(&it, d.docs[i], "_id") && BSON_ITER_HOLDS_UTF8(&it)) {
            BSON_APPEND_UTF8(&arr, key, bson_iter_utf8(&it, NULL));
        }
    }
    bson_append_array_end(reply, &arr);
    *ndbs = (int64_t)d.n;
done:
    cfg_docs_cleanup(&d);
    bson_destroy(q);
    bson_destroy(sort);
    return ret;
}

/* Delete shard 'name''s document and stamp a fresh topologyTime on another shard's. */
static int
remove_shard_doc(const shl_shard_type_t *shards, size_t nshards, const char *name, shl_status_t *st)
{
    cfg_batch_t b;
    bson_value_t id = {.value_type = BSON_TYPE_UTF8};
    shl_ts_t ts = cfg_fresh_ts();
    int ret;

    cfg_batch_init(&b);
    id.value.v_utf8.str = (char *)(uintptr_t)name;
    id.value.v_utf8.len = (uint32_t)strlen(name);
    cfg_batch_delete(&b, "shards", &id);
    for (size_t i = 0; i < nshards; i++) {
        if (strcmp(shards[i].name, name) != 0) {
            shl_shard_type_t t = shards[i];
            bson_t doc;
            t.has_topology_time = true;
            t.topology_time = ts;
            shl_shard_type_to_bson(&t, &doc);
            cfg_batch_upsert(&b, "shards", &doc);
            bson_destroy(&doc);
            break;
        }
    }
    ret = cfg_batch_commit(&b, st);
    cfg_batch_cleanup(&b);
    if (ret == 0) {
        shl_vector_clock_advance(&cfg_get()->clock, SHL_VC_TOPOLOGY_TIME,
                                 ((uint64_t)ts.t << 32) | ts.i);
    }
    return ret;
}

static int
cmd_remove_shard(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    cfg_state_t *cfg = cfg_get();
    const char *name = NULL;
    shl_shard_type_t *shards = NULL, *target = NULL;
    size_t nshards = 0;
    bool locked = false;
    bson_t *q = NULL, *u = NULL, details = BSON_INITIALIZER;

    SHL_ERR(cfg_cmd_string(cmd, &name, st));
    pthread_mutex_lock(&cfg->shards_mu);
    locked = true;
    SHL_ERR(cfg_get_shards(&shards, &nshards, st));
    /* By name, or by connection string / host as MongoDB also accepts. */
    for (size_t i = 0; i < nshards && target == NULL; i++) {
        char h[SHL_CLIENT_HOST_MAX], want[SHL_CLIENT_HOST_MAX];
        cfg_host_of(shards[i].host, h, sizeof(h));
        cfg_host_of(name, want, sizeof(want));
        if (strcmp(shards[i].name, name) == 0 || strcmp(shards[i].host, name) == 0 ||
            strcmp(h, want) == 0) {
            target = &shards[i];
        }
    }
    if (target == NULL) {
        SHL_FAIL(st, SHL_CODE_SHARD_NOT_FOUND, "Shard %s does not exist", name);
    }
    name = target->name;
    BSON_APPEND_UTF8(&details, "shard", name);
    if (!target->draining) {
        for (size_t i = 0; i < nshards; i++) {
            if (shards[i].draining) {
                SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                         "Can't have more than one draining shard at a time");
            }
        }
        if (nshards == 1) {
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                     "Operation not allowed because it would remove the last shard");
        }
        q = BCON_NEW("_id", BCON_UTF8(name));
        u = BCON_NEW("$set", "{", "draining", BCON_BOOL(true), "}");
        SHL_ERR(cfg_update("shards", q, u, false, false, NULL, st));
        cfg_changelog(op, "removeShard.start", "", &details);
        {
            int64_t ndbs = 0;
            BSON_APPEND_UTF8(reply, "msg", "draining started successfully");
            BSON_APPEND_UTF8(reply, "state", "started");
            BSON_APPEND_UTF8(reply, "shard", name);
            SHL_ERR(append_dbs_to_move(name, reply, &ndbs, st));
        }
    } else {
        int64_t nchunks = 0, njumbo = 0, ndbs = 0;
        bson_t rem;
        q = BCON_NEW("shard", BCON_UTF8(name));
        SHL_ERR(count_docs("chunks", q, &nchunks, st));
        bson_destroy(q);
        q = BCON_NEW("shard", BCON_UTF8(name), "jumbo", BCON_BOOL(true));
        SHL_ERR(count_docs("chunks", q, &njumbo, st));
        bson_destroy(q);
        q = BCON_NEW("primary", BCON_UTF8(name));
        SHL_ERR(count_docs("databases", q, &ndbs, st));
        bson_destroy(q);
        q = NULL;
        if (nchunks == 0 && ndbs == 0) {
            /* The shard's document goes and a remaining shard records the new
             * topologyTime, in one applyOps, so TopologyTime survives restarts. */
            SHL_ERR(remove_shard_doc(shards, nshards, name, st));
            cfg_changelog(op, "removeShard", "", &details);
            SHL_LOG_INFO(SHARDING, 4200111, "removed shard", "name", BCON_UTF8(name));
            {
                char h[SHL_CLIENT_HOST_MAX];
                cfg_host_of(target->host, h, sizeof(h));
                shl_conn_pool_drop_host(cfg->pool, h);
            }
            BSON_APPEND_UTF8(reply, "msg", "removeshard completed successfully");
            BSON_APPEND_UTF8(reply, "state", "completed");
            BSON_APPEND_UTF8(reply, "shard", name);
        } else {
            BSON_APPEND_UTF8(reply, "msg", "draining ongoing");
            BSON_APPEND_UTF8(reply, "state", "ongoing");
            BSON_APPEND_DOCUMENT_BEGIN(reply, "remaining", &rem);
            BSON_APPEND_INT64(&rem, "chunks", nchunks);
            BSON_APPEND_INT64(&rem, "dbs", ndbs);
            BSON_APPEND_INT64(&rem, "jumboChunks", njumbo);
            bson_append_document_end(reply, &rem);
            SHL_ERR(append_dbs_to_move(name, reply, &ndbs, st));
        }
    }
done:
    if (locked) {
        pthread_mutex_unlock(&cfg->shards_mu);
    }
    if (shards != NULL) {
        cfg_shards_free(shards, nshards);
    }
    if (q != NULL) {
        bson_destroy(q);
    }
    if (u != NULL) {
        bson_destroy(u);
    }
    bson_destroy(&details);
    return ret;
}

static const shl_command_t add_shard_cmd = {
    .name = "_configsvrAddShard",
    .run = cmd_add_shard,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "add a replica set to the cluster as a shard (config server)",
};
static const shl_command_t list_shards_cmd = {
    .name = "listShards",
    .run = cmd_list_shards,
    .flags = SHL_CMD_ADMIN_ONLY,
    .help = "the cluster's shards (config.shards)",
};
static const shl_command_t remove_shard_cmd = {
    .name = "_configsvrRemoveShard",
    .run = cmd_remove_shard,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "start or check the draining of a shard (config server)",
};

void
cfg_register_shard_commands(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &add_shard_cmd);
    shl_command_registry_add(reg, &list_shards_cmd);
    shl_command_registry_add(reg, &remove_shard_cmd);
}
