/*
 * pipeline.c -- aggregation stages as a pull chain: each stage's next() asks its source for
 * documents and produces its own. Buffering stages ($group, $sort) drain their source on the
 * first call. Stages that MongoDB defines as sugar ($count, $sortByCount, $set, $unset,
 * $replaceWith, $bucket, $fill) are rewritten into the core ones at parse time. This file holds
 * the stage table (one row a stage name: parse, next, destroy, placement, memory knob, router
 * split), the chain, the placement checks and what the families share; each family of stages
 * lives in its own pipe_*.c (src/query/README.md).
 */
#include "query/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "bson/bson_iter.h"
#include "query/pipeline_private.h"
#include "query/query_private.h"
#include "query/text.h"

/* $documents' buffer: Shale's own bound (its array is an expression value, at most
 * EXPR_MAX_VALUE_BYTES); every other buffering stage reads its MongoDB knob (pipe_stage_limit). */
#define PIPE_DOCUMENTS_MAX_MEMORY (100LL * 1024 * 1024)

/* ---------------------------------------------------------------- helpers */

static int pull(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);

int
pipe_pull_src(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
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

bson_t *
pipe_stage_out(pipe_stage_t *s)
{
    if (s->out_init) {
        bson_destroy(&s->out);
    }
    bson_init(&s->out);
    s->out_init = true;
    return &s->out;
}

void
pipe_eval_ctx(const pipe_stage_t *s, const bson_t *root, shl_expr_ctx_t *ctx)
{
    ctx->root = root;
    ctx->vars = s->pipe->opts.vars;
    ctx->now_ms = 0;
    ctx->collator = s->pipe->opts.collator;
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

/* ---------------------------------------------------------------- memory and size limits */

/*
 * Every stage that holds data bounds it (docs/limits.md): by the caller's override
 * (opts.max_memory_bytes > 0, for tests) or by the MongoDB knob of that stage, read when the
 * pipeline is parsed. Shale never spills to disk, so allowDiskUse does not lift a limit.
 */
int64_t
pipe_stage_limit(const shl_pipeline_t *p, shl_opt_id_t knob)
{
    return p->opts.max_memory_bytes > 0 ? p->opts.max_memory_bytes : shl_opt_int(knob);
}

static void
set_stage_limits(shl_pipeline_t *p, pipe_stage_t *s)
{
    s->knob = s->def->knob;
    if (s->knob != PIPE_NO_KNOB) {
        s->max_bytes = pipe_stage_limit(p, (shl_opt_id_t)s->knob);
    }
    if (s->def->flags & PIPE_GENERATES_INPUT) {
        s->max_bytes =
            p->opts.max_memory_bytes > 0 ? p->opts.max_memory_bytes : PIPE_DOCUMENTS_MAX_MEMORY;
    }
}

/* 292 for a buffering stage past its memory limit, as MongoDB without allowDiskUse. */
int
pipe_mem_exceeded(const pipe_stage_t *s, shl_status_t *st)
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

/* ---------------------------------------------------------------- buffered documents */

/* Keep 'doc' (owned) in the stage's buffer, accounting its bytes; whether that passed the
 * stage's limit. */
bool
pipe_docs_add(pipe_stage_t *s, bson_t *doc)
{
    if (s->ndocs == s->capdocs) {
        s->capdocs = s->capdocs ? s->capdocs * 2 : 16;
        s->docs = bson_realloc(s->docs, s->capdocs * sizeof(*s->docs));
    }
    s->docs[s->ndocs++] = doc;
    s->mem += doc->len + 32;
    return s->mem > s->max_bytes;
}

/* pipe_docs_add, failing with 292 past the limit. */
int
pipe_docs_push(pipe_stage_t *s, bson_t *doc, shl_status_t *st)
{
    return pipe_docs_add(s, doc) ? pipe_mem_exceeded(s, st) : 0;
}

void
pipe_docs_clear(pipe_stage_t *s)
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

/*
 * Append 'd' to 'arr', the array a $lookup joins or a $facet output being built, whose
 * enclosing document already holds 'base' bytes; n counts the elements. Past 'limit' (the
 * stage's size limit) it fails with the stage's error, 'too_big'. The limit is checked before
 * appending, so the array never reaches libbson's 2 GiB ceiling whatever the knob says.
 */
int
pipe_append_joined(const pipe_stage_t *s, bson_t *arr, uint32_t *n, int64_t base, const bson_t *d,
                   int64_t limit, pipe_too_big_fn too_big, shl_status_t *st)
{
    int64_t size = base + (int64_t)arr->len + (int64_t)shl_bson_array_element_len(*n, d->len);
    char key[16];
    const char *kp;

    if (size > limit || size > (int64_t)INT32_MAX - 1024) {
        return too_big(s, size, limit, st);
    }
    bson_uint32_to_string((*n)++, &kp, key, sizeof(key));
    bson_append_document(arr, kp, -1, d);
    return 0;
}

/* Run 'p' to the end, appending its documents to 'arr' with pipe_append_joined. */
int
pipe_drain_into(const pipe_stage_t *s, shl_pipeline_t *p, bson_t *arr, uint32_t *n, int64_t base,
                int64_t limit, pipe_too_big_fn too_big, shl_status_t *st)
{
    int ret = 0;
    const bson_t *d;

    for (;;) {
        SHL_ERR(shl_pipeline_next(p, &d, st));
        if (d == NULL) {
            break;
        }
        SHL_ERR(pipe_append_joined(s, arr, n, base, d, limit, too_big, st));
    }
done:
    return ret;
}

static int
pull(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    return s->def->next(s, doc, st);
}

/* The fields every family may use, then the family's own. */
void
pipe_stage_destroy(pipe_stage_t *s)
{
    if (s == NULL) {
        return;
    }
    if (s->def->destroy != NULL) {
        s->def->destroy(s);
    }
    shl_matcher_destroy(s->matcher);
    shl_projection_destroy(s->proj);
    shl_expr_destroy(s->expr);
    shl_sorter_destroy(s->sorter);
    shl_sort_pattern_destroy(s->pattern);
    if (s->out_init) {
        bson_destroy(&s->out);
    }
    pipe_docs_clear(s);
    if (s->have_buf) {
        bson_destroy(&s->buf);
    }
    bson_destroy(&s->lvars);
    bson_free(s->name);
    bson_destroy(&s->spec);
    bson_free(s);
}

/* ---------------------------------------------------------------- parsing */

static const pipe_stage_def_t *find_def(const char *name);

/* A stage of the table's row 'name', its spec {name: arg} when 'arg' is not NULL. */
pipe_stage_t *
pipe_stage_new(shl_pipeline_t *p, const char *name, const bson_iter_t *arg)
{
    pipe_stage_t *s = bson_aligned_alloc0(BSON_ALIGNOF(pipe_stage_t), sizeof(*s));
    s->def = find_def(name);
    SHL_INVARIANT(s->def != NULL && s->def->parse != NULL);
    s->pipe = p;
    s->name = bson_strdup(name);
    /* Every bson_t field is initialised, whatever the family: a parse may fail before it
     * fills them, and the family's destroy frees its own. */
    bson_init(&s->spec);
    bson_init(&s->lvars);
    bson_init(&s->sub_spec);
    bson_init(&s->restrict_spec);
    bson_init(&s->stats_spec);
    bson_init(&s->merge_let);
    bson_init(&s->merge_pipe);
    s->max_depth = -1;
    if (arg != NULL) {
        bson_append_iter(&s->spec, name, -1, arg);
    }
    return s;
}

void
pipe_push(shl_pipeline_t *p, pipe_stage_t *s)
{
    p->stages = bson_realloc(p->stages, (p->nstages + 1) * sizeof(*p->stages));
    p->stages[p->nstages++] = s;
}

int
pipe_arg_doc(const bson_iter_t *it, bson_t *view, int code, const char *msg, shl_status_t *st)
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

/* ---------------------------------------------------------------- sub-pipelines */

static int parse_stages(shl_pipeline_t *p, const bson_t *stages, shl_status_t *st);

/*
 * pipe_sub_parse --
 *     Parse a sub-pipeline ($facet, $lookup, $unionWith) with the parent's options and
 *     environment; 'vars' replaces the variables when not NULL. Nesting is bounded as
 *     MongoDB's (MaxSubPipelineDepthExceeded past 20).
 */
/* A zeroed pipeline (its bson_t member aligned as libbson wants). */
static shl_pipeline_t *
pipeline_alloc(void)
{
    shl_pipeline_t *p = bson_aligned_alloc0(BSON_ALIGNOF(shl_pipeline_t), sizeof(*p));
    bson_init(&p->stripped);
    return p;
}

int
pipe_sub_parse(shl_pipeline_t *parent, const bson_t *stages, pipe_ctx_t ctx, const bson_t *vars,
               shl_pipeline_t **out, shl_status_t *st)
{
    int ret = 0;
    shl_pipeline_t *p = pipeline_alloc();

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

/* Stages MongoDB has and Shale does not yet. */
static int
not_implemented(shl_pipeline_t *p, const bson_iter_t *arg, shl_status_t *st)
{
    (void)p;
    return shl_status_set(st, SHL_CODE_NOT_IMPLEMENTED, "%s is not supported by Shale yet",
                          shl_iter_key(arg));
}

/* ---------------------------------------------------------------- the stage table */

/* One row a stage name, sorted by name (find_def searches it). */
static const pipe_stage_def_t stage_defs[] = {
    {"$addFields", pipe_parse_add_fields, NULL, pipe_next_project, NULL, 0, PIPE_NO_KNOB,
     SHL_PIPELINE_SPLIT_STREAMING},
    {"$bucket", NULL, pipe_rewrite_bucket, NULL, NULL, 0, PIPE_NO_KNOB, SHL_PIPELINE_SPLIT_MERGER},
    {"$bucketAuto", pipe_parse_bucket_auto, NULL, pipe_next_bucket_auto, pipe_destroy_group, 0,
     SHL_OPT_internalDocumentSourceBucketAutoMaxMemoryBytes, SHL_PIPELINE_SPLIT_MERGER},
    {"$collStats", pipe_parse_coll_stats, NULL, pipe_next_documents, pipe_destroy_documents,
     PIPE_GENERATES_INPUT | PIPE_NOT_IN_FACET, PIPE_NO_KNOB, SHL_PIPELINE_SPLIT_EACH_SHARD},
    {"$count", NULL, pipe_rewrite_count, NULL, NULL, 0, PIPE_NO_KNOB, SHL_PIPELINE_SPLIT_MERGER},
    {"$currentOp", NULL, not_implemented, NULL, NULL, 0, PIPE_NO_KNOB, SHL_PIPELINE_SPLIT_MERGER},
    {"$densify", pipe_parse_window, NULL, pipe_next_window, pipe_destroy_window, 0, PIPE_NO_KNOB,
     SHL_PIPELINE_SPLIT_MERGER},
    {"$documents", pipe_parse_documents, NULL, pipe_next_documents, pipe_destroy_documents,
     PIPE_GENERATES_INPUT, PIPE_NO_KNOB, SHL_PIPELINE_SPLIT_MERGER},
    {"$facet", pipe_parse_facet, NULL, pipe_next_facet, pipe_destroy_facet, PIPE_NOT_IN_FACET,
     SHL_OPT_internalQueryFacetBufferSizeBytes, SHL_PIPELINE_SPLIT_MERGER},
    {"$fill", NULL, pipe_rewrite_fill, NULL, NULL, 0, PIPE_NO_KNOB, SHL_PIPELINE_SPLIT_MERGER},
    {"$graphLookup", pipe_parse_graph_lookup, NULL, pipe_next_graph_lookup, pipe_destroy_lookup, 0,
     SHL_OPT_internalDocumentSourceGraphLookupMaxMemoryBytes, SHL_PIPELINE_SPLIT_MERGER},
    {"$group", pipe_parse_group, NULL, pipe_next_group, pipe_destroy_group, 0,
     SHL_OPT_internalDocumentSourceGroupMaxMemoryBytes, SHL_PIPELINE_SPLIT_MERGER},
    {"$indexStats", pipe_parse_index_stats, NULL, pipe_next_documents, pipe_destroy_documents,
     PIPE_GENERATES_INPUT | PIPE_NOT_IN_FACET, PIPE_NO_KNOB, SHL_PIPELINE_SPLIT_EACH_SHARD},
    {"$limit", pipe_parse_limit_skip, NULL, pipe_next_limit, NULL, 0, PIPE_NO_KNOB,
     SHL_PIPELINE_SPLIT_MERGER},
    {"$listLocalSessions", NULL, not_implemented, NULL, NULL, 0, PIPE_NO_KNOB,
     SHL_PIPELINE_SPLIT_MERGER},
    {"$lookup", pipe_parse_lookup, NULL, pipe_next_lookup, pipe_destroy_lookup, 0,
     SHL_OPT_internalLookupStageIntermediateDocumentMaxSizeBytes, SHL_PIPELINE_SPLIT_MERGER},
    {"$match", pipe_parse_match, NULL, pipe_next_match, NULL, 0, PIPE_NO_KNOB,
     SHL_PIPELINE_SPLIT_STREAMING},
    {"$merge", pipe_parse_merge, NULL, pipe_pull_src, pipe_destroy_output,
     PIPE_WRITES_OUTPUT | PIPE_NOT_IN_FACET, PIPE_NO_KNOB, SHL_PIPELINE_SPLIT_MERGER},
    {"$out", pipe_parse_out, NULL, pipe_pull_src, pipe_destroy_output,
     PIPE_WRITES_OUTPUT | PIPE_NOT_IN_FACET, PIPE_NO_KNOB, SHL_PIPELINE_SPLIT_MERGER},
    {"$project", pipe_parse_project, NULL, pipe_next_project, NULL, 0, PIPE_NO_KNOB,
     SHL_PIPELINE_SPLIT_STREAMING},
    {"$redact", pipe_parse_redact, NULL, pipe_next_redact, NULL, 0, PIPE_NO_KNOB,
     SHL_PIPELINE_SPLIT_MERGER},
    {"$replaceRoot", pipe_parse_replace_root, NULL, pipe_next_replace_root, NULL, 0, PIPE_NO_KNOB,
     SHL_PIPELINE_SPLIT_STREAMING},
    {"$replaceWith", pipe_parse_replace_root, NULL, pipe_next_replace_root, NULL, 0, PIPE_NO_KNOB,
     SHL_PIPELINE_SPLIT_STREAMING},
    /* MongoDB's $sample is a sort on a random key: the sort's memory limit. */
    {"$sample", pipe_parse_sample, NULL, pipe_next_sample, NULL, 0,
     SHL_OPT_internalQueryMaxBlockingSortMemoryUsageBytes, SHL_PIPELINE_SPLIT_MERGER},
    {"$set", pipe_parse_add_fields, NULL, pipe_next_project, NULL, 0, PIPE_NO_KNOB,
     SHL_PIPELINE_SPLIT_STREAMING},
    {"$setWindowFields", pipe_parse_window, NULL, pipe_next_window, pipe_destroy_window, 0,
     PIPE_NO_KNOB, SHL_PIPELINE_SPLIT_MERGER},
    {"$skip", pipe_parse_limit_skip, NULL, pipe_next_skip, NULL, 0, PIPE_NO_KNOB,
     SHL_PIPELINE_SPLIT_MERGER},
    {"$sort", pipe_parse_sort, NULL, pipe_next_sort, NULL, 0,
     SHL_OPT_internalQueryMaxBlockingSortMemoryUsageBytes, SHL_PIPELINE_SPLIT_MERGER},
    {"$sortByCount", NULL, pipe_rewrite_sort_by_count, NULL, NULL, 0, PIPE_NO_KNOB,
     SHL_PIPELINE_SPLIT_MERGER},
    {"$unionWith", pipe_parse_union_with, NULL, pipe_next_union_with, pipe_destroy_lookup, 0,
     PIPE_NO_KNOB, SHL_PIPELINE_SPLIT_MERGER},
    {"$unset", pipe_parse_unset, NULL, pipe_next_project, NULL, 0, PIPE_NO_KNOB,
     SHL_PIPELINE_SPLIT_STREAMING},
    {"$unwind", pipe_parse_unwind, NULL, pipe_next_unwind, pipe_destroy_unwind, 0, PIPE_NO_KNOB,
     SHL_PIPELINE_SPLIT_STREAMING},
};

static int
def_cmp(const void *key, const void *row)
{
    return strcmp(key, ((const pipe_stage_def_t *)row)->name);
}

static const pipe_stage_def_t *
find_def(const char *name)
{
    return bsearch(name, stage_defs, sizeof(stage_defs) / sizeof(stage_defs[0]),
                   sizeof(stage_defs[0]), def_cmp);
}

shl_pipeline_split_t
shl_pipeline_stage_split(const char *name)
{
    const pipe_stage_def_t *d = find_def(name);
    return d != NULL ? d->split : SHL_PIPELINE_SPLIT_MERGER;
}

int
pipe_parse_stage(shl_pipeline_t *p, const bson_t *stage_doc, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    pipe_stage_t *s = NULL;
    const pipe_stage_def_t *def;

    if (bson_count_keys(stage_doc) != 1 || !bson_iter_init(&it, stage_doc) || !shl_iter_next(&it)) {
        SHL_FAIL(st, 40323,
                 "A pipeline stage specification object must contain exactly one field.");
    }
    def = find_def(shl_iter_key(&it));
    if (def == NULL) {
        SHL_FAIL(st, 40324, "Unrecognized pipeline stage name: '%s'", shl_iter_key(&it));
    }
    if (def->rewrite != NULL) {
        SHL_ERR(def->rewrite(p, &it, st));
        goto done;
    }
    s = pipe_stage_new(p, def->name, &it);
    SHL_ERR(def->parse(s, &it, st));
    pipe_push(p, s);
    s = NULL;
done:
    pipe_stage_destroy(s);
    return ret;
}

static void
link_stages(shl_pipeline_t *p)
{
    for (size_t i = p->first; i < p->nstages; i++) {
        pipe_stage_t *s = p->stages[i];
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
        SHL_ERR(pipe_arg_doc(
            &it, &view, 40323,
            "A pipeline stage specification object must contain exactly one field.", st));
        SHL_ERR(pipe_parse_stage(p, &view, st));
    }
    for (size_t i = 0; i < p->nstages; i++) {
        pipe_stage_t *s = p->stages[i];
        set_stage_limits(p, s);
        unsigned flags = s->def->flags;
        if ((flags & PIPE_GENERATES_INPUT) && i > 0) {
            SHL_FAIL(st, 40602, "%s is only valid as the first stage in a pipeline", s->name);
        }
        if ((flags & PIPE_WRITES_OUTPUT) && i + 1 != p->nstages) {
            SHL_FAIL(st, 40601, "%s can only be the final stage in the pipeline", s->name);
        }
        if (p->ctx == CTX_FACET && (flags & PIPE_NOT_IN_FACET)) {
            SHL_FAIL(st, 40600, "%s is not allowed to be used within a $facet stage", s->name);
        }
        if (p->ctx == CTX_LOOKUP && (flags & PIPE_WRITES_OUTPUT)) {
            SHL_FAIL(st, 51047, "%s is not allowed within a $lookup's sub-pipeline", s->name);
        }
        if (p->ctx == CTX_UNION_WITH && (flags & PIPE_WRITES_OUTPUT)) {
            SHL_FAIL(st, 31441, "%s is not allowed within a $unionWith's sub-pipeline", s->name);
        }
    }
    /* $sort followed by $limit(s): a top-k sort. */
    for (size_t i = 0; i < p->nstages; i++) {
        pipe_stage_t *s = p->stages[i];
        if (s->def != find_def("$sort")) {
            continue;
        }
        int64_t limit = 0;
        for (size_t j = i + 1; j < p->nstages && p->stages[j]->def == find_def("$limit"); j++) {
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
    shl_pipeline_t *p = pipeline_alloc();

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
    if (p->nstages > 0 && (p->stages[p->nstages - 1]->def->flags & PIPE_WRITES_OUTPUT)) {
        return &p->stages[p->nstages - 1]->output;
    }
    return NULL;
}

const char *
shl_pipeline_first_stage(const shl_pipeline_t *p)
{
    return p->first < p->nstages ? p->stages[p->first]->name : NULL;
}

bool
shl_pipeline_generates_input(const shl_pipeline_t *p)
{
    return p->first < p->nstages && (p->stages[p->first]->def->flags & PIPE_GENERATES_INPUT);
}

void
shl_pipeline_set_source(shl_pipeline_t *p, const shl_pipeline_source_t *src)
{
    p->src = *src;
}

const bson_t *
shl_pipeline_leading_match(const shl_pipeline_t *p)
{
    if (p->first < p->nstages && p->stages[p->first]->def == find_def("$match")) {
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
    int ret;
    bson_t out;
    if (p->first >= p->nstages) {
        if (p->src.next == NULL) {
            *doc = NULL;
            return 0;
        }
        ret = p->src.next(p->src.arg, doc, st);
    } else {
        ret = pull(p->stages[p->nstages - 1], doc, st);
    }
    if (ret == 0 && *doc != NULL && !p->opts.keep_text_score && shl_text_score_strip(*doc, &out)) {
        bson_destroy(&p->stripped);
        p->stripped = out;
        *doc = &p->stripped;
    }
    return ret;
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
        pipe_stage_destroy(p->stages[i]);
    }
    bson_free(p->stages);
    bson_destroy(&p->stripped);
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
