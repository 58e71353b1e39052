/*
 * pipeline_private.h -- the interface between the pipeline engine (pipeline.c: the stage table
 * and the chain) and the families of stages in their own files (pipe_*.c, window.c): the
 * $group accumulators, which window functions reuse, a path setter, the window stages' parse /
 * next / destroy, the stage table's types and what the families share. Not part of any public
 * contract.
 */
#ifndef SHL_QUERY_PIPELINE_PRIVATE_H
#define SHL_QUERY_PIPELINE_PRIVATE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/options.h"
#include "base/status.h"
#include "query/expression.h"
#include "query/matcher.h"
#include "query/pipeline.h"
#include "query/projection.h"
#include "query/sort.h"

/* ---------------------------------------------------------------- accumulators (pipe_group.c) */

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
    const shl_collator_t *coll;  /* $min/$max/$minN/$maxN compare strings by it (NULL: simple) */
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

/* query_value_size (pipe_group.c) -- the bytes a value is accounted for against memory limits. */
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

/* query_wstage_set_collator -- $setWindowFields sorts by sortBy and groups partitions under
 * 'coll' (borrowed: the aggregate's, which outlives the stage; NULL: simple). */
void query_wstage_set_collator(query_wstage_t *w, shl_collator_t *coll);

/*
 * query_fill_desugar --
 *     $fill as MongoDB rewrites it: append to the array 'stages' (from key *n on) a
 *     $setWindowFields with $locf/$linearFill for the 'method' outputs and an $addFields with
 *     $ifNull for the 'value' ones. Errors: the $fill parse codes (FailedToParse, 6050201..).
 */
int query_fill_desugar(const bson_iter_t *arg, bson_t *stages, uint32_t *n, shl_status_t *st);

/* ---------------------------------------------------------------- the stage table (pipeline.c)
 *
 * A pipeline is a chain of pipe_stage_t; what a stage does is its row of the stage table in
 * pipeline.c (pipe_stage_def_t: name, parse, next, destroy, placement flags, memory knob, and
 * where the router may run it). Each family of stages lives in its own file and implements
 * the functions its rows name. To add a stage: write its parse (and next/destroy when it is
 * not rewritten into other stages), and add a row to the table.
 */

typedef struct pipe_stage pipe_stage_t;
typedef struct pipe_stage_def pipe_stage_def_t;

/* parse: fill the stage 's' for {name: arg} ('arg' is the iterator on the stage's field, so
 * its key is the stage name; s->pipe is the pipeline). The core allocates 's' first
 * (pipe_stage_new: the common fields and the spec), appends it to the pipeline on success and
 * destroys it on error, as the expression engine does with an operator's node.
 * rewrite: a stage MongoDB defines as other stages ($count, $bucket, $fill...): append them to
 * 'p' (pipe_push, pipe_push_group). next: the stage's next output document (borrowed until the
 * next call; NULL at the end). destroy: free the family's own fields. */
typedef int (*pipe_parse_fn)(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
typedef int (*pipe_rewrite_fn)(shl_pipeline_t *p, const bson_iter_t *arg, shl_status_t *st);
typedef int (*pipe_next_fn)(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
typedef void (*pipe_destroy_fn)(pipe_stage_t *s);

/* Placement rules, checked once the whole pipeline is parsed. GENERATES_INPUT: the stage makes
 * its own documents, so it comes first only (40602). WRITES_OUTPUT: last only (40601), and not
 * in a $lookup's (51047) or $unionWith's (31441) sub-pipeline. NOT_IN_FACET: 40600 inside a
 * $facet. */
#define PIPE_GENERATES_INPUT 0x1u
#define PIPE_WRITES_OUTPUT 0x2u
#define PIPE_NOT_IN_FACET 0x4u

#define PIPE_NO_KNOB (-1)

/* The error of stage 's' whose joined array ($lookup's 'as', a $facet output) would be 'size'
 * bytes, over its 'limit'. */
typedef int (*pipe_too_big_fn)(const pipe_stage_t *s, int64_t size, int64_t limit,
                               shl_status_t *st);

struct pipe_stage_def {
    const char *name;        /* with the '$' */
    pipe_parse_fn parse;     /* a stage: parse, next (and destroy) ... */
    pipe_rewrite_fn rewrite; /* ... or rewritten at parse time into other stages */
    pipe_next_fn next;
    pipe_destroy_fn destroy;    /* NULL: only the common fields */
    unsigned flags;             /* PIPE_* placement rules */
    int knob;                   /* the shl_opt_id_t bounding its memory, or PIPE_NO_KNOB */
    shl_pipeline_split_t split; /* where the router may run it (pipeline.h) */
};

/* Where a pipeline is parsed: sub-pipelines refuse some stages. */
typedef enum { CTX_TOP, CTX_FACET, CTX_LOOKUP, CTX_UNION_WITH } pipe_ctx_t;

typedef struct group {
    struct group *hnext;
    struct group *onext; /* insertion order */
    uint64_t hash;
    bson_value_t key;
    accstate_t *acc;
} pipe_group_t;

struct pipe_stage {
    const pipe_stage_def_t *def; /* its row of the stage table */
    pipe_stage_t *src;           /* NULL: the pipeline's source */
    struct shl_pipeline *pipe;
    bson_t spec; /* for describe */
    char *name;
    bson_t out;
    bool out_init;
    /* per family: each field says which stages use it; the common ones are freed by
     * pipe_stage_destroy, the others by the family's destroy */
    shl_matcher_t *matcher;
    shl_projection_t *proj;
    shl_expr_t *expr; /* group _id, replaceRoot newRoot */
    accdef_t *accs;
    size_t naccs;
    int64_t n, seen;
    shl_sort_pattern_t *pattern;
    shl_sorter_t *sorter;
    bool drained;
    /* group */
    pipe_group_t **buckets;
    size_t nbuckets, ngroups;
    pipe_group_t *ofirst, *olast, *ocur;
    int64_t mem;
    int64_t max_bytes; /* the stage's memory or size limit (set_stage_limits) */
    int64_t max_out;   /* $facet: the size limit of its output document */
    int knob;          /* the shl_opt_id_t max_bytes comes from; -1: none */
    /* unwind */
    char *path, *index_field;
    bool preserve;
    bson_t cur_in;
    bool have_in;
    bson_iter_t arr_it;
    int64_t arr_idx;
    /* buffered documents: $facet input, $sample reservoir, $documents, $bucketAuto */
    bson_t buf;
    bool have_buf;
    bson_iter_t buf_it;
    bson_t buf_cur;
    bson_t **docs;
    size_t ndocs, capdocs, doc_pos;
    bson_value_t *vals; /* $bucketAuto: the groupBy value of docs[i] */
    /* $facet: parsed sub-pipelines and their output names */
    struct shl_pipeline **subs;
    char **sub_names;
    size_t nsubs;
    /* $lookup / $unionWith */
    char *from, *local, *foreign, *as;
    bson_t sub_spec; /* the sub-pipeline array ($lookup pipeline, $unionWith pipeline) */
    bool has_sub;
    char **let_names;
    shl_expr_t **let_exprs;
    size_t nlet;
    bson_t lvars; /* outer variables + the current document's `let` values */
    struct shl_pipeline *run;
    void *cursor;
    bool cursor_open;
    bool src_done;
    /* $graphLookup (from, as, expr = startWith; matcher = restrictSearchWithMatch) */
    char *conn_from, *conn_to, *depth_field;
    int64_t max_depth; /* -1: none */
    bson_t restrict_spec;
    bool has_restrict;
    /* $bucketAuto granularity: a preferred-number series (NULL + pow2 for POWERSOF2) */
    const struct granularity *gran;
    /* $documents ($expr) or $collStats/$indexStats (spec) */
    bson_t stats_spec;
    /* $out / $merge */
    shl_pipeline_output_t output;
    char *out_db, *out_coll;
    char **on_fields;
    bson_t merge_let, merge_pipe;
    bool has_merge_let, has_merge_pipe;
    /* $setWindowFields / $densify */
    query_wstage_t *win;
};

struct shl_pipeline {
    pipe_stage_t **stages;
    size_t nstages;
    size_t first; /* index of the first live stage */
    shl_pipeline_source_t src;
    shl_pipeline_opts_t opts;
    pipe_ctx_t ctx;
    int depth; /* sub-pipeline nesting ($lookup/$unionWith/$facet) */
    bson_t stripped; /* the last output without its text score (opts.keep_text_score) */
};

/* ---------------------------------------------------------------- pipeline.c: what the families
 * share */

/* pipe_stage_new -- a stage of the table's row 'name' (which must have a next), with the spec
 * {name: arg} for explain when 'arg' is not NULL; pipe_stage_destroy frees the common fields,
 * then the family's (NULL is a no-op). pipe_push appends a parsed stage to 'p' (which owns it). */
pipe_stage_t *pipe_stage_new(shl_pipeline_t *p, const char *name, const bson_iter_t *arg);
void pipe_stage_destroy(pipe_stage_t *s);
void pipe_push(shl_pipeline_t *p, pipe_stage_t *s);

/* pipe_parse_stage -- parse one stage document into 'p' (its row's parse, then pipe_push);
 * pipe_sub_parse -- parse a sub-pipeline ($facet, $lookup, $unionWith) with the parent's
 * options ('vars' replaces its variables when not NULL); nesting past 20 levels fails with
 * MaxSubPipelineDepthExceeded. pipe_arg_doc -- a view of the document argument at
 * 'it', or 'code' with 'msg'. */
int pipe_parse_stage(shl_pipeline_t *p, const bson_t *stage_doc, shl_status_t *st);
int pipe_sub_parse(shl_pipeline_t *parent, const bson_t *stages, pipe_ctx_t ctx, const bson_t *vars,
                   shl_pipeline_t **out, shl_status_t *st);
int pipe_arg_doc(const bson_iter_t *it, bson_t *view, int code, const char *msg, shl_status_t *st);

/* pipe_pull_src -- the next document of the stage's input (the previous stage or the
 * pipeline's source). pipe_stage_out -- the stage's output buffer, emptied. pipe_eval_ctx -- the
 * context to evaluate an expression over 'root' with the pipeline's variables. */
int pipe_pull_src(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
bson_t *pipe_stage_out(pipe_stage_t *s);
void pipe_eval_ctx(const pipe_stage_t *s, const bson_t *root, shl_expr_ctx_t *ctx);

/* Memory: pipe_stage_limit -- the caller's override, else the knob's value; pipe_mem_exceeded
 * -- 292 for the stage past s->max_bytes. Buffered documents (s->docs): pipe_docs_add keeps
 * 'doc' (owned) and says whether the stage went past its limit, pipe_docs_push fails with 292
 * then, pipe_docs_clear frees them. */
int64_t pipe_stage_limit(const shl_pipeline_t *p, shl_opt_id_t knob);
int pipe_mem_exceeded(const pipe_stage_t *s, shl_status_t *st);
bool pipe_docs_add(pipe_stage_t *s, bson_t *doc);
int pipe_docs_push(pipe_stage_t *s, bson_t *doc, shl_status_t *st);
void pipe_docs_clear(pipe_stage_t *s);

/* pipe_append_joined -- append 'd' to 'arr' (n counts its elements), the enclosing document
 * holding 'base' bytes already; past 'limit' it fails with too_big(s, size, limit). The limit
 * is checked before appending, so the array never reaches libbson's 2 GiB ceiling.
 * pipe_drain_into -- run 'p' to its end through pipe_append_joined. */
int pipe_append_joined(const pipe_stage_t *s, bson_t *arr, uint32_t *n, int64_t base,
                       const bson_t *d, int64_t limit, pipe_too_big_fn too_big, shl_status_t *st);
int pipe_drain_into(const pipe_stage_t *s, shl_pipeline_t *p, bson_t *arr, uint32_t *n,
                    int64_t base, int64_t limit, pipe_too_big_fn too_big, shl_status_t *st);

/* ---------------------------------------------------------------- the families' rows
 * (pipe_parse_fn, pipe_rewrite_fn, pipe_next_fn, pipe_destroy_fn) and what families share */

/* pipe_basic.c */
int pipe_next_match(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
int pipe_next_project(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
int pipe_next_limit(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
int pipe_next_skip(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
int pipe_next_replace_root(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
int pipe_next_unwind(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
int pipe_next_sort(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
int pipe_next_sample(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
void pipe_destroy_unwind(pipe_stage_t *s);
int pipe_parse_sample(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_parse_match(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_parse_project(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_parse_add_fields(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_parse_unset(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_parse_sort(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_parse_limit_skip(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_parse_unwind(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_parse_replace_root(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);

/* pipe_group.c: pipe_push_group: append a $group stage parsed from 'spec' to 'p' (for the
 * stages rewritten into one: $bucket, $count, $sortByCount), shown in explain as 'explain'
 * (NULL: {$group: spec}); pipe_parse_acc_fields: the accumulator field k of a
 * $group/$bucket/$bucketAuto spec into s->accs. */
int pipe_next_group(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
void pipe_destroy_group(pipe_stage_t *s);
int pipe_parse_acc_fields(shl_pipeline_t *p, pipe_stage_t *s, const char *k, const bson_iter_t *it,
                          shl_status_t *st);
int pipe_push_group(shl_pipeline_t *p, const bson_t *spec, const bson_t *explain, shl_status_t *st);
int pipe_parse_group(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_rewrite_count(shl_pipeline_t *p, const bson_iter_t *arg, shl_status_t *st);
int pipe_rewrite_sort_by_count(shl_pipeline_t *p, const bson_iter_t *arg, shl_status_t *st);

/* pipe_lookup.c */
int pipe_next_lookup(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
int pipe_next_union_with(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
int pipe_next_graph_lookup(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
void pipe_destroy_lookup(pipe_stage_t *s);
int pipe_parse_lookup(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_parse_graph_lookup(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_parse_union_with(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);

/* pipe_bucket.c */
int pipe_next_bucket_auto(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
int pipe_rewrite_bucket(shl_pipeline_t *p, const bson_iter_t *arg, shl_status_t *st);
int pipe_parse_bucket_auto(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);

/* pipe_facet.c */
int pipe_next_facet(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
void pipe_destroy_facet(pipe_stage_t *s);
int pipe_parse_facet(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);

/* pipe_redact.c */
int pipe_next_redact(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
int pipe_parse_redact(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);

/* pipe_documents.c */
int pipe_next_documents(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
void pipe_destroy_documents(pipe_stage_t *s);
int pipe_parse_documents(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_parse_coll_stats(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_parse_index_stats(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);

/* pipe_output.c */
void pipe_destroy_output(pipe_stage_t *s);
int pipe_parse_out(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_parse_merge(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);

/* pipe_window.c */
int pipe_next_window(pipe_stage_t *s, const bson_t **doc, shl_status_t *st);
void pipe_destroy_window(pipe_stage_t *s);
int pipe_parse_window(pipe_stage_t *s, const bson_iter_t *arg, shl_status_t *st);
int pipe_rewrite_fill(shl_pipeline_t *p, const bson_iter_t *arg, shl_status_t *st);

#endif
