/*
 * coordinator.c -- the coordinator framework of coordinator.h (issue 17 item 2; seeds/000
 * "Sharding DDL Coordinator"): state documents on self through remote.h, phases on a thread
 * per operation, checkpoints, resumption, join/conflict, bounded retry, cleanup.
 * docs/design/coordinators.md explains the choices.
 */
#include "sharding/coordinator.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/failpoint.h"
#include "base/log.h"

SHL_FAILPOINT_DEFINE(hangBeforeCoordinatorPhase)
SHL_FAILPOINT_DEFINE(crashBeforeCoordinatorPhase)

struct shl_coord {
    const shl_coord_type_t *t;   /* constant */
    shl_coord_service_t *svc;    /* constant */
    bson_t id;                   /* {_id: <value>}; constant */
    bson_t doc;                  /* the state document; written by the coordinator's thread under
                                  * svc->mu, read there without it, elsewhere under it */
    bson_t result;               /* set by phases; read by waiters once 'done' */
    size_t phase;                /* guarded by svc->mu (written by the thread, read by report) */
    bool persisted;              /* the document exists on disk; coordinator's thread only */
    bool unflushed;              /* its last write did not wait for the journal (the type's
                                  * first_insert_unflushed); coordinator's thread only */
    bool resumed;                /* constant */
    bool finished;               /* shl_coord_finish was called; coordinator's thread only */
    bool aborting;               /* shl_coord_abort was called; coordinator's thread only */
    bool done;                   /* guarded by svc->mu */
    bool holding;                /* the type's acquire succeeded, release not yet run;
                                  * guarded by svc->mu */
    bool acquired;               /* the type's acquire succeeded; the runner's only (passed
                                  * with the operation to the thread that continues it) */
    shl_status_t status;         /* the outcome; guarded by svc->mu, final once 'done' */
    bool answered;               /* the answers_after phase ran; guarded by svc->mu */
    const char *answers_after;   /* the type's answers_after, or what its answers_after_now
                                  * said at the start (NULL: the end); constant */
    int refs;                    /* guarded by svc->mu: the list, the thread, each waiter */
    atomic_bool halted;          /* a step-down or the shutdown asked it to stop (set under
                                  * svc->mu; read anywhere) */
    struct shl_coord *next;      /* guarded by svc->mu */
};

struct shl_coord_service {
    const shl_remote_t *remote;  /* constant */
    pthread_mutex_t mu;
    pthread_cond_t changed;      /* broadcast when a coordinator ends or a thread exits */
    shl_coord_t *running;        /* guarded by mu: coordinators not yet done */
    int threads;                 /* guarded by mu: coordinators being run (by their thread, or
                                  * by a caller of shl_coord_run before the hand-off) */
    int waiters;                 /* guarded by mu: callers waiting in wait_locked */
    atomic_bool stopping;        /* set once by destroy */
};

/* The error of a coordinator asked to stop: the shutdown's, else a step-down's. */
static int
halted_status(const shl_coord_t *c, shl_status_t *st)
{
    if (atomic_load(&c->svc->stopping)) {
        return shl_status_set(st, SHL_CODE_INTERRUPTED_AT_SHUTDOWN, "%s interrupted at shutdown",
                              c->t->name);
    }
    return shl_status_set(st, SHL_CODE_INTERRUPTED_DUE_TO_REPL_STATE_CHANGE,
                          "%s interrupted due to a replica set state change", c->t->name);
}

#define COORD_DB "config"

/* --------------------------------------------------------------------------- helpers */

static void
id_of(const bson_t *doc, bson_t *out)
{
    bson_iter_t it;

    bson_init(out);
    if (bson_iter_init_find(&it, doc, "_id")) {
        bson_append_iter(out, "_id", 3, &it);
    }
}

static void
sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

    while (ms > 0 && nanosleep(&ts, &ts) != 0) {
    }
}

/* The document without its "phase" field. */
static void
without_phase(const bson_t *doc, bson_t *out)
{
    bson_init(out);
    bson_copy_to_excluding_noinit(doc, out, "phase", NULL);
}

static bool
same_default(const bson_t *running, const bson_t *request)
{
    bson_t a, b;
    bool eq;

    without_phase(running, &a);
    without_phase(request, &b);
    eq = bson_equal(&a, &b);
    bson_destroy(&a);
    bson_destroy(&b);
    return eq;
}

static int
resume_phase_default(const shl_coord_t *c, const bson_t *doc)
{
    bson_iter_t it;
    int phase = -1;

    if (bson_iter_init_find(&it, doc, "phase") && BSON_ITER_HOLDS_UTF8(&it)) {
        for (size_t i = 0; i < c->t->nphases && phase < 0; i++) {
            if (strcmp(c->t->phases[i].name, bson_iter_utf8(&it, NULL)) == 0) {
                phase = (int)i;
            }
        }
    }
    return phase;
}

static void
coord_release_locked(shl_coord_t *c)
{
    SHL_INVARIANT(c->refs > 0);
    if (--c->refs == 0) {
        bson_destroy(&c->id);
        bson_destroy(&c->doc);
        bson_destroy(&c->result);
        bson_free(c);
    }
}

static shl_coord_t *
find_locked(shl_coord_service_t *svc, const shl_coord_type_t *t, const bson_t *id)
{
    shl_coord_t *c = svc->running;

    while (c != NULL && !(c->t == t && bson_equal(&c->id, id))) {
        c = c->next;
    }
    return c;
}

/* ----------------------------------------------------------------- state documents */

static const shl_remote_options_t durable = {
    .w = "majority", .j = true, .retry = SHL_REMOTE_RETRY_IDEMPOTENT, .backoff_ms = 100};
/* The final delete need not wait for the journal (MongoDB deletes with w: 1): a crash
 * that loses it resumes the last phase, which is idempotent. */
static const shl_remote_options_t local_only = {
    .w = "1", .retry = SHL_REMOTE_RETRY_IDEMPOTENT, .backoff_ms = 100};

/* Insert (how 0), update (1) or delete (-1) the state document; 'flush': wait for the
 * journal (deletes never do). */
static int
doc_write(shl_coord_t *c, int how, bool flush, shl_status_t *st)
{
    shl_remote_target_t self = shl_remote_target_self();
    bson_t cmd = BSON_INITIALIZER, arr, stmt, reply;
    int ret;

    if (how == 0) {
        BSON_APPEND_UTF8(&cmd, "insert", c->t->coll);
        BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &arr);
        BSON_APPEND_DOCUMENT(&arr, "0", &c->doc);
    } else {
        bson_iter_t it;
        bson_t q;

        BSON_APPEND_UTF8(&cmd, how > 0 ? "update" : "delete", c->t->coll);
        BSON_APPEND_ARRAY_BEGIN(&cmd, how > 0 ? "updates" : "deletes", &arr);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &stmt);
        BSON_APPEND_DOCUMENT_BEGIN(&stmt, "q", &q);
        if (bson_iter_init_find(&it, &c->id, "_id")) {
            bson_append_iter(&q, "_id", 3, &it);
        }
        bson_append_document_end(&stmt, &q);
        if (how > 0) {
            BSON_APPEND_DOCUMENT(&stmt, "u", &c->doc);
        } else {
            BSON_APPEND_INT32(&stmt, "limit", 1);
        }
        bson_append_document_end(&arr, &stmt);
    }
    bson_append_array_end(&cmd, &arr);
    ret = shl_remote_run(c->svc->remote, &self, COORD_DB, &cmd,
                         how < 0 || !flush ? &local_only : &durable, &reply, st);
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return ret;
}

static int
checkpoint(shl_coord_t *c, size_t phase, shl_status_t *st)
{
    bool lazy;
    int ret;

    if (c->t->resume_phase == NULL) {
        bson_t doc = BSON_INITIALIZER;

        bson_copy_to_excluding_noinit(&c->doc, &doc, "phase", NULL);
        BSON_APPEND_UTF8(&doc, "phase", c->t->phases[phase].name);
        pthread_mutex_lock(&c->svc->mu);
        bson_destroy(&c->doc);
        bson_steal(&c->doc, &doc);
        pthread_mutex_unlock(&c->svc->mu);
    }
    /* Only a first insert may leave its flush to the phase: a document found on disk (or
     * written by an earlier attempt) was durable before. */
    lazy = c->t->first_insert_unflushed && !c->persisted;
    ret = doc_write(c, c->persisted ? 1 : 0, !lazy, st);
    if (ret == SHL_CODE_DUPLICATE_KEY && !c->persisted) {
        /* An earlier operation with this _id ended with an error and left its document:
         * this one takes it over. */
        shl_status_clear(st);
        lazy = false;
        ret = doc_write(c, 1, true, st);
    }
    if (ret == 0) {
        c->persisted = true;
        c->unflushed = lazy;
    }
    return ret;
}

/* ---------------------------------------------------------------------- fail points */

typedef struct fp_where {
    const char *type, *phase;
} fp_where_t;

static bool
fp_filter(const bson_t *data, void *arg)
{
    const fp_where_t *w = arg;
    bson_iter_t it;
    bool ok = true;

    if (bson_iter_init_find(&it, data, "type")) {
        ok = BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), w->type) == 0;
    }
    if (ok && bson_iter_init_find(&it, data, "phase")) {
        ok = BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), w->phase) == 0;
    }
    return ok;
}

static void
fail_points(shl_coord_t *c, size_t phase)
{
    fp_where_t w = {c->t->name, c->t->phases[phase].name};

    if (shl_failpoint_evaluate(SHL_FAILPOINT(hangBeforeCoordinatorPhase), fp_filter, &w, NULL)) {
        SHL_LOG_INFO(SHARDING, 4170001, "coordinator hangs before a phase (fail point)",
                     "type", BCON_UTF8(c->t->name), "phase", BCON_UTF8(w.phase));
        shl_failpoint_pause_while_set(SHL_FAILPOINT(hangBeforeCoordinatorPhase), &c->halted);
    }
    if (shl_failpoint_evaluate(SHL_FAILPOINT(crashBeforeCoordinatorPhase), fp_filter, &w, NULL)) {
        SHL_LOG_WARNING(SHARDING, 4170002, "coordinator crashes the process (fail point)",
                        "type", BCON_UTF8(c->t->name), "phase", BCON_UTF8(w.phase));
        kill(getpid(), SIGKILL);
    }
}

/* ------------------------------------------------------------------------ execution */

static int
run_phase(shl_coord_t *c, size_t phase, shl_status_t *st)
{
    const shl_coord_phase_t *p = &c->t->phases[phase];
    int max = c->t->max_attempts == 0 ? 10 : c->t->max_attempts;
    int64_t backoff = c->t->backoff_ms > 0 ? c->t->backoff_ms : 100;
    int ret = 0;

    for (int attempt = 1;; attempt++) {
        if (atomic_load(&c->halted)) {
            ret = halted_status(c, st);
            break;
        }
        ret = p->checkpoint ? checkpoint(c, phase, st) : 0;
        if (ret == 0) {
            ret = p->run(c, st);
        }
        if (ret == 0 || c->aborting || !shl_remote_is_retryable(ret) ||
            (max > 0 && attempt >= max)) {
            break;
        }
        SHL_LOG_INFO(SHARDING, 4170003, "coordinator phase failed, retrying",
                     "type", BCON_UTF8(c->t->name), "phase", BCON_UTF8(p->name),
                     "code", BCON_INT64((int64_t)ret), "reason", BCON_UTF8(st->reason));
        sleep_ms(backoff);
        backoff = backoff < 5000 ? backoff * 2 : backoff;
    }
    return ret;
}

static void *coord_thread(void *arg);

/* Continue 'c' from its current phase on a thread of its own; the caller's count in
 * svc->threads passes to that thread. */
static void
spawn_thread(shl_coord_t *c)
{
    pthread_attr_t attr;
    pthread_t tid;

    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    SHL_INVARIANT(pthread_create(&tid, &attr, coord_thread, c) == 0);
    pthread_attr_destroy(&attr);
}

/*
 * Run c's phases from its current one. 'inline_caller': the thread is the caller of
 * shl_coord_run, which hands the phases after the type's answers_after to a thread of their
 * own and returns (false then; true once the operation ended here).
 */
static bool
coord_execute(shl_coord_t *c, bool inline_caller)
{
    shl_coord_service_t *svc = c->svc;
    shl_status_t st = SHL_STATUS_INIT;
    int ret = 0;
    size_t phase;
    bool aborted = false, handed_off = false;

    pthread_mutex_lock(&svc->mu);
    phase = c->phase;
    pthread_mutex_unlock(&svc->mu);
    if (c->t->acquire == NULL) {
        c->acquired = true; /* nothing to take: 'release' still runs at the end */
    } else if (!c->acquired) {
        ret = c->t->acquire(c, &st);
        c->acquired = ret == 0;
        pthread_mutex_lock(&svc->mu);
        c->holding = c->acquired;
        pthread_mutex_unlock(&svc->mu);
    }
    for (; phase < c->t->nphases && ret == 0 && !c->finished && !handed_off; phase++) {
        pthread_mutex_lock(&svc->mu);
        c->phase = phase;
        pthread_mutex_unlock(&svc->mu);
        fail_points(c, phase);
        ret = run_phase(c, phase, &st);
        if (ret == 0 && c->answers_after != NULL &&
            strcmp(c->t->phases[phase].name, c->answers_after) == 0) {
            pthread_mutex_lock(&svc->mu);
            c->answered = true;
            pthread_cond_broadcast(&svc->changed);
            pthread_mutex_unlock(&svc->mu);
            handed_off = inline_caller && phase + 1 < c->t->nphases && !c->finished;
        }
        aborted = ret != 0 && c->aborting;
        c->aborting = false;
    }
    if (handed_off) {
        pthread_mutex_lock(&svc->mu);
        c->phase = phase;
        pthread_mutex_unlock(&svc->mu);
        spawn_thread(c);
        return false;
    }
    /* The end: the document goes (unless an error leaves it for the next start). */
    if ((ret == 0 || aborted) && c->persisted) {
        shl_status_t del = SHL_STATUS_INIT;
        if (doc_write(c, -1, false, &del) != 0) {
            SHL_LOG_WARNING(SHARDING, 4170004, "could not delete a coordinator's document",
                            "type", BCON_UTF8(c->t->name), "reason", BCON_UTF8(del.reason));
        }
    }
    if (c->acquired && c->t->release != NULL) {
        pthread_mutex_lock(&svc->mu);
        c->holding = false;
        pthread_mutex_unlock(&svc->mu);
        c->t->release(c);
    }
    if (ret != 0) {
        SHL_LOG_WARNING(SHARDING, 4170005, "coordinator ended with an error",
                        "type", BCON_UTF8(c->t->name), "code", BCON_INT64((int64_t)ret),
                        "reason", BCON_UTF8(st.reason));
    }
    pthread_mutex_lock(&svc->mu);
    c->status = st;
    c->status.code = ret;
    c->done = true;
    for (shl_coord_t **p = &svc->running; *p != NULL; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            coord_release_locked(c); /* the list's reference */
            break;
        }
    }
    coord_release_locked(c); /* the runner's */
    svc->threads--;
    pthread_cond_broadcast(&svc->changed);
    pthread_mutex_unlock(&svc->mu);
    return true;
}

static void *
coord_thread(void *arg)
{
    shl_coord_t *c = arg;

    shl_log_set_thread_ctx(c->t->name);
    coord_execute(c, false);
    return NULL;
}

/* A new coordinator in the list, counted as a runner. Called with svc->mu held. Without
 * 'inline_caller' its thread is started; else the caller runs it (coord_execute) once it
 * released svc->mu. */
static shl_coord_t *
start_locked(shl_coord_service_t *svc, const shl_coord_type_t *t, const bson_t *doc, size_t phase,
             bool resumed, bool inline_caller)
{
    shl_coord_t *c = bson_malloc0(sizeof *c);

    c->t = t;
    c->svc = svc;
    id_of(doc, &c->id);
    bson_copy_to(doc, &c->doc);
    bson_init(&c->result);
    c->phase = phase;
    c->persisted = resumed;
    c->resumed = resumed;
    c->answers_after = t->answers_after_now != NULL ? t->answers_after_now() : t->answers_after;
    c->refs = 2; /* the list and the runner */
    atomic_init(&c->halted, atomic_load(&svc->stopping));
    c->next = svc->running;
    svc->running = c;
    svc->threads++;
    if (!inline_caller) {
        spawn_thread(c);
    }
    return c;
}

/* Wait for 'c' (a reference held by the caller, released here) to end. svc->mu held. */
static int
wait_locked(shl_coord_service_t *svc, shl_coord_t *c, int64_t wait_ms, bson_t *result,
            shl_status_t *st)
{
    struct timespec deadline;
    int ret = 0;

    bson_init(result);
    svc->waiters++;
    clock_gettime(CLOCK_REALTIME, &deadline);
    if (wait_ms > 0) {
        deadline.tv_sec += wait_ms / 1000;
        deadline.tv_nsec += (wait_ms % 1000) * 1000000;
        if (deadline.tv_nsec >= 1000000000) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000;
        }
    }
    while (!c->done && !c->answered && ret == 0) {
        if (wait_ms > 0) {
            if (pthread_cond_timedwait(&svc->changed, &svc->mu, &deadline) != 0 && !c->done &&
                !c->answered) {
                ret = shl_status_set(st, SHL_CODE_EXCEEDED_TIME_LIMIT,
                                     "timed out waiting for %s", c->t->name);
            }
        } else {
            pthread_cond_wait(&svc->changed, &svc->mu);
        }
    }
    if (ret == 0) {
        /* An answered operation is still running: its result is final, its status not. */
        ret = c->answered ? 0 : c->status.code;
        if (ret != 0) {
            *st = c->status;
        } else {
            bson_concat(result, &c->result);
        }
    }
    coord_release_locked(c);
    svc->waiters--;
    pthread_cond_broadcast(&svc->changed);
    return ret;
}

/* ----------------------------------------------------------------------- public API */

shl_coord_service_t *
shl_coord_service_new(const shl_remote_t *remote)
{
    shl_coord_service_t *svc = bson_malloc0(sizeof *svc);

    svc->remote = remote;
    pthread_mutex_init(&svc->mu, NULL);
    pthread_cond_init(&svc->changed, NULL);
    atomic_init(&svc->stopping, false);
    return svc;
}

/* Ask every running coordinator to stop at its next check. svc->mu held. */
static size_t
halt_all_locked(shl_coord_service_t *svc)
{
    size_t n = 0;

    for (shl_coord_t *c = svc->running; c != NULL; c = c->next) {
        atomic_store(&c->halted, true);
        n++;
    }
    return n;
}

void
shl_coord_service_destroy(shl_coord_service_t *svc)
{
    if (svc != NULL) {
        atomic_store(&svc->stopping, true);
        pthread_mutex_lock(&svc->mu);
        halt_all_locked(svc);
        /* Waiters leave once their coordinator ended (every thread has). */
        while (svc->threads > 0 || svc->waiters > 0) {
            pthread_cond_wait(&svc->changed, &svc->mu);
        }
        pthread_mutex_unlock(&svc->mu);
        pthread_cond_destroy(&svc->changed);
        pthread_mutex_destroy(&svc->mu);
        bson_free(svc);
    }
}

size_t
shl_coord_service_step_down(shl_coord_service_t *svc, int64_t wait_ms)
{
    struct timespec deadline;
    size_t n;

    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += wait_ms / 1000;
    deadline.tv_nsec += (wait_ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&svc->mu);
    n = halt_all_locked(svc);
    /* Those asked to stop leave the list as they end (one started since is not halted). */
    for (;;) {
        bool halted_left = false;
        for (shl_coord_t *c = svc->running; c != NULL; c = c->next) {
            halted_left = halted_left || atomic_load(&c->halted);
        }
        if (!halted_left || pthread_cond_timedwait(&svc->changed, &svc->mu, &deadline) != 0) {
            break;
        }
    }
    pthread_mutex_unlock(&svc->mu);
    return n;
}

int
shl_coord_service_recover(shl_coord_service_t *svc, const shl_coord_type_t *t, shl_status_t *st)
{
    shl_remote_target_t self = shl_remote_target_self();
    shl_remote_options_t opts = {.retry = SHL_REMOTE_RETRY_IDEMPOTENT, .backoff_ms = 100};
    bson_t *cmd = BCON_NEW("find", BCON_UTF8(t->coll), "batchSize", BCON_INT32(100000));
    bson_t reply;
    bson_iter_t it, batch;
    int ret;
    size_t n = 0;

    ret = shl_remote_run(svc->remote, &self, COORD_DB, cmd, &opts, &reply, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        ret = 0;
    }
    if (ret == 0 && bson_iter_init(&it, &reply) &&
        bson_iter_find_descendant(&it, "cursor.firstBatch", &batch) &&
        BSON_ITER_HOLDS_ARRAY(&batch) && bson_iter_recurse(&batch, &it)) {
        pthread_mutex_lock(&svc->mu);
        while (bson_iter_next(&it)) {
            bson_t doc, id;
            const uint8_t *data;
            uint32_t len;
            int phase;
            shl_coord_t probe = {.t = t};

            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
                continue;
            }
            bson_iter_document(&it, &len, &data);
            bson_init_static(&doc, data, len);
            if (t->owns != NULL && !t->owns(&doc)) {
                continue;
            }
            phase = t->resume_phase ? t->resume_phase(&doc) : resume_phase_default(&probe, &doc);
            id_of(&doc, &id);
            if (phase < 0 || find_locked(svc, t, &id) != NULL) {
                SHL_LOG_WARNING(SHARDING, 4170006, "cannot resume a coordinator document",
                                "type", BCON_UTF8(t->name));
            } else {
                start_locked(svc, t, &doc, (size_t)phase, true, false);
                n++;
            }
            bson_destroy(&id);
        }
        pthread_mutex_unlock(&svc->mu);
    }
    if (n > 0) {
        SHL_LOG_INFO(SHARDING, 4170007, "resumed coordinators", "type", BCON_UTF8(t->name),
                     "count", BCON_INT64((int64_t)n));
    }
    bson_destroy(&reply);
    bson_destroy(cmd);
    return ret;
}

int
shl_coord_run(shl_coord_service_t *svc, const shl_coord_type_t *t, const bson_t *doc,
              int64_t wait_ms, bson_t *result, shl_status_t *st)
{
    bson_t id;
    shl_coord_t *c;
    int ret = 0;

    id_of(doc, &id);
    pthread_mutex_lock(&svc->mu);
    if (atomic_load(&svc->stopping)) {
        bson_init(result);
        ret = shl_status_set(st, SHL_CODE_INTERRUPTED_AT_SHUTDOWN, "shutting down");
    } else if ((c = find_locked(svc, t, &id)) != NULL) {
        if (t->same ? t->same(&c->doc, doc) : same_default(&c->doc, doc)) {
            c->refs++;
            ret = wait_locked(svc, c, wait_ms, result, st);
        } else {
            bson_init(result);
            ret = shl_status_set(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                                 "another %s with the same key is running, with different "
                                 "arguments",
                                 t->name);
        }
    } else {
        /* A type that answers before its end runs up to the answer on this thread (no thread
         * start nor wake-up on the way to the answer); the rest continues on a thread. */
        bool inline_caller = t->answers_after != NULL || t->answers_after_now != NULL;
        c = start_locked(svc, t, doc, 0, false, inline_caller);
        c->refs++;
        if (inline_caller) {
            pthread_mutex_unlock(&svc->mu);
            coord_execute(c, true);
            pthread_mutex_lock(&svc->mu);
        }
        ret = wait_locked(svc, c, wait_ms, result, st);
    }
    pthread_mutex_unlock(&svc->mu);
    bson_destroy(&id);
    return ret;
}

int
shl_coord_start(shl_coord_service_t *svc, const shl_coord_type_t *t, const bson_t *doc,
                shl_status_t *st)
{
    bson_t id;
    int ret = 0;

    id_of(doc, &id);
    pthread_mutex_lock(&svc->mu);
    if (atomic_load(&svc->stopping)) {
        ret = shl_status_set(st, SHL_CODE_INTERRUPTED_AT_SHUTDOWN, "shutting down");
    } else if (find_locked(svc, t, &id) != NULL) {
        ret = shl_status_set(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                             "another %s with the same key is running", t->name);
    } else {
        start_locked(svc, t, doc, 0, false, false);
    }
    pthread_mutex_unlock(&svc->mu);
    bson_destroy(&id);
    return ret;
}

int
shl_coord_join(shl_coord_service_t *svc, const shl_coord_type_t *t, const bson_t *id_doc,
               int64_t wait_ms, bson_t *result, shl_status_t *st)
{
    shl_coord_t *c;
    int ret;

    pthread_mutex_lock(&svc->mu);
    if ((c = find_locked(svc, t, id_doc)) != NULL) {
        c->refs++;
        ret = wait_locked(svc, c, wait_ms, result, st);
    } else {
        bson_init(result);
        ret = shl_status_set(st, SHL_CODE_NO_SUCH_KEY, "no %s is running for this key", t->name);
    }
    pthread_mutex_unlock(&svc->mu);
    return ret;
}

void
shl_coord_service_report(shl_coord_service_t *svc, bson_t *inprog, uint32_t *n)
{
    pthread_mutex_lock(&svc->mu);
    for (shl_coord_t *c = svc->running; c != NULL; c = c->next) {
        char key[16];
        bson_t op;
        bson_iter_t it;

        snprintf(key, sizeof key, "%u", (*n)++);
        BSON_APPEND_DOCUMENT_BEGIN(inprog, key, &op);
        BSON_APPEND_UTF8(&op, "type", "op");
        BSON_APPEND_UTF8(&op, "desc", c->t->name);
        BSON_APPEND_BOOL(&op, "active", true);
        BSON_APPEND_UTF8(&op, "op", "command");
        BSON_APPEND_UTF8(&op, "currentPhase", c->t->phases[c->phase].name);
        BSON_APPEND_BOOL(&op, "resumed", c->resumed);
        if (c->holding && c->t->report_held != NULL) {
            c->t->report_held(&c->doc, &op);
        }
        if (bson_iter_init_find(&it, &c->id, "_id")) {
            bson_append_iter(&op, "_id", 3, &it);
        }
        bson_append_document_end(inprog, &op);
    }
    pthread_mutex_unlock(&svc->mu);
}

const shl_remote_t *
shl_coord_service_remote(const shl_coord_service_t *svc)
{
    return svc->remote;
}

size_t
shl_coord_service_count(shl_coord_service_t *svc)
{
    size_t n = 0;

    pthread_mutex_lock(&svc->mu);
    for (shl_coord_t *c = svc->running; c != NULL; c = c->next) {
        n++;
    }
    pthread_mutex_unlock(&svc->mu);
    return n;
}

size_t
shl_coord_service_count_coll(shl_coord_service_t *svc, const char *coll)
{
    size_t n = 0;

    pthread_mutex_lock(&svc->mu);
    for (shl_coord_t *c = svc->running; c != NULL; c = c->next) {
        n += strcmp(c->t->coll, coll) == 0;
    }
    pthread_mutex_unlock(&svc->mu);
    return n;
}

const bson_t *
shl_coord_doc(const shl_coord_t *c)
{
    return &c->doc;
}

void
shl_coord_doc_set(shl_coord_t *c, const bson_t *doc)
{
    bson_t copy;

    bson_copy_to(doc, &copy);
    pthread_mutex_lock(&c->svc->mu);
    bson_destroy(&c->doc);
    bson_steal(&c->doc, &copy);
    pthread_mutex_unlock(&c->svc->mu);
}

void
shl_coord_set_result(shl_coord_t *c, const bson_t *res)
{
    pthread_mutex_lock(&c->svc->mu);
    bson_reinit(&c->result);
    bson_concat(&c->result, res);
    pthread_mutex_unlock(&c->svc->mu);
}

int
shl_coord_persist(shl_coord_t *c, shl_status_t *st)
{
    int ret = doc_write(c, c->persisted ? 1 : 0, true, st);

    if (ret == 0) {
        c->persisted = true;
        c->unflushed = false;
    }
    return ret;
}

bool
shl_coord_doc_unflushed(const shl_coord_t *c)
{
    return c->unflushed;
}

const shl_remote_t *
shl_coord_remote(const shl_coord_t *c)
{
    return c->svc->remote;
}

void
shl_coord_finish(shl_coord_t *c)
{
    c->finished = true;
}

void
shl_coord_abort(shl_coord_t *c)
{
    c->aborting = true;
}

void *
shl_coord_type_arg(const shl_coord_t *c)
{
    return c->t->arg;
}

bool
shl_coord_interrupted(const shl_coord_t *c)
{
    return atomic_load(&c->halted);
}

int
shl_coord_check_halted(const shl_coord_t *c, shl_status_t *st)
{
    return atomic_load(&c->halted) ? halted_status(c, st) : 0;
}

bool
shl_coord_resumed(const shl_coord_t *c)
{
    return c->resumed;
}
