/*
 * repl.h -- replica sets (issue 18): the member's state and the set's configuration, the
 * replSet* commands, heartbeats, the oplog fetcher/applier of a secondary, replication
 * progress and the majority commit point, and write concern waits on that progress.
 * docs/design/replication.md; DESIGN.md section 5 (the oplog is the journal).
 *
 * Layering: repl sits above db (it installs db/repl_hooks.h into the data node, as shard
 * installs db/sharding_hooks.h) and below shard/config/main. A node started with --replSet
 * and no multi-member configuration in local.system.replset behaves as before: a set of
 * one whose only member is primary in term 1.
 */
#ifndef SHL_REPL_REPL_H
#define SHL_REPL_REPL_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "net/command.h"
#include "net/service_context.h"

/* MongoDB's member states (replSetGetStatus "state" / "stateStr"). */
typedef enum shl_repl_state {
    SHL_REPL_STARTUP = 0,
    SHL_REPL_PRIMARY = 1,
    SHL_REPL_SECONDARY = 2,
    SHL_REPL_RECOVERING = 3,
    SHL_REPL_STARTUP2 = 5,
    SHL_REPL_UNKNOWN = 6,
    SHL_REPL_ARBITER = 7,
    SHL_REPL_DOWN = 8,
    SHL_REPL_ROLLBACK = 9,
    SHL_REPL_REMOVED = 10,
} shl_repl_state_t;

/* shl_repl_state_name -- "PRIMARY", "SECONDARY", ... (static storage). */
const char *shl_repl_state_name(shl_repl_state_t s);

/*
 * shl_repl_preinit --
 *     Before shl_node_init: on a --replSet node, ask to see storage as soon as it is open
 *     (svc->hooks.storage_opened), to read local.system.replset and, as a secondary, pin the
 *     stable timestamp before any write of the node can move it. No-op without --replSet.
 */
void shl_repl_preinit(shl_service_ctx_t *svc);

/*
 * shl_repl_init --
 *     Start replication on a data node started with --replSet, after shl_node_init (and
 *     shl_repl_preinit before it): a member of a multi-member set (the configuration read at
 *     storage_opened) starts its heartbeat and, as a secondary, its oplog fetcher thread;
 *     without a configuration the node stays a set of one. Register
 *     replSetInitiate, replSetGetConfig, replSetGetStatus, replSetHeartbeat and
 *     replSetUpdatePosition, and install the hooks (hello fields, NotWritablePrimary /
 *     NotPrimaryNoSecondaryOk admission, write concern waits, majority read timestamps).
 *     A no-op without --replSet. The threads stop in the service's shutdown hook (chained
 *     before the node's). Errors: storage errors reading the config, InvalidReplicaSetConfig
 *     for a stored config that no longer validates.
 */
int shl_repl_init(shl_service_ctx_t *svc, shl_command_registry_t *reg, shl_status_t *st);

/*
 * shl_repl_is_primary --
 *     Whether this node may accept writes now (a set of one: always; otherwise only in state
 *     PRIMARY). Lock-free read; may be stale by the time the caller acts.
 */
bool shl_repl_is_primary(const shl_service_ctx_t *svc);

#endif
