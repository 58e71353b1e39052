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
#include "bson/collation.h"

/*
 * shl_pipeline_source_t -- where the first stage pulls from. next() sets *doc to the next
 * input document (borrowed until the following call) or NULL at the end; returns 0 or a
 * MongoDB code with 'st' filled.
 */
typedef struct shl_pipeline_source {
    int (*next)(void *arg, const bson_t **doc, shl_status_t *st);
    void *arg;
} shl_pipeline_source_t;

/*
 * shl_pipeline_env_t -- what the stages that read other collections or catalog data need
 * from the caller ($lookup, $unionWith, $graphLookup, $collStats, $indexStats), so src/query
 * stays free of storage and of routing. Every callback is optional; a stage whose callback
 * is missing fails at run time with NotImplemented. src/db reads its storage; the router's
 * merger reads through the router (a targeted, versioned find).
 *   open:  a source over collection 'coll' of the pipeline's database, restricted to the
 *          documents matching 'filter' (may be NULL = all; the caller may apply it with an
 *          index); a missing collection is an empty source. *cursor is handed back to
 *          close() when the stage is done with the source.
 *   stats: append the documents of the $collStats or $indexStats stage ('stage', its
 *          argument 'spec') to the array 'docs'.
 */
typedef struct shl_pipeline_env {
    int (*open)(void *arg, const char *coll, const bson_t *filter, shl_pipeline_source_t *src,
                void **cursor, shl_status_t *st);
    void (*close)(void *arg, void *cursor);
    int (*stats)(void *arg, const char *stage, const bson_t *spec, bson_t *docs, shl_status_t *st);
    void *arg;
} shl_pipeline_env_t;

/* shl_pipeline_opts_t -- `let` variables (may be NULL), allowDiskUse (Shale never spills: it
 * only words the memory errors), an override of every stage's memory or size limit
 * (max_memory_bytes > 0, for tests; <= 0: each stage's MongoDB knob, see docs/limits.md), and
 * the environment (may be NULL; borrowed, must outlive the pipeline). */
typedef struct shl_pipeline_opts {
    const bson_t *vars;
    bool allow_disk_use;
    int64_t max_memory_bytes;
    const shl_pipeline_env_t *env;
    /* The aggregate's collation (borrowed: must outlive the pipeline; NULL: simple): $match,
     * $sort and $group keys compare strings by it. */
    shl_collator_t *collator;
    /* The caller runs the first $match as its query (shl_pipeline_leading_match) with the
     * text search: a $text in it parses (SHL_MATCHER_TEXT_DEFERRED). Not in sub-pipelines. */
    bool leading_text;
    /* Output documents keep the text score they carry (SHL_TEXT_SCORE_FIELD): a shard's
     * results for a router that merges by it. Otherwise shl_pipeline_next removes it. */
    bool keep_text_score;
} shl_pipeline_opts_t;

/* The writing stage that ends a pipeline ($out or $merge), parsed; see shl_pipeline_output. */
typedef enum {
    SHL_MERGE_REPLACE,
    SHL_MERGE_KEEP_EXISTING,
    SHL_MERGE_MERGE,
    SHL_MERGE_FAIL,
    SHL_MERGE_PIPELINE
} shl_merge_matched_t;

typedef enum { SHL_MERGE_INSERT, SHL_MERGE_DISCARD, SHL_MERGE_NOT_MATCHED_FAIL } shl_merge_nm_t;

typedef struct shl_pipeline_output {
    bool is_merge;  /* false: $out */
    const char *db; /* NULL: the aggregate's database */
    const char *coll;
    /* $merge only */
    char **on; /* field paths (borrowed); NULL-terminated; default {"_id"} */
    size_t non;
    bool on_given;
    shl_merge_matched_t when_matched;
    shl_merge_nm_t when_not_matched;
    const bson_t *update_pipeline; /* SHL_MERGE_PIPELINE: the array */
    const bson_t *let;             /* may be NULL: {new: "$$ROOT"} */
} shl_pipeline_output_t;

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
 *     the end. Errors: stage runtime errors (expression errors, 292 memory limit of $group,
 *     $sort, $sample or $bucketAuto, 40099 of $graphLookup, 146 of $push/$addToSet and of
 *     $facet's input, 4568 $lookup's joined documents, 4031700 $facet's output document,
 *     40228 $replaceRoot of a non-object, ...).
 */
int shl_pipeline_next(shl_pipeline_t *p, const bson_t **doc, shl_status_t *st);

/*
 * shl_pipeline_output --
 *     The $out/$merge stage that ends the pipeline (borrowed from it), or NULL. The pipeline
 *     itself passes documents through that stage; the caller writes them (src/db).
 */
const shl_pipeline_output_t *shl_pipeline_output(const shl_pipeline_t *p);

/*
 * shl_pipeline_merge_vars --
 *     The variables of a $merge whenMatched pipeline for the output document 'doc': its
 *     `let` evaluated against 'doc', or {new: doc} by default, then the command's variables
 *     (opts.vars) it does not shadow. *out is always initialised.
 */
int shl_pipeline_merge_vars(const shl_pipeline_t *p, const bson_t *doc, bson_t *out,
                            shl_status_t *st);

/*
 * shl_pipeline_first_stage --
 *     The name of the first stage ("$documents", ...) or NULL for an empty pipeline.
 *     shl_pipeline_generates_input: the first stage makes its own documents ($documents,
 *     $collStats, $indexStats), so the caller need not supply a source.
 */
const char *shl_pipeline_first_stage(const shl_pipeline_t *p);
bool shl_pipeline_generates_input(const shl_pipeline_t *p);

/* shl_pipeline_describe -- append the stages as parsed (for explain) to 'arr' as an array
 * of stage documents. */
void shl_pipeline_describe(const shl_pipeline_t *p, bson_t *arr);

void shl_pipeline_destroy(shl_pipeline_t *p);

/*
 * shl_pipeline_run_array --
 *     Run the documents of the BSON array 'docs' (borrowed) through 'stages' (a BSON array of
 *     stage documents, e.g. [{$match: ...}, {$sort: ...}]; an empty one passes everything)
 *     and append the results to the array 'out' from key *n on (advanced). For documents a
 *     process makes itself (currentOp's), which may hold `$`-prefixed field names that a
 *     $documents expression would refuse. A stage writing output ($out, $merge) is refused
 *     (IllegalOperation). Errors: shl_pipeline_parse's and shl_pipeline_next's.
 */
int shl_pipeline_run_array(const bson_t *docs, const bson_t *stages, bson_t *out, uint32_t *n,
                           shl_status_t *st);

/*
 * shl_pipeline_split_t -- where the router may run a stage of a pipeline over a sharded
 * collection (router/cluster_aggregate.c splits it into a shards part and a merge part):
 *   SHL_PIPELINE_SPLIT_MERGER     in the merge part only: the default, and the stages whose
 *                                 shard half the router builds itself ($sort, $limit, $skip,
 *                                 $group, $count, $sortByCount) are this too;
 *   SHL_PIPELINE_SPLIT_STREAMING  document by document on each shard, as long as every stage
 *                                 before it does too;
 *   SHL_PIPELINE_SPLIT_EACH_SHARD as the first stage, on each shard, the merger concatenating
 *                                 what the shards make ($collStats, $indexStats).
 */
typedef enum {
    SHL_PIPELINE_SPLIT_MERGER,
    SHL_PIPELINE_SPLIT_STREAMING,
    SHL_PIPELINE_SPLIT_EACH_SHARD
} shl_pipeline_split_t;

/* shl_pipeline_stage_split -- the split property of the stage 'name' ("$match", ...);
 * SHL_PIPELINE_SPLIT_MERGER for a name that is no stage. */
shl_pipeline_split_t shl_pipeline_stage_split(const char *name);

#endif
