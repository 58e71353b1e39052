/*
 * cluster_snapshot.c -- snapshot reads outside transactions through the router
 * (docs/design/snapshot_reads.md; seeds/000 "The historical routing table"): the router
 * picks atClusterTime when the client gave none, every targeted shard reads at it, targeting
 * uses the chunk owners at that time (cluster_routing.c, rr->at), and the reply names it.
 */
#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "router/router_private.h"

bson_t *
router_snapshot_rewrite(shl_router_t *r, const shl_command_t *cmd, const bson_t *body)
{
    bson_iter_t it, rc;
    bson_t *out = NULL, sub;
    bool snapshot = false, has_at = false;
    uint64_t after = 0, at;

    if (!(cmd->flags & SHL_CMD_SNAPSHOT_READ) || strcmp(cmd->name, "getMore") == 0 ||
        !bson_iter_init_find(&it, body, "readConcern") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &rc)) {
        return NULL;
    }
    while (shl_iter_next(&rc)) {
        const char *k = shl_iter_key(&rc);
        if (strcmp(k, "level") == 0 && BSON_ITER_HOLDS_UTF8(&rc)) {
            snapshot = strcmp(bson_iter_utf8(&rc, NULL), "snapshot") == 0;
        } else if (strcmp(k, "atClusterTime") == 0) {
            has_at = true;
        } else if (strcmp(k, "afterClusterTime") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&rc)) {
            after = shl_bson_iter_timestamp_u64(&rc);
        }
    }
    /* As mongos: the newest time this router knows, or the client's afterClusterTime when
     * that is newer. Malformed readConcerns go to the shards unchanged for their errors. */
    at = shl_vector_clock_get(&r->clock, SHL_VC_CLUSTER_TIME);
    if (after > at) {
        at = after;
    }
    if (!snapshot || has_at || at == 0) {
        return NULL;
    }
    out = bson_new();
    bson_iter_init(&it, body);
    while (shl_iter_next(&it)) {
        if (strcmp(shl_iter_key(&it), "readConcern") != 0) {
            bson_append_iter(out, NULL, 0, &it);
            continue;
        }
        BSON_APPEND_DOCUMENT_BEGIN(out, "readConcern", &sub);
        bson_iter_recurse(&it, &rc);
        while (shl_iter_next(&rc)) {
            if (strcmp(shl_iter_key(&rc), "afterClusterTime") != 0) {
                bson_append_iter(&sub, NULL, 0, &rc);
            }
        }
        bson_append_timestamp(&sub, "atClusterTime", -1, (uint32_t)(at >> 32),
                              (uint32_t)(at & 0xffffffffu));
        bson_append_document_end(out, &sub);
    }
    return out;
}

void
router_snapshot_reply(const shl_op_ctx_t *op, bson_t *reply)
{
    uint64_t at = shl_router_snapshot_time(op);
    bool cursor_reply = strcmp(op->cmd_name, "distinct") != 0;
    bson_iter_t it, cur;
    bson_t out = BSON_INITIALIZER, sub;

    if (at == 0) {
        goto done;
    }
    if (!cursor_reply) {
        if (!bson_has_field(reply, "atClusterTime")) {
            bson_append_timestamp(reply, "atClusterTime", -1, (uint32_t)(at >> 32),
                                  (uint32_t)(at & 0xffffffffu));
        }
        goto done;
    }
    if (!bson_iter_init_find(&it, reply, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        (bson_iter_recurse(&it, &cur) && bson_iter_find(&cur, "atClusterTime"))) {
        goto done;
    }
    /* Rebuild the reply with the time in its cursor document. */
    bson_iter_init(&it, reply);
    while (shl_iter_next(&it)) {
        if (strcmp(shl_iter_key(&it), "cursor") != 0 || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_append_iter(&out, NULL, 0, &it);
            continue;
        }
        BSON_APPEND_DOCUMENT_BEGIN(&out, "cursor", &sub);
        bson_iter_recurse(&it, &cur);
        while (shl_iter_next(&cur)) {
            bson_append_iter(&sub, NULL, 0, &cur);
        }
        bson_append_timestamp(&sub, "atClusterTime", -1, (uint32_t)(at >> 32),
                              (uint32_t)(at & 0xffffffffu));
        bson_append_document_end(&out, &sub);
    }
    bson_reinit(reply);
    bson_concat(reply, &out);
done:
    bson_destroy(&out);
}
