/*
 * topology.h -- the process's TopologyVersion and the awaitable hello (the SDAM
 * "streamable hello" protocol): every hello reply carries {processId, counter}; a
 * hello that sends back the version it last saw, with maxAwaitTimeMS, waits until
 * the version moves or the time passes. The counter moves on a significant topology
 * change: here, a router entering quiesce mode and a data node beginning its shutdown
 * (docs/design/startup_shutdown.md; seeds/000 "Quiesce mode on shutdown").
 */
#ifndef SHL_NET_TOPOLOGY_H
#define SHL_NET_TOPOLOGY_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "net/op_context.h"
#include "net/service_context.h"

/*
 * shl_topology_append --
 *     Append the current topologyVersion {processId: ObjectId, counter: long} to 'doc'
 *     under 'key'. Takes the topology lock (a leaf).
 */
void shl_topology_append(shl_service_ctx_t *svc, bson_t *doc, const char *key);

/*
 * shl_topology_change --
 *     A significant topology change: the counter moves by one and every waiting
 *     awaitable hello answers at once. With 'quiesce', the process also enters quiesce
 *     mode (a router's shutdown): from then on hello fails with ShutdownInProgress.
 *     Never blocks beyond the topology lock.
 */
void shl_topology_change(shl_service_ctx_t *svc, bool quiesce);

/* shl_topology_quiescing -- whether the process is in quiesce mode. */
bool shl_topology_quiescing(const shl_service_ctx_t *svc);

/* shl_topology_waiting -- awaitable hellos waiting now (serverStatus'
 * connections.awaitingTopologyChanges). */
int32_t shl_topology_waiting(shl_service_ctx_t *svc);

/*
 * shl_topology_await --
 *     The wait of an awaitable hello that sent 'process_id'/'counter' with 'max_await_ms'.
 *     Returns 0 at once when the client's version is from another process or older than
 *     ours, or once the counter moved, max_await_ms passed, or the process began its
 *     shutdown; the caller then builds the reply. Blocks only its own (connection) thread,
 *     on a condition variable, holding no other lock. Errors: ShutdownInProgress in
 *     quiesce mode (before or during the wait); 'newer_code' (MongoDB's 31382 on a node,
 *     51761 on a router) for a counter ahead of ours from this process; MaxTimeMSExpired,
 *     Interrupted or InterruptedAtShutdown when the operation ends first.
 */
int shl_topology_await(shl_op_ctx_t *op, const bson_oid_t *process_id, int64_t counter,
                       int64_t max_await_ms, int newer_code, shl_status_t *st);

#endif
