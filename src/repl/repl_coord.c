/*
 * repl_coord.c -- the replication coordinator of a --replSet data node: the installed
 * configuration and this member's state, what it knows of the other members (heartbeats,
 * replSetUpdatePosition), the majority commit point, and the hooks it installs: hello's
 * replica set fields, admission (NotWritablePrimary / NotPrimaryNoSecondaryOk), write
 * concern waits and majority reads (db/repl_hooks.h). docs/design/replication.md.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/repl_hooks.h"
#include "net/topology.h"
#include "repl/repl_private.h"
#include "storage/oplog.h"
#include "storage/record_store.h"
#include "storage/local_doc.h"

/* Where a member that joined the set starts fetching: {_id: "minvalid", begin: ts}. */
#define REPL_BEGIN_NS "local.replset.minvalid"

const char *
shl_repl_state_name(shl_repl_state_t s)
{
    switch (s) {
    case SHL_REPL_STARTUP:
        return "STARTUP";
    case SHL_REPL_PRIMARY:
        return "PRIMARY";
    case SHL_REPL_SECONDARY:
        return "SECONDARY";
    case SHL_REPL_RECOVERING:
        return "RECOVERING";
    case SHL_REPL_STARTUP2:
        return "STARTUP2";
    case SHL_REPL_ARBITER:
        return "ARBITER";
    case SHL_REPL_DOWN:
        return "(not reachable/healthy)";
    case SHL_REPL_ROLLBACK:
        return "ROLLBACK";
    case SHL_REPL_REMOVED:
        return "REMOVED";
    default:
        return "UNKNOWN";
    }
}

repl_coord_t *
repl_coord_get(const shl_service_ctx_t *svc)
{
    return svc->repl_state;
}

bool
shl_repl_is_primary(const shl_service_ctx_t *svc)
{
    const repl_coord_t *rc = repl_coord_get(svc);

    return rc == NULL || atomic_load(&rc->state) == SHL_REPL_PRIMARY;
}

void
repl_append_optime(bson_t *out, const char *key, uint64_t ts, int64_t term)
{
    bson_t d;

    BSON_APPEND_DOCUMENT_BEGIN(out, key, &d);
    BSON_APPEND_TIMESTAMP(&d, "ts", SHL_TS_SECS(ts), SHL_TS_INC(ts));
    BSON_APPEND_INT64(&d, "t", term);
    bson_append_document_end(out, &d);
}

uint64_t
repl_optime_ts(const bson_t *doc, const char *key)
{
    bson_iter_t it, sub;
    uint32_t secs = 0, inc = 0;

    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &sub) && bson_iter_find(&sub, "ts") &&
        BSON_ITER_HOLDS_TIMESTAMP(&sub)) {
        bson_iter_timestamp(&sub, &secs, &inc);
    } else if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        bson_iter_timestamp(&it, &secs, &inc);
    }
    return SHL_TS_MAKE(secs, inc);
}

int64_t
repl_optime_term(const bson_t *doc, const char *key)
{
    bson_iter_t it, sub;
    int64_t t = -1;

    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &sub) && bson_iter_find(&sub, "t") && BSON_ITER_HOLDS_NUMBER(&sub)) {
        t = bson_iter_as_int64(&sub);
    }
    return t;
}

int64_t
repl_entry_term(const bson_t *e)
{
    bson_iter_t it;

    return bson_iter_init_find(&it, e, "t") && BSON_ITER_HOLDS_NUMBER(&it) ? bson_iter_as_int64(&it)
                                                                           : -1;
}

int64_t
repl_coord_term_at(repl_coord_t *rc, uint64_t ts)
{
    shl_storage_txn_t *txn = NULL;
    shl_record_cursor_t *cur = NULL;
    shl_collection_t *oplog = NULL;
    shl_status_t st = SHL_STATUS_INIT;
    int64_t t = -1;

    if (ts == 0) {
        return t;
    }
    oplog = shl_oplog_collection(rc->eng);
    /* The newest of the set's entries at or below ts: a position that is no entry's own (a
     * former primary's no-holes point) is that entry's optime. */
    if (shl_storage_txn_begin(rc->eng, NULL, &txn, &st) == 0 &&
        shl_record_cursor_open(txn, oplog, false, &cur, &st) == 0) {
        shl_record_cursor_seek(cur, (int64_t)ts);
        for (;;) {
            int64_t rid = 0;
            bson_t doc;
            bool eof = true;
            bson_iter_t it;
            if (shl_record_cursor_next(cur, &rid, &doc, &eof, &st) != 0 || eof) {
                break;
            }
            if (bson_iter_init_find(&it, &doc, "ns") && BSON_ITER_HOLDS_UTF8(&it) &&
                strncmp(bson_iter_utf8(&it, NULL), "local.", 6) == 0) {
                continue;
            }
            if (bson_iter_init_find(&it, &doc, "t") && BSON_ITER_HOLDS_NUMBER(&it)) {
                t = bson_iter_as_int64(&it);
            }
            break;
        }
    }
    shl_record_cursor_close(cur);
    shl_storage_txn_abort(txn);
    shl_collection_release(oplog);
    return t;
}

/* ------------------------------------------------------------------ progress */

/* This node's own position: everything below the no-holes point is applied (a primary's
 * writes, a secondary's applied batches). Called with mu held. */
static void
refresh_self_locked(repl_coord_t *rc)
{
    if (rc->self >= 0 && atomic_load(&rc->state) == SHL_REPL_PRIMARY) {
        uint64_t ts = shl_storage_all_durable(rc->eng);
        repl_member_state_t *m = &rc->members[rc->self];
        if (ts > m->applied) {
            m->applied = ts;
        }
        if (ts > m->durable) {
            m->durable = ts;
        }
        /* Every entry a primary has is on the winning branch; it writes in its term. */
        m->applied_t = rc->term;
        m->durable_t = rc->term;
    }
}

/* What member i has of this primary's term (its position when its newest entry is of the
 * term, else 0): a primary commits and acknowledges only entries of its own term, and an
 * optime of an older term is older than every one of this term whatever its timestamp (a
 * restarted former primary's divergent newest entry counts for nothing before it rolls
 * back). With mu held. */
static uint64_t
in_term_locked(const repl_coord_t *rc, int i, bool durable)
{
    const repl_member_state_t *m = &rc->members[i];
    int64_t t = durable ? m->durable_t : m->applied_t;

    return t == rc->term ? (durable ? m->durable : m->applied) : 0;
}

static void
recompute_commit_point_locked(repl_coord_t *rc)
{
    uint64_t durable[REPL_MAX_MEMBERS];
    uint64_t cp;

    if (!rc->configured || atomic_load(&rc->state) != SHL_REPL_PRIMARY) {
        return;
    }
    refresh_self_locked(rc);
    for (int i = 0; i < rc->cfg.n; i++) {
        durable[i] = in_term_locked(rc, i, true);
    }
    cp = repl_commit_point(&rc->cfg, durable);
    if (cp > rc->commit_point) {
        rc->commit_point = cp;
        pthread_cond_broadcast(&rc->progress);
    }
    repl_coord_move_stable_locked(rc);
}

void
repl_coord_self_progress(repl_coord_t *rc, uint64_t applied, uint64_t durable)
{
    int64_t applied_t = repl_coord_term_at(rc, applied);
    int64_t durable_t = durable == applied ? applied_t : repl_coord_term_at(rc, durable);

    pthread_mutex_lock(&rc->mu);
    if (rc->self >= 0) {
        if (applied > rc->members[rc->self].applied) {
            rc->members[rc->self].applied = applied;
            rc->members[rc->self].applied_t = applied_t;
        }
        if (durable > rc->members[rc->self].durable) {
            rc->members[rc->self].durable = durable;
            rc->members[rc->self].durable_t = durable_t;
        }
        repl_coord_move_stable_locked(rc);
    }
    pthread_cond_broadcast(&rc->progress);
    pthread_mutex_unlock(&rc->mu);
}

void
repl_member_learn_locked(repl_member_state_t *m, uint64_t applied, int64_t applied_t,
                         uint64_t durable, int64_t durable_t)
{
    if (repl_optime_cmp(applied_t, applied, m->applied_t, m->applied) > 0) {
        m->applied = applied;
        m->applied_t = applied_t;
    }
    if (repl_optime_cmp(durable_t, durable, m->durable_t, m->durable) > 0) {
        m->durable = durable;
        m->durable_t = durable_t;
    }
}

void
repl_coord_update_member(repl_coord_t *rc, int idx, uint64_t applied, int64_t applied_t,
                         uint64_t durable, int64_t durable_t)
{
    pthread_mutex_lock(&rc->mu);
    if (rc->configured && idx >= 0 && idx < rc->cfg.n && idx != rc->self) {
        repl_member_learn_locked(&rc->members[idx], applied, applied_t, durable, durable_t);
        recompute_commit_point_locked(rc);
        pthread_cond_broadcast(&rc->progress);
    }
    pthread_mutex_unlock(&rc->mu);
}

void
repl_coord_learn_commit_point(repl_coord_t *rc, uint64_t ts)
{
    pthread_mutex_lock(&rc->mu);
    if (ts > rc->commit_point && atomic_load(&rc->state) != SHL_REPL_PRIMARY) {
        rc->commit_point = ts;
        pthread_cond_broadcast(&rc->progress);
    }
    repl_coord_learn_source_commit_point_locked(rc, ts);
    pthread_mutex_unlock(&rc->mu);
}

void
repl_coord_learn_source_commit_point_locked(repl_coord_t *rc, uint64_t ts)
{
    if (rc->branch_confirmed && ts > rc->source_commit_point &&
        atomic_load(&rc->state) != SHL_REPL_PRIMARY) {
        rc->source_commit_point = ts;
        repl_coord_move_stable_locked(rc);
    }
}

/* ------------------------------------------------------------------ configuration */

int
repl_coord_start_threads_locked(repl_coord_t *rc, shl_status_t *st)
{
    int ret = 0;

    if (!rc->heartbeat_started && rc->cfg.n > 1) {
        if (pthread_create(&rc->heartbeat_thread, NULL, repl_heartbeat_main, rc) != 0) {
            SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "cannot start the heartbeat thread: %s",
                     strerror(errno));
        }
        rc->heartbeat_started = true;
    }
    if (!rc->fetcher_started && atomic_load(&rc->state) != SHL_REPL_PRIMARY) {
        if (pthread_create(&rc->fetcher_thread, NULL, repl_fetcher_main, rc) != 0) {
            SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "cannot start the oplog fetcher: %s",
                     strerror(errno));
        }
        rc->fetcher_started = true;
    }
done:
    return ret;
}

/* MongoDB's electionId: an ObjectId made from the term (0x7fffffff, then the term). */
static void
election_id_for(int64_t term, bson_oid_t *oid)
{
    memset(oid->bytes, 0, sizeof(oid->bytes));
    oid->bytes[0] = 0x7f;
    oid->bytes[1] = 0xff;
    oid->bytes[2] = 0xff;
    oid->bytes[3] = 0xff;
    for (int i = 0; i < 8; i++) {
        oid->bytes[4 + i] = (uint8_t)((uint64_t)term >> (56 - 8 * i));
    }
}

/* Keep the stable timestamp at or below 'ts' (storage.h's pins keep it below pin). */
static void
pin_stable_locked(repl_coord_t *rc, uint64_t ts)
{
    uint64_t pin = ts + 1;

    if (pin == rc->stable_pin) {
        return;
    }
    shl_storage_pin_stable(rc->eng, pin);
    if (rc->stable_pin != 0) {
        shl_storage_unpin_stable(rc->eng, rc->stable_pin);
    }
    rc->stable_pin = pin;
}

/* Hold the stable timestamp where it is now (pinned there when nothing pins it yet). */
static void
hold_stable_locked(repl_coord_t *rc)
{
    if (rc->stable_pin == 0) {
        pin_stable_locked(rc, shl_storage_stable_ts(rc->eng));
    }
}

void
repl_coord_move_stable_locked(repl_coord_t *rc)
{
    uint64_t target;

    if (!rc->configured || rc->self < 0 || atomic_load(&rc->initial_sync)) {
        return;
    }
    if (atomic_load(&rc->state) == SHL_REPL_PRIMARY) {
        if (rc->cfg.n <= 1) {
            /* A set of one: its own durable point is the commit point. */
            if (rc->stable_pin != 0) {
                shl_storage_unpin_stable(rc->eng, rc->stable_pin);
                rc->stable_pin = 0;
            }
            return;
        }
        target = rc->commit_point;
    } else if (rc->branch_confirmed) {
        uint64_t cp = rc->source_commit_point, applied = rc->members[rc->self].applied;
        target = cp < applied ? cp : applied;
        if (rc->rollback_refetched_at != 0) {
            /* A checkpoint between the common point and the refetched versions would hold
             * the versions they replaced. */
            if (applied <= rc->rollback_refetched_at) {
                target = target < rc->rollback_common ? target : rc->rollback_common;
            } else {
                rc->rollback_refetched_at = 0;
            }
        }
    } else {
        return; /* our newest entries may be rolled back: stay */
    }
    pin_stable_locked(rc, target);
}

void
repl_coord_hold_stable_locked(repl_coord_t *rc)
{
    rc->branch_confirmed = false;
    rc->source_commit_point = 0;
    hold_stable_locked(rc);
}

void
repl_coord_confirm_branch(repl_coord_t *rc)
{
    pthread_mutex_lock(&rc->mu);
    rc->branch_confirmed = true;
    repl_coord_move_stable_locked(rc);
    pthread_mutex_unlock(&rc->mu);
}

void
repl_coord_become_primary_locked(repl_coord_t *rc)
{
    atomic_store(&rc->state, SHL_REPL_PRIMARY);
    rc->primary = rc->self;
    rc->stepped_down = false;
    rc->primary_since_us = shl_clock_mono_us();
    election_id_for(rc->term, &rc->election_id);
    rc->election_date_ms = shl_clock_wall_ms();
    if (rc->self >= 0) {
        rc->members[rc->self].state = SHL_REPL_PRIMARY;
    }
    /* Its stable timestamp follows the commit point from now on (at most where it is). */
    hold_stable_locked(rc);
    repl_coord_move_stable_locked(rc);
    pthread_cond_broadcast(&rc->progress);
}

void
repl_coord_set_state(repl_coord_t *rc, shl_repl_state_t state)
{
    pthread_mutex_lock(&rc->mu);
    if (atomic_load(&rc->state) != (int)state) {
        atomic_store(&rc->state, state);
        if (rc->self >= 0) {
            rc->members[rc->self].state = state;
        }
        pthread_cond_broadcast(&rc->progress);
        pthread_mutex_unlock(&rc->mu);
        shl_topology_change(rc->svc, false);
        return;
    }
    pthread_mutex_unlock(&rc->mu);
}

void
repl_coord_rolled_back(repl_coord_t *rc, uint64_t common, uint64_t refetched_at)
{
    pthread_mutex_lock(&rc->mu);
    rc->rollback_common = common;
    rc->rollback_refetched_at = refetched_at;
    if (rc->self >= 0) {
        rc->members[rc->self].applied = common;
        rc->members[rc->self].durable = common;
    }
    rc->stepped_down = false;
    pthread_mutex_unlock(&rc->mu);
    repl_coord_set_state(rc, SHL_REPL_RECOVERING);
}

void
repl_coord_pin_applied(repl_coord_t *rc, uint64_t applied)
{
    pthread_mutex_lock(&rc->mu);
    if (atomic_load(&rc->state) != SHL_REPL_PRIMARY) {
        pin_stable_locked(rc, applied);
    }
    pthread_mutex_unlock(&rc->mu);
}

static int newest_replicated(shl_storage_engine_t *eng, uint64_t *ts, shl_status_t *st);

static void
set_config_locked(repl_coord_t *rc, const repl_config_t *cfg, bool primary, uint64_t begin_ts)
{
    bson_destroy(&rc->cfg.doc);
    repl_config_copy(cfg, &rc->cfg);
    rc->configured = true;
    rc->self = repl_config_find(&rc->cfg, rc->svc->me);
    memset(rc->members, 0, sizeof(rc->members));
    rc->begin_ts = begin_ts;
    rc->term = rc->cfg.term > 0 ? rc->cfg.term : 1;
    if (rc->self < 0) {
        atomic_store(&rc->state, SHL_REPL_REMOVED);
        rc->primary = -1;
    } else if (primary) {
        atomic_store(&rc->state, SHL_REPL_PRIMARY);
        rc->primary = rc->self;
        rc->primary_since_us = shl_clock_mono_us();
        election_id_for(rc->term, &rc->election_id);
        rc->election_date_ms = shl_clock_wall_ms();
    } else {
        atomic_store(&rc->state, rc->cfg.members[rc->self].arbiter ? SHL_REPL_ARBITER
                                                                   : SHL_REPL_SECONDARY);
        rc->primary = -1;
        pin_stable_locked(rc, begin_ts > 0 ? begin_ts - 1 : 0);
    }
    rc->last_primary_seen_us = shl_clock_mono_us();
    if (rc->self >= 0) {
        rc->members[rc->self].state = (shl_repl_state_t)atomic_load(&rc->state);
        rc->members[rc->self].up = true;
        rc->members[rc->self].up_since_ms = rc->svc->start_wall_ms;
    }
    pthread_cond_broadcast(&rc->wake);
    pthread_cond_broadcast(&rc->progress);
}

int
repl_coord_install_config(repl_coord_t *rc, const repl_config_t *cfg, bool primary,
                          uint64_t begin_ts, shl_status_t *st)
{
    bson_t begin = BSON_INITIALIZER;
    int ret = 0;

    /* A joining member pins its stable timestamp before its own writes below can move it
     * past the set's first entry. */
    if (!primary) {
        pthread_mutex_lock(&rc->mu);
        pin_stable_locked(rc, begin_ts > 0 ? begin_ts - 1 : 0);
        pthread_mutex_unlock(&rc->mu);
    }
    /* Durable first: a restart finds the set it belongs to. */
    SHL_ERR(shl_local_doc_store(rc->eng, REPL_CONFIG_NS, &cfg->doc, st));
    BSON_APPEND_UTF8(&begin, "_id", "minvalid");
    BSON_APPEND_TIMESTAMP(&begin, "begin", SHL_TS_SECS(begin_ts), SHL_TS_INC(begin_ts));
    BSON_APPEND_BOOL(&begin, "initiator", primary);
    /* A member given the configuration by a heartbeat joins the set: it copies the set's
     * data first, and a restart before that finished starts the copy again (MongoDB's
     * initialSyncFlag). */
    BSON_APPEND_BOOL(&begin, "initialSync", !primary);
    SHL_ERR(shl_local_doc_store(rc->eng, REPL_BEGIN_NS, &begin, st));
    pthread_mutex_lock(&rc->mu);
    set_config_locked(rc, cfg, primary, begin_ts);
    rc->initiator = primary;
    /* A member with none of the set's entries copies the set's data first. */
    if (!primary && rc->self >= 0 && !rc->cfg.members[rc->self].arbiter) {
        rc->initial_sync = true;
        atomic_store(&rc->state, SHL_REPL_STARTUP2);
        rc->members[rc->self].state = SHL_REPL_STARTUP2;
    }
    ret = repl_coord_start_threads_locked(rc, st);
    pthread_mutex_unlock(&rc->mu);
    SHL_LOG_INFO(REPL, 2180001, "installed replica set configuration", "config",
                 BCON_DOCUMENT(&cfg->doc), "state",
                 BCON_UTF8(shl_repl_state_name((shl_repl_state_t)atomic_load(&rc->state))));
    shl_topology_change(rc->svc, false);
done:
    bson_destroy(&begin);
    return ret;
}

int
repl_coord_initial_sync_done(repl_coord_t *rc, shl_status_t *st)
{
    bson_t begin = BSON_INITIALIZER;
    uint64_t begin_ts;
    int ret;

    pthread_mutex_lock(&rc->mu);
    begin_ts = rc->begin_ts;
    pthread_mutex_unlock(&rc->mu);
    BSON_APPEND_UTF8(&begin, "_id", "minvalid");
    BSON_APPEND_TIMESTAMP(&begin, "begin", SHL_TS_SECS(begin_ts), SHL_TS_INC(begin_ts));
    BSON_APPEND_BOOL(&begin, "initiator", false);
    BSON_APPEND_BOOL(&begin, "initialSync", false);
    ret = shl_local_doc_store(rc->eng, REPL_BEGIN_NS, &begin, st);
    bson_destroy(&begin);
    return ret;
}

/* ------------------------------------------------------------------ hooks */

static bool
hook_is_primary(void *arg)
{
    repl_coord_t *rc = arg;

    return !rc->configured || atomic_load(&rc->state) == SHL_REPL_PRIMARY;
}

static uint64_t
hook_majority_ts(void *arg)
{
    repl_coord_t *rc = arg;
    uint64_t ts;

    pthread_mutex_lock(&rc->mu);
    if (!rc->configured) {
        ts = shl_storage_all_durable(rc->eng);
    } else {
        recompute_commit_point_locked(rc);
        ts = rc->commit_point;
        /* A secondary reads what it has: the commit point it learned, capped by its own
         * applied position. */
        if (rc->self >= 0 && atomic_load(&rc->state) != SHL_REPL_PRIMARY &&
            rc->members[rc->self].applied < ts) {
            ts = rc->members[rc->self].applied;
        }
    }
    pthread_mutex_unlock(&rc->mu);
    return ts;
}

/* MongoDB 5.0's implicit default write concern rule: {w: 1} when the set has arbiters and
 * its data-bearing voters are no more than the voting majority, else majority. */
static bool
hook_implicit_wc_majority(void *arg)
{
    repl_coord_t *rc = arg;
    int arbiters = 0, writable_voters = 0;
    bool majority = true;

    pthread_mutex_lock(&rc->mu);
    if (rc->configured) {
        for (int i = 0; i < rc->cfg.n; i++) {
            if (rc->cfg.members[i].arbiter) {
                arbiters++;
            } else if (rc->cfg.members[i].votes > 0) {
                writable_voters++;
            }
        }
        majority = arbiters == 0 || writable_voters > repl_config_majority(&rc->cfg);
    }
    pthread_mutex_unlock(&rc->mu);
    return majority;
}

static int
hook_wait_write_concern(void *arg, shl_op_ctx_t *op, const shl_write_concern_t *wc, uint64_t ts,
                        shl_status_t *st)
{
    repl_coord_t *rc = arg;
    int64_t deadline = wc->wtimeout_ms > 0 ? shl_clock_mono_us() + wc->wtimeout_ms * 1000 : 0;
    int data_bearing = 0, ret = 0;
    bool locked = false;

    if (!wc->w_majority && wc->w <= 1 && wc->w_tag[0] == '\0') {
        goto done;
    }
    pthread_mutex_lock(&rc->mu);
    locked = true;
    if (wc->w_tag[0] != '\0') {
        bool found = false, ok, satisfiable;
        bool all[REPL_MAX_MEMBERS];
        for (int i = 0; i < REPL_MAX_MEMBERS; i++) {
            all[i] = true;
        }
        if (rc->configured) {
            repl_config_tag_mode(&rc->cfg, wc->w_tag, all, &found, &ok, &satisfiable);
        }
        if (!found) {
            SHL_FAIL(st, SHL_CODE_UNKNOWN_REPL_WRITE_CONCERN,
                     "No write concern mode named '%s' found in replica set configuration",
                     wc->w_tag);
        }
        if (!satisfiable) {
            SHL_FAIL(st, SHL_CODE_UNSATISFIABLE_WRITE_CONCERN,
                     "Not enough nodes match write concern mode \"%s\"", wc->w_tag);
        }
    }
    if (!rc->configured) {
        /* A set of one: majority is this node, which has the write. */
        if (!wc->w_majority && wc->w > 1) {
            SHL_FAIL(st, SHL_CODE_UNSATISFIABLE_WRITE_CONCERN, "Not enough data-bearing nodes");
        }
        goto done;
    }
    for (int i = 0; i < rc->cfg.n; i++) {
        data_bearing += rc->cfg.members[i].arbiter ? 0 : 1;
    }
    if (!wc->w_majority && wc->w > data_bearing) {
        SHL_FAIL(st, SHL_CODE_UNSATISFIABLE_WRITE_CONCERN, "Not enough data-bearing nodes");
    }
    for (;;) {
        bool ok;
        struct timespec until;
        int64_t now = shl_clock_mono_us(), wait_us = 100000;

        if (atomic_load(&rc->state) != SHL_REPL_PRIMARY) {
            SHL_FAIL(st, SHL_CODE_PRIMARY_STEPPED_DOWN,
                     "Primary stepped down while waiting for replication");
        }
        recompute_commit_point_locked(rc);
        if (wc->w_majority) {
            ok = rc->commit_point >= ts;
        } else if (wc->w_tag[0] != '\0') {
            bool reached[REPL_MAX_MEMBERS], found, satisfiable;
            for (int i = 0; i < rc->cfg.n; i++) {
                reached[i] = !rc->cfg.members[i].arbiter && in_term_locked(rc, i, false) >= ts;
            }
            repl_config_tag_mode(&rc->cfg, wc->w_tag, reached, &found, &ok, &satisfiable);
        } else {
            uint64_t applied[REPL_MAX_MEMBERS];
            for (int i = 0; i < rc->cfg.n; i++) {
                applied[i] = in_term_locked(rc, i, false);
            }
            ok = repl_count_at(&rc->cfg, applied, ts) >= wc->w;
        }
        if (ok) {
            break;
        }
        if (deadline != 0 && now >= deadline) {
            bson_t extra = BSON_INITIALIZER;
            BSON_APPEND_BOOL(&extra, "wtimeout", true);
            shl_status_set(st, SHL_CODE_WRITE_CONCERN_TIMEOUT,
                           "waiting for replication timed out");
            shl_status_set_extra(st, &extra);
            bson_destroy(&extra);
            ret = st->code;
            goto done;
        }
        pthread_mutex_unlock(&rc->mu);
        locked = false;
        SHL_ERR(shl_op_check_interrupt(op, st));
        pthread_mutex_lock(&rc->mu);
        locked = true;
        if (deadline != 0 && deadline - now < wait_us) {
            wait_us = deadline - now;
        }
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)(wait_us % 1000000) * 1000;
        until.tv_sec += wait_us / 1000000 + until.tv_nsec / 1000000000;
        until.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&rc->progress, &rc->mu, &until);
    }
done:
    if (locked) {
        pthread_mutex_unlock(&rc->mu);
    }
    return ret;
}

/* Commands a secondary serves only with secondaryOk (MongoDB's kOptIn). */
static bool
opt_in_read(const char *name)
{
    static const char *const reads[] = {
        "find",      "aggregate",   "count",     "distinct", "listCollections", "listIndexes",
        "collStats", "dbStats",     "dataSize",  "explain",  "mapReduce",       "geoSearch",
        "dbHash",    "splitVector", "validate",  NULL};
    bool found = false;

    for (int i = 0; reads[i] != NULL && !found; i++) {
        found = strcmp(reads[i], name) == 0;
    }
    return found;
}

/* secondaryOk: an OP_MSG request whose $readPreference is anything but primary. */
static bool
secondary_ok(const shl_op_ctx_t *op)
{
    bson_iter_t it, sub;
    bool ok = false;

    if (op->body != NULL && bson_iter_init_find(&it, op->body, "$readPreference") &&
        BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub) &&
        bson_iter_find(&sub, "mode") && BSON_ITER_HOLDS_UTF8(&sub)) {
        ok = strcmp(bson_iter_utf8(&sub, NULL), "primary") != 0;
    }
    return ok;
}

static int
hook_admit(shl_op_ctx_t *op, const shl_command_t *cmd, shl_status_t *st)
{
    repl_coord_t *rc = repl_coord_get(op->svc);
    shl_repl_state_t state;
    int ret = 0;

    if (rc == NULL || !rc->configured) {
        goto done;
    }
    state = (shl_repl_state_t)atomic_load(&rc->state);
    if (state == SHL_REPL_PRIMARY) {
        goto done;
    }
    /* The local database is this node's own: writable and readable in any state. */
    if (strcmp(op->db, "local") == 0) {
        goto done;
    }
    if (cmd->flags & (SHL_CMD_NEEDS_PRIMARY | SHL_CMD_WRITE)) {
        SHL_FAIL(st, SHL_CODE_NOT_WRITABLE_PRIMARY, "not primary");
    }
    if (opt_in_read(cmd->name)) {
        if (state != SHL_REPL_SECONDARY) {
            SHL_FAIL(st, SHL_CODE_NOT_PRIMARY_OR_SECONDARY,
                     "node is not in primary or recovering state");
        }
        if (!secondary_ok(op)) {
            SHL_FAIL(st, SHL_CODE_NOT_PRIMARY_NO_SECONDARY_OK,
                     "not primary and secondaryOk=false");
        }
    }
done:
    return ret;
}

static void
append_host_list(bson_t *reply, const char *key, const repl_coord_t *rc, int kind)
{
    bson_t arr;
    char idx[16];
    int n = 0;

    for (int i = 0; i < rc->cfg.n; i++) {
        const repl_member_t *m = &rc->cfg.members[i];
        int k = m->arbiter ? 2 : (m->priority == 0 ? 1 : 0);
        if (m->hidden || k != kind) {
            continue;
        }
        if (n == 0) {
            BSON_APPEND_ARRAY_BEGIN(reply, key, &arr);
        }
        snprintf(idx, sizeof(idx), "%d", n++);
        BSON_APPEND_UTF8(&arr, idx, m->host);
    }
    if (n > 0) {
        bson_append_array_end(reply, &arr);
    }
}

static void
hook_append_set_hello(shl_op_ctx_t *op, bson_t *reply, bool legacy_name)
{
    shl_service_ctx_t *svc = op->svc;
    repl_coord_t *rc = repl_coord_get(svc);
    bool shutting = atomic_load(&svc->shutting_down);

    pthread_mutex_lock(&rc->mu);
    if (!rc->configured) {
        bson_t hosts;
        BSON_APPEND_BOOL(reply, legacy_name ? "ismaster" : "isWritablePrimary", !shutting);
        BSON_APPEND_ARRAY_BEGIN(reply, "hosts", &hosts);
        BSON_APPEND_UTF8(&hosts, "0", svc->me);
        bson_append_array_end(reply, &hosts);
        BSON_APPEND_UTF8(reply, "setName", svc->set_name);
        BSON_APPEND_INT32(reply, "setVersion", 1);
        BSON_APPEND_BOOL(reply, "secondary", false);
        BSON_APPEND_UTF8(reply, "primary", svc->me);
        BSON_APPEND_UTF8(reply, "me", svc->me);
    } else {
        shl_repl_state_t state = (shl_repl_state_t)atomic_load(&rc->state);
        const repl_member_t *self = rc->self >= 0 ? &rc->cfg.members[rc->self] : NULL;
        BSON_APPEND_BOOL(reply, legacy_name ? "ismaster" : "isWritablePrimary",
                         state == SHL_REPL_PRIMARY && !shutting);
        append_host_list(reply, "hosts", rc, 0);
        append_host_list(reply, "passives", rc, 1);
        append_host_list(reply, "arbiters", rc, 2);
        BSON_APPEND_UTF8(reply, "setName", rc->cfg.set_name);
        BSON_APPEND_INT32(reply, "setVersion", (int32_t)rc->cfg.version);
        BSON_APPEND_BOOL(reply, "secondary", state == SHL_REPL_SECONDARY);
        if (rc->primary >= 0) {
            BSON_APPEND_UTF8(reply, "primary", rc->cfg.members[rc->primary].host);
        }
        if (self != NULL && self->arbiter) {
            BSON_APPEND_BOOL(reply, "arbiterOnly", true);
        }
        if (self != NULL && self->priority == 0 && !self->arbiter) {
            BSON_APPEND_BOOL(reply, "passive", true);
        }
        if (self != NULL && self->hidden) {
            BSON_APPEND_BOOL(reply, "hidden", true);
        }
        if (self != NULL && self->secondary_delay_secs > 0) {
            BSON_APPEND_INT64(reply, "secondaryDelaySecs", self->secondary_delay_secs);
        }
        BSON_APPEND_UTF8(reply, "me", self != NULL ? self->host : svc->me);
        if (state == SHL_REPL_PRIMARY) {
            BSON_APPEND_OID(reply, "electionId", &rc->election_id);
        }
    }
    pthread_mutex_unlock(&rc->mu);
}

/* ------------------------------------------------------------------ start-up, shutdown */

static void (*node_shutdown)(shl_service_ctx_t *svc);

static void
repl_shutdown(shl_service_ctx_t *svc)
{
    repl_coord_t *rc = repl_coord_get(svc);

    repl_stop_listeners(rc); /* normally stopped already by the layer above */
    if (rc != NULL) {
        pthread_mutex_lock(&rc->mu);
        rc->stop = true;
        pthread_cond_broadcast(&rc->wake);
        pthread_cond_broadcast(&rc->progress);
        pthread_mutex_unlock(&rc->mu);
        if (rc->heartbeat_started) {
            pthread_join(rc->heartbeat_thread, NULL);
        }
        if (rc->fetcher_started) {
            pthread_join(rc->fetcher_thread, NULL);
        }
        shl_conn_pool_destroy(rc->pool);
        repl_config_cleanup(&rc->cfg);
        bson_destroy(&rc->cfg.doc);
        pthread_mutex_destroy(&rc->mu);
        pthread_mutex_destroy(&rc->install_mu);
        pthread_cond_destroy(&rc->progress);
        pthread_cond_destroy(&rc->wake);
        svc->repl_state = NULL;
        bson_free(rc);
    }
    if (node_shutdown != NULL) {
        node_shutdown(svc);
    }
}

/* The newest entry of this node's oplog that came from the set (not a local.* write). */
static int
newest_replicated(shl_storage_engine_t *eng, uint64_t *ts, shl_status_t *st)
{
    shl_storage_txn_t *txn = NULL;
    shl_record_cursor_t *cur = NULL;
    shl_collection_t *oplog = shl_oplog_collection(eng);
    int ret = 0;

    *ts = 0;
    SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
    SHL_ERR(shl_record_cursor_open(txn, oplog, false, &cur, st));
    for (;;) {
        int64_t rid = 0;
        bson_t doc;
        bool eof = true;
        bson_iter_t it;
        SHL_ERR(shl_record_cursor_next(cur, &rid, &doc, &eof, st));
        if (eof) {
            break;
        }
        if (bson_iter_init_find(&it, &doc, "ns") && BSON_ITER_HOLDS_UTF8(&it) &&
            strncmp(bson_iter_utf8(&it, NULL), "local.", 6) == 0) {
            continue;
        }
        *ts = (uint64_t)rid;
        break;
    }
done:
    shl_record_cursor_close(cur);
    shl_storage_txn_abort(txn);
    shl_collection_release(oplog);
    return ret;
}

uint64_t
repl_coord_last_replicated(repl_coord_t *rc)
{
    uint64_t ts = 0;
    shl_status_t st = SHL_STATUS_INIT;

    if (newest_replicated(rc->eng, &ts, &st) != 0) {
        ts = 0;
    }
    return ts;
}

/* The dispatcher's admission and hello hooks and db's (write concern, majority reads, "am I
 * primary" for the TTL monitor, session reaps and the session cache): in place before the
 * node starts any thread or runs any command of its own. */
static void
install_hooks(shl_service_ctx_t *svc, repl_coord_t *rc)
{
    shl_db_repl_hooks_t hooks = {0};

    svc->hooks.admit = hook_admit;
    svc->hooks.append_set_hello = hook_append_set_hello;
    hooks.arg = rc;
    hooks.wait_write_concern = hook_wait_write_concern;
    hooks.majority_ts = hook_majority_ts;
    hooks.implicit_wc_majority = hook_implicit_wc_majority;
    hooks.is_primary = hook_is_primary;
    hooks.add_listener = repl_add_listener;
    hooks.stop_listeners = repl_stop_listeners;
    shl_db_repl_hooks_install(svc, &hooks);
}

/* Storage is open and nothing of the node runs yet: read the configuration, and as a
 * secondary pin the stable timestamp below the entries still to apply before any write can
 * move it (docs/design/replication.md "Timestamps on a secondary"). */
static int
repl_storage_opened(shl_service_ctx_t *svc, shl_storage_engine_t *eng, shl_status_t *st)
{
    repl_coord_t *rc;
    bson_t doc, begin;
    bool found = false, found_begin = false;
    int ret = 0;

    bson_init(&doc);
    bson_init(&begin);
    rc = bson_malloc0(sizeof(*rc));
    rc->svc = svc;
    rc->eng = eng;
    rc->pool = shl_conn_pool_new(NULL);
    rc->self = -1;
    rc->primary = -1;
    rc->catch_up_from = -1;
    rc->term = 1;
    bson_init(&rc->cfg.doc);
    pthread_mutex_init(&rc->mu, NULL);
    pthread_mutex_init(&rc->install_mu, NULL);
    pthread_cond_init(&rc->progress, NULL);
    pthread_cond_init(&rc->wake, NULL);
    atomic_store(&rc->state, SHL_REPL_PRIMARY); /* a set of one, as before */
    svc->repl_state = rc;
    install_hooks(svc, rc);

    bson_destroy(&doc);
    SHL_ERR(shl_local_doc_load(rc->eng, REPL_CONFIG_NS, svc->set_name, &doc, &found, st));
    if (found) {
        repl_config_t cfg;
        uint64_t begin_ts = 0, last = 0;
        bool primary, initiator = false, initial_sync = false;
        bson_destroy(&begin);
        SHL_ERR(shl_local_doc_load(rc->eng, REPL_BEGIN_NS, "minvalid", &begin, &found_begin, st));
        if (found_begin) {
            bson_iter_t bit;
            begin_ts = repl_optime_ts(&begin, "begin");
            initiator = bson_iter_init_find(&bit, &begin, "initiator") && bson_iter_as_bool(&bit);
            initial_sync =
                bson_iter_init_find(&bit, &begin, "initialSync") && bson_iter_as_bool(&bit);
        }
        ret = repl_config_parse(&doc, false, &cfg, st);
        if (ret != 0) {
            repl_config_cleanup(&cfg);
            bson_destroy(&cfg.doc);
            goto done;
        }
        SHL_ERR(newest_replicated(rc->eng, &last, st));
        /* Every member of a multi-member set comes back as a secondary; an election (after
         * electionTimeoutMillis without a primary) makes one of them primary. */
        primary = cfg.n == 1;
        (void)initiator;
        pthread_mutex_lock(&rc->mu);
        set_config_locked(rc, &cfg, primary, begin_ts);
        rc->initiator = initiator;
        repl_election_load(rc);
        if (!primary && rc->self >= 0 && initial_sync && !rc->cfg.members[rc->self].arbiter) {
            /* Stopped before an initial sync finished: start it again. */
            rc->initial_sync = true;
            atomic_store(&rc->state, SHL_REPL_STARTUP2);
            rc->members[rc->self].state = SHL_REPL_STARTUP2;
        }
        if (!primary && rc->self >= 0) {
            uint64_t applied = last >= begin_ts ? last : begin_ts - 1;
            /* Recovery left the stable timestamp at the last stable checkpoint's; what it
             * replayed above may be rolled back (a former primary's writes): it stays there
             * until a sync source confirms our newest entry (repl_coord_confirm_branch). */
            pin_stable_locked(rc, shl_storage_stable_ts(rc->eng));
            rc->members[rc->self].applied = applied;
            rc->members[rc->self].durable = applied;
        }
        pthread_mutex_unlock(&rc->mu);
        repl_config_cleanup(&cfg);
        bson_destroy(&cfg.doc);
        SHL_LOG_INFO(REPL, 2180002, "loaded replica set configuration", "state",
                     BCON_UTF8(shl_repl_state_name((shl_repl_state_t)atomic_load(&rc->state))));
    }
done:
    bson_destroy(&doc);
    bson_destroy(&begin);
    return ret;
}

void
shl_repl_preinit(shl_service_ctx_t *svc)
{
    if (svc->set_name[0] != '\0') {
        svc->hooks.storage_opened = repl_storage_opened;
    }
}

int
shl_repl_init(shl_service_ctx_t *svc, shl_command_registry_t *reg, shl_status_t *st)
{
    repl_coord_t *rc = repl_coord_get(svc);
    int ret = 0;

    if (rc == NULL) {
        goto done;
    }
    repl_register_commands(reg);
    node_shutdown = svc->hooks.shutdown;
    svc->hooks.shutdown = repl_shutdown;
    pthread_mutex_lock(&rc->mu);
    if (rc->configured) {
        ret = repl_coord_start_threads_locked(rc, st);
    }
    pthread_mutex_unlock(&rc->mu);
done:
    return ret;
}
