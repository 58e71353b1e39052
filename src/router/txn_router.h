/*
 * txn_router.h -- the router's side of multi-document transactions (MongoDB's
 * RouterSessionCatalog + TransactionRouter; seeds/000 "Transactions", "Committing a
 * Transaction", "Two-phase Commit Protocol", "Aborting a Transaction";
 * docs/design/transactions.md "Router").
 *
 * A transaction is (lsid, txnNumber). The router keeps, per logical session, the state of
 * its newest transaction: the txnNumber, the readConcern the first statement gave, the
 * atClusterTime chosen for snapshot, the participants in the order they were first
 * contacted (each: read-only or has written, the statement that created it), the
 * coordinator (the first participant contacted, as mongos) and the recovery shard (the
 * first participant that wrote: the recoveryToken's recoveryShardId).
 *
 * A statement checks its session's state out for its whole run (a second statement on the
 * same session waits); every request it sends to a shard is rewritten by router_txn_attach
 * (first request to a participant: startTransaction, readConcern [+ atClusterTime],
 * coordinator; later ones: lsid, txnNumber, autocommit only) and every reply is observed.
 *
 * Locking: the catalog's map is guarded by its mutex; a session's state is touched only by
 * the operation that has it checked out (checked_out, guarded by the catalog's mutex).
 */
#ifndef SHL_ROUTER_TXN_ROUTER_H
#define SHL_ROUTER_TXN_ROUTER_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "net/client.h"
#include "net/command.h"
#include "net/op_context.h"

struct shl_router;

typedef struct router_txn router_txn_t;
typedef struct router_txn_catalog router_txn_catalog_t;

/* How a commit went (MongoDB's commit types, reported in logs and tests). */
typedef enum router_commit_type {
    ROUTER_COMMIT_NONE,          /* no commit run yet */
    ROUTER_COMMIT_NO_SHARDS,     /* no participant: nothing to do */
    ROUTER_COMMIT_SINGLE_SHARD,  /* one participant: commitTransaction */
    ROUTER_COMMIT_READ_ONLY,     /* every participant read-only: commit each */
    ROUTER_COMMIT_SINGLE_WRITE,  /* read-only ones first, then the one write shard */
    ROUTER_COMMIT_TWO_PHASE,     /* coordinateCommitTransaction to the coordinator */
    ROUTER_COMMIT_RECOVER_TOKEN, /* unknown here: coordinateCommitTransaction to the token's shard
                                  */
} router_commit_type_t;

/* router_txn_catalog_new / _destroy -- the router's per-session transaction states. */
router_txn_catalog_t *router_txn_catalog_new(void);
void router_txn_catalog_destroy(router_txn_catalog_t *c);

/*
 * router_txn_begin --
 *     For a command with autocommit (session arguments already checked): check the session's
 *     state out (waiting while another statement has it, bounded by the operation's
 *     interruption) and begin or continue its transaction as mongos does:
 *       - autocommit must be false (InvalidOptions), startTransaction only true;
 *       - a command MongoDB does not run in a transaction: OperationNotSupportedInTransaction;
 *       - txnNumber older than the session's: TransactionTooOld;
 *       - startTransaction: a new transaction (the same txnNumber again:
 *         ConflictingOperationInProgress); its readConcern is kept (level snapshot: the
 *         atClusterTime given, else 'cluster_time', the router's newest);
 *       - commitTransaction of a txnNumber this router does not know: recovery through
 *         the recoveryToken;
 *       - any other statement of an unknown txnNumber: NoSuchTransaction; a readConcern on
 *         a statement that is not the first: InvalidOptions.
 *     On success op->txn is the state and op->txn_session the checkout (router_txn_release).
 */
int router_txn_begin(router_txn_catalog_t *c, shl_op_ctx_t *op, const shl_command_t *cmd,
                     uint64_t cluster_time, shl_status_t *st);

/*
 * router_txn_catalog_kill --
 *     killSessions: the transaction of every session 'match' accepts ends here -- its next
 *     statement gets NoSuchTransaction (a new txnNumber starts afresh). A state checked out
 *     by a running statement is marked and ends when that statement is done (the statement
 *     itself is interrupted by the kill of its operation). The shards abort their part
 *     through killAllSessionsByPattern. Takes the catalog's mutex. Returns how many.
 */
int router_txn_catalog_kill(router_txn_catalog_t *c,
                            bool (*match)(void *arg, const shl_lsid_t *lsid), void *arg);

/* router_txn_release -- check the operation's state back in (no-op without one). */
void router_txn_release(router_txn_catalog_t *c, shl_op_ctx_t *op);

/*
 * router_txn_attach --
 *     Write to 'out' (initialised by the caller) the request 'cmd' for 'shard' as a statement
 *     of transaction 't': the command without its transaction fields, then lsid, txnNumber,
 *     autocommit: false; when 'shard' is not yet a participant it becomes one (in contact
 *     order) and the request also carries startTransaction: true, the readConcern
 *     (+ atClusterTime for snapshot) and coordinator: true if it is the first participant.
 *     commitTransaction / abortTransaction / coordinateCommitTransaction never create one.
 */
void router_txn_attach(router_txn_t *t, const char *shard, const bson_t *cmd, bson_t *out);

/*
 * router_txn_observe --
 *     The result of the request 'cmd' sent to participant 'shard': a reply's readOnly field,
 *     else the command's kind (insert/update/delete/findAndModify, an aggregate with $out or
 *     $merge) says whether the participant wrote; the first one that wrote is the recovery
 *     shard. A stale-routing error on a statement that created every participant it reached
 *     drops them (aborting them on the shards) so the router's retry starts them again;
 *     otherwise the retry is refused (router_txn_retry_refused).
 */
void router_txn_observe(struct shl_router *r, shl_op_ctx_t *op, router_txn_t *t, const char *shard,
                        const bson_t *cmd, const shl_fanout_result_t *res);

/*
 * router_txn_retry_refused --
 *     When a stale error of this statement may not be retried inside the transaction: true,
 *     and *res is that error again (the request is not sent).
 */
bool router_txn_retry_refused(router_txn_t *t, shl_fanout_result_t *res);

/*
 * router_txn_take_snapshot_retry --
 *     Whether the statement's snapshot error (seen by router_txn_observe) is to be retried at
 *     the transaction's new atClusterTime; the flag is cleared. Only the first statement of a
 *     transaction whose time the router chose retries, as mongos.
 */
bool router_txn_take_snapshot_retry(router_txn_t *t);

/*
 * router_txn_end --
 *     After a statement (not commit/abort; 'reply' its reply when ret is 0): on failure (or
 *     writeErrors in the reply) every participant is sent
 *     abortTransaction (best effort) and the error gets TransientTransactionError where
 *     MongoDB puts it; on success the statement's recoveryToken is remembered for the reply
 *     (router_txn_append_token). Returns 'ret'.
 */
int router_txn_end(struct shl_router *r, shl_op_ctx_t *op, int ret, shl_status_t *st,
                   const bson_t *reply);

/* router_txn_append_token -- append the recoveryToken router_txn_end remembered on this
 * thread (if any) to 'reply', and forget it. */
void router_txn_append_token(bson_t *reply);

/*
 * router_txn_commit / router_txn_abort --
 *     commitTransaction / abortTransaction of the operation's transaction, by the commit
 *     paths of seeds/000 "Committing a Transaction" (router_commit_type_t). A commit's
 *     network errors, MaxTimeMSExpired and write concern errors get
 *     UnknownTransactionCommitResult; an abort is sent to every participant (none:
 *     NoSuchTransaction). Errors: the participants' / coordinator's.
 */
int router_txn_commit(struct shl_router *r, shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply,
                      shl_status_t *st);
int router_txn_abort(struct shl_router *r, shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply,
                     shl_status_t *st);

/* Introspection for tests: participants in order, coordinator, recovery shard, commit type. */
size_t router_txn_participants(const router_txn_t *t, const char **names, bool *read_only,
                               size_t max);
const char *router_txn_coordinator(const router_txn_t *t);
const char *router_txn_recovery_shard(const router_txn_t *t);
router_commit_type_t router_txn_commit_type(const router_txn_t *t);

/* router_txn_at_cluster_time -- a snapshot transaction's atClusterTime (0: not snapshot);
 * its statements target the owners of the chunks at that time. */
uint64_t router_txn_at_cluster_time(const router_txn_t *t);

#endif
