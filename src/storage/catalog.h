/*
 * catalog.h -- the durable catalog (`_catalog` table: namespace -> UUID, record store
 * ident, options, index specs with their idents) and its in-memory form: one
 * immutable, refcounted shl_collection_t per collection, swapped on DDL. Every DDL
 * writes its oplog 'c' entry in the same WiredTiger transaction as the catalog change.
 * DESIGN.md section 5; docs/design/storage.md.
 */
#ifndef SHL_STORAGE_CATALOG_H
#define SHL_STORAGE_CATALOG_H

#include <bson/bson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/namespace.h"
#include "base/status.h"
#include "bson/collation.h"
#include "storage/storage.h"

#define SHL_OPLOG_NS "local.oplog.rs"

/*
 * SHL_COLL_OPT_VERSIONED -- create option (shl_catalog_create_collection, not stored in the
 * collection's options: listCollections does not show it; the create oplog entry carries it
 * so replay builds the same layout): {versionedRecords: true} makes a versioned collection,
 * for tables of one small document per key rewritten at a high rate (config.transactions).
 * Its _id index is versioned (shl_index_t.versioned) and shl_doc_upsert_derived rewrites a
 * version in place a few times, then stores the next version of the document under a new
 * RecordId and a new _id index entry, removing the old ones in the same transaction: no
 * WiredTiger key takes more than a handful of writes, so no key accumulates an update chain
 * over the snapshot history window. Other
 * writes (insert/update/delete) behave as in any collection.
 */
#define SHL_COLL_OPT_VERSIONED "versionedRecords"

/*
 * One index of a collection. Immutable while the collection snapshot that holds it
 * is referenced.
 */
typedef struct shl_index {
    char *name;              /* "_id_", "a_1" */
    bson_t *spec;            /* normalized: {v: 2, key: {...}, name: "...", <options>} */
    bson_t *key_pattern;     /* spec.key */
    bool unique;             /* true for _id_ and unique: true */
    bool is_id;              /* the _id index */
    /* Key layout (immutable). A versioned index (the _id index of a collection created with
     * SHL_COLL_OPT_VERSIONED; catalog entry "versioned": true) is unique but stores each
     * entry as key || RecordId(-rid), value rid: every version of a document is a new entry
     * and the newest sorts first under its key (index.h "Versioned layout"). rid_suffix:
     * stored keys end with a RecordId (non-unique or versioned); decode them with a rid. */
    bool versioned;
    bool rid_suffix;
    char *ident;             /* "index-7" */
    char *uri;               /* "table:index-7" */
    shl_keygen_t *keygen;    /* from the engine's keygen factory */
    shl_collator_t *collator; /* spec.collation (a reference); NULL: simple */
    bool multikey;           /* some committed document had an array on a key path (never cleared);
                                stored as "multikey" in the catalog entry */
    uint64_t multikey_paths; /* bit i (63: i >= 63): key field i's path held an array
                                (MongoDB's multiKeyPaths, per field; "multikeyPaths") */
    uint64_t num_types;      /* numeric types ever indexed per key field (index.h
                                SHL_NUM_TYPE_BIT; SHL_NUM_TYPES_UNKNOWN), "numTypes" */
    /* What the durable catalog entry holds of the two above. The in-memory ones may be
     * ahead: a write publishes its flags before it commits (even if it then aborts), so
     * writers decide whether the entry needs rewriting from these. */
    uint64_t durable_multikey_paths;
    uint64_t durable_num_types;
    /* The timestamp of the createIndexes that built it in this process's life (0: older, or
     * loaded at start-up, when no history before start-up is kept): a read at an earlier
     * timestamp sees none of its keys, so it must not use it (MongoDB's minimum visible
     * snapshot; shl_collection_visible_at). In memory only. */
    uint64_t min_visible_ts;
} shl_index_t;

struct shl_rs_state; /* private: record id counter and count/size, shared by snapshots */

/*
 * shl_collection_t -- an immutable snapshot of one collection's metadata. Take a
 * reference with shl_collection_ref, drop it with shl_collection_release. A DDL
 * builds a new snapshot and swaps it in; holders of the old one keep a consistent
 * (if stale) view. Compare uuids to notice a drop/re-create between getMores.
 */
struct shl_collection {
    atomic_int refs;
    char *ns;              /* "db.coll" */
    char *db;              /* "db" */
    const char *coll_name; /* points into ns after the first '.' */
    uint8_t uuid[16];      /* UUID (binary subtype 4) */
    bson_t *options;       /* create options, without 'create' (e.g. {capped: true, size: 4096}) */
    char *ident;           /* "collection-3"; "oplog" for local.oplog.rs */
    char *uri;             /* "table:collection-3" */
    bool is_oplog;         /* local.oplog.rs: read-only to users, record id = ts */
    bool capped;           /* options.capped */
    int64_t capped_size;   /* options.size in bytes, 0 if none */
    int64_t capped_max;    /* options.max documents, 0 if none */
    size_t nindexes;
    shl_index_t **indexes;   /* indexes[0] is _id_ (none for the oplog) */
    struct shl_rs_state *rs; /* private */
    /* The timestamp of the create (or the rename to this name) that made this catalog entry
     * in this process's life (0: older, or loaded at start-up, when no history before
     * start-up is kept): a read at an earlier timestamp would read this collection's table as
     * if it were the one the name had then, so it is refused (shl_collection_check_visible;
     * MongoDB's collection minimum visible snapshot). Kept by every later DDL on the entry. */
    uint64_t min_visible_ts;
};

/* shl_collection_versioned -- whether 'c' was created with SHL_COLL_OPT_VERSIONED. */
static inline bool
shl_collection_versioned(const shl_collection_t *c)
{
    return c->nindexes > 0 && c->indexes[0]->versioned;
}

/* shl_collection_ref -- take a reference (thread-safe); returns 'c'. */
shl_collection_t *shl_collection_ref(shl_collection_t *c);

/* shl_collection_release -- drop a reference; the last one frees. NULL: no-op. */
void shl_collection_release(shl_collection_t *c);

/*
 * shl_collection_visible_at --
 *     The collection as a read at timestamp 'ts' (0: latest) may use it: 'c' itself (a new
 *     reference) unless some index was built after 'ts', else a copy without those indexes
 *     (one reference; indexes are rebuilt from their specs). Errors: SnapshotUnavailable
 *     (shl_collection_check_visible); from the keygen factory.
 */
int shl_collection_visible_at(shl_storage_engine_t *eng, shl_collection_t *c, uint64_t ts,
                              shl_collection_t **out, shl_status_t *st);

/*
 * shl_collection_check_visible --
 *     Whether a read at timestamp 'ts' (0: latest, always fine) may read 'c': refused with
 *     SnapshotUnavailable (246) "Unable to read from a snapshot due to pending collection
 *     catalog changes; please retry the operation. Snapshot timestamp is Timestamp(s, i).
 *     Collection minimum is Timestamp(s, i)" when 'c' was created or renamed after 'ts'
 *     (shl_collection_t.min_visible_ts), as MongoDB answers. NULL 'c': fine.
 */
int shl_collection_check_visible(const shl_collection_t *c, uint64_t ts, shl_status_t *st);

/* shl_collection_find_index -- the index named 'name', or NULL. Borrowed from 'c'. */
const shl_index_t *shl_collection_find_index(const shl_collection_t *c, const char *name);

/*
 * shl_collection_find_index_by_key -- the first index whose key pattern equals
 * 'key_pattern' field by field (hint by pattern), or NULL. Borrowed from 'c'.
 */
const shl_index_t *shl_collection_find_index_by_key(const shl_collection_t *c,
                                                    const bson_t *key_pattern);

/*
 * shl_collection_num_records / shl_collection_data_size --
 *     Committed document count and total BSON bytes (collStats count/size, count
 *     with no filter). Exact as of the last commit; thread-safe atomics.
 */
int64_t shl_collection_num_records(const shl_collection_t *c);
int64_t shl_collection_data_size(const shl_collection_t *c);

/*
 * shl_collection_set_counts --
 *     Correct the count and size (validate, which counted them holding the collection
 *     lock exclusively). Persisted with the next checkpoint (the _sizes table).
 */
void shl_collection_set_counts(const shl_collection_t *c, int64_t num_records, int64_t data_size);

/*
 * shl_collection_commit_seq / shl_collection_wait_commit --
 *     Commit notification for tailable/awaitData cursors. The sequence moves after
 *     each commit that wrote the collection (shared across snapshots and renames; for
 *     local.oplog.rs after every write transaction ends, so the no-holes point may have
 *     moved). Read the sequence, look for data, and if there is none wait: wait_commit
 *     returns true as soon as the sequence differs from 'seen', false at
 *     'deadline_mono_us' (shl_clock_mono_us time). Hold no lock of 1-2 while waiting.
 */
uint64_t shl_collection_commit_seq(const shl_collection_t *c);
bool shl_collection_wait_commit(const shl_collection_t *c, uint64_t seen, int64_t deadline_mono_us);

/*
 * shl_storage_ident_size --
 *     Bytes on disk of a table ident (the .wt file), for storageSize/indexSizes/
 *     sizeOnDisk. 0 if unknown.
 */
int64_t shl_storage_ident_size(shl_storage_engine_t *eng, const char *ident);

/* ---------------------------------------------------------------------------------
 * Lookups (no locks held after return; use shl_storage_coll_acquire to exclude DDL)
 * ------------------------------------------------------------------------------ */

/* shl_catalog_get -- a reference to the current metadata of 'ns', or NULL. Thread-safe. */
shl_collection_t *shl_catalog_get(shl_storage_engine_t *eng, const char *ns);

/* shl_catalog_get_by_uuid -- the same by UUID, or NULL. */
shl_collection_t *shl_catalog_get_by_uuid(shl_storage_engine_t *eng, const uint8_t uuid[16]);

/*
 * shl_catalog_list --
 *     References to every collection of database 'db' (all databases when NULL),
 *     sorted by namespace; includes local.oplog.rs. Free the array and the
 *     references with shl_catalog_list_free. Thread-safe, a consistent view.
 */
void shl_catalog_list(shl_storage_engine_t *eng, const char *db, shl_collection_t ***out,
                      size_t *n);
void shl_catalog_list_free(shl_collection_t **list, size_t n);

/*
 * shl_catalog_list_databases --
 *     Names of databases that have at least one collection, sorted; *out is a
 *     NULL-terminated array freed with bson_strfreev.
 */
void shl_catalog_list_databases(shl_storage_engine_t *eng, char ***out);

/*
 * shl_catalog_raise_min_visible --
 *     Make collection 'ns' (when it is still the one with 'uuid') invisible to reads at
 *     timestamps below 'ts' (shl_collection_t.min_visible_ts; never lowered): a collection a
 *     transaction created becomes visible at the transaction's commit timestamp, not at its
 *     own create's. In memory only; a new snapshot is swapped in (compare-and-swap, so a
 *     concurrent swap of the entry is kept).
 */
void shl_catalog_raise_min_visible(shl_storage_engine_t *eng, const char *ns,
                                   const uint8_t uuid[16], uint64_t ts);

/* ---------------------------------------------------------------------------------
 * DDL. Each call takes the database lock shared (exclusive for drop_database) and
 * the collection lock(s) exclusive, runs one WiredTiger transaction that changes
 * the catalog, creates tables/builds indexes and appends the oplog 'c' entry, retries
 * it on WriteConflict, then swaps the in-memory snapshot. The caller must not hold a
 * handle (shl_storage_coll_acquire) on the namespaces involved. *ts (may be NULL)
 * receives the 'c' entry's timestamp, for operationTime and write concern. WT tables
 * of dropped collections/indexes are removed after a checkpoint covers the drop.
 * ------------------------------------------------------------------------------ */

/*
 * shl_catalog_create_collection --
 *     Create 'ns' with its _id index. 'options' (may be NULL) is the create command
 *     minus the command name and generic arguments; stored as-is and written in the
 *     'c' entry {create: coll, <options>, idIndex: {v: 2, key: {_id: 1}, name: "_id_"}}.
 *     capped: true requires a positive size (bytes) and allows max (documents); inserts
 *     then delete the oldest documents in the same transaction. 'uuid' (may be NULL)
 *     forces the UUID (replay, later migrations); else a random v4 UUID.
 *     Errors: NamespaceExists (48) "Collection db.c already exists." (caller decides
 *     whether that is an error), InvalidNamespace (73), InvalidOptions (72) for bad
 *     capped options, IllegalOperation (20) for local.oplog.rs.
 */
int shl_catalog_create_collection(shl_storage_engine_t *eng, const char *ns, const bson_t *options,
                                  const uint8_t *uuid, uint64_t *ts, shl_status_t *st);

/*
 * shl_catalog_create_collection_in_txn / shl_catalog_create_index_in_txn --
 *     create / createIndexes inside multi-document transaction 'txn' (multi mode; MongoDB
 *     7.0's DDL in a transaction): the `_catalog` entry is written in 'txn' and its new
 *     metadata is pending in it -- visible to the thread that runs the transaction's
 *     statements (shl_catalog_set_txn_view), installed for everyone when 'txn' commits,
 *     gone with its tables if it aborts -- and the 'c' op ({op: "c", ns: "<db>.$cmd", ui,
 *     o: {create: ...} / {createIndexes: ...}}) is collected with the transaction's other ops
 *     for its applyOps entry, which replays it (shl_oplog_apply_inner_ops). The index is
 *     built in 'txn' from the documents it sees. Takes the database lock shared and the
 *     collection lock exclusively while it runs. Errors: as the committed forms; a
 *     WriteConflict (112) when another operation created the namespace meanwhile.
 */
int shl_catalog_create_collection_in_txn(shl_storage_txn_t *txn, const char *ns,
                                         const bson_t *options, shl_status_t *st);
int shl_catalog_create_index_in_txn(shl_storage_txn_t *txn, const char *ns, const bson_t *spec,
                                    bool *created, shl_status_t *st);

/*
 * shl_catalog_set_txn_view --
 *     The calling thread runs a statement of the multi-document transaction '*txn' (NULL:
 *     none; '*txn' may go NULL when it ends): shl_catalog_get / _get_by_uuid answer the
 *     namespaces it created (pending, above) from it first, so its own statements use them
 *     and nobody else sees them before the commit. Thread-local; clear it at the statement's
 *     end.
 */
void shl_catalog_set_txn_view(shl_storage_txn_t *const *txn);

/*
 * shl_catalog_drop_collection --
 *     Drop 'ns': 'c' entry {drop: coll} (o2 {numRecords: n}). Errors: NamespaceNotFound
 *     (26) "ns not found"; IllegalOperation for local.oplog.rs.
 */
int shl_catalog_drop_collection(shl_storage_engine_t *eng, const char *ns, uint64_t *ts,
                                shl_status_t *st);

/*
 * shl_catalog_rename_collection --
 *     Rename 'from' to 'to' in the same database (the record store and indexes keep
 *     their idents; the UUID is kept). If 'to' exists: with drop_target it is dropped
 *     in the same transaction, else NamespaceExists (48) "target namespace exists".
 *     'c' entry {renameCollection: from, to: to, stayTemp: false[, dropTarget: uuid]}.
 *     Errors: NamespaceNotFound (26) "source namespace does not exist",
 *     IllegalOperation (20) "Can't rename a collection to itself" / across databases
 *     (the caller may word it), InvalidNamespace.
 */
int shl_catalog_rename_collection(shl_storage_engine_t *eng, const char *from, const char *to,
                                  bool drop_target, uint64_t *ts, shl_status_t *st);

/*
 * shl_catalog_create_index --
 *     Add the index described by 'spec' ({key: {...}, name: "...", unique?, ...}; the
 *     stored spec is normalized to {v: 2, key, name, <other fields in order>}) to
 *     existing collection 'ns' and build it from the current documents, holding the
 *     collection lock exclusively throughout: on a non-empty collection the keys go in
 *     in batches of about SHL_INDEX_BUILD_BATCH_KEYS, each its own transaction, and the
 *     index is published (catalog entry + 'c' entry) by a last one; an empty
 *     collection, or replay, builds in the DDL's transaction. A crash before the
 *     publication leaves only an unnamed table, which recovery drops (storage.md
 *     "Index builds"). *created (may be NULL) is false when an index with the same name
 *     and an identical spec already exists (not an error, as createIndexes' "all
 *     indexes already exist"). 'c' entry {createIndexes: coll, <spec>}.
 *     Errors: NamespaceNotFound (26); DuplicateKey (11000) if a unique index finds
 *     duplicates while building; IndexKeySpecsConflict (86) same name, other
 *     spec; IndexOptionsConflict (85) same key pattern, other name; CannotCreateIndex
 *     (67) from the keygen factory; BadValue/TypeMismatch for a malformed spec.
 */
int shl_catalog_create_index(shl_storage_engine_t *eng, const char *ns, const bson_t *spec,
                             bool *created, uint64_t *ts, shl_status_t *st);

/*
 * shl_collection_has_index --
 *     Whether 'c' already has an index named as 'spec' with an identical spec, so that
 *     shl_catalog_create_index of 'spec' would change nothing (*created false). A malformed
 *     spec is not there. Reads the borrowed snapshot 'c' only; takes no lock.
 */
bool shl_collection_has_index(const shl_collection_t *c, const bson_t *spec);

/*
 * shl_catalog_drop_index --
 *     Remove index 'name' from 'ns'. 'c' entry {dropIndexes: coll, index: name} with
 *     o2 = the dropped spec. Errors: NamespaceNotFound (26); IndexNotFound (27)
 *     "index not found with name [name]"; InvalidOptions (72) "cannot drop _id index".
 */
int shl_catalog_drop_index(shl_storage_engine_t *eng, const char *ns, const char *name,
                           uint64_t *ts, shl_status_t *st);

/*
 * shl_catalog_drop_database --
 *     Drop every collection of 'db' ({drop: coll} entries), then write the
 *     {dropDatabase: 1} entry; all in one transaction, under the database lock held
 *     exclusively. Dropping a database that does not exist succeeds without writing.
 *     Errors: IllegalOperation (20) for "local".
 */
int shl_catalog_drop_database(shl_storage_engine_t *eng, const char *db, uint64_t *ts,
                              shl_status_t *st);

/*
 * shl_catalog_coll_mod --
 *     collMod on collection 'ns' ('mod' is checked by the caller): validator,
 *     validationLevel and validationAction replace (or add) those fields of the
 *     collection's options; index {name | keyPattern, expireAfterSeconds?, hidden?}
 *     changes that index's spec (expireAfterSeconds set -- it may make a single-field index
 *     a TTL index; hidden: true sets the field, false removes it). Nothing is rebuilt: the
 *     index keeps its table and keys. 'c' entry {collMod: coll, <the fields>, index: {name,
 *     <what changed>}} (a hidden value that changes nothing is left out of it and of the
 *     reply). *info (always initialised, caller destroys) receives the reply's
 *     expireAfterSeconds_old (when there was one) / expireAfterSeconds_new and hidden_old /
 *     hidden_new (only when it changed). Errors: NamespaceNotFound (26); IndexNotFound (27)
 *     "cannot find index <name|keyPattern> for ns <ns>"; InvalidOptions (72) neither name
 *     nor keyPattern, expireAfterSeconds on _id or on a compound index; BadValue (2) "can't
 *     hide _id index"; IllegalOperation for local.oplog.rs.
 */
int shl_catalog_coll_mod(shl_storage_engine_t *eng, const char *ns, const bson_t *mod, bson_t *info,
                         uint64_t *ts, shl_status_t *st);

#endif
