/*
 * storage_private.h -- the storage module's internal types and helpers shared by its
 * .c files: the engine struct, pooled WiredTiger sessions with cursor caches,
 * transactions, the hole tracker, record-store state and catalog internals.
 * Nothing outside src/storage includes this.
 */
#ifndef SHL_STORAGE_PRIVATE_H
#define SHL_STORAGE_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <wiredtiger.h>

#include "bson/keystring.h"
#include "storage/catalog.h"
#include "storage/index.h"
#include "storage/storage.h"

/* A WiredTiger session from the pool, with its cache of idle cursors by URI. */
typedef struct shl_wt_cached_cursor {
    char *uri;
    WT_CURSOR *cur; /* NULL while the holder uses it (the slot kept for its return) */
} shl_wt_cached_cursor_t;

typedef struct shl_wt_session {
    WT_SESSION *wt;
    shl_wt_cached_cursor_t *cache; /* idle cursors; owned by whoever holds the session */
    size_t ncache, capcache;
    uint64_t cursor_epoch;       /* engine epoch when the cache was last valid */
    struct shl_wt_session *next; /* pool free list; guarded by engine pool_mu */
    bson_t entry; /* the oplog entry being written (write.c), reused; owned by the holder */
} shl_wt_session_t;

/* Versioned collections (write.c): which current versions may still be rewritten in place,
 * per slot (RecordId % SHL_VERSION_SLOTS) the RecordId << 8 | its writes in place. */
#define SHL_VERSION_SLOTS 1024
typedef struct shl_version_slots {
    atomic_ullong slot[SHL_VERSION_SLOTS];
} shl_version_slots_t;

/* Record-store state shared by every snapshot of one collection (renames keep it). */
typedef struct shl_rs_state {
    atomic_int refs;
    atomic_llong next_rid; /* next RecordId to hand out */
    atomic_llong num_records;
    atomic_llong data_size;
    /* Versioned collections only (NULL until their first versioned write; set once by CAS,
     * freed with the state). Relaxed atomics in the slots: a lost count only moves a
     * version early or one write late. */
    _Atomic(shl_version_slots_t *) version_slots;
    /* Commit notification for tailable cursors: commit_seq moves after every commit
     * that wrote the record store (for the oplog: after every transaction that reserved
     * a timestamp ends, since that may move the no-holes point); waiters sleep on
     * wait_cv. 'waiters' lets committers skip the mutex when nobody waits. */
    atomic_ullong commit_seq;
    atomic_int waiters;
    pthread_mutex_t wait_mu; /* a leaf lock */
    pthread_cond_t wait_cv;
} shl_rs_state_t;

/* A reserved, not yet finished timestamp range of a transaction (hole tracker). */
typedef struct shl_inflight {
    uint64_t first_ts;
    bool linked;
    struct shl_inflight *prev, *next; /* guarded by engine clock_mu */
} shl_inflight_t;

/* A count/size change to apply when the transaction commits. */
typedef struct shl_rs_delta {
    shl_rs_state_t *rs; /* referenced */
    int64_t count, size;
} shl_rs_delta_t;

/* A catalog change to install in memory when the transaction commits. */
typedef struct shl_cat_change {
    char *ns;               /* namespace whose entry changes */
    shl_collection_t *coll; /* new snapshot (referenced) or NULL: remove */
} shl_cat_change_t;

/* A WT table to drop: after commit once a checkpoint covers drop_ts, or on abort. */
typedef struct shl_drop_ident {
    char *uri;
    uint64_t drop_ts;
} shl_drop_ident_t;

/*
 * A read that meets a prepared transaction's update waits for its decision, as MongoDB's
 * prepare-conflict retry: the same cursor call is repeated after a backoff (yield, then
 * sleeps growing to 100 ms) until it stops returning WT_PREPARE_CONFLICT, or the thread's
 * operation is interrupted (shl_storage_set_interrupt): the call's result stays
 * WT_PREPARE_CONFLICT and shl_wt_err reports the interruption.
 */
bool shl_prepare_backoff(int *attempt);
/* shl_prepare_interrupted -- the interruption that ended the last wait (st), else false. */
bool shl_prepare_interrupted(shl_status_t *st);
#define SHL_WT_READ(var, call)                                                                     \
    do {                                                                                           \
        int shl_attempt_ = 0;                                                                      \
        while (((var) = (call)) == WT_PREPARE_CONFLICT && shl_prepare_backoff(&shl_attempt_)) {    \
        }                                                                                          \
    } while (0)

/* Collect one document write's oplog op in a multi-document transaction (write.c); the
 * pre-image of the last one collected is kept with shl_txn_keep_pre_image. */
void shl_txn_collect_op(shl_storage_txn_t *txn, char op, const char *ns, const uint8_t *uuid,
                        const bson_t *o, const bson_t *o2);
void shl_txn_keep_pre_image(shl_storage_txn_t *txn, const bson_t *before);

struct shl_storage_txn {
    shl_storage_engine_t *eng;
    shl_wt_session_t *sess;
    shl_inflight_t inflight;
    uint64_t cur_ts;   /* commit timestamp currently set on the WT txn, 0 = none */
    uint64_t last_ts;  /* timestamp of the last write */
    uint64_t fixed_ts; /* replay: every write uses this ts and no oplog entry */
    int64_t wall_ms;   /* wall time of the last tick, for oplog 'wall' */
    int64_t fixed_wall_ms; /* replay: the applied entry's 'wall' (0: the clock's), for
                            * what derives from it (pre-images' operationTime) */
    /* Replaying a transaction's op: its pre-image record's applyOpsIndex (write.c
     * write_pre_image; the ts is fixed_ts, the transaction's last applyOps entry's). */
    int64_t txn_op_index;
    int open_cursors;  /* record/index cursors not yet closed (invariant) */
    shl_rs_delta_t *deltas;
    size_t ndeltas, capdeltas;
    shl_cat_change_t *changes;
    size_t nchanges, capchanges;
    shl_drop_ident_t *created; /* tables created in this txn: dropped on abort */
    size_t ncreated, capcreated;
    shl_drop_ident_t *dropped; /* tables dropped in this txn: queued on commit */
    size_t ndropped, capdropped;
    /* Multi-document transaction mode (shl_storage_txn_set_multi): writes take no timestamp
     * of their own and their oplog entries are collected here ({op, ns, ui, o, o2}). */
    bool multi;
    bool prepared;
    bson_t **ops;
    bson_t **op_pres; /* per op: the document before it, kept for a pre-image, or NULL */
    size_t nops, capops;
    size_t ops_bytes;
};

/* A named lock (database or collection) in the engine's lock table. */
typedef struct shl_named_lock {
    char *name;
    pthread_rwlock_t rw;
    int users;                   /* guarded by engine locks_mu */
    struct shl_named_lock *next; /* hash chain; guarded by engine locks_mu */
} shl_named_lock_t;

#define SHL_LOCK_BUCKETS 256
/* Unused lock entries kept for reuse: every CRUD request takes its database's and its
 * collection's lock, and creating and freeing both each time cost about a quarter of the
 * locking (a malloc, a strdup, an rwlock init and their frees). */
#define SHL_LOCKS_IDLE_MAX 256
#define SHL_CAT_BUCKETS 256

typedef struct shl_cat_entry {
    shl_collection_t *coll; /* referenced */
    struct shl_cat_entry *next;
} shl_cat_entry_t;

struct shl_storage_engine {
    char *dbpath;
    int lock_fd;
    WT_CONNECTION *conn;
    shl_storage_options_t opts;
    int64_t term;
    shl_keygen_factory_fn keygen_factory;
    bool snappy; /* the snappy compressor extension is loaded */

    /* Session pool. */
    pthread_mutex_t pool_mu;
    shl_wt_session_t *pool_free; /* guarded by pool_mu */
    atomic_int sessions_open;
    atomic_ullong cursor_epoch; /* bumped before dropping tables */

    /* Clock and hole tracker; clock_mu is a leaf lock. */
    pthread_mutex_t clock_mu;
    uint64_t clock_last;                           /* guarded by clock_mu */
    shl_inflight_t *inflight_head, *inflight_tail; /* guarded by clock_mu */
    uint64_t open_pin; /* shl_storage_options_t.pin_stable_at_open; start-up only */
    uint64_t *stable_pins; /* prepare timestamps the stable one stays below; guarded by clock_mu */
    size_t nstable_pins, capstable_pins; /* guarded by clock_mu */
    atomic_ullong stable_ts;
    atomic_ullong oldest_ts; /* WT's oldest timestamp as last set (history window) */
    atomic_llong window_secs;  /* history window in force (history_window.c) */
    int64_t window_checked_ms; /* last check; the flusher thread only */
    int64_t window_grown_ms;   /* last growth of the window; the flusher thread only */

    /* Journal flushes (group commit). */
    pthread_mutex_t flush_mu;
    pthread_cond_t flush_cv;
    uint64_t flushes_started, flushes_done; /* guarded by flush_mu */
    bool flushing;                          /* guarded by flush_mu */
    int flush_err;                          /* guarded by flush_mu */
    atomic_ullong durable_ts;               /* no-holes point covered by the last flush */

    /* Checkpoints and deferred table drops. */
    pthread_mutex_t ckpt_mu;  /* serializes checkpoints */
    pthread_mutex_t drops_mu; /* guards drops; a leaf lock */
    shl_drop_ident_t *drops;
    size_t ndrops, capdrops;

    /* Background threads. */
    pthread_mutex_t bg_mu;
    pthread_cond_t bg_cv;
    bool bg_stop; /* guarded by bg_mu */
    /* MongoDB's first stable checkpoint: once the stable timestamp moves, the checkpointer
     * takes one at once rather than after syncdelay (a set that lives less than that would
     * otherwise have none, and a crash would replay everything from the start). */
    bool first_stable_wanted;       /* guarded by bg_mu */
    atomic_bool stable_checkpointed; /* a checkpoint with a stable timestamp has run */
    pthread_t flusher, checkpointer;
    bool threads_started;

    /* Catalog: ns -> snapshot; cat_mu guards the map and ident counter. */
    pthread_mutex_t cat_mu;
    shl_cat_entry_t *cat[SHL_CAT_BUCKETS];
    uint64_t next_ident;
    shl_collection_t *oplog; /* the local.oplog.rs pseudo-collection; referenced */

    /* Lock table. */
    pthread_mutex_t locks_mu;
    shl_named_lock_t *locks[SHL_LOCK_BUCKETS];
    int locks_idle; /* entries kept with no users (at most SHL_LOCKS_IDLE_MAX); locks_mu */

    /* Index builds on non-empty collections commit keys in batches of about this many
     * ([SHL_INDEX_BUILD_BATCH_KEYS]; tests set it smaller). */
    int64_t index_build_batch_keys;
    atomic_llong index_build_batches; /* batches committed since open (tests) */
    /* Tests: called after each committed batch, under the build's locks. */
    void (*index_build_hook)(shl_storage_engine_t *eng, int64_t batch);
};

#define SHL_INDEX_BUILD_BATCH_KEYS 10000

/*
 * The history window in force (history_window.c): minSnapshotHistoryWindowInSeconds, shrunk
 * while the cache is under pressure. _init at open; _oldest_for gives the oldest timestamp
 * for a stable one; _adjust (the flusher thread only) reads the cache at most once a second
 * and shrinks the window by a quarter under pressure or, while eviction is idle, grows it
 * back toward the setting by 1 s every 2 s (slower than the clock, so the oldest timestamp
 * keeps moving).
 */
void shl_history_window_init(shl_storage_engine_t *eng);
uint64_t shl_history_window_oldest_for(shl_storage_engine_t *eng, uint64_t stable);
void shl_history_window_adjust(shl_storage_engine_t *eng);

/* A stored record count and data size of one ident (size_storer.c). */
typedef struct shl_size_entry {
    char *ident;
    int64_t num_records, data_size;
} shl_size_entry_t;
typedef struct shl_sizes shl_sizes_t;

/* ---- engine.c ---- */
int shl_wt_err(shl_status_t *st, int wtret, const char *what);
int shl_wt_session_get(shl_storage_engine_t *eng, shl_wt_session_t **out, shl_status_t *st);
void shl_wt_session_put(shl_storage_engine_t *eng, shl_wt_session_t *s);
int shl_wt_cursor_get(shl_storage_engine_t *eng, shl_wt_session_t *s, const char *uri,
                      WT_CURSOR **out, shl_status_t *st);
void shl_wt_cursor_put(shl_wt_session_t *s, const char *uri, WT_CURSOR *c);
uint64_t shl_clock_reserve(shl_storage_engine_t *eng, shl_inflight_t *inf, int64_t *wall_ms,
                           WT_SESSION *wt, int *wtret);
void shl_clock_finish(shl_storage_engine_t *eng, shl_inflight_t *inf);
void shl_engine_queue_drops(shl_storage_engine_t *eng, const shl_drop_ident_t *d, size_t n);
int shl_engine_drop_now(shl_storage_engine_t *eng, const char *uri, shl_status_t *st);
void shl_ts_to_hex(uint64_t ts, char *buf, size_t len);

/* ---- txn.c ---- */
int shl_txn_set_ts(shl_storage_txn_t *txn, uint64_t ts, shl_status_t *st);
int shl_txn_next_ts(shl_storage_txn_t *txn, uint64_t *ts, shl_status_t *st);
void shl_txn_add_delta(shl_storage_txn_t *txn, shl_rs_state_t *rs, int64_t count, int64_t size);
void shl_txn_add_change(shl_storage_txn_t *txn, const char *ns, shl_collection_t *coll);
void shl_txn_add_created(shl_storage_txn_t *txn, const char *uri);
void shl_txn_add_dropped(shl_storage_txn_t *txn, const char *uri, uint64_t ts);
const shl_cat_change_t *shl_txn_find_change(const shl_storage_txn_t *txn, const char *ns);

/* ---- locks.c ---- */
void shl_locks_init(shl_storage_engine_t *eng);
void shl_locks_cleanup(shl_storage_engine_t *eng);
shl_named_lock_t *shl_lock_take(shl_storage_engine_t *eng, const char *name, bool exclusive);
void shl_lock_drop(shl_storage_engine_t *eng, shl_named_lock_t *l);

shl_collection_t *shl_collection_new_oplog(const uint8_t uuid[16]);
void shl_catalog_init(shl_storage_engine_t *eng);
void shl_catalog_cleanup(shl_storage_engine_t *eng);
int shl_catalog_load(shl_storage_engine_t *eng, shl_status_t *st);
void shl_catalog_install(shl_storage_engine_t *eng, const char *ns, shl_collection_t *coll);
void shl_catalog_idents(shl_storage_engine_t *eng, char ***out);
shl_rs_state_t *shl_rs_state_new(void);
void shl_rs_state_release(shl_rs_state_t *rs);
/* shl_rs_state_notify -- move rs's commit sequence and wake its waiters. */
void shl_rs_state_notify(shl_rs_state_t *rs);
shl_collection_t *shl_collection_current(shl_storage_txn_t *txn, const char *ns);
/* shl_collection_current_by_uuid -- the same by UUID (a new reference, or NULL). */
shl_collection_t *shl_collection_current_by_uuid(shl_storage_txn_t *txn, const uint8_t uuid[16]);

/*
 * shl_catalog_apply_txn_command --
 *     Replay a create or createIndexes op of a transaction's applyOps entry ({op: "c", ns,
 *     ui, o}) in 'txn' (fixed timestamp set): its metadata pending in 'txn' as the live
 *     transaction's was (already there: nothing). Errors: BadValue for other commands.
 */
int shl_catalog_apply_txn_command(shl_storage_txn_t *txn, const bson_t *op, shl_status_t *st);
int shl_catalog_replay_command(shl_storage_engine_t *eng, const bson_t *entry, uint64_t ts,
                               shl_status_t *st);
/*
 * shl_catalog_note_multikey -- add paths[i] (bits of key fields holding arrays,
 * shl_keyset_t.array_paths) to index i of 'coll', which becomes multikey when any is
 * set, and num_types[i] (shl_keyset_t.num_types) to its numeric types: rewrites the
 * catalog entry in 'txn' and installs a snapshot with the flags on commit (nothing on
 * abort). No-op when already marked.
 */
int shl_catalog_note_multikey(shl_storage_txn_t *txn, const shl_collection_t *coll,
                              const uint64_t *paths, const uint64_t *num_types, shl_status_t *st);
int shl_rs_state_scan(shl_storage_engine_t *eng, shl_collection_t *coll, shl_status_t *st);
/*
 * shl_rs_state_init_from -- set count and size from a _sizes entry and the RecordId
 * counter from the table's last key (no scan); without an entry, shl_rs_state_scan.
 */
int shl_rs_state_init_from(shl_storage_engine_t *eng, shl_collection_t *coll,
                           const shl_size_entry_t *e, shl_status_t *st);

/* ---- index.c ---- */
int shl_index_insert_keys(shl_storage_txn_t *txn, const shl_index_t *idx, const shl_keyset_t *keys,
                          int64_t rid, size_t *ninserted, bool *dup, shl_status_t *st);
int shl_index_remove_keys(shl_storage_txn_t *txn, const shl_index_t *idx, const shl_keyset_t *keys,
                          int64_t rid, shl_status_t *st);
void shl_index_full_key(const shl_index_t *idx, const uint8_t *key, size_t len, int64_t rid,
                        shl_keystring_t *out);
/* Versioned index (shl_index_t.versioned): the document with index key 'key' moves from
 * 'old_rid' (0: none) to 'new_rid': remove that entry (if there), insert the new one, with no
 * uniqueness lookup (the caller knows old_rid is the live one). */
int shl_index_move_version(shl_storage_txn_t *txn, const shl_index_t *idx, const uint8_t *key,
                           size_t len, int64_t old_rid, int64_t new_rid, shl_status_t *st);

/* ---- write.c ---- */
/* Make the document with _id 'id' in 'coll' equal 'doc' (replace or insert); oplog
 * replay and shl_doc_upsert_derived. */
int shl_doc_upsert_by_id(shl_storage_txn_t *txn, const shl_collection_t *coll, const bson_t *doc,
                         const bson_value_t *id, int64_t *rid, shl_status_t *st);

int shl_write_oplog_entry(shl_storage_txn_t *txn, char op, const char *ns, const uint8_t *uuid,
                          const bson_t *o, const bson_t *o2, const bson_t *extra, uint64_t ts,
                          shl_status_t *st);

/* ---- size_storer.c ---- */
int shl_sizes_create_table(shl_storage_engine_t *eng, shl_status_t *st);

/* ---- local_doc.c ---- */
int shl_local_docs_create_table(shl_storage_engine_t *eng, shl_status_t *st);
/* shl_sizes_load -- the stored sizes (free with shl_sizes_free); find borrows from it. */
int shl_sizes_load(shl_storage_engine_t *eng, shl_sizes_t **out, shl_status_t *st);
const shl_size_entry_t *shl_sizes_find(const shl_sizes_t *z, const char *ident);
void shl_sizes_free(shl_sizes_t *z);
/* shl_sizes_flush -- write every record store's in-memory count and size (checkpoints). */
int shl_sizes_flush(shl_storage_engine_t *eng, shl_status_t *st);

/* ---- recovery.c ---- */
int shl_recovery_run(shl_storage_engine_t *eng, shl_status_t *st);

/* ---- record_store.c ---- */
int shl_record_insert_at(shl_storage_txn_t *txn, const shl_collection_t *coll, int64_t rid,
                         const bson_t *doc, shl_status_t *st);

#endif
