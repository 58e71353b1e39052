/*
 * pipeline.c -- aggregation stages as a pull chain: each stage's next() asks its source for
 * documents and produces its own. Buffering stages ($group, $sort) drain their source on the
 * first call. Stages that MongoDB defines as sugar ($count, $sortByCount, $set, $unset,
 * $replaceWith) are rewritten into the core ones at parse time.
 */
#include "bson/bson_iter.h"
#include "query/pipeline.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bson/bson_compare.h"
#include "bson/bson_hash.h"
#include "bson/bson_util.h"
#include "base/options.h"
#include "query/expression.h"
#include "query/matcher.h"
#include "query/projection.h"
#include "query/pipeline_private.h"
#include "query/query_private.h"
#include "query/sort.h"

/* $documents' buffer: Shale's own bound (its array is an expression value, at most
 * EXPR_MAX_VALUE_BYTES); every other buffering stage reads its MongoDB knob (stage_limit). */
#define PIPE_DOCUMENTS_MAX_MEMORY (100LL * 1024 * 1024)

typedef enum {
    ST_MATCH,
    ST_PROJECT,
    ST_ADDFIELDS,
    ST_GROUP,
    ST_SORT,
    ST_LIMIT,
    ST_SKIP,
    ST_UNWIND,
    ST_REPLACE_ROOT,
    ST_BUCKET_AUTO,
    ST_FACET,
    ST_LOOKUP,
    ST_UNION_WITH,
    ST_GRAPH_LOOKUP,
    ST_SAMPLE,
    ST_DOCUMENTS, /* also $collStats / $indexStats: documents made at the first pull */
    ST_OUTPUT,    /* $out / $merge: passes documents through; the caller writes them */
    ST_REDACT,
    ST_WINDOW /* $setWindowFields, $densify (window.c) */
} stage_kind_t;

/* Where a pipeline is parsed: sub-pipelines refuse some stages. */
typedef enum { CTX_TOP, CTX_FACET, CTX_LOOKUP, CTX_UNION_WITH } pipe_ctx_t;

typedef struct group {
    struct group *hnext;
    struct group *onext; /* insertion order */
    uint64_t hash;
    bson_value_t key;
    accstate_t *acc;
} group_t;

typedef struct stage stage_t;
struct stage {
    stage_kind_t kind;
    stage_t *src; /* NULL: the pipeline's source */
    struct shl_pipeline *pipe;
    bson_t spec; /* for describe */
    char *name;
    bson_t out;
    bool out_init;
    /* per kind */
    shl_matcher_t *matcher;
    shl_projection_t *proj;
    shl_expr_t *expr; /* group _id, replaceRoot newRoot */
    accdef_t *accs;
    size_t naccs;
    int64_t n, seen;
    shl_sort_pattern_t *pattern;
    shl_sorter_t *sorter;
    bool drained;
    /* group */
    group_t **buckets;
    size_t nbuckets, ngroups;
    group_t *ofirst, *olast, *ocur;
    int64_t mem;
    int64_t max_bytes; /* the stage's memory or size limit (set_stage_limits) */
    int64_t max_out;   /* $facet: the size limit of its output document */
    int knob;          /* the shl_opt_id_t max_bytes comes from; -1: none */
    /* unwind */
    char *path, *index_field;
    bool preserve;
    bson_t cur_in;
    bool have_in;
    bson_iter_t arr_it;
    int64_t arr_idx;
    /* buffered documents: $facet input, $sample reservoir, $documents, $bucketAuto */
    bson_t buf;
    bool have_buf;
    bson_iter_t buf_it;
    bson_t buf_cur;
    bson_t **docs;
    size_t ndocs, capdocs, doc_pos;
    bson_value_t *vals; /* $bucketAuto: the groupBy value of docs[i] */
    /* $facet: parsed sub-pipelines and their output names */
    struct shl_pipeline **subs;
    char **sub_names;
    size_t nsubs;
    /* $lookup / $unionWith */
    char *from, *local, *foreign, *as;
    bson_t sub_spec; /* the sub-pipeline array ($lookup pipeline, $unionWith pipeline) */
    bool has_sub;
    char **let_names;
    shl_expr_t **let_exprs;
    size_t nlet;
    bson_t lvars; /* outer variables + the current document's `let` values */
    struct shl_pipeline *run;
    void *cursor;
    bool cursor_open;
    bool src_done;
    /* $graphLookup (from, as, expr = startWith; matcher = restrictSearchWithMatch) */
    char *conn_from, *conn_to, *depth_field;
    int64_t max_depth; /* -1: none */
    bson_t restrict_spec;
    bool has_restrict;
    /* $bucketAuto granularity: a preferred-number series (NULL + pow2 for POWERSOF2) */
    const struct granularity *gran;
    /* $documents ($expr) or $collStats/$indexStats (spec) */
    bson_t stats_spec;
    /* $out / $merge */
    shl_pipeline_output_t output;
    char *out_db, *out_coll;
    char **on_fields;
    bson_t merge_let, merge_pipe;
    bool has_merge_let, has_merge_pipe;
    /* $setWindowFields / $densify */
    query_wstage_t *win;
};

struct shl_pipeline {
    stage_t **stages;
    size_t nstages;
    size_t first; /* index of the first live stage */
    shl_pipeline_source_t src;
    shl_pipeline_opts_t opts;
    pipe_ctx_t ctx;
    int depth; /* sub-pipeline nesting ($lookup/$unionWith/$facet) */
};

/* ---------------------------------------------------------------- helpers */

static int pull(stage_t *s, const bson_t **doc, shl_status_t *st);

static int
pull_src(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    if (s->src != NULL) {
        return pull(s->src, doc, st);
    }
    if (s->pipe->src.next == NULL) {
        *doc = NULL;
        return 0;
    }
    return s->pipe->src.next(s->pipe->src.arg, doc, st);
}

static bson_t *
stage_out(stage_t *s)
{
    if (s->out_init) {
        bson_destroy(&s->out);
    }
    bson_init(&s->out);
    s->out_init = true;
    return &s->out;
}

static void
eval_ctx(const stage_t *s, const bson_t *root, shl_expr_ctx_t *ctx)
{
    ctx->root = root;
    ctx->vars = s->pipe->opts.vars;
    ctx->now_ms = 0;
}

/*
 * copy_set_path --
 *     Copy 'src' into 'out' with the dotted 'path' set to 'v' (appended where missing;
 *     intermediate documents created).
 */
void
query_copy_set_path(const bson_t *src, const char *path, const bson_value_t *v, bson_t *out)
{
    const char *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    bool done = false;
    bson_iter_t it;

    if (src != NULL && bson_iter_init(&it, src)) {
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (!done && strlen(k) == len && strncmp(k, path, len) == 0) {
                done = true;
                if (dot == NULL) {
                    if (v->value_type != BSON_TYPE_EOD) {
                        query_append_value(out, k, -1, v);
                    }
                } else {
                    bson_t sub, child;
                    const uint8_t *data;
                    uint32_t dlen;
                    bool have = false;
                    if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                        bson_iter_document(&it, &dlen, &data);
                        have = bson_init_static(&sub, data, dlen);
                    }
                    bson_append_document_begin(out, k, -1, &child);
                    query_copy_set_path(have ? &sub : NULL, dot + 1, v, &child);
                    bson_append_document_end(out, &child);
                }
                continue;
            }
            bson_append_iter(out, k, -1, &it);
        }
    }
    if (!done && v->value_type != BSON_TYPE_EOD) {
        if (dot == NULL) {
            query_append_value(out, path, (int)len, v);
        } else {
            bson_t child;
            bson_append_document_begin(out, path, (int)len, &child);
            query_copy_set_path(NULL, dot + 1, v, &child);
            bson_append_document_end(out, &child);
        }
    }
}

/* ---------------------------------------------------------------- simple stages */

static int
next_match(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    shl_match_details_t d = {.vars = s->pipe->opts.vars};

    for (;;) {
        SHL_ERR(pull_src(s, doc, st));
        if (*doc == NULL) {
            break;
        }
        bool m = false;
        ret = shl_matcher_match(s->matcher, *doc, &d, &m, st);
        if (ret != 0) {
            goto done;
        }
        if (m) {
            break;
        }
    }
done:
    return ret;
}

static int
next_project(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;

    *doc = NULL;
    SHL_ERR(pull_src(s, &in, st));
    if (in == NULL) {
        goto done;
    }
    if (s->out_init) {
        bson_destroy(&s->out);
        s->out_init = false;
    }
    ret = shl_projection_apply(s->proj, in, NULL, s->pipe->opts.vars, &s->out, st);
    s->out_init = true;
    if (ret == 0) {
        *doc = &s->out;
    }
done:
    return ret;
}

static int
next_limit(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    if (s->seen >= s->n) {
        *doc = NULL;
        return 0;
    }
    s->seen++;
    return pull_src(s, doc, st);
}

static int
next_skip(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;

    for (;;) {
        SHL_ERR(pull_src(s, doc, st));
        if (*doc == NULL || s->seen >= s->n) {
            break;
        }
        s->seen++;
    }
done:
    return ret;
}

static int
next_replace_root(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;
    shl_expr_ctx_t ctx;
    bson_value_t v;
    bson_t view;
    char *json = NULL;

    v.value_type = BSON_TYPE_EOD;
    *doc = NULL;
    SHL_ERR(pull_src(s, &in, st));
    if (in == NULL) {
        goto done;
    }
    eval_ctx(s, in, &ctx);
    SHL_ERR(shl_expr_evaluate(s->expr, &ctx, &v, st));
    if (v.value_type != BSON_TYPE_DOCUMENT || !query_bson_view(&v, &view)) {
        json = v.value_type == BSON_TYPE_EOD ? bson_strdup("MISSING") : query_value_to_json(&v);
        SHL_FAIL(st, 40228,
                 "'newRoot' expression must evaluate to an object, but resulting value was: %s. "
                 "Type of resulting value: '%s'. Input document: %s",
                 json,
                 v.value_type == BSON_TYPE_EOD
                     ? "missing"
                     : (v.value_type == BSON_TYPE_NULL ? "null" : "other"),
                 "{}");
    }
    bson_concat(stage_out(s), &view);
    *doc = &s->out;
done:
    bson_free(json);
    bson_value_destroy(&v);
    return ret;
}

/* ---------------------------------------------------------------- $unwind */

static int
next_unwind(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;
    bson_iter_t it, found;

    *doc = NULL;
    for (;;) {
        if (s->have_in) {
            if (shl_iter_next(&s->arr_it)) {
                bson_t *o = stage_out(s);
                const bson_value_t *ev = bson_iter_value(&s->arr_it);
                if (s->index_field == NULL) {
                    query_copy_set_path(&s->cur_in, s->path, ev, o);
                } else {
                    bson_t tmp = BSON_INITIALIZER;
                    bson_value_t iv = {.value_type = BSON_TYPE_INT64};
                    iv.value.v_int64 = s->arr_idx;
                    query_copy_set_path(&s->cur_in, s->path, ev, &tmp);
                    query_copy_set_path(&tmp, s->index_field, &iv, o);
                    bson_destroy(&tmp);
                }
                s->arr_idx++;
                *doc = o;
                goto done;
            }
            bson_destroy(&s->cur_in);
            s->have_in = false;
        }
        SHL_ERR(pull_src(s, &in, st));
        if (in == NULL) {
            goto done;
        }
        bool has = bson_iter_init(&it, in) && bson_iter_find_descendant(&it, s->path, &found);
        if (has && BSON_ITER_HOLDS_ARRAY(&found)) {
            bson_iter_t ai;
            if (bson_iter_recurse(&found, &ai) && shl_iter_next(&ai)) {
                bson_copy_to(in, &s->cur_in);
                s->have_in = true;
                bson_iter_recurse(&found, &s->arr_it);
                s->arr_idx = 0;
                continue;
            }
            if (!s->preserve) {
                continue;
            }
            /* Empty array preserved: the field is removed, the index is null. */
            bson_t *o = stage_out(s);
            bson_value_t gone = {.value_type = BSON_TYPE_EOD};
            if (s->index_field != NULL) {
                bson_t tmp = BSON_INITIALIZER;
                bson_value_t nv = {.value_type = BSON_TYPE_NULL};
                query_copy_set_path(in, s->path, &gone, &tmp);
                query_copy_set_path(&tmp, s->index_field, &nv, o);
                bson_destroy(&tmp);
            } else {
                query_copy_set_path(in, s->path, &gone, o);
            }
            *doc = o;
            goto done;
        }
        bool nullish = !has || BSON_ITER_HOLDS_NULL(&found) || BSON_ITER_HOLDS_UNDEFINED(&found);
        if (nullish && !s->preserve) {
            continue;
        }
        /* A non-array value unwinds to itself (index null); null/missing only if preserved. */
        if (s->index_field != NULL) {
            bson_value_t nv = {.value_type = BSON_TYPE_NULL};
            query_copy_set_path(in, s->index_field, &nv, stage_out(s));
            *doc = &s->out;
        } else {
            *doc = in;
        }
        goto done;
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- $sort */

static int
next_sort(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;

    if (!s->drained) {
        for (;;) {
            SHL_ERR(pull_src(s, &in, st));
            if (in == NULL) {
                break;
            }
            SHL_ERR(shl_sorter_add(s->sorter, in, st));
        }
        shl_sorter_finish(s->sorter);
        s->drained = true;
    }
    *doc = shl_sorter_next(s->sorter);
done:
    return ret;
}

/* ---------------------------------------------------------------- memory and size limits */

/*
 * Every stage that holds data bounds it (docs/limits.md): by the caller's override
 * (opts.max_memory_bytes > 0, for tests) or by the MongoDB knob of that stage, read when the
 * pipeline is parsed. Shale never spills to disk, so allowDiskUse does not lift a limit.
 */
static int64_t
stage_limit(const shl_pipeline_t *p, shl_opt_id_t knob)
{
    return p->opts.max_memory_bytes > 0 ? p->opts.max_memory_bytes : shl_opt_int(knob);
}

static void
set_stage_limits(shl_pipeline_t *p, stage_t *s)
{
    int knob = -1;

    switch (s->kind) {
    case ST_GROUP:
        knob = SHL_OPT_internalDocumentSourceGroupMaxMemoryBytes;
        break;
    case ST_SORT:
    case ST_SAMPLE: /* MongoDB's $sample is a sort on a random key */
        knob = SHL_OPT_internalQueryMaxBlockingSortMemoryUsageBytes;
        break;
    case ST_BUCKET_AUTO:
        knob = SHL_OPT_internalDocumentSourceBucketAutoMaxMemoryBytes;
        break;
    case ST_GRAPH_LOOKUP:
        knob = SHL_OPT_internalDocumentSourceGraphLookupMaxMemoryBytes;
        break;
    case ST_LOOKUP:
        knob = SHL_OPT_internalLookupStageIntermediateDocumentMaxSizeBytes;
        break;
    case ST_FACET:
        knob = SHL_OPT_internalQueryFacetBufferSizeBytes;
        s->max_out = stage_limit(p, SHL_OPT_internalQueryFacetMaxOutputDocSizeBytes);
        break;
    case ST_DOCUMENTS:
        s->max_bytes =
            p->opts.max_memory_bytes > 0 ? p->opts.max_memory_bytes : PIPE_DOCUMENTS_MAX_MEMORY;
        break;
    default:
        break;
    }
    s->knob = knob;
    if (knob >= 0) {
        s->max_bytes = stage_limit(p, (shl_opt_id_t)knob);
    }
}

/* 292 for a buffering stage past its memory limit, as MongoDB without allowDiskUse. */
static int
mem_exceeded(const stage_t *s, shl_status_t *st)
{
    const char *knob = s->knob >= 0 ? shl_opt_name((shl_opt_id_t)s->knob) : "its memory limit";

    if (s->pipe->opts.allow_disk_use) {
        return shl_status_set(st, SHL_CODE_QUERY_EXCEEDED_MEMORY_LIMIT_NO_DISK_USE_ALLOWED,
                              "Exceeded memory limit for %s (%lld bytes, %s); Shale does not "
                              "spill to disk, so allowDiskUse:true does not lift it.",
                              s->name, (long long)s->max_bytes, knob);
    }
    return shl_status_set(st, SHL_CODE_QUERY_EXCEEDED_MEMORY_LIMIT_NO_DISK_USE_ALLOWED,
                          "Exceeded memory limit for %s, but didn't allow external spilling; "
                          "pass allowDiskUse:true to opt in.",
                          s->name);
}

/*
 * $facet's input past internalQueryFacetBufferSizeBytes. MongoDB's $facet feeds its
 * sub-pipelines that many bytes at a time; Shale's holds the whole input, so the knob bounds
 * all of it: ExceededMemoryLimit (no spilling can help).
 */
static int
facet_input_exceeded(const stage_t *s, shl_status_t *st)
{
    return shl_status_set(st, SHL_CODE_EXCEEDED_MEMORY_LIMIT,
                          "$facet's input exceeded %lld bytes (internalQueryFacetBufferSizeBytes); "
                          "Shale's $facet holds all of its input in memory",
                          (long long)s->max_bytes);
}

/* ---------------------------------------------------------------- $group */

static bool
acc_uses_arr(const accdef_t *d)
{
    return d->kind == ACC_PUSH || d->kind == ACC_ADDTOSET || d->kind == ACC_MERGE_OBJECTS;
}

void
query_acc_init(accstate_t *a, const accdef_t *d)
{
    memset(a, 0, sizeof(*a));
    a->val.value_type = BSON_TYPE_EOD;
    if (acc_uses_arr(d)) {
        a->arr = bson_new();
    }
}

static void
item_cleanup(accitem_t *it)
{
    if (it->has_key) {
        bson_destroy(&it->key);
    }
    bson_value_destroy(&it->val);
}

void
query_acc_cleanup(accstate_t *a, const accdef_t *d)
{
    bson_value_destroy(&a->val);
    if (acc_uses_arr(d)) {
        bson_destroy(a->arr);
    }
    for (size_t i = 0; i < a->nitems; i++) {
        item_cleanup(&a->items[i]);
    }
    bson_free(a->items);
}

int64_t
query_value_size(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_UTF8:
        return 16 + v->value.v_utf8.len;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        return 16 + v->value.v_doc.data_len;
    case BSON_TYPE_BINARY:
        return 16 + v->value.v_binary.data_len;
    default:
        return 16;
    }
}

/* Insert 'it' (moved) at position 'pos' of the N accumulator's items. */
static void
items_insert(accstate_t *a, size_t pos, accitem_t *it)
{
    if (a->nitems == a->capitems) {
        a->capitems = a->capitems ? a->capitems * 2 : 4;
        a->items = bson_realloc(a->items, a->capitems * sizeof(*a->items));
    }
    memmove(&a->items[pos + 1], &a->items[pos], (a->nitems - pos) * sizeof(*a->items));
    a->items[pos] = *it;
    a->nitems++;
}

static void
items_remove(accstate_t *a, size_t pos)
{
    item_cleanup(&a->items[pos]);
    memmove(&a->items[pos], &a->items[pos + 1], (a->nitems - pos - 1) * sizeof(*a->items));
    a->nitems--;
}

/* Compare two retained items: by sort key under 'd->sort_by', else by value. */
static int
item_cmp(const accdef_t *d, const accitem_t *x, const accitem_t *y)
{
    if (d->sort_by != NULL) {
        return shl_sort_key_compare(d->sort_by, &x->key, &y->key);
    }
    return shl_expr_compare(&x->val, &y->val);
}

/* The position after every item <= 'it' (stable insertion). */
static size_t
items_upper_bound(const accstate_t *a, const accdef_t *d, const accitem_t *it)
{
    size_t lo = 0, hi = a->nitems;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (item_cmp(d, &a->items[mid], it) <= 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/*
 * Keep the n smallest ('keep_low') or largest items in sort order; ties keep the item seen
 * first, as MongoDB's $topN/$bottomN/$minN/$maxN do. Takes ownership of 'it'.
 */
static void
items_keep_n(accstate_t *a, const accdef_t *d, accitem_t *it, bool keep_low, int64_t *grow)
{
    if ((int64_t)a->nitems >= d->n) {
        if (keep_low) {
            if (item_cmp(d, &a->items[a->nitems - 1], it) <= 0) {
                item_cleanup(it);
                return;
            }
            *grow -= query_value_size(&a->items[a->nitems - 1].val);
            items_remove(a, a->nitems - 1);
        } else {
            if (item_cmp(d, it, &a->items[0]) <= 0) {
                item_cleanup(it);
                return;
            }
            *grow -= query_value_size(&a->items[0].val);
            items_remove(a, 0);
        }
    }
    *grow += query_value_size(&it->val) + (it->has_key ? it->key.len : 0) + (int64_t)sizeof(*it);
    items_insert(a, items_upper_bound(a, d, it), it);
}

/* $mergeObjects: fields of 'v' override those already accumulated, in place. */
static int
merge_objects_add(accstate_t *a, const bson_value_t *v, int64_t *grow, shl_status_t *st)
{
    int ret = 0;
    bson_t view, merged = BSON_INITIALIZER;
    bson_iter_t it, nit;

    if (v->value_type == BSON_TYPE_EOD || v->value_type == BSON_TYPE_NULL ||
        v->value_type == BSON_TYPE_UNDEFINED) {
        goto done;
    }
    if (v->value_type != BSON_TYPE_DOCUMENT || !query_bson_view(v, &view)) {
        char *json = query_value_to_json(v);
        ret = shl_status_set(st, 40400,
                             "$mergeObjects requires object inputs, but input %s is of type %s",
                             json, shl_bson_type_name(v->value_type));
        bson_free(json);
        goto done;
    }
    bson_iter_init(&it, a->arr);
    while (shl_iter_next(&it)) {
        if (bson_iter_init_find(&nit, &view, shl_iter_key(&it))) {
            bson_append_iter(&merged, shl_iter_key(&it), -1, &nit);
        } else {
            bson_append_iter(&merged, shl_iter_key(&it), -1, &it);
        }
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        if (!bson_has_field(a->arr, shl_iter_key(&it))) {
            bson_append_iter(&merged, shl_iter_key(&it), -1, &it);
        }
    }
    *grow += (int64_t)merged.len - (int64_t)a->arr->len;
    bson_destroy(a->arr);
    a->arr = bson_copy(&merged);
done:
    bson_destroy(&merged);
    return ret;
}

/* Fold 'v' (owned by the caller; EOD = missing) into 'a'; 'root' is the input document (the
 * sort key of $top/$bottom); *grow gets the added bytes. */
int
query_acc_add(accstate_t *a, const accdef_t *d, const bson_value_t *v, const bson_t *root,
              int64_t *grow, shl_status_t *st)
{
    int ret = 0;
    bool missing = v->value_type == BSON_TYPE_EOD;
    bool nullish =
        missing || v->value_type == BSON_TYPE_NULL || v->value_type == BSON_TYPE_UNDEFINED;
    accitem_t item;

    memset(&item, 0, sizeof(item));
    switch (d->kind) {
    case ACC_SUM:
    case ACC_AVG:
        if (v->value_type == BSON_TYPE_INT32 || v->value_type == BSON_TYPE_INT64) {
            int64_t x = v->value_type == BSON_TYPE_INT32 ? v->value.v_int32 : v->value.v_int64;
            int64_t r = 0;
            if (v->value_type == BSON_TYPE_INT64 && a->ntype < 1) {
                a->ntype = 1;
            }
            if (a->ntype < 2 && __builtin_add_overflow(a->isum, x, &r)) {
                a->ntype = 2;
                a->dsum = (double)a->isum;
            }
            if (a->ntype == 2) {
                a->dsum += (double)x;
            } else {
                a->isum = r;
            }
            a->count++;
        } else if (query_value_is_number(v)) {
            if (a->ntype < 2) {
                a->dsum = (double)a->isum;
                a->ntype = 2;
            }
            a->dsum += query_value_as_double(v);
            a->count++;
        }
        break;
    case ACC_STDDEV_POP:
    case ACC_STDDEV_SAMP:
        if (query_value_is_number(v)) {
            double x = query_value_as_double(v);
            a->count++;
            double delta = x - a->mean;
            a->mean += delta / (double)a->count;
            a->m2 += delta * (x - a->mean);
        }
        break;
    case ACC_MIN:
    case ACC_MAX:
        if (nullish) {
            break;
        }
        if (!a->seen || (d->kind == ACC_MIN ? shl_expr_compare(v, &a->val) < 0
                                            : shl_expr_compare(v, &a->val) > 0)) {
            bson_value_destroy(&a->val);
            bson_value_copy(v, &a->val);
            a->seen = true;
        }
        break;
    case ACC_FIRST:
        if (!a->seen) {
            if (missing) {
                a->val.value_type = BSON_TYPE_NULL;
            } else {
                bson_value_copy(v, &a->val);
            }
            a->seen = true;
        }
        break;
    case ACC_LAST:
        bson_value_destroy(&a->val);
        if (missing) {
            a->val.value_type = BSON_TYPE_NULL;
        } else {
            bson_value_copy(v, &a->val);
        }
        a->seen = true;
        break;
    case ACC_PUSH:
    case ACC_ADDTOSET:
        if (missing) {
            break;
        }
        if (d->kind == ACC_ADDTOSET) {
            bson_iter_t it;
            bool dup = false;
            bson_iter_init(&it, a->arr);
            while (!dup && shl_iter_next(&it)) {
                dup = shl_bson_value_compare(bson_iter_value(&it), v) == 0;
            }
            if (dup) {
                break;
            }
        }
        {
            char key[16];
            const char *kp;
            uint32_t before = a->arr->len;
            /* MongoDB bounds each of these accumulators on its own, whatever the stage's
             * limit: ExceededMemoryLimit past internalQueryMaxPushBytes /
             * internalQueryMaxAddToSetBytes. Checked before appending, so the array stays
             * far below libbson's 2 GiB ceiling. */
            int64_t limit =
                shl_opt_int(d->kind == ACC_PUSH ? SHL_OPT_internalQueryMaxPushBytes
                                                : SHL_OPT_internalQueryMaxAddToSetBytes);
            int64_t need = (int64_t)a->arr->len + (int64_t)shl_bson_array_element_len(
                                                      a->narr, (size_t)query_value_size(v));
            if (need > limit || need > (int64_t)INT32_MAX - 1024) {
                ret = shl_status_set(st, SHL_CODE_EXCEEDED_MEMORY_LIMIT,
                                     "%s accumulator passed its memory limit of %lld bytes (%s) "
                                     "and cannot spill to disk",
                                     d->kind == ACC_PUSH ? "$push" : "$addToSet", (long long)limit,
                                     d->kind == ACC_PUSH ? "internalQueryMaxPushBytes"
                                                         : "internalQueryMaxAddToSetBytes");
                break;
            }
            bson_uint32_to_string(a->narr++, &kp, key, sizeof(key));
            query_append_value(a->arr, kp, -1, v);
            *grow += a->arr->len - before;
        }
        break;
    case ACC_MERGE_OBJECTS:
        ret = merge_objects_add(a, v, grow, st);
        break;
    case ACC_FIRST_N:
        if ((int64_t)a->nitems >= d->n) {
            break;
        }
        __attribute__((fallthrough));
    case ACC_LAST_N:
        if (missing) {
            item.val.value_type = BSON_TYPE_NULL;
        } else {
            bson_value_copy(v, &item.val);
        }
        if (d->kind == ACC_LAST_N && (int64_t)a->nitems >= d->n) {
            *grow -= query_value_size(&a->items[0].val);
            items_remove(a, 0);
        }
        *grow += query_value_size(&item.val) + (int64_t)sizeof(item);
        items_insert(a, a->nitems, &item);
        break;
    case ACC_MIN_N:
    case ACC_MAX_N:
        if (nullish) {
            break;
        }
        bson_value_copy(v, &item.val);
        items_keep_n(a, d, &item, d->kind == ACC_MIN_N, grow);
        break;
    case ACC_TOP:
    case ACC_BOTTOM:
    case ACC_TOP_N:
    case ACC_BOTTOM_N:
        if (missing) {
            item.val.value_type = BSON_TYPE_NULL;
        } else {
            bson_value_copy(v, &item.val);
        }
        shl_sort_key_compute(d->sort_by, root, &item.key);
        item.has_key = true;
        items_keep_n(a, d, &item, d->kind == ACC_TOP || d->kind == ACC_TOP_N, grow);
        break;
    }
    return ret;
}

void
query_acc_result(const accstate_t *a, const accdef_t *d, bson_t *out)
{
    switch (d->kind) {
    case ACC_SUM:
        if (a->ntype == 2) {
            BSON_APPEND_DOUBLE(out, d->field, a->dsum);
        } else if (a->ntype == 0 && a->isum >= INT32_MIN && a->isum <= INT32_MAX) {
            BSON_APPEND_INT32(out, d->field, (int32_t)a->isum);
        } else {
            BSON_APPEND_INT64(out, d->field, a->isum);
        }
        break;
    case ACC_AVG:
        if (a->count == 0) {
            BSON_APPEND_NULL(out, d->field);
        } else {
            double tot = a->ntype == 2 ? a->dsum : (double)a->isum;
            BSON_APPEND_DOUBLE(out, d->field, tot / (double)a->count);
        }
        break;
    case ACC_STDDEV_POP:
    case ACC_STDDEV_SAMP: {
        int64_t div = d->kind == ACC_STDDEV_POP ? a->count : a->count - 1;
        if (div <= 0) {
            BSON_APPEND_NULL(out, d->field);
        } else {
            BSON_APPEND_DOUBLE(out, d->field, sqrt(a->m2 / (double)div));
        }
        break;
    }
    case ACC_MIN:
    case ACC_MAX:
    case ACC_FIRST:
    case ACC_LAST:
        if (!a->seen) {
            BSON_APPEND_NULL(out, d->field);
        } else {
            query_append_value(out, d->field, -1, &a->val);
        }
        break;
    case ACC_PUSH:
    case ACC_ADDTOSET:
        BSON_APPEND_ARRAY(out, d->field, a->arr);
        break;
    case ACC_MERGE_OBJECTS:
        BSON_APPEND_DOCUMENT(out, d->field, a->arr);
        break;
    case ACC_TOP:
    case ACC_BOTTOM:
        if (a->nitems == 0) {
            BSON_APPEND_NULL(out, d->field);
        } else {
            query_append_value(out, d->field, -1, &a->items[0].val);
        }
        break;
    case ACC_TOP_N:
    case ACC_BOTTOM_N:
    case ACC_FIRST_N:
    case ACC_LAST_N:
    case ACC_MIN_N:
    case ACC_MAX_N: {
        bson_t arr;
        BSON_APPEND_ARRAY_BEGIN(out, d->field, &arr);
        for (size_t i = 0; i < a->nitems; i++) {
            char key[16];
            const char *kp;
            size_t j = d->kind == ACC_MAX_N ? a->nitems - 1 - i : i;
            bson_uint32_to_string((uint32_t)i, &kp, key, sizeof(key));
            query_append_value(&arr, kp, -1, &a->items[j].val);
        }
        bson_append_array_end(out, &arr);
        break;
    }
    }
}

static group_t *
group_find(stage_t *s, const bson_value_t *key, uint64_t h)
{
    for (group_t *g = s->buckets[h % s->nbuckets]; g != NULL; g = g->hnext) {
        if (g->hash == h && shl_bson_value_compare(&g->key, key) == 0) {
            return g;
        }
    }
    return NULL;
}

static void
group_rehash(stage_t *s)
{
    size_t nb = s->nbuckets * 2;
    group_t **b = bson_malloc0(nb * sizeof(*b));
    for (group_t *g = s->ofirst; g != NULL; g = g->onext) {
        g->hnext = b[g->hash % nb];
        b[g->hash % nb] = g;
    }
    bson_free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
}

static int
group_consume(stage_t *s, const bson_t *in, shl_status_t *st)
{
    int ret = 0;
    shl_expr_ctx_t ctx;
    bson_value_t key, v;
    group_t *g;
    int64_t grow = 0;

    key.value_type = v.value_type = BSON_TYPE_EOD;
    eval_ctx(s, in, &ctx);
    SHL_ERR(shl_expr_evaluate(s->expr, &ctx, &key, st));
    if (key.value_type == BSON_TYPE_EOD) {
        key.value_type = BSON_TYPE_NULL;
    }
    uint64_t h = shl_bson_hash_fast(&key);
    g = group_find(s, &key, h);
    if (g == NULL) {
        /* One allocation: the group, then its accumulators at their type's alignment. */
        size_t off =
            (sizeof(*g) + _Alignof(accstate_t) - 1) / _Alignof(accstate_t) * _Alignof(accstate_t);
        g = bson_aligned_alloc0(_Alignof(accstate_t) > _Alignof(max_align_t)
                                    ? _Alignof(accstate_t)
                                    : _Alignof(max_align_t),
                                off + s->naccs * sizeof(accstate_t));
        g->acc = (accstate_t *)((char *)g + off);
        g->hash = h;
        bson_value_copy(&key, &g->key);
        for (size_t i = 0; i < s->naccs; i++) {
            query_acc_init(&g->acc[i], &s->accs[i]);
        }
        /* Grow before linking 'g' so the rehash does not see it. */
        if (++s->ngroups > s->nbuckets) {
            group_rehash(s);
        }
        if (s->olast) {
            s->olast->onext = g;
        } else {
            s->ofirst = g;
        }
        s->olast = g;
        g->hnext = s->buckets[h % s->nbuckets];
        s->buckets[h % s->nbuckets] = g;
        grow += (int64_t)(sizeof(*g) + s->naccs * sizeof(accstate_t) + 32);
        if (key.value_type == BSON_TYPE_UTF8) {
            grow += key.value.v_utf8.len;
        } else if (key.value_type == BSON_TYPE_DOCUMENT || key.value_type == BSON_TYPE_ARRAY) {
            grow += key.value.v_doc.data_len;
        }
    }
    for (size_t i = 0; i < s->naccs; i++) {
        SHL_ERR(shl_expr_evaluate(s->accs[i].arg, &ctx, &v, st));
        SHL_ERR(query_acc_add(&g->acc[i], &s->accs[i], &v, in, &grow, st));
        bson_value_destroy(&v);
        v.value_type = BSON_TYPE_EOD;
    }
    s->mem += grow;
    if (s->mem > s->max_bytes) {
        SHL_ERR(mem_exceeded(s, st));
    }
done:
    bson_value_destroy(&key);
    bson_value_destroy(&v);
    return ret;
}

static int
next_group(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;

    *doc = NULL;
    if (!s->drained) {
        for (;;) {
            SHL_ERR(pull_src(s, &in, st));
            if (in == NULL) {
                break;
            }
            SHL_ERR(group_consume(s, in, st));
        }
        s->drained = true;
        s->ocur = s->ofirst;
    }
    if (s->ocur != NULL) {
        bson_t *o = stage_out(s);
        group_t *g = s->ocur;
        query_append_value(o, "_id", 3, &g->key);
        for (size_t i = 0; i < s->naccs; i++) {
            query_acc_result(&g->acc[i], &s->accs[i], o);
        }
        s->ocur = g->onext;
        *doc = o;
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- buffered documents */

/* Keep 'doc' (owned) in the stage's buffer, accounting its bytes against the limit. */
static int
docs_push(stage_t *s, bson_t *doc, shl_status_t *st)
{
    if (s->ndocs == s->capdocs) {
        s->capdocs = s->capdocs ? s->capdocs * 2 : 16;
        s->docs = bson_realloc(s->docs, s->capdocs * sizeof(*s->docs));
    }
    s->docs[s->ndocs++] = doc;
    s->mem += doc->len + 32;
    if (s->mem > s->max_bytes) {
        return s->kind == ST_FACET ? facet_input_exceeded(s, st) : mem_exceeded(s, st);
    }
    return 0;
}

static void
docs_clear(stage_t *s)
{
    for (size_t i = 0; i < s->ndocs; i++) {
        bson_destroy(s->docs[i]);
        if (s->vals != NULL) {
            bson_value_destroy(&s->vals[i]);
        }
    }
    bson_free(s->docs);
    bson_free(s->vals);
    s->docs = NULL;
    s->vals = NULL;
    s->ndocs = s->capdocs = s->doc_pos = 0;
}

/* A source over a vector of documents (a $facet's input). */
typedef struct vec_src {
    bson_t **docs;
    size_t n, pos;
} vec_src_t;

static int
vec_next(void *arg, const bson_t **doc, shl_status_t *st)
{
    vec_src_t *v = arg;
    (void)st;
    *doc = v->pos < v->n ? v->docs[v->pos++] : NULL;
    return 0;
}

/*
 * Append 'd' to 'arr', the array a $lookup joins or a $facet output being built, whose
 * enclosing document already holds 'base' bytes; n counts the elements. Past the stage's
 * size limit it fails with MongoDB's error for that stage: 4568 for $lookup
 * (internalLookupStageIntermediateDocumentMaxSizeBytes), 4031700 for $facet
 * (internalQueryFacetMaxOutputDocSizeBytes). The limit is checked before appending, so the
 * array never reaches libbson's 2 GiB ceiling whatever the knob says.
 */
static int
append_joined(const stage_t *s, bson_t *arr, uint32_t *n, int64_t base, const bson_t *d,
              shl_status_t *st)
{
    int64_t limit = s->kind == ST_FACET ? s->max_out : s->max_bytes;
    int64_t size = base + (int64_t)arr->len + (int64_t)shl_bson_array_element_len(*n, d->len);
    char key[16];
    const char *kp;

    if (size > limit || size > (int64_t)INT32_MAX - 1024) {
        if (s->kind == ST_FACET) {
            return shl_status_set(st, 4031700,
                                  "$facet output document would be %lld bytes, over its limit of "
                                  "%lld bytes (internalQueryFacetMaxOutputDocSizeBytes)",
                                  (long long)size, (long long)limit);
        }
        return shl_status_set(st, 4568,
                              "$lookup: the documents of %s joined to one document pass %lld "
                              "bytes (internalLookupStageIntermediateDocumentMaxSizeBytes)",
                              s->from != NULL ? s->from : "$documents", (long long)limit);
    }
    bson_uint32_to_string((*n)++, &kp, key, sizeof(key));
    bson_append_document(arr, kp, -1, d);
    return 0;
}

/* Run 'p' to the end, appending its documents to 'arr' with append_joined. */
static int
drain_into(const stage_t *s, shl_pipeline_t *p, bson_t *arr, uint32_t *n, int64_t base,
           shl_status_t *st)
{
    int ret = 0;
    const bson_t *d;

    for (;;) {
        SHL_ERR(shl_pipeline_next(p, &d, st));
        if (d == NULL) {
            break;
        }
        SHL_ERR(append_joined(s, arr, n, base, d, st));
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- $documents, $collStats,
 * $indexStats */

static int
next_documents(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    bson_t arr = BSON_INITIALIZER;
    bson_value_t v;
    bson_t empty = BSON_INITIALIZER;

    v.value_type = BSON_TYPE_EOD;
    *doc = NULL;
    if (!s->drained) {
        bson_iter_t it;
        s->drained = true;
        if (s->expr != NULL) {
            shl_expr_ctx_t ctx;
            bson_t view;
            eval_ctx(s, &empty, &ctx);
            SHL_ERR(shl_expr_evaluate(s->expr, &ctx, &v, st));
            if (v.value_type != BSON_TYPE_ARRAY || !query_bson_view(&v, &view)) {
                SHL_FAIL(st, 5858203, "error during $documents stage: an array is expected");
            }
            bson_concat(&arr, &view);
        } else {
            const shl_pipeline_env_t *env = s->pipe->opts.env;
            if (env == NULL || env->stats == NULL) {
                SHL_FAIL(st, SHL_CODE_NOT_IMPLEMENTED, "%s is not supported here", s->name);
            }
            SHL_ERR(env->stats(env->arg, s->name, &s->stats_spec, &arr, st));
        }
        bson_iter_init(&it, &arr);
        while (shl_iter_next(&it)) {
            bson_t view;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !query_bson_view(bson_iter_value(&it), &view)) {
                SHL_FAIL(st, 40228,
                         "'newRoot' expression must evaluate to an object, but resulting value "
                         "was of type: %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            SHL_ERR(docs_push(s, bson_copy(&view), st));
        }
    }
    if (s->doc_pos < s->ndocs) {
        *doc = s->docs[s->doc_pos++];
    }
done:
    bson_value_destroy(&v);
    bson_destroy(&arr);
    bson_destroy(&empty);
    return ret;
}

/* ---------------------------------------------------------------- $sample */

static uint64_t
sample_rand(void)
{
    static _Thread_local uint64_t x;
    if (x == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        x = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&ts ^
            0x9E3779B97F4A7C15ULL;
    }
    /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return x * 0x2545F4914F6CDD1DULL;
}

static int
next_sample(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;

    *doc = NULL;
    if (!s->drained) {
        /* Reservoir sampling keeps memory bounded by 'size' documents. */
        uint64_t seen = 0;
        for (;;) {
            SHL_ERR(pull_src(s, &in, st));
            if (in == NULL) {
                break;
            }
            seen++;
            if ((int64_t)s->ndocs < s->n) {
                SHL_ERR(docs_push(s, bson_copy(in), st));
            } else {
                uint64_t j = sample_rand() % seen;
                if (j < (uint64_t)s->n) {
                    s->mem += (int64_t)in->len - (int64_t)s->docs[j]->len;
                    bson_destroy(s->docs[j]);
                    s->docs[j] = bson_copy(in);
                    if (s->mem > s->max_bytes) {
                        SHL_ERR(mem_exceeded(s, st));
                    }
                }
            }
        }
        for (size_t i = s->ndocs; i > 1; i--) {
            size_t j = (size_t)(sample_rand() % i);
            bson_t *t = s->docs[i - 1];
            s->docs[i - 1] = s->docs[j];
            s->docs[j] = t;
        }
        s->drained = true;
    }
    if (s->doc_pos < s->ndocs) {
        *doc = s->docs[s->doc_pos++];
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- $facet */

static int
next_facet(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;

    *doc = NULL;
    if (s->drained) {
        goto done;
    }
    s->drained = true;
    for (;;) {
        SHL_ERR(pull_src(s, &in, st));
        if (in == NULL) {
            break;
        }
        SHL_ERR(docs_push(s, bson_copy(in), st));
    }
    bson_t *o = stage_out(s);
    for (size_t i = 0; i < s->nsubs; i++) {
        vec_src_t vs = {.docs = s->docs, .n = s->ndocs, .pos = 0};
        bson_t arr;
        uint32_t n = 0;
        shl_pipeline_set_source(s->subs[i], &(shl_pipeline_source_t){vec_next, &vs});
        /* What 'o' holds before this array's documents: its fields so far, this array's
         * type byte, key and header, and the closing bytes. */
        int64_t base = (int64_t)o->len + 1 + (int64_t)strlen(s->sub_names[i]) + 1 + 1;
        bson_append_array_begin(o, s->sub_names[i], -1, &arr);
        ret = drain_into(s, s->subs[i], &arr, &n, base, st);
        bson_append_array_end(o, &arr);
        SHL_ERR(ret);
    }
    /* The output may pass 16 MiB here, as MongoDB's may inside a pipeline; the reply's
     * limit applies to what finally leaves the pipeline (cursor batches). */
    docs_clear(s);
    *doc = o;
done:
    return ret;
}

/* ---------------------------------------------------------------- $lookup, $unionWith */

/* Append the values at dotted 'path' of 'doc' to the array 'arr', traversing arrays as a
 * query does (array elements themselves are added). */
static void
collect_path(const bson_t *doc, const char *path, bson_t *arr, uint32_t *n)
{
    const char *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    bson_iter_t it;

    if (!bson_iter_init(&it, doc)) {
        return;
    }
    while (shl_iter_next(&it)) {
        if (strlen(shl_iter_key(&it)) != len || strncmp(shl_iter_key(&it), path, len) != 0) {
            continue;
        }
        if (BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_iter_t a;
            bson_iter_recurse(&it, &a);
            while (shl_iter_next(&a)) {
                if (dot == NULL) {
                    char key[16];
                    const char *kp;
                    bson_uint32_to_string((*n)++, &kp, key, sizeof(key));
                    bson_append_iter(arr, kp, -1, &a);
                } else if (BSON_ITER_HOLDS_DOCUMENT(&a)) {
                    bson_t sub;
                    if (query_bson_view(bson_iter_value(&a), &sub)) {
                        collect_path(&sub, dot + 1, arr, n);
                    }
                }
            }
        } else if (dot == NULL) {
            char key[16];
            const char *kp;
            bson_uint32_to_string((*n)++, &kp, key, sizeof(key));
            bson_append_iter(arr, kp, -1, &it);
        } else if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_t sub;
            if (query_bson_view(bson_iter_value(&it), &sub)) {
                collect_path(&sub, dot + 1, arr, n);
            }
        }
        return;
    }
}

/* The foreign filter of an equality $lookup: {foreignField: {$in: [local values]}}, or
 * {foreignField: {$eq: null}} when the local field is missing. Regexes are compared as values
 * ($eq, which does not treat them as patterns), under an $or with the $in. */
static void
lookup_filter(const stage_t *s, const bson_t *in, bson_t *filter)
{
    bson_t vals = BSON_INITIALIZER, f, arr, ors, clause, eq;
    uint32_t n = 0, i = 0, nre = 0;
    bson_iter_t it;

    collect_path(in, s->local, &vals, &n);
    if (n == 0) {
        BSON_APPEND_DOCUMENT_BEGIN(filter, s->foreign, &f);
        BSON_APPEND_NULL(&f, "$eq");
        bson_append_document_end(filter, &f);
        goto done;
    }
    bson_iter_init(&it, &vals);
    while (shl_iter_next(&it)) {
        nre += BSON_ITER_HOLDS_REGEX(&it) ? 1 : 0;
    }
    /* Without regexes the filter is a plain $in, which the planner can serve with an index. */
    bson_t *parent = filter;
    if (nre > 0) {
        BSON_APPEND_ARRAY_BEGIN(filter, "$or", &ors);
        BSON_APPEND_DOCUMENT_BEGIN(&ors, "0", &clause);
        parent = &clause;
    }
    BSON_APPEND_DOCUMENT_BEGIN(parent, s->foreign, &f);
    BSON_APPEND_ARRAY_BEGIN(&f, "$in", &arr);
    bson_iter_init(&it, &vals);
    while (shl_iter_next(&it)) {
        char key[16];
        const char *kp;
        if (BSON_ITER_HOLDS_REGEX(&it)) {
            continue;
        }
        bson_uint32_to_string(i++, &kp, key, sizeof(key));
        bson_append_iter(&arr, kp, -1, &it);
    }
    bson_append_array_end(&f, &arr);
    bson_append_document_end(parent, &f);
    if (nre == 0) {
        goto done;
    }
    bson_append_document_end(&ors, &clause);
    i = 1;
    bson_iter_init(&it, &vals);
    while (nre > 0 && shl_iter_next(&it)) {
        char key[16];
        const char *kp;
        if (!BSON_ITER_HOLDS_REGEX(&it)) {
            continue;
        }
        bson_uint32_to_string(i++, &kp, key, sizeof(key));
        BSON_APPEND_DOCUMENT_BEGIN(&ors, kp, &clause);
        BSON_APPEND_DOCUMENT_BEGIN(&clause, s->foreign, &eq);
        bson_append_iter(&eq, "$eq", 3, &it);
        bson_append_document_end(&clause, &eq);
        bson_append_document_end(&ors, &clause);
    }
    bson_append_array_end(filter, &ors);
done:
    bson_destroy(&vals);
}

static void
close_cursor(stage_t *s)
{
    const shl_pipeline_env_t *env = s->pipe->opts.env;
    if (s->cursor_open && env != NULL && env->close != NULL) {
        env->close(env->arg, s->cursor);
    }
    s->cursor_open = false;
    s->cursor = NULL;
}

/* Open the foreign collection 's->from' as 'src' (empty when no 'from': $documents pipelines). */
static int
open_foreign(stage_t *s, const bson_t *filter, shl_pipeline_source_t *src, shl_status_t *st)
{
    int ret = 0;
    const shl_pipeline_env_t *env = s->pipe->opts.env;

    memset(src, 0, sizeof(*src));
    if (s->from == NULL) {
        goto done;
    }
    if (env == NULL || env->open == NULL) {
        SHL_FAIL(st, SHL_CODE_NOT_IMPLEMENTED, "%s is not supported here", s->name);
    }
    SHL_ERR(env->open(env->arg, s->from, filter, src, &s->cursor, st));
    s->cursor_open = true;
done:
    return ret;
}

static int sub_parse(shl_pipeline_t *parent, const bson_t *stages, pipe_ctx_t ctx,
                     const bson_t *vars, shl_pipeline_t **out, shl_status_t *st);

static int
next_lookup(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in, *d;
    bson_t filter = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    shl_pipeline_source_t src;
    uint32_t n = 0;
    shl_expr_ctx_t ctx;
    bson_value_t v, av;

    v.value_type = BSON_TYPE_EOD;
    *doc = NULL;
    SHL_ERR(pull_src(s, &in, st));
    if (in == NULL) {
        goto done;
    }
    if (s->local != NULL) {
        lookup_filter(s, in, &filter);
    }
    SHL_ERR(open_foreign(s, s->local != NULL ? &filter : NULL, &src, st));
    if (s->has_sub) {
        /* The sub-pipeline sees the outer variables and this document's `let` values. */
        bson_reinit(&s->lvars);
        if (s->pipe->opts.vars != NULL) {
            bson_iter_t it;
            bson_iter_init(&it, s->pipe->opts.vars);
            while (shl_iter_next(&it)) {
                bool shadowed = false;
                for (size_t i = 0; i < s->nlet; i++) {
                    shadowed = shadowed || strcmp(s->let_names[i], shl_iter_key(&it)) == 0;
                }
                if (!shadowed) {
                    bson_append_iter(&s->lvars, shl_iter_key(&it), -1, &it);
                }
            }
        }
        eval_ctx(s, in, &ctx);
        for (size_t i = 0; i < s->nlet; i++) {
            SHL_ERR(shl_expr_evaluate(s->let_exprs[i], &ctx, &v, st));
            if (v.value_type != BSON_TYPE_EOD) {
                query_append_value(&s->lvars, s->let_names[i], -1, &v);
            }
            bson_value_destroy(&v);
            v.value_type = BSON_TYPE_EOD;
        }
        shl_pipeline_destroy(s->run);
        s->run = NULL;
        SHL_ERR(sub_parse(s->pipe, &s->sub_spec, CTX_LOOKUP, &s->lvars, &s->run, st));
        shl_pipeline_set_source(s->run, &src);
        SHL_ERR(drain_into(s, s->run, &arr, &n, 0, st));
        shl_pipeline_destroy(s->run);
        s->run = NULL;
    } else {
        for (;;) {
            SHL_ERR(src.next(src.arg, &d, st));
            if (d == NULL) {
                break;
            }
            SHL_ERR(append_joined(s, &arr, &n, 0, d, st));
        }
    }
    close_cursor(s);
    {
        bson_t wrap = BSON_INITIALIZER;
        bson_iter_t wi;
        BSON_APPEND_ARRAY(&wrap, "a", &arr);
        bson_iter_init_find(&wi, &wrap, "a");
        av = *bson_iter_value(&wi);
        query_copy_set_path(in, s->as, &av, stage_out(s));
        bson_destroy(&wrap);
    }
    *doc = &s->out;
done:
    close_cursor(s);
    bson_value_destroy(&v);
    bson_destroy(&filter);
    bson_destroy(&arr);
    return ret;
}

static int
next_union_with(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;

    *doc = NULL;
    if (!s->src_done) {
        SHL_ERR(pull_src(s, doc, st));
        if (*doc != NULL) {
            goto done;
        }
        s->src_done = true;
        shl_pipeline_source_t src;
        SHL_ERR(open_foreign(s, NULL, &src, st));
        shl_pipeline_set_source(s->run, &src);
    }
    if (s->drained) {
        goto done;
    }
    SHL_ERR(shl_pipeline_next(s->run, doc, st));
    if (*doc == NULL) {
        s->drained = true;
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- $graphLookup */

/*
 * A set of values in MongoDB's equality (1, 1.0 and NumberLong(1) are one value): open
 * addressing over shl_bson_hash_fast. $graphLookup keeps the _ids it has visited and the
 * values it has already searched for in two of them.
 */
typedef struct vset {
    bson_value_t *vals;
    size_t n;
    size_t *slots; /* index + 1 into vals; 0 = empty */
    size_t nslots; /* a power of two */
} vset_t;

static void
vset_clear(vset_t *v)
{
    for (size_t i = 0; i < v->n; i++) {
        bson_value_destroy(&v->vals[i]);
    }
    bson_free(v->vals);
    bson_free(v->slots);
    memset(v, 0, sizeof(*v));
}

static size_t
vset_slot(const vset_t *v, const bson_value_t *x, bool *found)
{
    size_t i = (size_t)shl_bson_hash_fast(x) & (v->nslots - 1);
    *found = false;
    while (v->slots[i] != 0) {
        if (shl_bson_value_compare(&v->vals[v->slots[i] - 1], x) == 0) {
            *found = true;
            break;
        }
        i = (i + 1) & (v->nslots - 1);
    }
    return i;
}

static bool
vset_has(const vset_t *v, const bson_value_t *x)
{
    bool found = false;
    if (v->n > 0) {
        vset_slot(v, x, &found);
    }
    return found;
}

/* Add a copy of 'x'; false when it was there already. */
static bool
vset_add(vset_t *v, const bson_value_t *x)
{
    bool found;
    size_t slot;

    if (2 * (v->n + 1) > v->nslots) {
        size_t ns = v->nslots ? v->nslots * 2 : 16;
        bson_free(v->slots);
        v->slots = bson_malloc0(ns * sizeof(*v->slots));
        v->nslots = ns;
        for (size_t i = 0; i < v->n; i++) {
            slot = vset_slot(v, &v->vals[i], &found);
            v->slots[slot] = i + 1;
        }
        v->vals = bson_realloc(v->vals, (ns / 2) * sizeof(*v->vals));
    }
    slot = vset_slot(v, x, &found);
    if (found) {
        return false;
    }
    bson_value_copy(x, &v->vals[v->n]);
    v->slots[slot] = ++v->n;
    return true;
}

/* Account 'bytes' more against the stage's memory limit: 40099 as MongoDB. */
static int
graph_mem(stage_t *s, int64_t bytes, shl_status_t *st)
{
    s->mem += bytes;
    if (s->mem > s->max_bytes) {
        return shl_status_set(st, 40099, "$graphLookup reached maximum memory consumption");
    }
    return 0;
}

/* Add the values of the array 'vals' not searched for yet to 'next'. */
static int
graph_frontier_add(stage_t *s, const vset_t *searched, vset_t *next, const bson_t *vals,
                   shl_status_t *st)
{
    bson_iter_t it;
    int ret = 0;

    bson_iter_init(&it, vals);
    while (shl_iter_next(&it)) {
        const bson_value_t *x = bson_iter_value(&it);
        if (!vset_has(searched, x) && vset_add(next, x)) {
            int64_t bytes = 48;
            if (x->value_type == BSON_TYPE_DOCUMENT || x->value_type == BSON_TYPE_ARRAY) {
                bytes += x->value.v_doc.data_len;
            } else if (x->value_type == BSON_TYPE_UTF8) {
                bytes += x->value.v_utf8.len;
            }
            SHL_ERR(graph_mem(s, bytes, st));
        }
    }
done:
    return ret;
}

/*
 * One search level: {connectToField: {$in: frontier}} (and restrictSearchWithMatch) on the
 * foreign collection; documents not visited yet are kept with their depth, and their
 * connectFromField values not searched for yet make the next frontier.
 */
static int
graph_search(stage_t *s, vset_t *visited, vset_t *searched, vset_t *frontier, vset_t *next,
             int64_t depth, shl_status_t *st)
{
    bson_t filter = BSON_INITIALIZER, *in_parent = &filter, and, c0, f, arr;
    shl_pipeline_source_t src;
    const bson_t *d;
    int ret = 0;

    if (s->has_restrict) {
        BSON_APPEND_ARRAY_BEGIN(&filter, "$and", &and);
        BSON_APPEND_DOCUMENT_BEGIN(&and, "0", &c0);
        in_parent = &c0;
    }
    BSON_APPEND_DOCUMENT_BEGIN(in_parent, s->conn_to, &f);
    BSON_APPEND_ARRAY_BEGIN(&f, "$in", &arr);
    for (size_t i = 0; i < frontier->n; i++) {
        char key[16];
        const char *kp;
        bson_uint32_to_string((uint32_t)i, &kp, key, sizeof(key));
        query_append_value(&arr, kp, -1, &frontier->vals[i]);
        vset_add(searched, &frontier->vals[i]);
    }
    bson_append_array_end(&f, &arr);
    bson_append_document_end(in_parent, &f);
    if (s->has_restrict) {
        bson_append_document_end(&and, &c0);
        BSON_APPEND_DOCUMENT(&and, "1", &s->restrict_spec);
        bson_append_array_end(&filter, &and);
    }
    SHL_ERR(open_foreign(s, &filter, &src, st));
    for (;;) {
        bson_iter_t id;
        bson_t *kept;
        SHL_ERR(src.next(src.arg, &d, st));
        if (d == NULL) {
            break;
        }
        if (!bson_iter_init_find(&id, d, "_id") || !vset_add(visited, bson_iter_value(&id))) {
            continue;
        }
        kept = bson_new();
        if (s->depth_field != NULL) {
            bson_value_t dv;
            dv.value_type = BSON_TYPE_INT64;
            dv.value.v_int64 = depth;
            query_copy_set_path(d, s->depth_field, &dv, kept);
        } else {
            bson_concat(kept, d);
        }
        if (s->ndocs == s->capdocs) {
            s->capdocs = s->capdocs ? s->capdocs * 2 : 16;
            s->docs = bson_realloc(s->docs, s->capdocs * sizeof(*s->docs));
        }
        s->docs[s->ndocs++] = kept;
        SHL_ERR(graph_mem(s, (int64_t)kept->len + 64, st));
        if (s->max_depth < 0 || depth < s->max_depth) {
            bson_t vals = BSON_INITIALIZER;
            uint32_t n = 0;
            collect_path(d, s->conn_from, &vals, &n);
            ret = graph_frontier_add(s, searched, next, &vals, st);
            bson_destroy(&vals);
            SHL_ERR(ret);
        }
    }
done:
    close_cursor(s);
    bson_destroy(&filter);
    return ret;
}

static int
next_graph_lookup(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;
    shl_expr_ctx_t ctx;
    bson_value_t v;
    vset_t visited, searched, frontier, next;
    bson_t arr = BSON_INITIALIZER, start = BSON_INITIALIZER;

    memset(&visited, 0, sizeof(visited));
    memset(&searched, 0, sizeof(searched));
    memset(&frontier, 0, sizeof(frontier));
    memset(&next, 0, sizeof(next));
    v.value_type = BSON_TYPE_EOD;
    *doc = NULL;
    docs_clear(s);
    s->mem = 0;
    SHL_ERR(pull_src(s, &in, st));
    if (in == NULL) {
        goto done;
    }
    /* startWith: each element of an array, or the value itself (missing: nothing). */
    eval_ctx(s, in, &ctx);
    SHL_ERR(shl_expr_evaluate(s->expr, &ctx, &v, st));
    if (v.value_type == BSON_TYPE_ARRAY) {
        bson_t view;
        if (bson_init_static(&view, v.value.v_doc.data, v.value.v_doc.data_len)) {
            SHL_ERR(graph_frontier_add(s, &searched, &frontier, &view, st));
        }
    } else if (v.value_type != BSON_TYPE_EOD) {
        query_append_value(&start, "0", 1, &v);
        SHL_ERR(graph_frontier_add(s, &searched, &frontier, &start, st));
    }
    for (int64_t depth = 0; frontier.n > 0 && (s->max_depth < 0 || depth <= s->max_depth);
         depth++) {
        vset_t t;
        SHL_ERR(graph_search(s, &visited, &searched, &frontier, &next, depth, st));
        vset_clear(&frontier);
        t = frontier;
        frontier = next;
        next = t;
    }
    for (size_t i = 0; i < s->ndocs; i++) {
        char key[16];
        const char *kp;
        bson_uint32_to_string((uint32_t)i, &kp, key, sizeof(key));
        bson_append_document(&arr, kp, -1, s->docs[i]);
    }
    {
        bson_t wrap = BSON_INITIALIZER;
        bson_iter_t wi;
        BSON_APPEND_ARRAY(&wrap, "a", &arr);
        bson_iter_init_find(&wi, &wrap, "a");
        query_copy_set_path(in, s->as, bson_iter_value(&wi), stage_out(s));
        bson_destroy(&wrap);
    }
    *doc = &s->out;
done:
    docs_clear(s);
    vset_clear(&visited);
    vset_clear(&searched);
    vset_clear(&frontier);
    vset_clear(&next);
    bson_value_destroy(&v);
    bson_destroy(&arr);
    bson_destroy(&start);
    return ret;
}

/* ---------------------------------------------------------------- $bucketAuto granularity */

/* Preferred-number series for one decade (scaled by powers of ten), as MongoDB's rounders. */
static const double g_r5[] = {10, 16, 25, 40, 63};
static const double g_r10[] = {100, 125, 160, 200, 250, 315, 400, 500, 630, 800};
static const double g_r20[] = {100, 112, 125, 140, 160, 180, 200, 224, 250, 280,
                               315, 355, 400, 450, 500, 560, 630, 710, 800, 900};
static const double g_r40[] = {100, 106, 112, 118, 125, 132, 140, 150, 160, 170, 180, 190, 200,
                               212, 224, 236, 250, 265, 280, 300, 315, 355, 375, 400, 425, 450,
                               475, 500, 530, 560, 600, 630, 670, 710, 750, 800, 850, 900, 950};
static const double g_r80[] = {103, 109, 115, 122, 128, 136, 145, 155, 165, 175, 185, 195, 206, 218,
                               230, 243, 258, 272, 290, 307, 325, 345, 365, 387, 412, 437, 462, 487,
                               515, 545, 575, 615, 650, 690, 730, 775, 825, 875, 925, 975};
static const double g_125[] = {10, 20, 50};
static const double g_e6[] = {10, 15, 22, 33, 47, 68};
static const double g_e12[] = {10, 12, 15, 18, 22, 27, 33, 39, 47, 56, 68, 82};
static const double g_e24[] = {10, 11, 12, 13, 15, 16, 18, 20, 22, 24, 27, 30,
                               33, 36, 39, 43, 47, 51, 56, 62, 68, 75, 82, 91};
static const double g_e48[] = {100, 105, 110, 115, 121, 127, 133, 140, 147, 154, 162, 169,
                               178, 187, 196, 205, 215, 226, 237, 249, 261, 274, 287, 301,
                               316, 332, 348, 365, 383, 402, 422, 442, 464, 487, 511, 536,
                               562, 590, 619, 649, 681, 715, 750, 787, 825, 866, 909, 953};
static const double g_e96[] = {100, 102, 105, 107, 110, 113, 115, 118, 121, 124, 127, 130, 133, 137,
                               140, 143, 147, 150, 154, 158, 162, 165, 169, 174, 178, 182, 187, 191,
                               196, 200, 205, 210, 215, 221, 226, 232, 237, 243, 249, 255, 261, 267,
                               274, 280, 287, 294, 301, 309, 316, 324, 332, 340, 348, 357, 365, 374,
                               383, 392, 402, 412, 422, 432, 442, 453, 464, 475, 487, 499, 511, 523,
                               536, 549, 562, 576, 590, 604, 619, 634, 649, 665, 681, 698, 715, 732,
                               750, 768, 787, 806, 825, 845, 866, 887, 909, 931, 953, 976};
static const double g_e192[] = {
    100, 101, 102, 104, 105, 106, 107, 109, 110, 111, 113, 114, 115, 117, 118, 120, 121, 123,
    124, 126, 127, 129, 130, 132, 133, 135, 137, 138, 140, 142, 143, 145, 147, 149, 150, 152,
    154, 156, 158, 160, 162, 164, 165, 167, 169, 172, 174, 176, 178, 180, 182, 184, 187, 189,
    191, 193, 196, 198, 200, 203, 205, 208, 210, 213, 215, 218, 221, 223, 226, 229, 232, 234,
    237, 240, 243, 246, 249, 252, 255, 258, 261, 264, 267, 271, 274, 277, 280, 284, 287, 291,
    294, 298, 301, 305, 309, 312, 316, 320, 324, 328, 332, 336, 340, 344, 348, 352, 357, 361,
    365, 370, 374, 379, 383, 388, 392, 397, 402, 407, 412, 417, 422, 427, 432, 437, 442, 448,
    453, 459, 464, 470, 475, 481, 487, 493, 499, 505, 511, 517, 523, 530, 536, 542, 549, 556,
    562, 569, 576, 583, 590, 597, 604, 612, 619, 626, 634, 642, 649, 657, 665, 673, 681, 690,
    698, 706, 715, 723, 732, 741, 750, 759, 768, 777, 787, 796, 806, 816, 825, 835, 845, 856,
    866, 876, 887, 898, 909, 920, 931, 942, 953, 965, 976, 988};

typedef struct granularity {
    const char *name;
    const double *series; /* NULL: powers of two */
    size_t n;
} granularity_t;

#define GRAN(name, arr)                                                                            \
    {                                                                                              \
        name, arr, sizeof(arr) / sizeof(arr[0])                                                    \
    }
static const granularity_t granularities[] = {
    GRAN("R5", g_r5),      GRAN("R10", g_r10),   GRAN("R20", g_r20), GRAN("R40", g_r40),
    GRAN("R80", g_r80),    GRAN("1-2-5", g_125), GRAN("E6", g_e6),   GRAN("E12", g_e12),
    GRAN("E24", g_e24),    GRAN("E48", g_e48),   GRAN("E96", g_e96), GRAN("E192", g_e192),
    {"POWERSOF2", NULL, 0}};
#undef GRAN

/* 2^exp as $pow(2, exp) gives it: an int, a long past 2^30, a double for negative exponents. */
static void
pow2_value(int exp, bson_value_t *out)
{
    if (exp < 0 || exp > 62) {
        out->value_type = BSON_TYPE_DOUBLE;
        out->value.v_double = ldexp(1.0, exp);
    } else if (exp <= 30) {
        out->value_type = BSON_TYPE_INT32;
        out->value.v_int32 = (int32_t)1 << exp;
    } else {
        out->value_type = BSON_TYPE_INT64;
        out->value.v_int64 = (int64_t)1 << exp;
    }
}

/*
 * granularity_round --
 *     Round 'in' (a non-negative number, checked by the caller) up to the next value of the
 *     series strictly greater than it, or down to the previous one strictly smaller; 0 stays.
 */
static void
granularity_round(const granularity_t *g, const bson_value_t *in, bool up, bson_value_t *out)
{
    double x = query_value_as_double(in);

    if (x == 0.0) {
        *out = *in;
        return;
    }
    if (g->series == NULL) {
        int exp;
        if (in->value_type == BSON_TYPE_INT32 || in->value_type == BSON_TYPE_INT64) {
            int64_t v = in->value_type == BSON_TYPE_INT32 ? in->value.v_int32 : in->value.v_int64;
            int lead = __builtin_clzll((unsigned long long)v);
            int trail = __builtin_ctzll((unsigned long long)v);
            exp = up ? 63 - lead + 1 : (lead + trail == 63 ? 63 - lead - 1 : 63 - lead);
        } else {
            exp = up ? (int)(floor(log2(x)) + 1.0) : (int)(ceil(log2(x)) - 1.0);
        }
        pow2_value(exp, out);
        return;
    }
    const double *sr = g->series;
    size_t n = g->n;
    double m = 1.0, r = 0.0;
    out->value_type = BSON_TYPE_DOUBLE;
    if (up) {
        while (x >= sr[n - 1] * m) {
            m *= 10.0;
        }
        while (x < sr[0] * m) {
            double prev_min = sr[0] * m;
            m /= 10.0;
            if (x >= sr[n - 1] * m) {
                out->value.v_double = prev_min;
                return;
            }
        }
        for (size_t i = 0; i < n; i++) {
            if (x < sr[i] * m) {
                r = sr[i] * m;
                break;
            }
        }
    } else {
        while (x <= sr[0] * m) {
            m /= 10.0;
        }
        while (x > sr[n - 1] * m) {
            double prev_max = sr[n - 1] * m;
            m *= 10.0;
            if (x <= sr[0] * m) {
                out->value.v_double = prev_max;
                return;
            }
        }
        for (size_t i = 1; i < n; i++) {
            if (sr[i] * m >= x) {
                r = sr[i - 1] * m;
                break;
            }
        }
        if (r == 0.0) {
            r = sr[n - 1] * m;
        }
    }
    out->value.v_double = r;
}

/* ---------------------------------------------------------------- $bucketAuto */

static const stage_t *bucket_sort_stage;

static int
bucket_cmp(const void *x, const void *y)
{
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    int c = shl_expr_compare(&bucket_sort_stage->vals[a], &bucket_sort_stage->vals[b]);
    return c != 0 ? c : (a < b ? -1 : (a > b ? 1 : 0));
}

static int
bucket_auto_emit(stage_t *s, const size_t *order, size_t from, size_t to, const bson_value_t *min,
                 const bson_value_t *max, uint32_t *nout, shl_status_t *st)
{
    int ret = 0;
    accstate_t *acc = bson_aligned_alloc0(BSON_ALIGNOF(accstate_t), (s->naccs + 1) * sizeof(*acc));
    bson_t o = BSON_INITIALIZER, id;
    int64_t grow = 0;
    bson_value_t v;

    v.value_type = BSON_TYPE_EOD;
    for (size_t i = 0; i < s->naccs; i++) {
        query_acc_init(&acc[i], &s->accs[i]);
    }
    for (size_t k = from; k < to; k++) {
        shl_expr_ctx_t ctx;
        eval_ctx(s, s->docs[order[k]], &ctx);
        for (size_t i = 0; i < s->naccs; i++) {
            SHL_ERR(shl_expr_evaluate(s->accs[i].arg, &ctx, &v, st));
            SHL_ERR(query_acc_add(&acc[i], &s->accs[i], &v, s->docs[order[k]], &grow, st));
            bson_value_destroy(&v);
            v.value_type = BSON_TYPE_EOD;
        }
    }
    BSON_APPEND_DOCUMENT_BEGIN(&o, "_id", &id);
    query_append_value(&id, "min", 3, min);
    query_append_value(&id, "max", 3, max);
    bson_append_document_end(&o, &id);
    for (size_t i = 0; i < s->naccs; i++) {
        query_acc_result(&acc[i], &s->accs[i], &o);
    }
    {
        char key[16];
        const char *kp;
        bson_uint32_to_string((*nout)++, &kp, key, sizeof(key));
        bson_append_document(&s->buf, kp, -1, &o);
    }
done:
    for (size_t i = 0; i < s->naccs; i++) {
        query_acc_cleanup(&acc[i], &s->accs[i]);
    }
    bson_free(acc);
    bson_value_destroy(&v);
    bson_destroy(&o);
    return ret;
}

static int
next_bucket_auto(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;
    size_t *order = NULL;
    bson_value_t v;

    v.value_type = BSON_TYPE_EOD;
    *doc = NULL;
    if (!s->drained) {
        shl_expr_ctx_t ctx;
        uint32_t nout = 0;
        s->drained = true;
        bson_init(&s->buf);
        s->have_buf = true;
        for (;;) {
            SHL_ERR(pull_src(s, &in, st));
            if (in == NULL) {
                break;
            }
            eval_ctx(s, in, &ctx);
            SHL_ERR(shl_expr_evaluate(s->expr, &ctx, &v, st));
            if (s->gran != NULL) {
                if (!query_value_is_number(&v)) {
                    SHL_FAIL(st, 40258,
                             "$bucketAuto can specify a 'granularity' with numeric boundaries "
                             "only, but found a value with type: %s",
                             v.value_type == BSON_TYPE_EOD ? "missing"
                                                           : shl_bson_type_name(v.value_type));
                }
                if (isnan(query_value_as_double(&v))) {
                    SHL_FAIL(st, 40259,
                             "$bucketAuto can specify a 'granularity' with numeric boundaries "
                             "only, but found a NaN");
                }
                if (query_value_as_double(&v) < 0.0) {
                    SHL_FAIL(st, 40260,
                             "$bucketAuto can specify a 'granularity' with non-negative numbers "
                             "only, but found a negative number");
                }
            }
            if (v.value_type == BSON_TYPE_EOD) {
                v.value_type = BSON_TYPE_NULL;
            }
            s->vals = bson_realloc(s->vals, (s->ndocs + 1) * sizeof(*s->vals));
            s->vals[s->ndocs] = v;
            v.value_type = BSON_TYPE_EOD;
            s->mem += query_value_size(&s->vals[s->ndocs]);
            SHL_ERR(docs_push(s, bson_copy(in), st));
        }
        if (s->ndocs > 0) {
            order = bson_malloc(s->ndocs * sizeof(*order));
            for (size_t i = 0; i < s->ndocs; i++) {
                order[i] = i;
            }
            bucket_sort_stage = s;
            qsort(order, s->ndocs, sizeof(*order), bucket_cmp);
            bucket_sort_stage = NULL;
            size_t approx = (size_t)llround((double)s->ndocs / (double)s->n);
            if (approx < 1) {
                approx = 1;
            }
            /* MongoDB's bucket filling: 'approx' documents (all that remain in the last
             * bucket), then every following document with the same value, or below the
             * rounded-up boundary with a granularity. Minimums are inclusive, maximums
             * exclusive except in the last bucket. */
            size_t i = 0;
            bson_value_t prev_max = {.value_type = BSON_TYPE_EOD};
            for (int64_t b = 0; b < s->n && i < s->ndocs; b++) {
                size_t end =
                    b == s->n - 1 ? s->ndocs : (i + approx < s->ndocs ? i + approx : s->ndocs);
                bson_value_t min, max;
                if (s->gran != NULL) {
                    bson_value_t bound;
                    granularity_round(s->gran, &s->vals[order[end - 1]], true, &bound);
                    while (end < s->ndocs && (shl_expr_compare(&bound, &s->vals[order[end]]) > 0 ||
                                              shl_expr_compare(&s->vals[order[end - 1]],
                                                               &s->vals[order[end]]) == 0)) {
                        end++;
                    }
                    if (query_value_as_double(&bound) == 0.0 && end < s->ndocs) {
                        granularity_round(s->gran, &s->vals[order[end]], false, &max);
                    } else {
                        max = bound;
                    }
                    if (prev_max.value_type != BSON_TYPE_EOD) {
                        min = prev_max;
                    } else {
                        granularity_round(s->gran, &s->vals[order[i]], false, &min);
                    }
                } else {
                    while (end < s->ndocs &&
                           shl_expr_compare(&s->vals[order[end]], &s->vals[order[end - 1]]) == 0) {
                        end++;
                    }
                    min = s->vals[order[i]];
                    max = end < s->ndocs ? s->vals[order[end]] : s->vals[order[end - 1]];
                }
                SHL_ERR(bucket_auto_emit(s, order, i, end, &min, &max, &nout, st));
                prev_max = max;
                i = end;
            }
        }
        docs_clear(s);
        bson_iter_init(&s->buf_it, &s->buf);
    }
    if (s->have_buf && shl_iter_next(&s->buf_it)) {
        query_bson_view(bson_iter_value(&s->buf_it), &s->buf_cur);
        *doc = &s->buf_cur;
    }
done:
    bson_free(order);
    bson_value_destroy(&v);
    return ret;
}

/* ---------------------------------------------------------------- $redact */

/* What $$KEEP, $$PRUNE and $$DESCEND evaluate to inside $redact (not writable as literals: a
 * string starting with "$$" parses as a variable). */
#define REDACT_KEEP "$$KEEP"
#define REDACT_PRUNE "$$PRUNE"
#define REDACT_DESCEND "$$DESCEND"

static int redact_doc(stage_t *s, const bson_t *doc, bson_t *out, bool *kept, shl_status_t *st);

/* Redact the elements of an array: sub-documents recursively, other values kept. */
static int
redact_array(stage_t *s, const bson_t *arr, bson_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    uint32_t n = 0;

    bson_iter_init(&it, arr);
    while (shl_iter_next(&it)) {
        char key[16];
        const char *kp;
        bson_t sub;
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && query_bson_view(bson_iter_value(&it), &sub)) {
            bson_t child = BSON_INITIALIZER;
            bool kept = false;
            ret = redact_doc(s, &sub, &child, &kept, st);
            if (ret == 0 && kept) {
                bson_uint32_to_string(n++, &kp, key, sizeof(key));
                BSON_APPEND_DOCUMENT(out, kp, &child);
            }
            bson_destroy(&child);
            SHL_ERR(ret);
        } else if (BSON_ITER_HOLDS_ARRAY(&it) && query_bson_view(bson_iter_value(&it), &sub)) {
            bson_t child;
            bson_uint32_to_string(n++, &kp, key, sizeof(key));
            BSON_APPEND_ARRAY_BEGIN(out, kp, &child);
            ret = redact_array(s, &sub, &child, st);
            bson_append_array_end(out, &child);
            SHL_ERR(ret);
        } else {
            bson_uint32_to_string(n++, &kp, key, sizeof(key));
            bson_append_iter(out, kp, -1, &it);
        }
    }
done:
    return ret;
}

/* Evaluate the $redact expression at one level ('doc' is $$CURRENT) into 'out'. */
static int
redact_doc(stage_t *s, const bson_t *doc, bson_t *out, bool *kept, shl_status_t *st)
{
    int ret = 0;
    shl_expr_ctx_t ctx = {.root = doc, .vars = &s->lvars, .now_ms = 0};
    bson_value_t v;
    bson_iter_t it;
    char *json = NULL;

    v.value_type = BSON_TYPE_EOD;
    *kept = false;
    SHL_ERR(shl_expr_evaluate(s->expr, &ctx, &v, st));
    if (v.value_type == BSON_TYPE_UTF8 && strcmp(v.value.v_utf8.str, REDACT_KEEP) == 0) {
        bson_concat(out, doc);
        *kept = true;
    } else if (v.value_type == BSON_TYPE_UTF8 && strcmp(v.value.v_utf8.str, REDACT_PRUNE) == 0) {
        *kept = false;
    } else if (v.value_type == BSON_TYPE_UTF8 && strcmp(v.value.v_utf8.str, REDACT_DESCEND) == 0) {
        *kept = true;
        bson_iter_init(&it, doc);
        while (shl_iter_next(&it)) {
            bson_t sub;
            const char *k = shl_iter_key(&it);
            if (BSON_ITER_HOLDS_DOCUMENT(&it) && query_bson_view(bson_iter_value(&it), &sub)) {
                bson_t child = BSON_INITIALIZER;
                bool ck = false;
                ret = redact_doc(s, &sub, &child, &ck, st);
                if (ret == 0 && ck) {
                    BSON_APPEND_DOCUMENT(out, k, &child);
                }
                bson_destroy(&child);
                SHL_ERR(ret);
            } else if (BSON_ITER_HOLDS_ARRAY(&it) && query_bson_view(bson_iter_value(&it), &sub)) {
                bson_t child;
                BSON_APPEND_ARRAY_BEGIN(out, k, &child);
                ret = redact_array(s, &sub, &child, st);
                bson_append_array_end(out, &child);
                SHL_ERR(ret);
            } else {
                bson_append_iter(out, k, -1, &it);
            }
        }
    } else {
        json = v.value_type == BSON_TYPE_EOD ? bson_strdup("MISSING") : query_value_to_json(&v);
        SHL_FAIL(st, 17053,
                 "$redact's expression should not return anything aside from the variables $$KEEP, "
                 "$$DESCEND, and $$PRUNE, but returned %s",
                 json);
    }
done:
    bson_free(json);
    bson_value_destroy(&v);
    return ret;
}

static int
next_redact(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;

    *doc = NULL;
    if (!s->drained) {
        /* The outer variables plus the three $redact values, built once. */
        bson_iter_t it;
        s->drained = true;
        if (s->pipe->opts.vars != NULL && bson_iter_init(&it, s->pipe->opts.vars)) {
            while (shl_iter_next(&it)) {
                bson_append_iter(&s->lvars, shl_iter_key(&it), -1, &it);
            }
        }
        BSON_APPEND_UTF8(&s->lvars, "KEEP", REDACT_KEEP);
        BSON_APPEND_UTF8(&s->lvars, "PRUNE", REDACT_PRUNE);
        BSON_APPEND_UTF8(&s->lvars, "DESCEND", REDACT_DESCEND);
    }
    for (;;) {
        bool kept = false;
        SHL_ERR(pull_src(s, &in, st));
        if (in == NULL) {
            goto done;
        }
        SHL_ERR(redact_doc(s, in, stage_out(s), &kept, st));
        if (kept) {
            *doc = &s->out;
            goto done;
        }
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- dispatch */

/* A stage's input as a source, for the stages in window.c. */
static int
stage_src_next(void *arg, const bson_t **doc, shl_status_t *st)
{
    return pull_src(arg, doc, st);
}

static int
pull(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    switch (s->kind) {
    case ST_MATCH:
        return next_match(s, doc, st);
    case ST_PROJECT:
    case ST_ADDFIELDS:
        return next_project(s, doc, st);
    case ST_GROUP:
        return next_group(s, doc, st);
    case ST_SORT:
        return next_sort(s, doc, st);
    case ST_LIMIT:
        return next_limit(s, doc, st);
    case ST_SKIP:
        return next_skip(s, doc, st);
    case ST_UNWIND:
        return next_unwind(s, doc, st);
    case ST_REPLACE_ROOT:
        return next_replace_root(s, doc, st);
    case ST_BUCKET_AUTO:
        return next_bucket_auto(s, doc, st);
    case ST_FACET:
        return next_facet(s, doc, st);
    case ST_LOOKUP:
        return next_lookup(s, doc, st);
    case ST_UNION_WITH:
        return next_union_with(s, doc, st);
    case ST_GRAPH_LOOKUP:
        return next_graph_lookup(s, doc, st);
    case ST_SAMPLE:
        return next_sample(s, doc, st);
    case ST_DOCUMENTS:
        return next_documents(s, doc, st);
    case ST_OUTPUT:
        return pull_src(s, doc, st);
    case ST_REDACT:
        return next_redact(s, doc, st);
    case ST_WINDOW: {
        shl_pipeline_source_t in = {.next = stage_src_next, .arg = s};
        return query_wstage_next(s->win, &in, doc, st);
    }
    }
    *doc = NULL;
    return 0;
}

static void
stage_destroy(stage_t *s)
{
    if (s == NULL) {
        return;
    }
    shl_matcher_destroy(s->matcher);
    shl_projection_destroy(s->proj);
    shl_expr_destroy(s->expr);
    for (size_t i = 0; i < s->naccs; i++) {
        bson_free(s->accs[i].field);
        shl_expr_destroy(s->accs[i].arg);
        shl_sort_pattern_destroy(s->accs[i].sort_by);
    }
    for (group_t *g = s->ofirst, *n; g != NULL; g = n) {
        n = g->onext;
        for (size_t i = 0; i < s->naccs; i++) {
            query_acc_cleanup(&g->acc[i], &s->accs[i]);
        }
        bson_value_destroy(&g->key);
        bson_free(g);
    }
    bson_free(s->accs);
    bson_free(s->buckets);
    shl_sorter_destroy(s->sorter);
    shl_sort_pattern_destroy(s->pattern);
    if (s->out_init) {
        bson_destroy(&s->out);
    }
    if (s->have_in) {
        bson_destroy(&s->cur_in);
    }
    bson_free(s->path);
    bson_free(s->index_field);
    close_cursor(s);
    docs_clear(s);
    if (s->have_buf) {
        bson_destroy(&s->buf);
    }
    for (size_t i = 0; i < s->nsubs; i++) {
        shl_pipeline_destroy(s->subs[i]);
        bson_free(s->sub_names[i]);
    }
    bson_free(s->subs);
    bson_free(s->sub_names);
    bson_free(s->from);
    bson_free(s->local);
    bson_free(s->foreign);
    bson_free(s->as);
    bson_destroy(&s->sub_spec);
    for (size_t i = 0; i < s->nlet; i++) {
        bson_free(s->let_names[i]);
        shl_expr_destroy(s->let_exprs[i]);
    }
    bson_free(s->let_names);
    bson_free(s->let_exprs);
    bson_destroy(&s->lvars);
    shl_pipeline_destroy(s->run);
    bson_destroy(&s->stats_spec);
    bson_free(s->out_db);
    bson_free(s->out_coll);
    if (s->on_fields != NULL) {
        bson_strfreev(s->on_fields);
    }
    bson_destroy(&s->merge_let);
    bson_destroy(&s->merge_pipe);
    bson_free(s->conn_from);
    bson_free(s->conn_to);
    bson_free(s->depth_field);
    bson_destroy(&s->restrict_spec);
    query_wstage_destroy(s->win);
    bson_free(s->name);
    bson_destroy(&s->spec);
    bson_free(s);
}

/* ---------------------------------------------------------------- parsing */

static stage_t *
stage_new(shl_pipeline_t *p, stage_kind_t kind, const char *name, const bson_iter_t *arg)
{
    stage_t *s = bson_aligned_alloc0(BSON_ALIGNOF(stage_t), sizeof(*s));
    s->kind = kind;
    s->pipe = p;
    s->name = bson_strdup(name);
    bson_init(&s->spec);
    bson_init(&s->sub_spec);
    bson_init(&s->lvars);
    bson_init(&s->stats_spec);
    bson_init(&s->merge_let);
    bson_init(&s->merge_pipe);
    bson_init(&s->restrict_spec);
    s->max_depth = -1;
    if (arg != NULL) {
        bson_append_iter(&s->spec, name, -1, arg);
    }
    return s;
}

static void
pipe_push(shl_pipeline_t *p, stage_t *s)
{
    p->stages = bson_realloc(p->stages, (p->nstages + 1) * sizeof(*p->stages));
    p->stages[p->nstages++] = s;
}

static int
arg_doc(const bson_iter_t *it, bson_t *view, int code, const char *msg, shl_status_t *st)
{
    const uint8_t *data;
    uint32_t len;

    if (!BSON_ITER_HOLDS_DOCUMENT(it)) {
        return shl_status_set(st, code, "%s", msg);
    }
    bson_iter_document(it, &len, &data);
    bson_init_static(view, data, len);
    return 0;
}

/* Evaluate and validate the 'n' of an N accumulator (MongoDB's AccumulatorN::validateN). */
static int
parse_acc_n(const bson_t *vars, const bson_value_t *spec, int64_t *n, shl_status_t *st)
{
    int ret = 0;
    shl_expr_t *e = NULL;
    bson_value_t v;
    bson_t empty = BSON_INITIALIZER;
    shl_expr_ctx_t ctx = {.root = &empty, .vars = vars, .now_ms = 0};
    char *json = NULL;

    v.value_type = BSON_TYPE_EOD;
    SHL_ERR(shl_expr_parse(spec, &e, st));
    SHL_ERR(shl_expr_evaluate(e, &ctx, &v, st));
    if (!query_value_is_number(&v)) {
        json = v.value_type == BSON_TYPE_EOD ? bson_strdup("MISSING") : query_value_to_json(&v);
        SHL_FAIL(st, 5787902, "Value for 'n' must be of integral type, but found %s", json);
    }
    double d = query_value_as_double(&v);
    if (!(d >= -9.2e18 && d <= 9.2e18) || d != (double)(int64_t)d) {
        json = query_value_to_json(&v);
        SHL_FAIL(st, 5787903, "Value for 'n' must be of integral type, but found %s", json);
    }
    *n = (int64_t)d;
    if (*n <= 0) {
        SHL_FAIL(st, 5787908, "'n' must be greater than 0, found %lld", (long long)*n);
    }
done:
    bson_free(json);
    bson_value_destroy(&v);
    bson_destroy(&empty);
    shl_expr_destroy(e);
    return ret;
}

/*
 * query_acc_parse --
 *     Parse the accumulator 'a' (iterator on {$op: <arg>}'s only field) into 'd' (d->field set
 *     by the caller). MongoDB's codes: 15952 unknown operator, 40237 unary operators given an
 *     array, 5787900/5787801/5788001 N-accumulator arguments not objects, 5787901/5788002
 *     unknown arguments, 5787906/5788003 missing n, 5787907 missing input, 5788004 missing
 *     output, 5788005 missing sortBy.
 */
int
query_acc_parse(const bson_t *vars, const bson_iter_t *a_in, accdef_t *d, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t acopy = *a_in, *a = &acopy;
    const char *op = shl_iter_key(a);
    static const struct {
        const char *name;
        acc_kind_t kind;
    } ops[] = {{"$sum", ACC_SUM},
               {"$avg", ACC_AVG},
               {"$min", ACC_MIN},
               {"$max", ACC_MAX},
               {"$first", ACC_FIRST},
               {"$last", ACC_LAST},
               {"$push", ACC_PUSH},
               {"$addToSet", ACC_ADDTOSET},
               {"$stdDevPop", ACC_STDDEV_POP},
               {"$stdDevSamp", ACC_STDDEV_SAMP},
               {"$mergeObjects", ACC_MERGE_OBJECTS},
               {"$top", ACC_TOP},
               {"$bottom", ACC_BOTTOM},
               {"$topN", ACC_TOP_N},
               {"$bottomN", ACC_BOTTOM_N},
               {"$firstN", ACC_FIRST_N},
               {"$lastN", ACC_LAST_N},
               {"$maxN", ACC_MAX_N},
               {"$minN", ACC_MIN_N}};
    bool found = false;
    bson_t view;
    bson_iter_t f;
    const bson_value_t *n = NULL, *input = NULL, *sort_by = NULL;
    bson_value_t nv, iv, sv; /* shallow copies: the iterator's value is overwritten */

    if (strcmp(op, "$count") == 0) {
        if (!BSON_ITER_HOLDS_DOCUMENT(a) || !query_bson_view(bson_iter_value(a), &view) ||
            !bson_empty(&view)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "$count takes no arguments, i.e. $count:{}");
        }
        bson_value_t one = {.value_type = BSON_TYPE_INT32};
        one.value.v_int32 = 1;
        d->kind = ACC_SUM;
        SHL_ERR(shl_expr_parse(&one, &d->arg, st));
        goto done;
    }
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        if (strcmp(op, ops[i].name) == 0) {
            d->kind = ops[i].kind;
            found = true;
        }
    }
    if (!found) {
        SHL_FAIL(st, 15952, "Unknown group operator '%s'", op);
    }
    if (d->kind < ACC_TOP) {
        if (BSON_ITER_HOLDS_ARRAY(a)) {
            SHL_FAIL(st, 40237, "The %s accumulator is a unary operator", op);
        }
        SHL_ERR(shl_expr_parse(bson_iter_value(a), &d->arg, st));
        goto done;
    }
    bool top = d->kind <= ACC_BOTTOM_N;
    bool single = d->kind == ACC_TOP || d->kind == ACC_BOTTOM;
    if (!BSON_ITER_HOLDS_DOCUMENT(a) || !query_bson_view(bson_iter_value(a), &view)) {
        char *json = query_value_to_json(bson_iter_value(a));
        ret = shl_status_set(
            st, top ? 5788001 : (d->kind == ACC_MAX_N || d->kind == ACC_MIN_N ? 5787900 : 5787801),
            "specification must be an object; found %s: %s", op, json);
        bson_free(json);
        goto done;
    }
    bson_iter_init(&f, &view);
    while (shl_iter_next(&f)) {
        const char *k = shl_iter_key(&f);
        if (!single && strcmp(k, "n") == 0) {
            nv = *bson_iter_value(&f);
            n = &nv;
        } else if (top && strcmp(k, "output") == 0) {
            iv = *bson_iter_value(&f);
            input = &iv;
        } else if (top && strcmp(k, "sortBy") == 0) {
            sv = *bson_iter_value(&f);
            sort_by = &sv;
        } else if (!top && strcmp(k, "input") == 0) {
            iv = *bson_iter_value(&f);
            input = &iv;
        } else if (top) {
            SHL_FAIL(st, 5788002, "Unknown argument to %s '%s'", op, k);
        } else {
            SHL_FAIL(st, 5787901, "Unknown argument for 'n' operator: %s", k);
        }
    }
    if (!single && n == NULL) {
        SHL_FAIL(st, top ? 5788003 : 5787906, "Missing value for 'n'");
    }
    if (input == NULL) {
        SHL_FAIL(st, top ? 5788004 : 5787907, "Missing value for '%s'", top ? "output" : "input");
    }
    if (top && sort_by == NULL) {
        SHL_FAIL(st, 5788005, "Missing value for 'sortBy'");
    }
    if (single) {
        d->n = 1;
    } else {
        SHL_ERR(parse_acc_n(vars, n, &d->n, st));
    }
    if (top) {
        bson_t sview;
        if (!query_bson_view(sort_by, &sview) || sort_by->value_type != BSON_TYPE_DOCUMENT) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "expected 'sortBy' to be an object");
        }
        if (bson_empty(&sview)) {
            SHL_FAIL(st, 15976, "$sort stage must have at least one sort key");
        }
        SHL_ERR(shl_sort_pattern_new(&sview, &d->sort_by, st));
    }
    SHL_ERR(shl_expr_parse(input, &d->arg, st));
done:
    return ret;
}

/* Parse the accumulators of an object {field: {$acc: arg}} (a $group without _id, a $bucket's or
 * $bucketAuto's output) into s->accs. */
static int
parse_acc_fields(shl_pipeline_t *p, stage_t *s, const char *k, const bson_iter_t *it,
                 shl_status_t *st)
{
    int ret = 0;
    bson_iter_t a;

    if (strchr(k, '.') != NULL) {
        SHL_FAIL(st, 40235, "The field name '%s' cannot contain '.'", k);
    }
    if (k[0] == '$') {
        SHL_FAIL(st, 40236, "The field name '%s' cannot be an operator name", k);
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &a) || !shl_iter_next(&a)) {
        SHL_FAIL(st, 40234, "The field '%s' must be an accumulator object", k);
    }
    accdef_t *d = &s->accs[s->naccs];
    d->field = bson_strdup(k);
    s->naccs++;
    SHL_ERR(query_acc_parse(p->opts.vars, &a, d, st));
    if (shl_iter_next(&a)) {
        SHL_FAIL(st, 40238, "The field '%s' must specify one accumulator", k);
    }
done:
    return ret;
}

static int
parse_group(shl_pipeline_t *p, const bson_t *spec, stage_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    stage_t *s = NULL;
    bool have_id = false;

    s = stage_new(p, ST_GROUP, "$group", NULL);
    BSON_APPEND_DOCUMENT(&s->spec, "$group", spec);
    s->nbuckets = 64;
    s->buckets = bson_malloc0(s->nbuckets * sizeof(*s->buckets));
    s->accs = bson_malloc0((bson_count_keys(spec) + 1) * sizeof(*s->accs));
    bson_iter_init(&it, spec);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "_id") == 0) {
            SHL_ERR(shl_expr_parse(bson_iter_value(&it), &s->expr, st));
            have_id = true;
            continue;
        }
        SHL_ERR(parse_acc_fields(p, s, k, &it, st));
    }
    if (!have_id) {
        SHL_FAIL(st, 15955, "a group specification must include an _id");
    }
    *out = s;
    s = NULL;
done:
    stage_destroy(s);
    return ret;
}

static int
parse_count_name(const bson_iter_t *it, const char **name, shl_status_t *st)
{
    int ret = 0;

    if (!BSON_ITER_HOLDS_UTF8(it)) {
        SHL_FAIL(st, 40156, "the count field must be a non-empty string");
    }
    *name = bson_iter_utf8(it, NULL);
    if ((*name)[0] == '\0') {
        SHL_FAIL(st, 40157, "the count field must be a non-empty string");
    }
    if ((*name)[0] == '$') {
        SHL_FAIL(st, 40158, "the count field cannot be a $-prefixed path");
    }
    if (strchr(*name, '.') != NULL) {
        SHL_FAIL(st, 40160, "the count field cannot contain '.'");
    }
done:
    return ret;
}

static int
parse_int_arg(const bson_iter_t *it, const char *stage, int64_t *n, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t copy = *it;
    const bson_value_t *v = bson_iter_value(&copy);

    if (!query_value_is_number(v)) {
        SHL_FAIL(st, strcmp(stage, "$limit") == 0 ? 15957 : 15972,
                 "the %s must be specified as a number",
                 strcmp(stage, "$limit") == 0 ? "limit" : "skip");
    }
    double d = query_value_as_double(v);
    if (d != (double)(int64_t)d) {
        SHL_FAIL(st, strcmp(stage, "$limit") == 0 ? 15957 : 15972,
                 "invalid argument to %s stage: Cannot represent as a 64-bit integer", stage);
    }
    *n = (int64_t)d;
    if (strcmp(stage, "$limit") == 0 && *n <= 0) {
        SHL_FAIL(st, 15958, "the limit must be positive");
    }
    if (strcmp(stage, "$skip") == 0 && *n < 0) {
        SHL_FAIL(st, 15956, "invalid argument to $skip stage: Expected a non-negative number");
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- parsing: newer stages */

static int parse_stages(shl_pipeline_t *p, const bson_t *stages, shl_status_t *st);

/*
 * sub_parse --
 *     Parse a sub-pipeline ($facet, $lookup, $unionWith) with the parent's options and
 *     environment; 'vars' replaces the variables when not NULL. Nesting is bounded as
 *     MongoDB's (MaxSubPipelineDepthExceeded past 20).
 */
static int
sub_parse(shl_pipeline_t *parent, const bson_t *stages, pipe_ctx_t ctx, const bson_t *vars,
          shl_pipeline_t **out, shl_status_t *st)
{
    int ret = 0;
    shl_pipeline_t *p = bson_malloc0(sizeof(*p));

    *out = NULL;
    p->opts = parent->opts;
    if (vars != NULL) {
        p->opts.vars = vars;
    }
    p->ctx = ctx;
    p->depth = parent->depth + 1;
    if (p->depth > 20) {
        SHL_FAIL(st, SHL_CODE_MAX_SUB_PIPELINE_DEPTH_EXCEEDED,
                 "Maximum number of nested sub-pipelines exceeded. Limit is 20");
    }
    SHL_ERR(parse_stages(p, stages, st));
    *out = p;
    p = NULL;
done:
    shl_pipeline_destroy(p);
    return ret;
}

static char *
value_json(const bson_value_t *v)
{
    return query_value_to_json(v);
}

/* $bucket: rewritten, as MongoDB does, into $group by a $switch over the boundaries and a
 * $sort on _id. */
static int
parse_bucket(shl_pipeline_t *p, const bson_iter_t *arg, stage_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_t view, group = BSON_INITIALIZER, idexpr, sw, branches, sortspec = BSON_INITIALIZER;
    bson_iter_t it, b;
    const bson_value_t *group_by = NULL, *bounds = NULL, *def = NULL;
    bson_value_t gv, bv, dv;
    bson_t outspec;
    bool have_out = false;
    stage_t *s = NULL;
    char *j1 = NULL, *j2 = NULL;
    bson_iter_t acopy = *arg;

    *out = NULL;
    if (!BSON_ITER_HOLDS_DOCUMENT(&acopy) || !query_bson_view(bson_iter_value(&acopy), &view)) {
        SHL_FAIL(st, 40201, "Argument to $bucket stage must be an object, but found type: %s.",
                 shl_bson_type_name(shl_iter_type(&acopy)));
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "groupBy") == 0) {
            gv = *bson_iter_value(&it);
            group_by = &gv;
            if (!((gv.value_type == BSON_TYPE_UTF8 && gv.value.v_utf8.str[0] == '$') ||
                  gv.value_type == BSON_TYPE_DOCUMENT)) {
                j1 = value_json(&gv);
                SHL_FAIL(st, 40202,
                         "The $bucket 'groupBy' field must be defined as a $-prefixed path or an "
                         "expression, but found: %s.",
                         j1);
            }
        } else if (strcmp(k, "boundaries") == 0) {
            bv = *bson_iter_value(&it);
            bounds = &bv;
            if (!BSON_ITER_HOLDS_ARRAY(&it)) {
                SHL_FAIL(st, 40200,
                         "The $bucket 'boundaries' field must be an array, but found type: %s.",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
        } else if (strcmp(k, "default") == 0) {
            dv = *bson_iter_value(&it);
            def = &dv;
        } else if (strcmp(k, "output") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) ||
                !query_bson_view(bson_iter_value(&it), &outspec)) {
                SHL_FAIL(st, 40196,
                         "The $bucket 'output' field must be an object, but found type: %s.",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            have_out = true;
        } else {
            SHL_FAIL(st, 40197, "Unrecognized option to $bucket: %s.", k);
        }
    }
    if (group_by == NULL || bounds == NULL) {
        SHL_FAIL(st, 40198, "$bucket requires 'groupBy' and 'boundaries' to be specified.");
    }
    bson_t barr;
    query_bson_view(bounds, &barr);
    uint32_t nb = bson_count_keys(&barr);
    if (nb < 2) {
        SHL_FAIL(st, 40192,
                 "The $bucket 'boundaries' field must have at least 2 values, but found %u "
                 "value(s).",
                 nb);
    }
    {
        bson_value_t prev;
        bool have_prev = false;
        uint32_t i = 0;
        bson_iter_init(&b, &barr);
        while (shl_iter_next(&b)) {
            const bson_value_t *cur = bson_iter_value(&b);
            if (have_prev) {
                if (shl_bson_canonical_type(prev.value_type) !=
                    shl_bson_canonical_type(cur->value_type)) {
                    SHL_FAIL(st, 40193,
                             "All values in the the 'boundaries' option to $bucket must have the "
                             "same type. Found conflicting types %s and %s.",
                             shl_bson_type_name(prev.value_type),
                             shl_bson_type_name(cur->value_type));
                }
                if (shl_bson_value_compare(&prev, cur) >= 0) {
                    j1 = value_json(&prev);
                    j2 = value_json(cur);
                    SHL_FAIL(st, 40194,
                             "The 'boundaries' option to $bucket must be sorted in ascending "
                             "order, but elements %u and %u are not in ascending order (%s is not "
                             "less than %s).",
                             i - 1, i, j1, j2);
                }
            }
            prev = *cur;
            have_prev = true;
            i++;
        }
    }
    if (def != NULL) {
        bson_iter_t first, last;
        bson_iter_init(&first, &barr);
        shl_iter_next(&first);
        bson_iter_init(&last, &barr);
        while (shl_iter_next(&last)) {
            b = last;
        }
        if (shl_bson_canonical_type(def->value_type) ==
                shl_bson_canonical_type(shl_iter_type(&first)) &&
            shl_bson_value_compare(def, bson_iter_value(&first)) >= 0 &&
            shl_bson_value_compare(def, bson_iter_value(&b)) < 0) {
            SHL_FAIL(st, 40199,
                     "The $bucket 'default' field must be less than the lowest boundary or "
                     "greater than or equal to the highest boundary.");
        }
    }
    /* {_id: {$switch: {branches: [{case: {$and: [{$gte: [g, lo]}, {$lt: [g, hi]}]}, then: lo}],
     *  default: def}}, <output or count: {$sum: 1}>} */
    BSON_APPEND_DOCUMENT_BEGIN(&group, "_id", &idexpr);
    BSON_APPEND_DOCUMENT_BEGIN(&idexpr, "$switch", &sw);
    BSON_APPEND_ARRAY_BEGIN(&sw, "branches", &branches);
    {
        bson_iter_t lo, hi;
        uint32_t i = 0;
        bson_iter_init(&lo, &barr);
        bson_iter_init(&hi, &barr);
        shl_iter_next(&hi);
        while (shl_iter_next(&lo) && shl_iter_next(&hi)) {
            bson_t br, cs, and, ge, gea, lt, lta, lit;
            char key[16];
            const char *kp;
            bson_uint32_to_string(i++, &kp, key, sizeof(key));
            BSON_APPEND_DOCUMENT_BEGIN(&branches, kp, &br);
            BSON_APPEND_DOCUMENT_BEGIN(&br, "case", &cs);
            BSON_APPEND_ARRAY_BEGIN(&cs, "$and", &and);
            BSON_APPEND_DOCUMENT_BEGIN(&and, "0", &ge);
            BSON_APPEND_ARRAY_BEGIN(&ge, "$gte", &gea);
            bson_append_value(&gea, "0", 1, group_by);
            BSON_APPEND_DOCUMENT_BEGIN(&gea, "1", &lit);
            bson_append_iter(&lit, "$literal", -1, &lo);
            bson_append_document_end(&gea, &lit);
            bson_append_array_end(&ge, &gea);
            bson_append_document_end(&and, &ge);
            BSON_APPEND_DOCUMENT_BEGIN(&and, "1", &lt);
            BSON_APPEND_ARRAY_BEGIN(&lt, "$lt", &lta);
            bson_append_value(&lta, "0", 1, group_by);
            BSON_APPEND_DOCUMENT_BEGIN(&lta, "1", &lit);
            bson_append_iter(&lit, "$literal", -1, &hi);
            bson_append_document_end(&lta, &lit);
            bson_append_array_end(&lt, &lta);
            bson_append_document_end(&and, &lt);
            bson_append_array_end(&cs, &and);
            bson_append_document_end(&br, &cs);
            BSON_APPEND_DOCUMENT_BEGIN(&br, "then", &lit);
            bson_append_iter(&lit, "$literal", -1, &lo);
            bson_append_document_end(&br, &lit);
            bson_append_document_end(&branches, &br);
        }
    }
    bson_append_array_end(&sw, &branches);
    if (def != NULL) {
        bson_t lit;
        BSON_APPEND_DOCUMENT_BEGIN(&sw, "default", &lit);
        bson_append_value(&lit, "$literal", -1, def);
        bson_append_document_end(&sw, &lit);
    }
    bson_append_document_end(&idexpr, &sw);
    bson_append_document_end(&group, &idexpr);
    if (have_out) {
        bson_concat(&group, &outspec);
    } else {
        bson_t c;
        BSON_APPEND_DOCUMENT_BEGIN(&group, "count", &c);
        BSON_APPEND_INT32(&c, "$sum", 1);
        bson_append_document_end(&group, &c);
    }
    SHL_ERR(parse_group(p, &group, &s, st));
    bson_reinit(&s->spec);
    bson_append_iter(&s->spec, "$bucket", -1, arg);
    pipe_push(p, s);
    BSON_APPEND_INT32(&sortspec, "_id", 1);
    s = stage_new(p, ST_SORT, "$sort", NULL);
    BSON_APPEND_DOCUMENT(&s->spec, "$sort", &sortspec);
    SHL_ERR(shl_sort_pattern_new(&sortspec, &s->pattern, st));
    *out = s;
    s = NULL;
done:
    stage_destroy(s);
    bson_free(j1);
    bson_free(j2);
    bson_destroy(&group);
    bson_destroy(&sortspec);
    return ret;
}

static int
parse_bucket_auto(shl_pipeline_t *p, const bson_iter_t *arg, stage_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_t view;
    bson_iter_t it, acopy = *arg;
    stage_t *s = stage_new(p, ST_BUCKET_AUTO, "$bucketAuto", arg);
    bool have_buckets = false;
    char *j = NULL;

    *out = NULL;
    if (!BSON_ITER_HOLDS_DOCUMENT(&acopy) || !query_bson_view(bson_iter_value(&acopy), &view)) {
        SHL_FAIL(st, 40240, "The argument to $bucketAuto must be an object, but found type: %s.",
                 shl_bson_type_name(shl_iter_type(&acopy)));
    }
    s->accs = bson_malloc0((bson_count_keys(&view) + 2) * sizeof(*s->accs));
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "groupBy") == 0) {
            bson_value_t gv = *bson_iter_value(&it);
            if (!((gv.value_type == BSON_TYPE_UTF8 && gv.value.v_utf8.str[0] == '$') ||
                  gv.value_type == BSON_TYPE_DOCUMENT)) {
                j = value_json(&gv);
                SHL_FAIL(st, 40239,
                         "The $bucketAuto 'groupBy' field must be defined as a $-prefixed path or "
                         "an expression object, but found: %s.",
                         j);
            }
            SHL_ERR(shl_expr_parse(&gv, &s->expr, st));
        } else if (strcmp(k, "buckets") == 0) {
            const bson_value_t *v = bson_iter_value(&it);
            double d = query_value_is_number(v) ? query_value_as_double(v) : 0.5;
            if (!query_value_is_number(v)) {
                SHL_FAIL(st, 40241,
                         "The $bucketAuto 'buckets' field must be a numeric value, but found "
                         "type: %s",
                         shl_bson_type_name(v->value_type));
            }
            if (!(d >= INT32_MIN && d <= INT32_MAX) || d != (double)(int32_t)d) {
                SHL_FAIL(st, 40242,
                         "The $bucketAuto 'buckets' field must be representable as a 32-bit "
                         "integer, but found %g",
                         d);
            }
            if (d <= 0) {
                SHL_FAIL(st, 40243,
                         "The $bucketAuto 'buckets' field must be greater than 0, but found: %d.",
                         (int)d);
            }
            s->n = (int64_t)d;
            have_buckets = true;
        } else if (strcmp(k, "output") == 0) {
            bson_t o;
            bson_iter_t f;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !query_bson_view(bson_iter_value(&it), &o)) {
                SHL_FAIL(st, 40244,
                         "The $bucketAuto 'output' field must be an object, but found type: %s.",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            bson_iter_init(&f, &o);
            while (shl_iter_next(&f)) {
                SHL_ERR(parse_acc_fields(p, s, shl_iter_key(&f), &f, st));
            }
        } else if (strcmp(k, "granularity") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, 40261,
                         "The $bucketAuto 'granularity' field must be a string, but found type: "
                         "%s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            const char *gname = bson_iter_utf8(&it, NULL);
            for (size_t g = 0; g < sizeof(granularities) / sizeof(granularities[0]); g++) {
                if (strcmp(granularities[g].name, gname) == 0) {
                    s->gran = &granularities[g];
                }
            }
            if (s->gran == NULL) {
                SHL_FAIL(st, 40257, "Unknown rounding granularity '%s'", gname);
            }
        } else {
            SHL_FAIL(st, 40245, "Unrecognized option to $bucketAuto: %s.", k);
        }
    }
    if (s->expr == NULL || !have_buckets) {
        SHL_FAIL(st, 40246, "$bucketAuto requires 'groupBy' and 'buckets' to be specified");
    }
    if (s->naccs == 0) {
        bson_value_t one = {.value_type = BSON_TYPE_INT32};
        one.value.v_int32 = 1;
        s->accs[0].kind = ACC_SUM;
        s->accs[0].field = bson_strdup("count");
        s->naccs = 1;
        SHL_ERR(shl_expr_parse(&one, &s->accs[0].arg, st));
    }
    *out = s;
    s = NULL;
done:
    bson_free(j);
    stage_destroy(s);
    return ret;
}

static int
parse_facet(shl_pipeline_t *p, const bson_iter_t *arg, stage_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_t view;
    bson_iter_t it, acopy = *arg;
    stage_t *s = stage_new(p, ST_FACET, "$facet", arg);

    *out = NULL;
    if (!BSON_ITER_HOLDS_DOCUMENT(&acopy) || !query_bson_view(bson_iter_value(&acopy), &view)) {
        SHL_FAIL(st, 15947, "the $facet specification must be a non-empty object, but found: %s",
                 shl_bson_type_name(shl_iter_type(&acopy)));
    }
    if (bson_empty(&view)) {
        SHL_FAIL(st, 40169, "the $facet specification must be a non-empty object");
    }
    s->nsubs = 0;
    s->subs = bson_malloc0(bson_count_keys(&view) * sizeof(*s->subs));
    s->sub_names = bson_malloc0(bson_count_keys(&view) * sizeof(*s->sub_names));
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bson_t arr;
        if (k[0] == '\0' || k[0] == '$' || strchr(k, '.') != NULL) {
            SHL_FAIL(st, 40352, "FieldPath field names may not start with '$' or contain '.': %s",
                     k);
        }
        if (!BSON_ITER_HOLDS_ARRAY(&it) || !query_bson_view(bson_iter_value(&it), &arr)) {
            SHL_FAIL(st, 40170, "arguments to $facet must be arrays, %s is type %s", k,
                     shl_bson_type_name(shl_iter_type(&it)));
        }
        if (bson_empty(&arr)) {
            SHL_FAIL(st, 40171, "sub-pipeline in $facet stage cannot be empty: %s", k);
        }
        s->sub_names[s->nsubs] = bson_strdup(k);
        s->nsubs++;
        SHL_ERR(sub_parse(p, &arr, CTX_FACET, NULL, &s->subs[s->nsubs - 1], st));
    }
    *out = s;
    s = NULL;
done:
    stage_destroy(s);
    return ret;
}

/* Parse a `let` document into names and expressions (variable names as MongoDB validates). */
static int
parse_let(stage_t *s, const bson_t *let, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    size_t n = bson_count_keys(let);

    s->let_names = bson_malloc0((n + 1) * sizeof(char *));
    s->let_exprs = bson_malloc0((n + 1) * sizeof(shl_expr_t *));
    bson_iter_init(&it, let);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (!(k[0] >= 'a' && k[0] <= 'z') && !((unsigned char)k[0] >= 0x80)) {
            SHL_FAIL(st, 16867, "'%s' starts with an invalid character for a user variable name",
                     k);
        }
        for (const char *c = k; *c; c++) {
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '_' || (unsigned char)*c >= 0x80)) {
                SHL_FAIL(st, 16868, "'%s' contains an invalid character for a variable name: '%c'",
                         k, *c);
            }
        }
        s->let_names[s->nlet] = bson_strdup(k);
        SHL_ERR(shl_expr_parse(bson_iter_value(&it), &s->let_exprs[s->nlet], st));
        s->nlet++;
    }
done:
    return ret;
}

static int
lookup_string(bson_iter_t *it, char **out, shl_status_t *st)
{
    if (!BSON_ITER_HOLDS_UTF8(it)) {
        char *json = query_value_to_json(bson_iter_value(it));
        int ret = shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                                 "$lookup argument '%s' must be a string, found %s: %s",
                                 shl_iter_key(it), json, shl_bson_type_name(shl_iter_type(it)));
        bson_free(json);
        return ret;
    }
    bson_free(*out);
    *out = bson_strdup(bson_iter_utf8(it, NULL));
    return 0;
}

static int
parse_lookup(shl_pipeline_t *p, const bson_iter_t *arg, stage_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_t view, let;
    bool has_let = false;
    bson_iter_t it, acopy = *arg;
    stage_t *s = stage_new(p, ST_LOOKUP, "$lookup", arg);
    shl_pipeline_t *check = NULL;

    *out = NULL;
    if (!BSON_ITER_HOLDS_DOCUMENT(&acopy) || !query_bson_view(bson_iter_value(&acopy), &view)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "the $lookup specification must be an Object, but found %s",
                 shl_bson_type_name(shl_iter_type(&acopy)));
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "from") == 0) {
            if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                /* {db, coll}: only the aggregate's own database here. */
                bson_t fv;
                bson_iter_t f;
                query_bson_view(bson_iter_value(&it), &fv);
                if (bson_iter_init_find(&f, &fv, "coll") && BSON_ITER_HOLDS_UTF8(&f)) {
                    bson_free(s->from);
                    s->from = bson_strdup(bson_iter_utf8(&f, NULL));
                }
                if (s->from == NULL) {
                    SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                             "$lookup 'from' field must specify 'coll'");
                }
            } else {
                SHL_ERR(lookup_string(&it, &s->from, st));
            }
        } else if (strcmp(k, "as") == 0) {
            SHL_ERR(lookup_string(&it, &s->as, st));
        } else if (strcmp(k, "localField") == 0) {
            SHL_ERR(lookup_string(&it, &s->local, st));
        } else if (strcmp(k, "foreignField") == 0) {
            SHL_ERR(lookup_string(&it, &s->foreign, st));
        } else if (strcmp(k, "let") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !query_bson_view(bson_iter_value(&it), &let)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "$lookup argument 'let' must be an object, is type %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            has_let = true;
        } else if (strcmp(k, "pipeline") == 0) {
            bson_t arr;
            if (!BSON_ITER_HOLDS_ARRAY(&it) || !query_bson_view(bson_iter_value(&it), &arr)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "$lookup argument 'pipeline' must be an array, is type %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            bson_reinit(&s->sub_spec);
            bson_concat(&s->sub_spec, &arr);
            s->has_sub = true;
        } else {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "unknown argument to $lookup: %s", k);
        }
    }
    if (s->as == NULL) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "must specify 'as' field for a $lookup");
    }
    if ((s->local == NULL) != (s->foreign == NULL)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "$lookup requires both or neither of 'localField' and 'foreignField' to be "
                 "specified");
    }
    if (s->local == NULL && !s->has_sub) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to "
                 "be specified");
    }
    if (has_let && !s->has_sub) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "$lookup with a 'let' argument must also specify 'pipeline'");
    }
    if (s->from == NULL) {
        /* Without 'from' the sub-pipeline must make its own documents. */
        bson_iter_t f, st0;
        bool docs = s->has_sub && bson_iter_init(&f, &s->sub_spec) && shl_iter_next(&f) &&
                    BSON_ITER_HOLDS_DOCUMENT(&f) && bson_iter_recurse(&f, &st0) &&
                    shl_iter_next(&st0) && strcmp(shl_iter_key(&st0), "$documents") == 0;
        if (!docs) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "must specify 'from' field for a $lookup");
        }
    }
    if (s->as[0] == '\0' || s->as[0] == '$') {
        SHL_FAIL(st, 16410, "FieldPath field names may not start with '$': %s", s->as);
    }
    if (has_let) {
        SHL_ERR(parse_let(s, &let, st));
    }
    if (s->has_sub) {
        /* Parse once now so errors come before any document is read. */
        bson_t vars = BSON_INITIALIZER;
        for (size_t i = 0; i < s->nlet; i++) {
            BSON_APPEND_NULL(&vars, s->let_names[i]);
        }
        ret = sub_parse(p, &s->sub_spec, CTX_LOOKUP, &vars, &check, st);
        bson_destroy(&vars);
        SHL_ERR(ret);
    }
    *out = s;
    s = NULL;
done:
    shl_pipeline_destroy(check);
    stage_destroy(s);
    return ret;
}

/* A $graphLookup field name argument: a string not starting with '$'. */
static int
graph_string(bson_iter_t *it, char **out, shl_status_t *st)
{
    const char *v;
    int ret = 0;

    if (!BSON_ITER_HOLDS_UTF8(it)) {
        SHL_FAIL(st, 40103, "expected string as argument for $graphLookup, found: %s",
                 shl_bson_type_name(shl_iter_type(it)));
    }
    v = bson_iter_utf8(it, NULL);
    if (v[0] == '$') {
        SHL_FAIL(st, 16410,
                 "FieldPath field names may not start with '$'. Consider using "
                 "$getField or $setField.");
    }
    if (v[0] == '\0') {
        SHL_FAIL(st, 40352, "FieldPath cannot be constructed with empty string");
    }
    bson_free(*out);
    *out = bson_strdup(v);
done:
    return ret;
}

static int
parse_graph_lookup(shl_pipeline_t *p, const bson_iter_t *arg, stage_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_t view;
    bson_iter_t it, acopy = *arg;
    stage_t *s = stage_new(p, ST_GRAPH_LOOKUP, "$graphLookup", arg);
    shl_matcher_t *check = NULL;
    bool has_start = false;

    *out = NULL;
    if (!BSON_ITER_HOLDS_DOCUMENT(&acopy) || !query_bson_view(bson_iter_value(&acopy), &view)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "the $graphLookup stage specification must be an object, but found %s",
                 shl_bson_type_name(shl_iter_type(&acopy)));
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "from") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "$graphLookup 'from' field must be a string, but found %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            if (bson_iter_utf8(&it, NULL)[0] == '\0') {
                SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "invalid $graphLookup namespace: ''");
            }
            bson_free(s->from);
            s->from = bson_strdup(bson_iter_utf8(&it, NULL));
        } else if (strcmp(k, "as") == 0) {
            SHL_ERR(graph_string(&it, &s->as, st));
        } else if (strcmp(k, "connectFromField") == 0) {
            SHL_ERR(graph_string(&it, &s->conn_from, st));
        } else if (strcmp(k, "connectToField") == 0) {
            SHL_ERR(graph_string(&it, &s->conn_to, st));
        } else if (strcmp(k, "depthField") == 0) {
            SHL_ERR(graph_string(&it, &s->depth_field, st));
        } else if (strcmp(k, "startWith") == 0) {
            shl_expr_destroy(s->expr);
            s->expr = NULL;
            SHL_ERR(shl_expr_parse(bson_iter_value(&it), &s->expr, st));
            has_start = true;
        } else if (strcmp(k, "maxDepth") == 0) {
            double d;
            if (!BSON_ITER_HOLDS_NUMBER(&it)) {
                SHL_FAIL(st, 40100, "maxDepth must be numeric, found type: %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            d = bson_iter_as_double(&it);
            if (d < 0) {
                SHL_FAIL(st, 40101, "maxDepth requires a nonnegative argument, found: %g", d);
            }
            if (d != (double)(int64_t)d || d > 9.2e18) {
                SHL_FAIL(st, 40102, "maxDepth could not be represented as a long long: %g", d);
            }
            s->max_depth = (int64_t)d;
        } else if (strcmp(k, "restrictSearchWithMatch") == 0) {
            bson_t m;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !query_bson_view(bson_iter_value(&it), &m)) {
                SHL_FAIL(st, 40185, "restrictSearchWithMatch must be an object, found %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            /* Parse it now so its errors come before any document is read. */
            shl_matcher_destroy(check);
            check = NULL;
            SHL_ERR(shl_matcher_new(&m, SHL_MATCHER_DEFAULT, &check, st));
            bson_reinit(&s->restrict_spec);
            bson_concat(&s->restrict_spec, &m);
            s->has_restrict = true;
        } else {
            SHL_FAIL(st, 40104, "Unknown argument to $graphLookup: %s", k);
        }
    }
    if (s->from == NULL) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "must specify 'from' field for a $graphLookup");
    }
    if (s->as == NULL || !has_start || s->conn_from == NULL || s->conn_to == NULL) {
        SHL_FAIL(st, 40105,
                 "from, as, startWith, connectFromField and connectToField must all be "
                 "specified");
    }
    *out = s;
    s = NULL;
done:
    shl_matcher_destroy(check);
    stage_destroy(s);
    return ret;
}

static int
parse_union_with(shl_pipeline_t *p, const bson_iter_t *arg, stage_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, acopy = *arg;
    stage_t *s = stage_new(p, ST_UNION_WITH, "$unionWith", arg);

    *out = NULL;
    if (BSON_ITER_HOLDS_UTF8(&acopy)) {
        s->from = bson_strdup(bson_iter_utf8(&acopy, NULL));
    } else if (BSON_ITER_HOLDS_DOCUMENT(&acopy)) {
        bson_t view;
        query_bson_view(bson_iter_value(&acopy), &view);
        bson_iter_init(&it, &view);
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (strcmp(k, "coll") == 0) {
                if (!BSON_ITER_HOLDS_UTF8(&it)) {
                    SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                             "BSON field '$unionWith.coll' is the wrong type '%s', expected type "
                             "'string'",
                             shl_bson_type_name(shl_iter_type(&it)));
                }
                s->from = bson_strdup(bson_iter_utf8(&it, NULL));
            } else if (strcmp(k, "pipeline") == 0) {
                bson_t arr;
                if (!BSON_ITER_HOLDS_ARRAY(&it) || !query_bson_view(bson_iter_value(&it), &arr)) {
                    SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                             "BSON field '$unionWith.pipeline' is the wrong type '%s', expected "
                             "type 'array'",
                             shl_bson_type_name(shl_iter_type(&it)));
                }
                bson_reinit(&s->sub_spec);
                bson_concat(&s->sub_spec, &arr);
                s->has_sub = true;
            } else {
                SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                         "BSON field '$unionWith.%s' is an unknown field.", k);
            }
        }
        if (s->from == NULL && !s->has_sub) {
            SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                     "BSON field '$unionWith.coll' is missing but a required field");
        }
    } else {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "the $unionWith stage specification must be an object or string, but found %s",
                 shl_bson_type_name(shl_iter_type(&acopy)));
    }
    SHL_ERR(sub_parse(p, &s->sub_spec, CTX_UNION_WITH, NULL, &s->run, st));
    if (s->from == NULL && !shl_pipeline_generates_input(s->run)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "$unionWith stage without explicit collection must have a pipeline with "
                 "$documents as first stage");
    }
    *out = s;
    s = NULL;
done:
    stage_destroy(s);
    return ret;
}

static int
parse_sample(shl_pipeline_t *p, const bson_iter_t *arg, stage_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, acopy = *arg;
    bson_t view;
    stage_t *s = stage_new(p, ST_SAMPLE, "$sample", arg);
    bool have = false;

    *out = NULL;
    if (!BSON_ITER_HOLDS_DOCUMENT(&acopy) || !query_bson_view(bson_iter_value(&acopy), &view)) {
        SHL_FAIL(st, 28745, "the $sample stage specification must be an object");
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        if (strcmp(shl_iter_key(&it), "size") != 0) {
            SHL_FAIL(st, 28748, "unrecognized option to $sample: %s", shl_iter_key(&it));
        }
        if (!query_value_is_number(bson_iter_value(&it))) {
            SHL_FAIL(st, 28746, "size argument to $sample must be a number");
        }
        double d = query_value_as_double(bson_iter_value(&it));
        if (d < 0) {
            SHL_FAIL(st, 28747, "size argument to $sample must not be negative");
        }
        s->n = d > 9.2e18 ? INT64_MAX : (int64_t)d;
        have = true;
    }
    if (!have) {
        SHL_FAIL(st, 28749, "$sample stage must specify a size");
    }
    *out = s;
    s = NULL;
done:
    stage_destroy(s);
    return ret;
}

/* $out: a collection name or {db, coll}. */
static int
parse_out(shl_pipeline_t *p, const bson_iter_t *arg, stage_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, acopy = *arg;
    stage_t *s = stage_new(p, ST_OUTPUT, "$out", arg);

    *out = NULL;
    if (BSON_ITER_HOLDS_UTF8(&acopy)) {
        s->out_coll = bson_strdup(bson_iter_utf8(&acopy, NULL));
    } else if (BSON_ITER_HOLDS_DOCUMENT(&acopy)) {
        bson_t view;
        query_bson_view(bson_iter_value(&acopy), &view);
        bson_iter_init(&it, &view);
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            char **dst =
                strcmp(k, "db") == 0 ? &s->out_db : (strcmp(k, "coll") == 0 ? &s->out_coll : NULL);
            if (dst == NULL) {
                SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                         "BSON field '$out.%s' is an unknown field.", k);
            }
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field '$out.%s' is the wrong type '%s', expected type 'string'", k,
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            *dst = bson_strdup(bson_iter_utf8(&it, NULL));
        }
        if (s->out_db == NULL) {
            SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                     "BSON field '$out.db' is missing but a required field");
        }
        if (s->out_coll == NULL) {
            SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                     "BSON field '$out.coll' is missing but a required field");
        }
    } else {
        SHL_FAIL(st, 16990, "$out only supports a string or object argument, but found %s",
                 shl_bson_type_name(shl_iter_type(&acopy)));
    }
    if (s->out_coll[0] == '\0' || (s->out_db != NULL && s->out_db[0] == '\0')) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid $out target namespace, %s.%s",
                 s->out_db ? s->out_db : "", s->out_coll);
    }
    if (strncmp(s->out_coll, "system.", 7) == 0) {
        SHL_FAIL(st, 17385, "Can't $out to special collection: %s", s->out_coll);
    }
    s->output.is_merge = false;
    s->output.db = s->out_db;
    s->output.coll = s->out_coll;
    *out = s;
    s = NULL;
done:
    stage_destroy(s);
    return ret;
}

static int
merge_into(stage_t *s, bson_iter_t *it, shl_status_t *st)
{
    int ret = 0;

    if (BSON_ITER_HOLDS_UTF8(it)) {
        s->out_coll = bson_strdup(bson_iter_utf8(it, NULL));
    } else if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_t view;
        bson_iter_t f;
        query_bson_view(bson_iter_value(it), &view);
        bson_iter_init(&f, &view);
        while (shl_iter_next(&f)) {
            const char *k = shl_iter_key(&f);
            char **dst =
                strcmp(k, "db") == 0 ? &s->out_db : (strcmp(k, "coll") == 0 ? &s->out_coll : NULL);
            if (dst == NULL) {
                SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                         "BSON field 'into.%s' is an unknown field.", k);
            }
            if (!BSON_ITER_HOLDS_UTF8(&f)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'into.%s' is the wrong type '%s', expected type 'string'", k,
                         shl_bson_type_name(shl_iter_type(&f)));
            }
            bson_free(*dst);
            *dst = bson_strdup(bson_iter_utf8(&f, NULL));
        }
        if (s->out_coll == NULL) {
            SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                     "BSON field 'into.coll' is missing but a required field");
        }
    } else {
        SHL_FAIL(st, 51178,
                 "$merge 'into' field  must be either a string or an object, but found %s",
                 shl_bson_type_name(shl_iter_type(it)));
    }
    if (s->out_coll[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid $merge target namespace: ''");
    }
done:
    return ret;
}

static int
parse_merge(shl_pipeline_t *p, const bson_iter_t *arg, stage_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, acopy = *arg;
    stage_t *s = stage_new(p, ST_OUTPUT, "$merge", arg);
    shl_pipeline_output_t *o = &s->output;
    bool have_into = false;
    const char *wm = "merge", *wnm = "insert";

    *out = NULL;
    o->is_merge = true;
    o->when_matched = SHL_MERGE_MERGE;
    o->when_not_matched = SHL_MERGE_INSERT;
    if (BSON_ITER_HOLDS_UTF8(&acopy)) {
        SHL_ERR(merge_into(s, &acopy, st));
        have_into = true;
    } else if (BSON_ITER_HOLDS_DOCUMENT(&acopy)) {
        bson_t view;
        query_bson_view(bson_iter_value(&acopy), &view);
        bson_iter_init(&it, &view);
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (strcmp(k, "into") == 0) {
                SHL_ERR(merge_into(s, &it, st));
                have_into = true;
            } else if (strcmp(k, "on") == 0) {
                size_t n = 0;
                if (BSON_ITER_HOLDS_UTF8(&it)) {
                    s->on_fields = bson_malloc0(2 * sizeof(char *));
                    s->on_fields[n++] = bson_strdup(bson_iter_utf8(&it, NULL));
                } else if (BSON_ITER_HOLDS_ARRAY(&it)) {
                    bson_t arr;
                    bson_iter_t a;
                    query_bson_view(bson_iter_value(&it), &arr);
                    if (bson_empty(&arr)) {
                        SHL_FAIL(st, 51187,
                                 "If explicitly specifying $merge 'on', must include at least one "
                                 "field");
                    }
                    s->on_fields = bson_malloc0((bson_count_keys(&arr) + 1) * sizeof(char *));
                    bson_iter_init(&a, &arr);
                    while (shl_iter_next(&a)) {
                        if (!BSON_ITER_HOLDS_UTF8(&a)) {
                            SHL_FAIL(st, 51134,
                                     "Array passed to $merge 'on' must contain only strings, but "
                                     "found %s",
                                     shl_bson_type_name(shl_iter_type(&a)));
                        }
                        s->on_fields[n++] = bson_strdup(bson_iter_utf8(&a, NULL));
                    }
                } else {
                    SHL_FAIL(st, 51186,
                             "$merge 'on' field  must be either a string or an array of strings, "
                             "but found %s",
                             shl_bson_type_name(shl_iter_type(&it)));
                }
                o->non = n;
                o->on_given = true;
            } else if (strcmp(k, "let") == 0) {
                bson_t lv;
                if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !query_bson_view(bson_iter_value(&it), &lv)) {
                    SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                             "BSON field '$merge.let' is the wrong type '%s', expected type "
                             "'object'",
                             shl_bson_type_name(shl_iter_type(&it)));
                }
                bson_concat(&s->merge_let, &lv);
                s->has_merge_let = true;
            } else if (strcmp(k, "whenMatched") == 0) {
                if (BSON_ITER_HOLDS_ARRAY(&it)) {
                    bson_t arr;
                    query_bson_view(bson_iter_value(&it), &arr);
                    bson_concat(&s->merge_pipe, &arr);
                    s->has_merge_pipe = true;
                    wm = "pipeline";
                } else if (BSON_ITER_HOLDS_UTF8(&it)) {
                    wm = bson_iter_utf8(&it, NULL);
                } else {
                    SHL_FAIL(st, 51191,
                             "$merge 'whenMatched' field  must be either a string or an array, "
                             "but found %s",
                             shl_bson_type_name(shl_iter_type(&it)));
                }
            } else if (strcmp(k, "whenNotMatched") == 0) {
                if (!BSON_ITER_HOLDS_UTF8(&it)) {
                    SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                             "BSON field '$merge.whenNotMatched' is the wrong type '%s', expected "
                             "type 'string'",
                             shl_bson_type_name(shl_iter_type(&it)));
                }
                wnm = bson_iter_utf8(&it, NULL);
            } else {
                SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                         "BSON field '$merge.%s' is an unknown field.", k);
            }
        }
    } else {
        SHL_FAIL(st, 51182, "$merge only supports a string or object argument, but found %s",
                 shl_bson_type_name(shl_iter_type(&acopy)));
    }
    if (!have_into) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '$merge.into' is missing but a required field");
    }
    if (strcmp(wm, "replace") == 0) {
        o->when_matched = SHL_MERGE_REPLACE;
    } else if (strcmp(wm, "keepExisting") == 0) {
        o->when_matched = SHL_MERGE_KEEP_EXISTING;
    } else if (strcmp(wm, "merge") == 0) {
        o->when_matched = SHL_MERGE_MERGE;
    } else if (strcmp(wm, "fail") == 0) {
        o->when_matched = SHL_MERGE_FAIL;
    } else if (strcmp(wm, "pipeline") == 0 && s->has_merge_pipe) {
        o->when_matched = SHL_MERGE_PIPELINE;
        o->update_pipeline = &s->merge_pipe;
    } else {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "Enumeration value '%s' for field '$merge.whenMatched' is not a valid value.", wm);
    }
    if (strcmp(wnm, "insert") == 0) {
        o->when_not_matched = SHL_MERGE_INSERT;
    } else if (strcmp(wnm, "discard") == 0) {
        o->when_not_matched = SHL_MERGE_DISCARD;
    } else if (strcmp(wnm, "fail") == 0) {
        o->when_not_matched = SHL_MERGE_NOT_MATCHED_FAIL;
    } else {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "Enumeration value '%s' for field '$merge.whenNotMatched' is not a valid value.",
                 wnm);
    }
    if ((o->when_matched == SHL_MERGE_KEEP_EXISTING || o->when_matched == SHL_MERGE_FAIL) &&
        o->when_not_matched != SHL_MERGE_INSERT) {
        SHL_FAIL(st, 51181, "Combination of {whenMatched: %s, whenNotMatched: %s} is not supported",
                 wm, wnm);
    }
    if (s->has_merge_let && o->when_matched != SHL_MERGE_PIPELINE) {
        SHL_FAIL(st, 51199, "Cannot use 'let' variables with 'whenMatched: %s' mode", wm);
    }
    if (s->has_merge_pipe) {
        /* Validate the update pipeline's stages (MongoDB allows only the update stages). */
        bson_iter_t ps, f;
        bson_iter_init(&ps, &s->merge_pipe);
        while (shl_iter_next(&ps)) {
            const char *nm = "";
            if (BSON_ITER_HOLDS_DOCUMENT(&ps) && bson_iter_recurse(&ps, &f) && shl_iter_next(&f)) {
                nm = shl_iter_key(&f);
            }
            if (strcmp(nm, "$addFields") != 0 && strcmp(nm, "$set") != 0 &&
                strcmp(nm, "$project") != 0 && strcmp(nm, "$unset") != 0 &&
                strcmp(nm, "$replaceRoot") != 0 && strcmp(nm, "$replaceWith") != 0) {
                SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                         "'%s' is not allowed in the whenMatched pipeline of $merge", nm);
            }
        }
    }
    if (s->on_fields == NULL) {
        s->on_fields = bson_malloc0(2 * sizeof(char *));
        s->on_fields[0] = bson_strdup("_id");
        o->non = 1;
    }
    o->on = s->on_fields;
    o->db = s->out_db;
    o->coll = s->out_coll;
    o->let = s->has_merge_let ? &s->merge_let : NULL;
    *out = s;
    s = NULL;
done:
    stage_destroy(s);
    return ret;
}

/* Build {<group key>} for $count / $sortByCount / $unset desugaring. */
static int
parse_stage(shl_pipeline_t *p, const bson_t *stage_doc, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bson_t view, tmp = BSON_INITIALIZER, tmp2 = BSON_INITIALIZER;
    stage_t *s = NULL;
    const char *name;

    if (bson_count_keys(stage_doc) != 1 || !bson_iter_init(&it, stage_doc) || !shl_iter_next(&it)) {
        SHL_FAIL(st, 40323,
                 "A pipeline stage specification object must contain exactly one field.");
    }
    name = shl_iter_key(&it);
    if (strcmp(name, "$match") == 0) {
        SHL_ERR(
            arg_doc(&it, &view, 15959, "the match filter must be an expression in an object", st));
        s = stage_new(p, ST_MATCH, name, &it);
        SHL_ERR(shl_matcher_new(&view, SHL_MATCHER_DEFAULT, &s->matcher, st));
    } else if (strcmp(name, "$project") == 0) {
        SHL_ERR(arg_doc(&it, &view, 15969, "$project specification must be an object", st));
        if (bson_empty(&view)) {
            SHL_FAIL(st, 51272,
                     "Invalid $project :: caused by :: projection specification must have at least "
                     "one field");
        }
        s = stage_new(p, ST_PROJECT, name, &it);
        SHL_ERR(shl_projection_new(&view, NULL, &s->proj, st));
    } else if (strcmp(name, "$addFields") == 0 || strcmp(name, "$set") == 0) {
        SHL_ERR(arg_doc(&it, &view, 40272, "$addFields specification stage must be an object", st));
        s = stage_new(p, ST_ADDFIELDS, name, &it);
        SHL_ERR(query_addfields_new(&view, &s->proj, st));
    } else if (strcmp(name, "$unset") == 0) {
        if (BSON_ITER_HOLDS_UTF8(&it)) {
            BSON_APPEND_INT32(&tmp, bson_iter_utf8(&it, NULL), 0);
        } else if (BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_iter_t a;
            bson_iter_recurse(&it, &a);
            while (shl_iter_next(&a)) {
                if (!BSON_ITER_HOLDS_UTF8(&a)) {
                    SHL_FAIL(st, 31120,
                             "$unset specification must be a string or an array containing only "
                             "string values");
                }
                BSON_APPEND_INT32(&tmp, bson_iter_utf8(&a, NULL), 0);
            }
        } else {
            SHL_FAIL(st, 31002, "$unset specification must be a string or an array");
        }
        if (bson_empty(&tmp)) {
            SHL_FAIL(st, 31119,
                     "$unset specification must be a string or an array with at least one field");
        }
        s = stage_new(p, ST_PROJECT, name, &it);
        SHL_ERR(shl_projection_new(&tmp, NULL, &s->proj, st));
    } else if (strcmp(name, "$group") == 0) {
        SHL_ERR(arg_doc(&it, &view, 15947, "a group's fields must be specified in an object", st));
        SHL_ERR(parse_group(p, &view, &s, st));
    } else if (strcmp(name, "$sort") == 0) {
        SHL_ERR(arg_doc(&it, &view, 15973, "the $sort key specification must be an object", st));
        if (bson_empty(&view)) {
            SHL_FAIL(st, 15976, "$sort stage must have at least one sort key");
        }
        s = stage_new(p, ST_SORT, name, &it);
        SHL_ERR(shl_sort_pattern_new(&view, &s->pattern, st));
    } else if (strcmp(name, "$limit") == 0 || strcmp(name, "$skip") == 0) {
        int64_t n = 0;
        SHL_ERR(parse_int_arg(&it, name, &n, st));
        s = stage_new(p, name[1] == 'l' ? ST_LIMIT : ST_SKIP, name, &it);
        s->n = n;
    } else if (strcmp(name, "$count") == 0) {
        const char *cname;
        SHL_ERR(parse_count_name(&it, &cname, st));
        /* {$group: {_id: null, name: {$sum: 1}}}, {$project: {_id: 0}} */
        BSON_APPEND_NULL(&tmp, "_id");
        bson_t a;
        BSON_APPEND_DOCUMENT_BEGIN(&tmp, cname, &a);
        BSON_APPEND_INT32(&a, "$sum", 1);
        bson_append_document_end(&tmp, &a);
        SHL_ERR(parse_group(p, &tmp, &s, st));
        pipe_push(p, s);
        s = NULL;
        BSON_APPEND_INT32(&tmp2, "_id", 0);
        s = stage_new(p, ST_PROJECT, "$project", NULL);
        BSON_APPEND_DOCUMENT(&s->spec, "$project", &tmp2);
        SHL_ERR(shl_projection_new(&tmp2, NULL, &s->proj, st));
    } else if (strcmp(name, "$sortByCount") == 0) {
        bool ok = (BSON_ITER_HOLDS_UTF8(&it) && bson_iter_utf8(&it, NULL)[0] == '$') ||
                  BSON_ITER_HOLDS_DOCUMENT(&it);
        if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t d;
            ok = bson_iter_recurse(&it, &d) && shl_iter_next(&d) && shl_iter_key(&d)[0] == '$';
        }
        if (!ok) {
            SHL_FAIL(st, 40148,
                     "the sortByCount field must be defined as a $-prefixed path or an expression "
                     "object");
        }
        bson_append_iter(&tmp, "_id", 3, &it);
        bson_t a;
        BSON_APPEND_DOCUMENT_BEGIN(&tmp, "count", &a);
        BSON_APPEND_INT32(&a, "$sum", 1);
        bson_append_document_end(&tmp, &a);
        SHL_ERR(parse_group(p, &tmp, &s, st));
        pipe_push(p, s);
        s = NULL;
        BSON_APPEND_INT32(&tmp2, "count", -1);
        s = stage_new(p, ST_SORT, "$sort", NULL);
        BSON_APPEND_DOCUMENT(&s->spec, "$sort", &tmp2);
        SHL_ERR(shl_sort_pattern_new(&tmp2, &s->pattern, st));
    } else if (strcmp(name, "$unwind") == 0) {
        s = stage_new(p, ST_UNWIND, name, &it);
        const char *path = NULL;
        if (BSON_ITER_HOLDS_UTF8(&it)) {
            path = bson_iter_utf8(&it, NULL);
        } else if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t d;
            bson_iter_recurse(&it, &d);
            while (shl_iter_next(&d)) {
                const char *k = shl_iter_key(&d);
                if (strcmp(k, "path") == 0) {
                    if (!BSON_ITER_HOLDS_UTF8(&d)) {
                        SHL_FAIL(st, 28808, "expected a string as the path for $unwind stage");
                    }
                    path = bson_iter_utf8(&d, NULL);
                } else if (strcmp(k, "includeArrayIndex") == 0) {
                    if (!BSON_ITER_HOLDS_UTF8(&d)) {
                        SHL_FAIL(st, 28810,
                                 "expected a non-empty string for the includeArrayIndex option to "
                                 "$unwind stage");
                    }
                    const char *f = bson_iter_utf8(&d, NULL);
                    if (f[0] == '\0') {
                        SHL_FAIL(st, 28810,
                                 "expected a non-empty string for the includeArrayIndex option to "
                                 "$unwind stage");
                    }
                    if (f[0] == '$') {
                        SHL_FAIL(st, 28822,
                                 "includeArrayIndex option to $unwind stage should not be prefixed "
                                 "with a '$': %s",
                                 f);
                    }
                    s->index_field = bson_strdup(f);
                } else if (strcmp(k, "preserveNullAndEmptyArrays") == 0) {
                    if (!BSON_ITER_HOLDS_BOOL(&d)) {
                        SHL_FAIL(st, 28809,
                                 "expected a boolean for the preserveNullAndEmptyArrays option to "
                                 "$unwind stage");
                    }
                    s->preserve = bson_iter_bool(&d);
                } else {
                    SHL_FAIL(st, 28811, "unrecognized option to $unwind stage: %s", k);
                }
            }
            if (path == NULL) {
                SHL_FAIL(st, 28812, "no path specified to $unwind stage");
            }
        } else {
            SHL_FAIL(
                st, 15981,
                "expected either a string or an object as specification for $unwind stage, got %s",
                "other");
        }
        if (path[0] != '$') {
            SHL_FAIL(st, 28818, "path option to $unwind stage should be prefixed with a '$': %s",
                     path);
        }
        if (path[1] == '\0') {
            SHL_FAIL(st, 40352, "FieldPath cannot be constructed with empty string");
        }
        s->path = bson_strdup(path + 1);
    } else if (strcmp(name, "$replaceRoot") == 0 || strcmp(name, "$replaceWith") == 0) {
        const bson_value_t *root = NULL;
        bson_iter_t d;
        if (name[8] == 'R') { /* $replaceRoot */
            SHL_ERR(arg_doc(&it, &view, 40228,
                            "expected an object as specification for $replaceRoot stage", st));
            bson_iter_init(&d, &view);
            while (shl_iter_next(&d)) {
                if (strcmp(shl_iter_key(&d), "newRoot") != 0) {
                    SHL_FAIL(st, 40415, "BSON field '$replaceRoot.%s' is an unknown field.",
                             shl_iter_key(&d));
                }
                root = bson_iter_value(&d);
            }
            if (root == NULL) {
                SHL_FAIL(st, 40414,
                         "BSON field '$replaceRoot.newRoot' is missing but a required field");
            }
        } else {
            root = bson_iter_value(&it);
        }
        s = stage_new(p, ST_REPLACE_ROOT, name, &it);
        SHL_ERR(shl_expr_parse(root, &s->expr, st));
    } else if (strcmp(name, "$bucket") == 0) {
        SHL_ERR(parse_bucket(p, &it, &s, st));
    } else if (strcmp(name, "$bucketAuto") == 0) {
        SHL_ERR(parse_bucket_auto(p, &it, &s, st));
    } else if (strcmp(name, "$facet") == 0) {
        SHL_ERR(parse_facet(p, &it, &s, st));
    } else if (strcmp(name, "$lookup") == 0) {
        SHL_ERR(parse_lookup(p, &it, &s, st));
    } else if (strcmp(name, "$unionWith") == 0) {
        SHL_ERR(parse_union_with(p, &it, &s, st));
    } else if (strcmp(name, "$graphLookup") == 0) {
        SHL_ERR(parse_graph_lookup(p, &it, &s, st));
    } else if (strcmp(name, "$sample") == 0) {
        SHL_ERR(parse_sample(p, &it, &s, st));
    } else if (strcmp(name, "$out") == 0) {
        SHL_ERR(parse_out(p, &it, &s, st));
    } else if (strcmp(name, "$merge") == 0) {
        SHL_ERR(parse_merge(p, &it, &s, st));
    } else if (strcmp(name, "$documents") == 0) {
        s = stage_new(p, ST_DOCUMENTS, name, &it);
        SHL_ERR(shl_expr_parse(bson_iter_value(&it), &s->expr, st));
    } else if (strcmp(name, "$collStats") == 0) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !query_bson_view(bson_iter_value(&it), &view)) {
            SHL_FAIL(st, 5447000, "$collStats must take a nested object but found: %s",
                     shl_bson_type_name(shl_iter_type(&it)));
        }
        bson_iter_t f;
        bson_iter_init(&f, &view);
        while (shl_iter_next(&f)) {
            const char *k = shl_iter_key(&f);
            if (strcmp(k, "count") != 0 && strcmp(k, "storageStats") != 0 &&
                strcmp(k, "latencyStats") != 0 && strcmp(k, "queryExecStats") != 0) {
                SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                         "BSON field '$collStats.%s' is an unknown field.", k);
            }
            if (!BSON_ITER_HOLDS_DOCUMENT(&f)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field '$collStats.%s' is the wrong type '%s', expected type "
                         "'object'",
                         k, shl_bson_type_name(shl_iter_type(&f)));
            }
        }
        s = stage_new(p, ST_DOCUMENTS, name, &it);
        bson_concat(&s->stats_spec, &view);
    } else if (strcmp(name, "$indexStats") == 0) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !query_bson_view(bson_iter_value(&it), &view) ||
            !bson_empty(&view)) {
            SHL_FAIL(st, 28803, "The $indexStats stage specification must be an empty object");
        }
        s = stage_new(p, ST_DOCUMENTS, name, &it);
    } else if (strcmp(name, "$redact") == 0) {
        s = stage_new(p, ST_REDACT, name, &it);
        SHL_ERR(shl_expr_parse(bson_iter_value(&it), &s->expr, st));
    } else if (strcmp(name, "$setWindowFields") == 0 || strcmp(name, "$densify") == 0) {
        s = stage_new(p, ST_WINDOW, name, &it);
        SHL_ERR(query_wstage_parse(
            name, &it, p->opts.vars,
            stage_limit(p, SHL_OPT_internalQueryMaxBlockingSortMemoryUsageBytes), &s->win, st));
    } else if (strcmp(name, "$fill") == 0) {
        /* Rewritten into $setWindowFields + $addFields, as MongoDB does. */
        uint32_t nf = 0;
        bson_iter_t f;
        SHL_ERR(query_fill_desugar(&it, &tmp, &nf, st));
        bson_iter_init(&f, &tmp);
        while (shl_iter_next(&f)) {
            bson_t fst;
            bool ok = query_bson_view(bson_iter_value(&f), &fst);
            SHL_INVARIANT(ok);
            SHL_ERR(parse_stage(p, &fst, st));
        }
        goto done;
    } else if (strcmp(name, "$currentOp") == 0 || strcmp(name, "$listLocalSessions") == 0) {
        SHL_FAIL(st, SHL_CODE_NOT_IMPLEMENTED, "%s is not supported by Shale yet", name);
    } else {
        SHL_FAIL(st, 40324, "Unrecognized pipeline stage name: '%s'", name);
    }
    pipe_push(p, s);
    s = NULL;
done:
    stage_destroy(s);
    bson_destroy(&tmp);
    bson_destroy(&tmp2);
    return ret;
}

static void
link_stages(shl_pipeline_t *p)
{
    for (size_t i = p->first; i < p->nstages; i++) {
        stage_t *s = p->stages[i];
        s->src = i > p->first ? p->stages[i - 1] : NULL;
    }
}

/* Parse 'stages' into 'p' (any context), check stage positions, and make top-k sorts. */
static int
parse_stages(shl_pipeline_t *p, const bson_t *stages, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    bson_iter_init(&it, stages);
    while (shl_iter_next(&it)) {
        bson_t view;
        SHL_ERR(arg_doc(&it, &view, 40323,
                        "A pipeline stage specification object must contain exactly one field.",
                        st));
        SHL_ERR(parse_stage(p, &view, st));
    }
    for (size_t i = 0; i < p->nstages; i++) {
        stage_t *s = p->stages[i];
        set_stage_limits(p, s);
        if (s->kind == ST_DOCUMENTS && i > 0) {
            SHL_FAIL(st, 40602, "%s is only valid as the first stage in a pipeline", s->name);
        }
        if (s->kind == ST_OUTPUT && i + 1 != p->nstages) {
            SHL_FAIL(st, 40601, "%s can only be the final stage in the pipeline", s->name);
        }
        bool nested = s->kind == ST_OUTPUT || s->kind == ST_FACET ||
                      (s->kind == ST_DOCUMENTS && s->expr == NULL);
        if (p->ctx == CTX_FACET && nested) {
            SHL_FAIL(st, 40600, "%s is not allowed to be used within a $facet stage", s->name);
        }
        if (p->ctx == CTX_LOOKUP && s->kind == ST_OUTPUT) {
            SHL_FAIL(st, 51047, "%s is not allowed within a $lookup's sub-pipeline", s->name);
        }
        if (p->ctx == CTX_UNION_WITH && s->kind == ST_OUTPUT) {
            SHL_FAIL(st, 31441, "%s is not allowed within a $unionWith's sub-pipeline", s->name);
        }
    }
    /* $sort followed by $limit(s): a top-k sort. */
    for (size_t i = 0; i < p->nstages; i++) {
        stage_t *s = p->stages[i];
        if (s->kind != ST_SORT) {
            continue;
        }
        int64_t limit = 0;
        for (size_t j = i + 1; j < p->nstages && p->stages[j]->kind == ST_LIMIT; j++) {
            if (limit == 0 || p->stages[j]->n < limit) {
                limit = p->stages[j]->n;
            }
        }
        s->n = limit;
        s->sorter = shl_sorter_new(s->pattern, limit, s->max_bytes);
    }
    link_stages(p);
done:
    return ret;
}

int
shl_pipeline_parse(const bson_t *stages, const shl_pipeline_opts_t *opts, shl_pipeline_t **out,
                   shl_status_t *st)
{
    int ret = 0;
    shl_pipeline_t *p = bson_malloc0(sizeof(*p));

    if (opts != NULL) {
        p->opts = *opts;
    }
    SHL_ERR(parse_stages(p, stages, st));
    *out = p;
    p = NULL;
done:
    shl_pipeline_destroy(p);
    return ret;
}

const shl_pipeline_output_t *
shl_pipeline_output(const shl_pipeline_t *p)
{
    if (p->nstages > 0 && p->stages[p->nstages - 1]->kind == ST_OUTPUT) {
        return &p->stages[p->nstages - 1]->output;
    }
    return NULL;
}

int
shl_pipeline_merge_vars(const shl_pipeline_t *p, const bson_t *doc, bson_t *out, shl_status_t *st)
{
    int ret = 0;
    const stage_t *s = p->nstages > 0 ? p->stages[p->nstages - 1] : NULL;
    bson_iter_t it;
    shl_expr_t *e = NULL;
    bson_value_t v;
    shl_expr_ctx_t ctx = {.root = doc, .vars = p->opts.vars, .now_ms = 0};

    v.value_type = BSON_TYPE_EOD;
    bson_init(out);
    if (s == NULL || s->kind != ST_OUTPUT || !s->has_merge_let) {
        BSON_APPEND_DOCUMENT(out, "new", doc);
        goto done;
    }
    bson_iter_init(&it, &s->merge_let);
    while (shl_iter_next(&it)) {
        SHL_ERR(shl_expr_parse(bson_iter_value(&it), &e, st));
        SHL_ERR(shl_expr_evaluate(e, &ctx, &v, st));
        if (v.value_type != BSON_TYPE_EOD) {
            query_append_value(out, shl_iter_key(&it), -1, &v);
        }
        bson_value_destroy(&v);
        v.value_type = BSON_TYPE_EOD;
        shl_expr_destroy(e);
        e = NULL;
    }
done:
    /* The command's `let` is visible too, under $merge's own names. */
    if (ret == 0 && p->opts.vars != NULL && bson_iter_init(&it, p->opts.vars)) {
        while (shl_iter_next(&it)) {
            bson_iter_t own;
            if (!bson_iter_init_find(&own, out, shl_iter_key(&it))) {
                bson_append_iter(out, NULL, 0, &it);
            }
        }
    }
    shl_expr_destroy(e);
    bson_value_destroy(&v);
    return ret;
}

const char *
shl_pipeline_first_stage(const shl_pipeline_t *p)
{
    return p->first < p->nstages ? p->stages[p->first]->name : NULL;
}

bool
shl_pipeline_generates_input(const shl_pipeline_t *p)
{
    return p->first < p->nstages && p->stages[p->first]->kind == ST_DOCUMENTS;
}

void
shl_pipeline_set_source(shl_pipeline_t *p, const shl_pipeline_source_t *src)
{
    p->src = *src;
}

const bson_t *
shl_pipeline_leading_match(const shl_pipeline_t *p)
{
    if (p->first < p->nstages && p->stages[p->first]->kind == ST_MATCH) {
        return shl_matcher_filter(p->stages[p->first]->matcher);
    }
    return NULL;
}

void
shl_pipeline_drop_leading_match(shl_pipeline_t *p)
{
    if (shl_pipeline_leading_match(p) != NULL) {
        p->first++;
        link_stages(p);
    }
}

int
shl_pipeline_next(shl_pipeline_t *p, const bson_t **doc, shl_status_t *st)
{
    if (p->first >= p->nstages) {
        if (p->src.next == NULL) {
            *doc = NULL;
            return 0;
        }
        return p->src.next(p->src.arg, doc, st);
    }
    return pull(p->stages[p->nstages - 1], doc, st);
}

void
shl_pipeline_describe(const shl_pipeline_t *p, bson_t *arr)
{
    for (size_t i = 0; i < p->nstages; i++) {
        char key[16];
        const char *kp;
        bson_uint32_to_string((uint32_t)i, &kp, key, sizeof(key));
        BSON_APPEND_DOCUMENT(arr, kp, &p->stages[i]->spec);
    }
}

void
shl_pipeline_destroy(shl_pipeline_t *p)
{
    if (p == NULL) {
        return;
    }
    for (size_t i = 0; i < p->nstages; i++) {
        stage_destroy(p->stages[i]);
    }
    bson_free(p->stages);
    bson_free(p);
}

/* ---------------------------------------------------------------- array source */

typedef struct array_source {
    bson_iter_t it;
    bool ok;
    bson_t cur;
} array_source_t;

static int
array_source_next(void *arg, const bson_t **doc, shl_status_t *st)
{
    array_source_t *a = arg;
    (void)st;

    *doc = NULL;
    while (a->ok && shl_iter_next(&a->it)) {
        const uint8_t *data;
        uint32_t len;
        if (!BSON_ITER_HOLDS_DOCUMENT(&a->it)) {
            continue;
        }
        bson_iter_document(&a->it, &len, &data);
        if (bson_init_static(&a->cur, data, len)) {
            *doc = &a->cur;
            break;
        }
    }
    return 0;
}

int
shl_pipeline_run_array(const bson_t *docs, const bson_t *stages, bson_t *out, uint32_t *n,
                       shl_status_t *st)
{
    shl_pipeline_t *p = NULL;
    array_source_t a;
    shl_pipeline_source_t src;
    int ret = 0;

    memset(&a, 0, sizeof(a));
    a.ok = bson_iter_init(&a.it, docs);
    SHL_ERR(shl_pipeline_parse(stages, NULL, &p, st));
    if (shl_pipeline_output(p) != NULL) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "$out and $merge are not supported over this stage's documents");
    }
    src.next = array_source_next;
    src.arg = &a;
    shl_pipeline_set_source(p, &src);
    for (;;) {
        const bson_t *d;
        char key[16];
        const char *kp;
        SHL_ERR(shl_pipeline_next(p, &d, st));
        if (d == NULL) {
            break;
        }
        bson_uint32_to_string((*n)++, &kp, key, sizeof(key));
        bson_append_document(out, kp, -1, d);
    }
done:
    shl_pipeline_destroy(p);
    return ret;
}
