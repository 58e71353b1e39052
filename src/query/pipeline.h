/*
 * pipeline.h -- the aggregation pipeline engine: a parsed pipeline is a chain of stages,
 * each pulling documents from the one before; the first pulls from a source the caller
 * provides (src/db implements it over the executor). No storage dependency here, so the
 * router can later run a "shards part" and a "merge part" of the same chain.
 */
#ifndef SHL_QUERY_PIPELINE_H
#define SHL_QUERY_PIPELINE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

/*
 * shl_pipeline_source_t -- where the first stage pulls from. next() sets *doc to the next
 * input document (borrowed until the following call) or NULL at the end; returns 0 or a
 * MongoDB code with 'st' filled.
 */
typedef struct shl_pipeline_source {
    int (*next)(void *arg, const bson_t **doc, shl_status_t *st);
    void *arg;
} shl_pipeline_source_t;

/* shl_pipeline_opts_t -- `let` variables (may be NULL), allowDiskUse, and the per-stage
 * memory limit of buffering stages ($group; <= 0 means 100 MB). */
typedef struct shl_pipeline_opts {
    const bson_t *vars;
    bool allow_disk_use;
    int64_t max_memory_bytes;
} shl_pipeline_opts_t;

typedef struct shl_pipeline shl_pipeline_t;

/*
 * shl_pipeline_parse --
 *     Parse 'stages' (the BSON array of stage documents; borrowed) into *out (free with
 *     shl_pipeline_destroy). 'opts' may be NULL and is copied (vars are borrowed and must
 *     outlive the pipeline). Errors with MongoDB's codes: 40323 stage not an object with one
 *     field, 40324 "Unrecognized pipeline stage name: '$x'", 15955/15956/15957/15958 $limit
 *     and $skip arguments, 40156-40160 $count, 15976 $group accumulator errors, 15952 $group
 *     without _id, 40147 $sortByCount argument, and the matcher's/projection's/sort's/
 *     expression's parse errors.
 */
int shl_pipeline_parse(const bson_t *stages, const shl_pipeline_opts_t *opts, shl_pipeline_t **out,
                       shl_status_t *st);

/* shl_pipeline_set_source -- the input of the first stage (copied). Must be called before
 * shl_pipeline_next. */
void shl_pipeline_set_source(shl_pipeline_t *p, const shl_pipeline_source_t *src);

/*
 * shl_pipeline_leading_match --
 *     The filter of a $match that is the first stage (borrowed from the pipeline), or NULL.
 *     When the caller applies it itself (e.g. as the executor's find filter, so indexes are
 *     used), it calls shl_pipeline_drop_leading_match so it is not applied twice.
 */
const bson_t *shl_pipeline_leading_match(const shl_pipeline_t *p);
void shl_pipeline_drop_leading_match(shl_pipeline_t *p);

/*
 * shl_pipeline_next --
 *     Pull the next output document: *doc is borrowed until the next call or destroy, NULL at
 *     the end. Errors: stage runtime errors (expression errors, 292 memory limit of $group
 *     or $sort, 40228 $replaceRoot of a non-object, ...).
 */
int shl_pipeline_next(shl_pipeline_t *p, const bson_t **doc, shl_status_t *st);

/* shl_pipeline_describe -- append the stages as parsed (for explain) to 'arr' as an array
 * of stage documents. */
void shl_pipeline_describe(const shl_pipeline_t *p, bson_t *arr);

void shl_pipeline_destroy(shl_pipeline_t *p);

#endif
