/*
 * cluster_views.c -- reads of a view through the router. A view lives on its database's
 * primary shard, which runs reads of a view on an unsharded collection itself; for a view on
 * a sharded collection (and any explain of a view) it answers
 * CommandOnShardedViewNotSupportedOnMongod (169) with `resolvedView: {ns, pipeline,
 * collation}`, and the router runs the read again as that view's aggregate over the cluster,
 * as mongos does. See docs/design/views.md.
 */
#include <string.h>

#include "base/clock.h"
#include "bson/bson_iter.h"
#include "net/command_args.h"
#include "query/view_rewrite.h"
#include "router/router_private.h"

/* The resolvedView of a 169 status into 'rv' (a view of the status; valid while 'st' is). */
static bool
resolved_view(const shl_status_t *st, bson_t *rv)
{
    bson_t extra;
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    if (st->code != SHL_CODE_COMMAND_ON_SHARDED_VIEW_NOT_SUPPORTED_ON_MONGOD ||
        !shl_status_extra_get(st, &extra) || !bson_iter_init_find(&it, &extra, "resolvedView") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return false;
    }
    bson_iter_document(&it, &len, &data);
    return bson_init_static(rv, data, len);
}

int
router_view_retry(shl_op_ctx_t *op, const bson_t *cmd, int ret, bson_t *reply, shl_status_t *st)
{
    bson_t rv, pipeline, collation, user = BSON_INITIALIZER, agg = BSON_INITIALIZER,
                                    agg_reply = BSON_INITIALIZER, copy = BSON_INITIALIZER;
    bson_iter_t it;
    const char *ns = NULL, *dot, *name = shl_cmd_name(cmd);
    bool explain = strcmp(name, "explain") == 0, has_coll = false;
    char view_ns[SHL_NS_MAX + 1];

    if (ret == 0 || !resolved_view(st, &rv)) {
        goto done;
    }
    /* The status owns the resolved view: copy it before the status is reused. */
    bson_copy_to(&rv, &copy);
    bson_init(&pipeline);
    if (bson_iter_init_find(&it, &copy, "ns") && BSON_ITER_HOLDS_UTF8(&it)) {
        ns = bson_iter_utf8(&it, NULL);
    }
    if (ns == NULL || (dot = strchr(ns, '.')) == NULL) {
        goto done; /* not a resolved view this router understands: the shard's error stands */
    }
    if (bson_iter_init_find(&it, &copy, "pipeline") && BSON_ITER_HOLDS_ARRAY(&it)) {
        const uint8_t *data;
        uint32_t len;
        bson_iter_array(&it, &len, &data);
        bson_init_static(&pipeline, data, len);
    }
    if (bson_iter_init_find(&it, &copy, "collation") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&collation, data, len);
        has_coll = true;
    }
    if (explain) {
        /* explain: {<read>}: the read's aggregate, explained. */
        bson_t inner;
        bool found = false;
        if (shl_cmd_get_doc(cmd, "explain", &inner, &found, st) != 0 || !found) {
            goto done;
        }
        bson_concat(&user, &inner);
        name = shl_cmd_name(&inner);
    } else {
        bson_concat(&user, cmd);
    }
    snprintf(view_ns, sizeof(view_ns), "%s.%s", op->db, bson_iter_init(&it, &user) &&
             shl_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "");
    shl_status_clear(st);
    ret = shl_view_aggregate_cmd(&user, dot + 1, &pipeline, has_coll ? &collation : NULL, &agg,
                                 st);
    if (ret != 0) {
        goto done;
    }
    if (explain) {
        BSON_APPEND_BOOL(&agg, "explain", true);
    }
    ret = router_aggregate_run(op, &agg, view_ns, &agg_reply, st);
    if (ret == 0) {
        bson_reinit(reply);
        ret = shl_view_reply(explain ? "aggregate" : name, &agg_reply, reply, st);
    }
done:
    bson_destroy(&copy);
    bson_destroy(&user);
    bson_destroy(&agg);
    bson_destroy(&agg_reply);
    return ret;
}

void
router_runtime_constants(shl_op_ctx_t *op, int64_t *now_ms, uint64_t *cluster_time)
{
    shl_router_t *r = shl_router_get(op);
    *now_ms = shl_clock_wall_ms();
    *cluster_time = shl_vector_clock_get(&r->clock, SHL_VC_CLUSTER_TIME);
}

void
router_append_runtime_constants(int64_t now_ms, uint64_t cluster_time, bson_t *cmd)
{
    bson_t rc;
    if (now_ms == 0) {
        return; /* none taken for this command */
    }
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "legacyRuntimeConstants", &rc);
    BSON_APPEND_DATE_TIME(&rc, "localNow", now_ms);
    if (cluster_time != 0) {
        BSON_APPEND_TIMESTAMP(&rc, "clusterTime", (uint32_t)(cluster_time >> 32),
                              (uint32_t)cluster_time);
    }
    bson_append_document_end(cmd, &rc);
}

int
router_view_foreign(shl_op_ctx_t *op, const char *coll, const bson_t *filter, const bson_t *generic,
                    bson_t *reply, int64_t *cursor_id, shl_status_t *st)
{
    int ret = 0;
    bson_t agg = BSON_INITIALIZER, arr, stage, cursor;
    bson_iter_t it;

    BSON_APPEND_UTF8(&agg, "aggregate", coll);
    BSON_APPEND_ARRAY_BEGIN(&agg, "pipeline", &arr);
    if (filter != NULL) {
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &stage);
        BSON_APPEND_DOCUMENT(&stage, "$match", filter);
        bson_append_document_end(&arr, &stage);
    }
    bson_append_array_end(&agg, &arr);
    /* The default first batch; the rest is read from the router cursor as it is needed. */
    BSON_APPEND_DOCUMENT_BEGIN(&agg, "cursor", &cursor);
    bson_append_document_end(&agg, &cursor);
    bson_concat(&agg, generic);
    *cursor_id = 0;
    ret = router_view_retry(op, &agg, st->code, reply, st);
    if (ret == 0 && bson_iter_init(&it, reply) &&
        bson_iter_find_descendant(&it, "cursor.id", &it)) {
        *cursor_id = bson_iter_as_int64(&it);
    }
    if (ret == 0 &&
        (!bson_iter_init(&it, reply) || !bson_iter_find_descendant(&it, "cursor.firstBatch", &it) ||
         !BSON_ITER_HOLDS_ARRAY(&it))) {
        ret = shl_status_set(st, SHL_CODE_INTERNAL_ERROR, "view %s: a reply without a batch", coll);
    }
    if (ret != 0 && *cursor_id != 0) {
        char ns[SHL_NS_MAX + 1];
        int w = snprintf(ns, sizeof(ns), "%s.%s", op->db, coll);
        if (w > 0 && (size_t)w < sizeof(ns)) {
            shl_router_cursor_manager_kill(shl_router_get(op)->cursors, *cursor_id, ns);
        }
        *cursor_id = 0;
    }
    bson_destroy(&agg);
    return ret;
}
