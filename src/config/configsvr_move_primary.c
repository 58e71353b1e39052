/*
 * configsvr_move_primary.c -- the config server's part of movePrimary
 * (docs/design/sharding-protocol.md "movePrimary"): _configsvrMovePrimary checks the
 * request against the catalog under the database's mutex and has the current primary shard
 * run the move (_shardsvrMovePrimary); _configsvrCommitMovePrimary, which that shard sends
 * with its writes blocked, makes the recipient the primary and bumps the database version.
 * A request with another target than the one in flight for the database gets
 * ConflictingOperationInProgress; one with the same target waits for it (a retry joins).
 */
#include <string.h>
#include <strings.h>

#include "base/failpoint.h"
#include "base/log.h"
#include "base/namespace.h"
#include "config/config_private.h"

/* The config server waits this long for the primary shard's move (_shardsvrMovePrimary). */
#define CFG_MOVE_PRIMARY_TIMEOUT_MS (30 * 60 * 1000)

/* Shale's: the commit is written (majority) but not answered yet -- a kill -9 here loses the
 * reply, not the commit. */
SHL_FAILPOINT_DEFINE(hangBeforeReplyingCommitMovePrimary)

/*
 * The movePrimary requests in flight, per database (guarded by mp_mu, a leaf): a request with
 * the target of the running one waits for the database's mutex and finds the move done (or
 * joins it on the shard, or runs it again if it failed), as MongoDB's coordinator is joined;
 * one with another target fails at once with ConflictingOperationInProgress instead of
 * moving the primary again once the first is over.
 */
typedef struct mp_req {
    char *db, *to;
    int n; /* requests with these arguments in flight */
    struct mp_req *next;
} mp_req_t;

static pthread_mutex_t mp_mu = PTHREAD_MUTEX_INITIALIZER;
static mp_req_t *mp_reqs; /* guarded by mp_mu */

/* Count this request in for (db, to). Errors: ConflictingOperationInProgress while a
 * request for db with another target is in flight. */
static int
mp_claim(const char *db, const char *to, shl_status_t *st)
{
    int ret = 0;
    mp_req_t *r = NULL;

    pthread_mutex_lock(&mp_mu);
    r = mp_reqs;
    while (r != NULL && strcmp(r->db, db) != 0) {
        r = r->next;
    }
    if (r != NULL && strcmp(r->to, to) != 0) {
        ret = shl_status_set(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                             "Another movePrimary of %s is already running with different "
                             "arguments (to: %s); this request has to: %s",
                             db, r->to, to);
    } else if (r != NULL) {
        SHL_LOG_INFO(SHARDING, 4200132, "movePrimary request joins the running one", "db",
                     BCON_UTF8(db), "to", BCON_UTF8(to));
        r->n++;
    } else {
        r = bson_malloc0(sizeof(*r));
        r->db = bson_strdup(db);
        r->to = bson_strdup(to);
        r->n = 1;
        r->next = mp_reqs;
        mp_reqs = r;
    }
    pthread_mutex_unlock(&mp_mu);
    return ret;
}

/* Count this request of db out (it claimed). */
static void
mp_release(const char *db)
{
    mp_req_t **p = &mp_reqs;

    pthread_mutex_lock(&mp_mu);
    while (strcmp((*p)->db, db) != 0) {
        p = &(*p)->next;
    }
    if (--(*p)->n == 0) {
        mp_req_t *r = *p;
        *p = r->next;
        bson_free(r->db);
        bson_free(r->to);
        bson_free(r);
    }
    pthread_mutex_unlock(&mp_mu);
}

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
 * _configsvrMovePrimary: db, to. Under the database's mutex (so createDatabase,
 * dropDatabase and shardCollection of its collections wait for the move): the database
 * exists (NamespaceNotFound), the target shard exists (ShardNotFound); already the primary:
 * ok. Changelog "movePrimary.start", then the current primary runs the move and commits
 * through _configsvrCommitMovePrimary (which does not take the mutex).
 */
static int
cmd_move_primary(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *dbname = NULL, *to = NULL;
    char lockname[SHL_DB_NAME_MAX + 8];
    bool locked = false, found = false, claimed = false;
    shl_database_type_t db;
    shl_shard_type_t target, donor;
    bson_t fwd = BSON_INITIALIZER, wc, details = BSON_INITIALIZER, sreply = BSON_INITIALIZER;
    char host[SHL_CLIENT_HOST_MAX];

    (void)reply;
    memset(&db, 0, sizeof(db));
    memset(&target, 0, sizeof(target));
    memset(&donor, 0, sizeof(donor));
    SHL_ERR(db_field(cmd, &dbname, st));
    SHL_ERR(to_field(cmd, "_configsvrMovePrimary", &to, st));
    SHL_ERR(mp_claim(dbname, to, st));
    claimed = true;
    snprintf(lockname, sizeof(lockname), "db:%s", dbname);
    cfg_lock_ns(lockname);
    locked = true;
    SHL_ERR(cfg_get_database(dbname, &db, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "Database %s not found", dbname);
    }
    SHL_ERR(cfg_get_shard(to, &target, st));
    if (strcmp(db.primary, to) == 0) {
        SHL_LOG_INFO(SHARDING, 4200130, "movePrimary: the shard is already the primary", "db",
                     BCON_UTF8(dbname), "to", BCON_UTF8(to));
        goto done;
    }
    SHL_ERR(cfg_get_shard(db.primary, &donor, st));
    BSON_APPEND_UTF8(&details, "from", db.primary);
    BSON_APPEND_UTF8(&details, "to", to);
    cfg_changelog(op, "movePrimary.start", dbname, &details);
    BSON_APPEND_UTF8(&fwd, "_shardsvrMovePrimary", dbname);
    BSON_APPEND_UTF8(&fwd, "to", to);
    BSON_APPEND_DOCUMENT_BEGIN(&fwd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&fwd, &wc);
    cfg_target_of(donor.host, host, sizeof(host));
    bson_destroy(&sreply);
    SHL_ERR(shl_client_run(cfg_get()->pool, host, "admin", &fwd, CFG_MOVE_PRIMARY_TIMEOUT_MS,
                           &sreply, st));
done:
    if (locked) {
        cfg_unlock_ns(lockname);
    }
    if (claimed) {
        mp_release(dbname);
    }
    shl_database_type_cleanup(&db);
    shl_shard_type_cleanup(&target);
    shl_shard_type_cleanup(&donor);
    bson_destroy(&fwd);
    bson_destroy(&details);
    bson_destroy(&sreply);
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

static const shl_command_t move_primary_cmd = {
    .name = "_configsvrMovePrimary",
    .run = cmd_move_primary,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "move a database's primary shard (config server; the primary shard moves the data)",
};
static const shl_command_t commit_move_primary_cmd = {
    .name = "_configsvrCommitMovePrimary",
    .run = cmd_commit_move_primary,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "make a database's new primary shard official (config server)",
};

void
cfg_register_move_primary_commands(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &move_primary_cmd);
    shl_command_registry_add(reg, &commit_move_primary_cmd);
}
