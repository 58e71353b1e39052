/*
 * txn_participant.h -- multi-document transactions on a data node (MongoDB's
 * TransactionParticipant; seeds/000 "Transactions", "Committing a Transaction",
 * "Two-phase Commit Protocol"; docs/design/transactions.md).
 *
 * A transaction is (lsid, txnNumber). Its resources -- one storage transaction in
 * multi-document mode (storage.h: writes untimestamped until commit, their oplog entries
 * collected instead of written), the read timestamp its readConcern chose, the cursors it
 * opened -- live in the session between commands. Each statement checks the session out
 * (session_catalog.h) and runs its body in that storage transaction (op->txn); the
 * statement's end stashes it back, or aborts the transaction when the statement failed.
 * commitTransaction writes one applyOps oplog entry (chained with prevOpTime and partialTxn
 * past 16 MB) and config.transactions {state: "committed"} in the same storage transaction,
 * at one commit timestamp. prepareTransaction writes the prepare entry in its own unit and
 * then WiredTiger-prepares the storage transaction at that entry's timestamp.
 *
 * Locking: a transaction is touched only by the operation that has its session checked out
 * (the lifetime reaper and killSessions check the session out too); the participant's list
 * of open transactions (currentOp, serverStatus) is guarded by its own mutex.
 */
#ifndef SHL_DB_TXN_PARTICIPANT_H
#define SHL_DB_TXN_PARTICIPANT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "net/command.h"
#include "net/op_context.h"
#include "storage/storage.h"

/* MongoDB's maximum size of one applyOps oplog entry of a transaction (16 MB). */
#define DB_TXN_MAX_ENTRY_BYTES (16 * 1024 * 1024)

typedef struct db_txn db_txn_t;
typedef struct db_txn_registry db_txn_registry_t;

/* db_txn_registry_new / _destroy -- the node's open transactions (counters, currentOp). */
db_txn_registry_t *db_txn_registry_new(shl_storage_engine_t *eng);
void db_txn_registry_destroy(db_txn_registry_t *reg);

/*
 * db_txn_statement_begin --
 *     Called for a command that carries autocommit (after the session args were checked and
 *     the session checked out into 'session'): validate the transaction arguments as MongoDB
 *     does (autocommit must be false: InvalidOptions; startTransaction only true; a command
 *     not allowed in a transaction: OperationNotSupportedInTransaction 263; readConcern only
 *     on the first statement, writeConcern only on commit/abort: InvalidOptions), then:
 *     startTransaction begins txnNumber (an older number: TransactionTooOld 225; the same one
 *     again: ConflictingOperationInProgress 50911-style; a newer one aborts the session's
 *     unprepared transaction, a prepared one refuses with PreparedTransactionInProgress), and
 *     the other statements continue it (unknown / aborted: NoSuchTransaction 251). On
 *     success op->txn is the transaction for the command's run.
 */
int db_txn_statement_begin(db_txn_registry_t *reg, shl_op_ctx_t *op, const shl_command_t *cmd,
                           void *session, shl_status_t *st);

/*
 * db_txn_statement_end --
 *     After the command: a failure (ret != 0, or writeErrors in 'reply') aborts the
 *     transaction unless it is prepared; the error gets TransientTransactionError where
 *     MongoDB puts it (WriteConflict, LockTimeout, NoSuchTransaction, snapshot errors ...).
 *     A write error with such a code becomes the command's error (MongoDB rethrows
 *     it in a transaction): the result is returned. Clears op->txn. 'st' may be NULL
 *     when ret is 0.
 */
int db_txn_statement_end(db_txn_registry_t *reg, shl_op_ctx_t *op, int ret, shl_status_t *st,
                         const bson_t *reply);

/*
 * db_txn_storage --
 *     The storage transaction the operation's statement runs in, or NULL outside a
 *     transaction. Borrowed for the command.
 */
shl_storage_txn_t *db_txn_storage(const shl_op_ctx_t *op);

/*
 * db_txn_note_write --
 *     A write of the operation's transaction the shard role observes (pre/post images, each
 *     may be NULL; copied): reported to it (node->sharding.on_write) once the transaction
 *     commits, dropped if it aborts.
 */
void db_txn_note_write(const shl_op_ctx_t *op, const char *ns, const bson_t *pre,
                       const bson_t *post);

/*
 * db_txn_records_stmts / db_txn_note_stmt --
 *     Whether the operation is a statement of a retryable internal transaction (a child
 *     session {id, uid, txnNumber, txnUUID}), whose statements that carry the user's stmtIds
 *     are the user's retryable write's; a statement 'stmt_id' of it that wrote notes what a
 *     retry of it is to be answered ('answer', copied; session_catalog.h "child sessions"):
 *     {k: "u"} an update that modified a document, {k: "i", _id} an insert or upsert,
 *     {k: "d"} a delete, {k: "f", lastErrorObject, value, new} a findAndModify; then the
 *     written document's ns and the document ('rdoc': the post-image, or the pre-image of a
 *     delete; the last write the shard observed unless the answer has them), by which a
 *     migration of its range takes the answer along. The parent session learns them when
 *     the transaction commits. Nothing for other operations.
 */
bool db_txn_records_stmts(const shl_op_ctx_t *op);

/* The internal field of the router's commands that move a document an update changed
 * (WouldChangeOwningShard): an insert's documents were moved here (true), their statement
 * is recorded as that update; a findAndModify removal's value is the document after the
 * update, which a retry of it with `new` is answered with. */
#define DB_WCOS_INSERT_FIELD "$_wouldChangeOwningShard"
void db_txn_note_stmt(const shl_op_ctx_t *op, int32_t stmt_id, const bson_t *answer);

/*
 * db_txn_note_created --
 *     The operation's transaction created collection 'ns' (pending in its storage
 *     transaction: create, createIndexes, an insert into a missing collection): others' writes
 *     and DDL on it wait until the transaction ends (db_txn_wait_created), and it becomes
 *     visible at the commit timestamp. No transaction: nothing.
 */
void db_txn_note_created(const shl_op_ctx_t *op, const char *ns);

/*
 * db_txn_ns_hidden --
 *     Whether 'ns' is a collection an open transaction other than op's own created (create,
 *     createIndexes, an insert into a missing collection): listings of other operations
 *     leave it out until that transaction commits (MongoDB keeps it invisible until then).
 *     Takes reg->mu.
 */
bool db_txn_ns_hidden(const shl_op_ctx_t *op, const char *ns);

/*
 * db_txn_wait_created --
 *     Before 'op' writes 'ns' (or runs DDL on it): wait while an open transaction other than
 *     op's own created it (db_txn_ns_hidden), as MongoDB's writers wait for the collection
 *     lock a transaction's create holds until it commits or aborts. A plain operation waits
 *     until its maxTimeMS (MaxTimeMSExpired) or a kill; a transaction's statement at most
 *     maxTransactionLockRequestTimeoutMillis, then LockTimeout (24, transient). Takes reg->mu.
 */
int db_txn_wait_created(shl_op_ctx_t *op, const char *ns, shl_status_t *st);

/*
 * db_txn_note_access --
 *     The operation's transaction (none: nothing) is about to read or write 'ns': until it
 *     ends, a DDL operation on 'ns' (db_txn_ddl_begin) waits for it, and a migration of 'ns'
 *     too if it wrote (db_txn_wait_writers). A namespace new to the transaction while a DDL
 *     operation waits on it waits maxTransactionLockRequestTimeoutMillis for that DDL, as a
 *     transaction's lock request does, then fails with LockTimeout. Takes reg->mu.
 */
int db_txn_note_access(const shl_op_ctx_t *op, const char *ns, bool write, shl_status_t *st);

/* A range of documents a caller waits for: holds(arg, doc) says whether doc is in it. */
typedef struct db_txn_range {
    bool (*holds)(void *arg, const bson_t *doc);
    void *arg;
} db_txn_range_t;

/*
 * db_txn_wait_writers --
 *     Block until no open transaction that wrote 'ns' (db_txn_note_access) is left, as a
 *     migration donor's collection lock waits for the transactions holding it: prepared
 *     ones until their decision, in-progress ones at most 'unprepared_max_ms' (then
 *     LockTimeout). With 'range' (NULL: the whole collection) only those whose observed
 *     writes of 'ns' (db_txn_note_write: pre- or post-image) it holds count -- complete only
 *     for writes made while the shard role observes 'ns' (a migration's capture).
 *     Interruptible through 'op' (may be NULL). Takes reg->mu.
 */
int db_txn_wait_writers(db_txn_registry_t *reg, shl_op_ctx_t *op, const char *ns,
                        const db_txn_range_t *range, int64_t unprepared_max_ms, shl_status_t *st);

/*
 * db_txn_ddl_begin / db_txn_ddl_end --
 *     A DDL operation on 'ns' (every namespace of database 'ns' when db_wide) waits, as for
 *     MongoDB's exclusive lock, until no open transaction other than op's own uses it --
 *     without a limit but the operation's maxTimeMS / kill -- and meanwhile transactions
 *     new to it time out (db_txn_note_access). After success the caller ends it with
 *     db_txn_ddl_end (on error it is already ended). Take reg->mu.
 */
int db_txn_ddl_begin(db_txn_registry_t *reg, shl_op_ctx_t *op, const char *ns, bool db_wide,
                     shl_status_t *st);
void db_txn_ddl_end(db_txn_registry_t *reg, const char *ns, bool db_wide);

/* db_txn_read_ts -- the transaction's read timestamp (0: latest / none). */
uint64_t db_txn_read_ts(const shl_op_ctx_t *op);

/*
 * db_txn_read_ts_for --
 *     The read timestamp a statement of op's transaction reads collection 'ns' at: the
 *     transaction's (db_txn_read_ts), or 0 (latest) for a collection the transaction created
 *     itself (db_txn_note_created: that create is committed DDL after the transaction's
 *     snapshot, which the transaction's own statements read anyway).
 */
uint64_t db_txn_read_ts_for(const shl_op_ctx_t *op, const char *ns);

/*
 * db_txn_started_us --
 *     When this node's open transaction (lsid, txn_number) started (shl_clock_mono_us at its
 *     first statement here; at its re-prepare after a restart), 0 when it has none open.
 *     Takes reg->mu.
 */
int64_t db_txn_started_us(db_txn_registry_t *reg, const shl_lsid_t *lsid, int64_t txn_number);

/*
 * db_txn_session_discard --
 *     The session leaves the catalog (or the process ends): roll back its transaction,
 *     prepared or not, and free it. 'txn' may be NULL.
 */
void db_txn_discard(db_txn_registry_t *reg, db_txn_t *txn);

/*
 * db_txn_is_open / db_txn_free --
 *     Whether 't' is in progress or prepared (a session holding one stays in the catalog);
 *     free a finished one (its session leaves the catalog, or the catalog ends after the
 *     registry rolled back what was open).
 */
bool db_txn_is_open(const db_txn_t *t);
void db_txn_free(db_txn_t *t);

/*
 * db_txn_abort_for_session --
 *     Abort the session's unprepared transaction (killSessions, a retryable write with a
 *     newer txnNumber, the lifetime limit); the caller has the session checked out.
 *     Returns false when there was none to abort or it is prepared.
 */
bool db_txn_abort_for_session(db_txn_registry_t *reg, void *session);

/* db_txn_registry_set_engine -- the engine, once open (the registry exists before recovery). */
struct db_node;
void db_txn_registry_set_engine(db_txn_registry_t *reg, shl_storage_engine_t *eng,
                                const struct db_node *node);

/*
 * db_txn_replay_entry --
 *     Startup recovery's hook for a replayed entry ('arg' the registry): a prepare entry is
 *     remembered; a commitTransaction entry applies the ops of its prepare entry at its own
 *     timestamp; an abortTransaction entry forgets it. Errors: storage errors.
 */
int db_txn_replay_entry(shl_storage_engine_t *eng, const bson_t *entry, void *arg,
                        shl_status_t *st);

/*
 * db_txn_recover_prepared --
 *     After recovery: prepare again every transaction whose prepare entry recovery met
 *     without a decision (at its prepareTimestamp, the stable timestamp pinned below it) and
 *     hand it to its session in 'cat', where commitTransaction / abortTransaction find it.
 */
struct db_session_catalog;
int db_txn_recover_prepared(db_txn_registry_t *reg, struct db_session_catalog *cat,
                            shl_status_t *st);

/*
 * db_txn_rollback_prepared_after --
 *     A secondary's rollback to the common point 'ts' (or an initial sync, 'ts' 0), before it
 *     changes any document: every prepared transaction leaves storage (no oplog entry), as
 *     MongoDB aborts them before a rollback. Those whose prepare entries are after 'ts' are
 *     aborted for good (the entries leave the oplog; their sessions see them aborted, log
 *     5100311); those prepared at or before it are held, with their stable pins, for
 *     db_txn_rollback_done. Prepare entries waiting for their decision (not held in storage)
 *     after 'ts' are dropped. The oplog applier's thread only. Returns how many were aborted.
 */
int db_txn_rollback_prepared_after(db_txn_registry_t *reg, uint64_t ts);

/*
 * db_txn_rollback_done --
 *     After the rollback (the oplog cut at its common point, documents refetched): prepare
 *     again the transactions db_txn_rollback_prepared_after held, from their prepare entries
 *     (MongoDB reconstructs the transactions still prepared at the common point); their
 *     sessions own them again. The oplog applier's thread only. Returns how many.
 */
int db_txn_rollback_done(db_txn_registry_t *reg);

/*
 * db_txn_abort_expired --
 *     Abort every unprepared transaction open longer than transactionLifetimeLimitSeconds
 *     (read live), checking each session out briefly (a busy one waits for the next round).
 *     The cursor reaper calls it. Returns how many.
 */
int db_txn_abort_expired(db_txn_registry_t *reg, struct db_session_catalog *cat,
                         shl_service_ctx_t *svc);

/*
 * db_txn_abort_sessions --
 *     killSessions and session expiry: abort the unprepared transactions of the sessions
 *     'match' accepts (as db_txn_abort_expired; a session running a statement is left to
 *     the kill of its operation). Returns how many.
 */
int db_txn_abort_sessions(db_txn_registry_t *reg, struct db_session_catalog *cat,
                          shl_service_ctx_t *svc, bool (*match)(void *arg, const shl_lsid_t *lsid),
                          void *arg);

/*
 * db_txn_append_current_op --
 *     One currentOp document per inactive transaction (type "idleSession", lsid, the
 *     `transaction` sub-document: parameters {txnNumber, autocommit, readConcern},
 *     readTimestamp, startWallClockTime, timeOpenMicros, timeInactiveMicros, expiryTime or
 *     prepareTimestamp) into array 'arr' from index *n (advanced). Takes the registry's mutex.
 */
void db_txn_append_current_op(db_txn_registry_t *reg, bson_t *arr, uint32_t *n);

/* db_txn_session_number -- the txnNumber of the checked-out session's transaction (-1: none). */
int64_t db_txn_session_number(void *session);

/* db_txn_session_prepared -- whether the checked-out session's transaction is prepared. */
bool db_txn_session_prepared(void *session);

/*
 * db_txn_append_op_info --
 *     The service's append_op hook: a running statement's `transaction` sub-document
 *     (parameters {txnNumber, autocommit, readConcern}, readTimestamp, startWallClockTime,
 *     timeOpenMicros, expiryTime). Called under svc->ops_mu, which guards op->txn's changes.
 */
void db_txn_append_op_info(const shl_op_ctx_t *op, bson_t *doc);

/* db_register_txn_commands -- commitTransaction, abortTransaction, prepareTransaction. */
void db_register_txn_commands(shl_command_registry_t *reg);

/*
 * db_txn_append_stats --
 *     serverStatus's transaction counters (currentActive, currentInactive, currentOpen,
 *     currentPrepared, totalStarted, totalCommitted, totalAborted, totalPrepared,
 *     totalPreparedThenCommitted, totalPreparedThenAborted) into the open 'transactions'
 *     sub-document 't'.
 */
void db_txn_append_stats(db_txn_registry_t *reg, bson_t *t);

#endif
