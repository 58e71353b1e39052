/*
 * configsvr_sessions.c -- the config server's logical session cache, and config.system.sessions
 * of the cluster (seeds/001 "The logical session cache"; MongoDB's
 * SessionsCollectionConfigServer): before each refresh the config server makes sure the
 * collection exists -- once there is a shard, it is sharded on {_id: 1} through
 * _configsvrShardCollection (one chunk, on a shard), given maxChunkSizeBytes (and noAutoSplit),
 * and every shard owning chunks gets the TTL index lsidTTLIndex. Its own cache persists like
 * everyone's, into the sharded collection, through a catalog cache over this config server.
 */
#include <string.h>

#include "base/log.h"
#include "config/config_private.h"
#include "session/logical_session_cache.h"
#include "sharding/catalog_cache.h"
#include "sharding/sessions_collection_sharded.h"
#include "sharding/shard_registry.h"

/* MongoDB's logical_sessions::kMaxChunkSizeBytes: 200-byte sessions, 1000 per chunk. */
#define SESSIONS_MAX_CHUNK_SIZE_BYTES (200 * 1000)

/* Set up by cfg_sessions_start, read-only until cfg_sessions_stop. */
static struct {
    shl_shard_registry_t *registry;
    shl_catalog_cache_t *cache;
    shl_sessions_sharded_t *coll;
    pthread_mutex_t setup_mu; /* one setup at a time */
} g_sessions;

static shl_catalog_cache_t *
config_cache(void *arg)
{
    (void)arg;
    return g_sessions.cache;
}

/* Shard the collection when it is not yet (needs a shard). */
static int
shard_if_needed(shl_status_t *st)
{
    int ret = 0;
    shl_shard_type_t *shards = NULL;
    size_t n = 0;
    bson_t *cmd = NULL, *q = NULL, *u = NULL;
    bson_t reply = BSON_INITIALIZER;

    ret = shl_sessions_sharded_check(g_sessions.coll, st);
    if (ret != SHL_CODE_NAMESPACE_NOT_SHARDED) {
        goto done;
    }
    shl_status_clear(st);
    ret = 0;
    SHL_ERR(cfg_get_shards(&shards, &n, st));
    if (n == 0) {
        SHL_FAIL(st, SHL_CODE_SHARD_NOT_FOUND,
                 "Failed to create %s: cannot create the collection until there are shards",
                 SHL_SESSIONS_NS);
    }
    cmd = BCON_NEW("_configsvrShardCollection", BCON_UTF8(SHL_SESSIONS_NS), "key", "{", "_id",
                   BCON_INT32(1), "}", "writeConcern", "{", "w", BCON_UTF8("majority"), "}");
    bson_destroy(&reply);
    SHL_ERR(shl_remote_run_self(&cfg_get()->remote, "admin", cmd, NULL, &reply, st));
    q = BCON_NEW("_id", BCON_UTF8(SHL_SESSIONS_NS), "maxChunkSizeBytes", "{", "$exists",
                 BCON_BOOL(false), "}");
    u = BCON_NEW("$set", "{", "maxChunkSizeBytes", BCON_INT64(SESSIONS_MAX_CHUNK_SIZE_BYTES),
                 "noAutoSplit", BCON_BOOL(true), "}");
    SHL_ERR(cfg_update("collections", q, u, false, false, NULL, st));
    shl_catalog_cache_invalidate_collection(g_sessions.cache, SHL_SESSIONS_NS);
    SHL_LOG_INFO(SHARDING, 4410105, "Created the sessions collection", "ns",
                 BCON_UTF8(SHL_SESSIONS_NS));
done:
    if (shards != NULL) {
        cfg_shards_free(shards, n);
    }
    bson_destroy(cmd);
    bson_destroy(q);
    bson_destroy(u);
    bson_destroy(&reply);
    return ret;
}

/* Before each refresh of this config server's cache. */
static int
config_setup(void *arg, shl_status_t *st)
{
    int ret = 0;

    (void)arg;
    pthread_mutex_lock(&g_sessions.setup_mu);
    ret = shard_if_needed(st);
    if (ret == 0) {
        ret = shl_sessions_sharded_create_ttl_index(g_sessions.coll, st);
        if (ret != 0) {
            SHL_LOG_INFO(SHARDING, 4410106,
                         "Failed to generate TTL index for config.system.sessions on all shards, "
                         "will try again on the next refresh interval",
                         "error", BCON_UTF8(st->reason));
        }
    } else if (ret != SHL_CODE_SHARD_NOT_FOUND) {
        SHL_LOG_INFO(SHARDING, 4410107,
                     "Failed to create config.system.sessions, will try again at the next "
                     "refresh interval",
                     "error", BCON_UTF8(st->reason));
    }
    pthread_mutex_unlock(&g_sessions.setup_mu);
    return ret;
}

int
cfg_sessions_start(cfg_state_t *cfg, shl_status_t *st)
{
    shl_sessions_coll_t coll;

    pthread_mutex_init(&g_sessions.setup_mu, NULL);
    g_sessions.registry = shl_shard_registry_new(cfg->pool, cfg->conn_string);
    g_sessions.cache = shl_catalog_cache_new(g_sessions.registry);
    g_sessions.coll = shl_sessions_sharded_new(config_cache, NULL, config_setup);
    shl_sessions_sharded_coll(g_sessions.coll, &coll);
    shl_lsc_set_collection(cfg->svc->lsc, &coll);
    return shl_lsc_start(cfg->svc->lsc, st);
}

void
cfg_sessions_stop(cfg_state_t *cfg)
{
    if (g_sessions.coll == NULL) {
        return;
    }
    shl_lsc_stop(cfg->svc->lsc);
    shl_sessions_sharded_destroy(g_sessions.coll);
    shl_catalog_cache_destroy(g_sessions.cache);
    shl_shard_registry_destroy(g_sessions.registry);
    pthread_mutex_destroy(&g_sessions.setup_mu);
    memset(&g_sessions, 0, sizeof(g_sessions));
}
