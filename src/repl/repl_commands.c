/*
 * repl_commands.c -- the replica set commands of a data node: replSetInitiate,
 * replSetGetConfig, replSetGetStatus (MongoDB's reply shapes), and the internal
 * replSetHeartbeat and replSetUpdatePosition members send each other.
 * docs/design/replication.md "Commands".
 */
#include <string.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "repl/repl_private.h"
#include "storage/oplog.h"
#include "storage/write.h"

SHL_FAILPOINT_DECLARE(dropHeartbeats); /* heartbeat.c */

/* ------------------------------------------------------------------ helpers */

/* This node's applied position: a primary's no-holes point, a secondary's last batch. */
static uint64_t
self_applied_locked(repl_coord_t *rc)
{
    uint64_t ts = 0;

    if (!rc->configured || atomic_load(&rc->state) == SHL_REPL_PRIMARY) {
        ts = shl_storage_all_durable(rc->eng);
    } else if (rc->self >= 0) {
        ts = rc->members[rc->self].applied;
    }
    return ts;
}

static void
append_date_of(bson_t *out, const char *key, uint64_t ts)
{
    BSON_APPEND_DATE_TIME(out, key, (int64_t)SHL_TS_SECS(ts) * 1000);
}

/* The synthesized configuration of a set of one (no stored configuration). */
static void
set_of_one_config(const shl_service_ctx_t *svc, bson_t *out)
{
    bson_t members, m;

    BSON_APPEND_UTF8(out, "_id", svc->set_name);
    BSON_APPEND_INT32(out, "version", 1);
    BSON_APPEND_INT64(out, "term", 1);
    BSON_APPEND_ARRAY_BEGIN(out, "members", &members);
    BSON_APPEND_DOCUMENT_BEGIN(&members, "0", &m);
    BSON_APPEND_INT32(&m, "_id", 0);
    BSON_APPEND_UTF8(&m, "host", svc->me);
    bson_append_document_end(&members, &m);
    bson_append_array_end(out, &members);
}

/* ------------------------------------------------------------------ replSetInitiate */

static int
write_initiate_entry(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    bson_t o = BSON_INITIALIZER;
    int ret;

    BSON_APPEND_UTF8(&o, "msg", "initiating set");
    ret = shl_oplog_append(txn, 'n', "", NULL, &o, NULL, NULL, arg, st);
    bson_destroy(&o);
    return ret;
}

/* Every other member must answer and have no configuration of its own (MongoDB's quorum
 * check for initiate). */
static int
check_quorum(repl_coord_t *rc, const repl_config_t *cfg, int self, shl_status_t *st)
{
    int ret = 0;

    for (int i = 0; i < cfg->n; i++) {
        bson_t req = BSON_INITIALIZER, reply;
        bson_iter_t it;
        shl_status_t hst = SHL_STATUS_INIT;
        int hret;

        if (i == self) {
            continue;
        }
        BSON_APPEND_UTF8(&req, "replSetHeartbeat", cfg->set_name);
        BSON_APPEND_INT32(&req, "configVersion", -2);
        BSON_APPEND_UTF8(&req, "from", rc->svc->me);
        BSON_APPEND_BOOL(&req, "checkEmpty", true);
        hret = shl_client_run(rc->pool, cfg->members[i].host, "admin", &req, 5000, &reply, &hst);
        bson_destroy(&req);
        if (hret == 0 && bson_iter_init_find(&it, &reply, "configVersion") &&
            bson_iter_as_int64(&it) >= 1) {
            shl_status_set(&hst, SHL_CODE_INVALID_REPLICA_SET_CONFIG,
                           "member is already initialized");
            hret = hst.code;
        }
        bson_destroy(&reply);
        if (hret != 0) {
            SHL_FAIL(st, SHL_CODE_NODE_NOT_FOUND,
                     "replSetInitiate quorum check failed because not all proposed set members "
                     "responded affirmatively: %s failed with %s",
                     cfg->members[i].host, hst.reason);
        }
    }
done:
    return ret;
}

static int
cmd_initiate(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    repl_coord_t *rc = repl_coord_get(op->svc);
    repl_config_t cfg;
    bson_t given = BSON_INITIALIZER;
    bson_iter_t it;
    uint64_t begin = 0;
    int self, ret = 0;

    memset(&cfg, 0, sizeof(cfg));
    bson_init(&cfg.doc);
    (void)reply;
    if (rc == NULL) {
        SHL_FAIL(st, SHL_CODE_NO_REPLICATION_ENABLED,
                 "This node was not started with replication enabled.");
    }
    if (rc->configured) {
        SHL_FAIL(st, SHL_CODE_ALREADY_INITIALIZED, "already initialized");
    }
    bson_iter_init(&it, cmd);
    bson_iter_next(&it);
    if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
        const uint8_t *data;
        uint32_t len;
        bson_t view;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&view, data, len);
        bson_destroy(&given);
        bson_copy_to(&view, &given);
    } else {
        /* rs.initiate() without a configuration: a set of this node alone. */
        set_of_one_config(op->svc, &given);
    }
    bson_destroy(&cfg.doc);
    SHL_ERR(repl_config_parse(&given, true, &cfg, st));
    if (strcmp(cfg.set_name, op->svc->set_name) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG,
                 "Attempting to initiate a replica set with name %s, but command line reports "
                 "%s; rejecting",
                 cfg.set_name, op->svc->set_name);
    }
    self = repl_config_find(&cfg, op->svc->me);
    if (self < 0) {
        SHL_FAIL(st, SHL_CODE_NODE_NOT_FOUND,
                 "No host described in new configuration with {version: %lld, term: 1} for "
                 "replica set %s maps to this node",
                 (long long)cfg.version, cfg.set_name);
    }
    if (cfg.members[self].arbiter || cfg.members[self].priority == 0) {
        SHL_FAIL(st, SHL_CODE_NODE_NOT_ELECTABLE,
                 "This node, %s, with _id %d is not electable under the new configuration with "
                 "{version: %lld, term: 1} for replica set %s",
                 op->svc->me, (int)cfg.members[self].id, (long long)cfg.version, cfg.set_name);
    }
    cfg.term = 1;
    {
        /* term is part of the normalised document: parse it again with the term set. */
        bson_t again = BSON_INITIALIZER;
        bson_iter_t fit;
        bson_iter_init(&fit, &cfg.doc);
        while (bson_iter_next(&fit)) {
            if (strcmp(bson_iter_key(&fit), "term") == 0) {
                BSON_APPEND_INT64(&again, "term", 1);
            } else {
                bson_append_iter(&again, NULL, 0, &fit);
            }
        }
        repl_config_cleanup(&cfg);
        bson_destroy(&cfg.doc);
        ret = repl_config_parse(&again, false, &cfg, st);
        bson_destroy(&again);
        SHL_ERR(ret);
    }
    SHL_ERR(check_quorum(rc, &cfg, self, st));
    /* The set's first entry: members joining start fetching from it. */
    SHL_ERR(shl_storage_write_retry(rc->eng, write_initiate_entry, &begin, NULL, st));
    SHL_ERR(shl_storage_wait_durable(rc->eng, begin, st));
    SHL_ERR(repl_coord_install_config(rc, &cfg, true, begin, st));
    /* Tell the members now rather than at the next heartbeat (which repeats it). */
    repl_push_config(rc);
done:
    bson_destroy(&given);
    repl_config_cleanup(&cfg);
    bson_destroy(&cfg.doc);
    return ret;
}

void
repl_push_config(repl_coord_t *rc)
{
    char hosts[REPL_MAX_MEMBERS][256];
    int n, self;

    pthread_mutex_lock(&rc->mu);
    n = rc->cfg.n;
    self = rc->self;
    for (int i = 0; i < n; i++) {
        memcpy(hosts[i], rc->cfg.members[i].host, sizeof(hosts[i]));
    }
    pthread_mutex_unlock(&rc->mu);
    for (int i = 0; i < n; i++) {
        bson_t req, hreply;
        shl_status_t hst = SHL_STATUS_INIT;
        if (i == self) {
            continue;
        }
        bson_init(&req);
        repl_heartbeat_build(rc, true, &req);
        if (shl_client_run(rc->pool, hosts[i], "admin", &req, 5000, &hreply, &hst) != 0) {
            SHL_LOG_WARNING(REPL, 2180003, "could not send the new configuration", "host",
                            BCON_UTF8(hosts[i]), "error", BCON_UTF8(hst.reason));
        } else {
            bson_iter_t it;
            pthread_mutex_lock(&rc->mu);
            if (i < rc->cfg.n && strcmp(rc->cfg.members[i].host, hosts[i]) == 0 &&
                bson_iter_init_find(&it, &hreply, "configVersion")) {
                rc->members[i].config_version = bson_iter_as_int64(&it);
                pthread_cond_broadcast(&rc->progress);
            }
            pthread_mutex_unlock(&rc->mu);
        }
        bson_destroy(&req);
        bson_destroy(&hreply);
    }
}

/* ------------------------------------------------------------------ replSetGetConfig */

static int
cmd_get_config(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    repl_coord_t *rc = repl_coord_get(op->svc);
    bson_t c;
    int ret = 0;

    (void)cmd;
    if (rc == NULL) {
        SHL_FAIL(st, SHL_CODE_NO_REPLICATION_ENABLED, "not running with --replSet");
    }
    pthread_mutex_lock(&rc->mu);
    if (rc->configured) {
        BSON_APPEND_DOCUMENT(reply, "config", &rc->cfg.doc);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(reply, "config", &c);
        set_of_one_config(op->svc, &c);
        bson_append_document_end(reply, &c);
    }
    pthread_mutex_unlock(&rc->mu);
done:
    return ret;
}

/* ------------------------------------------------------------------ replSetGetStatus */

static void
append_member_status(repl_coord_t *rc, int i, int64_t now, bson_t *m)
{
    const repl_member_t *mc = &rc->cfg.members[i];
    const repl_member_state_t *ms = &rc->members[i];
    bool self = i == rc->self;
    shl_repl_state_t state = self ? (shl_repl_state_t)atomic_load(&rc->state)
                                  : (ms->up ? ms->state : SHL_REPL_DOWN);
    uint64_t applied = self ? self_applied_locked(rc) : ms->applied;
    uint64_t durable = self ? applied : ms->durable;

    BSON_APPEND_INT32(m, "_id", mc->id);
    BSON_APPEND_UTF8(m, "name", mc->host);
    BSON_APPEND_DOUBLE(m, "health", self || ms->up ? 1.0 : 0.0);
    BSON_APPEND_INT32(m, "state", (int32_t)state);
    BSON_APPEND_UTF8(m, "stateStr", shl_repl_state_name(state));
    BSON_APPEND_INT64(m, "uptime",
                      self ? (now - rc->svc->start_wall_ms) / 1000
                           : (ms->up ? (now - ms->up_since_ms) / 1000 : 0));
    repl_append_optime(m, "optime", applied, ms->applied_t);
    if (!self) {
        repl_append_optime(m, "optimeDurable", durable, ms->durable_t);
    }
    append_date_of(m, "optimeDate", applied);
    if (!self) {
        append_date_of(m, "optimeDurableDate", durable);
        BSON_APPEND_DATE_TIME(m, "lastHeartbeat", ms->last_heartbeat_ms);
        BSON_APPEND_DATE_TIME(m, "lastHeartbeatRecv", ms->last_heartbeat_recv_ms);
        BSON_APPEND_INT64(m, "pingMs", ms->ping_ms);
        if (ms->last_error[0] != '\0' && !ms->up) {
            BSON_APPEND_UTF8(m, "lastHeartbeatMessage", ms->last_error);
        }
    }
    BSON_APPEND_UTF8(m, "syncSourceHost",
                     state == SHL_REPL_SECONDARY && rc->primary >= 0
                         ? rc->cfg.members[rc->primary].host
                         : "");
    BSON_APPEND_INT32(m, "syncSourceId",
                      state == SHL_REPL_SECONDARY && rc->primary >= 0
                          ? rc->cfg.members[rc->primary].id
                          : -1);
    BSON_APPEND_UTF8(m, "infoMessage", "");
    if (state == SHL_REPL_PRIMARY) {
        BSON_APPEND_TIMESTAMP(m, "electionTime", (uint32_t)(rc->election_date_ms / 1000), 1);
        BSON_APPEND_DATE_TIME(m, "electionDate", rc->election_date_ms);
    }
    BSON_APPEND_INT32(m, "configVersion", (int32_t)rc->cfg.version);
    BSON_APPEND_INT64(m, "configTerm", rc->cfg.term);
    if (self) {
        BSON_APPEND_BOOL(m, "self", true);
        BSON_APPEND_UTF8(m, "lastHeartbeatMessage", "");
    }
}

static int
cmd_get_status(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    repl_coord_t *rc = repl_coord_get(op->svc);
    int64_t now = shl_clock_wall_ms();
    bson_t optimes, members, m;
    char key[16];
    int ret = 0;

    (void)cmd;
    if (rc == NULL) {
        SHL_FAIL(st, SHL_CODE_NO_REPLICATION_ENABLED, "not running with --replSet");
    }
    pthread_mutex_lock(&rc->mu);
    if (!rc->configured) {
        uint64_t ts = shl_storage_all_durable(rc->eng);
        BSON_APPEND_UTF8(reply, "set", op->svc->set_name);
        BSON_APPEND_DATE_TIME(reply, "date", now);
        BSON_APPEND_INT32(reply, "myState", SHL_REPL_PRIMARY);
        BSON_APPEND_INT64(reply, "term", 1);
        BSON_APPEND_INT32(reply, "heartbeatIntervalMillis", 2000);
        BSON_APPEND_INT32(reply, "majorityVoteCount", 1);
        BSON_APPEND_INT32(reply, "writeMajorityCount", 1);
        BSON_APPEND_INT32(reply, "votingMembersCount", 1);
        BSON_APPEND_INT32(reply, "writableVotingMembersCount", 1);
        BSON_APPEND_DOCUMENT_BEGIN(reply, "optimes", &optimes);
        repl_append_optime(&optimes, "lastCommittedOpTime", ts, 1);
        repl_append_optime(&optimes, "readConcernMajorityOpTime", ts, 1);
        repl_append_optime(&optimes, "appliedOpTime", ts, 1);
        repl_append_optime(&optimes, "durableOpTime", ts, 1);
        bson_append_document_end(reply, &optimes);
        BSON_APPEND_ARRAY_BEGIN(reply, "members", &members);
        BSON_APPEND_DOCUMENT_BEGIN(&members, "0", &m);
        BSON_APPEND_INT32(&m, "_id", 0);
        BSON_APPEND_UTF8(&m, "name", op->svc->me);
        BSON_APPEND_DOUBLE(&m, "health", 1.0);
        BSON_APPEND_INT32(&m, "state", SHL_REPL_PRIMARY);
        BSON_APPEND_UTF8(&m, "stateStr", "PRIMARY");
        BSON_APPEND_INT64(&m, "uptime", (now - op->svc->start_wall_ms) / 1000);
        repl_append_optime(&m, "optime", ts, 1);
        append_date_of(&m, "optimeDate", ts);
        BSON_APPEND_BOOL(&m, "self", true);
        bson_append_document_end(&members, &m);
        bson_append_array_end(reply, &members);
    } else {
        uint64_t applied = self_applied_locked(rc);
        int voters = repl_config_voters(&rc->cfg), writable = 0;
        for (int i = 0; i < rc->cfg.n; i++) {
            writable += rc->cfg.members[i].votes > 0 && !rc->cfg.members[i].arbiter;
        }
        BSON_APPEND_UTF8(reply, "set", rc->cfg.set_name);
        BSON_APPEND_DATE_TIME(reply, "date", now);
        BSON_APPEND_INT32(reply, "myState", atomic_load(&rc->state));
        BSON_APPEND_INT64(reply, "term", rc->term);
        BSON_APPEND_UTF8(reply, "syncSourceHost",
                         atomic_load(&rc->state) == SHL_REPL_SECONDARY && rc->primary >= 0
                             ? rc->cfg.members[rc->primary].host
                             : "");
        BSON_APPEND_INT32(reply, "syncSourceId",
                          atomic_load(&rc->state) == SHL_REPL_SECONDARY && rc->primary >= 0
                              ? rc->cfg.members[rc->primary].id
                              : -1);
        BSON_APPEND_INT64(reply, "heartbeatIntervalMillis", rc->cfg.heartbeat_interval_ms);
        BSON_APPEND_INT32(reply, "majorityVoteCount", repl_config_majority(&rc->cfg));
        BSON_APPEND_INT32(reply, "writeMajorityCount",
                          writable < repl_config_majority(&rc->cfg)
                              ? writable
                              : repl_config_majority(&rc->cfg));
        BSON_APPEND_INT32(reply, "votingMembersCount", voters);
        BSON_APPEND_INT32(reply, "writableVotingMembersCount", writable);
        BSON_APPEND_DOCUMENT_BEGIN(reply, "optimes", &optimes);
        repl_append_optime(&optimes, "lastCommittedOpTime", rc->commit_point, rc->term);
        append_date_of(&optimes, "lastCommittedWallTime", rc->commit_point);
        repl_append_optime(&optimes, "readConcernMajorityOpTime", rc->commit_point, rc->term);
        repl_append_optime(&optimes, "appliedOpTime", applied, rc->term);
        repl_append_optime(&optimes, "durableOpTime", applied, rc->term);
        append_date_of(&optimes, "lastAppliedWallTime", applied);
        append_date_of(&optimes, "lastDurableWallTime", applied);
        bson_append_document_end(reply, &optimes);
        BSON_APPEND_ARRAY_BEGIN(reply, "members", &members);
        for (int i = 0; i < rc->cfg.n; i++) {
            snprintf(key, sizeof(key), "%d", i);
            BSON_APPEND_DOCUMENT_BEGIN(&members, key, &m);
            append_member_status(rc, i, now, &m);
            bson_append_document_end(&members, &m);
        }
        bson_append_array_end(reply, &members);
    }
    pthread_mutex_unlock(&rc->mu);
done:
    return ret;
}

/* ------------------------------------------------------------------ replSetHeartbeat */

void
repl_heartbeat_build(repl_coord_t *rc, bool with_config, bson_t *out)
{
    pthread_mutex_lock(&rc->mu);
    BSON_APPEND_UTF8(out, "replSetHeartbeat", rc->configured ? rc->cfg.set_name
                                                             : rc->svc->set_name);
    BSON_APPEND_INT32(out, "configVersion", rc->configured ? (int32_t)rc->cfg.version : -2);
    BSON_APPEND_INT64(out, "configTerm", rc->configured ? rc->cfg.term : -1);
    BSON_APPEND_INT32(out, "hbv", 1);
    BSON_APPEND_UTF8(out, "from", rc->svc->me);
    BSON_APPEND_INT32(out, "fromId", rc->self >= 0 ? rc->cfg.members[rc->self].id : -1);
    BSON_APPEND_INT64(out, "term", rc->term);
    if (with_config && rc->configured) {
        BSON_APPEND_DOCUMENT(out, "config", &rc->cfg.doc);
        BSON_APPEND_TIMESTAMP(out, "beginTs", SHL_TS_SECS(rc->begin_ts), SHL_TS_INC(rc->begin_ts));
    }
    pthread_mutex_unlock(&rc->mu);
}

static int
cmd_heartbeat(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    repl_coord_t *rc = repl_coord_get(op->svc);
    bson_iter_t it;
    bson_t cdoc;
    uint64_t last_replicated, reply_applied = 0;
    int64_t primary_t = -1;
    bool with_optimes = false;
    int ret = 0;

    if (rc == NULL) {
        SHL_FAIL(st, SHL_CODE_NO_REPLICATION_ENABLED, "not running with --replSet");
    }
    if (SHL_FAILPOINT_FIRES(dropHeartbeats)) {
        SHL_FAIL(st, SHL_CODE_HOST_UNREACHABLE, "heartbeat dropped (dropHeartbeats fail point)");
    }
    last_replicated = repl_coord_last_replicated(rc);
    if (!bson_iter_init_find(&it, cmd, "replSetHeartbeat") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "replSetHeartbeat takes the set's name");
    }
    if (strcmp(bson_iter_utf8(&it, NULL), op->svc->set_name) != 0) {
        SHL_FAIL(st, SHL_CODE_INCONSISTENT_REPLICA_SET_NAMES,
                 "Our set name of %s does not match name %s reported by remote node",
                 op->svc->set_name, bson_iter_utf8(&it, NULL));
    }
    /* A newer configuration (the initiator's, or a reconfig's) is adopted here. */
    if (shl_bson_get_subdoc(cmd, "config", &cdoc)) {
        repl_config_t cfg;
        bool newer;
        /* One install at a time: the initiator's push and its heartbeat may cross. */
        pthread_mutex_lock(&rc->install_mu);
        pthread_mutex_lock(&rc->mu);
        newer = !rc->configured;
        pthread_mutex_unlock(&rc->mu);
        if (newer) {
            if (repl_config_parse(&cdoc, false, &cfg, st) == 0 &&
                repl_config_find(&cfg, op->svc->me) >= 0) {
                ret = repl_coord_install_config(rc, &cfg, false, repl_optime_ts(cmd, "beginTs"),
                                                st);
            }
        } else if (repl_config_parse(&cdoc, false, &cfg, st) == 0) {
            /* A reconfig: a higher version replaces ours (a removed member becomes REMOVED). */
            pthread_mutex_lock(&rc->mu);
            newer = cfg.version > rc->cfg.version;
            pthread_mutex_unlock(&rc->mu);
            if (newer) {
                ret = repl_coord_adopt_config(rc, &cfg, st);
            }
            shl_status_clear(st);
            ret = 0;
            repl_config_cleanup(&cfg);
            bson_destroy(&cfg.doc);
        }
        pthread_mutex_unlock(&rc->install_mu);
    }
    pthread_mutex_lock(&rc->mu);
    if (rc->configured && bson_iter_init_find(&it, cmd, "term")) {
        repl_election_see_term_locked(rc, bson_iter_as_int64(&it));
    }
    if (rc->configured && bson_iter_init_find(&it, cmd, "fromId") && bson_iter_as_int64(&it) >= 0) {
        for (int i = 0; i < rc->cfg.n; i++) {
            if (rc->cfg.members[i].id == bson_iter_as_int64(&it)) {
                rc->members[i].last_heartbeat_recv_ms = shl_clock_wall_ms();
            }
        }
    }
    {
        uint64_t applied = self_applied_locked(rc);
        shl_repl_state_t state = rc->configured ? (shl_repl_state_t)atomic_load(&rc->state)
                                                : SHL_REPL_STARTUP;
        /* A member that is not primary has at most the set's entries in its oplog: a former
         * primary's own position counted its local.* writes, and a receiver keeps the highest
         * position it heard (too high a durable one would move the commit point past what
         * this member has). */
        if (state != SHL_REPL_PRIMARY && last_replicated < applied) {
            applied = last_replicated;
        }
        BSON_APPEND_UTF8(reply, "set", op->svc->set_name);
        BSON_APPEND_INT32(reply, "state", (int32_t)state);
        BSON_APPEND_INT64(reply, "term", rc->term);
        BSON_APPEND_INT32(reply, "configVersion", rc->configured ? (int32_t)rc->cfg.version : -2);
        BSON_APPEND_INT64(reply, "configTerm", rc->configured ? rc->cfg.term : -1);
        /* A configured sender with an older version gets ours (as MongoDB's reply carries it):
         * a member reconfigured away learns it is REMOVED. */
        if (rc->configured && bson_iter_init_find(&it, cmd, "configVersion") &&
            bson_iter_as_int64(&it) >= 0 && bson_iter_as_int64(&it) < rc->cfg.version) {
            BSON_APPEND_DOCUMENT(reply, "config", &rc->cfg.doc);
        }
        reply_applied = applied;
        /* A primary's position (its no-holes point, maybe no entry's) is of its term. */
        primary_t = state == SHL_REPL_PRIMARY ? rc->term : -1;
        with_optimes = true;
        append_date_of(reply, "wallTime", applied);
        append_date_of(reply, "durableWallTime", applied);
        if (rc->configured && state == SHL_REPL_PRIMARY) {
            BSON_APPEND_OID(reply, "electionId", &rc->election_id);
        }
        BSON_APPEND_UTF8(reply, "syncingTo",
                         state == SHL_REPL_SECONDARY && rc->primary >= 0
                             ? rc->cfg.members[rc->primary].host
                             : "");
        repl_append_optime(reply, "lastOpCommitted", rc->commit_point, rc->term);
    }
    pthread_mutex_unlock(&rc->mu);
    if (with_optimes) {
        /* Each optime with its entry's term (read without mu): see repl_optime_cmp. */
        int64_t applied_t = primary_t >= 0 ? primary_t : repl_coord_term_at(rc, reply_applied);
        repl_append_optime(reply, "opTime", reply_applied, applied_t);
        /* The newest of the set's entries here (its local.* writes excluded): what a candidate
         * compares itself with for a priority takeover. */
        repl_append_optime(reply, "lastReplicatedOpTime", last_replicated,
                           repl_coord_term_at(rc, last_replicated));
        repl_append_optime(reply, "durableOpTime", reply_applied, applied_t);
    }
done:
    return ret;
}

/* ------------------------------------------------------------------ replSetUpdatePosition */

static int
cmd_update_position(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    repl_coord_t *rc = repl_coord_get(op->svc);
    bson_t arr, entry, rd;
    bson_iter_t it;
    int ret = 0;

    if (rc == NULL) {
        SHL_FAIL(st, SHL_CODE_NO_REPLICATION_ENABLED, "not running with --replSet");
    }
    if (!rc->configured) {
        SHL_FAIL(st, SHL_CODE_NOT_YET_INITIALIZED, "no replset config has been received");
    }
    if (!bson_iter_init_find(&it, cmd, "optimes") || !BSON_ITER_HOLDS_ARRAY(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "optimes must be an array");
    }
    {
        const uint8_t *data;
        uint32_t len;
        bson_iter_array(&it, &len, &data);
        bson_init_static(&arr, data, len);
    }
    bson_iter_init(&it, &arr);
    while (bson_iter_next(&it)) {
        bson_iter_t f;
        int idx = -1;
        const uint8_t *data;
        uint32_t len;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            continue;
        }
        bson_iter_document(&it, &len, &data);
        bson_init_static(&entry, data, len);
        if (!bson_iter_init_find(&f, &entry, "memberId")) {
            continue;
        }
        pthread_mutex_lock(&rc->mu);
        for (int i = 0; i < rc->cfg.n; i++) {
            if (rc->cfg.members[i].id == bson_iter_as_int64(&f)) {
                idx = i;
            }
        }
        pthread_mutex_unlock(&rc->mu);
        repl_coord_update_member(rc, idx, repl_optime_ts(&entry, "appliedOpTime"),
                                 repl_optime_term(&entry, "appliedOpTime"),
                                 repl_optime_ts(&entry, "durableOpTime"),
                                 repl_optime_term(&entry, "durableOpTime"));
    }
    pthread_mutex_lock(&rc->mu);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "$replData", &rd);
    BSON_APPEND_INT64(&rd, "term", rc->term);
    repl_append_optime(&rd, "lastOpCommitted", rc->commit_point, rc->term);
    BSON_APPEND_INT32(&rd, "configVersion", (int32_t)rc->cfg.version);
    BSON_APPEND_INT32(&rd, "primaryIndex", rc->primary);
    bson_append_document_end(reply, &rd);
    pthread_mutex_unlock(&rc->mu);
done:
    return ret;
}

static int
cmd_request_votes(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    repl_coord_t *rc = repl_coord_get(op->svc);
    int ret = 0;

    if (rc == NULL) {
        SHL_FAIL(st, SHL_CODE_NO_REPLICATION_ENABLED, "not running with --replSet");
    }
    ret = repl_election_vote(rc, cmd, reply, st);
done:
    return ret;
}

static int
cmd_step_down(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    repl_coord_t *rc = repl_coord_get(op->svc);
    int ret = 0;

    (void)reply;
    if (rc == NULL) {
        SHL_FAIL(st, SHL_CODE_NO_REPLICATION_ENABLED, "not running with --replSet");
    }
    ret = repl_election_step_down(rc, op, cmd, st);
done:
    return ret;
}

static int
note_entry(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    return shl_oplog_append(txn, 'n', "", NULL, arg, NULL, NULL, NULL, st);
}

/* appendOplogNote {data: <document>}: a no-op entry carrying 'data' (initial sync uses one to
 * mark where it starts fetching). */
static int
cmd_append_oplog_note(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    repl_coord_t *rc = repl_coord_get(op->svc);
    bson_t data;
    int ret = 0;

    (void)reply;
    if (rc == NULL) {
        SHL_FAIL(st, SHL_CODE_NO_REPLICATION_ENABLED, "not running with --replSet");
    }
    if (!shl_bson_get_subdoc(cmd, "data", &data)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "appendOplogNote needs a 'data' document");
    }
    SHL_ERR(shl_storage_write_retry(rc->eng, note_entry, &data, NULL, st));
done:
    return ret;
}

static int
cmd_reconfig(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    repl_coord_t *rc = repl_coord_get(op->svc);
    int ret = 0;

    (void)reply;
    if (rc == NULL) {
        SHL_FAIL(st, SHL_CODE_NO_REPLICATION_ENABLED, "not running with --replSet");
    }
    ret = repl_reconfig_run(rc, op, cmd, st);
done:
    return ret;
}

/* replSetFreeze, replSetMaintenance, replSetSyncFrom, replSetAbortPrimaryCatchUp, replSetStepUp:
 * one member's controls, on a configured member (reconfig.c, catch_up.c, election.c). */
static int
cmd_member_control(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    repl_coord_t *rc = repl_coord_get(op->svc);
    bson_iter_t it;
    const char *name = "";
    int ret = 0;

    if (rc == NULL || !rc->configured) {
        SHL_FAIL(st, rc == NULL ? SHL_CODE_NO_REPLICATION_ENABLED : SHL_CODE_NOT_YET_INITIALIZED,
                 "no replica set configuration");
    }
    if (bson_iter_init(&it, cmd) && bson_iter_next(&it)) {
        name = bson_iter_key(&it);
    }
    if (strcmp(name, "replSetFreeze") == 0) {
        ret = repl_freeze(rc, cmd, reply, st);
    } else if (strcmp(name, "replSetMaintenance") == 0) {
        ret = repl_maintenance(rc, cmd, st);
    } else if (strcmp(name, "replSetSyncFrom") == 0) {
        ret = repl_sync_from(rc, cmd, reply, st);
    } else if (strcmp(name, "replSetAbortPrimaryCatchUp") == 0) {
        ret = repl_abort_catch_up(rc, st);
    } else {
        ret = repl_election_step_up(rc, st);
    }
done:
    return ret;
}

static const shl_command_t repl_commands[] = {
    {"replSetStepUp", {NULL}, cmd_member_control, SHL_CMD_ADMIN_ONLY,
     "this secondary stands for election now"},
    {"appendOplogNote", {NULL}, cmd_append_oplog_note, SHL_CMD_ADMIN_ONLY | SHL_CMD_NEEDS_PRIMARY,
     "write a no-op entry with the given data to the oplog"},
    {"replSetReconfig", {NULL}, cmd_reconfig, SHL_CMD_ADMIN_ONLY,
     "change the replica set's configuration (safe reconfig rules; force)"},
    {"replSetFreeze", {NULL}, cmd_member_control, SHL_CMD_ADMIN_ONLY,
     "this member does not stand for election for the given seconds (0: unfreeze)"},
    {"replSetMaintenance", {NULL}, cmd_member_control, SHL_CMD_ADMIN_ONLY,
     "a secondary enters (true) or leaves (false) maintenance mode (RECOVERING)"},
    {"replSetSyncFrom", {NULL}, cmd_member_control, SHL_CMD_ADMIN_ONLY,
     "the member this secondary fetches the oplog from"},
    {"replSetAbortPrimaryCatchUp", {NULL}, cmd_member_control, SHL_CMD_ADMIN_ONLY,
     "a newly elected member stops catching up and becomes primary now"},
    {"replSetStepDown", {NULL}, cmd_step_down, SHL_CMD_ADMIN_ONLY,
     "the primary steps down and does not stand for stepDownSecs"},
    {"replSetRequestVotes", {NULL}, cmd_request_votes, SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     "a candidate asks for this member's vote (internal)"},
    {"replSetInitiate", {NULL}, cmd_initiate, SHL_CMD_ADMIN_ONLY, "initiate a replica set"},
    {"replSetGetConfig", {NULL}, cmd_get_config, SHL_CMD_ADMIN_ONLY,
     "the replica set's configuration"},
    {"replSetGetStatus", {NULL}, cmd_get_status, SHL_CMD_ADMIN_ONLY,
     "the replica set's members and their states"},
    {"replSetHeartbeat", {NULL}, cmd_heartbeat, SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     "a member's heartbeat (internal)"},
    {"replSetUpdatePosition", {NULL}, cmd_update_position, SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     "a member's replication progress (internal)"},
};

void
repl_register_commands(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(repl_commands) / sizeof(repl_commands[0]); i++) {
        shl_command_registry_add(reg, &repl_commands[i]);
    }
}
