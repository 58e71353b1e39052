/*
 * exec_access.c -- parsing a find-like query and choosing its access path: the seam
 * the planner of issue 4 replaces. Today: _id equality -> IDHACK; a hint -> IXSCAN over
 * that index (bounds from simple predicates on its first field) + FETCH; else COLLSCAN.
 */
#include "db/exec.h"

#include <string.h>

#include "bson/bson_hash.h"
#include "bson/bson_util.h"
#include "bson/keystring.h"

static bool
is_operator_doc(const bson_iter_t *it)
{
    bson_iter_t sub;
    return BSON_ITER_HOLDS_DOCUMENT(it) && bson_iter_recurse(it, &sub) && bson_iter_next(&sub) &&
           bson_iter_key(&sub)[0] == '$';
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
    if (!bson_iter_init(&it, filter) || !bson_iter_next(&it) ||
        strcmp(bson_iter_key(&it), "_id") != 0) {
        return false;
    }
    {
        bson_iter_t v = it;
        if (bson_iter_next(&it)) {
            return false; /* more than one field */
        }
        if (is_operator_doc(&v)) {
            bson_iter_t sub;
            bson_iter_recurse(&v, &sub);
            bson_iter_next(&sub);
            if (strcmp(bson_iter_key(&sub), "$eq") != 0 || !boundable(&sub)) {
                return false;
            }
            {
                bson_iter_t more = sub;
                if (bson_iter_next(&more)) {
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
    q->id_point = id_point_filter(&q->filter, &q->id_value);
    SHL_ERR(shl_matcher_new(&q->filter, SHL_MATCHER_DEFAULT, &q->matcher, st));
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
    q->matcher = NULL;
    q->sort_pattern = NULL;
    q->proj = NULL;
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

void
exec_bounds_for_field(const bson_t *filter, const char *field, bool descending,
                      struct shl_keystring *start, struct shl_keystring *end, bool *has_start,
                      bool *has_end, char *desc, size_t desc_len)
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
        while (bson_iter_next(&sub)) {
            int k = op_kind(bson_iter_key(&sub));
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
        char *vs = shl_bson_value_to_string(&val);
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
        while (!found && bson_iter_next(&sub)) {
            if (strcmp(bson_iter_key(&sub), "$eq") == 0 && boundable(&sub)) {
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
          shl_keystring_t *end, char *desc, size_t desc_len)
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
    while (ok && bson_iter_next(&vals)) {
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
        char *a = shl_bson_value_to_string(&lo), *b = shl_bson_value_to_string(&hi);
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
    if (!bson_iter_init(&kp, idx->key_pattern) || !bson_iter_next(&kp)) {
        return 0;
    }
    if (BSON_ITER_HOLDS_UTF8(&kp)) {
        hashed_bounds(filter, bson_iter_key(&kp), ks0, ks1, has0, has1, desc, desc_len);
        if (*has0) {
            snprintf(iv, iv_len, "%s", desc);
        }
        return *has0 ? 3 : 0;
    }
    {
        bool descending = BSON_ITER_HOLDS_NUMBER(&kp) && bson_iter_as_double(&kp) < 0;
        exec_bounds_for_field(filter, bson_iter_key(&kp), descending, ks0, ks1, has0, has1, desc,
                              desc_len);
        interval_from_desc(bson_iter_key(&kp), desc, descending, iv, iv_len);
        if (*has0 && *has1) {
            return 3;
        }
        if (!*has0 && !*has1 &&
            in_bounds(filter, bson_iter_key(&kp), descending, ks0, ks1, iv, iv_len)) {
            *has0 = *has1 = true;
            snprintf(desc, desc_len, "%s $in", bson_iter_key(&kp));
            return 2;
        }
        return *has0 || *has1 ? 1 : 0;
    }
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
    while (bson_iter_next(&kp)) {
        bson_t arr;
        bool descending = BSON_ITER_HOLDS_NUMBER(&kp) && bson_iter_as_double(&kp) < 0;
        bson_append_array_begin(out, bson_iter_key(&kp), -1, &arr);
        BSON_APPEND_UTF8(&arr, "0",
                         first ? iv : (descending ? "[MaxKey, MinKey]" : "[MinKey, MaxKey]"));
        bson_append_array_end(out, &arr);
        first = false;
    }
}

/* Whether the planner may use 'idx' for any query: not partial, sparse or hidden (their
 * entries may miss matching documents). */
static bool
plannable(const shl_index_t *idx)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, idx->spec, "partialFilterExpression")) {
        return false;
    }
    if (bson_iter_init_find(&it, idx->spec, "sparse") && bson_iter_as_bool(&it)) {
        return false;
    }
    if (bson_iter_init_find(&it, idx->spec, "hidden") && bson_iter_as_bool(&it)) {
        return false;
    }
    return true;
}

/* The planner: the index whose first field has the most selective predicate (equality,
 * then $in, then a range; unique indexes first among equals), or NULL. */
static const shl_index_t *
plan_index(const shl_collection_t *coll, const bson_t *filter)
{
    const shl_index_t *best = NULL;
    int best_score = 0;

    if (bson_empty(filter)) {
        return NULL;
    }
    for (size_t i = 0; i < coll->nindexes; i++) {
        const shl_index_t *idx = coll->indexes[i];
        shl_keystring_t ks0, ks1;
        bool h0, h1;
        char desc[200], iv[400];
        int score;
        if (!plannable(idx)) {
            continue;
        }
        shl_keystring_init(&ks0);
        shl_keystring_init(&ks1);
        score =
            index_bounds(filter, idx, &ks0, &ks1, &h0, &h1, desc, sizeof(desc), iv, sizeof(iv)) *
                2 +
            (idx->unique ? 1 : 0);
        shl_keystring_cleanup(&ks0);
        shl_keystring_cleanup(&ks1);
        if (score >= 2 && score > best_score) {
            best = idx;
            best_score = score;
        }
    }
    return best;
}

/* ---------------------------------------------------------------- access path */

static int
hint_index(const shl_collection_t *coll, const bson_value_t *hint, const shl_index_t **idx,
           int *natural, shl_status_t *st)
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
    if (*idx == NULL && coll != NULL) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "error processing query: planner returned error :: caused by :: hint "
                 "provided does not correspond to an existing index");
    }
done:
    return ret;
}

/* The matcher to run per document, NULL when it matches everything. */
static const shl_matcher_t *
effective_filter(const exec_query_t *q)
{
    return q->matcher != NULL && !shl_matcher_is_trivial(q->matcher) ? q->matcher : NULL;
}

int
exec_access_select(const shl_collection_t *coll, const exec_query_t *q, exec_stage_t **out,
                   exec_access_kind_t *kind, shl_status_t *st)
{
    int ret = 0;
    const shl_index_t *idx = NULL;
    int natural = 0;

    *out = NULL;
    if (q->has_hint) {
        SHL_ERR(hint_index(coll, &q->hint, &idx, &natural, st));
    }
    if (coll != NULL && idx == NULL && natural == 0 && !coll->is_oplog &&
        !(q->id_point && coll->nindexes > 0)) {
        idx = plan_index(coll, &q->filter);
    }
    if (coll == NULL) {
        *kind = EXEC_ACCESS_EOF;
        *out = exec_eof_new();
    } else if (idx != NULL) {
        bson_iter_t kp;
        shl_keystring_t ks0, ks1;
        bool has0 = false, has1 = false;
        char desc[200] = "[MinKey, MaxKey]";

        shl_keystring_init(&ks0);
        shl_keystring_init(&ks1);
        char iv[400];
        (void)kp;
        index_bounds(&q->filter, idx, &ks0, &ks1, &has0, &has1, desc, sizeof(desc), iv, sizeof(iv));
        {
            shl_key_bound_t b0 = {has0 ? ks0.data : NULL, ks0.len};
            shl_key_bound_t b1 = {has1 ? ks1.data : NULL, ks1.len};
            exec_stage_t *ix = exec_ixscan_new(idx, &b0, &b1, true, desc);
            bson_t bounds;
            bounds_doc(idx, iv, &bounds);
            exec_ixscan_set_bounds(ix, &bounds);
            bson_destroy(&bounds);
            *out = exec_fetch_new(ix, coll, effective_filter(q));
        }
        shl_keystring_cleanup(&ks0);
        shl_keystring_cleanup(&ks1);
        *kind = EXEC_ACCESS_IXSCAN;
    } else if (q->id_point && natural == 0 && !coll->is_oplog && coll->nindexes > 0) {
        *kind = EXEC_ACCESS_IDHACK;
        *out = exec_idhack_new(coll, &q->id_value);
    } else {
        int64_t min_rid = 0;
        if (coll->is_oplog) {
            /* The oplog is keyed by ts: start a scan at {ts: {$gt|$gte: T}} directly. */
            bson_iter_t it, sub;
            if (bson_iter_init_find(&it, &q->filter, "ts") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
                bson_iter_recurse(&it, &sub)) {
                while (bson_iter_next(&sub)) {
                    if (BSON_ITER_HOLDS_TIMESTAMP(&sub)) {
                        uint32_t t, i;
                        bson_iter_timestamp(&sub, &t, &i);
                        if (strcmp(bson_iter_key(&sub), "$gte") == 0 ||
                            strcmp(bson_iter_key(&sub), "$eq") == 0) {
                            min_rid = (int64_t)SHL_TS_MAKE(t, i);
                        } else if (strcmp(bson_iter_key(&sub), "$gt") == 0) {
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
    return ret;
}
