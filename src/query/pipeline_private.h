/*
 * pipeline_private.h -- the small interface between the pipeline engine (pipeline.c) and
 * the stages kept in their own files (window.c: $setWindowFields, $densify, $fill): the
 * $group accumulators, which window functions reuse, a path setter, and the window stages'
 * parse / next / destroy. Not part of any public contract.
 */
#ifndef SHL_QUERY_PIPELINE_PRIVATE_H
#define SHL_QUERY_PIPELINE_PRIVATE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "query/expression.h"
#include "query/pipeline.h"
#include "query/sort.h"

/* ---------------------------------------------------------------- accumulators (pipeline.c) */

typedef enum {
    ACC_SUM,
    ACC_AVG,
    ACC_MIN,
    ACC_MAX,
    ACC_FIRST,
    ACC_LAST,
    ACC_PUSH,
    ACC_ADDTOSET,
    ACC_STDDEV_POP,
    ACC_STDDEV_SAMP,
    ACC_MERGE_OBJECTS,
    ACC_TOP,
    ACC_BOTTOM,
    ACC_TOP_N,
    ACC_BOTTOM_N,
    ACC_FIRST_N,
    ACC_LAST_N,
    ACC_MAX_N,
    ACC_MIN_N
} acc_kind_t;

typedef struct accdef {
    char *field;
    acc_kind_t kind;
    shl_expr_t *arg;             /* the input ('output' of $top/$bottom) */
    int64_t n;                   /* the N accumulators */
    shl_sort_pattern_t *sort_by; /* $top/$bottom/$topN/$bottomN */
} accdef_t;

/* One retained value of an N accumulator, with its sort key for $top/$bottom. */
typedef struct accitem {
    bson_t key;
    bool has_key;
    bson_value_t val;
} accitem_t;

/* Running state of one accumulator in one group. */
typedef struct accstate {
    int64_t isum;
    double dsum;
    int ntype; /* 0 int32, 1 int64, 2 double */
    int64_t count;
    bool seen;
    bson_value_t val; /* min/max/first/last */
    bson_t *arr;      /* push/addToSet, mergeObjects; NULL for the others (keeps groups small) */
    uint32_t narr;
    double mean, m2;  /* stdDev (Welford) */
    accitem_t *items; /* N accumulators, in order */
    size_t nitems, capitems;
} accstate_t;

/*
 * query_acc_parse --
 *     Parse the accumulator at 'a' (an iterator on {$op: <arg>}'s operator field) into 'd'
 *     (d->field is the caller's; 'vars' are the `let` variables for the N accumulators'
 *     constant 'n'). Errors: 15952 unknown operator, 40237, 5787900.. as $group's.
 */
int query_acc_parse(const bson_t *vars, const bson_iter_t *a, accdef_t *d, shl_status_t *st);

/* Running state: init, fold one value (owned by the caller; EOD = missing; 'root' is the input
 * document, for $top/$bottom's sort key; *grow gets the bytes added), append {d->field: result}
 * to 'out', cleanup. */
void query_acc_init(accstate_t *a, const accdef_t *d);
int query_acc_add(accstate_t *a, const accdef_t *d, const bson_value_t *v, const bson_t *root,
                  int64_t *grow, shl_status_t *st);
void query_acc_result(const accstate_t *a, const accdef_t *d, bson_t *out);
void query_acc_cleanup(accstate_t *a, const accdef_t *d);

/* query_value_size -- the bytes a value is accounted for against memory limits. */
int64_t query_value_size(const bson_value_t *v);

/* query_copy_set_path -- copy 'src' (may be NULL) into 'out' with the dotted 'path' set to 'v'
 * (EOD removes it); missing intermediate documents are created. */
void query_copy_set_path(const bson_t *src, const char *path, const bson_value_t *v, bson_t *out);

/* ---------------------------------------------------------------- window stages (window.c) */

typedef struct query_wstage query_wstage_t;

/*
 * query_wstage_parse --
 *     Parse the stage 'name' ("$setWindowFields" or "$densify") with argument 'arg' into
 *     *out (free with query_wstage_destroy). 'vars' (borrowed, may be NULL) are the `let`
 *     variables; 'sort_max_bytes' bounds the stage's internal sort (292 past it). Errors with
 *     MongoDB's parse codes (FailedToParse, TypeMismatch, 40414/40415, 5339900-5339902,
 *     5371601-5371603, 6307900, 5733401.. for $densify).
 */
int query_wstage_parse(const char *name, const bson_iter_t *arg, const bson_t *vars,
                       int64_t sort_max_bytes, query_wstage_t **out, shl_status_t *st);

/*
 * query_wstage_next --
 *     The stage's next output document (borrowed until the next call), NULL at the end,
 *     pulling its input from 'in'. Errors: runtime codes (5722401 partition key an array...,
 *     5429414/5429513 range windows over non-numbers/non-dates, 5643011 past
 *     internalDocumentSourceSetWindowFieldsMaxMemoryBytes, 292 of the sort, 5733201.. of
 *     $densify).
 */
int query_wstage_next(query_wstage_t *w, const shl_pipeline_source_t *in, const bson_t **doc,
                      shl_status_t *st);

void query_wstage_destroy(query_wstage_t *w);

/*
 * query_fill_desugar --
 *     $fill as MongoDB rewrites it: append to the array 'stages' (from key *n on) a
 *     $setWindowFields with $locf/$linearFill for the 'method' outputs and an $addFields with
 *     $ifNull for the 'value' ones. Errors: the $fill parse codes (FailedToParse, 6050201..).
 */
int query_fill_desugar(const bson_iter_t *arg, bson_t *stages, uint32_t *n, shl_status_t *st);

#endif
