/*
 * cmd_split_vector.c -- splitVector (MongoDB's internal command; docs/design/sharding-
 * protocol.md "Config server -> shard"): the keys at which a key range of a collection
 * could be split, read from an index whose key pattern starts with the shard key. With
 * force: true the answer is the range's median key (what `split` with find/bounds uses);
 * otherwise a key every maxChunkSizeBytes / 2 worth of documents. autoSplitVector (MongoDB's
 * newer command) cuts ranges of about maxChunkSizeBytes, in either direction (moveRange with
 * one bound).
 */
#include <string.h>

#include "base/namespace.h"
#include "bson/bson_compare.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "bson/keystring.h"
#include "db/db_private.h"
#include "db/exec.h"
#include "net/command_args.h"

static const char *const split_vector_fields[] = {
    "keyPattern",      "min", "max", "force", "maxChunkSizeBytes", "maxChunkSize", "maxSplitPoints",
    "maxChunkObjects", NULL};

/* Does 'idx' start with 'pattern' (same names, ascending vs hashed alike)? */
static bool
index_has_prefix(const shl_index_t *idx, const bson_t *pattern)
{
    bson_iter_t a, b;

    if (!bson_iter_init(&a, pattern) || !bson_iter_init(&b, idx->key_pattern)) {
        return false;
    }
    while (shl_iter_next(&a)) {
        bool hashed_a = BSON_ITER_HOLDS_UTF8(&a), hashed_b;
        if (!shl_iter_next(&b) || strcmp(shl_iter_key(&a), shl_iter_key(&b)) != 0) {
            return false;
        }
        hashed_b = BSON_ITER_HOLDS_UTF8(&b);
        if (hashed_a != hashed_b) {
            return false;
        }
        if (hashed_a && strcmp(bson_iter_utf8(&a, NULL), bson_iter_utf8(&b, NULL)) != 0) {
            return false;
        }
        if (!hashed_a && bson_iter_as_double(&b) < 0) {
            return false; /* a descending field cannot serve an ascending key range */
        }
    }
    return true;
}

/* KeyString of a bound: its values in order (missing fields: MinKey for min, MaxKey for max). */
static void
bound_key(const bson_t *pattern, const bson_t *bound, bool is_max, shl_keystring_t *ks)
{
    bson_iter_t p, b;
    bool more = bound != NULL && bson_iter_init(&b, bound);

    bson_iter_init(&p, pattern);
    while (shl_iter_next(&p)) {
        if (more && shl_iter_next(&b)) {
            shl_keystring_append_iter(ks, &b, false);
        } else {
            bson_value_t v;
            more = false;
            memset(&v, 0, sizeof(v));
            v.value_type = is_max ? BSON_TYPE_MAXKEY : BSON_TYPE_MINKEY;
            shl_keystring_append_value(ks, &v, false);
        }
    }
}

/* The key document {f1: v1, ...} of the first fields of an index entry. */
static bool
decode_key(const shl_index_t *idx, const bson_t *pattern, const uint8_t *key, size_t len,
           bson_t *out)
{
    size_t nfields = bson_count_keys(idx->key_pattern);
    bool *desc = bson_malloc0((nfields + 1) * sizeof(*desc));
    bson_iter_t it, vals, p;
    bson_t arr;
    size_t i = 0;
    int64_t rid;
    bool ok;

    bson_iter_init(&it, idx->key_pattern);
    while (shl_iter_next(&it)) {
        desc[i++] = BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_double(&it) < 0;
    }
    ok = shl_keystring_decode(key, len, desc, nfields, &arr, idx->rid_suffix ? &rid : NULL);
    bson_free(desc);
    bson_init(out);
    if (ok) {
        bson_iter_init(&vals, &arr);
        bson_iter_init(&p, pattern);
        while (shl_iter_next(&p) && shl_iter_next(&vals)) {
            bson_append_value(out, shl_iter_key(&p), -1, bson_iter_value(&vals));
        }
    }
    bson_destroy(&arr);
    return ok;
}

/* Split points are estimates: their reads pass over prepared writes instead of waiting. */
static const shl_storage_txn_opts_t split_read_opts = {.ignore_prepare = true};

static int
cmd_split_vector(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    bson_iter_t it;
    shl_ns_t ns;
    bson_t pattern, min, max, arr;
    bool has_pattern = false, has_min = false, has_max = false, found = false, force = false;
    bool locked = false;
    int64_t max_bytes = 0, max_mb = 0, max_points = 0, max_objects = 0;
    shl_coll_handle_t h;
    shl_storage_txn_t *txn = NULL;
    shl_index_cursor_t *cur = NULL;
    shl_keystring_t k0, k1;
    const shl_index_t *idx = NULL;
    int64_t nkeys = 0, every = 0, npoints = 0;
    char key[24];

    shl_keystring_init(&k0);
    shl_keystring_init(&k1);
    bson_init(&arr);
    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, split_vector_fields, st));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'splitVector.splitVector' is the wrong type, expected type "
                 "'string'");
    }
    if (shl_ns_parse(&ns, bson_iter_utf8(&it, NULL), st) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "invalid namespace '%s'",
                 bson_iter_utf8(&it, NULL));
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "keyPattern", &pattern, &has_pattern, st));
    if (!has_pattern || bson_empty(&pattern)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "no key pattern found in splitVector");
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "min", &min, &has_min, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "max", &max, &has_max, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "force", &force, st));
    SHL_ERR(shl_cmd_get_int64(cmd, "maxChunkSizeBytes", &max_bytes, &found, st));
    SHL_ERR(shl_cmd_get_int64(cmd, "maxChunkSize", &max_mb, &found, st));
    SHL_ERR(shl_cmd_get_int64(cmd, "maxSplitPoints", &max_points, &found, st));
    SHL_ERR(shl_cmd_get_int64(cmd, "maxChunkObjects", &max_objects, &found, st));
    if (max_bytes <= 0 && max_mb > 0) {
        max_bytes = max_mb * 1024 * 1024;
    }
    if (!force && max_bytes <= 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "need to specify the desired max chunk size (maxChunkSize or maxChunkSizeBytes)");
    }

    SHL_ERR(shl_storage_coll_acquire(node->eng, ns.full, SHL_LOCK_SHARED, &h, st));
    locked = true;
    if (h.coll == NULL) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "ns not found");
    }
    for (size_t i = 0; i < h.coll->nindexes && idx == NULL; i++) {
        if (index_has_prefix(h.coll->indexes[i], &pattern)) {
            idx = h.coll->indexes[i];
        }
    }
    if (idx == NULL) {
        char *s = shl_bson_as_json(&pattern);
        ret = shl_status_set(st, SHL_CODE_INDEX_NOT_FOUND,
                             "couldn't find index over splitting key %s", s);
        bson_free(s);
        goto done;
    }
    bound_key(&pattern, has_min ? &min : NULL, false, &k0);
    bound_key(&pattern, has_max ? &max : NULL, true, &k1);
    {
        int64_t nrec = shl_collection_num_records(h.coll);
        int64_t size = shl_collection_data_size(h.coll);
        int64_t avg = nrec > 0 ? size / nrec : 0;
        if (nrec == 0) {
            goto reply;
        }
        if (!force) {
            /* A chunk is split when it reaches the max size: points every half of it. */
            if (size < max_bytes) {
                goto reply;
            }
            every = avg > 0 ? max_bytes / (2 * avg) : 1;
            if (max_objects > 0 && max_objects < every) {
                every = max_objects;
            }
            if (every < 1) {
                every = 1;
            }
        }
    }
    SHL_ERR(shl_storage_txn_begin(node->eng, &split_read_opts, &txn, st));
    if (force) {
        /* Count the range, then take the key in the middle. */
        shl_key_bound_t b0 = {k0.data, k0.len}, b1 = {k1.data, k1.len};
        SHL_ERR(shl_index_cursor_open(txn, idx, &b0, &b1, true, &cur, st));
        for (;;) {
            int64_t rid;
            bool eof;
            SHL_ERR(shl_index_cursor_next(cur, &rid, NULL, NULL, &eof, st));
            if (eof) {
                break;
            }
            nkeys++;
        }
        shl_index_cursor_close(cur);
        cur = NULL;
        every = nkeys / 2;
        max_points = 1;
        if (every < 1) {
            goto reply;
        }
    }
    {
        shl_key_bound_t b0 = {k0.data, k0.len}, b1 = {k1.data, k1.len};
        bson_t first = BSON_INITIALIZER, prev = BSON_INITIALIZER;
        int64_t i = 0;
        bool have_first = false;
        SHL_ERR(shl_index_cursor_open(txn, idx, &b0, &b1, true, &cur, st));
        for (;;) {
            int64_t rid;
            const uint8_t *kb;
            size_t klen;
            bool eof;
            bson_t k;
            if ((ret = shl_index_cursor_next(cur, &rid, &kb, &klen, &eof, st)) != 0 || eof) {
                break;
            }
            if (!decode_key(idx, &pattern, kb, klen, &k)) {
                bson_destroy(&k);
                continue;
            }
            if (!have_first) {
                bson_destroy(&first);
                bson_copy_to(&k, &first);
                have_first = true;
            }
            /* A split point is never the range's first key nor the previous point. */
            if (i > 0 && (force ? i >= every : i % every == 0) && !bson_equal(&k, &first) &&
                !bson_equal(&k, &prev)) {
                snprintf(key, sizeof(key), "%lld", (long long)npoints);
                BSON_APPEND_DOCUMENT(&arr, key, &k);
                bson_destroy(&prev);
                bson_copy_to(&k, &prev);
                npoints++;
            }
            bson_destroy(&k);
            i++;
            if (max_points > 0 && npoints >= max_points) {
                break;
            }
        }
        bson_destroy(&first);
        bson_destroy(&prev);
        if (ret != 0) {
            goto done;
        }
    }
reply:
    BSON_APPEND_ARRAY(reply, "splitKeys", &arr);
done:
    shl_index_cursor_close(cur);
    shl_storage_txn_abort(txn);
    if (locked) {
        shl_storage_coll_release(&h);
    }
    shl_keystring_cleanup(&k0);
    shl_keystring_cleanup(&k1);
    bson_destroy(&arr);
    return ret;
}

/* ---------------------------------------------------------------- autoSplitVector */

/* Growable list of owned key documents. */
typedef struct key_list {
    bson_t **keys;
    size_t n, cap;
} key_list_t;

static void
key_list_push(key_list_t *l, const bson_t *k)
{
    if (l->n == l->cap) {
        l->cap = l->cap == 0 ? 4 : l->cap * 2;
        l->keys = bson_realloc(l->keys, l->cap * sizeof(*l->keys));
    }
    l->keys[l->n++] = bson_copy(k);
}

static void
key_list_pop(key_list_t *l)
{
    bson_destroy(l->keys[--l->n]);
}

static void
key_list_cleanup(key_list_t *l)
{
    while (l->n > 0) {
        key_list_pop(l);
    }
    bson_free(l->keys);
    l->keys = NULL;
    l->cap = 0;
}

/* The first key of [lo, hi) in the given direction into *out (*found false: empty). */
static int
edge_key(shl_storage_txn_t *txn, const shl_index_t *idx, const bson_t *pattern,
         const shl_keystring_t *lo, const shl_keystring_t *hi, bool forward, bson_t *out,
         bool *found, shl_status_t *st)
{
    int ret = 0;
    shl_index_cursor_t *cur = NULL;
    shl_key_bound_t b0 = {lo->data, lo->len}, b1 = {hi->data, hi->len};

    bson_init(out);
    *found = false;
    SHL_ERR(shl_index_cursor_open(txn, idx, &b0, &b1, forward, &cur, st));
    for (;;) {
        int64_t rid;
        const uint8_t *kb;
        size_t klen;
        bool eof;
        SHL_ERR(shl_index_cursor_next(cur, &rid, &kb, &klen, &eof, st));
        if (eof) {
            break;
        }
        bson_destroy(out);
        if (decode_key(idx, pattern, kb, klen, out)) {
            *found = true;
            break;
        }
    }
done:
    shl_index_cursor_close(cur);
    return ret;
}

/*
 * Walk [lo, hi) in the given direction and add to 'pts' a key every 'every' entries, at
 * most 'max_points' of them (0: no limit). A key equal to the previous point ('prev', then
 * the last one added) or to 'never' is skipped: the same key cannot bound two ranges, and a
 * point at 'never' would leave an empty range behind. *tail is the number of entries after
 * the last point.
 */
static int
scan_points(shl_storage_txn_t *txn, const shl_index_t *idx, const bson_t *pattern,
            const shl_keystring_t *lo, const shl_keystring_t *hi, bool forward, int64_t every,
            size_t max_points, const bson_t *prev, const bson_t *never, key_list_t *pts,
            int64_t *tail, shl_status_t *st)
{
    int ret = 0;
    shl_index_cursor_t *cur = NULL;
    shl_key_bound_t b0 = {lo->data, lo->len}, b1 = {hi->data, hi->len};
    size_t added = 0;
    int64_t n = 0;

    *tail = 0;
    SHL_ERR(shl_index_cursor_open(txn, idx, &b0, &b1, forward, &cur, st));
    for (;;) {
        int64_t rid;
        const uint8_t *kb;
        size_t klen;
        bool eof;
        bson_t k;
        SHL_ERR(shl_index_cursor_next(cur, &rid, &kb, &klen, &eof, st));
        if (eof) {
            break;
        }
        if (++n < every) {
            continue;
        }
        if (!decode_key(idx, pattern, kb, klen, &k)) {
            bson_destroy(&k);
            continue;
        }
        if ((prev != NULL && shl_bson_doc_compare(&k, prev) == 0) ||
            (never != NULL && shl_bson_doc_compare(&k, never) == 0)) {
            bson_destroy(&k); /* a frequent key: the range goes on past it */
            continue;
        }
        key_list_push(pts, &k);
        bson_destroy(&k);
        prev = pts->keys[pts->n - 1];
        n = 0;
        if (max_points > 0 && ++added == max_points) {
            break;
        }
    }
    *tail = n;
done:
    shl_index_cursor_close(cur);
    return ret;
}

/*
 * The split points of [min, max) for ranges of about max_bytes (MongoDB's autoSplitVector):
 * none when the whole collection is smaller, the range is empty or holds a single key value;
 * else, walking the shard key index from min up (forward) or from max down, a key every
 * max_bytes / (average document size) entries, at most 'limit' (0: no limit). When the last
 * range would hold less than 80% of that, the last points are placed again so the last ranges
 * are about even, or the last one is dropped when that would make them too small.
 */
static int
auto_split_points(shl_storage_txn_t *txn, const shl_collection_t *coll, const shl_index_t *idx,
                  const bson_t *pattern, const shl_keystring_t *k0, const shl_keystring_t *k1,
                  int64_t max_bytes, int64_t limit, bool forward, key_list_t *pts, shl_status_t *st)
{
    int ret = 0;
    int64_t nrec = shl_collection_num_records(coll), size = shl_collection_data_size(coll);
    int64_t avg, max_docs, tail = 0;
    bson_t lowest = BSON_INITIALIZER, highest = BSON_INITIALIZER;
    bool has_low = false, has_high = false;
    const bson_t *start, *never;

    if (size < max_bytes || nrec <= 0) {
        goto done;
    }
    bson_destroy(&lowest);
    bson_destroy(&highest);
    SHL_ERR(edge_key(txn, idx, pattern, k0, k1, true, &lowest, &has_low, st));
    SHL_ERR(edge_key(txn, idx, pattern, k0, k1, false, &highest, &has_high, st));
    if (!has_low || !has_high || shl_bson_doc_compare(&lowest, &highest) == 0) {
        goto done; /* empty, or one key value: no point can split it */
    }
    avg = size / nrec > 0 ? size / nrec : 1;
    max_docs = max_bytes / avg > 0 ? max_bytes / avg : 1;
    /* Forward, a point at the lowest key leaves [min, lowest) empty; backward, the lowest
     * key is what must not be a point (the last range [min, point) would be empty). */
    start = forward ? &lowest : NULL;
    never = forward ? NULL : &lowest;
    SHL_ERR(scan_points(txn, idx, pattern, k0, k1, forward, max_docs,
                        limit > 0 ? (size_t)limit + 1 : 0, start, never, pts, &tail, st));
    if (pts->n > 0 && (double)tail < (double)max_docs * 0.8) {
        size_t nrep = pts->n < 3 ? pts->n : 3;
        int64_t per_new = max_docs - (max_docs - tail) / (int64_t)(nrep + 1);
        if (tail < max_docs - per_new) {
            key_list_pop(pts); /* a somewhat larger last range is better */
        } else {
            shl_keystring_t from;
            const bson_t *prev;
            for (size_t i = 0; i < nrep; i++) {
                key_list_pop(pts);
            }
            prev = pts->n > 0 ? pts->keys[pts->n - 1] : start;
            shl_keystring_init(&from);
            if (pts->n > 0) {
                bound_key(pattern, pts->keys[pts->n - 1], false, &from);
            }
            if (forward) {
                ret = scan_points(txn, idx, pattern, pts->n > 0 ? &from : k0, k1, true,
                                  per_new > 0 ? per_new : 1, nrep, prev, never, pts, &tail, st);
            } else {
                ret = scan_points(txn, idx, pattern, k0, pts->n > 0 ? &from : k1, false,
                                  per_new > 0 ? per_new : 1, nrep, prev, never, pts, &tail, st);
            }
            shl_keystring_cleanup(&from);
            SHL_ERR(ret);
        }
    }
    while (limit > 0 && pts->n > (size_t)limit) {
        key_list_pop(pts);
    }
done:
    bson_destroy(&lowest);
    bson_destroy(&highest);
    return ret;
}

static const char *const auto_split_vector_fields[] = {
    "keyPattern", "min", "max", "maxChunkSizeBytes", "limit", "forward", NULL};

/*
 * autoSplitVector: coll (in the command's database), keyPattern, min, max, maxChunkSizeBytes,
 * limit? -> {splitKeys, continuation: false}. `forward: false` (Shale's; MongoDB passes the
 * direction internally) walks from max down: the keys bound ranges [key, max) of about
 * maxChunkSizeBytes, nearest to max first. moveRange without max (or min) asks this of the
 * donor with limit 1.
 */
static int
cmd_auto_split_vector(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    bson_iter_t it;
    shl_ns_t ns;
    bson_t pattern, min, max, arr = BSON_INITIALIZER;
    bool has_pattern = false, has_min = false, has_max = false, found = false, forward = true;
    bool locked = false;
    int64_t max_bytes = 0, limit = 0;
    shl_coll_handle_t h;
    shl_storage_txn_t *txn = NULL;
    shl_keystring_t k0, k1;
    const shl_index_t *idx = NULL;
    key_list_t pts = {NULL, 0, 0};

    shl_keystring_init(&k0);
    shl_keystring_init(&k1);
    db_cmd_begin(op);
    SHL_ERR(shl_cmd_check_fields(cmd, auto_split_vector_fields, st));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'autoSplitVector.autoSplitVector' is the wrong type, expected "
                 "type 'string'");
    }
    SHL_ERR(shl_ns_make(&ns, op->db, bson_iter_utf8(&it, NULL), st));
    SHL_ERR(shl_cmd_get_doc(cmd, "keyPattern", &pattern, &has_pattern, st));
    if (!has_pattern) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'autoSplitVector.keyPattern' is missing but a required field");
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "min", &min, &has_min, st));
    if (!has_min) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'autoSplitVector.min' is missing but a required field");
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "max", &max, &has_max, st));
    if (!has_max) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'autoSplitVector.max' is missing but a required field");
    }
    SHL_ERR(shl_cmd_get_int64(cmd, "maxChunkSizeBytes", &max_bytes, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'autoSplitVector.maxChunkSizeBytes' is missing but a required field");
    }
    SHL_ERR(shl_cmd_get_int64(cmd, "limit", &limit, &found, st));
    if (found && limit <= 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "autoSplitVector expects a positive limit");
    }
    if (bson_iter_init_find(&it, cmd, "forward")) {
        forward = bson_iter_as_bool(&it);
    }
    if (max_bytes <= 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "maxChunkSizeBytes must be positive");
    }

    SHL_ERR(shl_storage_coll_acquire(node->eng, ns.full, SHL_LOCK_SHARED, &h, st));
    locked = true;
    if (h.coll == NULL) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "namespace %s does not exists", ns.full);
    }
    for (size_t i = 0; i < h.coll->nindexes && idx == NULL; i++) {
        if (index_has_prefix(h.coll->indexes[i], &pattern)) {
            idx = h.coll->indexes[i];
        }
    }
    if (idx == NULL) {
        char *s = shl_bson_as_json(&pattern);
        ret = shl_status_set(st, SHL_CODE_INDEX_NOT_FOUND,
                             "couldn't find index over splitting key %s", s);
        bson_free(s);
        goto done;
    }
    bound_key(&pattern, &min, false, &k0);
    bound_key(&pattern, &max, true, &k1);
    SHL_ERR(shl_storage_txn_begin(node->eng, &split_read_opts, &txn, st));
    SHL_ERR(auto_split_points(txn, h.coll, idx, &pattern, &k0, &k1, max_bytes, limit, forward, &pts,
                              st));
    for (size_t i = 0; i < pts.n; i++) {
        char key[24];
        snprintf(key, sizeof(key), "%zu", i);
        BSON_APPEND_DOCUMENT(&arr, key, pts.keys[i]);
    }
    BSON_APPEND_ARRAY(reply, "splitKeys", &arr);
    BSON_APPEND_BOOL(reply, "continuation", false);
done:
    shl_storage_txn_abort(txn);
    if (locked) {
        shl_storage_coll_release(&h);
    }
    key_list_cleanup(&pts);
    shl_keystring_cleanup(&k0);
    shl_keystring_cleanup(&k1);
    bson_destroy(&arr);
    return ret;
}

static const shl_command_t auto_split_vector_cmd = {
    .name = "autoSplitVector",
    .run = cmd_auto_split_vector,
    .flags = 0,
    .help = "split points of a key range for ranges of about maxChunkSizeBytes",
};

static const shl_command_t split_vector_cmd = {
    .name = "splitVector",
    .run = cmd_split_vector,
    .flags = 0,
    .help = "the split points of a key range (median with force: true)",
};

void
db_register_split_vector_command(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &split_vector_cmd);
    shl_command_registry_add(reg, &auto_split_vector_cmd);
}
