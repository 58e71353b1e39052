/*
 * session_commands.h -- the session commands and stages every process answers, with
 * MongoDB's shapes and errors (seeds/001 "Logical Sessions"): startSession, refreshSessions,
 * endSessions, killSessions, killAllSessions, killAllSessionsByPattern, the test-only
 * refreshLogicalSessionCacheNow, and the aggregation stages $listLocalSessions (this
 * process's cache) and $listSessions (config.system.sessions). They reach the process's cache
 * through op->svc->lsc; what a kill does beyond this process is the role's (a router
 * forwards it to every shard).
 */
#ifndef SHL_SESSION_SESSION_COMMANDS_H
#define SHL_SESSION_SESSION_COMMANDS_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "net/command.h"
#include "net/lsid.h"

/* shl_session_commands_register -- add the session commands to a role's registry. */
void shl_session_commands_register(shl_command_registry_t *reg);

/*
 * shl_session_cmd_ignores_lsid --
 *     Whether 'cmd' is one of the kill commands, which ignore the session they are sent in
 *     (it is neither recorded nor killed by them), as MongoDB's.
 */
bool shl_session_cmd_ignores_lsid(const shl_command_t *cmd);

/* A $listSessions / $listLocalSessions spec: every user's sessions, or those of these uids. */
typedef struct shl_list_sessions_spec {
    bool all;
    uint8_t (*uids)[SHL_LSID_UID_LEN];
    size_t nuids;
    bool own; /* neither was given: uids[0] is the caller's (set by whoever knows it) */
} shl_list_sessions_spec_t;

/*
 * shl_list_sessions_spec_parse --
 *     The spec of stage 'stage' ("$listSessions" / "$listLocalSessions") at 'elem' as MongoDB
 *     parses it: TypeMismatch for a non-object ("<stage> options must be specified in an
 *     object, but found: <type>"); IDL errors for {allUsers: bool, users: [{user, db}]}
 *     (40415 unknown field, 14 wrong type, 40414 missing user/db); UnsupportedFormat (12) for
 *     allUsers with users. Neither: spec->own, and uids[0] is the empty user's digest, which
 *     a caller with an operation replaces by its user's (shl_op_user_digest; without
 *     authentication that is the empty user's,
 *     user "" db ""). Clean up with shl_list_sessions_spec_cleanup (also after an error).
 */
int shl_list_sessions_spec_parse(const bson_iter_t *elem, const char *stage,
                                 shl_list_sessions_spec_t *spec, shl_status_t *st);
void shl_list_sessions_spec_cleanup(shl_list_sessions_spec_t *spec);

/*
 * shl_pipeline_stage_position --
 *     Where stage 'name' first appears in the BSON array 'pipeline': 0 nowhere, 1 first, 2
 *     later.
 */
int shl_pipeline_stage_position(const bson_t *pipeline, const char *name);

/*
 * A pipeline runner: 'docs' (a BSON array) through 'stages' into the array 'out' from key *n
 * (query/pipeline.h's shl_pipeline_run_array, which the roles link; this library does not).
 */
typedef int (*shl_session_run_stages_fn)(const bson_t *docs, const bson_t *stages, bson_t *out,
                                         uint32_t *n, shl_status_t *st);

/*
 * shl_list_local_sessions_aggregate --
 *     An aggregate whose pipeline starts with $listLocalSessions: the sessions in this
 *     process's cache through the rest of the pipeline ('run'), answered in one batch (cursor
 *     id 0, ns "<db>.$cmd.aggregate"). Errors: InvalidNamespace when it names a collection
 *     ("must be run against the database with {aggregate: 1}"), the spec's, 40602 for a
 *     second $listLocalSessions, the rest of the pipeline's.
 */
int shl_list_local_sessions_aggregate(shl_op_ctx_t *op, const bson_t *cmd, const bson_t *pipeline,
                                      shl_session_run_stages_fn run, bson_t *reply,
                                      shl_status_t *st);

/*
 * shl_list_sessions_rewrite --
 *     An aggregate on 'ns' whose pipeline starts with $listSessions: the same pipeline with
 *     that stage replaced by the $match it stands for ({} for allUsers, else
 *     {"_id.uid": {$in: [...]}}), into *out (initialised by the callee; destroy it). Errors:
 *     InvalidNamespace ("$listSessions may only be run against config.system.sessions"), the
 *     spec's, 40602 for a second $listSessions.
 */
int shl_list_sessions_rewrite(const shl_op_ctx_t *op, const char *ns, const bson_t *pipeline,
                              bson_t *out, shl_status_t *st);

#endif
