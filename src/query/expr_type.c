/*
 * expr_type.c -- type operators: $type, $convert (to / onError / onNull) and its shorthands
 * $toString $toInt $toLong $toDouble $toDecimal $toBool $toObjectId $toDate, $isNumber and
 * $toHashedIndexKey (MongoDB's hashed index key, bson/bson_hash.h with seed 0). Conversions
 * follow MongoDB 7.0's conversion table; failures are ConversionFailure (241), which 'onError'
 * catches.
 */
#include "query/expression_private.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bson/bson_hash.h"

EXPR_FN(expr_op_type)
{
    bson_value_t v;
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret == 0) {
        const char *n = expr_type_name(&v);
        expr_value_utf8(out, n, strlen(n));
        bson_value_destroy(&v);
    }
    return ret;
}

EXPR_FN(expr_op_is_number)
{
    bson_value_t v;
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret == 0) {
        expr_value_bool(out, query_value_is_number(&v));
        bson_value_destroy(&v);
    }
    return ret;
}

EXPR_FN(expr_op_to_hashed_index_key)
{
    bson_value_t v;
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret == 0) {
        if (v.value_type == BSON_TYPE_EOD) {
            expr_value_null(&v);
        }
        expr_value_int64(out, shl_bson_hash_value(&v, SHL_BSON_HASH_DEFAULT_SEED));
        bson_value_destroy(&v);
    }
    return ret;
}

/* ---- conversions ---- */

static const struct {
    const char *name;
    bson_type_t type;
} type_names[] = {
    {"double", BSON_TYPE_DOUBLE},
    {"string", BSON_TYPE_UTF8},
    {"object", BSON_TYPE_DOCUMENT},
    {"array", BSON_TYPE_ARRAY},
    {"binData", BSON_TYPE_BINARY},
    {"undefined", BSON_TYPE_UNDEFINED},
    {"objectId", BSON_TYPE_OID},
    {"bool", BSON_TYPE_BOOL},
    {"date", BSON_TYPE_DATE_TIME},
    {"null", BSON_TYPE_NULL},
    {"regex", BSON_TYPE_REGEX},
    {"dbPointer", BSON_TYPE_DBPOINTER},
    {"javascript", BSON_TYPE_CODE},
    {"symbol", BSON_TYPE_SYMBOL},
    {"javascriptWithScope", BSON_TYPE_CODEWSCOPE},
    {"int", BSON_TYPE_INT32},
    {"timestamp", BSON_TYPE_TIMESTAMP},
    {"long", BSON_TYPE_INT64},
    {"decimal", BSON_TYPE_DECIMAL128},
    {"minKey", BSON_TYPE_MINKEY},
    {"maxKey", BSON_TYPE_MAXKEY},
    {"missing", BSON_TYPE_EOD},
};

static int
target_type(const bson_value_t *to, bson_type_t *t, shl_status_t *st)
{
    if (to->value_type == BSON_TYPE_UTF8) {
        for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]); i++) {
            if (strcmp(type_names[i].name, to->value.v_utf8.str) == 0) {
                *t = type_names[i].type;
                return 0;
            }
        }
        return shl_status_set(st, SHL_CODE_BAD_VALUE, "Unknown type name: %s",
                              to->value.v_utf8.str);
    }
    if (query_value_is_number(to)) {
        int32_t c;
        if (!expr_integral32(to, &c)) {
            return shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                                  "In $convert, numeric 'to' argument is not an integer");
        }
        for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]); i++) {
            if ((int)type_names[i].type == c ||
                (c == -1 && type_names[i].type == BSON_TYPE_MINKEY)) {
                *t = type_names[i].type;
                return 0;
            }
        }
        return shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                              "In $convert, numeric value for 'to' does not correspond to a BSON "
                              "type: %d",
                              c);
    }
    return shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                          "$convert's 'to' argument must be a string or number, but is %s",
                          expr_type_name(to));
}

#define CONV_FAIL(...) shl_status_set(st, SHL_CODE_CONVERSION_FAILURE, __VA_ARGS__)

static void
format_double(double d, char *buf, size_t len)
{
    if (isinf(d)) {
        snprintf(buf, len, "%s", d < 0 ? "-Infinity" : "Infinity");
    } else if (isnan(d)) {
        snprintf(buf, len, "NaN");
    } else if (d == 0 && signbit(d)) {
        snprintf(buf, len, "-0");
    } else {
        /* MongoDB 7.0 streams the double through its StringBuilder, which prints "%g" (six
         * significant digits): $toString of 1/3 is "0.333333". */
        snprintf(buf, len, "%g", d);
    }
}

static int
check_double_int(double d, double lo, double hi_excl, shl_status_t *st)
{
    if (isnan(d)) {
        return CONV_FAIL("Attempt to convert NaN value to integer type in $convert with no "
                         "onError value");
    }
    if (isinf(d)) {
        return CONV_FAIL("Attempt to convert infinity value to integer type in $convert with no "
                         "onError value");
    }
    if (d < lo || d >= hi_excl) {
        return CONV_FAIL("Conversion would overflow target type in $convert with no onError "
                         "value: %g",
                         d);
    }
    return 0;
}

static bool
decimal_to_double(const bson_value_t *v, double *d)
{
    *d = query_value_as_double(v);
    return true;
}

static int
parse_int_string(const char *s, int64_t lo, int64_t hi, int64_t *out, shl_status_t *st)
{
    char *end;
    long long x;
    if (s[0] == '\0' || isspace((unsigned char)s[0])) {
        return CONV_FAIL("Failed to parse number '%s' in $convert with no onError value: No "
                         "digits",
                         s);
    }
    errno = 0;
    x = strtoll(s, &end, 10);
    if (*end != '\0') {
        return CONV_FAIL("Failed to parse number '%s' in $convert with no onError value: Did "
                         "not consume whole string.",
                         s);
    }
    if (errno == ERANGE || x < lo || x > hi) {
        return CONV_FAIL("Failed to parse number '%s' in $convert with no onError value: "
                         "Overflow",
                         s);
    }
    *out = x;
    return 0;
}

static int
parse_double_string(const char *s, double *out, shl_status_t *st)
{
    char *end;
    if (strncmp(s, "0x", 2) == 0 || strncmp(s, "0X", 2) == 0 || strncmp(s, "-0x", 3) == 0) {
        return CONV_FAIL("Illegal hexadecimal input in $convert with no onError value: %s", s);
    }
    if (s[0] == '\0' || isspace((unsigned char)s[0])) {
        return CONV_FAIL("Failed to parse number '%s' in $convert with no onError value: No "
                         "digits",
                         s);
    }
    errno = 0;
    *out = strtod(s, &end);
    if (*end != '\0') {
        return CONV_FAIL("Failed to parse number '%s' in $convert with no onError value: Did "
                         "not consume whole string.",
                         s);
    }
    if (errno == ERANGE && isinf(*out)) {
        return CONV_FAIL("Failed to parse number '%s' in $convert with no onError value: Out of "
                         "range",
                         s);
    }
    return 0;
}

/* Convert a non-nullish value to 't'. */
static int
convert(const bson_value_t *in, bson_type_t t, bson_value_t *out, shl_status_t *st)
{
    bson_type_t it = in->value_type;
    char buf[64];
    double d = 0;
    int64_t x;
    int ret;

    if (it == t && t != BSON_TYPE_EOD) {
        expr_value_copy(in, out);
        return 0;
    }
    switch (t) {
    case BSON_TYPE_BOOL:
        switch (it) {
        case BSON_TYPE_INT32:
        case BSON_TYPE_INT64:
        case BSON_TYPE_DOUBLE:
        case BSON_TYPE_DECIMAL128:
            expr_value_bool(out, query_value_truthy(in));
            return 0;
        case BSON_TYPE_UNDEFINED:
        case BSON_TYPE_EOD:
        case BSON_TYPE_NULL:
            break;
        default:
            expr_value_bool(out, true);
            return 0;
        }
        break;
    case BSON_TYPE_DOUBLE:
        switch (it) {
        case BSON_TYPE_INT32:
        case BSON_TYPE_INT64:
            expr_value_double(out, query_value_as_double(in));
            return 0;
        case BSON_TYPE_DECIMAL128:
            decimal_to_double(in, &d);
            if (isinf(d) && !isinf(query_value_as_double(in))) {
                return CONV_FAIL("Conversion would overflow target type in $convert with no "
                                 "onError value");
            }
            expr_value_double(out, d);
            return 0;
        case BSON_TYPE_BOOL:
            expr_value_double(out, in->value.v_bool ? 1.0 : 0.0);
            return 0;
        case BSON_TYPE_DATE_TIME:
            expr_value_double(out, (double)in->value.v_datetime);
            return 0;
        case BSON_TYPE_UTF8:
            if ((ret = parse_double_string(in->value.v_utf8.str, &d, st)) != 0) {
                return ret;
            }
            expr_value_double(out, d);
            return 0;
        default:
            break;
        }
        break;
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64: {
        bool i32 = t == BSON_TYPE_INT32;
        double lo = i32 ? -2147483648.0 : -9223372036854775808.0,
               hi = i32 ? 2147483648.0 : 9223372036854775808.0;
        switch (it) {
        case BSON_TYPE_INT32:
            expr_value_int64(out, in->value.v_int32);
            return 0;
        case BSON_TYPE_INT64:
            if (i32 && (in->value.v_int64 < INT32_MIN || in->value.v_int64 > INT32_MAX)) {
                return CONV_FAIL("Conversion would overflow target type in $convert with no "
                                 "onError value: ");
            }
            x = in->value.v_int64;
            break;
        case BSON_TYPE_DOUBLE:
        case BSON_TYPE_DECIMAL128:
            d = query_value_as_double(in);
            if ((ret = check_double_int(d, lo, hi, st)) != 0) {
                return ret;
            }
            x = (int64_t)d;
            break;
        case BSON_TYPE_BOOL:
            x = in->value.v_bool;
            break;
        case BSON_TYPE_DATE_TIME:
            if (i32) {
                goto unsupported;
            }
            x = in->value.v_datetime;
            break;
        case BSON_TYPE_UTF8:
            if ((ret = parse_int_string(in->value.v_utf8.str, i32 ? INT32_MIN : INT64_MIN,
                                        i32 ? INT32_MAX : INT64_MAX, &x, st)) != 0) {
                return ret;
            }
            break;
        default:
            goto unsupported;
        }
        if (i32) {
            expr_value_int32(out, (int32_t)x);
        } else {
            expr_value_int64(out, x);
        }
        return 0;
    }
    case BSON_TYPE_DECIMAL128:
        switch (it) {
        case BSON_TYPE_INT32:
        case BSON_TYPE_INT64:
            snprintf(buf, sizeof(buf), "%lld", (long long)expr_as_int64(in));
            break;
        case BSON_TYPE_DOUBLE:
            expr_value_decimal_from_double(out, in->value.v_double);
            return 0;
        case BSON_TYPE_BOOL:
            snprintf(buf, sizeof(buf), "%d", in->value.v_bool ? 1 : 0);
            break;
        case BSON_TYPE_DATE_TIME:
            snprintf(buf, sizeof(buf), "%lld", (long long)in->value.v_datetime);
            break;
        case BSON_TYPE_UTF8:
            memset(out, 0, sizeof(*out));
            out->value_type = BSON_TYPE_DECIMAL128;
            if (strncmp(in->value.v_utf8.str, "0x", 2) == 0 ||
                !bson_decimal128_from_string(in->value.v_utf8.str, &out->value.v_decimal128)) {
                expr_value_missing(out);
                return CONV_FAIL("Failed to parse number '%s' in $convert with no onError value",
                                 in->value.v_utf8.str);
            }
            return 0;
        default:
            goto unsupported;
        }
        memset(out, 0, sizeof(*out));
        out->value_type = BSON_TYPE_DECIMAL128;
        bson_decimal128_from_string(buf, &out->value.v_decimal128);
        return 0;
    case BSON_TYPE_UTF8:
        switch (it) {
        case BSON_TYPE_DOUBLE:
            format_double(in->value.v_double, buf, sizeof(buf));
            break;
        case BSON_TYPE_INT32:
        case BSON_TYPE_INT64:
            snprintf(buf, sizeof(buf), "%lld", (long long)expr_as_int64(in));
            break;
        case BSON_TYPE_DECIMAL128:
            bson_decimal128_to_string(&in->value.v_decimal128, buf);
            break;
        case BSON_TYPE_BOOL:
            snprintf(buf, sizeof(buf), "%s", in->value.v_bool ? "true" : "false");
            break;
        case BSON_TYPE_OID:
            bson_oid_to_string(&in->value.v_oid, buf);
            break;
        case BSON_TYPE_DATE_TIME:
            expr_date_iso_string(in->value.v_datetime, buf, sizeof(buf));
            break;
        default:
            goto unsupported;
        }
        expr_value_utf8(out, buf, strlen(buf));
        return 0;
    case BSON_TYPE_OID:
        if (it == BSON_TYPE_UTF8) {
            if (in->value.v_utf8.len != 24 || !bson_oid_is_valid(in->value.v_utf8.str, 24)) {
                return CONV_FAIL("Failed to parse objectId '%s' in $convert with no onError "
                                 "value: Invalid string length for parsing to OID, expected 24 "
                                 "but found %u",
                                 in->value.v_utf8.str, in->value.v_utf8.len);
            }
            memset(out, 0, sizeof(*out));
            out->value_type = BSON_TYPE_OID;
            bson_oid_init_from_string(&out->value.v_oid, in->value.v_utf8.str);
            return 0;
        }
        break;
    case BSON_TYPE_DATE_TIME:
        switch (it) {
        case BSON_TYPE_INT64:
            expr_value_date(out, in->value.v_int64);
            return 0;
        case BSON_TYPE_DOUBLE:
        case BSON_TYPE_DECIMAL128:
            d = query_value_as_double(in);
            if ((ret = check_double_int(d, -9223372036854775808.0, 9223372036854775808.0, st)) !=
                0) {
                return ret;
            }
            expr_value_date(out, (int64_t)d);
            return 0;
        case BSON_TYPE_OID:
        case BSON_TYPE_TIMESTAMP:
            expr_value_as_date(in, &x);
            expr_value_date(out, x);
            return 0;
        case BSON_TYPE_UTF8:
            if (!expr_date_parse_iso(in->value.v_utf8.str, &x)) {
                return CONV_FAIL("Error parsing date string '%s'", in->value.v_utf8.str);
            }
            expr_value_date(out, x);
            return 0;
        default:
            break;
        }
        break;
    default:
        break;
    }
unsupported:
    return CONV_FAIL("Unsupported conversion from %s to %s in $convert with no onError value",
                     expr_type_name(in), t == BSON_TYPE_EOD ? "missing" : shl_bson_type_name(t));
}

/* $convert: args [input, to, onError, onNull]. */
EXPR_PARSE(expr_parse_convert)
{
    static const char *const keys[] = {"input", "to", "onError", "onNull"};
    int ret = 0;
    if (arg->value_type != BSON_TYPE_DOCUMENT) {
        e->args = bson_malloc0(4 * sizeof(shl_expr_t *));
        e->nargs = 4;
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "$convert expects an object of named arguments but found: %s",
                 shl_bson_type_name(arg->value_type));
    }
    SHL_ERR(expr_parse_named(op, arg, keys, 4, e, SHL_CODE_FAILED_TO_PARSE,
                             SHL_CODE_FAILED_TO_PARSE, st));
    if (e->args[0] == NULL) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Missing 'input' parameter to $convert");
    }
    if (e->args[1] == NULL) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Missing 'to' parameter to $convert");
    }
done:
    return ret;
}

EXPR_FN(expr_op_convert)
{
    bson_value_t in, to;
    bson_type_t t = BSON_TYPE_EOD;
    int ret = 0;
    expr_value_missing(&in);
    expr_value_missing(&to);
    SHL_ERR(shl_expr_evaluate(e->args[1], ctx, &to, st));
    SHL_ERR(shl_expr_evaluate(e->args[0], ctx, &in, st));
    if (!expr_nullish(&to)) {
        SHL_ERR(target_type(&to, &t, st));
    }
    if (expr_nullish(&in)) {
        if (e->args[3] != NULL) {
            ret = shl_expr_evaluate(e->args[3], ctx, out, st);
        } else {
            expr_value_null(out);
        }
        goto done;
    }
    if (expr_nullish(&to)) {
        expr_value_null(out);
        goto done;
    }
    ret = convert(&in, t, out, st);
    if (ret == SHL_CODE_CONVERSION_FAILURE && e->args[2] != NULL) {
        ret = shl_expr_evaluate(e->args[2], ctx, out, st);
    }
done:
    bson_value_destroy(&in);
    bson_value_destroy(&to);
    return ret;
}

static int
shorthand(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st,
          bson_type_t t)
{
    bson_value_t in;
    int ret = shl_expr_evaluate(e->args[0], ctx, &in, st);
    if (ret != 0) {
        return ret;
    }
    if (expr_nullish(&in)) {
        expr_value_null(out);
    } else {
        ret = convert(&in, t, out, st);
    }
    bson_value_destroy(&in);
    return ret;
}

EXPR_FN(expr_op_to_string)
{
    return shorthand(e, ctx, out, st, BSON_TYPE_UTF8);
}

EXPR_FN(expr_op_to_int)
{
    return shorthand(e, ctx, out, st, BSON_TYPE_INT32);
}

EXPR_FN(expr_op_to_long)
{
    return shorthand(e, ctx, out, st, BSON_TYPE_INT64);
}

EXPR_FN(expr_op_to_double)
{
    return shorthand(e, ctx, out, st, BSON_TYPE_DOUBLE);
}

EXPR_FN(expr_op_to_decimal)
{
    return shorthand(e, ctx, out, st, BSON_TYPE_DECIMAL128);
}

EXPR_FN(expr_op_to_bool)
{
    return shorthand(e, ctx, out, st, BSON_TYPE_BOOL);
}

EXPR_FN(expr_op_to_object_id)
{
    return shorthand(e, ctx, out, st, BSON_TYPE_OID);
}

EXPR_FN(expr_op_to_date)
{
    return shorthand(e, ctx, out, st, BSON_TYPE_DATE_TIME);
}
