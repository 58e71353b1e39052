/*
 * loadgen.c -- a load generator on libmongoc, a real MongoDB driver: C threads, each
 * with its own mongoc_client_t, run one operation back to back for T seconds: ping,
 * hello, insert (insert_one, j:false), insert100 (insert_many of 100), findid (a
 * point find by _id), or the secondary-index ops of bench/query.sh: findeq (equality
 * find on a field), range (a ~1000-document range of it) and insertidx (insert_one
 * into a collection with 0, 1 or 3 secondary indexes). Prints throughput and latency
 * percentiles as one JSON line, then a line for people. Used by bench/run.sh, crud.sh and
 * query.sh (DESIGN.md section 8).
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
#include <unistd.h>

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
    uint64_t ops; /* written by the worker, read (atomically) by --interval's reporter */
    histogram_t hist_alt; /* --alt-uri: the operations run in the B slices */
    uint64_t ops_alt;
    int64_t cpu_ns[2]; /* --alt-uri: this thread's CPU time in A / B slices */
    uint64_t errors;
    uint64_t docs; /* findeq/range: documents returned */
    int64_t last_end_ns;
    uint8_t lsid[16]; /* rawins/retryins: this thread's session id */
    mongoc_client_session_t *cs; /* txn2: this thread's session */
    char first_error[sizeof(((bson_error_t *)0)->message)];
} worker_t;

typedef struct config {
    const char *uri;
    int threads;
    double seconds;
    const char *op;
    int64_t preload;   /* findid: load this many documents (_id 0..N-1) first */
    int64_t keys;      /* findid: ids are drawn from [0, keys) */
    const char *coll;  /* findeq/range/insertidx: the collection (in db bench) */
    int indexes;       /* insertidx: secondary indexes to create (0, 1 or 3) */
    int64_t span;      /* range: width of the range of 'a' */
    const char *shard; /* --shard: hashed or range, NULL = do not shard */
    double interval;   /* --interval S: also print ops/s of every S seconds (stderr), 0: no */
    const char *alt_uri; /* --alt-uri: B of an A/B run interleaved in slices, NULL: no */
    double slice;        /* --slice S: the A/B slice length in seconds */
    int server_pid;      /* --server-pid: CPU of this process per operation, per A/B mode */
    bool wc_from_uri;    /* --wc uri: collection writes carry the URI's write concern */
} config_t;

typedef enum op_kind {
    OP_COMMAND,
    OP_INSERT,
    OP_INSERT100,
    OP_FINDID,
    OP_FINDEQ,
    OP_RANGE,
    OP_INSERTIDX,
    OP_RAWINS,   /* the insert command with this thread's lsid and a new txnNumber each time */
    OP_RETRYINS, /* the same command again and again: a retry the server answers from history */
    OP_INS2,     /* two insert_one (j:false) of fresh documents: the baseline of txn2 */
    OP_TXN2      /* a transaction inserting the same two documents, then committing */
} op_kind_t;

#define BENCH_DB "bench"
#define BATCH 100
#define PAD_LEN 200 /* the document of bench/wt_baseline.c: {_id: int64, x: 1, pad: 200 x} */

static config_t cfg = {"mongodb://127.0.0.1:27017/", 1, 10.0, "ping", 0, 0, NULL, 0, 1000, NULL, 0,
                       NULL, 0.5, 0, false};

/* The query documents: {_id: k, a: A(k), b: k % 100, pad}; A is a permutation of
 * [0, N) for N not divisible by A_MULT's prime, so 'a' is unique. */
#define A_MULT 7919
#define QUERY_COLLS "qidx", "qscan" /* indexed on a / unindexed copy */
static op_kind_t op_kind = OP_COMMAND;
static mongoc_uri_t *the_uri;
static mongoc_uri_t *alt_uri; /* --alt-uri */
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

/* The benchmark document with the given _id (same shape and size as wt_baseline.c's). */
static void
make_doc(bson_t *doc, int64_t id)
{
    char pad[PAD_LEN + 1];
    memset(pad, 'x', PAD_LEN);
    pad[PAD_LEN] = '\0';
    bson_init(doc);
    BSON_APPEND_INT64(doc, "_id", id);
    BSON_APPEND_INT32(doc, "x", 1);
    BSON_APPEND_UTF8(doc, "pad", pad);
}

/* Rewrites the leading int64 _id of a document made by make_doc, in place. */
static void
set_id(bson_t *doc, int64_t id)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, "_id")) {
        bson_iter_overwrite_int64(&it, id);
    }
}

static const char *
coll_name(void)
{
    if (cfg.coll != NULL) {
        return cfg.coll;
    }
    return op_kind == OP_FINDID ? "findid" : "insert";
}

static int32_t
a_of(int64_t k)
{
    return (int32_t)((k * A_MULT) % cfg.keys);
}

/* A query document {_id, a, b, pad: 200 x} (the insertidx document too). */
static void
make_qdoc(bson_t *doc, int64_t id, int32_t a, int32_t b)
{
    char pad[PAD_LEN + 1];
    memset(pad, 'x', PAD_LEN);
    pad[PAD_LEN] = '\0';
    bson_init(doc);
    BSON_APPEND_INT64(doc, "_id", id);
    BSON_APPEND_INT32(doc, "a", a);
    BSON_APPEND_INT32(doc, "b", b);
    BSON_APPEND_UTF8(doc, "pad", pad);
}

/* Rewrites _id, a and b of a document made by make_qdoc, in place. */
static void
set_qfields(bson_t *doc, int64_t id, int32_t a, int32_t b)
{
    bson_iter_t it;
    if (bson_iter_init(&it, doc)) {
        while (bson_iter_next(&it)) {
            if (strcmp(bson_iter_key(&it), "_id") == 0) {
                bson_iter_overwrite_int64(&it, id);
            } else if (strcmp(bson_iter_key(&it), "a") == 0) {
                bson_iter_overwrite_int32(&it, a);
            } else if (strcmp(bson_iter_key(&it), "b") == 0) {
                bson_iter_overwrite_int32(&it, b);
            }
        }
    }
}

/* Runs a find on 'coll' to its end; *n = documents returned. */
static bool
find_all(mongoc_collection_t *coll, const bson_t *filter, const bson_t *opts, uint64_t *n,
         bson_error_t *error)
{
    mongoc_cursor_t *cursor = mongoc_collection_find_with_opts(coll, filter, opts, NULL);
    const bson_t *found;
    bool ok;
    while (mongoc_cursor_next(cursor, &found)) {
        (*n)++;
    }
    ok = !mongoc_cursor_error(cursor, error);
    mongoc_cursor_destroy(cursor);
    return ok;
}

/* xorshift64*: a cheap per-thread random source for findid's keys. */
static uint64_t
next_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/*
 * One measured operation on 'coll' (or 'client' for ping/hello). 'seq' counts this
 * thread's operations; inserted _ids are (thread << 40) | n, unique per run.
 */
static bool
run_op(worker_t *w, mongoc_client_t *client, mongoc_collection_t *coll, const bson_t *cmd,
       bson_t *docs, uint64_t *rng, uint64_t seq, bson_error_t *error)
{
    bson_t reply, filter = BSON_INITIALIZER, opts = BSON_INITIALIZER;
    const bson_t *found;
    const bson_t *ptrs[BATCH];
    mongoc_cursor_t *cursor;
    bool ok = false;
    int64_t base = ((int64_t)w->id << 40) | (int64_t)(seq * BATCH);

    switch (op_kind) {
    case OP_COMMAND:
        ok = mongoc_client_command_simple(client, "admin", cmd, NULL, &reply, error);
        bson_destroy(&reply);
        break;
    case OP_INSERT:
        set_id(&docs[0], ((int64_t)w->id << 40) | (int64_t)seq);
        ok = mongoc_collection_insert_one(coll, &docs[0], NULL, &reply, error);
        bson_destroy(&reply);
        break;
    case OP_INSERT100:
        for (int i = 0; i < BATCH; i++) {
            set_id(&docs[i], base + i);
            ptrs[i] = &docs[i];
        }
        ok = mongoc_collection_insert_many(coll, ptrs, BATCH, NULL, &reply, error);
        bson_destroy(&reply);
        break;
    case OP_FINDID:
        /* What a driver's find_one sends: limit 1, single batch. */
        BSON_APPEND_INT64(&filter, "_id", (int64_t)(next_rand(rng) % (uint64_t)cfg.keys));
        BSON_APPEND_INT64(&opts, "limit", 1);
        BSON_APPEND_BOOL(&opts, "singleBatch", true);
        cursor = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);
        ok = mongoc_cursor_next(cursor, &found);
        if (!ok && !mongoc_cursor_error(cursor, error)) {
            snprintf(error->message, sizeof(error->message), "findid: no document");
        }
        mongoc_cursor_destroy(cursor);
        break;
    case OP_FINDEQ: {
        /* Equality on 'a': one document (an index point lookup or a collection scan). */
        uint64_t before = w->docs;
        BSON_APPEND_INT32(&filter, "a", a_of((int64_t)(next_rand(rng) % (uint64_t)cfg.keys)));
        ok = find_all(coll, &filter, &opts, &w->docs, error);
        if (ok && w->docs != before + 1) {
            snprintf(error->message, sizeof(error->message), "findeq: %llu documents, not 1",
                     (unsigned long long)(w->docs - before));
            ok = false;
        }
        break;
    }
    case OP_RANGE: {
        /* a in [lo, lo + span): 'span' documents through the index, in batches. */
        bson_t cond;
        int64_t lo = (int64_t)(next_rand(rng) % (uint64_t)(cfg.keys - cfg.span + 1));
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "a", &cond);
        BSON_APPEND_INT32(&cond, "$gte", (int32_t)lo);
        BSON_APPEND_INT32(&cond, "$lt", (int32_t)(lo + cfg.span));
        bson_append_document_end(&filter, &cond);
        BSON_APPEND_INT32(&opts, "batchSize", 1000);
        ok = find_all(coll, &filter, &opts, &w->docs, error);
        break;
    }
    case OP_RAWINS:
    case OP_RETRYINS: {
        /* {insert, documents: [doc], lsid: {id: thread's UUID}, txnNumber, writeConcern}: a
         * retryable write as a driver sends it, with the session the benchmark chose, so a
         * retry is exactly the first attempt's bytes. */
        bson_t ins = BSON_INITIALIZER, arr, lsid, wcd;
        uint64_t n = op_kind == OP_RETRYINS ? 0 : seq;
        set_id(&docs[0], ((int64_t)w->id << 40) | (int64_t)n);
        BSON_APPEND_UTF8(&ins, "insert", coll_name());
        BSON_APPEND_ARRAY_BEGIN(&ins, "documents", &arr);
        BSON_APPEND_DOCUMENT(&arr, "0", &docs[0]);
        bson_append_array_end(&ins, &arr);
        BSON_APPEND_DOCUMENT_BEGIN(&ins, "lsid", &lsid);
        bson_append_binary(&lsid, "id", 2, BSON_SUBTYPE_UUID, w->lsid, 16);
        bson_append_document_end(&ins, &lsid);
        BSON_APPEND_INT64(&ins, "txnNumber", (int64_t)n + 1);
        BSON_APPEND_DOCUMENT_BEGIN(&ins, "writeConcern", &wcd);
        BSON_APPEND_INT32(&wcd, "w", 1);
        BSON_APPEND_BOOL(&wcd, "j", false);
        bson_append_document_end(&ins, &wcd);
        ok = mongoc_client_command_simple(client, BENCH_DB, &ins, NULL, &reply, error);
        if (ok && op_kind == OP_RETRYINS && seq > 0 && !bson_has_field(&reply, "retriedStmtIds")) {
            snprintf(error->message, sizeof(error->message), "retryins: not answered as a retry");
            ok = false;
        }
        bson_destroy(&reply);
        bson_destroy(&ins);
        break;
    }
    case OP_INS2:
    case OP_TXN2: {
        /* Two documents, alone or in one transaction (a driver's start/insert/commit). */
        bson_t sopts = BSON_INITIALIZER;
        ok = true;
        if (op_kind == OP_TXN2) {
            if (w->cs == NULL) {
                w->cs = mongoc_client_start_session(client, NULL, error);
            }
            ok = w->cs != NULL && mongoc_client_session_start_transaction(w->cs, NULL, error) &&
                 mongoc_client_session_append(w->cs, &sopts, error);
        }
        for (int i = 0; ok && i < 2; i++) {
            set_id(&docs[0], ((int64_t)w->id << 40) | (int64_t)(seq * 2 + (uint64_t)i));
            ok = mongoc_collection_insert_one(coll, &docs[0], &sopts, &reply, error);
            bson_destroy(&reply);
        }
        if (op_kind == OP_TXN2 && w->cs != NULL) {
            if (ok) {
                ok = mongoc_client_session_commit_transaction(w->cs, &reply, error);
                bson_destroy(&reply);
            } else if (mongoc_client_session_in_transaction(w->cs)) {
                (void)mongoc_client_session_abort_transaction(w->cs, NULL);
            }
        }
        bson_destroy(&sopts);
        break;
    }
    case OP_INSERTIDX: {
        uint64_t r = next_rand(rng);
        set_qfields(&docs[0], ((int64_t)w->id << 40) | (int64_t)seq, (int32_t)(r >> 33),
                    (int32_t)(seq % 100));
        ok = mongoc_collection_insert_one(coll, &docs[0], NULL, &reply, error);
        bson_destroy(&reply);
        break;
    }
    }
    bson_destroy(&filter);
    bson_destroy(&opts);
    return ok;
}

/* One server a worker runs against: its client and the benchmark collection. */
typedef struct target {
    mongoc_client_t *client;
    mongoc_collection_t *coll;
} target_t;

/* Connects 't' to 'uri' and runs 'cmd' once (connect and handshake before the clock
 * starts); writes go with 'wc'. False with *error set when it could not. */
static bool
target_open(target_t *t, const mongoc_uri_t *uri, const mongoc_write_concern_t *wc,
            const bson_t *cmd, bson_error_t *error)
{
    bson_t reply;
    bool ok = false;

    t->client = mongoc_client_new_from_uri(uri);
    t->coll = NULL;
    if (t->client == NULL) {
        bson_set_error(error, 0, 0, "cannot create a client");
    } else {
        t->coll = mongoc_client_get_collection(t->client, BENCH_DB, coll_name());
        if (wc != NULL) {
            mongoc_collection_set_write_concern(t->coll, wc);
        }
        mongoc_client_set_error_api(t->client, MONGOC_ERROR_API_VERSION_2);
        ok = mongoc_client_command_simple(t->client, "admin", cmd, NULL, &reply, error);
        bson_destroy(&reply);
    }
    return ok;
}

static void
target_close(target_t *t)
{
    if (t->coll != NULL) {
        mongoc_collection_destroy(t->coll);
    }
    if (t->client != NULL) {
        mongoc_client_destroy(t->client);
    }
}

/* --alt-uri: whether time 't' falls in a B slice (odd slices from the start). */
static bool
in_alt_slice(int64_t t)
{
    return alt_uri != NULL && ((t - start_ns) / (int64_t)(cfg.slice * 1e9)) % 2 == 1;
}

static int64_t
thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *
worker_main(void *arg)
{
    worker_t *w = arg;
    target_t tg[2] = {{NULL, NULL}, {NULL, NULL}};
    mongoc_write_concern_t *wc = mongoc_write_concern_new();
    bson_t cmd = BSON_INITIALIZER;
    bson_t docs[BATCH];
    bson_error_t error;
    bool ok;
    int64_t deadline, cpu_mark = 0;
    bool in_alt = false;
    uint64_t seq = 0, rng = 0x9E3779B97F4A7C15ull * (uint64_t)(w->id + 1);
    int ndocs = op_kind == OP_INSERT100 ? BATCH : 1;

    {
        /* A fresh session each run: the server remembers the last run's txnNumbers. */
        uint64_t r = rng ^ (uint64_t)now_ns();
        for (int i = 0; i < 16; i++) {
            w->lsid[i] = (uint8_t)(next_rand(&r) >> 56);
        }
    }
    w->lsid[6] = (uint8_t)((w->lsid[6] & 0x0f) | 0x40); /* a version 4 UUID */
    w->lsid[8] = (uint8_t)((w->lsid[8] & 0x3f) | 0x80);
    for (int i = 0; i < ndocs; i++) {
        if (op_kind == OP_INSERTIDX) {
            make_qdoc(&docs[i], 0, 0, 0);
        } else {
            make_doc(&docs[i], 0);
        }
    }
    BSON_APPEND_INT32(&cmd, op_kind == OP_COMMAND ? cfg.op : "ping", 1);
    /* j:false, acknowledged: the write returns before its journal flush. */
    mongoc_write_concern_set_w(wc, 1);
    mongoc_write_concern_set_journal(wc, false);
    {
        /* --wc uri: the URI's write concern, none without w= (the server's default). */
        const mongoc_write_concern_t *use = cfg.wc_from_uri ? NULL : wc;
        ok = target_open(&tg[0], the_uri, use, &cmd, &error) &&
             (alt_uri == NULL || target_open(&tg[1], alt_uri, use, &cmd, &error));
    }
    if (!ok) {
        snprintf(w->first_error, sizeof(w->first_error), "%s", error.message);
        atomic_fetch_add(&failed_threads, 1);
    }
    pthread_barrier_wait(&ready_barrier);
    pthread_barrier_wait(&go_barrier);
    deadline = start_ns + (int64_t)(cfg.seconds * 1e9);
    w->last_end_ns = start_ns;
    cpu_mark = thread_cpu_ns();
    while (ok && atomic_load(&failed_threads) == 0) {
        int64_t t0 = now_ns(), t1;
        bool alt = in_alt_slice(t0);
        const target_t *t = &tg[alt ? 1 : 0];
        if (t0 >= deadline) {
            break;
        }
        if (alt != in_alt) {
            /* A slice ended: its CPU goes to the mode it ran (read once per slice). */
            int64_t c = thread_cpu_ns();
            w->cpu_ns[in_alt ? 1 : 0] += c - cpu_mark;
            cpu_mark = c;
            in_alt = alt;
        }
        if (run_op(w, t->client, t->coll, &cmd, docs, &rng, seq++, &error)) {
            t1 = now_ns();
            (alt ? &w->hist_alt : &w->hist)->counts[bucket_of((uint64_t)(t1 - t0))]++;
            __atomic_fetch_add(alt ? &w->ops_alt : &w->ops, 1, __ATOMIC_RELAXED);
        } else {
            t1 = now_ns();
            if (w->errors++ == 0) {
                snprintf(w->first_error, sizeof(w->first_error), "%s", error.message);
            }
        }
        w->last_end_ns = t1;
    }
    w->cpu_ns[in_alt ? 1 : 0] += thread_cpu_ns() - cpu_mark;
    bson_destroy(&cmd);
    for (int i = 0; i < ndocs; i++) {
        bson_destroy(&docs[i]);
    }
    mongoc_write_concern_destroy(wc);
    if (w->cs != NULL) {
        mongoc_client_session_destroy(w->cs);
    }
    target_close(&tg[0]);
    target_close(&tg[1]);
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
    fprintf(out,
            "usage: loadgen [--uri URI] [--threads C] [--seconds T]\n"
            "               [--op ping|hello|insert|insert100|findid|rawins|retryins|ins2|txn2]\n"
            "               [--preload N] [--keys N]\n"
            "  C threads, each with its own mongoc_client_t, run the operation back to\n"
            "  back for T seconds; prints ops/s and p50/p99 latency (us); --interval S\n"
            "  also prints, on stderr, the ops/s of each S seconds as they pass.\n"
            "  insert: insert_one of a 229-byte document, j:false (bench.insert, dropped\n"
            "  first); insert100: insert_many of 100 such documents (docs/s too);\n"
            "  findid: find {_id: k} limit 1 on bench.findid, k random in [0, keys);\n"
            "  --preload N drops bench.findid and loads _id 0..N-1 first (keys = N).\n"
            "  findeq|range [--coll qidx|qscan] [--span S]: find {a: v} / {a: {$gte: lo,\n"
            "  $lt: lo + S}} (S default 1000) on bench.COLL; with --preload N, bench.qidx\n"
            "  (index {a: 1}) and bench.qscan (no index) are dropped and loaded with\n"
            "  {_id: k, a: k * 7919 %% N, b: k %% 100, pad} for k in [0, N) first.\n"
            "  insertidx [--coll NAME] --indexes 0|1|3: insert_one of such documents, j:false,\n"
            "  into bench.NAME (default insertidx), dropped first and given the indexes\n"
            "  {a: 1}; and {b: 1}, {b: 1, a: 1}.\n"
            "  --shard hashed|range (through a router): shard each collection the run drops\n"
            "  by {_id: \"hashed\"} / {_id: 1} right after dropping it, before loading.\n"
            "  --alt-uri URI2 [--slice S] [--server-pid P]: an A/B run in one: every thread\n"
            "  also connects to URI2 and the run alternates between URI (A) and URI2 (B)\n"
            "  every S seconds (default 0.5), so drift in the machine's speed hits both\n"
            "  alike; prints one JSON line per mode (\"mode\": \"a\" / \"b\"), with process\n"
            "  P's CPU (user + system, from /proc) per operation of that mode; the client\n"
            "  CPU of a mode is its threads' CPU time in its slices. Not with txn2 or\n"
            "  --interval.\n"
            "  --wc uri: insert, insert100, findid and insertidx writes carry the URI's\n"
            "  write concern (w=... in it; none without: the server's default) instead of\n"
            "  {w: 1, j: false}.\n");
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
        } else if (strcmp(a, "--preload") == 0) {
            cfg.preload = atoll(v);
        } else if (strcmp(a, "--keys") == 0) {
            cfg.keys = atoll(v);
        } else if (strcmp(a, "--coll") == 0) {
            cfg.coll = v;
        } else if (strcmp(a, "--indexes") == 0) {
            cfg.indexes = atoi(v);
        } else if (strcmp(a, "--span") == 0) {
            cfg.span = atoll(v);
        } else if (strcmp(a, "--shard") == 0) {
            cfg.shard = v;
        } else if (strcmp(a, "--interval") == 0) {
            cfg.interval = atof(v);
        } else if (strcmp(a, "--alt-uri") == 0) {
            cfg.alt_uri = v;
        } else if (strcmp(a, "--slice") == 0) {
            cfg.slice = atof(v);
        } else if (strcmp(a, "--server-pid") == 0) {
            cfg.server_pid = atoi(v);
        } else if (strcmp(a, "--wc") == 0) {
            if (strcmp(v, "uri") != 0 && strcmp(v, "w1") != 0) {
                fprintf(stderr, "loadgen: --wc takes uri or w1\n");
                return 2;
            }
            cfg.wc_from_uri = strcmp(v, "uri") == 0;
        } else {
            fprintf(stderr, "loadgen: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (strcmp(cfg.op, "insert") == 0) {
        op_kind = OP_INSERT;
    } else if (strcmp(cfg.op, "insertidx") == 0 && cfg.coll == NULL) {
        op_kind = OP_INSERTIDX;
        cfg.coll = "insertidx";
    } else if ((strcmp(cfg.op, "findeq") == 0 || strcmp(cfg.op, "range") == 0) &&
               cfg.coll == NULL) {
        op_kind = strcmp(cfg.op, "range") == 0 ? OP_RANGE : OP_FINDEQ;
        cfg.coll = "qidx";
    } else if (strcmp(cfg.op, "insert100") == 0) {
        op_kind = OP_INSERT100;
    } else if (strcmp(cfg.op, "findid") == 0) {
        op_kind = OP_FINDID;
    } else if (strcmp(cfg.op, "findeq") == 0) {
        op_kind = OP_FINDEQ;
    } else if (strcmp(cfg.op, "range") == 0) {
        op_kind = OP_RANGE;
    } else if (strcmp(cfg.op, "insertidx") == 0) {
        op_kind = OP_INSERTIDX;
    } else if (strcmp(cfg.op, "rawins") == 0) {
        op_kind = OP_RAWINS;
    } else if (strcmp(cfg.op, "retryins") == 0) {
        op_kind = OP_RETRYINS;
    } else if (strcmp(cfg.op, "ins2") == 0) {
        op_kind = OP_INS2;
    } else if (strcmp(cfg.op, "txn2") == 0) {
        op_kind = OP_TXN2;
    } else if (strcmp(cfg.op, "ping") != 0 && strcmp(cfg.op, "hello") != 0) {
        cfg.threads = 0; /* unknown op */
    }
    if (cfg.keys <= 0) {
        cfg.keys = cfg.preload;
    }
    if (cfg.threads < 1 || cfg.threads > 10000 || !(cfg.seconds > 0) || cfg.preload < 0 ||
        ((op_kind == OP_FINDID || op_kind == OP_FINDEQ || op_kind == OP_RANGE) && cfg.keys <= 0) ||
        (op_kind == OP_RANGE && (cfg.span < 1 || cfg.span > cfg.keys)) ||
        (cfg.indexes != 0 && cfg.indexes != 1 && cfg.indexes != 3) ||
        (cfg.alt_uri != NULL && (op_kind == OP_TXN2 || cfg.interval > 0 || !(cfg.slice > 0)))) {
        usage(stderr);
        return 2;
    }
    return 0;
}

/* createIndexes on bench.'name' for each key pattern given as "field" or "f1,f2". */
static bool
create_indexes(mongoc_client_t *client, const char *name, const char *const *keys, int n)
{
    bson_t cmd = BSON_INITIALIZER, arr, spec, key, reply;
    bson_error_t error;
    bool ok;
    char idx[16], field[64];
    BSON_APPEND_UTF8(&cmd, "createIndexes", name);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &arr);
    for (int i = 0; i < n; i++) {
        char iname[64] = "";
        const char *p = keys[i];
        snprintf(idx, sizeof(idx), "%d", i);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, idx, &spec);
        BSON_APPEND_DOCUMENT_BEGIN(&spec, "key", &key);
        while (*p != '\0') {
            size_t len = strcspn(p, ",");
            snprintf(field, sizeof(field), "%.*s", (int)len, p);
            BSON_APPEND_INT32(&key, field, 1);
            snprintf(iname + strlen(iname), sizeof(iname) - strlen(iname), "%s%s_1",
                     iname[0] ? "_" : "", field);
            p += len + (p[len] == ',');
        }
        bson_append_document_end(&spec, &key);
        BSON_APPEND_UTF8(&spec, "name", iname);
        bson_append_document_end(&arr, &spec);
    }
    bson_append_array_end(&cmd, &arr);
    ok = mongoc_client_command_simple(client, BENCH_DB, &cmd, NULL, &reply, &error);
    if (!ok) {
        fprintf(stderr, "loadgen: createIndexes on %s: %s\n", name, error.message);
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return ok;
}

/* --shard: shard bench.NAME by _id (hashed or range) through the router. */
static bool
shard_collection(mongoc_client_t *client, const char *name)
{
    bson_t cmd = BSON_INITIALIZER, key, reply;
    bson_error_t error;
    char ns[128];
    bool ok;

    if (cfg.shard == NULL) {
        return true;
    }
    snprintf(ns, sizeof(ns), "%s.%s", BENCH_DB, name);
    BSON_APPEND_UTF8(&cmd, "shardCollection", ns);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "key", &key);
    if (strcmp(cfg.shard, "hashed") == 0) {
        BSON_APPEND_UTF8(&key, "_id", "hashed");
    } else {
        BSON_APPEND_INT32(&key, "_id", 1);
    }
    bson_append_document_end(&cmd, &key);
    ok = mongoc_client_command_simple(client, "admin", &cmd, NULL, &reply, &error);
    if (!ok) {
        fprintf(stderr, "loadgen: shardCollection %s: %s\n", ns, error.message);
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return ok;
}

/* findeq/range --preload N: bench.qidx (index {a: 1}) and bench.qscan, N documents each. */
static int
prepare_query(mongoc_client_t *client)
{
    static const char *const colls[] = {QUERY_COLLS};
    static const char *const akey[] = {"a"};
    bson_t docs[1000];
    const bson_t *ptrs[1000];
    bson_error_t error;
    int rc = 1, n;

    for (int i = 0; i < 1000; i++) {
        make_qdoc(&docs[i], 0, 0, 0);
        ptrs[i] = &docs[i];
    }
    for (int c = 0; c < 2; c++) {
        mongoc_collection_t *coll = mongoc_client_get_collection(client, BENCH_DB, colls[c]);
        bool ok = true;
        (void)mongoc_collection_drop(coll, &error);
        ok = shard_collection(client, colls[c]);
        if (ok && c == 0) {
            ok = create_indexes(client, colls[c], akey, 1);
        }
        for (int64_t k = 0; ok && k < cfg.preload; k += n) {
            n = cfg.preload - k < 1000 ? (int)(cfg.preload - k) : 1000;
            for (int i = 0; i < n; i++) {
                set_qfields(&docs[i], k + i, a_of(k + i), (int32_t)((k + i) % 100));
            }
            ok = mongoc_collection_insert_many(coll, ptrs, (size_t)n, NULL, NULL, &error);
            if (!ok) {
                fprintf(stderr, "loadgen: preload %s: %s\n", colls[c], error.message);
            }
        }
        mongoc_collection_destroy(coll);
        if (!ok) {
            goto done;
        }
    }
    rc = 0;
done:
    for (int i = 0; i < 1000; i++) {
        bson_destroy(&docs[i]);
    }
    return rc;
}

/*
 * Before the clock starts, on the server of 'uri': insert ops drop bench.insert (ids restart at 0 each run);
 * findid with --preload N drops bench.findid and inserts _id 0..N-1 in batches.
 */
static int
prepare(const mongoc_uri_t *uri)
{
    mongoc_client_t *client = mongoc_client_new_from_uri(uri);
    mongoc_collection_t *coll = NULL;
    bson_error_t error;
    bson_t docs[1000];
    const bson_t *ptrs[1000];
    int rc = 1, n;

    if (client == NULL) {
        fprintf(stderr, "loadgen: cannot create a client\n");
        return 1;
    }
    mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
    if (op_kind == OP_FINDEQ || op_kind == OP_RANGE) {
        rc = cfg.preload > 0 ? prepare_query(client) : 0;
        mongoc_client_destroy(client);
        return rc;
    }
    for (int i = 0; i < 1000; i++) {
        make_doc(&docs[i], 0);
        ptrs[i] = &docs[i];
    }
    coll = mongoc_client_get_collection(client, BENCH_DB, coll_name());
    if (op_kind == OP_INSERTIDX) {
        static const char *const ikeys[] = {"a", "b", "b,a"};
        (void)mongoc_collection_drop(coll, &error);
        if (cfg.indexes > 0 && !create_indexes(client, coll_name(), ikeys, cfg.indexes)) {
            goto done;
        }
    } else if (op_kind == OP_INSERT || op_kind == OP_INSERT100 || op_kind == OP_RAWINS ||
               op_kind == OP_RETRYINS || op_kind == OP_INS2 || op_kind == OP_TXN2 ||
               cfg.preload > 0) {
        /* "ns not found" is fine: the collection may not exist yet. */
        (void)mongoc_collection_drop(coll, &error);
        if (!shard_collection(client, coll_name())) {
            goto done;
        }
    }
    for (int64_t k = 0; op_kind == OP_FINDID && k < cfg.preload; k += n) {
        n = cfg.preload - k < 1000 ? (int)(cfg.preload - k) : 1000;
        for (int i = 0; i < n; i++) {
            set_id(&docs[i], k + i);
        }
        if (!mongoc_collection_insert_many(coll, ptrs, (size_t)n, NULL, NULL, &error)) {
            fprintf(stderr, "loadgen: preload: %s\n", error.message);
            goto done;
        }
    }
    rc = 0;
done:
    for (int i = 0; i < 1000; i++) {
        bson_destroy(&docs[i]);
    }
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(client);
    return rc;
}

/* --interval: until the run's end, every cfg.interval seconds the ops/s of that interval. */
static void
report_intervals(worker_t *workers)
{
    uint64_t before = 0;
    int64_t step = (int64_t)(cfg.interval * 1e9), end = start_ns + (int64_t)(cfg.seconds * 1e9);

    for (int k = 1; step > 0 && start_ns + k * step <= end; k++) {
        int64_t at = start_ns + k * step, left;
        uint64_t sum = 0;
        while ((left = at - now_ns()) > 0) {
            struct timespec ts = {left / 1000000000, left % 1000000000};
            nanosleep(&ts, NULL);
        }
        for (int i = 0; i < cfg.threads; i++) {
            sum += __atomic_load_n(&workers[i].ops, __ATOMIC_RELAXED);
        }
        fprintf(stderr, "interval %d (%.0f-%.0f s): %.0f ops/s\n", k, cfg.interval * (k - 1),
                cfg.interval * k, (double)(sum - before) / cfg.interval);
        before = sum;
    }
}

/* Process 'pid''s CPU time (user + system) in clock ticks, 0 when it cannot be read. */
static uint64_t
proc_cpu_ticks(int pid)
{
    char path[64], buf[1024], *p;
    unsigned long long ut = 0, stt = 0;
    FILE *f;
    size_t n = 0;

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    f = fopen(path, "r");
    if (f != NULL) {
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    /* Fields 14 and 15 (utime, stime) follow the command name, which ends at the last ')'. */
    p = strrchr(buf, ')');
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
                            &stt) != 2) {
        return 0;
    }
    return ut + stt;
}

/* --alt-uri with --server-pid: until the run's end, at every slice boundary, adds the server's
 * CPU ticks of the slice that ended to ticks[0] (A) or ticks[1] (B). */
static void
sample_slices(uint64_t ticks[2])
{
    int64_t step = (int64_t)(cfg.slice * 1e9), end = start_ns + (int64_t)(cfg.seconds * 1e9);
    uint64_t before = proc_cpu_ticks(cfg.server_pid), now;

    for (int64_t k = 1; cfg.server_pid > 0 && start_ns + (k - 1) * step < end; k++) {
        int64_t at = start_ns + k * step < end ? start_ns + k * step : end, left;
        while ((left = at - now_ns()) > 0) {
            struct timespec ts = {left / 1000000000, left % 1000000000};
            nanosleep(&ts, NULL);
        }
        now = proc_cpu_ticks(cfg.server_pid);
        ticks[(k - 1) % 2] += now - before;
        before = now;
    }
}

/* The time of [start_ns, end) spent in A slices ('alt' false) or B slices, in seconds. */
static double
mode_seconds(int64_t end, bool alt)
{
    int64_t step = (int64_t)(cfg.slice * 1e9), t = end - start_ns;
    int64_t full = t / step, rem = t % step;
    int64_t n = alt ? full / 2 : (full + 1) / 2;
    bool last_is_alt = full % 2 == 1;

    if (alt_uri == NULL) {
        return (double)t / 1e9;
    }
    return ((double)(n * step) + (last_is_alt == alt ? (double)rem : 0.0)) / 1e9;
}

/* One run's (or one mode's) result: a JSON line, then a line for people. */
typedef struct result {
    const char *mode; /* "a" / "b" in an A/B run, NULL otherwise */
    uint64_t ops, errors, docs;
    double elapsed, client_cpu_us, server_cpu_us; /* server: < 0 when not measured */
    const histogram_t *hist;
} result_t;

static void
print_result(const result_t *r)
{
    double rate = r->elapsed > 0 ? (double)r->ops / r->elapsed : 0, docs_per_op;
    double p50 = percentile_us(r->hist, r->ops, 50), p99 = percentile_us(r->hist, r->ops, 99);
    double p999 = percentile_us(r->hist, r->ops, 99.9);
    double cpu = r->ops > 0 ? r->client_cpu_us / (double)r->ops : 0.0;
    char extra[96] = "";

    /* docs: documents written or read (100 per insert100 operation). */
    docs_per_op = op_kind == OP_INSERT100 ? BATCH : 1;
    if (op_kind == OP_FINDEQ || op_kind == OP_RANGE) {
        docs_per_op = r->ops > 0 ? (double)r->docs / (double)r->ops : 0;
    }
    if (r->mode != NULL) {
        snprintf(extra, sizeof(extra), ", \"mode\": \"%s\", \"slice\": %.3f", r->mode, cfg.slice);
    }
    if (r->server_cpu_us >= 0) {
        size_t l = strlen(extra);
        snprintf(extra + l, sizeof(extra) - l, ", \"server_cpu_us_per_op\": %.2f",
                 r->ops > 0 ? r->server_cpu_us / (double)r->ops : 0.0);
    }
    printf("{\"tool\": \"loadgen\", \"op\": \"%s\", \"threads\": %d, \"seconds\": %.3f, "
           "\"ops\": %llu, \"errors\": %llu, \"ops_per_sec\": %.1f, \"p50_us\": %.1f, "
           "\"p99_us\": %.1f, \"p999_us\": %.1f, \"client_cpu_us_per_op\": %.2f, "
           "\"docs\": %llu, \"docs_per_sec\": %.1f%s}\n",
           cfg.op, cfg.threads, r->elapsed, (unsigned long long)r->ops,
           (unsigned long long)r->errors, rate, p50, p99, p999, cpu,
           (unsigned long long)((double)r->ops * docs_per_op + 0.5), rate * docs_per_op, extra);
    printf("loadgen %s%s%s x%d: %.0f ops/s (%.0f docs/s), p50 %.1f us, p99 %.1f us (%llu ops in "
           "%.2f s, %llu errors; client CPU %.2f us/op)\n",
           cfg.op, r->mode != NULL ? " " : "", r->mode != NULL ? r->mode : "", cfg.threads, rate,
           rate * docs_per_op, p50, p99, (unsigned long long)r->ops, r->elapsed,
           (unsigned long long)r->errors, cpu);
}

int
main(int argc, char **argv)
{
    int rc = parse_args(argc, argv);
    worker_t *workers = NULL;
    histogram_t *total = NULL, *total_alt = NULL;
    bson_error_t error;
    uint64_t ops = 0, ops_alt = 0, errors = 0, docs = 0, ticks[2] = {0, 0};
    int64_t thread_cpu[2] = {0, 0};
    int64_t end_ns;
    double cpu_us, tck = (double)sysconf(_SC_CLK_TCK);
    struct rusage ru;
    const char *first_error = NULL;
    result_t r;

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
    if (cfg.alt_uri != NULL && (alt_uri = mongoc_uri_new_with_error(cfg.alt_uri, &error)) == NULL) {
        fprintf(stderr, "loadgen: bad URI %s: %s\n", cfg.alt_uri, error.message);
        rc = 2;
        goto done;
    }
    /* An A/B run prepares both servers alike. */
    if (op_kind != OP_COMMAND &&
        (prepare(the_uri) != 0 || (alt_uri != NULL && prepare(alt_uri) != 0))) {
        rc = 1;
        goto done;
    }
    workers = calloc((size_t)cfg.threads, sizeof(*workers));
    total = calloc(1, sizeof(*total));
    total_alt = calloc(1, sizeof(*total_alt));
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
    if (alt_uri != NULL) {
        sample_slices(ticks);
    } else {
        report_intervals(workers);
    }
    end_ns = start_ns;
    for (int i = 0; i < cfg.threads; i++) {
        pthread_join(workers[i].thread, NULL);
        ops += workers[i].ops;
        ops_alt += workers[i].ops_alt;
        thread_cpu[0] += workers[i].cpu_ns[0];
        thread_cpu[1] += workers[i].cpu_ns[1];
        errors += workers[i].errors;
        docs += workers[i].docs;
        if (workers[i].last_end_ns > end_ns) {
            end_ns = workers[i].last_end_ns;
        }
        if (first_error == NULL && workers[i].first_error[0] != '\0') {
            first_error = workers[i].first_error;
        }
        for (int b = 0; b < NBUCKETS; b++) {
            total->counts[b] += workers[i].hist.counts[b];
            total_alt->counts[b] += workers[i].hist_alt.counts[b];
        }
    }
    pthread_barrier_destroy(&ready_barrier);
    pthread_barrier_destroy(&go_barrier);
    /* The generator's own CPU per operation (connecting included): on a shared box
     * it shows how much of the machine the driver itself takes. */
    getrusage(RUSAGE_SELF, &ru);
    cpu_us = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
             (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    /* In an A/B run, each mode's client CPU is its workers' thread CPU in its slices. */
    r = (result_t){alt_uri != NULL ? "a" : NULL, ops, errors, docs, mode_seconds(end_ns, false),
                   alt_uri != NULL ? (double)thread_cpu[0] / 1e3 : cpu_us,
                   alt_uri != NULL && cfg.server_pid > 0 ? (double)ticks[0] * 1e6 / tck : -1,
                   total};
    print_result(&r);
    if (alt_uri != NULL) {
        r = (result_t){"b", ops_alt, 0, 0, mode_seconds(end_ns, true),
                       (double)thread_cpu[1] / 1e3,
                       cfg.server_pid > 0 ? (double)ticks[1] * 1e6 / tck : -1, total_alt};
        print_result(&r);
    }
    if (first_error != NULL) {
        fprintf(stderr, "loadgen: first error: %s\n", first_error);
    }
    if (ops == 0 || errors > 0 || (alt_uri != NULL && ops_alt == 0)) {
        rc = 1;
    }
done:
    free(workers);
    free(total);
    free(total_alt);
    if (the_uri != NULL) {
        mongoc_uri_destroy(the_uri);
    }
    if (alt_uri != NULL) {
        mongoc_uri_destroy(alt_uri);
    }
    mongoc_cleanup();
    return rc;
}
