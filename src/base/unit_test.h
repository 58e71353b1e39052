/*
 * unit_test.h -- the unit-test harness every module's *_test.c uses. Tests register
 * themselves with SHL_TEST(name); the runner (unit_test.c) runs them all (or those
 * named on the command line) and ends with the line "N passed, N failed".
 */
#ifndef SHL_BASE_UNIT_TEST_H
#define SHL_BASE_UNIT_TEST_H

#include <bson/bson.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef void (*shl_test_fn)(void);

void shl_test_register(const char *name, shl_test_fn fn);
void shl_test_fail_here(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * shl_test_bson_eq -- true if 'doc' equals 'json' (' as ", field order kept) including each
 * value's BSON type: 1 is an int32, 1.0 a double, {'$numberLong': '1'} an int64.
 */
bool shl_test_bson_eq(const bson_t *doc, const char *json, char **doc_json, char **want_json);

#define SHL_TEST(name)                                                                             \
    static void name(void);                                                                        \
    __attribute__((constructor)) static void shl_test_reg_##name(void)                             \
    {                                                                                              \
        shl_test_register(#name, name);                                                            \
    }                                                                                              \
    static void name(void)

#define ASSERT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            shl_test_fail_here(__FILE__, __LINE__, "ASSERT(%s)", #cond);                           \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define ASSERT_INT_EQ(a, b)                                                                        \
    do {                                                                                           \
        int64_t a_ = (int64_t)(a), b_ = (int64_t)(b);                                              \
        if (a_ != b_) {                                                                            \
            shl_test_fail_here(__FILE__, __LINE__, "%s == %s: %" PRId64 " != %" PRId64, #a, #b,    \
                               a_, b_);                                                            \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define ASSERT_STR_EQ(a, b)                                                                        \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0) {                                     \
            shl_test_fail_here(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b,           \
                               a_ ? a_ : "(null)", b_ ? b_ : "(null)");                            \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define ASSERT_BSON_EQ(doc, json)                                                                  \
    do {                                                                                           \
        char *got_, *want_;                                                                        \
        if (!shl_test_bson_eq((doc), (json), &got_, &want_)) {                                     \
            shl_test_fail_here(__FILE__, __LINE__, "%s\n  got:  %s\n  want: %s", #doc, got_,       \
                               want_);                                                             \
            bson_free(got_);                                                                       \
            bson_free(want_);                                                                      \
            return;                                                                                \
        }                                                                                          \
        bson_free(got_);                                                                           \
        bson_free(want_);                                                                          \
    } while (0)

/* shl_test_bson -- parse relaxed JSON with ' for " into a new bson_t (aborts on bad JSON). */
bson_t *shl_test_bson(const char *json);

#endif
