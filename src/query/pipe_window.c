/*
 * pipe_window.c -- the stage-table glue of the window stages, which live in window.c:
 * $setWindowFields, $densify, and $fill (rewritten into $setWindowFields + $addFields).
 */

#include "bson/bson_iter.h"
#include "query/pipeline_private.h"
#include "query/query_private.h"

/* ---------------------------------------------------------------- next */

/* A stage's input as a source, for the stages in window.c. */
static int
stage_src_next(void *arg, const bson_t **doc, shl_status_t *st)
{
    return pipe_pull_src(arg, doc, st);
}

/* $setWindowFields, $densify: window.c's, pulling from the stage's input. */
int
pipe_next_window(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    shl_pipeline_source_t in = {.next = stage_src_next, .arg = s};
    return query_wstage_next(s->win, &in, doc, st);
}

void
pipe_destroy_window(pipe_stage_t *s)
{
    query_wstage_destroy(s->win);
}

/* $setWindowFields and $densify (window.c). */
int
pipe_parse_window(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    shl_pipeline_t *p = s->pipe;
    const char *name = shl_iter_key(arg);

    SHL_ERR(query_wstage_parse(
        name, arg, p->opts.vars,
        pipe_stage_limit(p, SHL_OPT_internalQueryMaxBlockingSortMemoryUsageBytes), &s->win, st));
    query_wstage_set_collator(s->win, p->opts.collator);
done:
    return ret;
}

/* $fill: rewritten into $setWindowFields + $addFields, as MongoDB does. */
int
pipe_rewrite_fill(shl_pipeline_t *p, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_t tmp = BSON_INITIALIZER;
    uint32_t nf = 0;
    bson_iter_t f;

    SHL_ERR(query_fill_desugar(arg, &tmp, &nf, st));
    bson_iter_init(&f, &tmp);
    while (shl_iter_next(&f)) {
        bson_t fst;
        bool ok = query_bson_view(bson_iter_value(&f), &fst);
        SHL_INVARIANT(ok);
        SHL_ERR(pipe_parse_stage(p, &fst, st));
    }
done:
    bson_destroy(&tmp);
    return ret;
}
