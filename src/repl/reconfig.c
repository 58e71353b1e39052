/*
 * reconfig.c -- changing a running set: replSetReconfig with MongoDB 4.4's safe reconfig rules
 * (primary only, a higher version, the same set name and replicaSetId, at most one voting
 * member added or removed, the current configuration committed first; `force` skips them on
 * any member), adopting a newer configuration from a heartbeat, and the member controls
 * replSetFreeze, replSetMaintenance and replSetSyncFrom. docs/design/replication.md
 * "Reconfiguration".
 */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/topology.h"
#include "repl/repl_private.h"
#include "storage/local_doc.h"

/* How long a reconfig waits for the current configuration to reach a majority. */
#define COMMIT_WAIT_MS 10000

/* Voting members (by _id) in 'a' and not in 'b'. */
static int
voters_missing(const repl_config_t *a, const repl_config_t *b)
{
    int n = 0;

    for (int i = 0; i < a->n; i++) {
        bool found = false;
        if (a->members[i].votes == 0) {
            continue;
        }
        for (int j = 0; j < b->n && !found; j++) {
            found = b->members[j].id == a->members[i].id && b->members[j].votes > 0;
        }
        n += found ? 0 : 1;
    }
    return n;
}

/* Whether a majority of the current voters report the current configuration version. */
static bool
config_committed_locked(const repl_coord_t *rc)
{
    int have = 0;

    for (int i = 0; i < rc->cfg.n; i++) {
        if (rc->cfg.members[i].votes == 0) {
            continue;
        }
        if (i == rc->self || rc->members[i].config_version == rc->cfg.version) {
            have++;
        }
    }
    return have >= repl_config_majority(&rc->cfg);
}

int
repl_coord_adopt_config(repl_coord_t *rc, const repl_config_t *cfg, shl_status_t *st)
{
    repl_member_state_t old[REPL_MAX_MEMBERS];
    char old_hosts[REPL_MAX_MEMBERS][256];
    char primary_host[256] = "";
    int old_n, ret = 0;

    SHL_ERR(shl_local_doc_store(rc->eng, REPL_CONFIG_NS, &cfg->doc, st));
    pthread_mutex_lock(&rc->mu);
    old_n = rc->cfg.n;
    memcpy(old, rc->members, sizeof(old));
    for (int i = 0; i < old_n; i++) {
        memcpy(old_hosts[i], rc->cfg.members[i].host, sizeof(old_hosts[i]));
    }
    if (rc->primary >= 0) {
        snprintf(primary_host, sizeof(primary_host), "%s", rc->cfg.members[rc->primary].host);
    }
    bson_destroy(&rc->cfg.doc);
    repl_config_copy(cfg, &rc->cfg);
    rc->self = repl_config_find(&rc->cfg, rc->svc->me);
    rc->primary = primary_host[0] != '\0' ? repl_config_find(&rc->cfg, primary_host) : -1;
    memset(rc->members, 0, sizeof(rc->members));
    for (int i = 0; i < rc->cfg.n; i++) {
        rc->members[i].config_version = -2;
        for (int j = 0; j < old_n; j++) {
            if (strcmp(old_hosts[j], rc->cfg.members[i].host) == 0) {
                rc->members[i] = old[j];
            }
        }
    }
    if (rc->self < 0) {
        atomic_store(&rc->state, SHL_REPL_REMOVED);
        rc->primary = -1;
    } else {
        rc->members[rc->self].config_version = rc->cfg.version;
        if (atomic_load(&rc->state) == SHL_REPL_REMOVED) {
            atomic_store(&rc->state, SHL_REPL_SECONDARY);
        }
        rc->members[rc->self].state = (shl_repl_state_t)atomic_load(&rc->state);
    }
    ret = repl_coord_start_threads_locked(rc, st);
    pthread_cond_broadcast(&rc->wake);
    pthread_cond_broadcast(&rc->progress);
    pthread_mutex_unlock(&rc->mu);
    SHL_LOG_INFO(REPL, 2180050, "adopted a new replica set configuration", "version",
                 BCON_INT64(cfg->version), "state",
                 BCON_UTF8(shl_repl_state_name((shl_repl_state_t)atomic_load(&rc->state))));
    shl_topology_change(rc->svc, false);
done:
    return ret;
}

/* The new configuration 'doc' checked against the current one as MongoDB checks a reconfig;
 * *out gets its version (force: a large jump), term and replicaSetId. */
static int
validate(repl_coord_t *rc, const bson_t *doc, bool force, repl_config_t *out, shl_status_t *st)
{
    static const bson_oid_t zero;
    int ret = 0;

    SHL_ERR(repl_config_parse(doc, false, out, st));
    pthread_mutex_lock(&rc->mu);
    if (strcmp(out->set_name, rc->cfg.set_name) != 0) {
        pthread_mutex_unlock(&rc->mu);
        SHL_FAIL(st, SHL_CODE_NEW_REPLICA_SET_CONFIGURATION_INCOMPATIBLE,
                 "New and old configurations differ in replica set name; old was %s, and new "
                 "is %s",
                 rc->cfg.set_name, out->set_name);
    }
    if (bson_oid_equal(&out->replica_set_id, &zero)) {
        bson_oid_copy(&rc->cfg.replica_set_id, &out->replica_set_id);
    } else if (!bson_oid_equal(&out->replica_set_id, &rc->cfg.replica_set_id)) {
        pthread_mutex_unlock(&rc->mu);
        SHL_FAIL(st, SHL_CODE_NEW_REPLICA_SET_CONFIGURATION_INCOMPATIBLE,
                 "New and old configurations differ in replica set ID");
    }
    if (force) {
        /* MongoDB jumps the version so a forced configuration wins over any in flight. */
        out->version = rc->cfg.version + 10000 + rand() % 90000;
    } else if (out->version <= rc->cfg.version) {
        int64_t cur = rc->cfg.version;
        pthread_mutex_unlock(&rc->mu);
        SHL_FAIL(st, SHL_CODE_NEW_REPLICA_SET_CONFIGURATION_INCOMPATIBLE,
                 "New replica set configuration version must be greater than old, but %lld is "
                 "not greater than %lld for replica set %s",
                 (long long)out->version, (long long)cur, out->set_name);
    }
    if (!force && voters_missing(&rc->cfg, out) + voters_missing(out, &rc->cfg) > 1) {
        pthread_mutex_unlock(&rc->mu);
        SHL_FAIL(st, SHL_CODE_NEW_REPLICA_SET_CONFIGURATION_INCOMPATIBLE,
                 "Non force replica set reconfig can only add or remove at most 1 voting member.");
    }
    out->term = force ? -1 : rc->term;
    pthread_mutex_unlock(&rc->mu);
    if (repl_config_find(out, rc->svc->me) < 0) {
        SHL_FAIL(st, SHL_CODE_NODE_NOT_FOUND,
                 "No host described in new configuration with {version: %lld, term: %lld} for "
                 "replica set %s maps to this node",
                 (long long)out->version, (long long)out->term, out->set_name);
    }
    if (out->version > INT32_MAX) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "version field value of %lld is out of range",
                 (long long)out->version);
    }
    repl_config_rebuild(out);
done:
    return ret;
}

/* Wait (up to COMMIT_WAIT_MS, interruptibly) until a majority has the current configuration. */
static int
wait_committed(repl_coord_t *rc, shl_op_ctx_t *op, shl_status_t *st)
{
    int64_t deadline = shl_clock_mono_us() + COMMIT_WAIT_MS * 1000;
    bool ok;
    int ret = 0;

    pthread_mutex_lock(&rc->mu);
    while (!(ok = config_committed_locked(rc)) && shl_clock_mono_us() < deadline) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&rc->progress, &rc->mu, &until);
        pthread_mutex_unlock(&rc->mu);
        ret = shl_op_check_interrupt(op, st);
        pthread_mutex_lock(&rc->mu);
        if (ret != 0) {
            break;
        }
    }
    pthread_mutex_unlock(&rc->mu);
    SHL_ERR(ret);
    if (!ok) {
        SHL_FAIL(st, SHL_CODE_CURRENT_CONFIG_NOT_COMMITTED_YET,
                 "Cannot run replSetReconfig because the current config is not yet committed");
    }
done:
    return ret;
}

int
repl_reconfig_run(repl_coord_t *rc, shl_op_ctx_t *op, const bson_t *cmd, shl_status_t *st)
{
    bson_iter_t it;
    bson_t doc;
    repl_config_t cfg;
    bool force = false, locked = false;
    int ret = 0;

    memset(&cfg, 0, sizeof(cfg));
    bson_init(&cfg.doc);
    if (!bson_iter_init_find(&it, cmd, "replSetReconfig") ||
        !shl_bson_get_subdoc(cmd, "replSetReconfig", &doc)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "replSetReconfig takes the new configuration");
    }
    if (bson_iter_init_find(&it, cmd, "force")) {
        force = bson_iter_as_bool(&it);
    }
    if (!rc->configured) {
        SHL_FAIL(st, SHL_CODE_NOT_YET_INITIALIZED, "no replset config has been received");
    }
    if (!force && atomic_load(&rc->state) != SHL_REPL_PRIMARY) {
        SHL_FAIL(st, SHL_CODE_NOT_WRITABLE_PRIMARY,
                 "replSetReconfig should only be run on a "
                 "writable PRIMARY. Current state %s;",
                 shl_repl_state_name((shl_repl_state_t)atomic_load(&rc->state)));
    }
    pthread_mutex_lock(&rc->install_mu);
    locked = true;
    if (!force) {
        SHL_ERR(wait_committed(rc, op, st));
    }
    bson_destroy(&cfg.doc);
    SHL_ERR(validate(rc, &doc, force, &cfg, st));
    SHL_ERR(repl_coord_adopt_config(rc, &cfg, st));
    pthread_mutex_unlock(&rc->install_mu);
    locked = false;
    repl_push_config(rc);
    if (!force) {
        /* MongoDB returns once a majority has the new configuration. */
        SHL_ERR(wait_committed(rc, op, st));
    }
done:
    if (locked) {
        pthread_mutex_unlock(&rc->install_mu);
    }
    repl_config_cleanup(&cfg);
    bson_destroy(&cfg.doc);
    return ret;
}

/* ------------------------------------------------------------------ member controls */

int
repl_freeze(repl_coord_t *rc, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_iter_t it;
    int64_t secs;
    int ret = 0;

    if (!bson_iter_init_find(&it, cmd, "replSetFreeze") || !BSON_ITER_HOLDS_NUMBER(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "replSetFreeze takes a number of seconds");
    }
    secs = bson_iter_as_int64(&it);
    if (atomic_load(&rc->state) == SHL_REPL_PRIMARY) {
        SHL_FAIL(st, SHL_CODE_NOT_SECONDARY,
                 "cannot freeze node when primary or running for "
                 "election. state: Primary");
    }
    pthread_mutex_lock(&rc->mu);
    rc->freeze_until_us = secs > 0 ? shl_clock_mono_us() + secs * 1000000 : 0;
    pthread_mutex_unlock(&rc->mu);
    if (secs <= 0) {
        BSON_APPEND_UTF8(reply, "info", "unfreezing");
    } else if (secs == 1) {
        BSON_APPEND_UTF8(reply, "warning", "you really want to freeze for only 1 second?");
    }
done:
    return ret;
}

int
repl_maintenance(repl_coord_t *rc, const bson_t *cmd, shl_status_t *st)
{
    bson_iter_t it;
    shl_repl_state_t state = (shl_repl_state_t)atomic_load(&rc->state), next = state;
    int ret = 0;

    if (!bson_iter_init_find(&it, cmd, "replSetMaintenance")) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "replSetMaintenance takes a boolean");
    }
    if (state == SHL_REPL_PRIMARY) {
        SHL_FAIL(st, SHL_CODE_NOT_SECONDARY, "primaries can't modify maintenance mode");
    }
    pthread_mutex_lock(&rc->mu);
    if (bson_iter_as_bool(&it)) {
        rc->maintenance++;
        next = SHL_REPL_RECOVERING;
    } else if (rc->maintenance == 0) {
        pthread_mutex_unlock(&rc->mu);
        SHL_FAIL(st, SHL_CODE_OPERATION_FAILED, "already out of maintenance mode");
    } else if (--rc->maintenance == 0) {
        next = SHL_REPL_SECONDARY;
    }
    pthread_mutex_unlock(&rc->mu);
    if (next != state && (state == SHL_REPL_SECONDARY || state == SHL_REPL_RECOVERING)) {
        repl_coord_set_state(rc, next);
    }
done:
    return ret;
}

int
repl_sync_from(repl_coord_t *rc, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_iter_t it;
    const char *host;
    int idx, ret = 0;

    if (!bson_iter_init_find(&it, cmd, "replSetSyncFrom") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "replSetSyncFrom takes a host:port string");
    }
    host = bson_iter_utf8(&it, NULL);
    if (atomic_load(&rc->state) == SHL_REPL_PRIMARY) {
        SHL_FAIL(st, SHL_CODE_NOT_SECONDARY, "primaries don't sync");
    }
    pthread_mutex_lock(&rc->mu);
    idx = repl_config_find(&rc->cfg, host);
    if (idx < 0) {
        pthread_mutex_unlock(&rc->mu);
        SHL_FAIL(st, SHL_CODE_NODE_NOT_FOUND, "Could not find member \"%s\" in replica set", host);
    }
    if (idx == rc->self) {
        pthread_mutex_unlock(&rc->mu);
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "I cannot sync from myself");
    }
    if (rc->cfg.members[idx].arbiter) {
        pthread_mutex_unlock(&rc->mu);
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Cannot sync from \"%s\" because it is an arbiter",
                 host);
    }
    BSON_APPEND_UTF8(reply, "syncFromRequested", host);
    BSON_APPEND_UTF8(reply, "prevSyncTarget", rc->sync_source);
    snprintf(rc->sync_from, sizeof(rc->sync_from), "%s", host);
    pthread_mutex_unlock(&rc->mu);
done:
    return ret;
}
