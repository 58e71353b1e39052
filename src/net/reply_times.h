/*
 * reply_times.h -- the times every reply of a replica-set member or router carries:
 * operationTime and $clusterTime {clusterTime, signature} (unsigned: {hash: 20 zero
 * bytes, keyId: 0} for clients authorized to advance the clock, signed otherwise).
 */
#ifndef SHL_NET_REPLY_TIMES_H
#define SHL_NET_REPLY_TIMES_H

#include <bson/bson.h>
#include <stdint.h>

/*
 * shl_reply_append_times --
 *     Append operationTime: op_time and $clusterTime with cluster_time to 'reply', each
 *     unless the reply already has it (one pass over its top level). The usual reply has
 *     neither and gets one concat of a document built once, with the two timestamps
 *     written in -- the same bytes as appending the fields one by one. Thread-safe.
 */
void shl_reply_append_times(bson_t *reply, uint64_t op_time, uint64_t cluster_time);

/*
 * shl_reply_append_signed_times --
 *     The same with a real signature: $clusterTime {clusterTime, signature: {hash (20 bytes),
 *     keyId}} (net/cluster_time.h makes them). Thread-safe.
 */
void shl_reply_append_signed_times(bson_t *reply, uint64_t op_time, uint64_t cluster_time,
                                   int64_t key_id, const uint8_t hash[20]);

#endif /* SHL_NET_REPLY_TIMES_H */
