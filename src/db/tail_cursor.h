/*
 * tail_cursor.h -- the cursor source of tailable find cursors (MongoDB's tailable and
 * awaitData modes) on capped collections and local.oplog.rs. Unlike a plan cursor it
 * does not keep one snapshot: each round (a getMore that finds the end) begins a new
 * storage transaction, seeks to the last record it examined and reads on in RecordId
 * order, so later getMores see documents committed after the cursor was opened. Oplog
 * rounds stop at the no-holes point (record_store.h). When the record it stopped at
 * has been deleted (a capped collection wrapped past it) the cursor is dead:
 * CappedPositionLost (136).
 */
#ifndef SHL_DB_TAIL_CURSOR_H
#define SHL_DB_TAIL_CURSOR_H

#include "db/cursor_manager.h"
#include "db/exec.h"

extern const shl_cursor_source_ops_t db_tail_cursor_ops;

/*
 * db_tail_source_new --
 *     A tailable source over 'coll' (borrowed; the source takes a reference) for the
 *     parsed query 'q' (filter, projection, skip and orphan filter are used; ownership
 *     of the heap-allocated 'q' moves to the source). Filters {ts: {$gt|$gte: T}} on the
 *     oplog start the first round at T. Returns the state for shl_cursor_new with
 *     db_tail_cursor_ops.
 */
void *db_tail_source_new(shl_storage_engine_t *eng, shl_collection_t *coll, exec_query_t *q);

/*
 * db_tail_source_end_round --
 *     End the current round (its snapshot) after a batch: the next batch starts a new
 *     one after the last record examined, checking that record is still there (MongoDB
 *     restores a capped collection scan the same way after a getMore).
 */
void db_tail_source_end_round(void *state);

/* db_tail_source_coll -- the collection the source reads (borrowed). */
const shl_collection_t *db_tail_source_coll(const void *state);

#endif
