/*
 * vector_clock_test.c -- the vector clock's invariants (vector_clock.h): components only move
 * forward, ClusterTime >= ConfigTime >= TopologyTime after any advance or gossip, snapshots
 * keep the order under concurrent advances, and what internal gossip carries.
 */
#include <pthread.h>

#include "base/clock.h"
#include "base/options.h"
#include "base/unit_test.h"
#include "sharding/vector_clock.h"

#define TS(s, i) (((uint64_t)(s) << 32) | (uint32_t)(i))

SHL_TEST(vector_clock_never_goes_back)
{
    shl_vector_clock_t vc;

    shl_vector_clock_init(&vc);
    ASSERT(shl_vector_clock_advance(&vc, SHL_VC_CLUSTER_TIME, TS(10, 1)));
    ASSERT(!shl_vector_clock_advance(&vc, SHL_VC_CLUSTER_TIME, TS(9, 5)));
    ASSERT(shl_vector_clock_get(&vc, SHL_VC_CLUSTER_TIME) == TS(10, 1));
}

SHL_TEST(vector_clock_advancing_topology_raises_config_and_cluster)
{
    shl_vector_clock_t vc;
    shl_vector_time_t now;

    shl_vector_clock_init(&vc);
    shl_vector_clock_advance(&vc, SHL_VC_CLUSTER_TIME, TS(5, 0));
    ASSERT(shl_vector_clock_advance(&vc, SHL_VC_TOPOLOGY_TIME, TS(7, 3)));
    shl_vector_clock_now(&vc, &now);
    ASSERT(now.t[SHL_VC_CLUSTER_TIME] == TS(7, 3));
    ASSERT(now.t[SHL_VC_CONFIG_TIME] == TS(7, 3));
    ASSERT(now.t[SHL_VC_TOPOLOGY_TIME] == TS(7, 3));
    shl_vector_clock_advance(&vc, SHL_VC_CONFIG_TIME, TS(8, 0));
    shl_vector_clock_now(&vc, &now);
    ASSERT(now.t[SHL_VC_CLUSTER_TIME] == TS(8, 0) && now.t[SHL_VC_TOPOLOGY_TIME] == TS(7, 3));
}

SHL_TEST(vector_clock_observe_keeps_the_order_whatever_the_message_says)
{
    shl_vector_clock_t vc;
    shl_vector_time_t now;
    bson_t msg = BSON_INITIALIZER, ct;
    unsigned moved;

    shl_vector_clock_init(&vc);
    /* A message whose $configTime is ahead of its $clusterTime (never sent by a good node). */
    BSON_APPEND_DOCUMENT_BEGIN(&msg, "$clusterTime", &ct);
    BSON_APPEND_TIMESTAMP(&ct, "clusterTime", 3, 0);
    bson_append_document_end(&msg, &ct);
    BSON_APPEND_TIMESTAMP(&msg, "$configTime", 4, 0);
    BSON_APPEND_TIMESTAMP(&msg, "$topologyTime", 2, 0);
    moved = shl_vector_clock_observe(&vc, &msg);
    ASSERT(moved & SHL_VC_ADVANCED(SHL_VC_TOPOLOGY_TIME));
    shl_vector_clock_now(&vc, &now);
    ASSERT(now.t[SHL_VC_CLUSTER_TIME] >= now.t[SHL_VC_CONFIG_TIME]);
    ASSERT(now.t[SHL_VC_CONFIG_TIME] == TS(4, 0) && now.t[SHL_VC_TOPOLOGY_TIME] == TS(2, 0));
    bson_destroy(&msg);
}

static shl_vector_clock_t race_vc;
static volatile int race_stop;

static void *
race_writer(void *arg)
{
    (void)arg;
    for (uint32_t i = 1; !race_stop; i++) {
        shl_vector_clock_advance(&race_vc, (shl_vc_component_t)(i % 3), TS(i, 0));
    }
    return NULL;
}

SHL_TEST(vector_clock_snapshots_keep_the_order_under_concurrent_advances)
{
    pthread_t th;
    shl_vector_time_t now;
    bool ok = true;

    shl_vector_clock_init(&race_vc);
    race_stop = 0;
    pthread_create(&th, NULL, race_writer, NULL);
    for (int i = 0; i < 200000 && ok; i++) {
        shl_vector_clock_now(&race_vc, &now);
        ok = now.t[SHL_VC_CLUSTER_TIME] >= now.t[SHL_VC_CONFIG_TIME] &&
             now.t[SHL_VC_CONFIG_TIME] >= now.t[SHL_VC_TOPOLOGY_TIME];
    }
    race_stop = 1;
    pthread_join(th, NULL);
    ASSERT(ok);
}

SHL_TEST(vector_clock_internal_gossip_carries_all_three)
{
    shl_vector_clock_t vc;
    bson_t doc = BSON_INITIALIZER;
    bson_iter_t it;

    shl_vector_clock_init(&vc);
    shl_vector_clock_advance(&vc, SHL_VC_TOPOLOGY_TIME, TS(5, 1));
    shl_vector_clock_advance(&vc, SHL_VC_CONFIG_TIME, TS(6, 1));
    shl_vector_clock_append_internal_gossip(&vc, TS(9, 9), &doc);
    ASSERT(bson_iter_init(&it, &doc) &&
           bson_iter_find_descendant(&it, "$clusterTime.clusterTime", &it));
    ASSERT(BSON_ITER_HOLDS_TIMESTAMP(&it));
    ASSERT(bson_iter_init(&it, &doc) &&
           bson_iter_find_descendant(&it, "$clusterTime.signature.keyId", &it) &&
           bson_iter_int64(&it) == 0);
    ASSERT(bson_iter_init_find(&it, &doc, "$configTime"));
    ASSERT(bson_iter_init_find(&it, &doc, "$topologyTime"));
    bson_destroy(&doc);
}

SHL_TEST(vector_clock_observe_ignores_times_past_the_advance_limit)
{
    shl_vector_clock_t vc;
    bson_t msg = BSON_INITIALIZER;
    uint32_t far = (uint32_t)(shl_clock_wall_ms() / 1000) + 2 * 31536000;

    shl_options_init(); /* maxAcceptableLogicalClockDriftSecs: one year */
    shl_vector_clock_init(&vc);
    BSON_APPEND_TIMESTAMP(&msg, "$configTime", far, 0);
    BSON_APPEND_TIMESTAMP(&msg, "$topologyTime", 5, 0);
    ASSERT_INT_EQ(shl_vector_clock_observe(&vc, &msg), SHL_VC_ADVANCED(SHL_VC_TOPOLOGY_TIME));
    ASSERT(shl_vector_clock_get(&vc, SHL_VC_CONFIG_TIME) == TS(5, 0));
    bson_destroy(&msg);
}
