/*
 * read_concern_support.h -- which commands accept which readConcern outside transactions, as
 * MongoDB's dispatcher checks it (CommandInvocation::supportsReadConcern and
 * allowsAfterClusterTime) on every process: one table, run by net/service.c before the
 * command. docs/design/causal_consistency.md.
 */
#ifndef SHL_NET_READ_CONCERN_SUPPORT_H
#define SHL_NET_READ_CONCERN_SUPPORT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

typedef enum shl_rc_level {
    SHL_RC_LOCAL,
    SHL_RC_MAJORITY,
    SHL_RC_AVAILABLE,
    SHL_RC_LINEARIZABLE,
    SHL_RC_SNAPSHOT,
} shl_rc_level_t;

/* A parsed readConcern. Times are packed Timestamps. */
typedef struct shl_read_concern {
    shl_rc_level_t level; /* local when absent */
    bool has_level;
    bool has_after_cluster_time;
    bool has_at_cluster_time;
    bool has_after_op_time;
    uint64_t after_cluster_time;
    /* snapshot: the requested atClusterTime (0: none), then the time the read runs at
     * (a data node's db_snapshot_read_prepare). */
    uint64_t at_cluster_time;
    uint64_t after_op_time; /* afterOpTime.ts (internal requests) */
} shl_read_concern_t;

/*
 * shl_read_concern_parse --
 *     Parse a readConcern document as MongoDB's ReadConcernArgs: field types (TypeMismatch),
 *     unknown fields (40415), the level's values (BadValue), then the combinations it
 *     refuses, in its order, with InvalidOptions: afterClusterTime with afterOpTime or with
 *     atClusterTime; afterClusterTime with a level other than majority, local or snapshot;
 *     afterOpTime with snapshot; atClusterTime without snapshot; a null atClusterTime or
 *     afterClusterTime. *rc is always initialised. Pure; thread-safe.
 */
int shl_read_concern_parse(const bson_t *doc, shl_read_concern_t *rc, shl_status_t *st);

/*
 * shl_read_concern_check_support --
 *     Whether command 'cmd_name' (request 'body') accepts the request's readConcern 'rc' (the
 *     readConcern document, or NULL when absent). Levels local, majority, available and
 *     linearizable only (snapshot is the dispatcher's check_snapshot_support's); a level that
 *     is not a known string is left to the command's own parse (its TypeMismatch / BadValue).
 *     Every command accepts "local"; find, aggregate, count, distinct, getMore and explain
 *     accept every level, except an aggregate ending in $out or $merge with linearizable;
 *     mapReduce accepts local and available. getMore and mapReduce refuse afterClusterTime.
 *     Errors: InvalidOptions, "Command <name> does not support { readConcern: {...} } ::
 *     caused by :: <why>" with MongoDB's reasons, or "afterClusterTime is not allowed for this
 *     command". Pure; thread-safe.
 */
int shl_read_concern_check_support(const char *cmd_name, const bson_t *body, const bson_t *rc,
                                   shl_status_t *st);

/*
 * shl_read_concern_to_string --
 *     MongoDB's ReadConcernArgs::toString() of the readConcern document 'rc', as its errors
 *     quote it: { readConcern: { level: "majority", afterClusterTime: Timestamp(s, i),
 *     provenance: "clientSupplied" } } (the provenance MongoDB gives a client's own
 *     readConcern unless it named one). A new string; bson_free it.
 */
char *shl_read_concern_to_string(const bson_t *rc);

#endif
