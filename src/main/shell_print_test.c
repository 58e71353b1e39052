/*
 * shell_print_test.c -- documents rendered in mongosh's notation: each case is a JSON
 * input and the text mongosh shows for it.
 */
#include "base/unit_test.h"
#include "main/shell_print.h"

static bool
check(const char *json, bool is_array, const char *want)
{
    bson_t *doc = shl_test_bson(json);
    char *got = shl_shell_doc_new(doc, is_array, 0);
    bool ok = strcmp(got, want) == 0;
    if (!ok) {
        fprintf(stderr, "  input: %s\n  got:\n%s\n  want:\n%s\n", json, got, want);
    }
    bson_free(got);
    bson_destroy(doc);
    return ok;
}

SHL_TEST(shell_print_scalars)
{
    ASSERT(check("{}", false, "{}"));
    ASSERT(check("{}", true, "[]"));
    ASSERT(check("{'_id': 'shard0', 'state': 1, 'x': 1.5, 'd': 2.0, 'b': true, 'n': null}", false,
                 "{ _id: 'shard0', state: 1, x: 1.5, d: 2, b: true, n: null }"));
    ASSERT(check("{'n': {'$numberLong': '7'}, 'ts': {'$timestamp': {'t': 5, 'i': 2}}}", false,
                 "{ n: Long('7'), ts: Timestamp({ t: 5, i: 2 }) }"));
    ASSERT(
        check("{'a': {'$minKey': 1}, 'b': {'$maxKey': 1}}", false, "{ a: MinKey(), b: MaxKey() }"));
    ASSERT(check("{'o': {'$oid': '0123456789abcdef01234567'}}", false,
                 "{ o: ObjectId('0123456789abcdef01234567') }"));
    ASSERT(check("{'u': {'$binary': {'base64': 'AAECAwQFBgcICQoLDA0ODw==', 'subType': '04'}}}",
                 false, "{ u: UUID('00010203-0405-0607-0809-0a0b0c0d0e0f') }"));
    ASSERT(check("{'on shard': 'it\\u0027s', 'a.b': 'q\\\"'}", false,
                 "{ 'on shard': \"it's\", 'a.b': 'q\"' }"));
    ASSERT(check("{'d': {'$date': {'$numberLong': '1700000000123'}}}", false,
                 "{ d: ISODate('2023-11-14T22:13:20.123Z') }"));
}

SHL_TEST(shell_print_breaks_long_documents)
{
    ASSERT(check("{'0': {'_id': 'shard0', 'host': 'shard0/127.0.0.1:27019', 'state': 1, "
                 "'topologyTime': {'$timestamp': {'t': 1700000000, 'i': 3}}}}",
                 true,
                 "[\n"
                 "  {\n"
                 "    _id: 'shard0',\n"
                 "    host: 'shard0/127.0.0.1:27019',\n"
                 "    state: 1,\n"
                 "    topologyTime: Timestamp({ t: 1700000000, i: 3 })\n"
                 "  }\n"
                 "]"));
    ASSERT(check("{'0': {'a': 1}, '1': {'a': 2}}", true, "[ { a: 1 }, { a: 2 } ]"));
}
