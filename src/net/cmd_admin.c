/*
 * cmd_admin.c -- diagnostic and administrative commands every process answers, with
 * MongoDB 7.0's fields and types: getParameter/setParameter over the options table,
 * serverStatus, hostInfo, getCmdLineOpts, whatsmyuri, listCommands,
 * getLog, the session commands (accepted until sessions land) and shutdown.
 */
#include <gnu/libc-version.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/command_args.h"
#include "net/common_commands.h"
#include "net/fiber.h"
#include "net/server.h"
#include "net/topology.h"

#define FCV_PARAM "featureCompatibilityVersion"
#define FCV_VERSION "7.0"
#define MAX_PARAMS (SHL_OPT_COUNT + 1)

/* ---------------------------------------------------------------- parameters */

/*
 * The server parameters: options settable with --setParameter or setParameter (flags
 * STARTUP or RUNTIME), plus featureCompatibilityVersion on data nodes. A param is an
 * option id, or -1 for featureCompatibilityVersion.
 */
typedef struct param {
    const char *name;
    int opt; /* option id, or -1 for featureCompatibilityVersion */
} param_t;

static int
param_cmp(const void *a, const void *b)
{
    return strcmp(((const param_t *)a)->name, ((const param_t *)b)->name);
}

/* Fill 'out' with the parameters in name order (MongoDB keeps them in a sorted map). */
static int
list_params(const shl_service_ctx_t *svc, param_t *out)
{
    int n = 0;
    for (int i = 0; i < SHL_OPT_COUNT; i++) {
        if (shl_opt_flags((shl_opt_id_t)i) & (SHL_OPT_STARTUP | SHL_OPT_RUNTIME)) {
            out[n].name = shl_opt_name((shl_opt_id_t)i);
            out[n].opt = i;
            n++;
        }
    }
    if (shl_service_is_data_node(svc)) {
        out[n].name = FCV_PARAM;
        out[n].opt = -1;
        n++;
    }
    qsort(out, (size_t)n, sizeof(out[0]), param_cmp);
    return n;
}

static const param_t *
find_param(const param_t *params, int n, const char *name)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(params[i].name, name) == 0) {
            return &params[i];
        }
    }
    return NULL;
}

/* Append the parameter's current value under 'key'. */
static void
append_param_value(const param_t *p, bson_t *doc, const char *key)
{
    bson_t tmp = BSON_INITIALIZER, sub;
    bson_iter_t it;

    if (p->opt < 0) {
        BSON_APPEND_DOCUMENT_BEGIN(doc, key, &sub);
        BSON_APPEND_UTF8(&sub, "version", FCV_VERSION);
        bson_append_document_end(doc, &sub);
    } else if (p->opt == SHL_OPT_logLevel) {
        /* The log's verbosity is the truth; the option only seeds it at start-up. */
        BSON_APPEND_INT32(doc, key, shl_log_get_verbosity());
    } else {
        shl_opt_append((shl_opt_id_t)p->opt, &tmp);
        if (bson_iter_init(&it, &tmp) && shl_iter_next(&it)) {
            bson_append_iter(doc, key, -1, &it);
        }
    }
    bson_destroy(&tmp);
}

static bool
param_runtime(const param_t *p)
{
    return p->opt >= 0 && (shl_opt_flags((shl_opt_id_t)p->opt) & SHL_OPT_RUNTIME);
}

static bool
param_startup(const param_t *p)
{
    return p->opt >= 0 && (shl_opt_flags((shl_opt_id_t)p->opt) & SHL_OPT_STARTUP);
}

typedef struct get_options {
    bool all;
    bool show_details;
    int set_at; /* 0: any, 1: runtime, 2: startup */
} get_options_t;

/* The getParameter field's value: "*", a document of options, or anything else. */
static int
parse_get_options(const bson_iter_t *first, get_options_t *o, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    memset(o, 0, sizeof(*o));
    if (BSON_ITER_HOLDS_UTF8(first) && strcmp(bson_iter_utf8(first, NULL), "*") == 0) {
        o->all = true;
    } else if (BSON_ITER_HOLDS_DOCUMENT(first) && bson_iter_recurse(first, &it)) {
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (strcmp(k, "allParameters") == 0 || strcmp(k, "showDetails") == 0) {
                if (!BSON_ITER_HOLDS_BOOL(&it)) {
                    SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                             "BSON field 'getParameter.%s' is the wrong type '%s', expected "
                             "type 'bool'",
                             k, shl_bson_type_name(shl_iter_type(&it)));
                }
                if (k[0] == 'a') {
                    o->all = bson_iter_bool(&it);
                } else {
                    o->show_details = bson_iter_bool(&it);
                }
            } else if (strcmp(k, "setAt") == 0) {
                const char *v = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
                if (strcmp(v, "runtime") == 0) {
                    o->set_at = 1;
                } else if (strcmp(v, "startup") == 0) {
                    o->set_at = 2;
                } else {
                    SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                             "Enumeration value '%s' for field 'getParameter.setAt' is not a "
                             "valid value.",
                             v);
                }
            } else {
                SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                         "BSON field 'getParameter.%s' is an unknown field.", k);
            }
        }
    }
done:
    return ret;
}

static int
cmd_get_parameter(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    param_t params[MAX_PARAMS];
    int n = list_params(op->svc, params);
    get_options_t o;
    bson_iter_t first;
    bool found = false;

    bson_iter_init(&first, cmd);
    shl_iter_next(&first);
    SHL_ERR(parse_get_options(&first, &o, st));
    for (int i = 0; i < n; i++) {
        const param_t *p = &params[i];
        bson_iter_t it;
        if ((!o.all && !bson_iter_init_find(&it, cmd, p->name)) ||
            (o.set_at == 1 && !param_runtime(p)) || (o.set_at == 2 && !param_startup(p))) {
            continue;
        }
        if (o.show_details) {
            bson_t detail;
            BSON_APPEND_DOCUMENT_BEGIN(reply, p->name, &detail);
            append_param_value(p, &detail, "value");
            BSON_APPEND_BOOL(&detail, "settableAtRuntime", param_runtime(p));
            BSON_APPEND_BOOL(&detail, "settableAtStartup", param_startup(p));
            bson_append_document_end(reply, &detail);
        } else {
            append_param_value(p, reply, p->name);
        }
        found = true;
    }
    if (!found) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "no option found to get");
    }
done:
    return ret;
}

/* Check a new value the way MongoDB's typed parameters coerce it, before setting. */
static int
check_new_value(const param_t *p, const bson_iter_t *v, shl_status_t *st)
{
    int ret = 0;
    bson_t probe = BSON_INITIALIZER;
    bson_iter_t cur;

    shl_opt_append((shl_opt_id_t)p->opt, &probe);
    bson_iter_init(&cur, &probe);
    shl_iter_next(&cur);
    if (BSON_ITER_HOLDS_INT(&cur)) {
        if (!BSON_ITER_HOLDS_NUMBER(v) ||
            (BSON_ITER_HOLDS_DOUBLE(v) &&
             bson_iter_double(v) != (double)(int64_t)bson_iter_double(v))) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Invalid value for parameter %s: %s", p->name,
                     BSON_ITER_HOLDS_NUMBER(v) ? "not an integer"
                                               : shl_bson_type_name(shl_iter_type(v)));
        }
        if (p->opt == SHL_OPT_logLevel && bson_iter_as_int64(v) < 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Invalid value for logLevel: %" PRId64,
                     bson_iter_as_int64(v));
        }
    } else if (BSON_ITER_HOLDS_BOOL(&cur)) {
        if (!BSON_ITER_HOLDS_BOOL(v) && !BSON_ITER_HOLDS_NUMBER(v)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Invalid value for parameter %s: expected a bool",
                     p->name);
        }
    }
done:
    bson_destroy(&probe);
    return ret;
}

static int
cmd_set_parameter(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    param_t params[MAX_PARAMS];
    int n = list_params(op->svc, params);
    /* The parameters to set, in name order like MongoDB's std::map. */
    struct {
        const param_t *p;
        bson_iter_t value;
    } todo[MAX_PARAMS];
    int ntodo = 0;
    bson_iter_t it;

    bson_iter_init(&it, cmd);
    shl_iter_next(&it); /* the command name itself */
    while (shl_iter_next(&it)) {
        const char *name = shl_iter_key(&it);
        const param_t *p;
        if (shl_cmd_is_generic_arg(name)) {
            continue;
        }
        p = find_param(params, n, name);
        if (p == NULL) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "attempted to set unrecognized parameter [%s], use help:true to see "
                     "options ",
                     name);
        }
        if (!param_runtime(p)) {
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "not allowed to change [%s] at runtime", name);
        }
        if ((shl_opt_flags((shl_opt_id_t)p->opt) & SHL_OPT_TEST) &&
            !shl_opt_bool(SHL_OPT_enableTestCommands)) {
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "setting [%s] requires enableTestCommands=1",
                     name);
        }
        for (int i = 0; i < ntodo; i++) {
            if (todo[i].p == p) {
                SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                         "attempted to set parameter [%s] twice in the same setParameter "
                         "command",
                         name);
            }
        }
        SHL_ERR(check_new_value(p, &it, st));
        /* Insertion sort keeps todo[] in name order. */
        int at = ntodo++;
        while (at > 0 && strcmp(todo[at - 1].p->name, p->name) > 0) {
            todo[at] = todo[at - 1];
            at--;
        }
        todo[at].p = p;
        todo[at].value = it;
    }
    if (ntodo == 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "no option found to set, use help:true to see options ");
    }
    for (int i = 0; i < ntodo; i++) {
        const param_t *p = todo[i].p;
        bson_t old = BSON_INITIALIZER;
        bson_iter_t oldit;

        append_param_value(p, &old, "was");
        bson_iter_init(&oldit, &old);
        shl_iter_next(&oldit);
        if (i == 0) {
            /* Only the first parameter set reports its old value, as in MongoDB. */
            bson_append_iter(reply, "was", -1, &oldit);
        }
        ret = shl_opt_set_iter((shl_opt_id_t)p->opt, &todo[i].value, st);
        if (ret == 0 && p->opt == SHL_OPT_logLevel) {
            shl_log_set_verbosity((int)shl_opt_int(SHL_OPT_logLevel));
        }
        if (ret == 0) {
            SHL_LOG_INFO(COMMAND, 23435, "Successfully set parameter to new value", "parameterName",
                         BCON_UTF8(p->name), "newValue", BCON_ITER(&todo[i].value), "oldValue",
                         BCON_ITER(&oldit));
        }
        bson_destroy(&old);
        if (ret != 0) {
            goto done;
        }
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- status */

/* "hostname:port" as MongoDB's prettyHostName (the port is left out when 27017). */
static void
pretty_host_name(char *out, size_t n)
{
    char host[256] = "localhost";
    int64_t port = shl_opt_int(SHL_OPT_port);

    if (gethostname(host, sizeof(host)) != 0) {
        snprintf(host, sizeof(host), "localhost");
    }
    host[sizeof(host) - 1] = '\0';
    if (port == 27017) {
        snprintf(out, n, "%s", host);
    } else {
        snprintf(out, n, "%s:%lld", host, (long long)port);
    }
}

/* Whether the caller asked to leave a serverStatus section out ({repl: 0}). */
static bool
section_wanted(const bson_t *cmd, const char *section)
{
    bson_iter_t it;
    return !bson_iter_init_find(&it, cmd, section) || bson_iter_as_bool(&it);
}

static void
append_mem(bson_t *reply)
{
    bson_t sub;
    long long size = 0, resident = 0;
    long page = sysconf(_SC_PAGESIZE);
    FILE *f = fopen("/proc/self/statm", "r");
    bool ok = false;

    if (f != NULL) {
        ok = fscanf(f, "%lld %lld", &size, &resident) == 2;
        fclose(f);
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "mem", &sub);
    BSON_APPEND_INT32(&sub, "bits", (int32_t)(sizeof(void *) * 8));
    if (ok && page > 0) {
        BSON_APPEND_INT32(&sub, "resident", (int32_t)(resident * page / (1024 * 1024)));
        BSON_APPEND_INT32(&sub, "virtual", (int32_t)(size * page / (1024 * 1024)));
        BSON_APPEND_BOOL(&sub, "supported", true);
    } else {
        BSON_APPEND_BOOL(&sub, "supported", false);
    }
    bson_append_document_end(reply, &sub);
}

static int
cmd_server_status(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_service_ctx_t *svc = op->svc;
    shl_counters_t *c = &svc->counters;
    char host[300];
    int64_t up_ms = (shl_clock_mono_us() - svc->start_mono_us) / 1000;
    bson_t sub;
    (void)st;

    pretty_host_name(host, sizeof(host));
    BSON_APPEND_UTF8(reply, "host", host);
    BSON_APPEND_UTF8(reply, "version", SHL_VERSION_STRING);
    BSON_APPEND_UTF8(reply, "process", svc->role == SHL_ROLE_ROUTER ? "mongos" : "mongod");
    BSON_APPEND_INT64(reply, "pid", (int64_t)getpid());
    BSON_APPEND_DOUBLE(reply, "uptime",
                       (double)((shl_clock_wall_ms() - svc->start_wall_ms) / 1000));
    BSON_APPEND_INT64(reply, "uptimeMillis", up_ms);
    BSON_APPEND_INT64(reply, "uptimeEstimate", up_ms / 1000);
    BSON_APPEND_DATE_TIME(reply, "localTime", shl_clock_wall_ms());

    if (section_wanted(cmd, "connections")) {
        int64_t cur = atomic_load(&c->conn_current);
        BSON_APPEND_DOCUMENT_BEGIN(reply, "connections", &sub);
        BSON_APPEND_INT32(&sub, "current", (int32_t)cur);
        BSON_APPEND_INT32(&sub, "available", (int32_t)(shl_opt_int(SHL_OPT_maxConns) - cur));
        BSON_APPEND_INT32(&sub, "totalCreated", (int32_t)atomic_load(&c->conn_total));
        BSON_APPEND_INT32(&sub, "active", (int32_t)atomic_load(&c->conn_active));
        BSON_APPEND_INT32(&sub, "threaded", (int32_t)cur);
        BSON_APPEND_INT32(&sub, "exhaustIsMaster",
                          (int32_t)atomic_load(&svc->topology.exhaust_is_master));
        BSON_APPEND_INT32(&sub, "exhaustHello", (int32_t)atomic_load(&svc->topology.exhaust_hello));
        BSON_APPEND_INT32(&sub, "awaitingTopologyChanges", shl_topology_waiting(svc));
        bson_append_document_end(reply, &sub);
    }
    if (section_wanted(cmd, "mem")) {
        append_mem(reply);
    }
    if (section_wanted(cmd, "network")) {
        int64_t in = atomic_load(&c->bytes_in), out = atomic_load(&c->bytes_out);
        BSON_APPEND_DOCUMENT_BEGIN(reply, "network", &sub);
        BSON_APPEND_INT64(&sub, "bytesIn", in);
        BSON_APPEND_INT64(&sub, "bytesOut", out);
        BSON_APPEND_INT64(&sub, "physicalBytesIn", in);
        BSON_APPEND_INT64(&sub, "physicalBytesOut", out);
        BSON_APPEND_INT64(&sub, "numSlowDNSOperations", 0);
        BSON_APPEND_INT64(&sub, "numSlowSSLOperations", 0);
        BSON_APPEND_INT64(&sub, "numRequests", atomic_load(&c->num_requests));
        if (shl_fiber_active()) {
            /* Requests parked on the shared executor while they waited for a shard. */
            bson_t ex, sh;
            int64_t parks, fibers;
            shl_fiber_stats(&parks, &fibers);
            BSON_APPEND_DOCUMENT_BEGIN(&sub, "serviceExecutors", &ex);
            BSON_APPEND_DOCUMENT_BEGIN(&ex, "shared", &sh);
            BSON_APPEND_INT64(&sh, "parkedRequests", parks);
            BSON_APPEND_INT64(&sh, "fibers", fibers);
            bson_append_document_end(&ex, &sh);
            bson_append_document_end(&sub, &ex);
        }
        bson_append_document_end(reply, &sub);
    }
    if (section_wanted(cmd, "opcounters")) {
        BSON_APPEND_DOCUMENT_BEGIN(reply, "opcounters", &sub);
        BSON_APPEND_INT64(&sub, "insert", atomic_load(&c->op_insert));
        BSON_APPEND_INT64(&sub, "query", atomic_load(&c->op_query));
        BSON_APPEND_INT64(&sub, "update", atomic_load(&c->op_update));
        BSON_APPEND_INT64(&sub, "delete", atomic_load(&c->op_delete));
        BSON_APPEND_INT64(&sub, "getmore", atomic_load(&c->op_getmore));
        BSON_APPEND_INT64(&sub, "command", atomic_load(&c->op_command));
        bson_append_document_end(reply, &sub);
    }
    if (svc->role == SHL_ROLE_ROUTER && section_wanted(cmd, "metrics")) {
        /* A data node's metrics section (db/node.c) carries the commands with its own
         * metrics; a router has only these. */
        BSON_APPEND_DOCUMENT_BEGIN(reply, "metrics", &sub);
        shl_command_registry_append_metrics(svc->commands, &sub);
        bson_append_document_end(reply, &sub);
    }
    if (svc->hooks.append_server_status != NULL) {
        svc->hooks.append_server_status(svc, reply);
    }
    return 0;
}

/* PRETTY_NAME from /etc/os-release, as MongoDB reports the distribution. */
static void
os_name(char *out, size_t n)
{
    FILE *f = fopen("/etc/os-release", "r");
    char line[512];

    snprintf(out, n, "Linux");
    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "PRETTY_NAME=", 12) == 0) {
            char *v = line + 12;
            size_t len = strcspn(v, "\n");
            if (len >= 2 && v[0] == '"' && v[len - 1] == '"') {
                v++;
                len -= 2;
            }
            snprintf(out, n, "%.*s", (int)len, v);
            break;
        }
    }
    fclose(f);
}

static int
cmd_host_info(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    struct utsname u;
    struct rlimit rl;
    bson_t sys, os, extra;
    char host[300], name[256], version[300];
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    int64_t mem_mb = pages > 0 && page > 0 ? (int64_t)pages * page / (1024 * 1024) : 0;
    (void)op;
    (void)cmd;
    (void)st;

    if (uname(&u) != 0) {
        memset(&u, 0, sizeof(u));
    }
    pretty_host_name(host, sizeof(host));
    os_name(name, sizeof(name));
    snprintf(version, sizeof(version), "Kernel %s", u.release);

    BSON_APPEND_DOCUMENT_BEGIN(reply, "system", &sys);
    BSON_APPEND_DATE_TIME(&sys, "currentTime", shl_clock_wall_ms());
    BSON_APPEND_UTF8(&sys, "hostname", host);
    BSON_APPEND_INT32(&sys, "cpuAddrSize", (int32_t)(sizeof(void *) * 8));
    BSON_APPEND_INT64(&sys, "memSizeMB", mem_mb);
    BSON_APPEND_INT64(&sys, "memLimitMB", mem_mb);
    BSON_APPEND_INT32(&sys, "numCores", (int32_t)sysconf(_SC_NPROCESSORS_ONLN));
    BSON_APPEND_UTF8(&sys, "cpuArch", u.machine);
    BSON_APPEND_BOOL(&sys, "numaEnabled", false);
    bson_append_document_end(reply, &sys);

    BSON_APPEND_DOCUMENT_BEGIN(reply, "os", &os);
    BSON_APPEND_UTF8(&os, "type", "Linux");
    BSON_APPEND_UTF8(&os, "name", name);
    BSON_APPEND_UTF8(&os, "version", version);
    bson_append_document_end(reply, &os);

    BSON_APPEND_DOCUMENT_BEGIN(reply, "extra", &extra);
    BSON_APPEND_UTF8(&extra, "versionString", u.version);
    BSON_APPEND_UTF8(&extra, "libcVersion", gnu_get_libc_version());
    BSON_APPEND_UTF8(&extra, "kernelVersion", u.release);
    BSON_APPEND_INT64(&extra, "pageSize", (int64_t)page);
    BSON_APPEND_INT32(&extra, "numPages", (int32_t)pages);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        BSON_APPEND_INT32(&extra, "maxOpenFiles", (int32_t)rl.rlim_cur);
    }
    bson_append_document_end(reply, &extra);
    return 0;
}

static int
cmd_get_cmd_line_opts(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_t empty = BSON_INITIALIZER;
    (void)cmd;
    (void)st;
    BSON_APPEND_ARRAY(reply, "argv",
                      op->svc->cmdline_argv != NULL ? op->svc->cmdline_argv : &empty);
    BSON_APPEND_DOCUMENT(reply, "parsed",
                         op->svc->cmdline_parsed != NULL ? op->svc->cmdline_parsed : &empty);
    bson_destroy(&empty);
    return 0;
}

static int
cmd_whats_my_uri(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    (void)cmd;
    (void)st;
    BSON_APPEND_UTF8(reply, "you", op->conn != NULL ? op->conn->remote : "");
    return 0;
}

static int
cmd_list_commands(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_t commands;
    (void)cmd;
    (void)st;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "commands", &commands);
    shl_command_registry_list(op->svc->commands, &commands);
    bson_append_document_end(reply, &commands);
    return 0;
}

static int
cmd_get_log(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bson_t arr;
    const char *name;
    (void)op;

    bson_iter_init(&it, cmd);
    shl_iter_next(&it);
    if (!BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'getLog.getLog' is the wrong type '%s', expected type 'string'",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    name = bson_iter_utf8(&it, NULL);
    if (strcmp(name, "*") == 0) {
        BSON_APPEND_ARRAY_BEGIN(reply, "names", &arr);
        BSON_APPEND_UTF8(&arr, "0", "global");
        BSON_APPEND_UTF8(&arr, "1", "startupWarnings");
        bson_append_array_end(reply, &arr);
    } else if (strcmp(name, "global") == 0) {
        BSON_APPEND_INT64(reply, "totalLinesWritten", shl_log_lines_written());
        BSON_APPEND_ARRAY_BEGIN(reply, "log", &arr);
        shl_log_recent(&arr, 1024);
        bson_append_array_end(reply, &arr);
    } else if (strcmp(name, "startupWarnings") == 0) {
        BSON_APPEND_INT64(reply, "totalLinesWritten", 0);
        BSON_APPEND_ARRAY_BEGIN(reply, "log", &arr);
        bson_append_array_end(reply, &arr);
    } else {
        SHL_FAIL(st, SHL_CODE_OPERATION_FAILED, "No log named '%s'", name);
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- shutdown */

/*
 * shutdown: like MongoDB, the caller gets no reply; its connection closes and the
 * process exits 0 after running operations finish (up to timeoutSecs, default 15).
 */
static int
cmd_shutdown(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool force = false;
    int64_t timeout_secs = 15;
    (void)reply;

    if (bson_iter_init_find(&it, cmd, "force")) {
        if (!BSON_ITER_HOLDS_BOOL(&it) && !BSON_ITER_HOLDS_NUMBER(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field 'shutdown.force' is the wrong type '%s', expected type 'bool'",
                     shl_bson_type_name(shl_iter_type(&it)));
        }
        force = bson_iter_as_bool(&it);
    }
    if (bson_iter_init_find(&it, cmd, "timeoutSecs")) {
        if (!BSON_ITER_HOLDS_NUMBER(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field 'shutdown.timeoutSecs' is the wrong type '%s', expected types "
                     "'[long, int, decimal, double']",
                     shl_bson_type_name(shl_iter_type(&it)));
        }
        timeout_secs = bson_iter_as_int64(&it);
        if (timeout_secs < 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "timeoutSecs must be non-negative");
        }
    }
    SHL_LOG_INFO(COMMAND, 4695400, "Terminating via shutdown command", "force", BCON_BOOL(force),
                 "timeoutSecs", BCON_INT64(timeout_secs));
    if (op->conn != NULL) {
        /* No reply: the service closes this connection, and shutdown does not wait on it. */
        atomic_store(&op->conn->close_now, true);
    }
    shl_server_shutdown_and_wait(op->svc, force ? 0 : timeout_secs * 1000);
done:
    return ret;
}

/* ---------------------------------------------------------------- registry */

/*
 * {logRotate: 1 | "server"}: rotate this process's log file (routers rotate only their own,
 * as mongos does). "audit" names a log Shale does not have. Errors: FileRenameFailed.
 */
static int
cmd_log_rotate(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_iter_t it;
    char renamed[4200];
    bool rotated = false;
    int err, ret = 0;
    (void)op;
    (void)reply;

    if (bson_iter_init(&it, cmd) && shl_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), "server") != 0) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "Unknown log type for rotate: %s",
                 bson_iter_utf8(&it, NULL));
    }
    err = shl_log_rotate(renamed, sizeof(renamed), &rotated);
    if (err != 0) {
        SHL_FAIL(st, SHL_CODE_FILE_RENAME_FAILED, "Log rotation failed: %s", strerror(err));
    }
    if (rotated) {
        SHL_LOG_INFO(CONTROL, 23166, "Log rotation initiated", "renamedTo", BCON_UTF8(renamed));
    }
done:
    return ret;
}

/*
 * {_killOperations: 1, operationKeys: [UUID, ...]}: kill the operations in progress that
 * carry one of those clientOperationKeys (what a router sends when the operation that sent
 * them is killed). As MongoDB's, it succeeds whether or not any such operation runs.
 * Errors: IDL's for a missing or malformed operationKeys (40414, TypeMismatch).
 */
static int
cmd_kill_operations(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_iter_t it, keys;
    int ret = 0;

    (void)reply;
    if (!bson_iter_init_find(&it, cmd, "operationKeys")) {
        SHL_FAIL(st, 40414,
                 "BSON field 'KillOperationsRequest.operationKeys' is missing but a required "
                 "field");
    }
    if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &keys)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'KillOperationsRequest.operationKeys' is the wrong type '%s', "
                 "expected type 'array'",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    while (shl_iter_next(&keys)) {
        bson_subtype_t sub = BSON_SUBTYPE_BINARY;
        uint32_t len = 0;
        const uint8_t *data = NULL;
        if (BSON_ITER_HOLDS_BINARY(&keys)) {
            bson_iter_binary(&keys, &sub, &len, &data);
        }
        if (data == NULL || sub != BSON_SUBTYPE_UUID || len != SHL_OP_KEY_LEN) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field 'KillOperationsRequest.operationKeys' items must be UUIDs");
        }
        (void)shl_op_kill_by_key(op->svc, data);
    }
done:
    return ret;
}

static const shl_command_t admin_cmds[] = {
    {.name = "getParameter",
     .run = cmd_get_parameter,
     .flags = SHL_CMD_ADMIN_ONLY,
     .help = "get administrative option(s): {getParameter: 1, <name>: 1} or "
             "{getParameter: '*'}"},
    {.name = "setParameter",
     .run = cmd_set_parameter,
     .flags = SHL_CMD_ADMIN_ONLY,
     .help = "set administrative option(s): {setParameter: 1, <name>: <value>}"},
    {.name = "serverStatus",
     .run = cmd_server_status,
     .help = "returns lots of administrative server statistics"},
    {.name = "hostInfo",
     .run = cmd_host_info,
     .help = "returns information about the daemon's host"},
    {.name = "getCmdLineOpts",
     .run = cmd_get_cmd_line_opts,
     .flags = SHL_CMD_ADMIN_ONLY,
     .help = "get argv"},
    {.name = "whatsmyuri", .run = cmd_whats_my_uri, .help = "{whatsmyuri: 1}"},
    {.name = "listCommands", .run = cmd_list_commands, .help = "get a list of all db commands"},
    {.name = "getLog",
     .run = cmd_get_log,
     .flags = SHL_CMD_ADMIN_ONLY,
     .help = "{ getLog : '*' }  OR { getLog : 'global' }"},
    {.name = "_killOperations",
     .run = cmd_kill_operations,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     .help = "kill the operations that carry the given clientOperationKeys"},
    {.name = "logRotate",
     .run = cmd_log_rotate,
     .flags = SHL_CMD_ADMIN_ONLY,
     .help = "rotate the log file (--logpath): rename it and open a new one"},
    {.name = "shutdown",
     .run = cmd_shutdown,
     .flags = SHL_CMD_ADMIN_ONLY,
     .help = "shutdown the database: {shutdown: 1, force: <bool>, timeoutSecs: <n>}"},
};

void
shl_admin_commands_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(admin_cmds) / sizeof(admin_cmds[0]); i++) {
        shl_command_registry_add(reg, &admin_cmds[i]);
    }
}
