/*
 * shardsvr_range_deletion.c -- the commands over the range deleter (range_deleter.h):
 * cleanupOrphaned (MongoDB 7.0's: on a shard, wait until no range deletion task of the
 * collection remains) and the test-only _shardsvrTestRangeDeletion, which drives the task
 * functions the migration coordinator uses (persist, markReady, remove, waitOverlapping) so
 * tests can create tasks without a migration.
 */
#include <string.h>

#include "base/log.h"
#include "base/namespace.h"
#include "bson/bson_iter.h"
#include "net/command_args.h"
#include "shard/range_deleter.h"
#include "shard/shard_private.h"
#include "sharding/shard_key.h"
#include "storage/catalog.h"

/* ---------------------------------------------------------------- cleanupOrphaned */

static const char *const cleanup_fields[] = {"startingFromKey", NULL};

static int
cmd_cleanup_orphaned(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    bson_iter_t it;
    shl_ns_t ns;
    shard_identity_t id;
    shard_coll_meta_t *m = NULL;
    shl_coll_handle_t h = {0};
    bool locked = false, has_start = false;
    shl_uuid_t uuid;
    bson_t start;

    (void)reply;
    SHL_INVARIANT(s != NULL);
    SHL_ERR(shl_cmd_check_fields(cmd, cleanup_fields, st));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        /* MongoDB's FieldParser message (an errmsg-only reply there). */
        SHL_FAIL(st, SHL_CODE_UNKNOWN_ERROR,
                 "wrong type for 'cleanupOrphaned' field, expected string");
    }
    if (shl_ns_parse(&ns, bson_iter_utf8(&it, NULL), st) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid namespace: %s",
                 bson_iter_utf8(&it, NULL));
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "startingFromKey", &start, &has_start, st));
    if (!shard_get_identity(s, &id)) {
        SHL_FAIL(st, SHL_CODE_UNKNOWN_ERROR,
                 "server is not part of a sharded cluster or the sharding metadata is not yet "
                 "initialized.");
    }
    SHL_ERR(shard_meta_refresh(s, ns.full, &m, st));
    SHL_ERR(shl_storage_coll_acquire(op->svc->storage, ns.full, SHL_LOCK_SHARED, &h, st));
    locked = true;
    if (h.coll == NULL) {
        SHL_LOG_INFO(COMMAND, 4416000,
                     "cleanupOrphaned skipping waiting for orphaned data cleanup because "
                     "collection does not exist",
                     "namespace", BCON_UTF8(ns.full));
        goto done;
    }
    memcpy(uuid.bytes, h.coll->uuid, 16);
    shl_storage_coll_release(&h);
    locked = false;
    if (m->rt == NULL) {
        SHL_LOG_INFO(COMMAND, 4416001,
                     "cleanupOrphaned skipping waiting for orphaned data cleanup because "
                     "collection is not sharded",
                     "namespace", BCON_UTF8(ns.full));
        goto done;
    }
    if (has_start && !bson_empty(&start) &&
        !shl_shard_key_is_shard_key(shl_routing_table_key_pattern(m->rt), &start)) {
        SHL_FAIL(st, SHL_CODE_ORPHANED_RANGE_CLEAN_UP_FAILED,
                 "Could not cleanup orphaned data because start key does not match shard key "
                 "pattern");
    }
    SHL_ERR(shl_range_deletion_wait_overlapping(op, &uuid, NULL, NULL, -1, st));
done:
    if (locked) {
        shl_storage_coll_release(&h);
    }
    shard_meta_release(m);
    return ret;
}

/* ---------------------------------------------------------------- _shardsvrTestRangeDeletion */

static const char *const test_fields[] = {"task", "id", "collectionUuid", "min", "max", NULL};

static int
get_uuid(const bson_t *cmd, const char *field, shl_uuid_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    if (!bson_iter_init_find(&it, cmd, field)) {
        SHL_ERR(shl_idl_missing("_shardsvrTestRangeDeletion", field, st));
    }
    SHL_ERR(shl_idl_read_uuid(&it, "_shardsvrTestRangeDeletion", out, st));
done:
    return ret;
}

static int
cmd_test_range_deletion(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    const char *action;
    shl_range_task_t t;
    shl_uuid_t id;
    bson_t doc, min, max;
    bool found = false, has_min = false, has_max = false;

    (void)reply;
    memset(&t, 0, sizeof(t));
    SHL_ERR(shl_cmd_check_fields(cmd, test_fields, st));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "_shardsvrTestRangeDeletion takes \"persist\", \"markReady\", \"remove\" or "
                 "\"waitOverlapping\"");
    }
    action = bson_iter_utf8(&it, NULL);
    if (strcmp(action, "persist") == 0) {
        SHL_ERR(shl_cmd_get_doc(cmd, "task", &doc, &found, st));
        if (!found) {
            SHL_ERR(shl_idl_missing("_shardsvrTestRangeDeletion", "task", st));
        }
        SHL_ERR(shl_range_task_parse(&doc, &t, st));
        SHL_ERR(shl_range_deletion_persist(op, &t, st));
    } else if (strcmp(action, "markReady") == 0) {
        SHL_ERR(get_uuid(cmd, "id", &id, st));
        SHL_ERR(shl_range_deletion_mark_ready(op, &id, st));
    } else if (strcmp(action, "remove") == 0) {
        SHL_ERR(get_uuid(cmd, "id", &id, st));
        SHL_ERR(shl_range_deletion_remove(op, &id, st));
    } else if (strcmp(action, "waitOverlapping") == 0) {
        SHL_ERR(get_uuid(cmd, "collectionUuid", &id, st));
        SHL_ERR(shl_cmd_get_doc(cmd, "min", &min, &has_min, st));
        SHL_ERR(shl_cmd_get_doc(cmd, "max", &max, &has_max, st));
        if (!has_min || !has_max) {
            SHL_ERR(shl_idl_missing("_shardsvrTestRangeDeletion", has_min ? "max" : "min", st));
        }
        SHL_ERR(shl_range_deletion_wait_overlapping(op, &id, &min, &max, -1, st));
    } else {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "unknown _shardsvrTestRangeDeletion action '%s'", action);
    }
done:
    shl_range_task_cleanup(&t);
    return ret;
}

static const shl_command_t range_deletion_commands[] = {
    {.name = "cleanupOrphaned",
     .run = cmd_cleanup_orphaned,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_NEEDS_PRIMARY,
     .help = "wait until no range deletion task of a sharded collection remains on this shard"},
    {.name = "_shardsvrTestRangeDeletion",
     .run = cmd_test_range_deletion,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_TEST_ONLY | SHL_CMD_INTERNAL,
     .help = "test only: persist / markReady / remove a range deletion task, or wait for "
             "overlapping ones"},
};

void
shard_range_deleter_commands_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(range_deletion_commands) / sizeof(range_deletion_commands[0]);
         i++) {
        shl_command_registry_add(reg, &range_deletion_commands[i]);
    }
}
