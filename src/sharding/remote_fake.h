/*
 * remote_fake.h -- the fake remote for unit tests (STYLE.md "Fakes only at four seams":
 * the outgoing network). A transport (shl_remote_t) that answers from scripted replies per
 * target and command name, records every request, and answers {ok: 1} to the rest.
 * Thread-safe (one mutex), so code that sends from several threads can be tested.
 */
#ifndef SHL_SHARDING_REMOTE_FAKE_H
#define SHL_SHARDING_REMOTE_FAKE_H

#include "sharding/remote.h"

typedef struct shl_remote_fake shl_remote_fake_t;

/*
 * A handler asked before the scripts: return true and fill 'reply' (uninitialised on entry)
 * to answer; false to let the scripts answer. Called with the fake's mutex not held.
 */
typedef bool (*shl_remote_fake_handler_t)(void *arg, const shl_remote_request_t *req,
                                          bson_t *reply);

shl_remote_fake_t *shl_remote_fake_new(void);
void shl_remote_fake_destroy(shl_remote_fake_t *f);

/* shl_remote_fake_remote -- a transport over 'f' (valid while f lives). */
shl_remote_t shl_remote_fake_remote(shl_remote_fake_t *f);

/*
 * shl_remote_fake_script --
 *     The next 'times' requests (-1: all) of command 'cmd' ("*": any) to 'target'
 *     (shl_remote_target_str: a shard id, a host, "self", "config"; "*": any) are answered
 *     with 'reply_json' (single quotes allowed for double). Scripts are tried in the order
 *     they were added; a used-up one is skipped.
 */
void shl_remote_fake_script(shl_remote_fake_t *f, const char *target, const char *cmd,
                            const char *reply_json, int times);

/* shl_remote_fake_script_error -- the same, failing with 'code' before any reply arrives
 * (a network error: HostUnreachable, ...). */
void shl_remote_fake_script_error(shl_remote_fake_t *f, const char *target, const char *cmd,
                                  int code, int times);

/* shl_remote_fake_set_handler -- install a handler (NULL: none). */
void shl_remote_fake_set_handler(shl_remote_fake_t *f, shl_remote_fake_handler_t h, void *arg);

/* shl_remote_fake_count -- requests seen of 'cmd' ("*": any) to 'target' ("*": any). */
size_t shl_remote_fake_count(shl_remote_fake_t *f, const char *target, const char *cmd);

/*
 * shl_remote_fake_nth --
 *     A copy of the n-th request (0-based) of 'cmd' to 'target' ("*" wildcards) into *out
 *     (initialised by the callee when found). False if there is none.
 */
bool shl_remote_fake_nth(shl_remote_fake_t *f, const char *target, const char *cmd, size_t n,
                         bson_t *out);

/*
 * shl_remote_fake_store_self --
 *     From now on "self" answers insert, update (q: {_id}, u: a replacement), delete
 *     (q: {_id}) and find (everything, in cursor.firstBatch) from an in-memory store of
 *     documents per collection name, before the handler and the scripts -- the state
 *     documents of the code under test. Writes are recorded like every request. Other
 *     commands to "self" go to the handler and the scripts as any target's.
 */
void shl_remote_fake_store_self(shl_remote_fake_t *f);

/* shl_remote_fake_store_insert -- put a document into collection 'coll' of the store. */
void shl_remote_fake_store_insert(shl_remote_fake_t *f, const char *coll, const bson_t *doc);

/* shl_remote_fake_store_count -- documents in 'coll'. */
size_t shl_remote_fake_store_count(shl_remote_fake_t *f, const char *coll);

/* shl_remote_fake_store_nth -- a copy of the n-th document of 'coll' (false: none). */
bool shl_remote_fake_store_nth(shl_remote_fake_t *f, const char *coll, size_t n, bson_t *out);

/* shl_remote_fake_reset_calls -- forget the recorded requests (the scripts stay). */
void shl_remote_fake_reset_calls(shl_remote_fake_t *f);

#endif
