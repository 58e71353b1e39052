/*
 * migration_test.c -- the pure helpers of chunk migration: whether a document's shard key is
 * in a migrating range (single, compound and hashed keys, MinKey/MaxKey bounds, documents
 * without the key), the document views of a reply's array, and when a clone batch waits for
 * the cache (mig_cache_busy).
 */
#include "base/unit_test.h"
#include "shard/migration_private.h"

static bool
in_range(const char *pattern, const char *doc, const char *min, const char *max)
{
    shl_shard_key_pattern_t p;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *pb = shl_test_bson(pattern), *d = shl_test_bson(doc), *lo = shl_test_bson(min),
           *hi = shl_test_bson(max);
    bool in = false;

    if (shl_shard_key_pattern_init(&p, pb, &st) == 0) {
        in = mig_doc_in_range(&p, d, lo, hi);
        shl_shard_key_pattern_cleanup(&p);
    } else {
        fprintf(stderr, "bad pattern %s: %s\n", pattern, st.reason);
        abort();
    }
    bson_destroy(pb);
    bson_destroy(d);
    bson_destroy(lo);
    bson_destroy(hi);
    return in;
}

SHL_TEST(migration_doc_in_range)
{
    ASSERT(in_range("{'x': 1}", "{'_id': 1, 'x': 5}", "{'x': 5}", "{'x': 10}"));
    ASSERT(!in_range("{'x': 1}", "{'_id': 1, 'x': 10}", "{'x': 5}", "{'x': 10}"));
    ASSERT(!in_range("{'x': 1}", "{'_id': 1, 'x': 4}", "{'x': 5}", "{'x': 10}"));
    ASSERT(in_range("{'x': 1}", "{'_id': 1, 'x': -1000}", "{'x': {'$minKey': 1}}", "{'x': 0}"));
    ASSERT(in_range("{'x': 1}", "{'_id': 1, 'x': 'str'}", "{'x': 0}", "{'x': {'$maxKey': 1}}"));
    /* A missing key is null, which sorts before numbers. */
    ASSERT(in_range("{'x': 1}", "{'_id': 1}", "{'x': {'$minKey': 1}}", "{'x': 0}"));
    ASSERT(!in_range("{'x': 1}", "{'_id': 1}", "{'x': 0}", "{'x': {'$maxKey': 1}}"));
    /* Compound keys compare field by field. */
    ASSERT(in_range("{'a': 1, 'b': 1}", "{'a': 1, 'b': 9}", "{'a': 1, 'b': 5}",
                    "{'a': 2, 'b': {'$minKey': 1}}"));
    ASSERT(!in_range("{'a': 1, 'b': 1}", "{'a': 1, 'b': 4}", "{'a': 1, 'b': 5}",
                     "{'a': 2, 'b': {'$minKey': 1}}"));
    /* Hashed keys are compared hashed: every document is in the whole range. */
    ASSERT(
        in_range("{'x': 'hashed'}", "{'x': 5}", "{'x': {'$minKey': 1}}", "{'x': {'$maxKey': 1}}"));
    /* An array on the key path belongs to no range. */
    ASSERT(
        !in_range("{'x': 1}", "{'x': [1, 2]}", "{'x': {'$minKey': 1}}", "{'x': {'$maxKey': 1}}"));
}

SHL_TEST(migration_docs_of_reply)
{
    bson_t *reply = shl_test_bson("{'objects': [{'a': 1}, 2, {'b': 2}], 'none': []}");
    bson_t *docs = NULL;
    size_t n;

    n = mig_docs_of(reply, "objects", &docs);
    ASSERT_INT_EQ((int)n, 2);
    ASSERT_BSON_EQ(&docs[0], "{'a': 1}");
    ASSERT_BSON_EQ(&docs[1], "{'b': 2}");
    bson_free(docs);
    ASSERT_INT_EQ((int)mig_docs_of(reply, "none", &docs), 0);
    ASSERT(docs == NULL);
    ASSERT_INT_EQ((int)mig_docs_of(reply, "missing", &docs), 0);
    bson_destroy(reply);
}

static bool
busy(int64_t max, int64_t used, int64_t dirty, bool writes)
{
    shl_storage_cache_stats_t cs;

    memset(&cs, 0, sizeof(cs));
    cs.bytes_max = max;
    cs.bytes_in_use = used;
    cs.bytes_dirty = dirty;
    return mig_cache_busy(&cs, writes);
}

SHL_TEST(migration_cache_busy_thresholds)
{
    /* Below both thresholds: no wait. */
    ASSERT(!busy(1000, 0, 0, true));
    ASSERT(!busy(1000, 899, 99, true));
    /* At 10 % dirty or 90 % used: the recipient (writes) waits. */
    ASSERT(busy(1000, 500, 100, true));
    ASSERT(busy(1000, 900, 0, true));
    ASSERT(busy(1000, 1000, 1000, true));
    /* The donor (reads) waits for the used share only. */
    ASSERT(!busy(1000, 500, 300, false));
    ASSERT(busy(1000, 900, 0, false));
    /* An unknown cache size (no reading) never waits. */
    ASSERT(!busy(0, 500, 500, true));
    ASSERT(!busy(0, 950, 0, false));
}
