/*
 * txn_coordinator.h -- the two-phase-commit coordinator on a shard (issue 15 item 4; seeds/000
 * "Two-phase Commit Protocol"), the first user of the coordinator framework
 * (sharding/coordinator.h). coordinateCommitTransaction {participants: [{shardId}]} with the
 * transaction's lsid and txnNumber: write config.transaction_coordinators {_id: {lsid,
 * txnNumber}, participants} durably; prepareTransaction to every participant; decide commit at
 * the largest prepareTimestamp, or abort on any vote to abort; write the decision durably;
 * commitTransaction {commitTimestamp} / abortTransaction to every participant until each
 * acknowledges; delete the document. A restart resumes every document left behind (prepare
 * again when it holds no decision, else deliver the decision). docs/design/coordinators.md.
 */
#ifndef SHL_SHARD_TXN_COORDINATOR_H
#define SHL_SHARD_TXN_COORDINATOR_H

#include <bson/bson.h>

#include "base/status.h"
#include "net/command.h"
#include "sharding/coordinator.h"

/* The coordinator type (phases "writingParticipantList", "waitingForVotes",
 * "writingDecision", "waitingForDecisionAcks"); its state documents live in
 * config.transaction_coordinators. */
extern const shl_coord_type_t shard_txn_coord_type;

/*
 * shard_txn_coord_commit --
 *     Run (or join) the two-phase commit of the transaction 'lsid' (a session id document,
 *     borrowed) / 'txn_number' over 'participants' (shard ids; n == 0: only join a running
 *     one, the recoveryToken path) on 'svc', and wait for its end.
 *     Returns 0 when it committed; the abort's status (NoSuchTransaction, or the participant's
 *     vote) when it aborted; when n == 0 and no coordinator runs nor decided recently, what
 *     the local participant's config.transactions record says (committed: 0, else
 *     NoSuchTransaction); InterruptedAtShutdown when the process stops first (the document stays
 *     and the next start finishes the commit). Blocks.
 */
int shard_txn_coord_commit(shl_coord_service_t *svc, const bson_t *lsid, int64_t txn_number,
                           const char *const *participants, size_t n, shl_status_t *st);

/*
 * shard_txn_coord_commit_started --
 *     shard_txn_coord_commit for a transaction that started at 'started_us'
 *     (shl_clock_mono_us; 0: unknown, i.e. now): as MongoDB's coordinator, whose deadline
 *     ties to the transaction's lifetime, the votes missing transactionLifetimeLimitSeconds
 *     after that time are an abort ("Transaction exceeded deadline", NoSuchTransaction).
 *     A coordinator resumed after a restart counts from its resumption.
 */
int shard_txn_coord_commit_started(shl_coord_service_t *svc, const bson_t *lsid, int64_t txn_number,
                                   const char *const *participants, size_t n, int64_t started_us,
                                   shl_status_t *st);

/* shard_txn_coord_forget_all -- drop the recent decisions (tests). */
void shard_txn_coord_forget_all(void);

/* shard_txn_coord_register -- coordinateCommitTransaction. */
void shard_txn_coord_register(shl_command_registry_t *reg);

#endif
