/*
 * projection.c -- parse and apply find() projections (projection.h). The parser builds a
 * tree keyed by path components with MongoDB's projection_ast rules (inclusion/exclusion
 * type, _id default, path collisions, positional / $slice / $elemMatch validation). An
 * inclusion projection is applied in two passes as MongoDB does: included fields in the
 * input document's order, then computed fields (expressions, $elemMatch, positional) in
 * the specification's order, replacing in place or appending.
 */
#include "bson/bson_iter.h"
#include "query/projection.h"

#include <string.h>

#include "query/expression.h"
#include "query/query_private.h"
#include "query/text.h"

typedef enum pkind {
    P_PATH,
    P_INCLUDE,
    P_EXCLUDE,
    P_EXPR,
    P_SLICE,
    P_ELEMMATCH,
    P_POSITIONAL,
} pkind_t;

typedef struct pnode pnode_t;
struct pnode {
    char *name;
    pkind_t kind;
    pnode_t **kids;
    size_t nkids;
    shl_expr_t *expr;
    bool has_skip;
    int32_t skip, limit;
    shl_matcher_t *elem; /* {name: {$elemMatch: ...}} */
    qpath_t pos_path;    /* positional: the path before ".$" */
    bool computed;       /* this subtree holds EXPR / ELEMMATCH / POSITIONAL nodes */
};

struct shl_projection {
    pnode_t *root;
    bool inclusion;
    bool positional;
    bool identity;
    bool add_fields; /* $addFields: keep everything, then computed fields */
    const shl_collator_t *coll; /* expressions' collation (borrowed; NULL: simple) */
};

typedef struct pctx {
    const bson_t *query;
    bool id_specified;
    bool has_positional;
    bool has_elem_match;
    bool has_find_slice;
    int type; /* 0 unknown, 1 inclusion, 2 exclusion */
    bool id_included_entirely;
} pctx_t;

#define QC_PROJ_COLLISION_REMAINING 31249
#define QC_PROJ_EXPR_IN_EXCLUSION 31252
#define QC_PROJ_LITERAL_IN_EXCLUSION 31310
#define QC_PROJ_UNKNOWN_EXPR 31325

static pnode_t *
pnode_new(const char *name, size_t len, pkind_t kind)
{
    pnode_t *n = bson_malloc0(sizeof(*n));
    n->name = bson_strndup(name, len);
    n->kind = kind;
    return n;
}

static void
pnode_destroy(pnode_t *n)
{
    if (n == NULL) {
        return;
    }
    for (size_t i = 0; i < n->nkids; i++) {
        pnode_destroy(n->kids[i]);
    }
    bson_free(n->kids);
    bson_free(n->name);
    shl_expr_destroy(n->expr);
    shl_matcher_destroy(n->elem);
    if (n->pos_path.parts != NULL) {
        qpath_cleanup(&n->pos_path);
    }
    bson_free(n);
}

static pnode_t *
pnode_find(const pnode_t *n, const char *name)
{
    for (size_t i = 0; i < n->nkids; i++) {
        if (strcmp(n->kids[i]->name, name) == 0) {
            return n->kids[i];
        }
    }
    return NULL;
}

static void
pnode_add(pnode_t *parent, pnode_t *kid)
{
    parent->kids = bson_realloc(parent->kids, (parent->nkids + 1) * sizeof(pnode_t *));
    parent->kids[parent->nkids++] = kid;
}

static void
pnode_remove(pnode_t *parent, const char *name)
{
    for (size_t i = 0; i < parent->nkids; i++) {
        if (strcmp(parent->kids[i]->name, name) == 0) {
            pnode_destroy(parent->kids[i]);
            memmove(&parent->kids[i], &parent->kids[i + 1],
                    (parent->nkids - i - 1) * sizeof(pnode_t *));
            parent->nkids--;
            return;
        }
    }
}

static int
check_path(const char *path, size_t len, shl_status_t *st)
{
    int ret = 0;
    if (len == 0) {
        SHL_FAIL(st, QC_FIELDPATH_EMPTY, "FieldPath cannot be constructed with empty string");
    }
    if (path[len - 1] == '.') {
        SHL_FAIL(st, QC_FIELDPATH_DOT_END, "FieldPath must not end with a '.'.");
    }
    for (size_t i = 0, start = 0; i <= len; i++) {
        if (i == len || path[i] == '.') {
            if (i == start) {
                SHL_FAIL(st, 15998, "FieldPath field names may not be empty strings.");
            }
            if (path[start] == '$') {
                SHL_FAIL(st, QC_FIELDPATH_DOLLAR,
                         "FieldPath field names may not start with '$'. "
                         "Consider using $getField or $setField.");
            }
            start = i + 1;
        }
    }
done:
    return ret;
}

/* add_at_path -- add 'kid' (named by the last component) under 'root' at 'path'. On
 * success the tree owns 'kid'; on error the caller still does. */
static int
add_at_path(pnode_t *root, const char *path, size_t len, pnode_t *kid, shl_status_t *st)
{
    qpath_t p;
    pnode_t *node = root;
    int ret = 0;

    SHL_ERR(check_path(path, len, st));
    qpath_init(&p, path, len);
    for (size_t i = 0; i < p.n; i++) {
        pnode_t *child = pnode_find(node, p.parts[i]);
        if (i == p.n - 1) {
            if (child != NULL) {
                qpath_cleanup(&p);
                SHL_FAIL(st, QC_PROJ_PATH_COLLISION, "Path collision at %.*s", (int)len, path);
            }
            bson_free(kid->name);
            kid->name = bson_strdup(p.parts[i]);
            pnode_add(node, kid);
            break;
        }
        if (child == NULL) {
            child = pnode_new(p.parts[i], strlen(p.parts[i]), P_PATH);
            pnode_add(node, child);
        } else if (child->kind != P_PATH) {
            const char *tail = strchr(path, '.');
            ret = shl_status_set(st, QC_PROJ_COLLISION_REMAINING,
                                 "Path collision at %.*s remaining portion %.*s", (int)len, path,
                                 (int)(len - (size_t)(tail - path) - 1), tail + 1);
            qpath_cleanup(&p);
            goto done;
        }
        node = child;
    }
    qpath_cleanup(&p);
done:
    return ret;
}

/* Find the first positional operator (".$." inside, ".$" at the end, or "$" alone). */
static bool
find_positional(const char *s, size_t *begin, size_t *end)
{
    size_t len = strlen(s);
    const char *m = strstr(s, ".$.");
    if (m != NULL) {
        *begin = (size_t)(m - s);
        *end = *begin + 3;
        return true;
    }
    if (len >= 2 && strcmp(s + len - 2, ".$") == 0) {
        *begin = len - 2;
        *end = len;
        return true;
    }
    if (strcmp(s, "$") == 0) {
        *begin = 0;
        *end = len;
        return true;
    }
    return false;
}

/* Whether some predicate of the filter has a path whose first component is 'field'. */
static bool
query_has_field(const bson_t *query, const char *field)
{
    bson_iter_t it;
    size_t flen = strlen(field);
    if (query == NULL) {
        return false;
    }
    bson_iter_init(&it, query);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (k[0] == '$') {
            if ((strcmp(k, "$and") == 0 || strcmp(k, "$or") == 0 || strcmp(k, "$nor") == 0) &&
                BSON_ITER_HOLDS_ARRAY(&it)) {
                bson_t arr, sub;
                bson_iter_t ai;
                query_bson_view(bson_iter_value(&it), &arr);
                bson_iter_init(&ai, &arr);
                while (shl_iter_next(&ai)) {
                    if (query_bson_view(bson_iter_value(&ai), &sub) &&
                        query_has_field(&sub, field)) {
                        return true;
                    }
                }
            }
            continue;
        }
        const char *dot = strchr(k, '.');
        size_t klen = dot ? (size_t)(dot - k) : strlen(k);
        if (klen == flen && strncmp(k, field, flen) == 0) {
            return true;
        }
    }
    return false;
}

static int parse_element(pctx_t *ctx, const char *key, const bson_value_t *v,
                         const char *parent_path, pnode_t *parent, bool parent_is_root,
                         shl_status_t *st);

/* numberInt(): saturating, NaN as 0 (no undefined casts). */
static int32_t
number_int(const bson_value_t *v)
{
    double d = query_value_as_double(v);
    if (v->value_type == BSON_TYPE_INT32) {
        return v->value.v_int32;
    }
    if (d != d) {
        return 0;
    }
    if (d >= 2147483647.0) {
        return INT32_MAX;
    }
    if (d <= -2147483648.0) {
        return INT32_MIN;
    }
    return (int32_t)d;
}

static int
parse_find_slice(pctx_t *ctx, const char *key, const bson_value_t *arg, pnode_t *parent,
                 shl_status_t *st)
{
    pnode_t *n = pnode_new(key, strlen(key), P_SLICE);
    int ret = 0;

    if (query_value_is_number(arg)) {
        n->limit = number_int(arg);
    } else if (arg->value_type == BSON_TYPE_ARRAY) {
        bson_t arr;
        bson_iter_t it;
        const bson_value_t *skip, *limit;
        query_bson_view(arg, &arr);
        if (bson_count_keys(&arr) != 2) {
            SHL_FAIL(st, 31272, "$slice array argument should be of form [skip, limit]");
        }
        bson_iter_init(&it, &arr);
        shl_iter_next(&it);
        skip = bson_iter_value(&it);
        if (!query_value_is_number(skip)) {
            SHL_FAIL(st, 31257, "$slice expects the skip argument to be a number, got %s",
                     shl_bson_type_name(skip->value_type));
        }
        n->skip = number_int(skip);
        shl_iter_next(&it);
        limit = bson_iter_value(&it);
        if (!query_value_is_number(limit)) {
            SHL_FAIL(st, 31258, "$slice expects the limit argument to be a number, got %s",
                     shl_bson_type_name(limit->value_type));
        }
        n->limit = number_int(limit);
        if (n->limit <= 0) {
            SHL_FAIL(st, 31259, "$slice limit must be positive, got %d", n->limit);
        }
        n->has_skip = true;
    } else {
        SHL_FAIL(st, 31273, "$slice only supports numbers and [skip, limit] arrays");
    }
    SHL_ERR(add_at_path(parent, key, strlen(key), n, st));
    n = NULL;
    ctx->has_find_slice = true;
done:
    pnode_destroy(n);
    return ret;
}

static int
parse_sub_object(pctx_t *ctx, const char *key, const bson_value_t *v, const char *parent_path,
                 pnode_t *parent, bool parent_is_root, shl_status_t *st)
{
    bson_t obj;
    bson_iter_t it;
    pnode_t *n = NULL, *sub = NULL;
    char *full = NULL;
    int ret = 0;

    query_bson_view(v, &obj);
    if (bson_count_keys(&obj) == 1 && bson_iter_init(&it, &obj) && shl_iter_next(&it) &&
        shl_iter_key(&it)[0] == '$') {
        const char *op = shl_iter_key(&it);
        const bson_value_t *arg = bson_iter_value(&it);
        if (strcmp(op, "$slice") == 0) {
            return parse_find_slice(ctx, key, arg, parent, st);
        }
        if (strcmp(op, "$elemMatch") == 0) {
            bson_t filter = BSON_INITIALIZER, inner;
            if (arg->value_type != BSON_TYPE_DOCUMENT) {
                SHL_FAIL(st, 31274, "elemMatch: Invalid argument, object required, but got %s",
                         shl_bson_type_name(arg->value_type));
            }
            if (ctx->has_positional) {
                SHL_FAIL(st, 31255, "Cannot specify positional operator and $elemMatch.");
            }
            if (strchr(key, '.') != NULL || !parent_is_root) {
                SHL_FAIL(st, 31275, "Cannot use $elemMatch projection on a nested field.");
            }
            bson_append_document_begin(&filter, key, -1, &inner);
            bson_append_value(&inner, "$elemMatch", -1, arg);
            bson_append_document_end(&filter, &inner);
            n = pnode_new(key, strlen(key), P_ELEMMATCH);
            ret = shl_matcher_new(&filter, SHL_MATCHER_NO_SPECIAL, &n->elem, st);
            bson_destroy(&filter);
            if (ret != 0) {
                goto done;
            }
            n->computed = true;
            SHL_ERR(add_at_path(parent, key, strlen(key), n, st));
            n = NULL;
            ctx->has_elem_match = true;
            goto done;
        }
        if (strcmp(op, "$meta") == 0) {
            /* Metadata (the text score): allowed in both kinds, deciding neither. */
            n = pnode_new(key, strlen(key), P_EXPR);
            SHL_ERR(shl_expr_parse(v, &n->expr, st));
            n->computed = true;
            SHL_ERR(add_at_path(parent, key, strlen(key), n, st));
            n = NULL;
            goto done;
        }
        /* A generic aggregation expression. */
        n = pnode_new(key, strlen(key), P_EXPR);
        if ((ret = shl_expr_parse(v, &n->expr, st)) != 0) {
            if (ret == QC_EXPR_UNKNOWN) {
                SHL_FAIL(st, QC_PROJ_UNKNOWN_EXPR, "Unknown expression %s", op);
            }
            goto done;
        }
        if (ctx->type == 2) {
            SHL_FAIL(st, QC_PROJ_EXPR_IN_EXCLUSION,
                     "Cannot use expression other than $meta in exclusion projection");
        }
        ctx->type = 1;
        n->computed = true;
        SHL_ERR(add_at_path(parent, key, strlen(key), n, st));
        n = NULL;
        goto done;
    }
    /* A nested projection: {a: {b: 1}} is {"a.b": 1}. */
    SHL_ERR(check_path(key, strlen(key), st));
    sub = pnode_find(parent, key);
    if (sub == NULL || sub->kind != P_PATH) {
        if (sub != NULL) {
            SHL_FAIL(st, QC_PROJ_PATH_COLLISION, "Path collision at %s", key);
        }
        sub = pnode_new(key, strlen(key), P_PATH);
        n = sub;
        SHL_ERR(add_at_path(parent, key, strlen(key), n, st));
        n = NULL;
    }
    full = parent_path ? bson_strdup_printf("%s.%s", parent_path, key) : bson_strdup(key);
    bson_iter_init(&it, &obj);
    while (shl_iter_next(&it)) {
        SHL_ERR(parse_element(ctx, shl_iter_key(&it), bson_iter_value(&it), full, sub, false, st));
    }
done:
    bson_free(full);
    pnode_destroy(n);
    return ret;
}

static int
parse_inclusion(pctx_t *ctx, const char *key, const char *parent_path, pnode_t *parent,
                bool parent_is_root, shl_status_t *st)
{
    bool top_id = parent_is_root && strcmp(key, "_id") == 0;
    size_t pb, pe;
    pnode_t *n = NULL;
    int ret = 0;

    if (!find_positional(key, &pb, &pe)) {
        n = pnode_new(key, strlen(key), P_INCLUDE);
        SHL_ERR(add_at_path(parent, key, strlen(key), n, st));
        n = NULL;
        if (top_id) {
            ctx->id_included_entirely = true;
        }
    } else {
        char match_field[256];
        const char *src = parent_path ? parent_path : key;
        size_t mlen = strcspn(src, ".");
        size_t qb, qe;
        if (ctx->has_positional) {
            SHL_FAIL(st, 31276, "Cannot specify more than one positional projection per query.");
        }
        if (ctx->has_elem_match) {
            SHL_FAIL(st, 31256, "Cannot specify positional operator and $elemMatch.");
        }
        if (ctx->query == NULL) {
            SHL_FAIL(st, 51050, "Projections with a positional operator require a matcher");
        }
        snprintf(match_field, sizeof(match_field), "%.*s", (int)mlen, src);
        if (!query_has_field(ctx->query, match_field)) {
            SHL_FAIL(st, 31277, "Positional projection '%s' does not match the query document.",
                     key);
        }
        if (strlen(key) >= 3 && strcmp(key + strlen(key) - 3, ".$.") == 0) {
            SHL_FAIL(st, 31270, "Path cannot end with '.$.'");
        }
        if (find_positional(key + pe, &qb, &qe) || strcmp(key + pe, "$") == 0) {
            SHL_FAIL(st, 31287, "Cannot use positional operator twice: %s", key);
        }
        if (!parent_is_root || pb == 0) {
            /* Positional below a sub-object ({a: {"b.$": 1}}) or "$" alone. */
            SHL_FAIL(st, 31277, "Positional projection '%s' does not match the query document.",
                     key);
        }
        SHL_ERR(check_path(key, pb, st));
        /* The node sits at the first component and carries the whole path. */
        n = pnode_new(key, strcspn(key, "."), P_POSITIONAL);
        qpath_init(&n->pos_path, key, pb);
        n->computed = true;
        if (pnode_find(parent, n->name) != NULL) {
            SHL_FAIL(st, QC_PROJ_PATH_COLLISION, "Path collision at %.*s", (int)pb, key);
        }
        pnode_add(parent, n);
        n = NULL;
        ctx->has_positional = true;
    }
    if (!top_id) {
        if (ctx->type == 2) {
            SHL_FAIL(st, QC_PROJ_INCLUSION_IN_EXCLUSION,
                     "Cannot do inclusion on field %s in exclusion projection", key);
        }
        ctx->type = 1;
    }
done:
    pnode_destroy(n);
    return ret;
}

static int
parse_element(pctx_t *ctx, const char *key, const bson_value_t *v, const char *parent_path,
              pnode_t *parent, bool parent_is_root, shl_status_t *st)
{
    size_t pb, pe;
    bool positional = find_positional(key, &pb, &pe);
    pnode_t *n = NULL;
    int ret = 0;

    if (v->value_type == BSON_TYPE_DOCUMENT) {
        if (positional) {
            SHL_FAIL(st, 31271,
                     "positional projection cannot be used with an expression or sub "
                     "object");
        }
        return parse_sub_object(ctx, key, v, parent_path, parent, parent_is_root, st);
    }
    if (v->value_type == BSON_TYPE_BOOL || query_value_is_number(v)) {
        if (query_value_truthy(v)) {
            return parse_inclusion(ctx, key, parent_path, parent, parent_is_root, st);
        }
        n = pnode_new(key, strlen(key), P_EXCLUDE);
        SHL_ERR(add_at_path(parent, key, strlen(key), n, st));
        n = NULL;
        if (!(parent_is_root && strcmp(key, "_id") == 0)) {
            if (ctx->type == 1) {
                SHL_FAIL(st, QC_PROJ_EXCLUSION_IN_INCLUSION,
                         "Cannot do exclusion on field %s in inclusion projection", key);
            }
            ctx->type = 2;
        }
        goto done;
    }
    if (positional) {
        SHL_FAIL(st, 31308, "positional projection cannot be used with a literal");
    }
    n = pnode_new(key, strlen(key), P_EXPR);
    SHL_ERR(shl_expr_parse(v, &n->expr, st));
    n->computed = true;
    SHL_ERR(add_at_path(parent, key, strlen(key), n, st));
    n = NULL;
    if (ctx->type == 2) {
        char *js = query_value_to_json(v);
        ret = shl_status_set(st, QC_PROJ_LITERAL_IN_EXCLUSION,
                             "Cannot use an expression %s: %s in an exclusion projection", key, js);
        bson_free(js);
        goto done;
    }
    ctx->type = 1;
done:
    pnode_destroy(n);
    return ret;
}

static bool
mark_computed(pnode_t *n)
{
    bool c = n->kind == P_EXPR || n->kind == P_ELEMMATCH || n->kind == P_POSITIONAL;
    for (size_t i = 0; i < n->nkids; i++) {
        c = mark_computed(n->kids[i]) || c;
    }
    n->computed = c;
    return c;
}

int
shl_projection_new(const bson_t *spec, const bson_t *query, shl_projection_t **out,
                   shl_status_t *st)
{
    shl_projection_t *p = bson_malloc0(sizeof(*p));
    pctx_t ctx = {0};
    bson_iter_t it;
    int ret = 0;

    *out = NULL;
    ctx.query = query;
    p->root = pnode_new("", 0, P_PATH);
    p->identity = bson_count_keys(spec) == 0;
    bson_iter_init(&it, spec);
    while (shl_iter_next(&it)) {
        const char *key = shl_iter_key(&it);
        ctx.id_specified |= strcmp(key, "_id") == 0 || strncmp(key, "_id.", 4) == 0;
        SHL_ERR(parse_element(&ctx, key, bson_iter_value(&it), NULL, p->root, true, st));
    }
    if (ctx.type == 0) {
        if (ctx.id_included_entirely) {
            ctx.type = 1;
        } else if (ctx.has_find_slice) {
            ctx.type = 2;
        } else if (ctx.has_elem_match) {
            ctx.type = 1;
        } else {
            ctx.type = 2;
        }
    }
    if (!ctx.id_specified && ctx.type == 1) {
        pnode_add(p->root, pnode_new("_id", 3, P_INCLUDE));
    }
    if (ctx.type == 2 && ctx.id_specified && ctx.id_included_entirely) {
        pnode_remove(p->root, "_id");
    }
    p->inclusion = ctx.type == 1;
    p->positional = ctx.has_positional;
    mark_computed(p->root);
    *out = p;
    p = NULL;
done:
    shl_projection_destroy(p);
    return ret;
}

void
shl_projection_destroy(shl_projection_t *p)
{
    if (p == NULL) {
        return;
    }
    pnode_destroy(p->root);
    bson_free(p);
}

void
shl_projection_set_collator(shl_projection_t *p, const shl_collator_t *coll)
{
    p->coll = coll;
}

bool
shl_projection_is_inclusion(const shl_projection_t *p)
{
    return p->inclusion;
}

bool
shl_projection_needs_match_details(const shl_projection_t *p)
{
    return p->positional;
}

/* ---- application ---- */

typedef struct actx {
    const bson_t *root;
    const shl_match_details_t *details;
    const bson_t *vars;
    const shl_collator_t *coll;
    shl_status_t *st;
    int err;
} actx_t;

static void
append_array_key(bson_t *arr, uint32_t *n, const bson_value_t *v)
{
    char buf[16];
    const char *k;
    size_t klen = bson_uint32_to_string((*n)++, &k, buf, sizeof(buf));
    bson_append_value(arr, k, (int)klen, v);
}

static void
append_doc_value(bson_t *out, const char *key, bson_t *doc, bool is_array)
{
    if (is_array) {
        bson_append_array(out, key, -1, doc);
    } else {
        bson_append_document(out, key, -1, doc);
    }
}

/* $slice of the find projection on one value (non-arrays are returned unchanged). */
static void
append_sliced(bson_t *out, const char *key, const pnode_t *n, const bson_value_t *v)
{
    bson_t arr, res = BSON_INITIALIZER;
    bson_iter_t it;
    int64_t len, start, count, i = 0;
    uint32_t k = 0;

    if (v->value_type != BSON_TYPE_ARRAY) {
        bson_append_value(out, key, -1, v);
        bson_destroy(&res);
        return;
    }
    query_bson_view(v, &arr);
    len = bson_count_keys(&arr);
    if (n->has_skip) {
        start = n->skip >= 0 ? n->skip : (len + n->skip < 0 ? 0 : len + n->skip);
        count = n->limit;
    } else if (n->limit >= 0) {
        start = 0;
        count = n->limit;
    } else {
        start = len + n->limit < 0 ? 0 : len + n->limit;
        count = len;
    }
    bson_iter_init(&it, &arr);
    while (shl_iter_next(&it)) {
        if (i >= start && i < start + count) {
            append_array_key(&res, &k, bson_iter_value(&it));
        }
        i++;
    }
    bson_append_array(out, key, -1, &res);
    bson_destroy(&res);
}

/* -- exclusion -- */

static void excl_doc(const bson_t *in, const pnode_t *node, bson_t *out);

static void
excl_array(const bson_value_t *v, const pnode_t *node, bson_t *out)
{
    bson_t arr;
    bson_iter_t it;
    uint32_t k = 0;
    query_bson_view(v, &arr);
    bson_iter_init(&it, &arr);
    while (shl_iter_next(&it)) {
        const bson_value_t *e = bson_iter_value(&it);
        if (e->value_type == BSON_TYPE_DOCUMENT) {
            bson_t sub, res = BSON_INITIALIZER;
            char buf[16];
            const char *key;
            query_bson_view(e, &sub);
            excl_doc(&sub, node, &res);
            bson_uint32_to_string(k++, &key, buf, sizeof(buf));
            bson_append_document(out, key, -1, &res);
            bson_destroy(&res);
        } else if (e->value_type == BSON_TYPE_ARRAY) {
            bson_t res = BSON_INITIALIZER;
            char buf[16];
            const char *key;
            excl_array(e, node, &res);
            bson_uint32_to_string(k++, &key, buf, sizeof(buf));
            bson_append_array(out, key, -1, &res);
            bson_destroy(&res);
        } else {
            append_array_key(out, &k, e);
        }
    }
}

static void
excl_doc(const bson_t *in, const pnode_t *node, bson_t *out)
{
    bson_iter_t it;
    bson_iter_init(&it, in);
    while (shl_iter_next(&it)) {
        const char *key = shl_iter_key(&it);
        const bson_value_t *v = bson_iter_value(&it);
        const pnode_t *kid = pnode_find(node, key);
        if (kid == NULL || kid->kind == P_INCLUDE) {
            bson_append_value(out, key, -1, v);
        } else if (kid->kind == P_SLICE) {
            append_sliced(out, key, kid, v);
        } else if (kid->kind == P_PATH) {
            bson_t res = BSON_INITIALIZER, sub;
            if (v->value_type == BSON_TYPE_DOCUMENT) {
                query_bson_view(v, &sub);
                excl_doc(&sub, kid, &res);
                bson_append_document(out, key, -1, &res);
            } else if (v->value_type == BSON_TYPE_ARRAY) {
                excl_array(v, kid, &res);
                bson_append_array(out, key, -1, &res);
            } else {
                bson_append_value(out, key, -1, v);
            }
            bson_destroy(&res);
        }
        /* P_EXCLUDE drops the field; computed fields come in the second pass. */
    }
}

/* -- inclusion, first pass -- */

static void incl_doc(const bson_t *in, const pnode_t *node, bson_t *out);

/* Returns false when the value projects to nothing (a scalar under a sub-projection). */
static bool
incl_value(const bson_value_t *v, const pnode_t *node, bson_t *res, bool *is_array)
{
    bson_t sub;
    bson_iter_t it;
    uint32_t k = 0;

    if (v->value_type == BSON_TYPE_DOCUMENT) {
        query_bson_view(v, &sub);
        incl_doc(&sub, node, res);
        *is_array = false;
        return true;
    }
    if (v->value_type != BSON_TYPE_ARRAY) {
        return false;
    }
    *is_array = true;
    query_bson_view(v, &sub);
    bson_iter_init(&it, &sub);
    while (shl_iter_next(&it)) {
        bson_t er = BSON_INITIALIZER;
        bool ea;
        if (incl_value(bson_iter_value(&it), node, &er, &ea)) {
            char buf[16];
            const char *key;
            bson_uint32_to_string(k++, &key, buf, sizeof(buf));
            append_doc_value(res, key, &er, ea);
        }
        bson_destroy(&er);
    }
    return true;
}

static void
incl_doc(const bson_t *in, const pnode_t *node, bson_t *out)
{
    bson_iter_t it;
    bson_iter_init(&it, in);
    while (shl_iter_next(&it)) {
        const char *key = shl_iter_key(&it);
        const bson_value_t *v = bson_iter_value(&it);
        const pnode_t *kid = pnode_find(node, key);
        if (kid == NULL && key[0] == SHL_TEXT_SCORE_FIELD[0] && node->name[0] == '\0' &&
            strcmp(key, SHL_TEXT_SCORE_FIELD) == 0) {
            /* The text score is metadata, kept by every projection (query/text.h). */
            bson_append_value(out, key, -1, v);
            continue;
        }
        if (kid == NULL) {
            continue;
        }
        if (kid->kind == P_INCLUDE) {
            bson_append_value(out, key, -1, v);
        } else if (kid->kind == P_SLICE) {
            append_sliced(out, key, kid, v);
        } else if (kid->kind == P_PATH) {
            bson_t res = BSON_INITIALIZER;
            bool is_array;
            if (incl_value(v, kid, &res, &is_array)) {
                append_doc_value(out, key, &res, is_array);
            }
            bson_destroy(&res);
        }
    }
}

/* -- computed fields, second pass -- */

static void computed_doc(actx_t *ac, const bson_t *cur, const pnode_t *node, bson_t *out);

/* chain_for -- a P_PATH node including components [from, n) of 'p'. */
static pnode_t *
chain_for(const qpath_t *p, size_t from)
{
    pnode_t *top = pnode_new("", 0, P_PATH), *cur = top;
    for (size_t j = from; j < p->n; j++) {
        pnode_t *kid =
            pnode_new(p->parts[j], strlen(p->parts[j]), j == p->n - 1 ? P_INCLUDE : P_PATH);
        pnode_add(cur, kid);
        cur = kid;
    }
    return top;
}

/* Positional: the value at the path with its first array narrowed to the matched element. */
static bool
positional_value(actx_t *ac, const bson_value_t *v, const qpath_t *p, size_t i, size_t idx,
                 bson_value_t *out, bson_t *holder, bool *narrowed)
{
    bson_t sub;
    bson_iter_t it;

    if (v->value_type == BSON_TYPE_ARRAY && !*narrowed) {
        uint32_t k = 0;
        bson_t arr, res = BSON_INITIALIZER;
        size_t n = 0;
        *narrowed = true;
        query_bson_view(v, &arr);
        bson_iter_init(&it, &arr);
        while (shl_iter_next(&it)) {
            if (n++ != idx) {
                continue;
            }
            if (i == p->n - 1) {
                append_array_key(&res, &k, bson_iter_value(&it));
            } else {
                bson_value_t ev;
                bson_t eh = BSON_INITIALIZER;
                if (positional_value(ac, bson_iter_value(&it), p, i, idx, &ev, &eh, narrowed)) {
                    append_array_key(&res, &k, &ev);
                }
                bson_destroy(&eh);
            }
        }
        if (k == 0) {
            bson_destroy(&res);
            ac->err = shl_status_set(ac->st, 51247, "positional operator '.$' element mismatch");
            return false;
        }
        bson_append_array(holder, "v", 1, &res);
        bson_destroy(&res);
        bson_iter_init_find(&it, holder, "v");
        *out = *bson_iter_value(&it);
        return true;
    }
    if (v->value_type == BSON_TYPE_DOCUMENT && i + 1 < p->n) {
        /* Descend one component, keeping only the path. */
        bson_t res = BSON_INITIALIZER, h2 = BSON_INITIALIZER;
        bson_value_t cv;
        query_bson_view(v, &sub);
        if (bson_iter_init_find(&it, &sub, p->parts[i + 1]) &&
            positional_value(ac, bson_iter_value(&it), p, i + 1, idx, &cv, &h2, narrowed)) {
            bson_append_value(&res, p->parts[i + 1], -1, &cv);
        }
        bson_destroy(&h2);
        bson_append_document(holder, "v", 1, &res);
        bson_destroy(&res);
        bson_iter_init_find(&it, holder, "v");
        *out = *bson_iter_value(&it);
        return true;
    }
    if (v->value_type == BSON_TYPE_ARRAY && i + 1 < p->n) {
        /* An array after the narrowed one: project the rest of the path normally. */
        pnode_t *chain = chain_for(p, i + 1);
        bson_t res = BSON_INITIALIZER;
        bool is_array = true;
        incl_value(v, chain, &res, &is_array);
        append_doc_value(holder, "v", &res, is_array);
        bson_destroy(&res);
        pnode_destroy(chain);
        bson_iter_init_find(&it, holder, "v");
        *out = *bson_iter_value(&it);
        return true;
    }
    if (i == p->n - 1 || v->value_type != BSON_TYPE_DOCUMENT) {
        bson_append_value(holder, "v", 1, v);
        bson_iter_init_find(&it, holder, "v");
        *out = *bson_iter_value(&it);
        return i == p->n - 1;
    }
    return false;
}

static bool
compute_value(actx_t *ac, const pnode_t *kid, const bson_t *cur, bson_value_t *out, bson_t *holder)
{
    bson_iter_t it;
    if (kid->kind == P_EXPR) {
        shl_expr_ctx_t ec = {0};
        ec.root = ac->root;
        ec.vars = ac->vars;
        ec.collator = ac->coll;
        if (ac->err == 0) {
            ac->err = shl_expr_evaluate(kid->expr, &ec, out, ac->st);
        }
        if (ac->err != 0 || out->value_type == BSON_TYPE_EOD) {
            bson_value_destroy(out);
            return false;
        }
        bson_append_value(holder, "v", 1, out);
        bson_value_destroy(out);
        bson_iter_init_find(&it, holder, "v");
        *out = *bson_iter_value(&it);
        return true;
    }
    if (kid->kind == P_ELEMMATCH) {
        shl_match_details_t d = {0};
        bool matched = false;
        shl_status_t tmp;
        if (shl_matcher_match(kid->elem, ac->root, &d, &matched, &tmp) != 0 || !matched ||
            !d.has_key || !bson_iter_init_find(&it, ac->root, kid->name)) {
            return false;
        }
        bson_t arr, res = BSON_INITIALIZER;
        bson_iter_t ai;
        size_t n = 0;
        uint32_t k = 0;
        query_bson_view(bson_iter_value(&it), &arr);
        bson_iter_init(&ai, &arr);
        while (shl_iter_next(&ai)) {
            if (n++ == d.key) {
                append_array_key(&res, &k, bson_iter_value(&ai));
            }
        }
        bson_append_array(holder, "v", 1, &res);
        bson_destroy(&res);
        bson_iter_init_find(&it, holder, "v");
        *out = *bson_iter_value(&it);
        return true;
    }
    if (kid->kind == P_POSITIONAL) {
        bool narrowed = false;
        if (ac->details == NULL || !ac->details->has_key) {
            if (ac->err == 0) {
                ac->err = shl_status_set(ac->st, QC_PROJ_POSITIONAL_NO_MATCH,
                                         "positional operator '.$' couldn't find a matching "
                                         "element in the array");
            }
            return false;
        }
        if (!bson_iter_init_find(&it, ac->root, kid->pos_path.parts[0])) {
            return false;
        }
        return positional_value(ac, bson_iter_value(&it), &kid->pos_path, 0, ac->details->key, out,
                                holder, &narrowed) &&
               ac->err == 0;
    }
    /* A path with computed fields below: recurse with MongoDB's applyExpressionsToValue. */
    const bson_value_t *existing = NULL;
    if (cur != NULL && bson_iter_init_find(&it, cur, kid->name)) {
        existing = bson_iter_value(&it);
    }
    if (existing != NULL && existing->value_type == BSON_TYPE_ARRAY) {
        bson_t arr, res = BSON_INITIALIZER;
        bson_iter_t ai;
        uint32_t k = 0;
        query_bson_view(existing, &arr);
        bson_iter_init(&ai, &arr);
        while (shl_iter_next(&ai)) {
            /* Each element is handled as if it were the field's value. */
            bson_t one = BSON_INITIALIZER, oneout = BSON_INITIALIZER, h = BSON_INITIALIZER;
            bson_value_t ev;
            bson_append_value(&one, kid->name, -1, bson_iter_value(&ai));
            if (compute_value(ac, kid, &one, &ev, &h)) {
                append_array_key(&res, &k, &ev);
            }
            bson_destroy(&one);
            bson_destroy(&oneout);
            bson_destroy(&h);
        }
        bson_append_array(holder, "v", 1, &res);
        bson_destroy(&res);
    } else {
        bson_t sub, res = BSON_INITIALIZER;
        if (existing != NULL && existing->value_type == BSON_TYPE_DOCUMENT) {
            query_bson_view(existing, &sub);
            computed_doc(ac, &sub, kid, &res);
        } else {
            computed_doc(ac, NULL, kid, &res);
        }
        bson_append_document(holder, "v", 1, &res);
        bson_destroy(&res);
    }
    bson_iter_init_find(&it, holder, "v");
    *out = *bson_iter_value(&it);
    return true;
}

/* computed_doc -- copy 'cur' (may be NULL) replacing or appending the computed children of
 * 'node' in specification order. */
static void
computed_doc(actx_t *ac, const bson_t *cur, const pnode_t *node, bson_t *out)
{
    size_t nk = node->nkids;
    bson_t *holders = bson_aligned_alloc0(BSON_ALIGNOF(bson_t), (nk + 1) * sizeof(bson_t));
    bson_value_t *vals = bson_malloc0((nk + 1) * sizeof(bson_value_t));
    bool *have = bson_malloc0((nk + 1) * sizeof(bool)),
         *used = bson_malloc0((nk + 1) * sizeof(bool));
    bson_iter_t it;

    for (size_t i = 0; i < nk; i++) {
        bson_init(&holders[i]);
        if (node->kids[i]->computed) {
            have[i] = compute_value(ac, node->kids[i], cur, &vals[i], &holders[i]);
        }
    }
    if (cur != NULL) {
        bson_iter_init(&it, cur);
        while (shl_iter_next(&it)) {
            const char *key = shl_iter_key(&it);
            size_t i;
            for (i = 0; i < nk; i++) {
                if (node->kids[i]->computed && strcmp(node->kids[i]->name, key) == 0) {
                    break;
                }
            }
            if (i == nk) {
                bson_append_value(out, key, -1, bson_iter_value(&it));
            } else {
                used[i] = true;
                if (have[i]) {
                    bson_append_value(out, key, -1, &vals[i]);
                }
            }
        }
    }
    for (size_t i = 0; i < nk; i++) {
        if (node->kids[i]->computed && !used[i] && have[i]) {
            bson_append_value(out, node->kids[i]->name, -1, &vals[i]);
        }
        bson_destroy(&holders[i]);
    }
    bson_free(holders);
    bson_free(vals);
    bson_free(have);
    bson_free(used);
}

int
shl_projection_apply(const shl_projection_t *p, const bson_t *doc,
                     const shl_match_details_t *details, const bson_t *vars, bson_t *out,
                     shl_status_t *st)
{
    actx_t ac = {0};
    bson_t first = BSON_INITIALIZER;

    bson_init(out);
    if (p->identity) {
        bson_concat(out, doc);
        bson_destroy(&first);
        return 0;
    }
    ac.root = doc;
    ac.details = details;
    ac.vars = vars;
    ac.coll = p->coll;
    ac.st = st;
    if (p->add_fields) {
        bson_concat(&first, doc);
    } else if (p->inclusion) {
        incl_doc(doc, p->root, &first);
    } else {
        excl_doc(doc, p->root, &first);
    }
    if (p->root->computed) {
        computed_doc(&ac, &first, p->root, out);
    } else {
        bson_concat(out, &first);
    }
    bson_destroy(&first);
    if (ac.err != 0) {
        bson_reinit(out);
    }
    return ac.err;
}

int
query_addfields_new(const bson_t *spec, shl_projection_t **out, shl_status_t *st)
{
    shl_projection_t *p = bson_malloc0(sizeof(*p));
    bson_iter_t it;
    pnode_t *n = NULL;
    int ret = 0;

    *out = NULL;
    p->root = pnode_new("", 0, P_PATH);
    p->add_fields = true;
    bson_iter_init(&it, spec);
    while (shl_iter_next(&it)) {
        const char *key = shl_iter_key(&it);
        n = pnode_new(key, strlen(key), P_EXPR);
        SHL_ERR(shl_expr_parse(bson_iter_value(&it), &n->expr, st));
        SHL_ERR(add_at_path(p->root, key, strlen(key), n, st));
        n = NULL;
    }
    mark_computed(p->root);
    *out = p;
    p = NULL;
done:
    pnode_destroy(n);
    shl_projection_destroy(p);
    return ret;
}
