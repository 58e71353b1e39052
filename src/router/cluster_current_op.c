/*
 * cluster_current_op.c -- currentOp, the $currentOp stage and killOp through the router, as
 * mongos runs them: every shard's operations (its currentOp), each tagged with `shard`, its
 * opid made "<shard>:<opid>" and its `client` shown as `client_s`; $currentOp's localOps
 * lists the router's own operations instead. killOp of "<shard>:<opid>" is forwarded to that
 * shard; a number kills one of the router's own operations.
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/str.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/command_args.h"
#include "query/pipeline.h"
#include "router/cluster_routing.h"
#include "router/router_commands.h"
#include "router/router_private.h"

/* The options of a listing: idle connections ($all / idleConnections), local (localOps). */
typedef struct cop_opts {
    bool all;
    bool local;
} cop_opts_t;

/* Append shard 'name''s currentOp document 'd' to 'out' under 'key', as mongos shows it. */
static void
append_tagged(const char *name, const bson_t *d, const char *key, bson_t *out)
{
    bson_t doc;
    bson_iter_t it;

    BSON_APPEND_DOCUMENT_BEGIN(out, key, &doc);
    BSON_APPEND_UTF8(&doc, "shard", name);
    if (bson_iter_init(&it, d)) {
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (strcmp(k, "opid") == 0 && BSON_ITER_HOLDS_NUMBER(&it)) {
                char id[SHL_SHARD_ID_MAX + 24];
                snprintf(id, sizeof(id), "%s:%lld", name, (long long)bson_iter_as_int64(&it));
                BSON_APPEND_UTF8(&doc, "opid", id);
            } else if (strcmp(k, "client") == 0) {
                bson_append_value(&doc, "client_s", -1, bson_iter_value(&it));
            } else if (strcmp(k, "shard") != 0) {
                bson_append_iter(&doc, NULL, 0, &it);
            }
        }
    }
    bson_append_document_end(out, &doc);
}

/*
 * The operations in progress, appended to the array 'docs' from *n on: the router's own
 * (localOps), or every shard's, asked with currentOp in parallel. A shard's failure fails
 * the listing with its error.
 */
/* What each shard is asked: its currentOp, with the user's $all. */
static void
current_op_build(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    (void)rr;
    (void)shard;
    BSON_APPEND_INT32(cmd, "currentOp", 1);
    BSON_APPEND_BOOL(cmd, "$all", ((const cop_opts_t *)arg)->all);
}

static int
current_op_docs(shl_op_ctx_t *op, const cop_opts_t *o, bson_t *docs, uint32_t *n, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    size_t ns = 0;
    shl_router_shard_result_t *res = NULL;
    int ret = 0;

    if (o->local) {
        shl_op_list_append(op->svc, docs, n);
        goto done;
    }
    SHL_ERR(shl_router_send_to_all(r, op, "admin", false, current_op_build, (void *)(uintptr_t)o,
                                   &res, &ns, st));
    for (size_t i = 0; i < ns; i++) {
        bson_iter_t it, arr;
        if (res[i].res.code != 0) {
            *st = res[i].res.status;
            SHL_ERR(st->code);
        }
        if (!bson_iter_init_find(&it, &res[i].res.reply, "inprog") || !BSON_ITER_HOLDS_ARRAY(&it) ||
            !bson_iter_recurse(&it, &arr)) {
            continue;
        }
        while (shl_iter_next(&arr)) {
            const uint8_t *data;
            uint32_t len;
            bson_t d;
            char key[16];
            const char *kp;
            if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
                continue;
            }
            bson_iter_document(&arr, &len, &data);
            if (!bson_init_static(&d, data, len)) {
                continue;
            }
            bson_uint32_to_string((*n)++, &kp, key, sizeof(key));
            append_tagged(res[i].shard, &d, kp, docs);
        }
    }
done:
    shl_router_scatter_results_free(res, ns);
    return ret;
}

/* ---- currentOp ---- */

/*
 * {currentOp: 1, $all?, $ownOps?, <filter>...}: every shard's operations matching the
 * filter, sorted by shard (mongos runs it as $currentOp + $match + $sort {shard: 1}), in
 * {inprog: [...]}.
 */
static int
cmd_current_op(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_t docs = BSON_INITIALIZER, stages = BSON_INITIALIZER, stage, sort, inprog;
    cop_opts_t o = {false, false};
    uint32_t n = 0, k = 0;
    bool own = false;
    int ret = 0;

    SHL_ERR(shl_cmd_get_bool(cmd, "$all", &o.all, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "$ownOps", &own, st));
    SHL_ERR(current_op_docs(op, &o, &docs, &n, st));
    shl_current_op_append_match(cmd, "0", &stages);
    BSON_APPEND_DOCUMENT_BEGIN(&stages, "1", &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&stage, "$sort", &sort);
    BSON_APPEND_INT32(&sort, "shard", 1);
    bson_append_document_end(&stage, &sort);
    bson_append_document_end(&stages, &stage);
    BSON_APPEND_ARRAY_BEGIN(reply, "inprog", &inprog);
    ret = shl_pipeline_run_array(&docs, &stages, &inprog, &k, st);
    bson_append_array_end(reply, &inprog);
    SHL_ERR(ret);
done:
    bson_destroy(&docs);
    bson_destroy(&stages);
    return ret;
}

/* ---- $currentOp ---- */

int
router_current_op_aggregate(shl_op_ctx_t *op, const bson_t *cmd, const bson_t *pipeline,
                            bson_t *reply, shl_status_t *st)
{
    bson_t docs = BSON_INITIALIZER, rest = BSON_INITIALIZER, out = BSON_INITIALIZER;
    bson_iter_t it, stage;
    cop_opts_t o = {false, false};
    shl_current_op_spec_t spec;
    uint32_t n = 0, k = 0, r = 0;
    int ret = 0;

    if (!bson_has_field(cmd, "cursor")) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "The 'cursor' option is required, except for aggregate with the explain "
                 "argument");
    }
    bson_iter_init(&it, pipeline);
    shl_iter_next(&it);
    if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &stage) ||
        !shl_iter_next(&stage)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "invalid $currentOp stage");
    }
    SHL_ERR(shl_current_op_spec_parse(&stage, true, &spec, st));
    o.all = spec.idle_connections;
    o.local = spec.local_ops;
    while (shl_iter_next(&it)) {
        char key[16];
        const char *kp;
        bson_iter_t inner;
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &inner) &&
            shl_iter_next(&inner) && strcmp(shl_iter_key(&inner), "$currentOp") == 0) {
            SHL_FAIL(st, 40602, "$currentOp is only valid as the first stage in a pipeline");
        }
        bson_uint32_to_string(r++, &kp, key, sizeof(key));
        bson_append_value(&rest, kp, -1, bson_iter_value(&it));
    }
    SHL_ERR(current_op_docs(op, &o, &docs, &n, st));
    SHL_ERR(shl_pipeline_run_array(&docs, &rest, &out, &k, st));
    /* One batch: the whole result fits a reply as mongos's (16 MiB of operations). */
    shl_router_cursor_reply(reply, "admin.$cmd.aggregate", 0, true, &out, false);
done:
    bson_destroy(&docs);
    bson_destroy(&rest);
    bson_destroy(&out);
    return ret;
}

/* ---- killOp ---- */

/*
 * {killOp: 1, op: "<shard>:<opid>"} is forwarded to that shard as {killOp: 1, op: opid},
 * its answer ignored (mongos always succeeds once the op string parses), and the reply
 * names the shard and opid; {op: <number>} kills one of the router's own operations.
 * Errors: 50759 no op, 50760 another type, 28625 a malformed string, ShardNotFound.
 */
static int
cmd_kill_op(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    bson_iter_t it;
    shl_router_request_t req;
    shl_fanout_result_t res;
    bool sent = false;
    int ret = 0;

    memset(&req, 0, sizeof(req));
    bson_init(&req.cmd);
    if (!bson_iter_init_find(&it, cmd, "op")) {
        SHL_FAIL(st, 50759, "Did not provide \"op\" field");
    }
    if (BSON_ITER_HOLDS_NUMBER(&it)) {
        int64_t id = bson_iter_as_int64(&it);
        if (id < INT32_MIN || id > INT32_MAX) {
            SHL_FAIL(st, 26823, "invalid op : %lld. Op ID cannot be represented with 32 bits",
                     (long long)id);
        }
        (void)shl_op_kill(op->svc, id);
    } else if (BSON_ITER_HOLDS_UTF8(&it)) {
        const char *s = bson_iter_utf8(&it, NULL), *colon = strchr(s, ':');
        char shard[SHL_SHARD_ID_MAX], host[SHL_CLIENT_HOST_MAX];
        char *end = NULL;
        long long id;
        size_t len = strlen(s);
        if (len < 3 || colon == NULL || colon == s || colon == s + len - 1) {
            SHL_FAIL(st, 28625,
                     "The op argument to killOp must be of the format shardid:opid but found "
                     "\"%s\"",
                     s);
        }
        snprintf(shard, sizeof(shard), "%.*s", (int)(colon - s), s);
        SHL_ERR(shl_shard_registry_host_for(r->registry, shard, host, sizeof(host), st));
        id = strtoll(colon + 1, &end, 10);
        if (end == NULL || *end != '\0' || id < INT32_MIN || id > INT32_MAX) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Did not consume whole string.");
        }
        SHL_LOG_INFO(COMMAND, 22754, "About to kill op", "opToKill", BCON_UTF8(s));
        BSON_APPEND_UTF8(reply, "shard", shard);
        BSON_APPEND_INT32(reply, "shardid", (int32_t)id);
        req.shard = shard;
        BSON_APPEND_INT32(&req.cmd, "killOp", 1);
        BSON_APPEND_INT32(&req.cmd, "op", (int32_t)id);
        shl_router_send(r, op, "admin", &req, 1, &res);
        sent = true;
    } else {
        SHL_FAIL(st, 50760, "\"op\" field was of unsupported type %s",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
done:
    if (sent) {
        shl_fanout_results_cleanup(&res, 1);
    }
    bson_destroy(&req.cmd);
    return ret;
}

static const shl_command_t k_current_op_commands[] = {
    {"currentOp",
     {NULL},
     cmd_current_op,
     SHL_CMD_ADMIN_ONLY,
     "every shard's operations in progress, tagged with their shard"},
    {"killOp",
     {NULL},
     cmd_kill_op,
     SHL_CMD_ADMIN_ONLY,
     "interrupt an operation: \"<shard>:<opid>\" on that shard, a number on the router"},
};

void
shl_cluster_current_op_commands_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(k_current_op_commands) / sizeof(k_current_op_commands[0]); i++) {
        shl_command_registry_add(reg, &k_current_op_commands[i]);
    }
}
