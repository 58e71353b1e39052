/*
 * keystring.h -- order-preserving binary encoding of index keys (a sequence of BSON values,
 * each ascending or descending, optionally followed by a RecordId), so that memcmp order of
 * the encodings is shl_bson_value_compare order of the values. Values that compare equal
 * encode identically (1, 1.0, NumberLong(1), NumberDecimal("1.0") give the same bytes), so
 * decoding yields a canonical type, not the original one. The byte format is in keystring.c.
 */
#ifndef SHL_BSON_KEYSTRING_H
#define SHL_BSON_KEYSTRING_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes a RecordId takes at the end of a key. */
#define SHL_KEYSTRING_RECORD_ID_SIZE 8

/* shl_keystring_t -- a growable byte buffer holding one encoded key. */
typedef struct shl_keystring {
    uint8_t *data; /* owned; NULL while empty */
    size_t len;
    size_t cap;
} shl_keystring_t;

/* shl_keystring_init / _cleanup -- caller's storage; cleanup frees the buffer. */
void shl_keystring_init(shl_keystring_t *ks);
void shl_keystring_cleanup(shl_keystring_t *ks);

/* shl_keystring_reset -- empty the key, keeping the buffer for reuse. */
void shl_keystring_reset(shl_keystring_t *ks);

/*
 * shl_keystring_append_value --
 *     Append one key field. 'descending' inverts its bytes so the field sorts in reverse.
 *     Every BSON type is supported (MinKey/MaxKey serve as range bounds). Each field's
 *     encoding is prefix-free, so a key sorts field by field like a compound index key.
 */
void shl_keystring_append_value(shl_keystring_t *ks, const bson_value_t *v, bool descending);

/* shl_keystring_append_iter -- the same for the value an iterator is positioned on. */
void shl_keystring_append_iter(shl_keystring_t *ks, const bson_iter_t *it, bool descending);

/*
 * shl_keystring_append_doc_values --
 *     Append every element value of 'values' (field names ignored: an index key document
 *     such as {"": 1, "": "x"}) in order; field i is descending when descending[i] is true
 *     ('descending' may be NULL: all ascending; it must have an entry per element).
 *     Returns the number of fields appended.
 */
size_t shl_keystring_append_doc_values(shl_keystring_t *ks, const bson_t *values,
                                       const bool *descending);

/*
 * shl_keystring_append_record_id --
 *     Append a RecordId (8 bytes, signed order): entries of a non-unique index are
 *     key + RecordId, so equal keys sort by RecordId.
 */
void shl_keystring_append_record_id(shl_keystring_t *ks, int64_t rid);

/*
 * shl_keystring_append_max_suffix --
 *     Append bytes that sort after every continuation of the key so far (further fields,
 *     a RecordId, or both): 'prefix + max suffix' is the exclusive upper bound of all
 *     entries starting with 'prefix'; 'prefix' alone sorts before all of them.
 */
void shl_keystring_append_max_suffix(shl_keystring_t *ks);

/*
 * shl_keystring_decode --
 *     Decode a key of 'nfields' fields (directions as encoded; 'descending' may be NULL
 *     for all ascending) into *out as an array document {"0": v0, "1": v1, ...}. When
 *     'rid_or_null' is given the key must end with a RecordId, stored there. Numbers come
 *     back as the canonical type (int32, else int64, else double, else decimal128), Symbol
 *     as String. *out is always initialised (empty on failure); the caller destroys it.
 *     Returns false if the bytes are not such a key.
 */
bool shl_keystring_decode(const uint8_t *key, size_t len, const bool *descending, size_t nfields,
                          bson_t *out, int64_t *rid_or_null);

/*
 * shl_keystring_split_record_id --
 *     For a key ending with a RecordId: *key_len = length without it, *rid = the RecordId.
 *     False if 'len' is too short.
 */
bool shl_keystring_split_record_id(const uint8_t *key, size_t len, size_t *key_len, int64_t *rid);

/* shl_keystring_compare -- memcmp, then the shorter first: <0, 0, >0. */
int shl_keystring_compare(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen);

/*
 * shl_keystring_to_hex --
 *     Upper-case hex of 'len' bytes into a new string (for logs and debugging); bson_free it.
 */
char *shl_keystring_to_hex(const uint8_t *key, size_t len);

#endif
