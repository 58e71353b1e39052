/*
 * views.h -- read-only views (MongoDB's `create` with viewOn/pipeline): their definitions in
 * <db>.system.views, resolution of a view (and views on views) into its collection and one
 * pipeline, and the rewrites of find / count / distinct on a view into an aggregate.
 * See docs/design/views.md.
 */
#ifndef SHL_DB_VIEWS_H
#define SHL_DB_VIEWS_H

#include <bson/bson.h>
#include <stdbool.h>

#include "base/status.h"
#include "net/op_context.h"
#include "base/namespace.h"

/* MongoDB's limit on views on views. */
#define DB_VIEW_MAX_DEPTH 20

/* A view resolved to the collection it reads and the whole pipeline that reads it. */
typedef struct db_view_resolved {
    char ns[SHL_NS_MAX + 1]; /* the collection at the bottom ("db.coll") */
    bson_t pipeline;         /* array: the innermost view's stages first */
    bson_t collation;        /* the view's default collation; empty: simple */
    bool has_collation;
} db_view_resolved_t;

/*
 * db_view_get --
 *     The definition of view 'ns' ({_id, viewOn, pipeline[, collation]}) from
 *     <db>.system.views into 'def' (always initialised; destroy it); *found false when 'ns'
 *     is not a view. Must be called with no collection lock held. Errors: storage errors.
 */
int db_view_get(shl_op_ctx_t *op, const char *ns, bson_t *def, bool *found, shl_status_t *st);

/*
 * db_view_resolve --
 *     *is_view: whether 'ns' is a view; if so 'out' holds its resolution (clean it with
 *     db_view_resolved_cleanup). Errors: ViewDepthLimitExceeded (165) past 20 views,
 *     GraphContainsCycle (5).
 */
int db_view_resolve(shl_op_ctx_t *op, const shl_ns_t *ns, db_view_resolved_t *out, bool *is_view,
                    shl_status_t *st);
void db_view_resolved_cleanup(db_view_resolved_t *r);

/*
 * db_view_resolved_append --
 *     Append MongoDB's `resolvedView: {ns, pipeline[, collation]}` (the errInfo of
 *     CommandOnShardedViewNotSupportedOnMongod, 169) to 'out'.
 */
void db_view_resolved_append(const db_view_resolved_t *r, bson_t *out);

/*
 * db_check_write_ns --
 *     db_check_user_write_ns, the node's own writes to system.views allowed, and a write to a
 *     view refused: CommandNotSupportedOnView (166).
 */
int db_check_write_ns(shl_op_ctx_t *op, const shl_ns_t *ns, shl_status_t *st);

/* db_refuse_view -- CommandNotSupportedOnView (166) when 'ns' is a view: for the commands
 * MongoDB runs on collections only (collStats, validate, listIndexes, dropIndexes), called
 * where they find no collection. */
int db_refuse_view(shl_op_ctx_t *op, const shl_ns_t *ns, shl_status_t *st);

/*
 * db_view_create --
 *     `create` of a view (the command has viewOn): validates its options and pipeline and
 *     stores the definition. Errors: InvalidOptions (72), TypeMismatch (14), BadValue (2),
 *     OptionNotSupportedOnView (167), NamespaceExists (48), GraphContainsCycle (5),
 *     ViewDepthLimitExceeded (165).
 */
int db_view_create(shl_op_ctx_t *op, const shl_ns_t *ns, const bson_t *cmd, shl_status_t *st);

/* db_view_drop -- drop view 'ns' if it is one (*dropped); no error when it is not. */
int db_view_drop(shl_op_ctx_t *op, const shl_ns_t *ns, bool *dropped, shl_status_t *st);

/*
 * db_view_coll_mod --
 *     collMod of view 'ns' (*handled; false when 'ns' is not a view and the command names no
 *     view option). Errors: InvalidOptions (72) for options other than viewOn/pipeline or
 *     only one of them; as db_view_create for the new definition.
 */
int db_view_coll_mod(shl_op_ctx_t *op, const shl_ns_t *ns, const bson_t *cmd, bool *handled,
                     shl_status_t *st);

/*
 * db_view_list --
 *     The listCollections entries of db's views ({name, type: "view", options, info}),
 *     appended to the array 'entries' from key *n on (advanced).
 */
int db_view_list(shl_op_ctx_t *op, const char *db, bson_t *entries, uint32_t *n, shl_status_t *st);

/*
 * db_view_aggregate_cmd --
 *     The aggregate that runs 'cmd' (an aggregate, find, count or distinct on view 'ns',
 *     resolved as 'r') on the view's collection, into 'out' (initialised here). The user's
 *     collation must be the view's: OptionNotSupportedOnView (167). find options an aggregate
 *     cannot express are refused as MongoDB refuses them: InvalidPipelineOperator (168) for
 *     tailable/oplogReplay/returnKey/showRecordId/min/max, BadValue (2) for others.
 */
int db_view_aggregate_cmd(const bson_t *cmd, const db_view_resolved_t *r, bson_t *out,
                          shl_status_t *st);

#endif
