/*
 * cmd_fsync.c -- fsync on a data node: a checkpoint of every table (the journal flushed, the
 * data written at the stable timestamp), which is what MongoDB's fsync does on WiredTiger.
 * fsync with lock: true is refused: a data node cannot hold writes back yet, and a backup
 * that believed it had would copy a changing data folder.
 */
#include <string.h>

#include "db/db_private.h"
#include "net/command_args.h"

static int
cmd_fsync(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_iter_t it;
    bool lock = false;
    int ret = 0;

    /* MongoDB reads lock's truth value, whatever its type. */
    if (bson_iter_init_find(&it, cmd, "lock")) {
        lock = bson_iter_as_bool(&it);
    }
    if (lock) {
        SHL_FAIL(st, SHL_CODE_COMMAND_NOT_SUPPORTED,
                 "fsync with lock: true is not supported: Shale cannot block writes for a "
                 "backup yet; stop the node (or use a filesystem snapshot) instead");
    }
    SHL_ERR(shl_storage_checkpoint(db_node(op)->eng, st));
    /* MongoDB's fixed value since MMAPv1 went away; kept for tools that read it. */
    BSON_APPEND_INT32(reply, "numFiles", 1);
done:
    return ret;
}

static int
cmd_fsync_unlock(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)op;
    (void)cmd;
    (void)reply;
    return shl_status_set(st, SHL_CODE_ILLEGAL_OPERATION, "fsyncUnlock called when not locked");
}

static const shl_command_t fsync_commands[] = {
    {"fsync", {NULL}, cmd_fsync, SHL_CMD_ADMIN_ONLY, "checkpoint every table to disk"},
    {"fsyncUnlock", {NULL}, cmd_fsync_unlock, SHL_CMD_ADMIN_ONLY, "(fsync lock is not supported)"},
};

void
db_register_fsync_commands(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(fsync_commands) / sizeof(fsync_commands[0]); i++) {
        shl_command_registry_add(reg, &fsync_commands[i]);
    }
}
