/*
 * chunk_version.h -- the versioning protocol's tokens (seeds/002 "Versioning Protocols",
 * seeds/000 "Shard versioning and database versioning"): a chunk/placement version
 * <epoch, timestamp, major, minor>, the shard version SV<E,T,M,m,I> a router attaches to a
 * request, the database version DBV<U,T,Mod>, their special values (UNSHARDED, IGNORED,
 * fixed), comparison rules, MongoDB 7.0's BSON forms, the bump rules of each metadata
 * operation, and the StaleConfig / StaleDbVersion error extra info.
 */
#ifndef SHL_SHARDING_CHUNK_VERSION_H
#define SHL_SHARDING_CHUNK_VERSION_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/namespace.h"
#include "base/status.h"
#include "sharding/sharding_types.h"

/*
 * shl_chunk_version_t -- ChunkVersion: the collection generation (epoch ObjectId +
 * timestamp, which change together when the collection is created, dropped and re-created,
 * renamed, resharded or its key refined) and the placement (major: data moved between
 * shards; minor: boundaries changed on a shard). It is the version of one chunk, the
 * version of a shard (the highest of its chunks) or of the collection (the highest of all).
 * Placement (0, 0) means "no chunk": a shard that owns nothing, or UNSHARDED/IGNORED.
 */
typedef struct shl_chunk_version {
    bson_oid_t epoch;
    shl_ts_t timestamp;
    uint32_t major;
    uint32_t minor;
} shl_chunk_version_t;

/*
 * shl_shard_version_t -- ShardVersion, the token attached to versioned requests as
 * `shardVersion`: the placement version plus the optional index version (global indexes)
 * and the optional placementConflictTime transactions carry.
 */
typedef struct shl_shard_version {
    shl_chunk_version_t placement;
    bool has_index_version;
    shl_ts_t index_version;
    bool has_placement_conflict_time;
    shl_ts_t placement_conflict_time;
} shl_shard_version_t;

/*
 * shl_database_version_t -- DatabaseVersion DBV<U, T, Mod>: uuid and timestamp identify
 * the database's incarnation; lastMod grows when the primary shard changes. lastMod 0
 * marks a "fixed" version (config and admin, which have no catalog entry).
 */
typedef struct shl_database_version {
    shl_uuid_t uuid;
    shl_ts_t timestamp;
    int32_t last_mod;
    bool has_placement_conflict_time;
    shl_ts_t placement_conflict_time;
} shl_database_version_t;

/* ---- chunk (placement) versions ---- */

/* shl_chunk_version_make -- <epoch, timestamp, major, minor>. */
shl_chunk_version_t shl_chunk_version_make(const bson_oid_t *epoch, shl_ts_t timestamp,
                                           uint32_t major, uint32_t minor);

/* UNSHARDED: zero epoch, Timestamp(0, 0), 0|0 -- "the collection is not sharded". */
shl_chunk_version_t shl_chunk_version_unsharded(void);

/* IGNORED: epoch with zero time and all other bytes 0xff, Timestamp::max(), 0|0 --
 * "skip the placement check for this request". */
shl_chunk_version_t shl_chunk_version_ignored(void);

/* shl_chunk_version_first -- the version of a new collection's first chunk: 1|0. */
shl_chunk_version_t shl_chunk_version_first(const bson_oid_t *epoch, shl_ts_t timestamp);

bool shl_chunk_version_is_unsharded(const shl_chunk_version_t *v);
bool shl_chunk_version_is_ignored(const shl_chunk_version_t *v);

/* shl_chunk_version_is_set -- placement is not 0|0. */
bool shl_chunk_version_is_set(const shl_chunk_version_t *v);

/* shl_chunk_version_same_generation -- same collection incarnation (epoch and timestamp). */
bool shl_chunk_version_same_generation(const shl_chunk_version_t *a, const shl_chunk_version_t *b);

/* shl_chunk_version_equal -- same generation and same major and minor. */
bool shl_chunk_version_equal(const shl_chunk_version_t *a, const shl_chunk_version_t *b);

/*
 * shl_chunk_version_is_older_than --
 *     The protocol's order: a different generation is ordered by timestamp (timestamps are
 *     comparable, epochs are not); the same generation by major, then minor. Strict.
 */
bool shl_chunk_version_is_older_than(const shl_chunk_version_t *a, const shl_chunk_version_t *b);

/* shl_chunk_version_is_older_or_equal -- is_older_than or equal. */
bool shl_chunk_version_is_older_or_equal(const shl_chunk_version_t *a,
                                         const shl_chunk_version_t *b);

/* shl_chunk_version_write_compatible -- same generation and same major (what a write
 * routed with 'a' may rely on when the shard has 'b'). */
bool shl_chunk_version_write_compatible(const shl_chunk_version_t *a, const shl_chunk_version_t *b);

/*
 * shl_chunk_version_inc_major / _inc_minor --
 *     major+1 with minor reset to 0 / minor+1. Errors: Location31180 / Location31181 when
 *     the component is already at its maximum (MongoDB's codes and texts).
 */
int shl_chunk_version_inc_major(shl_chunk_version_t *v, shl_status_t *st);
int shl_chunk_version_inc_minor(shl_chunk_version_t *v, shl_status_t *st);

/* shl_chunk_version_to_string -- "M|m||<epoch hex>||Timestamp(t, i)" into buf. */
#define SHL_CHUNK_VERSION_STR_MAX 96
void shl_chunk_version_to_string(const shl_chunk_version_t *v, char buf[SHL_CHUNK_VERSION_STR_MAX]);

/* shl_chunk_version_append -- append 'key': {e, t, v: Timestamp(major, minor)}. */
void shl_chunk_version_append(bson_t *b, const char *key, const shl_chunk_version_t *v);

/*
 * shl_chunk_version_parse --
 *     Parse the value 'it' is positioned on. Accepts the current form {e, t, v} (extra
 *     fields ignored), the positional array form [Timestamp(major, minor), epoch,
 *     <optional bool>, timestamp] and the same positions encoded as an object
 *     {0: ..., 1: ..., 2: ...}; in the positional forms the timestamp may be absent for
 *     UNSHARDED and IGNORED. Errors: TypeMismatch, IDLFailedToParse, BadValue.
 */
int shl_chunk_version_parse(const bson_iter_t *it, shl_chunk_version_t *out, shl_status_t *st);

/* ---- bump rules (seeds/000 "Types of operations that will cause the versioning
 * information to become stale"); 'coll_version' is the collection version before the
 * operation (the highest chunk version). ---- */

/*
 * shl_chunk_version_after_split --
 *     Splitting a chunk into n pieces: the i-th piece (0-based, in key order) gets
 *     <Ecv, Tcv, Mcv, mcv + i + 1>. 'out' has room for n. Errors: 31181 on overflow.
 */
int shl_chunk_version_after_split(const shl_chunk_version_t *coll_version, uint32_t n,
                                  shl_chunk_version_t *out, shl_status_t *st);

/* shl_chunk_version_after_merge -- the merged chunk: <Ecv, Tcv, Mcv, mcv + 1>. */
int shl_chunk_version_after_merge(const shl_chunk_version_t *coll_version, shl_chunk_version_t *out,
                                  shl_status_t *st);

/*
 * shl_chunk_version_after_move --
 *     Moving a chunk: the moved chunk gets <Ecv, Tcv, Mcv + 1, 0>; the donor's control
 *     chunk (any chunk left on the donor), if there is one, gets <Ecv, Tcv, Mcv + 1, 1>.
 *     A donor with no chunk left has shard version <Ecv, Tcv, 0, 0>.
 */
int shl_chunk_version_after_move(const shl_chunk_version_t *coll_version,
                                 shl_chunk_version_t *moved, shl_chunk_version_t *control,
                                 shl_status_t *st);

/* shl_chunk_version_after_refine -- refining the shard key: every chunk keeps major/minor
 * and takes the new generation <Enew, Tnow, Mi, mi>. */
shl_chunk_version_t shl_chunk_version_after_refine(const shl_chunk_version_t *chunk,
                                                   const bson_oid_t *new_epoch,
                                                   shl_ts_t new_timestamp);

/* ---- shard versions ---- */

/* shl_shard_version_make -- a shard version from a placement, without index version. */
shl_shard_version_t shl_shard_version_make(const shl_chunk_version_t *placement);

/* UNSHARDED and IGNORED shard versions (placement UNSHARDED/IGNORED, no index version). */
shl_shard_version_t shl_shard_version_unsharded(void);
shl_shard_version_t shl_shard_version_ignored(void);

/* shl_shard_version_equal -- equal placement and equal (or both absent) index versions. */
bool shl_shard_version_equal(const shl_shard_version_t *a, const shl_shard_version_t *b);

/*
 * shl_shard_version_append --
 *     Append 'key': {e, t, v: Timestamp(major, minor), i?: index version,
 *     placementConflictTime?} -- MongoDB 7.0's ShardVersion wire form (key is normally
 *     "shardVersion", "vReceived" or "vWanted").
 */
void shl_shard_version_append(bson_t *b, const char *key, const shl_shard_version_t *v);

/*
 * shl_shard_version_parse --
 *     Parse the value 'it' is positioned on: the object form above, or the legacy
 *     positional forms shl_chunk_version_parse accepts. Errors: TypeMismatch,
 *     IDLFailedToParse, BadValue.
 */
int shl_shard_version_parse(const bson_iter_t *it, shl_shard_version_t *out, shl_status_t *st);

/* shl_shard_version_to_string -- the placement's string form. */
void shl_shard_version_to_string(const shl_shard_version_t *v, char buf[SHL_CHUNK_VERSION_STR_MAX]);

/* ---- database versions ---- */

/* shl_database_version_new -- a new database: <fresh uuid, 'timestamp', 1>. */
shl_database_version_t shl_database_version_new(shl_ts_t timestamp);

/* shl_database_version_fixed -- config/admin: <fresh uuid, Timestamp(0, 0), 0>. */
shl_database_version_t shl_database_version_fixed(void);

/* shl_database_version_is_fixed -- lastMod == 0. */
bool shl_database_version_is_fixed(const shl_database_version_t *v);

/* shl_database_version_after_move_primary -- the same incarnation with lastMod + 1. */
shl_database_version_t shl_database_version_after_move_primary(const shl_database_version_t *v);

/* shl_database_version_equal -- same timestamp and lastMod (MongoDB ignores the uuid). */
bool shl_database_version_equal(const shl_database_version_t *a, const shl_database_version_t *b);

/* shl_database_version_is_older_than -- by timestamp, then lastMod. */
bool shl_database_version_is_older_than(const shl_database_version_t *a,
                                        const shl_database_version_t *b);

/* shl_database_version_append -- 'key': {uuid, timestamp, lastMod, placementConflictTime?}. */
void shl_database_version_append(bson_t *b, const char *key, const shl_database_version_t *v);

/* shl_database_version_parse_doc -- parse {uuid, timestamp, lastMod, ...} (IDL
 * "DatabaseVersion"). Errors: IDLFailedToParse, TypeMismatch, InvalidUUID. */
int shl_database_version_parse_doc(const bson_t *doc, shl_database_version_t *out,
                                   shl_status_t *st);

/* shl_database_version_parse -- the same for the value 'it' is positioned on. */
int shl_database_version_parse(const bson_iter_t *it, shl_database_version_t *out,
                               shl_status_t *st);

/* ---- stale version errors ---- */

/*
 * shl_stale_config_info_t -- StaleConfig (13388)'s extra info: the namespace, the version
 * the request carried, the version the shard has (if it knows it) and the shard's id.
 */
typedef struct shl_stale_config_info {
    char ns[SHL_NS_MAX + 1];
    shl_shard_version_t received;
    bool has_wanted;
    shl_shard_version_t wanted;
    char shard_id[SHL_SHARD_ID_MAX];
} shl_stale_config_info_t;

/* shl_stale_config_info_append -- append {ns, vReceived, vWanted?, shardId} to 'b'. */
void shl_stale_config_info_append(const shl_stale_config_info_t *info, bson_t *b);

/* shl_stale_config_info_parse -- parse extra info back (e.g. from shl_status_extra_get).
 * Errors: NoSuchKey (no shardId), TypeMismatch, IDLFailedToParse. */
int shl_stale_config_info_parse(const bson_t *extra, shl_stale_config_info_t *out,
                                shl_status_t *st);

/*
 * shl_status_set_stale_config --
 *     Set 'st' to StaleConfig with 'info' as extra info and a printf reason; returns 13388.
 */
int shl_status_set_stale_config(shl_status_t *st, const shl_stale_config_info_t *info,
                                const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* shl_stale_db_info_t -- StaleDbVersion (249)'s extra info. */
typedef struct shl_stale_db_info {
    char db[SHL_DB_NAME_MAX];
    shl_database_version_t received;
    bool has_wanted;
    shl_database_version_t wanted;
} shl_stale_db_info_t;

/* shl_stale_db_info_append -- append {db, vReceived, vWanted?} to 'b'. */
void shl_stale_db_info_append(const shl_stale_db_info_t *info, bson_t *b);

/* shl_stale_db_info_parse -- parse it back. Errors: IDLFailedToParse, TypeMismatch. */
int shl_stale_db_info_parse(const bson_t *extra, shl_stale_db_info_t *out, shl_status_t *st);

/* shl_status_set_stale_db -- StaleDbVersion with 'info' as extra info; returns 249. */
int shl_status_set_stale_db(shl_status_t *st, const shl_stale_db_info_t *info, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
