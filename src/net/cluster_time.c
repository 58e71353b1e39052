/*
 * cluster_time.c -- see cluster_time.h. The key cache is a small array under a mutex; the
 * reply path avoids it with a per-thread copy of the last proof made (valid while the
 * cache's generation has not moved), and the request path with the newest time known good.
 */
#include "net/cluster_time.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "base/options.h"
#include "bson/bson_util.h"
#include "net/op_context.h"
#include "net/reply_times.h"
#include "net/server.h"

SHL_FAILPOINT_DEFINE(alwaysValidateClientsClusterTime)

#define TS_SECS(ts) ((uint32_t)((ts) >> 32))
#define TS_INC(ts) ((uint32_t)(ts))

/* A cache miss reloads at most this often (MongoDB's refresh-if-errored interval). */
#define REFRESH_MIN_INTERVAL_MS 1000

struct shl_cluster_time {
    pthread_mutex_t mu;
    shl_hmac_key_t *keys;          /* guarded by mu */
    size_t nkeys;                  /* guarded by mu */
    shl_keys_loader_fn loader;     /* set once before use; read-only after */
    void *loader_arg;              /* likewise */
    pthread_mutex_t load_mu;       /* one load at a time; taken before mu */
    atomic_llong last_load_ms;     /* wall time the last load started (miss rate limit) */
    atomic_uint_least64_t gen;     /* bumped whenever keys change */
    atomic_uint_least64_t last_ok; /* newest time signed or validated */
};

void
shl_time_proof_compute(const uint8_t key[SHL_HMAC_KEY_LEN], uint64_t ts,
                       uint8_t out[SHL_TIME_PROOF_LEN])
{
    uint64_t ceil = ts | SHL_TIME_PROOF_RANGE_MASK;
    uint8_t msg[8];
    unsigned int len = SHL_TIME_PROOF_LEN;

    for (int i = 0; i < 8; i++) {
        msg[i] = (uint8_t)(ceil >> (8 * i));
    }
    SHL_INVARIANT(HMAC(EVP_sha1(), key, SHL_HMAC_KEY_LEN, msg, sizeof(msg), out, &len) != NULL &&
                  len == SHL_TIME_PROOF_LEN);
}

bool
shl_hmac_key_parse(const bson_t *doc, shl_hmac_key_t *out)
{
    bson_iter_t it;
    const uint8_t *data = NULL;
    uint32_t len = 0;
    bson_subtype_t sub;

    memset(out, 0, sizeof(*out));
    if (!bson_iter_init_find(&it, doc, "purpose") || !BSON_ITER_HOLDS_UTF8(&it) ||
        strcmp(bson_iter_utf8(&it, NULL), "HMAC") != 0) {
        return false;
    }
    if (!bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_INT64(&it)) {
        return false;
    }
    out->id = bson_iter_int64(&it);
    if (!bson_iter_init_find(&it, doc, "key") || !BSON_ITER_HOLDS_BINARY(&it)) {
        return false;
    }
    bson_iter_binary(&it, &sub, &len, &data);
    if (len != SHL_HMAC_KEY_LEN) {
        return false;
    }
    memcpy(out->key, data, SHL_HMAC_KEY_LEN);
    if (!bson_iter_init_find(&it, doc, "expiresAt") || !BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        return false;
    }
    out->expires_at = shl_bson_iter_timestamp_u64(&it);
    return true;
}

shl_cluster_time_t *
shl_cluster_time_new(void)
{
    shl_cluster_time_t *ct = calloc(1, sizeof(*ct));

    SHL_INVARIANT(ct != NULL);
    pthread_mutex_init(&ct->mu, NULL);
    pthread_mutex_init(&ct->load_mu, NULL);
    atomic_init(&ct->last_load_ms, 0);
    atomic_init(&ct->gen, 1);
    atomic_init(&ct->last_ok, 0);
    return ct;
}

void
shl_cluster_time_destroy(shl_cluster_time_t *ct)
{
    if (ct != NULL) {
        pthread_mutex_destroy(&ct->mu);
        pthread_mutex_destroy(&ct->load_mu);
        free(ct->keys);
        free(ct);
    }
}

void
shl_cluster_time_set_loader(shl_cluster_time_t *ct, shl_keys_loader_fn fn, void *arg)
{
    ct->loader = fn;
    ct->loader_arg = arg;
}

void
shl_cluster_time_set_keys(shl_cluster_time_t *ct, const shl_hmac_key_t *keys, size_t n)
{
    shl_hmac_key_t *copy = NULL, *old;

    if (n > 0) {
        copy = malloc(n * sizeof(*copy));
        SHL_INVARIANT(copy != NULL);
        memcpy(copy, keys, n * sizeof(*copy));
    }
    pthread_mutex_lock(&ct->mu);
    old = ct->keys;
    ct->keys = copy;
    ct->nkeys = n;
    atomic_fetch_add(&ct->gen, 1);
    pthread_mutex_unlock(&ct->mu);
    free(old);
}

int
shl_cluster_time_refresh(shl_cluster_time_t *ct, shl_status_t *st)
{
    int ret = 0;
    shl_hmac_key_t *keys = NULL;
    size_t n = 0;

    if (ct->loader == NULL) {
        SHL_FAIL(st, SHL_CODE_KEY_NOT_FOUND, "No keys found for HMAC: no key source");
    }
    pthread_mutex_lock(&ct->load_mu);
    atomic_store(&ct->last_load_ms, shl_clock_wall_ms());
    ret = ct->loader(ct->loader_arg, &keys, &n, st);
    if (ret == 0) {
        shl_cluster_time_set_keys(ct, keys, n);
    }
    pthread_mutex_unlock(&ct->load_mu);
done:
    free(keys);
    return ret;
}

/* Refresh on a miss, at most once per REFRESH_MIN_INTERVAL_MS. */
static void
refresh_on_miss(shl_cluster_time_t *ct)
{
    shl_status_t st = SHL_STATUS_INIT;

    if (ct->loader != NULL &&
        shl_clock_wall_ms() - atomic_load(&ct->last_load_ms) >= REFRESH_MIN_INTERVAL_MS &&
        shl_cluster_time_refresh(ct, &st) != 0) {
        SHL_LOG_DEBUG(1, SHARDING, 5000100, "could not refresh the cluster time keys", "error",
                      BCON_UTF8(st.reason));
    }
}

/* The key for signing 'ts' (the one that expires soonest after it) into *out. */
static bool
find_signing_key(shl_cluster_time_t *ct, uint64_t ts, shl_hmac_key_t *out, uint64_t *gen)
{
    bool found = false;

    pthread_mutex_lock(&ct->mu);
    *gen = atomic_load(&ct->gen);
    for (size_t i = 0; i < ct->nkeys; i++) {
        if (ct->keys[i].expires_at > ts && (!found || ct->keys[i].expires_at < out->expires_at)) {
            *out = ct->keys[i];
            found = true;
        }
    }
    pthread_mutex_unlock(&ct->mu);
    return found;
}

static bool
find_key_by_id(shl_cluster_time_t *ct, int64_t id, shl_hmac_key_t *out)
{
    bool found = false;

    pthread_mutex_lock(&ct->mu);
    for (size_t i = 0; i < ct->nkeys && !found; i++) {
        if (ct->keys[i].id == id) {
            *out = ct->keys[i];
            found = true;
        }
    }
    pthread_mutex_unlock(&ct->mu);
    return found;
}

static void
note_ok(shl_cluster_time_t *ct, uint64_t ts)
{
    uint64_t cur = atomic_load(&ct->last_ok);

    while (ts > cur && !atomic_compare_exchange_weak(&ct->last_ok, &cur, ts)) {
    }
}

/* The last proof this thread made: reused while the cache generation is the same, the key
 * still signs the time and the time is in the same proof range. */
static __thread struct {
    const shl_cluster_time_t *ct;
    uint64_t gen;
    uint64_t ceil;
    uint64_t expires_at;
    int64_t key_id;
    uint8_t proof[SHL_TIME_PROOF_LEN];
} tl_proof;

bool
shl_cluster_time_sign(shl_cluster_time_t *ct, uint64_t ts, int64_t *key_id,
                      uint8_t hash[SHL_TIME_PROOF_LEN])
{
    shl_hmac_key_t key;
    uint64_t gen;
    bool found;

    if (tl_proof.ct == ct && tl_proof.gen == atomic_load(&ct->gen) &&
        tl_proof.ceil == (ts | SHL_TIME_PROOF_RANGE_MASK) && tl_proof.expires_at > ts) {
        *key_id = tl_proof.key_id;
        memcpy(hash, tl_proof.proof, SHL_TIME_PROOF_LEN);
        note_ok(ct, ts);
        return true;
    }
    found = find_signing_key(ct, ts, &key, &gen);
    if (!found) {
        refresh_on_miss(ct);
        found = find_signing_key(ct, ts, &key, &gen);
    }
    if (found) {
        shl_time_proof_compute(key.key, ts, hash);
        *key_id = key.id;
        tl_proof.ct = ct;
        tl_proof.gen = gen;
        tl_proof.ceil = ts | SHL_TIME_PROOF_RANGE_MASK;
        tl_proof.expires_at = key.expires_at;
        tl_proof.key_id = key.id;
        memcpy(tl_proof.proof, hash, SHL_TIME_PROOF_LEN);
        note_ok(ct, ts);
    }
    return found;
}

int
shl_cluster_time_validate(shl_cluster_time_t *ct, uint64_t ts, int64_t key_id,
                          const uint8_t hash[SHL_TIME_PROOF_LEN], shl_status_t *st)
{
    int ret = 0;
    shl_hmac_key_t key;
    uint8_t proof[SHL_TIME_PROOF_LEN];

    if (ts <= atomic_load(&ct->last_ok) && !SHL_FAILPOINT_FIRES(alwaysValidateClientsClusterTime)) {
        goto done;
    }
    if (!find_key_by_id(ct, key_id, &key)) {
        refresh_on_miss(ct);
        if (!find_key_by_id(ct, key_id, &key)) {
            SHL_FAIL(st, SHL_CODE_KEY_NOT_FOUND,
                     "Cache Reader No keys found for HMAC that is valid for time: { ts: "
                     "Timestamp(%u, %u) } with id: %lld",
                     TS_SECS(ts), TS_INC(ts), (long long)key_id);
        }
    }
    shl_time_proof_compute(key.key, ts, proof);
    if (memcmp(proof, hash, SHL_TIME_PROOF_LEN) != 0) {
        SHL_FAIL(st, SHL_CODE_TIME_PROOF_MISMATCH, "Proof does not match the cluster time");
    }
    note_ok(ct, ts);
done:
    return ret;
}

int
shl_cluster_time_check_drift(uint64_t ts, int64_t wall_ms, shl_status_t *st)
{
    int ret = 0;
    int64_t wall_secs = wall_ms / 1000;
    int64_t max_drift = shl_opt_int(SHL_OPT_maxAcceptableLogicalClockDriftSecs);

    if ((int64_t)TS_SECS(ts) > wall_secs + max_drift) {
        SHL_FAIL(st, SHL_CODE_CLUSTER_TIME_FAILS_RATE_LIMITER,
                 "New cluster time, %u, is too far from this node's wall clock time, %lld.",
                 TS_SECS(ts), (long long)wall_secs);
    }
done:
    return ret;
}

bool
shl_cluster_time_client_authorized(const shl_op_ctx_t *op)
{
    /* With authentication on, only a holder of advanceClusterTime (a cluster member
     * authenticated as __system) may; anyone else's times must carry a valid proof. */
    return op->conn == NULL ||
           (!op->conn->clock_untrusted &&
            (op->conn->internal ||
             !shl_opt_bool(SHL_OPT_testTreatClientsAsUnauthorizedForClusterTime)));
}

int
shl_cluster_time_gossip_in(shl_op_ctx_t *op, uint64_t *ts, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, sig;
    const uint8_t *hash = NULL;
    uint32_t hash_len = 0;
    bson_subtype_t sub;
    int64_t key_id = 0;
    uint64_t t;

    *ts = 0;
    /* A standalone has no logical clock and ignores the field, as MongoDB's does. */
    if (!op->has_cluster_time ||
        (op->svc->role == SHL_ROLE_STANDALONE && op->svc->set_name[0] == '\0')) {
        goto done;
    }
    if (!shl_bson_iter_find_key(&it, &op->cluster_time, "clusterTime")) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "No clusterTime found");
    }
    if (!BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '$clusterTime.clusterTime' is the wrong type '%s', expected type "
                 "'timestamp'",
                 shl_bson_type_name(bson_iter_type(&it)));
    }
    t = shl_bson_iter_timestamp_u64(&it);
    if (t == 0) {
        goto done; /* an uninitialised time asks for nothing */
    }
    if (!shl_bson_iter_find_key(&it, &op->cluster_time, "signature") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &sig)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "No signature found");
    }
    while (bson_iter_next(&sig)) {
        if (strcmp(bson_iter_key(&sig), "hash") == 0 && BSON_ITER_HOLDS_BINARY(&sig)) {
            bson_iter_binary(&sig, &sub, &hash_len, &hash);
        } else if (strcmp(bson_iter_key(&sig), "keyId") == 0 && BSON_ITER_HOLDS_NUMBER(&sig)) {
            key_id = bson_iter_as_int64(&sig);
        }
    }
    if (hash == NULL || hash_len != SHL_TIME_PROOF_LEN) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Invalid signature hash in $clusterTime");
    }
    /* The handshake of a cluster process says internalClient in the very request. */
    if (!shl_cluster_time_client_authorized(op) &&
        !shl_bson_iter_find_key(&it, op->body, "internalClient")) {
        if (op->svc->cluster_time == NULL) {
            SHL_FAIL(st, SHL_CODE_CANNOT_VERIFY_AND_SIGN_LOGICAL_TIME,
                     "Cannot accept logicalTime: { ts: Timestamp(%u, %u) }. May not be a part "
                     "of a sharded cluster",
                     TS_SECS(t), TS_INC(t));
        }
        SHL_ERR(shl_cluster_time_validate(op->svc->cluster_time, t, key_id, hash, st));
    }
    SHL_ERR(shl_cluster_time_check_drift(t, shl_clock_wall_ms(), st));
    *ts = t;
done:
    return ret;
}

void
shl_cluster_time_append_reply(shl_op_ctx_t *op, bson_t *reply, uint64_t op_time,
                              uint64_t cluster_time)
{
    int64_t key_id = 0;
    uint8_t hash[SHL_TIME_PROOF_LEN];

    if (shl_cluster_time_client_authorized(op)) {
        shl_reply_append_times(reply, op_time, cluster_time);
    } else if (op->svc->cluster_time != NULL &&
               shl_cluster_time_sign(op->svc->cluster_time, cluster_time, &key_id, hash)) {
        shl_reply_append_signed_times(reply, op_time, cluster_time, key_id, hash);
    }
}
