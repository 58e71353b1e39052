/*
 * configsvr_drop.c -- the config server's commits for the drop coordinators that run on the
 * databases' primary shards (shard/ddl_coordinators.h; issue 17 item 3). Each one holds the
 * namespace's lock, is idempotent (a coordinator resumed after a crash sends it again) and
 * is logged in config.changelog:
 *
 * {_configsvrSetAllowMigrations: ns, allowMigrations: bool, collectionUUID?}: sets
 *   config.collections' allowMigrations (absent means true); moveRange and the migration
 *   commit refuse a collection that does not allow migrations. A missing collection, or one
 *   with another UUID, is left alone.
 * {_configsvrCommitDropCollection: ns, collectionUUID?}: removes the collection's chunks,
 *   zones and entry (a missing one, or another incarnation, is left alone).
 * {_configsvrCommitDropDatabase: db}: removes the database's entry (its sharded collections
 *   are gone by then).
 */
#include <string.h>

#include "base/log.h"
#include "base/namespace.h"
#include "bson/bson_util.h"
#include "config/config_private.h"

/* Whether the command's collectionUUID (absent: any) names the entry 'coll'. */
static bool
same_uuid(const bson_t *cmd, const shl_collection_type_t *coll)
{
    bson_t have = BSON_INITIALIZER;
    bson_iter_t a, b;
    bool same = true;

    if (bson_iter_init_find(&a, cmd, "collectionUUID")) {
        shl_uuid_append(&have, "u", &coll->uuid);
        same = bson_iter_init_find(&b, &have, "u") &&
               bson_iter_value(&a)->value_type == BSON_TYPE_BINARY &&
               bson_iter_value(&a)->value.v_binary.data_len ==
                   bson_iter_value(&b)->value.v_binary.data_len &&
               memcmp(bson_iter_value(&a)->value.v_binary.data,
                      bson_iter_value(&b)->value.v_binary.data,
                      bson_iter_value(&b)->value.v_binary.data_len) == 0;
    }
    bson_destroy(&have);
    return same;
}

static int
cmd_set_allow_migrations(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *ns_str = NULL;
    shl_ns_t ns;
    shl_collection_type_t coll;
    bool found = false, allow = true, locked = false;
    bson_iter_t it;
    bson_t *q = NULL, *u = NULL;

    (void)op;
    (void)reply;
    SHL_ERR(cfg_cmd_string(cmd, &ns_str, st));
    SHL_ERR(shl_ns_parse(&ns, ns_str, st));
    if (!bson_iter_init_find(&it, cmd, "allowMigrations")) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '_configsvrSetAllowMigrations.allowMigrations' is missing but a "
                 "required field");
    }
    allow = bson_iter_as_bool(&it);
    cfg_lock_ns(ns.full);
    locked = true;
    SHL_ERR(cfg_get_collection(ns.full, &coll, &found, st));
    if (found && same_uuid(cmd, &coll)) {
        q = BCON_NEW("_id", BCON_UTF8(ns.full));
        u = allow ? BCON_NEW("$unset", "{", "allowMigrations", BCON_INT32(1), "}")
                  : BCON_NEW("$set", "{", "allowMigrations", BCON_BOOL(false), "}");
        SHL_ERR(cfg_update("collections", q, u, false, false, NULL, st));
    }
done:
    if (locked) {
        cfg_unlock_ns(ns.full);
    }
    if (found) {
        shl_collection_type_cleanup(&coll);
    }
    if (q != NULL) {
        bson_destroy(q);
    }
    if (u != NULL) {
        bson_destroy(u);
    }
    return ret;
}

static int
cmd_commit_drop_collection(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *ns_str = NULL;
    shl_ns_t ns;
    shl_collection_type_t coll;
    bool found = false, locked = false;
    bson_t *q = NULL, details = BSON_INITIALIZER;

    (void)reply;
    SHL_ERR(cfg_cmd_string(cmd, &ns_str, st));
    SHL_ERR(shl_ns_parse(&ns, ns_str, st));
    cfg_lock_ns(ns.full);
    locked = true;
    SHL_ERR(cfg_get_collection(ns.full, &coll, &found, st));
    if (!found || !same_uuid(cmd, &coll)) {
        goto done; /* removed before (a resumed coordinator), or another incarnation */
    }
    shl_uuid_append(&details, "uuid", &coll.uuid);
    cfg_changelog(op, "dropCollection.start", ns.full, &details);
    q = bson_new();
    shl_uuid_append(q, "uuid", &coll.uuid);
    SHL_ERR(cfg_delete("chunks", q, true, NULL, st));
    bson_destroy(q);
    q = BCON_NEW("ns", BCON_UTF8(ns.full));
    SHL_ERR(cfg_delete("tags", q, true, NULL, st));
    bson_destroy(q);
    /* The entry last: until it goes, a resumed coordinator still finds the collection. */
    q = BCON_NEW("_id", BCON_UTF8(ns.full));
    SHL_ERR(cfg_delete("collections", q, false, NULL, st));
    cfg_changelog(op, "dropCollection", ns.full, &details);
    SHL_LOG_INFO(SHARDING, 4200124, "committed the drop of a sharded collection", "ns",
                 BCON_UTF8(ns.full));
done:
    if (locked) {
        cfg_unlock_ns(ns.full);
    }
    if (found) {
        shl_collection_type_cleanup(&coll);
    }
    if (q != NULL) {
        bson_destroy(q);
    }
    bson_destroy(&details);
    return ret;
}

static int
cmd_commit_drop_database(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *db = NULL;
    char lockname[SHL_DB_NAME_MAX + 8];
    bool locked = false;
    int64_t deleted = 0;
    bson_t *q = NULL;

    (void)reply;
    SHL_ERR(cfg_cmd_string(cmd, &db, st));
    SHL_ERR(shl_ns_check_db(db, st));
    snprintf(lockname, sizeof(lockname), "db:%s", db);
    cfg_lock_ns(lockname);
    locked = true;
    q = BCON_NEW("_id", BCON_UTF8(db));
    SHL_ERR(cfg_delete("databases", q, false, &deleted, st));
    if (deleted > 0) {
        cfg_changelog(op, "dropDatabase", db, NULL);
        SHL_LOG_INFO(SHARDING, 4200125, "committed the drop of a database", "db", BCON_UTF8(db));
    }
done:
    if (locked) {
        cfg_unlock_ns(lockname);
    }
    if (q != NULL) {
        bson_destroy(q);
    }
    return ret;
}

static const shl_command_t drop_commit_cmds[] = {
    {.name = "_configsvrSetAllowMigrations",
     .run = cmd_set_allow_migrations,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     .help = "allow or stop the migrations of a collection (config server)"},
    {.name = "_configsvrCommitDropCollection",
     .run = cmd_commit_drop_collection,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     .help = "remove a dropped collection's metadata (config server)"},
    {.name = "_configsvrCommitDropDatabase",
     .run = cmd_commit_drop_database,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     .help = "remove a dropped database's entry (config server)"},
};

void
cfg_register_drop_commands(shl_command_registry_t *reg)
{
    for (size_t k = 0; k < sizeof drop_commit_cmds / sizeof drop_commit_cmds[0]; k++) {
        shl_command_registry_add(reg, &drop_commit_cmds[k]);
    }
}
