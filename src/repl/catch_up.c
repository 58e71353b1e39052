/*
 * catch_up.c -- MongoDB's primary catch-up: a member that won an election first fetches the
 * entries of the set's it lacks from a member that is ahead (one that did not vote for it, or
 * whose newest entries came after its vote was asked), so that writes a majority may already
 * hold are not rolled back needlessly. settings.catchUpTimeoutMillis bounds it (-1: no
 * limit, 0: no catch-up); replSetAbortPrimaryCatchUp ends it. docs/design/replication.md
 * "Catch-up".
 */
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "repl/repl_private.h"

/* The data-bearing member, up, whose newest entry of the set's is the newest (and above
 * 'mine'): its index, or -1; its entry in *target. Asks each one (blocks on the network). */
static int
newest_member(repl_coord_t *rc, uint64_t mine, uint64_t *target)
{
    char hosts[REPL_MAX_MEMBERS][256];
    bool ask[REPL_MAX_MEMBERS];
    int n, best = -1;
    int64_t target_t;

    *target = mine;
    target_t = repl_coord_term_at(rc, mine);
    pthread_mutex_lock(&rc->mu);
    n = rc->cfg.n;
    for (int i = 0; i < n; i++) {
        memcpy(hosts[i], rc->cfg.members[i].host, sizeof(hosts[i]));
        ask[i] = i != rc->self && !rc->cfg.members[i].arbiter && rc->members[i].up;
    }
    pthread_mutex_unlock(&rc->mu);
    for (int i = 0; i < n; i++) {
        shl_status_t st = SHL_STATUS_INIT;
        uint64_t top = 0;
        int64_t top_t = -1;
        /* Newer as an optime (term, timestamp): a restarted former primary's divergent entry
         * of an older term is no target, whatever its timestamp. */
        if (ask[i] && repl_source_top_replicated(rc, hosts[i], &top, &top_t, &st) == 0 &&
            repl_optime_cmp(top_t, top, target_t, *target) > 0) {
            *target = top;
            target_t = top_t;
            best = i;
        }
    }
    return best;
}

bool
repl_catch_up(repl_coord_t *rc, int64_t term)
{
    uint64_t target = 0, mine = repl_coord_last_replicated(rc);
    int64_t timeout_ms, started = shl_clock_mono_us();
    const char *how = "alreadyCaughtUp";
    bool same_term;
    int from;

    pthread_mutex_lock(&rc->mu);
    timeout_ms = rc->cfg.catch_up_timeout_ms;
    pthread_mutex_unlock(&rc->mu);
    from = timeout_ms == 0 ? -1 : newest_member(rc, mine, &target);
    pthread_mutex_lock(&rc->mu);
    if (from >= 0 && rc->term == term) {
        rc->catching_up = true;
        rc->catch_up_abort = false;
        rc->catch_up_from = from;
        pthread_cond_broadcast(&rc->wake);
        pthread_mutex_unlock(&rc->mu);
        SHL_LOG_INFO(REPL, 2180060, "entering primary catch-up mode", "source",
                     BCON_UTF8(rc->cfg.members[from].host), "target",
                     BCON_TIMESTAMP(SHL_TS_SECS(target), SHL_TS_INC(target)));
        pthread_mutex_lock(&rc->mu);
        how = "caughtUp";
        for (;;) {
            struct timespec until;
            int64_t now = shl_clock_mono_us();
            if (rc->self >= 0 && rc->members[rc->self].applied >= target) {
                break;
            }
            if (rc->term != term || rc->stop) {
                how = "failedWithNewTerm";
                break;
            }
            if (rc->catch_up_abort) {
                how = "aborted (replSetAbortPrimaryCatchUp)";
                break;
            }
            if (timeout_ms > 0 && now - started >= timeout_ms * 1000) {
                how = "timedOut";
                break;
            }
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 100000000L;
            until.tv_sec += until.tv_nsec / 1000000000L;
            until.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&rc->progress, &rc->mu, &until);
        }
        rc->catching_up = false;
        rc->catch_up_from = -1;
    }
    same_term = rc->term == term;
    pthread_mutex_unlock(&rc->mu);
    if (from >= 0) {
        SHL_LOG_INFO(REPL, 2180061, "primary catch-up done", "conclusion", BCON_UTF8(how),
                     "durationMillis", BCON_INT64((shl_clock_mono_us() - started) / 1000));
    }
    return same_term;
}

int
repl_abort_catch_up(repl_coord_t *rc, shl_status_t *st)
{
    int ret = 0;

    pthread_mutex_lock(&rc->mu);
    if (!rc->catching_up) {
        pthread_mutex_unlock(&rc->mu);
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "The node is not in catch-up mode.");
    }
    rc->catch_up_abort = true;
    pthread_cond_broadcast(&rc->progress);
    pthread_mutex_unlock(&rc->mu);
done:
    return ret;
}

bool
repl_catch_up_diverged(repl_coord_t *rc)
{
    bool catching;

    pthread_mutex_lock(&rc->mu);
    catching = rc->catching_up;
    if (catching) {
        rc->catch_up_abort = true;
        pthread_cond_broadcast(&rc->progress);
    }
    pthread_mutex_unlock(&rc->mu);
    if (catching) {
        SHL_LOG_WARNING(REPL, 2180062,
                        "primary catch-up source does not have our newest entry: not rolling "
                        "back for it, ending catch-up");
    }
    return catching;
}
