/*
 * exec_access.c -- parsing a find-like query and choosing its access path: _id equality
 * -> IDHACK; a hinted or chosen index -> IXSCAN (compound bounds and sort order on
 * non-multikey indexes, first-field bounds otherwise) + FETCH; else COLLSCAN.
 */
#include "bson/bson_iter.h"
#include "db/exec.h"

#include <string.h>

#include "bson/bson_hash.h"
#include "bson/bson_util.h"
#include "bson/keystring.h"
#include "query/text.h"
#include "db/index_kinds.h"

static bool
is_operator_doc(const bson_iter_t *it)
{
    bson_iter_t sub;
    return BSON_ITER_HOLDS_DOCUMENT(it) && bson_iter_recurse(it, &sub) && shl_iter_next(&sub) &&
           shl_iter_key(&sub)[0] == '$';
}

/* A value that an index bound can be built from: not an array (array equality matches
 * elements too), not a regex, not an operator document. */
static bool
boundable(const bson_iter_t *it)
{
    return !BSON_ITER_HOLDS_ARRAY(it) && !BSON_ITER_HOLDS_REGEX(it) && !is_operator_doc(it);
}

/* {_id: v} alone, v a scalar or a plain document (or {_id: {$eq: v}}). */
static bool
id_point_filter(const bson_t *filter, bson_value_t *out)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, filter) || !shl_iter_next(&it) ||
        strcmp(shl_iter_key(&it), "_id") != 0) {
        return false;
    }
    {
        bson_iter_t v = it;
        if (shl_iter_next(&it)) {
            return false; /* more than one field */
        }
        if (is_operator_doc(&v)) {
            bson_iter_t sub;
            bson_iter_recurse(&v, &sub);
            shl_iter_next(&sub);
            if (strcmp(shl_iter_key(&sub), "$eq") != 0 || !boundable(&sub)) {
                return false;
            }
            {
                bson_iter_t more = sub;
                if (shl_iter_next(&more)) {
                    return false;
                }
            }
            *out = *bson_iter_value(&sub);
            return true;
        }
        if (!boundable(&v) || BSON_ITER_HOLDS_UNDEFINED(&v)) {
            return false;
        }
        *out = *bson_iter_value(&v);
        return true;
    }
}

/* Whether a predicate of 'filter' compares a string (or matches a regex): what makes index
 * bounds depend on a collation. Type names, expressions and comments are not compared. */
static bool
filter_compares_strings(const bson_t *filter)
{
    static const char *const skip[] = {"$type", "$expr", "$jsonSchema", "$where", "$comment",
                                       NULL};
    bson_iter_t it;
    if (!bson_iter_init(&it, filter)) {
        return false;
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bool skipped = false;
        bson_type_t t = shl_iter_type(&it);
        for (size_t i = 0; skip[i] != NULL && !skipped; i++) {
            skipped = strcmp(k, skip[i]) == 0;
        }
        if (skipped) {
            continue;
        }
        if (t == BSON_TYPE_UTF8 || t == BSON_TYPE_SYMBOL || t == BSON_TYPE_REGEX ||
            t == BSON_TYPE_CODE) {
            return true;
        }
        if (t == BSON_TYPE_DOCUMENT || t == BSON_TYPE_ARRAY) {
            bson_t sub;
            const uint8_t *data;
            uint32_t len;
            if (t == BSON_TYPE_DOCUMENT) {
                bson_iter_document(&it, &len, &data);
            } else {
                bson_iter_array(&it, &len, &data);
            }
            if (bson_init_static(&sub, data, len) && filter_compares_strings(&sub)) {
                return true;
            }
        }
    }
    return false;
}

int
exec_query_init(exec_query_t *q, const bson_t *filter, const bson_t *sort, const bson_t *projection,
                shl_status_t *st)
{
    int ret = 0;

    memset(q, 0, sizeof(*q));
    bson_init(&q->filter);
    if (filter != NULL) {
        bson_destroy(&q->filter);
        bson_init_static(&q->filter, bson_get_data(filter), filter->len);
    }
    {
        int ntext = 0;
        shl_text_find(&q->filter, &q->text, &ntext, &q->text_in_or);
        q->has_text = ntext > 0;
        if (ntext > 1) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Too many text expressions");
        }
    }
    q->id_point = !q->has_text && id_point_filter(&q->filter, &q->id_value);
    q->string_free = !filter_compares_strings(&q->filter);
    SHL_ERR(shl_matcher_new(&q->filter, SHL_MATCHER_DEFAULT | SHL_MATCHER_TEXT_DEFERRED,
                            &q->matcher, st));
    if (sort != NULL && !bson_empty(sort)) {
        bson_init_static(&q->sort, bson_get_data(sort), sort->len);
        SHL_ERR(shl_sort_pattern_new(&q->sort, &q->sort_pattern, st));
        q->has_sort = shl_sort_pattern_nfields(q->sort_pattern) > 0;
    }
    if (projection != NULL && !bson_empty(projection)) {
        bson_init_static(&q->projection, bson_get_data(projection), projection->len);
        SHL_ERR(shl_projection_new(&q->projection, &q->filter, &q->proj, st));
        q->has_projection = true;
    }
done:
    return ret;
}

void
exec_query_cleanup(exec_query_t *q)
{
    shl_matcher_destroy(q->matcher);
    shl_sort_pattern_destroy(q->sort_pattern);
    shl_projection_destroy(q->proj);
    shl_db_orphan_filter_release(q->orphan_filter);
    q->orphan_filter = NULL;
    shl_collator_release(q->collator);
    q->collator = NULL;
    if (q->plan_filter != NULL) {
        bson_destroy(q->plan_filter);
        q->plan_filter = NULL;
    }
    if (q->let_owned != NULL) {
        bson_destroy(q->let_owned);
        q->let_owned = NULL;
        q->let = NULL;
    }
    q->matcher = NULL;
    q->sort_pattern = NULL;
    q->proj = NULL;
}

shl_collator_t *
exec_collection_collator(const shl_collection_t *coll)
{
    bson_iter_t it;
    shl_collator_t *c = NULL;
    shl_status_t st = SHL_STATUS_INIT;
    if (coll != NULL && coll->nindexes > 0 && coll->indexes[0]->is_id) {
        /* The _id index has the default collation, already parsed (storage/catalog.c). */
        return shl_collator_ref(coll->indexes[0]->collator);
    }
    if (coll != NULL && coll->options != NULL &&
        bson_iter_init_find(&it, coll->options, "collation")) {
        /* Validated when the collection was created. */
        (void)shl_collator_from_iter(&it, "collation", &c, &st);
    }
    return c;
}

/* Operators whose string arguments are not values to compare ($type names, expressions). */
static bool
keep_operand(const char *k)
{
    static const char *const keep[] = {"$type", "$expr", "$jsonSchema", "$where", "$text",
                                       "$comment", NULL};
    for (size_t i = 0; keep[i] != NULL; i++) {
        if (strcmp(k, keep[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* 'in' with every compared string replaced by its collation key; *regex when a regex
 * appears (then the result is not used). */
static void
collation_key_filter(const shl_collator_t *coll, const bson_t *in, bool *regex, bson_t *out)
{
    bson_iter_t it;
    bson_init(out);
    if (!bson_iter_init(&it, in)) {
        return;
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        const bson_value_t *v = bson_iter_value(&it);
        if (v->value_type == BSON_TYPE_REGEX || strcmp(k, "$regex") == 0) {
            *regex = true;
        }
        if (keep_operand(k)) {
            bson_append_value(out, k, -1, v);
        } else if (v->value_type == BSON_TYPE_DOCUMENT || v->value_type == BSON_TYPE_ARRAY) {
            bson_t view, sub;
            bson_init_static(&view, v->value.v_doc.data, v->value.v_doc.data_len);
            collation_key_filter(coll, &view, regex, &sub);
            if (v->value_type == BSON_TYPE_ARRAY) {
                bson_append_array(out, k, -1, &sub);
            } else {
                bson_append_document(out, k, -1, &sub);
            }
            bson_destroy(&sub);
        } else {
            bson_value_t ck;
            shl_collator_value_key(coll, v, &ck);
            bson_append_value(out, k, -1, &ck);
            bson_value_destroy(&ck);
        }
    }
}

void
exec_query_set_collator(exec_query_t *q, shl_collator_t *coll, bool explicit)
{
    shl_collator_t *old = q->collator;
    q->collator = shl_collator_ref(coll);
    shl_collator_release(old);
    q->has_collation = explicit;
    if (q->matcher != NULL) {
        shl_matcher_set_collator(q->matcher, coll);
    }
    if (q->sort_pattern != NULL) {
        shl_sort_pattern_set_collator(q->sort_pattern, coll);
    }
    if (q->proj != NULL) {
        shl_projection_set_collator(q->proj, q->collator); /* 'q' holds the reference */
    }
    if (q->plan_filter != NULL) {
        bson_destroy(q->plan_filter);
        q->plan_filter = NULL;
    }
    q->plan_no_index = false;
    if (coll != NULL) {
        bson_t keyed;
        collation_key_filter(coll, &q->filter, &q->plan_no_index, &keyed);
        q->plan_filter = bson_copy(&keyed);
        bson_destroy(&keyed);
    }
}

void
exec_query_set_let(exec_query_t *q, const bson_t *vars)
{
    if (q->let_owned != NULL) {
        bson_destroy(q->let_owned);
    }
    q->let_owned = bson_copy(vars);
    q->let = q->let_owned;
    if (q->matcher != NULL) {
        shl_matcher_bind_vars(q->matcher, vars);
    }
}

/* ---------------------------------------------------------------- index bounds */

enum { B_NONE, B_EQ, B_GT, B_GTE, B_LT, B_LTE };

static int
op_kind(const char *op)
{
    if (strcmp(op, "$eq") == 0) {
        return B_EQ;
    } else if (strcmp(op, "$gt") == 0) {
        return B_GT;
    } else if (strcmp(op, "$gte") == 0) {
        return B_GTE;
    } else if (strcmp(op, "$lt") == 0) {
        return B_LT;
    } else if (strcmp(op, "$lte") == 0) {
        return B_LTE;
    }
    return B_NONE;
}

/* A bound's value as explain shows it: on a collated index a string is a collation key,
 * which MongoDB prints as CollationKey(0x<its bytes in hex>). The caller frees it. */
static char *
bound_string(const bson_value_t *v, bool collated)
{
    if (collated && v->value_type == BSON_TYPE_UTF8) {
        bson_string_t *s = bson_string_new("CollationKey(0x");
        for (uint32_t i = 0; i < v->value.v_utf8.len; i++) {
            bson_string_append_printf(s, "%02x", (uint8_t)v->value.v_utf8.str[i]);
        }
        bson_string_append_c(s, ')');
        return bson_string_free(s, false);
    }
    return shl_bson_value_to_string(v);
}

static void bounds_for_field(const bson_t *filter, const char *field, bool descending,
                             shl_keystring_t *start, shl_keystring_t *end, bool *has_start,
                             bool *has_end, char *desc, size_t desc_len, bool collated);

void
exec_bounds_for_field(const bson_t *filter, const char *field, bool descending,
                      struct shl_keystring *start, struct shl_keystring *end, bool *has_start,
                      bool *has_end, char *desc, size_t desc_len)
{
    bounds_for_field(filter, field, descending, start, end, has_start, has_end, desc, desc_len,
                     false);
}

/* exec_bounds_for_field, with 'collated' saying the filter's strings are collation keys. */
static void
bounds_for_field(const bson_t *filter, const char *field, bool descending, shl_keystring_t *start,
                 shl_keystring_t *end, bool *has_start, bool *has_end, char *desc, size_t desc_len,
                 bool collated)
{
    bson_iter_t it;
    int kind = B_NONE;
    bson_value_t val = {0};
    bool lower_side, upper_side;

    *has_start = *has_end = false;
    snprintf(desc, desc_len, "[MinKey, MaxKey]");
    if (!bson_iter_init_find(&it, filter, field)) {
        return;
    }
    if (!is_operator_doc(&it)) {
        if (!boundable(&it)) {
            return;
        }
        kind = B_EQ;
        val = *bson_iter_value(&it);
    } else {
        /* Use one predicate only: without knowing whether the index is multikey, two
         * ranges on one field cannot be intersected ({a: {$gt: 5, $lt: 9}} matches
         * [1, 10]). Equality wins, then a lower bound, then an upper bound. */
        bson_iter_t sub;
        int best = B_NONE;
        bson_iter_recurse(&it, &sub);
        while (shl_iter_next(&sub)) {
            int k = op_kind(shl_iter_key(&sub));
            if (k == B_NONE || !boundable(&sub)) {
                continue;
            }
            if (best == B_NONE || k == B_EQ ||
                ((k == B_GT || k == B_GTE) && (best == B_LT || best == B_LTE))) {
                best = k;
                val = *bson_iter_value(&sub);
            }
        }
        kind = best;
    }
    if (kind == B_NONE) {
        return;
    }
    /* In value order: 'lower_side' constrains from below, 'upper_side' from above. */
    lower_side = kind == B_EQ || kind == B_GT || kind == B_GTE;
    upper_side = kind == B_EQ || kind == B_LT || kind == B_LTE;
    /* For an ascending field values map to increasing keys: the lower side is the start
     * bound; a descending field inverts the bytes, so it becomes the end bound. Bounds
     * are inclusive of every key with the value as prefix (loose for $gt/$lt: the
     * filter after FETCH decides). */
    if (lower_side) {
        shl_keystring_t *k = descending ? end : start;
        shl_keystring_append_value(k, &val, descending);
        if (descending) {
            shl_keystring_append_max_suffix(k);
            *has_end = true;
        } else {
            *has_start = true;
        }
    }
    if (upper_side) {
        shl_keystring_t *k = descending ? start : end;
        shl_keystring_append_value(k, &val, descending);
        if (descending) {
            *has_start = true;
        } else {
            shl_keystring_append_max_suffix(k);
            *has_end = true;
        }
    }
    {
        static const char *const names[] = {"", "==", ">", ">=", "<", "<="};
        char *vs = bound_string(&val, collated);
        snprintf(desc, desc_len, "%s %s %s", field, names[kind], vs);
        bson_free(vs);
    }
}

/* Bounds on a hashed first field: an equality predicate becomes the point of its hash
 * (NumberLong, as the index stores it); anything else scans the whole index. */
static void
hashed_bounds(const bson_t *filter, const char *field, shl_keystring_t *start, shl_keystring_t *end,
              bool *has_start, bool *has_end, char *desc, size_t desc_len)
{
    bson_iter_t it, sub;
    bson_value_t val, hv;
    bool found = false;

    *has_start = *has_end = false;
    if (!bson_iter_init_find(&it, filter, field)) {
        return;
    }
    if (!is_operator_doc(&it)) {
        if (boundable(&it)) {
            val = *bson_iter_value(&it);
            found = true;
        }
    } else if (bson_iter_recurse(&it, &sub)) {
        while (!found && shl_iter_next(&sub)) {
            if (strcmp(shl_iter_key(&sub), "$eq") == 0 && boundable(&sub)) {
                val = *bson_iter_value(&sub);
                found = true;
            }
        }
    }
    if (!found) {
        return;
    }
    hv.value_type = BSON_TYPE_INT64;
    hv.value.v_int64 = shl_bson_hash_value(&val, SHL_BSON_HASH_DEFAULT_SEED);
    shl_keystring_append_value(start, &hv, false);
    shl_keystring_append_value(end, &hv, false);
    shl_keystring_append_max_suffix(end);
    *has_start = *has_end = true;
    snprintf(desc, desc_len, "[%lld, %lld]", (long long)hv.value.v_int64,
             (long long)hv.value.v_int64);
}

/* Bounds from {field: {$in: [v...]}}: one interval from the smallest to the largest
 * value's key (loose; FETCH's filter decides). Not with arrays, regexes or operator
 * documents among the values. */
static bool
in_bounds(const bson_t *filter, const char *field, bool descending, shl_keystring_t *start,
          shl_keystring_t *end, char *desc, size_t desc_len, bool collated)
{
    bson_iter_t it, sub, vals;
    shl_keystring_t k;
    bool any = false, ok = true;
    bson_value_t lo = {0}, hi = {0};

    if (!bson_iter_init_find(&it, filter, field) || !is_operator_doc(&it) ||
        !bson_iter_recurse(&it, &sub) || !bson_iter_find(&sub, "$in") ||
        !BSON_ITER_HOLDS_ARRAY(&sub) || !bson_iter_recurse(&sub, &vals)) {
        return false;
    }
    shl_keystring_init(&k);
    while (ok && shl_iter_next(&vals)) {
        if (!boundable(&vals)) {
            ok = false;
            break;
        }
        shl_keystring_reset(&k);
        shl_keystring_append_iter(&k, &vals, descending);
        if (!any || shl_keystring_compare(k.data, k.len, start->data, start->len) < 0) {
            shl_keystring_reset(start);
            shl_keystring_append_iter(start, &vals, descending);
            lo = *bson_iter_value(&vals);
        }
        if (!any || shl_keystring_compare(k.data, k.len, end->data, end->len) > 0) {
            shl_keystring_reset(end);
            shl_keystring_append_iter(end, &vals, descending);
            hi = *bson_iter_value(&vals);
        }
        any = true;
    }
    shl_keystring_cleanup(&k);
    if (!ok || !any) {
        shl_keystring_reset(start);
        shl_keystring_reset(end);
        return false;
    }
    shl_keystring_append_max_suffix(end);
    {
        /* In key order: for a descending field 'lo' holds the largest value. */
        char *a = bound_string(&lo, collated), *b = bound_string(&hi, collated);
        snprintf(desc, desc_len, "[%s, %s]", a, b);
        bson_free(a);
        bson_free(b);
    }
    return true;
}

/*
 * Bounds for 'idx' from the filter's predicates on its first field, and how useful they
 * are: 3 equality (or a hashed point), 2 $in, 1 one-sided range, 0 none (full scan).
 */
/*
 * The interval of explain's indexBounds for the first field from exec_bounds_for_field's
 * description ("a >= 5"): "[5, MaxKey]", in key order (reversed for a descending field).
 */
static void
interval_from_desc(const char *field, const char *d, bool descending, char *iv, size_t iv_len)
{
    size_t flen = strlen(field);
    const char *op, *val;
    const char *lo = "[MinKey", *hi = "MaxKey]";
    char lob[160], hib[160];

    if (strncmp(d, field, flen) != 0 || d[flen] != ' ') {
        snprintf(iv, iv_len, descending ? "[MaxKey, MinKey]" : "[MinKey, MaxKey]");
        return;
    }
    op = d + flen + 1;
    val = strchr(op, ' ');
    val = val != NULL ? val + 1 : "";
    if (strncmp(op, "==", 2) == 0) {
        snprintf(iv, iv_len, "[%s, %s]", val, val);
        return;
    }
    if (op[0] == '>') {
        snprintf(lob, sizeof(lob), "%c%s", op[1] == '=' ? '[' : '(', val);
        lo = lob;
    } else {
        snprintf(hib, sizeof(hib), "%s%c", val, op[1] == '=' ? ']' : ')');
        hi = hib;
    }
    if (!descending) {
        snprintf(iv, iv_len, "%s, %s", lo, hi);
    } else {
        /* Reverse: "[MaxKey, 5)" for a >= 5 ... written from the high end. */
        char a[170], b[170];
        size_t hl = strlen(hi), ll = strlen(lo);
        snprintf(a, sizeof(a), "%c%.*s", hi[hl - 1] == ']' ? '[' : '(', (int)(hl - 1), hi);
        snprintf(b, sizeof(b), "%s%c", lo + 1, lo[0] == '[' ? ']' : ')');
        (void)ll;
        snprintf(iv, iv_len, "%s, %s", a, b);
    }
}

/*
 * Bounds for 'idx' from the filter's predicates on its first field, and how useful they
 * are: 3 equality (or a hashed point), 2 $in, 1 one-sided range, 0 none (full scan).
 * 'iv' receives the first field's interval for explain.
 */
static int
index_bounds(const bson_t *filter, const shl_index_t *idx, shl_keystring_t *ks0,
             shl_keystring_t *ks1, bool *has0, bool *has1, char *desc, size_t desc_len, char *iv,
             size_t iv_len)
{
    bson_iter_t kp;

    *has0 = *has1 = false;
    snprintf(iv, iv_len, "[MinKey, MaxKey]");
    if (!bson_iter_init(&kp, idx->key_pattern) || !shl_iter_next(&kp)) {
        return 0;
    }
    if (BSON_ITER_HOLDS_UTF8(&kp)) {
        hashed_bounds(filter, shl_iter_key(&kp), ks0, ks1, has0, has1, desc, desc_len);
        if (*has0) {
            snprintf(iv, iv_len, "%s", desc);
        }
        return *has0 ? 3 : 0;
    }
    {
        bool descending = BSON_ITER_HOLDS_NUMBER(&kp) && bson_iter_as_double(&kp) < 0;
        bounds_for_field(filter, shl_iter_key(&kp), descending, ks0, ks1, has0, has1, desc,
                         desc_len, idx->collator != NULL);
        interval_from_desc(shl_iter_key(&kp), desc, descending, iv, iv_len);
        if (*has0 && *has1) {
            return 3;
        }
        if (!*has0 && !*has1 &&
            in_bounds(filter, shl_iter_key(&kp), descending, ks0, ks1, iv, iv_len,
                      idx->collator != NULL)) {
            *has0 = *has1 = true;
            snprintf(desc, desc_len, "%s $in", shl_iter_key(&kp));
            return 2;
        }
        return *has0 || *has1 ? 1 : 0;
    }
}

/* ---------------------------------------------------------------- compound bounds
 * For an index that is not multikey (every document made at most one key), all
 * predicates on a field hold for the one indexed value, so they intersect: an
 * equality prefix (points, $in as several points) then one range, over several
 * fields, gathered from the top level and from top-level $and. Bounds stay loose
 * (inclusive); FETCH's filter decides. */

#define CB_MAX_POINTS 256
#define CB_MAX_INTERVALS 1024

typedef struct field_preds {
    bson_value_t points[CB_MAX_POINTS];
    size_t npoints;
    bool has_points, too_many;
    bool has_lo, has_hi, lo_incl, hi_incl;
    bson_value_t lo, hi;
    /* The range of the first {$elemMatch: {<comparisons>}}: one element satisfies both
     * sides, so they bound a multikey field together. */
    struct field_preds *em;
} field_preds_t;

/* Value order of two boundable values (KeyString order). */
static int
value_cmp(const bson_value_t *a, const bson_value_t *b)
{
    shl_keystring_t ka, kb;
    int c;
    shl_keystring_init(&ka);
    shl_keystring_init(&kb);
    shl_keystring_append_value(&ka, a, false);
    shl_keystring_append_value(&kb, b, false);
    c = shl_keystring_compare(ka.data, ka.len, kb.data, kb.len);
    shl_keystring_cleanup(&ka);
    shl_keystring_cleanup(&kb);
    return c;
}

/* 'dst' (empty) becomes a copy of 'src'. */
static void
ks_copy(shl_keystring_t *dst, const shl_keystring_t *src)
{
    if (src->len > 0) {
        dst->data = bson_malloc(src->len);
        memcpy(dst->data, src->data, src->len);
        dst->len = dst->cap = src->len;
    }
}

static void
preds_add_range(field_preds_t *fp, int kind, const bson_value_t *v)
{
    if (kind == B_GT || kind == B_GTE) {
        int c = fp->has_lo ? value_cmp(v, &fp->lo) : 1;
        if (c > 0 || (c == 0 && kind == B_GT)) {
            fp->lo = *v;
            fp->lo_incl = kind == B_GTE;
            fp->has_lo = true;
        }
    } else {
        int c = fp->has_hi ? value_cmp(v, &fp->hi) : -1;
        if (c < 0 || (c == 0 && kind == B_LT)) {
            fp->hi = *v;
            fp->hi_incl = kind == B_LTE;
            fp->has_hi = true;
        }
    }
}

/* Points: an equality replaces a $in (either is a superset of the conjunction). */
static void
preds_set_points(field_preds_t *fp, const bson_value_t *vals, size_t n, bool is_eq)
{
    if (fp->has_points && !is_eq) {
        return;
    }
    if (n > CB_MAX_POINTS) {
        fp->too_many = true;
        return;
    }
    memcpy(fp->points, vals, n * sizeof(*vals));
    fp->npoints = n;
    fp->has_points = true;
    fp->too_many = false;
}

static void
preds_from_value(field_preds_t *fp, const bson_iter_t *it)
{
    bson_iter_t sub;
    if (!is_operator_doc(it)) {
        if (boundable(it) && !BSON_ITER_HOLDS_UNDEFINED(it)) {
            bson_iter_t c = *it;
            preds_set_points(fp, bson_iter_value(&c), 1, true);
        }
        return;
    }
    bson_iter_recurse(it, &sub);
    while (shl_iter_next(&sub)) {
        const char *op = shl_iter_key(&sub);
        int k = op_kind(op);
        if (k == B_EQ && boundable(&sub)) {
            preds_set_points(fp, bson_iter_value(&sub), 1, true);
        } else if (k != B_NONE && k != B_EQ && boundable(&sub)) {
            preds_add_range(fp, k, bson_iter_value(&sub));
        } else if (strcmp(op, "$elemMatch") == 0 && fp->em != NULL && !fp->em->has_lo &&
                   !fp->em->has_hi && is_operator_doc(&sub)) {
            bson_iter_t em;
            field_preds_t r;
            bool only_ranges = true;
            memset(&r, 0, sizeof(r));
            bson_iter_recurse(&sub, &em);
            while (shl_iter_next(&em)) {
                int ek = op_kind(shl_iter_key(&em));
                if (ek == B_NONE || ek == B_EQ || !boundable(&em)) {
                    only_ranges = false;
                    break;
                }
                preds_add_range(&r, ek, bson_iter_value(&em));
            }
            if (only_ranges && r.has_lo && r.has_hi) {
                fp->em->has_lo = fp->em->has_hi = true;
                fp->em->lo = r.lo;
                fp->em->hi = r.hi;
                fp->em->lo_incl = r.lo_incl;
                fp->em->hi_incl = r.hi_incl;
            }
        } else if (strcmp(op, "$in") == 0 && BSON_ITER_HOLDS_ARRAY(&sub)) {
            bson_iter_t vals;
            bson_value_t *buf = bson_malloc(sizeof(bson_value_t) * (CB_MAX_POINTS + 1));
            size_t n = 0;
            bool ok = bson_iter_recurse(&sub, &vals);
            while (ok && shl_iter_next(&vals)) {
                if (!boundable(&vals) || BSON_ITER_HOLDS_UNDEFINED(&vals) || n > CB_MAX_POINTS) {
                    ok = false;
                    break;
                }
                buf[n++] = *bson_iter_value(&vals);
            }
            if (ok && n > 0 && n <= CB_MAX_POINTS) {
                preds_set_points(fp, buf, n, false);
            }
            bson_free(buf);
        }
    }
}

/* Gather the predicates on 'field' from 'filter' and its (nested) $and elements. */
static void
preds_collect(const bson_t *filter, const char *field, field_preds_t *fp, int depth)
{
    bson_iter_t it;
    if (depth > 8 || !bson_iter_init(&it, filter)) {
        return;
    }
    while (shl_iter_next(&it)) {
        const char *key = shl_iter_key(&it);
        if (strcmp(key, field) == 0) {
            preds_from_value(fp, &it);
        } else if (strcmp(key, "$and") == 0 && BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_iter_t el;
            bson_iter_recurse(&it, &el);
            while (shl_iter_next(&el)) {
                if (BSON_ITER_HOLDS_DOCUMENT(&el)) {
                    const uint8_t *d;
                    uint32_t l;
                    bson_t sub;
                    bson_iter_document(&el, &l, &d);
                    if (bson_init_static(&sub, d, l)) {
                        preds_collect(&sub, field, fp, depth + 1);
                    }
                }
            }
        }
    }
}

typedef struct cb_interval {
    shl_keystring_t start, end;
} cb_interval_t;

typedef struct cb_plan {
    cb_interval_t *ivs;
    size_t n;
    bool bounded; /* false: full scan (no intervals) */
    uint64_t eq1; /* bit i: key field i is bound to a single point */
    int score;
    bson_t bounds; /* explain's indexBounds */
} cb_plan_t;

static void
cb_plan_cleanup(cb_plan_t *p)
{
    for (size_t i = 0; i < p->n; i++) {
        shl_keystring_cleanup(&p->ivs[i].start);
        shl_keystring_cleanup(&p->ivs[i].end);
    }
    bson_free(p->ivs);
    p->ivs = NULL;
    p->n = 0;
    bson_destroy(&p->bounds);
}

static int
point_cmp(const void *a, const void *b)
{
    return value_cmp((const bson_value_t *)a, (const bson_value_t *)b);
}

static int
iv_cmp(const void *a, const void *b)
{
    const cb_interval_t *x = a, *y = b;
    return shl_keystring_compare(x->start.data, x->start.len, y->start.data, y->start.len);
}

static void
append_str(bson_t *arr, size_t *i, const char *s)
{
    char k[16];
    const char *key;
    bson_uint32_to_string((uint32_t)(*i)++, &key, k, sizeof(k));
    bson_append_utf8(arr, key, -1, s, -1);
}

/* explain's interval list for one field, in index order. */
static void
field_bounds_doc(const field_preds_t *fp, int use, bool descending, const char *field,
                 bool collated, bson_t *out)
{
    bson_t arr;
    size_t i = 0;
    char buf[400];
    bson_append_array_begin(out, field, -1, &arr);
    if (use == 1) {
        for (size_t j = 0; j < fp->npoints; j++) {
            size_t x = descending ? fp->npoints - 1 - j : j;
            char *v = bound_string(&fp->points[x], collated);
            snprintf(buf, sizeof(buf), "[%s, %s]", v, v);
            append_str(&arr, &i, buf);
            bson_free(v);
        }
    } else if (use == 2) {
        char *lo = fp->has_lo ? bound_string(&fp->lo, collated) : bson_strdup("MinKey");
        char *hi = fp->has_hi ? bound_string(&fp->hi, collated) : bson_strdup("MaxKey");
        bool li = !fp->has_lo || fp->lo_incl, hi_ = !fp->has_hi || fp->hi_incl;
        if (!descending) {
            snprintf(buf, sizeof(buf), "%c%s, %s%c", li ? '[' : '(', lo, hi, hi_ ? ']' : ')');
        } else {
            snprintf(buf, sizeof(buf), "%c%s, %s%c", hi_ ? '[' : '(', fp->has_hi ? hi : "MaxKey",
                     fp->has_lo ? lo : "MinKey", li ? ']' : ')');
        }
        append_str(&arr, &i, buf);
        bson_free(lo);
        bson_free(hi);
    } else {
        append_str(&arr, &i, descending ? "[MaxKey, MinKey]" : "[MinKey, MaxKey]");
    }
    bson_append_array_end(out, &arr);
}

/*
 * Compound bounds for an ascending/descending index (on fields holding arrays, one side
 * of a range only: multikey_paths). Score: the first
 * field's kind (3 one point, 2 several points, 1 range, 0 none) * 8 + bounded fields.
 */
static void
compound_bounds(const bson_t *filter, const shl_index_t *idx, cb_plan_t *p)
{
    bson_iter_t kp;
    field_preds_t *fp = bson_malloc0(sizeof(*fp));
    bool stopped = false;
    int nfields = 0, first_kind = 0;
    size_t nkey = 0;
    field_preds_t em;

    memset(p, 0, sizeof(*p));
    bson_init(&p->bounds);
    p->ivs = bson_malloc0(sizeof(cb_interval_t));
    shl_keystring_init(&p->ivs[0].start);
    shl_keystring_init(&p->ivs[0].end);
    p->n = 1;
    bson_iter_init(&kp, idx->key_pattern);
    while (shl_iter_next(&kp)) {
        const char *field = shl_iter_key(&kp);
        bool desc = BSON_ITER_HOLDS_NUMBER(&kp) && bson_iter_as_double(&kp) < 0;
        int use = 0; /* 1 points, 2 range */
        memset(fp, 0, sizeof(*fp));
        memset(&em, 0, sizeof(em));
        fp->em = &em;
        if (!stopped) {
            preds_collect(filter, field, fp, 0);
            if (idx->multikey_paths & (1ull << (nkey < 63 ? nkey : 63))) {
                /* The field holds arrays: each predicate may match another element, so
                 * a lower and an upper bound do not intersect (MongoDB's multikey rule;
                 * points, or bounds on one side, still hold for the matching key) --
                 * except both sides of one $elemMatch, which one element satisfies. */
                if (!fp->has_points && em.has_lo && em.has_hi) {
                    fp->has_lo = fp->has_hi = true;
                    fp->lo = em.lo;
                    fp->hi = em.hi;
                    fp->lo_incl = em.lo_incl;
                    fp->hi_incl = em.hi_incl;
                } else if (!fp->has_points && fp->has_lo && fp->has_hi) {
                    fp->has_hi = false;
                }
            }
            if (fp->has_points && !fp->too_many && p->n * fp->npoints <= CB_MAX_INTERVALS) {
                use = 1;
            } else if (fp->has_lo || fp->has_hi) {
                use = 2;
            }
        }
        if (use == 1) {
            size_t np = 0;
            cb_interval_t *nv;
            qsort(fp->points, fp->npoints, sizeof(bson_value_t), point_cmp);
            for (size_t j = 0; j < fp->npoints; j++) {
                if (np == 0 || value_cmp(&fp->points[np - 1], &fp->points[j]) != 0) {
                    fp->points[np++] = fp->points[j];
                }
            }
            fp->npoints = np;
            nv = bson_malloc0(p->n * np * sizeof(*nv));
            for (size_t a = 0; a < p->n; a++) {
                for (size_t j = 0; j < np; j++) {
                    cb_interval_t *t = &nv[a * np + j];
                    shl_keystring_init(&t->start);
                    shl_keystring_init(&t->end);
                    ks_copy(&t->start, &p->ivs[a].start);
                    shl_keystring_append_value(&t->start, &fp->points[j], desc);
                    ks_copy(&t->end, &p->ivs[a].end);
                    shl_keystring_append_value(&t->end, &fp->points[j], desc);
                }
            }
            {
                size_t old = p->n;
                for (size_t a = 0; a < old; a++) {
                    shl_keystring_cleanup(&p->ivs[a].start);
                    shl_keystring_cleanup(&p->ivs[a].end);
                }
                bson_free(p->ivs);
                p->ivs = nv;
                p->n = old * np;
            }
            if (nfields == 0) {
                first_kind = np == 1 ? 3 : 2;
            }
            if (np == 1 && nfields < 64) {
                p->eq1 |= 1ull << nfields;
            }
            nfields++;
        } else if (use == 2) {
            for (size_t a = 0; a < p->n; a++) {
                /* The lower value bounds the start of an ascending field, the end of a
                 * descending one (its bytes are inverted). */
                if (fp->has_lo) {
                    shl_keystring_append_value(desc ? &p->ivs[a].end : &p->ivs[a].start, &fp->lo,
                                               desc);
                }
                if (fp->has_hi) {
                    shl_keystring_append_value(desc ? &p->ivs[a].start : &p->ivs[a].end, &fp->hi,
                                               desc);
                }
            }
            if (nfields == 0) {
                first_kind = 1;
            }
            nfields++;
            stopped = true;
        } else {
            stopped = true;
        }
        field_bounds_doc(fp, use, desc, field, idx->collator != NULL, &p->bounds);
        nkey++;
    }
    bson_free(fp);
    p->bounded = nfields > 0;
    p->score = first_kind * 8 + nfields;
    if (!p->bounded) {
        return;
    }
    {
        size_t w = 0;
        for (size_t a = 0; a < p->n; a++) {
            cb_interval_t *t = &p->ivs[a];
            shl_keystring_append_max_suffix(&t->end);
            if (shl_keystring_compare(t->start.data, t->start.len, t->end.data, t->end.len) >= 0) {
                shl_keystring_cleanup(&t->start);
                shl_keystring_cleanup(&t->end);
                continue;
            }
            p->ivs[w++] = *t;
        }
        p->n = w;
        qsort(p->ivs, p->n, sizeof(*p->ivs), iv_cmp);
    }
}

/*
 * The direction (1 forward, -1 backward, 0 none) in which scanning 'idx' yields the
 * sort order of 'sort': its fields follow the key pattern (all directions equal or all
 * reversed), skipping key fields bound to one point ('eq1' bits).
 */
static int
sort_direction(const bson_t *sort, const shl_index_t *idx, uint64_t eq1)
{
    bson_iter_t si, kp;
    int dir = 0, pos = 0;
    bool have_kp;

    if (sort == NULL || !bson_iter_init(&si, sort) || !bson_iter_init(&kp, idx->key_pattern)) {
        return 0;
    }
    have_kp = shl_iter_next(&kp);
    while (shl_iter_next(&si)) {
        int sd, kd;
        if (!BSON_ITER_HOLDS_NUMBER(&si)) {
            return 0;
        }
        sd = bson_iter_as_double(&si) < 0 ? -1 : 1;
        while (have_kp && pos < 64 && (eq1 & (1ull << pos)) &&
               strcmp(shl_iter_key(&kp), shl_iter_key(&si)) != 0) {
            have_kp = shl_iter_next(&kp);
            pos++;
        }
        if (!have_kp || strcmp(shl_iter_key(&kp), shl_iter_key(&si)) != 0) {
            return 0;
        }
        kd = bson_iter_as_double(&kp) < 0 ? -1 : 1;
        if (dir == 0) {
            dir = sd * kd;
        } else if (dir != sd * kd) {
            return 0;
        }
        have_kp = shl_iter_next(&kp);
        pos++;
    }
    return dir;
}

/* Whether compound_bounds applies to 'idx': a numeric key pattern. */
static bool
compound_ok(const shl_index_t *idx)
{
    bson_iter_t kp;
    if (!bson_iter_init(&kp, idx->key_pattern)) {
        return false;
    }
    while (shl_iter_next(&kp)) {
        if (!BSON_ITER_HOLDS_NUMBER(&kp)) {
            return false;
        }
    }
    return true;
}

/* compound_ok and not multikey: every document has one key (index sort, covering,
 * COUNT_SCAN). */
static bool
plain_ok(const shl_index_t *idx)
{
    return !idx->multikey && compound_ok(idx);
}

/* explain's indexBounds: the first field's interval, full ranges for the others. */
static void
bounds_doc(const shl_index_t *idx, const char *iv, bson_t *out)
{
    bson_iter_t kp;
    bool first = true;

    bson_init(out);
    if (!bson_iter_init(&kp, idx->key_pattern)) {
        return;
    }
    while (shl_iter_next(&kp)) {
        bson_t arr;
        bool descending = BSON_ITER_HOLDS_NUMBER(&kp) && bson_iter_as_double(&kp) < 0;
        bson_append_array_begin(out, shl_iter_key(&kp), -1, &arr);
        BSON_APPEND_UTF8(&arr, "0",
                         first ? iv : (descending ? "[MaxKey, MinKey]" : "[MinKey, MaxKey]"));
        bson_append_array_end(out, &arr);
        first = false;
    }
}

/* A hidden index (collMod / createIndexes hidden: true) is maintained but invisible to
 * queries; so is a text index, whose keys are terms (only $text may use it, and does not
 * yet: docs/design/text_search.md). */
static bool
index_hidden(const shl_index_t *idx)
{
    bson_iter_t it;
    return (bson_iter_init_find(&it, idx->spec, "hidden") && bson_iter_as_bool(&it)) ||
           db_index_is_text(idx->spec);
}

/* Whether 'idx' orders strings as the query's collation 'qc' does (NULL: simple). Specs
 * are stored normalised (cmd_ddl.c), so equal collations are equal documents. */
/* What the planner passes for the query's collation when its filter compares no string:
 * then every index bounds it correctly, whatever its collation (only the order of strings
 * differs between collations). Never dereferenced. */
static const char any_collation_tag;
#define ANY_COLLATION ((const shl_collator_t *)(const void *)&any_collation_tag)

static bool
collation_matches(const shl_index_t *idx, const shl_collator_t *qc)
{
    return qc == ANY_COLLATION || shl_collator_equal(idx->collator, qc);
}

/* Whether the planner may use 'idx' for any query: not partial, sparse (their entries may
 * miss matching documents) or hidden. */
static bool
plannable(const shl_index_t *idx, const shl_collator_t *qc)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, idx->spec, "partialFilterExpression")) {
        return false;
    }
    if (bson_iter_init_find(&it, idx->spec, "sparse") && bson_iter_as_bool(&it)) {
        return false;
    }
    if (!collation_matches(idx, qc)) {
        /* Its string keys are in another order (bytes, or another collation's sort keys):
         * bounds and sort order from it would be wrong for strings. */
        return false;
    }
    return !index_hidden(idx);
}

/* The planner: the index whose first field has the most selective predicate (equality,
 * then $in, then a range; unique indexes first among equals), or NULL. */
static const shl_index_t *
plan_index(const shl_collection_t *coll, const bson_t *filter, const bson_t *sort,
           const shl_collator_t *qc, const shl_collator_t *sort_qc)
{
    const shl_index_t *best = NULL;
    int best_score = 0;

    if (bson_empty(filter)) {
        goto by_sort;
    }
    for (size_t i = 0; i < coll->nindexes; i++) {
        const shl_index_t *idx = coll->indexes[i];
        shl_keystring_t ks0, ks1;
        bool h0, h1;
        char desc[200], iv[400];
        int score;
        if (!plannable(idx, qc)) {
            continue;
        }
        if (compound_ok(idx)) {
            cb_plan_t p;
            compound_bounds(filter, idx, &p);
            score = p.bounded ? p.score * 2 + (idx->unique ? 1 : 0) : 0;
            cb_plan_cleanup(&p);
        } else {
            shl_keystring_init(&ks0);
            shl_keystring_init(&ks1);
            score =
                index_bounds(filter, idx, &ks0, &ks1, &h0, &h1, desc, sizeof(desc), iv, sizeof(iv));
            score = score > 0 ? (score * 8 + 1) * 2 + (idx->unique ? 1 : 0) : 0;
            shl_keystring_cleanup(&ks0);
            shl_keystring_cleanup(&ks1);
        }
        if (score >= 2 && score > best_score) {
            best = idx;
            best_score = score;
        }
    }
by_sort:
    /* No index bounds the filter: an index that provides the sort (a full scan). */
    for (size_t i = 0; best == NULL && sort != NULL && i < coll->nindexes; i++) {
        const shl_index_t *idx = coll->indexes[i];
        if (plannable(idx, sort_qc) && plain_ok(idx) && sort_direction(sort, idx, 0) != 0) {
            best = idx;
        }
    }
    return best;
}

/* ---------------------------------------------------------------- access path */

static int
hint_index(const shl_collection_t *coll, const bson_value_t *hint, bool hidden_ok,
           const shl_index_t **idx, int *natural, shl_status_t *st)
{
    int ret = 0;

    *idx = NULL;
    *natural = 0;
    if (hint->value_type == BSON_TYPE_UTF8) {
        if (coll != NULL) {
            char name[256];
            snprintf(name, sizeof(name), "%.*s", (int)hint->value.v_utf8.len,
                     hint->value.v_utf8.str);
            *idx = shl_collection_find_index(coll, name);
        }
    } else {
        bson_t pattern;
        bson_iter_t it;
        bson_init_static(&pattern, hint->value.v_doc.data, hint->value.v_doc.data_len);
        if (bson_iter_init_find(&it, &pattern, "$natural")) {
            *natural = bson_iter_as_int64(&it) < 0 ? -1 : 1;
            if (!BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_int64(&it) == 0) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$natural hint must be 1 or -1");
            }
            goto done;
        }
        if (coll != NULL) {
            *idx = shl_collection_find_index_by_key(coll, &pattern);
        }
    }
    if (*idx != NULL && !hidden_ok && index_hidden(*idx)) {
        *idx = NULL; /* invisible to queries, hints included */
    }
    if (*idx == NULL && coll != NULL) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "error processing query: planner returned error :: caused by :: hint "
                 "provided does not correspond to an existing index");
    }
done:
    return ret;
}

/* The matcher to run per document, NULL when it matches everything. */
/* The filter index bounds are computed from: under a collation, its strings as collation
 * keys (what a collated index holds); NULL when no index can bound it (a regex under a
 * collation: its prefix bounds are byte ranges). */
static const bson_t *
plan_filter(const exec_query_t *q)
{
    if (q->has_text) {
        return NULL; /* TODO(20): a TEXT scan of the text index */
    }
    if (q->collator == NULL) {
        return &q->filter;
    }
    return q->plan_no_index ? NULL : q->plan_filter;
}

static const shl_matcher_t *
effective_filter(const exec_query_t *q)
{
    return q->matcher != NULL && !shl_matcher_is_trivial(q->matcher) ? q->matcher : NULL;
}

/* ---------------------------------------------------------------- candidate plans */

/* The IXSCAN of 'idx' for 'filter' (its bounds), in 'sort''s direction when the index
 * provides it (*sorted). */
static exec_stage_t *
index_scan(const shl_index_t *idx, const bson_t *filter, const bson_t *sort, bool *sorted)
{
    exec_stage_t *ix = NULL;

    *sorted = false;
    if (compound_ok(idx)) {
        cb_plan_t p;
        static const uint8_t none = 0;
        int dir;
        compound_bounds(filter, idx, &p);
        dir = sort != NULL && !idx->multikey ? sort_direction(sort, idx, p.eq1) : 0;
        *sorted = dir != 0;
        if (!p.bounded) {
            ix = exec_ixscan_new(idx, NULL, NULL, dir >= 0, "[MinKey, MaxKey]");
        } else if (p.n == 0) {
            /* Contradictory ranges: an empty interval. */
            shl_key_bound_t b = {&none, 1};
            ix = exec_ixscan_new(idx, &b, &b, true, "empty");
        } else {
            /* Intervals are in key order: a backward scan takes them last to first. */
            for (size_t j = 0; j < p.n; j++) {
                const cb_interval_t *t = &p.ivs[dir < 0 ? p.n - 1 - j : j];
                shl_key_bound_t c0 = {t->start.data, t->start.len};
                shl_key_bound_t c1 = {t->end.data, t->end.len};
                if (j == 0) {
                    ix = exec_ixscan_new(idx, &c0, &c1, dir >= 0, "compound");
                } else {
                    exec_ixscan_add_interval(ix, &c0, &c1);
                }
            }
        }
        exec_ixscan_set_bounds(ix, &p.bounds);
        cb_plan_cleanup(&p);
    } else {
        shl_keystring_t ks0, ks1;
        bool has0 = false, has1 = false;
        char desc[200] = "[MinKey, MaxKey]", iv[400];
        bson_t bounds;

        shl_keystring_init(&ks0);
        shl_keystring_init(&ks1);
        index_bounds(filter, idx, &ks0, &ks1, &has0, &has1, desc, sizeof(desc), iv, sizeof(iv));
        {
            shl_key_bound_t b0 = {has0 ? ks0.data : NULL, ks0.len};
            shl_key_bound_t b1 = {has1 ? ks1.data : NULL, ks1.len};
            ix = exec_ixscan_new(idx, &b0, &b1, true, desc);
        }
        bounds_doc(idx, iv, &bounds);
        exec_ixscan_set_bounds(ix, &bounds);
        bson_destroy(&bounds);
        shl_keystring_cleanup(&ks0);
        shl_keystring_cleanup(&ks1);
    }
    return ix;
}

/* The planner's estimate for 'idx' over 'filter' (0: its bounds do not restrict the scan):
 * the first field's kind, then the bounded fields, unique first among equals. */
static int
index_score(const shl_index_t *idx, const bson_t *filter, const shl_collator_t *qc)
{
    int score;
    if (!plannable(idx, qc) || bson_empty(filter)) {
        return 0;
    }
    if (compound_ok(idx)) {
        cb_plan_t p;
        compound_bounds(filter, idx, &p);
        score = p.bounded ? p.score * 2 + (idx->unique ? 1 : 0) : 0;
        cb_plan_cleanup(&p);
    } else {
        shl_keystring_t ks0, ks1;
        bool h0, h1;
        char desc[200], iv[400];
        shl_keystring_init(&ks0);
        shl_keystring_init(&ks1);
        score = index_bounds(filter, idx, &ks0, &ks1, &h0, &h1, desc, sizeof(desc), iv, sizeof(iv));
        score = score > 0 ? (score * 8 + 1) * 2 + (idx->unique ? 1 : 0) : 0;
        shl_keystring_cleanup(&ks0);
        shl_keystring_cleanup(&ks1);
    }
    return score >= 2 ? score : 0;
}

#define OR_MAX_BRANCHES 64
#define MAX_CANDIDATES 8

/* A top-level $or whose every branch (a document) has an index that bounds it: the
 * branches (views into 'filter') and their indexes. */
typedef struct or_plan {
    size_t n;
    bson_t branch[OR_MAX_BRANCHES];
    const shl_index_t *idx[OR_MAX_BRANCHES];
} or_plan_t;

static bool
or_plan_find(const shl_collection_t *coll, const bson_t *filter, or_plan_t *o,
             const shl_collator_t *qc)
{
    bson_iter_t it, el;

    o->n = 0;
    if (!bson_iter_init_find(&it, filter, "$or") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &el)) {
        return false;
    }
    while (shl_iter_next(&el)) {
        const uint8_t *d;
        uint32_t l;
        const shl_index_t *best = NULL;
        int best_score = 0;
        if (o->n == OR_MAX_BRANCHES || !BSON_ITER_HOLDS_DOCUMENT(&el)) {
            return false;
        }
        bson_iter_document(&el, &l, &d);
        if (!bson_init_static(&o->branch[o->n], d, l) || bson_empty(&o->branch[o->n])) {
            return false;
        }
        for (size_t i = 0; i < coll->nindexes; i++) {
            int sc = index_score(coll->indexes[i], &o->branch[o->n], qc);
            if (sc > best_score) {
                best = coll->indexes[i];
                best_score = sc;
            }
        }
        if (best == NULL) {
            return false;
        }
        o->idx[o->n++] = best;
    }
    return o->n > 0;
}

/* Top-level fields of a numeric, non-multikey key pattern: *n of them into 'fields'. */
static bool
index_fields(const shl_index_t *idx, const char **fields, size_t max, size_t *n)
{
    bson_iter_t kp;
    *n = 0;
    if (!plain_ok(idx) || !bson_iter_init(&kp, idx->key_pattern)) {
        return false;
    }
    while (shl_iter_next(&kp)) {
        if (*n == max || strchr(shl_iter_key(&kp), '.') != NULL) {
            return false;
        }
        fields[(*n)++] = shl_iter_key(&kp);
    }
    return *n > 0;
}

static bool
in_fields(const char *f, const char *const *fields, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(fields[i], f) == 0) {
            return true;
        }
    }
    return false;
}

/* Whether 'filter' can run on a document of the index fields alone: comparisons of
 * those fields with plain values other than null, under $and/$or/$nor. (MongoDB does
 * not cover a null comparison: the key cannot tell null from missing. A null key value
 * met otherwise makes PROJECTION_COVERED read the record.) */
static bool
filter_on_fields(const bson_t *filter, const char *const *fields, size_t n, int depth)
{
    bson_iter_t it;
    if (depth > 8 || !bson_iter_init(&it, filter)) {
        return false;
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "$and") == 0 || strcmp(k, "$or") == 0 || strcmp(k, "$nor") == 0) {
            bson_iter_t el;
            if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &el)) {
                return false;
            }
            while (shl_iter_next(&el)) {
                const uint8_t *d;
                uint32_t l;
                bson_t sub;
                if (!BSON_ITER_HOLDS_DOCUMENT(&el)) {
                    return false;
                }
                bson_iter_document(&el, &l, &d);
                if (!bson_init_static(&sub, d, l) ||
                    !filter_on_fields(&sub, fields, n, depth + 1)) {
                    return false;
                }
            }
            continue;
        }
        if (!in_fields(k, fields, n)) {
            return false;
        }
        if (is_operator_doc(&it)) {
            bson_iter_t sub;
            bson_iter_recurse(&it, &sub);
            while (shl_iter_next(&sub)) {
                const char *op = shl_iter_key(&sub);
                if (op_kind(op) != B_NONE || strcmp(op, "$ne") == 0) {
                    if (!boundable(&sub) || BSON_ITER_HOLDS_NULL(&sub)) {
                        return false;
                    }
                } else if (strcmp(op, "$in") == 0 || strcmp(op, "$nin") == 0) {
                    bson_iter_t vals;
                    if (!BSON_ITER_HOLDS_ARRAY(&sub) || !bson_iter_recurse(&sub, &vals)) {
                        return false;
                    }
                    while (shl_iter_next(&vals)) {
                        if (!boundable(&vals) || BSON_ITER_HOLDS_NULL(&vals)) {
                            return false;
                        }
                    }
                } else {
                    return false;
                }
            }
        } else if (!boundable(&it) || BSON_ITER_HOLDS_NULL(&it)) {
            return false;
        }
    }
    return true;
}

/* Whether q's projection and filter need only the fields of 'idx' (covered). */
static bool
coverable(const exec_query_t *q, const shl_index_t *idx, bool sorted)
{
    const char *fields[32];
    size_t n;
    bson_iter_t it;
    bool id_listed = false, id_included = true, any = false;

    if (!q->has_projection || q->orphan_filter != NULL || q->count_only || q->has_text ||
        (q->has_sort && !sorted) || !index_fields(idx, fields, 32, &n) ||
        !bson_iter_init(&it, &q->projection)) {
        return false;
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bool on;
        if (!(BSON_ITER_HOLDS_NUMBER(&it) || BSON_ITER_HOLDS_BOOL(&it))) {
            return false;
        }
        on = bson_iter_as_bool(&it);
        if (strcmp(k, "_id") == 0) {
            id_listed = true;
            id_included = on;
        } else if (!on || !in_fields(k, fields, n)) {
            return false;
        } else {
            any = true;
        }
    }
    (void)id_listed;
    if (id_included && !in_fields("_id", fields, n)) {
        return false;
    }
    if (!any && !(id_listed && id_included)) {
        return false; /* {_id: 0} alone excludes: every other field */
    }
    return filter_on_fields(&q->filter, fields, n, 0);
}

/* One candidate: an index scan (idx) or the OR plan (idx NULL). */
typedef struct cand {
    const shl_index_t *idx;
    int score;
} cand_t;

/* Build the stages of candidate 'c' (with FETCH, or PROJECTION_COVERED). */
static exec_stage_t *
cand_build(const shl_collection_t *coll, const exec_query_t *q, const cand_t *c, const or_plan_t *o,
           const shl_matcher_t *filter, bool *sorted, bool *covered)
{
    exec_stage_t *root;
    *sorted = *covered = false;
    if (c->idx == NULL) {
        exec_stage_t *kids[OR_MAX_BRANCHES];
        bool s;
        for (size_t i = 0; i < o->n; i++) {
            kids[i] = index_scan(o->idx[i], &o->branch[i], NULL, &s);
        }
        return exec_fetch_new(exec_or_new(kids, o->n), coll, filter);
    }
    if (plan_filter(q) != NULL && collation_matches(c->idx, q->collator)) {
        root = index_scan(c->idx, plan_filter(q), q->has_sort ? &q->sort : NULL, sorted);
    } else if (q->string_free) {
        /* Bounds without strings hold in any collation; the order of strings does not. */
        root = index_scan(c->idx, &q->filter, NULL, sorted);
        *sorted = false;
    } else {
        /* A hinted index of another collation: its whole range, in no useful order. */
        bson_t all = BSON_INITIALIZER;
        root = index_scan(c->idx, &all, NULL, sorted);
        *sorted = false;
    }
    /* A collated index holds comparison keys, not values: it covers nothing. */
    if (q->collator == NULL && collation_matches(c->idx, NULL) && coverable(q, c->idx, *sorted)) {
        *covered = true;
        return exec_projection_covered_new(root, coll, c->idx, q->proj, &q->projection, filter);
    }
    return exec_fetch_new(root, coll, filter);
}

/* What a candidate did in its trial: the works (keys examined) at each of its first 101
 * results, and at its end (-1: cut by the budget). */
typedef struct trial {
    int64_t adv_works[101];
    int64_t nadv, total, eof_works;
    bool blocking; /* a SORT would sit on top: nothing comes out before the end */
    bool no_fetch;
} trial_t;

#define TRIAL_WORKS 10000

/* Run 'root' for a trial in 'ctx' (up to 101 results, or its end behind a blocking sort,
 * or TRIAL_WORKS works). */
static int
trial_run(exec_stage_t *root, exec_ctx_t *ctx, trial_t *t, shl_status_t *st)
{
    int ret = 0;
    int64_t works = TRIAL_WORKS;

    t->nadv = t->total = 0;
    t->eof_works = -1;
    exec_trial_set(&works);
    while (t->nadv < 101 || t->blocking) {
        exec_row_t row;
        bool end = false;
        SHL_ERR(exec_stage_next(root, ctx, &row, &end, st));
        if (end) {
            if (!exec_trial_cut()) {
                t->eof_works = TRIAL_WORKS - works + 1;
            }
            break;
        }
        if (t->nadv < 101) {
            t->adv_works[t->nadv++] = TRIAL_WORKS - works + 1;
        }
        t->total++;
    }
done:
    exec_trial_set(NULL);
    return ret;
}

/* When a round-robin trial (MongoDB's) would have stopped: the first candidate to reach
 * 101 results or its end. */
static int64_t
trial_stop(const trial_t *t)
{
    int64_t w = TRIAL_WORKS;
    if (t->eof_works >= 0) {
        w = t->eof_works;
    }
    if (!t->blocking && t->nadv == 101 && t->adv_works[100] < w) {
        w = t->adv_works[100];
    }
    return w;
}

/* MongoDB's score of a candidate stopped after 'w' works: 1 + advanced/works, +1 at its
 * end, +1e-4 without SORT, +1e-4 without FETCH. */
static double
trial_score(const trial_t *t, int64_t w, bool has_sort)
{
    int64_t adv = 0;
    bool eof = t->eof_works >= 0 && t->eof_works <= w;
    if (t->blocking) {
        adv = eof ? (t->total < 101 ? t->total : 101) : 0;
    } else {
        while (adv < t->nadv && t->adv_works[adv] <= w) {
            adv++;
        }
    }
    return 1.0 + (double)adv / (double)(w > 0 ? w : 1) + (eof ? 1.0 : 0.0) +
           (!has_sort || !t->blocking ? 1e-4 : 0) + (t->no_fetch ? 1e-4 : 0);
}

static int
cand_cmp(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    return y->score - x->score;
}

/* ---------------------------------------------------------------- COUNT_SCAN */

/* Whether 'v' is a range end COUNT_SCAN can bound exactly: an int, long or double (not
 * NaN), a string or a date; *bracket says which. */
static bool
range_value(const bson_value_t *v, int *bracket)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
        *bracket = 1;
        return true;
    case BSON_TYPE_DOUBLE:
        *bracket = 1;
        return v->value.v_double == v->value.v_double;
    case BSON_TYPE_UTF8:
        *bracket = 2;
        return true;
    case BSON_TYPE_DATE_TIME:
        *bracket = 3;
        return true;
    default:
        return false;
    }
}

typedef struct cs_pred {
    const char *field;
    bool point, used;
    bson_value_t v;      /* the point */
    bool has_lo, has_hi; /* a range */
    bool lo_incl, hi_incl;
    bson_value_t lo, hi;
} cs_pred_t;

/* One field's predicate in COUNT_SCAN's terms; false when not exact. */
static bool
cs_parse(const bson_iter_t *it, cs_pred_t *p)
{
    bson_iter_t sub;
    int b0 = 0, b1 = 0;

    memset(p, 0, sizeof(*p));
    p->field = shl_iter_key(it);
    if (!is_operator_doc(it)) {
        if (!boundable(it) || BSON_ITER_HOLDS_NULL(it) || BSON_ITER_HOLDS_UNDEFINED(it)) {
            return false;
        }
        p->point = true;
        bson_iter_t c = *it;
        p->v = *bson_iter_value(&c);
        return true;
    }
    bson_iter_recurse(it, &sub);
    while (shl_iter_next(&sub)) {
        int k = op_kind(shl_iter_key(&sub));
        if (k == B_NONE || !boundable(&sub) || BSON_ITER_HOLDS_NULL(&sub) ||
            BSON_ITER_HOLDS_UNDEFINED(&sub)) {
            return false;
        }
        if (k == B_EQ) {
            if (p->point || p->has_lo || p->has_hi) {
                return false;
            }
            p->point = true;
            p->v = *bson_iter_value(&sub);
        } else if (p->point) {
            return false;
        } else if (k == B_GT || k == B_GTE) {
            if (p->has_lo || !range_value(bson_iter_value(&sub), &b0)) {
                return false;
            }
            p->has_lo = true;
            p->lo_incl = k == B_GTE;
            p->lo = *bson_iter_value(&sub);
        } else {
            if (p->has_hi || !range_value(bson_iter_value(&sub), &b1)) {
                return false;
            }
            p->has_hi = true;
            p->hi_incl = k == B_LTE;
            p->hi = *bson_iter_value(&sub);
        }
    }
    if (p->point) {
        return true;
    }
    /* One-sided: numbers only, closed by an infinity (NaN sorts below every number). */
    if (p->has_lo && p->has_hi) {
        return b0 == b1;
    }
    if (p->has_lo && b0 == 1) {
        p->has_hi = p->hi_incl = true;
        p->hi.value_type = BSON_TYPE_DOUBLE;
        p->hi.value.v_double = 1.0 / 0.0;
        return true;
    }
    if (p->has_hi && b1 == 1) {
        p->has_lo = p->lo_incl = true;
        p->lo.value_type = BSON_TYPE_DOUBLE;
        p->lo.value.v_double = -1.0 / 0.0;
        return true;
    }
    return false;
}

static void
append_bound_value(bson_t *d, const char *field, const bson_value_t *v, bool min)
{
    if (v != NULL) {
        bson_append_value(d, field, -1, v);
    } else if (min) {
        bson_append_minkey(d, field, -1);
    } else {
        bson_append_maxkey(d, field, -1);
    }
}

/* A single interval of 'idx' holding exactly the entries of documents matching
 * 'filter' (equalities on a key prefix, then at most one range); explain's bounds. */
static bool
count_scan_bounds(const bson_t *filter, const shl_index_t *idx, shl_keystring_t *start,
                  shl_keystring_t *end, bson_t *bounds)
{
    cs_pred_t preds[32];
    size_t np = 0, used = 0;
    bson_iter_t it, kp;
    bson_t sk, ek;
    bool range = false, after = false, ok = true, lo_incl = true, hi_incl = true;

    if (!plannable(idx, NULL) || !plain_ok(idx) || bson_empty(filter) ||
        !bson_iter_init(&it, filter)) {
        return false;
    }
    while (shl_iter_next(&it)) {
        if (np == 32 || shl_iter_key(&it)[0] == '$' || !cs_parse(&it, &preds[np])) {
            return false;
        }
        for (size_t i = 0; i < np; i++) {
            if (strcmp(preds[i].field, preds[np].field) == 0) {
                return false;
            }
        }
        np++;
    }
    bson_init(&sk);
    bson_init(&ek);
    bson_iter_init(&kp, idx->key_pattern);
    while (ok && shl_iter_next(&kp)) {
        const char *f = shl_iter_key(&kp);
        bool desc = bson_iter_as_double(&kp) < 0;
        cs_pred_t *p = NULL;
        for (size_t i = 0; i < np; i++) {
            if (strcmp(preds[i].field, f) == 0) {
                p = &preds[i];
            }
        }
        if (p != NULL && (range || after)) {
            ok = false;
        } else if (p == NULL) {
            after = true;
            append_bound_value(&sk, f, NULL, !desc);
            append_bound_value(&ek, f, NULL, desc);
        } else if (p->point) {
            shl_keystring_append_value(start, &p->v, desc);
            shl_keystring_append_value(end, &p->v, desc);
            append_bound_value(&sk, f, &p->v, true);
            append_bound_value(&ek, f, &p->v, true);
            used++;
        } else {
            /* The low value starts an ascending field and ends a descending one. */
            const bson_value_t *a = desc ? &p->hi : &p->lo, *b = desc ? &p->lo : &p->hi;
            bool a_incl = desc ? p->hi_incl : p->lo_incl, b_incl = desc ? p->lo_incl : p->hi_incl;
            shl_keystring_append_value(start, a, desc);
            if (!a_incl) {
                shl_keystring_append_max_suffix(start);
            }
            shl_keystring_append_value(end, b, desc);
            if (b_incl) {
                shl_keystring_append_max_suffix(end);
            }
            append_bound_value(&sk, f, a, true);
            append_bound_value(&ek, f, b, true);
            lo_incl = a_incl;
            hi_incl = b_incl;
            range = true;
            used++;
        }
    }
    if (ok && used == np) {
        if (!range) {
            shl_keystring_append_max_suffix(end);
        }
        BSON_APPEND_DOCUMENT(bounds, "startKey", &sk);
        BSON_APPEND_BOOL(bounds, "startKeyInclusive", lo_incl);
        BSON_APPEND_DOCUMENT(bounds, "endKey", &ek);
        BSON_APPEND_BOOL(bounds, "endKeyInclusive", hi_incl);
    }
    bson_destroy(&sk);
    bson_destroy(&ek);
    return ok && used == np;
}

/* A COUNT_SCAN for a count_only query, or NULL. */
static exec_stage_t *
count_scan(const shl_collection_t *coll, const exec_query_t *q, const shl_index_t *hinted)
{
    exec_stage_t *out = NULL;
    if (!q->count_only || q->orphan_filter != NULL || coll->is_oplog || q->has_text) {
        return NULL;
    }
    for (size_t i = 0; out == NULL && i < coll->nindexes; i++) {
        const shl_index_t *idx = coll->indexes[i];
        shl_keystring_t ks0, ks1;
        bson_t bounds = BSON_INITIALIZER;
        if (hinted != NULL && idx != hinted) {
            continue;
        }
        shl_keystring_init(&ks0);
        shl_keystring_init(&ks1);
        if (count_scan_bounds(&q->filter, idx, &ks0, &ks1, &bounds)) {
            shl_key_bound_t b0 = {ks0.data, ks0.len}, b1 = {ks1.data, ks1.len};
            out = exec_count_scan_new(idx, &b0, &b1, &bounds);
        }
        bson_destroy(&bounds);
        shl_keystring_cleanup(&ks0);
        shl_keystring_cleanup(&ks1);
    }
    return out;
}

/* ---------------------------------------------------------------- min / max */

/* Whether 'bound' names exactly the key pattern's fields, in its order. */
static bool
minmax_fits(const bson_t *bound, const bson_t *pattern)
{
    bson_iter_t a, b;
    bool more_a, more_b;
    if (!bson_iter_init(&a, bound) || !bson_iter_init(&b, pattern)) {
        return false;
    }
    for (;;) {
        more_a = shl_iter_next(&a);
        more_b = shl_iter_next(&b);
        if (!more_a || !more_b) {
            return more_a == more_b;
        }
        if (strcmp(shl_iter_key(&a), shl_iter_key(&b)) != 0) {
            return false;
        }
    }
}

/* The KeyString of a min/max bound; an absent one is every field's lowest ('high': highest)
 * value in the index order, as MongoDB finishes it. */
static void
minmax_key(const bson_t *bound, bool has, const bson_t *pattern, bool high, shl_keystring_t *ks)
{
    bson_iter_t kp, v;
    bool more_v = has && bson_iter_init(&v, bound);
    if (!bson_iter_init(&kp, pattern)) {
        return;
    }
    while (shl_iter_next(&kp)) {
        bool desc = BSON_ITER_HOLDS_NUMBER(&kp) && bson_iter_as_double(&kp) < 0;
        more_v = more_v && shl_iter_next(&v);
        if (more_v) {
            shl_keystring_append_iter(ks, &v, desc);
        } else {
            bson_value_t e;
            /* Descending fields invert their bytes: MaxKey is their lowest. */
            e.value_type = (high != desc) ? BSON_TYPE_MAXKEY : BSON_TYPE_MINKEY;
            shl_keystring_append_value(ks, &e, desc);
        }
    }
}

/* The access path of a find with min and/or max: the hinted index over [min, max). */
static int
minmax_scan(const shl_collection_t *coll, const exec_query_t *q, const shl_index_t *idx,
            int natural, exec_stage_t **out, shl_status_t *st)
{
    int ret = 0;
    shl_keystring_t lo, hi;

    shl_keystring_init(&lo);
    shl_keystring_init(&hi);
    *out = NULL;
    if (coll == NULL) {
        /* A missing collection plans nothing (EOF), so nothing fails. */
        *out = exec_eof_new();
        goto done;
    }
    if (!q->has_hint) {
        SHL_FAIL(st, 51173,
                 "error processing query: planner returned error :: caused by :: When using "
                 "min()/max() a hint of which index to use must be provided");
    }
    if (natural != 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "error processing query: planner returned error :: caused by :: min and max "
                 "are incompatible with $natural");
    }
    if ((q->has_min && !minmax_fits(&q->min, idx->key_pattern)) ||
        (q->has_max && !minmax_fits(&q->max, idx->key_pattern))) {
        SHL_FAIL(st, 51174,
                 "error processing query: planner returned error :: caused by :: The index "
                 "chosen is not compatible with min/max");
    }
    minmax_key(&q->min, q->has_min, idx->key_pattern, false, &lo);
    minmax_key(&q->max, q->has_max, idx->key_pattern, true, &hi);
    if (shl_keystring_compare(lo.data, lo.len, hi.data, hi.len) >= 0) {
        SHL_FAIL(st, 51175,
                 "error processing query: planner returned error :: caused by :: The value "
                 "provided for min() does not come before the value provided for max() in the "
                 "hinted index");
    }
    {
        shl_key_bound_t b0 = {lo.data, lo.len}, b1 = {hi.data, hi.len};
        bson_t bounds = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(&bounds, "min", q->has_min ? &q->min : &(bson_t)BSON_INITIALIZER);
        BSON_APPEND_DOCUMENT(&bounds, "max", q->has_max ? &q->max : &(bson_t)BSON_INITIALIZER);
        *out = exec_ixscan_new(idx, &b0, q->has_max ? &b1 : NULL, true, "min/max");
        exec_ixscan_set_bounds(*out, &bounds);
        bson_destroy(&bounds);
        *out = exec_fetch_new(*out, coll, effective_filter(q));
    }
done:
    shl_keystring_cleanup(&lo);
    shl_keystring_cleanup(&hi);
    return ret;
}

static bool
id_holds_string(const bson_value_t *v)
{
    bson_iter_t it;
    if (v->value_type == BSON_TYPE_UTF8 || v->value_type == BSON_TYPE_SYMBOL) {
        return true;
    }
    if ((v->value_type != BSON_TYPE_DOCUMENT && v->value_type != BSON_TYPE_ARRAY) ||
        !bson_iter_init_from_data(&it, v->value.v_doc.data, v->value.v_doc.data_len)) {
        return false;
    }
    while (shl_iter_next(&it)) {
        if (id_holds_string(bson_iter_value(&it))) {
            return true;
        }
    }
    return false;
}

int
exec_access_select(const shl_collection_t *coll, const exec_query_t *q, exec_ctx_t *trial,
                   exec_stage_t **out, exec_access_kind_t *kind, bool *sorted, bool *covered,
                   bson_t *rejected, shl_status_t *st)
{
    int ret = 0;
    const shl_index_t *idx = NULL;
    int natural = 0;
    const bson_t *pf = plan_filter(q);
    const shl_collator_t *bounds_qc =
        q->string_free ? ANY_COLLATION : q->collator; /* see ANY_COLLATION */
    /* {_id: v} is a point lookup unless a string in v compares differently under the _id
     * index's collation than under the query's. */
    bool id_point = q->id_point && coll != NULL &&
                    (coll->nindexes == 0 || collation_matches(coll->indexes[0], q->collator) ||
                     !id_holds_string(&q->id_value));
    cand_t cands[MAX_CANDIDATES];
    size_t ncands = 0;
    or_plan_t *orp = NULL;
    exec_stage_t *trial_root = NULL;

    *out = NULL;
    *sorted = false;
    *covered = false;
    if (q->has_hint) {
        SHL_ERR(hint_index(coll, &q->hint, q->hint_hidden_ok, &idx, &natural, st));
    }
    if (q->has_min || q->has_max) {
        SHL_ERR(minmax_scan(coll, q, idx, natural, out, st));
        *kind = coll == NULL ? EXEC_ACCESS_EOF : EXEC_ACCESS_IXSCAN;
        goto done;
    }
    if (coll != NULL && natural == 0 && !coll->is_oplog && (idx != NULL || !id_point) &&
        q->collator == NULL) {
        exec_stage_t *cs = count_scan(coll, q, idx);
        if (cs != NULL) {
            *kind = EXEC_ACCESS_COUNT_SCAN;
            *out = cs;
            goto done;
        }
    }
    if (coll != NULL && idx == NULL && natural == 0 && !coll->is_oplog &&
        !(id_point && coll->nindexes > 0) && pf != NULL) {
        /* Candidates: every index that bounds the filter, and an OR of index scans. */
        cand_t all[64];
        size_t nall = 0;
        for (size_t i = 0; i < coll->nindexes && nall < 64; i++) {
            int sc = index_score(coll->indexes[i], pf, bounds_qc);
            if (sc > 0) {
                all[nall].idx = coll->indexes[i];
                all[nall++].score = sc;
            }
        }
        /* Best estimate first; ties keep catalog order (qsort is not stable). */
        for (size_t a = 1; a < nall; a++) {
            for (size_t b = a; b > 0 && cand_cmp(&all[b - 1], &all[b]) > 0; b--) {
                cand_t t = all[b];
                all[b] = all[b - 1];
                all[b - 1] = t;
            }
        }
        for (size_t i = 0; i < nall && ncands < MAX_CANDIDATES - 1; i++) {
            cands[ncands++] = all[i];
        }
        orp = bson_aligned_alloc0(BSON_ALIGNOF(or_plan_t), sizeof(*orp));
        if (or_plan_find(coll, pf, orp, bounds_qc)) {
            cands[ncands].idx = NULL;
            cands[ncands++].score = 0;
        }
        /* With other candidates, an index that gives the sort (a full scan) competes too:
         * it streams, where the others wait behind a blocking SORT. */
        for (size_t i = 0; ncands > 0 && q->has_sort && i < coll->nindexes; i++) {
            const shl_index_t *six = coll->indexes[i];
            bool have = false;
            for (size_t j = 0; j < ncands; j++) {
                have = have || cands[j].idx == six;
            }
            if (!have && ncands < MAX_CANDIDATES && plannable(six, q->collator) && plain_ok(six) &&
                sort_direction(&q->sort, six, 0) != 0) {
                cands[ncands].idx = six;
                cands[ncands++].score = 0;
                break;
            }
        }
        if (ncands == 0) {
            idx = plan_index(coll, pf, q->has_sort ? &q->sort : NULL, bounds_qc, q->collator);
        }
    }
    if (coll == NULL) {
        *kind = EXEC_ACCESS_EOF;
        *out = exec_eof_new();
    } else if (idx != NULL) {
        cand_t c = {idx, 0};
        *out = cand_build(coll, q, &c, NULL, effective_filter(q), sorted, covered);
        *kind = EXEC_ACCESS_IXSCAN;
    } else if (ncands > 0) {
        size_t win = 0;
        if (ncands > 1 && trial != NULL) {
            double best = -1;
            int64_t w = TRIAL_WORKS;
            trial_t *tr = bson_malloc0(ncands * sizeof(*tr));
            for (size_t i = 0; ret == 0 && i < ncands; i++) {
                bool s, cov;
                trial_root = cand_build(coll, q, &cands[i], orp, effective_filter(q), &s, &cov);
                tr[i].blocking = q->has_sort && !s;
                tr[i].no_fetch = cov;
                ret = trial_run(trial_root, trial, &tr[i], st);
                exec_stage_destroy(trial_root);
                trial_root = NULL;
                if (trial_stop(&tr[i]) < w) {
                    w = trial_stop(&tr[i]);
                }
            }
            for (size_t i = 0; ret == 0 && i < ncands; i++) {
                double sc = trial_score(&tr[i], w, q->has_sort);
                if (sc > best) {
                    best = sc;
                    win = i;
                }
            }
            bson_free(tr);
            SHL_ERR(ret);
            for (size_t i = 0; rejected != NULL && i < ncands; i++) {
                bool s, cov;
                bson_t doc;
                char k[16];
                const char *key;
                uint32_t nrej = 0;
                if (i == win) {
                    continue;
                }
                nrej = (uint32_t)(i < win ? i : i - 1);
                trial_root = cand_build(coll, q, &cands[i], orp, effective_filter(q), &s, &cov);
                bson_uint32_to_string(nrej, &key, k, sizeof(k));
                bson_append_document_begin(rejected, key, -1, &doc);
                exec_stage_explain(trial_root, false, &doc);
                bson_append_document_end(rejected, &doc);
                exec_stage_destroy(trial_root);
                trial_root = NULL;
            }
        }
        *out = cand_build(coll, q, &cands[win], orp, effective_filter(q), sorted, covered);
        *kind = cands[win].idx == NULL ? EXEC_ACCESS_OR : EXEC_ACCESS_IXSCAN;
    } else if (id_point && natural == 0 && !coll->is_oplog && coll->nindexes > 0) {
        *kind = EXEC_ACCESS_IDHACK;
        *out = exec_idhack_new(coll, &q->id_value);
    } else {
        int64_t min_rid = 0;
        if (coll->is_oplog) {
            /* The oplog is keyed by ts: start a scan at {ts: {$gt|$gte: T}} directly. */
            bson_iter_t it, sub;
            if (bson_iter_init_find(&it, &q->filter, "ts") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
                bson_iter_recurse(&it, &sub)) {
                while (shl_iter_next(&sub)) {
                    if (BSON_ITER_HOLDS_TIMESTAMP(&sub)) {
                        uint32_t t, i;
                        bson_iter_timestamp(&sub, &t, &i);
                        if (strcmp(shl_iter_key(&sub), "$gte") == 0 ||
                            strcmp(shl_iter_key(&sub), "$eq") == 0) {
                            min_rid = (int64_t)SHL_TS_MAKE(t, i);
                        } else if (strcmp(shl_iter_key(&sub), "$gt") == 0) {
                            min_rid = (int64_t)SHL_TS_MAKE(t, i) + 1;
                        }
                    }
                }
            }
            if (natural < 0) {
                min_rid = 0;
            }
        }
        *kind = EXEC_ACCESS_COLLSCAN;
        *out = exec_collscan_new(coll, natural >= 0, effective_filter(q), min_rid);
    }
done:
    exec_stage_destroy(trial_root);
    bson_free(orp);
    return ret;
}
