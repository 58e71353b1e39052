/*
 * pipe_bucket.c -- $bucket (rewritten into $group by a $switch over the boundaries and a
 * $sort) and $bucketAuto (buffers its input, sorts by groupBy, sizes buckets as MongoDB does,
 * rounding bounds to a preferred-number `granularity` series).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bson/bson_compare.h"
#include "bson/bson_iter.h"
#include "query/pipeline_private.h"
#include "query/query_private.h"

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

static const pipe_stage_t *bucket_sort_stage;

static int
bucket_cmp(const void *x, const void *y)
{
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    int c = shl_expr_compare(&bucket_sort_stage->vals[a], &bucket_sort_stage->vals[b]);
    return c != 0 ? c : (a < b ? -1 : (a > b ? 1 : 0));
}

static int
bucket_auto_emit(pipe_stage_t *s, const size_t *order, size_t from, size_t to,
                 const bson_value_t *min, const bson_value_t *max, uint32_t *nout, shl_status_t *st)
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
        pipe_eval_ctx(s, s->docs[order[k]], &ctx);
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

int
pipe_next_bucket_auto(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
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
            SHL_ERR(pipe_pull_src(s, &in, st));
            if (in == NULL) {
                break;
            }
            pipe_eval_ctx(s, in, &ctx);
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
            SHL_ERR(pipe_docs_push(s, bson_copy(in), st));
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
        pipe_docs_clear(s);
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

/* $bucket: rewritten, as MongoDB does, into $group by a $switch over the boundaries and a
 * $sort on _id. */
int
pipe_rewrite_bucket(shl_pipeline_t *p, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    pipe_stage_t *s = NULL;
    bson_t view, group = BSON_INITIALIZER, idexpr, sw, branches, sortspec = BSON_INITIALIZER;
    bson_iter_t it, b;
    const bson_value_t *group_by = NULL, *bounds = NULL, *def = NULL;
    bson_value_t gv, bv, dv;
    bson_t outspec;
    bool have_out = false;
    char *j1 = NULL, *j2 = NULL;
    bson_iter_t acopy = *arg;
    bson_t explain = BSON_INITIALIZER;

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
                j1 = query_value_to_json(&gv);
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
                    j1 = query_value_to_json(&prev);
                    j2 = query_value_to_json(cur);
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
    bson_append_iter(&explain, "$bucket", -1, arg);
    SHL_ERR(pipe_push_group(p, &group, &explain, st));
    BSON_APPEND_INT32(&sortspec, "_id", 1);
    s = pipe_stage_new(p, "$sort", NULL);
    BSON_APPEND_DOCUMENT(&s->spec, "$sort", &sortspec);
    SHL_ERR(shl_sort_pattern_new(&sortspec, &s->pattern, st));
    pipe_push(p, s);
    s = NULL;
done:
    pipe_stage_destroy(s);
    bson_destroy(&explain);
    bson_free(j1);
    bson_free(j2);
    bson_destroy(&group);
    bson_destroy(&sortspec);
    return ret;
}

int
pipe_parse_bucket_auto(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    shl_pipeline_t *p = s->pipe;
    bson_t view;
    bson_iter_t it, acopy = *arg;
    bool have_buckets = false;
    char *j = NULL;

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
                j = query_value_to_json(&gv);
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
                SHL_ERR(pipe_parse_acc_fields(p, s, shl_iter_key(&f), &f, st));
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
done:
    bson_free(j);
    return ret;
}
