/*
 * heartbeat.c -- every heartbeatIntervalMillis a member sends replSetHeartbeat to each
 * other member and records what it learns: up or down, state, optimes, config version, who
 * is primary, the primary's commit point. A member that reports an older configuration is
 * sent ours with the heartbeat (how the members learn the initiator's configuration when
 * they missed its push). docs/design/replication.md "Heartbeats".
 */
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "base/str.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/topology.h"
#include "repl/repl_private.h"

/* A heartbeat waits at most this long for its reply (MongoDB: heartbeatTimeoutSecs, 10 s;
 * shorter here so one dead member does not delay the others' heartbeats much). */
#define HEARTBEAT_TIMEOUT_MS 2000

/* Shale's own (MongoDB's tests partition members with a bridge): while on, this member sends
 * no heartbeats and answers none (repl_commands.c), as if the network dropped them. */
SHL_FAILPOINT_DEFINE(dropHeartbeats)

static void
record_reply(repl_coord_t *rc, int i, int ret, const bson_t *reply, const shl_status_t *hst,
             int64_t ping_ms)
{
    repl_member_state_t *m;
    bson_iter_t it;
    int old_primary;

    pthread_mutex_lock(&rc->mu);
    if (!rc->configured || i >= rc->cfg.n) {
        pthread_mutex_unlock(&rc->mu);
        return;
    }
    m = &rc->members[i];
    old_primary = rc->primary;
    m->last_heartbeat_ms = shl_clock_wall_ms();
    if (ret != 0) {
        m->up = false;
        m->state = SHL_REPL_DOWN;
        shl_str_copy(m->last_error, sizeof(m->last_error), hst->reason);
        if (rc->primary == i) {
            rc->primary = -1;
        }
    } else {
        if (!m->up) {
            m->up_since_ms = shl_clock_wall_ms();
        }
        m->up = true;
        m->last_ok_us = shl_clock_mono_us();
        m->ping_ms = ping_ms;
        m->last_error[0] = '\0';
        if (bson_iter_init_find(&it, reply, "state")) {
            m->state = (shl_repl_state_t)bson_iter_as_int64(&it);
        }
        if (bson_iter_init_find(&it, reply, "configVersion")) {
            m->config_version = bson_iter_as_int64(&it);
        }
        if (bson_iter_init_find(&it, reply, "term")) {
            m->term = bson_iter_as_int64(&it);
        }
        repl_election_see_term_locked(rc, m->term);
        /* A primary of an older term is no longer one (it steps down when it hears ours). */
        if (m->state == SHL_REPL_PRIMARY && m->term >= rc->term &&
            atomic_load(&rc->state) != SHL_REPL_PRIMARY) {
            rc->primary = i;
            rc->last_primary_seen_us = shl_clock_mono_us();
        } else if (rc->primary == i && m->state != SHL_REPL_PRIMARY) {
            rc->primary = -1;
        }
        {
            uint64_t applied = repl_optime_ts(reply, "opTime");
            uint64_t durable = repl_optime_ts(reply, "durableOpTime");
            uint64_t committed = repl_optime_ts(reply, "lastOpCommitted");
            m->last_replicated = repl_optime_ts(reply, "lastReplicatedOpTime");
            repl_member_learn_locked(m, applied, repl_optime_term(reply, "opTime"), durable,
                                     repl_optime_term(reply, "durableOpTime"));
            if (m->state == SHL_REPL_PRIMARY && committed > rc->commit_point &&
                atomic_load(&rc->state) != SHL_REPL_PRIMARY) {
                rc->commit_point = committed;
            }
            if (strcmp(rc->cfg.members[i].host, rc->sync_source) == 0) {
                repl_coord_learn_source_commit_point_locked(rc, committed);
            }
        }
        pthread_cond_broadcast(&rc->progress);
    }
    pthread_mutex_unlock(&rc->mu);
    if (old_primary != rc->primary) {
        /* hello's "primary" changed: wake the awaitable hellos drivers monitor with. */
        shl_topology_change(rc->svc, false);
    }
}

/* A reply carrying a newer configuration than ours (we were reconfigured away, or missed the
 * push): adopt it. */
static void
adopt_newer_config(repl_coord_t *rc, const bson_t *reply)
{
    bson_t cdoc;
    repl_config_t cfg;
    shl_status_t st = SHL_STATUS_INIT;

    if (!shl_bson_get_subdoc(reply, "config", &cdoc)) {
        return;
    }
    if (repl_config_parse(&cdoc, false, &cfg, &st) == 0) {
        bool newer;
        pthread_mutex_lock(&rc->install_mu);
        pthread_mutex_lock(&rc->mu);
        newer = rc->configured && cfg.version > rc->cfg.version &&
                strcmp(cfg.set_name, rc->cfg.set_name) == 0;
        pthread_mutex_unlock(&rc->mu);
        if (newer && repl_coord_adopt_config(rc, &cfg, &st) != 0) {
            SHL_LOG_WARNING(REPL, 2180051, "could not adopt a newer configuration", "error",
                            BCON_UTF8(st.reason));
        }
        pthread_mutex_unlock(&rc->install_mu);
    }
    repl_config_cleanup(&cfg);
    bson_destroy(&cfg.doc);
}

void *
repl_heartbeat_main(void *arg)
{
    repl_coord_t *rc = arg;

    shl_log_set_thread_ctx("ReplCoordHeartbeat");
    pthread_mutex_lock(&rc->mu);
    while (!rc->stop) {
        int n = rc->cfg.n, self = rc->self;
        int64_t interval = rc->cfg.heartbeat_interval_ms, version = rc->cfg.version;
        char hosts[REPL_MAX_MEMBERS][256];
        int64_t their_version[REPL_MAX_MEMBERS];
        struct timespec until;

        for (int i = 0; i < n; i++) {
            memcpy(hosts[i], rc->cfg.members[i].host, sizeof(hosts[i]));
            their_version[i] = rc->members[i].config_version;
        }
        pthread_mutex_unlock(&rc->mu);
        for (int i = 0; i < n && !rc->stop; i++) {
            bson_t req = BSON_INITIALIZER, reply;
            shl_status_t hst = SHL_STATUS_INIT;
            int64_t t0 = shl_clock_mono_us();
            int ret;

            if (i == self || SHL_FAILPOINT_FIRES(dropHeartbeats)) {
                continue;
            }
            repl_heartbeat_build(rc, their_version[i] < version, &req);
            ret = shl_client_run(rc->pool, hosts[i], "admin", &req, HEARTBEAT_TIMEOUT_MS, &reply,
                                 &hst);
            record_reply(rc, i, ret, &reply, &hst, (shl_clock_mono_us() - t0) / 1000);
            if (ret == 0) {
                adopt_newer_config(rc, &reply);
            }
            if (ret != 0) {
                shl_conn_pool_drop_host(rc->pool, hosts[i]);
            }
            bson_destroy(&req);
            bson_destroy(&reply);
        }
        repl_election_maybe_run(rc);
        pthread_mutex_lock(&rc->mu);
        if (rc->stop) {
            break;
        }
        if (atomic_load(&rc->state) == SHL_REPL_SECONDARY && !rc->fetcher_started) {
            shl_status_t tst = SHL_STATUS_INIT;
            (void)repl_coord_start_threads_locked(rc, &tst); /* a former primary fetches */
        }
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += interval / 1000;
        until.tv_nsec += (long)(interval % 1000) * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&rc->wake, &rc->mu, &until);
    }
    pthread_mutex_unlock(&rc->mu);
    return NULL;
}
