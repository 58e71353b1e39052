/*
 * wt_hot_record.c -- the raw WiredTiger floor under retryable writes at one connection
 * (bench/retryable.sh, issue 13 item 9). One thread, one timestamped transaction per
 * operation, each inserting a new 229-byte document into an unlogged table (a collection)
 * and, in "hot" mode, also updating one fixed record of another unlogged table (a session's
 * config.transactions document, rewritten by every retryable write of that session). A
 * second thread moves the stable timestamp to the last commit every 'stable_ms' and the
 * oldest timestamp 'lag_secs' behind it, as the storage engine does for
 * minSnapshotHistoryWindowInSeconds (timestamps carry wall-clock seconds in their high half,
 * as Shale's do). It prints one JSON line: operations per second of the run.
 *
 *   wt_hot_record MODE LAG_SECS SECONDS
 *     MODE plain: the insert only; hot: the insert plus the update of the one record;
 *     keyed: the insert plus a record keyed by the write (insert it, remove the previous
 *     write's), the layout that keeps every update chain at two entries.
 *
 * What it shows: with a lag, WiredTiger 3.2.1 keeps every version of the hot record younger
 * than the oldest timestamp in that record's in-memory update chain, and each update (and
 * each forced eviction of its page) walks the whole chain; the same run at lag 0 does not.
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

#define HR_SNAPPY "/usr/lib/x86_64-linux-gnu/libwiredtiger_snappy.so"
#define HR_TS(secs, inc) (((uint64_t)(secs) << 32) | (uint64_t)(inc))

typedef struct hr_ctx {
    WT_CONNECTION *conn;
    bool hot;
    bool keyed;
    uint32_t lag_secs;
    int stable_ms;
    atomic_bool stop;
    atomic_ullong last_commit; /* the last committed timestamp (0 = none yet) */
    pthread_mutex_t ts_mu;     /* guards ts_secs, ts_inc */
    uint32_t ts_secs;
    uint32_t ts_inc;
} hr_ctx_t;

static int64_t
hr_now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* The next commit timestamp: wall-clock seconds, then a counter within the second. */
static uint64_t
hr_next_ts(hr_ctx_t *c)
{
    uint32_t now = (uint32_t)time(NULL);
    uint64_t ts;

    pthread_mutex_lock(&c->ts_mu);
    if (now > c->ts_secs) {
        c->ts_secs = now;
        c->ts_inc = 0;
    }
    c->ts_inc++;
    ts = HR_TS(c->ts_secs, c->ts_inc);
    pthread_mutex_unlock(&c->ts_mu);
    return ts;
}

/* Stable follows the last commit; oldest trails it by lag_secs whole seconds. */
static void *
hr_timekeeper(void *arg)
{
    hr_ctx_t *c = arg;
    uint64_t oldest = 0;
    char cfg[96];

    while (!atomic_load(&c->stop)) {
        struct timespec d = {0, (long)c->stable_ms * 1000000L};
        uint64_t stable = atomic_load(&c->last_commit), want;

        nanosleep(&d, NULL);
        if (stable == 0) {
            continue;
        }
        want = c->lag_secs == 0 ? stable : HR_TS((stable >> 32) - c->lag_secs, 0);
        if (want > oldest) {
            snprintf(cfg, sizeof(cfg), "stable_timestamp=%" PRIx64 ",oldest_timestamp=%" PRIx64,
                     stable, want);
            oldest = want;
        } else {
            snprintf(cfg, sizeof(cfg), "stable_timestamp=%" PRIx64, stable);
        }
        c->conn->set_timestamp(c->conn, cfg);
    }
    return NULL;
}

static int64_t
hr_cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Sleep until operation 'ops' is due at 'rate' per second after 't0' (no pace: return). */
static void
hr_pace(int64_t t0, int64_t ops, double rate)
{
    int64_t due, wait;

    if (rate <= 0) {
        return;
    }
    due = t0 + (int64_t)((double)ops * 1e6 / rate);
    wait = due - hr_now_us();
    if (wait > 0) {
        struct timespec d = {wait / 1000000, (long)(wait % 1000000) * 1000};
        nanosleep(&d, NULL);
    }
}

/* Run for 'seconds'; returns operations per second, sets *cpu_us_per_op. */
static double
hr_run(hr_ctx_t *c, double seconds, double rate, const bson_t *doc, const bson_t *rec,
       double *cpu_us_per_op)
{
    WT_SESSION *s;
    WT_CURSOR *coll, *txns;
    WT_ITEM v = {.data = bson_get_data(doc), .size = doc->len};
    WT_ITEM r = {.data = bson_get_data(rec), .size = rec->len};
    pthread_t keeper;
    int64_t t0, ops = 0, key = 1, cpu = 0;
    char cfg[64];

    c->conn->open_session(c->conn, NULL, "isolation=snapshot", &s);
    s->open_cursor(s, "table:coll", NULL, "overwrite=false", &coll);
    s->open_cursor(s, "table:txns", NULL, NULL, &txns);
    pthread_create(&keeper, NULL, hr_timekeeper, c);
    t0 = hr_now_us();
    while (hr_now_us() - t0 < (int64_t)(seconds * 1e6)) {
        uint64_t ts;
        int64_t c0;
        int ret;

        hr_pace(t0, ops, rate);
        c0 = hr_cpu_ns();
        ts = hr_next_ts(c);
        s->begin_transaction(s, NULL);
        snprintf(cfg, sizeof(cfg), "commit_timestamp=%" PRIx64, ts);
        s->timestamp_transaction(s, cfg);
        coll->set_key(coll, key++);
        coll->set_value(coll, &v);
        ret = coll->insert(coll);
        if (ret == 0 && c->keyed) {
            /* The record keyed by (session, txnNumber): insert this write's, remove the one
             * before it. */
            txns->set_key(txns, key);
            txns->set_value(txns, &r);
            ret = txns->insert(txns);
            if (ret == 0) {
                txns->set_key(txns, key - 1);
                ret = txns->remove(txns);
                ret = ret == WT_NOTFOUND ? 0 : ret;
            }
        } else if (ret == 0 && c->hot) {
            /* Read the session's record, then rewrite it, as the write path does. */
            txns->set_key(txns, (int64_t)1);
            ret = txns->search(txns);
            if (ret == 0) {
                txns->set_value(txns, &r);
                ret = txns->update(txns);
            }
        }
        if (ret == 0 && s->commit_transaction(s, NULL) == 0) {
            atomic_store(&c->last_commit, ts);
            ops++;
        } else if (ret != 0) {
            s->rollback_transaction(s, NULL);
        }
        cpu += hr_cpu_ns() - c0;
    }
    *cpu_us_per_op = ops > 0 ? (double)cpu / 1e3 / (double)ops : 0;
    atomic_store(&c->stop, true);
    pthread_join(keeper, NULL);
    s->close(s, NULL);
    return (double)ops / ((double)(hr_now_us() - t0) / 1e6);
}

int
main(int argc, char **argv)
{
    hr_ctx_t c = {.stable_ms = 100};
    const char *mode = argc > 1 ? argv[1] : "hot";
    double seconds = argc > 3 ? atof(argv[3]) : 5, pace = argc > 4 ? atof(argv[4]) : 0, rate,
           cpu_us = 0;
    char dir[] = "/tmp/wt_hot_record_XXXXXX", cfg[512], cmd[1100], pad[201];
    bool snappy = access(HR_SNAPPY, R_OK) == 0;
    const char *tcfg = snappy ? "key_format=q,value_format=u,log=(enabled=false),"
                                "block_compressor=snappy"
                              : "key_format=q,value_format=u,log=(enabled=false)";
    bson_t *doc, *rec;
    WT_SESSION *s;
    WT_CURSOR *txns;
    WT_ITEM r;

    c.hot = strcmp(mode, "hot") == 0;
    c.keyed = strcmp(mode, "keyed") == 0;
    c.lag_secs = argc > 2 ? (uint32_t)atoi(argv[2]) : 300;
    pthread_mutex_init(&c.ts_mu, NULL);
    memset(pad, 'x', 200);
    pad[200] = '\0';
    doc = BCON_NEW("_id", BCON_INT64(1), "x", BCON_INT32(1), "pad", BCON_UTF8(pad));
    /* A config.transactions document's size: lsid, txnNum, lastWriteOpTime, lastWriteDate. */
    rec = BCON_NEW("_id", "{", "id", BCON_BIN(BSON_SUBTYPE_UUID, (const uint8_t *)pad, 16), "uid",
                   BCON_BIN(BSON_SUBTYPE_BINARY, (const uint8_t *)pad, 32), "}", "txnNum",
                   BCON_INT64(1), "lastWriteOpTime", "{", "ts", BCON_TIMESTAMP(1, 1), "t",
                   BCON_INT64(1), "}", "lastWriteDate", BCON_DATE_TIME(1));
    if (mkdtemp(dir) == NULL) {
        return 1;
    }
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s/journal'", dir);
    if (system(cmd) != 0) {
        return 1;
    }
    /* The storage engine's connection settings (src/storage/engine.c). */
    snprintf(cfg, sizeof(cfg),
             "create,cache_size=1024M,session_max=20000,eviction=(threads_min=4,threads_max=4),"
             "log=(enabled=true,archive=true,path=journal%s),transaction_sync=(enabled=false)%s",
             snappy ? ",compressor=snappy" : "", snappy ? ",extensions=[" HR_SNAPPY "]" : "");
    if (wiredtiger_open(dir, NULL, cfg, &c.conn) != 0) {
        fprintf(stderr, "wt_hot_record: wiredtiger_open failed\n");
        return 1;
    }
    c.conn->open_session(c.conn, NULL, "isolation=snapshot", &s);
    s->create(s, "table:coll", tcfg);
    s->create(s, "table:txns", tcfg);
    s->open_cursor(s, "table:txns", NULL, NULL, &txns);
    r.data = bson_get_data(rec);
    r.size = rec->len;
    s->begin_transaction(s, NULL);
    snprintf(cmd, sizeof(cmd), "commit_timestamp=%" PRIx64, hr_next_ts(&c));
    s->timestamp_transaction(s, cmd);
    txns->set_key(txns, (int64_t)1);
    txns->set_value(txns, &r);
    txns->insert(txns);
    s->commit_transaction(s, NULL);
    s->close(s, NULL);

    rate = hr_run(&c, seconds, pace, doc, rec, &cpu_us);
    printf("{\"tool\": \"wt_hot_record\", \"mode\": \"%s\", \"lag_secs\": %u, \"seconds\": %.1f, "
           "\"pace\": %.0f, \"ops_per_sec\": %.1f, \"cpu_us_per_op\": %.2f}\n",
           mode, c.lag_secs, seconds, pace, rate, cpu_us);
    c.conn->close(c.conn, NULL);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "wt_hot_record: could not remove %s\n", dir);
    }
    bson_destroy(doc);
    bson_destroy(rec);
    return 0;
}
