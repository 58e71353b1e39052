/*
 * cursor_manager.h -- server-side cursors of a data node: registration with a random
 * id, pinning for getMore (one user at a time), batching under MongoDB's limits
 * (first batch 101 documents by default, every batch at most 16 MiB), killCursors,
 * and an idle-timeout reaper (cursorTimeoutMillis, default 10 minutes).
 *
 * A cursor reads from a source (a query plan, the oplog, a listing) through a small
 * vtable, so this file knows nothing about storage.
 */
#ifndef SHL_DB_CURSOR_MANAGER_H
#define SHL_DB_CURSOR_MANAGER_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/namespace.h"
#include "base/status.h"
#include "net/op_context.h"

#define SHL_CURSOR_DEFAULT_FIRST_BATCH 101
#define SHL_CURSOR_MAX_BATCH_BYTES (16 * 1024 * 1024)

typedef struct shl_cursor_source_ops {
    /*
     * Produce the next document: returns 0 with *doc set (borrowed until the next
     * call or destroy) or NULL when exhausted, or an error code with 'st' filled.
     * (A "1 = produced a document" convention would collide with InternalError, 1.)
     */
    int (*next)(void *state, shl_op_ctx_t *op, const bson_t **doc, shl_status_t *st);
    /* Release the source and everything it holds. */
    void (*destroy)(void *state);
} shl_cursor_source_ops_t;

typedef struct shl_cursor {
    int64_t id; /* set by register; 0 before */
    char ns[SHL_NS_MAX + 1];
    const shl_cursor_source_ops_t *ops;
    void *state;   /* owned; released by ops->destroy */
    bson_t *stash; /* a document that did not fit the last batch */
    int64_t limit; /* stop after this many documents in all; 0: none */
    bool tailable;
    bool await_data;
    bool no_timeout;
    /* A change stream: a drop or rename of its namespace does not kill it (it reports them
     * itself). */
    bool outlives_namespace;
    int64_t n_returned;
    /* readConcern "snapshot": the time the cursor reads at, which every batch's reply
     * carries as atClusterTime (0: not a snapshot read). */
    uint64_t at_cluster_time;
    /* The session the cursor was opened in (set by register from the opening op): killing or
     * ending the session, or its expiry, kills the cursor, as MongoDB's. */
    bool has_lsid;
    shl_lsid_t lsid;
    /* Opened in a multi-document transaction (its txnNumber): it reads in the transaction's
     * storage transaction and dies when the transaction ends. */
    bool in_txn;
    int64_t txn_number;
    /* The digest of the user that opened it (shl_op_user_digest; set by register): another
     * user may not use or kill it (shl_op_may_use_owned). */
    uint8_t owner[SHL_LSID_UID_LEN];
    /* Fields below are guarded by the manager's lock. */
    bool pinned;
    bool kill_pending;
    int64_t last_used_ms;
    struct shl_cursor *next; /* hash chain */
} shl_cursor_t;

typedef struct shl_cursor_manager shl_cursor_manager_t;

typedef enum shl_cursor_kill_result {
    SHL_CURSOR_KILLED,
    SHL_CURSOR_NOT_FOUND,
} shl_cursor_kill_result_t;

shl_cursor_manager_t *shl_cursor_manager_new(void);

/* shl_cursor_manager_destroy -- destroy every cursor (none may be pinned) and the manager. */
void shl_cursor_manager_destroy(shl_cursor_manager_t *mgr);

/*
 * shl_cursor_new --
 *     A cursor over 'ops'/'state' (ownership of 'state' moves to the cursor) for 'ns'.
 *     Not yet registered: a cursor exhausted by its first batch is simply destroyed
 *     with shl_cursor_destroy and never gets an id.
 */
shl_cursor_t *shl_cursor_new(const char *ns, const shl_cursor_source_ops_t *ops, void *state);

/* shl_cursor_destroy -- release an unregistered cursor. */
void shl_cursor_destroy(shl_cursor_t *c);

/*
 * shl_cursor_fill_batch --
 *     Append up to 'batch_size' documents (0: the default, 101 for a first batch and
 *     unlimited for getMore) to the array 'arr', stopping before the batch would pass
 *     16 MiB. *exhausted tells whether the source has no more documents. Checks the
 *     operation's deadline/kill flag between documents. Errors: the source's, or
 *     MaxTimeMSExpired/Interrupted.
 */
int shl_cursor_fill_batch(shl_op_ctx_t *op, shl_cursor_t *c, int64_t batch_size, bool first,
                          bson_t *arr, bool *exhausted, shl_status_t *st);

/*
 * shl_cursor_manager_register --
 *     Give 'c' a fresh id and keep it (ownership moves to the manager); returns the id.
 *     The cursor is left unpinned and belongs to the session of 'op', the operation that
 *     opened it (may be NULL, or run in no session). Thread-safe.
 */
int64_t shl_cursor_manager_register(shl_cursor_manager_t *mgr, shl_cursor_t *c,
                                    const shl_op_ctx_t *op);

/*
 * shl_cursor_manager_owner --
 *     The owner digest of cursor 'id' of 'ns' into 'out'; false when there is no such
 *     cursor. Thread-safe.
 */
bool shl_cursor_manager_owner(shl_cursor_manager_t *mgr, int64_t id, const char *ns,
                              uint8_t out[SHL_LSID_UID_LEN]);

/*
 * shl_cursor_manager_pin --
 *     Take cursor 'id' of namespace 'ns' for a getMore. Errors: CursorNotFound (43),
 *     CursorInUse (143), Unauthorized (13) when the namespace differs. Thread-safe.
 */
int shl_cursor_manager_pin(shl_cursor_manager_t *mgr, int64_t id, const char *ns,
                           shl_cursor_t **out, shl_status_t *st);

/*
 * shl_cursor_manager_unpin --
 *     Return a pinned cursor. When 'destroy' is set (exhausted or failed) or a kill
 *     arrived while pinned, the cursor is destroyed. Thread-safe.
 */
void shl_cursor_manager_unpin(shl_cursor_manager_t *mgr, shl_cursor_t *c, bool destroy);

/*
 * shl_cursor_manager_kill --
 *     Kill cursor 'id' of 'ns'. A pinned cursor is destroyed when its user unpins it.
 */
shl_cursor_kill_result_t shl_cursor_manager_kill(shl_cursor_manager_t *mgr, int64_t id,
                                                 const char *ns);

/* shl_cursor_manager_reap -- destroy unpinned cursors idle for > timeout_ms; returns count. */
int shl_cursor_manager_reap(shl_cursor_manager_t *mgr, int64_t now_ms, int64_t timeout_ms);

/* shl_cursor_manager_count -- open cursors (for serverStatus metrics.cursor.open.total). */
int64_t shl_cursor_manager_count(shl_cursor_manager_t *mgr);

/* shl_cursor_manager_kill_ns -- kill every cursor on 'ns' (drop/rename); returns count. */
int shl_cursor_manager_kill_ns(shl_cursor_manager_t *mgr, const char *ns);

/* shl_cursor_manager_kill_db -- kill every cursor on a namespace of 'db' (dropDatabase). */
int shl_cursor_manager_kill_db(shl_cursor_manager_t *mgr, const char *db);

/*
 * shl_cursor_manager_kill_sessions --
 *     Kill every cursor opened in a session 'match' accepts (called under the manager's lock;
 *     must not block); a pinned one is destroyed when its user unpins it. Returns how many.
 */
int shl_cursor_manager_kill_sessions(shl_cursor_manager_t *mgr,
                                     bool (*match)(void *arg, const shl_lsid_t *lsid), void *arg);

/*
 * shl_cursor_manager_kill_txn --
 *     Kill every cursor opened in transaction (lsid, txn_number) (it committed, aborted or
 *     prepared); a pinned one is destroyed when its user unpins it. Returns how many.
 */
int shl_cursor_manager_kill_txn(shl_cursor_manager_t *mgr, const shl_lsid_t *lsid,
                                int64_t txn_number);

/*
 * shl_cursor_manager_sessions --
 *     Call fn(arg, lsid) for the session of every cursor opened in one, under the manager's
 *     lock ('fn' must not block or call back into the manager).
 */
void shl_cursor_manager_sessions(shl_cursor_manager_t *mgr,
                                 void (*fn)(void *arg, const shl_lsid_t *lsid), void *arg);

/*
 * shl_cursor_reply --
 *     Append MongoDB's cursor reply: cursor: {firstBatch|nextBatch: arr, id, ns}.
 */
void shl_cursor_reply(bson_t *reply, const char *ns, int64_t id, bool first, const bson_t *arr);

/* shl_cursor_reply_at -- shl_cursor_reply plus cursor.atClusterTime when 'at' is not 0 (a
 * snapshot read's time, seconds << 32 | increment). */
void shl_cursor_reply_at(bson_t *reply, const char *ns, int64_t id, bool first, const bson_t *arr,
                         uint64_t at);

#endif
