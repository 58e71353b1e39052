/*
 * bson_number.c -- exact numeric values of BSON numbers as short decimal digit strings
 * (shl_num_t, see bson_private.h). A double's exact binary value is expanded with a small
 * base-10^9 bignum; decimal128 bits are decoded directly (IEEE 754-2008 BID encoding).
 */
#include "bson/bson_private.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef unsigned __int128 shl_u128;

#define DEC128_EXP_BIAS 6176
#define DEC128_EXP_MAX 6111 /* largest unbiased exponent */
#define DEC128_EXP_MIN (-6176)
#define DEC128_MAX_DIGITS 34

/* Fill 'out' from the digit string 'dig' (values 0..9, most significant first) of a number
 * whose magnitude is 0.dig x 10^exp: strips leading and trailing zeros. */
static void
set_digits(shl_num_t *out, bool neg, const uint8_t *dig, int n, int exp)
{
    int first = 0, last = n;

    while (first < n && dig[first] == 0) {
        first++;
        exp--;
    }
    while (last > first && dig[last - 1] == 0) {
        last--;
    }
    if (first == last) {
        memset(out, 0, sizeof(*out));
        out->cls = SHL_NUM_ZERO;
        return;
    }
    out->cls = neg ? SHL_NUM_NEG : SHL_NUM_POS;
    out->ndigits = (uint8_t)(last - first);
    out->exp = (int16_t)exp;
    memcpy(out->d, dig + first, (size_t)(last - first));
}

static void
from_u64(uint64_t mag, bool neg, shl_num_t *out)
{
    uint8_t rev[20], dig[20];
    int n = 0;

    while (mag > 0) {
        rev[n++] = (uint8_t)(mag % 10);
        mag /= 10;
    }
    for (int i = 0; i < n; i++) {
        dig[i] = rev[n - 1 - i];
    }
    set_digits(out, neg, dig, n, n);
}

void
shl_num_from_int64(int64_t v, shl_num_t *out)
{
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    from_u64(mag, v < 0, out);
}

/* A non-negative integer in base 10^9, least significant limb first. m * 5^1074 (the
 * smallest subnormal's expansion) needs 767 digits, i.e. 86 limbs. */
#define BIG_LIMBS 100
#define BIG_BASE 1000000000u

typedef struct big {
    uint32_t limb[BIG_LIMBS];
    int n;
} big_t;

static void
big_mul(big_t *b, uint32_t f)
{
    uint64_t carry = 0;
    for (int i = 0; i < b->n; i++) {
        uint64_t x = (uint64_t)b->limb[i] * f + carry;
        b->limb[i] = (uint32_t)(x % BIG_BASE);
        carry = x / BIG_BASE;
    }
    while (carry > 0) {
        b->limb[b->n++] = (uint32_t)(carry % BIG_BASE);
        carry /= BIG_BASE;
    }
}

/* Decimal digits of 'b' (most significant first) into 'dig'; returns their count. */
static int
big_digits(const big_t *b, uint8_t *dig)
{
    int n = 0;
    uint32_t top = b->limb[b->n - 1];
    uint8_t tmp[10];
    int t = 0;

    while (top > 0) {
        tmp[t++] = (uint8_t)(top % 10);
        top /= 10;
    }
    while (t > 0) {
        dig[n++] = tmp[--t];
    }
    for (int i = b->n - 2; i >= 0; i--) {
        uint32_t l = b->limb[i];
        for (int k = 8; k >= 0; k--) {
            dig[n + k] = (uint8_t)(l % 10);
            l /= 10;
        }
        n += 9;
    }
    return n;
}

void
shl_num_from_double(double v, shl_num_t *out)
{
    uint64_t bits, m;
    int be, e2;
    bool neg;

    memcpy(&bits, &v, sizeof(bits));
    neg = (bits >> 63) != 0;
    be = (int)((bits >> 52) & 0x7ff);
    m = bits & ((UINT64_C(1) << 52) - 1);
    memset(out, 0, sizeof(*out));
    if (be == 0x7ff) {
        out->cls = m != 0 ? SHL_NUM_NAN : neg ? SHL_NUM_NEG_INF : SHL_NUM_POS_INF;
        return;
    }
    if (be == 0 && m == 0) {
        out->cls = SHL_NUM_ZERO;
        return;
    }
    /* |v| = m * 2^e2 exactly. */
    if (be != 0) {
        m |= UINT64_C(1) << 52;
        e2 = be - 1075;
    } else {
        e2 = -1074;
    }
    while ((m & 1) == 0) {
        m >>= 1;
        e2++;
    }
    if (e2 >= 0 && e2 <= __builtin_clzll(m)) {
        /* The common integral case fits in 64 bits: no bignum. */
        from_u64(m << e2, neg, out);
        return;
    }

    big_t b;
    b.n = 0;
    while (m > 0) {
        b.limb[b.n++] = (uint32_t)(m % BIG_BASE);
        m /= BIG_BASE;
    }
    int dexp = 0;
    if (e2 > 0) {
        /* m * 2^e2: multiply in chunks of 2^29 (limb * 2^29 + carry fits in 64 bits). */
        for (int left = e2; left > 0; left -= 29) {
            big_mul(&b, UINT32_C(1) << (left < 29 ? left : 29));
        }
    } else {
        /* m * 2^e2 = m * 5^-e2 / 10^-e2: multiply in chunks of 5^13 < 2^31. */
        static const uint32_t pow5[14] = {1,       5,        25,        125,       625,
                                          3125,    15625,    78125,     390625,    1953125,
                                          9765625, 48828125, 244140625, 1220703125};
        for (int left = -e2; left > 0; left -= 13) {
            big_mul(&b, pow5[left < 13 ? left : 13]);
        }
        dexp = e2;
    }

    uint8_t dig[BIG_LIMBS * 9];
    int n = big_digits(&b, dig);
    int exp = n + dexp;
    bool inexact = false;
    for (int i = DEC128_MAX_DIGITS; i < n; i++) {
        if (dig[i] != 0) {
            inexact = true;
            break;
        }
    }
    if (!inexact) {
        set_digits(out, neg, dig, n < DEC128_MAX_DIGITS ? n : DEC128_MAX_DIGITS, exp);
        return;
    }
    /* Keep 34 digits (inner zeros included) and a final 5: strictly between the 34-digit
     * truncation and the next 34-digit grid point, where no decimal128 can lie. */
    out->cls = neg ? SHL_NUM_NEG : SHL_NUM_POS;
    out->ndigits = SHL_NUM_MAX_DIGITS;
    out->exp = (int16_t)exp;
    memcpy(out->d, dig, DEC128_MAX_DIGITS);
    out->d[DEC128_MAX_DIGITS] = 5;
}

void
shl_num_from_decimal128(const bson_decimal128_t *v, shl_num_t *out)
{
    uint64_t high = v->high, low = v->low;
    bool neg = (high >> 63) != 0;
    unsigned comb = (unsigned)((high >> 58) & 0x1f);
    int biased;
    shl_u128 coeff;

    memset(out, 0, sizeof(*out));
    if (comb == 0x1f) {
        out->cls = SHL_NUM_NAN;
        return;
    }
    if (comb == 0x1e) {
        out->cls = neg ? SHL_NUM_NEG_INF : SHL_NUM_POS_INF;
        return;
    }
    if (((high >> 61) & 3) == 3) {
        /* The coefficient would be >= 2^113 > 10^34 - 1: non-canonical, read as zero. */
        out->cls = SHL_NUM_ZERO;
        return;
    }
    biased = (int)((high >> 49) & 0x3fff);
    coeff = ((shl_u128)(high & ((UINT64_C(1) << 49) - 1)) << 64) | low;

    uint8_t rev[40], dig[40];
    int n = 0;
    while (coeff > 0 && n < 40) {
        rev[n++] = (uint8_t)(coeff % 10);
        coeff /= 10;
    }
    if (n > DEC128_MAX_DIGITS) {
        out->cls = SHL_NUM_ZERO; /* non-canonical coefficient > 10^34 - 1 */
        return;
    }
    for (int i = 0; i < n; i++) {
        dig[i] = rev[n - 1 - i];
    }
    set_digits(out, neg, dig, n, n + biased - DEC128_EXP_BIAS);
}

bool
shl_num_from_value(const bson_value_t *v, shl_num_t *out)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        shl_num_from_int64(v->value.v_int32, out);
        return true;
    case BSON_TYPE_INT64:
        shl_num_from_int64(v->value.v_int64, out);
        return true;
    case BSON_TYPE_DOUBLE:
        shl_num_from_double(v->value.v_double, out);
        return true;
    case BSON_TYPE_DECIMAL128:
        shl_num_from_decimal128(&v->value.v_decimal128, out);
        return true;
    default:
        return false;
    }
}

static int
cmp_magnitude(const shl_num_t *a, const shl_num_t *b)
{
    if (a->exp != b->exp) {
        return a->exp < b->exp ? -1 : 1;
    }
    int n = a->ndigits < b->ndigits ? a->ndigits : b->ndigits;
    for (int i = 0; i < n; i++) {
        if (a->d[i] != b->d[i]) {
            return a->d[i] < b->d[i] ? -1 : 1;
        }
    }
    /* No trailing zeros: the longer digit string is the larger magnitude. */
    return a->ndigits == b->ndigits ? 0 : a->ndigits < b->ndigits ? -1 : 1;
}

int
shl_num_compare(const shl_num_t *a, const shl_num_t *b)
{
    if (a->cls != b->cls) {
        return a->cls < b->cls ? -1 : 1;
    }
    if (a->cls == SHL_NUM_POS) {
        return cmp_magnitude(a, b);
    }
    if (a->cls == SHL_NUM_NEG) {
        return -cmp_magnitude(a, b);
    }
    return 0;
}

bool
shl_num_is_valid(const shl_num_t *n)
{
    if (n->cls > SHL_NUM_POS_INF) {
        return false;
    }
    if (n->cls != SHL_NUM_POS && n->cls != SHL_NUM_NEG) {
        return n->ndigits == 0;
    }
    if (n->ndigits < 1 || n->ndigits > SHL_NUM_MAX_DIGITS || n->d[0] == 0 ||
        n->d[n->ndigits - 1] == 0) {
        return false;
    }
    for (int i = 0; i < n->ndigits; i++) {
        if (n->d[i] > 9) {
            return false;
        }
    }
    return true;
}

/* The integer value of 'n' if it is integral and its magnitude fits in 64 bits. */
static bool
integral_magnitude(const shl_num_t *n, uint64_t *mag)
{
    uint64_t m = 0;
    if (n->exp < n->ndigits || n->exp > 20) {
        return false;
    }
    for (int i = 0; i < n->exp; i++) {
        unsigned dgt = i < n->ndigits ? n->d[i] : 0;
        if (m > (UINT64_MAX - dgt) / 10) {
            return false;
        }
        m = m * 10 + dgt;
    }
    *mag = m;
    return true;
}

bool
shl_num_to_value(const shl_num_t *n, bson_value_t *out)
{
    uint64_t mag;
    bool neg = n->cls == SHL_NUM_NEG;

    memset(out, 0, sizeof(*out));
    if (!shl_num_is_valid(n)) {
        return false;
    }
    switch (n->cls) {
    case SHL_NUM_NAN:
        out->value_type = BSON_TYPE_DOUBLE;
        out->value.v_double = NAN;
        return true;
    case SHL_NUM_NEG_INF:
    case SHL_NUM_POS_INF:
        out->value_type = BSON_TYPE_DOUBLE;
        out->value.v_double = n->cls == SHL_NUM_NEG_INF ? -INFINITY : INFINITY;
        return true;
    case SHL_NUM_ZERO:
        out->value_type = BSON_TYPE_INT32;
        out->value.v_int32 = 0;
        return true;
    default:
        break;
    }
    if (integral_magnitude(n, &mag) && mag <= (neg ? (UINT64_C(1) << 63) : (uint64_t)INT64_MAX)) {
        int64_t v = neg ? (int64_t)(0 - mag) : (int64_t)mag;
        if (v >= INT32_MIN && v <= INT32_MAX) {
            out->value_type = BSON_TYPE_INT32;
            out->value.v_int32 = (int32_t)v;
        } else {
            out->value_type = BSON_TYPE_INT64;
            out->value.v_int64 = v;
        }
        return true;
    }

    /* A double with exactly this value? strtod rounds correctly, so if one exists it is the
     * result (for 35-digit values it is the double they were made from). */
    char str[SHL_NUM_MAX_DIGITS + 16];
    int len = 0;
    str[len++] = neg ? '-' : '+';
    str[len++] = '0';
    str[len++] = '.';
    for (int i = 0; i < n->ndigits; i++) {
        str[len++] = (char)('0' + n->d[i]);
    }
    snprintf(str + len, sizeof(str) - (size_t)len, "e%d", n->exp);
    double d = strtod(str, NULL);
    shl_num_t back;
    shl_num_from_double(d, &back);
    if (shl_num_compare(&back, n) == 0) {
        out->value_type = BSON_TYPE_DOUBLE;
        out->value.v_double = d;
        return true;
    }
    if (n->ndigits > DEC128_MAX_DIGITS) {
        return false;
    }

    /* decimal128: coefficient = the digits, exponent q = exp - ndigits, padding the
     * coefficient with zeros when q is above the largest exponent (clamped form). */
    int q = n->exp - n->ndigits;
    int ndig = n->ndigits;
    shl_u128 coeff = 0;
    for (int i = 0; i < n->ndigits; i++) {
        coeff = coeff * 10 + n->d[i];
    }
    while (q > DEC128_EXP_MAX && ndig < DEC128_MAX_DIGITS) {
        coeff *= 10;
        q--;
        ndig++;
    }
    if (q > DEC128_EXP_MAX || q < DEC128_EXP_MIN) {
        return false;
    }
    out->value_type = BSON_TYPE_DECIMAL128;
    out->value.v_decimal128.low = (uint64_t)coeff;
    out->value.v_decimal128.high =
        ((uint64_t)neg << 63) | ((uint64_t)(q + DEC128_EXP_BIAS) << 49) | (uint64_t)(coeff >> 64);
    return true;
}

int64_t
shl_num_to_int64_round(const shl_num_t *n)
{
    shl_num_t lim;
    uint64_t ip = 0;
    bool neg = n->cls == SHL_NUM_NEG;

    switch (n->cls) {
    case SHL_NUM_NAN:
    case SHL_NUM_ZERO:
        return 0;
    case SHL_NUM_NEG_INF:
        return INT64_MIN;
    case SHL_NUM_POS_INF:
        return INT64_MAX;
    default:
        break;
    }
    shl_num_from_int64(INT64_MAX, &lim);
    if (shl_num_compare(n, &lim) > 0) {
        return INT64_MAX;
    }
    shl_num_from_int64(INT64_MIN, &lim);
    if (shl_num_compare(n, &lim) < 0) {
        return INT64_MIN;
    }
    /* Here |n| <= 2^63, so the integer part has at most 19 digits. */
    for (int i = 0; i < n->exp; i++) {
        ip = ip * 10 + (i < n->ndigits ? n->d[i] : 0);
    }
    int f0 = n->exp >= 0 && n->exp < n->ndigits ? n->d[n->exp] : 0;
    bool rest = false; /* any nonzero digit after the first fractional digit */
    int from = n->exp >= 0 ? n->exp + 1 : 0;
    for (int i = from; i < n->ndigits; i++) {
        if (n->d[i] != 0) {
            rest = true;
        }
    }
    if (n->exp < 0) {
        f0 = 0; /* |n| < 0.1 */
    }
    if (f0 > 5 || (f0 == 5 && (rest || (ip & 1)))) {
        ip++;
    }
    return neg ? (int64_t)(0 - ip) : (int64_t)ip;
}
