/*
 * sharding_types.h -- small value types every sharding structure uses: a BSON Timestamp
 * (cluster times, collection/database timestamps, chunk history), a UUID (collection and
 * database incarnations), and the BSON helpers for them. Plain data, copied by assignment.
 */
#ifndef SHL_SHARDING_TYPES_H
#define SHL_SHARDING_TYPES_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

/* Longest shard name accepted anywhere in sharding (MongoDB has no limit; names are
 * replica-set names or "shardNNNN"). Longer names are refused with BadValue. */
#define SHL_SHARD_ID_MAX 128

/* A BSON Timestamp(t, i): 't' seconds, 'i' increment. Ordered by t, then i. */
typedef struct shl_ts {
    uint32_t t;
    uint32_t i;
} shl_ts_t;

#define SHL_TS_NULL ((shl_ts_t){0, 0})
#define SHL_TS_MAX ((shl_ts_t){UINT32_MAX, UINT32_MAX})

/* shl_ts_cmp -- <0, 0, >0 as 'a' is before, equal to, or after 'b'. */
static inline int
shl_ts_cmp(shl_ts_t a, shl_ts_t b)
{
    if (a.t != b.t) {
        return a.t < b.t ? -1 : 1;
    }
    if (a.i != b.i) {
        return a.i < b.i ? -1 : 1;
    }
    return 0;
}

static inline bool
shl_ts_eq(shl_ts_t a, shl_ts_t b)
{
    return a.t == b.t && a.i == b.i;
}

static inline bool
shl_ts_is_null(shl_ts_t a)
{
    return a.t == 0 && a.i == 0;
}

/* A UUID, as BSON binary subtype 4. */
typedef struct shl_uuid {
    uint8_t bytes[16];
} shl_uuid_t;

/* shl_uuid_new -- a random (version 4) UUID (bson/bson_util.h's shl_uuid_gen). */
shl_uuid_t shl_uuid_new(void);

/* shl_uuid_eq -- byte equality. */
bool shl_uuid_eq(const shl_uuid_t *a, const shl_uuid_t *b);

/* shl_uuid_to_string -- "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" into buf (>= 37 bytes). */
void shl_uuid_to_string(const shl_uuid_t *u, char buf[37]);

/* shl_ts_to_string -- "Timestamp(t, i)" into buf (>= 40 bytes), MongoDB's toString form. */
void shl_ts_to_string(shl_ts_t ts, char buf[40]);

/* shl_ts_append / shl_uuid_append -- append as BSON Timestamp / UUID (BinData 4). */
void shl_ts_append(bson_t *b, const char *key, shl_ts_t ts);
void shl_uuid_append(bson_t *b, const char *key, const shl_uuid_t *u);

/* shl_ts_to_u64 / shl_ts_from_u64 -- the packed form bson/bson_util.h, storage and the
 * oplog use (seconds in the high 32 bits), so the packed order is the timestamp order. */
static inline uint64_t
shl_ts_to_u64(shl_ts_t ts)
{
    return ((uint64_t)ts.t << 32) | ts.i;
}

static inline shl_ts_t
shl_ts_from_u64(uint64_t v)
{
    return (shl_ts_t){(uint32_t)(v >> 32), (uint32_t)v};
}

/*
 * Typed field readers in MongoDB's IDL style: 'ctx' names the structure being parsed
 * ("ShardVersion", "DatabaseType", ...) and 'field' the field, so errors read
 * "BSON field 'ShardVersion.e' is the wrong type 'int', expected type 'objectId'"
 * (TypeMismatch). They read the value the iterator is positioned on.
 */
int shl_idl_read_ts(const bson_iter_t *it, const char *ctx, shl_ts_t *out, shl_status_t *st);
int shl_idl_read_uuid(const bson_iter_t *it, const char *ctx, shl_uuid_t *out, shl_status_t *st);
int shl_idl_read_oid(const bson_iter_t *it, const char *ctx, bson_oid_t *out, shl_status_t *st);
int shl_idl_read_int32(const bson_iter_t *it, const char *ctx, int32_t *out, shl_status_t *st);
int shl_idl_read_bool(const bson_iter_t *it, const char *ctx, bool *out, shl_status_t *st);
int shl_idl_read_doc(const bson_iter_t *it, const char *ctx, bson_t *view, shl_status_t *st);

/* shl_idl_wrong_type -- set TypeMismatch for the iterator's field ('want' is MongoDB's
 * type alias, e.g. "objectId"); returns the code. */
int shl_idl_wrong_type(const bson_iter_t *it, const char *ctx, const char *want, shl_status_t *st);

/* shl_idl_missing -- set IDLFailedToParse (40414) "BSON field 'ctx.field' is missing but
 * a required field"; returns the code. */
int shl_idl_missing(const char *ctx, const char *field, shl_status_t *st);

#endif
