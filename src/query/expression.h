/*
 * expression.h -- aggregation expressions ("$a.b", {$gt: ["$a", 1]}, literals, ...), the
 * language of $expr in filters, computed fields in projections and update pipelines.
 * This is the interface the aggregation engine extends: operators live in one table in
 * expression.c (see expression_private.h for how to add one). Parsed expressions are
 * immutable and may be evaluated from many threads at once.
 */
#ifndef SHL_QUERY_EXPRESSION_H
#define SHL_QUERY_EXPRESSION_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "bson/collation.h"

typedef struct shl_expr shl_expr_t;

/*
 * shl_expr_ctx_t -- what an evaluation sees: $$ROOT / $$CURRENT ('root'), user variables
 * ('vars', a document {name: value} from a command's `let`, may be NULL) and $$NOW
 * ('now_ms', milliseconds since the epoch; 0 means "read the clock").
 */
typedef struct shl_expr_ctx {
    const bson_t *root;
    const bson_t *vars;
    int64_t now_ms;
    /* The operation's collation (borrowed; NULL: simple): $eq/$ne/$gt/.../$cmp, $in and
     * $indexOfArray compare strings by it, as MongoDB's expression context does. */
    const shl_collator_t *collator;
} shl_expr_ctx_t;

/*
 * shl_expr_parse --
 *     Parse 'spec' (any BSON value: a string starting with '$' is a field path or, with
 *     '$$', a variable; a document whose first field starts with '$' is an operator; other
 *     documents are object expressions; arrays are array expressions; everything else is a
 *     literal). On success *out owns the tree (free with shl_expr_destroy); 'spec' need not
 *     outlive it. Errors: InvalidPipelineOperator (168) "Unrecognized expression '$foo'",
 *     16020 wrong argument count, 16410/16872/40352 bad field paths, 17276 unknown variable,
 *     and others with MongoDB's codes.
 */
int shl_expr_parse(const bson_value_t *spec, shl_expr_t **out, shl_status_t *st);

/*
 * shl_expr_evaluate --
 *     Evaluate 'e' against ctx->root. *out is always initialised: an owned value (free with
 *     bson_value_destroy) whose value_type BSON_TYPE_EOD means "missing" (e.g. "$nofield"
 *     or $$REMOVE). Thread-safe (variables bound by $let/$map/$filter/$reduce live on the
 *     calling thread). Errors: the operator's runtime errors (e.g. TypeMismatch 16554 for $add
 *     of a string), with MongoDB's codes; ExceededMemoryLimit (146) when one evaluation builds
 *     more than its work budget of arrays/strings, 13548 past 64 MB for one value.
 */
int shl_expr_evaluate(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out,
                      shl_status_t *st);

/* shl_expr_evaluate_bool -- evaluate and coerce to a boolean with the aggregation rules
 * (false, 0, null, undefined and missing are false; everything else is true). */
int shl_expr_evaluate_bool(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bool *out,
                           shl_status_t *st);

/*
 * shl_expr_let_vars --
 *     A command's `let` ({name: expression}) evaluated once into *out ({name: value}, always
 *     initialised; the caller destroys it): names as MongoDB checks them (16866..16868),
 *     expressions without a document ($$NOW is 'now_ms'; 'builtins' -- may be NULL -- holds
 *     variables like CLUSTER_TIME they may read and is appended to *out). Errors: the
 *     expressions' parse and evaluation errors ("$a" evaluates to missing: the name is left
 *     out, so using it fails as undefined).
 */
int shl_expr_let_vars(const bson_t *let, int64_t now_ms, const bson_t *builtins, bson_t *out,
                      shl_status_t *st);

/* shl_expr_is_constant -- whether 'e' is a literal (evaluates to the same value everywhere). */
bool shl_expr_is_constant(const shl_expr_t *e);

/* shl_expr_destroy -- free a parsed expression (NULL is fine). */
void shl_expr_destroy(shl_expr_t *e);

/* shl_expr_compare -- the aggregation comparison of two values (missing sorts with undefined,
 * before null); the order of shl_bson_value_compare otherwise. */
int shl_expr_compare(const bson_value_t *a, const bson_value_t *b);

/* shl_expr_compare_coll -- the same with strings compared by 'coll' (NULL: simple). */
int shl_expr_compare_coll(const bson_value_t *a, const bson_value_t *b,
                          const shl_collator_t *coll);

#endif
