/*
 * stored_doc.h -- small documents a process keeps about itself in one of its own
 * collections (the shard identity in admin.system.version, the user write blocking state
 * in config.user_writes_critical_sections): read one by _id, and store one durably.
 */
#ifndef SHL_STORAGE_STORED_DOC_H
#define SHL_STORAGE_STORED_DOC_H

#include <bson/bson.h>
#include <stdbool.h>

#include "base/status.h"
#include "storage/storage.h"

/*
 * shl_stored_doc_load --
 *     The document of collection 'ns' whose _id is the string 'id', read in a snapshot of its own:
 *     *found, and a copy in 'out' (always initialised; destroy it). A collection that does
 *     not exist holds nothing (*found false, no error). Errors: as shl_doc_find_by_id.
 */
int shl_stored_doc_load(shl_storage_engine_t *eng, const char *ns, const char *id, bson_t *out,
                        bool *found, shl_status_t *st);

/*
 * shl_stored_doc_store --
 *     Make the document of 'ns' with doc's _id equal 'doc' (inserted or replaced, with its
 *     oplog entry; nothing written when it is equal already), creating 'ns' if it does not
 *     exist, in a write unit of its own retried on WriteConflict; then wait, without the
 *     collection lock, until the write is durable, so it survives a crash once this
 *     returns. Errors: BadValue (doc without _id), NamespaceNotFound (dropped
 *     concurrently), and those of the write and of shl_storage_wait_durable.
 */
int shl_stored_doc_store(shl_storage_engine_t *eng, const char *ns, const bson_t *doc,
                         shl_status_t *st);

#endif
