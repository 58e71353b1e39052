/*
 * topology.c -- the TopologyVersion and the awaitable hello's wait (topology.h). The
 * wait sleeps on one condition variable per process, broadcast when the counter moves;
 * it wakes in slices to notice killOp and maxTimeMS, which do not signal it.
 */
#include "net/topology.h"

#include "base/clock.h"
#include "base/log.h"

/* How often a waiting hello looks at its kill flag and maxTimeMS. */
#define AWAIT_SLICE_MS 200

static const char quiesce_msg[] = "The router is in quiesce mode and will shut down";

void
shl_topology_append(shl_service_ctx_t *svc, bson_t *doc, const char *key)
{
    shl_topology_t *t = &svc->topology;
    bson_t sub;
    int64_t counter;

    pthread_mutex_lock(&t->mu);
    counter = t->counter;
    pthread_mutex_unlock(&t->mu);
    bson_append_document_begin(doc, key, -1, &sub);
    BSON_APPEND_OID(&sub, "processId", &t->process_id);
    BSON_APPEND_INT64(&sub, "counter", counter);
    bson_append_document_end(doc, &sub);
}

void
shl_topology_change(shl_service_ctx_t *svc, bool quiesce)
{
    shl_topology_t *t = &svc->topology;
    int64_t counter;

    pthread_mutex_lock(&t->mu);
    t->counter++;
    counter = t->counter;
    if (quiesce) {
        atomic_store(&t->quiescing, true);
    }
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->mu);
    SHL_LOG_INFO(NETWORK, 4695710, "topology version changed", "counter", BCON_INT64(counter),
                 "quiesce", BCON_BOOL(quiesce));
}

bool
shl_topology_quiescing(const shl_service_ctx_t *svc)
{
    return atomic_load(&svc->topology.quiescing);
}

int32_t
shl_topology_waiting(shl_service_ctx_t *svc)
{
    int32_t n;
    pthread_mutex_lock(&svc->topology.mu);
    n = svc->topology.waiting;
    pthread_mutex_unlock(&svc->topology.mu);
    return n;
}

int
shl_topology_await(shl_op_ctx_t *op, const bson_oid_t *process_id, int64_t counter,
                   int64_t max_await_ms, int newer_code, shl_status_t *st)
{
    shl_service_ctx_t *svc = op->svc;
    shl_topology_t *t = &svc->topology;
    int64_t end_us = shl_clock_mono_us() + max_await_ms * 1000;
    bool locked = true, counted = false;
    int ret = 0;

    pthread_mutex_lock(&t->mu);
    if (atomic_load(&t->quiescing)) {
        SHL_FAIL(st, SHL_CODE_SHUTDOWN_IN_PROGRESS, "%s", quiesce_msg);
    }
    /* Another process's version, or an older one of ours: the client is behind. */
    if (!bson_oid_equal(process_id, &t->process_id) || counter < t->counter) {
        goto done;
    }
    if (counter > t->counter) {
        SHL_FAIL(st, newer_code,
                 "Received a topology version with counter %lld, ahead of this process's "
                 "topology version counter %lld",
                 (long long)counter, (long long)t->counter);
    }
    t->waiting++;
    counted = true;
    /* A hello waiting for a change is an idle connection, not an active one: it shows in
     * awaitingTopologyChanges (drivers' monitors keep one waiting per server). */
    if (op->conn != NULL) {
        atomic_fetch_sub(&svc->counters.conn_active, 1);
    }
    while (t->counter == counter && !atomic_load(&t->quiescing) &&
           !atomic_load(&svc->shutting_down)) {
        int64_t left_us = end_us - shl_clock_mono_us();
        if (left_us <= 0) {
            break;
        }
        if (atomic_load(&op->killed) ||
            (op->deadline_us != 0 && shl_clock_mono_us() >= op->deadline_us)) {
            pthread_mutex_unlock(&t->mu);
            locked = false;
            SHL_ERR(shl_op_check_interrupt(op, st));
            pthread_mutex_lock(&t->mu);
            locked = true;
        }
        int64_t slice_ms = (left_us + 999) / 1000;
        shl_cond_timedwait_ms(&t->changed, &t->mu,
                              slice_ms < AWAIT_SLICE_MS ? slice_ms : AWAIT_SLICE_MS);
    }
    /* Quiesce mode began while this hello waited: it answers with the error at once. */
    if (atomic_load(&t->quiescing)) {
        SHL_FAIL(st, SHL_CODE_SHUTDOWN_IN_PROGRESS, "%s", quiesce_msg);
    }
done:
    if (!locked) {
        pthread_mutex_lock(&t->mu);
    }
    if (counted) {
        t->waiting--;
        if (op->conn != NULL) {
            atomic_fetch_add(&svc->counters.conn_active, 1);
        }
    }
    pthread_mutex_unlock(&t->mu);
    return ret;
}
