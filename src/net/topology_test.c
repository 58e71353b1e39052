/*
 * topology_test.c -- the topologyVersion and the awaitable hello's wait (topology.h): when it
 * answers at once, when it waits, what ends the wait, and the errors.
 */
#include <pthread.h>
#include <string.h>

#include "base/clock.h"
#include "base/unit_test.h"
#include "net/topology.h"

static void
setup(shl_service_ctx_t *svc, shl_op_ctx_t *op)
{
    shl_service_ctx_init(svc, SHL_ROLE_ROUTER);
    memset(op, 0, sizeof(*op));
    op->svc = svc;
}

SHL_TEST(topology_version_starts_at_zero_with_a_process_id)
{
    shl_service_ctx_t svc;
    shl_op_ctx_t op;
    bson_t doc = BSON_INITIALIZER;
    bson_iter_t it;

    setup(&svc, &op);
    shl_topology_append(&svc, &doc, "topologyVersion");
    ASSERT(bson_iter_init_find(&it, &doc, "topologyVersion") && BSON_ITER_HOLDS_DOCUMENT(&it));
    ASSERT(bson_iter_init_find(&it, &doc, "topologyVersion.counter") == false);
    ASSERT(bson_iter_init(&it, &doc) &&
           bson_iter_find_descendant(&it, "topologyVersion.counter", &it));
    ASSERT(BSON_ITER_HOLDS_INT64(&it) && bson_iter_int64(&it) == 0);
    ASSERT(bson_iter_init(&it, &doc) &&
           bson_iter_find_descendant(&it, "topologyVersion.processId", &it));
    ASSERT(BSON_ITER_HOLDS_OID(&it) &&
           bson_oid_equal(bson_iter_oid(&it), &svc.topology.process_id));
    bson_destroy(&doc);
    shl_service_ctx_cleanup(&svc);
}

SHL_TEST(awaitable_hello_answers_at_once_or_fails)
{
    shl_service_ctx_t svc;
    shl_op_ctx_t op;
    shl_status_t st = SHL_STATUS_INIT;
    bson_oid_t other;
    int64_t t0;

    setup(&svc, &op);
    bson_oid_init(&other, NULL);
    t0 = shl_clock_mono_us();
    /* Another process's version: the client is behind, whatever its counter. */
    ASSERT_INT_EQ(shl_topology_await(&op, &other, 7, 10000, 51761, &st), 0);
    shl_topology_change(&svc, false);
    /* An older counter of ours. */
    ASSERT_INT_EQ(shl_topology_await(&op, &svc.topology.process_id, 0, 10000, 51761, &st), 0);
    ASSERT(shl_clock_mono_us() - t0 < 1000 * 1000);
    /* A counter of ours ahead of ours. */
    ASSERT_INT_EQ(shl_topology_await(&op, &svc.topology.process_id, 2, 10000, 51761, &st), 51761);
    ASSERT_INT_EQ(shl_topology_waiting(&svc), 0);
    shl_service_ctx_cleanup(&svc);
}

SHL_TEST(awaitable_hello_waits_max_await_time)
{
    shl_service_ctx_t svc;
    shl_op_ctx_t op;
    shl_status_t st = SHL_STATUS_INIT;
    int64_t t0;

    setup(&svc, &op);
    t0 = shl_clock_mono_us();
    ASSERT_INT_EQ(shl_topology_await(&op, &svc.topology.process_id, 0, 150, 31382, &st), 0);
    ASSERT(shl_clock_mono_us() - t0 >= 140 * 1000);
    ASSERT_INT_EQ(shl_topology_waiting(&svc), 0);
    shl_service_ctx_cleanup(&svc);
}

typedef struct waiter {
    shl_op_ctx_t op;
    int ret;
    shl_status_t st;
    int64_t took_us;
} waiter_t;

static void *
wait_main(void *arg)
{
    waiter_t *w = arg;
    int64_t t0 = shl_clock_mono_us();
    w->st = (shl_status_t)SHL_STATUS_INIT;
    w->ret = shl_topology_await(&w->op, &w->op.svc->topology.process_id, 0, 30000, 31382, &w->st);
    w->took_us = shl_clock_mono_us() - t0;
    return NULL;
}

/* Start a waiter and return once it waits. */
static void
start_waiter(shl_service_ctx_t *svc, waiter_t *w, pthread_t *t)
{
    memset(w, 0, sizeof(*w));
    w->op.svc = svc;
    pthread_create(t, NULL, wait_main, w);
    while (shl_topology_waiting(svc) == 0) {
        shl_sleep_ms(1);
    }
}

SHL_TEST(a_topology_change_or_quiesce_ends_the_wait)
{
    shl_service_ctx_t svc;
    shl_op_ctx_t op;
    shl_status_t st = SHL_STATUS_INIT;
    waiter_t w;
    pthread_t t;

    setup(&svc, &op);
    start_waiter(&svc, &w, &t);
    shl_topology_change(&svc, false);
    pthread_join(t, NULL);
    ASSERT_INT_EQ(w.ret, 0);
    ASSERT(w.took_us < 5 * 1000 * 1000);

    /* Quiesce mode: the waiting hello fails with ShutdownInProgress, so does a new one. */
    shl_topology_t *tp = &svc.topology;
    pthread_mutex_lock(&tp->mu);
    tp->counter = 0; /* let the next waiter wait again on counter 0 */
    pthread_mutex_unlock(&tp->mu);
    start_waiter(&svc, &w, &t);
    shl_topology_change(&svc, true);
    pthread_join(t, NULL);
    ASSERT_INT_EQ(w.ret, 91);
    ASSERT(shl_topology_quiescing(&svc));
    ASSERT_INT_EQ(shl_topology_await(&op, &svc.topology.process_id, 1, 1000, 31382, &st), 91);
    ASSERT_INT_EQ(shl_topology_waiting(&svc), 0);
    shl_service_ctx_cleanup(&svc);
}

SHL_TEST(a_killed_operation_stops_waiting)
{
    shl_service_ctx_t svc;
    waiter_t w;
    pthread_t t;
    shl_op_ctx_t op;

    setup(&svc, &op);
    start_waiter(&svc, &w, &t);
    atomic_store(&w.op.killed, true);
    pthread_join(t, NULL);
    ASSERT(w.ret != 0);
    ASSERT(w.took_us < 5 * 1000 * 1000);
    ASSERT_INT_EQ(shl_topology_waiting(&svc), 0);
    shl_service_ctx_cleanup(&svc);
}
