/*
 * update.c -- parse and apply updates (update.h). Operator updates become a tree keyed by
 * path components, as MongoDB's UpdateObjectNode / UpdateArrayNode: siblings are applied
 * in MongoDB's order (lexicographic, numeric names numerically), "$" resolves to the
 * matcher's array position, "$[]" / "$[id]" to every (filtered) element. Each leaf operator
 * resolves its concrete path in a mutable copy of the document (mdoc.h), creating missing
 * fields where the operator does. Replacements and pipelines produce a whole new document
 * whose _id must not change.
 */
#include "bson/bson_iter.h"
#include "query/update.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "bson/bson_compare.h"
#include "bson/bson_util.h"
#include "query/expression.h"
#include "query/mdoc.h"
#include "query/projection.h"
#include "query/query_private.h"
#include "query/sort.h"

typedef enum uop {
    OP_SET,
    OP_UNSET,
    OP_INC,
    OP_MUL,
    OP_MIN,
    OP_MAX,
    OP_RENAME,
    OP_CURRENT_DATE,
    OP_SET_ON_INSERT,
    OP_PUSH,
    OP_ADD_TO_SET,
    OP_POP,
    OP_PULL,
    OP_PULL_ALL,
    OP_PLACEHOLDER, /* the source of a $rename: only reserves the path */
} uop_t;

static const struct {
    const char *name;
    uop_t op;
} op_table[] = {
    {"$set", OP_SET},
    {"$unset", OP_UNSET},
    {"$inc", OP_INC},
    {"$mul", OP_MUL},
    {"$min", OP_MIN},
    {"$max", OP_MAX},
    {"$rename", OP_RENAME},
    {"$currentDate", OP_CURRENT_DATE},
    {"$setOnInsert", OP_SET_ON_INSERT},
    {"$push", OP_PUSH},
    {"$addToSet", OP_ADD_TO_SET},
    {"$pop", OP_POP},
    {"$pull", OP_PULL},
    {"$pullAll", OP_PULL_ALL},
};

typedef enum unkind { UN_OBJECT, UN_ARRAY, UN_LEAF } unkind_t;

typedef struct unode unode_t;
struct unode {
    unkind_t kind;
    char *name;
    unode_t **kids;
    size_t nkids;
    unode_t *positional; /* UN_OBJECT: the "$" child */
    /* UN_LEAF */
    const shl_collator_t *coll; /* the update's collator (borrowed from it; NULL: simple) */
    uop_t op;
    const char *opname;
    bson_value_t arg; /* borrowed from the update's copy */
    char *path;       /* the dotted path as written, for messages */
    /* $push / $addToSet */
    bool has_each;
    bson_value_t each;
    bool has_slice, has_position;
    int64_t slice, position;
    int sort_dir; /* $sort: 1 / -1 on whole elements, 0 none */
    shl_sort_pattern_t *sort_pattern;
    /* $pull */
    shl_matcher_t *pull_matcher;
    bool pull_wrapped;
    /* $rename */
    qpath_t from;
    /* $currentDate */
    bool ts;
    /* $pop */
    int pop_dir;
};

typedef struct afilter {
    char *id;
    shl_matcher_t *m;
    bool used;
} afilter_t;

typedef enum pstage_kind { PS_ADD_FIELDS, PS_PROJECT, PS_REPLACE } pstage_kind_t;

typedef struct pstage {
    pstage_kind_t kind;
    shl_projection_t *proj;
    shl_expr_t *expr;
    const char *name;
} pstage_t;

struct shl_update {
    shl_update_kind_t kind;
    bson_t *spec; /* our copy of `u` wrapped as {"u": <u>} */
    bson_value_t u;
    unode_t *root;
    afilter_t *filters;
    size_t nfilters;
    bool positional;
    pstage_t *stages;
    size_t nstages;
    shl_collator_t *coll; /* a reference; NULL: simple (shl_update_set_collator) */
};

/* ---- tree ---- */

static unode_t *
unode_new(unkind_t kind, const char *name)
{
    unode_t *n = bson_malloc0(sizeof(*n));
    n->kind = kind;
    n->name = bson_strdup(name);
    return n;
}

static void
unode_destroy(unode_t *n)
{
    if (n == NULL) {
        return;
    }
    for (size_t i = 0; i < n->nkids; i++) {
        unode_destroy(n->kids[i]);
    }
    bson_free(n->kids);
    unode_destroy(n->positional);
    bson_free(n->name);
    bson_free(n->path);
    shl_sort_pattern_destroy(n->sort_pattern);
    shl_matcher_destroy(n->pull_matcher);
    if (n->from.parts != NULL) {
        qpath_cleanup(&n->from);
    }
    bson_free(n);
}

static bool
is_array_filter(const char *c)
{
    size_t len = strlen(c);
    return len >= 3 && c[0] == '$' && c[1] == '[' && c[len - 1] == ']';
}

/* MongoDB's order of sibling fields: numeric names numerically, others by bytes. */
static int
field_cmp(const char *a, const char *b)
{
    if (query_all_digits(a) && query_all_digits(b)) {
        size_t la = strlen(a), lb = strlen(b);
        while (la > 1 && *a == '0') {
            a++;
            la--;
        }
        while (lb > 1 && *b == '0') {
            b++;
            lb--;
        }
        if (la != lb) {
            return la < lb ? -1 : 1;
        }
    }
    return strcmp(a, b);
}

static int
unode_qsort_cmp(const void *a, const void *b)
{
    return field_cmp((*(unode_t *const *)a)->name, (*(unode_t *const *)b)->name);
}

static void
unode_sort(unode_t *n)
{
    if (n->nkids > 1) {
        qsort(n->kids, n->nkids, sizeof(unode_t *), unode_qsort_cmp);
    }
    for (size_t i = 0; i < n->nkids; i++) {
        unode_sort(n->kids[i]);
    }
    if (n->positional != NULL) {
        unode_sort(n->positional);
    }
}

static unode_t *
unode_find(const unode_t *n, const char *name)
{
    for (size_t i = 0; i < n->nkids; i++) {
        if (strcmp(n->kids[i]->name, name) == 0) {
            return n->kids[i];
        }
    }
    return NULL;
}

static void
unode_add(unode_t *parent, unode_t *kid)
{
    parent->kids = bson_realloc(parent->kids, (parent->nkids + 1) * sizeof(unode_t *));
    parent->kids[parent->nkids++] = kid;
}

/* ---- parsing ---- */

static afilter_t *
find_filter(shl_update_t *u, const char *id, size_t idlen)
{
    for (size_t i = 0; i < u->nfilters; i++) {
        if (strlen(u->filters[i].id) == idlen && strncmp(u->filters[i].id, id, idlen) == 0) {
            return &u->filters[i];
        }
    }
    return NULL;
}

static int
validate_update_path(shl_update_t *u, const qpath_t *p, shl_status_t *st)
{
    int positional = 0, ret = 0;
    if (p->dotted[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_EMPTY_FIELD_NAME, "An empty update path is not valid.");
    }
    for (size_t i = 0; i < p->n; i++) {
        const char *c = p->parts[i];
        if (*c == '\0') {
            SHL_FAIL(st, SHL_CODE_EMPTY_FIELD_NAME,
                     "The update path '%s' contains an empty field name, which is not allowed.",
                     p->dotted);
        }
        if (strcmp(c, "$") == 0) {
            if (i == 0) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "Cannot have positional (i.e. '$') element in the first position in "
                         "path '%s'",
                         p->dotted);
            }
            if (++positional > 1) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "Too many positional (i.e. '$') elements found in path '%s'", p->dotted);
            }
            u->positional = true;
        } else if (is_array_filter(c)) {
            if (i == 0) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "Cannot have array filter identifier (i.e. '$[<id>]') element in the "
                         "first position in path '%s'",
                         p->dotted);
            }
            size_t idlen = strlen(c) - 3;
            if (idlen > 0) {
                afilter_t *f = find_filter(u, c + 2, idlen);
                if (f == NULL) {
                    SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                             "No array filter found for identifier '%.*s' in path '%s'", (int)idlen,
                             c + 2, p->dotted);
                }
                f->used = true;
            }
        }
        /* Other '$'-prefixed components are field names (MongoDB 5.0+): nested ones are
         * updatable; a top-level one only when the update inserts (an upsert), which
         * validate_storage decides on the result. */
    }
done:
    return ret;
}

/* add_leaf -- attach 'leaf' at path 'p', with MongoDB's conflict rules. */
static int
add_leaf(unode_t *root, const qpath_t *p, unode_t *leaf, shl_status_t *st)
{
    unode_t *node = root;
    int ret = 0;
    char *prefix;

    for (size_t i = 0; i < p->n; i++) {
        const char *comp = p->parts[i];
        bool last = i == p->n - 1;
        unkind_t need = last ? UN_LEAF : (is_array_filter(p->parts[i + 1]) ? UN_ARRAY : UN_OBJECT);
        unode_t *child = (node->kind == UN_OBJECT && strcmp(comp, "$") == 0)
                             ? node->positional
                             : unode_find(node, comp);
        if (child != NULL) {
            if (last || child->kind == UN_LEAF || child->kind != need) {
                prefix = qpath_dotted_prefix(p, i + 1);
                ret = shl_status_set(st, SHL_CODE_CONFLICTING_UPDATE_OPERATORS,
                                     "Updating the path '%s' would create a conflict at '%s'",
                                     p->dotted, prefix);
                bson_free(prefix);
                goto done;
            }
            node = child;
            continue;
        }
        if (last) {
            child = leaf;
            bson_free(child->name);
            child->name = bson_strdup(comp);
        } else {
            child = unode_new(need, comp);
        }
        if (node->kind == UN_OBJECT && strcmp(comp, "$") == 0) {
            node->positional = child;
        } else {
            unode_add(node, child);
        }
        node = child;
    }
done:
    return ret;
}

static int
parse_each_modifiers(unode_t *leaf, const bson_value_t *arg, bool is_push, shl_status_t *st)
{
    bson_t obj;
    bson_iter_t it;
    int ret = 0;
    char *js;

    query_bson_view(arg, &obj);
    bson_iter_init(&it, &obj);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        const bson_value_t *v = bson_iter_value(&it);
        if (strcmp(k, "$each") == 0) {
            if (v->value_type != BSON_TYPE_ARRAY) {
                if (is_push) {
                    SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                             "The argument to $each in $push must be an array but it was of "
                             "type: %s",
                             shl_bson_type_name(v->value_type));
                }
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "The argument to $each in $addToSet must be an array but was %s",
                         shl_bson_type_name(v->value_type));
            }
            leaf->has_each = true;
            leaf->each = *v;
        } else if (!is_push) {
            js = query_value_to_json(arg);
            ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                                 "Found unexpected fields after $each in $addToSet: %s", js);
            bson_free(js);
            goto done;
        } else if (strcmp(k, "$slice") == 0) {
            shl_status_t tmp;
            if (!query_value_is_number(v) ||
                query_parse_int64(v, &leaf->slice, "$slice", &tmp) != 0) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "The value for $slice must be an integer value but was given type: %s",
                         shl_bson_type_name(v->value_type));
            }
            leaf->has_slice = true;
        } else if (strcmp(k, "$position") == 0) {
            shl_status_t tmp;
            if (!query_value_is_number(v) ||
                query_parse_int64(v, &leaf->position, "$position", &tmp) != 0) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "The value for $position must be an integer value, not of type: %s",
                         shl_bson_type_name(v->value_type));
            }
            leaf->has_position = true;
        } else if (strcmp(k, "$sort") == 0) {
            if (query_value_is_number(v)) {
                double d = query_value_as_double(v);
                if (d != 1 && d != -1) {
                    SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                             "The $sort element value must be either 1 or -1");
                }
                leaf->sort_dir = d > 0 ? 1 : -1;
            } else if (v->value_type == BSON_TYPE_DOCUMENT) {
                bson_t spec;
                bson_iter_t si;
                shl_status_t tmp;
                query_bson_view(v, &spec);
                if (bson_count_keys(&spec) == 0) {
                    SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                             "The $sort pattern is empty when it should be "
                             "a set of fields.");
                }
                bson_iter_init(&si, &spec);
                while (shl_iter_next(&si)) {
                    double d = BSON_ITER_HOLDS_NUMBER(&si) ? bson_iter_as_double(&si) : 0;
                    if (d != 1 && d != -1) {
                        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                                 "The $sort element value must be either 1 or -1");
                    }
                }
                if (shl_sort_pattern_new(&spec, &leaf->sort_pattern, &tmp) != 0) {
                    SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                             "The $sort field is a dotted field but has "
                             "an empty part: %s",
                             tmp.reason);
                }
            } else {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "The $sort is invalid: use 1/-1 to sort the whole element, or "
                         "{field:1/-1} to sort embedded fields");
            }
        } else {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Unrecognized clause in $push: %s", k);
        }
    }
done:
    return ret;
}

static bool
doc_has_field(const bson_value_t *v, const char *name)
{
    bson_t obj;
    bson_iter_t it;
    return query_bson_view(v, &obj) && bson_iter_init_find(&it, &obj, name);
}

static int
parse_leaf(shl_update_t *u, uop_t op, const char *opname, const char *path, const bson_value_t *arg,
           shl_status_t *st)
{
    unode_t *leaf = unode_new(UN_LEAF, "");
    qpath_t p = {0}, to = {0};
    int ret = 0;
    char *js;

    leaf->op = op;
    leaf->opname = opname;
    leaf->arg = *arg;
    leaf->path = bson_strdup(path);
    qpath_init(&p, path, strlen(path));
    SHL_ERR(validate_update_path(u, &p, st));

    switch (op) {
    case OP_INC:
    case OP_MUL:
        if (!query_value_is_number(arg)) {
            js = query_value_to_json(arg);
            ret = shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                                 "Cannot %s with non-numeric argument: {%s: %s}",
                                 op == OP_INC ? "increment" : "multiply", path, js);
            bson_free(js);
            goto done;
        }
        break;
    case OP_POP: {
        int64_t d;
        shl_status_t tmp;
        if (query_parse_int64(arg, &d, path, &tmp) != 0) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s", tmp.reason);
        }
        if (d != 1 && d != -1) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "$pop expects 1 or -1, found: %lld",
                     (long long)d);
        }
        leaf->pop_dir = (int)d;
        break;
    }
    case OP_PULL_ALL:
        if (arg->value_type != BSON_TYPE_ARRAY) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "$pullAll requires an array argument but was given a %s",
                     shl_bson_type_name(arg->value_type));
        }
        break;
    case OP_CURRENT_DATE:
        if (arg->value_type == BSON_TYPE_DOCUMENT) {
            bson_t obj;
            bson_iter_t it;
            query_bson_view(arg, &obj);
            bson_iter_init(&it, &obj);
            if (bson_count_keys(&obj) != 1 || !shl_iter_next(&it) ||
                strcmp(shl_iter_key(&it), "$type") != 0) {
                js = query_value_to_json(arg);
                ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                                     "The only valid field of the option is '$type': %s: %s", path,
                                     js);
                bson_free(js);
                goto done;
            }
            if (!BSON_ITER_HOLDS_UTF8(&it) ||
                (strcmp(bson_iter_utf8(&it, NULL), "date") != 0 &&
                 strcmp(bson_iter_utf8(&it, NULL), "timestamp") != 0)) {
                js = query_value_to_json(arg);
                ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                                     "The '$type' string field is required to be 'date' or "
                                     "'timestamp': {$currentDate: {%s: %s}}",
                                     path, js);
                bson_free(js);
                goto done;
            }
            leaf->ts = strcmp(bson_iter_utf8(&it, NULL), "timestamp") == 0;
        } else if (arg->value_type != BSON_TYPE_BOOL) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "%s is not valid type for $currentDate. Please use a boolean ('true') or a "
                     "$type expression ({$type: 'timestamp/date'}).",
                     shl_bson_type_name(arg->value_type));
        }
        break;
    case OP_PUSH:
    case OP_ADD_TO_SET:
        if (arg->value_type == BSON_TYPE_DOCUMENT && doc_has_field(arg, "$each")) {
            SHL_ERR(parse_each_modifiers(leaf, arg, op == OP_PUSH, st));
        }
        break;
    case OP_PULL:
        if (arg->value_type == BSON_TYPE_DOCUMENT || arg->value_type == BSON_TYPE_REGEX) {
            bson_t obj, wrapped = BSON_INITIALIZER;
            bson_iter_t it;
            bool op_first = false;
            if (arg->value_type == BSON_TYPE_DOCUMENT) {
                query_bson_view(arg, &obj);
                if (bson_iter_init(&it, &obj) && shl_iter_next(&it)) {
                    const char *k = shl_iter_key(&it);
                    op_first = k[0] == '$' && strcmp(k, "$and") != 0 && strcmp(k, "$or") != 0 &&
                               strcmp(k, "$nor") != 0 && strcmp(k, "$expr") != 0 &&
                               strcmp(k, "$comment") != 0;
                }
            }
            if (arg->value_type == BSON_TYPE_REGEX || op_first) {
                leaf->pull_wrapped = true;
                bson_append_value(&wrapped, "", 0, arg);
                ret = shl_matcher_new(&wrapped, SHL_MATCHER_NO_SPECIAL, &leaf->pull_matcher, st);
            } else {
                ret = shl_matcher_new(&obj, SHL_MATCHER_ALLOW_EXPR, &leaf->pull_matcher, st);
            }
            bson_destroy(&wrapped);
            if (ret != 0) {
                goto done;
            }
        }
        break;
    case OP_RENAME: {
        const char *tp;
        uint32_t tlen;
        unode_t *ph;
        if (arg->value_type != BSON_TYPE_UTF8) {
            js = query_value_to_json(arg);
            ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                                 "The 'to' field for $rename must be a string: %s: %s", path, js);
            bson_free(js);
            goto done;
        }
        tp = arg->value.v_utf8.str;
        tlen = arg->value.v_utf8.len;
        qpath_init(&to, tp, tlen);
        if (strcmp(tp, path) == 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "The source and target field for $rename must differ: %s: \"%s\"", path, tp);
        }
        if (qpath_is_prefix(&p, &to) || qpath_is_prefix(&to, &p)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "The source and target field for $rename must not be on the same path: %s: "
                     "\"%s\"",
                     path, tp);
        }
        for (size_t i = 0; i < p.n; i++) {
            if (strcmp(p.parts[i], "$") == 0 || is_array_filter(p.parts[i])) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "The source field for $rename may not be dynamic: %s", path);
            }
        }
        for (size_t i = 0; i < to.n; i++) {
            if (strcmp(to.parts[i], "$") == 0 || is_array_filter(to.parts[i])) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "The destination field for $rename may not be dynamic: %s", tp);
            }
        }
        SHL_ERR(validate_update_path(u, &to, st));
        /* The leaf lives at the destination; the source only reserves its path. */
        ph = unode_new(UN_LEAF, "");
        ph->op = OP_PLACEHOLDER;
        ph->path = bson_strdup(path);
        if ((ret = add_leaf(u->root, &p, ph, st)) != 0) {
            unode_destroy(ph);
            goto done;
        }
        qpath_copy(&leaf->from, &p);
        bson_free(leaf->path);
        leaf->path = bson_strdup(to.dotted);
        SHL_ERR(add_leaf(u->root, &to, leaf, st));
        leaf = NULL;
        goto done;
    }
    default:
        break;
    }
    SHL_ERR(add_leaf(u->root, &p, leaf, st));
    leaf = NULL;
done:
    if (p.parts != NULL) {
        qpath_cleanup(&p);
    }
    if (to.parts != NULL) {
        qpath_cleanup(&to);
    }
    unode_destroy(leaf);
    return ret;
}

static int
parse_operators(shl_update_t *u, const bson_t *spec, shl_status_t *st)
{
    bson_iter_t it, fi;
    int ret = 0;
    char *js;

    u->root = unode_new(UN_OBJECT, "");
    bson_iter_init(&it, spec);
    while (shl_iter_next(&it)) {
        const char *opname = shl_iter_key(&it);
        const bson_value_t *v = bson_iter_value(&it);
        bson_t args;
        int op = -1;
        for (size_t i = 0; i < sizeof(op_table) / sizeof(op_table[0]); i++) {
            if (strcmp(op_table[i].name, opname) == 0) {
                op = (int)op_table[i].op;
            }
        }
        if (op < 0) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "Unknown modifier: %s. Expected a valid update modifier or pipeline-style "
                     "update specified as an array",
                     opname);
        }
        if (v->value_type != BSON_TYPE_DOCUMENT) {
            js = query_value_to_json(v);
            ret = shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                                 "Modifiers operate on fields but we found type %s instead. For "
                                 "example: {$mod: {<field>: ...}} not {%s: %s}",
                                 shl_bson_type_name(v->value_type), opname, js);
            bson_free(js);
            goto done;
        }
        query_bson_view(v, &args);
        if (bson_count_keys(&args) == 0) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "'%s' is empty. You must specify a field like so: {%s: {<field>: ...}}",
                     opname, opname);
        }
        bson_iter_init(&fi, &args);
        while (shl_iter_next(&fi)) {
            SHL_ERR(parse_leaf(u, (uop_t)op, opname, shl_iter_key(&fi), bson_iter_value(&fi), st));
        }
    }
    unode_sort(u->root);
done:
    return ret;
}

static int
parse_replacement(const bson_t *spec, shl_status_t *st)
{
    bson_iter_t it;
    int ret = 0;
    bson_iter_init(&it, spec);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (k[0] == '$') {
            SHL_FAIL(st, SHL_CODE_DOLLAR_PREFIXED_FIELD_NAME,
                     "The dollar ($) prefixed field '%s' in '%s' is not allowed in the context of "
                     "an update's replacement document. Consider using an aggregation pipeline "
                     "with $replaceWith.",
                     k, k);
        }
    }
done:
    return ret;
}

static int
parse_pipeline(shl_update_t *u, const bson_t *arr, shl_status_t *st)
{
    bson_iter_t it, si;
    int ret = 0;
    size_t cap = bson_count_keys(arr);

    u->stages = bson_malloc0((cap + 1) * sizeof(pstage_t));
    bson_iter_init(&it, arr);
    while (shl_iter_next(&it)) {
        bson_t stage, spec;
        pstage_t *ps = &u->stages[u->nstages];
        const char *name;
        const bson_value_t *v;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "Each element of the 'pipeline' array must be an "
                     "object");
        }
        query_bson_view(bson_iter_value(&it), &stage);
        if (bson_count_keys(&stage) != 1) {
            SHL_FAIL(st, 40323,
                     "A pipeline stage specification object must contain exactly one "
                     "field.");
        }
        bson_iter_init(&si, &stage);
        shl_iter_next(&si);
        name = shl_iter_key(&si);
        v = bson_iter_value(&si);
        ps->name = name;
        if (strcmp(name, "$set") == 0 || strcmp(name, "$addFields") == 0) {
            if (v->value_type != BSON_TYPE_DOCUMENT) {
                SHL_FAIL(st, 40272, "%s specification stage must be an object, got %s", name,
                         shl_bson_type_name(v->value_type));
            }
            query_bson_view(v, &spec);
            ps->kind = PS_ADD_FIELDS;
            u->nstages++;
            SHL_ERR(query_addfields_new(&spec, &ps->proj, st));
        } else if (strcmp(name, "$unset") == 0 || strcmp(name, "$project") == 0) {
            bson_t proj = BSON_INITIALIZER;
            if (strcmp(name, "$unset") == 0) {
                if (v->value_type == BSON_TYPE_UTF8) {
                    bson_append_int32(&proj, v->value.v_utf8.str, -1, 0);
                } else if (v->value_type == BSON_TYPE_ARRAY) {
                    bson_iter_t ai;
                    query_bson_view(v, &spec);
                    bson_iter_init(&ai, &spec);
                    while (shl_iter_next(&ai)) {
                        if (!BSON_ITER_HOLDS_UTF8(&ai)) {
                            bson_destroy(&proj);
                            SHL_FAIL(st, 31120,
                                     "$unset specification must be a string or an "
                                     "array containing only string values");
                        }
                        bson_append_int32(&proj, bson_iter_utf8(&ai, NULL), -1, 0);
                    }
                } else {
                    bson_destroy(&proj);
                    SHL_FAIL(st, 31002, "$unset specification must be a string or an array");
                }
            } else {
                if (v->value_type != BSON_TYPE_DOCUMENT) {
                    bson_destroy(&proj);
                    SHL_FAIL(st, 15969, "$project specification must be an object");
                }
                query_bson_view(v, &spec);
                bson_concat(&proj, &spec);
            }
            ps->kind = PS_PROJECT;
            u->nstages++;
            ret = shl_projection_new(&proj, NULL, &ps->proj, st);
            bson_destroy(&proj);
            if (ret != 0) {
                goto done;
            }
        } else if (strcmp(name, "$replaceWith") == 0 || strcmp(name, "$replaceRoot") == 0) {
            const bson_value_t *e = v;
            bson_iter_t ri;
            if (strcmp(name, "$replaceRoot") == 0) {
                if (v->value_type != BSON_TYPE_DOCUMENT) {
                    SHL_FAIL(st, 40229,
                             "expected an object as specification for $replaceRoot "
                             "stage, got %s",
                             shl_bson_type_name(v->value_type));
                }
                query_bson_view(v, &spec);
                if (!bson_iter_init_find(&ri, &spec, "newRoot")) {
                    SHL_FAIL(st, 40231, "no newRoot specified for the $replaceRoot stage");
                }
                e = bson_iter_value(&ri);
            }
            ps->kind = PS_REPLACE;
            u->nstages++;
            SHL_ERR(shl_expr_parse(e, &ps->expr, st));
        } else if (strcmp(name, "$match") == 0 || strcmp(name, "$group") == 0 ||
                   strcmp(name, "$sort") == 0 || strcmp(name, "$limit") == 0 ||
                   strcmp(name, "$lookup") == 0 || strcmp(name, "$unwind") == 0 ||
                   strcmp(name, "$skip") == 0 || strcmp(name, "$out") == 0 ||
                   strcmp(name, "$merge") == 0 || strcmp(name, "$facet") == 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "%s is not allowed to be used within an update",
                     name);
        } else {
            SHL_FAIL(st, 40324, "Unrecognized pipeline stage name: '%s'", name);
        }
    }
done:
    return ret;
}

static bool
valid_filter_id(const char *id)
{
    if (!(id[0] >= 'a' && id[0] <= 'z')) {
        return false;
    }
    for (const char *c = id; *c; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))) {
            return false;
        }
    }
    return true;
}

static int
parse_filters(shl_update_t *u, const bson_t *array_filters, shl_status_t *st)
{
    bson_iter_t it;
    int ret = 0;
    size_t cap = bson_count_keys(array_filters);

    u->filters = bson_malloc0((cap + 1) * sizeof(afilter_t));
    bson_iter_init(&it, array_filters);
    while (shl_iter_next(&it)) {
        bson_t f;
        shl_matcher_t *m = NULL;
        const char *ph;
        bool err = false;
        shl_status_t tmp;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "Each array filter must be an object");
        }
        query_bson_view(bson_iter_value(&it), &f);
        SHL_ERR(shl_matcher_new(&f, SHL_MATCHER_NO_SPECIAL, &m, st));
        ph = shl_matcher_placeholder(m, &err, &tmp);
        if (err) {
            shl_matcher_destroy(m);
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Error parsing array filter :: caused by :: %s",
                     tmp.reason);
        }
        if (ph == NULL) {
            shl_matcher_destroy(m);
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "Cannot use an expression without a top-level field name in arrayFilters");
        }
        if (!valid_filter_id(ph)) {
            ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                                 "Error parsing array filter :: caused by :: The top-level field "
                                 "name must be an alphanumeric string beginning with a lowercase "
                                 "letter, found '%s'",
                                 ph);
            shl_matcher_destroy(m);
            goto done;
        }
        if (find_filter(u, ph, strlen(ph)) != NULL) {
            ret = shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                                 "Found multiple array filters with the same top-level field name "
                                 "%s",
                                 ph);
            shl_matcher_destroy(m);
            goto done;
        }
        u->filters[u->nfilters].id = bson_strdup(ph);
        u->filters[u->nfilters].m = m;
        u->nfilters++;
    }
done:
    return ret;
}

int
shl_update_new(const bson_value_t *uv, const bson_t *array_filters, shl_update_t **out,
               shl_status_t *st)
{
    shl_update_t *u = bson_malloc0(sizeof(*u));
    bson_iter_t it;
    bson_t spec;
    int ret = 0;
    char *js;

    *out = NULL;
    u->spec = bson_new();
    if (uv->value_type != BSON_TYPE_DOCUMENT && uv->value_type != BSON_TYPE_ARRAY) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "Update argument must be either an object or an array");
    }
    bson_append_value(u->spec, "u", 1, uv);
    bson_iter_init_find(&it, u->spec, "u");
    u->u = *bson_iter_value(&it);
    query_bson_view(&u->u, &spec);
    if (array_filters != NULL) {
        SHL_ERR(parse_filters(u, array_filters, st));
    }
    if (uv->value_type == BSON_TYPE_ARRAY) {
        u->kind = SHL_UPDATE_PIPELINE;
        if (u->nfilters > 0) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "arrayFilters may not be specified for pipeline-style updates");
        }
        SHL_ERR(parse_pipeline(u, &spec, st));
    } else if (bson_iter_init(&it, &spec) && shl_iter_next(&it) && shl_iter_key(&it)[0] == '$') {
        u->kind = SHL_UPDATE_OPERATORS;
        SHL_ERR(parse_operators(u, &spec, st));
    } else {
        u->kind = SHL_UPDATE_REPLACEMENT;
        SHL_ERR(parse_replacement(&spec, st));
    }
    for (size_t i = 0; i < u->nfilters; i++) {
        if (!u->filters[i].used) {
            js = shl_bson_as_json(&spec);
            ret = shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                                 "The array filter for identifier '%s' was not used in the update "
                                 "%s",
                                 u->filters[i].id, js ? js : "");
            bson_free(js);
            goto done;
        }
    }
    *out = u;
    u = NULL;
done:
    shl_update_destroy(u);
    return ret;
}

void
shl_update_destroy(shl_update_t *u)
{
    if (u == NULL) {
        return;
    }
    unode_destroy(u->root);
    for (size_t i = 0; i < u->nfilters; i++) {
        bson_free(u->filters[i].id);
        shl_matcher_destroy(u->filters[i].m);
    }
    bson_free(u->filters);
    for (size_t i = 0; i < u->nstages; i++) {
        shl_projection_destroy(u->stages[i].proj);
        shl_expr_destroy(u->stages[i].expr);
    }
    bson_free(u->stages);
    bson_destroy(u->spec);
    shl_collator_release(u->coll);
    bson_free(u);
}

/* Hands 'coll' (borrowed from the update) to every leaf of 'n' and its matchers and sorts. */
static void
unode_set_collator(unode_t *n, shl_collator_t *coll)
{
    if (n == NULL) {
        return;
    }
    n->coll = coll;
    if (n->pull_matcher != NULL) {
        shl_matcher_set_collator(n->pull_matcher, coll);
    }
    if (n->sort_pattern != NULL) {
        shl_sort_pattern_set_collator(n->sort_pattern, coll);
    }
    for (size_t i = 0; i < n->nkids; i++) {
        unode_set_collator(n->kids[i], coll);
    }
    unode_set_collator(n->positional, coll);
}

void
shl_update_set_collator(shl_update_t *u, shl_collator_t *coll)
{
    shl_collator_t *old = u->coll;
    u->coll = shl_collator_ref(coll);
    shl_collator_release(old);
    unode_set_collator(u->root, u->coll);
    for (size_t i = 0; i < u->nfilters; i++) {
        shl_matcher_set_collator(u->filters[i].m, u->coll);
    }
    for (size_t i = 0; i < u->nstages; i++) {
        if (u->stages[i].proj != NULL) {
            shl_projection_set_collator(u->stages[i].proj, u->coll);
        }
    }
}

shl_update_kind_t
shl_update_get_kind(const shl_update_t *u)
{
    return u->kind;
}

bool
shl_update_uses_positional(const shl_update_t *u)
{
    return u->positional;
}

/* ---- application ---- */

typedef struct actx {
    const shl_update_t *u;
    const shl_update_ctx_t *ctx;
    mv_t *root;
    shl_status_t *st;
    char *id_path; /* first update path that touched _id */
    char **path;   /* the concrete path being applied */
    size_t depth, cap;
} actx_t;

static void
path_push(actx_t *ac, const char *name)
{
    if (ac->depth == ac->cap) {
        ac->cap = ac->cap ? ac->cap * 2 : 16;
        ac->path = bson_realloc(ac->path, ac->cap * sizeof(char *));
    }
    ac->path[ac->depth++] = bson_strdup(name);
}

static void
path_pop(actx_t *ac)
{
    bson_free(ac->path[--ac->depth]);
}

static char *
path_dotted(char **parts, size_t n)
{
    bson_string_t *s = bson_string_new("");
    for (size_t i = 0; i < n; i++) {
        if (i > 0) {
            bson_string_append_c(s, '.');
        }
        bson_string_append(s, parts[i]);
    }
    return bson_string_free(s, false);
}

/* "{_id: 1}" for messages that name the document. */
static char *
id_string(const mv_t *root)
{
    long i = mv_find(root, "_id");
    bson_value_t v;
    char *js, *s;
    if (i < 0) {
        return bson_strdup("{}");
    }
    mv_to_value(root->kids[i], &v);
    js = query_value_to_json(&v);
    bson_value_destroy(&v);
    s = bson_strdup_printf("{_id: %s}", js);
    bson_free(js);
    return s;
}

static char *
mv_json(const mv_t *m)
{
    bson_value_t v;
    char *js;
    mv_to_value(m, &v);
    js = query_value_to_json(&v);
    bson_value_destroy(&v);
    return js;
}

static int64_t
now_ms(const shl_update_ctx_t *ctx)
{
    struct timeval tv;
    if (ctx->now_ms != 0) {
        return ctx->now_ms;
    }
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* Resolution of a concrete path in the working document. */
typedef struct loc {
    bool found;
    mv_t *parent;   /* found: the container holding the element */
    size_t idx;     /* found: its index in parent */
    mv_t *deepest;  /* missing: the last element reached (a container or a scalar) */
    size_t missing; /* missing: index of the first path component not found */
    const char *deepest_name;
} loc_t;

static void
resolve(mv_t *root, char **parts, size_t n, loc_t *l)
{
    mv_t *cur = root;
    const char *cur_name = NULL;
    memset(l, 0, sizeof(*l));
    for (size_t i = 0; i < n; i++) {
        long j = -1;
        if (cur->type == BSON_TYPE_DOCUMENT || cur->type == BSON_TYPE_ARRAY) {
            j = mv_find(cur, parts[i]);
        }
        if (j < 0) {
            l->deepest = cur;
            l->deepest_name = cur_name;
            l->missing = i;
            return;
        }
        if (i == n - 1) {
            l->found = true;
            l->parent = cur;
            l->idx = (size_t)j;
            return;
        }
        cur_name = parts[i];
        cur = cur->kids[j];
    }
}

/* create_at -- insert 'val' at the missing part of a path (taking ownership). */
static int
create_at(actx_t *ac, char **parts, size_t n, const loc_t *l, mv_t *val)
{
    mv_t *c = l->deepest;
    size_t i = l->missing, idx;
    int ret = 0;
    char *js;

    if (c->type != BSON_TYPE_DOCUMENT &&
        !(c->type == BSON_TYPE_ARRAY && query_array_index(parts[i], &idx))) {
        js = mv_json(c);
        ret = shl_status_set(ac->st, SHL_CODE_PATH_NOT_VIABLE,
                             "Cannot create field '%s' in element {%s: %s}", parts[i],
                             l->deepest_name ? l->deepest_name : "", js);
        bson_free(js);
        mv_free(val);
        goto done;
    }
    for (size_t k = n - 1; k > i; k--) {
        mv_t *wrap = mv_new_container(BSON_TYPE_DOCUMENT);
        mv_append(wrap, parts[k], val);
        val = wrap;
    }
    if (c->type == BSON_TYPE_DOCUMENT) {
        mv_append(c, parts[i], val);
    } else {
        if (idx > 1500000) {
            mv_free(val);
            SHL_FAIL(ac->st, SHL_CODE_BAD_VALUE,
                     "can't backfill array to larger than 1500000 "
                     "elements");
        }
        while (c->n < idx) {
            mv_append(c, NULL, mv_new_null());
        }
        mv_append(c, NULL, val);
    }
done:
    return ret;
}

/* Arithmetic on numbers with MongoDB's type widening (int -> long -> double -> decimal). */
static int
numeric_rank(bson_type_t t)
{
    switch (t) {
    case BSON_TYPE_INT32:
        return 1;
    case BSON_TYPE_INT64:
        return 2;
    case BSON_TYPE_DOUBLE:
        return 3;
    case BSON_TYPE_DECIMAL128:
        return 4;
    default:
        return 0;
    }
}

static int64_t
as_int64(const bson_value_t *v)
{
    return v->value_type == BSON_TYPE_INT32 ? v->value.v_int32 : v->value.v_int64;
}

static bool
arith(uop_t op, const bson_value_t *a, const bson_value_t *b, bson_value_t *res)
{
    int rank = numeric_rank(a->value_type) > numeric_rank(b->value_type)
                   ? numeric_rank(a->value_type)
                   : numeric_rank(b->value_type);
    memset(res, 0, sizeof(*res));
    if (rank <= 2) {
        int64_t x = as_int64(a), y = as_int64(b), r;
        if (op == OP_INC ? __builtin_add_overflow(x, y, &r) : __builtin_mul_overflow(x, y, &r)) {
            return false;
        }
        if (rank == 1 && r >= INT32_MIN && r <= INT32_MAX) {
            res->value_type = BSON_TYPE_INT32;
            res->value.v_int32 = (int32_t)r;
        } else {
            res->value_type = BSON_TYPE_INT64;
            res->value.v_int64 = r;
        }
        return true;
    }
    double d = op == OP_INC ? query_value_as_double(a) + query_value_as_double(b)
                            : query_value_as_double(a) * query_value_as_double(b);
    if (rank == 3) {
        res->value_type = BSON_TYPE_DOUBLE;
        res->value.v_double = d;
    } else {
        /* Decimal arithmetic is approximated through double (no decimal library here). */
        char buf[64];
        snprintf(buf, sizeof(buf), "%.15g", d);
        res->value_type = BSON_TYPE_DECIMAL128;
        bson_decimal128_from_string(buf, &res->value.v_decimal128);
    }
    return true;
}

static mv_t *
mv_scalar(const bson_value_t *v)
{
    return mv_from_value(v);
}

static void
each_values(const unode_t *leaf, bson_t *view, bool *single)
{
    if (leaf->has_each) {
        query_bson_view(&leaf->each, view);
        *single = false;
    } else {
        *single = true;
    }
}

/* Stable merge sort of array elements. */
typedef struct sortctx {
    const unode_t *leaf;
} sortctx_t;

static int
elem_cmp(const sortctx_t *sc, const mv_t *a, const mv_t *b)
{
    if (sc->leaf->sort_pattern != NULL) {
        bson_t da = BSON_INITIALIZER, db = BSON_INITIALIZER;
        int c;
        if (a->type == BSON_TYPE_DOCUMENT) {
            mv_to_bson(a, &da);
        }
        if (b->type == BSON_TYPE_DOCUMENT) {
            mv_to_bson(b, &db);
        }
        c = shl_sort_doc_compare(sc->leaf->sort_pattern, &da, &db);
        bson_destroy(&da);
        bson_destroy(&db);
        return c;
    }
    return sc->leaf->sort_dir * mv_compare_coll(a, b, sc->leaf->coll);
}

static void
merge_sort(const sortctx_t *sc, mv_t **v, mv_t **tmp, size_t n)
{
    size_t mid = n / 2, i = 0, j = mid, k = 0;
    if (n < 2) {
        return;
    }
    merge_sort(sc, v, tmp, mid);
    merge_sort(sc, v + mid, tmp, n - mid);
    while (i < mid && j < n) {
        tmp[k++] = elem_cmp(sc, v[j], v[i]) < 0 ? v[j++] : v[i++];
    }
    while (i < mid) {
        tmp[k++] = v[i++];
    }
    while (j < n) {
        tmp[k++] = v[j++];
    }
    memcpy(v, tmp, n * sizeof(mv_t *));
}

/* push_into -- $push semantics on array 'arr' (modified in place). */
static void
push_into(const unode_t *leaf, mv_t *arr)
{
    bson_t view;
    bson_iter_t it;
    bool single;
    size_t pos = arr->n;

    if (leaf->has_position) {
        if (leaf->position >= 0) {
            pos = (size_t)leaf->position < arr->n ? (size_t)leaf->position : arr->n;
        } else {
            int64_t p = (int64_t)arr->n + leaf->position;
            pos = p < 0 ? 0 : (size_t)p;
        }
    }
    each_values(leaf, &view, &single);
    if (single) {
        mv_insert(arr, pos, NULL, mv_scalar(&leaf->arg));
    } else {
        bson_iter_init(&it, &view);
        while (shl_iter_next(&it)) {
            mv_insert(arr, pos++, NULL, mv_scalar(bson_iter_value(&it)));
        }
    }
    if (leaf->sort_dir != 0 || leaf->sort_pattern != NULL) {
        sortctx_t sc = {leaf};
        mv_t **tmp = bson_malloc((arr->n + 1) * sizeof(mv_t *));
        merge_sort(&sc, arr->kids, tmp, arr->n);
        bson_free(tmp);
    }
    if (leaf->has_slice) {
        if (leaf->slice >= 0) {
            while (arr->n > (size_t)leaf->slice) {
                mv_remove_at(arr, arr->n - 1);
            }
        } else {
            size_t keep = (size_t)(-leaf->slice);
            while (arr->n > keep) {
                mv_remove_at(arr, 0);
            }
        }
    }
}

static void
add_to_set_into(const unode_t *leaf, mv_t *arr)
{
    bson_t view;
    bson_iter_t it;
    bool single;
    each_values(leaf, &view, &single);
    if (single) {
        bool found = false;
        for (size_t i = 0; i < arr->n && !found; i++) {
            found = mv_compare_value_coll(arr->kids[i], &leaf->arg, leaf->coll) == 0;
        }
        if (!found) {
            mv_append(arr, NULL, mv_scalar(&leaf->arg));
        }
        return;
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const bson_value_t *v = bson_iter_value(&it);
        bool found = false;
        for (size_t i = 0; i < arr->n && !found; i++) {
            found = mv_compare_value_coll(arr->kids[i], v, leaf->coll) == 0;
        }
        if (!found) {
            mv_append(arr, NULL, mv_scalar(v));
        }
    }
}

static int
pull_matches(actx_t *ac, const unode_t *leaf, const mv_t *e, bool *out)
{
    bson_value_t v;
    int ret = 0;
    *out = false;
    if (leaf->pull_matcher == NULL) {
        *out = mv_compare_value_coll(e, &leaf->arg, leaf->coll) == 0;
        return 0;
    }
    if (leaf->pull_wrapped) {
        mv_to_value(e, &v);
        ret = shl_matcher_match_value(leaf->pull_matcher, "", &v, out, ac->st);
        bson_value_destroy(&v);
        return ret;
    }
    if (e->type != BSON_TYPE_DOCUMENT) {
        return 0;
    }
    bson_t d = BSON_INITIALIZER;
    mv_to_bson(e, &d);
    ret = shl_matcher_match(leaf->pull_matcher, &d, NULL, out, ac->st);
    bson_destroy(&d);
    return ret;
}

static mv_t *
current_date_value(actx_t *ac, const unode_t *leaf)
{
    bson_value_t v;
    memset(&v, 0, sizeof(v));
    if (leaf->ts) {
        v.value_type = BSON_TYPE_TIMESTAMP;
        if (ac->ctx->ts_t != 0 || ac->ctx->ts_i != 0) {
            v.value.v_timestamp.timestamp = ac->ctx->ts_t;
            v.value.v_timestamp.increment = ac->ctx->ts_i;
        } else {
            v.value.v_timestamp.timestamp = (uint32_t)(now_ms(ac->ctx) / 1000);
            v.value.v_timestamp.increment = 1;
        }
    } else {
        v.value_type = BSON_TYPE_DATE_TIME;
        v.value.v_datetime = now_ms(ac->ctx);
    }
    return mv_from_value(&v);
}

/* The value an operator creates at a missing path, or NULL if it creates nothing. */
static mv_t *
value_for_missing(actx_t *ac, const unode_t *leaf)
{
    mv_t *arr;
    bson_value_t zero;
    switch (leaf->op) {
    case OP_SET:
    case OP_INC:
    case OP_MIN:
    case OP_MAX:
        return mv_scalar(&leaf->arg);
    case OP_SET_ON_INSERT:
        return ac->ctx->is_insert ? mv_scalar(&leaf->arg) : NULL;
    case OP_MUL:
        memset(&zero, 0, sizeof(zero));
        zero.value_type = leaf->arg.value_type;
        if (zero.value_type == BSON_TYPE_DECIMAL128) {
            bson_decimal128_from_string("0", &zero.value.v_decimal128);
        }
        return mv_scalar(&zero);
    case OP_CURRENT_DATE:
        return current_date_value(ac, leaf);
    case OP_PUSH:
        arr = mv_new_container(BSON_TYPE_ARRAY);
        push_into(leaf, arr);
        return arr;
    case OP_ADD_TO_SET:
        arr = mv_new_container(BSON_TYPE_ARRAY);
        add_to_set_into(leaf, arr);
        return arr;
    default:
        return NULL;
    }
}

static int
check_no_array_on_path(actx_t *ac, char **parts, size_t n, const char *what, const char *dotted)
{
    mv_t *cur = ac->root;
    int ret = 0;
    char *id;
    for (size_t i = 0; i + 1 < n; i++) {
        long j = cur->type == BSON_TYPE_DOCUMENT ? mv_find(cur, parts[i]) : -1;
        if (j < 0) {
            break;
        }
        cur = cur->kids[j];
        if (cur->type == BSON_TYPE_ARRAY) {
            id = id_string(ac->root);
            ret = shl_status_set(ac->st, SHL_CODE_BAD_VALUE,
                                 "The %s field cannot be an array element, '%s' in doc with %s has "
                                 "an array field called '%s'",
                                 what, dotted, id, parts[i]);
            bson_free(id);
            goto done;
        }
    }
done:
    return ret;
}

static int
apply_rename(actx_t *ac, const unode_t *leaf)
{
    loc_t from, to;
    mv_t *val;
    int ret = 0;

    resolve(ac->root, leaf->from.parts, leaf->from.n, &from);
    if (!from.found) {
        return 0;
    }
    SHL_ERR(
        check_no_array_on_path(ac, leaf->from.parts, leaf->from.n, "source", leaf->from.dotted));
    SHL_ERR(check_no_array_on_path(ac, ac->path, ac->depth, "destination", leaf->path));
    if (strcmp(leaf->from.parts[0], "_id") == 0 || strcmp(ac->path[0], "_id") == 0) {
        if (ac->id_path == NULL) {
            ac->id_path = bson_strdup(strcmp(leaf->from.parts[0], "_id") == 0 ? leaf->from.dotted
                                                                              : leaf->path);
        }
    }
    val = mv_clone(from.parent->kids[from.idx]);
    mv_remove_at(from.parent, from.idx);
    resolve(ac->root, ac->path, ac->depth, &to);
    if (to.found) {
        mv_replace_at(to.parent, to.idx, val);
    } else {
        SHL_ERR(create_at(ac, ac->path, ac->depth, &to, val));
    }
done:
    return ret;
}

static int
apply_leaf(actx_t *ac, const unode_t *leaf)
{
    loc_t l;
    mv_t *old, *nv = NULL;
    char *dotted = NULL, *id = NULL;
    bson_value_t ov, res;
    int ret = 0;

    if (leaf->op == OP_PLACEHOLDER) {
        return 0;
    }
    if (leaf->op == OP_SET_ON_INSERT && !ac->ctx->is_insert) {
        return 0;
    }
    if (leaf->op == OP_RENAME) {
        return apply_rename(ac, leaf);
    }
    if (strcmp(ac->path[0], "_id") == 0 && ac->id_path == NULL) {
        ac->id_path = path_dotted(ac->path, ac->depth);
    }
    resolve(ac->root, ac->path, ac->depth, &l);
    if (!l.found) {
        nv = value_for_missing(ac, leaf);
        if (nv != NULL) {
            ret = create_at(ac, ac->path, ac->depth, &l, nv);
        }
        return ret;
    }
    old = l.parent->kids[l.idx];
    dotted = path_dotted(ac->path, ac->depth);
    switch (leaf->op) {
    case OP_SET:
    case OP_SET_ON_INSERT:
        mv_replace_at(l.parent, l.idx, mv_scalar(&leaf->arg));
        break;
    case OP_UNSET:
        if (l.parent->type == BSON_TYPE_ARRAY) {
            mv_replace_at(l.parent, l.idx, mv_new_null());
        } else {
            mv_remove_at(l.parent, l.idx);
        }
        break;
    case OP_INC:
    case OP_MUL:
        if (numeric_rank(old->type) == 0) {
            id = id_string(ac->root);
            SHL_FAIL(ac->st, SHL_CODE_TYPE_MISMATCH,
                     "Cannot apply %s to a value of non-numeric type. %s has the field '%s' of "
                     "non-numeric type %s",
                     leaf->opname, id, ac->path[ac->depth - 1], shl_bson_type_name(old->type));
        }
        mv_to_value(old, &ov);
        if (!arith(leaf->op, &ov, &leaf->arg, &res)) {
            char *js = query_value_to_json(&ov);
            bson_value_destroy(&ov);
            id = id_string(ac->root);
            ret = shl_status_set(ac->st, SHL_CODE_BAD_VALUE,
                                 "Failed to apply %s operations to current value (%s) for document "
                                 "%s",
                                 leaf->opname, js, id);
            bson_free(js);
            goto done;
        }
        bson_value_destroy(&ov);
        mv_replace_at(l.parent, l.idx, mv_scalar(&res));
        break;
    case OP_MIN:
    case OP_MAX: {
        int c = mv_compare_value_coll(old, &leaf->arg, leaf->coll);
        if ((leaf->op == OP_MIN && c > 0) || (leaf->op == OP_MAX && c < 0)) {
            mv_replace_at(l.parent, l.idx, mv_scalar(&leaf->arg));
        }
        break;
    }
    case OP_CURRENT_DATE:
        mv_replace_at(l.parent, l.idx, current_date_value(ac, leaf));
        break;
    case OP_PUSH:
        if (old->type != BSON_TYPE_ARRAY) {
            id = id_string(ac->root);
            SHL_FAIL(ac->st, SHL_CODE_BAD_VALUE,
                     "The field '%s' must be an array but is of type %s in document %s", dotted,
                     shl_bson_type_name(old->type), id);
        }
        push_into(leaf, old);
        break;
    case OP_ADD_TO_SET:
        if (old->type != BSON_TYPE_ARRAY) {
            SHL_FAIL(ac->st, SHL_CODE_BAD_VALUE,
                     "Cannot apply $addToSet to non-array field. Field named '%s' has non-array "
                     "type %s",
                     ac->path[ac->depth - 1], shl_bson_type_name(old->type));
        }
        add_to_set_into(leaf, old);
        break;
    case OP_POP:
        if (old->type != BSON_TYPE_ARRAY) {
            SHL_FAIL(ac->st, SHL_CODE_TYPE_MISMATCH,
                     "Path '%s' contains an element of non-array type '%s'", dotted,
                     shl_bson_type_name(old->type));
        }
        if (old->n > 0) {
            mv_remove_at(old, leaf->pop_dir > 0 ? old->n - 1 : 0);
        }
        break;
    case OP_PULL:
    case OP_PULL_ALL:
        if (old->type != BSON_TYPE_ARRAY) {
            SHL_FAIL(ac->st, SHL_CODE_BAD_VALUE,
                     leaf->op == OP_PULL ? "Cannot apply $pull to a non-array value"
                                         : "$pullAll can only be applied to an array");
        }
        for (size_t i = old->n; i > 0; i--) {
            bool m = false;
            if (leaf->op == OP_PULL) {
                SHL_ERR(pull_matches(ac, leaf, old->kids[i - 1], &m));
            } else {
                bson_t vals;
                bson_iter_t it;
                query_bson_view(&leaf->arg, &vals);
                bson_iter_init(&it, &vals);
                while (!m && shl_iter_next(&it)) {
                    m = mv_compare_value_coll(old->kids[i - 1], bson_iter_value(&it), leaf->coll) ==
                        0;
                }
            }
            if (m) {
                mv_remove_at(old, i - 1);
            }
        }
        break;
    default:
        break;
    }
done:
    bson_free(dotted);
    bson_free(id);
    return ret;
}

static int apply_node(actx_t *ac, const unode_t *n);

static int
apply_array_node(actx_t *ac, const unode_t *n)
{
    loc_t l;
    mv_t *arr;
    int ret = 0;
    char *dotted = path_dotted(ac->path, ac->depth), *js;

    resolve(ac->root, ac->path, ac->depth, &l);
    if (!l.found) {
        SHL_FAIL(ac->st, SHL_CODE_BAD_VALUE,
                 "The path '%s' must exist in the document in order to apply array updates.",
                 dotted);
    }
    arr = l.parent->kids[l.idx];
    if (arr->type != BSON_TYPE_ARRAY) {
        js = mv_json(arr);
        ret = shl_status_set(ac->st, SHL_CODE_BAD_VALUE,
                             "Cannot apply array updates to non-array element %s: %s",
                             ac->path[ac->depth - 1], js);
        bson_free(js);
        goto done;
    }
    for (size_t i = 0; i < arr->n; i++) {
        for (size_t k = 0; k < n->nkids; k++) {
            const unode_t *kid = n->kids[k];
            bool match = true;
            size_t idlen = strlen(kid->name) - 3;
            char buf[24];
            if (idlen > 0) {
                const afilter_t *f = NULL;
                bson_value_t v;
                for (size_t j = 0; j < ac->u->nfilters; j++) {
                    if (strlen(ac->u->filters[j].id) == idlen &&
                        strncmp(ac->u->filters[j].id, kid->name + 2, idlen) == 0) {
                        f = &ac->u->filters[j];
                    }
                }
                SHL_INVARIANT(f != NULL);
                mv_to_value(arr->kids[i], &v);
                ret = shl_matcher_match_value(f->m, f->id, &v, &match, ac->st);
                bson_value_destroy(&v);
                if (ret != 0) {
                    goto done;
                }
            }
            if (!match) {
                continue;
            }
            snprintf(buf, sizeof(buf), "%zu", i);
            path_push(ac, buf);
            ret = apply_node(ac, kid);
            path_pop(ac);
            if (ret != 0) {
                goto done;
            }
        }
    }
done:
    bson_free(dotted);
    return ret;
}

static int
apply_node(actx_t *ac, const unode_t *n)
{
    int ret = 0;
    char buf[24];

    if (n->kind == UN_LEAF) {
        return apply_leaf(ac, n);
    }
    if (n->kind == UN_ARRAY) {
        return apply_array_node(ac, n);
    }
    if (n->positional != NULL) {
        if (!ac->ctx->has_matched_key) {
            SHL_FAIL(ac->st, SHL_CODE_BAD_VALUE,
                     "The positional operator did not find the match needed from the query.");
        }
        snprintf(buf, sizeof(buf), "%zu", ac->ctx->matched_key);
        if (unode_find(n, buf) != NULL) {
            char *d = path_dotted(ac->path, ac->depth);
            ret = shl_status_set(ac->st, SHL_CODE_CONFLICTING_UPDATE_OPERATORS,
                                 "Update created a conflict at '%s%s%s'", d, *d ? "." : "", buf);
            bson_free(d);
            goto done;
        }
        path_push(ac, buf);
        ret = apply_node(ac, n->positional);
        path_pop(ac);
        if (ret != 0) {
            goto done;
        }
    }
    for (size_t i = 0; i < n->nkids; i++) {
        path_push(ac, n->kids[i]->name);
        ret = apply_node(ac, n->kids[i]);
        path_pop(ac);
        if (ret != 0) {
            goto done;
        }
    }
done:
    return ret;
}

static bool values_binary_equal(const bson_iter_t *a, const bson_iter_t *b);

/*
 * Checks every updated document passes: _id type, size, and, when 'old' is given (an
 * operator update of an existing document), no top-level '$'-prefixed field it creates or
 * changes -- those that were there already may stay (MongoDB 5.0+ stores them; inserts,
 * upserts and pipelines may write them).
 */
static int
validate_storage(const bson_t *doc, const bson_t *old, shl_status_t *st)
{
    bson_iter_t it;
    int ret = 0;
    if (doc->len > QUERY_MAX_USER_DOC_SIZE) {
        SHL_FAIL(st, QC_UPDATE_DOC_TOO_LARGE, "Resulting document after update is larger than %d",
                 QUERY_MAX_USER_DOC_SIZE);
    }
    bson_iter_init(&it, doc);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (k[0] == '$' && old != NULL) {
            bson_iter_t was;
            if (!bson_iter_init_find(&was, old, k) || !values_binary_equal(&was, &it)) {
                SHL_FAIL(st, SHL_CODE_DOLLAR_PREFIXED_FIELD_NAME,
                         "The dollar ($) prefixed field '%s' in '%s' is not valid for storage.", k,
                         k);
            }
        }
        if (strcmp(k, "_id") == 0) {
            bson_type_t t = shl_iter_type(&it);
            if (t == BSON_TYPE_ARRAY || t == BSON_TYPE_REGEX || t == BSON_TYPE_UNDEFINED) {
                SHL_FAIL(st, SHL_CODE_INVALID_ID_FIELD, "The '_id' value cannot be of type %s",
                         shl_bson_type_name(t));
            }
        }
    }
done:
    return ret;
}

static bool
find_value(const bson_t *doc, const char *key, bson_iter_t *it)
{
    return bson_iter_init_find(it, doc, key);
}

static bool
values_binary_equal(const bson_iter_t *a, const bson_iter_t *b)
{
    bson_iter_t ca = *a, cb = *b;
    const bson_value_t *va = bson_iter_value(&ca), *vb = bson_iter_value(&cb);
    bson_t ta = BSON_INITIALIZER, tb = BSON_INITIALIZER;
    bool eq;
    bson_append_value(&ta, "", 0, va);
    bson_append_value(&tb, "", 0, vb);
    eq = ta.len == tb.len && memcmp(bson_get_data(&ta), bson_get_data(&tb), ta.len) == 0;
    bson_destroy(&ta);
    bson_destroy(&tb);
    return eq;
}

/* A whole new document (replacement / pipeline): keep the original _id. */
static int
finish_replacement(const bson_t *orig, const bson_t *repl, bson_t *out, shl_status_t *st)
{
    bson_iter_t oid, nid;
    int ret = 0;
    char *js;
    bool has_orig = find_value(orig, "_id", &oid);
    bool has_new = find_value(repl, "_id", &nid);

    if (has_new && shl_bson_value_dollar_key(bson_iter_value(&nid)) != NULL) {
        /* MongoDB validates the new _id for storage before comparing it with the old one. */
        ret = shl_status_set(st, SHL_CODE_DOLLAR_PREFIXED_FIELD_NAME,
                             "_id fields may not contain '$'-prefixed fields: %s is not valid for "
                             "storage.",
                             shl_bson_value_dollar_key(bson_iter_value(&nid)));
        goto done;
    }
    if (has_orig && has_new && !values_binary_equal(&oid, &nid)) {
        js = query_value_to_json(bson_iter_value(&nid));
        ret = shl_status_set(st, SHL_CODE_IMMUTABLE_FIELD,
                             "After applying the update, the (immutable) field '_id' was found to "
                             "have been altered to _id: %s",
                             js);
        bson_free(js);
        goto done;
    }
    if (has_orig && !has_new) {
        bson_append_value(out, "_id", 3, bson_iter_value(&oid));
    }
    bson_concat(out, repl);
done:
    return ret;
}

static int
apply_pipeline(const shl_update_t *u, const bson_t *doc, const shl_update_ctx_t *ctx, bson_t *out,
               shl_status_t *st)
{
    bson_t cur, next;
    int ret = 0;

    bson_init(&cur);
    bson_concat(&cur, doc);
    for (size_t i = 0; i < u->nstages; i++) {
        const pstage_t *ps = &u->stages[i];
        bson_init(&next);
        if (ps->kind == PS_REPLACE) {
            shl_expr_ctx_t ec = {0};
            bson_value_t v;
            bson_t view;
            ec.root = &cur;
            ec.vars = ctx->vars;
            ec.now_ms = ctx->now_ms;
            ec.collator = u->coll;
            if ((ret = shl_expr_evaluate(ps->expr, &ec, &v, st)) != 0) {
                bson_destroy(&next);
                goto done;
            }
            if (v.value_type != BSON_TYPE_DOCUMENT) {
                char *js = query_value_to_json(&v);
                ret = shl_status_set(st, 40228,
                                     "'replacement document' must evaluate to an object, but "
                                     "resulting value was: %s. Type of resulting value: '%s'.",
                                     js, shl_bson_type_name(v.value_type));
                bson_free(js);
                bson_value_destroy(&v);
                bson_destroy(&next);
                goto done;
            }
            query_bson_view(&v, &view);
            bson_concat(&next, &view);
            bson_value_destroy(&v);
        } else {
            bson_destroy(&next);
            if ((ret = shl_projection_apply(ps->proj, &cur, NULL, ctx->vars, &next, st)) != 0) {
                bson_destroy(&next);
                goto done;
            }
        }
        bson_destroy(&cur);
        bson_steal(&cur, &next); /* never copy a bson_t by assignment */
    }
    ret = finish_replacement(doc, &cur, out, st);
done:
    bson_destroy(&cur);
    return ret;
}

int
shl_update_apply(const shl_update_t *u, const bson_t *doc, const shl_update_ctx_t *ctx, bson_t *out,
                 bool *changed, shl_status_t *st)
{
    actx_t ac = {0};
    shl_update_ctx_t dflt = {0};
    bson_t repl;
    int ret = 0;

    bson_init(out);
    *changed = false;
    if (ctx == NULL) {
        ctx = &dflt;
    }
    if (u->kind == SHL_UPDATE_REPLACEMENT) {
        query_bson_view(&u->u, &repl);
        SHL_ERR(finish_replacement(doc, &repl, out, st));
    } else if (u->kind == SHL_UPDATE_PIPELINE) {
        SHL_ERR(apply_pipeline(u, doc, ctx, out, st));
    } else {
        bson_iter_t oid, nid;
        ac.u = u;
        ac.ctx = ctx;
        ac.st = st;
        ac.root = mv_from_doc(doc);
        ret = apply_node(&ac, u->root);
        if (ret == 0) {
            mv_to_bson(ac.root, out);
        }
        mv_free(ac.root);
        for (size_t i = 0; i < ac.depth; i++) {
            bson_free(ac.path[i]);
        }
        bson_free(ac.path);
        if (ret != 0) {
            bson_free(ac.id_path);
            goto done;
        }
        if (find_value(doc, "_id", &oid) &&
            (!find_value(out, "_id", &nid) || !values_binary_equal(&oid, &nid))) {
            ret = shl_status_set(st, SHL_CODE_IMMUTABLE_FIELD,
                                 "Performing an update on the path '%s' would modify the "
                                 "immutable field '_id'",
                                 ac.id_path ? ac.id_path : "_id");
            bson_free(ac.id_path);
            goto done;
        }
        bson_free(ac.id_path);
    }
    SHL_ERR(validate_storage(out, u->kind == SHL_UPDATE_OPERATORS && !ctx->is_insert ? doc : NULL,
                             st));
    *changed =
        out->len != doc->len || memcmp(bson_get_data(out), bson_get_data(doc), doc->len) != 0;
done:
    if (ret != 0) {
        bson_reinit(out);
        *changed = false;
    }
    return ret;
}

/* ---- upsert ---- */

static int
seed_equality(mv_t *root, const char *path, const bson_value_t *v, shl_status_t *st)
{
    qpath_t p;
    mv_t *cur = root;
    int ret = 0;

    qpath_init(&p, path, strlen(path));
    for (size_t i = 0; i < p.n; i++) {
        long j = mv_find(cur, p.parts[i]);
        if (i == p.n - 1) {
            if (j >= 0) {
                mv_replace_at(cur, (size_t)j, mv_from_value(v));
            } else {
                mv_append(cur, p.parts[i], mv_from_value(v));
            }
            break;
        }
        if (j < 0) {
            mv_t *sub = mv_new_container(BSON_TYPE_DOCUMENT);
            mv_append(cur, p.parts[i], sub);
            cur = sub;
        } else if (cur->kids[j]->type == BSON_TYPE_DOCUMENT) {
            cur = cur->kids[j];
        } else {
            SHL_FAIL(st, SHL_CODE_NOT_SINGLE_VALUE_FIELD,
                     "cannot infer query fields to set, path '%s' is matched twice", path);
        }
    }
done:
    qpath_cleanup(&p);
    return ret;
}

int
shl_update_upsert_doc(const shl_update_t *u, const shl_matcher_t *query,
                      const shl_update_ctx_t *ctx, bson_t *out, shl_status_t *st)
{
    bson_t eq, base = BSON_INITIALIZER, applied;
    mv_t *seed = mv_new_container(BSON_TYPE_DOCUMENT);
    shl_update_ctx_t ictx = {0};
    bson_iter_t it;
    bool changed;
    int ret = 0;

    bson_init(out);
    bson_init(&applied);
    if (query != NULL) {
        if ((ret = shl_matcher_equality_fields(query, &eq, st)) != 0) {
            bson_destroy(&eq);
            goto done;
        }
        bson_iter_init(&it, &eq);
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (u->kind == SHL_UPDATE_REPLACEMENT && strncmp(k, "_id.", 4) == 0) {
                /* A replacement takes the immutable _id from the query whole. */
                bson_destroy(&eq);
                SHL_FAIL(st, SHL_CODE_NOT_EXACT_VALUE_FIELD,
                         "field at '_id' must be exactly specified, field at sub-path '%s'found",
                         k);
            }
            if (u->kind == SHL_UPDATE_REPLACEMENT && strcmp(k, "_id") != 0) {
                continue;
            }
            if ((ret = seed_equality(seed, k, bson_iter_value(&it), st)) != 0) {
                bson_destroy(&eq);
                goto done;
            }
        }
        bson_destroy(&eq);
    }
    mv_to_bson(seed, &base);
    if (ctx != NULL) {
        ictx = *ctx;
    }
    ictx.is_insert = true;
    ictx.has_matched_key = false;
    SHL_ERR(shl_update_apply(u, &base, &ictx, &applied, &changed, st));
    /* _id first; a new ObjectId when there is none. */
    if (bson_iter_init_find(&it, &applied, "_id")) {
        bson_append_value(out, "_id", 3, bson_iter_value(&it));
    } else {
        bson_oid_t oid;
        bson_oid_init(&oid, NULL);
        bson_append_oid(out, "_id", 3, &oid);
    }
    bson_iter_init(&it, &applied);
    while (shl_iter_next(&it)) {
        if (strcmp(shl_iter_key(&it), "_id") != 0) {
            bson_append_value(out, shl_iter_key(&it), -1, bson_iter_value(&it));
        }
    }
    SHL_ERR(validate_storage(out, NULL, st));
done:
    if (ret != 0) {
        bson_reinit(out);
    }
    mv_free(seed);
    bson_destroy(&base);
    bson_destroy(&applied);
    return ret;
}
