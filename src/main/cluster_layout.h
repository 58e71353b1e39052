/*
 * cluster_layout.h -- the local cluster `shale up` keeps in one folder: which processes
 * it has (config server, shards, router), their ports and pids, recorded in
 * DIR/cluster.json; and the process handling `up`/`down` share (start detached,
 * check liveness without trusting a recycled pid, stop with a deadline).
 */
#ifndef SHL_MAIN_CLUSTER_LAYOUT_H
#define SHL_MAIN_CLUSTER_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/status.h"

#define SHL_CLUSTER_MAX_SHARDS 64
#define SHL_CLUSTER_MAX_REPLICAS 7 /* members of each replica set (`shale up --replicas`) */
#define SHL_CLUSTER_MAX_PROCS ((SHL_CLUSTER_MAX_SHARDS + 1) * SHL_CLUSTER_MAX_REPLICAS + 1)
#define SHL_CLUSTER_PATH_MAX 1024

typedef enum shl_cluster_role {
    SHL_CLUSTER_CONFIGSVR,
    SHL_CLUSTER_SHARDSVR,
    SHL_CLUSTER_ROUTER,
} shl_cluster_role_t;

typedef struct shl_cluster_proc {
    char name[32];           /* "config", "shard0", ..., "router": file names in DIR */
    shl_cluster_role_t role; /* what it runs as */
    char repl_set[32];       /* "csrs", "shard0", ...; "" for the router */
    int port;
    pid_t pid;            /* 0 when not running */
    uint64_t start_ticks; /* /proc/<pid>/stat starttime, to tell a recycled pid apart */
} shl_cluster_proc_t;

typedef struct shl_cluster_layout {
    char dir[SHL_CLUSTER_PATH_MAX]; /* absolute path of DIR */
    char bind_ip[128];              /* what each process listens on */
    char host_ip[64];               /* the address clients connect to (first bind_ip) */
    int port;                       /* the router's port; the others follow it */
    int nshards;
    int replicas; /* members of each shard's replica set (1: one) */
    int config_replicas; /* members of the config server's set (clusters made before
                          * repl18e: 1 whatever 'replicas' is) */
    /* config, shard0..N-1, router, in that order; with replicas R each shard's members
     * follow one another: "shard0", "shard0-1", ..., "shard1", ... */
    int nprocs;
    shl_cluster_proc_t procs[SHL_CLUSTER_MAX_PROCS];
} shl_cluster_layout_t;

/*
 * shl_cluster_layout_plan --
 *     Fill 'lay' for a fresh cluster in 'dir' (made absolute; need not exist yet): router
 *     on 'port', config server on port+1 ("csrs"), shard i on port+2+i ("shard<i>").
 *     Errors: BadValue (nshards or port out of range, path too long).
 */
int shl_cluster_layout_plan(shl_cluster_layout_t *lay, const char *dir, int nshards, int port,
                            const char *bind_ip, shl_status_t *st);

/*
 * shl_cluster_layout_plan_replicas --
 *     shl_cluster_layout_plan with 'replicas' members per replica set on consecutive ports:
 *     the config server's set ("csrs": config, config-1, ...) from port+1, shard i's members
 *     from port+1+R+R*i (R = 1: the same layout as shl_cluster_layout_plan). Errors:
 *     BadValue (also replicas out of 1..7).
 */
int shl_cluster_layout_plan_replicas(shl_cluster_layout_t *lay, const char *dir, int nshards,
                                     int replicas, int port, const char *bind_ip, shl_status_t *st);

/*
 * shl_cluster_layout_plan_sets --
 *     As shl_cluster_layout_plan_replicas with the config server's set of 'config_replicas'
 *     members (a cluster recorded before the config server became a set keeps one: its
 *     shards' ports start at port+2). Errors: BadValue.
 */
int shl_cluster_layout_plan_sets(shl_cluster_layout_t *lay, const char *dir, int nshards,
                                 int replicas, int config_replicas, int port, const char *bind_ip,
                                 shl_status_t *st);

/* shl_cluster_layout_set_size -- how many members the set whose first member is procs[first]
 * has (the processes from there on with its replSet). */
int shl_cluster_layout_set_size(const shl_cluster_layout_t *lay, int first);

/* shl_cluster_layout_set_string -- "set/host:p1,host:p2,..." of the replica set whose first
 * member is procs[first], into out (size n). */
void shl_cluster_layout_set_string(const shl_cluster_layout_t *lay, int first, char *out, size_t n);

/*
 * shl_cluster_layout_load --
 *     Read DIR/cluster.json into 'lay'. *found is false (and 0 returned) if there is no
 *     such file. Errors: FailedToParse (unreadable or malformed file).
 */
int shl_cluster_layout_load(shl_cluster_layout_t *lay, const char *dir, bool *found,
                            shl_status_t *st);

/*
 * shl_cluster_layout_save --
 *     Write 'lay' to DIR/cluster.json (through a temporary file and rename) and keep
 *     DIR/<name>.pid in step: written for running processes, removed for the others.
 *     Errors: FileOpenFailed / FileRenameFailed with errno's text.
 */
int shl_cluster_layout_save(const shl_cluster_layout_t *lay, shl_status_t *st);

/* shl_cluster_layout_json_new -- the cluster.json text for 'lay' (free with bson_free). */
char *shl_cluster_layout_json_new(const shl_cluster_layout_t *lay);

/* shl_cluster_layout_find -- the process named 'name', or NULL. */
shl_cluster_proc_t *shl_cluster_layout_find(shl_cluster_layout_t *lay, const char *name);

/* shl_cluster_role_name -- "configsvr", "shardsvr" or "router". */
const char *shl_cluster_role_name(shl_cluster_role_t role);

/*
 * shl_cluster_proc_alive --
 *     Whether the recorded process still runs: the pid exists, is not a zombie, and has
 *     the recorded start time (so a pid the kernel gave to another process is not it).
 */
bool shl_cluster_proc_alive(const shl_cluster_proc_t *p);

/* shl_cluster_pid_start_ticks -- /proc/<pid>/stat's starttime, 0 if unknown or a zombie. */
uint64_t shl_cluster_pid_start_ticks(pid_t pid);

/*
 * shl_cluster_proc_stop --
 *     SIGTERM the recorded process if it is alive, wait up to 'timeout_ms' for it to
 *     exit, then SIGKILL it and wait again. Reaps it when it is our child. Sets pid to
 *     0. Returns true if it exited after SIGTERM (or was not running), false if it
 *     needed SIGKILL or could not be stopped.
 */
bool shl_cluster_proc_stop(shl_cluster_proc_t *p, int64_t timeout_ms);

#endif
