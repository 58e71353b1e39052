/*
 * common_commands.c -- registers the commands every process answers.
 */
#include "net/common_commands.h"

void
shl_common_commands_register(shl_command_registry_t *reg)
{
    shl_hello_commands_register(reg);
    shl_admin_commands_register(reg);
    shl_failpoint_commands_register(reg);
    shl_profile_commands_register(reg);
}
