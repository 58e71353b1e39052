/*
 * cmd_sasl.c -- authentication commands: saslStart / saslContinue (SCRAM-SHA-1 and
 * SCRAM-SHA-256, MongoDB's reply shapes and skipEmptyExchange), speculativeAuthenticate and
 * saslSupportedMechs in hello, authenticate (MONGODB-X509 from the TLS client certificate), logout,
 * connectionStatus. A failed login answers AuthenticationFailed with no hint of the cause,
 * is logged (id 20249) without secrets and waits authFailedDelayMs. docs/design/auth.md.
 */
#include "auth/auth_private.h"

#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "base/str.h"
#include "bson/bson_util.h"

/* Whether 'mech' is in authenticationMechanisms. */
static bool
mech_enabled(const char *mech)
{
    const char *list = shl_opt_str(SHL_OPT_authenticationMechanisms);
    size_t n = strlen(mech);
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *c = strchr(p, ',');
        size_t l = c != NULL ? (size_t)(c - p) : strlen(p);
        if (l == n && strncmp(p, mech, n) == 0) {
            return true;
        }
        p = c != NULL ? c + 1 : NULL;
    }
    return false;
}

/* The payload of a SASL command: BinData or a string. */
static bool
get_payload(const bson_t *cmd, const char *key, const char **data, size_t *len)
{
    bson_iter_t it;
    bool ok = false;
    if (bson_iter_init_find(&it, cmd, key)) {
        if (BSON_ITER_HOLDS_BINARY(&it)) {
            const uint8_t *b;
            uint32_t l;
            bson_subtype_t sub;
            bson_iter_binary(&it, &sub, &l, &b);
            *data = (const char *)b;
            *len = l;
            ok = true;
        } else if (BSON_ITER_HOLDS_UTF8(&it)) {
            uint32_t l;
            *data = bson_iter_utf8(&it, &l);
            *len = l;
            ok = true;
        }
    }
    return ok;
}

/* A failed login: logged as MongoDB's 20249 (no secret), then delayed, then one error. */
static int
auth_failed(shl_op_ctx_t *op, const char *mech, const char *user, const char *db,
            const char *why, bool speculative, shl_status_t *st)
{
    int64_t delay = shl_opt_int(SHL_OPT_authFailedDelayMs);
    SHL_LOG_INFO(ACCESS, 20249, "Authentication failed", "mechanism", BCON_UTF8(mech),
                 "speculative", BCON_BOOL(speculative), "principalName", BCON_UTF8(user),
                 "authenticationDatabase", BCON_UTF8(db), "remote",
                 BCON_UTF8(op->conn != NULL ? op->conn->remote : ""), "error", BCON_UTF8(why));
    if (delay > 0) {
        shl_sleep_ms(delay > 5000 ? 5000 : delay);
    }
    return shl_status_set(st, SHL_CODE_AUTHENTICATION_FAILED, "Authentication failed.");
}

/* The user's credentials for 'mech' from its document; false when it has none. */
static bool
creds_of(const bson_t *user, shl_scram_mech_t mech, shl_scram_creds_t *c)
{
    bson_iter_t it, f;
    char path[64];
    int got = 0;

    memset(c, 0, sizeof(*c));
    snprintf(path, sizeof(path), "credentials.%s", shl_scram_mech_name(mech));
    if (!bson_iter_init(&it, user) || !bson_iter_find_descendant(&it, path, &f) ||
        !BSON_ITER_HOLDS_DOCUMENT(&f) || !bson_iter_recurse(&f, &it)) {
        return false;
    }
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "iterationCount") == 0 && BSON_ITER_HOLDS_NUMBER(&it)) {
            c->iterations = (int32_t)bson_iter_as_int64(&it);
            got |= 1;
        } else if (BSON_ITER_HOLDS_UTF8(&it)) {
            char *dst = strcmp(k, "salt") == 0        ? c->salt
                        : strcmp(k, "storedKey") == 0 ? c->stored_key
                        : strcmp(k, "serverKey") == 0 ? c->server_key
                                                      : NULL;
            if (dst != NULL) {
                shl_str_copy(dst, SHL_SCRAM_B64_MAX, bson_iter_utf8(&it, NULL));
                got |= strcmp(k, "salt") == 0 ? 2 : strcmp(k, "storedKey") == 0 ? 4 : 8;
            }
        }
    }
    return got == 15 && c->iterations > 0;
}

/* a->conv_roles = the roles array of the user document 'user'. */
static void
keep_roles(auth_conn_t *a, const bson_t *user)
{
    bson_iter_t it;

    bson_reinit(&a->conv_roles);
    if (bson_iter_init_find(&it, user, "roles") && BSON_ITER_HOLDS_ARRAY(&it)) {
        const uint8_t *d;
        uint32_t l;
        bson_t view;
        bson_iter_array(&it, &l, &d);
        bson_init_static(&view, d, l);
        bson_concat(&a->conv_roles, &view);
    }
}

/*
 * The first step of a conversation on database 'db' (saslStart, or hello's
 * speculativeAuthenticate): the reply's conversationId, done and payload.
 */
static int
sasl_start(shl_op_ctx_t *op, const bson_t *cmd, const char *db, bool speculative, bson_t *reply,
           shl_status_t *st)
{
    int ret = 0;
    auth_conn_t *a = auth_conn_get(op);
    bson_iter_t it;
    const char *mech_name = "", *payload = NULL;
    size_t len = 0;
    shl_scram_mech_t mech;
    char id[400], out[SHL_SCRAM_MAX_MESSAGE];
    bson_t user = BSON_INITIALIZER;
    bool found = false;
    shl_scram_creds_t creds;
    shl_status_t why = SHL_STATUS_INIT;

    if (a == NULL) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "authentication needs a client connection");
    }
    if (bson_iter_init_find(&it, cmd, "mechanism") && BSON_ITER_HOLDS_UTF8(&it)) {
        mech_name = bson_iter_utf8(&it, NULL);
    } else {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "BSON field 'saslStart.mechanism' is missing but a "
                                         "required field");
    }
    if (!get_payload(cmd, "payload", &payload, &len)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "BSON field 'saslStart.payload' is missing but a required field");
    }
    if (!shl_scram_mech_parse(mech_name, &mech) || !mech_enabled(mech_name)) {
        SHL_FAIL(st, SHL_CODE_MECHANISM_UNAVAILABLE,
                 "Received authentication for mechanism %.64s which is not enabled", mech_name);
    }
    if (strcmp(db, "$external") == 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "SCRAM users cannot be stored in $external");
    }
    shl_scram_server_clear(&a->scram);
    a->conv_active = false;
    a->conv_wants_empty = false;
    if (shl_scram_server_start(&a->scram, mech, payload, len, &why) != 0) {
        ret = shl_status_set(st, why.code, "%s", why.reason);
        goto done;
    }
    shl_str_copy(a->conv_db, sizeof(a->conv_db), db);
    a->conv_speculative = speculative;
    a->conv_skip_empty = bson_iter_init(&it, cmd) &&
                         bson_iter_find_descendant(&it, "options.skipEmptyExchange", &it) &&
                         bson_iter_as_bool(&it);
    snprintf(id, sizeof(id), "%s.%s", db, a->scram.user);
    bson_destroy(&user);
    if (auth_system_creds(db, a->scram.user, mech, &creds)) {
        bson_init(&user);
    } else if (auth_find_one(op->svc, "system.users", id, &user, &found, &why) != 0 || !found ||
               !creds_of(&user, mech, &creds)) {
        ret = auth_failed(op, mech_name, a->scram.user, db,
                          !found ? "UserNotFound" : "no credentials for the mechanism",
                          speculative, st);
        shl_scram_server_clear(&a->scram);
        goto done;
    }
    /* Keep the roles read here: the privileges are resolved from them at success, without
     * reading the user again. */
    keep_roles(a, &user);
    SHL_ERR(shl_scram_server_first(&a->scram, &creds, NULL, out, sizeof(out), st));
    a->conv_active = true;
    BSON_APPEND_INT32(reply, "conversationId", 1);
    BSON_APPEND_BOOL(reply, "done", false);
    bson_append_binary(reply, "payload", -1, BSON_SUBTYPE_BINARY, (const uint8_t *)out,
                       (uint32_t)strlen(out));
done:
    bson_destroy(&user);
    return ret;
}

static int
cmd_sasl_start(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return sasl_start(op, cmd, op->db, false, reply, st);
}

/* Mark the connection authenticated as 'user' on 'db' with the roles in a->conv_roles. */
static void
authenticated(shl_op_ctx_t *op, auth_conn_t *a, const char *user, const char *db, const char *mech,
              bool speculative)
{
    a->authed = true;
    shl_str_copy(a->user, sizeof(a->user), user);
    shl_str_copy(a->db, sizeof(a->db), db);
    auth_conn_set_owner(op->conn, a);
    /* Privileges from the roles saslStart read (the generation as of now: a change since
     * then re-resolves them at the next command). */
    shl_privilege_list_cleanup(&a->privs);
    bson_reinit(&a->roles);
    a->gen = atomic_load(&auth_generation);
    a->resolved_us = shl_clock_mono_us();
    if (strcmp(a->user, "__system") == 0 && strcmp(a->db, "local") == 0) {
        shl_builtin_role_privileges("__system", "admin", &a->privs);
    } else {
        shl_status_t ignore = SHL_STATUS_INIT;
        bson_concat(&a->roles, &a->conv_roles);
        if (auth_resolve_roles(op->svc, &a->roles, &a->privs, NULL, &ignore) != 0) {
            a->gen = 0; /* try again at the next command */
        }
    }
    SHL_LOG_INFO(ACCESS, 5286306, "Successfully authenticated", "client",
                 BCON_UTF8(op->conn->remote), "isSpeculative", BCON_BOOL(speculative), "mechanism",
                 BCON_UTF8(mech), "user", BCON_UTF8(a->user), "db", BCON_UTF8(a->db));
}

static int
cmd_sasl_continue(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    auth_conn_t *a = auth_conn_get(op);
    bson_iter_t it;
    const char *payload = NULL;
    size_t len = 0;
    char out[SHL_SCRAM_MAX_MESSAGE];
    bool skip_empty;
    shl_status_t why = SHL_STATUS_INIT;

    if (a == NULL || !a->conv_active || !bson_iter_init_find(&it, cmd, "conversationId") ||
        !BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_int64(&it) != 1) {
        SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "No SASL session state found");
    }
    if (!get_payload(cmd, "payload", &payload, &len)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "BSON field 'saslContinue.payload' is missing but a required field");
    }
    BSON_APPEND_INT32(reply, "conversationId", 1);
    if (a->conv_wants_empty) {
        /* The client's empty last step after server-final (no skipEmptyExchange). */
        a->conv_active = false;
        a->conv_wants_empty = false;
        BSON_APPEND_BOOL(reply, "done", true);
        bson_append_binary(reply, "payload", -1, BSON_SUBTYPE_BINARY, (const uint8_t *)"", 0);
        goto done;
    }
    if (shl_scram_server_final(&a->scram, payload, len, out, sizeof(out), &why) != 0) {
        a->conv_active = false;
        ret = auth_failed(op, shl_scram_mech_name(a->scram.mech), a->scram.user, a->conv_db,
                          why.reason, a->conv_speculative, st);
        shl_scram_server_clear(&a->scram);
        goto done;
    }
    authenticated(op, a, a->scram.user, a->conv_db, shl_scram_mech_name(a->scram.mech),
                  a->conv_speculative);
    skip_empty = a->conv_skip_empty;
    a->conv_active = !skip_empty;
    a->conv_wants_empty = !skip_empty;
    BSON_APPEND_BOOL(reply, "done", skip_empty);
    bson_append_binary(reply, "payload", -1, BSON_SUBTYPE_BINARY, (const uint8_t *)out,
                       (uint32_t)strlen(out));
done:
    return ret;
}

static int auth_x509(shl_op_ctx_t *op, const bson_t *cmd, const char *db, bool speculative,
                     bson_t *reply, shl_status_t *st);

void
auth_hello(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply)
{
    bson_iter_t it;
    shl_status_t st = SHL_STATUS_INIT;

    if (op->conn == NULL) {
        return;
    }
    if (bson_iter_init_find(&it, cmd, "saslSupportedMechs") && BSON_ITER_HOLDS_UTF8(&it)) {
        const char *who = bson_iter_utf8(&it, NULL), *dot = strchr(who, '.');
        bson_t user, arr;
        bool found = false;
        shl_scram_creds_t c;
        int n = 0;
        if (dot != NULL && dot != who && auth_find_one(op->svc, "system.users", who, &user,
                                                       &found, &st) == 0) {
            if (found) {
                BSON_APPEND_ARRAY_BEGIN(reply, "saslSupportedMechs", &arr);
                if (creds_of(&user, SHL_SCRAM_SHA1, &c)) {
                    BSON_APPEND_UTF8(&arr, "0", "SCRAM-SHA-1");
                    n++;
                }
                if (creds_of(&user, SHL_SCRAM_SHA256, &c)) {
                    BSON_APPEND_UTF8(&arr, n == 0 ? "0" : "1", "SCRAM-SHA-256");
                }
                bson_append_array_end(reply, &arr);
            }
            bson_destroy(&user);
        }
    }
    if (bson_iter_init_find(&it, cmd, "speculativeAuthenticate") &&
        BSON_ITER_HOLDS_DOCUMENT(&it)) {
        const uint8_t *d;
        uint32_t l;
        bson_t spec, out = BSON_INITIALIZER;
        bson_iter_t f;
        const char *db = "admin";
        bson_iter_document(&it, &l, &d);
        bson_init_static(&spec, d, l);
        if (bson_iter_init_find(&f, &spec, "db") && BSON_ITER_HOLDS_UTF8(&f)) {
            db = bson_iter_utf8(&f, NULL);
        }
        /* Only the SASL mechanisms start here; a failure leaves the field out and the
         * client authenticates the ordinary way. */
        if (bson_iter_init_find(&f, &spec, "saslStart") &&
            sasl_start(op, &spec, db, true, &out, &st) == 0) {
            BSON_APPEND_DOCUMENT(reply, "speculativeAuthenticate", &out);
        } else if (bson_iter_init_find(&f, &spec, "authenticate") &&
                   bson_iter_init_find(&f, &spec, "mechanism") && BSON_ITER_HOLDS_UTF8(&f) &&
                   strcmp(bson_iter_utf8(&f, NULL), "MONGODB-X509") == 0 &&
                   auth_x509(op, &spec, db, true, &out, &st) == 0) {
            BSON_APPEND_DOCUMENT(reply, "speculativeAuthenticate", &out);
        }
        bson_destroy(&out);
    }
}

/*
 * MONGODB-X509 (authenticate, or hello's speculativeAuthenticate): the connection's verified
 * client certificate names the user -- its subject in RFC 2253 form, a user of $external,
 * which 'cmd' may also name in 'user'. The reply: {dbname, user}.
 */
static int
auth_x509(shl_op_ctx_t *op, const bson_t *cmd, const char *db, bool speculative, bson_t *reply,
          shl_status_t *st)
{
    int ret = 0;
    auth_conn_t *a = auth_conn_get(op);
    char subject[sizeof(a->user)], id[sizeof(a->user) + 16];
    const char *named = NULL, *why = NULL;
    bson_iter_t it;
    bson_t user = BSON_INITIALIZER;
    bool found = false, member = false;
    shl_status_t fst = SHL_STATUS_INIT;

    if (a == NULL) {
        SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "authenticate needs a client connection");
    }
    if (!mech_enabled("MONGODB-X509")) {
        SHL_FAIL(st, SHL_CODE_MECHANISM_UNAVAILABLE,
                 "Received authentication for mechanism MONGODB-X509 which is not enabled");
    }
    if (strcmp(db, "$external") != 0) {
        SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR,
                 "X.509 authentication must always use the $external database.");
    }
    if (bson_iter_init_find(&it, cmd, "user") && BSON_ITER_HOLDS_UTF8(&it)) {
        named = bson_iter_utf8(&it, NULL);
    }
    if (op->conn->tls == NULL || !shl_tls_peer_subject(op->conn->tls, subject, sizeof(subject))) {
        why = "No verified subject name available from client";
    } else if (strcmp(shl_opt_str(SHL_OPT_clusterAuthMode), "x509") == 0 &&
               shl_tls_peer_is_member(op->conn->tls)) {
        /* clusterAuthMode x509: a certificate of this cluster's O/OU/DC is a member. */
        member = true;
    } else if (named != NULL && strcmp(named, subject) != 0) {
        why = "There is no x.509 client certificate matching the user.";
    } else {
        snprintf(id, sizeof(id), "$external.%s", subject);
        if (auth_find_one(op->svc, "system.users", id, &user, &found, &fst) != 0 || !found) {
            why = "UserNotFound";
        }
    }
    if (why != NULL) {
        ret = auth_failed(op, "MONGODB-X509", named != NULL ? named : subject, db, why, speculative,
                          st);
        goto done;
    }
    keep_roles(a, &user);
    a->conv_active = false;
    if (member) {
        authenticated(op, a, "__system", "local", "MONGODB-X509", speculative);
    } else {
        authenticated(op, a, subject, "$external", "MONGODB-X509", speculative);
    }
    BSON_APPEND_UTF8(reply, "dbname", "$external");
    BSON_APPEND_UTF8(reply, "user", subject);
done:
    bson_destroy(&user);
    return ret;
}

static int
cmd_authenticate(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_iter_t it;
    const char *mech = "";
    if (bson_iter_init_find(&it, cmd, "mechanism") && BSON_ITER_HOLDS_UTF8(&it)) {
        mech = bson_iter_utf8(&it, NULL);
    }
    /* MongoDB takes only MONGODB-X509 here (SCRAM goes through saslStart). */
    if (strcmp(mech, "MONGODB-X509") != 0) {
        return shl_status_set(st, SHL_CODE_MECHANISM_UNAVAILABLE,
                              "Unsupported mechanism '%.64s' on authenticate command", mech);
    }
    return auth_x509(op, cmd, op->db, false, reply, st);
}

static int
cmd_logout(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    auth_conn_t *a = auth_conn_get(op);
    (void)cmd;
    (void)reply;
    (void)st;
    if (a != NULL) {
        a->authed = false;
        a->user[0] = a->db[0] = '\0';
        auth_conn_set_owner(op->conn, a);
        a->conv_active = false;
        bson_reinit(&a->roles);
        shl_privilege_list_cleanup(&a->privs);
        shl_scram_server_clear(&a->scram);
    }
    return 0;
}

static int
cmd_connection_status(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    auth_conn_t *a = auth_conn_get(op);
    bson_t info, arr, u, all = BSON_INITIALIZER;
    bson_iter_t it;
    bool show = bson_iter_init_find(&it, cmd, "showPrivileges") && bson_iter_as_bool(&it);
    shl_privilege_list_t privs = {0};

    if (a != NULL && a->authed) {
        auth_conn_refresh(op, a);
        auth_resolve_roles(op->svc, &a->roles, &privs, &all, st);
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "authInfo", &info);
    BSON_APPEND_ARRAY_BEGIN(&info, "authenticatedUsers", &arr);
    if (a != NULL && a->authed) {
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &u);
        BSON_APPEND_UTF8(&u, "user", a->user);
        BSON_APPEND_UTF8(&u, "db", a->db);
        bson_append_document_end(&arr, &u);
    }
    bson_append_array_end(&info, &arr);
    BSON_APPEND_ARRAY(&info, "authenticatedUserRoles", &all);
    if (show) {
        char idx[24];
        BSON_APPEND_ARRAY_BEGIN(&info, "authenticatedUserPrivileges", &arr);
        for (size_t i = 0; i < privs.n; i++) {
            snprintf(idx, sizeof(idx), "%zu", i);
            shl_privilege_append(&arr, idx, &privs.items[i]);
        }
        bson_append_array_end(&info, &arr);
    }
    bson_append_document_end(reply, &info);
    bson_destroy(&all);
    shl_privilege_list_cleanup(&privs);
    return 0;
}

static const shl_command_t sasl_commands[] = {
    {.name = "saslStart",
     .run = cmd_sasl_start,
     .flags = SHL_CMD_NO_AUTH | SHL_CMD_NO_FAILCOMMAND,
     .help = "begin a SASL conversation (SCRAM-SHA-1, SCRAM-SHA-256)"},
    {.name = "saslContinue",
     .run = cmd_sasl_continue,
     .flags = SHL_CMD_NO_AUTH | SHL_CMD_NO_FAILCOMMAND,
     .help = "the next step of a SASL conversation"},
    {.name = "authenticate",
     .run = cmd_authenticate,
     .flags = SHL_CMD_NO_AUTH,
     .help = "authenticate with MONGODB-X509 (the client's TLS certificate)"},
    {.name = "logout",
     .run = cmd_logout,
     .flags = SHL_CMD_NO_AUTH,
     .help = "end the connection's authentication"},
    {.name = "connectionStatus",
     .run = cmd_connection_status,
     .flags = SHL_CMD_NO_AUTH | SHL_CMD_IN_TXN,
     .help = "the connection's authenticated users and roles"},
};

void
auth_register_sasl_commands(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(sasl_commands) / sizeof(sasl_commands[0]); i++) {
        shl_command_registry_add(reg, &sasl_commands[i]);
    }
}
