/*
 * expression.c -- parse and evaluate aggregation expressions (expression.h). The core
 * set is what filters ($expr), projections and update pipelines need: field paths,
 * variables, literals, object/array expressions, comparisons, boolean logic, $cond,
 * $ifNull, $add, $multiply, $concat, $size, $literal. The aggregation engine adds more
 * rows to the operator table below.
 */
#include "query/expression_private.h"

#include <math.h>
#include <string.h>
#include <sys/time.h>

#include "bson/bson_compare.h"

#define QC_UNDEFINED_VARIABLE 17276
#define QC_FIELDPATH_EMPTY_COMPONENT 15998
#define QC_DOLLAR_ALONE 16872
#define QC_EXPR_OBJECT_ONE_FIELD 15983
#define QC_EXPR_DOLLAR_IN_OBJECT 16404
#define QC_ADD_TYPE 16554
#define QC_MULTIPLY_TYPE 16555
#define QC_CONCAT_TYPE 16702
#define QC_SIZE_TYPE 17124
#define QC_COND_MISSING 17080
#define QC_COND_UNKNOWN_ARG 17083
#define QC_VAR_NAME_INVALID 16870

static void
value_take_bson(bson_t *b, bson_type_t type, bson_value_t *out)
{
    out->value_type = type;
    out->value.v_doc.data_len = b->len;
    out->value.v_doc.data = bson_malloc(b->len);
    memcpy(out->value.v_doc.data, bson_get_data(b), b->len);
    bson_destroy(b);
}

static void
value_missing(bson_value_t *v)
{
    memset(v, 0, sizeof(*v));
    v->value_type = BSON_TYPE_EOD;
}

static void
value_bool(bson_value_t *v, bool b)
{
    memset(v, 0, sizeof(*v));
    v->value_type = BSON_TYPE_BOOL;
    v->value.v_bool = b;
}

static void
value_copy(const bson_value_t *src, bson_value_t *dst)
{
    if (src->value_type == BSON_TYPE_EOD) {
        value_missing(dst);
    } else {
        bson_value_copy(src, dst);
    }
}

int
shl_expr_compare(const bson_value_t *a, const bson_value_t *b)
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
    return shl_bson_value_compare(a, b);
}

/* ---- parsing ---- */

static int parse_value(const bson_value_t *spec, shl_expr_t **out, shl_status_t *st);

static shl_expr_t *
expr_new(expr_kind_t kind)
{
    shl_expr_t *e = bson_malloc0(sizeof(*e));
    e->kind = kind;
    value_missing(&e->constant);
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
        if (strcmp(e->var, "ROOT") != 0 && strcmp(e->var, "CURRENT") != 0 &&
            strcmp(e->var, "REMOVE") != 0 && strcmp(e->var, "NOW") != 0 &&
            !(e->var[0] >= 'a' && e->var[0] <= 'z')) {
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
    if (strcmp(name, "$literal") == 0) {
        /* $literal's argument is taken as is, never parsed. */
        shl_expr_t *c = expr_new(EXPR_CONST);
        value_copy(arg, &c->constant);
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
        while (bson_iter_next(&it)) {
            int k = -1;
            for (int i = 0; i < 3; i++) {
                if (strcmp(bson_iter_key(&it), keys[i]) == 0) {
                    k = i;
                }
            }
            if (k < 0) {
                for (int i = 0; i < 3; i++) {
                    shl_expr_destroy(parts[i]);
                }
                SHL_FAIL(st, QC_COND_UNKNOWN_ARG, "Unrecognized parameter to $cond: %s",
                         bson_iter_key(&it));
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
                SHL_FAIL(st, QC_COND_MISSING, "Missing '%s' parameter to $cond", keys[i]);
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
        while (bson_iter_next(&it)) {
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
        if (op->min_args == op->max_args) {
            SHL_FAIL(st, QC_EXPR_BAD_ARGC,
                     "Expression %s takes exactly %d arguments. %zu were "
                     "passed in.",
                     name, op->min_args, args.n);
        }
        SHL_FAIL(st, QC_EXPR_BAD_ARGC,
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

static int
parse_value(const bson_value_t *spec, shl_expr_t **out, shl_status_t *st)
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
        if (bson_iter_init(&it, &view) && bson_iter_next(&it) && bson_iter_key(&it)[0] == '$') {
            const char *opname = bson_iter_key(&it);
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
        while (bson_iter_next(&it)) {
            shl_expr_t *m = NULL;
            if (bson_iter_key(&it)[0] == '$') {
                SHL_FAIL(st, QC_EXPR_DOLLAR_IN_OBJECT,
                         "field path references must be prefixed with a '$' ('%s'", "");
            }
            SHL_ERR(parse_value(bson_iter_value(&it), &m, st));
            ptrvec_push(&members, m);
            ptrvec_push(&names, bson_strdup(bson_iter_key(&it)));
        }
        goto collect;
    }
    case BSON_TYPE_ARRAY:
        e = expr_new(EXPR_ARRAY);
        query_bson_view(spec, &view);
        bson_iter_init(&it, &view);
        while (bson_iter_next(&it)) {
            shl_expr_t *m = NULL;
            SHL_ERR(parse_value(bson_iter_value(&it), &m, st));
            ptrvec_push(&members, m);
        }
        goto collect;
    default:
        break;
    }
    e = expr_new(EXPR_CONST);
    value_copy(spec, &e->constant);
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
    while (bson_iter_next(&it)) {
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
    value_take_bson(&res, BSON_TYPE_ARRAY, out);
}

static void
eval_path_doc(const bson_t *doc, const qpath_t *p, size_t idx, bson_value_t *out)
{
    bson_iter_t it;
    const bson_value_t *v;
    bson_t sub;

    if (!bson_iter_init_find(&it, doc, p->parts[idx])) {
        value_missing(out);
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
        value_missing(out);
    }
}

static void
eval_subpath(const bson_value_t *base, const qpath_t *p, bson_value_t *out)
{
    bson_t view;
    if (p->n == 0) {
        value_copy(base, out);
    } else if (base->value_type == BSON_TYPE_DOCUMENT) {
        query_bson_view(base, &view);
        eval_path_doc(&view, p, 0, out);
    } else if (base->value_type == BSON_TYPE_ARRAY) {
        eval_path_array(base, p, 0, out);
    } else {
        value_missing(out);
    }
}

static int64_t
now_ms(const shl_expr_ctx_t *ctx)
{
    struct timeval tv;
    if (ctx->now_ms != 0) {
        return ctx->now_ms;
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
        value_missing(&vals[i]);
    }
    for (i = 0; i < e->nargs; i++) {
        SHL_ERR(shl_expr_evaluate(e->args[i], ctx, &vals[i], st));
    }
done:
    if (ret != 0) {
        for (i = 0; i < e->nargs; i++) {
            bson_value_destroy(&vals[i]);
        }
    }
    return ret;
}

int
shl_expr_evaluate(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out,
                  shl_status_t *st)
{
    bson_value_t rootv;
    int ret = 0;

    value_missing(out);
    switch (e->kind) {
    case EXPR_CONST:
        value_copy(&e->constant, out);
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
            if (ctx->vars == NULL || !bson_iter_init_find(&it, ctx->vars, e->var)) {
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
        value_take_bson(&doc, BSON_TYPE_DOCUMENT, out);
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
        value_take_bson(&arr, BSON_TYPE_ARRAY, out);
        break;
    }
    case EXPR_OP:
        ret = e->op->eval(e, ctx, out, st);
        break;
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
        *cmp = shl_expr_compare(&v[0], &v[1]);
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
            value_bool(out, test);                                                                 \
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
            value_bool(out, !is_and);
            goto done;
        }
    }
    value_bool(out, is_and);
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
        value_bool(out, !b);
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
    bool is_long = false, is_double = false, is_date = false, overflow = false, null = false;
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
                SHL_FAIL(st, QC_ADD_TYPE, "only one date allowed in an $add expression");
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

static const expr_op_t ops[] = {
    {"$add", 0, -1, op_add},
    {"$and", 0, -1, op_and},
    {"$cmp", 2, 2, op_cmp},
    {"$concat", 0, -1, op_concat},
    {"$cond", 3, 3, op_cond},
    {"$eq", 2, 2, op_eq},
    {"$gt", 2, 2, op_gt},
    {"$gte", 2, 2, op_gte},
    {"$ifNull", 2, -1, op_ifnull},
    {"$literal", 1, 1, op_literal},
    {"$lt", 2, 2, op_lt},
    {"$lte", 2, 2, op_lte},
    {"$multiply", 0, -1, op_multiply},
    {"$ne", 2, 2, op_ne},
    {"$not", 1, 1, op_not},
    {"$or", 0, -1, op_or},
    {"$size", 1, 1, op_size},
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
