/*
 * cluster_time_test.c -- the time proof (its bytes, its range), the key cache's choice of
 * signing key, validation (KeyNotFound, TimeProofMismatch, the known-good shortcut), the
 * advance limit and the key document parser (cluster_time.h).
 */
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "base/unit_test.h"
#include "net/cluster_time.h"

#define TS(s, i) (((uint64_t)(s) << 32) | (uint32_t)(i))

static void
hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    }
}

static void
key_bytes(uint8_t k[SHL_HMAC_KEY_LEN], uint8_t first)
{
    for (int i = 0; i < SHL_HMAC_KEY_LEN; i++) {
        k[i] = (uint8_t)(first + i);
    }
}

SHL_TEST(time_proof_is_hmac_sha1_of_the_little_endian_ceiling)
{
    uint8_t k[SHL_HMAC_KEY_LEN], p[SHL_TIME_PROOF_LEN];
    char h[41];

    key_bytes(k, 0);
    shl_time_proof_compute(k, TS(1700000000, 5), p);
    hex(p, sizeof(p), h);
    /* Python: hmac.new(bytes(range(20)), struct.pack('<Q', ts | 0xffff), sha1). */
    ASSERT_STR_EQ(h, "ed1f6fc18dfd2b0fd969600cd44d5ec2b4154f79");
}

SHL_TEST(time_proof_covers_the_range_mask_only)
{
    uint8_t k[SHL_HMAC_KEY_LEN], a[SHL_TIME_PROOF_LEN], b[SHL_TIME_PROOF_LEN];

    key_bytes(k, 7);
    shl_time_proof_compute(k, TS(100, 1), a);
    shl_time_proof_compute(k, TS(100, 0xFFFF), b);
    ASSERT(memcmp(a, b, sizeof(a)) == 0);
    shl_time_proof_compute(k, TS(100, 0x10000), b);
    ASSERT(memcmp(a, b, sizeof(a)) != 0);
    shl_time_proof_compute(k, TS(101, 1), b);
    ASSERT(memcmp(a, b, sizeof(a)) != 0);
}

static shl_cluster_time_t *
two_keys(void)
{
    shl_cluster_time_t *ct = shl_cluster_time_new();
    shl_hmac_key_t keys[2];

    keys[0].id = 11;
    key_bytes(keys[0].key, 1);
    keys[0].expires_at = TS(2000, 0);
    keys[1].id = 10;
    key_bytes(keys[1].key, 2);
    keys[1].expires_at = TS(1000, 0);
    shl_cluster_time_set_keys(ct, keys, 2);
    return ct;
}

SHL_TEST(sign_uses_the_key_that_expires_soonest_after_the_time)
{
    shl_cluster_time_t *ct = two_keys();
    uint8_t h[SHL_TIME_PROOF_LEN], want[SHL_TIME_PROOF_LEN], k[SHL_HMAC_KEY_LEN];
    int64_t id = 0;

    ASSERT(shl_cluster_time_sign(ct, TS(500, 3), &id, h));
    ASSERT_INT_EQ(id, 10);
    key_bytes(k, 2);
    shl_time_proof_compute(k, TS(500, 3), want);
    ASSERT(memcmp(h, want, sizeof(h)) == 0);
    /* The same range again comes from the per-thread copy. */
    ASSERT(shl_cluster_time_sign(ct, TS(500, 4), &id, h));
    ASSERT_INT_EQ(id, 10);
    ASSERT(memcmp(h, want, sizeof(h)) == 0);
    ASSERT(shl_cluster_time_sign(ct, TS(1500, 0), &id, h));
    ASSERT_INT_EQ(id, 11);
    ASSERT(!shl_cluster_time_sign(ct, TS(2000, 0), &id, h)); /* every key expired */
    shl_cluster_time_destroy(ct);
}

SHL_TEST(validate_accepts_a_proof_and_refuses_a_wrong_one_or_an_unknown_key)
{
    shl_cluster_time_t *ct = two_keys();
    shl_status_t st = SHL_STATUS_INIT;
    uint8_t k[SHL_HMAC_KEY_LEN], p[SHL_TIME_PROOF_LEN];

    key_bytes(k, 1);
    shl_time_proof_compute(k, TS(1500, 9), p);
    ASSERT_INT_EQ(shl_cluster_time_validate(ct, TS(1500, 9), 11, p, &st), 0);
    p[0] ^= 1;
    /* At or below the newest good time the proof is not checked again. */
    ASSERT_INT_EQ(shl_cluster_time_validate(ct, TS(1500, 9), 11, p, &st), 0);
    ASSERT_INT_EQ(shl_cluster_time_validate(ct, TS(1600, 0), 11, p, &st), 204);
    ASSERT_STR_EQ(st.reason, "Proof does not match the cluster time");
    ASSERT_INT_EQ(shl_cluster_time_validate(ct, TS(1600, 0), 99, p, &st), 211);
    shl_cluster_time_destroy(ct);
}

SHL_TEST(advance_limit_refuses_times_a_year_ahead)
{
    shl_status_t st = SHL_STATUS_INIT;
    int64_t now_ms = 1700000000000LL;

    shl_options_init(); /* maxAcceptableLogicalClockDriftSecs: its default, one year */

    ASSERT_INT_EQ(shl_cluster_time_check_drift(TS(1700000000 + 31536000, 0), now_ms, &st), 0);
    ASSERT_INT_EQ(shl_cluster_time_check_drift(TS(1700000000 + 31536001, 0), now_ms, &st), 205);
    ASSERT_STR_EQ(st.reason, "New cluster time, 1731536001, is too far from this node's wall "
                             "clock time, 1700000000.");
}

SHL_TEST(key_document_parse)
{
    uint8_t k[SHL_HMAC_KEY_LEN];
    bson_t doc = BSON_INITIALIZER;
    shl_hmac_key_t key;

    key_bytes(k, 3);
    BSON_APPEND_INT64(&doc, "_id", 42);
    BSON_APPEND_UTF8(&doc, "purpose", "HMAC");
    bson_append_binary(&doc, "key", 3, BSON_SUBTYPE_BINARY, k, sizeof(k));
    bson_append_timestamp(&doc, "expiresAt", 9, 77, 0);
    ASSERT(shl_hmac_key_parse(&doc, &key));
    ASSERT_INT_EQ(key.id, 42);
    ASSERT(key.expires_at == TS(77, 0));
    ASSERT(memcmp(key.key, k, sizeof(k)) == 0);
    bson_reinit(&doc);
    BSON_APPEND_INT64(&doc, "_id", 42);
    BSON_APPEND_UTF8(&doc, "purpose", "other");
    ASSERT(!shl_hmac_key_parse(&doc, &key));
    bson_destroy(&doc);
}
