/*
 * session_commands.c -- the session commands and stages every process answers
 * (session_commands.h), with MongoDB's request shapes (sessions_commands.idl,
 * kill_sessions.idl, document_source_list_sessions.idl) and its IDL parser's errors.
 */
#include "session/session_commands.h"

#include <string.h>

#include "base/log.h"
#include "base/options.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/command_args.h"
#include "session/kill_sessions.h"
#include "session/logical_session_cache.h"

/* ---------------------------------------------------------------- IDL-style parsing */

static int
wrong_type(const char *path, const char *field, const bson_iter_t *it, const char *want,
           shl_status_t *st)
{
    return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                          "BSON field '%s.%s' is the wrong type '%s', expected type '%s'", path,
                          field, shl_bson_type_name(shl_iter_type(it)), want);
}

static int
missing(const char *path, const char *field, shl_status_t *st)
{
    return shl_status_set(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                          "BSON field '%s.%s' is missing but a required field", path, field);
}

static int
unknown(const char *path, const char *field, shl_status_t *st)
{
    return shl_status_set(st, SHL_CODE_IDL_UNKNOWN_FIELD, "BSON field '%s.%s' is an unknown field.",
                          path, field);
}

/* A binData field of subtype 'sub' and exactly 'len' bytes ('want_sub' names the subtype in
 * errors): MongoDB's uuid and sha256Block types. */
static int
binary_field(const char *path, const bson_iter_t *it, bson_subtype_t sub, uint32_t len,
             uint8_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_subtype_t got = BSON_SUBTYPE_BINARY;
    uint32_t n = 0;
    const uint8_t *data = NULL;

    if (!BSON_ITER_HOLDS_BINARY(it)) {
        SHL_ERR(wrong_type(path, shl_iter_key(it), it, "binData", st));
    }
    bson_iter_binary(it, &got, &n, &data);
    if (got != sub) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '%s.%s' is the wrong binData type '%s', expected type '%s'", path,
                 shl_iter_key(it), shl_bson_binary_subtype_name(got),
                 shl_bson_binary_subtype_name(sub));
    }
    if (n != len) {
        if (sub == BSON_SUBTYPE_UUID) {
            SHL_FAIL(st, SHL_CODE_INVALID_UUID,
                     "uuid must be a 16-byte binary field with UUID (4) subtype");
        }
        SHL_FAIL(st, SHL_CODE_UNSUPPORTED_FORMAT, "Unsupported SHA256Block hash length: %u", n);
    }
    memcpy(out, data, len);
done:
    return ret;
}

/* The digest of the logged-in user: without authentication, the empty name's. */
static void
own_uid(uint8_t out[SHL_LSID_UID_LEN])
{
    shl_user_digest("", "", out);
}

/*
 * A session id in a command ('doc' at path 'path'): LogicalSessionFromClient {id, uid?,
 * txnNumber?, txnUUID?} (strict) -- or, with 'server_form', LogicalSessionId whose uid is
 * required. *child says it names an internal (child) session, which kills and refreshes apply
 * to its parent.
 */
static int
parse_lsid(const bson_t *doc, const char *path, bool server_form, shl_lsid_t *out, bool *child,
           shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool has_id = false, has_uid = false, has_txn_number = false, has_txn_uuid = false;
    uint8_t txn_uuid[16];

    memset(out, 0, sizeof(*out));
    *child = false;
    own_uid(out->uid);
    bson_iter_init(&it, doc);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (BSON_ITER_HOLDS_NULL(&it) || BSON_ITER_HOLDS_UNDEFINED(&it)) {
            continue; /* the IDL parser treats null as absent */
        }
        if (strcmp(k, "id") == 0) {
            SHL_ERR(binary_field(path, &it, BSON_SUBTYPE_UUID, 16, out->id, st));
            has_id = true;
        } else if (strcmp(k, "uid") == 0) {
            SHL_ERR(binary_field(path, &it, BSON_SUBTYPE_BINARY, SHL_LSID_UID_LEN, out->uid, st));
            has_uid = true;
        } else if (strcmp(k, "txnNumber") == 0) {
            if (!BSON_ITER_HOLDS_INT64(&it)) {
                SHL_ERR(wrong_type(path, k, &it, "long", st));
            }
            has_txn_number = true;
        } else if (strcmp(k, "txnUUID") == 0) {
            SHL_ERR(binary_field(path, &it, BSON_SUBTYPE_UUID, 16, txn_uuid, st));
            has_txn_uuid = true;
        } else {
            SHL_ERR(unknown(path, k, st));
        }
    }
    if (!has_id) {
        SHL_ERR(missing(path, "id", st));
    }
    if (server_form && !has_uid) {
        SHL_ERR(missing(path, "uid", st));
    }
    if (!server_form && has_txn_number && !has_txn_uuid) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "Cannot specify txnNumber in lsid without specifying txnUUID");
    }
    *child = has_txn_uuid;
done:
    return ret;
}

/*
 * The array at 'it' (field 'field' of the structure at 'path') of objects, each handed to
 * fn(arg, doc, elem_path). Errors: TypeMismatch for a non-array or a non-object element,
 * and fn's.
 */
static int
each_object_as(const bson_iter_t *it, const char *path, const char *field, const char *elem_name,
               int (*fn)(void *arg, const bson_t *doc, const char *elem_path, shl_status_t *st),
               void *arg, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t arr;
    char *arr_path = bson_strdup_printf("%s.%s", path, elem_name);

    if (!BSON_ITER_HOLDS_ARRAY(it) || !bson_iter_recurse(it, &arr)) {
        SHL_ERR(wrong_type(path, field, it, "array", st));
    }
    while (shl_iter_next(&arr)) {
        bson_t doc;
        const uint8_t *data;
        uint32_t len;
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
            SHL_ERR(wrong_type(arr_path, shl_iter_key(&arr), &arr, "object", st));
        }
        bson_iter_document(&arr, &len, &data);
        bson_init_static(&doc, data, len);
        /* As MongoDB's generated parsers, an element's errors name the array, not its index. */
        SHL_ERR(fn(arg, &doc, arr_path, st));
    }
done:
    bson_free(arr_path);
    return ret;
}

/* each_object_as with the elements named after the field itself (struct fields). */
static int
each_object(const bson_iter_t *it, const char *path, const char *field,
            int (*fn)(void *arg, const bson_t *doc, const char *elem_path, shl_status_t *st),
            void *arg, shl_status_t *st)
{
    return each_object_as(it, path, field, field, fn, arg, st);
}

/* A growable list of lsids, and whether any named a child session. */
typedef struct lsid_vec {
    shl_lsid_t *v;
    size_t n, cap;
    bool any_child;
    bool server_form;
    /* The caller's user digest, the uid of an lsid given without one (its own sessions). */
    uint8_t caller[SHL_LSID_UID_LEN];
} lsid_vec_t;

static int
add_lsid(void *arg, const bson_t *doc, const char *path, shl_status_t *st)
{
    lsid_vec_t *l = arg;
    shl_lsid_t lsid;
    bool child = false;
    int ret = 0;

    SHL_ERR(parse_lsid(doc, path, l->server_form, &lsid, &child, st));
    if (!bson_has_field(doc, "uid")) {
        memcpy(lsid.uid, l->caller, SHL_LSID_UID_LEN);
    }
    if (l->n == l->cap) {
        l->cap = l->cap == 0 ? 8 : l->cap * 2;
        l->v = bson_realloc(l->v, l->cap * sizeof(*l->v));
    }
    l->v[l->n++] = lsid;
    l->any_child = l->any_child || child;
done:
    return ret;
}

/* {user: string, db: string} (strict): KillAllSessionsUser / ListSessionsUser. */
static int
parse_user(const bson_t *doc, const char *path, uint8_t uid[SHL_LSID_UID_LEN], shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    const char *user = NULL, *db = NULL;

    bson_iter_init(&it, doc);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "user") == 0 || strcmp(k, "db") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_ERR(wrong_type(path, k, &it, "string", st));
            }
            *(k[0] == 'u' ? &user : &db) = bson_iter_utf8(&it, NULL);
        } else {
            SHL_ERR(unknown(path, k, st));
        }
    }
    if (user == NULL) {
        SHL_ERR(missing(path, "user", st));
    }
    if (db == NULL) {
        SHL_ERR(missing(path, "db", st));
    }
    shl_user_digest(user, db, uid);
done:
    return ret;
}

/* A list of user digests. */
typedef struct uid_vec {
    uint8_t (*v)[SHL_LSID_UID_LEN];
    size_t n, cap;
} uid_vec_t;

static int
add_user(void *arg, const bson_t *doc, const char *path, shl_status_t *st)
{
    uid_vec_t *u = arg;
    uint8_t uid[SHL_LSID_UID_LEN];
    int ret = 0;

    SHL_ERR(parse_user(doc, path, uid, st));
    if (u->n == u->cap) {
        u->cap = u->cap == 0 ? 4 : u->cap * 2;
        u->v = bson_realloc(u->v, u->cap * sizeof(*u->v));
    }
    memcpy(u->v[u->n++], uid, SHL_LSID_UID_LEN);
done:
    return ret;
}

/* {role: string, db: string} (strict): KillAllSessionsRole (impersonation data only). */
static int
check_role(void *arg, const bson_t *doc, const char *path, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool role = false, db = false;

    (void)arg;
    bson_iter_init(&it, doc);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "role") == 0 || strcmp(k, "db") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_ERR(wrong_type(path, k, &it, "string", st));
            }
            *(k[0] == 'r' ? &role : &db) = true;
        } else {
            SHL_ERR(unknown(path, k, st));
        }
    }
    if (!role) {
        SHL_ERR(missing(path, "role", st));
    }
    if (!db) {
        SHL_ERR(missing(path, "db", st));
    }
done:
    return ret;
}

/* One KillAllSessionsByPattern {lsid?, uid?, users?, roles?} (strict). */
static int
add_pattern(void *arg, const bson_t *doc, const char *path, shl_status_t *st)
{
    shl_kill_matcher_t *m = arg;
    shl_kill_pattern_t p;
    bson_iter_t it;
    bool has_lsid = false, has_uid = false;
    int ret = 0;
    char *sub = NULL;

    memset(&p, 0, sizeof(p));
    bson_iter_init(&it, doc);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "lsid") == 0) {
            bson_t view;
            const uint8_t *data;
            uint32_t len;
            bool child;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
                SHL_ERR(wrong_type(path, k, &it, "object", st));
            }
            bson_iter_document(&it, &len, &data);
            bson_init_static(&view, data, len);
            bson_free(sub);
            sub = bson_strdup_printf("%s.lsid", path);
            SHL_ERR(parse_lsid(&view, sub, true, &p.lsid, &child, st));
            has_lsid = true;
        } else if (strcmp(k, "uid") == 0) {
            SHL_ERR(binary_field(path, &it, BSON_SUBTYPE_BINARY, SHL_LSID_UID_LEN, p.uid, st));
            has_uid = true;
        } else if (strcmp(k, "users") == 0) {
            uid_vec_t users = {0};
            ret = each_object(&it, path, k, add_user, &users, st);
            bson_free(users.v);
            SHL_ERR(ret);
            if (users.n > 1) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Too many users in impersonation data");
            }
        } else if (strcmp(k, "roles") == 0) {
            SHL_ERR(each_object(&it, path, k, check_role, NULL, st));
        } else {
            SHL_ERR(unknown(path, k, st));
        }
    }
    /* As MongoDB's matcher: an lsid names one session, else a uid one user's, else all. */
    p.kind = has_lsid ? SHL_KILL_LSID : has_uid ? SHL_KILL_UID : SHL_KILL_ALL;
    shl_kill_matcher_add(m, &p);
done:
    bson_free(sub);
    return ret;
}

/* The command's own field (its first), as the array it must be. */
static bool
first_field(const bson_t *cmd, bson_iter_t *it)
{
    return bson_iter_init(it, cmd) && shl_iter_next(it);
}

/* ---------------------------------------------------------------- commands */

static shl_lsc_t *
cache_of(const shl_op_ctx_t *op, shl_status_t *st)
{
    if (op->svc->lsc == NULL) {
        shl_status_set(st, SHL_CODE_INTERNAL_ERROR, "this process has no logical session cache");
    }
    return op->svc->lsc;
}

/* {startSession: 1} -> {id: {id: UUID}, timeoutMinutes}. */
static int
cmd_start_session(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shl_lsc_t *lsc = cache_of(op, st);
    shl_lsid_t lsid;
    bson_t id;

    (void)cmd;
    if (lsc == NULL) {
        SHL_ERR(st->code);
    }
    shl_lsid_new(&lsid);
    SHL_ERR(shl_lsc_vivify(lsc, &lsid, st));
    BSON_APPEND_DOCUMENT_BEGIN(reply, "id", &id);
    bson_append_binary(&id, "id", 2, BSON_SUBTYPE_UUID, lsid.id, 16);
    bson_append_document_end(reply, &id);
    BSON_APPEND_INT32(reply, "timeoutMinutes",
                      (int32_t)shl_opt_int(SHL_OPT_localLogicalSessionTimeoutMinutes));
done:
    return ret;
}

/*
 * The lsids of {<name>: [LogicalSessionFromClient...]} (a strict command). As MongoDB's IDL
 * command parser reports them, the parameter is "<name>.<name>" and its elements
 * "<name>.<name>FromClient" (the command's IDL name).
 */
static int
command_lsids(const shl_op_ctx_t *op, const bson_t *cmd, const char *name, lsid_vec_t *out,
              shl_status_t *st)
{
    static const char *const none[] = {NULL};
    int ret = 0;
    bson_iter_t it;
    char *elem = bson_strdup_printf("%sFromClient", name);

    memset(out, 0, sizeof(*out));
    shl_op_user_digest(op, out->caller);
    first_field(cmd, &it);
    ret = each_object_as(&it, name, name, elem, add_lsid, out, st);
    bson_free(elem);
    SHL_ERR(ret);
    SHL_ERR(shl_cmd_check_fields(cmd, none, st));
done:
    return ret;
}

/* {refreshSessions: [lsid...]}: each session's use is recorded now. */
static int
cmd_refresh_sessions(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shl_lsc_t *lsc = cache_of(op, st);
    lsid_vec_t l = {0};

    (void)reply;
    if (lsc == NULL) {
        SHL_ERR(st->code);
    }
    SHL_ERR(command_lsids(op, cmd, "refreshSessions", &l, st));
    for (size_t i = 0; i < l.n; i++) {
        SHL_ERR(shl_lsc_vivify(lsc, &l.v[i], st));
    }
done:
    bson_free(l.v);
    return ret;
}

/* {endSessions: [lsid...]}: removed from config.system.sessions at the next refresh. */
static int
cmd_end_sessions(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shl_lsc_t *lsc = cache_of(op, st);
    lsid_vec_t l = {0};

    (void)reply;
    if (lsc == NULL) {
        SHL_ERR(st->code);
    }
    SHL_ERR(command_lsids(op, cmd, "endSessions", &l, st));
    if (l.any_child) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Cannot specify a child session id");
    }
    shl_lsc_end(lsc, l.v, l.n);
done:
    bson_free(l.v);
    return ret;
}

static int
run_kill(shl_op_ctx_t *op, const shl_kill_matcher_t *m, shl_status_t *st)
{
    int ret = 0;
    shl_lsc_t *lsc = cache_of(op, st);

    if (lsc == NULL) {
        SHL_ERR(st->code);
    }
    SHL_ERR(shl_lsc_kill(lsc, op, m, st));
    SHL_LOG_INFO(COMMAND, 558701, "Success: kill session", "command", BCON_UTF8(op->cmd_name),
                 "patterns", BCON_INT64((int64_t)m->n));
done:
    return ret;
}

static void
add_all(shl_kill_matcher_t *m)
{
    shl_kill_pattern_t p;

    memset(&p, 0, sizeof(p));
    p.kind = SHL_KILL_ALL;
    shl_kill_matcher_add(m, &p);
}

/* Every session of the caller: all of them without access control or for __system, else
 * the caller's own. */
static void
add_own(const shl_op_ctx_t *op, shl_kill_matcher_t *m)
{
    shl_kill_pattern_t p;

    memset(&p, 0, sizeof(p));
    if (shl_op_acts_for_all_users(op)) {
        add_all(m);
        return;
    }
    p.kind = SHL_KILL_UID;
    shl_op_user_digest(op, p.uid);
    shl_kill_matcher_add(m, &p);
}

/* {killSessions: [lsid...]}: [] is every session of the logged-in user (without
 * authentication, every session). */
static int
cmd_kill_sessions(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    lsid_vec_t l = {0};
    shl_kill_matcher_t m;
    bson_iter_t it;

    (void)reply;
    shl_kill_matcher_init(&m);
    shl_op_user_digest(op, l.caller);
    first_field(cmd, &it);
    SHL_ERR(each_object(&it, "KillSessionsCmd", "killSessions", add_lsid, &l, st));
    if (l.n == 0) {
        add_own(op, &m);
    }
    for (size_t i = 0; i < l.n; i++) {
        shl_kill_matcher_add_lsid(&m, &l.v[i]);
    }
    SHL_ERR(run_kill(op, &m, st));
done:
    bson_free(l.v);
    shl_kill_matcher_cleanup(&m);
    return ret;
}

/* {killAllSessions: [{user, db}...]}: [] kills every session. */
static int
cmd_kill_all_sessions(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    uid_vec_t users = {0};
    shl_kill_matcher_t m;
    bson_iter_t it;

    (void)reply;
    shl_kill_matcher_init(&m);
    first_field(cmd, &it);
    SHL_ERR(each_object(&it, "KillAllSessionsCmd", "killAllSessions", add_user, &users, st));
    if (users.n == 0) {
        add_all(&m);
    }
    for (size_t i = 0; i < users.n; i++) {
        shl_kill_pattern_t p;
        memset(&p, 0, sizeof(p));
        p.kind = SHL_KILL_UID;
        memcpy(p.uid, users.v[i], SHL_LSID_UID_LEN);
        shl_kill_matcher_add(&m, &p);
    }
    SHL_ERR(run_kill(op, &m, st));
done:
    bson_free(users.v);
    shl_kill_matcher_cleanup(&m);
    return ret;
}

/* {killAllSessionsByPattern: [{lsid?, uid?, users?, roles?}...]}: [] kills every session. */
static int
cmd_kill_all_sessions_by_pattern(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply,
                                 shl_status_t *st)
{
    int ret = 0;
    shl_kill_matcher_t m;
    bson_iter_t it;

    (void)reply;
    shl_kill_matcher_init(&m);
    first_field(cmd, &it);
    SHL_ERR(each_object(&it, "KillAllSessionsByPatternCmd", "killAllSessionsByPattern", add_pattern,
                        &m, st));
    if (m.n == 0) {
        add_all(&m);
    }
    SHL_ERR(run_kill(op, &m, st));
done:
    shl_kill_matcher_cleanup(&m);
    return ret;
}

/* {refreshLogicalSessionCacheNow: 1} (test-only): one refresh now; its error is the reply's,
 * but for DuplicateKey (two refreshes racing to upsert one session), as MongoDB's. */
static int
cmd_refresh_now(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shl_lsc_t *lsc = cache_of(op, st);

    (void)cmd;
    (void)reply;
    if (lsc == NULL) {
        SHL_ERR(st->code);
    }
    ret = shl_lsc_refresh_now(lsc, st);
    if (ret == SHL_CODE_DUPLICATE_KEY) {
        shl_status_clear(st);
        ret = 0;
    }
done:
    return ret;
}

/* {reapLogicalSessionCacheNow: 1} (test-only): one reap of expired transaction records now. */
static int
cmd_reap_now(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shl_lsc_t *lsc = cache_of(op, st);

    (void)cmd;
    (void)reply;
    if (lsc == NULL) {
        SHL_ERR(st->code);
    }
    ret = shl_lsc_reap_now(lsc, st);
done:
    return ret;
}

static const shl_command_t session_commands[] = {
    {"startSession", {NULL}, cmd_start_session, 0, "start a logical session"},
    {"refreshSessions", {NULL}, cmd_refresh_sessions, 0, "renew a set of logical sessions"},
    {"endSessions", {NULL}, cmd_end_sessions, 0, "end a set of logical sessions"},
    {"killSessions", {NULL}, cmd_kill_sessions, 0, "kill a logical session and its operations"},
    {"killAllSessions", {NULL}, cmd_kill_all_sessions, 0, "kill all logical sessions"},
    {"killAllSessionsByPattern",
     {NULL},
     cmd_kill_all_sessions_by_pattern,
     0,
     "kill logical sessions by pattern"},
    {"refreshLogicalSessionCacheNow",
     {NULL},
     cmd_refresh_now,
     SHL_CMD_TEST_ONLY,
     "force the logical session cache to refresh. Test command only."},
    {"reapLogicalSessionCacheNow",
     {NULL},
     cmd_reap_now,
     SHL_CMD_TEST_ONLY,
     "force the logical session cache to reap. Test command only."},
};

void
shl_session_commands_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(session_commands) / sizeof(session_commands[0]); i++) {
        shl_command_registry_add(reg, &session_commands[i]);
    }
}

bool
shl_session_cmd_ignores_lsid(const shl_command_t *cmd)
{
    return cmd->run == cmd_kill_sessions || cmd->run == cmd_kill_all_sessions ||
           cmd->run == cmd_kill_all_sessions_by_pattern;
}

/* ---------------------------------------------------------------- stages */

int
shl_pipeline_stage_position(const bson_t *pipeline, const char *name)
{
    bson_iter_t it, inner;
    int i = 0;

    if (!bson_iter_init(&it, pipeline)) {
        return 0;
    }
    while (shl_iter_next(&it)) {
        i++;
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &inner) &&
            shl_iter_next(&inner) && strcmp(shl_iter_key(&inner), name) == 0) {
            return i == 1 ? 1 : 2;
        }
    }
    return 0;
}

void
shl_list_sessions_spec_cleanup(shl_list_sessions_spec_t *spec)
{
    bson_free(spec->uids);
    memset(spec, 0, sizeof(*spec));
}

int
shl_list_sessions_spec_parse(const bson_iter_t *elem, const char *stage,
                             shl_list_sessions_spec_t *spec, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    uid_vec_t users = {0};
    bool has_users = false;

    memset(spec, 0, sizeof(*spec));
    if (!BSON_ITER_HOLDS_DOCUMENT(elem) || !bson_iter_recurse(elem, &it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "%s options must be specified in an object, but found: %s", stage,
                 shl_bson_type_name(shl_iter_type(elem)));
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "allUsers") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it)) {
                SHL_ERR(wrong_type(stage, k, &it, "bool", st));
            }
            spec->all = bson_iter_bool(&it);
        } else if (strcmp(k, "users") == 0) {
            SHL_ERR(each_object(&it, stage, k, add_user, &users, st));
            has_users = true;
        } else if (strcmp(k, "$_internalPredicate") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
                SHL_ERR(wrong_type(stage, k, &it, "object", st));
            }
        } else {
            SHL_ERR(unknown(stage, k, st));
        }
    }
    if (spec->all && users.n > 0) {
        SHL_FAIL(st, SHL_CODE_UNSUPPORTED_FORMAT,
                 "%s may not specify {allUsers:true} and {users:[...]} at the same time", stage);
    }
    (void)has_users;
    if (!spec->all && users.n == 0) {
        /* An implicit request for the logged-in user's own sessions. */
        users.v = bson_malloc0(sizeof(*users.v));
        own_uid(users.v[0]);
        users.n = 1;
        spec->own = true;
    }
    spec->uids = users.v;
    spec->nuids = users.n;
    users.v = NULL;
done:
    bson_free(users.v);
    return ret;
}

/* The stages after the first of 'pipeline' into the array 'rest'; 40602 when 'name' is among
 * them. */
static int
rest_of_pipeline(const bson_t *pipeline, const char *name, bson_t *rest, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, inner;
    uint32_t k = 0;
    bool first = true;

    bson_iter_init(&it, pipeline);
    while (shl_iter_next(&it)) {
        char key[16];
        const char *kp;
        if (first) {
            first = false;
            continue;
        }
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &inner) &&
            shl_iter_next(&inner) && strcmp(shl_iter_key(&inner), name) == 0) {
            SHL_FAIL(st, 40602, "%s is only valid as the first stage in a pipeline.", name);
        }
        bson_uint32_to_string(k++, &kp, key, sizeof(key));
        bson_append_value(rest, kp, -1, bson_iter_value(&it));
    }
done:
    return ret;
}

/* The first stage's value (the pipeline starts with it). */
static void
first_stage(const bson_t *pipeline, bson_iter_t *stage)
{
    bson_iter_t it;

    bson_iter_init(&it, pipeline);
    shl_iter_next(&it);
    bson_iter_recurse(&it, stage);
    shl_iter_next(stage);
}

int
shl_list_local_sessions_aggregate(shl_op_ctx_t *op, const bson_t *cmd, const bson_t *pipeline,
                                  shl_session_run_stages_fn run, bson_t *reply, shl_status_t *st)
{
    static const char *const name = "$listLocalSessions";
    int ret = 0;
    bson_t all = BSON_INITIALIZER, rest = BSON_INITIALIZER, out = BSON_INITIALIZER, cur;
    bson_iter_t it, stage;
    shl_list_sessions_spec_t spec;
    shl_lsc_t *lsc = NULL;
    uint32_t n = 0, k = 0;
    char ns[256];

    memset(&spec, 0, sizeof(spec));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_NUMBER(&it) ||
        bson_iter_as_double(&it) != 1.0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE,
                 "%s must be run against the database with {aggregate: 1}, not a collection", name);
    }
    first_stage(pipeline, &stage);
    SHL_ERR(shl_list_sessions_spec_parse(&stage, name, &spec, st));
    if (spec.own) {
        shl_op_user_digest(op, spec.uids[0]);
    }
    SHL_ERR(rest_of_pipeline(pipeline, name, &rest, st));
    if ((lsc = cache_of(op, st)) == NULL) {
        SHL_ERR(st->code);
    }
    shl_lsc_list(lsc, spec.all, (const uint8_t(*)[SHL_LSID_UID_LEN])spec.uids, spec.nuids, &all,
                 &n);
    SHL_ERR(run(&all, &rest, &out, &k, st));
    /* One batch: a process's sessions are answered at once, as its $currentOp is. */
    snprintf(ns, sizeof(ns), "%s.$cmd.aggregate", op->db);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_ARRAY(&cur, "firstBatch", &out);
    BSON_APPEND_INT64(&cur, "id", 0);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    bson_append_document_end(reply, &cur);
done:
    shl_list_sessions_spec_cleanup(&spec);
    bson_destroy(&all);
    bson_destroy(&rest);
    bson_destroy(&out);
    return ret;
}

int
shl_list_sessions_rewrite(const shl_op_ctx_t *op, const char *ns, const bson_t *pipeline,
                          bson_t *out, shl_status_t *st)
{
    static const char *const name = "$listSessions";
    int ret = 0;
    bson_t rest = BSON_INITIALIZER, match, q, id, in;
    bson_iter_t stage, it;
    shl_list_sessions_spec_t spec;
    uint32_t k = 1;

    bson_init(out);
    memset(&spec, 0, sizeof(spec));
    if (strcmp(ns, SHL_SESSIONS_NS) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "%s may only be run against %s", name,
                 SHL_SESSIONS_NS);
    }
    first_stage(pipeline, &stage);
    SHL_ERR(shl_list_sessions_spec_parse(&stage, name, &spec, st));
    if (spec.own) {
        shl_op_user_digest(op, spec.uids[0]);
    }
    SHL_ERR(rest_of_pipeline(pipeline, name, &rest, st));
    BSON_APPEND_DOCUMENT_BEGIN(out, "0", &match);
    BSON_APPEND_DOCUMENT_BEGIN(&match, "$match", &q);
    if (!spec.all) {
        BSON_APPEND_DOCUMENT_BEGIN(&q, "_id.uid", &id);
        BSON_APPEND_ARRAY_BEGIN(&id, "$in", &in);
        for (size_t i = 0; i < spec.nuids; i++) {
            char key[16];
            const char *kp;
            bson_uint32_to_string((uint32_t)i, &kp, key, sizeof(key));
            bson_append_binary(&in, kp, -1, BSON_SUBTYPE_BINARY, spec.uids[i], SHL_LSID_UID_LEN);
        }
        bson_append_array_end(&id, &in);
        bson_append_document_end(&q, &id);
    }
    bson_append_document_end(&match, &q);
    bson_append_document_end(out, &match);
    bson_iter_init(&it, &rest);
    while (shl_iter_next(&it)) {
        char key[16];
        const char *kp;
        bson_uint32_to_string(k++, &kp, key, sizeof(key));
        bson_append_value(out, kp, -1, bson_iter_value(&it));
    }
done:
    shl_list_sessions_spec_cleanup(&spec);
    bson_destroy(&rest);
    return ret;
}
