/*
 * update_diff.h -- MongoDB's `$v: 2` update oplog format (5.0+): an update's 'u' entry holds
 * {$v: 2, diff: D} instead of the whole new document. A document diff D has the sections
 * d {field: false} (removed), u {field: value} (updated in place), i {field: value} (appended at
 * the end) and s<field> (a sub-diff of a document or array field); an array diff has a: true,
 * l: <new size> (a truncation), u<index>: value and s<index>: sub-diff. Computed from the
 * documents before and after a write, applied by secondaries and recovery, and turned into a
 * change stream event's updateDescription. docs/design/change_streams.md "Update entries".
 */
#ifndef SHL_BSON_UPDATE_DIFF_H
#define SHL_BSON_UPDATE_DIFF_H

#include <bson/bson.h>
#include <stdbool.h>

/*
 * shl_update_diff_compute --
 *     Append to 'out' (initialised by the caller) the sections of the document diff turning
 *     'before' into 'after' (nothing for equal documents). Nested documents are diffed field by
 *     field and arrays element by element; fields that move are removed from their place and
 *     inserted again at the end, so applying the diff to 'before' gives 'after' exactly. Pure.
 */
void shl_update_diff_compute(const bson_t *before, const bson_t *after, bson_t *out);

/*
 * shl_update_diff_apply --
 *     'pre' with the document diff 'diff' applied, into 'out' (initialised here, always
 *     destroyed by the caller). Idempotent like MongoDB's: a sub-diff meeting a field of
 *     another type leaves it alone, an update of a missing field appends it. False (out
 *     empty) when 'diff' is malformed. Pure.
 */
bool shl_update_diff_apply(const bson_t *pre, const bson_t *diff, bson_t *out);

/*
 * shl_update_diff_describe --
 *     Append to 'out' (initialised by the caller) a change stream's updateDescription of
 *     'diff': updatedFields {<dotted path>: value}, removedFields [path], truncatedArrays
 *     [{field, newSize}], and with 'disambiguate' (showExpandedEvents) disambiguatedPaths
 *     {<path>: [components]} for each reported path with a numeric or dotted field name
 *     (array indexes as integers, field names as strings), as MongoDB 7.0 reports them.
 */
void shl_update_diff_describe(const bson_t *diff, bool disambiguate, bson_t *out);

/*
 * shl_update_diff_of --
 *     Whether an update entry's 'o' is in the $v: 2 form; *diff is then a view of its diff
 *     (valid while 'o' is). A replacement ('o' the new document) answers false.
 */
bool shl_update_diff_of(const bson_t *o, bson_t *diff);

/*
 * shl_update_diff_entry_o --
 *     Append to 'out' (initialised by the caller) an update entry's 'o' for 'before' ->
 *     'after': {$v: 2, diff: {...}}.
 */
void shl_update_diff_entry_o(const bson_t *before, const bson_t *after, bson_t *out);

#endif
