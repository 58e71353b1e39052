/*
 * pipe_group.c -- $group (a hash table keyed by the canonical value hash) and its
 * accumulators, which $bucket, $bucketAuto and the window functions (window.c) reuse; $count and
 * $sortByCount, rewritten into $group + $project / $sort as MongoDB does.
 */
#include <math.h>
#include <string.h>

#include "bson/bson_compare.h"
#include "bson/bson_hash.h"
#include "bson/bson_iter.h"
#include "query/pipeline_private.h"
#include "query/query_private.h"

/* ---------------------------------------------------------------- $group */

static bool
acc_uses_arr(const accdef_t *d)
{
    return d->kind == ACC_PUSH || d->kind == ACC_ADDTOSET || d->kind == ACC_MERGE_OBJECTS;
}

void
query_acc_init(accstate_t *a, const accdef_t *d)
{
    memset(a, 0, sizeof(*a));
    a->val.value_type = BSON_TYPE_EOD;
    if (acc_uses_arr(d)) {
        a->arr = bson_new();
    }
}

static void
item_cleanup(accitem_t *it)
{
    if (it->has_key) {
        bson_destroy(&it->key);
    }
    bson_value_destroy(&it->val);
}

void
query_acc_cleanup(accstate_t *a, const accdef_t *d)
{
    bson_value_destroy(&a->val);
    if (acc_uses_arr(d)) {
        bson_destroy(a->arr);
    }
    for (size_t i = 0; i < a->nitems; i++) {
        item_cleanup(&a->items[i]);
    }
    bson_free(a->items);
}

int64_t
query_value_size(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_UTF8:
        return 16 + v->value.v_utf8.len;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        return 16 + v->value.v_doc.data_len;
    case BSON_TYPE_BINARY:
        return 16 + v->value.v_binary.data_len;
    default:
        return 16;
    }
}

/* Insert 'it' (moved) at position 'pos' of the N accumulator's items. */
static void
items_insert(accstate_t *a, size_t pos, accitem_t *it)
{
    if (a->nitems == a->capitems) {
        a->capitems = a->capitems ? a->capitems * 2 : 4;
        a->items = bson_realloc(a->items, a->capitems * sizeof(*a->items));
    }
    memmove(&a->items[pos + 1], &a->items[pos], (a->nitems - pos) * sizeof(*a->items));
    a->items[pos] = *it;
    a->nitems++;
}

static void
items_remove(accstate_t *a, size_t pos)
{
    item_cleanup(&a->items[pos]);
    memmove(&a->items[pos], &a->items[pos + 1], (a->nitems - pos - 1) * sizeof(*a->items));
    a->nitems--;
}

/* Compare two retained items: by sort key under 'd->sort_by', else by value. */
static int
item_cmp(const accdef_t *d, const accitem_t *x, const accitem_t *y)
{
    if (d->sort_by != NULL) {
        return shl_sort_key_compare(d->sort_by, &x->key, &y->key);
    }
    return shl_expr_compare_coll(&x->val, &y->val, d->coll);
}

/* The position after every item <= 'it' (stable insertion). */
static size_t
items_upper_bound(const accstate_t *a, const accdef_t *d, const accitem_t *it)
{
    size_t lo = 0, hi = a->nitems;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (item_cmp(d, &a->items[mid], it) <= 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/*
 * Keep the n smallest ('keep_low') or largest items in sort order; ties keep the item seen
 * first, as MongoDB's $topN/$bottomN/$minN/$maxN do. Takes ownership of 'it'.
 */
static void
items_keep_n(accstate_t *a, const accdef_t *d, accitem_t *it, bool keep_low, int64_t *grow)
{
    if ((int64_t)a->nitems >= d->n) {
        if (keep_low) {
            if (item_cmp(d, &a->items[a->nitems - 1], it) <= 0) {
                item_cleanup(it);
                return;
            }
            *grow -= query_value_size(&a->items[a->nitems - 1].val);
            items_remove(a, a->nitems - 1);
        } else {
            if (item_cmp(d, it, &a->items[0]) <= 0) {
                item_cleanup(it);
                return;
            }
            *grow -= query_value_size(&a->items[0].val);
            items_remove(a, 0);
        }
    }
    *grow += query_value_size(&it->val) + (it->has_key ? it->key.len : 0) + (int64_t)sizeof(*it);
    items_insert(a, items_upper_bound(a, d, it), it);
}

/* $mergeObjects: fields of 'v' override those already accumulated, in place. */
static int
merge_objects_add(accstate_t *a, const bson_value_t *v, int64_t *grow, shl_status_t *st)
{
    int ret = 0;
    bson_t view, merged = BSON_INITIALIZER;
    bson_iter_t it, nit;

    if (v->value_type == BSON_TYPE_EOD || v->value_type == BSON_TYPE_NULL ||
        v->value_type == BSON_TYPE_UNDEFINED) {
        goto done;
    }
    if (v->value_type != BSON_TYPE_DOCUMENT || !query_bson_view(v, &view)) {
        char *json = query_value_to_json(v);
        ret = shl_status_set(st, 40400,
                             "$mergeObjects requires object inputs, but input %s is of type %s",
                             json, shl_bson_type_name(v->value_type));
        bson_free(json);
        goto done;
    }
    bson_iter_init(&it, a->arr);
    while (shl_iter_next(&it)) {
        if (bson_iter_init_find(&nit, &view, shl_iter_key(&it))) {
            bson_append_iter(&merged, shl_iter_key(&it), -1, &nit);
        } else {
            bson_append_iter(&merged, shl_iter_key(&it), -1, &it);
        }
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        if (!bson_has_field(a->arr, shl_iter_key(&it))) {
            bson_append_iter(&merged, shl_iter_key(&it), -1, &it);
        }
    }
    *grow += (int64_t)merged.len - (int64_t)a->arr->len;
    bson_destroy(a->arr);
    a->arr = bson_copy(&merged);
done:
    bson_destroy(&merged);
    return ret;
}

/* Fold 'v' (owned by the caller; EOD = missing) into 'a'; 'root' is the input document (the
 * sort key of $top/$bottom); *grow gets the added bytes. */
int
query_acc_add(accstate_t *a, const accdef_t *d, const bson_value_t *v, const bson_t *root,
              int64_t *grow, shl_status_t *st)
{
    int ret = 0;
    bool missing = v->value_type == BSON_TYPE_EOD;
    bool nullish =
        missing || v->value_type == BSON_TYPE_NULL || v->value_type == BSON_TYPE_UNDEFINED;
    accitem_t item;

    memset(&item, 0, sizeof(item));
    switch (d->kind) {
    case ACC_SUM:
    case ACC_AVG:
        if (v->value_type == BSON_TYPE_INT32 || v->value_type == BSON_TYPE_INT64) {
            int64_t x = v->value_type == BSON_TYPE_INT32 ? v->value.v_int32 : v->value.v_int64;
            int64_t r = 0;
            if (v->value_type == BSON_TYPE_INT64 && a->ntype < 1) {
                a->ntype = 1;
            }
            if (a->ntype < 2 && __builtin_add_overflow(a->isum, x, &r)) {
                a->ntype = 2;
                a->dsum = (double)a->isum;
            }
            if (a->ntype == 2) {
                a->dsum += (double)x;
            } else {
                a->isum = r;
            }
            a->count++;
        } else if (query_value_is_number(v)) {
            if (a->ntype < 2) {
                a->dsum = (double)a->isum;
                a->ntype = 2;
            }
            a->dsum += query_value_as_double(v);
            a->count++;
        }
        break;
    case ACC_STDDEV_POP:
    case ACC_STDDEV_SAMP:
        if (query_value_is_number(v)) {
            double x = query_value_as_double(v);
            a->count++;
            double delta = x - a->mean;
            a->mean += delta / (double)a->count;
            a->m2 += delta * (x - a->mean);
        }
        break;
    case ACC_MIN:
    case ACC_MAX:
        if (nullish) {
            break;
        }
        if (!a->seen || (d->kind == ACC_MIN ? shl_expr_compare_coll(v, &a->val, d->coll) < 0
                                            : shl_expr_compare_coll(v, &a->val, d->coll) > 0)) {
            bson_value_destroy(&a->val);
            bson_value_copy(v, &a->val);
            a->seen = true;
        }
        break;
    case ACC_FIRST:
        if (!a->seen) {
            if (missing) {
                a->val.value_type = BSON_TYPE_NULL;
            } else {
                bson_value_copy(v, &a->val);
            }
            a->seen = true;
        }
        break;
    case ACC_LAST:
        bson_value_destroy(&a->val);
        if (missing) {
            a->val.value_type = BSON_TYPE_NULL;
        } else {
            bson_value_copy(v, &a->val);
        }
        a->seen = true;
        break;
    case ACC_PUSH:
    case ACC_ADDTOSET:
        if (missing) {
            break;
        }
        if (d->kind == ACC_ADDTOSET) {
            bson_iter_t it;
            bool dup = false;
            bson_iter_init(&it, a->arr);
            while (!dup && shl_iter_next(&it)) {
                dup = shl_bson_value_compare_coll(bson_iter_value(&it), v, d->coll) == 0;
            }
            if (dup) {
                break;
            }
        }
        {
            char key[16];
            const char *kp;
            uint32_t before = a->arr->len;
            /* MongoDB bounds each of these accumulators on its own, whatever the stage's
             * limit: ExceededMemoryLimit past internalQueryMaxPushBytes /
             * internalQueryMaxAddToSetBytes. Checked before appending, so the array stays
             * far below libbson's 2 GiB ceiling. */
            int64_t limit =
                shl_opt_int(d->kind == ACC_PUSH ? SHL_OPT_internalQueryMaxPushBytes
                                                : SHL_OPT_internalQueryMaxAddToSetBytes);
            int64_t need = (int64_t)a->arr->len + (int64_t)shl_bson_array_element_len(
                                                      a->narr, (size_t)query_value_size(v));
            if (need > limit || need > (int64_t)INT32_MAX - 1024) {
                ret = shl_status_set(st, SHL_CODE_EXCEEDED_MEMORY_LIMIT,
                                     "%s accumulator passed its memory limit of %lld bytes (%s) "
                                     "and cannot spill to disk",
                                     d->kind == ACC_PUSH ? "$push" : "$addToSet", (long long)limit,
                                     d->kind == ACC_PUSH ? "internalQueryMaxPushBytes"
                                                         : "internalQueryMaxAddToSetBytes");
                break;
            }
            bson_uint32_to_string(a->narr++, &kp, key, sizeof(key));
            query_append_value(a->arr, kp, -1, v);
            *grow += a->arr->len - before;
        }
        break;
    case ACC_MERGE_OBJECTS:
        ret = merge_objects_add(a, v, grow, st);
        break;
    case ACC_FIRST_N:
        if ((int64_t)a->nitems >= d->n) {
            break;
        }
        __attribute__((fallthrough));
    case ACC_LAST_N:
        if (missing) {
            item.val.value_type = BSON_TYPE_NULL;
        } else {
            bson_value_copy(v, &item.val);
        }
        if (d->kind == ACC_LAST_N && (int64_t)a->nitems >= d->n) {
            *grow -= query_value_size(&a->items[0].val);
            items_remove(a, 0);
        }
        *grow += query_value_size(&item.val) + (int64_t)sizeof(item);
        items_insert(a, a->nitems, &item);
        break;
    case ACC_MIN_N:
    case ACC_MAX_N:
        if (nullish) {
            break;
        }
        bson_value_copy(v, &item.val);
        items_keep_n(a, d, &item, d->kind == ACC_MIN_N, grow);
        break;
    case ACC_TOP:
    case ACC_BOTTOM:
    case ACC_TOP_N:
    case ACC_BOTTOM_N:
        if (missing) {
            item.val.value_type = BSON_TYPE_NULL;
        } else {
            bson_value_copy(v, &item.val);
        }
        shl_sort_key_compute(d->sort_by, root, &item.key);
        item.has_key = true;
        items_keep_n(a, d, &item, d->kind == ACC_TOP || d->kind == ACC_TOP_N, grow);
        break;
    }
    return ret;
}

void
query_acc_result(const accstate_t *a, const accdef_t *d, bson_t *out)
{
    switch (d->kind) {
    case ACC_SUM:
        if (a->ntype == 2) {
            BSON_APPEND_DOUBLE(out, d->field, a->dsum);
        } else if (a->ntype == 0 && a->isum >= INT32_MIN && a->isum <= INT32_MAX) {
            BSON_APPEND_INT32(out, d->field, (int32_t)a->isum);
        } else {
            BSON_APPEND_INT64(out, d->field, a->isum);
        }
        break;
    case ACC_AVG:
        if (a->count == 0) {
            BSON_APPEND_NULL(out, d->field);
        } else {
            double tot = a->ntype == 2 ? a->dsum : (double)a->isum;
            BSON_APPEND_DOUBLE(out, d->field, tot / (double)a->count);
        }
        break;
    case ACC_STDDEV_POP:
    case ACC_STDDEV_SAMP: {
        int64_t div = d->kind == ACC_STDDEV_POP ? a->count : a->count - 1;
        if (div <= 0) {
            BSON_APPEND_NULL(out, d->field);
        } else {
            BSON_APPEND_DOUBLE(out, d->field, sqrt(a->m2 / (double)div));
        }
        break;
    }
    case ACC_MIN:
    case ACC_MAX:
    case ACC_FIRST:
    case ACC_LAST:
        if (!a->seen) {
            BSON_APPEND_NULL(out, d->field);
        } else {
            query_append_value(out, d->field, -1, &a->val);
        }
        break;
    case ACC_PUSH:
    case ACC_ADDTOSET:
        BSON_APPEND_ARRAY(out, d->field, a->arr);
        break;
    case ACC_MERGE_OBJECTS:
        BSON_APPEND_DOCUMENT(out, d->field, a->arr);
        break;
    case ACC_TOP:
    case ACC_BOTTOM:
        if (a->nitems == 0) {
            BSON_APPEND_NULL(out, d->field);
        } else {
            query_append_value(out, d->field, -1, &a->items[0].val);
        }
        break;
    case ACC_TOP_N:
    case ACC_BOTTOM_N:
    case ACC_FIRST_N:
    case ACC_LAST_N:
    case ACC_MIN_N:
    case ACC_MAX_N: {
        bson_t arr;
        BSON_APPEND_ARRAY_BEGIN(out, d->field, &arr);
        for (size_t i = 0; i < a->nitems; i++) {
            char key[16];
            const char *kp;
            size_t j = d->kind == ACC_MAX_N ? a->nitems - 1 - i : i;
            bson_uint32_to_string((uint32_t)i, &kp, key, sizeof(key));
            query_append_value(&arr, kp, -1, &a->items[j].val);
        }
        bson_append_array_end(out, &arr);
        break;
    }
    }
}

static pipe_group_t *
group_find(pipe_stage_t *s, const bson_value_t *key, uint64_t h)
{
    for (pipe_group_t *g = s->buckets[h % s->nbuckets]; g != NULL; g = g->hnext) {
        if (g->hash == h &&
            shl_bson_value_compare_coll(&g->key, key, s->pipe->opts.collator) == 0) {
            return g;
        }
    }
    return NULL;
}

static void
group_rehash(pipe_stage_t *s)
{
    size_t nb = s->nbuckets * 2;
    pipe_group_t **b = bson_malloc0(nb * sizeof(*b));
    for (pipe_group_t *g = s->ofirst; g != NULL; g = g->onext) {
        g->hnext = b[g->hash % nb];
        b[g->hash % nb] = g;
    }
    bson_free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
}

static int
group_consume(pipe_stage_t *s, const bson_t *in, shl_status_t *st)
{
    int ret = 0;
    shl_expr_ctx_t ctx;
    bson_value_t key, v;
    pipe_group_t *g;
    int64_t grow = 0;

    key.value_type = v.value_type = BSON_TYPE_EOD;
    pipe_eval_ctx(s, in, &ctx);
    SHL_ERR(shl_expr_evaluate(s->expr, &ctx, &key, st));
    if (key.value_type == BSON_TYPE_EOD) {
        key.value_type = BSON_TYPE_NULL;
    }
    uint64_t h;
    if (s->pipe->opts.collator != NULL) {
        /* Keys equal under the collation must hash alike: hash their collation keys. */
        bson_value_t ck;
        shl_collator_value_key(s->pipe->opts.collator, &key, &ck);
        h = shl_bson_hash_fast(&ck);
        bson_value_destroy(&ck);
    } else {
        h = shl_bson_hash_fast(&key);
    }
    g = group_find(s, &key, h);
    if (g == NULL) {
        /* One allocation: the group, then its accumulators at their type's alignment. */
        size_t off =
            (sizeof(*g) + _Alignof(accstate_t) - 1) / _Alignof(accstate_t) * _Alignof(accstate_t);
        g = bson_aligned_alloc0(_Alignof(accstate_t) > _Alignof(max_align_t)
                                    ? _Alignof(accstate_t)
                                    : _Alignof(max_align_t),
                                off + s->naccs * sizeof(accstate_t));
        g->acc = (accstate_t *)((char *)g + off);
        g->hash = h;
        bson_value_copy(&key, &g->key);
        for (size_t i = 0; i < s->naccs; i++) {
            query_acc_init(&g->acc[i], &s->accs[i]);
        }
        /* Grow before linking 'g' so the rehash does not see it. */
        if (++s->ngroups > s->nbuckets) {
            group_rehash(s);
        }
        if (s->olast) {
            s->olast->onext = g;
        } else {
            s->ofirst = g;
        }
        s->olast = g;
        g->hnext = s->buckets[h % s->nbuckets];
        s->buckets[h % s->nbuckets] = g;
        grow += (int64_t)(sizeof(*g) + s->naccs * sizeof(accstate_t) + 32);
        if (key.value_type == BSON_TYPE_UTF8) {
            grow += key.value.v_utf8.len;
        } else if (key.value_type == BSON_TYPE_DOCUMENT || key.value_type == BSON_TYPE_ARRAY) {
            grow += key.value.v_doc.data_len;
        }
    }
    for (size_t i = 0; i < s->naccs; i++) {
        SHL_ERR(shl_expr_evaluate(s->accs[i].arg, &ctx, &v, st));
        SHL_ERR(query_acc_add(&g->acc[i], &s->accs[i], &v, in, &grow, st));
        bson_value_destroy(&v);
        v.value_type = BSON_TYPE_EOD;
    }
    s->mem += grow;
    if (s->mem > s->max_bytes) {
        SHL_ERR(pipe_mem_exceeded(s, st));
    }
done:
    bson_value_destroy(&key);
    bson_value_destroy(&v);
    return ret;
}

int
pipe_next_group(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;

    *doc = NULL;
    if (!s->drained) {
        for (;;) {
            SHL_ERR(pipe_pull_src(s, &in, st));
            if (in == NULL) {
                break;
            }
            SHL_ERR(group_consume(s, in, st));
        }
        s->drained = true;
        s->ocur = s->ofirst;
    }
    if (s->ocur != NULL) {
        bson_t *o = pipe_stage_out(s);
        pipe_group_t *g = s->ocur;
        query_append_value(o, "_id", 3, &g->key);
        for (size_t i = 0; i < s->naccs; i++) {
            query_acc_result(&g->acc[i], &s->accs[i], o);
        }
        s->ocur = g->onext;
        *doc = o;
    }
done:
    return ret;
}

/* The family destroys: each frees the fields only its stages use. */
void
pipe_destroy_group(pipe_stage_t *s)
{
    for (size_t i = 0; i < s->naccs; i++) {
        bson_free(s->accs[i].field);
        shl_expr_destroy(s->accs[i].arg);
        shl_sort_pattern_destroy(s->accs[i].sort_by);
    }
    for (pipe_group_t *g = s->ofirst, *n; g != NULL; g = n) {
        n = g->onext;
        for (size_t i = 0; i < s->naccs; i++) {
            query_acc_cleanup(&g->acc[i], &s->accs[i]);
        }
        bson_value_destroy(&g->key);
        bson_free(g);
    }
    bson_free(s->accs);
    bson_free(s->buckets);
}

/* Evaluate and validate the 'n' of an N accumulator (MongoDB's AccumulatorN::validateN). */
static int
parse_acc_n(const bson_t *vars, const bson_value_t *spec, int64_t *n, shl_status_t *st)
{
    int ret = 0;
    shl_expr_t *e = NULL;
    bson_value_t v;
    bson_t empty = BSON_INITIALIZER;
    shl_expr_ctx_t ctx = {.root = &empty, .vars = vars, .now_ms = 0};
    char *json = NULL;

    v.value_type = BSON_TYPE_EOD;
    SHL_ERR(shl_expr_parse(spec, &e, st));
    SHL_ERR(shl_expr_evaluate(e, &ctx, &v, st));
    if (!query_value_is_number(&v)) {
        json = v.value_type == BSON_TYPE_EOD ? bson_strdup("MISSING") : query_value_to_json(&v);
        SHL_FAIL(st, 5787902, "Value for 'n' must be of integral type, but found %s", json);
    }
    double d = query_value_as_double(&v);
    if (!(d >= -9.2e18 && d <= 9.2e18) || d != (double)(int64_t)d) {
        json = query_value_to_json(&v);
        SHL_FAIL(st, 5787903, "Value for 'n' must be of integral type, but found %s", json);
    }
    *n = (int64_t)d;
    if (*n <= 0) {
        SHL_FAIL(st, 5787908, "'n' must be greater than 0, found %lld", (long long)*n);
    }
done:
    bson_free(json);
    bson_value_destroy(&v);
    bson_destroy(&empty);
    shl_expr_destroy(e);
    return ret;
}

/*
 * query_acc_parse --
 *     Parse the accumulator 'a' (iterator on {$op: <arg>}'s only field) into 'd' (d->field set
 *     by the caller). MongoDB's codes: 15952 unknown operator, 40237 unary operators given an
 *     array, 5787900/5787801/5788001 N-accumulator arguments not objects, 5787901/5788002
 *     unknown arguments, 5787906/5788003 missing n, 5787907 missing input, 5788004 missing
 *     output, 5788005 missing sortBy.
 */
int
query_acc_parse(const bson_t *vars, const bson_iter_t *a_in, accdef_t *d, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t acopy = *a_in, *a = &acopy;
    const char *op = shl_iter_key(a);
    static const struct {
        const char *name;
        acc_kind_t kind;
    } ops[] = {{"$sum", ACC_SUM},
               {"$avg", ACC_AVG},
               {"$min", ACC_MIN},
               {"$max", ACC_MAX},
               {"$first", ACC_FIRST},
               {"$last", ACC_LAST},
               {"$push", ACC_PUSH},
               {"$addToSet", ACC_ADDTOSET},
               {"$stdDevPop", ACC_STDDEV_POP},
               {"$stdDevSamp", ACC_STDDEV_SAMP},
               {"$mergeObjects", ACC_MERGE_OBJECTS},
               {"$top", ACC_TOP},
               {"$bottom", ACC_BOTTOM},
               {"$topN", ACC_TOP_N},
               {"$bottomN", ACC_BOTTOM_N},
               {"$firstN", ACC_FIRST_N},
               {"$lastN", ACC_LAST_N},
               {"$maxN", ACC_MAX_N},
               {"$minN", ACC_MIN_N}};
    bool found = false;
    bson_t view;
    bson_iter_t f;
    const bson_value_t *n = NULL, *input = NULL, *sort_by = NULL;
    bson_value_t nv, iv, sv; /* shallow copies: the iterator's value is overwritten */

    if (strcmp(op, "$count") == 0) {
        if (!BSON_ITER_HOLDS_DOCUMENT(a) || !query_bson_view(bson_iter_value(a), &view) ||
            !bson_empty(&view)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "$count takes no arguments, i.e. $count:{}");
        }
        bson_value_t one = {.value_type = BSON_TYPE_INT32};
        one.value.v_int32 = 1;
        d->kind = ACC_SUM;
        SHL_ERR(shl_expr_parse(&one, &d->arg, st));
        goto done;
    }
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        if (strcmp(op, ops[i].name) == 0) {
            d->kind = ops[i].kind;
            found = true;
        }
    }
    if (!found) {
        SHL_FAIL(st, 15952, "Unknown group operator '%s'", op);
    }
    if (d->kind < ACC_TOP) {
        if (BSON_ITER_HOLDS_ARRAY(a)) {
            SHL_FAIL(st, 40237, "The %s accumulator is a unary operator", op);
        }
        SHL_ERR(shl_expr_parse(bson_iter_value(a), &d->arg, st));
        goto done;
    }
    bool top = d->kind <= ACC_BOTTOM_N;
    bool single = d->kind == ACC_TOP || d->kind == ACC_BOTTOM;
    if (!BSON_ITER_HOLDS_DOCUMENT(a) || !query_bson_view(bson_iter_value(a), &view)) {
        char *json = query_value_to_json(bson_iter_value(a));
        ret = shl_status_set(
            st, top ? 5788001 : (d->kind == ACC_MAX_N || d->kind == ACC_MIN_N ? 5787900 : 5787801),
            "specification must be an object; found %s: %s", op, json);
        bson_free(json);
        goto done;
    }
    bson_iter_init(&f, &view);
    while (shl_iter_next(&f)) {
        const char *k = shl_iter_key(&f);
        if (!single && strcmp(k, "n") == 0) {
            nv = *bson_iter_value(&f);
            n = &nv;
        } else if (top && strcmp(k, "output") == 0) {
            iv = *bson_iter_value(&f);
            input = &iv;
        } else if (top && strcmp(k, "sortBy") == 0) {
            sv = *bson_iter_value(&f);
            sort_by = &sv;
        } else if (!top && strcmp(k, "input") == 0) {
            iv = *bson_iter_value(&f);
            input = &iv;
        } else if (top) {
            SHL_FAIL(st, 5788002, "Unknown argument to %s '%s'", op, k);
        } else {
            SHL_FAIL(st, 5787901, "Unknown argument for 'n' operator: %s", k);
        }
    }
    if (!single && n == NULL) {
        SHL_FAIL(st, top ? 5788003 : 5787906, "Missing value for 'n'");
    }
    if (input == NULL) {
        SHL_FAIL(st, top ? 5788004 : 5787907, "Missing value for '%s'", top ? "output" : "input");
    }
    if (top && sort_by == NULL) {
        SHL_FAIL(st, 5788005, "Missing value for 'sortBy'");
    }
    if (single) {
        d->n = 1;
    } else {
        SHL_ERR(parse_acc_n(vars, n, &d->n, st));
    }
    if (top) {
        bson_t sview;
        if (!query_bson_view(sort_by, &sview) || sort_by->value_type != BSON_TYPE_DOCUMENT) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "expected 'sortBy' to be an object");
        }
        if (bson_empty(&sview)) {
            SHL_FAIL(st, 15976, "$sort stage must have at least one sort key");
        }
        SHL_ERR(shl_sort_pattern_new(&sview, &d->sort_by, st));
    }
    SHL_ERR(shl_expr_parse(input, &d->arg, st));
done:
    return ret;
}

/* Parse the accumulators of an object {field: {$acc: arg}} (a $group without _id, a $bucket's or
 * $bucketAuto's output) into s->accs. */
int
pipe_parse_acc_fields(shl_pipeline_t *p, pipe_stage_t *s, const char *k, const bson_iter_t *it,
                      shl_status_t *st)
{
    int ret = 0;
    bson_iter_t a;

    if (strchr(k, '.') != NULL) {
        SHL_FAIL(st, 40235, "The field name '%s' cannot contain '.'", k);
    }
    if (k[0] == '$') {
        SHL_FAIL(st, 40236, "The field name '%s' cannot be an operator name", k);
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &a) || !shl_iter_next(&a)) {
        SHL_FAIL(st, 40234, "The field '%s' must be an accumulator object", k);
    }
    accdef_t *d = &s->accs[s->naccs];
    d->field = bson_strdup(k);
    s->naccs++;
    SHL_ERR(query_acc_parse(p->opts.vars, &a, d, st));
    d->coll = p->opts.collator;
    if (shl_iter_next(&a)) {
        SHL_FAIL(st, 40238, "The field '%s' must specify one accumulator", k);
    }
done:
    return ret;
}

/* Fill the $group stage 's' from its specification. */
static int
group_init(pipe_stage_t *s, const bson_t *spec, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool have_id = false;

    s->nbuckets = 64;
    s->buckets = bson_malloc0(s->nbuckets * sizeof(*s->buckets));
    s->accs = bson_malloc0((bson_count_keys(spec) + 1) * sizeof(*s->accs));
    bson_iter_init(&it, spec);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "_id") == 0) {
            SHL_ERR(shl_expr_parse(bson_iter_value(&it), &s->expr, st));
            have_id = true;
            continue;
        }
        SHL_ERR(pipe_parse_acc_fields(s->pipe, s, k, &it, st));
    }
    if (!have_id) {
        SHL_FAIL(st, 15955, "a group specification must include an _id");
    }
done:
    return ret;
}

int
pipe_push_group(shl_pipeline_t *p, const bson_t *spec, const bson_t *explain, shl_status_t *st)
{
    int ret = 0;
    pipe_stage_t *s = pipe_stage_new(p, "$group", NULL);

    if (explain != NULL) {
        bson_concat(&s->spec, explain);
    } else {
        BSON_APPEND_DOCUMENT(&s->spec, "$group", spec);
    }
    SHL_ERR(group_init(s, spec, st));
    pipe_push(p, s);
    s = NULL;
done:
    pipe_stage_destroy(s);
    return ret;
}

static int
parse_count_name(const bson_iter_t *it, const char **name, shl_status_t *st)
{
    int ret = 0;

    if (!BSON_ITER_HOLDS_UTF8(it)) {
        SHL_FAIL(st, 40156, "the count field must be a non-empty string");
    }
    *name = bson_iter_utf8(it, NULL);
    if ((*name)[0] == '\0') {
        SHL_FAIL(st, 40157, "the count field must be a non-empty string");
    }
    if ((*name)[0] == '$') {
        SHL_FAIL(st, 40158, "the count field cannot be a $-prefixed path");
    }
    if (strchr(*name, '.') != NULL) {
        SHL_FAIL(st, 40160, "the count field cannot contain '.'");
    }
done:
    return ret;
}

int
pipe_parse_group(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_t view;

    SHL_ERR(pipe_arg_doc(arg, &view, 15947, "a group's fields must be specified in an object", st));
    SHL_ERR(group_init(s, &view, st));
done:
    return ret;
}

/* $count: {$group: {_id: null, name: {$sum: 1}}}, {$project: {_id: 0}}, as MongoDB. */
int
pipe_rewrite_count(shl_pipeline_t *p, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    pipe_stage_t *s = NULL;
    bson_t tmp = BSON_INITIALIZER, tmp2 = BSON_INITIALIZER, a;
    const char *cname;

    SHL_ERR(parse_count_name(arg, &cname, st));
    BSON_APPEND_NULL(&tmp, "_id");
    BSON_APPEND_DOCUMENT_BEGIN(&tmp, cname, &a);
    BSON_APPEND_INT32(&a, "$sum", 1);
    bson_append_document_end(&tmp, &a);
    SHL_ERR(pipe_push_group(p, &tmp, NULL, st));
    BSON_APPEND_INT32(&tmp2, "_id", 0);
    s = pipe_stage_new(p, "$project", NULL);
    BSON_APPEND_DOCUMENT(&s->spec, "$project", &tmp2);
    SHL_ERR(shl_projection_new(&tmp2, NULL, &s->proj, st));
    pipe_push(p, s);
    s = NULL;
done:
    pipe_stage_destroy(s);
    bson_destroy(&tmp);
    bson_destroy(&tmp2);
    return ret;
}

/* $sortByCount: {$group: {_id: <expr>, count: {$sum: 1}}}, {$sort: {count: -1}}. */
int
pipe_rewrite_sort_by_count(shl_pipeline_t *p, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    pipe_stage_t *s = NULL;
    bson_t tmp = BSON_INITIALIZER, tmp2 = BSON_INITIALIZER, a;
    bool ok = (BSON_ITER_HOLDS_UTF8(arg) && bson_iter_utf8(arg, NULL)[0] == '$') ||
              BSON_ITER_HOLDS_DOCUMENT(arg);

    if (BSON_ITER_HOLDS_DOCUMENT(arg)) {
        bson_iter_t d;
        ok = bson_iter_recurse(arg, &d) && shl_iter_next(&d) && shl_iter_key(&d)[0] == '$';
    }
    if (!ok) {
        SHL_FAIL(st, 40148,
                 "the sortByCount field must be defined as a $-prefixed path or an expression "
                 "object");
    }
    bson_append_iter(&tmp, "_id", 3, arg);
    BSON_APPEND_DOCUMENT_BEGIN(&tmp, "count", &a);
    BSON_APPEND_INT32(&a, "$sum", 1);
    bson_append_document_end(&tmp, &a);
    SHL_ERR(pipe_push_group(p, &tmp, NULL, st));
    BSON_APPEND_INT32(&tmp2, "count", -1);
    s = pipe_stage_new(p, "$sort", NULL);
    BSON_APPEND_DOCUMENT(&s->spec, "$sort", &tmp2);
    SHL_ERR(shl_sort_pattern_new(&tmp2, &s->pattern, st));
    pipe_push(p, s);
    s = NULL;
done:
    pipe_stage_destroy(s);
    bson_destroy(&tmp);
    bson_destroy(&tmp2);
    return ret;
}
