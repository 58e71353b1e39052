/*
 * write.h -- document writes inside a write unit (a shl_storage_txn_t): each one
 * changes the record, every index and appends its oplog entry in MongoDB's format, all
 * in the same WiredTiger transaction, stamped with a fresh cluster-time timestamp, so
 * after a crash a document, its index entries and its oplog entry exist together or
 * not at all. DESIGN.md section 5 "The oplog is the journal".
 */
#ifndef SHL_STORAGE_WRITE_H
#define SHL_STORAGE_WRITE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "storage/catalog.h"
#include "storage/storage.h"

/* Per-write options; NULL means none. */
typedef struct shl_write_opts {
    /*
     * Fields appended to the oplog entry after the standard ones (lsid, txnNumber,
     * stmtId, prevOpTime for retryable writes; fromMigrate ...). Borrowed.
     */
    const bson_t *oplog_extra;
    /* Receives the timestamp of the write's own oplog entry when not NULL (a capped
     * insert's trimming deletes come after it with timestamps of their own). */
    uint64_t *ts;
    /* An update by operators or a pipeline (not a replacement): its 'u' entry's o is
     * MongoDB's {$v: 2, diff} (bson/update_diff.h), which change streams report as an update;
     * entries holding the whole document are replacements (docs/design/change_streams.md). */
    bool describe_update;
    /* A delete or an update by operators on a sharded collection: the document's shard key
     * fields and _id (MongoDB's documentKey), written as the 'd' entry's o or the $v:2 'u'
     * entry's o2 instead of {_id}, which change streams report. Must hold the document's _id.
     * Borrowed. */
    const bson_t *document_key;
} shl_write_opts_t;

/*
 * shl_storage_set_from_migrate --
 *     While on, the oplog entries of the calling thread's document writes carry
 *     fromMigrate: true (a chunk migration recipient's clone and catch-up writes, which
 *     change streams hide). Thread-local; the caller turns it off again.
 */
void shl_storage_set_from_migrate(bool on);

/* Where updates and deletes of a collection with changeStreamPreAndPostImages keep the
 * document before the write (MongoDB's name and record format; write.c write_pre_image). The
 * data node creates it at startup; without it no pre-images are kept. */
#define SHL_PREIMAGES_NS "config.system.preimages"

/*
 * shl_txn_write_pre_images --
 *     The pre-images kept with the ops 'src' collected as a multi-document transaction
 *     (shl_storage_txn_ops; ops on collections with changeStreamPreAndPostImages), written
 *     in 'txn' (may be 'src' after multi mode is off) to config.system.preimages as
 *     {_id: {nsUUID, ts, applyOpsIndex: the op's index in the transaction}, operationTime,
 *     preImage}, at the timestamp of txn's last write: call it right after appending the
 *     transaction's last applyOps entry, at 'ts'. Recovery and secondaries replaying that
 *     entry write the same records. Errors: WriteConflict.
 */
int shl_txn_write_pre_images(shl_storage_txn_t *txn, const shl_storage_txn_t *src, uint64_t ts,
                             shl_status_t *st);

/*
 * shl_doc_insert --
 *     Insert 'doc' (must have an _id; the caller adds one and validates it) into
 *     'coll': record, index keys, oplog {op: 'i', ns, ui, o: doc, o2: {_id}, ts, t, v: 2,
 *     wall}. *rid (may be NULL) receives the new RecordId. For a capped collection the
 *     oldest documents past size/max are deleted in the same transaction (with 'd'
 *     entries). Errors: DuplicateKey (11000) with MongoDB's message and
 *     keyPattern/keyValue (the txn is still usable: nothing of this insert stayed);
 *     WriteConflict (112) -- abort the txn and retry; key generator errors;
 *     IllegalOperation (20) for local.oplog.rs; BadValue (2) if doc has no _id.
 */
int shl_doc_insert(shl_storage_txn_t *txn, const shl_collection_t *coll, const bson_t *doc,
                   const shl_write_opts_t *wo, int64_t *rid, shl_status_t *st);

/*
 * shl_doc_update --
 *     Replace record 'rid' with 'new_doc' (same _id; the caller checks _id did not
 *     change): the record, the index delta (keys of 'old_doc' not in 'new_doc' removed,
 *     new ones added) and oplog {op: 'u', o: new_doc, o2: {_id}} -- the replacement
 *     form -- or, with wo->describe_update, {op: 'u', o: {$v: 2, diff}, o2: documentKey}
 *     (replayed by applying the diff). 'old_doc' is the current document as read in this
 *     txn (NULL: read it here). Errors: DuplicateKey (nothing of this update stayed),
 *     WriteConflict, NoSuchKey (4) if 'rid' does not exist.
 */
int shl_doc_update(shl_storage_txn_t *txn, const shl_collection_t *coll, int64_t rid,
                   const bson_t *old_doc, const bson_t *new_doc, const shl_write_opts_t *wo,
                   shl_status_t *st);

/*
 * shl_doc_delete --
 *     Delete record 'rid', its index keys, and append oplog {op: 'd', o: {_id}}.
 *     'old_doc' as in shl_doc_update. Errors: WriteConflict, NoSuchKey.
 */
int shl_doc_delete(shl_storage_txn_t *txn, const shl_collection_t *coll, int64_t rid,
                   const bson_t *old_doc, const shl_write_opts_t *wo, shl_status_t *st);

/*
 * shl_doc_upsert_derived --
 *     Make the document with doc's _id in 'coll' equal 'doc' (replace or insert), at the
 *     timestamp of the txn's last write and without an oplog entry of its own: for tables
 *     whose content follows from another entry of the same transaction and that recovery
 *     re-derives from it (config.transactions after a retryable write's entry, through
 *     shl_storage_options_t.replay_derive). The txn must have written (or be replaying) an
 *     entry already. 'rid' (may be NULL) is a hint in and out: the record that held the
 *     document last time (0: unknown), and where it is now. With a hint, a collection whose
 *     only index is _id has the record replaced in place, without the _id lookup and key
 *     maintenance (its _id key cannot change); a record gone since falls back to the full
 *     upsert. In a versioned collection (catalog.h SHL_COLL_OPT_VERSIONED) a version is
 *     replaced in place at most a few times (write.c SHL_VERSION_IN_PLACE_MAX); the write
 *     after that inserts it under a new RecordId and _id index entry and removes the old
 *     record and entry, so *rid changes then; with a valid hint and only the _id index there
 *     is no lookup at all. Errors: as shl_doc_update /
 *     shl_doc_insert; BadValue without _id.
 */
int shl_doc_upsert_derived(shl_storage_txn_t *txn, const shl_collection_t *coll, const bson_t *doc,
                           int64_t *rid, shl_status_t *st);

/*
 * shl_oplog_append --
 *     Append an arbitrary entry in this txn with a fresh timestamp: op 'n' (no-op,
 *     ns "" and o {msg: ...}) or 'c' (ns "db.$cmd", o the command); 'uuid' (may be
 *     NULL) becomes 'ui', 'o2' may be NULL. Not applied to any collection: a 'c'
 *     entry written here is replayed by recovery, so only use command forms that
 *     recovery knows (see oplog.h) or 'n'. *ts (may be NULL) receives its timestamp.
 *     Errors: WriteConflict; BadValue for another 'op'.
 */
int shl_oplog_append(shl_storage_txn_t *txn, char op, const char *ns, const uint8_t *uuid,
                     const bson_t *o, const bson_t *o2, const shl_write_opts_t *wo, uint64_t *ts,
                     shl_status_t *st);

/*
 * shl_storage_txn_tick --
 *     Give the txn a fresh timestamp for writes that have no oplog entry of their
 *     own (raw record writes, tests). Returns it. Errors: InternalError.
 */
int shl_storage_txn_tick(shl_storage_txn_t *txn, uint64_t *ts, shl_status_t *st);

#endif
