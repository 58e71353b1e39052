/*
 * exec.h -- the data node's query executor: a pull-based tree of plan stages named and
 * measured as MongoDB's (COLLSCAN, IXSCAN, FETCH, IDHACK, SORT, SKIP, LIMIT,
 * PROJECTION_DEFAULT/SIMPLE, EOF), built from a parsed query by exec_plan_build.
 * Access-path selection (exec_access.c) is the planner: IDHACK for {_id: <value>}, an
 * IXSCAN (hinted, or the best of several candidates by a trial run), an OR of IXSCANs
 * for a top-level $or, PROJECTION_COVERED without FETCH, COUNT_SCAN for counts, else a
 * COLLSCAN.
 *
 * A plan reads inside one storage transaction (its snapshot); the transaction, the
 * collection reference and the stages all live in an exec_plan_t, which a cursor keeps
 * across getMores.
 */
#ifndef SHL_DB_EXEC_H
#define SHL_DB_EXEC_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "db/sharding_hooks.h"
#include "db/storage_api.h"
#include "net/op_context.h"
#include "query/matcher.h"
#include "query/projection.h"
#include "query/sort.h"

/* ---------------------------------------------------------------- stages */

/* One row flowing between stages. 'doc' is borrowed until the next call on the stage;
 * NULL for index entries that were not fetched. rid is 0 when no record backs the row. */
typedef struct exec_row {
    int64_t rid;
    const bson_t *doc;
    const uint8_t *key; /* IXSCAN: the entry's stored key bytes (borrowed), else NULL */
    size_t key_len;
} exec_row_t;

/* Per-stage statistics, as explain's executionStages reports them. */
typedef struct exec_stats {
    int64_t works;
    int64_t advanced;
    int64_t need_time;
    bool is_eof;
    int64_t docs_examined; /* COLLSCAN, FETCH, IDHACK */
    int64_t keys_examined; /* IXSCAN, IDHACK */
    int64_t dups_tested;   /* IXSCAN */
    int64_t dups_dropped;
} exec_stats_t;

typedef struct exec_stage exec_stage_t;

/* Context of one call into a plan: the operation (for interrupts) and the snapshot. */
typedef struct exec_ctx {
    shl_op_ctx_t *op;
    shl_storage_txn_t *txn;
} exec_ctx_t;

/*
 * exec_trial_set --
 *     Start (works non-NULL) or end (NULL) a multi-plan trial on the calling thread:
 *     IXSCANs decrement *works per key examined and, once it is 0, report EOF and set
 *     the thread's cut flag (exec_trial_cut) so the trial's score gets no EOF bonus.
 */
void exec_trial_set(int64_t *works);
bool exec_trial_cut(void);

typedef struct exec_stage_ops {
    const char *name; /* MongoDB's stage name */
    /* Produce the next row (*eof when none). Errors: storage errors, interrupts. */
    int (*next)(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st);
    /* Append the stage's own explain fields (filter, keyPattern, ...). May be NULL. */
    void (*explain)(const exec_stage_t *s, bson_t *out);
    /* Close cursors and free the stage's state (not the child). May be NULL. */
    void (*destroy)(exec_stage_t *s);
} exec_stage_ops_t;

struct exec_stage {
    const exec_stage_ops_t *ops;
    exec_stage_t *child;
    exec_stats_t stats;
    /* Stages with several inputs (OR): owned, explained as inputStages; child is NULL. */
    exec_stage_t **children;
    size_t nchildren;
};

/*
 * exec_stage_next --
 *     Pull one row from 's', counting works/advanced/eof. Returns 0 (row or *eof) or an
 *     error code.
 */
int exec_stage_next(exec_stage_t *s, exec_ctx_t *ctx, exec_row_t *row, bool *eof, shl_status_t *st);

/* exec_stage_destroy -- destroy 's' and its children. NULL is fine. */
void exec_stage_destroy(exec_stage_t *s);

/* exec_stage_explain -- explain's document of the tree at 's' ({stage, ..., inputStage(s)}),
 * with execution counters when 'exec_stats'. */
void exec_stage_explain(const exec_stage_t *s, bool exec_stats, bson_t *out);

/*
 * Stage constructors. Borrowed arguments ('coll', 'idx', 'filter', 'pattern', 'proj')
 * must outlive the stage; the plan owns them. The child (if any) moves to the stage.
 */
exec_stage_t *exec_eof_new(void);
exec_stage_t *exec_collscan_new(const shl_collection_t *coll, bool forward,
                                const shl_matcher_t *filter, int64_t min_rid);
exec_stage_t *exec_idhack_new(const shl_collection_t *coll, const bson_value_t *id);
/* [start, end) key bounds (copied; NULL data = unbounded); rows carry rid, doc NULL. */
exec_stage_t *exec_ixscan_new(const shl_index_t *idx, const shl_key_bound_t *start,
                              const shl_key_bound_t *end, bool forward, const char *bounds_desc);
/* exec_ixscan_add_interval -- one more [start, end) interval (copied), scanned after the
 * earlier ones in the scan's direction; a RecordId is returned once over all of them. */
void exec_ixscan_add_interval(exec_stage_t *ixscan, const shl_key_bound_t *start,
                              const shl_key_bound_t *end);
/* exec_ixscan_set_bounds -- explain's indexBounds ({field: ["[lo, hi]"], ...}), copied. */
void exec_ixscan_set_bounds(exec_stage_t *ixscan, const bson_t *bounds);
exec_stage_t *exec_fetch_new(exec_stage_t *child, const shl_collection_t *coll,
                             const shl_matcher_t *filter);
/* OR: the rows of each input in turn, each RecordId once ('children' move to the stage). */
exec_stage_t *exec_or_new(exec_stage_t **children, size_t n);
/* exec_or_new_named -- the same, explained as TEXT_OR when 'text' (a text search's terms). */
exec_stage_t *exec_or_new_named(exec_stage_t **children, size_t n, bool text);
/* COUNT_SCAN: the entries of 'idx' in [start, end) (copied), rows with rid only. */
exec_stage_t *exec_count_scan_new(const shl_index_t *idx, const shl_key_bound_t *start,
                                  const shl_key_bound_t *end, const bson_t *bounds);
/* COUNT: passes its child's rows on (the top of a count command's plan). */
exec_stage_t *exec_count_new(exec_stage_t *child);
/*
 * PROJECTION_COVERED over an IXSCAN of 'idx' (non-multikey, top-level numeric key
 * fields): each entry's key is decoded into a document of the index fields, 'filter'
 * (may be NULL) runs on it and 'proj' makes the result. Values a key cannot restore
 * exactly (null, which may stand for a missing field, and numbers, whose BSON type the
 * key does not keep) are read from the record instead (counted in docsExamined).
 */
exec_stage_t *exec_projection_covered_new(exec_stage_t *ixscan, const shl_collection_t *coll,
                                          const shl_index_t *idx, const shl_projection_t *proj,
                                          const bson_t *spec, const shl_matcher_t *filter);
exec_stage_t *exec_sort_new(exec_stage_t *child, const shl_sort_pattern_t *pattern,
                            const bson_t *pattern_doc, int64_t limit);
/* exec_sort_keep_record_ids -- the SORT stage passes its input's RecordIds on (showRecordId). */
void exec_sort_keep_record_ids(exec_stage_t *sort);
/*
 * RETURN_KEY (return_key: each row becomes its index key {<key field>: value} of
 * 'key_pattern', copied, NULL: {} -- no index) and/or showRecordId ("$recordId":
 * NumberLong appended to each row's document; the row's rid must be set). An array value
 * (multikey) is the scanned entry's key when the row carries it ('unique': keys without
 * RecordIds), else the array's first element.
 */
exec_stage_t *exec_return_key_new(exec_stage_t *child, const bson_t *key_pattern, bool unique,
                                  bool return_key, bool show_record_id);
exec_stage_t *exec_skip_new(exec_stage_t *child, int64_t skip);
exec_stage_t *exec_limit_new(exec_stage_t *child, int64_t limit);
/* SHARDING_FILTER: drops rows whose document this shard does not own ('filter' borrowed). */
exec_stage_t *exec_sharding_filter_new(exec_stage_t *child, const shl_db_orphan_filter_t *filter);

/* exec_text_match_new -- passes the child's documents that match text query 'tq' over index
 * 'ti' (both stolen: the stage frees them), or all of them when 'pass_all' (a $text under
 * $or: the child filtered them with 'searcher', whose $text searches with 'searcher_fn'
 * over 'tq' while the stage lives), with the score of those that match appended when
 * 'add_score'. */
struct shl_text_index;
struct shl_text_query;
exec_stage_t *exec_text_match_new(exec_stage_t *child, struct shl_text_index *ti,
                                  struct shl_text_query *tq, bool add_score, bool pass_all,
                                  shl_matcher_t *searcher, shl_matcher_text_fn searcher_fn);
/* 'filter' is the query's matcher, needed again when the projection is positional. */
exec_stage_t *exec_projection_new(exec_stage_t *child, const shl_projection_t *proj,
                                  const bson_t *spec, bool simple, const shl_matcher_t *filter);
/* exec_projection_set_vars -- the `let` variables its expressions see ('vars' borrowed). */
void exec_projection_set_vars(exec_stage_t *projection, const bson_t *vars);

/* ---------------------------------------------------------------- queries and plans */

/* A parsed find-like request (find, count, distinct, update/delete statements, ...). */
typedef struct exec_query {
    bson_t filter;          /* view; {} when absent */
    shl_matcher_t *matcher; /* owned */
    bool has_sort;
    bson_t sort;                      /* view */
    shl_sort_pattern_t *sort_pattern; /* owned, NULL without sort */
    bool has_projection;
    bson_t projection;      /* view */
    shl_projection_t *proj; /* owned, NULL without projection */
    bool has_hint;
    bson_value_t hint;     /* borrowed: index name or key pattern */
    bool hint_hidden_ok;   /* internal (TTL): the hint may name a hidden index (users'
                              hints of hidden indexes fail with BadValue, as MongoDB's) */
    int64_t skip;          /* 0: none */
    int64_t limit;         /* 0: none */
    bool id_point;         /* filter is exactly {_id: <value>} (IDHACK candidate) */
    bson_value_t id_value; /* borrowed from the filter when id_point */
    const bson_t *let;     /* `let` variables, may be NULL (the projection's; the matcher
                              has its own bound copy) */
    bson_t *let_owned;     /* owned copy 'let' points to when set by exec_query_set_let */
    /* Orphan filter of a versioned read (sharding_hooks.h): a reference owned by the
     * query (released by exec_query_cleanup), NULL for none. */
    shl_db_orphan_filter_t *orphan_filter;
    /* Only the number of results matters (count): rows need no document, so an index
     * whose bounds answer the filter exactly is counted (COUNT_SCAN under COUNT). */
    bool count_only;
    /* find's min/max (views, {} when absent): an IXSCAN of the hinted index over
     * [min, max) in its key order (exec_access_select). */
    bson_t min, max;
    bool has_min, has_max;
    /* find's returnKey (each result is its index key, {} without an index; the
     * projection is ignored) and showRecordId (each result gets "$recordId"). */
    bool return_key, show_record_id;
    /* The query's collation (a reference; NULL: simple) and whether the command named one
     * (otherwise exec_plan_build applies the collection's default). */
    shl_collator_t *collator;
    bool has_collation;
    /* Under a collator: the filter with its strings as collation keys, which index bounds
     * are computed from (owned), and whether a regex keeps every index out (prefix bounds
     * are byte ranges). */
    bson_t *plan_filter;
    bool plan_no_index;
    /* No predicate compares a string: any index's bounds hold whatever its collation. */
    bool string_free;
    /* The filter has a top-level $text (the matcher takes it as true): the plan scans the
     * collection and a TEXT_MATCH stage runs the search (docs/design/text_search.md). */
    bool has_text;
    bson_value_t text; /* has_text: the $text's value (a view of 'filter') */
    bool text_in_or;   /* it is a clause of a top-level $or (searched per document) */
    /* Set by the caller: TEXT_MATCH appends each document's score (SHL_TEXT_SCORE_FIELD) for
     * {$meta: "textScore"}; exec_plan_next removes it again unless text_score_keep (an
     * aggregate's pipeline, a router merging by score, takes it on). */
    bool text_score;
    bool text_score_keep;
} exec_query_t;

/*
 * exec_query_init --
 *     Parse filter/sort/projection (views into the request that must outlive 'q') with
 *     MongoDB's errors (the matcher's, sort's, projection's). NULL documents mean absent.
 *     'q' is always initialised; free with exec_query_cleanup.
 */
int exec_query_init(exec_query_t *q, const bson_t *filter, const bson_t *sort,
                    const bson_t *projection, shl_status_t *st);
void exec_query_cleanup(exec_query_t *q);

/* exec_query_set_let -- give 'q' a command's `let` variables (copied): its matcher's $expr
 * and its projection's expressions see them. */
void exec_query_set_let(exec_query_t *q, const bson_t *vars);

/*
 * exec_query_set_collator --
 *     Run 'q' under 'coll' (a reference is taken; NULL: simple): its matcher and sort
 *     compare strings by it, and the planner uses no index whose collation differs
 *     (docs/design/collation.md). 'explicit' says the command named it.
 */
void exec_query_set_collator(exec_query_t *q, shl_collator_t *coll, bool explicit);

/* exec_collection_collator -- a new reference to the default collator of 'coll' (its
 * create option 'collation'), or NULL for the simple collation or no collection. */
shl_collator_t *exec_collection_collator(const shl_collection_t *coll);

/* What access path the selection chose (explain, tests). */
typedef enum exec_access_kind {
    EXEC_ACCESS_EOF,
    EXEC_ACCESS_COLLSCAN,
    EXEC_ACCESS_IDHACK,
    EXEC_ACCESS_IXSCAN,
    EXEC_ACCESS_OR,
    EXEC_ACCESS_COUNT_SCAN,
} exec_access_kind_t;

/*
 * exec_access_select --
 *     The planner seam: choose the access path of 'q' over 'coll' (NULL: missing
 *     collection -> EOF) and build its stages (leaf, and FETCH with the filter over an
 *     index scan). The filter is applied there unless the path makes it redundant
 *     (IDHACK on an exact _id filter). Errors: BadValue (2) for a hint naming no index
 *     ("planner returned error :: caused by :: hint provided does not correspond to an
 *     existing index"), and a bad $natural hint. *sorted: the rows come out in q's
 *     sort order (an index scan in the sort's direction after an equality prefix on a
 *     non-multikey index), so no SORT stage is needed.
 *     Candidates: every usable index whose bounds restrict the scan, and an OR of index
 *     scans when each branch of a top-level $or has one. With several and a 'trial'
 *     context (its snapshot), each runs for up to 101 results or 10,000 works and the
 *     best by MongoDB's score (1 + advanced/works, +1 at EOF, small bonuses for no
 *     FETCH and no SORT) wins; the others are appended to 'rejected' (an array being
 *     built, may be NULL) as explain documents. With min/max: an IXSCAN of the hinted
 *     index over [min, max), MongoDB's errors: 51173 without a hint, BadValue with a
 *     $natural hint, 51174 when the bounds' fields are not the key pattern's, 51175
 *     when min does not come before max in the index order. With a projection the index covers
 *     (exec_projection_covered_new), the path ends in PROJECTION_COVERED and *covered
 *     is set (the plan adds no PROJECTION). A count_only query whose filter an index's
 *     single interval answers exactly (and no orphan filter) gets COUNT_SCAN.
 */
int exec_access_select(const shl_collection_t *coll, const exec_query_t *q, exec_ctx_t *trial,
                       exec_stage_t **out, exec_access_kind_t *kind, bool *sorted, bool *covered,
                       bson_t *rejected, shl_status_t *st);

/* A runnable plan: stages + snapshot + collection reference. */
typedef struct exec_plan {
    exec_stage_t *root;
    shl_storage_txn_t *txn; /* owned unless borrowed_txn */
    bool borrowed_txn;
    shl_collection_t *coll; /* reference or NULL */
    exec_access_kind_t access;
    char index_name[128]; /* the (first) IXSCAN's index, "" otherwise */
    char **index_names;   /* every index the plan scans (OR: several) */
    size_t nindex_names;
    exec_query_t *q; /* owned when own_query */
    bool own_query;
    bson_t rejected; /* explain's rejectedPlans (an array) */
    char ns[SHL_NS_MAX + 1];
    bson_t stripped; /* exec_plan_next's last document without its text score */
} exec_plan_t;

/*
 * exec_plan_build --
 *     Build the whole plan for 'q' over 'coll' (borrowed reference; the plan takes its
 *     own): access path, SHARDING_FILTER (when q->orphan_filter), then SORT (top-k with
 *     skip+limit), SKIP, LIMIT, PROJECTION.
 *     'txn' is the snapshot to read in: when NULL a new transaction is begun at
 *     'read_ts' (0 = latest) and owned by the plan. 'q' stays borrowed unless
 *     exec_plan_own_query is called. Errors: exec_access_select's, storage's.
 */
int exec_plan_build(shl_storage_engine_t *eng, shl_storage_txn_t *txn, uint64_t read_ts,
                    shl_collection_t *coll, const char *ns, exec_query_t *q, exec_plan_t **out,
                    shl_status_t *st);

/* exec_plan_dropped_index -- the name of an index 'p' scans that 'coll' no longer has,
 * or NULL. */
const char *exec_plan_dropped_index(const exec_plan_t *p, const shl_collection_t *coll);

/* exec_plan_own_query -- the plan takes ownership of 'q' (heap, from bson_malloc). */
void exec_plan_own_query(exec_plan_t *p);

/* exec_plan_next -- the next result document (borrowed), or *doc NULL at the end. */
int exec_plan_next(exec_plan_t *p, shl_op_ctx_t *op, exec_row_t *row, bool *eof, shl_status_t *st);

/* exec_plan_destroy -- destroy stages, end the owned transaction, release the collection. */
void exec_plan_destroy(exec_plan_t *p);

/*
 * exec_plan_explain --
 *     Append queryPlanner {namespace, parsedQuery, winningPlan, rejectedPlans} and, when
 *     'exec_stats', executionStats {executionSuccess, nReturned, executionTimeMillis,
 *     totalKeysExamined, totalDocsExamined, executionStages}.
 */
void exec_plan_explain(const exec_plan_t *p, bool exec_stats, int64_t n_returned, int64_t millis,
                       bson_t *out);

/* exec_plan_cursor_ops -- cursor source ops over an exec_plan_t (state = the plan). */
extern const struct shl_cursor_source_ops exec_plan_cursor_ops;

/* ---------------------------------------------------------------- index bounds */

/*
 * exec_bounds_for_field --
 *     Key bounds on an index whose first field is 'field' (direction 'descending') from
 *     the filter's simple top-level predicates on it (equality on a scalar, $eq, $gt,
 *     $gte, $lt, $lte). The bounds may be wider than the predicate (the FETCH filter
 *     decides); *bounded false means a full scan. 'start'/'end' receive owned bytes
 *     (shl_keystring_t, cleaned up by the caller); 'desc' a short description for
 *     explain.
 */
struct shl_keystring;
void exec_bounds_for_field(const bson_t *filter, const char *field, bool descending,
                           struct shl_keystring *start, struct shl_keystring *end, bool *has_start,
                           bool *has_end, char *desc, size_t desc_len);

#endif
