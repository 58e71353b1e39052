/*
 * shard_key.c -- see shard_key.h. Rules follow MongoDB 7.0's ShardKeyPattern and the
 * equality extraction of pathsupport::extractFullEqualityMatches (facts, not code).
 */
#include "bson/bson_iter.h"
#include "sharding/shard_key.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bson/bson_compare.h"

#include "bson/bson_hash.h"
#include "bson/bson_util.h"

/* ---- patterns ---- */

static bool
is_hashed_value(const bson_iter_t *it)
{
    uint32_t len;
    const char *s;
    if (!BSON_ITER_HOLDS_UTF8(it)) {
        return false;
    }
    s = bson_iter_utf8(it, &len);
    return len == 6 && memcmp(s, "hashed", 6) == 0;
}

/* MongoDB's safeNumberInt: truncation toward zero, NaN as 0, clamped to int32. */
static bool
is_one(const bson_iter_t *it)
{
    switch (shl_iter_type(it)) {
    case BSON_TYPE_INT32:
        return bson_iter_int32(it) == 1;
    case BSON_TYPE_INT64:
        return bson_iter_int64(it) == 1;
    case BSON_TYPE_DOUBLE: {
        double d = bson_iter_double(it);
        return !isnan(d) && d >= 1.0 && d < 2.0;
    }
    case BSON_TYPE_DECIMAL128: {
        bson_decimal128_t dec;
        char buf[BSON_DECIMAL128_STRING];
        double d;
        bson_iter_decimal128(it, &dec);
        bson_decimal128_to_string(&dec, buf);
        if (sscanf(buf, "%lf", &d) != 1) {
            return false;
        }
        return !isnan(d) && d >= 1.0 && d < 2.0;
    }
    default:
        return false;
    }
}

int
shl_shard_key_pattern_init(shl_shard_key_pattern_t *p, const bson_t *pattern, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    size_t n = 0;
    int nhashed = 0;
    char *json = NULL;

    memset(p, 0, sizeof(*p));
    p->hashed = -1;
    if (bson_empty(pattern)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Shard key is empty");
    }
    bson_copy_to(pattern, &p->pattern);
    p->nfields = bson_count_keys(pattern);
    p->paths = bson_malloc0(p->nfields * sizeof(char *));

    SHL_INVARIANT(bson_iter_init(&it, pattern));
    while (shl_iter_next(&it)) {
        const char *name = shl_iter_key(&it);
        size_t len = strlen(name);
        bool hashed = is_hashed_value(&it);

        if (len == 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Field %s is empty", name);
        }
        if (name[0] == '.' || name[len - 1] == '.' || strstr(name, "..") != NULL) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Field %s contains empty parts", name);
        }
        nhashed += hashed ? 1 : 0;
        if (!(is_one(&it) || (hashed && nhashed == 1))) {
            json = shl_bson_to_string(pattern);
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "Shard key %s can contain at most one 'hashed' field, and/or multiple "
                     "numerical fields set to a value of 1. Failed to parse field %s",
                     json, name);
        }
        if (hashed) {
            p->hashed = (int)n;
        }
        p->paths[n++] = bson_strdup(name);
    }
done:
    bson_free(json);
    if (ret != 0 && p->paths != NULL) {
        shl_shard_key_pattern_cleanup(p);
        p->hashed = -1;
    }
    return ret;
}

void
shl_shard_key_pattern_cleanup(shl_shard_key_pattern_t *p)
{
    if (p->paths == NULL) {
        return;
    }
    for (size_t i = 0; i < p->nfields; i++) {
        bson_free(p->paths[i]);
    }
    bson_free(p->paths);
    bson_destroy(&p->pattern);
    memset(p, 0, sizeof(*p));
}

bool
shl_shard_key_pattern_is_hashed(const shl_shard_key_pattern_t *p)
{
    return p->hashed >= 0;
}

bool
shl_shard_key_pattern_has_hashed_prefix(const shl_shard_key_pattern_t *p)
{
    return p->hashed == 0;
}

static void
global_bound(const shl_shard_key_pattern_t *p, bson_t *out, bool max)
{
    bson_init(out);
    for (size_t i = 0; i < p->nfields; i++) {
        if (max) {
            bson_append_maxkey(out, p->paths[i], -1);
        } else {
            bson_append_minkey(out, p->paths[i], -1);
        }
    }
}

void
shl_shard_key_global_min(const shl_shard_key_pattern_t *p, bson_t *out)
{
    global_bound(p, out, false);
}

void
shl_shard_key_global_max(const shl_shard_key_pattern_t *p, bson_t *out)
{
    global_bound(p, out, true);
}

bool
shl_shard_key_is_shard_key(const shl_shard_key_pattern_t *p, const bson_t *key)
{
    bson_iter_t it;
    if (bson_count_keys(key) != p->nfields) {
        return false;
    }
    for (size_t i = 0; i < p->nfields; i++) {
        if (!bson_iter_init_find(&it, key, p->paths[i]) || BSON_ITER_HOLDS_ARRAY(&it)) {
            return false;
        }
    }
    return true;
}

bool
shl_shard_key_normalize(const shl_shard_key_pattern_t *p, const bson_t *key, bson_t *out)
{
    bson_iter_t it;
    bson_init(out);
    if (!shl_shard_key_is_shard_key(p, key)) {
        return false;
    }
    for (size_t i = 0; i < p->nfields; i++) {
        SHL_INVARIANT(bson_iter_init_find(&it, key, p->paths[i]));
        bson_append_iter(out, p->paths[i], -1, &it);
    }
    return true;
}

/* Whether an object holds a $-prefixed field name at any depth (DBRef fields allowed). */
static bool
has_dollar_field(const bson_iter_t *outer)
{
    bson_iter_t it;
    SHL_INVARIANT(bson_iter_recurse(outer, &it));
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (k[0] == '$' && strcmp(k, "$ref") != 0 && strcmp(k, "$id") != 0 &&
            strcmp(k, "$db") != 0) {
            return true;
        }
        if ((BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it)) &&
            has_dollar_field(&it)) {
            return true;
        }
    }
    return false;
}

static bool
valid_for_storage(const bson_iter_t *it)
{
    switch (shl_iter_type(it)) {
    case BSON_TYPE_EOD:
    case BSON_TYPE_ARRAY:
    case BSON_TYPE_REGEX:
        return false;
    case BSON_TYPE_DOCUMENT:
        return !has_dollar_field(it);
    default:
        return true;
    }
}

int
shl_shard_key_check_storage(const bson_t *key, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    char *json = NULL;

    SHL_INVARIANT(bson_iter_init(&it, key));
    while (shl_iter_next(&it)) {
        if (!valid_for_storage(&it)) {
            bson_t one = BSON_INITIALIZER;
            bson_append_iter(&one, shl_iter_key(&it), -1, &it);
            json = shl_bson_to_string(&one);
            bson_destroy(&one);
            /* MongoDB prints the element, "b: [ 1 ]": the document without its braces. */
            size_t len = strlen(json);
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Shard key element %.*s is not valid for storage",
                     (int)(len > 4 ? len - 4 : 0), json + 2);
        }
    }
done:
    bson_free(json);
    return ret;
}

/* ---- documents ---- */

/*
 * Look 'path' up in 'doc' the way MongoDB's getFieldDottedOrArray does: descend through
 * embedded documents; stop at an array (returned as found, for the caller to refuse).
 * Returns false if the path is missing or runs through a scalar.
 */
static bool
find_dotted_or_array(const bson_t *doc, const char *path, bson_iter_t *out)
{
    bson_iter_t it, child;
    const char *part = path;

    if (!bson_iter_init(&it, doc)) {
        return false;
    }
    for (;;) {
        const char *dot = strchr(part, '.');
        size_t len = dot ? (size_t)(dot - part) : strlen(part);
        bool found = false;
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (strlen(k) == len && memcmp(k, part, len) == 0) {
                found = true;
                break;
            }
        }
        if (!found) {
            return false;
        }
        if (dot == NULL || BSON_ITER_HOLDS_ARRAY(&it)) {
            *out = it;
            return true;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            return false;
        }
        SHL_INVARIANT(bson_iter_recurse(&it, &child));
        it = child;
        part = dot + 1;
    }
}

static void
append_key_value(bson_t *out, const char *name, const bson_value_t *v, bool hashed)
{
    if (hashed) {
        BSON_APPEND_INT64(out, name, shl_bson_hash_value(v, SHL_BSON_HASH_DEFAULT_SEED));
    } else {
        bson_append_value(out, name, -1, v);
    }
}

bool
shl_shard_key_doc_has_array(const shl_shard_key_pattern_t *p, const bson_t *doc)
{
    bson_iter_t it;
    bool has = false;

    for (size_t i = 0; i < p->nfields && !has; i++) {
        has = find_dotted_or_array(doc, p->paths[i], &it) && BSON_ITER_HOLDS_ARRAY(&it);
    }
    return has;
}

int
shl_shard_key_extract_from_doc(const shl_shard_key_pattern_t *p, const bson_t *doc, bson_t *out,
                               shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bson_value_t null_value;

    null_value.value_type = BSON_TYPE_NULL;
    bson_init(out);
    for (size_t i = 0; i < p->nfields; i++) {
        const bson_value_t *v = &null_value;
        if (find_dotted_or_array(doc, p->paths[i], &it)) {
            if (BSON_ITER_HOLDS_ARRAY(&it)) {
                bson_reinit(out);
                SHL_FAIL(st, SHL_CODE_SHARD_KEY_NOT_FOUND,
                         "Shard key cannot contain array values or array descendants.");
            }
            v = bson_iter_value(&it);
        }
        append_key_value(out, p->paths[i], v, (int)i == p->hashed);
    }
done:
    return ret;
}

/* The value at 'path' in 'doc' into *v (null when missing); false on an array. */
static bool
key_value_at(const bson_t *doc, const char *path, bson_iter_t *it, const bson_value_t **v)
{
    static const bson_value_t null_value = {.value_type = BSON_TYPE_NULL};
    bool ok = true;

    *v = &null_value;
    if (find_dotted_or_array(doc, path, it)) {
        ok = !BSON_ITER_HOLDS_ARRAY(it);
        *v = bson_iter_value(it);
    }
    return ok;
}

bool
shl_shard_key_values_equal(const shl_shard_key_pattern_t *p, const bson_t *a, const bson_t *b)
{
    bool equal = true;

    for (size_t i = 0; i < p->nfields && equal; i++) {
        bson_iter_t ia, ib;
        const bson_value_t *va, *vb;
        bson_t da = BSON_INITIALIZER, db = BSON_INITIALIZER;
        equal = key_value_at(a, p->paths[i], &ia, &va) && key_value_at(b, p->paths[i], &ib, &vb);
        if (equal) {
            /* Type and bytes: one element each, compared as written. */
            bson_append_value(&da, "", 0, va);
            bson_append_value(&db, "", 0, vb);
            equal = da.len == db.len && memcmp(bson_get_data(&da), bson_get_data(&db), da.len) == 0;
        }
        bson_destroy(&da);
        bson_destroy(&db);
    }
    return equal;
}

/* ---- queries ---- */

/* One equality found in a filter: the dotted path and the iterator on its value. */
typedef struct equality {
    const char *path;
    size_t path_len;
    bson_iter_t value;
} equality_t;

#define MAX_EQUALITIES 64

typedef struct eq_set {
    equality_t e[MAX_EQUALITIES];
    size_t n;
    bool failed; /* a conflict or an unsupported shape: no exact key */
} eq_set_t;

/* Whether the first 'alen' bytes of a are a path prefix of (or equal to) b. */
static bool
path_prefix(const char *a, size_t alen, const char *b, size_t blen)
{
    if (alen > blen || memcmp(a, b, alen) != 0) {
        return false;
    }
    return alen == blen || b[alen] == '.';
}

static bool
paths_conflict(const char *a, size_t alen, const char *b, size_t blen)
{
    return path_prefix(a, alen, b, blen) || path_prefix(b, blen, a, alen);
}

/* Record an equality on 'path', applying extractFullEqualityMatches' conflict rules. */
static void
add_equality(const shl_shard_key_pattern_t *p, eq_set_t *s, const char *path,
             const bson_iter_t *value)
{
    size_t len = strlen(path);
    bool related = false;

    for (size_t i = 0; i < p->nfields; i++) {
        size_t klen = strlen(p->paths[i]);
        if (!paths_conflict(path, len, p->paths[i], klen)) {
            continue;
        }
        related = true;
        if (!path_prefix(path, len, p->paths[i], klen)) {
            s->failed = true; /* an equality below a key path: no single value */
            return;
        }
    }
    if (!related) {
        return;
    }
    for (size_t i = 0; i < s->n; i++) {
        if (paths_conflict(path, len, s->e[i].path, s->e[i].path_len)) {
            s->failed = true; /* the same path (or a parent) matched twice */
            return;
        }
    }
    if (s->n == MAX_EQUALITIES) {
        s->failed = true;
        return;
    }
    s->e[s->n].path = path;
    s->e[s->n].path_len = len;
    s->e[s->n].value = *value;
    s->n++;
}

/* Whether an operator object's value is {$in: [x]} with one non-regex x; *x set if so. */
static bool
single_in(const bson_iter_t *in, bson_iter_t *x)
{
    bson_iter_t arr;
    if (!BSON_ITER_HOLDS_ARRAY(in) || !bson_iter_recurse(in, &arr) || !shl_iter_next(&arr)) {
        return false;
    }
    *x = arr;
    if (BSON_ITER_HOLDS_REGEX(x)) {
        return false;
    }
    return !shl_iter_next(&arr);
}

static bool
is_operator_object(const bson_iter_t *it)
{
    bson_iter_t sub;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &sub) || !shl_iter_next(&sub)) {
        return false;
    }
    return shl_iter_key(&sub)[0] == '$';
}

static void collect_equalities(const shl_shard_key_pattern_t *p, eq_set_t *s,
                               const bson_iter_t *filter_doc);

/* Recurse into every clause of a $and array (or a one-clause $or). */
static void
collect_clauses(const shl_shard_key_pattern_t *p, eq_set_t *s, const bson_iter_t *array)
{
    bson_iter_t clause;
    if (!BSON_ITER_HOLDS_ARRAY(array) || !bson_iter_recurse(array, &clause)) {
        s->failed = true;
        return;
    }
    while (shl_iter_next(&clause)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&clause)) {
            s->failed = true;
            return;
        }
        collect_equalities(p, s, &clause);
    }
}

/* The equalities among the fields 'it' is about to walk (one filter document's). */
static void
collect_fields(const shl_shard_key_pattern_t *p, eq_set_t *s, const bson_iter_t *fields)
{
    bson_iter_t it = *fields;

    while (shl_iter_next(&it) && !s->failed) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "$and") == 0) {
            collect_clauses(p, s, &it);
        } else if (strcmp(k, "$or") == 0) {
            /* MongoDB's optimizer turns a one-clause $or into its clause. */
            uint32_t len;
            const uint8_t *data;
            bson_t arr;
            if (BSON_ITER_HOLDS_ARRAY(&it)) {
                bson_iter_array(&it, &len, &data);
                if (bson_init_static(&arr, data, len) && bson_count_keys(&arr) == 1) {
                    collect_clauses(p, s, &it);
                }
            }
        } else if (k[0] == '$') {
            continue; /* $nor, $expr, $comment, $where...: no equality on a path */
        } else if (is_operator_object(&it)) {
            bson_iter_t op, x;
            SHL_INVARIANT(bson_iter_recurse(&it, &op));
            while (shl_iter_next(&op) && !s->failed) {
                const char *name = shl_iter_key(&op);
                if (strcmp(name, "$eq") == 0) {
                    add_equality(p, s, k, &op);
                } else if (strcmp(name, "$in") == 0 && single_in(&op, &x)) {
                    add_equality(p, s, k, &x);
                }
            }
        } else if (!BSON_ITER_HOLDS_REGEX(&it)) {
            add_equality(p, s, k, &it);
        }
    }
}

static void
collect_equalities(const shl_shard_key_pattern_t *p, eq_set_t *s, const bson_iter_t *filter_doc)
{
    bson_iter_t it;

    SHL_INVARIANT(bson_iter_recurse(filter_doc, &it));
    collect_fields(p, s, &it);
}

bool
shl_shard_key_extract_from_query(const shl_shard_key_pattern_t *p, const bson_t *filter,
                                 bson_t *out)
{
    eq_set_t s;
    bson_iter_t root;
    bool ok = false;

    bson_init(out);
    s.n = 0;
    s.failed = false;
    if (!bson_iter_init(&root, filter)) {
        goto done;
    }
    collect_fields(p, &s, &root);
    if (s.failed) {
        goto done;
    }
    for (size_t i = 0; i < p->nfields; i++) {
        const char *path = p->paths[i];
        size_t plen = strlen(path);
        const equality_t *eq = NULL;
        bson_iter_t v;

        for (size_t j = 0; j < s.n; j++) {
            if (path_prefix(s.e[j].path, s.e[j].path_len, path, plen)) {
                eq = &s.e[j];
                break;
            }
        }
        if (eq == NULL) {
            goto done;
        }
        v = eq->value;
        if (eq->path_len < plen) {
            /* The equality fixes a parent document: the key is inside its value. */
            uint32_t len;
            const uint8_t *data;
            bson_t parent;
            if (!BSON_ITER_HOLDS_DOCUMENT(&eq->value)) {
                goto done;
            }
            bson_iter_document(&eq->value, &len, &data);
            SHL_INVARIANT(bson_init_static(&parent, data, len));
            if (!find_dotted_or_array(&parent, path + eq->path_len + 1, &v)) {
                goto done;
            }
        }
        if (!valid_for_storage(&v)) {
            goto done;
        }
        append_key_value(out, path, bson_iter_value(&v), (int)i == p->hashed);
    }
    ok = true;
done:
    if (!ok) {
        bson_reinit(out);
    }
    return ok;
}

/* ---- ordering and comparisons ---- */

int
shl_shard_key_compare(const bson_t *a, const bson_t *b)
{
    bson_iter_t ia, ib;
    SHL_INVARIANT(bson_iter_init(&ia, a) && bson_iter_init(&ib, b));
    for (;;) {
        bool ma = shl_iter_next(&ia), mb = shl_iter_next(&ib);
        if (!ma || !mb) {
            return ma == mb ? 0 : (ma ? 1 : -1);
        }
        int c = shl_bson_iter_compare(&ia, &ib);
        if (c != 0) {
            return c;
        }
    }
}

bool
shl_shard_key_all_of_type(const bson_t *key, bson_type_t t)
{
    bson_iter_t it;
    SHL_INVARIANT(bson_iter_init(&it, key));
    while (shl_iter_next(&it)) {
        if (shl_iter_type(&it) != t) {
            return false;
        }
    }
    return true;
}

bool
shl_shard_key_is_extended_by(const shl_shard_key_pattern_t *p, const shl_shard_key_pattern_t *q)
{
    bson_iter_t a, b;
    if (p->nfields > q->nfields) {
        return false;
    }
    SHL_INVARIANT(bson_iter_init(&a, &p->pattern) && bson_iter_init(&b, &q->pattern));
    while (shl_iter_next(&a)) {
        SHL_INVARIANT(shl_iter_next(&b));
        if (strcmp(shl_iter_key(&a), shl_iter_key(&b)) != 0 || shl_bson_iter_compare(&a, &b) != 0) {
            return false;
        }
    }
    return true;
}

bool
shl_shard_key_is_unique_index_compatible(const shl_shard_key_pattern_t *p, const bson_t *index_key)
{
    bson_iter_t it;
    if (bson_iter_init(&it, index_key) && shl_iter_next(&it) &&
        strcmp(shl_iter_key(&it), "_id") == 0) {
        return true;
    }
    if (!bson_iter_init(&it, index_key)) {
        return false;
    }
    for (size_t i = 0; i < p->nfields; i++) {
        if (!shl_iter_next(&it) || strcmp(shl_iter_key(&it), p->paths[i]) != 0) {
            return false;
        }
    }
    return true;
}
