/*
 * txn_api.h -- the router's transaction API (seeds/000 "Transaction API", "Internal
 * Transactions"; docs/design/transactions.md "Internal transactions"): run a callback's
 * statements as one transaction through the router's own TransactionRouter, on behalf of a
 * user's command.
 *
 * Sessions:
 *   - the user's command is a statement of a client transaction (op->txn): the callback runs
 *     once inside that transaction; the client commits, aborts and retries it;
 *   - otherwise an internal (child) session of the user's session (a fresh session when the
 *     command has none): lsid {id, uid, txnUUID} -- with txnNumber = the user's txnNumber
 *     when the command is a retryable write (a retryable internal transaction) -- whose
 *     transactions are numbered 0, 1, ... one per attempt.
 *
 * Retries (as MongoDB's TransactionWithRetries, at most ROUTER_TXN_API_MAX_RETRIES attempts,
 * bounded by the operation's interruption / maxTimeMS): an attempt whose callback or commit
 * fails with a transient transaction error (router_txn_transient) is aborted and run again
 * after a short backoff (n ms before attempt n + 1, at most 20);
 * a commit failing with UnknownTransactionCommitResult is retried as a commit. Any other
 * error aborts the transaction and is returned.
 *
 * While the callback runs, op->txn is the internal transaction and the operation looks like
 * a transaction's statement (autocommit: false), so every request it sends through the
 * router's command functions (router_write_run, router_find_and_modify_run, ...) is attached
 * to it (router_txn_attach). The operation's fields are restored afterwards.
 */
#ifndef SHL_ROUTER_TXN_API_H
#define SHL_ROUTER_TXN_API_H

#include <bson/bson.h>

#include "base/status.h"
#include "net/op_context.h"

/* MongoDB's limit on attempts of an internal transaction (the drivers' 2 minutes). */
#define ROUTER_TXN_API_MAX_RETRIES 120

/*
 * router_txn_api_fn -- one attempt's statements. Returns 0 to commit, an error (in 'st') to
 * abort; an error with the TransientTransactionError label or a transient code is retried.
 */
typedef int (*router_txn_api_fn)(shl_op_ctx_t *op, void *arg, shl_status_t *st);

/*
 * router_txn_api_run --
 *     Run 'fn' as a transaction for the user's command 'user_cmd' (its writeConcern and
 *     maxTimeMS go to the commit). Returns 0 once committed (or, in a client transaction,
 *     once fn succeeded), else the error.
 */
int router_txn_api_run(shl_op_ctx_t *op, const bson_t *user_cmd, router_txn_api_fn fn, void *arg,
                       shl_status_t *st);

/*
 * router_txn_api_stmt_id --
 *     Inside a callback of a retryable internal transaction (the user's command is a
 *     retryable write): 'stmt_id', the user's statement id that the next statement carries
 *     so the shards record it as the user's statement (session_catalog.h "child sessions").
 *     Otherwise -1: the statement carries none.
 */
int32_t router_txn_api_stmt_id(const shl_op_ctx_t *op, int32_t stmt_id);

/*
 * router_txn_api_reply_error --
 *     The first write error of a write command's 'reply' as a status (0: none). A statement
 *     of a transaction that has one fails the attempt.
 */
int router_txn_api_reply_error(const bson_t *reply, shl_status_t *st);

#endif
