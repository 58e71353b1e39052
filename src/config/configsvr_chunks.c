/*
 * configsvr_chunks.c -- chunk boundary changes (docs/design/sharding-protocol.md; seeds/000
 * "Types of operations..."): _configsvrSplitChunk (at `middle`, or at the median the owning
 * shard's splitVector finds for `find`/`bounds`), _configsvrCommitChunksMerge and
 * _configsvrClearJumboFlag. The new chunks come from routing_table.h's plan_* helpers, so
 * the versions follow the shared bump rules; each commit is one applyOps, so readers and a
 * crash see the old chunks or the new ones, never a mix.
 */
#include <string.h>

#include "base/log.h"
#include "config/config_private.h"
#include "sharding/shard_key.h"

static void
append_chunk_info(bson_t *b, const char *key, const shl_chunk_type_t *c)
{
    bson_t sub;

    BSON_APPEND_DOCUMENT_BEGIN(b, key, &sub);
    BSON_APPEND_DOCUMENT(&sub, "min", c->min);
    BSON_APPEND_DOCUMENT(&sub, "max", c->max);
    BSON_APPEND_TIMESTAMP(&sub, "lastmod", c->version.major, c->version.minor);
    BSON_APPEND_OID(&sub, "lastmodEpoch", &c->version.epoch);
    shl_ts_append(&sub, "lastmodTimestamp", c->version.timestamp);
    bson_append_document_end(b, &sub);
}

/* Write 'n' chunks (each replacing the document with its _id, or inserted) and delete the
 * chunk documents 'gone', all in one applyOps. */
static int
commit_chunks(const shl_chunk_type_t *chunks, size_t n, const bson_oid_t *gone, size_t ngone,
              shl_status_t *st)
{
    cfg_batch_t b;
    int ret;

    cfg_batch_init(&b);
    for (size_t i = 0; i < n; i++) {
        bson_t doc;
        shl_chunk_type_to_config_bson(&chunks[i], &doc);
        cfg_batch_upsert(&b, "chunks", &doc);
        bson_destroy(&doc);
    }
    for (size_t i = 0; i < ngone; i++) {
        bson_value_t id = {.value_type = BSON_TYPE_OID};
        bson_oid_copy(&gone[i], &id.value.v_oid);
        cfg_batch_delete(&b, "chunks", &id);
    }
    ret = cfg_batch_commit(&b, st);
    cfg_batch_cleanup(&b);
    return ret;
}

/* The shard key a `find` query pins, in pattern order (hashed fields hashed). */
static int
key_from_find(const shl_routing_table_t *rt, const bson_t *find, bson_t *key, shl_status_t *st)
{
    int ret = 0;

    if (!shl_shard_key_extract_from_query(shl_routing_table_key_pattern(rt), find, key)) {
        char *s = bson_as_relaxed_extended_json(find, NULL);
        ret = shl_status_set(st, SHL_CODE_SHARD_KEY_NOT_FOUND,
                             "no shard key found in chunk query %s", s);
        bson_free(s);
    }
    return ret;
}

/* The two documents of a `bounds: [min, max]` field as views. */
static int
parse_bounds(const bson_t *cmd, const char *ctx, bson_t *min, bson_t *max, bool *has,
             shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, arr;
    bson_t *outs[2] = {min, max};
    int k = 0;

    *has = false;
    if (!bson_iter_init_find(&it, cmd, "bounds")) {
        goto done;
    }
    if (!BSON_ITER_HOLDS_ARRAY(&it)) {
        SHL_ERR(shl_idl_wrong_type(&it, ctx, "array", st));
    }
    bson_iter_recurse(&it, &arr);
    while (bson_iter_next(&arr)) {
        const uint8_t *data;
        uint32_t len;
        if (k >= 2 || !BSON_ITER_HOLDS_DOCUMENT(&arr)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "invalid bounds: must be an array of two documents");
        }
        bson_iter_document(&arr, &len, &data);
        if (!bson_init_static(outs[k], data, len)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "invalid bounds");
        }
        k++;
    }
    if (k != 2) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "invalid bounds: must be an array of two documents");
    }
    *has = true;
done:
    return ret;
}

/* The index of the chunk exactly [min, max) (both given in any field order). */
static int
chunk_with_bounds(const shl_routing_table_t *rt, const bson_t *min, const bson_t *max, size_t *idx,
                  shl_status_t *st)
{
    int ret = 0;
    const shl_shard_key_pattern_t *p = shl_routing_table_key_pattern(rt);
    bson_t nmin = BSON_INITIALIZER, nmax = BSON_INITIALIZER, cmin, cmax;
    bool ok;

    bson_destroy(&nmin);
    bson_destroy(&nmax);
    ok = shl_shard_key_normalize(p, min, &nmin);
    ok = shl_shard_key_normalize(p, max, &nmax) && ok;
    if (!ok) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "bounds are not shard keys of %s",
                 shl_routing_table_ns(rt));
    }
    if (shl_routing_table_find_chunk(rt, &nmin, idx, st) != 0) {
        shl_status_clear(st);
        goto notfound;
    }
    shl_routing_table_chunk_bounds(rt, *idx, &cmin, &cmax);
    if (shl_shard_key_compare(&cmin, &nmin) == 0 && shl_shard_key_compare(&cmax, &nmax) == 0) {
        goto done;
    }
notfound : {
    char *a = bson_as_relaxed_extended_json(min, NULL);
    char *b = bson_as_relaxed_extended_json(max, NULL);
    ret = shl_status_set(st, SHL_CODE_INVALID_OPTIONS,
                         "no chunk found with the shard key bounds [%s, %s)", a, b);
    bson_free(a);
    bson_free(b);
}
done:
    bson_destroy(&nmin);
    bson_destroy(&nmax);
    return ret;
}

/* The median key of chunk idx from its shard's splitVector (force: true). */
static int
median_of_chunk(const shl_routing_table_t *rt, size_t idx, bson_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply, cmin, cmax;
    bson_iter_t it, arr;
    const char *shard = shl_routing_table_chunk_shard(rt, idx);

    bson_init(out);
    shl_routing_table_chunk_bounds(rt, idx, &cmin, &cmax);
    BSON_APPEND_UTF8(&cmd, "splitVector", shl_routing_table_ns(rt));
    BSON_APPEND_DOCUMENT(&cmd, "keyPattern", &shl_routing_table_key_pattern(rt)->pattern);
    BSON_APPEND_DOCUMENT(&cmd, "min", &cmin);
    BSON_APPEND_DOCUMENT(&cmd, "max", &cmax);
    BSON_APPEND_BOOL(&cmd, "force", true);
    SHL_ERR(cfg_shard_cmd(shard, "admin", &cmd, &reply, st));
    if (!bson_iter_init_find(&it, &reply, "splitKeys") || !bson_iter_recurse(&it, &arr) ||
        !bson_iter_next(&arr) || !BSON_ITER_HOLDS_DOCUMENT(&arr)) {
        char *a = bson_as_relaxed_extended_json(&cmin, NULL);
        char *b = bson_as_relaxed_extended_json(&cmax, NULL);
        ret = shl_status_set(st, SHL_CODE_CANNOT_SPLIT,
                             "chunk [%s, %s) could not be split: no split point found "
                             "(is the chunk empty or a single key?)",
                             a, b);
        bson_free(a);
        bson_free(b);
        goto done;
    }
    {
        const uint8_t *data;
        uint32_t len;
        bson_t view;
        bson_iter_document(&arr, &len, &data);
        if (bson_init_static(&view, data, len)) {
            bson_destroy(out);
            bson_copy_to(&view, out);
        }
    }
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

static int
cmd_split_chunk(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *ns = NULL;
    bson_t middle, find, bmin, bmax, point = BSON_INITIALIZER, cmin, cmax, details;
    bool has_middle = false, has_find = false, has_bounds = false, locked = false;
    shl_routing_table_t *rt = NULL;
    size_t idx = 0, nout = 0;
    shl_chunk_type_t *out = NULL, before;
    const bson_t *points[1] = {&point};
    const char *shard;

    (void)reply;
    bson_init(&details);
    memset(&before, 0, sizeof(before));
    SHL_ERR(cfg_cmd_string(cmd, &ns, st));
    SHL_ERR(cfg_doc_field(cmd, "middle", &middle, &has_middle, st));
    SHL_ERR(cfg_doc_field(cmd, "find", &find, &has_find, st));
    SHL_ERR(parse_bounds(cmd, "_configsvrSplitChunk", &bmin, &bmax, &has_bounds, st));
    if ((int)has_middle + (int)has_find + (int)has_bounds != 1) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "need to specify exactly one of find, bounds, or middle");
    }
    cfg_lock_ns(ns);
    locked = true;
    SHL_ERR(cfg_load_routing_table(ns, NULL, &rt, st));
    bson_destroy(&point);
    if (has_middle) {
        if (!shl_shard_key_normalize(shl_routing_table_key_pattern(rt), &middle, &point)) {
            char *s = bson_as_relaxed_extended_json(&middle, NULL);
            ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                                 "split failed :: middle %s is not a shard key of %s", s, ns);
            bson_free(s);
            goto done;
        }
        SHL_ERR(shl_shard_key_check_storage(&point, st));
        SHL_ERR(shl_routing_table_find_chunk(rt, &point, &idx, st));
    } else {
        if (has_find) {
            bson_t key;
            SHL_ERR(key_from_find(rt, &find, &key, st));
            ret = shl_routing_table_find_chunk(rt, &key, &idx, st);
            bson_destroy(&key);
            if (ret != 0) {
                goto done;
            }
        } else {
            SHL_ERR(chunk_with_bounds(rt, &bmin, &bmax, &idx, st));
        }
        SHL_ERR(median_of_chunk(rt, idx, &point, st));
    }
    shl_routing_table_chunk_bounds(rt, idx, &cmin, &cmax);
    shl_routing_table_chunk_to_type(rt, idx, &before);
    SHL_ERR(shl_routing_table_plan_split(rt, &cmin, points, 1, &out, &nout, st));
    /* The first piece keeps the old document's _id; the others are new. One applyOps:
     * readers and a crash see the old chunk or all the new ones. */
    out[0].has_id = true;
    out[0].id = before.id;
    for (size_t i = 1; i < nout; i++) {
        out[i].has_id = true;
        bson_oid_init(&out[i].id, NULL);
    }
    SHL_ERR(commit_chunks(out, nout, NULL, 0, st));

    shard = before.shard;
    append_chunk_info(&details, "before", &before);
    append_chunk_info(&details, "left", &out[0]);
    append_chunk_info(&details, "right", &out[nout - 1]);
    BSON_APPEND_UTF8(&details, "owningShard", shard);
    cfg_changelog(op, "split", ns, &details);
    cfg_flush_shards(ns, &shard, 1);
done:
    if (locked) {
        cfg_unlock_ns(ns);
    }
    if (out != NULL) {
        shl_chunk_types_free(out, nout);
    }
    shl_chunk_type_cleanup(&before);
    if (rt != NULL) {
        shl_routing_table_release(rt);
    }
    bson_destroy(&point);
    bson_destroy(&details);
    return ret;
}

static int
cmd_merge_chunks(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *ns = NULL, *shard = NULL;
    bson_t bmin, bmax, nmin = BSON_INITIALIZER, nmax = BSON_INITIALIZER, details;
    bool has_bounds = false, locked = false, planned = false;
    shl_routing_table_t *rt = NULL;
    shl_chunk_type_t merged, first;
    size_t idx = 0, nmerged = 0;
    const shl_shard_key_pattern_t *p;

    (void)reply;
    bson_init(&details);
    memset(&merged, 0, sizeof(merged));
    memset(&first, 0, sizeof(first));
    SHL_ERR(cfg_cmd_string(cmd, &ns, st));
    SHL_ERR(parse_bounds(cmd, "_configsvrCommitChunksMerge", &bmin, &bmax, &has_bounds, st));
    if (!has_bounds) {
        SHL_ERR(shl_idl_missing("_configsvrCommitChunksMerge", "bounds", st));
    }
    cfg_lock_ns(ns);
    locked = true;
    SHL_ERR(cfg_load_routing_table(ns, NULL, &rt, st));
    p = shl_routing_table_key_pattern(rt);
    bson_destroy(&nmin);
    bson_destroy(&nmax);
    if (!shl_shard_key_normalize(p, &bmin, &nmin) || !shl_shard_key_normalize(p, &bmax, &nmax)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "the bounds of mergeChunks are not shard keys of %s", ns);
    }
    SHL_ERR(shl_routing_table_plan_merge(rt, &nmin, &nmax, cfg_fresh_ts(), &merged, st));
    planned = true;
    SHL_ERR(shl_routing_table_find_chunk(rt, &nmin, &idx, st));
    shl_routing_table_chunk_to_type(rt, idx, &first);
    merged.has_id = true;
    merged.id = first.id;
    /* The first chunk grows over the range and the others go, in one applyOps. */
    {
        size_t cap = shl_routing_table_nchunks(rt), ngone = 0;
        bson_oid_t *gone = bson_malloc0((cap + 1) * sizeof(bson_oid_t));
        for (size_t i = idx + 1; i < cap; i++) {
            bson_t cmin, cmax;
            shl_chunk_type_t c;
            shl_routing_table_chunk_bounds(rt, i, &cmin, &cmax);
            if (shl_shard_key_compare(&cmin, &nmax) >= 0) {
                break;
            }
            shl_routing_table_chunk_to_type(rt, i, &c);
            gone[ngone++] = c.id;
            shl_chunk_type_cleanup(&c);
            nmerged++;
        }
        ret = commit_chunks(&merged, 1, gone, ngone, st);
        bson_free(gone);
        SHL_ERR(ret);
    }
    shard = merged.shard;
    BSON_APPEND_DOCUMENT(&details, "min", &nmin);
    BSON_APPEND_DOCUMENT(&details, "max", &nmax);
    BSON_APPEND_INT64(&details, "mergedChunks", (int64_t)(nmerged + 1));
    BSON_APPEND_TIMESTAMP(&details, "mergedVersion", merged.version.major, merged.version.minor);
    BSON_APPEND_UTF8(&details, "owningShard", shard);
    cfg_changelog(op, "merge", ns, &details);
    cfg_flush_shards(ns, &shard, 1);
done:
    if (locked) {
        cfg_unlock_ns(ns);
    }
    if (planned) {
        shl_chunk_type_cleanup(&merged);
    }
    shl_chunk_type_cleanup(&first);
    if (rt != NULL) {
        shl_routing_table_release(rt);
    }
    bson_destroy(&nmin);
    bson_destroy(&nmax);
    bson_destroy(&details);
    return ret;
}

static int
cmd_clear_jumbo(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *ns = NULL, *shard = NULL;
    bson_t find, bmin, bmax, details = BSON_INITIALIZER;
    bool has_find = false, has_bounds = false, locked = false;
    shl_routing_table_t *rt = NULL;
    size_t idx = 0;
    shl_chunk_type_t c;

    (void)reply;
    memset(&c, 0, sizeof(c));
    SHL_ERR(cfg_cmd_string(cmd, &ns, st));
    SHL_ERR(cfg_doc_field(cmd, "find", &find, &has_find, st));
    SHL_ERR(parse_bounds(cmd, "_configsvrClearJumboFlag", &bmin, &bmax, &has_bounds, st));
    if ((int)has_find + (int)has_bounds != 1) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "need to specify exactly one of find or bounds");
    }
    cfg_lock_ns(ns);
    locked = true;
    SHL_ERR(cfg_load_routing_table(ns, NULL, &rt, st));
    if (has_find) {
        bson_t key;
        SHL_ERR(key_from_find(rt, &find, &key, st));
        ret = shl_routing_table_find_chunk(rt, &key, &idx, st);
        bson_destroy(&key);
        if (ret != 0) {
            goto done;
        }
    } else {
        SHL_ERR(chunk_with_bounds(rt, &bmin, &bmax, &idx, st));
    }
    shl_routing_table_chunk_to_type(rt, idx, &c);
    if (!c.jumbo) {
        goto done; /* nothing to clear */
    }
    {
        /* Clearing bumps the chunk's minor past the collection version, so routers and the
         * shard notice the change. */
        shl_chunk_version_t cv = shl_routing_table_collection_version(rt);
        SHL_ERR(shl_chunk_version_inc_minor(&cv, st));
        c.jumbo = false;
        c.version = cv;
        SHL_ERR(commit_chunks(&c, 1, NULL, 0, st));
    }
    shard = c.shard;
    BSON_APPEND_DOCUMENT(&details, "min", c.min);
    BSON_APPEND_DOCUMENT(&details, "max", c.max);
    cfg_changelog(op, "clearJumboFlag", ns, &details);
    cfg_flush_shards(ns, &shard, 1);
done:
    if (locked) {
        cfg_unlock_ns(ns);
    }
    shl_chunk_type_cleanup(&c);
    if (rt != NULL) {
        shl_routing_table_release(rt);
    }
    bson_destroy(&details);
    return ret;
}

static const shl_command_t split_chunk_cmd = {
    .name = "_configsvrSplitChunk",
    .run = cmd_split_chunk,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "split a chunk at middle, or at the median for find/bounds (config server)",
};
static const shl_command_t merge_chunks_cmd = {
    .name = "_configsvrCommitChunksMerge",
    .run = cmd_merge_chunks,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "merge the contiguous chunks of one shard covering bounds (config server)",
};
static const shl_command_t clear_jumbo_cmd = {
    .name = "_configsvrClearJumboFlag",
    .run = cmd_clear_jumbo,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "clear a chunk's jumbo flag (config server)",
};

void
cfg_register_chunk_commands(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &split_chunk_cmd);
    shl_command_registry_add(reg, &merge_chunks_cmd);
    shl_command_registry_add(reg, &clear_jumbo_cmd);
}
