/*
 * exec_stages.c -- the plan stages of exec.h. Each stage pulls from its child and keeps
 * MongoDB's explain counters; scans check the operation's deadline and kill flag every
 * so many records so maxTimeMS interrupts a long scan.
 */
#include "bson/bson_iter.h"
#include "db/exec.h"

#include <string.h>

#include "bson/bson_hash.h"
#include "bson/bson_path.h"
#include "bson/keystring.h"
#include "query/text.h"

/* Records a scan examines between interrupt checks. */
#define INTERRUPT_EVERY 128

/* The calling thread's multi-plan trial (exec_trial_set): works left, cut. */
static _Thread_local int64_t *trial_works;
static _Thread_local bool trial_cut;

void
exec_trial_set(int64_t *works)
{
    trial_works = works;
    trial_cut = false;
}

bool
exec_trial_cut(void)
{
    return trial_cut;
}

int
exec_stage_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    int ret;

    *eof = false;
    row->rid = 0;
    row->doc = NULL;
    row->key = NULL;
    row->key_len = 0;
    s->stats.works++;
    ret = s->ops->next(s, ctx, row, eof, st);
    if (ret == 0) {
        if (*eof) {
            s->stats.is_eof = true;
        } else {
            s->stats.advanced++;
        }
    }
    return ret;
}

void
exec_stage_destroy(exec_stage_t *s)
{
    while (s != NULL) {
        exec_stage_t *child = s->child;
        if (s->ops->destroy != NULL) {
            s->ops->destroy(s);
        }
        for (size_t i = 0; i < s->nchildren; i++) {
            exec_stage_destroy(s->children[i]);
        }
        bson_free(s->children);
        bson_free(s);
        s = child;
    }
}

static exec_stage_t *
stage_alloc(size_t size, const exec_stage_ops_t *ops, exec_stage_t *child)
{
    /* Stages hold bson_t members, which libbson aligns to 128 bytes. */
    exec_stage_t *s = bson_aligned_alloc0(128, (size + 127) & ~(size_t)127);
    s->ops = ops;
    s->child = child;
    return s;
}

static int
check_interrupt(exec_ctx_t *ctx, int64_t n, shl_status_t *st)
{
    if ((n % INTERRUPT_EVERY) != 0 || ctx->op == NULL) {
        return 0;
    }
    return shl_op_check_interrupt(ctx->op, st);
}

/* Run the filter; an evaluation error ($expr) fails the query as in MongoDB. */
static int
filter_doc(const shl_matcher_t *filter, const bson_t *doc, bool *matched, shl_status_t *st)
{
    *matched = true;
    if (filter == NULL) {
        return 0;
    }
    return shl_matcher_match(filter, doc, NULL, matched, st);
}

static void
explain_filter(const shl_matcher_t *filter, bson_t *out)
{
    if (filter != NULL && !shl_matcher_is_trivial(filter)) {
        BSON_APPEND_DOCUMENT(out, "filter", shl_matcher_filter(filter));
    }
}

/* ---------------------------------------------------------------- EOF */

static int
eof_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    (void)s;
    (void)ctx;
    (void)row;
    (void)st;
    *eof = true;
    return 0;
}

static const exec_stage_ops_t eof_ops = {"EOF", eof_next, NULL, NULL};

exec_stage_t *
exec_eof_new(void)
{
    return stage_alloc(sizeof(exec_stage_t), &eof_ops, NULL);
}

/* ---------------------------------------------------------------- COLLSCAN */

typedef struct collscan {
    exec_stage_t base;
    const shl_collection_t *coll;
    bool forward;
    const shl_matcher_t *filter;
    int64_t min_rid; /* seek here first (oplog ts); 0: from the start */
    shl_record_cursor_t *cur;
    bson_t doc; /* view of the current record */
} collscan_t;

static int
collscan_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    collscan_t *c = (collscan_t *)s;
    int ret = 0;

    if (c->cur == NULL) {
        SHL_ERR(shl_record_cursor_open(ctx->txn, c->coll, c->forward, &c->cur, st));
        if (c->min_rid > 0) {
            shl_record_cursor_seek(c->cur, c->min_rid);
        }
    }
    for (;;) {
        int64_t rid;
        bool end = false, matched;

        SHL_ERR(check_interrupt(ctx, s->stats.docs_examined + 1, st));
        SHL_ERR(shl_record_cursor_next(c->cur, &rid, &c->doc, &end, st));
        if (end) {
            *eof = true;
            break;
        }
        s->stats.docs_examined++;
        SHL_ERR(filter_doc(c->filter, &c->doc, &matched, st));
        if (matched) {
            row->rid = rid;
            row->doc = &c->doc;
            break;
        }
    }
done:
    return ret;
}

static void
collscan_explain(const exec_stage_t *s, bson_t *out)
{
    const collscan_t *c = (const collscan_t *)s;
    explain_filter(c->filter, out);
    BSON_APPEND_UTF8(out, "direction", c->forward ? "forward" : "backward");
    if (c->min_rid > 0) {
        bson_append_timestamp(out, "minRecord", -1, SHL_TS_SECS(c->min_rid),
                              SHL_TS_INC(c->min_rid));
    }
}

static void
collscan_destroy(exec_stage_t *s)
{
    collscan_t *c = (collscan_t *)s;
    shl_record_cursor_close(c->cur);
}

static const exec_stage_ops_t collscan_ops = {"COLLSCAN", collscan_next, collscan_explain,
                                              collscan_destroy};

exec_stage_t *
exec_collscan_new(const shl_collection_t *coll, bool forward, const shl_matcher_t *filter,
                  int64_t min_rid)
{
    collscan_t *c = (collscan_t *)stage_alloc(sizeof(collscan_t), &collscan_ops, NULL);
    c->coll = coll;
    c->forward = forward;
    c->filter = filter;
    c->min_rid = min_rid;
    return &c->base;
}

/* ---------------------------------------------------------------- IDHACK */

typedef struct idhack {
    exec_stage_t base;
    const shl_collection_t *coll;
    bson_value_t id; /* owned copy */
    bool done;
    bson_t doc;
    bool has_doc;
} idhack_t;

static int
idhack_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    idhack_t *h = (idhack_t *)s;
    int ret = 0;
    bool found = false;
    int64_t rid = 0;

    if (h->done) {
        *eof = true;
        return 0;
    }
    h->done = true;
    if (h->has_doc) {
        bson_destroy(&h->doc);
        h->has_doc = false;
    }
    ret = shl_doc_find_by_id(ctx->txn, h->coll, &h->id, &h->doc, &rid, &found, st);
    h->has_doc = true;
    SHL_ERR(ret);
    s->stats.keys_examined++;
    if (!found) {
        *eof = true;
        goto done;
    }
    s->stats.docs_examined++;
    row->rid = rid;
    row->doc = &h->doc;
done:
    return ret;
}

static void
idhack_explain(const exec_stage_t *s, bson_t *out)
{
    (void)s;
    (void)out;
}

static void
idhack_destroy(exec_stage_t *s)
{
    idhack_t *h = (idhack_t *)s;
    bson_value_destroy(&h->id);
    if (h->has_doc) {
        bson_destroy(&h->doc);
    }
}

static const exec_stage_ops_t idhack_ops = {"IDHACK", idhack_next, idhack_explain, idhack_destroy};

exec_stage_t *
exec_idhack_new(const shl_collection_t *coll, const bson_value_t *id)
{
    idhack_t *h = (idhack_t *)stage_alloc(sizeof(idhack_t), &idhack_ops, NULL);
    h->coll = coll;
    bson_value_copy(id, &h->id);
    return &h->base;
}

/* ---------------------------------------------------------------- IXSCAN */

/* An open-addressing set of RecordIds, to return each document once from a possibly
 * multikey index (storage does not say whether an index is multikey). */
typedef struct rid_set {
    int64_t *slots; /* 0 = empty; RecordIds are > 0 */
    size_t cap, n;
} rid_set_t;

static bool
rid_set_add(rid_set_t *set, int64_t rid)
{
    size_t i;
    if ((set->n + 1) * 2 > set->cap) {
        size_t ncap = set->cap ? set->cap * 2 : 1024;
        int64_t *ns = bson_malloc0(ncap * sizeof(int64_t));
        for (size_t j = 0; j < set->cap; j++) {
            if (set->slots[j] != 0) {
                size_t k = ((uint64_t)set->slots[j] * 0x9E3779B97F4A7C15ull) & (ncap - 1);
                while (ns[k] != 0) {
                    k = (k + 1) & (ncap - 1);
                }
                ns[k] = set->slots[j];
            }
        }
        bson_free(set->slots);
        set->slots = ns;
        set->cap = ncap;
    }
    i = ((uint64_t)rid * 0x9E3779B97F4A7C15ull) & (set->cap - 1);
    while (set->slots[i] != 0) {
        if (set->slots[i] == rid) {
            return false;
        }
        i = (i + 1) & (set->cap - 1);
    }
    set->slots[i] = rid;
    set->n++;
    return true;
}

typedef struct ixscan {
    exec_stage_t base;
    const shl_index_t *idx;
    uint8_t *start, *end;
    size_t start_len, end_len;
    bool has_start, has_end;
    bool forward;
    char bounds_desc[256];
    bson_t *bounds; /* explain's indexBounds, NULL: {description} */
    shl_index_cursor_t *cur;
    rid_set_t seen;
    /* Further intervals, scanned in order after the first (exec_ixscan_add_interval). */
    struct ixscan_iv {
        uint8_t *start, *end;
        size_t start_len, end_len;
    } * more;
    size_t nmore, next_more;
} ixscan_t;

static int
ixscan_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    ixscan_t *x = (ixscan_t *)s;
    int ret = 0;

    if (x->cur == NULL) {
        shl_key_bound_t b0 = {x->has_start ? x->start : NULL, x->start_len};
        shl_key_bound_t b1 = {x->has_end ? x->end : NULL, x->end_len};
        SHL_ERR(shl_index_cursor_open(ctx->txn, x->idx, &b0, &b1, x->forward, &x->cur, st));
    }
    for (;;) {
        int64_t rid;
        bool end = false;

        const uint8_t *key = NULL;
        size_t key_len = 0;

        SHL_ERR(check_interrupt(ctx, s->stats.keys_examined + 1, st));
        if (trial_works != NULL && *trial_works <= 0) {
            trial_cut = true;
            *eof = true;
            break;
        }
        SHL_ERR(shl_index_cursor_next(x->cur, &rid, &key, &key_len, &end, st));
        if (end && x->next_more < x->nmore) {
            const struct ixscan_iv *iv = &x->more[x->next_more++];
            shl_key_bound_t b0 = {iv->start, iv->start_len};
            shl_key_bound_t b1 = {iv->end, iv->end_len};
            shl_index_cursor_close(x->cur);
            x->cur = NULL;
            SHL_ERR(shl_index_cursor_open(ctx->txn, x->idx, &b0, &b1, x->forward, &x->cur, st));
            continue;
        }
        if (end) {
            *eof = true;
            break;
        }
        s->stats.keys_examined++;
        if (trial_works != NULL) {
            (*trial_works)--;
        }
        /* Dedup even on unique indexes: an update through this scan may move an entry
         * ahead of the cursor (a changed key), which must not be visited twice. */
        {
            s->stats.dups_tested++;
            if (!rid_set_add(&x->seen, rid)) {
                s->stats.dups_dropped++;
                continue;
            }
        }
        row->rid = rid;
        row->key = key;
        row->key_len = key_len;
        break;
    }
done:
    return ret;
}

/* explain's multiKeyPaths: {field: [field]} for fields that held arrays, else []. */
static void
multikey_paths_explain(const shl_index_t *idx, bson_t *out)
{
    bson_t d;
    bson_iter_t kp;
    size_t i = 0;
    BSON_APPEND_DOCUMENT_BEGIN(out, "multiKeyPaths", &d);
    if (bson_iter_init(&kp, idx->key_pattern)) {
        while (shl_iter_next(&kp)) {
            bson_t arr;
            bool on = (idx->multikey_paths & (1ull << (i < 63 ? i : 63))) != 0;
            bson_append_array_begin(&d, shl_iter_key(&kp), -1, &arr);
            if (on) {
                BSON_APPEND_UTF8(&arr, "0", shl_iter_key(&kp));
            }
            bson_append_array_end(&d, &arr);
            i++;
        }
    }
    bson_append_document_end(out, &d);
}

/* The index's fields of an IXSCAN or COUNT_SCAN stage's explain (MongoDB's order; the
 * collation only for an index that has one). */
static void
index_explain_fields(const shl_index_t *idx, bson_t *out)
{
    bson_iter_t it;
    BSON_APPEND_DOCUMENT(out, "keyPattern", idx->key_pattern);
    BSON_APPEND_UTF8(out, "indexName", idx->name);
    if (bson_iter_init_find(&it, idx->spec, "collation") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_append_iter(out, "collation", -1, &it);
    }
    BSON_APPEND_BOOL(out, "isMultiKey", idx->multikey);
    multikey_paths_explain(idx, out);
    BSON_APPEND_BOOL(out, "isUnique", idx->unique);
    BSON_APPEND_BOOL(out, "isSparse",
                     bson_iter_init_find(&it, idx->spec, "sparse") && bson_iter_as_bool(&it));
    BSON_APPEND_BOOL(out, "isPartial",
                     bson_iter_init_find(&it, idx->spec, "partialFilterExpression"));
    BSON_APPEND_INT32(out, "indexVersion", 2);
}

static void
ixscan_explain(const exec_stage_t *s, bson_t *out)
{
    const ixscan_t *x = (const ixscan_t *)s;
    bson_t b;
    index_explain_fields(x->idx, out);
    BSON_APPEND_UTF8(out, "direction", x->forward ? "forward" : "backward");
    if (x->bounds != NULL) {
        BSON_APPEND_DOCUMENT(out, "indexBounds", x->bounds);
        return;
    }
    BSON_APPEND_DOCUMENT_BEGIN(out, "indexBounds", &b);
    BSON_APPEND_UTF8(&b, "description", x->bounds_desc);
    bson_append_document_end(out, &b);
}

static void
ixscan_destroy(exec_stage_t *s)
{
    ixscan_t *x = (ixscan_t *)s;
    shl_index_cursor_close(x->cur);
    if (x->bounds != NULL) {
        bson_destroy(x->bounds);
    }
    bson_free(x->start);
    bson_free(x->end);
    bson_free(x->seen.slots);
    for (size_t i = 0; i < x->nmore; i++) {
        bson_free(x->more[i].start);
        bson_free(x->more[i].end);
    }
    bson_free(x->more);
}

static const exec_stage_ops_t ixscan_ops = {"IXSCAN", ixscan_next, ixscan_explain, ixscan_destroy};

/* 'in' ({field: ["[lo, hi]", ...]}) with strings that are not UTF-8 -- a collated index's
 * bounds hold ICU sort keys -- written with their other bytes as \xNN, so that drivers can
 * decode explain's indexBounds. */
static void
printable_bounds(const bson_t *in, bson_t *out)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, in)) {
        return;
    }
    while (shl_iter_next(&it)) {
        const bson_value_t *v = bson_iter_value(&it);
        if (v->value_type == BSON_TYPE_UTF8 &&
            !bson_utf8_validate(v->value.v_utf8.str, v->value.v_utf8.len, false)) {
            bson_string_t *esc = bson_string_new(NULL);
            for (uint32_t i = 0; i < v->value.v_utf8.len; i++) {
                uint8_t c = (uint8_t)v->value.v_utf8.str[i];
                if (c >= 0x20 && c < 0x7f) {
                    bson_string_append_c(esc, (char)c);
                } else {
                    bson_string_append_printf(esc, "\\x%02x", c);
                }
            }
            bson_append_utf8(out, shl_iter_key(&it), -1, esc->str, (int)esc->len);
            bson_string_free(esc, true);
        } else if (v->value_type == BSON_TYPE_ARRAY || v->value_type == BSON_TYPE_DOCUMENT) {
            bson_t sub, child;
            bson_init_static(&sub, v->value.v_doc.data, v->value.v_doc.data_len);
            if (v->value_type == BSON_TYPE_ARRAY) {
                bson_append_array_begin(out, shl_iter_key(&it), -1, &child);
            } else {
                bson_append_document_begin(out, shl_iter_key(&it), -1, &child);
            }
            printable_bounds(&sub, &child);
            if (v->value_type == BSON_TYPE_ARRAY) {
                bson_append_array_end(out, &child);
            } else {
                bson_append_document_end(out, &child);
            }
        } else {
            bson_append_value(out, shl_iter_key(&it), -1, v);
        }
    }
}

void
exec_ixscan_set_bounds(exec_stage_t *s, const bson_t *bounds)
{
    ixscan_t *x = (ixscan_t *)s;
    if (x->bounds != NULL) {
        bson_destroy(x->bounds);
    }
    x->bounds = bson_new();
    printable_bounds(bounds, x->bounds);
}

static uint8_t *
dup_bytes(const uint8_t *p, size_t n)
{
    uint8_t *out = bson_malloc(n > 0 ? n : 1);
    if (n > 0) {
        memcpy(out, p, n);
    }
    return out;
}

void
exec_ixscan_add_interval(exec_stage_t *s, const shl_key_bound_t *start, const shl_key_bound_t *end)
{
    ixscan_t *x = (ixscan_t *)s;
    struct ixscan_iv *iv;
    x->more = bson_realloc(x->more, (x->nmore + 1) * sizeof(*x->more));
    iv = &x->more[x->nmore++];
    memset(iv, 0, sizeof(*iv));
    if (start != NULL && start->data != NULL) {
        iv->start = dup_bytes(start->data, start->len);
        iv->start_len = start->len;
    }
    if (end != NULL && end->data != NULL) {
        iv->end = dup_bytes(end->data, end->len);
        iv->end_len = end->len;
    }
}

exec_stage_t *
exec_ixscan_new(const shl_index_t *idx, const shl_key_bound_t *start, const shl_key_bound_t *end,
                bool forward, const char *bounds_desc)
{
    ixscan_t *x = (ixscan_t *)stage_alloc(sizeof(ixscan_t), &ixscan_ops, NULL);
    x->idx = idx;
    x->forward = forward;
    if (start != NULL && start->data != NULL) {
        x->start = dup_bytes(start->data, start->len);
        x->start_len = start->len;
        x->has_start = true;
    }
    if (end != NULL && end->data != NULL) {
        x->end = dup_bytes(end->data, end->len);
        x->end_len = end->len;
        x->has_end = true;
    }
    snprintf(x->bounds_desc, sizeof(x->bounds_desc), "%s", bounds_desc ? bounds_desc : "");
    return &x->base;
}

/* ---------------------------------------------------------------- FETCH */

typedef struct fetch {
    exec_stage_t base;
    const shl_collection_t *coll;
    const shl_matcher_t *filter;
    bson_t doc;
    bool has_doc;
} fetch_t;

static int
fetch_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    fetch_t *f = (fetch_t *)s;
    int ret = 0;

    for (;;) {
        exec_row_t in;
        bool found = false, matched;

        SHL_ERR(exec_stage_next(s->child, ctx, &in, eof, st));
        if (*eof) {
            break;
        }
        if (f->has_doc) {
            bson_destroy(&f->doc);
            f->has_doc = false;
        }
        ret = shl_record_get(ctx->txn, f->coll, in.rid, &f->doc, &found, st);
        f->has_doc = true;
        SHL_ERR(ret);
        if (!found) {
            /* An index entry whose record is gone in this snapshot cannot happen (both
             * change in one transaction); skip it rather than fail. */
            continue;
        }
        s->stats.docs_examined++;
        SHL_ERR(filter_doc(f->filter, &f->doc, &matched, st));
        if (matched) {
            row->rid = in.rid;
            row->doc = &f->doc;
            /* The entry's key rides along (valid until the next pull): RETURN_KEY. */
            row->key = in.key;
            row->key_len = in.key_len;
            break;
        }
    }
done:
    return ret;
}

static void
fetch_explain(const exec_stage_t *s, bson_t *out)
{
    explain_filter(((const fetch_t *)s)->filter, out);
}

static void
fetch_destroy(exec_stage_t *s)
{
    fetch_t *f = (fetch_t *)s;
    if (f->has_doc) {
        bson_destroy(&f->doc);
    }
}

static const exec_stage_ops_t fetch_ops = {"FETCH", fetch_next, fetch_explain, fetch_destroy};

exec_stage_t *
exec_fetch_new(exec_stage_t *child, const shl_collection_t *coll, const shl_matcher_t *filter)
{
    fetch_t *f = (fetch_t *)stage_alloc(sizeof(fetch_t), &fetch_ops, child);
    f->coll = coll;
    f->filter = filter;
    return &f->base;
}

/* ---------------------------------------------------------------- SORT */

typedef struct sort_stage {
    exec_stage_t base;
    const shl_sort_pattern_t *pattern;
    const bson_t *pattern_doc;
    int64_t limit;
    shl_sorter_t *sorter;
    bool sorted;
    /* showRecordId: each input row's RecordId rides through the sorter as a trailing
     * "$recordId" field, taken off again on the way out. */
    bool keep_rid;
    bson_t out;
    bool has_out;
} sort_stage_t;

#define RID_FIELD "$recordId"

static int
sort_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    sort_stage_t *so = (sort_stage_t *)s;
    int ret = 0;
    const bson_t *doc;

    if (!so->sorted) {
        so->sorter = shl_sorter_new(so->pattern, so->limit, 0);
        for (;;) {
            exec_row_t in;
            bool end;
            SHL_ERR(exec_stage_next(s->child, ctx, &in, &end, st));
            if (end) {
                break;
            }
            if (so->keep_rid) {
                bson_t tagged;
                bson_copy_to(in.doc, &tagged);
                BSON_APPEND_INT64(&tagged, RID_FIELD, in.rid);
                ret = shl_sorter_add(so->sorter, &tagged, st);
                bson_destroy(&tagged);
                SHL_ERR(ret);
            } else {
                SHL_ERR(shl_sorter_add(so->sorter, in.doc, st));
            }
        }
        shl_sorter_finish(so->sorter);
        so->sorted = true;
    }
    doc = shl_sorter_next(so->sorter);
    if (doc == NULL) {
        *eof = true;
    } else if (so->keep_rid) {
        bson_iter_t it;
        if (so->has_out) {
            bson_destroy(&so->out);
        }
        bson_init(&so->out);
        so->has_out = true;
        if (bson_iter_init(&it, doc)) {
            while (shl_iter_next(&it)) {
                if (strcmp(shl_iter_key(&it), RID_FIELD) == 0 && BSON_ITER_HOLDS_INT64(&it)) {
                    row->rid = bson_iter_int64(&it);
                } else {
                    bson_append_iter(&so->out, NULL, 0, &it);
                }
            }
        }
        row->doc = &so->out;
    } else {
        row->doc = doc;
    }
done:
    return ret;
}

static void
sort_explain(const exec_stage_t *s, bson_t *out)
{
    const sort_stage_t *so = (const sort_stage_t *)s;
    BSON_APPEND_DOCUMENT(out, "sortPattern", so->pattern_doc);
    BSON_APPEND_UTF8(out, "type", "simple");
    if (so->limit > 0) {
        BSON_APPEND_INT64(out, "limitAmount", so->limit);
    }
    BSON_APPEND_INT64(out, "memLimit", 0);
}

static void
sort_destroy(exec_stage_t *s)
{
    sort_stage_t *so = (sort_stage_t *)s;
    if (so->sorter != NULL) {
        shl_sorter_destroy(so->sorter);
    }
    if (so->has_out) {
        bson_destroy(&so->out);
    }
}

void
exec_sort_keep_record_ids(exec_stage_t *s)
{
    ((sort_stage_t *)s)->keep_rid = true;
}

static const exec_stage_ops_t sort_ops = {"SORT", sort_next, sort_explain, sort_destroy};

exec_stage_t *
exec_sort_new(exec_stage_t *child, const shl_sort_pattern_t *pattern, const bson_t *pattern_doc,
              int64_t limit)
{
    sort_stage_t *so = (sort_stage_t *)stage_alloc(sizeof(sort_stage_t), &sort_ops, child);
    so->pattern = pattern;
    so->pattern_doc = pattern_doc;
    so->limit = limit;
    return &so->base;
}

/* ---------------------------------------------------------------- RETURN_KEY */

typedef struct return_key_stage {
    exec_stage_t base;
    bson_t *key_pattern; /* owned copy, NULL: no index */
    bool unique;         /* the index's keys carry no RecordId */
    bool desc[32];       /* key fields' directions, for decoding entries */
    size_t nfields;
    bool return_key, show_record_id;
    bson_t out;
    bool has_out;
} return_key_stage_t;

/* One key field of 'doc': the value at the path (missing is null), hashed for a hashed
 * field. An array (a multikey document) is the scanned entry's value 'entry' when the row
 * still carries it, else its first element. */
static void
append_key_field(bson_t *out, const char *path, const bson_iter_t *kind, const bson_t *doc,
                 const bson_value_t *entry)
{
    bson_value_t v;
    bool found = doc != NULL && shl_bson_path_get_value(doc, path, &v);
    bson_t arr;
    bson_iter_t el;

    if (found && v.value_type == BSON_TYPE_ARRAY && entry != NULL) {
        BSON_APPEND_VALUE(out, path, entry);
        return;
    }
    if (found && v.value_type == BSON_TYPE_ARRAY &&
        bson_init_static(&arr, v.value.v_doc.data, v.value.v_doc.data_len) &&
        bson_iter_init(&el, &arr)) {
        found = shl_iter_next(&el);
        if (found) {
            v = *bson_iter_value(&el);
        }
    }
    if (!found) {
        v.value_type = BSON_TYPE_NULL;
    }
    if (BSON_ITER_HOLDS_UTF8(kind) && strcmp(bson_iter_utf8(kind, NULL), "hashed") == 0) {
        BSON_APPEND_INT64(out, path, shl_bson_hash_value(&v, SHL_BSON_HASH_DEFAULT_SEED));
    } else {
        BSON_APPEND_VALUE(out, path, &v);
    }
}

static int
return_key_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    return_key_stage_t *r = (return_key_stage_t *)s;
    int ret = 0;
    bson_iter_t kp;

    SHL_ERR(exec_stage_next(s->child, ctx, row, eof, st));
    if (*eof) {
        goto done;
    }
    if (r->has_out) {
        bson_destroy(&r->out);
    }
    bson_init(&r->out);
    r->has_out = true;
    if (!r->return_key) {
        bson_concat(&r->out, row->doc);
    } else if (r->key_pattern != NULL && bson_iter_init(&kp, r->key_pattern)) {
        bson_t entry;
        bson_iter_t ev;
        int64_t rid;
        bool have = row->key != NULL && r->nfields > 0 &&
                    shl_keystring_decode(row->key, row->key_len, r->desc, r->nfields, &entry,
                                         r->unique ? NULL : &rid);
        if (row->key == NULL || r->nfields == 0) {
            bson_init(&entry);
        }
        have = have && bson_iter_init(&ev, &entry);
        while (shl_iter_next(&kp)) {
            bool has_ev = have && shl_iter_next(&ev);
            append_key_field(&r->out, shl_iter_key(&kp), &kp, row->doc,
                             has_ev ? bson_iter_value(&ev) : NULL);
        }
        bson_destroy(&entry);
    }
    if (r->show_record_id && row->rid != 0) {
        BSON_APPEND_INT64(&r->out, RID_FIELD, row->rid);
    }
    row->doc = &r->out;
done:
    return ret;
}

static void
return_key_destroy(exec_stage_t *s)
{
    return_key_stage_t *r = (return_key_stage_t *)s;
    if (r->has_out) {
        bson_destroy(&r->out);
    }
    if (r->key_pattern != NULL) {
        bson_destroy(r->key_pattern);
    }
}

static const exec_stage_ops_t return_key_ops = {"RETURN_KEY", return_key_next, NULL,
                                                return_key_destroy};
static const exec_stage_ops_t record_id_ops = {"PROJECTION_DEFAULT", return_key_next, NULL,
                                               return_key_destroy};

exec_stage_t *
exec_return_key_new(exec_stage_t *child, const bson_t *key_pattern, bool unique, bool return_key,
                    bool show_record_id)
{
    return_key_stage_t *r = (return_key_stage_t *)stage_alloc(
        sizeof(return_key_stage_t), return_key ? &return_key_ops : &record_id_ops, child);
    bson_iter_t kp;
    r->key_pattern = key_pattern != NULL ? bson_copy(key_pattern) : NULL;
    r->unique = unique;
    if (key_pattern != NULL && bson_iter_init(&kp, key_pattern)) {
        while (shl_iter_next(&kp)) {
            if (r->nfields == sizeof(r->desc) / sizeof(r->desc[0])) {
                r->nfields = 0; /* too many to decode: documents only */
                break;
            }
            r->desc[r->nfields++] = BSON_ITER_HOLDS_NUMBER(&kp) && bson_iter_as_double(&kp) < 0;
        }
    }
    r->return_key = return_key;
    r->show_record_id = show_record_id;
    return &r->base;
}

/* ---------------------------------------------------------------- SKIP, LIMIT */

typedef struct counted {
    exec_stage_t base;
    int64_t amount;
    int64_t seen;
} counted_t;

static int
skip_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    counted_t *c = (counted_t *)s;
    int ret = 0;
    for (;;) {
        SHL_ERR(exec_stage_next(s->child, ctx, row, eof, st));
        if (*eof || c->seen >= c->amount) {
            break;
        }
        c->seen++;
    }
done:
    return ret;
}

static void
skip_explain(const exec_stage_t *s, bson_t *out)
{
    BSON_APPEND_INT64(out, "skipAmount", ((const counted_t *)s)->amount);
}

static int
limit_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    counted_t *c = (counted_t *)s;
    int ret = 0;
    if (c->seen >= c->amount) {
        *eof = true;
        return 0;
    }
    SHL_ERR(exec_stage_next(s->child, ctx, row, eof, st));
    if (!*eof) {
        c->seen++;
    }
done:
    return ret;
}

static void
limit_explain(const exec_stage_t *s, bson_t *out)
{
    BSON_APPEND_INT64(out, "limitAmount", ((const counted_t *)s)->amount);
}

static const exec_stage_ops_t skip_ops = {"SKIP", skip_next, skip_explain, NULL};
static const exec_stage_ops_t limit_ops = {"LIMIT", limit_next, limit_explain, NULL};

exec_stage_t *
exec_skip_new(exec_stage_t *child, int64_t skip)
{
    counted_t *c = (counted_t *)stage_alloc(sizeof(counted_t), &skip_ops, child);
    c->amount = skip;
    return &c->base;
}

exec_stage_t *
exec_limit_new(exec_stage_t *child, int64_t limit)
{
    counted_t *c = (counted_t *)stage_alloc(sizeof(counted_t), &limit_ops, child);
    c->amount = limit;
    return &c->base;
}

/* ---------------------------------------------------------------- SHARDING_FILTER */

typedef struct sharding_filter_stage {
    exec_stage_t base;
    const shl_db_orphan_filter_t *filter;
    int64_t chunk_skips;
} sharding_filter_stage_t;

static int
sharding_filter_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    sharding_filter_stage_t *f = (sharding_filter_stage_t *)s;
    int ret = 0;
    for (;;) {
        SHL_ERR(exec_stage_next(s->child, ctx, row, eof, st));
        /* Rows always carry their document here: the access path fetches. */
        if (*eof || row->doc == NULL || shl_db_orphan_filter_owns(f->filter, row->doc)) {
            break;
        }
        f->chunk_skips++;
    }
done:
    return ret;
}

static void
sharding_filter_explain(const exec_stage_t *s, bson_t *out)
{
    BSON_APPEND_INT64(out, "chunkSkips", ((const sharding_filter_stage_t *)s)->chunk_skips);
}

static const exec_stage_ops_t sharding_filter_ops = {"SHARDING_FILTER", sharding_filter_next,
                                                     sharding_filter_explain, NULL};

exec_stage_t *
exec_sharding_filter_new(exec_stage_t *child, const shl_db_orphan_filter_t *filter)
{
    sharding_filter_stage_t *f = (sharding_filter_stage_t *)stage_alloc(
        sizeof(sharding_filter_stage_t), &sharding_filter_ops, child);
    f->filter = filter;
    return &f->base;
}

/* ---------------------------------------------------------------- TEXT_MATCH */

typedef struct text_match_stage {
    exec_stage_t base;
    shl_text_index_t *ti;
    shl_text_query_t *tq;
    int64_t docs_rejected;
    bool add_score;
    bool pass_all;
    bson_t scored;           /* the last document with its score (add_score) */
    shl_matcher_t *searcher; /* a matcher whose $text under $or searches with tq, or NULL */
} text_match_stage_t;

static int
text_match_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    text_match_stage_t *t = (text_match_stage_t *)s;
    int ret = 0;
    for (;;) {
        bool matched = false;
        double score = 0;
        SHL_ERR(exec_stage_next(s->child, ctx, row, eof, st));
        if (*eof || row->doc == NULL) {
            break;
        }
        SHL_ERR(shl_text_query_match(t->tq, row->doc, &matched, &score, st));
        if (matched && t->add_score) {
            bson_reinit(&t->scored);
            bson_copy_to_excluding_noinit(row->doc, &t->scored, SHL_TEXT_SCORE_FIELD, NULL);
            BSON_APPEND_DOUBLE(&t->scored, SHL_TEXT_SCORE_FIELD, score);
            row->doc = &t->scored;
        }
        if (matched || t->pass_all) {
            break;
        }
        t->docs_rejected++;
    }
done:
    return ret;
}

static void
text_match_explain(const exec_stage_t *s, bson_t *out)
{
    BSON_APPEND_INT64(out, "docsRejected", ((const text_match_stage_t *)s)->docs_rejected);
}

static void
text_match_destroy(exec_stage_t *s)
{
    text_match_stage_t *t = (text_match_stage_t *)s;
    if (t->searcher != NULL) {
        shl_matcher_unset_text(t->searcher, t->tq); /* tq goes: no search with it after */
    }
    shl_text_query_destroy(t->tq);
    shl_text_index_destroy(t->ti);
    bson_destroy(&t->scored);
}

static const exec_stage_ops_t text_match_ops = {"TEXT_MATCH", text_match_next,
                                                text_match_explain, text_match_destroy};

exec_stage_t *
exec_text_match_new(exec_stage_t *child, shl_text_index_t *ti, shl_text_query_t *tq, bool add_score,
                    bool pass_all, shl_matcher_t *searcher, shl_matcher_text_fn searcher_fn)
{
    text_match_stage_t *t = (text_match_stage_t *)stage_alloc(sizeof(text_match_stage_t),
                                                              &text_match_ops, child);
    t->ti = ti;
    t->tq = tq;
    t->add_score = add_score;
    t->pass_all = pass_all;
    bson_init(&t->scored);
    if (pass_all && searcher_fn != NULL && searcher != NULL) {
        shl_matcher_set_text(searcher, searcher_fn, tq);
        t->searcher = searcher;
    }
    return &t->base;
}

/* ---------------------------------------------------------------- PROJECTION */

typedef struct projection_stage {
    exec_stage_t base;
    const shl_projection_t *proj;
    const bson_t *spec;
    const shl_matcher_t *filter;
    const bson_t *vars; /* `let` variables, borrowed from the query */
    bson_t out;
    bool has_out;
} projection_stage_t;

static int
projection_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    projection_stage_t *p = (projection_stage_t *)s;
    int ret = 0;
    shl_match_details_t details;
    const shl_match_details_t *dp = NULL;

    SHL_ERR(exec_stage_next(s->child, ctx, row, eof, st));
    if (*eof) {
        goto done;
    }
    if (p->has_out) {
        bson_destroy(&p->out);
        p->has_out = false;
    }
    if (shl_projection_needs_match_details(p->proj) && p->filter != NULL) {
        /* Rows do not carry the matcher's array position through SORT; recompute it. */
        bool matched;
        memset(&details, 0, sizeof(details));
        SHL_ERR(shl_matcher_match(p->filter, row->doc, &details, &matched, st));
        dp = &details;
    }
    ret = shl_projection_apply(p->proj, row->doc, dp, p->vars, &p->out, st);
    p->has_out = true;
    SHL_ERR(ret);
    row->doc = &p->out;
done:
    return ret;
}

static void
projection_explain(const exec_stage_t *s, bson_t *out)
{
    BSON_APPEND_DOCUMENT(out, "transformBy", ((const projection_stage_t *)s)->spec);
}

static void
projection_destroy(exec_stage_t *s)
{
    projection_stage_t *p = (projection_stage_t *)s;
    if (p->has_out) {
        bson_destroy(&p->out);
    }
}

void
exec_projection_set_vars(exec_stage_t *s, const bson_t *vars)
{
    ((projection_stage_t *)s)->vars = vars;
}

static const exec_stage_ops_t projection_default_ops = {"PROJECTION_DEFAULT", projection_next,
                                                        projection_explain, projection_destroy};
static const exec_stage_ops_t projection_simple_ops = {"PROJECTION_SIMPLE", projection_next,
                                                       projection_explain, projection_destroy};

exec_stage_t *
exec_projection_new(exec_stage_t *child, const shl_projection_t *proj, const bson_t *spec,
                    bool simple, const shl_matcher_t *filter)
{
    projection_stage_t *p = (projection_stage_t *)stage_alloc(
        sizeof(projection_stage_t), simple ? &projection_simple_ops : &projection_default_ops,
        child);
    p->proj = proj;
    p->spec = spec;
    p->filter = filter;
    return &p->base;
}

/* ---------------------------------------------------------------- OR */

typedef struct or_stage {
    exec_stage_t base;
    size_t cur; /* the input being read */
    rid_set_t seen;
} or_stage_t;

static int
or_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    or_stage_t *o = (or_stage_t *)s;
    int ret = 0;

    while (o->cur < s->nchildren) {
        bool end = false;
        SHL_ERR(exec_stage_next(s->children[o->cur], ctx, row, &end, st));
        if (end) {
            if (trial_cut) {
                break; /* a trial's budget ran out: stop everywhere */
            }
            o->cur++;
            continue;
        }
        s->stats.dups_tested++;
        if (!rid_set_add(&o->seen, row->rid)) {
            s->stats.dups_dropped++;
            continue;
        }
        goto done;
    }
    *eof = true;
done:
    return ret;
}

static void
or_explain(const exec_stage_t *s, bson_t *out)
{
    (void)s;
    (void)out;
}

static void
or_destroy(exec_stage_t *s)
{
    bson_free(((or_stage_t *)s)->seen.slots);
}

static const exec_stage_ops_t or_ops = {"OR", or_next, or_explain, or_destroy};
/* The union of a text search's term scans, named as MongoDB's explain names it. */
static const exec_stage_ops_t text_or_ops = {"TEXT_OR", or_next, or_explain, or_destroy};

exec_stage_t *
exec_or_new(exec_stage_t **children, size_t n)
{
    return exec_or_new_named(children, n, false);
}

exec_stage_t *
exec_or_new_named(exec_stage_t **children, size_t n, bool text)
{
    or_stage_t *o =
        (or_stage_t *)stage_alloc(sizeof(or_stage_t), text ? &text_or_ops : &or_ops, NULL);
    o->base.children = bson_malloc(n * sizeof(exec_stage_t *));
    memcpy(o->base.children, children, n * sizeof(exec_stage_t *));
    o->base.nchildren = n;
    return &o->base;
}

/* ---------------------------------------------------------------- COUNT_SCAN, COUNT */

typedef struct count_scan {
    exec_stage_t base;
    const shl_index_t *idx;
    uint8_t *start, *end;
    size_t start_len, end_len;
    bson_t *bounds;
    shl_index_cursor_t *cur;
} count_scan_t;

static int
count_scan_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    count_scan_t *c = (count_scan_t *)s;
    int ret = 0;
    int64_t rid;
    bool end = false;

    if (c->cur == NULL) {
        shl_key_bound_t b0 = {c->start, c->start_len};
        shl_key_bound_t b1 = {c->end, c->end_len};
        SHL_ERR(shl_index_cursor_open(ctx->txn, c->idx, &b0, &b1, true, &c->cur, st));
    }
    SHL_ERR(check_interrupt(ctx, s->stats.keys_examined + 1, st));
    SHL_ERR(shl_index_cursor_next(c->cur, &rid, NULL, NULL, &end, st));
    if (end) {
        *eof = true;
        goto done;
    }
    s->stats.keys_examined++;
    row->rid = rid;
done:
    return ret;
}

static void
count_scan_explain(const exec_stage_t *s, bson_t *out)
{
    const count_scan_t *c = (const count_scan_t *)s;
    index_explain_fields(c->idx, out);
    BSON_APPEND_DOCUMENT(out, "indexBounds", c->bounds);
}

static void
count_scan_destroy(exec_stage_t *s)
{
    count_scan_t *c = (count_scan_t *)s;
    shl_index_cursor_close(c->cur);
    bson_free(c->start);
    bson_free(c->end);
    bson_destroy(c->bounds);
}

static const exec_stage_ops_t count_scan_ops = {"COUNT_SCAN", count_scan_next, count_scan_explain,
                                                count_scan_destroy};

exec_stage_t *
exec_count_scan_new(const shl_index_t *idx, const shl_key_bound_t *start,
                    const shl_key_bound_t *end, const bson_t *bounds)
{
    count_scan_t *c = (count_scan_t *)stage_alloc(sizeof(count_scan_t), &count_scan_ops, NULL);
    c->idx = idx;
    c->start = dup_bytes(start->data, start->len);
    c->start_len = start->len;
    c->end = dup_bytes(end->data, end->len);
    c->end_len = end->len;
    c->bounds = bson_copy(bounds);
    return &c->base;
}

static int
count_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    return exec_stage_next(s->child, ctx, row, eof, st);
}

static const exec_stage_ops_t count_ops = {"COUNT", count_next, NULL, NULL};

exec_stage_t *
exec_count_new(exec_stage_t *child)
{
    return stage_alloc(sizeof(exec_stage_t), &count_ops, child);
}

/* ---------------------------------------------------------------- PROJECTION_COVERED */

#define COVER_MAX_FIELDS 32

typedef struct covered {
    exec_stage_t base;
    const shl_collection_t *coll;
    const shl_index_t *idx;
    const shl_projection_t *proj;
    const bson_t *spec;
    const shl_matcher_t *filter;
    size_t nfields;
    const char *fields[COVER_MAX_FIELDS]; /* borrowed from the key pattern */
    bool descending[COVER_MAX_FIELDS];
    bool projected[COVER_MAX_FIELDS]; /* included by the projection */
    bson_t out, doc;
    bool has_out, has_doc;
} covered_t;

/*
 * Give the decoded number 'v' of key field 'i' its stored BSON type when the index has
 * only ever held one numeric type in that field (shl_index_t.num_types): int32, int64,
 * or double (not zero: -0.0 decodes as 0). False: the record must say.
 */
static bool
restore_number(const shl_index_t *idx, size_t i, bson_value_t *v)
{
    uint64_t m = idx->num_types;
    int only = -1;

    if ((m & SHL_NUM_TYPES_UNKNOWN) != 0 || i >= 15) {
        return false;
    }
    for (int t = 0; t < 4; t++) {
        if ((m & SHL_NUM_TYPE_BIT(i, t)) != 0) {
            if (only >= 0) {
                return false;
            }
            only = t;
        }
    }
    switch (only) {
    case 0:
        return v->value_type == BSON_TYPE_INT32;
    case 1:
        if (v->value_type == BSON_TYPE_INT32) {
            int64_t x = v->value.v_int32;
            v->value_type = BSON_TYPE_INT64;
            v->value.v_int64 = x;
        }
        return v->value_type == BSON_TYPE_INT64;
    case 2:
        if (v->value_type == BSON_TYPE_INT32) {
            double x = v->value.v_int32;
            v->value_type = BSON_TYPE_DOUBLE;
            v->value.v_double = x;
        } else if (v->value_type == BSON_TYPE_INT64) {
            double x = (double)v->value.v_int64;
            v->value_type = BSON_TYPE_DOUBLE;
            v->value.v_double = x;
        }
        return v->value_type == BSON_TYPE_DOUBLE && v->value.v_double != 0.0;
    default:
        return false;
    }
}

static int
covered_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st)
{
    covered_t *c = (covered_t *)s;
    int ret = 0;

    for (;;) {
        bson_t vals = BSON_INITIALIZER, keydoc = BSON_INITIALIZER;
        bson_iter_t it;
        int64_t rid = 0;
        bool fetch = false, matched = true, found = false;
        const bson_t *src = &keydoc;
        size_t i = 0;

        SHL_ERR(exec_stage_next(s->child, ctx, row, eof, st));
        if (*eof) {
            bson_destroy(&keydoc);
            break;
        }
        if (row->key != NULL) {
            bson_destroy(&vals);
        }
        if (row->key == NULL ||
            !shl_keystring_decode(row->key, row->key_len, c->descending, c->nfields, &vals,
                                  c->idx->rid_suffix ? &rid : NULL)) {
            fetch = true;
        } else {
            if (bson_iter_init(&it, &vals)) {
                while (shl_iter_next(&it) && i < c->nfields) {
                    bson_value_t v = *bson_iter_value(&it);
                    /* null may be a missing field; a number's BSON type is not kept. */
                    if (BSON_ITER_HOLDS_NULL(&it) || BSON_ITER_HOLDS_UNDEFINED(&it) ||
                        (c->projected[i] &&
                         (BSON_ITER_HOLDS_NUMBER(&it) || BSON_ITER_HOLDS_DECIMAL128(&it)) &&
                         !restore_number(c->idx, i, &v))) {
                        fetch = true;
                    }
                    bson_append_value(&keydoc, c->fields[i], -1, &v);
                    i++;
                }
            }
        }
        bson_destroy(&vals);
        if (fetch) {
            if (c->has_doc) {
                bson_destroy(&c->doc);
                c->has_doc = false;
            }
            ret = shl_record_get(ctx->txn, c->coll, row->rid, &c->doc, &found, st);
            c->has_doc = true;
            if (ret != 0 || !found) {
                bson_destroy(&keydoc);
                SHL_ERR(ret);
                continue;
            }
            s->stats.docs_examined++;
            src = &c->doc;
        }
        ret = filter_doc(c->filter, src, &matched, st);
        if (ret == 0 && matched) {
            if (c->has_out) {
                bson_destroy(&c->out);
            }
            ret = shl_projection_apply(c->proj, src, NULL, NULL, &c->out, st);
            c->has_out = true;
        }
        bson_destroy(&keydoc);
        SHL_ERR(ret);
        if (matched) {
            row->doc = &c->out;
            row->key = NULL;
            break;
        }
    }
done:
    return ret;
}

static void
covered_explain(const exec_stage_t *s, bson_t *out)
{
    const covered_t *c = (const covered_t *)s;
    explain_filter(c->filter, out);
    BSON_APPEND_DOCUMENT(out, "transformBy", c->spec);
}

static void
covered_destroy(exec_stage_t *s)
{
    covered_t *c = (covered_t *)s;
    if (c->has_out) {
        bson_destroy(&c->out);
    }
    if (c->has_doc) {
        bson_destroy(&c->doc);
    }
}

static const exec_stage_ops_t covered_ops = {"PROJECTION_COVERED", covered_next, covered_explain,
                                             covered_destroy};

exec_stage_t *
exec_projection_covered_new(exec_stage_t *ixscan, const shl_collection_t *coll,
                            const shl_index_t *idx, const shl_projection_t *proj,
                            const bson_t *spec, const shl_matcher_t *filter)
{
    covered_t *c = (covered_t *)stage_alloc(sizeof(covered_t), &covered_ops, ixscan);
    bson_iter_t kp, it;
    c->coll = coll;
    c->idx = idx;
    c->proj = proj;
    c->spec = spec;
    c->filter = filter;
    if (bson_iter_init(&kp, idx->key_pattern)) {
        while (shl_iter_next(&kp) && c->nfields < COVER_MAX_FIELDS) {
            size_t i = c->nfields++;
            c->fields[i] = shl_iter_key(&kp);
            c->descending[i] = bson_iter_as_double(&kp) < 0;
            c->projected[i] =
                bson_iter_init_find(&it, spec, c->fields[i]) && bson_iter_as_bool(&it);
        }
    }
    return &c->base;
}
