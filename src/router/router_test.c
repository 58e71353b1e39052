/*
 * router_test.c -- the router's pure parts: how an aggregation pipeline is split into a
 * shards part and a merger part (table-driven: pipeline -> expected parts).
 */
#include <string.h>

#include "base/unit_test.h"
#include "router/router_private.h"

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
    /* $skip cannot be pushed down. */
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
