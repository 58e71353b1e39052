/*
 * node.c -- data node start-up (see node.h).
 */
#include "db/node.h"

#include "net/common_commands.h"

int
shl_node_init(shl_service_ctx_t *svc, shl_command_registry_t *reg, shl_status_t *st)
{
    (void)svc;
    (void)st;
    shl_common_commands_register(reg);
    return 0;
}
