/*
 * expression_test.c -- table-driven cases for the core aggregation expressions:
 * (document, expression, expected value or error code).
 */
#include <string.h>

#include "base/unit_test.h"
#include "query/expression.h"

typedef struct ecase {
    const char *doc;
    const char *expr; /* {'e': <expression>} */
    const char *want; /* {'v': <value>} or "{}" for missing */
    int code;
} ecase_t;

static const ecase_t cases[] = {
    {"{'a': 1}", "{'e': '$a'}", "{'v': 1}", 0},
    {"{'a': {'b': 2}}", "{'e': '$a.b'}", "{'v': 2}", 0},
    {"{'a': [{'b': 1}, {'c': 1}, {'b': 3}, 5]}", "{'e': '$a.b'}", "{'v': [1, 3]}", 0},
    {"{'a': 1}", "{'e': '$nope'}", "{}", 0},
    {"{'a': 1}", "{'e': '$$ROOT'}", "{'v': {'a': 1}}", 0},
    {"{'a': 1}", "{'e': '$$CURRENT.a'}", "{'v': 1}", 0},
    {"{'a': 1}", "{'e': '$$REMOVE'}", "{}", 0},
    {"{'a': 1}", "{'e': 'lit'}", "{'v': 'lit'}", 0},
    {"{'a': 1}", "{'e': {'$literal': '$a'}}", "{'v': '$a'}", 0},
    {"{'a': 1}", "{'e': {'x': '$a', 'y': [1, '$a', '$nope']}}",
     "{'v': {'x': 1, 'y': [1, 1, null]}}", 0},
    {"{'a': 1}", "{'e': {'$eq': ['$a', 1.0]}}", "{'v': true}", 0},
    {"{'a': 1}", "{'e': {'$ne': ['$a', 1]}}", "{'v': false}", 0},
    {"{'a': 1}", "{'e': {'$gt': ['$a', null]}}", "{'v': true}", 0},
    {"{}", "{'e': {'$lt': ['$a', null]}}", "{'v': true}", 0},
    {"{'a': 'x'}", "{'e': {'$gt': ['$a', 5]}}", "{'v': true}", 0},
    {"{'a': 2}", "{'e': {'$cmp': ['$a', 5]}}", "{'v': -1}", 0},
    {"{'a': 2}", "{'e': {'$and': [true, '$a']}}", "{'v': true}", 0},
    {"{'a': 0}", "{'e': {'$and': [true, '$a']}}", "{'v': false}", 0},
    {"{'a': 0}", "{'e': {'$or': [false, '$a']}}", "{'v': false}", 0},
    {"{'a': 0}", "{'e': {'$not': ['$a']}}", "{'v': true}", 0},
    {"{'a': []}", "{'e': {'$not': ['$a']}}", "{'v': false}", 0},
    {"{'a': 1}", "{'e': {'$cond': [{'$eq': ['$a', 1]}, 'yes', 'no']}}", "{'v': 'yes'}", 0},
    {"{'a': 2}", "{'e': {'$cond': {'if': {'$eq': ['$a', 1]}, 'then': 'yes', 'else': 'no'}}}",
     "{'v': 'no'}", 0},
    {"{'a': null}", "{'e': {'$ifNull': ['$a', '$b', 7]}}", "{'v': 7}", 0},
    {"{'a': 1, 'b': 2}", "{'e': {'$add': ['$a', '$b', 0.5]}}", "{'v': 3.5}", 0},
    {"{'a': 2147483647}", "{'e': {'$add': ['$a', 1]}}", "{'v': {'$numberLong': '2147483648'}}", 0},
    {"{'a': 1}", "{'e': {'$add': ['$a', null]}}", "{'v': null}", 0},
    {"{'a': 3}", "{'e': {'$multiply': ['$a', 4]}}", "{'v': 12}", 0},
    {"{'a': 'x'}", "{'e': {'$concat': ['$a', 'y']}}", "{'v': 'xy'}", 0},
    {"{'a': [1, 2]}", "{'e': {'$size': '$a'}}", "{'v': 2}", 0},
    {"{'a': 'x'}", "{'e': {'$add': ['$a', 1]}}", NULL, 16554},
    {"{'a': 'x'}", "{'e': {'$size': '$a'}}", NULL, 17124},
    {"{}", "{'e': {'$foo': 1}}", NULL, 168},
    {"{}", "{'e': {'$eq': [1, 2, 3]}}", NULL, 16020},
    {"{}", "{'e': '$'}", NULL, 16872},
    {"{}", "{'e': '$a..b'}", NULL, 15998},
    {"{}", "{'e': '$$nope'}", NULL, 17276},
    {"{}", "{'e': '$$Bad'}", NULL, 17276},
    {"{}", "{'e': {'$eq': [1, 1], '$ne': [1, 1]}}", NULL, 15983},
    {"{}", "{'e': {'$cond': {'if': true, 'then': 1}}}", NULL, 17082},
};

SHL_TEST(expression_table)
{
    int failures = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const ecase_t *c = &cases[i];
        bson_t *doc = shl_test_bson(c->doc), *spec = shl_test_bson(c->expr), got = BSON_INITIALIZER;
        shl_expr_t *e = NULL;
        shl_expr_ctx_t ctx = {0};
        shl_status_t st = SHL_STATUS_INIT;
        bson_value_t v = {0};
        bson_iter_t it;
        int rc;
        bson_iter_init_find(&it, spec, "e");
        rc = shl_expr_parse(bson_iter_value(&it), &e, &st);
        if (rc == 0) {
            ctx.root = doc;
            rc = shl_expr_evaluate(e, &ctx, &v, &st);
        }
        if (rc != c->code) {
            shl_test_fail_here(__FILE__, __LINE__, "case %zu %s: code %d want %d (%s)", i, c->expr,
                               rc, c->code, rc ? st.reason : "");
            failures++;
        } else if (rc == 0) {
            char *g, *w;
            if (v.value_type != BSON_TYPE_EOD) {
                bson_append_value(&got, "v", 1, &v);
            }
            if (!shl_test_bson_eq(&got, c->want, &g, &w)) {
                shl_test_fail_here(__FILE__, __LINE__, "case %zu %s: got %s want %s", i, c->expr, g,
                                   w);
                failures++;
            }
            bson_free(g);
            bson_free(w);
        }
        bson_value_destroy(&v);
        bson_destroy(&got);
        shl_expr_destroy(e);
        bson_destroy(doc);
        bson_destroy(spec);
    }
    ASSERT_INT_EQ(failures, 0);
}
