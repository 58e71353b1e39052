/*
 * message_test.c -- wire protocol parsing: OP_MSG bodies, document sequences,
 * checksums, flags, malformed input; OP_QUERY; CRC-32C.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/unit_test.h"
#include "net/command_args.h"
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

/*
 * An OP_MSG whose body is {ping: 1, $db: 'admin', x: {a: {a: ...}}} with 'depth'
 * documents below x, written as raw bytes (building it with libbson would copy
 * every level into its parent).
 */
static uint8_t *
nested_op_msg(int depth, size_t *n)
{
    static const uint8_t head[] = "\x10ping\0\x01\0\0\0\x02$db\0\x06\0\0\0admin\0\x03x\0";
    size_t nested = 5 + (size_t)depth * 8; /* x's document */
    size_t body = 4 + (sizeof(head) - 1) + nested + 1;
    size_t total = 16 + 4 + 1 + body;
    uint8_t *buf = bson_malloc(total), *p = buf;
    size_t len = nested;

    put_i32(p, (int32_t)total);
    put_i32(p + 4, 1);
    put_i32(p + 8, 0);
    put_i32(p + 12, SHL_OP_MSG);
    put_i32(p + 16, 0);
    p[20] = 0;
    p += 21;
    put_i32(p, (int32_t)body);
    memcpy(p + 4, head, sizeof(head) - 1);
    p += 4 + sizeof(head) - 1;
    for (int i = 0; i < depth; i++) {
        put_i32(p, (int32_t)len);
        p[4] = BSON_TYPE_DOCUMENT; /* then the key "a" and its NUL */
        p[5] = (uint8_t)'a';
        p[6] = 0;
        p += 7;
        len -= 8;
    }
    put_i32(p, 5);
    p[4] = 0;
    p += 5;
    memset(p, 0, (size_t)depth + 1); /* each level's terminator, then the body's */
    *n = total;
    return buf;
}

SHL_TEST(op_msg_nesting_depth_limit)
{
    shl_message_t msg;
    shl_status_t st;
    size_t n;
    /* 'x' is one level below the body: 199 more make 200 levels, MongoDB's limit. */
    uint8_t *ok = nested_op_msg(199, &n);
    ASSERT_INT_EQ(shl_msg_parse(ok, n, &msg, &st), 0);
    shl_msg_cleanup(&msg);
    bson_free(ok);

    uint8_t *deep = nested_op_msg(200, &n);
    ASSERT_INT_EQ(shl_msg_parse(deep, n, &msg, &st), SHL_CODE_OVERFLOW);
    ASSERT_STR_EQ(st.reason, "BSONObj exceeded maximum nested object depth: 200");
    shl_msg_cleanup(&msg);
    bson_free(deep);

    /* Far deeper than any stack could recurse: refused without recursion. */
    uint8_t *bomb = nested_op_msg(300000, &n);
    ASSERT_INT_EQ(shl_msg_parse(bomb, n, &msg, &st), SHL_CODE_OVERFLOW);
    shl_msg_cleanup(&msg);
    bson_free(bomb);
}

SHL_TEST(op_msg_structure_checks)
{
    bson_t body = BSON_INITIALIZER, scope = BSON_INITIALIZER;
    shl_message_t msg;
    shl_status_t st;
    size_t n;
    uint8_t *buf;

    BSON_APPEND_INT32(&body, "ping", 1);
    BSON_APPEND_UTF8(&body, "$db", "admin");
    BSON_APPEND_REGEX(&body, "re", "^a", "i");
    BSON_APPEND_INT32(&scope, "v", 1);
    BSON_APPEND_CODE_WITH_SCOPE(&body, "cws", "f()", &scope);
    bson_append_binary(&body, "bin", -1, BSON_SUBTYPE_BINARY, (const uint8_t *)"xyz", 3);
    BSON_APPEND_DECIMAL128(&body, "dec", &(bson_decimal128_t){0});
    buf = shl_msg_build_op_msg(1, 0, 0, &body, &n);
    ASSERT_INT_EQ(shl_msg_parse(buf, n, &msg, &st), 0);
    shl_msg_cleanup(&msg);
    /* A string whose length runs past the document. */
    for (size_t i = 21; i + 4 < n; i++) {
        if (memcmp(buf + i, "$db\0", 4) == 0) {
            put_i32(buf + i + 4, 1000);
            break;
        }
    }
    ASSERT_INT_EQ(shl_msg_parse(buf, n, &msg, &st), SHL_CODE_INVALID_BSON);
    shl_msg_cleanup(&msg);
    bson_free(buf);
    bson_destroy(&scope);
    bson_destroy(&body);
}

/* Parse 'doc' ('len' bytes) as the body of an OP_MSG; returns the parser's code. */
static int
parse_body(const uint8_t *doc, size_t len)
{
    size_t n = 21 + len;
    uint8_t *buf = bson_malloc0(n);
    shl_message_t msg;
    shl_status_t st;
    int rc;

    put_i32(buf, (int32_t)n);
    put_i32(buf + 12, SHL_OP_MSG);
    memcpy(buf + 21, doc, len);
    rc = shl_msg_parse(buf, n, &msg, &st);
    shl_msg_cleanup(&msg);
    bson_free(buf);
    return rc;
}

/* A document nesting {'a': ...} 'depth' levels below the top; the caller frees it. */
static uint8_t *
nested_doc(int depth, size_t *len)
{
    size_t n = 5 + 8 * (size_t)depth;
    uint8_t *p = bson_malloc0(n); /* the trailing EOO bytes are the zeros */

    for (int i = 0; i <= depth; i++) {
        put_i32(p + 7 * (size_t)i, (int32_t)(n - 8 * (size_t)i));
        if (i < depth) {
            memcpy(p + 7 * (size_t)i + 4,
                   "\x03"
                   "a",
                   3);
        }
    }
    *len = n;
    return p;
}

SHL_TEST(bson_depth_limit)
{
    size_t n;
    uint8_t *doc = nested_doc(200, &n);
    ASSERT_INT_EQ(parse_body(doc, n), 0);
    bson_free(doc);
    doc = nested_doc(201, &n);
    ASSERT_INT_EQ(parse_body(doc, n), SHL_CODE_OVERFLOW);
    bson_free(doc);
    /* Found by a crash: libbson's recursive validation overflowed the thread's stack. */
    doc = nested_doc(1000000, &n);
    ASSERT_INT_EQ(parse_body(doc, n), SHL_CODE_OVERFLOW);
    bson_free(doc);
}

SHL_TEST(bson_nested_document_without_eoo)
{
    /* {'a': {'x': 1}, 'b': 1}; found by fuzz_bson: libbson let a nested document whose
     * last byte is not EOO through when another element followed it. */
    uint8_t doc[] = {27, 0, 0, 0, 3, 'a',  0,   12, 0, 0, 0, 0x10, 'x', 0,
                     1,  0, 0, 0, 0, 0x10, 'b', 0,  1, 0, 0, 0,    0};
    ASSERT_INT_EQ(parse_body(doc, sizeof(doc)), 0);
    doc[18] = 0x28;
    ASSERT_INT_EQ(parse_body(doc, sizeof(doc)), SHL_CODE_INVALID_BSON);
}

SHL_TEST(bson_code_with_scope_structure)
{
    /* {'c': Code('f', {'x': 1}), 'b': 1} */
    uint8_t doc[] = {37, 0, 0,    0,   0x0f, 'c', 0, 22, 0, 0, 0,    2,   0, 0, 0, 'f', 0, 12, 0,
                     0,  0, 0x10, 'x', 0,    1,   0, 0,  0, 0, 0x10, 'b', 0, 1, 0, 0,   0, 0};
    ASSERT_INT_EQ(parse_body(doc, sizeof(doc)), 0);
    doc[28] = 0x28; /* the scope's EOO */
    ASSERT_INT_EQ(parse_body(doc, sizeof(doc)), SHL_CODE_INVALID_BSON);
    doc[28] = 0;
    doc[16] = 'g'; /* the code string's NUL */
    ASSERT_INT_EQ(parse_body(doc, sizeof(doc)), SHL_CODE_INVALID_BSON);
    doc[16] = 0;
    doc[7] = 23; /* the element's total size disagrees with its parts */
    ASSERT_INT_EQ(parse_body(doc, sizeof(doc)), SHL_CODE_INVALID_BSON);
}

SHL_TEST(op_msg_sequence_identifier_need_not_be_utf8)
{
    /* The identifier becomes a field name of the body and, as MongoDB reads it (a C
     * string), may hold bytes that are not UTF-8 like any field name. */
    bson_t *body = shl_test_bson("{'insert': 'c', '$db': 'test'}");
    bson_t *d1 = shl_test_bson("{'_id': 1}");
    bson_t want = BSON_INITIALIZER, arr;
    uint8_t buf[256] = {0};
    size_t off = 21;
    shl_message_t msg;
    shl_status_t st;

    memcpy(buf + off, bson_get_data(body), body->len);
    off += body->len;
    buf[off++] = 1;
    put_i32(buf + off, 4 + 3 + (int32_t)d1->len);
    memcpy(buf + off + 4, "\x88x", 3);
    memcpy(buf + off + 7, bson_get_data(d1), d1->len);
    off += 7 + d1->len;
    put_i32(buf, (int32_t)off);
    put_i32(buf + 12, SHL_OP_MSG);
    ASSERT_INT_EQ(shl_msg_parse(buf, off, &msg, &st), 0);
    bson_copy_to(body, &want);
    bson_append_array_begin(&want, "\x88x", -1, &arr);
    BSON_APPEND_DOCUMENT(&arr, "0", d1);
    bson_append_array_end(&want, &arr);
    ASSERT_INT_EQ(msg.body.len, want.len);
    ASSERT(memcmp(bson_get_data(&msg.body), bson_get_data(&want), want.len) == 0);
    shl_msg_cleanup(&msg);
    /* An empty identifier is still refused. */
    buf[21 + body->len + 5] = 0;
    ASSERT_INT_EQ(shl_msg_parse(buf, off, &msg, &st), SHL_CODE_PROTOCOL_ERROR);
    shl_msg_cleanup(&msg);
    bson_destroy(&want);
    bson_destroy(body);
    bson_destroy(d1);
}

SHL_TEST(bson_field_names_need_not_be_utf8)
{
    /*
     * Found by fuzz_bson: MongoDB's check of incoming BSON is structural only (UTF-8 is
     * checked only by validate's full mode), so a name or string that is not UTF-8 is
     * accepted and kept byte for byte; only the NUL that ends a name is required.
     */
    bson_t body = BSON_INITIALIZER, sub;
    shl_message_t msg;
    shl_status_t st;
    size_t n;
    uint8_t *buf;

    bson_append_utf8(&body, "fi\xffnd", -1, "c", -1);
    bson_append_document_begin(&body, "filter", -1, &sub);
    bson_append_int32(&sub, "a\xc3", -1, 1);                  /* truncated sequence */
    bson_append_utf8(&sub, "\xed\xa0\x80", -1, "x\x9by", -1); /* a surrogate; bad string */
    bson_append_document_end(&body, &sub);
    BSON_APPEND_UTF8(&body, "$db", "test");
    buf = shl_msg_build_op_msg(1, 0, 0, &body, &n);
    ASSERT_INT_EQ(shl_msg_parse(buf, n, &msg, &st), 0);
    ASSERT_INT_EQ(msg.body.len, body.len);
    ASSERT(memcmp(bson_get_data(&msg.body), bson_get_data(&body), body.len) == 0);
    shl_msg_cleanup(&msg);
    ASSERT_INT_EQ(shl_msg_check_bson(bson_get_data(&body), body.len, &st), 0);
    /* A name whose NUL is its document's last byte (no EOO left) is refused. */
    ASSERT_INT_EQ(parse_body((const uint8_t *)"\x08\0\0\0\x0a\xff\xfe\0", 8),
                  SHL_CODE_INVALID_BSON);
    bson_free(buf);
    bson_destroy(&body);
}

SHL_TEST(op_msg_sequence_keeps_body_bytes)
{
    /* Found by fuzz_message: merging re-appended the body through libbson, which
     * printed a warning on stderr for an array whose first key is not "0". */
    static const uint8_t inner[] = {12, 0, 0, 0, 0x10, 'x', 0, 1, 0, 0, 0, 0};
    bson_t body = BSON_INITIALIZER, inner_view;
    bson_t *d1 = shl_test_bson("{'_id': 1}");
    bson_iter_t it;
    uint8_t buf[256] = {0};
    size_t off = 21;
    shl_message_t msg;
    shl_status_t st;
    FILE *err = tmpfile();
    int saved = dup(2);

    ASSERT(bson_init_static(&inner_view, inner, sizeof(inner)));
    BSON_APPEND_UTF8(&body, "insert", "c");
    bson_append_document(&body, "a", -1, &inner_view);
    memcpy(buf + off, bson_get_data(&body), body.len);
    /* Field 'a' (after the length and the 14 bytes of 'insert') becomes an array with
     * key "x": valid BSON, though not what libbson writes. */
    buf[off + 18] = BSON_TYPE_ARRAY;
    off += body.len;
    buf[off++] = 1;
    put_i32(buf + off, 4 + 2 + (int32_t)d1->len);
    memcpy(buf + off + 4, "d", 2);
    memcpy(buf + off + 6, bson_get_data(d1), d1->len);
    off += 6 + d1->len;
    put_i32(buf, (int32_t)off);
    put_i32(buf + 12, SHL_OP_MSG);

    fflush(stderr);
    dup2(fileno(err), 2);
    ASSERT_INT_EQ(shl_msg_parse(buf, off, &msg, &st), 0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fseek(err, 0, SEEK_END);
    ASSERT_INT_EQ(ftell(err), 0);
    fclose(err);
    /* The body's elements are its own bytes, followed by the sequence as 'd'. */
    ASSERT(memcmp(bson_get_data(&msg.body) + 4, buf + 21 + 4, body.len - 5) == 0);
    ASSERT(bson_iter_init_find(&it, &msg.body, "d") && BSON_ITER_HOLDS_ARRAY(&it));
    shl_msg_cleanup(&msg);
    bson_destroy(&body);
    bson_destroy(d1);
}

SHL_TEST(generic_args_by_first_byte)
{
    static const char *const generic[] = {"$db",
                                          "$clusterTime",
                                          "$tenant",
                                          "lsid",
                                          "txnNumber",
                                          "txnRetryCounter",
                                          "autocommit",
                                          "apiVersion",
                                          "stmtId",
                                          "stmtIds",
                                          "shardVersion",
                                          "startOrContinueTransaction",
                                          "writeConcern",
                                          "maxTimeMS",
                                          "maxTimeMSOpOnly",
                                          "versionContext",
                                          NULL};
    static const char *const other[] = {"",      "$",           "find", "filter",
                                        "limit", "singleBatch", "stmt", "maxTime",
                                        "lsids", "$DB",         "Lsid", NULL};
    for (size_t i = 0; generic[i] != NULL; i++) {
        ASSERT(shl_cmd_is_generic_arg(generic[i]));
    }
    for (size_t i = 0; other[i] != NULL; i++) {
        ASSERT(!shl_cmd_is_generic_arg(other[i]));
    }
}

SHL_TEST(op_msg_with_db_written_directly)
{
    /* The same bytes as appending $db to a copy of the command and building from it. */
    /* With a clientOperationKey too: the key's element comes before $db. */
    static const char *const dbs[] = {"test", "", "a-much-longer-database-name"};
    static const uint8_t key[16] = {1, 2, 3, 4, 5, 6, 0x47, 8, 0x89, 10, 11, 12, 13, 14, 15, 16};
    bson_t *cmd = bson_new();
    BSON_APPEND_UTF8(cmd, "find", "c");
    BSON_APPEND_INT64(cmd, "limit", 1);
    for (size_t i = 0; i < 2 * sizeof(dbs) / sizeof(dbs[0]); i++) {
        bson_t body = BSON_INITIALIZER;
        size_t n1, n2;
        uint8_t *direct, *built;
        const uint8_t *k = i % 2 == 1 ? key : NULL;
        const char *db = dbs[i / 2];
        bson_concat(&body, cmd);
        if (k != NULL) {
            bson_append_binary(&body, "clientOperationKey", -1, BSON_SUBTYPE_UUID, k, 16);
        }
        BSON_APPEND_UTF8(&body, "$db", db);
        direct = shl_msg_build_op_msg_db(7, cmd, k, db, &n1);
        built = shl_msg_build_op_msg(7, 0, 0, &body, &n2);
        ASSERT_INT_EQ(n1, n2);
        ASSERT(memcmp(direct, built, n1) == 0);
        bson_free(direct);
        bson_free(built);
        bson_destroy(&body);
    }
    bson_destroy(cmd);
}

SHL_TEST(reply_prefix_then_body_is_the_built_message)
{
    /* A reply sent as prefix + document (writev) is byte for byte the built message. */
    bson_t *doc = shl_test_bson("{'ok': 1.0, 'n': 'reply'}");
    uint8_t pre[SHL_MSG_REPLY_PREFIX_MAX];
    static const uint32_t flags[] = {0, SHL_MSG_MORE_TO_COME};

    for (size_t i = 0; i < 2; i++) {
        size_t n, p = shl_msg_reply_prefix(pre, SHL_OP_MSG, 9, 4, flags[i], doc->len);
        uint8_t *built = shl_msg_build_op_msg(9, 4, flags[i], doc, &n);
        ASSERT_INT_EQ(p + doc->len, n);
        ASSERT(memcmp(built, pre, p) == 0);
        ASSERT(memcmp(built + p, bson_get_data(doc), doc->len) == 0);
        bson_free(built);
    }
    {
        size_t n, p = shl_msg_reply_prefix(pre, SHL_OP_REPLY, 9, 4, 0, doc->len);
        uint8_t *built = shl_msg_build_op_reply(9, 4, doc, &n);
        ASSERT_INT_EQ(p + doc->len, n);
        ASSERT(memcmp(built, pre, p) == 0);
        bson_free(built);
    }
    bson_destroy(doc);
}

SHL_TEST(op_msg_parse_view_borrows_plain_bodies)
{
    /* Without sequences the view parse borrows the buffer; shl_msg_parse always copies. */
    bson_t *body = shl_test_bson("{'find': 'c', 'filter': {'_id': 1}, '$db': 'test'}");
    size_t n;
    uint8_t *buf = shl_msg_build_op_msg(3, 0, 0, body, &n);
    shl_message_t msg;
    shl_status_t st;

    ASSERT_INT_EQ(shl_msg_parse_view(buf, n, &msg, &st), 0);
    ASSERT(bson_get_data(&msg.body) == buf + SHL_MSG_HEADER_LEN + 5);
    ASSERT_BSON_EQ(&msg.body, "{'find': 'c', 'filter': {'_id': 1}, '$db': 'test'}");
    shl_msg_cleanup(&msg);
    ASSERT_INT_EQ(shl_msg_parse(buf, n, &msg, &st), 0);
    ASSERT(bson_get_data(&msg.body) != buf + SHL_MSG_HEADER_LEN + 5);
    shl_msg_cleanup(&msg);
    /* A bad message leaves an empty, owned body and the buffer unchanged. */
    buf[n - 1] = 7;
    ASSERT(shl_msg_parse_view(buf, n, &msg, &st) != 0);
    ASSERT(bson_empty(&msg.body));
    shl_msg_cleanup(&msg);
    ASSERT_INT_EQ(buf[n - 1], 7);
    bson_free(buf);
    bson_destroy(body);
}
