/*
 * configsvr.h -- the config server role (`shale node --configsvr`): the sharding catalog
 * in config.* and the _configsvr* commands of docs/design/sharding-protocol.md.
 */
#ifndef SHL_CONFIG_CONFIGSVR_H
#define SHL_CONFIG_CONFIGSVR_H

#include "base/status.h"
#include "net/command.h"
#include "net/service_context.h"

/*
 * shl_configsvr_init --
 *     Turn the data node 'svc' (already set up by shl_node_init) into a config server:
 *     create the config.* indexes and config.version {_id: 1, clusterId} if missing
 *     (idempotent), register the config server's commands into 'reg', make hello answer
 *     configsvr: 2, and open the client pool used to reach shards. Call once, before the
 *     listener starts. Errors: those of the local writes (storage).
 */
int shl_configsvr_init(shl_service_ctx_t *svc, shl_command_registry_t *reg, shl_status_t *st);

#endif
