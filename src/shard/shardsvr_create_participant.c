/*
 * shardsvr_create_participant.c -- _shardsvrCreateCollectionParticipant (MongoDB 7.0's
 * name): create a sharded collection's local copy on a shard that receives chunks, with the
 * collection's cluster-wide UUID (the primary shard's, recorded in config.collections) and
 * its indexes, so every shard agrees on the UUID that config.chunks and config.rangeDeletions
 * name. Idempotent: the same UUID again is ok; an empty local collection with another UUID
 * (a leftover) is replaced; a non-empty one is refused.
 *
 * {_shardsvrCreateCollectionParticipant: <coll>, collectionUUID: UUID, indexes: [<spec>],
 *  options?: {<create options>}} on the collection's database.
 */
#include <string.h>

#include "base/log.h"
#include "bson/bson_iter.h"
#include "net/command_args.h"
#include "net/service.h"
#include "shard/shard_private.h"
#include "storage/catalog.h"

/* Run a command on this shard (remote.h's self target) whose reply is not needed. */
static int
local_cmd(shl_op_ctx_t *op, const char *db, const bson_t *cmd, shl_status_t *st)
{
    bson_t reply;
    int ret = shl_remote_run_self(&shard_state(op)->remote, db, cmd, NULL, &reply, st);

    bson_destroy(&reply);
    return ret;
}

/*
 * A copy that already exists (it held chunks before) may have missed a collMod sent only to
 * the shards owning chunks at the time: bring its validator settings to the given options'.
 */
static int
sync_validation_options(shl_op_ctx_t *op, const shl_ns_t *ns, const shl_collection_t *existing,
                        const bson_t *options, shl_status_t *st)
{
    static const char *const fields[] = {"validator", "validationLevel", "validationAction", NULL};
    bson_t cmd = BSON_INITIALIZER;
    bool differs = false;
    int ret = 0;

    BSON_APPEND_UTF8(&cmd, "collMod", ns->coll);
    for (int i = 0; fields[i] != NULL; i++) {
        bson_iter_t want, have;
        bool hw = bson_iter_init_find(&want, options, fields[i]);
        bool hh =
            existing->options != NULL && bson_iter_init_find(&have, existing->options, fields[i]);
        bool same = hw == hh;
        if (same && hw) {
            bson_t a = BSON_INITIALIZER, b = BSON_INITIALIZER;
            bson_append_iter(&a, "v", 1, &want);
            bson_append_iter(&b, "v", 1, &have);
            same = bson_equal(&a, &b);
            bson_destroy(&a);
            bson_destroy(&b);
        }
        if (same) {
            continue;
        }
        differs = true;
        if (hw) {
            bson_append_iter(&cmd, fields[i], -1, &want);
        } else if (strcmp(fields[i], "validator") == 0) {
            bson_t empty = BSON_INITIALIZER;
            BSON_APPEND_DOCUMENT(&cmd, "validator", &empty);
        } else {
            BSON_APPEND_UTF8(&cmd, fields[i],
                             strcmp(fields[i], "validationLevel") == 0 ? "strict" : "error");
        }
    }
    if (differs) {
        ret = local_cmd(op, ns->db, &cmd, st);
    }
    bson_destroy(&cmd);
    return ret;
}

/* Whether 'key' is in 'a' and 'b' alike (absent from both, or equal values). */
static bool
same_field(const bson_t *a, const bson_t *b, const char *key)
{
    bson_iter_t x, y;
    bool hx = bson_iter_init_find(&x, a, key), hy = bson_iter_init_find(&y, b, key);
    bool same = hx == hy;
    if (same && hx) {
        bson_t va = BSON_INITIALIZER, vb = BSON_INITIALIZER;
        bson_append_iter(&va, "v", 1, &x);
        bson_append_iter(&vb, "v", 1, &y);
        same = bson_equal(&va, &vb);
        bson_destroy(&va);
        bson_destroy(&vb);
    }
    return same;
}

/*
 * The same for an index the existing copy already has under the donor's name: its
 * expireAfterSeconds and hidden may have been changed by a collMod this shard missed (they are
 * what collMod changes); without this, createIndexes would find a conflicting spec.
 */
static int
sync_index_options(shl_op_ctx_t *op, const shl_ns_t *ns, const shl_collection_t *existing,
                   const bson_t *spec, shl_status_t *st)
{
    bson_iter_t it;
    const shl_index_t *idx;
    bson_t cmd = BSON_INITIALIZER, ix;
    bool differs = false;
    int ret = 0;

    if (!bson_iter_init_find(&it, spec, "name") || !BSON_ITER_HOLDS_UTF8(&it)) {
        goto done;
    }
    idx = shl_collection_find_index(existing, bson_iter_utf8(&it, NULL));
    if (idx == NULL) {
        goto done;
    }
    BSON_APPEND_UTF8(&cmd, "collMod", ns->coll);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "index", &ix);
    BSON_APPEND_UTF8(&ix, "name", idx->name);
    if (!same_field(idx->spec, spec, "expireAfterSeconds") &&
        bson_iter_init_find(&it, spec, "expireAfterSeconds")) {
        bson_append_iter(&ix, "expireAfterSeconds", -1, &it);
        differs = true;
    }
    if (!same_field(idx->spec, spec, "hidden")) {
        BSON_APPEND_BOOL(&ix, "hidden",
                         bson_iter_init_find(&it, spec, "hidden") && bson_iter_as_bool(&it));
        differs = true;
    }
    bson_append_document_end(&cmd, &ix);
    if (differs) {
        ret = local_cmd(op, ns->db, &cmd, st);
    }
done:
    bson_destroy(&cmd);
    return ret;
}

static int
cmd_create_participant(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    const char *coll = NULL;
    shl_ns_t ns;
    bson_t indexes, options, one;
    bool has_indexes = false, has_options = false;
    bson_iter_t it;
    uint8_t uuid[16];
    shl_collection_t *existing = NULL;
    bool create = true;
    int ret = 0;

    (void)reply;
    SHL_ERR(shl_cmd_collection_arg(cmd, &coll, st));
    SHL_ERR(shl_ns_make(&ns, op->db, coll, st));
    if (!bson_iter_init_find(&it, cmd, "collectionUUID") || !BSON_ITER_HOLDS_BINARY(&it)) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '_shardsvrCreateCollectionParticipant.collectionUUID' is missing but "
                 "a required field");
    }
    {
        bson_subtype_t sub;
        uint32_t len;
        const uint8_t *data;
        bson_iter_binary(&it, &sub, &len, &data);
        if (sub != BSON_SUBTYPE_UUID || len != 16) {
            SHL_FAIL(st, SHL_CODE_INVALID_UUID, "collectionUUID must be a UUID");
        }
        memcpy(uuid, data, 16);
    }
    SHL_ERR(shl_cmd_get_array(cmd, "indexes", &indexes, &has_indexes, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "options", &options, &has_options, st));

    existing = shl_catalog_get(op->svc->storage, ns.full);
    if (existing != NULL) {
        if (memcmp(existing->uuid, uuid, 16) == 0) {
            create = false;
            if (has_options) {
                SHL_ERR(sync_validation_options(op, &ns, existing, &options, st));
            }
        } else if (shl_collection_num_records(existing) == 0) {
            bson_t *drop = BCON_NEW("drop", BCON_UTF8(ns.coll));
            ret = local_cmd(op, ns.db, drop, st);
            bson_destroy(drop);
            SHL_ERR(ret);
            SHL_LOG_INFO(SHARDING, 4630001, "replaced an empty collection with another UUID", "ns",
                         BCON_UTF8(ns.full));
        } else {
            SHL_FAIL(st, SHL_CODE_COLLECTION_UUID_MISMATCH,
                     "Collection %s already exists on this shard with another UUID and holds "
                     "documents",
                     ns.full);
        }
    }
    if (create) {
        ret = shl_catalog_create_collection(op->svc->storage, ns.full,
                                            has_options ? &options : NULL, uuid, NULL, st);
        if (ret == SHL_CODE_NAMESPACE_EXISTS) {
            shl_status_clear(st); /* a concurrent participant call won */
            ret = 0;
        }
        SHL_ERR(ret);
    }
    if (has_indexes && !bson_empty(&indexes)) {
        /* createIndexes with every spec but _id's; existing identical ones are no-ops. */
        bson_t create_ix = BSON_INITIALIZER, arr;
        bson_iter_t ix;
        uint32_t n = 0;
        BSON_APPEND_UTF8(&create_ix, "createIndexes", ns.coll);
        BSON_APPEND_ARRAY_BEGIN(&create_ix, "indexes", &arr);
        bson_iter_init(&ix, &indexes);
        while (shl_iter_next(&ix)) {
            const uint8_t *data;
            uint32_t len;
            bson_iter_t name;
            char key[16];
            const char *k;
            if (!BSON_ITER_HOLDS_DOCUMENT(&ix)) {
                continue;
            }
            bson_iter_document(&ix, &len, &data);
            bson_init_static(&one, data, len);
            if (bson_iter_init_find(&name, &one, "name") && BSON_ITER_HOLDS_UTF8(&name) &&
                strcmp(bson_iter_utf8(&name, NULL), "_id_") == 0) {
                continue;
            }
            if (!create) {
                ret = sync_index_options(op, &ns, existing, &one, st);
                if (ret != 0) {
                    bson_destroy(&create_ix);
                    goto done;
                }
            }
            bson_uint32_to_string(n++, &k, key, sizeof(key));
            BSON_APPEND_DOCUMENT(&arr, k, &one);
        }
        bson_append_array_end(&create_ix, &arr);
        ret = n > 0 ? local_cmd(op, ns.db, &create_ix, st) : 0;
        bson_destroy(&create_ix);
        SHL_ERR(ret);
    }
done:
    if (existing != NULL) {
        shl_collection_release(existing);
    }
    return ret;
}

static const shl_command_t k_create_participant = {
    .name = "_shardsvrCreateCollectionParticipant",
    .run = cmd_create_participant,
    .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
    .help = "internal: create a sharded collection's local copy with its cluster-wide UUID"};

void
shard_create_participant_register(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &k_create_participant);
}
