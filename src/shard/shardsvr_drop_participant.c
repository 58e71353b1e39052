/*
 * shardsvr_drop_participant.c -- a shard's part in the drop coordinators
 * (ddl_coordinators.h; MongoDB 7.0's participant commands):
 *
 * {_shardsvrParticipantBlock: <coll>, blockType: "ReadsAndWrites" | "Unblock", reason} on the
 *   collection's database: ReadsAndWrites waits until no migration of the collection runs
 *   here (the coordinator stopped new ones), then blocks versioned reads and writes (the
 *   critical section a migration donor uses), persisted in config.collection_critical_sections
 *   so a restart keeps it. Unblock refreshes the filtering metadata from the config server,
 *   then leaves the section (the waiting requests then see the new metadata). Idempotent.
 * {_shardsvrDropCollectionParticipant: <coll>, collectionUUID?}: drops the local collection
 *   (missing: fine) and its range deletion tasks; with collectionUUID, a local collection
 *   with another UUID (recreated or renamed over since) is left alone.
 * {_shardsvrDropDatabaseParticipant: 1}: waits for the database's migrations here to end,
 *   then drops the local database (missing: fine) and its range deletion tasks.
 */
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/namespace.h"
#include "net/command_args.h"
#include "net/service.h"
#include "shard/shard_private.h"
#include "storage/catalog.h"

#define CRIT_COLL "collection_critical_sections"
/* A migration still running after this long keeps the participant from blocking; the
 * coordinator sends the command again (LockBusy is retryable). */
#define MIGRATION_WAIT_MS 30000

static void
sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

    while (ms > 0 && nanosleep(&ts, &ts) != 0) {
    }
}

int
shard_wait_migrations(shard_state_t *s, shl_op_ctx_t *op, const char *ns, shl_status_t *st)
{
    int ret = 0;

    for (int64_t waited = 0; ret == 0 && shard_migration_active_on(s, ns); waited += 50) {
        if ((ret = shl_op_check_interrupt(op, st)) != 0) {
            break;
        }
        if (waited >= MIGRATION_WAIT_MS) {
            ret = shl_status_set(st, SHL_CODE_LOCK_BUSY, "a chunk migration of %s is still running",
                                 ns);
            break;
        }
        sleep_ms(50);
    }
    return ret;
}

int
shard_critical_section_persist(shard_state_t *s, const char *const *names, size_t n,
                               const bson_t *reason, bool block, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, arr, one, q, u, wc;

    BSON_APPEND_UTF8(&cmd, block ? "update" : "delete", CRIT_COLL);
    BSON_APPEND_ARRAY_BEGIN(&cmd, block ? "updates" : "deletes", &arr);
    for (size_t i = 0; i < n; i++) {
        char key[24];

        snprintf(key, sizeof key, "%zu", i);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, key, &one);
        BSON_APPEND_DOCUMENT_BEGIN(&one, "q", &q);
        BSON_APPEND_UTF8(&q, "_id", names[i]);
        bson_append_document_end(&one, &q);
        if (block) {
            BSON_APPEND_DOCUMENT_BEGIN(&one, "u", &u);
            BSON_APPEND_UTF8(&u, "_id", names[i]);
            BSON_APPEND_DOCUMENT(&u, "reason", reason);
            BSON_APPEND_BOOL(&u, "blockReads", true);
            bson_append_document_end(&one, &u);
            BSON_APPEND_BOOL(&one, "upsert", true);
        } else {
            BSON_APPEND_INT32(&one, "limit", 1);
        }
        bson_append_document_end(&arr, &one);
    }
    bson_append_array_end(&cmd, &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &wc);
    BSON_APPEND_INT32(&wc, "w", 1);
    BSON_APPEND_BOOL(&wc, "j", true);
    bson_append_document_end(&cmd, &wc);
    SHL_ERR(shl_remote_run_self(&s->remote, "config", &cmd, NULL, &reply, st));
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* Persist (block) or remove (!block) the critical-section document of 'ns': the request's
 * 'reason' when it has one, else a drop's. */
static int
persist_crit(shard_state_t *s, const char *ns, const bson_t *cmd, bool block, shl_status_t *st)
{
    const char *names[1] = {ns};
    bson_t reason = BSON_INITIALIZER;
    bson_iter_t it;
    int ret;

    if (bson_iter_init_find(&it, cmd, "reason") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        const uint8_t *data;
        uint32_t len;
        bson_t given;

        bson_iter_document(&it, &len, &data);
        SHL_INVARIANT(bson_init_static(&given, data, len));
        bson_concat(&reason, &given);
    } else {
        BSON_APPEND_UTF8(&reason, "command", "drop");
        BSON_APPEND_UTF8(&reason, "ns", ns);
    }
    ret = shard_critical_section_persist(s, names, 1, &reason, block, st);
    bson_destroy(&reason);
    return ret;
}

/* Delete the range deletion tasks whose nss matches 'filter_nss' (a string or a regex doc). */
static int
drop_range_tasks(shard_state_t *s, const bson_t *q, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, arr, one;

    BSON_APPEND_UTF8(&cmd, "delete", "rangeDeletions");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "deletes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &one);
    BSON_APPEND_DOCUMENT(&one, "q", q);
    BSON_APPEND_INT32(&one, "limit", 0);
    bson_append_document_end(&arr, &one);
    bson_append_array_end(&cmd, &arr);
    ret = shl_remote_run_self(&s->remote, "config", &cmd, NULL, &reply, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        shl_status_clear(st);
        ret = 0;
    }
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* Run a local drop command; a missing namespace is fine. */
static int
local_drop(shard_state_t *s, const char *db, const bson_t *cmd, shl_status_t *st)
{
    bson_t reply = BSON_INITIALIZER;
    int ret = shl_remote_run_self(&s->remote, db, cmd, NULL, &reply, st);

    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        shl_status_clear(st);
        ret = 0;
    }
    bson_destroy(&reply);
    return ret;
}

static int
not_shard(shard_state_t *s, shl_status_t *st)
{
    return s == NULL
               ? shl_status_set(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED, "This is not a shard")
               : 0;
}

static int
cmd_participant_block(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    const char *coll = NULL, *type = NULL;
    bool found = false;
    shl_ns_t ns;
    shard_coll_meta_t *m = NULL;
    int ret = 0;

    (void)reply;
    SHL_ERR(not_shard(s, st));
    SHL_ERR(shl_cmd_collection_arg(cmd, &coll, st));
    SHL_ERR(shl_ns_make(&ns, op->db, coll, st));
    SHL_ERR(shl_cmd_get_string(cmd, "blockType", &type, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '_shardsvrParticipantBlock.blockType' is missing but a required "
                 "field");
    }
    if (strcmp(type, "ReadsAndWrites") == 0) {
        SHL_ERR(shard_wait_migrations(s, op, ns.full, st));
        SHL_ERR(shard_crit_enter(s, op, ns.full, SHARD_CRIT_ALL, st));
        ret = persist_crit(s, ns.full, cmd, true, st);
        if (ret != 0) {
            shard_crit_exit(s, ns.full);
        }
    } else if (strcmp(type, "Unblock") == 0) {
        /* Refresh first: the requests waiting in the section must see the new metadata. */
        SHL_ERR(shard_meta_refresh(s, ns.full, &m, st));
        SHL_ERR(persist_crit(s, ns.full, cmd, false, st));
        shard_crit_exit(s, ns.full);
    } else {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "Enumeration value '%s' for field '_shardsvrParticipantBlock.blockType' is not "
                 "a valid value.",
                 type);
    }
done:
    shard_meta_release(m);
    return ret;
}

/* Whether the request names a collectionUUID and the local collection 'ns' has another one
 * (a missing collection differs from nothing). */
static int
uuid_differs(shl_op_ctx_t *op, const bson_t *cmd, const char *ns, bool *differs, shl_status_t *st)
{
    shl_collection_t *existing = NULL;
    bson_iter_t it;
    bson_subtype_t sub;
    uint32_t len = 0;
    const uint8_t *data = NULL;
    int ret = 0;

    *differs = false;
    if (!bson_iter_init_find(&it, cmd, "collectionUUID")) {
        goto done;
    }
    if (!BSON_ITER_HOLDS_BINARY(&it)) {
        SHL_FAIL(st, SHL_CODE_INVALID_UUID, "collectionUUID must be a UUID");
    }
    bson_iter_binary(&it, &sub, &len, &data);
    if (sub != BSON_SUBTYPE_UUID || len != 16) {
        SHL_FAIL(st, SHL_CODE_INVALID_UUID, "collectionUUID must be a UUID");
    }
    existing = shl_catalog_get(op->svc->storage, ns);
    *differs = existing != NULL && memcmp(existing->uuid, data, 16) != 0;
done:
    if (existing != NULL) {
        shl_collection_release(existing);
    }
    return ret;
}

static int
cmd_drop_coll_participant(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    bool other = false;
    const char *coll = NULL;
    shl_ns_t ns;
    bson_t *drop = NULL, *q = NULL;
    int ret = 0;

    (void)reply;
    SHL_ERR(not_shard(s, st));
    SHL_ERR(shl_cmd_collection_arg(cmd, &coll, st));
    SHL_ERR(shl_ns_make(&ns, op->db, coll, st));
    SHL_ERR(shard_wait_migrations(s, op, ns.full, st));
    SHL_ERR(uuid_differs(op, cmd, ns.full, &other, st));
    if (other) {
        /* Another collection under this name (recreated, or renamed over it since): not the
         * one being dropped. Its range deletion tasks are its own too. */
        SHL_LOG_INFO(SHARDING, 4170230, "drop participant: the local collection has another UUID",
                     "ns", BCON_UTF8(ns.full));
        goto done;
    }
    drop = BCON_NEW("drop", BCON_UTF8(ns.coll));
    SHL_ERR(local_drop(s, ns.db, drop, st));
    q = BCON_NEW("nss", BCON_UTF8(ns.full));
    SHL_ERR(drop_range_tasks(s, q, st));
done:
    if (drop != NULL) {
        bson_destroy(drop);
    }
    if (q != NULL) {
        bson_destroy(q);
    }
    return ret;
}

static int
cmd_drop_db_participant(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    char re[SHL_NS_MAX + 16];
    bson_t *drop = NULL, *q = NULL;
    int ret = 0;

    (void)cmd;
    (void)reply;
    SHL_ERR(not_shard(s, st));
    SHL_ERR(shl_ns_check_db(op->db, st));
    drop = BCON_NEW("dropDatabase", BCON_INT32(1));
    SHL_ERR(local_drop(s, op->db, drop, st));
    snprintf(re, sizeof re, "^\\Q%s.\\E", op->db);
    q = BCON_NEW("nss", "{", "$regex", BCON_UTF8(re), "}");
    SHL_ERR(drop_range_tasks(s, q, st));
done:
    if (drop != NULL) {
        bson_destroy(drop);
    }
    if (q != NULL) {
        bson_destroy(q);
    }
    return ret;
}

static const shl_command_t drop_participant_cmds[] = {
    {.name = "_shardsvrParticipantBlock",
     .run = cmd_participant_block,
     .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
     .help = "internal: block (or unblock) a collection's versioned reads and writes for DDL"},
    {.name = "_shardsvrDropCollectionParticipant",
     .run = cmd_drop_coll_participant,
     .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
     .help = "internal: drop this shard's copy of a collection"},
    {.name = "_shardsvrDropDatabaseParticipant",
     .run = cmd_drop_db_participant,
     .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
     .help = "internal: drop this shard's copy of a database"},
};

void
shard_drop_participant_register(shl_command_registry_t *reg)
{
    for (size_t k = 0; k < sizeof drop_participant_cmds / sizeof drop_participant_cmds[0]; k++) {
        shl_command_registry_add(reg, &drop_participant_cmds[k]);
    }
}
