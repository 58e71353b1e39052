/*
 * bson_hash_test.c -- MongoDB's hashed-index hash against the test vectors of MongoDB's
 * own hasher_test.cpp (values determined on MongoDB servers), one per BSON type.
 */
#include <float.h>
#include <math.h>

#include "base/unit_test.h"
#include "bson/bson_hash.h"
#include "bson/md5.h"

static int64_t
hash_json(const char *json)
{
    char buf[512];
    bson_iter_t it;
    snprintf(buf, sizeof(buf), "{'check': %s}", json);
    bson_t *doc = shl_test_bson(buf);
    bson_iter_init_find(&it, doc, "check");
    int64_t h = shl_bson_hash_iter(&it, SHL_BSON_HASH_DEFAULT_SEED);
    bson_destroy(doc);
    return h;
}

static int64_t
hash_double(double d)
{
    bson_value_t v = {.value_type = BSON_TYPE_DOUBLE};
    v.value.v_double = d;
    return shl_bson_hash_value(&v, 0);
}

SHL_TEST(hash_numbers_mongodb_vectors)
{
    ASSERT_INT_EQ(hash_json("42"), INT64_C(-944302157085130861));
    ASSERT_INT_EQ(hash_json("42.123"), INT64_C(-944302157085130861));
    ASSERT_INT_EQ(hash_json("{'$numberLong': '42'}"), INT64_C(-944302157085130861));
    ASSERT_INT_EQ(hash_json("0"), INT64_C(4854801880128277513));
    ASSERT_INT_EQ(hash_json("0.456"), INT64_C(4854801880128277513));
    ASSERT_INT_EQ(hash_json("{'$numberLong': '0'}"), INT64_C(4854801880128277513));
    ASSERT_INT_EQ(hash_double(NAN), INT64_C(4854801880128277513)); /* NaN hashes as 0 */
    ASSERT_INT_EQ(hash_json("1"), INT64_C(5902408780260971510));
    ASSERT_INT_EQ(hash_json("1.987"), INT64_C(5902408780260971510));
    ASSERT_INT_EQ(hash_json("-1"), INT64_C(1140205862565771219));
    ASSERT_INT_EQ(hash_json("-1.789"), INT64_C(1140205862565771219));
    ASSERT_INT_EQ(hash_json("{'$numberLong': '-1'}"), INT64_C(1140205862565771219));
    ASSERT_INT_EQ(hash_json("-2147483648"), INT64_C(6165898260261354870));
    ASSERT_INT_EQ(hash_double(-2147483648.0), INT64_C(6165898260261354870));
    ASSERT_INT_EQ(hash_json("2147483647"), INT64_C(1143184177162245883));
    ASSERT_INT_EQ(hash_double(2147483647.0), INT64_C(1143184177162245883));
    ASSERT_INT_EQ(hash_double(DBL_MAX), INT64_C(921523596458303250));
    ASSERT_INT_EQ(hash_json("{'$numberLong': '9223372036854775807'}"), INT64_C(921523596458303250));
    ASSERT_INT_EQ(hash_double(-DBL_MAX), INT64_C(4532067210535695462));
    ASSERT_INT_EQ(hash_json("{'$numberLong': '-9223372036854775808'}"),
                  INT64_C(4532067210535695462));
    /* 2^63 as a double hashes like INT64_MIN (MongoDB keeps an old overflow) */
    ASSERT_INT_EQ(hash_double(9223372036854775808.0), INT64_C(4532067210535695462));
    ASSERT_INT_EQ(hash_double(INFINITY), INT64_C(921523596458303250));
}

SHL_TEST(hash_decimals_squash_like_numbers)
{
    ASSERT_INT_EQ(hash_json("{'$numberDecimal': '42'}"), INT64_C(-944302157085130861));
    ASSERT_INT_EQ(hash_json("{'$numberDecimal': '42.4'}"), INT64_C(-944302157085130861));
    ASSERT_INT_EQ(hash_json("{'$numberDecimal': '41.5'}"), INT64_C(-944302157085130861));
    ASSERT_INT_EQ(hash_json("{'$numberDecimal': '0.5'}"), INT64_C(4854801880128277513));
    ASSERT_INT_EQ(hash_json("{'$numberDecimal': 'NaN'}"), INT64_C(4854801880128277513));
    ASSERT_INT_EQ(hash_json("{'$numberDecimal': '1E+40'}"), INT64_C(921523596458303250));
    ASSERT_INT_EQ(hash_json("{'$numberDecimal': '-Infinity'}"), INT64_C(4532067210535695462));
}

SHL_TEST(hash_other_types_mongodb_vectors)
{
    ASSERT_INT_EQ(hash_json("{'$minKey': 1}"), INT64_C(7961148599568647290));
    ASSERT_INT_EQ(hash_json("{'$maxKey': 1}"), INT64_C(5504842513779440750));
    ASSERT_INT_EQ(hash_json("{'$undefined': true}"), INT64_C(40158834000849533));
    ASSERT_INT_EQ(hash_json("null"), INT64_C(2338878944348059895));
    ASSERT_INT_EQ(hash_json("'abc'"), INT64_C(8478485326885698097));
    ASSERT_INT_EQ(hash_json("{'$symbol': 'abc'}"), INT64_C(8478485326885698097));
    ASSERT_INT_EQ(hash_json("''"), INT64_C(2049396243249673340));
    ASSERT_INT_EQ(hash_json("{'a': 'abc', 'b': {'$numberLong': '123'}}"),
                  INT64_C(4771603801758380216));
    ASSERT_INT_EQ(hash_json("{}"), INT64_C(7980500913326740417));
    ASSERT_INT_EQ(hash_json("['bar', 'baz', 'qux']"), INT64_C(-2938911267422831539));
    ASSERT_INT_EQ(hash_json("[]"), INT64_C(8849948234993459283));
    ASSERT_INT_EQ(hash_json("{'$binary': {'base64': 'AAECAwQG', 'subType': '00'}}"),
                  INT64_C(7252465090394235301));
    ASSERT_INT_EQ(hash_json("{'$binary': {'base64': 'AAECAwQG', 'subType': '80'}}"),
                  INT64_C(5736670452907618262));
    ASSERT_INT_EQ(hash_json("{'$binary': {'base64': 'AAECAwQFBgcICQoLDA0ODw==', 'subType': '04'}}"),
                  INT64_C(6084661258071355978));
    ASSERT_INT_EQ(hash_json("{'$oid': '010203040506070809101112'}"), INT64_C(-5588663249627035708));
    ASSERT_INT_EQ(hash_json("{'$oid': '000000000000000000000000'}"), INT64_C(-4293118519463489418));
    ASSERT_INT_EQ(hash_json("true"), INT64_C(6405873908747105701));
    ASSERT_INT_EQ(hash_json("false"), INT64_C(6289544573401934092));
    ASSERT_INT_EQ(hash_json("{'$date': {'$numberLong': '6153737367135073092'}}"),
                  INT64_C(4476222765095560467)); /* 0x5566778811223344 */
    ASSERT_INT_EQ(hash_json("{'$date': {'$numberLong': '0'}}"), INT64_C(-1178696894582842035));
    ASSERT_INT_EQ(hash_json("{'$regularExpression': {'pattern': 'mongodb', 'options': ''}}"),
                  INT64_C(-7275792090268217043));
    ASSERT_INT_EQ(hash_json("{'$regularExpression': {'pattern': '.*', 'options': 'i'}}"),
                  INT64_C(7095855029187981886));
    ASSERT_INT_EQ(
        hash_json("{'$dbPointer': {'$ref': 'c', '$id': {'$oid': '010203040506070809101112'}}}"),
        INT64_C(940175826736461384));
    ASSERT_INT_EQ(
        hash_json("{'$dbPointer': {'$ref': 'db.c', '$id': {'$oid': '010203040506070809101112'}}}"),
        INT64_C(2426768198104018194));
    ASSERT_INT_EQ(hash_json("{'$code': 'func f() { return 1; }'}"), INT64_C(6861638109178014270));
    ASSERT_INT_EQ(hash_json("{'$code': 'func f() { return 1; }', '$scope': {'c': true}}"),
                  INT64_C(501342939894575968));
}

SHL_TEST(hash_properties)
{
    /* Sub-documents hash whole; numbers squash inside them too; seed matters. */
    ASSERT(hash_json("{'a': {}, 'b': 1}") != hash_json("{'a': {'b': 1}}"));
    ASSERT_INT_EQ(hash_json("{'a': 3, 'b': [3.1, {'c': 3}]}"),
                  hash_json("{'a': 3.1, 'b': [3, {'c': 3.0}]}"));
    ASSERT(hash_json("{'0': 0, '1': 1}") != hash_json("[0, 1]"));
    ASSERT(hash_json("3") != hash_json("'3'"));
    bson_value_t v = {.value_type = BSON_TYPE_INT32};
    v.value.v_int32 = 4;
    ASSERT(shl_bson_hash_value(&v, 0) != shl_bson_hash_value(&v, 1));
    /* Timestamp has its own canonical type (47) since MongoDB 3.x: it no longer hashes
     * like a Date with the same bits, as the 2013 vectors had it. */
    ASSERT(hash_json("{'$timestamp': {'t': 1432778632, 'i': 287454020}}") !=
           hash_json("{'$date': {'$numberLong': '6153737367135073092'}}"));
}

/* RFC 1321's test suite, and a message fed in uneven pieces across block boundaries. */
static void
md5_hex(const char *msg, size_t piece, char out[33])
{
    shl_md5_t m;
    uint8_t d[16];
    size_t n = strlen(msg);

    shl_md5_init(&m);
    for (size_t off = 0; off < n; off += piece) {
        shl_md5_update(&m, msg + off, n - off < piece ? n - off : piece);
    }
    shl_md5_final(&m, d);
    for (int i = 0; i < 16; i++) {
        snprintf(out + i * 2, 3, "%02x", d[i]);
    }
}

SHL_TEST(md5_rfc1321_vectors)
{
    static const char *const v[][2] = {
        {"", "d41d8cd98f00b204e9800998ecf8427e"},
        {"a", "0cc175b9c0f1b6a831c399e269772661"},
        {"abc", "900150983cd24fb0d6963f7d28e17f72"},
        {"message digest", "f96b697d7cb7938d525a2f31aaf161d0"},
        {"abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"},
        {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
         "d174ab98d277d9f5a5611c2c9f419d9f"},
        {"1234567890123456789012345678901234567890"
         "1234567890123456789012345678901234567890",
         "57edf4a22be3c955ac49da2e2107b67a"},
    };
    char hex[33];
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        for (size_t piece = 1; piece <= 70; piece += 23) {
            md5_hex(v[i][0], piece, hex);
            ASSERT_STR_EQ(hex, v[i][1]);
        }
    }
}

SHL_TEST(hash_fast_equality_classes)
{
    /* Values that compare equal hash equal; the fast hash spreads the rest. */
    bson_value_t a = {.value_type = BSON_TYPE_INT32}, b = {.value_type = BSON_TYPE_DOUBLE},
                 c = {.value_type = BSON_TYPE_INT64};
    a.value.v_int32 = 7;
    b.value.v_double = 7.0;
    c.value.v_int64 = 7;
    ASSERT_INT_EQ(shl_bson_hash_fast(&a), shl_bson_hash_fast(&b));
    ASSERT_INT_EQ(shl_bson_hash_fast(&a), shl_bson_hash_fast(&c));
    c.value.v_int64 = 8;
    ASSERT(shl_bson_hash_fast(&a) != shl_bson_hash_fast(&c));
    {
        /* 10k consecutive ints fill 1024 buckets evenly enough (no bucket over 40). */
        int counts[1024] = {0}, worst = 0;
        for (int i = 0; i < 10000; i++) {
            a.value.v_int32 = i;
            int k = (int)(shl_bson_hash_fast(&a) % 1024);
            if (++counts[k] > worst) {
                worst = counts[k];
            }
        }
        ASSERT(worst < 40);
    }
}
