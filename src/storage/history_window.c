/*
 * The history window: how far WiredTiger's oldest timestamp trails the stable one, and the
 * cache readings that decide it.
 *
 * minSnapshotHistoryWindowInSeconds (default 300) asks WiredTiger to keep every version of
 * that window, so snapshot reads at an atClusterTime of that age find it. MongoDB 5.0+ can
 * afford it: its WiredTiger writes old versions to a durable history store on disk. Ours
 * (3.2.1) keeps them in the cache, spilling to the lookaside table only when eviction is
 * stuck; a node that dirties more than the cache's dirty trigger within the window (a bulk
 * load, an index build over 200k documents on a 256 MB cache) then has eviction reconcile,
 * spill and read back the same pages until the window has passed -- minutes of a node
 * crawling. So the window in force adapts, as MongoDB 4.2 (same storage generation) did
 * with its target snapshot window: under cache pressure it shrinks by a quarter per check
 * (to 3 s at the least); once eviction is idle again (dirty bytes below WiredTiger's dirty
 * target) it grows back by 1 s every 2 s, never beyond the setting. Growing slower than the
 * clock matters: while the window grows the oldest timestamp moves at the clock's pace less
 * the growth, so at 2 s a second (as before bal16e) it stood still for minutes after each
 * shrink and every write of those minutes stayed pinned in the cache -- the next bulk write
 * (a migration's clone) started with eviction stuck on that history. Snapshot reads
 * older than the window in force get SnapshotTooOld, as they did there.
 */
#include "storage/storage_private.h"

#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"

/* Checks at most this often (the flusher calls more often). */
#define WINDOW_CHECK_MS 1000
/* Growth without pressure: this many seconds at most once per WINDOW_GROW_MS, so the oldest
 * timestamp still advances at half the clock's pace while the window grows; and only while
 * dirty bytes fill less than WINDOW_GROW_DIRTY_PCT of the cache (WiredTiger's
 * eviction_dirty_target: eviction has nothing urgent to do). Between that and pressure the
 * window holds. */
#define WINDOW_GROW_SECS 1
#define WINDOW_GROW_MS 2000
#define WINDOW_GROW_DIRTY_PCT 5
/* Pressure: WiredTiger's cache overflow score at this value or above (0-100: how often
 * eviction found itself stuck lately; it rises once eviction must spill history to the
 * lookaside table) while dirty bytes fill this share of the cache (percent; WiredTiger's
 * dirty target is 5, its trigger 20) -- the score is only updated while eviction works, so
 * alone it would outlive the pressure -- or the cache this full (percent; the eviction
 * trigger is 95). */
#define PRESSURE_SCORE 10
#define PRESSURE_DIRTY_PCT 10
#define PRESSURE_USED_PCT 90
/* The window never shrinks below this (nor above the setting): reads a little behind the
 * stable timestamp -- a transaction's atClusterTime chosen by a router, a replica set's
 * majority point -- keep finding their snapshot while the cache is under pressure. */
#define WINDOW_FLOOR_SECS 3

static int64_t
setting_secs(void)
{
    int64_t w = shl_opt_int(SHL_OPT_minSnapshotHistoryWindowInSeconds);
    return w < 0 ? 0 : w;
}

void
shl_history_window_init(shl_storage_engine_t *eng)
{
    atomic_store(&eng->window_secs, setting_secs());
    eng->window_checked_ms = 0;
    eng->window_grown_ms = 0;
}

uint64_t
shl_history_window_oldest_for(shl_storage_engine_t *eng, uint64_t stable)
{
    int64_t window = atomic_load(&eng->window_secs);
    int64_t setting = setting_secs();
    int64_t secs = SHL_TS_SECS(stable);
    int64_t now = shl_clock_wall_ms() / 1000;
    uint64_t behind_stable, behind_now;

    if (window > setting) {
        window = setting; /* lowered at run time: at once */
    }
    if (window <= 0) {
        return stable;
    }
    /* The window behind the stable timestamp, or behind the wall clock once the node has
     * been idle longer than the window (so an idle node lets go of its last writes' history;
     * a clock behind the timestamps keeps the first). */
    behind_stable = secs > window ? SHL_TS_MAKE(secs - window, 0) : 1;
    behind_now = now > window ? SHL_TS_MAKE(now - window, 0) : 1;
    if (behind_now > stable) {
        behind_now = stable;
    }
    return behind_now > behind_stable ? behind_now : behind_stable;
}

/* One connection statistic by its WT_STAT_CONN_* key; 0 when it can't be read. */
static int64_t
stat_value(WT_CURSOR *c, int key)
{
    const char *desc, *pvalue;
    int64_t v = 0;

    c->set_key(c, key);
    if (c->search(c) != 0 || c->get_value(c, &desc, &pvalue, &v) != 0) {
        v = 0;
    }
    return v;
}

int
shl_storage_cache_stats(shl_storage_engine_t *eng, shl_storage_cache_stats_t *out,
                        shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    WT_CURSOR *c = NULL;
    int ret = 0, wtret;

    memset(out, 0, sizeof(*out));
    SHL_ERR(shl_wt_session_get(eng, &s, st));
    wtret = s->wt->open_cursor(s->wt, "statistics:", NULL, NULL, &c);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "open statistics cursor"));
    }
    out->bytes_max = stat_value(c, WT_STAT_CONN_CACHE_BYTES_MAX);
    out->bytes_in_use = stat_value(c, WT_STAT_CONN_CACHE_BYTES_INUSE);
    out->bytes_dirty = stat_value(c, WT_STAT_CONN_CACHE_BYTES_DIRTY);
    out->bytes_lookaside = stat_value(c, WT_STAT_CONN_CACHE_BYTES_LOOKASIDE);
    out->lookaside_entries = stat_value(c, WT_STAT_CONN_CACHE_LOOKASIDE_ENTRIES);
    out->lookaside_score = stat_value(c, WT_STAT_CONN_CACHE_LOOKASIDE_SCORE);
    out->app_evict_usecs = stat_value(c, WT_STAT_CONN_APPLICATION_EVICT_TIME);
    out->app_wait_usecs = stat_value(c, WT_STAT_CONN_APPLICATION_CACHE_TIME);
    out->app_evicted_pages = stat_value(c, WT_STAT_CONN_CACHE_EVICTION_APP);
    out->pinned_ts_range = stat_value(c, WT_STAT_CONN_TXN_PINNED_TIMESTAMP);
    out->pinned_id_range = stat_value(c, WT_STAT_CONN_TXN_PINNED_RANGE);
    out->window_secs = atomic_load(&eng->window_secs);
    if (out->window_secs > setting_secs()) {
        out->window_secs = setting_secs();
    }
done:
    if (c != NULL) {
        c->close(c);
    }
    shl_wt_session_put(eng, s);
    return ret;
}

/* Whether the cache readings say eviction cannot keep up with the history kept. */
static bool
under_pressure(const shl_storage_cache_stats_t *cs)
{
    if (cs->bytes_max <= 0) {
        return false;
    }
    return (cs->lookaside_score >= PRESSURE_SCORE &&
            cs->bytes_dirty * 100 >= cs->bytes_max * PRESSURE_DIRTY_PCT) ||
           cs->bytes_in_use * 100 >= cs->bytes_max * PRESSURE_USED_PCT;
}

void
shl_history_window_adjust(shl_storage_engine_t *eng)
{
    int64_t now = shl_clock_mono_us() / 1000;
    int64_t setting = setting_secs();
    int64_t window = atomic_load(&eng->window_secs);
    int64_t next;
    shl_storage_cache_stats_t cs;
    shl_status_t st = SHL_STATUS_INIT;

    if (now - eng->window_checked_ms < WINDOW_CHECK_MS) {
        return;
    }
    eng->window_checked_ms = now;
    if (window > setting) {
        window = setting;
    }
    if (shl_storage_cache_stats(eng, &cs, &st) != 0) {
        return; /* no reading: keep the window */
    }
    next = window;
    if (under_pressure(&cs)) {
        next = window * 3 / 4;
        if (next < WINDOW_FLOOR_SECS) {
            next = window < WINDOW_FLOOR_SECS ? window : WINDOW_FLOOR_SECS;
        }
    } else if (window < setting && now - eng->window_grown_ms >= WINDOW_GROW_MS &&
               cs.bytes_dirty * 100 < cs.bytes_max * WINDOW_GROW_DIRTY_PCT) {
        next = window + WINDOW_GROW_SECS > setting ? setting : window + WINDOW_GROW_SECS;
        eng->window_grown_ms = now;
    }
    if ((window == setting && next < setting) || (next == setting && window < setting)) {
        SHL_LOG_INFO(STORAGE, 5100120, "history window changed", "seconds", BCON_INT64(next),
                     "setting", BCON_INT64(setting), "dirtyBytes", BCON_INT64(cs.bytes_dirty),
                     "usedBytes", BCON_INT64(cs.bytes_in_use), "lookasideScore",
                     BCON_INT64(cs.lookaside_score));
    }
    atomic_store(&eng->window_secs, next);
}
