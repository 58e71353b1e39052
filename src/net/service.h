/*
 * service.h -- the service entry point: turns a request into a command run and the
 * command's outcome into a reply (the one place replies get ok/errmsg/code and the
 * role's decorations). Also runs commands in-process for internal callers.
 */
#ifndef SHL_NET_SERVICE_H
#define SHL_NET_SERVICE_H

#include <bson/bson.h>
#include <stdbool.h>

#include "net/command.h"
#include "net/message.h"
#include "net/server.h"

/*
 * shl_service_handle_message --
 *     Parse and execute one message received on 'conn' and write its reply.
 *     Returns false when the connection must be closed (fatal parse error, failed
 *     write, failCommand closeConnection, shutdown).
 */
bool shl_service_handle_message(shl_service_ctx_t *svc, shl_conn_t *conn, const uint8_t *buf,
                                size_t len);

/*
 * shl_service_run_command --
 *     Run the command 'body' against database 'db' as if received on 'conn' (which
 *     may be NULL for in-process callers) and fill 'reply' (initialised by the
 *     callee) with the complete reply, ok field included.
 */
void shl_service_run_command(shl_service_ctx_t *svc, shl_conn_t *conn, const bson_t *body,
                             const char *db, bson_t *reply);

/* shl_conn_write_all -- send all bytes; false on a broken connection. */
bool shl_conn_write_all(shl_conn_t *conn, const uint8_t *buf, size_t n);

/*
 * shl_conn_write_msg --
 *     Send one message made of 'prefix' then 'body' without joining them first: one
 *     sendmsg when the socket takes it all (through the connection's TLS, joined, when it
 *     has one). Blocks until all is sent; false on a broken connection. Only the
 *     connection's own thread writes to it.
 */
bool shl_conn_write_msg(shl_conn_t *conn, const uint8_t *prefix, size_t prefix_len,
                        const uint8_t *body, size_t body_len);

/*
 * Actions of MongoDB's failCommand fail point for one command (failpoint_cmd.c). It fires for a
 * command when its data's filters match (failCommands by name or alias, or failAllCommands;
 * appName, namespace, threadName; internal clients only with failInternalCommands) and it
 * asks for something to happen: before the command runs closeConnection, blockConnection or
 * errorCode (shl_fail_command_check), after it ran a writeConcernError
 * (shl_fail_command_check_wce); each firing counts against its times/skip mode.
 */
typedef struct shl_fail_command_action {
    bool fire;
    bool close_connection;
    bool block;               /* blockConnection: true */
    int64_t block_ms;         /* blockTimeMS, when block and the value is usable */
    int block_error;          /* InvalidOptions when blockTimeMS is missing or negative */
    const char *block_errmsg; /* its message (static) */
    int error_code;           /* 0: run the command */
    bool has_extra_info;
    bson_t extra_info; /* errorExtraInfo: fields added to the error reply, when has_extra_info */
    bool has_labels;
    bson_t labels; /* errorLabels override (array), when has_labels */
    bool has_wce;
    bson_t write_concern_error;
    bool allow_rewrite_state_change; /* a router rewrites state-change errors all the same */
} shl_fail_command_action_t;

/*
 * shl_fail_command_check --
 *     Evaluate failCommand for 'cmd' run by 'op' (which counts as one activation when it
 *     fires) and fill 'act' (always initialised; clean it up with
 *     shl_fail_command_action_cleanup). Never blocks.
 */
void shl_fail_command_check(shl_op_ctx_t *op, const shl_command_t *cmd,
                            shl_fail_command_action_t *act);

/*
 * shl_fail_command_check_wce --
 *     The second evaluation, after the command ran (its reply an answer or an error): fires
 *     only for data with a writeConcernError document (counting one activation), filling
 *     act->has_wce/write_concern_error and act->has_labels/labels. Same contract otherwise.
 */
void shl_fail_command_check_wce(shl_op_ctx_t *op, const shl_command_t *cmd,
                                shl_fail_command_action_t *act);
void shl_fail_command_action_cleanup(shl_fail_command_action_t *act);

#endif
