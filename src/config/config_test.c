/*
 * config_test.c -- unit tests of the config server's pure decisions (config_logic.c):
 * hashed presplit points as MongoDB places them, which index backs a shard key, and
 * default index names.
 */
#include <inttypes.h>
#include <string.h>

#include "base/unit_test.h"
#include "config/config_private.h"

SHL_TEST(hashed_split_points_even)
{
    int64_t p[4];
    int n = 0;

    /* MongoDB's 4 initial chunks of a hashed key (sh.status shows these bounds). */
    cfg_hashed_split_points(4, p, &n);
    ASSERT_INT_EQ(n, 3);
    ASSERT_INT_EQ(p[0], -4611686018427387902LL);
    ASSERT_INT_EQ(p[1], 0);
    ASSERT_INT_EQ(p[2], 4611686018427387902LL);
}

SHL_TEST(hashed_split_points_odd_and_one)
{
    int64_t p[8];
    int n = 0;

    cfg_hashed_split_points(3, p, &n);
    ASSERT_INT_EQ(n, 2);
    ASSERT(p[0] < 0 && p[1] > 0 && p[0] == -p[1]);
    cfg_hashed_split_points(1, p, &n);
    ASSERT_INT_EQ(n, 0);
    cfg_hashed_split_points(2, p, &n);
    ASSERT_INT_EQ(n, 1);
    ASSERT_INT_EQ(p[0], 0);
    cfg_hashed_split_points(7, p, &n);
    ASSERT_INT_EQ(n, 6);
    for (int i = 1; i < n; i++) {
        ASSERT(p[i - 1] < p[i]);
    }
}

static bool
backs(const char *key, const char *spec)
{
    bson_t *k = shl_test_bson(key), *s = shl_test_bson(spec);
    bool r = cfg_index_backs_key(k, s);
    bson_destroy(k);
    bson_destroy(s);
    return r;
}

SHL_TEST(index_backs_key)
{
    ASSERT(backs("{'a': 1}", "{'key': {'a': 1}, 'name': 'a_1'}"));
    ASSERT(backs("{'a': 1}", "{'key': {'a': 1, 'b': -1}, 'name': 'a_1_b_-1'}"));
    ASSERT(backs("{'a': 1}", "{'key': {'a': 1.0}, 'name': 'a_1'}"));
    ASSERT(backs("{'a': 1, 'b': 1}", "{'key': {'a': 1, 'b': 1, 'c': 1}, 'name': 'x'}"));
    ASSERT(backs("{'a': 'hashed'}", "{'key': {'a': 'hashed'}, 'name': 'a_hashed'}"));
    ASSERT(backs("{'a': 1}", "{'key': {'a': 1}, 'collation': {'locale': 'simple'}}"));
    /* Wrong order, wrong kind, wrong direction, missing field. */
    ASSERT(!backs("{'a': 1, 'b': 1}", "{'key': {'b': 1, 'a': 1}}"));
    ASSERT(!backs("{'a': 'hashed'}", "{'key': {'a': 1}}"));
    ASSERT(!backs("{'a': 1}", "{'key': {'a': 'hashed'}}"));
    ASSERT(!backs("{'a': 1}", "{'key': {'a': -1}}"));
    ASSERT(!backs("{'a': 1, 'b': 1}", "{'key': {'a': 1}}"));
    /* Indexes that do not hold every document. */
    ASSERT(!backs("{'a': 1}", "{'key': {'a': 1}, 'sparse': true}"));
    ASSERT(!backs("{'a': 1}", "{'key': {'a': 1}, 'partialFilterExpression': {'a': 1}}"));
    ASSERT(!backs("{'a': 1}", "{'key': {'a': 1}, 'hidden': true}"));
    ASSERT(!backs("{'a': 1}", "{'key': {'a': 1}, 'collation': {'locale': 'fr'}}"));
    ASSERT(!backs("{'a': 1}", "{'name': 'no key'}"));
}

SHL_TEST(index_names)
{
    char name[64];
    bson_t *k = shl_test_bson("{'a': 1, 'b.c': 'hashed', 'd': -1}");

    cfg_index_name(k, name, sizeof(name));
    bson_destroy(k);
    ASSERT_STR_EQ(name, "a_1_b.c_hashed_d_-1");
}

SHL_TEST(host_of_connection_strings)
{
    char h[64];

    cfg_host_of("rs0/127.0.0.1:27018", h, sizeof(h));
    ASSERT_STR_EQ(h, "127.0.0.1:27018");
    cfg_host_of("rs0/a:1,b:2", h, sizeof(h));
    ASSERT_STR_EQ(h, "a:1");
    cfg_host_of("a:1", h, sizeof(h));
    ASSERT_STR_EQ(h, "a:1");
    cfg_host_of("rs0/", h, sizeof(h));
    ASSERT_STR_EQ(h, "");
}

#define KTS(s, i) (((uint64_t)(s) << 32) | (uint32_t)(i))

SHL_TEST(keys_plan_first_keys_current_and_reserve)
{
    cfg_new_key_t k[2];
    size_t n = 0;

    cfg_keys_plan(KTS(1000, 7), 90, NULL, 0, k, &n);
    ASSERT_INT_EQ(n, 2);
    ASSERT(k[0].id == (int64_t)KTS(1000, 7) && k[0].expires_at == KTS(1090, 0));
    ASSERT(k[1].id == (int64_t)KTS(1000, 7) + 1 && k[1].expires_at == KTS(1180, 0));
}

SHL_TEST(keys_plan_adds_a_reserve_once_the_current_key_is_the_last)
{
    cfg_new_key_t k[2];
    size_t n = 0;
    uint64_t valid[2] = {KTS(1180, 0), KTS(1270, 0)};

    cfg_keys_plan(KTS(1100, 0), 90, valid, 2, k, &n);
    ASSERT_INT_EQ(n, 0);
    cfg_keys_plan(KTS(1200, 0), 90, valid + 1, 1, k, &n);
    ASSERT_INT_EQ(n, 1);
    ASSERT(k[0].id == (int64_t)KTS(1200, 0) && k[0].expires_at == KTS(1360, 0));
}
