/*
 * cmd_user_mgmt.c -- users and roles: createUser, updateUser, dropUser,
 * dropAllUsersFromDatabase, usersInfo, grantRolesToUser, revokeRolesFromUser, createRole,
 * updateRole, dropRole, dropAllRolesFromDatabase, rolesInfo, grantPrivilegesToRole,
 * revokePrivilegesFromRole, grantRolesToRole, revokeRolesFromRole. Documents keep MongoDB's
 * schemas in admin.system.users / admin.system.roles ({_id: "db.name", ...}) and are read
 * and written through the process's own commands, so a data node and a router share this
 * file. Each change bumps auth_generation. docs/design/auth.md "Users and roles".
 */
#include "auth/auth_private.h"

#include <string.h>

#include "base/log.h"
#include "base/options.h"
#include "base/str.h"
#include "bson/bson_util.h"

/* ---- helpers ---- */

static int
need(shl_op_ctx_t *op, const char *db, shl_action_t a, shl_status_t *st)
{
    shl_resource_t r;
    memset(&r, 0, sizeof(r));
    r.kind = SHL_RES_DB;
    shl_str_copy(r.db, sizeof(r.db), db);
    return auth_check(op, &r, a, st);
}

static const char *
first_string(const bson_t *cmd, const char *what, shl_status_t *st, int *ret)
{
    bson_iter_t it;
    const char *s = NULL;
    if (bson_iter_init(&it, cmd) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it)) {
        s = bson_iter_utf8(&it, NULL);
    }
    if (s == NULL || s[0] == '\0') {
        *ret = shl_status_set(st, SHL_CODE_BAD_VALUE, "%s must be a non-empty string", what);
        s = NULL;
    }
    return s;
}

/* Whether role 'role'@'db' exists (built-in or in admin.system.roles). */
static int
role_exists(shl_service_ctx_t *svc, const char *role, const char *db, bool *exists,
            shl_status_t *st)
{
    int ret = 0;
    char id[400];
    bson_t doc;
    *exists = shl_builtin_role_is(role, db);
    if (!*exists) {
        snprintf(id, sizeof(id), "%s.%s", db, role);
        ret = auth_find_one(svc, "system.roles", id, &doc, exists, st);
        bson_destroy(&doc);
    }
    return ret;
}

/*
 * The roles array of field 'key' ("role" strings of 'db', or {role, db}) normalised into
 * the array 'out' (initialised here) as [{role, db}]; each must exist (RoleNotFound) and
 * the caller must hold 'act' on each role's database.
 */
static int
parse_roles(shl_op_ctx_t *op, const bson_t *cmd, const char *key, const char *db, bool required,
            shl_action_t act, bson_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, r, f;
    uint32_t n = 0;
    char idx[24];

    bson_init(out);
    if (!bson_iter_init_find(&it, cmd, key)) {
        if (required) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "BSON field '%s' is missing but a required field",
                     key);
        }
        goto done;
    }
    if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &r)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "\"%s\" field must be an array", key);
    }
    while (bson_iter_next(&r)) {
        const char *rn = NULL, *rd = db;
        bool exists = false;
        bson_t d;
        if (BSON_ITER_HOLDS_UTF8(&r)) {
            rn = bson_iter_utf8(&r, NULL);
        } else if (BSON_ITER_HOLDS_DOCUMENT(&r) && bson_iter_recurse(&r, &f)) {
            rd = NULL;
            while (bson_iter_next(&f)) {
                if (strcmp(bson_iter_key(&f), "role") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                    rn = bson_iter_utf8(&f, NULL);
                } else if (strcmp(bson_iter_key(&f), "db") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                    rd = bson_iter_utf8(&f, NULL);
                }
            }
        }
        if (rn == NULL || rd == NULL || rn[0] == '\0' || rd[0] == '\0') {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "Role names must be either strings or objects of the form {role: "
                     "\"<role name>\", db: \"<database name>\"}");
        }
        SHL_ERR(need(op, rd, act, st));
        SHL_ERR(role_exists(op->svc, rn, rd, &exists, st));
        if (!exists) {
            SHL_FAIL(st, SHL_CODE_ROLE_NOT_FOUND, "Could not find role: %s@%s", rn, rd);
        }
        snprintf(idx, sizeof(idx), "%u", n++);
        BSON_APPEND_DOCUMENT_BEGIN(out, idx, &d);
        BSON_APPEND_UTF8(&d, "role", rn);
        BSON_APPEND_UTF8(&d, "db", rd);
        bson_append_document_end(out, &d);
    }
done:
    return ret;
}

/* Whether array 'roles' holds {role, db} equal to 'r'. */
static bool
roles_have(const bson_t *roles, const char *role, const char *db)
{
    bson_iter_t it, f;
    bson_iter_init(&it, roles);
    while (bson_iter_next(&it)) {
        const char *rn = "", *rd = "";
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &f)) {
            continue;
        }
        while (bson_iter_next(&f)) {
            if (BSON_ITER_HOLDS_UTF8(&f) && strcmp(bson_iter_key(&f), "role") == 0) {
                rn = bson_iter_utf8(&f, NULL);
            } else if (BSON_ITER_HOLDS_UTF8(&f) && strcmp(bson_iter_key(&f), "db") == 0) {
                rd = bson_iter_utf8(&f, NULL);
            }
        }
        if (strcmp(rn, role) == 0 && strcmp(rd, db) == 0) {
            return true;
        }
    }
    return false;
}

/* 'base' plus (add) or minus (!add) the roles of 'delta', into 'out' (initialised here). */
static void
roles_merge(const bson_t *base, const bson_t *delta, bool add, bson_t *out)
{
    bson_iter_t it, f;
    uint32_t n = 0;
    char idx[24];
    const bson_t *src[2] = {base, delta};

    bson_init(out);
    for (int s = 0; s < (add ? 2 : 1); s++) {
        bson_iter_init(&it, src[s]);
        while (bson_iter_next(&it)) {
            const char *rn = "", *rd = "";
            bson_t d;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &f)) {
                continue;
            }
            while (bson_iter_next(&f)) {
                if (BSON_ITER_HOLDS_UTF8(&f) && strcmp(bson_iter_key(&f), "role") == 0) {
                    rn = bson_iter_utf8(&f, NULL);
                } else if (BSON_ITER_HOLDS_UTF8(&f) && strcmp(bson_iter_key(&f), "db") == 0) {
                    rd = bson_iter_utf8(&f, NULL);
                }
            }
            if ((!add && roles_have(delta, rn, rd)) || roles_have(out, rn, rd)) {
                continue;
            }
            snprintf(idx, sizeof(idx), "%u", n++);
            BSON_APPEND_DOCUMENT_BEGIN(out, idx, &d);
            BSON_APPEND_UTF8(&d, "role", rn);
            BSON_APPEND_UTF8(&d, "db", rd);
            bson_append_document_end(out, &d);
        }
    }
}

/* The credentials document for 'user' / 'pwd' with the mechanisms of 'cmd' (default: both). */
static int
make_credentials(const bson_t *cmd, const char *user, const char *pwd, bson_t *out,
                 shl_status_t *st)
{
    int ret = 0;
    bool want[2] = {true, true};
    bson_iter_t it, m;
    char *prepared = NULL;

    bson_init(out);
    if (bson_iter_init_find(&it, cmd, "mechanisms")) {
        if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &m)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "mechanisms field must be an array");
        }
        want[0] = want[1] = false;
        while (bson_iter_next(&m)) {
            shl_scram_mech_t mech;
            if (!BSON_ITER_HOLDS_UTF8(&m) || !shl_scram_mech_parse(bson_iter_utf8(&m, NULL),
                                                                   &mech)) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Unknown auth mechanism '%s'",
                         BSON_ITER_HOLDS_UTF8(&m) ? bson_iter_utf8(&m, NULL) : "?");
            }
            want[mech] = true;
        }
        if (!want[0] && !want[1]) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "mechanisms field must not be empty");
        }
    }
    if (bson_iter_init_find(&it, cmd, "digestPassword") && !bson_iter_as_bool(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "Use of SCRAM-SHA-256 requires undigested passwords");
    }
    for (int i = 0; i < 2; i++) {
        shl_scram_mech_t mech = i == 0 ? SHL_SCRAM_SHA1 : SHL_SCRAM_SHA256;
        shl_scram_creds_t c;
        bson_t d;
        int32_t iters = (int32_t)(mech == SHL_SCRAM_SHA1
                                      ? shl_opt_int(SHL_OPT_scramIterationCount)
                                      : shl_opt_int(SHL_OPT_scramSHA256IterationCount));
        if (!want[i]) {
            continue;
        }
        SHL_ERR(shl_scram_password_prepare(mech, user, pwd, &prepared, st));
        SHL_ERR(shl_scram_creds_make(mech, prepared, iters, NULL, 0, &c, st));
        memset(prepared, 0, strlen(prepared));
        bson_free(prepared);
        prepared = NULL;
        BSON_APPEND_DOCUMENT_BEGIN(out, shl_scram_mech_name(mech), &d);
        BSON_APPEND_INT32(&d, "iterationCount", c.iterations);
        BSON_APPEND_UTF8(&d, "salt", c.salt);
        BSON_APPEND_UTF8(&d, "storedKey", c.stored_key);
        BSON_APPEND_UTF8(&d, "serverKey", c.server_key);
        bson_append_document_end(out, &d);
    }
done:
    if (prepared != NULL) {
        memset(prepared, 0, strlen(prepared));
        bson_free(prepared);
    }
    return ret;
}

static const char *
get_pwd(const bson_t *cmd, bool *has, shl_status_t *st, int *ret)
{
    bson_iter_t it;
    const char *pwd = NULL;
    *has = false;
    if (bson_iter_init_find(&it, cmd, "pwd")) {
        *has = true;
        if (!BSON_ITER_HOLDS_UTF8(&it) || bson_iter_utf8(&it, NULL)[0] == '\0') {
            *ret = shl_status_set(st, SHL_CODE_BAD_VALUE, "User passwords must not be empty");
        } else {
            pwd = bson_iter_utf8(&it, NULL);
        }
    }
    return pwd;
}

static void
bump(void)
{
    atomic_fetch_add(&auth_generation, 1);
}

/* Replace the document 'id' of admin.<coll> with 'doc'. */
static int
store_replace(shl_service_ctx_t *svc, const char *coll, const char *id, const bson_t *doc,
              shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, ups, u, q, reply;
    BSON_APPEND_UTF8(&cmd, "update", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &ups);
    BSON_APPEND_DOCUMENT_BEGIN(&ups, "0", &u);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "q", &q);
    BSON_APPEND_UTF8(&q, "_id", id);
    bson_append_document_end(&u, &q);
    BSON_APPEND_DOCUMENT(&u, "u", doc);
    bson_append_document_end(&ups, &u);
    bson_append_array_end(&cmd, &ups);
    ret = auth_run(svc, "admin", &cmd, &reply, st);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    bump();
    return ret;
}

/* Replace the document of admin.<coll> that has 'doc's _id with 'doc'. */
static int
store_replace_doc(shl_service_ctx_t *svc, const char *coll, const bson_t *doc, shl_status_t *st)
{
    bson_iter_t it;
    return store_replace(svc, coll,
                         bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_UTF8(&it)
                             ? bson_iter_utf8(&it, NULL)
                             : "",
                         doc, st);
}

/* A view of the array 'key' of 'doc' (empty when it has none); 'doc' must outlive it. */
static void
array_field(const bson_t *doc, const char *key, bson_t *view)
{
    bson_iter_t it;
    bson_init(view);
    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_ARRAY(&it)) {
        const uint8_t *d;
        uint32_t l;
        bson_iter_array(&it, &l, &d);
        bson_destroy(view);
        bson_init_static(view, d, l);
    }
}

/*
 * What differs between the user and the role commands of one shape (drop one, drop all of a
 * database): where they are stored, how the command's first field is named in errors, the
 * action dropping needs.
 */
typedef struct kind {
    const char *coll;
    const char *label;
    shl_action_t drop_action;
    bool is_role;
} kind_t;

static const kind_t USERS = {"system.users", "User name", SHL_ACT_DROP_USER, false};
static const kind_t ROLES = {"system.roles", "Role name", SHL_ACT_DROP_ROLE, true};


static int
store_insert(shl_service_ctx_t *svc, const char *coll, const bson_t *doc, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, docs, reply;
    BSON_APPEND_UTF8(&cmd, "insert", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &docs);
    BSON_APPEND_DOCUMENT(&docs, "0", doc);
    bson_append_array_end(&cmd, &docs);
    ret = auth_run(svc, "admin", &cmd, &reply, st);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    bump();
    return ret;
}

/* Delete what 'filter' matches in admin.<coll>; *n (may be NULL) the count. */
static int
store_delete(shl_service_ctx_t *svc, const char *coll, const bson_t *filter, int64_t *n,
             shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, dels, d, reply;
    bson_iter_t it;
    BSON_APPEND_UTF8(&cmd, "delete", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "deletes", &dels);
    BSON_APPEND_DOCUMENT_BEGIN(&dels, "0", &d);
    BSON_APPEND_DOCUMENT(&d, "q", filter);
    BSON_APPEND_INT32(&d, "limit", 0);
    bson_append_document_end(&dels, &d);
    bson_append_array_end(&cmd, &dels);
    ret = auth_run(svc, "admin", &cmd, &reply, st);
    if (ret == 0 && n != NULL) {
        *n = bson_iter_init_find(&it, &reply, "n") ? bson_iter_as_int64(&it) : 0;
    }
    bson_destroy(&cmd);
    bson_destroy(&reply);
    bump();
    return ret;
}

/* A copy of 'doc' with field 'key' set to 'val' (an array or document), or removed (NULL). */
static void
doc_with(const bson_t *doc, const char *key, const bson_t *val, bool is_array, bson_t *out)
{
    bson_iter_t it;
    bool put = false;
    bson_init(out);
    bson_iter_init(&it, doc);
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), key) == 0) {
            if (val != NULL) {
                if (is_array) {
                    BSON_APPEND_ARRAY(out, key, val);
                } else {
                    BSON_APPEND_DOCUMENT(out, key, val);
                }
            }
            put = true;
        } else {
            bson_append_iter(out, NULL, 0, &it);
        }
    }
    if (!put && val != NULL) {
        if (is_array) {
            BSON_APPEND_ARRAY(out, key, val);
        } else {
            BSON_APPEND_DOCUMENT(out, key, val);
        }
    }
}

/* ---- users ---- */

static int
load_user(shl_op_ctx_t *op, const char *name, bson_t *doc, shl_status_t *st)
{
    int ret = 0;
    char id[400];
    bool found = false;
    snprintf(id, sizeof(id), "%s.%s", op->db, name);
    SHL_ERR(auth_find_one(op->svc, "system.users", id, doc, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_USER_NOT_FOUND, "Could not find user \"%s\" for db \"%s\"", name,
                 op->db);
    }
done:
    return ret;
}

static int
cmd_create_user(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *name, *pwd;
    bool has_pwd, exists = false;
    bson_t roles = BSON_INITIALIZER, creds = BSON_INITIALIZER, doc = BSON_INITIALIZER, old;
    bson_iter_t it;
    char id[400];
    uint8_t uuid[16];
    (void)reply;

    bson_init(&old);
    if ((name = first_string(cmd, "User name", st, &ret)) == NULL) {
        goto done;
    }
    SHL_ERR(need(op, op->db, SHL_ACT_CREATE_USER, st));
    pwd = get_pwd(cmd, &has_pwd, st, &ret);
    SHL_ERR(ret);
    if (!has_pwd && strcmp(op->db, "$external") != 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "Must provide a 'pwd' field for all user documents, except those with "
                 "'$external' as the user's source db");
    }
    if (strcmp(op->db, "local") == 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Cannot create users in the local database");
    }
    bson_destroy(&roles);
    SHL_ERR(parse_roles(op, cmd, "roles", op->db, true, SHL_ACT_GRANT_ROLE, &roles, st));
    snprintf(id, sizeof(id), "%s.%s", op->db, name);
    bson_destroy(&old);
    SHL_ERR(auth_find_one(op->svc, "system.users", id, &old, &exists, st));
    if (exists) {
        SHL_FAIL(st, 51003, "User \"%s@%s\" already exists", name, op->db);
    }
    bson_destroy(&creds);
    if (strcmp(op->db, "$external") == 0) {
        /* Users of external mechanisms (MONGODB-X509) hold no password: MongoDB marks
         * them {external: true}. */
        if (has_pwd) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "Cannot set a password for users defined on the '$external' database");
        }
        bson_init(&creds);
        BSON_APPEND_BOOL(&creds, "external", true);
    } else {
        SHL_ERR(make_credentials(cmd, name, pwd, &creds, st));
    }
    BSON_APPEND_UTF8(&doc, "_id", id);
    shl_uuid_gen(uuid);
    shl_bson_append_uuid(&doc, "userId", uuid);
    BSON_APPEND_UTF8(&doc, "user", name);
    BSON_APPEND_UTF8(&doc, "db", op->db);
    BSON_APPEND_DOCUMENT(&doc, "credentials", &creds);
    BSON_APPEND_ARRAY(&doc, "roles", &roles);
    if (bson_iter_init_find(&it, cmd, "customData")) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "\"customData\" must be an object");
        }
        bson_append_iter(&doc, "customData", -1, &it);
    }
    SHL_ERR(store_insert(op->svc, "system.users", &doc, st));
    SHL_LOG_INFO(ACCESS, 4615702, "Created user", "user", BCON_UTF8(name), "db",
                 BCON_UTF8(op->db));
done:
    bson_destroy(&roles);
    bson_destroy(&creds);
    bson_destroy(&doc);
    bson_destroy(&old);
    return ret;
}

static int
cmd_update_user(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *name, *pwd;
    bool has_pwd;
    bson_t doc = BSON_INITIALIZER, cur, next, roles = BSON_INITIALIZER,
           creds = BSON_INITIALIZER;
    bson_iter_t it;
    (void)reply;

    if ((name = first_string(cmd, "User name", st, &ret)) == NULL) {
        goto done;
    }
    pwd = get_pwd(cmd, &has_pwd, st, &ret);
    SHL_ERR(ret);
    if (has_pwd && strcmp(op->db, "$external") == 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "Cannot set a password for users defined on the '$external' database");
    }
    if (has_pwd) {
        SHL_ERR(need(op, op->db, SHL_ACT_CHANGE_PASSWORD, st));
    }
    if (bson_iter_init_find(&it, cmd, "customData")) {
        SHL_ERR(need(op, op->db, SHL_ACT_CHANGE_CUSTOM_DATA, st));
    }
    if (bson_iter_init_find(&it, cmd, "roles")) {
        bson_destroy(&roles);
        SHL_ERR(parse_roles(op, cmd, "roles", op->db, true, SHL_ACT_GRANT_ROLE, &roles, st));
    }
    if (!has_pwd && !bson_iter_init_find(&it, cmd, "customData") &&
        !bson_iter_init_find(&it, cmd, "roles")) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Must specify at least one field to update in updateUser");
    }
    bson_destroy(&doc);
    SHL_ERR(load_user(op, name, &doc, st));
    bson_copy_to(&doc, &cur);
    if (has_pwd) {
        bson_destroy(&creds);
        SHL_ERR(make_credentials(cmd, name, pwd, &creds, st));
        doc_with(&cur, "credentials", &creds, false, &next);
        bson_destroy(&cur);
        cur = next;
    }
    if (bson_iter_init_find(&it, cmd, "roles")) {
        doc_with(&cur, "roles", &roles, true, &next);
        bson_destroy(&cur);
        cur = next;
    }
    if (bson_iter_init_find(&it, cmd, "customData") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        const uint8_t *d;
        uint32_t l;
        bson_t cd;
        bson_iter_document(&it, &l, &d);
        bson_init_static(&cd, d, l);
        doc_with(&cur, "customData", &cd, false, &next);
        bson_destroy(&cur);
        cur = next;
    }
    ret = store_replace_doc(op->svc, "system.users", &cur, st);
    bson_destroy(&cur);
done:
    bson_destroy(&doc);
    bson_destroy(&roles);
    bson_destroy(&creds);
    return ret;
}

static int
change_user_roles(shl_op_ctx_t *op, const bson_t *cmd, bool grant, shl_status_t *st)
{
    int ret = 0;
    const char *name;
    bson_t doc = BSON_INITIALIZER, delta = BSON_INITIALIZER, merged = BSON_INITIALIZER, next,
           view;

    if ((name = first_string(cmd, "User name", st, &ret)) == NULL) {
        goto done;
    }
    bson_destroy(&delta);
    SHL_ERR(parse_roles(op, cmd, "roles", op->db, true,
                        grant ? SHL_ACT_GRANT_ROLE : SHL_ACT_REVOKE_ROLE, &delta, st));
    bson_destroy(&doc);
    SHL_ERR(load_user(op, name, &doc, st));
    array_field(&doc, "roles", &view);
    bson_destroy(&merged);
    roles_merge(&view, &delta, grant, &merged);
    doc_with(&doc, "roles", &merged, true, &next);
    ret = store_replace_doc(op->svc, "system.users", &next, st);
    bson_destroy(&next);
done:
    bson_destroy(&doc);
    bson_destroy(&delta);
    bson_destroy(&merged);
    return ret;
}

static int
cmd_grant_roles_to_user(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)reply;
    return change_user_roles(op, cmd, true, st);
}

static int
cmd_revoke_roles_from_user(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)reply;
    return change_user_roles(op, cmd, false, st);
}

/* Append one user's usersInfo entry from its stored document. */
static void
append_user_info(shl_op_ctx_t *op, bson_t *arr, const char *idx, const bson_t *doc,
                 bool show_creds, bool show_privs)
{
    bson_iter_t it, c;
    bson_t u, mechs;
    int n = 0;

    bson_append_document_begin(arr, idx, -1, &u);
    bson_iter_init(&it, doc);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "credentials") == 0) {
            if (show_creds) {
                bson_append_iter(&u, NULL, 0, &it);
            }
            continue;
        }
        bson_append_iter(&u, NULL, 0, &it);
    }
    BSON_APPEND_ARRAY_BEGIN(&u, "mechanisms", &mechs);
    if (bson_iter_init_find(&it, doc, "credentials") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &c)) {
        while (bson_iter_next(&c)) {
            BSON_APPEND_UTF8(&mechs, n == 0 ? "0" : "1", bson_iter_key(&c));
            n++;
        }
    }
    bson_append_array_end(&u, &mechs);
    if (show_privs && bson_iter_init_find(&it, doc, "roles") && BSON_ITER_HOLDS_ARRAY(&it)) {
        const uint8_t *d;
        uint32_t l;
        bson_t roles, all = BSON_INITIALIZER, parr;
        shl_privilege_list_t privs = {0};
        shl_status_t st = SHL_STATUS_INIT;
        char pidx[24];
        bson_iter_array(&it, &l, &d);
        bson_init_static(&roles, d, l);
        auth_resolve_roles(op->svc, &roles, &privs, &all, &st);
        BSON_APPEND_ARRAY(&u, "inheritedRoles", &all);
        BSON_APPEND_ARRAY_BEGIN(&u, "inheritedPrivileges", &parr);
        for (size_t i = 0; i < privs.n; i++) {
            snprintf(pidx, sizeof(pidx), "%zu", i);
            shl_privilege_append(&parr, pidx, &privs.items[i]);
        }
        bson_append_array_end(&u, &parr);
        bson_destroy(&all);
        shl_privilege_list_cleanup(&privs);
    }
    bson_append_document_end(arr, &u);
}

/* Add to 'filter_ids' the _id a usersInfo/rolesInfo argument 'it' names ("name" or
 * {user|role, db}); false when malformed. 'who' is "user" or "role". */
static bool
name_id(const bson_iter_t *it, const char *who, const char *db, char *id, size_t n, char *idb,
        size_t dbn)
{
    bson_iter_t f;
    const char *nm = NULL, *d = db;
    if (BSON_ITER_HOLDS_UTF8(it)) {
        nm = bson_iter_utf8(it, NULL);
    } else if (BSON_ITER_HOLDS_DOCUMENT(it) && bson_iter_recurse(it, &f)) {
        d = NULL;
        while (bson_iter_next(&f)) {
            if (strcmp(bson_iter_key(&f), who) == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                nm = bson_iter_utf8(&f, NULL);
            } else if (strcmp(bson_iter_key(&f), "db") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                d = bson_iter_utf8(&f, NULL);
            }
        }
    }
    if (nm == NULL || d == NULL) {
        return false;
    }
    snprintf(id, n, "%s.%s", d, nm);
    shl_str_copy(idb, dbn, d);
    return true;
}

static int
cmd_users_info(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, a;
    bson_t filter = BSON_INITIALIZER, found = BSON_INITIALIZER, ids, users;
    bool show_creds = false, show_privs = false, all_dbs = false, self = false;
    auth_conn_t *ac = auth_conn_get(op);
    char id[400], idb[64], idx[24];
    uint32_t n = 0;

    if (bson_iter_init_find(&it, cmd, "showCredentials")) {
        show_creds = bson_iter_as_bool(&it);
    }
    if (bson_iter_init_find(&it, cmd, "showPrivileges")) {
        show_privs = bson_iter_as_bool(&it);
    }
    if (bson_iter_init_find(&it, cmd, "forAllDBs")) {
        all_dbs = bson_iter_as_bool(&it);
    }
    bson_iter_init(&it, cmd);
    bson_iter_next(&it);
    if (BSON_ITER_HOLDS_NUMBER(&it)) {
        if (all_dbs) {
            shl_resource_t r = {.kind = SHL_RES_CLUSTER};
            (void)r;
            SHL_ERR(need(op, "admin", SHL_ACT_VIEW_USER, st));
        } else {
            BSON_APPEND_UTF8(&filter, "db", op->db);
            SHL_ERR(need(op, op->db, SHL_ACT_VIEW_USER, st));
        }
    } else {
        uint32_t k = 0;
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &ids);
        BSON_APPEND_ARRAY_BEGIN(&ids, "$in", &users);
        bool single = !BSON_ITER_HOLDS_ARRAY(&it);
        if (!single) {
            bson_iter_recurse(&it, &a);
        } else {
            a = it;
        }
        while (ret == 0 && (single || bson_iter_next(&a))) {
            if (!name_id(&a, "user", op->db, id, sizeof(id), idb, sizeof(idb))) {
                ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                                     "User and role names must be either strings or objects");
                break;
            }
            /* A user may always see itself. */
            self = ac != NULL && ac->authed && strlen(ac->db) + 1 + strlen(ac->user) ==
                                                   strlen(id) &&
                   strncmp(id, ac->db, strlen(ac->db)) == 0 &&
                   strcmp(id + strlen(ac->db) + 1, ac->user) == 0;
            if (!self && (ret = need(op, idb, SHL_ACT_VIEW_USER, st)) != 0) {
                break;
            }
            snprintf(idx, sizeof(idx), "%u", k++);
            BSON_APPEND_UTF8(&users, idx, id);
            if (single) {
                break;
            }
        }
        bson_append_array_end(&ids, &users);
        bson_append_document_end(&filter, &ids);
        SHL_ERR(ret);
    }
    SHL_ERR(auth_find_many(op->svc, "system.users", &filter, &found, st));
    BSON_APPEND_ARRAY_BEGIN(reply, "users", &users);
    bson_iter_init(&a, &found);
    while (bson_iter_next(&a)) {
        const uint8_t *d;
        uint32_t l;
        bson_t doc;
        bson_iter_document(&a, &l, &d);
        bson_init_static(&doc, d, l);
        snprintf(idx, sizeof(idx), "%u", n++);
        append_user_info(op, &users, idx, &doc, show_creds, show_privs);
    }
    bson_append_array_end(reply, &users);
done:
    bson_destroy(&filter);
    bson_destroy(&found);
    return ret;
}

/* ---- roles ---- */

/* The privileges array of 'cmd' validated into 'out' (initialised here). */
static int
parse_privileges(const bson_t *cmd, bool required, bson_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, p;
    uint32_t n = 0;
    char idx[24];

    bson_init(out);
    if (!bson_iter_init_find(&it, cmd, "privileges")) {
        if (required) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "BSON field 'privileges' is missing but a required field");
        }
        goto done;
    }
    if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &p)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "\"privileges\" field must be an array");
    }
    while (bson_iter_next(&p)) {
        shl_privilege_t priv;
        bson_t doc;
        const uint8_t *d;
        uint32_t l;
        if (!BSON_ITER_HOLDS_DOCUMENT(&p)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "privileges must be objects");
        }
        bson_iter_document(&p, &l, &d);
        bson_init_static(&doc, d, l);
        SHL_ERR(shl_privilege_parse(&doc, &priv, st));
        snprintf(idx, sizeof(idx), "%u", n++);
        shl_privilege_append(out, idx, &priv);
    }
done:
    return ret;
}

static int
load_role(shl_op_ctx_t *op, const char *name, bson_t *doc, shl_status_t *st)
{
    int ret = 0;
    char id[400];
    bool found = false;
    snprintf(id, sizeof(id), "%s.%s", op->db, name);
    SHL_ERR(auth_find_one(op->svc, "system.roles", id, doc, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_ROLE_NOT_FOUND, "Could not find role: %s@%s", name, op->db);
    }
done:
    return ret;
}

static int
cmd_create_role(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *name;
    bool exists = false;
    bson_t roles = BSON_INITIALIZER, privs = BSON_INITIALIZER, doc = BSON_INITIALIZER;
    char id[400];
    (void)reply;

    if ((name = first_string(cmd, "Role name", st, &ret)) == NULL) {
        goto done;
    }
    SHL_ERR(need(op, op->db, SHL_ACT_CREATE_ROLE, st));
    if (shl_builtin_role_is(name, op->db) || shl_builtin_role_is(name, "admin")) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Cannot create roles with the same name as a built-in role");
    }
    bson_destroy(&roles);
    bson_destroy(&privs);
    SHL_ERR(parse_roles(op, cmd, "roles", op->db, true, SHL_ACT_GRANT_ROLE, &roles, st));
    SHL_ERR(parse_privileges(cmd, true, &privs, st));
    SHL_ERR(role_exists(op->svc, name, op->db, &exists, st));
    if (exists) {
        SHL_FAIL(st, 51002, "Role \"%s@%s\" already exists", name, op->db);
    }
    snprintf(id, sizeof(id), "%s.%s", op->db, name);
    BSON_APPEND_UTF8(&doc, "_id", id);
    BSON_APPEND_UTF8(&doc, "role", name);
    BSON_APPEND_UTF8(&doc, "db", op->db);
    BSON_APPEND_ARRAY(&doc, "privileges", &privs);
    BSON_APPEND_ARRAY(&doc, "roles", &roles);
    SHL_ERR(store_insert(op->svc, "system.roles", &doc, st));
done:
    bson_destroy(&roles);
    bson_destroy(&privs);
    bson_destroy(&doc);
    return ret;
}

/* updateRole and the grant/revoke commands: change a role's privileges and/or roles. */
typedef enum { SET, ADD, REMOVE } change_t;

static void
privs_merge(const bson_t *base, const bson_t *delta, change_t how, bson_t *out)
{
    /* Work on action sets per resource: parse both sides, then rebuild. */
    shl_privilege_list_t l = {0};
    bson_iter_t it;
    const bson_t *srcs[2] = {base, delta};
    char idx[24];

    bson_init(out);
    for (int s = 0; s < 2; s++) {
        bson_iter_init(&it, srcs[s]);
        while (bson_iter_next(&it)) {
            shl_privilege_t p;
            shl_status_t st = SHL_STATUS_INIT;
            const uint8_t *d;
            uint32_t len;
            bson_t doc;
            size_t i;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
                continue;
            }
            bson_iter_document(&it, &len, &d);
            bson_init_static(&doc, d, len);
            if (shl_privilege_parse(&doc, &p, &st) != 0) {
                continue;
            }
            for (i = 0; i < l.n; i++) {
                if (l.items[i].res.kind == p.res.kind && strcmp(l.items[i].res.db, p.res.db) == 0 &&
                    strcmp(l.items[i].res.coll, p.res.coll) == 0) {
                    break;
                }
            }
            if (s == 1 && how == REMOVE) {
                if (i < l.n) {
                    l.items[i].actions.bits[0] &= ~p.actions.bits[0];
                    l.items[i].actions.bits[1] &= ~p.actions.bits[1];
                }
            } else if (i < l.n) {
                l.items[i].actions.bits[0] |= p.actions.bits[0];
                l.items[i].actions.bits[1] |= p.actions.bits[1];
            } else {
                shl_privilege_list_add(&l, &p);
            }
        }
    }
    for (size_t i = 0, n = 0; i < l.n; i++) {
        if (l.items[i].actions.bits[0] != 0 || l.items[i].actions.bits[1] != 0) {
            snprintf(idx, sizeof(idx), "%zu", n++);
            shl_privilege_append(out, idx, &l.items[i]);
        }
    }
    shl_privilege_list_cleanup(&l);
}

static int
change_role(shl_op_ctx_t *op, const bson_t *cmd, change_t privs_how, change_t roles_how,
            bool want_privs, bool want_roles, shl_status_t *st)
{
    int ret = 0;
    const char *name;
    bson_iter_t it;
    bson_t doc = BSON_INITIALIZER, dprivs = BSON_INITIALIZER, droles = BSON_INITIALIZER, cur,
           next, view, merged;
    bool has_privs, has_roles;

    if ((name = first_string(cmd, "Role name", st, &ret)) == NULL) {
        goto done;
    }
    if (shl_builtin_role_is(name, op->db)) {
        SHL_FAIL(st, SHL_CODE_INVALID_ROLE_MODIFICATION,
                 "Cannot grant privileges to built-in role: %s@%s", name, op->db);
    }
    has_privs = want_privs && bson_iter_init_find(&it, cmd, "privileges");
    has_roles = want_roles && bson_iter_init_find(&it, cmd, "roles");
    SHL_ERR(need(op, op->db, roles_how == REMOVE || privs_how == REMOVE ? SHL_ACT_REVOKE_ROLE
                                                                        : SHL_ACT_GRANT_ROLE,
                 st));
    bson_destroy(&dprivs);
    bson_destroy(&droles);
    SHL_ERR(parse_privileges(cmd, want_privs && !want_roles, &dprivs, st));
    SHL_ERR(parse_roles(op, cmd, "roles", op->db, want_roles && !want_privs,
                        roles_how == REMOVE ? SHL_ACT_REVOKE_ROLE : SHL_ACT_GRANT_ROLE, &droles,
                        st));
    if (!has_privs && !has_roles) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Must specify at least one field to update in updateRole");
    }
    bson_destroy(&doc);
    SHL_ERR(load_role(op, name, &doc, st));
    bson_copy_to(&doc, &cur);
    if (has_privs) {
        array_field(&cur, "privileges", &view);
        if (privs_how == SET) {
            privs_merge(&dprivs, &dprivs, SET, &merged);
        } else {
            privs_merge(&view, &dprivs, privs_how, &merged);
        }
        doc_with(&cur, "privileges", &merged, true, &next);
        bson_destroy(&merged);
        bson_destroy(&cur);
        cur = next;
    }
    if (has_roles) {
        array_field(&cur, "roles", &view);
        if (roles_how == SET) {
            bson_t empty = BSON_INITIALIZER;
            roles_merge(&empty, &droles, true, &merged);
        } else {
            roles_merge(&view, &droles, roles_how == ADD, &merged);
        }
        doc_with(&cur, "roles", &merged, true, &next);
        bson_destroy(&merged);
        bson_destroy(&cur);
        cur = next;
    }
    ret = store_replace_doc(op->svc, "system.roles", &cur, st);
    bson_destroy(&cur);
done:
    bson_destroy(&doc);
    bson_destroy(&dprivs);
    bson_destroy(&droles);
    return ret;
}

static int
cmd_update_role(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)reply;
    return change_role(op, cmd, SET, SET, true, true, st);
}

static int
cmd_grant_privileges_to_role(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)reply;
    return change_role(op, cmd, ADD, ADD, true, false, st);
}

static int
cmd_revoke_privileges_from_role(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply,
                                shl_status_t *st)
{
    (void)reply;
    return change_role(op, cmd, REMOVE, REMOVE, true, false, st);
}

static int
cmd_grant_roles_to_role(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)reply;
    return change_role(op, cmd, ADD, ADD, false, true, st);
}

static int
cmd_revoke_roles_from_role(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)reply;
    return change_role(op, cmd, REMOVE, REMOVE, false, true, st);
}

/* Remove {role, db} from every user and role that holds it (a dropped role, as MongoDB). */
static int
pull_role_everywhere(shl_service_ctx_t *svc, const char *role, const char *db, shl_status_t *st)
{
    int ret = 0;
    const char *colls[2] = {"system.users", "system.roles"};
    for (int c = 0; c < 2 && ret == 0; c++) {
        bson_t filter = BSON_INITIALIZER, em, arr = BSON_INITIALIZER, f;
        bson_iter_t it;
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "roles", &em);
        BSON_APPEND_DOCUMENT_BEGIN(&em, "$elemMatch", &f);
        BSON_APPEND_UTF8(&f, "role", role);
        BSON_APPEND_UTF8(&f, "db", db);
        bson_append_document_end(&em, &f);
        bson_append_document_end(&filter, &em);
        ret = auth_find_many(svc, colls[c], &filter, &arr, st);
        bson_iter_init(&it, &arr);
        while (ret == 0 && bson_iter_next(&it)) {
            const uint8_t *d;
            uint32_t l;
            bson_t doc, view, one = BSON_INITIALIZER, r, merged, next;
            bson_iter_document(&it, &l, &d);
            bson_init_static(&doc, d, l);
            array_field(&doc, "roles", &view);
            BSON_APPEND_DOCUMENT_BEGIN(&one, "0", &r);
            BSON_APPEND_UTF8(&r, "role", role);
            BSON_APPEND_UTF8(&r, "db", db);
            bson_append_document_end(&one, &r);
            roles_merge(&view, &one, false, &merged);
            doc_with(&doc, "roles", &merged, true, &next);
            ret = store_replace_doc(svc, colls[c], &next, st);
            bson_destroy(&one);
            bson_destroy(&merged);
            bson_destroy(&next);
        }
        bson_destroy(&filter);
        bson_destroy(&arr);
    }
    return ret;
}

/* dropUser / dropRole: the document "<db>.<name>" (a role also leaves every user and role
 * that held it). */
static int
drop_one(shl_op_ctx_t *op, const bson_t *cmd, const kind_t *k, shl_status_t *st)
{
    int ret = 0;
    const char *name;
    bson_t filter = BSON_INITIALIZER;
    char id[400];
    int64_t n = 0;

    if ((name = first_string(cmd, k->label, st, &ret)) == NULL) {
        goto done;
    }
    SHL_ERR(need(op, op->db, k->drop_action, st));
    if (k->is_role && shl_builtin_role_is(name, op->db)) {
        SHL_FAIL(st, SHL_CODE_INVALID_ROLE_MODIFICATION, "Cannot drop built-in role: %s@%s", name,
                 op->db);
    }
    snprintf(id, sizeof(id), "%s.%s", op->db, name);
    BSON_APPEND_UTF8(&filter, "_id", id);
    SHL_ERR(store_delete(op->svc, k->coll, &filter, &n, st));
    if (n == 0 && k->is_role) {
        SHL_FAIL(st, SHL_CODE_ROLE_NOT_FOUND, "Could not find role: %s@%s", name, op->db);
    } else if (n == 0) {
        SHL_FAIL(st, SHL_CODE_USER_NOT_FOUND, "Could not find user \"%s\" for db \"%s\"", name,
                 op->db);
    }
    if (k->is_role) {
        SHL_ERR(pull_role_everywhere(op->svc, name, op->db, st));
    }
done:
    bson_destroy(&filter);
    return ret;
}

/* dropAllUsersFromDatabase / dropAllRolesFromDatabase: every one of the database; the
 * reply's n counts them. */
static int
drop_all(shl_op_ctx_t *op, const kind_t *k, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_t filter = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    bson_iter_t it, f;
    int64_t n = 0;

    SHL_ERR(need(op, op->db, k->drop_action, st));
    BSON_APPEND_UTF8(&filter, "db", op->db);
    if (k->is_role) {
        SHL_ERR(auth_find_many(op->svc, k->coll, &filter, &arr, st));
    }
    SHL_ERR(store_delete(op->svc, k->coll, &filter, &n, st));
    bson_iter_init(&it, &arr);
    while (bson_iter_next(&it)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &f) &&
            bson_iter_find(&f, "role") && BSON_ITER_HOLDS_UTF8(&f)) {
            SHL_ERR(pull_role_everywhere(op->svc, bson_iter_utf8(&f, NULL), op->db, st));
        }
    }
    BSON_APPEND_INT32(reply, "n", (int32_t)n);
done:
    bson_destroy(&filter);
    bson_destroy(&arr);
    return ret;
}

static int
cmd_drop_user(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)reply;
    return drop_one(op, cmd, &USERS, st);
}

static int
cmd_drop_role(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)reply;
    return drop_one(op, cmd, &ROLES, st);
}

static int
cmd_drop_all_users(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)cmd;
    return drop_all(op, &USERS, reply, st);
}

static int
cmd_drop_all_roles(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)cmd;
    return drop_all(op, &ROLES, reply, st);
}

/* One rolesInfo entry: a stored role's document, or a built-in role's. */
static void
append_role_info(shl_op_ctx_t *op, bson_t *arr, const char *idx, const char *role, const char *db,
                 const bson_t *doc, bool show_privs)
{
    bson_t r, empty = BSON_INITIALIZER, direct, all = BSON_INITIALIZER, parr, one = BSON_INITIALIZER,
              od;
    shl_privilege_list_t privs = {0};
    shl_status_t st = SHL_STATUS_INIT;
    char pidx[24];
    bool builtin = doc == NULL;

    bson_append_document_begin(arr, idx, -1, &r);
    BSON_APPEND_UTF8(&r, "role", role);
    BSON_APPEND_UTF8(&r, "db", db);
    BSON_APPEND_BOOL(&r, "isBuiltin", builtin);
    if (builtin) {
        direct = empty;
    } else {
        array_field(doc, "roles", &direct);
    }
    BSON_APPEND_ARRAY(&r, "roles", &direct);
    BSON_APPEND_DOCUMENT_BEGIN(&one, "0", &od);
    BSON_APPEND_UTF8(&od, "role", role);
    BSON_APPEND_UTF8(&od, "db", db);
    bson_append_document_end(&one, &od);
    auth_resolve_roles(op->svc, &one, &privs, &all, &st);
    {
        /* inheritedRoles: every role reached but the role itself */
        bson_t inh;
        bson_iter_t it;
        uint32_t n = 0;
        char k[24];
        BSON_APPEND_ARRAY_BEGIN(&r, "inheritedRoles", &inh);
        bson_iter_init(&it, &all);
        bson_iter_next(&it);
        while (bson_iter_next(&it)) {
            snprintf(k, sizeof(k), "%u", n++);
            bson_append_iter(&inh, k, -1, &it);
        }
        bson_append_array_end(&r, &inh);
    }
    if (show_privs) {
        bson_t own;
        if (builtin) {
            BSON_APPEND_ARRAY_BEGIN(&r, "privileges", &parr);
            for (size_t i = 0; i < privs.n; i++) {
                snprintf(pidx, sizeof(pidx), "%zu", i);
                shl_privilege_append(&parr, pidx, &privs.items[i]);
            }
            bson_append_array_end(&r, &parr);
        } else {
            array_field(doc, "privileges", &own);
            BSON_APPEND_ARRAY(&r, "privileges", &own);
        }
        BSON_APPEND_ARRAY_BEGIN(&r, "inheritedPrivileges", &parr);
        for (size_t i = 0; i < privs.n; i++) {
            snprintf(pidx, sizeof(pidx), "%zu", i);
            shl_privilege_append(&parr, pidx, &privs.items[i]);
        }
        bson_append_array_end(&r, &parr);
    }
    bson_append_document_end(arr, &r);
    bson_destroy(&all);
    bson_destroy(&one);
    shl_privilege_list_cleanup(&privs);
}

static const char *const builtin_names[] = {
    "read", "readWrite", "dbAdmin", "userAdmin", "dbOwner", "clusterMonitor", "hostManager",
    "clusterManager", "clusterAdmin", "backup", "restore", "readAnyDatabase",
    "readWriteAnyDatabase", "userAdminAnyDatabase", "dbAdminAnyDatabase", "root", "__system"};

static int
cmd_roles_info(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, a;
    bson_t roles;
    bool show_privs = false, show_builtin = false;
    char id[400], idb[64], idx[24];
    uint32_t n = 0;

    if (bson_iter_init_find(&it, cmd, "showPrivileges")) {
        show_privs = BSON_ITER_HOLDS_UTF8(&it) || bson_iter_as_bool(&it);
    }
    if (bson_iter_init_find(&it, cmd, "showBuiltinRoles")) {
        show_builtin = bson_iter_as_bool(&it);
    }
    bson_iter_init(&it, cmd);
    bson_iter_next(&it);
    BSON_APPEND_ARRAY_BEGIN(reply, "roles", &roles);
    if (BSON_ITER_HOLDS_NUMBER(&it)) {
        bson_t filter = BSON_INITIALIZER, arr = BSON_INITIALIZER;
        ret = need(op, op->db, SHL_ACT_VIEW_ROLE, st);
        if (ret == 0) {
            BSON_APPEND_UTF8(&filter, "db", op->db);
            ret = auth_find_many(op->svc, "system.roles", &filter, &arr, st);
        }
        for (size_t i = 0; ret == 0 && show_builtin && i < sizeof(builtin_names) / sizeof(*builtin_names); i++) {
            if (shl_builtin_role_is(builtin_names[i], op->db) && builtin_names[i][0] != '_') {
                snprintf(idx, sizeof(idx), "%u", n++);
                append_role_info(op, &roles, idx, builtin_names[i], op->db, NULL, show_privs);
            }
        }
        bson_iter_init(&a, &arr);
        while (ret == 0 && bson_iter_next(&a)) {
            const uint8_t *d;
            uint32_t l;
            bson_t doc;
            bson_iter_t f;
            bson_iter_document(&a, &l, &d);
            bson_init_static(&doc, d, l);
            if (bson_iter_init_find(&f, &doc, "role") && BSON_ITER_HOLDS_UTF8(&f)) {
                snprintf(idx, sizeof(idx), "%u", n++);
                append_role_info(op, &roles, idx, bson_iter_utf8(&f, NULL), op->db, &doc,
                                 show_privs);
            }
        }
        bson_destroy(&filter);
        bson_destroy(&arr);
    } else {
        bool single = !BSON_ITER_HOLDS_ARRAY(&it);
        if (!single) {
            bson_iter_recurse(&it, &a);
        } else {
            a = it;
        }
        while (ret == 0 && (single || bson_iter_next(&a))) {
            bson_t doc;
            bool found = false;
            if (!name_id(&a, "role", op->db, id, sizeof(id), idb, sizeof(idb))) {
                ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                                     "Role names must be either strings or objects");
                break;
            }
            if ((ret = need(op, idb, SHL_ACT_VIEW_ROLE, st)) != 0) {
                break;
            }
            const char *rn = id + strlen(idb) + 1;
            bson_init(&doc);
            if (shl_builtin_role_is(rn, idb)) {
                snprintf(idx, sizeof(idx), "%u", n++);
                append_role_info(op, &roles, idx, rn, idb, NULL, show_privs);
            } else if (bson_destroy(&doc),
                       (ret = auth_find_one(op->svc, "system.roles", id, &doc, &found, st)) ==
                               0 &&
                           found) {
                snprintf(idx, sizeof(idx), "%u", n++);
                append_role_info(op, &roles, idx, rn, idb, &doc, show_privs);
            }
            bson_destroy(&doc);
            if (single) {
                break;
            }
        }
    }
    bson_append_array_end(reply, &roles);
    return ret;
}

#define UM_FLAGS (SHL_CMD_NO_FAILCOMMAND)

static const shl_command_t user_commands[] = {
    {.name = "createUser", .run = cmd_create_user, .flags = UM_FLAGS, .help = "create a user"},
    {.name = "updateUser", .run = cmd_update_user, .flags = UM_FLAGS, .help = "update a user"},
    {.name = "dropUser", .run = cmd_drop_user, .flags = UM_FLAGS, .help = "drop a user"},
    {.name = "dropAllUsersFromDatabase",
     .run = cmd_drop_all_users,
     .flags = UM_FLAGS,
     .help = "drop every user of the database"},
    {.name = "usersInfo", .run = cmd_users_info, .help = "describe users"},
    {.name = "grantRolesToUser",
     .run = cmd_grant_roles_to_user,
     .flags = UM_FLAGS,
     .help = "grant roles to a user"},
    {.name = "revokeRolesFromUser",
     .run = cmd_revoke_roles_from_user,
     .flags = UM_FLAGS,
     .help = "revoke roles from a user"},
    {.name = "createRole", .run = cmd_create_role, .flags = UM_FLAGS, .help = "create a role"},
    {.name = "updateRole", .run = cmd_update_role, .flags = UM_FLAGS, .help = "update a role"},
    {.name = "dropRole", .run = cmd_drop_role, .flags = UM_FLAGS, .help = "drop a role"},
    {.name = "dropAllRolesFromDatabase",
     .run = cmd_drop_all_roles,
     .flags = UM_FLAGS,
     .help = "drop every role of the database"},
    {.name = "rolesInfo", .run = cmd_roles_info, .help = "describe roles"},
    {.name = "grantPrivilegesToRole",
     .run = cmd_grant_privileges_to_role,
     .flags = UM_FLAGS,
     .help = "grant privileges to a role"},
    {.name = "revokePrivilegesFromRole",
     .run = cmd_revoke_privileges_from_role,
     .flags = UM_FLAGS,
     .help = "revoke privileges from a role"},
    {.name = "grantRolesToRole",
     .run = cmd_grant_roles_to_role,
     .flags = UM_FLAGS,
     .help = "grant roles to a role"},
    {.name = "revokeRolesFromRole",
     .run = cmd_revoke_roles_from_role,
     .flags = UM_FLAGS,
     .help = "revoke roles from a role"},
};

void
auth_register_user_commands(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(user_commands) / sizeof(user_commands[0]); i++) {
        shl_command_registry_add(reg, &user_commands[i]);
    }
}
