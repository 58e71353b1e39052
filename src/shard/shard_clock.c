/*
 * shard_clock.c -- the shard's part of the vector clock (docs/design/vector_clock.md; seeds/000
 * "Vector clock"): ClusterTime is the storage engine's clock, ConfigTime and TopologyTime
 * (s->clock) are learned from gossip -- requests from cluster processes and the replies of
 * the config server and other shards -- and kept in config.vectorClock
 * ({_id: "vectorClockState", configTime, topologyTime}) so they survive restarts. Also the
 * shard's $clusterTime keys, read from the config server's admin.system.keys.
 */
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "db/node.h"
#include "bson/bson_util.h"
#include "net/cluster_time.h"
#include "net/server.h"
#include "shard/shard_private.h"
#include "storage/storage.h"

#define VC_DOC_ID "vectorClockState"

/* The node's own reply decoration, chained before the shard's internal gossip. */
static void (*node_decorate_reply)(struct shl_op_ctx *op, bson_t *reply);

/* Write ConfigTime/TopologyTime to config.vectorClock when they moved since the last write
 * (journaled). Only the persister thread and the shutdown call it, one after the other. */
static int
persist(shard_state_t *s, shl_status_t *st)
{
    int ret = 0;
    shl_vector_time_t now;
    bson_t *cmd = NULL, reply = BSON_INITIALIZER;

    shl_vector_clock_now(&s->clock, &now);
    if (now.t[SHL_VC_CONFIG_TIME] > s->vc_persisted[0] ||
        now.t[SHL_VC_TOPOLOGY_TIME] > s->vc_persisted[1]) {
        uint64_t cfg = now.t[SHL_VC_CONFIG_TIME], top = now.t[SHL_VC_TOPOLOGY_TIME];
        cmd = BCON_NEW("update", BCON_UTF8("vectorClock"), "updates", "[", "{", "q", "{", "_id",
                       BCON_UTF8(VC_DOC_ID), "}", "u", "{", "_id", BCON_UTF8(VC_DOC_ID),
                       "configTime", BCON_TIMESTAMP((uint32_t)(cfg >> 32), (uint32_t)cfg),
                       "topologyTime", BCON_TIMESTAMP((uint32_t)(top >> 32), (uint32_t)top), "}",
                       "upsert", BCON_BOOL(true), "}", "]", "writeConcern", "{", "w",
                       BCON_INT32(1), "j", BCON_BOOL(true), "}");
        bson_destroy(&reply);
        ret = shl_remote_run_self(&s->remote, "config", cmd, NULL, &reply, st);
        if (ret == 0) {
            s->vc_persisted[0] = cfg;
            s->vc_persisted[1] = top;
        }
    }
    if (cmd != NULL) {
        bson_destroy(cmd);
    }
    bson_destroy(&reply);
    return ret;
}

static void
persist_logged(shard_state_t *s)
{
    shl_status_t st = SHL_STATUS_INIT;

    if (persist(s, &st) != 0) {
        SHL_LOG_WARNING(SHARDING, 5000110, "could not persist the vector clock", "error",
                        BCON_UTF8(st.reason));
    }
}

/* The persister: writes soon after an advance, off the request path (a journaled write
 * there would cost every request that brings a newer ConfigTime a journal flush). */
static void *
persister_main(void *arg)
{
    shard_state_t *s = arg;

    shl_log_set_thread_ctx("VectorClockPersist");
    pthread_mutex_lock(&s->vc_persist_mu);
    while (!s->vc_stop) {
        if (!s->vc_dirty) {
            pthread_cond_wait(&s->vc_cv, &s->vc_persist_mu);
            continue;
        }
        s->vc_dirty = false;
        pthread_mutex_unlock(&s->vc_persist_mu);
        persist_logged(s);
        pthread_mutex_lock(&s->vc_persist_mu);
    }
    pthread_mutex_unlock(&s->vc_persist_mu);
    return NULL;
}

static void
persist_soon(shard_state_t *s)
{
    pthread_mutex_lock(&s->vc_persist_mu);
    s->vc_dirty = true;
    pthread_cond_signal(&s->vc_cv);
    pthread_mutex_unlock(&s->vc_persist_mu);
}

void
shard_clock_observe(shard_state_t *s, const bson_t *msg)
{
    unsigned moved = shl_vector_clock_observe(&s->clock, msg);

    if (moved & SHL_VC_ADVANCED(SHL_VC_CONFIG_TIME)) {
        /* ClusterTime >= ConfigTime: the storage clock is the shard's ClusterTime. */
        shl_storage_clock_advance(s->svc->storage,
                                  shl_vector_clock_get(&s->clock, SHL_VC_CONFIG_TIME));
    }
    if ((moved & SHL_VC_ADVANCED(SHL_VC_TOPOLOGY_TIME)) && s->registry != NULL) {
        shl_shard_registry_invalidate(s->registry);
    }
    if (moved & (SHL_VC_ADVANCED(SHL_VC_CONFIG_TIME) | SHL_VC_ADVANCED(SHL_VC_TOPOLOGY_TIME))) {
        persist_soon(s);
    }
}

void
shard_clock_decorate_request(void *arg, const char *host, const char *cmd_name, bson_t *cmd)
{
    shard_state_t *s = arg;
    (void)host;
    (void)cmd_name;

    shl_vector_clock_append_internal_gossip(&s->clock, shl_storage_clock_now(s->svc->storage),
                                            cmd);
}

/* Gossip in from a request: $clusterTime moves the storage clock (db_cmd_begin does it for
 * the data node's commands; here for every command), and cluster processes also bring
 * ConfigTime and TopologyTime. */
static void
gossip_in(shl_op_ctx_t *op, uint64_t cluster_time)
{
    shard_state_t *s = shard_state(op);

    if (cluster_time != 0) {
        shl_storage_clock_advance(op->svc->storage, cluster_time);
    }
    if (op->conn != NULL && op->conn->internal) {
        shard_clock_observe(s, op->body);
    }
}

/* Replies to cluster processes carry $configTime and $topologyTime too. */
static void
decorate_reply(shl_op_ctx_t *op, bson_t *reply)
{
    shard_state_t *s = shard_state(op);

    if (node_decorate_reply != NULL) {
        node_decorate_reply(op, reply);
    }
    if (op->conn != NULL && op->conn->internal) {
        shl_vector_clock_append_config_gossip(&s->clock, reply);
    }
}

/* ConfigTime and TopologyTime as persisted by an earlier run. */
static int
recover(shard_state_t *s, shl_status_t *st)
{
    int ret = 0;
    /* Readable on a secondary too: a shard replica set's member restarts as one. */
    bson_t *cmd =
        BCON_NEW("find", BCON_UTF8("vectorClock"), "filter", "{", "_id", BCON_UTF8(VC_DOC_ID), "}",
                 "$readPreference", "{", "mode", BCON_UTF8("secondaryPreferred"), "}");
    bson_t reply = BSON_INITIALIZER;
    bson_iter_t it;

    /* A member that restarts may be rolling back or recovering (its fetcher runs before the
     * shard starts): NotPrimaryOrSecondary until it is a secondary again. Wait for that a
     * while; past it, start without the persisted times (gossip brings them). */
    for (int64_t waited_ms = 0;; waited_ms += 200) {
        bson_destroy(&reply);
        ret = shl_remote_run_self(&s->remote, "config", cmd, NULL, &reply, st);
        if (ret != SHL_CODE_NOT_PRIMARY_OR_SECONDARY) {
            break;
        }
        if (waited_ms >= 30000) {
            SHL_LOG_WARNING(SHARDING, 4200147,
                            "vector clock recovery skipped: the member is not readable yet",
                            "error", BCON_UTF8(st->reason));
            shl_status_clear(st);
            ret = 0;
            bson_reinit(&reply);
            break;
        }
        shl_status_clear(st);
        shl_sleep_ms(200);
    }
    SHL_ERR(ret);
    if (bson_iter_init(&it, &reply) &&
        bson_iter_find_descendant(&it, "cursor.firstBatch.0", &it) &&
        BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_t f;
        bson_iter_recurse(&it, &f);
        while (bson_iter_next(&f)) {
            if (strcmp(bson_iter_key(&f), "configTime") == 0) {
                s->vc_persisted[0] = shl_bson_iter_timestamp_u64(&f);
            } else if (strcmp(bson_iter_key(&f), "topologyTime") == 0) {
                s->vc_persisted[1] = shl_bson_iter_timestamp_u64(&f);
            }
        }
        shl_vector_clock_advance(&s->clock, SHL_VC_TOPOLOGY_TIME, s->vc_persisted[1]);
        shl_vector_clock_advance(&s->clock, SHL_VC_CONFIG_TIME, s->vc_persisted[0]);
        shl_storage_clock_advance(s->svc->storage, s->vc_persisted[0]);
    }
done:
    bson_destroy(cmd);
    bson_destroy(&reply);
    return ret;
}

int
shard_clock_init(shard_state_t *s, shl_status_t *st)
{
    int ret = 0;
    shl_service_ctx_t *svc = s->svc;

    shl_node_clock_start_fresh(svc);
    pthread_mutex_init(&s->vc_persist_mu, NULL);
    pthread_cond_init(&s->vc_cv, NULL);
    shl_vector_clock_init(&s->clock);
    svc->cluster_time = shl_cluster_time_new();
    shl_cluster_time_set_loader(svc->cluster_time, shard_keys_load, s);
    node_decorate_reply = svc->hooks.decorate_reply;
    svc->hooks.decorate_reply = decorate_reply;
    svc->hooks.gossip_in = gossip_in;
    SHL_ERR(recover(s, st));
    SHL_INVARIANT(pthread_create(&s->vc_thread, NULL, persister_main, s) == 0);
    s->vc_thread_started = true;
done:
    return ret;
}

void
shard_clock_sync(shard_state_t *s)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *ping = BCON_NEW("ping", BCON_INT32(1));
    bson_t reply;

    /* The config server's ConfigTime is at least any this shard ever saw. */
    if (shl_remote_run_config(&s->remote, "admin", ping,
                              &(shl_remote_options_t){.timeout_ms = 5000}, &reply, &st) != 0) {
        SHL_LOG_INFO(SHARDING, 5000111, "could not reach the config server for its times", "error",
                     BCON_UTF8(st.reason));
    }
    bson_destroy(&reply);
    bson_destroy(ping);
}

void
shard_clock_shutdown(shard_state_t *s)
{
    if (s->vc_thread_started) {
        pthread_mutex_lock(&s->vc_persist_mu);
        s->vc_stop = true;
        pthread_cond_signal(&s->vc_cv);
        pthread_mutex_unlock(&s->vc_persist_mu);
        pthread_join(s->vc_thread, NULL);
        s->vc_thread_started = false;
        persist_logged(s);
    }
}
