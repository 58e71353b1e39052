/*
 * engine.c -- the WiredTiger connection and what hangs off it: the dbpath lock file,
 * the session pool with per-session cursor caches, the cluster-time clock and the hole
 * tracker, journal flushes (group commit), stable timestamps, checkpoints, deferred
 * table drops and the background threads. docs/design/storage.md explains the design.
 */
#include "bson/bson_util.h"
#include "storage/storage_private.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "storage/oplog.h"

#define SNAPPY_EXT "/usr/lib/x86_64-linux-gnu/libwiredtiger_snappy.so"

int
shl_wt_err(shl_status_t *st, int wtret, const char *what)
{
    if (wtret == WT_ROLLBACK) {
        return shl_status_set(st, SHL_CODE_WRITE_CONFLICT,
                              "WriteConflict error: this operation conflicted with another "
                              "operation. Please retry your operation or multi-document "
                              "transaction.");
    }
    if (wtret == WT_PREPARE_CONFLICT) {
        shl_status_t why;
        if (shl_prepare_interrupted(&why)) {
            *st = why;
            return why.code;
        }
        return shl_status_set(st, SHL_CODE_WRITE_CONFLICT,
                              "WriteConflict error: this operation conflicted with another "
                              "operation. Please retry your operation or multi-document "
                              "transaction.");
    }
    if (wtret == WT_CACHE_FULL) {
        return shl_status_set(st, SHL_CODE_EXCEEDED_MEMORY_LIMIT, "%s: WiredTiger cache full",
                              what);
    }
    return shl_status_set(st, SHL_CODE_INTERNAL_ERROR, "%s: %s", what, wiredtiger_strerror(wtret));
}

void
shl_ts_to_hex(uint64_t ts, char *buf, size_t len)
{
    snprintf(buf, len, "%" PRIx64, ts);
}

const char *
shl_storage_dbpath(const shl_storage_engine_t *eng)
{
    return eng->dbpath;
}

int64_t
shl_storage_term(const shl_storage_engine_t *eng)
{
    return __atomic_load_n(&eng->term, __ATOMIC_RELAXED);
}

void
shl_storage_set_term(shl_storage_engine_t *eng, int64_t term)
{
    __atomic_store_n(&eng->term, term, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------------------------
 * Session pool and cursor caches
 * ------------------------------------------------------------------------------ */

static void
session_close_cursors(shl_wt_session_t *s, const char *uri)
{
    size_t keep = 0;
    for (size_t i = 0; i < s->ncache; i++) {
        if (uri == NULL || strcmp(s->cache[i].uri, uri) == 0) {
            if (s->cache[i].cur != NULL) {
                s->cache[i].cur->close(s->cache[i].cur);
            }
            bson_free(s->cache[i].uri);
        } else {
            s->cache[keep++] = s->cache[i];
        }
    }
    s->ncache = keep;
}

int
shl_wt_session_get(shl_storage_engine_t *eng, shl_wt_session_t **out, shl_status_t *st)
{
    shl_wt_session_t *s;
    WT_SESSION *wt = NULL;
    int ret = 0, wtret;

    pthread_mutex_lock(&eng->pool_mu);
    s = eng->pool_free;
    if (s != NULL) {
        eng->pool_free = s->next;
    }
    pthread_mutex_unlock(&eng->pool_mu);
    if (s == NULL) {
        /* Our own cursor cache replaces WT's (cache_cursors=false), so a table drop
         * only has to chase cursors we know about. */
        wtret =
            eng->conn->open_session(eng->conn, NULL, "isolation=snapshot,cache_cursors=false", &wt);
        if (wtret != 0) {
            SHL_ERR(shl_wt_err(st, wtret, "open_session"));
        }
        s = bson_aligned_alloc0(BSON_ALIGNOF(shl_wt_session_t), sizeof(*s)); /* a bson_t */
        s->wt = wt;
        bson_init(&s->entry);
        s->cursor_epoch = atomic_load(&eng->cursor_epoch);
        atomic_fetch_add(&eng->sessions_open, 1);
    }
    if (s->cursor_epoch != atomic_load(&eng->cursor_epoch)) {
        session_close_cursors(s, NULL);
        s->cursor_epoch = atomic_load(&eng->cursor_epoch);
    }
    s->next = NULL;
    *out = s;
done:
    return ret;
}

void
shl_wt_session_put(shl_storage_engine_t *eng, shl_wt_session_t *s)
{
    if (s == NULL) {
        return;
    }
    /* A drop is waiting for cursors on some table: give ours up. */
    if (s->cursor_epoch != atomic_load(&eng->cursor_epoch)) {
        session_close_cursors(s, NULL);
        s->cursor_epoch = atomic_load(&eng->cursor_epoch);
    }
    pthread_mutex_lock(&eng->pool_mu);
    s->next = eng->pool_free;
    eng->pool_free = s;
    pthread_mutex_unlock(&eng->pool_mu);
}

int
shl_wt_cursor_get(shl_storage_engine_t *eng, shl_wt_session_t *s, const char *uri, WT_CURSOR **out,
                  shl_status_t *st)
{
    int ret = 0, wtret;
    (void)eng;

    /* The slot keeps its URI while the cursor is out (cur NULL): giving it back refills the
     * slot, so a cursor's round trip costs no allocation. */
    for (size_t i = s->ncache; i > 0; i--) {
        if (s->cache[i - 1].cur != NULL && strcmp(s->cache[i - 1].uri, uri) == 0) {
            *out = s->cache[i - 1].cur;
            s->cache[i - 1].cur = NULL;
            goto done;
        }
    }
    /* overwrite=false everywhere: insert of an existing key is WT_DUPLICATE_KEY,
     * update/remove of a missing one WT_NOTFOUND; both are what callers check. */
    wtret = s->wt->open_cursor(s->wt, uri, NULL, "overwrite=false", out);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "open_cursor"));
    }
done:
    return ret;
}

void
shl_wt_cursor_put(shl_wt_session_t *s, const char *uri, WT_CURSOR *c)
{
    if (c == NULL) {
        return;
    }
    c->reset(c);
    for (size_t i = s->ncache; i > 0; i--) {
        if (s->cache[i - 1].cur == NULL && strcmp(s->cache[i - 1].uri, uri) == 0) {
            s->cache[i - 1].cur = c;
            return;
        }
    }
    if (s->ncache >= 64) {
        c->close(c);
        return;
    }
    if (s->ncache == s->capcache) {
        s->capcache = s->capcache ? s->capcache * 2 : 8;
        s->cache = bson_realloc(s->cache, s->capcache * sizeof(*s->cache));
    }
    s->cache[s->ncache].uri = bson_strdup(uri);
    s->cache[s->ncache].cur = c;
    s->ncache++;
}

/* ---------------------------------------------------------------------------------
 * Clock and hole tracker
 * ------------------------------------------------------------------------------ */

uint64_t
shl_clock_reserve(shl_storage_engine_t *eng, shl_inflight_t *inf, int64_t *wall_ms, WT_SESSION *wt,
                  int *wtret)
{
    uint64_t ts;
    char cfg[64];
    int64_t wall = shl_clock_wall_ms();
    uint32_t secs = (uint32_t)(wall / 1000);

    pthread_mutex_lock(&eng->clock_mu);
    ts = secs > SHL_TS_SECS(eng->clock_last) ? SHL_TS_MAKE(secs, 1) : eng->clock_last + 1;
    eng->clock_last = ts;
    /* The first reservation of a transaction links it into the in-flight list, in
     * allocation order, so the list head always holds the smallest unfinished ts. */
    if (inf != NULL && !inf->linked) {
        inf->first_ts = ts;
        inf->linked = true;
        inf->next = NULL;
        inf->prev = eng->inflight_tail;
        if (eng->inflight_tail != NULL) {
            eng->inflight_tail->next = inf;
        } else {
            eng->inflight_head = inf;
        }
        eng->inflight_tail = inf;
    }
    /* Setting the commit timestamp under the clock mutex: WiredTiger 3.2 publishes it
     * into a global queue under a spinning write lock, which collapses when more
     * threads than cores contend for it; one at a time it is cheap. It also keeps
     * WiredTiger's own all_durable in allocation order. */
    if (wt != NULL) {
        snprintf(cfg, sizeof(cfg), "commit_timestamp=%" PRIx64, ts);
        *wtret = wt->timestamp_transaction(wt, cfg);
    }
    pthread_mutex_unlock(&eng->clock_mu);
    if (wall_ms != NULL) {
        *wall_ms = wall;
    }
    return ts;
}

void
shl_storage_pin_stable(shl_storage_engine_t *eng, uint64_t ts)
{
    pthread_mutex_lock(&eng->clock_mu);
    if (eng->nstable_pins == eng->capstable_pins) {
        eng->capstable_pins = eng->capstable_pins ? eng->capstable_pins * 2 : 8;
        eng->stable_pins =
            bson_realloc(eng->stable_pins, eng->capstable_pins * sizeof(*eng->stable_pins));
    }
    eng->stable_pins[eng->nstable_pins++] = ts;
    pthread_mutex_unlock(&eng->clock_mu);
}

void
shl_storage_unpin_stable(shl_storage_engine_t *eng, uint64_t ts)
{
    pthread_mutex_lock(&eng->clock_mu);
    for (size_t i = 0; i < eng->nstable_pins; i++) {
        if (eng->stable_pins[i] == ts) {
            eng->stable_pins[i] = eng->stable_pins[--eng->nstable_pins];
            break;
        }
    }
    pthread_mutex_unlock(&eng->clock_mu);
}

void
shl_clock_finish(shl_storage_engine_t *eng, shl_inflight_t *inf)
{
    if (!inf->linked) {
        return;
    }
    pthread_mutex_lock(&eng->clock_mu);
    if (inf->prev != NULL) {
        inf->prev->next = inf->next;
    } else {
        eng->inflight_head = inf->next;
    }
    if (inf->next != NULL) {
        inf->next->prev = inf->prev;
    } else {
        eng->inflight_tail = inf->prev;
    }
    inf->linked = false;
    inf->prev = inf->next = NULL;
    pthread_mutex_unlock(&eng->clock_mu);
}

uint64_t
shl_storage_clock_now(shl_storage_engine_t *eng)
{
    uint64_t ts;
    pthread_mutex_lock(&eng->clock_mu);
    ts = eng->clock_last;
    pthread_mutex_unlock(&eng->clock_mu);
    return ts;
}

void
shl_storage_clock_advance(shl_storage_engine_t *eng, uint64_t ts)
{
    pthread_mutex_lock(&eng->clock_mu);
    if (ts > eng->clock_last) {
        eng->clock_last = ts;
    }
    pthread_mutex_unlock(&eng->clock_mu);
}

uint64_t
shl_storage_open_pin(const shl_storage_engine_t *eng)
{
    return eng->open_pin;
}

void
shl_storage_release_open_pin(shl_storage_engine_t *eng)
{
    if (eng->open_pin != 0) {
        shl_storage_unpin_stable(eng, eng->open_pin);
        eng->open_pin = 0;
    }
}

uint64_t
shl_storage_all_durable(shl_storage_engine_t *eng)
{
    uint64_t ts;
    pthread_mutex_lock(&eng->clock_mu);
    ts = eng->inflight_head != NULL ? eng->inflight_head->first_ts - 1 : eng->clock_last;
    pthread_mutex_unlock(&eng->clock_mu);
    return ts;
}

uint64_t
shl_storage_stable_ts(shl_storage_engine_t *eng)
{
    return atomic_load(&eng->stable_ts);
}

/* Move the stable timestamp forward to 'ts' (WT ignores older values) and the oldest one to
 * the history window behind it. */
static int
advance_stable(shl_storage_engine_t *eng, uint64_t ts, shl_status_t *st)
{
    char cfg[96];
    int ret = 0, wtret;
    uint64_t cur = atomic_load(&eng->stable_ts);
    uint64_t oldest, cur_oldest = atomic_load(&eng->oldest_ts);

    /* A prepared transaction keeps the stable timestamp below its prepare timestamp, so that
     * after a crash recovery replays its prepare entry and can prepare it again (the oldest
     * timestamp, behind the stable one, then stays below it too). */
    pthread_mutex_lock(&eng->clock_mu);
    for (size_t i = 0; i < eng->nstable_pins; i++) {
        if (eng->stable_pins[i] - 1 < ts) {
            ts = eng->stable_pins[i] - 1;
        }
    }
    pthread_mutex_unlock(&eng->clock_mu);
    if (ts == 0) {
        goto done;
    }
    if (ts <= cur) {
        ts = cur; /* stable stays; the history window may still have shrunk */
    }
    oldest = shl_history_window_oldest_for(eng, ts);
    if (ts > cur && oldest > cur_oldest) {
        snprintf(cfg, sizeof(cfg), "stable_timestamp=%" PRIx64 ",oldest_timestamp=%" PRIx64, ts,
                 oldest);
    } else if (ts > cur) {
        snprintf(cfg, sizeof(cfg), "stable_timestamp=%" PRIx64, ts);
    } else if (oldest > cur_oldest) {
        snprintf(cfg, sizeof(cfg), "oldest_timestamp=%" PRIx64, oldest);
    } else {
        goto done;
    }
    wtret = eng->conn->set_timestamp(eng->conn, cfg);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "set_timestamp"));
    }
    while (cur < ts && !atomic_compare_exchange_weak(&eng->stable_ts, &cur, ts)) {
    }
    if (!atomic_load(&eng->stable_checkpointed)) {
        pthread_mutex_lock(&eng->bg_mu);
        if (!eng->first_stable_wanted) {
            eng->first_stable_wanted = true;
            pthread_cond_broadcast(&eng->bg_cv);
        }
        pthread_mutex_unlock(&eng->bg_mu);
    }
    while (cur_oldest < oldest && !atomic_compare_exchange_weak(&eng->oldest_ts, &cur_oldest,
                                                                oldest)) {
    }
done:
    return ret;
}

uint64_t
shl_storage_oldest_ts(shl_storage_engine_t *eng)
{
    return atomic_load(&eng->oldest_ts);
}

/* ---------------------------------------------------------------------------------
 * Journal flushes (group commit) and durability
 * ------------------------------------------------------------------------------ */

/*
 * Run or join a log flush that starts after this call: one thread flushes for
 * everyone who arrived while the previous flush was running.
 */
static int
journal_flush(shl_storage_engine_t *eng, shl_status_t *st)
{
    uint64_t target;
    int ret = 0, err = 0;
    shl_wt_session_t *s = NULL;

    pthread_mutex_lock(&eng->flush_mu);
    target = eng->flushes_started + 1;
    while (eng->flushes_done < target) {
        if (!eng->flushing) {
            uint64_t seq = ++eng->flushes_started;
            uint64_t nh;
            eng->flushing = true;
            pthread_mutex_unlock(&eng->flush_mu);
            /* Everything at or below the no-holes point has finished committing
             * before the flush starts, so the flush covers it. */
            nh = shl_storage_all_durable(eng);
            err = shl_wt_session_get(eng, &s, st);
            if (err == 0) {
                err = s->wt->log_flush(s->wt, "sync=on");
                shl_wt_session_put(eng, s);
                s = NULL;
                if (err != 0) {
                    err = shl_wt_err(st, err, "log_flush");
                }
            }
            pthread_mutex_lock(&eng->flush_mu);
            if (err == 0) {
                uint64_t cur = atomic_load(&eng->durable_ts);
                while (cur < nh && !atomic_compare_exchange_weak(&eng->durable_ts, &cur, nh)) {
                }
            }
            eng->flush_err = err;
            eng->flushing = false;
            eng->flushes_done = seq;
            pthread_cond_broadcast(&eng->flush_cv);
        } else {
            pthread_cond_wait(&eng->flush_cv, &eng->flush_mu);
        }
    }
    if (err == 0 && eng->flush_err != 0) {
        err = shl_status_set(st, eng->flush_err, "journal flush failed");
    }
    pthread_mutex_unlock(&eng->flush_mu);
    ret = err;
    return ret;
}

int
shl_storage_wait_durable(shl_storage_engine_t *eng, uint64_t ts, shl_status_t *st)
{
    if (ts != 0 && ts <= atomic_load(&eng->durable_ts)) {
        return 0;
    }
    return journal_flush(eng, st);
}

uint64_t
shl_storage_journal_syncs(shl_storage_engine_t *eng)
{
    uint64_t n;

    pthread_mutex_lock(&eng->flush_mu);
    n = eng->flushes_done;
    pthread_mutex_unlock(&eng->flush_mu);
    return n;
}

/* Queued table drops that trigger an early checkpoint (each holds open files). */
#define DROPS_CHECKPOINT_THRESHOLD 64

/* ---------------------------------------------------------------------------------
 * Deferred drops and checkpoints
 * ------------------------------------------------------------------------------ */

void
shl_engine_queue_drops(shl_storage_engine_t *eng, const shl_drop_ident_t *d, size_t n)
{
    bool wake;
    size_t before;

    pthread_mutex_lock(&eng->drops_mu);
    before = eng->ndrops;
    for (size_t i = 0; i < n; i++) {
        if (eng->ndrops == eng->capdrops) {
            eng->capdrops = eng->capdrops ? eng->capdrops * 2 : 8;
            eng->drops = bson_realloc(eng->drops, eng->capdrops * sizeof(*eng->drops));
        }
        eng->drops[eng->ndrops].uri = bson_strdup(d[i].uri);
        eng->drops[eng->ndrops].drop_ts = d[i].drop_ts;
        eng->ndrops++;
    }
    /* Wake once per threshold crossed, not per drop: drops a checkpoint cannot
     * remove yet (open cursors) must not make every later drop checkpoint. */
    wake = before / DROPS_CHECKPOINT_THRESHOLD != eng->ndrops / DROPS_CHECKPOINT_THRESHOLD;
    pthread_mutex_unlock(&eng->drops_mu);
    if (wake) {
        /* Dropped tables keep their files open until a checkpoint covers the drop: with
         * many of them waiting, checkpoint now rather than run out of descriptors. */
        pthread_mutex_lock(&eng->bg_mu);
        pthread_cond_broadcast(&eng->bg_cv);
        pthread_mutex_unlock(&eng->bg_mu);
    }
}

int
shl_engine_drop_now(shl_storage_engine_t *eng, const char *uri, shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    int ret = 0, wtret;

    /* Idle pooled sessions give up their cursors on 'uri' now; busy ones drop
     * their whole cache when they come back (epoch bump), and we retry later. */
    atomic_fetch_add(&eng->cursor_epoch, 1);
    pthread_mutex_lock(&eng->pool_mu);
    for (shl_wt_session_t *p = eng->pool_free; p != NULL; p = p->next) {
        session_close_cursors(p, uri);
    }
    pthread_mutex_unlock(&eng->pool_mu);
    SHL_ERR(shl_wt_session_get(eng, &s, st));
    session_close_cursors(s, uri);
    wtret = s->wt->drop(s->wt, uri, "force=true");
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "drop"));
    }
done:
    shl_wt_session_put(eng, s);
    return ret;
}

/* Drop queued tables whose drop timestamp a checkpoint covers ('upto'). */
static void
process_drops(shl_storage_engine_t *eng, uint64_t upto)
{
    shl_drop_ident_t *ready = NULL;
    size_t nready = 0, keep = 0;
    shl_status_t st;

    pthread_mutex_lock(&eng->drops_mu);
    ready = bson_malloc0((eng->ndrops + 1) * sizeof(*ready));
    for (size_t i = 0; i < eng->ndrops; i++) {
        if (eng->drops[i].drop_ts <= upto) {
            ready[nready++] = eng->drops[i];
        } else {
            eng->drops[keep++] = eng->drops[i];
        }
    }
    eng->ndrops = keep;
    pthread_mutex_unlock(&eng->drops_mu);

    for (size_t i = 0; i < nready; i++) {
        if (shl_engine_drop_now(eng, ready[i].uri, &st) != 0) {
            /* Most likely EBUSY: a cursor (e.g. a long snapshot read) still has it
             * open. Keep it for the next checkpoint. */
            SHL_LOG_DEBUG(1, STORAGE, 5100101, "deferring table drop", "uri",
                          BCON_UTF8(ready[i].uri), "error", BCON_UTF8(st.reason));
            shl_engine_queue_drops(eng, &ready[i], 1);
        } else {
            SHL_LOG_DEBUG(1, STORAGE, 5100102, "dropped table", "uri", BCON_UTF8(ready[i].uri));
        }
        bson_free(ready[i].uri);
    }
    bson_free(ready);
}

/* Some pin keeps the stable timestamp back. */
static bool
stable_held(shl_storage_engine_t *eng)
{
    bool held;
    pthread_mutex_lock(&eng->clock_mu);
    held = eng->nstable_pins > 0;
    pthread_mutex_unlock(&eng->clock_mu);
    return held;
}

int
shl_storage_checkpoint(shl_storage_engine_t *eng, shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    int ret = 0, wtret;
    uint64_t stable;

    pthread_mutex_lock(&eng->ckpt_mu);
    SHL_ERR(journal_flush(eng, st));
    SHL_ERR(advance_stable(eng, atomic_load(&eng->durable_ts), st));
    stable = atomic_load(&eng->stable_ts);
    if (stable == 0 && stable_held(eng)) {
        /* No stable timestamp yet and one is being held back (a replica set member that
         * does not know the commit point): WiredTiger would checkpoint every write, those
         * a rollback may have to undo included. Recovery replays the oplog meanwhile. */
        goto done;
    }
    /* Counts and sizes ride along with every checkpoint (size_storer.c). */
    SHL_ERR(shl_sizes_flush(eng, st));
    SHL_ERR(shl_wt_session_get(eng, &s, st));
    wtret = s->wt->checkpoint(s->wt, "use_timestamp=true");
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "checkpoint"));
    }
    shl_wt_session_put(eng, s);
    s = NULL;
    if (stable != 0) {
        atomic_store(&eng->stable_checkpointed, true);
    }
    process_drops(eng, stable);
    {
        int64_t removed = 0;
        if (shl_oplog_truncate(eng, eng->opts.oplog_max_bytes, stable, &removed, st) != 0) {
            SHL_LOG_WARNING(STORAGE, 5100110, "oplog truncation failed", "error",
                            BCON_UTF8(st->reason));
            shl_status_clear(st);
        } else if (removed > 0) {
            SHL_LOG_DEBUG(1, STORAGE, 5100111, "truncated the oplog", "entries",
                          BCON_INT64(removed));
        }
    }
done:
    shl_wt_session_put(eng, s);
    pthread_mutex_unlock(&eng->ckpt_mu);
    return ret;
}

/* ---------------------------------------------------------------------------------
 * Background threads: journal flusher (journalCommitInterval) and checkpointer
 * (syncdelay), like MongoDB's JournalFlusher and Checkpointer.
 * ------------------------------------------------------------------------------ */

/* Sleep up to 'ms' or until stop; returns true when stopping. */
static bool
bg_sleep(shl_storage_engine_t *eng, int64_t ms)
{
    struct timespec until;
    bool stop;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&eng->bg_mu);
    if (!eng->bg_stop) {
        pthread_cond_timedwait(&eng->bg_cv, &eng->bg_mu, &until);
    }
    stop = eng->bg_stop;
    pthread_mutex_unlock(&eng->bg_mu);
    return stop;
}

/* Whether the first stable checkpoint is due now (and no longer wanted once this says so). */
static bool
take_first_stable(shl_storage_engine_t *eng)
{
    bool due;

    pthread_mutex_lock(&eng->bg_mu);
    due = eng->first_stable_wanted && !atomic_load(&eng->stable_checkpointed);
    eng->first_stable_wanted = false;
    pthread_mutex_unlock(&eng->bg_mu);
    return due;
}

/* Whether the background threads were told to stop. */
static bool
bg_stopping(shl_storage_engine_t *eng)
{
    bool stop;

    pthread_mutex_lock(&eng->bg_mu);
    stop = eng->bg_stop;
    pthread_mutex_unlock(&eng->bg_mu);
    return stop;
}

static int64_t
journal_interval_ms(const shl_storage_engine_t *eng)
{
    int64_t ms = eng->opts.journal_commit_interval_ms > 0
                     ? eng->opts.journal_commit_interval_ms
                     : shl_opt_int(SHL_OPT_journalCommitInterval);
    return ms < 1 ? 1 : (ms > 500 ? 500 : ms);
}

static void *
flusher_main(void *arg)
{
    shl_storage_engine_t *eng = arg;
    shl_status_t st;

    shl_log_set_thread_ctx("JournalFlusher");
    while (!bg_sleep(eng, journal_interval_ms(eng))) {
        shl_history_window_adjust(eng);
        if (journal_flush(eng, &st) != 0 ||
            advance_stable(eng, atomic_load(&eng->durable_ts), &st) != 0) {
            SHL_LOG_ERROR(STORAGE, 5100103, "journal flush failed", "error", BCON_UTF8(st.reason));
        }
    }
    return NULL;
}

/* Tables waiting for a checkpoint to be dropped (see shl_engine_queue_drops). */
static size_t
pending_drops(shl_storage_engine_t *eng)
{
    size_t n;
    pthread_mutex_lock(&eng->drops_mu);
    n = eng->ndrops;
    pthread_mutex_unlock(&eng->drops_mu);
    return n;
}

static void *
checkpointer_main(void *arg)
{
    shl_storage_engine_t *eng = arg;
    shl_status_t st;
    int64_t waited_ms = 0;
    size_t after_last = 0; /* drops still queued right after the last checkpoint */

    shl_log_set_thread_ctx("Checkpointer");
    for (;;) {
        size_t pending = pending_drops(eng);
        /* Drops queued since the last checkpoint past the threshold: checkpoint again at
         * once (a wake-up sent while a checkpoint ran would otherwise wait for the next
         * tick while create/drop churn keeps opening files). Drops no checkpoint can
         * remove yet (open cursors) do not count twice, so this never spins. */
        bool urgent = pending >= DROPS_CHECKPOINT_THRESHOLD && pending > after_last;
        if (!urgent) {
            /* Wake every second so a runtime change of syncdelay takes effect soon. */
            if (bg_sleep(eng, 1000)) {
                break;
            }
            waited_ms += 1000;
            int64_t delay =
                eng->opts.syncdelay_s != 0 ? eng->opts.syncdelay_s : shl_opt_int(SHL_OPT_syncdelay);
            pending = pending_drops(eng);
            if (pending < DROPS_CHECKPOINT_THRESHOLD && (delay <= 0 || waited_ms < delay * 1000) &&
                !(delay > 0 && take_first_stable(eng))) {
                continue;
            }
        } else if (bg_stopping(eng)) {
            break;
        }
        waited_ms = 0;
        if (shl_storage_checkpoint(eng, &st) != 0) {
            SHL_LOG_ERROR(STORAGE, 5100104, "checkpoint failed", "error", BCON_UTF8(st.reason));
        }
        after_last = pending_drops(eng);
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------
 * Open and close
 * ------------------------------------------------------------------------------ */

static int
mkdir_p(const char *path, shl_status_t *st)
{
    char buf[4096];
    int ret = 0;
    size_t len = strlen(path);

    if (len == 0 || len >= sizeof(buf)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "bad dbpath '%s'", path);
    }
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "cannot create directory %s: %s", buf,
                         strerror(errno));
            }
            buf[i] = c;
        }
    }
done:
    return ret;
}

static int
lock_dbpath(shl_storage_engine_t *eng, shl_status_t *st)
{
    char *path = bson_strdup_printf("%s/shale.lock", eng->dbpath);
    char pid[32];
    int ret = 0;

    eng->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (eng->lock_fd < 0) {
        SHL_FAIL(st, SHL_CODE_DB_PATH_IN_USE, "Unable to create/open the lock file: %s (%s).", path,
                 strerror(errno));
    }
    if (flock(eng->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(eng->lock_fd);
        eng->lock_fd = -1;
        SHL_FAIL(st, SHL_CODE_DB_PATH_IN_USE,
                 "Unable to lock the lock file: %s (%s). Another shale instance is already "
                 "running on the %s directory",
                 path, strerror(e), eng->dbpath);
    }
    snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    if (ftruncate(eng->lock_fd, 0) != 0 || pwrite(eng->lock_fd, pid, strlen(pid), 0) < 0) {
        SHL_LOG_WARNING(STORAGE, 5100105, "cannot write the lock file", "path", BCON_UTF8(path));
    }
done:
    bson_free(path);
    return ret;
}

static int64_t
default_cache_mb(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
    int64_t ram_mb = pages > 0 && psize > 0 ? (int64_t)pages * psize / (1024 * 1024) : 1024;
    int64_t mb = (ram_mb - 1024) / 2;
    return mb < 256 ? 256 : mb;
}

/* Create the engine's own tables (idempotent) and read the oplog's UUID. */
static int
create_system_tables(shl_storage_engine_t *eng, shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    WT_CURSOR *meta = NULL;
    WT_CONFIG_PARSER *parser = NULL;
    WT_CONFIG_ITEM v;
    const char *cfg;
    uint8_t uuid[16];
    char hex[33], *oplog_cfg = NULL;
    int ret = 0, wtret;

    SHL_ERR(shl_wt_session_get(eng, &s, st));
    wtret =
        s->wt->create(s->wt, "table:_catalog", "key_format=S,value_format=u,log=(enabled=false)");
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "create _catalog"));
    }
    /* The oplog's UUID lives in its WT metadata (app_metadata), written with the
     * table, so it is as durable as the table itself. */
    wtret = s->wt->open_cursor(s->wt, "metadata:", NULL, NULL, &meta);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "open metadata"));
    }
    meta->set_key(meta, "table:oplog");
    wtret = meta->search(meta);
    if (wtret == WT_NOTFOUND) {
        shl_uuid_gen(uuid);
        for (int i = 0; i < 16; i++) {
            snprintf(hex + 2 * i, 3, "%02x", uuid[i]);
        }
        oplog_cfg = bson_strdup_printf("key_format=q,value_format=u,app_metadata=\"%s\"%s", hex,
                                       eng->snappy ? ",block_compressor=snappy" : "");
        wtret = s->wt->create(s->wt, "table:oplog", oplog_cfg);
        if (wtret != 0) {
            SHL_ERR(shl_wt_err(st, wtret, "create oplog"));
        }
    } else if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "search metadata"));
    } else {
        wtret = meta->get_value(meta, &cfg);
        if (wtret == 0) {
            wtret = wiredtiger_config_parser_open(NULL, cfg, strlen(cfg), &parser);
        }
        if (wtret == 0) {
            wtret = parser->get(parser, "app_metadata", &v);
        }
        if (wtret != 0 || v.len != 32) {
            SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "oplog table has no UUID in its metadata");
        }
        for (int i = 0; i < 16; i++) {
            unsigned byte;
            char two[3] = {v.str[2 * i], v.str[2 * i + 1], 0};
            sscanf(two, "%02x", &byte);
            uuid[i] = (uint8_t)byte;
        }
    }
    eng->oplog = shl_collection_new_oplog(uuid);
done:
    if (parser != NULL) {
        parser->close(parser);
    }
    if (meta != NULL) {
        meta->close(meta);
    }
    bson_free(oplog_cfg);
    shl_wt_session_put(eng, s);
    return ret;
}

/* The clock starts above the newest oplog entry, so it never goes backwards. */
static int
init_clock(shl_storage_engine_t *eng, shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    WT_CURSOR *c = NULL;
    int ret = 0, wtret;
    int64_t top = 0;

    SHL_ERR(shl_wt_session_get(eng, &s, st));
    SHL_ERR(shl_wt_cursor_get(eng, s, "table:oplog", &c, st));
    wtret = c->prev(c);
    if (wtret == 0) {
        wtret = c->get_key(c, &top);
    }
    if (wtret != 0 && wtret != WT_NOTFOUND) {
        SHL_ERR(shl_wt_err(st, wtret, "read oplog top"));
    }
    shl_storage_clock_advance(eng, (uint64_t)top);
    if (eng->opts.pin_stable_at_open) {
        eng->open_pin = (uint64_t)top + 1;
        shl_storage_pin_stable(eng, eng->open_pin);
    }
    shl_storage_clock_advance(eng, SHL_TS_MAKE(shl_clock_wall_ms() / 1000, 0));
done:
    if (c != NULL) {
        shl_wt_cursor_put(s, "table:oplog", c);
    }
    shl_wt_session_put(eng, s);
    return ret;
}

static void
engine_free(shl_storage_engine_t *eng)
{
    shl_wt_session_t *s, *next;

    for (s = eng->pool_free; s != NULL; s = next) {
        next = s->next;
        for (size_t i = 0; i < s->ncache; i++) {
            bson_free(s->cache[i].uri);
        }
        bson_free(s->cache);
        bson_destroy(&s->entry);
        bson_free(s);
    }
    for (size_t i = 0; i < eng->ndrops; i++) {
        bson_free(eng->drops[i].uri);
    }
    bson_free(eng->drops);
    shl_catalog_cleanup(eng);
    shl_locks_cleanup(eng);
    if (eng->lock_fd >= 0) {
        close(eng->lock_fd);
    }
    pthread_mutex_destroy(&eng->pool_mu);
    pthread_mutex_destroy(&eng->clock_mu);
    bson_free(eng->stable_pins);
    pthread_mutex_destroy(&eng->flush_mu);
    pthread_cond_destroy(&eng->flush_cv);
    pthread_mutex_destroy(&eng->ckpt_mu);
    pthread_mutex_destroy(&eng->drops_mu);
    pthread_mutex_destroy(&eng->bg_mu);
    pthread_cond_destroy(&eng->bg_cv);
    bson_free(eng->dbpath);
    bson_free(eng);
}

/* MongoDB's default oplog size: the oplogSize option (MB), else 5% of the free space of
 * the dbpath's file system, at least 990 MB and at most 50 GB. */
static int64_t
default_oplog_bytes(const char *dbpath)
{
    const int64_t mb = 1024 * 1024;
    int64_t opt = shl_opt_int(SHL_OPT_oplogSize), bytes = 990 * mb;
    struct statvfs vfs;

    if (opt > 0) {
        bytes = opt * mb;
    } else if (statvfs(dbpath, &vfs) == 0) {
        bytes = (int64_t)((double)vfs.f_bavail * (double)vfs.f_frsize * 0.05);
        if (bytes < 990 * mb) {
            bytes = 990 * mb;
        } else if (bytes > 50 * 1024 * mb) {
            bytes = 50 * 1024 * mb;
        }
    }
    return bytes;
}

int
shl_storage_open(const shl_storage_options_t *opts, shl_storage_engine_t **out, shl_status_t *st)
{
    shl_storage_engine_t *eng = bson_malloc0(sizeof(*eng));
    char *cfg = NULL, *journal = NULL;
    int ret = 0, wtret;
    int64_t cache_mb;

    *out = NULL;
    eng->lock_fd = -1;
    eng->opts = *opts;
    if (eng->opts.oplog_max_bytes <= 0) {
        eng->opts.oplog_max_bytes = default_oplog_bytes(opts->dbpath);
    }
    eng->dbpath = bson_strdup(opts->dbpath != NULL ? opts->dbpath : "");
    eng->opts.dbpath = eng->dbpath;
    eng->term = opts->term != 0 ? opts->term : -1;
    eng->keygen_factory =
        opts->keygen_factory != NULL ? opts->keygen_factory : shl_keygen_default_factory;
    pthread_mutex_init(&eng->pool_mu, NULL);
    pthread_mutex_init(&eng->clock_mu, NULL);
    pthread_mutex_init(&eng->flush_mu, NULL);
    pthread_cond_init(&eng->flush_cv, NULL);
    pthread_mutex_init(&eng->ckpt_mu, NULL);
    pthread_mutex_init(&eng->drops_mu, NULL);
    pthread_mutex_init(&eng->bg_mu, NULL);
    pthread_cond_init(&eng->bg_cv, NULL);
    shl_locks_init(eng);
    shl_catalog_init(eng);
    shl_history_window_init(eng);

    SHL_ERR(mkdir_p(eng->dbpath, st));
    SHL_ERR(lock_dbpath(eng, st));
    journal = bson_strdup_printf("%s/journal", eng->dbpath);
    SHL_ERR(mkdir_p(journal, st));

    eng->snappy = access(SNAPPY_EXT, R_OK) == 0;
    cache_mb = opts->cache_size_mb > 0 ? opts->cache_size_mb : default_cache_mb();
    /* MongoDB's settings where they apply: a journal in dbpath/journal with archiving,
     * 4 eviction threads, no WT-driven checkpoints (we run them at the stable ts). */
    cfg = bson_strdup_printf(
        "create,cache_size=%" PRId64 "M,session_max=%d,"
        "eviction=(threads_min=4,threads_max=4),"
        "log=(enabled=true,archive=true,path=journal%s),"
        "transaction_sync=(enabled=false),statistics=(fast),"
        "file_manager=(close_idle_time=600,close_scan_interval=10,close_handle_minimum=250)%s%s%s",
        cache_mb, opts->session_max > 0 ? opts->session_max : 20000,
        eng->snappy ? ",compressor=snappy" : "", eng->snappy ? ",extensions=[" SNAPPY_EXT "]" : "",
        opts->engine_config != NULL && opts->engine_config[0] != '\0' ? "," : "",
        opts->engine_config != NULL ? opts->engine_config : "");
    wtret = wiredtiger_open(eng->dbpath, NULL, cfg, &eng->conn);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "wiredtiger_open"));
    }
    SHL_LOG_INFO(STORAGE, 22315, "Opening WiredTiger", "config", BCON_UTF8(cfg));

    SHL_ERR(create_system_tables(eng, st));
    SHL_ERR(shl_sizes_create_table(eng, st));
    SHL_ERR(shl_local_docs_create_table(eng, st));
    SHL_ERR(init_clock(eng, st));
    SHL_ERR(shl_catalog_load(eng, st));
    SHL_ERR(shl_recovery_run(eng, st));

    if (!opts->no_background_threads) {
        pthread_create(&eng->flusher, NULL, flusher_main, eng);
        pthread_create(&eng->checkpointer, NULL, checkpointer_main, eng);
        eng->threads_started = true;
    }
    *out = eng;
    eng = NULL;
done:
    if (eng != NULL) {
        if (eng->conn != NULL) {
            eng->conn->close(eng->conn, NULL);
            eng->conn = NULL;
        }
        engine_free(eng);
    }
    bson_free(cfg);
    bson_free(journal);
    return ret;
}

void
shl_storage_close(shl_storage_engine_t *eng)
{
    shl_status_t st;

    if (eng == NULL) {
        return;
    }
    if (eng->threads_started) {
        pthread_mutex_lock(&eng->bg_mu);
        eng->bg_stop = true;
        pthread_cond_broadcast(&eng->bg_cv);
        pthread_mutex_unlock(&eng->bg_mu);
        pthread_join(eng->flusher, NULL);
        pthread_join(eng->checkpointer, NULL);
    }
    /* Nothing is in flight now: the no-holes point is the last write, and the final
     * checkpoint at it leaves nothing for the next start to replay. */
    SHL_INVARIANT(eng->inflight_head == NULL);
    {
        int pooled = 0;
        for (shl_wt_session_t *s = eng->pool_free; s != NULL; s = s->next) {
            pooled++;
        }
        /* Every transaction and cursor is finished: all sessions are back. */
        SHL_INVARIANT(pooled == atomic_load(&eng->sessions_open));
    }
    if (shl_storage_checkpoint(eng, &st) != 0) {
        SHL_LOG_ERROR(STORAGE, 5100106, "final checkpoint failed", "error", BCON_UTF8(st.reason));
    }
    eng->conn->close(eng->conn, "use_timestamp=true");
    eng->conn = NULL;
    /* WT closed every session and cursor; engine_free frees only our bookkeeping. */
    if (eng->lock_fd >= 0 && ftruncate(eng->lock_fd, 0) != 0) {
        SHL_LOG_WARNING(STORAGE, 5100107, "cannot empty the lock file");
    }
    SHL_LOG_INFO(STORAGE, 4795902, "WiredTiger closed");
    engine_free(eng);
}
