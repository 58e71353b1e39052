/*
 * router_private.h -- helpers shared by the router's read commands (cluster_find.c,
 * cluster_aggregate.c). Not for use outside src/router.
 */
#ifndef SHL_ROUTER_ROUTER_PRIVATE_H
#define SHL_ROUTER_ROUTER_PRIVATE_H

#include <bson/bson.h>
#include <stdbool.h>

#include "base/status.h"
#include "net/op_context.h"
#include "router/cluster_cursor_manager.h"
#include "router/cluster_routing.h"

/*
 * The routing of a namespace for a write (cluster_write.c): the router's catalog cache in a
 * router (shl_router_routing_init with the router as 'arg'); a fixed table in unit tests.
 */
typedef int (*router_route_fn)(void *arg, const char *ns, bool create_db, shl_router_routing_t *out,
                               shl_status_t *st);

/*
 * router_write_run / router_find_and_modify_run --
 *     The insert/update/delete (by the command's first key) and findAndModify commands with
 *     the routing 'route' gives: what the router's commands run with its catalog cache, and
 *     what router_test.c runs over a fake shard (shl_router_t.send_hook). Same reply and
 *     errors as the commands.
 */
int router_write_run(shl_op_ctx_t *op, const bson_t *cmd, router_route_fn route, void *route_arg,
                     bson_t *reply, shl_status_t *st);
int router_find_and_modify_run(shl_op_ctx_t *op, const bson_t *cmd, router_route_fn route,
                               void *route_arg, bson_t *reply, shl_status_t *st);

/*
 * router_write_without_shard_key --
 *     MongoDB 7.0's two-phase protocol for one single write whose filter does not pin one
 *     shard (cluster_write_wsk.c): 'kind' "update" / "delete" with the statement 'stmt', or
 *     "findAndModify" (stmt NULL); 'user_cmd' the user's command. Appends to 'reply' what the
 *     write returned on its shard (update/delete: n, nModified, upserted; findAndModify:
 *     lastErrorObject, value); nothing matched: n 0 / value null. In a retryable write,
 *     'stmt_id' is the statement's id: a shard that ran it already (in an earlier internal
 *     transaction of the same write) answers it, and the reply has it in `retriedStmtIds`.
 *     Errors: the internal transaction's (a write error of the statement is returned as an
 *     error).
 */
int router_write_without_shard_key(shl_op_ctx_t *op, const char *coll, const char *kind,
                                   const bson_t *stmt, const bson_t *user_cmd, int32_t stmt_id,
                                   bson_t *reply, shl_status_t *st);

/* Whether reads of database 'db' go to the config server (config, admin). */
bool router_is_config_db(const char *db);

/*
 * router_copy_command --
 *     Append to 'out' the user's command minus generic arguments (including allowDiskUse,
 *     which shl_router_append_generic re-adds) and minus the NULL-terminated 'skip' names,
 *     then the generic arguments a shard should see.
 */
void router_copy_command(const bson_t *cmd, const char *const *skip, bson_t *out);

/*
 * router_runtime_constants --
 *     This router's $$NOW (wall clock, ms) and $$CLUSTER_TIME (0: none) for one command, and
 *     their field for the shards' commands: legacyRuntimeConstants {localNow, clusterTime}
 *     (as mongos sends), so every shard sees the same values (cluster_views.c).
 */
void router_runtime_constants(shl_op_ctx_t *op, int64_t *now_ms, uint64_t *cluster_time);
void router_append_runtime_constants(int64_t now_ms, uint64_t cluster_time, bson_t *cmd);

/*
 * router_copy_command_as --
 *     router_copy_command under the command's own name 'name' (the first field renamed):
 *     lower-case aliases such as dbstats or datasize are the router's to accept.
 */
void router_copy_command_as(const bson_t *cmd, const char *name, const char *const *skip,
                            bson_t *out);

/* The argument of router_build_copy_as: the user's command, the name to send it as and the
 * fields to leave out (NULL-terminated; NULL: none). */
typedef struct router_copy_as {
    const bson_t *cmd;
    const char *name;
    const char *const *skip;
} router_copy_as_t;

/* router_build_copy_as -- a build callback (shl_router_build_fn) writing
 * router_copy_command_as(arg->cmd, arg->name, arg->skip) for every target. */
void router_build_copy_as(void *arg, const shl_router_routing_t *rr, const char *shard,
                          bson_t *cmd);

/*
 * router_write_setting --
 *     Upsert config.settings {_id: id} on the config server with update 'u' (a replacement or
 *     operators), w: "majority", under the operation's maxTimeMS. Errors: the config server's,
 *     a write error's or a write concern error's code.
 */
int router_write_setting(shl_op_ctx_t *op, const char *id, const bson_t *u, shl_status_t *st);

/*
 * router_run_on_config --
 *     Run 'cmd' (the user's, generic fields stripped) on the config server's database 'db';
 *     *reply is always initialised (caller destroys). Errors: the config server's.
 */
int router_run_on_config(shl_op_ctx_t *op, const char *db, const bson_t *cmd, bson_t *reply,
                         shl_status_t *st);

/*
 * router_cursor_from_results --
 *     A router cursor over the cursor replies of a scatter. With 'allow_partial' a shard's
 *     network-like error only drops that shard (partialResultsReturned). Returns the first error
 *     (after killing the remote cursors that did open); *out is NULL then.
 */
int router_cursor_from_results(shl_op_ctx_t *op, shl_router_t *r, const char *ns, const char *db,
                               const char *coll, shl_router_shard_result_t *results, size_t n,
                               bool allow_partial, shl_router_cursor_t **out, shl_status_t *st);

/*
 * router_reply_cursor --
 *     Fill the first batch of 'c' (batch_size; 'zero_batch' means an empty first batch),
 *     register it unless exhausted or single_batch (then destroy it), and append the cursor
 *     reply. Takes ownership of 'c' in every case.
 */
int router_reply_cursor(shl_op_ctx_t *op, shl_router_cursor_t *c, int64_t batch_size,
                        bool zero_batch, bool single_batch, bson_t *reply, shl_status_t *st);

/*
 * router_cursor_batch_size --
 *     The batch size a cursor-returning command asks for: cursor.batchSize (0 when absent);
 *     *zero when it is 0 (an empty first batch). Errors: TypeMismatch, 51024 negative.
 */
int router_cursor_batch_size(const bson_t *cmd, int64_t *out, bool *zero, shl_status_t *st);

/*
 * router_config_cursor_read --
 *     Forward a cursor-returning read (find/aggregate) to the config server and serve its
 *     cursor through a router cursor.
 */
int router_config_cursor_read(shl_op_ctx_t *op, const char *ns, const char *db, const char *coll,
                              const bson_t *cmd, int64_t batch_size, bool zero_batch, bson_t *reply,
                              shl_status_t *st);

/*
 * router_agg_split --
 *     How the router splits 'pipeline' (a BSON array) when it reaches several shards: the
 *     shards part and the merger part, as explain's splitPipeline shows them (*split false:
 *     every stage runs on the shards and the router only concatenates). Both arrays are
 *     initialised by the callee; the caller destroys them. Pure; for tests and explain.
 */
void router_agg_split(const bson_t *pipeline, bson_t *shards_part, bson_t *merger_part,
                      bool *split);

/* The aggregate command, and explain of an aggregate (cluster_aggregate.c). */
int router_cmd_aggregate(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st);

/*
 * router_aggregate_run --
 *     The aggregate 'cmd'; 'view_ns' (NULL: none) is the view it runs for, whose name the
 *     router's cursor takes (its shards' cursors are the collection's).
 */
int router_aggregate_run(shl_op_ctx_t *op, const bson_t *cmd, const char *view_ns, bson_t *reply,
                         shl_status_t *st);

/*
 * router_view_retry --
 *     After a read ('cmd': find, count, distinct, aggregate or explain) ended with 'ret': when
 *     a shard answered CommandOnShardedViewNotSupportedOnMongod (169) with the resolved view,
 *     run the read as the resolved view's aggregate through this router (as mongos does) and
 *     return that result in 'reply'/'st'; otherwise return 'ret' untouched (cluster_views.c).
 */
int router_view_retry(shl_op_ctx_t *op, const bson_t *cmd, int ret, bson_t *reply,
                      shl_status_t *st);

/*
 * router_view_foreign --
 *     The documents of view 'coll' matching 'filter' (may be NULL) for a $lookup/$unionWith
 *     the router's merger runs, after the primary shard answered 169 (in 'st'): the view's
 *     aggregate through this router with the 'generic' fields (readConcern, session): its
 *     first batch in 'reply' (cursor.firstBatch) and *cursor_id the router cursor (named
 *     after the view) holding the rest, 0 when none. Errors: the aggregate's.
 */
int router_view_foreign(shl_op_ctx_t *op, const char *coll, const bson_t *filter,
                        const bson_t *generic, bson_t *reply, int64_t *cursor_id, shl_status_t *st);

/*
 * router_current_op_aggregate --
 *     {aggregate: 1, pipeline: [{$currentOp: {...}}, ...]} on admin (cluster_current_op.c):
 *     the operations in progress (every shard's, tagged; or the router's own with localOps)
 *     through the rest of the pipeline, answered in one batch. Errors: FailedToParse for bad
 *     options, 40602 a second $currentOp, the shards' and the pipeline's errors.
 */
int router_current_op_aggregate(shl_op_ctx_t *op, const bson_t *cmd, const bson_t *pipeline,
                                bson_t *reply, shl_status_t *st);

/* router_append_shard_host -- the host of shard 'name' ("" if unknown). */
void router_shard_host(shl_router_t *r, const char *name, char *out, size_t n);

/*
 * router_append_raw --
 *     mongos's reply to a command run on several shards: raw: {<shard conn string>: reply}
 *     (shard "config": the config server's connection string)
 *     appended to 'reply'; a failure on any shard fails the command with every shard's error
 *     in errmsg and the code they share (or the first one's). Returns 0 or that code.
 */
int router_append_raw(shl_router_t *r, shl_router_shard_result_t *res, size_t n, bson_t *reply,
                      shl_status_t *st);

/*
 * router_agg_out_* -- $out/$merge of an aggregation whose end runs at the router
 * (cluster_agg_output.c), written through the router's own commands.
 *
 * router_agg_out_locate: where the output of 'o' (aggregate database 'db') lives: whether
 *     the target is sharded and its database's primary shard ("" when unknown or the
 *     database does not exist) and version (*dbv, set when the primary is). Never fails;
 *     errors read as "unknown".
 * router_agg_out_begin: check the target and prepare the write for the pipeline 'p' (which
 *     ends with the stage; borrowed until destroy): $out refuses a sharded target (28769), a
 *     capped one (17152) or a view (166), then creates the temporary collection with the
 *     target's options and indexes; $merge resolves 'on' (a sharded target's default is _id
 *     and the shard key) and needs it to include the shard key and be backed by a unique
 *     index (51190). Both refuse a transaction (OperationNotSupportedInTransaction).
 * router_agg_out_write: write the documents of the array 'docs' (the temporary collection,
 *     or $merge's updates/inserts: 13113 whenNotMatched fail, 11000 whenMatched fail, 51132
 *     a bad 'on' value, and the write path's errors).
 * router_agg_out_commit: $out renames the temporary collection over the target
 *     (dropTarget); nothing for $merge.
 * router_agg_out_destroy: drops the temporary collection if not committed. NULL is fine.
 */
typedef struct router_agg_out router_agg_out_t;
void router_agg_out_locate(shl_router_t *r, const shl_pipeline_output_t *o, const char *db,
                           bool *sharded, char *primary, size_t n, shl_database_version_t *dbv);
int router_agg_out_begin(shl_op_ctx_t *op, const shl_pipeline_t *p, const char *db, bool bypass,
                         router_agg_out_t **out, shl_status_t *st);
int router_agg_out_write(router_agg_out_t *w, const bson_t *docs, shl_status_t *st);
int router_agg_out_commit(router_agg_out_t *w, shl_status_t *st);
void router_agg_out_destroy(router_agg_out_t *w);

/*
 * The cluster-wide default read and write concerns (cluster_rw_defaults.c): a cache of the
 * config server's config.settings {_id: "ReadWriteConcernDefaults"} document, read on first
 * use, refreshed every 30 s by the router's periodic thread (as mongos refreshes its RWC
 * defaults cache) and at once when this router changes or reads them.
 */

/* router_rwc_new / router_rwc_destroy -- an empty, not yet loaded cache. */
struct shl_router_rwc *router_rwc_new(void);
void router_rwc_destroy(struct shl_router_rwc *c);

/*
 * router_rwc_refresh --
 *     Read the defaults document from the config server and install it. Blocks on the
 *     config server (bounded); failures are logged and leave the cache as it was.
 */
void router_rwc_refresh(shl_router_t *r);

/*
 * router_rwc_apply --
 *     The request body to run instead of op->body when a cluster-wide default applies, or
 *     NULL: a write command (SHL_CMD_WRITE) without writeConcern gets the default write
 *     concern, a read (find, aggregate, count, distinct) without readConcern the default
 *     read concern, each with provenance "customDefault" (which the shards report back in
 *     errInfo). Without a set write concern a write (and a transaction's commit or abort)
 *     gets the implicit default {w: "majority", wtimeout: 0, provenance:
 *     "implicitDefault"}; an empty writeConcern ({}) counts as none. Without a set read
 *     concern the command's reads run as sent (the shard's implicit "local"). May block
 *     once on the first load. The caller owns the body.
 */
bson_t *router_rwc_apply(shl_router_t *r, shl_op_ctx_t *op, const shl_command_t *cmd);

/*
 * router_snapshot_rewrite --
 *     A find, aggregate or distinct with readConcern {level: "snapshot"} and no atClusterTime:
 *     'body' with atClusterTime set to the router's newest known cluster time (at least the
 *     request's afterClusterTime, which it replaces), as mongos selects it, so that every
 *     targeted shard reads the same snapshot and the router targets the owners at that time.
 *     NULL when nothing changes. Caller destroys the result (cluster_snapshot.c).
 */
bson_t *router_snapshot_rewrite(shl_router_t *r, const shl_command_t *cmd, const bson_t *body);

/*
 * router_snapshot_reply --
 *     After a successful find/aggregate (cursor.atClusterTime) or distinct (atClusterTime):
 *     put the request's snapshot time into 'reply' unless a shard's relayed reply has it.
 *     No-op for other read concerns.
 */
void router_snapshot_reply(const shl_op_ctx_t *op, bson_t *reply);

/*
 * router_sessions_init / router_sessions_shutdown --
 *     The router's logical session cache (cluster_sessions.c): persisted into the cluster's
 *     config.system.sessions, its refresh thread started; stopped and freed at shutdown (before
 *     the cursors, cache and pool it uses). Errors: the thread's start.
 */
int router_sessions_init(shl_router_t *r, shl_service_ctx_t *svc, shl_status_t *st);
void router_sessions_shutdown(shl_router_t *r, shl_service_ctx_t *svc);

/*
 * router_change_stream_aggregate --
 *     An aggregate whose pipeline starts with $changeStream, on collection 'coll' of op->db
 *     (NULL: `aggregate: 1`, a database's or, on admin, the cluster's stream): opened on every
 *     shard, merged by resume token (cluster_change_stream.c). Errors: the shards'.
 */
int router_change_stream_aggregate(shl_op_ctx_t *op, const bson_t *cmd, const char *coll,
                                   const bson_t *pipeline, bson_t *reply, shl_status_t *st);

/*
 * router_change_stream_get_more --
 *     A getMore of change stream cursor 'c' (pinned): the merged events released up to
 *     'batch_size', waiting up to the getMore's maxTimeMS (1 s by default); *dead once the
 *     stream ended (invalidate). Errors: the shards'.
 */
int router_change_stream_get_more(shl_op_ctx_t *op, shl_router_cursor_t *c, int64_t batch_size,
                                  bson_t *reply, bool *dead, shl_status_t *st);

/* Fills the command for the primary shard from the cached database entry 'db' (called once
 * per attempt, on an empty 'out'; the databaseVersion is added after). */
typedef void (*router_primary_build_fn)(void *arg, const shl_cached_database_t *db, bson_t *out);

/*
 * router_send_to_primary --
 *     Send one command to the primary shard of database 'db' with its databaseVersion (unless
 *     fixed), refreshing and retrying (up to SHL_ROUTER_MAX_STALE_RETRIES) while the shard
 *     says the routing of 'ns' was stale. *found is false, and nothing is sent, when the
 *     database does not exist. 'reply' (initialised by the callee) gets the shard's whole
 *     reply on success; 'primary' (may be NULL) the shard's name. Blocks on the network.
 *     Errors: the shard's, the catalog cache's.
 */
int router_send_to_primary(shl_op_ctx_t *op, const char *db, const char *ns,
                           router_primary_build_fn build, void *arg, bool *found, bson_t *reply,
                           char *primary, size_t nprimary, shl_status_t *st);

#endif
