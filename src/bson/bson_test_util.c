/*
 * bson_test_util.c -- random BSON values and an exact numeric oracle for the bson module's
 * tests (bson_test_util.h).
 */
#include "bson/bson_test_util.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static uint64_t rng_state = 88172645463325252ull;

void
shl_test_rng_seed(uint64_t seed)
{
    rng_state = seed ? seed : 88172645463325252ull;
}

uint64_t
shl_test_rand(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

uint32_t
shl_test_randn(uint32_t n)
{
    return (uint32_t)(shl_test_rand() % n);
}

#define RN(n) shl_test_randn(n)

static double
special_double(void)
{
    static const double specials[] = {0.0,
                                      1.0,
                                      -1.0,
                                      0.1,
                                      0.5,
                                      2.5,
                                      -2.5,
                                      3.141592653589793,
                                      5e-324,
                                      -5e-324,
                                      DBL_MIN,
                                      DBL_MAX,
                                      -DBL_MAX,
                                      9007199254740992.0,
                                      9007199254740994.0,
                                      -9007199254740992.0,
                                      9223372036854775808.0,
                                      -9223372036854775808.0,
                                      18446744073709551616.0,
                                      1e23,
                                      1e22,
                                      2147483648.0,
                                      -2147483649.0,
                                      123456789.125};
    switch (RN(6)) {
    case 0:
        return NAN;
    case 1:
        return RN(2) ? INFINITY : -INFINITY;
    case 2:
        return -0.0;
    default:
        return specials[RN(sizeof(specials) / sizeof(specials[0]))];
    }
}

static double
gen_double(void)
{
    double d, mant;
    uint64_t bits;
    int e;
    switch (RN(9)) {
    case 0:
        return special_double();
    case 1:
        bits = shl_test_rand();
        memcpy(&d, &bits, sizeof(d));
        return d;
    case 2:
        return (double)((int)RN(41) - 20);
    case 3:
        return ldexp(1.0, 53) + (double)((int)RN(9) - 4) * 2.0;
    case 4: {
        d = special_double();
        return nextafter(d, RN(2) ? INFINITY : -INFINITY);
    }
    case 5:
        mant = (double)(shl_test_rand() >> 11);
        e = (int)RN(2200) - 1100; /* separate statements: calls in one expression are unsequenced */
        return ldexp(mant, e) * (RN(2) ? 1 : -1);
    case 6:
        e = (int)RN(2001) - 1000;
        return (double)e / (double)(1 + RN(16));
    case 7:
        e = (int)RN(130) - 65;
        return ldexp(1.0, e) * (RN(2) ? 1 : -1);
    default:
        e = (int)RN(64);
        mant = (double)(int64_t)(shl_test_rand() >> e);
        return mant * (RN(2) ? 1 : -1);
    }
}

static int64_t
gen_int64(void)
{
    static const int64_t specials[] = {0,
                                       1,
                                       -1,
                                       INT32_MAX,
                                       INT32_MIN,
                                       (INT64_C(1) << 53),
                                       (INT64_C(1) << 53) + 1,
                                       -(INT64_C(1) << 53) - 1,
                                       INT64_MAX,
                                       INT64_MIN,
                                       INT64_MAX - 1,
                                       INT64_MIN + 1,
                                       INT64_C(9223372036854774784),
                                       INT64_C(1) << 62};
    switch (RN(4)) {
    case 0:
        return specials[RN(sizeof(specials) / sizeof(specials[0]))];
    case 1:
        return (int64_t)RN(41) - 20;
    case 2: {
        int shift = (int)RN(64);
        int64_t v = (int64_t)(shl_test_rand() >> shift);
        return v == INT64_MIN || RN(2) ? v : -v;
    }
    default:
        return (int64_t)shl_test_rand();
    }
}

/* Change the last mantissa digit of a "%.33e"-style string by +-1 when that stays valid. */
static void
nudge_last_digit(char *s)
{
    char *e = strchr(s, 'e');
    if (e == NULL || e == s) {
        return;
    }
    char *last = e - 1;
    if (*last >= '1' && *last <= '8') {
        *last = (char)(*last + (RN(2) ? 1 : -1));
    }
}

static bson_decimal128_t
gen_decimal(void)
{
    char buf[1300];
    bson_decimal128_t dec;
    static const char *const specials[] = {"NaN",
                                           "-NaN",
                                           "Infinity",
                                           "-Infinity",
                                           "0",
                                           "-0",
                                           "0E+300",
                                           "0E-6176",
                                           "1",
                                           "1.0",
                                           "1.00",
                                           "-1",
                                           "0.1",
                                           "0.5",
                                           "2.5",
                                           "1E+23",
                                           "1E+6144",
                                           "-1E-6176",
                                           "1E-6176",
                                           "9.999999999999999999999999999999999E+6144",
                                           "9223372036854775807",
                                           "9223372036854775808",
                                           "-9223372036854775808",
                                           "-9223372036854775809",
                                           "9007199254740993",
                                           "0.1000000000000000055511151231257827",
                                           "0.1000000000000000055511151231257828",
                                           "4.940656458412465441765687928682213E-324"};
    switch (RN(8)) {
    case 0:
        snprintf(buf, sizeof(buf), "%s", specials[RN(sizeof(specials) / sizeof(specials[0]))]);
        break;
    case 1: {
        int coeff = (int)RN(2001) - 1000;
        snprintf(buf, sizeof(buf), "%dE%d", coeff, (int)RN(9) - 4);
        break;
    }
    case 2: {
        /* random coefficient of 1..34 digits, moderate exponent */
        int nd = 1 + (int)RN(34), len = 0;
        if (RN(2)) {
            buf[len++] = '-';
        }
        for (int i = 0; i < nd; i++) {
            buf[len++] = (char)('0' + RN(10));
        }
        snprintf(buf + len, sizeof(buf) - (size_t)len, "E%d", (int)RN(81) - 40);
        break;
    }
    case 3: {
        /* extreme exponents */
        int nd = 1 + (int)RN(34), len = 0;
        for (int i = 0; i < nd; i++) {
            buf[len++] = (char)('1' + RN(9));
        }
        snprintf(buf + len, sizeof(buf) - (size_t)len, "E%d", (int)RN(12287) - 6176);
        break;
    }
    case 4:
    case 5: {
        /* within a step of a double: 17 or 34 correctly rounded digits, maybe nudged */
        double d = gen_double();
        if (!isfinite(d)) {
            d = 0.75;
        }
        snprintf(buf, sizeof(buf), RN(2) ? "%.33e" : "%.16e", d);
        if (RN(2)) {
            nudge_last_digit(buf);
        }
        break;
    }
    case 6:
        snprintf(buf, sizeof(buf), "%" PRId64, gen_int64());
        break;
    default:
        snprintf(buf, sizeof(buf), "%" PRId64 "E%d", gen_int64() / 1000, -(int)RN(4));
        break;
    }
    if (!bson_decimal128_from_string(buf, &dec)) {
        bson_decimal128_from_string("7", &dec);
    }
    return dec;
}

void
shl_test_gen_number(bson_t *b, const char *key)
{
    switch (RN(4)) {
    case 0:
        bson_append_int32(b, key, -1, RN(3) ? (int32_t)RN(41) - 20 : (int32_t)shl_test_rand());
        break;
    case 1:
        bson_append_int64(b, key, -1, gen_int64());
        break;
    case 2:
        bson_append_double(b, key, -1, gen_double());
        break;
    default: {
        bson_decimal128_t dec = gen_decimal();
        bson_append_decimal128(b, key, -1, &dec);
        break;
    }
    }
}

static bool
try_decimal(bson_t *b, const char *key, const char *str, const bson_value_t *src)
{
    bson_value_t v = {.value_type = BSON_TYPE_DECIMAL128};
    if (!bson_decimal128_from_string(str, &v.value.v_decimal128) ||
        shl_test_exact_compare(&v, src) != 0) {
        return false;
    }
    return bson_append_value(b, key, -1, &v);
}

void
shl_test_gen_equal_number(bson_t *b, const char *key, const bson_value_t *src)
{
    char buf[64];
    int64_t i64 = 0;
    double d = 0;
    bool have_int = false, have_double = false;

    switch (src->value_type) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
        i64 = src->value_type == BSON_TYPE_INT32 ? src->value.v_int32 : src->value.v_int64;
        have_int = true;
        if (i64 >= -(INT64_C(1) << 53) && i64 <= (INT64_C(1) << 53)) {
            d = (double)i64;
            have_double = true;
        }
        break;
    case BSON_TYPE_DOUBLE:
        d = src->value.v_double;
        have_double = true;
        if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 && d == trunc(d)) {
            i64 = (int64_t)d;
            have_int = true;
        }
        break;
    default: {
        bson_decimal128_to_string(&src->value.v_decimal128, buf);
        bson_value_t dv = {.value_type = BSON_TYPE_DOUBLE};
        dv.value.v_double = strtod(buf, NULL);
        if (strstr(buf, "NaN") != NULL) {
            dv.value.v_double = NAN;
        }
        if (shl_test_exact_compare(&dv, src) == 0) {
            d = dv.value.v_double;
            have_double = true;
        }
        break;
    }
    }
    switch (RN(3)) {
    case 0:
        if (have_int) {
            if (i64 >= INT32_MIN && i64 <= INT32_MAX && RN(2)) {
                bson_append_int32(b, key, -1, (int32_t)i64);
            } else {
                bson_append_int64(b, key, -1, i64);
            }
            return;
        }
        break;
    case 1:
        if (have_double && src->value_type != BSON_TYPE_DOUBLE) {
            bson_append_double(b, key, -1, RN(2) && d == 0 ? -0.0 : d);
            return;
        }
        break;
    default:
        if (have_int) {
            snprintf(buf, sizeof(buf), "%" PRId64 "%s", i64, RN(2) ? ".000" : "");
            if (try_decimal(b, key, buf, src)) {
                return;
            }
        }
        if (have_double) {
            snprintf(buf, sizeof(buf), "%.33e", d);
            if (isnan(d)) {
                snprintf(buf, sizeof(buf), "NaN");
            } else if (isinf(d)) {
                snprintf(buf, sizeof(buf), "%sInfinity", d < 0 ? "-" : "");
            }
            if (try_decimal(b, key, buf, src)) {
                return;
            }
        }
        break;
    }
    bson_append_value(b, key, -1, src);
}

/* The first 34 significant digits of 'd' (truncated, not rounded), plus 'add' units in the
 * last place, as a decimal128 string. */
static void
truncated_decimal(double d, int add, char *out, size_t outlen)
{
    char buf[1300], digs[40];
    int n = 0;
    long exp10;
    snprintf(buf, sizeof(buf), "%.1100e", fabs(d)); /* exact */
    for (const char *s = buf; *s && *s != 'e' && n < 34; s++) {
        if (*s >= '0' && *s <= '9') {
            digs[n++] = *s;
        }
    }
    digs[n] = '\0';
    exp10 = strtol(strchr(buf, 'e') + 1, NULL, 10);
    for (int i = n - 1; add > 0 && i >= 0; i--) {
        if (digs[i] < '9') {
            digs[i]++;
            break;
        }
        digs[i] = '0'; /* carry */
    }
    snprintf(out, outlen, "%s%sE%ld", d < 0 ? "-" : "", digs, exp10 - (n - 1));
}

void
shl_test_gen_near_number(bson_t *b, const char *key, const bson_value_t *src)
{
    char buf[128];
    bson_decimal128_t dec;
    switch (src->value_type) {
    case BSON_TYPE_DOUBLE: {
        double d = src->value.v_double;
        if (!isfinite(d) || d == 0) {
            break;
        }
        if (RN(3) == 0) {
            bson_append_double(b, key, -1, nextafter(d, RN(2) ? INFINITY : -INFINITY));
            return;
        }
        truncated_decimal(d, (int)RN(2), buf, sizeof(buf));
        if (bson_decimal128_from_string(buf, &dec)) {
            bson_append_decimal128(b, key, -1, &dec);
            return;
        }
        break;
    }
    case BSON_TYPE_DECIMAL128: {
        bson_decimal128_to_string(&src->value.v_decimal128, buf);
        double d = strtod(buf, NULL);
        if (strstr(buf, "NaN") == NULL) {
            bson_append_double(b, key, -1, RN(2) ? d : nextafter(d, RN(2) ? INFINITY : -INFINITY));
            return;
        }
        break;
    }
    case BSON_TYPE_INT64:
        if (src->value.v_int64 > INT64_MIN && src->value.v_int64 < INT64_MAX) {
            int64_t v = src->value.v_int64 + (RN(2) ? 1 : -1);
            if (RN(2)) {
                bson_append_double(b, key, -1, (double)v);
            } else {
                bson_append_int64(b, key, -1, v);
            }
            return;
        }
        break;
    default:
        break;
    }
    shl_test_gen_number(b, key);
}

/* Short strings over a tiny alphabet (with NUL and high bytes) so equal values happen. */
static int
gen_bytes(char *buf, int max)
{
    static const char alphabet[] = {'\0', 'a', 'b', '\x01', '\xff', 'z'};
    int n = (int)RN((uint32_t)max + 1);
    for (int i = 0; i < n; i++) {
        buf[i] = alphabet[RN(sizeof(alphabet))];
    }
    buf[n] = '\0';
    return n;
}

static void
gen_cstring(char *buf, int max)
{
    static const char *const words[] = {"", "a", "b", "ab", "ba", "aa", "z"};
    (void)max;
    strcpy(buf, words[RN(sizeof(words) / sizeof(words[0]))]);
}

static void
gen_doc(bson_t *doc, bool is_array, int depth)
{
    int n = (int)RN(4);
    for (int i = 0; i < n; i++) {
        char key[16];
        if (is_array) {
            snprintf(key, sizeof(key), "%d", i);
        } else {
            gen_cstring(key, 3);
        }
        shl_test_gen_value(doc, key, depth - 1);
    }
}

void
shl_test_gen_value(bson_t *b, const char *key, int depth)
{
    char s1[16], s2[16];
    bson_oid_t oid;
    int n;
    uint32_t t = RN(depth > 0 ? 100 : 84);

    if (t < 35) {
        shl_test_gen_number(b, key);
    } else if (t < 44) {
        n = gen_bytes(s1, 4);
        bson_append_utf8(b, key, -1, s1, n);
    } else if (t < 46) {
        n = gen_bytes(s1, 3);
        bson_append_symbol(b, key, -1, s1, n);
    } else if (t < 49) {
        static const uint8_t subtypes[] = {0, 2, 4, 5, 0x80};
        uint8_t data[300];
        n = RN(20) == 0 ? 255 + (int)RN(3) : (int)RN(4);
        for (int i = 0; i < n; i++) {
            data[i] = (uint8_t)RN(3);
        }
        bson_append_binary(b, key, -1, subtypes[RN(sizeof(subtypes))], data, (uint32_t)n);
    } else if (t < 52) {
        memset(oid.bytes, 0, 12);
        n = RN(2) ? 0 : 11;
        oid.bytes[n] = (uint8_t)RN(3);
        bson_append_oid(b, key, -1, &oid);
    } else if (t < 55) {
        bson_append_bool(b, key, -1, RN(2));
    } else if (t < 58) {
        int64_t ms = RN(4) == 0 ? (int64_t)shl_test_rand() : (int64_t)RN(5) - 2;
        bson_append_date_time(b, key, -1, ms);
    } else if (t < 61) {
        static const uint32_t vals[] = {0, 1, 2, 0x7fffffff, 0x80000000u, 0xffffffffu};
        uint32_t tt = vals[RN(6)];
        bson_append_timestamp(b, key, -1, tt, vals[RN(6)]);
    } else if (t < 64) {
        static const char *const flags[] = {"", "i", "im", "m", "s"};
        gen_cstring(s1, 3);
        bson_append_regex(b, key, -1, s1, flags[RN(5)]);
    } else if (t < 67) {
        gen_cstring(s1, 3);
        memset(oid.bytes, 0, 12);
        oid.bytes[11] = (uint8_t)RN(3);
        bson_append_dbpointer(b, key, -1, s1, &oid);
    } else if (t < 70) {
        gen_cstring(s1, 3);
        bson_append_code(b, key, -1, s1);
    } else if (t < 72) {
        bson_append_minkey(b, key, -1);
    } else if (t < 74) {
        bson_append_maxkey(b, key, -1);
    } else if (t < 78) {
        bson_append_null(b, key, -1);
    } else if (t < 80) {
        bson_append_undefined(b, key, -1);
    } else if (t < 84) {
        bson_t scope = BSON_INITIALIZER;
        gen_cstring(s2, 3);
        if (depth > 0) {
            gen_doc(&scope, false, depth);
        }
        bson_append_code_with_scope(b, key, -1, s2, &scope);
        bson_destroy(&scope);
    } else if (t < 92) {
        bson_t child;
        bson_append_document_begin(b, key, -1, &child);
        gen_doc(&child, false, depth);
        bson_append_document_end(b, &child);
    } else {
        bson_t child;
        bson_append_array_begin(b, key, -1, &child);
        gen_doc(&child, true, depth);
        bson_append_array_end(b, &child);
    }
}

/* ---- the oracle ---- */

typedef struct exact {
    int cls; /* 0 NaN, 1 -inf, 2 neg, 3 zero, 4 pos, 5 +inf */
    int n;
    long exp; /* |value| = 0.dig x 10^exp */
    char dig[1300];
} exact_t;

static void
exact_parse(const char *s, exact_t *e)
{
    bool neg = false;
    long point = -1, exp10 = 0, count = 0;
    char raw[1300];

    memset(e, 0, sizeof(*e));
    if (*s == '-' || *s == '+') {
        neg = *s == '-';
        s++;
    }
    if (strncasecmp(s, "nan", 3) == 0) {
        e->cls = 0;
        return;
    }
    if (strncasecmp(s, "inf", 3) == 0) {
        e->cls = neg ? 1 : 5;
        return;
    }
    for (; *s; s++) {
        if (*s == '.') {
            point = count;
        } else if (*s >= '0' && *s <= '9') {
            raw[count++] = *s;
        } else if (*s == 'e' || *s == 'E') {
            exp10 = strtol(s + 1, NULL, 10);
            break;
        }
    }
    if (point < 0) {
        point = count;
    }
    int first = 0;
    while (first < count && raw[first] == '0') {
        first++;
    }
    int last = (int)count;
    while (last > first && raw[last - 1] == '0') {
        last--;
    }
    if (first == last) {
        e->cls = 3;
        return;
    }
    e->cls = neg ? 2 : 4;
    e->n = last - first;
    memcpy(e->dig, raw + first, (size_t)e->n);
    e->exp = point - first + exp10;
}

static void
exact_of(const bson_value_t *v, exact_t *e)
{
    char buf[1300];
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        snprintf(buf, sizeof(buf), "%" PRId32, v->value.v_int32);
        break;
    case BSON_TYPE_INT64:
        snprintf(buf, sizeof(buf), "%" PRId64, v->value.v_int64);
        break;
    case BSON_TYPE_DOUBLE:
        snprintf(buf, sizeof(buf), "%.1100e", v->value.v_double);
        break;
    default:
        bson_decimal128_to_string(&v->value.v_decimal128, buf);
        break;
    }
    exact_parse(buf, e);
}

int
shl_test_exact_compare(const bson_value_t *a, const bson_value_t *b)
{
    static exact_t ea, eb;
    int c = 0;
    exact_of(a, &ea);
    exact_of(b, &eb);
    if (ea.cls != eb.cls) {
        return ea.cls < eb.cls ? -1 : 1;
    }
    if (ea.cls != 2 && ea.cls != 4) {
        return 0;
    }
    if (ea.exp != eb.exp) {
        c = ea.exp < eb.exp ? -1 : 1;
    } else {
        int n = ea.n < eb.n ? ea.n : eb.n;
        c = memcmp(ea.dig, eb.dig, (size_t)n);
        c = c != 0 ? (c < 0 ? -1 : 1) : (ea.n == eb.n ? 0 : ea.n < eb.n ? -1 : 1);
    }
    return ea.cls == 2 ? -c : c;
}

char *
shl_test_value_json(const bson_value_t *v)
{
    bson_t doc = BSON_INITIALIZER;
    bson_append_value(&doc, "v", 1, v);
    char *s = bson_as_canonical_extended_json(&doc, NULL);
    bson_destroy(&doc);
    return s;
}
