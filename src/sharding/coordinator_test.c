/*
 * coordinator_test.c -- the coordinator framework over the fake remote: phases in order with
 * checkpoints, cleanup, join-if-identical / ConflictingOperationInProgress, bounded retry,
 * resumption from a leftover document, currentOp entries. "self" is an in-memory store.
 */
#include <pthread.h>
#include <string.h>

#include "base/unit_test.h"
#include "sharding/coordinator.h"
#include "sharding/remote_fake.h"

/* ------------------------------------------------ an in-memory config collection on self */

typedef struct store {
    pthread_mutex_t mu;
    bson_t *docs[16];
    size_t n;
    int writes[3]; /* inserts, updates, deletes */
} store_t;

static int
store_find(store_t *s, const bson_iter_t *id)
{
    for (size_t i = 0; i < s->n; i++) {
        bson_iter_t it;
        if (bson_iter_init_find(&it, s->docs[i], "_id")) {
            bson_t a = BSON_INITIALIZER, b = BSON_INITIALIZER;
            bool eq;
            bson_append_iter(&a, "_id", 3, &it);
            bson_append_iter(&b, "_id", 3, id);
            eq = bson_equal(&a, &b);
            bson_destroy(&a);
            bson_destroy(&b);
            if (eq) {
                return (int)i;
            }
        }
    }
    return -1;
}

static bool
store_handler(void *arg, const shl_remote_request_t *req, bson_t *reply)
{
    store_t *s = arg;
    bson_iter_t it, stmt, id;
    bool handled = req->target.kind == SHL_REMOTE_SELF;

    if (!handled) {
        return false;
    }
    bson_init(reply);
    pthread_mutex_lock(&s->mu);
    bson_iter_init(&it, req->cmd);
    bson_iter_next(&it);
    if (strcmp(bson_iter_key(&it), "insert") == 0) {
        bson_iter_init_find(&it, req->cmd, "documents");
        bson_iter_recurse(&it, &stmt);
        while (bson_iter_next(&stmt)) {
            const uint8_t *d;
            uint32_t l;
            bson_iter_document(&stmt, &l, &d);
            s->docs[s->n++] = bson_new_from_data(d, l);
        }
        s->writes[0]++;
    } else if (strcmp(bson_iter_key(&it), "update") == 0 ||
               strcmp(bson_iter_key(&it), "delete") == 0) {
        bool upd = strcmp(bson_iter_key(&it), "update") == 0;
        int i;
        bson_iter_init(&it, req->cmd);
        bson_iter_find_descendant(&it, upd ? "updates.0.q._id" : "deletes.0.q._id", &id);
        i = store_find(s, &id);
        if (i >= 0) {
            bson_destroy(s->docs[i]);
            if (upd) {
                const uint8_t *d;
                uint32_t l;
                bson_iter_init(&it, req->cmd);
                bson_iter_find_descendant(&it, "updates.0.u", &stmt);
                bson_iter_document(&stmt, &l, &d);
                s->docs[i] = bson_new_from_data(d, l);
            } else {
                s->docs[i] = s->docs[--s->n];
            }
        }
        s->writes[upd ? 1 : 2]++;
    } else if (strcmp(bson_iter_key(&it), "find") == 0) {
        bson_t cur, arr;
        char key[8];
        BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
        BSON_APPEND_ARRAY_BEGIN(&cur, "firstBatch", &arr);
        for (size_t i = 0; i < s->n; i++) {
            snprintf(key, sizeof key, "%zu", i);
            BSON_APPEND_DOCUMENT(&arr, key, s->docs[i]);
        }
        bson_append_array_end(&cur, &arr);
        BSON_APPEND_INT64(&cur, "id", 0);
        bson_append_document_end(reply, &cur);
    }
    BSON_APPEND_DOUBLE(reply, "ok", 1);
    pthread_mutex_unlock(&s->mu);
    return true;
}

static void
store_init(store_t *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
}

static void
store_cleanup(store_t *s)
{
    for (size_t i = 0; i < s->n; i++) {
        bson_destroy(s->docs[i]);
    }
    pthread_mutex_destroy(&s->mu);
}

/* ----------------------------------------------------------- a three-phase test type */

typedef struct trace {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char log[256];
    int fail_code[3];  /* next failures of each phase */
    int fail_times[3];
    bool hold;         /* phase "one" waits while set */
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
    store_t store;
    shl_remote_fake_t *fake;
    shl_remote_t remote;
    shl_coord_service_t *svc;
} env_t;

static void
env_init(env_t *e)
{
    reset();
    store_init(&e->store);
    e->fake = shl_remote_fake_new();
    shl_remote_fake_set_handler(e->fake, store_handler, &e->store);
    e->remote = shl_remote_fake_remote(e->fake);
    e->svc = shl_coord_service_new(&e->remote);
}

static void
env_cleanup(env_t *e)
{
    shl_coord_service_destroy(e->svc);
    shl_remote_fake_destroy(e->fake);
    store_cleanup(&e->store);
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
    ASSERT_INT_EQ(e.store.writes[0], 1);
    ASSERT_INT_EQ(e.store.writes[1], 1);
    ASSERT_INT_EQ(e.store.writes[2], 1);
    ASSERT_INT_EQ(e.store.n, 0);
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
    ASSERT_INT_EQ(e.store.n, 1);
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
    e.store.docs[e.store.n++] = BCON_NEW("_id", BCON_INT32(1), "phase", BCON_UTF8("three"));
    e.store.docs[e.store.n++] = BCON_NEW("_id", BCON_INT32(2), "phase", BCON_UTF8("bogus"));
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
    ASSERT_INT_EQ(e.store.n, 1);
    env_cleanup(&e);
}
