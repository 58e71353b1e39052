/*
 * record_store.h -- a collection's documents in its `collection-<n>` table: key
 * RecordId (int64, assigned by a per-collection counter), value the BSON document.
 * Reads here are what scans and fetches use; the raw writes exist for recovery and
 * tests -- commands write documents through write.h, which also maintains indexes and
 * the oplog. DESIGN.md section 5.
 */
#ifndef SHL_STORAGE_RECORD_STORE_H
#define SHL_STORAGE_RECORD_STORE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "storage/catalog.h"
#include "storage/storage.h"

typedef struct shl_record_cursor shl_record_cursor_t;

/*
 * shl_record_get --
 *     Point read of record 'rid' in 'txn''s snapshot. On success *found says whether
 *     it exists; 'out' (always initialised, destroy it) receives a copy of the document
 *     when found. Errors: WriteConflict is not possible; InternalError.
 */
int shl_record_get(shl_storage_txn_t *txn, const shl_collection_t *coll, int64_t rid, bson_t *out,
                   bool *found, shl_status_t *st);

/*
 * shl_record_insert / shl_record_update / shl_record_delete --
 *     Raw record writes without index or oplog maintenance (recovery, tests). They
 *     are timestamped with the transaction's current write timestamp, so they must
 *     follow a document write or shl_storage_txn_tick (write.h) in the same txn.
 *     insert assigns a new RecordId (*rid). update replaces record 'rid' (NoSuchKey
 *     (4) if absent); delete removes it (NoSuchKey if absent). Count and size deltas
 *     apply at commit. Errors: WriteConflict (112) -- abort the transaction; NoSuchKey.
 */
int shl_record_insert(shl_storage_txn_t *txn, const shl_collection_t *coll, const bson_t *doc,
                      int64_t *rid, shl_status_t *st);
int shl_record_update(shl_storage_txn_t *txn, const shl_collection_t *coll, int64_t rid,
                      const bson_t *doc, shl_status_t *st);
int shl_record_delete(shl_storage_txn_t *txn, const shl_collection_t *coll, int64_t rid,
                      shl_status_t *st);

/*
 * shl_record_cursor_open --
 *     A scan of 'coll' in 'txn''s snapshot, in RecordId order (forward) or reverse.
 *     For local.oplog.rs the RecordId is the entry's timestamp and the scan stops at
 *     the no-holes point read when the cursor opened (shl_storage_all_durable), so a
 *     reader never sees a hole. The cursor borrows 'txn' and 'coll': close it before
 *     the txn ends and before releasing 'coll'. May live across getMore batches.
 *     Errors: InternalError.
 */
int shl_record_cursor_open(shl_storage_txn_t *txn, const shl_collection_t *coll, bool forward,
                           shl_record_cursor_t **out, shl_status_t *st);

/*
 * shl_record_cursor_seek --
 *     Position so that the next shl_record_cursor_next returns the first record with
 *     RecordId >= rid (forward) or <= rid (reverse). For the oplog, seek to ts + 1 to
 *     read entries after ts.
 */
void shl_record_cursor_seek(shl_record_cursor_t *c, int64_t rid);

/*
 * shl_record_cursor_next --
 *     The next record: *eof true when none is left (then *rid/doc are untouched).
 *     'doc' becomes a read-only static view valid until the next call on this cursor
 *     or its close (bson_copy it to keep it). Writes in the same txn are seen.
 *     Errors: InternalError.
 */
int shl_record_cursor_next(shl_record_cursor_t *c, int64_t *rid, bson_t *doc, bool *eof,
                           shl_status_t *st);

/* shl_record_cursor_close -- close and free. NULL: no-op. */
void shl_record_cursor_close(shl_record_cursor_t *c);

#endif
