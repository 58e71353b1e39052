/*
 * fuzz_expression.c -- libFuzzer target for the aggregation expression language: the input,
 * if it is valid BSON, is read as {name: <expression>, ...}; every value is parsed as an
 * expression and evaluated against a few documents and against the input itself. Nothing
 * may crash, leak, read out of bounds or run unbounded (the evaluator's work budget and
 * libFuzzer's -timeout catch the last).
 */
#include <bson/bson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "net/message.h"
#include "query/expression.h"
#include "query/expression_private.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const docs[] = {
        "{\"a\": 1, \"b\": [1, {\"c\": \"x\"}, [2]], \"d\": {\"e\": null}, \"s\": \"h\\u00e9llo\"}",
        ("{\"a\": [{\"b\": 1}, {\"b\": [1, 2]}], \"x\": \"hello\", \"n\": 3.5, "
         "\"t\": {\"$date\": \"2021-03-15T10:20:30.456Z\"}}"),
        "{}",
    };
    bson_t input, vars;
    bson_iter_t it;

    if (shl_msg_check_bson(data, size, &(shl_status_t){0}) != 0 ||
        !bson_init_static(&input, data, size) || !bson_iter_init(&it, &input)) {
        return 0;
    }
    /* Same bounds as the server, except a smaller work budget so that inputs hitting it stay
     * well under libFuzzer's -timeout with ASan. */
    expr_max_work_items = 200 * 1000;
    expr_max_work_bytes = 16 * 1024 * 1024;
    bson_init(&vars);
    bson_append_int32(&vars, "v", 1, 7);
    while (bson_iter_next(&it)) {
        shl_expr_t *e = NULL;
        shl_status_t st;
        if (shl_expr_parse(bson_iter_value(&it), &e, &st) != 0) {
            continue;
        }
        for (size_t i = 0; i <= sizeof(docs) / sizeof(docs[0]); i++) {
            bson_t *d = i < sizeof(docs) / sizeof(docs[0])
                            ? bson_new_from_json((const uint8_t *)docs[i], -1, NULL)
                            : bson_copy(&input);
            shl_expr_ctx_t ctx = {0};
            bson_value_t out;
            bool b;
            ctx.root = d;
            ctx.vars = &vars;
            ctx.now_ms = 1616000000000;
            if (i == 0) {
                (void)shl_expr_evaluate_bool(e, &ctx, &b, &st);
            } else if (shl_expr_evaluate(e, &ctx, &out, &st) == 0) {
                bson_value_destroy(&out);
            }
            bson_destroy(d);
        }
        shl_expr_destroy(e);
    }
    bson_destroy(&vars);
    return 0;
}
