/*
 * configsvr_move_primary.c -- the config server's part of movePrimary
 * (docs/design/sharding-protocol.md "movePrimary"; MongoDB 7.0's flow): the router sends the
 * move to the database's primary shard (_shardsvrMovePrimary), which takes the database's
 * DDL lock and, with its writes blocked, sends _configsvrCommitMovePrimary: the recipient
 * becomes the primary and the database version is bumped. The config server holds no lock
 * across the move.
 */
#include <string.h>
#include <strings.h>

#include "base/failpoint.h"
#include "base/log.h"
#include "base/namespace.h"
#include "config/config_private.h"

/* Shale's: the commit is written (majority) but not answered yet -- a kill -9 here loses the
 * reply, not the commit. */
SHL_FAILPOINT_DEFINE(hangBeforeReplyingCommitMovePrimary)

/* The 'to' field: a non-empty string. */
static int
to_field(const bson_t *cmd, const char *ctx, const char **to, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    *to = NULL;
    if (!bson_iter_init_find(&it, cmd, "to")) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '%s.to' is missing but a required field", ctx);
    }
    if (!BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_ERR(shl_idl_wrong_type(&it, ctx, "string", st));
    }
    *to = bson_iter_utf8(&it, NULL);
    if ((*to)[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "you have to specify where you want to move it");
    }
done:
    return ret;
}

/* The database named by the first field: a valid name, not admin/config/local. */
static int
db_field(const bson_t *cmd, const char **db, shl_status_t *st)
{
    int ret = 0;

    SHL_ERR(cfg_cmd_string(cmd, db, st));
    if (strcmp(*db, "admin") == 0 || strcmp(*db, "config") == 0 || strcmp(*db, "local") == 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Can't move primary for %s database", *db);
    }
    if ((*db)[0] == '\0' || shl_ns_check_db(*db, st) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "invalid db name specified: %s", *db);
    }
done:
    return ret;
}

/*
 * _configsvrCommitMovePrimary: db, from, to, expectedDatabaseVersion. The entry must still
 * name 'from' at that version (already 'to': ok, a retry whose first reply was lost); then
 * primary = to and lastMod + 1 in one conditional update, changelog "movePrimary.commit".
 */
static int
cmd_commit_move_primary(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *dbname = NULL, *to = NULL, *from = NULL;
    bool found = false;
    shl_database_type_t db, next;
    shl_database_version_t expected;
    bson_iter_t it;
    bson_t doc = BSON_INITIALIZER, details = BSON_INITIALIZER, *q = NULL;
    int64_t matched = 0;

    memset(&db, 0, sizeof(db));
    SHL_ERR(db_field(cmd, &dbname, st));
    SHL_ERR(to_field(cmd, "_configsvrCommitMovePrimary", &to, st));
    if (!bson_iter_init_find(&it, cmd, "from") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '_configsvrCommitMovePrimary.from' is missing but a required field");
    }
    from = bson_iter_utf8(&it, NULL);
    if (!bson_iter_init_find(&it, cmd, "expectedDatabaseVersion")) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '_configsvrCommitMovePrimary.expectedDatabaseVersion' is missing but "
                 "a required field");
    }
    SHL_ERR(shl_database_version_parse(&it, &expected, st));
    SHL_ERR(cfg_get_database(dbname, &db, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "Database %s not found", dbname);
    }
    if (strcmp(db.primary, to) == 0) {
        goto done; /* committed already */
    }
    if (strcmp(db.primary, from) != 0 || !shl_database_version_equal(&db.version, &expected)) {
        SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                 "movePrimary of %s: the database changed meanwhile (primary %s)", dbname,
                 db.primary);
    }
    next = db;
    next.primary = (char *)(uintptr_t)to;
    next.version = shl_database_version_after_move_primary(&db.version);
    shl_database_type_to_bson(&next, &doc);
    q = BCON_NEW("_id", BCON_UTF8(dbname), "primary", BCON_UTF8(from));
    SHL_ERR(cfg_update("databases", q, &doc, false, false, &matched, st));
    if (matched != 1) {
        SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                 "movePrimary of %s: the database changed meanwhile", dbname);
    }
    BSON_APPEND_UTF8(&details, "from", from);
    BSON_APPEND_UTF8(&details, "to", to);
    shl_database_version_append(&details, "databaseVersion", &next.version);
    cfg_changelog(op, "movePrimary.commit", dbname, &details);
    SHL_LOG_INFO(SHARDING, 4200131, "movePrimary committed", "db", BCON_UTF8(dbname), "from",
                 BCON_UTF8(from), "to", BCON_UTF8(to));
    if (SHL_FAILPOINT_FIRES(hangBeforeReplyingCommitMovePrimary)) {
        shl_failpoint_pause_while_set(SHL_FAILPOINT(hangBeforeReplyingCommitMovePrimary),
                                      &op->killed);
    }
done:
    (void)reply;
    shl_database_type_cleanup(&db);
    bson_destroy(&doc);
    bson_destroy(&details);
    if (q != NULL) {
        bson_destroy(q);
    }
    return ret;
}

static const shl_command_t commit_move_primary_cmd = {
    .name = "_configsvrCommitMovePrimary",
    .run = cmd_commit_move_primary,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "make a database's new primary shard official (config server)",
};

void
cfg_register_move_primary_commands(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &commit_move_primary_cmd);
}
