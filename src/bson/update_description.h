/*
 * update_description.h -- a change stream update event's updateDescription computed from the
 * document before and after an update: {updatedFields: {<dotted path>: value}, removedFields:
 * [paths], truncatedArrays: [{field, newSize}]}, as MongoDB derives it from its $v:2 update
 * diff (nested documents are described field by field, arrays element by element, a shrunk
 * array as a truncation). docs/design/change_streams.md "Update descriptions".
 */
#ifndef SHL_BSON_UPDATE_DESCRIPTION_H
#define SHL_BSON_UPDATE_DESCRIPTION_H

#include <bson/bson.h>

/*
 * shl_update_description --
 *     Append to 'out' (initialised by the caller) the three fields updatedFields,
 *     removedFields, truncatedArrays describing how 'before' became 'after'. Pure.
 */
void shl_update_description(const bson_t *before, const bson_t *after, bson_t *out);

#endif
