/*
 * session_args.c -- session arguments checked by every role (session_args.h).
 */
#include "session/session_args.h"

#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"

int
shl_session_check_args(const shl_op_ctx_t *op, const shl_command_t *cmd, bool replicated,
                       shl_status_t *st)
{
    int ret = 0;

    if (!op->has_txn_number) {
        goto done;
    }
    /* MongoDB's order: initializeOperationSessionInfo's checks, then validateSessionOptions. */
    if (cmd->flags & SHL_CMD_NO_AUTH) {
        SHL_FAIL(st, 50889, "It is illegal to provide a txnNumber for this command");
    }
    if (!op->has_lsid) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "Transaction number requires a session ID to also be specified");
    }
    if (!replicated) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "Transaction numbers are only allowed on a replica set member or mongos");
    }
    if (op->txn_number < 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Transaction number cannot be negative");
    }
    if (!op->has_autocommit && !(cmd->flags & SHL_CMD_RETRYABLE_WRITE)) {
        SHL_FAIL(st, SHL_CODE_NOT_A_RETRYABLE_WRITE_COMMAND,
                 "txnNumber may only be provided for multi-document transactions and retryable "
                 "write commands. autocommit:false was not provided, and %s is not a retryable "
                 "write command.",
                 cmd->name);
    }
done:
    return ret;
}

int
shl_session_stmt_ids(const bson_t *cmd, uint32_t n, int32_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, arr;
    int32_t *ids = bson_malloc0((n + 1) * sizeof(*ids));
    int32_t first = 0;
    bool has_first = false, has_array = false;
    uint32_t i = 0;

    *out = NULL;
    if (shl_bson_iter_find_key(&it, cmd, "stmtId")) {
        if (!BSON_ITER_HOLDS_INT32(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field 'stmtId' is the wrong type '%s', expected type 'int'",
                     shl_bson_type_name(shl_iter_type(&it)));
        }
        first = bson_iter_int32(&it);
        has_first = true;
    }
    if (shl_bson_iter_find_key(&it, cmd, "stmtIds")) {
        if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &arr)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field 'stmtIds' is the wrong type '%s', expected type 'array'",
                     shl_bson_type_name(shl_iter_type(&it)));
        }
        has_array = true;
        while (shl_iter_next(&arr)) {
            if (!BSON_ITER_HOLDS_INT32(&arr)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'stmtIds.%s' is the wrong type '%s', expected type 'int'",
                         shl_iter_key(&arr), shl_bson_type_name(shl_iter_type(&arr)));
            }
            if (i < n) {
                ids[i] = bson_iter_int32(&arr);
            }
            i++;
        }
        /* MongoDB checks the count first, then that stmtId is not given too. */
        if (i != n) {
            SHL_FAIL(st, SHL_CODE_INVALID_LENGTH,
                     "Number of statement ids must match the number of batch entries. Got %u "
                     "statement ids but %u operations.",
                     i, n);
        }
        if (has_first) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "May not specify both stmtId and stmtIds in write command.");
        }
    }
    if (!has_array) {
        for (i = 0; i < n; i++) {
            ids[i] = first + (int32_t)i;
        }
    }
    *out = ids;
    ids = NULL;
done:
    bson_free(ids);
    return ret;
}
