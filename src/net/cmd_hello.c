/*
 * cmd_hello.c -- the handshake: hello / isMaster / ismaster (with client metadata,
 * helloOk, internalClient, topologyVersion and the awaitable form with maxAwaitTimeMS;
 * net/topology.h), ping and buildInfo, answered with MongoDB 7.0's fields.
 */
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/common_commands.h"
#include "net/message.h"
#include "net/server.h"
#include "net/topology.h"

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

/* The awaitable hello's arguments; has_version says whether the client sent them. */
typedef struct await_args {
    bool has_version;
    bson_oid_t process_id;
    int64_t counter;
    int64_t max_await_ms;
} await_args_t;

/* MongoDB's codes for the awaitable hello's errors: mongos has its own set. */
static int
await_code(const shl_service_ctx_t *svc, int node_code, int router_code)
{
    return svc->role == SHL_ROLE_ROUTER ? router_code : node_code;
}

/* topologyVersion as its IDL type parses it: {processId: objectId, counter: long}, exactly. */
static int
parse_topology_version(const bson_iter_t *field, await_args_t *a, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool have_pid = false, have_counter = false;

    if (!BSON_ITER_HOLDS_DOCUMENT(field) || !bson_iter_recurse(field, &it)) {
        SHL_FAIL(st, 10065, "invalid parameter: expected an object (topologyVersion)");
    }
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "processId") == 0) {
            if (!BSON_ITER_HOLDS_OID(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'TopologyVersion.processId' is the wrong type '%s', "
                         "expected type 'objectId'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            bson_oid_copy(bson_iter_oid(&it), &a->process_id);
            have_pid = true;
        } else if (strcmp(k, "counter") == 0) {
            if (!BSON_ITER_HOLDS_INT64(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'TopologyVersion.counter' is the wrong type '%s', "
                         "expected type 'long'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            a->counter = bson_iter_int64(&it);
            have_counter = true;
        } else {
            SHL_FAIL(st, 40415, "BSON field 'TopologyVersion.%s' is an unknown field.", k);
        }
    }
    if (!have_pid || !have_counter) {
        SHL_FAIL(st, 40414, "BSON field 'TopologyVersion.%s' is missing but a required field",
                 have_pid ? "counter" : "processId");
    }
    a->has_version = true;
done:
    return ret;
}

/*
 * topologyVersion and maxAwaitTimeMS come together or not at all; the counter and the wait
 * are not negative. Codes as MongoDB's (31368/31372/31373 on a node, 51760/51758/51759 on a
 * router).
 */
static int
parse_await_args(shl_service_ctx_t *svc, const bson_t *cmd, await_args_t *a, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool has_max = false;

    memset(a, 0, sizeof(*a));
    if (bson_iter_init_find(&it, cmd, "topologyVersion")) {
        SHL_ERR(parse_topology_version(&it, a, st));
    }
    if (bson_iter_init_find(&it, cmd, "maxAwaitTimeMS")) {
        if (!BSON_ITER_HOLDS_NUMBER(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field 'maxAwaitTimeMS' is the wrong type '%s', expected types "
                     "'[long, int, decimal, double]'",
                     shl_bson_type_name(shl_iter_type(&it)));
        }
        a->max_await_ms = bson_iter_as_int64(&it);
        has_max = true;
    }
    if (a->has_version != has_max) {
        SHL_FAIL(st, await_code(svc, 31368, 51760),
                 a->has_version ? "A request with a 'topologyVersion' must include 'maxAwaitTimeMS'"
                                : "A request with 'maxAwaitTimeMS' must include a "
                                  "'topologyVersion'");
    }
    if (a->has_version && a->counter < 0) {
        SHL_FAIL(st, await_code(svc, 31372, 51758),
                 "topologyVersion must have a non-negative counter");
    }
    if (has_max && a->max_await_ms < 0) {
        SHL_FAIL(st, await_code(svc, 31373, 51759),
                 "maxAwaitTimeMS must be a non-negative integer");
    }
done:
    return ret;
}

static int
run_hello(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st, bool legacy_name)
{
    int ret = 0;
    bson_iter_t it;
    shl_service_ctx_t *svc = op->svc;
    await_args_t aw;

    SHL_ERR(record_client(op, cmd, st));
    SHL_ERR(parse_await_args(svc, cmd, &aw, st));
    /* A router in quiesce mode turns every hello away, so clients move to another router
     * while what they already sent here still runs (seeds/000 "Quiesce mode on shutdown"). */
    if (svc->role == SHL_ROLE_ROUTER && shl_topology_quiescing(svc)) {
        SHL_FAIL(st, SHL_CODE_SHUTDOWN_IN_PROGRESS,
                 "The router is in quiesce mode and will shut down");
    }
    if (aw.has_version) {
        SHL_ERR(shl_topology_await(op, &aw.process_id, aw.counter, aw.max_await_ms,
                                   await_code(svc, 31382, 51761), st));
    }
    if (bson_iter_init_find(&it, cmd, "helloOk") && bson_iter_as_bool(&it)) {
        BSON_APPEND_BOOL(reply, "helloOk", true);
    }
    if (svc->role != SHL_ROLE_ROUTER && svc->hooks.append_set_hello != NULL) {
        svc->hooks.append_set_hello(op, reply, legacy_name);
    } else {
        BSON_APPEND_BOOL(reply, legacy_name ? "ismaster" : "isWritablePrimary",
                         !atomic_load(&svc->shutting_down));
    }
    if (svc->role == SHL_ROLE_ROUTER) {
        BSON_APPEND_UTF8(reply, "msg", "isdbgrid");
    } else if (svc->set_name[0] != '\0' && svc->hooks.append_set_hello == NULL) {
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
    if (svc->hooks.hello_auth != NULL) {
        svc->hooks.hello_auth(op, cmd, reply);
    }
    shl_topology_append(svc, reply, "topologyVersion");
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
