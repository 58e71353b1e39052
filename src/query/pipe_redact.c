/*
 * pipe_redact.c -- $redact: $$KEEP / $$PRUNE / $$DESCEND bound only here, evaluated
 * at each level of the document ($$ROOT at a nested level is that level).
 */

#include <string.h>

#include "bson/bson_iter.h"
#include "query/pipeline_private.h"
#include "query/query_private.h"

/* ---------------------------------------------------------------- $redact */

/* What $$KEEP, $$PRUNE and $$DESCEND evaluate to inside $redact (not writable as literals: a
 * string starting with "$$" parses as a variable). */
#define REDACT_KEEP "$$KEEP"
#define REDACT_PRUNE "$$PRUNE"
#define REDACT_DESCEND "$$DESCEND"

static int redact_doc(pipe_stage_t *s, const bson_t *doc, bson_t *out, bool *kept,
                      shl_status_t *st);

/* Redact the elements of an array: sub-documents recursively, other values kept. */
static int
redact_array(pipe_stage_t *s, const bson_t *arr, bson_t *out, shl_status_t *st)
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
redact_doc(pipe_stage_t *s, const bson_t *doc, bson_t *out, bool *kept, shl_status_t *st)
{
    int ret = 0;
    shl_expr_ctx_t ctx = {
        .root = doc, .vars = &s->lvars, .now_ms = 0, .collator = s->pipe->opts.collator};
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

int
pipe_next_redact(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
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
        SHL_ERR(pipe_pull_src(s, &in, st));
        if (in == NULL) {
            goto done;
        }
        SHL_ERR(redact_doc(s, in, pipe_stage_out(s), &kept, st));
        if (kept) {
            *doc = &s->out;
            goto done;
        }
    }
done:
    return ret;
}

int
pipe_parse_redact(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it = *arg;

    SHL_ERR(shl_expr_parse(bson_iter_value(&it), &s->expr, st));
done:
    return ret;
}
