/*
 * expr_array.c -- array, set and object aggregation operators: $arrayElemAt $first $last
 * $filter $map $reduce $in $slice $concatArrays $reverseArray $range $indexOfArray $isArray
 * $zip $arrayToObject $objectToArray $sortArray, the set operators, $mergeObjects,
 * $getField, $setField and $unsetField. Semantics and codes follow MongoDB 7.0.
 */
#include "bson/bson_iter.h"
#include "query/expression_private.h"

#include <stdlib.h>
#include <string.h>

#include "bson/bson_compare.h"

static const char *
tname(const bson_value_t *v)
{
    return expr_type_name(v);
}

static int
elem_at(const char *name, const bson_value_t *arr, const bson_value_t *idx, bson_value_t *out,
        shl_status_t *st)
{
    size_t n;
    bson_value_t *vals;
    int32_t i;
    if (expr_nullish(arr) || expr_nullish(idx)) {
        expr_value_null(out);
        return 0;
    }
    if (arr->value_type != BSON_TYPE_ARRAY) {
        return shl_status_set(st, 28689, "%s's first argument must be an array, but is %s", name,
                              tname(arr));
    }
    if (!query_value_is_number(idx)) {
        return shl_status_set(st, 28690, "%s's second argument must be a numeric value, but is %s",
                              name, tname(idx));
    }
    if (!expr_integral32(idx, &i)) {
        return shl_status_set(st, 28691,
                              "%s's second argument must be representable as a 32-bit integer: %g",
                              name, query_value_as_double(idx));
    }
    vals = expr_array_values(arr, &n);
    if (i < 0) {
        i = (int32_t)((int64_t)n + i);
    }
    if (i < 0 || (size_t)i >= n) {
        expr_value_missing(out);
    } else {
        expr_value_copy(&vals[i], out);
    }
    bson_free(vals);
    return 0;
}

EXPR_FN(expr_op_array_elem_at)
{
    bson_value_t v[2];
    int ret = expr_eval_args(e, ctx, v, st);
    if (ret == 0) {
        ret = elem_at("$arrayElemAt", &v[0], &v[1], out, st);
        bson_value_destroy(&v[0]);
        bson_value_destroy(&v[1]);
    }
    return ret;
}

static int
first_last(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st,
           bool last)
{
    bson_value_t v, idx;
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret != 0) {
        return ret;
    }
    expr_value_int32(&idx, last ? -1 : 0);
    if (expr_nullish(&v)) {
        expr_value_null(out);
    } else if (v.value_type != BSON_TYPE_ARRAY) {
        ret = shl_status_set(st, 28689, "%s's argument must be an array, but is %s",
                             last ? "$last" : "$first", tname(&v));
    } else {
        ret = elem_at(last ? "$last" : "$first", &v, &idx, out, st);
    }
    bson_value_destroy(&v);
    return ret;
}

EXPR_FN(expr_op_first)
{
    return first_last(e, ctx, out, st, false);
}

EXPR_FN(expr_op_last)
{
    return first_last(e, ctx, out, st, true);
}

/* 'as' of $map / $filter: a literal string naming a user variable; default "this". */
static int
parse_as(const bson_value_t *arg, shl_expr_t *e, shl_status_t *st)
{
    bson_t view;
    bson_iter_t it;
    const char *name = "this";
    query_bson_view(arg, &view);
    if (bson_iter_init_find(&it, &view, "as")) {
        name = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
    }
    e->var = bson_strdup(name);
    return expr_check_user_var_name(e->var, st);
}

/* $filter: args [input, cond, limit]; e->var is the element variable. */
EXPR_PARSE(expr_parse_filter)
{
    static const char *const keys[] = {"input", "cond", "limit", "as"};
    int ret = 0;
    SHL_ERR(expr_parse_named(op, arg, keys, 4, e, 28646, 28647, st));
    if (e->args[0] == NULL) {
        SHL_FAIL(st, 28648, "Missing 'input' parameter to $filter");
    }
    if (e->args[1] == NULL) {
        SHL_FAIL(st, 28650, "Missing 'cond' parameter to $filter");
    }
    SHL_ERR(parse_as(arg, e, st));
done:
    return ret;
}

EXPR_FN(expr_op_filter)
{
    bson_value_t in, lim, *vals = NULL;
    const char *names[1] = {e->var};
    expr_arr_t arr;
    int32_t limit = INT32_MAX;
    size_t n = 0;
    int ret = 0;

    expr_arr_init(&arr);
    expr_value_missing(&lim);
    SHL_ERR(shl_expr_evaluate(e->args[0], ctx, &in, st));
    if (expr_nullish(&in)) {
        expr_value_null(out);
        goto done;
    }
    if (in.value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, 28651, "input to $filter must be an array not %s", tname(&in));
    }
    SHL_ERR(expr_eval_opt(e->args[2], ctx, &lim, st));
    if (!expr_nullish(&lim)) {
        if (!expr_integral32(&lim, &limit)) {
            char *js = query_value_to_json(&lim);
            ret = shl_status_set(
                st, 327391, "$filter: limit must be represented as a 32-bit integral value: %s",
                js);
            bson_free(js);
            goto done;
        }
        if (limit < 1) {
            SHL_FAIL(st, 327392, "$filter: limit must be greater than 0: %d", limit);
        }
    }
    vals = expr_array_values(&in, &n);
    for (size_t i = 0; i < n && arr.n < (uint32_t)limit; i++) {
        bson_value_t c;
        bool keep;
        SHL_ERR(expr_eval_scoped(e->args[1], ctx, names, &vals[i], 1, &c, st));
        keep = query_value_truthy(&c);
        bson_value_destroy(&c);
        if (keep) {
            expr_arr_append(&arr, &vals[i]);
        }
    }
    ret = expr_arr_finish(&arr, out, st);
done:
    bson_free(vals);
    expr_arr_cleanup(&arr);
    bson_value_destroy(&in);
    bson_value_destroy(&lim);
    return ret;
}

/* $map: args [input, in]. */
EXPR_PARSE(expr_parse_map)
{
    static const char *const keys[] = {"input", "in", "as"};
    int ret = 0;
    SHL_ERR(expr_parse_named(op, arg, keys, 3, e, 16878, 16879, st));
    if (e->args[0] == NULL) {
        SHL_FAIL(st, 16880, "Missing 'input' parameter to $map");
    }
    if (e->args[1] == NULL) {
        SHL_FAIL(st, 16882, "Missing 'in' parameter to $map");
    }
    SHL_ERR(parse_as(arg, e, st));
done:
    return ret;
}

EXPR_FN(expr_op_map)
{
    bson_value_t in, *vals = NULL;
    const char *names[1] = {e->var};
    expr_arr_t arr;
    size_t n = 0;
    int ret = 0;

    expr_arr_init(&arr);
    SHL_ERR(shl_expr_evaluate(e->args[0], ctx, &in, st));
    if (expr_nullish(&in)) {
        expr_value_null(out);
        goto done;
    }
    if (in.value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, 16883, "input to $map must be an array not %s", tname(&in));
    }
    vals = expr_array_values(&in, &n);
    for (size_t i = 0; i < n; i++) {
        bson_value_t r;
        SHL_ERR(expr_eval_scoped(e->args[1], ctx, names, &vals[i], 1, &r, st));
        expr_arr_append(&arr, &r);
        bson_value_destroy(&r);
        if (arr.too_big) {
            break;
        }
    }
    ret = expr_arr_finish(&arr, out, st);
done:
    bson_free(vals);
    expr_arr_cleanup(&arr);
    bson_value_destroy(&in);
    return ret;
}

/* $reduce: args [input, initialValue, in]; $$this and $$value are bound for 'in'. */
EXPR_PARSE(expr_parse_reduce)
{
    static const char *const keys[] = {"input", "initialValue", "in"};
    int ret = 0;
    SHL_ERR(expr_parse_named(op, arg, keys, 3, e, 40075, 40076, st));
    if (e->args[0] == NULL) {
        SHL_FAIL(st, 40077, "$reduce requires 'input' to be specified");
    }
    if (e->args[1] == NULL) {
        SHL_FAIL(st, 40078, "$reduce requires 'initialValue' to be specified");
    }
    if (e->args[2] == NULL) {
        SHL_FAIL(st, 40079, "$reduce requires 'in' to be specified");
    }
done:
    return ret;
}

EXPR_FN(expr_op_reduce)
{
    static const char *const names[2] = {"this", "value"};
    bson_value_t in, acc, *vals = NULL, bind[2];
    size_t n = 0;
    int ret = 0;

    expr_value_missing(&acc);
    SHL_ERR(shl_expr_evaluate(e->args[0], ctx, &in, st));
    if (expr_nullish(&in)) {
        expr_value_null(out);
        goto done;
    }
    if (in.value_type != BSON_TYPE_ARRAY) {
        char *js = query_value_to_json(&in);
        ret = shl_status_set(st, 40080, "$reduce requires that 'input' be an array, found: %s", js);
        bson_free(js);
        goto done;
    }
    SHL_ERR(shl_expr_evaluate(e->args[1], ctx, &acc, st));
    vals = expr_array_values(&in, &n);
    for (size_t i = 0; i < n; i++) {
        bson_value_t next;
        bind[0] = vals[i];
        bind[1] = acc;
        SHL_ERR(expr_eval_scoped(e->args[2], ctx, names, bind, 2, &next, st));
        bson_value_destroy(&acc);
        acc = next;
        if ((acc.value_type == BSON_TYPE_ARRAY || acc.value_type == BSON_TYPE_DOCUMENT) &&
            acc.value.v_doc.data_len > EXPR_MAX_VALUE_BYTES) {
            SHL_FAIL(st, QC_BUF_TOO_BIG, "$reduce: the accumulated value exceeds %d bytes",
                     EXPR_MAX_VALUE_BYTES);
        }
        if (acc.value_type == BSON_TYPE_UTF8 && acc.value.v_utf8.len > EXPR_MAX_VALUE_BYTES) {
            SHL_FAIL(st, QC_BUF_TOO_BIG, "$reduce: the accumulated value exceeds %d bytes",
                     EXPR_MAX_VALUE_BYTES);
        }
    }
    *out = acc;
    expr_value_missing(&acc);
done:
    bson_free(vals);
    bson_value_destroy(&in);
    bson_value_destroy(&acc);
    return ret;
}

EXPR_FN(expr_op_in)
{
    bson_value_t v[2], *vals;
    size_t n;
    bool found = false;
    int ret = expr_eval_args(e, ctx, v, st);
    if (ret != 0) {
        return ret;
    }
    if (v[1].value_type != BSON_TYPE_ARRAY) {
        ret = shl_status_set(st, 40081, "$in requires an array as a second argument, found: %s",
                             tname(&v[1]));
    } else {
        vals = expr_array_values(&v[1], &n);
        for (size_t i = 0; i < n && !found; i++) {
            found = shl_expr_compare_coll(&v[0], &vals[i], ctx->collator) == 0;
        }
        bson_free(vals);
        expr_value_bool(out, found);
    }
    bson_value_destroy(&v[0]);
    bson_value_destroy(&v[1]);
    return ret;
}

EXPR_FN(expr_op_slice)
{
    bson_value_t v[3], *vals = NULL;
    expr_arr_t arr;
    size_t n = 0, start, end;
    int32_t a2, cnt;
    int ret = expr_eval_args(e, ctx, v, st);
    if (ret != 0) {
        return ret;
    }
    if (e->nargs < 3) {
        expr_value_missing(&v[2]);
    }
    expr_arr_init(&arr);
    if (expr_nullish(&v[0]) || expr_nullish(&v[1])) {
        expr_value_null(out);
        goto done;
    }
    if (v[0].value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, 28724, "First argument to $slice must be an array, but is of type: %s",
                 tname(&v[0]));
    }
    if (!query_value_is_number(&v[1])) {
        SHL_FAIL(st, 28725, "Second argument to $slice must be a numeric value, but is of type: %s",
                 tname(&v[1]));
    }
    if (!expr_integral32(&v[1], &a2)) {
        SHL_FAIL(st, 28726,
                 "Second argument to $slice can't be represented as a 32-bit integer: %g",
                 query_value_as_double(&v[1]));
    }
    vals = expr_array_values(&v[0], &n);
    if (e->nargs == 2) {
        start = 0;
        end = n;
        if (a2 >= 0) {
            end = (size_t)a2 < n ? (size_t)a2 : n;
        } else {
            start = (int64_t)n + a2 > 0 ? (size_t)((int64_t)n + a2) : 0;
        }
    } else {
        if (a2 < 0) {
            start = (int64_t)n + a2 > 0 ? (size_t)((int64_t)n + a2) : 0;
        } else {
            start = (size_t)a2 < n ? (size_t)a2 : n;
        }
        if (expr_nullish(&v[2])) {
            expr_value_null(out);
            goto done;
        }
        if (!query_value_is_number(&v[2])) {
            SHL_FAIL(st, 28727, "Third argument to $slice must be numeric, but is of type: %s",
                     tname(&v[2]));
        }
        if (!expr_integral32(&v[2], &cnt)) {
            SHL_FAIL(st, 28728,
                     "Third argument to $slice can't be represented as a 32-bit integer: %g",
                     query_value_as_double(&v[2]));
        }
        if (cnt <= 0) {
            SHL_FAIL(st, 28729, "Third argument to $slice must be positive: %d", cnt);
        }
        end = start + (size_t)cnt < n ? start + (size_t)cnt : n;
    }
    for (size_t i = start; i < end; i++) {
        expr_arr_append(&arr, &vals[i]);
    }
    ret = expr_arr_finish(&arr, out, st);
done:
    bson_free(vals);
    expr_arr_cleanup(&arr);
    for (int i = 0; i < 3; i++) {
        bson_value_destroy(&v[i]);
    }
    return ret;
}

EXPR_FN(expr_op_concat_arrays)
{
    expr_arr_t arr;
    int ret = 0;
    bool null = false;
    expr_arr_init(&arr);
    for (size_t i = 0; i < e->nargs; i++) {
        bson_value_t v, *vals;
        size_t n;
        SHL_ERR(shl_expr_evaluate(e->args[i], ctx, &v, st));
        if (expr_nullish(&v)) {
            null = true;
        } else if (v.value_type != BSON_TYPE_ARRAY) {
            const char *t = tname(&v);
            ret = shl_status_set(st, 28664, "$concatArrays only supports arrays, not %s", t);
            bson_value_destroy(&v);
            goto done;
        } else if (!null) {
            vals = expr_array_values(&v, &n);
            for (size_t k = 0; k < n; k++) {
                expr_arr_append(&arr, &vals[k]);
            }
            bson_free(vals);
        }
        bson_value_destroy(&v);
    }
    if (null) {
        expr_value_null(out);
    } else {
        ret = expr_arr_finish(&arr, out, st);
    }
done:
    expr_arr_cleanup(&arr);
    return ret;
}

EXPR_FN(expr_op_reverse_array)
{
    bson_value_t v, *vals;
    expr_arr_t arr;
    size_t n;
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret != 0) {
        return ret;
    }
    expr_arr_init(&arr);
    if (expr_nullish(&v)) {
        expr_value_null(out);
    } else if (v.value_type != BSON_TYPE_ARRAY) {
        ret = shl_status_set(st, 34435,
                             "The argument to $reverseArray must be an array, but was of type: %s",
                             tname(&v));
    } else {
        vals = expr_array_values(&v, &n);
        for (size_t i = n; i-- > 0;) {
            expr_arr_append(&arr, &vals[i]);
        }
        bson_free(vals);
        ret = expr_arr_finish(&arr, out, st);
    }
    expr_arr_cleanup(&arr);
    bson_value_destroy(&v);
    return ret;
}

EXPR_FN(expr_op_range)
{
    bson_value_t v[3];
    expr_arr_t arr;
    int32_t s32, e32, step = 1;
    int64_t cur, end, len;
    int ret = expr_eval_args(e, ctx, v, st);
    if (ret != 0) {
        return ret;
    }
    if (e->nargs < 3) {
        expr_value_missing(&v[2]);
    }
    expr_arr_init(&arr);
    if (!query_value_is_number(&v[0])) {
        SHL_FAIL(st, 34443, "$range requires a numeric starting value, found value of type: %s",
                 tname(&v[0]));
    }
    if (!expr_integral32(&v[0], &s32)) {
        SHL_FAIL(st, 34444,
                 "$range requires a starting value that can be represented as a 32-bit integer");
    }
    if (!query_value_is_number(&v[1])) {
        SHL_FAIL(st, 34445, "$range requires a numeric ending value, found value of type: %s",
                 tname(&v[1]));
    }
    if (!expr_integral32(&v[1], &e32)) {
        SHL_FAIL(st, 34446,
                 "$range requires an ending value that can be represented as a 32-bit integer");
    }
    if (e->nargs == 3) {
        if (!query_value_is_number(&v[2])) {
            SHL_FAIL(st, 34447, "$range requires a numeric step value, found value of type:%s",
                     tname(&v[2]));
        }
        if (!expr_integral32(&v[2], &step)) {
            SHL_FAIL(st, 34448,
                     "$range requires a step value that can be represented as a 32-bit integer");
        }
        if (step == 0) {
            SHL_FAIL(st, 34449, "$range requires a non-zero step value");
        }
    }
    cur = s32;
    end = e32;
    len = (end - cur) / step;
    len = len >= 0 ? len + 1 : 0;
    {
        /* MongoDB's estimate: the vector plus one approximate Value per element. */
        int64_t need = 24 + len * 16, limit = EXPR_MAX_VALUE_BYTES;
        if (need >= limit) {
            SHL_FAIL(st, SHL_CODE_EXCEEDED_MEMORY_LIMIT,
                     "$range would use too much memory (%lld bytes) and cannot spill to disk. "
                     "Memory limit: %lld bytes",
                     (long long)need, (long long)limit);
        }
    }
    while (step > 0 ? cur < end : cur > end) {
        bson_value_t x;
        expr_value_int32(&x, (int32_t)cur);
        expr_arr_append(&arr, &x);
        cur += step;
    }
    ret = expr_arr_finish(&arr, out, st);
done:
    expr_arr_cleanup(&arr);
    for (int i = 0; i < 3; i++) {
        bson_value_destroy(&v[i]);
    }
    return ret;
}

static int
nonneg_index(const bson_value_t *v, const char *what, int64_t *out, shl_status_t *st)
{
    int32_t x;
    if (!expr_integral32(v, &x)) {
        return shl_status_set(st, 40096,
                              "$indexOfArray requires an integral %s, found a value of type: %s",
                              what, tname(v));
    }
    if (x < 0) {
        return shl_status_set(st, 40097, "$indexOfArray requires a nonnegative %s, found: %d", what,
                              x);
    }
    *out = x;
    return 0;
}

EXPR_FN(expr_op_index_of_array)
{
    bson_value_t v[4], *vals = NULL;
    size_t n = 0;
    int64_t start = 0, end;
    int ret = expr_eval_args(e, ctx, v, st);
    if (ret != 0) {
        return ret;
    }
    for (size_t i = e->nargs; i < 4; i++) {
        expr_value_missing(&v[i]);
    }
    if (expr_nullish(&v[0])) {
        expr_value_null(out);
        goto done;
    }
    if (v[0].value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, 40090, "$indexOfArray requires an array as a first argument, found: %s",
                 tname(&v[0]));
    }
    vals = expr_array_values(&v[0], &n);
    end = (int64_t)n;
    if (e->nargs > 2) {
        SHL_ERR(nonneg_index(&v[2], "starting index", &start, st));
    }
    if (e->nargs > 3) {
        SHL_ERR(nonneg_index(&v[3], "ending index", &end, st));
        if (end > (int64_t)n) {
            end = (int64_t)n;
        }
    }
    expr_value_int32(out, -1);
    for (int64_t i = start; i < end; i++) {
        if (shl_expr_compare_coll(&vals[i], &v[1], ctx->collator) == 0) {
            expr_value_int32(out, (int32_t)i);
            break;
        }
    }
done:
    bson_free(vals);
    for (int i = 0; i < 4; i++) {
        bson_value_destroy(&v[i]);
    }
    return ret;
}

EXPR_FN(expr_op_is_array)
{
    bson_value_t v;
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret == 0) {
        expr_value_bool(out, v.value_type == BSON_TYPE_ARRAY);
        bson_value_destroy(&v);
    }
    return ret;
}

/* $zip: args are the inputs (nsub of them) then the defaults; flags = useLongestLength. */
EXPR_PARSE(expr_parse_zip)
{
    bson_t view, sub;
    bson_iter_t it, sit;
    ptrvec_t inputs = {0}, defaults = {0};
    int ret = 0;

    (void)op;
    if (arg->value_type != BSON_TYPE_DOCUMENT) {
        SHL_FAIL(st, 34460, "$zip only supports an object as an argument, found %s",
                 shl_bson_type_name(arg->value_type));
    }
    query_bson_view(arg, &view);
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "inputs") == 0 || strcmp(k, "defaults") == 0) {
            ptrvec_t *pv = k[0] == 'i' ? &inputs : &defaults;
            if (!BSON_ITER_HOLDS_ARRAY(&it)) {
                SHL_FAIL(st, k[0] == 'i' ? 34461 : 34462,
                         "%s must be an array of expressions, found %s", k,
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            query_bson_view(bson_iter_value(&it), &sub);
            bson_iter_init(&sit, &sub);
            while (shl_iter_next(&sit)) {
                shl_expr_t *x = NULL;
                SHL_ERR(expr_parse_operand(bson_iter_value(&sit), &x, st));
                ptrvec_push(pv, x);
            }
        } else if (strcmp(k, "useLongestLength") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it)) {
                SHL_FAIL(st, 34463, "useLongestLength must be a bool, found %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            e->flags = bson_iter_bool(&it);
        } else {
            SHL_FAIL(st, 34464, "$zip found an unknown argument: %s", k);
        }
    }
    if (inputs.n == 0) {
        SHL_FAIL(st, 34465, "$zip requires at least one input array");
    }
    if (!e->flags && defaults.n > 0) {
        SHL_FAIL(st, 34466, "cannot specify defaults unless useLongestLength is true");
    }
    if (defaults.n > 0 && defaults.n != inputs.n) {
        SHL_FAIL(st, 34467, "defaults and inputs must have the same length");
    }
    e->nsub = inputs.n;
    for (size_t i = 0; i < defaults.n; i++) {
        ptrvec_push(&inputs, defaults.v[i]);
    }
    defaults.n = 0;
    e->args = (shl_expr_t **)inputs.v;
    e->nargs = inputs.n;
    inputs.v = NULL;
    inputs.n = 0;
done:
    for (size_t i = 0; i < inputs.n; i++) {
        shl_expr_destroy(inputs.v[i]);
    }
    for (size_t i = 0; i < defaults.n; i++) {
        shl_expr_destroy(defaults.v[i]);
    }
    ptrvec_cleanup(&inputs);
    ptrvec_cleanup(&defaults);
    return ret;
}

EXPR_FN(expr_op_zip)
{
    size_t k = e->nsub, minlen = 0, maxlen = 0, outlen;
    bson_value_t *ins = bson_malloc0(k * sizeof(bson_value_t)),
                 *defs = bson_malloc0(k * sizeof(bson_value_t));
    bson_value_t **vals = bson_malloc0(k * sizeof(bson_value_t *));
    size_t *lens = bson_malloc0(k * sizeof(size_t));
    expr_arr_t arr;
    bool null = false;
    int ret = 0;

    expr_arr_init(&arr);
    for (size_t i = 0; i < k; i++) {
        expr_value_missing(&ins[i]);
        expr_value_null(&defs[i]);
    }
    for (size_t i = 0; i < k; i++) {
        SHL_ERR(shl_expr_evaluate(e->args[i], ctx, &ins[i], st));
        if (expr_nullish(&ins[i])) {
            null = true;
            break;
        }
        if (ins[i].value_type != BSON_TYPE_ARRAY) {
            char *js = query_value_to_json(&ins[i]);
            ret = shl_status_set(st, 34468, "$zip found a non-array expression in input: %s", js);
            bson_free(js);
            goto done;
        }
        vals[i] = expr_array_values(&ins[i], &lens[i]);
        if (i == 0 || lens[i] < minlen) {
            minlen = lens[i];
        }
        if (lens[i] > maxlen) {
            maxlen = lens[i];
        }
    }
    if (null) {
        expr_value_null(out);
        goto done;
    }
    if (minlen != maxlen && e->nargs > k) {
        for (size_t i = 0; i < k; i++) {
            bson_value_destroy(&defs[i]);
            expr_value_null(&defs[i]);
            SHL_ERR(shl_expr_evaluate(e->args[k + i], ctx, &defs[i], st));
        }
    }
    outlen = e->flags ? maxlen : minlen;
    for (size_t r = 0; r < outlen; r++) {
        expr_arr_t row;
        bson_value_t rv;
        expr_arr_init(&row);
        for (size_t c = 0; c < k; c++) {
            expr_arr_append(&row, r < lens[c] ? &vals[c][r] : &defs[c]);
        }
        if ((ret = expr_arr_finish(&row, &rv, st)) != 0) {
            expr_arr_cleanup(&row);
            goto done;
        }
        expr_arr_cleanup(&row);
        expr_arr_append(&arr, &rv);
        bson_value_destroy(&rv);
    }
    ret = expr_arr_finish(&arr, out, st);
done:
    for (size_t i = 0; i < k; i++) {
        bson_value_destroy(&ins[i]);
        bson_value_destroy(&defs[i]);
        bson_free(vals[i]);
    }
    bson_free(ins);
    bson_free(defs);
    bson_free(vals);
    bson_free(lens);
    expr_arr_cleanup(&arr);
    return ret;
}

/* Set a top-level field in an ordered document being built: replaces in place. */
static void
doc_set(bson_t *doc, const char *key, size_t klen, const bson_value_t *v)
{
    bson_iter_t it;
    bson_t tmp = BSON_INITIALIZER;
    bool replaced = false;
    if (bson_iter_init(&it, doc)) {
        while (shl_iter_next(&it)) {
            if (shl_iter_key_len(&it) == klen && memcmp(shl_iter_key(&it), key, klen) == 0) {
                if (!replaced && v->value_type != BSON_TYPE_EOD) {
                    bson_append_value(&tmp, key, (int)klen, v);
                }
                replaced = true;
            } else {
                bson_append_value(&tmp, shl_iter_key(&it), (int)shl_iter_key_len(&it),
                                  bson_iter_value(&it));
            }
        }
    }
    if (!replaced && v->value_type != BSON_TYPE_EOD) {
        bson_append_value(&tmp, key, (int)klen, v);
    }
    bson_destroy(doc);
    bson_init(doc);
    bson_concat(doc, &tmp);
    bson_destroy(&tmp);
}

/* An object built from (key, value) pairs in order where a repeated key keeps its first
 * position and takes its last value (MutableDocument's output[key] = value). Sorting makes
 * it O(n log n) for objects of any size. Keys and values are borrowed until finish. */
typedef struct objent {
    const char *key;
    size_t klen;
    bson_value_t val;
    size_t idx;
} objent_t;

typedef struct objb {
    objent_t *e;
    size_t n, cap;
} objb_t;

static void
objb_add(objb_t *b, const char *key, size_t klen, const bson_value_t *v)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 16;
        b->e = bson_realloc(b->e, b->cap * sizeof(objent_t));
    }
    b->e[b->n].key = key;
    b->e[b->n].klen = klen;
    b->e[b->n].val = *v;
    b->e[b->n].idx = b->n;
    b->n++;
}

static int
cmp_objent_key(const void *a, const void *b)
{
    const objent_t *x = a, *y = b;
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    int c = memcmp(x->key, y->key, n);
    if (c != 0) {
        return c;
    }
    if (x->klen != y->klen) {
        return x->klen < y->klen ? -1 : 1;
    }
    return x->idx < y->idx ? -1 : (x->idx > y->idx ? 1 : 0);
}

static int
cmp_objent_idx(const void *a, const void *b)
{
    const objent_t *x = a, *y = b;
    return x->idx < y->idx ? -1 : (x->idx > y->idx ? 1 : 0);
}

static int
objb_finish(objb_t *b, const char *opname, bson_value_t *out, shl_status_t *st)
{
    bson_t doc = BSON_INITIALIZER;
    size_t k = 0;
    int ret = 0;
    if (b->n > 1) {
        qsort(b->e, b->n, sizeof(objent_t), cmp_objent_key);
    }
    for (size_t i = 0; i < b->n;) {
        size_t j = i;
        while (j + 1 < b->n && b->e[j + 1].klen == b->e[i].klen &&
               memcmp(b->e[j + 1].key, b->e[i].key, b->e[i].klen) == 0) {
            j++;
        }
        b->e[k] = b->e[i];
        b->e[k].val = b->e[j].val;
        k++;
        i = j + 1;
    }
    if (k > 1) {
        qsort(b->e, k, sizeof(objent_t), cmp_objent_idx);
    }
    for (size_t i = 0; i < k; i++) {
        bson_append_value(&doc, b->e[i].key, (int)b->e[i].klen, &b->e[i].val);
        expr_budget_charge(b->e[i].klen);
        if (doc.len > EXPR_MAX_VALUE_BYTES) {
            SHL_FAIL(st, QC_BUF_TOO_BIG, "%s: result exceeds %d bytes", opname,
                     EXPR_MAX_VALUE_BYTES);
        }
    }
    expr_value_take_bson(&doc, BSON_TYPE_DOCUMENT, out);
    bson_init(&doc);
done:
    bson_destroy(&doc);
    return ret;
}

EXPR_FN(expr_op_array_to_object)
{
    bson_value_t v, *vals = NULL;
    objb_t ob = {0};
    size_t n = 0;
    bool pairs;
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret != 0) {
        return ret;
    }
    if (expr_nullish(&v)) {
        expr_value_null(out);
        goto done;
    }
    if (v.value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, 40386, "$arrayToObject requires an array input, found: %s", tname(&v));
    }
    vals = expr_array_values(&v, &n);
    if (n == 0) {
        goto finish;
    }
    if (vals[0].value_type == BSON_TYPE_ARRAY) {
        pairs = true;
    } else if (vals[0].value_type == BSON_TYPE_DOCUMENT) {
        pairs = false;
    } else {
        SHL_FAIL(st, 40398, "Unrecognised input type format for $arrayToObject: %s",
                 tname(&vals[0]));
    }
    for (size_t i = 0; i < n; i++) {
        const bson_value_t *k = NULL, *val = NULL;
        bson_value_t *kv = NULL;
        size_t kn = 0;
        if (pairs) {
            if (vals[i].value_type != BSON_TYPE_ARRAY) {
                SHL_FAIL(st, 40396,
                         "$arrayToObject requires a consistent input format. Elements must all "
                         "be arrays or all be objects. Array was detected, now found: %s",
                         tname(&vals[i]));
            }
            kv = expr_array_values(&vals[i], &kn);
            if (kn != 2) {
                bson_free(kv);
                SHL_FAIL(st, 40397,
                         "$arrayToObject requires an array of size 2 arrays,found array of size: "
                         "%zu",
                         kn);
            }
            k = &kv[0];
            val = &kv[1];
            if (k->value_type != BSON_TYPE_UTF8) {
                const char *t = tname(k);
                bson_free(kv);
                SHL_FAIL(st, 40395,
                         "$arrayToObject requires an array of key-value pairs, where the key "
                         "must be of type string. Found key type: %s",
                         t);
            }
        } else {
            bson_t d;
            bson_iter_t it;
            bson_value_t *dv = NULL;
            if (vals[i].value_type != BSON_TYPE_DOCUMENT) {
                SHL_FAIL(st, 40391,
                         "$arrayToObject requires a consistent input format. Elements must all "
                         "be arrays or all be objects. Object was detected, now found: %s",
                         tname(&vals[i]));
            }
            query_bson_view(&vals[i], &d);
            if (bson_count_keys(&d) != 2) {
                SHL_FAIL(st, 40392,
                         "$arrayToObject requires an object keys of 'k' and 'v'. Found incorrect "
                         "number of keys:%u",
                         bson_count_keys(&d));
            }
            (void)dv;
            kv = bson_malloc0(2 * sizeof(bson_value_t));
            if (bson_iter_init_find(&it, &d, "k")) {
                kv[0] = *bson_iter_value(&it);
                k = &kv[0];
            }
            if (bson_iter_init_find(&it, &d, "v")) {
                kv[1] = *bson_iter_value(&it);
                val = &kv[1];
            }
            if (k == NULL || val == NULL) {
                bson_free(kv);
                SHL_FAIL(st, 40393,
                         "$arrayToObject requires an object with keys 'k' and 'v'. Missing "
                         "either or both keys");
            }
            if (k->value_type != BSON_TYPE_UTF8) {
                const char *t = tname(k);
                bson_free(kv);
                SHL_FAIL(st, 40394,
                         "$arrayToObject requires an object with keys 'k' and 'v', where the "
                         "value of 'k' must be of type string. Found type: %s",
                         t);
            }
        }
        if (strlen(k->value.v_utf8.str) != k->value.v_utf8.len) {
            bson_free(kv);
            SHL_FAIL(st, pairs ? 4940400 : 4940401,
                     "Key field cannot contain an embedded null byte");
        }
        objb_add(&ob, k->value.v_utf8.str, k->value.v_utf8.len, val);
        bson_free(kv);
    }
finish:
    ret = objb_finish(&ob, "$arrayToObject", out, st);
done:
    bson_free(ob.e);
    bson_free(vals);
    bson_value_destroy(&v);
    return ret;
}

EXPR_FN(expr_op_object_to_array)
{
    bson_value_t v;
    expr_arr_t arr;
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret != 0) {
        return ret;
    }
    expr_arr_init(&arr);
    if (expr_nullish(&v)) {
        expr_value_null(out);
    } else if (v.value_type != BSON_TYPE_DOCUMENT) {
        ret = shl_status_set(st, 40390, "$objectToArray requires a document input, found: %s",
                             tname(&v));
    } else {
        bson_t d;
        bson_iter_t it;
        query_bson_view(&v, &d);
        bson_iter_init(&it, &d);
        while (shl_iter_next(&it)) {
            bson_t kv = BSON_INITIALIZER;
            bson_value_t x;
            bson_append_utf8(&kv, "k", 1, shl_iter_key(&it), (int)shl_iter_key_len(&it));
            bson_append_value(&kv, "v", 1, bson_iter_value(&it));
            expr_value_take_bson(&kv, BSON_TYPE_DOCUMENT, &x);
            expr_arr_append(&arr, &x);
            bson_value_destroy(&x);
        }
        ret = expr_arr_finish(&arr, out, st);
    }
    expr_arr_cleanup(&arr);
    bson_value_destroy(&v);
    return ret;
}

/* ---- $sortArray: args [input, sortBy as a constant]; sort spec kept in e->names? no:
 * the spec is the constant argument args[1]. ---- */

EXPR_PARSE(expr_parse_sort_array)
{
    static const char *const keys[] = {"input", "sortBy"};
    int ret = 0;
    SHL_ERR(expr_parse_named(op, arg, keys, 2, e, 2942500, 2942501, st));
    if (e->args[0] == NULL) {
        SHL_FAIL(st, 2942502, "$sortArray requires 'input' to be specified");
    }
    if (e->args[1] == NULL) {
        SHL_FAIL(st, 2942503, "$sortArray requires 'sortBy' to be specified");
    }
    {
        const shl_expr_t *s = e->args[1];
        bool ok = false;
        if (s->kind == EXPR_CONST && query_value_is_number(&s->constant)) {
            double d = query_value_as_double(&s->constant);
            ok = d == 1 || d == -1;
        } else if (s->kind == EXPR_OBJECT && s->nargs > 0) {
            ok = true;
            for (size_t i = 0; i < s->nargs; i++) {
                double d =
                    s->args[i]->kind == EXPR_CONST && query_value_is_number(&s->args[i]->constant)
                        ? query_value_as_double(&s->args[i]->constant)
                        : 0;
                ok = ok && (d == 1 || d == -1);
            }
        }
        if (!ok) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "$sortArray requires 'sortBy' to be 1, -1, or a sort specification object "
                     "with values 1 or -1");
        }
    }
done:
    return ret;
}

typedef struct sort_ctx {
    const shl_expr_t *spec;
} sort_ctx_t;

static void
field_of(const bson_value_t *v, const char *path, bson_value_t *out)
{
    bson_t d;
    bson_iter_t it, child;
    expr_value_missing(out);
    if (v->value_type == BSON_TYPE_DOCUMENT && query_bson_view(v, &d) && bson_iter_init(&it, &d) &&
        bson_iter_find_descendant(&it, path, &child)) {
        *out = *bson_iter_value(&child);
    }
}

static int
sort_cmp(const void *a, const void *b, void *arg)
{
    const sort_ctx_t *sc = arg;
    const bson_value_t *x = a, *y = b;
    const shl_expr_t *s = sc->spec;
    if (s->kind == EXPR_CONST) {
        int c = shl_expr_compare(x, y);
        return query_value_as_double(&s->constant) < 0 ? -c : c;
    }
    for (size_t i = 0; i < s->nargs; i++) {
        bson_value_t fx, fy;
        int c;
        field_of(x, s->names[i], &fx);
        field_of(y, s->names[i], &fy);
        c = shl_expr_compare(&fx, &fy);
        if (c != 0) {
            return query_value_as_double(&s->args[i]->constant) < 0 ? -c : c;
        }
    }
    return 0;
}

EXPR_FN(expr_op_sort_array)
{
    bson_value_t v, *vals = NULL;
    expr_arr_t arr;
    size_t n = 0;
    sort_ctx_t sc = {e->args[1]};
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret != 0) {
        return ret;
    }
    expr_arr_init(&arr);
    if (expr_nullish(&v)) {
        expr_value_null(out);
        goto done;
    }
    if (v.value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, 2942504,
                 "The input argument to $sortArray must be an array, but was of type: %s",
                 tname(&v));
    }
    vals = expr_array_values(&v, &n);
    /* A stable sort keeps equal elements in input order, as std::stable_sort would. */
    for (size_t i = 1; i < n && n <= 64; i++) {
        for (size_t j = i; j > 0 && sort_cmp(&vals[j - 1], &vals[j], &sc) > 0; j--) {
            bson_value_t t = vals[j];
            vals[j] = vals[j - 1];
            vals[j - 1] = t;
        }
    }
    if (n > 64) {
        qsort_r(vals, n, sizeof(bson_value_t), sort_cmp, &sc);
    }
    for (size_t i = 0; i < n; i++) {
        expr_arr_append(&arr, &vals[i]);
    }
    ret = expr_arr_finish(&arr, out, st);
done:
    bson_free(vals);
    expr_arr_cleanup(&arr);
    bson_value_destroy(&v);
    return ret;
}

/* ---- set operators: values compared with the aggregation comparison, strings under the
 * command's collation (MongoDB's set operators use the expression context's collator) ---- */

typedef struct set_cmp {
    const shl_collator_t *coll;
    const bson_value_t *vals; /* cmp_pos_by_value: the values positions index */
} set_cmp_t;

static int
cmp_values(const void *a, const void *b, void *arg)
{
    const set_cmp_t *sc = arg;
    return shl_expr_compare_coll(a, b, sc->coll);
}

/* Sorted, duplicate-free copy of an array's values (borrowed views). */
static bson_value_t *
to_set(const bson_value_t *arr, size_t *n, const shl_collator_t *coll)
{
    size_t k = 0;
    set_cmp_t sc = {coll, NULL};
    bson_value_t *v = expr_array_values(arr, n);
    qsort_r(v, *n, sizeof(bson_value_t), cmp_values, &sc);
    for (size_t i = 0; i < *n; i++) {
        if (k == 0 || shl_expr_compare_coll(&v[k - 1], &v[i], coll) != 0) {
            v[k++] = v[i];
        }
    }
    *n = k;
    return v;
}

static bool
set_has(const bson_value_t *set, size_t n, const bson_value_t *x, const shl_collator_t *coll)
{
    size_t lo = 0, hi = n;
    bool found = false;
    while (lo < hi && !found) {
        size_t mid = lo + (hi - lo) / 2;
        int c = shl_expr_compare_coll(x, &set[mid], coll);
        if (c == 0) {
            found = true;
        } else if (c < 0) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return found;
}

EXPR_FN(expr_op_set_union)
{
    bson_value_t *vals = bson_malloc0((e->nargs + 1) * sizeof(bson_value_t));
    expr_arr_t all, res;
    int ret = 0;
    bool null = false;
    expr_arr_init(&all);
    expr_arr_init(&res);
    SHL_ERR(expr_eval_args(e, ctx, vals, st));
    for (size_t i = 0; i < e->nargs; i++) {
        if (expr_nullish(&vals[i])) {
            null = true;
        } else if (vals[i].value_type != BSON_TYPE_ARRAY) {
            SHL_FAIL(st, 17043,
                     "All operands of $setUnion must be arrays. One argument is of type: %s",
                     tname(&vals[i]));
        }
    }
    if (null) {
        expr_value_null(out);
    } else {
        bson_value_t tmp, *set;
        size_t n;
        for (size_t i = 0; i < e->nargs; i++) {
            size_t m;
            bson_value_t *x = expr_array_values(&vals[i], &m);
            for (size_t k = 0; k < m; k++) {
                expr_arr_append(&all, &x[k]);
            }
            bson_free(x);
        }
        SHL_ERR(expr_arr_finish(&all, &tmp, st));
        set = to_set(&tmp, &n, ctx->collator);
        for (size_t k = 0; k < n; k++) {
            expr_arr_append(&res, &set[k]);
        }
        bson_free(set);
        ret = expr_arr_finish(&res, out, st);
        bson_value_destroy(&tmp);
    }
done:
    for (size_t i = 0; i < e->nargs; i++) {
        bson_value_destroy(&vals[i]);
    }
    bson_free(vals);
    expr_arr_cleanup(&all);
    expr_arr_cleanup(&res);
    return ret;
}

EXPR_FN(expr_op_set_intersection)
{
    bson_value_t *vals = bson_malloc0((e->nargs + 1) * sizeof(bson_value_t));
    bson_value_t *cur = NULL;
    size_t ncur = 0;
    expr_arr_t res;
    int ret = 0;
    bool null = false;
    expr_arr_init(&res);
    SHL_ERR(expr_eval_args(e, ctx, vals, st));
    for (size_t i = 0; i < e->nargs; i++) {
        if (expr_nullish(&vals[i])) {
            null = true;
            break;
        }
        if (vals[i].value_type != BSON_TYPE_ARRAY) {
            SHL_FAIL(st, 17047,
                     "All operands of $setIntersection must be arrays. One argument is of type: "
                     "%s",
                     tname(&vals[i]));
        }
    }
    if (null) {
        expr_value_null(out);
        goto done;
    }
    for (size_t i = 0; i < e->nargs; i++) {
        size_t m, k = 0;
        bson_value_t *s = to_set(&vals[i], &m, ctx->collator);
        if (i == 0) {
            cur = s;
            ncur = m;
            continue;
        }
        for (size_t j = 0; j < ncur; j++) {
            if (set_has(s, m, &cur[j], ctx->collator)) {
                cur[k++] = cur[j];
            }
        }
        ncur = k;
        bson_free(s);
    }
    for (size_t j = 0; j < ncur; j++) {
        expr_arr_append(&res, &cur[j]);
    }
    ret = expr_arr_finish(&res, out, st);
done:
    bson_free(cur);
    for (size_t i = 0; i < e->nargs; i++) {
        bson_value_destroy(&vals[i]);
    }
    bson_free(vals);
    expr_arr_cleanup(&res);
    return ret;
}

static int
cmp_pos_by_value(const void *a, const void *b, void *arg)
{
    const set_cmp_t *sc = arg;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = shl_expr_compare_coll(&sc->vals[x], &sc->vals[y], sc->coll);
    return c != 0 ? c : (x < y ? -1 : (x > y ? 1 : 0));
}

EXPR_FN(expr_op_set_difference)
{
    bson_value_t v[2], *l = NULL, *r = NULL;
    size_t nl = 0, nr = 0;
    expr_arr_t res;
    int ret = expr_eval_args(e, ctx, v, st);
    if (ret != 0) {
        return ret;
    }
    expr_arr_init(&res);
    if (expr_nullish(&v[0]) || expr_nullish(&v[1])) {
        expr_value_null(out);
        goto done;
    }
    if (v[0].value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, 17048,
                 "both operands of $setDifference must be arrays. First argument is of type: %s",
                 tname(&v[0]));
    }
    if (v[1].value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, 17049,
                 "both operands of $setDifference must be arrays. Second argument is of type: %s",
                 tname(&v[1]));
    }
    r = to_set(&v[1], &nr, ctx->collator);
    l = expr_array_values(&v[0], &nl);
    {
        set_cmp_t sc = {ctx->collator, l};
        /* Keep the first occurrence of each value not in the right-hand set, in input order:
         * sort positions by (value, position) to find first occurrences in O(n log n). */
        size_t *pos = bson_malloc((nl + 1) * sizeof(size_t));
        bool *keep = bson_malloc0(nl + 1);
        for (size_t i = 0; i < nl; i++) {
            pos[i] = i;
        }
        qsort_r(pos, nl, sizeof(size_t), cmp_pos_by_value, &sc);
        for (size_t i = 0; i < nl; i++) {
            if ((i == 0 || shl_expr_compare_coll(&l[pos[i - 1]], &l[pos[i]], ctx->collator) != 0) &&
                !set_has(r, nr, &l[pos[i]], ctx->collator)) {
                keep[pos[i]] = true;
            }
        }
        for (size_t i = 0; i < nl; i++) {
            if (keep[i]) {
                expr_arr_append(&res, &l[i]);
            }
        }
        bson_free(pos);
        bson_free(keep);
    }
    ret = expr_arr_finish(&res, out, st);
done:
    bson_free(l);
    bson_free(r);
    expr_arr_cleanup(&res);
    bson_value_destroy(&v[0]);
    bson_value_destroy(&v[1]);
    return ret;
}

EXPR_FN(expr_op_set_equals)
{
    bson_value_t *vals = bson_malloc0((e->nargs + 1) * sizeof(bson_value_t)), *first = NULL;
    size_t nfirst = 0;
    bool eq = true;
    int ret = 0;
    SHL_ERR(expr_eval_args(e, ctx, vals, st));
    for (size_t i = 0; i < e->nargs; i++) {
        if (vals[i].value_type != BSON_TYPE_ARRAY) {
            SHL_FAIL(st, 17044,
                     "All operands of $setEquals must be arrays. One argument is of type: %s",
                     tname(&vals[i]));
        }
    }
    first = to_set(&vals[0], &nfirst, ctx->collator);
    for (size_t i = 1; i < e->nargs && eq; i++) {
        size_t m;
        bson_value_t *s = to_set(&vals[i], &m, ctx->collator);
        eq = m == nfirst;
        for (size_t k = 0; k < m && eq; k++) {
            eq = shl_expr_compare_coll(&s[k], &first[k], ctx->collator) == 0;
        }
        bson_free(s);
    }
    expr_value_bool(out, eq);
done:
    bson_free(first);
    for (size_t i = 0; i < e->nargs; i++) {
        bson_value_destroy(&vals[i]);
    }
    bson_free(vals);
    return ret;
}

EXPR_FN(expr_op_set_is_subset)
{
    bson_value_t v[2], *l = NULL, *r = NULL;
    size_t nl = 0, nr = 0;
    bool sub = true;
    int ret = expr_eval_args(e, ctx, v, st);
    if (ret != 0) {
        return ret;
    }
    if (v[0].value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, 17046,
                 "both operands of $setIsSubset must be arrays. First argument is of type: %s",
                 tname(&v[0]));
    }
    if (v[1].value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, 17042,
                 "both operands of $setIsSubset must be arrays. Second argument is of type: %s",
                 tname(&v[1]));
    }
    r = to_set(&v[1], &nr, ctx->collator);
    l = expr_array_values(&v[0], &nl);
    for (size_t i = 0; i < nl && sub; i++) {
        sub = set_has(r, nr, &l[i], ctx->collator);
    }
    expr_value_bool(out, sub);
done:
    bson_free(l);
    bson_free(r);
    bson_value_destroy(&v[0]);
    bson_value_destroy(&v[1]);
    return ret;
}

static int
any_all(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st,
        bool all)
{
    bson_value_t v, *vals;
    size_t n;
    bool res = all;
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret != 0) {
        return ret;
    }
    if (v.value_type != BSON_TYPE_ARRAY) {
        ret = shl_status_set(st, all ? 17040 : 17041, "%s's argument must be an array, but is %s",
                             all ? "$allElementsTrue" : "$anyElementTrue", tname(&v));
    } else {
        vals = expr_array_values(&v, &n);
        for (size_t i = 0; i < n; i++) {
            if (query_value_truthy(&vals[i]) != all) {
                res = !all;
                break;
            }
        }
        bson_free(vals);
        expr_value_bool(out, res);
    }
    bson_value_destroy(&v);
    return ret;
}

EXPR_FN(expr_op_any_element_true)
{
    return any_all(e, ctx, out, st, false);
}

EXPR_FN(expr_op_all_elements_true)
{
    return any_all(e, ctx, out, st, true);
}

/* ---- objects ---- */

EXPR_FN(expr_op_merge_objects)
{
    bson_value_t *vals = bson_malloc0((e->nargs + 1) * sizeof(bson_value_t));
    objb_t ob = {0};
    int ret = 0;
    SHL_ERR(expr_eval_args(e, ctx, vals, st));
    for (size_t i = 0; i < e->nargs; i++) {
        bson_t d;
        bson_iter_t it;
        if (expr_nullish(&vals[i])) {
            continue;
        }
        if (vals[i].value_type != BSON_TYPE_DOCUMENT) {
            char *js = query_value_to_json(&vals[i]);
            ret = shl_status_set(st, 40400,
                                 "$mergeObjects requires object inputs, but input %s is of type %s",
                                 js, tname(&vals[i]));
            bson_free(js);
            goto done;
        }
        query_bson_view(&vals[i], &d);
        bson_iter_init(&it, &d);
        while (shl_iter_next(&it)) {
            objb_add(&ob, shl_iter_key(&it), shl_iter_key_len(&it), bson_iter_value(&it));
        }
    }
    ret = objb_finish(&ob, "$mergeObjects", out, st);
done:
    bson_free(ob.e);
    for (size_t i = 0; i < e->nargs; i++) {
        bson_value_destroy(&vals[i]);
    }
    bson_free(vals);
    return ret;
}

/* $getField: args [field, input]; the shorthand {$getField: <field>} reads $$CURRENT. */
EXPR_PARSE(expr_parse_get_field)
{
    static const char *const keys[] = {"field", "input"};
    int ret = 0;
    bson_t view;
    bson_iter_t it;
    bool named = false;
    if (arg->value_type == BSON_TYPE_DOCUMENT) {
        query_bson_view(arg, &view);
        named = bson_iter_init(&it, &view) && shl_iter_next(&it) && shl_iter_key(&it)[0] != '$';
    }
    if (!named) {
        e->args = bson_malloc0(2 * sizeof(shl_expr_t *));
        e->nargs = 2;
        SHL_ERR(expr_parse_operand(arg, &e->args[0], st));
    } else {
        SHL_ERR(expr_parse_named(op, arg, keys, 2, e, 3041701, 3041701, st));
        if (e->args[0] == NULL) {
            SHL_FAIL(st, 3041702, "$getField requires 'field' to be specified");
        }
    }
    if (e->args[0]->kind == EXPR_FIELD) {
        SHL_FAIL(st, 5654600,
                 "A field path reference which is not allowed in this context. Did you mean "
                 "{$literal: '$%s'}?",
                 e->args[0]->path.dotted);
    }
    if (e->args[0]->kind != EXPR_CONST) {
        /* MongoDB 7.0 takes only a constant field name (7.2 relaxed this). */
        SHL_FAIL(st, 5654601,
                 "$getField requires 'field' to evaluate to a constant, but got a non-constant "
                 "argument");
    }
    if (e->args[0]->constant.value_type != BSON_TYPE_UTF8) {
        SHL_FAIL(st, 5654602, "$getField requires 'field' to evaluate to type String, but got %s",
                 tname(&e->args[0]->constant));
    }
done:
    return ret;
}

EXPR_FN(expr_op_get_field)
{
    bson_value_t f, in;
    int ret = 0;
    expr_value_missing(&in);
    SHL_ERR(shl_expr_evaluate(e->args[0], ctx, &f, st));
    if (f.value_type != BSON_TYPE_UTF8) {
        SHL_FAIL(st, 3041704, "$getField requires 'field' to evaluate to type String, but got %s",
                 tname(&f));
    }
    if (e->args[1] == NULL) {
        if (ctx->root != NULL) {
            bson_iter_t it;
            if (bson_iter_init_find(&it, ctx->root, f.value.v_utf8.str)) {
                bson_value_copy(bson_iter_value(&it), out);
            }
        }
        goto done;
    }
    SHL_ERR(shl_expr_evaluate(e->args[1], ctx, &in, st));
    if (expr_nullish(&in)) {
        if (in.value_type != BSON_TYPE_EOD) {
            expr_value_null(out);
        }
    } else if (in.value_type == BSON_TYPE_DOCUMENT) {
        bson_t d;
        bson_iter_t it;
        query_bson_view(&in, &d);
        if (bson_iter_init_find(&it, &d, f.value.v_utf8.str)) {
            bson_value_copy(bson_iter_value(&it), out);
        }
    }
done:
    bson_value_destroy(&f);
    bson_value_destroy(&in);
    return ret;
}

/* $setField: args [field, input, value]; $unsetField is $setField with value $$REMOVE
 * (args[2] NULL, flags 1). The field must be a constant string. */
static int
check_set_field(const expr_op_t *op, shl_expr_t *e, shl_status_t *st)
{
    int ret = 0;
    if (e->args[0] == NULL) {
        SHL_FAIL(st, 4161102, "%s requires 'field' to be specified", op->name);
    }
    if (e->args[1] == NULL) {
        SHL_FAIL(st, 4161109, "%s requires 'input' to be specified", op->name);
    }
    if (e->args[0]->kind == EXPR_FIELD) {
        SHL_FAIL(st, 4161108,
                 "A field path reference which is not allowed in this context. Did you mean "
                 "{$literal: '$%s'}?",
                 e->args[0]->path.dotted);
    }
    if (e->args[0]->kind != EXPR_CONST) {
        SHL_FAIL(st, 4161106,
                 "%s requires 'field' to evaluate to a constant, but got a "
                 "non-constant argument",
                 op->name);
    }
    if (e->args[0]->constant.value_type != BSON_TYPE_UTF8) {
        SHL_FAIL(st, 4161107, "%s requires 'field' to evaluate to type String, but got %s",
                 op->name, tname(&e->args[0]->constant));
    }
done:
    return ret;
}

EXPR_PARSE(expr_parse_set_field)
{
    static const char *const keys[] = {"field", "input", "value"};
    int ret = 0;
    SHL_ERR(expr_parse_named(op, arg, keys, 3, e, 4161100, 4161101, st));
    SHL_ERR(check_set_field(op, e, st));
    if (e->args[2] == NULL) {
        SHL_FAIL(st, 4161103, "$setField requires 'value' to be specified");
    }
done:
    return ret;
}

EXPR_PARSE(expr_parse_unset_field)
{
    static const char *const keys[] = {"field", "input"};
    int ret = 0;
    SHL_ERR(expr_parse_named(op, arg, keys, 2, e, 4161100, 4161101, st));
    SHL_ERR(check_set_field(op, e, st));
    e->args = bson_realloc(e->args, 3 * sizeof(shl_expr_t *));
    e->args[2] = NULL;
    e->nargs = 3;
done:
    return ret;
}

EXPR_FN(expr_op_set_field)
{
    bson_value_t in, val;
    const bson_value_t *f = &e->args[0]->constant;
    bson_t doc = BSON_INITIALIZER, d;
    int ret = 0;
    expr_value_missing(&val);
    SHL_ERR(shl_expr_evaluate(e->args[1], ctx, &in, st));
    if (expr_nullish(&in)) {
        expr_value_null(out);
        goto done;
    }
    if (in.value_type != BSON_TYPE_DOCUMENT) {
        SHL_FAIL(st, 4161105, "%s requires 'input' to evaluate to type Object", e->op->name);
    }
    SHL_ERR(expr_eval_opt(e->args[2], ctx, &val, st));
    query_bson_view(&in, &d);
    bson_concat(&doc, &d);
    doc_set(&doc, f->value.v_utf8.str, f->value.v_utf8.len, &val);
    expr_value_take_bson(&doc, BSON_TYPE_DOCUMENT, out);
    bson_init(&doc);
done:
    bson_destroy(&doc);
    bson_value_destroy(&in);
    bson_value_destroy(&val);
    return ret;
}
