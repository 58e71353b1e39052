/*
 * sessions_collection.h -- config.system.sessions as the logical session cache persists
 * itself into it (seeds/001 "How the logical session cache syncs with the sessions
 * collection"; MongoDB's SessionsCollection): the interface a role implements (on a plain
 * node: its own collection; in a cluster: the sharded collection, sharding/), and the
 * commands every implementation sends, built once here.
 *
 * Documents: {_id: {id: UUID, uid: BinData(0, 32 bytes)}, lastUse: Date}. lastUse is the
 * storing node's clock ($$NOW of the update), as MongoDB's. The TTL index `lsidTTLIndex`
 * on {lastUse: 1} expires a session localLogicalSessionTimeoutMinutes after its last use.
 */
#ifndef SHL_SESSION_SESSIONS_COLLECTION_H
#define SHL_SESSION_SESSIONS_COLLECTION_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "net/lsid.h"

#define SHL_SESSIONS_DB "config"
#define SHL_SESSIONS_COLL "system.sessions"
#define SHL_SESSIONS_NS "config.system.sessions"
#define SHL_SESSIONS_TTL_INDEX "lsidTTLIndex"
/* MongoDB's sessionMaxBatchSize default: sessions per write or read of the collection. */
#define SHL_SESSIONS_MAX_BATCH 1000
/* MongoDB's sessionWriteConcernTimeoutSystemMillis default (w: "majority" writes). */
#define SHL_SESSIONS_WTIMEOUT_MS 60000

/*
 * The persistence a role gives its cache. Each function may block (local commands or the
 * network) and is called by one refresh or reap at a time, never under the cache's lock.
 *
 * setup:        before each refresh: make sure the collection is usable (the config server
 *               creates and shards it, a plain node creates it with its TTL index; others
 *               check that it exists). Its error fails the refresh (logged, retried next
 *               round), as MongoDB's do: ShardingStateNotInitialized, NamespaceNotSharded...
 * check:        before each reap: whether the collection exists (an error skips the reap).
 * refresh:      set lastUse = now for the n (<= SHL_SESSIONS_MAX_BATCH) sessions, upserting.
 * remove:       delete the n sessions.
 * find_removed: removed[i] = whether ids[i] is not in the collection (n <= the batch size).
 */
typedef struct shl_sessions_coll {
    int (*setup)(void *arg, shl_status_t *st);
    int (*check)(void *arg, shl_status_t *st);
    int (*refresh)(void *arg, const shl_lsid_t *ids, size_t n, shl_status_t *st);
    int (*remove)(void *arg, const shl_lsid_t *ids, size_t n, shl_status_t *st);
    int (*find_removed)(void *arg, const shl_lsid_t *ids, size_t n, bool *removed,
                        shl_status_t *st);
    void *arg;
} shl_sessions_coll_t;

/*
 * The commands (bodies without $db, for database "config"; 'cmd' initialised by the caller
 * and appended to), as MongoDB's SessionsCollection sends them:
 *   refresh: update system.sessions, ordered: false, w: "majority" (wtimeout 60 s), one
 *            upsert per session {q: {_id}, u: [{$set: {lastUse: "$$NOW"}}], upsert: true};
 *   remove:  delete system.sessions, ordered: false, w: "majority", {q: {_id}, limit: 1} each;
 *   find:    find system.sessions {_id: {$in: [...]}}, projection {_id: 1}, batchSize = limit
 *            = n, singleBatch, readConcern local;
 *   ttl:     createIndexes system.sessions [{key: {lastUse: 1}, name: "lsidTTLIndex",
 *            expireAfterSeconds: localLogicalSessionTimeoutMinutes * 60}];
 *   collmod: collMod system.sessions {index: {name: "lsidTTLIndex", expireAfterSeconds}} (an
 *            existing index with another timeout).
 */
void shl_sessions_refresh_cmd(const shl_lsid_t *ids, size_t n, bson_t *cmd);
void shl_sessions_remove_cmd(const shl_lsid_t *ids, size_t n, bson_t *cmd);
void shl_sessions_find_cmd(const shl_lsid_t *ids, size_t n, bson_t *cmd);
void shl_sessions_ttl_index_cmd(bson_t *cmd);
void shl_sessions_collmod_cmd(bson_t *cmd);

/*
 * shl_sessions_write_status --
 *     The outcome of a write reply: its error, else its first writeError, else its
 *     writeConcernError, as a status (0 when none).
 */
int shl_sessions_write_status(const bson_t *reply, shl_status_t *st);

/*
 * shl_sessions_mark_found --
 *     For a find reply (cursor.firstBatch of {_id: lsid}), clear removed[i] for every ids[i]
 *     it holds. Errors: the reply's own, FailedToParse for a reply without a cursor.
 */
int shl_sessions_mark_found(const bson_t *reply, const shl_lsid_t *ids, size_t n, bool *removed,
                            shl_status_t *st);

/*
 * shl_sessions_id_doc -- {_id: {id, uid}} of a session into 'doc' (initialised by the caller):
 * the query and the shard key of its document.
 */
void shl_sessions_id_doc(const shl_lsid_t *lsid, bson_t *doc);

#endif
