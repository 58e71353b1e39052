/*
 * logical_session_cache.h -- the logical session cache every process keeps (seeds/001 "The
 * logical session cache"; MongoDB's LogicalSessionCacheImpl): the sessions used on this
 * process since the last refresh, {lsid -> lastUse}, and the sessions ended here.
 *
 * A request with an lsid records ("vivifies") its session. Every logicalSessionRefreshMillis
 * a thread refreshes and reaps, as MongoDB does:
 *   refresh: (1) the role's collection is set up; (2) the sessions used since the last
 *   refresh and those of running operations get lastUse = now in config.system.sessions
 *   (upserted; a batch that fails goes back into the cache for the next round); (3) the ended
 *   ones are removed from it; (4) the sessions of this process's open cursors that are
 *   neither used since nor in the collection any more have expired: their cursors, and those
 *   of the ended sessions, are killed. The cache then holds only what was used since, as
 *   MongoDB's (so $listLocalSessions shows the sessions used since the last refresh).
 *   reap (data nodes): the role removes config.transactions (and config.image_collection)
 *   records last written more than TransactionRecordMinimumLifetimeMinutes ago whose session
 *   is no longer in the collection.
 *
 * Thread-safety: every function may be called from any thread. 'mu' guards the maps; a
 * refresh or reap runs under 'refresh_mu' (one at a time), never holding 'mu' while it calls
 * the collection or the role. Lock order: refresh_mu, then mu; svc->ops_mu and the cursor
 * managers' locks are taken (briefly, by the role's callbacks) without 'mu' held.
 */
#ifndef SHL_SESSION_LOGICAL_SESSION_CACHE_H
#define SHL_SESSION_LOGICAL_SESSION_CACHE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "net/command.h"
#include "net/lsid.h"
#include "net/op_context.h"
#include "net/service_context.h"
#include "session/kill_sessions.h"
#include "session/sessions_collection.h"

typedef struct shl_lsc shl_lsc_t;

/*
 * What the role does for its cache (any may be NULL):
 *   cursor_sessions: call fn(fn_arg, lsid) for the session of each open cursor of this
 *                    process (under the cursor manager's lock: fn does not block);
 *   kill_cursors:    kill this process's cursors opened in a session 'm' names; how many;
 *   kill_remote:     the kill commands' part beyond this process (a router sends the
 *                    patterns to every shard as killAllSessionsByPattern). Errors fail the
 *                    command (HostUnreachable "Failed to kill sessions on some hosts");
 *   reap:            data nodes: remove the transaction records of expired sessions last
 *                    written before 'cutoff_ms' (asking the cache which sessions are gone,
 *                    shl_lsc_find_removed); *n the records removed.
 */
typedef struct shl_lsc_role {
    void (*cursor_sessions)(void *arg, void (*fn)(void *fn_arg, const shl_lsid_t *lsid),
                            void *fn_arg);
    int (*kill_cursors)(void *arg, const shl_kill_matcher_t *m);
    int (*kill_remote)(void *arg, shl_op_ctx_t *op, const shl_kill_matcher_t *m, shl_status_t *st);
    int (*reap)(void *arg, shl_lsc_t *lsc, int64_t cutoff_ms, int64_t *n, shl_status_t *st);
    void *arg;
} shl_lsc_role_t;

/*
 * shl_lsc_new --
 *     A cache for the process 'svc' (borrowed; its op list gives the running operations'
 *     sessions) with the role's callbacks ('role' copied). No collection yet and no thread:
 *     see shl_lsc_set_collection / shl_lsc_start. Sets svc->lsc.
 */
shl_lsc_t *shl_lsc_new(shl_service_ctx_t *svc, const shl_lsc_role_t *role);

/*
 * shl_lsc_set_collection --
 *     Where the cache persists ('coll' copied): set once by the role before shl_lsc_start.
 */
void shl_lsc_set_collection(shl_lsc_t *lsc, const shl_sessions_coll_t *coll);

/*
 * shl_lsc_start --
 *     Start the refresh thread (unless disableLogicalSessionCacheRefresh): refresh then reap
 *     every logicalSessionRefreshMillis (read before each wait). Idempotent. Errors:
 *     InternalError when the thread cannot start.
 */
int shl_lsc_start(shl_lsc_t *lsc, shl_status_t *st);

/*
 * shl_lsc_stop --
 *     Stop the thread and wait for it (a refresh in progress ends first; its network calls
 *     end at shutdown). Idempotent; call before the collection's or the role's resources go.
 */
void shl_lsc_stop(shl_lsc_t *lsc);

/* shl_lsc_destroy -- stop, then free (NULL is fine); clears svc->lsc. */
void shl_lsc_destroy(shl_lsc_t *lsc);

/*
 * shl_lsc_vivify --
 *     Record a use of 'lsid' now. Errors: TooManyLogicalSessions (261) when the session is
 *     new and the cache holds maxSessions already.
 */
int shl_lsc_vivify(shl_lsc_t *lsc, const shl_lsid_t *lsid, shl_status_t *st);

/*
 * shl_lsc_vivify_op --
 *     The session_begin part every role shares: vivify op's lsid, if any, unless 'cmd' is one
 *     of the kill commands (which ignore the session they are sent in, so as not to kill
 *     themselves, as MongoDB's attachLogicalSessionsToOpCtx() false). 'lsc' may be NULL.
 *     Errors: as shl_lsc_vivify.
 */
int shl_lsc_vivify_op(shl_lsc_t *lsc, const shl_op_ctx_t *op, const shl_command_t *cmd,
                      shl_status_t *st);

/* shl_lsc_end -- endSessions: the sessions are removed at the next refresh, their cursors killed.
 */
void shl_lsc_end(shl_lsc_t *lsc, const shl_lsid_t *ids, size_t n);

/*
 * shl_lsc_refresh_now --
 *     One refresh now (refreshLogicalSessionCacheNow), waiting for one in progress first.
 *     Errors: the collection's setup error (ShardingStateNotInitialized, NamespaceNotSharded,
 *     ShardNotFound...), the first failed refresh batch's, the removal's.
 */
int shl_lsc_refresh_now(shl_lsc_t *lsc, shl_status_t *st);

/* shl_lsc_reap_now -- one reap now. Errors: the role's. */
int shl_lsc_reap_now(shl_lsc_t *lsc, shl_status_t *st);

/*
 * shl_lsc_find_removed --
 *     removed[i] = whether ids[i] is no longer in config.system.sessions, asked of the role's
 *     collection in batches. For the role's reap. Errors: the collection's.
 */
int shl_lsc_find_removed(shl_lsc_t *lsc, const shl_lsid_t *ids, size_t n, bool *removed,
                         shl_status_t *st);

/*
 * shl_lsc_list --
 *     Append to the array 'arr' (from index *k, advanced) the cached sessions whose uid is
 *     one of 'uids' (nuids of them; 'all': every session) as MongoDB's records:
 *     {_id: {id, uid}, lastUse: Date}.
 */
void shl_lsc_list(shl_lsc_t *lsc, bool all, const uint8_t (*uids)[SHL_LSID_UID_LEN], size_t nuids,
                  bson_t *arr, uint32_t *k);

/* shl_lsc_size -- sessions in the cache. */
size_t shl_lsc_size(shl_lsc_t *lsc);

/*
 * shl_lsc_kill --
 *     Kill the sessions 'm' names on this process -- their cursors, then their running
 *     operations except 'op' itself (which end with Interrupted) -- and beyond it (the role's
 *     kill_remote). Errors: kill_remote's.
 */
int shl_lsc_kill(shl_lsc_t *lsc, shl_op_ctx_t *op, const shl_kill_matcher_t *m, shl_status_t *st);

#endif
