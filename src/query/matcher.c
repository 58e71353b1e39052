/*
 * matcher.c -- parse a filter into a tree of match nodes and evaluate it (matcher.h).
 * The parser follows MongoDB 7.0's MatchExpressionParser (same operator tables, parse
 * levels and error codes); evaluation follows its path traversal (BSONElementIterator):
 * a leaf predicate is tested against every value a dotted path reaches, arrays being
 * traversed implicitly and numeric components also selecting array positions.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bson/bson_iter.h"
#include "query/matcher.h"

#include <math.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "bson/bson_compare.h"
#include "query/expression.h"
#include "query/query_private.h"

typedef enum nkind {
    N_AND,
    N_OR,
    N_NOR,
    N_NOT,
    N_TRUE,
    N_FALSE,
    N_TEXT, /* a $text under $or: the caller's search (shl_matcher_set_text) decides */
    N_EQ,
    N_LT,
    N_LTE,
    N_GT,
    N_GTE,
    N_IN,
    N_EXISTS,
    N_TYPE,
    N_REGEX,
    N_MOD,
    N_SIZE,
    N_ELEM_OBJ,
    N_ELEM_VAL,
    N_BITS_ALL_SET,
    N_BITS_ALL_CLEAR,
    N_BITS_ANY_SET,
    N_BITS_ANY_CLEAR,
    N_EXPR,
    N_JSON_SCHEMA,
} nkind_t;

typedef struct mnode mnode_t;
struct mnode {
    nkind_t kind;
    bool has_path;
    qpath_t path;
    mnode_t **kids; /* AND/OR/NOR/NOT children, ELEM_* sub-expressions, IN regexes */
    size_t nkids;
    bson_value_t rhs; /* comparison operand, borrowed from the matcher's filter copy */
    /* N_IN */
    bson_value_t *eqs;
    size_t neqs;
    bool in_has_null;
    /* N_REGEX */
    pcre2_code *re;
    char *pattern;
    char *flags;
    /* N_TYPE: one bit per BSON type byte (0x01..0x13), plus minKey/maxKey and "number" */
    uint32_t types;
    bool type_minkey, type_maxkey, type_number;
    /* N_MOD / N_SIZE */
    int64_t div, rem, size;
    /* N_BITS_* */
    uint64_t mask;
    uint32_t *positions;
    size_t npos;
    /* N_EXPR */
    shl_expr_t *expr;
    /* N_JSON_SCHEMA */
    shl_jschema_t *schema;
};

struct shl_matcher {
    bson_t *filter; /* our copy: every borrowed value points into it */
    mnode_t *root;
    bool trivial;
    char *placeholder;
    bool placeholder_error;
    shl_status_t placeholder_status;
    bson_t *vars; /* owned: a command's `let` bound by shl_matcher_bind_vars, or NULL */
    shl_collator_t *coll; /* a reference (shl_matcher_set_collator), NULL: simple */
    shl_matcher_text_fn text_fn; /* N_TEXT's search (shl_matcher_set_text), NULL: none */
    void *text_arg;
    bool has_text_node;
};

typedef enum level { LEVEL_PREDICATE_TOP, LEVEL_DOC_TOP, LEVEL_SUBDOC } level_t;

typedef struct pctx {
    uint32_t flags;
    bool *has_text_node; /* set when an N_TEXT node is made */
} pctx_t;

static void
node_destroy(mnode_t *n)
{
    if (n == NULL) {
        return;
    }
    for (size_t i = 0; i < n->nkids; i++) {
        node_destroy(n->kids[i]);
    }
    bson_free(n->kids);
    if (n->has_path) {
        qpath_cleanup(&n->path);
    }
    bson_free(n->eqs);
    if (n->re != NULL) {
        pcre2_code_free(n->re);
    }
    bson_free(n->pattern);
    bson_free(n->flags);
    bson_free(n->positions);
    shl_expr_destroy(n->expr);
    shl_jschema_destroy(n->schema);
    bson_free(n);
}

static mnode_t *
node_new(nkind_t kind, const char *path)
{
    mnode_t *n = bson_malloc0(sizeof(*n));
    n->kind = kind;
    if (path != NULL) {
        n->has_path = true;
        qpath_init(&n->path, path, strlen(path));
    }
    return n;
}

static void
node_add(mnode_t *parent, mnode_t *kid)
{
    parent->kids = bson_realloc(parent->kids, (parent->nkids + 1) * sizeof(mnode_t *));
    parent->kids[parent->nkids++] = kid;
}

/* ---- operator tables ---- */

typedef enum kw {
    KW_NONE,
    KW_LT,
    KW_LTE,
    KW_GT,
    KW_GTE,
    KW_EQ,
    KW_NE,
    KW_IN,
    KW_NIN,
    KW_SIZE,
    KW_EXISTS,
    KW_TYPE,
    KW_MOD,
    KW_OPTIONS,
    KW_REGEX,
    KW_ELEM_MATCH,
    KW_ALL,
    KW_GEO_WITHIN,
    KW_GEO_INTERSECTS,
    KW_GEO_NEAR,
    KW_BITS_ALL_SET,
    KW_BITS_ALL_CLEAR,
    KW_BITS_ANY_SET,
    KW_BITS_ANY_CLEAR,
    KW_INTERNAL,
} kw_t;

static const struct {
    const char *name;
    kw_t kw;
} path_keywords[] = {
    {"$all", KW_ALL},
    {"$bitsAllClear", KW_BITS_ALL_CLEAR},
    {"$bitsAllSet", KW_BITS_ALL_SET},
    {"$bitsAnyClear", KW_BITS_ANY_CLEAR},
    {"$bitsAnySet", KW_BITS_ANY_SET},
    {"$elemMatch", KW_ELEM_MATCH},
    {"$eq", KW_EQ},
    {"$exists", KW_EXISTS},
    {"$geoIntersects", KW_GEO_INTERSECTS},
    {"$geoNear", KW_GEO_NEAR},
    {"$geoWithin", KW_GEO_WITHIN},
    {"$gt", KW_GT},
    {"$gte", KW_GTE},
    {"$in", KW_IN},
    {"$lt", KW_LT},
    {"$lte", KW_LTE},
    {"$mod", KW_MOD},
    {"$ne", KW_NE},
    {"$near", KW_GEO_NEAR},
    {"$nearSphere", KW_GEO_NEAR},
    {"$nin", KW_NIN},
    {"$options", KW_OPTIONS},
    {"$regex", KW_REGEX},
    {"$size", KW_SIZE},
    {"$type", KW_TYPE},
    {"$within", KW_GEO_WITHIN},
};

static kw_t
path_keyword(const char *name)
{
    if (name[0] != '$') {
        return KW_NONE;
    }
    for (size_t i = 0; i < sizeof(path_keywords) / sizeof(path_keywords[0]); i++) {
        if (strcmp(path_keywords[i].name, name) == 0) {
            return path_keywords[i].kw;
        }
    }
    if (strncmp(name, "$_internal", 10) == 0) {
        return KW_INTERNAL;
    }
    return KW_NONE;
}

static const char *const pathless_ops[] = {
    "$_internalBucketGeoWithin",
    "$_internalSchemaAllowedProperties",
    "$_internalSchemaCond",
    "$_internalSchemaMaxProperties",
    "$_internalSchemaMinProperties",
    "$_internalSchemaRootDocEq",
    "$_internalSchemaXor",
    "$alwaysFalse",
    "$alwaysTrue",
    "$and",
    "$comment",
    "$db",
    "$expr",
    "$id",
    "$jsonSchema",
    "$nor",
    "$or",
    "$ref",
    "$sampleRate",
    "$text",
    "$where",
};

static bool
is_pathless_op(const char *name)
{
    for (size_t i = 0; i < sizeof(pathless_ops) / sizeof(pathless_ops[0]); i++) {
        if (strcmp(pathless_ops[i], name) == 0) {
            return true;
        }
    }
    return false;
}

/* A document {$ref: .., $id: ..} is a DBRef value, not an operator document. */
static bool
is_dbref_doc(const bson_t *obj, bool allow_incomplete)
{
    bson_iter_t it;
    bool ref = false, id = false, db = false;
    bson_iter_init(&it, obj);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "$ref") == 0) {
            ref = true;
        } else if (strcmp(k, "$id") == 0) {
            id = true;
        } else if (strcmp(k, "$db") == 0) {
            db = true;
        }
    }
    return allow_incomplete ? (ref || id || db) : (ref && id);
}

static bool
is_expression_doc(const bson_value_t *v, bool allow_incomplete_dbref)
{
    bson_t obj;
    bson_iter_t it;
    if (v->value_type != BSON_TYPE_DOCUMENT || !query_bson_view(v, &obj)) {
        return false;
    }
    if (!bson_iter_init(&it, &obj) || !shl_iter_next(&it)) {
        return false;
    }
    if (shl_iter_key(&it)[0] != '$') {
        return false;
    }
    return !is_dbref_doc(&obj, allow_incomplete_dbref);
}

/* ---- parsing ---- */

static int parse_doc(const bson_t *obj, const pctx_t *pc, level_t level, mnode_t **out,
                     shl_status_t *st);
static int parse_sub(const char *name, const bson_t *sub, mnode_t *root, const pctx_t *pc,
                     level_t level, shl_status_t *st);

static int
compile_regex(mnode_t *n, const char *pattern, size_t plen, const char *flags, shl_status_t *st)
{
    uint32_t opts = PCRE2_UTF;
    int errcode = 0, ret = 0;
    PCRE2_SIZE erroff = 0;
    PCRE2_UCHAR buf[256];

    if (strlen(pattern) != plen) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Regular expression cannot contain an embedded null byte");
    }
    for (const char *f = flags; *f; f++) {
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
            SHL_FAIL(st, QC_REGEX_BAD_FLAG, "invalid flag in regex options: %c", *f);
        }
    }
    n->pattern = bson_strndup(pattern, plen);
    n->flags = bson_strdup(flags);
    n->re = pcre2_compile((PCRE2_SPTR)pattern, plen, opts, &errcode, &erroff, NULL);
    if (n->re == NULL) {
        pcre2_get_error_message(errcode, buf, sizeof(buf));
        SHL_FAIL(st, QC_REGEX_INVALID, "Regular expression is invalid: %s", (char *)buf);
    }
done:
    return ret;
}

static mnode_t *
regex_node(const char *path)
{
    return node_new(N_REGEX, path);
}

static int
parse_regex_value(const char *path, const bson_value_t *v, mnode_t **out, shl_status_t *st)
{
    mnode_t *n = regex_node(path);
    int ret = compile_regex(n, v->value.v_regex.regex, strlen(v->value.v_regex.regex),
                            v->value.v_regex.options ? v->value.v_regex.options : "", st);
    if (ret != 0) {
        node_destroy(n);
        n = NULL;
    }
    *out = n;
    return ret;
}

static int
parse_comparison(const char *name, nkind_t kind, const bson_value_t *v, mnode_t **out,
                 shl_status_t *st)
{
    int ret = 0;
    *out = NULL;
    if (kind != N_EQ && v->value_type == BSON_TYPE_REGEX) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Can't have RegEx as arg to predicate over field '%s'.",
                 name);
    }
    if (v->value_type == BSON_TYPE_UNDEFINED) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "cannot compare to undefined");
    }
    *out = node_new(kind, name);
    (*out)->rhs = *v;
done:
    return ret;
}

static int
value_cmp_qsort(const void *a, const void *b)
{
    return shl_bson_value_compare((const bson_value_t *)a, (const bson_value_t *)b);
}

static int
parse_in(const char *name, const bson_value_t *arr, mnode_t **out, shl_status_t *st)
{
    mnode_t *n = node_new(N_IN, name);
    bson_t view;
    bson_iter_t it;
    size_t cap = 0;
    int ret = 0;

    query_bson_view(arr, &view);
    cap = bson_count_keys(&view);
    n->eqs = bson_malloc((cap + 1) * sizeof(bson_value_t));
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const bson_value_t *e = bson_iter_value(&it);
        if (is_expression_doc(e, false)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "cannot nest $ under $in");
        }
        if (e->value_type == BSON_TYPE_REGEX) {
            mnode_t *r = NULL;
            SHL_ERR(parse_regex_value(NULL, e, &r, st));
            node_add(n, r);
        } else if (e->value_type == BSON_TYPE_UNDEFINED) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "InMatchExpression equality cannot be undefined");
        } else {
            if (e->value_type == BSON_TYPE_NULL) {
                n->in_has_null = true;
            }
            n->eqs[n->neqs++] = *e;
        }
    }
    /* Sorted, so membership is a binary search. */
    qsort(n->eqs, n->neqs, sizeof(bson_value_t), value_cmp_qsort);
    *out = n;
    n = NULL;
done:
    node_destroy(n);
    return ret;
}

static const struct {
    const char *name;
    int code;
} type_aliases[] = {
    {"double", 1},      {"string", 2},     {"object", 3},
    {"array", 4},       {"binData", 5},    {"undefined", 6},
    {"objectId", 7},    {"bool", 8},       {"date", 9},
    {"null", 10},       {"regex", 11},     {"dbPointer", 12},
    {"javascript", 13}, {"symbol", 14},    {"javascriptWithScope", 15},
    {"int", 16},        {"timestamp", 17}, {"long", 18},
    {"decimal", 19},    {"minKey", -1},    {"maxKey", 127},
};

static int
type_add_code(mnode_t *n, int64_t code, const bson_value_t *v, shl_status_t *st)
{
    char *js;
    int ret = 0;
    if (code == -1) {
        n->type_minkey = true;
    } else if (code == 127) {
        n->type_maxkey = true;
    } else if (code >= 1 && code <= 19) {
        n->types |= 1u << code;
    } else {
        js = query_value_to_json(v);
        ret = shl_status_set(st, SHL_CODE_BAD_VALUE, "Invalid numerical type code: %s", js);
        bson_free(js);
    }
    return ret;
}

static int
type_add(mnode_t *n, const bson_value_t *v, shl_status_t *st)
{
    int ret = 0;
    int64_t code;
    char *js;

    if (v->value_type == BSON_TYPE_UTF8) {
        if (strcmp(v->value.v_utf8.str, "number") == 0) {
            n->type_number = true;
            return 0;
        }
        for (size_t i = 0; i < sizeof(type_aliases) / sizeof(type_aliases[0]); i++) {
            if (strcmp(type_aliases[i].name, v->value.v_utf8.str) == 0) {
                return type_add_code(n, type_aliases[i].code, v, st);
            }
        }
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Unknown type name alias: %s", v->value.v_utf8.str);
    }
    if (query_value_is_number(v)) {
        shl_status_t tmp;
        if (query_parse_int64(v, &code, "$type", &tmp) != 0) {
            js = query_value_to_json(v);
            ret = shl_status_set(st, SHL_CODE_BAD_VALUE, "Invalid numerical type code: %s", js);
            bson_free(js);
            goto done;
        }
        return type_add_code(n, code, v, st);
    }
    SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "type must be represented as a number or a string");
done:
    return ret;
}

static int
parse_type(const char *name, const bson_value_t *v, mnode_t **out, shl_status_t *st)
{
    mnode_t *n = node_new(N_TYPE, name);
    bson_t view;
    bson_iter_t it;
    int ret = 0;

    if (v->value_type == BSON_TYPE_ARRAY) {
        query_bson_view(v, &view);
        bson_iter_init(&it, &view);
        while (shl_iter_next(&it)) {
            SHL_ERR(type_add(n, bson_iter_value(&it), st));
        }
    } else {
        SHL_ERR(type_add(n, v, st));
    }
    if (n->types == 0 && !n->type_minkey && !n->type_maxkey && !n->type_number) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s must match at least one type", name);
    }
    *out = n;
    n = NULL;
done:
    node_destroy(n);
    return ret;
}

/* tryCoerce for $mod: integral part of finite numbers that fit in 64 bits. */
static int
mod_coerce(const bson_value_t *v, int64_t *out, const char *what, shl_status_t *st)
{
    double d;
    if (v->value_type == BSON_TYPE_INT32) {
        *out = v->value.v_int32;
        return 0;
    }
    if (v->value_type == BSON_TYPE_INT64) {
        *out = v->value.v_int64;
        return 0;
    }
    d = query_value_as_double(v);
    if (!isfinite(d)) {
        return shl_status_set(st, SHL_CODE_BAD_VALUE,
                              "malformed mod, %s value is invalid :: caused by :: Unable to "
                              "coerce NaN/Inf to integral type",
                              what);
    }
    d = trunc(d);
    if (d >= 9223372036854775808.0 || d < -9223372036854775808.0) {
        return shl_status_set(st, SHL_CODE_BAD_VALUE,
                              "malformed mod, %s value is invalid :: caused by :: Out of bounds "
                              "coercing to integral value",
                              what);
    }
    *out = (int64_t)d;
    return 0;
}

static int
parse_mod(const char *name, const bson_value_t *v, mnode_t **out, shl_status_t *st)
{
    bson_t view;
    bson_iter_t it;
    bson_value_t dv, rv; /* copies: an iterator's value is overwritten by the next step */
    const bson_value_t *d = &dv, *r = &rv;
    mnode_t *n = NULL;
    int ret = 0;

    if (v->value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "malformed mod, needs to be an array");
    }
    query_bson_view(v, &view);
    bson_iter_init(&it, &view);
    if (!shl_iter_next(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "malformed mod, not enough elements");
    }
    dv = *bson_iter_value(&it);
    if (!query_value_is_number(d)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "malformed mod, divisor not a number");
    }
    if (!shl_iter_next(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "malformed mod, not enough elements");
    }
    rv = *bson_iter_value(&it);
    if (!query_value_is_number(r)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "malformed mod, remainder not a number");
    }
    if (shl_iter_next(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "malformed mod, too many elements");
    }
    n = node_new(N_MOD, name);
    SHL_ERR(mod_coerce(d, &n->div, "divisor", st));
    SHL_ERR(mod_coerce(r, &n->rem, "remainder", st));
    if (n->div == 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "divisor cannot be 0");
    }
    *out = n;
    n = NULL;
done:
    node_destroy(n);
    return ret;
}

static int
parse_bits(const char *name, const char *op, nkind_t kind, const bson_value_t *v, mnode_t **out,
           shl_status_t *st)
{
    mnode_t *n = node_new(kind, name);
    bson_t view;
    bson_iter_t it;
    int64_t x;
    shl_status_t tmp;
    char *js;
    int ret = 0;

    if (v->value_type == BSON_TYPE_ARRAY) {
        query_bson_view(v, &view);
        n->positions = bson_malloc((bson_count_keys(&view) + 1) * sizeof(uint32_t));
        bson_iter_init(&it, &view);
        while (shl_iter_next(&it)) {
            if (query_parse_int64(bson_iter_value(&it), &x, shl_iter_key(&it), &tmp) != 0) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Failed to parse bit position. %s", tmp.reason);
            }
            if (x < 0) {
                js = query_value_to_json(bson_iter_value(&it));
                ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                                     "Failed to parse bit position. Expected a positive number "
                                     "in: %s: %s",
                                     shl_iter_key(&it), js);
                bson_free(js);
                goto done;
            }
            if (x > INT32_MAX) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "Failed to parse bit position. Cannot represent %lld in an int",
                         (long long)x);
            }
            n->positions[n->npos++] = (uint32_t)x;
            /* Positions past 63 test the sign bit: numbers are sign-extended. */
            n->mask |= 1ull << (x > 63 ? 63 : x);
        }
    } else if (query_value_is_number(v)) {
        SHL_ERR(query_parse_int64(v, &x, op, st));
        if (x < 0) {
            js = query_value_to_json(v);
            ret = shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                                 "Expected a positive number in: %s: %s", op, js);
            bson_free(js);
            goto done;
        }
        n->mask = (uint64_t)x;
        n->positions = bson_malloc(64 * sizeof(uint32_t));
        for (uint32_t b = 0; b < 64; b++) {
            if (n->mask & (1ull << b)) {
                n->positions[n->npos++] = b;
            }
        }
    } else if (v->value_type == BSON_TYPE_BINARY) {
        const uint8_t *bin = v->value.v_binary.data;
        uint32_t len = v->value.v_binary.data_len;
        n->positions = bson_malloc((size_t)len * 8 + 1);
        n->positions = bson_realloc(n->positions, ((size_t)len * 8 + 1) * sizeof(uint32_t));
        for (uint32_t byte = 0; byte < len; byte++) {
            if (bin[byte] == 0) {
                continue;
            }
            if (byte < 8) {
                n->mask |= (uint64_t)bin[byte] << (byte * 8);
            } else {
                n->mask |= 1ull << 63;
            }
            for (int b = 0; b < 8; b++) {
                if (bin[byte] & (1u << b)) {
                    n->positions[n->npos++] = byte * 8 + (uint32_t)b;
                }
            }
        }
    } else {
        js = query_value_to_json(v);
        ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                             "%s takes an Array, a number, or a BinData but received: %s: %s", name,
                             op, js);
        bson_free(js);
        goto done;
    }
    *out = n;
    n = NULL;
done:
    node_destroy(n);
    return ret;
}

static int
parse_regex_doc(const char *name, const bson_t *context, mnode_t **out, shl_status_t *st)
{
    bson_iter_t it;
    const char *regex = "", *opts = "";
    size_t rlen = 0;
    mnode_t *n = NULL;
    int ret = 0;

    bson_iter_init(&it, context);
    while (shl_iter_next(&it)) {
        kw_t kw = path_keyword(shl_iter_key(&it));
        if (kw == KW_REGEX) {
            if (BSON_ITER_HOLDS_UTF8(&it)) {
                uint32_t l;
                regex = bson_iter_utf8(&it, &l);
                rlen = l;
            } else if (BSON_ITER_HOLDS_REGEX(&it)) {
                const char *o = NULL;
                regex = bson_iter_regex(&it, &o);
                rlen = strlen(regex);
                if (o != NULL && *o) {
                    if (*opts) {
                        SHL_FAIL(st, QC_REGEX_OPTIONS_TWICE_A,
                                 "options set in both $regex and $options");
                    }
                    opts = o;
                }
            } else {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$regex has to be a string");
            }
        } else if (kw == KW_OPTIONS) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$options has to be a string");
            }
            if (*opts) {
                SHL_FAIL(st, QC_REGEX_OPTIONS_TWICE_B, "options set in both $regex and $options");
            }
            opts = bson_iter_utf8(&it, NULL);
        }
    }
    n = regex_node(name);
    SHL_ERR(compile_regex(n, regex, rlen, opts, st));
    *out = n;
    n = NULL;
done:
    node_destroy(n);
    return ret;
}

static int
parse_elem_match(const char *name, const bson_value_t *v, const pctx_t *pc, mnode_t **out,
                 shl_status_t *st)
{
    bson_t obj;
    bson_iter_t it;
    mnode_t *n = NULL, *sub = NULL;
    bool value_case = false;
    int ret = 0;

    if (v->value_type != BSON_TYPE_DOCUMENT) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$elemMatch needs an Object");
    }
    query_bson_view(v, &obj);
    if (is_expression_doc(v, true)) {
        bson_iter_init(&it, &obj);
        shl_iter_next(&it);
        value_case = !is_pathless_op(shl_iter_key(&it));
    }
    if (value_case) {
        n = node_new(N_ELEM_VAL, name);
        SHL_ERR(parse_sub("", &obj, n, pc, LEVEL_SUBDOC, st));
    } else {
        pctx_t sub_pc = *pc;
        SHL_ERR(parse_doc(&obj, &sub_pc, LEVEL_SUBDOC, &sub, st));
        n = node_new(N_ELEM_OBJ, name);
        node_add(n, sub);
        sub = NULL;
    }
    *out = n;
    n = NULL;
done:
    node_destroy(sub);
    node_destroy(n);
    return ret;
}

static int
parse_all(const char *name, const bson_value_t *v, const pctx_t *pc, mnode_t **out,
          shl_status_t *st)
{
    bson_t arr, first;
    bson_iter_t it, fi;
    mnode_t *and = NULL, *kid = NULL;
    bool elem_match_form = false;
    int ret = 0;

    if (v->value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$all needs an array");
    }
    query_bson_view(v, &arr);
    and = node_new(N_AND, NULL);
    bson_iter_init(&it, &arr);
    if (shl_iter_next(&it) && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        query_bson_view(bson_iter_value(&it), &first);
        if (bson_iter_init(&fi, &first) && shl_iter_next(&fi) &&
            strcmp(shl_iter_key(&fi), "$elemMatch") == 0) {
            elem_match_form = true;
        }
    }
    bson_iter_init(&it, &arr);
    while (shl_iter_next(&it)) {
        const bson_value_t *e = bson_iter_value(&it);
        if (elem_match_form) {
            bson_t eo;
            if (e->value_type != BSON_TYPE_DOCUMENT) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$all/$elemMatch has to be consistent");
            }
            query_bson_view(e, &eo);
            if (!bson_iter_init(&fi, &eo) || !shl_iter_next(&fi) ||
                strcmp(shl_iter_key(&fi), "$elemMatch") != 0) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$all/$elemMatch has to be consistent");
            }
            SHL_ERR(parse_elem_match(name, bson_iter_value(&fi), pc, &kid, st));
        } else if (e->value_type == BSON_TYPE_REGEX) {
            SHL_ERR(parse_regex_value(name, e, &kid, st));
        } else if (e->value_type == BSON_TYPE_DOCUMENT) {
            bson_t eo;
            query_bson_view(e, &eo);
            if (bson_iter_init(&fi, &eo) && shl_iter_next(&fi) &&
                path_keyword(shl_iter_key(&fi)) != KW_NONE) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "no $ expressions in $all");
            }
            SHL_ERR(parse_comparison(name, N_EQ, e, &kid, st));
        } else {
            SHL_ERR(parse_comparison(name, N_EQ, e, &kid, st));
        }
        node_add(and, kid);
        kid = NULL;
    }
    if (and->nkids == 0) {
        and->kind = N_FALSE;
    }
    *out = and;
    and = NULL;
done:
    node_destroy(kid);
    node_destroy(and);
    return ret;
}

static int
parse_not(const char *name, const bson_value_t *v, const pctx_t *pc, level_t level, mnode_t **out,
          shl_status_t *st)
{
    mnode_t *n = NULL, *kid = NULL;
    bson_t obj;
    int ret = 0;

    if (v->value_type == BSON_TYPE_REGEX) {
        SHL_ERR(parse_regex_value(name, v, &kid, st));
    } else {
        if (v->value_type != BSON_TYPE_DOCUMENT) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$not needs a regex or a document");
        }
        query_bson_view(v, &obj);
        if (bson_count_keys(&obj) == 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$not cannot be empty");
        }
        kid = node_new(N_AND, NULL);
        SHL_ERR(parse_sub(name, &obj, kid, pc, level, st));
    }
    n = node_new(N_NOT, NULL);
    node_add(n, kid);
    kid = NULL;
    *out = n;
done:
    node_destroy(kid);
    return ret;
}

static int
parse_sub_field(const bson_t *context, const char *name, const bson_iter_t *e, const pctx_t *pc,
                level_t level, mnode_t **out, shl_status_t *st)
{
    const char *op = shl_iter_key(e);
    bson_iter_t ecopy = *e;
    const bson_value_t *v = bson_iter_value(&ecopy);
    mnode_t *n = NULL;
    int64_t size;
    shl_status_t tmp;
    bson_iter_t it;
    int ret = 0;

    *out = NULL;
    if (strcmp(op, "$not") == 0) {
        return parse_not(name, v, pc, level, out, st);
    }
    switch (path_keyword(op)) {
    case KW_NONE:
        if (strcmp(op, "$where") == 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$where cannot be applied to a field");
        }
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "unknown operator: %s", op);
    case KW_LT:
        return parse_comparison(name, N_LT, v, out, st);
    case KW_LTE:
        return parse_comparison(name, N_LTE, v, out, st);
    case KW_GT:
        return parse_comparison(name, N_GT, v, out, st);
    case KW_GTE:
        return parse_comparison(name, N_GTE, v, out, st);
    case KW_EQ:
        return parse_comparison(name, N_EQ, v, out, st);
    case KW_NE:
        if (v->value_type == BSON_TYPE_REGEX) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Can't have regex as arg to $ne.");
        }
        SHL_ERR(parse_comparison(name, N_EQ, v, &n, st));
        *out = node_new(N_NOT, NULL);
        node_add(*out, n);
        n = NULL;
        break;
    case KW_IN:
        if (v->value_type != BSON_TYPE_ARRAY) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$in needs an array");
        }
        return parse_in(name, v, out, st);
    case KW_NIN:
        if (v->value_type != BSON_TYPE_ARRAY) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$nin needs an array");
        }
        SHL_ERR(parse_in(name, v, &n, st));
        *out = node_new(N_NOT, NULL);
        node_add(*out, n);
        n = NULL;
        break;
    case KW_SIZE:
        if (query_parse_int64(v, &size, "$size", &tmp) != 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Failed to parse $size. %s", tmp.reason);
        }
        if (size < 0) {
            char *js = query_value_to_json(v);
            ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                                 "Failed to parse $size. Expected a positive number in: $size: %s",
                                 js);
            bson_free(js);
            goto done;
        }
        if (size > INT32_MAX) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "Failed to parse $size. Cannot represent %lld in an int", (long long)size);
        }
        n = node_new(N_SIZE, name);
        n->size = size;
        *out = n;
        n = NULL;
        break;
    case KW_EXISTS:
        n = node_new(N_EXISTS, name);
        if (query_value_truthy(v)) {
            *out = n;
        } else {
            *out = node_new(N_NOT, NULL);
            node_add(*out, n);
        }
        n = NULL;
        break;
    case KW_TYPE:
        return parse_type(name, v, out, st);
    case KW_MOD:
        return parse_mod(name, v, out, st);
    case KW_OPTIONS:
        bson_iter_init(&it, context);
        while (shl_iter_next(&it)) {
            if (path_keyword(shl_iter_key(&it)) == KW_REGEX) {
                return 0; /* handled with the $regex */
            }
        }
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$options needs a $regex");
    case KW_REGEX:
        return parse_regex_doc(name, context, out, st);
    case KW_ELEM_MATCH:
        return parse_elem_match(name, v, pc, out, st);
    case KW_ALL:
        return parse_all(name, v, pc, out, st);
    case KW_GEO_WITHIN:
    case KW_GEO_INTERSECTS:
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "%s is not supported by this server", op);
    case KW_GEO_NEAR:
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "near must be first in: %s", name);
    case KW_BITS_ALL_SET:
        return parse_bits(name, op, N_BITS_ALL_SET, v, out, st);
    case KW_BITS_ALL_CLEAR:
        return parse_bits(name, op, N_BITS_ALL_CLEAR, v, out, st);
    case KW_BITS_ANY_SET:
        return parse_bits(name, op, N_BITS_ANY_SET, v, out, st);
    case KW_BITS_ANY_CLEAR:
        return parse_bits(name, op, N_BITS_ANY_CLEAR, v, out, st);
    case KW_INTERNAL:
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "unknown operator: %s", op);
    }
done:
    node_destroy(n);
    return ret;
}

static int
parse_sub(const char *name, const bson_t *sub, mnode_t *root, const pctx_t *pc, level_t level,
          shl_status_t *st)
{
    bson_iter_t it;
    mnode_t *n = NULL;
    int ret = 0;

    /* $near takes sibling modifiers ($maxDistance), so it is parsed as a whole. */
    if (bson_iter_init(&it, sub) && shl_iter_next(&it) &&
        path_keyword(shl_iter_key(&it)) == KW_GEO_NEAR) {
        if (!(pc->flags & SHL_MATCHER_ALLOW_GEO_NEAR)) {
            SHL_FAIL(st, 5626500,
                     "$geoNear, $near, and $nearSphere are not allowed in this context");
        }
        SHL_FAIL(st, SHL_CODE_NO_QUERY_EXECUTION_PLANS,
                 "error processing query: planner returned error :: caused by :: unable to find "
                 "index for $geoNear query");
    }
    bson_iter_init(&it, sub);
    while (shl_iter_next(&it)) {
        SHL_ERR(parse_sub_field(sub, name, &it, pc, level, &n, st));
        if (n != NULL) {
            node_add(root, n);
            n = NULL;
        }
    }
done:
    return ret;
}

static int
parse_tree(const char *opname, nkind_t kind, const bson_value_t *v, const pctx_t *pc, level_t level,
           mnode_t **out, shl_status_t *st)
{
    mnode_t *n = NULL, *kid = NULL;
    bson_t arr, obj;
    bson_iter_t it;
    int ret = 0;

    pctx_t sub_pc = *pc;

    if (kind == N_OR && (pc->flags & SHL_MATCHER_TEXT_DEFERRED) && level == LEVEL_PREDICATE_TOP) {
        /* Under a top-level $or the search runs per document (N_TEXT). */
        sub_pc.flags = (sub_pc.flags & ~SHL_MATCHER_TEXT_DEFERRED) | SHL_MATCHER_TEXT_IN_OR;
    } else if (kind != N_AND) {
        /* Under $and the caller's search still decides (a conjunction with it). */
        sub_pc.flags &= ~(SHL_MATCHER_TEXT_DEFERRED | SHL_MATCHER_TEXT_IN_OR);
    }
    if (v->value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "%s must be an array", opname);
    }
    query_bson_view(v, &arr);
    if (bson_count_keys(&arr) == 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$and/$or/$nor must be a nonempty array");
    }
    n = node_new(kind, NULL);
    bson_iter_init(&it, &arr);
    while (shl_iter_next(&it)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$or/$and/$nor entries need to be full objects");
        }
        query_bson_view(bson_iter_value(&it), &obj);
        /* A $text under $or/$nor is not one the caller searches for: IndexNotFound. */
        SHL_ERR(parse_doc(&obj, &sub_pc, level, &kid, st));
        node_add(n, kid);
        kid = NULL;
    }
    *out = n;
    n = NULL;
done:
    node_destroy(n);
    return ret;
}

static int
parse_pathless(const char *key, const bson_value_t *v, const pctx_t *pc, level_t level,
               mnode_t **out, shl_status_t *st)
{
    int64_t x;
    int ret = 0;

    *out = NULL;
    if (strcmp(key, "$and") == 0) {
        return parse_tree(key, N_AND, v, pc, level, out, st);
    }
    if (strcmp(key, "$or") == 0) {
        return parse_tree(key, N_OR, v, pc, level, out, st);
    }
    if (strcmp(key, "$nor") == 0) {
        return parse_tree(key, N_NOR, v, pc, level, out, st);
    }
    if (strcmp(key, "$comment") == 0) {
        return 0;
    }
    if (strcmp(key, "$alwaysTrue") == 0 || strcmp(key, "$alwaysFalse") == 0) {
        SHL_ERR(query_parse_int64(v, &x, key, st));
        if (x != 1) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s must be an integer value of 1", key);
        }
        *out = node_new(key[7] == 'T' ? N_TRUE : N_FALSE, NULL);
        return 0;
    }
    if (strcmp(key, "$ref") == 0 || strcmp(key, "$id") == 0 || strcmp(key, "$db") == 0) {
        *out = node_new(N_EQ, key);
        (*out)->rhs = *v;
        return 0;
    }
    if (strcmp(key, "$expr") == 0) {
        if (level == LEVEL_SUBDOC) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$expr can only be applied to the top-level document");
        }
        if (!(pc->flags & SHL_MATCHER_ALLOW_EXPR)) {
            SHL_FAIL(st, SHL_CODE_QUERY_FEATURE_NOT_ALLOWED,
                     "$expr is not allowed in this context");
        }
        *out = node_new(N_EXPR, NULL);
        if ((ret = shl_expr_parse(v, &(*out)->expr, st)) != 0) {
            node_destroy(*out);
            *out = NULL;
        }
        return ret;
    }
    if (strcmp(key, "$where") == 0) {
        if (!(pc->flags & SHL_MATCHER_ALLOW_WHERE)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$where is not allowed in this context");
        }
        if (level == LEVEL_SUBDOC) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "$where can only be applied to the top-level document");
        }
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "no globalScriptEngine in $where parsing");
    }
    if (strcmp(key, "$text") == 0) {
        if (level == LEVEL_SUBDOC) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$text can only be applied to the top-level document");
        }
        if (!(pc->flags & SHL_MATCHER_ALLOW_TEXT)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$text is not allowed in this context");
        }
        if (!(pc->flags & (SHL_MATCHER_TEXT_DEFERRED | SHL_MATCHER_TEXT_IN_OR)) ||
            level != LEVEL_PREDICATE_TOP) {
            SHL_FAIL(st, SHL_CODE_INDEX_NOT_FOUND, "text index required for $text query");
        }
        if (v->value_type != BSON_TYPE_DOCUMENT) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$text expects an object");
        }
        if (pc->flags & SHL_MATCHER_TEXT_IN_OR) {
            *out = node_new(N_TEXT, NULL);
            if (pc->has_text_node != NULL) {
                *pc->has_text_node = true;
            }
            return 0;
        }
        *out = node_new(N_TRUE, NULL); /* the caller's text search decides */
        return 0;
    }
    if (strcmp(key, "$jsonSchema") == 0) {
        bson_t schema;
        if (v->value_type != BSON_TYPE_DOCUMENT) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "$jsonSchema must be an object");
        }
        bson_init_static(&schema, v->value.v_doc.data, v->value.v_doc.data_len);
        *out = node_new(N_JSON_SCHEMA, NULL);
        if ((ret = shl_jschema_parse(&schema, &(*out)->schema, st)) != 0) {
            node_destroy(*out);
            *out = NULL;
        }
        return ret;
    }
    if (strcmp(key, "$sampleRate") == 0) {
        if (level == LEVEL_SUBDOC) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "$sampleRate can only be applied to the top-level document");
        }
        if (!query_value_is_number(v)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "argument to $sampleRate must be a numeric type");
        }
        double d = query_value_as_double(v);
        if (!(d >= 0.0 && d <= 1.0)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "numeric argument to $sampleRate must be in [0, 1]");
        }
        if (d == 0.0 || d == 1.0) {
            *out = node_new(d == 1.0 ? N_TRUE : N_FALSE, NULL);
            return 0;
        }
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$sampleRate is not supported by this server");
    }
    SHL_FAIL(st, SHL_CODE_BAD_VALUE, "%s is not supported by this server", key);
done:
    return ret;
}

static int
parse_doc(const bson_t *obj, const pctx_t *pc, level_t level, mnode_t **out, shl_status_t *st)
{
    mnode_t *root = node_new(N_AND, NULL), *n = NULL;
    level_t next = level == LEVEL_PREDICATE_TOP ? LEVEL_DOC_TOP : level;
    bson_iter_t it;
    int ret = 0;

    *out = NULL;
    bson_iter_init(&it, obj);
    while (shl_iter_next(&it)) {
        const char *key = shl_iter_key(&it);
        const bson_value_t *v = bson_iter_value(&it);
        size_t depth = 1;

        if (key[0] == '$') {
            if (!is_pathless_op(key)) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "unknown top level operator: %s%s", key,
                         strcmp(key, "$not") == 0
                             ? ". If you are trying to negate an entire expression, use $nor."
                             : ". If you have a field name that starts with a '$' symbol, "
                               "consider using $getField or $setField.");
            }
            SHL_ERR(parse_pathless(key, v, pc, level, &n, st));
            if (n != NULL) {
                node_add(root, n);
                n = NULL;
            }
            continue;
        }
        for (const char *p = key; *p; p++) {
            depth += *p == '.';
        }
        if (depth > QUERY_MAX_PATH_DEPTH) {
            SHL_FAIL(st, QC_FIELD_PATH_TOO_LONG, "FieldPath is too long");
        }
        if (is_expression_doc(v, false)) {
            bson_t sub;
            query_bson_view(v, &sub);
            SHL_ERR(parse_sub(key, &sub, root, pc, next, st));
            continue;
        }
        if (v->value_type == BSON_TYPE_REGEX) {
            SHL_ERR(parse_regex_value(key, v, &n, st));
        } else {
            SHL_ERR(parse_comparison(key, N_EQ, v, &n, st));
        }
        node_add(root, n);
        n = NULL;
    }
    if (root->nkids == 1) {
        n = root->kids[0];
        root->nkids = 0;
        node_destroy(root);
        root = n;
        n = NULL;
    }
    *out = root;
    root = NULL;
done:
    node_destroy(n);
    node_destroy(root);
    return ret;
}

/* ---- evaluation ---- */

typedef struct mctx {
    const shl_match_details_t *in; /* vars */
    const bson_t *bound_vars;      /* the matcher's own (shl_matcher_bind_vars) */
    const bson_t *doc;             /* the document for $expr */
    const shl_collator_t *coll;    /* the matcher's collation (NULL: simple) */
    shl_matcher_text_fn text_fn;   /* N_TEXT */
    void *text_arg;
    int err;
    shl_status_t *st;
} mctx_t;

/* Canonical brackets for the comparison rules: missing and undefined share one (0), null
 * is 5, MinKey -1, MaxKey 127; others come from bson_compare. Only equality of brackets and
 * the null/undefined sum matter. */
static int
bracket(bson_type_t t)
{
    switch (t) {
    case BSON_TYPE_EOD:
    case BSON_TYPE_UNDEFINED:
        return 0;
    case BSON_TYPE_NULL:
        return 5;
    case BSON_TYPE_MINKEY:
        return -1;
    case BSON_TYPE_MAXKEY:
        return 127;
    default:
        return 1000 + shl_bson_canonical_type(t);
    }
}

static bool
value_is_nan(const bson_value_t *v)
{
    return (v->value_type == BSON_TYPE_DOUBLE || v->value_type == BSON_TYPE_DECIMAL128) &&
           isnan(query_value_as_double(v));
}

static bool
compare_single(nkind_t kind, const bson_value_t *e, const bson_value_t *rhs,
               const shl_collator_t *coll)
{
    int c;
    if (e->value_type != rhs->value_type) {
        int ec = bracket(e->value_type), rc = bracket(rhs->value_type);
        if (ec != rc) {
            if (ec + rc == 5) {
                return kind == N_EQ || kind == N_LTE || kind == N_GTE;
            }
            if (rhs->value_type == BSON_TYPE_MAXKEY || rhs->value_type == BSON_TYPE_MINKEY) {
                switch (kind) {
                case N_LT:
                case N_LTE:
                    return rhs->value_type == BSON_TYPE_MAXKEY;
                case N_GT:
                case N_GTE:
                    return rhs->value_type == BSON_TYPE_MINKEY;
                default:
                    return false;
                }
            }
            return false;
        }
    }
    if (e->value_type == BSON_TYPE_EOD) {
        return false;
    }
    if (kind != N_EQ) {
        bool ln = value_is_nan(e), rn = value_is_nan(rhs);
        if (ln || rn) {
            return (kind == N_LTE || kind == N_GTE) && ln && rn;
        }
    }
    c = shl_bson_value_compare_coll(e, rhs, coll);
    switch (kind) {
    case N_LT:
        return c < 0;
    case N_LTE:
        return c <= 0;
    case N_EQ:
        return c == 0;
    case N_GT:
        return c > 0;
    case N_GTE:
        return c >= 0;
    default:
        return false;
    }
}

static bool
regex_single(const mnode_t *n, const bson_value_t *v)
{
    pcre2_match_data *md;
    const char *s;
    size_t len;
    int rc;

    switch (v->value_type) {
    case BSON_TYPE_UTF8:
        s = v->value.v_utf8.str;
        len = v->value.v_utf8.len;
        break;
    case BSON_TYPE_SYMBOL:
        s = v->value.v_symbol.symbol;
        len = v->value.v_symbol.len;
        break;
    case BSON_TYPE_REGEX:
        return strcmp(n->pattern, v->value.v_regex.regex) == 0 &&
               strcmp(n->flags, v->value.v_regex.options ? v->value.v_regex.options : "") == 0;
    default:
        return false;
    }
    md = pcre2_match_data_create_from_pattern(n->re, NULL);
    rc = pcre2_match(n->re, (PCRE2_SPTR)s, len, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

static bool
in_single(const mnode_t *n, const bson_value_t *v, const shl_collator_t *coll)
{
    size_t lo = 0, hi = n->neqs;
    if (n->in_has_null &&
        (v->value_type == BSON_TYPE_EOD || v->value_type == BSON_TYPE_UNDEFINED)) {
        return true;
    }
    if (v->value_type != BSON_TYPE_EOD) {
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            int c = shl_bson_value_compare_coll(v, &n->eqs[mid], coll);
            if (c == 0) {
                return true;
            }
            if (c < 0) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
    }
    for (size_t i = 0; i < n->nkids; i++) {
        if (regex_single(n->kids[i], v)) {
            return true;
        }
    }
    return false;
}

static bool
type_single(const mnode_t *n, const bson_value_t *v)
{
    bson_type_t t = v->value_type;
    if (t == BSON_TYPE_EOD) {
        return false;
    }
    if (n->type_number && query_value_is_number(v)) {
        return true;
    }
    if (t == BSON_TYPE_MINKEY) {
        return n->type_minkey;
    }
    if (t == BSON_TYPE_MAXKEY) {
        return n->type_maxkey;
    }
    return (unsigned)t <= 19 && (n->types & (1u << t)) != 0;
}

static bool
mod_single(const mnode_t *n, const bson_value_t *v)
{
    int64_t dividend;
    if (!query_value_is_number(v)) {
        return false;
    }
    if (v->value_type == BSON_TYPE_INT32) {
        dividend = v->value.v_int32;
    } else if (v->value_type == BSON_TYPE_INT64) {
        dividend = v->value.v_int64;
    } else {
        double d = query_value_as_double(v);
        if (!isfinite(d)) {
            return false;
        }
        d = trunc(d);
        if (d >= 9223372036854775808.0 || d < -9223372036854775808.0) {
            return false;
        }
        dividend = (int64_t)d;
    }
    /* safeMod: INT64_MIN % -1 is 0, not a trap. */
    if (n->div == -1) {
        return n->rem == 0;
    }
    return dividend % n->div == n->rem;
}

static bool
bits_single(const mnode_t *n, const bson_value_t *v)
{
    nkind_t k = n->kind;
    if (v->value_type == BSON_TYPE_BINARY) {
        const uint8_t *bin = v->value.v_binary.data;
        uint32_t len = v->value.v_binary.data_len;
        for (size_t i = 0; i < n->npos; i++) {
            uint32_t pos = n->positions[i];
            bool set = pos < (uint64_t)len * 8 && (bin[pos / 8] & (1u << (pos % 8)));
            bool further = (set && (k == N_BITS_ALL_SET || k == N_BITS_ANY_CLEAR)) ||
                           (!set && (k == N_BITS_ALL_CLEAR || k == N_BITS_ANY_SET));
            if (!further) {
                return k == N_BITS_ANY_SET || k == N_BITS_ANY_CLEAR;
            }
        }
        return k == N_BITS_ALL_SET || k == N_BITS_ALL_CLEAR;
    }
    if (!query_value_is_number(v)) {
        return false;
    }
    int64_t x;
    if (v->value_type == BSON_TYPE_INT32) {
        x = v->value.v_int32;
    } else if (v->value_type == BSON_TYPE_INT64) {
        x = v->value.v_int64;
    } else {
        double d = query_value_as_double(v);
        if (isnan(d) || d >= 9223372036854775808.0 || d < -9223372036854775808.0 ||
            d != (double)(int64_t)d) {
            return false;
        }
        x = (int64_t)d;
    }
    uint64_t u = (uint64_t)x;
    switch (k) {
    case N_BITS_ALL_SET:
        return (u & n->mask) == n->mask;
    case N_BITS_ALL_CLEAR:
        return (~u & n->mask) == n->mask;
    case N_BITS_ANY_SET:
        return (u & n->mask) != 0;
    default:
        return (~u & n->mask) != 0;
    }
}

static bool match_doc(const mnode_t *n, const bson_t *doc, mctx_t *mc, bool *has_key, size_t *key);

static bool
size_of_array(const bson_value_t *v, size_t *count)
{
    bson_t view;
    if (v->value_type != BSON_TYPE_ARRAY) {
        return false;
    }
    query_bson_view(v, &view);
    *count = bson_count_keys(&view);
    return true;
}

/* match_single -- whether one value (EOD: missing) satisfies a leaf predicate, as MongoDB's
 * matchesSingleElement. ELEM_* nodes set *key to the array position that matched. */
static bool
match_single(const mnode_t *n, const bson_value_t *v, mctx_t *mc, bool *has_key, size_t *key)
{
    bson_t view;
    bson_iter_t it;
    size_t count, k;

    switch (n->kind) {
    case N_AND:
        for (size_t i = 0; i < n->nkids; i++) {
            if (!match_single(n->kids[i], v, mc, NULL, NULL)) {
                return false;
            }
        }
        return true;
    case N_OR:
        for (size_t i = 0; i < n->nkids; i++) {
            if (match_single(n->kids[i], v, mc, NULL, NULL)) {
                return true;
            }
        }
        return false;
    case N_NOR:
        for (size_t i = 0; i < n->nkids; i++) {
            if (match_single(n->kids[i], v, mc, NULL, NULL)) {
                return false;
            }
        }
        return true;
    case N_NOT:
        return !match_single(n->kids[0], v, mc, NULL, NULL);
    case N_TRUE:
        return true;
    case N_FALSE:
        return false;
    case N_EQ:
    case N_LT:
    case N_LTE:
    case N_GT:
    case N_GTE:
        return compare_single(n->kind, v, &n->rhs, mc->coll);
    case N_IN:
        return in_single(n, v, mc->coll);
    case N_EXISTS:
        return v->value_type != BSON_TYPE_EOD;
    case N_TYPE:
        return type_single(n, v);
    case N_REGEX:
        return regex_single(n, v);
    case N_MOD:
        return mod_single(n, v);
    case N_SIZE:
        return size_of_array(v, &count) && count == (size_t)n->size;
    case N_BITS_ALL_SET:
    case N_BITS_ALL_CLEAR:
    case N_BITS_ANY_SET:
    case N_BITS_ANY_CLEAR:
        return bits_single(n, v);
    case N_ELEM_OBJ:
    case N_ELEM_VAL:
        if (v->value_type != BSON_TYPE_ARRAY) {
            return false;
        }
        query_bson_view(v, &view);
        bson_iter_init(&it, &view);
        for (k = 0; shl_iter_next(&it); k++) {
            const bson_value_t *e = bson_iter_value(&it);
            bool ok = true;
            if (n->kind == N_ELEM_OBJ) {
                bson_t sub;
                if (!query_bson_view(e, &sub)) {
                    continue;
                }
                ok = match_doc(n->kids[0], &sub, mc, NULL, NULL);
            } else {
                for (size_t i = 0; i < n->nkids && ok; i++) {
                    ok = match_single(n->kids[i], e, mc, NULL, NULL);
                }
            }
            if (ok) {
                if (has_key != NULL) {
                    *has_key = true;
                    *key = k;
                }
                return true;
            }
        }
        return false;
    case N_EXPR:
    case N_JSON_SCHEMA:
    case N_TEXT:
        return false;
    }
    return false;
}

/* ---- path traversal (BSONElementIterator) ---- */

typedef struct walk {
    const mnode_t *n;
    bool no_leaf_traversal;
    mctx_t *mc;
    bool matched;
    bool has_key;
    size_t key;
} walk_t;

/* emit -- test one reached value; 'offset' is the array position it came through (-1:
 * none) unless an enclosing implicit traversal overrides it with 'outer'. */
static bool
emit(walk_t *w, const bson_value_t *v, long offset, long outer)
{
    bool inner_has = false;
    size_t inner_key = 0;
    long off = outer >= 0 ? outer : offset;
    if (!match_single(w->n, v, w->mc, &inner_has, &inner_key)) {
        return false;
    }
    w->matched = true;
    if (off >= 0) {
        w->has_key = true;
        w->key = (size_t)off;
    } else if (inner_has) {
        w->has_key = true;
        w->key = inner_key;
    }
    return true;
}

static bool walk_doc(walk_t *w, const bson_t *doc, size_t i, long outer);

/* walk_array -- 'arr' holds the candidates for path component j. */
static bool
walk_array(walk_t *w, const bson_value_t *arr, size_t j, long outer)
{
    const qpath_t *p = &w->n->path;
    bool last = j == p->n - 1;
    bson_t view, sub;
    bson_iter_t it;
    long k;

    query_bson_view(arr, &view);
    bson_iter_init(&it, &view);
    for (k = 0; shl_iter_next(&it); k++) {
        const bson_value_t *e = bson_iter_value(&it);
        bool offset_match = p->numeric[j] && strcmp(shl_iter_key(&it), p->parts[j]) == 0;
        if (e->value_type == BSON_TYPE_DOCUMENT) {
            query_bson_view(e, &sub);
            if (walk_doc(w, &sub, j, outer >= 0 ? outer : k)) {
                return true;
            }
            if (offset_match) {
                if (last) {
                    if (emit(w, e, -1, outer)) {
                        return true;
                    }
                } else if (walk_doc(w, &sub, j + 1, outer)) {
                    return true;
                }
            }
        } else if (offset_match) {
            if (last) {
                if (emit(w, e, -1, outer)) {
                    return true;
                }
            } else if (e->value_type == BSON_TYPE_ARRAY) {
                if (walk_array(w, e, j + 1, outer)) {
                    return true;
                }
            }
        }
    }
    return false;
}

/* walk_start -- 'v' is the value of component i reached through documents only. */
static bool
walk_start(walk_t *w, const bson_value_t *v, size_t i, long outer)
{
    const qpath_t *p = &w->n->path;
    bson_t view;
    bson_iter_t it;
    long k;

    if (v->value_type != BSON_TYPE_ARRAY) {
        return emit(w, v, -1, outer);
    }
    if (i == p->n - 1) {
        if (w->no_leaf_traversal) {
            return emit(w, v, -1, outer);
        }
        query_bson_view(v, &view);
        bson_iter_init(&it, &view);
        for (k = 0; shl_iter_next(&it); k++) {
            if (emit(w, bson_iter_value(&it), k, outer)) {
                return true;
            }
        }
        return emit(w, v, -1, outer);
    }
    return walk_array(w, v, i + 1, outer);
}

static bool
walk_doc(walk_t *w, const bson_t *doc, size_t i, long outer)
{
    const qpath_t *p = &w->n->path;
    bson_value_t missing;
    bson_iter_t it;
    bson_t cur;

    /* A static bson_t points into itself: re-initialise, never copy one. */
    bson_init_static(&cur, bson_get_data(doc), doc->len);
    missing.value_type = BSON_TYPE_EOD;
    for (;;) {
        const bson_value_t *v;
        if (!bson_iter_init_find(&it, &cur, p->parts[i])) {
            return emit(w, &missing, -1, outer);
        }
        v = bson_iter_value(&it);
        if (i == p->n - 1 || v->value_type == BSON_TYPE_ARRAY) {
            return walk_start(w, v, i, outer);
        }
        if (v->value_type != BSON_TYPE_DOCUMENT) {
            return emit(w, &missing, -1, outer);
        }
        query_bson_view(v, &cur);
        i++;
    }
}

static bool
match_leaf(const mnode_t *n, const bson_t *doc, mctx_t *mc, bool *has_key, size_t *key)
{
    walk_t w = {0};
    w.n = n;
    w.mc = mc;
    w.no_leaf_traversal = n->kind == N_ELEM_OBJ || n->kind == N_ELEM_VAL || n->kind == N_SIZE;
    walk_doc(&w, doc, 0, -1);
    if (w.matched && w.has_key && has_key != NULL) {
        *has_key = true;
        *key = w.key;
    }
    return w.matched;
}

static bool
match_doc(const mnode_t *n, const bson_t *doc, mctx_t *mc, bool *has_key, size_t *key)
{
    switch (n->kind) {
    case N_AND:
        for (size_t i = 0; i < n->nkids; i++) {
            if (!match_doc(n->kids[i], doc, mc, has_key, key)) {
                return false;
            }
        }
        return true;
    case N_OR:
        for (size_t i = 0; i < n->nkids; i++) {
            if (match_doc(n->kids[i], doc, mc, NULL, NULL)) {
                return true;
            }
        }
        return false;
    case N_NOR:
        for (size_t i = 0; i < n->nkids; i++) {
            if (match_doc(n->kids[i], doc, mc, NULL, NULL)) {
                return false;
            }
        }
        return true;
    case N_NOT:
        return !match_doc(n->kids[0], doc, mc, NULL, NULL);
    case N_TRUE:
        return true;
    case N_FALSE:
        return false;
    case N_TEXT: {
        bool b = false;
        if (mc->err == 0 && mc->text_fn != NULL) {
            mc->err = mc->text_fn(mc->text_arg, doc, &b, mc->st);
        }
        return mc->err == 0 && b;
    }
    case N_EXPR: {
        shl_expr_ctx_t ec = {0};
        bool b = false;
        if (mc->err != 0) {
            return false;
        }
        ec.root = doc;
        ec.collator = mc->coll;
        ec.vars = mc->in != NULL && mc->in->vars != NULL ? mc->in->vars : mc->bound_vars;
        mc->err = shl_expr_evaluate_bool(n->expr, &ec, &b, mc->st);
        return mc->err == 0 && b;
    }
    case N_JSON_SCHEMA:
        return shl_jschema_match_doc(n->schema, doc);
    default:
        return match_leaf(n, doc, mc, has_key, key);
    }
}

/* ---- public API ---- */

static bool
node_is_trivial(const mnode_t *n)
{
    return n->kind == N_AND && n->nkids == 0;
}

/* collect_placeholder -- the first path component every predicate names (arrayFilters). */
static void
collect_placeholder(shl_matcher_t *m, const mnode_t *n)
{
    if (m->placeholder_error) {
        return;
    }
    if (n->has_path) {
        const char *top = n->path.parts[0];
        if (m->placeholder == NULL) {
            m->placeholder = bson_strdup(top);
        } else if (strcmp(m->placeholder, top) != 0) {
            m->placeholder_error = true;
            shl_status_set(&m->placeholder_status, SHL_CODE_FAILED_TO_PARSE,
                           "Expected a single top-level field name, found '%s' and '%s'",
                           m->placeholder, top);
        }
        return; /* paths below an elemMatch are relative to its elements */
    }
    for (size_t i = 0; i < n->nkids; i++) {
        collect_placeholder(m, n->kids[i]);
    }
}

int
shl_matcher_new(const bson_t *filter, uint32_t flags, shl_matcher_t **out, shl_status_t *st)
{
    shl_matcher_t *m = bson_malloc0(sizeof(*m));
    pctx_t pc = {flags, NULL};
    int ret = 0;

    pc.has_text_node = &m->has_text_node;
    *out = NULL;
    m->filter = bson_copy(filter);
    if (m->filter == NULL) {
        SHL_FAIL(st, SHL_CODE_INVALID_BSON, "invalid filter document");
    }
    SHL_ERR(parse_doc(m->filter, &pc, LEVEL_PREDICATE_TOP, &m->root, st));
    m->trivial = node_is_trivial(m->root);
    collect_placeholder(m, m->root);
    *out = m;
    m = NULL;
done:
    shl_matcher_destroy(m);
    return ret;
}

void
shl_matcher_set_text(shl_matcher_t *m, shl_matcher_text_fn fn, void *arg)
{
    m->text_fn = fn;
    m->text_arg = arg;
}

void
shl_matcher_unset_text(shl_matcher_t *m, const void *arg)
{
    if (m->text_arg == arg) {
        m->text_fn = NULL;
        m->text_arg = NULL;
    }
}

bool
shl_matcher_has_text_in_or(const shl_matcher_t *m)
{
    return m->has_text_node;
}

void
shl_matcher_destroy(shl_matcher_t *m)
{
    if (m == NULL) {
        return;
    }
    node_destroy(m->root);
    if (m->filter != NULL) {
        bson_destroy(m->filter);
    }
    bson_free(m->placeholder);
    if (m->vars != NULL) {
        bson_destroy(m->vars);
    }
    shl_collator_release(m->coll);
    bson_free(m);
}

static int
value_cmp_coll(const void *a, const void *b, void *coll)
{
    return shl_bson_value_compare_coll((const bson_value_t *)a, (const bson_value_t *)b,
                                       (const shl_collator_t *)coll);
}

/* $in's values are searched by binary search: sort them in the collation's order. */
static void
resort_in(mnode_t *n, shl_collator_t *coll)
{
    if (n == NULL) {
        return;
    }
    if (n->kind == N_IN && n->neqs > 1) {
        qsort_r(n->eqs, n->neqs, sizeof(bson_value_t), value_cmp_coll, coll);
    }
    for (size_t i = 0; i < n->nkids; i++) {
        resort_in(n->kids[i], coll);
    }
}

void
shl_matcher_set_collator(shl_matcher_t *m, shl_collator_t *coll)
{
    shl_collator_release(m->coll);
    m->coll = shl_collator_ref(coll);
    resort_in(m->root, coll);
}

const shl_collator_t *
shl_matcher_collator(const shl_matcher_t *m)
{
    return m->coll;
}

void
shl_matcher_bind_vars(shl_matcher_t *m, const bson_t *vars)
{
    if (m->vars != NULL) {
        bson_destroy(m->vars);
    }
    m->vars = vars != NULL ? bson_copy(vars) : NULL;
}

int
shl_matcher_match(const shl_matcher_t *m, const bson_t *doc, shl_match_details_t *details,
                  bool *matched, shl_status_t *st)
{
    mctx_t mc = {0};
    bool has_key = false;
    size_t key = 0;

    mc.in = details;
    mc.bound_vars = m->vars;
    mc.coll = m->coll;
    mc.text_fn = m->text_fn;
    mc.text_arg = m->text_arg;
    mc.doc = doc;
    mc.st = st;
    *matched = match_doc(m->root, doc, &mc, &has_key, &key);
    if (mc.err != 0) {
        *matched = false;
        return mc.err;
    }
    if (details != NULL) {
        details->has_key = *matched && has_key;
        details->key = key;
    }
    return 0;
}

bool
shl_matcher_matches(const shl_matcher_t *m, const bson_t *doc)
{
    bool matched = false;
    shl_status_t st;
    return shl_matcher_match(m, doc, NULL, &matched, &st) == 0 && matched;
}

const bson_t *
shl_matcher_filter(const shl_matcher_t *m)
{
    return m->filter;
}

bool
shl_matcher_is_trivial(const shl_matcher_t *m)
{
    return m->trivial;
}

int
shl_matcher_match_value(const shl_matcher_t *m, const char *placeholder, const bson_value_t *value,
                        bool *matched, shl_status_t *st)
{
    bson_t doc = BSON_INITIALIZER;
    int ret;
    query_append_value(&doc, placeholder, -1, value);
    ret = shl_matcher_match(m, &doc, NULL, matched, st);
    bson_destroy(&doc);
    return ret;
}

const char *
shl_matcher_placeholder(const shl_matcher_t *m, bool *error, shl_status_t *st)
{
    *error = m->placeholder_error;
    if (m->placeholder_error && st != NULL) {
        *st = m->placeholder_status;
    }
    return m->placeholder_error ? NULL : m->placeholder;
}

/* ---- equality extraction ---- */

static int
add_equality(bson_t *out, const char *path, const bson_value_t *v, shl_status_t *st)
{
    bson_iter_t it;
    size_t plen = strlen(path);
    int ret = 0;

    bson_iter_init(&it, out);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        size_t klen = strlen(k);
        if (klen == plen && strcmp(k, path) == 0) {
            SHL_FAIL(st, SHL_CODE_NOT_SINGLE_VALUE_FIELD,
                     "cannot infer query fields to set, path '%s' is matched twice", path);
        }
        if ((klen < plen && strncmp(k, path, klen) == 0 && path[klen] == '.') ||
            (plen < klen && strncmp(k, path, plen) == 0 && k[plen] == '.')) {
            SHL_FAIL(st, SHL_CODE_NOT_SINGLE_VALUE_FIELD,
                     "cannot infer query fields to set, both paths '%s' and '%s' are matched", path,
                     k);
        }
    }
    bson_append_value(out, path, -1, v);
done:
    return ret;
}

static int
collect_equalities(const mnode_t *n, bson_t *out, shl_status_t *st)
{
    int ret = 0;
    switch (n->kind) {
    case N_AND:
        for (size_t i = 0; i < n->nkids; i++) {
            SHL_ERR(collect_equalities(n->kids[i], out, st));
        }
        break;
    case N_OR:
        if (n->nkids == 1) {
            SHL_ERR(collect_equalities(n->kids[0], out, st));
        }
        break;
    case N_EQ:
        SHL_ERR(add_equality(out, n->path.dotted, &n->rhs, st));
        break;
    case N_IN:
        if (n->neqs == 1 && n->nkids == 0) {
            SHL_ERR(add_equality(out, n->path.dotted, &n->eqs[0], st));
        }
        break;
    default:
        break;
    }
done:
    return ret;
}

int
shl_matcher_equality_fields(const shl_matcher_t *m, bson_t *out, shl_status_t *st)
{
    bson_init(out);
    return collect_equalities(m->root, out, st);
}
