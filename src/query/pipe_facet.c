/*
 * pipe_facet.c -- $facet: buffers its input and runs each parsed sub-pipeline over it,
 * one output array each.
 */

#include <string.h>

#include "bson/bson_iter.h"
#include "query/pipeline_private.h"
#include "query/query_private.h"

/*
 * $facet's input past internalQueryFacetBufferSizeBytes. MongoDB's $facet feeds its
 * sub-pipelines that many bytes at a time; Shale's holds the whole input, so the knob bounds
 * all of it: ExceededMemoryLimit (no spilling can help).
 */
static int
facet_input_exceeded(const pipe_stage_t *s, shl_status_t *st)
{
    return shl_status_set(st, SHL_CODE_EXCEEDED_MEMORY_LIMIT,
                          "$facet's input exceeded %lld bytes (internalQueryFacetBufferSizeBytes); "
                          "Shale's $facet holds all of its input in memory",
                          (long long)s->max_bytes);
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

/* ---------------------------------------------------------------- $facet */

/* Its output document past internalQueryFacetMaxOutputDocSizeBytes. */
static int
facet_too_big(const pipe_stage_t *s, int64_t size, int64_t limit, shl_status_t *st)
{
    (void)s;
    return shl_status_set(st, 4031700,
                          "$facet output document would be %lld bytes, over its limit of "
                          "%lld bytes (internalQueryFacetMaxOutputDocSizeBytes)",
                          (long long)size, (long long)limit);
}

int
pipe_next_facet(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;

    *doc = NULL;
    if (s->drained) {
        goto done;
    }
    s->drained = true;
    for (;;) {
        SHL_ERR(pipe_pull_src(s, &in, st));
        if (in == NULL) {
            break;
        }
        if (pipe_docs_add(s, bson_copy(in))) {
            SHL_ERR(facet_input_exceeded(s, st));
        }
    }
    bson_t *o = pipe_stage_out(s);
    for (size_t i = 0; i < s->nsubs; i++) {
        vec_src_t vs = {.docs = s->docs, .n = s->ndocs, .pos = 0};
        bson_t arr;
        uint32_t n = 0;
        shl_pipeline_set_source(s->subs[i], &(shl_pipeline_source_t){vec_next, &vs});
        /* What 'o' holds before this array's documents: its fields so far, this array's
         * type byte, key and header, and the closing bytes. */
        int64_t base = (int64_t)o->len + 1 + (int64_t)strlen(s->sub_names[i]) + 1 + 1;
        bson_append_array_begin(o, s->sub_names[i], -1, &arr);
        ret = pipe_drain_into(s, s->subs[i], &arr, &n, base, s->max_out, facet_too_big, st);
        bson_append_array_end(o, &arr);
        SHL_ERR(ret);
    }
    /* The output may pass 16 MiB here, as MongoDB's may inside a pipeline; the reply's
     * limit applies to what finally leaves the pipeline (cursor batches). */
    pipe_docs_clear(s);
    *doc = o;
done:
    return ret;
}

void
pipe_destroy_facet(pipe_stage_t *s)
{
    for (size_t i = 0; i < s->nsubs; i++) {
        shl_pipeline_destroy(s->subs[i]);
        bson_free(s->sub_names[i]);
    }
    bson_free(s->subs);
    bson_free(s->sub_names);
}

int
pipe_parse_facet(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    shl_pipeline_t *p = s->pipe;
    bson_t view;
    bson_iter_t it, acopy = *arg;

    s->max_out = pipe_stage_limit(p, SHL_OPT_internalQueryFacetMaxOutputDocSizeBytes);
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
        SHL_ERR(pipe_sub_parse(p, &arr, CTX_FACET, NULL, &s->subs[s->nsubs - 1], st));
    }
done:
    return ret;
}
