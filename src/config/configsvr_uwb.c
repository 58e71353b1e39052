/*
 * configsvr_uwb.c -- _configsvrSetUserWriteBlockMode: the config server's side of
 * setUserWriteBlockMode (seeds/000 "User Write Blocking", docs/design/user_write_blocking.md).
 * The config server records the mode on its own node (config.user_writes_critical_sections,
 * durable), drains the user DDL it coordinates (cfg_user_ddl_drain_begin) and, with no DDL
 * running, sets the mode on every shard of config.shards with _shardsvrSetUserWriteBlockMode;
 * repeating the command is harmless, so a failed round is retried by running it again.
 */
#include "bson/bson_util.h"
#include "config/config_private.h"

static int
cmd_set_user_write_block_mode(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool global;
    shl_shard_type_t *shards = NULL;
    size_t n = 0;
    bson_t fwd = BSON_INITIALIZER, r = BSON_INITIALIZER;

    (void)op;
    (void)reply;
    if (!bson_iter_init_find(&it, cmd, "global")) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field "
                 "'_configsvrSetUserWriteBlockMode.global' is missing but a required field");
    }
    if (!BSON_ITER_HOLDS_BOOL(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '_configsvrSetUserWriteBlockMode.global' is the wrong type '%s', "
                 "expected type 'bool'",
                 shl_bson_type_name(bson_iter_type(&it)));
    }
    global = bson_iter_bool(&it);
    BSON_APPEND_INT32(&fwd, "_shardsvrSetUserWriteBlockMode", 1);
    BSON_APPEND_BOOL(&fwd, "global", global);
    bson_destroy(&r);
    SHL_ERR(shl_remote_run_self(&cfg_get()->remote, "admin", &fwd, NULL, &r, st));
    SHL_ERR(cfg_get_shards(&shards, &n, st));
    if (global) {
        /* Phase 1 on the shards: the DDL coordinators running on them drain and none starts
         * ({phase: "prepare"}); not under the gate, as they commit here meanwhile. */
        bson_t prep = BSON_INITIALIZER;
        BSON_APPEND_INT32(&prep, "_shardsvrSetUserWriteBlockMode", 1);
        BSON_APPEND_BOOL(&prep, "global", true);
        BSON_APPEND_UTF8(&prep, "phase", "prepare");
        for (size_t i = 0; i < n && ret == 0; i++) {
            bson_destroy(&r);
            ret = shl_remote_run_shard(&cfg_get()->remote, shards[i].name, "admin", &prep, &cfg_remote_opts, &r, st);
        }
        bson_destroy(&prep);
        SHL_ERR(ret);
    }
    /* Phase 1 here: running user DDL drains, none starts; phase 2: every shard blocks. */
    cfg_user_ddl_drain_begin();
    for (size_t i = 0; i < n && ret == 0; i++) {
        bson_destroy(&r);
        ret = shl_remote_run_shard(&cfg_get()->remote, shards[i].name, "admin", &fwd, &cfg_remote_opts, &r, st);
    }
    cfg_user_ddl_drain_end();
done:
    cfg_shards_free(shards, n);
    bson_destroy(&fwd);
    bson_destroy(&r);
    return ret;
}

static const shl_command_t uwb_cmd = {
    .name = "_configsvrSetUserWriteBlockMode",
    .run = cmd_set_user_write_block_mode,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "set user write blocking on the config server and every shard",
};

void
cfg_register_uwb_commands(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &uwb_cmd);
}

int
cfg_uwb_sync_new_shard(const char *host, shl_status_t *st)
{
    int ret = 0;
    bson_t q = BSON_INITIALIZER, doc, cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    bool found = false, block = false;
    bson_iter_t it;
    shl_remote_target_t t = shl_remote_target_host(host);

    BSON_APPEND_UTF8(&q, "_id", "");
    SHL_ERR(cfg_find_one("user_writes_critical_sections", &q, &doc, &found, st));
    if (found && bson_iter_init_find(&it, &doc, "blockUserWrites")) {
        block = bson_iter_as_bool(&it);
    }
    BSON_APPEND_INT32(&cmd, "_shardsvrSetUserWriteBlockMode", 1);
    BSON_APPEND_BOOL(&cmd, "global", block);
    bson_destroy(&reply);
    SHL_ERR(shl_remote_run(&cfg_get()->remote, &t, "admin", &cmd, &cfg_remote_opts, &reply, st));
done:
    bson_destroy(&doc);
    bson_destroy(&q);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}
