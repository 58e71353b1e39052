/*
 * privilege.c -- privileges, the built-in roles and the per-command requirements
 * (privilege.h; docs/design/auth.md "Authorization"). The role contents follow MongoDB's
 * manual ("Built-In Roles"); the command table follows each command's documented access.
 */
#include "auth/privilege.h"

#include <string.h>

#include "base/str.h"
#include "bson/bson_util.h"

static const char *const action_names[] = {
#define X(id, name) name,
#include "auth/actions.def"
#undef X
};

const char *
shl_action_name(shl_action_t a)
{
    return a < SHL_ACT_COUNT ? action_names[a] : "?";
}

bool
shl_action_parse(const char *name, shl_action_t *a)
{
    for (int i = 0; i < SHL_ACT_COUNT; i++) {
        if (strcmp(action_names[i], name) == 0) {
            *a = (shl_action_t)i;
            return true;
        }
    }
    return false;
}

void
shl_privilege_list_add(shl_privilege_list_t *l, const shl_privilege_t *p)
{
    if (l->n == l->cap) {
        l->cap = l->cap == 0 ? 16 : l->cap * 2;
        l->items = bson_realloc(l->items, l->cap * sizeof(*l->items));
    }
    l->items[l->n++] = *p;
}

void
shl_privilege_list_cleanup(shl_privilege_list_t *l)
{
    bson_free(l->items);
    memset(l, 0, sizeof(*l));
}

int
shl_privilege_parse(const bson_t *doc, shl_privilege_t *p, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, r, a;
    bool has_db = false, has_coll = false;

    memset(p, 0, sizeof(*p));
    if (!bson_iter_init_find(&it, doc, "resource") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &r)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "privilege must have a 'resource' document");
    }
    p->res.kind = SHL_RES_ANY_NORMAL;
    while (bson_iter_next(&r)) {
        const char *k = bson_iter_key(&r);
        if (strcmp(k, "cluster") == 0 && BSON_ITER_HOLDS_BOOL(&r) && bson_iter_bool(&r)) {
            p->res.kind = SHL_RES_CLUSTER;
        } else if (strcmp(k, "anyResource") == 0 && BSON_ITER_HOLDS_BOOL(&r) &&
                   bson_iter_bool(&r)) {
            p->res.kind = SHL_RES_ANY;
        } else if (strcmp(k, "db") == 0 && BSON_ITER_HOLDS_UTF8(&r)) {
            has_db = true;
            shl_str_copy(p->res.db, sizeof(p->res.db), bson_iter_utf8(&r, NULL));
        } else if (strcmp(k, "collection") == 0 && BSON_ITER_HOLDS_UTF8(&r)) {
            has_coll = true;
            shl_str_copy(p->res.coll, sizeof(p->res.coll), bson_iter_utf8(&r, NULL));
        } else {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Unrecognized field in privilege resource: %s", k);
        }
    }
    if (p->res.kind == SHL_RES_ANY_NORMAL) {
        if (!has_db || !has_coll) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "resource must have 'db' and 'collection', or 'cluster' or 'anyResource'");
        }
        p->res.kind = p->res.db[0] == '\0'
                          ? (p->res.coll[0] == '\0' ? SHL_RES_ANY_NORMAL : SHL_RES_COLL_ANY_DB)
                          : (p->res.coll[0] == '\0' ? SHL_RES_DB : SHL_RES_COLL);
    }
    if (!bson_iter_init_find(&it, doc, "actions") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &a)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "privilege must have an 'actions' array");
    }
    while (bson_iter_next(&a)) {
        shl_action_t act;
        if (!BSON_ITER_HOLDS_UTF8(&a) || !shl_action_parse(bson_iter_utf8(&a, NULL), &act)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Unrecognized action privilege string: %s",
                     BSON_ITER_HOLDS_UTF8(&a) ? bson_iter_utf8(&a, NULL) : "?");
        }
        shl_action_set_add(&p->actions, act);
    }
done:
    return ret;
}

void
shl_privilege_append(bson_t *out, const char *key, const shl_privilege_t *p)
{
    bson_t d, r, a;
    char idx[24];
    int n = 0;

    bson_append_document_begin(out, key, -1, &d);
    BSON_APPEND_DOCUMENT_BEGIN(&d, "resource", &r);
    if (p->res.kind == SHL_RES_CLUSTER) {
        BSON_APPEND_BOOL(&r, "cluster", true);
    } else if (p->res.kind == SHL_RES_ANY) {
        BSON_APPEND_BOOL(&r, "anyResource", true);
    } else {
        BSON_APPEND_UTF8(&r, "db", p->res.db);
        BSON_APPEND_UTF8(&r, "collection", p->res.coll);
    }
    bson_append_document_end(&d, &r);
    BSON_APPEND_ARRAY_BEGIN(&d, "actions", &a);
    for (int i = 0; i < SHL_ACT_COUNT; i++) {
        if (shl_action_set_has(&p->actions, (shl_action_t)i)) {
            snprintf(idx, sizeof(idx), "%d", n++);
            BSON_APPEND_UTF8(&a, idx, action_names[i]);
        }
    }
    bson_append_array_end(&d, &a);
    bson_append_document_end(out, &d);
}

/* ---- built-in roles ---- */

#define END SHL_ACT_COUNT

static const shl_action_t read_acts[] = {
    SHL_ACT_CHANGE_STREAM, SHL_ACT_COLL_STATS,       SHL_ACT_DB_HASH,      SHL_ACT_DB_STATS,
    SHL_ACT_FIND,          SHL_ACT_KILL_CURSORS,     SHL_ACT_LIST_COLLECTIONS,
    SHL_ACT_LIST_INDEXES,  END};
static const shl_action_t write_acts[] = {
    SHL_ACT_CONVERT_TO_CAPPED, SHL_ACT_CREATE_COLLECTION, SHL_ACT_CREATE_INDEX,
    SHL_ACT_DROP_COLLECTION,   SHL_ACT_DROP_INDEX,        SHL_ACT_INSERT,
    SHL_ACT_REMOVE,            SHL_ACT_RENAME_COLLECTION_SAME_DB, SHL_ACT_UPDATE, END};
static const shl_action_t db_admin_acts[] = {
    SHL_ACT_BYPASS_DOCUMENT_VALIDATION, SHL_ACT_COLL_MOD,        SHL_ACT_COLL_STATS,
    SHL_ACT_COMPACT,                    SHL_ACT_CONVERT_TO_CAPPED, SHL_ACT_CREATE_COLLECTION,
    SHL_ACT_CREATE_INDEX,               SHL_ACT_DB_STATS,        SHL_ACT_DROP_COLLECTION,
    SHL_ACT_DROP_DATABASE,              SHL_ACT_DROP_INDEX,      SHL_ACT_ENABLE_PROFILER,
    SHL_ACT_LIST_COLLECTIONS,           SHL_ACT_LIST_INDEXES,    SHL_ACT_PLAN_CACHE_READ,
    SHL_ACT_RE_INDEX,                   SHL_ACT_RENAME_COLLECTION_SAME_DB, SHL_ACT_VALIDATE,
    END};
static const shl_action_t user_admin_acts[] = {
    SHL_ACT_CHANGE_CUSTOM_DATA, SHL_ACT_CHANGE_PASSWORD, SHL_ACT_CREATE_ROLE, SHL_ACT_CREATE_USER,
    SHL_ACT_DROP_ROLE,          SHL_ACT_DROP_USER,       SHL_ACT_GRANT_ROLE,  SHL_ACT_REVOKE_ROLE,
    SHL_ACT_VIEW_ROLE,          SHL_ACT_VIEW_USER,       END};
static const shl_action_t cluster_monitor_acts[] = {
    SHL_ACT_CONN_POOL_STATS,  SHL_ACT_GET_CMD_LINE_OPTS,     SHL_ACT_GET_DEFAULT_RW_CONCERN,
    SHL_ACT_GET_LOG,          SHL_ACT_GET_PARAMETER,         SHL_ACT_GET_SHARD_MAP,
    SHL_ACT_HOST_INFO,        SHL_ACT_INPROG,                SHL_ACT_LIST_DATABASES,
    SHL_ACT_LIST_SESSIONS,    SHL_ACT_LIST_SHARDS,           SHL_ACT_NETSTAT,
    SHL_ACT_REPL_SET_GET_CONFIG, SHL_ACT_REPL_SET_GET_STATUS, SHL_ACT_SERVER_STATUS,
    SHL_ACT_SHARDING_STATE,   SHL_ACT_TOP,                   END};
static const shl_action_t cluster_monitor_normal_acts[] = {
    SHL_ACT_COLL_STATS, SHL_ACT_DB_HASH, SHL_ACT_DB_STATS, SHL_ACT_GET_SHARD_VERSION,
    SHL_ACT_LIST_COLLECTIONS, SHL_ACT_LIST_INDEXES, END};
static const shl_action_t host_manager_acts[] = {
    SHL_ACT_FLUSH_ROUTER_CONFIG, SHL_ACT_FSYNC,      SHL_ACT_INVALIDATE_USER_CACHE,
    SHL_ACT_KILL_ANY_CURSOR,     SHL_ACT_KILL_ANY_SESSION, SHL_ACT_KILLOP,
    SHL_ACT_LOG_ROTATE,          SHL_ACT_SET_PARAMETER,    SHL_ACT_SHUTDOWN, END};
static const shl_action_t host_manager_normal_acts[] = {SHL_ACT_KILL_CURSORS, END};
static const shl_action_t cluster_manager_acts[] = {
    SHL_ACT_ADD_SHARD,          SHL_ACT_APPEND_OPLOG_NOTE, SHL_ACT_CLEANUP_ORPHANED,
    SHL_ACT_FLUSH_ROUTER_CONFIG, SHL_ACT_GET_DEFAULT_RW_CONCERN, SHL_ACT_LIST_SESSIONS,
    SHL_ACT_LIST_SHARDS,        SHL_ACT_REMOVE_SHARD,      SHL_ACT_REPL_SET_CONFIGURE,
    SHL_ACT_REPL_SET_GET_CONFIG, SHL_ACT_REPL_SET_GET_STATUS, SHL_ACT_REPL_SET_STATE_CHANGE,
    SHL_ACT_SET_DEFAULT_RW_CONCERN, SHL_ACT_SET_FEATURE_COMPATIBILITY_VERSION,
    SHL_ACT_SET_USER_WRITE_BLOCK_MODE, SHL_ACT_CONFIGURE_BALANCER,
    SHL_ACT_SET_CLUSTER_PARAMETER, SHL_ACT_GET_CLUSTER_PARAMETER, END};
static const shl_action_t cluster_manager_normal_acts[] = {
    SHL_ACT_ENABLE_SHARDING, SHL_ACT_MOVE_CHUNK,  SHL_ACT_SPLIT_CHUNK, SHL_ACT_SPLIT_VECTOR,
    SHL_ACT_REFINE_COLLECTION_SHARD_KEY, SHL_ACT_CLEAR_JUMBO_FLAG, SHL_ACT_MOVE_PRIMARY,
    SHL_ACT_ANALYZE_SHARD_KEY, END};
static const shl_action_t list_databases_acts[] = {SHL_ACT_LIST_DATABASES, END};
static const shl_action_t drop_database_acts[] = {SHL_ACT_DROP_DATABASE, END};
static const shl_action_t user_admin_cluster_acts[] = {SHL_ACT_INVALIDATE_USER_CACHE,
                                                       SHL_ACT_LIST_DATABASES, END};
static const shl_action_t backup_acts[] = {SHL_ACT_FIND, SHL_ACT_LIST_COLLECTIONS,
                                           SHL_ACT_LIST_INDEXES, SHL_ACT_COLL_STATS,
                                           SHL_ACT_DB_HASH, END};
static const shl_action_t backup_cluster_acts[] = {SHL_ACT_LIST_DATABASES, SHL_ACT_SERVER_STATUS,
                                                   SHL_ACT_APPEND_OPLOG_NOTE, SHL_ACT_GET_PARAMETER,
                                                   END};
static const shl_action_t restore_acts[] = {
    SHL_ACT_BYPASS_DOCUMENT_VALIDATION, SHL_ACT_CHANGE_CUSTOM_DATA, SHL_ACT_CHANGE_PASSWORD,
    SHL_ACT_COLL_MOD,    SHL_ACT_CONVERT_TO_CAPPED, SHL_ACT_CREATE_COLLECTION,
    SHL_ACT_CREATE_INDEX, SHL_ACT_CREATE_ROLE,      SHL_ACT_CREATE_USER,
    SHL_ACT_DROP_COLLECTION, SHL_ACT_DROP_ROLE,     SHL_ACT_DROP_USER,
    SHL_ACT_GRANT_ROLE,  SHL_ACT_INSERT,            SHL_ACT_REVOKE_ROLE,
    SHL_ACT_VIEW_ROLE,   SHL_ACT_VIEW_USER,         SHL_ACT_LIST_COLLECTIONS,
    SHL_ACT_FIND,        SHL_ACT_UPDATE,            SHL_ACT_REMOVE, END};
static const shl_action_t restore_cluster_acts[] = {SHL_ACT_GET_PARAMETER, END};
static const shl_action_t all_acts[] = {SHL_ACT_ANY_ACTION, END};

/* One grant of a built-in role: actions on a resource relative to the role's database. */
typedef enum { ON_DB, ON_ANY_NORMAL, ON_CLUSTER, ON_ANY, ON_ADMIN_COLL } grant_on_t;

typedef struct grant {
    grant_on_t on;
    const char *coll; /* ON_ADMIN_COLL only */
    const shl_action_t *acts;
} grant_t;

typedef struct builtin_role {
    const char *name;
    bool admin_only; /* the *AnyDatabase and cluster roles exist only on admin */
    grant_t grants[16];
} builtin_role_t;

static const builtin_role_t builtin_roles[] = {
    {"read", false, {{ON_DB, NULL, read_acts}}},
    {"readWrite", false, {{ON_DB, NULL, read_acts}, {ON_DB, NULL, write_acts}}},
    {"dbAdmin", false, {{ON_DB, NULL, db_admin_acts}}},
    {"userAdmin", false, {{ON_DB, NULL, user_admin_acts}}},
    {"dbOwner",
     false,
     {{ON_DB, NULL, read_acts},
      {ON_DB, NULL, write_acts},
      {ON_DB, NULL, db_admin_acts},
      {ON_DB, NULL, user_admin_acts}}},
    {"clusterMonitor",
     true,
     {{ON_CLUSTER, NULL, cluster_monitor_acts}, {ON_ANY_NORMAL, NULL, cluster_monitor_normal_acts}}},
    {"hostManager",
     true,
     {{ON_CLUSTER, NULL, host_manager_acts}, {ON_ANY_NORMAL, NULL, host_manager_normal_acts}}},
    {"clusterManager",
     true,
     {{ON_CLUSTER, NULL, cluster_manager_acts}, {ON_ANY_NORMAL, NULL, cluster_manager_normal_acts}}},
    {"clusterAdmin",
     true,
     {{ON_CLUSTER, NULL, cluster_monitor_acts},
      {ON_ANY_NORMAL, NULL, cluster_monitor_normal_acts},
      {ON_CLUSTER, NULL, host_manager_acts},
      {ON_ANY_NORMAL, NULL, host_manager_normal_acts},
      {ON_CLUSTER, NULL, cluster_manager_acts},
      {ON_ANY_NORMAL, NULL, cluster_manager_normal_acts},
      {ON_ANY_NORMAL, NULL, drop_database_acts}}},
    {"backup", true, {{ON_ANY_NORMAL, NULL, backup_acts}, {ON_CLUSTER, NULL, backup_cluster_acts}}},
    {"restore",
     true,
     {{ON_ANY_NORMAL, NULL, restore_acts},
      {ON_ADMIN_COLL, "system.users", restore_acts},
      {ON_ADMIN_COLL, "system.roles", restore_acts},
      {ON_CLUSTER, NULL, restore_cluster_acts}}},
    {"readAnyDatabase",
     true,
     {{ON_ANY_NORMAL, NULL, read_acts}, {ON_CLUSTER, NULL, list_databases_acts}}},
    {"readWriteAnyDatabase",
     true,
     {{ON_ANY_NORMAL, NULL, read_acts},
      {ON_ANY_NORMAL, NULL, write_acts},
      {ON_CLUSTER, NULL, list_databases_acts}}},
    {"userAdminAnyDatabase",
     true,
     {{ON_ANY_NORMAL, NULL, user_admin_acts},
      {ON_CLUSTER, NULL, user_admin_cluster_acts},
      {ON_ADMIN_COLL, "system.users", read_acts},
      {ON_ADMIN_COLL, "system.roles", read_acts}}},
    {"dbAdminAnyDatabase",
     true,
     {{ON_ANY_NORMAL, NULL, db_admin_acts}, {ON_CLUSTER, NULL, list_databases_acts}}},
    {"root",
     true,
     {{ON_ANY_NORMAL, NULL, read_acts},
      {ON_ANY_NORMAL, NULL, write_acts},
      {ON_ANY_NORMAL, NULL, db_admin_acts},
      {ON_ANY_NORMAL, NULL, user_admin_acts},
      {ON_CLUSTER, NULL, cluster_monitor_acts},
      {ON_ANY_NORMAL, NULL, cluster_monitor_normal_acts},
      {ON_CLUSTER, NULL, host_manager_acts},
      {ON_ANY_NORMAL, NULL, host_manager_normal_acts},
      {ON_CLUSTER, NULL, cluster_manager_acts},
      {ON_ANY_NORMAL, NULL, cluster_manager_normal_acts},
      {ON_CLUSTER, NULL, user_admin_cluster_acts},
      {ON_ANY_NORMAL, NULL, restore_acts},
      {ON_ADMIN_COLL, "system.users", read_acts},
      {ON_ADMIN_COLL, "system.roles", read_acts}}},
    {"__system", true, {{ON_ANY, NULL, all_acts}}},
};

static const builtin_role_t *
find_builtin(const char *role, const char *db)
{
    for (size_t i = 0; i < sizeof(builtin_roles) / sizeof(builtin_roles[0]); i++) {
        if (strcmp(builtin_roles[i].name, role) == 0 &&
            (!builtin_roles[i].admin_only || strcmp(db, "admin") == 0)) {
            return &builtin_roles[i];
        }
    }
    return NULL;
}

bool
shl_builtin_role_is(const char *role, const char *db)
{
    return find_builtin(role, db) != NULL;
}

bool
shl_builtin_role_privileges(const char *role, const char *db, shl_privilege_list_t *out)
{
    const builtin_role_t *r = find_builtin(role, db);

    for (size_t g = 0; r != NULL && g < 16 && r->grants[g].acts != NULL; g++) {
        shl_privilege_t p;
        memset(&p, 0, sizeof(p));
        switch (r->grants[g].on) {
        case ON_DB:
            p.res.kind = SHL_RES_DB;
            shl_str_copy(p.res.db, sizeof(p.res.db), db);
            break;
        case ON_ANY_NORMAL:
            p.res.kind = SHL_RES_ANY_NORMAL;
            break;
        case ON_CLUSTER:
            p.res.kind = SHL_RES_CLUSTER;
            break;
        case ON_ANY:
            p.res.kind = SHL_RES_ANY;
            break;
        case ON_ADMIN_COLL:
            p.res.kind = SHL_RES_COLL;
            shl_str_copy(p.res.db, sizeof(p.res.db), "admin");
            shl_str_copy(p.res.coll, sizeof(p.res.coll), r->grants[g].coll);
            break;
        }
        for (const shl_action_t *a = r->grants[g].acts; *a != END; a++) {
            shl_action_set_add(&p.actions, *a);
        }
        shl_privilege_list_add(out, &p);
    }
    return r != NULL;
}

/* Whether pattern 'have' covers resource 'need'. */
static bool
pattern_matches(const shl_resource_t *have, const shl_resource_t *need)
{
    bool sys = need->kind == SHL_RES_COLL && strncmp(need->coll, "system.", 7) == 0;
    bool m = false;

    switch (have->kind) {
    case SHL_RES_ANY:
        m = true;
        break;
    case SHL_RES_CLUSTER:
        m = need->kind == SHL_RES_CLUSTER;
        break;
    case SHL_RES_ANY_NORMAL:
        m = (need->kind == SHL_RES_COLL && !sys) || need->kind == SHL_RES_DB;
        break;
    case SHL_RES_DB:
        m = (need->kind == SHL_RES_COLL || need->kind == SHL_RES_DB) && !sys &&
            strcmp(have->db, need->db) == 0;
        break;
    case SHL_RES_COLL:
        m = need->kind == SHL_RES_COLL && strcmp(have->db, need->db) == 0 &&
            strcmp(have->coll, need->coll) == 0;
        break;
    case SHL_RES_COLL_ANY_DB:
        m = need->kind == SHL_RES_COLL && strcmp(have->coll, need->coll) == 0;
        break;
    }
    return m;
}

bool
shl_privileges_allow(const shl_privilege_list_t *privs, const shl_resource_t *need,
                     shl_action_t a)
{
    for (size_t i = 0; i < privs->n; i++) {
        const shl_privilege_t *p = &privs->items[i];
        if (pattern_matches(&p->res, need) && (shl_action_set_has(&p->actions, a) ||
                                               shl_action_set_has(&p->actions, SHL_ACT_ANY_ACTION))) {
            return true;
        }
    }
    return false;
}
