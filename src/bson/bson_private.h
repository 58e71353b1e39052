/*
 * bson_private.h -- helpers shared inside src/bson only. The exact numeric value of any
 * BSON number (int32, int64, double, decimal128) as a short decimal digit string, the
 * common ground on which comparison, KeyString and hashing agree.
 */
#ifndef SHL_BSON_PRIVATE_H
#define SHL_BSON_PRIVATE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

/* Classes in numeric order: NaN sorts below every other number (MongoDB's rule). */
typedef enum shl_num_class {
    SHL_NUM_NAN = 0,
    SHL_NUM_NEG_INF = 1,
    SHL_NUM_NEG = 2,
    SHL_NUM_ZERO = 3,
    SHL_NUM_POS = 4,
    SHL_NUM_POS_INF = 5,
} shl_num_class_t;

/* Digits kept: 34 for decimal128, a 35th ("5") marks a double between two 34-digit grid points. */
#define SHL_NUM_MAX_DIGITS 35

/*
 * shl_num_t -- |value| = 0.d[0] d[1] ... d[n-1] x 10^exp, with d[0] != 0 and d[n-1] != 0
 * (for NEG and POS only). Decimal128 values are exact (<= 34 digits). A double whose exact
 * decimal expansion is longer than 34 digits is kept as its first 34 digits followed by a
 * 5: no decimal128 lies between that point and the double, no other double shares its first
 * 34 digits, so order and equality against every number are exact.
 */
typedef struct shl_num {
    uint8_t cls;     /* shl_num_class_t */
    uint8_t ndigits; /* 1..SHL_NUM_MAX_DIGITS for NEG and POS, else 0 */
    int16_t exp;
    uint8_t d[SHL_NUM_MAX_DIGITS]; /* digit values 0..9 */
} shl_num_t;

void shl_num_from_int64(int64_t v, shl_num_t *out);
void shl_num_from_double(double v, shl_num_t *out);
void shl_num_from_decimal128(const bson_decimal128_t *v, shl_num_t *out);

/* shl_num_from_value -- false (and *out untouched) when 'v' is not a number. */
bool shl_num_from_value(const bson_value_t *v, shl_num_t *out);

/* shl_num_compare -- -1, 0, 1. */
int shl_num_compare(const shl_num_t *a, const shl_num_t *b);

/*
 * shl_num_to_value --
 *     The canonical BSON number for 'n': int32 if integral and fits, else int64 if it fits,
 *     else double if a double has exactly this value, else decimal128. Zero is int32 0;
 *     NaN and infinities are doubles. False if 'n' is not a valid shl_num_t.
 */
bool shl_num_to_value(const shl_num_t *n, bson_value_t *out);

/*
 * shl_num_to_int64_round --
 *     Round to an integer (ties to even), clamped to the int64 range; NaN gives 0.
 */
int64_t shl_num_to_int64_round(const shl_num_t *n);

/* shl_num_is_valid -- whether 'n' satisfies the invariants above (for decoders). */
bool shl_num_is_valid(const shl_num_t *n);

#endif
