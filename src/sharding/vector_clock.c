/*
 * vector_clock.c -- see vector_clock.h.
 */
#include "bson/bson_iter.h"
#include "sharding/vector_clock.h"

#include "base/clock.h"
#include "net/cluster_time.h"

#include <string.h>

void
shl_vector_clock_init(shl_vector_clock_t *vc)
{
    for (int i = 0; i < SHL_VC_NCOMPONENTS; i++) {
        atomic_init(&vc->t[i], 0);
    }
}

uint64_t
shl_vector_clock_get(const shl_vector_clock_t *vc, shl_vc_component_t c)
{
    return atomic_load(&((shl_vector_clock_t *)(uintptr_t)vc)->t[c]);
}

static bool
raise_to(shl_vector_clock_t *vc, shl_vc_component_t c, uint64_t ts)
{
    uint64_t cur = atomic_load(&vc->t[c]);

    while (ts > cur) {
        if (atomic_compare_exchange_weak(&vc->t[c], &cur, ts)) {
            return true;
        }
    }
    return false;
}

bool
shl_vector_clock_advance(shl_vector_clock_t *vc, shl_vc_component_t c, uint64_t ts)
{
    /* The components a component lags move first (ClusterTime >= ConfigTime >=
     * TopologyTime), so a reader going the other way (shl_vector_clock_now) never sees the
     * order broken. */
    for (int i = SHL_VC_CLUSTER_TIME; i < (int)c; i++) {
        raise_to(vc, (shl_vc_component_t)i, ts);
    }
    return raise_to(vc, c, ts);
}

void
shl_vector_clock_now(const shl_vector_clock_t *vc, shl_vector_time_t *out)
{
    for (int i = SHL_VC_NCOMPONENTS - 1; i >= 0; i--) {
        out->t[i] = shl_vector_clock_get(vc, (shl_vc_component_t)i);
    }
}

/* A gossiped time, unless malformed or past the advance limit (such a time from a cluster
 * process is ignored rather than spread: net/cluster_time.h). */
static bool
read_ts(const bson_iter_t *it, uint64_t *out)
{
    uint32_t t, i;
    shl_status_t st = SHL_STATUS_INIT;

    if (!BSON_ITER_HOLDS_TIMESTAMP(it)) {
        return false;
    }
    bson_iter_timestamp(it, &t, &i);
    *out = ((uint64_t)t << 32) | i;
    return shl_cluster_time_check_drift(*out, shl_clock_wall_ms(), &st) == 0;
}

unsigned
shl_vector_clock_observe(shl_vector_clock_t *vc, const bson_t *msg)
{
    bson_iter_t it, sub;
    unsigned moved = 0;
    uint64_t ts;

    if (!bson_iter_init(&it, msg)) {
        return 0;
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (k[0] != '$') {
            continue;
        }
        if (strcmp(k, "$clusterTime") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it) &&
            bson_iter_recurse(&it, &sub) && bson_iter_find(&sub, "clusterTime") &&
            read_ts(&sub, &ts) && shl_vector_clock_advance(vc, SHL_VC_CLUSTER_TIME, ts)) {
            moved |= SHL_VC_ADVANCED(SHL_VC_CLUSTER_TIME);
        } else if (strcmp(k, "$configTime") == 0 && read_ts(&it, &ts) &&
                   shl_vector_clock_advance(vc, SHL_VC_CONFIG_TIME, ts)) {
            moved |= SHL_VC_ADVANCED(SHL_VC_CONFIG_TIME);
        } else if (strcmp(k, "$topologyTime") == 0 && read_ts(&it, &ts) &&
                   shl_vector_clock_advance(vc, SHL_VC_TOPOLOGY_TIME, ts)) {
            moved |= SHL_VC_ADVANCED(SHL_VC_TOPOLOGY_TIME);
        }
    }
    return moved;
}

void
shl_vector_clock_append_config_gossip(const shl_vector_clock_t *vc, bson_t *doc)
{
    shl_vector_time_t now;
    uint64_t cfg, top;

    shl_vector_clock_now(vc, &now);
    cfg = now.t[SHL_VC_CONFIG_TIME];
    top = now.t[SHL_VC_TOPOLOGY_TIME];

    if (cfg != 0 && !bson_has_field(doc, "$configTime")) {
        BSON_APPEND_TIMESTAMP(doc, "$configTime", (uint32_t)(cfg >> 32), (uint32_t)cfg);
    }
    if (top != 0 && !bson_has_field(doc, "$topologyTime")) {
        BSON_APPEND_TIMESTAMP(doc, "$topologyTime", (uint32_t)(top >> 32), (uint32_t)top);
    }
}

void
shl_vector_clock_append_internal_gossip(const shl_vector_clock_t *vc, uint64_t cluster_time,
                                        bson_t *doc)
{
    static const uint8_t zero_hash[20] = {0};
    shl_vector_time_t now;
    uint64_t ct;
    bson_t sub, sig;

    shl_vector_clock_now(vc, &now);
    ct = cluster_time != 0 ? cluster_time : now.t[SHL_VC_CLUSTER_TIME];
    if (ct < now.t[SHL_VC_CONFIG_TIME]) {
        ct = now.t[SHL_VC_CONFIG_TIME];
    }
    if (ct != 0 && !bson_has_field(doc, "$clusterTime")) {
        BSON_APPEND_DOCUMENT_BEGIN(doc, "$clusterTime", &sub);
        BSON_APPEND_TIMESTAMP(&sub, "clusterTime", (uint32_t)(ct >> 32), (uint32_t)ct);
        BSON_APPEND_DOCUMENT_BEGIN(&sub, "signature", &sig);
        bson_append_binary(&sig, "hash", 4, BSON_SUBTYPE_BINARY, zero_hash, sizeof(zero_hash));
        BSON_APPEND_INT64(&sig, "keyId", 0);
        bson_append_document_end(&sub, &sig);
        bson_append_document_end(doc, &sub);
    }
    shl_vector_clock_append_config_gossip(vc, doc);
}
