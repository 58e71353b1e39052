/*
 * pipe_lookup.c -- the stages that read another collection through the caller's
 * environment (pipeline.h's shl_pipeline_env_t): $lookup (equality form as an $in filter,
 * pipeline form re-parsed per document with its `let` values), $unionWith and $graphLookup
 * (breadth-first, one $in search a depth).
 */

#include <string.h>

#include "bson/bson_compare.h"
#include "bson/bson_hash.h"
#include "bson/bson_iter.h"
#include "query/pipeline_private.h"
#include "query/query_private.h"

/* ---------------------------------------------------------------- $lookup, $unionWith */

/* The documents a $lookup joins to one document past
 * internalLookupStageIntermediateDocumentMaxSizeBytes. */
static int
lookup_too_big(const pipe_stage_t *s, int64_t size, int64_t limit, shl_status_t *st)
{
    (void)size;
    return shl_status_set(st, 4568,
                          "$lookup: the documents of %s joined to one document pass %lld "
                          "bytes (internalLookupStageIntermediateDocumentMaxSizeBytes)",
                          s->from != NULL ? s->from : "$documents", (long long)limit);
}

/* Append the values at dotted 'path' of 'doc' to the array 'arr', traversing arrays as a
 * query does (array elements themselves are added). */
static void
collect_path(const bson_t *doc, const char *path, bson_t *arr, uint32_t *n)
{
    const char *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    bson_iter_t it;

    if (!bson_iter_init(&it, doc)) {
        return;
    }
    while (shl_iter_next(&it)) {
        if (strlen(shl_iter_key(&it)) != len || strncmp(shl_iter_key(&it), path, len) != 0) {
            continue;
        }
        if (BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_iter_t a;
            bson_iter_recurse(&it, &a);
            while (shl_iter_next(&a)) {
                if (dot == NULL) {
                    char key[16];
                    const char *kp;
                    bson_uint32_to_string((*n)++, &kp, key, sizeof(key));
                    bson_append_iter(arr, kp, -1, &a);
                } else if (BSON_ITER_HOLDS_DOCUMENT(&a)) {
                    bson_t sub;
                    if (query_bson_view(bson_iter_value(&a), &sub)) {
                        collect_path(&sub, dot + 1, arr, n);
                    }
                }
            }
        } else if (dot == NULL) {
            char key[16];
            const char *kp;
            bson_uint32_to_string((*n)++, &kp, key, sizeof(key));
            bson_append_iter(arr, kp, -1, &it);
        } else if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_t sub;
            if (query_bson_view(bson_iter_value(&it), &sub)) {
                collect_path(&sub, dot + 1, arr, n);
            }
        }
        return;
    }
}

/* The foreign filter of an equality $lookup: {foreignField: {$in: [local values]}}, or
 * {foreignField: {$eq: null}} when the local field is missing. Regexes are compared as values
 * ($eq, which does not treat them as patterns), under an $or with the $in. */
static void
lookup_filter(const pipe_stage_t *s, const bson_t *in, bson_t *filter)
{
    bson_t vals = BSON_INITIALIZER, f, arr, ors, clause, eq;
    uint32_t n = 0, i = 0, nre = 0;
    bson_iter_t it;

    collect_path(in, s->local, &vals, &n);
    if (n == 0) {
        BSON_APPEND_DOCUMENT_BEGIN(filter, s->foreign, &f);
        BSON_APPEND_NULL(&f, "$eq");
        bson_append_document_end(filter, &f);
        goto done;
    }
    bson_iter_init(&it, &vals);
    while (shl_iter_next(&it)) {
        nre += BSON_ITER_HOLDS_REGEX(&it) ? 1 : 0;
    }
    /* Without regexes the filter is a plain $in, which the planner can serve with an index. */
    bson_t *parent = filter;
    if (nre > 0) {
        BSON_APPEND_ARRAY_BEGIN(filter, "$or", &ors);
        BSON_APPEND_DOCUMENT_BEGIN(&ors, "0", &clause);
        parent = &clause;
    }
    BSON_APPEND_DOCUMENT_BEGIN(parent, s->foreign, &f);
    BSON_APPEND_ARRAY_BEGIN(&f, "$in", &arr);
    bson_iter_init(&it, &vals);
    while (shl_iter_next(&it)) {
        char key[16];
        const char *kp;
        if (BSON_ITER_HOLDS_REGEX(&it)) {
            continue;
        }
        bson_uint32_to_string(i++, &kp, key, sizeof(key));
        bson_append_iter(&arr, kp, -1, &it);
    }
    bson_append_array_end(&f, &arr);
    bson_append_document_end(parent, &f);
    if (nre == 0) {
        goto done;
    }
    bson_append_document_end(&ors, &clause);
    i = 1;
    bson_iter_init(&it, &vals);
    while (nre > 0 && shl_iter_next(&it)) {
        char key[16];
        const char *kp;
        if (!BSON_ITER_HOLDS_REGEX(&it)) {
            continue;
        }
        bson_uint32_to_string(i++, &kp, key, sizeof(key));
        BSON_APPEND_DOCUMENT_BEGIN(&ors, kp, &clause);
        BSON_APPEND_DOCUMENT_BEGIN(&clause, s->foreign, &eq);
        bson_append_iter(&eq, "$eq", 3, &it);
        bson_append_document_end(&clause, &eq);
        bson_append_document_end(&ors, &clause);
    }
    bson_append_array_end(filter, &ors);
done:
    bson_destroy(&vals);
}

static void
close_cursor(pipe_stage_t *s)
{
    const shl_pipeline_env_t *env = s->pipe->opts.env;
    if (s->cursor_open && env != NULL && env->close != NULL) {
        env->close(env->arg, s->cursor);
    }
    s->cursor_open = false;
    s->cursor = NULL;
}

/* Open the foreign collection 's->from' as 'src' (empty when no 'from': $documents pipelines). */
static int
open_foreign(pipe_stage_t *s, const bson_t *filter, shl_pipeline_source_t *src, shl_status_t *st)
{
    int ret = 0;
    const shl_pipeline_env_t *env = s->pipe->opts.env;

    memset(src, 0, sizeof(*src));
    if (s->from == NULL) {
        goto done;
    }
    if (env == NULL || env->open == NULL) {
        SHL_FAIL(st, SHL_CODE_NOT_IMPLEMENTED, "%s is not supported here", s->name);
    }
    SHL_ERR(env->open(env->arg, s->from, filter, src, &s->cursor, st));
    s->cursor_open = true;
done:
    return ret;
}

int
pipe_next_lookup(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in, *d;
    bson_t filter = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    shl_pipeline_source_t src;
    uint32_t n = 0;
    shl_expr_ctx_t ctx;
    bson_value_t v, av;

    v.value_type = BSON_TYPE_EOD;
    *doc = NULL;
    SHL_ERR(pipe_pull_src(s, &in, st));
    if (in == NULL) {
        goto done;
    }
    if (s->local != NULL) {
        lookup_filter(s, in, &filter);
    }
    SHL_ERR(open_foreign(s, s->local != NULL ? &filter : NULL, &src, st));
    if (s->has_sub) {
        /* The sub-pipeline sees the outer variables and this document's `let` values. */
        bson_reinit(&s->lvars);
        if (s->pipe->opts.vars != NULL) {
            bson_iter_t it;
            bson_iter_init(&it, s->pipe->opts.vars);
            while (shl_iter_next(&it)) {
                bool shadowed = false;
                for (size_t i = 0; i < s->nlet; i++) {
                    shadowed = shadowed || strcmp(s->let_names[i], shl_iter_key(&it)) == 0;
                }
                if (!shadowed) {
                    bson_append_iter(&s->lvars, shl_iter_key(&it), -1, &it);
                }
            }
        }
        pipe_eval_ctx(s, in, &ctx);
        for (size_t i = 0; i < s->nlet; i++) {
            SHL_ERR(shl_expr_evaluate(s->let_exprs[i], &ctx, &v, st));
            if (v.value_type != BSON_TYPE_EOD) {
                query_append_value(&s->lvars, s->let_names[i], -1, &v);
            }
            bson_value_destroy(&v);
            v.value_type = BSON_TYPE_EOD;
        }
        shl_pipeline_destroy(s->run);
        s->run = NULL;
        SHL_ERR(pipe_sub_parse(s->pipe, &s->sub_spec, CTX_LOOKUP, &s->lvars, &s->run, st));
        shl_pipeline_set_source(s->run, &src);
        SHL_ERR(pipe_drain_into(s, s->run, &arr, &n, 0, s->max_bytes, lookup_too_big, st));
        shl_pipeline_destroy(s->run);
        s->run = NULL;
    } else {
        for (;;) {
            SHL_ERR(src.next(src.arg, &d, st));
            if (d == NULL) {
                break;
            }
            SHL_ERR(pipe_append_joined(s, &arr, &n, 0, d, s->max_bytes, lookup_too_big, st));
        }
    }
    close_cursor(s);
    {
        bson_t wrap = BSON_INITIALIZER;
        bson_iter_t wi;
        BSON_APPEND_ARRAY(&wrap, "a", &arr);
        bson_iter_init_find(&wi, &wrap, "a");
        av = *bson_iter_value(&wi);
        query_copy_set_path(in, s->as, &av, pipe_stage_out(s));
        bson_destroy(&wrap);
    }
    *doc = &s->out;
done:
    close_cursor(s);
    bson_value_destroy(&v);
    bson_destroy(&filter);
    bson_destroy(&arr);
    return ret;
}

int
pipe_next_union_with(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;

    *doc = NULL;
    if (!s->src_done) {
        SHL_ERR(pipe_pull_src(s, doc, st));
        if (*doc != NULL) {
            goto done;
        }
        s->src_done = true;
        shl_pipeline_source_t src;
        SHL_ERR(open_foreign(s, NULL, &src, st));
        shl_pipeline_set_source(s->run, &src);
    }
    if (s->drained) {
        goto done;
    }
    SHL_ERR(shl_pipeline_next(s->run, doc, st));
    if (*doc == NULL) {
        s->drained = true;
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- $graphLookup */

/*
 * A set of values in MongoDB's equality (1, 1.0 and NumberLong(1) are one value; strings
 * equal under the aggregate's collation are one value, as MongoDB's value comparator makes
 * them): open addressing over shl_bson_hash_fast of the values, or of their collation keys.
 * $graphLookup keeps the _ids it has visited and the values it has already searched for in
 * two of them.
 */
typedef struct vset {
    bson_value_t *vals;
    bson_value_t *keys; /* coll != NULL: the values' collation keys (what is compared) */
    size_t n;
    size_t *slots; /* index + 1 into vals; 0 = empty */
    size_t nslots; /* a power of two */
    const shl_collator_t *coll;
} vset_t;

static void
vset_clear(vset_t *v)
{
    const shl_collator_t *coll = v->coll;
    for (size_t i = 0; i < v->n; i++) {
        bson_value_destroy(&v->vals[i]);
        if (v->keys != NULL) {
            bson_value_destroy(&v->keys[i]);
        }
    }
    bson_free(v->vals);
    bson_free(v->keys);
    bson_free(v->slots);
    memset(v, 0, sizeof(*v));
    v->coll = coll;
}

/* The slot of compared value 'k' (a collation key when the set has a collation). */
static size_t
vset_slot(const vset_t *v, const bson_value_t *k, bool *found)
{
    const bson_value_t *cmp = v->coll != NULL ? v->keys : v->vals;
    size_t i = (size_t)shl_bson_hash_fast(k) & (v->nslots - 1);
    *found = false;
    while (v->slots[i] != 0) {
        if (shl_bson_value_compare(&cmp[v->slots[i] - 1], k) == 0) {
            *found = true;
            break;
        }
        i = (i + 1) & (v->nslots - 1);
    }
    return i;
}

static bool
vset_has(const vset_t *v, const bson_value_t *x)
{
    bool found = false;
    if (v->n > 0 && v->coll != NULL) {
        bson_value_t k;
        shl_collator_value_key(v->coll, x, &k);
        vset_slot(v, &k, &found);
        bson_value_destroy(&k);
    } else if (v->n > 0) {
        vset_slot(v, x, &found);
    }
    return found;
}

/* Add a copy of 'x'; false when it was there already. */
static bool
vset_add(vset_t *v, const bson_value_t *x)
{
    bool found;
    size_t slot;
    bson_value_t k;

    if (2 * (v->n + 1) > v->nslots) {
        size_t ns = v->nslots ? v->nslots * 2 : 16;
        bson_free(v->slots);
        v->slots = bson_malloc0(ns * sizeof(*v->slots));
        v->nslots = ns;
        for (size_t i = 0; i < v->n; i++) {
            slot = vset_slot(v, v->coll != NULL ? &v->keys[i] : &v->vals[i], &found);
            v->slots[slot] = i + 1;
        }
        v->vals = bson_realloc(v->vals, (ns / 2) * sizeof(*v->vals));
        if (v->coll != NULL) {
            v->keys = bson_realloc(v->keys, (ns / 2) * sizeof(*v->keys));
        }
    }
    k.value_type = BSON_TYPE_EOD;
    if (v->coll != NULL) {
        shl_collator_value_key(v->coll, x, &k);
    }
    slot = vset_slot(v, v->coll != NULL ? &k : x, &found);
    if (found) {
        bson_value_destroy(&k);
        return false;
    }
    bson_value_copy(x, &v->vals[v->n]);
    if (v->coll != NULL) {
        v->keys[v->n] = k; /* moved */
    }
    v->slots[slot] = ++v->n;
    return true;
}

/* Account 'bytes' more against the stage's memory limit: 40099 as MongoDB. */
static int
graph_mem(pipe_stage_t *s, int64_t bytes, shl_status_t *st)
{
    s->mem += bytes;
    if (s->mem > s->max_bytes) {
        return shl_status_set(st, 40099, "$graphLookup reached maximum memory consumption");
    }
    return 0;
}

/* Add the values of the array 'vals' not searched for yet to 'next'. */
static int
graph_frontier_add(pipe_stage_t *s, const vset_t *searched, vset_t *next, const bson_t *vals,
                   shl_status_t *st)
{
    bson_iter_t it;
    int ret = 0;

    bson_iter_init(&it, vals);
    while (shl_iter_next(&it)) {
        const bson_value_t *x = bson_iter_value(&it);
        if (!vset_has(searched, x) && vset_add(next, x)) {
            int64_t bytes = 48;
            if (x->value_type == BSON_TYPE_DOCUMENT || x->value_type == BSON_TYPE_ARRAY) {
                bytes += x->value.v_doc.data_len;
            } else if (x->value_type == BSON_TYPE_UTF8) {
                bytes += x->value.v_utf8.len;
            }
            SHL_ERR(graph_mem(s, bytes, st));
        }
    }
done:
    return ret;
}

/*
 * One search level: {connectToField: {$in: frontier}} (and restrictSearchWithMatch) on the
 * foreign collection; documents not visited yet are kept with their depth, and their
 * connectFromField values not searched for yet make the next frontier.
 */
static int
graph_search(pipe_stage_t *s, vset_t *visited, vset_t *searched, vset_t *frontier, vset_t *next,
             int64_t depth, shl_status_t *st)
{
    bson_t filter = BSON_INITIALIZER, *in_parent = &filter, and, c0, f, arr;
    shl_pipeline_source_t src;
    const bson_t *d;
    int ret = 0;

    if (s->has_restrict) {
        BSON_APPEND_ARRAY_BEGIN(&filter, "$and", &and);
        BSON_APPEND_DOCUMENT_BEGIN(&and, "0", &c0);
        in_parent = &c0;
    }
    BSON_APPEND_DOCUMENT_BEGIN(in_parent, s->conn_to, &f);
    BSON_APPEND_ARRAY_BEGIN(&f, "$in", &arr);
    for (size_t i = 0; i < frontier->n; i++) {
        char key[16];
        const char *kp;
        bson_uint32_to_string((uint32_t)i, &kp, key, sizeof(key));
        query_append_value(&arr, kp, -1, &frontier->vals[i]);
        vset_add(searched, &frontier->vals[i]);
    }
    bson_append_array_end(&f, &arr);
    bson_append_document_end(in_parent, &f);
    if (s->has_restrict) {
        bson_append_document_end(&and, &c0);
        BSON_APPEND_DOCUMENT(&and, "1", &s->restrict_spec);
        bson_append_array_end(&filter, &and);
    }
    SHL_ERR(open_foreign(s, &filter, &src, st));
    for (;;) {
        bson_iter_t id;
        bson_t *kept;
        SHL_ERR(src.next(src.arg, &d, st));
        if (d == NULL) {
            break;
        }
        if (!bson_iter_init_find(&id, d, "_id") || !vset_add(visited, bson_iter_value(&id))) {
            continue;
        }
        kept = bson_new();
        if (s->depth_field != NULL) {
            bson_value_t dv;
            dv.value_type = BSON_TYPE_INT64;
            dv.value.v_int64 = depth;
            query_copy_set_path(d, s->depth_field, &dv, kept);
        } else {
            bson_concat(kept, d);
        }
        if (s->ndocs == s->capdocs) {
            s->capdocs = s->capdocs ? s->capdocs * 2 : 16;
            s->docs = bson_realloc(s->docs, s->capdocs * sizeof(*s->docs));
        }
        s->docs[s->ndocs++] = kept;
        SHL_ERR(graph_mem(s, (int64_t)kept->len + 64, st));
        if (s->max_depth < 0 || depth < s->max_depth) {
            bson_t vals = BSON_INITIALIZER;
            uint32_t n = 0;
            collect_path(d, s->conn_from, &vals, &n);
            ret = graph_frontier_add(s, searched, next, &vals, st);
            bson_destroy(&vals);
            SHL_ERR(ret);
        }
    }
done:
    close_cursor(s);
    bson_destroy(&filter);
    return ret;
}

int
pipe_next_graph_lookup(pipe_stage_t *s, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *in;
    shl_expr_ctx_t ctx;
    bson_value_t v;
    vset_t visited, searched, frontier, next;
    bson_t arr = BSON_INITIALIZER, start = BSON_INITIALIZER;

    memset(&visited, 0, sizeof(visited));
    memset(&searched, 0, sizeof(searched));
    memset(&frontier, 0, sizeof(frontier));
    memset(&next, 0, sizeof(next));
    visited.coll = searched.coll = frontier.coll = next.coll = s->pipe->opts.collator;
    v.value_type = BSON_TYPE_EOD;
    *doc = NULL;
    pipe_docs_clear(s);
    s->mem = 0;
    SHL_ERR(pipe_pull_src(s, &in, st));
    if (in == NULL) {
        goto done;
    }
    /* startWith: each element of an array, or the value itself (missing: nothing). */
    pipe_eval_ctx(s, in, &ctx);
    SHL_ERR(shl_expr_evaluate(s->expr, &ctx, &v, st));
    if (v.value_type == BSON_TYPE_ARRAY) {
        bson_t view;
        if (bson_init_static(&view, v.value.v_doc.data, v.value.v_doc.data_len)) {
            SHL_ERR(graph_frontier_add(s, &searched, &frontier, &view, st));
        }
    } else if (v.value_type != BSON_TYPE_EOD) {
        query_append_value(&start, "0", 1, &v);
        SHL_ERR(graph_frontier_add(s, &searched, &frontier, &start, st));
    }
    for (int64_t depth = 0; frontier.n > 0 && (s->max_depth < 0 || depth <= s->max_depth);
         depth++) {
        vset_t t;
        SHL_ERR(graph_search(s, &visited, &searched, &frontier, &next, depth, st));
        vset_clear(&frontier);
        t = frontier;
        frontier = next;
        next = t;
    }
    for (size_t i = 0; i < s->ndocs; i++) {
        char key[16];
        const char *kp;
        bson_uint32_to_string((uint32_t)i, &kp, key, sizeof(key));
        bson_append_document(&arr, kp, -1, s->docs[i]);
    }
    {
        bson_t wrap = BSON_INITIALIZER;
        bson_iter_t wi;
        BSON_APPEND_ARRAY(&wrap, "a", &arr);
        bson_iter_init_find(&wi, &wrap, "a");
        query_copy_set_path(in, s->as, bson_iter_value(&wi), pipe_stage_out(s));
        bson_destroy(&wrap);
    }
    *doc = &s->out;
done:
    pipe_docs_clear(s);
    vset_clear(&visited);
    vset_clear(&searched);
    vset_clear(&frontier);
    vset_clear(&next);
    bson_value_destroy(&v);
    bson_destroy(&arr);
    bson_destroy(&start);
    return ret;
}

/* $lookup, $unionWith, $graphLookup. */
void
pipe_destroy_lookup(pipe_stage_t *s)
{
    close_cursor(s);
    bson_free(s->from);
    bson_free(s->local);
    bson_free(s->foreign);
    bson_free(s->as);
    bson_destroy(&s->sub_spec);
    for (size_t i = 0; i < s->nlet; i++) {
        bson_free(s->let_names[i]);
        shl_expr_destroy(s->let_exprs[i]);
    }
    bson_free(s->let_names);
    bson_free(s->let_exprs);
    shl_pipeline_destroy(s->run);
    bson_free(s->conn_from);
    bson_free(s->conn_to);
    bson_free(s->depth_field);
    bson_destroy(&s->restrict_spec);
}

/* Parse a `let` document into names and expressions (variable names as MongoDB validates). */
static int
parse_let(pipe_stage_t *s, const bson_t *let, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    size_t n = bson_count_keys(let);

    s->let_names = bson_malloc0((n + 1) * sizeof(char *));
    s->let_exprs = bson_malloc0((n + 1) * sizeof(shl_expr_t *));
    bson_iter_init(&it, let);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "SEARCH_META") == 0) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "SEARCH_META is a reserved variable name");
        }
        if (!(k[0] >= 'a' && k[0] <= 'z') && !((unsigned char)k[0] >= 0x80)) {
            SHL_FAIL(st, 16867, "'%s' starts with an invalid character for a user variable name",
                     k);
        }
        for (const char *c = k; *c; c++) {
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '_' || (unsigned char)*c >= 0x80)) {
                SHL_FAIL(st, 16868, "'%s' contains an invalid character for a variable name: '%c'",
                         k, *c);
            }
        }
        s->let_names[s->nlet] = bson_strdup(k);
        SHL_ERR(shl_expr_parse(bson_iter_value(&it), &s->let_exprs[s->nlet], st));
        s->nlet++;
    }
done:
    return ret;
}

static int
lookup_string(bson_iter_t *it, char **out, shl_status_t *st)
{
    if (!BSON_ITER_HOLDS_UTF8(it)) {
        char *json = query_value_to_json(bson_iter_value(it));
        int ret = shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                                 "$lookup argument '%s' must be a string, found %s: %s",
                                 shl_iter_key(it), json, shl_bson_type_name(shl_iter_type(it)));
        bson_free(json);
        return ret;
    }
    bson_free(*out);
    *out = bson_strdup(bson_iter_utf8(it, NULL));
    return 0;
}

int
pipe_parse_lookup(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    shl_pipeline_t *p = s->pipe;
    bson_t view, let;
    bool has_let = false;
    bson_iter_t it, acopy = *arg;
    shl_pipeline_t *check = NULL;

    if (!BSON_ITER_HOLDS_DOCUMENT(&acopy) || !query_bson_view(bson_iter_value(&acopy), &view)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "the $lookup specification must be an Object, but found %s",
                 shl_bson_type_name(shl_iter_type(&acopy)));
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "from") == 0) {
            if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                /* {db, coll}: only the aggregate's own database here. */
                bson_t fv;
                bson_iter_t f;
                query_bson_view(bson_iter_value(&it), &fv);
                if (bson_iter_init_find(&f, &fv, "coll") && BSON_ITER_HOLDS_UTF8(&f)) {
                    bson_free(s->from);
                    s->from = bson_strdup(bson_iter_utf8(&f, NULL));
                }
                if (s->from == NULL) {
                    SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                             "$lookup 'from' field must specify 'coll'");
                }
            } else {
                SHL_ERR(lookup_string(&it, &s->from, st));
            }
        } else if (strcmp(k, "as") == 0) {
            SHL_ERR(lookup_string(&it, &s->as, st));
        } else if (strcmp(k, "localField") == 0) {
            SHL_ERR(lookup_string(&it, &s->local, st));
        } else if (strcmp(k, "foreignField") == 0) {
            SHL_ERR(lookup_string(&it, &s->foreign, st));
        } else if (strcmp(k, "let") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !query_bson_view(bson_iter_value(&it), &let)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "$lookup argument 'let' must be an object, is type %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            has_let = true;
        } else if (strcmp(k, "pipeline") == 0) {
            bson_t arr;
            if (!BSON_ITER_HOLDS_ARRAY(&it) || !query_bson_view(bson_iter_value(&it), &arr)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "$lookup argument 'pipeline' must be an array, is type %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            bson_reinit(&s->sub_spec);
            bson_concat(&s->sub_spec, &arr);
            s->has_sub = true;
        } else {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "unknown argument to $lookup: %s", k);
        }
    }
    if (s->as == NULL) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "must specify 'as' field for a $lookup");
    }
    if ((s->local == NULL) != (s->foreign == NULL)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "$lookup requires both or neither of 'localField' and 'foreignField' to be "
                 "specified");
    }
    if (s->local == NULL && !s->has_sub) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to "
                 "be specified");
    }
    if (has_let && !s->has_sub) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "$lookup with a 'let' argument must also specify 'pipeline'");
    }
    if (s->from == NULL) {
        /* Without 'from' the sub-pipeline must make its own documents. */
        bson_iter_t f, st0;
        bool docs = s->has_sub && bson_iter_init(&f, &s->sub_spec) && shl_iter_next(&f) &&
                    BSON_ITER_HOLDS_DOCUMENT(&f) && bson_iter_recurse(&f, &st0) &&
                    shl_iter_next(&st0) && strcmp(shl_iter_key(&st0), "$documents") == 0;
        if (!docs) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "must specify 'from' field for a $lookup");
        }
    }
    if (s->as[0] == '\0' || s->as[0] == '$') {
        SHL_FAIL(st, 16410, "FieldPath field names may not start with '$': %s", s->as);
    }
    if (has_let) {
        SHL_ERR(parse_let(s, &let, st));
    }
    if (s->has_sub) {
        /* Parse once now so errors come before any document is read. */
        bson_t vars = BSON_INITIALIZER;
        for (size_t i = 0; i < s->nlet; i++) {
            BSON_APPEND_NULL(&vars, s->let_names[i]);
        }
        ret = pipe_sub_parse(p, &s->sub_spec, CTX_LOOKUP, &vars, &check, st);
        bson_destroy(&vars);
        SHL_ERR(ret);
    }
done:
    shl_pipeline_destroy(check);
    return ret;
}

/* A $graphLookup field name argument: a string not starting with '$'. */
static int
graph_string(bson_iter_t *it, char **out, shl_status_t *st)
{
    const char *v;
    int ret = 0;

    if (!BSON_ITER_HOLDS_UTF8(it)) {
        SHL_FAIL(st, 40103, "expected string as argument for $graphLookup, found: %s",
                 shl_bson_type_name(shl_iter_type(it)));
    }
    v = bson_iter_utf8(it, NULL);
    if (v[0] == '$') {
        SHL_FAIL(st, 16410,
                 "FieldPath field names may not start with '$'. Consider using "
                 "$getField or $setField.");
    }
    if (v[0] == '\0') {
        SHL_FAIL(st, 40352, "FieldPath cannot be constructed with empty string");
    }
    bson_free(*out);
    *out = bson_strdup(v);
done:
    return ret;
}

int
pipe_parse_graph_lookup(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_t view;
    bson_iter_t it, acopy = *arg;
    shl_matcher_t *check = NULL;
    bool has_start = false;

    if (!BSON_ITER_HOLDS_DOCUMENT(&acopy) || !query_bson_view(bson_iter_value(&acopy), &view)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "the $graphLookup stage specification must be an object, but found %s",
                 shl_bson_type_name(shl_iter_type(&acopy)));
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "from") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "$graphLookup 'from' field must be a string, but found %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            if (bson_iter_utf8(&it, NULL)[0] == '\0') {
                SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "invalid $graphLookup namespace: ''");
            }
            bson_free(s->from);
            s->from = bson_strdup(bson_iter_utf8(&it, NULL));
        } else if (strcmp(k, "as") == 0) {
            SHL_ERR(graph_string(&it, &s->as, st));
        } else if (strcmp(k, "connectFromField") == 0) {
            SHL_ERR(graph_string(&it, &s->conn_from, st));
        } else if (strcmp(k, "connectToField") == 0) {
            SHL_ERR(graph_string(&it, &s->conn_to, st));
        } else if (strcmp(k, "depthField") == 0) {
            SHL_ERR(graph_string(&it, &s->depth_field, st));
        } else if (strcmp(k, "startWith") == 0) {
            shl_expr_destroy(s->expr);
            s->expr = NULL;
            SHL_ERR(shl_expr_parse(bson_iter_value(&it), &s->expr, st));
            has_start = true;
        } else if (strcmp(k, "maxDepth") == 0) {
            double d;
            if (!BSON_ITER_HOLDS_NUMBER(&it)) {
                SHL_FAIL(st, 40100, "maxDepth must be numeric, found type: %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            d = bson_iter_as_double(&it);
            if (d < 0) {
                SHL_FAIL(st, 40101, "maxDepth requires a nonnegative argument, found: %g", d);
            }
            if (d != (double)(int64_t)d || d > 9.2e18) {
                SHL_FAIL(st, 40102, "maxDepth could not be represented as a long long: %g", d);
            }
            s->max_depth = (int64_t)d;
        } else if (strcmp(k, "restrictSearchWithMatch") == 0) {
            bson_t m;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !query_bson_view(bson_iter_value(&it), &m)) {
                SHL_FAIL(st, 40185, "restrictSearchWithMatch must be an object, found %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            /* Parse it now so its errors come before any document is read. */
            shl_matcher_destroy(check);
            check = NULL;
            SHL_ERR(shl_matcher_new(&m, SHL_MATCHER_DEFAULT, &check, st));
            bson_reinit(&s->restrict_spec);
            bson_concat(&s->restrict_spec, &m);
            s->has_restrict = true;
        } else {
            SHL_FAIL(st, 40104, "Unknown argument to $graphLookup: %s", k);
        }
    }
    if (s->from == NULL) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "must specify 'from' field for a $graphLookup");
    }
    if (s->as == NULL || !has_start || s->conn_from == NULL || s->conn_to == NULL) {
        SHL_FAIL(st, 40105,
                 "from, as, startWith, connectFromField and connectToField must all be "
                 "specified");
    }
done:
    shl_matcher_destroy(check);
    return ret;
}

int
pipe_parse_union_with(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    shl_pipeline_t *p = s->pipe;
    bson_iter_t it, acopy = *arg;

    if (BSON_ITER_HOLDS_UTF8(&acopy)) {
        s->from = bson_strdup(bson_iter_utf8(&acopy, NULL));
    } else if (BSON_ITER_HOLDS_DOCUMENT(&acopy)) {
        bson_t view;
        query_bson_view(bson_iter_value(&acopy), &view);
        bson_iter_init(&it, &view);
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (strcmp(k, "coll") == 0) {
                if (!BSON_ITER_HOLDS_UTF8(&it)) {
                    SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                             "BSON field '$unionWith.coll' is the wrong type '%s', expected type "
                             "'string'",
                             shl_bson_type_name(shl_iter_type(&it)));
                }
                s->from = bson_strdup(bson_iter_utf8(&it, NULL));
            } else if (strcmp(k, "pipeline") == 0) {
                bson_t arr;
                if (!BSON_ITER_HOLDS_ARRAY(&it) || !query_bson_view(bson_iter_value(&it), &arr)) {
                    SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                             "BSON field '$unionWith.pipeline' is the wrong type '%s', expected "
                             "type 'array'",
                             shl_bson_type_name(shl_iter_type(&it)));
                }
                bson_reinit(&s->sub_spec);
                bson_concat(&s->sub_spec, &arr);
                s->has_sub = true;
            } else {
                SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                         "BSON field '$unionWith.%s' is an unknown field.", k);
            }
        }
        if (s->from == NULL && !s->has_sub) {
            SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                     "BSON field '$unionWith.coll' is missing but a required field");
        }
    } else {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "the $unionWith stage specification must be an object or string, but found %s",
                 shl_bson_type_name(shl_iter_type(&acopy)));
    }
    SHL_ERR(pipe_sub_parse(p, &s->sub_spec, CTX_UNION_WITH, NULL, &s->run, st));
    if (s->from == NULL && !shl_pipeline_generates_input(s->run)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "$unionWith stage without explicit collection must have a pipeline with "
                 "$documents as first stage");
    }
done:
    return ret;
}
