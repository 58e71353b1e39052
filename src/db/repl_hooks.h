/*
 * repl_hooks.h -- the seam between the data node (src/db) and replication (src/repl), which
 * db must not call: repl installs these at start-up when the node belongs to a
 * multi-member replica set (docs/design/replication.md). Without them (standalone, a set of
 * one) the node behaves as before: w > 1 is unsatisfiable, w: "majority" means this node's
 * journal, readConcern "majority" reads at the no-holes point, background writers run.
 */
#ifndef SHL_DB_REPL_HOOKS_H
#define SHL_DB_REPL_HOOKS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "net/op_context.h"
#include "net/service_context.h"
#include "net/write_concern.h"

/*
 * Step-up / step-down work of the layers above (shard, config; MongoDB's
 * ReplicaSetAwareService): 'step_up' runs each time this member becomes PRIMARY, 'step_down'
 * each time it stops being PRIMARY, on one thread of repl's (never under a repl lock;
 * listeners in the order they were added), shortly after the change (by then the member
 * already accepts, or refuses, writes). A callback may block; the next change waits for it.
 */
typedef struct shl_db_repl_listener {
    void (*step_up)(void *arg);
    void (*step_down)(void *arg);
    void *arg;
} shl_db_repl_listener_t;

typedef struct shl_db_repl_hooks {
    void *arg;
    /*
     * Wait until the write at 'ts' (this node's oplog) satisfies 'wc' (w: n members,
     * "majority" the commit point), within wtimeout and the op's deadline. Returns 0 or
     * the write concern error to report in writeConcernError (WriteConcernTimeout with
     * extra {wtimeout: true}, UnknownReplWriteConcern, UnsatisfiableWriteConcern,
     * interruption). Blocks; takes repl's own lock only.
     */
    int (*wait_write_concern)(void *arg, shl_op_ctx_t *op, const shl_write_concern_t *wc,
                              uint64_t ts, shl_status_t *st);
    /* Whether the implicit default write concern is {w: "majority"} (else {w: 1}: a set
     * with arbiters whose data-bearing voters are no more than the voting majority, as
     * MongoDB 5.0). NULL: majority. Takes repl's own lock only. */
    bool (*implicit_wc_majority)(void *arg);
    /* The majority commit point's timestamp (readConcern "majority" reads at it). */
    uint64_t (*majority_ts)(void *arg);
    /* Whether this node is primary now: background writers (TTL, session reaps) only run
     * on a primary. Lock-free. */
    bool (*is_primary)(void *arg);
    /* Register a listener (shl_db_repl_add_listener); stop them all. NULL: no replica set. */
    bool (*add_listener)(void *arg, const shl_db_repl_listener_t *l);
    void (*stop_listeners)(void *arg);
} shl_db_repl_hooks_t;

/*
 * shl_db_repl_hooks_install --
 *     Install 'h' (copied) into the node of 'svc'. Called once at start-up, before the
 *     listener opens. Not thread-safe against running commands.
 */
void shl_db_repl_hooks_install(shl_service_ctx_t *svc, const shl_db_repl_hooks_t *h);

/* shl_db_repl_is_primary -- the hook's answer, true without hooks. */
bool shl_db_repl_is_primary(const shl_service_ctx_t *svc);

/*
 * shl_db_repl_add_listener --
 *     Register 'l' (copied; at most 8 per process) for the state changes from now on. Returns
 *     whether this member is primary now (always true without a replica set: nothing will
 *     change): the caller runs its step-up work itself for that first state.
 */
bool shl_db_repl_add_listener(const shl_service_ctx_t *svc, const shl_db_repl_listener_t *l);

/*
 * shl_db_repl_stop_listeners --
 *     Stop calling listeners (waiting for a callback in progress). Call from the shutdown hook
 *     of the layer above before it frees what its callbacks use. Idempotent.
 */
void shl_db_repl_stop_listeners(const shl_service_ctx_t *svc);

/*
 * shl_db_repl_wait_write_concern --
 *     Wait until this node's writes up to 'ts' satisfy 'wc' in its replica set (w: n, "majority",
 *     a tag mode; its wtimeout), within 'op''s deadline. Without hooks (no replica set): 0 at
 *     once. Errors: the hook's (WriteConcernTimeout, UnsatisfiableWriteConcern,
 *     UnknownReplWriteConcern, PrimarySteppedDown, interruption).
 */
int shl_db_repl_wait_write_concern(const shl_service_ctx_t *svc, shl_op_ctx_t *op,
                                   const shl_write_concern_t *wc, uint64_t ts, shl_status_t *st);

/*
 * shl_db_repl_wait_majority --
 *     Wait until this node's writes up to 'ts' are majority-committed in its replica set
 *     (a migration's recipient under _secondaryThrottle / w: majority, issue 18), at most
 *     'timeout_ms' (0: none) and within 'op''s deadline. Without hooks (no replica set):
 *     returns 0 at once (a set of one's majority is its journal, which callers wait for).
 *     Errors: the hook's (WriteConcernTimeout, PrimarySteppedDown, interruption).
 */
int shl_db_repl_wait_majority(const shl_service_ctx_t *svc, shl_op_ctx_t *op, uint64_t ts,
                              int64_t timeout_ms, shl_status_t *st);

/*
 * shl_db_repl_rollback_prepared --
 *     For repl's rollback to the common point 'common' (before it refetches documents) or an
 *     initial sync ('common' 0, before it drops the databases): every prepared transaction
 *     leaves storage (MongoDB aborts them before a rollback); those prepared after 'common'
 *     are aborted for good, the others are held for shl_db_repl_rollback_prepared_done.
 *     Returns how many were aborted; 0 on a node without transactions.
 */
int shl_db_repl_rollback_prepared(const shl_service_ctx_t *svc, uint64_t common);

/*
 * shl_db_repl_rollback_prepared_done --
 *     The rollback is over (succeeded or not): the transactions shl_db_repl_rollback_prepared
 *     held are prepared again in storage from their prepare entries, as MongoDB reconstructs
 *     the transactions still prepared at the common point. Returns how many.
 */
int shl_db_repl_rollback_prepared_done(const shl_service_ctx_t *svc);
#endif
