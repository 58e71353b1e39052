/*
 * session_catalog.h -- a data node's session catalog and its retryable-write state
 * (seeds/001 "The logical session catalog", "The transactions table", "Retryable writes";
 * MongoDB's SessionCatalog + TransactionParticipant for retryable writes).
 *
 * An operation that carries lsid + txnNumber checks its session out for the whole command;
 * another operation on the same session waits (interruptibly) until it is checked in. The
 * session remembers, for its current txnNumber, the oplog timestamp of every statement
 * (stmtId) that wrote, loaded on first use from config.transactions ({_id: lsid, txnNum,
 * lastWriteOpTime, lastWriteDate}) and the chain of oplog entries it points to (each
 * entry's prevOpTime). A retried statement is answered from its oplog entry and not run
 * again. The write that records a statement writes its oplog entry with lsid, txnNumber,
 * stmtId and prevOpTime, and the config.transactions document, in the same storage
 * transaction; recovery re-derives config.transactions from the replayed entries
 * (db_session_replay_derive), as a MongoDB secondary does.
 *
 * Locking: the catalog's mutex guards its table and each session's checkout state; a
 * session's retryable state is touched only by the operation that has it checked out.
 */
#ifndef SHL_DB_SESSION_CATALOG_H
#define SHL_DB_SESSION_CATALOG_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "net/lsid.h"
#include "net/op_context.h"
#include "storage/storage.h"
#include "storage/write.h"

/* MongoDB's kIncompleteHistoryStmtId: the statement id of a history dead end. */
#define DB_INCOMPLETE_HISTORY_STMT_ID (-2)

#define DB_TRANSACTIONS_NS "config.transactions"
#define DB_IMAGE_COLLECTION_NS "config.image_collection"

typedef struct db_session_catalog db_session_catalog_t;
typedef struct db_session db_session_t;

/* db_session_catalog_new / _destroy -- the node's catalog (no session may be checked out). */
db_session_catalog_t *db_session_catalog_new(shl_storage_engine_t *eng);
void db_session_catalog_destroy(db_session_catalog_t *cat);

/*
 * db_session_checkout --
 *     Check out the session of 'op' (op->lsid_key) for its retryable write op->txn_number:
 *     wait while another operation has it or, for a newer txnNumber, while the session's
 *     transaction is prepared (db_session_txn_prepared; interruptible: MaxTimeMSExpired,
 *     Interrupted);
 *     load its state on first use; then a lower txnNumber than the session's is
 *     TransactionTooOld (225) and a higher one starts a new retryable write (the statements
 *     of the old one are forgotten). On success op->session is set; check it in with
 *     db_session_checkin.
 */
int db_session_checkout(db_session_catalog_t *cat, shl_op_ctx_t *op, shl_status_t *st);
void db_session_checkin(db_session_catalog_t *cat, shl_op_ctx_t *op);

/*
 * db_session_checkout_txn / db_session_checkin_txn --
 *     Check out the session of 'op' for a statement of a multi-document transaction
 *     (txn_participant.c decides about the txnNumber), waiting as db_session_checkout does
 *     (for a newer startTransaction, behind the session's prepared transaction too);
 *     op->session stays NULL (the statement is no retryable write). _lsid: another session
 *     (killSessions, the transaction reaper), with 'op' the waiting operation.
 */
int db_session_checkout_txn(db_session_catalog_t *cat, shl_op_ctx_t *op, db_session_t **out,
                            shl_status_t *st);
int db_session_checkout_lsid(db_session_catalog_t *cat, shl_op_ctx_t *op, const shl_lsid_t *lsid,
                             db_session_t **out, shl_status_t *st);
void db_session_checkin_txn(db_session_catalog_t *cat, db_session_t *s);

/* The checked-out session's txnNumber (-1: none) and its move to a newer one (the retryable
 * history of the old one is forgotten). */
int64_t db_session_txn_number(const db_session_t *s);
void db_session_set_txn_number(db_session_t *s, int64_t txn_number);

/* db_session_txn_slot -- where the checked-out session keeps its transaction (owner only). */
void **db_session_txn_slot(db_session_t *s);

/* db_session_lsid -- the session's id (borrowed for the session's life). */
const shl_lsid_t *db_session_lsid(const db_session_t *s);

/* db_session_catalog_attach -- the session of 'lsid', created if new (startup: not checked out). */
db_session_t *db_session_catalog_attach(db_session_catalog_t *cat, const shl_lsid_t *lsid);

/*
 * db_session_catalog_each --
 *     Call fn(arg, s) for every session, under the catalog's mutex: 'fn' must not block nor
 *     touch a session's transaction (only collect the sessions to look at after).
 */
void db_session_catalog_each(db_session_catalog_t *cat, void (*fn)(void *arg, db_session_t *s),
                             void *arg);

/*
 * db_session_catalog_forget --
 *     Drop the in-memory state of 'lsid' (after its config.transactions document was
 *     removed by the reaper), unless it is checked out or awaited: then false.
 */
bool db_session_catalog_forget(db_session_catalog_t *cat, const shl_lsid_t *lsid);

/*
 * db_session_catalog_append_stats --
 *     Into the open serverStatus `transactions` section 'reply', as MongoDB reports retryable
 *     writes in it:
 *     retriedCommandsCount (commands that answered a statement from history),
 *     retriedStatementsCount, transactionsCollectionWriteCount. NULL: zeros.
 */
void db_session_catalog_append_stats(db_session_catalog_t *cat, bson_t *reply);

/*
 * db_session_note_retried --
 *     A command answered 'n' of its statements (n > 0) from history: counted for
 *     serverStatus.
 */
void db_session_note_retried(const shl_op_ctx_t *op, int64_t n);

/* ---------------------------------------------------------------- statements */

/*
 * db_session_stmt_executed --
 *     Whether statement 'stmt_id' of the checked-out session's retryable write already
 *     wrote; *ts is then its oplog entry's timestamp. Errors: IncompleteTransactionHistory
 *     (217) when it is not known and the session's history is incomplete (truncated oplog,
 *     or a migrated session whose history did not come along).
 */
int db_session_stmt_executed(const shl_op_ctx_t *op, int32_t stmt_id, uint64_t *ts, bool *executed,
                             shl_status_t *st);

/*
 * db_session_read_entry --
 *     The oplog entry at 'ts' of a retried statement (copied into *out, always initialised).
 *     A migrated statement's no-op entry is unwrapped: *out is the original write (its o2).
 *     Errors: IncompleteTransactionHistory when the entry is gone.
 */
int db_session_read_entry(const shl_op_ctx_t *op, uint64_t ts, bson_t *out, shl_status_t *st);

/*
 * The statements one write unit (storage transaction) records for a retryable write: begin
 * it at the start of every attempt of the unit, build each write's oplog fields with
 * _oplog_fields, note each write with _wrote, write the config.transactions document with
 * _finish (same transaction, last), and after the unit committed publish it with _commit.
 * With op->session NULL (not a retryable write) every call does nothing.
 */
#define DB_STMT_RECORDER_INLINE 4
typedef struct db_stmt_recorder {
    shl_op_ctx_t *op;
    db_session_t *s;
    uint64_t prev_ts;  /* the prevOpTime of the next entry */
    int32_t *stmt_ids; /* statements written in this attempt (ids_inline up to its size) */
    uint64_t *ts;      /* and their entries' timestamps (ts_inline up to its size) */
    size_t n, cap;
    int32_t ids_inline[DB_STMT_RECORDER_INLINE];
    uint64_t ts_inline[DB_STMT_RECORDER_INLINE];
    uint64_t write_ts; /* receives the current write's entry timestamp (shl_write_opts_t) */
} db_stmt_recorder_t;

void db_stmt_recorder_init(db_stmt_recorder_t *r, shl_op_ctx_t *op);
void db_stmt_recorder_cleanup(db_stmt_recorder_t *r);
void db_stmt_recorder_begin(db_stmt_recorder_t *r);

/*
 * db_stmt_recorder_opts --
 *     The write options for the next write of statement 'stmt_id' (NULL when the op is not
 *     a retryable write): oplog fields {lsid, txnNumber, stmtId, prevOpTime} and where the
 *     entry's timestamp goes. Borrowed until the next call.
 */
const shl_write_opts_t *db_stmt_recorder_opts(db_stmt_recorder_t *r, int32_t stmt_id,
                                              shl_write_opts_t *wo);

/*
 * db_stmt_recorder_opts_image --
 *     As db_stmt_recorder_opts, for a findAndModify whose retry needs the document it
 *     returned: the entry says which (needsRetryImage: "preImage" / "postImage"), and
 *     db_stmt_recorder_image stores it once the write succeeded.
 */
const shl_write_opts_t *db_stmt_recorder_opts_image(db_stmt_recorder_t *r, int32_t stmt_id,
                                                    const char *image_kind, shl_write_opts_t *wo);

/* db_stmt_recorder_wrote -- the write made with the last options succeeded. */
void db_stmt_recorder_wrote(db_stmt_recorder_t *r, int32_t stmt_id);

/*
 * db_stmt_recorder_image --
 *     Store 'doc' as the image of kind 'image_kind' of the statement just recorded, in
 *     config.image_collection ({_id: lsid, txnNum, ts, imageKind, image, invalidated:
 *     false}; one per session, replaced by the next) in 'txn', journaled with it. Nothing
 *     when the op is not a retryable write.
 */
int db_stmt_recorder_image(db_stmt_recorder_t *r, shl_storage_txn_t *txn, const char *image_kind,
                           const bson_t *doc, shl_status_t *st);

/*
 * db_session_find_image --
 *     The image (*out, always initialised) a retried findAndModify returns: the document
 *     stored for the checked-out session's retryable write at entry 'ts' with kind
 *     'image_kind'. Errors: IncompleteTransactionHistory (217) when it is missing, of
 *     another write, or invalidated. _parent_image: the same for the parent session's write
 *     of a retryable child 'op' (the findAndModify db_session_parent_answer found at 'ts').
 */
int db_session_parent_image(const shl_op_ctx_t *op, uint64_t ts, const char *image_kind,
                            bson_t *out, shl_status_t *st);
int db_session_find_image(const shl_op_ctx_t *op, uint64_t ts, const char *image_kind, bson_t *out,
                          shl_status_t *st);

/* db_stmt_recorder_finish -- upsert config.transactions in 'txn' if anything was written. */
int db_stmt_recorder_finish(db_stmt_recorder_t *r, shl_storage_txn_t *txn, shl_status_t *st);

/* db_stmt_recorder_commit -- the unit committed: the session knows its statements now. */
void db_stmt_recorder_commit(db_stmt_recorder_t *r);

/* ---------------------------------------------------------------- child sessions */

/*
 * Retryable internal transactions (seeds/000 "Retryable Internal Transactions"): a router runs
 * a user's retryable write {lsid, txnNumber N} as transactions on child sessions {id, uid,
 * txnNumber: N, txnUUID}, a new txnUUID per try. The statements of such a transaction that
 * carry the user's stmtIds are the user's statements: once it commits, what each of them is
 * to answer to a retry (its "answer", see txn_participant.h db_txn_note_stmt) is kept with
 * the parent session for write N, so a retry -- in any later child transaction of N, or as a
 * plain retryable write N -- is answered, not run again. In memory only: a restart, or a
 * newer write on the session, forgets them.
 */

/*
 * db_session_child_begin --
 *     A transaction starts on session 'child' for 'op' (nothing unless it is a retryable
 *     child): TransactionTooOld (225) when its parent already started a newer retryable write
 *     (itself or through another child); a newer one than the parent's forgets the parent's
 *     answers. For the same write, waits while another child of it is prepared (its answers
 *     come with its decision; db_session_txn_prepared), and while another attempt of it is
 *     open (db_session_child_open; MongoDB's RetryableTransactionInProgress, which its shard
 *     waits out): a retry through another router then finds the first attempt's answers
 *     instead of running twice. That wait ends at op's maxTimeMS or a kill (op NULL: no
 *     wait); an abandoned attempt ends at transactionLifetimeLimitSeconds. Takes the
 *     catalog's mutex.
 */
int db_session_child_begin(db_session_catalog_t *cat, shl_op_ctx_t *op, const shl_lsid_t *child,
                           shl_status_t *st);

/*
 * db_session_child_conflict_claim --
 *     A transaction on retryable child session 'child' for its parent's write N meets another
 *     attempt of N still open and unprepared: whether this is the first such conflict for N
 *     (then it is recorded, and the caller aborts that attempt -- MongoDB 7.0's
 *     checkForConflictingInternalTransactions assumes its client gave up); later conflicts
 *     for N wait for the open attempt instead (db_session_child_begin), so two live retries
 *     cannot abort each other forever. Takes the catalog's mutex.
 */
bool db_session_child_conflict_claim(db_session_catalog_t *cat, const shl_lsid_t *child);

/*
 * db_session_child_open --
 *     The transaction of retryable child session 'child' was opened (true) or ended,
 *     committed or aborted (false): what db_session_child_begin waits on. Other sessions:
 *     no-op. Takes the catalog's mutex.
 */
void db_session_child_open(db_session_catalog_t *cat, const shl_lsid_t *child, bool open);

/*
 * db_session_txn_prepared --
 *     The transaction 'txn_number' of session 'lsid' became prepared (true) or left that state
 *     (false). While it is prepared, an operation with a newer txnNumber on the session (a
 *     retryable write, db_session_checkout; a startTransaction, db_session_checkout_txn) waits
 *     for the decision instead of failing with PreparedTransactionInProgress, as in MongoDB
 *     (interruptible: MaxTimeMSExpired, Interrupted). For a retryable child session, while it
 *     is prepared a retry of its parent's write waits too (db_session_checkout of the parent
 *     for that txnNumber, db_session_child_begin): the coordinator answers the router once its
 *     decision is durable, before this shard has it. Takes the catalog's mutex.
 */
void db_session_txn_prepared(db_session_catalog_t *cat, const shl_lsid_t *lsid, int64_t txn_number,
                             bool prepared);

/*
 * db_session_child_commit --
 *     The transaction of retryable child session 'child' committed (at entry 'ts'): its
 *     statements stmt_ids[i] answer answers[i] (copied) from now on. Dropped when the parent
 *     moved on to a newer write. Takes the catalog's mutex.
 */
void db_session_child_commit(db_session_catalog_t *cat, const shl_lsid_t *child, uint64_t ts,
                             const int32_t *stmt_ids, bson_t *const *answers, size_t n);

/*
 * db_session_child_answer --
 *     Whether statement 'stmt_id' of the user's retryable write that 'op' belongs to (a
 *     statement of a transaction on a retryable child session, or a retryable write with its
 *     session checked out) was run by a committed child transaction; *out (always
 *     initialised) is then its answer. Takes the catalog's mutex.
 */
bool db_session_child_answer(db_session_catalog_t *cat, const shl_op_ctx_t *op, int32_t stmt_id,
                             bson_t *out);

/*
 * db_session_parent_answer --
 *     For a statement of a retryable internal transaction ('op', a child session's): whether
 *     the parent session's own retryable history for that write has statement 'stmt_id' (a
 *     plain retryable write, or one migrated here from a donor); *out (always initialised) is
 *     then its answer as db_session_child_answer gives it. Checks the parent session out
 *     for the look (may wait for it). For a findAndModify ('fam') the answer is {k: "F", w:
 *     its write as the oplog holds it, ts: its entry}, whose image db_session_parent_image
 *     finds. Errors: IncompleteTransactionHistory (217) when it ran but its entry is gone.
 */
int db_session_parent_answer(db_session_catalog_t *cat, shl_op_ctx_t *op, int32_t stmt_id,
                             bool fam, bson_t *out, bool *found, shl_status_t *st);

/* The field of a retryable internal transaction's last applyOps oplog entry that lists its
 * answers: [{stmtId, answer}]. */
#define DB_RETRY_ANSWERS_FIELD "$_retryAnswers"

/*
 * db_session_recover_children --
 *     At startup (after recovery): the answers of the committed retryable internal
 *     transactions config.transactions records, read back from their oplog entries, for
 *     the newest write of each parent session. Entries the oplog no longer holds are
 *     skipped. Errors: storage errors.
 */
int db_session_recover_children(db_session_catalog_t *cat, shl_status_t *st);

/*
 * db_session_child_each --
 *     Call fn for every answer a parent session keeps (db_session_child_commit), under the
 *     catalog's mutex: 'fn' must not block; what it keeps it copies.
 */
void db_session_child_each(db_session_catalog_t *cat,
                           void (*fn)(void *arg, const shl_lsid_t *parent, int64_t txn_number,
                                      int32_t stmt_id, uint64_t ts, const bson_t *answer),
                           void *arg);

/* ---------------------------------------------------------------- migration */

/* At most this many migrated writes share one storage transaction. */
#define DB_MIGRATE_IN_GROUP_MAX 1000

/* One write of a donor's retryable-write history: its oplog entry, and the document a
 * findAndModify returned (NULL if none). */
typedef struct db_migrated_write {
    const bson_t *entry;
    const bson_t *image;
} db_migrated_write_t;

/*
 * db_session_migrate_in --
 *     Take entries of a donor's retryable-write history into this node's (MongoDB's
 *     SessionCatalogMigrationDestination; seeds/000 "Supporting retryability across chunk
 *     migration"), in order: each w[i].entry is the original oplog entry of a write (lsid,
 *     txnNumber, stmtId), or a dead-end sentinel (stmtId DB_INCOMPLETE_HISTORY_STMT_ID);
 *     w[i].image (may be NULL) the document a findAndModify returned (the entry carries
 *     preImageOpTime or postImageOpTime). For each run of consecutive entries of one session
 *     and txnNumber (at most DB_MIGRATE_IN_GROUP_MAX; a sentinel alone): checks the session
 *     out (waiting as an operation would: 'op' is the migration's), skips what is older than
 *     the session's txnNumber or already known, and writes, in one storage transaction, a
 *     no-op entry per write {op: 'n', ns, o: {$sessionMigrateInfo: 1}, o2: entry (a no-op's
 *     own o2: a migrated entry or a sentinel), lsid, txnNumber, stmtId, prevOpTime,
 *     fromMigrate: true} (and its image) and the session's config.transactions record once,
 *     so a retry sent here is answered from them. Errors: UnsupportedFormat (12) for an
 *     entry without lsid, txnNumber or stmtId; storage errors (the runs before the failing
 *     one stay written).
 */
int db_session_migrate_in(db_session_catalog_t *cat, shl_op_ctx_t *op, const db_migrated_write_t *w,
                          size_t n, shl_status_t *st);

/* ---------------------------------------------------------------- recovery */

/*
 * db_session_replay_derive --
 *     Storage's replay hook (shl_storage_options_t.replay_derive): for a replayed oplog entry
 *     of a retryable write (lsid + txnNumber), upsert its config.transactions document at
 *     the entry's timestamp unless a newer write of the session is recorded; nothing (and
 *     no transaction) for other entries.
 */
int db_session_replay_derive(shl_storage_engine_t *eng, const bson_t *entry, void *arg,
                             shl_status_t *st);

#endif
