/*
 * common_commands.h -- the commands every Shale process answers, router and data
 * node alike (handshake, diagnostics, parameters, fail points, shutdown).
 */
#ifndef SHL_NET_COMMON_COMMANDS_H
#define SHL_NET_COMMON_COMMANDS_H

#include "net/command.h"

/* shl_common_commands_register -- add all of them to 'reg'. */
void shl_common_commands_register(shl_command_registry_t *reg);

/* Per-file registration, called by shl_common_commands_register. */
void shl_hello_commands_register(shl_command_registry_t *reg);
void shl_admin_commands_register(shl_command_registry_t *reg);
void shl_failpoint_commands_register(shl_command_registry_t *reg);
void shl_profile_commands_register(shl_command_registry_t *reg);

/* Wire limits and versions advertised in hello. */
#define SHL_MIN_WIRE_VERSION 0
#define SHL_MAX_WIRE_VERSION 21
#define SHL_VERSION_STRING "7.0.0"

#endif
