/*
 * pipe_basic.c -- the streaming stages and the simple buffering ones: $match, $project,
 * $addFields/$set, $unset, $limit, $skip, $unwind, $replaceRoot/$replaceWith, $sort (the query
 * sorter; following $limits make it a top-k, pipeline.c) and $sample.
 */

#include <string.h>

#include "bson/bson_iter.h"
#include "query/pipeline_private.h"
#include "query/query_private.h"
#include "query/text.h"

/* ---------------------------------------------------------------- simple stages */

int
pipe_next_match(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    shl_match_details_t d = {.vars = s->pipe->opts.vars};

    for (;;) {
        SHL_ERR(pipe_pull_src(s, doc, st));
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

int
pipe_next_project(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;

    *doc = NULL;
    SHL_ERR(pipe_pull_src(s, &in, st));
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

int
pipe_next_limit(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    if (s->seen >= s->n) {
        *doc = NULL;
        return 0;
    }
    s->seen++;
    return pipe_pull_src(s, doc, st);
}

int
pipe_next_skip(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;

    for (;;) {
        SHL_ERR(pipe_pull_src(s, doc, st));
        if (*doc == NULL || s->seen >= s->n) {
            break;
        }
        s->seen++;
    }
done:
    return ret;
}

int
pipe_next_replace_root(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;
    shl_expr_ctx_t ctx;
    bson_value_t v;
    bson_t view;
    char *json = NULL;
    double score;

    v.value_type = BSON_TYPE_EOD;
    *doc = NULL;
    SHL_ERR(pipe_pull_src(s, &in, st));
    if (in == NULL) {
        goto done;
    }
    pipe_eval_ctx(s, in, &ctx);
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
    bson_concat(pipe_stage_out(s), &view);
    /* The text score is metadata: the new root keeps the one its input carried (as MongoDB's
     * $replaceRoot copies the input's metadata). */
    if (shl_text_score_get(in, &score) && !bson_has_field(&view, SHL_TEXT_SCORE_FIELD)) {
        BSON_APPEND_DOUBLE(&s->out, SHL_TEXT_SCORE_FIELD, score);
    }
    *doc = &s->out;
done:
    bson_free(json);
    bson_value_destroy(&v);
    return ret;
}

/* ---------------------------------------------------------------- $unwind */

int
pipe_next_unwind(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;
    bson_iter_t it, found;

    *doc = NULL;
    for (;;) {
        if (s->have_in) {
            if (shl_iter_next(&s->arr_it)) {
                bson_t *o = pipe_stage_out(s);
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
        SHL_ERR(pipe_pull_src(s, &in, st));
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
            bson_t *o = pipe_stage_out(s);
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
            query_copy_set_path(in, s->index_field, &nv, pipe_stage_out(s));
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

int
pipe_next_sort(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;

    if (!s->drained) {
        for (;;) {
            SHL_ERR(pipe_pull_src(s, &in, st));
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

int
pipe_next_sample(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;

    *doc = NULL;
    if (!s->drained) {
        /* Reservoir sampling keeps memory bounded by 'size' documents. */
        uint64_t seen = 0;
        for (;;) {
            SHL_ERR(pipe_pull_src(s, &in, st));
            if (in == NULL) {
                break;
            }
            seen++;
            if ((int64_t)s->ndocs < s->n) {
                SHL_ERR(pipe_docs_push(s, bson_copy(in), st));
            } else {
                uint64_t j = sample_rand() % seen;
                if (j < (uint64_t)s->n) {
                    s->mem += (int64_t)in->len - (int64_t)s->docs[j]->len;
                    bson_destroy(s->docs[j]);
                    s->docs[j] = bson_copy(in);
                    if (s->mem > s->max_bytes) {
                        SHL_ERR(pipe_mem_exceeded(s, st));
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

void
pipe_destroy_unwind(pipe_stage_t *s)
{
    if (s->have_in) {
        bson_destroy(&s->cur_in);
    }
    bson_free(s->path);
    bson_free(s->index_field);
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

int
pipe_parse_sample(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, acopy = *arg;
    bson_t view;
    bool have = false;

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
done:
    return ret;
}

/* ---------------------------------------------------------------- parsing */

int
pipe_parse_match(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_t view;

    SHL_ERR(
        pipe_arg_doc(arg, &view, 15959, "the match filter must be an expression in an object", st));
    SHL_ERR(shl_matcher_new(&view,
                            SHL_MATCHER_DEFAULT | (s->pipe->opts.leading_text &&
                                                           s->pipe->depth == 0 &&
                                                           s->pipe->nstages == 0
                                                       ? SHL_MATCHER_TEXT_DEFERRED
                                                       : 0u),
                            &s->matcher, st));
    if (s->pipe->opts.collator != NULL) {
        shl_matcher_set_collator(s->matcher, s->pipe->opts.collator);
    }
done:
    return ret;
}

int
pipe_parse_project(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_t view;

    SHL_ERR(pipe_arg_doc(arg, &view, 15969, "$project specification must be an object", st));
    if (bson_empty(&view)) {
        SHL_FAIL(st, 51272,
                 "Invalid $project :: caused by :: projection specification must have at least "
                 "one field");
    }
    SHL_ERR(shl_projection_new(&view, NULL, &s->proj, st));
    shl_projection_set_collator(s->proj, s->pipe->opts.collator);
done:
    return ret;
}

/* $addFields and its alias $set. */
int
pipe_parse_add_fields(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_t view;

    SHL_ERR(
        pipe_arg_doc(arg, &view, 40272, "$addFields specification stage must be an object", st));
    SHL_ERR(query_addfields_new(&view, &s->proj, st));
    shl_projection_set_collator(s->proj, s->pipe->opts.collator);
done:
    return ret;
}

/* $unset: an exclusion projection. */
int
pipe_parse_unset(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_t tmp = BSON_INITIALIZER;

    if (BSON_ITER_HOLDS_UTF8(arg)) {
        BSON_APPEND_INT32(&tmp, bson_iter_utf8(arg, NULL), 0);
    } else if (BSON_ITER_HOLDS_ARRAY(arg)) {
        bson_iter_t a;
        bson_iter_recurse(arg, &a);
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
    SHL_ERR(shl_projection_new(&tmp, NULL, &s->proj, st));
    shl_projection_set_collator(s->proj, s->pipe->opts.collator);
done:
    bson_destroy(&tmp);
    return ret;
}

int
pipe_parse_sort(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_t view;

    SHL_ERR(pipe_arg_doc(arg, &view, 15973, "the $sort key specification must be an object", st));
    if (bson_empty(&view)) {
        SHL_FAIL(st, 15976, "$sort stage must have at least one sort key");
    }
    SHL_ERR(shl_sort_pattern_new(&view, &s->pattern, st));
    if (s->pipe->opts.collator != NULL) {
        shl_sort_pattern_set_collator(s->pattern, s->pipe->opts.collator);
    }
done:
    return ret;
}

/* $limit and $skip. */
int
pipe_parse_limit_skip(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    int64_t n = 0;
    const char *name = shl_iter_key(arg);

    SHL_ERR(parse_int_arg(arg, name, &n, st));
    s->n = n;
done:
    return ret;
}

int
pipe_parse_unwind(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    const char *path = NULL;

    if (BSON_ITER_HOLDS_UTF8(arg)) {
        path = bson_iter_utf8(arg, NULL);
    } else if (BSON_ITER_HOLDS_DOCUMENT(arg)) {
        bson_iter_t d;
        bson_iter_recurse(arg, &d);
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
        SHL_FAIL(st, 15981,
                 "expected either a string or an object as specification for $unwind stage, got %s",
                 "other");
    }
    if (path[0] != '$') {
        SHL_FAIL(st, 28818, "path option to $unwind stage should be prefixed with a '$': %s", path);
    }
    if (path[1] == '\0') {
        SHL_FAIL(st, 40352, "FieldPath cannot be constructed with empty string");
    }
    s->path = bson_strdup(path + 1);
done:
    return ret;
}

/* $replaceRoot and $replaceWith. */
int
pipe_parse_replace_root(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    const char *name = shl_iter_key(arg);
    const bson_value_t *root = NULL;
    bson_iter_t d, it = *arg;
    bson_t view;

    if (name[8] == 'R') { /* $replaceRoot */
        SHL_ERR(pipe_arg_doc(arg, &view, 40228,
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
    SHL_ERR(shl_expr_parse(root, &s->expr, st));
done:
    return ret;
}
