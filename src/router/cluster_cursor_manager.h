/*
 * cluster_cursor_manager.h -- the router's cursors (MongoDB's ClusterCursorManager and
 * AsyncResultsMerger in one): a router cursor holds, per shard (or the config server), the
 * remote cursor id and the batch last received, merges them (by a sort pattern, or in shard
 * order), applies the global skip/limit/projection of a find or the merge part of an
 * aggregation, and fetches more with getMore as the buffers drain. Ids are unique per
 * router; idle cursors are reaped after cursorTimeoutMillis and their remote cursors killed.
 */
#ifndef SHL_ROUTER_CLUSTER_CURSOR_MANAGER_H
#define SHL_ROUTER_CLUSTER_CURSOR_MANAGER_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/namespace.h"
#include "base/status.h"
#include "net/client.h"
#include "net/op_context.h"
#include "query/pipeline.h"
#include "query/projection.h"
#include "query/sort.h"
#include "sharding/sharding_types.h"

struct shl_router;

#define SHL_ROUTER_CURSOR_FIRST_BATCH 101
#define SHL_ROUTER_CURSOR_MAX_BATCH_BYTES (16 * 1024 * 1024)

/* One remote cursor: a shard's (or the config server's). */
typedef struct shl_router_remote {
    char shard[SHL_SHARD_ID_MAX]; /* shard name; "" for the config server */
    /* The member of the shard's replica set that opened the cursor ("": the shard's
     * primary, as the registry names it); getMore and killCursors go there. */
    char host[SHL_CLIENT_HOST_MAX];
    int64_t cursor_id;            /* 0: the remote has nothing more */
    bson_t *batch;                /* the last batch received (an array), owned */
    bson_iter_t it;               /* position in 'batch' */
    bool has_head;                /* 'head' is the next document to merge */
    bson_t head;                  /* static view into 'batch' */
} shl_router_remote_t;

/* How an aggregation's merge part fixes up split $avg partials between its two halves. */
typedef struct shl_router_avg_fixup {
    char **fields; /* output field names holding a partial sum (bson_strfreev) */
} shl_router_avg_fixup_t;

typedef struct shl_router_cursor {
    int64_t id; /* set by register; 0 before */
    char ns[SHL_NS_MAX + 1];
    /* A snapshot read's atClusterTime, which every getMore reply carries (0: none); set
     * with the session from the opening operation. */
    uint64_t at_cluster_time;
    char db[SHL_NS_MAX + 1];   /* the remote cursors' database */
    char coll[SHL_NS_MAX + 1]; /* the remote cursors' collection (getMore's `collection`) */
    struct shl_router *r;
    shl_router_remote_t *remotes;
    size_t nremotes;
    size_t cur_remote; /* unsorted merge: the remote being drained */

    /* Find: merge order, global skip/limit, a projection applied at the router. */
    shl_sort_pattern_t *sort; /* NULL: shard order */
    int64_t skip;             /* still to skip */
    int64_t limit;            /* 0: none */
    int64_t n_returned;
    shl_projection_t *proj;
    shl_matcher_t *matcher; /* for a positional projection */
    bool keep_record_id;    /* showRecordId: "$recordId" survives the router's projection */

    /* Aggregate: the merge part (first half, fix-up, second half), pulling from the merge. */
    shl_pipeline_t *merge_a, *merge_b;
    shl_router_avg_fixup_t fixup;
    bson_t fixed; /* the last fixed-up document */
    bson_t *vars; /* the command's `let`, owned (the pipelines borrow it) */
    shl_collator_t *collator; /* the command's collation (a reference the pipelines borrow;
                                 NULL: simple) */
    /* The merge part's environment (reads of other collections), owned: freed by
     * env_state_free after the pipelines, whose stages may still close foreign reads. */
    void *env_state;
    void (*env_state_free)(void *state);
    bson_t *session; /* lsid/txnNumber/autocommit sent with getMore and killCursors, or NULL */
    bool has_lsid;   /* the session it was opened in (killed with it): set with 'session' */
    shl_lsid_t lsid;
    /* The digest of the user that opened it (shl_op_user_digest, set before register):
     * another user may not use or kill it (shl_op_may_use_owned). */
    uint8_t owner[SHL_LSID_UID_LEN];

    bson_t *stash;    /* an output document that did not fit the last batch */
    bson_t projected; /* the last projected document */
    shl_op_ctx_t *op; /* the operation using the cursor (set while pinned) */
    bool no_timeout;
    bool allow_partial;  /* allowPartialResults: an unreachable shard ends its remote only */
    int64_t fetch_batch; /* batchSize of the getMores to the shards; 0: theirs (16 MiB) */
    bool partial;        /* a remote was dropped that way: partialResultsReturned */
    /* A change stream (cluster_change_stream.c): its state is 'env_state' and its getMores
     * merge the shards' events by resume token instead of the fields above. */
    bool change_stream;

    /* Guarded by the manager's lock. */
    bool pinned;
    bool kill_pending;
    int64_t last_used_ms;
    struct shl_router_cursor *next;
} shl_router_cursor_t;

/*
 * shl_router_cursor_new --
 *     An empty cursor for the user namespace 'ns' whose remote cursors live in db.coll.
 *     Add remotes with shl_router_cursor_add_remote; set the merge fields directly (the
 *     cursor owns sort, proj, matcher, merge_a/merge_b and fixup once set).
 */
shl_router_cursor_t *shl_router_cursor_new(struct shl_router *r, const char *ns, const char *db,
                                           const char *coll);

/*
 * shl_router_cursor_set_session --
 *     Remember the operation's session fields (lsid, txnNumber, autocommit) so the cursor's
 *     getMores and killCursors to the shards run in the session the cursors were opened in.
 */
void shl_router_cursor_set_session(shl_router_cursor_t *c, const shl_op_ctx_t *op);

/*
 * shl_router_cursor_add_remote --
 *     Add a remote cursor from a find/aggregate reply ({cursor: {id, firstBatch}}).
 *     'shard' NULL or "" means the config server. Errors: FailedToParse for a reply without
 *     a cursor.
 */
int shl_router_cursor_add_remote(shl_router_cursor_t *c, const char *shard, const bson_t *reply,
                                 shl_status_t *st);

/*
 * shl_router_cursor_pin_last_remote --
 *     The remote just added has its cursor on member 'host' (the one the find went to: a
 *     secondary for a secondary read): its getMores and killCursors go there, not to the
 *     shard's primary.
 */
void shl_router_cursor_pin_last_remote(shl_router_cursor_t *c, const char *host);

/*
 * shl_router_cursor_source --
 *     A pipeline source producing the merged remote documents (to feed a merge pipeline).
 */
shl_pipeline_source_t shl_router_cursor_source(shl_router_cursor_t *c);

/*
 * shl_router_cursor_set_merge --
 *     Install an aggregation's merge part: 'a' pulls from the merged remote documents; when
 *     'avg_fields' (a NULL-terminated bson_strdupv list, ownership moves) is given, 'b' pulls
 *     from 'a' after the partial sums named there are divided by their counts
 *     (`__shl_avgn_<field>`, removed). The cursor owns both pipelines.
 */
void shl_router_cursor_set_merge(shl_router_cursor_t *c, shl_pipeline_t *a, shl_pipeline_t *b,
                                 char **avg_fields);

/*
 * shl_router_cursor_fill_batch --
 *     Append up to 'batch_size' output documents (0: 101 for a first batch, unlimited for a
 *     getMore) to the array 'arr', within 16 MiB; *exhausted says whether nothing is left.
 *     Blocks on getMores to the shards (bounded by op's deadline). Errors: a shard's error
 *     (the first), the merge pipeline's, MaxTimeMSExpired/Interrupted.
 */
int shl_router_cursor_fill_batch(shl_op_ctx_t *op, shl_router_cursor_t *c, int64_t batch_size,
                                 bool first, bson_t *arr, bool *exhausted, shl_status_t *st);

/*
 * shl_router_cursor_destroy --
 *     Kill the remote cursors still open (killCursors, best effort, bounded) and free the
 *     cursor. NULL is fine.
 */
void shl_router_cursor_destroy(shl_router_cursor_t *c);

/* shl_router_cursor_reply -- append cursor: {firstBatch|nextBatch: arr, id, ns} and, when
 * 'partial', partialResultsReturned: true. */
void shl_router_cursor_reply(bson_t *reply, const char *ns, int64_t id, bool first,
                             const bson_t *arr, bool partial);

/* shl_router_cursor_reply_at -- shl_router_cursor_reply plus cursor.atClusterTime when 'at'
 * is not 0 (a snapshot read's time). */
void shl_router_cursor_reply_at(bson_t *reply, const char *ns, int64_t id, bool first,
                                const bson_t *arr, bool partial, uint64_t at);

/* shl_router_partial_ok -- whether allowPartialResults lets a shard's error 'code' be
 * skipped (network errors, timeouts, retriable errors, as mongos). */
bool shl_router_partial_ok(int code);

typedef struct shl_router_cursor_manager shl_router_cursor_manager_t;

/* A manager with its reaper thread (wakes every 4 s, reads cursorTimeoutMillis each time). */
shl_router_cursor_manager_t *shl_router_cursor_manager_new(void);

/* Stop the reaper and free every cursor without contacting the shards (shutdown). */
void shl_router_cursor_manager_destroy(shl_router_cursor_manager_t *mgr);

/* Give 'c' a fresh id, unique in this router, and keep it (ownership moves). Thread-safe. */
/*
 * shl_router_cursor_manager_owner --
 *     The owner digest of cursor 'id' of 'ns' into 'out'; false when there is no such
 *     cursor. Thread-safe.
 */
bool shl_router_cursor_manager_owner(shl_router_cursor_manager_t *mgr, int64_t id, const char *ns,
                                     uint8_t out[SHL_LSID_UID_LEN]);

int64_t shl_router_cursor_manager_register(shl_router_cursor_manager_t *mgr,
                                           shl_router_cursor_t *c);

/*
 * shl_router_cursor_manager_pin --
 *     Take cursor 'id' of 'ns' for a getMore. Errors: CursorNotFound (43), CursorInUse
 *     (143), Unauthorized (13) for another namespace. Thread-safe.
 */
int shl_router_cursor_manager_pin(shl_router_cursor_manager_t *mgr, int64_t id, const char *ns,
                                  shl_router_cursor_t **out, shl_status_t *st);

/* Return a pinned cursor; destroyed (remote cursors killed) when 'destroy' or killed meanwhile. */
void shl_router_cursor_manager_unpin(shl_router_cursor_manager_t *mgr, shl_router_cursor_t *c,
                                     bool destroy);

/* Kill cursor 'id' of 'ns' (its remote cursors too). Returns false when not found. */
bool shl_router_cursor_manager_kill(shl_router_cursor_manager_t *mgr, int64_t id, const char *ns);

/* Destroy unpinned cursors idle for more than timeout_ms; returns how many. */
int shl_router_cursor_manager_reap(shl_router_cursor_manager_t *mgr, int64_t now_ms,
                                   int64_t timeout_ms);

/* Open cursors. */
int64_t shl_router_cursor_manager_count(shl_router_cursor_manager_t *mgr);

/*
 * shl_router_cursor_manager_kill_sessions --
 *     Kill every cursor opened in a session 'match' accepts (called under the manager's lock;
 *     must not block), its remote cursors too; a pinned one goes when unpinned. Returns how
 *     many.
 */
int shl_router_cursor_manager_kill_sessions(shl_router_cursor_manager_t *mgr,
                                            bool (*match)(void *arg, const shl_lsid_t *lsid),
                                            void *arg);

/* shl_router_cursor_manager_sessions -- fn(arg, lsid) for the session of every cursor opened in
 * one, under the manager's lock ('fn' must not block). */
void shl_router_cursor_manager_sessions(shl_router_cursor_manager_t *mgr,
                                        void (*fn)(void *arg, const shl_lsid_t *lsid), void *arg);

#endif
