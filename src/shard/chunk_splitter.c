/*
 * chunk_splitter.c -- auto-split (chunk_splitter.h; seeds/000 "Auto-splitting", "The auto
 * split task", "Top Chunk Optimization", "Jumbo Chunks"; docs/design/balancer.md
 * "Auto-split"): the per-chunk write counters, the bounded queue and the splitter thread.
 */
#include "shard/chunk_splitter.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/namespace.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/service.h"
#include "sharding/shard_key.h"

#define DEFAULT_CHUNK_SIZE_BYTES (128LL * 1024 * 1024)
/* The splitter re-reads the chunk size settings this often while collections take writes,
 * and every SETTINGS_IDLE_REFRESH_MS otherwise (a smaller chunk size may make chunks written
 * before it due for a split). */
#define SETTINGS_REFRESH_MS 2000
#define SETTINGS_IDLE_REFRESH_MS 5000
#define CONFIG_TIMEOUT_MS 30000
static const shl_remote_options_t cfg_opts = {.timeout_ms = CONFIG_TIMEOUT_MS};

typedef struct split_task {
    char *ns;
    bson_t *min, *max;
    struct split_task *next;
} split_task_t;

/* A collection's own setting: maxChunkSizeBytes, or noAutoSplit (bytes 0). */
typedef struct coll_setting {
    char *ns;
    int64_t bytes;
    struct coll_setting *next;
} coll_setting_t;

typedef struct shard_splitter {
    pthread_mutex_t mu; /* guards the fields up to 'thread' */
    pthread_cond_t cv;
    split_task_t *head, *tail;
    int ntasks;
    bool stop, started;
    pthread_t thread;
    coll_setting_t *colls;
    /* config.settings, as last read (lock-free for the write path). */
    atomic_int_fast64_t default_bytes;
    atomic_bool enabled;
    atomic_bool dirty; /* a tracked write happened since the last settings read */
    atomic_bool count_reads; /* config.settings balancer policy is "load" */
    int64_t decayed_ms;      /* thread-only: when the load counters were last decayed */
    atomic_int_fast64_t splits, chunks_created, jumbo_marked, dropped, failed;
    int64_t refreshed_ms; /* thread-only */
} shard_splitter_t;

/* ---------------------------------------------------------------- counters */

/* The load policy's key samples of one chunk (guarded by the metadata's load_mu). */
#define SHARD_LOAD_SAMPLES 33
typedef struct shard_load_ring {
    bson_t *keys[SHARD_LOAD_SAMPLES];
    uint32_t next;
} shard_load_ring_t;

void
shard_splitter_meta_init(shard_coll_meta_t *m)
{
    size_t n = shl_routing_table_nchunks(m->rt);

    m->ncounters = n;
    m->chunk_bytes = bson_malloc0((n + 1) * sizeof(*m->chunk_bytes));
    m->chunk_queued = bson_malloc0((n + 1) * sizeof(*m->chunk_queued));
    m->chunk_ops = bson_malloc0((n + 1) * sizeof(*m->chunk_ops));
    m->load_rings = bson_malloc0((n + 1) * sizeof(*m->load_rings));
    pthread_mutex_init(&m->load_mu, NULL);
    for (size_t i = 0; i < n; i++) {
        atomic_init(&m->chunk_ops[i], 0);
        atomic_init(&m->chunk_bytes[i], 0);
        atomic_init(&m->chunk_queued[i], false);
    }
}

void
shard_splitter_meta_cleanup(shard_coll_meta_t *m)
{
    bson_free(m->chunk_bytes);
    bson_free(m->chunk_queued);
    bson_free(m->chunk_ops);
    m->chunk_ops = NULL;
    if (m->load_rings != NULL) {
        for (size_t i = 0; i < m->ncounters; i++) {
            for (size_t k = 0; k < SHARD_LOAD_SAMPLES; k++) {
                if (m->load_rings[i].keys[k] != NULL) {
                    bson_destroy(m->load_rings[i].keys[k]);
                }
            }
        }
        bson_free(m->load_rings);
        m->load_rings = NULL;
        pthread_mutex_destroy(&m->load_mu);
    }
    m->chunk_bytes = NULL;
    m->chunk_queued = NULL;
    m->ncounters = 0;
}

void
shard_splitter_carry_over(const shard_coll_meta_t *old, shard_coll_meta_t *m)
{
    shl_status_t st = SHL_STATUS_INIT;

    if (old->rt == NULL || m->rt == NULL || old->chunk_bytes == NULL || m->chunk_bytes == NULL ||
        !shl_uuid_eq(shl_routing_table_uuid(old->rt), shl_routing_table_uuid(m->rt))) {
        return;
    }
    for (size_t i = 0; i < m->ncounters; i++) {
        bson_t min, max, omin, omax;
        size_t j;
        shl_routing_table_chunk_bounds(m->rt, i, &min, &max);
        if (shl_routing_table_find_chunk(old->rt, &min, &j, &st) != 0) {
            shl_status_clear(&st);
            continue;
        }
        shl_routing_table_chunk_bounds(old->rt, j, &omin, &omax);
        if (j < old->ncounters && shl_shard_key_compare(&min, &omin) == 0 &&
            shl_shard_key_compare(&max, &omax) == 0 &&
            strcmp(shl_routing_table_chunk_shard(old->rt, j),
                   shl_routing_table_chunk_shard(m->rt, i)) == 0) {
            atomic_store(&m->chunk_bytes[i], atomic_load(&old->chunk_bytes[j]));
            atomic_store(&m->chunk_queued[i], atomic_load(&old->chunk_queued[j]));
            atomic_store(&m->chunk_ops[i], atomic_load(&old->chunk_ops[j]));
        }
    }
}

/* The maximum chunk size of 'ns' (0: noAutoSplit). */
static int64_t
max_bytes_for(shard_splitter_t *sp, const char *ns)
{
    int64_t bytes = atomic_load(&sp->default_bytes);

    pthread_mutex_lock(&sp->mu);
    for (coll_setting_t *c = sp->colls; c != NULL; c = c->next) {
        if (strcmp(c->ns, ns) == 0) {
            bytes = c->bytes;
            break;
        }
    }
    pthread_mutex_unlock(&sp->mu);
    return bytes;
}

static bool
user_ns(const char *ns)
{
    return strncmp(ns, "config.", 7) != 0 && strncmp(ns, "admin.", 6) != 0 &&
           strncmp(ns, "local.", 6) != 0 && strstr(ns, ".system.") == NULL;
}

bool
shard_splitter_tracking(shard_state_t *s, const char *ns)
{
    shard_coll_meta_t *m;
    bool tracking = false;

    if (s->splitter == NULL || !atomic_load(&s->splitter->enabled) || !user_ns(ns)) {
        return false;
    }
    m = shard_meta_peek(s, ns);
    tracking = m != NULL && m->rt != NULL && m->chunk_bytes != NULL && !m->owns_no_chunk;
    shard_meta_release(m);
    return tracking;
}

/* Queue [min, max) of 'ns'; false when the queue is full or the splitter stopped. */
static bool
enqueue(shard_splitter_t *sp, const char *ns, const bson_t *min, const bson_t *max)
{
    bool queued = false;

    pthread_mutex_lock(&sp->mu);
    if (!sp->stop && sp->ntasks < SHARD_SPLITTER_QUEUE_MAX) {
        split_task_t *t = bson_malloc0(sizeof(*t));
        t->ns = bson_strdup(ns);
        t->min = bson_copy(min);
        t->max = bson_copy(max);
        if (sp->tail != NULL) {
            sp->tail->next = t;
        } else {
            sp->head = t;
        }
        sp->tail = t;
        sp->ntasks++;
        queued = true;
        pthread_cond_signal(&sp->cv);
    }
    pthread_mutex_unlock(&sp->mu);
    return queued;
}

/* Queue chunk idx of m when its counter 'total' reached 'limit' and it is not queued yet. */
static void
maybe_queue(shard_splitter_t *sp, shard_coll_meta_t *m, size_t idx, int64_t total, int64_t limit)
{
    if (limit > 0 && total >= limit && !shl_routing_table_chunk_jumbo(m->rt, idx) &&
        !atomic_exchange(&m->chunk_queued[idx], true)) {
        bson_t min, max;
        /* The split task starts counting afresh: what arrives meanwhile belongs to the
         * chunks the split makes. */
        atomic_store(&m->chunk_bytes[idx], 0);
        shl_routing_table_chunk_bounds(m->rt, idx, &min, &max);
        if (!enqueue(sp, shl_routing_table_ns(m->rt), &min, &max)) {
            atomic_store(&m->chunk_queued[idx], false);
            atomic_fetch_add(&sp->dropped, 1);
        }
    }
}

/* The metadata of every user collection this shard knows sharded and counts for, referenced
 * (release each with shard_meta_release and free the array): with byte counters (auto-split)
 * or, 'ops', operation counters (the load policy). */
static size_t
tracked_metas(shard_state_t *s, bool ops, shard_coll_meta_t ***out)
{
    shard_coll_meta_t **metas = NULL;
    size_t n = 0, cap = 0;

    pthread_mutex_lock(&s->mu);
    for (shard_csr_t *c = s->csrs; c != NULL; c = c->next) {
        shard_coll_meta_t *m = c->meta;
        if (m == NULL || m->rt == NULL || (ops ? m->chunk_ops == NULL : m->chunk_bytes == NULL) ||
            m->owns_no_chunk || !user_ns(c->ns)) {
            continue;
        }
        if (n == cap) {
            cap = cap == 0 ? 8 : cap * 2;
            metas = bson_realloc(metas, cap * sizeof(*metas));
        }
        shl_db_orphan_filter_ref(&m->filter);
        metas[n++] = m;
    }
    pthread_mutex_unlock(&s->mu);
    *out = metas;
    return n;
}

/* After the settings changed: queue every chunk whose counter is already past the (maybe
 * smaller) threshold; otherwise a chunk written before the change waits for another write. */
static void
scan_counters(shard_state_t *s)
{
    shard_splitter_t *sp = s->splitter;
    shard_coll_meta_t **metas = NULL;
    size_t n;

    if (!atomic_load(&sp->enabled)) {
        return;
    }
    n = tracked_metas(s, false, &metas);
    for (size_t k = 0; k < n; k++) {
        shard_coll_meta_t *m = metas[k];
        int64_t limit =
            max_bytes_for(sp, shl_routing_table_ns(m->rt)) / SHARD_SPLIT_TEST_FACTOR;
        for (size_t i = 0; i < m->ncounters; i++) {
            if (strcmp(shl_routing_table_chunk_shard(m->rt, i), m->shard_name) == 0) {
                maybe_queue(sp, m, i, atomic_load(&m->chunk_bytes[i]), limit);
            }
        }
        shard_meta_release(m);
    }
    bson_free(metas);
}

/* Reads are counted one in LOAD_READ_SAMPLE per thread, each counted one weighing
 * LOAD_READ_SAMPLE: the counters are estimates, and a read's key extraction and chunk look-up
 * is most of its counting cost (docs/design/balancer.md "Unversioned reads"). */
#define LOAD_READ_SAMPLE 4
static __thread unsigned tls_reads; /* this thread's reads seen, for the sampling */

/* Count 'weight' operations on chunk idx of m; while the policy is "load", the key goes into
 * the chunk's ring once in 4 operations (always for a sampled read of weight 4). */
static void
load_count(shard_splitter_t *sp, shard_coll_meta_t *m, size_t idx, const bson_t *key,
           int64_t weight)
{
    int64_t before = atomic_fetch_add(&m->chunk_ops[idx], weight);
    shard_load_ring_t *ring;

    if (!atomic_load(&sp->count_reads) || m->load_rings == NULL ||
        (weight == 1 && (before & 3) != 0)) {
        return;
    }
    pthread_mutex_lock(&m->load_mu);
    ring = &m->load_rings[idx];
    if (ring->keys[ring->next] != NULL) {
        bson_destroy(ring->keys[ring->next]);
    }
    ring->keys[ring->next] = bson_copy(key);
    ring->next = (ring->next + 1) % SHARD_LOAD_SAMPLES;
    pthread_mutex_unlock(&m->load_mu);
}

static int
key_cmp(const void *a, const void *b)
{
    return shl_shard_key_compare(*(bson_t *const *)a, *(bson_t *const *)b);
}

/* The median of chunk idx's sampled keys into 'out' (appended as field "loadMedian") when it
 * lies strictly inside the chunk; nothing with too few samples. */
static void
append_load_median(shard_coll_meta_t *m, size_t idx, const bson_t *min, const bson_t *max,
                   bson_t *out)
{
    bson_t *keys[SHARD_LOAD_SAMPLES];
    size_t n = 0;

    pthread_mutex_lock(&m->load_mu);
    for (size_t k = 0; k < SHARD_LOAD_SAMPLES; k++) {
        if (m->load_rings[idx].keys[k] != NULL) {
            keys[n++] = bson_copy(m->load_rings[idx].keys[k]);
        }
    }
    pthread_mutex_unlock(&m->load_mu);
    if (n >= 8) {
        const bson_t *mid;
        qsort(keys, n, sizeof(keys[0]), key_cmp);
        mid = keys[n / 2];
        if (shl_shard_key_compare(min, mid) < 0 && shl_shard_key_compare(mid, max) < 0) {
            BSON_APPEND_DOCUMENT(out, "loadMedian", mid);
        }
    }
    for (size_t k = 0; k < n; k++) {
        bson_destroy(keys[k]);
    }
}

void
shard_splitter_note_write(shard_state_t *s, const char *ns, const bson_t *post)
{
    shard_splitter_t *sp = s->splitter;
    shard_coll_meta_t *m = NULL;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t key = BSON_INITIALIZER;
    size_t idx;
    int64_t limit, total;

    if (post == NULL || sp == NULL || !atomic_load(&sp->enabled) || !user_ns(ns)) {
        goto done;
    }
    m = shard_meta_peek(s, ns);
    if (m == NULL || m->rt == NULL || m->chunk_bytes == NULL || m->owns_no_chunk) {
        goto done;
    }
    bson_destroy(&key);
    if (shl_shard_key_extract_from_doc(shl_routing_table_key_pattern(m->rt), post, &key, &st) !=
            0 ||
        shl_routing_table_find_chunk(m->rt, &key, &idx, &st) != 0 || idx >= m->ncounters ||
        strcmp(shl_routing_table_chunk_shard(m->rt, idx), m->shard_name) != 0) {
        goto done;
    }
    atomic_store(&sp->dirty, true);
    load_count(sp, m, idx, &key, 1);
    limit = max_bytes_for(sp, ns) / SHARD_SPLIT_TEST_FACTOR;
    total = atomic_fetch_add(&m->chunk_bytes[idx], (int64_t)post->len) + (int64_t)post->len;
    maybe_queue(sp, m, idx, total, limit);
done:
    shl_status_clear(&st);
    bson_destroy(&key);
    shard_meta_release(m);
}

void
shard_load_note_read(shard_coll_meta_t *m, const bson_t *doc)
{
    shard_state_t *s = m->owner;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t key = BSON_INITIALIZER;
    size_t idx;

    if (s == NULL || s->splitter == NULL || !atomic_load(&s->splitter->count_reads) ||
        m->rt == NULL || m->chunk_ops == NULL || m->owns_no_chunk ||
        tls_reads++ % LOAD_READ_SAMPLE != 0) {
        goto done;
    }
    bson_destroy(&key);
    if (shl_shard_key_extract_from_doc(shl_routing_table_key_pattern(m->rt), doc, &key, &st) ==
            0 &&
        shl_routing_table_find_chunk(m->rt, &key, &idx, &st) == 0 && idx < m->ncounters) {
        load_count(s->splitter, m, idx, &key, LOAD_READ_SAMPLE);
    }
done:
    shl_status_clear(&st);
    bson_destroy(&key);
}

bool
shard_load_counting(shard_state_t *s)
{
    return s->splitter != NULL && atomic_load(&s->splitter->count_reads);
}

/* Decay every load counter by 1/4 (once a second): a steady rate r settles near 4 r, within
 * 10 % of it in 8 s. */
static void
decay_loads(shard_state_t *s)
{
    shard_coll_meta_t **metas = NULL;
    size_t n = tracked_metas(s, true, &metas);

    for (size_t k = 0; k < n; k++) {
        for (size_t i = 0; i < metas[k]->ncounters; i++) {
            int64_t v = atomic_load(&metas[k]->chunk_ops[i]);
            /* A subtraction, so concurrent increments are kept. */
            atomic_fetch_sub(&metas[k]->chunk_ops[i], v - (v * 3) / 4);
        }
        shard_meta_release(metas[k]);
    }
    bson_free(metas);
}

/* _shardsvrGetChunkLoad: ns -> {chunks: [{min, max, load}]} for the chunks this shard owns. */
static int
cmd_get_chunk_load(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    const char *ns = NULL;
    shard_coll_meta_t *m = NULL;
    bson_t arr;
    bson_iter_t it;

    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "_shardsvrGetChunkLoad needs a namespace string");
    }
    ns = bson_iter_utf8(&it, NULL);
    m = shard_meta_peek(s, ns);
    BSON_APPEND_ARRAY_BEGIN(reply, "chunks", &arr);
    if (m != NULL && m->rt != NULL && m->chunk_ops != NULL) {
        uint32_t k = 0;
        for (size_t i = 0; i < m->ncounters; i++) {
            bson_t min, max, e;
            char key[16];
            const char *kp;
            if (strcmp(shl_routing_table_chunk_shard(m->rt, i), m->shard_name) != 0) {
                continue;
            }
            shl_routing_table_chunk_bounds(m->rt, i, &min, &max);
            bson_uint32_to_string(k++, &kp, key, sizeof(key));
            bson_append_document_begin(&arr, kp, -1, &e);
            BSON_APPEND_DOCUMENT(&e, "min", &min);
            BSON_APPEND_DOCUMENT(&e, "max", &max);
            BSON_APPEND_INT64(&e, "load", atomic_load(&m->chunk_ops[i]));
            if (m->load_rings != NULL) {
                append_load_median(m, i, &min, &max, &e);
            }
            bson_append_document_end(&arr, &e);
        }
    }
    bson_append_array_end(reply, &arr);
done:
    shard_meta_release(m);
    return ret;
}

static const shl_command_t load_commands[] = {
    {.name = "_shardsvrGetChunkLoad",
     .run = cmd_get_chunk_load,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     .help = "internal: the decayed per-chunk operation counts of a collection (load policy)"},
};

void
shard_load_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(load_commands) / sizeof(load_commands[0]); i++) {
        shl_command_registry_add(reg, &load_commands[i]);
    }
}

/* ---------------------------------------------------------------- settings */

/* The documents of a find reply's first batch: *arr iterates them. */
static bool
first_batch(const bson_t *reply, bson_iter_t *arr)
{
    bson_iter_t it;

    return bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "cursor.firstBatch", arr) &&
           BSON_ITER_HOLDS_ARRAY(arr) && bson_iter_recurse(arr, arr);
}

static void
refresh_settings(shard_state_t *s)
{
    shard_splitter_t *sp = s->splitter;
    bson_t *cmd = NULL, reply = BSON_INITIALIZER;
    shl_status_t st = SHL_STATUS_INIT;
    bson_iter_t arr;
    int64_t bytes = DEFAULT_CHUNK_SIZE_BYTES;
    bool enabled = true, load = false;
    coll_setting_t *colls = NULL, *old;

    bson_destroy(&reply);
    cmd = BCON_NEW("find", BCON_UTF8("settings"), "filter", "{", "_id", "{", "$in", "[",
                   BCON_UTF8("chunksize"), BCON_UTF8("autosplit"), BCON_UTF8("balancer"), "]", "}",
                   "}");
    if (shl_remote_run_config(&s->remote, "config", cmd, &cfg_opts, &reply, &st) != 0) {
        goto done;
    }
    if (first_batch(&reply, &arr)) {
        while (shl_iter_next(&arr)) {
            const uint8_t *data;
            uint32_t len;
            bson_t doc;
            bson_iter_t id;
            if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
                continue;
            }
            bson_iter_document(&arr, &len, &data);
            if (!bson_init_static(&doc, data, len) || !bson_iter_init_find(&id, &doc, "_id") ||
                !BSON_ITER_HOLDS_UTF8(&id)) {
                continue;
            }
            if (strcmp(bson_iter_utf8(&id, NULL), "chunksize") == 0 &&
                shl_bson_double_at(&doc, "value") > 0) {
                bytes = (int64_t)(shl_bson_double_at(&doc, "value") * 1024 * 1024);
            } else if (strcmp(bson_iter_utf8(&id, NULL), "autosplit") == 0) {
                bson_iter_t e;
                enabled = !bson_iter_init_find(&e, &doc, "enabled") || bson_iter_as_bool(&e);
            } else if (strcmp(bson_iter_utf8(&id, NULL), "balancer") == 0) {
                bson_iter_t e;
                load = bson_iter_init_find(&e, &doc, "policy") && BSON_ITER_HOLDS_UTF8(&e) &&
                       strcmp(bson_iter_utf8(&e, NULL), "load") == 0;
            }
        }
    }
    atomic_store(&sp->count_reads, load);
    bson_destroy(cmd);
    bson_destroy(&reply);
    cmd = BCON_NEW("find", BCON_UTF8("collections"), "filter", "{", "$or", "[", "{",
                   "maxChunkSizeBytes", "{", "$exists", BCON_BOOL(true), "}", "}", "{",
                   "noAutoSplit", BCON_BOOL(true), "}", "]", "}");
    if (shl_remote_run_config(&s->remote, "config", cmd, &cfg_opts, &reply, &st) != 0) {
        goto done;
    }
    if (first_batch(&reply, &arr)) {
        while (shl_iter_next(&arr)) {
            const uint8_t *data;
            uint32_t len;
            bson_t doc;
            bson_iter_t id, f;
            coll_setting_t *c;
            if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
                continue;
            }
            bson_iter_document(&arr, &len, &data);
            if (!bson_init_static(&doc, data, len) || !bson_iter_init_find(&id, &doc, "_id") ||
                !BSON_ITER_HOLDS_UTF8(&id)) {
                continue;
            }
            c = bson_malloc0(sizeof(*c));
            c->ns = bson_strdup(bson_iter_utf8(&id, NULL));
            c->bytes = shl_bson_int64_at(&doc, "maxChunkSizeBytes");
            if (c->bytes <= 0) {
                c->bytes = bytes;
            }
            if (bson_iter_init_find(&f, &doc, "noAutoSplit") && bson_iter_as_bool(&f)) {
                c->bytes = 0;
            }
            c->next = colls;
            colls = c;
        }
    }
    atomic_store(&sp->default_bytes, bytes);
    atomic_store(&sp->enabled, enabled);
    pthread_mutex_lock(&sp->mu);
    old = sp->colls;
    sp->colls = colls;
    pthread_mutex_unlock(&sp->mu);
    colls = old;
done:
    while (colls != NULL) {
        coll_setting_t *next = colls->next;
        bson_free(colls->ns);
        bson_free(colls);
        colls = next;
    }
    if (st.code != 0) {
        SHL_LOG_DEBUG(1, SHARDING, 4201610, "Could not read the chunk size settings", "error",
                      BCON_UTF8(st.reason));
    }
    bson_destroy(cmd);
    bson_destroy(&reply);
}

/* ---------------------------------------------------------------- the split task */

/* The shard key of the document a local find {sort, skip} returns first, into *key (empty
 * when none). */
static bool
extreme_key(shard_state_t *s, const shl_ns_t *ns, const shl_shard_key_pattern_t *p, int dir,
            int skip, bson_t *key)
{
    bson_t cmd = BSON_INITIALIZER, sort = BSON_INITIALIZER, reply;
    shl_status_t st = SHL_STATUS_INIT;
    bson_iter_t it, arr;
    bool found = false;

    bson_init(key);
    if (bson_iter_init(&it, &p->pattern)) {
        while (shl_iter_next(&it)) {
            BSON_APPEND_INT32(&sort, bson_iter_key(&it), dir);
        }
    }
    BSON_APPEND_UTF8(&cmd, "find", ns->coll);
    BSON_APPEND_DOCUMENT(&cmd, "sort", &sort);
    BSON_APPEND_INT64(&cmd, "skip", skip);
    BSON_APPEND_INT64(&cmd, "limit", 1);
    if (shl_remote_run_self(&s->remote, ns->db, &cmd, NULL, &reply, &st) == 0 &&
        first_batch(&reply, &arr) && shl_iter_next(&arr) && BSON_ITER_HOLDS_DOCUMENT(&arr)) {
        const uint8_t *data;
        uint32_t len;
        bson_t doc;
        bson_iter_document(&arr, &len, &data);
        if (bson_init_static(&doc, data, len)) {
            bson_destroy(key);
            found = shl_shard_key_extract_from_doc(p, &doc, key, &st) == 0;
        }
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
    bson_destroy(&sort);
    return found;
}

/* Whether every field of 'bound' is MinKey (or MaxKey). */
static bool
bound_is_all(const bson_t *bound, bson_type_t t)
{
    return shl_shard_key_all_of_type(bound, t);
}

/* The bytes of [min, max) on this shard (dataSize over the shard key), or -1. */
static int64_t
range_bytes(shard_state_t *s, const char *ns, const bson_t *pattern, const bson_t *min,
            const bson_t *max)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    shl_status_t st = SHL_STATUS_INIT;
    int64_t size = -1;

    BSON_APPEND_UTF8(&cmd, "dataSize", ns);
    BSON_APPEND_DOCUMENT(&cmd, "keyPattern", pattern);
    BSON_APPEND_DOCUMENT(&cmd, "min", min);
    BSON_APPEND_DOCUMENT(&cmd, "max", max);
    if (shl_remote_run_self(&s->remote, "admin", &cmd, NULL, &reply, &st) == 0) {
        size = shl_bson_int64_at(&reply, "size");
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return size;
}

/* After a top-chunk split: ask the config server to move the new top chunk [min, max) to the
 * least loaded shard when the balancer is on (MongoDB 4.x's ChunkSplitter did the same), so
 * ascending inserts leave this shard at once. Best effort: a failure is logged. */
static void
move_top_chunk(shard_state_t *s, const char *ns, const bson_t *min, const bson_t *max)
{
    bson_t *cmd = BCON_NEW("_configsvrMoveChunk", BCON_UTF8(ns), "min", BCON_DOCUMENT(min),
                           "max", BCON_DOCUMENT(max));
    bson_t reply;
    shl_status_t st = SHL_STATUS_INIT;

    if (shl_remote_run_config(&s->remote, "admin", cmd,
                              &(shl_remote_options_t){.timeout_ms = CONFIG_TIMEOUT_MS * 10}, &reply,
                              &st) != 0) {
        SHL_LOG_INFO(SHARDING, 4201613, "Could not move the top chunk after an auto-split",
                     "namespace", BCON_UTF8(ns), "error", BCON_UTF8(st.reason));
    }
    bson_destroy(&reply);
    bson_destroy(cmd);
}

/* Run one task: split points, top-chunk optimisation, the commit and a refresh; or the
 * jumbo flag for a big chunk without a split point. Failures are logged and dropped. */
static void
run_task(shard_state_t *s, split_task_t *t)
{
    shard_splitter_t *sp = s->splitter;
    shard_coll_meta_t *m = NULL;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, points = BSON_INITIALIZER;
    bson_t cmin, cmax, top = BSON_INITIALIZER;
    bson_t **keys = NULL;
    size_t idx = 0, nkeys = 0;
    int64_t max_bytes;
    const shl_shard_key_pattern_t *p;
    shl_ns_t ns;
    bson_iter_t it, arr;
    char name[SHL_SHARD_ID_MAX];
    int top_kind = 0; /* 1: cut at the last key, -1: at the second key, 0: no optimisation */

    if (shl_ns_parse(&ns, t->ns, &st) != 0 || shard_meta_get(s, t->ns, &m, &st) != 0 ||
        m->rt == NULL || shl_routing_table_find_chunk(m->rt, t->min, &idx, &st) != 0) {
        goto done;
    }
    shl_routing_table_chunk_bounds(m->rt, idx, &cmin, &cmax);
    if (shl_shard_key_compare(&cmin, t->min) != 0 || shl_shard_key_compare(&cmax, t->max) != 0 ||
        strcmp(shl_routing_table_chunk_shard(m->rt, idx), m->shard_name) != 0) {
        goto done; /* split or moved since it was queued */
    }
    snprintf(name, sizeof(name), "%s", m->shard_name);
    p = shl_routing_table_key_pattern(m->rt);
    max_bytes = max_bytes_for(sp, t->ns);
    if (max_bytes <= 0 || !atomic_load(&sp->enabled)) {
        goto done;
    }
    BSON_APPEND_UTF8(&cmd, "splitVector", t->ns);
    BSON_APPEND_DOCUMENT(&cmd, "keyPattern", &p->pattern);
    BSON_APPEND_DOCUMENT(&cmd, "min", t->min);
    BSON_APPEND_DOCUMENT(&cmd, "max", t->max);
    BSON_APPEND_INT64(&cmd, "maxChunkSizeBytes", max_bytes);
    bson_destroy(&reply);
    if (shl_remote_run_self(&s->remote, "admin", &cmd, NULL, &reply, &st) != 0) {
        goto done;
    }
    if (bson_iter_init_find(&it, &reply, "splitKeys") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &arr)) {
        while (shl_iter_next(&arr)) {
            const uint8_t *data;
            uint32_t len;
            bson_t view;
            if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
                continue;
            }
            bson_iter_document(&arr, &len, &data);
            if (bson_init_static(&view, data, len)) {
                keys = bson_realloc(keys, (nkeys + 1) * sizeof(*keys));
                keys[nkeys++] = bson_copy(&view);
            }
        }
    }
    if (nkeys == 0) {
        /* No split point: the chunk is small (nothing to do), or all its documents share
         * one shard key. A chunk of the maximum size or more that cannot be split is
         * jumbo (seeds: "the chunk may be classified as a jumbo chunk"). */
        int64_t size = range_bytes(s, t->ns, &p->pattern, t->min, t->max);
        if (size >= max_bytes) {
            bson_t *mark = BCON_NEW("_configsvrMarkChunkJumbo", BCON_UTF8(t->ns), "min",
                                    BCON_DOCUMENT(t->min), "max", BCON_DOCUMENT(t->max), "shard",
                                    BCON_UTF8(name));
            bson_t r2;
            if (shl_remote_run_config(&s->remote, "admin", mark, &cfg_opts, &r2, &st) == 0) {
                atomic_fetch_add(&sp->jumbo_marked, 1);
                shl_status_clear(&st);
                (void)shard_meta_refresh(s, t->ns, NULL, &st);
            }
            bson_destroy(&r2);
            bson_destroy(mark);
        }
        goto done;
    }
    /* Top-chunk optimisation (ordered keys only): the first or last chunk of the key space
     * likely takes ascending (descending) inserts, so it is cut at its last (second) key:
     * the new top chunk holds one document and every later insert. */
    if (!shl_shard_key_pattern_is_hashed(p)) {
        if (bound_is_all(t->max, BSON_TYPE_MAXKEY)) {
            if (extreme_key(s, &ns, p, -1, 0, &top) && shl_shard_key_compare(&top, t->min) > 0 &&
                (nkeys < 2 || shl_shard_key_compare(&top, keys[nkeys - 2]) > 0)) {
                bson_destroy(keys[nkeys - 1]);
                keys[nkeys - 1] = bson_copy(&top);
                top_kind = 1;
            }
        } else if (bound_is_all(t->min, BSON_TYPE_MINKEY)) {
            if (extreme_key(s, &ns, p, 1, 1, &top) && shl_shard_key_compare(&top, t->min) > 0 &&
                (nkeys < 2 || shl_shard_key_compare(&top, keys[1]) < 0)) {
                bson_destroy(keys[0]);
                keys[0] = bson_copy(&top);
                top_kind = -1;
            }
        }
    }
    {
        bson_t *commit;
        bson_t r2;
        for (size_t i = 0; i < nkeys; i++) {
            char k[24];
            snprintf(k, sizeof(k), "%zu", i);
            BSON_APPEND_DOCUMENT(&points, k, keys[i]);
        }
        commit =
            BCON_NEW("_configsvrCommitChunkSplit", BCON_UTF8(t->ns), "min", BCON_DOCUMENT(t->min),
                     "max", BCON_DOCUMENT(t->max), "splitPoints", BCON_ARRAY(&points), "shard",
                     BCON_UTF8(name), "fromChunkSplitter", BCON_BOOL(true));
        if (shl_remote_run_config(&s->remote, "admin", commit, &cfg_opts, &r2, &st) == 0) {
            atomic_fetch_add(&sp->splits, 1);
            atomic_fetch_add(&sp->chunks_created, (int64_t)nkeys + 1);
            SHL_LOG_INFO(SHARDING, 4201611, "Auto-split a chunk", "namespace", BCON_UTF8(t->ns),
                         "splitPoints", BCON_INT64((int64_t)nkeys));
            (void)shard_meta_refresh(s, t->ns, NULL, &st);
            if (top_kind != 0) {
                /* The migration may wait for the range's deletion (waitForDelete), which waits
                 * for every metadata object that still gives this shard the range: not ours. */
                shard_meta_release(m);
                m = NULL;
                move_top_chunk(s, t->ns, top_kind > 0 ? keys[nkeys - 1] : t->min,
                               top_kind > 0 ? t->max : keys[0]);
            }
        }
        bson_destroy(&r2);
        bson_destroy(commit);
    }
done:
    if (st.code != 0) {
        atomic_fetch_add(&sp->failed, 1);
        SHL_LOG_INFO(SHARDING, 4201612, "Auto-split task failed", "namespace", BCON_UTF8(t->ns),
                     "error", BCON_UTF8(st.reason));
    }
    shard_meta_release(m);
    /* The chunk may be queued again (when it still exists: no split happened). */
    m = shard_meta_peek(s, t->ns);
    if (m != NULL && m->rt != NULL && m->chunk_queued != NULL) {
        shl_status_t ignored = SHL_STATUS_INIT;
        if (shl_routing_table_find_chunk(m->rt, t->min, &idx, &ignored) == 0 &&
            idx < m->ncounters) {
            atomic_store(&m->chunk_queued[idx], false);
        }
    }
    shard_meta_release(m);
    for (size_t i = 0; i < nkeys; i++) {
        bson_destroy(keys[i]);
    }
    bson_free(keys);
    bson_destroy(&top);
    bson_destroy(&points);
    bson_destroy(&cmd);
    bson_destroy(&reply);
}

/* ---------------------------------------------------------------- the thread */

static void
task_free(split_task_t *t)
{
    bson_free(t->ns);
    bson_destroy(t->min);
    bson_destroy(t->max);
    bson_free(t);
}

static void *
splitter_main(void *arg)
{
    shard_state_t *s = arg;
    shard_splitter_t *sp = s->splitter;

    pthread_mutex_lock(&sp->mu);
    while (!sp->stop) {
        shard_identity_t id;
        int64_t now = shl_clock_wall_ms();
        bool aware;
        pthread_mutex_unlock(&sp->mu);
        aware = shard_get_identity(s, &id);
        if (aware && (sp->refreshed_ms == 0 || now - sp->refreshed_ms >= SETTINGS_IDLE_REFRESH_MS ||
                      (atomic_load(&sp->dirty) && now - sp->refreshed_ms >= SETTINGS_REFRESH_MS))) {
            atomic_store(&sp->dirty, false);
            refresh_settings(s);
            sp->refreshed_ms = now;
            scan_counters(s);
        }
        if (aware && now - sp->decayed_ms >= 1000) {
            sp->decayed_ms = now;
            decay_loads(s);
        }
        pthread_mutex_lock(&sp->mu);
        if (sp->head != NULL && !sp->stop && aware) {
            split_task_t *t = sp->head;
            sp->head = t->next;
            if (sp->head == NULL) {
                sp->tail = NULL;
            }
            sp->ntasks--;
            pthread_mutex_unlock(&sp->mu);
            run_task(s, t);
            task_free(t);
            pthread_mutex_lock(&sp->mu);
            continue;
        }
        if (!sp->stop) {
            shl_cond_timedwait_ms(&sp->cv, &sp->mu, 500);
        }
    }
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}

void
shard_splitter_init(shard_state_t *s)
{
    shard_splitter_t *sp = bson_malloc0(sizeof(*sp));

    pthread_mutex_init(&sp->mu, NULL);
    pthread_cond_init(&sp->cv, NULL);
    atomic_init(&sp->default_bytes, DEFAULT_CHUNK_SIZE_BYTES);
    atomic_init(&sp->enabled, true);
    atomic_init(&sp->dirty, false);
    atomic_init(&sp->splits, 0);
    atomic_init(&sp->chunks_created, 0);
    atomic_init(&sp->jumbo_marked, 0);
    atomic_init(&sp->dropped, 0);
    atomic_init(&sp->failed, 0);
    s->splitter = sp;
}

void
shard_splitter_start(shard_state_t *s)
{
    shard_splitter_t *sp = s->splitter;

    pthread_mutex_lock(&sp->mu);
    if (!sp->started && pthread_create(&sp->thread, NULL, splitter_main, s) == 0) {
        sp->started = true;
    }
    pthread_mutex_unlock(&sp->mu);
}

void
shard_splitter_stop(shard_state_t *s)
{
    shard_splitter_t *sp = s->splitter;
    bool started;

    if (sp == NULL) {
        return;
    }
    atomic_store(&sp->enabled, false);
    pthread_mutex_lock(&sp->mu);
    sp->stop = true;
    started = sp->started;
    pthread_cond_broadcast(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
    if (started) {
        pthread_join(sp->thread, NULL);
    }
    while (sp->head != NULL) {
        split_task_t *t = sp->head;
        sp->head = t->next;
        task_free(t);
    }
    pthread_mutex_lock(&sp->mu);
    while (sp->colls != NULL) {
        coll_setting_t *c = sp->colls;
        sp->colls = c->next;
        bson_free(c->ns);
        bson_free(c);
    }
    pthread_mutex_unlock(&sp->mu);
}

void
shard_splitter_destroy(shard_state_t *s)
{
    shard_splitter_t *sp = s->splitter;

    if (sp != NULL) {
        s->splitter = NULL;
        pthread_mutex_destroy(&sp->mu);
        pthread_cond_destroy(&sp->cv);
        bson_free(sp);
    }
}

void
shard_splitter_server_status(shard_state_t *s, bson_t *section)
{
    shard_splitter_t *sp = s->splitter;
    bson_t sub;

    if (sp == NULL) {
        return;
    }
    BSON_APPEND_DOCUMENT_BEGIN(section, "autoSplit", &sub);
    BSON_APPEND_BOOL(&sub, "enabled", atomic_load(&sp->enabled));
    BSON_APPEND_INT64(&sub, "maxChunkSizeBytes", atomic_load(&sp->default_bytes));
    BSON_APPEND_INT64(&sub, "splits", atomic_load(&sp->splits));
    BSON_APPEND_INT64(&sub, "chunksCreated", atomic_load(&sp->chunks_created));
    BSON_APPEND_INT64(&sub, "jumboChunksMarked", atomic_load(&sp->jumbo_marked));
    BSON_APPEND_INT64(&sub, "tasksDropped", atomic_load(&sp->dropped));
    BSON_APPEND_INT64(&sub, "tasksFailed", atomic_load(&sp->failed));
    bson_append_document_end(section, &sub);
}
