/*
 * update.h -- MongoDB 7.0 updates: operator updates ($set $unset $inc $mul $min $max
 * $rename $currentDate $setOnInsert $push $addToSet $pop $pull $pullAll, positional "$",
 * "$[]", "$[<id>]" with arrayFilters), replacement documents, and update pipelines
 * ([{$set: ...}, {$unset: ...}, {$replaceWith: ...}, ...]). Parse once into an immutable,
 * thread-safe object; apply to each matched document; build upsert documents.
 */
#ifndef SHL_QUERY_UPDATE_H
#define SHL_QUERY_UPDATE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "query/matcher.h"

typedef struct shl_update shl_update_t;

typedef enum shl_update_kind {
    SHL_UPDATE_OPERATORS,
    SHL_UPDATE_REPLACEMENT,
    SHL_UPDATE_PIPELINE,
} shl_update_kind_t;

/*
 * shl_update_new --
 *     Parse the `u` of an update statement: a document (operators if its first field starts
 *     with '$', else a replacement) or an array (a pipeline). 'array_filters' is the
 *     statement's arrayFilters array (a bson array document, may be NULL). Inputs are
 *     borrowed; the object keeps copies. Free with shl_update_destroy. Errors with MongoDB's
 *     codes: FailedToParse (9) "Unknown modifier: $foo. Expected a valid update modifier or
 *     pipeline-style update specified as an array", "'$set' is empty. ...", "Modifiers operate
 *     on fields but we found type ...", unused array filters; ConflictingUpdateOperators (40)
 *     "Updating the path 'a.b' would create a conflict at 'a'"; TypeMismatch (14) for non-numeric
 *     $inc/$mul arguments; EmptyFieldName (56); DollarPrefixedFieldName (52) in replacements;
 *     BadValue (2) for bad positional/array-filter paths and operator arguments.
 */
int shl_update_new(const bson_value_t *u, const bson_t *array_filters, shl_update_t **out,
                   shl_status_t *st);

void shl_update_destroy(shl_update_t *u);

shl_update_kind_t shl_update_get_kind(const shl_update_t *u);

/*
 * shl_update_set_collator --
 *     Compare strings under 'coll' (a reference is taken; NULL: simple), as MongoDB's update
 *     operators do under the command's collation: $addToSet's duplicates, $pull/$pullAll's
 *     matches, $min/$max, $push's $sort, arrayFilters and pipeline-update expressions. Call
 *     before 'u' is applied (not while another thread applies it). Does not block.
 */
void shl_update_set_collator(shl_update_t *u, shl_collator_t *coll);

/* shl_update_uses_positional -- whether the update has a "$" path (the caller must then pass
 * the matcher's array position). */
bool shl_update_uses_positional(const shl_update_t *u);

/*
 * shl_update_ctx_t -- per-document inputs of shl_update_apply.
 *   has_matched_key / matched_key: the array position from shl_matcher_match's details
 *       (shl_match_details_t.has_key / key), for "$".
 *   is_insert: the document is being inserted by an upsert ($setOnInsert applies).
 *   now_ms: $currentDate / $$NOW in ms since the epoch (0: read the clock).
 *   ts_t / ts_i: the Timestamp $currentDate {$type: "timestamp"} writes (0/0: now_ms / 1).
 *   vars: `let` variables for pipelines (may be NULL).
 */
typedef struct shl_update_ctx {
    bool has_matched_key;
    size_t matched_key;
    bool is_insert;
    int64_t now_ms;
    uint32_t ts_t, ts_i;
    const bson_t *vars;
} shl_update_ctx_t;

/*
 * shl_update_apply --
 *     Apply to 'doc' (borrowed), writing the new document to *out (always initialised; the
 *     caller destroys it) and whether it differs from 'doc' byte for byte to *changed (what
 *     nModified counts). Field order is preserved; fields an update creates are appended,
 *     siblings in MongoDB's order (lexicographic, numeric components numerically).
 *     Thread-safe. Errors: ImmutableField (66) for _id changes; TypeMismatch (14) e.g.
 *     "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 'a' of
 *     non-numeric type string"; PathNotViable (28) "Cannot create field 'b' in element {a: 1}";
 *     BadValue (2) "The positional operator did not find the match needed from the query.",
 *     $push/$addToSet/$pull on non-arrays; InvalidIdField (53); DollarPrefixedFieldName (52)
 *     when an operator update of an existing document (not ctx->is_insert) creates or changes
 *     a top-level '$'-prefixed field (MongoDB 5.0+: nested ones, unchanged ones, upserts and
 *     pipelines are fine);
 *     17419 "Resulting document after update is larger than 16777216".
 */
int shl_update_apply(const shl_update_t *u, const bson_t *doc, const shl_update_ctx_t *ctx,
                     bson_t *out, bool *changed, shl_status_t *st);

/*
 * shl_update_upsert_doc --
 *     The document an upsert inserts when 'query' matched nothing: the query's equality
 *     fields (shl_matcher_equality_fields; only _id for a replacement) as nested documents,
 *     then the update applied with is_insert, then _id moved first — a new ObjectId when
 *     there is none. *out is always initialised. Errors: those of shl_update_apply and of
 *     shl_matcher_equality_fields (54 NotSingleValueField); NotExactValueField (107) for a
 *     replacement whose query gives _id by its sub-paths ({"_id.a": 1}), as MongoDB.
 */
int shl_update_upsert_doc(const shl_update_t *u, const shl_matcher_t *query,
                          const shl_update_ctx_t *ctx, bson_t *out, shl_status_t *st);

#endif
