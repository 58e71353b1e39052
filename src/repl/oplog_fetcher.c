/*
 * oplog_fetcher.c -- a secondary's replication: a tailable, awaitData find over the sync
 * source's local.oplog.rs from the last entry this node has, batches applied with
 * shl_oplog_apply_replicated (written to this oplog as received, then applied at their own
 * timestamps), the clock and the stable-timestamp pin moved past them, and the new position
 * reported with replSetUpdatePosition, whose reply carries the commit point.
 * docs/design/replication.md "Fetching and applying".
 */
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "repl/repl_private.h"
#include "storage/oplog.h"

/* How long a getMore waits on the sync source for new entries (awaitData). */
#define AWAIT_MS 500
/* Pause after an error before trying again. */
#define RETRY_MS 200

/* MongoDB's fail point: the fetcher fetches nothing (what a batch brought while it is on is
 * dropped, not applied), so a test can make a primary write entries no one receives. */
SHL_FAILPOINT_DEFINE(stopReplProducer)

typedef struct fetcher {
    repl_coord_t *rc;
    char host[256];
    shl_client_conn_t *conn;
    int64_t cursor_id;
    uint64_t applied;    /* the newest entry applied here */
    uint64_t fetch_from; /* the next find starts here (an entry we have, or the set's first) */
    bool diverged;       /* the source lacks fetch_from: roll back (rollback.c) */
    uint64_t min_valid;  /* after a rollback: RECOVERING until this is applied */
    bool delayed;        /* a batch held entries too new for secondaryDelaySecs */
    bool sync_finishing; /* an initial sync reached minValid: STARTUP2 until its data is in a
                          * stable checkpoint and the flag is cleared (finish_initial_sync) */
} fetcher_t;

/* The end of an initial sync: the cloned data (written at the begin timestamp, durable only
 * through checkpoints) goes into a stable checkpoint first, then the durable "initial sync
 * done" flag is stored and the member becomes SECONDARY. A kill -9 before that restarts the
 * copy; after it the member keeps its data (MongoDB: STARTUP2 until initial sync is done).
 * Waits for the stable timestamp to reach the begin timestamp (the commit point it learns). */
static int
finish_initial_sync(fetcher_t *f, shl_status_t *st)
{
    repl_coord_t *rc = f->rc;
    uint64_t begin;
    int ret = 0;

    pthread_mutex_lock(&rc->mu);
    begin = rc->begin_ts;
    pthread_mutex_unlock(&rc->mu);
    if (shl_storage_stable_ts(rc->eng) < begin) {
        goto done;
    }
    SHL_ERR(shl_storage_checkpoint(rc->eng, st));
    SHL_ERR(repl_coord_initial_sync_done(rc, st));
    SHL_LOG_INFO(REPL, 2180042, "initial sync done");
    f->sync_finishing = false;
    repl_coord_set_state(rc, SHL_REPL_SECONDARY);
done:
    return ret;
}

/* The array at 'it' as a view. */
static bool
array_view(const bson_iter_t *it, bson_t *out)
{
    const uint8_t *data = NULL;
    uint32_t len = 0;

    bson_iter_array(it, &len, &data);
    return data != NULL && bson_init_static(out, data, len);
}

/* Wait up to 'ms' on the coordinator's wake condition; false once stopping. */
static bool
pause_ms(repl_coord_t *rc, int64_t ms)
{
    struct timespec until;
    bool go;

    pthread_mutex_lock(&rc->mu);
    if (!rc->stop) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)(ms % 1000) * 1000000L;
        until.tv_sec += ms / 1000 + until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&rc->wake, &rc->mu, &until);
    }
    go = !rc->stop;
    pthread_mutex_unlock(&rc->mu);
    return go;
}

static void
drop_source(fetcher_t *f)
{
    if (f->conn != NULL) {
        shl_conn_pool_checkin(f->rc->pool, f->conn);
        f->conn = NULL;
    }
    f->cursor_id = 0;
}

/* The sync source: the primary, when this node is a secondary that knows one. */
static bool
choose_source(fetcher_t *f)
{
    repl_coord_t *rc = f->rc;
    bool ok = false;

    pthread_mutex_lock(&rc->mu);
    if ((atomic_load(&rc->state) == SHL_REPL_SECONDARY ||
         atomic_load(&rc->state) == SHL_REPL_RECOVERING ||
         atomic_load(&rc->state) == SHL_REPL_STARTUP2) &&
        ((rc->primary >= 0 && rc->primary != rc->self) || rc->catch_up_from >= 0)) {
        /* The primary, or the member replSetSyncFrom named while it is up; during this
         * node's catch-up after an election, the member it catches up from. */
        int src = rc->primary, asked = repl_config_find(&rc->cfg, rc->sync_from);
        if (asked >= 0 && asked != rc->self && rc->members[asked].up) {
            src = asked;
        }
        if (rc->catch_up_from >= 0) {
            src = rc->catch_up_from;
        }
        snprintf(rc->sync_source, sizeof(rc->sync_source), "%s", rc->cfg.members[src].host);
        if (strcmp(f->host, rc->cfg.members[src].host) != 0) {
            snprintf(f->host, sizeof(f->host), "%s", rc->cfg.members[src].host);
            /* Until it returns our newest entry, its commit point may be on another branch. */
            repl_coord_hold_stable_locked(rc);
            pthread_mutex_unlock(&rc->mu);
            /* A new source (a failover, or this node stepped down): start again from the
             * newest entry this node has that came from the set. */
            drop_source(f);
            {
                uint64_t last = repl_coord_last_replicated(rc);
                if (last > f->applied) {
                    f->applied = last;
                    f->fetch_from = last;
                }
            }
            return true;
        }
        ok = true;
    }
    pthread_mutex_unlock(&rc->mu);
    if (!ok && f->host[0] != '\0') {
        /* Not fetching now (this node is primary, or knows none): whatever comes next is a
         * new source, started from the newest entry we have then (we may have written some). */
        drop_source(f);
        f->host[0] = '\0';
    }
    return ok;
}

/* Send our position to the source; learn its commit point from the reply. */
static void
report_position(fetcher_t *f)
{
    repl_coord_t *rc = f->rc;
    bson_t req = BSON_INITIALIZER, reply, arr, e, rd;
    shl_status_t st = SHL_STATUS_INIT;
    int32_t id, cfgver;
    int64_t applied_t = repl_coord_term_at(rc, f->applied);

    pthread_mutex_lock(&rc->mu);
    id = rc->self >= 0 ? rc->cfg.members[rc->self].id : -1;
    cfgver = (int32_t)rc->cfg.version;
    pthread_mutex_unlock(&rc->mu);
    BSON_APPEND_INT32(&req, "replSetUpdatePosition", 1);
    BSON_APPEND_ARRAY_BEGIN(&req, "optimes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &e);
    /* The optime's term is its entry's (not ours now): see repl_optime_cmp. */
    repl_append_optime(&e, "durableOpTime", f->applied, applied_t);
    BSON_APPEND_DATE_TIME(&e, "durableWallTime", (int64_t)SHL_TS_SECS(f->applied) * 1000);
    repl_append_optime(&e, "appliedOpTime", f->applied, applied_t);
    BSON_APPEND_DATE_TIME(&e, "appliedWallTime", (int64_t)SHL_TS_SECS(f->applied) * 1000);
    BSON_APPEND_INT32(&e, "memberId", id);
    BSON_APPEND_INT32(&e, "cfgver", cfgver);
    bson_append_document_end(&arr, &e);
    bson_append_array_end(&req, &arr);
    if (shl_client_run(rc->pool, f->host, "admin", &req, 2000, &reply, &st) == 0 &&
        shl_bson_get_subdoc(&reply, "$replData", &rd)) {
        repl_coord_learn_commit_point(rc, repl_optime_ts(&rd, "lastOpCommitted"));
    }
    bson_destroy(&req);
    bson_destroy(&reply);
}

/* When the entry was written: its 'wall' date, else its timestamp's seconds. */
static int64_t
entry_wall_ms(const bson_t *e, uint64_t ts)
{
    bson_iter_t it;

    if (bson_iter_init_find(&it, e, "wall") && BSON_ITER_HOLDS_DATE_TIME(&it)) {
        return bson_iter_date_time(&it);
    }
    return (int64_t)SHL_TS_SECS(ts) * 1000;
}

/*
 * Whether the source's first entry 'e' is our entry at fetch_from, as MongoDB's fetcher
 * checks it: the same optime, timestamp and term. A timestamp alone is not enough: an
 * entry the set never had (a former primary's, or this member's own) can share its slot with
 * a different entry of the set's, and taking it for ours would skip every entry of the set's
 * between our real common point and it (a restarted member missed a decision entry so).
 * Without an entry of ours there (fetch_from is the set's first entry), the timestamp is it.
 */
static bool
same_optime(fetcher_t *f, const bson_t *e, uint64_t ts)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t mine;
    bool found = false, same = ts == f->fetch_from;

    bson_init(&mine);
    if (same && shl_oplog_read(f->rc->eng, f->fetch_from, &mine, &found, &st) == 0 && found &&
        repl_entry_term(&mine) >= 0 && repl_entry_term(e) >= 0) {
        same = repl_entry_term(&mine) == repl_entry_term(e);
    }
    bson_destroy(&mine);
    return same;
}

/* Apply the entries of 'batch' (an array) we do not have yet. */
static int
apply_batch(fetcher_t *f, const bson_t *batch, bool first, shl_status_t *st)
{
    repl_coord_t *rc = f->rc;
    bson_iter_t it;
    bson_t **entries = NULL; /* heap copies: a bson_t must never move */
    size_t n = 0, cap = 0;
    uint64_t last = f->applied;
    int64_t delay_s = 0;
    int ret = 0;

    pthread_mutex_lock(&rc->mu);
    if (rc->self >= 0) {
        delay_s = rc->cfg.members[rc->self].secondary_delay_secs;
    }
    pthread_mutex_unlock(&rc->mu);
    bson_iter_init(&it, batch);
    while (bson_iter_next(&it)) {
        const uint8_t *data;
        uint32_t len;
        bson_t e;
        bson_iter_t f_it;
        uint64_t ts;

        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            continue;
        }
        bson_iter_document(&it, &len, &data);
        bson_init_static(&e, data, len);
        ts = repl_optime_ts(&e, "ts");
        /* The source must still have where we are: otherwise we fell off its oplog (a
         * resync, initial sync, is not there yet). */
        if (first) {
            first = false;
            if (!same_optime(f, &e, ts)) {
                f->diverged = true;
                SHL_FAIL(st, SHL_CODE_OPLOG_START_MISSING,
                         "our last optime is not in the sync source's oplog");
            }
            repl_coord_confirm_branch(rc);
        }
        if (ts <= f->applied) {
            continue;
        }
        /* A delayed member (secondaryDelaySecs) applies an entry only once it is that old:
         * the rest of the batch is fetched again later. */
        if (delay_s > 0 && entry_wall_ms(&e, ts) > shl_clock_wall_ms() - delay_s * 1000) {
            f->delayed = true;
            break;
        }
        /* The local database is each member's own. */
        if (bson_iter_init_find(&f_it, &e, "ns") && BSON_ITER_HOLDS_UTF8(&f_it) &&
            strncmp(bson_iter_utf8(&f_it, NULL), "local.", 6) == 0) {
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            entries = bson_realloc(entries, cap * sizeof(*entries));
        }
        entries[n++] = bson_copy(&e);
        last = ts;
    }
    if (n > 0) {
        SHL_ERR(shl_oplog_apply_replicated(rc->eng, (const bson_t *const *)entries, n, st));
        f->applied = last;
        f->fetch_from = last;
        shl_storage_clock_advance(rc->eng, last);
        /* Flushed whatever our durable point says: it follows our clock, which our own
         * writes (or a restart's wall clock) may have moved past 'last'. */
        SHL_ERR(shl_storage_wait_durable(rc->eng, 0, st));
        repl_coord_self_progress(rc, last, last); /* moves the stable pin */
        report_position(f);
        if (f->min_valid != 0 && last >= f->min_valid) {
            f->min_valid = 0;
            if (atomic_load(&rc->state) == SHL_REPL_STARTUP2) {
                f->sync_finishing = true;
            } else {
                repl_coord_set_state(rc, SHL_REPL_SECONDARY);
            }
        }
    }
    if (f->sync_finishing) {
        SHL_ERR(finish_initial_sync(f, st));
    }
done:
    for (size_t i = 0; i < n; i++) {
        bson_destroy(entries[i]);
    }
    bson_free(entries);
    return ret;
}

/* One find or getMore on the source, and the apply of what it returned. */
static int
fetch_once(fetcher_t *f, shl_status_t *st)
{
    repl_coord_t *rc = f->rc;
    bson_t req = BSON_INITIALIZER, reply, cursor, batch;
    bson_iter_t it;
    bool first = f->cursor_id == 0;
    int ret = 0;

    bson_init(&reply);
    if (f->conn == NULL) {
        SHL_ERR(shl_conn_pool_checkout(rc->pool, f->host, 2000, &f->conn, st));
    }
    if (first) {
        bson_t filter, range, ns;
        BSON_APPEND_UTF8(&req, "find", "oplog.rs");
        BSON_APPEND_DOCUMENT_BEGIN(&req, "filter", &filter);
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "ts", &range);
        BSON_APPEND_TIMESTAMP(&range, "$gte", SHL_TS_SECS(f->fetch_from),
                              SHL_TS_INC(f->fetch_from));
        bson_append_document_end(&filter, &range);
        /* The source's own local.* entries are not the set's: one in the slot of our newest
         * entry would pass for it (and they are not applied anyway). */
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "ns", &ns);
        BSON_APPEND_REGEX(&ns, "$not", "^local\\.", "");
        bson_append_document_end(&filter, &ns);
        bson_append_document_end(&req, &filter);
        BSON_APPEND_BOOL(&req, "tailable", true);
        BSON_APPEND_BOOL(&req, "awaitData", true);
    } else {
        BSON_APPEND_INT64(&req, "getMore", f->cursor_id);
        BSON_APPEND_UTF8(&req, "collection", "oplog.rs");
        BSON_APPEND_INT64(&req, "maxTimeMS", AWAIT_MS);
    }
    bson_destroy(&reply);
    SHL_ERR(shl_client_conn_run(f->conn, "local", &req, AWAIT_MS + 5000, &reply, st));
    if (SHL_FAILPOINT_FIRES(stopReplProducer)) {
        drop_source(f);
        goto done;
    }
    if (!shl_bson_get_subdoc(&reply, "cursor", &cursor) ||
        !bson_iter_init_find(&it, &cursor, "id")) {
        SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "oplog query reply without a cursor");
    }
    f->cursor_id = bson_iter_as_int64(&it);
    if (!bson_iter_init_find(&it, &cursor, first ? "firstBatch" : "nextBatch") ||
        !BSON_ITER_HOLDS_ARRAY(&it) || !array_view(&it, &batch)) {
        SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "oplog query reply without a batch");
    }
    if (first && bson_count_keys(&batch) == 0) {
        f->diverged = true;
        SHL_FAIL(st, SHL_CODE_OPLOG_START_MISSING,
                 "our last optime is not in the sync source's oplog");
    }
    SHL_ERR(apply_batch(f, &batch, first, st));
done:
    bson_destroy(&req);
    bson_destroy(&reply);
    return ret;
}

void *
repl_fetcher_main(void *arg)
{
    fetcher_t f;
    uint64_t last;

    memset(&f, 0, sizeof(f));
    f.rc = arg;
    shl_log_set_thread_ctx("OplogFetcher");
    /* Where we are: the newest entry we replicated, or just before the set's first. */
    last = repl_coord_last_replicated(f.rc);
    pthread_mutex_lock(&f.rc->mu);
    if (last >= f.rc->begin_ts && last != 0) {
        f.applied = last;
        f.fetch_from = last;
    } else {
        f.applied = f.rc->begin_ts > 0 ? f.rc->begin_ts - 1 : 0;
        f.fetch_from = f.rc->begin_ts;
    }
    pthread_mutex_unlock(&f.rc->mu);
    repl_coord_self_progress(f.rc, f.applied, f.applied);
    while (!f.rc->stop) {
        shl_status_t st = SHL_STATUS_INIT;

        if (SHL_FAILPOINT_FIRES(stopReplProducer) || !choose_source(&f)) {
            if (!pause_ms(f.rc, RETRY_MS)) {
                break;
            }
            continue;
        }
        if (f.rc->initial_sync) {
            uint64_t begin = 0;
            if (repl_initial_sync(f.rc, f.host, &begin, &f.min_valid, &st) != 0) {
                SHL_LOG_WARNING(REPL, 2180012, "initial sync failed, trying again", "source",
                                BCON_UTF8(f.host), "error", BCON_UTF8(st.reason));
                if (!pause_ms(f.rc, 1000)) {
                    break;
                }
                continue;
            }
            atomic_store(&f.rc->initial_sync, false);
            drop_source(&f);
            f.applied = begin - 1;
            f.fetch_from = begin;
            continue;
        }
        f.delayed = false;
        if (fetch_once(&f, &st) == 0 && f.delayed) {
            /* Entries too new for our delay: fetch them again from where we are, later. */
            drop_source(&f);
            if (!pause_ms(f.rc, 500)) {
                break;
            }
            continue;
        }
        if (st.code != 0) {
            uint64_t stable = shl_storage_stable_ts(f.rc->eng);
            SHL_LOG_INFO(REPL, 2180010, "oplog fetcher error", "source", BCON_UTF8(f.host),
                         "error", BCON_UTF8(st.reason), "applied",
                         BCON_TIMESTAMP(SHL_TS_SECS(f.applied), SHL_TS_INC(f.applied)), "stable",
                         BCON_TIMESTAMP(SHL_TS_SECS(stable), SHL_TS_INC(stable)));
            drop_source(&f);
            if (f.diverged && repl_catch_up_diverged(f.rc)) {
                /* Catching up from a member on another branch of history: never roll back
                 * for it (what we have may be majority-committed); the catch-up ends. */
                f.diverged = false;
            }
            if (f.diverged) {
                uint64_t common = 0;
                f.diverged = false;
                shl_status_clear(&st);
                if (repl_rollback_run(f.rc, f.host, &common, &f.min_valid, &st) == 0) {
                    f.applied = common;
                    f.fetch_from = common;
                    if (f.min_valid <= common) {
                        /* The source has nothing past the common point: consistent now. */
                        f.min_valid = 0;
                        repl_coord_set_state(f.rc, SHL_REPL_SECONDARY);
                    }
                    continue;
                }
                SHL_LOG_WARNING(REPL, 2180011, "rollback failed", "source", BCON_UTF8(f.host),
                                "error", BCON_UTF8(st.reason));
            }
            if (!pause_ms(f.rc, st.code == SHL_CODE_OPLOG_START_MISSING ? 1000 : RETRY_MS)) {
                break;
            }
        }
    }
    drop_source(&f);
    return NULL;
}
