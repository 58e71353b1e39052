/*
 * write_ops.h -- the pieces of insert/update/delete commands that do not touch
 * storage: statement parsing with MongoDB's errors and the result accumulator that
 * builds n / nModified / upserted / writeErrors in MongoDB's reply shape. The router
 * reuses the same result shape when it reassembles per-shard batches.
 */
#ifndef SHL_DB_WRITE_OPS_H
#define SHL_DB_WRITE_OPS_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

/* One statement of an update command; documents are static views into the command. */
typedef struct shl_update_stmt {
    bson_t q;
    bson_t u; /* a document, or an array (pipeline) when u_pipeline */
    bool u_pipeline;
    bool u_replacement; /* u has no $-operators: a replacement document */
    bool upsert;
    bool multi;
    bool has_array_filters;
    bson_t array_filters;
    bool has_hint;
    bson_value_t hint; /* borrowed: an index name (string) or key pattern (document) */
    bool has_collation;
    bson_t collation;
    bool has_let;
    bson_t let; /* the statement's "c" constants, else the command's `let` variables */
} shl_update_stmt_t;

/* One statement of a delete command. */
typedef struct shl_delete_stmt {
    bson_t q;
    int32_t limit; /* 0 = all matching, 1 = one */
    bool has_hint;
    bson_value_t hint;
    bool has_collation;
    bson_t collation;
    bool has_let;
    bson_t let; /* the command's `let` variables (a view the command keeps alive) */
} shl_delete_stmt_t;

/*
 * shl_update_stmt_parse / shl_delete_stmt_parse --
 *     Parse one element of "updates" / "deletes". 'stmt' must stay alive while the
 *     result is used. Errors: IDLFailedToParse (missing q/u), TypeMismatch,
 *     IDLUnknownField, FailedToParse (multi replacement, delete limit not 0/1).
 */
int shl_update_stmt_parse(const bson_t *stmt, shl_update_stmt_t *out, shl_status_t *st);
int shl_delete_stmt_parse(const bson_t *stmt, shl_delete_stmt_t *out, shl_status_t *st);

/* Accumulates the outcome of a write command's statements. */
typedef struct shl_write_result {
    int64_t n;
    int64_t n_modified;
    bson_t upserted; /* array of {index, _id} */
    uint32_t n_upserted;
    bson_t write_errors; /* array of {index, code, errmsg, ...extra} */
    uint32_t n_errors;
    bson_t retried; /* array of the statement ids a retryable write answered from history */
    uint32_t n_retried;
} shl_write_result_t;

void shl_write_result_init(shl_write_result_t *res);
void shl_write_result_cleanup(shl_write_result_t *res);

/* shl_write_result_add_error -- record statement 'index' failed with 'st'. */
void shl_write_result_add_error(shl_write_result_t *res, int32_t index, const shl_status_t *st);

/* shl_write_result_add_upserted -- record statement 'index' upserted a document with 'id'. */
void shl_write_result_add_upserted(shl_write_result_t *res, int32_t index, const bson_value_t *id);

/* shl_write_result_add_retried -- statement 'stmt_id' had run before: its result was reused. */
void shl_write_result_add_retried(shl_write_result_t *res, int32_t stmt_id);

/*
 * shl_write_result_append --
 *     Append n, [nModified], [upserted], [writeErrors], [retriedStmtIds] to 'reply'
 *     ('is_update' adds nModified and upserted as MongoDB's update reply has them).
 */
void shl_write_result_append(const shl_write_result_t *res, bool is_update, bson_t *reply);

/*
 * shl_write_batch_check --
 *     Validate a batch's size: non-empty, at most maxWriteBatchSize (100,000)
 *     statements. Errors: InvalidLength (16) as MongoDB's.
 */
int shl_write_batch_check(const char *cmd, const char *field, uint32_t n, shl_status_t *st);

#endif
