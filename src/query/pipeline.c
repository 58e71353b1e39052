/*
 * pipeline.c -- aggregation stages as a pull chain: each stage's next() asks its source for
 * documents and produces its own. Buffering stages ($group, $sort) drain their source on the
 * first call. Stages that MongoDB defines as sugar ($count, $sortByCount, $set, $unset,
 * $replaceWith) are rewritten into the core ones at parse time.
 */
#include "query/pipeline.h"

#include <stddef.h>
#include <string.h>

#include "bson/bson_compare.h"
#include "bson/bson_hash.h"
#include "query/expression.h"
#include "query/matcher.h"
#include "query/projection.h"
#include "query/query_private.h"
#include "query/sort.h"

#define PIPE_DEFAULT_MAX_MEMORY (100LL * 1024 * 1024)

typedef enum {
    ST_MATCH,
    ST_PROJECT,
    ST_ADDFIELDS,
    ST_GROUP,
    ST_SORT,
    ST_LIMIT,
    ST_SKIP,
    ST_UNWIND,
    ST_REPLACE_ROOT
} stage_kind_t;

typedef enum {
    ACC_SUM,
    ACC_AVG,
    ACC_MIN,
    ACC_MAX,
    ACC_FIRST,
    ACC_LAST,
    ACC_PUSH,
    ACC_ADDTOSET
} acc_kind_t;

typedef struct accdef {
    char *field;
    acc_kind_t kind;
    shl_expr_t *arg;
} accdef_t;

/* Running state of one accumulator in one group. */
typedef struct accstate {
    int64_t isum;
    double dsum;
    int ntype; /* 0 int32, 1 int64, 2 double */
    int64_t count;
    bool seen;
    bson_value_t val; /* min/max/first/last */
    bson_t arr;       /* push/addToSet */
    uint32_t narr;
} accstate_t;

typedef struct group {
    struct group *hnext;
    struct group *onext; /* insertion order */
    uint64_t hash;
    bson_value_t key;
    accstate_t *acc;
} group_t;

typedef struct stage stage_t;
struct stage {
    stage_kind_t kind;
    stage_t *src; /* NULL: the pipeline's source */
    struct shl_pipeline *pipe;
    bson_t spec; /* for describe */
    char *name;
    bson_t out;
    bool out_init;
    /* per kind */
    shl_matcher_t *matcher;
    shl_projection_t *proj;
    shl_expr_t *expr; /* group _id, replaceRoot newRoot */
    accdef_t *accs;
    size_t naccs;
    int64_t n, seen;
    shl_sort_pattern_t *pattern;
    shl_sorter_t *sorter;
    bool drained;
    /* group */
    group_t **buckets;
    size_t nbuckets, ngroups;
    group_t *ofirst, *olast, *ocur;
    int64_t mem;
    /* unwind */
    char *path, *index_field;
    bool preserve;
    bson_t cur_in;
    bool have_in;
    bson_iter_t arr_it;
    int64_t arr_idx;
};

struct shl_pipeline {
    stage_t **stages;
    size_t nstages;
    size_t first; /* index of the first live stage */
    shl_pipeline_source_t src;
    shl_pipeline_opts_t opts;
};

/* ---------------------------------------------------------------- helpers */

static int pull(stage_t *s, const bson_t **doc, shl_status_t *st);

static int
pull_src(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    if (s->src != NULL) {
        return pull(s->src, doc, st);
    }
    if (s->pipe->src.next == NULL) {
        *doc = NULL;
        return 0;
    }
    return s->pipe->src.next(s->pipe->src.arg, doc, st);
}

static bson_t *
stage_out(stage_t *s)
{
    if (s->out_init) {
        bson_destroy(&s->out);
    }
    bson_init(&s->out);
    s->out_init = true;
    return &s->out;
}

static void
eval_ctx(const stage_t *s, const bson_t *root, shl_expr_ctx_t *ctx)
{
    ctx->root = root;
    ctx->vars = s->pipe->opts.vars;
    ctx->now_ms = 0;
}

/*
 * copy_set_path --
 *     Copy 'src' into 'out' with the dotted 'path' set to 'v' (appended where missing;
 *     intermediate documents created).
 */
static void
copy_set_path(const bson_t *src, const char *path, const bson_value_t *v, bson_t *out)
{
    const char *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    bool done = false;
    bson_iter_t it;

    if (src != NULL && bson_iter_init(&it, src)) {
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (!done && strlen(k) == len && strncmp(k, path, len) == 0) {
                done = true;
                if (dot == NULL) {
                    if (v->value_type != BSON_TYPE_EOD) {
                        query_append_value(out, k, -1, v);
                    }
                } else {
                    bson_t sub, child;
                    const uint8_t *data;
                    uint32_t dlen;
                    bool have = false;
                    if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                        bson_iter_document(&it, &dlen, &data);
                        have = bson_init_static(&sub, data, dlen);
                    }
                    bson_append_document_begin(out, k, -1, &child);
                    copy_set_path(have ? &sub : NULL, dot + 1, v, &child);
                    bson_append_document_end(out, &child);
                }
                continue;
            }
            bson_append_iter(out, k, -1, &it);
        }
    }
    if (!done && v->value_type != BSON_TYPE_EOD) {
        if (dot == NULL) {
            query_append_value(out, path, (int)len, v);
        } else {
            bson_t child;
            bson_append_document_begin(out, path, (int)len, &child);
            copy_set_path(NULL, dot + 1, v, &child);
            bson_append_document_end(out, &child);
        }
    }
}

/* ---------------------------------------------------------------- simple stages */

static int
next_match(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    shl_match_details_t d = {.vars = s->pipe->opts.vars};

    for (;;) {
        SHL_ERR(pull_src(s, doc, st));
        if (*doc == NULL) {
            break;
        }
        bool m = false;
        ret = shl_matcher_match(s->matcher, *doc, &d, &m, st);
        if (ret != 0) {
            goto done;
        }
        if (m) {
            break;
        }
    }
done:
    return ret;
}

static int
next_project(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;

    *doc = NULL;
    SHL_ERR(pull_src(s, &in, st));
    if (in == NULL) {
        goto done;
    }
    if (s->out_init) {
        bson_destroy(&s->out);
        s->out_init = false;
    }
    ret = shl_projection_apply(s->proj, in, NULL, s->pipe->opts.vars, &s->out, st);
    s->out_init = true;
    if (ret == 0) {
        *doc = &s->out;
    }
done:
    return ret;
}

static int
next_limit(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    if (s->seen >= s->n) {
        *doc = NULL;
        return 0;
    }
    s->seen++;
    return pull_src(s, doc, st);
}

static int
next_skip(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;

    for (;;) {
        SHL_ERR(pull_src(s, doc, st));
        if (*doc == NULL || s->seen >= s->n) {
            break;
        }
        s->seen++;
    }
done:
    return ret;
}

static int
next_replace_root(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;
    shl_expr_ctx_t ctx;
    bson_value_t v;
    bson_t view;
    char *json = NULL;

    v.value_type = BSON_TYPE_EOD;
    *doc = NULL;
    SHL_ERR(pull_src(s, &in, st));
    if (in == NULL) {
        goto done;
    }
    eval_ctx(s, in, &ctx);
    SHL_ERR(shl_expr_evaluate(s->expr, &ctx, &v, st));
    if (v.value_type != BSON_TYPE_DOCUMENT || !query_bson_view(&v, &view)) {
        json = v.value_type == BSON_TYPE_EOD ? bson_strdup("MISSING") : query_value_to_json(&v);
        SHL_FAIL(st, 40228,
                 "'newRoot' expression must evaluate to an object, but resulting value was: %s. "
                 "Type of resulting value: '%s'. Input document: %s",
                 json,
                 v.value_type == BSON_TYPE_EOD
                     ? "missing"
                     : (v.value_type == BSON_TYPE_NULL ? "null" : "other"),
                 "{}");
    }
    bson_concat(stage_out(s), &view);
    *doc = &s->out;
done:
    bson_free(json);
    bson_value_destroy(&v);
    return ret;
}

/* ---------------------------------------------------------------- $unwind */

static int
next_unwind(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;
    bson_iter_t it, found;

    *doc = NULL;
    for (;;) {
        if (s->have_in) {
            if (bson_iter_next(&s->arr_it)) {
                bson_t *o = stage_out(s);
                const bson_value_t *ev = bson_iter_value(&s->arr_it);
                if (s->index_field == NULL) {
                    copy_set_path(&s->cur_in, s->path, ev, o);
                } else {
                    bson_t tmp = BSON_INITIALIZER;
                    bson_value_t iv = {.value_type = BSON_TYPE_INT64};
                    iv.value.v_int64 = s->arr_idx;
                    copy_set_path(&s->cur_in, s->path, ev, &tmp);
                    copy_set_path(&tmp, s->index_field, &iv, o);
                    bson_destroy(&tmp);
                }
                s->arr_idx++;
                *doc = o;
                goto done;
            }
            bson_destroy(&s->cur_in);
            s->have_in = false;
        }
        SHL_ERR(pull_src(s, &in, st));
        if (in == NULL) {
            goto done;
        }
        bool has = bson_iter_init(&it, in) && bson_iter_find_descendant(&it, s->path, &found);
        if (has && BSON_ITER_HOLDS_ARRAY(&found)) {
            bson_iter_t ai;
            if (bson_iter_recurse(&found, &ai) && bson_iter_next(&ai)) {
                bson_copy_to(in, &s->cur_in);
                s->have_in = true;
                bson_iter_recurse(&found, &s->arr_it);
                s->arr_idx = 0;
                continue;
            }
            if (!s->preserve) {
                continue;
            }
            /* Empty array preserved: the field is removed, the index is null. */
            bson_t *o = stage_out(s);
            bson_value_t gone = {.value_type = BSON_TYPE_EOD};
            if (s->index_field != NULL) {
                bson_t tmp = BSON_INITIALIZER;
                bson_value_t nv = {.value_type = BSON_TYPE_NULL};
                copy_set_path(in, s->path, &gone, &tmp);
                copy_set_path(&tmp, s->index_field, &nv, o);
                bson_destroy(&tmp);
            } else {
                copy_set_path(in, s->path, &gone, o);
            }
            *doc = o;
            goto done;
        }
        bool nullish = !has || BSON_ITER_HOLDS_NULL(&found) || BSON_ITER_HOLDS_UNDEFINED(&found);
        if (nullish && !s->preserve) {
            continue;
        }
        /* A non-array value unwinds to itself (index null); null/missing only if preserved. */
        if (s->index_field != NULL) {
            bson_value_t nv = {.value_type = BSON_TYPE_NULL};
            copy_set_path(in, s->index_field, &nv, stage_out(s));
            *doc = &s->out;
        } else {
            *doc = in;
        }
        goto done;
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- $sort */

static int
next_sort(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;

    if (!s->drained) {
        for (;;) {
            SHL_ERR(pull_src(s, &in, st));
            if (in == NULL) {
                break;
            }
            SHL_ERR(shl_sorter_add(s->sorter, in, st));
        }
        shl_sorter_finish(s->sorter);
        s->drained = true;
    }
    *doc = shl_sorter_next(s->sorter);
done:
    return ret;
}

/* ---------------------------------------------------------------- $group */

static void
acc_init(accstate_t *a, const accdef_t *d)
{
    memset(a, 0, sizeof(*a));
    a->val.value_type = BSON_TYPE_EOD;
    if (d->kind == ACC_PUSH || d->kind == ACC_ADDTOSET) {
        bson_init(&a->arr);
    }
}

static void
acc_cleanup(accstate_t *a, const accdef_t *d)
{
    bson_value_destroy(&a->val);
    if (d->kind == ACC_PUSH || d->kind == ACC_ADDTOSET) {
        bson_destroy(&a->arr);
    }
}

/* Fold 'v' (owned by the caller; EOD = missing) into 'a'; *grow gets the added bytes. */
static void
acc_add(accstate_t *a, const accdef_t *d, const bson_value_t *v, int64_t *grow)
{
    bool missing = v->value_type == BSON_TYPE_EOD;
    bool nullish =
        missing || v->value_type == BSON_TYPE_NULL || v->value_type == BSON_TYPE_UNDEFINED;

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
    case ACC_MIN:
    case ACC_MAX:
        if (nullish) {
            break;
        }
        if (!a->seen || (d->kind == ACC_MIN ? shl_expr_compare(v, &a->val) < 0
                                            : shl_expr_compare(v, &a->val) > 0)) {
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
            bson_iter_init(&it, &a->arr);
            while (!dup && bson_iter_next(&it)) {
                dup = shl_bson_value_compare(bson_iter_value(&it), v) == 0;
            }
            if (dup) {
                break;
            }
        }
        {
            char key[16];
            const char *kp;
            uint32_t before = a->arr.len;
            bson_uint32_to_string(a->narr++, &kp, key, sizeof(key));
            query_append_value(&a->arr, kp, -1, v);
            *grow += a->arr.len - before;
        }
        break;
    }
}

static void
acc_result(const accstate_t *a, const accdef_t *d, bson_t *out)
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
        BSON_APPEND_ARRAY(out, d->field, &a->arr);
        break;
    }
}

static group_t *
group_find(stage_t *s, const bson_value_t *key, uint64_t h)
{
    for (group_t *g = s->buckets[h % s->nbuckets]; g != NULL; g = g->hnext) {
        if (g->hash == h && shl_bson_value_compare(&g->key, key) == 0) {
            return g;
        }
    }
    return NULL;
}

static void
group_rehash(stage_t *s)
{
    size_t nb = s->nbuckets * 2;
    group_t **b = bson_malloc0(nb * sizeof(*b));
    for (group_t *g = s->ofirst; g != NULL; g = g->onext) {
        g->hnext = b[g->hash % nb];
        b[g->hash % nb] = g;
    }
    bson_free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
}

static int
group_consume(stage_t *s, const bson_t *in, shl_status_t *st)
{
    int ret = 0;
    shl_expr_ctx_t ctx;
    bson_value_t key, v;
    group_t *g;
    int64_t grow = 0;

    key.value_type = v.value_type = BSON_TYPE_EOD;
    eval_ctx(s, in, &ctx);
    SHL_ERR(shl_expr_evaluate(s->expr, &ctx, &key, st));
    if (key.value_type == BSON_TYPE_EOD) {
        key.value_type = BSON_TYPE_NULL;
    }
    uint64_t h = shl_bson_hash_fast(&key);
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
            acc_init(&g->acc[i], &s->accs[i]);
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
        acc_add(&g->acc[i], &s->accs[i], &v, &grow);
        bson_value_destroy(&v);
        v.value_type = BSON_TYPE_EOD;
    }
    s->mem += grow;
    if (s->mem > s->pipe->opts.max_memory_bytes) {
        SHL_FAIL(st, SHL_CODE_QUERY_EXCEEDED_MEMORY_LIMIT_NO_DISK_USE_ALLOWED,
                 "Exceeded memory limit for $group, but didn't allow external spilling; pass "
                 "allowDiskUse:true to opt in.");
    }
done:
    bson_value_destroy(&key);
    bson_value_destroy(&v);
    return ret;
}

static int
next_group(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;

    *doc = NULL;
    if (!s->drained) {
        for (;;) {
            SHL_ERR(pull_src(s, &in, st));
            if (in == NULL) {
                break;
            }
            SHL_ERR(group_consume(s, in, st));
        }
        s->drained = true;
        s->ocur = s->ofirst;
    }
    if (s->ocur != NULL) {
        bson_t *o = stage_out(s);
        group_t *g = s->ocur;
        query_append_value(o, "_id", 3, &g->key);
        for (size_t i = 0; i < s->naccs; i++) {
            acc_result(&g->acc[i], &s->accs[i], o);
        }
        s->ocur = g->onext;
        *doc = o;
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- dispatch */

static int
pull(stage_t *s, const bson_t **doc, shl_status_t *st)
{
    switch (s->kind) {
    case ST_MATCH:
        return next_match(s, doc, st);
    case ST_PROJECT:
    case ST_ADDFIELDS:
        return next_project(s, doc, st);
    case ST_GROUP:
        return next_group(s, doc, st);
    case ST_SORT:
        return next_sort(s, doc, st);
    case ST_LIMIT:
        return next_limit(s, doc, st);
    case ST_SKIP:
        return next_skip(s, doc, st);
    case ST_UNWIND:
        return next_unwind(s, doc, st);
    case ST_REPLACE_ROOT:
        return next_replace_root(s, doc, st);
    }
    *doc = NULL;
    return 0;
}

static void
stage_destroy(stage_t *s)
{
    if (s == NULL) {
        return;
    }
    shl_matcher_destroy(s->matcher);
    shl_projection_destroy(s->proj);
    shl_expr_destroy(s->expr);
    for (size_t i = 0; i < s->naccs; i++) {
        bson_free(s->accs[i].field);
        shl_expr_destroy(s->accs[i].arg);
    }
    for (group_t *g = s->ofirst, *n; g != NULL; g = n) {
        n = g->onext;
        for (size_t i = 0; i < s->naccs; i++) {
            acc_cleanup(&g->acc[i], &s->accs[i]);
        }
        bson_value_destroy(&g->key);
        bson_free(g);
    }
    bson_free(s->accs);
    bson_free(s->buckets);
    shl_sorter_destroy(s->sorter);
    shl_sort_pattern_destroy(s->pattern);
    if (s->out_init) {
        bson_destroy(&s->out);
    }
    if (s->have_in) {
        bson_destroy(&s->cur_in);
    }
    bson_free(s->path);
    bson_free(s->index_field);
    bson_free(s->name);
    bson_destroy(&s->spec);
    bson_free(s);
}

/* ---------------------------------------------------------------- parsing */

static stage_t *
stage_new(shl_pipeline_t *p, stage_kind_t kind, const char *name, const bson_iter_t *arg)
{
    stage_t *s = bson_malloc0(sizeof(*s));
    s->kind = kind;
    s->pipe = p;
    s->name = bson_strdup(name);
    bson_init(&s->spec);
    if (arg != NULL) {
        bson_append_iter(&s->spec, name, -1, arg);
    }
    return s;
}

static void
pipe_push(shl_pipeline_t *p, stage_t *s)
{
    p->stages = bson_realloc(p->stages, (p->nstages + 1) * sizeof(*p->stages));
    p->stages[p->nstages++] = s;
}

static int
arg_doc(const bson_iter_t *it, bson_t *view, int code, const char *msg, shl_status_t *st)
{
    const uint8_t *data;
    uint32_t len;

    if (!BSON_ITER_HOLDS_DOCUMENT(it)) {
        return shl_status_set(st, code, "%s", msg);
    }
    bson_iter_document(it, &len, &data);
    bson_init_static(view, data, len);
    return 0;
}

static int
parse_group(shl_pipeline_t *p, const bson_t *spec, stage_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, a;
    stage_t *s = NULL;
    bool have_id = false;

    s = stage_new(p, ST_GROUP, "$group", NULL);
    BSON_APPEND_DOCUMENT(&s->spec, "$group", spec);
    s->nbuckets = 64;
    s->buckets = bson_malloc0(s->nbuckets * sizeof(*s->buckets));
    s->accs = bson_malloc0((bson_count_keys(spec) + 1) * sizeof(*s->accs));
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "_id") == 0) {
            SHL_ERR(shl_expr_parse(bson_iter_value(&it), &s->expr, st));
            have_id = true;
            continue;
        }
        if (strchr(k, '.') != NULL) {
            SHL_FAIL(st, 40235, "The field name '%s' cannot contain '.'", k);
        }
        if (k[0] == '$') {
            SHL_FAIL(st, 40236, "The field name '%s' cannot be an operator name", k);
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &a) || !bson_iter_next(&a)) {
            SHL_FAIL(st, 40234, "The field '%s' must be an accumulator object", k);
        }
        const char *op = bson_iter_key(&a);
        accdef_t *d = &s->accs[s->naccs];
        static const struct {
            const char *name;
            acc_kind_t kind;
        } ops[] = {{"$sum", ACC_SUM},   {"$avg", ACC_AVG},          {"$min", ACC_MIN},
                   {"$max", ACC_MAX},   {"$first", ACC_FIRST},      {"$last", ACC_LAST},
                   {"$push", ACC_PUSH}, {"$addToSet", ACC_ADDTOSET}};
        bool found = false;
        for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
            if (strcmp(op, ops[i].name) == 0) {
                d->kind = ops[i].kind;
                found = true;
            }
        }
        if (strcmp(op, "$count") == 0) {
            bson_t view;
            if (!BSON_ITER_HOLDS_DOCUMENT(&a) || !query_bson_view(bson_iter_value(&a), &view) ||
                !bson_empty(&view)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "$count takes no arguments, i.e. $count:{}");
            }
            bson_value_t one = {.value_type = BSON_TYPE_INT32};
            one.value.v_int32 = 1;
            d->kind = ACC_SUM;
            d->field = bson_strdup(k);
            s->naccs++;
            SHL_ERR(shl_expr_parse(&one, &d->arg, st));
        } else {
            if (!found) {
                SHL_FAIL(st, 15952, "Unknown group operator '%s'", op);
            }
            if (BSON_ITER_HOLDS_ARRAY(&a)) {
                SHL_FAIL(st, 40237, "The %s accumulator is a unary operator", op);
            }
            d->field = bson_strdup(k);
            s->naccs++;
            SHL_ERR(shl_expr_parse(bson_iter_value(&a), &d->arg, st));
        }
        if (bson_iter_next(&a)) {
            SHL_FAIL(st, 40238, "The field '%s' must specify one accumulator", k);
        }
    }
    if (!have_id) {
        SHL_FAIL(st, 15955, "a group specification must include an _id");
    }
    *out = s;
    s = NULL;
done:
    stage_destroy(s);
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

static int
parse_int_arg(const bson_iter_t *it, const char *stage, int64_t *n, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t copy = *it;
    const bson_value_t *v = bson_iter_value(&copy);

    if (!query_value_is_number(v)) {
        SHL_FAIL(st, strcmp(stage, "$limit") == 0 ? 15957 : 15972,
                 "the %s must be specified as a number",
                 strcmp(stage, "$limit") == 0 ? "limit" : "skip");
    }
    double d = query_value_as_double(v);
    if (d != (double)(int64_t)d) {
        SHL_FAIL(st, strcmp(stage, "$limit") == 0 ? 15957 : 15972,
                 "invalid argument to %s stage: Cannot represent as a 64-bit integer", stage);
    }
    *n = (int64_t)d;
    if (strcmp(stage, "$limit") == 0 && *n <= 0) {
        SHL_FAIL(st, 15958, "the limit must be positive");
    }
    if (strcmp(stage, "$skip") == 0 && *n < 0) {
        SHL_FAIL(st, 15956, "invalid argument to $skip stage: Expected a non-negative number");
    }
done:
    return ret;
}

/* Build {<group key>} for $count / $sortByCount / $unset desugaring. */
static int
parse_stage(shl_pipeline_t *p, const bson_t *stage_doc, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bson_t view, tmp = BSON_INITIALIZER, tmp2 = BSON_INITIALIZER;
    stage_t *s = NULL;
    const char *name;

    if (bson_count_keys(stage_doc) != 1 || !bson_iter_init(&it, stage_doc) ||
        !bson_iter_next(&it)) {
        SHL_FAIL(st, 40323,
                 "A pipeline stage specification object must contain exactly one field.");
    }
    name = bson_iter_key(&it);
    if (strcmp(name, "$match") == 0) {
        SHL_ERR(
            arg_doc(&it, &view, 15959, "the match filter must be an expression in an object", st));
        s = stage_new(p, ST_MATCH, name, &it);
        SHL_ERR(shl_matcher_new(&view, SHL_MATCHER_DEFAULT, &s->matcher, st));
    } else if (strcmp(name, "$project") == 0) {
        SHL_ERR(arg_doc(&it, &view, 15969, "$project specification must be an object", st));
        if (bson_empty(&view)) {
            SHL_FAIL(st, 51272,
                     "Invalid $project :: caused by :: projection specification must have at least "
                     "one field");
        }
        s = stage_new(p, ST_PROJECT, name, &it);
        SHL_ERR(shl_projection_new(&view, NULL, &s->proj, st));
    } else if (strcmp(name, "$addFields") == 0 || strcmp(name, "$set") == 0) {
        SHL_ERR(arg_doc(&it, &view, 40272, "$addFields specification stage must be an object", st));
        s = stage_new(p, ST_ADDFIELDS, name, &it);
        SHL_ERR(query_addfields_new(&view, &s->proj, st));
    } else if (strcmp(name, "$unset") == 0) {
        if (BSON_ITER_HOLDS_UTF8(&it)) {
            BSON_APPEND_INT32(&tmp, bson_iter_utf8(&it, NULL), 0);
        } else if (BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_iter_t a;
            bson_iter_recurse(&it, &a);
            while (bson_iter_next(&a)) {
                if (!BSON_ITER_HOLDS_UTF8(&a)) {
                    SHL_FAIL(st, 31120,
                             "$unset specification must be a string or an array containing only "
                             "string values");
                }
                BSON_APPEND_INT32(&tmp, bson_iter_utf8(&a, NULL), 0);
            }
        } else {
            SHL_FAIL(st, 31002, "$unset specification must be a string or an array");
        }
        if (bson_empty(&tmp)) {
            SHL_FAIL(st, 31119,
                     "$unset specification must be a string or an array with at least one field");
        }
        s = stage_new(p, ST_PROJECT, name, &it);
        SHL_ERR(shl_projection_new(&tmp, NULL, &s->proj, st));
    } else if (strcmp(name, "$group") == 0) {
        SHL_ERR(arg_doc(&it, &view, 15947, "a group's fields must be specified in an object", st));
        SHL_ERR(parse_group(p, &view, &s, st));
    } else if (strcmp(name, "$sort") == 0) {
        SHL_ERR(arg_doc(&it, &view, 15973, "the $sort key specification must be an object", st));
        if (bson_empty(&view)) {
            SHL_FAIL(st, 15976, "$sort stage must have at least one sort key");
        }
        s = stage_new(p, ST_SORT, name, &it);
        SHL_ERR(shl_sort_pattern_new(&view, &s->pattern, st));
    } else if (strcmp(name, "$limit") == 0 || strcmp(name, "$skip") == 0) {
        int64_t n = 0;
        SHL_ERR(parse_int_arg(&it, name, &n, st));
        s = stage_new(p, name[1] == 'l' ? ST_LIMIT : ST_SKIP, name, &it);
        s->n = n;
    } else if (strcmp(name, "$count") == 0) {
        const char *cname;
        SHL_ERR(parse_count_name(&it, &cname, st));
        /* {$group: {_id: null, name: {$sum: 1}}}, {$project: {_id: 0}} */
        BSON_APPEND_NULL(&tmp, "_id");
        bson_t a;
        BSON_APPEND_DOCUMENT_BEGIN(&tmp, cname, &a);
        BSON_APPEND_INT32(&a, "$sum", 1);
        bson_append_document_end(&tmp, &a);
        SHL_ERR(parse_group(p, &tmp, &s, st));
        pipe_push(p, s);
        s = NULL;
        BSON_APPEND_INT32(&tmp2, "_id", 0);
        s = stage_new(p, ST_PROJECT, "$project", NULL);
        BSON_APPEND_DOCUMENT(&s->spec, "$project", &tmp2);
        SHL_ERR(shl_projection_new(&tmp2, NULL, &s->proj, st));
    } else if (strcmp(name, "$sortByCount") == 0) {
        bool ok = (BSON_ITER_HOLDS_UTF8(&it) && bson_iter_utf8(&it, NULL)[0] == '$') ||
                  BSON_ITER_HOLDS_DOCUMENT(&it);
        if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t d;
            ok = bson_iter_recurse(&it, &d) && bson_iter_next(&d) && bson_iter_key(&d)[0] == '$';
        }
        if (!ok) {
            SHL_FAIL(st, 40148,
                     "the sortByCount field must be defined as a $-prefixed path or an expression "
                     "object");
        }
        bson_append_iter(&tmp, "_id", 3, &it);
        bson_t a;
        BSON_APPEND_DOCUMENT_BEGIN(&tmp, "count", &a);
        BSON_APPEND_INT32(&a, "$sum", 1);
        bson_append_document_end(&tmp, &a);
        SHL_ERR(parse_group(p, &tmp, &s, st));
        pipe_push(p, s);
        s = NULL;
        BSON_APPEND_INT32(&tmp2, "count", -1);
        s = stage_new(p, ST_SORT, "$sort", NULL);
        BSON_APPEND_DOCUMENT(&s->spec, "$sort", &tmp2);
        SHL_ERR(shl_sort_pattern_new(&tmp2, &s->pattern, st));
    } else if (strcmp(name, "$unwind") == 0) {
        s = stage_new(p, ST_UNWIND, name, &it);
        const char *path = NULL;
        if (BSON_ITER_HOLDS_UTF8(&it)) {
            path = bson_iter_utf8(&it, NULL);
        } else if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t d;
            bson_iter_recurse(&it, &d);
            while (bson_iter_next(&d)) {
                const char *k = bson_iter_key(&d);
                if (strcmp(k, "path") == 0) {
                    if (!BSON_ITER_HOLDS_UTF8(&d)) {
                        SHL_FAIL(st, 28808, "expected a string as the path for $unwind stage");
                    }
                    path = bson_iter_utf8(&d, NULL);
                } else if (strcmp(k, "includeArrayIndex") == 0) {
                    if (!BSON_ITER_HOLDS_UTF8(&d)) {
                        SHL_FAIL(st, 28810,
                                 "expected a non-empty string for the includeArrayIndex option to "
                                 "$unwind stage");
                    }
                    const char *f = bson_iter_utf8(&d, NULL);
                    if (f[0] == '\0') {
                        SHL_FAIL(st, 28810,
                                 "expected a non-empty string for the includeArrayIndex option to "
                                 "$unwind stage");
                    }
                    if (f[0] == '$') {
                        SHL_FAIL(st, 28822,
                                 "includeArrayIndex option to $unwind stage should not be prefixed "
                                 "with a '$': %s",
                                 f);
                    }
                    s->index_field = bson_strdup(f);
                } else if (strcmp(k, "preserveNullAndEmptyArrays") == 0) {
                    if (!BSON_ITER_HOLDS_BOOL(&d)) {
                        SHL_FAIL(st, 28809,
                                 "expected a boolean for the preserveNullAndEmptyArrays option to "
                                 "$unwind stage");
                    }
                    s->preserve = bson_iter_bool(&d);
                } else {
                    SHL_FAIL(st, 28811, "unrecognized option to $unwind stage: %s", k);
                }
            }
            if (path == NULL) {
                SHL_FAIL(st, 28812, "no path specified to $unwind stage");
            }
        } else {
            SHL_FAIL(
                st, 15981,
                "expected either a string or an object as specification for $unwind stage, got %s",
                "other");
        }
        if (path[0] != '$') {
            SHL_FAIL(st, 28818, "path option to $unwind stage should be prefixed with a '$': %s",
                     path);
        }
        if (path[1] == '\0') {
            SHL_FAIL(st, 40352, "FieldPath cannot be constructed with empty string");
        }
        s->path = bson_strdup(path + 1);
    } else if (strcmp(name, "$replaceRoot") == 0 || strcmp(name, "$replaceWith") == 0) {
        const bson_value_t *root = NULL;
        bson_iter_t d;
        if (name[8] == 'R') { /* $replaceRoot */
            SHL_ERR(arg_doc(&it, &view, 40228,
                            "expected an object as specification for $replaceRoot stage", st));
            bson_iter_init(&d, &view);
            while (bson_iter_next(&d)) {
                if (strcmp(bson_iter_key(&d), "newRoot") != 0) {
                    SHL_FAIL(st, 40415, "BSON field '$replaceRoot.%s' is an unknown field.",
                             bson_iter_key(&d));
                }
                root = bson_iter_value(&d);
            }
            if (root == NULL) {
                SHL_FAIL(st, 40414,
                         "BSON field '$replaceRoot.newRoot' is missing but a required field");
            }
        } else {
            root = bson_iter_value(&it);
        }
        s = stage_new(p, ST_REPLACE_ROOT, name, &it);
        SHL_ERR(shl_expr_parse(root, &s->expr, st));
    } else {
        SHL_FAIL(st, 40324, "Unrecognized pipeline stage name: '%s'", name);
    }
    pipe_push(p, s);
    s = NULL;
done:
    stage_destroy(s);
    bson_destroy(&tmp);
    bson_destroy(&tmp2);
    return ret;
}

static void
link_stages(shl_pipeline_t *p)
{
    for (size_t i = p->first; i < p->nstages; i++) {
        stage_t *s = p->stages[i];
        s->src = i > p->first ? p->stages[i - 1] : NULL;
    }
}

int
shl_pipeline_parse(const bson_t *stages, const shl_pipeline_opts_t *opts, shl_pipeline_t **out,
                   shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    shl_pipeline_t *p = bson_malloc0(sizeof(*p));

    if (opts != NULL) {
        p->opts = *opts;
    }
    if (p->opts.max_memory_bytes <= 0) {
        p->opts.max_memory_bytes = PIPE_DEFAULT_MAX_MEMORY;
    }
    bson_iter_init(&it, stages);
    while (bson_iter_next(&it)) {
        bson_t view;
        SHL_ERR(arg_doc(&it, &view, 40323,
                        "A pipeline stage specification object must contain exactly one field.",
                        st));
        SHL_ERR(parse_stage(p, &view, st));
    }
    /* $sort followed by $limit(s): a top-k sort. */
    for (size_t i = 0; i < p->nstages; i++) {
        stage_t *s = p->stages[i];
        if (s->kind != ST_SORT) {
            continue;
        }
        int64_t limit = 0;
        for (size_t j = i + 1; j < p->nstages && p->stages[j]->kind == ST_LIMIT; j++) {
            if (limit == 0 || p->stages[j]->n < limit) {
                limit = p->stages[j]->n;
            }
        }
        s->n = limit;
        s->sorter = shl_sorter_new(s->pattern, limit, p->opts.max_memory_bytes);
    }
    link_stages(p);
    *out = p;
    p = NULL;
done:
    shl_pipeline_destroy(p);
    return ret;
}

void
shl_pipeline_set_source(shl_pipeline_t *p, const shl_pipeline_source_t *src)
{
    p->src = *src;
}

const bson_t *
shl_pipeline_leading_match(const shl_pipeline_t *p)
{
    if (p->first < p->nstages && p->stages[p->first]->kind == ST_MATCH) {
        return shl_matcher_filter(p->stages[p->first]->matcher);
    }
    return NULL;
}

void
shl_pipeline_drop_leading_match(shl_pipeline_t *p)
{
    if (shl_pipeline_leading_match(p) != NULL) {
        p->first++;
        link_stages(p);
    }
}

int
shl_pipeline_next(shl_pipeline_t *p, const bson_t **doc, shl_status_t *st)
{
    if (p->first >= p->nstages) {
        if (p->src.next == NULL) {
            *doc = NULL;
            return 0;
        }
        return p->src.next(p->src.arg, doc, st);
    }
    return pull(p->stages[p->nstages - 1], doc, st);
}

void
shl_pipeline_describe(const shl_pipeline_t *p, bson_t *arr)
{
    for (size_t i = 0; i < p->nstages; i++) {
        char key[16];
        const char *kp;
        bson_uint32_to_string((uint32_t)i, &kp, key, sizeof(key));
        BSON_APPEND_DOCUMENT(arr, kp, &p->stages[i]->spec);
    }
}

void
shl_pipeline_destroy(shl_pipeline_t *p)
{
    if (p == NULL) {
        return;
    }
    for (size_t i = 0; i < p->nstages; i++) {
        stage_destroy(p->stages[i]);
    }
    bson_free(p->stages);
    bson_free(p);
}
