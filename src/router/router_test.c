/*
 * router_test.c -- the router's pure parts: how an aggregation pipeline is split into a
 * shards part and a merger part (table-driven: pipeline -> expected parts), router cursors,
 * and the write path over a fake shard at the outgoing-network seam: the statement ids of a
 * retryable write's sub-batches and when the router repeats a request (seeds/001
 * "Retryable writes"); transactions over the same fake (the fields of each statement, every
 * commit path, begin rules, implicit abort, labels, stale retries, checkout).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/clock.h"
#include "base/options.h"
#include "base/unit_test.h"
#include "net/service_context.h"
#include "router/router_private.h"
#include "router/txn_api.h"
#include "router/txn_router.h"

/* Merge pipelines read their stages' limits from the options table: give it its defaults. */
__attribute__((constructor)) static void
options_defaults(void)
{
    shl_options_init();
}

/* {$sum: {$cond: [{$and: [{$gt: [E, null]}, {$lt: [E, '']}]}, 1, 0]}} */
#define NUMERIC_COUNT(E)                                                                           \
    "{'$sum': {'$cond': [{'$and': [{'$gt': [" E ", null]}, {'$lt': [" E ", '']}]}, 1, 0]}}"

static const struct {
    const char *pipeline; /* {'p': [...]} */
    const char *want;     /* {'s': shards part, 'm': merger part, 'split': bool} */
} k_cases[] = {
    /* Streaming stages all run on the shards. */
    {"{'p': [{'$match': {'a': 1}}, {'$project': {'a': 1}}, {'$unwind': '$a'}]}",
     "{'s': [{'$match': {'a': 1}}, {'$project': {'a': 1}}, {'$unwind': '$a'}], 'm': [], "
     "'split': false}"},
    {"{'p': []}", "{'s': [], 'm': [], 'split': false}"},
    /* $sort: each shard sorts (and limits); the router merges and limits again. */
    {"{'p': [{'$match': {'a': 1}}, {'$sort': {'x': 1}}, {'$limit': 5}]}",
     "{'s': [{'$match': {'a': 1}}, {'$sort': {'x': 1}}, {'$limit': 5}], 'm': [{'$limit': 5}], "
     "'split': true}"},
    {"{'p': [{'$sort': {'x': -1}}, {'$skip': 2}, {'$limit': 5}, {'$project': {'x': 1}}]}",
     "{'s': [{'$sort': {'x': -1}}, {'$limit': {'$numberLong': '7'}}], "
     "'m': [{'$skip': 2}, {'$limit': 5}, {'$project': {'x': 1}}], 'split': true}"},
    {"{'p': [{'$sort': {'x': 1}}]}", "{'s': [{'$sort': {'x': 1}}], 'm': [], 'split': true}"},
    /* $limit first: pushed down and applied again. */
    {"{'p': [{'$limit': 3}, {'$set': {'y': 1}}]}",
     "{'s': [{'$limit': 3}], 'm': [{'$limit': 3}, {'$set': {'y': 1}}], 'split': true}"},
    /* $skip then $limit: the shards send at most skip + limit. */
    {"{'p': [{'$match': {'a': 1}}, {'$skip': 4}, {'$limit': 2}, {'$group': {'_id': 1, 'n': "
     "{'$sum': 1}}}]}",
     "{'s': [{'$match': {'a': 1}}, {'$limit': {'$numberLong': '6'}}], 'm': [{'$skip': 4}, "
     "{'$limit': 2}, {'$group': {'_id': 1, 'n': {'$sum': 1}}}], 'split': true}"},
    /* $skip alone cannot be pushed down. */
    {"{'p': [{'$unwind': '$a'}, {'$skip': 3}]}",
     "{'s': [{'$unwind': '$a'}], 'm': [{'$skip': 3}], 'split': true}"},
    /* $group: partial groups on the shards, the final one at the router. */
    {"{'p': [{'$match': {'g': 1}}, {'$group': {'_id': '$a', 'n': {'$sum': 1}, 'm': {'$max': "
     "'$x'}, 'l': {'$min': '$x'}, 'c': {'$count': {}}, 'f': {'$first': '$x'}}}, "
     "{'$sort': {'_id': 1}}]}",
     "{'s': [{'$match': {'g': 1}}, {'$group': {'_id': '$a', 'n': {'$sum': 1}, 'm': {'$max': "
     "'$x'}, 'l': {'$min': '$x'}, 'c': {'$sum': 1}, 'f': {'$first': '$x'}}}], "
     "'m': [{'$group': {'_id': '$_id', 'n': {'$sum': '$n'}, 'm': {'$max': '$m'}, 'l': {'$min': "
     "'$l'}, 'c': {'$sum': '$c'}, 'f': {'$first': '$f'}}}, {'$sort': {'_id': 1}}], "
     "'split': true}"},
    /* $avg: a sum and a count of numbers, divided at the router. */
    {"{'p': [{'$group': {'_id': null, 'a': {'$avg': '$v'}}}, {'$limit': 1}]}",
     "{'s': [{'$group': {'_id': null, 'a': {'$sum': '$v'}, '__shl_avgn_a': " NUMERIC_COUNT(
         "'$v'") "}}], "
                 "'m': [{'$group': {'_id': '$_id', 'a': {'$sum': '$a'}, '__shl_avgn_a': {'$sum': "
                 "'$__shl_avgn_a'}}}, {'$limit': 1}], 'split': true}"},
    /* No merge for $push here: the whole $group runs at the router. */
    {"{'p': [{'$group': {'_id': null, 'xs': {'$push': '$x'}, 'n': {'$sum': 1}}}]}",
     "{'s': [], 'm': [{'$group': {'_id': null, 'xs': {'$push': '$x'}, 'n': {'$sum': 1}}}], "
     "'split': true}"},
    /* $sortByCount: a $group of counts and a $sort at the router. */
    {"{'p': [{'$sortByCount': '$a'}, {'$limit': 2}]}",
     "{'s': [{'$group': {'_id': '$a', 'count': {'$sum': 1}}}], 'm': [{'$group': {'_id': '$_id', "
     "'count': {'$sum': '$count'}}}, {'$sort': {'count': -1}}, {'$limit': 2}], 'split': true}"},
    /* $count: a $group of counts, summed and projected at the router. */
    {"{'p': [{'$match': {'a': 1}}, {'$count': 'n'}]}",
     "{'s': [{'$match': {'a': 1}}, {'$group': {'_id': null, 'n': {'$sum': 1}}}], "
     "'m': [{'$group': {'_id': null, 'n': {'$sum': '$n'}}}, {'$project': {'_id': 0, 'n': 1}}], "
     "'split': true}"},
};

SHL_TEST(agg_split_table)
{
    for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); i++) {
        bson_t *in = shl_test_bson(k_cases[i].pipeline);
        bson_t pipeline, shards, merger, got = BSON_INITIALIZER;
        bson_iter_t it;
        const uint8_t *data;
        uint32_t len;
        bool split = false;

        ASSERT(bson_iter_init_find(&it, in, "p") && BSON_ITER_HOLDS_ARRAY(&it));
        bson_iter_array(&it, &len, &data);
        ASSERT(bson_init_static(&pipeline, data, len));
        router_agg_split(&pipeline, &shards, &merger, &split);
        BSON_APPEND_ARRAY(&got, "s", &shards);
        BSON_APPEND_ARRAY(&got, "m", &merger);
        BSON_APPEND_BOOL(&got, "split", split);
        bson_destroy(&shards);
        bson_destroy(&merger);
        bson_destroy(in);
        ASSERT_BSON_EQ(&got, k_cases[i].want);
        bson_destroy(&got);
    }
}

/* ---------------------------------------------------------------- router cursors */

/* A reply {cursor: {id: 0, firstBatch: docs}} from a JSON array of documents. */
static void
add_remote(shl_router_cursor_t *c, const char *shard, const char *docs_json)
{
    char json[2048];
    bson_t *reply;
    shl_status_t st = SHL_STATUS_INIT;

    snprintf(json, sizeof(json), "{'cursor': {'id': {'$numberLong': '0'}, 'firstBatch': %s}}",
             docs_json);
    reply = shl_test_bson(json);
    SHL_INVARIANT(shl_router_cursor_add_remote(c, shard, reply, &st) == 0);
    bson_destroy(reply);
}

/* Wrap a batch array as {b: [...]} for ASSERT_BSON_EQ. */
static bson_t *
wrap_batch(const bson_t *arr)
{
    bson_t *w = bson_new();
    BSON_APPEND_ARRAY(w, "b", arr);
    return w;
}

typedef struct test_op {
    shl_service_ctx_t svc;
    shl_op_ctx_t op;
} test_op_t;

static void
test_op_init(test_op_t *t)
{
    memset(t, 0, sizeof(*t));
    t->op.svc = &t->svc;
}

static bool
find_path(const bson_t *doc, const char *path, bson_iter_t *out)
{
    bson_iter_t it;
    return bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, out);
}

/* The router picks a snapshot read's atClusterTime: its clock, or a newer afterClusterTime
 * (which it replaces); never for other levels, other commands or a given atClusterTime. */
SHL_TEST(snapshot_rewrite_picks_at_cluster_time)
{
    shl_router_t r;
    shl_command_t find = {.name = "find", .flags = SHL_CMD_SNAPSHOT_READ};
    shl_command_t count = {.name = "count", .flags = 0};
    bson_t *body, *out;
    bson_iter_t it;
    uint32_t t, i;

    memset(&r, 0, sizeof(r));
    shl_vector_clock_init(&r.clock);
    body = shl_test_bson("{'find': 'c', 'readConcern': {'level': 'snapshot'}}");
    ASSERT(router_snapshot_rewrite(&r, &find, body) == NULL); /* no time known yet */
    shl_vector_clock_advance(&r.clock, SHL_VC_CLUSTER_TIME, ((uint64_t)100 << 32) | 7);
    out = router_snapshot_rewrite(&r, &find, body);
    ASSERT(out != NULL);
    ASSERT(bson_iter_init(&it, out) && bson_iter_next(&it));
    ASSERT_STR_EQ(bson_iter_key(&it), "find");
    ASSERT(bson_iter_init_find(&it, out, "readConcern"));
    ASSERT(find_path(out, "readConcern.atClusterTime", &it));
    bson_iter_timestamp(&it, &t, &i);
    ASSERT_INT_EQ(t, 100);
    ASSERT_INT_EQ(i, 7);
    bson_destroy(out);
    ASSERT(router_snapshot_rewrite(&r, &count, body) == NULL);
    bson_destroy(body);

    body = BCON_NEW("find", "c", "readConcern", "{", "level", "snapshot", "afterClusterTime",
                    BCON_TIMESTAMP(200, 1), "}");
    out = router_snapshot_rewrite(&r, &find, body);
    ASSERT(find_path(out, "readConcern.atClusterTime", &it));
    bson_iter_timestamp(&it, &t, &i);
    ASSERT_INT_EQ(t, 200);
    ASSERT(!find_path(out, "readConcern.afterClusterTime", &it));
    bson_destroy(out);
    bson_destroy(body);

    body = BCON_NEW("find", "c", "readConcern", "{", "level", "snapshot", "atClusterTime",
                    BCON_TIMESTAMP(50, 1), "}");
    ASSERT(router_snapshot_rewrite(&r, &find, body) == NULL);
    bson_destroy(body);
    body = shl_test_bson("{'find': 'c', 'readConcern': {'level': 'majority'}}");
    ASSERT(router_snapshot_rewrite(&r, &find, body) == NULL);
    bson_destroy(body);
}

SHL_TEST(cursor_merges_by_sort_key_with_skip_and_limit)
{
    shl_router_cursor_t *c = shl_router_cursor_new(NULL, "db.c", "db", "c");
    bson_t *spec = shl_test_bson("{'x': 1}");
    bson_t arr = BSON_INITIALIZER, *w;
    shl_status_t st = SHL_STATUS_INIT;
    bool exhausted = false;
    test_op_t t;

    test_op_init(&t);
    add_remote(c, "shard0", "[{'x': 1}, {'x': 4}, {'x': 5}, {'x': 9}]");
    add_remote(c, "shard1", "[{'x': 2}, {'x': 3}, {'x': 8}]");
    add_remote(c, "shard2", "[]");
    ASSERT(shl_sort_pattern_new(spec, &c->sort, &st) == 0);
    c->skip = 1;
    c->limit = 4;
    ASSERT(shl_router_cursor_fill_batch(&t.op, c, 2, true, &arr, &exhausted, &st) == 0);
    ASSERT(!exhausted);
    w = wrap_batch(&arr);
    ASSERT_BSON_EQ(w, "{'b': [{'x': 2}, {'x': 3}]}");
    bson_destroy(w);
    bson_reinit(&arr);
    ASSERT(shl_router_cursor_fill_batch(&t.op, c, 0, false, &arr, &exhausted, &st) == 0);
    ASSERT(exhausted); /* the limit is reached */
    w = wrap_batch(&arr);
    ASSERT_BSON_EQ(w, "{'b': [{'x': 4}, {'x': 5}]}");
    bson_destroy(w);
    bson_destroy(&arr);
    bson_destroy(spec);
    shl_router_cursor_destroy(c);
}

SHL_TEST(cursor_unsorted_goes_shard_by_shard_and_projects)
{
    shl_router_cursor_t *c = shl_router_cursor_new(NULL, "db.c", "db", "c");
    bson_t *spec = shl_test_bson("{'x': 1, '_id': 0}");
    bson_t arr = BSON_INITIALIZER, *w;
    shl_status_t st = SHL_STATUS_INIT;
    bool exhausted = false;
    test_op_t t;

    test_op_init(&t);
    add_remote(c, "shard0", "[{'_id': 1, 'x': 5, 'y': 1}]");
    add_remote(c, "shard1", "[{'_id': 2, 'x': 1, 'y': 2}, {'_id': 3, 'y': 3}]");
    ASSERT(shl_projection_new(spec, NULL, &c->proj, &st) == 0);
    ASSERT(shl_router_cursor_fill_batch(&t.op, c, 0, true, &arr, &exhausted, &st) == 0);
    ASSERT(exhausted);
    w = wrap_batch(&arr);
    ASSERT_BSON_EQ(w, "{'b': [{'x': 5}, {'x': 1}, {}]}");
    bson_destroy(w);
    bson_destroy(&arr);
    bson_destroy(spec);
    shl_router_cursor_destroy(c);
}

SHL_TEST(cursor_merge_pipeline_divides_avg_partials)
{
    shl_router_cursor_t *c = shl_router_cursor_new(NULL, "db.c", "db", "c");
    bson_t *a_spec =
        shl_test_bson("{'p': [{'$group': {'_id': '$_id', 'a': {'$sum': '$a'}, 'n': {'$sum': '$n'}, "
                      "'__shl_avgn_a': {'$sum': '$__shl_avgn_a'}}}, {'$sort': {'_id': 1}}]}");
    bson_t *b_spec = shl_test_bson("{'p': [{'$project': {'a': 1, 'n': 1}}]}");
    bson_t pa, pb, arr = BSON_INITIALIZER, *w;
    bson_iter_t it;
    shl_pipeline_t *ma = NULL, *mb = NULL;
    shl_status_t st = SHL_STATUS_INIT;
    bool exhausted = false;
    char **avg = bson_malloc0(2 * sizeof(char *));
    const uint8_t *data;
    uint32_t len;
    test_op_t t;

    test_op_init(&t);
    add_remote(c, "shard0",
               "[{'_id': 1, 'a': 10, 'n': 1, '__shl_avgn_a': 2}, "
               "{'_id': 2, 'a': 0, 'n': 1, '__shl_avgn_a': 0}]");
    add_remote(c, "shard1", "[{'_id': 1, 'a': 5, 'n': 2, '__shl_avgn_a': 1}]");
    ASSERT(bson_iter_init_find(&it, a_spec, "p"));
    bson_iter_array(&it, &len, &data);
    bson_init_static(&pa, data, len);
    ASSERT(bson_iter_init_find(&it, b_spec, "p"));
    bson_iter_array(&it, &len, &data);
    bson_init_static(&pb, data, len);
    ASSERT(shl_pipeline_parse(&pa, NULL, &ma, &st) == 0);
    ASSERT(shl_pipeline_parse(&pb, NULL, &mb, &st) == 0);
    avg[0] = bson_strdup("a");
    shl_router_cursor_set_merge(c, ma, mb, avg);
    ASSERT(shl_router_cursor_fill_batch(&t.op, c, 0, true, &arr, &exhausted, &st) == 0);
    ASSERT(exhausted);
    w = wrap_batch(&arr);
    ASSERT_BSON_EQ(w, "{'b': [{'_id': 1, 'a': 5.0, 'n': 3}, {'_id': 2, 'a': null, 'n': 1}]}");
    bson_destroy(w);
    bson_destroy(&arr);
    bson_destroy(a_spec);
    bson_destroy(b_spec);
    shl_router_cursor_destroy(c);
}

SHL_TEST(cursor_manager_pin_kill_reap)
{
    shl_router_cursor_manager_t *mgr = shl_router_cursor_manager_new();
    shl_router_cursor_t *a = shl_router_cursor_new(NULL, "db.a", "db", "a");
    shl_router_cursor_t *b = shl_router_cursor_new(NULL, "db.b", "db", "b");
    shl_router_cursor_t *got = NULL, *again = NULL;
    shl_status_t st = SHL_STATUS_INIT;
    int64_t ida = shl_router_cursor_manager_register(mgr, a);
    int64_t idb = shl_router_cursor_manager_register(mgr, b);

    ASSERT(ida > 0 && idb > 0 && ida != idb);
    ASSERT_INT_EQ(shl_router_cursor_manager_count(mgr), 2);
    ASSERT_INT_EQ(shl_router_cursor_manager_pin(mgr, ida, "db.b", &got, &st), 13);
    ASSERT_INT_EQ(shl_router_cursor_manager_pin(mgr, 12345, "db.a", &got, &st), 43);
    ASSERT_INT_EQ(shl_router_cursor_manager_pin(mgr, ida, "db.a", &got, &st), 0);
    ASSERT(got == a);
    ASSERT_INT_EQ(shl_router_cursor_manager_pin(mgr, ida, "db.a", &again, &st), 143);
    /* Killed while pinned: gone for others at once, destroyed when its user lets go. */
    ASSERT(shl_router_cursor_manager_kill(mgr, ida, "db.a"));
    ASSERT_INT_EQ(shl_router_cursor_manager_pin(mgr, ida, "db.a", &again, &st), 43);
    ASSERT(!shl_router_cursor_manager_kill(mgr, ida, "db.a"));
    shl_router_cursor_manager_unpin(mgr, got, false);
    ASSERT_INT_EQ(shl_router_cursor_manager_count(mgr), 1);
    /* Idle cursors are reaped; noCursorTimeout ones are not. */
    ASSERT_INT_EQ(shl_router_cursor_manager_reap(mgr, b->last_used_ms + 10, 100), 0);
    b->no_timeout = true;
    ASSERT_INT_EQ(shl_router_cursor_manager_reap(mgr, b->last_used_ms + 1000, 100), 0);
    b->no_timeout = false;
    ASSERT_INT_EQ(shl_router_cursor_manager_reap(mgr, b->last_used_ms + 1000, 100), 1);
    ASSERT_INT_EQ(shl_router_cursor_manager_count(mgr), 0);
    shl_router_cursor_manager_destroy(mgr);
}

/* ------------------------------------------------- retryable writes over a fake shard */

/*
 * The router's write path run over the outgoing-network seam (shl_router_t.send_hook) and a
 * fixed routing (router_write_run's route callback): collection test.c sharded on {x: 1},
 * x < 0 on shard "shA" and x >= 0 on "shB". The fake shard records every request, answers
 * like a shard that deduplicates statements by stmtId (retriedStmtIds), and injects the
 * faults a test scripts.
 */
#define FAKE_MAX_CALLS 64

typedef enum {
    FAULT_NETWORK,     /* no reply: 'code' as a network error */
    FAULT_REPLY,       /* ok: 0 with 'code' (StaleConfig included) */
    FAULT_WCE,         /* runs, then a writeConcernError with 'code' */
    FAULT_WRITE_ERROR, /* statement 'index' fails with 'code'; ordered: the rest does not run */
} fault_kind_t;

typedef struct fault {
    const char *shard;
    fault_kind_t kind;
    int code;
    int times;
    int index;
} fault_t;

typedef struct fake {
    shl_router_t r;
    shl_service_ctx_t svc;
    shl_routing_table_t *rt;
    size_t ncalls;
    char shard[FAKE_MAX_CALLS][16];
    bson_t cmd[FAKE_MAX_CALLS];
    fault_t faults[4];
    size_t nfaults;
    int64_t txn[2];      /* the txnNumber each shard's history is for */
    int32_t done[2][64]; /* statement ids each shard ran under it */
    size_t ndone[2];
    size_t applied[2]; /* statements each shard ran (effects) */
} fake_t;

static void
fake_reply_error(shl_fanout_result_t *res, int code)
{
    BSON_APPEND_DOUBLE(&res->reply, "ok", 0.0);
    BSON_APPEND_INT32(&res->reply, "code", code);
    BSON_APPEND_UTF8(&res->reply, "errmsg", "injected");
    BSON_APPEND_UTF8(&res->reply, "ns", "test.c");
    /* A shard labels nothing for a router; an injected label must not reach the client. */
    {
        bson_t labels;
        BSON_APPEND_ARRAY_BEGIN(&res->reply, "errorLabels", &labels);
        BSON_APPEND_UTF8(&labels, "0", "RetryableWriteError");
        bson_append_array_end(&res->reply, &labels);
    }
    res->code = shl_status_from_reply(&res->reply, &res->status);
}

/* Run the statements of one request as a deduplicating shard would. */
static void
fake_execute(fake_t *f, int s, const bson_t *cmd, const fault_t *ft, shl_fanout_result_t *res)
{
    bson_iter_t it, arr, ids;
    const char *name;
    bool fam, ordered = true, has_ids;
    int32_t retried[64];
    size_t nretried = 0, m = 0;
    int64_t n = 0;
    bson_t a, d;

    bson_iter_init(&it, cmd);
    bson_iter_next(&it);
    name = bson_iter_key(&it);
    fam = strcmp(name, "findAndModify") == 0;
    if (bson_iter_init_find(&it, cmd, "ordered")) {
        ordered = bson_iter_as_bool(&it);
    }
    if (fam) {
        m = 1;
    } else {
        bson_iter_init_find(&it, cmd,
                            strcmp(name, "insert") == 0
                                ? "documents"
                                : (strcmp(name, "update") == 0 ? "updates" : "deletes"));
        bson_iter_recurse(&it, &arr);
        while (bson_iter_next(&arr)) {
            m++;
        }
    }
    /* A newer txnNumber starts a new history, as on a shard. */
    if (bson_iter_init_find(&it, cmd, "txnNumber") && bson_iter_as_int64(&it) != f->txn[s]) {
        f->txn[s] = bson_iter_as_int64(&it);
        f->ndone[s] = 0;
    }
    has_ids = bson_iter_init_find(&ids, cmd, fam ? "stmtId" : "stmtIds");
    if (has_ids && !fam) {
        bson_iter_recurse(&ids, &arr);
    }
    for (size_t j = 0; j < m; j++) {
        int32_t id = -1;
        bool seen = false;
        if (has_ids) {
            if (fam) {
                id = bson_iter_int32(&ids);
            } else {
                bson_iter_next(&arr);
                id = bson_iter_int32(&arr);
            }
        }
        if (ft != NULL && ft->kind == FAULT_WRITE_ERROR && (size_t)ft->index == j) {
            continue; /* reported below; ordered: nothing after it runs */
        }
        if (ft != NULL && ft->kind == FAULT_WRITE_ERROR && ordered && j > (size_t)ft->index) {
            break;
        }
        for (size_t k = 0; id >= 0 && k < f->ndone[s]; k++) {
            seen = seen || f->done[s][k] == id;
        }
        if (seen) {
            retried[nretried++] = id;
        } else {
            if (id >= 0) {
                f->done[s][f->ndone[s]++] = id;
            }
            f->applied[s]++;
        }
        n++;
    }
    BSON_APPEND_INT32(&res->reply, "n", (int32_t)n);
    if (fam) {
        BSON_APPEND_DOCUMENT_BEGIN(&res->reply, "lastErrorObject", &d);
        BSON_APPEND_INT32(&d, "n", 1);
        bson_append_document_end(&res->reply, &d);
        if (nretried > 0) {
            BSON_APPEND_INT32(&res->reply, "retriedStmtId", retried[0]);
        }
    } else if (nretried > 0) {
        BSON_APPEND_ARRAY_BEGIN(&res->reply, "retriedStmtIds", &a);
        for (size_t k = 0; k < nretried; k++) {
            char key[24];
            snprintf(key, sizeof(key), "%zu", k);
            BSON_APPEND_INT32(&a, key, retried[k]);
        }
        bson_append_array_end(&res->reply, &a);
    }
    if (ft != NULL && ft->kind == FAULT_WRITE_ERROR) {
        BSON_APPEND_ARRAY_BEGIN(&res->reply, "writeErrors", &a);
        BSON_APPEND_DOCUMENT_BEGIN(&a, "0", &d);
        BSON_APPEND_INT32(&d, "index", ft->index);
        BSON_APPEND_INT32(&d, "code", ft->code);
        BSON_APPEND_UTF8(&d, "errmsg", "injected");
        bson_append_document_end(&a, &d);
        bson_append_array_end(&res->reply, &a);
    }
    if (ft != NULL && ft->kind == FAULT_WCE) {
        BSON_APPEND_DOCUMENT_BEGIN(&res->reply, "writeConcernError", &d);
        BSON_APPEND_INT32(&d, "code", ft->code);
        BSON_APPEND_UTF8(&d, "errmsg", "injected");
        bson_append_document_end(&res->reply, &d);
    }
    BSON_APPEND_DOUBLE(&res->reply, "ok", 1.0);
}

static const char *
fake_cmd_name(const bson_t *cmd)
{
    bson_iter_t it;
    return bson_iter_init(&it, cmd) && bson_iter_next(&it) ? bson_iter_key(&it) : "";
}

/* Commands the fake answers with a plain ok (no statements to run). */
static bool
fake_is_plain(const bson_t *cmd)
{
    const char *name = fake_cmd_name(cmd);
    return strcmp(name, "commitTransaction") == 0 || strcmp(name, "abortTransaction") == 0 ||
           strcmp(name, "coordinateCommitTransaction") == 0 || strcmp(name, "find") == 0;
}

static void
fake_send(void *arg, const char *db, const shl_router_request_t *reqs, size_t n,
          shl_fanout_result_t *results, char (*hosts)[SHL_CLIENT_HOST_MAX])
{
    fake_t *f = arg;

    (void)db;
    for (size_t i = 0; i < n; i++) {
        const char *shard = reqs[i].shard;
        int s = strcmp(shard, "shA") == 0 ? 0 : 1;
        fault_t *ft = NULL;

        SHL_INVARIANT(f->ncalls < FAKE_MAX_CALLS);
        snprintf(f->shard[f->ncalls], sizeof(f->shard[0]), "%s", shard);
        bson_copy_to(&reqs[i].cmd, &f->cmd[f->ncalls++]);
        snprintf(hosts[i], SHL_CLIENT_HOST_MAX, "%s.example:1", shard);
        for (size_t k = 0; ft == NULL && k < f->nfaults; k++) {
            if (strcmp(f->faults[k].shard, shard) == 0 && f->faults[k].times > 0) {
                ft = &f->faults[k];
                ft->times--;
            }
        }
        if (ft != NULL && ft->kind == FAULT_NETWORK) {
            results[i].code = shl_status_set(&results[i].status, ft->code, "Connection refused");
        } else if ((ft == NULL || ft->kind == FAULT_WCE) && fake_is_plain(&reqs[i].cmd)) {
            /* A transaction's decisions and reads: ok (an empty cursor for a find). */
            bson_t cur, batch;
            if (strcmp(fake_cmd_name(&reqs[i].cmd), "find") == 0) {
                BSON_APPEND_DOCUMENT_BEGIN(&results[i].reply, "cursor", &cur);
                BSON_APPEND_INT64(&cur, "id", 0);
                BSON_APPEND_UTF8(&cur, "ns", "test.c");
                BSON_APPEND_ARRAY_BEGIN(&cur, "firstBatch", &batch);
                bson_append_array_end(&cur, &batch);
                bson_append_document_end(&results[i].reply, &cur);
            }
            if (ft != NULL) {
                BSON_APPEND_DOCUMENT_BEGIN(&results[i].reply, "writeConcernError", &cur);
                BSON_APPEND_INT32(&cur, "code", ft->code);
                BSON_APPEND_UTF8(&cur, "errmsg", "injected");
                bson_append_document_end(&results[i].reply, &cur);
            }
            BSON_APPEND_DOUBLE(&results[i].reply, "ok", 1.0);
        } else if (ft != NULL && ft->kind == FAULT_REPLY) {
            fake_reply_error(&results[i], ft->code);
        } else {
            fake_execute(f, s, &reqs[i].cmd, ft, &results[i]);
        }
    }
}

static int
fake_route(void *arg, const char *ns, bool create_db, shl_router_routing_t *out, shl_status_t *st)
{
    fake_t *f = arg;

    (void)create_db;
    (void)st;
    memset(out, 0, sizeof(*out));
    snprintf(out->ns, sizeof(out->ns), "%s", ns);
    snprintf(out->db.name, sizeof(out->db.name), "test");
    snprintf(out->db.primary, sizeof(out->db.primary), "shA");
    out->rt = f->rt != NULL ? shl_routing_table_ref(f->rt) : NULL;
    return 0;
}

static void
fake_init(fake_t *f, bool sharded)
{
    memset(f, 0, sizeof(*f));
    f->r.registry = shl_shard_registry_new(NULL, "csrs/localhost:1");
    f->r.cache = shl_catalog_cache_new(f->r.registry);
    f->r.send_hook = fake_send;
    f->r.send_hook_arg = f;
    f->svc.role = SHL_ROLE_ROUTER;
    f->svc.role_state = &f->r;
    if (sharded) {
        bson_t *pattern = shl_test_bson("{'x': 1}");
        shl_chunk_type_t *cs = bson_malloc0(2 * sizeof(*cs)); /* freed by the list's free */
        shl_routing_table_info_t info;
        bson_oid_t epoch;
        shl_status_t st = SHL_STATUS_INIT;

        bson_oid_init_from_string(&epoch, "5f1a2b3c4d5e6f7081920304");
        memset(&info, 0, sizeof(info));
        info.ns = "test.c";
        info.key_pattern = pattern;
        info.allow_migrations = true;
        info.generation = shl_chunk_version_make(&epoch, (shl_ts_t){10, 0}, 0, 0);
        cs[0].min = shl_test_bson("{'x': {'$minKey': 1}}");
        cs[0].max = shl_test_bson("{'x': 0}");
        cs[0].shard = bson_strdup("shA");
        cs[0].version = shl_chunk_version_make(&epoch, (shl_ts_t){10, 0}, 1, 0);
        cs[1].min = shl_test_bson("{'x': 0}");
        cs[1].max = shl_test_bson("{'x': {'$maxKey': 1}}");
        cs[1].shard = bson_strdup("shB");
        cs[1].version = shl_chunk_version_make(&epoch, (shl_ts_t){10, 0}, 1, 1);
        SHL_INVARIANT(shl_routing_table_new(&info, cs, 2, &f->rt, &st) == 0);
        shl_chunk_types_free(cs, 2);
        bson_destroy(pattern);
    }
}

static void
fake_cleanup(fake_t *f)
{
    for (size_t i = 0; i < f->ncalls; i++) {
        bson_destroy(&f->cmd[i]);
    }
    if (f->rt != NULL) {
        shl_routing_table_release(f->rt);
    }
    shl_catalog_cache_destroy(f->r.cache);
    shl_shard_registry_destroy(f->r.registry);
}

static void
fake_fault(fake_t *f, const char *shard, fault_kind_t kind, int code, int times, int index)
{
    f->faults[f->nfaults++] = (fault_t){shard, kind, code, times, index};
}

#define LSID "{'id': {'$binary': {'base64': 'AAECAwQFBgcICQoLDA0ODw==', 'subType': '04'}}}"
#define TXN(n) "'lsid': " LSID ", 'txnNumber': {'$numberLong': '" #n "'}"

/* Run the write command 'json' (its first key says which) through the router. */
static int
fake_run(fake_t *f, const char *json, bson_t *reply, shl_status_t *st)
{
    bson_t *cmd = shl_test_bson(json);
    shl_op_ctx_t op;
    int ret;

    bson_init(reply);
    ret = shl_op_ctx_init(&op, &f->svc, NULL, cmd, "test", st);
    if (ret == 0) {
        ret = strncmp(json + 2, "findAndModify", 13) == 0
                  ? router_find_and_modify_run(&op, cmd, fake_route, f, reply, st)
                  : router_write_run(&op, cmd, fake_route, f, reply, st);
    }
    bson_destroy(cmd);
    return ret;
}

/* {shard, stmtIds} of call i, for ASSERT_BSON_EQ. */
static bson_t *
call_ids(const fake_t *f, size_t i, const char *field)
{
    bson_t *out = bson_new();
    bson_iter_t it;

    BSON_APPEND_UTF8(out, "shard", f->shard[i]);
    if (bson_iter_init_find(&it, &f->cmd[i], field)) {
        bson_append_iter(out, field, -1, &it);
    }
    return out;
}

#define ASSERT_CALL(f, i, field, json)                                                             \
    do {                                                                                           \
        bson_t *c_ = call_ids((f), (i), (field));                                                  \
        ASSERT_BSON_EQ(c_, json);                                                                  \
        bson_destroy(c_);                                                                          \
    } while (0)

SHL_TEST(retryable_write_sub_batches_carry_their_statements_ids)
{
    fake_t f;
    bson_t reply;
    shl_status_t st = SHL_STATUS_INIT;
    bson_iter_t it, lsid;
    uint32_t len;
    const uint8_t *data;
    bson_subtype_t sub;

    fake_init(&f, true);
    /* Unordered: one sub-batch per shard, each with the ids of its own statements. */
    ASSERT_INT_EQ(
        fake_run(&f,
                 "{'insert': 'c', 'documents': [{'_id': 0, 'x': -1}, {'_id': 1, 'x': 1}, "
                 "{'_id': 2, 'x': -2}, {'_id': 3, 'x': 2}], 'ordered': false, " TXN(5) "}",
                 &reply, &st),
        0);
    ASSERT_BSON_EQ(&reply, "{'n': 4}");
    ASSERT_INT_EQ(f.ncalls, 2);
    ASSERT_CALL(&f, 0, "stmtIds", "{'shard': 'shA', 'stmtIds': [0, 2]}");
    ASSERT_CALL(&f, 1, "stmtIds", "{'shard': 'shB', 'stmtIds': [1, 3]}");
    /* Every request carries the lsid as {id, uid} and the txnNumber as a long. */
    for (size_t i = 0; i < f.ncalls; i++) {
        ASSERT(bson_iter_init_find(&it, &f.cmd[i], "txnNumber") && BSON_ITER_HOLDS_INT64(&it) &&
               bson_iter_int64(&it) == 5);
        ASSERT(bson_iter_init_find(&it, &f.cmd[i], "lsid") && bson_iter_recurse(&it, &lsid));
        ASSERT(bson_iter_find(&lsid, "id") && BSON_ITER_HOLDS_BINARY(&lsid));
        ASSERT(bson_iter_next(&lsid) && strcmp(bson_iter_key(&lsid), "uid") == 0);
        bson_iter_binary(&lsid, &sub, &len, &data);
        ASSERT_INT_EQ(len, 32);
    }
    bson_destroy(&reply);

    /* Ordered: one run per shard at a time; the ids are still the client's indexes. */
    ASSERT_INT_EQ(
        fake_run(&f,
                 "{'insert': 'c', 'documents': [{'_id': 4, 'x': -1}, {'_id': 5, 'x': -3}, "
                 "{'_id': 6, 'x': 1}, {'_id': 7, 'x': -2}], " TXN(6) "}",
                 &reply, &st),
        0);
    ASSERT_INT_EQ(f.ncalls, 5);
    ASSERT_CALL(&f, 2, "stmtIds", "{'shard': 'shA', 'stmtIds': [0, 1]}");
    ASSERT_CALL(&f, 3, "stmtIds", "{'shard': 'shB', 'stmtIds': [2]}");
    ASSERT_CALL(&f, 4, "stmtIds", "{'shard': 'shA', 'stmtIds': [3]}");
    bson_destroy(&reply);

    /* The client's stmtId is the first id; its stmtIds are the ids. */
    ASSERT_INT_EQ(
        fake_run(&f,
                 "{'delete': 'c', 'deletes': [{'q': {'x': -1}, 'limit': 1}, "
                 "{'q': {'x': 1}, 'limit': 1}], 'ordered': false, 'stmtId': 10, " TXN(7) "}",
                 &reply, &st),
        0);
    ASSERT_CALL(&f, 5, "stmtIds", "{'shard': 'shA', 'stmtIds': [10]}");
    ASSERT_CALL(&f, 6, "stmtIds", "{'shard': 'shB', 'stmtIds': [11]}");
    ASSERT(!bson_has_field(&f.cmd[5], "stmtId"));
    bson_destroy(&reply);
    ASSERT_INT_EQ(
        fake_run(&f,
                 "{'update': 'c', 'updates': [{'q': {'x': 1}, 'u': {'$set': {'a': 1}}}, "
                 "{'q': {'x': -1}, 'u': {'$set': {'a': 1}}}, {'q': {'x': 2}, 'u': "
                 "{'$set': {'a': 1}}}], 'ordered': false, 'stmtIds': [7, 5, 9], " TXN(8) "}",
                 &reply, &st),
        0);
    ASSERT_CALL(&f, 7, "stmtIds", "{'shard': 'shB', 'stmtIds': [7, 9]}");
    ASSERT_CALL(&f, 8, "stmtIds", "{'shard': 'shA', 'stmtIds': [5]}");
    bson_destroy(&reply);
    fake_cleanup(&f);
}

SHL_TEST(non_retryable_writes_carry_no_statement_ids)
{
    fake_t f;
    bson_t reply;
    shl_status_t st = SHL_STATUS_INIT;

    fake_init(&f, true);
    /* A session without a txnNumber: the lsid goes along, no txnNumber, no ids. */
    ASSERT_INT_EQ(fake_run(&f,
                           "{'insert': 'c', 'documents': [{'_id': 0, 'x': -1}], 'stmtId': 3, "
                           "'lsid': " LSID "}",
                           &reply, &st),
                  0);
    ASSERT(bson_has_field(&f.cmd[0], "lsid"));
    ASSERT(!bson_has_field(&f.cmd[0], "txnNumber") && !bson_has_field(&f.cmd[0], "stmtIds") &&
           !bson_has_field(&f.cmd[0], "stmtId"));
    bson_destroy(&reply);
    /* A client's ids must match its statements, retryable or not (nothing is sent). */
    ASSERT_INT_EQ(
        fake_run(&f,
                 "{'insert': 'c', 'documents': [{'_id': 1, 'x': -1}, {'_id': 2, 'x': 1}], "
                 "'stmtIds': [0, 1, 2], " TXN(1) "}",
                 &reply, &st),
        SHL_CODE_INVALID_LENGTH);
    bson_destroy(&reply);
    ASSERT_INT_EQ(fake_run(&f,
                           "{'insert': 'c', 'documents': [{'_id': 1, 'x': -1}], 'stmtIds': [0], "
                           "'stmtId': 0, " TXN(1) "}",
                           &reply, &st),
                  SHL_CODE_INVALID_OPTIONS);
    bson_destroy(&reply);
    ASSERT_INT_EQ(f.ncalls, 1);
    fake_cleanup(&f);
}

SHL_TEST(multi_shard_statement_keeps_its_id_on_every_shard)
{
    fake_t f;
    bson_t reply;
    shl_status_t st = SHL_STATUS_INIT;

    fake_init(&f, true);
    /* Statement 1 has no shard key: both shards get it, both with id 1. */
    ASSERT_INT_EQ(fake_run(&f,
                           "{'delete': 'c', 'deletes': [{'q': {'x': -4}, 'limit': 1}, "
                           "{'q': {'y': 1}, 'limit': 0}], " TXN(3) "}",
                           &reply, &st),
                  0);
    ASSERT_INT_EQ(f.ncalls, 3);
    ASSERT_CALL(&f, 0, "stmtIds", "{'shard': 'shA', 'stmtIds': [0]}");
    ASSERT_CALL(&f, 1, "stmtIds", "{'shard': 'shA', 'stmtIds': [1]}");
    ASSERT_CALL(&f, 2, "stmtIds", "{'shard': 'shB', 'stmtIds': [1]}");
    bson_destroy(&reply);
    fake_cleanup(&f);
}

SHL_TEST(retryable_write_retries_a_retriable_failure_and_applies_once)
{
    fake_t f;
    bson_t reply;
    shl_status_t st = SHL_STATUS_INIT;
    const char *batch = "{'insert': 'c', 'documents': [{'_id': 0, 'x': -1}, {'_id': 1, 'x': 1}, "
                        "{'_id': 2, 'x': -2}], 'ordered': false, " TXN(2) "}";

    fake_init(&f, true);
    /* Two network errors on shA: its sub-batch is sent three times, unchanged. */
    fake_fault(&f, "shA", FAULT_NETWORK, SHL_CODE_HOST_UNREACHABLE, 2, 0);
    ASSERT_INT_EQ(fake_run(&f, batch, &reply, &st), 0);
    ASSERT_BSON_EQ(&reply, "{'n': 3}");
    ASSERT_INT_EQ(f.ncalls, 4);
    ASSERT_CALL(&f, 0, "stmtIds", "{'shard': 'shA', 'stmtIds': [0, 2]}");
    ASSERT_CALL(&f, 1, "stmtIds", "{'shard': 'shB', 'stmtIds': [1]}");
    ASSERT_CALL(&f, 2, "stmtIds", "{'shard': 'shA', 'stmtIds': [0, 2]}");
    ASSERT_CALL(&f, 3, "stmtIds", "{'shard': 'shA', 'stmtIds': [0, 2]}");
    ASSERT(bson_equal(&f.cmd[0], &f.cmd[3]));
    bson_destroy(&reply);

    /* A writeConcernError with a retriable code after the write ran: the resend is answered
     * from the shard's history, so it applies once, and the client sees retriedStmtIds. */
    fake_fault(&f, "shB", FAULT_WCE, SHL_CODE_SHUTDOWN_IN_PROGRESS, 1, 0);
    ASSERT_INT_EQ(fake_run(&f,
                           "{'insert': 'c', 'documents': [{'_id': 5, 'x': 5}, {'_id': 6, 'x': 6}], "
                           "" TXN(3) "}",
                           &reply, &st),
                  0);
    ASSERT_BSON_EQ(&reply, "{'n': 2, 'retriedStmtIds': [0, 1]}");
    ASSERT_INT_EQ(f.applied[1], 3);
    bson_destroy(&reply);

    /* An error reply with a retriable code (a shard shutting down) is retried too. */
    fake_fault(&f, "shB", FAULT_REPLY, SHL_CODE_NOT_WRITABLE_PRIMARY, 1, 0);
    ASSERT_INT_EQ(
        fake_run(&f, "{'insert': 'c', 'documents': [{'_id': 7, 'x': 7}], " TXN(4) "}", &reply, &st),
        0);
    ASSERT_BSON_EQ(&reply, "{'n': 1}");
    ASSERT_INT_EQ(f.applied[1], 4);
    bson_destroy(&reply);
    fake_cleanup(&f);
}

SHL_TEST(retryable_write_gives_up_after_three_retries)
{
    fake_t f;
    bson_t reply;
    shl_status_t st = SHL_STATUS_INIT;
    size_t before;

    fake_init(&f, true);
    fake_fault(&f, "shA", FAULT_NETWORK, SHL_CODE_HOST_UNREACHABLE, 100, 0);
    ASSERT_INT_EQ(fake_run(&f,
                           "{'insert': 'c', 'documents': [{'_id': 0, 'x': -1}, {'_id': 1, 'x': 1}, "
                           "{'_id': 2, 'x': -2}], 'ordered': false, " TXN(2) "}",
                           &reply, &st),
                  0);
    ASSERT_INT_EQ(f.ncalls, 1 + 1 + SHL_ROUTER_MAX_FAILED_HOST_RETRIES);
    /* Every statement of the unreachable shard's sub-batch fails, with MongoDB's context. */
    ASSERT_BSON_EQ(&reply,
                   "{'n': 1, 'writeErrors': [{'index': 0, 'code': 6, 'errmsg': 'Write results "
                   "unavailable from shA.example:1 :: caused by :: Connection refused'}, "
                   "{'index': 2, 'code': 6, 'errmsg': 'Write results unavailable from "
                   "shA.example:1 :: caused by :: Connection refused'}]}");
    bson_destroy(&reply);

    /* Not a retryable write: sent once. Non-retriable errors and write errors: sent once. */
    before = f.ncalls;
    ASSERT_INT_EQ(fake_run(&f, "{'insert': 'c', 'documents': [{'_id': 3, 'x': -3}]}", &reply, &st),
                  0);
    ASSERT_INT_EQ(f.ncalls, before + 1);
    bson_destroy(&reply);
    f.faults[0].times = 0;
    fake_fault(&f, "shB", FAULT_REPLY, SHL_CODE_BAD_VALUE, 1, 0);
    fake_fault(&f, "shA", FAULT_WRITE_ERROR, SHL_CODE_SHUTDOWN_IN_PROGRESS, 1, 0);
    before = f.ncalls;
    ASSERT_INT_EQ(
        fake_run(&f,
                 "{'insert': 'c', 'documents': [{'_id': 8, 'x': 8}, {'_id': 9, 'x': -9}], "
                 "'ordered': false, " TXN(3) "}",
                 &reply, &st),
        0);
    ASSERT_INT_EQ(f.ncalls, before + 2);
    /* A shard's error reply fails its statements as it is: no context, no labels. */
    ASSERT_BSON_EQ(&reply, "{'n': 0, 'writeErrors': [{'index': 0, 'code': 2, 'errmsg': "
                           "'injected', 'errInfo': {'ns': 'test.c'}}, {'index': 1, 'code': 91, "
                           "'errmsg': 'injected'}]}");
    bson_destroy(&reply);
    fake_cleanup(&f);
}

SHL_TEST(stale_statements_are_resent_with_the_same_ids)
{
    fake_t f;
    bson_t reply;
    shl_status_t st = SHL_STATUS_INIT;

    fake_init(&f, true);
    /* The whole sub-batch was stale: it is routed again and sent with the same ids. */
    fake_fault(&f, "shB", FAULT_REPLY, SHL_CODE_STALE_CONFIG, 1, 0);
    ASSERT_INT_EQ(
        fake_run(&f,
                 "{'update': 'c', 'updates': [{'q': {'x': -1}, 'u': {'$set': {'a': 1}}}, "
                 "{'q': {'x': 1}, 'u': {'$set': {'a': 1}}}], 'ordered': false, " TXN(4) "}",
                 &reply, &st),
        0);
    ASSERT_INT_EQ(f.ncalls, 3);
    ASSERT_CALL(&f, 1, "stmtIds", "{'shard': 'shB', 'stmtIds': [1]}");
    ASSERT_CALL(&f, 2, "stmtIds", "{'shard': 'shB', 'stmtIds': [1]}");
    bson_destroy(&reply);
    /* Ordered, stale at statement 1 of the run: 0 ran, 1 and 2 are re-sent with ids 1, 2. */
    fake_fault(&f, "shA", FAULT_WRITE_ERROR, SHL_CODE_STALE_CONFIG, 1, 1);
    ASSERT_INT_EQ(
        fake_run(&f,
                 "{'insert': 'c', 'documents': [{'_id': 0, 'x': -1}, {'_id': 1, 'x': -2}, "
                 "{'_id': 2, 'x': -3}], " TXN(5) "}",
                 &reply, &st),
        0);
    ASSERT_BSON_EQ(&reply, "{'n': 3}");
    ASSERT_INT_EQ(f.ncalls, 5);
    ASSERT_CALL(&f, 3, "stmtIds", "{'shard': 'shA', 'stmtIds': [0, 1, 2]}");
    ASSERT_CALL(&f, 4, "stmtIds", "{'shard': 'shA', 'stmtIds': [1, 2]}");
    bson_destroy(&reply);
    fake_cleanup(&f);
}

SHL_TEST(find_and_modify_forwards_its_statement_and_retries)
{
    fake_t f;
    bson_t reply;
    shl_status_t st = SHL_STATUS_INIT;

    fake_init(&f, true);
    fake_fault(&f, "shB", FAULT_NETWORK, SHL_CODE_SOCKET_EXCEPTION, 1, 0);
    ASSERT_INT_EQ(
        fake_run(&f,
                 "{'findAndModify': 'c', 'query': {'x': 3}, 'update': {'$inc': {'n': 1}}, "
                 "" TXN(9) "}",
                 &reply, &st),
        0);
    ASSERT_INT_EQ(f.ncalls, 2);
    ASSERT_CALL(&f, 0, "stmtId", "{'shard': 'shB', 'stmtId': 0}");
    ASSERT(bson_equal(&f.cmd[0], &f.cmd[1]));
    ASSERT(bson_has_field(&f.cmd[0], "lsid.uid") && bson_has_field(&f.cmd[0], "txnNumber"));
    bson_destroy(&reply);
    /* The client's own stmtId is kept. */
    ASSERT_INT_EQ(
        fake_run(&f,
                 "{'findAndModify': 'c', 'query': {'x': -3}, 'remove': true, 'stmtId': 4, "
                 "" TXN(10) "}",
                 &reply, &st),
        0);
    ASSERT_CALL(&f, 2, "stmtId", "{'shard': 'shA', 'stmtId': 4}");
    bson_destroy(&reply);
    /* A shard's error is the command's, without the shard's labels. */
    fake_fault(&f, "shA", FAULT_REPLY, SHL_CODE_BAD_VALUE, 1, 0);
    ASSERT_INT_EQ(
        fake_run(&f, "{'findAndModify': 'c', 'query': {'x': -3}, 'remove': true, " TXN(11) "}",
                 &reply, &st),
        SHL_CODE_BAD_VALUE);
    ASSERT_INT_EQ(st.labels, 0);
    bson_destroy(&reply);
    /* Not retryable: no stmtId, no retry. */
    fake_fault(&f, "shA", FAULT_NETWORK, SHL_CODE_HOST_UNREACHABLE, 1, 0);
    ASSERT_INT_EQ(
        fake_run(&f, "{'findAndModify': 'c', 'query': {'x': -3}, 'remove': true}", &reply, &st),
        SHL_CODE_HOST_UNREACHABLE);
    ASSERT(!bson_has_field(&f.cmd[f.ncalls - 1], "stmtId"));
    bson_destroy(&reply);
    fake_cleanup(&f);
}

SHL_TEST(which_shard_answers_a_router_retries)
{
    static const struct {
        const char *reply; /* NULL: a network error with 'code' */
        int code;
        bool want;
    } k_retriable[] = {
        {NULL, SHL_CODE_HOST_UNREACHABLE, true},
        {NULL, SHL_CODE_NETWORK_TIMEOUT, true},
        {NULL, SHL_CODE_SOCKET_EXCEPTION, true},
        {NULL, SHL_CODE_MAX_TIME_MS_EXPIRED, false},
        {NULL, SHL_CODE_INTERRUPTED, false},
        {"{'ok': 0, 'code': 91, 'errmsg': 'x'}", 0, true},
        {"{'ok': 0, 'code': 11600, 'errmsg': 'x'}", 0, true},
        {"{'ok': 0, 'code': 10107, 'errmsg': 'x'}", 0, true},
        {"{'ok': 0, 'code': 189, 'errmsg': 'x'}", 0, true},
        {"{'ok': 0, 'code': 262, 'errmsg': 'x'}", 0, true},
        {"{'ok': 0, 'code': 13388, 'errmsg': 'x'}", 0, false},
        {"{'ok': 0, 'code': 2, 'errmsg': 'x'}", 0, false},
        {"{'ok': 0, 'code': 64, 'errmsg': 'x'}", 0, false},
        {"{'ok': 1, 'n': 1}", 0, false},
        {"{'ok': 1, 'n': 1, 'writeConcernError': {'code': 91, 'errmsg': 'x'}}", 0, true},
        {"{'ok': 1, 'n': 1, 'writeConcernError': {'code': 64, 'errmsg': 'x'}}", 0, false},
        {"{'ok': 1, 'n': 0, 'writeErrors': [{'index': 0, 'code': 91, 'errmsg': 'x'}]}", 0, false},
    };
    for (size_t i = 0; i < sizeof(k_retriable) / sizeof(k_retriable[0]); i++) {
        shl_fanout_result_t res;
        memset(&res, 0, sizeof(res));
        if (k_retriable[i].reply == NULL) {
            bson_init(&res.reply);
            res.code = shl_status_set(&res.status, k_retriable[i].code, "x");
        } else {
            bson_t *r = shl_test_bson(k_retriable[i].reply);
            bson_copy_to(r, &res.reply);
            bson_destroy(r);
            res.code = shl_status_from_reply(&res.reply, &res.status);
        }
        if (shl_router_result_retriable(&res) != k_retriable[i].want) {
            shl_test_fail_here(__FILE__, __LINE__, "case %zu: want %d", i, k_retriable[i].want);
        }
        bson_destroy(&res.reply);
    }
    /* A request the operation's interruption cut off is not repeated. */
    {
        shl_fanout_result_t res;
        memset(&res, 0, sizeof(res));
        bson_init(&res.reply);
        res.code = shl_status_set(&res.status, SHL_CODE_HOST_UNREACHABLE, "x");
        res.interrupted = true;
        ASSERT(!shl_router_result_retriable(&res));
        bson_destroy(&res.reply);
    }
}

/* ------------------------------------------------- transactions over the fake shard */

static const shl_command_t k_cmd_insert = {.name = "insert", .flags = SHL_CMD_WRITE};
static const shl_command_t k_cmd_find = {.name = "find", .flags = SHL_CMD_SNAPSHOT_READ};
static const shl_command_t k_cmd_commit = {.name = "commitTransaction", .flags = SHL_CMD_IN_TXN};
static const shl_command_t k_cmd_abort = {.name = "abortTransaction", .flags = SHL_CMD_IN_TXN};
static const shl_command_t k_cmd_count = {.name = "count", .flags = 0};

/* One statement of a transaction: op, body, checkout. */
typedef struct txn_stmt {
    shl_op_ctx_t op;
    bson_t *body;
    int ret;
    shl_status_t st;
} txn_stmt_t;

/* Parse 'json' and begin it as a statement on catalog 'c' (at cluster time 100,1). */
static int
stmt_begin(fake_t *f, router_txn_catalog_t *c, txn_stmt_t *s, const shl_command_t *cmd,
           const char *json)
{
    memset(s, 0, sizeof(*s));
    shl_status_clear(&s->st);
    s->body = shl_test_bson(json);
    s->ret = shl_op_ctx_init(&s->op, &f->svc, NULL, s->body, "test", &s->st);
    if (s->ret == 0) {
        s->op.cmd_name = cmd->name;
        s->ret = router_txn_begin(c, &s->op, cmd, ((uint64_t)100 << 32) | 1, &s->st);
    }
    return s->ret;
}

static void
stmt_end(router_txn_catalog_t *c, txn_stmt_t *s)
{
    router_txn_release(c, &s->op);
    bson_destroy(s->body);
}

/* A find {find: 'c'} sent to 'shard' by the statement (what a routed read sends). */
static void
stmt_find(fake_t *f, txn_stmt_t *s, const char *shard)
{
    shl_router_request_t req;
    shl_fanout_result_t res;

    req.shard = shard;
    bson_init(&req.cmd);
    BSON_APPEND_UTF8(&req.cmd, "find", "c");
    shl_router_append_generic(s->body, &req.cmd);
    shl_router_send(&f->r, &s->op, "test", &req, 1, &res);
    shl_fanout_results_cleanup(&res, 1);
    bson_destroy(&req.cmd);
}

/* Run an insert/update/delete statement through the router's write path. */
static int
stmt_write(fake_t *f, txn_stmt_t *s, bson_t *reply)
{
    bson_init(reply);
    s->ret = router_write_run(&s->op, s->body, fake_route, f, reply, &s->st);
    s->ret = router_txn_end(&f->r, &s->op, s->ret, &s->st, s->ret == 0 ? reply : NULL);
    return s->ret;
}

/* {shard, cmd: first key, and the transaction fields} of call i. */
static bson_t *
call_txn(const fake_t *f, size_t i)
{
    static const char *const fields[] = {"txnNumber",   "autocommit",  "startTransaction",
                                         "readConcern", "coordinator", "participants",
                                         NULL};
    bson_t *out = bson_new();
    bson_iter_t it;

    BSON_APPEND_UTF8(out, "shard", f->shard[i]);
    BSON_APPEND_UTF8(out, "cmd", fake_cmd_name(&f->cmd[i]));
    for (size_t k = 0; fields[k] != NULL; k++) {
        if (bson_iter_init_find(&it, &f->cmd[i], fields[k])) {
            bson_append_iter(out, fields[k], -1, &it);
        }
    }
    return out;
}

#define ASSERT_TXN_CALL(f, i, json)                                                                \
    do {                                                                                           \
        bson_t *c_ = call_txn((f), (i));                                                           \
        ASSERT_BSON_EQ(c_, json);                                                                  \
        bson_destroy(c_);                                                                          \
    } while (0)

#define TXNF(n) TXN(n) ", 'autocommit': false"
#define TXN_START(n) TXNF(n) ", 'startTransaction': true"
#define TXN_N(n) "'txnNumber': {'$numberLong': '" #n "'}, 'autocommit': false"

/* The first statement to each participant carries startTransaction, the readConcern with the
 * atClusterTime chosen once, and coordinator on the first participant; later ones carry only
 * the session fields. Two writers commit by two-phase commit through the coordinator. */
SHL_TEST(txn_first_statement_fields_and_two_phase_commit)
{
    fake_t f;
    router_txn_catalog_t *c = router_txn_catalog_new();
    txn_stmt_t s;
    bson_t reply;
    const char *names[4];
    bool ro[4];

    fake_init(&f, true);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_insert,
                             "{'insert': 'c', 'documents': [{'_id': 1, 'x': -1}, {'_id': 2, 'x': "
                             "1}], 'readConcern': {'level': 'snapshot'}, " TXN_START(1) "}"),
                  0);
    ASSERT_INT_EQ(stmt_write(&f, &s, &reply), 0);
    ASSERT_INT_EQ(f.ncalls, 2);
    ASSERT_TXN_CALL(
        &f, 0,
        "{'shard': 'shA', 'cmd': 'insert', " TXN_N(
            1) ", 'startTransaction': true, 'readConcern': {'level': 'snapshot', "
               "'atClusterTime': {'$timestamp': {'t': 100, 'i': 1}}}, 'coordinator': true}");
    ASSERT_TXN_CALL(&f, 1,
                    "{'shard': 'shB', 'cmd': 'insert', " TXN_N(
                        1) ", 'startTransaction': true, 'readConcern': {'level': 'snapshot', "
                           "'atClusterTime': {'$timestamp': {'t': 100, 'i': 1}}}}");
    ASSERT_STR_EQ(router_txn_coordinator(s.op.txn), "shA");
    ASSERT_STR_EQ(router_txn_recovery_shard(s.op.txn), "shA");
    bson_destroy(&reply);
    stmt_end(c, &s);

    /* The next statement: the same participants, session fields only. */
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_insert,
                             "{'insert': 'c', 'documents': [{'_id': 3, 'x': 5}], " TXNF(1) "}"),
                  0);
    ASSERT_INT_EQ(stmt_write(&f, &s, &reply), 0);
    ASSERT_TXN_CALL(&f, 2, "{'shard': 'shB', 'cmd': 'insert', " TXN_N(1) "}");
    ASSERT_INT_EQ(router_txn_participants(s.op.txn, names, ro, 4), 2);
    ASSERT_STR_EQ(names[0], "shA");
    ASSERT_STR_EQ(names[1], "shB");
    ASSERT(!ro[0] && !ro[1]);
    bson_destroy(&reply);
    stmt_end(c, &s);

    /* Commit: coordinateCommitTransaction with both participants, to the coordinator only. */
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_commit, "{'commitTransaction': 1, " TXNF(1) "}"), 0);
    bson_init(&reply);
    ASSERT_INT_EQ(router_txn_commit(&f.r, &s.op, s.body, &reply, &s.st), 0);
    ASSERT_INT_EQ(router_txn_commit_type(s.op.txn), ROUTER_COMMIT_TWO_PHASE);
    ASSERT_INT_EQ(f.ncalls, 4);
    ASSERT_TXN_CALL(&f, 3,
                    "{'shard': 'shA', 'cmd': 'coordinateCommitTransaction', " TXN_N(
                        1) ", 'participants': [{'shardId': 'shA'}, {'shardId': 'shB'}]}");
    bson_destroy(&reply);
    stmt_end(c, &s);
    fake_cleanup(&f);
    router_txn_catalog_destroy(c);
}

/* Commit paths by participants: single write shard (read-only ones first), read-only, single
 * shard, none; and a second router committing with the recoveryToken. */
SHL_TEST(txn_commit_paths)
{
    fake_t f;
    router_txn_catalog_t *c = router_txn_catalog_new(), *c2 = router_txn_catalog_new();
    txn_stmt_t s;
    bson_t reply;

    fake_init(&f, true);
    /* txn 2: a read on shA, a write on shB. */
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_find, "{'find': 'c', " TXN_START(2) "}"), 0);
    stmt_find(&f, &s, "shA");
    stmt_end(c, &s);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_insert,
                             "{'insert': 'c', 'documents': [{'_id': 9, 'x': 9}], " TXNF(2) "}"),
                  0);
    ASSERT_INT_EQ(stmt_write(&f, &s, &reply), 0);
    ASSERT_TXN_CALL(&f, 1,
                    "{'shard': 'shB', 'cmd': 'insert', " TXN_N(2) ", 'startTransaction': true}");
    ASSERT_STR_EQ(router_txn_coordinator(s.op.txn), "shA");
    ASSERT_STR_EQ(router_txn_recovery_shard(s.op.txn), "shB");
    bson_destroy(&reply);
    stmt_end(c, &s);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_commit, "{'commitTransaction': 1, " TXNF(2) "}"), 0);
    bson_init(&reply);
    ASSERT_INT_EQ(router_txn_commit(&f.r, &s.op, s.body, &reply, &s.st), 0);
    ASSERT_INT_EQ(router_txn_commit_type(s.op.txn), ROUTER_COMMIT_SINGLE_WRITE);
    ASSERT_INT_EQ(f.ncalls, 4);
    ASSERT_TXN_CALL(&f, 2, "{'shard': 'shA', 'cmd': 'commitTransaction', " TXN_N(2) "}");
    ASSERT_TXN_CALL(&f, 3, "{'shard': 'shB', 'cmd': 'commitTransaction', " TXN_N(2) "}");
    bson_destroy(&reply);
    stmt_end(c, &s);

    /* txn 3: reads on both shards: each one commits. */
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_find, "{'find': 'c', " TXN_START(3) "}"), 0);
    stmt_find(&f, &s, "shA");
    stmt_find(&f, &s, "shB");
    ASSERT_STR_EQ(router_txn_recovery_shard(s.op.txn), "");
    stmt_end(c, &s);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_commit, "{'commitTransaction': 1, " TXNF(3) "}"), 0);
    bson_init(&reply);
    ASSERT_INT_EQ(router_txn_commit(&f.r, &s.op, s.body, &reply, &s.st), 0);
    ASSERT_INT_EQ(router_txn_commit_type(s.op.txn), ROUTER_COMMIT_READ_ONLY);
    ASSERT_INT_EQ(f.ncalls, 8);
    ASSERT_TXN_CALL(&f, 6, "{'shard': 'shA', 'cmd': 'commitTransaction', " TXN_N(3) "}");
    ASSERT_TXN_CALL(&f, 7, "{'shard': 'shB', 'cmd': 'commitTransaction', " TXN_N(3) "}");
    bson_destroy(&reply);
    stmt_end(c, &s);

    /* txn 4: one shard. */
    ASSERT_INT_EQ(
        stmt_begin(&f, c, &s, &k_cmd_insert,
                   "{'insert': 'c', 'documents': [{'_id': 7, 'x': -7}], " TXN_START(4) "}"),
        0);
    ASSERT_INT_EQ(stmt_write(&f, &s, &reply), 0);
    bson_destroy(&reply);
    stmt_end(c, &s);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_commit, "{'commitTransaction': 1, " TXNF(4) "}"), 0);
    bson_init(&reply);
    ASSERT_INT_EQ(router_txn_commit(&f.r, &s.op, s.body, &reply, &s.st), 0);
    ASSERT_INT_EQ(router_txn_commit_type(s.op.txn), ROUTER_COMMIT_SINGLE_SHARD);
    ASSERT_INT_EQ(f.ncalls, 10);
    ASSERT_TXN_CALL(&f, 9, "{'shard': 'shA', 'cmd': 'commitTransaction', " TXN_N(4) "}");
    bson_destroy(&reply);
    stmt_end(c, &s);

    /* txn 5: nothing sent: nothing to commit. */
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_find, "{'find': 'c', " TXN_START(5) "}"), 0);
    stmt_end(c, &s);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_commit, "{'commitTransaction': 1, " TXNF(5) "}"), 0);
    bson_init(&reply);
    ASSERT_INT_EQ(router_txn_commit(&f.r, &s.op, s.body, &reply, &s.st), 0);
    ASSERT_INT_EQ(router_txn_commit_type(s.op.txn), ROUTER_COMMIT_NO_SHARDS);
    ASSERT_INT_EQ(f.ncalls, 10);
    bson_destroy(&reply);
    stmt_end(c, &s);

    /* Another router (catalog c2) that never saw txn 2: its recoveryToken names the shard
     * to ask, which coordinates without a participant list. */
    ASSERT_INT_EQ(stmt_begin(&f, c2, &s, &k_cmd_commit,
                             "{'commitTransaction': 1, 'recoveryToken': {'recoveryShardId': "
                             "'shB'}, " TXNF(2) "}"),
                  0);
    bson_init(&reply);
    ASSERT_INT_EQ(router_txn_commit(&f.r, &s.op, s.body, &reply, &s.st), 0);
    ASSERT_INT_EQ(router_txn_commit_type(s.op.txn), ROUTER_COMMIT_RECOVER_TOKEN);
    ASSERT_TXN_CALL(
        &f, 10,
        "{'shard': 'shB', 'cmd': 'coordinateCommitTransaction', " TXN_N(2) ", 'participants': []}");
    bson_destroy(&reply);
    stmt_end(c2, &s);
    /* Without a token; with an empty one (a read-only transaction). */
    ASSERT_INT_EQ(stmt_begin(&f, c2, &s, &k_cmd_commit, "{'commitTransaction': 1, " TXNF(7) "}"),
                  0);
    bson_init(&reply);
    ASSERT_INT_EQ(router_txn_commit(&f.r, &s.op, s.body, &reply, &s.st), 50940);
    bson_destroy(&reply);
    stmt_end(c2, &s);
    ASSERT_INT_EQ(stmt_begin(&f, c2, &s, &k_cmd_commit,
                             "{'commitTransaction': 1, 'recoveryToken': {}, " TXNF(8) "}"),
                  0);
    bson_init(&reply);
    ASSERT_INT_EQ(router_txn_commit(&f.r, &s.op, s.body, &reply, &s.st),
                  SHL_CODE_NO_SUCH_TRANSACTION);
    ASSERT(s.st.labels & SHL_LABEL(TRANSIENT_TRANSACTION_ERROR));
    bson_destroy(&reply);
    stmt_end(c2, &s);
    ASSERT_INT_EQ(f.ncalls, 11);
    fake_cleanup(&f);
    router_txn_catalog_destroy(c);
    router_txn_catalog_destroy(c2);
}

/* mongos's begin/continue rules and the commands refused in a transaction. */
SHL_TEST(txn_begin_rules)
{
    fake_t f;
    router_txn_catalog_t *c = router_txn_catalog_new();
    txn_stmt_t s;
    bson_t reply;

    fake_init(&f, true);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_find, "{'find': 'c', " TXNF(3) "}"),
                  SHL_CODE_NO_SUCH_TRANSACTION);
    ASSERT(s.st.labels & SHL_LABEL(TRANSIENT_TRANSACTION_ERROR));
    stmt_end(c, &s);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_find, "{'find': 'c', " TXN_START(3) "}"), 0);
    stmt_end(c, &s);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_find, "{'find': 'c', " TXN_START(3) "}"),
                  SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS);
    stmt_end(c, &s);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_find, "{'find': 'c', " TXN_START(2) "}"),
                  SHL_CODE_TRANSACTION_TOO_OLD);
    stmt_end(c, &s);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_find,
                             "{'find': 'c', 'readConcern': {'level': 'local'}, " TXNF(3) "}"),
                  SHL_CODE_INVALID_OPTIONS);
    stmt_end(c, &s);
    ASSERT_INT_EQ(
        stmt_begin(&f, c, &s, &k_cmd_insert,
                   "{'insert': 'c', 'documents': [], 'writeConcern': {'w': 1}, " TXNF(3) "}"),
        SHL_CODE_INVALID_OPTIONS);
    stmt_end(c, &s);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_count, "{'count': 'c', " TXNF(3) "}"),
                  SHL_CODE_OPERATION_NOT_SUPPORTED_IN_TRANSACTION);
    stmt_end(c, &s);
    ASSERT_INT_EQ(
        stmt_begin(&f, c, &s, &k_cmd_find, "{'find': 'c', " TXN(3) ", 'autocommit': true}"),
        SHL_CODE_INVALID_OPTIONS);
    stmt_end(c, &s);
    /* abortTransaction of a transaction that reached no shard. */
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_abort, "{'abortTransaction': 1, " TXNF(3) "}"), 0);
    bson_init(&reply);
    ASSERT_INT_EQ(router_txn_abort(&f.r, &s.op, s.body, &reply, &s.st),
                  SHL_CODE_NO_SUCH_TRANSACTION);
    bson_destroy(&reply);
    stmt_end(c, &s);
    ASSERT_INT_EQ(f.ncalls, 0);
    fake_cleanup(&f);
    router_txn_catalog_destroy(c);
}

/* A failed statement aborts the transaction on every participant, with
 * TransientTransactionError where MongoDB puts it; abortTransaction reaches every participant. */
SHL_TEST(txn_implicit_abort_and_labels)
{
    fake_t f;
    router_txn_catalog_t *c = router_txn_catalog_new();
    txn_stmt_t s;
    bson_t reply;

    fake_init(&f, true);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_insert,
                             "{'insert': 'c', 'documents': [{'_id': 1, 'x': -1}, {'_id': 2, 'x': "
                             "1}], " TXN_START(1) "}"),
                  0);
    ASSERT_INT_EQ(stmt_write(&f, &s, &reply), 0);
    bson_destroy(&reply);
    stmt_end(c, &s);
    ASSERT_INT_EQ(f.ncalls, 2);
    /* A command error (as a shard's WriteConflict reaches the router's statement). */
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_find, "{'find': 'c', " TXNF(1) "}"), 0);
    s.ret = shl_status_set(&s.st, SHL_CODE_WRITE_CONFLICT, "injected");
    ASSERT_INT_EQ(router_txn_end(&f.r, &s.op, s.ret, &s.st, NULL), SHL_CODE_WRITE_CONFLICT);
    ASSERT(s.st.labels & SHL_LABEL(TRANSIENT_TRANSACTION_ERROR));
    stmt_end(c, &s);
    ASSERT_INT_EQ(f.ncalls, 4);
    ASSERT_TXN_CALL(&f, 2, "{'shard': 'shA', 'cmd': 'abortTransaction', " TXN_N(1) "}");
    ASSERT_TXN_CALL(&f, 3, "{'shard': 'shB', 'cmd': 'abortTransaction', " TXN_N(1) "}");
    /* A non-transient error: aborted, no label. */
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_find, "{'find': 'c', " TXNF(1) "}"), 0);
    s.ret = shl_status_set(&s.st, SHL_CODE_BAD_VALUE, "injected");
    ASSERT_INT_EQ(router_txn_end(&f.r, &s.op, s.ret, &s.st, NULL), SHL_CODE_BAD_VALUE);
    ASSERT(!(s.st.labels & SHL_LABEL(TRANSIENT_TRANSACTION_ERROR)));
    stmt_end(c, &s);
    ASSERT_INT_EQ(f.ncalls, 6);
    /* An explicit abort. */
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_abort, "{'abortTransaction': 1, " TXNF(1) "}"), 0);
    bson_init(&reply);
    ASSERT_INT_EQ(router_txn_abort(&f.r, &s.op, s.body, &reply, &s.st), 0);
    bson_destroy(&reply);
    stmt_end(c, &s);
    ASSERT_INT_EQ(f.ncalls, 8);
    ASSERT_TXN_CALL(&f, 6, "{'shard': 'shA', 'cmd': 'abortTransaction', " TXN_N(1) "}");
    ASSERT_TXN_CALL(&f, 7, "{'shard': 'shB', 'cmd': 'abortTransaction', " TXN_N(1) "}");
    /* A commit's network error: UnknownTransactionCommitResult. */
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_commit, "{'commitTransaction': 1, " TXNF(1) "}"), 0);
    fake_fault(&f, "shA", FAULT_NETWORK, SHL_CODE_HOST_UNREACHABLE, 1, 0);
    bson_init(&reply);
    ASSERT_INT_EQ(router_txn_commit(&f.r, &s.op, s.body, &reply, &s.st), SHL_CODE_HOST_UNREACHABLE);
    ASSERT(s.st.labels & SHL_LABEL(UNKNOWN_TRANSACTION_COMMIT_RESULT));
    bson_destroy(&reply);
    stmt_end(c, &s);
    /* A commit whose write concern failed: ok, with the writeConcernError and the label. */
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_commit, "{'commitTransaction': 1, " TXNF(1) "}"), 0);
    fake_fault(&f, "shA", FAULT_WCE, 64, 1, 0);
    bson_init(&reply);
    ASSERT_INT_EQ(router_txn_commit(&f.r, &s.op, s.body, &reply, &s.st), 0);
    ASSERT_BSON_EQ(&reply, "{'writeConcernError': {'code': 64, 'errmsg': 'injected'}, "
                           "'errorLabels': ['UnknownTransactionCommitResult']}");
    bson_destroy(&reply);
    stmt_end(c, &s);
    fake_cleanup(&f);
    router_txn_catalog_destroy(c);
}

/* A stale error on the statement that started every participant it reached is retried (those
 * participants aborted and started again); on a later statement it is not. */
SHL_TEST(txn_stale_retry_only_on_new_participants)
{
    fake_t f;
    router_txn_catalog_t *c = router_txn_catalog_new();
    txn_stmt_t s;
    bson_t reply;

    fake_init(&f, true);
    fake_fault(&f, "shB", FAULT_REPLY, SHL_CODE_STALE_CONFIG, 1, 0);
    ASSERT_INT_EQ(
        stmt_begin(&f, c, &s, &k_cmd_insert,
                   "{'insert': 'c', 'documents': [{'_id': 2, 'x': 1}], " TXN_START(1) "}"),
        0);
    ASSERT_INT_EQ(stmt_write(&f, &s, &reply), 0);
    ASSERT_BSON_EQ(&reply, "{'n': 1}");
    bson_destroy(&reply);
    ASSERT_INT_EQ(f.ncalls, 3);
    ASSERT_TXN_CALL(&f, 1, "{'shard': 'shB', 'cmd': 'abortTransaction', " TXN_N(1) "}");
    ASSERT_TXN_CALL(&f, 2,
                    "{'shard': 'shB', 'cmd': 'insert', " TXN_N(
                        1) ", 'startTransaction': true, 'coordinator': true}");
    stmt_end(c, &s);
    /* Later statement, stale on the existing participant: not retried. */
    fake_fault(&f, "shB", FAULT_REPLY, SHL_CODE_STALE_CONFIG, 1, 0);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_insert,
                             "{'insert': 'c', 'documents': [{'_id': 3, 'x': 2}], " TXNF(1) "}"),
                  0);
    /* The statement fails with the stale error itself, labelled. */
    ASSERT_INT_EQ(stmt_write(&f, &s, &reply), SHL_CODE_STALE_CONFIG);
    ASSERT(s.st.labels & SHL_LABEL(TRANSIENT_TRANSACTION_ERROR));
    bson_destroy(&reply);
    stmt_end(c, &s);
    /* The stale insert, then only the implicit abort: no second insert. */
    ASSERT_TXN_CALL(&f, 3, "{'shard': 'shB', 'cmd': 'insert', " TXN_N(1) "}");
    for (size_t i = 4; i < f.ncalls; i++) {
        ASSERT_STR_EQ(fake_cmd_name(&f.cmd[i]), "abortTransaction");
    }
    ASSERT(f.ncalls >= 5);
    fake_cleanup(&f);
    router_txn_catalog_destroy(c);
}

typedef struct second_stmt {
    fake_t *f;
    router_txn_catalog_t *c;
    txn_stmt_t s;
    atomic_bool began;
} second_stmt_t;

static void *
second_stmt_run(void *arg)
{
    second_stmt_t *w = arg;

    (void)stmt_begin(w->f, w->c, &w->s, &k_cmd_find, "{'find': 'c', " TXNF(1) "}");
    atomic_store(&w->began, true);
    return NULL;
}

/* A second statement on the same session waits until the first one checked the state in. */
SHL_TEST(txn_statements_of_one_session_run_one_at_a_time)
{
    fake_t f;
    router_txn_catalog_t *c = router_txn_catalog_new();
    txn_stmt_t s;
    second_stmt_t w;
    pthread_t th;

    fake_init(&f, true);
    ASSERT_INT_EQ(stmt_begin(&f, c, &s, &k_cmd_find, "{'find': 'c', " TXN_START(1) "}"), 0);
    memset(&w, 0, sizeof(w));
    w.f = &f;
    w.c = c;
    atomic_init(&w.began, false);
    ASSERT_INT_EQ(pthread_create(&th, NULL, second_stmt_run, &w), 0);
    shl_sleep_ms(200); /* the absence of progress: nothing to await */
    ASSERT(!atomic_load(&w.began));
    stmt_end(c, &s);
    ASSERT_INT_EQ(pthread_join(th, NULL), 0);
    ASSERT(atomic_load(&w.began));
    ASSERT_INT_EQ(w.s.ret, 0);
    stmt_end(c, &w.s);
    fake_cleanup(&f);
    router_txn_catalog_destroy(c);
}

/* ------------------------------------------------- the transaction API over the fake shard */

typedef struct api_arg {
    fake_t *f;
    int calls;
} api_arg_t;

/* The callback: one insert reaching both shards. */
static int
api_insert_both(shl_op_ctx_t *op, void *arg, shl_status_t *st)
{
    api_arg_t *a = arg;
    bson_t *cmd = shl_test_bson("{'insert': 'c', 'documents': [{'_id': 1, 'x': -1}, "
                                "{'_id': 2, 'x': 1}]}");
    bson_t reply = BSON_INITIALIZER;
    int ret;

    a->calls++;
    bson_destroy(&reply);
    ret = router_write_run(op, cmd, fake_route, a->f, &reply, st);
    if (ret == 0) {
        ret = router_txn_api_reply_error(&reply, st);
    }
    bson_destroy(&reply);
    bson_destroy(cmd);
    return ret;
}

/* The lsid of call i: the user's id, with txnUUID (and the parent's txnNumber). */
static void
check_child_lsid(const fake_t *f, size_t i, int64_t parent_txn, uint8_t uuid[16])
{
    bson_iter_t it, l;
    bson_subtype_t sub;
    uint32_t len;
    const uint8_t *data;

    ASSERT(bson_iter_init_find(&it, &f->cmd[i], "lsid") && bson_iter_recurse(&it, &l));
    ASSERT(bson_iter_find(&l, "id"));
    bson_iter_binary(&l, &sub, &len, &data);
    ASSERT(len == 16 && data[0] == 0 && data[15] == 15);
    ASSERT(bson_iter_recurse(&it, &l) && bson_iter_find(&l, "txnNumber"));
    ASSERT(bson_iter_int64(&l) == parent_txn);
    ASSERT(bson_iter_recurse(&it, &l) && bson_iter_find(&l, "txnUUID"));
    bson_iter_binary(&l, &sub, &len, &data);
    ASSERT(sub == BSON_SUBTYPE_UUID && len == 16);
    if (uuid[0] == 0 && uuid[1] == 0 && uuid[2] == 0 && uuid[3] == 0) {
        memcpy(uuid, data, 16);
    }
    ASSERT(memcmp(uuid, data, 16) == 0);
}

/* A retryable write's internal transaction: a child session {id, uid, txnNumber: the
 * user's, txnUUID}, transaction number 0; a transient write error aborts both participants
 * and the attempt runs again as transaction 1, which commits by two-phase commit. The
 * operation's own fields are back afterwards. */
SHL_TEST(txn_api_runs_on_a_child_session_and_retries_transient_errors)
{
    fake_t f;
    api_arg_t a = {&f, 0};
    bson_t *body = shl_test_bson("{'insert': 'c', 'documents': [{'x': 1}], " TXN(5) "}");
    shl_op_ctx_t op;
    shl_status_t st = SHL_STATUS_INIT;
    uint8_t uuid[16] = {0};

    fake_init(&f, true);
    ASSERT_INT_EQ(shl_op_ctx_init(&op, &f.svc, NULL, body, "test", &st), 0);
    fake_fault(&f, "shB", FAULT_REPLY, SHL_CODE_WRITE_CONFLICT, 1, 0);
    ASSERT_INT_EQ(router_txn_api_run(&op, body, api_insert_both, &a, &st), 0);
    ASSERT_INT_EQ(a.calls, 2);
    ASSERT(op.txn == NULL && !op.has_autocommit && op.txn_number == 5);
    /* Attempt 0: both inserts, then the implicit abort of both participants. */
    ASSERT_TXN_CALL(&f, 0,
                    "{'shard': 'shA', 'cmd': 'insert', " TXN_N(
                        0) ", 'startTransaction': true, 'coordinator': true}");
    ASSERT_TXN_CALL(&f, 1,
                    "{'shard': 'shB', 'cmd': 'insert', " TXN_N(0) ", 'startTransaction': true}");
    ASSERT_TXN_CALL(&f, 2, "{'shard': 'shA', 'cmd': 'abortTransaction', " TXN_N(0) "}");
    ASSERT_TXN_CALL(&f, 3, "{'shard': 'shB', 'cmd': 'abortTransaction', " TXN_N(0) "}");
    /* Attempt 1 commits through the coordinator. */
    ASSERT_TXN_CALL(&f, 4,
                    "{'shard': 'shA', 'cmd': 'insert', " TXN_N(
                        1) ", 'startTransaction': true, 'coordinator': true}");
    ASSERT_TXN_CALL(&f, 5,
                    "{'shard': 'shB', 'cmd': 'insert', " TXN_N(1) ", 'startTransaction': true}");
    ASSERT_TXN_CALL(&f, 6,
                    "{'shard': 'shA', 'cmd': 'coordinateCommitTransaction', " TXN_N(
                        1) ", 'participants': [{'shardId': 'shA'}, {'shardId': 'shB'}]}");
    ASSERT_INT_EQ(f.ncalls, 7);
    for (size_t i = 0; i < f.ncalls; i++) {
        check_child_lsid(&f, i, 5, uuid);
        ASSERT(!bson_has_field(&f.cmd[i], "stmtIds"));
    }
    bson_destroy(body);
    fake_cleanup(&f);
}

/* A non-transient error aborts and is returned once, without the transaction's labels. */
SHL_TEST(txn_api_returns_other_errors_without_retrying)
{
    fake_t f;
    api_arg_t a = {&f, 0};
    bson_t *body = shl_test_bson("{'insert': 'c', 'documents': [{'x': 1}]}");
    shl_op_ctx_t op;
    shl_status_t st = SHL_STATUS_INIT;

    fake_init(&f, true);
    ASSERT_INT_EQ(shl_op_ctx_init(&op, &f.svc, NULL, body, "test", &st), 0);
    fake_fault(&f, "shB", FAULT_WRITE_ERROR, SHL_CODE_DUPLICATE_KEY, 1, 0);
    ASSERT_INT_EQ(router_txn_api_run(&op, body, api_insert_both, &a, &st), SHL_CODE_DUPLICATE_KEY);
    ASSERT_INT_EQ(a.calls, 1);
    ASSERT_INT_EQ((int)st.labels, 0);
    ASSERT_TXN_CALL(&f, 2, "{'shard': 'shA', 'cmd': 'abortTransaction', " TXN_N(0) "}");
    ASSERT_INT_EQ(f.ncalls, 4);
    bson_destroy(body);
    fake_cleanup(&f);
}
