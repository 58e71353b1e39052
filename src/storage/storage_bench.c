/*
 * storage_bench.c -- insert throughput at the storage API level (no network, no command
 * layer): N threads, one document per write unit (record + _id index + oplog entry),
 * j:false, printed with the ratio to the raw WiredTiger baseline (bench/wt_baseline.c)
 * measured in the same run with the same document. Usage:
 *   storage_bench [threads] [seconds] [batch]    (batch > 1: documents per write unit)
 */
#define WT_BASELINE_NO_MAIN
#include "../../bench/wt_baseline.c"

#include "base/log.h"
#include "base/options.h"
#include "storage/catalog.h"
#include "storage/storage.h"
#include "storage/write.h"

typedef struct bench_ctx {
    shl_storage_engine_t *eng;
    int batch;
    atomic_llong next_id;
    atomic_bool stop;
    atomic_llong ops;
    const char *pad;
} bench_ctx_t;

typedef struct bench_unit {
    bench_ctx_t *ctx;
    shl_collection_t *coll;
} bench_unit_t;

static int
bench_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    bench_unit_t *u = arg;
    int ret = 0;
    for (int i = 0; i < u->ctx->batch && ret == 0; i++) {
        bson_t *doc = BCON_NEW("_id", BCON_INT64(atomic_fetch_add(&u->ctx->next_id, 1)), "x",
                               BCON_INT32(1), "pad", BCON_UTF8(u->ctx->pad));
        ret = shl_doc_insert(txn, u->coll, doc, NULL, NULL, st);
        bson_destroy(doc);
    }
    return ret;
}

static void *
bench_worker(void *arg)
{
    bench_ctx_t *c = arg;
    shl_status_t st;
    while (!atomic_load(&c->stop)) {
        shl_coll_handle_t h;
        bench_unit_t u = {.ctx = c};
        shl_storage_coll_acquire(c->eng, "bench.c", SHL_LOCK_SHARED, &h, &st);
        u.coll = h.coll;
        if (shl_storage_write_retry(c->eng, bench_fn, &u, NULL, &st) == 0) {
            atomic_fetch_add(&c->ops, c->batch);
        } else {
            fprintf(stderr, "insert failed: %s\n", st.reason);
        }
        shl_storage_coll_release(&h);
    }
    return NULL;
}

int
main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    double seconds = argc > 2 ? atof(argv[2]) : 3;
    int batch = argc > 3 ? atoi(argv[3]) : 1;
    char d1[] = "/tmp/shl_bench_XXXXXX", d2[] = "/tmp/shl_bench_XXXXXX";
    char pad[201], cmd[128];
    bson_t *doc;
    bench_ctx_t c = {.batch = batch, .pad = pad};
    shl_storage_options_t o = {.cache_size_mb = 1024};
    shl_status_t st;
    pthread_t *th = calloc((size_t)threads, sizeof(pthread_t));
    double base, ours;
    int64_t t0, t1;

    memset(pad, 'x', 200);
    pad[200] = '\0';
    doc = BCON_NEW("_id", BCON_INT64(1), "x", BCON_INT32(1), "pad", BCON_UTF8(pad));
    if (mkdtemp(d1) == NULL || mkdtemp(d2) == NULL) {
        return 1;
    }
    shl_options_init();
    shl_log_open("/dev/null");
    base = wt_baseline_run(d1, threads, seconds, true, doc, 1024);

    o.dbpath = d2;
    if (shl_storage_open(&o, &c.eng, &st) != 0 ||
        shl_catalog_create_collection(c.eng, "bench.c", NULL, NULL, NULL, &st) != 0) {
        fprintf(stderr, "open: %s\n", st.reason);
        return 1;
    }
    t0 = wtb_now_us();
    for (int i = 0; i < threads; i++) {
        pthread_create(&th[i], NULL, bench_worker, &c);
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
    ours = (double)atomic_load(&c.ops) / ((double)(t1 - t0) / 1e6);
    shl_storage_close(c.eng);
    printf("threads=%d batch=%d doc=%u bytes: storage %.0f docs/s, raw WT (logged, 1 op/txn) "
           "%.0f/s, ratio %.2f\n",
           threads, batch, doc->len, ours, base, ours / base);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", d1, d2);
    if (system(cmd) != 0) {
        fprintf(stderr, "cleanup failed\n");
    }
    bson_destroy(doc);
    free(th);
    return 0;
}
