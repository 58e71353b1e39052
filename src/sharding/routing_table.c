/*
 * routing_table.c -- see routing_table.h. A table is one allocation of fixed-size chunk
 * records plus one buffer of bound bytes and one of history entries, so a lookup is a
 * binary search over plain memory. Building (from scratch or incrementally) runs the same
 * pipeline MongoDB's RoutingTableHistory does: flatten the changed chunks (the newer of
 * two overlapping ones wins), merge them over the old chunks (dropping the old ones they
 * overlap), check contiguity from MinKey to MaxKey, then compute shard versions.
 */
#include "sharding/routing_table.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bson/bson_compare.h"
#include "bson/bson_util.h"

typedef struct rt_history {
    shl_ts_t valid_after;
    uint32_t shard;
} rt_history_t;

typedef struct rt_chunk {
    uint32_t min_off, min_len, max_off, max_len; /* into keys */
    uint32_t shard;                              /* into shard_names */
    uint32_t major, minor;
    uint32_t hist_off, nhist; /* into hist */
    bool jumbo;
    bool has_id;
    bool has_ocss;
    bson_oid_t id;
    shl_ts_t ocss; /* onCurrentShardSince */
} rt_chunk_t;

typedef struct rt_shard {
    shl_chunk_version_t version;
    shl_ts_t valid_after;
    size_t nchunks;
} rt_shard_t;

struct shl_routing_table {
    atomic_int refs;
    char *ns;
    shl_uuid_t uuid;
    bool unique;
    shl_collator_t *default_collator; /* a reference; NULL: simple */
    bool allow_migrations;
    shl_shard_key_pattern_t key;
    shl_chunk_version_t generation; /* placement 0|0 */
    shl_chunk_version_t coll_version;
    rt_chunk_t *chunks;
    size_t nchunks;
    uint8_t *keys;
    rt_history_t *hist;
    char **shard_names; /* sorted */
    size_t nshard_names;
    rt_shard_t *shards; /* parallel to shard_names */
    size_t nowning;
};

/* ---- accessors ---- */

static void
view_min(const shl_routing_table_t *rt, size_t i, bson_t *v)
{
    const rt_chunk_t *c = &rt->chunks[i];
    SHL_INVARIANT(bson_init_static(v, rt->keys + c->min_off, c->min_len));
}

static void
view_max(const shl_routing_table_t *rt, size_t i, bson_t *v)
{
    const rt_chunk_t *c = &rt->chunks[i];
    SHL_INVARIANT(bson_init_static(v, rt->keys + c->max_off, c->max_len));
}

void
shl_routing_table_info_from_collection(const shl_collection_type_t *coll,
                                       shl_routing_table_info_t *info)
{
    memset(info, 0, sizeof(*info));
    info->ns = coll->ns;
    info->uuid = coll->uuid;
    info->key_pattern = coll->key;
    info->unique = coll->unique;
    info->default_collation = coll->default_collation;
    info->allow_migrations = !coll->has_allow_migrations || coll->allow_migrations;
    info->generation = shl_collection_type_generation(coll);
}

shl_routing_table_t *
shl_routing_table_ref(shl_routing_table_t *rt)
{
    atomic_fetch_add_explicit(&rt->refs, 1, memory_order_relaxed);
    return rt;
}

static void
table_free(shl_routing_table_t *rt)
{
    shl_collator_release(rt->default_collator);
    bson_free(rt->ns);
    shl_shard_key_pattern_cleanup(&rt->key);
    bson_free(rt->chunks);
    bson_free(rt->keys);
    bson_free(rt->hist);
    for (size_t i = 0; i < rt->nshard_names; i++) {
        bson_free(rt->shard_names[i]);
    }
    bson_free(rt->shard_names);
    bson_free(rt->shards);
    bson_free(rt);
}

void
shl_routing_table_release(shl_routing_table_t *rt)
{
    if (rt != NULL && atomic_fetch_sub_explicit(&rt->refs, 1, memory_order_acq_rel) == 1) {
        table_free(rt);
    }
}

const char *
shl_routing_table_ns(const shl_routing_table_t *rt)
{
    return rt->ns;
}

const shl_uuid_t *
shl_routing_table_uuid(const shl_routing_table_t *rt)
{
    return &rt->uuid;
}

const shl_shard_key_pattern_t *
shl_routing_table_key_pattern(const shl_routing_table_t *rt)
{
    return &rt->key;
}

const shl_collator_t *
shl_routing_table_default_collator(const shl_routing_table_t *rt)
{
    return rt->default_collator;
}

bool
shl_routing_table_unique(const shl_routing_table_t *rt)
{
    return rt->unique;
}

bool
shl_routing_table_allow_migrations(const shl_routing_table_t *rt)
{
    return rt->allow_migrations;
}

shl_chunk_version_t
shl_routing_table_collection_version(const shl_routing_table_t *rt)
{
    return rt->coll_version;
}

size_t
shl_routing_table_nshard_names(const shl_routing_table_t *rt)
{
    return rt->nshard_names;
}

const char *
shl_routing_table_shard_name(const shl_routing_table_t *rt, size_t i)
{
    SHL_INVARIANT(i < rt->nshard_names);
    return rt->shard_names[i];
}

size_t
shl_routing_table_nshards_owning(const shl_routing_table_t *rt)
{
    return rt->nowning;
}

static int
cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The index of 'shard' in the sorted names, or -1. */
static long
shard_index(const shl_routing_table_t *rt, const char *shard)
{
    char *const *hit = bsearch(&shard, rt->shard_names, rt->nshard_names, sizeof(char *), cmp_name);
    return hit == NULL ? -1 : (long)(hit - rt->shard_names);
}

shl_chunk_version_t
shl_routing_table_shard_version(const shl_routing_table_t *rt, const char *shard)
{
    long i = shard_index(rt, shard);
    return i < 0 ? rt->generation : rt->shards[i].version;
}

shl_ts_t
shl_routing_table_shard_valid_after(const shl_routing_table_t *rt, const char *shard)
{
    long i = shard_index(rt, shard);
    return i < 0 ? SHL_TS_NULL : rt->shards[i].valid_after;
}

size_t
shl_routing_table_nchunks(const shl_routing_table_t *rt)
{
    return rt->nchunks;
}

void
shl_routing_table_chunk_bounds(const shl_routing_table_t *rt, size_t i, bson_t *min, bson_t *max)
{
    SHL_INVARIANT(i < rt->nchunks);
    view_min(rt, i, min);
    view_max(rt, i, max);
}

const char *
shl_routing_table_chunk_shard(const shl_routing_table_t *rt, size_t i)
{
    SHL_INVARIANT(i < rt->nchunks);
    return rt->shard_names[rt->chunks[i].shard];
}

shl_chunk_version_t
shl_routing_table_chunk_version(const shl_routing_table_t *rt, size_t i)
{
    shl_chunk_version_t v = rt->generation;
    SHL_INVARIANT(i < rt->nchunks);
    v.major = rt->chunks[i].major;
    v.minor = rt->chunks[i].minor;
    return v;
}

bool
shl_routing_table_chunk_jumbo(const shl_routing_table_t *rt, size_t i)
{
    SHL_INVARIANT(i < rt->nchunks);
    return rt->chunks[i].jumbo;
}

void
shl_routing_table_chunk_to_type(const shl_routing_table_t *rt, size_t i, shl_chunk_type_t *out)
{
    const rt_chunk_t *c = &rt->chunks[i];
    bson_t min, max;

    SHL_INVARIANT(i < rt->nchunks);
    memset(out, 0, sizeof(*out));
    out->has_id = c->has_id;
    out->id = c->id;
    out->has_uuid = true;
    out->uuid = rt->uuid;
    view_min(rt, i, &min);
    view_max(rt, i, &max);
    out->min = bson_copy(&min);
    out->max = bson_copy(&max);
    out->shard = bson_strdup(rt->shard_names[c->shard]);
    out->version = shl_routing_table_chunk_version(rt, i);
    out->jumbo = c->jumbo;
    out->has_on_current_shard_since = c->has_ocss;
    out->on_current_shard_since = c->ocss;
    if (c->nhist > 0) {
        out->history = bson_malloc0(c->nhist * sizeof(shl_chunk_history_t));
        out->nhistory = c->nhist;
        for (uint32_t j = 0; j < c->nhist; j++) {
            const rt_history_t *h = &rt->hist[c->hist_off + j];
            out->history[j].valid_after = h->valid_after;
            out->history[j].shard = bson_strdup(rt->shard_names[h->shard]);
        }
    }
}

/* ---- building ---- */

/* A chunk of the table being built: either chunk 'idx' of an old table or a changed chunk. */
typedef struct work {
    const shl_routing_table_t *old;
    size_t idx;
    const shl_chunk_type_t *c;
} work_t;

static void
work_min(const work_t *w, bson_t *v)
{
    if (w->c != NULL) {
        SHL_INVARIANT(bson_init_static(v, bson_get_data(w->c->min), w->c->min->len));
    } else {
        view_min(w->old, w->idx, v);
    }
}

static void
work_max(const work_t *w, bson_t *v)
{
    if (w->c != NULL) {
        SHL_INVARIANT(bson_init_static(v, bson_get_data(w->c->max), w->c->max->len));
    } else {
        view_max(w->old, w->idx, v);
    }
}

static int
cmp_work_max_desc(const void *pa, const void *pb)
{
    bson_t a, b;
    work_max(pa, &a);
    work_max(pb, &b);
    return -shl_shard_key_compare(&a, &b);
}

static bool
works_overlap(const work_t *a, const work_t *b)
{
    bson_t amin, amax, bmin, bmax;
    work_min(a, &amin);
    work_max(a, &amax);
    work_min(b, &bmin);
    work_max(b, &bmax);
    return shl_shard_key_compare(&amin, &bmax) < 0 && shl_shard_key_compare(&amax, &bmin) > 0;
}

/* "[{min}, {max})", MongoDB's ChunkRange::toString, into a bson_malloc'd string. */
static char *
range_string(const bson_t *min, const bson_t *max)
{
    char *a = shl_bson_to_string(min);
    char *b = shl_bson_to_string(max);
    char *s = bson_strdup_printf("[%s, %s)", a, b);
    bson_free(a);
    bson_free(b);
    return s;
}

static char *
work_range_string(const work_t *w)
{
    bson_t min, max;
    work_min(w, &min);
    work_max(w, &max);
    return range_string(&min, &max);
}

static int
check_name(const char *name, shl_status_t *st)
{
    if (name == NULL || name[0] == '\0') {
        return shl_status_set(st, SHL_CODE_NO_SUCH_KEY, "missing shard field");
    }
    if (strlen(name) >= SHL_SHARD_ID_MAX) {
        return shl_status_set(st, SHL_CODE_BAD_VALUE, "shard name '%s' is too long", name);
    }
    return 0;
}

/* Check one changed chunk against the table being built. */
static int
check_changed(const shl_shard_key_pattern_t *key, const shl_chunk_version_t *generation,
              const shl_chunk_version_t *old_coll_version, const shl_chunk_type_t *c,
              shl_status_t *st)
{
    int ret = 0;
    char vbuf[SHL_CHUNK_VERSION_STR_MAX], cbuf[SHL_CHUNK_VERSION_STR_MAX];
    char tbuf[40];

    if (c->min == NULL || c->max == NULL) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "missing range field");
    }
    if (bson_count_keys(c->min) != key->nfields || bson_count_keys(c->max) != key->nfields) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "chunk bounds do not have the %zu fields of the shard key",
                 key->nfields);
    }
    SHL_ERR(check_name(c->shard, st));
    for (size_t j = 0; j < c->nhistory; j++) {
        SHL_ERR(check_name(c->history[j].shard, st));
    }
    shl_chunk_version_to_string(&c->version, cbuf);
    if (!shl_ts_eq(c->version.timestamp, generation->timestamp)) {
        shl_ts_to_string(generation->timestamp, tbuf);
        SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                 "Changed chunk %s has timestamp different from that of the collection %s", cbuf,
                 tbuf);
    }
    if (old_coll_version != NULL &&
        !shl_chunk_version_is_older_or_equal(old_coll_version, &c->version)) {
        shl_chunk_version_to_string(old_coll_version, vbuf);
        SHL_FAIL(st, 626840,
                 "Changed chunk %s doesn't have version that's greater or equal than that of the "
                 "collection %s",
                 cbuf, vbuf);
    }
done:
    return ret;
}

static int
check_contiguity(const work_t *works, size_t n, shl_status_t *st)
{
    int ret = 0;
    bson_t a, b;
    char *s1 = NULL, *s2 = NULL, *json = NULL;

    if (n == 0) {
        SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                 "Chunk map found to be empty after refresh");
    }
    work_min(&works[0], &a);
    if (!shl_shard_key_all_of_type(&a, BSON_TYPE_MINKEY)) {
        json = shl_bson_to_string(&a);
        SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                 "Not all elements of %s are of type minKey", json);
    }
    for (size_t i = 0; i + 1 < n; i++) {
        int c;
        work_max(&works[i], &a);
        work_min(&works[i + 1], &b);
        c = shl_shard_key_compare(&a, &b);
        if (c != 0) {
            s1 = work_range_string(&works[i]);
            s2 = work_range_string(&works[i + 1]);
            SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                     "%s exists in the routing table between chunks %s and %s",
                     c < 0 ? "Gap" : "Overlap", s1, s2);
        }
    }
    work_max(&works[n - 1], &a);
    if (!shl_shard_key_all_of_type(&a, BSON_TYPE_MAXKEY)) {
        json = shl_bson_to_string(&a);
        SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                 "Not all elements of %s are of type maxKey", json);
    }
done:
    bson_free(s1);
    bson_free(s2);
    bson_free(json);
    return ret;
}

static const char *
work_shard(const work_t *w)
{
    return w->c != NULL ? w->c->shard : w->old->shard_names[w->old->chunks[w->idx].shard];
}

static size_t
work_nhist(const work_t *w)
{
    return w->c != NULL ? w->c->nhistory : w->old->chunks[w->idx].nhist;
}

static void
work_hist(const work_t *w, size_t j, shl_ts_t *valid_after, const char **shard)
{
    if (w->c != NULL) {
        *valid_after = w->c->history[j].valid_after;
        *shard = w->c->history[j].shard;
    } else {
        const rt_history_t *h = &w->old->hist[w->old->chunks[w->idx].hist_off + j];
        *valid_after = h->valid_after;
        *shard = w->old->shard_names[h->shard];
    }
}

/* Lay the final chunk list out in a new table (the checks have passed). */
static shl_routing_table_t *
materialize(shl_routing_table_t *rt, const work_t *works, size_t n)
{
    size_t key_bytes = 0, nhist = 0, nnames = 0, off = 0, hoff = 0;
    const char **names;

    for (size_t i = 0; i < n; i++) {
        bson_t min, max;
        work_min(&works[i], &min);
        work_max(&works[i], &max);
        key_bytes += min.len + max.len;
        nhist += work_nhist(&works[i]);
    }
    SHL_INVARIANT(key_bytes < UINT32_MAX && nhist < UINT32_MAX);

    /* Shard names: every current owner and every shard in history, sorted and unique. */
    names = bson_malloc((n + nhist) * sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        names[nnames++] = work_shard(&works[i]);
        for (size_t j = 0; j < work_nhist(&works[i]); j++) {
            shl_ts_t va;
            work_hist(&works[i], j, &va, &names[nnames++]);
        }
    }
    qsort(names, nnames, sizeof(char *), cmp_name);
    rt->shard_names = bson_malloc0((nnames > 0 ? nnames : 1) * sizeof(char *));
    for (size_t i = 0; i < nnames; i++) {
        if (rt->nshard_names == 0 || strcmp(rt->shard_names[rt->nshard_names - 1], names[i]) != 0) {
            rt->shard_names[rt->nshard_names++] = bson_strdup(names[i]);
        }
    }
    bson_free(names);
    rt->shards = bson_malloc0((rt->nshard_names > 0 ? rt->nshard_names : 1) * sizeof(rt_shard_t));
    for (size_t i = 0; i < rt->nshard_names; i++) {
        rt->shards[i].version = rt->generation;
    }

    rt->chunks = bson_malloc0(n * sizeof(rt_chunk_t));
    rt->nchunks = n;
    rt->keys = bson_malloc(key_bytes > 0 ? key_bytes : 1);
    rt->hist = bson_malloc((nhist > 0 ? nhist : 1) * sizeof(rt_history_t));
    rt->coll_version = rt->generation;
    for (size_t i = 0; i < n; i++) {
        const work_t *w = &works[i];
        rt_chunk_t *c = &rt->chunks[i];
        rt_shard_t *sh;
        bson_t min, max;

        work_min(w, &min);
        work_max(w, &max);
        c->min_off = (uint32_t)off;
        c->min_len = min.len;
        memcpy(rt->keys + off, bson_get_data(&min), min.len);
        off += min.len;
        c->max_off = (uint32_t)off;
        c->max_len = max.len;
        memcpy(rt->keys + off, bson_get_data(&max), max.len);
        off += max.len;
        c->shard = (uint32_t)shard_index(rt, work_shard(w));
        if (w->c != NULL) {
            c->major = w->c->version.major;
            c->minor = w->c->version.minor;
            c->jumbo = w->c->jumbo;
            c->has_id = w->c->has_id;
            c->id = w->c->id;
            c->has_ocss = w->c->has_on_current_shard_since;
            c->ocss = w->c->on_current_shard_since;
        } else {
            const rt_chunk_t *o = &w->old->chunks[w->idx];
            c->major = o->major;
            c->minor = o->minor;
            c->jumbo = o->jumbo;
            c->has_id = o->has_id;
            c->id = o->id;
            c->has_ocss = o->has_ocss;
            c->ocss = o->ocss;
        }
        c->hist_off = (uint32_t)hoff;
        c->nhist = (uint32_t)work_nhist(w);
        for (size_t j = 0; j < c->nhist; j++) {
            const char *s;
            work_hist(w, j, &rt->hist[hoff].valid_after, &s);
            rt->hist[hoff].shard = (uint32_t)shard_index(rt, s);
            hoff++;
        }

        shl_chunk_version_t v = shl_routing_table_chunk_version(rt, i);
        sh = &rt->shards[c->shard];
        if (sh->nchunks++ == 0) {
            rt->nowning++;
        }
        if (shl_chunk_version_is_older_than(&sh->version, &v)) {
            sh->version = v;
        }
        if (c->nhist > 0 && shl_ts_cmp(sh->valid_after, rt->hist[c->hist_off].valid_after) < 0) {
            sh->valid_after = rt->hist[c->hist_off].valid_after;
        }
        if (shl_chunk_version_is_older_than(&rt->coll_version, &v)) {
            rt->coll_version = v;
        }
    }
    return rt;
}

/*
 * The shared pipeline. 'old' is NULL for a full build ('info' then describes the
 * collection), else the table being updated ('info' NULL).
 */
static int
build(const shl_routing_table_info_t *info, const shl_routing_table_t *old,
      const shl_chunk_type_t *changed, size_t n, shl_routing_table_t **out, shl_status_t *st)
{
    int ret = 0;
    shl_routing_table_t *rt = bson_malloc0(sizeof(*rt));
    work_t *upd = NULL, *flat = NULL, *merged = NULL;
    size_t nflat = 0, nmerged = 0, nold = old != NULL ? old->nchunks : 0;
    bool key_ready = false;

    *out = NULL;
    atomic_init(&rt->refs, 1);
    if (old != NULL) {
        rt->ns = bson_strdup(old->ns);
        rt->uuid = old->uuid;
        rt->unique = old->unique;
        rt->default_collator = shl_collator_ref(old->default_collator);
        rt->allow_migrations = old->allow_migrations;
        rt->generation = old->generation;
        SHL_ERR(shl_shard_key_pattern_init(&rt->key, &old->key.pattern, st));
    } else {
        rt->ns = bson_strdup(info->ns);
        rt->uuid = info->uuid;
        rt->unique = info->unique;
        if (info->default_collation != NULL) {
            /* Stored normalised by the shards; an unreadable one routes as simple. */
            shl_status_t ignored = SHL_STATUS_INIT;
            (void)shl_collator_new(info->default_collation, &rt->default_collator, &ignored);
        }
        rt->allow_migrations = info->allow_migrations;
        rt->generation = info->generation;
        rt->generation.major = rt->generation.minor = 0;
        SHL_ERR(shl_shard_key_pattern_init(&rt->key, info->key_pattern, st));
    }
    key_ready = true;

    for (size_t i = 0; i < n; i++) {
        SHL_ERR(check_changed(&rt->key, &rt->generation, old ? &old->coll_version : NULL,
                              &changed[i], st));
    }

    /* Flatten: sort by max descending, keep the newer of overlapping neighbours. */
    upd = bson_malloc0((n > 0 ? n : 1) * sizeof(work_t));
    flat = bson_malloc0((n > 0 ? n : 1) * sizeof(work_t));
    for (size_t i = 0; i < n; i++) {
        upd[i].c = &changed[i];
    }
    qsort(upd, n, sizeof(work_t), cmp_work_max_desc);
    for (size_t i = 0; i < n; i++) {
        if (nflat > 0 && works_overlap(&upd[i], &flat[nflat - 1])) {
            if (shl_chunk_version_is_older_than(&flat[nflat - 1].c->version, &upd[i].c->version)) {
                flat[nflat - 1] = upd[i];
            }
        } else {
            flat[nflat++] = upd[i];
        }
    }
    for (size_t i = 0; i < nflat / 2; i++) {
        work_t t = flat[i];
        flat[i] = flat[nflat - 1 - i];
        flat[nflat - 1 - i] = t;
    }

    /* Merge over the old chunks; an old chunk overlapping a changed one is dropped. */
    merged = bson_malloc0((nold + nflat > 0 ? nold + nflat : 1) * sizeof(work_t));
    {
        size_t i = 0, j = 0;
        while (i < nold || j < nflat) {
            work_t o = {old, i, NULL};
            if (j == nflat) {
                merged[nmerged++] = o;
                i++;
            } else if (i == nold) {
                merged[nmerged++] = flat[j++];
            } else if (works_overlap(&o, &flat[j])) {
                i++;
            } else {
                bson_t omax, umax;
                work_max(&o, &omax);
                work_max(&flat[j], &umax);
                if (shl_shard_key_compare(&umax, &omax) < 0) {
                    merged[nmerged++] = flat[j++];
                } else {
                    merged[nmerged++] = o;
                    i++;
                }
            }
        }
    }
    SHL_ERR(check_contiguity(merged, nmerged, st));
    *out = materialize(rt, merged, nmerged);
done:
    bson_free(upd);
    bson_free(flat);
    bson_free(merged);
    if (ret != 0) {
        if (!key_ready) {
            memset(&rt->key, 0, sizeof(rt->key));
        }
        table_free(rt);
    }
    return ret;
}

int
shl_routing_table_new(const shl_routing_table_info_t *info, const shl_chunk_type_t *chunks,
                      size_t n, shl_routing_table_t **out, shl_status_t *st)
{
    return build(info, NULL, chunks, n, out, st);
}

int
shl_routing_table_update(const shl_routing_table_t *old, const shl_chunk_type_t *changed, size_t n,
                         shl_routing_table_t **out, shl_status_t *st)
{
    return build(NULL, old, changed, n, out, st);
}

/* ---- lookups ---- */

/* The last chunk whose min <= key, or -1 if key sorts before the first min. */
static long
last_min_le(const shl_routing_table_t *rt, const bson_t *key)
{
    long lo = 0, hi = (long)rt->nchunks - 1, found = -1;
    while (lo <= hi) {
        long mid = lo + (hi - lo) / 2;
        bson_t min;
        view_min(rt, (size_t)mid, &min);
        if (shl_shard_key_compare(&min, key) <= 0) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

int
shl_routing_table_find_chunk(const shl_routing_table_t *rt, const bson_t *key, size_t *idx,
                             shl_status_t *st)
{
    long i = last_min_le(rt, key);
    bson_t max;
    char *json;
    int ret;

    if (i >= 0) {
        view_max(rt, (size_t)i, &max);
        if (shl_shard_key_compare(key, &max) < 0) {
            *idx = (size_t)i;
            return 0;
        }
    }
    json = shl_bson_to_string(key);
    ret = shl_status_set(st, SHL_CODE_SHARD_KEY_NOT_FOUND,
                         "Cannot target single shard using key %s for namespace %s", json, rt->ns);
    bson_free(json);
    return ret;
}

/* The shard (index) owning chunk i at *at, or now if at is NULL. */
static int
owner_at(const shl_routing_table_t *rt, size_t i, const shl_ts_t *at, uint32_t *shard,
         shl_status_t *st)
{
    const rt_chunk_t *c = &rt->chunks[i];
    char buf[40];

    if (at == NULL || c->nhist == 0) {
        *shard = c->shard;
        return 0;
    }
    for (uint32_t j = 0; j < c->nhist; j++) {
        const rt_history_t *h = &rt->hist[c->hist_off + j];
        if (shl_ts_cmp(h->valid_after, *at) <= 0) {
            *shard = h->shard;
            return 0;
        }
    }
    shl_ts_to_string(*at, buf);
    return shl_status_set(st, SHL_CODE_STALE_CHUNK_HISTORY,
                          "Cannot find shardId the chunk belonged to at cluster time %s", buf);
}

int
shl_routing_table_shard_for_key(const shl_routing_table_t *rt, const bson_t *key,
                                const shl_ts_t *at, const char **shard, shl_status_t *st)
{
    int ret = 0;
    size_t i;
    uint32_t s;

    SHL_ERR(shl_routing_table_find_chunk(rt, key, &i, st));
    SHL_ERR(owner_at(rt, i, at, &s, st));
    *shard = rt->shard_names[s];
done:
    return ret;
}

int
shl_routing_table_shards_for_range(const shl_routing_table_t *rt, const bson_t *min,
                                   const bson_t *max, bool max_inclusive, const shl_ts_t *at,
                                   const char **shards, size_t *n, shl_status_t *st)
{
    int ret = 0;
    long start = last_min_le(rt, min);
    uint8_t *seen = bson_malloc0(rt->nshard_names > 0 ? rt->nshard_names : 1);
    size_t distinct = 0;

    *n = 0;
    for (size_t i = start < 0 ? 0 : (size_t)start; i < rt->nchunks; i++) {
        bson_t cmin;
        uint32_t s;
        int c;

        view_min(rt, i, &cmin);
        c = shl_shard_key_compare(&cmin, max);
        if (c > 0 || (c == 0 && !max_inclusive)) {
            break;
        }
        SHL_ERR(owner_at(rt, i, at, &s, st));
        if (!seen[s]) {
            seen[s] = 1;
            distinct++;
            /* Every current owner is already in: the rest cannot add one (not so for
             * history, where a past owner may own nothing now). */
            if (at == NULL && distinct == rt->nowning) {
                break;
            }
        }
    }
    for (size_t s = 0; s < rt->nshard_names; s++) {
        if (seen[s]) {
            shards[(*n)++] = rt->shard_names[s];
        }
    }
done:
    bson_free(seen);
    return ret;
}

/* ---- plans ---- */

void
shl_chunk_types_free(shl_chunk_type_t *chunks, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        shl_chunk_type_cleanup(&chunks[i]);
    }
    bson_free(chunks);
}

/* The index of the chunk whose min equals 'min' exactly. */
static int
chunk_starting_at(const shl_routing_table_t *rt, const bson_t *min, size_t *idx, shl_status_t *st)
{
    long i = last_min_le(rt, min);
    bson_t cmin;
    char *json;
    int ret;

    if (i >= 0) {
        view_min(rt, (size_t)i, &cmin);
        if (shl_shard_key_compare(&cmin, min) == 0) {
            *idx = (size_t)i;
            return 0;
        }
    }
    json = shl_bson_to_string(min);
    ret =
        shl_status_set(st, SHL_CODE_ILLEGAL_OPERATION, "no chunk of %s starts at %s", rt->ns, json);
    bson_free(json);
    return ret;
}

int
shl_routing_table_plan_split(const shl_routing_table_t *rt, const bson_t *chunk_min,
                             const bson_t *const *points, size_t npoints, shl_chunk_type_t **out,
                             size_t *nout, shl_status_t *st)
{
    int ret = 0;
    size_t idx, npieces = npoints + 1;
    shl_chunk_type_t orig, *pieces = NULL;
    shl_chunk_version_t *versions = NULL;
    bson_t max, start;
    char *a = NULL, *b = NULL;

    *out = NULL;
    *nout = 0;
    memset(&orig, 0, sizeof(orig));
    SHL_ERR(chunk_starting_at(rt, chunk_min, &idx, st));
    shl_routing_table_chunk_to_type(rt, idx, &orig);
    view_max(rt, idx, &max);
    bson_init_static(&start, bson_get_data(orig.min), orig.min->len);

    for (size_t i = 0; i <= npoints; i++) {
        const bson_t *end = i < npoints ? points[i] : &max;
        if (i < npoints) {
            if (bson_count_keys(end) != rt->key.nfields) {
                a = shl_bson_to_string(end);
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "split point %s is not a shard key of %s", a,
                         rt->ns);
            }
            SHL_ERR(shl_shard_key_check_storage(end, st));
            if (shl_shard_key_compare(orig.min, end) > 0 || shl_shard_key_compare(end, &max) >= 0) {
                a = shl_bson_to_string(end);
                b = range_string(orig.min, &max);
                SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Split key %s not contained within chunk %s",
                         a, b);
            }
        }
        if (shl_shard_key_compare(end, &start) < 0) {
            a = shl_bson_to_string(end);
            b = shl_bson_to_string(&start);
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "Split keys must be specified in strictly increasing order. Key %s was "
                     "specified after %s.",
                     a, b);
        }
        if (shl_shard_key_compare(end, &start) == 0) {
            a = range_string(&start, end);
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Split on lower bound of chunk %sis not allowed",
                     a);
        }
        SHL_INVARIANT(bson_init_static(&start, bson_get_data(end), end->len));
    }

    versions = bson_malloc(npieces * sizeof(*versions));
    SHL_ERR(shl_chunk_version_after_split(&rt->coll_version, (uint32_t)npieces, versions, st));
    pieces = bson_malloc0(npieces * sizeof(*pieces));
    for (size_t i = 0; i < npieces; i++) {
        shl_chunk_type_t *p = &pieces[i];
        shl_chunk_type_copy(&orig, p);
        p->has_id = i == 0 && orig.has_id; /* the first piece keeps the chunk's _id */
        p->jumbo = false;
        p->has_estimated_size = false;
        bson_destroy(p->min);
        bson_destroy(p->max);
        p->min = bson_copy(i == 0 ? orig.min : points[i - 1]);
        p->max = bson_copy(i < npoints ? points[i] : orig.max);
        p->version = versions[i];
    }
    *out = pieces;
    *nout = npieces;
    pieces = NULL;
done:
    bson_free(a);
    bson_free(b);
    bson_free(versions);
    if (pieces != NULL) {
        shl_chunk_types_free(pieces, npieces);
    }
    shl_chunk_type_cleanup(&orig);
    return ret;
}

int
shl_routing_table_plan_merge(const shl_routing_table_t *rt, const bson_t *min, const bson_t *max,
                             shl_ts_t valid_after, shl_chunk_type_t *out, shl_status_t *st)
{
    int ret = 0;
    size_t first, last;
    char *r = NULL;
    shl_chunk_history_t h;

    memset(out, 0, sizeof(*out));
    SHL_ERR(chunk_starting_at(rt, min, &first, st));
    for (last = first; last < rt->nchunks; last++) {
        bson_t cmax;
        view_max(rt, last, &cmax);
        if (rt->chunks[last].shard != rt->chunks[first].shard) {
            r = range_string(min, max);
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                     "could not merge chunks, the range %s spans chunks on more than one shard", r);
        }
        int c = shl_shard_key_compare(&cmax, max);
        if (c == 0) {
            break;
        }
        if (c > 0) {
            last = rt->nchunks;
            break;
        }
    }
    if (last >= rt->nchunks) {
        r = range_string(min, max);
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "could not merge chunks, the range %s does not end on a chunk boundary", r);
    }
    if (last == first) {
        r = range_string(min, max);
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "could not merge chunks, the range %s contains only one chunk", r);
    }
    shl_routing_table_chunk_to_type(rt, first, out);
    bson_destroy(out->max);
    out->max = bson_copy(max);
    out->jumbo = false;
    out->has_estimated_size = false;
    SHL_ERR(shl_chunk_version_after_merge(&rt->coll_version, &out->version, st));
    if (shl_ts_eq(valid_after, SHL_TS_NULL)) {
        /* As MongoDB: the merged chunk has been on its shard since the latest of the merged
         * chunks arrived there, so snapshot reads after that still find it. */
        for (size_t i = first; i <= last && i < rt->nchunks; i++) {
            const rt_chunk_t *c = &rt->chunks[i];
            if (c->nhist > 0 && shl_ts_cmp(rt->hist[c->hist_off].valid_after, valid_after) > 0) {
                valid_after = rt->hist[c->hist_off].valid_after;
            }
        }
    }
    h.valid_after = valid_after;
    h.shard = out->shard;
    shl_chunk_type_set_history(out, &h, 1);
    out->has_on_current_shard_since = true;
    out->on_current_shard_since = valid_after;
done:
    bson_free(r);
    if (ret != 0) {
        shl_chunk_type_cleanup(out);
    }
    return ret;
}

int
shl_routing_table_plan_move(const shl_routing_table_t *rt, const bson_t *chunk_min,
                            const char *to_shard, shl_ts_t valid_after, shl_chunk_type_t **out,
                            size_t *nout, shl_status_t *st)
{
    int ret = 0;
    size_t idx, control = SIZE_MAX;
    shl_chunk_type_t *res = NULL;
    shl_chunk_version_t moved_v, control_v;
    shl_chunk_history_t *h = NULL;
    size_t n = 0;

    *out = NULL;
    *nout = 0;
    SHL_ERR(check_name(to_shard, st));
    SHL_ERR(chunk_starting_at(rt, chunk_min, &idx, st));
    if (strcmp(rt->shard_names[rt->chunks[idx].shard], to_shard) == 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Destination shard cannot be the same as source");
    }
    for (size_t i = 0; i < rt->nchunks; i++) {
        if (i != idx && rt->chunks[i].shard == rt->chunks[idx].shard) {
            control = i;
            break;
        }
    }
    SHL_ERR(shl_chunk_version_after_move(&rt->coll_version, &moved_v, &control_v, st));

    res = bson_malloc0(2 * sizeof(*res));
    shl_routing_table_chunk_to_type(rt, idx, &res[n]);
    bson_free(res[n].shard);
    res[n].shard = bson_strdup(to_shard);
    res[n].version = moved_v;
    h = bson_malloc0((res[n].nhistory + 1) * sizeof(*h));
    h[0].valid_after = valid_after;
    h[0].shard = res[n].shard;
    for (size_t j = 0; j < res[n].nhistory; j++) {
        h[j + 1] = res[n].history[j];
    }
    shl_chunk_type_set_history(&res[n], h, res[n].nhistory + 1);
    res[n].has_on_current_shard_since = true;
    res[n].on_current_shard_since = valid_after;
    n++;
    if (control != SIZE_MAX) {
        shl_routing_table_chunk_to_type(rt, control, &res[n]);
        res[n].version = control_v;
        n++;
    }
    *out = res;
    *nout = n;
    res = NULL;
done:
    bson_free(h);
    if (res != NULL) {
        shl_chunk_types_free(res, n);
    }
    return ret;
}
