/*
 * sharding_events.c -- sharding DDL told to change streams: a coordinator that sharded or
 * refined a collection sends its own shard _shardsvrNotifyShardingEvent, which writes
 * MongoDB's no-op oplog entry {op: "n", ns, ui, o: {msg: {<event>: ns}}, o2: {<event>: ns,
 * <description>}}; a stream with showExpandedEvents reports it as a shardCollection or
 * refineCollectionShardKey event whose operationDescription is o2 without its first field
 * (db/change_stream.c). docs/design/change_streams.md "Expanded events".
 */
#include <string.h>

#include "base/namespace.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/command_args.h"
#include "shard/ddl_coordinators.h"
#include "shard/shard_private.h"
#include "storage/storage.h"
#include "storage/write.h"

/* What one notification writes. */
typedef struct event_entry {
    const char *event; /* "shardCollection" or "refineCollectionShardKey" */
    const char *ns;
    const uint8_t *uuid; /* NULL: none */
    bson_t details;      /* view: the description's fields */
} event_entry_t;

static int
write_event_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    const event_entry_t *e = arg;
    bson_t o = BSON_INITIALIZER, o2 = BSON_INITIALIZER, msg;
    int ret;

    BSON_APPEND_DOCUMENT_BEGIN(&o, "msg", &msg);
    BSON_APPEND_UTF8(&msg, e->event, e->ns);
    bson_append_document_end(&o, &msg);
    BSON_APPEND_UTF8(&o2, e->event, e->ns);
    bson_concat(&o2, &e->details);
    ret = shl_oplog_append(txn, 'n', e->ns, e->uuid, &o, &o2, NULL, NULL, st);
    bson_destroy(&o);
    bson_destroy(&o2);
    return ret;
}

/* _shardsvrNotifyShardingEvent: <1>, eventType: "collectionSharded" |
 * "collectionKeyRefined", details: {ns, uuid?, description: {...}}. */
static int
cmd_notify_sharding_event(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    event_entry_t e;
    bson_t details, desc;
    bson_iter_t it;
    const char *type = NULL;
    const uint8_t *bin = NULL;
    uint32_t len = 0;
    bson_subtype_t sub;
    bool found = false;
    int ret = 0;

    (void)reply;
    memset(&e, 0, sizeof(e));
    SHL_ERR(shl_cmd_get_string(cmd, "eventType", &type, &found, st));
    if (!found || (strcmp(type, "collectionSharded") != 0 &&
                   strcmp(type, "collectionKeyRefined") != 0)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "_shardsvrNotifyShardingEvent: unknown eventType '%s'",
                 found ? type : "");
    }
    e.event = strcmp(type, "collectionSharded") == 0 ? "shardCollection"
                                                      : "refineCollectionShardKey";
    if (!shl_bson_get_subdoc(cmd, "details", &details) ||
        !bson_iter_init_find(&it, &details, "ns") || !BSON_ITER_HOLDS_UTF8(&it) ||
        !shl_bson_get_subdoc(&details, "description", &desc)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "_shardsvrNotifyShardingEvent: details needs ns and description");
    }
    e.ns = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, &details, "uuid") && BSON_ITER_HOLDS_BINARY(&it)) {
        bson_iter_binary(&it, &sub, &len, &bin);
        e.uuid = len == 16 ? bin : NULL;
    }
    e.details = desc;
    SHL_ERR(shl_storage_write_retry(op->svc->storage, write_event_fn, &e, NULL, st));
done:
    return ret;
}

static const shl_command_t notify_cmd = {
    .name = "_shardsvrNotifyShardingEvent",
    .run = cmd_notify_sharding_event,
    .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
    .help = "internal: record a sharding DDL event (shardCollection, refineCollectionShardKey) "
            "for change streams"};

void
shard_sharding_events_register(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &notify_cmd);
}

int
shard_ddl_notify_event(shl_coord_t *c, const char *type, const char *ns, const bson_t *entry,
                       const bson_t *desc, shl_status_t *st)
{
    shl_remote_target_t self = shl_remote_target_self();
    bson_t cmd = BSON_INITIALIZER, details, reply = BSON_INITIALIZER;
    bson_iter_t it;
    int ret;

    BSON_APPEND_INT32(&cmd, "_shardsvrNotifyShardingEvent", 1);
    BSON_APPEND_UTF8(&cmd, "eventType", type);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "details", &details);
    BSON_APPEND_UTF8(&details, "ns", ns);
    if (entry != NULL && bson_iter_init_find(&it, entry, "uuid")) {
        bson_append_iter(&details, "uuid", -1, &it);
    }
    BSON_APPEND_DOCUMENT(&details, "description", desc);
    bson_append_document_end(&cmd, &details);
    bson_destroy(&reply);
    ret = shl_remote_run(shl_coord_remote(c), &self, "admin", &cmd, &shard_ddl_opts, &reply, st);
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return ret;
}
