/*
 * cluster_args.h -- the flags of `shale up|down|status`. They are not server options
 * (the options table is for processes that serve), so they have their own small
 * parser here; --setParameter and --wiredTigerCacheSizeGB are passed on to the
 * processes `up` starts.
 */
#ifndef SHL_MAIN_CLUSTER_ARGS_H
#define SHL_MAIN_CLUSTER_ARGS_H

#include <stdbool.h>
#include <stdio.h>

#include "base/status.h"

#define SHL_CLUSTER_MAX_EXTRA 16

typedef enum shl_cluster_cmd {
    SHL_CLUSTER_CMD_UP,
    SHL_CLUSTER_CMD_DOWN,
    SHL_CLUSTER_CMD_STATUS,
} shl_cluster_cmd_t;

typedef struct shl_cluster_args {
    int shards; /* default 2 */
    bool shards_given;
    int replicas; /* up --replicas: members per replica set, default 1 */
    bool replicas_given;
    int port; /* default 27017 */
    bool port_given;
    const char *dbpath;  /* default "./shale-data" */
    const char *bind_ip; /* default "127.0.0.1" */
    bool bind_ip_given;
    const char *host; /* status --host; NULL if not given */
    bool verbose;     /* status --verbose */
    bool auth;        /* up --auth: a key file and a first admin user */
    /* status: the user to authenticate as (SCRAM-SHA-256); NULL if not given */
    const char *username;
    const char *password;
    bool tls;                  /* status --tls: connect with TLS */
    const char *tls_ca_file;   /* status --tlsCAFile */
    const char *tls_cert_file; /* status --tlsCertificateKeyFile */
    const char *auth_db; /* --authenticationDatabase, default "admin" */
    /* Flags passed on: to every process, and to data nodes only (argv pointers). */
    const char *all_extra[2 * SHL_CLUSTER_MAX_EXTRA];
    int n_all_extra;
    const char *node_extra[2 * SHL_CLUSTER_MAX_EXTRA];
    int n_node_extra;
} shl_cluster_args_t;

/*
 * shl_cluster_args_parse --
 *     Parse argv[2..argc) for 'cmd' ("--name value" or "--name=value"). Strings point
 *     into argv. Errors: BadValue (unknown flag, missing or malformed value, a flag the
 *     command does not take).
 */
int shl_cluster_args_parse(shl_cluster_args_t *a, shl_cluster_cmd_t cmd, int argc, char **argv,
                           shl_status_t *st);

/* shl_cluster_args_usage -- the usage line(s) of 'cmd'. */
void shl_cluster_args_usage(FILE *out, shl_cluster_cmd_t cmd);

#endif
