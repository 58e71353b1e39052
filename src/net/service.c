/*
 * service.c -- request dispatch (see service.h): command lookup, the database and
 * flag checks, generic arguments, failCommand, running the command, and building
 * the reply from its status.
 */
#include "bson/bson_iter.h"
#include "net/service.h"

#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "bson/bson_util.h"
#include "base/str.h"
#include "net/cluster_time.h"
#include "net/message.h"
#include "net/read_concern_support.h"
#include "net/topology.h"

/* Wrap a body received over OP_QUERY: {$query: {...}, $readPreference: ...} */
static bool
unwrap_legacy_query(const bson_t *in, bson_t *view)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    if (bson_iter_init(&it, in) && shl_iter_next(&it) &&
        (strcmp(shl_iter_key(&it), "$query") == 0 || strcmp(shl_iter_key(&it), "query") == 0) &&
        BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_document(&it, &len, &data);
        return bson_init_static(view, data, len);
    }
    return false;
}

static void
count_op(shl_service_ctx_t *svc, const char *name)
{
    atomic_llong *c = &svc->counters.op_command;
    if (strcmp(name, "insert") == 0) {
        c = &svc->counters.op_insert;
    } else if (strcmp(name, "find") == 0) {
        c = &svc->counters.op_query;
    } else if (strcmp(name, "update") == 0) {
        c = &svc->counters.op_update;
    } else if (strcmp(name, "delete") == 0) {
        c = &svc->counters.op_delete;
    } else if (strcmp(name, "getMore") == 0) {
        c = &svc->counters.op_getmore;
    }
    atomic_fetch_add(c, 1);
}

/* Whether 'op' runs 'cmd' as a retryable write: a txnNumber outside a transaction. */
static bool
is_retryable_write(const shl_op_ctx_t *op, const shl_command_t *cmd)
{
    /* A transaction's commit or abort is retryable too (MongoDB's error_labels.cpp). */
    bool decision =
        cmd != NULL && op->has_txn_number && op->has_autocommit &&
        (strcmp(cmd->name, "commitTransaction") == 0 || strcmp(cmd->name, "abortTransaction") == 0);
    return decision || (cmd != NULL && (cmd->flags & SHL_CMD_RETRYABLE_WRITE) &&
                        op->has_txn_number && !op->has_autocommit);
}

/*
 * readConcern {level: "snapshot"} outside a transaction is for the commands flagged
 * SHL_CMD_SNAPSHOT_READ (find, aggregate, distinct); every other command refuses it with
 * MongoDB's InvalidOptions, "Command <name> does not support <readConcern> :: caused by ::
 * <why>" (count's reason names snapshot, as its own check does).
 */
static int
check_snapshot_support(const shl_op_ctx_t *op, const shl_command_t *cmd, shl_status_t *st)
{
    bson_iter_t it;
    char *desc = NULL;
    int ret = 0;

    if (!op->has_read_concern || (cmd->flags & SHL_CMD_SNAPSHOT_READ) ||
        !bson_iter_init_find(&it, &op->read_concern, "level") || !BSON_ITER_HOLDS_UTF8(&it) ||
        strcmp(bson_iter_utf8(&it, NULL), "snapshot") != 0) {
        goto done;
    }
    desc = shl_read_concern_to_string(&op->read_concern);
    SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Command %s does not support %s :: caused by :: %s",
             cmd->name, desc,
             strcmp(cmd->name, "count") == 0 ? "read concern snapshot not supported"
                                             : "read concern not supported");
done:
    bson_free(desc);
    return ret;
}

/* Whether a retryable write's errors are labelled for this client: never for another
 * cluster process (it sent internalClient in its hello) nor for in-process commands. */
static bool
labels_retryable_writes(const shl_op_ctx_t *op, const shl_command_t *cmd)
{
    return is_retryable_write(op, cmd) && op->conn != NULL && !op->conn->internal;
}

/*
 * Whether an error 'code' of a retryable write gets the RetryableWriteError label here, as
 * MongoDB attaches it (error_labels.cpp): a data node labels the retriable codes
 * (not-primary, network, shutdown, interruption by a state change...); a router labels only
 * a shutdown code while it is itself shutting down -- an error that came from a shard or the
 * config server gets no label from a router.
 */
/* Whether this process is on its way out: shutting down, or a router in quiesce mode
 * (whose own ShutdownInProgress to hello must reach the client as such). */
static bool
leaving(const shl_service_ctx_t *svc)
{
    return atomic_load(&svc->shutting_down) || shl_topology_quiescing(svc);
}

static bool
retryable_write_error(const shl_service_ctx_t *svc, int code)
{
    if (shl_code_in_category(code, SHL_CAT_SHUTDOWN_ERROR) && leaving(svc)) {
        return true;
    }
    return svc->role != SHL_ROLE_ROUTER && shl_code_in_category(code, SHL_CAT_RETRIABLE_ERROR);
}

/* A successful retryable write's writeConcernError with a retriable code: the label goes at
 * the reply's top level. */
static void
label_write_concern_error(const shl_service_ctx_t *svc, bson_t *reply)
{
    bson_iter_t it, f;
    int code = 0;

    if (!shl_bson_iter_find_key(&it, reply, "writeConcernError") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &f) ||
        shl_bson_iter_find_key(&it, reply, "errorLabels")) {
        return;
    }
    if (bson_iter_find(&f, "code") && BSON_ITER_HOLDS_NUMBER(&f)) {
        code = (int)bson_iter_as_int64(&f);
    }
    if (code != 0 && retryable_write_error(svc, code)) {
        bson_t labels;
        BSON_APPEND_ARRAY_BEGIN(reply, "errorLabels", &labels);
        BSON_APPEND_UTF8(&labels, "0", shl_label_name(SHL_LABEL_BIT_RETRYABLE_WRITE_ERROR));
        bson_append_array_end(reply, &labels);
    }
}

/*
 * MongoDB's router hides the state changes of the nodes behind it from drivers
 * (rewrite_state_change_errors.cpp): in its reply, a not-primary code, or a shutdown code
 * while the router itself is not shutting down -- at the top level of an error reply, in
 * writeErrors and in writeConcernError -- becomes HostUnreachable (retriable, but no reason
 * for a driver to mark the router unknown), and the phrases drivers look for in errmsg are
 * masked.
 */
static bool
state_change_code(const shl_service_ctx_t *svc, const bson_t *node)
{
    bson_iter_t it;
    int code;

    if (!bson_iter_init_find(&it, node, "code") || !BSON_ITER_HOLDS_NUMBER(&it)) {
        return false;
    }
    code = (int)bson_iter_as_int64(&it);
    return shl_code_in_category(code, SHL_CAT_NOT_PRIMARY_ERROR) ||
           (shl_code_in_category(code, SHL_CAT_SHUTDOWN_ERROR) && !leaving(svc));
}

/* 'msg' with "not master" and "node is recovering" masked, into buf. */
static const char *
scrub_errmsg(const char *msg, char *buf, size_t n)
{
    static const char *const pat[] = {"not master", "node is recovering"};
    static const char *const sub[] = {"(NOT_PRIMARY)", "(NODE_IS_RECOVERING)"};
    size_t o = 0;

    while (*msg != '\0' && o + 1 < n) {
        bool hit = false;
        for (size_t p = 0; p < 2 && !hit; p++) {
            size_t pl = strlen(pat[p]);
            if (strncmp(msg, pat[p], pl) == 0) {
                o += (size_t)snprintf(buf + o, n - o, "%s", sub[p]);
                o = o < n ? o : n - 1;
                msg += pl;
                hit = true;
            }
        }
        if (!hit) {
            buf[o++] = *msg++;
        }
    }
    buf[o] = '\0';
    return buf;
}

/* Append field 'it' of an error node to 'out', rewritten if it is code, codeName or errmsg. */
static void
append_rewritten_field(bson_t *out, const bson_iter_t *it)
{
    const char *k = shl_iter_key(it);
    char buf[SHL_STATUS_REASON_MAX * 2];

    if (strcmp(k, "code") == 0) {
        BSON_APPEND_INT32(out, "code", SHL_CODE_HOST_UNREACHABLE);
    } else if (strcmp(k, "codeName") == 0) {
        BSON_APPEND_UTF8(out, "codeName", shl_code_name(SHL_CODE_HOST_UNREACHABLE));
    } else if (strcmp(k, "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(it)) {
        BSON_APPEND_UTF8(out, "errmsg", scrub_errmsg(bson_iter_utf8(it, NULL), buf, sizeof(buf)));
    } else {
        bson_append_iter(out, NULL, 0, it);
    }
}

/* Append error node 'node' to 'out' under 'key' with the rewrite applied. */
static void
append_rewritten_node(bson_t *out, const char *key, const bson_t *node)
{
    bson_t d;
    bson_iter_t it;

    bson_append_document_begin(out, key, -1, &d);
    bson_iter_init(&it, node);
    while (shl_iter_next(&it)) {
        append_rewritten_field(&d, &it);
    }
    bson_append_document_end(out, &d);
}

static void
rewrite_state_change_errors(const shl_service_ctx_t *svc, bson_t *reply)
{
    bson_iter_t it, e;
    bson_t fin, node, arr;
    bool top = false, any;

    /* Find out first whether anything needs it: most replies are left alone. */
    if (bson_iter_init_find(&it, reply, "ok") && BSON_ITER_HOLDS_NUMBER(&it)) {
        top = bson_iter_as_double(&it) == 0.0 && state_change_code(svc, reply);
    }
    any = top;
    if (!any && bson_iter_init_find(&it, reply, "writeErrors") && shl_bson_iter_view(&it, &arr) &&
        bson_iter_init(&e, &arr)) {
        while (!any && shl_iter_next(&e)) {
            any = shl_bson_iter_view(&e, &node) && state_change_code(svc, &node);
        }
    }
    if (!any && bson_iter_init_find(&it, reply, "writeConcernError") && shl_bson_iter_view(&it, &node)) {
        any = state_change_code(svc, &node);
    }
    if (!any) {
        return;
    }
    bson_init(&fin);
    bson_iter_init(&it, reply);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "writeErrors") == 0 && shl_bson_iter_view(&it, &arr)) {
            bson_t a;
            bson_append_array_begin(&fin, k, -1, &a);
            bson_iter_init(&e, &arr);
            while (shl_iter_next(&e)) {
                if (shl_bson_iter_view(&e, &node) && state_change_code(svc, &node)) {
                    append_rewritten_node(&a, shl_iter_key(&e), &node);
                } else {
                    bson_append_iter(&a, NULL, 0, &e);
                }
            }
            bson_append_array_end(&fin, &a);
        } else if (strcmp(k, "writeConcernError") == 0 && shl_bson_iter_view(&it, &node) &&
                   state_change_code(svc, &node)) {
            append_rewritten_node(&fin, k, &node);
        } else if (top) {
            append_rewritten_field(&fin, &it);
        } else {
            bson_append_iter(&fin, NULL, 0, &it);
        }
    }
    bson_reinit(reply);
    bson_concat(reply, &fin);
    bson_destroy(&fin);
}

/* failCommand's blockConnection: sleep, but end early when the operation is killed (killOp,
 * or the shutdown once its grace period is over) or passes its maxTimeMS, as MongoDB's
 * opCtx->sleepFor does. A shutdown that just began lets it finish, like any running
 * operation. */
static int
block_interruptibly(shl_op_ctx_t *op, int64_t ms, shl_status_t *st)
{
    int64_t end = shl_clock_mono_us() + ms * 1000;
    int ret = 0;

    for (;;) {
        int64_t left_us = end - shl_clock_mono_us();
        if (atomic_load(&op->killed) ||
            (op->deadline_us != 0 && shl_clock_mono_us() >= op->deadline_us)) {
            SHL_ERR(shl_op_check_interrupt(op, st));
        }
        if (left_us <= 0) {
            break;
        }
        shl_sleep_ms(left_us < 20000 ? (left_us + 999) / 1000 : 20);
    }
done:
    return ret;
}

/*
 * Run the command in 'body' and build its whole reply. *close_conn is set when
 * failCommand asks for the connection to be closed.
 */
static void
dispatch(shl_service_ctx_t *svc, shl_conn_t *conn, const bson_t *body, const char *db_in,
         bool legacy, bson_t *reply, bool *close_conn)
{
    int ret = 0;
    shl_status_t st = SHL_STATUS_INIT;
    shl_op_ctx_t op;
    bson_iter_t it;
    const char *name = "";
    const shl_command_t *cmd = NULL;
    char db[128] = "";
    shl_fail_command_action_t fc, wce;
    bool op_init = false, in_session = false;
    bson_t *rewritten = NULL;

    memset(&fc, 0, sizeof(fc));
    memset(&wce, 0, sizeof(wce));
    memset(&op, 0, sizeof(op));
    bson_init(reply);
    if (!bson_iter_init(&it, body) || !shl_iter_next(&it)) {
        SHL_FAIL(&st, SHL_CODE_INVALID_OPTIONS, "no command name found in request");
    }
    name = shl_iter_key(&it);
    if (db_in != NULL) {
        shl_str_copy(db, sizeof(db), db_in);
    } else if (shl_bson_iter_find_key(&it, body, "$db") && BSON_ITER_HOLDS_UTF8(&it)) {
        shl_str_copy(db, sizeof(db), bson_iter_utf8(&it, NULL));
    } else {
        SHL_FAIL(&st, 40571, "OP_MSG requests require a $db argument");
    }
    count_op(svc, name);
    cmd = shl_command_registry_find(svc->commands, name);
    /* MongoDB checks OP_QUERY's short allow-list before it looks the name up. */
    if (legacy && (cmd == NULL || !(cmd->flags & SHL_CMD_HANDSHAKE))) {
        SHL_FAIL(&st, SHL_CODE_UNSUPPORTED_OP_QUERY_COMMAND, "Unsupported OP_QUERY command: %s",
                 name);
    }
    if (cmd == NULL) {
        SHL_FAIL(&st, SHL_CODE_COMMAND_NOT_FOUND, "no such command: '%s'", name);
    }
    /* "$external", where users of external mechanisms (MONGODB-X509) live, is the one name
     * with a '$' MongoDB takes. */
    if (db[0] == '\0' || strchr(db, '.') != NULL || strchr(db, ' ') != NULL ||
        (strchr(db, '$') != NULL && strcmp(db, "$external") != 0) || strchr(db, '/') != NULL ||
        strchr(db, '\\') != NULL || strlen(db) >= 64) {
        SHL_FAIL(&st, SHL_CODE_INVALID_NAMESPACE, "Invalid database name: '%s'", db);
    }
    if ((cmd->flags & SHL_CMD_ADMIN_ONLY) && strcmp(db, "admin") != 0) {
        SHL_FAIL(&st, SHL_CODE_UNAUTHORIZED, "%s may only be run against the admin database.",
                 cmd->name);
    }
    SHL_ERR(shl_op_ctx_init(&op, svc, conn, body, db, &st));
    if (svc->hooks.rewrite_request != NULL &&
        (rewritten = svc->hooks.rewrite_request(&op, cmd)) != NULL) {
        body = rewritten;
        SHL_ERR(shl_op_ctx_init(&op, svc, conn, body, db, &st));
    }
    op_init = true;
    op.cmd_name = cmd->name;
    shl_op_register(&op);
    /* Access control comes first: an unauthorized client learns nothing else (auth/). */
    if (svc->hooks.authorize != NULL) {
        SHL_ERR(svc->hooks.authorize(&op, cmd, &st));
    }
    /* Gossip in (docs/design/vector_clock.md): a $clusterTime that fails its proof or the
     * advance limit fails the command before it runs. */
    {
        uint64_t gossip_ts = 0;
        SHL_ERR(shl_cluster_time_gossip_in(&op, &gossip_ts, &st));
        op.cluster_time_checked = gossip_ts;
        if (svc->hooks.gossip_in != NULL) {
            svc->hooks.gossip_in(&op, gossip_ts);
        }
    }
    /* Until transactions exist, a statement of one must not run as an ordinary write that
     * the client later believes aborted (or committed with the others). */
    if ((op.has_autocommit || op.start_transaction) && svc->hooks.txn_end == NULL) {
        SHL_FAIL(&st, SHL_CODE_ILLEGAL_OPERATION,
                 "multi-document transactions are not supported by Shale yet");
    }
    if (op.has_read_concern) {
        /* MongoDB parses every command's readConcern before it asks whether the command
         * takes it (a router refuses a malformed one without asking a shard). */
        shl_read_concern_t rc;
        SHL_ERR(shl_read_concern_parse(&op.read_concern, &rc, &st));
    }
    /* In a transaction the readConcern is the transaction's (checked when it starts). */
    if (!op.has_autocommit) {
        SHL_ERR(check_snapshot_support(&op, cmd, &st));
        SHL_ERR(shl_read_concern_check_support(cmd->name, body,
                                               op.has_read_concern ? &op.read_concern : NULL, &st));
    }
    if (svc->hooks.admit != NULL) {
        SHL_ERR(svc->hooks.admit(&op, cmd, &st));
    }
    if (svc->hooks.session_begin != NULL) {
        SHL_ERR(svc->hooks.session_begin(&op, cmd, &st));
        in_session = true;
    }

    if (!(cmd->flags & SHL_CMD_NO_FAILCOMMAND)) {
        shl_fail_command_check(&op, cmd, &fc);
    }
    /* MongoDB's order: block, then close the connection, then fail with the error code. */
    if (fc.fire && fc.block) {
        if (fc.block_error != 0) {
            SHL_FAIL(&st, fc.block_error, "%s", fc.block_errmsg);
        }
        SHL_ERR(block_interruptibly(&op, fc.block_ms, &st));
    }
    if (fc.fire && fc.close_connection) {
        *close_conn = true;
        goto done;
    }
    if (fc.fire && fc.error_code != 0) {
        shl_status_set(&st, fc.error_code, "Failing command via 'failCommand' failpoint");
        if (fc.has_extra_info) {
            shl_status_set_extra(&st, &fc.extra_info);
        }
        ret = st.code;
        goto done;
    }
    ret = cmd->run(&op, body, reply, &st);
    if (ret == 0 && svc->hooks.authorize_reply != NULL) {
        svc->hooks.authorize_reply(&op, cmd, reply);
    }
    /* MongoDB injects a writeConcernError where it waits for the write concern: after the
     * command ran, whether it succeeded or not. */
    if (!(cmd->flags & SHL_CMD_NO_FAILCOMMAND)) {
        shl_fail_command_check_wce(&op, cmd, &wce);
    }

done:
    /* serverStatus metrics.commands: every command that named itself, internal ones too. */
    if (name[0] != '\0') {
        shl_command_registry_count(svc->commands, cmd, ret != 0);
    }
    if (in_session && op.txn != NULL && svc->hooks.txn_end != NULL) {
        ret = svc->hooks.txn_end(&op, ret, &st, ret == 0 ? reply : NULL);
    }
    if (in_session && svc->hooks.session_end != NULL) {
        svc->hooks.session_end(&op);
    }
    if (ret != 0) {
        bson_reinit(reply);
        if (wce.fire && wce.has_labels) {
            /* Its labels (none for an empty list) replace the ones the server attaches. */
            st.labels = 0;
            shl_status_append_reply(&st, reply);
            if (!bson_empty(&wce.labels)) {
                BSON_APPEND_ARRAY(reply, "errorLabels", &wce.labels);
            }
        } else if (fc.fire && fc.has_labels) {
            st.labels = 0;
            shl_status_append_reply(&st, reply);
            BSON_APPEND_ARRAY(reply, "errorLabels", &fc.labels);
        } else {
            if (op_init && labels_retryable_writes(&op, cmd) &&
                retryable_write_error(svc, st.code)) {
                shl_status_add_label(&st, SHL_LABEL(RETRYABLE_WRITE_ERROR));
            }
            shl_status_append_reply(&st, reply);
        }
        if (wce.fire) {
            BSON_APPEND_DOCUMENT(reply, "writeConcernError", &wce.write_concern_error);
        }
        /* A shutdown error of this process's own tells the client which topology version
         * it belongs to, as MongoDB's replies do (a driver then ignores stale ones). */
        if (shl_code_in_category(st.code, SHL_CAT_SHUTDOWN_ERROR) && leaving(svc) &&
            !shl_bson_iter_find_key(&it, reply, "topologyVersion")) {
            shl_topology_append(svc, reply, "topologyVersion");
        }
        SHL_LOG_DEBUG(1, COMMAND, 51803, "command failed", "command", BCON_UTF8(name), "code",
                      BCON_INT32(st.code), "errmsg", BCON_UTF8(st.reason));
    } else if (!*close_conn) {
        if (wce.fire) {
            BSON_APPEND_DOCUMENT(reply, "writeConcernError", &wce.write_concern_error);
        }
        if (wce.fire && wce.has_labels) {
            /* failCommand's labels replace the ones the server would attach. */
            BSON_APPEND_ARRAY(reply, "errorLabels", &wce.labels);
        } else if (labels_retryable_writes(&op, cmd)) {
            label_write_concern_error(svc, reply);
        }
        if (!shl_bson_iter_find_key(&it, reply, "ok")) {
            BSON_APPEND_DOUBLE(reply, "ok", 1.0);
        }
    }
    /* A failCommand that fired here leaves the reply as it asked for it, unless it allows
     * the rewrite. */
    if (svc->role == SHL_ROLE_ROUTER && shl_opt_bool(SHL_OPT_rewriteStateChangeErrors) &&
        !(fc.fire && !fc.allow_rewrite_state_change) &&
        !(wce.fire && !wce.allow_rewrite_state_change)) {
        rewrite_state_change_errors(svc, reply);
    }
    /* Every reply, an unknown command's or a malformed request's included, carries the
     * role's times (MongoDB appends operationTime/$clusterTime to errors of the parse too). */
    if (svc->hooks.decorate_reply != NULL) {
        op.svc = svc;
        op.conn = conn;
        svc->hooks.decorate_reply(&op, reply);
    }
    /* The last bound on every reply (docs/limits.md): commands bound what they build, and a
     * reply that still grew past the internal limit answers BSONObjectTooLarge rather than a
     * message the router or a driver refuses. */
    if (!*close_conn && shl_msg_reply_check(reply, &st) != 0) {
        SHL_LOG_WARNING(COMMAND, 51804, "reply too large", "command", BCON_UTF8(name), "size",
                        BCON_INT64((int64_t)reply->len));
        bson_reinit(reply);
        shl_status_append_reply(&st, reply);
        if (svc->hooks.decorate_reply != NULL) {
            svc->hooks.decorate_reply(&op, reply);
        }
    }
    if (op_init) {
        shl_op_unregister(&op);
    }
    if (rewritten != NULL) {
        bson_destroy(rewritten);
    }
    shl_fail_command_action_cleanup(&fc);
    shl_fail_command_action_cleanup(&wce);
}

void
shl_service_run_command(shl_service_ctx_t *svc, shl_conn_t *conn, const bson_t *body,
                        const char *db, bson_t *reply)
{
    bool close_conn = false;
    dispatch(svc, conn, body, db, false, reply, &close_conn);
}

/* requestID of the replies this process sends. */
static atomic_int next_reply_id = 1;

/* Send 'reply' to the request 'response_to' with OP_MSG 'flags'; *id_out (may be NULL)
 * receives the reply's requestID. */
static bool
send_reply_flags(shl_conn_t *conn, const shl_message_t *msg, int32_t response_to, uint32_t flags,
                 const bson_t *reply, int32_t *id_out)
{
    uint8_t prefix[SHL_MSG_REPLY_PREFIX_MAX];
    size_t n;
    bool ok;
    int32_t id = atomic_fetch_add(&next_reply_id, 1);
    int32_t opcode = msg->legacy || msg->hdr.opcode != SHL_OP_MSG ? SHL_OP_REPLY : SHL_OP_MSG;

    /* Header and body in one sendmsg, the body straight from the reply document. */
    n = shl_msg_reply_prefix(prefix, opcode, id, response_to, flags, reply->len);
    ok = shl_conn_write_msg(conn, prefix, n, bson_get_data(reply), reply->len);
    if (id_out != NULL) {
        *id_out = id;
    }
    return ok;
}

static bool
send_reply(shl_conn_t *conn, const shl_message_t *msg, const bson_t *reply)
{
    return send_reply_flags(conn, msg, msg->hdr.request_id, 0, reply, NULL);
}

/*
 * The streaming hello (SDAM's streaming protocol): an OP_MSG awaitable hello with
 * exhaustAllowed gets replies with moreToCome, one each time the topology version moves or
 * maxAwaitTimeMS passes, without further requests. Returns the name's counter in
 * serverStatus, or NULL when 'body' is not such a hello.
 */
static atomic_llong *
exhaust_counter(shl_service_ctx_t *svc, const shl_message_t *msg, const bson_t *body)
{
    bson_iter_t it;
    const char *name = "";
    atomic_llong *counter = NULL;

    if (!msg->legacy && (msg->flags & SHL_MSG_EXHAUST_ALLOWED) &&
        !(msg->flags & SHL_MSG_MORE_TO_COME) && bson_iter_init(&it, body) && shl_iter_next(&it)) {
        name = shl_iter_key(&it);
    }
    if (strcmp(name, "hello") == 0) {
        counter = &svc->topology.exhaust_hello;
    } else if (strcmp(name, "isMaster") == 0 || strcmp(name, "ismaster") == 0) {
        counter = &svc->topology.exhaust_is_master;
    }
    if (counter != NULL && (!shl_bson_iter_find_key(&it, body, "topologyVersion") ||
                            !shl_bson_iter_find_key(&it, body, "maxAwaitTimeMS"))) {
        counter = NULL;
    }
    return counter;
}

/* Whether a streamed hello's 'reply' lets the stream go on: it succeeded and the process is
 * neither shutting down nor closing the connection. */
static bool
stream_continues(shl_service_ctx_t *svc, shl_conn_t *conn, const bson_t *reply)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, reply, "ok") && bson_iter_as_double(&it) == 1.0 &&
           bson_iter_init_find(&it, reply, "topologyVersion") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
           !atomic_load(&svc->shutting_down) && !atomic_load(&conn->close_now);
}

/* A new document: 'body' with its topologyVersion replaced by the one in 'reply' (the next
 * request of a stream, as the client would have sent it). */
static bson_t *
next_stream_request(const bson_t *body, const bson_t *reply)
{
    bson_iter_t it, tv;
    bson_t *out = bson_new();

    bson_iter_init_find(&tv, reply, "topologyVersion");
    bson_iter_init(&it, body);
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), "topologyVersion") == 0) {
            bson_append_iter(out, "topologyVersion", -1, &tv);
        } else if (strcmp(bson_iter_key(&it), "client") == 0) {
            /* Client metadata goes with a connection's first hello only. */
        } else {
            bson_append_iter(out, NULL, 0, &it);
        }
    }
    return out;
}

/*
 * Answer a streaming hello until it ends: each reply that lets the stream go on carries
 * moreToCome and answers the previous reply. One connection thread serves one stream, as
 * it serves one request at a time; it sleeps in the topology wait between replies. Returns
 * whether to keep the connection.
 */
static bool
stream_hello(shl_service_ctx_t *svc, shl_conn_t *conn, const shl_message_t *msg,
             atomic_llong *counter, const bson_t *first)
{
    bson_t *body = NULL, *next;
    bson_t reply;
    int32_t response_to = msg->hdr.request_id, sent_id = 0;
    bool more = stream_continues(svc, conn, first), close_conn = false, keep;

    atomic_fetch_add(counter, 1);
    keep =
        send_reply_flags(conn, msg, response_to, more ? SHL_MSG_MORE_TO_COME : 0, first, &sent_id);
    if (more) {
        body = next_stream_request(&msg->body, first);
    }
    while (keep && more) {
        response_to = sent_id;
        dispatch(svc, conn, body, NULL, false, &reply, &close_conn);
        if (close_conn || atomic_load(&conn->close_now)) {
            keep = false;
        } else {
            more = stream_continues(svc, conn, &reply);
            keep = send_reply_flags(conn, msg, response_to, more ? SHL_MSG_MORE_TO_COME : 0, &reply,
                                    &sent_id);
            if (more) {
                next = next_stream_request(body, &reply);
                bson_destroy(body);
                body = next;
            }
        }
        bson_destroy(&reply);
    }
    if (body != NULL) {
        bson_destroy(body);
    }
    atomic_fetch_sub(counter, 1);
    return keep;
}

/* The OP_REPLY MongoDB 7.0 sends for removed legacy reads (OP_QUERY on a collection, GET_MORE). */
static bool
send_legacy_removed(shl_conn_t *conn, const shl_message_t *msg, const char *what)
{
    bson_t reply = BSON_INITIALIZER;
    char errmsg[256];
    uint8_t *out;
    size_t n;
    bool ok;

    snprintf(errmsg, sizeof(errmsg),
             "%s is no longer supported. The client driver may require an upgrade. For more "
             "details see https://dochub.mongodb.org/core/legacy-opcode-removal",
             what);
    BSON_APPEND_UTF8(&reply, "$err", errmsg);
    BSON_APPEND_INT32(&reply, "code", 5739101);
    BSON_APPEND_DOUBLE(&reply, "ok", 0.0);
    SHL_LOG_DEBUG(1, NETWORK, 5578800, "Deprecated operation requested", "op", BCON_UTF8(what),
                  "remote", BCON_UTF8(conn->remote));
    out = shl_msg_build_op_reply(atomic_fetch_add(&next_reply_id, 1), msg->hdr.request_id, &reply,
                                 &n);
    /* responseFlags: QueryFailure (2) alone, as MongoDB's legacy error replies carry. */
    memcpy(out + SHL_MSG_HEADER_LEN, "\x02\0\0\0", 4);
    ok = shl_conn_write_all(conn, out, n);
    bson_free(out);
    bson_destroy(&reply);
    return ok;
}

/*
 * Opcodes other than OP_MSG and OP_QUERY, handled as MongoDB 7.0 does: OP_GET_MORE gets
 * an error OP_REPLY; the removed legacy writes and OP_COMPRESSED (never negotiated) fail
 * the request, which closes the connection; anything else is logged and ignored.
 * Returns whether to keep the connection.
 */
static bool
handle_other_opcode(shl_conn_t *conn, const uint8_t *buf, size_t len)
{
    shl_message_t msg;
    bool keep = true;

    memset(&msg, 0, sizeof(msg));
    shl_msg_header_read(buf, &msg.hdr);
    (void)len;
    switch (msg.hdr.opcode) {
    case SHL_OP_GET_MORE:
        keep = send_legacy_removed(conn, &msg, "OP_GET_MORE");
        break;
    case SHL_OP_UPDATE:
    case SHL_OP_INSERT:
    case SHL_OP_DELETE:
    case SHL_OP_KILL_CURSORS:
    case SHL_OP_COMPRESSED:
        SHL_LOG_INFO(NETWORK, 4879802, "Failed to handle request", "remote",
                     BCON_UTF8(conn->remote), "opCode", BCON_INT32(msg.hdr.opcode), "error",
                     BCON_UTF8("operation is no longer supported"));
        keep = false;
        break;
    default:
        SHL_LOG_INFO(NETWORK, 21968, "Operation is not supported", "operation",
                     BCON_INT32(msg.hdr.opcode), "remote", BCON_UTF8(conn->remote));
        break;
    }
    return keep;
}

bool
shl_service_handle_message(shl_service_ctx_t *svc, shl_conn_t *conn, const uint8_t *buf, size_t len)
{
    shl_message_t msg;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t reply;
    bool keep = true, close_conn = false;
    atomic_llong *stream = NULL;

    if (len >= SHL_MSG_HEADER_LEN) {
        shl_msg_header_t hdr;
        shl_msg_header_read(buf, &hdr);
        if (hdr.opcode != SHL_OP_MSG && hdr.opcode != SHL_OP_QUERY) {
            return handle_other_opcode(conn, buf, len);
        }
    }
    /* The body stays a view of 'buf', which the connection keeps until this returns. */
    if (shl_msg_parse_view(buf, len, &msg, &st) != 0) {
        SHL_LOG_WARNING(NETWORK, 4615639, "Invalid message from client", "remote",
                        BCON_UTF8(conn->remote), "error", BCON_UTF8(st.reason), "code",
                        BCON_INT32(st.code));
        /* A frame we could not understand at all leaves the stream in an unknown state. */
        if (st.code == SHL_CODE_PROTOCOL_ERROR ||
            shl_code_in_category(st.code, SHL_CAT_CONNECTION_FATAL_MESSAGE_ERROR)) {
            shl_msg_cleanup(&msg);
            return false;
        }
        /* A fire-and-forget request gets no reply, not even an error. */
        if (!(msg.flags & SHL_MSG_MORE_TO_COME)) {
            bson_init(&reply);
            shl_status_append_reply(&st, &reply);
            keep = send_reply(conn, &msg, &reply);
            bson_destroy(&reply);
        }
        shl_msg_cleanup(&msg);
        return keep;
    }

    if (msg.legacy) {
        bson_t inner;
        const char *dot = strchr(msg.legacy_ns, '.');
        char db[128] = "";
        if (dot == NULL || strcmp(dot, ".$cmd") != 0) {
            /* Legacy OP_QUERY reads were removed in MongoDB 5.1+; answer like it. */
            keep = send_legacy_removed(conn, &msg, "OP_QUERY");
            shl_msg_cleanup(&msg);
            return keep;
        } else {
            snprintf(db, sizeof(db), "%.*s", (int)(dot - msg.legacy_ns), msg.legacy_ns);
            if (unwrap_legacy_query(&msg.body, &inner)) {
                dispatch(svc, conn, &inner, db, true, &reply, &close_conn);
            } else {
                dispatch(svc, conn, &msg.body, db, true, &reply, &close_conn);
            }
        }
    } else {
        dispatch(svc, conn, &msg.body, NULL, false, &reply, &close_conn);
    }
    if (close_conn || atomic_load(&conn->close_now)) {
        /* failCommand closeConnection, or shutdown: the client sees the connection close. */
        keep = false;
    } else if ((stream = exhaust_counter(svc, &msg, &msg.body)) != NULL) {
        keep = stream_hello(svc, conn, &msg, stream, &reply);
    } else if (!(msg.flags & SHL_MSG_MORE_TO_COME)) {
        keep = send_reply(conn, &msg, &reply);
    }
    bson_destroy(&reply);
    shl_msg_cleanup(&msg);
    return keep && !atomic_load(&conn->close_now);
}
