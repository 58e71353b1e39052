/*
 * shard_step_up.c -- what a shard member does on becoming its set's primary, and on
 * stepping down (MongoDB's onStepUp / onStepDown of the sharding services;
 * docs/design/replication.md "Step-up and step-down work"): the same recovery the process
 * runs at start-up, run again each time the member becomes primary, because the documents it
 * resumes from (config.migrationCoordinators, config.transaction_coordinators, the DDL
 * coordinators', config.collection_critical_sections, config.rangeDeletions) replicate and
 * the old primary may have died in the middle of any of them.
 */
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "db/repl_hooks.h"
#include "sharding/coordinator.h"
#include "shard/shard_private.h"

#define STEP_UP_GATE_MAX_MS 30000

/* The recovery of the documents a former primary left: critical sections first (they block
 * their namespaces before any request is served), then the filtering metadata (forgotten: the
 * next versioned request loads it from the config server, so stale versions are refused at
 * once), then the coordinators, each on its own thread. 'at_start': start-up did the first
 * two already. */
static void
step_up_work(shard_state_t *s, bool at_start)
{
    shl_status_t st = SHL_STATUS_INIT;
    shard_identity_t id;
    bool found = false, aware;

    if (!at_start) {
        shard_crit_reset_all(s);
        if (shard_crit_sections_reload(s, &st) != 0) {
            SHL_LOG_WARNING(SHARDING, 4200143, "step-up: could not reload the critical sections",
                            "error", BCON_UTF8(st.reason));
            shl_status_clear(&st);
        }
        pthread_mutex_lock(&s->mu);
        aware = s->aware;
        pthread_mutex_unlock(&s->mu);
        if (!aware && shard_identity_load(s, &id, &found, &st) == 0 && found) {
            shard_become_aware(s, &id);
            shard_clock_sync(s);
        }
        shl_status_clear(&st);
        if (aware && shard_meta_forget_all(s, &st) != 0) {
            shl_status_clear(&st);
        }
    }
    pthread_mutex_lock(&s->mu);
    aware = s->aware;
    pthread_mutex_unlock(&s->mu);
    if (aware) {
        /* Migrations a crash or a failover interrupted: finish them from their coordinator
         * documents (and movePrimary's). */
        shard_migration_recover_async(s);
        /* Two-phase commits: finish them from their documents. */
        shard_txn_coord_recover(s);
        /* DDL: resume each coordinator at its phase. */
        shard_ddl_coords_recover(s);
    }
    /* Ready range deletions run on a primary only: look again now. */
    shard_range_deleter_wake(s);
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->stepped_up, true);
    pthread_cond_broadcast(&s->crit_cv);
    pthread_mutex_unlock(&s->mu);
}

static void
on_step_up(void *arg)
{
    shard_state_t *s = arg;
    int64_t start_us = shl_clock_mono_us();

    step_up_work(s, false);
    SHL_LOG_INFO(SHARDING, 4200144, "shard step-up work done", "durationMillis",
                 BCON_INT64((shl_clock_mono_us() - start_us) / 1000));
}

/* How long a step-down waits for the coordinators it interrupted to end (one in a remote
 * call ends it first). */
#define STEP_DOWN_COORD_WAIT_MS 10000

/* Stepped down: versioned requests wait for the next step-up's work should this member be
 * elected again; an outgoing migration is interrupted (it must not commit from here); the
 * running coordinators (2PC, DDL, migration recovery) stop at their next check with
 * InterruptedDueToReplStateChange, leaving their documents to the new primary (waited for,
 * so a re-election resumes them). Writes are refused from now on, so the range deleter fails
 * its next write. */
static void
on_step_down(void *arg)
{
    shard_state_t *s = arg;
    size_t n = 0;

    atomic_store(&s->stepped_up, false);
    shard_migration_interrupt_donor(s);
    if (s->coords != NULL) {
        n = shl_coord_service_step_down(s->coords, STEP_DOWN_COORD_WAIT_MS);
    }
    SHL_LOG_INFO(SHARDING, 4200145, "shard stepped down", "coordinatorsInterrupted",
                 BCON_INT64((int64_t)n));
}

void
shard_step_up_register(shard_state_t *s)
{
    shl_db_repl_listener_t l = {.step_up = on_step_up, .step_down = on_step_down, .arg = s};

    atomic_store(&s->stepped_up, false);
    if (shl_db_repl_add_listener(s->svc, &l)) {
        step_up_work(s, true);
    }
}

int
shard_step_up_gate(shard_state_t *s, shl_op_ctx_t *op, shl_status_t *st)
{
    int ret = 0;
    int64_t deadline_us = shl_clock_mono_us() + STEP_UP_GATE_MAX_MS * 1000;

    if (atomic_load(&s->stepped_up) || !shl_db_repl_is_primary(s->svc)) {
        goto done;
    }
    pthread_mutex_lock(&s->mu);
    while (!atomic_load(&s->stepped_up) && shl_db_repl_is_primary(s->svc) &&
           shl_clock_mono_us() < deadline_us) {
        struct timespec ts;
        if ((ret = shl_op_check_interrupt(op, st)) != 0) {
            break;
        }
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->crit_cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
done:
    return ret;
}
