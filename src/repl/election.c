/*
 * election.c -- protocol version 1 elections, the first cut: a secondary that has heard from
 * no primary for electionTimeoutMillis (plus a random offset) stands in a new term, votes for
 * itself and asks the others with replSetRequestVotes; voters grant one vote per term to a
 * candidate whose last applied optime is not behind theirs (the log-up-to-date check). The
 * winner becomes primary; a primary that learns of a newer term steps down.
 * docs/design/replication.md "Elections".
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "bson/bson_iter.h"
#include "net/topology.h"
#include "repl/repl_private.h"
#include "storage/local_doc.h"
#include "storage/write.h"

#define ELECTION_NS "local.replset.election"

/* Shale's own: storing a vote fails (the vote is then not given). */
SHL_FAILPOINT_DEFINE(failVoteStore)

/* {_id: "election", term, votedFor, votedTerm}: survives restarts, so no vote is given twice
 * in one term. False (logged) when it could not be stored: the vote is then not given (as
 * MongoDB's voter and candidate). Called without mu. */
static bool
store_vote(repl_coord_t *rc, int64_t term, int32_t voted_for, int64_t voted_term)
{
    bson_t doc = BSON_INITIALIZER;
    shl_status_t st = SHL_STATUS_INIT;
    bool stored = true;

    BSON_APPEND_UTF8(&doc, "_id", "election");
    BSON_APPEND_INT64(&doc, "term", term);
    BSON_APPEND_INT32(&doc, "votedFor", voted_for);
    BSON_APPEND_INT64(&doc, "votedTerm", voted_term);
    if (SHL_FAILPOINT_FIRES(failVoteStore)) {
        shl_status_set(&st, SHL_CODE_INTERNAL_ERROR, "failVoteStore fail point");
        stored = false;
    } else if (shl_local_doc_store(rc->eng, ELECTION_NS, &doc, &st) != 0) {
        stored = false;
    }
    if (!stored) {
        SHL_LOG_WARNING(REPL, 2180020, "could not store the last vote", "error",
                        BCON_UTF8(st.reason));
    }
    bson_destroy(&doc);
    return stored;
}

void
repl_election_load(repl_coord_t *rc)
{
    bson_t doc;
    bool found = false;
    shl_status_t st = SHL_STATUS_INIT;
    bson_iter_t it;

    if (shl_local_doc_load(rc->eng, ELECTION_NS, "election", &doc, &found, &st) == 0 && found) {
        if (bson_iter_init_find(&it, &doc, "term") && bson_iter_as_int64(&it) > rc->term) {
            rc->term = bson_iter_as_int64(&it);
        }
        if (bson_iter_init_find(&it, &doc, "votedTerm")) {
            rc->voted_term = bson_iter_as_int64(&it);
        }
        if (bson_iter_init_find(&it, &doc, "votedFor")) {
            rc->voted_for = (int32_t)bson_iter_as_int64(&it);
        }
    }
    bson_destroy(&doc);
}

static void step_down_locked(repl_coord_t *rc);
static bool run_election(repl_coord_t *rc, bool skip_dry_run);

/* Called with mu held: a newer term seen anywhere. A primary steps down. */
void
repl_election_see_term_locked(repl_coord_t *rc, int64_t term)
{
    if (term <= rc->term) {
        return;
    }
    rc->term = term;
    /* Someone is standing or has won in that term: give them an election timeout before
     * standing ourselves (two timers expiring together would otherwise duel). */
    rc->last_primary_seen_us = shl_clock_mono_us();
    if (atomic_load(&rc->state) == SHL_REPL_PRIMARY && rc->cfg.n > 1) {
        SHL_LOG_INFO(REPL, 2180021, "stepping down: a newer term exists", "term",
                     BCON_INT64(term));
        step_down_locked(rc);
    }
}

/* Called with mu held by a primary: become a SECONDARY that fetches (waiting writers get
 * PrimarySteppedDown as their condition moves). */
static void
step_down_locked(repl_coord_t *rc)
{
    {
        uint64_t applied = shl_storage_all_durable(rc->eng);
        atomic_store(&rc->state, SHL_REPL_SECONDARY);
        rc->primary = -1;
        if (rc->self >= 0) {
            rc->members[rc->self].state = SHL_REPL_SECONDARY;
            rc->members[rc->self].applied = applied;
            rc->members[rc->self].durable = applied;
        }
        repl_coord_hold_stable_locked(rc);
        rc->stepped_down = true;
        rc->last_primary_seen_us = shl_clock_mono_us();
        pthread_cond_broadcast(&rc->progress);
        pthread_cond_broadcast(&rc->wake);
    }
}

/* ------------------------------------------------------------------ the voter */

/* Called with mu held: the position this member compares in an election (as voter or
 * candidate). A primary: the newest non-local entry of its oplog ('last_replicated', read by
 * the caller without mu). Anyone else: what it applied from the set, but never past that
 * entry -- a stepped-down primary's applied position included its own local.* writes (it then
 * refused candidates with every replicated entry), and a member's own non-local entries (a
 * start-up write) are not the set's either, so neither alone will do. */
static uint64_t
voter_position(const repl_coord_t *rc, uint64_t last_replicated)
{
    uint64_t applied = rc->self >= 0 ? rc->members[rc->self].applied : 0;
    uint64_t pos = applied;

    if (rc->self < 0 || atomic_load(&rc->state) == SHL_REPL_PRIMARY) {
        pos = last_replicated;
    } else if (last_replicated != 0 && last_replicated < applied) {
        pos = last_replicated;
    }
    return pos;
}

int
repl_election_vote(repl_coord_t *rc, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_iter_t it;
    int64_t term = 0, store_term = 0, reply_term;
    int32_t candidate = -1;
    uint64_t their = repl_optime_ts(cmd, "lastAppliedOpTime"), mine, last_replicated, written;
    int64_t their_t = repl_optime_term(cmd, "lastAppliedOpTime"), mine_t;
    const char *reason = "";
    bool granted = false, dry = false, store = false;
    int ret = 0;

    if (bson_iter_init_find(&it, cmd, "term")) {
        term = bson_iter_as_int64(&it);
    }
    if (bson_iter_init_find(&it, cmd, "candidateIndex")) {
        candidate = (int32_t)bson_iter_as_int64(&it);
    }
    if (bson_iter_init_find(&it, cmd, "dryRun")) {
        dry = bson_iter_as_bool(&it);
    }
    last_replicated = repl_coord_last_replicated(rc);
    /* Our position below is at most last_replicated; its term is read now, without mu. */
    written = shl_storage_all_durable(rc->eng);
    if (shl_storage_stable_ts(rc->eng) > written) {
        written = shl_storage_stable_ts(rc->eng);
    }
    pthread_mutex_lock(&rc->mu);
    if (!rc->configured) {
        pthread_mutex_unlock(&rc->mu);
        SHL_FAIL(st, SHL_CODE_NOT_YET_INITIALIZED, "no replset config has been received");
    }
    if (!dry) {
        repl_election_see_term_locked(rc, term);
    }
    /* The newest of the set's entries in our oplog (MongoDB compares the oplog's last
     * applied optime): our own local.* writes never count. A stepped-down primary's applied
     * position included them, so it refused candidates that had every replicated entry. */
    mine = voter_position(rc, last_replicated);
    pthread_mutex_unlock(&rc->mu);
    mine_t = repl_coord_term_at(rc, mine); /* storage: not under mu */
    pthread_mutex_lock(&rc->mu);
    if (term < rc->term) {
        reason = "candidate's term is lower than mine";
    } else if (candidate < 0 || candidate >= rc->cfg.n) {
        reason = "candidate is not in my configuration";
    } else if (!dry && rc->voted_term == term && rc->voted_for != candidate) {
        reason = "already voted for another candidate in this term";
    } else if (repl_optime_cmp(their_t, their, mine_t, mine) < 0) {
        /* Raft's log-up-to-date check on optimes (term, timestamp): a candidate whose newest
         * entry is of an older term is staler whatever its timestamp. */
        reason = "candidate's data is staler than mine";
    } else if (dry && atomic_load(&rc->state) == SHL_REPL_PRIMARY && rc->self >= 0 &&
               rc->cfg.members[candidate].priority <= rc->cfg.members[rc->self].priority) {
        /* A live primary lets only a higher-priority member take over. */
        reason = "I am primary";
    } else {
        granted = true;
        if (!dry) {
            rc->voted_term = term;
            rc->voted_for = candidate;
            rc->last_primary_seen_us = shl_clock_mono_us(); /* give the candidate time */
            store = true;
            store_term = rc->term;
        }
    }
    reply_term = rc->term;
    pthread_mutex_unlock(&rc->mu);
    /* The vote counts only once it is stored (its record stays in memory either way, so no
     * other candidate gets this term's vote). */
    if (store && !store_vote(rc, store_term, candidate, term)) {
        granted = false;
        reason = "failed to store the vote";
    }
    BSON_APPEND_INT64(reply, "term", reply_term);
    BSON_APPEND_BOOL(reply, "voteGranted", granted);
    BSON_APPEND_UTF8(reply, "reason", reason);
    /* Our newest write of any kind (local.* included; not MongoDB's): a winner moves its
     * clock past it, so that everything this member may have to roll back, and its stable
     * timestamp, stay below the new primary's entries (rollback.c applies them above). */
    BSON_APPEND_TIMESTAMP(reply, "lastWritten", SHL_TS_SECS(written), SHL_TS_INC(written));
done:
    return ret;
}

/* ------------------------------------------------------------------ the candidate */

static int
new_primary_entry(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    bson_t o = BSON_INITIALIZER;
    int ret;

    BSON_APPEND_UTF8(&o, "msg", "new primary");
    ret = shl_oplog_append(txn, 'n', "", NULL, &o, NULL, NULL, arg, st);
    bson_destroy(&o);
    return ret;
}

/* Ask every other voter; true with a majority of the votes (ours included). *written: the
 * newest write any voter reported (lastWritten). */
static bool
request_votes(repl_coord_t *rc, int64_t term, bool dry, uint64_t applied, uint64_t *written)
{
    int n, self, need, votes = 1;
    int64_t version, seen = 0, applied_t = repl_coord_term_at(rc, applied);
    char hosts[REPL_MAX_MEMBERS][256];
    int32_t member_votes[REPL_MAX_MEMBERS];
    char set[128];

    pthread_mutex_lock(&rc->mu);
    n = rc->cfg.n;
    self = rc->self;
    need = repl_config_majority(&rc->cfg);
    version = rc->cfg.version;
    memcpy(set, rc->cfg.set_name, sizeof(set));
    for (int i = 0; i < n; i++) {
        memcpy(hosts[i], rc->cfg.members[i].host, sizeof(hosts[i]));
        member_votes[i] = rc->cfg.members[i].votes;
    }
    pthread_mutex_unlock(&rc->mu);
    for (int i = 0; i < n && votes < need; i++) {
        bson_t req = BSON_INITIALIZER, reply;
        shl_status_t st = SHL_STATUS_INIT;
        bson_iter_t it;

        if (i == self || member_votes[i] == 0) {
            continue;
        }
        BSON_APPEND_INT32(&req, "replSetRequestVotes", 1);
        BSON_APPEND_UTF8(&req, "setName", set);
        BSON_APPEND_BOOL(&req, "dryRun", dry);
        BSON_APPEND_INT64(&req, "term", term);
        BSON_APPEND_INT32(&req, "candidateIndex", self);
        BSON_APPEND_INT64(&req, "configVersion", version);
        repl_append_optime(&req, "lastAppliedOpTime", applied, applied_t);
        if (shl_client_run(rc->pool, hosts[i], "admin", &req, 2000, &reply, &st) == 0) {
            if (bson_iter_init_find(&it, &reply, "voteGranted") && bson_iter_as_bool(&it)) {
                votes++;
            }
            if (repl_optime_ts(&reply, "lastWritten") > *written) {
                *written = repl_optime_ts(&reply, "lastWritten");
            }
            if (bson_iter_init_find(&it, &reply, "term") && bson_iter_as_int64(&it) > seen) {
                seen = bson_iter_as_int64(&it);
            }
        }
        bson_destroy(&req);
        bson_destroy(&reply);
    }
    if (seen > term || (dry && seen >= term)) {
        pthread_mutex_lock(&rc->mu);
        repl_election_see_term_locked(rc, seen);
        pthread_mutex_unlock(&rc->mu);
        votes = 0;
    }
    return votes >= need;
}

/* Called with mu held by a primary: whether it heard from a majority of the voters (itself
 * included) within the election timeout. A primary that did not steps down, as MongoDB's does,
 * so a partitioned minority stops taking writes. */
static bool
sees_majority_locked(const repl_coord_t *rc, int64_t now)
{
    int seen = 0;

    for (int i = 0; i < rc->cfg.n; i++) {
        if (rc->cfg.members[i].votes == 0) {
            continue;
        }
        if (i == rc->self ||
            (rc->members[i].up &&
             now - rc->members[i].last_ok_us < rc->cfg.election_timeout_ms * 1000)) {
            seen++;
        }
    }
    return seen >= repl_config_majority(&rc->cfg);
}

/* Called with mu held by a secondary that knows the primary: whether it should take over by
 * priority (a higher priority than the primary's, caught up with it, for half an election
 * timeout: MongoDB's priority takeover). */
static bool
takeover_due_locked(repl_coord_t *rc, int64_t now)
{
    int p = rc->primary;
    /* Caught up: everything of the set's the primary had at its last heartbeat reply. */
    bool due = p >= 0 && p != rc->self &&
               rc->cfg.members[rc->self].priority > rc->cfg.members[p].priority &&
               rc->members[p].last_replicated != 0 &&
               rc->members[rc->self].applied >= rc->members[p].last_replicated;

    if (!due) {
        rc->takeover_since_us = 0;
        return false;
    }
    if (rc->takeover_since_us == 0) {
        rc->takeover_since_us = now;
    }
    return now - rc->takeover_since_us >= rc->cfg.election_timeout_ms * 1000 / 2;
}

void
repl_election_maybe_run(repl_coord_t *rc)
{
    int64_t now = shl_clock_mono_us();
    bool stand = false;

    pthread_mutex_lock(&rc->mu);
    if (rc->configured && rc->self >= 0 && rc->cfg.n > 1 &&
        atomic_load(&rc->state) == SHL_REPL_PRIMARY && !sees_majority_locked(rc, now) &&
        now - rc->primary_since_us >= rc->cfg.election_timeout_ms * 1000) {
        SHL_LOG_INFO(REPL, 2180026, "stepping down: a majority of the set is unreachable");
        step_down_locked(rc);
        pthread_mutex_unlock(&rc->mu);
        shl_topology_change(rc->svc, false);
        return;
    }
    if (rc->configured && rc->self >= 0 && rc->cfg.n > 1 &&
        atomic_load(&rc->state) == SHL_REPL_SECONDARY &&
        rc->cfg.members[rc->self].priority > 0 && rc->cfg.members[rc->self].votes > 0 &&
        now >= rc->freeze_until_us) {
        stand = rc->primary < 0
                    ? now - rc->last_primary_seen_us >=
                          (rc->cfg.election_timeout_ms + rc->election_offset_ms) * 1000
                    : takeover_due_locked(rc, now);
    }
    pthread_mutex_unlock(&rc->mu);
    if (stand) {
        (void)run_election(rc, false);
    }
}

int
repl_election_step_up(repl_coord_t *rc, shl_status_t *st)
{
    int ret = 0;

    pthread_mutex_lock(&rc->mu);
    if (atomic_load(&rc->state) != SHL_REPL_SECONDARY || rc->self < 0 ||
        rc->cfg.members[rc->self].priority <= 0 || rc->cfg.members[rc->self].votes <= 0) {
        shl_repl_state_t state = (shl_repl_state_t)atomic_load(&rc->state);
        pthread_mutex_unlock(&rc->mu);
        SHL_FAIL(st, SHL_CODE_COMMAND_FAILED, "Election failed: this member cannot stand (%s)",
                 shl_repl_state_name(state));
    }
    rc->freeze_until_us = 0;
    pthread_mutex_unlock(&rc->mu);
    if (!run_election(rc, true)) {
        SHL_FAIL(st, SHL_CODE_COMMAND_FAILED, "Election failed.");
    }
done:
    return ret;
}

/* Stand in term + 1: MongoDB's dry run (skipped by replSetStepUp), the vote stored durably,
 * every voter asked; true when this node won and is primary. */
static bool
run_election(repl_coord_t *rc, bool skip_dry_run)
{
    int64_t term;
    uint64_t applied, begin = 0, last_replicated, written = 0;
    shl_status_t st = SHL_STATUS_INIT;
    bool stands;

    last_replicated = repl_coord_last_replicated(rc);
    pthread_mutex_lock(&rc->mu);
    term = rc->term + 1;
    applied = voter_position(rc, last_replicated);
    pthread_mutex_unlock(&rc->mu);
    /* MongoDB's dry run first: a candidate that could not win does not disturb the term. */
    if (!skip_dry_run && !request_votes(rc, term, true, applied, &written)) {
        pthread_mutex_lock(&rc->mu);
        rc->last_primary_seen_us = shl_clock_mono_us();
        rc->election_offset_ms = rand() % (rc->cfg.election_timeout_ms / 7 + 1);
        rc->takeover_since_us = 0;
        pthread_mutex_unlock(&rc->mu);
        return false;
    }
    pthread_mutex_lock(&rc->mu);
    if (rc->term >= term || rc->voted_term >= term) {
        pthread_mutex_unlock(&rc->mu);
        return false;
    }
    rc->term = term;
    rc->voted_term = term;
    rc->voted_for = rc->self;
    pthread_mutex_unlock(&rc->mu);
    /* A candidate whose own vote is not stored does not stand (it could vote again in this
     * term after a restart). */
    stands = store_vote(rc, term, rc->self, term);
    if (stands) {
        SHL_LOG_INFO(REPL, 2180022, "standing for election", "term", BCON_INT64(term));
    }
    if (!stands || !request_votes(rc, term, false, applied, &written)) {
        pthread_mutex_lock(&rc->mu);
        rc->last_primary_seen_us = shl_clock_mono_us();
        rc->election_offset_ms = rand() % (rc->cfg.election_timeout_ms / 7 + 1);
        rc->takeover_since_us = 0;
        pthread_mutex_unlock(&rc->mu);
        return false;
    }
    /* Won the votes: first fetch what a member that is ahead has (catch_up.c). */
    if (!repl_catch_up(rc, term)) {
        return false;
    }
    applied = voter_position(rc, repl_coord_last_replicated(rc));
    pthread_mutex_lock(&rc->mu);
    if (rc->term != term || atomic_load(&rc->state) != SHL_REPL_SECONDARY) {
        pthread_mutex_unlock(&rc->mu);
        return false;
    }
    /* Won. Writes from now on carry the new term, above everything applied -- and above
     * anything a former primary may have written since its last heartbeat reply: its stable
     * timestamp follows its own writes, and it can apply only entries above it (rollback.c). */
    shl_storage_set_term(rc->eng, term);
    shl_storage_clock_advance(rc->eng, applied);
    shl_storage_clock_advance(rc->eng, written);
    {
        uint64_t heard = 0;
        for (int i = 0; i < rc->cfg.n; i++) {
            heard = rc->members[i].applied > heard ? rc->members[i].applied : heard;
        }
        if (heard != 0) {
            uint64_t margin = (uint64_t)(rc->cfg.heartbeat_interval_ms / 1000 + 2);
            shl_storage_clock_advance(rc->eng, SHL_TS_MAKE(SHL_TS_SECS(heard) + margin, 0));
        }
    }
    repl_coord_become_primary_locked(rc);
    pthread_mutex_unlock(&rc->mu);
    SHL_LOG_INFO(REPL, 2180023, "election won", "term", BCON_INT64(term));
    if (shl_storage_write_retry(rc->eng, new_primary_entry, &begin, NULL, &st) != 0) {
        SHL_LOG_WARNING(REPL, 2180024, "could not write the new primary entry", "error",
                        BCON_UTF8(st.reason));
    }
    shl_topology_change(rc->svc, false);
    return true;
}

/* ------------------------------------------------------------------ replSetStepDown */

int
repl_election_step_down(repl_coord_t *rc, shl_op_ctx_t *op, const bson_t *cmd, shl_status_t *st)
{
    bson_iter_t it;
    int64_t secs = 60, catch_up = 10, deadline;
    bool force = false, locked = false;
    int ret = 0;

    bson_iter_init(&it, cmd);
    if (bson_iter_next(&it) && (BSON_ITER_HOLDS_NUMBER(&it))) {
        secs = bson_iter_as_int64(&it);
    }
    if (bson_iter_init_find(&it, cmd, "secondaryCatchUpPeriodSecs")) {
        catch_up = bson_iter_as_int64(&it);
    }
    if (bson_iter_init_find(&it, cmd, "force")) {
        force = bson_iter_as_bool(&it);
    }
    if (secs <= 0 || catch_up < 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "stepdown and catch-up periods must be positive");
    }
    if (catch_up > secs) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "stepdown period must be longer than secondaryCatchUpPeriodSecs");
    }
    deadline = shl_clock_mono_us() + catch_up * 1000000;
    pthread_mutex_lock(&rc->mu);
    locked = true;
    if (!rc->configured || atomic_load(&rc->state) != SHL_REPL_PRIMARY) {
        SHL_FAIL(st, SHL_CODE_NOT_WRITABLE_PRIMARY, "not primary so can't step down");
    }
    /* Wait for an electable secondary to have everything we wrote (unless forced). */
    for (;;) {
        uint64_t top = shl_storage_all_durable(rc->eng);
        bool caught = force || rc->cfg.n == 1;
        struct timespec until;
        for (int i = 0; i < rc->cfg.n && !caught; i++) {
            const repl_member_t *m = &rc->cfg.members[i];
            caught = i != rc->self && rc->members[i].up && m->priority > 0 && m->votes > 0 &&
                     repl_optime_cmp(rc->members[i].applied_t, rc->members[i].applied,
                                     rc->term, top) >= 0;
        }
        if (caught) {
            break;
        }
        if (shl_clock_mono_us() >= deadline) {
            SHL_FAIL(st, SHL_CODE_EXCEEDED_TIME_LIMIT,
                     "No electable secondaries caught up as of the step down deadline");
        }
        pthread_mutex_unlock(&rc->mu);
        locked = false;
        SHL_ERR(shl_op_check_interrupt(op, st));
        pthread_mutex_lock(&rc->mu);
        locked = true;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&rc->progress, &rc->mu, &until);
    }
    if (atomic_load(&rc->state) == SHL_REPL_PRIMARY) {
        uint64_t applied = shl_storage_all_durable(rc->eng);
        atomic_store(&rc->state, SHL_REPL_SECONDARY);
        rc->primary = -1;
        rc->stepped_down = true;
        if (rc->self >= 0) {
            rc->members[rc->self].state = SHL_REPL_SECONDARY;
            rc->members[rc->self].applied = applied;
            rc->members[rc->self].durable = applied;
        }
        repl_coord_hold_stable_locked(rc);
        rc->freeze_until_us = shl_clock_mono_us() + secs * 1000000;
        rc->last_primary_seen_us = shl_clock_mono_us();
        pthread_cond_broadcast(&rc->progress);
        pthread_cond_broadcast(&rc->wake);
        SHL_LOG_INFO(REPL, 2180025, "stepped down (replSetStepDown)", "stepDownSecs",
                     BCON_INT64(secs));
    }
    pthread_mutex_unlock(&rc->mu);
    locked = false;
    shl_topology_change(rc->svc, false);
done:
    if (locked) {
        pthread_mutex_unlock(&rc->mu);
    }
    return ret;
}
