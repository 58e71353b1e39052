/*
 * ddl_refine_coordinator.c -- the refineCollectionShardKey coordinator on the database's
 * primary shard (ddl_coordinators.h; seeds/000 "Sharding DDL Coordinator"; MongoDB 7.0's
 * RefineCollectionShardKeyCoordinator) and the _shardsvrRefineCollectionShardKey command
 * that starts or joins it.
 */
#include <string.h>

#include "base/log.h"
#include "base/namespace.h"
#include "net/command_args.h"
#include "shard/ddl_coordinators.h"
#include "shard/shard_private.h"
#include "sharding/shard_key.h"

#define OP_REFINE "refineCollectionShardKey"

/* ----------------------------------------------------------------------- the phases */

/* checkPreconditions (not checkpointed): the collection is sharded (NamespaceNotSharded);
 * already on the new key -> done; its UUID; whether migrations run now. */
static int
phase_check(shl_coord_t *c, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    bson_t filter = BSON_INITIALIZER, doc = BSON_INITIALIZER;
    bson_t **colls = NULL;
    size_t n = 0;
    bson_iter_t it, want;
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    BSON_APPEND_UTF8(&filter, "_id", ns);
    SHL_ERR(shard_ddl_config_find(c, "collections", &filter, &colls, &n, st));
    if (n == 0) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_SHARDED, "refineCollectionShardKey: %s is not sharded",
                 ns);
    }
    if (bson_iter_init_find(&it, colls[0], "key") &&
        bson_iter_init_find(&want, shl_coord_doc(c), "newShardKey") &&
        bson_iter_value(&it)->value_type == BSON_TYPE_DOCUMENT &&
        bson_iter_value(&want)->value_type == BSON_TYPE_DOCUMENT &&
        bson_iter_value(&it)->value.v_doc.data_len ==
            bson_iter_value(&want)->value.v_doc.data_len &&
        memcmp(bson_iter_value(&it)->value.v_doc.data, bson_iter_value(&want)->value.v_doc.data,
               bson_iter_value(&it)->value.v_doc.data_len) == 0) {
        shl_coord_finish(c); /* already refined to this key */
        goto done;
    }
    bson_copy_to_excluding_noinit(shl_coord_doc(c), &doc, "collectionUUID", "freezeMigrations",
                                  "oldShardKey", NULL);
    if (bson_iter_init_find(&it, colls[0], "uuid")) {
        bson_append_iter(&doc, "collectionUUID", -1, &it);
    }
    if (bson_iter_init_find(&it, colls[0], "key")) {
        bson_append_iter(&doc, "oldShardKey", -1, &it);
    }
    BSON_APPEND_BOOL(
        &doc, "freezeMigrations",
        !(bson_iter_init_find(&it, colls[0], "allowMigrations") && !bson_iter_as_bool(&it)));
    shl_coord_doc_set(c, &doc);
done:
    if (ret != 0) {
        shl_coord_abort(c);
    }
    shard_ddl_docs_free(colls);
    bson_destroy(&filter);
    bson_destroy(&doc);
    return ret;
}

/* The refineCollectionShardKey change event (showExpandedEvents): {shardKey, oldShardKey}. */
static int
notify_refined(shl_coord_t *c, const char *ns, shl_status_t *st)
{
    bson_t desc = BSON_INITIALIZER, ids = BSON_INITIALIZER;
    bson_iter_t it;
    int ret;

    if (bson_iter_init_find(&it, shl_coord_doc(c), "newShardKey")) {
        bson_append_iter(&desc, "shardKey", -1, &it);
    }
    if (bson_iter_init_find(&it, shl_coord_doc(c), "oldShardKey")) {
        bson_append_iter(&desc, "oldShardKey", -1, &it);
    }
    if (bson_iter_init_find(&it, shl_coord_doc(c), "collectionUUID")) {
        bson_append_iter(&ids, "uuid", -1, &it);
    }
    ret = shard_ddl_notify_event(c, "collectionKeyRefined", ns, &ids, &desc, st);
    bson_destroy(&ids);
    bson_destroy(&desc);
    return ret;
}

/* commit: the config server refines chunks, zones and the entry in one batch and tells the
 * shards (idempotent: the same key again is nothing to do). A refusal (not a prefix, no
 * index) lets migrations run again and ends the operation cleanly. */
static int
phase_commit(shl_coord_t *c, shl_status_t *st)
{
    shl_remote_target_t cfg = shl_remote_target_config();
    char ns[SHL_NS_MAX + 1];
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_iter_t it;
    int ret;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    BSON_APPEND_UTF8(&cmd, "_configsvrRefineCollectionShardKey", ns);
    if (bson_iter_init_find(&it, shl_coord_doc(c), "newShardKey")) {
        bson_append_iter(&cmd, "key", -1, &it);
    }
    ret = shard_ddl_commit(c, &cfg, "admin", &cmd, shard_ddl_resume_migrations, &reply, st);
    if (ret == 0) {
        ret = notify_refined(c, ns, st);
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return ret;
}

static int
phase_resume(shl_coord_t *c, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    SHL_ERR(shard_ddl_resume_migrations(c, st));
    SHL_LOG_INFO(SHARDING, 4170240, "refined the shard key", "ns", BCON_UTF8(ns));
done:
    return ret;
}

static const shl_coord_phase_t refine_phases[] = {
    {"checkPreconditions", phase_check, false},
    {"freezeMigrations", shard_ddl_phase_freeze_migrations, true},
    {"commit", phase_commit, true},
    {"resumeMigrations", phase_resume, true},
};

/* The same refine: the same new key. */
static const char *const refine_same[] = {"newShardKey", NULL};
static shard_ddl_kind_t refine_kind = {
    .op = OP_REFINE, .db_mode = SHARD_DDL_IX, .same_fields = refine_same};

SHARD_DDL_DEFINE_TYPE(shard_refine_type, "RefineCollectionShardKeyCoordinator", refine_phases,
                      refine_kind);

/* ---------------------------------------------------------------------- entry points */

int
shard_ddl_refine(shl_coord_service_t *svc, const char *ns, const bson_t *key, const bson_t *dbv,
                 shl_status_t *st)
{
    bson_t fields = BSON_INITIALIZER;
    int ret;

    BSON_APPEND_DOCUMENT(&fields, "newShardKey", key);
    ret = shard_ddl_start(svc, &shard_refine_type, ns, &fields, dbv, NULL, st);
    bson_destroy(&fields);
    return ret;
}

static int
cmd_refine(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    const char *coll = NULL;
    bson_t key, dbv;
    bool found = false;
    shl_ns_t ns;
    shl_shard_key_pattern_t pattern;
    int ret = 0;

    (void)reply;
    SHL_ERR(shl_cmd_collection_arg(cmd, &coll, st));
    SHL_ERR(shl_ns_make(&ns, op->db, coll, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "newShardKey", &key, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '_shardsvrRefineCollectionShardKey.newShardKey' is missing but a "
                 "required field");
    }
    SHL_ERR(shl_shard_key_pattern_init(&pattern, &key, st));
    shl_shard_key_pattern_cleanup(&pattern);
    SHL_ERR(shard_ddl_check_primary(s, op, ns.full, st));
    SHL_ERR(shard_ddl_refine(s->coords, ns.full, &key, shard_ddl_cmd_dbv(cmd, &dbv), st));
done:
    return ret;
}

static const shl_command_t refine_cmd = {
    .name = "_shardsvrRefineCollectionShardKey",
    .run = cmd_refine,
    .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
    .help = "internal: refine the shard key of a collection of this primary shard's database"};

void
shard_ddl_refine_register(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &refine_cmd);
}
