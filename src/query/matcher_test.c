/*
 * matcher_test.c -- table-driven matcher cases: (document, filter, expected), where the
 * expectation is MATCH, NO, or a MongoDB error code, as MongoDB 7.0 answers them (cases
 * follow the jstests in jstests/core/query and the operator reference).
 */
#include <string.h>

#include "base/unit_test.h"
#include "query/matcher.h"

/* libbson's JSON parser reads {"$type": ..} and {"$regex": .., "$options": ..} as legacy
 * extended JSON, so tables spell those operators $tYpE / $rEgEx / $oPtIoNs and tb() patches
 * the keys (same length) in the BSON bytes. */
static bson_t *
tb(const char *json)
{
    bson_t *b = shl_test_bson(json);
    uint8_t *data = bson_malloc(b->len);
    bson_t *out;
    memcpy(data, bson_get_data(b), b->len);
    static const char *const swaps[][2] = {
        {"$tYpE", "$type"}, {"$rEgEx", "$regex"}, {"$oPtIoNs", "$options"}};
    for (size_t s = 0; s < 3; s++) {
        size_t l = strlen(swaps[s][0]) + 1;
        for (uint32_t i = 0; i + l <= b->len; i++) {
            if (memcmp(data + i, swaps[s][0], l) == 0) {
                memcpy(data + i, swaps[s][1], l);
            }
        }
    }
    out = bson_new_from_data(data, b->len);
    bson_free(data);
    bson_destroy(b);
    return out;
}

#define MATCH 1
#define NO 0

typedef struct mcase {
    const char *doc;
    const char *filter;
    int want; /* MATCH, NO or an error code (>= 2) */
} mcase_t;

static const mcase_t cases[] = {
    /* equality, dotted paths, arrays */
    {"{'a': 1}", "{'a': 1}", MATCH},
    {"{'a': 1}", "{'a': 2}", NO},
    {"{'a': 1}", "{'a': 1.0}", MATCH},
    {"{'a': {'$numberLong': '1'}}", "{'a': 1}", MATCH},
    {"{'a': {'$numberDecimal': '1.0'}}", "{'a': 1}", MATCH},
    {"{'a': 'x'}", "{'a': 'x'}", MATCH},
    {"{'a': [1, 2, 3]}", "{'a': 2}", MATCH},
    {"{'a': [1, 2, 3]}", "{'a': [1, 2, 3]}", MATCH},
    {"{'a': [1, 2, 3]}", "{'a': [1, 2]}", NO},
    {"{'a': [[1, 2], 3]}", "{'a': [1, 2]}", MATCH},
    {"{'a': {'b': 1}}", "{'a.b': 1}", MATCH},
    {"{'a': {'b': 1, 'c': 2}}", "{'a': {'b': 1}}", NO},
    {"{'a': {'b': 1, 'c': 2}}", "{'a': {'c': 2, 'b': 1}}", NO},
    {"{'a': {'b': 1, 'c': 2}}", "{'a': {'b': 1, 'c': 2}}", MATCH},
    {"{'a': [{'b': 1}, {'b': 2}]}", "{'a.b': 2}", MATCH},
    {"{'a': [{'b': [1, 2]}, {'b': 3}]}", "{'a.b': 2}", MATCH},
    {"{'a': [{'b': [1, 2]}, {'b': 3}]}", "{'a.b': [1, 2]}", MATCH},
    {"{'a': [[{'b': 1}]]}", "{'a.b': 1}", NO},
    {"{'a': [1, 2]}", "{'a.0': 1}", MATCH},
    {"{'a': [1, 2]}", "{'a.1': 1}", NO},
    {"{'a': {'0': 5}}", "{'a.0': 5}", MATCH},
    {"{'a': [{'0': 5}]}", "{'a.0': 5}", MATCH},
    {"{'a': [{'b': 1}, {'b': 2}]}", "{'a.1.b': 2}", MATCH},
    {"{'a': [{'b': 1}, {'b': 2}]}", "{'a.0.b': 2}", NO},
    {"{'a': [[1, 2], [3]]}", "{'a.0.1': 2}", MATCH},
    {"{'a': [[1, 2], [3]]}", "{'a.1': [3]}", MATCH},
    {"{'a': {'b': {'c': 1}}}", "{'a.b.c': 1}", MATCH},
    {"{'a': 5}", "{'a.b': 5}", NO},
    {"{'': 1}", "{'': 1}", MATCH},
    /* null and missing */
    {"{'a': null}", "{'a': null}", MATCH},
    {"{}", "{'a': null}", MATCH},
    {"{'a': 1}", "{'a': null}", NO},
    {"{'a': {'$undefined': true}}", "{'a': null}", MATCH},
    {"{'a': [1, null]}", "{'a': null}", MATCH},
    {"{'a': [1, 2]}", "{'a': null}", NO},
    {"{'a': 5}", "{'a.b': null}", MATCH},
    {"{'a': [{'b': 1}, {'c': 1}]}", "{'a.b': null}", MATCH},
    {"{'a': [{'b': 1}]}", "{'a.b': null}", NO},
    {"{'a': [1, 2]}", "{'a.b': null}", NO},
    {"{'a': []}", "{'a.b': null}", NO},
    {"{}", "{'a': {'$ne': null}}", NO},
    {"{'a': 1}", "{'a': {'$ne': null}}", MATCH},
    {"{}", "{'a': {'$gte': null}}", MATCH},
    {"{}", "{'a': {'$lte': null}}", MATCH},
    {"{}", "{'a': {'$gt': null}}", NO},
    {"{}", "{'a': {'$lt': null}}", NO},
    {"{'a': null}", "{'a': {'$exists': true}}", MATCH},
    {"{}", "{'a': {'$in': [null]}}", MATCH},
    {"{}", "{'a': {'$nin': [null]}}", NO},
    {"{'a': 1}", "{'a': {'$nin': [null]}}", MATCH},
    /* comparisons and type bracketing */
    {"{'a': 5}", "{'a': {'$gt': 4}}", MATCH},
    {"{'a': 5}", "{'a': {'$gt': 5}}", NO},
    {"{'a': 5}", "{'a': {'$gte': 5}}", MATCH},
    {"{'a': 5}", "{'a': {'$lt': 5.5}}", MATCH},
    {"{'a': 5}", "{'a': {'$lte': 4}}", NO},
    {"{'a': 'abc'}", "{'a': {'$gt': 5}}", NO},
    {"{'a': 5}", "{'a': {'$lt': 'abc'}}", NO},
    {"{'a': 'b'}", "{'a': {'$gt': 'a'}}", MATCH},
    {"{'a': [1, 10]}", "{'a': {'$gt': 5, '$lt': 8}}", MATCH},
    {"{'a': [1, 10]}", "{'a': {'$elemMatch': {'$gt': 5, '$lt': 8}}}", NO},
    {"{'a': [1, 6]}", "{'a': {'$elemMatch': {'$gt': 5, '$lt': 8}}}", MATCH},
    {"{'a': [1, 2]}", "{'a': {'$gt': [1]}}", MATCH},
    {"{'a': [1, 2]}", "{'a': {'$lt': [1]}}", NO},
    {"{'a': {'b': 1}}", "{'a': {'$gt': {'a': 1}}}", MATCH},
    {"{'a': {'$date': '2020-01-01T00:00:00Z'}}",
     "{'a': {'$gt': {'$date': '2019-01-01T00:00:00Z'}}}", MATCH},
    {"{'a': {'$date': '2020-01-01T00:00:00Z'}}", "{'a': {'$gt': 5}}", NO},
    {"{'a': true}", "{'a': {'$gt': false}}", MATCH},
    {"{'a': 1}", "{'a': {'$lt': {'$maxKey': 1}}}", MATCH},
    {"{'a': 'x'}", "{'a': {'$gt': {'$minKey': 1}}}", MATCH},
    {"{'a': 'x'}", "{'a': {'$lt': {'$minKey': 1}}}", NO},
    {"{}", "{'a': {'$gt': {'$minKey': 1}}}", MATCH},
    {"{'a': {'$maxKey': 1}}", "{'a': {'$gte': {'$maxKey': 1}}}", MATCH},
    {"{'a': NaN}", "{'a': NaN}", MATCH},
    {"{'a': NaN}", "{'a': {'$gt': 0}}", NO},
    {"{'a': NaN}", "{'a': {'$lt': 0}}", NO},
    {"{'a': NaN}", "{'a': {'$gte': NaN}}", MATCH},
    {"{'a': NaN}", "{'a': {'$gt': NaN}}", NO},
    {"{'a': 1}", "{'a': {'$eq': 1}}", MATCH},
    {"{'a': [1, 2]}", "{'a': {'$ne': 1}}", NO},
    {"{'a': [1, 2]}", "{'a': {'$ne': 3}}", MATCH},
    {"{'a': {'$regularExpression': {'pattern': 'x', 'options': ''}}}",
     "{'a': {'$eq': {'$regularExpression': {'pattern': 'x', 'options': ''}}}}", MATCH},
    /* $in / $nin */
    {"{'a': 2}", "{'a': {'$in': [1, 2]}}", MATCH},
    {"{'a': 3}", "{'a': {'$in': [1, 2]}}", NO},
    {"{'a': [3, 2]}", "{'a': {'$in': [1, 2]}}", MATCH},
    {"{'a': 'abc'}", "{'a': {'$in': [{'$regularExpression': {'pattern': '^a', 'options': ''}}]}}",
     MATCH},
    {"{'a': 'ABC'}",
     "{'a': {'$in': [{'$regularExpression': {'pattern': '^a', 'options': 'i'}}, 5]}}", MATCH},
    {"{'a': [1, 2]}", "{'a': {'$in': [[1, 2]]}}", MATCH},
    {"{'a': 1}", "{'a': {'$in': []}}", NO},
    {"{'a': 1}", "{'a': {'$nin': []}}", MATCH},
    {"{'a': 2}", "{'a': {'$nin': [1, 2]}}", NO},
    {"{'a': 1}", "{'a': {'$in': [1.0]}}", MATCH},
    /* logical */
    {"{'a': 1, 'b': 2}", "{'$and': [{'a': 1}, {'b': 2}]}", MATCH},
    {"{'a': 1, 'b': 3}", "{'$and': [{'a': 1}, {'b': 2}]}", NO},
    {"{'a': 1}", "{'$or': [{'a': 2}, {'a': 1}]}", MATCH},
    {"{'a': 3}", "{'$or': [{'a': 2}, {'a': 1}]}", NO},
    {"{'a': 3}", "{'$nor': [{'a': 2}, {'a': 1}]}", MATCH},
    {"{'a': 1}", "{'$nor': [{'a': 2}, {'a': 1}]}", NO},
    {"{'a': 5}", "{'a': {'$not': {'$gt': 6}}}", MATCH},
    {"{'a': 7}", "{'a': {'$not': {'$gt': 6}}}", NO},
    {"{}", "{'a': {'$not': {'$gt': 6}}}", MATCH},
    {"{'a': 'xyz'}", "{'a': {'$not': {'$regularExpression': {'pattern': '^x', 'options': ''}}}}",
     NO},
    {"{'a': 'abc'}", "{'a': {'$not': {'$regularExpression': {'pattern': '^x', 'options': ''}}}}",
     MATCH},
    {"{'a': 1}", "{'$and': [{'$or': [{'a': 1}, {'b': 1}]}, {'$nor': [{'c': 1}]}]}", MATCH},
    {"{'a': 1}", "{'$alwaysTrue': 1}", MATCH},
    {"{'a': 1}", "{'$alwaysFalse': 1}", NO},
    {"{'a': 1}", "{'$comment': 'hello', 'a': 1}", MATCH},
    {"{'a': 1}", "{}", MATCH},
    /* $exists */
    {"{'a': 1}", "{'a': {'$exists': true}}", MATCH},
    {"{'a': 1}", "{'b': {'$exists': true}}", NO},
    {"{'a': 1}", "{'b': {'$exists': false}}", MATCH},
    {"{'a': 1}", "{'b': {'$exists': 0}}", MATCH},
    {"{'a': [{'b': 1}, {}]}", "{'a.b': {'$exists': false}}", NO},
    {"{'a': [{'c': 1}, {}]}", "{'a.b': {'$exists': false}}", MATCH},
    {"{'a': [{'b': 1}]}", "{'a.b': {'$exists': false}}", NO},
    {"{'a': [1]}", "{'a.b': {'$exists': false}}", MATCH},
    {"{'a': []}", "{'a': {'$exists': true}}", MATCH},
    /* $type */
    {"{'a': 1}", "{'a': {'$tYpE': 'int'}}", MATCH},
    {"{'a': 1}", "{'a': {'$tYpE': 16}}", MATCH},
    {"{'a': 1}", "{'a': {'$tYpE': 'double'}}", NO},
    {"{'a': 1.5}", "{'a': {'$tYpE': 'number'}}", MATCH},
    {"{'a': 'x'}", "{'a': {'$tYpE': 'number'}}", NO},
    {"{'a': 'x'}", "{'a': {'$tYpE': ['number', 'string']}}", MATCH},
    {"{'a': [1]}", "{'a': {'$tYpE': 'array'}}", MATCH},
    {"{'a': [1, 'x']}", "{'a': {'$tYpE': 'string'}}", MATCH},
    {"{'a': []}", "{'a': {'$tYpE': 'array'}}", MATCH},
    {"{'a': null}", "{'a': {'$tYpE': 'null'}}", MATCH},
    {"{}", "{'a': {'$tYpE': 'null'}}", NO},
    {"{'a': {'$minKey': 1}}", "{'a': {'$tYpE': 'minKey'}}", MATCH},
    {"{'a': {'$maxKey': 1}}", "{'a': {'$tYpE': 127}}", MATCH},
    {"{'a': {'$numberLong': '5'}}", "{'a': {'$tYpE': 'long'}}", MATCH},
    {"{'a': {'$oid': '5f0000000000000000000000'}}", "{'a': {'$tYpE': 'objectId'}}", MATCH},
    {"{'a': 1}", "{'a': {'$tYpE': 2.0}}", NO},
    /* $regex */
    {"{'a': 'hello'}", "{'a': {'$rEgEx': '^h'}}", MATCH},
    {"{'a': 'Hello'}", "{'a': {'$rEgEx': '^h'}}", NO},
    {"{'a': 'Hello'}", "{'a': {'$rEgEx': '^h', '$oPtIoNs': 'i'}}", MATCH},
    {"{'a': 'Hello'}", "{'a': {'$oPtIoNs': 'i', '$rEgEx': '^h'}}", MATCH},
    {"{'a': 'a\\nb'}", "{'a': {'$rEgEx': '^b', '$oPtIoNs': 'm'}}", MATCH},
    {"{'a': 'a\\nb'}", "{'a': {'$rEgEx': '^b'}}", NO},
    {"{'a': 'a\\nb'}", "{'a': {'$rEgEx': 'a.b', '$oPtIoNs': 's'}}", MATCH},
    {"{'a': 'ab'}", "{'a': {'$rEgEx': 'a b', '$oPtIoNs': 'x'}}", MATCH},
    {"{'a': 'hello'}", "{'a': {'$regularExpression': {'pattern': 'ell', 'options': ''}}}", MATCH},
    {"{'a': ['x', 'hello']}", "{'a': {'$rEgEx': '^he'}}", MATCH},
    {"{'a': 5}", "{'a': {'$rEgEx': '5'}}", NO},
    {"{'a': {'$symbol': 'hello'}}", "{'a': {'$rEgEx': '^h'}}", MATCH},
    {"{'a': {'$regularExpression': {'pattern': 'x', 'options': 'i'}}}",
     "{'a': {'$regularExpression': {'pattern': 'x', 'options': 'i'}}}", MATCH},
    {"{'a': 'héllo'}", "{'a': {'$rEgEx': '^h.llo$'}}", MATCH},
    /* $mod */
    {"{'a': 10}", "{'a': {'$mod': [3, 1]}}", MATCH},
    {"{'a': 10}", "{'a': {'$mod': [3, 2]}}", NO},
    {"{'a': 10.9}", "{'a': {'$mod': [3, 1]}}", MATCH},
    {"{'a': -10}", "{'a': {'$mod': [3, -1]}}", MATCH},
    {"{'a': 'x'}", "{'a': {'$mod': [3, 1]}}", NO},
    {"{'a': [4, 5]}", "{'a': {'$mod': [5, 0]}}", MATCH},
    {"{'a': 10}", "{'a': {'$mod': [3.9, 1.2]}}", MATCH},
    /* $all */
    {"{'a': [1, 2, 3]}", "{'a': {'$all': [1, 3]}}", MATCH},
    {"{'a': [1, 2, 3]}", "{'a': {'$all': [1, 4]}}", NO},
    {"{'a': 1}", "{'a': {'$all': [1]}}", MATCH},
    {"{'a': [1]}", "{'a': {'$all': []}}", NO},
    {"{'a': [[1, 2]]}", "{'a': {'$all': [[1, 2]]}}", MATCH},
    {"{'a': ['abc', 'x']}",
     "{'a': {'$all': [{'$regularExpression': {'pattern': '^a', 'options': ''}}, 'x']}}", MATCH},
    {"{'a': [{'b': 1, 'c': 2}, {'b': 3}]}",
     "{'a': {'$all': [{'$elemMatch': {'b': 1}}, {'$elemMatch': {'b': 3}}]}}", MATCH},
    {"{'a': [{'b': 1, 'c': 2}]}",
     "{'a': {'$all': [{'$elemMatch': {'b': 1}}, {'$elemMatch': {'b': 3}}]}}", NO},
    /* $elemMatch */
    {"{'a': [{'b': 1, 'c': 1}, {'b': 2, 'c': 2}]}", "{'a': {'$elemMatch': {'b': 1, 'c': 2}}}", NO},
    {"{'a': [{'b': 1, 'c': 1}, {'b': 2, 'c': 2}]}", "{'a': {'$elemMatch': {'b': 2, 'c': 2}}}",
     MATCH},
    {"{'a': [{'b': 1, 'c': 1}, {'b': 2, 'c': 2}]}", "{'a.b': 1, 'a.c': 2}", MATCH},
    {"{'a': {'b': 1}}", "{'a': {'$elemMatch': {'b': 1}}}", NO},
    {"{'a': [[1, 2], [3]]}", "{'a': {'$elemMatch': {'$elemMatch': {'$eq': 3}}}}", MATCH},
    {"{'a': [1, 2]}", "{'a': {'$elemMatch': {}}}", NO},
    {"{'a': [{}, 2]}", "{'a': {'$elemMatch': {}}}", MATCH},
    {"{'a': [1, 5]}", "{'a': {'$elemMatch': {'$not': {'$gt': 3}}}}", MATCH},
    {"{'a': [5, 6]}", "{'a': {'$elemMatch': {'$not': {'$gt': 3}}}}", NO},
    {"{'a': [{'b': [{'c': 1}]}]}", "{'a': {'$elemMatch': {'b': {'$elemMatch': {'c': 1}}}}}", MATCH},
    {"{'a': [{'b': 1}, {'b': 2}]}", "{'a': {'$elemMatch': {'$or': [{'b': 5}, {'b': 2}]}}}", MATCH},
    {"{'x': [{'a': [{'b': 1}]}]}", "{'x.a': {'$elemMatch': {'b': 1}}}", MATCH},
    {"{'a': [[1, 2]]}", "{'a': {'$elemMatch': {'0': 1}}}", MATCH},
    /* $size */
    {"{'a': [1, 2]}", "{'a': {'$size': 2}}", MATCH},
    {"{'a': [1, 2]}", "{'a': {'$size': 1}}", NO},
    {"{'a': []}", "{'a': {'$size': 0}}", MATCH},
    {"{'a': 1}", "{'a': {'$size': 1}}", NO},
    {"{'a': [[1, 2]]}", "{'a': {'$size': 2}}", NO},
    {"{'a': [{'b': [1, 2]}]}", "{'a.b': {'$size': 2}}", MATCH},
    {"{'a': [1, 2]}", "{'a': {'$size': 2.0}}", MATCH},
    /* bit tests */
    {"{'a': 54}", "{'a': {'$bitsAllSet': [1, 5]}}", MATCH},
    {"{'a': 54}", "{'a': {'$bitsAllSet': [0, 1]}}", NO},
    {"{'a': 54}", "{'a': {'$bitsAllSet': 50}}", MATCH},
    {"{'a': 54}", "{'a': {'$bitsAnySet': [0, 1]}}", MATCH},
    {"{'a': 54}", "{'a': {'$bitsAllClear': [0, 3]}}", MATCH},
    {"{'a': 54}", "{'a': {'$bitsAnyClear': [1, 2]}}", NO},
    {"{'a': -1}", "{'a': {'$bitsAllSet': [100]}}", MATCH},
    {"{'a': 1.5}", "{'a': {'$bitsAnySet': [0]}}", NO},
    {"{'a': 'x'}", "{'a': {'$bitsAnySet': [0]}}", NO},
    {"{'a': {'$binary': {'base64': 'IA==', 'subType': '00'}}}", "{'a': {'$bitsAllSet': [5]}}",
     MATCH},
    {"{'a': {'$binary': {'base64': 'IA==', 'subType': '00'}}}",
     "{'a': {'$bitsAllSet': {'$binary': {'base64': 'IA==', 'subType': '00'}}}}", MATCH},
    {"{'a': 32}", "{'a': {'$bitsAllSet': {'$binary': {'base64': 'IA==', 'subType': '00'}}}}",
     MATCH},
    /* $expr */
    {"{'a': 5, 'b': 3}", "{'$expr': {'$gt': ['$a', '$b']}}", MATCH},
    {"{'a': 1, 'b': 3}", "{'$expr': {'$gt': ['$a', '$b']}}", NO},
    {"{'a': 'x', 'b': 3}", "{'$expr': {'$gt': ['$a', '$b']}}", MATCH},
    {"{'a': 1}", "{'$expr': {'$eq': ['$b', null]}}", NO},
    {"{'a': 1}", "{'$expr': {'$lt': ['$b', null]}}", MATCH},
    {"{'a': 1}", "{'$expr': {'$and': [{'$eq': ['$a', 1]}, {'$not': [false]}]}}", MATCH},
    {"{'a': 1}", "{'$expr': '$a'}", MATCH},
    {"{'a': 0}", "{'$expr': '$a'}", NO},
    {"{'a': [{'b': 1}, {'b': 2}]}", "{'$expr': {'$eq': ['$a.b', [1, 2]]}}", MATCH},
    {"{'a': 1}", "{'$expr': {'$eq': [{'$add': ['$a', 1]}, 2]}}", MATCH},
    {"{'a': 1}", "{'$or': [{'$expr': {'$eq': ['$a', 2]}}, {'a': 1}]}", MATCH},
    /* DBRef and $-less objects */
    {"{'r': {'$ref': 'c', '$id': 1}}", "{'r': {'$ref': 'c', '$id': 1}}", MATCH},
    {"{'a': {}}", "{'a': {}}", MATCH},
    {"{'a': {'b': 1}}", "{'a': {}}", NO},
    /* errors */
    {"{}", "{'a': {'$foo': 1}}", 2},
    {"{}", "{'$foo': 1}", 2},
    {"{}", "{'$not': {'a': 1}}", 2},
    {"{}", "{'a': {'$in': 1}}", 2},
    {"{}", "{'a': {'$nin': 1}}", 2},
    {"{}", "{'a': {'$in': [{'$gt': 1}]}}", 2},
    {"{}", "{'$and': []}", 2},
    {"{}", "{'$or': 1}", 2},
    {"{}", "{'$nor': [1]}", 2},
    {"{}", "{'a': {'$rEgEx': '('}}", 51091},
    {"{}", "{'a': {'$rEgEx': 'a', '$oPtIoNs': 'z'}}", 51108},
    {"{}", "{'a': {'$oPtIoNs': 'i'}}", 2},
    {"{}", "{'a': {'$rEgEx': 5}}", 2},
    {"{}",
     "{'a': {'$rEgEx': {'$regularExpression': {'pattern': 'a', 'options': 'i'}}, "
     "'$oPtIoNs': 'm'}}",
     51075},
    {"{}", "{'a': {'$gt': {'$regularExpression': {'pattern': 'a', 'options': ''}}}}", 2},
    {"{}", "{'a': {'$ne': {'$regularExpression': {'pattern': 'a', 'options': ''}}}}", 2},
    {"{}", "{'a': {'$eq': {'$undefined': true}}}", 2},
    {"{}", "{'a': {'$in': [{'$undefined': true}]}}", 2},
    {"{}", "{'a': {'$size': -1}}", 2},
    {"{}", "{'a': {'$size': 'x'}}", 2},
    {"{}", "{'a': {'$size': 1.5}}", 2},
    {"{}", "{'a': {'$tYpE': 'foo'}}", 2},
    {"{}", "{'a': {'$tYpE': 99}}", 2},
    {"{}", "{'a': {'$tYpE': []}}", 9},
    {"{}", "{'a': {'$tYpE': {}}}", 14},
    {"{}", "{'a': {'$mod': [0, 1]}}", 2},
    {"{}", "{'a': {'$mod': [1]}}", 2},
    {"{}", "{'a': {'$mod': [1, 2, 3]}}", 2},
    {"{}", "{'a': {'$mod': 5}}", 2},
    {"{}", "{'a': {'$all': 1}}", 2},
    {"{}", "{'a': {'$all': [{'$elemMatch': {'b': 1}}, 5]}}", 2},
    {"{}", "{'a': {'$all': [{'$gt': 1}]}}", 2},
    {"{}", "{'a': {'$elemMatch': 1}}", 2},
    {"{}", "{'a': {'$not': 1}}", 2},
    {"{}", "{'a': {'$not': {}}}", 2},
    {"{}", "{'a': {'$bitsAllSet': 'x'}}", 2},
    {"{}", "{'a': {'$bitsAllSet': [-1]}}", 2},
    {"{}", "{'a': {'$bitsAllSet': -1}}", 9},
    {"{}", "{'a': {'$elemMatch': {'$expr': {'$eq': [1, 1]}}}}", 2},
    {"{}", "{'$expr': {'$foo': 1}}", 168},
    {"{}", "{'$expr': {'$eq': [1]}}", 16020},
    {"{}", "{'$where': 'true'}", 2},
    {"{}", "{'$text': {'$search': 'x'}}", 27},
    {"{}", "{'loc': {'$near': [0, 0]}}", 291},
    {"{}", "{'a': {'$where': 'x'}}", 2},
    {"{}", "{'$alwaysTrue': 2}", 9},
    {"{}", "{'$jsonSchema': 1}", 14},
    /* $jsonSchema: keywords apply to values of their kind; properties only when present */
    {"{'a': 1}", "{'$jsonSchema': {}}", MATCH},
    {"{'a': 1}", "{'$jsonSchema': {'required': ['a']}}", MATCH},
    {"{'b': 1}", "{'$jsonSchema': {'required': ['a']}}", NO},
    {"{'a': 5}", "{'$jsonSchema': {'properties': {'a': {'bsonType': 'int', 'minimum': 5}}}}",
     MATCH},
    {"{'a': 4}", "{'$jsonSchema': {'properties': {'a': {'minimum': 5}}}}", NO},
    {"{'a': 5}", "{'$jsonSchema': {'properties': {'a': {'minimum': 5, 'exclusiveMinimum': true}}}}",
     NO},
    {"{'a': 'x'}", "{'$jsonSchema': {'properties': {'a': {'minimum': 5}}}}", MATCH},
    {"{'a': 5.5}", "{'$jsonSchema': {'properties': {'a': {'bsonType': 'int'}}}}", NO},
    {"{'a': 5.5}", "{'$jsonSchema': {'properties': {'a': {'bsonType': ['int', 'double']}}}}",
     MATCH},
    {"{'a': 5.5}", "{'$jsonSchema': {'properties': {'a': {'type': 'number', 'maximum': 6}}}}",
     MATCH},
    {"{}", "{'$jsonSchema': {'properties': {'a': {'bsonType': 'int'}}}}", MATCH},
    {"{'s': 'h\u00e9llo'}", "{'$jsonSchema': {'properties': {'s': {'maxLength': 5}}}}", MATCH},
    {"{'s': 'hello!'}", "{'$jsonSchema': {'properties': {'s': {'maxLength': 5}}}}", NO},
    {"{'s': 'abc'}", "{'$jsonSchema': {'properties': {'s': {'pattern': '^a'}}}}", MATCH},
    {"{'s': 'xbc'}", "{'$jsonSchema': {'properties': {'s': {'pattern': '^a'}}}}", NO},
    {"{'e': 'b'}", "{'$jsonSchema': {'properties': {'e': {'enum': ['a', 'b']}}}}", MATCH},
    {"{'e': 'c'}", "{'$jsonSchema': {'properties': {'e': {'enum': ['a', 'b']}}}}", NO},
    {"{'a': 1, 'b': 2}",
     "{'$jsonSchema': {'properties': {'a': {}}, 'additionalProperties': false}}", NO},
    {"{'a': 1}", "{'$jsonSchema': {'properties': {'a': {}}, 'additionalProperties': false}}",
     MATCH},
    {"{'x1': 1, 'x2': 'no'}", "{'$jsonSchema': {'patternProperties': {'^x': {'bsonType': 'int'}}}}",
     NO},
    {"{'o': {'p': 1}}",
     "{'$jsonSchema': {'properties': {'o': {'bsonType': 'object', 'required': ['p']}}}}", MATCH},
    {"{'o': {'q': 1}}",
     "{'$jsonSchema': {'properties': {'o': {'bsonType': 'object', 'required': ['p']}}}}", NO},
    {"{'l': [1, 2, 3]}",
     "{'$jsonSchema': {'properties': {'l': {'items': {'bsonType': 'int'}, 'maxItems': 3}}}}",
     MATCH},
    {"{'l': [1, 'x']}", "{'$jsonSchema': {'properties': {'l': {'items': {'bsonType': 'int'}}}}}",
     NO},
    {"{'l': [1, 1]}", "{'$jsonSchema': {'properties': {'l': {'uniqueItems': true}}}}", NO},
    {"{'l': [1, 'x', 2]}",
     "{'$jsonSchema': {'properties': {'l': {'items': [{'bsonType': 'int'}, {'bsonType': "
     "'string'}], 'additionalItems': false}}}}",
     NO},
    {"{'a': 3}",
     "{'$jsonSchema': {'properties': {'a': {'anyOf': [{'minimum': 5}, {'maximum': 3}]}}}}", MATCH},
    {"{'a': 3}",
     "{'$jsonSchema': {'properties': {'a': {'oneOf': [{'minimum': 0}, {'maximum': 3}]}}}}", NO},
    {"{'a': 3}", "{'$jsonSchema': {'properties': {'a': {'not': {'bsonType': 'int'}}}}}", NO},
    {"{'a': 9}", "{'$jsonSchema': {'properties': {'a': {'multipleOf': 3}}}}", MATCH},
    {"{'a': 1, 'b': 2}", "{'$jsonSchema': {'dependencies': {'a': ['c']}}}", NO},
    {"{'a': 1, 'b': 2}", "{'$jsonSchema': {'minProperties': 2, 'maxProperties': 2}}", MATCH},
    {"{'a': 1}", "{'$jsonSchema': {'bsonType': 'array'}}", NO},
    {"{'a': 1}", "{'$jsonSchema': {'bsonType': 'object'}, 'a': 1}", MATCH},
    {"{}", "{'$jsonSchema': {'foo': 1}}", 9},
    {"{}", "{'$jsonSchema': {'format': 'email'}}", 9},
    {"{}", "{'$jsonSchema': {'properties': {'a': {'$ref': '#/x'}}}}", 9},
    {"{}", "{'$jsonSchema': {'type': 'object', 'bsonType': 'object'}}", 9},
    {"{}", "{'$jsonSchema': {'required': 'a'}}", 14},
    {"{}", "{'$jsonSchema': {'bsonType': 'thing'}}", 2},
    {"{}", "{'$jsonSchema': {'type': 'integer'}}", 2},
    {"{}", "{'$jsonSchema': {'exclusiveMinimum': true}}", 9},
    {"{}", "{'$jsonSchema': {'minLength': -1}}", 9},
};

SHL_TEST(matcher_table)
{
    int failures = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const mcase_t *c = &cases[i];
        bson_t *doc = tb(c->doc), *filter = tb(c->filter);
        shl_matcher_t *m = NULL;
        shl_status_t st = SHL_STATUS_INIT;
        int rc = shl_matcher_new(filter, SHL_MATCHER_DEFAULT, &m, &st);
        int got;
        bool matched = false;
        if (rc == 0) {
            rc = shl_matcher_match(m, doc, NULL, &matched, &st);
        }
        got = rc != 0 ? rc : (matched ? MATCH : NO);
        if (got != c->want) {
            shl_test_fail_here(__FILE__, __LINE__,
                               "case %zu: doc %s filter %s: got %d want %d (%s)", i, c->doc,
                               c->filter, got, c->want, rc ? st.reason : "");
            failures++;
        }
        shl_matcher_destroy(m);
        bson_destroy(doc);
        bson_destroy(filter);
    }
    ASSERT_INT_EQ(failures, 0);
}

SHL_TEST(matcher_error_messages)
{
    static const struct {
        const char *filter;
        const char *msg;
    } msgs[] = {
        {"{'a': {'$foo': 1}}", "unknown operator: $foo"},
        {"{'$and': []}", "$and/$or/$nor must be a nonempty array"},
        {"{'a': {'$in': 1}}", "$in needs an array"},
        {"{'$not': {'a': 1}}", "unknown top level operator: $not. If you are trying to negate an "
                               "entire expression, use $nor."},
        {"{'a': {'$size': -1}}", "Failed to parse $size. Expected a positive number in: $size: -1"},
        {"{'$or': [1]}", "$or/$and/$nor entries need to be full objects"},
        {"{'a': {'$mod': [0, 1]}}", "divisor cannot be 0"},
        {"{'a': {'$tYpE': 'foo'}}", "Unknown type name alias: foo"},
    };
    for (size_t i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++) {
        bson_t *filter = tb(msgs[i].filter);
        shl_matcher_t *m = NULL;
        shl_status_t st = SHL_STATUS_INIT;
        ASSERT(shl_matcher_new(filter, SHL_MATCHER_DEFAULT, &m, &st) != 0);
        ASSERT_STR_EQ(st.reason, msgs[i].msg);
        bson_destroy(filter);
    }
}

/* The array position positional projection and "$" updates use. */
SHL_TEST(matcher_elem_match_key)
{
    static const struct {
        const char *doc, *filter;
        int key; /* -1: none */
    } keys[] = {
        {"{'a': [1, 2, 3]}", "{'a': 2}", 1},
        {"{'a': [{'b': 1}, {'b': 2}]}", "{'a.b': 2}", 1},
        {"{'a': [{'b': [5, 6]}, {'b': [7, 8]}]}", "{'a.b': 8}", 1},
        {"{'a': [1, 2, 3]}", "{'a': {'$elemMatch': {'$gt': 2}}}", 2},
        {"{'a': 5}", "{'a': 5}", -1},
        {"{'a': [1, 2], 'b': [3, 4]}", "{'a': 1, 'b': 4}", 1},
        {"{'a': [1, 2]}", "{'$or': [{'a': 2}]}", -1},
    };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        bson_t *doc = tb(keys[i].doc), *filter = tb(keys[i].filter);
        shl_matcher_t *m = NULL;
        shl_status_t st;
        shl_match_details_t d = {0};
        bool matched = false;
        ASSERT_INT_EQ(shl_matcher_new(filter, SHL_MATCHER_DEFAULT, &m, &st), 0);
        ASSERT_INT_EQ(shl_matcher_match(m, doc, &d, &matched, &st), 0);
        ASSERT(matched);
        ASSERT_INT_EQ(d.has_key ? (int)d.key : -1, keys[i].key);
        shl_matcher_destroy(m);
        bson_destroy(doc);
        bson_destroy(filter);
    }
}

SHL_TEST(matcher_equality_fields)
{
    static const struct {
        const char *filter, *want;
        int code;
    } eqs[] = {
        {"{'a': 1, 'b': {'$gt': 2}}", "{'a': 1}", 0},
        {"{'$and': [{'a': 1}, {'b.c': 'x'}]}", "{'a': 1, 'b.c': 'x'}", 0},
        {"{'a': {'$eq': 5}, 'c': {'$in': [7]}}", "{'a': 5, 'c': 7}", 0},
        {"{'$or': [{'a': 1}]}", "{'a': 1}", 0},
        {"{'$or': [{'a': 1}, {'b': 1}]}", "{}", 0},
        {"{'a': 1, '$and': [{'a': 2}]}", NULL, 54},
        {"{'a': 1, 'a.b': 2}", NULL, 54},
        {"{'_id': 3, 'x': null}", "{'_id': 3, 'x': null}", 0},
    };
    for (size_t i = 0; i < sizeof(eqs) / sizeof(eqs[0]); i++) {
        bson_t *filter = tb(eqs[i].filter), out;
        shl_matcher_t *m = NULL;
        shl_status_t st;
        ASSERT_INT_EQ(shl_matcher_new(filter, SHL_MATCHER_DEFAULT, &m, &st), 0);
        ASSERT_INT_EQ(shl_matcher_equality_fields(m, &out, &st), eqs[i].code);
        if (eqs[i].want != NULL) {
            ASSERT_BSON_EQ(&out, eqs[i].want);
        }
        bson_destroy(&out);
        shl_matcher_destroy(m);
        bson_destroy(filter);
    }
}

/* Parse once, match from several threads: the matcher is read-only. */
#include <pthread.h>

static shl_matcher_t *shared_matcher;

static void *
match_many(void *arg)
{
    bson_t *doc = shl_test_bson("{'a': [{'b': 'xyz'}, {'b': 'abc'}], 'n': 7}");
    long ok = 0;
    (void)arg;
    for (int i = 0; i < 2000; i++) {
        ok += shl_matcher_matches(shared_matcher, doc);
    }
    bson_destroy(doc);
    return (void *)ok;
}

SHL_TEST(matcher_threads)
{
    bson_t *filter = tb("{'a.b': {'$rEgEx': '^a'}, 'n': {'$gt': 5, '$in': [6, 7]}}");
    shl_status_t st;
    pthread_t t[4];
    void *res;
    ASSERT_INT_EQ(shl_matcher_new(filter, SHL_MATCHER_DEFAULT, &shared_matcher, &st), 0);
    for (int i = 0; i < 4; i++) {
        pthread_create(&t[i], NULL, match_many, NULL);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], &res);
        ASSERT_INT_EQ((long)res, 2000);
    }
    shl_matcher_destroy(shared_matcher);
    bson_destroy(filter);
}

/* Collation: (document, filter, collation, expected); the same filter under the simple
 * collation is in the second expectation. */
typedef struct ccase {
    const char *doc;
    const char *filter;
    const char *collation;
    int want, want_simple;
} ccase_t;

static const ccase_t coll_cases[] = {
    {"{'a': 'HELLO'}", "{'a': 'hello'}", "{'locale': 'en', 'strength': 2}", MATCH, NO},
    {"{'a': 'héllo'}", "{'a': 'hello'}", "{'locale': 'en', 'strength': 2}", NO, NO},
    {"{'a': 'héllo'}", "{'a': 'hello'}", "{'locale': 'en', 'strength': 1}", MATCH, NO},
    {"{'a': ['x', 'Y']}", "{'a': 'y'}", "{'locale': 'en', 'strength': 2}", MATCH, NO},
    {"{'a': 'b'}", "{'a': {'$gt': 'B'}}", "{'locale': 'en'}", NO, MATCH}, /* lower first */
    {"{'a': 'c'}", "{'a': {'$gt': 'B'}}", "{'locale': 'en'}", MATCH, MATCH},
    {"{'a': 'a'}", "{'a': {'$gt': 'B'}}", "{'locale': 'en'}", NO, MATCH},
    {"{'a': 'B'}", "{'a': {'$lt': 'a'}}", "{'locale': 'en'}", NO, MATCH},
    {"{'a': '10'}", "{'a': {'$gt': '9'}}", "{'locale': 'en', 'numericOrdering': true}", MATCH,
     NO},
    {"{'a': 'Two'}", "{'a': {'$in': ['one', 'two']}}", "{'locale': 'en', 'strength': 2}", MATCH,
     NO},
    {"{'a': 'Two'}", "{'a': {'$nin': ['one', 'two']}}", "{'locale': 'en', 'strength': 2}", NO,
     MATCH},
    {"{'a': 'Two'}", "{'a': {'$ne': 'two'}}", "{'locale': 'en', 'strength': 2}", NO, MATCH},
    {"{'a': {'b': 'X'}}", "{'a': {'b': 'x'}}", "{'locale': 'en', 'strength': 2}", MATCH, NO},
    {"{'a': [{'b': 'X'}]}", "{'a': {'$elemMatch': {'b': 'x'}}}",
     "{'locale': 'en', 'strength': 2}", MATCH, NO},
    {"{'a': 'a b'}", "{'a': 'ab'}", "{'locale': 'en', 'alternate': 'shifted'}", MATCH, NO},
    {"{'a': 'ABC'}", "{'a': {'$rEgEx': '^abc'}}", "{'locale': 'en', 'strength': 2}", NO, NO},
    {"{'a': 1}", "{'a': 1.0}", "{'locale': 'en', 'strength': 2}", MATCH, MATCH},
};

SHL_TEST(matcher_collation_table)
{
    for (size_t i = 0; i < sizeof(coll_cases) / sizeof(coll_cases[0]); i++) {
        const ccase_t *c = &coll_cases[i];
        bson_t *doc = tb(c->doc), *filter = tb(c->filter), *spec = tb(c->collation);
        shl_status_t st = SHL_STATUS_INIT;
        shl_matcher_t *m = NULL;
        shl_collator_t *coll = NULL;
        ASSERT_INT_EQ(shl_collator_new(spec, &coll, &st), 0);
        ASSERT_INT_EQ(shl_matcher_new(filter, SHL_MATCHER_DEFAULT, &m, &st), 0);
        if (shl_matcher_matches(m, doc) != (c->want_simple == MATCH)) {
            fprintf(stderr, "  simple: %s %s\n", c->doc, c->filter);
        }
        ASSERT_INT_EQ(shl_matcher_matches(m, doc), c->want_simple == MATCH);
        shl_matcher_set_collator(m, coll);
        if (shl_matcher_matches(m, doc) != (c->want == MATCH)) {
            fprintf(stderr, "  %s: %s %s\n", c->collation, c->doc, c->filter);
        }
        ASSERT_INT_EQ(shl_matcher_matches(m, doc), c->want == MATCH);
        shl_matcher_destroy(m);
        shl_collator_release(coll);
        bson_destroy(doc);
        bson_destroy(filter);
        bson_destroy(spec);
    }
}
