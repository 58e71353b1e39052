/*
 * vector_clock.h -- the vector clock (DESIGN.md section 7; seeds/000 "Vector clock"): three
 * logical times that only move forward -- ClusterTime (ticked by data-node primaries on
 * writes), ConfigTime (the config server's time of the newest sharding metadata) and
 * TopologyTime (the config server's time of the newest change to the set of shards), with
 * ClusterTime >= ConfigTime >= TopologyTime (advancing a component raises the ones it lags
 * first; shl_vector_clock_now reads a snapshot that keeps the order). Processes gossip them
 * (docs/design/vector_clock.md): $clusterTime with everyone, $configTime and $topologyTime
 * only between cluster processes, on every internal request and reply. A node that sees
 * TopologyTime advance knows its shard registry is stale. On a data node ClusterTime is
 * the storage engine's clock; this structure then carries ConfigTime and TopologyTime.
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

/* A snapshot of all components (MongoDB's VectorTime). */
typedef struct shl_vector_time {
    uint64_t t[SHL_VC_NCOMPONENTS];
} shl_vector_time_t;

void shl_vector_clock_init(shl_vector_clock_t *vc);

/* shl_vector_clock_now -- all components at once: out->t[CLUSTER] >= [CONFIG] >= [TOPOLOGY]
 * (for components this clock tracks). Lock-free. */
void shl_vector_clock_now(const shl_vector_clock_t *vc, shl_vector_time_t *out);

/* shl_vector_clock_get -- the component's current value (0 if never set). */
uint64_t shl_vector_clock_get(const shl_vector_clock_t *vc, shl_vc_component_t c);

/* shl_vector_clock_advance -- raise the component to 'ts' if it is newer (and the
 * components it lags to at least 'ts'); true if the component itself moved. */
bool shl_vector_clock_advance(shl_vector_clock_t *vc, shl_vc_component_t c, uint64_t ts);

/*
 * shl_vector_clock_observe --
 *     Advance from the gossip fields of a received message ($clusterTime.clusterTime,
 *     $configTime, $topologyTime); the SHL_VC_ADVANCED bits of the components that moved.
 *     Malformed fields and times past the advance limit (maxAcceptableLogicalClockDriftSecs
 *     ahead of the wall clock) are ignored.
 */
unsigned shl_vector_clock_observe(shl_vector_clock_t *vc, const bson_t *msg);

/* shl_vector_clock_append_config_gossip -- append $configTime and $topologyTime (those that
 * are known) to 'doc'. */
void shl_vector_clock_append_config_gossip(const shl_vector_clock_t *vc, bson_t *doc);

/*
 * shl_vector_clock_append_internal_gossip --
 *     What a cluster process puts on a request to another one: $clusterTime (dummy-signed,
 *     as between processes authorized to advance the clock) with 'cluster_time' (0: this
 *     clock's own; never below its ConfigTime), $configTime and $topologyTime -- each unless
 *     'doc' already has it.
 */
void shl_vector_clock_append_internal_gossip(const shl_vector_clock_t *vc, uint64_t cluster_time,
                                             bson_t *doc);

#endif
