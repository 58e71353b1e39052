/*
 * read_concern_wait.c -- see read_concern_wait.h. The committed time of a node is storage's
 * no-holes point (shl_storage_all_durable), which follows the clock when nothing is in
 * flight; docs/design/causal_consistency.md says why that stands in for MongoDB's no-op write.
 */
#include "db/read_concern_wait.h"

#include <inttypes.h>

#include "base/clock.h"
#include "db/db_private.h"

/* MongoDB's periodicNoopIntervalSecs default: an idle primary writes a no-op this often. */
#define PERIODIC_NOOP_INTERVAL_MS 10000

/* Polling: 1 ms at first (a write in flight usually commits within it), up to 10 ms. */
#define POLL_FIRST_MS 1
#define POLL_MAX_MS 10

static void
poll_sleep(int *ms)
{
    shl_sleep_ms(*ms);
    if (*ms < POLL_MAX_MS) {
        *ms *= 2;
        if (*ms > POLL_MAX_MS) {
            *ms = POLL_MAX_MS;
        }
    }
}

int
db_rc_wait_committed(shl_op_ctx_t *op, uint64_t ts, shl_status_t *st)
{
    int ret = 0;
    int ms = POLL_FIRST_MS;
    db_node_t *node = db_node(op);

    shl_storage_clock_advance(node->eng, ts);
    while (shl_storage_all_durable(node->eng) < ts) {
        SHL_ERR(shl_op_check_interrupt(op, st));
        poll_sleep(&ms);
    }
done:
    return ret;
}

int
db_rc_wait_majority(shl_op_ctx_t *op, const shl_read_concern_t *rc, uint64_t ts,
                    uint64_t *read_ts, shl_status_t *st)
{
    int ret = 0;
    int ms = POLL_FIRST_MS;
    const db_node_t *node = db_node(op);

    *read_ts = db_read_timestamp(node, rc);
    while (*read_ts < ts) {
        SHL_ERR(shl_op_check_interrupt(op, st));
        poll_sleep(&ms);
        *read_ts = db_read_timestamp(node, rc);
    }
done:
    return ret;
}

void
db_rc_note_applied(shl_op_ctx_t *op, uint64_t ts)
{
    db_node_t *node = db_node(op);
    uint64_t cur = atomic_load(&node->last_applied);

    while (cur < ts && !atomic_compare_exchange_weak(&node->last_applied, &cur, ts)) {
    }
}

/* Whether this node's cluster role has MongoDB write a no-op for afterClusterTime. */
static bool
writes_noop(const shl_op_ctx_t *op)
{
    return op->svc->role == SHL_ROLE_SHARDSVR || op->svc->role == SHL_ROLE_CONFIGSVR;
}

uint64_t
db_rc_read_op_time(shl_op_ctx_t *op)
{
    db_node_t *node = db_node(op);
    uint64_t committed = shl_storage_all_durable(node->eng);
    uint64_t applied;

    if (writes_noop(op)) {
        return committed;
    }
    applied = atomic_load(&node->last_applied);
    return applied < committed ? applied : committed;
}

/* A plain replica set member writes no no-op for the read: wait for a write at or after 'ts',
 * or for as long as its periodic no-op writer would take to write one. */
static int
wait_applied(shl_op_ctx_t *op, uint64_t ts, shl_status_t *st)
{
    int ret = 0;
    int ms = POLL_FIRST_MS;
    db_node_t *node = db_node(op);
    int64_t noop_at = shl_clock_mono_us() + (int64_t)PERIODIC_NOOP_INTERVAL_MS * 1000;

    while (atomic_load(&node->last_applied) < ts && shl_clock_mono_us() < noop_at) {
        SHL_ERR(shl_op_check_interrupt(op, st));
        poll_sleep(&ms);
    }
done:
    return ret;
}

int
db_rc_wait_after_cluster_time(shl_op_ctx_t *op, uint64_t ts, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    uint64_t now = shl_storage_clock_now(node->eng);

    if (ts > now) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "readConcern afterClusterTime value must not be greater than the current "
                 "clusterTime. Requested clusterTime: { ts: Timestamp(%" PRIu32 ", %" PRIu32
                 ") }; current clusterTime: { ts: Timestamp(%" PRIu32 ", %" PRIu32 ") }",
                 SHL_TS_SECS(ts), SHL_TS_INC(ts), SHL_TS_SECS(now), SHL_TS_INC(now));
    }
    if (!writes_noop(op)) {
        SHL_ERR(wait_applied(op, ts, st));
    }
    SHL_ERR(db_rc_wait_committed(op, ts, st));
done:
    return ret;
}
