/*
 * read_concern_support.h -- which commands accept which readConcern outside transactions, as
 * MongoDB's dispatcher checks it (CommandInvocation::supportsReadConcern and
 * allowsAfterClusterTime) on every process: one table, run by net/service.c before the
 * command. docs/design/causal_consistency.md.
 */
#ifndef SHL_NET_READ_CONCERN_SUPPORT_H
#define SHL_NET_READ_CONCERN_SUPPORT_H

#include <bson/bson.h>

#include "base/status.h"

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

#endif
