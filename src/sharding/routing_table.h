/*
 * routing_table.h -- the "chunk manager" (seeds/000 "The routing table cache", "The
 * historical routing table"): an immutable, refcounted snapshot of one sharded collection's
 * chunks, sorted by min and covering MinKey..MaxKey without gaps or overlaps. It answers
 * which chunk owns a shard key, which shards a key range touches (now, or at a cluster time
 * from chunk history), each shard's version and the collection version. A refresh builds a
 * new table -- from scratch on a generation change, incrementally from the old table plus
 * the chunks that changed on a placement change -- and swaps it in; readers keep their
 * reference. The plan_* helpers compute the chunks a split, merge or move writes, with
 * seeds/000's version bumps, so the config server and the tests share one implementation.
 *
 * Thread-safety: a table is never modified after it is built, so any number of threads may
 * read it; ref/release are atomic. Strings and bound views returned by accessors are valid
 * while the caller holds a reference.
 */
#ifndef SHL_SHARDING_ROUTING_TABLE_H
#define SHL_SHARDING_ROUTING_TABLE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "bson/collation.h"
#include "sharding/catalog_types.h"
#include "sharding/chunk_version.h"
#include "sharding/shard_key.h"

typedef struct shl_routing_table shl_routing_table_t;

/* What a table is built for: the collection entry's fields the router needs. */
typedef struct shl_routing_table_info {
    const char *ns;
    shl_uuid_t uuid;
    const bson_t *key_pattern;
    bool unique;
    bool allow_migrations;          /* config.collections allowMigrations (default true) */
    shl_chunk_version_t generation; /* epoch + timestamp; major/minor ignored */
    const bson_t *default_collation; /* config.collections defaultCollation, or NULL */
} shl_routing_table_info_t;

/* shl_routing_table_info_from_collection -- fill 'info' from a config.collections entry
 * (borrowing its strings and key). */
void shl_routing_table_info_from_collection(const shl_collection_type_t *coll,
                                            shl_routing_table_info_t *info);

/*
 * shl_routing_table_new --
 *     Build a table from all of a collection's chunks (any order). Chunks that overlap keep
 *     the newer version, as MongoDB flattens a refresh. Errors: BadValue (invalid key
 *     pattern, bound of the wrong width), ConflictingOperationInProgress (a chunk of another
 *     generation; a gap or overlap; first min not all MinKey or last max not all MaxKey --
 *     MongoDB's texts). On success *out holds one reference.
 */
int shl_routing_table_new(const shl_routing_table_info_t *info, const shl_chunk_type_t *chunks,
                          size_t n, shl_routing_table_t **out, shl_status_t *st);

/*
 * shl_routing_table_update --
 *     The incremental refresh: a new table equal to 'old' with 'changed' applied (each
 *     changed chunk replaces the old chunks it overlaps). Every changed chunk must carry the
 *     old table's generation and a version no older than its collection version (a refresh
 *     asks for lastmod >= the cached collection version). Errors: as _new, plus Location626840
 *     for an older changed chunk. 'old' is not modified; on success *out holds one reference.
 */
int shl_routing_table_update(const shl_routing_table_t *old, const shl_chunk_type_t *changed,
                             size_t n, shl_routing_table_t **out, shl_status_t *st);

/* shl_routing_table_ref / _release -- take / drop a reference; the last release frees. */
shl_routing_table_t *shl_routing_table_ref(shl_routing_table_t *rt);
void shl_routing_table_release(shl_routing_table_t *rt);

/* ---- the collection ---- */

const char *shl_routing_table_ns(const shl_routing_table_t *rt);
const shl_uuid_t *shl_routing_table_uuid(const shl_routing_table_t *rt);
const shl_shard_key_pattern_t *shl_routing_table_key_pattern(const shl_routing_table_t *rt);
bool shl_routing_table_unique(const shl_routing_table_t *rt);
/* shl_routing_table_default_collator -- the collection's default collation (borrowed, lives
 * as long as 'rt'; NULL: simple). */
const shl_collator_t *shl_routing_table_default_collator(const shl_routing_table_t *rt);
bool shl_routing_table_allow_migrations(const shl_routing_table_t *rt);

/* shl_routing_table_collection_version -- the highest chunk version. */
shl_chunk_version_t shl_routing_table_collection_version(const shl_routing_table_t *rt);

/* ---- shards ---- */

/* Shard names known to the table (owners now or in chunk history), sorted; an index
 * 0..nshard_names-1 names one. */
size_t shl_routing_table_nshard_names(const shl_routing_table_t *rt);
const char *shl_routing_table_shard_name(const shl_routing_table_t *rt, size_t i);

/* shl_routing_table_nshards_owning -- how many shards own at least one chunk now. */
size_t shl_routing_table_nshards_owning(const shl_routing_table_t *rt);

/*
 * shl_routing_table_shard_version --
 *     The shard version of 'shard': the generation with the highest placement of its
 *     chunks, or 0|0 if it owns none (also for an unknown shard). This is what a router
 *     attaches as `shardVersion` when it targets that shard.
 */
shl_chunk_version_t shl_routing_table_shard_version(const shl_routing_table_t *rt,
                                                    const char *shard);

/* shl_routing_table_shard_valid_after -- the newest validAfter of the shard's chunks'
 * current placement (when its current set of chunks became valid); Timestamp(0, 0) if
 * none. */
shl_ts_t shl_routing_table_shard_valid_after(const shl_routing_table_t *rt, const char *shard);

/* ---- chunks ---- */

size_t shl_routing_table_nchunks(const shl_routing_table_t *rt);

/* shl_routing_table_chunk_bounds -- static views of chunk i's min and max (not to be
 * destroyed; valid while the reference is held). */
void shl_routing_table_chunk_bounds(const shl_routing_table_t *rt, size_t i, bson_t *min,
                                    bson_t *max);

const char *shl_routing_table_chunk_shard(const shl_routing_table_t *rt, size_t i);
shl_chunk_version_t shl_routing_table_chunk_version(const shl_routing_table_t *rt, size_t i);
bool shl_routing_table_chunk_jumbo(const shl_routing_table_t *rt, size_t i);

/* shl_routing_table_chunk_to_type -- chunk i as a config.chunks entry (a deep copy in the
 * caller's storage; shl_chunk_type_cleanup it). */
void shl_routing_table_chunk_to_type(const shl_routing_table_t *rt, size_t i,
                                     shl_chunk_type_t *out);

/*
 * shl_routing_table_find_chunk --
 *     The index of the chunk with min <= key < max. 'key' is a full shard key (values in
 *     pattern order). Errors: ShardKeyNotFound "Cannot target single shard using key <key>
 *     for namespace <ns>".
 */
int shl_routing_table_find_chunk(const shl_routing_table_t *rt, const bson_t *key, size_t *idx,
                                 shl_status_t *st);

/*
 * shl_routing_table_shard_for_key --
 *     The shard that owns 'key' -- now if 'at' is NULL, else at cluster time *at, read from
 *     the chunk's history (the newest entry with validAfter <= *at). Errors: ShardKeyNotFound,
 *     StaleChunkHistory "Cannot find shardId the chunk belonged to at cluster time <ts>".
 */
int shl_routing_table_shard_for_key(const shl_routing_table_t *rt, const bson_t *key,
                                    const shl_ts_t *at, const char **shard, shl_status_t *st);

/*
 * shl_routing_table_shards_for_range --
 *     The distinct shards owning chunks that overlap [min, max) -- or [min, max] with
 *     'max_inclusive' -- now, or at *at. Fills 'shards' (room for
 *     shl_routing_table_nshard_names(rt) entries) in name order and sets *n. Errors:
 *     StaleChunkHistory when 'at' predates a chunk's history.
 */
int shl_routing_table_shards_for_range(const shl_routing_table_t *rt, const bson_t *min,
                                       const bson_t *max, bool max_inclusive, const shl_ts_t *at,
                                       const char **shards, size_t *n, shl_status_t *st);

/* ---- metadata operations, as the chunks they write ---- */

/*
 * shl_routing_table_plan_split --
 *     Split the chunk whose min is 'chunk_min' at 'points' (strictly increasing, inside the
 *     chunk). *out receives npoints + 1 new chunks (caller frees each with
 *     shl_chunk_type_cleanup and the array with bson_free): same shard and history as the
 *     original, versions <Ecv, Tcv, Mcv, mcv + 1..n>. Errors (MongoDB's): InvalidOptions
 *     "Split key ... not contained within chunk ...", "Split keys must be specified in
 *     strictly increasing order...", "Split on lower bound of chunk ..."; BadValue for a
 *     point that is not a valid shard key; ShardKeyNotFound when no chunk starts at
 *     'chunk_min'.
 */
int shl_routing_table_plan_split(const shl_routing_table_t *rt, const bson_t *chunk_min,
                                 const bson_t *const *points, size_t npoints,
                                 shl_chunk_type_t **out, size_t *nout, shl_status_t *st);

/*
 * shl_routing_table_plan_merge --
 *     Merge the chunks exactly covering [min, max) (at least two, all on one shard) into
 *     one: version <Ecv, Tcv, Mcv, mcv + 1>, history [{validAfter: valid_after, shard}];
 *     'valid_after' SHL_TS_NULL takes MongoDB's: the newest validAfter of the merged chunks.
 *     *out receives the one new chunk. Errors: IllegalOperation (bounds not on chunk
 *     boundaries, chunks on different shards, a single chunk).
 */
int shl_routing_table_plan_merge(const shl_routing_table_t *rt, const bson_t *min,
                                 const bson_t *max, shl_ts_t valid_after, shl_chunk_type_t *out,
                                 shl_status_t *st);

/*
 * shl_routing_table_plan_move --
 *     Move the chunk whose min is 'chunk_min' to 'to_shard' at cluster time 'valid_after':
 *     the moved chunk gets <Ecv, Tcv, Mcv + 1, 0> and the history entry {valid_after,
 *     to_shard} in front; the donor's control chunk (its lowest other chunk), if any, gets
 *     <Ecv, Tcv, Mcv + 1, 1>. *out receives 1 or 2 chunks (free as for plan_split).
 *     Errors: ShardKeyNotFound (no such chunk), IllegalOperation (already on 'to_shard').
 */
int shl_routing_table_plan_move(const shl_routing_table_t *rt, const bson_t *chunk_min,
                                const char *to_shard, shl_ts_t valid_after, shl_chunk_type_t **out,
                                size_t *nout, shl_status_t *st);

/* shl_chunk_types_free -- cleanup 'n' chunks and free the array (plan_* results). */
void shl_chunk_types_free(shl_chunk_type_t *chunks, size_t n);

#endif
