/*
 * storage.h -- the storage engine of a data node: one WiredTiger connection in --dbpath,
 * the cluster-time clock that stamps every write, transactions ("write units" and
 * snapshot reads), per-collection locks, journal durability and checkpoints.
 * Implements ../shared/DESIGN.md section 5; docs/design/storage.md explains the design,
 * docs/design/locking.md the lock order. Catalog, records, indexes, document writes and
 * the oplog have their own headers (catalog.h, record_store.h, index.h, write.h, oplog.h).
 */
#ifndef SHL_STORAGE_STORAGE_H
#define SHL_STORAGE_STORAGE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

typedef struct shl_storage_engine shl_storage_engine_t;
typedef struct shl_storage_txn shl_storage_txn_t;
typedef struct shl_collection shl_collection_t;
typedef struct shl_keygen shl_keygen_t;

/*
 * Timestamps are MongoDB's BSON Timestamp as one uint64_t: seconds in the high 32
 * bits, an increment in the low 32 bits, so integer order is time order. 0 = none.
 */
#define SHL_TS_MAKE(secs, inc) (((uint64_t)(uint32_t)(secs) << 32) | (uint64_t)(uint32_t)(inc))
#define SHL_TS_SECS(ts) ((uint32_t)((uint64_t)(ts) >> 32))
#define SHL_TS_INC(ts) ((uint32_t)((uint64_t)(ts)&0xffffffffu))

/*
 * shl_keygen_factory_fn --
 *     Build the key generator for an index spec (see index.h). The engine calls it
 *     for every index when it loads the catalog and when an index is created; an
 *     error fails createIndexes with that status (e.g. CannotCreateIndex for an
 *     index kind the factory does not know). Must be thread-safe and not block.
 */
typedef int (*shl_keygen_factory_fn)(const bson_t *spec, shl_keygen_t **out, shl_status_t *st);

/*
 * Engine options. Zero fields take the default in brackets. Options read "live"
 * (journalCommitInterval, syncdelay) come from the options table when 0.
 */
typedef struct shl_storage_options {
    const char *dbpath;                 /* required; created if missing */
    int64_t cache_size_mb;              /* [max(256 MiB, 50% of (RAM - 1 GiB))], MongoDB's rule */
    const char *engine_config; /* more wiredtiger_open settings, after ours (they win) [none] */
    int32_t session_max;                /* WT session_max [20000]; sessions are pooled */
    int64_t term;                       /* oplog 't' [-1, a standalone]; a set of one passes 1 */
    int32_t journal_commit_interval_ms; /* [options table journalCommitInterval, 100] */
    int32_t syncdelay_s;        /* [options table syncdelay, 60]; <0 = no periodic checkpoints */
    bool no_background_threads; /* tests: no journal flusher / checkpointer threads */
    int64_t oplog_max_bytes;    /* [options table oplogSize MB, else 5% of the disk's free space
                                 * bounded to 990 MB..50 GB, MongoDB's rule] */
    shl_keygen_factory_fn keygen_factory; /* [shl_keygen_default_factory] */
    /*
     * Called by startup recovery for every oplog entry it replays, once the entry is
     * applied: the role re-derives what the entry implies beyond its own write, as
     * config.transactions for a retryable write's entry, in a unit of its own from
     * shl_storage_write_replayed (at the entry's timestamp). NULL: nothing to derive.
     */
    int (*replay_derive)(struct shl_storage_engine *eng, const bson_t *entry, void *arg,
                         shl_status_t *st);
    void *replay_derive_arg;
    /* Keep the stable timestamp where the last stable checkpoint left it (the recovery
     * timestamp; the oplog's top + 1 before recovery has read it) while the node opens: a
     * replica set member's stable timestamp never passes the set's majority commit point, and
     * the entries recovery replays above it may be ones the set never had (a former primary's)
     * or entries it has yet to apply. Release it with shl_storage_release_open_pin once repl
     * has placed its own pin. While the stable timestamp is 0 and held by a pin, checkpoints
     * are skipped (WiredTiger would checkpoint everything, unstable writes included). */
    bool pin_stable_at_open;
} shl_storage_options_t;

/*
 * shl_storage_open --
 *     Lock dbpath (dbpath/shale.lock, flock), open or create the WiredTiger database
 *     (logging on, unlogged timestamped data tables), load the catalog, run startup
 *     recovery (replay oplog entries after the recovery timestamp, drop idents no
 *     catalog entry names), take a stable checkpoint and start the journal flusher and
 *     checkpointer threads. On success *out is the engine; close it with
 *     shl_storage_close(). Blocks for the duration of recovery.
 *     Errors: DBPathInUse (98) when another process holds dbpath; InternalError for
 *     WiredTiger failures (reason carries wiredtiger_strerror); errors from replay.
 */
int shl_storage_open(const shl_storage_options_t *opts, shl_storage_engine_t **out,
                     shl_status_t *st);

/*
 * shl_storage_close --
 *     Clean shutdown: stop background threads, flush the journal, advance the stable
 *     timestamp to the last committed write, take a final checkpoint, close WiredTiger
 *     and release the dbpath lock. Every transaction, cursor and collection handle must
 *     be finished first (an invariant). NULL is a no-op.
 */
void shl_storage_close(shl_storage_engine_t *eng);

/* shl_storage_dbpath -- the engine's dbpath (borrowed, lives as long as 'eng'). */
const char *shl_storage_dbpath(const shl_storage_engine_t *eng);

/* ---------------------------------------------------------------------------------
 * Cluster-time clock and timestamps
 * ------------------------------------------------------------------------------ */

/*
 * shl_storage_clock_now --
 *     The latest timestamp the clock handed out (or the one it was advanced to). Never
 *     goes backwards, even across restarts (the clock starts at max(oplog top, wall)).
 *     Thread-safe, non-blocking.
 */
uint64_t shl_storage_clock_now(shl_storage_engine_t *eng);

/*
 * shl_storage_clock_advance --
 *     Make the clock at least 'ts' (cluster time gossip, later the vector clock).
 *     Later writes get timestamps > ts. Thread-safe.
 */
void shl_storage_clock_advance(shl_storage_engine_t *eng, uint64_t ts);

/*
 * shl_storage_all_durable --
 *     The no-holes point: the largest T such that every write with a timestamp <= T
 *     has finished (committed or aborted). Oplog readers stop here; the stable
 *     timestamp never passes it. Thread-safe, non-blocking.
 */
uint64_t shl_storage_all_durable(shl_storage_engine_t *eng);

/* shl_storage_stable_ts -- the stable timestamp last given to WiredTiger (0 = none yet). */
uint64_t shl_storage_stable_ts(shl_storage_engine_t *eng);

/*
 * shl_storage_oldest_ts --
 *     The oldest timestamp last given to WiredTiger: the history window in force
 *     (minSnapshotHistoryWindowInSeconds, shrunk under cache pressure: history_window.c)
 *     behind the stable timestamp (0 = none yet). Reads at an older
 *     read_timestamp fail with SnapshotTooOld. Thread-safe, non-blocking.
 */
uint64_t shl_storage_oldest_ts(shl_storage_engine_t *eng);

/*
 * shl_storage_cache_stats --
 *     WiredTiger's cache readings (serverStatus wiredTiger.cache) and the history window in
 *     force: minSnapshotHistoryWindowInSeconds, shrunk while the cache is under pressure
 *     (history_window.c). Thread-safe; opens a statistics cursor (tens of microseconds).
 */
typedef struct {
    int64_t bytes_max;         /* "maximum bytes configured" */
    int64_t bytes_in_use;      /* "bytes currently in the cache" */
    int64_t bytes_dirty;       /* "tracked dirty bytes in the cache" */
    int64_t bytes_lookaside;   /* "bytes belonging to the cache overflow table in the cache" */
    int64_t lookaside_entries; /* "cache overflow table entries" */
    int64_t lookaside_score;   /* "cache overflow score" (0-100: how stuck eviction is) */
    int64_t window_secs;       /* the history window in force, seconds */
    /* Since start-up (WiredTiger's "thread-yield" and "cache" counters): the time threads
     * that run operations (not eviction's own) spent evicting pages and waiting for room in
     * the cache, and the pages they evicted -- what a client pays when eviction falls
     * behind. */
    int64_t app_evict_usecs;   /* "application thread time evicting (usecs)" */
    int64_t app_wait_usecs;    /* "application thread time waiting for cache (usecs)" */
    int64_t app_evicted_pages; /* "pages evicted by application threads" */
    int64_t pinned_ts_range;   /* "transaction range of timestamps currently pinned" */
    int64_t pinned_id_range;   /* "transaction range of IDs currently pinned" */
} shl_storage_cache_stats_t;
int shl_storage_cache_stats(shl_storage_engine_t *eng, shl_storage_cache_stats_t *out,
                            shl_status_t *st);

/* shl_storage_term -- the term written in oplog entries ('t'). */
int64_t shl_storage_term(const shl_storage_engine_t *eng);

/* shl_storage_set_term -- the term new oplog entries carry from now on (a node that won an
 * election). Atomic. */
void shl_storage_set_term(shl_storage_engine_t *eng, int64_t term);

/* ---------------------------------------------------------------------------------
 * Durability
 * ------------------------------------------------------------------------------ */

/*
 * shl_storage_wait_durable --
 *     Return once the journal holds every write whose timestamp is <= 'ts' and that
 *     committed before this call (j:true, w:"majority" on a set of one); 'ts' 0: every write
 *     committed before the call, whatever its timestamp (writes at timestamps given, as a
 *     secondary's, may be below the durable point already). Waiters
 *     share flushes (group commit): one thread calls WT log_flush(sync=on) for all
 *     the waiters that arrived before it started. Blocks for about one fsync.
 *     Errors: InternalError if the flush fails.
 */
int shl_storage_wait_durable(shl_storage_engine_t *eng, uint64_t ts, shl_status_t *st);

/* shl_storage_journal_syncs -- how many journal flushes (fsyncs) have completed since start:
 * the waiters' shared ones and the periodic flusher's (serverStatus "log sync operations"). */
uint64_t shl_storage_journal_syncs(shl_storage_engine_t *eng);

/*
 * shl_storage_checkpoint --
 *     Flush the journal, advance the stable timestamp to the durable no-holes point
 *     and take a checkpoint at it (use_timestamp=true); then drop the WT tables of
 *     dropped collections/indexes whose drop is inside the checkpoint. The
 *     checkpointer thread calls this every syncdelay seconds; tests call it directly.
 *     Blocks. Errors: InternalError.
 */
int shl_storage_checkpoint(shl_storage_engine_t *eng, shl_status_t *st);

/* ---------------------------------------------------------------------------------
 * Transactions: write units and snapshot reads
 * ------------------------------------------------------------------------------ */

/* Transaction options; NULL means all defaults. */
typedef struct shl_storage_txn_opts {
    uint64_t read_timestamp; /* 0: read the latest committed data; else WT read_timestamp */
    /* Reads pass over other transactions' prepared writes (WT ignore_prepare) instead of
     * waiting for their decision: for estimates (dataSize, splitVector), as MongoDB's
     * internal size reads ignore prepare conflicts. Such a transaction must not write. */
    bool ignore_prepare;
} shl_storage_txn_opts_t;

/*
 * shl_storage_txn_begin --
 *     Borrow a pooled WiredTiger session and begin a snapshot-isolation transaction
 *     on it. The same object is a write unit (document writes in write.h, DDL is
 *     separate) and a read snapshot (cursors in record_store.h / index.h); a cursor
 *     may keep it open across getMore batches. A transaction is used by one thread
 *     at a time but may move between threads. Finish it with shl_storage_txn_commit
 *     or shl_storage_txn_abort, which free it. Every write inside it gets its own
 *     timestamp from the clock; the transaction counts as "in flight" for the
 *     no-holes point from its first write until it ends.
 *     Errors: InternalError (e.g. read_timestamp older than the oldest timestamp:
 *     SnapshotTooOld 239).
 */
int shl_storage_txn_begin(shl_storage_engine_t *eng, const shl_storage_txn_opts_t *opts,
                          shl_storage_txn_t **out, shl_status_t *st);

/*
 * shl_storage_txn_commit --
 *     Commit (writes become visible at their timestamps) and free 'txn', whatever
 *     the result; open cursors of the transaction must be closed first. On success
 *     the collections' record counts/sizes move by the transaction's deltas.
 *     Errors: WriteConflict (112) if WiredTiger rolled it back; InternalError.
 */
int shl_storage_txn_commit(shl_storage_txn_t *txn, shl_status_t *st);

/*
 * shl_storage_txn_snapshot --
 *     Make the transaction take its snapshot now (WiredTiger takes it at the first read):
 *     what the caller learns afterwards (e.g. the catalog's in-memory metadata) is at least
 *     as new as every write the snapshot shows. Errors: InternalError.
 */
int shl_storage_txn_snapshot(shl_storage_txn_t *txn, shl_status_t *st);

/* shl_storage_txn_abort -- roll back and free 'txn' (cursors must be closed). NULL: no-op. */
void shl_storage_txn_abort(shl_storage_txn_t *txn);

/*
 * shl_storage_txn_last_ts --
 *     The timestamp of the transaction's last write (its last oplog entry), 0 if it
 *     wrote nothing. After a successful commit the caller should have read it first
 *     (the txn is freed); operationTime and write-concern waits use it.
 */
uint64_t shl_storage_txn_last_ts(const shl_storage_txn_t *txn);

/* shl_storage_txn_engine -- the engine of a transaction. */
shl_storage_engine_t *shl_storage_txn_engine(const shl_storage_txn_t *txn);

/*
 * shl_storage_txn_fn --
 *     The body of a write unit for shl_storage_write_retry: do the writes in 'txn'.
 *     Must be re-runnable: it may run several times (each on a fresh transaction), so
 *     it keeps its side effects in the transaction or resets them on entry.
 */
typedef int (*shl_storage_txn_fn)(shl_storage_txn_t *txn, void *arg, shl_status_t *st);

/*
 * shl_storage_write_retry --
 *     Run 'fn' in a new transaction and commit; on WriteConflict (from fn or commit)
 *     abort, back off (exponential from 0 to 100 ms, with jitter) and run it again,
 *     as MongoDB's writeConflictRetry does for writes outside multi-document
 *     transactions. Any other error aborts and is returned. *last_ts (may be NULL)
 *     receives the committed transaction's last write timestamp. Blocks.
 */
int shl_storage_write_retry(shl_storage_engine_t *eng, shl_storage_txn_fn fn, void *arg,
                            uint64_t *last_ts, shl_status_t *st);

/*
 * shl_storage_write_replayed --
 *     shl_storage_write_retry for a unit that re-derives what a replayed oplog entry
 *     implies (shl_storage_options_t.replay_derive): its writes take the entry's timestamp
 *     'ts' and append no oplog entry. Errors: as shl_storage_write_retry.
 */
int shl_storage_write_replayed(shl_storage_engine_t *eng, uint64_t ts, shl_storage_txn_fn fn,
                               void *arg, shl_status_t *st);

/* ---------------------------------------------------------------------------------
 * Multi-document transactions (docs/design/transactions.md)
 * ------------------------------------------------------------------------------ */

/*
 * shl_storage_txn_set_multi --
 *     Put 'txn' in multi-document transaction mode (on) or back (off): document writes take
 *     no timestamp of their own -- WiredTiger stamps them with the commit timestamp -- and
 *     append no oplog entry; their ops ({op, ns, ui, o, o2}, applyOps' inner form) are
 *     collected for shl_storage_txn_ops. Turn it off before writing the transaction's own
 *     oplog entries (shl_oplog_append) at commit. Capped collections are not trimmed in it.
 */
void shl_storage_txn_set_multi(shl_storage_txn_t *txn, bool on);
bool shl_storage_txn_is_multi(const shl_storage_txn_t *txn);

/*
 * shl_storage_txn_ops --
 *     The ops collected so far, in write order (borrowed until the txn ends); *n their count,
 *     *bytes (may be NULL) the sum of their BSON sizes.
 */
const bson_t *const *shl_storage_txn_ops(const shl_storage_txn_t *txn, size_t *n, size_t *bytes);

/*
 * shl_storage_txn_reserve --
 *     Reserve a fresh timestamp from the clock for 'txn' without stamping anything with it:
 *     the no-holes point stays below it until 'txn' ends (a prepared transaction's durable
 *     timestamp, whose decision entry another unit writes at it).
 */
int shl_storage_txn_reserve(shl_storage_txn_t *txn, uint64_t *ts, shl_status_t *st);

/*
 * shl_storage_txn_release_reserved --
 *     Let the no-holes point pass the timestamps 'txn' reserved so far, before it ends (a
 *     prepared transaction once it is prepared: no reader can start below its prepare
 *     timestamp any more). A later reservation holds it again.
 */
void shl_storage_txn_release_reserved(shl_storage_txn_t *txn);

/*
 * shl_storage_txn_set_fixed_ts --
 *     Every write of 'txn' takes timestamp 'ts' (reserved elsewhere), and document writes
 *     append no oplog entry; shl_oplog_append still writes its entry at 'ts'.
 */
void shl_storage_txn_set_fixed_ts(shl_storage_txn_t *txn, uint64_t ts);

/*
 * shl_storage_txn_prepare --
 *     WiredTiger prepare_transaction at 'prepare_ts'. The txn must not have written a
 *     logged table (the oplog): multi mode. Readers of its updates get prepare conflicts
 *     until it commits (shl_storage_txn_commit_at) or aborts. Errors: InternalError.
 */
int shl_storage_txn_prepare(shl_storage_txn_t *txn, uint64_t prepare_ts, shl_status_t *st);

/*
 * shl_storage_txn_commit_at --
 *     Commit at 'commit_ts' (a prepared txn also with 'durable_ts', 0 = commit_ts) and free
 *     'txn'. Errors: as shl_storage_txn_commit.
 */
int shl_storage_txn_commit_at(shl_storage_txn_t *txn, uint64_t commit_ts, uint64_t durable_ts,
                              shl_status_t *st);

/*
 * shl_storage_set_interrupt --
 *     The interruption check of the operation the calling thread runs (NULL: none): a read
 *     waiting for a prepared transaction's decision calls it between retries and, when it
 *     fails, fails with its status (MaxTimeMSExpired, Interrupted ...). Thread-local.
 */
void shl_storage_set_interrupt(int (*fn)(void *arg, shl_status_t *st), void *arg);

/*
 * shl_storage_pin_stable / shl_storage_unpin_stable --
 *     Keep the stable timestamp below 'ts' (a prepared transaction's prepare timestamp)
 *     until unpinned, so that crash recovery replays its prepare entry. Thread-safe.
 */
void shl_storage_pin_stable(shl_storage_engine_t *eng, uint64_t ts);

/*
 * shl_storage_open_pin / shl_storage_release_open_pin --
 *     The pin shl_storage_options_t.pin_stable_at_open took (0: none; the recovery timestamp
 *     + 1 once shl_storage_open returned), and its release (once; later calls do nothing).
 *     Not thread-safe against each other: start-up only.
 */
uint64_t shl_storage_open_pin(const shl_storage_engine_t *eng);
void shl_storage_release_open_pin(shl_storage_engine_t *eng);
void shl_storage_unpin_stable(shl_storage_engine_t *eng, uint64_t ts);

/* ---------------------------------------------------------------------------------
 * Collection locks (lock order: docs/design/locking.md)
 * ------------------------------------------------------------------------------ */

typedef enum shl_lock_mode {
    SHL_LOCK_SHARED,    /* CRUD and reads on the collection */
    SHL_LOCK_EXCLUSIVE, /* DDL on the collection */
} shl_lock_mode_t;

/*
 * A locked collection: the database lock (shared) and the collection lock in 'mode'
 * are held, and 'coll' is a reference to the collection's current metadata, or NULL
 * when the namespace does not exist. Caller's storage; fields are read-only.
 */
typedef struct shl_coll_handle {
    shl_storage_engine_t *eng;
    shl_collection_t *coll; /* reference or NULL; released by shl_storage_coll_release */
    void *db_lock_;         /* private */
    void *coll_lock_;       /* private */
    shl_lock_mode_t mode;
} shl_coll_handle_t;

/*
 * shl_storage_coll_acquire --
 *     Lock database(ns) shared and collection 'ns' in 'mode', then take a reference
 *     to its metadata (NULL if it does not exist: no error). While held, no DDL
 *     changes 'ns' (DDL takes the collection lock exclusively), so h->coll stays
 *     current. Locks are not recursive: a thread must not acquire a namespace it
 *     already holds, nor call catalog DDL on it while holding it. Blocks while DDL on
 *     the same collection (or dropDatabase on its database) runs. Always succeeds for
 *     a well-formed "db.coll" namespace; Errors: InvalidNamespace.
 */
int shl_storage_coll_acquire(shl_storage_engine_t *eng, const char *ns, shl_lock_mode_t mode,
                             shl_coll_handle_t *h, shl_status_t *st);

/*
 * shl_storage_set_lock_timeout --
 *     Bound the waits of the calling thread's shl_storage_coll_acquire to 'ms' (-1: none), which
 *     then fail with LockTimeout (24): a statement of a multi-document transaction
 *     (maxTransactionLockRequestTimeoutMillis). Thread-local.
 */
void shl_storage_set_lock_timeout(int64_t ms);

/* shl_storage_coll_release -- release the reference and the locks. Idempotent. */
void shl_storage_coll_release(shl_coll_handle_t *h);

#endif
