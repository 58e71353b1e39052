/*
 * router_commands.h -- registration of the router's cluster_* commands, one function per
 * file, all called by shl_router_commands_register.
 */
#ifndef SHL_ROUTER_ROUTER_COMMANDS_H
#define SHL_ROUTER_ROUTER_COMMANDS_H

#include "net/command.h"

void shl_router_commands_register(shl_command_registry_t *reg);

void shl_cluster_admin_commands_register(shl_command_registry_t *reg);
void shl_cluster_write_commands_register(shl_command_registry_t *reg);
void shl_cluster_find_commands_register(shl_command_registry_t *reg);
void shl_cluster_ddl_commands_register(shl_command_registry_t *reg);
void shl_cluster_stats_commands_register(shl_command_registry_t *reg);
void shl_cluster_diag_commands_register(shl_command_registry_t *reg);
void shl_cluster_current_op_commands_register(shl_command_registry_t *reg);
void shl_cluster_rw_defaults_commands_register(shl_command_registry_t *reg);
void shl_cluster_txn_commands_register(shl_command_registry_t *reg);

#endif
