/*
 * cluster_time.h -- signing and validating $clusterTime (seeds/000 "SignedComponentFormat:
 * ClusterTime signing", "Key management", "Handling operator errors";
 * docs/design/vector_clock.md): the time proof (HMAC-SHA1 through OpenSSL), the process's
 * cache of the HMAC keys of admin.system.keys, who may advance the clock without a proof,
 * and the advance limit maxAcceptableLogicalClockDriftSecs. One per process
 * (svc->cluster_time); the role installs the loader that reads the keys (the config server
 * from its own admin.system.keys, shards and routers from the config server's).
 */
#ifndef SHL_NET_CLUSTER_TIME_H
#define SHL_NET_CLUSTER_TIME_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct shl_op_ctx;

#define SHL_TIME_PROOF_LEN 20
#define SHL_HMAC_KEY_LEN 20
/* A proof covers every time that agrees with it outside the low 16 bits of the increment
 * (MongoDB's range mask), so one HMAC serves a run of ticks. */
#define SHL_TIME_PROOF_RANGE_MASK 0xFFFFull

/* One admin.system.keys document of purpose "HMAC". Times are packed Timestamps. */
typedef struct shl_hmac_key {
    int64_t id;
    uint8_t key[SHL_HMAC_KEY_LEN];
    uint64_t expires_at;
} shl_hmac_key_t;

/*
 * shl_time_proof_compute --
 *     The proof of 'ts' under 'key': HMAC-SHA1(key, the 8 little-endian bytes of
 *     ts | SHL_TIME_PROOF_RANGE_MASK) into 'out'. Pure; thread-safe.
 */
void shl_time_proof_compute(const uint8_t key[SHL_HMAC_KEY_LEN], uint64_t ts,
                            uint8_t out[SHL_TIME_PROOF_LEN]);

/*
 * shl_hmac_key_parse --
 *     Read an admin.system.keys document ({_id: long, purpose: "HMAC", key: BinData(20),
 *     expiresAt: Timestamp}) into *out. False for another purpose or a malformed document.
 */
bool shl_hmac_key_parse(const bson_t *doc, shl_hmac_key_t *out);

/*
 * A loader reads every HMAC key there is into a new array *keys of *n (malloc'd; the
 * caller frees it). Called without locks held; may block on the network.
 */
typedef int (*shl_keys_loader_fn)(void *arg, shl_hmac_key_t **keys, size_t *n, shl_status_t *st);

typedef struct shl_cluster_time shl_cluster_time_t;

/* shl_cluster_time_new / _destroy -- an empty key cache without a loader. */
shl_cluster_time_t *shl_cluster_time_new(void);
void shl_cluster_time_destroy(shl_cluster_time_t *ct);

/* shl_cluster_time_set_loader -- install the loader (once, before it is needed). */
void shl_cluster_time_set_loader(shl_cluster_time_t *ct, shl_keys_loader_fn fn, void *arg);

/*
 * shl_cluster_time_refresh --
 *     Reload the keys with the loader now (one load at a time: a caller that finds a load
 *     running waits for it). Errors: the loader's; KeyNotFound without a loader.
 */
int shl_cluster_time_refresh(shl_cluster_time_t *ct, shl_status_t *st);

/* shl_cluster_time_set_keys -- replace the cached keys with a copy of 'keys' (tests and the
 * key manager, which knows the keys it just wrote). */
void shl_cluster_time_set_keys(shl_cluster_time_t *ct, const shl_hmac_key_t *keys, size_t n);

/*
 * shl_cluster_time_sign --
 *     Sign 'ts' with the key for signing it (the key that expires soonest after 'ts'):
 *     *key_id and 'hash'. When the cache has no such key it refreshes once (at most once a
 *     second across threads); false if there is still none, and then MongoDB sends no
 *     $clusterTime to a client that needs a signed one. Thread-safe; may block on a refresh.
 */
bool shl_cluster_time_sign(shl_cluster_time_t *ct, uint64_t ts, int64_t *key_id,
                           uint8_t hash[SHL_TIME_PROOF_LEN]);

/*
 * shl_cluster_time_validate --
 *     Check a signed time sent by a client that may not advance the clock: times no newer
 *     than the newest time this process signed or validated pass (unless the fail point
 *     alwaysValidateClientsClusterTime is on); otherwise the key 'key_id' (refreshing the
 *     cache once when it is unknown) must prove 'ts'. Errors: KeyNotFound (211),
 *     TimeProofMismatch (204). Thread-safe; may block on a refresh.
 */
int shl_cluster_time_validate(shl_cluster_time_t *ct, uint64_t ts, int64_t key_id,
                              const uint8_t hash[SHL_TIME_PROOF_LEN], shl_status_t *st);

/*
 * shl_cluster_time_check_drift --
 *     The advance limit: ClusterTimeFailsRateLimiter (205) if the seconds of 'ts' are more
 *     than maxAcceptableLogicalClockDriftSecs past the wall clock 'wall_ms'. Pure.
 */
int shl_cluster_time_check_drift(uint64_t ts, int64_t wall_ms, shl_status_t *st);

/*
 * shl_cluster_time_client_authorized --
 *     Whether the sender of 'op' may advance the clock without a proof (MongoDB's
 *     isAuthorizedToAdvanceClock): cluster processes (internalClient) and in-process
 *     operations always; external clients too while authentication does not exist, unless
 *     the test-only parameter testTreatClientsAsUnauthorizedForClusterTime is on (the
 *     authentication issue replaces that switch with the client's privileges).
 */
bool shl_cluster_time_client_authorized(const struct shl_op_ctx *op);

/*
 * shl_cluster_time_gossip_in --
 *     The checks a request's $clusterTime passes before the process advances its clock
 *     from it: the shape (clusterTime a Timestamp, signature {hash: BinData, keyId: long}),
 *     the proof when the sender is not authorized (CannotVerifyAndSignLogicalTime when the
 *     process has no key cache), and the advance limit for every sender. *ts (0 when the
 *     request has none, and always on a standalone, which has no logical clock) is the time
 *     to advance to. Errors: as above, plus BadValue /
 *     TypeMismatch / FailedToParse for a malformed $clusterTime.
 */
int shl_cluster_time_gossip_in(struct shl_op_ctx *op, uint64_t *ts, shl_status_t *st);

/*
 * shl_cluster_time_append_reply --
 *     Append operationTime and $clusterTime to 'reply' as the sender of 'op' should see them:
 *     with the dummy signature for a sender authorized to advance the clock, signed with the
 *     current key otherwise -- and neither field when no key can sign 'cluster_time'.
 */
void shl_cluster_time_append_reply(struct shl_op_ctx *op, bson_t *reply, uint64_t op_time,
                                   uint64_t cluster_time);

#endif /* SHL_NET_CLUSTER_TIME_H */
