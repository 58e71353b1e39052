/*
 * shardsvr_rename_participant.c -- a shard's part in renaming a sharded collection
 * (docs/design/sharding-protocol.md "Renaming a sharded collection"; MongoDB 7.0's
 * RenameParticipantInstance, driven by the primary shard's RenameCollectionCoordinator,
 * ddl_rename_coordinator.c):
 *
 * {_shardsvrRenameCollectionParticipant: <coll>, to: "<db>.<coll>", dropTarget: bool,
 *  sourceUUID?: UUID, checkOnly?: bool} on the collection's database: blocks reads and writes
 * of both namespaces (the critical section a donor uses), then renames the local collection
 * if this shard holds it. Idempotent: a shard that already renamed (or never held the
 * collection) only blocks. With checkOnly it only checks that no migration of either
 * namespace runs here (ConflictingOperationInProgress), and blocks nothing.
 *
 * {_shardsvrRenameCollectionUnblockParticipant: <coll>, to: "<db>.<coll>"}: refreshes the
 * filtering metadata of both namespaces from the config server (the rename is committed
 * there by then), then leaves both critical sections; the waiting versioned requests then
 * get StaleConfig and their routers refresh.
 *
 * The sections are persisted in config.collection_critical_sections (journaled) while held,
 * and restored by shl_shard_init after a restart, as MongoDB does.
 */
#include <string.h>

#include "base/log.h"
#include "base/namespace.h"
#include "net/command_args.h"
#include "net/service.h"
#include "shard/shard_private.h"
#include "storage/catalog.h"
#include "storage/record_store.h"

/* The critical sections a participant holds survive a restart (MongoDB's
 * config.collection_critical_sections: {_id: ns, reason, blockReads}). */
#define CRIT_COLL "collection_critical_sections"
#define CRIT_NS "config." CRIT_COLL

/* The two namespaces of a participant command (both in op's database). */
static int
parse_names(shl_op_ctx_t *op, const bson_t *cmd, const char *name, shl_ns_t *from, shl_ns_t *to,
            shl_status_t *st)
{
    int ret = 0;
    const char *coll = NULL, *to_s = NULL;
    bool found = false;

    SHL_ERR(shl_cmd_collection_arg(cmd, &coll, st));
    SHL_ERR(shl_ns_make(from, op->db, coll, st));
    SHL_ERR(shl_cmd_get_string(cmd, "to", &to_s, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '%s.to' is missing but a required field", name);
    }
    SHL_ERR(shl_ns_parse(to, to_s, st));
    if (strcmp(from->db, to->db) != 0) {
        SHL_FAIL(st, SHL_CODE_COMMAND_FAILED,
                 "Source and destination collections must be on the same database.");
    }
done:
    return ret;
}

/* Persist (or, with !block, remove) the critical-section documents of both namespaces,
 * journaled. Idempotent. */
static int
persist_crit(shard_state_t *s, const shl_ns_t *from, const shl_ns_t *to, bool block,
             shl_status_t *st)
{
    const char *names[2] = {from->full, to->full};
    bson_t reason = BSON_INITIALIZER;
    int ret;

    BSON_APPEND_UTF8(&reason, "command", "rename");
    BSON_APPEND_UTF8(&reason, "from", from->full);
    BSON_APPEND_UTF8(&reason, "to", to->full);
    ret = shard_critical_section_persist(s, names, 2, &reason, block, st);
    bson_destroy(&reason);
    return ret;
}

int
shard_crit_sections_reload(shard_state_t *s, shl_status_t *st)
{
    int ret = 0;
    shl_coll_handle_t h = {0};
    shl_storage_txn_t *txn = NULL;
    shl_record_cursor_t *c = NULL;
    bool locked = false;

    SHL_ERR(shl_storage_coll_acquire(s->svc->storage, CRIT_NS, SHL_LOCK_SHARED, &h, st));
    locked = true;
    if (h.coll == NULL) {
        goto done;
    }
    SHL_ERR(shl_storage_txn_begin(s->svc->storage, NULL, &txn, st));
    SHL_ERR(shl_record_cursor_open(txn, h.coll, true, &c, st));
    for (;;) {
        bool eof = false;
        int64_t rid;
        bson_t view;
        bson_iter_t it;
        SHL_ERR(shl_record_cursor_next(c, &rid, &view, &eof, st));
        if (eof) {
            break;
        }
        if (bson_iter_init_find(&it, &view, "_id") && BSON_ITER_HOLDS_UTF8(&it)) {
            shard_crit_block(s, bson_iter_utf8(&it, NULL));
            SHL_LOG_INFO(SHARDING, 4630102, "critical section restored at start-up", "namespace",
                         BCON_UTF8(bson_iter_utf8(&it, NULL)));
        }
    }
done:
    shl_record_cursor_close(c);
    shl_storage_txn_abort(txn);
    if (locked) {
        shl_storage_coll_release(&h);
    }
    return ret;
}

/* config.rangeDeletions {nss: from[, collectionUuid]} -> nss: to. Idempotent. */
static int
rename_range_deletions(shard_state_t *s, const shl_ns_t *from, const shl_ns_t *to,
                       const uint8_t *uuid, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, updates, one, q, u, set;

    BSON_APPEND_UTF8(&cmd, "update", "rangeDeletions");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &updates);
    BSON_APPEND_DOCUMENT_BEGIN(&updates, "0", &one);
    BSON_APPEND_DOCUMENT_BEGIN(&one, "q", &q);
    BSON_APPEND_UTF8(&q, "nss", from->full);
    if (uuid != NULL) {
        bson_append_binary(&q, "collectionUuid", -1, BSON_SUBTYPE_UUID, uuid, 16);
    }
    bson_append_document_end(&one, &q);
    BSON_APPEND_DOCUMENT_BEGIN(&one, "u", &u);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
    BSON_APPEND_UTF8(&set, "nss", to->full);
    bson_append_document_end(&u, &set);
    bson_append_document_end(&one, &u);
    BSON_APPEND_BOOL(&one, "multi", true);
    bson_append_document_end(&updates, &one);
    bson_append_array_end(&cmd, &updates);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &u);
    BSON_APPEND_INT32(&u, "w", 1);
    BSON_APPEND_BOOL(&u, "j", true);
    bson_append_document_end(&cmd, &u);
    SHL_ERR(shl_remote_run_self(&s->remote, "config", &cmd, NULL, &reply, st));
    shard_range_deleter_wake(s);
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

static int
cmd_rename_participant(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    shl_ns_t from, to;
    bool drop_target = false, check_only = false, has_uuid = false, from_blocked = false;
    bool to_blocked = false;
    uint8_t uuid[16];
    bson_iter_t it;
    shl_collection_t *existing = NULL;
    bson_t rcmd = BSON_INITIALIZER, rreply = BSON_INITIALIZER;

    (void)reply;
    if (s == NULL) {
        SHL_FAIL(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED, "This is not a shard");
    }
    SHL_ERR(parse_names(op, cmd, "_shardsvrRenameCollectionParticipant", &from, &to, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "dropTarget", &drop_target, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "checkOnly", &check_only, st));
    if (bson_iter_init_find(&it, cmd, "sourceUUID") && BSON_ITER_HOLDS_BINARY(&it)) {
        bson_subtype_t sub;
        uint32_t len;
        const uint8_t *data;
        bson_iter_binary(&it, &sub, &len, &data);
        if (sub != BSON_SUBTYPE_UUID || len != 16) {
            SHL_FAIL(st, SHL_CODE_INVALID_UUID, "sourceUUID must be a UUID");
        }
        memcpy(uuid, data, 16);
        has_uuid = true;
    }
    /* A migration of the collection holds its own critical section. The coordinator's check
     * refuses the rename while one runs; once the rename started (migrations stopped), the
     * participant waits for one that was still finishing. */
    if (check_only) {
        if (shard_migration_active_on(s, from.full) || shard_migration_active_on(s, to.full)) {
            SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                     "Cannot rename %s while a chunk migration of it is in progress", from.full);
        }
        goto done;
    }
    SHL_ERR(shard_wait_migrations(s, op, from.full, st));
    SHL_ERR(shard_wait_migrations(s, op, to.full, st));
    SHL_ERR(shard_crit_enter(s, op, from.full, SHARD_CRIT_ALL, st));
    from_blocked = true;
    SHL_ERR(shard_crit_enter(s, op, to.full, SHARD_CRIT_ALL, st));
    to_blocked = true;
    SHL_ERR(persist_crit(s, &from, &to, true, st));

    existing = shl_catalog_get(op->svc->storage, from.full);
    if (existing != NULL) {
        if (has_uuid && memcmp(existing->uuid, uuid, 16) != 0) {
            SHL_FAIL(st, SHL_CODE_COLLECTION_UUID_MISMATCH,
                     "Collection %s on this shard has another UUID than the one being renamed",
                     from.full);
        }
        BSON_APPEND_UTF8(&rcmd, "renameCollection", from.full);
        BSON_APPEND_UTF8(&rcmd, "to", to.full);
        BSON_APPEND_BOOL(&rcmd, "dropTarget", drop_target);
        SHL_ERR(shl_remote_run_self(&s->remote, "admin", &rcmd, NULL, &rreply, st));
        SHL_LOG_INFO(SHARDING, 4630101, "renamed the local collection", "from",
                     BCON_UTF8(from.full), "to", BCON_UTF8(to.full));
    }
    /* The range deletion tasks of the collection follow it (MongoDB's participant moves
     * them too), so the orphans it holds are still cleaned under the new name. */
    SHL_ERR(rename_range_deletions(s, &from, &to, has_uuid ? uuid : NULL, st));
    /* Both sections stay held until the unblock command. */
    from_blocked = false;
    to_blocked = false;
done:
    if (ret != 0 && to_blocked) {
        shard_crit_exit(s, to.full);
    }
    if (ret != 0 && from_blocked) {
        shard_crit_exit(s, from.full);
    }
    if (existing != NULL) {
        shl_collection_release(existing);
    }
    bson_destroy(&rcmd);
    bson_destroy(&rreply);
    return ret;
}

static int
cmd_rename_unblock(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    shl_ns_t from, to;
    shard_coll_meta_t *m = NULL;

    (void)reply;
    if (s == NULL) {
        SHL_FAIL(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED, "This is not a shard");
    }
    SHL_ERR(parse_names(op, cmd, "_shardsvrRenameCollectionUnblockParticipant", &from, &to, st));
    /* Refresh first: the operations waiting in the sections must see the renamed metadata
     * (old name unsharded, new name sharded) when they check their versions again. */
    SHL_ERR(shard_meta_refresh(s, from.full, &m, st));
    shard_meta_release(m);
    m = NULL;
    SHL_ERR(shard_meta_refresh(s, to.full, &m, st));
    shard_meta_release(m);
    m = NULL;
    SHL_ERR(persist_crit(s, &from, &to, false, st));
    shard_crit_exit(s, from.full);
    shard_crit_exit(s, to.full);
done:
    return ret;
}

static const shl_command_t k_rename_participant = {
    .name = "_shardsvrRenameCollectionParticipant",
    .run = cmd_rename_participant,
    .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
    .help = "internal: block a collection being renamed and rename the local copy"};

static const shl_command_t k_rename_unblock = {
    .name = "_shardsvrRenameCollectionUnblockParticipant",
    .run = cmd_rename_unblock,
    .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
    .help = "internal: refresh and unblock both namespaces of a committed rename"};

void
shard_rename_participant_register(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &k_rename_participant);
    shl_command_registry_add(reg, &k_rename_unblock);
}
