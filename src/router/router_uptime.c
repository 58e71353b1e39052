/*
 * router_uptime.c -- the router's entry in config.mongos (MongoDB's MongosType): at start and
 * every 30 s the router upserts {_id: "host:port", ping, up, waiting, mongoVersion,
 * advisoryHostFQDNs, created} on the config server, which is how sh.status() lists the
 * "most recently active mongoses". Failures are logged and retried on the next round. The
 * same thread refreshes the cluster-wide default read/write concerns (router_private.h).
 */
#include "router/router_uptime.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "net/common_commands.h"
#include "router/router_private.h"

#define UPTIME_PERIOD_MS 30000

struct shl_router_uptime {
    shl_router_t *router; /* borrowed */
    char me[300];
    int64_t started_ms;
    pthread_t thread;
    pthread_mutex_t mu; /* guards stop */
    pthread_cond_t cond;
    bool stop;
};

static void
report(shl_router_uptime_t *u)
{
    shl_router_t *r = u->router;
    shl_status_t st = SHL_STATUS_INIT;
    int64_t now = shl_clock_wall_ms();
    bson_t *cmd = BCON_NEW(
        "update", BCON_UTF8("mongos"), "updates", "[", "{", "q", "{", "_id", BCON_UTF8(u->me), "}",
        "u", "{", "$set", "{", "ping", BCON_DATE_TIME(now), "up",
        BCON_INT64((now - u->started_ms) / 1000), "waiting", BCON_BOOL(true), "mongoVersion",
        BCON_UTF8(SHL_VERSION_STRING), "advisoryHostFQDNs", "[", "]", "}", "$setOnInsert", "{",
        "created", BCON_DATE_TIME(u->started_ms), "}", "}", "upsert", BCON_BOOL(true), "}", "]");
    bson_t reply;

    if (shl_remote_run_config(&r->remote, "config", cmd,
                              &(shl_remote_options_t){.timeout_ms = SHL_CONFIG_CMD_TIMEOUT_MS},
                              &reply, &st) != 0) {
        SHL_LOG_DEBUG(1, SHARDING, 4620031, "cannot report to config.mongos", "error",
                      BCON_UTF8(st.reason));
    }
    bson_destroy(&reply);
    bson_destroy(cmd);
}

static void *
uptime_main(void *arg)
{
    shl_router_uptime_t *u = arg;

    shl_log_set_thread_ctx("Uptime-reporter");
    pthread_mutex_lock(&u->mu);
    while (!u->stop) {
        struct timespec ts;
        pthread_mutex_unlock(&u->mu);
        report(u);
        /* The same period as mongos's refresh of its default read/write concerns cache. */
        router_rwc_refresh(u->router);
        pthread_mutex_lock(&u->mu);
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += UPTIME_PERIOD_MS / 1000;
        while (!u->stop && pthread_cond_timedwait(&u->cond, &u->mu, &ts) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&u->mu);
    return NULL;
}

shl_router_uptime_t *
shl_router_uptime_start(shl_router_t *r, const char *me)
{
    shl_router_uptime_t *u = bson_malloc0(sizeof(*u));

    u->router = r;
    snprintf(u->me, sizeof(u->me), "%s", me);
    u->started_ms = shl_clock_wall_ms();
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cond, NULL);
    pthread_create(&u->thread, NULL, uptime_main, u);
    return u;
}

void
shl_router_uptime_stop(shl_router_uptime_t *u)
{
    if (u == NULL) {
        return;
    }
    pthread_mutex_lock(&u->mu);
    u->stop = true;
    pthread_cond_signal(&u->cond);
    pthread_mutex_unlock(&u->mu);
    pthread_join(u->thread, NULL);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cond);
    bson_free(u);
}
