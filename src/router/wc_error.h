/*
 * wc_error.h -- the write concern errors of the shards one router command reached, merged
 * into the one writeConcernError the client gets, as mongos does: one shard's error keeps its
 * code, with the message "<CodeName>: <errmsg>; Error details: <errInfo | <none>> at <shard>";
 * several become code 64 (WriteConcernTimeout; 7.0 names it WriteConcernFailed), "Multiple errors
 * reported :: <first> at <shard>
 * :: and :: <second> at <shard>...". The merged document has code, codeName and errmsg
 * (errInfo stays in the message).
 */
#ifndef SHL_ROUTER_WC_ERROR_H
#define SHL_ROUTER_WC_ERROR_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

/* One command's collected errors. Not thread-safe: one command's thread. */
typedef struct router_wce_list {
    char **texts; /* each error's "<CodeName>: <errmsg>; Error details: ... at <shard>" */
    int first_code;
    size_t n, cap;
} router_wce_list_t;

void router_wce_init(router_wce_list_t *l);
void router_wce_cleanup(router_wce_list_t *l);

/*
 * router_wce_note --
 *     If 'reply' (from 'shard') has a writeConcernError document, remember it; returns
 *     whether it had one.
 */
bool router_wce_note(router_wce_list_t *l, const char *shard, const bson_t *reply);

/* router_wce_any -- whether any shard reported one. */
bool router_wce_any(const router_wce_list_t *l);

/* router_wce_append -- append the merged "writeConcernError" to 'out' (nothing if none). */
void router_wce_append(const router_wce_list_t *l, bson_t *out);

#endif
