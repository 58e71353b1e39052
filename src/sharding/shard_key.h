/*
 * shard_key.h -- shard key patterns ({a: 1}, {a: 1, "b.c": 1}, {a: "hashed"},
 * {a: 1, b: "hashed"}) as MongoDB 7.0's ShardKeyPattern validates and uses them: the key
 * of a document (dotted paths, missing fields as null, hashed fields hashed), the exact key
 * a query pins with equalities (for single-shard targeting), the key space's global
 * min/max, and the positional order of shard keys the routing table sorts by.
 */
#ifndef SHL_SHARDING_SHARD_KEY_H
#define SHL_SHARDING_SHARD_KEY_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

/*
 * shl_shard_key_pattern_t -- a validated pattern. Fields are read-only after init;
 * 'pattern' is an owned copy, 'paths[i]' the i-th field's dotted path.
 */
typedef struct shl_shard_key_pattern {
    bson_t pattern;
    size_t nfields;
    char **paths;
    int hashed; /* index of the "hashed" field, -1 if none */
} shl_shard_key_pattern_t;

/*
 * shl_shard_key_pattern_init --
 *     Validate 'pattern' and initialise 'p' (caller's storage; shl_shard_key_pattern_cleanup
 *     it, on success only). Rules and errors (BadValue, MongoDB's texts): not empty; no
 *     empty path, extra dot or empty part; each value is a number equal to 1 (truncated, as
 *     MongoDB's safeNumberInt) or the string "hashed", at most one "hashed" field.
 */
int shl_shard_key_pattern_init(shl_shard_key_pattern_t *p, const bson_t *pattern, shl_status_t *st);

/* shl_shard_key_pattern_cleanup -- free what init allocated. */
void shl_shard_key_pattern_cleanup(shl_shard_key_pattern_t *p);

/* shl_shard_key_pattern_is_hashed / _has_hashed_prefix -- a hashed field anywhere / first. */
bool shl_shard_key_pattern_is_hashed(const shl_shard_key_pattern_t *p);
bool shl_shard_key_pattern_has_hashed_prefix(const shl_shard_key_pattern_t *p);

/* shl_shard_key_global_min / _max -- *out = {f1: MinKey, f2: MinKey, ...} / MaxKey.
 * 'out' is initialised here; the caller destroys it. */
void shl_shard_key_global_min(const shl_shard_key_pattern_t *p, bson_t *out);
void shl_shard_key_global_max(const shl_shard_key_pattern_t *p, bson_t *out);

/*
 * shl_shard_key_is_shard_key --
 *     'key' has exactly the pattern's fields (looked up by name) and none is an array.
 */
bool shl_shard_key_is_shard_key(const shl_shard_key_pattern_t *p, const bson_t *key);

/*
 * shl_shard_key_normalize --
 *     *out = 'key' with its fields in pattern order; false (and *out empty) if 'key' is
 *     not a shard key of 'p'. 'out' is initialised here; the caller destroys it.
 */
bool shl_shard_key_normalize(const shl_shard_key_pattern_t *p, const bson_t *key, bson_t *out);

/*
 * shl_shard_key_check_storage --
 *     Whether 'key' may be stored as a chunk bound or split point: no missing value, no
 *     array, no regex, no $-prefixed field name inside an object. Errors: BadValue
 *     "Shard key element <elem> is not valid for storage".
 */
int shl_shard_key_check_storage(const bson_t *key, shl_status_t *st);

/*
 * shl_shard_key_doc_has_array --
 *     Whether a path of 'p' meets an array in 'doc' (on the way or at the end): exactly when
 *     shl_shard_key_extract_from_doc fails, without building or hashing the key.
 */
bool shl_shard_key_doc_has_array(const shl_shard_key_pattern_t *p, const bson_t *doc);

/*
 * shl_shard_key_extract_from_doc --
 *     The shard key of document 'doc' (what an insert is routed by): each path is looked up
 *     through embedded documents; a missing field (or a path through a non-document) gives
 *     null; a hashed field gives the NumberLong hash of its value. An array on the way or at
 *     the end is an error: ShardKeyNotFound "Shard key cannot contain array values or array
 *     descendants." 'out' is initialised here (empty on error); the caller destroys it.
 */
int shl_shard_key_extract_from_doc(const shl_shard_key_pattern_t *p, const bson_t *doc, bson_t *out,
                                   shl_status_t *st);

/*
 * shl_shard_key_values_equal --
 *     Whether documents 'a' and 'b' have the same shard key value: at every path of 'p' the
 *     same BSON type and bytes, a missing field counting as null (MongoDB's binary comparison
 *     of the extracted keys, before any hashing). False when a path meets an array in either.
 */
bool shl_shard_key_values_equal(const shl_shard_key_pattern_t *p, const bson_t *a, const bson_t *b);

/*
 * shl_shard_key_extract_from_query --
 *     The exact shard key 'filter' pins, if every shard key path is fixed by an equality:
 *     top-level {a: 5}, {a: {$eq: 5}}, {a: {$in: [5]}}, {"a.b": 5} or {a: {b: 5}} for key
 *     "a.b", and such terms under $and (or a one-clause $or). Returns false (with *out
 *     empty) if a path is unconstrained, constrained twice, constrained below the key path
 *     ({"a.b": 5} for key "a"), or equal to a value that cannot be a key (array, regex,
 *     object with $-fields). Hashed fields are hashed. The string comparison is binary
 *     (simple collation). 'out' is initialised here; the caller destroys it.
 */
bool shl_shard_key_extract_from_query(const shl_shard_key_pattern_t *p, const bson_t *filter,
                                      bson_t *out);

/*
 * shl_shard_key_compare --
 *     Order two shard keys of the same pattern by their values, position by position, in
 *     MongoDB's canonical order (field names are not compared). <0, 0, >0.
 */
int shl_shard_key_compare(const bson_t *a, const bson_t *b);

/* shl_shard_key_all_of_type -- every value of 'key' has type 't' (MinKey/MaxKey checks). */
bool shl_shard_key_all_of_type(const bson_t *key, bson_type_t t);

/* shl_shard_key_is_extended_by -- 'p' is a prefix of 'q' (refineCollectionShardKey). */
bool shl_shard_key_is_extended_by(const shl_shard_key_pattern_t *p,
                                  const shl_shard_key_pattern_t *q);

/*
 * shl_shard_key_is_unique_index_compatible --
 *     A unique index may exist on a sharded collection only if its key starts with _id or
 *     has the shard key's field names as a prefix.
 */
bool shl_shard_key_is_unique_index_compatible(const shl_shard_key_pattern_t *p,
                                              const bson_t *index_key);

#endif
