/*
 * bson_util.h -- small helpers over libbson: MongoDB's BSONObj::toString rendering (the
 * "{ _id: 1 }" of error messages such as duplicate keys), number conversions with MongoDB's
 * semantics, ObjectId and UUID generation, Timestamp packing, append wrappers.
 */
#ifndef SHL_BSON_UTIL_H
#define SHL_BSON_UTIL_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- rendering ---- */

/*
 * shl_bson_to_string --
 *     MongoDB's BSONObj::toString(): { a: 1, b: "x", c: [ 1.5, {} ], d: new Date(0),
 *     e: ObjectId('...') }. Strings over 160 bytes are cut as MongoDB cuts them. Returns a
 *     new string; bson_free it.
 */
char *shl_bson_to_string(const bson_t *doc);

/* shl_bson_value_to_string -- one value the same way (no field name). */
char *shl_bson_value_to_string(const bson_value_t *v);

/*
 * shl_bson_as_json --
 *     libbson's relaxed extended JSON of 'doc' ({ "a" : 1 }), for messages; where libbson
 *     gives none (a field name or string that is not UTF-8, which the wire accepts as
 *     MongoDB does), the log renderer's compact form, in which such bytes are U+FFFD.
 *     Never NULL; bson_free the result.
 */
char *shl_bson_as_json(const bson_t *doc);

/* shl_bson_type_name -- MongoDB's type alias ("double", "string", "objectId", "long", ...). */
const char *shl_bson_type_name(bson_type_t t);

/* shl_bson_binary_subtype_name -- MongoDB's name of a BinData subtype, as its IDL errors print
 * it ("general", "UUID", "MD5", ...; "Custom" for user subtypes). */
const char *shl_bson_binary_subtype_name(bson_subtype_t sub);

/* ---- numbers ---- */

/* shl_bson_int64_at / shl_bson_double_at -- the number at top-level 'key' of 'doc' as int64
 * (bson_iter_as_int64) or double; 0 when absent or not a number. */
int64_t shl_bson_int64_at(const bson_t *doc, const char *key);
double shl_bson_double_at(const bson_t *doc, const char *key);

/* shl_bson_type_is_number -- int32, int64, double or decimal128. */
bool shl_bson_type_is_number(bson_type_t t);

/*
 * shl_bson_value_as_int64_exact --
 *     MongoDB's parseIntegerElementToLong: true and *out set if 'v' is a number with an
 *     integral value representable as int64 (1, 1.0, NumberDecimal("1.00")); false for
 *     non-numbers, NaN, fractions and out-of-range values.
 */
bool shl_bson_value_as_int64_exact(const bson_value_t *v, int64_t *out);

/*
 * shl_bson_value_safe_int64 --
 *     MongoDB's safeNumberLong: doubles truncate, decimals round half to even, NaN gives
 *     0, out-of-range values clamp to INT64_MIN/INT64_MAX; non-numbers give 0.
 */
int64_t shl_bson_value_safe_int64(const bson_value_t *v);

/*
 * shl_bson_value_as_double --
 *     MongoDB's numberDouble: the nearest double (decimals round to nearest); 0 for
 *     non-numbers.
 */
double shl_bson_value_as_double(const bson_value_t *v);

/* shl_bson_value_true -- MongoDB's trueValue: false for false, 0, null, undefined, EOO. */
bool shl_bson_value_true(const bson_value_t *v);

/* ---- ObjectId, UUID, Timestamp ---- */

/* shl_bson_oid_gen -- a new ObjectId, unique in the process. Thread-safe. */
void shl_bson_oid_gen(bson_oid_t *oid);

/* shl_uuid_gen -- a random (version 4) UUID from the kernel's CSPRNG. Thread-safe. */
void shl_uuid_gen(uint8_t uuid[16]);

/* shl_bson_append_uuid -- append as BinData subtype 4, the UUID type drivers read. */
bool shl_bson_append_uuid(bson_t *doc, const char *key, const uint8_t uuid[16]);

/* shl_bson_iter_uuid -- the UUID 'it' holds (BinData subtype 4 of 16 bytes), else false. */
bool shl_bson_iter_uuid(const bson_iter_t *it, uint8_t uuid[16]);

/* Timestamps as WiredTiger and the oplog order them: seconds in the high 32 bits. */
static inline uint64_t
shl_timestamp_pack(uint32_t t, uint32_t i)
{
    return ((uint64_t)t << 32) | i;
}

static inline void
shl_timestamp_unpack(uint64_t ts, uint32_t *t, uint32_t *i)
{
    *t = (uint32_t)(ts >> 32);
    *i = (uint32_t)ts;
}

/* shl_bson_append_timestamp_u64 -- append a packed timestamp as a BSON Timestamp. */
bool shl_bson_append_timestamp_u64(bson_t *doc, const char *key, uint64_t ts);

/* shl_bson_iter_timestamp_u64 -- the packed value of a Timestamp element (0 otherwise). */
uint64_t shl_bson_iter_timestamp_u64(const bson_iter_t *it);

/* ---- appending ---- */

/* shl_bson_append_value -- bson_append_value with a NUL-terminated key. */
bool shl_bson_append_value(bson_t *doc, const char *key, const bson_value_t *v);

/*
 * shl_bson_append_array_values --
 *     Append 'n' values as an array field named 'key' ({key: [v0, v1, ...]}).
 */
bool shl_bson_append_array_values(bson_t *doc, const char *key, const bson_value_t *vals, size_t n);

/*
 * shl_bson_copy_fields_except --
 *     Append every field of 'src' to 'dst' except those named in the NULL-terminated
 *     'skip' list (e.g. forwarding a command without "$db" and "lsid").
 */
/*
 * shl_bson_get_subdoc --
 *     A static view of the embedded document at top-level field 'key' of 'b' (not to be
 *     destroyed; valid while 'b' is). False if absent, not a document, or malformed.
 */
bool shl_bson_get_subdoc(const bson_t *b, const char *key, bson_t *view);

/*
 * shl_bson_iter_view --
 *     A static view of the document or array at 'it' (not to be destroyed; valid while the
 *     iterated document is). False for another type or a malformed value.
 */
bool shl_bson_iter_view(const bson_iter_t *it, bson_t *view);

/*
 * shl_bson_iter_find_key --
 *     What bson_iter_init_find does (a top-level field named exactly 'key', the first one;
 *     a dot is an ordinary character), with less work per field than
 *     libbson's (strlen and strncmp on every key), for lookups on every request.
 */
bool shl_bson_iter_find_key(bson_iter_t *it, const bson_t *doc, const char *key);

/* shl_bson_has_key -- whether 'doc' has a top-level field named exactly 'key' (no dotted
 * paths, unlike bson_has_field), at shl_bson_iter_find_key's cost: for per-request checks. */
bool shl_bson_has_key(const bson_t *doc, const char *key);

void shl_bson_copy_fields_except(bson_t *dst, const bson_t *src, const char *const *skip);

/* ---- sizes ---- */

/*
 * shl_bson_array_element_len --
 *     The bytes a value of 'value_len' bytes takes as element 'index' of an array: its type
 *     byte, its decimal key with the NUL, and the value itself.
 */
size_t shl_bson_array_element_len(uint32_t index, size_t value_len);

/*
 * shl_bson_value_len --
 *     The bytes 'v' takes in a document after its type byte and key: what an element of it
 *     adds besides those (with shl_bson_array_element_len, the exact growth of an array).
 */
size_t shl_bson_value_len(const bson_value_t *v);

/*
 * shl_bson_array_has_room --
 *     Whether 'arr', an array being built whose next element is 'index', can take a document
 *     of 'doc_len' bytes and stay within 'max_len' bytes. Always true for the first element:
 *     a lone oversized document goes out alone (the receiver's own limit decides). Every
 *     batch that fills a reply or a command with documents asks this, so what it counts is
 *     what is sent.
 */
bool shl_bson_array_has_room(const bson_t *arr, uint32_t index, size_t doc_len, size_t max_len);

/*
 * shl_bson_value_dollar_key --
 *     The first '$'-prefixed field name inside 'v' (a document or array, at any depth; NULL
 *     when there is none or 'v' is a scalar), borrowed from 'v's bytes. An _id value holding
 *     one is not valid for storage (MongoDB's DollarPrefixedFieldName, SERVER-75880).
 */
const char *shl_bson_value_dollar_key(const bson_value_t *v);

#endif
