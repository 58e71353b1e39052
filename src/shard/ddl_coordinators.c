/*
 * ddl_coordinators.c -- the dropCollection and dropDatabase coordinators on the database's
 * primary shard (ddl_coordinators.h; seeds/000 "Sharding DDL Coordinator"), and the
 * _shardsvrDropCollection / _shardsvrDropDatabase commands that start or join them. The
 * phases only talk through remote.h (config server, shards by id, self), so their unit tests
 * run them over the fake remote.
 */
#include "shard/ddl_coordinators.h"

#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/namespace.h"
#include "net/command_args.h"
#include "shard/shard_private.h"

#define OP_DROP_COLL "dropCollection"
#define OP_DROP_DB "dropDatabase"

/* The collection's config.collections entry, or false (unsharded or gone). */
static bool
coll_info(const bson_t *doc, bson_t *out)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    if (bson_iter_init_find(&it, doc, "collInfo") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_document(&it, &len, &data);
        bson_init_static(out, data, len);
        return true;
    }
    return false;
}

/* Append the entry's uuid as 'field' (if it has one). */
static void
append_uuid(bson_t *cmd, const char *field, const bson_t *info)
{
    bson_iter_t it;

    if (bson_iter_init_find(&it, info, "uuid")) {
        bson_append_iter(cmd, field, -1, &it);
    }
}

/* Remove the sharded collection's metadata on the config server (idempotent). */
static int
commit_drop_collection(shl_coord_t *c, const char *ns, const bson_t *info, shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER;
    int ret;

    BSON_APPEND_UTF8(&cmd, "_configsvrCommitDropCollection", ns);
    if (info != NULL) {
        append_uuid(&cmd, "collectionUUID", info);
    }
    ret = shard_ddl_to_config(c, &cmd, st);
    bson_destroy(&cmd);
    return ret;
}

/* ------------------------------------------------------------ dropCollection phases */

/* freezeCollection: remember the collection's metadata (sharded: config.collections entry)
 * and stop its migrations, so no chunk moves while it is dropped. */
static int
phase_freeze(shl_coord_t *c, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    bson_t filter = BSON_INITIALIZER, doc = BSON_INITIALIZER, info;
    bson_t **docs = NULL;
    size_t n = 0, nids = 0;
    char **ids = NULL;
    shl_ns_t parsed;
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    BSON_APPEND_UTF8(&filter, "_id", ns);
    SHL_ERR(shard_ddl_config_find(c, "collections", &filter, &docs, &n, st));
    bson_copy_to_excluding_noinit(shl_coord_doc(c), &doc, "collInfo", NULL);
    if (n > 0) {
        BSON_APPEND_DOCUMENT(&doc, "collInfo", docs[0]);
    }
    shl_coord_doc_set(c, &doc);
    /* Who holds its data, remembered for the later phases (the chunks go in dropCollection). */
    SHL_ERR(shl_ns_parse(&parsed, ns, st));
    SHL_ERR(shard_ddl_find_participants(c, parsed.db, docs, n, &ids, &nids, st));
    shard_ddl_set_participants(c, ids, nids);
    if (coll_info(shl_coord_doc(c), &info)) {
        SHL_ERR(shard_ddl_set_allow_migrations(c, ns, &info, "uuid", false, st));
    }
done:
    bson_strfreev(ids);
    shard_ddl_docs_free(docs);
    bson_destroy(&doc);
    bson_destroy(&filter);
    return ret;
}

static int
phase_enter_crit(shl_coord_t *c, shl_status_t *st)
{
    return shard_ddl_block(c, "drop", true, false, st);
}

/* dropCollection: the config server's metadata first (routers then see no collection), then
 * the data on every shard. Both steps are idempotent. */
static int
phase_drop(shl_coord_t *c, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    shl_ns_t parsed;
    bson_t info, cmd = BSON_INITIALIZER;
    bool sharded = coll_info(shl_coord_doc(c), &info);
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    SHL_ERR(shl_ns_parse(&parsed, ns, st));
    if (sharded) {
        SHL_ERR(commit_drop_collection(c, ns, &info, st));
    }
    BSON_APPEND_UTF8(&cmd, "_shardsvrDropCollectionParticipant", parsed.coll);
    if (sharded) {
        append_uuid(&cmd, "collectionUUID", &info);
    }
    SHL_ERR(shard_ddl_to_participants(c, parsed.db, &cmd, st));
    SHL_LOG_INFO(SHARDING, 4170201, "dropped collection", "ns", BCON_UTF8(ns), "sharded",
                 BCON_BOOL(sharded));
done:
    bson_destroy(&cmd);
    return ret;
}

static int
phase_release_crit(shl_coord_t *c, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    bson_t result = BSON_INITIALIZER;
    int ret = shard_ddl_block(c, "drop", false, false, st);

    if (ret == 0) {
        shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
        BSON_APPEND_UTF8(&result, "ns", ns);
        shl_coord_set_result(c, &result);
    }
    bson_destroy(&result);
    return ret;
}

static const shl_coord_phase_t drop_coll_phases[] = {
    {"freezeCollection", phase_freeze, true},
    {"enterCriticalSection", phase_enter_crit, true},
    {"dropCollection", phase_drop, true},
    {"releaseCriticalSection", phase_release_crit, true},
};

/* ------------------------------------------------------------- dropDatabase phase */

/* drop: every sharded collection's metadata (migrations stopped first), the data on every
 * shard, the database's entry, then every shard forgets the database. Idempotent: a resume
 * finds fewer collections and nothing to drop. */
static int
phase_drop_db(shl_coord_t *c, shl_status_t *st)
{
    char db[SHL_NS_MAX + 1], re[SHL_NS_MAX + 16];
    bson_t filter = BSON_INITIALIZER, rx, cmd = BSON_INITIALIZER, result = BSON_INITIALIZER;
    bson_t **colls = NULL;
    size_t n = 0, nids = 0;
    char **ids = NULL;
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), db, sizeof db);
    snprintf(re, sizeof re, "^\\Q%s.\\E", db);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &rx);
    BSON_APPEND_UTF8(&rx, "$regex", re);
    bson_append_document_end(&filter, &rx);
    SHL_ERR(shard_ddl_config_find(c, "collections", &filter, &colls, &n, st));
    if (!shard_ddl_participants_of(shl_coord_doc(c), &ids, &nids)) {
        /* Who holds the database's data, durably before any metadata goes: a resume of this
         * phase finds fewer collections but must still reach every shard that held one. */
        bson_strfreev(ids);
        SHL_ERR(shard_ddl_find_participants(c, db, colls, n, &ids, &nids, st));
        shard_ddl_set_participants(c, ids, nids);
        SHL_ERR(shl_coord_persist(c, st));
    }
    for (size_t k = 0; k < n; k++) {
        bson_iter_t it;
        if (bson_iter_init_find(&it, colls[k], "_id") && BSON_ITER_HOLDS_UTF8(&it)) {
            const char *ns = bson_iter_utf8(&it, NULL);
            SHL_ERR(shard_ddl_set_allow_migrations(c, ns, colls[k], "uuid", false, st));
            SHL_ERR(commit_drop_collection(c, ns, colls[k], st));
        }
    }
    BSON_APPEND_INT32(&cmd, "_shardsvrDropDatabaseParticipant", 1);
    SHL_ERR(shard_ddl_to_participants(c, db, &cmd, st));
    bson_reinit(&cmd);
    BSON_APPEND_UTF8(&cmd, "_configsvrCommitDropDatabase", db);
    SHL_ERR(shard_ddl_to_config(c, &cmd, st));
    bson_reinit(&cmd);
    BSON_APPEND_UTF8(&cmd, "_flushDatabaseCacheUpdates", db);
    SHL_ERR(shard_ddl_to_participants(c, "admin", &cmd, st));
    SHL_LOG_INFO(SHARDING, 4170202, "dropped database", "db", BCON_UTF8(db), "shardedCollections",
                 BCON_INT64((int64_t)n));
    BSON_APPEND_UTF8(&result, "dropped", db);
    shl_coord_set_result(c, &result);
done:
    bson_strfreev(ids);
    shard_ddl_docs_free(colls);
    bson_destroy(&result);
    bson_destroy(&cmd);
    bson_destroy(&filter);
    return ret;
}

static const shl_coord_phase_t drop_db_phases[] = {
    {"drop", phase_drop_db, true},
};

/* ------------------------------------------------------------------------ the types */

/* Drops of the same namespace are the same operation, whatever the running one learnt. */
static shard_ddl_kind_t drop_coll_kind = {.op = OP_DROP_COLL, .db_mode = SHARD_DDL_IX};
static shard_ddl_kind_t drop_db_kind = {.op = OP_DROP_DB, .db_mode = SHARD_DDL_X};

SHARD_DDL_DEFINE_TYPE(shard_drop_coll_type, "DropCollectionCoordinator", drop_coll_phases,
                      drop_coll_kind);
SHARD_DDL_DEFINE_TYPE(shard_drop_db_type, "DropDatabaseCoordinator", drop_db_phases, drop_db_kind);

void
shard_ddl_coords_setup(shard_ddl_locks_t *locks, shard_ddl_db_check_fn check, void *check_arg)
{
    const shl_coord_type_t *types[] = {&shard_drop_coll_type,   &shard_drop_db_type,
                                       &shard_create_coll_type, &shard_rename_coll_type,
                                       &shard_coll_mod_type,    &shard_refine_type,
                                       &shard_move_primary_type};

    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        shard_ddl_kind_setup(types[k]->arg, locks, check, check_arg);
    }
}

/* ---------------------------------------------------------------------- entry points */

int
shard_ddl_drop_collection(shl_coord_service_t *svc, const char *ns, const bson_t *dbv,
                          shl_status_t *st)
{
    return shard_ddl_start(svc, &shard_drop_coll_type, ns, NULL, dbv, NULL, st);
}

int
shard_ddl_drop_database(shl_coord_service_t *svc, const char *db, const bson_t *dbv,
                        shl_status_t *st)
{
    return shard_ddl_start(svc, &shard_drop_db_type, db, NULL, dbv, NULL, st);
}

/* The primary shard checks user write blocking and the request's databaseVersion (a router
 * that routed with an old one gets StaleDbVersion and retries at the right primary). The
 * request carries no shardVersion, so a request joining a running drop does not wait in the
 * collection's critical section that drop holds. 'ns' is "db.coll" or the bare database. */
int
shard_ddl_check_primary(shard_state_t *s, shl_op_ctx_t *op, const char *ns, shl_status_t *st)
{
    shl_db_orphan_filter_t *filter = NULL;
    int ret = 0;

    if (s == NULL || s->coords == NULL) {
        SHL_FAIL(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED,
                 "Cannot accept sharding commands if sharding state has not been initialized");
    }
    SHL_ERR(shl_db_sharding_check(op, ns, SHL_DB_SHARD_DDL, &filter, st));
    SHL_INVARIANT(filter == NULL);
    if (atomic_load(&s->ddl_blocked)) {
        SHL_FAIL(st, SHL_CODE_USER_WRITES_BLOCKED,
                 "User writes blocked: new sharded DDL is refused while user write blocking is "
                 "being enabled");
    }
done:
    return ret;
}

int
shard_ddl_drain(void *arg, shl_op_ctx_t *op, bool block, shl_status_t *st)
{
    shard_state_t *s = arg;
    int ret = 0;

    atomic_store(&s->ddl_blocked, block);
    while (block && s->coords != NULL &&
           shl_coord_service_count_coll(s->coords, SHARD_DDL_COORD_COLL) > 0) {
        SHL_ERR(shl_op_check_interrupt(op, st));
        shl_sleep_ms(50);
    }
done:
    if (ret != 0) {
        atomic_store(&s->ddl_blocked, false); /* the mode did not change */
    }
    return ret;
}

static int
cmd_drop_collection(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    const char *coll = NULL;
    bson_t dbv;
    shl_ns_t ns;
    int ret = 0;

    SHL_ERR(shl_cmd_collection_arg(cmd, &coll, st));
    SHL_ERR(shl_ns_make(&ns, op->db, coll, st));
    SHL_ERR(shard_ddl_check_primary(s, op, ns.full, st));
    SHL_ERR(shard_ddl_drop_collection(s->coords, ns.full, shard_ddl_cmd_dbv(cmd, &dbv), st));
    BSON_APPEND_UTF8(reply, "ns", ns.full);
done:
    return ret;
}

static int
cmd_drop_database(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    bson_t dbv;
    int ret = 0;

    if (strcmp(op->db, "admin") == 0 || strcmp(op->db, "config") == 0 ||
        strcmp(op->db, "local") == 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "Dropping the '%s' database is prohibited.",
                 op->db);
    }
    SHL_ERR(shard_ddl_check_primary(s, op, op->db, st));
    SHL_ERR(shard_ddl_drop_database(s->coords, op->db, shard_ddl_cmd_dbv(cmd, &dbv), st));
    BSON_APPEND_UTF8(reply, "dropped", op->db);
done:
    return ret;
}

static const shl_command_t ddl_coord_cmds[] = {
    {.name = "_shardsvrDropCollection",
     .run = cmd_drop_collection,
     .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
     .help = "internal: drop a collection of this primary shard's database everywhere"},
    {.name = "_shardsvrDropDatabase",
     .run = cmd_drop_database,
     .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
     .help = "internal: drop this primary shard's database everywhere"},
};

void
shard_ddl_coords_register(shl_command_registry_t *reg)
{
    for (size_t k = 0; k < sizeof ddl_coord_cmds / sizeof ddl_coord_cmds[0]; k++) {
        shl_command_registry_add(reg, &ddl_coord_cmds[k]);
    }
    shard_ddl_create_register(reg);
    shard_ddl_rename_register(reg);
    shard_ddl_coll_mod_register(reg);
    shard_ddl_refine_register(reg);
    shard_ddl_drop_indexes_register(reg);
    shard_sharding_events_register(reg);
}

void
shard_ddl_coords_recover(shard_state_t *s)
{
    shl_coord_type_t *types[] = {&shard_drop_coll_type,   &shard_drop_db_type,
                                 &shard_create_coll_type, &shard_rename_coll_type,
                                 &shard_coll_mod_type,    &shard_refine_type,
                                 &shard_move_primary_type};

    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        shl_status_t st = SHL_STATUS_INIT;
        if (shl_coord_service_recover(s->coords, types[k], &st) != 0) {
            SHL_LOG_WARNING(SHARDING, 4170203, "could not read the DDL coordinators' documents",
                            "type", BCON_UTF8(types[k]->name), "reason", BCON_UTF8(st.reason));
        }
    }
}
