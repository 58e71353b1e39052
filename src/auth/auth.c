/*
 * auth.c -- the module's start-up and the access check on every command
 * (auth.h, auth_private.h; docs/design/auth.md): the connection's state, the localhost
 * exception, privileges resolved from the user's roles and cached per connection until
 * users or roles change, and the store of users and roles over the process's own commands.
 */
#include "auth/auth_private.h"

#include <arpa/inet.h>
#include <string.h>
#include <sys/stat.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "base/str.h"
#include "bson/bson_util.h"
#include "net/service.h"

atomic_uint_fast64_t auth_generation = 1;

bool
shl_auth_enabled(void)
{
    return shl_opt_bool(SHL_OPT_auth) || shl_opt_str(SHL_OPT_keyFile)[0] != '\0' ||
           strcmp(shl_opt_str(SHL_OPT_clusterAuthMode), "x509") == 0;
}

auth_conn_t *
auth_conn_get(shl_op_ctx_t *op)
{
    auth_conn_t *a = NULL;
    if (op->conn != NULL) {
        if (op->conn->auth == NULL) {
            a = bson_malloc0(sizeof(*a));
            bson_init(&a->roles);
            bson_init(&a->conv_roles);
            op->conn->auth = a;
        }
        a = op->conn->auth;
    }
    return a;
}

static void
conn_end(shl_conn_t *conn)
{
    auth_conn_t *a = conn->auth;
    if (a != NULL) {
        bson_destroy(&a->roles);
        bson_destroy(&a->conv_roles);
        shl_privilege_list_cleanup(&a->privs);
        shl_scram_server_clear(&a->scram);
        bson_free(a);
        conn->auth = NULL;
    }
}

void
auth_conn_set_owner(shl_conn_t *conn, const auth_conn_t *a)
{
    char name[sizeof(a->user) + sizeof(a->db) + 2] = "";

    if (conn == NULL) {
        return;
    }
    if (a->authed) {
        snprintf(name, sizeof(name), "%s@%s", a->user, a->db);
    }
    shl_lsid_user_digest(name, conn->user_digest);
    conn->system_user =
        a->authed && strcmp(a->user, "__system") == 0 && strcmp(a->db, "local") == 0;
}

bool
auth_conn_is_localhost(const shl_conn_t *conn)
{
    return conn->unix_socket || strncmp(conn->remote, "127.", 4) == 0 ||
           strncmp(conn->remote, "[::1]", 5) == 0 || strncmp(conn->remote, "::1", 3) == 0;
}

int
auth_run(shl_service_ctx_t *svc, const char *db, const bson_t *cmd, bson_t *reply,
         shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    shl_service_run_command(svc, NULL, cmd, db, reply);
    if (!bson_iter_init_find(&it, reply, "ok") || bson_iter_as_double(&it) != 1.0) {
        int code = SHL_CODE_INTERNAL_ERROR;
        const char *msg = "";
        if (bson_iter_init_find(&it, reply, "code")) {
            code = (int)bson_iter_as_int64(&it);
        }
        if (bson_iter_init_find(&it, reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it)) {
            msg = bson_iter_utf8(&it, NULL);
        }
        SHL_FAIL(st, code, "%s", msg);
    }
    /* A write's per-statement errors fail it as a whole here. */
    if (bson_iter_init_find(&it, reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it)) {
        bson_iter_t e, f;
        int code = SHL_CODE_INTERNAL_ERROR;
        const char *msg = "write error";
        if (bson_iter_recurse(&it, &e) && bson_iter_next(&e) && BSON_ITER_HOLDS_DOCUMENT(&e)) {
            bson_iter_recurse(&e, &f);
            while (bson_iter_next(&f)) {
                if (strcmp(bson_iter_key(&f), "code") == 0) {
                    code = (int)bson_iter_as_int64(&f);
                } else if (strcmp(bson_iter_key(&f), "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                    msg = bson_iter_utf8(&f, NULL);
                }
            }
        }
        SHL_FAIL(st, code, "%s", msg);
    }
done:
    return ret;
}

int
auth_find_many(shl_service_ctx_t *svc, const char *coll, const bson_t *filter, bson_t *out,
               shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_iter_t it, b;
    uint32_t n = 0;
    char idx[24];

    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_DOCUMENT(&cmd, "filter", filter);
    BSON_APPEND_INT32(&cmd, "batchSize", 100000);
    BSON_APPEND_BOOL(&cmd, "singleBatch", true);
    SHL_ERR(auth_run(svc, "admin", &cmd, &reply, st));
    if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch", &b) &&
        BSON_ITER_HOLDS_ARRAY(&b) && bson_iter_recurse(&b, &it)) {
        while (bson_iter_next(&it)) {
            snprintf(idx, sizeof(idx), "%u", n++);
            bson_append_iter(out, idx, -1, &it);
        }
    }
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

int
auth_find_one(shl_service_ctx_t *svc, const char *coll, const char *id, bson_t *out, bool *found,
              shl_status_t *st)
{
    int ret = 0;
    bson_t filter = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    bson_init(out);
    *found = false;
    BSON_APPEND_UTF8(&filter, "_id", id);
    SHL_ERR(auth_find_many(svc, coll, &filter, &arr, st));
    if (bson_iter_init(&it, &arr) && bson_iter_next(&it) && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t view;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&view, data, len);
        bson_destroy(out);
        bson_copy_to(&view, out);
        *found = true;
    }
done:
    bson_destroy(&filter);
    bson_destroy(&arr);
    return ret;
}

bool
auth_any_user(shl_service_ctx_t *svc)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t filter = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    bool any;

    /* A failed read counts as "there are users": the exception must not open by mistake. */
    any = auth_find_many(svc, "system.users", &filter, &arr, &st) != 0 || !bson_empty(&arr);
    bson_destroy(&filter);
    bson_destroy(&arr);
    return any;
}

/* Resolve one role and what it inherits; 'seen' holds "db.role" ids already resolved. */
static int
resolve_role(shl_service_ctx_t *svc, const char *role, const char *db, int depth,
             shl_privilege_list_t *out, bson_t *seen, uint32_t *nseen, bson_t *all,
             uint32_t *nall, shl_status_t *st)
{
    int ret = 0;
    char id[400], idx[24];
    bson_iter_t it;
    bson_t doc = BSON_INITIALIZER, sub;
    bool found = false;

    snprintf(id, sizeof(id), "%s.%s", db, role);
    if (depth > 16 || (bson_iter_init_find(&it, seen, id))) {
        goto done;
    }
    BSON_APPEND_BOOL(seen, id, true);
    (*nseen)++;
    if (all != NULL) {
        snprintf(idx, sizeof(idx), "%u", (*nall)++);
        BSON_APPEND_DOCUMENT_BEGIN(all, idx, &sub);
        BSON_APPEND_UTF8(&sub, "role", role);
        BSON_APPEND_UTF8(&sub, "db", db);
        bson_append_document_end(all, &sub);
    }
    if (shl_builtin_role_privileges(role, db, out)) {
        goto done;
    }
    bson_destroy(&doc);
    SHL_ERR(auth_find_one(svc, "system.roles", id, &doc, &found, st));
    if (!found) {
        goto done;
    }
    if (bson_iter_init_find(&it, &doc, "privileges") && BSON_ITER_HOLDS_ARRAY(&it)) {
        bson_iter_t p;
        bson_iter_recurse(&it, &p);
        while (bson_iter_next(&p)) {
            bson_t pd;
            shl_privilege_t priv;
            shl_status_t ignore = SHL_STATUS_INIT;
            if (!BSON_ITER_HOLDS_DOCUMENT(&p)) {
                continue;
            }
            {
                const uint8_t *d;
                uint32_t l;
                bson_iter_document(&p, &l, &d);
                bson_init_static(&pd, d, l);
            }
            if (shl_privilege_parse(&pd, &priv, &ignore) == 0) {
                shl_privilege_list_add(out, &priv);
            }
        }
    }
    if (bson_iter_init_find(&it, &doc, "roles") && BSON_ITER_HOLDS_ARRAY(&it)) {
        bson_iter_t r, f;
        bson_iter_recurse(&it, &r);
        while (bson_iter_next(&r)) {
            const char *rn = NULL, *rd = NULL;
            if (!BSON_ITER_HOLDS_DOCUMENT(&r) || !bson_iter_recurse(&r, &f)) {
                continue;
            }
            while (bson_iter_next(&f)) {
                if (strcmp(bson_iter_key(&f), "role") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                    rn = bson_iter_utf8(&f, NULL);
                } else if (strcmp(bson_iter_key(&f), "db") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                    rd = bson_iter_utf8(&f, NULL);
                }
            }
            if (rn != NULL && rd != NULL) {
                SHL_ERR(resolve_role(svc, rn, rd, depth + 1, out, seen, nseen, all, nall, st));
            }
        }
    }
done:
    bson_destroy(&doc);
    return ret;
}

int
auth_resolve_roles(shl_service_ctx_t *svc, const bson_t *roles, shl_privilege_list_t *out,
                   bson_t *all_roles, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t r, f;
    bson_t seen = BSON_INITIALIZER;
    uint32_t nseen = 0, nall = 0;

    bson_iter_init(&r, roles);
    while (bson_iter_next(&r)) {
        const char *rn = NULL, *rd = NULL;
        if (!BSON_ITER_HOLDS_DOCUMENT(&r) || !bson_iter_recurse(&r, &f)) {
            continue;
        }
        while (bson_iter_next(&f)) {
            if (strcmp(bson_iter_key(&f), "role") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                rn = bson_iter_utf8(&f, NULL);
            } else if (strcmp(bson_iter_key(&f), "db") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                rd = bson_iter_utf8(&f, NULL);
            }
        }
        if (rn != NULL && rd != NULL) {
            SHL_ERR(resolve_role(svc, rn, rd, 0, out, &seen, &nseen, all_roles, &nall, st));
        }
    }
done:
    bson_destroy(&seen);
    return ret;
}

void
auth_conn_refresh(shl_op_ctx_t *op, auth_conn_t *a)
{
    uint64_t gen = atomic_load(&auth_generation);
    shl_status_t st = SHL_STATUS_INIT;
    char id[400];
    bson_t doc;
    bool found = false;
    bson_iter_t it;

    /* A router's users live on the config server, where another router may change them:
     * it re-reads them every userCacheInvalidationIntervalSecs (MongoDB's user cache). */
    int64_t now = shl_clock_mono_us();
    bool stale = op->svc->role == SHL_ROLE_ROUTER &&
                 now - a->resolved_us >
                     shl_opt_int(SHL_OPT_userCacheInvalidationIntervalSecs) * 1000000;

    if (!a->authed || (a->gen == gen && !stale)) {
        return;
    }
    a->resolved_us = now;
    shl_privilege_list_cleanup(&a->privs);
    bson_reinit(&a->roles);
    a->gen = gen;
    if (strcmp(a->user, "__system") == 0 && strcmp(a->db, "local") == 0) {
        shl_builtin_role_privileges("__system", "admin", &a->privs);
        return;
    }
    snprintf(id, sizeof(id), "%s.%s", a->db, a->user);
    if (auth_find_one(op->svc, "system.users", id, &doc, &found, &st) == 0 && found &&
        bson_iter_init_find(&it, &doc, "roles") && BSON_ITER_HOLDS_ARRAY(&it)) {
        const uint8_t *d;
        uint32_t l;
        bson_t view;
        bson_iter_array(&it, &l, &d);
        bson_init_static(&view, d, l);
        bson_concat(&a->roles, &view);
        auth_resolve_roles(op->svc, &a->roles, &a->privs, NULL, &st);
    }
    bson_destroy(&doc);
}

/* MongoDB's text for a command a user may not run: the command, secrets never included
 * (user management checks its own and does not come here). */
static int
not_authorized(shl_op_ctx_t *op, shl_status_t *st)
{
    bson_iter_t it;
    char first[300] = "";

    if (bson_iter_init(&it, op->body) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it)) {
        snprintf(first, sizeof(first), "\"%s\"", bson_iter_utf8(&it, NULL));
    } else {
        snprintf(first, sizeof(first), "1");
    }
    return shl_status_set(st, SHL_CODE_UNAUTHORIZED,
                          "not authorized on %s to execute command { %s: %s, $db: \"%s\" }",
                          op->db, op->cmd_name != NULL ? op->cmd_name : "?", first, op->db);
}

static bool
localhost_exception(shl_op_ctx_t *op, const char *name)
{
    return name != NULL && shl_opt_bool(SHL_OPT_enableLocalhostAuthBypass) &&
           auth_conn_is_localhost(op->conn) && strcmp(op->db, "admin") == 0 &&
           (strcmp(name, "createUser") == 0 || strcmp(name, "createRole") == 0) &&
           !auth_any_user(op->svc);
}

int
auth_check(shl_op_ctx_t *op, const shl_resource_t *res, shl_action_t a, shl_status_t *st)
{
    int ret = 0;
    auth_conn_t *ac;

    if (!shl_auth_enabled() || op->conn == NULL) {
        goto done;
    }
    ac = auth_conn_get(op);
    auth_conn_refresh(op, ac);
    if (!ac->authed && localhost_exception(op, op->cmd_name)) {
        goto done;
    }
    if (!ac->authed || !shl_privileges_allow(&ac->privs, res, a)) {
        SHL_ERR(not_authorized(op, st));
    }
done:
    return ret;
}

/* The localhost exception: until a user exists, a connection from this host may create
 * the first user (or role) in the admin database, and nothing else. */

/* Whether listDatabases shows every database to this connection: it holds the action and
 * did not ask for authorizedDatabases: true. */
static bool
listing_all(shl_op_ctx_t *op, auth_conn_t *a)
{
    shl_resource_t cluster = {.kind = SHL_RES_CLUSTER};
    bson_iter_t it;
    bool asked = bson_iter_init_find(&it, op->body, "authorizedDatabases") &&
                 bson_iter_as_bool(&it);
    return !asked && shl_privileges_allow(&a->privs, &cluster, SHL_ACT_LIST_DATABASES);
}

/* Whether 'privs' grant anything on database 'db'. */
static bool
any_privilege_on(const shl_privilege_list_t *privs, const char *db)
{
    for (size_t i = 0; i < privs->n; i++) {
        const shl_resource_t *r = &privs->items[i].res;
        if (r->kind == SHL_RES_ANY || r->kind == SHL_RES_ANY_NORMAL ||
            r->kind == SHL_RES_COLL_ANY_DB ||
            ((r->kind == SHL_RES_DB || r->kind == SHL_RES_COLL) && strcmp(r->db, db) == 0)) {
            return true;
        }
    }
    return false;
}

static void
authorize_reply(shl_op_ctx_t *op, const shl_command_t *cmd, bson_t *reply)
{
    auth_conn_t *a;
    bson_iter_t it, d, f;
    bson_t out = BSON_INITIALIZER, arr;
    uint32_t n = 0;
    char idx[24];
    int64_t total = 0;
    bool had_total = false;

    if (op->conn == NULL || strcmp(cmd->name, "listDatabases") != 0 ||
        (a = auth_conn_get(op)) == NULL || !a->authed || listing_all(op, a) ||
        !bson_iter_init_find(&it, reply, "databases") || !BSON_ITER_HOLDS_ARRAY(&it)) {
        bson_destroy(&out);
        return;
    }
    bson_iter_init(&it, reply);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "databases") == 0 && BSON_ITER_HOLDS_ARRAY(&it)) {
            BSON_APPEND_ARRAY_BEGIN(&out, "databases", &arr);
            bson_iter_recurse(&it, &d);
            while (bson_iter_next(&d)) {
                if (BSON_ITER_HOLDS_DOCUMENT(&d) && bson_iter_recurse(&d, &f) &&
                    bson_iter_find(&f, "name") && BSON_ITER_HOLDS_UTF8(&f) &&
                    any_privilege_on(&a->privs, bson_iter_utf8(&f, NULL))) {
                    snprintf(idx, sizeof(idx), "%u", n++);
                    bson_append_iter(&arr, idx, -1, &d);
                    if (bson_iter_recurse(&d, &f) && bson_iter_find(&f, "sizeOnDisk") &&
                        BSON_ITER_HOLDS_NUMBER(&f)) {
                        total += bson_iter_as_int64(&f);
                    }
                }
            }
            bson_append_array_end(&out, &arr);
        } else if (strcmp(k, "totalSize") == 0) {
            had_total = true;
        } else if (strcmp(k, "totalSizeMb") != 0) {
            bson_append_iter(&out, NULL, 0, &it);
        }
    }
    if (had_total) {
        BSON_APPEND_INT64(&out, "totalSize", total);
        BSON_APPEND_INT64(&out, "totalSizeMb", total / (1024 * 1024));
    }
    bson_reinit(reply);
    bson_concat(reply, &out);
    bson_destroy(&out);
}

static int
authorize(shl_op_ctx_t *op, const shl_command_t *cmd, shl_status_t *st)
{
    int ret = 0;
    auth_conn_t *a;
    shl_required_t req;

    if (!shl_auth_enabled() || op->conn == NULL) {
        goto done;
    }
    a = auth_conn_get(op);
    if (a->authed) {
        shl_resource_t cluster = {.kind = SHL_RES_CLUSTER};
        auth_conn_refresh(op, a);
        op->conn->clock_untrusted =
            !shl_privileges_allow(&a->privs, &cluster, SHL_ACT_ADVANCE_CLUSTER_TIME);
    } else {
        op->conn->clock_untrusted = true;
    }
    if (cmd->flags & SHL_CMD_NO_AUTH) {
        goto done;
    }
    if (!a->authed) {
        if (!localhost_exception(op, cmd->name)) {
            SHL_FAIL(st, SHL_CODE_UNAUTHORIZED, "Command %s requires authentication", cmd->name);
        }
        goto done;
    }
    auth_conn_refresh(op, a);
    if (strcmp(cmd->name, "listDatabases") == 0 && !listing_all(op, a)) {
        /* authorizedDatabases: a user without listDatabases sees the databases it holds a
         * privilege on (authorize_reply trims the reply), as MongoDB 4.0.5+ does. */
        goto done;
    }
    shl_command_required_privileges(cmd->name, (cmd->flags & SHL_CMD_INTERNAL) != 0, op->db,
                                    op->body, &req);
    for (size_t i = 0; i < req.n; i++) {
        if (!shl_privileges_allow(&a->privs, &req.res[i], req.act[i])) {
            SHL_ERR(not_authorized(op, st));
        }
    }
done:
    return ret;
}

int
shl_auth_init(shl_service_ctx_t *svc, shl_command_registry_t *reg, shl_status_t *st)
{
    int ret = 0;

    SHL_ERR(auth_internal_init(st));
    auth_register_sasl_commands(reg);
    auth_register_user_commands(reg);
    /* Without access control the dispatcher need not ask (the default costs nothing). */
    svc->hooks.authorize = shl_auth_enabled() ? authorize : NULL;
    svc->hooks.authorize_reply = shl_auth_enabled() ? authorize_reply : NULL;
    svc->hooks.hello_auth = auth_hello;
    svc->hooks.conn_end = conn_end;
    if (shl_auth_enabled()) {
        SHL_LOG_INFO(ACCESS, 4615700, "Access control is enabled", "keyFile",
                     BCON_BOOL(shl_opt_str(SHL_OPT_keyFile)[0] != '\0'));
    }
done:
    return ret;
}
