/*
 * bson_test_util.h -- shared by the bson module's unit tests: a seeded random generator of
 * BSON values of every type with deliberately tricky numbers (int64 beyond 2^53, doubles at
 * their limits, decimal128 values within one 34-digit step of a double), and an exact
 * numeric oracle built on glibc's exact printf, independent of bson_number.c.
 */
#ifndef SHL_BSON_TEST_UTIL_H
#define SHL_BSON_TEST_UTIL_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

/* shl_test_rng_seed / shl_test_rand -- xorshift64*; shl_test_randn(n) is in [0, n). */
void shl_test_rng_seed(uint64_t seed);
uint64_t shl_test_rand(void);
uint32_t shl_test_randn(uint32_t n);

/* shl_test_gen_number -- append a random number of any numeric type under 'key'. */
void shl_test_gen_number(bson_t *b, const char *key);

/*
 * shl_test_gen_equal_number --
 *     Append under 'key' a number equal to 'src' (a number), in another type when one can
 *     hold the value exactly, so that ties across types are common.
 */
void shl_test_gen_equal_number(bson_t *b, const char *key, const bson_value_t *src);

/*
 * shl_test_gen_near_number --
 *     Append a number within a step of 'src': the 34-digit truncation of a double's exact
 *     expansion (or one unit above), a neighbouring double, an int64 +-1.
 */
void shl_test_gen_near_number(bson_t *b, const char *key, const bson_value_t *src);

/* shl_test_gen_value -- append a random value of any type (nested up to 'depth' levels). */
void shl_test_gen_value(bson_t *b, const char *key, int depth);

/*
 * shl_test_exact_compare --
 *     Oracle: -1, 0, 1 comparing two numbers by exact value (NaN lowest, -0 == 0), from
 *     their printed decimal expansions.
 */
int shl_test_exact_compare(const bson_value_t *a, const bson_value_t *b);

/* shl_test_value_json -- canonical extended JSON of a value, for failure messages (free it). */
char *shl_test_value_json(const bson_value_t *v);

#endif
