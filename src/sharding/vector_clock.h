/*
 * vector_clock.h -- the vector clock (DESIGN.md section 7; seeds/000 "Vector clock"): three
 * logical times that only move forward -- ClusterTime (ticked by data-node primaries on
 * writes), ConfigTime (the config server's time of the newest sharding metadata) and
 * TopologyTime (the config server's time of the newest change to the set of shards), with
 * ClusterTime >= ConfigTime >= TopologyTime. Processes gossip them: every reply from a
 * cluster node carries $clusterTime, and the config server's carry $configTime and
 * $topologyTime. A node that sees TopologyTime advance knows its shard registry is stale.
 *
 * Thread-safety: all functions are lock-free and may be called from any thread.
 */
#ifndef SHL_SHARDING_VECTOR_CLOCK_H
#define SHL_SHARDING_VECTOR_CLOCK_H

#include <bson/bson.h>
#include <stdatomic.h>
#include <stdint.h>

typedef enum shl_vc_component {
    SHL_VC_CLUSTER_TIME,
    SHL_VC_CONFIG_TIME,
    SHL_VC_TOPOLOGY_TIME,
    SHL_VC_NCOMPONENTS,
} shl_vc_component_t;

/* Bits returned by shl_vector_clock_observe. */
#define SHL_VC_ADVANCED(c) (1u << (c))

/* Times are packed Timestamps: seconds << 32 | increment. Zero means unknown. */
typedef struct shl_vector_clock {
    atomic_uint_least64_t t[SHL_VC_NCOMPONENTS];
} shl_vector_clock_t;

void shl_vector_clock_init(shl_vector_clock_t *vc);

/* shl_vector_clock_get -- the component's current value (0 if never set). */
uint64_t shl_vector_clock_get(const shl_vector_clock_t *vc, shl_vc_component_t c);

/* shl_vector_clock_advance -- raise the component to 'ts' if it is newer; true if it moved. */
bool shl_vector_clock_advance(shl_vector_clock_t *vc, shl_vc_component_t c, uint64_t ts);

/*
 * shl_vector_clock_observe --
 *     Advance from the gossip fields of a received message ($clusterTime.clusterTime,
 *     $configTime, $topologyTime); the SHL_VC_ADVANCED bits of the components that moved.
 *     Malformed fields are ignored.
 */
unsigned shl_vector_clock_observe(shl_vector_clock_t *vc, const bson_t *msg);

/* shl_vector_clock_append_config_gossip -- append $configTime and $topologyTime (those that
 * are known) to 'doc'. */
void shl_vector_clock_append_config_gossip(const shl_vector_clock_t *vc, bson_t *doc);

#endif
