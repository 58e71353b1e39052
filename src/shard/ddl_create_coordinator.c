/*
 * ddl_create_coordinator.c -- the createCollection coordinator on the database's primary
 * shard (ddl_coordinators.h; seeds/000 "Sharding DDL Coordinator", "Cluster DDL operations")
 * and the _shardsvrCreateCollection command that starts or joins it. Like the drop
 * coordinators, its phases only talk through remote.h (config server, self).
 */
#include <string.h>

#include "base/log.h"
#include "base/namespace.h"
#include "net/command_args.h"
#include "shard/ddl_coordinators.h"
#include "shard/shard_private.h"
#include "sharding/shard_key.h"

#define OP_CREATE_COLL "createCollection"

/* The request's fields of the state document that _configsvrShardCollection takes. */
static const struct {
    const char *doc_field, *cfg_field;
} k_request_fields[] = {
    {"shardKey", "key"},
    {"unique", "unique"},
    {"numInitialChunks", "numInitialChunks"},
    {"collation", "collation"},
};

/* The document's shard key pattern 'field', borrowed into 'out' (empty if missing). */
static void
doc_key(const bson_t *doc, const char *field, bson_t *out)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    if (bson_iter_init_find(&it, doc, field) && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_document(&it, &len, &data);
        SHL_INVARIANT(bson_init_static(out, data, len));
    } else {
        bson_init(out);
    }
}

static bool
doc_unique(const bson_t *doc)
{
    bson_iter_t it;

    return bson_iter_init_find(&it, doc, "unique") && bson_iter_as_bool(&it);
}

/* Two shard key patterns name the same fields in the same order with the same kinds
 * (hashed or ranged), whatever number type says "ranged". */
static bool
same_key(const bson_t *a, const bson_t *b)
{
    bson_iter_t ia, ib;
    bool na, nb;

    if (!bson_iter_init(&ia, a) || !bson_iter_init(&ib, b)) {
        return false;
    }
    for (;;) {
        na = bson_iter_next(&ia);
        nb = bson_iter_next(&ib);
        if (!na || !nb) {
            return na == nb;
        }
        if (strcmp(bson_iter_key(&ia), bson_iter_key(&ib)) != 0 ||
            BSON_ITER_HOLDS_UTF8(&ia) != BSON_ITER_HOLDS_UTF8(&ib)) {
            return false;
        }
        if (BSON_ITER_HOLDS_UTF8(&ia) &&
            strcmp(bson_iter_utf8(&ia, NULL), bson_iter_utf8(&ib, NULL)) != 0) {
            return false;
        }
    }
}

/* The reply of a sharded collection's entry: {collectionsharded, collectionUUID}. */
static void
set_result_from_entry(shl_coord_t *c, const char *ns, const bson_t *entry)
{
    bson_t res = BSON_INITIALIZER;
    bson_iter_t it;

    BSON_APPEND_UTF8(&res, "collectionsharded", ns);
    if (bson_iter_init_find(&it, entry, "uuid")) {
        bson_append_iter(&res, "collectionUUID", -1, &it);
    }
    shl_coord_set_result(c, &res);
    bson_destroy(&res);
}

/* The collection's config.collections entry, copied into *entry (NULL when none). */
static int
read_entry(shl_coord_t *c, const char *ns, bson_t **entry, shl_status_t *st)
{
    bson_t filter = BSON_INITIALIZER;
    bson_t **docs = NULL;
    size_t n = 0;
    int ret = 0;

    *entry = NULL;
    BSON_APPEND_UTF8(&filter, "_id", ns);
    SHL_ERR(shard_ddl_config_find(c, "collections", &filter, &docs, &n, st));
    if (n > 0) {
        *entry = bson_copy(docs[0]);
    }
done:
    shard_ddl_docs_free(docs);
    bson_destroy(&filter);
    return ret;
}

/* _shardsvrParticipantBlock of the collection on this shard (block or unblock). */
static int
block_self(shl_coord_t *c, bool block, shl_status_t *st)
{
    return shard_ddl_block(c, "create", block, true, st);
}

static int
unblock_self(shl_coord_t *c, shl_status_t *st)
{
    return block_self(c, false, st);
}

/* ----------------------------------------------------------------------- the phases */

/* checkPreconditions: a valid key; already sharded as asked -> done; otherwise -> refused.
 * Not checkpointed: a refusal here leaves no trace. */
static int
phase_check(shl_coord_t *c, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    bson_t key, ekey;
    bson_t *entry = NULL;
    bson_iter_t it;
    shl_shard_key_pattern_t pattern;
    bool pattern_ok = false;
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    doc_key(shl_coord_doc(c), "shardKey", &key);
    SHL_ERR(shl_shard_key_pattern_init(&pattern, &key, st));
    pattern_ok = true;
    SHL_ERR(read_entry(c, ns, &entry, st));
    if (entry != NULL) {
        doc_key(entry, "key", &ekey);
        if (bson_iter_init_find(&it, entry, "key") && same_key(&ekey, &key) &&
            doc_unique(entry) == doc_unique(shl_coord_doc(c))) {
            set_result_from_entry(c, ns, entry);
            shl_coord_finish(c);
        } else if (bson_iter_init_find(&it, entry, "key") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            SHL_FAIL(st, SHL_CODE_ALREADY_INITIALIZED, "sharding already enabled for collection %s",
                     ns);
        }
        bson_destroy(&ekey);
    }
done:
    if (pattern_ok) {
        shl_shard_key_pattern_cleanup(&pattern);
    }
    if (entry != NULL) {
        bson_destroy(entry);
    }
    bson_destroy(&key);
    return ret;
}

/* The shardCollection change event (showExpandedEvents): the request's shardKey, unique and
 * the options it gave. */
static int
notify_sharded(shl_coord_t *c, const char *ns, shl_status_t *st)
{
    bson_t desc = BSON_INITIALIZER, *entry = NULL;
    bson_iter_t it;
    int ret = 0;

    SHL_ERR(read_entry(c, ns, &entry, st));
    for (size_t k = 0; k < sizeof k_request_fields / sizeof k_request_fields[0]; k++) {
        if (bson_iter_init_find(&it, shl_coord_doc(c), k_request_fields[k].doc_field)) {
            bson_append_iter(&desc, k_request_fields[k].doc_field, -1, &it);
        }
    }
    SHL_ERR(shard_ddl_notify_event(c, "collectionSharded", ns, entry, &desc, st));
done:
    if (entry != NULL) {
        bson_destroy(entry);
    }
    bson_destroy(&desc);
    return ret;
}

static int
phase_enter_crit(shl_coord_t *c, shl_status_t *st)
{
    return block_self(c, true, st);
}

/* commit: the config server shards the collection (idempotent: an identical request that
 * already committed answers with the same UUID). A refusal leaves the critical section, so
 * the operation ends cleanly not done (shl_coord_abort). */
static int
phase_commit(shl_coord_t *c, shl_status_t *st)
{
    shl_remote_target_t cfg = shl_remote_target_config();
    char ns[SHL_NS_MAX + 1];
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_iter_t it;
    int ret;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    BSON_APPEND_UTF8(&cmd, "_configsvrShardCollection", ns);
    for (size_t k = 0; k < sizeof k_request_fields / sizeof k_request_fields[0]; k++) {
        if (bson_iter_init_find(&it, shl_coord_doc(c), k_request_fields[k].doc_field)) {
            bson_append_iter(&cmd, k_request_fields[k].cfg_field, -1, &it);
        }
    }
    ret = shard_ddl_commit(c, &cfg, "admin", &cmd, unblock_self, &reply, st);
    if (ret != 0 && !shl_remote_is_retryable(ret)) {
        SHL_LOG_INFO(SHARDING, 4170210, "shardCollection refused by the config server", "ns",
                     BCON_UTF8(ns), "code", BCON_INT64((int64_t)ret));
    }
    if (ret == 0) {
        /* Still in the critical section: the event comes before any write to the sharded
         * collection. */
        ret = notify_sharded(c, ns, st);
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return ret;
}

/* exitCriticalSection: refresh and leave the section, then the reply from the catalog. */
static int
phase_exit_crit(shl_coord_t *c, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    bson_t *entry = NULL;
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    SHL_ERR(block_self(c, false, st));
    SHL_ERR(read_entry(c, ns, &entry, st));
    if (entry != NULL) {
        set_result_from_entry(c, ns, entry);
    }
    SHL_LOG_INFO(SHARDING, 4170211, "sharded collection on the primary shard", "ns", BCON_UTF8(ns));
done:
    if (entry != NULL) {
        bson_destroy(entry);
    }
    return ret;
}

static const shl_coord_phase_t create_phases[] = {
    {"checkPreconditions", phase_check, false},
    {"enterCriticalSection", phase_enter_crit, true},
    {"commit", phase_commit, true},
    {"exitCriticalSection", phase_exit_crit, true},
};

/* The same request: the same options (numInitialChunks and collation may be missing from
 * both). */
static const char *const create_same[] = {"shardKey", "unique", "numInitialChunks", "collation",
                                          NULL};
static shard_ddl_kind_t create_kind = {
    .op = OP_CREATE_COLL, .db_mode = SHARD_DDL_IX, .same_fields = create_same};

SHARD_DDL_DEFINE_TYPE(shard_create_coll_type, "CreateCollectionCoordinator", create_phases,
                      create_kind);

/* ---------------------------------------------------------------------- entry points */

int
shard_ddl_create_collection(shl_coord_service_t *svc, const char *ns, const bson_t *req,
                            const bson_t *dbv, bson_t *reply, shl_status_t *st)
{
    bson_t fields = BSON_INITIALIZER;
    bson_iter_t it;
    int ret;

    for (size_t k = 0; k < sizeof k_request_fields / sizeof k_request_fields[0]; k++) {
        const char *f = k_request_fields[k].doc_field;
        if (bson_iter_init_find(&it, req, f)) {
            bson_append_iter(&fields, f, -1, &it);
        } else if (strcmp(f, "unique") == 0) {
            BSON_APPEND_BOOL(&fields, "unique", false); /* so {} and {unique: false} join */
        }
    }
    ret = shard_ddl_start(svc, &shard_create_coll_type, ns, &fields, dbv, reply, st);
    bson_destroy(&fields);
    return ret;
}

static int
cmd_create_collection(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    const char *coll = NULL;
    bson_t key, dbv, req = BSON_INITIALIZER;
    bool found = false;
    bson_iter_t it;
    shl_ns_t ns;
    int ret = 0;

    SHL_ERR(shl_cmd_collection_arg(cmd, &coll, st));
    SHL_ERR(shl_ns_make(&ns, op->db, coll, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "shardKey", &key, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '_shardsvrCreateCollection.shardKey' is missing but a required "
                 "field");
    }
    SHL_ERR(shard_ddl_check_primary(s, op, ns.full, st));
    for (size_t k = 0; k < sizeof k_request_fields / sizeof k_request_fields[0]; k++) {
        if (bson_iter_init_find(&it, cmd, k_request_fields[k].doc_field)) {
            bson_append_iter(&req, k_request_fields[k].doc_field, -1, &it);
        }
    }
    SHL_ERR(shard_ddl_create_collection(s->coords, ns.full, &req, shard_ddl_cmd_dbv(cmd, &dbv),
                                        reply, st));
done:
    bson_destroy(&req);
    return ret;
}

static const shl_command_t create_coord_cmd = {
    .name = "_shardsvrCreateCollection",
    .run = cmd_create_collection,
    .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
    .help = "internal: shard a collection of this primary shard's database"};

void
shard_ddl_create_register(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &create_coord_cmd);
}
