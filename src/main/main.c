/*
 * main.c -- the `shale` binary: `shale node` (data node: standalone, --shardsvr or
 * --configsvr), `shale router`, `shale up|down|status` (a local cluster,
 * cluster_cli.h). DESIGN.md section 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/options.h"
#include "auth/auth.h"
#include "config/configsvr.h"
#include "db/node.h"
#include "main/cli.h"
#include "repl/repl.h"
#include "main/cluster_cli.h"
#include "net/command.h"
#include "net/server.h"
#include "net/tls.h"
#include "net/service_context.h"
#include "router/router.h"
#include "shard/shard.h"

static void
usage(FILE *out)
{
    fprintf(out, "usage: shale <command> [options]\n"
                 "  node [--port N] [--bind_ip IP] [--dbpath DIR] [--replSet NAME]\n"
                 "       [--shardsvr | --configsvr] [--logpath FILE]\n"
                 "       [--setParameter name=value]...   run a data node\n"
                 "  router --configdb SET/HOST:PORT [--port N] [--bind_ip IP] [--logpath FILE]\n"
                 "       [--setParameter name=value]...   run a router\n"
                 "  up [--shards N] [--dbpath DIR] [--port P] [--bind_ip IP]\n"
                 "                          start a local cluster: config server, N shards\n"
                 "                          (default 2) and a router on P (default 27017)\n"
                 "  down [--dbpath DIR]      stop the cluster started in DIR\n"
                 "  status [--dbpath DIR | --host HOST:PORT] [--verbose]\n"
                 "                          print the cluster's shards, databases and chunks\n");
}

/* "host:port" this process is known as: the first bind address and the port. */
static void
set_me(shl_service_ctx_t *svc)
{
    char bind0[128];
    const char *ips = shl_opt_str(SHL_OPT_bind_ip);
    size_t n = strcspn(ips, ",");

    snprintf(bind0, sizeof(bind0), "%.*s", (int)n, ips);
    if (strcmp(bind0, "0.0.0.0") == 0 || bind0[0] == '\0') {
        snprintf(bind0, sizeof(bind0), "127.0.0.1");
    }
    snprintf(svc->me, sizeof(svc->me), "%s:%d", bind0, (int)shl_opt_int(SHL_OPT_port));
}

/* Parse the command line and open the log; 0, or the exit code. */
static int
start_common(const char *what, int argc, char **argv, bson_t **av, bson_t **parsed)
{
    shl_status_t st = SHL_STATUS_INIT;

    if (shl_cli_parse(argc, argv, 2, av, parsed, &st) != 0) {
        fprintf(stderr, "shale %s: %s\n", what, st.reason);
        usage(stderr);
        return 2;
    }
    if (shl_opt_str(SHL_OPT_logpath)[0] != '\0' && shl_log_open(shl_opt_str(SHL_OPT_logpath))) {
        fprintf(stderr, "shale %s: cannot open log file %s\n", what, shl_opt_str(SHL_OPT_logpath));
        return 1;
    }
    shl_log_set_verbosity((int)shl_opt_int(SHL_OPT_logLevel));
    return 0;
}

/* Listen and serve until shutdown; the process exit code. */
static int
serve(shl_service_ctx_t *svc)
{
    shl_status_t st = SHL_STATUS_INIT;

    if (shl_server_start(svc, shl_opt_str(SHL_OPT_bind_ip), (int)shl_opt_int(SHL_OPT_port), &st) !=
        0) {
        SHL_LOG_ERROR(CONTROL, 4615613, "cannot listen", "error", BCON_UTF8(st.reason));
        return 48; /* MongoDB's exit code for a listener failure */
    }
    return shl_server_wait(svc);
}

/* Access control and the user commands every role has (src/auth), before the role starts:
 * its first outgoing connections already authenticate with the key file. 0 or the exit code. */
static int
auth_init(shl_service_ctx_t *svc, shl_command_registry_t *reg)
{
    shl_status_t st = SHL_STATUS_INIT;
    int rc = 0;

    if (shl_auth_init(svc, reg, &st) != 0) {
        fprintf(stderr, "shale: %s\n", st.reason);
        SHL_LOG_ERROR(CONTROL, 4615701, "access control start-up failed", "error",
                      BCON_UTF8(st.reason));
        rc = 1;
    }
    return rc;
}

/* TLS (net/tls.h) from the tls* options, before the listener and the first outgoing
 * connection; 0 or the exit code. */
static int
tls_init(void)
{
    shl_status_t st = SHL_STATUS_INIT;
    int rc = 0;

    if (shl_tls_init(&st) != 0) {
        fprintf(stderr, "shale: %s\n", st.reason);
        SHL_LOG_ERROR(CONTROL, 4615751, "TLS start-up failed", "error", BCON_UTF8(st.reason));
        rc = 1;
    }
    return rc;
}

/* What a role's start-up returns when a signal stopped it before it was up: exit 0. */
#define RC_STOPPED_IN_STARTUP (-1)

/* A role's start-up: prepare 'svc' and register its commands; 0, RC_STOPPED_IN_STARTUP or
 * the exit code. */
typedef int (*role_init_fn)(shl_service_ctx_t *svc, shl_command_registry_t *reg);

/*
 * The life of a serving process: parse the command line, pick the role ('role_of' checks
 * the options: 0 or an exit code), build the service context, start the role, serve until
 * shutdown, clean up. Returns the exit code.
 */
static int
run_process(const char *what, int argc, char **argv, int (*role_of)(shl_role_t *role),
            role_init_fn init)
{
    shl_service_ctx_t svc;
    shl_command_registry_t *reg = shl_command_registry_new();
    bson_t *av = NULL, *parsed = NULL;
    shl_role_t role = SHL_ROLE_STANDALONE;
    int rc = 0;

    if ((rc = start_common(what, argc, argv, &av, &parsed)) != 0 || (rc = role_of(&role)) != 0) {
        goto done;
    }
    shl_service_ctx_init(&svc, role);
    svc.cmdline_argv = av;
    svc.cmdline_parsed = parsed;
    av = parsed = NULL;
    svc.commands = reg;
    snprintf(svc.set_name, sizeof(svc.set_name), "%s", shl_opt_str(SHL_OPT_replSet));
    set_me(&svc);
    /* Signals first: a SIGTERM during start-up (a long recovery, a router waiting for its
     * config server) is a clean shutdown once the role is up, or ends the wait. */
    shl_server_install_signal_handlers(&svc);
    if ((rc = tls_init()) == 0 && (rc = auth_init(&svc, reg)) == 0 && (rc = init(&svc, reg)) == 0) {
        rc = serve(&svc);
    } else if (rc == RC_STOPPED_IN_STARTUP) {
        if (svc.hooks.shutdown != NULL) {
            svc.hooks.shutdown(&svc);
        }
        rc = 0;
    }
    shl_service_ctx_cleanup(&svc);
done:
    if (av != NULL) {
        bson_destroy(av);
    }
    if (parsed != NULL) {
        bson_destroy(parsed);
    }
    shl_command_registry_destroy(reg);
    return rc;
}

static int
node_role(shl_role_t *role)
{
    int rc = 0;

    if (shl_opt_bool(SHL_OPT_shardsvr) && shl_opt_bool(SHL_OPT_configsvr)) {
        fprintf(stderr, "shale node: --shardsvr and --configsvr are exclusive\n");
        rc = 2;
    } else if (shl_opt_bool(SHL_OPT_shardsvr)) {
        *role = SHL_ROLE_SHARDSVR;
    } else if (shl_opt_bool(SHL_OPT_configsvr)) {
        *role = SHL_ROLE_CONFIGSVR;
    }
    return rc;
}

static int
node_init(shl_service_ctx_t *svc, shl_command_registry_t *reg)
{
    shl_status_t st = SHL_STATUS_INIT;

    SHL_LOG_INFO(CONTROL, 4615611, "Shale starting", "pid", BCON_INT64(getpid()), "port",
                 BCON_INT32((int32_t)shl_opt_int(SHL_OPT_port)), "dbPath",
                 BCON_UTF8(shl_opt_str(SHL_OPT_dbpath)));
    int rc = 0;

    shl_repl_preinit(svc);
    if (shl_node_init(svc, reg, &st) != 0) {
        SHL_LOG_ERROR(CONTROL, 4615612, "start-up failed", "error", BCON_UTF8(st.reason));
        rc = 1;
    } else if (shl_repl_init(svc, reg, &st) != 0) {
        SHL_LOG_ERROR(CONTROL, 4615618, "replication start-up failed", "error",
                      BCON_UTF8(st.reason));
        rc = 1;
    } else if (svc->role == SHL_ROLE_SHARDSVR && shl_shard_init(svc, reg, &st) != 0) {
        SHL_LOG_ERROR(CONTROL, 4615616, "sharding start-up failed", "error", BCON_UTF8(st.reason));
        rc = 1;
    } else if (svc->role == SHL_ROLE_CONFIGSVR && shl_configsvr_init(svc, reg, &st) != 0) {
        SHL_LOG_ERROR(CONTROL, 4615617, "config server start-up failed", "error",
                      BCON_UTF8(st.reason));
        rc = 1;
    }
    return rc;
}

static int
router_role(shl_role_t *role)
{
    *role = SHL_ROLE_ROUTER;
    return 0;
}

static int
router_init(shl_service_ctx_t *svc, shl_command_registry_t *reg)
{
    shl_status_t st = SHL_STATUS_INIT;

    SHL_LOG_INFO(CONTROL, 4615614, "Shale router starting", "pid", BCON_INT64(getpid()), "port",
                 BCON_INT32((int32_t)shl_opt_int(SHL_OPT_port)), "configdb",
                 BCON_UTF8(shl_opt_str(SHL_OPT_configdb)));
    int rc = 0;

    if (shl_router_init(svc, reg, shl_opt_str(SHL_OPT_configdb), &st) != 0 &&
        st.code == SHL_CODE_INTERRUPTED_AT_SHUTDOWN) {
        /* Stopped while it waited for the config server: a clean exit, as mongos's. */
        SHL_LOG_INFO(CONTROL, 22850, "Shutdown called before the router finished starting up");
        rc = RC_STOPPED_IN_STARTUP;
    } else if (st.code != 0) {
        fprintf(stderr, "shale router: %s\n", st.reason);
        SHL_LOG_ERROR(CONTROL, 4615615, "start-up failed", "error", BCON_UTF8(st.reason));
        rc = 2;
    }
    return rc;
}

int
main(int argc, char **argv)
{
    int rc = 2;

    shl_options_init();
    if (argc < 2) {
        usage(stderr);
    } else if (strcmp(argv[1], "node") == 0) {
        rc = run_process("node", argc, argv, node_role, node_init);
    } else if (strcmp(argv[1], "router") == 0) {
        rc = run_process("router", argc, argv, router_role, router_init);
    } else if (strcmp(argv[1], "up") == 0) {
        rc = shl_cluster_up_main(argc, argv);
    } else if (strcmp(argv[1], "down") == 0) {
        rc = shl_cluster_down_main(argc, argv);
    } else if (strcmp(argv[1], "status") == 0) {
        rc = shl_cluster_status_main(argc, argv);
    } else if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        rc = 0;
    } else {
        fprintf(stderr, "shale: unknown command '%s'\n", argv[1]);
        usage(stderr);
    }
    return rc;
}
