/*
 * pipe_documents.c -- the stages that make their own input and so must come first:
 * $documents (an expression's array) and $collStats / $indexStats (documents from the caller's
 * environment).
 */

#include <string.h>

#include "bson/bson_iter.h"
#include "query/pipeline_private.h"
#include "query/query_private.h"

/* ---------------------------------------------------------------- $documents, $collStats,
 * $indexStats */

int
pipe_next_documents(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
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
            pipe_eval_ctx(s, &empty, &ctx);
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
            SHL_ERR(pipe_docs_push(s, bson_copy(&view), st));
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

/* $documents, $collStats, $indexStats. */
void
pipe_destroy_documents(pipe_stage_t *s)
{
    bson_destroy(&s->stats_spec);
}

int
pipe_parse_documents(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it = *arg;

    SHL_ERR(shl_expr_parse(bson_iter_value(&it), &s->expr, st));
done:
    return ret;
}

int
pipe_parse_coll_stats(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it = *arg, f;
    bson_t view;

    if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !query_bson_view(bson_iter_value(&it), &view)) {
        SHL_FAIL(st, 5447000, "$collStats must take a nested object but found: %s",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
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
    bson_concat(&s->stats_spec, &view);
done:
    return ret;
}

int
pipe_parse_index_stats(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it = *arg;
    bson_t view;

    (void)s; /* nothing to fill: the environment makes its documents */
    if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !query_bson_view(bson_iter_value(&it), &view) ||
        !bson_empty(&view)) {
        SHL_FAIL(st, 28803, "The $indexStats stage specification must be an empty object");
    }
done:
    return ret;
}
