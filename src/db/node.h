/*
 * node.h -- a data node (`shale node`): builds its command registry and installs its
 * service hooks. Storage, CRUD and sharding roles plug in here as they land.
 */
#ifndef SHL_DB_NODE_H
#define SHL_DB_NODE_H

#include "base/status.h"
#include "net/command.h"
#include "net/lsid.h"
#include "net/service_context.h"

/*
 * shl_node_init --
 *     Prepare 'svc' (role already set) to serve as a data node: register the data
 *     node's commands into 'reg' and install hooks. Errors: storage start-up failures.
 */
int shl_node_init(shl_service_ctx_t *svc, shl_command_registry_t *reg, shl_status_t *st);

/*
 * shl_node_session_catalog --
 *     The data node's session catalog (src/db/session_catalog.h), NULL on a standalone
 *     (which takes no retryable writes). Borrowed; lives until the node shuts down.
 */
struct db_session_catalog *shl_node_session_catalog(const shl_service_ctx_t *svc);

/*
 * shl_node_txn_started_us --
 *     When this node's open transaction (lsid, txn_number) started, on shl_clock_mono_us's
 *     scale; 0 when it has none open (db_txn_started_us).
 */
int64_t shl_node_txn_started_us(const shl_service_ctx_t *svc, const shl_lsid_t *lsid,
                                int64_t txn_number);

/*
 * shl_node_clock_start_fresh --
 *     For cluster members at start-up (docs/design/vector_clock.md "Durability"): a time
 *     learned from gossip but never written is not in the oplog, so a restart within the same
 *     second could answer with an older one. The clock starts at the second after the later
 *     of its recovered value (>= the oplog top) and the wall clock, and when that is the wall
 *     clock's next second this waits (at most a second) until the wall clock is there too.
 */
void shl_node_clock_start_fresh(shl_service_ctx_t *svc);

#endif
