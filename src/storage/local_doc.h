/*
 * local_doc.h -- a member's own replication state (its configuration, its last vote, its
 * minValid / initial-sync flag: MongoDB's local.system.replset, local.replset.election,
 * local.replset.minvalid), kept in the logged `_local` table: written without a timestamp
 * and without an oplog entry, durable in WiredTiger's log when the store returns, restored
 * by WiredTiger's own log recovery after a crash. Nothing the set replicates can displace
 * it (docs/design/replication.md, "Local writes").
 */
#ifndef SHL_STORAGE_LOCAL_DOC_H
#define SHL_STORAGE_LOCAL_DOC_H

#include <bson/bson.h>
#include <stdbool.h>

#include "base/status.h"
#include "storage/storage.h"

/*
 * shl_local_doc_load --
 *     The document stored under ('ns', string _id 'id'): *found, and a copy in 'out' (always
 *     initialised; destroy it). Reads the newest committed value (no timestamp).
 *     Errors: InternalError (WiredTiger, or a stored value that is not BSON).
 */
int shl_local_doc_load(shl_storage_engine_t *eng, const char *ns, const char *id, bson_t *out,
                       bool *found, shl_status_t *st);

/*
 * shl_local_doc_store --
 *     Make the document under ('ns', doc's string _id) equal 'doc', in a WiredTiger
 *     transaction of its own committed with its log record synced: it survives kill -9
 *     once this returns. Concurrent stores of one key: the last to commit wins (callers
 *     serialise what must be ordered). Errors: BadValue (doc without a string _id),
 *     InternalError (WiredTiger).
 */
int shl_local_doc_store(shl_storage_engine_t *eng, const char *ns, const bson_t *doc,
                        shl_status_t *st);

#endif
