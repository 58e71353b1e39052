/*
 * migration_digest_test.c -- the pure parts of migration_digest.c: the digest does not depend
 * on the order documents are added in, tells different contents apart, and round-trips BSON.
 */
#include "base/unit_test.h"
#include "shard/migration_digest.h"

static void
add_doc(mig_digest_t *d, const char *json)
{
    bson_t *b = shl_test_bson(json);
    mig_digest_add(d, bson_get_data(b), b->len);
    bson_destroy(b);
}

SHL_TEST(migration_digest_order_independent)
{
    mig_digest_t a, b, c, e;

    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    memset(&c, 0, sizeof(c));
    memset(&e, 0, sizeof(e));
    add_doc(&a, "{'_id': 1, 'x': 'a'}");
    add_doc(&a, "{'_id': 2, 'x': 'b'}");
    add_doc(&a, "{'_id': 3, 'x': 'c'}");
    add_doc(&b, "{'_id': 3, 'x': 'c'}");
    add_doc(&b, "{'_id': 1, 'x': 'a'}");
    add_doc(&b, "{'_id': 2, 'x': 'b'}");
    ASSERT(mig_digest_eq(&a, &b));
    ASSERT_INT_EQ(a.count, 3);
    /* One changed byte, a missing or a duplicated document: a different digest. */
    add_doc(&c, "{'_id': 1, 'x': 'a'}");
    add_doc(&c, "{'_id': 2, 'x': 'b'}");
    add_doc(&c, "{'_id': 3, 'x': 'd'}");
    ASSERT(!mig_digest_eq(&a, &c));
    add_doc(&e, "{'_id': 1, 'x': 'a'}");
    add_doc(&e, "{'_id': 2, 'x': 'b'}");
    ASSERT(!mig_digest_eq(&a, &e));
    add_doc(&e, "{'_id': 2, 'x': 'b'}");
    ASSERT(!mig_digest_eq(&a, &e));
    /* Field order is part of the stored document. */
    ASSERT(mig_doc_hash((const uint8_t *)"abcdefghi", 9) !=
           mig_doc_hash((const uint8_t *)"abcdefghj", 9));
    ASSERT(mig_doc_hash((const uint8_t *)"", 0) != mig_doc_hash((const uint8_t *)"\0", 1));
}

SHL_TEST(migration_digest_bson_round_trip)
{
    mig_digest_t a = {.count = 7, .sum = 0xfedcba9876543210ULL, .xor_ = 42}, b;
    bson_t doc = BSON_INITIALIZER;
    bool found = false;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *bad = shl_test_bson("{'rangeDigest': {'count': 1, 'sum': 2}}");

    mig_digest_append(&doc, MIG_DIGEST_FIELD, &a);
    memset(&b, 0, sizeof(b));
    ASSERT_INT_EQ(mig_digest_parse(&doc, MIG_DIGEST_FIELD, &b, &found, &st), 0);
    ASSERT(found);
    ASSERT(mig_digest_eq(&a, &b));
    ASSERT_INT_EQ(mig_digest_parse(&doc, "other", &b, &found, &st), 0);
    ASSERT(!found);
    ASSERT(mig_digest_parse(bad, MIG_DIGEST_FIELD, &b, &found, &st) != 0);
    bson_destroy(bad);
    bson_destroy(&doc);
}
