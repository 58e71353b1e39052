/*
 * migration_throttle.c -- _secondaryThrottle (docs/design/replication.md "Sharding on
 * replica sets"): a migration asked to throttle makes its recipient wait, after each batch
 * of documents it cloned, for a write concern on its own replica set -- the one the user gave
 * with moveChunk / moveRange (writeConcern), or w: "majority" (MongoDB 6.0's default), so the
 * copy does not outrun the recipient's secondaries. A wait that times out is logged and the
 * migration goes on, as MongoDB's does. On a shard that is not a replica set nothing waits.
 *
 * And pacing by the cache (Shale's; docs/design/balancer.md "Client latency while
 * balancing"): the recipient waits before each cloned batch while its WiredTiger cache is
 * past the thresholds of migration_private.h, whatever _secondaryThrottle says.
 */
#include "base/log.h"
#include "base/options.h"
#include "db/repl_hooks.h"
#include "shard/migration_private.h"
#include "storage/oplog.h"
#include "storage/storage.h"

int
mig_throttle_parse(const bson_t *cmd, bool *on, shl_write_concern_t *wc, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    *on = false;
    memset(wc, 0, sizeof(*wc));
    wc->w_majority = true;
    wc->provenance = "clientSupplied";
    if (!bson_iter_init_find(&it, cmd, MIG_THROTTLE_FIELD)) {
        goto done;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t doc;
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&it, &len, &data);
        SHL_INVARIANT(bson_init_static(&doc, data, len));
        SHL_ERR(shl_write_concern_parse(&doc, wc, st));
        *on = true;
    } else if (BSON_ITER_HOLDS_BOOL(&it) || BSON_ITER_HOLDS_NUMBER(&it)) {
        *on = bson_iter_as_bool(&it);
    } else {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '" MIG_THROTTLE_FIELD "' is the wrong type, expected a boolean or a "
                 "write concern document");
    }
done:
    return ret;
}

void
mig_throttle_copy(const bson_t *from, bson_t *to)
{
    bson_iter_t it;

    if (bson_iter_init_find(&it, from, MIG_THROTTLE_FIELD)) {
        bson_append_iter(to, MIG_THROTTLE_FIELD, -1, &it);
    }
}

int
mig_throttle_wait(shard_state_t *s, shl_op_ctx_t *op, const shl_write_concern_t *wc,
                  shl_status_t *st)
{
    int ret = 0;
    uint64_t top = 0;
    shl_write_concern_t bounded = *wc;

    SHL_ERR(shl_oplog_top(s->svc->storage, &top, st));
    if (bounded.wtimeout_ms <= 0) {
        bounded.wtimeout_ms = MIG_REMOTE_TIMEOUT_MS;
    }
    ret = shl_db_repl_wait_write_concern(s->svc, op, &bounded, top, st);
    if (ret == SHL_CODE_WRITE_CONCERN_TIMEOUT) {
        SHL_LOG_WARNING(SHARDING, 4200230,
                        "secondaryThrottle on, but the cloned batch did not replicate in time; "
                        "continuing",
                        "error", BCON_UTF8(st->reason));
        shl_status_clear(st);
        ret = 0;
    }
done:
    return ret;
}

bool
mig_cache_busy(const shl_storage_cache_stats_t *cs, bool writes)
{
    return cs->bytes_max > 0 &&
           ((writes && cs->bytes_dirty * 100 >= cs->bytes_max * MIG_PACE_DIRTY_PCT) ||
            cs->bytes_in_use * 100 >= cs->bytes_max * MIG_PACE_USED_PCT);
}

/* Whether this node's cache is past the pacing thresholds; false when it cannot be read. */
static bool
cache_busy(shard_state_t *s, bool writes)
{
    shl_storage_cache_stats_t cs;
    shl_status_t st = SHL_STATUS_INIT;

    return shl_storage_cache_stats(s->svc->storage, &cs, &st) == 0 && mig_cache_busy(&cs, writes);
}

int
mig_cache_pace(shard_state_t *s, shl_op_ctx_t *op, bool writes, int64_t *waited_ms,
               shl_status_t *st)
{
    int ret = 0;
    int64_t waited = 0;

    while (shl_opt_bool(SHL_OPT_migrationCachePacing) && waited < MIG_PACE_MAX_MS &&
           cache_busy(s, writes)) {
        SHL_ERR(mig_sleep(op, MIG_PACE_STEP_MS, st));
        waited += MIG_PACE_STEP_MS;
    }
done:
    *waited_ms += waited;
    return ret;
}
