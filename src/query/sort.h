/*
 * sort.h -- sort patterns ({a: 1, b: -1}), sort keys and the in-memory sorter of find,
 * with MongoDB 7.0's rules: canonical BSON order (bson/bson_compare.h), a missing field
 * sorts as null, an array field sorts by its smallest element ascending and its largest
 * descending (an empty array before null), a blocking-sort memory limit
 * (internalQueryMaxBlockingSortMemoryUsageBytes) failing with 292, and top-k when a limit is known.
 */
#ifndef SHL_QUERY_SORT_H
#define SHL_QUERY_SORT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "bson/collation.h"

typedef struct shl_sort_pattern shl_sort_pattern_t;

/*
 * shl_sort_pattern_new --
 *     Parse a sort specification. {} gives an empty pattern (no sort). *out is immutable
 *     and thread-safe; free with shl_sort_pattern_destroy. Errors: 15974 "Illegal key in
 *     $sort specification: ...", 15975 "$sort key ordering must be 1 (for ascending) or -1
 *     (for descending)", 17312 ($meta other than {$meta: ...}), 40352/16410 bad field
 *     names. {$meta: "textScore"} sorts by the score a text search left in the document
 *     (SHL_TEXT_SCORE_FIELD, query/text.h), highest first.
 */
int shl_sort_pattern_new(const bson_t *spec, shl_sort_pattern_t **out, shl_status_t *st);

void shl_sort_pattern_destroy(shl_sort_pattern_t *p);

/*
 * shl_sort_pattern_set_collator --
 *     Sort strings under 'coll' (a reference is taken; NULL: simple): an array's element is
 *     chosen by the collation and the sort keys hold collation keys in place of strings
 *     (what MongoDB's shards send a router), so keys still compare bytewise. Call before
 *     'p' is shared.
 */
void shl_sort_pattern_set_collator(shl_sort_pattern_t *p, shl_collator_t *coll);

/* shl_sort_pattern_nfields -- number of sort fields (0: no sort). */
size_t shl_sort_pattern_nfields(const shl_sort_pattern_t *p);

/*
 * shl_sort_key_compute --
 *     The sort key of 'doc': an array document [v1, v2, ...], one value per pattern field
 *     (the chosen element of an array field; null when missing). *key is always
 *     initialised; the caller destroys it. Keys are what a router merges on (MongoDB's
 *     $sortKey). Errors: BadValue "cannot sort with keys that are parallel arrays" is not
 *     raised (each field is keyed independently).
 */
void shl_sort_key_compute(const shl_sort_pattern_t *p, const bson_t *doc, bson_t *key);

/* shl_sort_key_compare -- <0, 0, >0 as key 'a' sorts before, with or after 'b' under 'p'. */
int shl_sort_key_compare(const shl_sort_pattern_t *p, const bson_t *a, const bson_t *b);

/* shl_sort_doc_compare -- compare two documents by their sort keys under 'p'. */
int shl_sort_doc_compare(const shl_sort_pattern_t *p, const bson_t *a, const bson_t *b);

typedef struct shl_sorter shl_sorter_t;

/*
 * shl_sorter_new --
 *     A blocking sort of documents under 'p' (borrowed; must outlive the sorter). 'limit'
 *     > 0 keeps only the first 'limit' documents (top-k: memory is bounded by them).
 *     'max_bytes' <= 0 reads internalQueryMaxBlockingSortMemoryUsageBytes. Documents equal under
 *     the pattern come out in insertion order. Not thread-safe; one per query.
 */
shl_sorter_t *shl_sorter_new(const shl_sort_pattern_t *p, int64_t limit, int64_t max_bytes);

/*
 * shl_sorter_add --
 *     Add a copy of 'doc'. Errors: QueryExceededMemoryLimitNoDiskUseAllowed (292) "Sort
 *     exceeded memory limit of N bytes, but did not opt in to external sorting." when the
 *     retained documents exceed the limit (spilling is not implemented, so allowDiskUse
 *     does not avoid it).
 */
int shl_sorter_add(shl_sorter_t *s, const bson_t *doc, shl_status_t *st);

/* shl_sorter_finish -- sort; afterwards shl_sorter_next returns the documents in order. */
void shl_sorter_finish(shl_sorter_t *s);

/* shl_sorter_next -- the next sorted document (borrowed until the sorter is destroyed), or
 * NULL at the end. */
const bson_t *shl_sorter_next(shl_sorter_t *s);

/* shl_sorter_count -- number of documents retained. */
size_t shl_sorter_count(const shl_sorter_t *s);

/* shl_sorter_memory -- bytes currently accounted. */
int64_t shl_sorter_memory(const shl_sorter_t *s);

void shl_sorter_destroy(shl_sorter_t *s);

#endif
