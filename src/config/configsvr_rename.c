/*
 * configsvr_rename.c -- _configsvrRenameCollectionMetadata (MongoDB 7.0's name): the catalog
 * commit of a sharded collection's rename, sent by the RenameCollectionCoordinator on the
 * database's primary shard (shard/ddl_rename_coordinator.c; docs/design/coordinators.md).
 * Under both namespaces' locks, config.collections moves to the new name with the same UUID,
 * a new epoch/timestamp and migrations allowed (config.chunks is keyed by UUID and stays),
 * config.tags follow. Idempotent: the entry under the new name with the source's UUID means
 * it is done.
 *
 * {_configsvrRenameCollectionMetadata: "<db>.<from>", to: "<db>.<to>", sourceUUID: UUID}
 */
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/namespace.h"
#include "bson/bson_iter.h"
#include "config/config_private.h"

/* One rename's commit. */
typedef struct rename_req {
    shl_ns_t from, to;
    shl_uuid_t uuid; /* the source's UUID */
} rename_req_t;

static void
lock_pair(const rename_req_t *r)
{
    bool from_first = strcmp(r->from.full, r->to.full) < 0;

    cfg_lock_ns(from_first ? r->from.full : r->to.full);
    cfg_lock_ns(from_first ? r->to.full : r->from.full);
}

static void
unlock_pair(const rename_req_t *r)
{
    cfg_unlock_ns(r->from.full);
    cfg_unlock_ns(r->to.full);
}

/* config.collections and config.tags under the new name: same UUID, a new generation
 * (MongoDB's rename bumps the epoch and timestamp). Idempotent. */
static int
commit_metadata(shl_op_ctx_t *op, const rename_req_t *r, shl_status_t *st)
{
    int ret = 0;
    shl_collection_type_t coll;
    bool found = false, batch_ok = false;
    bson_t *q = NULL, *u = NULL, details = BSON_INITIALIZER, cdoc;
    cfg_batch_t b;
    bson_value_t id;

    memset(&coll, 0, sizeof(coll));
    SHL_ERR(cfg_get_collection(r->to.full, &coll, &found, st));
    if (found && shl_uuid_eq(&coll.uuid, &r->uuid)) {
        goto done; /* committed before a crash */
    }
    if (found) {
        shl_collection_type_cleanup(&coll);
        memset(&coll, 0, sizeof(coll));
    }
    SHL_ERR(cfg_get_collection(r->from.full, &coll, &found, st));
    if (!found || !shl_uuid_eq(&coll.uuid, &r->uuid)) {
        SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                 "The sharded collection %s being renamed is no longer in config.collections",
                 r->from.full);
    }
    /* Zones first: a re-run finds them renamed already. */
    q = BCON_NEW("ns", BCON_UTF8(r->from.full));
    u = BCON_NEW("$set", "{", "ns", BCON_UTF8(r->to.full), "}");
    SHL_ERR(cfg_update("tags", q, u, false, true, NULL, st));

    bson_free(coll.ns);
    coll.ns = bson_strdup(r->to.full);
    /* The coordinator stopped the source's migrations; the renamed collection starts with
     * them allowed, as a new generation does in MongoDB. */
    coll.has_allow_migrations = false;
    coll.has_epoch = true;
    bson_oid_init(&coll.epoch, NULL);
    coll.timestamp = cfg_fresh_ts();
    coll.updated_at = shl_clock_wall_ms();
    shl_collection_type_to_bson(&coll, &cdoc);
    cfg_batch_init(&b);
    batch_ok = true;
    id.value_type = BSON_TYPE_UTF8;
    id.value.v_utf8.str = (char *)(uintptr_t)r->from.full;
    id.value.v_utf8.len = (uint32_t)strlen(r->from.full);
    cfg_batch_delete(&b, "collections", &id);
    cfg_batch_upsert(&b, "collections", &cdoc);
    bson_destroy(&cdoc);
    SHL_ERR(cfg_batch_commit(&b, st));
    BSON_APPEND_UTF8(&details, "from", r->from.full);
    BSON_APPEND_UTF8(&details, "to", r->to.full);
    shl_uuid_append(&details, "uuid", &r->uuid);
    cfg_changelog(op, "renameCollection.metadata", r->from.full, &details);
done:
    if (batch_ok) {
        cfg_batch_cleanup(&b);
    }
    if (q != NULL) {
        bson_destroy(q);
    }
    if (u != NULL) {
        bson_destroy(u);
    }
    shl_collection_type_cleanup(&coll);
    bson_destroy(&details);
    return ret;
}

static int
cmd_rename_metadata(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *from_s = NULL;
    rename_req_t r;
    bson_iter_t it;

    (void)reply;
    memset(&r, 0, sizeof(r));
    SHL_ERR(cfg_cmd_string(cmd, &from_s, st));
    SHL_ERR(shl_ns_parse(&r.from, from_s, st));
    if (!bson_iter_init_find(&it, cmd, "to") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "'to' must be of type string");
    }
    SHL_ERR(shl_ns_parse(&r.to, bson_iter_utf8(&it, NULL), st));
    if (!bson_iter_init_find(&it, cmd, "sourceUUID")) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '_configsvrRenameCollectionMetadata.sourceUUID' is missing but a "
                 "required field");
    }
    SHL_ERR(shl_idl_read_uuid(&it, "_configsvrRenameCollectionMetadata.sourceUUID", &r.uuid, st));
    lock_pair(&r);
    ret = commit_metadata(op, &r, st);
    unlock_pair(&r);
    if (ret == 0) {
        SHL_LOG_INFO(SHARDING, 4200140, "renamed collection metadata", "from",
                     BCON_UTF8(r.from.full), "to", BCON_UTF8(r.to.full));
    }
done:
    return ret;
}

static const shl_command_t rename_cmd = {
    .name = "_configsvrRenameCollectionMetadata",
    .run = cmd_rename_metadata,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "internal: commit a sharded collection's rename in the catalog",
};

void
cfg_register_rename_commands(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &rename_cmd);
}
