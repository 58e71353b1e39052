/*
 * catalog_types.h -- the sharding catalog's documents with MongoDB 7.0's schemas
 * (seeds/000 "The authoritative routing table"; DESIGN.md section 6): config.shards,
 * config.databases, config.collections and config.chunks (plus the shard-side
 * config.cache.chunks.<ns> form of a chunk). Parse and serialize; tools that read the
 * config database (sh.status() in mongosh) see what they would see on MongoDB.
 *
 * Every type is caller's storage: _parse fills it (and leaves it empty on error), _cleanup
 * frees it, _to_bson initialises a new document in *out (the caller destroys it).
 */
#ifndef SHL_SHARDING_CATALOG_TYPES_H
#define SHL_SHARDING_CATALOG_TYPES_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "sharding/chunk_version.h"
#include "sharding/sharding_types.h"

/* config.shards: {_id, host, draining?, tags?, state?, topologyTime?, replSetConfigVersion?} */
typedef struct shl_shard_type {
    char *name; /* _id */
    char *host; /* connection string: "host:port" or "set/host:port,host:port" */
    bool draining;
    char **tags;
    size_t ntags;
    bool has_state;
    int32_t state; /* 0 not shard-aware, 1 shard-aware */
    bool has_topology_time;
    shl_ts_t topology_time;
    bool has_repl_set_config_version;
    int64_t repl_set_config_version;
} shl_shard_type_t;

#define SHL_SHARD_STATE_NOT_SHARD_AWARE 0
#define SHL_SHARD_STATE_SHARD_AWARE 1

/* Errors: NoSuchKey (missing _id/host), TypeMismatch, FailedToParse (bad state), BadValue. */
int shl_shard_type_parse(const bson_t *doc, shl_shard_type_t *out, shl_status_t *st);
void shl_shard_type_to_bson(const shl_shard_type_t *t, bson_t *out);
void shl_shard_type_cleanup(shl_shard_type_t *t);

/* config.databases: {_id, primary, version: {uuid, timestamp, lastMod}} */
typedef struct shl_database_type {
    char *name;    /* _id */
    char *primary; /* primary shard's id */
    shl_database_version_t version;
} shl_database_type_t;

/* Errors (IDL "DatabaseType"): IDLFailedToParse, TypeMismatch, InvalidNamespace, BadValue. */
int shl_database_type_parse(const bson_t *doc, shl_database_type_t *out, shl_status_t *st);
void shl_database_type_to_bson(const shl_database_type_t *t, bson_t *out);
void shl_database_type_cleanup(shl_database_type_t *t);

/*
 * config.collections: {_id: ns, lastmodEpoch, lastmod: Date, timestamp, uuid, key,
 * defaultCollation?, unique, maxChunkSizeBytes?, defragmentCollection?, enableAutoMerge?,
 * noBalance, allowMigrations?, permitMigrations?, indexVersion?}. Fields this struct does
 * not model (reshardingFields, timeseriesFields, defragmentationPhase, ...) are kept in
 * 'others' and written back after the known ones.
 */
typedef struct shl_collection_type {
    char *ns; /* _id */
    bool has_epoch;
    bson_oid_t epoch;   /* lastmodEpoch */
    int64_t updated_at; /* lastmod, ms since the epoch */
    shl_ts_t timestamp;
    shl_uuid_t uuid;
    bson_t *key;               /* shard key pattern */
    bson_t *default_collation; /* NULL if none */
    bool unique;
    bool has_max_chunk_size_bytes;
    int64_t max_chunk_size_bytes;
    bool has_defragment_collection;
    bool defragment_collection;
    bool has_enable_auto_merge;
    bool enable_auto_merge;
    bool no_balance;
    bool has_allow_migrations;
    bool allow_migrations;
    bool has_permit_migrations;
    bool permit_migrations;
    bool has_index_version;
    shl_ts_t index_version;
    bson_t *others; /* NULL if none */
} shl_collection_type_t;

/* Errors (IDL "CollectionType"): IDLFailedToParse, TypeMismatch, InvalidUUID, InvalidNamespace. */
int shl_collection_type_parse(const bson_t *doc, shl_collection_type_t *out, shl_status_t *st);
void shl_collection_type_to_bson(const shl_collection_type_t *t, bson_t *out);
void shl_collection_type_cleanup(shl_collection_type_t *t);

/* shl_collection_type_version -- the collection's generation with placement 0|0. */
shl_chunk_version_t shl_collection_type_generation(const shl_collection_type_t *t);

/* One entry of a chunk's history (newest first): from 'valid_after' on, on 'shard'. */
typedef struct shl_chunk_history {
    shl_ts_t valid_after;
    char *shard;
} shl_chunk_history_t;

/*
 * config.chunks: {_id: ObjectId, uuid, min, max, shard, lastmod: Timestamp(major, minor),
 * estimatedDataSizeBytes?, jumbo? (written only when true), onCurrentShardSince?,
 * history: [{validAfter, shard}]?}. 'version' carries the collection's epoch and timestamp
 * (config.chunks stores only major/minor), supplied when parsing.
 */
typedef struct shl_chunk_type {
    bool has_id;
    bson_oid_t id;
    bool has_uuid;
    shl_uuid_t uuid;
    bson_t *min;
    bson_t *max;
    char *shard;
    shl_chunk_version_t version;
    bool has_estimated_size;
    int64_t estimated_size_bytes;
    bool jumbo;
    bool has_on_current_shard_since;
    shl_ts_t on_current_shard_since;
    shl_chunk_history_t *history;
    size_t nhistory;
} shl_chunk_type_t;

/*
 * shl_chunk_type_parse_config --
 *     Parse a config.chunks document of the collection whose generation is 'generation'.
 *     Checks as MongoDB: _id, uuid, min, max, shard and lastmod present and typed; min and
 *     max non-empty with min < max; history entries typed; onCurrentShardSince equal to
 *     the newest history entry's validAfter. Errors: NoSuchKey, TypeMismatch, BadValue,
 *     IDLFailedToParse, InvalidUUID.
 */
int shl_chunk_type_parse_config(const bson_t *doc, const shl_chunk_version_t *generation,
                                shl_chunk_type_t *out, shl_status_t *st);

/* shl_chunk_type_to_config_bson -- the config.chunks document (fields set are written). */
void shl_chunk_type_to_config_bson(const shl_chunk_type_t *c, bson_t *out);

/*
 * shl_chunk_type_parse_shard / _to_shard_bson --
 *     The shard's cached form (config.cache.chunks.<ns>): {_id: min, max, shard, lastmod,
 *     onCurrentShardSince?, history?}.
 */
int shl_chunk_type_parse_shard(const bson_t *doc, const shl_chunk_version_t *generation,
                               shl_chunk_type_t *out, shl_status_t *st);
void shl_chunk_type_to_shard_bson(const shl_chunk_type_t *c, bson_t *out);

/*
 * shl_chunk_type_validate --
 *     MongoDB's ChunkType::validate: version set, shard set, min < max, newest history entry
 *     on 'shard', onCurrentShardSince consistent. Errors: NoSuchKey, BadValue.
 */
int shl_chunk_type_validate(const shl_chunk_type_t *c, shl_status_t *st);

/* shl_chunk_type_copy -- deep copy into *dst (caller's storage). */
void shl_chunk_type_copy(const shl_chunk_type_t *src, shl_chunk_type_t *dst);

void shl_chunk_type_cleanup(shl_chunk_type_t *c);

/* shl_chunk_type_set_history -- replace the history with 'n' entries (copied). */
void shl_chunk_type_set_history(shl_chunk_type_t *c, const shl_chunk_history_t *h, size_t n);

#endif
