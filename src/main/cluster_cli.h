/*
 * cluster_cli.h -- `shale up`, `shale down`, `shale status`: a local sharded cluster
 * (config server, N shards, router) in one folder, like mlaunch. The layout and the
 * process handling are in cluster_layout.h; the protocol the processes speak is
 * docs/design/sharding-protocol.md.
 */
#ifndef SHL_MAIN_CLUSTER_CLI_H
#define SHL_MAIN_CLUSTER_CLI_H

/*
 * shl_cluster_up_main --
 *     `shale up [--shards N] [--dbpath DIR] [--port P] [--bind_ip IP]
 *     [--setParameter n=v]... [--wiredTigerCacheSizeGB G]`: start (or restart) the
 *     cluster recorded in DIR, add its shards through the router, print the connection
 *     string on stdout and return 0. On failure stops what it started and returns 1
 *     (2 for bad usage). argv[1] is "up". Without --wiredTigerCacheSizeGB each data node's
 *     cache is MongoDB's default for the machine divided among the cluster's data nodes.
 */
int shl_cluster_up_main(int argc, char **argv);

/* shl_cluster_down_main -- `shale down [--dbpath DIR]`: stop the recorded processes. */
int shl_cluster_down_main(int argc, char **argv);

/*
 * shl_cluster_status_main --
 *     `shale status [--dbpath DIR | --host H:P] [--verbose]`: print what mongosh's
 *     sh.status() shows, read from config.* through the router.
 */
int shl_cluster_status_main(int argc, char **argv);

#endif
