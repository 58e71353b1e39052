/*
 * shard.c -- the shard role's start-up (shard.h): creates the sharding state, registers
 * the shardsvr commands, installs the version-check hook into the data node
 * (db/sharding_hooks.h), chains the serverStatus and shutdown hooks, and reloads the
 * shardIdentity persisted by an earlier _addShard.
 */
#include "shard/shard.h"

#include <string.h>
#include <time.h>

#include "base/log.h"
#include "db/repl_hooks.h"
#include "shard/shard_private.h"
#include "shard/chunk_splitter.h"
#include "shard/ddl_coordinators.h"
#include "shard/txn_coordinator.h"

shard_state_t *
shard_state(const shl_op_ctx_t *op)
{
    return shl_db_sharding_hooks_arg(op->svc);
}

static void
shard_server_status(shl_service_ctx_t *svc, bson_t *reply)
{
    shard_state_t *s = shl_db_sharding_hooks_arg(svc);
    shard_identity_t id;
    bson_t sec;

    if (s->prev_server_status != NULL) {
        s->prev_server_status(svc, reply);
    }
    if (!shard_get_identity(s, &id)) {
        return; /* MongoDB shows the section once the shard is sharding-aware */
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "sharding", &sec);
    BSON_APPEND_UTF8(&sec, "configsvrConnectionString", id.config_cs);
    bson_append_document_end(reply, &sec);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "shardingStatistics", &sec);
    shard_range_deleter_server_status(s, &sec);
    shard_splitter_server_status(s, &sec);
    BSON_APPEND_INT64(&sec, "countDonorMoveChunkLockTimeout",
                      (int64_t)atomic_load(&s->donor_lock_timeouts));
    bson_append_document_end(reply, &sec);
}

/* currentOp: the coordinators running on this shard. */
static void
shard_current_op(shl_service_ctx_t *svc, bson_t *inprog, uint32_t *n)
{
    shard_state_t *s = shl_db_sharding_hooks_arg(svc);

    if (s->coords != NULL) {
        shl_coord_service_report(s->coords, inprog, n);
    }
}

/* The op observer: a donor's capture of its range, and auto-split's write tracking. */
static void
shard_observe_write(void *arg, const char *ns, const bson_t *pre, const bson_t *post)
{
    shard_migration_observe(arg, ns, pre, post);
    shard_splitter_note_write(arg, ns, post);
}

static bool
shard_observing(void *arg, const char *ns)
{
    return shard_migration_observing(arg, ns) || shard_splitter_tracking(arg, ns);
}

static void
shard_shutdown(shl_service_ctx_t *svc)
{
    shard_state_t *s = shl_db_sharding_hooks_arg(svc);

    shl_db_repl_stop_listeners(svc);
    /* The session cache's thread and an incoming migration's stop first (they use the
     * catalog cache and the connection pool). */
    shard_sessions_stop(s);
    shard_recipient_shutdown(s);
    /* A live migration's coordinator stops at its next check (its document stays for the
     * next start); the coordinator service then waits for it. */
    shard_migration_interrupt_donor(s);
    shard_txn_coord_shutdown(s);
    shard_ddl_locks_destroy(s->ddl_locks);
    s->ddl_locks = NULL;
    /* Connections are gone, so no command uses the state any more; the range deleter
     * stops before the storage and the metadata it uses go. The node's own shutdown
     * (which frees the hooks' home, and cursors that may still hold metadata) runs
     * before the metadata tracking is torn down. */
    shard_range_deleter_stop(s);
    shard_splitter_stop(s);
    shard_clock_shutdown(s);
    shard_meta_destroy_all(s);
    if (s->prev_shutdown != NULL) {
        s->prev_shutdown(svc);
    }
    shard_splitter_destroy(s);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->identity_mu);
    pthread_cond_destroy(&s->crit_cv);
    pthread_mutex_destroy(&s->meta_mu);
    pthread_mutex_destroy(&s->rd.mu);
    pthread_cond_destroy(&s->rd.cv);
    pthread_mutex_destroy(&s->mig_mu);
    pthread_cond_destroy(&s->mig_cv);
    bson_free(s);
}

int
shl_shard_init(shl_service_ctx_t *svc, shl_command_registry_t *reg, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = bson_malloc0(sizeof(*s));
    shl_db_sharding_hooks_t hooks = {0};
    shard_identity_t id;
    bool found = false;

    s->svc = svc;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->identity_mu, NULL);
    pthread_cond_init(&s->crit_cv, NULL);
    pthread_mutex_init(&s->mig_mu, NULL);
    pthread_cond_init(&s->mig_cv, NULL);
    atomic_init(&s->capturing, 0);
    pthread_mutex_init(&s->meta_mu, NULL);
    shard_range_deleter_init(s);
    shard_splitter_init(s);
    hooks.arg = s;
    hooks.check = shard_check_versions;
    hooks.check_involved = shard_check_involved;
    hooks.on_write = shard_observe_write;
    hooks.observing = shard_observing;
    hooks.orphan_count = shard_orphan_count;
    hooks.shard_name = shard_name_of;
    hooks.shard_key = shard_key_of;
    hooks.drain_ddl = shard_ddl_drain;
    shl_db_sharding_hooks_install(svc, &hooks);
    s->prev_shutdown = svc->hooks.shutdown;
    s->prev_server_status = svc->hooks.append_server_status;
    svc->hooks.shutdown = shard_shutdown;
    svc->hooks.append_server_status = shard_server_status;
    svc->hooks.append_current_op = shard_current_op;
    shard_commands_register(reg);
    shard_migration_commands_register(reg);
    shard_load_register(reg);
    shard_range_deleter_commands_register(reg);
    shard_create_participant_register(reg);
    shard_move_primary_register(reg);
    shard_rename_participant_register(reg);
    shard_txn_coord_init(s);
    shard_txn_coord_register(reg);
    s->ddl_locks = shard_ddl_locks_new();
    shard_ddl_coords_setup(s->ddl_locks, shard_ddl_check_db_version, s);
    shard_ddl_coords_register(reg);
    shard_drop_participant_register(reg);
    /* From here on the state belongs to the shutdown hook, error or not. */
    SHL_ERR(shard_clock_init(s, st));
    SHL_ERR(shard_identity_load(s, &id, &found, st));
    /* Renames a crash interrupted keep their namespaces blocked until the config server
     * finishes them. */
    SHL_ERR(shard_crit_sections_reload(s, st));
    if (found) {
        shard_become_aware(s, &id);
        shard_clock_sync(s);
    }
    /* Migrations, two-phase commits and DDL a crash interrupted resume from their documents
     * now on a primary, on a secondary when it becomes primary (shard_step_up.c). */
    shard_step_up_register(s);
    /* Resumes the ready tasks of config.rangeDeletions (pending ones wait for their
     * migration's decision). */
    shard_range_deleter_start(s);
    shard_splitter_start(s);
    SHL_ERR(shard_sessions_start(s, st));
done:
    return ret;
}
