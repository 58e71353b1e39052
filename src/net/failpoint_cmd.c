/*
 * failpoint_cmd.c -- the configureFailPoint command and MongoDB's failCommand fail
 * point as drivers' test suites use it: failCommands, errorCode, errorLabels,
 * closeConnection, blockConnection + blockTimeMS, writeConcernError, appName,
 * failInternalCommands, and the times/skip modes counting only matching commands.
 */
#include <string.h>

#include "base/failpoint.h"
#include "bson/bson_iter.h"
#include "net/common_commands.h"
#include "net/service.h"

SHL_FAILPOINT_DEFINE(failCommand)

typedef struct fc_match {
    shl_op_ctx_t *op;
    const char *cmd_name;
} fc_match_t;

static bool
array_has_string(const bson_t *data, const char *field, const char *s)
{
    bson_iter_t it, child;
    if (!bson_iter_init_find(&it, data, field) || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &child)) {
        return false;
    }
    while (shl_iter_next(&child)) {
        if (BSON_ITER_HOLDS_UTF8(&child) && strcmp(bson_iter_utf8(&child, NULL), s) == 0) {
            return true;
        }
    }
    return false;
}

static bool
fc_filter(const bson_t *data, void *arg)
{
    fc_match_t *m = arg;
    bson_iter_t it;
    bool internal = m->op->conn != NULL && m->op->conn->internal;

    if (!array_has_string(data, "failCommands", m->cmd_name)) {
        return false;
    }
    if (internal &&
        !(bson_iter_init_find(&it, data, "failInternalCommands") && bson_iter_as_bool(&it))) {
        return false;
    }
    if (bson_iter_init_find(&it, data, "appName") && BSON_ITER_HOLDS_UTF8(&it)) {
        const char *app = m->op->conn != NULL ? m->op->conn->app_name : "";
        if (strcmp(app, bson_iter_utf8(&it, NULL)) != 0) {
            return false;
        }
    }
    return true;
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

void
shl_fail_command_check(shl_op_ctx_t *op, const char *cmd_name, shl_fail_command_action_t *act)
{
    fc_match_t m = {op, cmd_name};
    bson_t data;
    bson_iter_t it;

    memset(act, 0, sizeof(*act));
    if (!atomic_load_explicit(&SHL_FAILPOINT(failCommand)->active, memory_order_relaxed)) {
        return;
    }
    if (!shl_failpoint_evaluate(SHL_FAILPOINT(failCommand), fc_filter, &m, &data)) {
        bson_destroy(&data);
        return;
    }
    act->fire = true;
    if (bson_iter_init_find(&it, &data, "closeConnection")) {
        act->close_connection = bson_iter_as_bool(&it);
    }
    if (bson_iter_init_find(&it, &data, "blockConnection") && bson_iter_as_bool(&it) &&
        bson_iter_init_find(&it, &data, "blockTimeMS") && BSON_ITER_HOLDS_NUMBER(&it)) {
        act->block_ms = bson_iter_as_int64(&it);
    }
    if (bson_iter_init_find(&it, &data, "errorCode") && BSON_ITER_HOLDS_NUMBER(&it)) {
        act->error_code = (int)bson_iter_as_int64(&it);
    }
    act->has_labels = sub_doc(&data, "errorLabels", &act->labels, true);
    act->has_wce = sub_doc(&data, "writeConcernError", &act->write_concern_error, false);
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
    act->has_labels = act->has_wce = false;
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
