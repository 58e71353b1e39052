/*
 * cluster_write.c -- the router's write commands (TODO(6)).
 */
#include "router/router_commands.h"

void
shl_cluster_write_commands_register(shl_command_registry_t *reg)
{
    (void)reg;
}
