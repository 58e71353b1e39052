/*
 * log_test.c -- the log line format (compact, MongoDB's field order), the JSON
 * renderer for attribute values, and the ring of recent lines getLog reads.
 */
#include <stdlib.h>
#include <unistd.h>

#include "base/log.h"
#include "base/unit_test.h"

static void
check_json(const char *json_in, bool array, const char *want, const char *file, int line)
{
    bson_t *doc = shl_test_bson(json_in);
    char *got = shl_log_json_from_bson(doc, array, NULL);
    if (strcmp(got, want) != 0) {
        shl_test_fail_here(file, line, "json of %s\n  got:  %s\n  want: %s", json_in, got, want);
    }
    bson_free(got);
    bson_destroy(doc);
}

#define CHECK_JSON(in, want) check_json((in), false, (want), __FILE__, __LINE__)

SHL_TEST(log_json_scalars_and_nesting)
{
    CHECK_JSON("{}", "{}");
    CHECK_JSON("{'a': 1, 'b': 'x', 'c': true, 'd': null}",
               "{\"a\":1,\"b\":\"x\",\"c\":true,\"d\":null}");
    CHECK_JSON("{'l': {'$numberLong': '9007199254740993'}}", "{\"l\":9007199254740993}");
    CHECK_JSON("{'d': 1.0, 'e': 2.5, 'f': 0.1, 'g': -3e300}",
               "{\"d\":1.0,\"e\":2.5,\"f\":0.1,\"g\":-3e+300}");
    CHECK_JSON("{'n': {'$numberDouble': 'NaN'}}", "{\"n\":{\"$numberDouble\":\"NaN\"}}");
    CHECK_JSON("{'a': [1, {'b': []}, [2]]}", "{\"a\":[1,{\"b\":[]},[2]]}");
    CHECK_JSON("{'t': {'$date': {'$numberLong': '1700000000123'}}}",
               "{\"t\":{\"$date\":\"2023-11-14T22:13:20.123Z\"}}");
    CHECK_JSON("{'o': {'$oid': '0123456789abcdef01234567'}}",
               "{\"o\":{\"$oid\":\"0123456789abcdef01234567\"}}");
    CHECK_JSON("{'ts': {'$timestamp': {'t': 5, 'i': 7}}}",
               "{\"ts\":{\"$timestamp\":{\"t\":5,\"i\":7}}}");
    CHECK_JSON("{'b': {'$binary': {'base64': 'AQID', 'subType': '00'}}}",
               "{\"b\":{\"$binary\":{\"base64\":\"AQID\",\"subType\":\"00\"}}}");
    CHECK_JSON("{'u': {'$binary': {'base64': 'AAECAwQFBgcICQoLDA0ODw==', 'subType': '04'}}}",
               "{\"u\":{\"$uuid\":\"00010203-0405-0607-0809-0a0b0c0d0e0f\"}}");
    CHECK_JSON("{'m': {'$minKey': 1}, 'x': {'$maxKey': 1}}",
               "{\"m\":{\"$minKey\":1},\"x\":{\"$maxKey\":1}}");
}

SHL_TEST(log_json_string_escaping)
{
    bson_t doc = BSON_INITIALIZER;
    char *got;

    BSON_APPEND_UTF8(&doc, "q\"k", "a\"b\\c\nd\te\x01 \xc3\xa9");
    bson_append_utf8(&doc, "bad", -1, "x\xff\xc3y", 4); /* not UTF-8 */
    bson_append_int32(&doc, "k\xfe\x80", -1, 1);        /* a field name that is not UTF-8 */
    got = shl_log_json_from_bson(&doc, false, NULL);
    ASSERT_STR_EQ(got, "{\"q\\\"k\":\"a\\\"b\\\\c\\nd\\te\\u0001 \xc3\xa9\","
                       "\"bad\":\"x\\ufffd\\ufffdy\",\"k\\ufffd\\ufffd\":1}");
    bson_free(got);
    bson_destroy(&doc);
}

SHL_TEST(log_json_depth_is_bounded)
{
    bson_t *docs[150];
    bson_t *inner = bson_new();
    char *got;
    size_t len;

    /* Build {a:{a:{...}}} 150 deep; the renderer stops at 100 levels. */
    docs[0] = inner;
    for (int i = 1; i < 150; i++) {
        docs[i] = bson_new();
        BSON_APPEND_DOCUMENT(docs[i], "a", docs[i - 1]);
    }
    got = shl_log_json_from_bson(docs[149], false, &len);
    ASSERT(strstr(got, "\"...\"") != NULL);
    ASSERT_INT_EQ(len, strlen(got));
    bson_free(got);
    for (int i = 0; i < 150; i++) {
        bson_destroy(docs[i]);
    }
}

SHL_TEST(log_line_format_and_recent_ring)
{
    char path[] = "/tmp/shl_log_testXXXXXX";
    int fd = mkstemp(path);
    char buf[4096];
    ssize_t n;
    bson_t arr = BSON_INITIALIZER;
    bson_iter_t it;
    int64_t before = shl_log_lines_written();

    ASSERT(fd >= 0);
    ASSERT_INT_EQ(shl_log_open(path), 0);
    shl_log_set_thread_ctx("conn12");
    SHL_LOG_INFO(NETWORK, 22943, "Connection accepted", "remote", BCON_UTF8("127.0.0.1:5"),
                 "connectionId", BCON_INT64(12), "ok", BCON_BOOL(true));
    n = pread(fd, buf, sizeof(buf) - 1, 0);
    ASSERT(n > 0);
    buf[n] = '\0';
    ASSERT(strncmp(buf, "{\"t\":{\"$date\":\"", 15) == 0);
    ASSERT(strstr(buf, "+00:00\"},\"s\":\"I\",\"c\":\"NETWORK\",\"id\":22943,\"ctx\":\"conn12\","
                       "\"msg\":\"Connection accepted\",\"attr\":{\"remote\":\"127.0.0.1:5\","
                       "\"connectionId\":12,\"ok\":true}}\n") != NULL);
    ASSERT(strchr(buf, ' ') == strstr(buf, " accepted")); /* the only space is in msg */
    ASSERT_INT_EQ(shl_log_lines_written(), before + 1);
    shl_log_recent(&arr, 1);
    ASSERT(bson_iter_init_find(&it, &arr, "0") && BSON_ITER_HOLDS_UTF8(&it));
    ASSERT(strncmp(bson_iter_utf8(&it, NULL), buf, (size_t)n - 1) == 0);
    bson_destroy(&arr);
    close(fd);
    unlink(path);
}
