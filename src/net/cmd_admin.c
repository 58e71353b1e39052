/*
 * cmd_admin.c -- diagnostic and administrative commands every process answers.
 */
#include "net/common_commands.h"

void
shl_admin_commands_register(shl_command_registry_t *reg)
{
    (void)reg;
}
