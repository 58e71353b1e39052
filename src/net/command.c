/*
 * command.c -- the command registry: an open-addressing hash of names and aliases.
 */
#include "net/command.h"

#include <string.h>

#include "base/options.h"

#define TABLE_SIZE 1024 /* power of two, well above the number of names */

typedef struct entry {
    const char *name;
    const shl_command_t *cmd;
} entry_t;

struct shl_command_registry {
    entry_t slots[TABLE_SIZE];
    const shl_command_t *list[TABLE_SIZE];
    int nlist;
};

static uint32_t
hash_name(const char *s)
{
    uint32_t h = 2166136261u;
    while (*s) {
        h = (h ^ (uint8_t)*s++) * 16777619u;
    }
    return h;
}

shl_command_registry_t *
shl_command_registry_new(void)
{
    return bson_malloc0(sizeof(shl_command_registry_t));
}

void
shl_command_registry_destroy(shl_command_registry_t *reg)
{
    bson_free(reg);
}

static void
insert_name(shl_command_registry_t *reg, const char *name, const shl_command_t *cmd)
{
    uint32_t i = hash_name(name) & (TABLE_SIZE - 1);
    while (reg->slots[i].name != NULL) {
        SHL_INVARIANT(strcmp(reg->slots[i].name, name) != 0);
        i = (i + 1) & (TABLE_SIZE - 1);
    }
    reg->slots[i].name = name;
    reg->slots[i].cmd = cmd;
}

void
shl_command_registry_add(shl_command_registry_t *reg, const shl_command_t *cmd)
{
    if ((cmd->flags & SHL_CMD_TEST_ONLY) && !shl_opt_bool(SHL_OPT_enableTestCommands)) {
        return;
    }
    SHL_INVARIANT(reg->nlist < TABLE_SIZE / 4);
    reg->list[reg->nlist++] = cmd;
    insert_name(reg, cmd->name, cmd);
    for (int i = 0; i < 3 && cmd->aliases[i] != NULL; i++) {
        insert_name(reg, cmd->aliases[i], cmd);
    }
}

const shl_command_t *
shl_command_registry_find(const shl_command_registry_t *reg, const char *name)
{
    uint32_t i = hash_name(name) & (TABLE_SIZE - 1);
    while (reg->slots[i].name != NULL) {
        if (strcmp(reg->slots[i].name, name) == 0) {
            return reg->slots[i].cmd;
        }
        i = (i + 1) & (TABLE_SIZE - 1);
    }
    return NULL;
}

void
shl_command_registry_list(const shl_command_registry_t *reg, bson_t *out)
{
    for (int i = 0; i < reg->nlist; i++) {
        const shl_command_t *c = reg->list[i];
        bson_t doc;
        BSON_APPEND_DOCUMENT_BEGIN(out, c->name, &doc);
        BSON_APPEND_UTF8(&doc, "help", c->help != NULL ? c->help : "");
        BSON_APPEND_BOOL(&doc, "adminOnly", (c->flags & SHL_CMD_ADMIN_ONLY) != 0);
        BSON_APPEND_BOOL(&doc, "requiresAuth", false);
        BSON_APPEND_BOOL(&doc, "secondaryOk", !(c->flags & SHL_CMD_NEEDS_PRIMARY));
        bson_append_document_end(out, &doc);
    }
}
