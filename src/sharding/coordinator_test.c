/*
 * coordinator_test.c -- the coordinator framework over the fake remote: phases in order with
 * checkpoints, cleanup, join-if-identical / ConflictingOperationInProgress, bounded retry,
 * resumption from a leftover document, currentOp entries. "self" is an in-memory store.
 */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "base/unit_test.h"
#include "sharding/coordinator.h"
#include "sharding/remote_fake.h"

/* ----------------------------------------------------------- a three-phase test type */

typedef struct trace {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char log[256];
    int fail_code[3];  /* next failures of each phase */
    int fail_times[3];
    bool hold;         /* phase "one" waits while set */
    bool hold_to_stop; /* phase "one" waits until the service is stopping */
    bool entered;      /* phase "one" was entered */
} trace_t;

static trace_t T;

static int
phase(shl_coord_t *c, int i, const char *name, shl_status_t *st)
{
    int ret = 0;
    (void)c;
    pthread_mutex_lock(&T.mu);
    strcat(T.log, name);
    strcat(T.log, " ");
    T.entered = true;
    pthread_cond_broadcast(&T.cv);
    while (i == 0 && T.hold) {
        pthread_cond_wait(&T.cv, &T.mu);
    }
    while (i == 0 && T.hold_to_stop && !shl_coord_interrupted(c)) {
        /* nothing signals the stop: look every millisecond */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 1000 * 1000;
        if (until.tv_nsec >= 1000 * 1000 * 1000) {
            until.tv_sec++;
            until.tv_nsec -= 1000 * 1000 * 1000;
        }
        pthread_cond_timedwait(&T.cv, &T.mu, &until);
    }
    if (T.fail_times[i] > 0) {
        T.fail_times[i]--;
        ret = shl_status_set(st, T.fail_code[i], "injected");
    }
    pthread_mutex_unlock(&T.mu);
    return ret;
}

static int
one(shl_coord_t *c, shl_status_t *st)
{
    return phase(c, 0, "one", st);
}

static int
two(shl_coord_t *c, shl_status_t *st)
{
    bson_t *d = BCON_NEW("_id", BCON_INT32(7), "x", BCON_INT32(2));
    int ret = phase(c, 1, "two", st);
    bson_t *res = BCON_NEW("x", BCON_INT32(2));

    (void)d;
    shl_coord_set_result(c, res);
    bson_destroy(res);
    bson_destroy(d);
    return ret;
}

static int
three(shl_coord_t *c, shl_status_t *st)
{
    return phase(c, 2, "three", st);
}

static const shl_coord_phase_t phases[] = {
    {"one", one, true},
    {"two", two, false},
    {"three", three, true},
};

static const shl_coord_type_t type = {
    .name = "TestCoordinator",
    .coll = "test_coordinators",
    .phases = phases,
    .nphases = 3,
    .max_attempts = 3,
    .backoff_ms = 1,
};

static void
reset(void)
{
    memset(&T, 0, sizeof T);
    pthread_mutex_init(&T.mu, NULL);
    pthread_cond_init(&T.cv, NULL);
}

typedef struct env {
    shl_remote_fake_t *fake;
    shl_remote_t remote;
    shl_coord_service_t *svc;
} env_t;

static void
env_init(env_t *e)
{
    reset();
    e->fake = shl_remote_fake_new();
    shl_remote_fake_store_self(e->fake);
    e->remote = shl_remote_fake_remote(e->fake);
    e->svc = shl_coord_service_new(&e->remote);
}

static void
env_cleanup(env_t *e)
{
    shl_coord_service_destroy(e->svc);
    shl_remote_fake_destroy(e->fake);
}

SHL_TEST(coordinator_runs_phases_checkpoints_and_cleans_up)
{
    env_t e;
    bson_t *doc = BCON_NEW("_id", BCON_INT32(7), "arg", BCON_UTF8("a"));
    bson_t res;
    shl_status_t st = SHL_STATUS_INIT;

    env_init(&e);
    ASSERT_INT_EQ(shl_coord_run(e.svc, &type, doc, 0, &res, &st), 0);
    ASSERT_STR_EQ(T.log, "one two three ");
    ASSERT_BSON_EQ(&res, "{'x': 2}");
    /* checkpoint before "one" inserts, before "three" replaces; the end deletes */
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "self", "insert"), 1);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "self", "update"), 1);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "self", "delete"), 1);
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, "test_coordinators"), 0);
    /* the writes are durable */
    {
        bson_t seen;
        ASSERT(shl_remote_fake_nth(e.fake, "self", "insert", 0, &seen));
        ASSERT_BSON_EQ(&seen, "{'insert': 'test_coordinators', 'documents': [{'_id': 7, "
                              "'arg': 'a', 'phase': 'one'}], 'writeConcern': {'w': 'majority', "
                              "'j': true}}");
        bson_destroy(&seen);
    }
    ASSERT_INT_EQ(shl_coord_service_count(e.svc), 0);
    bson_destroy(&res);
    bson_destroy(doc);
    env_cleanup(&e);
}

typedef struct bg {
    env_t *e;
    bson_t *doc;
    int ret;
    bson_t res;
    shl_status_t st;
    pthread_t tid;
} bg_t;

static void *
bg_run(void *arg)
{
    bg_t *b = arg;
    b->ret = shl_coord_run(b->e->svc, &type, b->doc, 0, &b->res, &b->st);
    return NULL;
}

SHL_TEST(coordinator_joins_identical_and_refuses_different)
{
    env_t e;
    bg_t a = {0}, b = {0};
    bson_t *other = BCON_NEW("_id", BCON_INT32(7), "arg", BCON_UTF8("different"));
    bson_t res, inprog = BSON_INITIALIZER;
    shl_status_t st = SHL_STATUS_INIT;
    uint32_t n = 0;

    env_init(&e);
    T.hold = true;
    a.e = b.e = &e;
    a.doc = b.doc = BCON_NEW("_id", BCON_INT32(7), "arg", BCON_UTF8("a"));
    pthread_create(&a.tid, NULL, bg_run, &a);
    pthread_mutex_lock(&T.mu);
    while (!T.entered) {
        pthread_cond_wait(&T.cv, &T.mu);
    }
    pthread_mutex_unlock(&T.mu);
    /* a different operation with the same _id */
    ASSERT_INT_EQ(shl_coord_run(e.svc, &type, other, 0, &res, &st), 117);
    bson_destroy(&res);
    /* currentOp sees it */
    shl_coord_service_report(e.svc, &inprog, &n);
    ASSERT_INT_EQ(n, 1);
    ASSERT_BSON_EQ(&inprog, "{'0': {'type': 'op', 'desc': 'TestCoordinator', 'active': true, "
                            "'op': 'command', 'currentPhase': 'one', 'resumed': false, "
                            "'_id': 7}}");
    /* the same one joins; wait until it is waiting is not observable, so just run it */
    pthread_create(&b.tid, NULL, bg_run, &b);
    /* a join with a short deadline times out while it runs */
    {
        bson_t *id = BCON_NEW("_id", BCON_INT32(7));
        ASSERT_INT_EQ(shl_coord_join(e.svc, &type, id, 20, &res, &st), 262);
        bson_destroy(&res);
        bson_destroy(id);
    }
    pthread_mutex_lock(&T.mu);
    T.hold = false;
    pthread_cond_broadcast(&T.cv);
    pthread_mutex_unlock(&T.mu);
    pthread_join(a.tid, NULL);
    pthread_join(b.tid, NULL);
    ASSERT_INT_EQ(a.ret, 0);
    ASSERT_INT_EQ(b.ret, 0);
    ASSERT_BSON_EQ(&a.res, "{'x': 2}");
    /* b either joined (one run) or came after the end (a second run): phases ran once for
     * a joiner; both outcomes give the result */
    ASSERT_BSON_EQ(&b.res, "{'x': 2}");
    ASSERT(strcmp(T.log, "one two three ") == 0 ||
           strcmp(T.log, "one two three one two three ") == 0);
    bson_destroy(&a.res);
    bson_destroy(&b.res);
    bson_destroy(&inprog);
    bson_destroy(a.doc);
    bson_destroy(other);
    env_cleanup(&e);
}

SHL_TEST(coordinator_retries_retryable_errors_bounded)
{
    env_t e;
    bson_t *doc = BCON_NEW("_id", BCON_INT32(8));
    bson_t res;
    shl_status_t st = SHL_STATUS_INIT;

    env_init(&e);
    T.fail_code[1] = SHL_CODE_HOST_UNREACHABLE;
    T.fail_times[1] = 2;
    ASSERT_INT_EQ(shl_coord_run(e.svc, &type, doc, 0, &res, &st), 0);
    ASSERT_STR_EQ(T.log, "one two two two three ");
    bson_destroy(&res);
    /* three attempts at most: the error ends it and the document stays for recovery */
    reset();
    T.fail_code[1] = SHL_CODE_HOST_UNREACHABLE;
    T.fail_times[1] = 5;
    ASSERT_INT_EQ(shl_coord_run(e.svc, &type, doc, 0, &res, &st), SHL_CODE_HOST_UNREACHABLE);
    ASSERT_STR_EQ(T.log, "one two two two ");
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, "test_coordinators"), 1);
    bson_destroy(&res);
    /* a non-retryable error is not retried */
    reset();
    T.fail_code[2] = SHL_CODE_BAD_VALUE;
    T.fail_times[2] = 1;
    {
        bson_t *doc9 = BCON_NEW("_id", BCON_INT32(9));
        ASSERT_INT_EQ(shl_coord_run(e.svc, &type, doc9, 0, &res, &st), SHL_CODE_BAD_VALUE);
        bson_destroy(doc9);
    }
    ASSERT_STR_EQ(T.log, "one two three ");
    bson_destroy(&res);
    bson_destroy(doc);
    env_cleanup(&e);
}

SHL_TEST(coordinator_resumes_leftover_documents)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t res;

    env_init(&e);
    {
        bson_t *d1 = BCON_NEW("_id", BCON_INT32(1), "phase", BCON_UTF8("three"));
        bson_t *d2 = BCON_NEW("_id", BCON_INT32(2), "phase", BCON_UTF8("bogus"));
        shl_remote_fake_store_insert(e.fake, "test_coordinators", d1);
        shl_remote_fake_store_insert(e.fake, "test_coordinators", d2);
        bson_destroy(d1);
        bson_destroy(d2);
    }
    ASSERT_INT_EQ(shl_coord_service_recover(e.svc, &type, &st), 0);
    {
        bson_t *id = BCON_NEW("_id", BCON_INT32(1));
        int ret = shl_coord_join(e.svc, &type, id, 0, &res, &st);
        /* it may have finished before the join */
        ASSERT(ret == 0 || ret == SHL_CODE_NO_SUCH_KEY);
        bson_destroy(&res);
        bson_destroy(id);
    }
    while (shl_coord_service_count(e.svc) > 0) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    /* only phase "three" ran; its document is gone; the unreadable one stays */
    ASSERT_STR_EQ(T.log, "three ");
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, "test_coordinators"), 1);
    env_cleanup(&e);
}

static void *
destroy_bg(void *svc)
{
    shl_coord_service_destroy(svc);
    return NULL;
}

/*
 * Run coordinator {_id: 5} in the background held in phase "one" until it is stopped (then
 * the phase fails retryably); stop(stop_arg) runs on a thread of its own (it waits for the
 * phase); returns once both ended (a->ret: the coordinator's).
 */
static void
run_held_then_stop(env_t *e, bg_t *a, void *(*stop)(void *), void *stop_arg)
{
    pthread_t d;

    T.hold_to_stop = true;
    a->e = e;
    a->doc = BCON_NEW("_id", BCON_INT32(5));
    pthread_create(&a->tid, NULL, bg_run, a);
    pthread_mutex_lock(&T.mu);
    while (!T.entered) {
        pthread_cond_wait(&T.cv, &T.mu);
    }
    /* a stopped coordinator does not retry it */
    T.fail_code[0] = SHL_CODE_HOST_UNREACHABLE;
    T.fail_times[0] = 100;
    pthread_mutex_unlock(&T.mu);
    /* The phase ends once it sees the stop (a fixed pause let it fail before the stop under
     * load, and be retried). */
    pthread_create(&d, NULL, stop, stop_arg);
    pthread_join(d, NULL);
    pthread_join(a->tid, NULL);
    pthread_mutex_lock(&T.mu);
    T.hold_to_stop = false;
    pthread_mutex_unlock(&T.mu);
}

SHL_TEST(coordinator_shutdown_ends_waiters_and_keeps_documents)
{
    env_t e;
    bg_t a = {0};

    env_init(&e);
    run_held_then_stop(&e, &a, destroy_bg, e.svc);
    ASSERT_INT_EQ(a.ret, SHL_CODE_INTERRUPTED_AT_SHUTDOWN);
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, "test_coordinators"), 1);
    bson_destroy(&a.res);
    bson_destroy(a.doc);
    shl_remote_fake_destroy(e.fake);
}

typedef struct step_down_bg {
    shl_coord_service_t *svc;
    size_t n;
} step_down_bg_t;

static void *
step_down_bg(void *arg)
{
    step_down_bg_t *s = arg;
    s->n = shl_coord_service_step_down(s->svc, 5000);
    return NULL;
}

SHL_TEST(coordinator_step_down_interrupts_and_keeps_documents)
{
    env_t e;
    bg_t a = {0};
    step_down_bg_t sd = {0};
    bson_t *later = BCON_NEW("_id", BCON_INT32(6));
    bson_t res;
    shl_status_t st = SHL_STATUS_INIT;

    env_init(&e);
    sd.svc = e.svc;
    run_held_then_stop(&e, &a, step_down_bg, &sd);
    ASSERT_INT_EQ((int)sd.n, 1);
    ASSERT_INT_EQ(a.ret, SHL_CODE_INTERRUPTED_DUE_TO_REPL_STATE_CHANGE);
    ASSERT_INT_EQ((int)shl_coord_service_count(e.svc), 0);
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, "test_coordinators"), 1);
    /* one started after the step-down runs (a re-elected member's) */
    pthread_mutex_lock(&T.mu);
    T.fail_times[0] = 0;
    T.log[0] = '\0';
    pthread_mutex_unlock(&T.mu);
    ASSERT_INT_EQ(shl_coord_run(e.svc, &type, later, 0, &res, &st), 0);
    ASSERT_STR_EQ(T.log, "one two three ");
    bson_destroy(&res);
    bson_destroy(&a.res);
    bson_destroy(a.doc);
    bson_destroy(later);
    env_cleanup(&e);
}

/* ------------------------------------------- early finish and abort-on-error phases */

static int
ab_one(shl_coord_t *c, shl_status_t *st)
{
    bson_iter_t it;
    int ret = phase(c, 0, "one", st);

    if (ret == 0 && bson_iter_init_find(&it, shl_coord_doc(c), "finish")) {
        shl_coord_finish(c);
    }
    return ret;
}

/* "two" gives up cleanly on a non-retryable error. */
static int
ab_two(shl_coord_t *c, shl_status_t *st)
{
    int ret = two(c, st);

    if (ret == SHL_CODE_INVALID_OPTIONS) {
        shl_coord_abort(c);
    }
    return ret;
}

static const shl_coord_phase_t ab_phases[] = {
    {"one", ab_one, true},
    {"two", ab_two, true},
    {"three", three, true},
};

static const shl_coord_type_t ab_type = {
    .name = "AbortableCoordinator",
    .coll = "test_coordinators",
    .phases = ab_phases,
    .nphases = 3,
    .max_attempts = 3,
    .backoff_ms = 1,
};

SHL_TEST(coordinator_finish_skips_later_phases_and_abort_deletes_document)
{
    env_t e;
    bson_t *fin = BCON_NEW("_id", BCON_INT32(10), "finish", BCON_BOOL(true));
    bson_t *doc = BCON_NEW("_id", BCON_INT32(11));
    bson_t res;
    shl_status_t st = SHL_STATUS_INIT;

    env_init(&e);
    ASSERT_INT_EQ(shl_coord_run(e.svc, &ab_type, fin, 0, &res, &st), 0);
    ASSERT_STR_EQ(T.log, "one ");
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, "test_coordinators"), 0);
    bson_destroy(&res);
    /* a non-retryable error after shl_coord_abort: cleanly not done, no document */
    reset();
    T.fail_code[1] = SHL_CODE_INVALID_OPTIONS;
    T.fail_times[1] = 1;
    ASSERT_INT_EQ(shl_coord_run(e.svc, &ab_type, doc, 0, &res, &st), SHL_CODE_INVALID_OPTIONS);
    ASSERT_STR_EQ(T.log, "one two ");
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, "test_coordinators"), 0);
    bson_destroy(&res);
    /* a retryable one past the bound still leaves the document for the next start */
    reset();
    T.fail_code[1] = SHL_CODE_HOST_UNREACHABLE;
    T.fail_times[1] = 5;
    ASSERT_INT_EQ(shl_coord_run(e.svc, &ab_type, doc, 0, &res, &st), SHL_CODE_HOST_UNREACHABLE);
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, "test_coordinators"), 1);
    bson_destroy(&res);
    bson_destroy(doc);
    bson_destroy(fin);
    env_cleanup(&e);
}

/* ------------------------------------------ shl_coord_start, release without acquire */

static int released;

static int
derived_resume(const bson_t *doc)
{
    (void)doc;
    return 2;
}

static void
count_release(shl_coord_t *c)
{
    (void)c;
    pthread_mutex_lock(&T.mu);
    released++;
    pthread_cond_broadcast(&T.cv);
    pthread_mutex_unlock(&T.mu);
}

static const shl_coord_type_t started_type = {
    .name = "StartedCoordinator",
    .coll = "test_coordinators",
    .phases = phases,
    .nphases = 3,
    .resume_phase = derived_resume,
    .release = count_release,
    .max_attempts = 3,
    .backoff_ms = 1,
};

SHL_TEST(coordinator_start_returns_at_once_and_releases)
{
    env_t e;
    bson_t *doc = BCON_NEW("_id", BCON_INT32(9));
    shl_status_t st = SHL_STATUS_INIT;

    env_init(&e);
    released = 0;
    T.hold = true;
    ASSERT_INT_EQ(shl_coord_start(e.svc, &started_type, doc, &st), 0);
    /* the same _id again while it runs: 117, even when identical */
    ASSERT_INT_EQ(shl_coord_start(e.svc, &started_type, doc, &st),
                  SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS);
    pthread_mutex_lock(&T.mu);
    while (!T.entered) {
        pthread_cond_wait(&T.cv, &T.mu);
    }
    T.hold = false;
    pthread_cond_broadcast(&T.cv);
    while (released == 0) {
        pthread_cond_wait(&T.cv, &T.mu);
    }
    pthread_mutex_unlock(&T.mu);
    ASSERT_STR_EQ(T.log, "one two three ");
    /* a type resumed by resume_phase has no "phase" field */
    {
        bson_t seen;
        ASSERT(shl_remote_fake_nth(e.fake, "self", "insert", 0, &seen));
        ASSERT_BSON_EQ(&seen, "{'insert': 'test_coordinators', 'documents': [{'_id': 9}], "
                              "'writeConcern': {'w': 'majority', 'j': true}}");
        bson_destroy(&seen);
    }
    /* 'release' runs without an 'acquire' */
    ASSERT_INT_EQ(released, 1);
    bson_destroy(doc);
    env_cleanup(&e);
}
