/*
 * cmd_hello.c -- the handshake: hello / isMaster / ismaster (with client metadata,
 * helloOk, internalClient), ping and buildInfo, answered with MongoDB 7.0's fields.
 */
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "net/common_commands.h"
#include "net/message.h"
#include "net/server.h"

static int
record_client(shl_op_ctx_t *op, const bson_t *cmd, shl_status_t *st)
{
    int ret = 0;
    shl_conn_t *conn = op->conn;
    bson_iter_t it, app;

    if (conn == NULL) {
        return 0;
    }
    if (bson_iter_init_find(&it, cmd, "internalClient") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        conn->internal = true;
    }
    if (bson_iter_init_find(&it, cmd, "client")) {
        const uint8_t *data;
        uint32_t len;
        bson_t view;
        if (conn->hello_seen && conn->client_metadata != NULL) {
            SHL_FAIL(st, SHL_CODE_CLIENT_METADATA_CANNOT_BE_MUTATED,
                     "The client metadata document may only be sent in the first hello");
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "'client' must be an object");
        }
        bson_iter_document(&it, &len, &data);
        if (len > 512) {
            SHL_FAIL(st, SHL_CODE_CLIENT_METADATA_DOCUMENT_TOO_LARGE,
                     "The client metadata document must be less then or equal to 512 bytes");
        }
        if (bson_init_static(&view, data, len)) {
            conn->client_metadata = bson_copy(&view);
            if (bson_iter_init_find(&app, &view, "application") && BSON_ITER_HOLDS_DOCUMENT(&app) &&
                bson_iter_recurse(&app, &app) && bson_iter_find(&app, "name") &&
                BSON_ITER_HOLDS_UTF8(&app)) {
                snprintf(conn->app_name, sizeof(conn->app_name), "%s", bson_iter_utf8(&app, NULL));
            }
            SHL_LOG_INFO(NETWORK, 51800, "client metadata", "remote", BCON_UTF8(conn->remote),
                         "client", BCON_UTF8(conn->app_name));
        }
    }
    conn->hello_seen = true;
done:
    return ret;
}

static int
run_hello(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st, bool legacy_name)
{
    int ret = 0;
    bson_iter_t it;
    shl_service_ctx_t *svc = op->svc;

    SHL_ERR(record_client(op, cmd, st));
    if (bson_iter_init_find(&it, cmd, "helloOk") && bson_iter_as_bool(&it)) {
        BSON_APPEND_BOOL(reply, "helloOk", true);
    }
    BSON_APPEND_BOOL(reply, legacy_name ? "ismaster" : "isWritablePrimary",
                     !atomic_load(&svc->shutting_down));
    if (svc->role == SHL_ROLE_ROUTER) {
        BSON_APPEND_UTF8(reply, "msg", "isdbgrid");
    } else if (svc->set_name[0] != '\0') {
        bson_t hosts;
        BSON_APPEND_ARRAY_BEGIN(reply, "hosts", &hosts);
        BSON_APPEND_UTF8(&hosts, "0", svc->me);
        bson_append_array_end(reply, &hosts);
        BSON_APPEND_UTF8(reply, "setName", svc->set_name);
        BSON_APPEND_INT32(reply, "setVersion", 1);
        BSON_APPEND_BOOL(reply, "secondary", false);
        BSON_APPEND_UTF8(reply, "primary", svc->me);
        BSON_APPEND_UTF8(reply, "me", svc->me);
    }
    if (svc->hooks.append_hello != NULL) {
        svc->hooks.append_hello(op, reply);
    }
    BSON_APPEND_INT32(reply, "maxBsonObjectSize", SHL_MAX_BSON_SIZE);
    BSON_APPEND_INT32(reply, "maxMessageSizeBytes", SHL_MAX_MESSAGE_SIZE);
    BSON_APPEND_INT32(reply, "maxWriteBatchSize", SHL_MAX_WRITE_BATCH);
    BSON_APPEND_DATE_TIME(reply, "localTime", shl_clock_wall_ms());
    BSON_APPEND_INT32(reply, "logicalSessionTimeoutMinutes",
                      (int32_t)shl_opt_int(SHL_OPT_localLogicalSessionTimeoutMinutes));
    BSON_APPEND_INT64(reply, "connectionId", op->conn != NULL ? op->conn->id : 0);
    BSON_APPEND_INT32(reply, "minWireVersion", SHL_MIN_WIRE_VERSION);
    BSON_APPEND_INT32(reply, "maxWireVersion", SHL_MAX_WIRE_VERSION);
    BSON_APPEND_BOOL(reply, "readOnly", false);
done:
    return ret;
}

static int
cmd_hello(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return run_hello(op, cmd, reply, st, false);
}

static int
cmd_is_master(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return run_hello(op, cmd, reply, st, true);
}

static int
cmd_ping(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)op;
    (void)cmd;
    (void)reply;
    (void)st;
    return 0;
}

static int
cmd_build_info(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_t arr, sub;
    (void)op;
    (void)cmd;
    (void)st;
    BSON_APPEND_UTF8(reply, "version", SHL_VERSION_STRING);
    BSON_APPEND_UTF8(reply, "gitVersion", "shale");
    BSON_APPEND_ARRAY_BEGIN(reply, "modules", &arr);
    bson_append_array_end(reply, &arr);
    BSON_APPEND_UTF8(reply, "allocator", "system");
    BSON_APPEND_UTF8(reply, "javascriptEngine", "none");
    BSON_APPEND_UTF8(reply, "sysInfo", "deprecated");
    BSON_APPEND_ARRAY_BEGIN(reply, "versionArray", &arr);
    BSON_APPEND_INT32(&arr, "0", 7);
    BSON_APPEND_INT32(&arr, "1", 0);
    BSON_APPEND_INT32(&arr, "2", 0);
    BSON_APPEND_INT32(&arr, "3", 0);
    bson_append_array_end(reply, &arr);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "openssl", &sub);
    BSON_APPEND_UTF8(&sub, "running", "disabled");
    BSON_APPEND_UTF8(&sub, "compiled", "disabled");
    bson_append_document_end(reply, &sub);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "buildEnvironment", &sub);
    BSON_APPEND_UTF8(&sub, "target_os", "linux");
    BSON_APPEND_UTF8(&sub, "target_arch", "x86_64");
    bson_append_document_end(reply, &sub);
    BSON_APPEND_INT32(reply, "bits", 64);
    BSON_APPEND_BOOL(reply, "debug", false);
    BSON_APPEND_INT32(reply, "maxBsonObjectSize", SHL_MAX_BSON_SIZE);
    BSON_APPEND_ARRAY_BEGIN(reply, "storageEngines", &arr);
    BSON_APPEND_UTF8(&arr, "0", "wiredTiger");
    bson_append_array_end(reply, &arr);
    return 0;
}

static const shl_command_t hello_cmd = {
    .name = "hello",
    .run = cmd_hello,
    .flags = SHL_CMD_HANDSHAKE | SHL_CMD_IN_TXN | SHL_CMD_NO_AUTH,
    .help = "describe this server's role and limits (the driver handshake)",
};
static const shl_command_t is_master_cmd = {
    .name = "isMaster",
    .aliases = {"ismaster"},
    .run = cmd_is_master,
    .flags = SHL_CMD_HANDSHAKE | SHL_CMD_IN_TXN | SHL_CMD_NO_AUTH,
    .help = "legacy name of hello",
};
static const shl_command_t ping_cmd = {
    .name = "ping",
    .run = cmd_ping,
    .flags = SHL_CMD_IN_TXN | SHL_CMD_NO_AUTH, /* not over OP_QUERY: only the handshake is */
    .help = "a no-op to test whether the server is responding",
};
static const shl_command_t build_info_cmd = {
    .name = "buildInfo",
    .aliases = {"buildinfo"},
    .run = cmd_build_info,
    .flags = SHL_CMD_HANDSHAKE | SHL_CMD_IN_TXN | SHL_CMD_NO_AUTH,
    .help = "version and build details",
};

void
shl_hello_commands_register(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &hello_cmd);
    shl_command_registry_add(reg, &is_master_cmd);
    shl_command_registry_add(reg, &ping_cmd);
    shl_command_registry_add(reg, &build_info_cmd);
}
