/*
 * range_deleter.h -- orphaned range deletion on a shard (seeds/000 "Orphaned range
 * deletion"): config.rangeDeletions documents (MongoDB 7.0's RangeDeletionTask schema) with
 * the pending flag, and one deleter thread per shard that, for each task that is not
 * pending, waits for the queries still using filtering metadata that owned the range, then
 * orphanCleanupDelaySecs, then deletes the range's documents in batches of
 * rangeDeleterBatchSize with rangeDeleterBatchDelayMS between batches, and finally removes
 * the task document. Tasks survive restarts (the thread resumes them at start-up).
 *
 * The migration coordinator (migration_*.c) drives the documents' life: the donor persists
 * its task pending before cloning starts, the recipient waits for overlapping tasks to
 * finish, then persists its own pending task; on commit the recipient's task is removed and
 * the donor's marked ready; on abort the donor's is removed and the recipient's marked ready.
 *
 * Thread-safety: every function may be called from any thread; they write
 * config.rangeDeletions through the node's local command path (journaled) and signal the
 * deleter thread. Blocking calls check the operation's deadline and kill flag.
 */
#ifndef SHL_SHARD_RANGE_DELETER_H
#define SHL_SHARD_RANGE_DELETER_H

#include <bson/bson.h>
#include <stdbool.h>

#include "base/status.h"
#include "net/op_context.h"
#include "sharding/chunk_version.h"
#include "sharding/sharding_types.h"

/*
 * config.rangeDeletions: {_id: UUID (the migration id), nss, collectionUuid, donorShardId,
 * range: {min, max}, pending?: true, whenToClean: "now" | "delayed", timestamp?,
 * numOrphanDocs, keyPattern, preMigrationShardVersion}. Caller's storage; 'min', 'max' and
 * 'key_pattern' are owned (shl_range_task_cleanup frees them).
 */
typedef struct shl_range_task {
    shl_uuid_t id;
    char ns[SHL_NS_MAX + 1];
    shl_uuid_t collection_uuid;
    char donor_shard[SHL_SHARD_ID_MAX];
    bson_t *min;
    bson_t *max;
    bson_t *key_pattern;
    bool pending;
    bool when_now; /* whenToClean "now" (no orphanCleanupDelaySecs wait) vs "delayed" */
    int64_t num_orphan_docs;
    shl_chunk_version_t pre_migration_version; /* written when set or IGNORED */
    /* Added by the range deleter (zero-initialise and they stay out of the document): */
    bool processing;    /* the deleter started deleting (it also sets whenToClean "now") */
    bool has_timestamp; /* 'timestamp' is written */
    shl_ts_t timestamp; /* when the task was created (optional in MongoDB's schema) */
} shl_range_task_t;

void shl_range_task_cleanup(shl_range_task_t *t);
/* shl_range_task_to_bson -- the config.rangeDeletions document ('out' initialised here):
 * pending and processing only when true, keyPattern when set, numOrphanDocs as a long. */
void shl_range_task_to_bson(const shl_range_task_t *t, bson_t *out);
/* shl_range_task_parse -- the reverse (unknown fields ignored, as MongoDB's strict: false).
 * On success 'out' owns copies of min/max/keyPattern; on error it owns nothing. Errors:
 * IDLFailedToParse (a required field missing), TypeMismatch, BadValue (whenToClean). */
int shl_range_task_parse(const bson_t *doc, shl_range_task_t *out, shl_status_t *st);

/* shl_range_overlaps -- [min1, max1) and [min2, max2) (shard keys of one pattern) meet. */
bool shl_range_overlaps(const bson_t *min1, const bson_t *max1, const bson_t *min2,
                        const bson_t *max2);

/* shl_range_deletion_persist -- insert the task document (journaled; creates
 * config.rangeDeletions' {collectionUuid: 1, "range.min": 1, "range.max": 1} unique index
 * first, as MongoDB has it) and wake the deleter when it is not pending. Errors:
 * DuplicateKey when a task with this id, or of this collection with the same range,
 * exists; IllegalOperation when the node is not a shard; storage errors. */
int shl_range_deletion_persist(shl_op_ctx_t *op, const shl_range_task_t *t, shl_status_t *st);

/* shl_range_deletion_mark_ready -- unset 'pending' of task 'id' (journaled) and wake the
 * deleter; ok if it is already ready. Errors: NoSuchKey if no such task; storage errors. */
int shl_range_deletion_mark_ready(shl_op_ctx_t *op, const shl_uuid_t *id, shl_status_t *st);

/* shl_range_deletion_mark_ready_orphans -- the same, also setting numOrphanDocs to
 * 'num_orphans' (>= 0) in the same write when the task is still pending (a donor's count of
 * the documents it just donated; a task already ready keeps the deleter's count). */
int shl_range_deletion_mark_ready_orphans(shl_op_ctx_t *op, const shl_uuid_t *id,
                                          int64_t num_orphans, shl_status_t *st);

/* shl_range_deletion_remove -- delete task document 'id' without deleting its range
 * (journaled); ok if absent. */
int shl_range_deletion_remove(shl_op_ctx_t *op, const shl_uuid_t *id, shl_status_t *st);

/*
 * shl_range_deletion_wait_overlapping --
 *     Block until no task (pending or not) of collection 'collection_uuid' overlaps
 *     [min, max) -- what a recipient does before it clones a range. 'timeout_ms' < 0 waits
 *     as long as the operation may; otherwise the wait gives up after it with
 *     ExceededTimeLimit (a recipient's receiveChunkWaitForRangeDeleterTimeoutMS). Other errors:
 *     MaxTimeMSExpired, Interrupted, InterruptedAtShutdown (the operation's deadline and kill
 *     flag).
 */
int shl_range_deletion_wait_overlapping(shl_op_ctx_t *op, const shl_uuid_t *collection_uuid,
                                        const bson_t *min, const bson_t *max, int64_t timeout_ms,
                                        shl_status_t *st);

#endif
