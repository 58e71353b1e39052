/*
 * bson_util_test.c -- dotted paths, MongoDB's toString rendering, number conversions,
 * ObjectId/UUID generation, Timestamp packing.
 */
#include <math.h>
#include <pthread.h>

#include "base/unit_test.h"
#include "bson/bson_path.h"
#include "bson/bson_util.h"

static bool
path_is(const bson_t *doc, const char *path, const char *want_json)
{
    bson_iter_t it;
    if (!shl_bson_path_get(doc, path, &it)) {
        return want_json == NULL;
    }
    if (want_json == NULL) {
        return false;
    }
    bson_t got = BSON_INITIALIZER;
    char *g, *w;
    bson_append_iter(&got, "v", 1, &it);
    char want_doc[256];
    snprintf(want_doc, sizeof(want_doc), "{'v': %s}", want_json);
    bool eq = shl_test_bson_eq(&got, want_doc, &g, &w);
    if (!eq) {
        fprintf(stderr, "  path %s: got %s want %s\n", path, g, w);
    }
    bson_free(g);
    bson_free(w);
    bson_destroy(&got);
    return eq;
}

SHL_TEST(path_lookup_without_array_expansion)
{
    bson_t *doc = shl_test_bson("{'a': {'b': [10, {'c': 'x'}, [7, 8]], 'd': 1}, 'e': 2, "
                                "'f.g': 3, '': {'': 4}, 'arr': [{'k': 1}, {'k': 2}]}");
    ASSERT(path_is(doc, "a.d", "1"));
    ASSERT(path_is(doc, "e", "2"));
    ASSERT(path_is(doc, "a.b.0", "10"));
    ASSERT(path_is(doc, "a.b.1.c", "'x'"));
    ASSERT(path_is(doc, "a.b.2.1", "8"));
    ASSERT(path_is(doc, "a.b", "[10, {'c': 'x'}, [7, 8]]"));
    ASSERT(path_is(doc, "a.b.3", NULL));  /* out of range */
    ASSERT(path_is(doc, "a.b.01", NULL)); /* not a canonical index */
    ASSERT(path_is(doc, "a.b.c", NULL));  /* no array expansion */
    ASSERT(path_is(doc, "arr.k", NULL));  /* ditto */
    ASSERT(path_is(doc, "arr.1.k", "2"));
    ASSERT(path_is(doc, "e.x", NULL)); /* traversing a scalar */
    ASSERT(path_is(doc, "a.x", NULL));
    ASSERT(path_is(doc, "a.dd", NULL)); /* exact names only */
    ASSERT(path_is(doc, "A.d", NULL));  /* case-sensitive */
    ASSERT(path_is(doc, "f.g", NULL));  /* a dotted field name is not reachable */
    ASSERT(path_is(doc, ".", "4"));     /* empty components are names too */
    ASSERT(path_is(doc, "", "{'': 4}"));
    bson_value_t v;
    ASSERT(shl_bson_path_get_value(doc, "a.b.1.c", &v));
    ASSERT_INT_EQ(v.value_type, BSON_TYPE_UTF8);
    ASSERT_STR_EQ(v.value.v_utf8.str, "x");
    bson_iter_t it;
    ASSERT(shl_bson_path_get_n(doc, "a.dXYZ", 3, &it));
    ASSERT_INT_EQ(bson_iter_int32(&it), 1);
    ASSERT(shl_bson_path_is_array_index("0", 1));
    ASSERT(!shl_bson_path_is_array_index("-1", 2));
    bson_destroy(doc);
}

static bool
renders(const char *json, const char *want)
{
    bson_t *doc = shl_test_bson(json);
    char *got = shl_bson_to_string(doc);
    bool ok = strcmp(got, want) == 0;
    if (!ok) {
        fprintf(stderr, "  %s renders as\n    %s\n  want\n    %s\n", json, got, want);
    }
    bson_free(got);
    bson_destroy(doc);
    return ok;
}

SHL_TEST(to_string_like_mongodb)
{
    ASSERT(renders("{}", "{}"));
    ASSERT(renders("{'_id': 1}", "{ _id: 1 }"));
    ASSERT(renders("{'a': 'x', 'b': 1.5, 'c': 2.0, 'd': {'$numberLong': '3'}}",
                   "{ a: \"x\", b: 1.5, c: 2.0, d: 3 }"));
    ASSERT(renders("{'a': [], 'b': {}, 'c': [1, [2], {'x': null}]}",
                   "{ a: [], b: {}, c: [ 1, [ 2 ], { x: null } ] }"));
    ASSERT(
        renders("{'o': {'$oid': '5b2be413c06d924ab26ff9ca'}, 'd': {'$date': {'$numberLong': "
                "'0'}}, 't': {'$timestamp': {'t': 5, 'i': 1}}}",
                "{ o: ObjectId('5b2be413c06d924ab26ff9ca'), d: new Date(0), t: Timestamp(5, 1) }"));
    ASSERT(renders("{'r': {'$regularExpression': {'pattern': 'a.b', 'options': 'i'}}, 'u': "
                   "{'$undefined': true}, 'mn': {'$minKey': 1}, 'mx': {'$maxKey': 1}, 'b': true}",
                   "{ r: /a.b/i, u: undefined, mn: MinKey, mx: MaxKey, b: true }"));
    ASSERT(renders("{'n': {'$numberDecimal': '1.50'}, 'e': 1e300, 'i': {'$numberDouble': "
                   "'Infinity'}, 'z': {'$numberDouble': '-0.0'}}",
                   "{ n: 1.50, e: 1e+300.0, i: inf.0, z: -0.0 }"));
    ASSERT(renders("{'bin': {'$binary': {'base64': 'AQIDBA==', 'subType': '00'}}, 'uuid': "
                   "{'$binary': {'base64': 'AAECAwQFBgcICQoLDA0ODw==', 'subType': '04'}}}",
                   "{ bin: BinData(0, 01020304), uuid: "
                   "UUID(\"00010203-0405-0607-0809-0a0b0c0d0e0f\") }"));
    ASSERT(renders("{'c': {'$code': 'f()'}, 'cs': {'$code': 'g()', '$scope': {'x': 1}}, 'p': "
                   "{'$dbPointer': {'$ref': 'db.c', '$id': {'$oid': '010203040506070809101112'}}}}",
                   "{ c: f(), cs: CodeWScope( g(), { x: 1 }), p: "
                   "DBRef('db.c',010203040506070809101112) }"));

    /* strings longer than 159 bytes are cut to 150 and '..."' */
    char long_str[200], json[300], want[300];
    memset(long_str, 'q', 170);
    long_str[170] = '\0';
    snprintf(json, sizeof(json), "{'s': '%s'}", long_str);
    long_str[150] = '\0';
    snprintf(want, sizeof(want), "{ s: \"%s...\" }", long_str);
    ASSERT(renders(json, want));

    bson_value_t v = {.value_type = BSON_TYPE_INT32};
    v.value.v_int32 = -7;
    char *s = shl_bson_value_to_string(&v);
    ASSERT_STR_EQ(s, "-7");
    bson_free(s);
    ASSERT_STR_EQ(shl_bson_type_name(BSON_TYPE_OID), "objectId");
    ASSERT_STR_EQ(shl_bson_type_name(BSON_TYPE_INT64), "long");
    ASSERT_STR_EQ(shl_bson_type_name(BSON_TYPE_CODEWSCOPE), "javascriptWithScope");
}

static bson_value_t
json_val(bson_t **holder, const char *json)
{
    char buf[256];
    bson_iter_t it;
    snprintf(buf, sizeof(buf), "{'v': %s}", json);
    *holder = shl_test_bson(buf);
    bson_iter_init_find(&it, *holder, "v");
    return *bson_iter_value(&it);
}

SHL_TEST(number_conversions_like_mongodb)
{
    static const struct {
        const char *json;
        bool exact_ok;
        int64_t exact;
        int64_t safe;
        bool truth;
    } cases[] = {
        {"7", true, 7, 7, true},
        {"0", true, 0, 0, false},
        {"{'$numberLong': '-9223372036854775808'}", true, INT64_MIN, INT64_MIN, true},
        {"2.0", true, 2, 2, true},
        {"2.5", false, 0, 2, true},
        {"-2.5", false, 0, -2, true},
        {"9223372036854775808.0", false, 0, INT64_MAX, true},
        {"-9223372036854775808.0", true, INT64_MIN, INT64_MIN, true},
        {"1e300", false, 0, INT64_MAX, true},
        {"{'$numberDouble': '-Infinity'}", false, 0, INT64_MIN, true},
        {"{'$numberDouble': 'NaN'}", false, 0, 0, true},
        {"{'$numberDouble': '-0.0'}", true, 0, 0, false},
        {"{'$numberDecimal': '1.00'}", true, 1, 1, true},
        {"{'$numberDecimal': '2.5'}", false, 0, 2, true}, /* ties to even */
        {"{'$numberDecimal': '3.5'}", false, 0, 4, true},
        {"{'$numberDecimal': '-2.5'}", false, 0, -2, true},
        {"{'$numberDecimal': '2.51'}", false, 0, 3, true},
        {"{'$numberDecimal': '0.5'}", false, 0, 0, true},
        {"{'$numberDecimal': '0.05'}", false, 0, 0, true},
        {"{'$numberDecimal': '9223372036854775807.4'}", false, 0, INT64_MAX, true},
        {"{'$numberDecimal': '1E+30'}", false, 0, INT64_MAX, true},
        {"{'$numberDecimal': '-1E+30'}", false, 0, INT64_MIN, true},
        {"{'$numberDecimal': 'NaN'}", false, 0, 0, true},
        {"{'$numberDecimal': '-0E+5'}", true, 0, 0, false},
        {"'12'", false, 0, 0, true},
        {"null", false, 0, 0, false},
        {"false", false, 0, 0, false},
        {"{}", false, 0, 0, true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bson_t *holder;
        bson_value_t v = json_val(&holder, cases[i].json);
        int64_t got = -12345;
        bool ok = shl_bson_value_as_int64_exact(&v, &got);
        if (ok != cases[i].exact_ok || (ok && got != cases[i].exact) ||
            shl_bson_value_safe_int64(&v) != cases[i].safe ||
            shl_bson_value_true(&v) != cases[i].truth) {
            fprintf(stderr, "  %s: exact %d/%" PRId64 " safe %" PRId64 " true %d\n", cases[i].json,
                    ok, got, shl_bson_value_safe_int64(&v), shl_bson_value_true(&v));
            ASSERT(false);
        }
        bson_destroy(holder);
    }
    bson_t *h;
    bson_value_t d = json_val(&h, "{'$numberDecimal': '0.1'}");
    ASSERT(shl_bson_value_as_double(&d) == 0.1);
    bson_destroy(h);
    d = json_val(&h, "{'$numberDecimal': '-Infinity'}");
    ASSERT(isinf(shl_bson_value_as_double(&d)) && shl_bson_value_as_double(&d) < 0);
    bson_destroy(h);
    d = json_val(&h, "{'$numberLong': '9007199254740993'}");
    ASSERT(shl_bson_value_as_double(&d) == 9007199254740992.0);
    bson_destroy(h);
    ASSERT(shl_bson_type_is_number(BSON_TYPE_DECIMAL128));
    ASSERT(!shl_bson_type_is_number(BSON_TYPE_BOOL));
}

#define OID_THREADS 4
#define OIDS_PER_THREAD 5000

static bson_oid_t oids[OID_THREADS * OIDS_PER_THREAD];

static void *
gen_oids(void *arg)
{
    bson_oid_t *out = arg;
    for (int i = 0; i < OIDS_PER_THREAD; i++) {
        shl_bson_oid_gen(&out[i]);
    }
    return NULL;
}

static int
oid_cmp(const void *a, const void *b)
{
    return bson_oid_compare(a, b);
}

SHL_TEST(oid_and_uuid_generation)
{
    pthread_t th[OID_THREADS];
    for (int t = 0; t < OID_THREADS; t++) {
        pthread_create(&th[t], NULL, gen_oids, &oids[t * OIDS_PER_THREAD]);
    }
    for (int t = 0; t < OID_THREADS; t++) {
        pthread_join(th[t], NULL);
    }
    qsort(oids, OID_THREADS * OIDS_PER_THREAD, sizeof(bson_oid_t), oid_cmp);
    int dups = 0;
    for (int i = 1; i < OID_THREADS * OIDS_PER_THREAD; i++) {
        dups += bson_oid_equal(&oids[i - 1], &oids[i]);
    }
    ASSERT_INT_EQ(dups, 0);

    uint8_t u1[16], u2[16], back[16];
    shl_uuid_gen(u1);
    shl_uuid_gen(u2);
    ASSERT(memcmp(u1, u2, 16) != 0);
    ASSERT_INT_EQ(u1[6] >> 4, 4);
    ASSERT_INT_EQ(u1[8] >> 6, 2);
    bson_t doc = BSON_INITIALIZER;
    bson_iter_t it;
    ASSERT(shl_bson_append_uuid(&doc, "uuid", u1));
    ASSERT(bson_iter_init_find(&it, &doc, "uuid"));
    ASSERT(shl_bson_iter_uuid(&it, back));
    ASSERT(memcmp(u1, back, 16) == 0);
    bson_destroy(&doc);
}

SHL_TEST(timestamps_and_append_helpers)
{
    uint32_t t, i;
    uint64_t ts = shl_timestamp_pack(0x55667788u, 0x11223344u);
    ASSERT(ts == UINT64_C(0x5566778811223344));
    shl_timestamp_unpack(ts, &t, &i);
    ASSERT_INT_EQ(t, 0x55667788u);
    ASSERT_INT_EQ(i, 0x11223344u);
    ASSERT(shl_timestamp_pack(2, 0) > shl_timestamp_pack(1, 0xffffffffu));

    bson_t doc = BSON_INITIALIZER;
    bson_iter_t it;
    ASSERT(shl_bson_append_timestamp_u64(&doc, "ts", shl_timestamp_pack(7, 3)));
    bson_value_t vals[2] = {{.value_type = BSON_TYPE_INT32}, {.value_type = BSON_TYPE_NULL}};
    vals[0].value.v_int32 = 4;
    ASSERT(shl_bson_append_array_values(&doc, "arr", vals, 2));
    ASSERT(shl_bson_append_value(&doc, "one", &vals[0]));
    ASSERT_BSON_EQ(&doc, "{'ts': {'$timestamp': {'t': 7, 'i': 3}}, 'arr': [4, null], 'one': 4}");
    ASSERT(bson_iter_init_find(&it, &doc, "ts"));
    ASSERT(shl_bson_iter_timestamp_u64(&it) == shl_timestamp_pack(7, 3));

    bson_t *cmd = shl_test_bson("{'find': 'c', '$db': 'test', 'filter': {}, 'lsid': {'id': 1}}");
    bson_t out = BSON_INITIALIZER;
    static const char *const skip[] = {"$db", "lsid", NULL};
    shl_bson_copy_fields_except(&out, cmd, skip);
    ASSERT_BSON_EQ(&out, "{'find': 'c', 'filter': {}}");
    bson_destroy(&out);
    bson_destroy(cmd);
    bson_destroy(&doc);
}

SHL_TEST(find_key_like_bson_iter_init_find)
{
    /* The same answer as libbson's lookup: first match, exact case, dots are characters. */
    bson_t *doc = shl_test_bson("{'a': 1, 'a.b': 2, 'ab': 3, 'a': 4, 'B': 5, '': 6}");
    static const char *const keys[] = {"a", "a.b", "ab", "b", "B", "abc", "$db", ""};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        bson_iter_t mine, theirs;
        bool found = shl_bson_iter_find_key(&mine, doc, keys[i]);
        ASSERT(found == bson_iter_init_find(&theirs, doc, keys[i]));
        if (found) {
            ASSERT_INT_EQ(bson_iter_int32(&mine), bson_iter_int32(&theirs));
        }
    }
    bson_destroy(doc);
}

SHL_TEST(array_room_counts_what_is_appended)
{
    /* The predicted element sizes match what libbson appends, across key widths. */
    bson_t doc = BSON_INITIALIZER, arr, *small = shl_test_bson("{'_id': 'w-1-2'}");
    char key[16];
    const char *k;
    const size_t max_len = 64 * 1024;
    uint32_t n = 0;

    ASSERT(bson_append_array_begin(&doc, "a", 1, &arr));
    while (shl_bson_array_has_room(&arr, n, small->len, max_len)) {
        uint32_t before = arr.len;
        bson_uint32_to_string(n, &k, key, sizeof(key));
        ASSERT(bson_append_document(&arr, k, -1, small));
        ASSERT_INT_EQ(arr.len - before, shl_bson_array_element_len(n, small->len));
        n++;
    }
    /* Full: it stopped at the last element that fits, not one earlier. */
    ASSERT(arr.len <= max_len);
    ASSERT(arr.len + shl_bson_array_element_len(n, small->len) > max_len);
    ASSERT_INT_EQ(shl_bson_array_element_len(9, 5), 8);
    ASSERT_INT_EQ(shl_bson_array_element_len(10, 5), 9);
    ASSERT_INT_EQ(shl_bson_array_element_len(1000000, 5), 14);
    /* The first element always fits, however large. */
    ASSERT(shl_bson_array_has_room(&arr, 0, max_len * 2, max_len));
    bson_append_array_end(&doc, &arr);
    bson_destroy(&doc);
    bson_destroy(small);
}

SHL_TEST(value_len_is_what_an_element_adds)
{
    /* For every type: appending the value under a one-byte key adds its type byte, the key
     * with its NUL and exactly shl_bson_value_len bytes. */
    bson_t *doc = bson_new(), child = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    bson_oid_t oid;
    bson_decimal128_t dec = {.high = 0x3040000000000000ull, .low = 7};
    static const uint8_t bin[] = {1, 2, 3, 4, 5};
    bson_iter_t it;
    int n = 0;

    bson_oid_init_from_string(&oid, "0123456789abcdef01234567");
    BSON_APPEND_INT32(&child, "a", 1);
    BSON_APPEND_UTF8(&arr, "0", "x");
    BSON_APPEND_DOUBLE(doc, "double", 1.5);
    BSON_APPEND_UTF8(doc, "utf8", "hello");
    BSON_APPEND_UTF8(doc, "empty", "");
    BSON_APPEND_DOCUMENT(doc, "document", &child);
    BSON_APPEND_ARRAY(doc, "array", &arr);
    BSON_APPEND_BINARY(doc, "binary", BSON_SUBTYPE_BINARY, bin, sizeof(bin));
    BSON_APPEND_BINARY(doc, "binary_old", BSON_SUBTYPE_BINARY_DEPRECATED, bin, sizeof(bin));
    BSON_APPEND_UNDEFINED(doc, "undefined");
    BSON_APPEND_OID(doc, "oid", &oid);
    BSON_APPEND_BOOL(doc, "bool", true);
    BSON_APPEND_DATE_TIME(doc, "date", 86400000);
    BSON_APPEND_NULL(doc, "null");
    BSON_APPEND_REGEX(doc, "regex", "^a.*b$", "im");
    BSON_APPEND_REGEX(doc, "regex_plain", "x", "");
    BSON_APPEND_DBPOINTER(doc, "dbpointer", "db.coll", &oid);
    BSON_APPEND_CODE(doc, "code", "function () {}");
    BSON_APPEND_SYMBOL(doc, "symbol", "sym");
    BSON_APPEND_CODE_WITH_SCOPE(doc, "codewscope", "function () { return x; }", &child);
    BSON_APPEND_INT32(doc, "int32", -7);
    BSON_APPEND_TIMESTAMP(doc, "timestamp", 5, 6);
    BSON_APPEND_INT64(doc, "int64", 1ll << 40);
    BSON_APPEND_DECIMAL128(doc, "decimal", &dec);
    BSON_APPEND_MAXKEY(doc, "max");
    BSON_APPEND_MINKEY(doc, "min");
    ASSERT(bson_iter_init(&it, doc));
    while (bson_iter_next(&it)) {
        bson_t one = BSON_INITIALIZER;
        const bson_value_t *v = bson_iter_value(&it);
        ASSERT(bson_append_value(&one, "k", 1, v));
        if (one.len - 5 != 1 + 2 + shl_bson_value_len(v)) {
            fprintf(stderr, "%s: %u bytes, predicted %zu\n", bson_iter_key(&it), one.len - 5,
                    1 + 2 + shl_bson_value_len(v));
        }
        ASSERT_INT_EQ(one.len - 5, 1 + 2 + shl_bson_value_len(v));
        bson_destroy(&one);
        n++;
    }
    ASSERT_INT_EQ(n, 24);
    bson_destroy(&arr);
    bson_destroy(&child);
    bson_destroy(doc);
}

/* The first '$'-prefixed name at any depth of an _id value (what makes it invalid). */
static const char *
dollar_key_of(const char *json, bson_t **keep)
{
    bson_iter_t it;
    *keep = shl_test_bson(json);
    if (!bson_iter_init_find(&it, *keep, "v")) {
        return "(no v)";
    }
    return shl_bson_value_dollar_key(bson_iter_value(&it));
}

SHL_TEST(dollar_key_at_any_depth)
{
    static const struct {
        const char *json;
        const char *want;
    } cases[] = {
        {"{'v': 1}", NULL},
        {"{'v': '$x'}", NULL},
        {"{'v': {'a.b': 1, 'c': {'d': [1, {'e': 2}]}}}", NULL},
        {"{'v': {'$b': 1}}", "$b"},
        {"{'v': {'a': 1, 'b': {'$c': 1}}}", "$c"},
        {"{'v': {'a': [{'x': 1}, {'$y': 1}]}}", "$y"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bson_t *doc = NULL;
        const char *got = dollar_key_of(cases[i].json, &doc);
        if (cases[i].want == NULL) {
            ASSERT(got == NULL);
        } else {
            ASSERT(got != NULL && strcmp(got, cases[i].want) == 0);
        }
        bson_destroy(doc);
    }
}
