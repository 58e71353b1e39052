/*
 * session_args.h -- the session arguments of a request as every role checks them (MongoDB's
 * initializeOperationSessionInfo; seeds/001 "Logical Sessions", "Retryable writes"): which
 * commands may carry a txnNumber, and the statement ids of a write command's statements.
 */
#ifndef SHL_SESSION_SESSION_ARGS_H
#define SHL_SESSION_SESSION_ARGS_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "net/command.h"
#include "net/op_context.h"

/*
 * shl_session_check_args --
 *     Whether the lsid / txnNumber of 'op' are acceptable for 'cmd' on this process
 *     ('replicated': a replica set member or a router; a standalone refuses txnNumbers).
 *     Checked in MongoDB's order. Errors: 50889 for a txnNumber on a command that runs
 *     without authentication (hello, ping); InvalidOptions (72) for a txnNumber without lsid
 *     or a negative one; IllegalOperation (20) on a standalone; NotARetryableWriteCommand
 *     (50768) for a txnNumber on a command that is not a retryable write.
 */
int shl_session_check_args(const shl_op_ctx_t *op, const shl_command_t *cmd, bool replicated,
                           shl_status_t *st);

/*
 * shl_session_stmt_ids --
 *     The statement ids of the 'n' statements of the write command 'cmd': its `stmtIds`
 *     array (one int32 per statement, sent by routers), or consecutive ids from its `stmtId`
 *     (0 when absent). *out (n entries) is bson_malloc'ed; bson_free it. Errors: TypeMismatch
 *     for ids that are not int32, InvalidLength (16) when `stmtIds` has another length than
 *     the statements, InvalidOptions when both are given.
 */
int shl_session_stmt_ids(const bson_t *cmd, uint32_t n, int32_t **out, shl_status_t *st);

#endif
