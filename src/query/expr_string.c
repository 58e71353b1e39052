/*
 * expr_string.c -- string aggregation operators: $substr/$substrBytes/$substrCP, $toLower,
 * $toUpper, $split, $strLenCP/$strLenBytes, $indexOfCP/$indexOfBytes, $trim/$ltrim/$rtrim,
 * $regexMatch/$regexFind/$regexFindAll (PCRE2), $replaceOne/$replaceAll, $strcasecmp.
 * Semantics and error codes follow MongoDB 7.0's expression.cpp.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "query/expression_private.h"

#include <ctype.h>
#include <pcre2.h>
#include <stdio.h>
#include <string.h>

static bool
is_cont(unsigned char c)
{
    return (c & 0xc0) == 0x80;
}

static size_t
cp_len(unsigned char c)
{
    if (c < 0x80) {
        return 1;
    }
    if ((c & 0xe0) == 0xc0) {
        return 2;
    }
    if ((c & 0xf0) == 0xe0) {
        return 3;
    }
    if ((c & 0xf8) == 0xf0) {
        return 4;
    }
    return 1; /* continuation or invalid: treated as one byte, checked by callers */
}

/* Value::coerceToString: strings, numbers, dates, timestamps, symbols and code convert;
 * null/undefined/missing give "". Other types: 16007. Result is owned (bson_free). */
static int
coerce_to_string(const bson_value_t *v, char **out, size_t *len, shl_status_t *st)
{
    char buf[64];
    *out = NULL;
    *len = 0;
    switch (v->value_type) {
    case BSON_TYPE_UTF8:
        *out = bson_malloc(v->value.v_utf8.len + 1);
        memcpy(*out, v->value.v_utf8.str, v->value.v_utf8.len + 1);
        *len = v->value.v_utf8.len;
        return 0;
    case BSON_TYPE_SYMBOL:
        *out = bson_strndup(v->value.v_symbol.symbol, v->value.v_symbol.len);
        *len = strlen(*out);
        return 0;
    case BSON_TYPE_CODE:
        *out = bson_strndup(v->value.v_code.code, v->value.v_code.code_len);
        *len = strlen(*out);
        return 0;
    case BSON_TYPE_INT32:
        snprintf(buf, sizeof(buf), "%d", v->value.v_int32);
        break;
    case BSON_TYPE_INT64:
        snprintf(buf, sizeof(buf), "%lld", (long long)v->value.v_int64);
        break;
    case BSON_TYPE_DOUBLE:
        snprintf(buf, sizeof(buf), "%g", v->value.v_double);
        break;
    case BSON_TYPE_DECIMAL128:
        bson_decimal128_to_string(&v->value.v_decimal128, buf);
        break;
    case BSON_TYPE_DATE_TIME:
        expr_date_iso_string(v->value.v_datetime, buf, sizeof(buf));
        break;
    case BSON_TYPE_TIMESTAMP:
        snprintf(buf, sizeof(buf), "Timestamp(%u, %u)", v->value.v_timestamp.timestamp,
                 v->value.v_timestamp.increment);
        break;
    case BSON_TYPE_EOD:
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED:
        buf[0] = '\0';
        break;
    default:
        return shl_status_set(st, QC_COERCE_STRING, "can't convert from BSON type %s to String",
                              shl_bson_type_name(v->value_type));
    }
    *out = bson_strdup(buf);
    *len = strlen(buf);
    return 0;
}

static void
put_str(bson_value_t *out, const char *s, size_t len)
{
    expr_value_utf8(out, s, len);
}

EXPR_FN(expr_op_substr_bytes)
{
    bson_value_t v[3];
    char *s = NULL;
    size_t len = 0;
    int64_t lower, length;
    int ret = expr_eval_args(e, ctx, v, st);
    if (ret != 0) {
        return ret;
    }
    SHL_ERR(coerce_to_string(&v[0], &s, &len, st));
    if (v[1].value_type != BSON_TYPE_INT32 && v[1].value_type != BSON_TYPE_INT64 &&
        v[1].value_type != BSON_TYPE_DOUBLE) {
        SHL_FAIL(st, 16034,
                 "$substrBytes:  starting index must be a numeric type (is BSON type %s)",
                 expr_type_name(&v[1]));
    }
    if (v[2].value_type != BSON_TYPE_INT32 && v[2].value_type != BSON_TYPE_INT64 &&
        v[2].value_type != BSON_TYPE_DOUBLE) {
        SHL_FAIL(st, 16035, "$substrBytes:  length must be a numeric type (is BSON type %s)",
                 expr_type_name(&v[2]));
    }
    lower = expr_as_int64(&v[1]);
    length = expr_as_int64(&v[2]);
    if (lower < 0) {
        SHL_FAIL(st, 50752, "$substrBytes:  starting index must be non-negative (got: %lld)",
                 (long long)lower);
    }
    if (length < 0 || (uint64_t)length > len) {
        length = (int64_t)len;
    }
    if ((size_t)lower < len && is_cont((unsigned char)s[lower])) {
        SHL_FAIL(st, 28656,
                 "$substrBytes:  Invalid range, starting index is a UTF-8 continuation byte.");
    }
    if ((size_t)lower + (size_t)length < len && is_cont((unsigned char)s[lower + length])) {
        SHL_FAIL(st, 28657,
                 "$substrBytes:  Invalid range, ending index is in the middle of a UTF-8 "
                 "character.");
    }
    if ((size_t)lower >= len) {
        put_str(out, "", 0);
    } else {
        size_t n = len - (size_t)lower < (size_t)length ? len - (size_t)lower : (size_t)length;
        put_str(out, s + lower, n);
    }
done:
    bson_free(s);
    for (int i = 0; i < 3; i++) {
        bson_value_destroy(&v[i]);
    }
    return ret;
}

EXPR_FN(expr_op_substr_cp)
{
    bson_value_t v[3];
    char *s = NULL;
    size_t len = 0, sb = 0, eb;
    int32_t start, length;
    int ret = expr_eval_args(e, ctx, v, st);
    if (ret != 0) {
        return ret;
    }
    SHL_ERR(coerce_to_string(&v[0], &s, &len, st));
    if (!query_value_is_number(&v[1])) {
        SHL_FAIL(st, 34450, "$substrCP: starting index must be a numeric type (is BSON type %s)",
                 expr_type_name(&v[1]));
    }
    if (!expr_integral32(&v[1], &start)) {
        SHL_FAIL(st, 34451,
                 "$substrCP: starting index cannot be represented as a 32-bit integral value");
    }
    if (!query_value_is_number(&v[2])) {
        SHL_FAIL(st, 34452, "$substrCP: length must be a numeric type (is BSON type %s)",
                 expr_type_name(&v[2]));
    }
    if (!expr_integral32(&v[2], &length)) {
        SHL_FAIL(st, 34453, "$substrCP: length cannot be represented as a 32-bit integral value");
    }
    if (length < 0) {
        SHL_FAIL(st, 34454, "$substrCP: length must be a nonnegative integer.");
    }
    if (start < 0) {
        SHL_FAIL(st, 34455, "$substrCP: the starting index must be nonnegative integer.");
    }
    for (int32_t i = 0; i < start; i++) {
        if (sb >= len) {
            put_str(out, "", 0);
            goto done;
        }
        if (is_cont((unsigned char)s[sb])) {
            SHL_FAIL(st, 34456, "$substrCP: invalid UTF-8 string");
        }
        sb += cp_len((unsigned char)s[sb]);
    }
    eb = sb;
    for (int32_t i = 0; i < length && eb < len; i++) {
        if (is_cont((unsigned char)s[eb])) {
            SHL_FAIL(st, 34458, "$substrCP: invalid UTF-8 string");
        }
        eb += cp_len((unsigned char)s[eb]);
    }
    if (sb > len) {
        sb = len;
    }
    if (eb > len) {
        eb = len;
    }
    put_str(out, s + sb, eb - sb);
done:
    bson_free(s);
    for (int i = 0; i < 3; i++) {
        bson_value_destroy(&v[i]);
    }
    return ret;
}

static int
change_case(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st,
            bool upper)
{
    bson_value_t v;
    char *s = NULL;
    size_t len = 0;
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret != 0) {
        return ret;
    }
    SHL_ERR(coerce_to_string(&v, &s, &len, st));
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            s[i] = (char)(upper ? toupper(c) : tolower(c));
        }
    }
    put_str(out, s, len);
done:
    bson_free(s);
    bson_value_destroy(&v);
    return ret;
}

EXPR_FN(expr_op_to_lower)
{
    return change_case(e, ctx, out, st, false);
}

EXPR_FN(expr_op_to_upper)
{
    return change_case(e, ctx, out, st, true);
}

EXPR_FN(expr_op_strcasecmp)
{
    bson_value_t v[2];
    char *a = NULL, *b = NULL;
    size_t al = 0, bl = 0, n;
    int ret = expr_eval_args(e, ctx, v, st), c = 0;
    if (ret != 0) {
        return ret;
    }
    SHL_ERR(coerce_to_string(&v[0], &a, &al, st));
    SHL_ERR(coerce_to_string(&v[1], &b, &bl, st));
    n = al < bl ? al : bl;
    for (size_t i = 0; i < n && c == 0; i++) {
        int x = toupper((unsigned char)a[i]), y = toupper((unsigned char)b[i]);
        c = x - y;
    }
    if (c == 0) {
        c = al < bl ? -1 : (al > bl ? 1 : 0);
    }
    expr_value_int32(out, c < 0 ? -1 : (c > 0 ? 1 : 0));
done:
    bson_free(a);
    bson_free(b);
    bson_value_destroy(&v[0]);
    bson_value_destroy(&v[1]);
    return ret;
}

EXPR_FN(expr_op_split)
{
    bson_value_t v[2];
    expr_arr_t arr;
    int ret = expr_eval_args(e, ctx, v, st);
    if (ret != 0) {
        return ret;
    }
    expr_arr_init(&arr);
    if (expr_nullish(&v[0]) || expr_nullish(&v[1])) {
        expr_value_null(out);
        goto done;
    }
    if (v[0].value_type != BSON_TYPE_UTF8) {
        SHL_FAIL(st, 40085,
                 "$split requires an expression that evaluates to a string as a first argument, "
                 "found: %s",
                 expr_type_name(&v[0]));
    }
    if (v[1].value_type != BSON_TYPE_UTF8) {
        SHL_FAIL(st, 40086,
                 "$split requires an expression that evaluates to a string as a second argument, "
                 "found: %s",
                 expr_type_name(&v[1]));
    }
    if (v[1].value.v_utf8.len == 0) {
        SHL_FAIL(st, 40087, "$split requires a non-empty separator");
    }
    {
        const char *s = v[0].value.v_utf8.str, *sep = v[1].value.v_utf8.str;
        size_t len = v[0].value.v_utf8.len, sl = v[1].value.v_utf8.len, startpos = 0, i = 0;
        bson_value_t piece;
        const char *hit;
        (void)i;
        /* memmem is linear (two-way), so no separator makes this quadratic. */
        while ((hit = memmem(s + startpos, len - startpos, sep, sl)) != NULL) {
            put_str(&piece, s + startpos, (size_t)(hit - s) - startpos);
            expr_arr_append(&arr, &piece);
            bson_value_destroy(&piece);
            startpos = (size_t)(hit - s) + sl;
            if (arr.too_big) {
                break;
            }
        }
        put_str(&piece, s + startpos, len - startpos);
        expr_arr_append(&arr, &piece);
        bson_value_destroy(&piece);
    }
    ret = expr_arr_finish(&arr, out, st);
done:
    expr_arr_cleanup(&arr);
    bson_value_destroy(&v[0]);
    bson_value_destroy(&v[1]);
    return ret;
}

EXPR_FN(expr_op_strlen_bytes)
{
    bson_value_t v;
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret != 0) {
        return ret;
    }
    if (v.value_type != BSON_TYPE_UTF8) {
        ret = shl_status_set(st, 34473, "$strLenBytes requires a string argument, found: %s",
                             expr_type_name(&v));
    } else {
        expr_value_int32(out, (int32_t)v.value.v_utf8.len);
    }
    bson_value_destroy(&v);
    return ret;
}

EXPR_FN(expr_op_strlen_cp)
{
    bson_value_t v;
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret != 0) {
        return ret;
    }
    if (v.value_type != BSON_TYPE_UTF8) {
        ret = shl_status_set(st, 34471, "$strLenCP requires a string argument, found: %s",
                             expr_type_name(&v));
    } else {
        int32_t n = 0;
        for (uint32_t i = 0; i < v.value.v_utf8.len; i++) {
            n += !is_cont((unsigned char)v.value.v_utf8.str[i]);
        }
        expr_value_int32(out, n);
    }
    bson_value_destroy(&v);
    return ret;
}

/* Optional start/end index of $indexOf*: integral and non-negative (40096 / 40097). */
static int
index_arg(const bson_value_t *v, const char *opname, const char *what, int64_t *out,
          shl_status_t *st)
{
    int32_t x;
    if (!expr_integral32(v, &x)) {
        return shl_status_set(st, 40096, "%s requires an integral %s, found a value of type: %s",
                              opname, what, expr_type_name(v));
    }
    if (x < 0) {
        return shl_status_set(st, 40097, "%s requires a nonnegative %s, found: %d", opname, what,
                              x);
    }
    *out = x;
    return 0;
}

static int
index_of(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st,
         bool cp)
{
    const char *name = cp ? "$indexOfCP" : "$indexOfBytes";
    bson_value_t v[4];
    int64_t start = 0, end = 0, total;
    int ret = expr_eval_args(e, ctx, v, st);
    const char *s, *tok;
    size_t len, tl;
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
    if (v[0].value_type != BSON_TYPE_UTF8) {
        SHL_FAIL(st, cp ? 40093 : 40091, "%s requires a string as the first argument, found: %s",
                 name, expr_type_name(&v[0]));
    }
    if (v[1].value_type != BSON_TYPE_UTF8) {
        SHL_FAIL(st, cp ? 40094 : 40092, "%s requires a string as the second argument, found: %s",
                 name, expr_type_name(&v[1]));
    }
    s = v[0].value.v_utf8.str;
    len = v[0].value.v_utf8.len;
    tok = v[1].value.v_utf8.str;
    tl = v[1].value.v_utf8.len;
    if (e->nargs > 2) {
        SHL_ERR(index_arg(&v[2], name, "starting index", &start, st));
    }
    total = (int64_t)len;
    if (cp) {
        total = 0;
        for (size_t i = 0; i < len; i++) {
            if (i == 0 && is_cont((unsigned char)s[0])) {
                SHL_FAIL(st, 40095, "$indexOfCP found bad UTF-8 in the input");
            }
            total += !is_cont((unsigned char)s[i]);
        }
    }
    end = total;
    if (e->nargs > 3) {
        SHL_ERR(index_arg(&v[3], name, "ending index", &end, st));
        if (end > total) {
            end = total;
        }
    }
    if (start > total || end < start) {
        expr_value_int32(out, -1);
        goto done;
    }
    if (!cp) {
        const char *hit = memmem(s + start, (size_t)(end - start), tok, tl);
        expr_value_int32(out, hit == NULL ? -1 : (int32_t)(hit - s));
        goto done;
    }
    if (len == 0 && tl == 0 && start == 0) {
        expr_value_int32(out, 0);
        goto done;
    }
    {
        /* Find the byte offset of code point 'start', then search linearly (memmem); a token
         * that starts with a continuation byte can never match at a code point. */
        size_t b = 0;
        const char *hit;
        int64_t at = start;
        for (int64_t i = 0; i < start && b < len; i++) {
            b += cp_len((unsigned char)s[b]);
        }
        expr_value_int32(out, -1);
        if (b > len || (tl > 0 && is_cont((unsigned char)tok[0])) ||
            (hit = memmem(s + b, len - b, tok, tl)) == NULL) {
            goto done;
        }
        for (size_t k = b; k < (size_t)(hit - s); k++) {
            at += !is_cont((unsigned char)s[k]);
        }
        if (at < end) {
            expr_value_int32(out, (int32_t)at);
        }
    }
done:
    for (int i = 0; i < 4; i++) {
        bson_value_destroy(&v[i]);
    }
    return ret;
}

EXPR_FN(expr_op_index_of_bytes)
{
    return index_of(e, ctx, out, st, false);
}

EXPR_FN(expr_op_index_of_cp)
{
    return index_of(e, ctx, out, st, true);
}

/* ---- $trim / $ltrim / $rtrim: args [input, chars]; flags bit 1 left, bit 2 right ---- */

EXPR_PARSE(expr_parse_trim)
{
    static const char *const keys[] = {"input", "chars"};
    int ret = 0;
    e->flags = strcmp(op->name, "$ltrim") == 0 ? 1 : (strcmp(op->name, "$rtrim") == 0 ? 2 : 3);
    SHL_ERR(expr_parse_named(op, arg, keys, 2, e, 50696, 50694, st));
    if (e->args[0] == NULL) {
        SHL_FAIL(st, 50695, "%s requires an 'input' field", op->name);
    }
done:
    return ret;
}

/* The default whitespace set MongoDB trims. */
static const char *const ws_chars[] = {
    "\0",           " ",
    "\t",           "\n",
    "\v",           "\f",
    "\r",           "\xc2\xa0",
    "\xe1\x9a\x80", "\xe2\x80\x80",
    "\xe2\x80\x81", "\xe2\x80\x82",
    "\xe2\x80\x83", "\xe2\x80\x84",
    "\xe2\x80\x85", "\xe2\x80\x86",
    "\xe2\x80\x87", "\xe2\x80\x88",
    "\xe2\x80\x89", "\xe2\x80\x8a",
};

typedef struct cpset {
    const char *p[64];
    size_t len[64];
    size_t n;
    const char **big; /* when more than 64 code points */
    size_t *biglen;
} cpset_t;

static size_t
match_cp(const cpset_t *cs, const char *s, size_t avail, bool at_end)
{
    for (size_t i = 0; i < cs->n; i++) {
        const char *p = cs->big ? cs->big[i] : cs->p[i];
        size_t l = cs->big ? cs->biglen[i] : cs->len[i];
        if (l <= avail && memcmp(at_end ? s - l : s, p, l) == 0) {
            return l;
        }
    }
    return 0;
}

EXPR_FN(expr_op_trim)
{
    const char *name = e->op->name;
    bson_value_t in, chars;
    cpset_t cs = {0};
    int ret = 0;
    expr_value_missing(&chars);
    SHL_ERR(shl_expr_evaluate(e->args[0], ctx, &in, st));
    if (expr_nullish(&in)) {
        expr_value_null(out);
        goto done;
    }
    if (in.value_type != BSON_TYPE_UTF8) {
        SHL_FAIL(st, 50699, "%s requires its input to be a string, got %s instead.", name,
                 expr_type_name(&in));
    }
    if (e->args[1] == NULL) {
        cs.n = sizeof(ws_chars) / sizeof(ws_chars[0]);
        for (size_t i = 0; i < cs.n; i++) {
            cs.p[i] = ws_chars[i];
            cs.len[i] = i == 0 ? 1 : strlen(ws_chars[i]);
        }
    } else {
        const char *c;
        size_t cl, i = 0;
        SHL_ERR(shl_expr_evaluate(e->args[1], ctx, &chars, st));
        if (expr_nullish(&chars)) {
            expr_value_null(out);
            goto done;
        }
        if (chars.value_type != BSON_TYPE_UTF8) {
            SHL_FAIL(st, 50700, "%s requires 'chars' to be a string, got %s instead.", name,
                     expr_type_name(&chars));
        }
        c = chars.value.v_utf8.str;
        cl = chars.value.v_utf8.len;
        cs.big = bson_malloc((cl + 1) * sizeof(char *));
        cs.biglen = bson_malloc((cl + 1) * sizeof(size_t));
        while (i < cl) {
            size_t l;
            if (is_cont((unsigned char)c[i])) {
                SHL_FAIL(st, 50698,
                         "Failed to parse \"chars\" argument to %s: Detected invalid UTF-8. Got "
                         "continuation byte when expecting the start of a new code point.",
                         name);
            }
            l = cp_len((unsigned char)c[i]);
            if (i + l > cl) {
                SHL_FAIL(st, 50697,
                         "Failed to parse \"chars\" argument to %s: Detected invalid UTF-8. "
                         "Missing expected continuation byte at end of string.",
                         name);
            }
            cs.big[cs.n] = c + i;
            cs.biglen[cs.n++] = l;
            i += l;
        }
    }
    {
        const char *s = in.value.v_utf8.str;
        size_t b = 0, eidx = in.value.v_utf8.len, l;
        if (e->flags & 1) {
            while (b < eidx && (l = match_cp(&cs, s + b, eidx - b, false)) > 0) {
                b += l;
            }
        }
        if (e->flags & 2) {
            while (eidx > b && (l = match_cp(&cs, s + eidx, eidx - b, true)) > 0) {
                eidx -= l;
            }
        }
        put_str(out, s + b, eidx - b);
    }
done:
    bson_free(cs.big);
    bson_free(cs.biglen);
    bson_value_destroy(&in);
    bson_value_destroy(&chars);
    return ret;
}

/* ---- $regexMatch / $regexFind / $regexFindAll: args [input, regex, options] ---- */

EXPR_PARSE(expr_parse_regex)
{
    static const char *const keys[] = {"input", "regex", "options"};
    int ret = 0;
    SHL_ERR(expr_parse_named(op, arg, keys, 3, e, 51103, 31024, st));
    if (e->args[0] == NULL) {
        SHL_FAIL(st, 31022, "%s requires 'input' parameter", op->name);
    }
    if (e->args[1] == NULL) {
        SHL_FAIL(st, 31023, "%s requires 'regex' parameter", op->name);
    }
done:
    return ret;
}

typedef struct rx {
    pcre2_code *re;
    pcre2_match_data *md;
    const char *input;
    size_t len;
    bool null;
    size_t cp_byte; /* code points before byte cp_byte are counted in cp_count */
    int32_t cp_count;
} rx_t;

static int
rx_prepare(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t v[3], rx_t *rx,
           shl_status_t *st)
{
    const char *name = e->op->name, *pattern = NULL, *flags = NULL;
    uint32_t opts = PCRE2_UTF;
    int ret = 0, errcode;
    PCRE2_SIZE erroff;

    memset(rx, 0, sizeof(*rx));
    for (int i = 0; i < 3; i++) {
        expr_value_missing(&v[i]);
    }
    for (int i = 0; i < 3; i++) {
        SHL_ERR(expr_eval_opt(e->args[i], ctx, &v[i], st));
    }
    if (!expr_nullish(&v[0]) && v[0].value_type != BSON_TYPE_UTF8) {
        SHL_FAIL(st, 51104, "%s needs 'input' to be of type string", name);
    }
    if (!expr_nullish(&v[1]) && v[1].value_type != BSON_TYPE_UTF8 &&
        v[1].value_type != BSON_TYPE_REGEX) {
        SHL_FAIL(st, 51105, "%s needs 'regex' to be of type string or regex", name);
    }
    if (!expr_nullish(&v[2]) && v[2].value_type != BSON_TYPE_UTF8) {
        SHL_FAIL(st, 51106, "%s needs 'options' to be of type string", name);
    }
    if (v[1].value_type == BSON_TYPE_REGEX) {
        pattern = v[1].value.v_regex.regex;
        flags = v[1].value.v_regex.options;
        if (flags != NULL && flags[0] != '\0' && !expr_nullish(&v[2])) {
            SHL_FAIL(st, 51107,
                     "%s: found regex option(s) specified in both 'regex' and 'option' fields",
                     name);
        }
    } else if (v[1].value_type == BSON_TYPE_UTF8) {
        pattern = v[1].value.v_utf8.str;
        if (strlen(pattern) != v[1].value.v_utf8.len) {
            SHL_FAIL(st, 51109, "%s: regular expression cannot contain an embedded null byte",
                     name);
        }
    }
    if (v[2].value_type == BSON_TYPE_UTF8) {
        flags = v[2].value.v_utf8.str;
        if (strlen(flags) != v[2].value.v_utf8.len) {
            SHL_FAIL(st, 51110,
                     "%s: regular expression options cannot contain an embedded null byte", name);
        }
    }
    for (const char *f = flags; f != NULL && *f != '\0'; f++) {
        switch (*f) {
        case 'i':
            opts |= PCRE2_CASELESS;
            break;
        case 'm':
            opts |= PCRE2_MULTILINE;
            break;
        case 's':
            opts |= PCRE2_DOTALL;
            break;
        case 'x':
            opts |= PCRE2_EXTENDED;
            break;
        case 'u':
            break;
        default:
            SHL_FAIL(st, QC_REGEX_BAD_FLAG, "%s invalid flag in regex options: %c", name, *f);
        }
    }
    if (expr_nullish(&v[0]) || pattern == NULL) {
        rx->null = true;
        goto done;
    }
    rx->re =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &errcode, &erroff, NULL);
    if (rx->re == NULL) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof(msg));
        SHL_FAIL(st, 51111, "Invalid Regex in %s: %s", name, (const char *)msg);
    }
    rx->md = pcre2_match_data_create_from_pattern(rx->re, NULL);
    rx->input = v[0].value.v_utf8.str;
    rx->len = v[0].value.v_utf8.len;
done:
    return ret;
}

static void
rx_cleanup(rx_t *rx, bson_value_t v[3])
{
    if (rx->md != NULL) {
        pcre2_match_data_free(rx->md);
    }
    if (rx->re != NULL) {
        pcre2_code_free(rx->re);
    }
    for (int i = 0; i < 3; i++) {
        bson_value_destroy(&v[i]);
    }
}

/* One match from byte 'from'; 1 matched, 0 no match, <0 error (status set). */
static int
rx_exec(rx_t *rx, size_t from, const char *name, shl_status_t *st)
{
    int rc = pcre2_match(rx->re, (PCRE2_SPTR)rx->input, rx->len, from, 0, rx->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) {
        return 0;
    }
    if (rc < 0) {
        return -shl_status_set(st, 51156,
                               "Error occurred while executing the regular expression in %s. "
                               "Result code: %d",
                               name, rc);
    }
    return 1;
}

/* {match, idx, captures} for the current match; idx counts code points before it. */
static void
rx_match_doc(rx_t *rx, bson_value_t *out)
{
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(rx->md);
    uint32_t ncap = 0;
    bson_t doc = BSON_INITIALIZER, caps;
    int32_t idx;
    pcre2_pattern_info(rx->re, PCRE2_INFO_CAPTURECOUNT, &ncap);
    /* Matches come in increasing order, so the code point count is carried forward. */
    if (ov[0] < rx->cp_byte) {
        rx->cp_byte = 0;
        rx->cp_count = 0;
    }
    for (size_t i = rx->cp_byte; i < ov[0]; i++) {
        rx->cp_count += !is_cont((unsigned char)rx->input[i]);
    }
    rx->cp_byte = ov[0];
    idx = rx->cp_count;
    bson_append_utf8(&doc, "match", 5, rx->input + ov[0], (int)(ov[1] - ov[0]));
    bson_append_int32(&doc, "idx", 3, idx);
    bson_append_array_begin(&doc, "captures", 8, &caps);
    for (uint32_t i = 1; i <= ncap; i++) {
        char key[16];
        const char *k;
        size_t kl = bson_uint32_to_string(i - 1, &k, key, sizeof(key));
        if (ov[2 * i] == PCRE2_UNSET) {
            bson_append_null(&caps, k, (int)kl);
        } else {
            bson_append_utf8(&caps, k, (int)kl, rx->input + ov[2 * i],
                             (int)(ov[2 * i + 1] - ov[2 * i]));
        }
    }
    bson_append_array_end(&doc, &caps);
    expr_value_take_bson(&doc, BSON_TYPE_DOCUMENT, out);
}

EXPR_FN(expr_op_regex_match)
{
    bson_value_t v[3];
    rx_t rx;
    int ret = rx_prepare(e, ctx, v, &rx, st), rc;
    if (ret == 0) {
        if (rx.null) {
            expr_value_bool(out, false);
        } else if ((rc = rx_exec(&rx, 0, e->op->name, st)) < 0) {
            ret = -rc;
        } else {
            expr_value_bool(out, rc == 1);
        }
    }
    rx_cleanup(&rx, v);
    return ret;
}

EXPR_FN(expr_op_regex_find)
{
    bson_value_t v[3];
    rx_t rx;
    int ret = rx_prepare(e, ctx, v, &rx, st), rc;
    if (ret == 0) {
        if (rx.null) {
            expr_value_null(out);
        } else if ((rc = rx_exec(&rx, 0, e->op->name, st)) < 0) {
            ret = -rc;
        } else if (rc == 0) {
            expr_value_null(out);
        } else {
            rx_match_doc(&rx, out);
        }
    }
    rx_cleanup(&rx, v);
    return ret;
}

EXPR_FN(expr_op_regex_find_all)
{
    bson_value_t v[3];
    rx_t rx;
    expr_arr_t arr;
    size_t pos = 0, total = 0;
    int ret = rx_prepare(e, ctx, v, &rx, st), rc;
    expr_arr_init(&arr);
    if (ret != 0) {
        goto done;
    }
    if (!rx.null) {
        do {
            bson_value_t m;
            PCRE2_SIZE *ov;
            if ((rc = rx_exec(&rx, pos, e->op->name, st)) < 0) {
                ret = -rc;
                goto done;
            }
            if (rc == 0) {
                break;
            }
            ov = pcre2_get_ovector_pointer(rx.md);
            rx_match_doc(&rx, &m);
            total += m.value.v_doc.data_len;
            if (total > EXPR_MAX_VALUE_BYTES) {
                bson_value_destroy(&m);
                SHL_FAIL(st, 51151,
                         "$regexFindAll: the size of buffer to store output exceeded the 64MB "
                         "limit");
            }
            expr_arr_append(&arr, &m);
            bson_value_destroy(&m);
            if (ov[1] == ov[0]) {
                /* An empty match: move on by one code point. */
                pos = ov[0] + (ov[0] < rx.len ? cp_len((unsigned char)rx.input[ov[0]]) : 1);
            } else {
                pos = ov[1];
            }
        } while (pos < rx.len);
    }
    ret = expr_arr_finish(&arr, out, st);
done:
    expr_arr_cleanup(&arr);
    rx_cleanup(&rx, v);
    return ret;
}

/* ---- $replaceOne / $replaceAll: args [input, find, replacement] ---- */

EXPR_PARSE(expr_parse_replace)
{
    static const char *const keys[] = {"input", "find", "replacement"};
    int ret = 0;
    SHL_ERR(expr_parse_named(op, arg, keys, 3, e, 51751, 51750, st));
    if (e->args[0] == NULL) {
        SHL_FAIL(st, 51749, "%s requires 'input' to be specified", op->name);
    }
    if (e->args[1] == NULL) {
        SHL_FAIL(st, 51748, "%s requires 'find' to be specified", op->name);
    }
    if (e->args[2] == NULL) {
        SHL_FAIL(st, 51747, "%s requires 'replacement' to be specified", op->name);
    }
done:
    return ret;
}

typedef struct buf {
    char *p;
    size_t len, cap;
} buf_t;

static void
buf_add(buf_t *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = bson_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static int
replace(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st,
        bool all)
{
    const char *name = e->op->name;
    bson_value_t v[3];
    int ret = expr_eval_args(e, ctx, v, st);
    static const char *const what[] = {"input", "find", "replacement"};
    static const int codes[] = {51746, 51745, 51744};
    if (ret != 0) {
        return ret;
    }
    for (int i = 0; i < 3; i++) {
        if (!expr_nullish(&v[i]) && v[i].value_type != BSON_TYPE_UTF8) {
            char *js = query_value_to_json(&v[i]);
            ret = shl_status_set(st, codes[i], "%s requires that '%s' be a string, found: %s", name,
                                 what[i], js);
            bson_free(js);
            goto done;
        }
    }
    if (expr_nullish(&v[0]) || expr_nullish(&v[1]) || expr_nullish(&v[2])) {
        expr_value_null(out);
        goto done;
    }
    {
        const char *s = v[0].value.v_utf8.str, *f = v[1].value.v_utf8.str,
                   *r = v[2].value.v_utf8.str, *hit;
        size_t len = v[0].value.v_utf8.len, fl = v[1].value.v_utf8.len, rl = v[2].value.v_utf8.len,
               pos = 0;
        buf_t b = {0};
        if (fl == 0) {
            /* An empty 'find' matches before the first code point ($replaceOne) or between
             * all of them and at both ends ($replaceAll). */
            buf_add(&b, r, rl);
            while (all && pos < len) {
                size_t l = cp_len((unsigned char)s[pos]);
                l = pos + l > len ? len - pos : l;
                buf_add(&b, s + pos, l);
                buf_add(&b, r, rl);
                pos += l;
                if (b.len > EXPR_MAX_VALUE_BYTES) {
                    break;
                }
            }
        } else {
            while ((hit = memmem(s + pos, len - pos, f, fl)) != NULL) {
                buf_add(&b, s + pos, (size_t)(hit - s) - pos);
                buf_add(&b, r, rl);
                pos = (size_t)(hit - s) + fl;
                if (!all || b.len > EXPR_MAX_VALUE_BYTES) {
                    break;
                }
            }
        }
        buf_add(&b, s + pos, len - pos);
        if (b.len > EXPR_MAX_VALUE_BYTES) {
            bson_free(b.p);
            SHL_FAIL(st, QC_BUF_TOO_BIG, "%s: result exceeds the %d byte limit", name,
                     EXPR_MAX_VALUE_BYTES);
        }
        put_str(out, b.p != NULL ? b.p : "", b.len);
        bson_free(b.p);
    }
done:
    for (int i = 0; i < 3; i++) {
        bson_value_destroy(&v[i]);
    }
    return ret;
}

EXPR_FN(expr_op_replace_one)
{
    return replace(e, ctx, out, st, false);
}

EXPR_FN(expr_op_replace_all)
{
    return replace(e, ctx, out, st, true);
}
