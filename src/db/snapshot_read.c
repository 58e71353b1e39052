/*
 * snapshot_read.c -- readConcern {level: "snapshot"} outside transactions on a data node
 * (db_private.h; docs/design/snapshot_reads.md): the time a find, aggregate or distinct reads
 * at, the wait until that time is committed here, and the atClusterTime its reply carries.
 * The read itself is an ordinary plan over a storage transaction with that read_timestamp,
 * which the cursor keeps across getMores.
 */
#include <inttypes.h>
#include <stdio.h>

#include "db/db_private.h"
#include "db/read_concern_wait.h"

int
db_snapshot_read_prepare(shl_op_ctx_t *op, db_read_concern_t *rc, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    uint64_t ts, oldest;

    if (!node->repl_set) {
        SHL_FAIL(st, SHL_CODE_NOT_A_REPLICA_SET,
                 "node needs to be a replica set member to use readConcern: snapshot");
    }
    if (rc->at_cluster_time != 0) {
        ts = rc->at_cluster_time;
    } else {
        /* MongoDB reads at the newest majority-committed time; on a set of one that is the
         * no-holes point (see db_read_timestamp). At least afterClusterTime. */
        ts = shl_storage_all_durable(node->eng);
        if (rc->after_cluster_time > ts) {
            ts = rc->after_cluster_time;
        }
    }
    if (ts == 0) {
        SHL_FAIL(st, SHL_CODE_SNAPSHOT_UNAVAILABLE, "No committed OpTime for snapshot read");
    }
    /* Fail before waiting: a time storage no longer keeps cannot come back. */
    oldest = shl_storage_oldest_ts(node->eng);
    if (oldest != 0 && ts < oldest) {
        SHL_FAIL(st, SHL_CODE_SNAPSHOT_TOO_OLD,
                 "Read timestamp Timestamp(%" PRIu32 ", %" PRIu32
                 ") is older than the oldest available timestamp.",
                 SHL_TS_SECS(ts), SHL_TS_INC(ts));
    }
    SHL_ERR(db_rc_wait_committed(op, ts, st));
    rc->at_cluster_time = ts;
done:
    return ret;
}

void
db_snapshot_append_time(const db_read_concern_t *rc, bson_t *reply)
{
    if (rc->level == DB_RC_SNAPSHOT && rc->at_cluster_time != 0) {
        bson_append_timestamp(reply, "atClusterTime", -1, SHL_TS_SECS(rc->at_cluster_time),
                              SHL_TS_INC(rc->at_cluster_time));
    }
}
