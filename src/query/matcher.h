/*
 * matcher.h -- MongoDB query filters ({a: {$gt: 1}, $or: [...]}): parse a filter once into
 * an immutable expression tree, then match documents against it from any number of
 * threads. Semantics are MongoDB 7.0's: dotted paths with implicit array traversal,
 * numeric components as array positions, null matching missing, comparison within one
 * canonical type bracket (bson/bson_compare.h), and MongoDB's error codes and messages.
 */
#ifndef SHL_QUERY_MATCHER_H
#define SHL_QUERY_MATCHER_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "bson/collation.h"

typedef struct shl_matcher shl_matcher_t;

/* Parse flags: what a context allows (MongoDB's AllowedFeatures). */
#define SHL_MATCHER_ALLOW_EXPR 0x1u     /* $expr (find, update, delete, $match) */
#define SHL_MATCHER_ALLOW_TEXT 0x2u     /* $text (needs a text index; errors for now) */
#define SHL_MATCHER_ALLOW_WHERE 0x4u    /* $where (no JavaScript engine: always errors) */
#define SHL_MATCHER_ALLOW_GEO_NEAR 0x8u /* $near/$nearSphere (needs a geo index; errors) */
#define SHL_MATCHER_DEFAULT                                                                        \
    (SHL_MATCHER_ALLOW_EXPR | SHL_MATCHER_ALLOW_TEXT | SHL_MATCHER_ALLOW_WHERE |                   \
     SHL_MATCHER_ALLOW_GEO_NEAR)
/* A top-level $text parses as always true: the caller runs the text search over the
 * collection's text index (db/exec_plan.c). Without it $text is IndexNotFound (27). */
#define SHL_MATCHER_TEXT_DEFERRED 0x10u
/* (internal: the clauses of a top-level $or under SHL_MATCHER_TEXT_DEFERRED, where a $text
 * is searched per document: shl_matcher_set_text) */
#define SHL_MATCHER_TEXT_IN_OR 0x20u
/* What partial-index filters, arrayFilters and validators allow. */
#define SHL_MATCHER_NO_SPECIAL 0x0u

/*
 * shl_match_details_t -- optional per-call in/out data for shl_matcher_match.
 *   vars:     in: variables for $expr ($$name from a command's `let`), may be NULL.
 *   has_key / key: out: the array position that made the filter match, for the positional
 *             projection ("a.$") and the positional update operator ("a.$"): the position in
 *             the outermost array traversed by the last predicate that matched through an
 *             array (MongoDB's elemMatchKey).
 */
typedef struct shl_match_details {
    const bson_t *vars;
    bool has_key;
    size_t key;
} shl_match_details_t;

/*
 * shl_matcher_new --
 *     Parse 'filter' (borrowed; the matcher keeps its own copy). 'flags' is SHL_MATCHER_*.
 *     On success *out is an immutable matcher; free with shl_matcher_destroy. Errors (never
 *     a crash, whatever the input): BadValue (2) "unknown operator: $foo", "unknown top
 *     level operator: $foo...", "$in needs an array", "$and/$or/$nor must be a nonempty
 *     array", ...; FailedToParse (9) (e.g. $size/$type arguments); TypeMismatch (14);
 *     51091 invalid regular expression, 51108 bad regex flag; 27 IndexNotFound for $text;
 *     291 NoQueryExecutionPlans for $near; 5729100 path too long; aggregation-expression
 *     errors from $expr.
 */
int shl_matcher_new(const bson_t *filter, uint32_t flags, shl_matcher_t **out, shl_status_t *st);

/*
 * shl_matcher_bind_vars --
 *     Give 'm' (not yet shared with other threads) the variables its $expr sees when a
 *     match passes none in its details: a command's `let` ({name: value}, copied; NULL
 *     unbinds). Does not block.
 */
void shl_matcher_bind_vars(shl_matcher_t *m, const bson_t *vars);

/*
 * shl_matcher_set_collator --
 *     Compare strings in 'm' ($eq, $ne, ranges, $in, $nin, $elemMatch values) under 'coll'
 *     (a new reference is taken; NULL: simple). Call before 'm' is shared with other
 *     threads. Regexes, field names, $type, $exists and $expr are not collated.
 */
void shl_matcher_set_collator(shl_matcher_t *m, shl_collator_t *coll);

/* shl_matcher_collator -- the collator set on 'm' (borrowed; NULL: simple). */
const shl_collator_t *shl_matcher_collator(const shl_matcher_t *m);

/* shl_matcher_destroy -- free a matcher (NULL is fine). */
void shl_matcher_destroy(shl_matcher_t *m);

/*
 * shl_matcher_text_fn / shl_matcher_set_text --
 *     A $text under a top-level $or (parsed with SHL_MATCHER_TEXT_DEFERRED) matches a
 *     document when 'fn' says so (the caller's text search over its index); without a
 *     function it matches nothing. Set before the matcher is shared; 'arg' must outlive
 *     it; shl_matcher_unset_text removes it when 'arg' is still the one set (its owner is
 *     going). shl_matcher_has_text_in_or -- whether the filter has such a $text.
 */
typedef int (*shl_matcher_text_fn)(void *arg, const bson_t *doc, bool *matched, shl_status_t *st);
void shl_matcher_set_text(shl_matcher_t *m, shl_matcher_text_fn fn, void *arg);
void shl_matcher_unset_text(shl_matcher_t *m, const void *arg);
bool shl_matcher_has_text_in_or(const shl_matcher_t *m);

/*
 * shl_matcher_match --
 *     Whether 'doc' matches. 'details' may be NULL. Thread-safe (the matcher is read-only).
 *     Returns 0 and sets *matched, or an error from evaluating $expr (then *matched is
 *     false), which fails the whole operation in MongoDB.
 */
int shl_matcher_match(const shl_matcher_t *m, const bson_t *doc, shl_match_details_t *details,
                      bool *matched, shl_status_t *st);

/* shl_matcher_matches -- convenience: true only if 'doc' matches without error. */
bool shl_matcher_matches(const shl_matcher_t *m, const bson_t *doc);

/* shl_matcher_filter -- the filter the matcher was built from (borrowed from the matcher). */
const bson_t *shl_matcher_filter(const shl_matcher_t *m);

/* shl_matcher_is_trivial -- whether the filter matches every document ({} or only $comment). */
bool shl_matcher_is_trivial(const shl_matcher_t *m);

/*
 * shl_matcher_equality_fields --
 *     The equality predicates at the top of the filter (directly, under $and, a
 *     single-clause $or, $eq, or a one-element $in) as a document {dotted path: value}, in
 *     filter order — what an upsert seeds its new document with and what shard-key
 *     targeting reads. *out is always initialised; the caller destroys it. Errors:
 *     NotSingleValueField (54) "cannot infer query fields to set, path 'a' is matched twice"
 *     / "... both paths 'a.b' and 'a' are matched".
 */
int shl_matcher_equality_fields(const shl_matcher_t *m, bson_t *out, shl_status_t *st);

/*
 * shl_matcher_match_value --
 *     Match a single value against a filter whose every path starts with 'placeholder'
 *     (arrayFilters: {"x.a": 1} with placeholder "x" is matched against {x: <value>}).
 *     Same contract as shl_matcher_match.
 */
int shl_matcher_match_value(const shl_matcher_t *m, const char *placeholder,
                            const bson_value_t *value, bool *matched, shl_status_t *st);

/*
 * shl_matcher_placeholder --
 *     For arrayFilters: the top-level field every predicate of the filter names ("x" for
 *     {"x.a": 1, x: {$ne: 2}}), or NULL if the filter has none ({$expr: ...}) — then *error
 *     says whether different predicates named different fields (MongoDB's FailedToParse
 *     "Error parsing array filter :: caused by :: Expected a single top-level field name,
 *     found 'a' and 'b'"), with the message in 'st'. The string is owned by the matcher.
 */
const char *shl_matcher_placeholder(const shl_matcher_t *m, bool *error, shl_status_t *st);

#endif
