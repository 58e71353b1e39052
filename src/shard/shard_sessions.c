/*
 * shard_sessions.c -- a shard's logical session cache persists into the cluster's sharded
 * config.system.sessions through the shard's catalog cache, once the shard is sharding-aware
 * (before: ShardingStateNotInitialized, logged and retried, as MongoDB's shards do). Its
 * cursors and transaction-record reap are the data node's (db/db_sessions.c).
 */
#include "session/logical_session_cache.h"
#include "shard/shard_private.h"
#include "sharding/sessions_collection_sharded.h"

static shl_catalog_cache_t *
shard_cache(void *arg)
{
    shard_state_t *s = arg;
    shl_catalog_cache_t *cache;

    pthread_mutex_lock(&s->mu);
    cache = s->aware ? s->cache : NULL;
    pthread_mutex_unlock(&s->mu);
    return cache;
}

int
shard_sessions_start(shard_state_t *s, shl_status_t *st)
{
    shl_sessions_coll_t coll;

    s->sessions = shl_sessions_sharded_new(shard_cache, s, NULL);
    shl_sessions_sharded_coll(s->sessions, &coll);
    shl_lsc_set_collection(s->svc->lsc, &coll);
    return shl_lsc_start(s->svc->lsc, st);
}

void
shard_sessions_stop(shard_state_t *s)
{
    shl_lsc_stop(s->svc->lsc);
    shl_sessions_sharded_destroy(s->sessions);
    s->sessions = NULL;
}
