/*
 * chunk_splitter.h -- auto-split on a shard (seeds/000 "Auto-splitting": the
 * ChunkWritesTracker and the ChunkSplitter; docs/design/balancer.md "Auto-split").
 * Writes add their document sizes to a per-chunk counter kept in the filtering metadata;
 * a chunk that took more than a fifth of the maximum chunk size is queued for the
 * splitter's one thread, which asks splitVector for split points, commits them on the
 * config server (_configsvrCommitChunkSplit) and refreshes. Private to src/shard.
 */
#ifndef SHL_SHARD_CHUNK_SPLITTER_H
#define SHL_SHARD_CHUNK_SPLITTER_H

#include <bson/bson.h>
#include <stdbool.h>

#include "shard/shard_private.h"

/* MongoDB's ChunkWritesTracker::kSplitTestFactor: a chunk is tested for a split once the
 * bytes written to it since its last split reach maxChunkSizeBytes / 5. */
#define SHARD_SPLIT_TEST_FACTOR 5

/* At most this many chunks wait for the splitter; more are dropped (their counters keep
 * growing and queue them again on a later write). */
#define SHARD_SPLITTER_QUEUE_MAX 64

/* shard_splitter_init / _start / _stop -- set up the state (in shl_shard_init, before the
 * hooks run), start the thread (idle until the shard is aware), stop and join it
 * (shutdown; waits for the split in progress; the write path then sees it disabled). */
void shard_splitter_init(shard_state_t *s);
void shard_splitter_start(shard_state_t *s);
void shard_splitter_stop(shard_state_t *s);
/* shard_splitter_destroy -- free the state (after the node stopped: no write runs). */
void shard_splitter_destroy(shard_state_t *s);

/*
 * shard_splitter_tracking --
 *     Whether writes to 'ns' are tracked: auto-split enabled (config.settings {_id:
 *     "autosplit", enabled}) and 'ns' a user collection this shard knows sharded. Cheap:
 *     no I/O, takes s->mu briefly. Called inside each write's storage transaction.
 */
bool shard_splitter_tracking(shard_state_t *s, const char *ns);

/*
 * shard_splitter_note_write --
 *     The op observer's part: 'post' (an inserted or updated document of 'ns'; NULL for a
 *     delete: nothing) adds its size to the counter of the chunk holding it when this shard
 *     owns that chunk; crossing the threshold queues the chunk once (the counter restarts at
 *     zero, as MongoDB's does when a split task begins). Never blocks on I/O.
 */
void shard_splitter_note_write(shard_state_t *s, const char *ns, const bson_t *post);

/*
 * shard_splitter_meta_init / _carry_over / _cleanup --
 *     The counters of a new metadata object (one per chunk, zero); copy the counters of the
 *     chunks 'old' and 'm' share unchanged (same bounds, same shard), so a refresh that did
 *     not touch a chunk keeps what it had counted; free them.
 */
void shard_splitter_meta_init(shard_coll_meta_t *m);
void shard_splitter_carry_over(const shard_coll_meta_t *old, shard_coll_meta_t *m);
void shard_splitter_meta_cleanup(shard_coll_meta_t *m);

/*
 * The load policy's counters (docs/design/balancer.md "Load"): writes count in
 * shard_splitter_note_write; shard_load_note_read counts a document a read examined (the
 * orphan filter's call, or the unversioned reads' counting filter) in its chunk's counter --
 * one in 4 per thread, with weight 4 -- only while config.settings
 * balancer policy is "load" (else one atomic load). The splitter thread decays the counters
 * by 1/4 each second. shard_load_register adds _shardsvrGetChunkLoad {ns} ->
 * {chunks: [{min, max, load, loadMedian?}]} (the chunks this shard owns; loadMedian: the
 * median of the shard keys of sampled operations, one in 4 while the policy is "load", the
 * last 33 kept per chunk, when it lies strictly inside the chunk).
 */
void shard_load_note_read(shard_coll_meta_t *m, const bson_t *doc);
/* shard_load_counting -- whether reads are counted now (the policy is "load"): one atomic
 * load, for the unversioned reads' filter (collection_metadata.c). */
bool shard_load_counting(shard_state_t *s);
void shard_load_register(shl_command_registry_t *reg);

/* shard_splitter_server_status -- shardingStatistics' autoSplit fields. */
void shard_splitter_server_status(shard_state_t *s, bson_t *section);

#endif
