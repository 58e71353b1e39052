/*
 * shard_key_test.c -- shard key patterns: validation with MongoDB's errors, extraction from
 * documents (dotted paths, missing -> null, arrays refused, hashing), exact keys from query
 * equalities (table-driven), global bounds, ordering.
 */
#include "base/unit_test.h"
#include "sharding/shard_key.h"

#include "bson/bson_compare.h"

#include "bson/bson_hash.h"

static int
init_pattern(shl_shard_key_pattern_t *p, const char *json, shl_status_t *st)
{
    bson_t *b = shl_test_bson(json);
    int ret = shl_shard_key_pattern_init(p, b, st);
    bson_destroy(b);
    return ret;
}

SHL_TEST(shard_key_pattern_valid)
{
    static const char *ok[] = {
        "{'a': 1}",
        "{'a': 1, 'b': 1}",
        "{'a.b': 1, 'c': 1.0}",
        "{'a': {'$numberLong': '1'}}",
        "{'a': 'hashed'}",
        "{'a': 1, 'b': 'hashed'}",
        "{'a': 'hashed', 'b': 1}",
        "{'_id': 1}",
        "{'_id': 'hashed'}",
        "{'a': 1.5}", /* safeNumberInt truncates, as MongoDB */
    };
    shl_status_t st = SHL_STATUS_INIT;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        shl_shard_key_pattern_t p;
        if (init_pattern(&p, ok[i], &st) != 0) {
            shl_test_fail_here(__FILE__, __LINE__, "%s refused: %s", ok[i], st.reason);
            return;
        }
        shl_shard_key_pattern_cleanup(&p);
    }
}

SHL_TEST(shard_key_pattern_invalid)
{
    static const struct {
        const char *pattern;
        const char *reason;
    } bad[] = {
        {"{}", "Shard key is empty"},
        {"{'a': -1}", "Shard key { a: -1 } can contain at most one 'hashed' field, and/or "
                      "multiple numerical fields set to a value of 1. Failed to parse field a"},
        {"{'a': 2}", NULL},
        {"{'a': 'text'}", NULL},
        {"{'a': true}", NULL},
        {"{'a': 'hashed', 'b': 'hashed'}",
         "Shard key { a: \"hashed\", b: \"hashed\" } can contain at most one 'hashed' "
         "field, and/or multiple numerical fields set to a value of 1. Failed to parse field b"},
        {"{'': 1}", "Field  is empty"},
        {"{'a..b': 1}", "Field a..b contains empty parts"},
        {"{'.a': 1}", "Field .a contains empty parts"},
        {"{'a.': 1}", "Field a. contains empty parts"},
    };
    shl_status_t st = SHL_STATUS_INIT;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        shl_shard_key_pattern_t p;
        if (init_pattern(&p, bad[i].pattern, &st) != SHL_CODE_BAD_VALUE) {
            shl_test_fail_here(__FILE__, __LINE__, "%s accepted", bad[i].pattern);
            return;
        }
        if (bad[i].reason != NULL) {
            ASSERT_STR_EQ(st.reason, bad[i].reason);
        }
    }
}

SHL_TEST(shard_key_global_bounds)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_shard_key_pattern_t p;
    bson_t min, max;

    ASSERT_INT_EQ(init_pattern(&p, "{'a': 1, 'b.c': 'hashed'}", &st), 0);
    ASSERT(shl_shard_key_pattern_is_hashed(&p));
    ASSERT(!shl_shard_key_pattern_has_hashed_prefix(&p));
    shl_shard_key_global_min(&p, &min);
    shl_shard_key_global_max(&p, &max);
    ASSERT_BSON_EQ(&min, "{'a': {'$minKey': 1}, 'b.c': {'$minKey': 1}}");
    ASSERT_BSON_EQ(&max, "{'a': {'$maxKey': 1}, 'b.c': {'$maxKey': 1}}");
    ASSERT(shl_shard_key_all_of_type(&min, BSON_TYPE_MINKEY));
    ASSERT(!shl_shard_key_all_of_type(&min, BSON_TYPE_MAXKEY));
    ASSERT(shl_shard_key_compare(&min, &max) < 0);
    bson_destroy(&min);
    bson_destroy(&max);
    shl_shard_key_pattern_cleanup(&p);
}

/* Extract from 'doc' under 'pattern'; compare to 'want' (NULL: expect ShardKeyNotFound). */
static void
check_doc(const char *pattern, const char *doc, const char *want, int line)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_shard_key_pattern_t p;
    bson_t *d = shl_test_bson(doc), out;
    char *got_json = NULL, *want_json = NULL;
    int ret;

    SHL_INVARIANT(init_pattern(&p, pattern, &st) == 0);
    ret = shl_shard_key_extract_from_doc(&p, d, &out, &st);
    if (shl_shard_key_doc_has_array(&p, d) != (want == NULL)) {
        shl_test_fail_here(__FILE__, line, "%s / %s: shl_shard_key_doc_has_array disagrees",
                           pattern, doc);
    }
    if (want == NULL) {
        if (ret != SHL_CODE_SHARD_KEY_NOT_FOUND || !bson_empty(&out)) {
            shl_test_fail_here(__FILE__, line, "%s / %s: expected ShardKeyNotFound", pattern, doc);
        } else if (strcmp(st.reason,
                          "Shard key cannot contain array values or array descendants.") != 0) {
            shl_test_fail_here(__FILE__, line, "reason: %s", st.reason);
        }
    } else if (ret != 0) {
        shl_test_fail_here(__FILE__, line, "%s / %s: %s", pattern, doc, st.reason);
    } else if (!shl_test_bson_eq(&out, want, &got_json, &want_json)) {
        shl_test_fail_here(__FILE__, line, "%s / %s\n  got:  %s\n  want: %s", pattern, doc,
                           got_json, want_json);
    }
    bson_free(got_json);
    bson_free(want_json);
    bson_destroy(&out);
    bson_destroy(d);
    shl_shard_key_pattern_cleanup(&p);
}

SHL_TEST(shard_key_from_document)
{
    check_doc("{'a': 1}", "{'_id': 1, 'a': 5}", "{'a': 5}", __LINE__);
    check_doc("{'a': 1}", "{'_id': 1}", "{'a': null}", __LINE__);
    check_doc("{'a': 1, 'b': 1}", "{'b': 'x', 'a': 2}", "{'a': 2, 'b': 'x'}", __LINE__);
    check_doc("{'a.b': 1}", "{'a': {'b': {'c': 1}}}", "{'a.b': {'c': 1}}", __LINE__);
    check_doc("{'a.b.c': 1}", "{'a': {'b': {'c': 7}}}", "{'a.b.c': 7}", __LINE__);
    check_doc("{'a.b': 1}", "{'a': 5}", "{'a.b': null}", __LINE__);        /* through a scalar */
    check_doc("{'a.b': 1}", "{'a': {'x': 1}}", "{'a.b': null}", __LINE__); /* missing leaf */
    check_doc("{'a': 1}", "{'a': [1, 2]}", NULL, __LINE__);
    check_doc("{'a.b': 1}", "{'a': [{'b': 1}]}", NULL, __LINE__); /* array descendant */
    check_doc("{'a': 1}", "{'a': {'b': [1]}}", "{'a': {'b': [1]}}", __LINE__);
    check_doc("{'a': 1}", "{'a': {'$minKey': 1}}", "{'a': {'$minKey': 1}}", __LINE__);
    check_doc("{'a': 1, 'b': 1}", "{'a': 1, 'b': [2]}", NULL, __LINE__); /* second path */
    check_doc("{'a.b': 1}", "{'a': {'b': []}}", NULL, __LINE__);
}

SHL_TEST(shard_key_hashed_from_document)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_shard_key_pattern_t p;
    bson_t *d = shl_test_bson("{'_id': 3, 'a': 'x', 'b': 42}"), out;
    bson_iter_t it;
    bson_value_t v42, vnull;

    ASSERT_INT_EQ(init_pattern(&p, "{'a': 1, 'b': 'hashed'}", &st), 0);
    ASSERT_INT_EQ(shl_shard_key_extract_from_doc(&p, d, &out, &st), 0);
    ASSERT(bson_iter_init_find(&it, &out, "b"));
    ASSERT(BSON_ITER_HOLDS_INT64(&it));
    v42.value_type = BSON_TYPE_INT32;
    v42.value.v_int32 = 42;
    ASSERT_INT_EQ(bson_iter_int64(&it), shl_bson_hash_value(&v42, SHL_BSON_HASH_DEFAULT_SEED));
    ASSERT(bson_iter_init_find(&it, &out, "a"));
    ASSERT_STR_EQ(bson_iter_utf8(&it, NULL), "x");
    bson_destroy(&out);
    bson_destroy(d);

    /* a missing hashed field hashes null */
    d = shl_test_bson("{'a': 'x'}");
    ASSERT_INT_EQ(shl_shard_key_extract_from_doc(&p, d, &out, &st), 0);
    ASSERT(bson_iter_init_find(&it, &out, "b"));
    vnull.value_type = BSON_TYPE_NULL;
    ASSERT_INT_EQ(bson_iter_int64(&it), shl_bson_hash_value(&vnull, SHL_BSON_HASH_DEFAULT_SEED));
    bson_destroy(&out);
    bson_destroy(d);
    shl_shard_key_pattern_cleanup(&p);

    /* MongoDB's number: convertShardKeyToHashed(1) in the shell */
    ASSERT_INT_EQ(init_pattern(&p, "{'a.b': 'hashed'}", &st), 0);
    d = shl_test_bson("{'a': {'b': 1}}");
    ASSERT_INT_EQ(shl_shard_key_extract_from_doc(&p, d, &out, &st), 0);
    ASSERT(bson_iter_init_find(&it, &out, "a.b"));
    ASSERT_INT_EQ(bson_iter_int64(&it), INT64_C(5902408780260971510));
    bson_destroy(&out);
    bson_destroy(d);
    shl_shard_key_pattern_cleanup(&p);
}

/* Table: pattern, filter, expected key ("" for none). */
static const struct {
    const char *pattern;
    const char *filter;
    const char *key;
} query_cases[] = {
    {"{'a': 1}", "{'a': 5}", "{'a': 5}"},
    {"{'a': 1}", "{'a': {'$eq': 5}}", "{'a': 5}"},
    {"{'a': 1}", "{'a': {'$in': [5]}}", "{'a': 5}"},
    {"{'a': 1}", "{'a': {'$in': [5, 6]}}", ""},
    {"{'a': 1}", "{'a': {'$gt': 5}}", ""},
    {"{'a': 1}", "{'a': {'$eq': 5, '$gt': 3}}", "{'a': 5}"},
    {"{'a': 1}", "{'a': 5, 'b': 6}", "{'a': 5}"},
    {"{'a': 1}", "{'b': 6}", ""},
    {"{'a': 1}", "{}", ""},
    {"{'a': 1}", "{'a': null}", "{'a': null}"},
    {"{'a': 1}", "{'a': {'$regex': 'x'}}", ""},
    {"{'a': 1}", "{'a': {'$regularExpression': {'pattern': 'x', 'options': ''}}}", ""},
    {"{'a': 1}", "{'a': [1, 2]}", ""},
    {"{'a': 1}", "{'a': {'b': 1}}", "{'a': {'b': 1}}"},
    {"{'a': 1}", "{'a': {'$eq': {'$gt': 1}}}", ""},
    {"{'a': 1}", "{'$and': [{'a': 5}, {'b': 1}]}", "{'a': 5}"},
    {"{'a': 1}", "{'$and': [{'a': 5}, {'a': 6}]}", ""},
    {"{'a': 1}", "{'$and': [{'$and': [{'a': {'$eq': 7}}]}]}", "{'a': 7}"},
    {"{'a': 1}", "{'$or': [{'a': 5}]}", "{'a': 5}"},
    {"{'a': 1}", "{'$or': [{'a': 5}, {'a': 6}]}", ""},
    {"{'a': 1}", "{'$nor': [{'a': 5}]}", ""},
    {"{'a': 1}", "{'a': 5, '$comment': 'x'}", "{'a': 5}"},
    {"{'a': 1, 'b': 1}", "{'b': 2, 'a': 1}", "{'a': 1, 'b': 2}"},
    {"{'a': 1, 'b': 1}", "{'a': 1}", ""},
    {"{'a.b': 1}", "{'a.b': 3}", "{'a.b': 3}"},
    {"{'a.b': 1}", "{'a': {'b': 3}}", "{'a.b': 3}"},
    {"{'a.b': 1}", "{'a': {'c': 3}}", ""},
    {"{'a.b': 1}", "{'a': {'b': 3}, 'a.b': 3}", ""}, /* the path is matched twice */
    {"{'a': 1}", "{'a.b': 3}", ""},                  /* below the key path */
    {"{'a': 1}", "{'ab': 3}", ""},
    {"{'a': 1, 'c': 1}", "{'a': {'b': 1}, 'c': {'$in': ['x']}}", "{'a': {'b': 1}, 'c': 'x'}"},
};

SHL_TEST(shard_key_from_query_table)
{
    for (size_t i = 0; i < sizeof(query_cases) / sizeof(query_cases[0]); i++) {
        shl_status_t st = SHL_STATUS_INIT;
        shl_shard_key_pattern_t p;
        bson_t *f = shl_test_bson(query_cases[i].filter), out;
        char *got = NULL, *want = NULL;
        bool found;

        SHL_INVARIANT(init_pattern(&p, query_cases[i].pattern, &st) == 0);
        found = shl_shard_key_extract_from_query(&p, f, &out);
        if (query_cases[i].key[0] == '\0') {
            if (found || !bson_empty(&out)) {
                got = bson_as_relaxed_extended_json(&out, NULL);
                shl_test_fail_here(__FILE__, __LINE__, "case %zu %s: expected no key, got %s", i,
                                   query_cases[i].filter, got);
            }
        } else if (!found) {
            shl_test_fail_here(__FILE__, __LINE__, "case %zu %s: no key", i, query_cases[i].filter);
        } else if (!shl_test_bson_eq(&out, query_cases[i].key, &got, &want)) {
            shl_test_fail_here(__FILE__, __LINE__, "case %zu %s\n  got:  %s\n  want: %s", i,
                               query_cases[i].filter, got, want);
        }
        bson_free(got);
        bson_free(want);
        bson_destroy(&out);
        bson_destroy(f);
        shl_shard_key_pattern_cleanup(&p);
    }
}

SHL_TEST(shard_key_from_query_hashed)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_shard_key_pattern_t p;
    bson_t *f = shl_test_bson("{'a': {'$eq': 'k'}}"), out;
    bson_iter_t it;
    bson_value_t v;

    ASSERT_INT_EQ(init_pattern(&p, "{'a': 'hashed'}", &st), 0);
    ASSERT(shl_shard_key_extract_from_query(&p, f, &out));
    ASSERT(bson_iter_init_find(&it, &out, "a"));
    ASSERT(BSON_ITER_HOLDS_INT64(&it));
    v.value_type = BSON_TYPE_UTF8;
    char kstr[] = "k";
    v.value.v_utf8.str = kstr;
    v.value.v_utf8.len = 1;
    ASSERT_INT_EQ(bson_iter_int64(&it), shl_bson_hash_value(&v, SHL_BSON_HASH_DEFAULT_SEED));
    bson_destroy(&out);
    bson_destroy(f);
    shl_shard_key_pattern_cleanup(&p);
}

SHL_TEST(shard_key_storage_and_shape)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_shard_key_pattern_t p, q;
    bson_t *k;
    bson_t out;

    ASSERT_INT_EQ(init_pattern(&p, "{'a': 1, 'b': 1}", &st), 0);
    ASSERT_INT_EQ(init_pattern(&q, "{'a': 1, 'b': 1, 'c': 1}", &st), 0);
    ASSERT(shl_shard_key_is_extended_by(&p, &q));
    ASSERT(!shl_shard_key_is_extended_by(&q, &p));

    k = shl_test_bson("{'b': 2, 'a': 1}");
    ASSERT(shl_shard_key_is_shard_key(&p, k));
    ASSERT(shl_shard_key_normalize(&p, k, &out));
    ASSERT_BSON_EQ(&out, "{'a': 1, 'b': 2}");
    bson_destroy(&out);
    bson_destroy(k);

    k = shl_test_bson("{'a': 1}");
    ASSERT(!shl_shard_key_is_shard_key(&p, k));
    ASSERT(!shl_shard_key_normalize(&p, k, &out));
    ASSERT(bson_empty(&out));
    bson_destroy(&out);
    bson_destroy(k);

    k = shl_test_bson("{'a': 1, 'b': [1]}");
    ASSERT(!shl_shard_key_is_shard_key(&p, k));
    ASSERT_INT_EQ(shl_shard_key_check_storage(k, &st), SHL_CODE_BAD_VALUE);
    ASSERT_STR_EQ(st.reason, "Shard key element b: [ 1 ] is not valid for storage");
    bson_destroy(k);
    k = shl_test_bson("{'a': {'$regularExpression': {'pattern': 'x', 'options': ''}}}");
    ASSERT_INT_EQ(shl_shard_key_check_storage(k, &st), SHL_CODE_BAD_VALUE);
    bson_destroy(k);
    k = shl_test_bson("{'a': {'$set': 1}}");
    ASSERT_INT_EQ(shl_shard_key_check_storage(k, &st), SHL_CODE_BAD_VALUE);
    bson_destroy(k);
    k = shl_test_bson("{'a': {'x': 1}, 'b': {'$minKey': 1}}");
    ASSERT_INT_EQ(shl_shard_key_check_storage(k, &st), 0);
    bson_destroy(k);

    k = shl_test_bson("{'a': 1, 'b': 1, 'z': 1}");
    ASSERT(shl_shard_key_is_unique_index_compatible(&p, k));
    bson_destroy(k);
    k = shl_test_bson("{'b': 1, 'a': 1}");
    ASSERT(!shl_shard_key_is_unique_index_compatible(&p, k));
    bson_destroy(k);
    k = shl_test_bson("{'_id': 1, 'z': 1}");
    ASSERT(shl_shard_key_is_unique_index_compatible(&p, k));
    bson_destroy(k);
    shl_shard_key_pattern_cleanup(&p);
    shl_shard_key_pattern_cleanup(&q);
}

SHL_TEST(shard_key_order)
{
    static const char *keys[] = {
        "{'a': {'$minKey': 1}}",
        "{'a': null}",
        "{'a': -5}",
        "{'a': 1.5}",
        "{'a': 2}",
        "{'a': 'a'}",
        "{'a': 'b'}",
        "{'a': {'$maxKey': 1}}",
    };
    for (size_t i = 0; i + 1 < sizeof(keys) / sizeof(keys[0]); i++) {
        bson_t *a = shl_test_bson(keys[i]), *b = shl_test_bson(keys[i + 1]);
        ASSERT(shl_shard_key_compare(a, b) < 0);
        ASSERT(shl_shard_key_compare(b, a) > 0);
        ASSERT(shl_shard_key_compare(a, a) == 0);
        bson_destroy(a);
        bson_destroy(b);
    }
    /* compound keys compare position by position; names do not matter */
    bson_t *x = shl_test_bson("{'a': 1, 'b': {'$maxKey': 1}}");
    bson_t *y = shl_test_bson("{'z': 2, 'y': {'$minKey': 1}}");
    ASSERT(shl_shard_key_compare(x, y) < 0);
    bson_destroy(x);
    bson_destroy(y);
}
