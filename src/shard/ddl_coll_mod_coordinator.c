/*
 * ddl_coll_mod_coordinator.c -- the collMod coordinator on the database's primary shard
 * (ddl_coordinators.h; seeds/000 "Sharding DDL Coordinator"; MongoDB 7.0's CollModCoordinator)
 * with the _shardsvrCollMod command that starts or joins it, and the participants'
 * _shardsvrCollModParticipant.
 */
#include <string.h>

#include "base/log.h"
#include "base/namespace.h"
#include "net/command_args.h"
#include "net/service.h"
#include "shard/ddl_coordinators.h"
#include "shard/shard_private.h"
#include "storage/catalog.h"

#define OP_COLL_MOD "collMod"

/* The fields of a local collMod's reply the user sees (one node's answer). */
static const char *const k_reply_fields[] = {"expireAfterSeconds_old", "expireAfterSeconds_new",
                                             "hidden_old", "hidden_new", NULL};

/* The participant command for the document's request. */
static void
participant_cmd(const bson_t *doc, const char *coll, bson_t *cmd)
{
    bson_iter_t it;

    bson_init(cmd);
    BSON_APPEND_UTF8(cmd, "_shardsvrCollModParticipant", coll);
    if (bson_iter_init_find(&it, doc, "collModRequest")) {
        bson_append_iter(cmd, "collModRequest", -1, &it);
    }
    if (bson_iter_init_find(&it, doc, "collectionUUID")) {
        bson_append_iter(cmd, "collectionUUID", -1, &it);
    }
}

/* ----------------------------------------------------------------------- the phases */

/* checkPreconditions (not checkpointed): sharded or not, its UUID, whether migrations are
 * allowed now, and the participants (the primary, then the shards owning chunks). */
static int
phase_check(shl_coord_t *c, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    shl_ns_t parsed;
    bson_t filter = BSON_INITIALIZER, doc = BSON_INITIALIZER;
    bson_t **colls = NULL;
    size_t n = 0, nids = 0;
    char **ids = NULL;
    bson_iter_t it;
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    SHL_ERR(shl_ns_parse(&parsed, ns, st));
    BSON_APPEND_UTF8(&filter, "_id", ns);
    SHL_ERR(shard_ddl_config_find(c, "collections", &filter, &colls, &n, st));
    SHL_ERR(shard_ddl_find_participants(c, parsed.db, colls, n, &ids, &nids, st));
    bson_copy_to_excluding_noinit(shl_coord_doc(c), &doc, "sharded", "collectionUUID",
                                  "freezeMigrations", NULL);
    BSON_APPEND_BOOL(&doc, "sharded", n > 0);
    if (n > 0 && bson_iter_init_find(&it, colls[0], "uuid")) {
        bson_append_iter(&doc, "collectionUUID", -1, &it);
    }
    /* Stop migrations only if they run: a collection whose migrations a user stopped
     * keeps them stopped afterwards. */
    BSON_APPEND_BOOL(&doc, "freezeMigrations",
                     n > 0 && !(bson_iter_init_find(&it, colls[0], "allowMigrations") &&
                                !bson_iter_as_bool(&it)));
    shl_coord_doc_set(c, &doc);
    shard_ddl_set_participants(c, ids, nids);
done:
    if (ret != 0) {
        shl_coord_abort(c);
    }
    bson_strfreev(ids);
    shard_ddl_docs_free(colls);
    bson_destroy(&filter);
    bson_destroy(&doc);
    return ret;
}

/*
 * updateShards: this shard (the primary) first -- a request it refuses (a bad option, no
 * such index) changed nothing anywhere, so the operation ends cleanly with its error -- then
 * every participant; then migrations run again. Its reply is the user's.
 */
static int
phase_update(shl_coord_t *c, shl_status_t *st)
{
    shl_remote_target_t self = shl_remote_target_self();
    char ns[SHL_NS_MAX + 1];
    shl_ns_t parsed;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, result = BSON_INITIALIZER;
    bson_iter_t it;
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    SHL_ERR(shl_ns_parse(&parsed, ns, st));
    bson_destroy(&cmd);
    participant_cmd(shl_coord_doc(c), parsed.coll, &cmd);
    bson_destroy(&reply);
    SHL_ERR(shard_ddl_commit(c, &self, parsed.db, &cmd, shard_ddl_resume_migrations, &reply, st));
    for (size_t k = 0; k_reply_fields[k] != NULL; k++) {
        if (bson_iter_init_find(&it, &reply, k_reply_fields[k])) {
            bson_append_iter(&result, NULL, 0, &it);
        }
    }
    SHL_ERR(shard_ddl_to_participants(c, parsed.db, &cmd, st));
    SHL_ERR(shard_ddl_resume_migrations(c, st));
    shl_coord_set_result(c, &result);
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    bson_destroy(&result);
    return ret;
}

static const shl_coord_phase_t coll_mod_phases[] = {
    {"checkPreconditions", phase_check, false},
    {"freezeMigrations", shard_ddl_phase_freeze_migrations, true},
    {"updateShards", phase_update, true},
};

/* The same collMod: the same request (the running one learnt more). */
static const char *const coll_mod_same[] = {"collModRequest", NULL};
static shard_ddl_kind_t coll_mod_kind = {
    .op = OP_COLL_MOD, .db_mode = SHARD_DDL_IX, .same_fields = coll_mod_same};

SHARD_DDL_DEFINE_TYPE(shard_coll_mod_type, "CollModCoordinator", coll_mod_phases, coll_mod_kind);

/* ---------------------------------------------------------------------- entry points */

int
shard_ddl_coll_mod(shl_coord_service_t *svc, const char *ns, const bson_t *request,
                   const bson_t *dbv, bson_t *reply, shl_status_t *st)
{
    bson_t fields = BSON_INITIALIZER;
    int ret;

    BSON_APPEND_DOCUMENT(&fields, "collModRequest", request);
    ret = shard_ddl_start(svc, &shard_coll_mod_type, ns, &fields, dbv, reply, st);
    bson_destroy(&fields);
    return ret;
}

static int
cmd_coll_mod(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    const char *coll = NULL;
    bson_t request, dbv;
    bool found = false;
    shl_ns_t ns;
    int ret = 0;

    SHL_ERR(shl_cmd_collection_arg(cmd, &coll, st));
    SHL_ERR(shl_ns_make(&ns, op->db, coll, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "collModRequest", &request, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '_shardsvrCollMod.collModRequest' is missing but a required field");
    }
    SHL_ERR(shard_ddl_check_primary(s, op, ns.full, st));
    SHL_ERR(
        shard_ddl_coll_mod(s->coords, ns.full, &request, shard_ddl_cmd_dbv(cmd, &dbv), reply, st));
done:
    return ret;
}

/*
 * {_shardsvrCollModParticipant: <coll>, collModRequest, collectionUUID?}: the local collMod,
 * if the local collection is the one the coordinator means (its UUID; CollectionUUIDMismatch
 * otherwise). Its reply fields are the local collMod's. Idempotent (the same options again).
 */
static int
cmd_coll_mod_participant(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    const char *coll = NULL;
    bson_t request, local = BSON_INITIALIZER, got = BSON_INITIALIZER;
    shl_collection_t *existing = NULL;
    bool found = false;
    bson_iter_t it;
    shl_ns_t ns;
    int ret = 0;

    if (s == NULL) {
        SHL_FAIL(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED, "This is not a shard");
    }
    SHL_ERR(shl_cmd_collection_arg(cmd, &coll, st));
    SHL_ERR(shl_ns_make(&ns, op->db, coll, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "collModRequest", &request, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '_shardsvrCollModParticipant.collModRequest' is missing but a "
                 "required field");
    }
    if (bson_iter_init_find(&it, cmd, "collectionUUID") && BSON_ITER_HOLDS_BINARY(&it)) {
        bson_subtype_t sub;
        uint32_t len;
        const uint8_t *data;

        bson_iter_binary(&it, &sub, &len, &data);
        existing = shl_catalog_get(op->svc->storage, ns.full);
        if (existing != NULL && (len != 16 || memcmp(existing->uuid, data, 16) != 0)) {
            SHL_FAIL(st, SHL_CODE_COLLECTION_UUID_MISMATCH,
                     "Collection %s on this shard has another UUID than the one being modified",
                     ns.full);
        }
    }
    BSON_APPEND_UTF8(&local, "collMod", ns.coll);
    bson_concat(&local, &request);
    bson_destroy(&got);
    SHL_ERR(shl_remote_run_self(&s->remote, ns.db, &local, NULL, &got, st));
    for (size_t k = 0; k_reply_fields[k] != NULL; k++) {
        if (bson_iter_init_find(&it, &got, k_reply_fields[k])) {
            bson_append_iter(reply, NULL, 0, &it);
        }
    }
done:
    if (existing != NULL) {
        shl_collection_release(existing);
    }
    bson_destroy(&local);
    bson_destroy(&got);
    return ret;
}

static const shl_command_t coll_mod_cmds[] = {
    {.name = "_shardsvrCollMod",
     .run = cmd_coll_mod,
     .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
     .help = "internal: modify a collection of this primary shard's database everywhere"},
    {.name = "_shardsvrCollModParticipant",
     .run = cmd_coll_mod_participant,
     .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
     .help = "internal: modify this shard's copy of a collection"},
};

void
shard_ddl_coll_mod_register(shl_command_registry_t *reg)
{
    for (size_t k = 0; k < sizeof coll_mod_cmds / sizeof coll_mod_cmds[0]; k++) {
        shl_command_registry_add(reg, &coll_mod_cmds[k]);
    }
}
