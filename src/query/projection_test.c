/*
 * projection_test.c -- table-driven find() projection cases: (document, projection, query,
 * expected document or error code) as MongoDB 7.0 returns them.
 */
#include <string.h>

#include "base/unit_test.h"
#include "query/projection.h"

typedef struct pcase {
    const char *doc;
    const char *proj;
    const char *query; /* NULL: {} */
    const char *want;
    int code;
} pcase_t;

static const pcase_t cases[] = {
    /* inclusion / exclusion / _id */
    {"{'_id': 1, 'a': 1, 'b': 2}", "{}", NULL, "{'_id': 1, 'a': 1, 'b': 2}", 0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'a': 1}", NULL, "{'_id': 1, 'a': 1}", 0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'a': true}", NULL, "{'_id': 1, 'a': 1}", 0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'a': 1, '_id': 0}", NULL, "{'a': 1}", 0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'a': 0}", NULL, "{'_id': 1, 'b': 2}", 0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'_id': 0}", NULL, "{'a': 1, 'b': 2}", 0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'_id': 1}", NULL, "{'_id': 1}", 0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'_id': 1, 'a': 0}", NULL, "{'_id': 1, 'b': 2}", 0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'b': 1, 'a': 1}", NULL, "{'_id': 1, 'a': 1, 'b': 2}", 0},
    {"{'a': 1, '_id': 1}", "{'a': 1}", NULL, "{'a': 1, '_id': 1}", 0},
    {"{'_id': 1, 'a': 1}", "{'c': 1}", NULL, "{'_id': 1}", 0},
    {"{'_id': 1, 'a': 1}", "{'a': 5}", NULL, "{'_id': 1, 'a': 1}", 0},
    {"{'_id': 1, 'a': 1}", "{'a': 0.0}", NULL, "{'_id': 1}", 0},
    /* dotted paths */
    {"{'_id': 1, 'a': {'b': 1, 'c': 2}}", "{'a.b': 1}", NULL, "{'_id': 1, 'a': {'b': 1}}", 0},
    {"{'_id': 1, 'a': {'b': 1, 'c': 2}}", "{'a.b': 0}", NULL, "{'_id': 1, 'a': {'c': 2}}", 0},
    {"{'_id': 1, 'a': {'b': 1, 'c': 2}}", "{'a': {'b': 1}}", NULL, "{'_id': 1, 'a': {'b': 1}}", 0},
    {"{'_id': 1, 'a': [{'b': 1, 'c': 2}, 3, {'c': 4}]}", "{'a.b': 1}", NULL,
     "{'_id': 1, 'a': [{'b': 1}, {}]}", 0},
    {"{'_id': 1, 'a': [{'b': 1, 'c': 2}, 3, {'c': 4}]}", "{'a.b': 0}", NULL,
     "{'_id': 1, 'a': [{'c': 2}, 3, {'c': 4}]}", 0},
    {"{'_id': 1, 'a': [[{'b': 1, 'c': 1}]]}", "{'a.b': 1}", NULL, "{'_id': 1, 'a': [[{'b': 1}]]}",
     0},
    {"{'_id': 1, 'a': 5}", "{'a.b': 1}", NULL, "{'_id': 1}", 0},
    {"{'_id': 1, 'a': 5}", "{'a.b': 0}", NULL, "{'_id': 1, 'a': 5}", 0},
    {"{'_id': {'x': 1, 'y': 2}, 'a': 1}", "{'_id.x': 1}", NULL, "{'_id': {'x': 1}}", 0},
    {"{'_id': {'x': 1, 'y': 2}, 'a': 1}", "{'_id.x': 0}", NULL, "{'_id': {'y': 2}, 'a': 1}", 0},
    /* literals and expressions (4.4+) */
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'x': 'hello'}", NULL, "{'_id': 1, 'x': 'hello'}", 0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'x': '$b'}", NULL, "{'_id': 1, 'x': 2}", 0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'x': {'$add': ['$a', '$b']}}", NULL, "{'_id': 1, 'x': 3}", 0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'a': 1, 'x': {'$literal': 0}}", NULL,
     "{'_id': 1, 'a': 1, 'x': 0}", 0},
    {"{'_id': 1, 'a': 1, 'b': 2}", "{'x': '$a', 'b': 1}", NULL, "{'_id': 1, 'b': 2, 'x': 1}", 0},
    {"{'_id': 1, 'a': 1}", "{'x': null}", NULL, "{'_id': 1, 'x': null}", 0},
    {"{'_id': 1, 'a': 1}", "{'x': '$missing'}", NULL, "{'_id': 1}", 0},
    {"{'_id': 1, 'a': {'b': 1, 'c': 2}}", "{'a.x': {'$literal': 5}}", NULL,
     "{'_id': 1, 'a': {'x': 5}}", 0},
    {"{'_id': 1, 'a': {'b': 1, 'c': 2}}", "{'a.b': 1, 'a.x': {'$literal': 5}}", NULL,
     "{'_id': 1, 'a': {'b': 1, 'x': 5}}", 0},
    {"{'_id': 1, 'a': [{'b': 1}, 2]}", "{'a.x': {'$literal': 5}}", NULL,
     "{'_id': 1, 'a': [{'x': 5}]}", 0},
    {"{'_id': 1, 'a': 3}", "{'a.x': {'$literal': 5}}", NULL, "{'_id': 1, 'a': {'x': 5}}", 0},
    {"{'_id': 1}", "{'a': {'b': '$_id'}}", NULL, "{'_id': 1, 'a': {'b': 1}}", 0},
    /* $slice */
    {"{'_id': 1, 'a': [1, 2, 3, 4], 'b': 1}", "{'a': {'$slice': 2}}", NULL,
     "{'_id': 1, 'a': [1, 2], 'b': 1}", 0},
    {"{'_id': 1, 'a': [1, 2, 3, 4], 'b': 1}", "{'a': {'$slice': -2}}", NULL,
     "{'_id': 1, 'a': [3, 4], 'b': 1}", 0},
    {"{'_id': 1, 'a': [1, 2, 3, 4], 'b': 1}", "{'a': {'$slice': [1, 2]}}", NULL,
     "{'_id': 1, 'a': [2, 3], 'b': 1}", 0},
    {"{'_id': 1, 'a': [1, 2, 3, 4], 'b': 1}", "{'a': {'$slice': [-3, 2]}}", NULL,
     "{'_id': 1, 'a': [2, 3], 'b': 1}", 0},
    {"{'_id': 1, 'a': [1, 2, 3, 4], 'b': 1}", "{'a': {'$slice': [-10, 2]}}", NULL,
     "{'_id': 1, 'a': [1, 2], 'b': 1}", 0},
    {"{'_id': 1, 'a': [1, 2, 3, 4], 'b': 1}", "{'a': {'$slice': 10}}", NULL,
     "{'_id': 1, 'a': [1, 2, 3, 4], 'b': 1}", 0},
    {"{'_id': 1, 'a': [1, 2, 3, 4], 'b': 1}", "{'a': {'$slice': 0}}", NULL,
     "{'_id': 1, 'a': [], 'b': 1}", 0},
    {"{'_id': 1, 'a': 5, 'b': 1}", "{'a': {'$slice': 1}}", NULL, "{'_id': 1, 'a': 5, 'b': 1}", 0},
    {"{'_id': 1, 'a': [1, 2, 3], 'b': 1}", "{'a': {'$slice': 1}, 'b': 0}", NULL,
     "{'_id': 1, 'a': [1]}", 0},
    {"{'_id': 1, 'a': [1, 2, 3], 'b': 1, 'c': 1}", "{'a': {'$slice': 1}, 'b': 1}", NULL,
     "{'_id': 1, 'a': [1], 'b': 1}", 0},
    {"{'_id': 1, 'x': {'a': [1, 2, 3]}}", "{'x.a': {'$slice': -1}}", NULL,
     "{'_id': 1, 'x': {'a': [3]}}", 0},
    /* $elemMatch */
    {"{'_id': 1, 'a': [{'b': 1}, {'b': 2}, {'b': 2, 'c': 1}], 'z': 1}",
     "{'a': {'$elemMatch': {'b': 2}}}", NULL, "{'_id': 1, 'a': [{'b': 2}]}", 0},
    {"{'_id': 1, 'a': [{'b': 1}], 'z': 1}", "{'a': {'$elemMatch': {'b': 5}}}", NULL, "{'_id': 1}",
     0},
    {"{'_id': 1, 'a': [1, 5, 9], 'z': 1}", "{'a': {'$elemMatch': {'$gt': 4}}}", NULL,
     "{'_id': 1, 'a': [5]}", 0},
    {"{'_id': 1, 'a': [1, 5, 9], 'z': 1}", "{'a': {'$elemMatch': {'$gt': 4}}, 'z': 0}", NULL,
     "{'_id': 1, 'a': [5]}", 0},
    {"{'_id': 1, 'a': [1, 5, 9], 'z': 1}", "{'z': 1, 'a': {'$elemMatch': {'$gt': 4}}}", NULL,
     "{'_id': 1, 'z': 1, 'a': [5]}", 0},
    {"{'_id': 1, 'a': [1, 5], 'z': 1, 'y': 2}", "{'a': {'$elemMatch': {'$gt': 4}}, 'z': 1}", NULL,
     "{'_id': 1, 'z': 1, 'a': [5]}", 0},
    /* positional */
    {"{'_id': 1, 'a': [1, 2, 3], 'b': 1}", "{'a.$': 1}", "{'a': 2}", "{'_id': 1, 'a': [2]}", 0},
    {"{'_id': 1, 'a': [{'b': 1, 'c': 1}, {'b': 2, 'c': 2}]}", "{'a.$': 1}", "{'a.b': 2}",
     "{'_id': 1, 'a': [{'b': 2, 'c': 2}]}", 0},
    {"{'_id': 1, 'x': {'a': [1, 2, 3]}}", "{'x.a.$': 1}", "{'x.a': 3}",
     "{'_id': 1, 'x': {'a': [3]}}", 0},
    {"{'_id': 1, 'a': [1, 2, 3], 'b': 7}", "{'a.$': 1, 'b': 1}", "{'a': {'$gte': 2}}",
     "{'_id': 1, 'b': 7, 'a': [2]}", 0},
    {"{'_id': 1, 'a': [1, 2, 3]}", "{'a.$': 1}", "{'b': 1}", NULL, 31277},
    {"{'_id': 1, 'a': 1}", "{'a.$': 1}", "{'a': 1}", NULL, 51246},
    /* errors */
    {"{}", "{'a': 1, 'b': 0}", NULL, NULL, 31254},
    {"{}", "{'a': 0, 'b': 1}", NULL, NULL, 31253},
    {"{}", "{'a': 1, 'a.b': 1}", NULL, NULL, 31249},
    {"{}", "{'a.b': 1, 'a': 1}", NULL, NULL, 31250},
    {"{}", "{'a': 0, 'x': 'lit'}", NULL, NULL, 31310},
    {"{}", "{'a': 0, 'x': {'$add': [1]}}", NULL, NULL, 31252},
    {"{}", "{'a': {'$slice': 'x'}}", NULL, NULL, 31273},
    {"{}", "{'a': {'$slice': [1]}}", NULL, NULL, 31272},
    {"{}", "{'a': {'$slice': [1, 0]}}", NULL, NULL, 31259},
    {"{}", "{'a': {'$slice': ['x', 1]}}", NULL, NULL, 31257},
    {"{}", "{'a': {'$elemMatch': 1}}", NULL, NULL, 31274},
    {"{}", "{'a.b': {'$elemMatch': {'x': 1}}}", NULL, NULL, 31275},
    {"{}", "{'a.$': 1, 'b.$': 1}", "{'a': 1, 'b': 1}", NULL, 31276},
    {"{}", "{'a.$': 1}", NULL, NULL, 51050},
    {"{}", "{'a.$': 1, 'b': {'$elemMatch': {'x': 1}}}", "{'a': 1}", NULL, 31255},
    {"{}", "{'a': {'$foo': 1}}", NULL, NULL, 31325},
    {"{}", "{'': 1}", NULL, NULL, 40352},
    {"{}", "{'$a': 1}", NULL, NULL, 16410},
    {"{}", "{'a..b': 1}", NULL, NULL, 15998},
    {"{}", "{'a.$': 'x'}", "{'a': 1}", NULL, 31308},
};

SHL_TEST(projection_table)
{
    int failures = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const pcase_t *c = &cases[i];
        bson_t *doc = shl_test_bson(c->doc), *spec = shl_test_bson(c->proj);
        bson_t *query = shl_test_bson(c->query ? c->query : "{}"), out = BSON_INITIALIZER;
        shl_projection_t *p = NULL;
        shl_matcher_t *m = NULL;
        shl_match_details_t d = {0};
        shl_status_t st = SHL_STATUS_INIT;
        bool matched;
        int rc = shl_projection_new(spec, c->query ? query : NULL, &p, &st);
        if (rc == 0) {
            if (shl_projection_needs_match_details(p)) {
                SHL_INVARIANT(shl_matcher_new(query, SHL_MATCHER_DEFAULT, &m, &st) == 0);
                SHL_INVARIANT(shl_matcher_match(m, doc, &d, &matched, &st) == 0);
            }
            bson_destroy(&out);
            rc = shl_projection_apply(p, doc, &d, NULL, &out, &st);
        }
        if (rc != c->code) {
            shl_test_fail_here(__FILE__, __LINE__, "case %zu %s: code %d want %d (%s)", i, c->proj,
                               rc, c->code, rc ? st.reason : "");
            failures++;
        } else if (rc == 0) {
            char *got_, *want_;
            if (!shl_test_bson_eq(&out, c->want, &got_, &want_)) {
                shl_test_fail_here(__FILE__, __LINE__, "case %zu %s on %s: got %s want %s", i,
                                   c->proj, c->doc, got_, want_);
                failures++;
            }
            bson_free(got_);
            bson_free(want_);
        }
        bson_destroy(&out);
        shl_projection_destroy(p);
        shl_matcher_destroy(m);
        bson_destroy(doc);
        bson_destroy(spec);
        bson_destroy(query);
    }
    ASSERT_INT_EQ(failures, 0);
}
