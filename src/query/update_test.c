/*
 * update_test.c -- table-driven update cases: (document, update, arrayFilters, expected
 * document or error code) as MongoDB 7.0 applies them, plus upsert document construction.
 */
#include <string.h>

#include "base/unit_test.h"
#include "query/update.h"

typedef struct ucase {
    const char *doc;
    const char *u; /* the update: a document or an array */
    const char *filters;
    const char *want;
    int code;
} ucase_t;

/* Applied with matched array position 1 and now = 1000 ms. */
static const ucase_t cases[] = {
    /* $set */
    {"{'_id': 1, 'a': 1}", "{'$set': {'a': 2}}", NULL, "{'_id': 1, 'a': 2}", 0},
    {"{'_id': 1, 'a': 1}", "{'$set': {'b': 2}}", NULL, "{'_id': 1, 'a': 1, 'b': 2}", 0},
    {"{'_id': 1}", "{'$set': {'z': 1, 'a': 1, 'm': 1}}", NULL, "{'_id': 1, 'a': 1, 'm': 1, 'z': 1}",
     0},
    {"{'_id': 1}", "{'$set': {'a.b.c': 1}}", NULL, "{'_id': 1, 'a': {'b': {'c': 1}}}", 0},
    {"{'_id': 1, 'a': {'x': 1}}", "{'$set': {'a.b': 1}}", NULL, "{'_id': 1, 'a': {'x': 1, 'b': 1}}",
     0},
    {"{'_id': 1, 'a': [1, 2]}", "{'$set': {'a.1': 5}}", NULL, "{'_id': 1, 'a': [1, 5]}", 0},
    {"{'_id': 1, 'a': [1]}", "{'$set': {'a.3': 5}}", NULL, "{'_id': 1, 'a': [1, null, null, 5]}",
     0},
    {"{'_id': 1, 'a': [{'b': 1}]}", "{'$set': {'a.0.b': 2}}", NULL, "{'_id': 1, 'a': [{'b': 2}]}",
     0},
    {"{'_id': 1}", "{'$set': {'a.0': 1}}", NULL, "{'_id': 1, 'a': {'0': 1}}", 0},
    {"{'_id': 1, 'a': 1}", "{'$set': {'a.b': 1}}", NULL, NULL, 28},
    {"{'_id': 1, 'a': [1]}", "{'$set': {'a.b': 1}}", NULL, NULL, 28},
    {"{'_id': 1}", "{'$set': {'a.10': 1, 'a.9': 2, 'a.b': 3}}", NULL,
     "{'_id': 1, 'a': {'9': 2, '10': 1, 'b': 3}}", 0},
    {"{'_id': 1, 'a': 1}", "{'$set': {'_id': 1}}", NULL, "{'_id': 1, 'a': 1}", 0},
    {"{'_id': 1, 'a': 1}", "{'$set': {'_id': 2}}", NULL, NULL, 66},
    {"{'_id': {'x': 1}}", "{'$set': {'_id.x': 2}}", NULL, NULL, 66},
    {"{'_id': 1, 'a': {'b': 1}}", "{'$set': {'a': {'c': 1}}}", NULL, "{'_id': 1, 'a': {'c': 1}}",
     0},
    /* $unset */
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'$unset': {'a': ''}}", NULL, "{'_id': 1, 'b': 2}", 0},
    {"{'_id': 1, 'a': 1}", "{'$unset': {'x.y': 1}}", NULL, "{'_id': 1, 'a': 1}", 0},
    {"{'_id': 1, 'a': [1, 2]}", "{'$unset': {'a.0': 1}}", NULL, "{'_id': 1, 'a': [null, 2]}", 0},
    {"{'_id': 1, 'a': {'b': 1, 'c': 2}}", "{'$unset': {'a.b': 1}}", NULL,
     "{'_id': 1, 'a': {'c': 2}}", 0},
    {"{'_id': 1}", "{'$unset': {'_id': 1}}", NULL, NULL, 66},
    /* $inc / $mul */
    {"{'_id': 1, 'a': 1}", "{'$inc': {'a': 2}}", NULL, "{'_id': 1, 'a': 3}", 0},
    {"{'_id': 1, 'a': 1}", "{'$inc': {'a': 1.5}}", NULL, "{'_id': 1, 'a': 2.5}", 0},
    {"{'_id': 1, 'a': 1}", "{'$inc': {'a': {'$numberLong': '2'}}}", NULL,
     "{'_id': 1, 'a': {'$numberLong': '3'}}", 0},
    {"{'_id': 1, 'a': 2147483647}", "{'$inc': {'a': 1}}", NULL,
     "{'_id': 1, 'a': {'$numberLong': '2147483648'}}", 0},
    {"{'_id': 1, 'a': {'$numberLong': '9223372036854775807'}}", "{'$inc': {'a': 1}}", NULL, NULL,
     2},
    {"{'_id': 1}", "{'$inc': {'a': 5}}", NULL, "{'_id': 1, 'a': 5}", 0},
    {"{'_id': 1, 'a': 'x'}", "{'$inc': {'a': 1}}", NULL, NULL, 14},
    {"{'_id': 1}", "{'$inc': {'a': 'x'}}", NULL, NULL, 14},
    {"{'_id': 1, 'a': 3}", "{'$mul': {'a': 4}}", NULL, "{'_id': 1, 'a': 12}", 0},
    {"{'_id': 1, 'a': 3}", "{'$mul': {'a': 0.5}}", NULL, "{'_id': 1, 'a': 1.5}", 0},
    {"{'_id': 1}", "{'$mul': {'a': 4}}", NULL, "{'_id': 1, 'a': 0}", 0},
    {"{'_id': 1}", "{'$mul': {'a': {'$numberLong': '4'}}}", NULL,
     "{'_id': 1, 'a': {'$numberLong': '0'}}", 0},
    {"{'_id': 1, 'a': null}", "{'$mul': {'a': 2}}", NULL, NULL, 14},
    /* $min / $max */
    {"{'_id': 1, 'a': 5}", "{'$min': {'a': 3}}", NULL, "{'_id': 1, 'a': 3}", 0},
    {"{'_id': 1, 'a': 5}", "{'$min': {'a': 7}}", NULL, "{'_id': 1, 'a': 5}", 0},
    {"{'_id': 1, 'a': 5}", "{'$max': {'a': 7}}", NULL, "{'_id': 1, 'a': 7}", 0},
    {"{'_id': 1, 'a': 5}", "{'$max': {'a': 'x'}}", NULL, "{'_id': 1, 'a': 'x'}", 0},
    {"{'_id': 1, 'a': 5}", "{'$min': {'a': null}}", NULL, "{'_id': 1, 'a': null}", 0},
    {"{'_id': 1}", "{'$max': {'a': 1}}", NULL, "{'_id': 1, 'a': 1}", 0},
    /* $rename */
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'$rename': {'a': 'c'}}", NULL, "{'_id': 1, 'b': 2, 'c': 1}",
     0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'$rename': {'a': 'b'}}", NULL, "{'_id': 1, 'b': 1}", 0},
    {"{'_id': 1, 'a': {'x': 1}}", "{'$rename': {'a.x': 'y.z'}}", NULL,
     "{'_id': 1, 'a': {}, 'y': {'z': 1}}", 0},
    {"{'_id': 1}", "{'$rename': {'a': 'b'}}", NULL, "{'_id': 1}", 0},
    {"{'_id': 1}", "{'$rename': {'a': 'a'}}", NULL, NULL, 2},
    {"{'_id': 1}", "{'$rename': {'a': 'a.b'}}", NULL, NULL, 2},
    {"{'_id': 1}", "{'$rename': {'a': 1}}", NULL, NULL, 2},
    {"{'_id': 1, 'a': [{'b': 1}]}", "{'$rename': {'a.0.b': 'c'}}", NULL, NULL, 2},
    {"{'_id': 1}", "{'$rename': {'a.$': 'b'}}", NULL, NULL, 2},
    /* $currentDate / $setOnInsert */
    {"{'_id': 1}", "{'$currentDate': {'d': true}}", NULL,
     "{'_id': 1, 'd': {'$date': '1970-01-01T00:00:01Z'}}", 0},
    {"{'_id': 1}", "{'$currentDate': {'d': {'$tYpE': 'timestamp'}}}", NULL,
     "{'_id': 1, 'd': {'$timestamp': {'t': 1, 'i': 1}}}", 0},
    {"{'_id': 1}", "{'$currentDate': {'d': {'$tYpE': 'x'}}}", NULL, NULL, 2},
    {"{'_id': 1}", "{'$currentDate': {'d': 1}}", NULL, NULL, 2},
    {"{'_id': 1}", "{'$setOnInsert': {'a': 1}}", NULL, "{'_id': 1}", 0},
    /* $push */
    {"{'_id': 1, 'a': [1]}", "{'$push': {'a': 2}}", NULL, "{'_id': 1, 'a': [1, 2]}", 0},
    {"{'_id': 1}", "{'$push': {'a': 2}}", NULL, "{'_id': 1, 'a': [2]}", 0},
    {"{'_id': 1, 'a': [1]}", "{'$push': {'a': [2, 3]}}", NULL, "{'_id': 1, 'a': [1, [2, 3]]}", 0},
    {"{'_id': 1, 'a': [1]}", "{'$push': {'a': {'$each': [2, 3]}}}", NULL,
     "{'_id': 1, 'a': [1, 2, 3]}", 0},
    {"{'_id': 1, 'a': [1, 2]}", "{'$push': {'a': {'$each': [9], '$position': 0}}}", NULL,
     "{'_id': 1, 'a': [9, 1, 2]}", 0},
    {"{'_id': 1, 'a': [1, 2]}", "{'$push': {'a': {'$each': [9], '$position': -1}}}", NULL,
     "{'_id': 1, 'a': [1, 9, 2]}", 0},
    {"{'_id': 1, 'a': [1, 2]}", "{'$push': {'a': {'$each': [9], '$position': 10}}}", NULL,
     "{'_id': 1, 'a': [1, 2, 9]}", 0},
    {"{'_id': 1, 'a': [5, 1]}", "{'$push': {'a': {'$each': [3], '$sort': 1}}}", NULL,
     "{'_id': 1, 'a': [1, 3, 5]}", 0},
    {"{'_id': 1, 'a': [5, 1]}", "{'$push': {'a': {'$each': [3], '$sort': -1, '$slice': 2}}}", NULL,
     "{'_id': 1, 'a': [5, 3]}", 0},
    {"{'_id': 1, 'a': [1, 2, 3]}", "{'$push': {'a': {'$each': [4], '$slice': -2}}}", NULL,
     "{'_id': 1, 'a': [3, 4]}", 0},
    {"{'_id': 1, 'a': [{'x': 2}, {'x': 1}]}",
     "{'$push': {'a': {'$each': [{'x': 0}], '$sort': {'x': "
     "1}}}}",
     NULL, "{'_id': 1, 'a': [{'x': 0}, {'x': 1}, {'x': 2}]}", 0},
    {"{'_id': 1, 'a': [1]}", "{'$push': {'a': {'$each': []}}}", NULL, "{'_id': 1, 'a': [1]}", 0},
    {"{'_id': 1}", "{'$push': {'a': {'$each': []}}}", NULL, "{'_id': 1, 'a': []}", 0},
    {"{'_id': 1, 'a': 1}", "{'$push': {'a': 2}}", NULL, NULL, 2},
    {"{'_id': 1}", "{'$push': {'a': {'$each': 1}}}", NULL, NULL, 2},
    {"{'_id': 1}", "{'$push': {'a': {'$each': [1], '$bad': 1}}}", NULL, NULL, 2},
    {"{'_id': 1}", "{'$push': {'a': {'$each': [1], '$slice': 'x'}}}", NULL, NULL, 2},
    {"{'_id': 1}", "{'$push': {'a': {'$each': [1], '$sort': 2}}}", NULL, NULL, 2},
    /* $addToSet */
    {"{'_id': 1, 'a': [1, 2]}", "{'$addToSet': {'a': 2}}", NULL, "{'_id': 1, 'a': [1, 2]}", 0},
    {"{'_id': 1, 'a': [1, 2]}", "{'$addToSet': {'a': 3}}", NULL, "{'_id': 1, 'a': [1, 2, 3]}", 0},
    {"{'_id': 1, 'a': [1, 2]}", "{'$addToSet': {'a': {'$each': [2, 3, 3, 4]}}}", NULL,
     "{'_id': 1, 'a': [1, 2, 3, 4]}", 0},
    {"{'_id': 1, 'a': [1]}", "{'$addToSet': {'a': 1.0}}", NULL, "{'_id': 1, 'a': [1]}", 0},
    {"{'_id': 1}", "{'$addToSet': {'a': 1}}", NULL, "{'_id': 1, 'a': [1]}", 0},
    {"{'_id': 1, 'a': [{'x': 1, 'y': 2}]}", "{'$addToSet': {'a': {'y': 2, 'x': 1}}}", NULL,
     "{'_id': 1, 'a': [{'x': 1, 'y': 2}, {'y': 2, 'x': 1}]}", 0},
    {"{'_id': 1, 'a': 5}", "{'$addToSet': {'a': 1}}", NULL, NULL, 2},
    /* $pop / $pull / $pullAll */
    {"{'_id': 1, 'a': [1, 2, 3]}", "{'$pop': {'a': 1}}", NULL, "{'_id': 1, 'a': [1, 2]}", 0},
    {"{'_id': 1, 'a': [1, 2, 3]}", "{'$pop': {'a': -1}}", NULL, "{'_id': 1, 'a': [2, 3]}", 0},
    {"{'_id': 1, 'a': []}", "{'$pop': {'a': 1}}", NULL, "{'_id': 1, 'a': []}", 0},
    {"{'_id': 1}", "{'$pop': {'a': 1}}", NULL, "{'_id': 1}", 0},
    {"{'_id': 1, 'a': 1}", "{'$pop': {'a': 1}}", NULL, NULL, 14},
    {"{'_id': 1}", "{'$pop': {'a': 2}}", NULL, NULL, 9},
    {"{'_id': 1, 'a': [1, 2, 1, 3]}", "{'$pull': {'a': 1}}", NULL, "{'_id': 1, 'a': [2, 3]}", 0},
    {"{'_id': 1, 'a': [1, 5, 7]}", "{'$pull': {'a': {'$gte': 5}}}", NULL, "{'_id': 1, 'a': [1]}",
     0},
    {"{'_id': 1, 'a': [{'x': 1, 'y': 1}, {'x': 2}]}", "{'$pull': {'a': {'x': 1}}}", NULL,
     "{'_id': 1, 'a': [{'x': 2}]}", 0},
    {"{'_id': 1, 'a': ['apple', 'banana']}",
     "{'$pull': {'a': {'$regularExpression': {'pattern': '^a', 'options': ''}}}}", NULL,
     "{'_id': 1, 'a': ['banana']}", 0},
    {"{'_id': 1, 'a': [[1, 2], [3]]}", "{'$pull': {'a': [1, 2]}}", NULL, "{'_id': 1, 'a': [[3]]}",
     0},
    {"{'_id': 1, 'a': 1}", "{'$pull': {'a': 1}}", NULL, NULL, 2},
    {"{'_id': 1, 'a': [1, 2, 3, 1]}", "{'$pullAll': {'a': [1, 3]}}", NULL, "{'_id': 1, 'a': [2]}",
     0},
    {"{'_id': 1}", "{'$pullAll': {'a': 1}}", NULL, NULL, 2},
    /* positional $, $[], $[id] */
    {"{'_id': 1, 'a': [1, 2, 3]}", "{'$set': {'a.$': 9}}", NULL, "{'_id': 1, 'a': [1, 9, 3]}", 0},
    {"{'_id': 1, 'a': [{'b': 1}, {'b': 2}]}", "{'$inc': {'a.$.b': 10}}", NULL,
     "{'_id': 1, 'a': [{'b': 1}, {'b': 12}]}", 0},
    {"{'_id': 1, 'a': [1, 2, 3]}", "{'$set': {'a.$[]': 0}}", NULL, "{'_id': 1, 'a': [0, 0, 0]}", 0},
    {"{'_id': 1, 'a': [{'b': 1}, {'b': 2}]}", "{'$inc': {'a.$[].b': 1}}", NULL,
     "{'_id': 1, 'a': [{'b': 2}, {'b': 3}]}", 0},
    {"{'_id': 1, 'a': [1, 5, 9]}", "{'$set': {'a.$[x]': 0}}", "[{'x': {'$gt': 4}}]",
     "{'_id': 1, 'a': [1, 0, 0]}", 0},
    {"{'_id': 1, 'a': [{'b': 1, 'c': 0}, {'b': 5, 'c': 0}]}", "{'$set': {'a.$[e].c': 1}}",
     "[{'e.b': {'$gte': 5}}]", "{'_id': 1, 'a': [{'b': 1, 'c': 0}, {'b': 5, 'c': 1}]}", 0},
    {"{'_id': 1, 'a': [[1, 2], [3]]}", "{'$set': {'a.$[].$[y]': 0}}", "[{'y': {'$gt': 1}}]",
     "{'_id': 1, 'a': [[1, 0], [0]]}", 0},
    {"{'_id': 1}", "{'$set': {'a.$[]': 1}}", NULL, NULL, 2},
    {"{'_id': 1, 'a': 5}", "{'$set': {'a.$[]': 1}}", NULL, NULL, 2},
    {"{'_id': 1, 'a': [1]}", "{'$set': {'a.$[x]': 1}}", NULL, NULL, 2},
    {"{'_id': 1, 'a': [1]}", "{'$set': {'a': 1}}", "[{'x': 1}]", NULL, 9},
    {"{'_id': 1, 'a': [1]}", "{'$set': {'a.$[x]': 1}}", "[{'x': 1}, {'x': 2}]", NULL, 9},
    {"{'_id': 1, 'a': [1]}", "{'$set': {'a.$[X]': 1}}", "[{'X': 1}]", NULL, 2},
    {"{'_id': 1}", "{'$set': {'$.a': 1}}", NULL, NULL, 2},
    {"{'_id': 1}", "{'$set': {'a.$.b.$': 1}}", NULL, NULL, 2},
    /* parse errors and conflicts */
    {"{'_id': 1}", "{'$foo': {'a': 1}}", NULL, NULL, 9},
    {"{'_id': 1}", "{'$set': 1}", NULL, NULL, 9},
    {"{'_id': 1}", "{'$set': {}}", NULL, NULL, 9},
    {"{'_id': 1}", "{'$set': {'a': 1}, '$inc': {'a': 1}}", NULL, NULL, 40},
    {"{'_id': 1}", "{'$set': {'a': 1, 'a.b': 1}}", NULL, NULL, 40},
    {"{'_id': 1}", "{'$set': {'a.b': 1}, '$unset': {'a': 1}}", NULL, NULL, 40},
    {"{'_id': 1}", "{'$set': {'a.b': 1, 'a.c': 1}}", NULL, "{'_id': 1, 'a': {'b': 1, 'c': 1}}", 0},
    {"{'_id': 1}", "{'$rename': {'a': 'b'}, '$set': {'b': 1}}", NULL, NULL, 40},
    {"{'_id': 1}", "{'$set': {'': 1}}", NULL, NULL, 56},
    {"{'_id': 1}", "{'$set': {'a..b': 1}}", NULL, NULL, 56},
    {"{'_id': 1}", "{'$set': {'$a': 1}}", NULL, NULL, 52},
    /* MongoDB 5.0+: nested '$' fields are updatable, existing top-level ones may stay */
    {"{'_id': 1, 'x': {}}", "{'$set': {'x.$b': 1}}", NULL, "{'_id': 1, 'x': {'$b': 1}}", 0},
    {"{'_id': 1, '$p': 2, 'q': 1}", "{'$inc': {'q': 1}}", NULL, "{'_id': 1, '$p': 2, 'q': 2}", 0},
    {"{'_id': 1, '$p': 2}", "{'$set': {'$p': 3}}", NULL, NULL, 52},
    {"{'_id': 1, '$p': 2}", "{'$unset': {'$p': 1}}", NULL, "{'_id': 1}", 0},
    {"{'_id': 1}", "{'$set': {'_id': [1]}}", NULL, NULL, 66},
    {"{'a': 1}", "{'$set': {'_id': [1]}}", NULL, NULL, 53},
    /* replacement */
    {"{'_id': 1, 'a': 1}", "{'b': 2}", NULL, "{'_id': 1, 'b': 2}", 0},
    {"{'_id': 1, 'a': 1}", "{'b': 2, '_id': 1}", NULL, "{'b': 2, '_id': 1}", 0},
    {"{'_id': 1, 'a': 1}", "{}", NULL, "{'_id': 1}", 0},
    {"{'_id': 1, 'a': 1}", "{'_id': 2}", NULL, NULL, 66},
    {"{'_id': 1, 'a': 1}", "{'b': 1, '$set': {'a': 1}}", NULL, NULL, 52},
    {"{'_id': 1, 'a': 1}", "{'n': {'$x': 1}}", NULL, "{'_id': 1, 'n': {'$x': 1}}", 0},
    /* pipelines */
    {"{'_id': 1, 'a': 1}", "[{'$set': {'b': {'$add': ['$a', 1]}}}]", NULL,
     "{'_id': 1, 'a': 1, 'b': 2}", 0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "[{'$unset': 'a'}]", NULL, "{'_id': 1, 'b': 2}", 0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "[{'$unset': ['a', 'b']}]", NULL, "{'_id': 1}", 0},
    {"{'_id': 1, 'a': {'x': 5}}", "[{'$replaceWith': '$a'}]", NULL, "{'_id': 1, 'x': 5}", 0},
    {"{'_id': 1, 'a': {'x': 5}}", "[{'$replaceRoot': {'newRoot': {'y': '$a.x'}}}]", NULL,
     "{'_id': 1, 'y': 5}", 0},
    {"{'_id': 1, 'a': 1}", "[{'$set': {'a': '$$REMOVE'}}]", NULL, "{'_id': 1}", 0},
    {"{'_id': 1, 'a': 1}", "[{'$set': {'c.d': 1}}, {'$project': {'c': 1}}]", NULL,
     "{'_id': 1, 'c': {'d': 1}}", 0},
    {"{'_id': 1, 'a': 1}", "[{'$set': {'_id': 2}}]", NULL, NULL, 66},
    {"{'_id': 1, 'a': 1}", "[{'$group': {'_id': 1}}]", NULL, NULL, 72},
    {"{'_id': 1, 'a': 1}", "[{'$foo': 1}]", NULL, NULL, 40324},
    {"{'_id': 1, 'a': 1}", "[{'$replaceWith': 1}]", NULL, NULL, 40228},
    {"{'_id': 1, 'a': 1}", "[{'$set': {'a': 1}}]", "[{'x': 1}]", NULL, 9},
};

static bson_t *
tb(const char *json)
{
    bson_t *b = shl_test_bson(json);
    uint8_t *data = bson_malloc(b->len);
    bson_t *out;
    memcpy(data, bson_get_data(b), b->len);
    for (uint32_t i = 0; i + 6 <= b->len; i++) {
        if (memcmp(data + i, "$tYpE", 6) == 0) {
            memcpy(data + i, "$type", 6);
        }
    }
    out = bson_new_from_data(data, b->len);
    bson_free(data);
    bson_destroy(b);
    return out;
}

static int
run_update(const char *docjs, const char *ujs, const char *filters, bool insert, bson_t *out,
           bool *changed, shl_status_t *st)
{
    char *wrapped = bson_strdup_printf("{'u': %s}", ujs);
    char *fw = filters ? bson_strdup_printf("{'f': %s}", filters) : NULL;
    bson_t *doc = tb(docjs), *uw = tb(wrapped), *fwd = fw ? tb(fw) : NULL, farr;
    shl_update_t *u = NULL;
    shl_update_ctx_t ctx = {0};
    bson_iter_t it;
    int rc;

    bson_init(out);
    bson_iter_init_find(&it, uw, "u");
    if (fwd != NULL) {
        bson_iter_t fi;
        uint32_t len;
        const uint8_t *data;
        bson_iter_init_find(&fi, fwd, "f");
        bson_iter_array(&fi, &len, &data);
        bson_init_static(&farr, data, len);
    }
    rc = shl_update_new(bson_iter_value(&it), fwd ? &farr : NULL, &u, st);
    if (rc == 0) {
        ctx.has_matched_key = true;
        ctx.matched_key = 1;
        ctx.now_ms = 1000;
        ctx.is_insert = insert;
        bson_destroy(out);
        rc = shl_update_apply(u, doc, &ctx, out, changed, st);
    }
    shl_update_destroy(u);
    bson_destroy(doc);
    bson_destroy(uw);
    if (fwd) {
        bson_destroy(fwd);
    }
    bson_free(wrapped);
    bson_free(fw);
    return rc;
}

SHL_TEST(update_table)
{
    int failures = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const ucase_t *c = &cases[i];
        bson_t out;
        bool changed = false;
        shl_status_t st = SHL_STATUS_INIT;
        int rc = run_update(c->doc, c->u, c->filters, false, &out, &changed, &st);
        if (rc != c->code) {
            shl_test_fail_here(__FILE__, __LINE__, "case %zu %s on %s: code %d want %d (%s)", i,
                               c->u, c->doc, rc, c->code, rc ? st.reason : "");
            failures++;
        } else if (rc == 0) {
            char *got_, *want_;
            if (!shl_test_bson_eq(&out, c->want, &got_, &want_)) {
                shl_test_fail_here(__FILE__, __LINE__, "case %zu %s on %s: got %s want %s", i, c->u,
                                   c->doc, got_, want_);
                failures++;
            }
            bson_free(got_);
            bson_free(want_);
        }
        bson_destroy(&out);
    }
    ASSERT_INT_EQ(failures, 0);
}

SHL_TEST(update_messages_and_changed)
{
    bson_t out;
    bool changed = true;
    shl_status_t st;
    ASSERT_INT_EQ(
        run_update("{'_id': 1, 'a': 1}", "{'$set': {'a': 1}}", NULL, false, &out, &changed, &st),
        0);
    ASSERT(!changed);
    bson_destroy(&out);
    ASSERT_INT_EQ(
        run_update("{'_id': 1, 'a': 1}", "{'$set': {'a': 1.0}}", NULL, false, &out, &changed, &st),
        0);
    ASSERT(changed);
    bson_destroy(&out);
    ASSERT_INT_EQ(
        run_update("{'_id': 1, 'a': 'x'}", "{'$inc': {'a': 1}}", NULL, false, &out, &changed, &st),
        14);
    ASSERT_STR_EQ(st.reason, "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the "
                             "field 'a' of non-numeric type string");
    bson_destroy(&out);
    ASSERT_INT_EQ(
        run_update("{'_id': 1}", "{'$set': {'_id': 2}}", NULL, false, &out, &changed, &st), 66);
    ASSERT_STR_EQ(st.reason,
                  "Performing an update on the path '_id' would modify the immutable field '_id'");
    bson_destroy(&out);
    ASSERT_INT_EQ(
        run_update("{'_id': 1}", "{'$set': {'a': 1, 'a.b': 2}}", NULL, false, &out, &changed, &st),
        40);
    ASSERT_STR_EQ(st.reason, "Updating the path 'a.b' would create a conflict at 'a'");
    bson_destroy(&out);
    ASSERT_INT_EQ(
        run_update("{'_id': 1, 'a': 1}", "{'$set': {'a.b': 1}}", NULL, false, &out, &changed, &st),
        28);
    ASSERT_STR_EQ(st.reason, "Cannot create field 'b' in element {a: 1}");
    bson_destroy(&out);
    ASSERT_INT_EQ(
        run_update("{'_id': 1}", "{'$setOnInsert': {'a': 1}}", NULL, true, &out, &changed, &st), 0);
    ASSERT_BSON_EQ(&out, "{'_id': 1, 'a': 1}");
    bson_destroy(&out);
}

static int
run_upsert(const char *query, const char *ujs, bson_t *out, shl_status_t *st)
{
    char *wrapped = bson_strdup_printf("{'u': %s}", ujs);
    bson_t *q = tb(query), *uw = tb(wrapped);
    shl_update_t *u = NULL;
    shl_matcher_t *m = NULL;
    shl_update_ctx_t ctx = {0};
    bson_iter_t it;
    int rc;

    bson_init(out);
    bson_iter_init_find(&it, uw, "u");
    rc = shl_matcher_new(q, SHL_MATCHER_DEFAULT, &m, st);
    if (rc == 0) {
        rc = shl_update_new(bson_iter_value(&it), NULL, &u, st);
    }
    if (rc == 0) {
        ctx.now_ms = 1000;
        bson_destroy(out);
        rc = shl_update_upsert_doc(u, m, &ctx, out, st);
    }
    shl_update_destroy(u);
    shl_matcher_destroy(m);
    bson_destroy(q);
    bson_destroy(uw);
    bson_free(wrapped);
    return rc;
}

SHL_TEST(update_upsert_documents)
{
    static const struct {
        const char *query, *u, *want;
        int code;
    } ups[] = {
        {"{'_id': 5, 'a': 1}", "{'$set': {'b': 2}}", "{'_id': 5, 'a': 1, 'b': 2}", 0},
        {"{'a': 1, '_id': 5}", "{'$inc': {'n': 1}}", "{'_id': 5, 'a': 1, 'n': 1}", 0},
        {"{'a.b': 1, '_id': 1}", "{'$set': {'c': 1}}", "{'_id': 1, 'a': {'b': 1}, 'c': 1}", 0},
        {"{'$and': [{'x': 1}, {'y': {'$gt': 3}}], '_id': 2}", "{'$set': {'z': 1}}",
         "{'_id': 2, 'x': 1, 'z': 1}", 0},
        {"{'_id': 3, 'a': 1}", "{'b': 2}", "{'_id': 3, 'b': 2}", 0},
        {"{'_id': 4}", "{'$setOnInsert': {'c': 1}, '$set': {'d': 1}}", "{'_id': 4, 'c': 1, 'd': 1}",
         0},
        {"{'_id': 4}", "{'$set': {'_id': 5}}", NULL, 66},
        {"{'_id': 4}", "[{'$set': {'x': '$_id'}}]", "{'_id': 4, 'x': 4}", 0},
        {"{'a': 1, 'a.b': 1}", "{'$set': {'c': 1}}", NULL, 54},
        {"{'_id': 1, 'a': [1, 2]}", "{'$set': {'a.$': 5}}", NULL, 2},
        /* an upsert's insert may create a top-level '$' field (an insert's rules) */
        {"{'_id': 6}", "{'$set': {'$hotel': 320}}", "{'_id': 6, '$hotel': 320}", 0},
    };
    for (size_t i = 0; i < sizeof(ups) / sizeof(ups[0]); i++) {
        bson_t out;
        shl_status_t st = SHL_STATUS_INIT;
        int rc = run_upsert(ups[i].query, ups[i].u, &out, &st);
        if (rc != ups[i].code) {
            shl_test_fail_here(__FILE__, __LINE__, "upsert %zu: code %d want %d (%s)", i, rc,
                               ups[i].code, st.reason);
        } else if (ups[i].want != NULL) {
            ASSERT_BSON_EQ(&out, ups[i].want);
        }
        bson_destroy(&out);
    }
    /* no _id in the query: a new ObjectId comes first */
    bson_t out;
    shl_status_t st;
    bson_iter_t it;
    ASSERT_INT_EQ(run_upsert("{'a': 1}", "{'$set': {'b': 1}}", &out, &st), 0);
    ASSERT(bson_iter_init(&it, &out) && bson_iter_next(&it));
    ASSERT_STR_EQ(bson_iter_key(&it), "_id");
    ASSERT(BSON_ITER_HOLDS_OID(&it));
    bson_destroy(&out);
}
