/*
 * message_test.c -- wire protocol parsing: OP_MSG bodies, document sequences,
 * checksums, flags, malformed input; OP_QUERY; CRC-32C.
 */
#include <string.h>

#include "base/unit_test.h"
#include "net/message.h"

static void
put_i32(uint8_t *p, int32_t v)
{
    memcpy(p, &v, 4);
}

SHL_TEST(crc32c_known_vector)
{
    /* The standard check value of CRC-32C for "123456789". */
    ASSERT_INT_EQ(shl_crc32c((const uint8_t *)"123456789", 9), 0xE3069283u);
}

SHL_TEST(op_msg_round_trip_with_checksum)
{
    bson_t *body = shl_test_bson("{'ping': 1, '$db': 'admin'}");
    size_t n;
    uint8_t *buf = shl_msg_build_op_msg(7, 0, SHL_MSG_CHECKSUM_PRESENT, body, &n);
    shl_message_t msg;
    shl_status_t st;

    ASSERT_INT_EQ(shl_msg_parse(buf, n, &msg, &st), 0);
    ASSERT_INT_EQ(msg.hdr.request_id, 7);
    ASSERT_BSON_EQ(&msg.body, "{'ping': 1, '$db': 'admin'}");
    shl_msg_cleanup(&msg);
    buf[n - 6] ^= 1; /* corrupt the body */
    ASSERT_INT_EQ(shl_msg_parse(buf, n, &msg, &st), SHL_CODE_CHECKSUM_MISMATCH);
    shl_msg_cleanup(&msg);
    bson_free(buf);
    bson_destroy(body);
}

SHL_TEST(op_msg_document_sequence_merged)
{
    bson_t *body = shl_test_bson("{'insert': 'c', '$db': 'test'}");
    bson_t *d1 = shl_test_bson("{'_id': 1}");
    bson_t *d2 = shl_test_bson("{'_id': 2}");
    uint8_t buf[512];
    size_t off = 16;
    shl_message_t msg;
    shl_status_t st;

    put_i32(buf + off, 0);
    off += 4;
    buf[off++] = 0;
    memcpy(buf + off, bson_get_data(body), body->len);
    off += body->len;
    buf[off++] = 1;
    int32_t slen = 4 + 10 + (int32_t)d1->len + (int32_t)d2->len;
    put_i32(buf + off, slen);
    memcpy(buf + off + 4, "documents", 10);
    memcpy(buf + off + 14, bson_get_data(d1), d1->len);
    memcpy(buf + off + 14 + d1->len, bson_get_data(d2), d2->len);
    off += (size_t)slen;
    put_i32(buf, (int32_t)off);
    put_i32(buf + 4, 1);
    put_i32(buf + 8, 0);
    put_i32(buf + 12, SHL_OP_MSG);
    ASSERT_INT_EQ(shl_msg_parse(buf, off, &msg, &st), 0);
    ASSERT_BSON_EQ(&msg.body,
                   "{'insert': 'c', '$db': 'test', 'documents': [{'_id': 1}, {'_id': 2}]}");
    shl_msg_cleanup(&msg);
    /* A truncated sequence is refused, not read past. */
    put_i32(buf, (int32_t)off - 3);
    ASSERT(shl_msg_parse(buf, off - 3, &msg, &st) != 0);
    shl_msg_cleanup(&msg);
    bson_destroy(body);
    bson_destroy(d1);
    bson_destroy(d2);
}

SHL_TEST(op_msg_rejects_bad_input)
{
    bson_t *body = shl_test_bson("{'ping': 1, '$db': 'admin'}");
    size_t n;
    uint8_t *buf = shl_msg_build_op_msg(1, 0, 0, body, &n);
    shl_message_t msg;
    shl_status_t st;

    put_i32(buf + 16, 1 << 3); /* an unknown required flag */
    ASSERT_INT_EQ(shl_msg_parse(buf, n, &msg, &st), SHL_CODE_ILLEGAL_OP_MSG_FLAG);
    shl_msg_cleanup(&msg);
    put_i32(buf + 16, 0);
    put_i32(buf + 21, 1000); /* body length beyond the message */
    ASSERT_INT_EQ(shl_msg_parse(buf, n, &msg, &st), SHL_CODE_INVALID_BSON);
    shl_msg_cleanup(&msg);
    put_i32(buf + 21, (int32_t)body->len);
    buf[20] = 9; /* unknown section kind */
    ASSERT_INT_EQ(shl_msg_parse(buf, n, &msg, &st), 40432);
    shl_msg_cleanup(&msg);
    bson_free(buf);
    bson_destroy(body);
}

SHL_TEST(header_length_limits)
{
    shl_msg_header_t h = {.length = 48000001, .opcode = SHL_OP_MSG};
    shl_status_t st;
    ASSERT_INT_EQ(shl_msg_header_check(&h, &st), SHL_CODE_PROTOCOL_ERROR);
    h.length = 16;
    ASSERT_INT_EQ(shl_msg_header_check(&h, &st), SHL_CODE_PROTOCOL_ERROR);
    h.length = 48000000;
    ASSERT_INT_EQ(shl_msg_header_check(&h, &st), 0);
}
