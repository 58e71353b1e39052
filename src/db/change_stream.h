/*
 * change_stream.h -- $changeStream on a data node (MongoDB's change streams over the oplog):
 * an aggregate whose first stage is $changeStream opens a tailable, awaitData cursor that
 * turns local.oplog.rs entries into change events for one collection, one database
 * (`aggregate: 1`) or the whole node (`aggregate: 1` on admin with allChangesForCluster),
 * runs the allowed follow-on stages over them, and answers every batch with a
 * postBatchResumeToken. docs/design/change_streams.md.
 */
#ifndef SHL_DB_CHANGE_STREAM_H
#define SHL_DB_CHANGE_STREAM_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/namespace.h"
#include "base/status.h"
#include "db/cursor_manager.h"
#include "net/op_context.h"

/*
 * db_change_stream_aggregate --
 *     Run `aggregate` 'cmd' on 'ns' ("db.coll", or "db.$cmd.aggregate" when 'collectionless')
 *     whose 'pipeline' starts with $changeStream: parse the stage's options (fullDocument,
 *     fullDocumentBeforeChange, resumeAfter, startAfter, startAtOperationTime,
 *     allChangesForCluster, showExpandedEvents) and the follow-on stages, position the stream,
 *     fill the first batch (empty unless the start lies in the past) and register the cursor.
 *     The reply is MongoDB's: cursor {firstBatch, postBatchResumeToken, id, ns}. Takes no
 *     collection lock while it waits. Errors: FailedToParse / TypeMismatch / BadValue for
 *     options, IllegalOperation for a stage a change stream does not allow,
 *     InvalidResumeToken (260), ChangeStreamHistoryLost (286), ChangeStreamFatalError (280),
 *     InvalidNamespace for `aggregate: 1` on admin without allChangesForCluster.
 */
int db_change_stream_aggregate(shl_op_ctx_t *op, const bson_t *cmd, const shl_ns_t *ns,
                               bool collectionless, const bson_t *pipeline, bson_t *reply,
                               shl_status_t *st);

/* db_change_stream_is_cursor -- whether 'c' is a change stream's cursor. */
bool db_change_stream_is_cursor(const shl_cursor_t *c);

/*
 * db_change_stream_get_more --
 *     A getMore of change stream cursor 'c' (pinned by the caller): events up to 'batch_size'
 *     (0: no limit but 16 MiB), waiting on new oplog entries until 'await_deadline_us' when
 *     there are none; the reply's cursor {nextBatch, postBatchResumeToken, id, ns}. *dead is
 *     set when the stream ended (after an invalidate) and the cursor must be destroyed.
 *     Errors: as the aggregate, Interrupted / CursorKilled.
 */
int db_change_stream_get_more(shl_op_ctx_t *op, shl_cursor_t *c, int64_t batch_size,
                              int64_t await_deadline_us, bson_t *reply, bool *dead,
                              shl_status_t *st);

/*
 * db_noop_writer_main --
 *     The periodic no-op writer of a replica set member (MongoDB's): every
 *     periodicNoopIntervalSecs, when the oplog's newest entry is older than that, append an
 *     'n' entry {msg: "periodic noop"}, so oplog readers (change streams) see time pass on an
 *     idle node. Thread body; stops with the node's reaper (reaper_stop).
 */
void *db_noop_writer_main(void *arg);

#endif
