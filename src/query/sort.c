/*
 * sort.c -- sort patterns, sort keys and the blocking sorter (sort.h). Sort keys follow
 * MongoDB's index-key generation for one path (missing -> null, leaf array -> each element,
 * empty leaf array -> undefined, arrays on the way expanded, numeric components select
 * positions), then take the smallest (ascending) or largest (descending) value.
 */
#include "bson/bson_iter.h"
#include "query/sort.h"

#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "bson/bson_compare.h"
#include "query/query_private.h"
#include "query/text.h"

typedef struct sort_field {
    qpath_t path;
    int dir; /* 1 or -1 */
} sort_field_t;

struct shl_sort_pattern {
    sort_field_t *fields;
    size_t n;
    shl_collator_t *coll; /* a reference (shl_sort_pattern_set_collator); NULL: simple */
};

static int
check_sort_field(const char *name, shl_status_t *st)
{
    size_t len = strlen(name);
    int ret = 0;
    if (len == 0) {
        SHL_FAIL(st, QC_FIELDPATH_EMPTY, "FieldPath cannot be constructed with empty string");
    }
    if (name[len - 1] == '.') {
        SHL_FAIL(st, QC_FIELDPATH_DOT_END, "FieldPath must not end with a '.'.");
    }
    for (size_t i = 0, start = 0; i <= len; i++) {
        if (i == len || name[i] == '.') {
            if (i == start) {
                SHL_FAIL(st, 15998, "FieldPath field names may not be empty strings.");
            }
            if (name[start] == '$') {
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

int
shl_sort_pattern_new(const bson_t *spec, shl_sort_pattern_t **out, shl_status_t *st)
{
    shl_sort_pattern_t *p = bson_malloc0(sizeof(*p));
    bson_iter_t it;
    int ret = 0;
    char *js;

    *out = NULL;
    p->fields = bson_malloc0((bson_count_keys(spec) + 1) * sizeof(sort_field_t));
    bson_iter_init(&it, spec);
    while (shl_iter_next(&it)) {
        const char *key = shl_iter_key(&it);
        const bson_value_t *v = bson_iter_value(&it);
        int64_t dir;

        if (v->value_type == BSON_TYPE_DOCUMENT) {
            bson_t obj;
            bson_iter_t mi;
            query_bson_view(v, &obj);
            if (!bson_iter_init(&mi, &obj) || !shl_iter_next(&mi) ||
                strcmp(shl_iter_key(&mi), "$meta") != 0) {
                SHL_FAIL(st, QC_SORT_META_ONLY,
                         "$meta is the only expression supported by $sort right now");
            }
            if (bson_count_keys(&obj) != 1) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "Cannot have additional keys in a $meta sort specification");
            }
            if (!BSON_ITER_HOLDS_UTF8(&mi)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Illegal $meta sort: $meta: %s",
                         "non-string");
            }
            if (strcmp(bson_iter_utf8(&mi, NULL), "textScore") == 0) {
                /* The score the text search left in the document, highest first. */
                qpath_init(&p->fields[p->n].path, SHL_TEXT_SCORE_FIELD,
                           strlen(SHL_TEXT_SCORE_FIELD));
                p->fields[p->n].dir = -1;
                p->n++;
                continue;
            }
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "$meta sort by '%s' metadata is not supported",
                     bson_iter_utf8(&mi, NULL));
        }
        if (!query_value_is_number(v)) {
            js = query_value_to_json(v);
            ret = shl_status_set(st, QC_SORT_ILLEGAL_KEY,
                                 "Illegal key in $sort specification: %s: %s", key, js);
            bson_free(js);
            goto done;
        }
        {
            /* numberLong() of the value, without undefined casts of huge doubles or NaN */
            double d = query_value_as_double(v);
            dir = (d >= 1 && d < 2) ? 1 : ((d <= -1 && d > -2) ? -1 : 0);
        }
        if (dir != 1 && dir != -1) {
            SHL_FAIL(st, QC_SORT_BAD_ORDER,
                     "$sort key ordering must be 1 (for ascending) or -1 (for descending)");
        }
        SHL_ERR(check_sort_field(key, st));
        qpath_init(&p->fields[p->n].path, key, strlen(key));
        p->fields[p->n].dir = (int)dir;
        p->n++;
    }
    *out = p;
    p = NULL;
done:
    shl_sort_pattern_destroy(p);
    return ret;
}

void
shl_sort_pattern_destroy(shl_sort_pattern_t *p)
{
    if (p == NULL) {
        return;
    }
    for (size_t i = 0; i < p->n; i++) {
        qpath_cleanup(&p->fields[i].path);
    }
    bson_free(p->fields);
    shl_collator_release(p->coll);
    bson_free(p);
}

void
shl_sort_pattern_set_collator(shl_sort_pattern_t *p, shl_collator_t *coll)
{
    shl_collator_release(p->coll);
    p->coll = shl_collator_ref(coll);
}

size_t
shl_sort_pattern_nfields(const shl_sort_pattern_t *p)
{
    return p->n;
}

/* ---- key generation ---- */

typedef struct keysel {
    const shl_collator_t *coll;
    int dir;
    bool have;
    bson_value_t best; /* borrowed from the document, or a static null/undefined */
} keysel_t;

static void
offer(keysel_t *ks, const bson_value_t *v)
{
    if (!ks->have) {
        ks->best = *v;
        ks->have = true;
        return;
    }
    int c = shl_bson_value_compare_coll(v, &ks->best, ks->coll);
    if ((ks->dir > 0 && c < 0) || (ks->dir < 0 && c > 0)) {
        ks->best = *v;
    }
}

static void
offer_type(keysel_t *ks, bson_type_t t)
{
    bson_value_t v;
    memset(&v, 0, sizeof(v));
    v.value_type = t;
    offer(ks, &v);
}

static void keys_from_doc(keysel_t *ks, const bson_t *doc, const qpath_t *p, size_t i);

static void
keys_from_value(keysel_t *ks, const bson_value_t *v, const qpath_t *p, size_t i)
{
    bson_t view;
    bson_iter_t it;

    /* 'v' is the value of component i-1; i == p->n means it is the leaf. */
    if (i == p->n) {
        if (v->value_type == BSON_TYPE_ARRAY) {
            query_bson_view(v, &view);
            if (bson_count_keys(&view) == 0) {
                offer_type(ks, BSON_TYPE_UNDEFINED);
                return;
            }
            bson_iter_init(&it, &view);
            while (shl_iter_next(&it)) {
                offer(ks, bson_iter_value(&it));
            }
            return;
        }
        offer(ks, v);
        return;
    }
    if (v->value_type == BSON_TYPE_DOCUMENT) {
        query_bson_view(v, &view);
        keys_from_doc(ks, &view, p, i);
        return;
    }
    if (v->value_type == BSON_TYPE_ARRAY) {
        query_bson_view(v, &view);
        if (p->numeric[i] && bson_iter_init_find(&it, &view, p->parts[i])) {
            /* A position into the array ("a.0"). */
            keys_from_value(ks, bson_iter_value(&it), p, i + 1);
            return;
        }
        if (bson_count_keys(&view) == 0) {
            offer_type(ks, BSON_TYPE_NULL);
            return;
        }
        bson_iter_init(&it, &view);
        while (shl_iter_next(&it)) {
            const bson_value_t *e = bson_iter_value(&it);
            if (e->value_type == BSON_TYPE_DOCUMENT) {
                bson_t sub;
                query_bson_view(e, &sub);
                keys_from_doc(ks, &sub, p, i);
            } else {
                offer_type(ks, BSON_TYPE_NULL);
            }
        }
        return;
    }
    offer_type(ks, BSON_TYPE_NULL);
}

static void
keys_from_doc(keysel_t *ks, const bson_t *doc, const qpath_t *p, size_t i)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, p->parts[i])) {
        offer_type(ks, BSON_TYPE_NULL);
        return;
    }
    keys_from_value(ks, bson_iter_value(&it), p, i + 1);
}

void
shl_sort_key_compute(const shl_sort_pattern_t *p, const bson_t *doc, bson_t *key)
{
    char buf[16];
    const char *k;

    bson_init(key);
    for (size_t i = 0; i < p->n; i++) {
        keysel_t ks = {0};
        ks.coll = p->coll;
        ks.dir = p->fields[i].dir;
        keys_from_doc(&ks, doc, &p->fields[i].path, 0);
        size_t klen = bson_uint32_to_string((uint32_t)i, &k, buf, sizeof(buf));
        if (p->coll != NULL) {
            /* Strings become their collation keys (MongoDB's sort keys under a collation),
             * so keys compare bytewise here and in a router's merge. */
            bson_value_t ck;
            shl_collator_value_key(p->coll, &ks.best, &ck);
            bson_append_value(key, k, (int)klen, &ck);
            bson_value_destroy(&ck);
        } else {
            bson_append_value(key, k, (int)klen, &ks.best);
        }
    }
}

int
shl_sort_key_compare(const shl_sort_pattern_t *p, const bson_t *a, const bson_t *b)
{
    bson_iter_t ia, ib;
    size_t i = 0;
    bson_iter_init(&ia, a);
    bson_iter_init(&ib, b);
    while (shl_iter_next(&ia) && shl_iter_next(&ib) && i < p->n) {
        int c = shl_bson_iter_compare(&ia, &ib);
        if (c != 0) {
            return p->fields[i].dir > 0 ? c : -c;
        }
        i++;
    }
    return 0;
}

int
shl_sort_doc_compare(const shl_sort_pattern_t *p, const bson_t *a, const bson_t *b)
{
    bson_t ka, kb;
    int c;
    shl_sort_key_compute(p, a, &ka);
    shl_sort_key_compute(p, b, &kb);
    c = shl_sort_key_compare(p, &ka, &kb);
    bson_destroy(&ka);
    bson_destroy(&kb);
    return c;
}

/* ---- sorter ---- */

typedef struct sitem {
    uint8_t *key; /* the sort key's BSON bytes (plain malloc: no bson_t alignment) */
    uint32_t key_len;
    bson_t *doc;
    uint64_t seq;
    int64_t bytes;
} sitem_t;

struct shl_sorter {
    const shl_sort_pattern_t *p;
    int64_t limit;
    int64_t max_bytes;
    int64_t bytes;
    uint64_t seq;
    sitem_t *items;
    size_t n, cap;
    size_t pos;
    bool finished;
};

/* Per-item overhead beyond the two documents, roughly what MongoDB's sorter accounts. */
#define SORT_ITEM_OVERHEAD 64

static int
item_cmp(const shl_sort_pattern_t *p, const sitem_t *a, const sitem_t *b)
{
    bson_t ka, kb;
    int c;

    SHL_INVARIANT(bson_init_static(&ka, a->key, a->key_len) &&
                  bson_init_static(&kb, b->key, b->key_len));
    c = shl_sort_key_compare(p, &ka, &kb);
    if (c != 0) {
        return c;
    }
    return a->seq < b->seq ? -1 : (a->seq > b->seq ? 1 : 0);
}

static void
item_free(sitem_t *it)
{
    bson_free(it->key);
    bson_destroy(it->doc);
}

shl_sorter_t *
shl_sorter_new(const shl_sort_pattern_t *p, int64_t limit, int64_t max_bytes)
{
    shl_sorter_t *s = bson_malloc0(sizeof(*s));
    s->p = p;
    s->limit = limit > 0 ? limit : 0;
    s->max_bytes = max_bytes > 0
                       ? max_bytes
                       : shl_opt_int(SHL_OPT_internalQueryMaxBlockingSortMemoryUsageBytes);
    return s;
}

/* Max-heap on item order (the worst retained item on top) for top-k. */
static void
heap_sift_up(shl_sorter_t *s, size_t i)
{
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (item_cmp(s->p, &s->items[i], &s->items[parent]) <= 0) {
            break;
        }
        sitem_t t = s->items[i];
        s->items[i] = s->items[parent];
        s->items[parent] = t;
        i = parent;
    }
}

static void
heap_sift_down(shl_sorter_t *s, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, big = i;
        if (l < s->n && item_cmp(s->p, &s->items[l], &s->items[big]) > 0) {
            big = l;
        }
        if (r < s->n && item_cmp(s->p, &s->items[r], &s->items[big]) > 0) {
            big = r;
        }
        if (big == i) {
            return;
        }
        sitem_t t = s->items[i];
        s->items[i] = s->items[big];
        s->items[big] = t;
        i = big;
    }
}

int
shl_sorter_add(shl_sorter_t *s, const bson_t *doc, shl_status_t *st)
{
    sitem_t it;
    bson_t key;
    int ret = 0;

    SHL_INVARIANT(!s->finished);
    shl_sort_key_compute(s->p, doc, &key);
    /* Compare with the key in place; copy it (and the document) only when kept. */
    it.key = (uint8_t *)(uintptr_t)bson_get_data(&key);
    it.key_len = key.len;
    it.seq = s->seq++;
    it.doc = NULL;
    it.bytes = (int64_t)doc->len + (int64_t)key.len + SORT_ITEM_OVERHEAD;

    if (s->limit > 0 && (int64_t)s->n == s->limit) {
        /* Full: keep the new document only if it sorts before the worst one retained. */
        if (item_cmp(s->p, &it, &s->items[0]) >= 0) {
            bson_destroy(&key);
            goto done;
        }
        s->bytes -= s->items[0].bytes;
        item_free(&s->items[0]);
        it.key = bson_malloc(key.len);
        memcpy(it.key, bson_get_data(&key), key.len);
        it.doc = bson_copy(doc);
        s->items[0] = it;
        s->bytes += it.bytes;
        heap_sift_down(s, 0);
    } else {
        if (s->n == s->cap) {
            s->cap = s->cap ? s->cap * 2 : 64;
            s->items = bson_realloc(s->items, s->cap * sizeof(sitem_t));
        }
        it.key = bson_malloc(key.len);
        memcpy(it.key, bson_get_data(&key), key.len);
        it.doc = bson_copy(doc);
        s->items[s->n++] = it;
        s->bytes += it.bytes;
        if (s->limit > 0) {
            heap_sift_up(s, s->n - 1);
        }
    }
    bson_destroy(&key);
    if (s->bytes > s->max_bytes) {
        SHL_FAIL(st, SHL_CODE_QUERY_EXCEEDED_MEMORY_LIMIT_NO_DISK_USE_ALLOWED,
                 "Sort exceeded memory limit of %lld bytes, but did not opt in to external "
                 "sorting.",
                 (long long)s->max_bytes);
    }
done:
    return ret;
}

/* qsort has no context argument: the pattern travels in a thread-local. */
static __thread const shl_sort_pattern_t *tls_pattern;

static int
qsort_cmp(const void *a, const void *b)
{
    return item_cmp(tls_pattern, (const sitem_t *)a, (const sitem_t *)b);
}

void
shl_sorter_finish(shl_sorter_t *s)
{
    tls_pattern = s->p;
    if (s->n > 1) {
        qsort(s->items, s->n, sizeof(sitem_t), qsort_cmp);
    }
    tls_pattern = NULL;
    s->finished = true;
    s->pos = 0;
}

const bson_t *
shl_sorter_next(shl_sorter_t *s)
{
    SHL_INVARIANT(s->finished);
    if (s->pos >= s->n) {
        return NULL;
    }
    return s->items[s->pos++].doc;
}

size_t
shl_sorter_count(const shl_sorter_t *s)
{
    return s->n;
}

int64_t
shl_sorter_memory(const shl_sorter_t *s)
{
    return s->bytes;
}

void
shl_sorter_destroy(shl_sorter_t *s)
{
    if (s == NULL) {
        return;
    }
    for (size_t i = 0; i < s->n; i++) {
        item_free(&s->items[i]);
    }
    bson_free(s->items);
    bson_free(s);
}
