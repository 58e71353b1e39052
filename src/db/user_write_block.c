/*
 * user_write_block.c -- user write blocking on a data node (seeds/000 "User Write Blocking",
 * docs/design/user_write_blocking.md): the node's GlobalUserWriteBlockState (one flag in
 * db_node_t), its durable copy in config.user_writes_critical_sections, the one check every
 * write and DDL command passes through (shl_db_sharding_check calls db_uwb_check), and the
 * setUserWriteBlockMode / _shardsvrSetUserWriteBlockMode commands.
 */
#include <string.h>

#include "bson/bson_util.h"
#include "db/db_private.h"
#include "db/storage_api.h"
#include "storage/stored_doc.h"
#include "base/options.h"
#include "net/command_args.h"

#define UWB_NS "config.user_writes_critical_sections"

static bool
is_internal_db(const char *ns)
{
    size_t n = strcspn(ns, ".");
    return (n == 5 && strncmp(ns, "admin", 5) == 0) || (n == 6 && strncmp(ns, "config", 6) == 0) ||
           (n == 5 && strncmp(ns, "local", 5) == 0);
}

int
db_uwb_check(shl_op_ctx_t *op, const char *ns, shl_status_t *st)
{
    db_node_t *node = db_node(op);

    if (node == NULL || !atomic_load(&node->uwb_blocked) || is_internal_db(ns) ||
        shl_op_may_bypass_write_blocking(op)) {
        return 0;
    }
    return shl_status_set(st, SHL_CODE_USER_WRITES_BLOCKED, "User writes blocked");
}

/* ---------------------------------------------------------------- persistence */

/* The state document: {_id: "", blockNewUserShardedDDL, blockUserWrites}. */
int
db_uwb_load(db_node_t *node, shl_status_t *st)
{
    int ret = 0;
    bson_t doc;
    bool found = false;
    bson_iter_t it;

    SHL_ERR(shl_stored_doc_load(node->eng, UWB_NS, "", &doc, &found, st));
    if (found && bson_iter_init_find(&it, &doc, "blockUserWrites")) {
        atomic_store(&node->uwb_blocked, bson_iter_as_bool(&it));
    }
done:
    bson_destroy(&doc);
    return ret;
}

/* Persist the state document durably, then set the flag. */
static int
uwb_store(db_node_t *node, bool block, shl_status_t *st)
{
    int ret = 0;
    bson_t doc = BSON_INITIALIZER;

    BSON_APPEND_UTF8(&doc, "_id", "");
    BSON_APPEND_BOOL(&doc, "blockNewUserShardedDDL", block);
    BSON_APPEND_BOOL(&doc, "blockUserWrites", block);
    SHL_ERR(shl_stored_doc_store(node->eng, UWB_NS, &doc, st));
    atomic_store(&node->uwb_blocked, block);
done:
    bson_destroy(&doc);
    return ret;
}

/* ---------------------------------------------------------------- commands */

static const char *const uwb_fields[] = {"global", "phase", NULL};

int
db_uwb_parse_global(const bson_t *cmd, const char *cmd_name, bool *global, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    if (!bson_iter_init_find(&it, cmd, "global")) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '%s.global' is missing but a required field", cmd_name);
    }
    if (!BSON_ITER_HOLDS_BOOL(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '%s.global' is the wrong type '%s', expected type 'bool'", cmd_name,
                 shl_bson_type_name(bson_iter_type(&it)));
    }
    *global = bson_iter_bool(&it);
done:
    return ret;
}

/* _shardsvrSetUserWriteBlockMode (the config server's, to each shard and itself). */
static int
cmd_shardsvr_set_user_write_block_mode(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply,
                                       shl_status_t *st)
{
    int ret = 0;
    bool global = false;
    bson_iter_t it;

    (void)reply;
    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, uwb_fields, st));
    SHL_ERR(db_uwb_parse_global(cmd, op->cmd_name, &global, st));
    if (db_node(op)->sharding.drain_ddl != NULL) {
        /* A shard's running DDL coordinators end before user writes are blocked, and none
         * starts (MongoDB's prepare phase, which the config server runs on every shard
         * first: the coordinators' catalog commits need the config server meanwhile). */
        SHL_ERR(db_node(op)->sharding.drain_ddl(db_node(op)->sharding.arg, op, global, st));
    }
    if (bson_iter_init_find(&it, cmd, "phase") && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), "prepare") == 0) {
        goto done;
    }
    SHL_ERR(uwb_store(db_node(op), global, st));
done:
    return ret;
}

void
db_uwb_append_status(const db_node_t *node, bson_t *out)
{
    bson_t repl;

    /* MongoDB reports it in the repl section, which only replica set members have:
     * 1 (kDisabled) or 2 (kEnabled). */
    if (node->repl_set) {
        BSON_APPEND_DOCUMENT_BEGIN(out, "repl", &repl);
        BSON_APPEND_INT32(&repl, "userWriteBlockMode", atomic_load(&node->uwb_blocked) ? 2 : 1);
        bson_append_document_end(out, &repl);
    }
}

/* setUserWriteBlockMode on a data node: replica sets outside a cluster only, as MongoDB (a
 * cluster runs it on the router; a standalone has no replication to carry it). */
static int
cmd_set_user_write_block_mode(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bool global;

    /* The request is parsed before the role is checked, as MongoDB's IDL does. */
    SHL_ERR(shl_cmd_check_fields(cmd, uwb_fields, st));
    SHL_ERR(db_uwb_parse_global(cmd, op->cmd_name, &global, st));
    if (shl_opt_bool(SHL_OPT_shardsvr) || shl_opt_bool(SHL_OPT_configsvr)) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "setUserWriteBlockMode cannot be run on shardsvrs nor configsvrs");
    }
    if (!db_node(op)->repl_set) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "setUserWriteBlockMode cannot be run on standalones");
    }
    ret = cmd_shardsvr_set_user_write_block_mode(op, cmd, reply, st);
done:
    return ret;
}

static const shl_command_t uwb_commands[] = {
    {"setUserWriteBlockMode",
     {NULL},
     cmd_set_user_write_block_mode,
     SHL_CMD_ADMIN_ONLY | SHL_CMD_NEEDS_PRIMARY,
     "block or allow user writes on this node"},
    {"_shardsvrSetUserWriteBlockMode",
     {NULL},
     cmd_shardsvr_set_user_write_block_mode,
     SHL_CMD_ADMIN_ONLY | SHL_CMD_NEEDS_PRIMARY | SHL_CMD_INTERNAL,
     "internal: the config server's setUserWriteBlockMode on one shard"},
};

void
db_register_uwb_commands(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(uwb_commands) / sizeof(uwb_commands[0]); i++) {
        shl_command_registry_add(reg, &uwb_commands[i]);
    }
}
