/*
 * command_privileges.c -- the privileges each command needs (privilege.h's
 * shl_command_required_privileges), one table line per command: on its collection (named
 * by the command's first value, or a full "db.coll" namespace), on its database, on the
 * cluster, or nothing beyond an authenticated user. docs/design/auth.md "Authorization".
 */
#include "auth/privilege.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/str.h"
#include "bson/bson_util.h"

typedef enum {
    NONE,    /* any authenticated user */
    NS,      /* db.<first value> */
    FULL_NS, /* the first value is "db.coll" */
    DB,      /* the command's database */
    CLUSTER,
} scope_t;

typedef struct entry {
    const char *name;
    scope_t scope;
    shl_action_t act[2]; /* SHL_ACT_COUNT: unused */
} entry_t;

#define A1(a) {SHL_ACT_##a, SHL_ACT_COUNT}
#define A2(a, b) {SHL_ACT_##a, SHL_ACT_##b}
#define NO {SHL_ACT_COUNT, SHL_ACT_COUNT}

static entry_t table[] = {
    /* CRUD */
    {"find", NS, A1(FIND)},
    {"count", NS, A1(FIND)},
    {"distinct", NS, A1(FIND)},
    {"aggregate", NS, A1(FIND)},
    {"getMore", NS, A1(FIND)},
    {"killCursors", NS, A1(KILL_CURSORS)},
    {"insert", NS, A1(INSERT)},
    {"update", NS, A1(UPDATE)},
    {"delete", NS, A1(REMOVE)},
    {"findAndModify", NS, A2(FIND, UPDATE)},
    {"mapReduce", NS, A1(FIND)},
    {"explain", DB, A1(FIND)},
    /* DDL */
    {"create", NS, A1(CREATE_COLLECTION)},
    {"drop", NS, A1(DROP_COLLECTION)},
    {"createIndexes", NS, A1(CREATE_INDEX)},
    {"dropIndexes", NS, A1(DROP_INDEX)},
    {"listIndexes", NS, A1(LIST_INDEXES)},
    {"collMod", NS, A1(COLL_MOD)},
    {"convertToCapped", NS, A1(CONVERT_TO_CAPPED)},
    {"cloneCollectionAsCapped", NS, A2(FIND, INSERT)},
    {"reIndex", NS, A1(RE_INDEX)},
    {"compact", NS, A1(COMPACT)},
    {"validate", NS, A1(VALIDATE)},
    {"renameCollection", FULL_NS, A1(RENAME_COLLECTION_SAME_DB)},
    {"listCollections", DB, A1(LIST_COLLECTIONS)},
    {"dropDatabase", DB, A1(DROP_DATABASE)},
    {"profile", DB, A1(ENABLE_PROFILER)},
    {"collStats", NS, A1(COLL_STATS)},
    {"dataSize", FULL_NS, A1(FIND)},
    {"dbStats", DB, A1(DB_STATS)},
    {"dbHash", DB, A1(DB_HASH)},
    {"splitVector", FULL_NS, A1(SPLIT_VECTOR)},
    {"autoSplitVector", NS, A1(SPLIT_VECTOR)},
    /* sessions and transactions: any authenticated user, for its own sessions */
    {"startSession", NONE, NO},
    {"endSessions", NONE, NO},
    {"refreshSessions", NONE, NO},
    {"killSessions", NONE, NO},
    {"killAllSessions", CLUSTER, A1(KILL_ANY_SESSION)},
    {"killAllSessionsByPattern", CLUSTER, A1(KILL_ANY_SESSION)},
    {"commitTransaction", NONE, NO},
    {"abortTransaction", NONE, NO},
    {"listCommands", NONE, NO},
    {"whatsmyuri", NONE, NO},
    {"getLastError", NONE, NO},
    {"lockInfo", CLUSTER, A1(SERVER_STATUS)},
    /* diagnostics and host */
    {"serverStatus", CLUSTER, A1(SERVER_STATUS)},
    {"hostInfo", CLUSTER, A1(HOST_INFO)},
    {"getCmdLineOpts", CLUSTER, A1(GET_CMD_LINE_OPTS)},
    {"getLog", CLUSTER, A1(GET_LOG)},
    {"getParameter", CLUSTER, A1(GET_PARAMETER)},
    {"setParameter", CLUSTER, A1(SET_PARAMETER)},
    {"setClusterParameter", CLUSTER, A1(SET_CLUSTER_PARAMETER)},
    {"getClusterParameter", CLUSTER, A1(GET_CLUSTER_PARAMETER)},
    {"currentOp", CLUSTER, A1(INPROG)},
    {"killOp", CLUSTER, A1(KILLOP)},
    {"listDatabases", CLUSTER, A1(LIST_DATABASES)},
    {"connPoolStats", CLUSTER, A1(CONN_POOL_STATS)},
    {"top", CLUSTER, A1(TOP)},
    {"shutdown", CLUSTER, A1(SHUTDOWN)},
    {"logRotate", CLUSTER, A1(LOG_ROTATE)},
    {"fsync", CLUSTER, A1(FSYNC)},
    {"replSetGetStatus", CLUSTER, A1(REPL_SET_GET_STATUS)},
    {"replSetGetConfig", CLUSTER, A1(REPL_SET_GET_CONFIG)},
    {"getDefaultRWConcern", CLUSTER, A1(GET_DEFAULT_RW_CONCERN)},
    {"setDefaultRWConcern", CLUSTER, A1(SET_DEFAULT_RW_CONCERN)},
    {"setFeatureCompatibilityVersion", CLUSTER, A1(SET_FEATURE_COMPATIBILITY_VERSION)},
    {"setUserWriteBlockMode", CLUSTER, A1(SET_USER_WRITE_BLOCK_MODE)},
    {"applyOps", CLUSTER, A1(APPLY_OPS)},
    {"appendOplogNote", CLUSTER, A1(APPEND_OPLOG_NOTE)},
    {"invalidateUserCache", CLUSTER, A1(INVALIDATE_USER_CACHE)},
    {"configureFailPoint", CLUSTER, A1(INTERNAL)},
    {"isdbgrid", NONE, NO},
    {"shardConnPoolStats", CLUSTER, A1(CONN_POOL_STATS)},
    {"fsyncUnlock", CLUSTER, A1(FSYNC)},
    {"prepareTransaction", CLUSTER, A1(INTERNAL)},
    {"coordinateCommitTransaction", CLUSTER, A1(INTERNAL)},
    /* sharding */
    {"listShards", CLUSTER, A1(LIST_SHARDS)},
    {"addShard", CLUSTER, A1(ADD_SHARD)},
    {"removeShard", CLUSTER, A1(REMOVE_SHARD)},
    {"addShardToZone", CLUSTER, A1(ADD_SHARD)},
    {"removeShardFromZone", CLUSTER, A1(ADD_SHARD)},
    {"updateZoneKeyRange", CLUSTER, A1(ADD_SHARD)},
    {"enableSharding", DB, A1(ENABLE_SHARDING)},
    {"shardCollection", FULL_NS, A1(ENABLE_SHARDING)},
    {"refineCollectionShardKey", FULL_NS, A1(REFINE_COLLECTION_SHARD_KEY)},
    {"movePrimary", DB, A1(MOVE_PRIMARY)},
    {"moveChunk", FULL_NS, A1(MOVE_CHUNK)},
    {"moveRange", FULL_NS, A1(MOVE_CHUNK)},
    {"split", FULL_NS, A1(SPLIT_CHUNK)},
    {"mergeChunks", FULL_NS, A1(SPLIT_CHUNK)},
    {"clearJumboFlag", FULL_NS, A1(CLEAR_JUMBO_FLAG)},
    {"cleanupOrphaned", CLUSTER, A1(CLEANUP_ORPHANED)},
    {"flushRouterConfig", CLUSTER, A1(FLUSH_ROUTER_CONFIG)},
    {"getShardVersion", FULL_NS, A1(GET_SHARD_VERSION)},
    {"getShardMap", CLUSTER, A1(GET_SHARD_MAP)},
    {"shardingState", CLUSTER, A1(SHARDING_STATE)},
    {"balancerStart", CLUSTER, A1(CONFIGURE_BALANCER)},
    {"balancerStop", CLUSTER, A1(CONFIGURE_BALANCER)},
    {"balancerStatus", CLUSTER, A1(LIST_SHARDS)},
    {"balancerCollectionStatus", FULL_NS, A1(FIND)},
    {"configureCollectionBalancing", FULL_NS, A1(CONFIGURE_BALANCER)},
    {"analyzeShardKey", FULL_NS, A1(ANALYZE_SHARD_KEY)},
    /* user management checks its own (per role and user database) in cmd_user_mgmt.c */
    {"createUser", NONE, NO},
    {"updateUser", NONE, NO},
    {"dropUser", NONE, NO},
    {"dropAllUsersFromDatabase", NONE, NO},
    {"usersInfo", NONE, NO},
    {"grantRolesToUser", NONE, NO},
    {"revokeRolesFromUser", NONE, NO},
    {"createRole", NONE, NO},
    {"updateRole", NONE, NO},
    {"dropRole", NONE, NO},
    {"dropAllRolesFromDatabase", NONE, NO},
    {"rolesInfo", NONE, NO},
    {"grantPrivilegesToRole", NONE, NO},
    {"revokePrivilegesFromRole", NONE, NO},
    {"grantRolesToRole", NONE, NO},
    {"revokeRolesFromRole", NONE, NO},
};

/* The table is sorted by name once, then searched (every command of every request asks). */
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static int
by_name(const void *a, const void *b)
{
    return strcasecmp(((const entry_t *)a)->name, ((const entry_t *)b)->name);
}

static void
sort_table(void)
{
    qsort(table, sizeof(table) / sizeof(table[0]), sizeof(table[0]), by_name);
}

static void
add(shl_required_t *out, shl_res_kind_t kind, const char *db, const char *coll, shl_action_t a)
{
    if (out->n < 4 && a != SHL_ACT_COUNT) {
        memset(&out->res[out->n], 0, sizeof(out->res[0]));
        out->res[out->n].kind = kind;
        shl_str_copy(out->res[out->n].db, sizeof(out->res[0].db), db);
        shl_str_copy(out->res[out->n].coll, sizeof(out->res[0].coll), coll);
        out->act[out->n++] = a;
    }
}

/* Whether an aggregate pipeline writes ($out / $merge). */
static bool
pipeline_writes(const bson_t *cmd)
{
    bson_iter_t it, st, f;
    if (!bson_iter_init_find(&it, cmd, "pipeline") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &st)) {
        return false;
    }
    while (bson_iter_next(&st)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&st) && bson_iter_recurse(&st, &f) && bson_iter_next(&f) &&
            (strcmp(bson_iter_key(&f), "$out") == 0 || strcmp(bson_iter_key(&f), "$merge") == 0)) {
            return true;
        }
    }
    return false;
}

/*
 * An aggregate starting with $listSessions / $listLocalSessions, as MongoDB authorizes it: a
 * user's own sessions need no privilege; every user's (allUsers) or named users' need
 * listSessions on the cluster. False when the pipeline starts otherwise.
 */
static bool
session_stage_privileges(const bson_t *cmd, shl_required_t *out)
{
    bson_iter_t it, st, f, spec;
    bool others = false;

    if (!bson_iter_init_find(&it, cmd, "pipeline") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &st) || !bson_iter_next(&st) || !BSON_ITER_HOLDS_DOCUMENT(&st) ||
        !bson_iter_recurse(&st, &f) || !bson_iter_next(&f) ||
        (strcmp(bson_iter_key(&f), "$listSessions") != 0 &&
         strcmp(bson_iter_key(&f), "$listLocalSessions") != 0)) {
        return false;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(&f) && bson_iter_recurse(&f, &spec)) {
        while (bson_iter_next(&spec)) {
            others = others || (strcmp(bson_iter_key(&spec), "allUsers") == 0 &&
                                bson_iter_as_bool(&spec)) ||
                     strcmp(bson_iter_key(&spec), "users") == 0;
        }
    }
    if (others) {
        add(out, SHL_RES_CLUSTER, "", "", SHL_ACT_LIST_SESSIONS);
    }
    return true;
}

/* Whether an update or findAndModify may insert (upsert: true, in any statement). */
static bool
upserts(const bson_t *cmd)
{
    bson_iter_t it, u, f;
    if (bson_iter_init_find(&it, cmd, "upsert")) {
        return bson_iter_as_bool(&it);
    }
    if (!bson_iter_init_find(&it, cmd, "updates") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &u)) {
        return false;
    }
    while (bson_iter_next(&u)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&u) && bson_iter_recurse(&u, &f) &&
            bson_iter_find(&f, "upsert") && bson_iter_as_bool(&f)) {
            return true;
        }
    }
    return false;
}

void
shl_command_required_privileges(const char *name, bool internal, const char *db,
                                const bson_t *cmd, shl_required_t *out)
{
    const entry_t *e = NULL;
    bson_iter_t it;
    char coll[256] = "", ndb[64] = "";

    memset(out, 0, sizeof(*out));
    if (internal || name[0] == '_') {
        add(out, SHL_RES_CLUSTER, "", "", SHL_ACT_INTERNAL);
        return;
    }
    pthread_once(&table_once, sort_table);
    {
        entry_t key = {.name = name};
        e = bsearch(&key, table, sizeof(table) / sizeof(table[0]), sizeof(table[0]), by_name);
    }
    if (e == NULL) {
        /* Unknown to the table: only a holder of anyAction (__system) may run it. */
        add(out, SHL_RES_CLUSTER, "", "", SHL_ACT_ANY_ACTION);
        return;
    }
    if (strcmp(name, "aggregate") == 0 && session_stage_privileges(cmd, out)) {
        return;
    }
    if (bson_iter_init(&it, cmd) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it)) {
        shl_str_copy(coll, sizeof(coll), bson_iter_utf8(&it, NULL));
    }
    if (strcmp(name, "getMore") == 0 && bson_iter_init_find(&it, cmd, "collection") &&
        BSON_ITER_HOLDS_UTF8(&it)) {
        shl_str_copy(coll, sizeof(coll), bson_iter_utf8(&it, NULL));
    }
    for (int k = 0; k < 2; k++) {
        shl_action_t a = e->act[k];
        switch (e->scope) {
        case NONE:
            break;
        case NS:
            if (coll[0] == '\0') {
                add(out, SHL_RES_DB, db, "", a); /* aggregate: 1, explain of a db command */
            } else {
                add(out, SHL_RES_COLL, db, coll, a);
            }
            break;
        case FULL_NS: {
            const char *dot = strchr(coll, '.');
            if (dot == NULL) {
                add(out, SHL_RES_DB, coll[0] != '\0' ? coll : db, "", a);
            } else {
                snprintf(ndb, sizeof(ndb), "%.*s", (int)(dot - coll), coll);
                add(out, SHL_RES_COLL, ndb, dot + 1, a);
            }
            break;
        }
        case DB:
            add(out, SHL_RES_DB, db, "", a);
            break;
        case CLUSTER:
            add(out, SHL_RES_CLUSTER, "", "", a);
            break;
        }
    }
    if (strcmp(name, "aggregate") == 0 && pipeline_writes(cmd)) {
        add(out, SHL_RES_DB, db, "", SHL_ACT_INSERT);
        add(out, SHL_RES_DB, db, "", SHL_ACT_REMOVE);
    }
    if ((strcmp(name, "update") == 0 || strcasecmp(name, "findAndModify") == 0) &&
        upserts(cmd)) {
        add(out, coll[0] ? SHL_RES_COLL : SHL_RES_DB, db, coll, SHL_ACT_INSERT);
    }
    if (strcasecmp(name, "findAndModify") == 0 && bson_iter_init_find(&it, cmd, "remove") &&
        bson_iter_as_bool(&it)) {
        add(out, coll[0] ? SHL_RES_COLL : SHL_RES_DB, db, coll, SHL_ACT_REMOVE);
    }
    if (bson_iter_init_find(&it, cmd, "bypassDocumentValidation") && bson_iter_as_bool(&it)) {
        add(out, coll[0] ? SHL_RES_COLL : SHL_RES_DB, db, coll,
            SHL_ACT_BYPASS_DOCUMENT_VALIDATION);
    }
}
