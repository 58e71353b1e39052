/*
 * stmt_batch.h -- the statements of one write command that a process sends (an insert's
 * documents, an update's updates, a delete's deletes), cut to the limits the receiver
 * enforces: at most SHL_MAX_WRITE_BATCH statements, and a command within
 * SHL_MAX_BSON_SIZE (the statements' array leaves SHL_STMT_BATCH_RESERVE bytes for the
 * command's other fields). Producers append while shl_stmt_batch_has_room() says so, send
 * the batch, clear it and go on. See docs/limits.md.
 */
#ifndef SHL_NET_STMT_BATCH_H
#define SHL_NET_STMT_BATCH_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "net/message.h"

/* Room left in a command for its fields other than the statements. */
#define SHL_STMT_BATCH_RESERVE (16 * 1024)
#define SHL_STMT_BATCH_MAX_BYTES (SHL_MAX_BSON_SIZE - SHL_STMT_BATCH_RESERVE)

typedef struct shl_stmt_batch {
    bson_t stmts; /* the statements as an array's elements ("0", "1", ...), owned */
    uint32_t n;   /* statements in 'stmts' */
} shl_stmt_batch_t;

/* shl_stmt_batch_init / _cleanup -- an empty batch in caller's storage; free it. */
void shl_stmt_batch_init(shl_stmt_batch_t *b);
void shl_stmt_batch_cleanup(shl_stmt_batch_t *b);

/* shl_stmt_batch_clear -- empty the batch (after it was sent). */
void shl_stmt_batch_clear(shl_stmt_batch_t *b);

/*
 * shl_stmt_batch_has_room --
 *     Whether a statement of 'stmt_len' bytes still fits: fewer than SHL_MAX_WRITE_BATCH
 *     statements and the array within SHL_STMT_BATCH_MAX_BYTES. True for an empty batch
 *     whatever the size (a lone statement is the receiver's to judge).
 */
bool shl_stmt_batch_has_room(const shl_stmt_batch_t *b, uint32_t stmt_len);

/* shl_stmt_batch_append -- add a statement (copied). Check has_room first. */
void shl_stmt_batch_append(shl_stmt_batch_t *b, const bson_t *stmt);

/* shl_stmt_batch_append_to -- append the statements to 'cmd' as the array 'field'. */
void shl_stmt_batch_append_to(const shl_stmt_batch_t *b, bson_t *cmd, const char *field);

#endif
