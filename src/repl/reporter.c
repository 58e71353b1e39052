/*
 * reporter.c -- see reporter.h.
 */
#include <string.h>

#include "base/log.h"
#include "bson/bson_util.h"
#include "repl/repl_private.h"
#include "repl/reporter.h"

/* Send 'pos' (applied and durable here) to 'host'; learn its commit point from the reply. A
 * failed report is not retried: the next batch or a heartbeat carries the progress. */
static void
send_position(repl_coord_t *rc, const char *host, uint64_t pos)
{
    bson_t req = BSON_INITIALIZER, reply, arr, e, rd;
    shl_status_t st = SHL_STATUS_INIT;
    int32_t id, cfgver;
    int64_t term;

    pthread_mutex_lock(&rc->mu);
    id = rc->self >= 0 ? rc->cfg.members[rc->self].id : -1;
    cfgver = (int32_t)rc->cfg.version;
    term = rc->term;
    pthread_mutex_unlock(&rc->mu);
    BSON_APPEND_INT32(&req, "replSetUpdatePosition", 1);
    BSON_APPEND_ARRAY_BEGIN(&req, "optimes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &e);
    repl_append_optime(&e, "durableOpTime", pos, term);
    BSON_APPEND_DATE_TIME(&e, "durableWallTime", (int64_t)SHL_TS_SECS(pos) * 1000);
    repl_append_optime(&e, "appliedOpTime", pos, term);
    BSON_APPEND_DATE_TIME(&e, "appliedWallTime", (int64_t)SHL_TS_SECS(pos) * 1000);
    BSON_APPEND_INT32(&e, "memberId", id);
    BSON_APPEND_INT32(&e, "cfgver", cfgver);
    bson_append_document_end(&arr, &e);
    bson_append_array_end(&req, &arr);
    if (shl_client_run(rc->pool, host, "admin", &req, 2000, &reply, &st) == 0 &&
        shl_bson_get_subdoc(&reply, "$replData", &rd)) {
        repl_coord_learn_commit_point(rc, repl_optime_ts(&rd, "lastOpCommitted"));
    }
    bson_destroy(&req);
    bson_destroy(&reply);
}

/* Something to do: a written batch not flushed yet, or a flushed and applied one not sent. */
static bool
has_work_locked(const repl_reporter_t *r)
{
    uint64_t ready = r->applied < r->flushed ? r->applied : r->flushed;
    return (r->written > r->flushed && !r->flush_failed) || ready > r->reported;
}

/* Send what is flushed and applied and not reported yet, if anything. Called with mu held;
 * returns with it held. */
static void
report_locked(repl_reporter_t *r)
{
    uint64_t ready = r->applied < r->flushed ? r->applied : r->flushed;

    if (ready > r->reported) {
        char host[sizeof(r->host)];
        snprintf(host, sizeof(host), "%s", r->host);
        pthread_mutex_unlock(&r->mu);
        repl_coord_self_progress(r->rc, ready, ready); /* moves the stable pin */
        send_position(r->rc, host, ready);
        pthread_mutex_lock(&r->mu);
        if (ready > r->reported) {
            r->reported = ready;
        }
    }
}

/* One step: report what is both flushed and applied (first: writers wait for it), then flush
 * what is written, then report what that flush made ready. Called with mu held and
 * has_work_locked(r) true; returns with mu held. Never waits for the apply (a failed one
 * never comes: the fetcher's repl_reporter_applied wakes us when it does). */
static void
step_locked(repl_reporter_t *r)
{
    r->busy = true;
    report_locked(r);
    if (r->written > r->flushed && !r->flush_failed) {
        uint64_t target = r->written; /* committed before this flush begins */
        shl_status_t st = SHL_STATUS_INIT;
        int err;
        pthread_mutex_unlock(&r->mu);
        /* Whatever our durable point says: it follows our clock, which our own writes or a
         * restart's wall clock may have moved past 'target'. */
        err = shl_storage_wait_durable(r->rc->eng, 0, &st);
        pthread_mutex_lock(&r->mu);
        if (err != 0) {
            r->flush_failed = true;
            SHL_LOG_WARNING(REPL, 2180013, "journal flush of replicated entries failed", "error",
                            BCON_UTF8(st.reason));
        } else if (target > r->flushed) {
            r->flushed = target;
        }
        pthread_cond_broadcast(&r->cv);
        /* The apply usually ended during the flush. */
        report_locked(r);
    }
    r->busy = false;
    pthread_cond_broadcast(&r->cv);
}

static void *
reporter_main(void *arg)
{
    repl_reporter_t *r = arg;

    shl_log_set_thread_ctx("ReplReporter");
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        if (has_work_locked(r)) {
            step_locked(r);
        } else {
            pthread_cond_wait(&r->cv, &r->mu);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

void
repl_reporter_start(repl_reporter_t *r, repl_coord_t *rc, uint64_t at)
{
    memset(r, 0, sizeof(*r));
    r->rc = rc;
    r->written = r->applied = r->flushed = r->reported = at;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->running = true;
    if (pthread_create(&r->thread, NULL, reporter_main, r) != 0) {
        r->running = false;
    }
}

/* Without a thread: do the work here, now. */
static void
inline_work_locked(repl_reporter_t *r)
{
    while (!r->running && has_work_locked(r)) {
        step_locked(r);
    }
}

void
repl_reporter_written(repl_reporter_t *r, const char *host, uint64_t ts)
{
    pthread_mutex_lock(&r->mu);
    snprintf(r->host, sizeof(r->host), "%s", host);
    if (ts > r->written) {
        r->written = ts;
    }
    r->flush_failed = false;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void
repl_reporter_applied(repl_reporter_t *r, uint64_t ts)
{
    pthread_mutex_lock(&r->mu);
    if (ts > r->applied) {
        r->applied = ts;
    }
    pthread_cond_broadcast(&r->cv);
    inline_work_locked(r);
    pthread_mutex_unlock(&r->mu);
}

bool
repl_reporter_wait_flushed(repl_reporter_t *r, uint64_t ts)
{
    bool ok;

    pthread_mutex_lock(&r->mu);
    inline_work_locked(r);
    while (r->running && !r->stop && r->flushed < ts && !r->flush_failed) {
        pthread_cond_wait(&r->cv, &r->mu);
    }
    ok = r->flushed >= ts;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

bool
repl_reporter_drain(repl_reporter_t *r)
{
    bool ok;

    pthread_mutex_lock(&r->mu);
    inline_work_locked(r);
    while (r->running && !r->stop && (r->busy || has_work_locked(r))) {
        pthread_cond_wait(&r->cv, &r->mu);
    }
    ok = !r->flush_failed;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

void
repl_reporter_reset(repl_reporter_t *r, uint64_t at)
{
    pthread_mutex_lock(&r->mu);
    r->written = r->applied = r->flushed = r->reported = at;
    r->flush_failed = false;
    pthread_mutex_unlock(&r->mu);
}

void
repl_reporter_stop(repl_reporter_t *r)
{
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (r->running) {
        pthread_join(r->thread, NULL);
        r->running = false;
    }
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}
