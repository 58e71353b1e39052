/*
 * cluster_cli.c -- `shale up` and `shale down` (cluster_cli.h); `shale status` is in
 * cluster_status.c. Processes are started from /proc/self/exe in their own session
 * (so a Ctrl-C in the terminal that ran `shale up` does not reach them), with stdio
 * and --logpath going to DIR/<name>.log; cluster.json records them as soon as they
 * are forked, so `shale down` can stop a cluster whose `shale up` was interrupted.
 */
#include "bson/bson_iter.h"
#include "auth/auth.h"
#include "main/cluster_cli.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "main/cluster_args.h"
#include "main/cluster_layout.h"
#include "net/client.h"

/* How long one process may take to answer hello after it was started. */
#define READY_TIMEOUT_MS 60000
/* How long `down` waits after SIGTERM before SIGKILL (a node's own shutdown is 15 s). */
#define STOP_TIMEOUT_MS 30000
/* How long addShard may take (the config server connects to the shard). */
#define ADD_SHARD_TIMEOUT_MS 60000

static int64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
proc_host(const shl_cluster_layout_t *lay, const shl_cluster_proc_t *p, char *out, size_t n)
{
    snprintf(out, n, "%s:%d", lay->host_ip, p->port);
}

/* Print the last 'lines' lines of DIR/<name>.log to stderr. */
static void
print_log_tail(const shl_cluster_layout_t *lay, const shl_cluster_proc_t *p, int lines)
{
    char path[SHL_CLUSTER_PATH_MAX + 64];
    char buf[8192];
    FILE *f;
    long size;
    size_t n;
    const char *start;
    int seen = 0;

    snprintf(path, sizeof(path), "%s/%s.log", lay->dir, p->name);
    if ((f = fopen(path, "r")) == NULL) {
        return;
    }
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0, SEEK_SET);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    start = buf;
    for (size_t i = n; i > 0; i--) {
        if (buf[i - 1] == '\n' && i != n && ++seen == lines) {
            start = buf + i;
            break;
        }
    }
    fprintf(stderr, "--- last lines of %s ---\n%s%s", path, start,
            n > 0 && buf[n - 1] != '\n' ? "\n" : "");
}

/* Whether something other than us could take 'port' on every address in 'bind_ip'. */
static int
check_port_free(const char *bind_ip, const char *who, int port, shl_status_t *st)
{
    int ret = 0;
    char ips[128], *save = NULL;

    snprintf(ips, sizeof(ips), "%s", bind_ip);
    for (char *ip = strtok_r(ips, ",", &save); ip != NULL; ip = strtok_r(NULL, ",", &save)) {
        struct addrinfo hints, *ai = NULL;
        char portstr[16];
        int fd, one = 1, err = 0;

        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
        snprintf(portstr, sizeof(portstr), "%d", port);
        if (getaddrinfo(ip, portstr, &hints, &ai) != 0 || ai == NULL) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "--bind_ip: '%s' is not an IP address", ip);
        }
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        /* The servers set SO_REUSEADDR too, so a port in TIME_WAIT counts as free. */
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
            bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            err = errno;
        }
        if (fd >= 0) {
            close(fd);
        }
        freeaddrinfo(ai);
        if (err == EADDRINUSE) {
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                     "port %d (for the %s) is already in use on %s; stop what listens there "
                     "or choose other ports with --port",
                     port, who, ip);
        } else if (err != 0) {
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "cannot listen on %s:%d (for the %s): %s", ip,
                     port, who, strerror(err));
        }
    }
done:
    return ret;
}

/*
 * Start one process detached: its own session, stdin from /dev/null, stdout/stderr
 * appended to DIR/<name>.log (its --logpath too, so early errors and the structured
 * log land together).
 */
/* Without --wiredTigerCacheSizeGB a node takes MongoDB's default for a machine of its own,
 * max(256 MiB, 50 % of (RAM - 1 GiB)); the cluster's data nodes share this machine, so each
 * gets that amount divided among them (at least 256 MiB) -- several caches each sized for the
 * whole machine would together outgrow its memory. Writes the size in GB into out. */
static void
shared_cache_gb(const shl_cluster_layout_t *lay, char *out, size_t n)
{
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
    int64_t ram_mb = pages > 0 && psize > 0 ? (int64_t)pages * psize / (1024 * 1024) : 1024;
    int64_t per_mb = (ram_mb - 1024) / 2;
    int nodes = 0;

    for (int i = 0; i < lay->nprocs; i++) {
        nodes += lay->procs[i].role != SHL_CLUSTER_ROUTER;
    }
    per_mb /= nodes > 0 ? nodes : 1;
    snprintf(out, n, "%.3f", (double)(per_mb < 256 ? 256 : per_mb) / 1024.0);
}

/* Whether the user gave the data nodes a cache size. */
static bool
cache_size_given(const shl_cluster_args_t *a)
{
    bool given = false;

    for (int i = 0; i < a->n_node_extra && !given; i++) {
        given = strcmp(a->node_extra[i], "--wiredTigerCacheSizeGB") == 0;
    }
    return given;
}

static int
spawn(const shl_cluster_layout_t *lay, shl_cluster_proc_t *p, const shl_cluster_args_t *a,
      shl_status_t *st)
{
    int ret = 0;
    char port[16], logpath[SHL_CLUSTER_PATH_MAX + 64], dbpath[SHL_CLUSTER_PATH_MAX + 64];
    char configdb[SHL_CLIENT_HOST_MAX], cache_gb[32];
    const char *argv[64 + 2 * SHL_CLUSTER_MAX_EXTRA];
    int n = 0;
    pid_t pid;

    snprintf(port, sizeof(port), "%d", p->port);
    snprintf(logpath, sizeof(logpath), "%s/%s.log", lay->dir, p->name);
    snprintf(dbpath, sizeof(dbpath), "%s/%s", lay->dir, p->name);
    shl_cluster_layout_set_string(lay, 0, configdb, sizeof(configdb));
    argv[n++] = "shale";
    if (p->role == SHL_CLUSTER_ROUTER) {
        argv[n++] = "router";
        argv[n++] = "--configdb";
        argv[n++] = configdb;
    } else {
        argv[n++] = "node";
        argv[n++] = p->role == SHL_CLUSTER_CONFIGSVR ? "--configsvr" : "--shardsvr";
        argv[n++] = "--replSet";
        argv[n++] = p->repl_set;
        argv[n++] = "--dbpath";
        argv[n++] = dbpath;
        if (mkdir(dbpath, 0755) != 0 && errno != EEXIST) {
            SHL_FAIL(st, SHL_CODE_FILE_OPEN_FAILED, "cannot create %s: %s", dbpath,
                     strerror(errno));
        }
        for (int i = 0; i < a->n_node_extra; i++) {
            argv[n++] = a->node_extra[i];
        }
        if (!cache_size_given(a)) {
            shared_cache_gb(lay, cache_gb, sizeof(cache_gb));
            argv[n++] = "--wiredTigerCacheSizeGB";
            argv[n++] = cache_gb;
        }
    }
    argv[n++] = "--port";
    argv[n++] = port;
    argv[n++] = "--bind_ip";
    argv[n++] = lay->bind_ip;
    argv[n++] = "--logpath";
    argv[n++] = logpath;
    for (int i = 0; i < a->n_all_extra; i++) {
        argv[n++] = a->all_extra[i];
    }
    argv[n] = NULL;

    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        int out = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
        setsid();
        if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) {
            _exit(127);
        }
        close_range(3, ~0U, 0);
        /* execv takes char *const[]; the strings are not modified. */
        execv("/proc/self/exe", (char *const *)(uintptr_t)argv);
        dprintf(2, "shale up: cannot run /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    p->pid = pid;
    p->start_ticks = shl_cluster_pid_start_ticks(pid);
done:
    return ret;
}

/*
 * Wait until 'p' answers hello as what it should be: a router (msg "isdbgrid"), or the
 * writable primary of its replica set. A process that exits meanwhile fails at once.
 */
static int
wait_ready(shl_conn_pool_t *pool, const shl_cluster_layout_t *lay, shl_cluster_proc_t *p,
           bool primary, shl_status_t *st)
{
    int ret = 0;
    int64_t deadline = now_ms() + READY_TIMEOUT_MS;
    char host[128];
    bson_t hello = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    int delay_ms = 5;

    proc_host(lay, p, host, sizeof(host));
    BSON_APPEND_INT32(&hello, "hello", 1);
    for (;;) {
        shl_status_t tmp = SHL_STATUS_INIT;
        bson_iter_t it;
        int wstatus;

        if (waitpid(p->pid, &wstatus, WNOHANG) == p->pid) {
            p->pid = 0;
            p->start_ticks = 0;
            SHL_FAIL(st, SHL_CODE_HOST_UNREACHABLE, "the %s (port %d) exited with %s %d", p->name,
                     p->port, WIFEXITED(wstatus) ? "code" : "signal",
                     WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WTERMSIG(wstatus));
        }
        bson_destroy(&reply);
        if (shl_client_run(pool, host, "admin", &hello, 2000, &reply, &tmp) == 0) {
            if (p->role == SHL_CLUSTER_ROUTER) {
                if (bson_iter_init_find(&it, &reply, "msg") && BSON_ITER_HOLDS_UTF8(&it) &&
                    strcmp(bson_iter_utf8(&it, NULL), "isdbgrid") == 0) {
                    break;
                }
                SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                         "%s answers, but not as a router (no msg: \"isdbgrid\")", host);
            }
            if (!bson_iter_init_find(&it, &reply, "setName") || !BSON_ITER_HOLDS_UTF8(&it) ||
                strcmp(bson_iter_utf8(&it, NULL), p->repl_set) != 0) {
                SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                         "%s answers, but not as a member of replica set '%s'", host, p->repl_set);
            }
            if (bson_iter_init_find(&it, &reply, "isWritablePrimary") && bson_iter_as_bool(&it)) {
                break;
            }
            if (lay->replicas > 1 && p->role != SHL_CLUSTER_ROUTER && !primary) {
                break; /* a member of a set: initiate_sets makes a primary */
            }
        }
        if (now_ms() > deadline) {
            SHL_FAIL(st, SHL_CODE_NETWORK_TIMEOUT, "the %s (%s) did not become ready within %d s",
                     p->name, host, READY_TIMEOUT_MS / 1000);
        }
        usleep((useconds_t)delay_ms * 1000);
        delay_ms = delay_ms < 100 ? delay_ms * 2 : 100;
    }
done:
    bson_destroy(&hello);
    bson_destroy(&reply);
    return ret;
}

/*
 * With --replicas R > 1: initiate each set that has no configuration yet (its first member,
 * with every member; AlreadyInitialized is fine), then wait until each set has a writable
 * primary. Initiating a second after the members started keeps
 * the set's first entry later than what each member wrote on its own at start-up.
 */
/* How many members a replSetGetConfig reply's configuration lists. */
static int
config_members(const bson_t *reply)
{
    bson_iter_t it, arr;
    int n = 0;

    if (bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "config.members", &it) &&
        BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &arr)) {
        while (bson_iter_next(&arr)) {
            n++;
        }
    }
    return n;
}

static int
initiate_sets(shl_conn_pool_t *pool, const shl_cluster_layout_t *lay, shl_status_t *st)
{
    int ret = 0;
    bool slept = false;

    if (lay->replicas <= 1) {
        goto done;
    }
    for (int first = 0, size; first < lay->nprocs - 1; first += size) {
        const shl_cluster_proc_t *p0 = &lay->procs[first];
        size = shl_cluster_layout_set_size(lay, first);
        if (size < 2) {
            continue;
        }
        char host[128], key[16];
        bson_t cmd = BSON_INITIALIZER, cfg, members, m, settings, reply;
        shl_status_t why = SHL_STATUS_INIT;

        proc_host(lay, p0, host, sizeof(host));
        BSON_APPEND_INT32(&cmd, "replSetGetConfig", 1);
        if (shl_client_run(pool, host, "admin", &cmd, 5000, &reply, &why) == 0 &&
            config_members(&reply) > 1) {
            bson_destroy(&reply);
            bson_destroy(&cmd);
            continue; /* configured (a restart); an unconfigured node answers a set of one */
        }
        bson_destroy(&reply);
        bson_reinit(&cmd);
        if (!slept) {
            usleep(1100 * 1000);
            slept = true;
        }
        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "replSetInitiate", &cfg);
        BSON_APPEND_UTF8(&cfg, "_id", p0->repl_set);
        if (p0->role == SHL_CLUSTER_CONFIGSVR) {
            BSON_APPEND_BOOL(&cfg, "configsvr", true);
        }
        BSON_APPEND_ARRAY_BEGIN(&cfg, "members", &members);
        for (int k = 0; k < size; k++) {
            char mh[128];
            snprintf(key, sizeof(key), "%d", k);
            proc_host(lay, &lay->procs[first + k], mh, sizeof(mh));
            BSON_APPEND_DOCUMENT_BEGIN(&members, key, &m);
            BSON_APPEND_INT32(&m, "_id", k);
            BSON_APPEND_UTF8(&m, "host", mh);
            bson_append_document_end(&members, &m);
        }
        bson_append_array_end(&cfg, &members);
        BSON_APPEND_DOCUMENT_BEGIN(&cfg, "settings", &settings);
        bson_append_document_end(&cfg, &settings);
        bson_append_document_end(&cmd, &cfg);
        ret = shl_client_run(pool, host, "admin", &cmd, 30000, &reply, &why);
        bson_destroy(&reply);
        bson_destroy(&cmd);
        if (ret != 0 && ret != SHL_CODE_ALREADY_INITIALIZED) {
            SHL_FAIL(st, ret, "replSetInitiate of %s failed: %s", p0->repl_set, why.reason);
        }
        ret = 0;
    }
    /* Each set's first member is its primary after initiate; a restarted set elects one. */
    for (int first = 0, size; first < lay->nprocs - 1; first += size) {
        char set[SHL_CLIENT_HOST_MAX];
        bson_t cmd = BSON_INITIALIZER, reply;

        size = shl_cluster_layout_set_size(lay, first);
        if (size < 2) {
            bson_destroy(&cmd);
            continue;
        }
        shl_cluster_layout_set_string(lay, first, set, sizeof(set));
        BSON_APPEND_INT32(&cmd, "ping", 1);
        ret = shl_client_run(pool, set, "admin", &cmd, READY_TIMEOUT_MS, &reply, st);
        bson_destroy(&reply);
        bson_destroy(&cmd);
        SHL_ERR(ret);
    }
done:
    return ret;
}

/* Add every shard the config server does not list yet, through the router. */
static int
add_shards(shl_conn_pool_t *pool, const shl_cluster_layout_t *lay, shl_status_t *st)
{
    int ret = 0;
    char router[128];
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    bson_iter_t it, arr, sh;

    proc_host(lay, &lay->procs[lay->nprocs - 1], router, sizeof(router));
    BSON_APPEND_INT32(&cmd, "listShards", 1);
    if (shl_client_run(pool, router, "admin", &cmd, ADD_SHARD_TIMEOUT_MS, &reply, st) != 0) {
        ret = st->code;
        shl_status_t why = *st;
        shl_status_set(st, ret, "listShards through the router failed: %s (%s)", why.reason,
                       shl_code_name(ret));
        goto done;
    }
    for (int i = 0; i < lay->nprocs; i++) {
        const shl_cluster_proc_t *p = &lay->procs[i];
        char host[256];
        bool listed = false;
        bson_t add = BSON_INITIALIZER, add_reply = BSON_INITIALIZER;

        if (p->role != SHL_CLUSTER_SHARDSVR) {
            continue;
        }
        if (bson_iter_init_find(&it, &reply, "shards") && BSON_ITER_HOLDS_ARRAY(&it) &&
            bson_iter_recurse(&it, &arr)) {
            while (shl_iter_next(&arr)) {
                if (BSON_ITER_HOLDS_DOCUMENT(&arr) && bson_iter_recurse(&arr, &sh) &&
                    bson_iter_find(&sh, "_id") && BSON_ITER_HOLDS_UTF8(&sh) &&
                    strcmp(bson_iter_utf8(&sh, NULL), p->name) == 0) {
                    listed = true;
                }
            }
        }
        if (listed) {
            continue;
        }
        /* A replica-set shard is named by its set: "shard0/127.0.0.1:27019[,...]". */
        if (strchr(p->name, '-') != NULL) {
            continue; /* a further member of a shard's set */
        }
        shl_cluster_layout_set_string(lay, i, host, sizeof(host));
        BSON_APPEND_UTF8(&add, "addShard", host);
        BSON_APPEND_UTF8(&add, "name", p->name);
        ret = shl_client_run(pool, router, "admin", &add, ADD_SHARD_TIMEOUT_MS, &add_reply, st);
        bson_destroy(&add);
        bson_destroy(&add_reply);
        if (ret != 0) {
            shl_status_t why = *st;
            shl_status_set(st, ret, "addShard %s through the router failed: %s (%s)", host,
                           why.reason, shl_code_name(ret));
            goto done;
        }
    }
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* Stop the processes flagged in 'mine' (router first, config server last). */
static void
stop_procs(shl_cluster_layout_t *lay, const bool *mine)
{
    /* SIGTERM every data node together: each takes a checkpoint on the way out. */
    for (int i = lay->nprocs - 1; i >= 0; i--) {
        shl_cluster_proc_t *p = &lay->procs[i];
        if (!mine[i] || p->pid <= 0) {
            continue;
        }
        if (p->role == SHL_CLUSTER_ROUTER) {
            shl_cluster_proc_stop(p, STOP_TIMEOUT_MS);
        } else if (shl_cluster_proc_alive(p)) {
            kill(p->pid, SIGTERM);
        }
    }
    for (int i = lay->nprocs - 1; i >= 0; i--) {
        shl_cluster_proc_t *p = &lay->procs[i];
        if (mine[i] && p->pid > 0) {
            pid_t pid = p->pid;
            if (!shl_cluster_proc_stop(p, STOP_TIMEOUT_MS)) {
                fprintf(stderr, "shale: the %s (pid %d) ignored SIGTERM for %d s; killed it\n",
                        p->name, (int)pid, STOP_TIMEOUT_MS / 1000);
            }
        }
    }
}

/* Fold an existing cluster.json into what the flags ask for. */
static int
reconcile(shl_cluster_layout_t *lay, const shl_cluster_layout_t *rec, const shl_cluster_args_t *a,
          shl_status_t *st)
{
    int ret = 0;
    int nshards = a->shards_given ? a->shards : rec->nshards;
    const shl_cluster_proc_t *router = NULL;

    if (a->port_given && a->port != rec->port) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "%s holds a cluster whose router uses port %d (the shards are registered "
                 "under the ports after it); leave out --port or use another --dbpath",
                 rec->dir, rec->port);
    }
    if (nshards < rec->nshards) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "%s holds a cluster of %d shards; --shards %d would leave some out", rec->dir,
                 rec->nshards, nshards);
    }
    if (a->replicas_given && a->replicas != rec->replicas) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "%s holds a cluster of %d-member replica sets; leave out --replicas or use "
                 "another --dbpath",
                 rec->dir, rec->replicas);
    }
    SHL_ERR(shl_cluster_layout_plan_sets(lay, rec->dir, nshards, rec->replicas,
                                         rec->config_replicas > 0 ? rec->config_replicas : 1,
                                         rec->port, a->bind_ip_given ? a->bind_ip : rec->bind_ip,
                                         st));
    /* Keep the recorded processes (ports and pids) by name. */
    for (int i = 0; i < rec->nprocs; i++) {
        const shl_cluster_proc_t *r = &rec->procs[i];
        shl_cluster_proc_t *p = shl_cluster_layout_find(lay, r->name);
        if (r->role == SHL_CLUSTER_ROUTER) {
            router = r;
        }
        if (p == NULL || p->role != r->role) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s/cluster.json: unexpected process '%s'",
                     rec->dir, r->name);
        }
        *p = *r;
    }
    if (router == NULL) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s/cluster.json: no router", rec->dir);
    }
done:
    return ret;
}

/* The cluster's first user: 'admin' with role root and a random password, created through
 * the router by this command (authenticated as __system with the key file). */
static int
create_first_user(shl_conn_pool_t *pool, const shl_cluster_layout_t *lay, char *password,
                  size_t n, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, roles, reply;
    char router[SHL_CLIENT_HOST_MAX];

    shl_auth_random_password(password, n);
    proc_host(lay, &lay->procs[lay->nprocs - 1], router, sizeof(router));
    BSON_APPEND_UTF8(&cmd, "createUser", "admin");
    BSON_APPEND_UTF8(&cmd, "pwd", password);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "roles", &roles);
    BSON_APPEND_UTF8(&roles, "0", "root");
    bson_append_array_end(&cmd, &roles);
    ret = shl_client_run(pool, router, "admin", &cmd, ADD_SHARD_TIMEOUT_MS, &reply, st);
    bson_destroy(&reply);
    bson_destroy(&cmd);
    if (ret != 0) {
        password[0] = '\0';
    }
    return ret;
}

int
shl_cluster_up_main(int argc, char **argv)
{
    int ret = 0, rc = 0;
    shl_status_t st = SHL_STATUS_INIT;
    shl_cluster_args_t a;
    shl_cluster_layout_t lay, rec;
    bool found = false, mine[SHL_CLUSTER_MAX_PROCS] = {false};
    shl_cluster_proc_t *failed = NULL;
    shl_conn_pool_t *pool = NULL;
    shl_conn_pool_options_t popts = {.connect_timeout_ms = 2000};
    int started = 0, spawned = 0;
    bool registering = false, use_auth = false, key_created = false;
    char key_path[SHL_CLUSTER_PATH_MAX + 16], password[32] = "";

    if (shl_cluster_args_parse(&a, SHL_CLUSTER_CMD_UP, argc, argv, &st) != 0) {
        fprintf(stderr, "shale up: %s\n", st.reason);
        shl_cluster_args_usage(stderr, SHL_CLUSTER_CMD_UP);
        return 2;
    }
    SHL_ERR(shl_cluster_layout_load(&rec, a.dbpath, &found, &st));
    if (found) {
        SHL_ERR(reconcile(&lay, &rec, &a, &st));
    } else {
        SHL_ERR(shl_cluster_layout_plan_replicas(&lay, a.dbpath, a.shards, a.replicas, a.port,
                                                 a.bind_ip, &st));
        if (mkdir(lay.dir, 0755) != 0 && errno != EEXIST) {
            SHL_FAIL(&st, SHL_CODE_FILE_OPEN_FAILED, "cannot create %s: %s", lay.dir,
                     strerror(errno));
        }
    }
    /* Access control (`--auth`, or a cluster first started with it): every process gets the
     * folder's key file, and this command authenticates with it as __system. */
    snprintf(key_path, sizeof(key_path), "%s/keyfile", lay.dir);
    use_auth = a.auth || access(key_path, F_OK) == 0;
    if (use_auth && access(key_path, F_OK) != 0) {
        /* Turning access control on: processes running without it would make a mixed
         * cluster (they would refuse the new members' authentication, or skip checks). */
        for (int i = 0; i < lay.nprocs; i++) {
            if (shl_cluster_proc_alive(&lay.procs[i])) {
                SHL_FAIL(&st, SHL_CODE_ILLEGAL_OPERATION,
                         "the cluster in %s is running without access control (%s, pid %d); "
                         "stop it first with `shale down --dbpath %s`, then run `shale up "
                         "--auth` again",
                         lay.dir, lay.procs[i].name, (int)lay.procs[i].pid, a.dbpath);
            }
        }
    }
    if (use_auth) {
        SHL_ERR(shl_auth_key_file_create(key_path, &key_created, &st));
        SHL_ERR(shl_auth_client_init(key_path, &st));
        if (a.n_all_extra + 2 > 2 * SHL_CLUSTER_MAX_EXTRA) {
            SHL_FAIL(&st, SHL_CODE_BAD_VALUE, "too many flags to pass on");
        }
        a.all_extra[a.n_all_extra++] = "--keyFile";
        a.all_extra[a.n_all_extra++] = key_path;
    }
    /* Everything recorded and still running stays; the rest is (re)started. */
    for (int i = 0; i < lay.nprocs; i++) {
        shl_cluster_proc_t *p = &lay.procs[i];
        if (shl_cluster_proc_alive(p)) {
            continue;
        }
        p->pid = 0;
        p->start_ticks = 0;
        mine[i] = true;
        started++;
        SHL_ERR(check_port_free(lay.bind_ip, p->name, p->port, &st));
    }
    pool = shl_conn_pool_new(&popts);
    /* Data nodes first (together), then the router, which needs the config server. */
    for (int i = 0; i < lay.nprocs - 1; i++) {
        if (mine[i]) {
            SHL_ERR(spawn(&lay, &lay.procs[i], &a, &st));
            spawned++;
        }
    }
    SHL_ERR(shl_cluster_layout_save(&lay, &st));
    for (int i = 0; i < lay.nprocs - 1; i++) {
        failed = &lay.procs[i];
        SHL_ERR(wait_ready(pool, &lay, &lay.procs[i], false, &st));
    }
    failed = NULL;
    SHL_ERR(initiate_sets(pool, &lay, &st));
    failed = &lay.procs[lay.nprocs - 1];
    if (mine[lay.nprocs - 1]) {
        SHL_ERR(spawn(&lay, failed, &a, &st));
        spawned++;
        SHL_ERR(shl_cluster_layout_save(&lay, &st));
    }
    SHL_ERR(wait_ready(pool, &lay, failed, false, &st));
    registering = true;
    SHL_ERR(add_shards(pool, &lay, &st));
    failed = NULL;
    SHL_ERR(shl_cluster_layout_save(&lay, &st));
    if (key_created) {
        SHL_ERR(create_first_user(pool, &lay, password, sizeof(password), &st));
    }

    fprintf(stderr, "Shale cluster %s in %s\n", started == 0 ? "already running" : "running",
            lay.dir);
    for (int i = lay.nprocs - 1; i >= 0; i--) {
        const shl_cluster_proc_t *p = &lay.procs[i];
        fprintf(stderr, "  %-8s %s:%d  pid %-7d %s%s%s\n", p->name, lay.host_ip, p->port,
                (int)p->pid, shl_cluster_role_name(p->role), p->repl_set[0] ? " replSet " : "",
                p->repl_set);
    }
    fprintf(stderr, "Logs: %s/<name>.log    Stop: shale down --dbpath %s\n", lay.dir, lay.dir);
    if (password[0] != '\0') {
        fprintf(stderr,
                "Access control is on. Created the first user 'admin' (role root); its password "
                "is shown only this once:\n");
        printf("mongodb://admin:%s@%s:%d/?authSource=admin\n", password, lay.host_ip, lay.port);
    } else if (use_auth) {
        fprintf(stderr, "Access control is on: connect with a user (authSource=admin).\n");
        printf("mongodb://%s:%d/\n", lay.host_ip, lay.port);
    } else {
        printf("mongodb://%s:%d/\n", lay.host_ip, lay.port);
    }
    fflush(stdout);
done:
    if (ret != 0) {
        fprintf(stderr, "shale up: %s\n", st.reason);
        if (failed != NULL && failed->port > 0) {
            print_log_tail(&lay, failed, 15);
        }
        if (spawned > 0) {
            shl_status_t ignored = SHL_STATUS_INIT;
            stop_procs(&lay, mine);
            if (access(lay.dir, F_OK) == 0) {
                shl_cluster_layout_save(&lay, &ignored);
            }
            fprintf(stderr, "shale up: stopped the processes it had started\n");
        }
        /*
         * A new cluster that failed before any shard was registered leaves no record, so
         * the folder is not tied to ports that did not work (the config server's catalog
         * names shards by host:port only once addShard ran).
         */
        if (!found && !registering && lay.dir[0] != '\0') {
            char path[SHL_CLUSTER_PATH_MAX + 32];
            snprintf(path, sizeof(path), "%s/cluster.json", lay.dir);
            unlink(path);
        }
        rc = 1;
    }
    shl_conn_pool_destroy(pool);
    return rc;
}

int
shl_cluster_down_main(int argc, char **argv)
{
    int ret = 0;
    shl_status_t st = SHL_STATUS_INIT;
    shl_cluster_args_t a;
    shl_cluster_layout_t lay;
    bool found = false, all[SHL_CLUSTER_MAX_PROCS] = {false};
    int running = 0;

    if (shl_cluster_args_parse(&a, SHL_CLUSTER_CMD_DOWN, argc, argv, &st) != 0) {
        fprintf(stderr, "shale down: %s\n", st.reason);
        shl_cluster_args_usage(stderr, SHL_CLUSTER_CMD_DOWN);
        return 2;
    }
    SHL_ERR(shl_cluster_layout_load(&lay, a.dbpath, &found, &st));
    if (!found) {
        SHL_FAIL(&st, SHL_CODE_BAD_VALUE, "no cluster in %s (no cluster.json); nothing to stop",
                 lay.dir);
    }
    /* In the order stop_procs stops them: the router first, the config server last. */
    for (int i = lay.nprocs - 1; i >= 0; i--) {
        all[i] = true;
        if (shl_cluster_proc_alive(&lay.procs[i])) {
            fprintf(stderr, "stopping %s (pid %d)\n", lay.procs[i].name, (int)lay.procs[i].pid);
            running++;
        } else {
            lay.procs[i].pid = 0;
        }
    }
    stop_procs(&lay, all);
    SHL_ERR(shl_cluster_layout_save(&lay, &st));
    fprintf(stderr,
            running > 0 ? "Shale cluster in %s stopped\n" : "Shale cluster in %s was not running\n",
            lay.dir);
done:
    if (ret != 0) {
        fprintf(stderr, "shale down: %s\n", st.reason);
    }
    return ret != 0 ? 1 : 0;
}
