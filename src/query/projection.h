/*
 * projection.h -- find() projections with MongoDB 4.4+ (7.0) semantics: inclusion or
 * exclusion, the _id rules, dotted paths into arrays of documents, positional "a.$",
 * $slice, $elemMatch, and literal / aggregation-expression values (which make a projection
 * an inclusion). Parsed once into an immutable, thread-safe object; applied per document.
 */
#ifndef SHL_QUERY_PROJECTION_H
#define SHL_QUERY_PROJECTION_H

#include <bson/bson.h>
#include <stdbool.h>

#include "base/status.h"
#include "query/matcher.h"

typedef struct shl_projection shl_projection_t;

/*
 * shl_projection_new --
 *     Parse 'spec'. 'query' is the find filter (may be NULL), needed to validate a
 *     positional projection. {} is the identity projection. Free with
 *     shl_projection_destroy. Errors with MongoDB's codes: 31254 "Cannot do exclusion on field
 *     x in inclusion projection", 31253 "Cannot do inclusion on field x in exclusion
 *     projection", 31250/31249 path collisions, 31252/31310 expressions in an exclusion
 *     projection, 31276/31256/31255/31277/31271/31308/31287/31270/51050 positional rules,
 *     31272/31257/31258/31259/31273 $slice, 31274/31275 $elemMatch, 31325 unknown
 *     expression, 40352/15998/16410 bad field paths, and expression parse errors.
 */
int shl_projection_new(const bson_t *spec, const bson_t *query, shl_projection_t **out,
                       shl_status_t *st);

void shl_projection_destroy(shl_projection_t *p);

/* shl_projection_is_inclusion -- whether it is an inclusion projection. */
bool shl_projection_is_inclusion(const shl_projection_t *p);

/* shl_projection_needs_match_details -- whether applying it needs the matcher's array
 * position (a positional projection): then pass details from shl_matcher_match. */
bool shl_projection_needs_match_details(const shl_projection_t *p);

/*
 * shl_projection_apply --
 *     Project 'doc' into *out (always initialised; caller destroys). 'details' are the
 *     match details of 'doc' against the find filter (only read for a positional
 *     projection; may be NULL otherwise); 'vars' are `let` variables (may be NULL).
 *     Thread-safe. Errors: 51246 "positional operator '.$' couldn't find a matching element
 *     in the array", 51247 positional index out of range, expression runtime errors.
 */
/* shl_projection_set_collator -- computed fields compare strings under 'coll' (borrowed: it
 * must outlive 'p'; NULL: simple). Call before 'p' is shared. */
void shl_projection_set_collator(shl_projection_t *p, const shl_collator_t *coll);

int shl_projection_apply(const shl_projection_t *p, const bson_t *doc,
                         const shl_match_details_t *details, const bson_t *vars, bson_t *out,
                         shl_status_t *st);

#endif
