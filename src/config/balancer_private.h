/*
 * balancer_private.h -- the balancer of the config server (docs/design/balancer.md; seeds/000
 * "Auto-splitting and auto-balancing" → "Auto-balancing", "What happens during a balancer
 * round"; seeds/004): the pure policy that picks a round's migrations (balancer_policy.c) and
 * the background service that runs rounds (configsvr_balancer.c). Kept apart from
 * config_private.h so the balancer's declarations live in one place. Not used outside
 * src/config.
 */
#ifndef SHL_CONFIG_BALANCER_PRIVATE_H
#define SHL_CONFIG_BALANCER_PRIVATE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "net/command.h"
#include "net/op_context.h"
#include "sharding/catalog_types.h"

/* ---- policy (pure; balancer_policy.c) ---- */

/* One chunk of a collection as the policy sees it, in shard key order. */
typedef struct cfg_bal_chunk {
    const char *shard; /* owner (borrowed) */
    const char *zone;  /* the zone wholly containing the chunk, "" for none (borrowed) */
    bool jumbo;        /* never a candidate */
    int64_t load;      /* the load policy's decayed operation count (0 otherwise) */
} cfg_bal_chunk_t;

/* Why a migration was chosen, in the policy's order of priority. */
typedef enum cfg_bal_reason {
    CFG_BAL_DRAINING,  /* the owner is being removed */
    CFG_BAL_ZONE,      /* the owner is outside the chunk's zone */
    CFG_BAL_IMBALANCE, /* the owner holds more than the zone's ideal chunk count */
} cfg_bal_reason_t;

/* A chosen migration: chunks[chunk] moves from shards[from] to shards[to]. */
typedef struct cfg_bal_move {
    size_t chunk;
    size_t from, to;
    cfg_bal_reason_t reason;
} cfg_bal_move_t;

/* cfg_bal_reason_name -- "draining", "zoneViolation", "chunksImbalance". */
const char *cfg_bal_reason_name(cfg_bal_reason_t r);

/*
 * cfg_balancer_policy --
 *     The migrations of one collection for this round, as the seeds' BalancerPolicy chooses
 *     them: first one chunk off each draining shard, then chunks outside their zone, then,
 *     per zone ("" is the key space no zone covers), from the shard holding the most chunks
 *     of the zone to the one holding the fewest, while the donor holds more than the ideal
 *     count ceil(chunks of the zone / shards of the zone that are not draining) and the
 *     recipient fewer. Recipients are never draining and always in the chunk's zone. A shard
 *     takes part in at most one migration per round: 'busy' (nshards entries; shards already
 *     in a migration of this round, e.g. for another collection) is read and updated. Jumbo
 *     chunks never move. Writes at most 'max_out' moves to 'out' and returns their number.
 *     Pure: no I/O, no locks.
 */
size_t cfg_balancer_policy(const shl_shard_type_t *shards, size_t nshards,
                           const cfg_bal_chunk_t *chunks, size_t nchunks, bool *busy,
                           cfg_bal_move_t *out, size_t max_out);

/*
 * cfg_balancer_policy_data_size --
 *     MongoDB 7.0's policy, the default: draining shards and zone violations as
 *     cfg_balancer_policy, then per zone by data size: 'sizes' (nshards entries) is the
 *     collection's bytes on each shard, orphans excluded. The most loaded free shard holding a
 *     movable chunk of the zone gives its first such chunk to the least loaded free shard of the
 *     zone while the donor is above the ideal (total / shards of the zone that are not
 *     draining), the recipient below it, and they differ by at least 3 * 'chunk_size'. The
 *     caller moves about one chunk size starting at that chunk's min (moveRange with min
 *     only), so a move never overshoots. A collection smaller than three chunk sizes never
 *     moves. Same 'busy', 'out' and return as cfg_balancer_policy. Pure.
 */
size_t cfg_balancer_policy_data_size(const shl_shard_type_t *shards, size_t nshards,
                                     const cfg_bal_chunk_t *chunks, size_t nchunks,
                                     const int64_t *sizes, int64_t chunk_size, bool *busy,
                                     cfg_bal_move_t *out, size_t max_out);

/*
 * cfg_balancer_policy_load -- Shale's load policy (config.settings balancer policy: "load";
 *     docs/design/balancer.md "Load"): draining and zones as cfg_balancer_policy, then load
 *     (the sum of chunks[].load per shard, over chunks outside zones): while the busiest free
 *     shard carries more than CFG_BAL_LOAD_SHARE percent of its load plus the least busy
 *     free shard's, and at least CFG_BAL_LOAD_MIN, it gives the chunk whose load L brings
 *     the two closest (the smallest |difference - 2 L|, 0 < L < difference). When no chunk
 *     qualifies, or splitting the busiest shard's hottest chunk (load H) at its load median
 *     and moving a half would bring them closer than that move (|difference - H| smaller),
 *     *split_chunk (nchunks otherwise) names that chunk and nothing more is planned. Same
 *     'busy', 'out' and return as cfg_balancer_policy. Pure.
 */
#define CFG_BAL_LOAD_SHARE 55
#define CFG_BAL_LOAD_MIN 64
size_t cfg_balancer_policy_load(const shl_shard_type_t *shards, size_t nshards,
                                const cfg_bal_chunk_t *chunks, size_t nchunks, bool *busy,
                                cfg_bal_move_t *out, size_t max_out, size_t *split_chunk);

/*
 * cfg_balancer_policy_load_total -- the load step of cfg_balancer_policy_load alone, over the
 *     chunks of every collection the balancer may move (concatenated in any order: a chunk
 *     is named by its index, the caller maps it back to its collection), so the busiest and
 *     the least busy shard are judged by their total load across collections and the chunk
 *     moved (or split) may belong to any collection on the busiest shard. 'busy' as
 *     cfg_balancer_policy (shards already in a draining or zone migration of this round take
 *     no part). Pure.
 */
size_t cfg_balancer_policy_load_total(const shl_shard_type_t *shards, size_t nshards,
                                      const cfg_bal_chunk_t *chunks, size_t nchunks, bool *busy,
                                      cfg_bal_move_t *out, size_t max_out, size_t *split_chunk);

/*
 * cfg_balancer_in_window --
 *     Whether 'now_min' (minutes since local midnight) falls in the balancer's activeWindow
 *     {start: "HH:MM", stop: "HH:MM"} (local time of the config server, as MongoDB's): start
 *     inclusive, stop exclusive; a window whose stop is before its start spans midnight; start
 *     equal to stop is always on. Errors: BadValue for a time that is not "HH:MM".
 */
int cfg_balancer_in_window(const char *start, const char *stop, int now_min, bool *in,
                           shl_status_t *st);

/* ---- the service (configsvr_balancer.c) ---- */

/*
 * cfg_balancer_start / cfg_balancer_stop --
 *     Start the balancer thread (once, at config server start-up; it creates the capped
 *     config.actionlog and then runs a round every 10 s -- 1 s after a round that moved
 *     something -- while config.settings {_id: "balancer"} says the balancer is on; the fail
 *     point overrideBalanceRoundInterval {intervalMs} overrides the interval). _stop wakes
 *     it, waits for the round in progress and joins it (shutdown). Errors: the thread's start.
 */
int cfg_balancer_start(shl_status_t *st);
void cfg_balancer_stop(void);
/* cfg_balancer_kick -- wake the balancer thread to look again now (a step-up or down). */
void cfg_balancer_kick(void);

/* _configsvrBalancerStart / _configsvrBalancerStop / _configsvrBalancerStatus. */
void cfg_register_balancer_commands(shl_command_registry_t *reg);

/* cfg_mark_chunk_jumbo -- flag the chunk exactly [min, max) of 'ns' jumbo (minor version bump,
 * changelog markJumbo), as _configsvrMarkChunkJumbo. Takes the namespace lock. Errors: the
 * chunk is gone (InvalidOptions), storage. */
int cfg_mark_chunk_jumbo(const char *ns, const bson_t *min, const bson_t *max, shl_status_t *st);

/* cfg_register_coll_balancing_commands -- _configsvrConfigureCollectionBalancing
 * (configsvr_coll_balancing.c); registered by cfg_register_balancer_commands. */
void cfg_register_coll_balancing_commands(shl_command_registry_t *reg);

/*
 * cfg_move_range --
 *     _configsvrMoveRange's body (configsvr_chunks.c) for callers inside the config server:
 *     'cmd' is the command document ({_configsvrMoveRange: ns, toShard, bounds, ...}); 'op'
 *     may be NULL. Blocks until the donor has finished the migration. Errors: as the command.
 */
int cfg_move_range(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st);

/*
 * cfg_split_chunk --
 *     _configsvrSplitChunk's body (configsvr_chunks.c) for callers inside the config server
 *     ({_configsvrSplitChunk: ns, middle | find | bounds}); 'op' may be NULL. Errors: as the
 *     command.
 */
int cfg_split_chunk(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st);

/* cfg_extend_bound -- 'bound' completed with MinKey for the pattern's fields it lacks
 * (configsvr_zones.c); 'out' is initialised here. */
void cfg_extend_bound(const bson_t *bound, const bson_t *pattern, bson_t *out);

#endif
