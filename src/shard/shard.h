/*
 * shard.h -- the shard role (`shale node --shardsvr`, docs/design/sharding-protocol.md
 * "Config server -> shard" and "Router -> shard"): its sharding state (the shardIdentity
 * the config server gives it with _addShard, persisted in admin.system.version), the
 * shardsvr commands, and the per-collection filtering metadata that checks versioned
 * requests and filters orphans, installed into the data node through db/sharding_hooks.h.
 */
#ifndef SHL_SHARD_SHARD_H
#define SHL_SHARD_SHARD_H

#include "base/status.h"
#include "net/command.h"
#include "net/service_context.h"

/*
 * shl_shard_init --
 *     Make the data node of 'svc' (after shl_node_init, before the listener) a shard:
 *     register the shardsvr commands into 'reg', install the version-check hooks and the
 *     serverStatus "sharding" section, and reload the shardIdentity from
 *     admin.system.version (becoming shard-aware if it exists). State is freed by the
 *     node's shutdown hook chain. Errors: storage errors reading the identity; BadValue
 *     for a malformed stored identity.
 */
int shl_shard_init(shl_service_ctx_t *svc, shl_command_registry_t *reg, shl_status_t *st);

#endif
