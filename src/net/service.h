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
 * Actions of MongoDB's failCommand fail point for one command (failpoint_cmd.c).
 * shl_fail_command_check fills 'act' when the fail point fires for this command.
 */
typedef struct shl_fail_command_action {
    bool fire;
    bool close_connection;
    int64_t block_ms;
    int error_code; /* 0: run the command */
    bool has_labels;
    bson_t labels; /* errorLabels override (array), when has_labels */
    bool has_wce;
    bson_t write_concern_error;
} shl_fail_command_action_t;

void shl_fail_command_check(shl_op_ctx_t *op, const char *cmd_name, shl_fail_command_action_t *act);
void shl_fail_command_action_cleanup(shl_fail_command_action_t *act);

#endif
