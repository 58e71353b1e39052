/*
 * loadgen.c -- a load generator on libmongoc, a real MongoDB driver: C threads, each
 * with its own mongoc_client_t, run one command (ping or hello) back to back for T
 * seconds. Prints throughput and latency percentiles as one JSON line, then a line
 * for people. Used by bench/run.sh beside redis-benchmark (DESIGN.md section 8).
 */
#include <errno.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/*
 * Latency histogram, log-linear like HdrHistogram: values below 128 ns are exact,
 * above that each power of two is split into 64 buckets (under 1.6% error).
 */
#define SUB_BITS 6
#define SUB_COUNT (1 << SUB_BITS)
#define LINEAR_MAX (2 * SUB_COUNT)
#define NBUCKETS (LINEAR_MAX + (64 - SUB_BITS) * SUB_COUNT)

typedef struct histogram {
    uint64_t counts[NBUCKETS];
} histogram_t;

typedef struct worker {
    pthread_t thread;
    int id;
    histogram_t hist;
    uint64_t ops;
    uint64_t errors;
    int64_t last_end_ns;
    char first_error[sizeof(((bson_error_t *)0)->message)];
} worker_t;

typedef struct config {
    const char *uri;
    int threads;
    double seconds;
    const char *op;
} config_t;

static config_t cfg = {"mongodb://127.0.0.1:27017/", 1, 10.0, "ping"};
static mongoc_uri_t *the_uri;
static pthread_barrier_t ready_barrier; /* every thread has connected */
static pthread_barrier_t go_barrier;    /* start_ns is set: go */
static int64_t start_ns;                /* written by main between the two barriers */
static atomic_int failed_threads;

static int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int
bucket_of(uint64_t v)
{
    int msb, shift;
    if (v < LINEAR_MAX) {
        return (int)v;
    }
    msb = 63 - __builtin_clzll(v);
    shift = msb - SUB_BITS;
    return LINEAR_MAX + (shift - 1) * SUB_COUNT + (int)((v >> shift) - SUB_COUNT);
}

/* The middle of a bucket's range, in nanoseconds. */
static double
bucket_value(int idx)
{
    int shift;
    uint64_t top;
    if (idx < LINEAR_MAX) {
        return idx;
    }
    shift = (idx - LINEAR_MAX) / SUB_COUNT + 1;
    top = (uint64_t)((idx - LINEAR_MAX) % SUB_COUNT + SUB_COUNT);
    return (double)(top << shift) + (double)(1ull << shift) / 2.0;
}

static double
percentile_us(const histogram_t *h, uint64_t total, double pct)
{
    uint64_t want = (uint64_t)((double)total * pct / 100.0 + 0.5), seen = 0;
    if (want == 0) {
        want = 1;
    }
    for (int i = 0; i < NBUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= want) {
            return bucket_value(i) / 1000.0;
        }
    }
    return 0;
}

static void *
worker_main(void *arg)
{
    worker_t *w = arg;
    mongoc_client_t *client = mongoc_client_new_from_uri(the_uri);
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_error_t error;
    bool ok = false;
    int64_t deadline;

    BSON_APPEND_INT32(&cmd, cfg.op, 1);
    if (client != NULL) {
        mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
        /* Connect and handshake before the clock starts. */
        ok = mongoc_client_command_simple(client, "admin", &cmd, NULL, &reply, &error);
        bson_destroy(&reply);
        if (!ok) {
            snprintf(w->first_error, sizeof(w->first_error), "%s", error.message);
        }
    } else {
        snprintf(w->first_error, sizeof(w->first_error), "cannot create a client");
    }
    if (!ok) {
        atomic_fetch_add(&failed_threads, 1);
    }
    pthread_barrier_wait(&ready_barrier);
    pthread_barrier_wait(&go_barrier);
    deadline = start_ns + (int64_t)(cfg.seconds * 1e9);
    w->last_end_ns = start_ns;
    while (ok && atomic_load(&failed_threads) == 0) {
        int64_t t0 = now_ns(), t1;
        if (t0 >= deadline) {
            break;
        }
        if (mongoc_client_command_simple(client, "admin", &cmd, NULL, &reply, &error)) {
            t1 = now_ns();
            w->hist.counts[bucket_of((uint64_t)(t1 - t0))]++;
            w->ops++;
        } else {
            t1 = now_ns();
            if (w->errors++ == 0) {
                snprintf(w->first_error, sizeof(w->first_error), "%s", error.message);
            }
        }
        bson_destroy(&reply);
        w->last_end_ns = t1;
    }
    bson_destroy(&cmd);
    if (client != NULL) {
        mongoc_client_destroy(client);
    }
    return NULL;
}

/*
 * libmongoc's log: errors are printed; a warning is printed unless it is about
 * endSessions, which the client sends while closing and which a server may lack
 * (it does not touch the measured commands).
 */
static void
log_handler(mongoc_log_level_t level, const char *domain, const char *message, void *data)
{
    (void)data;
    if (level <= MONGOC_LOG_LEVEL_ERROR ||
        (level == MONGOC_LOG_LEVEL_WARNING && strstr(message, "endSessions") == NULL)) {
        fprintf(stderr, "loadgen: %s: %s: %s\n", mongoc_log_level_str(level), domain, message);
    }
}

static void
usage(FILE *out)
{
    fprintf(out, "usage: loadgen [--uri URI] [--threads C] [--seconds T] [--op ping|hello]\n"
                 "  C threads, each with its own mongoc_client_t, run the command back to\n"
                 "  back for T seconds; prints ops/s and p50/p99 latency (us).\n");
}

static int
parse_args(int argc, char **argv)
{
    /* Options come in pairs: --name value. */
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (v == NULL) {
            fprintf(stderr, "loadgen: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "--uri") == 0) {
            cfg.uri = v;
        } else if (strcmp(a, "--threads") == 0) {
            cfg.threads = atoi(v);
        } else if (strcmp(a, "--seconds") == 0) {
            cfg.seconds = atof(v);
        } else if (strcmp(a, "--op") == 0) {
            cfg.op = v;
        } else {
            fprintf(stderr, "loadgen: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (cfg.threads < 1 || cfg.threads > 10000 || !(cfg.seconds > 0) ||
        (strcmp(cfg.op, "ping") != 0 && strcmp(cfg.op, "hello") != 0)) {
        usage(stderr);
        return 2;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    int rc = parse_args(argc, argv);
    worker_t *workers = NULL;
    histogram_t *total = NULL;
    bson_error_t error;
    uint64_t ops = 0, errors = 0;
    int64_t end_ns;
    double elapsed, rate, p50, p99, p999, cpu_us;
    struct rusage ru;
    const char *first_error = NULL;

    if (rc != 0) {
        return rc;
    }
    mongoc_init();
    mongoc_log_set_handler(log_handler, NULL);
    the_uri = mongoc_uri_new_with_error(cfg.uri, &error);
    if (the_uri == NULL) {
        fprintf(stderr, "loadgen: bad URI %s: %s\n", cfg.uri, error.message);
        rc = 2;
        goto done;
    }
    workers = calloc((size_t)cfg.threads, sizeof(*workers));
    total = calloc(1, sizeof(*total));
    pthread_barrier_init(&ready_barrier, NULL, (unsigned)cfg.threads + 1);
    pthread_barrier_init(&go_barrier, NULL, (unsigned)cfg.threads + 1);
    for (int i = 0; i < cfg.threads; i++) {
        workers[i].id = i;
        if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) != 0) {
            fprintf(stderr, "loadgen: pthread_create: %s\n", strerror(errno));
            exit(1);
        }
    }
    pthread_barrier_wait(&ready_barrier);
    start_ns = now_ns(); /* all threads connected: the clock starts now */
    pthread_barrier_wait(&go_barrier);
    end_ns = start_ns;
    for (int i = 0; i < cfg.threads; i++) {
        pthread_join(workers[i].thread, NULL);
        ops += workers[i].ops;
        errors += workers[i].errors;
        if (workers[i].last_end_ns > end_ns) {
            end_ns = workers[i].last_end_ns;
        }
        if (first_error == NULL && workers[i].first_error[0] != '\0') {
            first_error = workers[i].first_error;
        }
        for (int b = 0; b < NBUCKETS; b++) {
            total->counts[b] += workers[i].hist.counts[b];
        }
    }
    pthread_barrier_destroy(&ready_barrier);
    pthread_barrier_destroy(&go_barrier);
    elapsed = (double)(end_ns - start_ns) / 1e9;
    rate = elapsed > 0 ? (double)ops / elapsed : 0;
    p50 = percentile_us(total, ops, 50);
    p99 = percentile_us(total, ops, 99);
    p999 = percentile_us(total, ops, 99.9);
    /* The generator's own CPU per operation (connecting included): on a shared box
     * it shows how much of the machine the driver itself takes. */
    getrusage(RUSAGE_SELF, &ru);
    cpu_us = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
             (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    printf("{\"tool\": \"loadgen\", \"op\": \"%s\", \"threads\": %d, \"seconds\": %.3f, "
           "\"ops\": %llu, \"errors\": %llu, \"ops_per_sec\": %.1f, \"p50_us\": %.1f, "
           "\"p99_us\": %.1f, \"p999_us\": %.1f, \"client_cpu_us_per_op\": %.2f}\n",
           cfg.op, cfg.threads, elapsed, (unsigned long long)ops, (unsigned long long)errors, rate,
           p50, p99, p999, ops > 0 ? cpu_us / (double)ops : 0.0);
    printf("loadgen %s x%d: %.0f ops/s, p50 %.1f us, p99 %.1f us (%llu ops in %.2f s, %llu "
           "errors; client CPU %.2f us/op)\n",
           cfg.op, cfg.threads, rate, p50, p99, (unsigned long long)ops, elapsed,
           (unsigned long long)errors, ops > 0 ? cpu_us / (double)ops : 0.0);
    if (first_error != NULL) {
        fprintf(stderr, "loadgen: first error: %s\n", first_error);
    }
    if (ops == 0 || errors > 0) {
        rc = 1;
    }
done:
    free(workers);
    free(total);
    if (the_uri != NULL) {
        mongoc_uri_destroy(the_uri);
    }
    mongoc_cleanup();
    return rc;
}
