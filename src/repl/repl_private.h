/*
 * repl_private.h -- the replication module's internals: the parsed set configuration
 * (repl_config.c), the coordinator's state and member progress (repl_coord.c), the
 * commands (repl_commands.c), heartbeats (heartbeat.c) and the secondary's oplog
 * fetcher/applier (oplog_fetcher.c). docs/design/replication.md.
 */
#ifndef SHL_REPL_PRIVATE_H
#define SHL_REPL_PRIVATE_H

#include <bson/bson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "db/repl_hooks.h"
#include "net/client.h"
#include "net/command.h"
#include "net/op_context.h"
#include "net/service_context.h"
#include "net/write_concern.h"
#include "repl/repl.h"
#include "storage/storage.h"

#define REPL_MAX_MEMBERS 50
#define REPL_MAX_VOTERS 7
#define REPL_CONFIG_NS "local.system.replset"

/* One member of a configuration (MongoDB's MemberConfig). */
typedef struct repl_member {
    int32_t id;
    char host[256];
    double priority;
    int32_t votes;
    bool hidden;
    bool arbiter;
    int64_t secondary_delay_secs;
} repl_member_t;

/* A validated configuration; 'doc' is its normalised document (what replSetGetConfig
 * answers and local.system.replset stores). */
typedef struct repl_config {
    char set_name[128];
    int64_t version;
    int64_t term;
    int32_t n;
    repl_member_t members[REPL_MAX_MEMBERS];
    int64_t heartbeat_interval_ms;
    int64_t election_timeout_ms;
    int64_t catch_up_timeout_ms;        /* settings.catchUpTimeoutMillis: -1 infinite, 0 none */
    int64_t catch_up_takeover_delay_ms; /* settings.catchUpTakeoverDelayMillis (kept) */
    bson_oid_t replica_set_id;
    bson_t doc;
} repl_config_t;

/*
 * repl_config_parse --
 *     Validate 'doc' as MongoDB validates a replica set configuration (members' _id and host
 *     unique; priority 0..1000; votes 0 or 1; priority 0 for arbiters, hidden, delayed and
 *     non-voting members; arbiters vote; 1..7 voters, at most 50 members, one electable
 *     member; protocolVersion 1; settings) and fill *out (always initialised; release with
 *     repl_config_cleanup). 'initiate': version defaults to 1 and a replicaSetId is made
 *     when the settings carry none. Errors: InvalidReplicaSetConfig, TypeMismatch, BadValue
 *     (unknown fields). Pure.
 */
int repl_config_parse(const bson_t *doc, bool initiate, repl_config_t *out, shl_status_t *st);
void repl_config_cleanup(repl_config_t *cfg);

/* repl_config_rebuild -- remake cfg->doc after version, term or replica_set_id changed. Pure. */
void repl_config_rebuild(repl_config_t *cfg);
void repl_config_copy(const repl_config_t *src, repl_config_t *dst);

/*
 * repl_config_tag_mode --
 *     The custom write concern mode 'name' (settings.getLastErrorModes: {tag: count, ...}):
 *     *found when the configuration has it; *ok when the members with reached[i] carry at least
 *     'count' distinct values of every tag of it; *satisfiable when all members together do.
 *     Pure.
 */
void repl_config_tag_mode(const repl_config_t *cfg, const char *name, const bool *reached,
                          bool *found, bool *ok, bool *satisfiable);

/* repl_config_find -- the index of the member whose host is 'host', or -1. */
int repl_config_find(const repl_config_t *cfg, const char *host);

/* repl_config_voters -- the number of voting members; repl_config_majority: votes needed. */
int repl_config_voters(const repl_config_t *cfg);
int repl_config_majority(const repl_config_t *cfg);

/*
 * repl_commit_point --
 *     The majority commit point given each member's durable timestamp (durable[i] for
 *     cfg->members[i]): the highest timestamp that a majority of the voting members have
 *     made durable (arbiters count with their own report, which is 0). Pure.
 */
uint64_t repl_commit_point(const repl_config_t *cfg, const uint64_t *durable);

/* repl_count_at -- how many data-bearing members have applied 'ts' (applied[i]). Pure. */
int repl_count_at(const repl_config_t *cfg, const uint64_t *applied, uint64_t ts);

/* What the coordinator knows of one member (its own entry included). */
typedef struct repl_member_state {
    shl_repl_state_t state;
    uint64_t applied; /* its last applied optime's ts */
    uint64_t durable; /* its last durable optime's ts */
    int64_t applied_t; /* the term of its last applied optime (the entry's 't'; -1 none) */
    int64_t durable_t; /* the term of its last durable optime */
    int64_t term;     /* its term, from heartbeats */
    int64_t last_heartbeat_ms;
    int64_t last_heartbeat_recv_ms;
    int64_t last_ok_us;     /* monotonic: its last successful heartbeat reply */
    uint64_t last_replicated; /* its newest entry of the set's (heartbeat replies) */
    int64_t ping_ms;
    int64_t config_version; /* from its heartbeat replies; -2: none */
    bool up;
    int64_t up_since_ms;
    char last_error[128];
} repl_member_state_t;

/* The replication coordinator: one per data node started with --replSet. */
typedef struct repl_coord {
    shl_service_ctx_t *svc;
    shl_storage_engine_t *eng;
    shl_conn_pool_t *pool; /* its own connections to the other members */

    pthread_mutex_t install_mu; /* serialises configuration installs; taken before mu */
    pthread_mutex_t mu;         /* guards everything below not marked otherwise; a leaf lock */
    pthread_cond_t progress;    /* broadcast when progress, the commit point or state moves */
    bool configured;            /* a multi-member config is installed */
    repl_config_t cfg;          /* valid when configured */
    int self;                   /* index of this node in cfg, -1 when removed */
    repl_member_state_t members[REPL_MAX_MEMBERS];
    int primary; /* index of the primary as far as we know, -1 none */
    int64_t term;
    uint64_t commit_point; /* majority commit point (ts) */
    uint64_t begin_ts;     /* the set's first entry (initiate): joining members fetch from it */
    bool initiator;        /* this node initiated the set (its primary after a restart) */
    bson_oid_t election_id;
    int64_t election_date_ms;
    atomic_bool stop;    /* threads stop; written under mu */
    pthread_cond_t wake; /* wakes the threads (config installed, stop) */

    _Atomic int state; /* shl_repl_state_t of this node; read lock-free */

    /* Elections (election.c). */
    int64_t voted_term;           /* the term of our last vote (stored durably) */
    int32_t voted_for;            /* whom we voted for in it (member index) */
    int64_t last_primary_seen_us; /* monotonic: the last heartbeat from a primary */
    int64_t election_offset_ms;   /* random part of the election timeout */
    bool stepped_down;            /* a former primary (rollback is not implemented yet) */
    atomic_bool initial_sync;     /* none of the set's data here yet: clone it (initial_sync.c) */
    int maintenance;              /* replSetMaintenance depth: RECOVERING while > 0 */
    char sync_from[256];          /* replSetSyncFrom's choice ("" none) */
    char sync_source[256];        /* the fetcher's current source ("" none) */
    int64_t freeze_until_us;      /* monotonic: no candidacy before (replSetStepDown) */
    int64_t takeover_since_us;    /* monotonic: a priority takeover has been due since (0: not) */
    int64_t primary_since_us;     /* monotonic: when this node last became primary */
    /* Catch-up (catch_up.c): a winner fetching what it lacks before it takes writes. */
    bool catching_up;   /* in catch-up now */
    bool catch_up_abort; /* replSetAbortPrimaryCatchUp asked to stop it */
    int catch_up_from;   /* the member it fetches from (-1: none) */

    pthread_t heartbeat_thread;
    bool heartbeat_started;
    pthread_t fetcher_thread;
    bool fetcher_started;
    /* The stable-timestamp pin (storage.h; 0: none) of a member of a multi-member set: its
     * stable timestamp never passes the majority commit point on its own branch of history
     * (nor, on a secondary, what it applied), so the stable checkpoint holds only writes that
     * are never rolled back. Guarded by mu. */
    uint64_t stable_pin;
    /* A sync source returned our newest entry as its own since we last could have diverged
     * (start-up, step-down, rollback): the commit point it gives covers our data. Guarded by
     * mu. */
    bool branch_confirmed;
    /* The commit point that confirmed source gave (0 while unconfirmed): a secondary's stable
     * timestamp follows it, never a commit point heard from another member, which may be on a
     * branch our newest entries are not. Guarded by mu. */
    uint64_t source_commit_point;
    /* After a rollback by refetch: the stable timestamp stays at or below rollback_common
     * until this member applied past rollback_refetched_at (0: none). Guarded by mu. */
    uint64_t rollback_common, rollback_refetched_at;
} repl_coord_t;

/* repl_coord_get -- the coordinator of 'svc' (NULL on a node without --replSet). */
repl_coord_t *repl_coord_get(const shl_service_ctx_t *svc);

/*
 * repl_coord_install_config --
 *     Store 'cfg' in local.system.replset (replacing what is there), make it current, set
 *     this node's state (PRIMARY when 'primary', else SECONDARY), bump the topology version
 *     and start the threads. 'begin_ts' is where a secondary starts fetching. Takes mu.
 *     Errors: storage errors.
 */
int repl_coord_install_config(repl_coord_t *rc, const repl_config_t *cfg, bool primary,
                              uint64_t begin_ts, shl_status_t *st);

/* repl_coord_self_progress -- record this node's applied/durable position (takes mu). */
void repl_coord_self_progress(repl_coord_t *rc, uint64_t applied, uint64_t durable);

/* repl_coord_update_member -- record member 'idx''s reported position; recompute the
 * commit point on a primary. Takes mu. */
void repl_coord_update_member(repl_coord_t *rc, int idx, uint64_t applied, int64_t applied_t,
                              uint64_t durable, int64_t durable_t);

/* repl_member_learn_locked -- take a member's reported applied / durable optimes where they
 * are newer, as (term, timestamp), than what is known (a rolled-back member's lower timestamp
 * of a newer term replaces its divergent one). With mu held. */
void repl_member_learn_locked(repl_member_state_t *m, uint64_t applied, int64_t applied_t,
                              uint64_t durable, int64_t durable_t);

/* repl_coord_learn_commit_point -- a secondary learns its sync source's commit point (a
 * confirmed source's moves the stable pin). Takes mu. */
void repl_coord_learn_commit_point(repl_coord_t *rc, uint64_t ts);

/* repl_coord_learn_source_commit_point_locked -- as repl_coord_learn_commit_point with mu
 * held, for the stable pin only. */
void repl_coord_learn_source_commit_point_locked(repl_coord_t *rc, uint64_t ts);

/* repl_coord_pin_applied -- a non-primary keeps its stable timestamp at or below 'applied'
 * (initial sync: below its start point). Takes mu. */
void repl_coord_pin_applied(repl_coord_t *rc, uint64_t applied);

/*
 * repl_coord_move_stable_locked --
 *     Move the stable pin to the commit point (a primary of a multi-member set), to
 *     min(commit point, applied) (a secondary whose branch is confirmed); otherwise leave it.
 *     Called with mu held whenever one of those moves.
 */
void repl_coord_move_stable_locked(repl_coord_t *rc);

/* repl_coord_hold_stable_locked -- our newest entries may be rolled back (a primary steps
 * down, a rollback starts): the stable timestamp stays where it is until a sync source
 * confirms our branch. Called with mu held. */
void repl_coord_hold_stable_locked(repl_coord_t *rc);

/* repl_coord_confirm_branch -- the sync source returned our newest entry: the commit point
 * it gives covers our data (moves the stable pin). Takes mu. */
void repl_coord_confirm_branch(repl_coord_t *rc);

/* repl_coord_set_state -- move this node to 'state' (not PRIMARY: elections do that) and
 * tell awaitable hellos. Takes mu. */
void repl_coord_set_state(repl_coord_t *rc, shl_repl_state_t state);

/* repl_coord_rolled_back -- this node rolled its oplog back to 'common' (the refetched
 * documents written at 'refetched_at'): its position is there again, its stable timestamp
 * stays at or below 'common' until it applied past 'refetched_at', and it is RECOVERING until
 * it has applied the source's entries up to the rollback's minValid (the fetcher then makes
 * it SECONDARY). Takes mu. */
void repl_coord_rolled_back(repl_coord_t *rc, uint64_t common, uint64_t refetched_at);

#define REPL_SOURCE_TIMEOUT_MS 10000

/*
 * repl_source_find --
 *     Run 'cmd' (a find, or a command answering a cursor: listDatabases excepted) on 'host' in
 *     'db' with the coordinator's pool, following getMores until the cursor is exhausted, and
 *     hand every document to 'fn' (a view valid for the call). Blocks on the network.
 *     Errors: network errors, the command's own, ProtocolError for a reply without a cursor.
 */
int repl_source_find(repl_coord_t *rc, const char *host, const char *db, const bson_t *cmd,
                     void (*fn)(const bson_t *doc, void *arg), void *arg, shl_status_t *st);

/* repl_source_top -- the ts of 'host''s newest oplog entry in *top. Errors: those of
 * repl_source_find. */
int repl_source_top(repl_coord_t *rc, const char *host, uint64_t *top, shl_status_t *st);
/* repl_source_top_replicated -- the same, of the set's entries only (local.* left out), with
 * that entry's term in *top_t (-1 none). */
int repl_source_top_replicated(repl_coord_t *rc, const char *host, uint64_t *top, int64_t *top_t,
                               shl_status_t *st);

/*
 * repl_initial_sync --
 *     Copy the set's data from 'host' (initial_sync.c, docs/design/replication.md "Initial
 *     sync"): appendOplogNote there, its newest entry becomes *begin (this member's stable
 *     timestamp is pinned below it); every database here but local is dropped; every database,
 *     collection (UUID, options), index and document of the source is cloned at *begin; *min_valid
 *     is the source's newest entry after the clone. The caller then fetches from *begin and
 *     stays STARTUP2 until *min_valid is applied. Runs on the fetcher thread. Blocks.
 *     Errors: InitialSyncFailure, network and storage errors (the caller tries again).
 */
int repl_initial_sync(repl_coord_t *rc, const char *host, uint64_t *begin, uint64_t *min_valid,
                      shl_status_t *st);

/* repl_coord_initial_sync_done -- the initial sync reached its minValid: clear the flag that
 * makes a restart copy the data again. Writes local.replset.minvalid. Errors: storage. */
int repl_coord_initial_sync_done(repl_coord_t *rc, shl_status_t *st);

/*
 * repl_coord_adopt_config --
 *     Make 'cfg' (a newer version: a reconfig here or from a heartbeat) current without a
 *     change of state or term: stored in local.system.replset, what is known of each member kept
 *     by host, this node REMOVED when the configuration no longer lists it. Takes mu (the
 *     caller holds install_mu). Errors: storage errors.
 */
int repl_coord_adopt_config(repl_coord_t *rc, const repl_config_t *cfg, shl_status_t *st);

/* repl_push_config -- send the current configuration to every other member now (a heartbeat
 * carrying it) and note the versions they answer. Blocks on the network. */
void repl_push_config(repl_coord_t *rc);

/* reconfig.c: replSetReconfig (MongoDB's safe reconfig rules; force), replSetFreeze,
 * replSetMaintenance, replSetSyncFrom. Errors as MongoDB's: NotWritablePrimary,
 * NewReplicaSetConfigurationIncompatible, CurrentConfigNotCommittedYet, NodeNotFound,
 * NotSecondary, OperationFailed, InvalidOptions, and the configuration's own. */
int repl_reconfig_run(repl_coord_t *rc, shl_op_ctx_t *op, const bson_t *cmd, shl_status_t *st);
int repl_freeze(repl_coord_t *rc, const bson_t *cmd, bson_t *reply, shl_status_t *st);
int repl_maintenance(repl_coord_t *rc, const bson_t *cmd, shl_status_t *st);
int repl_sync_from(repl_coord_t *rc, const bson_t *cmd, bson_t *reply, shl_status_t *st);

/*
 * repl_rollback_run --
 *     Roll this node's oplog back to the newest entry it shares with 'host' (rollback.c,
 *     docs/design/replication.md "Rollback"): state ROLLBACK, the common point in *common,
 *     our versions of the documents touched after it saved to <dbpath>/rollback/, the
 *     source's versions written in their place, a checkpoint, the later entries removed from
 *     the oplog; then RECOVERING until the source's top at the time, *min_valid, is applied.
 *     Runs on the fetcher thread (nothing else applies meanwhile). Blocks on the network.
 *     Errors: OplogStartMissing (no common point: a resync is needed), network and storage
 *     errors (the node goes back to SECONDARY and the fetcher tries again).
 */
int repl_rollback_run(repl_coord_t *rc, const char *host, uint64_t *common, uint64_t *min_valid,
                      shl_status_t *st);

/* repl_coord_become_primary_locked -- this node won an election in rc->term: state PRIMARY,
 * electionId, no stable pin. With mu held. */
void repl_coord_become_primary_locked(repl_coord_t *rc);

/* repl_coord_start_threads_locked -- start the heartbeat / fetcher threads not running. */
int repl_coord_start_threads_locked(repl_coord_t *rc, shl_status_t *st);

/* Elections (election.c). */
void repl_election_load(repl_coord_t *rc);
void repl_election_see_term_locked(repl_coord_t *rc, int64_t term);
int repl_election_vote(repl_coord_t *rc, const bson_t *cmd, bson_t *reply, shl_status_t *st);
void repl_election_maybe_run(repl_coord_t *rc);
/* repl_election_step_up -- replSetStepUp: stand now (no dry run, no timer); CommandFailed
 * when this member cannot stand or loses. Blocks on the network. */
int repl_election_step_up(repl_coord_t *rc, shl_status_t *st);
int repl_election_step_down(repl_coord_t *rc, shl_op_ctx_t *op, const bson_t *cmd,
                            shl_status_t *st);

/*
 * repl_catch_up --
 *     MongoDB's primary catch-up: this node just won the election of 'term' and is not primary
 *     yet. Asks every other data-bearing member that is up for its newest entry of the set's;
 *     when one is ahead of ours, the fetcher fetches from it until this node has applied that
 *     entry, settings.catchUpTimeoutMillis passes (-1: no limit, 0: no catch-up),
 *     replSetAbortPrimaryCatchUp is run, or the term moves on. True when the term is still
 *     'term' (the caller then becomes primary). Blocks on the network. Takes mu.
 */
bool repl_catch_up(repl_coord_t *rc, int64_t term);

/* repl_catch_up_diverged -- the fetcher found its source lacks our newest entry: during a
 * catch-up, end it (true: do not roll back for that source). Takes mu. */
bool repl_catch_up_diverged(repl_coord_t *rc);

/* repl_abort_catch_up -- replSetAbortPrimaryCatchUp. Errors: IllegalOperation when this node
 * is not catching up. */
int repl_abort_catch_up(repl_coord_t *rc, shl_status_t *st);

/* repl_coord_last_replicated -- the newest entry of this node's oplog that came from the set
 * (local.* writes excluded); 0 when none or on error. Reads storage. */
uint64_t repl_coord_last_replicated(repl_coord_t *rc);

/* repl_append_optime -- {ts: Timestamp, t: term} under 'key'. */
void repl_append_optime(bson_t *out, const char *key, uint64_t ts, int64_t term);

/* repl_optime_ts -- the ts of an optime document {ts, t} under 'key' in 'doc' (0: none). */
uint64_t repl_optime_ts(const bson_t *doc, const char *key);

/* repl_optime_term -- the t of an optime document {ts, t} under 'key' in 'doc' (-1: none). */
int64_t repl_optime_term(const bson_t *doc, const char *key);

/* repl_entry_term -- the term ('t') of oplog entry 'e' (-1: none). */
int64_t repl_entry_term(const bson_t *e);

/*
 * repl_optime_cmp --
 *     Optimes compare as (term, timestamp), term first (MongoDB's OpTime, Raft's log order):
 *     <0, 0, >0 as (at, ats) is older, equal, newer than (bt, bts). Pure.
 */
int repl_optime_cmp(int64_t at, uint64_t ats, int64_t bt, uint64_t bts);

/* repl_coord_term_at -- the term ('t') of this node's newest entry of the set's at or below
 * 'ts' (the optime of position 'ts'), -1 when it has none (or on a read error). Reads
 * storage; call without mu. */
int64_t repl_coord_term_at(repl_coord_t *rc, uint64_t ts);

/* Step-up / step-down listeners (repl_listeners.c; db/repl_hooks.h's add_listener and
 * stop_listeners, 'arg' the coordinator). */
bool repl_add_listener(void *arg, const shl_db_repl_listener_t *l);
void repl_stop_listeners(void *arg);

/* Commands (repl_commands.c). */
void repl_register_commands(shl_command_registry_t *reg);

/* Threads (heartbeat.c, oplog_fetcher.c): started by repl_coord_install_config. */
void *repl_heartbeat_main(void *arg);
void *repl_fetcher_main(void *arg);

/*
 * repl_heartbeat_build -- the replSetHeartbeat request this node sends ('with_config':
 * include the config, as the initiator does to members that have none).
 */
void repl_heartbeat_build(repl_coord_t *rc, bool with_config, bson_t *out);

#endif
