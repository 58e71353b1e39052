/*
 * migration_private.h -- what migration_source.c (donor, registry, coordinator) and
 * migration_destination.c (recipient) share. Not used outside src/shard.
 */
#ifndef SHL_SHARD_MIGRATION_PRIVATE_H
#define SHL_SHARD_MIGRATION_PRIVATE_H

#include <bson/bson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "base/namespace.h"
#include "net/write_concern.h"
#include "shard/shard_private.h"
#include "shard/migration_digest.h"
#include "sharding/chunk_version.h"
#include "sharding/remote.h"
#include "sharding/shard_key.h"
#include "sharding/sharding_types.h"
#include "storage/storage.h"

/* Timeout of one command a shard sends to another during a migration. */
#define MIG_REMOTE_TIMEOUT_MS 60000
/* The options of every command a migration sends (remote.h): one attempt (the phases decide
 * what a failure means) of at most MIG_REMOTE_TIMEOUT_MS (migration_steps.c). */
extern const shl_remote_options_t mig_remote_opts;
/* A _migrateClone / _transferMods reply carries at most about this many bytes of documents. */
#define MIG_BATCH_BYTES (12 * 1024 * 1024)

/* Recipient states, as _recvChunkStatus names them (MongoDB's). */
typedef enum mig_recv_state {
    MIG_READY,
    MIG_CLONE,
    MIG_CATCHUP,
    MIG_STEADY,
    MIG_COMMIT_START,
    MIG_DONE,
    MIG_FAIL,
    MIG_ABORT,
} mig_recv_state_t;

/* One incoming migration (MigrationDestinationManager); guarded by the state's mig_mu. */
/* ---- _secondaryThrottle (migration_throttle.c) ---- */

/* The field migration commands carry it in (_configsvrMoveRange, _shardsvrMoveRange,
 * _recvChunkStart): true (w: "majority"), false, or the write concern document to wait for. */
#define MIG_THROTTLE_FIELD "secondaryThrottle"

/* mig_throttle_parse -- *on and the write concern of cmd's secondaryThrottle (absent: off).
 * Errors: TypeMismatch, the write concern's parse errors. */
int mig_throttle_parse(const bson_t *cmd, bool *on, shl_write_concern_t *wc, shl_status_t *st);

/* mig_throttle_copy -- append from's secondaryThrottle, if any, to 'to'. */
void mig_throttle_copy(const bson_t *from, bson_t *to);

/*
 * mig_throttle_wait --
 *     After a cloned batch: wait until this shard's newest write satisfies 'wc' in its set
 *     (wtimeout 0: at most MIG_REMOTE_TIMEOUT_MS); a timeout is logged, not an error. Errors:
 *     interruption, PrimarySteppedDown, UnsatisfiableWriteConcern, UnknownReplWriteConcern.
 */
int mig_throttle_wait(shard_state_t *s, shl_op_ctx_t *op, const shl_write_concern_t *wc,
                      shl_status_t *st);

/* ---- pacing by the cache (migration_throttle.c) ---- */

/* A recipient waits before it applies a cloned batch while its WiredTiger cache is at least
 * this dirty or this full, a donor before it reads one while its cache is this full (its
 * reads dirty nothing; percent of the cache; WiredTiger's application threads -- the
 * clients' -- start evicting at 20 % dirty and 95 % used, its own eviction threads work from
 * 5 % and 80 %)... */
#define MIG_PACE_DIRTY_PCT 10
#define MIG_PACE_USED_PCT 90
/* ... looking again every MIG_PACE_STEP_MS, at most MIG_PACE_MAX_MS per batch (the copy
 * always goes on, at worst one batch in that time). */
#define MIG_PACE_STEP_MS 5
#define MIG_PACE_MAX_MS 500

/* mig_cache_busy -- whether cache readings are past the thresholds above: the used one, and
 * the dirty one too when 'writes' (the recipient). False when the cache size is unknown.
 * Pure. */
bool mig_cache_busy(const shl_storage_cache_stats_t *cs, bool writes);

/*
 * mig_cache_pace --
 *     Before the recipient applies a batch of cloned documents ('writes') or the donor reads
 *     one: wait while this node's cache is past the thresholds above, so the copy runs at the pace eviction keeps up with and
 *     the clients' writes on this node are not drafted into evicting the copy's pages. Adds
 *     the time waited to *waited_ms. A cache that cannot be read, or setParameter
 *     migrationCachePacing false, does not wait. Errors:
 *     interruption (mig_sleep).
 */
int mig_cache_pace(shard_state_t *s, shl_op_ctx_t *op, bool writes, int64_t *waited_ms,
                   shl_status_t *st);

typedef struct shard_recipient {
    shard_state_t *s;
    char ns[SHL_NS_MAX + 1];
    char from[SHL_SHARD_ID_MAX];
    char to[SHL_SHARD_ID_MAX];
    char session_id[200];
    shl_uuid_t migration_id;
    shl_uuid_t coll_uuid;
    bson_t *min, *max, *key_pattern;
    shl_shard_key_pattern_t pattern;
    mig_recv_state_t state;
    shl_status_t error;
    int64_t cloned, cloned_bytes, catchup, steady;
    int64_t paced_ms; /* time the clone waited for the cache (mig_cache_pace); its thread only */
    bool commit_requested;
    bool abort_requested;
    atomic_bool cancel; /* abort_requested, for fail point pauses (read without mig_mu) */
    bool finished;      /* the thread has ended (state done, fail or abort) */
    bool has_digest;     /* digest computed once the range is complete (migration_digest.h) */
    bool throttle;                 /* _secondaryThrottle: wait for throttle_wc after each batch */
    shl_write_concern_t throttle_wc; /* constant after _recvChunkStart */
    mig_digest_t digest;
    pthread_t thread;
} shard_recipient_t;

/* Whether the shard key of 'doc' lies in [min, max) of 'p'. */
bool mig_doc_in_range(const shl_shard_key_pattern_t *p, const bson_t *doc, const bson_t *min,
                      const bson_t *max);

/*
 * mig_range_walk --
 *     Call fn(arg, doc) once for every document of ns (collection 'uuid') in [min, max) of
 *     shard key 'pattern' on this shard, under a shared collection lock and in one storage
 *     snapshot: through the shard key index when one serves (doc is NULL there unless 'docs'),
 *     else a collection scan (doc always given). 'doc' is borrowed for the call. *present is
 *     false, and fn never called, when the collection is gone or was recreated. Errors: fn's,
 *     storage's. (migration_range_walk.c; the range deleter's count, the migration digest.)
 */
typedef int (*mig_range_fn)(void *arg, const bson_t *doc, shl_status_t *st);
int mig_range_walk(shard_state_t *s, const char *ns, const shl_uuid_t *uuid, const bson_t *pattern,
                   const bson_t *min, const bson_t *max, bool docs, mig_range_fn fn, void *arg,
                   bool *present, shl_status_t *st);

/* Sleep 'ms' unless interrupted. */
int mig_sleep(shl_op_ctx_t *op, int64_t ms, shl_status_t *st);

/* An internal operation context for a background thread of 's'. */
void mig_internal_op(shard_state_t *s, shl_op_ctx_t *op);

/* The elements of array field 'field' of 'reply' that are documents, as static views in
 * *out (caller frees the array). */
size_t mig_docs_of(const bson_t *reply, const char *field, bson_t **out);

/* The documents of a cursor reply's batch (cursor.firstBatch or cursor.nextBatch), as
 * mig_docs_of gives them. */
size_t mig_cursor_docs(const bson_t *reply, bson_t **out);

/* mig_cursor_id -- a cursor reply's cursor.id (0 when absent). */
int64_t mig_cursor_id(const bson_t *reply);

/* Recipient commands (migration_destination.c). */
int mig_recv_chunk_start(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st);
int mig_recv_chunk_status(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st);
int mig_recv_chunk_commit(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st);
int mig_recv_chunk_abort(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st);
int mig_recv_chunk_release_crit(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply,
                                shl_status_t *st);

/* Whether the shard is busy with another migration (mig_mu held): message in st. */
int mig_check_idle_locked(shard_state_t *s, shl_status_t *st);

/*
 * mig_mark_task_ready_counted -- mark range deletion task 'id' ready (journaled), setting its
 * numOrphanDocs to the documents of its range this shard holds when it was still pending
 * (counted over the shard key index, else a collection scan). Errors: NoSuchKey when there is
 * no such task; storage errors.
 */
int mig_mark_task_ready_counted(shard_state_t *s, shl_op_ctx_t *op, const shl_uuid_t *id,
                                shl_status_t *st);

/*
 * The retryable-write history of a migrated range (migration_session.c).
 *   mig_session_source_new: the donor's source for ns's documents in [min, max) of
 *     'pattern' (all of ns when 'pattern' is NULL); the arguments are borrowed and must
 *     outlive it. 'follow': after the history as of the first call, the writes made since
 *     (a chunk migration; movePrimary blocks writes and sends the history only).
 *   mig_session_source_next: append to the array 'arr' (within MIG_BATCH_BYTES) the next
 *     entries to send; empty when the donor has nothing more for now. Reads storage; one
 *     caller at a time.
 *   mig_session_apply: the recipient takes the entries of a _getNextSessionMods reply into
 *     its session catalog; *n gets how many the reply held.
 */
typedef struct mig_session_source mig_session_source_t;
mig_session_source_t *mig_session_source_new(const char *ns, const shl_shard_key_pattern_t *pattern,
                                             const bson_t *min, const bson_t *max, bool follow);
void mig_session_source_destroy(mig_session_source_t *src);
int mig_session_source_next(shard_state_t *s, mig_session_source_t *src, bson_t *arr,
                            shl_status_t *st);
int mig_session_apply(shard_state_t *s, shl_op_ctx_t *op, const bson_t *reply, size_t *n,
                      shl_status_t *st);

/* ---- the donor's protocol steps on the outgoing-command interface (migration_steps.c) ----
 * No storage and no shard state: every command goes through 'r' (the coordinator's remote;
 * the fake one in unit tests), one attempt each, MIG_REMOTE_TIMEOUT_MS. */

/* The coordinator's persisted facts (config.migrationCoordinators, MongoDB's
 * MigrationCoordinatorDocument). */
typedef struct mig_coord {
    shl_uuid_t id;
    char session_id[200];
    char ns[SHL_NS_MAX + 1];
    shl_uuid_t coll_uuid;
    char donor[SHL_SHARD_ID_MAX];
    char recipient[SHL_SHARD_ID_MAX];
    bson_t *min, *max;
    shl_chunk_version_t pre_version;
    int decision; /* 0 none, 1 committed, -1 aborted */
} mig_coord_t;

/* mig_coord_to_bson -- the document (*out initialised by the callee); mig_coord_parse -- back
 * (Errors: BadValue, the IDL's type errors, a missing range); mig_coord_cleanup -- free. */
void mig_coord_to_bson(const mig_coord_t *c, bson_t *out);
int mig_coord_parse(const bson_t *doc, mig_coord_t *c, shl_status_t *st);
void mig_coord_cleanup(mig_coord_t *c);

/* mig_send_recv_chunk_start -- _recvChunkStart to the recipient ('req': the
 * _shardsvrMoveRange command whose secondaryThrottle is passed on, may be NULL). */
int mig_send_recv_chunk_start(const shl_remote_t *r, const mig_coord_t *c, const bson_t *pattern,
                              const bson_t *req, shl_status_t *st);

/* mig_poll_recipient -- one _recvChunkStatus: *steady once the recipient reports "steady";
 * a recipient in state fail, abort or done: OperationFailed "Data transfer error: ..."; the
 * command's own error (network, ...) as it came. */
int mig_poll_recipient(const shl_remote_t *r, const mig_coord_t *c, bool *steady, shl_status_t *st);

/* mig_wait_steady -- mig_poll_recipient until the recipient is steady, check(arg, polls done,
 * st) before each poll (the caller's pause, interruption and memory checks; its error ends
 * the wait). */
typedef int (*mig_poll_check_fn)(void *arg, int polls, shl_status_t *st);
int mig_wait_steady(const shl_remote_t *r, const mig_coord_t *c, mig_poll_check_fn check, void *arg,
                    shl_status_t *st);

/* mig_send_recv_chunk_commit -- _recvChunkCommit; *reply (initialised by the callee) carries
 * the recipient's digest and times. */
int mig_send_recv_chunk_commit(const shl_remote_t *r, const mig_coord_t *c, bson_t *reply,
                               shl_status_t *st);

/* mig_recipient_finish -- the recipient's part of the commit sequence (c->decision > 0:
 * _recvChunkReleaseCritSec, then its config.rangeDeletions task deleted) or of the abort
 * sequence (_recvChunkAbort). Idempotent; the first error stops it. */
int mig_recipient_finish(const shl_remote_t *r, const mig_coord_t *c, shl_status_t *st);

/* mig_ask_decision -- who owns the chunk starting at c->min now, per the config server
 * (majority read of config.chunks): *committed when the recipient does. */
int mig_ask_decision(const shl_remote_t *r, const mig_coord_t *c, bool *committed,
                     shl_status_t *st);

struct shl_coord;

/* mig_coord_set_decision -- record 'decision' in mc and in c's document (persisted by the
 * next checkpoint, completeMigration's). */
void mig_coord_set_decision(struct shl_coord *c, mig_coord_t *mc, int decision);

/* mig_phase_resolve_decision -- the phase resolveDecision (a resumed document without a
 * decision, or a live commit whose outcome stayed unknown): nothing when the document has a
 * decision, else who owns the range by the config server becomes it (mig_ask_decision).
 * Errors: the ask's (the framework retries the phase). */
int mig_phase_resolve_decision(struct shl_coord *c, shl_status_t *st);

typedef struct mig_commit_args {
    shl_chunk_version_t chunk_version; /* the migrated chunk's version before the commit */
    shl_chunk_version_t coll_version;  /* the donor's collection version */
    uint64_t valid_after;              /* the recipient's ownership starts (0: not sent) */
    const mig_digest_t *digest;        /* the range's digest (NULL: not sent) */
} mig_commit_args_t;

/*
 * mig_commit_on_config --
 *     _configsvrCommitChunkMigration (w: majority); when it fails, the config server is asked
 *     who owns the range. Returns the decision: 1 committed (*st clear), -1 aborted (*st the
 *     commit's error), 0 unknown -- the config server could not be asked (*st the commit's
 *     error; resolveDecision asks on). Fail points failMigrationCommit,
 *     migrationCommitNetworkError.
 */
int mig_commit_on_config(const shl_remote_t *r, const mig_coord_t *c, const mig_commit_args_t *a,
                         shl_status_t *st);

#endif
