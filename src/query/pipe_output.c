/*
 * pipe_output.c -- $out and $merge: parsed and validated here, documents passed through;
 * the caller writes them (pipeline.h's shl_pipeline_output, shl_pipeline_merge_vars).
 */

#include <string.h>

#include "bson/bson_iter.h"
#include "query/pipeline_private.h"
#include "query/query_private.h"

/* $out, $merge. */
void
pipe_destroy_output(pipe_stage_t *s)
{
    bson_free(s->out_db);
    bson_free(s->out_coll);
    if (s->on_fields != NULL) {
        bson_strfreev(s->on_fields);
    }
    bson_destroy(&s->merge_let);
    bson_destroy(&s->merge_pipe);
}

/* The {db, coll} form of a $out or $merge target into s->out_db and s->out_coll; 'field' names
 * it in errors ("$out", "into"); $out requires db. */
static int
parse_target_doc(pipe_stage_t *s, const bson_value_t *v, const char *field, bool require_db,
                 shl_status_t *st)
{
    int ret = 0;
    bson_t view;
    bson_iter_t f;

    query_bson_view(v, &view);
    bson_iter_init(&f, &view);
    while (shl_iter_next(&f)) {
        const char *k = shl_iter_key(&f);
        char **dst =
            strcmp(k, "db") == 0 ? &s->out_db : (strcmp(k, "coll") == 0 ? &s->out_coll : NULL);
        if (dst == NULL) {
            SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD, "BSON field '%s.%s' is an unknown field.",
                     field, k);
        }
        if (!BSON_ITER_HOLDS_UTF8(&f)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field '%s.%s' is the wrong type '%s', expected type 'string'", field, k,
                     shl_bson_type_name(shl_iter_type(&f)));
        }
        bson_free(*dst);
        *dst = bson_strdup(bson_iter_utf8(&f, NULL));
    }
    if (require_db && s->out_db == NULL) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '%s.db' is missing but a required field", field);
    }
    if (s->out_coll == NULL) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '%s.coll' is missing but a required field", field);
    }
done:
    return ret;
}

/* $out: a collection name or {db, coll}. */
int
pipe_parse_out(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t acopy = *arg;

    if (BSON_ITER_HOLDS_UTF8(&acopy)) {
        s->out_coll = bson_strdup(bson_iter_utf8(&acopy, NULL));
    } else if (BSON_ITER_HOLDS_DOCUMENT(&acopy)) {
        SHL_ERR(parse_target_doc(s, bson_iter_value(&acopy), "$out", true, st));
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
done:
    return ret;
}

static int
merge_into(pipe_stage_t *s, bson_iter_t *it, shl_status_t *st)
{
    int ret = 0;

    if (BSON_ITER_HOLDS_UTF8(it)) {
        s->out_coll = bson_strdup(bson_iter_utf8(it, NULL));
    } else if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        SHL_ERR(parse_target_doc(s, bson_iter_value(it), "into", false, st));
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

int
pipe_parse_merge(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, acopy = *arg;
    shl_pipeline_output_t *o = &s->output;
    bool have_into = false;
    const char *wm = "merge", *wnm = "insert";

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
done:
    return ret;
}

int
shl_pipeline_merge_vars(const shl_pipeline_t *p, const bson_t *doc, bson_t *out, shl_status_t *st)
{
    int ret = 0;
    const pipe_stage_t *s = p->nstages > 0 ? p->stages[p->nstages - 1] : NULL;
    bson_iter_t it;
    shl_expr_t *e = NULL;
    bson_value_t v;
    shl_expr_ctx_t ctx = {.root = doc, .vars = p->opts.vars, .now_ms = 0};

    v.value_type = BSON_TYPE_EOD;
    bson_init(out);
    if (s == NULL || !(s->def->flags & PIPE_WRITES_OUTPUT) || !s->has_merge_let) {
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
