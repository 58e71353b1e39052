/*
 * index.h -- secondary indexes in `index-<n>` tables: key = KeyString bytes
 * (bson/keystring.h, MongoDB's order-preserving encoding), value = RecordId. A unique
 * index (including _id) stores the key alone and refuses a second RecordId with
 * DuplicateKey; a non-unique index appends the RecordId to the key. Key generation is
 * a pluggable object per index (shl_keygen_t) so multikey/sparse/partial/hashed
 * generators can be added by the query layer. DESIGN.md section 5.
 *
 * Versioned layout (shl_index_t.versioned: the _id index of a collection created with
 * SHL_COLL_OPT_VERSIONED, config.transactions): unique, but each entry is
 * key || RecordId(-rid) -> rid, so every version of a document is its own WiredTiger key,
 * inserted once and removed once (shl_doc_upsert_derived; the record of a version is
 * rewritten in place a few times before the next one), and under one key the newest
 * version (highest RecordId) sorts first. A lookup seeks to the key and takes the first
 * live entry: the removed older versions sort after it and are never stepped over (O(log n)
 * however many are still kept for the snapshot history window). Uniqueness on insert is a
 * lookup of the live entry, not a WiredTiger duplicate key: writers of one _id must be
 * serialized by the caller (the session catalog's checkout does it for config.transactions);
 * an update or delete of the live entry conflicts as usual.
 */
#ifndef SHL_STORAGE_INDEX_H
#define SHL_STORAGE_INDEX_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "storage/catalog.h"
#include "storage/storage.h"

/* ---------------------------------------------------------------------------------
 * Key sets and key generators
 * ------------------------------------------------------------------------------ */

/* A set of index keys (byte strings, KeyString without RecordId). Caller's storage. */
typedef struct shl_keyset {
    uint8_t *buf; /* the keys' bytes, back to back */
    size_t len, cap;
    size_t *offs; /* key i = buf[offs[i] .. offs[i+1]), offs[n] == len */
    size_t n, ncap;
    /* Bit i (63: i >= 63): key field i's path went through an array in a document whose
     * keys were generated into the set (MongoDB's multikey path; cleared with the keys). */
    uint64_t array_paths;
    /* Numeric BSON types indexed (KeyString keeps none): for key field i < 15, bit
     * 4*i + 0 int32, 1 int64, 2 double, 3 decimal128 (SHL_NUM_TYPE_BIT). */
    uint64_t num_types;
} shl_keyset_t;

/* Bit of numeric type 't' (0 int32, 1 int64, 2 double, 3 decimal) of key field 'i' in a
 * num_types mask; 0 for fields the mask does not track (i >= 15). Bit 63 of an index's
 * mask (shl_index_t.num_types) means "unknown: any type". */
#define SHL_NUM_TYPES_UNKNOWN (1ull << 63)
#define SHL_NUM_TYPE_BIT(i, t) ((i) < 15 ? 1ull << (4 * (i) + (t)) : 0)

void shl_keyset_init(shl_keyset_t *ks);
void shl_keyset_cleanup(shl_keyset_t *ks);
void shl_keyset_clear(shl_keyset_t *ks);
/* shl_keyset_add -- append a copy of key bytes [key, key+len). Duplicates are allowed. */
void shl_keyset_add(shl_keyset_t *ks, const uint8_t *key, size_t len);
/* shl_keyset_key -- key i (borrowed, valid until the set changes); *len its length. */
const uint8_t *shl_keyset_key(const shl_keyset_t *ks, size_t i, size_t *len);
/* shl_keyset_sort_unique -- sort bytewise and remove duplicates (multikey generators). */
void shl_keyset_sort_unique(shl_keyset_t *ks);

/*
 * shl_keygen_t -- turns a document into the keys of one index. 'gen' appends zero
 * (sparse/partial: not indexed), one, or several (multikey) keys to 'keys'; it must
 * be thread-safe (called concurrently on one index) and deterministic. Errors from
 * 'gen' fail the write (e.g. CannotIndexParallelArrays 171). 'dup_key_value' builds
 * the keyValue document of a DuplicateKey error for 'doc' ({a: 1, b: "x"} with the
 * key pattern's field names). 'destroy' frees the object (state included).
 */
struct shl_keygen {
    int (*gen)(const shl_keygen_t *kg, const bson_t *doc, shl_keyset_t *keys, shl_status_t *st);
    void (*dup_key_value)(const shl_keygen_t *kg, const bson_t *doc, bson_t *out);
    void (*destroy)(shl_keygen_t *kg);
    void *state;
};

/*
 * shl_keygen_default_factory --
 *     The built-in generator (a shl_keygen_factory_fn): key patterns whose values are
 *     numbers (1 ascending, -1 descending), single or compound, with dotted paths; a
 *     missing field indexes as null; sparse: true skips documents missing every key
 *     field; an array on a key path makes one key per element (MongoDB multikey, one
 *     array per key; two arrays on different fields: CannotIndexParallelArrays).
 *     Errors: CannotCreateIndex (67) for other index kinds ("hashed", "text", ...)
 *     and for partialFilterExpression (needs the matcher: the query layer's factory).
 */
int shl_keygen_default_factory(const bson_t *spec, shl_keygen_t **out, shl_status_t *st);

/*
 * shl_index_keys_for_doc --
 *     Run 'idx''s generator on 'doc': 'keys' (initialised by the caller) receives the
 *     sorted, de-duplicated keys (without RecordId). Errors: the generator's.
 */
int shl_index_keys_for_doc(const shl_index_t *idx, const bson_t *doc, shl_keyset_t *keys,
                           shl_status_t *st);

/*
 * shl_index_dup_key_status --
 *     Fill 'st' with MongoDB's DuplicateKey (11000) error for 'doc' colliding in 'idx'
 *     of 'ns': "E11000 duplicate key error collection: db.c index: _id_ dup key:
 *     { _id: 1 }" with extra info {keyPattern: {...}, keyValue: {...}}. Returns 11000.
 */
int shl_index_dup_key_status(const char *ns, const shl_index_t *idx, const bson_t *doc,
                             shl_status_t *st);

/* ---------------------------------------------------------------------------------
 * Reads
 * ------------------------------------------------------------------------------ */

/*
 * shl_index_id_key --
 *     The key (KeyString) of value 'id' in _id index 'idx' (its collation's sort keys for
 *     strings; 'idx' NULL: simple) into 'keys' (cleared first), so callers can look a
 *     document up by _id with shl_index_lookup. Under a non-simple collation the lookup finds
 *     the document whose _id equals 'id' under it (the index is unique under it).
 */
void shl_index_id_key(const shl_index_t *idx, const bson_value_t *id, shl_keyset_t *keys);

/*
 * shl_index_lookup --
 *     The RecordId of the first entry whose key (without RecordId) equals
 *     [key, key+len), in 'txn''s snapshot: for a unique index the one entry (versioned:
 *     the live version, found without walking over removed ones).
 *     *found false when there is none. Errors: InternalError.
 */
int shl_index_lookup(shl_storage_txn_t *txn, const shl_index_t *idx, const uint8_t *key, size_t len,
                     int64_t *rid, bool *found, shl_status_t *st);

/*
 * shl_doc_find_by_id --
 *     Find the document whose _id equals 'id' through coll's _id index: *found,
 *     *rid (may be NULL) and a copy in 'out' (always initialised; destroy it).
 *     Errors: InternalError.
 */
int shl_doc_find_by_id(shl_storage_txn_t *txn, const shl_collection_t *coll, const bson_value_t *id,
                       bson_t *out, int64_t *rid, bool *found, shl_status_t *st);

/*
 * A key bound: NULL data means unbounded on that side. Bounds compare bytewise with
 * the stored keys (which, for non-unique indexes, end with the RecordId); build them
 * with the KeyString API, e.g. {a: {$gte: 5, $lt: 9}} on {a: 1} is
 * [KS(5), KS(9)); "all keys with prefix P" needs an end bound sorting after every
 * key that starts with P (KeyString's "exclusive after" discriminator).
 */
typedef struct shl_key_bound {
    const uint8_t *data;
    size_t len;
} shl_key_bound_t;

typedef struct shl_index_cursor shl_index_cursor_t;

/*
 * shl_index_cursor_open --
 *     Iterate entries of 'idx' with start <= key < end, ascending when 'forward',
 *     else descending (from just below 'end' down to 'start'). Borrows 'txn' and
 *     'idx' (keep the collection reference until closed). Errors: InternalError.
 */
int shl_index_cursor_open(shl_storage_txn_t *txn, const shl_index_t *idx,
                          const shl_key_bound_t *start, const shl_key_bound_t *end, bool forward,
                          shl_index_cursor_t **out, shl_status_t *st);

/*
 * shl_index_cursor_next --
 *     The next entry: *rid its RecordId, *key and *key_len the stored key bytes (borrowed
 *     until the next call; may be NULL), *eof true at the end. Errors: InternalError.
 */
int shl_index_cursor_next(shl_index_cursor_t *c, int64_t *rid, const uint8_t **key, size_t *key_len,
                          bool *eof, shl_status_t *st);

/* shl_index_cursor_close -- close and free. NULL: no-op. */
void shl_index_cursor_close(shl_index_cursor_t *c);

#endif
