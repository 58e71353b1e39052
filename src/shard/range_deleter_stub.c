/*
 * range_deleter_stub.c -- TEMPORARY stand-in for range_deleter.h until branch `rangedel`
 * lands (delete this file at that merge): the task documents are written, marked ready and
 * removed as the contract says, but no thread deletes ranges and waiting for overlapping
 * tasks returns at once.
 */
#include <string.h>

#include "net/service.h"
#include "shard/range_deleter.h"
#include "shard/shard_private.h"

void
shl_range_task_cleanup(shl_range_task_t *t)
{
    if (t->min != NULL) {
        bson_destroy(t->min);
    }
    if (t->max != NULL) {
        bson_destroy(t->max);
    }
    if (t->key_pattern != NULL) {
        bson_destroy(t->key_pattern);
    }
    t->min = t->max = t->key_pattern = NULL;
}

void
shl_range_task_to_bson(const shl_range_task_t *t, bson_t *out)
{
    bson_t r;

    bson_init(out);
    shl_uuid_append(out, "_id", &t->id);
    BSON_APPEND_UTF8(out, "nss", t->ns);
    shl_uuid_append(out, "collectionUuid", &t->collection_uuid);
    BSON_APPEND_UTF8(out, "donorShardId", t->donor_shard);
    BSON_APPEND_DOCUMENT_BEGIN(out, "range", &r);
    BSON_APPEND_DOCUMENT(&r, "min", t->min);
    BSON_APPEND_DOCUMENT(&r, "max", t->max);
    bson_append_document_end(out, &r);
    if (t->pending) {
        BSON_APPEND_BOOL(out, "pending", true);
    }
    BSON_APPEND_UTF8(out, "whenToClean", t->when_now ? "now" : "delayed");
    BSON_APPEND_INT64(out, "numOrphanDocs", t->num_orphan_docs);
    if (t->key_pattern != NULL) {
        BSON_APPEND_DOCUMENT(out, "keyPattern", t->key_pattern);
    }
    shl_chunk_version_append(out, "preMigrationShardVersion", &t->pre_migration_version);
}

int
shl_range_task_parse(const bson_t *doc, shl_range_task_t *out, shl_status_t *st)
{
    (void)doc;
    memset(out, 0, sizeof(*out));
    return shl_status_set(st, SHL_CODE_INTERNAL_ERROR, "range deleter not available yet");
}

static int
local(shl_op_ctx_t *op, const bson_t *cmd, shl_status_t *st)
{
    int ret;
    bson_t reply;

    ret = shard_local_cmd(shard_state(op), "config", cmd, &reply, st);
    bson_destroy(&reply);
    return ret;
}

int
shl_range_deletion_persist(shl_op_ctx_t *op, const shl_range_task_t *t, shl_status_t *st)
{
    int ret;
    bson_t doc, cmd = BSON_INITIALIZER, arr;

    shl_range_task_to_bson(t, &doc);
    BSON_APPEND_UTF8(&cmd, "insert", "rangeDeletions");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &arr);
    BSON_APPEND_DOCUMENT(&arr, "0", &doc);
    bson_append_array_end(&cmd, &arr);
    ret = local(op, &cmd, st);
    bson_destroy(&doc);
    bson_destroy(&cmd);
    return ret;
}

int
shl_range_deletion_mark_ready(shl_op_ctx_t *op, const shl_uuid_t *id, shl_status_t *st)
{
    int ret;
    bson_t *cmd = bson_new(), arr, u, q, mod, un;

    BSON_APPEND_UTF8(cmd, "update", "rangeDeletions");
    BSON_APPEND_ARRAY_BEGIN(cmd, "updates", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &u);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "q", &q);
    shl_uuid_append(&q, "_id", id);
    bson_append_document_end(&u, &q);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "u", &mod);
    BSON_APPEND_DOCUMENT_BEGIN(&mod, "$unset", &un);
    BSON_APPEND_UTF8(&un, "pending", "");
    bson_append_document_end(&mod, &un);
    bson_append_document_end(&u, &mod);
    bson_append_document_end(&arr, &u);
    bson_append_array_end(cmd, &arr);
    ret = local(op, cmd, st);
    bson_destroy(cmd);
    return ret;
}

int
shl_range_deletion_remove(shl_op_ctx_t *op, const shl_uuid_t *id, shl_status_t *st)
{
    int ret;
    bson_t *cmd = bson_new(), arr, d, q;

    BSON_APPEND_UTF8(cmd, "delete", "rangeDeletions");
    BSON_APPEND_ARRAY_BEGIN(cmd, "deletes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &d);
    BSON_APPEND_DOCUMENT_BEGIN(&d, "q", &q);
    shl_uuid_append(&q, "_id", id);
    bson_append_document_end(&d, &q);
    BSON_APPEND_INT32(&d, "limit", 1);
    bson_append_document_end(&arr, &d);
    bson_append_array_end(cmd, &arr);
    ret = local(op, cmd, st);
    bson_destroy(cmd);
    return ret;
}

int
shl_range_deletion_wait_overlapping(shl_op_ctx_t *op, const shl_uuid_t *collection_uuid,
                                    const bson_t *min, const bson_t *max, shl_status_t *st)
{
    (void)collection_uuid;
    (void)min;
    (void)max;
    return shl_op_check_interrupt(op, st);
}
