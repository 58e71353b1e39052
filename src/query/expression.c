/*
 * expression.c -- parse and evaluate aggregation expressions (expression.h). The core
 * set is what filters ($expr), projections and update pipelines need: field paths,
 * variables, literals, object/array expressions, comparisons, boolean logic, $cond,
 * $ifNull, $add, $multiply, $concat, $size, $literal. The aggregation engine adds more
 * rows to the operator table below.
 */
#include "bson/bson_iter.h"
#include "query/expression_private.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "bson/bson_compare.h"
#include "query/text.h"

#define QC_UNDEFINED_VARIABLE 17276
#define QC_FIELDPATH_EMPTY_COMPONENT 15998
#define QC_DOLLAR_ALONE 16872
#define QC_EXPR_OBJECT_ONE_FIELD 15983
#define QC_FIELDPATH_DOT_IN_NAME 16412
#define QC_EXPR_BAD_ARGC_RANGE 28667
#define QC_EXPR_DUP_FIELD 16406
#define QC_ADD_TYPE 16554
#define QC_MULTIPLY_TYPE 16555
#define QC_CONCAT_TYPE 16702
#define QC_SIZE_TYPE 17124
#define QC_COND_MISSING 17080
#define QC_COND_UNKNOWN_ARG 17083
#define QC_VAR_NAME_INVALID 16870

void
expr_value_take_bson(bson_t *b, bson_type_t type, bson_value_t *out)
{
    out->value_type = type;
    out->value.v_doc.data_len = b->len;
    out->value.v_doc.data = bson_malloc(b->len);
    memcpy(out->value.v_doc.data, bson_get_data(b), b->len);
    bson_destroy(b);
}

void
expr_value_missing(bson_value_t *v)
{
    memset(v, 0, sizeof(*v));
    v->value_type = BSON_TYPE_EOD;
}

void
expr_value_bool(bson_value_t *v, bool b)
{
    memset(v, 0, sizeof(*v));
    v->value_type = BSON_TYPE_BOOL;
    v->value.v_bool = b;
}

void
expr_value_copy(const bson_value_t *src, bson_value_t *dst)
{
    if (src->value_type == BSON_TYPE_EOD) {
        expr_value_missing(dst);
    } else {
        bson_value_copy(src, dst);
    }
}

void
expr_value_null(bson_value_t *v)
{
    memset(v, 0, sizeof(*v));
    v->value_type = BSON_TYPE_NULL;
}

void
expr_value_int32(bson_value_t *v, int32_t x)
{
    memset(v, 0, sizeof(*v));
    v->value_type = BSON_TYPE_INT32;
    v->value.v_int32 = x;
}

void
expr_value_int64(bson_value_t *v, int64_t x)
{
    memset(v, 0, sizeof(*v));
    v->value_type = BSON_TYPE_INT64;
    v->value.v_int64 = x;
}

void
expr_value_int_or_long(bson_value_t *v, int64_t x)
{
    if (x >= INT32_MIN && x <= INT32_MAX) {
        expr_value_int32(v, (int32_t)x);
    } else {
        expr_value_int64(v, x);
    }
}

void
expr_value_double(bson_value_t *v, double x)
{
    memset(v, 0, sizeof(*v));
    v->value_type = BSON_TYPE_DOUBLE;
    v->value.v_double = x;
}

void
expr_value_date(bson_value_t *v, int64_t ms)
{
    memset(v, 0, sizeof(*v));
    v->value_type = BSON_TYPE_DATE_TIME;
    v->value.v_datetime = ms;
}

void
expr_value_utf8(bson_value_t *v, const char *s, size_t len)
{
    expr_budget_charge(len);
    memset(v, 0, sizeof(*v));
    v->value_type = BSON_TYPE_UTF8;
    v->value.v_utf8.str = bson_malloc(len + 1);
    memcpy(v->value.v_utf8.str, s, len);
    v->value.v_utf8.str[len] = '\0';
    v->value.v_utf8.len = (uint32_t)len;
}

void
expr_value_decimal_from_double(bson_value_t *v, double d)
{
    char buf[64];
    memset(v, 0, sizeof(*v));
    v->value_type = BSON_TYPE_DECIMAL128;
    if (isnan(d)) {
        snprintf(buf, sizeof(buf), "NaN");
    } else if (isinf(d)) {
        snprintf(buf, sizeof(buf), d > 0 ? "Infinity" : "-Infinity");
    } else {
        snprintf(buf, sizeof(buf), "%.15g", d);
    }
    bson_decimal128_from_string(buf, &v->value.v_decimal128);
}

bool
expr_nullish(const bson_value_t *v)
{
    return v->value_type == BSON_TYPE_EOD || v->value_type == BSON_TYPE_NULL ||
           v->value_type == BSON_TYPE_UNDEFINED;
}

bool
expr_integral64(const bson_value_t *v, int64_t *out)
{
    double d;
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        *out = v->value.v_int32;
        return true;
    case BSON_TYPE_INT64:
        *out = v->value.v_int64;
        return true;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        d = query_value_as_double(v);
        if (isnan(d) || d >= 9223372036854775808.0 || d < -9223372036854775808.0 || d != trunc(d)) {
            return false;
        }
        *out = (int64_t)d;
        return true;
    default:
        return false;
    }
}

bool
expr_integral32(const bson_value_t *v, int32_t *out)
{
    int64_t x;
    if (!expr_integral64(v, &x) || x < INT32_MIN || x > INT32_MAX) {
        return false;
    }
    *out = (int32_t)x;
    return true;
}

int64_t
expr_as_int64(const bson_value_t *v)
{
    double d;
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        return v->value.v_int32;
    case BSON_TYPE_INT64:
        return v->value.v_int64;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        d = query_value_as_double(v);
        if (isnan(d)) {
            return 0;
        }
        if (d >= 9223372036854775807.0) {
            return INT64_MAX;
        }
        if (d <= -9223372036854775808.0) {
            return INT64_MIN;
        }
        return (int64_t)d;
    default:
        return 0;
    }
}

const char *
expr_type_name(const bson_value_t *v)
{
    return v->value_type == BSON_TYPE_EOD ? "missing" : shl_bson_type_name(v->value_type);
}

bool
expr_value_as_date(const bson_value_t *v, int64_t *ms)
{
    switch (v->value_type) {
    case BSON_TYPE_DATE_TIME:
        *ms = v->value.v_datetime;
        return true;
    case BSON_TYPE_TIMESTAMP:
        *ms = (int64_t)v->value.v_timestamp.timestamp * 1000;
        return true;
    case BSON_TYPE_OID:
        *ms = (int64_t)bson_oid_get_time_t(&v->value.v_oid) * 1000;
        return true;
    default:
        return false;
    }
}

void
expr_arr_init(expr_arr_t *a)
{
    bson_init(&a->b);
    a->n = 0;
    a->too_big = false;
}

void
expr_arr_append(expr_arr_t *a, const bson_value_t *v)
{
    char key[16];
    const char *k;
    size_t klen;
    if (a->too_big) {
        return;
    }
    if (a->b.len + (v->value_type == BSON_TYPE_UTF8 ? v->value.v_utf8.len : 0) +
            ((v->value_type == BSON_TYPE_DOCUMENT || v->value_type == BSON_TYPE_ARRAY)
                 ? v->value.v_doc.data_len
                 : 0) >
        EXPR_MAX_VALUE_BYTES) {
        a->too_big = true;
        return;
    }
    if (expr_budget_exhausted()) {
        a->too_big = true;
        return;
    }
    klen = bson_uint32_to_string(a->n++, &k, key, sizeof(key));
    expr_budget_charge(16 + (v->value_type == BSON_TYPE_UTF8 ? v->value.v_utf8.len : 0) +
                       ((v->value_type == BSON_TYPE_DOCUMENT || v->value_type == BSON_TYPE_ARRAY)
                            ? v->value.v_doc.data_len
                            : 0));
    if (v->value_type == BSON_TYPE_EOD) {
        bson_append_null(&a->b, k, (int)klen);
    } else if (!bson_append_value(&a->b, k, (int)klen, v)) {
        a->too_big = true;
    }
}

int
expr_arr_finish(expr_arr_t *a, bson_value_t *out, shl_status_t *st)
{
    if (a->too_big) {
        bson_destroy(&a->b);
        bson_init(&a->b);
        expr_value_missing(out);
        return shl_status_set(st, QC_BUF_TOO_BIG, "array exceeds the %d byte limit for a value",
                              EXPR_MAX_VALUE_BYTES);
    }
    expr_value_take_bson(&a->b, BSON_TYPE_ARRAY, out);
    bson_init(&a->b);
    return 0;
}

void
expr_arr_cleanup(expr_arr_t *a)
{
    bson_destroy(&a->b);
}

bson_value_t *
expr_array_values(const bson_value_t *arr, size_t *n)
{
    bson_t view;
    bson_iter_t it;
    size_t cap = 8, k = 0;
    bson_value_t *v = bson_malloc(cap * sizeof(*v));
    if (query_bson_view(arr, &view) && bson_iter_init(&it, &view)) {
        while (shl_iter_next(&it)) {
            if (k == cap) {
                cap *= 2;
                v = bson_realloc(v, cap * sizeof(*v));
            }
            v[k++] = *bson_iter_value(&it);
        }
    }
    *n = k;
    return v;
}

/* ---- variable scopes ----
 * Variables bound by $let, $map, $filter, $reduce, ... live in a chain of frames on the
 * evaluating thread's stack. Evaluation is a recursion over one expression tree, so the
 * dynamic chain is also the lexical one. */
typedef struct expr_scope {
    const struct expr_scope *parent;
    const char *const *names;
    const bson_value_t *vals;
    size_t n;
} expr_scope_t;

static __thread const expr_scope_t *tls_scope;
static __thread int tls_parse_depth;

int
expr_eval_scoped(const shl_expr_t *e, const shl_expr_ctx_t *ctx, const char *const *names,
                 const bson_value_t *vals, size_t n, bson_value_t *out, shl_status_t *st)
{
    expr_scope_t frame = {tls_scope, names, vals, n};
    const expr_scope_t *saved = tls_scope;
    int ret;
    if (expr_budget_exhausted()) {
        expr_value_missing(out);
        return shl_status_set(
            st, SHL_CODE_EXCEEDED_MEMORY_LIMIT,
            "expression evaluation exceeded its work limit (%llu bytes or %llu values "
            "built)",
            (unsigned long long)expr_max_work_bytes, (unsigned long long)expr_max_work_items);
    }
    tls_scope = &frame;
    ret = shl_expr_evaluate(e, ctx, out, st);
    tls_scope = saved;
    return ret;
}

static const bson_value_t *
scope_lookup(const char *name)
{
    for (const expr_scope_t *s = tls_scope; s != NULL; s = s->parent) {
        for (size_t i = s->n; i-- > 0;) {
            if (strcmp(s->names[i], name) == 0) {
                return &s->vals[i];
            }
        }
    }
    return NULL;
}

int
expr_eval_opt(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st)
{
    if (e == NULL) {
        expr_value_missing(out);
        return 0;
    }
    return shl_expr_evaluate(e, ctx, out, st);
}

int
shl_expr_let_vars(const bson_t *let, int64_t now_ms, const bson_t *builtins, bson_t *out,
                  shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    shl_expr_t *e = NULL;
    shl_expr_ctx_t ctx = {0};

    bson_init(out);
    ctx.vars = builtins;
    ctx.now_ms = now_ms;
    if (!bson_iter_init(&it, let)) {
        goto done;
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bson_value_t v;
        SHL_ERR(expr_check_user_var_name(k, st));
        SHL_ERR(shl_expr_parse(bson_iter_value(&it), &e, st));
        ret = shl_expr_evaluate(e, &ctx, &v, st);
        shl_expr_destroy(e);
        e = NULL;
        SHL_ERR(ret);
        if (v.value_type != BSON_TYPE_EOD) {
            query_append_value(out, k, -1, &v);
        }
        bson_value_destroy(&v);
    }
    /* The built-in ones ride along, for every evaluation that sees these variables. */
    if (builtins != NULL && bson_iter_init(&it, builtins)) {
        while (shl_iter_next(&it)) {
            bson_append_iter(out, NULL, 0, &it);
        }
    }
done:
    if (ret != 0) {
        bson_reinit(out);
    }
    return ret;
}

int
expr_check_user_var_name(const char *name, shl_status_t *st)
{
    int ret = 0;
    unsigned char c0 = (unsigned char)name[0];
    if (name[0] == '\0') {
        SHL_FAIL(st, 16866, "empty variable names are not allowed");
    }
    if (strcmp(name, "SEARCH_META") == 0) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "SEARCH_META is a reserved variable name");
    }
    if (!((c0 >= 'a' && c0 <= 'z') || c0 >= 0x80)) {
        SHL_FAIL(st, 16867, "'%s' starts with an invalid character for a user variable name", name);
    }
    for (const char *p = name + 1; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c >= 0x80)) {
            SHL_FAIL(st, 16868, "'%s' contains an invalid character for a variable name: '%c'",
                     name, *p);
        }
    }
done:
    return ret;
}

int
shl_expr_compare(const bson_value_t *a, const bson_value_t *b)
{
    return shl_expr_compare_coll(a, b, NULL);
}

int
shl_expr_compare_coll(const bson_value_t *a, const bson_value_t *b, const shl_collator_t *coll)
{
    bool ma = a->value_type == BSON_TYPE_EOD || a->value_type == BSON_TYPE_UNDEFINED;
    bool mb = b->value_type == BSON_TYPE_EOD || b->value_type == BSON_TYPE_UNDEFINED;
    if (ma && mb) {
        return 0;
    }
    if (ma) {
        return b->value_type == BSON_TYPE_MINKEY ? 1 : -1;
    }
    if (mb) {
        return a->value_type == BSON_TYPE_MINKEY ? -1 : 1;
    }
    return shl_bson_value_compare_coll(a, b, coll);
}

/* ---- parsing ---- */

static int parse_value(const bson_value_t *spec, shl_expr_t **out, shl_status_t *st);

static shl_expr_t *
expr_new(expr_kind_t kind)
{
    shl_expr_t *e = bson_malloc0(sizeof(*e));
    e->kind = kind;
    expr_value_missing(&e->constant);
    return e;
}

static int
check_field_path(const char *s, size_t len, shl_status_t *st)
{
    int ret = 0;
    if (len == 0) {
        SHL_FAIL(st, QC_FIELDPATH_EMPTY, "FieldPath cannot be constructed with empty string");
    }
    if (s[len - 1] == '.') {
        SHL_FAIL(st, QC_FIELDPATH_DOT_END, "FieldPath must not end with a '.'.");
    }
    for (size_t i = 0, start = 0; i <= len; i++) {
        if (i == len || s[i] == '.') {
            if (i == start) {
                SHL_FAIL(st, QC_FIELDPATH_EMPTY_COMPONENT,
                         "FieldPath field names may not be empty strings.");
            }
            if (s[start] == '$') {
                SHL_FAIL(st, QC_FIELDPATH_DOLLAR,
                         "FieldPath field names may not start with '$'. "
                         "Consider using $getField or $setField.");
            }
            start = i + 1;
        } else if (s[i] == '\0') {
            SHL_FAIL(st, QC_FIELDPATH_NULL_BYTE, "FieldPath field names may not contain '\\0'.");
        }
    }
done:
    return ret;
}

static int
parse_string(const char *s, size_t len, shl_expr_t **out, shl_status_t *st)
{
    shl_expr_t *e = NULL;
    int ret = 0;

    if (len == 1) {
        SHL_FAIL(st, QC_DOLLAR_ALONE, "'$' by itself is not a valid FieldPath");
    }
    if (s[1] != '$') {
        SHL_ERR(check_field_path(s + 1, len - 1, st));
        e = expr_new(EXPR_FIELD);
        qpath_init(&e->path, s + 1, len - 1);
    } else {
        const char *name = s + 2, *dot = memchr(name, '.', len - 2);
        size_t nlen = dot ? (size_t)(dot - name) : len - 2;
        if (nlen == 0) {
            SHL_FAIL(st, QC_VAR_NAME_INVALID, "empty variable names are not allowed");
        }
        e = expr_new(EXPR_VAR);
        e->var = bson_strndup(name, nlen);
        /* KEEP/PRUNE/DESCEND are bound only inside $redact, which passes them as variables;
         * elsewhere they fail at evaluation as undefined. */
        if (strcmp(e->var, "ROOT") != 0 && strcmp(e->var, "CURRENT") != 0 &&
            strcmp(e->var, "REMOVE") != 0 && strcmp(e->var, "NOW") != 0 &&
            strcmp(e->var, "CLUSTER_TIME") != 0 && strcmp(e->var, "SEARCH_META") != 0 &&
            strcmp(e->var, "KEEP") != 0 && strcmp(e->var, "PRUNE") != 0 &&
            strcmp(e->var, "DESCEND") != 0 && !(e->var[0] >= 'a' && e->var[0] <= 'z')) {
            SHL_FAIL(st, QC_UNDEFINED_VARIABLE, "Use of undefined variable: %s", e->var);
        }
        if (dot != NULL) {
            SHL_ERR(check_field_path(dot + 1, len - 2 - nlen - 1, st));
            qpath_init(&e->path, dot + 1, len - 2 - nlen - 1);
        }
    }
    *out = e;
    e = NULL;
done:
    shl_expr_destroy(e);
    return ret;
}

static const expr_op_t *find_op(const char *name);

/* The $convert shorthands ($toInt, ...) report a wrong argument count with 50723. */
static expr_eval_fn
expr_op_convert_alias_marker(const expr_op_t *op)
{
    static const expr_eval_fn aliases[] = {
        expr_op_to_string,  expr_op_to_int,  expr_op_to_long,      expr_op_to_double,
        expr_op_to_decimal, expr_op_to_bool, expr_op_to_object_id, expr_op_to_date};
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++) {
        if (op->eval == aliases[i]) {
            return op->eval;
        }
    }
    return NULL;
}

static int
parse_op(const char *name, const bson_value_t *arg, shl_expr_t **out, shl_status_t *st)
{
    const expr_op_t *op = find_op(name);
    shl_expr_t *e = NULL;
    bson_iter_t it;
    bson_t view;
    ptrvec_t args = {0};
    int ret = 0;

    if (op == NULL) {
        SHL_FAIL(st, QC_EXPR_UNKNOWN, "Unrecognized expression '%s'", name);
    }
    e = expr_new(EXPR_OP);
    e->op = op;
    if (op->parse != NULL) {
        SHL_ERR(op->parse(op, arg, e, st));
        *out = e;
        e = NULL;
        goto done;
    }
    if (strcmp(name, "$literal") == 0 || strcmp(name, "$const") == 0) {
        /* $literal's argument is taken as is, never parsed. */
        shl_expr_t *c = expr_new(EXPR_CONST);
        expr_value_copy(arg, &c->constant);
        bson_free(e);
        *out = c;
        return 0;
    }
    if (strcmp(name, "$cond") == 0 && arg->value_type == BSON_TYPE_DOCUMENT) {
        /* {$cond: {if: , then: , else: }} becomes the three-argument form. */
        shl_expr_t *parts[3] = {NULL, NULL, NULL};
        static const char *keys[3] = {"if", "then", "else"};
        query_bson_view(arg, &view);
        bson_iter_init(&it, &view);
        while (shl_iter_next(&it)) {
            int k = -1;
            for (int i = 0; i < 3; i++) {
                if (strcmp(shl_iter_key(&it), keys[i]) == 0) {
                    k = i;
                }
            }
            if (k < 0) {
                for (int i = 0; i < 3; i++) {
                    shl_expr_destroy(parts[i]);
                }
                SHL_FAIL(st, QC_COND_UNKNOWN_ARG, "Unrecognized parameter to $cond: %s",
                         shl_iter_key(&it));
            }
            shl_expr_destroy(parts[k]);
            parts[k] = NULL;
            if ((ret = parse_value(bson_iter_value(&it), &parts[k], st)) != 0) {
                for (int i = 0; i < 3; i++) {
                    shl_expr_destroy(parts[i]);
                }
                goto done;
            }
        }
        for (int i = 0; i < 3; i++) {
            if (parts[i] == NULL) {
                for (int j = 0; j < 3; j++) {
                    shl_expr_destroy(parts[j]);
                }
                SHL_FAIL(st, QC_COND_MISSING + i, "Missing '%s' parameter to $cond", keys[i]);
            }
        }
        e->args = bson_malloc(3 * sizeof(shl_expr_t *));
        memcpy(e->args, parts, sizeof(parts));
        e->nargs = 3;
        *out = e;
        return 0;
    }
    if (arg->value_type == BSON_TYPE_ARRAY) {
        query_bson_view(arg, &view);
        bson_iter_init(&it, &view);
        while (shl_iter_next(&it)) {
            shl_expr_t *a = NULL;
            SHL_ERR(parse_value(bson_iter_value(&it), &a, st));
            ptrvec_push(&args, a);
        }
    } else {
        shl_expr_t *a = NULL;
        SHL_ERR(parse_value(arg, &a, st));
        ptrvec_push(&args, a);
    }
    if ((int)args.n < op->min_args || (op->max_args >= 0 && (int)args.n > op->max_args)) {
        if (strcmp(name, "$ifNull") == 0) {
            SHL_FAIL(st, 1257300, "$ifNull needs at least two arguments, had: %zu", args.n);
        }
        if (op->eval == expr_op_convert_alias_marker(op)) {
            SHL_FAIL(st, 50723, "%s requires a single argument, got %zu", name, args.n);
        }
        if (op->min_args == op->max_args) {
            SHL_FAIL(st, QC_EXPR_BAD_ARGC,
                     "Expression %s takes exactly %d arguments. %zu were "
                     "passed in.",
                     name, op->min_args, args.n);
        }
        if (op->max_args < 0) {
            SHL_FAIL(st, strcmp(name, "$setEquals") == 0 ? 17045 : QC_EXPR_BAD_ARGC,
                     "Expression %s takes at least %d arguments. %zu were passed in.", name,
                     op->min_args, args.n);
        }
        SHL_FAIL(st, QC_EXPR_BAD_ARGC_RANGE,
                 "Expression %s takes at least %d arguments, and at most "
                 "%d, but %zu were passed in.",
                 name, op->min_args, op->max_args, args.n);
    }
    e->args = (shl_expr_t **)args.v;
    e->nargs = args.n;
    args.v = NULL;
    args.n = 0;
    *out = e;
    e = NULL;
done:
    for (size_t i = 0; i < args.n; i++) {
        shl_expr_destroy(args.v[i]);
    }
    ptrvec_cleanup(&args);
    shl_expr_destroy(e);
    return ret;
}

static int parse_value_inner(const bson_value_t *spec, shl_expr_t **out, shl_status_t *st);

static int
cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
parse_value(const bson_value_t *spec, shl_expr_t **out, shl_status_t *st)
{
    int ret;
    if (tls_parse_depth >= EXPR_MAX_DEPTH) {
        *out = NULL;
        return shl_status_set(st, SHL_CODE_OVERFLOW,
                              "expression nesting exceeds the maximum depth of %d", EXPR_MAX_DEPTH);
    }
    tls_parse_depth++;
    ret = parse_value_inner(spec, out, st);
    tls_parse_depth--;
    return ret;
}

int
expr_parse_operand(const bson_value_t *spec, shl_expr_t **out, shl_status_t *st)
{
    return parse_value(spec, out, st);
}

int
expr_parse_named(const expr_op_t *op, const bson_value_t *arg, const char *const *keys,
                 size_t nkeys, shl_expr_t *e, int notobj_code, int unknown_code, shl_status_t *st)
{
    bson_t view;
    bson_iter_t it;
    int ret = 0;

    e->args = bson_malloc0(nkeys * sizeof(shl_expr_t *));
    e->nargs = nkeys;
    if (arg->value_type != BSON_TYPE_DOCUMENT) {
        SHL_FAIL(st, notobj_code, "%s only supports an object as its argument, found: %s", op->name,
                 shl_bson_type_name(arg->value_type));
    }
    query_bson_view(arg, &view);
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        size_t k = nkeys;
        for (size_t i = 0; i < nkeys; i++) {
            if (strcmp(shl_iter_key(&it), keys[i]) == 0) {
                k = i;
            }
        }
        if (k == nkeys) {
            SHL_FAIL(st, unknown_code, "%s found an unknown argument: %s", op->name,
                     shl_iter_key(&it));
        }
        shl_expr_destroy(e->args[k]);
        e->args[k] = NULL;
        SHL_ERR(parse_value(bson_iter_value(&it), &e->args[k], st));
    }
done:
    return ret;
}

static int
parse_value_inner(const bson_value_t *spec, shl_expr_t **out, shl_status_t *st)
{
    shl_expr_t *e = NULL;
    bson_iter_t it;
    bson_t view;
    ptrvec_t members = {0}, names = {0};
    int ret = 0;

    *out = NULL;
    switch (spec->value_type) {
    case BSON_TYPE_UTF8:
        if (spec->value.v_utf8.len > 0 && spec->value.v_utf8.str[0] == '$') {
            return parse_string(spec->value.v_utf8.str, spec->value.v_utf8.len, out, st);
        }
        break;
    case BSON_TYPE_DOCUMENT: {
        query_bson_view(spec, &view);
        if (bson_iter_init(&it, &view) && shl_iter_next(&it) && shl_iter_key(&it)[0] == '$') {
            const char *opname = shl_iter_key(&it);
            if (bson_count_keys(&view) != 1) {
                SHL_FAIL(st, QC_EXPR_OBJECT_ONE_FIELD,
                         "an expression specification must contain exactly one field, the name "
                         "of the expression. Found %u fields in %s",
                         bson_count_keys(&view), "the object");
            }
            return parse_op(opname, bson_iter_value(&it), out, st);
        }
        /* An object expression: every field is an expression. */
        e = expr_new(EXPR_OBJECT);
        bson_iter_init(&it, &view);
        while (shl_iter_next(&it)) {
            shl_expr_t *m = NULL;
            const char *key = shl_iter_key(&it);
            /* FieldPath::uassertValidFieldName, then no duplicates (16406). */
            if (key[0] == '\0') {
                SHL_FAIL(st, QC_FIELDPATH_EMPTY_COMPONENT,
                         "FieldPath field names may not be empty strings.");
            }
            if (key[0] == '$') {
                SHL_FAIL(st, QC_FIELDPATH_DOLLAR,
                         "FieldPath field names may not start with '$'. Consider using $getField "
                         "or $setField.");
            }
            if (strlen(key) != shl_iter_key_len(&it)) {
                SHL_FAIL(st, QC_FIELDPATH_NULL_BYTE,
                         "FieldPath field names may not contain '\\0'.");
            }
            if (strchr(key, '.') != NULL) {
                SHL_FAIL(st, QC_FIELDPATH_DOT_IN_NAME,
                         "FieldPath field names may not contain '.'. Consider using $getField or "
                         "$setField.");
            }
            SHL_ERR(parse_value(bson_iter_value(&it), &m, st));
            ptrvec_push(&members, m);
            ptrvec_push(&names, bson_strdup(shl_iter_key(&it)));
        }
        if (names.n > 1) {
            /* Duplicates, found by sorting a copy of the names (objects may be large). */
            char **sorted = bson_malloc(names.n * sizeof(char *));
            const char *dup = NULL;
            memcpy(sorted, names.v, names.n * sizeof(char *));
            qsort(sorted, names.n, sizeof(char *), cmp_cstr);
            for (size_t k = 1; k < names.n && dup == NULL; k++) {
                if (strcmp(sorted[k - 1], sorted[k]) == 0) {
                    dup = sorted[k];
                }
            }
            bson_free(sorted);
            if (dup != NULL) {
                SHL_FAIL(st, QC_EXPR_DUP_FIELD,
                         "duplicate field name specified in object literal: %s", dup);
            }
        }
        goto collect;
    }
    case BSON_TYPE_ARRAY:
        e = expr_new(EXPR_ARRAY);
        query_bson_view(spec, &view);
        bson_iter_init(&it, &view);
        while (shl_iter_next(&it)) {
            shl_expr_t *m = NULL;
            SHL_ERR(parse_value(bson_iter_value(&it), &m, st));
            ptrvec_push(&members, m);
        }
        goto collect;
    default:
        break;
    }
    e = expr_new(EXPR_CONST);
    expr_value_copy(spec, &e->constant);
    *out = e;
    return 0;
collect:
    e->args = (shl_expr_t **)members.v;
    e->nargs = members.n;
    e->names = (char **)names.v;
    members.v = NULL;
    members.n = 0;
    names.v = NULL;
    names.n = 0;
    *out = e;
    e = NULL;
done:
    for (size_t i = 0; i < members.n; i++) {
        shl_expr_destroy(members.v[i]);
    }
    for (size_t i = 0; i < names.n; i++) {
        bson_free(names.v[i]);
    }
    ptrvec_cleanup(&members);
    ptrvec_cleanup(&names);
    shl_expr_destroy(e);
    return ret;
}

int
shl_expr_parse(const bson_value_t *spec, shl_expr_t **out, shl_status_t *st)
{
    return parse_value(spec, out, st);
}

void
shl_expr_destroy(shl_expr_t *e)
{
    if (e == NULL) {
        return;
    }
    if (e->constant.value_type != BSON_TYPE_EOD) {
        bson_value_destroy(&e->constant);
    }
    bson_free(e->var);
    if (e->path.parts != NULL) {
        qpath_cleanup(&e->path);
    }
    for (size_t i = 0; i < e->nargs; i++) {
        shl_expr_destroy(e->args[i]);
        if (e->names != NULL) {
            bson_free(e->names[i]);
        }
    }
    bson_free(e->args);
    bson_free(e->names);
    bson_free(e);
}

bool
shl_expr_is_constant(const shl_expr_t *e)
{
    return e->kind == EXPR_CONST;
}

/* ---- evaluation ---- */

/* Aggregation field-path semantics: arrays map over their document elements. */
static void eval_path_doc(const bson_t *doc, const qpath_t *p, size_t idx, bson_value_t *out);

static void
eval_path_array(const bson_value_t *arr, const qpath_t *p, size_t idx, bson_value_t *out)
{
    bson_t view, res = BSON_INITIALIZER;
    bson_iter_t it;
    uint32_t n = 0;
    char key[16];
    const char *k;

    query_bson_view(arr, &view);
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        bson_value_t nested;
        bson_t sub;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            continue;
        }
        query_bson_view(bson_iter_value(&it), &sub);
        eval_path_doc(&sub, p, idx, &nested);
        if (nested.value_type != BSON_TYPE_EOD) {
            size_t klen = bson_uint32_to_string(n++, &k, key, sizeof(key));
            bson_append_value(&res, k, (int)klen, &nested);
            bson_value_destroy(&nested);
        }
    }
    expr_value_take_bson(&res, BSON_TYPE_ARRAY, out);
}

static void
eval_path_doc(const bson_t *doc, const qpath_t *p, size_t idx, bson_value_t *out)
{
    bson_iter_t it;
    const bson_value_t *v;
    bson_t sub;

    if (!bson_iter_init_find(&it, doc, p->parts[idx])) {
        expr_value_missing(out);
        return;
    }
    v = bson_iter_value(&it);
    if (idx == p->n - 1) {
        bson_value_copy(v, out);
        return;
    }
    if (v->value_type == BSON_TYPE_DOCUMENT) {
        query_bson_view(v, &sub);
        eval_path_doc(&sub, p, idx + 1, out);
    } else if (v->value_type == BSON_TYPE_ARRAY) {
        eval_path_array(v, p, idx + 1, out);
    } else {
        expr_value_missing(out);
    }
}

static void
eval_subpath(const bson_value_t *base, const qpath_t *p, bson_value_t *out)
{
    bson_t view;
    if (p->n == 0) {
        expr_value_copy(base, out);
    } else if (base->value_type == BSON_TYPE_DOCUMENT) {
        query_bson_view(base, &view);
        eval_path_doc(&view, p, 0, out);
    } else if (base->value_type == BSON_TYPE_ARRAY) {
        eval_path_array(base, p, 0, out);
    } else {
        expr_value_missing(out);
    }
}

static int64_t
now_ms(const shl_expr_ctx_t *ctx)
{
    struct timeval tv;
    bson_iter_t it;
    if (ctx->now_ms != 0) {
        return ctx->now_ms;
    }
    /* A command fixes $$NOW once for all its documents (db_let_vars binds NOW). */
    if (ctx->vars != NULL && bson_iter_init_find(&it, ctx->vars, "NOW") &&
        BSON_ITER_HOLDS_DATE_TIME(&it)) {
        return bson_iter_date_time(&it);
    }
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

int
expr_eval_args(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *vals, shl_status_t *st)
{
    int ret = 0;
    size_t i;
    for (i = 0; i < e->nargs; i++) {
        expr_value_missing(&vals[i]);
    }
    for (i = 0; i < e->nargs; i++) {
        SHL_ERR(shl_expr_evaluate(e->args[i], ctx, &vals[i], st));
    }
done:
    if (ret != 0) {
        /* Left missing, so a caller that destroys its values again on error is harmless. */
        for (i = 0; i < e->nargs; i++) {
            bson_value_destroy(&vals[i]);
            expr_value_missing(&vals[i]);
        }
    }
    return ret;
}

static int eval_inner(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out,
                      shl_status_t *st);

/*
 * Work budget: one top-level evaluation may produce at most EXPR_MAX_WORK_BYTES of array
 * elements and strings in total, so that loops such as a $reduce that doubles an array stop
 * with an error instead of running for hours.
 */
static __thread int tls_eval_depth;
static __thread uint64_t tls_work_bytes, tls_work_items;
uint64_t expr_max_work_items = EXPR_MAX_WORK_ITEMS;
uint64_t expr_max_work_bytes = EXPR_MAX_WORK_BYTES;

void
expr_budget_charge(size_t bytes)
{
    tls_work_bytes += bytes;
    tls_work_items++;
}

bool
expr_budget_exhausted(void)
{
    return tls_work_bytes > expr_max_work_bytes || tls_work_items > expr_max_work_items;
}

int
shl_expr_evaluate(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out,
                  shl_status_t *st)
{
    int ret;
    if (tls_eval_depth == 0) {
        tls_work_bytes = 0;
        tls_work_items = 0;
    }
    tls_eval_depth++;
    ret = eval_inner(e, ctx, out, st);
    tls_eval_depth--;
    if (ret == 0 && expr_budget_exhausted()) {
        bson_value_destroy(out);
        expr_value_missing(out);
        ret = shl_status_set(
            st, SHL_CODE_EXCEEDED_MEMORY_LIMIT,
            "expression evaluation exceeded its work limit (%llu bytes or %llu values built)",
            (unsigned long long)expr_max_work_bytes, (unsigned long long)expr_max_work_items);
    }
    return ret;
}

static int
eval_inner(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st)
{
    bson_value_t rootv;
    int ret = 0;

    expr_value_missing(out);
    switch (e->kind) {
    case EXPR_CONST:
        expr_value_copy(&e->constant, out);
        break;
    case EXPR_FIELD:
        if (ctx->root != NULL) {
            eval_path_doc(ctx->root, &e->path, 0, out);
        }
        break;
    case EXPR_VAR:
        if (strcmp(e->var, "ROOT") == 0 || strcmp(e->var, "CURRENT") == 0) {
            if (ctx->root == NULL) {
                break;
            }
            rootv.value_type = BSON_TYPE_DOCUMENT;
            {
                const uint8_t *data = bson_get_data(ctx->root);
                memcpy(&rootv.value.v_doc.data, &data, sizeof(data)); /* read-only view */
            }
            rootv.value.v_doc.data_len = ctx->root->len;
            eval_subpath(&rootv, &e->path, out);
        } else if (strcmp(e->var, "REMOVE") == 0) {
            break;
        } else if (strcmp(e->var, "NOW") == 0) {
            out->value_type = BSON_TYPE_DATE_TIME;
            out->value.v_datetime = now_ms(ctx);
        } else {
            bson_iter_t it;
            const bson_value_t *bound = scope_lookup(e->var);
            if (bound != NULL) {
                eval_subpath(bound, &e->path, out);
                break;
            }
            if (ctx->vars == NULL || !bson_iter_init_find(&it, ctx->vars, e->var)) {
                if (strcmp(e->var, "CLUSTER_TIME") == 0) {
                    /* Bound by the command on replica-set members and through a router. */
                    SHL_FAIL(st, 51144, "Builtin variable '$$CLUSTER_TIME' is not available");
                }
                if (strcmp(e->var, "SEARCH_META") == 0) {
                    /* Set only by $search/$searchMeta, which need Atlas Search (mongot). */
                    SHL_FAIL(st, 6347902,
                             "Can't access $$SEARCH_META without a $search stage earlier in the "
                             "pipeline");
                }
                SHL_FAIL(st, QC_UNDEFINED_VARIABLE, "Use of undefined variable: %s", e->var);
            }
            eval_subpath(bson_iter_value(&it), &e->path, out);
        }
        break;
    case EXPR_OBJECT: {
        bson_t doc = BSON_INITIALIZER;
        for (size_t i = 0; i < e->nargs; i++) {
            bson_value_t v;
            if ((ret = shl_expr_evaluate(e->args[i], ctx, &v, st)) != 0) {
                bson_destroy(&doc);
                goto done;
            }
            query_append_value(&doc, e->names[i], -1, &v);
            bson_value_destroy(&v);
        }
        expr_value_take_bson(&doc, BSON_TYPE_DOCUMENT, out);
        break;
    }
    case EXPR_ARRAY: {
        bson_t arr = BSON_INITIALIZER;
        char key[16];
        const char *k;
        for (size_t i = 0; i < e->nargs; i++) {
            bson_value_t v;
            if ((ret = shl_expr_evaluate(e->args[i], ctx, &v, st)) != 0) {
                bson_destroy(&arr);
                goto done;
            }
            /* Missing values in an array expression become null. */
            size_t klen = bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
            if (v.value_type == BSON_TYPE_EOD) {
                bson_append_null(&arr, k, (int)klen);
            } else {
                bson_append_value(&arr, k, (int)klen, &v);
            }
            bson_value_destroy(&v);
        }
        expr_value_take_bson(&arr, BSON_TYPE_ARRAY, out);
        break;
    }
    case EXPR_OP:
        ret = e->op->eval(e, ctx, out, st);
        break;
    }
    if ((e->kind == EXPR_FIELD || e->kind == EXPR_VAR) &&
        (out->value_type == BSON_TYPE_ARRAY || out->value_type == BSON_TYPE_DOCUMENT)) {
        /* Copies of large values count against the work budget too. */
        expr_budget_charge(out->value.v_doc.data_len);
    }
done:
    return ret;
}

int
shl_expr_evaluate_bool(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bool *out, shl_status_t *st)
{
    bson_value_t v;
    int ret = shl_expr_evaluate(e, ctx, &v, st);
    *out = ret == 0 && query_value_truthy(&v);
    bson_value_destroy(&v);
    return ret;
}

/* ---- operators ---- */

static int
eval_cmp_common(const shl_expr_t *e, const shl_expr_ctx_t *ctx, int *cmp, shl_status_t *st)
{
    bson_value_t v[2];
    int ret = expr_eval_args(e, ctx, v, st);
    if (ret == 0) {
        *cmp = shl_expr_compare_coll(&v[0], &v[1], ctx->collator);
        bson_value_destroy(&v[0]);
        bson_value_destroy(&v[1]);
    }
    return ret;
}

#define CMP_OP(fname, test)                                                                        \
    static int fname(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out,            \
                     shl_status_t *st)                                                             \
    {                                                                                              \
        int c = 0, ret = eval_cmp_common(e, ctx, &c, st);                                          \
        if (ret == 0) {                                                                            \
            expr_value_bool(out, test);                                                            \
        }                                                                                          \
        return ret;                                                                                \
    }

CMP_OP(op_eq, c == 0)
CMP_OP(op_ne, c != 0)
CMP_OP(op_gt, c > 0)
CMP_OP(op_gte, c >= 0)
CMP_OP(op_lt, c < 0)
CMP_OP(op_lte, c <= 0)

static int
op_cmp(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st)
{
    int c = 0, ret = eval_cmp_common(e, ctx, &c, st);
    if (ret == 0) {
        memset(out, 0, sizeof(*out));
        out->value_type = BSON_TYPE_INT32;
        out->value.v_int32 = c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    return ret;
}

static int
op_andor(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st,
         bool is_and)
{
    int ret = 0;
    for (size_t i = 0; i < e->nargs; i++) {
        bool b = false;
        SHL_ERR(shl_expr_evaluate_bool(e->args[i], ctx, &b, st));
        if (b != is_and) {
            expr_value_bool(out, !is_and);
            goto done;
        }
    }
    expr_value_bool(out, is_and);
done:
    return ret;
}

static int
op_and(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st)
{
    return op_andor(e, ctx, out, st, true);
}

static int
op_or(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st)
{
    return op_andor(e, ctx, out, st, false);
}

static int
op_not(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st)
{
    bool b = false;
    int ret = shl_expr_evaluate_bool(e->args[0], ctx, &b, st);
    if (ret == 0) {
        expr_value_bool(out, !b);
    }
    return ret;
}

static int
op_cond(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st)
{
    bool b = false;
    int ret = shl_expr_evaluate_bool(e->args[0], ctx, &b, st);
    if (ret == 0) {
        ret = shl_expr_evaluate(e->args[b ? 1 : 2], ctx, out, st);
    }
    return ret;
}

static int
op_ifnull(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st)
{
    int ret = 0;
    for (size_t i = 0; i < e->nargs; i++) {
        bson_value_t v;
        SHL_ERR(shl_expr_evaluate(e->args[i], ctx, &v, st));
        if (i == e->nargs - 1 || (v.value_type != BSON_TYPE_EOD && v.value_type != BSON_TYPE_NULL &&
                                  v.value_type != BSON_TYPE_UNDEFINED)) {
            *out = v;
            goto done;
        }
        bson_value_destroy(&v);
    }
done:
    return ret;
}

/* $add / $multiply over int/long/double (decimal is approximated as double; a date plus
 * numbers is a date for $add). The result type widens int -> long -> double as MongoDB's. */
static int
op_arith(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st,
         bool mul)
{
    bson_value_t *v = bson_malloc0((e->nargs + 1) * sizeof(bson_value_t));
    int64_t lsum = mul ? 1 : 0;
    double dsum = mul ? 1 : 0;
    bool is_long = false, is_double = false, is_date = false, overflow = false, null = false,
         is_dec = false;
    int ret = 0;
    char *js;

    SHL_ERR(expr_eval_args(e, ctx, v, st));
    for (size_t i = 0; i < e->nargs; i++) {
        bson_type_t t = v[i].value_type;
        int64_t x;
        if (t == BSON_TYPE_NULL || t == BSON_TYPE_UNDEFINED || t == BSON_TYPE_EOD) {
            null = true;
            continue;
        }
        if (t == BSON_TYPE_DATE_TIME && !mul) {
            if (is_date) {
                SHL_FAIL(st, 16612, "only one date allowed in an $add expression");
            }
            is_date = true;
            x = v[i].value.v_datetime;
        } else if (t == BSON_TYPE_INT32) {
            x = v[i].value.v_int32;
        } else if (t == BSON_TYPE_INT64) {
            x = v[i].value.v_int64;
            is_long = true;
        } else if (t == BSON_TYPE_DOUBLE || t == BSON_TYPE_DECIMAL128) {
            is_double = true;
            is_dec = is_dec || t == BSON_TYPE_DECIMAL128;
            x = 0;
        } else {
            js = query_value_to_json(&v[i]);
            bson_free(js);
            SHL_FAIL(st, mul ? QC_MULTIPLY_TYPE : QC_ADD_TYPE,
                     "%s only supports numeric%s types, not %s", mul ? "$multiply" : "$add",
                     mul ? "" : " or date", shl_bson_type_name(t));
        }
        dsum = mul ? dsum * query_value_as_double(&v[i]) : dsum + query_value_as_double(&v[i]);
        if (t != BSON_TYPE_DOUBLE && t != BSON_TYPE_DECIMAL128) {
            if (mul ? __builtin_mul_overflow(lsum, x, &lsum)
                    : __builtin_add_overflow(lsum, x, &lsum)) {
                overflow = true;
            }
        }
    }
    memset(out, 0, sizeof(*out));
    if (null) {
        out->value_type = BSON_TYPE_NULL;
    } else if (is_date) {
        out->value_type = BSON_TYPE_DATE_TIME;
        out->value.v_datetime =
            is_double ? (isfinite(dsum) && fabs(dsum) < 9.2e18 ? (int64_t)llround(dsum) : 0) : lsum;
    } else if (is_dec) {
        /* a decimal input makes a decimal result (computed through double precision) */
        expr_value_decimal_from_double(out, dsum);
    } else if (is_double || overflow) {
        out->value_type = BSON_TYPE_DOUBLE;
        out->value.v_double = dsum;
    } else if (is_long || lsum > INT32_MAX || lsum < INT32_MIN) {
        out->value_type = BSON_TYPE_INT64;
        out->value.v_int64 = lsum;
    } else {
        out->value_type = BSON_TYPE_INT32;
        out->value.v_int32 = (int32_t)lsum;
    }
done:
    for (size_t i = 0; i < e->nargs; i++) {
        bson_value_destroy(&v[i]);
    }
    bson_free(v);
    return ret;
}

static int
op_add(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st)
{
    return op_arith(e, ctx, out, st, false);
}

static int
op_multiply(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st)
{
    return op_arith(e, ctx, out, st, true);
}

static int
op_concat(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st)
{
    bson_string_t *s = bson_string_new("");
    int ret = 0;
    bool null = false;
    for (size_t i = 0; i < e->nargs; i++) {
        bson_value_t v;
        SHL_ERR(shl_expr_evaluate(e->args[i], ctx, &v, st));
        if (v.value_type == BSON_TYPE_UTF8) {
            bson_string_append(s, v.value.v_utf8.str);
            expr_budget_charge(v.value.v_utf8.len);
            if (s->len > EXPR_MAX_VALUE_BYTES) {
                bson_value_destroy(&v);
                SHL_FAIL(st, QC_BUF_TOO_BIG,
                         "$concat: the result exceeds the %d byte limit for a value",
                         EXPR_MAX_VALUE_BYTES);
            }
        } else if (v.value_type == BSON_TYPE_NULL || v.value_type == BSON_TYPE_EOD ||
                   v.value_type == BSON_TYPE_UNDEFINED) {
            null = true;
        } else {
            bson_type_t t = v.value_type;
            bson_value_destroy(&v);
            SHL_FAIL(st, QC_CONCAT_TYPE, "$concat only supports strings, not %s",
                     shl_bson_type_name(t));
        }
        bson_value_destroy(&v);
    }
    memset(out, 0, sizeof(*out));
    if (null) {
        out->value_type = BSON_TYPE_NULL;
    } else {
        out->value_type = BSON_TYPE_UTF8;
        out->value.v_utf8.len = s->len;
        out->value.v_utf8.str = bson_strdup(s->str);
    }
done:
    bson_string_free(s, true);
    return ret;
}

static int
op_size(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st)
{
    bson_value_t v;
    bson_t view;
    int ret = shl_expr_evaluate(e->args[0], ctx, &v, st);
    if (ret != 0) {
        return ret;
    }
    if (v.value_type != BSON_TYPE_ARRAY) {
        ret = shl_status_set(st, QC_SIZE_TYPE,
                             "The argument to $size must be an array. Type of argument is %s",
                             shl_bson_type_name(v.value_type));
    } else {
        query_bson_view(&v, &view);
        memset(out, 0, sizeof(*out));
        out->value_type = BSON_TYPE_INT32;
        out->value.v_int32 = (int32_t)bson_count_keys(&view);
    }
    bson_value_destroy(&v);
    return ret;
}

static int
op_literal(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st)
{
    return shl_expr_evaluate(e->args[0], ctx, out, st);
}

/* {$let: {vars: {name: <expr>, ...}, in: <expr>}}: args are the vars' expressions, then 'in'. */
static EXPR_PARSE(parse_let)
{
    bson_t view, vars;
    bson_iter_t it, vars_it, in_it;
    const bson_value_t *varsv = NULL, *inv = NULL;
    ptrvec_t args = {0}, names = {0};
    int ret = 0;

    (void)op;
    if (arg->value_type != BSON_TYPE_DOCUMENT) {
        SHL_FAIL(st, 16874, "$let only supports an object as its argument");
    }
    query_bson_view(arg, &view);
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        if (strcmp(shl_iter_key(&it), "vars") == 0) {
            vars_it = it;
            varsv = bson_iter_value(&vars_it);
        } else if (strcmp(shl_iter_key(&it), "in") == 0) {
            in_it = it;
            inv = bson_iter_value(&in_it);
        } else {
            SHL_FAIL(st, 16875, "Unrecognized parameter to $let: %s", shl_iter_key(&it));
        }
    }
    if (varsv == NULL) {
        SHL_FAIL(st, 16876, "Missing 'vars' parameter to $let");
    }
    if (inv == NULL) {
        SHL_FAIL(st, 16877, "Missing 'in' parameter to $let");
    }
    if (varsv->value_type != BSON_TYPE_DOCUMENT) {
        SHL_FAIL(st, 10065, "invalid parameter: expected an object (vars)");
    }
    query_bson_view(varsv, &vars);
    bson_iter_init(&it, &vars);
    while (shl_iter_next(&it)) {
        shl_expr_t *a = NULL;
        SHL_ERR(expr_check_user_var_name(shl_iter_key(&it), st));
        SHL_ERR(parse_value(bson_iter_value(&it), &a, st));
        ptrvec_push(&args, a);
        ptrvec_push(&names, bson_strdup(shl_iter_key(&it)));
    }
    {
        shl_expr_t *a = NULL;
        SHL_ERR(parse_value(inv, &a, st));
        ptrvec_push(&args, a);
        ptrvec_push(&names, NULL);
    }
    e->args = (shl_expr_t **)args.v;
    e->names = (char **)names.v;
    e->nargs = args.n;
    args.v = names.v = NULL;
    args.n = names.n = 0;
done:
    for (size_t i = 0; i < args.n; i++) {
        shl_expr_destroy(args.v[i]);
    }
    for (size_t i = 0; i < names.n; i++) {
        bson_free(names.v[i]);
    }
    ptrvec_cleanup(&args);
    ptrvec_cleanup(&names);
    return ret;
}

static EXPR_FN(op_let)
{
    size_t n = e->nargs - 1;
    bson_value_t *vals = bson_malloc0((n + 1) * sizeof(bson_value_t));
    int ret = 0;
    for (size_t i = 0; i < n; i++) {
        expr_value_missing(&vals[i]);
    }
    for (size_t i = 0; i < n; i++) {
        SHL_ERR(shl_expr_evaluate(e->args[i], ctx, &vals[i], st));
    }
    ret = expr_eval_scoped(e->args[n], ctx, (const char *const *)e->names, vals, n, out, st);
done:
    for (size_t i = 0; i < n; i++) {
        bson_value_destroy(&vals[i]);
    }
    bson_free(vals);
    return ret;
}

/* {$switch: {branches: [{case:, then:}, ...], default:}}: args are case/then pairs, then the
 * default (NULL when absent); nsub is the number of branches. */
static EXPR_PARSE(parse_switch)
{
    bson_t view, branches, br;
    bson_iter_t it, bit, kit;
    ptrvec_t args = {0};
    shl_expr_t *deflt = NULL;
    int ret = 0;

    (void)op;
    if (arg->value_type != BSON_TYPE_DOCUMENT) {
        SHL_FAIL(st, 40060, "$switch requires an object as an argument, found: %s",
                 shl_bson_type_name(arg->value_type));
    }
    query_bson_view(arg, &view);
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *key = shl_iter_key(&it);
        if (strcmp(key, "branches") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&it)) {
                SHL_FAIL(st, 40061, "$switch expected an array for 'branches', found: %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            query_bson_view(bson_iter_value(&it), &branches);
            bson_iter_init(&bit, &branches);
            while (shl_iter_next(&bit)) {
                shl_expr_t *c = NULL, *t = NULL;
                if (!BSON_ITER_HOLDS_DOCUMENT(&bit)) {
                    SHL_FAIL(st, 40062, "$switch expected each branch to be an object, found: %s",
                             shl_bson_type_name(shl_iter_type(&bit)));
                }
                query_bson_view(bson_iter_value(&bit), &br);
                bson_iter_init(&kit, &br);
                while (shl_iter_next(&kit)) {
                    shl_expr_t **slot = NULL;
                    if (strcmp(shl_iter_key(&kit), "case") == 0) {
                        slot = &c;
                    } else if (strcmp(shl_iter_key(&kit), "then") == 0) {
                        slot = &t;
                    } else {
                        shl_expr_destroy(c);
                        shl_expr_destroy(t);
                        SHL_FAIL(st, 40063, "$switch found an unknown argument to a branch: %s",
                                 shl_iter_key(&kit));
                    }
                    shl_expr_destroy(*slot);
                    *slot = NULL;
                    if ((ret = parse_value(bson_iter_value(&kit), slot, st)) != 0) {
                        shl_expr_destroy(c);
                        shl_expr_destroy(t);
                        goto done;
                    }
                }
                if (c == NULL) {
                    shl_expr_destroy(t);
                    SHL_FAIL(st, 40064, "$switch requires each branch have a 'case' expression");
                }
                if (t == NULL) {
                    shl_expr_destroy(c);
                    SHL_FAIL(st, 40065, "$switch requires each branch have a 'then' expression.");
                }
                ptrvec_push(&args, c);
                ptrvec_push(&args, t);
            }
        } else if (strcmp(key, "default") == 0) {
            shl_expr_destroy(deflt);
            deflt = NULL;
            SHL_ERR(parse_value(bson_iter_value(&it), &deflt, st));
        } else {
            SHL_FAIL(st, 40067, "$switch found an unknown argument: %s", key);
        }
    }
    if (args.n == 0) {
        SHL_FAIL(st, 40068, "$switch requires at least one branch.");
    }
    e->nsub = args.n / 2;
    ptrvec_push(&args, deflt);
    deflt = NULL;
    e->args = (shl_expr_t **)args.v;
    e->nargs = args.n;
    args.v = NULL;
    args.n = 0;
done:
    for (size_t i = 0; i < args.n; i++) {
        shl_expr_destroy(args.v[i]);
    }
    ptrvec_cleanup(&args);
    shl_expr_destroy(deflt);
    return ret;
}

static EXPR_FN(op_switch)
{
    int ret = 0;
    for (size_t i = 0; i < e->nsub; i++) {
        bool b = false;
        SHL_ERR(shl_expr_evaluate_bool(e->args[2 * i], ctx, &b, st));
        if (b) {
            return shl_expr_evaluate(e->args[2 * i + 1], ctx, out, st);
        }
    }
    if (e->args[2 * e->nsub] == NULL) {
        SHL_FAIL(st, 40066,
                 "$switch could not find a matching branch for an input, and no default was "
                 "specified.");
    }
    ret = shl_expr_evaluate(e->args[2 * e->nsub], ctx, out, st);
done:
    return ret;
}

/* {$rand: {}} (or []): no arguments. */
static EXPR_PARSE(parse_rand)
{
    bson_t view;
    int ret = 0;
    (void)op;
    (void)e;
    if (arg->value_type != BSON_TYPE_DOCUMENT && arg->value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, 10065, "invalid parameter: expected an object ($rand)");
    }
    query_bson_view(arg, &view);
    if (bson_count_keys(&view) != 0) {
        SHL_FAIL(st, 3040501, "$rand does not currently accept arguments");
    }
done:
    return ret;
}

/* {$meta: "<name>"}: the document's metadata. Only textScore is kept (by a text search, in
 * SHL_TEXT_SCORE_FIELD); the other names MongoDB knows evaluate to missing. */
#define META_TEXT_SCORE 1
static EXPR_PARSE(parse_meta)
{
    static const char *const names[] = {"textScore",
                                        "randVal",
                                        "searchScore",
                                        "searchHighlights",
                                        "geoNearDistance",
                                        "geoNearPoint",
                                        "recordId",
                                        "indexKey",
                                        "sortKey",
                                        "searchScoreDetails",
                                        "searchSequenceToken",
                                        "vectorSearchScore",
                                        NULL};
    const char *name;
    bool known = false;
    int ret = 0;
    (void)op;
    if (arg->value_type != BSON_TYPE_UTF8) {
        SHL_FAIL(st, 17307, "$meta only supports string arguments");
    }
    name = arg->value.v_utf8.str;
    for (size_t i = 0; names[i] != NULL && !known; i++) {
        known = strcmp(names[i], name) == 0;
    }
    if (!known) {
        SHL_FAIL(st, 17308, "Unsupported argument to $meta: %s", name);
    }
    e->flags = strcmp(name, "textScore") == 0 ? META_TEXT_SCORE : 0;
done:
    return ret;
}

static EXPR_FN(op_meta)
{
    double score;
    (void)st;
    if (e->flags == META_TEXT_SCORE && ctx->root != NULL && shl_text_score_get(ctx->root, &score)) {
        expr_value_double(out, score);
    } else {
        expr_value_missing(out);
    }
    return 0;
}

/* One table for every operator; kept sorted by name for readers, searched linearly. */
static const expr_op_t ops[] = {
    {"$abs", 1, 1, expr_op_abs, NULL},
    {"$add", 0, -1, op_add, NULL},
    {"$allElementsTrue", 1, 1, expr_op_all_elements_true, NULL},
    {"$and", 0, -1, op_and, NULL},
    {"$anyElementTrue", 1, 1, expr_op_any_element_true, NULL},
    {"$arrayElemAt", 2, 2, expr_op_array_elem_at, NULL},
    {"$arrayToObject", 1, 1, expr_op_array_to_object, NULL},
    {"$avg", 0, -1, expr_op_avg, NULL},
    {"$ceil", 1, 1, expr_op_ceil, NULL},
    {"$cmp", 2, 2, op_cmp, NULL},
    {"$concat", 0, -1, op_concat, NULL},
    {"$concatArrays", 0, -1, expr_op_concat_arrays, NULL},
    {"$cond", 3, 3, op_cond, NULL},
    {"$const", 1, 1, op_literal, NULL},
    {"$convert", 0, 0, expr_op_convert, expr_parse_convert},
    {"$dateAdd", 0, 0, expr_op_date_add, expr_parse_date_add},
    {"$dateDiff", 0, 0, expr_op_date_diff, expr_parse_date_diff},
    {"$dateFromString", 0, 0, expr_op_date_from_string, expr_parse_date_from_string},
    {"$dateSubtract", 0, 0, expr_op_date_subtract, expr_parse_date_add},
    {"$dateToString", 0, 0, expr_op_date_to_string, expr_parse_date_to_string},
    {"$dateTrunc", 0, 0, expr_op_date_trunc, expr_parse_date_trunc},
    {"$dayOfMonth", 0, 0, expr_op_day_of_month, expr_parse_date_part},
    {"$dayOfWeek", 0, 0, expr_op_day_of_week, expr_parse_date_part},
    {"$dayOfYear", 0, 0, expr_op_day_of_year, expr_parse_date_part},
    {"$divide", 2, 2, expr_op_divide, NULL},
    {"$eq", 2, 2, op_eq, NULL},
    {"$exp", 1, 1, expr_op_exp, NULL},
    {"$filter", 0, 0, expr_op_filter, expr_parse_filter},
    {"$first", 1, 1, expr_op_first, NULL},
    {"$floor", 1, 1, expr_op_floor, NULL},
    {"$getField", 0, 0, expr_op_get_field, expr_parse_get_field},
    {"$gt", 2, 2, op_gt, NULL},
    {"$gte", 2, 2, op_gte, NULL},
    {"$hour", 0, 0, expr_op_hour, expr_parse_date_part},
    {"$ifNull", 2, -1, op_ifnull, NULL},
    {"$in", 2, 2, expr_op_in, NULL},
    {"$indexOfArray", 2, 4, expr_op_index_of_array, NULL},
    {"$indexOfBytes", 2, 4, expr_op_index_of_bytes, NULL},
    {"$indexOfCP", 2, 4, expr_op_index_of_cp, NULL},
    {"$isArray", 1, 1, expr_op_is_array, NULL},
    {"$isNumber", 1, 1, expr_op_is_number, NULL},
    {"$isoDayOfWeek", 0, 0, expr_op_iso_day_of_week, expr_parse_date_part},
    {"$isoWeek", 0, 0, expr_op_iso_week, expr_parse_date_part},
    {"$isoWeekYear", 0, 0, expr_op_iso_week_year, expr_parse_date_part},
    {"$last", 1, 1, expr_op_last, NULL},
    {"$let", 0, 0, op_let, parse_let},
    {"$literal", 1, 1, op_literal, NULL},
    {"$ln", 1, 1, expr_op_ln, NULL},
    {"$log", 2, 2, expr_op_log, NULL},
    {"$log10", 1, 1, expr_op_log10, NULL},
    {"$lt", 2, 2, op_lt, NULL},
    {"$lte", 2, 2, op_lte, NULL},
    {"$ltrim", 0, 0, expr_op_trim, expr_parse_trim},
    {"$map", 0, 0, expr_op_map, expr_parse_map},
    {"$max", 0, -1, expr_op_max, NULL},
    {"$mergeObjects", 0, -1, expr_op_merge_objects, NULL},
    {"$meta", 0, 0, op_meta, parse_meta},
    {"$millisecond", 0, 0, expr_op_millisecond, expr_parse_date_part},
    {"$min", 0, -1, expr_op_min, NULL},
    {"$minute", 0, 0, expr_op_minute, expr_parse_date_part},
    {"$mod", 2, 2, expr_op_mod, NULL},
    {"$month", 0, 0, expr_op_month, expr_parse_date_part},
    {"$multiply", 0, -1, op_multiply, NULL},
    {"$ne", 2, 2, op_ne, NULL},
    {"$not", 1, 1, op_not, NULL},
    {"$objectToArray", 1, 1, expr_op_object_to_array, NULL},
    {"$or", 0, -1, op_or, NULL},
    {"$pow", 2, 2, expr_op_pow, NULL},
    {"$rand", 0, 0, expr_op_rand, parse_rand},
    {"$range", 2, 3, expr_op_range, NULL},
    {"$reduce", 0, 0, expr_op_reduce, expr_parse_reduce},
    {"$regexFind", 0, 0, expr_op_regex_find, expr_parse_regex},
    {"$regexFindAll", 0, 0, expr_op_regex_find_all, expr_parse_regex},
    {"$regexMatch", 0, 0, expr_op_regex_match, expr_parse_regex},
    {"$replaceAll", 0, 0, expr_op_replace_all, expr_parse_replace},
    {"$replaceOne", 0, 0, expr_op_replace_one, expr_parse_replace},
    {"$reverseArray", 1, 1, expr_op_reverse_array, NULL},
    {"$round", 1, 2, expr_op_round, NULL},
    {"$rtrim", 0, 0, expr_op_trim, expr_parse_trim},
    {"$second", 0, 0, expr_op_second, expr_parse_date_part},
    {"$setDifference", 2, 2, expr_op_set_difference, NULL},
    {"$setEquals", 2, -1, expr_op_set_equals, NULL},
    {"$setField", 0, 0, expr_op_set_field, expr_parse_set_field},
    {"$setIntersection", 0, -1, expr_op_set_intersection, NULL},
    {"$setIsSubset", 2, 2, expr_op_set_is_subset, NULL},
    {"$setUnion", 0, -1, expr_op_set_union, NULL},
    {"$size", 1, 1, op_size, NULL},
    {"$slice", 2, 3, expr_op_slice, NULL},
    {"$sortArray", 0, 0, expr_op_sort_array, expr_parse_sort_array},
    {"$split", 2, 2, expr_op_split, NULL},
    {"$sqrt", 1, 1, expr_op_sqrt, NULL},
    {"$strLenBytes", 1, 1, expr_op_strlen_bytes, NULL},
    {"$strLenCP", 1, 1, expr_op_strlen_cp, NULL},
    {"$strcasecmp", 2, 2, expr_op_strcasecmp, NULL},
    {"$substr", 3, 3, expr_op_substr_bytes, NULL},
    {"$substrBytes", 3, 3, expr_op_substr_bytes, NULL},
    {"$substrCP", 3, 3, expr_op_substr_cp, NULL},
    {"$subtract", 2, 2, expr_op_subtract, NULL},
    {"$sum", 0, -1, expr_op_sum, NULL},
    {"$switch", 0, 0, op_switch, parse_switch},
    {"$toBool", 1, 1, expr_op_to_bool, NULL},
    {"$toDate", 1, 1, expr_op_to_date, NULL},
    {"$toDecimal", 1, 1, expr_op_to_decimal, NULL},
    {"$toDouble", 1, 1, expr_op_to_double, NULL},
    {"$toHashedIndexKey", 1, 1, expr_op_to_hashed_index_key, NULL},
    {"$toInt", 1, 1, expr_op_to_int, NULL},
    {"$toLong", 1, 1, expr_op_to_long, NULL},
    {"$toLower", 1, 1, expr_op_to_lower, NULL},
    {"$toObjectId", 1, 1, expr_op_to_object_id, NULL},
    {"$toString", 1, 1, expr_op_to_string, NULL},
    {"$toUpper", 1, 1, expr_op_to_upper, NULL},
    {"$trim", 0, 0, expr_op_trim, expr_parse_trim},
    {"$trunc", 1, 2, expr_op_trunc, NULL},
    {"$type", 1, 1, expr_op_type, NULL},
    {"$unsetField", 0, 0, expr_op_set_field, expr_parse_unset_field},
    {"$week", 0, 0, expr_op_week, expr_parse_date_part},
    {"$year", 0, 0, expr_op_year, expr_parse_date_part},
    {"$zip", 0, 0, expr_op_zip, expr_parse_zip},
};

static const expr_op_t *
find_op(const char *name)
{
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        if (strcmp(ops[i].name, name) == 0) {
            return &ops[i];
        }
    }
    return NULL;
}
