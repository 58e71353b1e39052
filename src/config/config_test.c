/*
 * config_test.c -- unit tests of the config server's pure decisions (config_logic.c):
 * hashed presplit points as MongoDB places them, which index backs a shard key, and
 * default index names.
 */
#include <inttypes.h>
#include <string.h>

#include "base/unit_test.h"
#include "config/balancer_private.h"
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

/* ---- the balancer policy (balancer_policy.c) ---- */

static shl_shard_type_t
mk_shard(const char *name, bool draining, char **tags, size_t ntags)
{
    shl_shard_type_t s;

    memset(&s, 0, sizeof(s));
    s.name = (char *)(uintptr_t)name;
    s.draining = draining;
    s.tags = tags;
    s.ntags = ntags;
    return s;
}

SHL_TEST(balancer_policy_evens_chunk_counts)
{
    shl_shard_type_t sh[2] = {mk_shard("s0", false, NULL, 0), mk_shard("s1", false, NULL, 0)};
    cfg_bal_chunk_t ch[8];
    cfg_bal_move_t out[4];
    bool busy[2] = {false, false};
    size_t n;

    for (size_t i = 0; i < 8; i++) {
        ch[i] = (cfg_bal_chunk_t){.shard = "s0", .zone = ""};
    }
    /* One migration per shard per round: the first chunk of the most loaded shard. */
    n = cfg_balancer_policy(sh, 2, ch, 8, busy, out, 4);
    ASSERT_INT_EQ(n, 1);
    ASSERT_INT_EQ(out[0].chunk, 0);
    ASSERT_INT_EQ(out[0].from, 0);
    ASSERT_INT_EQ(out[0].to, 1);
    ASSERT_INT_EQ(out[0].reason, CFG_BAL_IMBALANCE);
    ASSERT(busy[0] && busy[1]);
    /* Busy shards (another collection's migration) take no second one. */
    n = cfg_balancer_policy(sh, 2, ch, 8, busy, out, 4);
    ASSERT_INT_EQ(n, 0);
    /* 4/4 is even; 5/3 is not (ideal 4); 4/3 with 7 chunks is (ideal ceil(7/2) = 4). */
    for (size_t i = 0; i < 4; i++) {
        ch[i].shard = "s1";
    }
    busy[0] = busy[1] = false;
    ASSERT_INT_EQ(cfg_balancer_policy(sh, 2, ch, 8, busy, out, 4), 0);
    ch[3].shard = "s0";
    ASSERT_INT_EQ(cfg_balancer_policy(sh, 2, ch, 8, busy, out, 4), 1);
    ASSERT_STR_EQ(ch[out[0].chunk].shard, "s0");
    busy[0] = busy[1] = false;
    ASSERT_INT_EQ(cfg_balancer_policy(sh, 2, ch, 7, busy, out, 4), 0);
}

SHL_TEST(balancer_policy_parallel_disjoint_pairs)
{
    shl_shard_type_t sh[4] = {mk_shard("a", false, NULL, 0), mk_shard("b", false, NULL, 0),
                              mk_shard("c", false, NULL, 0), mk_shard("d", false, NULL, 0)};
    cfg_bal_chunk_t ch[12];
    cfg_bal_move_t out[4];
    bool busy[4] = {false, false, false, false};
    size_t n;

    for (size_t i = 0; i < 12; i++) {
        ch[i] = (cfg_bal_chunk_t){.shard = i < 6 ? "a" : "b", .zone = ""};
    }
    n = cfg_balancer_policy(sh, 4, ch, 12, busy, out, 4);
    ASSERT_INT_EQ(n, 2);
    ASSERT(out[0].from != out[1].from && out[0].to != out[1].to);
    ASSERT(out[0].to >= 2 && out[1].to >= 2);
}

SHL_TEST(balancer_policy_draining_first_and_jumbo)
{
    shl_shard_type_t sh[3] = {mk_shard("s0", false, NULL, 0), mk_shard("s1", true, NULL, 0),
                              mk_shard("s2", false, NULL, 0)};
    cfg_bal_chunk_t ch[4] = {
        {"s1", "", true, 0}, {"s1", "", false, 0}, {"s0", "", false, 0}, {"s0", "", false, 0}};
    cfg_bal_move_t out[4];
    bool busy[3] = {false, false, false};
    size_t n;

    /* The jumbo chunk stays; the next chunk of the draining shard goes to the least loaded. */
    n = cfg_balancer_policy(sh, 3, ch, 4, busy, out, 4);
    ASSERT_INT_EQ(n, 1);
    ASSERT_INT_EQ(out[0].chunk, 1);
    ASSERT_INT_EQ(out[0].from, 1);
    ASSERT_INT_EQ(out[0].to, 2);
    ASSERT_INT_EQ(out[0].reason, CFG_BAL_DRAINING);
    ASSERT_STR_EQ(cfg_bal_reason_name(out[0].reason), "draining");
    /* A draining shard never receives, even when it holds the fewest chunks. */
    ch[0].shard = ch[1].shard = "s0";
    memset(busy, 0, sizeof(busy));
    n = cfg_balancer_policy(sh, 3, ch, 4, busy, out, 4);
    ASSERT_INT_EQ(n, 1);
    ASSERT_INT_EQ(out[0].to, 2);
}

SHL_TEST(balancer_policy_zones)
{
    char z[] = "Z";
    char *ztags[1] = {z};
    shl_shard_type_t sh[2] = {mk_shard("s0", false, NULL, 0), mk_shard("s1", false, ztags, 1)};
    cfg_bal_chunk_t ch[3] = {{"s0", "Z", false, 0}, {"s1", "", false, 0}, {"s1", "", false, 0}};
    cfg_bal_move_t out[4];
    bool busy[2] = {false, false};
    size_t n;

    /* The zone's chunk goes to the zone's shard first; the rest waits for the next round. */
    n = cfg_balancer_policy(sh, 2, ch, 3, busy, out, 4);
    ASSERT_INT_EQ(n, 1);
    ASSERT_INT_EQ(out[0].chunk, 0);
    ASSERT_INT_EQ(out[0].to, 1);
    ASSERT_INT_EQ(out[0].reason, CFG_BAL_ZONE);
    ASSERT_STR_EQ(cfg_bal_reason_name(CFG_BAL_IMBALANCE), "chunksImbalance");
    /* Zone chunks never leave the zone's shards to even out counts. */
    for (size_t i = 0; i < 3; i++) {
        ch[i] = (cfg_bal_chunk_t){.shard = "s1", .zone = "Z"};
    }
    memset(busy, 0, sizeof(busy));
    ASSERT_INT_EQ(cfg_balancer_policy(sh, 2, ch, 3, busy, out, 4), 0);
    /* Chunks of no zone may go to any shard, a zone's shard included. */
    ch[1].zone = ch[2].zone = "";
    ch[1].shard = ch[2].shard = "s0";
    ch[0].shard = "s1";
    ASSERT_INT_EQ(cfg_balancer_policy(sh, 2, ch, 3, busy, out, 4), 1);
    ASSERT_INT_EQ(out[0].chunk, 1);
    ASSERT_INT_EQ(out[0].to, 1);
}

SHL_TEST(balancer_active_window)
{
    shl_status_t st = SHL_STATUS_INIT;
    bool in = false;

    ASSERT_INT_EQ(cfg_balancer_in_window("01:00", "05:30", 60, &in, &st), 0);
    ASSERT(in);
    ASSERT_INT_EQ(cfg_balancer_in_window("01:00", "05:30", 5 * 60 + 30, &in, &st), 0);
    ASSERT(!in);
    ASSERT_INT_EQ(cfg_balancer_in_window("01:00", "05:30", 59, &in, &st), 0);
    ASSERT(!in);
    /* Over midnight. */
    ASSERT_INT_EQ(cfg_balancer_in_window("23:00", "6:00", 23 * 60 + 59, &in, &st), 0);
    ASSERT(in);
    ASSERT_INT_EQ(cfg_balancer_in_window("23:00", "06:00", 3 * 60, &in, &st), 0);
    ASSERT(in);
    ASSERT_INT_EQ(cfg_balancer_in_window("23:00", "06:00", 12 * 60, &in, &st), 0);
    ASSERT(!in);
    ASSERT_INT_EQ(cfg_balancer_in_window("10:00", "10:00", 0, &in, &st), 0);
    ASSERT(in);
    /* Not HH:MM. */
    ASSERT_INT_EQ(cfg_balancer_in_window("24:00", "06:00", 0, &in, &st), SHL_CODE_BAD_VALUE);
    ASSERT_INT_EQ(cfg_balancer_in_window("1:0", "06:00", 0, &in, &st), SHL_CODE_BAD_VALUE);
    ASSERT_INT_EQ(cfg_balancer_in_window("noon", "06:00", 0, &in, &st), SHL_CODE_BAD_VALUE);
}

#define KTS(s, i) (((uint64_t)(s) << 32) | (uint32_t)(i))

SHL_TEST(balancer_policy_data_size_moves_only_past_three_chunk_sizes)
{
    shl_shard_type_t sh[3] = {mk_shard("s0", false, NULL, 0), mk_shard("s1", false, NULL, 0),
                              mk_shard("s2", true, NULL, 0)};
    cfg_bal_chunk_t ch[4];
    cfg_bal_move_t out[4];
    bool busy[3] = {false, false, false};
    int64_t mb = 1024 * 1024, sizes[3] = {0, 0, 0};

    for (size_t i = 0; i < 4; i++) {
        ch[i] = (cfg_bal_chunk_t){.shard = "s0", .zone = ""};
    }
    /* Four chunks on s0 but 2.9 chunk sizes of data: balanced (a count policy would move). */
    sizes[0] = 29 * mb / 10;
    ASSERT_INT_EQ(cfg_balancer_policy_data_size(sh, 2, ch, 4, sizes, mb, busy, out, 4), 0);
    ASSERT_INT_EQ(cfg_balancer_policy(sh, 2, ch, 4, busy, out, 4), 1);
    busy[0] = busy[1] = false;
    /* Three chunk sizes apart: the first movable chunk of the most loaded shard moves. */
    sizes[0] = 3 * mb;
    ch[0].jumbo = true;
    ASSERT_INT_EQ(cfg_balancer_policy_data_size(sh, 2, ch, 4, sizes, mb, busy, out, 4), 1);
    ASSERT_INT_EQ(out[0].chunk, 1);
    ASSERT_INT_EQ(out[0].from, 0);
    ASSERT_INT_EQ(out[0].to, 1);
    ASSERT_INT_EQ(out[0].reason, CFG_BAL_IMBALANCE);
    /* s2 is draining (no recipient, out of the ideal): 5 and 2 MB are three chunk sizes
     * apart around the ideal 3.5 MB, 5 and 3 MB are not. */
    busy[0] = busy[1] = false;
    sizes[0] = 5 * mb;
    sizes[1] = 2 * mb;
    ch[3].shard = "s1";
    ASSERT_INT_EQ(cfg_balancer_policy_data_size(sh, 3, ch, 4, sizes, mb, busy, out, 4), 1);
    busy[0] = busy[1] = false;
    sizes[1] = 3 * mb;
    ASSERT_INT_EQ(cfg_balancer_policy_data_size(sh, 3, ch, 4, sizes, mb, busy, out, 4), 0);
    /* A draining shard's chunk always moves, whatever the sizes. */
    ch[2].shard = "s2";
    ASSERT_INT_EQ(cfg_balancer_policy_data_size(sh, 3, ch, 4, sizes, mb, busy, out, 4), 1);
    ASSERT_INT_EQ(out[0].reason, CFG_BAL_DRAINING);
    ASSERT_INT_EQ(out[0].from, 2);
}

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

SHL_TEST(balancer_policy_load)
{
    shl_shard_type_t sh[2] = {mk_shard("s0", false, NULL, 0), mk_shard("s1", false, NULL, 0)};
    /* Even by count (2/2), but shard s0 carries 900 of 1000. */
    cfg_bal_chunk_t ch[4] = {{"s0", "", false, 500}, {"s0", "", false, 400},
                             {"s1", "", false, 50}, {"s1", "", false, 50}};
    cfg_bal_move_t out[4];
    bool busy[2] = {false, false};
    size_t split = 0;

    /* The chunk that brings the two closest: 400 (900-400 vs 100+400). */
    ASSERT_INT_EQ(cfg_balancer_policy_load(sh, 2, ch, 4, busy, out, 4, &split), 1);
    ASSERT_INT_EQ(out[0].chunk, 1);
    ASSERT_INT_EQ(out[0].from, 0);
    ASSERT_INT_EQ(out[0].to, 1);
    ASSERT_INT_EQ(out[0].reason, CFG_BAL_IMBALANCE);
    /* Balanced enough (500 vs 500): nothing moves. */
    ch[1].shard = "s1";
    memset(busy, 0, sizeof(busy));
    ASSERT_INT_EQ(cfg_balancer_policy_load(sh, 2, ch, 4, busy, out, 4, &split), 0);
    ASSERT_INT_EQ(split, 4);
    /* One chunk carries the whole difference: moving it would not help; split it. */
    ch[0].load = 5000;
    ch[1].shard = "s0";
    ch[1].load = 0;
    memset(busy, 0, sizeof(busy));
    ASSERT_INT_EQ(cfg_balancer_policy_load(sh, 2, ch, 4, busy, out, 4, &split), 0);
    ASSERT_INT_EQ(split, 0);
    /* A hot range inside one chunk with cold chunks beside it (800 + 3 x 25 against
     * 4 x 25): moving a cold chunk would leave them 725 apart, splitting the hot one about 0. */
    for (size_t i = 0; i < 4; i++) {
        ch[i].load = i == 0 ? 800 : 25;
        ch[i].shard = "s0";
    }
    {
        cfg_bal_chunk_t more[8];
        memcpy(more, ch, sizeof(ch));
        for (size_t i = 4; i < 8; i++) {
            more[i] = (cfg_bal_chunk_t){"s1", "", false, 25};
        }
        memset(busy, 0, sizeof(busy));
        ASSERT_INT_EQ(cfg_balancer_policy_load(sh, 2, more, 8, busy, out, 4, &split), 0);
        ASSERT_INT_EQ(split, 0);
    }
    /* Below the minimum load nothing moves, however skewed. */
    for (size_t i = 0; i < 4; i++) {
        ch[i].load = i == 0 ? CFG_BAL_LOAD_MIN / 2 : (i == 1 ? CFG_BAL_LOAD_MIN / 4 : 0);
        ch[i].shard = i < 2 ? "s0" : "s1";
    }
    memset(busy, 0, sizeof(busy));
    ASSERT_INT_EQ(cfg_balancer_policy_load(sh, 2, ch, 4, busy, out, 4, &split), 0);
}

SHL_TEST(balancer_policy_load_total_judges_shards_across_collections)
{
    shl_shard_type_t sh[3] = {mk_shard("s0", false, NULL, 0), mk_shard("s1", false, NULL, 0),
                              mk_shard("s2", false, NULL, 0)};
    /* Collection A (indices 0-2) is hot on s0, collection B (3-5) hot on s1; each alone would
     * move its hot chunk to whichever other shard is idlest for it. Across collections s0
     * carries 600 + 100, s1 300 + 0, s2 0: s0 gives A's 300 chunk to s2 (700 - 300 vs 300). */
    cfg_bal_chunk_t ch[6] = {{"s0", "", false, 300}, {"s0", "", false, 300},
                             {"s1", "", false, 0},   {"s0", "", false, 100},
                             {"s1", "", false, 200}, {"s1", "", false, 100}};
    cfg_bal_move_t out[3];
    bool busy[3] = {false, false, false};
    size_t split = 0;

    ASSERT_INT_EQ(cfg_balancer_policy_load_total(sh, 3, ch, 6, busy, out, 3, &split), 1);
    ASSERT_INT_EQ(out[0].from, 0);
    ASSERT_INT_EQ(out[0].to, 2);
    ASSERT(out[0].chunk == 0 || out[0].chunk == 1);
    ASSERT_INT_EQ(split, 6);
    /* One migration per shard: s0 and s2 are busy now, s1 has no free partner. */
    ASSERT(busy[0] && busy[2] && !busy[1]);
    /* Two collections hot on the same shard, neither alone above the threshold against its
     * own chunks elsewhere (A: 200 vs 150, B: 200 vs 150), together 400 vs 300 + an idle
     * third shard: a chunk of either collection moves to the idle shard. */
    {
        cfg_bal_chunk_t two[4] = {{"s0", "", false, 200}, {"s1", "", false, 150},
                                  {"s0", "", false, 200}, {"s1", "", false, 150}};
        memset(busy, 0, sizeof(busy));
        ASSERT_INT_EQ(cfg_balancer_policy_load_total(sh, 3, two, 4, busy, out, 3, &split), 1);
        ASSERT_INT_EQ(out[0].from, 0);
        ASSERT_INT_EQ(out[0].to, 2);
        ASSERT(out[0].chunk == 0 || out[0].chunk == 2);
    }
    /* A shard already busy in a draining or zone move of this round takes no part: s0 (700)
     * against s1 (300) is better served by splitting s0's hottest chunk (|400 - 300|) than by
     * moving one (|400 - 2 x 300|). */
    memset(busy, 0, sizeof(busy));
    busy[2] = true;
    ASSERT_INT_EQ(cfg_balancer_policy_load_total(sh, 3, ch, 6, busy, out, 3, &split), 0);
    ASSERT_INT_EQ(split, 0);
}
