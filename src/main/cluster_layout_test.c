/*
 * cluster_layout_test.c -- the cluster layout: port plan, cluster.json round trip,
 * refusing bad files, and telling a live process from a dead or recycled pid.
 */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/unit_test.h"
#include "main/cluster_args.h"
#include "main/cluster_layout.h"

static char tmpdir[256];

/* Remove the scratch folder (flat: cluster.json, pid files) when the binary exits. */
__attribute__((destructor)) static void
remove_scratch_dir(void)
{
    DIR *d;
    struct dirent *e;
    char path[600];

    if (tmpdir[0] == '\0' || (d = opendir(tmpdir)) == NULL) {
        return;
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof(path), "%s/%s", tmpdir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
    rmdir(tmpdir);
}

static const char *
scratch_dir(void)
{
    if (tmpdir[0] == '\0') {
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/shale-main-test-XXXXXX");
        if (mkdtemp(tmpdir) == NULL) {
            abort();
        }
    }
    return tmpdir;
}

SHL_TEST(layout_plan_ports_and_names)
{
    shl_cluster_layout_t lay;
    shl_status_t st = SHL_STATUS_INIT;

    ASSERT_INT_EQ(shl_cluster_layout_plan(&lay, "/data/c/", 3, 30000, "127.0.0.1", &st), 0);
    ASSERT_STR_EQ(lay.dir, "/data/c");
    ASSERT_INT_EQ(lay.nprocs, 5);
    ASSERT_STR_EQ(lay.procs[0].name, "config");
    ASSERT_STR_EQ(lay.procs[0].repl_set, "csrs");
    ASSERT_INT_EQ(lay.procs[0].port, 30001);
    ASSERT_STR_EQ(lay.procs[3].name, "shard2");
    ASSERT_STR_EQ(lay.procs[3].repl_set, "shard2");
    ASSERT_INT_EQ(lay.procs[3].port, 30004);
    ASSERT_STR_EQ(lay.procs[4].name, "router");
    ASSERT_INT_EQ(lay.procs[4].port, 30000);
    ASSERT_INT_EQ(shl_cluster_layout_plan(&lay, "rel", 1, 1, "0.0.0.0", &st), 0);
    ASSERT(lay.dir[0] == '/');
    ASSERT_STR_EQ(lay.host_ip, "127.0.0.1");
    ASSERT_INT_EQ(shl_cluster_layout_plan(&lay, "/x", 0, 30000, "127.0.0.1", &st),
                  SHL_CODE_BAD_VALUE);
    ASSERT_INT_EQ(shl_cluster_layout_plan(&lay, "/x", 2, 65533, "127.0.0.1", &st),
                  SHL_CODE_BAD_VALUE);
}

SHL_TEST(layout_save_load_round_trip)
{
    shl_cluster_layout_t lay, back;
    shl_status_t st = SHL_STATUS_INIT;
    bool found = false;
    char path[512];

    ASSERT_INT_EQ(shl_cluster_layout_plan(&lay, scratch_dir(), 2, 31000, "127.0.0.1", &st), 0);
    lay.procs[1].pid = 4242;
    lay.procs[1].start_ticks = 99;
    ASSERT_INT_EQ(shl_cluster_layout_save(&lay, &st), 0);
    snprintf(path, sizeof(path), "%s/shard0.pid", scratch_dir());
    ASSERT(access(path, F_OK) == 0);
    snprintf(path, sizeof(path), "%s/router.pid", scratch_dir());
    ASSERT(access(path, F_OK) != 0);
    ASSERT_INT_EQ(shl_cluster_layout_load(&back, scratch_dir(), &found, &st), 0);
    ASSERT(found);
    ASSERT_INT_EQ(back.port, 31000);
    ASSERT_INT_EQ(back.nshards, 2);
    ASSERT_INT_EQ(back.nprocs, 4);
    ASSERT_STR_EQ(back.procs[1].name, "shard0");
    ASSERT_INT_EQ(back.procs[1].role, SHL_CLUSTER_SHARDSVR);
    ASSERT_INT_EQ(back.procs[1].pid, 4242);
    ASSERT_INT_EQ(back.procs[1].start_ticks, 99);
    ASSERT_INT_EQ(back.procs[3].role, SHL_CLUSTER_ROUTER);
    /* pid 0 removes the pid file. */
    lay.procs[1].pid = 0;
    ASSERT_INT_EQ(shl_cluster_layout_save(&lay, &st), 0);
    snprintf(path, sizeof(path), "%s/shard0.pid", scratch_dir());
    ASSERT(access(path, F_OK) != 0);
}

SHL_TEST(layout_replicas_make_the_config_server_a_set_too)
{
    shl_cluster_layout_t lay, back;
    shl_status_t st = SHL_STATUS_INIT;
    bool found = false;

    ASSERT_INT_EQ(
        shl_cluster_layout_plan_replicas(&lay, scratch_dir(), 2, 3, 32000, "127.0.0.1", &st), 0);
    ASSERT_INT_EQ(lay.nprocs, 10);
    ASSERT_INT_EQ(lay.config_replicas, 3);
    ASSERT_STR_EQ(lay.procs[2].name, "config-2");
    ASSERT_STR_EQ(lay.procs[2].repl_set, "csrs");
    ASSERT_INT_EQ(lay.procs[2].port, 32003);
    ASSERT_STR_EQ(lay.procs[3].name, "shard0");
    ASSERT_INT_EQ(lay.procs[3].port, 32004);
    ASSERT_STR_EQ(lay.procs[6].name, "shard1");
    ASSERT_INT_EQ(lay.procs[6].port, 32007);
    ASSERT_INT_EQ(shl_cluster_layout_save(&lay, &st), 0);
    ASSERT_INT_EQ(shl_cluster_layout_load(&back, scratch_dir(), &found, &st), 0);
    ASSERT_INT_EQ(back.config_replicas, 3);
    ASSERT_INT_EQ(back.replicas, 3);
    ASSERT_INT_EQ(back.nshards, 2);
    /* A cluster recorded with one config member keeps its ports (shards from port+2). */
    ASSERT_INT_EQ(
        shl_cluster_layout_plan_sets(&lay, scratch_dir(), 1, 2, 1, 32000, "127.0.0.1", &st), 0);
    ASSERT_INT_EQ(lay.procs[1].port, 32002);
    ASSERT_INT_EQ(shl_cluster_layout_save(&lay, &st), 0);
    ASSERT_INT_EQ(shl_cluster_layout_load(&back, scratch_dir(), &found, &st), 0);
    ASSERT_INT_EQ(back.config_replicas, 1);
    ASSERT_INT_EQ(shl_cluster_layout_plan_sets(&lay, scratch_dir(), 1, 2, 0, 32000, "127.0.0.1",
                                               &st),
                  SHL_CODE_BAD_VALUE);
}

SHL_TEST(layout_load_missing_and_malformed)
{
    shl_cluster_layout_t lay;
    shl_status_t st = SHL_STATUS_INIT;
    bool found = true;
    char dir[512], path[600];
    FILE *f;

    snprintf(dir, sizeof(dir), "%s/none", scratch_dir());
    ASSERT_INT_EQ(shl_cluster_layout_load(&lay, dir, &found, &st), 0);
    ASSERT(!found);
    snprintf(path, sizeof(path), "%s/cluster.json", scratch_dir());
    f = fopen(path, "w");
    ASSERT(f != NULL);
    fputs("{\"port\": 5, \"processes\": [{\"name\": \"../x\", \"port\": 7}]}", f);
    fclose(f);
    ASSERT_INT_EQ(shl_cluster_layout_load(&lay, scratch_dir(), &found, &st),
                  SHL_CODE_FAILED_TO_PARSE);
    f = fopen(path, "w");
    ASSERT(f != NULL);
    fputs("{not json", f);
    fclose(f);
    ASSERT_INT_EQ(shl_cluster_layout_load(&lay, scratch_dir(), &found, &st),
                  SHL_CODE_FAILED_TO_PARSE);
    unlink(path);
}

SHL_TEST(proc_alive_and_stop)
{
    shl_cluster_proc_t p = {.pid = 0};
    pid_t child = fork();

    if (child == 0) {
        pause();
        _exit(0);
    }
    ASSERT(child > 0);
    p.pid = child;
    p.start_ticks = shl_cluster_pid_start_ticks(child);
    ASSERT(p.start_ticks != 0);
    ASSERT(shl_cluster_proc_alive(&p));
    /* A recorded start time that does not match is another process with that pid. */
    p.start_ticks++;
    ASSERT(!shl_cluster_proc_alive(&p));
    p.start_ticks--;
    ASSERT(shl_cluster_proc_stop(&p, 5000));
    ASSERT_INT_EQ(p.pid, 0);
    ASSERT(shl_cluster_pid_start_ticks(child) == 0);
}

SHL_TEST(args_parse)
{
    shl_cluster_args_t a;
    shl_status_t st = SHL_STATUS_INIT;
    char s_up[][32] = {"shale",
                       "up",
                       "--shards=3",
                       "--port",
                       "40000",
                       "--dbpath",
                       "d",
                       "--setParameter",
                       "enableTestCommands=1"};
    char s_bad[][32] = {"shale", "down", "--shards", "3"};
    char s_badnum[][32] = {"shale", "up", "--port", "70000"};
    char *up[9], *bad[4], *badnum[4];

    for (int i = 0; i < 9; i++) {
        up[i] = s_up[i];
    }
    for (int i = 0; i < 4; i++) {
        bad[i] = s_bad[i];
        badnum[i] = s_badnum[i];
    }
    ASSERT_INT_EQ(shl_cluster_args_parse(&a, SHL_CLUSTER_CMD_UP, 9, up, &st), 0);
    ASSERT_INT_EQ(a.shards, 3);
    ASSERT_INT_EQ(a.port, 40000);
    ASSERT_STR_EQ(a.dbpath, "d");
    ASSERT_INT_EQ(a.n_all_extra, 2);
    ASSERT_INT_EQ(shl_cluster_args_parse(&a, SHL_CLUSTER_CMD_DOWN, 4, bad, &st),
                  SHL_CODE_BAD_VALUE);
    ASSERT_INT_EQ(shl_cluster_args_parse(&a, SHL_CLUSTER_CMD_UP, 4, badnum, &st),
                  SHL_CODE_BAD_VALUE);
}
