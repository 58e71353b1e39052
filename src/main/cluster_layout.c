/*
 * cluster_layout.c -- see cluster_layout.h. cluster.json is written by hand (one
 * process per line, stable field order) so a person can read it, and parsed back with
 * libbson's JSON reader.
 */
#include "bson/bson_iter.h"
#include "main/cluster_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bson/bson.h>

const char *
shl_cluster_role_name(shl_cluster_role_t role)
{
    switch (role) {
    case SHL_CLUSTER_CONFIGSVR:
        return "configsvr";
    case SHL_CLUSTER_SHARDSVR:
        return "shardsvr";
    default:
        return "router";
    }
}

static int
role_from_name(const char *s, shl_cluster_role_t *out)
{
    if (strcmp(s, "configsvr") == 0) {
        *out = SHL_CLUSTER_CONFIGSVR;
    } else if (strcmp(s, "shardsvr") == 0) {
        *out = SHL_CLUSTER_SHARDSVR;
    } else if (strcmp(s, "router") == 0) {
        *out = SHL_CLUSTER_ROUTER;
    } else {
        return -1;
    }
    return 0;
}

/* The address clients use for a process listening on 'bind_ip': its first entry, with
 * the wildcard replaced by loopback. */
static void
host_ip_from_bind(const char *bind_ip, char *out, size_t outlen)
{
    size_t n = strcspn(bind_ip, ",");

    snprintf(out, outlen, "%.*s", (int)n, bind_ip);
    if (out[0] == '\0' || strcmp(out, "0.0.0.0") == 0) {
        snprintf(out, outlen, "127.0.0.1");
    } else if (strcmp(out, "::") == 0) {
        snprintf(out, outlen, "::1");
    }
}

int
shl_cluster_layout_plan(shl_cluster_layout_t *lay, const char *dir, int nshards, int port,
                        const char *bind_ip, shl_status_t *st)
{
    return shl_cluster_layout_plan_replicas(lay, dir, nshards, 1, port, bind_ip, st);
}

/* The members of one replica set: procs[first..first+count) named base, base-1, ... */
static void
plan_set(shl_cluster_layout_t *lay, int first, int count, const char *base, shl_cluster_role_t role,
         const char *set, int port)
{
    for (int k = 0; k < count; k++) {
        shl_cluster_proc_t *p = &lay->procs[first + k];
        if (k == 0) {
            snprintf(p->name, sizeof(p->name), "%s", base);
        } else {
            snprintf(p->name, sizeof(p->name), "%.24s-%c", base, (char)('0' + k)); /* k < 8 */
        }
        p->role = role;
        snprintf(p->repl_set, sizeof(p->repl_set), "%s", set);
        p->port = port + k;
    }
}

int
shl_cluster_layout_set_size(const shl_cluster_layout_t *lay, int first)
{
    int k = 0;

    while (first + k < lay->nprocs && lay->procs[first + k].role != SHL_CLUSTER_ROUTER &&
           strcmp(lay->procs[first + k].repl_set, lay->procs[first].repl_set) == 0) {
        k++;
    }
    return k;
}

void
shl_cluster_layout_set_string(const shl_cluster_layout_t *lay, int first, char *out, size_t n)
{
    size_t len = 0;
    int w = snprintf(out, n, "%s/", lay->procs[first].repl_set);
    int members = shl_cluster_layout_set_size(lay, first);

    len = w < 0 ? 0 : (size_t)w;
    for (int k = 0; k < members && len < n; k++) {
        w = snprintf(out + len, n - len, "%s%s:%d", k > 0 ? "," : "", lay->host_ip,
                     lay->procs[first + k].port);
        len += w < 0 ? 0 : (size_t)w;
    }
}

int
shl_cluster_layout_plan_replicas(shl_cluster_layout_t *lay, const char *dir, int nshards,
                                 int replicas, int port, const char *bind_ip, shl_status_t *st)
{
    return shl_cluster_layout_plan_sets(lay, dir, nshards, replicas, replicas, port, bind_ip, st);
}

int
shl_cluster_layout_plan_sets(shl_cluster_layout_t *lay, const char *dir, int nshards,
                             int replicas, int config_replicas, int port, const char *bind_ip,
                             shl_status_t *st)
{
    int ret = 0;
    char cwd[PATH_MAX];

    memset(lay, 0, sizeof(*lay));
    if (nshards < 1 || nshards > SHL_CLUSTER_MAX_SHARDS) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "--shards must be between 1 and %d, got %d",
                 SHL_CLUSTER_MAX_SHARDS, nshards);
    }
    if (replicas < 1 || replicas > SHL_CLUSTER_MAX_REPLICAS) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "--replicas must be between 1 and %d, got %d",
                 SHL_CLUSTER_MAX_REPLICAS, replicas);
    }
    if (config_replicas < 1 || config_replicas > SHL_CLUSTER_MAX_REPLICAS) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "the config server's members must be 1 to %d, got %d",
                 SHL_CLUSTER_MAX_REPLICAS, config_replicas);
    }
    if (port < 1 || port + config_replicas + replicas * nshards > 65535) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "--port %d leaves no room for the config server and %d shards after it (ports "
                 "up to 65535)",
                 port, nshards);
    }
    if (dir[0] == '/') {
        if (strlen(dir) >= sizeof(lay->dir)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "--dbpath is too long");
        }
        snprintf(lay->dir, sizeof(lay->dir), "%s", dir);
    } else {
        int w;
        if (getcwd(cwd, sizeof(cwd)) == NULL) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "cannot resolve --dbpath: %s", strerror(errno));
        }
        w = snprintf(lay->dir, sizeof(lay->dir), "%s/%s", cwd, dir);
        if (w < 0 || (size_t)w >= sizeof(lay->dir)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "--dbpath is too long");
        }
    }
    /* "a/b/" and "a/b" are the same cluster. */
    for (size_t n = strlen(lay->dir); n > 1 && lay->dir[n - 1] == '/'; n--) {
        lay->dir[n - 1] = '\0';
    }
    snprintf(lay->bind_ip, sizeof(lay->bind_ip), "%s", bind_ip);
    host_ip_from_bind(bind_ip, lay->host_ip, sizeof(lay->host_ip));
    lay->port = port;
    lay->nshards = nshards;
    lay->replicas = replicas;
    lay->config_replicas = config_replicas;
    lay->nprocs = replicas * nshards + config_replicas + 1;

    plan_set(lay, 0, config_replicas, "config", SHL_CLUSTER_CONFIGSVR, "csrs", port + 1);
    for (int i = 0; i < nshards; i++) {
        char name[32];
        snprintf(name, sizeof(name), "shard%d", i);
        plan_set(lay, config_replicas + replicas * i, replicas, name, SHL_CLUSTER_SHARDSVR, name,
                 port + 1 + config_replicas + replicas * i);
    }
    shl_cluster_proc_t *r = &lay->procs[lay->nprocs - 1];
    snprintf(r->name, sizeof(r->name), "router");
    r->role = SHL_CLUSTER_ROUTER;
    r->port = port;
done:
    return ret;
}

static void
json_str(bson_string_t *out, const char *s)
{
    bson_string_append_c(out, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            bson_string_append_c(out, '\\');
            bson_string_append_c(out, (char)c);
        } else if (c < 0x20) {
            bson_string_append_printf(out, "\\u%04x", c);
        } else {
            bson_string_append_c(out, (char)c);
        }
    }
    bson_string_append_c(out, '"');
}

char *
shl_cluster_layout_json_new(const shl_cluster_layout_t *lay)
{
    bson_string_t *out = bson_string_new("{\n  \"dbpath\": ");

    json_str(out, lay->dir);
    bson_string_append(out, ",\n  \"bindIp\": ");
    json_str(out, lay->bind_ip);
    bson_string_append_printf(out, ",\n  \"port\": %d,\n  \"shards\": %d,\n", lay->port,
                              lay->nshards);
    if (lay->replicas > 1) {
        bson_string_append_printf(out, "  \"replicas\": %d,\n", lay->replicas);
    }
    bson_string_append(out, "  \"connectionString\": ");
    {
        char uri[128];
        snprintf(uri, sizeof(uri), "mongodb://%s:%d/", lay->host_ip, lay->port);
        json_str(out, uri);
    }
    bson_string_append(out, ",\n  \"processes\": [\n");
    for (int i = 0; i < lay->nprocs; i++) {
        const shl_cluster_proc_t *p = &lay->procs[i];
        bson_string_append(out, "    {\"name\": ");
        json_str(out, p->name);
        bson_string_append_printf(
            out, ", \"role\": \"%s\", \"replSet\": ", shl_cluster_role_name(p->role));
        json_str(out, p->repl_set);
        bson_string_append_printf(
            out, ", \"port\": %d, \"pid\": %d, \"startTicks\": %" PRIu64 "}%s\n", p->port,
            (int)p->pid, p->start_ticks, i + 1 < lay->nprocs ? "," : "");
    }
    bson_string_append(out, "  ]\n}\n");
    return bson_string_free(out, false);
}

static int64_t
iter_int(bson_iter_t *it)
{
    return BSON_ITER_HOLDS_NUMBER(it) ? bson_iter_as_int64(it) : -1;
}

int
shl_cluster_layout_load(shl_cluster_layout_t *lay, const char *dir, bool *found, shl_status_t *st)
{
    int ret = 0;
    char path[SHL_CLUSTER_PATH_MAX + 32];
    bson_t *doc = NULL;
    bson_error_t err;
    bson_iter_t it, arr, pit;
    shl_status_t scratch = SHL_STATUS_INIT;

    *found = false;
    /* plan() resolves the path and the defaults; the file then overrides them. */
    SHL_ERR(shl_cluster_layout_plan(lay, dir, 1, 27017, "127.0.0.1", &scratch));
    lay->nprocs = lay->nshards = lay->config_replicas = 0;
    snprintf(path, sizeof(path), "%s/cluster.json", lay->dir);
    if (access(path, F_OK) != 0) {
        goto done;
    }
    *found = true;
    {
        FILE *f = fopen(path, "r");
        char *text = NULL;
        long n;
        if (f == NULL) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "cannot read %s: %s", path, strerror(errno));
        }
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        fseek(f, 0, SEEK_SET);
        text = bson_malloc0((size_t)(n > 0 ? n : 0) + 1);
        if (n > 0 && fread(text, 1, (size_t)n, f) != (size_t)n) {
            n = -1;
        }
        fclose(f);
        doc = n < 0 ? NULL : bson_new_from_json((const uint8_t *)text, n, &err);
        bson_free(text);
        if (doc == NULL) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s is not valid JSON: %s", path,
                     n < 0 ? strerror(errno) : err.message);
        }
    }
    if (bson_iter_init_find(&it, doc, "bindIp") && BSON_ITER_HOLDS_UTF8(&it)) {
        snprintf(lay->bind_ip, sizeof(lay->bind_ip), "%s", bson_iter_utf8(&it, NULL));
        host_ip_from_bind(lay->bind_ip, lay->host_ip, sizeof(lay->host_ip));
    }
    if (!bson_iter_init_find(&it, doc, "port") || (lay->port = (int)iter_int(&it)) <= 0) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s: no valid \"port\"", path);
    }
    if (!bson_iter_init_find(&it, doc, "processes") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &arr)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s: no \"processes\" array", path);
    }
    while (shl_iter_next(&arr)) {
        shl_cluster_proc_t *p;
        if (lay->nprocs >= SHL_CLUSTER_MAX_PROCS || !BSON_ITER_HOLDS_DOCUMENT(&arr) ||
            !bson_iter_recurse(&arr, &pit)) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s: bad \"processes\" entry", path);
        }
        p = &lay->procs[lay->nprocs++];
        memset(p, 0, sizeof(*p));
        p->role = SHL_CLUSTER_ROUTER;
        while (shl_iter_next(&pit)) {
            const char *k = shl_iter_key(&pit);
            if (strcmp(k, "name") == 0 && BSON_ITER_HOLDS_UTF8(&pit)) {
                snprintf(p->name, sizeof(p->name), "%s", bson_iter_utf8(&pit, NULL));
            } else if (strcmp(k, "role") == 0 && BSON_ITER_HOLDS_UTF8(&pit)) {
                if (role_from_name(bson_iter_utf8(&pit, NULL), &p->role) != 0) {
                    SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s: unknown role '%s'", path,
                             bson_iter_utf8(&pit, NULL));
                }
            } else if (strcmp(k, "replSet") == 0 && BSON_ITER_HOLDS_UTF8(&pit)) {
                snprintf(p->repl_set, sizeof(p->repl_set), "%s", bson_iter_utf8(&pit, NULL));
            } else if (strcmp(k, "port") == 0) {
                p->port = (int)iter_int(&pit);
            } else if (strcmp(k, "pid") == 0) {
                p->pid = (pid_t)iter_int(&pit);
            } else if (strcmp(k, "startTicks") == 0) {
                p->start_ticks = (uint64_t)iter_int(&pit);
            }
        }
        if (p->name[0] == '\0' || strchr(p->name, '/') != NULL || p->port <= 0 || p->port > 65535 ||
            p->pid < 0) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s: bad \"processes\" entry %d", path,
                     lay->nprocs - 1);
        }
        if (p->role == SHL_CLUSTER_SHARDSVR) {
            lay->nshards++;
        } else if (p->role == SHL_CLUSTER_CONFIGSVR) {
            lay->config_replicas++;
        }
    }
    if (bson_iter_init_find(&it, doc, "replicas")) {
        int64_t r = iter_int(&it);
        if (r < 1 || r > SHL_CLUSTER_MAX_REPLICAS || lay->nshards % r != 0) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s: bad \"replicas\"", path);
        }
        lay->replicas = (int)r;
        lay->nshards /= lay->replicas; /* counted members; a shard is a set of them */
    }
done:
    if (doc != NULL) {
        bson_destroy(doc);
    }
    return ret;
}

int
shl_cluster_layout_save(const shl_cluster_layout_t *lay, shl_status_t *st)
{
    int ret = 0;
    char path[SHL_CLUSTER_PATH_MAX + 32], tmp[SHL_CLUSTER_PATH_MAX + 48];
    char *text = shl_cluster_layout_json_new(lay);
    FILE *f = NULL;

    snprintf(path, sizeof(path), "%s/cluster.json", lay->dir);
    snprintf(tmp, sizeof(tmp), "%s/cluster.json.tmp", lay->dir);
    if ((f = fopen(tmp, "w")) == NULL) {
        SHL_FAIL(st, SHL_CODE_FILE_OPEN_FAILED, "cannot write %s: %s", tmp, strerror(errno));
    }
    if (fputs(text, f) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        SHL_FAIL(st, SHL_CODE_FILE_STREAM_FAILED, "cannot write %s: %s", tmp, strerror(errno));
    }
    fclose(f);
    f = NULL;
    if (rename(tmp, path) != 0) {
        SHL_FAIL(st, SHL_CODE_FILE_RENAME_FAILED, "cannot rename %s: %s", tmp, strerror(errno));
    }
    for (int i = 0; i < lay->nprocs; i++) {
        const shl_cluster_proc_t *p = &lay->procs[i];
        char pidpath[SHL_CLUSTER_PATH_MAX + 64];
        snprintf(pidpath, sizeof(pidpath), "%s/%s.pid", lay->dir, p->name);
        if (p->pid > 0) {
            FILE *pf = fopen(pidpath, "w");
            if (pf == NULL) {
                SHL_FAIL(st, SHL_CODE_FILE_OPEN_FAILED, "cannot write %s: %s", pidpath,
                         strerror(errno));
            }
            fprintf(pf, "%d\n", (int)p->pid);
            fclose(pf);
        } else {
            unlink(pidpath);
        }
    }
done:
    if (f != NULL) {
        fclose(f);
    }
    bson_free(text);
    return ret;
}

shl_cluster_proc_t *
shl_cluster_layout_find(shl_cluster_layout_t *lay, const char *name)
{
    for (int i = 0; i < lay->nprocs; i++) {
        if (strcmp(lay->procs[i].name, name) == 0) {
            return &lay->procs[i];
        }
    }
    return NULL;
}

uint64_t
shl_cluster_pid_start_ticks(pid_t pid)
{
    char path[64], buf[1024];
    const char *p;
    FILE *f;
    size_t n;
    char state;
    unsigned long long ticks = 0;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r")) == NULL) {
        return 0;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces and ')': the fields start after the last ')'. */
    if ((p = strrchr(buf, ')')) == NULL || sscanf(p + 1, " %c", &state) != 1) {
        return 0;
    }
    if (state == 'Z' || state == 'X') {
        return 0;
    }
    /* Field 22 (starttime); p + 1 starts at field 3 (state). */
    p++;
    for (int field = 3; field < 22 && p != NULL; field++) {
        p = strchr(p + 1, ' ');
    }
    if (p == NULL || sscanf(p, " %llu", &ticks) != 1) {
        return 0;
    }
    return (uint64_t)ticks;
}

bool
shl_cluster_proc_alive(const shl_cluster_proc_t *p)
{
    uint64_t ticks;

    if (p->pid <= 0) {
        return false;
    }
    ticks = shl_cluster_pid_start_ticks(p->pid);
    return ticks != 0 && (p->start_ticks == 0 || ticks == p->start_ticks);
}

static int64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait until the process is gone (reaping it if it is our child); true if it went. */
static bool
wait_gone(const shl_cluster_proc_t *p, int64_t timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    int delay_us = 1000;

    for (;;) {
        int status;
        /* Our child (shale up cleaning up after a failure) only goes once reaped. */
        if (waitpid(p->pid, &status, WNOHANG) == p->pid || !shl_cluster_proc_alive(p)) {
            return true;
        }
        if (now_ms() > deadline) {
            return false;
        }
        usleep((useconds_t)delay_us);
        delay_us = delay_us < 50000 ? delay_us * 2 : 50000;
    }
}

bool
shl_cluster_proc_stop(shl_cluster_proc_t *p, int64_t timeout_ms)
{
    bool clean = true;

    if (shl_cluster_proc_alive(p)) {
        kill(p->pid, SIGTERM);
        if (!wait_gone(p, timeout_ms)) {
            clean = false;
            kill(p->pid, SIGKILL);
            wait_gone(p, 10000);
        }
    }
    p->pid = 0;
    p->start_ticks = 0;
    return clean;
}
