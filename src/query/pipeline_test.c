/*
 * pipeline_test.c -- table-driven cases for the aggregation pipeline engine: (input
 * documents, pipeline, expected output documents or error code), run over an in-memory
 * source.
 */
#include <string.h>

#include "base/unit_test.h"
#include "query/pipeline.h"

typedef struct pcase {
    const char *in;   /* {'d': [docs]} */
    const char *pipe; /* {'p': [stages]} */
    const char *want; /* {'r': [docs]} */
    int code;
} pcase_t;

static const pcase_t cases[] = {
    /* $match / $project / $addFields / $set / $unset */
    {"{'d': [{'a': 1}, {'a': 2}, {'a': 3}]}", "{'p': [{'$match': {'a': {'$gte': 2}}}]}",
     "{'r': [{'a': 2}, {'a': 3}]}", 0},
    {"{'d': [{'_id': 1, 'a': 1, 'b': 2}]}", "{'p': [{'$project': {'b': 1}}]}",
     "{'r': [{'_id': 1, 'b': 2}]}", 0},
    {"{'d': [{'_id': 1, 'a': 1, 'b': 2}]}",
     "{'p': [{'$project': {'_id': 0, 'c': {'$add': ['$a', '$b']}}}]}", "{'r': [{'c': 3}]}", 0},
    {"{'d': [{'_id': 1, 'a': 1}]}", "{'p': [{'$addFields': {'b': {'$add': ['$a', 1]}}}]}",
     "{'r': [{'_id': 1, 'a': 1, 'b': 2}]}", 0},
    {"{'d': [{'_id': 1, 'a': 1}]}", "{'p': [{'$set': {'a': 5}}]}", "{'r': [{'_id': 1, 'a': 5}]}",
     0},
    {"{'d': [{'_id': 1, 'a': 1, 'b': 2}]}", "{'p': [{'$unset': 'a'}]}",
     "{'r': [{'_id': 1, 'b': 2}]}", 0},
    {"{'d': [{'_id': 1, 'a': 1, 'b': 2}]}", "{'p': [{'$unset': ['a', 'b']}]}",
     "{'r': [{'_id': 1}]}", 0},
    /* $group and accumulators */
    {"{'d': [{'k': 'x', 'v': 1}, {'k': 'y', 'v': 2}, {'k': 'x', 'v': 3}]}",
     "{'p': [{'$group': {'_id': '$k', 's': {'$sum': '$v'}, 'n': {'$count': {}}}}]}",
     "{'r': [{'_id': 'x', 's': 4, 'n': 2}, {'_id': 'y', 's': 2, 'n': 1}]}", 0},
    {"{'d': [{'v': 1}, {'v': 2.5}, {'v': 'str'}, {}]}",
     "{'p': [{'$group': {'_id': null, 's': {'$sum': '$v'}, 'a': {'$avg': '$v'}}}]}",
     "{'r': [{'_id': null, 's': 3.5, 'a': 1.75}]}", 0},
    {"{'d': [{'v': {'$numberLong': '5'}}, {'v': 1}]}",
     "{'p': [{'$group': {'_id': 1, 's': {'$sum': '$v'}}}]}",
     "{'r': [{'_id': 1, 's': {'$numberLong': '6'}}]}", 0},
    {"{'d': [{'v': 2147483647}, {'v': 1}]}", "{'p': [{'$group': {'_id': 1, 's': {'$sum': '$v'}}}]}",
     "{'r': [{'_id': 1, 's': {'$numberLong': '2147483648'}}]}", 0},
    {"{'d': [{'v': 3}, {'v': null}, {'v': 1}, {}, {'v': 'a'}]}",
     "{'p': [{'$group': {'_id': 0, 'mn': {'$min': '$v'}, 'mx': {'$max': '$v'}}}]}",
     "{'r': [{'_id': 0, 'mn': 1, 'mx': 'a'}]}", 0},
    {"{'d': [{}, {'v': 2}, {'v': 3}]}",
     "{'p': [{'$group': {'_id': 0, 'f': {'$first': '$v'}, 'l': {'$last': '$v'}, 'mn': {'$min': "
     "'$z'}}}]}",
     "{'r': [{'_id': 0, 'f': null, 'l': 3, 'mn': null}]}", 0},
    {"{'d': [{'v': 1}, {}, {'v': 1}, {'v': 2}]}",
     "{'p': [{'$group': {'_id': 0, 'p': {'$push': '$v'}, 's': {'$addToSet': '$v'}}}]}",
     "{'r': [{'_id': 0, 'p': [1, 1, 2], 's': [1, 2]}]}", 0},
    {"{'d': [{'k': 1}, {'k': 1.0}, {}, {'k': null}]}",
     "{'p': [{'$group': {'_id': '$k', 'n': {'$sum': 1}}}]}",
     "{'r': [{'_id': 1, 'n': 2}, {'_id': null, 'n': 2}]}", 0},
    {"{'d': [{'a': 1, 'b': 2}, {'a': 1, 'b': 2}]}",
     "{'p': [{'$group': {'_id': {'x': '$a', 'y': '$b'}, 'n': {'$sum': 1}}}]}",
     "{'r': [{'_id': {'x': 1, 'y': 2}, 'n': 2}]}", 0},
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'n': {'$sum': 1}}}]}", "{'r': []}", 0},
    {"{'d': []}", "{'p': [{'$group': {'n': {'$sum': 1}}}]}", "{'r': []}", 15955},
    {"{'d': []}", "{'p': [{'$group': {'_id': 1, 'n': {'$bogus': 1}}}]}", "{'r': []}", 15952},
    {"{'d': []}", "{'p': [{'$group': {'_id': 1, 'n': 1}}]}", "{'r': []}", 40234},
    /* accumulators: $stdDevPop $stdDevSamp $mergeObjects $top $bottom $topN $bottomN $firstN
     * $lastN $maxN $minN */
    {"{'d': [{'v': 1}, {'v': 2}, {'v': 3}, {'v': 4}, {'v': 'x'}, {}]}",
     "{'p': [{'$group': {'_id': null, 'p': {'$stdDevPop': '$v'}, 's': {'$stdDevSamp': '$v'}}}]}",
     "{'r': [{'_id': null, 'p': 1.118033988749895, 's': 1.2909944487358056}]}", 0},
    {"{'d': [{'v': 1}, {'v': 'x'}]}",
     "{'p': [{'$group': {'_id': null, 'p': {'$stdDevPop': '$v'}, 's': {'$stdDevSamp': '$v'}}}]}",
     "{'r': [{'_id': null, 'p': 0.0, 's': null}]}", 0},
    {"{'d': [{'o': {'a': 1, 'b': 1}}, {'o': null}, {}, {'o': {'b': 2, 'c': 3}}]}",
     "{'p': [{'$group': {'_id': null, 'm': {'$mergeObjects': '$o'}}}]}",
     "{'r': [{'_id': null, 'm': {'a': 1, 'b': 2, 'c': 3}}]}", 0},
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'm': {'$mergeObjects': '$o'}}}]}",
     "{'r': []}", 0},
    {"{'d': [{'o': 5}]}", "{'p': [{'$group': {'_id': null, 'm': {'$mergeObjects': '$o'}}}]}",
     "{'r': []}", 40400},
    {"{'d': [{'k': 1, 's': 3, 'v': 'a'}, {'k': 1, 's': 1, 'v': 'b'}, {'k': 1, 's': 2}, {'k': 2, "
     "'s': 0, 'v': 'z'}]}",
     "{'p': [{'$group': {'_id': '$k', 't': {'$top': {'output': '$v', 'sortBy': {'s': 1}}}, 'b': "
     "{'$bottom': {'output': '$v', 'sortBy': {'s': 1}}}, 'tn': {'$topN': {'n': 2, 'output': '$v', "
     "'sortBy': {'s': -1}}}, 'bn': {'$bottomN': {'n': 2, 'output': ['$v', '$s'], 'sortBy': {'s': "
     "-1}}}}}]}",
     "{'r': [{'_id': 1, 't': 'b', 'b': 'a', 'tn': ['a', null], 'bn': [[null, 2], ['b', 1]]}, "
     "{'_id': 2, 't': 'z', 'b': 'z', 'tn': ['z'], 'bn': [['z', 0]]}]}",
     0},
    {"{'d': [{'v': 3}, {'v': null}, {'v': 1}, {}, {'v': 5}, {'v': 2}]}",
     "{'p': [{'$group': {'_id': null, 'f': {'$firstN': {'input': '$v', 'n': 3}}, 'l': {'$lastN': "
     "{'input': '$v', 'n': 2}}, 'mx': {'$maxN': {'input': '$v', 'n': 2}}, 'mn': {'$minN': "
     "{'input': '$v', 'n': 10}}}}]}",
     "{'r': [{'_id': null, 'f': [3, null, 1], 'l': [5, 2], 'mx': [5, 3], 'mn': [1, 2, 3, 5]}]}", 0},
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'f': {'$firstN': {'input': '$v', 'n': 0}}}}]}",
     "{'r': []}", 5787908},
    {"{'d': []}",
     "{'p': [{'$group': {'_id': null, 'f': {'$firstN': {'input': '$v', 'n': 1.5}}}}]}",
     "{'r': []}", 5787903},
    {"{'d': []}",
     "{'p': [{'$group': {'_id': null, 'f': {'$firstN': {'input': '$v', 'n': 'a'}}}}]}",
     "{'r': []}", 5787902},
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'f': {'$lastN': {'input': '$v'}}}}]}",
     "{'r': []}", 5787906},
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'f': {'$maxN': {'n': 2}}}}]}", "{'r': []}",
     5787907},
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'f': {'$minN': [1]}}}]}", "{'r': []}",
     5787900},
    {"{'d': []}",
     "{'p': [{'$group': {'_id': null, 'f': {'$firstN': {'input': '$v', 'n': 1, 'x': 1}}}}]}",
     "{'r': []}", 5787901},
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'f': {'$top': {'output': '$v'}}}}]}",
     "{'r': []}", 5788005},
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'f': {'$top': {'sortBy': {'a': 1}}}}}]}",
     "{'r': []}", 5788004},
    {"{'d': []}",
     "{'p': [{'$group': {'_id': null, 'f': {'$top': {'n': 1, 'output': 1, 'sortBy': {'a': "
     "1}}}}}]}",
     "{'r': []}", 5788002},
    {"{'d': []}",
     "{'p': [{'$group': {'_id': null, 'f': {'$topN': {'output': 1, 'sortBy': {'a': 1}}}}}]}",
     "{'r': []}", 5788003},
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'f': {'$bottom': 1}}}]}", "{'r': []}", 5788001},
    /* $sort / $limit / $skip */
    {"{'d': [{'a': 2}, {'a': 3}, {'a': 1}]}", "{'p': [{'$sort': {'a': -1}}]}",
     "{'r': [{'a': 3}, {'a': 2}, {'a': 1}]}", 0},
    {"{'d': [{'a': 2}, {'a': 3}, {'a': 1}, {'a': 0}]}",
     "{'p': [{'$sort': {'a': 1}}, {'$limit': 2}]}", "{'r': [{'a': 0}, {'a': 1}]}", 0},
    {"{'d': [{'a': 2}, {'a': 3}, {'a': 1}, {'a': 0}]}",
     "{'p': [{'$sort': {'a': 1}}, {'$skip': 1}, {'$limit': 2}]}", "{'r': [{'a': 1}, {'a': 2}]}", 0},
    {"{'d': []}", "{'p': [{'$limit': 0}]}", "{'r': []}", 15958},
    {"{'d': []}", "{'p': [{'$limit': 'x'}]}", "{'r': []}", 15957},
    {"{'d': []}", "{'p': [{'$skip': -1}]}", "{'r': []}", 15956},
    {"{'d': []}", "{'p': [{'$sort': {}}]}", "{'r': []}", 15976},
    /* $count / $sortByCount */
    {"{'d': [{'a': 1}, {'a': 2}]}", "{'p': [{'$count': 'n'}]}", "{'r': [{'n': 2}]}", 0},
    {"{'d': []}", "{'p': [{'$count': 'n'}]}", "{'r': []}", 0},
    {"{'d': []}", "{'p': [{'$count': ''}]}", "{'r': []}", 40157},
    {"{'d': []}", "{'p': [{'$count': '$n'}]}", "{'r': []}", 40158},
    {"{'d': []}", "{'p': [{'$count': 'a.b'}]}", "{'r': []}", 40160},
    {"{'d': []}", "{'p': [{'$count': 1}]}", "{'r': []}", 40156},
    {"{'d': [{'a': 'x'}, {'a': 'y'}, {'a': 'y'}]}", "{'p': [{'$sortByCount': '$a'}]}",
     "{'r': [{'_id': 'y', 'count': 2}, {'_id': 'x', 'count': 1}]}", 0},
    {"{'d': []}", "{'p': [{'$sortByCount': 'a'}]}", "{'r': []}", 40148},
    /* $unwind */
    {"{'d': [{'_id': 1, 'a': [1, 2]}, {'_id': 2, 'a': []}, {'_id': 3}, {'_id': 4, 'a': 5}]}",
     "{'p': [{'$unwind': '$a'}]}",
     "{'r': [{'_id': 1, 'a': 1}, {'_id': 1, 'a': 2}, {'_id': 4, 'a': 5}]}", 0},
    {"{'d': [{'_id': 1, 'a': [1, 2]}, {'_id': 2, 'a': []}, {'_id': 3}, {'_id': 4, 'a': null}]}",
     "{'p': [{'$unwind': {'path': '$a', 'includeArrayIndex': 'i', 'preserveNullAndEmptyArrays': "
     "true}}]}",
     "{'r': [{'_id': 1, 'a': 1, 'i': {'$numberLong': '0'}}, {'_id': 1, 'a': 2, 'i': "
     "{'$numberLong': '1'}}, "
     "{'_id': 2, 'i': null}, {'_id': 3, 'i': null}, {'_id': 4, 'a': null, 'i': null}]}",
     0},
    {"{'d': [{'_id': 1, 'x': {'a': [1, 2], 'b': 0}}]}", "{'p': [{'$unwind': '$x.a'}]}",
     "{'r': [{'_id': 1, 'x': {'a': 1, 'b': 0}}, {'_id': 1, 'x': {'a': 2, 'b': 0}}]}", 0},
    {"{'d': []}", "{'p': [{'$unwind': 'a'}]}", "{'r': []}", 28818},
    {"{'d': []}", "{'p': [{'$unwind': {'path': '$a', 'bogus': 1}}]}", "{'r': []}", 28811},
    /* $replaceRoot / $replaceWith */
    {"{'d': [{'a': {'b': 1}}]}", "{'p': [{'$replaceRoot': {'newRoot': '$a'}}]}",
     "{'r': [{'b': 1}]}", 0},
    {"{'d': [{'a': 1}]}", "{'p': [{'$replaceWith': {'x': '$a'}}]}", "{'r': [{'x': 1}]}", 0},
    {"{'d': [{'a': 1}]}", "{'p': [{'$replaceWith': '$a'}]}", "{'r': []}", 40228},
    /* composition and errors */
    {"{'d': [{'t': ['a', 'b']}, {'t': ['b']}]}",
     "{'p': [{'$unwind': '$t'}, {'$group': {'_id': '$t', 'n': {'$sum': 1}}}, {'$sort': {'n': -1, "
     "'_id': 1}}, {'$limit': 1}]}",
     "{'r': [{'_id': 'b', 'n': 2}]}", 0},
    {"{'d': []}", "{'p': [{'$bogus': {}}]}", "{'r': []}", 40324},
    {"{'d': []}", "{'p': [{'$match': {}, '$limit': 1}]}", "{'r': []}", 40323},
};

typedef struct arrsrc {
    bson_iter_t it;
    bson_t cur;
} arrsrc_t;

static int
arr_next(void *arg, const bson_t **doc, shl_status_t *st)
{
    arrsrc_t *a = arg;
    const uint8_t *data;
    uint32_t len;

    (void)st;
    if (!bson_iter_next(&a->it)) {
        *doc = NULL;
        return 0;
    }
    bson_iter_document(&a->it, &len, &data);
    bson_init_static(&a->cur, data, len);
    *doc = &a->cur;
    return 0;
}

/* Run 'pipe' over 'in'; fills 'res' {'r': [...]} and returns the error code. */
static int
run_case(const char *in_json, const char *pipe_json, bson_t *res, shl_status_t *st)
{
    bson_t *in = shl_test_bson(in_json), *pj = shl_test_bson(pipe_json);
    bson_iter_t it, p;
    bson_t stages, arr;
    const uint8_t *data;
    uint32_t len;
    shl_pipeline_t *pl = NULL;
    arrsrc_t src;
    int ret = 0, i = 0;

    bson_iter_init_find(&p, pj, "p");
    bson_iter_array(&p, &len, &data);
    bson_init_static(&stages, data, len);
    bson_iter_init_find(&it, in, "d");
    bson_iter_recurse(&it, &src.it);
    bson_init(res);
    BSON_APPEND_ARRAY_BEGIN(res, "r", &arr);
    SHL_ERR(shl_pipeline_parse(&stages, NULL, &pl, st));
    shl_pipeline_set_source(pl, &(shl_pipeline_source_t){arr_next, &src});
    for (;;) {
        const bson_t *d;
        SHL_ERR(shl_pipeline_next(pl, &d, st));
        if (d == NULL) {
            break;
        }
        char k[16];
        const char *kp;
        bson_uint32_to_string((uint32_t)i++, &kp, k, sizeof(k));
        BSON_APPEND_DOCUMENT(&arr, kp, d);
    }
done:
    bson_append_array_end(res, &arr);
    shl_pipeline_destroy(pl);
    bson_destroy(in);
    bson_destroy(pj);
    return ret;
}

SHL_TEST(pipeline_table)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const pcase_t *c = &cases[i];
        shl_status_t st = SHL_STATUS_INIT;
        bson_t res;
        int code = run_case(c->in, c->pipe, &res, &st);
        if (code != c->code) {
            fprintf(stderr, "case %zu %s: code %d (%s), want %d\n", i, c->pipe, code, st.reason,
                    c->code);
        }
        ASSERT_INT_EQ(code, c->code);
        if (c->code == 0) {
            ASSERT_BSON_EQ(&res, c->want);
        }
        bson_destroy(&res);
        shl_status_clear(&st);
    }
}

SHL_TEST(pipeline_leading_match)
{
    bson_t *pj = shl_test_bson("{'0': {'$match': {'a': 1}}, '1': {'$limit': 1}}");
    shl_pipeline_t *pl = NULL;
    shl_status_t st = SHL_STATUS_INIT;
    const bson_t *d;

    ASSERT_INT_EQ(shl_pipeline_parse(pj, NULL, &pl, &st), 0);
    ASSERT(shl_pipeline_leading_match(pl) != NULL);
    ASSERT_BSON_EQ(shl_pipeline_leading_match(pl), "{'a': 1}");
    shl_pipeline_drop_leading_match(pl);
    ASSERT(shl_pipeline_leading_match(pl) == NULL);
    /* No source: empty output. */
    ASSERT_INT_EQ(shl_pipeline_next(pl, &d, &st), 0);
    ASSERT(d == NULL);
    shl_pipeline_destroy(pl);
    bson_destroy(pj);
}

SHL_TEST(pipeline_group_memory_limit)
{
    bson_t *pj = shl_test_bson("{'0': {'$group': {'_id': '$k', 'p': {'$push': '$k'}}}}");
    shl_pipeline_t *pl = NULL;
    shl_status_t st = SHL_STATUS_INIT;
    shl_pipeline_opts_t o = {.max_memory_bytes = 4096};
    bson_t docs = BSON_INITIALIZER;
    const bson_t *d;
    arrsrc_t src;

    for (int i = 0; i < 200; i++) {
        char k[16];
        const char *kp;
        bson_t sub;
        bson_uint32_to_string((uint32_t)i, &kp, k, sizeof(k));
        BSON_APPEND_DOCUMENT_BEGIN(&docs, kp, &sub);
        BSON_APPEND_INT32(&sub, "k", i);
        bson_append_document_end(&docs, &sub);
    }
    bson_iter_init(&src.it, &docs);
    ASSERT_INT_EQ(shl_pipeline_parse(pj, &o, &pl, &st), 0);
    shl_pipeline_set_source(pl, &(shl_pipeline_source_t){arr_next, &src});
    ASSERT_INT_EQ(shl_pipeline_next(pl, &d, &st), 292);
    shl_status_clear(&st);
    shl_pipeline_destroy(pl);
    bson_destroy(pj);
    bson_destroy(&docs);
}

SHL_TEST(pipeline_group_many_keys)
{
    bson_t *pj = shl_test_bson("{'0': {'$group': {'_id': '$k', 'n': {'$sum': 1}}}, "
                               "'1': {'$count': 'groups'}}");
    shl_pipeline_t *pl = NULL;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t docs = BSON_INITIALIZER;
    const bson_t *d;
    arrsrc_t src;

    /* 3 documents per key, 5000 keys: many rehashes of the group table. */
    for (int i = 0; i < 15000; i++) {
        char k[16];
        const char *kp;
        bson_t sub;
        bson_uint32_to_string((uint32_t)i, &kp, k, sizeof(k));
        BSON_APPEND_DOCUMENT_BEGIN(&docs, kp, &sub);
        BSON_APPEND_INT32(&sub, "k", i % 5000);
        bson_append_document_end(&docs, &sub);
    }
    bson_iter_init(&src.it, &docs);
    ASSERT_INT_EQ(shl_pipeline_parse(pj, NULL, &pl, &st), 0);
    shl_pipeline_set_source(pl, &(shl_pipeline_source_t){arr_next, &src});
    ASSERT_INT_EQ(shl_pipeline_next(pl, &d, &st), 0);
    ASSERT(d != NULL);
    ASSERT_BSON_EQ(d, "{'groups': 5000}");
    ASSERT_INT_EQ(shl_pipeline_next(pl, &d, &st), 0);
    ASSERT(d == NULL);
    shl_pipeline_destroy(pl);
    bson_destroy(pj);
    bson_destroy(&docs);
}
