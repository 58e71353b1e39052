/*
 * collation_test.c -- collation specs (MongoDB's validation errors and normalised form) and
 * the ICU collator: comparison, sort keys agreeing with it, collated BSON comparison.
 */
#include <string.h>

#include "base/unit_test.h"
#include "bson/bson_compare.h"
#include "bson/collation.h"

/* The error code shl_collator_new gives 'json' (0 = accepted). */
static int
spec_code(const char *json)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_collator_t *c = NULL;
    bson_t *spec = shl_test_bson(json);
    int code = shl_collator_new(spec, &c, &st);
    shl_collator_release(c);
    bson_destroy(spec);
    return code;
}

static shl_collator_t *
coll(const char *json)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_collator_t *c = NULL;
    bson_t *spec = shl_test_bson(json);
    int code = shl_collator_new(spec, &c, &st);
    if (code != 0) {
        fprintf(stderr, "collator %s: %s\n", json, st.reason);
    }
    bson_destroy(spec);
    return c;
}

SHL_TEST(collation_spec_errors)
{
    static const struct {
        const char *json;
        int code;
    } cases[] = {
        {"{'locale': 'simple'}", 0},
        {"{}", 0},
        {"{'locale': 'en'}", 0},
        {"{'locale': 'en_US'}", 0},
        {"{'locale': 'fr', 'backwards': true}", 0},
        {"{'locale': 'en', 'strength': 2}", 0},
        {"{'locale': 'en', 'strength': 2.0}", 0},
        {"{'strength': 2}", 4},
        {"{'locale': 1}", 14},
        {"{'locale': 'simple', 'strength': 1}", 9},
        {"{'locale': 'xx_bogus'}", 2},
        {"{'locale': ''}", 2},
        {"{'locale': 'en_us'}", 2},
        {"{'locale': 'en', 'strength': 6}", 9},
        {"{'locale': 'en', 'strength': 0}", 9},
        {"{'locale': 'en', 'strength': 1.5}", 2},
        {"{'locale': 'en', 'strength': 'x'}", 14},
        {"{'locale': 'en', 'caseLevel': 1}", 14},
        {"{'locale': 'en', 'caseFirst': 'middle'}", 9},
        {"{'locale': 'en', 'alternate': 'x'}", 9},
        {"{'locale': 'en', 'maxVariable': 'x'}", 9},
        {"{'locale': 'en', 'normalization': 'x'}", 14},
        {"{'locale': 'en', 'foo': 1}", 9},
        {"{'locale': 'en', 'version': '1.0'}", 161},
        {"{'locale': 'en', 'strength': 1, 'backwards': true}", 2},
        {"{'locale': 'en', 'strength': 2, 'caseFirst': 'upper'}", 2},
        {"{'locale': 'en', 'strength': 2, 'caseFirst': 'upper', 'caseLevel': true}", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int got = spec_code(cases[i].json);
        if (got != cases[i].code) {
            fprintf(stderr, "  %s\n", cases[i].json);
        }
        ASSERT_INT_EQ(got, cases[i].code);
    }
}

SHL_TEST(collation_spec_normalised)
{
    shl_collator_t *c = coll("{'locale': 'fr', 'strength': 2}");
    ASSERT(c != NULL);
    char json[600];
    snprintf(json, sizeof(json),
             "{'locale': 'fr', 'caseLevel': false, 'caseFirst': 'off', 'strength': 2, "
             "'numericOrdering': false, 'alternate': 'non-ignorable', 'maxVariable': 'punct', "
             "'normalization': false, 'backwards': false, 'version': '%s'}",
             shl_collator_icu_version());
    ASSERT_BSON_EQ(shl_collator_spec(c), json);
    shl_collator_t *same = coll("{'strength': 2, 'locale': 'fr', 'backwards': false}");
    ASSERT(shl_collator_equal(c, same));
    ASSERT(!shl_collator_equal(c, NULL));
    ASSERT(shl_collator_equal(NULL, NULL));
    shl_collator_release(same);
    shl_collator_release(c);
    ASSERT(coll("{'locale': 'simple'}") == NULL);
}

static int
cmp(const shl_collator_t *c, const char *a, const char *b)
{
    return shl_collator_compare(c, a, strlen(a), b, strlen(b));
}

static int
key_cmp(const shl_collator_t *c, const char *a, const char *b)
{
    bson_string_t *ka = bson_string_new(NULL), *kb = bson_string_new(NULL);
    shl_collator_key_append(c, a, strlen(a), ka);
    shl_collator_key_append(c, b, strlen(b), kb);
    size_t n = ka->len < kb->len ? ka->len : kb->len;
    int r = memcmp(ka->str, kb->str, n);
    r = r != 0 ? (r < 0 ? -1 : 1) : ka->len == kb->len ? 0 : ka->len < kb->len ? -1 : 1;
    bson_string_free(ka, true);
    bson_string_free(kb, true);
    return r;
}

/* A spec seen before gives the cached collator; a rejected spec is rejected every time. */
SHL_TEST(collation_cache)
{
    shl_collator_t *a = coll("{'locale': 'de', 'strength': 1}");
    shl_collator_t *b = coll("{'locale': 'de', 'strength': 1}");
    ASSERT(a != NULL && a == b);
    shl_collator_release(b);
    for (int i = 0; i < 40; i++) { /* more specs than the cache holds: 'a' stays usable */
        char json[80];
        snprintf(json, sizeof(json), "{'locale': 'en', 'strength': %d}", i % 5 + 1);
        shl_collator_release(coll(json));
        ASSERT_INT_EQ(spec_code("{'locale': 'en', 'strength': 9}"), SHL_CODE_FAILED_TO_PARSE);
    }
    ASSERT(shl_collator_compare(a, "Strasse", 7, "stra\303\237e", 7) == 0); /* ss, sharp s */
    shl_collator_release(a);
}

SHL_TEST(collation_compare_and_keys)
{
    shl_collator_t *ci = coll("{'locale': 'en', 'strength': 2}");
    shl_collator_t *en = coll("{'locale': 'en'}");
    shl_collator_t *num = coll("{'locale': 'en', 'numericOrdering': true}");
    shl_collator_t *sh = coll("{'locale': 'en', 'alternate': 'shifted'}");
    static const char *const words[] = {"a", "A", "b", "B", "cafe", "café", "Cafe", "10", "9",
                                        "", "a b", "ab", "z", "Z", "\xff\xfe"};
    ASSERT_INT_EQ(cmp(ci, "abc", "ABC"), 0);
    ASSERT(cmp(NULL, "abc", "ABC") > 0);
    ASSERT(cmp(en, "a", "A") < 0);
    ASSERT(cmp(en, "A", "b") < 0);
    ASSERT(cmp(NULL, "A", "b") < 0);
    ASSERT(cmp(NULL, "a", "B") > 0);
    ASSERT(cmp(en, "a", "B") < 0);
    ASSERT(cmp(ci, "cafe", "café") < 0);
    ASSERT(cmp(num, "9", "10") < 0);
    ASSERT(cmp(en, "9", "10") > 0);
    ASSERT_INT_EQ(cmp(sh, "a b", "ab"), 0);
    const shl_collator_t *all[] = {ci, en, num, sh};
    for (size_t k = 0; k < 4; k++) {
        for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
            for (size_t j = 0; j < sizeof(words) / sizeof(words[0]); j++) {
                ASSERT_INT_EQ(key_cmp(all[k], words[i], words[j]), cmp(all[k], words[i], words[j]));
            }
        }
    }
    shl_collator_release(ci);
    shl_collator_release(en);
    shl_collator_release(num);
    shl_collator_release(sh);
}

SHL_TEST(collation_bson_compare)
{
    shl_collator_t *ci = coll("{'locale': 'en', 'strength': 2}");
    bson_t *a = shl_test_bson("{'x': {'Name': 'ALICE', 'tags': ['X', 1]}}");
    bson_t *b = shl_test_bson("{'x': {'Name': 'alice', 'tags': ['x', 1]}}");
    bson_t *c = shl_test_bson("{'x': {'name': 'alice', 'tags': ['x', 1]}}");
    ASSERT(shl_bson_doc_compare(a, b) < 0);
    ASSERT_INT_EQ(shl_bson_doc_compare_coll(a, b, ci), 0);
    ASSERT(shl_bson_doc_compare_coll(a, c, ci) != 0); /* field names are not collated */
    bson_iter_t ia, ib;
    bson_iter_init_find(&ia, a, "x");
    bson_iter_init_find(&ib, b, "x");
    bson_value_t ka, kb;
    shl_collator_value_key(ci, bson_iter_value(&ia), &ka);
    shl_collator_value_key(ci, bson_iter_value(&ib), &kb);
    ASSERT_INT_EQ(shl_bson_value_compare(&ka, &kb), 0);
    bson_value_destroy(&ka);
    bson_value_destroy(&kb);
    bson_destroy(a);
    bson_destroy(b);
    bson_destroy(c);
    shl_collator_release(ci);
}
