/*
 * read_concern_wait.h -- waiting on a data node until a cluster time is committed here: the
 * primitive behind readConcern afterClusterTime (concerns.c) and a snapshot read's
 * atClusterTime (snapshot_read.c). docs/design/causal_consistency.md; seeds/000 "Causal
 * consistency in sessions".
 */
#ifndef SHL_DB_READ_CONCERN_WAIT_H
#define SHL_DB_READ_CONCERN_WAIT_H

#include <stdint.h>

#include "base/status.h"
#include "net/op_context.h"
#include "net/read_concern_support.h"

/*
 * db_rc_wait_committed --
 *     Return once this node's committed time -- the no-holes point: every write at or below
 *     it has committed or aborted -- is at least 'ts' (a packed Timestamp, nonzero). A time
 *     past the node's clock is reached by moving the clock to it first, which on a replica set
 *     of one is what MongoDB's no-op oplog write achieves: every later write is ticked past
 *     it. Then waits for the writes in flight below 'ts'. Holds no lock while it waits (it
 *     polls, 1 ms at first, backing off to 10 ms); the caller must hold none either.
 *     Errors (via shl_op_check_interrupt): MaxTimeMSExpired past the operation's deadline,
 *     Interrupted after killOp or a killed session, InterruptedAtShutdown.
 */
int db_rc_wait_committed(shl_op_ctx_t *op, uint64_t ts, shl_status_t *st);

/*
 * db_rc_wait_majority --
 *     Return once the read timestamp of readConcern 'rc' (majority or linearizable:
 *     db_read_timestamp -- the majority commit point of a multi-member set, the no-holes point
 *     on a set of one) is at least 'ts', polling as db_rc_wait_committed; *read_ts receives
 *     it. For a majority read of a collection created after that point (MongoDB waits for
 *     the collection to become visible in the majority snapshot). No lock held; errors as
 *     db_rc_wait_committed.
 */
int db_rc_wait_majority(shl_op_ctx_t *op, const shl_read_concern_t *rc, uint64_t ts,
                        uint64_t *read_ts, shl_status_t *st);

/*
 * db_rc_wait_after_cluster_time --
 *     readConcern afterClusterTime 'ts' for a read, as MongoDB's waitForReadConcern: a time
 *     past this node's cluster time (after the request's $clusterTime gossip) is refused
 *     with InvalidOptions; a shard or config server then reaches it at once (MongoDB writes a
 *     no-op when the oplog is behind; see db_rc_wait_committed); a plain replica set member
 *     does not write the no-op, so it waits until a write at or after 'ts' has committed here
 *     -- or until its periodic no-op writer would have written one (10 s, MongoDB's
 *     periodicNoopIntervalSecs) -- and then for the committed time. No lock held; errors as
 *     db_rc_wait_committed, plus InvalidOptions.
 */
int db_rc_wait_after_cluster_time(shl_op_ctx_t *op, uint64_t ts, shl_status_t *st);

/*
 * db_rc_note_applied --
 *     Record that the writes of an operation up to 'ts' have committed (the node's
 *     "last applied" time a plain replica set member's afterClusterTime waits for). Called
 *     after a command that wrote; lock-free.
 */
void db_rc_note_applied(shl_op_ctx_t *op, uint64_t ts);

/*
 * db_rc_read_op_time --
 *     The operationTime of a command that wrote nothing: the committed time on a shard or
 *     config server (the no-op write MongoDB would make has nothing to wait for); on a plain
 *     replica set member, MongoDB's lastApplied -- its newest write (db_rc_note_applied), or
 *     the committed time if that is older -- so that a causal client's next afterClusterTime
 *     never waits for a write that will not come. Lock-free.
 */
uint64_t db_rc_read_op_time(shl_op_ctx_t *op);

#endif
