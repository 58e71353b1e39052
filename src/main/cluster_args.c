/*
 * cluster_args.c -- see cluster_args.h.
 */
#include "main/cluster_args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int
parse_int(const char *flag, const char *val, int lo, int hi, int *out, shl_status_t *st)
{
    int ret = 0;
    char *end = NULL;
    long v;

    errno = 0;
    v = strtol(val, &end, 10);
    if (errno != 0 || end == val || *end != '\0' || v < lo || v > hi) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "--%s expects a number from %d to %d, got '%s'", flag, lo,
                 hi, val);
    }
    *out = (int)v;
done:
    return ret;
}

int
shl_cluster_args_parse(shl_cluster_args_t *a, shl_cluster_cmd_t cmd, int argc, char **argv,
                       shl_status_t *st)
{
    int ret = 0;

    memset(a, 0, sizeof(*a));
    a->shards = 2;
    a->replicas = 1;
    a->port = 27017;
    a->dbpath = "./shale-data";
    a->bind_ip = "127.0.0.1";
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i], *val = NULL, *eq;
        char name[64];
        size_t nlen;
        bool takes_value = true;

        if (strncmp(arg, "--", 2) != 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "unexpected argument '%s'", arg);
        }
        arg += 2;
        eq = strchr(arg, '=');
        nlen = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        if (nlen >= sizeof(name)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "unrecognised option '--%s'", arg);
        }
        memcpy(name, arg, nlen);
        name[nlen] = '\0';
        if (strcmp(name, "verbose") == 0 || strcmp(name, "auth") == 0 || strcmp(name, "tls") == 0) {
            takes_value = false;
        }
        if (eq != NULL) {
            val = eq + 1;
        } else if (takes_value) {
            if (i + 1 >= argc) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "option '--%s' needs a value", name);
            }
            val = argv[++i];
        }
        if (strcmp(name, "dbpath") == 0) {
            if (val[0] == '\0') {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "--dbpath must not be empty");
            }
            a->dbpath = val;
        } else if (cmd == SHL_CLUSTER_CMD_UP && strcmp(name, "shards") == 0) {
            SHL_ERR(parse_int(name, val, 1, 64, &a->shards, st));
            a->shards_given = true;
        } else if (cmd == SHL_CLUSTER_CMD_UP && strcmp(name, "replicas") == 0) {
            SHL_ERR(parse_int(name, val, 1, 7, &a->replicas, st));
            a->replicas_given = true;
        } else if (cmd == SHL_CLUSTER_CMD_UP && strcmp(name, "port") == 0) {
            SHL_ERR(parse_int(name, val, 1, 65535, &a->port, st));
            a->port_given = true;
        } else if (cmd == SHL_CLUSTER_CMD_UP && strcmp(name, "bind_ip") == 0) {
            if (val[0] == '\0') {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "--bind_ip must not be empty");
            }
            a->bind_ip = val;
            a->bind_ip_given = true;
        } else if (cmd == SHL_CLUSTER_CMD_UP && strcmp(name, "setParameter") == 0) {
            if (a->n_all_extra >= 2 * SHL_CLUSTER_MAX_EXTRA) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "too many --setParameter flags");
            }
            a->all_extra[a->n_all_extra++] = "--setParameter";
            a->all_extra[a->n_all_extra++] = val;
        } else if (cmd == SHL_CLUSTER_CMD_UP && strcmp(name, "wiredTigerCacheSizeGB") == 0) {
            if (a->n_node_extra >= 2 * SHL_CLUSTER_MAX_EXTRA) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "too many --wiredTigerCacheSizeGB flags");
            }
            a->node_extra[a->n_node_extra++] = "--wiredTigerCacheSizeGB";
            a->node_extra[a->n_node_extra++] = val;
        } else if (cmd == SHL_CLUSTER_CMD_UP && strcmp(name, "auth") == 0) {
            if (val != NULL && strcmp(val, "true") != 0 && strcmp(val, "1") != 0) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "--auth takes no value");
            }
            a->auth = true;
        } else if (cmd == SHL_CLUSTER_CMD_STATUS && strcmp(name, "username") == 0) {
            a->username = val;
        } else if (cmd == SHL_CLUSTER_CMD_STATUS && strcmp(name, "password") == 0) {
            a->password = val;
        } else if (cmd == SHL_CLUSTER_CMD_STATUS && strcmp(name, "authenticationDatabase") == 0) {
            a->auth_db = val;
        } else if (cmd == SHL_CLUSTER_CMD_STATUS && strcmp(name, "tls") == 0) {
            a->tls = true;
        } else if (cmd == SHL_CLUSTER_CMD_STATUS && strcmp(name, "tlsCAFile") == 0) {
            a->tls_ca_file = val;
        } else if (cmd == SHL_CLUSTER_CMD_STATUS && strcmp(name, "tlsCertificateKeyFile") == 0) {
            a->tls_cert_file = val;
        } else if (cmd == SHL_CLUSTER_CMD_STATUS && strcmp(name, "host") == 0) {
            a->host = val;
        } else if (cmd == SHL_CLUSTER_CMD_STATUS && strcmp(name, "verbose") == 0) {
            if (val != NULL && strcmp(val, "true") != 0 && strcmp(val, "1") != 0) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "--verbose takes no value");
            }
            a->verbose = true;
        } else {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "unrecognised option '--%s'", name);
        }
    }
done:
    return ret;
}

void
shl_cluster_args_usage(FILE *out, shl_cluster_cmd_t cmd)
{
    if (cmd == SHL_CLUSTER_CMD_UP) {
        fprintf(out,
                "usage: shale up [--shards N] [--replicas R] [--dbpath DIR] [--port P]\n"
                "                [--bind_ip IP] [--auth]\n"
                "                [--setParameter name=value]... [--wiredTigerCacheSizeGB G]\n");
    } else if (cmd == SHL_CLUSTER_CMD_DOWN) {
        fprintf(out, "usage: shale down [--dbpath DIR]\n");
    } else {
        fprintf(out, "usage: shale status [--dbpath DIR | --host HOST:PORT] [--verbose]\n"
                     "                    [--username U --password P "
                     "[--authenticationDatabase DB]]\n"
                     "                    [--tls [--tlsCAFile F] [--tlsCertificateKeyFile F]]\n");
    }
}
