/*
 * command.c -- the command registry: an open-addressing hash of names and aliases.
 */
#include "net/command.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"

#define TABLE_SIZE 1024 /* power of two, well above the number of names */

typedef struct entry {
    const char *name;
    const shl_command_t *cmd;
    int idx; /* the command's index in 'list' */
} entry_t;

struct shl_command_registry {
    entry_t slots[TABLE_SIZE];
    const shl_command_t *list[TABLE_SIZE];
    int nlist;
    /* serverStatus metrics.commands per index of 'list' (atomics, no lock). */
    _Atomic int64_t total[TABLE_SIZE];
    _Atomic int64_t failed[TABLE_SIZE];
    _Atomic int64_t unknown;
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
insert_name(shl_command_registry_t *reg, const char *name, const shl_command_t *cmd, int idx)
{
    uint32_t i = hash_name(name) & (TABLE_SIZE - 1);
    while (reg->slots[i].name != NULL) {
        SHL_INVARIANT(strcmp(reg->slots[i].name, name) != 0);
        i = (i + 1) & (TABLE_SIZE - 1);
    }
    reg->slots[i].name = name;
    reg->slots[i].cmd = cmd;
    reg->slots[i].idx = idx;
}

/* The slot of 'name', or NULL. */
static const entry_t *
find_slot(const shl_command_registry_t *reg, const char *name)
{
    uint32_t i = hash_name(name) & (TABLE_SIZE - 1);
    while (reg->slots[i].name != NULL) {
        if (strcmp(reg->slots[i].name, name) == 0) {
            return &reg->slots[i];
        }
        i = (i + 1) & (TABLE_SIZE - 1);
    }
    return NULL;
}

void
shl_command_registry_add(shl_command_registry_t *reg, const shl_command_t *cmd)
{
    if ((cmd->flags & SHL_CMD_TEST_ONLY) && !shl_opt_bool(SHL_OPT_enableTestCommands)) {
        return;
    }
    SHL_INVARIANT(reg->nlist < TABLE_SIZE / 4);
    reg->list[reg->nlist] = cmd;
    insert_name(reg, cmd->name, cmd, reg->nlist);
    for (int i = 0; i < 3 && cmd->aliases[i] != NULL; i++) {
        insert_name(reg, cmd->aliases[i], cmd, reg->nlist);
    }
    reg->nlist++;
}

const shl_command_t *
shl_command_registry_find(const shl_command_registry_t *reg, const char *name)
{
    const entry_t *e = find_slot(reg, name);
    return e != NULL ? e->cmd : NULL;
}

void
shl_command_registry_count(shl_command_registry_t *reg, const shl_command_t *cmd, bool failed)
{
    const entry_t *e = cmd != NULL ? find_slot(reg, cmd->name) : NULL;

    if (e == NULL || e->cmd != cmd) {
        atomic_fetch_add_explicit(&reg->unknown, 1, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&reg->total[e->idx], 1, memory_order_relaxed);
        if (failed) {
            atomic_fetch_add_explicit(&reg->failed[e->idx], 1, memory_order_relaxed);
        }
    }
}

static int
by_name(const void *a, const void *b)
{
    const shl_command_t *const *x = a;
    const shl_command_t *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

void
shl_command_registry_append_metrics(shl_command_registry_t *reg, bson_t *metrics)
{
    const shl_command_t *sorted[TABLE_SIZE];
    bson_t commands, one;

    memcpy(sorted, reg->list, sizeof(sorted[0]) * (size_t)reg->nlist);
    qsort(sorted, (size_t)reg->nlist, sizeof(sorted[0]), by_name);
    BSON_APPEND_DOCUMENT_BEGIN(metrics, "commands", &commands);
    BSON_APPEND_INT64(&commands, "<UNKNOWN>",
                      atomic_load_explicit(&reg->unknown, memory_order_relaxed));
    for (int i = 0; i < reg->nlist; i++) {
        int idx = find_slot(reg, sorted[i]->name)->idx;
        BSON_APPEND_DOCUMENT_BEGIN(&commands, sorted[i]->name, &one);
        BSON_APPEND_INT64(&one, "failed",
                          atomic_load_explicit(&reg->failed[idx], memory_order_relaxed));
        BSON_APPEND_INT64(&one, "total",
                          atomic_load_explicit(&reg->total[idx], memory_order_relaxed));
        bson_append_document_end(&commands, &one);
    }
    bson_append_document_end(metrics, &commands);
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
