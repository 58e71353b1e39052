/*
 * oplog.h -- the oplog: a logged WiredTiger table `oplog`, key = timestamp (int64,
 * also the RecordId of local.oplog.rs), value = the entry in MongoDB 7.0's format
 *   {op, ns, ui, o, o2, ts: Timestamp, t: long, v: long 2, wall: Date, <extra>}.
 * It is the journal (DESIGN.md section 5): data tables are unlogged, and startup
 * recovery replays entries after the recovery timestamp. Readers see entries only up
 * to the no-holes point. The checkpointer truncates the oldest entries beyond the
 * configured size (oplogSizeMB), never one that recovery still needs.
 */
#ifndef SHL_STORAGE_OPLOG_H
#define SHL_STORAGE_OPLOG_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "storage/catalog.h"
#include "storage/record_store.h"
#include "storage/storage.h"

/*
 * shl_oplog_collection --
 *     A reference to the local.oplog.rs pseudo-collection (release it): scan it with
 *     the record cursor API (record_store.h) -- RecordId = ts, bounded by the no-holes
 *     point -- which is how find on local.oplog.rs is served. Writes to it through
 *     write.h fail with IllegalOperation.
 */
shl_collection_t *shl_oplog_collection(shl_storage_engine_t *eng);

/*
 * shl_oplog_cursor_open --
 *     Forward cursor over entries with ts > after_ts (0: from the start) up to the
 *     no-holes point at open, in 'txn''s snapshot; iterate with shl_record_cursor_next
 *     (RecordId = ts as int64) and close with shl_record_cursor_close.
 *     Errors: InternalError.
 */
int shl_oplog_cursor_open(shl_storage_txn_t *txn, uint64_t after_ts, shl_record_cursor_t **out,
                          shl_status_t *st);

/*
 * shl_oplog_top --
 *     The timestamp of the newest visible entry (<= the no-holes point), 0 if the
 *     oplog is empty. Opens its own transaction. Errors: InternalError.
 */
int shl_oplog_top(shl_storage_engine_t *eng, uint64_t *ts, shl_status_t *st);

/*
 * shl_oplog_entry_build --
 *     Build an entry in MongoDB's field order into 'out' (initialised by callee):
 *     op, ns, ui (if uuid), o, o2 (if not NULL), ts, t, v: 2, wall, then 'extra''s
 *     fields. Used by write.h; exposed for tests and future replication.
 */
void shl_oplog_entry_build(bson_t *out, char op, const char *ns, const uint8_t *uuid,
                           const bson_t *o, const bson_t *o2, uint64_t ts, int64_t term,
                           int64_t wall_ms, const bson_t *extra);

/* shl_oplog_entry_fill -- the same into 'out', an initialised empty document (one the caller
 * keeps and bson_reinit()s, so its buffer serves many entries without an allocation). */
void shl_oplog_entry_fill(bson_t *out, char op, const char *ns, const uint8_t *uuid,
                          const bson_t *o, const bson_t *o2, uint64_t ts, int64_t term,
                          int64_t wall_ms, const bson_t *extra);

/*
 * shl_oplog_apply --
 *     Apply one entry idempotently at the entry's own timestamp, in its own
 *     transaction (retried on WriteConflict), without appending to the oplog (startup
 *     recovery; later secondaries): 'i' upserts by _id, 'u' replaces by o2._id
 *     (upsert), 'd' deletes by _id if present, 'n' nothing, 'c' one of create / drop /
 *     createIndexes / dropIndexes / renameCollection / collMod / dropDatabase, each a no-op when
 *     already in effect. Entries for unknown collections are skipped with a warning.
 *     Takes the collection locks the equivalent command would. The entry's ts must be
 *     above the stable timestamp. Errors: BadValue for a malformed entry;
 *     DuplicateKey on a secondary unique index.
 */
int shl_oplog_apply(shl_storage_engine_t *eng, const bson_t *entry, shl_status_t *st);

/*
 * shl_oplog_apply_replicated --
 *     A secondary's batch from its sync source (repl/, docs/design/replication.md): the 'n'
 *     entries (borrowed) are first written into this node's oplog exactly as received, each at its own
 *     ts, in one transaction (an entry already there is kept), so that a crash after this
 *     step replays them at recovery; then each is applied as shl_oplog_apply applies it,
 *     followed by the role's replay_derive hook, as recovery does. Oplog readers are woken.
 *     Entries must have increasing timestamps above the stable timestamp (a secondary pins
 *     it). Errors: BadValue for a malformed entry; those of shl_oplog_apply.
 */
int shl_oplog_apply_replicated(shl_storage_engine_t *eng, const bson_t *const *entries, size_t n,
                               shl_status_t *st);

/*
 * shl_oplog_read --
 *     The entry at 'ts' (*out always initialised; *found false when there is none), read in
 *     a snapshot of its own. Errors: InternalError.
 */
int shl_oplog_read(shl_storage_engine_t *eng, uint64_t ts, bson_t *out, bool *found,
                   shl_status_t *st);

/*
 * shl_oplog_txn_ops --
 *     Every op of the transaction whose last applyOps entry is 'entry': the ops of the
 *     partialTxn entries its prevOpTime chain leads to (oldest first), then its own, as one
 *     array in *ops (always initialised). Errors: InternalError.
 */
int shl_oplog_txn_ops(shl_storage_engine_t *eng, const bson_t *entry, bson_t *ops,
                      shl_status_t *st);

/*
 * shl_oplog_apply_inner_ops --
 *     Apply the ops of an applyOps array ('i' upsert, 'u' replace, 'd' delete by _id, 'c'
 *     create / createIndexes of a collection the transaction created) in 'txn' with the
 *     document writes of write.h (so a multi-mode txn collects them again), each in the
 *     collection its 'ui' names (missing ones are skipped; one a 'c' op of the same array
 *     created is pending in 'txn'). Errors: BadValue for a malformed op; storage errors.
 */
int shl_oplog_apply_inner_ops(shl_storage_txn_t *txn, const bson_t *ops, shl_status_t *st);

/*
 * shl_oplog_truncate --
 *     Remove the oldest entries while the oplog holds more than 'max_bytes', never an entry
 *     with ts > 'upto' (the stable timestamp of the last checkpoint: recovery replays the
 *     entries after it) and never the newest entry. Runs in batches of small transactions;
 *     a write conflict ends the pass early (the next pass continues). *removed is the
 *     number of entries removed. Blocks on I/O. Errors: InternalError.
 */
int shl_oplog_truncate(shl_storage_engine_t *eng, int64_t max_bytes, uint64_t upto,
                       int64_t *removed, shl_status_t *st);

/*
 * shl_oplog_truncate_after --
 *     Remove every entry with ts > 'after' except the local database's (a member's own
 *     writes), in one transaction: a replica set member rolling back entries its set never
 *     had (repl/rollback.c). The caller makes sure nothing is applied past 'after'
 *     meanwhile. *removed is the number removed. Blocks on I/O. Errors: InternalError,
 *     WriteConflict.
 */
int shl_oplog_truncate_after(shl_storage_engine_t *eng, uint64_t after, int64_t *removed,
                             shl_status_t *st);

#endif
