/*
 * range_deleter_test.c -- the pure parts of the range deleter: the config.rangeDeletions
 * document of a task (MongoDB 7.0's RangeDeletionTask: pending written only when true,
 * whenToClean, numOrphanDocs as a long), parsing it back with MongoDB's IDL errors, and
 * range overlap.
 */
#include "base/unit_test.h"
#include "shard/range_deleter.h"

static void
sample_task(shl_range_task_t *t)
{
    memset(t, 0, sizeof(*t));
    memset(t->id.bytes, 0x11, 16);
    memset(t->collection_uuid.bytes, 0x22, 16);
    snprintf(t->ns, sizeof(t->ns), "test.c");
    snprintf(t->donor_shard, sizeof(t->donor_shard), "shard0");
    t->min = shl_test_bson("{'x': 0}");
    t->max = shl_test_bson("{'x': {'$maxKey': 1}}");
    t->key_pattern = shl_test_bson("{'x': 1}");
    t->num_orphan_docs = 7;
}

SHL_TEST(range_task_document)
{
    shl_range_task_t t;
    bson_t doc;

    sample_task(&t);
    shl_range_task_to_bson(&t, &doc);
    ASSERT_BSON_EQ(&doc, "{'_id': {'$binary': {'base64': 'EREREREREREREREREREREQ==', "
                         "'subType': '04'}}, 'nss': 'test.c', 'collectionUuid': {'$binary': "
                         "{'base64': 'IiIiIiIiIiIiIiIiIiIiIg==', 'subType': '04'}}, "
                         "'donorShardId': 'shard0', 'range': {'min': {'x': 0}, 'max': {'x': "
                         "{'$maxKey': 1}}}, 'whenToClean': 'delayed', 'numOrphanDocs': "
                         "{'$numberLong': '7'}, 'keyPattern': {'x': 1}}");
    bson_destroy(&doc);
    t.pending = true;
    t.when_now = true;
    shl_range_task_to_bson(&t, &doc);
    {
        bson_iter_t it;
        ASSERT(bson_iter_init_find(&it, &doc, "pending") && bson_iter_as_bool(&it));
        ASSERT(bson_iter_init_find(&it, &doc, "whenToClean"));
        ASSERT_STR_EQ(bson_iter_utf8(&it, NULL), "now");
    }
    bson_destroy(&doc);
    shl_range_task_cleanup(&t);
}

SHL_TEST(range_task_round_trip)
{
    shl_range_task_t t, back;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t doc, again;

    sample_task(&t);
    t.pending = true;
    t.processing = true;
    shl_range_task_to_bson(&t, &doc);
    ASSERT_INT_EQ(shl_range_task_parse(&doc, &back, &st), 0);
    ASSERT(back.pending && back.processing && !back.when_now);
    ASSERT_STR_EQ(back.ns, "test.c");
    ASSERT_STR_EQ(back.donor_shard, "shard0");
    ASSERT_INT_EQ(back.num_orphan_docs, 7);
    ASSERT(shl_uuid_eq(&back.id, &t.id) && shl_uuid_eq(&back.collection_uuid, &t.collection_uuid));
    shl_range_task_to_bson(&back, &again);
    ASSERT(bson_equal(&doc, &again));
    bson_destroy(&doc);
    bson_destroy(&again);
    shl_range_task_cleanup(&back);
    shl_range_task_cleanup(&t);
}

SHL_TEST(range_task_parse_errors)
{
    static const struct {
        const char *json;
        int code;
    } bad[] = {
        /* whenToClean missing */
        {"{'_id': {'$binary': {'base64': 'EREREREREREREREREREREQ==', 'subType': '04'}}, "
         "'nss': 'a.b', 'collectionUuid': {'$binary': {'base64': 'EREREREREREREREREREREQ==', "
         "'subType': '04'}}, 'donorShardId': 's', 'range': {'min': {'x': 0}, 'max': {'x': 1}}}",
         40414},
        /* an unknown whenToClean */
        {"{'_id': {'$binary': {'base64': 'EREREREREREREREREREREQ==', 'subType': '04'}}, "
         "'nss': 'a.b', 'collectionUuid': {'$binary': {'base64': 'EREREREREREREREREREREQ==', "
         "'subType': '04'}}, 'donorShardId': 's', 'range': {'min': {'x': 0}, 'max': {'x': 1}}, "
         "'whenToClean': 'later'}",
         2},
        /* range without max */
        {"{'_id': {'$binary': {'base64': 'EREREREREREREREREREREQ==', 'subType': '04'}}, "
         "'nss': 'a.b', 'collectionUuid': {'$binary': {'base64': 'EREREREREREREREREREREQ==', "
         "'subType': '04'}}, 'donorShardId': 's', 'range': {'min': {'x': 0}}, "
         "'whenToClean': 'now'}",
         40414},
        /* _id not a UUID */
        {"{'_id': 1, 'nss': 'a.b'}", 14},
        /* pending not a bool */
        {"{'_id': {'$binary': {'base64': 'EREREREREREREREREREREQ==', 'subType': '04'}}, "
         "'pending': 1}",
         14},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        shl_status_t st = SHL_STATUS_INIT;
        shl_range_task_t t;
        bson_t *doc = shl_test_bson(bad[i].json);
        int rc = shl_range_task_parse(doc, &t, &st);
        bson_destroy(doc);
        if (rc != bad[i].code) {
            shl_test_fail_here(__FILE__, __LINE__, "case %zu: code %d (%s), want %d", i, rc,
                               st.reason, bad[i].code);
            return;
        }
        ASSERT(t.min == NULL && t.max == NULL && t.key_pattern == NULL);
    }
}

SHL_TEST(range_overlaps)
{
    bson_t *a = shl_test_bson("{'x': 0}"), *b = shl_test_bson("{'x': 10}");
    bson_t *c = shl_test_bson("{'x': 5}"), *d = shl_test_bson("{'x': 20}");
    bson_t *mn = shl_test_bson("{'x': {'$minKey': 1}}"),
           *mx = shl_test_bson("{'x': {'$maxKey': 1}}");

    ASSERT(shl_range_overlaps(a, b, c, d));
    ASSERT(shl_range_overlaps(c, d, a, b));
    ASSERT(!shl_range_overlaps(a, c, c, b)); /* [0, 5) and [5, 10) only touch */
    ASSERT(!shl_range_overlaps(b, d, a, b));
    ASSERT(shl_range_overlaps(mn, mx, c, d));
    ASSERT(shl_range_overlaps(a, b, a, b));
    bson_destroy(a);
    bson_destroy(b);
    bson_destroy(c);
    bson_destroy(d);
    bson_destroy(mn);
    bson_destroy(mx);
}
