/*
 * wt_baseline.c -- the raw WiredTiger baseline for insert benchmarks (issue 3): N threads,
 * one insert per transaction of a fixed-size BSON document into one table, with the
 * same connection settings as the storage engine (journal on, snappy, same cache).
 * Standalone:  cc -O2 -o wt_baseline bench/wt_baseline.c $(pkg-config --cflags --libs
 *              wiredtiger libbson-1.0) -lpthread && ./wt_baseline [threads] [seconds] [logged]
 * The storage benchmark (src/storage/storage_bench.c) links the same code to print ratios.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <bson/bson.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <wiredtiger.h>

#define WT_BASELINE_SNAPPY "/usr/lib/x86_64-linux-gnu/libwiredtiger_snappy.so"

typedef struct wtb_ctx {
    WT_CONNECTION *conn;
    const char *uri;
    const bson_t *doc;
    atomic_llong next_key;
    atomic_bool stop;
    atomic_llong ops;
    bool timestamps;
    atomic_ullong ts;
} wtb_ctx_t;

static int64_t
wtb_now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static void *
wtb_worker(void *arg)
{
    wtb_ctx_t *c = arg;
    WT_SESSION *s;
    WT_CURSOR *cur;
    WT_ITEM v = {.data = bson_get_data(c->doc), .size = c->doc->len};
    char cfg[64];

    if (c->conn->open_session(c->conn, NULL, "isolation=snapshot", &s) != 0 ||
        s->open_cursor(s, c->uri, NULL, "overwrite=false", &cur) != 0) {
        fprintf(stderr, "wt_baseline: cannot open a session\n");
        return NULL;
    }
    while (!atomic_load(&c->stop)) {
        int64_t key = atomic_fetch_add(&c->next_key, 1);
        s->begin_transaction(s, NULL);
        if (c->timestamps) {
            snprintf(cfg, sizeof(cfg), "commit_timestamp=%" PRIx64,
                     (uint64_t)atomic_fetch_add(&c->ts, 1) + 1);
            s->timestamp_transaction(s, cfg);
        }
        cur->set_key(cur, key);
        cur->set_value(cur, &v);
        if (cur->insert(cur) != 0) {
            s->rollback_transaction(s, NULL);
            continue;
        }
        if (s->commit_transaction(s, NULL) == 0) {
            atomic_fetch_add(&c->ops, 1);
        }
    }
    s->close(s, NULL);
    return NULL;
}

/*
 * wt_baseline_run -- insert 'doc' for 'seconds' with 'threads' threads into a fresh
 * database in 'dir' (logged table, or unlogged with a commit timestamp per insert);
 * returns inserts per second.
 */
double wt_baseline_run(const char *dir, int threads, double seconds, bool logged, const bson_t *doc,
                       int64_t cache_mb);

double
wt_baseline_run(const char *dir, int threads, double seconds, bool logged, const bson_t *doc,
                int64_t cache_mb)
{
    wtb_ctx_t c = {.uri = "table:baseline", .doc = doc, .timestamps = !logged};
    WT_SESSION *s;
    pthread_t *th = calloc((size_t)threads, sizeof(pthread_t));
    char cfg[512], jdir[1024];
    int64_t t0, t1;
    bool snappy = access(WT_BASELINE_SNAPPY, R_OK) == 0;

    snprintf(jdir, sizeof(jdir), "mkdir -p '%s/journal'", dir);
    if (system(jdir) != 0) {
        return 0;
    }
    snprintf(cfg, sizeof(cfg),
             "create,cache_size=%" PRId64 "M,session_max=20000,"
             "eviction=(threads_min=4,threads_max=4),"
             "log=(enabled=true,archive=true,path=journal%s),transaction_sync=(enabled=false)%s",
             cache_mb, snappy ? ",compressor=snappy" : "",
             snappy ? ",extensions=[" WT_BASELINE_SNAPPY "]" : "");
    if (wiredtiger_open(dir, NULL, cfg, &c.conn) != 0) {
        fprintf(stderr, "wt_baseline: wiredtiger_open failed\n");
        return 0;
    }
    c.conn->open_session(c.conn, NULL, NULL, &s);
    s->create(s, c.uri,
              logged ? (snappy ? "key_format=q,value_format=u,block_compressor=snappy"
                               : "key_format=q,value_format=u")
                     : (snappy ? "key_format=q,value_format=u,log=(enabled=false),"
                                 "block_compressor=snappy"
                               : "key_format=q,value_format=u,log=(enabled=false)"));
    c.ts = (uint64_t)time(NULL) << 32;
    t0 = wtb_now_us();
    for (int i = 0; i < threads; i++) {
        pthread_create(&th[i], NULL, wtb_worker, &c);
    }
    while (wtb_now_us() - t0 < (int64_t)(seconds * 1e6)) {
        struct timespec d = {0, 20000000};
        nanosleep(&d, NULL);
    }
    atomic_store(&c.stop, true);
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
    }
    t1 = wtb_now_us();
    c.conn->close(c.conn, NULL);
    free(th);
    return (double)atomic_load(&c.ops) / ((double)(t1 - t0) / 1e6);
}

#ifndef WT_BASELINE_NO_MAIN
int
main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    double seconds = argc > 2 ? atof(argv[2]) : 3;
    bool logged = argc > 3 ? atoi(argv[3]) != 0 : true;
    char dir[] = "/tmp/wt_baseline_XXXXXX";
    char pad[201];
    bson_t *doc;
    double rate;

    memset(pad, 'x', 200);
    pad[200] = '\0';
    doc = BCON_NEW("_id", BCON_INT64(1), "x", BCON_INT32(1), "pad", BCON_UTF8(pad));
    if (mkdtemp(dir) == NULL) {
        return 1;
    }
    rate = wt_baseline_run(dir, threads, seconds, logged, doc, 1024);
    printf("wt_baseline threads=%d logged=%d doc=%u bytes: %.0f inserts/s\n", threads, logged,
           doc->len, rate);
    bson_destroy(doc);
    return 0;
}
#endif
