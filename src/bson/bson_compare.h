/*
 * bson_compare.h -- MongoDB's canonical comparison order over BSON values
 * (MinKey < Undefined < Null < numbers < String/Symbol < Object < Array < BinData <
 * ObjectId < Bool < Date < Timestamp < RegEx < DBPointer < JS < JS w/ scope < MaxKey);
 * numbers compare by value across int32/int64/double/decimal128 (NaN lowest among numbers).
 * Strings compare by bytes (no collation). Used by the matcher, sort, indexes (KeyString
 * must agree with it) and the routing table.
 */
#ifndef SHL_BSON_COMPARE_H
#define SHL_BSON_COMPARE_H

#include <bson/bson.h>
#include <stdbool.h>

#include "bson/collation.h"

/* shl_bson_canonical_type -- the canonical type bracket of 't' (equal for all numbers). */
int shl_bson_canonical_type(bson_type_t t);

/*
 * shl_bson_value_compare --
 *     <0, 0, >0 as 'a' sorts before, with, or after 'b' in MongoDB's order. Documents
 *     compare field by field (canonical type, then field name, then value); arrays
 *     element by element; a shorter prefix sorts first.
 */
int shl_bson_value_compare(const bson_value_t *a, const bson_value_t *b);

/*
 * shl_bson_value_compare_coll --
 *     The same with strings (and symbols) at any depth compared by 'coll' (NULL: simple,
 *     i.e. shl_bson_value_compare). Field names are never collated.
 */
int shl_bson_value_compare_coll(const bson_value_t *a, const bson_value_t *b,
                                const shl_collator_t *coll);

/* shl_bson_iter_compare -- the same over two iterators positioned on values. */
int shl_bson_iter_compare(const bson_iter_t *a, const bson_iter_t *b);

/* shl_bson_doc_compare -- whole documents (BSONObj::woCompare with field names considered). */
int shl_bson_doc_compare(const bson_t *a, const bson_t *b);

/* shl_bson_doc_compare_coll -- the same with strings compared by 'coll'. */
int shl_bson_doc_compare_coll(const bson_t *a, const bson_t *b, const shl_collator_t *coll);

/* shl_bson_value_equal -- shl_bson_value_compare(a, b) == 0. */
bool shl_bson_value_equal(const bson_value_t *a, const bson_value_t *b);

#endif
