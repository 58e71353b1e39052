/*
 * bson_compare_test.c -- table-driven tests of MongoDB's canonical BSON order: one sample
 * per canonical type against every other, then cases within each type, with the numeric
 * edge cases (int64 beyond 2^53 vs double, NaN, -0, decimal128 vs double exactly).
 */
#include <math.h>

#include "base/unit_test.h"
#include "bson/bson_compare.h"

/* Values are relaxed/canonical extended JSON, quoted with ' (see shl_test_bson). */
typedef struct cmp_case {
    const char *a;
    const char *b;
    int want; /* -1, 0, 1 */
} cmp_case_t;

#define DEC(s) "{'$numberDecimal': '" s "'}"
#define LONG(s) "{'$numberLong': '" s "'}"
#define DBL(s) "{'$numberDouble': '" s "'}"
#define BIN(b64, st) "{'$binary': {'base64': '" b64 "', 'subType': '" st "'}}"
#define TS(t, i) "{'$timestamp': {'t': " t ", 'i': " i "}}"
#define DATE(ms) "{'$date': {'$numberLong': '" ms "'}}"
#define RE(p, o) "{'$regularExpression': {'pattern': '" p "', 'options': '" o "'}}"
#define OID(h) "{'$oid': '" h "'}"
#define DBP(ns, h) "{'$dbPointer': {'$ref': '" ns "', '$id': {'$oid': '" h "'}}}"

static int
sign(int c)
{
    return c == 0 ? 0 : c < 0 ? -1 : 1;
}

/* Compare two JSON values; *ok false when the result is not antisymmetric. */
static int
cmp_json(const char *a, const char *b, bool *ok)
{
    char bufa[512], bufb[512];
    bson_iter_t ia, ib;
    snprintf(bufa, sizeof(bufa), "{'v': %s}", a);
    snprintf(bufb, sizeof(bufb), "{'v': %s}", b);
    bson_t *da = shl_test_bson(bufa);
    bson_t *db = shl_test_bson(bufb);
    bson_iter_init_find(&ia, da, "v");
    bson_iter_init_find(&ib, db, "v");
    int c = sign(shl_bson_iter_compare(&ia, &ib));
    int r = sign(shl_bson_iter_compare(&ib, &ia));
    bson_iter_t ea = ia, eb = ib;
    *ok = c == -r && shl_bson_value_equal(bson_iter_value(&ea), bson_iter_value(&eb)) == (c == 0);
    bson_destroy(da);
    bson_destroy(db);
    return c;
}

static int
run_cases(const cmp_case_t *cases, size_t n)
{
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        bool ok;
        int got = cmp_json(cases[i].a, cases[i].b, &ok);
        if (got != cases[i].want || !ok) {
            fprintf(stderr, "  case %zu: cmp(%s, %s) = %d (antisymmetric: %d), want %d\n", i,
                    cases[i].a, cases[i].b, got, ok, cases[i].want);
            failed++;
        }
    }
    return failed;
}

/* One value per canonical type, in MongoDB's order. */
static const char *const type_samples[] = {
    "{'$minKey': 1}",
    "{'$undefined': true}",
    "null",
    DBL("NaN"),
    "-5",
    DEC("1.5"),
    "1e300",
    "''",
    "{'$symbol': 'zz'}",
    "{}",
    "{'a': 1}",
    "[]",
    "[1]",
    BIN("", "00"),
    OID("000000000000000000000000"),
    "false",
    "true",
    DATE("-5"),
    TS("0", "0"),
    RE("", ""),
    DBP("", "000000000000000000000000"),
    "{'$code': ''}",
    "{'$code': '', '$scope': {}}",
    "{'$maxKey': 1}",
};

SHL_TEST(compare_every_type_pair)
{
    size_t n = sizeof(type_samples) / sizeof(type_samples[0]);
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) {
            bool ok;
            int got = cmp_json(type_samples[i], type_samples[j], &ok);
            int want = i == j ? 0 : i < j ? -1 : 1;
            if (got != want || !ok) {
                fprintf(stderr, "  cmp(%s, %s) = %d, want %d\n", type_samples[i], type_samples[j],
                        got, want);
                failed++;
            }
        }
    }
    ASSERT_INT_EQ(failed, 0);
}

SHL_TEST(compare_canonical_type_numbers)
{
    /* MongoDB's canonicalizeBSONType: Undefined (0) sorts before Null (5). */
    ASSERT_INT_EQ(shl_bson_canonical_type(BSON_TYPE_MINKEY), -1);
    ASSERT_INT_EQ(shl_bson_canonical_type(BSON_TYPE_UNDEFINED), 0);
    ASSERT_INT_EQ(shl_bson_canonical_type(BSON_TYPE_NULL), 5);
    ASSERT_INT_EQ(shl_bson_canonical_type(BSON_TYPE_INT32), 10);
    ASSERT_INT_EQ(shl_bson_canonical_type(BSON_TYPE_DECIMAL128), 10);
    ASSERT_INT_EQ(shl_bson_canonical_type(BSON_TYPE_SYMBOL), 15);
    ASSERT_INT_EQ(shl_bson_canonical_type(BSON_TYPE_TIMESTAMP), 47);
    ASSERT_INT_EQ(shl_bson_canonical_type(BSON_TYPE_CODEWSCOPE), 65);
    ASSERT_INT_EQ(shl_bson_canonical_type(BSON_TYPE_MAXKEY), 127);
}

static const cmp_case_t number_cases[] = {
    /* same value, every type */
    {"1", "1.0", 0},
    {"1", LONG("1"), 0},
    {"1", DEC("1"), 0},
    {"1", DEC("1.0"), 0},
    {"1.0", DEC("1.000000"), 0},
    {LONG("1"), DEC("0.1E+1"), 0},
    {DEC("1.10"), DEC("1.1"), 0},
    {DEC("1E+6144"), DEC("1000E+6141"), 0},
    {"2", "1", 1},
    {"-2", LONG("-1"), -1},
    {"2147483647", LONG("2147483648"), -1},
    /* zeros */
    {DBL("-0.0"), "0", 0},
    {DBL("-0.0"), "0.0", 0},
    {DEC("-0"), "0", 0},
    {DEC("0E+300"), DEC("-0E-300"), 0},
    {DEC("0"), DBL("-0.0"), 0},
    {"0", DBL("5e-324"), -1},
    {"0", DBL("-5e-324"), 1},
    /* NaN is equal to NaN and below everything, -Infinity included */
    {DBL("NaN"), DBL("NaN"), 0},
    {DBL("NaN"), DEC("NaN"), 0},
    {DEC("NaN"), DEC("-NaN"), 0},
    {DBL("NaN"), DBL("-Infinity"), -1},
    {DEC("NaN"), DBL("-Infinity"), -1},
    {DBL("NaN"), LONG("-9223372036854775808"), -1},
    {DBL("NaN"), DEC("-Infinity"), -1},
    {"-2147483648", DBL("NaN"), 1},
    /* infinities */
    {DBL("Infinity"), DEC("Infinity"), 0},
    {DBL("-Infinity"), DEC("-Infinity"), 0},
    {DBL("Infinity"), DBL("1.7976931348623157e308"), 1},
    {DEC("1E+400"), DBL("Infinity"), -1},
    {DEC("-1E+400"), DBL("-Infinity"), 1},
    {DEC("-1E+400"), DBL("-1.7976931348623157e308"), -1},
    {DBL("-Infinity"), LONG("-9223372036854775808"), -1},
    /* int64 against double beyond 2^53, exactly */
    {LONG("9007199254740993"), "9007199254740992.0", 1},
    {LONG("9007199254740993"), "9007199254740994.0", -1},
    {LONG("9007199254740992"), "9007199254740992.0", 0},
    {LONG("-9007199254740993"), "-9007199254740992.0", -1},
    {LONG("9223372036854775807"), "9223372036854775808.0", -1},
    {LONG("-9223372036854775808"), "-9223372036854775808.0", 0},
    {LONG("-9223372036854775808"), "-9223372036854777856.0", 1},
    {LONG("9223372036854775807"), "9223372036854774784.0", 1},
    {LONG("4611686018427387905"), "4611686018427387904.0", 1},
    {LONG("1"), "1.0000000000000002", -1},
    {LONG("1"), "0.9999999999999999", 1},
    {"3", "2.5", 1},
    {"-3", "-2.5", -1},
    /* decimal against int64 */
    {DEC("9223372036854775807"), LONG("9223372036854775807"), 0},
    {DEC("9223372036854775808"), LONG("9223372036854775807"), 1},
    {DEC("9223372036854775806.9"), LONG("9223372036854775807"), -1},
    {DEC("-9223372036854775808.5"), LONG("-9223372036854775808"), -1},
    {DEC("9007199254740993"), LONG("9007199254740993"), 0},
    {DEC("9007199254740993"), "9007199254740992.0", 1},
    /* decimal against double: the double's exact binary value counts */
    {DEC("0.5"), "0.5", 0},
    {DEC("0.1"), "0.1", -1},
    {DEC("0.1000000000000000055511151231257827"), "0.1", -1},
    {DEC("0.1000000000000000055511151231257828"), "0.1", 1},
    {DEC("-0.1000000000000000055511151231257827"), "-0.1", 1},
    {DEC("1.25E+3"), "1250.0", 0},
    {DEC("1E+22"), "1e22", 0},
    {DEC("1E+23"), "1e23", 1}, /* 1e23 as a double is 99999999999999991611392 */
    {DEC("99999999999999991611392"), "1e23", 0},
    {DEC("4.940656458412465441765687928682213E-324"), DBL("5e-324"), -1},
    {DEC("4.940656458412465441765687928682214E-324"), DBL("5e-324"), 1},
    {DEC("1E-400"), DBL("5e-324"), -1},
    {DEC("1E-323"), DBL("5e-324"), 1},
    {DEC("1.797693134862315708145274237317043E+308"), DBL("1.7976931348623157e308"), -1},
    {DEC("1.797693134862315708145274237317044E+308"), DBL("1.7976931348623157e308"), 1},
    {DEC("3.141592653589793115997963468544185"), "3.141592653589793", -1},
    {DEC("3.141592653589793115997963468544186"), "3.141592653589793", 1},
    {DEC("-2.5"), "-2.5", 0},
    /* decimal against decimal */
    {DEC("1.000000000000000000000000000000001"), DEC("1"), 1},
    {DEC("9.999999999999999999999999999999999E+6144"), DEC("Infinity"), -1},
    {DEC("1E-6176"), DEC("0"), 1},
    {DEC("-1E-6176"), DEC("0"), -1},
    {DEC("12345678901234567890123456789012.34"), DEC("12345678901234567890123456789012.35"), -1},
    {DEC("-12"), DEC("-11.99"), -1},
};

SHL_TEST(compare_numbers)
{
    ASSERT_INT_EQ(run_cases(number_cases, sizeof(number_cases) / sizeof(number_cases[0])), 0);
}

static const cmp_case_t other_cases[] = {
    /* strings: bytes, then length; String and Symbol are one type */
    {"'a'", "'b'", -1},
    {"'a'", "'aa'", -1},
    {"''", "'a'", -1},
    {"'B'", "'a'", -1},
    {"'a\\u0000'", "'a'", 1},
    {"'a\\u0000b'", "'a\\u0001'", -1},
    {"'\\u00e9'", "'z'", 1},
    {"{'$symbol': 'abc'}", "'abc'", 0},
    {"{'$symbol': 'abd'}", "'abc'", 1},
    /* documents: canonical type, then field name, then value; shorter first */
    {"{}", "{'a': 1}", -1},
    {"{'a': 1}", "{'a': 2}", -1},
    {"{'a': 1}", "{'a': 1.0}", 0},
    {"{'a': 1}", "{'b': 0}", -1},
    {"{'b': 1}", "{'a': 'x'}", -1},
    {"{'a': 1, 'b': 1}", "{'a': 1}", 1},
    {"{'a': {'b': 1}}", "{'a': {'b': 1, 'c': 0}}", -1},
    {"{'a': null}", "{'a': {'$undefined': true}}", 1},
    {"{'a': {'$minKey': 1}}", "{}", 1},
    {"{'b': 1, 'a': 1}", "{'a': 1, 'b': 1}", 1},
    {"{'a': [1, 2]}", "{'a': [1, 2]}", 0},
    {"{'ab': 1}", "{'a': 1}", 1},
    /* arrays: element by element */
    {"[]", "[1]", -1},
    {"[1, 2]", "[1, 3]", -1},
    {"[1]", "[1, 0]", -1},
    {"[2]", "[1, 5]", 1},
    {"[[1]]", "[1]", 1},
    {"[{'a': 1}]", "[[]]", -1},
    {"[1, 'a']", "[1.0, 'a']", 0},
    {"[null]", "[]", 1},
    /* BinData: length, then subtype, then bytes */
    {BIN("/w==", "00"), BIN("AAA=", "00"), -1},
    {BIN("/w==", "00"), BIN("AA==", "04"), -1},
    {BIN("AQ==", "80"), BIN("/w==", "05"), 1},
    {BIN("AQI=", "00"), BIN("AQM=", "00"), -1},
    {BIN("", "00"), BIN("", "00"), 0},
    /* ObjectId */
    {OID("000000000000000000000001"), OID("000000000000000000000002"), -1},
    {OID("ff0000000000000000000000"), OID("0fffffffffffffffffffffff"), 1},
    {OID("5b2be413c06d924ab26ff9ca"), OID("5b2be413c06d924ab26ff9ca"), 0},
    /* Bool */
    {"false", "true", -1},
    {"true", "true", 0},
    /* Date: signed */
    {DATE("-1"), DATE("0"), -1},
    {DATE("-9223372036854775808"), DATE("9223372036854775807"), -1},
    {DATE("1000"), DATE("1000"), 0},
    /* Timestamp: unsigned t, then i */
    {TS("1", "5"), TS("2", "0"), -1},
    {TS("4294967295", "0"), TS("1", "0"), 1},
    {TS("7", "4294967295"), TS("7", "1"), 1},
    {TS("7", "3"), TS("7", "3"), 0},
    /* RegEx: pattern, then flags */
    {RE("a", "i"), RE("a", "m"), -1},
    {RE("a", "z"), RE("b", ""), -1},
    {RE("ab", ""), RE("a", "i"), 1},
    {RE("a", "i"), RE("a", "i"), 0},
    /* DBPointer: namespace length, namespace, ObjectId */
    {DBP("z", "000000000000000000000000"), DBP("aa", "000000000000000000000000"), -1},
    {DBP("ab", "000000000000000000000000"), DBP("aa", "ffffffffffffffffffffffff"), 1},
    {DBP("aa", "000000000000000000000001"), DBP("aa", "000000000000000000000002"), -1},
    /* Code; CodeWScope: code, then scope */
    {"{'$code': 'a'}", "{'$code': 'b'}", -1},
    {"{'$code': 'a'}", "{'$code': 'a'}", 0},
    {"{'$code': 'ab'}", "{'$code': 'a'}", 1},
    {"{'$code': 'a', '$scope': {'x': 2}}", "{'$code': 'b', '$scope': {'x': 1}}", -1},
    {"{'$code': 'a', '$scope': {'x': 2}}", "{'$code': 'a', '$scope': {'x': 1}}", 1},
    {"{'$code': 'a', '$scope': {'x': 1}}", "{'$code': 'a', '$scope': {'x': 1.0}}", 0},
    {"{'$code': 'a', '$scope': {}}", "{'$code': 'a', '$scope': {'x': 1}}", -1},
    /* the unit types */
    {"{'$minKey': 1}", "{'$minKey': 1}", 0},
    {"{'$maxKey': 1}", "{'$maxKey': 1}", 0},
    {"null", "null", 0},
    {"{'$undefined': true}", "{'$undefined': true}", 0},
};

SHL_TEST(compare_within_types)
{
    ASSERT_INT_EQ(run_cases(other_cases, sizeof(other_cases) / sizeof(other_cases[0])), 0);
}

SHL_TEST(compare_whole_documents)
{
    bson_t *a = shl_test_bson("{'x': 1, 'y': 'a'}");
    bson_t *b = shl_test_bson("{'x': 1.0, 'y': 'b'}");
    bson_t *c = shl_test_bson("{'x': 1}");
    bson_t *d = shl_test_bson("{'y': 1}");
    ASSERT(shl_bson_doc_compare(a, b) < 0);
    ASSERT(shl_bson_doc_compare(b, a) > 0);
    ASSERT(shl_bson_doc_compare(c, a) < 0);
    ASSERT(shl_bson_doc_compare(c, d) < 0); /* field names count */
    ASSERT_INT_EQ(shl_bson_doc_compare(a, a), 0);
    bson_destroy(a);
    bson_destroy(b);
    bson_destroy(c);
    bson_destroy(d);
}

SHL_TEST(compare_values_built_in_c)
{
    /* Values that JSON cannot spell: exact int64/double corners built directly. */
    bson_value_t l = {.value_type = BSON_TYPE_INT64}, d = {.value_type = BSON_TYPE_DOUBLE};
    l.value.v_int64 = INT64_MAX;
    d.value.v_double = ldexp(1.0, 63);
    ASSERT(shl_bson_value_compare(&l, &d) < 0);
    ASSERT(shl_bson_value_compare(&d, &l) > 0);
    l.value.v_int64 = (INT64_C(1) << 53) + 1;
    d.value.v_double = ldexp(1.0, 53);
    ASSERT(shl_bson_value_compare(&l, &d) > 0);
    d.value.v_double = nextafter(ldexp(1.0, 53), INFINITY);
    ASSERT(shl_bson_value_compare(&l, &d) < 0);
    l.value.v_int64 = INT64_MIN;
    d.value.v_double = -ldexp(1.0, 63);
    ASSERT_INT_EQ(shl_bson_value_compare(&l, &d), 0);
    d.value.v_double = -NAN;
    ASSERT(shl_bson_value_compare(&l, &d) > 0);
}
