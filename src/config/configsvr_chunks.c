/*
 * configsvr_chunks.c -- chunk boundary changes (docs/design/sharding-protocol.md; seeds/000
 * "Types of operations..."): _configsvrSplitChunk (at `middle`, or at the median the owning
 * shard's splitVector finds for `find`/`bounds`), _configsvrCommitChunksMerge and
 * _configsvrClearJumboFlag. The new chunks come from routing_table.h's plan_* helpers, so
 * the versions follow the shared bump rules; each commit is one applyOps, so readers and a
 * crash see the old chunks or the new ones, never a mix.
 */
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/command_args.h"
#include "config/balancer_private.h"
#include "config/config_private.h"
#include "sharding/shard_key.h"
#include "storage/storage.h"

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

/* A namespace's routing table, loaded under the namespace's config mutex (cfg_lock_ns). */
typedef struct {
    const char *ns;
    bool locked; /* the mutex is held */
    shl_routing_table_t *rt;
} locked_table_t;

/* Take ns's mutex, then load its routing table into lt (release with locked_table_release,
 * also on error). */
static int
locked_table_load(const char *ns, locked_table_t *lt, shl_status_t *st)
{
    lt->ns = ns;
    cfg_lock_ns(ns);
    lt->locked = true;
    return cfg_load_routing_table(ns, NULL, &lt->rt, st);
}

/* Let go of the mutex (if still held). */
static void
locked_table_unlock(locked_table_t *lt)
{
    if (lt->locked) {
        cfg_unlock_ns(lt->ns);
        lt->locked = false;
    }
}

static void
locked_table_release(locked_table_t *lt)
{
    locked_table_unlock(lt);
    if (lt->rt != NULL) {
        shl_routing_table_release(lt->rt);
        lt->rt = NULL;
    }
}

/*
 * Chunk idx of rt split at points[0..n) (normalized shard keys strictly inside it) and
 * committed in one applyOps: the first piece keeps the chunk's _id, the others get new ones,
 * so readers and a crash see the old chunk or all the new ones. *before gets the chunk as it
 * was (shl_chunk_type_cleanup); *out and *nout the pieces (shl_chunk_types_free when non-NULL).
 */
static int
commit_split(const shl_routing_table_t *rt, size_t idx, const bson_t *const *points, size_t n,
             shl_chunk_type_t *before, shl_chunk_type_t **out, size_t *nout, shl_status_t *st)
{
    int ret = 0;
    bson_t cmin, cmax;

    shl_routing_table_chunk_bounds(rt, idx, &cmin, &cmax);
    shl_routing_table_chunk_to_type(rt, idx, before);
    SHL_ERR(shl_routing_table_plan_split(rt, &cmin, points, n, out, nout, st));
    (*out)[0].has_id = true;
    (*out)[0].id = before->id;
    for (size_t i = 1; i < *nout; i++) {
        (*out)[i].has_id = true;
        bson_oid_init(&(*out)[i].id, NULL);
    }
    SHL_ERR(commit_chunks(*out, *nout, NULL, 0, st));
done:
    return ret;
}

/* The changelog details of a split in two: before, left, right, owningShard. */
static void
append_split_details(bson_t *details, const shl_chunk_type_t *before,
                     const shl_chunk_type_t *out, size_t nout)
{
    append_chunk_info(details, "before", before);
    append_chunk_info(details, "left", &out[0]);
    append_chunk_info(details, "right", &out[nout - 1]);
    BSON_APPEND_UTF8(details, "owningShard", before->shard);
}

/*
 * Chunk idx's jumbo flag set to 'jumbo', with a minor version past the collection version so
 * routers and the shard notice. *c gets the chunk (shl_chunk_type_cleanup); *changed is false
 * when the flag was so already (nothing written).
 */
static int
commit_jumbo_flag(const shl_routing_table_t *rt, size_t idx, bool jumbo, shl_chunk_type_t *c,
                  bool *changed, shl_status_t *st)
{
    int ret = 0;
    shl_chunk_version_t cv = shl_routing_table_collection_version(rt);

    shl_routing_table_chunk_to_type(rt, idx, c);
    *changed = c->jumbo != jumbo;
    if (*changed) {
        SHL_ERR(shl_chunk_version_inc_minor(&cv, st));
        c->jumbo = jumbo;
        c->version = cv;
        SHL_ERR(commit_chunks(c, 1, NULL, 0, st));
    }
done:
    return ret;
}

/* The shard key a `find` query pins, in pattern order (hashed fields hashed). */
static int
key_from_find(const shl_routing_table_t *rt, const bson_t *find, bson_t *key, shl_status_t *st)
{
    int ret = 0;

    if (!shl_shard_key_extract_from_query(shl_routing_table_key_pattern(rt), find, key)) {
        char *s = shl_bson_as_json(find);
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
    while (shl_iter_next(&arr)) {
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
    char *a = shl_bson_as_json(min);
    char *b = shl_bson_as_json(max);
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

/* The chunk a command names by `find` (the chunk holding the shard key it pins; find non-NULL)
 * or by `bounds` [bmin, bmax) (exactly that chunk): *idx. */
static int
chunk_named(const shl_routing_table_t *rt, const bson_t *find, const bson_t *bmin,
            const bson_t *bmax, size_t *idx, shl_status_t *st)
{
    int ret = 0;
    bson_t key = BSON_INITIALIZER;

    if (find != NULL) {
        bson_destroy(&key);
        SHL_ERR(key_from_find(rt, find, &key, st));
        SHL_ERR(shl_routing_table_find_chunk(rt, &key, idx, st));
    } else {
        SHL_ERR(chunk_with_bounds(rt, bmin, bmax, idx, st));
    }
done:
    bson_destroy(&key);
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
    SHL_ERR(shl_remote_run_shard(&cfg_get()->remote, shard, "admin", &cmd, &cfg_remote_opts, &reply, st));
    if (!bson_iter_init_find(&it, &reply, "splitKeys") || !bson_iter_recurse(&it, &arr) ||
        !shl_iter_next(&arr) || !BSON_ITER_HOLDS_DOCUMENT(&arr)) {
        char *a = shl_bson_as_json(&cmin);
        char *b = shl_bson_as_json(&cmax);
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
    bson_t middle, find, bmin, bmax, point = BSON_INITIALIZER, details = BSON_INITIALIZER;
    bool has_middle = false, has_find = false, has_bounds = false;
    locked_table_t lt = {0};
    size_t idx = 0, nout = 0;
    shl_chunk_type_t *out = NULL, before;
    const bson_t *points[1] = {&point};
    const char *shard;

    (void)reply;
    memset(&before, 0, sizeof(before));
    SHL_ERR(cfg_cmd_string(cmd, &ns, st));
    SHL_ERR(cfg_doc_field(cmd, "middle", &middle, &has_middle, st));
    SHL_ERR(cfg_doc_field(cmd, "find", &find, &has_find, st));
    SHL_ERR(parse_bounds(cmd, "_configsvrSplitChunk", &bmin, &bmax, &has_bounds, st));
    if ((int)has_middle + (int)has_find + (int)has_bounds != 1) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "need to specify exactly one of find, bounds, or middle");
    }
    SHL_ERR(locked_table_load(ns, &lt, st));
    bson_destroy(&point);
    if (has_middle) {
        if (!shl_shard_key_normalize(shl_routing_table_key_pattern(lt.rt), &middle, &point)) {
            char *s = shl_bson_as_json(&middle);
            ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                                 "split failed :: middle %s is not a shard key of %s", s, ns);
            bson_free(s);
            goto done;
        }
        SHL_ERR(shl_shard_key_check_storage(&point, st));
        SHL_ERR(shl_routing_table_find_chunk(lt.rt, &point, &idx, st));
    } else {
        bson_init(&point);
        SHL_ERR(chunk_named(lt.rt, has_find ? &find : NULL, &bmin, &bmax, &idx, st));
        bson_destroy(&point);
        SHL_ERR(median_of_chunk(lt.rt, idx, &point, st));
    }
    SHL_ERR(commit_split(lt.rt, idx, points, 1, &before, &out, &nout, st));
    shard = before.shard;
    append_split_details(&details, &before, out, nout);
    cfg_changelog(op, "split", ns, &details);
    cfg_flush_shards(ns, &shard, 1);
done:
    locked_table_release(&lt);
    if (out != NULL) {
        shl_chunk_types_free(out, nout);
    }
    shl_chunk_type_cleanup(&before);
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
    bool has_bounds = false, planned = false;
    locked_table_t lt = {0};
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
    SHL_ERR(locked_table_load(ns, &lt, st));
    p = shl_routing_table_key_pattern(lt.rt);
    bson_destroy(&nmin);
    bson_destroy(&nmax);
    if (!shl_shard_key_normalize(p, &bmin, &nmin) || !shl_shard_key_normalize(p, &bmax, &nmax)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "the bounds of mergeChunks are not shard keys of %s", ns);
    }
    SHL_ERR(shl_routing_table_plan_merge(lt.rt, &nmin, &nmax, SHL_TS_NULL, &merged, st));
    planned = true;
    SHL_ERR(shl_routing_table_find_chunk(lt.rt, &nmin, &idx, st));
    shl_routing_table_chunk_to_type(lt.rt, idx, &first);
    merged.has_id = true;
    merged.id = first.id;
    /* The first chunk grows over the range and the others go, in one applyOps. */
    {
        size_t cap = shl_routing_table_nchunks(lt.rt), ngone = 0;
        bson_oid_t *gone = bson_malloc0((cap + 1) * sizeof(bson_oid_t));
        for (size_t i = idx + 1; i < cap; i++) {
            bson_t cmin, cmax;
            shl_chunk_type_t c;
            shl_routing_table_chunk_bounds(lt.rt, i, &cmin, &cmax);
            if (shl_shard_key_compare(&cmin, &nmax) >= 0) {
                break;
            }
            shl_routing_table_chunk_to_type(lt.rt, i, &c);
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
    locked_table_release(&lt);
    if (planned) {
        shl_chunk_type_cleanup(&merged);
    }
    shl_chunk_type_cleanup(&first);
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
    bool has_find = false, has_bounds = false, changed = false;
    locked_table_t lt = {0};
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
    SHL_ERR(locked_table_load(ns, &lt, st));
    SHL_ERR(chunk_named(lt.rt, has_find ? &find : NULL, &bmin, &bmax, &idx, st));
    SHL_ERR(commit_jumbo_flag(lt.rt, idx, false, &c, &changed, st));
    if (!changed) {
        goto done;
    }
    shard = c.shard;
    BSON_APPEND_DOCUMENT(&details, "min", c.min);
    BSON_APPEND_DOCUMENT(&details, "max", c.max);
    cfg_changelog(op, "clearJumboFlag", ns, &details);
    cfg_flush_shards(ns, &shard, 1);
done:
    locked_table_release(&lt);
    shl_chunk_type_cleanup(&c);
    bson_destroy(&details);
    return ret;
}

/* ---------------------------------------------------------------- the ChunkSplitter */

/* The chunk [min, max) of the command (fields `min`, `max`), owned by the command's
 * `shard`: *idx. Errors: as chunk_with_bounds; StaleConfig-like InvalidOptions when the
 * chunk is on another shard now (the shard's auto-split then drops its task). */
static int
splitter_chunk(const shl_routing_table_t *rt, const bson_t *cmd, const char *ctx, size_t *idx,
               shl_status_t *st)
{
    int ret = 0;
    bson_t min, max;
    bool has_min = false, has_max = false;
    bson_iter_t it;

    SHL_ERR(cfg_doc_field(cmd, "min", &min, &has_min, st));
    SHL_ERR(cfg_doc_field(cmd, "max", &max, &has_max, st));
    if (!has_min || !has_max) {
        SHL_ERR(shl_idl_missing(ctx, has_min ? "max" : "min", st));
    }
    SHL_ERR(chunk_with_bounds(rt, &min, &max, idx, st));
    if (bson_iter_init_find(&it, cmd, "shard") && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), shl_routing_table_chunk_shard(rt, *idx)) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "the chunk is owned by %s, not by %s",
                 shl_routing_table_chunk_shard(rt, *idx), bson_iter_utf8(&it, NULL));
    }
done:
    return ret;
}

/*
 * _configsvrCommitChunkSplit {ns, min, max, splitPoints: [key...], shard}: what a shard's
 * ChunkSplitter sends (MongoDB's command of that name): the chunk exactly [min, max), owned
 * by `shard`, becomes splitPoints.length + 1 chunks in one applyOps; changelog "split" for
 * one point, "multi-split" for more. Errors: those of plan_split; InvalidOptions when the
 * chunk is gone or moved.
 */
static int
cmd_commit_chunk_split(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *ns = NULL;
    locked_table_t lt = {0};
    size_t idx = 0, nout = 0, npoints = 0;
    shl_chunk_type_t *out = NULL, before;
    bson_t *keys = NULL, details = BSON_INITIALIZER;
    const bson_t **points = NULL;
    bson_iter_t it, arr;
    const char *shard;

    (void)reply;
    memset(&before, 0, sizeof(before));
    SHL_ERR(cfg_cmd_string(cmd, &ns, st));
    if (!bson_iter_init_find(&it, cmd, "splitPoints") || !BSON_ITER_HOLDS_ARRAY(&it)) {
        SHL_ERR(shl_idl_missing("_configsvrCommitChunkSplit", "splitPoints", st));
    }
    SHL_ERR(locked_table_load(ns, &lt, st));
    SHL_ERR(splitter_chunk(lt.rt, cmd, "_configsvrCommitChunkSplit", &idx, st));
    bson_iter_recurse(&it, &arr);
    {
        bson_iter_t cnt = arr;
        size_t n = 0;
        while (shl_iter_next(&cnt)) {
            n++;
        }
        keys = bson_malloc0(sizeof(bson_t) * (n + 1));
        points = bson_malloc0(sizeof(*points) * (n + 1));
    }
    while (shl_iter_next(&arr)) {
        const uint8_t *data;
        uint32_t len;
        bson_t view;
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "splitPoints must hold documents");
        }
        bson_iter_document(&arr, &len, &data);
        if (!bson_init_static(&view, data, len)) {
            bson_init(&keys[npoints++]);
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "a split point is not a document");
        }
        if (!shl_shard_key_normalize(shl_routing_table_key_pattern(lt.rt), &view, &keys[npoints])) {
            npoints++;
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "a split point is not a shard key of %s", ns);
        }
        points[npoints] = &keys[npoints];
        npoints++;
    }
    if (npoints == 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "no split points given");
    }
    SHL_ERR(commit_split(lt.rt, idx, points, npoints, &before, &out, &nout, st));
    shard = before.shard;
    if (nout == 2) {
        append_split_details(&details, &before, out, nout);
        BSON_APPEND_BOOL(&details, "fromChunkSplitter", true);
        cfg_changelog(op, "split", ns, &details);
    } else {
        /* As MongoDB: one "multi-split" entry per new chunk, numbered. */
        for (size_t i = 0; i < nout; i++) {
            bson_reinit(&details);
            append_chunk_info(&details, "before", &before);
            BSON_APPEND_INT32(&details, "number", (int32_t)(i + 1));
            BSON_APPEND_INT32(&details, "of", (int32_t)nout);
            append_chunk_info(&details, "chunk", &out[i]);
            BSON_APPEND_UTF8(&details, "owningShard", shard);
            BSON_APPEND_BOOL(&details, "fromChunkSplitter", true);
            cfg_changelog(op, "multi-split", ns, &details);
        }
    }
    SHL_LOG_INFO(SHARDING, 4201601, "Committed an auto-split", "namespace", BCON_UTF8(ns),
                 "chunks", BCON_INT64((int64_t)nout), "shard", BCON_UTF8(shard));
done:
    locked_table_release(&lt);
    if (out != NULL) {
        shl_chunk_types_free(out, nout);
    }
    for (size_t i = 0; keys != NULL && i < npoints; i++) {
        bson_destroy(&keys[i]);
    }
    bson_free(keys);
    bson_free(points);
    shl_chunk_type_cleanup(&before);
    bson_destroy(&details);
    return ret;
}

/*
 * _configsvrMarkChunkJumbo {ns, min, max, shard}: a shard's ChunkSplitter found no split
 * point in a chunk larger than the maximum chunk size (all its documents share one shard
 * key): the chunk gets jumbo: true and a minor version bump, so the balancer passes it over
 * until clearJumboFlag. Shale's name (MongoDB sets the flag inside the config server).
 */
static int
cmd_mark_jumbo(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *ns = NULL;
    locked_table_t lt = {0};
    size_t idx = 0;
    shl_chunk_type_t c;
    bson_t details = BSON_INITIALIZER;
    bool changed = false;

    (void)reply;
    memset(&c, 0, sizeof(c));
    SHL_ERR(cfg_cmd_string(cmd, &ns, st));
    SHL_ERR(locked_table_load(ns, &lt, st));
    SHL_ERR(splitter_chunk(lt.rt, cmd, "_configsvrMarkChunkJumbo", &idx, st));
    SHL_ERR(commit_jumbo_flag(lt.rt, idx, true, &c, &changed, st));
    if (!changed) {
        goto done;
    }
    BSON_APPEND_DOCUMENT(&details, "min", c.min);
    BSON_APPEND_DOCUMENT(&details, "max", c.max);
    BSON_APPEND_UTF8(&details, "shard", c.shard);
    cfg_changelog(op, "markJumbo", ns, &details);
    SHL_LOG_INFO(SHARDING, 4201602, "Marked a chunk jumbo", "namespace", BCON_UTF8(ns), "shard",
                 BCON_UTF8(c.shard));
done:
    locked_table_release(&lt);
    shl_chunk_type_cleanup(&c);
    bson_destroy(&details);
    return ret;
}

/* ---------------------------------------------------------------- migrations */

/* The config server waits this long for a donor's migration (_shardsvrMoveRange). */
#define CFG_MIGRATION_TIMEOUT_MS (30 * 60 * 1000)

static const char *const move_range_fields[] = {"toShard",
                                                "min",
                                                "max",
                                                "find",
                                                "bounds",
                                                "waitForDelete",
                                                "forceJumbo",
                                                "secondaryThrottle",
                                                "maxChunkSizeBytes",
                                                "writeConcern",
                                                NULL};

/*
 * moveRange's range [min, max) (max NULL: up to the end of the chunk holding min) made one
 * chunk: the chunk holding min is split at min and/or max first when they are inside it
 * (changelog "split"), then *rt is reloaded. *idx gets the range's chunk. Errors:
 * BadValue (not shard keys), InvalidOptions (max beyond that chunk or not above min).
 */
static int
split_for_move(shl_op_ctx_t *op, const char *ns, shl_routing_table_t **rt, const bson_t *min,
               const bson_t *max, size_t *idx, shl_status_t *st)
{
    int ret = 0;
    const shl_shard_key_pattern_t *p = shl_routing_table_key_pattern(*rt);
    bson_t nmin = BSON_INITIALIZER, nmax = BSON_INITIALIZER, cmin, cmax, details;
    const bson_t *points[2];
    size_t npoints = 0, nout = 0;
    shl_chunk_type_t *out = NULL, before;

    bson_init(&details);
    memset(&before, 0, sizeof(before));
    bson_destroy(&nmin);
    bson_destroy(&nmax);
    if (!shl_shard_key_normalize(p, min, &nmin) ||
        (max != NULL && !shl_shard_key_normalize(p, max, &nmax))) {
        if (max == NULL) {
            bson_init(&nmax);
        }
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "the bounds of moveRange are not shard keys of %s", ns);
    }
    if (max == NULL) {
        bson_init(&nmax);
    }
    SHL_ERR(shl_routing_table_find_chunk(*rt, &nmin, idx, st));
    shl_routing_table_chunk_bounds(*rt, *idx, &cmin, &cmax);
    if (max != NULL &&
        (shl_shard_key_compare(&nmax, &nmin) <= 0 || shl_shard_key_compare(&nmax, &cmax) > 0)) {
        char *a = shl_bson_as_json(min);
        char *b = shl_bson_as_json(max);
        ret = shl_status_set(st, SHL_CODE_INVALID_OPTIONS,
                             "the range [%s, %s) of %s is not inside one chunk", a, b, ns);
        bson_free(a);
        bson_free(b);
        goto done;
    }
    if (shl_shard_key_compare(&cmin, &nmin) != 0) {
        points[npoints++] = &nmin;
    }
    if (max != NULL && shl_shard_key_compare(&nmax, &cmax) < 0) {
        points[npoints++] = &nmax;
    }
    if (npoints == 0) {
        goto done;
    }
    for (size_t i = 0; i < npoints; i++) {
        SHL_ERR(shl_shard_key_check_storage(points[i], st));
    }
    SHL_ERR(commit_split(*rt, *idx, points, npoints, &before, &out, &nout, st));
    append_split_details(&details, &before, out, nout);
    cfg_changelog(op, "split", ns, &details);
    {
        const char *shard = before.shard;
        cfg_flush_shards(ns, &shard, 1);
    }
    shl_routing_table_release(*rt);
    *rt = NULL;
    SHL_ERR(cfg_load_routing_table(ns, NULL, rt, st));
    SHL_ERR(shl_routing_table_find_chunk(*rt, &nmin, idx, st));
done:
    if (out != NULL) {
        shl_chunk_types_free(out, nout);
    }
    shl_chunk_type_cleanup(&before);
    bson_destroy(&nmin);
    bson_destroy(&nmax);
    bson_destroy(&details);
    return ret;
}

/* The balancer's chunk size when neither the collection nor config.settings sets one (MB). */
#define CFG_DEFAULT_CHUNK_SIZE_MB 128

int
cfg_max_chunk_size_bytes(const shl_collection_type_t *coll, int64_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_t *q = BCON_NEW("_id", BCON_UTF8("chunksize"));
    bson_t doc = BSON_INITIALIZER;
    bson_iter_t it;
    bool found = false;

    *out = (int64_t)CFG_DEFAULT_CHUNK_SIZE_MB * 1024 * 1024;
    if (coll != NULL && coll->has_max_chunk_size_bytes && coll->max_chunk_size_bytes > 0) {
        *out = coll->max_chunk_size_bytes;
        goto done;
    }
    bson_destroy(&doc);
    SHL_ERR(cfg_find_one("settings", q, &doc, &found, st));
    if (found && bson_iter_init_find(&it, &doc, "value") && BSON_ITER_HOLDS_NUMBER(&it) &&
        bson_iter_as_double(&it) > 0) {
        *out = (int64_t)(bson_iter_as_double(&it) * 1024 * 1024);
    }
done:
    bson_destroy(q);
    bson_destroy(&doc);
    return ret;
}

/*
 * The chunk size a moveRange with one bound aims at: the command's maxChunkSizeBytes, else
 * cfg_max_chunk_size_bytes of the collection -- MongoDB's getMaxChunkSizeBytes.
 */
static int
move_chunk_size_bytes(const char *ns, const bson_t *cmd, int64_t *out, shl_status_t *st)
{
    int ret = 0;
    int64_t v = 0;
    bool found = false;
    shl_collection_type_t coll;

    memset(&coll, 0, sizeof(coll));
    SHL_ERR(shl_cmd_get_int64(cmd, "maxChunkSizeBytes", &v, &found, st));
    if (found) {
        if (v <= 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "maxChunkSizeBytes must be positive");
        }
        *out = v;
        goto done;
    }
    SHL_ERR(cfg_get_collection(ns, &coll, &found, st));
    SHL_ERR(cfg_max_chunk_size_bytes(found ? &coll : NULL, out, st));
done:
    shl_collection_type_cleanup(&coll);
    return ret;
}

/* MongoDB's donor refuses a range holding more documents than 1.3 times the chunk size
 * over the average document size, and more than this many in any case. */
#define CFG_MAX_DOCS_IN_RANGE 250000

/*
 * The donor's size check of a migration (MongoDB's, run on the donor before the clone; here
 * the config server asks the donor's dataSize before sending the migration): ChunkTooBig when
 * [min, max) of 'from' holds too many documents for the chunk size. forceJumbo skips it.
 */
static int
check_range_size(const char *ns, const bson_t *cmd, const shl_routing_table_t *rt,
                 const char *from, const bson_t *min, const bson_t *max, shl_status_t *st)
{
    int ret = 0;
    int64_t max_bytes = 0, n, size, avg, limit;
    bson_t q = BSON_INITIALIZER, reply = BSON_INITIALIZER;

    SHL_ERR(move_chunk_size_bytes(ns, cmd, &max_bytes, st));
    BSON_APPEND_UTF8(&q, "dataSize", ns);
    BSON_APPEND_DOCUMENT(&q, "keyPattern", &shl_routing_table_key_pattern(rt)->pattern);
    BSON_APPEND_DOCUMENT(&q, "min", min);
    BSON_APPEND_DOCUMENT(&q, "max", max);
    bson_destroy(&reply);
    if (shl_remote_run_shard(&cfg_get()->remote, from, "admin", &q, &cfg_remote_opts, &reply, st) != 0) {
        /* No shard key index to count over (the donor then clones by a collection scan), or
         * the donor is unreachable (the migration itself will say so): no size check. */
        shl_status_clear(st);
        goto done;
    }
    n = shl_bson_int64_at(&reply, "numObjects");
    size = shl_bson_int64_at(&reply, "size");
    if (n <= 0) {
        goto done;
    }
    avg = size / n > 0 ? size / n : 1;
    limit = (max_bytes / avg > 1 ? max_bytes / avg : 1) * 130 / 100;
    if (limit > CFG_MAX_DOCS_IN_RANGE) {
        limit = CFG_MAX_DOCS_IN_RANGE;
    }
    if (n > limit) {
        char *a = shl_bson_as_json(min);
        char *b = shl_bson_as_json(max);
        ret = shl_status_set(st, SHL_CODE_CHUNK_TOO_BIG,
                             "Cannot move chunk: the maximum number of documents for a chunk is "
                             "%lld, the maximum chunk size is %lld, average document size is "
                             "%lld. Found %lld documents in chunk ns: %s %s -> %s",
                             (long long)limit, (long long)max_bytes, (long long)avg,
                             (long long)n, ns, a, b);
        bson_free(a);
        bson_free(b);
    }
done:
    bson_destroy(&q);
    bson_destroy(&reply);
    return ret;
}

/*
 * moveRange with one bound (MongoDB's computeOtherBound): the chunk holding `min` (or the one
 * ending at `max`, else holding it) bounds the range; its owner walks its shard key index
 * from the given bound (autoSplitVector, limit 1) for a key about `chunk size` bytes of
 * documents away. *lo / *hi get the range (the chunk's own bound when the rest of the chunk
 * is smaller). Errors: BadValue (not a shard key), the shard's errors.
 */
static int
compute_other_bound(const char *ns, const bson_t *cmd, const shl_routing_table_t *rt,
                    const bson_t *min, const bson_t *max, bson_t *lo, bson_t *hi, shl_status_t *st)
{
    int ret = 0;
    const shl_shard_key_pattern_t *p = shl_routing_table_key_pattern(rt);
    bson_t given = BSON_INITIALIZER, cmin, cmax, req = BSON_INITIALIZER, reply = BSON_INITIALIZER,
           arr, first;
    bool forward = max == NULL, have = false;
    size_t idx = 0, n = shl_routing_table_nchunks(rt);
    int64_t max_bytes = 0;
    shl_ns_t parsed;
    bson_iter_t it;

    bson_init(lo);
    bson_init(hi);
    bson_destroy(&given);
    if (!shl_shard_key_normalize(p, forward ? min : max, &given)) {
        bson_init(&given);
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "the bounds of moveRange are not shard keys of %s", ns);
    }
    SHL_ERR(shl_ns_parse(&parsed, ns, st));
    if (forward) {
        SHL_ERR(shl_routing_table_find_chunk(rt, &given, &idx, st));
        have = true;
    } else {
        /* The chunk ending at max, else the one holding it. */
        for (size_t i = 0; i < n && !have; i++) {
            shl_routing_table_chunk_bounds(rt, i, &cmin, &cmax);
            if (shl_shard_key_compare(&cmax, &given) == 0 ||
                (shl_shard_key_compare(&cmin, &given) <= 0 &&
                 shl_shard_key_compare(&given, &cmax) < 0)) {
                idx = i;
                have = true;
            }
        }
        if (!have) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "no chunk of %s ends at or holds the max bound",
                     ns);
        }
    }
    shl_routing_table_chunk_bounds(rt, idx, &cmin, &cmax);
    SHL_ERR(move_chunk_size_bytes(ns, cmd, &max_bytes, st));
    BSON_APPEND_UTF8(&req, "autoSplitVector", parsed.coll);
    BSON_APPEND_DOCUMENT(&req, "keyPattern", &p->pattern);
    BSON_APPEND_DOCUMENT(&req, "min", forward ? &given : &cmin);
    BSON_APPEND_DOCUMENT(&req, "max", forward ? &cmax : &given);
    BSON_APPEND_INT64(&req, "maxChunkSizeBytes", max_bytes);
    BSON_APPEND_INT32(&req, "limit", 1);
    BSON_APPEND_BOOL(&req, "forward", forward);
    bson_destroy(&reply);
    SHL_ERR(shl_remote_run_shard(&cfg_get()->remote, shl_routing_table_chunk_shard(rt, idx), parsed.db, &req, &cfg_remote_opts, &reply, st));
    bson_destroy(lo);
    bson_destroy(hi);
    bson_copy_to(forward ? &given : &cmin, lo);
    bson_copy_to(forward ? &cmax : &given, hi);
    if (bson_iter_init_find(&it, &reply, "splitKeys") && BSON_ITER_HOLDS_ARRAY(&it)) {
        const uint8_t *data;
        uint32_t len;
        bson_iter_array(&it, &len, &data);
        if (bson_init_static(&arr, data, len) && bson_iter_init(&it, &arr) && shl_iter_next(&it) &&
            BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_document(&it, &len, &data);
            if (bson_init_static(&first, data, len)) {
                bson_t *side = forward ? hi : lo;
                bson_destroy(side);
                bson_copy_to(&first, side);
            }
        }
    }
done:
    bson_destroy(&given);
    bson_destroy(&req);
    bson_destroy(&reply);
    return ret;
}

/*
 * _configsvrMoveRange: ns, toShard, and the range as `min` and/or `max` (split out of its
 * chunk first when inside it; with one bound, the other is about the collection's chunk size
 * away inside the same chunk: compute_other_bound), `find` (the chunk holding
 * that shard key) or `bounds` (exactly a chunk). Checks under the namespace's mutex (the shard
 * exists, the chunk exists, it is not on toShard already), then has the donor run the migration
 * with _shardsvrMoveRange and replies when it has finished. The donor's registry serializes
 * migrations per shard and joins an identical one; the commit takes the namespace's mutex again.
 */
static int
cmd_move_range(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *ns = NULL, *to = NULL;
    bson_t min, max, find, bmin, bmax, cmin, cmax, fwd = BSON_INITIALIZER, sreply, wc;
    bool has_min = false, has_max = false, has_find = false, has_bounds = false, found = false;
    bool locked = false, wait_delete = false, force_jumbo = false;
    shl_routing_table_t *rt = NULL;
    shl_shard_type_t target;
    size_t idx = 0;
    char from[SHL_SHARD_ID_MAX];
    bson_iter_t it;
    int64_t start_us = shl_clock_mono_us();

    (void)op;
    bson_init(&sreply);
    memset(&target, 0, sizeof(target));
    SHL_ERR(cfg_cmd_string(cmd, &ns, st));
    SHL_ERR(shl_cmd_check_fields(cmd, move_range_fields, st));
    SHL_ERR(shl_cmd_get_string(cmd, "toShard", &to, &found, st));
    if (!found) {
        SHL_ERR(shl_idl_missing("_configsvrMoveRange", "toShard", st));
    }
    SHL_ERR(cfg_doc_field(cmd, "min", &min, &has_min, st));
    SHL_ERR(cfg_doc_field(cmd, "max", &max, &has_max, st));
    SHL_ERR(cfg_doc_field(cmd, "find", &find, &has_find, st));
    SHL_ERR(parse_bounds(cmd, "_configsvrMoveRange", &bmin, &bmax, &has_bounds, st));
    if ((int)(has_min || has_max) + (int)has_find + (int)has_bounds != 1) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "need to specify exactly one of find, bounds, or min and/or max");
    }
    if (bson_iter_init_find(&it, cmd, "waitForDelete")) {
        wait_delete = bson_iter_as_bool(&it);
    }
    if (bson_iter_init_find(&it, cmd, "forceJumbo")) {
        force_jumbo = bson_iter_as_bool(&it);
    }
    cfg_lock_ns(ns);
    locked = true;
    SHL_ERR(cfg_get_shard(to, &target, st));
    SHL_ERR(cfg_load_routing_table(ns, NULL, &rt, st));
    if (!shl_routing_table_allow_migrations(rt)) {
        SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                 "Collection %s does not allow migrations", ns);
    }
    if (has_find || has_bounds) {
        SHL_ERR(chunk_named(rt, has_find ? &find : NULL, &bmin, &bmax, &idx, st));
    } else if (has_min && has_max) {
        SHL_ERR(split_for_move(op, ns, &rt, &min, &max, &idx, st));
    } else {
        bson_t lo, hi;
        ret = compute_other_bound(ns, cmd, rt, has_min ? &min : NULL, has_max ? &max : NULL, &lo,
                                  &hi, st);
        if (ret == 0) {
            ret = split_for_move(op, ns, &rt, &lo, &hi, &idx, st);
        }
        bson_destroy(&lo);
        bson_destroy(&hi);
        SHL_ERR(ret);
    }
    shl_routing_table_chunk_bounds(rt, idx, &cmin, &cmax);
    snprintf(from, sizeof(from), "%s", shl_routing_table_chunk_shard(rt, idx));
    if (strcmp(from, to) == 0) {
        char *a = shl_bson_as_json(&cmin);
        ret = shl_status_set(st, SHL_CODE_ILLEGAL_OPERATION,
                             "Chunk with min %s of %s is already on shard %s", a, ns, to);
        bson_free(a);
        goto done;
    }
    if (shl_routing_table_chunk_jumbo(rt, idx) && !force_jumbo) {
        SHL_FAIL(st, SHL_CODE_CHUNK_TOO_BIG, "Chunk is marked jumbo; use forceJumbo to move it");
    }
    if (!force_jumbo) {
        SHL_ERR(check_range_size(ns, cmd, rt, from, &cmin, &cmax, st));
    }
    BSON_APPEND_UTF8(&fwd, "_shardsvrMoveRange", ns);
    BSON_APPEND_UTF8(&fwd, "fromShard", from);
    BSON_APPEND_UTF8(&fwd, "toShard", to);
    BSON_APPEND_DOCUMENT(&fwd, "min", &cmin);
    BSON_APPEND_DOCUMENT(&fwd, "max", &cmax);
    BSON_APPEND_BOOL(&fwd, "waitForDelete", wait_delete);
    BSON_APPEND_BOOL(&fwd, "forceJumbo", force_jumbo);
    {
        /* _secondaryThrottle goes on to the recipient (true, or its write concern). */
        bson_iter_t tit;
        if (bson_iter_init_find(&tit, cmd, "secondaryThrottle")) {
            bson_append_iter(&fwd, "secondaryThrottle", -1, &tit);
        }
    }
    BSON_APPEND_DOCUMENT_BEGIN(&fwd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&fwd, &wc);
    cfg_unlock_ns(ns);
    locked = false;
    {
        const shl_remote_options_t opts = {.timeout_ms = CFG_MIGRATION_TIMEOUT_MS};
        bson_destroy(&sreply);
        SHL_ERR(shl_remote_run_shard(&cfg_get()->remote, from, "admin", &fwd, &opts, &sreply, st));
    }
    BSON_APPEND_INT64(reply, "millis", (shl_clock_mono_us() - start_us) / 1000);
done:
    if (locked) {
        cfg_unlock_ns(ns);
    }
    if (rt != NULL) {
        shl_routing_table_release(rt);
    }
    shl_shard_type_cleanup(&target);
    bson_destroy(&fwd);
    bson_destroy(&sreply);
    return ret;
}

int
cfg_mark_chunk_jumbo(const char *ns, const bson_t *min, const bson_t *max, shl_status_t *st)
{
    bson_t *cmd = BCON_NEW("_configsvrMarkChunkJumbo", BCON_UTF8(ns), "min", BCON_DOCUMENT(min),
                           "max", BCON_DOCUMENT(max));
    bson_t reply = BSON_INITIALIZER;
    int ret = cmd_mark_jumbo(NULL, cmd, &reply, st);

    bson_destroy(&reply);
    bson_destroy(cmd);
    return ret;
}

int
cfg_split_chunk(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return cmd_split_chunk(op, cmd, reply, st);
}

int
cfg_move_range(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return cmd_move_range(op, cmd, reply, st);
}

/*
 * The chunk history's validAfter for a migration commit: the donor's `validAfter` (its
 * cluster time once the recipient committed, above every timestamp the migrated documents
 * got on either shard -- shard/migration_source.c), as MongoDB's config server takes it, or
 * a fresh time here when that is later. Later metadata writes here land after it.
 */
static shl_ts_t
migration_valid_after(const bson_t *cmd)
{
    bson_iter_t it;
    shl_ts_t fresh = cfg_fresh_ts();

    /* The later of the two: history entries only grow, whichever clock is ahead. */
    if (bson_iter_init_find(&it, cmd, "validAfter") && BSON_ITER_HOLDS_TIMESTAMP(&it) &&
        shl_bson_iter_timestamp_u64(&it) > shl_ts_to_u64(fresh)) {
        uint64_t given = shl_bson_iter_timestamp_u64(&it);
        shl_storage_clock_advance(cfg_get()->svc->storage, given);
        return shl_ts_from_u64(given);
    }
    return fresh;
}

/*
 * Drop the moved chunk's history entries that no snapshot read can need any more, as
 * MongoDB's commit does: those whose validAfter is more than the window (the largest of
 * minSnapshotHistoryWindowInSeconds, transactionLifetimeLimitSeconds and 10 s) before the new
 * entry's, keeping at least one. A read older than what is left gets StaleChunkHistory.
 */
static void
trim_history(shl_chunk_type_t *c)
{
    int64_t window = shl_opt_int(SHL_OPT_minSnapshotHistoryWindowInSeconds);
    size_t keep = c->nhistory;

    if (shl_opt_int(SHL_OPT_transactionLifetimeLimitSeconds) > window) {
        window = shl_opt_int(SHL_OPT_transactionLifetimeLimitSeconds);
    }
    if (window < 10) {
        window = 10;
    }
    while (keep > 1 && (int64_t)c->history[keep - 1].valid_after.t + window <
                           (int64_t)c->history[0].valid_after.t) {
        keep--;
    }
    if (keep < c->nhistory) {
        shl_chunk_history_t *h = bson_malloc0(keep * sizeof(*h));
        for (size_t i = 0; i < keep; i++) {
            h[i].valid_after = c->history[i].valid_after;
            h[i].shard = c->history[i].shard; /* copied by set_history */
        }
        shl_chunk_type_set_history(c, h, keep);
        bson_free(h);
    }
}

static const char *const commit_migration_fields[] = {
    "fromShard",    "toShard", "migratedChunk", "fromShardCollectionVersion", "validAfter",
    "writeConcern", "rangeDigest", NULL};

/*
 * _configsvrCommitChunkMigration: ns, fromShard, toShard, migratedChunk {min, max},
 * fromShardCollectionVersion. Under the namespace's mutex: the chunk must be exactly
 * [min, max) on fromShard (already on toShard: the commit happened, reply ok); then
 * shl_routing_table_plan_move's chunks are written (the moved chunk major + 1, the donor's
 * control chunk major + 1 minor 1), changelog "moveChunk.commit". Reply {shardVersion} of
 * the donor.
 */
static int
cmd_commit_migration(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *ns = NULL, *from = NULL, *to = NULL;
    bson_t chunk, min, max, details = BSON_INITIALIZER;
    bson_iter_t it;
    bool found = false;
    locked_table_t lt = {0};
    shl_routing_table_t *rt, *after = NULL;
    size_t idx = 0, nout = 0;
    shl_chunk_type_t *out = NULL;
    shl_chunk_version_t sv;

    SHL_ERR(cfg_cmd_string(cmd, &ns, st));
    SHL_ERR(shl_cmd_check_fields(cmd, commit_migration_fields, st));
    SHL_ERR(shl_cmd_get_string(cmd, "fromShard", &from, &found, st));
    if (!found) {
        SHL_ERR(shl_idl_missing("_configsvrCommitChunkMigration", "fromShard", st));
    }
    SHL_ERR(shl_cmd_get_string(cmd, "toShard", &to, &found, st));
    if (!found) {
        SHL_ERR(shl_idl_missing("_configsvrCommitChunkMigration", "toShard", st));
    }
    SHL_ERR(cfg_doc_field(cmd, "migratedChunk", &chunk, &found, st));
    if (!found) {
        SHL_ERR(shl_idl_missing("_configsvrCommitChunkMigration", "migratedChunk", st));
    }
    if (!bson_iter_init_find(&it, &chunk, "min")) {
        SHL_ERR(shl_idl_missing("ChunkType", "min", st));
    }
    SHL_ERR(shl_idl_read_doc(&it, "ChunkType", &min, st));
    if (!bson_iter_init_find(&it, &chunk, "max")) {
        SHL_ERR(shl_idl_missing("ChunkType", "max", st));
    }
    SHL_ERR(shl_idl_read_doc(&it, "ChunkType", &max, st));
    SHL_ERR(locked_table_load(ns, &lt, st));
    rt = lt.rt;
    SHL_ERR(chunk_with_bounds(rt, &min, &max, &idx, st));
    if (strcmp(shl_routing_table_chunk_shard(rt, idx), to) == 0) {
        /* Committed before (a retry after a lost reply). */
        sv = shl_routing_table_shard_version(rt, from);
        shl_chunk_version_append(reply, "shardVersion", &sv);
        goto done;
    }
    if (strcmp(shl_routing_table_chunk_shard(rt, idx), from) != 0) {
        SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                 "The chunk being migrated is owned by %s, not by the donor %s",
                 shl_routing_table_chunk_shard(rt, idx), from);
    }
    if (!shl_routing_table_allow_migrations(rt)) {
        /* Stopped by a DDL coordinator (_configsvrSetAllowMigrations) while it ran. */
        SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                 "Collection %s does not allow migrations", ns);
    }
    if (bson_iter_init_find(&it, cmd, "fromShardCollectionVersion")) {
        shl_chunk_version_t cv, have = shl_routing_table_collection_version(rt);
        SHL_ERR(shl_chunk_version_parse(&it, &cv, st));
        if (!shl_chunk_version_same_generation(&cv, &have)) {
            SHL_FAIL(st, SHL_CODE_STALE_EPOCH,
                     "The collection %s was dropped or recreated during the migration", ns);
        }
    }
    SHL_ERR(shl_routing_table_plan_move(rt, &min, to, migration_valid_after(cmd), &out, &nout,
                                        st));
    trim_history(&out[0]);
    /* The moved chunk and the control chunk in one applyOps. */
    SHL_ERR(commit_chunks(out, nout, NULL, 0, st));
    SHL_ERR(shl_routing_table_update(rt, out, nout, &after, st));
    sv = shl_routing_table_shard_version(after, from);
    shl_chunk_version_append(reply, "shardVersion", &sv);
    BSON_APPEND_DOCUMENT(&details, "min", &min);
    BSON_APPEND_DOCUMENT(&details, "max", &max);
    BSON_APPEND_UTF8(&details, "from", from);
    BSON_APPEND_UTF8(&details, "to", to);
    append_chunk_info(&details, "migratedChunk", &out[0]);
    if (nout > 1) {
        append_chunk_info(&details, "controlChunk", &out[1]);
    }
    if (bson_iter_init_find(&it, cmd, "rangeDigest") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        /* Shale's checksum-verified migrations: the digest both shards agreed on. */
        bson_append_iter(&details, "rangeDigest", -1, &it);
    }
    cfg_changelog(op, "moveChunk.commit", ns, &details);
done:
    locked_table_release(&lt);
    if (out != NULL) {
        shl_chunk_types_free(out, nout);
    }
    if (after != NULL) {
        shl_routing_table_release(after);
    }
    bson_destroy(&details);
    return ret;
}

static const shl_command_t move_range_cmd = {
    .name = "_configsvrMoveRange",
    .run = cmd_move_range,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "move a chunk to another shard: checks, then the donor migrates it (config server)",
};
static const shl_command_t commit_migration_cmd = {
    .name = "_configsvrCommitChunkMigration",
    .run = cmd_commit_migration,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "commit a migrated chunk's new owner in config.chunks (config server)",
};

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
static const shl_command_t commit_chunk_split_cmd = {
    .name = "_configsvrCommitChunkSplit",
    .run = cmd_commit_chunk_split,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "commit a shard's auto-split of a chunk at splitPoints (config server)",
};
static const shl_command_t mark_jumbo_cmd = {
    .name = "_configsvrMarkChunkJumbo",
    .run = cmd_mark_jumbo,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "flag a chunk that cannot be split as jumbo (config server)",
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
    shl_command_registry_add(reg, &commit_chunk_split_cmd);
    shl_command_registry_add(reg, &mark_jumbo_cmd);
    shl_command_registry_add(reg, &move_range_cmd);
    shl_command_registry_add(reg, &commit_migration_cmd);
}
