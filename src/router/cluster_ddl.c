/*
 * cluster_ddl.c -- the router's ddl commands (TODO(6)).
 */
#include "router/router_commands.h"

void
shl_cluster_ddl_commands_register(shl_command_registry_t *reg)
{
    (void)reg;
}
