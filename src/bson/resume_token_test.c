/*
 * resume_token_test.c -- resume tokens against a token MongoDB produced (decoded by
 * MongoDB's own tools), their order and parsing.
 */
#include <string.h>

#include "base/unit_test.h"
#include "bson/resume_token.h"

SHL_TEST(resume_token_matches_mongodb_v1)
{
    /* {clusterTime: Timestamp(1630438675, 1), version: 1, tokenType: 128, txnOpIndex: 0,
     *  fromInvalidate: false, uuid: a5093abb-..., documentKey: {_id: "___x"}} */
    static const uint8_t uuid[16] = {0xa5, 0x09, 0x3a, 0xbb, 0x38, 0xfe, 0x4b, 0x9e,
                                     0xa6, 0x7f, 0x01, 0xbb, 0x1a, 0x96, 0xd8, 0x12};
    bson_t *key = shl_test_bson("{'_id': '___x'}");
    shl_resume_token_t t = {.cluster_time = ((uint64_t)1630438675 << 32) | 1,
                            .version = 1,
                            .token_type = SHL_RESUME_TOKEN_EVENT,
                            .has_uuid = true,
                            .event_id = key};
    memcpy(t.uuid, uuid, 16);
    char *hex = shl_resume_token_hex(&t);
    ASSERT_STR_EQ(hex, "82612E8513000000012B022C0100296E5A1004A5093ABB38FE4B9EA67F01BB1A96D81246"
                       "3C5F6964003C5F5F5F78000004");
    bson_free(hex);
    bson_destroy(key);
}

SHL_TEST(resume_token_parse_and_order)
{
    bson_t *key = shl_test_bson("{'operationType': 'insert', 'documentKey': {'_id': 7}}");
    shl_resume_token_t ev = {.cluster_time = ((uint64_t)100 << 32) | 3,
                             .version = SHL_RESUME_TOKEN_VERSION,
                             .token_type = SHL_RESUME_TOKEN_EVENT,
                             .txn_op_index = 300,
                             .has_uuid = true,
                             .event_id = key};
    shl_resume_token_t hwm = {.cluster_time = ((uint64_t)100 << 32) | 3,
                              .version = SHL_RESUME_TOKEN_VERSION,
                              .token_type = SHL_RESUME_TOKEN_HWM};
    shl_resume_token_t later = hwm, got;
    bson_t doc = BSON_INITIALIZER;
    char why[128];
    const char *h;

    later.cluster_time++;
    memset(ev.uuid, 0x42, 16);
    char *e = shl_resume_token_hex(&ev), *w = shl_resume_token_hex(&hwm),
         *l = shl_resume_token_hex(&later);
    ASSERT(strcmp(w, e) < 0);
    ASSERT(strcmp(e, l) < 0);
    shl_resume_token_append(&doc, "t", &ev);
    {
        bson_iter_t it;
        bson_t sub;
        uint32_t len;
        const uint8_t *data;
        ASSERT(bson_iter_init_find(&it, &doc, "t"));
        bson_iter_document(&it, &len, &data);
        ASSERT(bson_init_static(&sub, data, len));
        ASSERT(shl_resume_token_parse(&sub, &got, &h, why));
        ASSERT_STR_EQ(h, e);
    }
    ASSERT_INT_EQ(got.cluster_time, ev.cluster_time);
    ASSERT_INT_EQ(got.version, 2);
    ASSERT_INT_EQ(got.token_type, 128);
    ASSERT_INT_EQ(got.txn_op_index, 300);
    ASSERT(got.has_uuid && got.uuid[15] == 0x42 && !got.from_invalidate);
    bson_free(e);
    bson_free(w);
    bson_free(l);
    bson_destroy(&doc);
    bson_destroy(key);
    {
        bson_t *bad = shl_test_bson("{'_data': 'zz'}");
        ASSERT(!shl_resume_token_parse(bad, &got, NULL, why));
        bson_destroy(bad);
    }
}
