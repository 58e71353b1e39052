/*
 * collation.h -- MongoDB's collations over ICU (Debian's libicu): the collation spec every
 * command and index accepts (validated with MongoDB's errors, normalised to the full form
 * listCollections and listIndexes show), and a collator that compares strings and produces
 * ICU sort keys. The simple collation is a NULL collator everywhere. docs/design/collation.md.
 */
#ifndef SHL_BSON_COLLATION_H
#define SHL_BSON_COLLATION_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

/* shl_collator_t -- an immutable, refcounted ICU collator and its normalised spec. */
typedef struct shl_collator shl_collator_t;

/*
 * shl_collator_new --
 *     Parse and validate the collation document 'spec' (MongoDB's CollatorFactoryICU rules:
 *     locale required; "simple" alone means binary comparison; locale must be one ICU knows
 *     without canonicalisation; strength 1-5, caseLevel, caseFirst upper/lower/off,
 *     numericOrdering, alternate non-ignorable/shifted, maxVariable punct/space,
 *     normalization, backwards, version == the ICU version; no unknown fields; backwards
 *     not with strength 1; caseFirst only with caseLevel or strength >= 3). On success
 *     *out is a new reference (release it), or NULL for the simple collation or an empty
 *     document. Errors: NoSuchKey, TypeMismatch, BadValue, FailedToParse,
 *     IncompatibleCollationVersion, OperationFailed (ICU). Thread-safe; does not block.
 *     Accepted specs are cached (by their bytes): a spec seen before returns the same
 *     collator without opening ICU again (takes a process-wide mutex briefly).
 */
int shl_collator_new(const bson_t *spec, shl_collator_t **out, shl_status_t *st);

/*
 * shl_collator_from_iter --
 *     The same for the value 'it' is positioned on, which must be a document (else
 *     TypeMismatch "BSON field '<field>' is the wrong type '<t>', expected type 'object'").
 */
int shl_collator_from_iter(const bson_iter_t *it, const char *field, shl_collator_t **out,
                           shl_status_t *st);

/* shl_collator_ref / _release -- reference counting; both accept NULL (simple). */
shl_collator_t *shl_collator_ref(shl_collator_t *c);
void shl_collator_release(shl_collator_t *c);

/* shl_collator_spec -- the normalised spec (borrowed; lives as long as 'c'). */
const bson_t *shl_collator_spec(const shl_collator_t *c);

/* shl_collator_append_spec -- append 'c's spec as field 'key' of 'doc' ({locale: "simple"}
 * when 'c' is NULL). */
void shl_collator_append_spec(bson_t *doc, const char *key, const shl_collator_t *c);

/* shl_collator_equal -- whether 'a' and 'b' order every string alike (same normalised spec;
 * NULL, the simple collation, equals only NULL). */
bool shl_collator_equal(const shl_collator_t *a, const shl_collator_t *b);

/*
 * shl_collator_compare --
 *     <0, 0, >0 as UTF-8 string 'a' sorts before, with or after 'b' ('c' NULL: bytes, then
 *     length). Ill-formed UTF-8 compares as U+FFFD. Thread-safe (ICU's const use).
 */
int shl_collator_compare(const shl_collator_t *c, const char *a, size_t alen, const char *b,
                         size_t blen);

/*
 * shl_collator_key_append --
 *     Append to 'buf' the ICU sort key of 'a' without its terminating NUL (the bytes MongoDB
 *     stores in an index of this collation); memcmp order of keys is shl_collator_compare
 *     order. 'c' must not be NULL. The key holds no NUL byte.
 */
void shl_collator_key_append(const shl_collator_t *c, const char *a, size_t alen,
                             bson_string_t *buf);

/*
 * shl_collator_value_key --
 *     *out = 'in' with every string (and symbol) replaced, at any depth inside documents and
 *     arrays, by a string holding its sort key, so that shl_bson_value_compare of two
 *     results is the collation-aware comparison of the inputs (and equal results mean equal
 *     under the collation: what hashes and index keys use). 'c' NULL copies. The caller
 *     destroys *out with bson_value_destroy.
 */
void shl_collator_value_key(const shl_collator_t *c, const bson_value_t *in, bson_value_t *out);

/* shl_collator_icu_version -- the ICU version string specs carry ("72.1"). */
const char *shl_collator_icu_version(void);

#endif
