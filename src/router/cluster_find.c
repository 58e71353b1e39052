/*
 * cluster_find.c -- the router's find commands (TODO(6)).
 */
#include "router/router_commands.h"

void
shl_cluster_find_commands_register(shl_command_registry_t *reg)
{
    (void)reg;
}
