/*
 * router.h -- the router role (`shale router --configdb ...`, DESIGN.md section 1): a
 * stateless process that caches routing information lazily (catalog cache, shard registry),
 * targets each request to the shards that own its data, attaches the versions it routed
 * with, and retries on StaleConfig / StaleDbVersion. docs/design/sharding-protocol.md.
 */
#ifndef SHL_ROUTER_ROUTER_H
#define SHL_ROUTER_ROUTER_H

#include "base/status.h"
#include "net/command.h"
#include "net/service_context.h"

/*
 * shl_router_init --
 *     Prepare 'svc' (role ROUTER) to serve as a router for the cluster whose config server
 *     is 'configdb' ("csrs/host:port"): create the connection pool, shard registry and
 *     catalog cache (svc->role_state), register the router's commands into 'reg' and install
 *     its hooks. Does no I/O. Errors: BadValue for an unusable connection string.
 */
int shl_router_init(shl_service_ctx_t *svc, shl_command_registry_t *reg, const char *configdb,
                    shl_status_t *st);

#endif
