/*
 * bson_hash.h -- MongoDB's hashed-index hash (BSONElementHasher::hash64): MD5 over the
 * seed and a canonical serialization of the value (canonical type, numbers squashed to
 * int64, embedded documents element by element), first 8 bytes as a little-endian int64.
 * Hashed shard keys and hashed indexes must produce exactly MongoDB's numbers.
 */
#ifndef SHL_BSON_HASH_H
#define SHL_BSON_HASH_H

#include <bson/bson.h>
#include <stdint.h>

/* The seed every hashed index and hashed shard key uses. */
#define SHL_BSON_HASH_DEFAULT_SEED 0

/*
 * shl_bson_hash_value --
 *     hash64 of 'v' with 'seed'. Numbers hash by their int64 value (doubles truncated,
 *     decimals rounded half to even, NaN as 0, out-of-range clamped), so 1, 1.5 and
 *     NumberLong(1) collide, as in MongoDB. Thread-safe; does not block.
 */
int64_t shl_bson_hash_value(const bson_value_t *v, int32_t seed);

/*
 * shl_bson_hash_fast --
 *     A fast 64-bit hash (FNV-1a over the same serialization) with the same equality
 *     classes as shl_bson_hash_value: values that compare equal in MongoDB's order with
 *     numbers squashed (1, 1.0, NumberLong(1)) hash the same. For hash tables ($group);
 *     not MongoDB's hashed-index value.
 */
uint64_t shl_bson_hash_fast(const bson_value_t *v);

/* shl_bson_hash_iter -- the same for the value an iterator is positioned on. */
int64_t shl_bson_hash_iter(const bson_iter_t *it, int32_t seed);

#endif
