/*
 * failpoint_cmd.c -- the configureFailPoint command and MongoDB's failCommand fail
 * point with the fields MongoDB honours: failCommands (a name or alias) or failAllCommands,
 * the appName / namespace / threadName filters, failInternalCommands, errorCode (+
 * errorExtraInfo), errorLabels, closeConnection, blockConnection + blockTimeMS,
 * writeConcernError, allowRewriteStateChange (a router), and the times/skip modes counting
 * only the commands it fires for.
 */
#include <string.h>

#include "base/failpoint.h"
#include "bson/bson_iter.h"
#include "net/common_commands.h"
#include "net/service.h"

SHL_FAILPOINT_DEFINE(failCommand)

typedef struct fc_match {
    shl_op_ctx_t *op;
    const shl_command_t *cmd;
    bool after_run; /* the evaluation after the command ran (writeConcernError only) */
} fc_match_t;

/* Whether 'name' is the command's name or one of its aliases (MongoDB's hasAlias). */
static bool
names_command(const shl_command_t *cmd, const char *name)
{
    if (strcmp(cmd->name, name) == 0) {
        return true;
    }
    for (size_t i = 0; i < sizeof(cmd->aliases) / sizeof(cmd->aliases[0]); i++) {
        if (cmd->aliases[i] != NULL && strcmp(cmd->aliases[i], name) == 0) {
            return true;
        }
    }
    return false;
}

static bool
fails_command(const bson_t *data, const shl_command_t *cmd)
{
    bson_iter_t it, child;
    if (!bson_iter_init_find(&it, data, "failCommands") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &child)) {
        return false;
    }
    while (shl_iter_next(&child)) {
        if (BSON_ITER_HOLDS_UTF8(&child) && names_command(cmd, bson_iter_utf8(&child, NULL))) {
            return true;
        }
    }
    return false;
}

/*
 * The namespace a command names for the `namespace` filter: "db.coll" when its first value
 * is a collection name, else the database ("db"), as MongoDB's parseNs gives them.
 */
static void
command_ns(const shl_op_ctx_t *op, char *out, size_t n)
{
    bson_iter_t it;

    if (op->body != NULL && bson_iter_init(&it, op->body) && shl_iter_next(&it) &&
        BSON_ITER_HOLDS_UTF8(&it)) {
        snprintf(out, n, "%s.%s", op->db, bson_iter_utf8(&it, NULL));
    } else {
        snprintf(out, n, "%s", op->db);
    }
}

/* Whether the data asks for something that happens before the command runs (closing,
 * blocking, failing), or, after it ran, for a writeConcernError: MongoDB evaluates the fail
 * point at each of those two points, each firing counting against times/skip. */
static bool
has_action(const bson_t *data, bool after_run)
{
    bson_iter_t it;
    if (after_run) {
        return bson_iter_init_find(&it, data, "writeConcernError") && BSON_ITER_HOLDS_DOCUMENT(&it);
    }
    return (bson_iter_init_find(&it, data, "closeConnection") && bson_iter_as_bool(&it)) ||
           (bson_iter_init_find(&it, data, "blockConnection") && bson_iter_as_bool(&it)) ||
           (bson_iter_init_find(&it, data, "errorCode") && BSON_ITER_HOLDS_NUMBER(&it));
}

static bool
fc_filter(const bson_t *data, void *arg)
{
    fc_match_t *m = arg;
    bson_iter_t it;
    bool internal = m->op->conn != NULL && m->op->conn->internal;

    if (!has_action(data, m->after_run)) {
        return false;
    }
    if (bson_iter_init_find(&it, data, "threadName") && BSON_ITER_HOLDS_UTF8(&it)) {
        char name[32] = "";
        if (m->op->conn != NULL) {
            snprintf(name, sizeof(name), "conn%lld", (long long)m->op->conn->id);
        }
        if (strcmp(name, bson_iter_utf8(&it, NULL)) != 0) {
            return false;
        }
    }
    if (bson_iter_init_find(&it, data, "appName") && BSON_ITER_HOLDS_UTF8(&it)) {
        const char *app = m->op->conn != NULL ? m->op->conn->app_name : "";
        if (strcmp(app, bson_iter_utf8(&it, NULL)) != 0) {
            return false;
        }
    }
    if (bson_iter_init_find(&it, data, "namespace") && BSON_ITER_HOLDS_UTF8(&it)) {
        char ns[256];
        command_ns(m->op, ns, sizeof(ns));
        if (strcmp(ns, bson_iter_utf8(&it, NULL)) != 0) {
            return false;
        }
    }
    if (internal &&
        !(bson_iter_init_find(&it, data, "failInternalCommands") && bson_iter_as_bool(&it))) {
        return false;
    }
    return bson_has_field(data, "failAllCommands") || fails_command(data, m->cmd);
}

static bool
sub_doc(const bson_t *data, const char *field, bson_t *out, bool array)
{
    bson_iter_t it;
    const uint8_t *buf;
    uint32_t len;
    bson_t view;

    if (!bson_iter_init_find(&it, data, field)) {
        return false;
    }
    if (array && BSON_ITER_HOLDS_ARRAY(&it)) {
        bson_iter_array(&it, &len, &buf);
    } else if (!array && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_document(&it, &len, &buf);
    } else {
        return false;
    }
    if (!bson_init_static(&view, buf, len)) {
        return false;
    }
    bson_copy_to(&view, out);
    return true;
}

/*
 * The evaluation both checks share: *act cleared, then whether failCommand fires for this
 * command in the given phase ('wce_phase': after the run, for writeConcernError); on true
 * 'data' holds the fail point's data (destroy it), and act->fire is set.
 */
static bool
fc_fires(shl_op_ctx_t *op, const shl_command_t *cmd, bool wce_phase, shl_fail_command_action_t *act,
         bson_t *data)
{
    fc_match_t m = {op, cmd, wce_phase};

    memset(act, 0, sizeof(*act));
    if (!atomic_load_explicit(&SHL_FAILPOINT(failCommand)->active, memory_order_relaxed)) {
        return false;
    }
    if (!shl_failpoint_evaluate(SHL_FAILPOINT(failCommand), fc_filter, &m, data)) {
        bson_destroy(data);
        return false;
    }
    act->fire = true;
    return true;
}

void
shl_fail_command_check_wce(shl_op_ctx_t *op, const shl_command_t *cmd,
                           shl_fail_command_action_t *act)
{
    bson_t data;
    bson_iter_t it;

    if (!fc_fires(op, cmd, true, act, &data)) {
        return;
    }
    if (bson_iter_init_find(&it, &data, "allowRewriteStateChange")) {
        act->allow_rewrite_state_change = bson_iter_as_bool(&it);
    }
    act->has_labels = sub_doc(&data, "errorLabels", &act->labels, true);
    act->has_wce = sub_doc(&data, "writeConcernError", &act->write_concern_error, false);
    bson_destroy(&data);
}

void
shl_fail_command_check(shl_op_ctx_t *op, const shl_command_t *cmd, shl_fail_command_action_t *act)
{
    bson_t data;
    bson_iter_t it;

    if (!fc_fires(op, cmd, false, act, &data)) {
        return;
    }
    if (bson_iter_init_find(&it, &data, "closeConnection")) {
        act->close_connection = bson_iter_as_bool(&it);
    }
    if (bson_iter_init_find(&it, &data, "blockConnection") && bson_iter_as_bool(&it)) {
        act->block = true;
        if (!bson_iter_init_find(&it, &data, "blockTimeMS") || !BSON_ITER_HOLDS_NUMBER(&it)) {
            act->block_error = SHL_CODE_INVALID_OPTIONS;
            act->block_errmsg = "must specify 'blockTimeMS' when 'blockConnection' is true";
        } else if (bson_iter_as_int64(&it) < 0) {
            act->block_error = SHL_CODE_INVALID_OPTIONS;
            act->block_errmsg = "'blockTimeMS' must be non-negative";
        } else {
            act->block_ms = bson_iter_as_int64(&it);
        }
    }
    if (bson_iter_init_find(&it, &data, "errorCode") && BSON_ITER_HOLDS_NUMBER(&it)) {
        act->error_code = (int)bson_iter_as_int64(&it);
    }
    if (bson_iter_init_find(&it, &data, "allowRewriteStateChange")) {
        act->allow_rewrite_state_change = bson_iter_as_bool(&it);
    }
    act->has_extra_info = sub_doc(&data, "errorExtraInfo", &act->extra_info, false);
    act->has_labels = sub_doc(&data, "errorLabels", &act->labels, true);
    bson_destroy(&data);
}

void
shl_fail_command_action_cleanup(shl_fail_command_action_t *act)
{
    if (act->has_labels) {
        bson_destroy(&act->labels);
    }
    if (act->has_wce) {
        bson_destroy(&act->write_concern_error);
    }
    if (act->has_extra_info) {
        bson_destroy(&act->extra_info);
    }
    act->has_labels = act->has_wce = act->has_extra_info = false;
}

static int
cmd_configure_fail_point(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, mode;
    shl_failpoint_t *fp;
    bson_t data;
    bool has_data;
    int64_t count = 0;

    (void)op;
    if (!bson_iter_init_find(&it, cmd, "configureFailPoint") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "configureFailPoint must be a string");
    }
    fp = shl_failpoint_find(bson_iter_utf8(&it, NULL));
    if (fp == NULL) {
        SHL_FAIL(st, SHL_CODE_FAIL_POINT_SET_FAILED, "Cannot find failpoint: %s",
                 bson_iter_utf8(&it, NULL));
    }
    if (!bson_iter_init_find(&mode, cmd, "mode")) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'configureFailPoint.mode' is missing but a required field");
    }
    bson_init(&data);
    has_data = sub_doc(cmd, "data", &data, false);
    if (!has_data && bson_iter_init_find(&it, cmd, "data")) {
        bson_destroy(&data);
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "'data' must be an object");
    }
    ret = shl_failpoint_configure(fp, &mode, has_data ? &data : NULL, &count, st);
    bson_destroy(&data);
    if (ret == 0) {
        BSON_APPEND_INT64(reply, "count", count);
    }
done:
    return ret;
}

static const shl_command_t configure_fail_point = {
    .name = "configureFailPoint",
    .run = cmd_configure_fail_point,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_TEST_ONLY | SHL_CMD_NO_FAILCOMMAND,
    .help = "enable or disable a fail point (test only)",
};

void
shl_failpoint_commands_register(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &configure_fail_point);
}
