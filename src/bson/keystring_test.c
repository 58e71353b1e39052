/*
 * keystring_test.c -- KeyString: round trips of every type, equal values give equal bytes,
 * and randomized properties (memcmp order of encodings == shl_bson_value_compare order, for
 * single fields ascending and descending, compound keys and RecordId suffixes).
 */
#include <math.h>

#include "base/unit_test.h"
#include "bson/bson_compare.h"
#include "bson/bson_test_util.h"
#include "bson/keystring.h"

static int
sign(int c)
{
    return c == 0 ? 0 : c < 0 ? -1 : 1;
}

/* Encode the value 'v' holds in a {'v': ...} document parsed from JSON. */
static bson_t *
json_value(const char *json, bson_iter_t *it)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "{'v': %s}", json);
    bson_t *doc = shl_test_bson(buf);
    bson_iter_init_find(it, doc, "v");
    return doc;
}

static void
encode_json(const char *json, bool desc, shl_keystring_t *ks)
{
    bson_iter_t it;
    bson_t *doc = json_value(json, &it);
    shl_keystring_init(ks);
    shl_keystring_append_iter(ks, &it, desc);
    bson_destroy(doc);
}

/* Decode a one-field key and check it equals 'json' (canonical types). */
static bool
round_trip(const char *json, const char *want_json)
{
    shl_keystring_t ks;
    bson_t out;
    char *got = NULL, *want_str = NULL;
    bool ok;
    char want_doc[512];

    encode_json(json, false, &ks);
    ok = shl_keystring_decode(ks.data, ks.len, NULL, 1, &out, NULL);
    snprintf(want_doc, sizeof(want_doc), "{'0': %s}", want_json);
    if (ok) {
        /* canonical extended JSON, so int32, int64 and double are told apart */
        bson_t *want = shl_test_bson(want_doc);
        got = bson_as_canonical_extended_json(&out, NULL);
        want_str = bson_as_canonical_extended_json(want, NULL);
        ok = strcmp(got, want_str) == 0;
        bson_destroy(want);
    }
    if (!ok) {
        fprintf(stderr, "  round trip of %s: got %s, want %s\n", json, got ? got : "(fail)",
                want_str ? want_str : want_json);
    }
    bson_free(got);
    bson_free(want_str);
    bson_destroy(&out);
    shl_keystring_cleanup(&ks);
    return ok;
}

SHL_TEST(keystring_round_trip_every_type)
{
    static const char *const cases[][2] = {
        {"{'$minKey': 1}", "{'$minKey': 1}"},
        {"{'$maxKey': 1}", "{'$maxKey': 1}"},
        {"null", "null"},
        {"{'$undefined': true}", "{'$undefined': true}"},
        {"1", "1"},
        {"1.0", "1"},
        {"{'$numberLong': '1'}", "1"},
        {"{'$numberDecimal': '1.0'}", "1"},
        {"{'$numberLong': '1099511627776'}", "{'$numberLong': '1099511627776'}"},
        {"{'$numberLong': '-9223372036854775808'}", "{'$numberLong': '-9223372036854775808'}"},
        {"{'$numberLong': '9223372036854775807'}", "{'$numberLong': '9223372036854775807'}"},
        {"-2147483648", "-2147483648"},
        {"2.5", "2.5"},
        {"-0.1", "-0.1"},
        {"{'$numberDouble': '-0.0'}", "0"},
        {"{'$numberDouble': '5e-324'}", "{'$numberDouble': '4.9406564584124654e-324'}"},
        {"{'$numberDouble': '1.7976931348623157e308'}", "1.7976931348623157e308"},
        {"9223372036854775808.0", "9223372036854775808.0"},
        {"{'$numberDouble': 'NaN'}", "{'$numberDouble': 'NaN'}"},
        {"{'$numberDecimal': 'NaN'}", "{'$numberDouble': 'NaN'}"},
        {"{'$numberDouble': 'Infinity'}", "{'$numberDouble': 'Infinity'}"},
        {"{'$numberDecimal': '-Infinity'}", "{'$numberDouble': '-Infinity'}"},
        {"{'$numberDecimal': '0.1'}", "{'$numberDecimal': '0.1'}"},
        {"{'$numberDecimal': '0.5'}", "0.5"},
        {"{'$numberDecimal': '-1E+6144'}", "{'$numberDecimal': '-1E+6144'}"},
        {"{'$numberDecimal': '9.999999999999999999999999999999999E+6144'}",
         "{'$numberDecimal': '9.999999999999999999999999999999999E+6144'}"},
        {"{'$numberDecimal': '1E-6176'}", "{'$numberDecimal': '1E-6176'}"},
        {"{'$numberDecimal': '9223372036854775808'}", "9223372036854775808.0"},
        {"{'$numberDecimal': '9223372036854775809'}", "{'$numberDecimal': '9223372036854775809'}"},
        {"''", "''"},
        {"'abc'", "'abc'"},
        {"'a\\u0000b'", "'a\\u0000b'"},
        {"{'$symbol': 'sym'}", "'sym'"},
        {"{}", "{}"},
        {"{'a': 1, 'b': {'c': [1, 'x', {'d': null}]}}",
         "{'a': 1, 'b': {'c': [1, 'x', {'d': null}]}}"},
        {"[]", "[]"},
        {"[[], [1.5, []], {}]", "[[], [1.5, []], {}]"},
        {"{'$binary': {'base64': 'AQID', 'subType': '00'}}",
         "{'$binary': {'base64': 'AQID', 'subType': '00'}}"},
        {"{'$binary': {'base64': '', 'subType': '80'}}",
         "{'$binary': {'base64': '', 'subType': '80'}}"},
        {"{'$oid': '5b2be413c06d924ab26ff9ca'}", "{'$oid': '5b2be413c06d924ab26ff9ca'}"},
        {"true", "true"},
        {"false", "false"},
        {"{'$date': {'$numberLong': '-62135596800000'}}",
         "{'$date': {'$numberLong': '-62135596800000'}}"},
        {"{'$timestamp': {'t': 4294967295, 'i': 7}}", "{'$timestamp': {'t': 4294967295, 'i': 7}}"},
        {"{'$regularExpression': {'pattern': 'a.*b', 'options': 'i'}}",
         "{'$regularExpression': {'pattern': 'a.*b', 'options': 'i'}}"},
        {"{'$dbPointer': {'$ref': 'db.c', '$id': {'$oid': '010203040506070809101112'}}}",
         "{'$dbPointer': {'$ref': 'db.c', '$id': {'$oid': '010203040506070809101112'}}}"},
        {"{'$code': 'return 1;'}", "{'$code': 'return 1;'}"},
        {"{'$code': 'f()', '$scope': {'x': 1.0}}", "{'$code': 'f()', '$scope': {'x': 1}}"},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        failed += !round_trip(cases[i][0], cases[i][1]);
    }
    ASSERT_INT_EQ(failed, 0);

    /* A large BinData (4-byte length form). */
    uint8_t big[1000];
    for (size_t i = 0; i < sizeof(big); i++) {
        big[i] = (uint8_t)i;
    }
    bson_t doc = BSON_INITIALIZER, out;
    bson_iter_t it, back;
    bson_append_binary(&doc, "v", 1, BSON_SUBTYPE_BINARY, big, sizeof(big));
    shl_keystring_t ks;
    shl_keystring_init(&ks);
    bson_iter_init_find(&it, &doc, "v");
    shl_keystring_append_iter(&ks, &it, true);
    bool desc = true;
    ASSERT(shl_keystring_decode(ks.data, ks.len, &desc, 1, &out, NULL));
    ASSERT(bson_iter_init_find(&back, &out, "0"));
    ASSERT_INT_EQ(shl_bson_iter_compare(&it, &back), 0);
    bson_destroy(&out);
    bson_destroy(&doc);
    shl_keystring_cleanup(&ks);
}

SHL_TEST(keystring_equal_values_equal_bytes)
{
    static const char *const ones[] = {"1",
                                       "1.0",
                                       "{'$numberLong': '1'}",
                                       "{'$numberDecimal': '1.0'}",
                                       "{'$numberDecimal': '1'}",
                                       "{'$numberDecimal': '0.001E+3'}"};
    shl_keystring_t first, ks;
    encode_json(ones[0], false, &first);
    for (size_t i = 1; i < sizeof(ones) / sizeof(ones[0]); i++) {
        encode_json(ones[i], false, &ks);
        ASSERT_INT_EQ(shl_keystring_compare(first.data, first.len, ks.data, ks.len), 0);
        shl_keystring_cleanup(&ks);
    }
    shl_keystring_cleanup(&first);

    encode_json("{'a': [1, 'x']}", false, &first);
    encode_json("{'a': [{'$numberDecimal': '1.00'}, {'$symbol': 'x'}]}", false, &ks);
    ASSERT_INT_EQ(shl_keystring_compare(first.data, first.len, ks.data, ks.len), 0);
    shl_keystring_cleanup(&ks);
    shl_keystring_cleanup(&first);

    encode_json("{'$numberDouble': '-0.0'}", false, &first);
    encode_json("{'$numberDecimal': '-0E+20'}", false, &ks);
    ASSERT_INT_EQ(shl_keystring_compare(first.data, first.len, ks.data, ks.len), 0);
    shl_keystring_cleanup(&ks);
    shl_keystring_cleanup(&first);
}

typedef struct pool {
    bson_t **docs;
    bson_value_t *vals;
    shl_keystring_t *asc, *desc;
    size_t *twin; /* an earlier index this value was derived from (equal), or itself */
    size_t n;
} pool_t;

static void
pool_build(pool_t *p, size_t n, bool numbers_only, uint64_t seed)
{
    shl_test_rng_seed(seed);
    p->n = n;
    p->docs = bson_malloc0(n * sizeof(*p->docs));
    p->vals = bson_malloc0(n * sizeof(*p->vals));
    p->asc = bson_malloc0(n * sizeof(*p->asc));
    p->desc = bson_malloc0(n * sizeof(*p->desc));
    p->twin = bson_malloc0(n * sizeof(*p->twin));
    for (size_t i = 0; i < n; i++) {
        bson_iter_t it;
        p->docs[i] = bson_new();
        p->twin[i] = i;
        size_t e = i > 0 ? shl_test_randn((uint32_t)i) : 0;
        bool is_num = i > 0 && (p->vals[e].value_type == BSON_TYPE_INT32 ||
                                p->vals[e].value_type == BSON_TYPE_INT64 ||
                                p->vals[e].value_type == BSON_TYPE_DOUBLE ||
                                p->vals[e].value_type == BSON_TYPE_DECIMAL128);
        if (is_num && shl_test_randn(4) == 0) {
            shl_test_gen_equal_number(p->docs[i], "v", &p->vals[e]);
            p->twin[i] = e;
        } else if (is_num && shl_test_randn(3) == 0) {
            shl_test_gen_near_number(p->docs[i], "v", &p->vals[e]);
            p->twin[i] = e; /* not equal, but close */
        } else if (i > 0 && shl_test_randn(10) == 0) {
            bson_append_value(p->docs[i], "v", 1, &p->vals[e]); /* an exact duplicate */
            p->twin[i] = e;
        } else if (numbers_only) {
            shl_test_gen_number(p->docs[i], "v");
        } else {
            shl_test_gen_value(p->docs[i], "v", 3);
        }
        bson_iter_init_find(&it, p->docs[i], "v");
        p->vals[i] = *bson_iter_value(&it); /* borrows from docs[i] */
        shl_keystring_init(&p->asc[i]);
        shl_keystring_init(&p->desc[i]);
        shl_keystring_append_value(&p->asc[i], &p->vals[i], false);
        shl_keystring_append_value(&p->desc[i], &p->vals[i], true);
    }
}

static void
pool_free(pool_t *p)
{
    for (size_t i = 0; i < p->n; i++) {
        bson_destroy(p->docs[i]);
        shl_keystring_cleanup(&p->asc[i]);
        shl_keystring_cleanup(&p->desc[i]);
    }
    bson_free(p->docs);
    bson_free(p->vals);
    bson_free(p->asc);
    bson_free(p->desc);
    bson_free(p->twin);
}

/* A random pair, often a value and the one it was derived from. */
static void
pool_pair(const pool_t *p, size_t *i, size_t *j)
{
    *i = shl_test_randn((uint32_t)p->n);
    *j = shl_test_randn(4) == 0 && p->twin[*i] != *i ? p->twin[*i] : shl_test_randn((uint32_t)p->n);
}

static void
report_pair(const char *what, const bson_value_t *a, const bson_value_t *b, int want, int got)
{
    char *ja = shl_test_value_json(a), *jb = shl_test_value_json(b);
    fprintf(stderr, "  %s: %s vs %s: compare %d, keystring %d\n", what, ja, jb, want, got);
    bson_free(ja);
    bson_free(jb);
}

SHL_TEST(keystring_random_pairs_match_compare)
{
    pool_t p;
    int failed = 0;
    long pairs = 0, equal = 0;
    pool_build(&p, 3000, false, 12345);
    for (int k = 0; k < 150000 && failed < 10; k++) {
        size_t i, j;
        pool_pair(&p, &i, &j);
        int want = sign(shl_bson_value_compare(&p.vals[i], &p.vals[j]));
        int got = shl_keystring_compare(p.asc[i].data, p.asc[i].len, p.asc[j].data, p.asc[j].len);
        int got_desc =
            shl_keystring_compare(p.desc[i].data, p.desc[i].len, p.desc[j].data, p.desc[j].len);
        pairs++;
        equal += want == 0 && i != j;
        if (got != want || got_desc != -want) {
            report_pair(got != want ? "ascending" : "descending", &p.vals[i], &p.vals[j], want,
                        got != want ? got : got_desc);
            failed++;
        }
    }
    fprintf(stderr, "  %ld pairs (%ld equal)\n", pairs, equal);
    ASSERT_INT_EQ(failed, 0);
    ASSERT(equal > 1000); /* the generator must produce ties for the test to mean much */
    pool_free(&p);
}

SHL_TEST(keystring_random_numbers_match_compare)
{
    /* Numbers only: many more cross-type numeric pairs and near-ties. */
    pool_t p;
    int failed = 0;
    long equal = 0;
    pool_build(&p, 4000, true, 777);
    for (int k = 0; k < 200000 && failed < 10; k++) {
        size_t i, j;
        pool_pair(&p, &i, &j);
        int want = sign(shl_bson_value_compare(&p.vals[i], &p.vals[j]));
        int got = shl_keystring_compare(p.asc[i].data, p.asc[i].len, p.asc[j].data, p.asc[j].len);
        int got_desc =
            shl_keystring_compare(p.desc[i].data, p.desc[i].len, p.desc[j].data, p.desc[j].len);
        equal += want == 0 && i != j;
        if (got != want || got_desc != -want) {
            report_pair("number", &p.vals[i], &p.vals[j], want, got);
            failed++;
        }
    }
    fprintf(stderr, "  200000 number pairs (%ld equal)\n", equal);
    ASSERT_INT_EQ(failed, 0);
    ASSERT(equal > 1000);
    pool_free(&p);
}

SHL_TEST(compare_numbers_match_exact_oracle)
{
    /* shl_bson_value_compare against glibc's exact decimal expansions. */
    pool_t p;
    int failed = 0;
    pool_build(&p, 3000, true, 4242);
    for (int k = 0; k < 60000 && failed < 10; k++) {
        size_t i, j;
        pool_pair(&p, &i, &j);
        int want = shl_test_exact_compare(&p.vals[i], &p.vals[j]);
        int got = sign(shl_bson_value_compare(&p.vals[i], &p.vals[j]));
        if (got != want) {
            report_pair("oracle", &p.vals[i], &p.vals[j], want, got);
            failed++;
        }
    }
    ASSERT_INT_EQ(failed, 0);
    pool_free(&p);
}

SHL_TEST(keystring_random_round_trip)
{
    pool_t p;
    int failed = 0;
    pool_build(&p, 5000, false, 99);
    for (size_t i = 0; i < p.n && failed < 10; i++) {
        for (int d = 0; d < 2; d++) {
            shl_keystring_t *ks = d ? &p.desc[i] : &p.asc[i];
            bool desc = d == 1;
            bson_t out;
            bson_iter_t back;
            shl_keystring_t again;
            if (!shl_keystring_decode(ks->data, ks->len, &desc, 1, &out, NULL) ||
                !bson_iter_init_find(&back, &out, "0")) {
                report_pair("decode failed", &p.vals[i], &p.vals[i], 0, 1);
                failed++;
                bson_destroy(&out);
                continue;
            }
            shl_keystring_init(&again);
            shl_keystring_append_iter(&again, &back, desc);
            bson_iter_t b2 = back;
            int c = shl_bson_value_compare(&p.vals[i], bson_iter_value(&b2));
            if (c != 0 || shl_keystring_compare(again.data, again.len, ks->data, ks->len) != 0) {
                report_pair("round trip", &p.vals[i], bson_iter_value(&b2), 0, c);
                failed++;
            }
            shl_keystring_cleanup(&again);
            bson_destroy(&out);
        }
    }
    ASSERT_INT_EQ(failed, 0);
    pool_free(&p);
}

SHL_TEST(keystring_compound_keys_and_record_ids)
{
    pool_t p;
    int failed = 0;
    pool_build(&p, 400, false, 31337);
    for (int k = 0; k < 100000 && failed < 10; k++) {
        size_t a[2], b[2];
        bool dir[2] = {shl_test_randn(2) == 1, shl_test_randn(2) == 1};
        int64_t ra = (int64_t)shl_test_randn(5) - 2, rb = (int64_t)shl_test_randn(5) - 2;
        shl_keystring_t ka, kb;
        for (int f = 0; f < 2; f++) {
            a[f] = shl_test_randn((uint32_t)p.n);
            b[f] = shl_test_randn(4) == 0 ? a[f] : shl_test_randn((uint32_t)p.n);
        }
        if (shl_test_randn(3) == 0) {
            ra = shl_test_randn(2) ? INT64_MIN : INT64_MAX;
        }
        shl_keystring_init(&ka);
        shl_keystring_init(&kb);
        int want = 0;
        for (int f = 0; f < 2; f++) {
            shl_keystring_append_value(&ka, &p.vals[a[f]], dir[f]);
            shl_keystring_append_value(&kb, &p.vals[b[f]], dir[f]);
            if (want == 0) {
                want = sign(shl_bson_value_compare(&p.vals[a[f]], &p.vals[b[f]]));
                want = dir[f] ? -want : want;
            }
        }
        if (want == 0) {
            want = ra == rb ? 0 : ra < rb ? -1 : 1;
        }
        shl_keystring_append_record_id(&ka, ra);
        shl_keystring_append_record_id(&kb, rb);
        int got = shl_keystring_compare(ka.data, ka.len, kb.data, kb.len);
        if (got != want) {
            report_pair("compound first field", &p.vals[a[0]], &p.vals[b[0]], want, got);
            failed++;
        }
        /* decode both fields back and the record id */
        bson_t out;
        int64_t rid = 0;
        if (!shl_keystring_decode(ka.data, ka.len, dir, 2, &out, &rid) || rid != ra ||
            bson_count_keys(&out) != 2) {
            fprintf(stderr, "  compound decode failed\n");
            failed++;
        }
        bson_destroy(&out);
        shl_keystring_cleanup(&ka);
        shl_keystring_cleanup(&kb);
    }
    ASSERT_INT_EQ(failed, 0);
    pool_free(&p);
}

SHL_TEST(keystring_bounds_and_record_ids)
{
    shl_keystring_t min, max, val, bound, entry;
    bson_value_t v = {.value_type = BSON_TYPE_INT32};
    bson_value_t minkey = {.value_type = BSON_TYPE_MINKEY};
    bson_value_t maxkey = {.value_type = BSON_TYPE_MAXKEY};
    size_t klen;
    int64_t rid;

    shl_keystring_init(&min);
    shl_keystring_init(&max);
    shl_keystring_init(&val);
    shl_keystring_init(&bound);
    shl_keystring_init(&entry);
    shl_keystring_append_value(&min, &minkey, false);
    shl_keystring_append_value(&max, &maxkey, false);
    v.value.v_int32 = 5;
    shl_keystring_append_value(&val, &v, false);
    ASSERT(shl_keystring_compare(min.data, min.len, val.data, val.len) < 0);
    ASSERT(shl_keystring_compare(val.data, val.len, max.data, max.len) < 0);

    /* key 5 + any RecordId lies between 'key 5' and 'key 5 + max suffix' */
    shl_keystring_append_value(&entry, &v, false);
    shl_keystring_append_record_id(&entry, INT64_MAX);
    shl_keystring_append_value(&bound, &v, false);
    shl_keystring_append_max_suffix(&bound);
    ASSERT(shl_keystring_compare(val.data, val.len, entry.data, entry.len) < 0);
    ASSERT(shl_keystring_compare(entry.data, entry.len, bound.data, bound.len) < 0);
    ASSERT(shl_keystring_split_record_id(entry.data, entry.len, &klen, &rid));
    ASSERT_INT_EQ(rid, INT64_MAX);
    ASSERT_INT_EQ(klen, val.len);

    /* a descending MaxKey second field stays under the max suffix too */
    shl_keystring_append_value(&val, &maxkey, true);
    shl_keystring_append_record_id(&val, -1);
    ASSERT(shl_keystring_compare(val.data, val.len, bound.data, bound.len) < 0);

    /* record ids order as signed integers */
    shl_keystring_t r1, r2;
    shl_keystring_init(&r1);
    shl_keystring_init(&r2);
    shl_keystring_append_record_id(&r1, -5);
    shl_keystring_append_record_id(&r2, 3);
    ASSERT(shl_keystring_compare(r1.data, r1.len, r2.data, r2.len) < 0);
    char *hex = shl_keystring_to_hex(r2.data, r2.len);
    ASSERT_STR_EQ(hex, "8000000000000003");
    bson_free(hex);

    shl_keystring_cleanup(&r1);
    shl_keystring_cleanup(&r2);
    shl_keystring_cleanup(&min);
    shl_keystring_cleanup(&max);
    shl_keystring_cleanup(&val);
    shl_keystring_cleanup(&bound);
    shl_keystring_cleanup(&entry);
}

SHL_TEST(keystring_doc_values_and_bad_input)
{
    bson_t *key = shl_test_bson("{'': 1, '': 'x'}");
    bool desc[2] = {false, true};
    shl_keystring_t ks;
    bson_t out;

    shl_keystring_init(&ks);
    ASSERT_INT_EQ(shl_keystring_append_doc_values(&ks, key, desc), 2);
    ASSERT(shl_keystring_decode(ks.data, ks.len, desc, 2, &out, NULL));
    ASSERT_BSON_EQ(&out, "{'0': 1, '1': 'x'}");
    bson_destroy(&out);

    /* wrong field count, wrong directions, truncation: false and an empty *out */
    ASSERT(!shl_keystring_decode(ks.data, ks.len, desc, 1, &out, NULL));
    ASSERT_INT_EQ(bson_count_keys(&out), 0);
    bson_destroy(&out);
    ASSERT(!shl_keystring_decode(ks.data, ks.len, NULL, 2, &out, NULL));
    bson_destroy(&out);
    for (size_t cut = 0; cut < ks.len; cut++) {
        ASSERT(!shl_keystring_decode(ks.data, cut, desc, 2, &out, NULL));
        bson_destroy(&out);
    }

    /* random bytes never crash the decoder */
    shl_test_rng_seed(5);
    for (int k = 0; k < 20000; k++) {
        uint8_t junk[24];
        size_t n = shl_test_randn(sizeof(junk) + 1);
        for (size_t i = 0; i < n; i++) {
            junk[i] = (uint8_t)(shl_test_randn(4) ? shl_test_randn(256) : 0x1E + shl_test_randn(3));
        }
        (void)shl_keystring_decode(junk, n, NULL, 1 + shl_test_randn(2), &out, NULL);
        bson_destroy(&out);
    }
    shl_keystring_cleanup(&ks);
    bson_destroy(key);
}

/* Values libbson's append functions would alter come back byte for byte (found by
 * fuzz_keystring): regex flags unsorted or unknown, Code and CodeWScope with a NUL inside. */
SHL_TEST(keystring_round_trip_raw_values)
{
    /* {r: /a/mi\x9f, c: Code("a\0b"), w: CodeWScope("x\0", {z: 1})} */
    /* clang-format off */
    static const uint8_t raw[] = {
        0x43, 0, 0, 0,                                            /* length 67 */
        0x0b, 'r', 0, 'a', 0, 'm', 'i', 0x9f, 0,                  /* regex */
        0x0d, 'c', 0, 4, 0, 0, 0, 'a', 0, 'b', 0,                 /* code, 3 bytes + NUL */
        0x0f, 'w', 0, 0x17, 0, 0, 0, 3, 0, 0, 0, 'x', 0, 0,       /* cws: total 23, code 2 + NUL */
        0x0c, 0, 0, 0, 0x10, 'z', 0, 1, 0, 0, 0, 0,               /* scope {z: 1} */
        0x08, 'p', 0, 1,                                          /* p: true */
        0x0a, 'q', 0, 0x0a, 's', 0, 0x0a, 't', 0, 0x0a, 'u', 0, 0 /* nulls, end */
    };
    /* clang-format on */
    bson_t doc, out;
    bson_iter_t it, got;
    int n = 0;

    ASSERT(bson_init_static(&doc, raw, sizeof(raw)));
    ASSERT(bson_iter_init(&it, &doc));
    while (n < 3 && bson_iter_next(&it)) {
        n++;
        shl_keystring_t ks;
        shl_keystring_init(&ks);
        shl_keystring_append_iter(&ks, &it, false);
        ASSERT(shl_keystring_decode(ks.data, ks.len, NULL, 1, &out, NULL));
        ASSERT(bson_iter_init(&got, &out) && bson_iter_next(&got));
        ASSERT(shl_bson_value_compare(bson_iter_value(&got), bson_iter_value(&it)) == 0);
        bson_destroy(&out);
        shl_keystring_cleanup(&ks);
    }
    ASSERT(n == 3);
}

/* A DBPointer's namespace is a BSON string and may hold NULs, which bson_append_dbpointer
 * would drop: it comes back byte for byte, ascending and descending (found by
 * fuzz_keystring, which decoded nothing). */
SHL_TEST(keystring_round_trip_dbpointer_with_nul)
{
    /* {p: DBPointer("\0a\0", ObjectId(0102...0c))} */
    /* clang-format off */
    static const uint8_t raw[] = {
        0x1c, 0, 0, 0,                                    /* length 28 */
        0x0c, 'p', 0, 4, 0, 0, 0, 0, 'a', 0, 0,           /* namespace: 3 bytes + NUL */
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0          /* ObjectId, end */
    };
    /* clang-format on */
    bson_t doc, out;
    bson_iter_t it, got;

    ASSERT(bson_init_static(&doc, raw, sizeof(raw)));
    for (int d = 0; d < 2; d++) {
        bool desc = d == 1;
        shl_keystring_t ks;
        ASSERT(bson_iter_init(&it, &doc) && bson_iter_next(&it));
        shl_keystring_init(&ks);
        shl_keystring_append_iter(&ks, &it, desc);
        ASSERT(shl_keystring_decode(ks.data, ks.len, &desc, 1, &out, NULL));
        ASSERT(bson_iter_init(&got, &out) && bson_iter_next(&got));
        ASSERT_INT_EQ(bson_iter_type(&got), BSON_TYPE_DBPOINTER);
        ASSERT_INT_EQ(bson_iter_value(&got)->value.v_dbpointer.collection_len, 3);
        ASSERT(shl_bson_value_compare(bson_iter_value(&got), bson_iter_value(&it)) == 0);
        bson_destroy(&out);
        shl_keystring_cleanup(&ks);
    }
}
