/*
 * expr_arith.c -- arithmetic aggregation operators ($subtract $divide $mod $abs $ceil $floor
 * $round $trunc $pow $sqrt $exp $ln $log $log10 $rand) with MongoDB 7.0's result types and
 * error codes. Decimal128 operands are computed in double precision and returned as decimals
 * (an approximation of MongoDB's exact decimal arithmetic).
 */
#include "query/expression_private.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool
is_decimal(const bson_value_t *v)
{
    return v->value_type == BSON_TYPE_DECIMAL128;
}

/* Result of a double computation in the widest input type: decimal if any was one. */
static void
put_double(bson_value_t *out, double d, bool dec)
{
    if (dec) {
        expr_value_decimal_from_double(out, d);
    } else {
        expr_value_double(out, d);
    }
}

/* Evaluate two arguments. */
static int
eval2(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t v[2], shl_status_t *st)
{
    return expr_eval_args(e, ctx, v, st);
}

static void
destroy2(bson_value_t v[2])
{
    bson_value_destroy(&v[0]);
    bson_value_destroy(&v[1]);
}

EXPR_FN(expr_op_subtract)
{
    bson_value_t v[2];
    int ret = eval2(e, ctx, v, st);
    bson_type_t lt, rt;
    if (ret != 0) {
        return ret;
    }
    lt = v[0].value_type;
    rt = v[1].value_type;
    if (query_value_is_number(&v[0]) && query_value_is_number(&v[1])) {
        if (is_decimal(&v[0]) || is_decimal(&v[1]) || lt == BSON_TYPE_DOUBLE ||
            rt == BSON_TYPE_DOUBLE) {
            put_double(out, query_value_as_double(&v[0]) - query_value_as_double(&v[1]),
                       is_decimal(&v[0]) || is_decimal(&v[1]));
        } else {
            int64_t a = expr_as_int64(&v[0]), b = expr_as_int64(&v[1]), r;
            if (__builtin_sub_overflow(a, b, &r)) {
                expr_value_double(out, (double)a - (double)b);
            } else if (lt == BSON_TYPE_INT64 || rt == BSON_TYPE_INT64) {
                expr_value_int64(out, r);
            } else {
                expr_value_int_or_long(out, r);
            }
        }
    } else if (expr_nullish(&v[0]) || expr_nullish(&v[1])) {
        expr_value_null(out);
    } else if (lt == BSON_TYPE_DATE_TIME) {
        if (rt == BSON_TYPE_DATE_TIME) {
            int64_t r;
            if (__builtin_sub_overflow(v[0].value.v_datetime, v[1].value.v_datetime, &r)) {
                ret = shl_status_set(st, SHL_CODE_OVERFLOW, "date overflow in $subtract");
            } else {
                expr_value_int64(out, r);
            }
        } else if (query_value_is_number(&v[1])) {
            double d = query_value_as_double(&v[1]);
            int64_t r;
            if (rt != BSON_TYPE_INT32 && rt != BSON_TYPE_INT64 && (isnan(d) || fabs(d) >= 9.2e18)) {
                ret = shl_status_set(st, SHL_CODE_OVERFLOW, "date overflow in $subtract");
            } else if (__builtin_sub_overflow(v[0].value.v_datetime,
                                              rt == BSON_TYPE_INT32 || rt == BSON_TYPE_INT64
                                                  ? expr_as_int64(&v[1])
                                                  : (int64_t)llround(d),
                                              &r)) {
                ret = shl_status_set(st, SHL_CODE_OVERFLOW, "date overflow in $subtract");
            } else {
                expr_value_date(out, r);
            }
        } else {
            ret = shl_status_set(st, 16613, "can't $subtract %s from Date", shl_bson_type_name(rt));
        }
    } else {
        ret = shl_status_set(st, 16556, "can't $subtract %s from %s", shl_bson_type_name(rt),
                             shl_bson_type_name(lt));
    }
    destroy2(v);
    return ret;
}

EXPR_FN(expr_op_divide)
{
    bson_value_t v[2];
    int ret = eval2(e, ctx, v, st);
    if (ret != 0) {
        return ret;
    }
    if (query_value_is_number(&v[0]) && query_value_is_number(&v[1])) {
        double d = query_value_as_double(&v[1]);
        if (d == 0.0) {
            ret = shl_status_set(st, 16608, "can't $divide by zero");
        } else {
            put_double(out, query_value_as_double(&v[0]) / d,
                       is_decimal(&v[0]) || is_decimal(&v[1]));
        }
    } else if (expr_nullish(&v[0]) || expr_nullish(&v[1])) {
        expr_value_null(out);
    } else {
        ret = shl_status_set(st, 16609, "$divide only supports numeric types, not %s and %s",
                             expr_type_name(&v[0]), expr_type_name(&v[1]));
    }
    destroy2(v);
    return ret;
}

EXPR_FN(expr_op_mod)
{
    bson_value_t v[2];
    int ret = eval2(e, ctx, v, st);
    bson_type_t lt, rt;
    if (ret != 0) {
        return ret;
    }
    lt = v[0].value_type;
    rt = v[1].value_type;
    if (query_value_is_number(&v[0]) && query_value_is_number(&v[1])) {
        double r = query_value_as_double(&v[1]);
        int64_t ri;
        if (r == 0) {
            ret = shl_status_set(st, 16610, "can't $mod by zero");
        } else if (is_decimal(&v[0]) || is_decimal(&v[1])) {
            expr_value_decimal_from_double(out, fmod(query_value_as_double(&v[0]), r));
        } else if (lt == BSON_TYPE_DOUBLE ||
                   (rt == BSON_TYPE_DOUBLE && !expr_integral64(&v[1], &ri))) {
            expr_value_double(out, fmod(query_value_as_double(&v[0]), r));
        } else {
            int64_t a = expr_as_int64(&v[0]), b = expr_as_int64(&v[1]);
            int64_t m = (b == -1) ? 0 : a % b;
            if (lt == BSON_TYPE_INT64 || rt == BSON_TYPE_INT64) {
                expr_value_int64(out, m);
            } else {
                expr_value_int32(out, (int32_t)m);
            }
        }
    } else if (expr_nullish(&v[0]) || expr_nullish(&v[1])) {
        expr_value_null(out);
    } else {
        ret = shl_status_set(st, 16611, "$mod only supports numeric types, not %s and %s",
                             expr_type_name(&v[0]), expr_type_name(&v[1]));
    }
    destroy2(v);
    return ret;
}

/* Single numeric argument operators: null/missing give null, non-numbers give 28765. */
typedef enum { U_ABS, U_CEIL, U_FLOOR, U_SQRT, U_EXP, U_LN, U_LOG10 } unary_t;

static int
unary(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st,
      unary_t kind, const char *name)
{
    bson_value_t v;
    double d;
    bool dec;
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret != 0) {
        return ret;
    }
    if (expr_nullish(&v)) {
        expr_value_null(out);
        goto done;
    }
    if (!query_value_is_number(&v)) {
        SHL_FAIL(st, 28765, "%s only supports numeric types, not %s", name, expr_type_name(&v));
    }
    d = query_value_as_double(&v);
    dec = is_decimal(&v);
    switch (kind) {
    case U_ABS:
        if (v.value_type == BSON_TYPE_INT32 || v.value_type == BSON_TYPE_INT64) {
            int64_t x = expr_as_int64(&v);
            if (x == INT64_MIN) {
                SHL_FAIL(st, 28680, "can't take $abs of long long min");
            }
            if (v.value_type == BSON_TYPE_INT64) {
                expr_value_int64(out, llabs(x));
            } else {
                expr_value_int_or_long(out, llabs(x));
            }
        } else {
            put_double(out, fabs(d), dec);
        }
        break;
    case U_CEIL:
    case U_FLOOR:
        if (v.value_type == BSON_TYPE_INT32 || v.value_type == BSON_TYPE_INT64) {
            expr_value_copy(&v, out);
        } else {
            put_double(out, kind == U_CEIL ? ceil(d) : floor(d), dec);
        }
        break;
    case U_SQRT:
        if (d < 0) {
            SHL_FAIL(st, 28714, "$sqrt's argument must be greater than or equal to 0");
        }
        put_double(out, sqrt(d), dec);
        break;
    case U_EXP:
        put_double(out, exp(d), dec);
        break;
    case U_LN:
        if (!(d > 0 || isnan(d))) {
            SHL_FAIL(st, 28766, "$ln's argument must be a positive number, but is %g", d);
        }
        put_double(out, log(d), dec);
        break;
    case U_LOG10:
        if (!(d > 0 || isnan(d))) {
            SHL_FAIL(st, 28761, "$log10's argument must be a positive number, but is %g", d);
        }
        put_double(out, log10(d), dec);
        break;
    }
done:
    bson_value_destroy(&v);
    return ret;
}

EXPR_FN(expr_op_abs)
{
    return unary(e, ctx, out, st, U_ABS, "$abs");
}

EXPR_FN(expr_op_ceil)
{
    return unary(e, ctx, out, st, U_CEIL, "$ceil");
}

EXPR_FN(expr_op_floor)
{
    return unary(e, ctx, out, st, U_FLOOR, "$floor");
}

EXPR_FN(expr_op_sqrt)
{
    return unary(e, ctx, out, st, U_SQRT, "$sqrt");
}

EXPR_FN(expr_op_exp)
{
    return unary(e, ctx, out, st, U_EXP, "$exp");
}

EXPR_FN(expr_op_ln)
{
    return unary(e, ctx, out, st, U_LN, "$ln");
}

EXPR_FN(expr_op_log10)
{
    return unary(e, ctx, out, st, U_LOG10, "$log10");
}

EXPR_FN(expr_op_log)
{
    bson_value_t v[2];
    double a, b;
    int ret = eval2(e, ctx, v, st);
    if (ret != 0) {
        return ret;
    }
    if (expr_nullish(&v[0]) || expr_nullish(&v[1])) {
        expr_value_null(out);
        goto done;
    }
    if (!query_value_is_number(&v[0])) {
        SHL_FAIL(st, 28756, "$log's argument must be numeric, not %s", expr_type_name(&v[0]));
    }
    if (!query_value_is_number(&v[1])) {
        SHL_FAIL(st, 28757, "$log's base must be numeric, not %s", expr_type_name(&v[1]));
    }
    a = query_value_as_double(&v[0]);
    b = query_value_as_double(&v[1]);
    if (!(a > 0 || isnan(a))) {
        SHL_FAIL(st, 28758, "$log's argument must be a positive number, but is %g", a);
    }
    if (!((b > 0 && b != 1) || isnan(b))) {
        SHL_FAIL(st, 28759, "$log's base must be a positive number not equal to 1, but is %g", b);
    }
    put_double(out, log(a) / log(b), is_decimal(&v[0]) || is_decimal(&v[1]));
done:
    destroy2(v);
    return ret;
}

EXPR_FN(expr_op_pow)
{
    bson_value_t v[2];
    double b, x;
    int ret = eval2(e, ctx, v, st);
    bson_type_t bt, xt;
    if (ret != 0) {
        return ret;
    }
    if (expr_nullish(&v[0]) || expr_nullish(&v[1])) {
        expr_value_null(out);
        goto done;
    }
    if (!query_value_is_number(&v[0])) {
        SHL_FAIL(st, 28762, "$pow's base must be numeric, not %s", expr_type_name(&v[0]));
    }
    if (!query_value_is_number(&v[1])) {
        SHL_FAIL(st, 28763, "$pow's exponent must be numeric, not %s", expr_type_name(&v[1]));
    }
    bt = v[0].value_type;
    xt = v[1].value_type;
    b = query_value_as_double(&v[0]);
    x = query_value_as_double(&v[1]);
    if (b == 0 && x < 0) {
        SHL_FAIL(st, 28764, "$pow cannot take a base of 0 and a negative exponent");
    }
    if (is_decimal(&v[0]) || is_decimal(&v[1]) || bt == BSON_TYPE_DOUBLE ||
        xt == BSON_TYPE_DOUBLE) {
        put_double(out, pow(b, x), is_decimal(&v[0]) || is_decimal(&v[1]));
    } else {
        int64_t base = expr_as_int64(&v[0]), ex = expr_as_int64(&v[1]), r = 1;
        bool lng = bt == BSON_TYPE_INT64 || xt == BSON_TYPE_INT64, ovf = false;
        if (base == 0 || base == 1) {
            r = (base == 0 && ex != 0) ? 0 : 1;
        } else if (base == -1) {
            r = (ex % 2 == 0) ? 1 : -1;
        } else if (ex < 0 || ex > 63) {
            ovf = true;
        } else {
            for (int64_t i = 0; i < ex && !ovf; i++) {
                ovf = __builtin_mul_overflow(r, base, &r);
            }
        }
        if (ovf) {
            expr_value_double(out, pow((double)base, (double)ex));
        } else if (lng) {
            expr_value_int64(out, r);
        } else {
            expr_value_int_or_long(out, r);
        }
    }
done:
    destroy2(v);
    return ret;
}

/* $round / $trunc with an optional place in [-20, 100]. */
static int
round_trunc(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st,
            bool is_round)
{
    const char *name = is_round ? "$round" : "$trunc";
    bson_value_t v, p;
    int64_t place = 0;
    double d, scale, r;
    int ret = 0;

    expr_value_missing(&v);
    expr_value_missing(&p);
    SHL_ERR(shl_expr_evaluate(e->args[0], ctx, &v, st));
    if (expr_nullish(&v)) {
        expr_value_null(out);
        goto done;
    }
    if (!query_value_is_number(&v)) {
        SHL_FAIL(st, 51081, "%s only supports numeric types, not %s", name, expr_type_name(&v));
    }
    if (e->nargs > 1) {
        SHL_ERR(shl_expr_evaluate(e->args[1], ctx, &p, st));
        if (expr_nullish(&p)) {
            expr_value_null(out);
            goto done;
        }
        if (!expr_integral64(&p, &place)) {
            SHL_FAIL(st, 51082, "precision argument to  %s must be a integral value", name);
        }
        if (place < -20 || place > 100) {
            SHL_FAIL(st, 51083,
                     "cannot apply %s with precision value %lld value must be in [-20, 100]", name,
                     (long long)place);
        }
    }
    if ((v.value_type == BSON_TYPE_INT32 || v.value_type == BSON_TYPE_INT64)) {
        int64_t x = expr_as_int64(&v), m = 1, q, rem;
        if (place >= 0) {
            expr_value_copy(&v, out);
            goto done;
        }
        for (int64_t i = 0; i < -place && m <= INT64_MAX / 10; i++) {
            m *= 10;
        }
        if (-place > 18) {
            x = 0; /* every int64 rounds or truncates to 0 at these places */
            m = 1;
        }
        q = x / m;
        rem = x % m;
        if (is_round && m > 1) {
            int64_t twice = rem < 0 ? -rem * 2 : rem * 2;
            if (twice > m || (twice == m && (q % 2 != 0))) {
                q += rem < 0 ? -1 : 1;
            }
        }
        if (__builtin_mul_overflow(q, m, &x)) {
            SHL_FAIL(st, 51080, "invalid conversion from Decimal128 result in %s", name);
        }
        if (v.value_type == BSON_TYPE_INT64 || x > INT32_MAX || x < INT32_MIN) {
            expr_value_int64(out, x);
        } else {
            expr_value_int32(out, (int32_t)x);
        }
        goto done;
    }
    d = query_value_as_double(&v);
    if (isinf(d) || isnan(d)) {
        expr_value_copy(&v, out);
        goto done;
    }
    scale = pow(10.0, (double)place);
    if (is_round) {
        double y = d * scale;
        r = nearbyint(y); /* ties to even under the default rounding mode */
        r /= scale;
    } else {
        r = trunc(d * scale) / scale;
    }
    if (place > 15) {
        r = d; /* beyond double precision */
    }
    put_double(out, r, is_decimal(&v));
done:
    bson_value_destroy(&v);
    bson_value_destroy(&p);
    return ret;
}

EXPR_FN(expr_op_round)
{
    return round_trunc(e, ctx, out, st, true);
}

EXPR_FN(expr_op_trunc)
{
    return round_trunc(e, ctx, out, st, false);
}

EXPR_FN(expr_op_rand)
{
    uint64_t r;
    (void)e;
    (void)ctx;
    (void)st;
    r = ((uint64_t)(uint32_t)random() << 21) ^ (uint64_t)(uint32_t)random();
    expr_value_double(out, (double)(r & ((1ULL << 53) - 1)) / (double)(1ULL << 53));
    return 0;
}

/* $sum $avg $max $min as expressions: one array argument is reduced element-wise, several
 * arguments are reduced directly; $sum/$avg skip non-numbers, $max/$min skip null/missing. */
typedef enum { R_SUM, R_AVG, R_MAX, R_MIN } reduce_t;

static int
reduce_values(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st,
              reduce_t kind)
{
    bson_value_t *args = bson_malloc0((e->nargs + 1) * sizeof(bson_value_t)), *vals = NULL, best;
    size_t n = 0, count = 0;
    bool single_array, is_long = false, is_double = false, is_dec = false, ovf = false;
    int64_t lsum = 0;
    double dsum = 0;
    int ret = 0;

    expr_value_missing(&best);
    SHL_ERR(expr_eval_args(e, ctx, args, st));
    single_array = e->nargs == 1 && args[0].value_type == BSON_TYPE_ARRAY;
    /* (with no arguments: $sum is 0, the others null) */
    if (single_array) {
        vals = expr_array_values(&args[0], &n);
    } else {
        vals = bson_malloc0((e->nargs + 1) * sizeof(bson_value_t));
        for (size_t i = 0; i < e->nargs; i++) {
            vals[i] = args[i];
        }
        n = e->nargs;
    }
    for (size_t i = 0; i < n; i++) {
        const bson_value_t *v = &vals[i];
        if (kind == R_MAX || kind == R_MIN) {
            int c;
            if (expr_nullish(v)) {
                continue;
            }
            c = best.value_type == BSON_TYPE_EOD ? 0 : shl_expr_compare(v, &best);
            if (best.value_type == BSON_TYPE_EOD || (kind == R_MAX && c > 0) ||
                (kind == R_MIN && c < 0)) {
                best = *v;
            }
            continue;
        }
        if (!query_value_is_number(v)) {
            continue;
        }
        count++;
        dsum += query_value_as_double(v);
        if (v->value_type == BSON_TYPE_DOUBLE) {
            is_double = true;
        } else if (v->value_type == BSON_TYPE_DECIMAL128) {
            is_dec = true;
        } else {
            is_long = is_long || v->value_type == BSON_TYPE_INT64;
            ovf = ovf || __builtin_add_overflow(lsum, expr_as_int64(v), &lsum);
        }
    }
    if (kind == R_MAX || kind == R_MIN) {
        if (best.value_type == BSON_TYPE_EOD) {
            expr_value_null(out);
        } else {
            expr_value_copy(&best, out);
        }
    } else if (kind == R_AVG) {
        if (count == 0) {
            expr_value_null(out);
        } else {
            put_double(out, dsum / (double)count, is_dec);
        }
    } else if (is_dec) {
        expr_value_decimal_from_double(out, dsum);
    } else if (is_double || ovf) {
        expr_value_double(out, dsum);
    } else if (is_long) {
        expr_value_int64(out, lsum);
    } else {
        expr_value_int_or_long(out, lsum);
    }
done:
    for (size_t i = 0; i < e->nargs; i++) {
        bson_value_destroy(&args[i]);
    }
    bson_free(args);
    bson_free(vals);
    return ret;
}

EXPR_FN(expr_op_sum)
{
    return reduce_values(e, ctx, out, st, R_SUM);
}

EXPR_FN(expr_op_avg)
{
    return reduce_values(e, ctx, out, st, R_AVG);
}

EXPR_FN(expr_op_max)
{
    return reduce_values(e, ctx, out, st, R_MAX);
}

EXPR_FN(expr_op_min)
{
    return reduce_values(e, ctx, out, st, R_MIN);
}
