/*
 * pipeline_test.c -- table-driven cases for the aggregation pipeline engine: (input
 * documents, pipeline, expected output documents or error code), run over an in-memory
 * source.
 */
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "base/unit_test.h"
#include "query/matcher.h"
#include "query/pipeline.h"

/* The stages read their limits from the options table: give it its defaults. */
__attribute__((constructor)) static void
options_defaults(void)
{
    shl_options_init();
}

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
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'm': {'$mergeObjects': '$o'}}}]}", "{'r': []}",
     0},
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
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'f': {'$firstN': {'input': '$v', 'n': 1.5}}}}]}",
     "{'r': []}", 5787903},
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'f': {'$firstN': {'input': '$v', 'n': 'a'}}}}]}",
     "{'r': []}", 5787902},
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'f': {'$lastN': {'input': '$v'}}}}]}",
     "{'r': []}", 5787906},
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'f': {'$maxN': {'n': 2}}}}]}", "{'r': []}",
     5787907},
    {"{'d': []}", "{'p': [{'$group': {'_id': null, 'f': {'$minN': [1]}}}]}", "{'r': []}", 5787900},
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
    /* $bucket */
    {"{'d': [{'p': 5}, {'p': 15}, {'p': 12}, {'p': 30}, {'p': 'x'}, {}]}",
     "{'p': [{'$bucket': {'groupBy': '$p', 'boundaries': [0, 10, 20], 'default': 'other'}}]}",
     "{'r': [{'_id': 0, 'count': 1}, {'_id': 10, 'count': 2}, {'_id': 'other', 'count': 3}]}", 0},
    {"{'d': [{'p': 5, 'n': 'a'}, {'p': 7, 'n': 'b'}]}",
     "{'p': [{'$bucket': {'groupBy': '$p', 'boundaries': [0, 10], 'output': {'names': {'$push': "
     "'$n'}, 'total': {'$sum': '$p'}}}}]}",
     "{'r': [{'_id': 0, 'names': ['a', 'b'], 'total': 12}]}", 0},
    {"{'d': []}", "{'p': [{'$bucket': {'groupBy': '$p', 'boundaries': [0, 10]}}]}", "{'r': []}", 0},
    {"{'d': [{'p': 50}]}", "{'p': [{'$bucket': {'groupBy': '$p', 'boundaries': [0, 10]}}]}",
     "{'r': []}", 40066},
    {"{'d': []}", "{'p': [{'$bucket': 1}]}", "{'r': []}", 40201},
    {"{'d': []}", "{'p': [{'$bucket': {'groupBy': '$p', 'boundaries': [0, 10], 'x': 1}}]}",
     "{'r': []}", 40197},
    {"{'d': []}", "{'p': [{'$bucket': {'groupBy': '$p'}}]}", "{'r': []}", 40198},
    {"{'d': []}", "{'p': [{'$bucket': {'groupBy': 'p', 'boundaries': [0, 1]}}]}", "{'r': []}",
     40202},
    {"{'d': []}", "{'p': [{'$bucket': {'groupBy': '$p', 'boundaries': 5}}]}", "{'r': []}", 40200},
    {"{'d': []}", "{'p': [{'$bucket': {'groupBy': '$p', 'boundaries': [0]}}]}", "{'r': []}", 40192},
    {"{'d': []}", "{'p': [{'$bucket': {'groupBy': '$p', 'boundaries': [0, 'a']}}]}", "{'r': []}",
     40193},
    {"{'d': []}", "{'p': [{'$bucket': {'groupBy': '$p', 'boundaries': [5, 1]}}]}", "{'r': []}",
     40194},
    {"{'d': []}", "{'p': [{'$bucket': {'groupBy': '$p', 'boundaries': [0, 10], 'default': 5}}]}",
     "{'r': []}", 40199},
    {"{'d': []}", "{'p': [{'$bucket': {'groupBy': '$p', 'boundaries': [0, 10], 'output': 1}}]}",
     "{'r': []}", 40196},
    /* $bucketAuto */
    {"{'d': [{'p': 4}, {'p': 1}, {'p': 3}, {'p': 2}, {'p': 5}]}",
     "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 2}}]}",
     "{'r': [{'_id': {'min': 1, 'max': 4}, 'count': 3}, {'_id': {'min': 4, 'max': 5}, 'count': "
     "2}]}",
     0},
    {"{'d': [{'p': 1}, {'p': 1}, {'p': 1}, {'p': 2}]}",
     "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 3, 'output': {'s': {'$sum': '$p'}}}}]}",
     "{'r': [{'_id': {'min': 1, 'max': 2}, 's': 3}, {'_id': {'min': 2, 'max': 2}, 's': 2}]}", 0},
    {"{'d': [{'p': 1}, {}]}", "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 5}}]}",
     "{'r': [{'_id': {'min': null, 'max': 1}, 'count': 1}, {'_id': {'min': 1, 'max': 1}, "
     "'count': 1}]}",
     0},
    {"{'d': []}", "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 2}}]}", "{'r': []}", 0},
    {"{'d': [{'p': 1}, {'p': 2}, {'p': 3}, {'p': 4}, {'p': 5}, {'p': 6}, {'p': 7}, {'p': 8}, "
     "{'p': 9}, {'p': 10}]}",
     "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 3, 'granularity': 'POWERSOF2'}}]}",
     "{'r': [{'_id': {'min': 0.5, 'max': 4}, 'count': 3}, {'_id': {'min': 4, 'max': 8}, 'count': "
     "4}, {'_id': {'min': 8, 'max': 16}, 'count': 3}]}",
     0},
    {"{'d': [{'p': 30}, {'p': 12}, {'p': 70}]}",
     "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 3, 'granularity': 'R5'}}]}",
     "{'r': [{'_id': {'min': 10.0, 'max': 16.0}, 'count': 1}, {'_id': {'min': 16.0, 'max': 40.0}, "
     "'count': 1}, {'_id': {'min': 40.0, 'max': 100.0}, 'count': 1}]}",
     0},
    {"{'d': [{'p': 0}, {'p': 0}, {'p': 5}]}",
     "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 2, 'granularity': '1-2-5'}}]}",
     "{'r': [{'_id': {'min': 0, 'max': 2.0}, 'count': 2}, {'_id': {'min': 2.0, 'max': 10.0}, "
     "'count': 1}]}",
     0},
    {"{'d': [{'p': 'x'}]}",
     "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 2, 'granularity': 'E6'}}]}", "{'r': []}",
     40258},
    {"{'d': [{'p': -1}]}",
     "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 2, 'granularity': 'E6'}}]}", "{'r': []}",
     40260},
    {"{'d': []}", "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 2, 'granularity': 'X'}}]}",
     "{'r': []}", 40257},
    {"{'d': []}", "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 2, 'granularity': 1}}]}",
     "{'r': []}", 40261},
    {"{'d': []}", "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 1.5}}]}", "{'r': []}",
     40242},
    {"{'d': [{'p': 1}]}", "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 1, 'output': {}}}]}",
     "{'r': [{'_id': {'min': 1, 'max': 1}, 'count': 1}]}", 0},
    {"{'d': []}", "{'p': [{'$bucketAuto': []}]}", "{'r': []}", 40240},
    {"{'d': []}", "{'p': [{'$bucketAuto': {'groupBy': '$p'}}]}", "{'r': []}", 40246},
    {"{'d': []}", "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 0}}]}", "{'r': []}", 40243},
    {"{'d': []}", "{'p': [{'$bucketAuto': {'groupBy': '$p', 'buckets': 'a'}}]}", "{'r': []}",
     40241},
    {"{'d': []}", "{'p': [{'$bucketAuto': {'groupBy': 'p', 'buckets': 1}}]}", "{'r': []}", 40239},
    /* $facet */
    {"{'d': [{'a': 1}, {'a': 2}, {'a': 3}]}",
     "{'p': [{'$facet': {'n': [{'$count': 'c'}], 'big': [{'$match': {'a': {'$gt': 1}}}, "
     "{'$project': {'_id': 0, 'a': 1}}]}}]}",
     "{'r': [{'n': [{'c': 3}], 'big': [{'a': 2}, {'a': 3}]}]}", 0},
    {"{'d': []}", "{'p': [{'$facet': {'n': [{'$count': 'c'}]}}]}", "{'r': [{'n': []}]}", 0},
    {"{'d': []}", "{'p': [{'$facet': {}}]}", "{'r': []}", 40169},
    {"{'d': []}", "{'p': [{'$facet': {'a': 1}}]}", "{'r': []}", 40170},
    {"{'d': []}", "{'p': [{'$facet': {'a': [{'$out': 'x'}]}}]}", "{'r': []}", 40600},
    {"{'d': []}", "{'p': [{'$facet': {'a': [{'$facet': {'b': [{'$limit': 1}]}}]}}]}", "{'r': []}",
     40600},
    /* $sample */
    {"{'d': [{'a': 1}, {'a': 1}, {'a': 1}]}", "{'p': [{'$sample': {'size': 2}}]}",
     "{'r': [{'a': 1}, {'a': 1}]}", 0},
    {"{'d': [{'a': 1}]}", "{'p': [{'$sample': {'size': 5}}]}", "{'r': [{'a': 1}]}", 0},
    {"{'d': [{'a': 1}]}", "{'p': [{'$sample': {'size': 0}}]}", "{'r': []}", 0},
    {"{'d': []}", "{'p': [{'$sample': 1}]}", "{'r': []}", 28745},
    {"{'d': []}", "{'p': [{'$sample': {'size': 'a'}}]}", "{'r': []}", 28746},
    {"{'d': []}", "{'p': [{'$sample': {'size': -1}}]}", "{'r': []}", 28747},
    {"{'d': []}", "{'p': [{'$sample': {'size': 1, 'x': 1}}]}", "{'r': []}", 28748},
    {"{'d': []}", "{'p': [{'$sample': {}}]}", "{'r': []}", 28749},
    /* $documents */
    {"{'d': [{'ignored': 1}]}", "{'p': [{'$documents': [{'x': 1}, {'x': {'$add': [1, 1]}}]}]}",
     "{'r': [{'x': 1}, {'x': 2}]}", 0},
    {"{'d': []}", "{'p': [{'$documents': []}]}", "{'r': []}", 0},
    {"{'d': []}", "{'p': [{'$documents': 1}]}", "{'r': []}", 5858203},
    {"{'d': []}", "{'p': [{'$documents': [1]}]}", "{'r': []}", 40228},
    {"{'d': []}", "{'p': [{'$limit': 1}, {'$documents': []}]}", "{'r': []}", 40602},
    /* $lookup (fake collections under 'c') */
    {"{'d': [{'_id': 1, 'k': 'a'}, {'_id': 2, 'k': ['b', 'c']}, {'_id': 3}], 'c': {'f': [{'_id': "
     "10, 'fk': 'a'}, {'_id': 11, 'fk': 'c'}, {'_id': 12}, {'_id': 13, 'fk': 'b'}]}}",
     "{'p': [{'$lookup': {'from': 'f', 'localField': 'k', 'foreignField': 'fk', 'as': 'j'}}]}",
     "{'r': [{'_id': 1, 'k': 'a', 'j': [{'_id': 10, 'fk': 'a'}]}, {'_id': 2, 'k': ['b', 'c'], "
     "'j': [{'_id': 11, 'fk': 'c'}, {'_id': 13, 'fk': 'b'}]}, {'_id': 3, 'j': [{'_id': 12}]}]}",
     0},
    {"{'d': [{'_id': 1, 'q': 2}], 'c': {'f': [{'_id': 10, 'v': 1}, {'_id': 11, 'v': 2}, {'_id': "
     "12, 'v': 3}]}}",
     "{'p': [{'$lookup': {'from': 'f', 'let': {'lim': '$q'}, 'pipeline': [{'$match': {'$expr': "
     "{'$gte': ['$v', '$$lim']}}}, {'$project': {'_id': 1}}], 'as': 'j'}}]}",
     "{'r': [{'_id': 1, 'q': 2, 'j': [{'_id': 11}, {'_id': 12}]}]}", 0},
    {"{'d': [{'_id': 1}], 'c': {}}",
     "{'p': [{'$lookup': {'from': 'none', 'localField': 'a', 'foreignField': 'b', 'as': "
     "'x.y'}}]}",
     "{'r': [{'_id': 1, 'x': {'y': []}}]}", 0},
    {"{'d': [{'_id': 1}]}",
     "{'p': [{'$lookup': {'pipeline': [{'$documents': [{'z': 1}]}], 'as': 'j'}}]}",
     "{'r': [{'_id': 1, 'j': [{'z': 1}]}]}", 0},
    {"{'d': [{'_id': 1, 'k': [{'$regularExpression': {'pattern': 'a', 'options': ''}}, 2]}], "
     "'c': {'f': [{'_id': 10, 'fk': 'a'}, {'_id': 11, 'fk': {'$regularExpression': {'pattern': "
     "'a', 'options': ''}}}, {'_id': 12, 'fk': 2}]}}",
     "{'p': [{'$lookup': {'from': 'f', 'localField': 'k', 'foreignField': 'fk', 'as': 'j'}}, "
     "{'$project': {'j._id': 1}}]}",
     "{'r': [{'_id': 1, 'j': [{'_id': 11}, {'_id': 12}]}]}", 0},
    {"{'d': [{'_id': 1, 'k': 'a', 'min': 2}], 'c': {'f': [{'_id': 10, 'fk': 'a', 'v': 1}, "
     "{'_id': 11, 'fk': 'a', 'v': 3}, {'_id': 12, 'fk': 'b', 'v': 5}]}}",
     "{'p': [{'$lookup': {'from': 'f', 'localField': 'k', 'foreignField': 'fk', 'let': {'m': "
     "'$min'}, 'pipeline': [{'$match': {'$expr': {'$gte': ['$v', '$$m']}}}], 'as': 'j'}}, "
     "{'$project': {'j': '$j._id'}}]}",
     "{'r': [{'_id': 1, 'j': [11]}]}", 0},
    {"{'d': []}", "{'p': [{'$lookup': {'from': 'f', 'as': 'j'}}]}", "{'r': []}", 9},
    {"{'d': []}", "{'p': [{'$lookup': {'from': 'f', 'localField': 'a', 'foreignField': 'b'}}]}",
     "{'r': []}", 9},
    {"{'d': []}", "{'p': [{'$lookup': {'from': 1, 'as': 'j', 'pipeline': []}}]}", "{'r': []}", 9},
    {"{'d': []}", "{'p': [{'$lookup': {'from': 'f', 'as': 2, 'pipeline': []}}]}", "{'r': []}", 9},
    {"{'d': []}", "{'p': [{'$lookup': {'from': 'f', 'as': 'j', 'pipeline': [], 'bad': 1}}]}",
     "{'r': []}", 9},
    {"{'d': []}", "{'p': [{'$lookup': {'from': 'f', 'as': 'j', 'pipeline': [{'$out': 'x'}]}}]}",
     "{'r': []}", 51047},
    {"{'d': []}", "{'p': [{'$lookup': {'from': 'f', 'as': 'j', 'localField': 'a'}}]}", "{'r': []}",
     9},
    /* $unionWith */
    {"{'d': [{'a': 1}], 'c': {'u': [{'b': 1}, {'b': 2}]}}", "{'p': [{'$unionWith': 'u'}]}",
     "{'r': [{'a': 1}, {'b': 1}, {'b': 2}]}", 0},
    {"{'d': [{'a': 1}], 'c': {'u': [{'b': 1}, {'b': 2}]}}",
     "{'p': [{'$unionWith': {'coll': 'u', 'pipeline': [{'$match': {'b': 2}}]}}, {'$count': "
     "'n'}]}",
     "{'r': [{'n': 2}]}", 0},
    {"{'d': []}", "{'p': [{'$unionWith': {'pipeline': [{'$documents': [{'x': 1}]}]}}]}",
     "{'r': [{'x': 1}]}", 0},
    {"{'d': []}", "{'p': [{'$unionWith': {'coll': 'u', 'x': 1}}]}", "{'r': []}", 40415},
    {"{'d': []}", "{'p': [{'$unionWith': {'pipeline': [{'$match': {}}]}}]}", "{'r': []}", 9},
    {"{'d': []}", "{'p': [{'$unionWith': {'coll': 'u', 'pipeline': [{'$merge': 'x'}]}}]}",
     "{'r': []}", 31441},
    /* $graphLookup: a cycle (1 -> 2 -> 3 -> 1), arrays of connections, depth, maxDepth */
    {"{'d': [{'_id': 0, 's': 1}], 'c': {'g': [{'_id': 1, 'to': 2}, {'_id': 2, 'to': [3, 9]}, "
     "{'_id': 3, 'to': 1}, {'_id': 4, 'to': 1}]}}",
     "{'p': [{'$graphLookup': {'from': 'g', 'startWith': '$s', 'connectFromField': 'to', "
     "'connectToField': '_id', 'as': 'r', 'depthField': 'd'}}, {'$unwind': '$r'}, {'$sort': "
     "{'r._id': 1}}, {'$project': {'_id': '$r._id', 'd': '$r.d'}}]}",
     "{'r': [{'_id': 1, 'd': {'$numberLong': '0'}}, {'_id': 2, 'd': {'$numberLong': '1'}}, "
     "{'_id': 3, 'd': {'$numberLong': '2'}}]}",
     0},
    {"{'d': [{'_id': 0}], 'c': {'g': [{'_id': 1, 'to': 2}, {'_id': 2, 'to': 3}, {'_id': 3}]}}",
     "{'p': [{'$graphLookup': {'from': 'g', 'startWith': [1, 1.0], 'connectFromField': 'to', "
     "'connectToField': '_id', 'as': 'r', 'maxDepth': 1}}, {'$project': {'n': {'$size': "
     "'$r'}}}]}",
     "{'r': [{'_id': 0, 'n': 2}]}", 0},
    {"{'d': [{'_id': 0, 's': 'a'}], 'c': {'g': [{'_id': 1, 'k': 'a', 'next': 'b', 'ok': true}, "
     "{'_id': 2, 'k': 'b', 'next': 'c', 'ok': false}, {'_id': 3, 'k': 'c'}]}}",
     "{'p': [{'$graphLookup': {'from': 'g', 'startWith': '$s', 'connectFromField': 'next', "
     "'connectToField': 'k', 'as': 'r', 'restrictSearchWithMatch': {'ok': true}}}, "
     "{'$project': {'r': '$r._id'}}]}",
     "{'r': [{'_id': 0, 'r': [1]}]}", 0},
    {"{'d': [{'_id': 0}], 'c': {'g': [{'_id': 1}]}}",
     "{'p': [{'$graphLookup': {'from': 'g', 'startWith': '$missing', 'connectFromField': 'to', "
     "'connectToField': '_id', 'as': 'r'}}]}",
     "{'r': [{'_id': 0, 'r': []}]}", 0},
    {"{'d': [{'_id': 0}], 'mem': 300, 'c': {'g': [{'_id': 1, 'to': 2, 'pad': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, "
     "{'_id': 2, 'to': 3, 'pad': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, "
     "{'_id': 3, 'to': 1, 'pad': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}]}}",
     "{'p': [{'$graphLookup': {'from': 'g', 'startWith': 1, 'connectFromField': 'to', "
     "'connectToField': '_id', 'as': 'r'}}]}",
     "{'r': []}", 40099},
    {"{'d': []}", "{'p': [{'$graphLookup': 4}]}", "{'r': []}", 9},
    {"{'d': []}",
     "{'p': [{'$graphLookup': {'from': 'g', 'startWith': 1, 'connectFromField': 'a', "
     "'connectToField': 'b', 'as': 'r', 'maxDepth': 'x'}}]}",
     "{'r': []}", 40100},
    {"{'d': []}",
     "{'p': [{'$graphLookup': {'from': 'g', 'startWith': 1, 'connectFromField': 'a', "
     "'connectToField': 'b', 'as': 'r', 'maxDepth': -1}}]}",
     "{'r': []}", 40101},
    {"{'d': []}",
     "{'p': [{'$graphLookup': {'from': 'g', 'startWith': 1, 'connectFromField': 'a', "
     "'connectToField': 'b', 'as': 'r', 'maxDepth': 2.5}}]}",
     "{'r': []}", 40102},
    {"{'d': []}",
     "{'p': [{'$graphLookup': {'from': 'g', 'startWith': 1, 'connectFromField': 0, "
     "'connectToField': 'b', 'as': 'r'}}]}",
     "{'r': []}", 40103},
    {"{'d': []}",
     "{'p': [{'$graphLookup': {'from': 'g', 'startWith': 1, 'connectFromField': 'a', "
     "'connectToField': 'b', 'as': '$r'}}]}",
     "{'r': []}", 16410},
    {"{'d': []}",
     "{'p': [{'$graphLookup': {'from': 'g', 'startWith': 1, 'connectFromField': 'a', "
     "'connectToField': 'b', 'as': 'r', 'x': 1}}]}",
     "{'r': []}", 40104},
    {"{'d': []}",
     "{'p': [{'$graphLookup': {'from': 'g', 'connectFromField': 'a', 'connectToField': 'b', "
     "'as': 'r'}}]}",
     "{'r': []}", 40105},
    {"{'d': []}",
     "{'p': [{'$graphLookup': {'startWith': 1, 'connectFromField': 'a', 'connectToField': 'b', "
     "'as': 'r'}}]}",
     "{'r': []}", 9},
    {"{'d': []}",
     "{'p': [{'$graphLookup': {'from': 'g', 'startWith': 1, 'connectFromField': 'a', "
     "'connectToField': 'b', 'as': 'r', 'restrictSearchWithMatch': 'x'}}]}",
     "{'r': []}", 40185},
    /* $collStats / $indexStats (fake environment) */
    {"{'d': [{'a': 1}]}", "{'p': [{'$collStats': {'count': {}}}]}",
     "{'r': [{'ns': 'test.d', 'count': 1}]}", 0},
    {"{'d': []}", "{'p': [{'$indexStats': {}}, {'$project': {'_id': 0, 'name': 1}}]}",
     "{'r': [{'name': '_id_'}]}", 0},
    {"{'d': []}", "{'p': [{'$collStats': {'bogus': {}}}]}", "{'r': []}", 40415},
    {"{'d': []}", "{'p': [{'$indexStats': {'a': 1}}]}", "{'r': []}", 28803},
    {"{'d': []}", "{'p': [{'$match': {}}, {'$collStats': {}}]}", "{'r': []}", 40602},
    /* $out / $merge: documents pass through; the caller writes them */
    {"{'d': [{'a': 1}]}", "{'p': [{'$out': 'o'}]}", "{'r': [{'a': 1}]}", 0},
    {"{'d': []}", "{'p': [{'$out': 'o'}, {'$limit': 1}]}", "{'r': []}", 40601},
    {"{'d': []}", "{'p': [{'$out': 1}]}", "{'r': []}", 16990},
    {"{'d': []}", "{'p': [{'$out': {'coll': 'x'}}]}", "{'r': []}", 40414},
    {"{'d': []}", "{'p': [{'$out': 'system.x'}]}", "{'r': []}", 17385},
    {"{'d': [{'a': 1}]}", "{'p': [{'$merge': {'into': 'o', 'whenMatched': 'replace'}}]}",
     "{'r': [{'a': 1}]}", 0},
    {"{'d': []}", "{'p': [{'$merge': 1}]}", "{'r': []}", 51182},
    {"{'d': []}", "{'p': [{'$merge': {'whenMatched': 'replace'}}]}", "{'r': []}", 40414},
    {"{'d': []}", "{'p': [{'$merge': {'into': 1}}]}", "{'r': []}", 51178},
    {"{'d': []}", "{'p': [{'$merge': {'into': 'o', 'on': []}}]}", "{'r': []}", 51187},
    {"{'d': []}", "{'p': [{'$merge': {'into': 'o', 'on': 1}}]}", "{'r': []}", 51186},
    {"{'d': []}", "{'p': [{'$merge': {'into': 'o', 'on': [1]}}]}", "{'r': []}", 51134},
    {"{'d': []}", "{'p': [{'$merge': {'into': 'o', 'whenMatched': 'bogus'}}]}", "{'r': []}", 2},
    {"{'d': []}",
     "{'p': [{'$merge': {'into': 'o', 'whenMatched': 'fail', 'whenNotMatched': 'discard'}}]}",
     "{'r': []}", 51181},
    {"{'d': []}", "{'p': [{'$merge': {'into': 'o', 'let': {'a': 1}}}]}", "{'r': []}", 51199},
    {"{'d': []}", "{'p': [{'$merge': {'into': 'o', 'x': 1}}]}", "{'r': []}", 40415},
    {"{'d': []}", "{'p': [{'$merge': {'into': 'o', 'whenMatched': [{'$group': {'_id': 1}}]}}]}",
     "{'r': []}", 72},
    /* $redact */
    {"{'d': [{'_id': 1, 'lvl': 1, 'a': {'lvl': 5, 'x': 1}, 'b': [{'lvl': 1, 'y': 2}, {'lvl': 9}, "
     "3], 'c': {'x': 2}}, {'_id': 2, 'lvl': 7}]}",
     "{'p': [{'$redact': {'$cond': [{'$gt': [{'$ifNull': ['$lvl', 0]}, 4]}, '$$PRUNE', "
     "'$$DESCEND']}}]}",
     "{'r': [{'_id': 1, 'lvl': 1, 'b': [{'lvl': 1, 'y': 2}, 3], 'c': {'x': 2}}]}", 0},
    {"{'d': [{'_id': 1, 'a': {'b': 1}}]}", "{'p': [{'$redact': '$$KEEP'}]}",
     "{'r': [{'_id': 1, 'a': {'b': 1}}]}", 0},
    {"{'d': [{'_id': 1}]}", "{'p': [{'$redact': 'x'}]}", "{'r': []}", 17053},
    {"{'d': [{'_id': 1}]}", "{'p': [{'$project': {'k': '$$KEEP'}}]}", "{'r': []}", 17276},
    /* refused for now */
    {"{'d': []}", "{'p': [{'$currentOp': {}}]}", "{'r': []}", 238},
    /* composition and errors */
    {"{'d': [{'t': ['a', 'b']}, {'t': ['b']}]}",
     "{'p': [{'$unwind': '$t'}, {'$group': {'_id': '$t', 'n': {'$sum': 1}}}, {'$sort': {'n': -1, "
     "'_id': 1}}, {'$limit': 1}]}",
     "{'r': [{'_id': 'b', 'n': 2}]}", 0},
    {"{'d': []}", "{'p': [{'$bogus': {}}]}", "{'r': []}", 40324},
    {"{'d': []}", "{'p': [{'$match': {}, '$limit': 1}]}", "{'r': []}", 40323},
    /* $setWindowFields (window.c) */
    {"{'d': [{'x': 2, 'v': 20}, {'x': 1, 'v': 10}, {'x': 3, 'v': 30}]}",
     "{'p': [{'$setWindowFields': {'sortBy': {'x': 1}, 'output': {'s': {'$sum': '$v', 'window': "
     "{'documents': ['unbounded', 'current']}}}}}]}",
     "{'r': [{'x': 1, 'v': 10, 's': 10}, {'x': 2, 'v': 20, 's': 30}, {'x': 3, 'v': 30, 's': 60}]}",
     0},
    /* partitions: missing and null share one; no window is the whole partition */
    {"{'d': [{'k': 'a', 'v': 1}, {'v': 2}, {'k': null, 'v': 3}, {'k': 'a', 'v': 4}]}",
     "{'p': [{'$setWindowFields': {'partitionBy': '$k', 'output': {'n': {'$count': {}}, 'p': "
     "{'$push': '$v'}}}}]}",
     "{'r': [{'v': 2, 'n': 2, 'p': [2, 3]}, {'k': null, 'v': 3, 'n': 2, 'p': [2, 3]}, {'k': 'a', "
     "'v': 1, 'n': 2, 'p': [1, 4]}, {'k': 'a', 'v': 4, 'n': 2, 'p': [1, 4]}]}",
     0},
    /* documents windows, sliding, and empty at the edges */
    {"{'d': [{'x': 1}, {'x': 2}, {'x': 3}, {'x': 4}]}",
     "{'p': [{'$setWindowFields': {'sortBy': {'x': 1}, 'output': {'m': {'$max': '$x', 'window': "
     "{'documents': [-1, 0]}}, 'f': {'$first': '$x', 'window': {'documents': [1, 2]}}, 'a': "
     "{'$avg': "
     "'$x', 'window': {'documents': [-1, 1]}}}}}, {'$project': {'_id': 0}}]}",
     "{'r': [{'x': 1, 'm': 1, 'f': 2, 'a': 1.5}, {'x': 2, 'm': 2, 'f': 3, 'a': 2.0}, {'x': 3, 'm': "
     "3, "
     "'f': 4, 'a': 3.0}, {'x': 4, 'm': 4, 'f': null, 'a': 3.5}]}",
     0},
    /* range windows: ties are in, 'current' is the document; descending sorts */
    {"{'d': [{'x': 0}, {'x': 1}, {'x': 1.5}, {'x': 2}, {'x': 100}, {'x': 100}]}",
     "{'p': [{'$setWindowFields': {'sortBy': {'x': 1}, 'output': {'y': {'$push': '$x', 'window': "
     "{'range': [-1, 0]}}}}}]}",
     "{'r': [{'x': 0, 'y': [0]}, {'x': 1, 'y': [0, 1]}, {'x': 1.5, 'y': [1, 1.5]}, {'x': 2, 'y': "
     "[1, "
     "1.5, 2]}, {'x': 100, 'y': [100, 100]}, {'x': 100, 'y': [100, 100]}]}",
     0},
    {"{'d': [{'x': 1}, {'x': 2}, {'x': 3}]}",
     "{'p': [{'$setWindowFields': {'sortBy': {'x': -1}, 'output': {'y': {'$push': '$x', 'window': "
     "{'range': [-1, 0]}}}}}]}",
     "{'r': [{'x': 3, 'y': [3]}, {'x': 2, 'y': [3, 2]}, {'x': 1, 'y': [2, 1]}]}", 0},
    {"{'d': [{'x': 1}, {'x': 'a'}]}",
     "{'p': [{'$setWindowFields': {'sortBy': {'x': 1}, 'output': {'y': {'$sum': 1, 'window': "
     "{'range': ['unbounded', 'unbounded']}}}}}]}",
     NULL, 5429414},
    /* time ranges */
    {"{'d': [{'t': {'$date': 0}}, {'t': {'$date': 3600000}}, {'t': {'$date': 9000000}}]}",
     "{'p': [{'$setWindowFields': {'sortBy': {'t': 1}, 'output': {'n': {'$count': {}, 'window': "
     "{'range': [-1, 0], 'unit': 'hour'}}}}}, {'$project': {'_id': 0, 'n': 1}}]}",
     "{'r': [{'n': 1}, {'n': 2}, {'n': 1}]}", 0},
    {"{'d': [{'t': 1}]}",
     "{'p': [{'$setWindowFields': {'sortBy': {'t': 1}, 'output': {'n': {'$count': {}, 'window': "
     "{'range': [-1, 0], 'unit': 'hour'}}}}}]}",
     NULL, 5429513},
    /* bounds far past the partition or the dates' range saturate */
    {"{'d': [{'x': 1}, {'x': 2}, {'x': 3}]}",
     "{'p': [{'$setWindowFields': {'sortBy': {'x': 1}, 'output': {'s': {'$sum': '$x', 'window': "
     "{'documents': [{'$numberLong': '-9223372036854775807'}, {'$numberLong': "
     "'9223372036854775807'}]}}, 'c': {'$count': {}, 'window': {'documents': [1, {'$numberLong': "
     "'9223372036854775807'}]}}}}}, {'$project': {'_id': 0}}]}",
     "{'r': [{'x': 1, 's': 6, 'c': 2}, {'x': 2, 's': 6, 'c': 1}, {'x': 3, 's': 6, 'c': 0}]}", 0},
    {"{'d': [{'t': {'$date': 0}}, {'t': {'$date': 1000}}]}",
     "{'p': [{'$setWindowFields': {'sortBy': {'t': -1}, 'output': {'a': {'$count': {}, 'window': "
     "{'range': [-1000000000, 0], 'unit': 'year'}}, 'b': {'$count': {}, 'window': {'range': "
     "[1000000000, 'unbounded'], 'unit': 'year'}}}}}, {'$project': {'_id': 0, 'a': 1, 'b': 1}}]}",
     "{'r': [{'a': 1, 'b': 0}, {'a': 2, 'b': 0}]}", 0},
    /* rank style functions and $shift */
    {"{'d': [{'s': 5}, {'s': 1}, {'s': 5}, {'s': 7}]}",
     "{'p': [{'$setWindowFields': {'sortBy': {'s': 1}, 'output': {'r': {'$rank': {}}, 'd': "
     "{'$denseRank': {}}, 'n': {'$documentNumber': {}}, 'prev': {'$shift': {'output': '$s', 'by': "
     "-1, 'default': 'none'}}}}}]}",
     "{'r': [{'s': 1, 'r': 1, 'd': 1, 'n': 1, 'prev': 'none'}, {'s': 5, 'r': 2, 'd': 2, 'n': 2, "
     "'prev': 1}, {'s': 5, 'r': 2, 'd': 2, 'n': 3, 'prev': 5}, {'s': 7, 'r': 4, 'd': 3, 'n': 4, "
     "'prev': 5}]}",
     0},
    /* parse errors */
    {"{'d': []}", "{'p': [{'$setWindowFields': 'x'}]}", NULL, 9},
    {"{'d': []}", "{'p': [{'$setWindowFields': {'sortBy': 'x', 'output': {}}}]}", NULL, 14},
    {"{'d': []}", "{'p': [{'$setWindowFields': {'what': 1}}]}", NULL, 40415},
    {"{'d': []}", "{'p': [{'$setWindowFields': {'partitionBy': '$a'}}]}", NULL, 40414},
    {"{'d': []}", "{'p': [{'$setWindowFields': {'output': {'v': {'$summ': 1}}}}]}", NULL, 9},
    {"{'d': []}", "{'p': [{'$setWindowFields': {'output': {'v': {'b': 1}}}}]}", NULL, 9},
    {"{'d': []}", "{'p': [{'$setWindowFields': {'output': {'v': {'$mergeObjects': '$a'}}}}]}", NULL,
     9},
    {"{'d': []}",
     "{'p': [{'$setWindowFields': {'sortBy': {'a': 1}, 'output': {'v': {'$sum': 1, 'window': "
     "{'documents': [1, -1]}}}}}]}",
     NULL, 5339900},
    {"{'d': []}",
     "{'p': [{'$setWindowFields': {'output': {'v': {'$sum': 1, 'window': {'documents': "
     "['unbounded', 'current']}}}}}]}",
     NULL, 5339901},
    {"{'d': []}",
     "{'p': [{'$setWindowFields': {'sortBy': {'a': 1, 'b': 1}, 'output': {'v': {'$sum': 1, "
     "'window': {'range': [-1, 1]}}}}}]}",
     NULL, 5339902},
    {"{'d': []}",
     "{'p': [{'$setWindowFields': {'sortBy': {'a': 1}, 'output': {'v': {'$sum': 1, 'window': "
     "{'documents': [0.5, 1]}}}}}]}",
     NULL, 9},
    {"{'d': []}",
     "{'p': [{'$setWindowFields': {'sortBy': {'a': 1}, 'output': {'v': {'$rank': {}, 'window': "
     "{'documents': [0, 1]}}}}}]}",
     NULL, 5371601},
    {"{'d': []}", "{'p': [{'$setWindowFields': {'output': {'v': {'$rank': {}}}}}]}", NULL, 5371602},
    {"{'d': []}",
     "{'p': [{'$setWindowFields': {'sortBy': {'a': 1}, 'output': {'v': {'$rank': 1}}}}]}", NULL,
     5371603},
    {"{'d': []}",
     "{'p': [{'$setWindowFields': {'sortBy': {'a': 1}, 'output': {'v': {'$shift': {'output': '$a', "
     "'by': 1.5}}}}}]}",
     NULL, 9},
    {"{'d': []}",
     "{'p': [{'$setWindowFields': {'sortBy': {'a': 1}, 'output': {'v': {'$shift': {'output': '$a', "
     "'by': 1, 'default': '$a'}}}}}]}",
     NULL, 9},
    {"{'d': []}",
     "{'p': [{'$setWindowFields': {'output': {'a': {'$sum': 1}, 'a.b': {'$sum': 1}}}}]}", NULL,
     6307900},
    {"{'d': [{'a': [1, 2]}]}",
     "{'p': [{'$setWindowFields': {'partitionBy': '$a', 'output': {'n': {'$sum': 1}}}}]}", NULL,
     14},
    /* $densify (window.c) */
    {"{'d': [{'v': 1}, {'v': 4}, {}]}",
     "{'p': [{'$densify': {'field': 'v', 'range': {'step': 1, 'bounds': 'full'}}}]}",
     "{'r': [{}, {'v': 1}, {'v': 2}, {'v': 3}, {'v': 4}]}", 0},
    {"{'d': [{'v': 3, 'k': 'a'}, {'v': 0, 'k': 'b'}]}",
     "{'p': [{'$densify': {'field': 'v', 'partitionByFields': ['k'], 'range': {'step': 2, "
     "'bounds': [0, 5]}}}]}",
     "{'r': [{'k': 'a', 'v': 0}, {'k': 'a', 'v': 2}, {'v': 3, 'k': 'a'}, {'k': 'a', 'v': 4}, {'v': "
     "0, 'k': 'b'}, {'k': 'b', 'v': 2}, {'k': 'b', 'v': 4}]}",
     0},
    {"{'d': [{'v': 0, 'k': 1}, {'v': 2, 'k': 1}, {'v': 7, 'k': 2}, {'v': 9, 'k': 2}]}",
     "{'p': [{'$densify': {'field': 'v', 'partitionByFields': ['k'], 'range': {'step': 1, "
     "'bounds': 'partition'}}}, {'$project': {'v': 1}}]}",
     "{'r': [{'v': 0}, {'v': 1}, {'v': 2}, {'v': 7}, {'v': 8}, {'v': 9}]}", 0},
    {"{'d': [{'t': {'$date': 0}}, {'t': {'$date': 5097600000}}]}",
     "{'p': [{'$densify': {'field': 't', 'range': {'step': 1, 'unit': 'month', 'bounds': "
     "'full'}}}]}",
     "{'r': [{'t': {'$date': 0}}, {'t': {'$date': 2678400000}}, {'t': {'$date': 5097600000}}]}", 0},
    /* a missing partition field is its own partition, apart from null */
    {"{'d': [{'k': null, 'v': 1}, {'v': 2}, {'k': null, 'v': 3}]}",
     "{'p': [{'$densify': {'field': 'v', 'partitionByFields': ['k'], 'range': {'step': 1, "
     "'bounds': 'partition'}}}]}",
     "{'r': [{'v': 2}, {'k': null, 'v': 1}, {'k': null, 'v': 2}, {'k': null, 'v': 3}]}", 0},
    {"{'d': [{'v': 'x'}]}",
     "{'p': [{'$densify': {'field': 'v', 'range': {'step': 1, 'bounds': "
     "'full'}}}]}",
     NULL, 5733201},
    {"{'d': []}", "{'p': [{'$densify': {'field': 'v', 'range': {'step': -1, 'bounds': 'full'}}}]}",
     NULL, 5733401},
    {"{'d': []}", "{'p': [{'$densify': {'field': 'v', 'range': {'step': 1, 'bounds': [2, 1]}}}]}",
     NULL, 5733402},
    {"{'d': []}", "{'p': [{'$densify': {'field': 'v', 'range': {'step': 1, 'bounds': [1]}}}]}",
     NULL, 5733403},
    {"{'d': []}",
     "{'p': [{'$densify': {'field': 'v', 'range': {'step': 1, 'bounds': "
     "'partition'}}}]}",
     NULL, 5733408},
    {"{'d': []}", "{'p': [{'$densify': {'field': 'v', 'range': {'step': 1}}}]}", NULL, 40414},
    {"{'d': []}", "{'p': [{'$densify': {'field': 1, 'range': {'step': 1, 'bounds': 'full'}}}]}",
     NULL, 14},
    /* $fill: rewritten into $setWindowFields + $addFields */
    {"{'d': [{'t': 1, 'a': 1}, {'t': 2}, {'t': 3, 'a': 5}, {'t': 4, 'a': null}]}",
     "{'p': [{'$fill': {'sortBy': {'t': 1}, 'output': {'a': {'method': 'linear'}, 'b': {'value': "
     "0}}}}, {'$project': {'_id': 0, 'a': 1, 'b': 1}}]}",
     "{'r': [{'a': 1, 'b': 0}, {'a': 3.0, 'b': 0}, {'a': 5, 'b': 0}, {'a': null, 'b': 0}]}", 0},
    {"{'d': [{'t': 2, 'k': 1}, {'t': 1, 'k': 1, 'a': 'x'}, {'t': 1, 'k': 2}]}",
     "{'p': [{'$fill': {'sortBy': {'t': 1}, 'partitionByFields': ['k'], 'output': {'a': {'method': "
     "'locf'}}}}, {'$project': {'_id': 0}}]}",
     "{'r': [{'t': 1, 'k': 1, 'a': 'x'}, {'t': 2, 'k': 1, 'a': 'x'}, {'t': 1, 'k': 2, 'a': null}]}",
     0},
    {"{'d': [{'k': {'a': 1}, 't': 1, 'v': 5}, {'k': {'a': 1}, 't': 2}, {'k': {'a': 2}, 't': 3}]}",
     "{'p': [{'$fill': {'sortBy': {'t': 1}, 'partitionByFields': ['k.a'], 'output': {'v': "
     "{'method': 'locf'}}}}, {'$project': {'_id': 0, 't': 1, 'v': 1}}]}",
     "{'r': [{'t': 1, 'v': 5}, {'t': 2, 'v': 5}, {'t': 3, 'v': null}]}", 0},
    {"{'d': []}", "{'p': [{'$fill': 'x'}]}", NULL, 9},
    {"{'d': []}", "{'p': [{'$fill': {}}]}", NULL, 40414},
    {"{'d': []}", "{'p': [{'$fill': {'output': {}}}]}", NULL, 6050203},
    {"{'d': []}", "{'p': [{'$fill': {'output': {'a': {'method': 'x'}}}}]}", NULL, 6050202},
    {"{'d': []}", "{'p': [{'$fill': {'output': {'a': 'x'}}}]}", NULL, 6050200},
    {"{'d': []}", "{'p': [{'$fill': {'output': {'a': {'method': 'locf', 'b': 1}}}}]}", NULL, 40415},
    {"{'d': []}",
     "{'p': [{'$fill': {'partitionBy': '$a', 'partitionByFields': ['a'], 'output': {'a': "
     "{'method': "
     "'locf'}}}}]}",
     NULL, 6050204},
    {"{'d': []}", "{'p': [{'$fill': {'output': {'a': {'method': 'linear'}}}}]}", NULL, 605001},
    /* Memory and size limits (docs/limits.md), each lowered through its knob ('knobs' is
     * set for the case and restored after it). */
    {"{'d': [{'k': 1, 'v': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, {'k': 1, 'v': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}], 'knobs': "
     "{'internalQueryMaxPushBytes': 100}}",
     "{'p': [{'$group': {'_id': '$k', 'a': {'$push': '$v'}}}]}", NULL, 146},
    {"{'d': [{'k': 1, 'v': 'a'}, {'k': 1, 'v': 'b'}], 'knobs': {'internalQueryMaxPushBytes': "
     "100}}",
     "{'p': [{'$group': {'_id': '$k', 'a': {'$push': '$v'}}}]}",
     "{'r': [{'_id': 1, 'a': ['a', 'b']}]}", 0},
    {"{'d': [{'v': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx1'}, {'v': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx2'}], 'knobs': "
     "{'internalQueryMaxAddToSetBytes': 100}}",
     "{'p': [{'$group': {'_id': null, 'a': {'$addToSet': '$v'}}}]}", NULL, 146},
    {"{'d': [{'v': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, {'v': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, {'v': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}], 'knobs': "
     "{'internalQueryMaxAddToSetBytes': 100}}",
     "{'p': [{'$group': {'_id': null, 'a': {'$addToSet': '$v'}}}, {'$project': {'_id': 0, 'n': "
     "{'$size': '$a'}}}]}",
     "{'r': [{'n': 1}]}", 0},
    {"{'d': [{'k': 1}, {'k': 2}, {'k': 3}, {'k': 4}], 'knobs': "
     "{'internalDocumentSourceGroupMaxMemoryBytes': 100}}",
     "{'p': [{'$group': {'_id': '$k'}}]}", NULL, 292},
    {"{'d': [{'v': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, {'v': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}], 'knobs': "
     "{'internalQueryMaxBlockingSortMemoryUsageBytes': 100}}",
     "{'p': [{'$sort': {'v': 1}}]}", NULL, 292},
    {"{'d': [{'v': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, {'v': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}], 'knobs': "
     "{'internalQueryMaxBlockingSortMemoryUsageBytes': 100}}",
     "{'p': [{'$sample': {'size': 5}}]}", NULL, 292},
    {"{'d': [{'v': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, {'v': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}], 'knobs': "
     "{'internalDocumentSourceBucketAutoMaxMemoryBytes': 100}}",
     "{'p': [{'$bucketAuto': {'groupBy': '$v', 'buckets': 1}}]}", NULL, 292},
    {"{'d': [{'_id': 0}], 'knobs': {'internalDocumentSourceGraphLookupMaxMemoryBytes': 100}, "
     "'c': {'g': [{'_id': 1, 'to': 2, 'p': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, {'_id': 2, "
     "'p': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}]}}",
     "{'p': [{'$graphLookup': {'from': 'g', 'startWith': 1, 'connectFromField': 'to', "
     "'connectToField': '_id', 'as': 'r'}}]}",
     NULL, 40099},
    {"{'d': [{'k': 1}], 'knobs': {'internalLookupStageIntermediateDocumentMaxSizeBytes': 100}, "
     "'c': {'f': [{'fk': 1, 'p': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, {'fk': 1, 'p': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}]}}",
     "{'p': [{'$lookup': {'from': 'f', 'localField': 'k', 'foreignField': 'fk', 'as': 'j'}}]}",
     NULL, 4568},
    {"{'d': [{'k': 1}], 'knobs': {'internalLookupStageIntermediateDocumentMaxSizeBytes': 100}, "
     "'c': {'f': [{'fk': 1, 'p': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, {'fk': 1, 'p': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}]}}",
     "{'p': [{'$lookup': {'from': 'f', 'pipeline': [{'$match': {'fk': 1}}], 'as': 'j'}}]}", NULL,
     4568},
    {"{'d': [{'k': 1}], 'knobs': {'internalLookupStageIntermediateDocumentMaxSizeBytes': 200}, "
     "'c': {'f': [{'fk': 1, 'p': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, {'fk': 1, 'p': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}]}}",
     "{'p': [{'$lookup': {'from': 'f', 'localField': 'k', 'foreignField': 'fk', 'as': 'j'}}, "
     "{'$project': {'_id': 0, 'n': {'$size': '$j'}}}]}",
     "{'r': [{'n': 2}]}", 0},
    {"{'d': [{'p': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, {'p': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}], 'knobs': "
     "{'internalQueryFacetMaxOutputDocSizeBytes': 100}}",
     "{'p': [{'$facet': {'a': [{'$project': {'_id': 0}}]}}]}", NULL, 4031700},
    {"{'d': [{'p': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, {'p': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}], 'knobs': "
     "{'internalQueryFacetMaxOutputDocSizeBytes': 100}}",
     "{'p': [{'$facet': {'a': [{'$count': 'n'}], 'b': [{'$count': 'n'}]}}]}",
     "{'r': [{'a': [{'n': 2}], 'b': [{'n': 2}]}]}", 0},
    {"{'d': [{'p': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}, {'p': "
     "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}], 'knobs': "
     "{'internalQueryFacetBufferSizeBytes': 100}}",
     "{'p': [{'$facet': {'a': [{'$count': 'n'}]}}]}", NULL, 146},
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

/* A fake environment: collections under 'c' of the input, filtered with the matcher. */
typedef struct fake_cur {
    bson_iter_t it;
    bson_t cur;
    shl_matcher_t *m;
} fake_cur_t;

static int
fake_next(void *arg, const bson_t **doc, shl_status_t *st)
{
    fake_cur_t *c = arg;
    const uint8_t *data;
    uint32_t len;

    for (;;) {
        bool m = true;
        if (!bson_iter_next(&c->it)) {
            *doc = NULL;
            return 0;
        }
        bson_iter_document(&c->it, &len, &data);
        bson_init_static(&c->cur, data, len);
        if (c->m != NULL) {
            int ret = shl_matcher_match(c->m, &c->cur, NULL, &m, st);
            if (ret != 0) {
                return ret;
            }
        }
        if (m) {
            *doc = &c->cur;
            return 0;
        }
    }
}

static int
fake_open(void *arg, const char *coll, const bson_t *filter, shl_pipeline_source_t *src,
          void **cursor, shl_status_t *st)
{
    const bson_t *in = arg;
    fake_cur_t *c = bson_aligned_alloc0(BSON_ALIGNOF(fake_cur_t), sizeof(*c));
    bson_iter_t it, f;
    static const bson_t *empty;
    static bson_t empty_arr = BSON_INITIALIZER;

    (void)empty;
    bson_iter_init(&c->it, &empty_arr);
    if (bson_iter_init_find(&it, in, "c") && bson_iter_recurse(&it, &f) &&
        bson_iter_find(&f, coll)) {
        bson_iter_recurse(&f, &c->it);
    }
    if (filter != NULL && shl_matcher_new(filter, 0, &c->m, st) != 0) {
        bson_free(c);
        return st->code;
    }
    src->next = fake_next;
    src->arg = c;
    *cursor = c;
    return 0;
}

static void
fake_close(void *arg, void *cursor)
{
    fake_cur_t *c = cursor;
    (void)arg;
    shl_matcher_destroy(c->m);
    bson_free(c);
}

static int
fake_stats(void *arg, const char *stage, const bson_t *spec, bson_t *docs, shl_status_t *st)
{
    const bson_t *in = arg;
    bson_iter_t it;
    bson_t d;

    (void)st;
    BSON_APPEND_DOCUMENT_BEGIN(docs, "0", &d);
    if (strcmp(stage, "$collStats") == 0) {
        BSON_APPEND_UTF8(&d, "ns", "test.d");
        if (bson_has_field(spec, "count") && bson_iter_init_find(&it, in, "d")) {
            bson_t arr;
            const uint8_t *data;
            uint32_t len;
            bson_iter_array(&it, &len, &data);
            bson_init_static(&arr, data, len);
            BSON_APPEND_INT32(&d, "count", (int32_t)bson_count_keys(&arr));
        }
    } else {
        BSON_APPEND_UTF8(&d, "name", "_id_");
    }
    bson_append_document_end(docs, &d);
    return 0;
}

/* Set the server parameters of the document 'knobs' (name: value), saving their values in
 * 'saved' first; knobs_restore puts them back. */
static void
knobs_set(const bson_t *knobs, bson_t *saved)
{
    bson_iter_t it;
    shl_status_t st = SHL_STATUS_INIT;

    bson_iter_init(&it, knobs);
    while (bson_iter_next(&it)) {
        int id = shl_opt_find(bson_iter_key(&it));
        SHL_INVARIANT(id >= 0);
        shl_opt_append((shl_opt_id_t)id, saved);
        SHL_INVARIANT(shl_opt_set_iter((shl_opt_id_t)id, &it, &st) == 0);
    }
}

static void
knobs_restore(const bson_t *saved)
{
    bson_iter_t it;
    shl_status_t st = SHL_STATUS_INIT;

    bson_iter_init(&it, saved);
    while (bson_iter_next(&it)) {
        SHL_INVARIANT(shl_opt_set_iter((shl_opt_id_t)shl_opt_find(bson_iter_key(&it)), &it, &st) ==
                      0);
    }
}

/* Run 'pipe' over 'in'; fills 'res' {'r': [...]} and returns the error code. */
static int
run_case(const char *in_json, const char *pipe_json, bson_t *res, shl_status_t *st)
{
    bson_t *in = shl_test_bson(in_json), *pj = shl_test_bson(pipe_json);
    bson_iter_t it, p;
    bson_t stages, arr, knobs, saved = BSON_INITIALIZER;
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
    shl_pipeline_env_t env = {fake_open, fake_close, fake_stats, in};
    shl_pipeline_opts_t opts = {.env = &env};
    if (bson_iter_init_find(&it, in, "mem")) {
        opts.max_memory_bytes = bson_iter_as_int64(&it); /* a small per-stage limit */
    }
    if (bson_iter_init_find(&it, in, "knobs")) {
        bson_iter_document(&it, &len, &data);
        bson_init_static(&knobs, data, len);
        knobs_set(&knobs, &saved);
    }
    SHL_ERR(shl_pipeline_parse(&stages, &opts, &pl, st));
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
    knobs_restore(&saved);
    bson_destroy(&saved);
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
        if (getenv("PIPE_TRACE"))
            fprintf(stderr, "case %zu\n", i);
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

/* Every stage with arguments of every shape: parse and run must either work or fail with a
 * status, never crash or leak (run under valgrind/ASan). */
SHL_TEST(pipeline_stage_args_never_crash)
{
    static const char *const stages[] = {
        "$match",       "$project",     "$addFields",       "$set",         "$unset",
        "$group",       "$sort",        "$limit",           "$skip",        "$count",
        "$sortByCount", "$unwind",      "$replaceRoot",     "$replaceWith", "$bucket",
        "$bucketAuto",  "$facet",       "$lookup",          "$unionWith",   "$sample",
        "$documents",   "$collStats",   "$indexStats",      "$out",         "$merge",
        "$redact",      "$graphLookup", "$setWindowFields", "$densify",     "$fill"};
    static const char *const args[] = {
        "null",
        "1",
        "-1",
        "'s'",
        "'$a'",
        "[]",
        "{}",
        "[{}]",
        "[1, 'x']",
        "{'a': 1}",
        "{'_id': '$a', 'x': {'$topN': {'n': 2, 'output': '$a', 'sortBy': {'a': 1}}}}",
        "{'groupBy': '$a', 'boundaries': [0, 5, 10], 'default': 'o'}",
        "{'groupBy': '$a', 'buckets': 2, 'granularity': 'E12'}",
        "{'f': [{'$match': {}}], 'g': [{'$count': 'n'}]}",
        "{'from': 'f', 'localField': 'a', 'foreignField': 'a', 'as': 'j'}",
        "{'from': 'f', 'let': {'v': '$a'}, 'pipeline': [{'$match': {'$expr': '$$v'}}], 'as': "
        "'j'}",
        "{'coll': 'f', 'pipeline': [{'$limit': 1}]}",
        "{'size': 2}",
        "[{'a': 1}, {'a': 2}]",
        "{'count': {}, 'storageStats': {}}",
        "{'into': 'x', 'on': 'a', 'whenMatched': [{'$set': "
        "{'b': 1}}]}",
        "{'$cond': [true, '$$DESCEND', '$$PRUNE']}",
        "{'path': '$a', 'includeArrayIndex': 'i'}",
        "{'newRoot': '$a'}",
        "{'a': {'$sum': 1}}",
        "{'partitionBy': '$a', 'sortBy': {'a': 1}, 'output': {'r': {'$rank': {}}, 's': {'$sum': "
        "'$a', 'window': {'range': [-1, 'current']}}, 'h': {'$shift': {'output': '$a', 'by': "
        "-1}}}}",
        "{'sortBy': {'a': -1}, 'output': {'m': {'$max': '$a', 'window': {'documents': [-1, 1]}}, "
        "'l': {'$linearFill': '$a'}, 'f': {'$locf': '$a'}}}",
        "{'sortBy': {'a': 1}, 'output': {'d': {'$push': '$a', 'window': {'range': [-1, 1], "
        "'unit': 'day'}}}}",
        "{'field': 'a', 'partitionByFields': ['b'], 'range': {'step': 1, 'bounds': 'full'}}",
        "{'field': 'a', 'range': {'step': 2, 'bounds': [0, 5]}}",
        "{'field': 'a', 'range': {'step': 1, 'unit': 'day', 'bounds': 'full'}}",
        "{'sortBy': {'a': 1}, 'output': {'a': {'method': 'linear'}, 'b': {'value': 1}}}",
        "{'partitionByFields': ['b'], 'output': {'a': {'method': 'locf'}}}"};
    char stage_json[2048];
    int ran = 0;

    for (size_t i = 0; i < sizeof(stages) / sizeof(stages[0]); i++) {
        for (size_t j = 0; j < sizeof(args) / sizeof(args[0]); j++) {
            shl_status_t st = SHL_STATUS_INIT;
            bson_t res;
            snprintf(stage_json, sizeof(stage_json), "{'p': [{'%s': %s}]}", stages[i], args[j]);
            int code =
                run_case("{'d': [{'a': 3}, {'a': [1, {'b': 2}]}, {}, {'a': 'x'}, {'a': {'$date': "
                         "0}, 'b': 1}, {'a': 2.5, 'b': 1}], 'c': "
                         "{'f': [{'a': 3}, {'a': null}]}}",
                         stage_json, &res, &st);
            ASSERT(code >= 0);
            ran += code == 0;
            bson_destroy(&res);
            shl_status_clear(&st);
        }
    }
    ASSERT(ran > 20);
}

/* Every stage name is found in the stage table (a row out of order would not be: the lookup is
 * a binary search), and the table's split property is what the router relies on. */
SHL_TEST(pipeline_stage_table_lookup)
{
    static const char *const names[] = {
        "$addFields",       "$bucket",      "$bucketAuto",  "$collStats",   "$count",
        "$currentOp",       "$densify",     "$documents",   "$facet",       "$fill",
        "$graphLookup",     "$group",       "$indexStats",  "$limit",       "$listLocalSessions",
        "$lookup",          "$match",       "$merge",       "$out",         "$project",
        "$redact",          "$replaceRoot", "$replaceWith", "$sample",      "$set",
        "$setWindowFields", "$skip",        "$sort",        "$sortByCount", "$unionWith",
        "$unset",           "$unwind"};
    static const char *const streaming[] = {"$match", "$project", "$addFields",   "$set",
                                            "$unset", "$unwind",  "$replaceRoot", "$replaceWith"};
    char json[128];

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        shl_status_t st = SHL_STATUS_INIT;
        bson_t *pj;
        shl_pipeline_t *pl = NULL;
        snprintf(json, sizeof(json), "{'0': {'%s': 'not a valid argument'}}", names[i]);
        pj = shl_test_bson(json);
        if (shl_pipeline_parse(pj, NULL, &pl, &st) != 0) {
            ASSERT(st.code != 40324);
        }
        shl_pipeline_destroy(pl);
        bson_destroy(pj);
        shl_status_clear(&st);
    }
    {
        shl_status_t st = SHL_STATUS_INIT;
        bson_t *pj = shl_test_bson("{'0': {'$nope': {}}}");
        shl_pipeline_t *pl = NULL;
        ASSERT_INT_EQ(shl_pipeline_parse(pj, NULL, &pl, &st), 40324);
        ASSERT(strcmp(st.reason, "Unrecognized pipeline stage name: '$nope'") == 0);
        bson_destroy(pj);
        shl_status_clear(&st);
    }
    for (size_t i = 0; i < sizeof(streaming) / sizeof(streaming[0]); i++) {
        ASSERT(shl_pipeline_stage_split(streaming[i]) == SHL_PIPELINE_SPLIT_STREAMING);
    }
    ASSERT(shl_pipeline_stage_split("$collStats") == SHL_PIPELINE_SPLIT_EACH_SHARD);
    ASSERT(shl_pipeline_stage_split("$indexStats") == SHL_PIPELINE_SPLIT_EACH_SHARD);
    ASSERT(shl_pipeline_stage_split("$redact") == SHL_PIPELINE_SPLIT_MERGER);
    ASSERT(shl_pipeline_stage_split("$group") == SHL_PIPELINE_SPLIT_MERGER);
    ASSERT(shl_pipeline_stage_split("$nope") == SHL_PIPELINE_SPLIT_MERGER);
}
