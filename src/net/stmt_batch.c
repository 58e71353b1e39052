/*
 * stmt_batch.c -- write statements cut to the limits of the command they feed (stmt_batch.h).
 */
#include "net/stmt_batch.h"

#include "base/status.h"
#include "bson/bson_util.h"

void
shl_stmt_batch_init(shl_stmt_batch_t *b)
{
    bson_init(&b->stmts);
    b->n = 0;
}

void
shl_stmt_batch_cleanup(shl_stmt_batch_t *b)
{
    bson_destroy(&b->stmts);
    b->n = 0;
}

void
shl_stmt_batch_clear(shl_stmt_batch_t *b)
{
    bson_reinit(&b->stmts);
    b->n = 0;
}

bool
shl_stmt_batch_has_room(const shl_stmt_batch_t *b, uint32_t stmt_len)
{
    return b->n == 0 || (b->n < SHL_MAX_WRITE_BATCH &&
                         shl_bson_array_has_room(&b->stmts, b->n, stmt_len,
                                                 SHL_STMT_BATCH_MAX_BYTES));
}

void
shl_stmt_batch_append(shl_stmt_batch_t *b, const bson_t *stmt)
{
    char key[16];
    const char *k;

    bson_uint32_to_string(b->n, &k, key, sizeof(key));
    SHL_INVARIANT(bson_append_document(&b->stmts, k, -1, stmt));
    b->n++;
}

void
shl_stmt_batch_append_to(const shl_stmt_batch_t *b, bson_t *cmd, const char *field)
{
    SHL_INVARIANT(bson_append_array(cmd, field, -1, &b->stmts));
}
