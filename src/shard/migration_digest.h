/*
 * migration_digest.h -- checksum-verified migrations (issue 16 item 5, beyond MongoDB).
 *
 * Inside the critical section, before the commit, the recipient and the donor each compute a
 * digest of the migrated range [min, max): the number of documents and the sum and the xor of
 * a 64-bit hash of each document's stored BSON bytes. Sum and xor do not depend on the order
 * the documents are visited in, so the two shards agree exactly when they hold the same
 * documents (up to hash collisions). The recipient returns its digest in the _recvChunkCommit
 * reply (`rangeDigest`); the donor compares, aborts the migration on a mismatch
 * (DataCorruptionDetected, log id 4200220 with both digests) and otherwise sends its digest
 * with _configsvrCommitChunkMigration, which records it in the moveChunk.commit changelog
 * entry. Fail point `migrationCorruptDigest` (on the recipient) perturbs the recipient's
 * digest to force a mismatch.
 */
#ifndef SHL_SHARD_MIGRATION_DIGEST_H
#define SHL_SHARD_MIGRATION_DIGEST_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "shard/shard_private.h"
#include "sharding/sharding_types.h"

/* The BSON field names of a digest in command replies and the changelog. */
#define MIG_DIGEST_FIELD "rangeDigest"

typedef struct mig_digest {
    int64_t count; /* documents in the range */
    uint64_t sum;  /* sum of the document hashes, modulo 2^64 */
    uint64_t xor_; /* xor of the document hashes */
} mig_digest_t;

/* mig_doc_hash -- a 64-bit hash of 'len' bytes (the same on every platform). Pure. */
uint64_t mig_doc_hash(const uint8_t *data, size_t len);

/* mig_digest_add -- account one document's stored bytes into 'd'. Pure. */
void mig_digest_add(mig_digest_t *d, const uint8_t *data, size_t len);

/* mig_digest_eq -- whether two digests are equal. */
bool mig_digest_eq(const mig_digest_t *a, const mig_digest_t *b);

/* mig_digest_append -- append 'd' to 'doc' as field 'field': {count, sum, xor} (int64s). */
void mig_digest_append(bson_t *doc, const char *field, const mig_digest_t *d);

/* mig_digest_parse -- read field 'field' of 'doc' into *d; *found false when absent.
 * Errors: TypeMismatch / NoSuchKey for a malformed digest. */
int mig_digest_parse(const bson_t *doc, const char *field, mig_digest_t *d, bool *found,
                     shl_status_t *st);

/* mig_digest_format -- "count=N sum=HEX xor=HEX" into buf. */
void mig_digest_format(const mig_digest_t *d, char *buf, size_t len);

/*
 * mig_range_digest -- the digest of this shard's documents of ns (collection 'uuid') in
 * [min, max) of shard key pattern 'pattern', read at the latest snapshot: over the shard key
 * index when one serves the pattern, else a collection scan. The caller keeps writes to the
 * range out (critical section on the donor; the recipient owns nothing there yet).
 * Errors: NamespaceNotFound when the collection is gone or was recreated; storage errors.
 */
int mig_range_digest(shard_state_t *s, const char *ns, const shl_uuid_t *uuid,
                     const bson_t *pattern, const bson_t *min, const bson_t *max,
                     mig_digest_t *out, shl_status_t *st);

#endif
