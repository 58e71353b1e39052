/*
 * event_split.h -- $changeStreamSplitLargeEvent: a change stream event too large for one
 * document goes out as fragments, each {_id: <fragment token>, splitEvent: {fragment, of},
 * <some of the event's top-level fields in order>}. Shared by the node's stream and the
 * router's (which splits after updateLookup). docs/design/change_streams.md "Split events".
 */
#ifndef SHL_BSON_EVENT_SPLIT_H
#define SHL_BSON_EVENT_SPLIT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

/*
 * shl_event_is_fragment_of --
 *     Whether token hex 'frag_hex' is the token of a fragment of the event whose token hex is
 *     'event_hex' (the event's KeyString without its end byte, then a fragment number).
 */
bool shl_event_is_fragment_of(const char *frag_hex, const char *event_hex);

/*
 * shl_event_split --
 *     Split 'ev' (its own token hex 'event_hex') into fragments of at most 'max_size' bytes:
 *     its top-level fields but _id in order, as many as fit in each. *frags gets a
 *     bson_malloc'd array of *n bson_new'd fragments (both the caller's to free, also when
 *     *n is 0). When 'skip_hex' is not NULL and a fragment token of this event, the fragments
 *     up to and including it are left out (resuming from a fragment). Fails with
 *     BSONObjectTooLarge (10334) when one field alone does not fit in a fragment, as MongoDB's.
 */
int shl_event_split(const bson_t *ev, const char *event_hex, const char *skip_hex,
                    size_t max_size, bson_t ***frags, size_t *n, shl_status_t *st);

#endif
