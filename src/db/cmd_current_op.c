/*
 * cmd_current_op.c -- currentOp and killOp on a data node: the operations in progress are
 * the ones the dispatcher registered (net/op_context.h shl_op_register); killOp sets an
 * operation's kill flag, which its blocking waits and scans check (shl_op_check_interrupt).
 * Idle connections, cursors and sessions are not listed ($all lists active operations only).
 */
#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/db_private.h"
#include "db/txn_participant.h"
#include "net/command_args.h"
#include "query/pipeline.h"

/* {currentOp: 1, $all?, $ownOps?, <filter>...} -> {inprog: [...]}. */
static int
cmd_current_op(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_t all = BSON_INITIALIZER, stages = BSON_INITIALIZER, inprog;
    uint32_t n = 0, k = 0;
    bool flag = false;
    int ret = 0;

    SHL_ERR(shl_cmd_get_bool(cmd, "$all", &flag, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "$ownOps", &flag, st));
    shl_op_list_append(op->svc, &all, &n);
    /* Inactive transactions, as MongoDB's idleSessions (on by default). */
    db_txn_append_current_op(db_node(op)->txns, &all, &n);
    shl_current_op_append_match(cmd, "0", &stages);
    BSON_APPEND_ARRAY_BEGIN(reply, "inprog", &inprog);
    ret = shl_pipeline_run_array(&all, &stages, &inprog, &k, st);
    bson_append_array_end(reply, &inprog);
    SHL_ERR(ret);
done:
    bson_destroy(&all);
    bson_destroy(&stages);
    return ret;
}

int
db_pipeline_current_op(const bson_t *pipeline)
{
    bson_iter_t it, inner;
    int where = 0, i = 0;

    if (!bson_iter_init(&it, pipeline)) {
        return 0;
    }
    while (where == 0 && shl_iter_next(&it)) {
        i++;
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &inner) &&
            shl_iter_next(&inner) && strcmp(shl_iter_key(&inner), "$currentOp") == 0) {
            where = i == 1 ? 1 : 2;
        }
    }
    return where;
}

int
db_current_op_aggregate(shl_op_ctx_t *op, const bson_t *cmd, const bson_t *pipeline, bson_t *reply,
                        shl_status_t *st)
{
    bson_t all = BSON_INITIALIZER, rest = BSON_INITIALIZER, out = BSON_INITIALIZER;
    bson_t stage_doc = BSON_INITIALIZER;
    bson_iter_t it, stage;
    shl_current_op_spec_t spec;
    uint32_t n = 0, k = 0, r = 0;
    int ret = 0;

    /* MongoDB's order: the namespace (aggregate: 1 on admin), the stage's options, then the
     * stages after it. */
    if (strcmp(op->db, "admin") != 0 || !bson_iter_init(&it, cmd) || !shl_iter_next(&it) ||
        !BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_double(&it) != 1.0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE,
                 "$currentOp must be run against the 'admin' database with {aggregate: 1}");
    }
    bson_iter_init(&it, pipeline);
    shl_iter_next(&it);
    bson_iter_recurse(&it, &stage);
    shl_iter_next(&stage);
    SHL_ERR(shl_current_op_spec_parse(&stage, false, &spec, st));
    if (BSON_ITER_HOLDS_DOCUMENT(&stage)) {
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&stage, &len, &data);
        bson_init_static(&stage_doc, data, len);
    }
    while (shl_iter_next(&it)) {
        char key[16];
        const char *kp;
        bson_iter_t inner;
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &inner) &&
            shl_iter_next(&inner) && strcmp(shl_iter_key(&inner), "$currentOp") == 0) {
            SHL_FAIL(st, 40602, "$currentOp is only valid as the first stage in a pipeline");
        }
        bson_uint32_to_string(r++, &kp, key, sizeof(key));
        bson_append_value(&rest, kp, -1, bson_iter_value(&it));
    }
    /* The same documents as the currentOp command's inprog (this aggregate among them). */
    shl_op_list_append(op->svc, &all, &n);
    if (spec.idle_sessions || !bson_has_field(&stage_doc, "idleSessions")) {
        db_txn_append_current_op(db_node(op)->txns, &all, &n);
    }
    SHL_ERR(shl_pipeline_run_array(&all, &rest, &out, &k, st));
    /* One batch, as the router answers it: a node's operations fit a reply. */
    shl_cursor_reply(reply, "admin.$cmd.aggregate", 0, true, &out);
done:
    bson_destroy(&all);
    bson_destroy(&rest);
    bson_destroy(&out);
    return ret;
}

/*
 * {killOp: 1, op: <opid>}: sets the operation's kill flag. As MongoDB's, it succeeds
 * whether or not the operation still runs. Errors: NoSuchKey without op, TypeMismatch for
 * a non-number, 26823 outside 32 bits.
 */
static int
cmd_kill_op(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_iter_t it;
    int64_t id;
    int ret = 0;

    if (!bson_iter_init_find(&it, cmd, "op")) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "Missing expected field \"op\"");
    }
    if (!BSON_ITER_HOLDS_NUMBER(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "\"op\" had the wrong type. Expected number, found %s",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    id = bson_iter_as_int64(&it);
    if (id < INT32_MIN || id > INT32_MAX) {
        SHL_FAIL(st, 26823, "invalid op : %lld. Op ID cannot be represented with 32 bits",
                 (long long)id);
    }
    (void)shl_op_kill(op->svc, id);
    BSON_APPEND_UTF8(reply, "info", "attempting to kill op");
done:
    return ret;
}

static const shl_command_t current_op_commands[] = {
    {"currentOp", {NULL}, cmd_current_op, SHL_CMD_ADMIN_ONLY, "operations in progress"},
    {"killOp", {NULL}, cmd_kill_op, SHL_CMD_ADMIN_ONLY, "interrupt an operation by opid"},
};

void
db_register_current_op_commands(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(current_op_commands) / sizeof(current_op_commands[0]); i++) {
        shl_command_registry_add(reg, &current_op_commands[i]);
    }
}
