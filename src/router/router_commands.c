/*
 * router_commands.c -- the router's command registry: the cluster_* files.
 */
#include "router/router_commands.h"

void
shl_router_commands_register(shl_command_registry_t *reg)
{
    shl_cluster_admin_commands_register(reg);
    shl_cluster_write_commands_register(reg);
    shl_cluster_find_commands_register(reg);
    shl_cluster_ddl_commands_register(reg);
    shl_cluster_stats_commands_register(reg);
    shl_cluster_diag_commands_register(reg);
    shl_cluster_current_op_commands_register(reg);
    shl_cluster_rw_defaults_commands_register(reg);
    shl_cluster_txn_commands_register(reg);
}
