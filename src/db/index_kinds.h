/*
 * index_kinds.h -- the data node's index key generators (hashed, partial, on top of the
 * storage layer's default btree generator) and createIndexes spec validation with
 * MongoDB 7.0's errors. The factory is installed when the node opens storage.
 */
#ifndef SHL_DB_INDEX_KINDS_H
#define SHL_DB_INDEX_KINDS_H

#include <bson/bson.h>

#include "base/status.h"
#include "storage/index.h"

/*
 * db_keygen_factory --
 *     A shl_keygen_factory_fn: btree key patterns as shl_keygen_default_factory, plus
 *     one "hashed" field (alone or compound; keys hold MongoDB's hash64 of the value as
 *     a NumberLong; arrays fail with 16766) and partialFilterExpression (documents not
 *     matching the filter get no keys). Errors: CannotCreateIndex (67) for other index
 *     kinds; the matcher's for a bad filter. Thread-safe.
 */
int db_keygen_factory(const bson_t *spec, shl_keygen_t **out, shl_status_t *st);

/*
 * db_index_spec_validate --
 *     Validate a createIndexes spec as MongoDB does (field names, key pattern values,
 *     hashed/unique/sparse/partial/TTL combinations). Errors, with MongoDB's messages:
 *     InvalidIndexSpecificationOption (197) for an unknown field, CannotCreateIndex (67)
 *     for bad key values and combinations, TypeMismatch (14), BadValue (2), 16764,
 *     31303; the reason is not prefixed ("Error in specification ..." is the caller's).
 */
int db_index_spec_validate(const bson_t *spec, shl_status_t *st);

/*
 * db_index_ttl_seconds --
 *     Whether 'spec' is a TTL index (expireAfterSeconds on a single non-hashed field):
 *     *secs and *field (borrowed from spec) filled.
 */
bool db_index_ttl_seconds(const bson_t *spec, int64_t *secs, const char **field);

/* db_index_is_text -- whether 'spec''s key has a "text" field (as given or normalised). */
bool db_index_is_text(const bson_t *spec);

/*
 * db_text_keygen_new --
 *     The text index generator (index_text.c): one key per distinct stemmed term of a
 *     document, (prefix field values, term, score, suffix field values). Errors: those of
 *     shl_text_index_new; the generator fails a write with 17262 for a document whose
 *     language_override names an unsupported language.
 */
int db_text_keygen_new(const bson_t *spec, shl_keygen_t **out, shl_status_t *st);

/*
 * db_text_index_normalize --
 *     *out = text index 'spec' as stored and listed: key {<prefix>, _fts: "text", _ftsx: 1,
 *     <suffix>}, then after the other fields weights, default_language, language_override,
 *     textIndexVersion 3. Always initialised. Errors: those of shl_text_index_new.
 */
int db_text_index_normalize(const bson_t *spec, bson_t *out, shl_status_t *st);

#endif
