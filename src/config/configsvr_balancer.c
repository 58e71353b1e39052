/*
 * configsvr_balancer.c -- the balancer: a background thread of the config server that runs
 * rounds (docs/design/balancer.md; seeds/000 "Auto-balancing", "What happens during a balancer
 * round"). A round reads every sharded collection's chunks and zones, lets the policy
 * (balancer_policy.c) pick migrations on disjoint shard pairs, runs them in parallel through
 * _configsvrMoveRange's path and writes a "balancer.round" entry to config.actionlog. Also
 * _configsvrBalancerStart / Stop / Status, which the router's balancer* commands forward to.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "bson/bson_compare.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "config/balancer_private.h"
#include "db/repl_hooks.h"
#include "config/config_private.h"
#include "sharding/shard_key.h"

/* MongoDB's intervals: 10 s between rounds, 1 s after a round that moved chunks. */
#define ROUND_INTERVAL_MS 10000
#define SHORT_ROUND_INTERVAL_MS 1000
/* config.actionlog is capped at 20 MB, as MongoDB creates it. */
#define ACTIONLOG_SIZE (20LL * 1024 * 1024)

/* {intervalMs: n}: the time between rounds (MongoDB's test fail point of the same name). */
SHL_FAILPOINT_DEFINE(overrideBalanceRoundInterval)

/*
 * The service's state. Everything is guarded by 'mu'; 'cv' is broadcast when the thread
 * should wake (start, stop, shutdown) and when a round ends (balancerStop waits for it).
 */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool running;   /* the thread exists; guarded by mu */
    bool shutdown;  /* guarded by mu */
    bool kick;      /* run a round now (balancerStart); guarded by mu */
    bool in_round;  /* guarded by mu */
    int64_t rounds; /* rounds since start-up; guarded by mu */
} g_bal = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* ---------------------------------------------------------------- settings */

typedef struct bal_settings {
    const char *mode; /* "full", "off", "autoSplitOnly" */
    bool wait_for_delete;
    bool in_window; /* now is inside activeWindow (true when there is none) */
    bool by_count;  /* policy: "chunkCount" (the seeds' count policy); else by data size */
    bool by_load;   /* policy: "load" (Shale's load policy) */
    bool attempt_jumbo; /* attemptToBalanceJumboChunks: migrations skip the size check */
    /* _secondaryThrottle: true / false, or the write concern document the recipients wait
     * for after each cloned batch (a copy when it fits; a larger one counts as true). */
    bool throttle;
    uint32_t throttle_wc_len; /* 0: none */
    uint8_t throttle_wc[256];
} bal_settings_t;

/* The migration command's secondaryThrottle from the settings (issue 16 item 2). */
static void
append_throttle(const bal_settings_t *set, bson_t *cmd)
{
    bson_t wc;

    if (set->throttle_wc_len > 0 &&
        bson_init_static(&wc, set->throttle_wc, set->throttle_wc_len)) {
        BSON_APPEND_DOCUMENT(cmd, "secondaryThrottle", &wc);
    } else if (set->throttle) {
        BSON_APPEND_BOOL(cmd, "secondaryThrottle", true);
    }
}

/* Whether now (local time) is inside the setting's activeWindow {start, stop}; a malformed
 * window keeps the balancer idle (and says why in the log), as MongoDB's refuses it. */
static bool
in_active_window(const bson_t *doc)
{
    bson_t w;
    bson_iter_t a, b;
    bool in = true;
    shl_status_t st = SHL_STATUS_INIT;
    time_t now = (time_t)(shl_clock_wall_ms() / 1000);
    struct tm tm;

    localtime_r(&now, &tm);
    if (!shl_bson_get_subdoc(doc, "activeWindow", &w)) {
        in = true;
    } else if (!bson_iter_init_find(&a, &w, "start") || !BSON_ITER_HOLDS_UTF8(&a) ||
               !bson_iter_init_find(&b, &w, "stop") || !BSON_ITER_HOLDS_UTF8(&b)) {
        in = false;
        SHL_LOG_WARNING(SHARDING, 4200507, "balancer activeWindow needs start and stop strings");
    } else if (cfg_balancer_in_window(bson_iter_utf8(&a, NULL), bson_iter_utf8(&b, NULL),
                                      tm.tm_hour * 60 + tm.tm_min, &in, &st) != 0) {
        in = false;
        SHL_LOG_WARNING(SHARDING, 4200508, "bad balancer activeWindow", "error",
                        BCON_UTF8(st.reason));
    }
    return in;
}

/*
 * config.settings {_id: "balancer"}: stopped: true is "off", else its mode, else stopped:
 * false is "full"; with no document the balancer is on ("full"), MongoDB's default (a new
 * cluster writes {mode: "full", stopped: false}, configsvr_init.c). `policy: "chunkCount"`
 * (Shale's) selects the seeds' chunk-count policy; the default balances by data size.
 */
static int
read_settings(bal_settings_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_t *q = BCON_NEW("_id", BCON_UTF8("balancer"));
    bson_t doc = BSON_INITIALIZER;
    bool found = false;
    bson_iter_t it;

    out->mode = "full";
    out->wait_for_delete = false;
    out->in_window = true;
    bson_destroy(&doc);
    SHL_ERR(cfg_find_one("settings", q, &doc, &found, st));
    if (found && bson_iter_init_find(&it, &doc, "mode") && BSON_ITER_HOLDS_UTF8(&it)) {
        const char *m = bson_iter_utf8(&it, NULL);
        out->mode = strcmp(m, "off") == 0             ? "off"
                    : strcmp(m, "autoSplitOnly") == 0 ? "autoSplitOnly"
                                                      : "full";
    }
    if (found && bson_iter_init_find(&it, &doc, "stopped") && bson_iter_as_bool(&it)) {
        out->mode = "off";
    }
    if (found && bson_iter_init_find(&it, &doc, "_waitForDelete")) {
        out->wait_for_delete = bson_iter_as_bool(&it);
    }
    out->throttle = false;
    out->throttle_wc_len = 0;
    if (found && bson_iter_init_find(&it, &doc, "_secondaryThrottle")) {
        if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
            const uint8_t *data;
            uint32_t len;
            bson_iter_document(&it, &len, &data);
            out->throttle = true;
            if (len <= sizeof(out->throttle_wc)) {
                memcpy(out->throttle_wc, data, len);
                out->throttle_wc_len = len;
            }
        } else {
            out->throttle = bson_iter_as_bool(&it);
        }
    }
    if (found) {
        out->in_window = in_active_window(&doc);
    }
    out->by_count = false;
    out->by_load = false;
    out->attempt_jumbo = found && bson_iter_init_find(&it, &doc, "attemptToBalanceJumboChunks") &&
                         bson_iter_as_bool(&it);
    if (found && bson_iter_init_find(&it, &doc, "policy") && BSON_ITER_HOLDS_UTF8(&it)) {
        out->by_count = strcmp(bson_iter_utf8(&it, NULL), "chunkCount") == 0;
        out->by_load = strcmp(bson_iter_utf8(&it, NULL), "load") == 0;
    }
done:
    bson_destroy(q);
    bson_destroy(&doc);
    return ret;
}

/* ---------------------------------------------------------------- actionlog */

/* Insert {_id, server, shard: "config", clientAddr: "", time, what, ns: "", details} into
 * config.actionlog, the shape of MongoDB's balancer entries (best effort). */
static void
actionlog(const char *what, const bson_t *details)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t doc = BSON_INITIALIZER;
    const bson_t *docs[1] = {&doc};
    const char *me = cfg_get()->svc->me;
    int64_t now = shl_clock_wall_ms();
    bson_oid_t oid;
    char id[400], oidstr[25];

    bson_oid_init(&oid, NULL);
    bson_oid_to_string(&oid, oidstr);
    snprintf(id, sizeof(id), "%s-%lld-%s", me, (long long)now, oidstr);
    BSON_APPEND_UTF8(&doc, "_id", id);
    BSON_APPEND_UTF8(&doc, "server", me);
    BSON_APPEND_UTF8(&doc, "shard", "config");
    BSON_APPEND_UTF8(&doc, "clientAddr", "");
    BSON_APPEND_DATE_TIME(&doc, "time", now);
    BSON_APPEND_UTF8(&doc, "what", what);
    BSON_APPEND_UTF8(&doc, "ns", "");
    BSON_APPEND_DOCUMENT(&doc, "details", details);
    if (cfg_insert("actionlog", docs, 1, &st) != 0) {
        SHL_LOG_WARNING(SHARDING, 4200500, "could not write config.actionlog", "what",
                        BCON_UTF8(what), "error", BCON_UTF8(st.reason));
    }
    bson_destroy(&doc);
}

static void
ensure_actionlog(void)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *cmd = BCON_NEW("create", BCON_UTF8("actionlog"), "capped", BCON_BOOL(true), "size",
                           BCON_INT64(ACTIONLOG_SIZE));
    bson_t reply;

    if (shl_remote_run_self(&cfg_get()->remote, "config", cmd, NULL, &reply, &st) != 0 && st.code != SHL_CODE_NAMESPACE_EXISTS) {
        SHL_LOG_WARNING(SHARDING, 4200501, "could not create config.actionlog", "error",
                        BCON_UTF8(st.reason));
    }
    bson_destroy(cmd);
    bson_destroy(&reply);
}

/* ---------------------------------------------------------------- migrations */

/* One migration of a round, run on its own thread. */
typedef struct bal_task {
    char *ns;
    bson_t min, max;
    char *from, *to;
    cfg_bal_reason_t reason;
    bool wait_for_delete;
    bool min_only;   /* move about one chunk size from min (the data-size policy) */
    bool force_size; /* attemptToBalanceJumboChunks: forceJumbo, no size check */
    const bal_settings_t *set; /* the round's settings (outlive the task) */
    pthread_t thread;
    bool started;
    int ret;
    shl_status_t st;
} bal_task_t;

static void *
task_main(void *arg)
{
    bal_task_t *t = arg;
    bson_t cmd = BSON_INITIALIZER, arr, reply;

    BSON_APPEND_UTF8(&cmd, "_configsvrMoveRange", t->ns);
    BSON_APPEND_UTF8(&cmd, "toShard", t->to);
    if (t->min_only) {
        /* As MongoDB 7.0's balancer: the range from min of about the chunk size. */
        BSON_APPEND_DOCUMENT(&cmd, "min", &t->min);
    } else {
        BSON_APPEND_ARRAY_BEGIN(&cmd, "bounds", &arr);
        BSON_APPEND_DOCUMENT(&arr, "0", &t->min);
        BSON_APPEND_DOCUMENT(&arr, "1", &t->max);
        bson_append_array_end(&cmd, &arr);
    }
    BSON_APPEND_BOOL(&cmd, "waitForDelete", t->wait_for_delete);
    append_throttle(t->set, &cmd);
    if (t->force_size) {
        /* The balancer never proposes a chunk flagged jumbo, so forceJumbo here only lifts
         * the donor's size check (MongoDB's kForceBalancer). */
        BSON_APPEND_BOOL(&cmd, "forceJumbo", true);
    }
    bson_init(&reply);
    shl_status_clear(&t->st);
    t->ret = cfg_move_range(NULL, &cmd, &reply, &t->st);
    if (t->ret == SHL_CODE_CHUNK_TOO_BIG) {
        /* Seeds: a migration that fails for the chunk's size flags it jumbo, so the balancer
         * does not try it round after round. */
        shl_status_t mark = SHL_STATUS_INIT;
        if (cfg_mark_chunk_jumbo(t->ns, &t->min, &t->max, &mark) != 0) {
            SHL_LOG_WARNING(SHARDING, 4201630, "could not flag a chunk jumbo", "ns",
                            BCON_UTF8(t->ns), "error", BCON_UTF8(mark.reason));
        }
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return NULL;
}

static void
task_cleanup(bal_task_t *t)
{
    bson_free(t->ns);
    bson_free(t->from);
    bson_free(t->to);
    bson_destroy(&t->min);
    bson_destroy(&t->max);
}

/* One zone range of a collection, extended to the full shard key. */
typedef struct bal_range {
    bson_t min, max;
    char *zone;
} bal_range_t;

static void
ranges_free(bal_range_t *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bson_destroy(&r[i].min);
        bson_destroy(&r[i].max);
        bson_free(r[i].zone);
    }
    bson_free(r);
}

/* The zone ranges of 'coll' from config.tags, sorted by min. */
static int
load_ranges(const shl_collection_type_t *coll, bal_range_t **out, size_t *n, shl_status_t *st)
{
    int ret = 0;
    bson_t *q = BCON_NEW("ns", BCON_UTF8(coll->ns));
    bson_t *sort = BCON_NEW("min", BCON_INT32(1));
    cfg_docs_t d = {0};

    *n = 0;
    *out = NULL;
    SHL_ERR(cfg_find("tags", q, sort, &d, st));
    *out = bson_malloc0((d.n + 1) * sizeof(**out));
    for (size_t i = 0; i < d.n; i++) {
        bson_t rmin, rmax;
        bson_iter_t it;
        if (!shl_bson_get_subdoc(d.docs[i], "min", &rmin) ||
            !shl_bson_get_subdoc(d.docs[i], "max", &rmax) ||
            !bson_iter_init_find(&it, d.docs[i], "tag") || !BSON_ITER_HOLDS_UTF8(&it)) {
            continue;
        }
        cfg_extend_bound(&rmin, coll->key, &(*out)[*n].min);
        cfg_extend_bound(&rmax, coll->key, &(*out)[*n].max);
        (*out)[*n].zone = bson_strdup(bson_iter_utf8(&it, NULL));
        (*n)++;
    }
done:
    cfg_docs_cleanup(&d);
    bson_destroy(q);
    bson_destroy(sort);
    return ret;
}

/* The zone wholly containing [min, max), or "". */
static const char *
zone_of(const bal_range_t *r, size_t n, const bson_t *min, const bson_t *max)
{
    const char *zone = "";

    for (size_t i = 0; i < n && zone[0] == '\0'; i++) {
        if (shl_shard_key_compare(&r[i].min, min) <= 0 &&
            shl_shard_key_compare(max, &r[i].max) <= 0) {
            zone = r[i].zone;
        }
    }
    return zone;
}

/*
 * The round's first step (seeds: "check if any chunk has a range that violates a zone
 * boundary"): split every chunk that a zone range's bound falls strictly inside, at that
 * bound, so that each chunk lies in one zone. *nsplit gets the number of splits. Errors: the
 * split's (the round skips the collection).
 */
static int
split_zone_boundaries(const char *ns, const shl_routing_table_t *rt, const bal_range_t *ranges,
                      size_t nranges, size_t *nsplit, shl_status_t *st)
{
    int ret = 0;
    size_t nchunks = shl_routing_table_nchunks(rt);

    *nsplit = 0;
    for (size_t r = 0; r < nranges; r++) {
        const bson_t *bounds[2] = {&ranges[r].min, &ranges[r].max};
        for (int k = 0; k < 2; k++) {
            bool done_before = false;
            /* A range's max is often the next range's min: split there once. */
            for (size_t p = 0; p < r && !done_before; p++) {
                done_before = shl_shard_key_compare(&ranges[p].min, bounds[k]) == 0 ||
                              shl_shard_key_compare(&ranges[p].max, bounds[k]) == 0;
            }
            for (size_t c = 0; c < nchunks && !done_before; c++) {
                bson_t min, max, cmd = BSON_INITIALIZER, reply;
                shl_routing_table_chunk_bounds(rt, c, &min, &max);
                if (shl_shard_key_compare(&min, bounds[k]) >= 0 ||
                    shl_shard_key_compare(bounds[k], &max) >= 0) {
                    bson_destroy(&cmd);
                    continue;
                }
                BSON_APPEND_UTF8(&cmd, "_configsvrSplitChunk", ns);
                BSON_APPEND_DOCUMENT(&cmd, "middle", bounds[k]);
                bson_init(&reply);
                ret = cfg_split_chunk(NULL, &cmd, &reply, st);
                bson_destroy(&cmd);
                bson_destroy(&reply);
                SHL_ERR(ret);
                SHL_LOG_INFO(SHARDING, 4200509, "balancer split a chunk at a zone boundary", "ns",
                             BCON_UTF8(ns), "zone", BCON_UTF8(ranges[r].zone));
                (*nsplit)++;
            }
        }
    }
done:
    return ret;
}

/* A growable list of tasks. */
typedef struct bal_plan {
    bal_task_t *tasks;
    size_t n, cap;
} bal_plan_t;

int64_t
cfg_owned_data_size(const char *shard, const char *ns)
{
    shl_ns_t n;
    bson_t *cmd = NULL, reply = BSON_INITIALIZER;
    shl_status_t ignored = SHL_STATUS_INIT;
    int64_t size = 0;

    if (shl_ns_parse(&n, ns, &ignored) == 0) {
        cmd = BCON_NEW("collStats", BCON_UTF8(n.coll));
        bson_destroy(&reply);
        if (shl_remote_run_shard(&cfg_get()->remote, shard, n.db, cmd, &cfg_remote_opts, &reply, &ignored) == 0) {
            size = shl_bson_int64_at(&reply, "size") -
                   shl_bson_int64_at(&reply, "numOrphanDocs") *
                       shl_bson_int64_at(&reply, "avgObjSize");
        }
        bson_destroy(cmd);
    }
    bson_destroy(&reply);
    return size > 0 ? size : 0;
}

/* The load policy waits this long after it moved (or split) a chunk before it moves another:
 * the recipient's counter of the moved chunk starts from zero and needs a few seconds of
 * traffic to show its load (chunk_splitter.c decays by 1/4 a second). One clock for the
 * cluster, since the policy judges the shards' total load across collections. */
#define LOAD_COOLDOWN_MS 10000

/* Balancer thread only: when the load policy last moved or split a chunk (monotonic ms). */
static int64_t g_load_moved_ms = -LOAD_COOLDOWN_MS;

/* Whether the load policy moved a chunk less than LOAD_COOLDOWN_MS ago; 'mark' records a
 * move now. */
static bool
load_cooling(bool mark)
{
    int64_t now = shl_clock_mono_us() / 1000;
    bool cooling = now - g_load_moved_ms < LOAD_COOLDOWN_MS;

    if (mark) {
        g_load_moved_ms = now;
    }
    return cooling;
}

/* One chunk with a load, of any collection, for the round's load step. */
typedef struct bal_load {
    char *ns, *shard;
    bson_t min, max;
    bson_t *median; /* the load median the shard reported, or NULL */
    bool jumbo;
    int64_t load;
} bal_load_t;

/* Balancer thread only: the round's chunks with a load (run_round's, filled per collection). */
typedef struct bal_loads {
    bal_load_t *v;
    size_t n, cap;
} bal_loads_t;

static void
loads_free(bal_loads_t *l)
{
    for (size_t i = 0; i < l->n; i++) {
        bson_free(l->v[i].ns);
        bson_free(l->v[i].shard);
        bson_destroy(&l->v[i].min);
        bson_destroy(&l->v[i].max);
        if (l->v[i].median != NULL) {
            bson_destroy(l->v[i].median);
        }
    }
    bson_free(l->v);
}

/* The load policy: 'shard''s decayed per-chunk operation counts of ns
 * (_shardsvrGetChunkLoad) into chunks[].load, for the chunks of 'rt' it owns (best effort:
 * a shard that does not answer adds nothing). */
static void
add_chunk_loads(const char *shard, const char *ns, const shl_routing_table_t *rt,
                cfg_bal_chunk_t *chunks, size_t nchunks, bson_t **medians)
{
    bson_t *cmd = BCON_NEW("_shardsvrGetChunkLoad", BCON_UTF8(ns));
    bson_t reply = BSON_INITIALIZER;
    shl_status_t ignored = SHL_STATUS_INIT;
    bson_iter_t arr, e;

    bson_destroy(&reply);
    if (shl_remote_run_shard(&cfg_get()->remote, shard, "admin", cmd, &cfg_remote_opts, &reply, &ignored) == 0 &&
        bson_iter_init_find(&arr, &reply, "chunks") && BSON_ITER_HOLDS_ARRAY(&arr) &&
        bson_iter_recurse(&arr, &arr)) {
        while (bson_iter_next(&arr)) {
            bson_t entry, min, cmin, cmax;
            const uint8_t *data;
            uint32_t len;
            size_t idx;
            if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
                continue;
            }
            bson_iter_document(&arr, &len, &data);
            if (!bson_init_static(&entry, data, len) || !bson_iter_init_find(&e, &entry, "min") ||
                !BSON_ITER_HOLDS_DOCUMENT(&e)) {
                continue;
            }
            bson_iter_document(&e, &len, &data);
            if (!bson_init_static(&min, data, len) ||
                shl_routing_table_find_chunk(rt, &min, &idx, &ignored) != 0 || idx >= nchunks) {
                shl_status_clear(&ignored);
                continue;
            }
            shl_routing_table_chunk_bounds(rt, idx, &cmin, &cmax);
            if (shl_shard_key_compare(&cmin, &min) == 0 &&
                strcmp(shl_routing_table_chunk_shard(rt, idx), shard) == 0) {
                chunks[idx].load = shl_bson_int64_at(&entry, "load");
                if (bson_iter_init_find(&e, &entry, "loadMedian") && BSON_ITER_HOLDS_DOCUMENT(&e) &&
                    medians[idx] == NULL) {
                    bson_t med;
                    bson_iter_document(&e, &len, &data);
                    if (bson_init_static(&med, data, len)) {
                        medians[idx] = bson_copy(&med);
                    }
                }
            }
        }
    }
    bson_destroy(cmd);
    bson_destroy(&reply);
}

/* The collection's maximum chunk size: its maxChunkSizeBytes, else config.settings
 * chunksize (MB), else 128 MB. */
static int64_t
chunk_size_of(const shl_collection_type_t *coll)
{
    shl_status_t ignored = SHL_STATUS_INIT;
    int64_t bytes = 0;

    (void)cfg_max_chunk_size_bytes(coll, &bytes, &ignored); /* on error: the default */
    return bytes;
}

/* Append a migration of [min, max) of ns to 'plan'. */
static void
plan_add(bal_plan_t *plan, const char *ns, const bson_t *min, const bson_t *max, const char *from,
         const char *to, cfg_bal_reason_t reason, const bal_settings_t *set)
{
    bal_task_t *t;

    if (plan->n == plan->cap) {
        plan->cap = plan->cap * 2 + 4;
        plan->tasks = bson_realloc(plan->tasks, plan->cap * sizeof(*plan->tasks));
    }
    t = &plan->tasks[plan->n++];
    memset(t, 0, sizeof(*t));
    t->ns = bson_strdup(ns);
    bson_copy_to(min, &t->min);
    bson_copy_to(max, &t->max);
    t->from = bson_strdup(from);
    t->to = bson_strdup(to);
    t->reason = reason;
    t->wait_for_delete = set->wait_for_delete;
    t->min_only = !set->by_count && !set->by_load && reason == CFG_BAL_IMBALANCE;
    t->force_size = set->attempt_jumbo;
    t->set = set;
}

/* The load policy: the decayed loads of ns's chunks on every free shard, appended to 'loads'
 * (chunks outside zones with a load only: the others neither count nor move). */
static void
collect_loads(const char *ns, const shl_shard_type_t *shards, size_t nshards, const bool *busy,
              const shl_routing_table_t *rt, cfg_bal_chunk_t *chunks, size_t nchunks,
              bal_loads_t *loads)
{
    bson_t **medians = bson_malloc0((nchunks + 1) * sizeof(*medians));

    for (size_t i = 0; i < nshards; i++) {
        if (!busy[i]) {
            add_chunk_loads(shards[i].name, ns, rt, chunks, nchunks, medians);
        }
    }
    for (size_t c = 0; c < nchunks; c++) {
        bal_load_t *l;
        bson_t min, max;
        if (chunks[c].load <= 0 || chunks[c].zone[0] != '\0') {
            if (medians[c] != NULL) {
                bson_destroy(medians[c]);
            }
            continue;
        }
        if (loads->n == loads->cap) {
            loads->cap = loads->cap * 2 + 16;
            loads->v = bson_realloc(loads->v, loads->cap * sizeof(*loads->v));
        }
        l = &loads->v[loads->n++];
        shl_routing_table_chunk_bounds(rt, c, &min, &max);
        l->ns = bson_strdup(ns);
        l->shard = bson_strdup(chunks[c].shard);
        bson_copy_to(&min, &l->min);
        bson_copy_to(&max, &l->max);
        l->median = medians[c];
        l->jumbo = chunks[c].jumbo;
        l->load = chunks[c].load;
    }
    bson_free(medians);
}

/* The load step of a round (policy "load"): the busiest shard by its total load over every
 * collection gives the chunk that evens the totals best, or its hottest chunk is split at
 * its load median when that would even them better (cfg_balancer_policy_load_total). */
static void
plan_load(const shl_shard_type_t *shards, size_t nshards, bool *busy, const bal_settings_t *set,
          const bal_loads_t *loads, bal_plan_t *plan)
{
    cfg_bal_chunk_t *chunks = bson_malloc0((loads->n + 1) * sizeof(*chunks));
    cfg_bal_move_t *moves = bson_malloc0((nshards + 1) * sizeof(*moves));
    size_t nmoves, split = loads->n;

    for (size_t i = 0; i < loads->n; i++) {
        chunks[i] = (cfg_bal_chunk_t){loads->v[i].shard, "", loads->v[i].jumbo, loads->v[i].load};
    }
    nmoves = cfg_balancer_policy_load_total(shards, nshards, chunks, loads->n, busy, moves,
                                            nshards, &split);
    for (size_t m = 0; m < nmoves; m++) {
        const bal_load_t *l = &loads->v[moves[m].chunk];
        SHL_LOG_INFO(SHARDING, 4200513, "load policy moves a chunk", "ns", BCON_UTF8(l->ns),
                     "load", BCON_INT64(l->load), "from", BCON_UTF8(shards[moves[m].from].name),
                     "to", BCON_UTF8(shards[moves[m].to].name));
        plan_add(plan, l->ns, &l->min, &l->max, shards[moves[m].from].name,
                 shards[moves[m].to].name, moves[m].reason, set);
        load_cooling(true);
    }
    if (split < loads->n && loads->v[split].median != NULL) {
        /* A hot chunk carries the imbalance alone: split it at its load median; the halves'
         * counters start again, so the next load move waits for the cool-down. */
        const bal_load_t *l = &loads->v[split];
        bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
        shl_status_t sst = SHL_STATUS_INIT;
        BSON_APPEND_UTF8(&cmd, "_configsvrSplitChunk", l->ns);
        BSON_APPEND_DOCUMENT(&cmd, "middle", l->median);
        if (cfg_split_chunk(NULL, &cmd, &reply, &sst) == 0) {
            SHL_LOG_INFO(SHARDING, 4200511, "balancer split a hot chunk at its load median", "ns",
                         BCON_UTF8(l->ns), "load", BCON_INT64(l->load));
        } else {
            SHL_LOG_WARNING(SHARDING, 4200512, "balancer could not split a hot chunk", "ns",
                            BCON_UTF8(l->ns), "error", BCON_UTF8(sst.reason));
        }
        load_cooling(true);
        bson_destroy(&cmd);
        bson_destroy(&reply);
    }
    bson_free(chunks);
    bson_free(moves);
}

/*
 * Add the migrations the policy picks for collection 'ns' to 'plan'. Collections with
 * noBalance, or whose migrations are disallowed (allowMigrations / permitMigrations false), are
 * skipped. Under the load policy only draining and zone moves are planned here, and the
 * chunks' loads are added to 'loads' (NULL: not asked for, e.g. while cooling) for the
 * round's load step.
 */
static int
plan_collection(const char *ns, const shl_shard_type_t *shards, size_t nshards, bool *busy,
                const bal_settings_t *set, bal_plan_t *plan, bal_loads_t *loads,
                shl_status_t *st)
{
    int64_t *sizes = NULL;
    int ret = 0;
    shl_collection_type_t coll;
    bool found = false;
    shl_routing_table_t *rt = NULL;
    bal_range_t *ranges = NULL;
    size_t nranges = 0, nchunks = 0, nmoves = 0;
    cfg_bal_chunk_t *chunks = NULL;
    cfg_bal_move_t *moves = NULL;

    memset(&coll, 0, sizeof(coll));
    SHL_ERR(cfg_get_collection(ns, &coll, &found, st));
    if (!found || coll.key == NULL || coll.no_balance ||
        (coll.has_allow_migrations && !coll.allow_migrations) ||
        (coll.has_permit_migrations && !coll.permit_migrations)) {
        goto done;
    }
    SHL_ERR(cfg_load_routing_table(ns, NULL, &rt, st));
    SHL_ERR(load_ranges(&coll, &ranges, &nranges, st));
    {
        size_t nsplit = 0;
        SHL_ERR(split_zone_boundaries(ns, rt, ranges, nranges, &nsplit, st));
        if (nsplit > 0) {
            shl_routing_table_release(rt);
            rt = NULL;
            SHL_ERR(cfg_load_routing_table(ns, NULL, &rt, st));
        }
    }
    nchunks = shl_routing_table_nchunks(rt);
    chunks = bson_malloc0((nchunks + 1) * sizeof(*chunks));
    for (size_t c = 0; c < nchunks; c++) {
        bson_t min, max;
        shl_routing_table_chunk_bounds(rt, c, &min, &max);
        chunks[c].shard = shl_routing_table_chunk_shard(rt, c);
        chunks[c].zone = zone_of(ranges, nranges, &min, &max);
        chunks[c].jumbo = shl_routing_table_chunk_jumbo(rt, c);
    }
    moves = bson_malloc0((nshards + 1) * sizeof(*moves));
    if (set->by_load) {
        /* Draining and zones per collection (no chunk has a load yet, so the load step picks
         * nothing); the load itself is judged across collections in run_round. */
        size_t split = nchunks;
        nmoves = cfg_balancer_policy_load(shards, nshards, chunks, nchunks, busy, moves, nshards,
                                          &split);
        if (loads != NULL) {
            collect_loads(ns, shards, nshards, busy, rt, chunks, nchunks, loads);
        }
    } else if (set->by_count) {
        nmoves = cfg_balancer_policy(shards, nshards, chunks, nchunks, busy, moves, nshards);
    } else {
        sizes = bson_malloc0((nshards + 1) * sizeof(*sizes));
        for (size_t i = 0; i < nshards; i++) {
            /* A busy shard is neither donor nor recipient: no need to ask it. */
            sizes[i] = busy[i] ? 0 : cfg_owned_data_size(shards[i].name, ns);
        }
        nmoves = cfg_balancer_policy_data_size(shards, nshards, chunks, nchunks, sizes,
                                               chunk_size_of(&coll), busy, moves, nshards);
    }
    for (size_t m = 0; m < nmoves; m++) {
        bson_t min, max;
        shl_routing_table_chunk_bounds(rt, moves[m].chunk, &min, &max);
        plan_add(plan, ns, &min, &max, shards[moves[m].from].name, shards[moves[m].to].name,
                 moves[m].reason, set);
    }
done:
    shl_collection_type_cleanup(&coll);
    if (rt != NULL) {
        shl_routing_table_release(rt);
    }
    ranges_free(ranges, nranges);
    bson_free(chunks);
    bson_free(moves);
    bson_free(sizes);
    return ret;
}

/* The round's figures for config.actionlog. */
typedef struct bal_round {
    int64_t candidates, moved;
    bson_t errors; /* array of {ns, min, max, from, to, code, errmsg} */
    uint32_t nerrors;
} bal_round_t;

/* A round stops at once when this member is no longer primary (MongoDB's balancer is
 * interrupted on step-down): what it planned is left to the next primary's rounds. */
static int
check_still_primary(shl_status_t *st)
{
    int ret = 0;

    if (!shl_db_repl_is_primary(cfg_get()->svc)) {
        ret = shl_status_set(st, SHL_CODE_INTERRUPTED_DUE_TO_REPL_STATE_CHANGE,
                             "balancer round interrupted due to a replica set state change");
    }
    return ret;
}

/*
 * One round: plan every sharded collection (in namespace order), run the migrations in
 * parallel (each shard is in at most one), wait for all of them. Errors: reading config.*;
 * a failed migration is counted in 'r', not returned.
 */
static int
run_round(const bal_settings_t *s, bal_round_t *r, shl_status_t *st)
{
    int ret = 0;
    shl_shard_type_t *shards = NULL;
    size_t nshards = 0;
    bool *busy = NULL;
    cfg_docs_t colls = {0};
    bson_t *q = BCON_NEW("key", "{", "$exists", BCON_BOOL(true), "}");
    bson_t *sort = BCON_NEW("_id", BCON_INT32(1));
    bal_plan_t plan = {0};
    bal_loads_t loads = {0};
    bool want_loads = s->by_load && !load_cooling(false);

    SHL_ERR(cfg_get_shards(&shards, &nshards, st));
    busy = bson_malloc0((nshards + 1) * sizeof(*busy));
    /* A shard that does not answer takes no part in this round (neither donor nor
     * recipient): its migrations would only fail, round after round. */
    for (size_t i = 0; i < nshards; i++) {
        bson_t *ping = BCON_NEW("ping", BCON_INT32(1));
        bson_t reply;
        shl_status_t down = SHL_STATUS_INIT;
        if (shl_remote_run_shard(&cfg_get()->remote, shards[i].name, "admin", ping, &cfg_remote_opts, &reply, &down) != 0) {
            busy[i] = true;
            SHL_LOG_WARNING(SHARDING, 4200510, "balancer skips a shard that does not answer",
                            "shard", BCON_UTF8(shards[i].name), "error", BCON_UTF8(down.reason));
        }
        bson_destroy(&reply);
        bson_destroy(ping);
    }
    SHL_ERR(cfg_find("collections", q, sort, &colls, st));
    for (size_t i = 0; i < colls.n; i++) {
        bson_iter_t it;
        shl_status_t one = SHL_STATUS_INIT;
        SHL_ERR(check_still_primary(st));
        if (!bson_iter_init_find(&it, colls.docs[i], "_id") || !BSON_ITER_HOLDS_UTF8(&it)) {
            continue;
        }
        /* A collection that cannot be read is skipped this round, not the whole round. */
        if (plan_collection(bson_iter_utf8(&it, NULL), shards, nshards, busy, s, &plan,
                            want_loads ? &loads : NULL, &one) != 0) {
            SHL_LOG_WARNING(SHARDING, 4200502, "balancer skipped a collection", "ns",
                            BCON_UTF8(bson_iter_utf8(&it, NULL)), "error", BCON_UTF8(one.reason));
        }
    }
    if (want_loads) {
        plan_load(shards, nshards, busy, s, &loads, &plan);
    }
    r->candidates = (int64_t)plan.n;
    /* No migration starts from a member that stepped down while the round planned. */
    SHL_ERR(check_still_primary(st));
    for (size_t i = 0; i < plan.n; i++) {
        bal_task_t *t = &plan.tasks[i];
        SHL_LOG_INFO(SHARDING, 4200503, "balancer moves a chunk", "ns", BCON_UTF8(t->ns), "from",
                     BCON_UTF8(t->from), "to", BCON_UTF8(t->to), "reason",
                     BCON_UTF8(cfg_bal_reason_name(t->reason)));
        t->started = pthread_create(&t->thread, NULL, task_main, t) == 0;
        if (!t->started) {
            task_main(t);
        }
    }
    for (size_t i = 0; i < plan.n; i++) {
        bal_task_t *t = &plan.tasks[i];
        if (t->started) {
            pthread_join(t->thread, NULL);
        }
        if (t->ret == 0) {
            r->moved++;
        } else {
            bson_t e;
            char key[16];
            snprintf(key, sizeof(key), "%u", r->nerrors++);
            BSON_APPEND_DOCUMENT_BEGIN(&r->errors, key, &e);
            BSON_APPEND_UTF8(&e, "ns", t->ns);
            BSON_APPEND_DOCUMENT(&e, "min", &t->min);
            BSON_APPEND_DOCUMENT(&e, "max", &t->max);
            BSON_APPEND_UTF8(&e, "from", t->from);
            BSON_APPEND_UTF8(&e, "to", t->to);
            BSON_APPEND_INT32(&e, "code", t->st.code);
            BSON_APPEND_UTF8(&e, "errmsg", t->st.reason);
            bson_append_document_end(&r->errors, &e);
            SHL_LOG_WARNING(SHARDING, 4200504, "balancer migration failed", "ns", BCON_UTF8(t->ns),
                            "from", BCON_UTF8(t->from), "to", BCON_UTF8(t->to), "error",
                            BCON_UTF8(t->st.reason));
        }
    }
done:
    loads_free(&loads);
    for (size_t i = 0; i < plan.n; i++) {
        task_cleanup(&plan.tasks[i]);
    }
    bson_free(plan.tasks);
    if (shards != NULL) {
        cfg_shards_free(shards, nshards);
    }
    bson_free(busy);
    cfg_docs_cleanup(&colls);
    bson_destroy(q);
    bson_destroy(sort);
    return ret;
}

/* ---------------------------------------------------------------- the thread */

/* Milliseconds until the next round: the fail point's intervalMs, else MongoDB's. */
static int64_t
next_interval_ms(bool moved)
{
    int64_t ms = moved ? SHORT_ROUND_INTERVAL_MS : ROUND_INTERVAL_MS;
    bson_t data;

    if (atomic_load_explicit(&SHL_FAILPOINT(overrideBalanceRoundInterval)->active,
                             memory_order_relaxed) &&
        shl_failpoint_evaluate(SHL_FAILPOINT(overrideBalanceRoundInterval), NULL, NULL, &data)) {
        int64_t v = shl_bson_int64_at(&data, "intervalMs");
        if (v > 0) {
            ms = v;
        }
        bson_destroy(&data);
    }
    return ms;
}

/* Wait up to 'ms' for a kick or shutdown; called and returns with mu held. */
static void
wait_locked(int64_t ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while (!g_bal.shutdown && !g_bal.kick) {
        if (pthread_cond_timedwait(&g_bal.cv, &g_bal.mu, &ts) == ETIMEDOUT) {
            break;
        }
    }
}

static void *
balancer_main(void *arg)
{
    bool moved = false;

    (void)arg;
    ensure_actionlog();
    pthread_mutex_lock(&g_bal.mu);
    while (!g_bal.shutdown) {
        bal_settings_t s;
        shl_status_t st = SHL_STATUS_INIT;
        int64_t start_us;
        bal_round_t r;
        int ret;

        /* Read under mu: a balancerStop that wrote "off" after this read sees in_round. */
        g_bal.kick = false;
        /* Only the config server set's primary balances (a secondary's reads would fail
         * anyway); a step-up kicks the thread. */
        ret = shl_db_repl_is_primary(cfg_get()->svc) ? read_settings(&s, &st) : -1;
        if (ret != 0 || strcmp(s.mode, "full") != 0 || !s.in_window || g_bal.shutdown) {
            moved = false;
            if (!g_bal.shutdown) {
                wait_locked(next_interval_ms(false));
            }
            continue;
        }
        g_bal.in_round = true;
        pthread_mutex_unlock(&g_bal.mu);

        memset(&r, 0, sizeof(r));
        bson_init(&r.errors);
        start_us = shl_clock_mono_us();
        ret = run_round(&s, &r, &st);
        if (ret == SHL_CODE_INTERRUPTED_DUE_TO_REPL_STATE_CHANGE) {
            SHL_LOG_INFO(SHARDING, 4200514, "balancer round interrupted: stepped down");
        }
        {
            /* MongoDB's round details; "errorOccured" is spelled as MongoDB spells it. */
            bson_t details = BSON_INITIALIZER;
            BSON_APPEND_INT64(&details, "executionTimeMillis",
                              (shl_clock_mono_us() - start_us) / 1000);
            BSON_APPEND_BOOL(&details, "errorOccured", ret != 0);
            if (ret != 0) {
                BSON_APPEND_UTF8(&details, "errmsg", st.reason);
            } else {
                BSON_APPEND_INT64(&details, "candidateChunks", r.candidates);
                BSON_APPEND_INT64(&details, "chunksMoved", r.moved);
                if (r.nerrors > 0) {
                    BSON_APPEND_ARRAY(&details, "migrationErrors", &r.errors);
                }
            }
            actionlog("balancer.round", &details);
            bson_destroy(&details);
        }
        moved = r.moved > 0;
        bson_destroy(&r.errors);

        pthread_mutex_lock(&g_bal.mu);
        g_bal.in_round = false;
        g_bal.rounds++;
        pthread_cond_broadcast(&g_bal.cv);
        if (!g_bal.shutdown && !g_bal.kick) {
            wait_locked(next_interval_ms(moved));
        }
    }
    pthread_mutex_unlock(&g_bal.mu);
    return NULL;
}

int
cfg_balancer_start(shl_status_t *st)
{
    int ret = 0;

    pthread_mutex_lock(&g_bal.mu);
    g_bal.shutdown = false;
    if (!g_bal.running) {
        if (pthread_create(&g_bal.thread, NULL, balancer_main, NULL) != 0) {
            ret = shl_status_set(st, SHL_CODE_INTERNAL_ERROR, "could not start the balancer");
        } else {
            g_bal.running = true;
        }
    }
    pthread_mutex_unlock(&g_bal.mu);
    return ret;
}

void
cfg_balancer_kick(void)
{
    pthread_mutex_lock(&g_bal.mu);
    g_bal.kick = true;
    pthread_cond_broadcast(&g_bal.cv);
    pthread_mutex_unlock(&g_bal.mu);
}

void
cfg_balancer_stop(void)
{
    bool join;

    pthread_mutex_lock(&g_bal.mu);
    g_bal.shutdown = true;
    join = g_bal.running;
    g_bal.running = false;
    pthread_cond_broadcast(&g_bal.cv);
    pthread_mutex_unlock(&g_bal.mu);
    if (join) {
        pthread_join(g_bal.thread, NULL);
    }
}

/* ---------------------------------------------------------------- commands */

/* Write the balancer setting as MongoDB's _configsvrBalancerStart/Stop do (mode + stopped). */
static int
write_mode(bool on, shl_status_t *st)
{
    bson_t *q = BCON_NEW("_id", BCON_UTF8("balancer"));
    bson_t *u = BCON_NEW("$set", "{", "mode", BCON_UTF8(on ? "full" : "off"), "stopped",
                         BCON_BOOL(!on), "}");
    int ret = cfg_update("settings", q, u, true, false, NULL, st);

    bson_destroy(q);
    bson_destroy(u);
    return ret;
}

static int
cmd_balancer_start(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;

    (void)op;
    (void)cmd;
    (void)reply;
    SHL_ERR(write_mode(true, st));
    pthread_mutex_lock(&g_bal.mu);
    g_bal.kick = true;
    pthread_cond_broadcast(&g_bal.cv);
    pthread_mutex_unlock(&g_bal.mu);
    SHL_LOG_INFO(SHARDING, 4200505, "balancer started");
done:
    return ret;
}

/* Stop: write the setting, then wait for the round in progress (its migrations) to end, so
 * that nothing moves once the command has answered. */
static int
cmd_balancer_stop(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;

    (void)op;
    (void)cmd;
    (void)reply;
    SHL_ERR(write_mode(false, st));
    pthread_mutex_lock(&g_bal.mu);
    while (g_bal.in_round) {
        pthread_cond_wait(&g_bal.cv, &g_bal.mu);
    }
    pthread_mutex_unlock(&g_bal.mu);
    SHL_LOG_INFO(SHARDING, 4200506, "balancer stopped");
done:
    return ret;
}

static int
cmd_balancer_status(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bal_settings_t s;
    bool in_round;
    int64_t rounds;

    (void)op;
    (void)cmd;
    SHL_ERR(read_settings(&s, st));
    pthread_mutex_lock(&g_bal.mu);
    in_round = g_bal.in_round;
    rounds = g_bal.rounds;
    pthread_mutex_unlock(&g_bal.mu);
    BSON_APPEND_UTF8(reply, "mode", s.mode);
    BSON_APPEND_BOOL(reply, "inBalancerRound", in_round);
    BSON_APPEND_INT64(reply, "numBalancerRounds", rounds);
done:
    return ret;
}

static const shl_command_t balancer_start_cmd = {
    .name = "_configsvrBalancerStart",
    .run = cmd_balancer_start,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "turn the balancer on (config.settings balancer) and start a round",
};
static const shl_command_t balancer_stop_cmd = {
    .name = "_configsvrBalancerStop",
    .run = cmd_balancer_stop,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "turn the balancer off and wait for the round in progress",
};
/*
 * _configsvrMoveChunk {ns, min, max} without toShard: what a shard's ChunkSplitter sends after
 * the top-chunk optimisation (MongoDB 4.x's rebalance of a single chunk): when the balancer is
 * on (mode full, inside its window) and the collection may be balanced, the chunk exactly
 * [min, max) moves to the shard holding the least of the collection's data among those that
 * may take it (not draining, in the chunk's zone), unless that is its owner. Replies
 * {moved: bool, toShard?}. Errors: the migration's.
 */
static int
cmd_rebalance_chunk(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *ns = NULL;
    bal_settings_t set;
    bson_t min, max, cmin, cmax, fwd = BSON_INITIALIZER, arr, r2 = BSON_INITIALIZER;
    bool has_min = false, has_max = false, found = false;
    shl_collection_type_t coll;
    shl_routing_table_t *rt = NULL;
    shl_shard_type_t *shards = NULL;
    size_t nshards = 0, idx = 0, nranges = 0, best = 0;
    bal_range_t *ranges = NULL;
    int64_t best_size = -1;
    const char *owner, *zone;

    memset(&coll, 0, sizeof(coll));
    SHL_ERR(cfg_cmd_string(cmd, &ns, st));
    SHL_ERR(cfg_doc_field(cmd, "min", &min, &has_min, st));
    SHL_ERR(cfg_doc_field(cmd, "max", &max, &has_max, st));
    if (!has_min || !has_max) {
        SHL_ERR(shl_idl_missing("_configsvrMoveChunk", has_min ? "max" : "min", st));
    }
    SHL_ERR(read_settings(&set, st));
    SHL_ERR(cfg_get_collection(ns, &coll, &found, st));
    if (strcmp(set.mode, "full") != 0 || !set.in_window || !found || coll.key == NULL ||
        coll.no_balance || (coll.has_allow_migrations && !coll.allow_migrations) ||
        (coll.has_permit_migrations && !coll.permit_migrations)) {
        goto nothing;
    }
    SHL_ERR(cfg_load_routing_table(ns, NULL, &rt, st));
    if (shl_routing_table_find_chunk(rt, &min, &idx, st) != 0) {
        shl_status_clear(st);
        goto nothing;
    }
    shl_routing_table_chunk_bounds(rt, idx, &cmin, &cmax);
    if (shl_shard_key_compare(&cmin, &min) != 0 || shl_shard_key_compare(&cmax, &max) != 0 ||
        shl_routing_table_chunk_jumbo(rt, idx)) {
        goto nothing;
    }
    owner = shl_routing_table_chunk_shard(rt, idx);
    SHL_ERR(load_ranges(&coll, &ranges, &nranges, st));
    zone = zone_of(ranges, nranges, &cmin, &cmax);
    SHL_ERR(cfg_get_shards(&shards, &nshards, st));
    for (size_t i = 0; i < nshards; i++) {
        bool in = zone[0] == '\0';
        int64_t size;
        for (size_t t = 0; t < shards[i].ntags && !in; t++) {
            in = strcmp(shards[i].tags[t], zone) == 0;
        }
        if (shards[i].draining || !in) {
            continue;
        }
        size = cfg_owned_data_size(shards[i].name, ns);
        if (best_size < 0 || size < best_size) {
            best = i;
            best_size = size;
        }
    }
    if (best_size < 0 || strcmp(shards[best].name, owner) == 0) {
        goto nothing;
    }
    BSON_APPEND_UTF8(&fwd, "_configsvrMoveRange", ns);
    BSON_APPEND_UTF8(&fwd, "toShard", shards[best].name);
    BSON_APPEND_ARRAY_BEGIN(&fwd, "bounds", &arr);
    BSON_APPEND_DOCUMENT(&arr, "0", &cmin);
    BSON_APPEND_DOCUMENT(&arr, "1", &cmax);
    bson_append_array_end(&fwd, &arr);
    BSON_APPEND_BOOL(&fwd, "waitForDelete", set.wait_for_delete);
    append_throttle(&set, &fwd);
    SHL_ERR(cfg_move_range(op, &fwd, &r2, st));
    SHL_LOG_INFO(SHARDING, 4201631, "balancer moved a top chunk after its split", "ns",
                 BCON_UTF8(ns), "to", BCON_UTF8(shards[best].name));
    BSON_APPEND_BOOL(reply, "moved", true);
    BSON_APPEND_UTF8(reply, "toShard", shards[best].name);
    goto done;
nothing:
    BSON_APPEND_BOOL(reply, "moved", false);
done:
    shl_collection_type_cleanup(&coll);
    if (rt != NULL) {
        shl_routing_table_release(rt);
    }
    if (shards != NULL) {
        cfg_shards_free(shards, nshards);
    }
    ranges_free(ranges, nranges);
    bson_destroy(&fwd);
    bson_destroy(&r2);
    return ret;
}

static const shl_command_t rebalance_chunk_cmd = {
    .name = "_configsvrMoveChunk",
    .run = cmd_rebalance_chunk,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "move one chunk to the least loaded shard if the balancer is on (auto-split)",
};
static const shl_command_t balancer_status_cmd = {
    .name = "_configsvrBalancerStatus",
    .run = cmd_balancer_status,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "the balancer's mode, whether it is in a round, and its rounds since start-up",
};

void
cfg_register_balancer_commands(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &balancer_start_cmd);
    shl_command_registry_add(reg, &balancer_stop_cmd);
    shl_command_registry_add(reg, &balancer_status_cmd);
    shl_command_registry_add(reg, &rebalance_chunk_cmd);
    cfg_register_coll_balancing_commands(reg);
}
