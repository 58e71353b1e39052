/*
 * fuzz_matcher.c -- libFuzzer target for the query parsers: the input, if it is valid BSON,
 * is parsed as a filter (then matched against a few documents and itself), a projection,
 * a sort pattern and an update. Nothing may crash, leak or read out of bounds.
 */
#include <bson/bson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "net/message.h"
#include "query/matcher.h"
#include "query/projection.h"
#include "query/sort.h"
#include "query/update.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const docs[] = {
        "{\"a\": 1, \"b\": [1, {\"c\": \"x\"}, [2]], \"d\": {\"e\": null}}",
        "{\"a\": [{\"b\": 1}, {\"b\": [1, 2]}], \"x\": \"hello\", \"n\": 3.5}",
        "{}",
    };
    bson_t filter;
    shl_matcher_t *m = NULL;
    shl_projection_t *p = NULL;
    shl_sort_pattern_t *sp = NULL;
    shl_update_t *u = NULL;
    shl_status_t st;
    bson_value_t uv;

    if (shl_msg_check_bson(data, size, &(shl_status_t){0}) != 0 ||
        !bson_init_static(&filter, data, size)) {
        return 0;
    }
    if (shl_matcher_new(&filter, SHL_MATCHER_DEFAULT, &m, &st) == 0) {
        for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
            bson_t *d = bson_new_from_json((const uint8_t *)docs[i], -1, NULL);
            shl_match_details_t det = {0};
            bool matched;
            (void)shl_matcher_match(m, d, &det, &matched, &st);
            bson_destroy(d);
        }
        (void)shl_matcher_matches(m, &filter);
        bson_t eq;
        (void)shl_matcher_equality_fields(m, &eq, &st);
        bson_destroy(&eq);
        shl_matcher_destroy(m);
    }
    if (shl_projection_new(&filter, NULL, &p, &st) == 0) {
        bson_t out;
        (void)shl_projection_apply(p, &filter, NULL, NULL, &out, &st);
        bson_destroy(&out);
        shl_projection_destroy(p);
    }
    if (shl_sort_pattern_new(&filter, &sp, &st) == 0) {
        bson_t key;
        shl_sort_key_compute(sp, &filter, &key);
        bson_destroy(&key);
        shl_sort_pattern_destroy(sp);
    }
    uv.value_type = BSON_TYPE_DOCUMENT;
    uv.value.v_doc.data_len = (uint32_t)size;
    uv.value.v_doc.data = bson_malloc(size);
    memcpy(uv.value.v_doc.data, data, size);
    if (shl_update_new(&uv, NULL, &u, &st) == 0) {
        bson_t *d = bson_new_from_json((const uint8_t *)docs[0], -1, NULL), out;
        shl_update_ctx_t ctx = {0};
        bool changed;
        ctx.has_matched_key = true;
        ctx.now_ms = 1;
        (void)shl_update_apply(u, d, &ctx, &out, &changed, &st);
        bson_destroy(&out);
        bson_destroy(d);
        shl_update_destroy(u);
    }
    bson_free(uv.value.v_doc.data);
    return 0;
}
