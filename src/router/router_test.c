/*
 * router_test.c -- the router's pure parts: how an aggregation pipeline is split into a
 * shards part and a merger part (table-driven: pipeline -> expected parts).
 */
#include <string.h>

#include "base/options.h"
#include "base/unit_test.h"
#include "net/service_context.h"
#include "router/router_private.h"

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
