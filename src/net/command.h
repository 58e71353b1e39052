/*
 * command.h -- the command registry: {name, aliases, run, flags}. The router and
 * data nodes each build their own registry. DESIGN.md section 3.
 */
#ifndef SHL_NET_COMMAND_H
#define SHL_NET_COMMAND_H

#include <bson/bson.h>
#include <stdbool.h>

#include "base/status.h"
#include "net/op_context.h"

#define SHL_CMD_ADMIN_ONLY (1u << 0)     /* only against the admin database */
#define SHL_CMD_NEEDS_PRIMARY (1u << 1)  /* needs a writable primary */
#define SHL_CMD_IN_TXN (1u << 2)         /* may run inside a multi-document transaction */
#define SHL_CMD_INTERNAL (1u << 3)       /* sent only by other cluster nodes */
#define SHL_CMD_TEST_ONLY (1u << 4)      /* exists only with enableTestCommands */
#define SHL_CMD_WRITE (1u << 5)          /* counts as a write (retryable write candidate) */
#define SHL_CMD_NO_FAILCOMMAND (1u << 6) /* failCommand never fails it */
#define SHL_CMD_HANDSHAKE (1u << 7)      /* allowed over legacy OP_QUERY */
/* A retryable write (insert, update, delete, findAndModify): accepts a txnNumber outside a
 * transaction, and its retryable errors carry the RetryableWriteError label. */
#define SHL_CMD_RETRYABLE_WRITE (1u << 8)
/* Runs without authentication (hello, isMaster, ping, buildInfo, and src/auth's saslStart,
 * saslContinue, authenticate, logout, connectionStatus): it may not carry a txnNumber
 * (50889). */
#define SHL_CMD_NO_AUTH (1u << 9)
/* accepts readConcern {level: "snapshot"} outside a transaction (find, aggregate, distinct,
 * getMore); the dispatcher refuses it for every other command (a high bit, away from the
 * flags other work adds). */
#define SHL_CMD_SNAPSHOT_READ (1u << 20)

/*
 * A command's run function: 'cmd' is the request body; 'reply' is an empty document
 * to fill (without "ok"). Return 0 on success (the dispatcher appends ok: 1) or an
 * error code with 'st' filled (the dispatcher discards 'reply' and builds the error
 * reply). Replies that are ok: 1 with partial failures (writeErrors) return 0.
 */
typedef int (*shl_command_run_fn)(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply,
                                  shl_status_t *st);

typedef struct shl_command {
    const char *name;
    const char *aliases[3];
    shl_command_run_fn run;
    unsigned flags;
    const char *help;
} shl_command_t;

typedef struct shl_command_registry shl_command_registry_t;

/* shl_command_registry_new / _destroy -- an empty registry. */
shl_command_registry_t *shl_command_registry_new(void);
void shl_command_registry_destroy(shl_command_registry_t *reg);

/*
 * shl_command_registry_add --
 *     Register 'cmd' (borrowed: must outlive the registry, normally static const).
 *     Test-only commands are skipped unless enableTestCommands is set. Not
 *     thread-safe: build the registry before serving.
 */
void shl_command_registry_add(shl_command_registry_t *reg, const shl_command_t *cmd);

/* shl_command_registry_find -- by name or alias, or NULL. Thread-safe once built. */
const shl_command_t *shl_command_registry_find(const shl_command_registry_t *reg, const char *name);

/*
 * shl_command_registry_count --
 *     Count one run of 'cmd' (a command of this registry; NULL: a name no command has) for
 *     serverStatus metrics.commands, as failed when 'failed'. Thread-safe (atomics), lock-free.
 */
void shl_command_registry_count(shl_command_registry_t *reg, const shl_command_t *cmd,
                                bool failed);

/*
 * shl_command_registry_append_metrics --
 *     Append MongoDB's serverStatus metrics.commands to 'metrics':
 *     {commands: {"<UNKNOWN>": n, <name>: {failed, total}, ...}} for every registered
 *     command, by name. Thread-safe.
 */
void shl_command_registry_append_metrics(shl_command_registry_t *reg, bson_t *metrics);

/* shl_command_registry_list -- append {name: {help, adminOnly, ...}} for listCommands. */
void shl_command_registry_list(const shl_command_registry_t *reg, bson_t *out);

#endif
