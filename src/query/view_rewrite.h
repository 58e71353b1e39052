/*
 * view_rewrite.h -- a read on a view (find, count, distinct, aggregate) as the aggregate that
 * runs it, and that aggregate's reply as the command's (MongoDB's query_request_conversion).
 * The data node and the router both use it. See docs/design/views.md.
 */
#ifndef SHL_QUERY_VIEW_REWRITE_H
#define SHL_QUERY_VIEW_REWRITE_H

#include <bson/bson.h>
#include <stdint.h>

#include "base/status.h"

/* shl_view_append_stages -- append the elements of the array field 'field' of 'doc' (if any)
 * to the array 'arr' from key *n on (advanced). */
void shl_view_append_stages(const bson_t *doc, const char *field, bson_t *arr, uint32_t *n);

/*
 * shl_view_aggregate_cmd --
 *     The aggregate of 'cmd' (an aggregate, find, count or distinct on a view) on collection
 *     'coll' of the same database: the view's resolved 'pipeline' then the command's stages
 *     ($match, $sort, $skip, $limit, $project; $count for count; $unwind/$match/$group for
 *     distinct), with the view's 'collation' (NULL: simple) and the command's other fields.
 *     'out' is initialised here. Errors: OptionNotSupportedOnView (167) for a collation other
 *     than the view's; InvalidPipelineOperator (168) for find options an aggregate cannot
 *     express (tailable, awaitData, noCursorTimeout, allowPartialResults, returnKey,
 *     showRecordId, min, max, resumeAfter); TypeMismatch/IDLFailedToParse for distinct's key.
 */
int shl_view_aggregate_cmd(const bson_t *cmd, const char *coll, const bson_t *pipeline,
                           const bson_t *collation, bson_t *out, shl_status_t *st);

/*
 * shl_view_reply --
 *     Append to 'reply' the reply of command 'cmd_name' from the reply of its aggregate:
 *     count's {n}, distinct's {values}; an aggregate's or find's is copied as it is.
 */
int shl_view_reply(const char *cmd_name, const bson_t *agg_reply, bson_t *reply,
                   shl_status_t *st);

#endif
