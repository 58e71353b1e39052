/*
 * configsvr_zones.c -- zone sharding on the config server (docs/design/sharding-protocol.md
 * "Zones"): _configsvrAddShardToZone / _configsvrRemoveShardFromZone (config.shards `tags`),
 * _configsvrUpdateZoneKeyRange (config.tags {_id, ns, min, max, tag}) and
 * _configsvrBalancerCollectionStatus (whether a collection's chunks sit where MongoDB 7.0's
 * balancer policy wants them). Checks, errors and replies as MongoDB 7.0's zone operations of
 * the ShardingCatalogManager and Balancer::getBalancerStatusForNs.
 */
#include <math.h>
#include <string.h>

#include "base/log.h"
#include "bson/bson_compare.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "config/balancer_private.h"
#include "config/config_private.h"
#include "sharding/shard_key.h"
#include "sharding/sharding_types.h"

/* One lock for every zone operation (MongoDB's _kZoneOpLock); taken after a namespace's. */
#define ZONES_LOCK "zones:"

/* MongoDB's default maximum chunk (range) size, 128 MB, when config.settings has none. */

/* ---------------------------------------------------------------- arguments */

/* The string field 'name' of 'cmd' (bsonExtractStringField's errors: NoSuchKey,
 * TypeMismatch). */
static int
string_field(const bson_t *cmd, const char *name, const char **out, shl_status_t *st)
{
    bson_iter_t it;
    int ret = 0;

    *out = NULL;
    if (!bson_iter_init_find(&it, cmd, name)) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "Missing expected field \"%s\"", name);
    }
    if (!BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "\"%s\" had the wrong type. Expected string, found %s",
                 name, shl_bson_type_name(bson_iter_type(&it)));
    }
    *out = bson_iter_utf8(&it, NULL);
done:
    return ret;
}

/* The object field 'name' of 'cmd' as a static view. */
static int
object_field(const bson_t *cmd, const char *name, bson_t *view, shl_status_t *st)
{
    bson_iter_t it;
    int ret = 0;

    if (!bson_iter_init_find(&it, cmd, name)) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "Missing expected field \"%s\"", name);
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "\"%s\" had the wrong type. Expected object, found %s",
                 name, shl_bson_type_name(bson_iter_type(&it)));
    }
    SHL_ERR(shl_idl_read_doc(&it, name, view, st));
done:
    return ret;
}

/* ---------------------------------------------------------------- shards and zones */

static int
cmd_add_shard_to_zone(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *shard = NULL, *zone = NULL;
    bson_t *q = NULL, *u = NULL;
    int64_t matched = 0;
    bool locked = false;

    (void)op;
    (void)reply;
    SHL_ERR(cfg_cmd_string(cmd, &shard, st));
    SHL_ERR(string_field(cmd, "zone", &zone, st));
    cfg_lock_ns(ZONES_LOCK);
    locked = true;
    q = BCON_NEW("_id", BCON_UTF8(shard));
    u = BCON_NEW("$addToSet", "{", "tags", BCON_UTF8(zone), "}");
    SHL_ERR(cfg_update("shards", q, u, false, false, &matched, st));
    if (matched == 0) {
        SHL_FAIL(st, SHL_CODE_SHARD_NOT_FOUND, "shard %s does not exist", shard);
    }
    SHL_LOG_INFO(SHARDING, 4200160, "added shard to zone", "shard", BCON_UTF8(shard), "zone",
                 BCON_UTF8(zone));
done:
    if (locked) {
        cfg_unlock_ns(ZONES_LOCK);
    }
    if (q != NULL) {
        bson_destroy(q);
    }
    if (u != NULL) {
        bson_destroy(u);
    }
    return ret;
}

/* Whether 'shard' is the zone's only shard while config.tags still has a range of the zone
 * (MongoDB's _isShardRequiredByZoneStillInUse: a zone no shard has is not in use). */
static int
zone_needs_shard(const char *shard, const char *zone, bool *needed, shl_status_t *st)
{
    int ret = 0;
    bson_t *q = BCON_NEW("tags", BCON_UTF8(zone));
    bson_t one = BSON_INITIALIZER;
    cfg_docs_t d = {0};
    bson_iter_t it;
    bool found = false;

    *needed = false;
    SHL_ERR(cfg_find("shards", q, NULL, &d, st));
    if (d.n != 1 || !bson_iter_init_find(&it, d.docs[0], "_id") || !BSON_ITER_HOLDS_UTF8(&it) ||
        strcmp(bson_iter_utf8(&it, NULL), shard) != 0) {
        goto done;
    }
    bson_destroy(q);
    q = BCON_NEW("tag", BCON_UTF8(zone));
    SHL_ERR(cfg_find_one("tags", q, &one, &found, st));
    *needed = found;
done:
    cfg_docs_cleanup(&d);
    bson_destroy(q);
    bson_destroy(&one);
    return ret;
}

static int
cmd_remove_shard_from_zone(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *shard = NULL, *zone = NULL;
    bson_t *q = NULL, *u = NULL;
    bson_t doc = BSON_INITIALIZER;
    int64_t matched = 0;
    bool locked = false, found = false, needed = false;

    (void)op;
    (void)reply;
    SHL_ERR(cfg_cmd_string(cmd, &shard, st));
    SHL_ERR(string_field(cmd, "zone", &zone, st));
    cfg_lock_ns(ZONES_LOCK);
    locked = true;
    q = BCON_NEW("_id", BCON_UTF8(shard));
    SHL_ERR(cfg_find_one("shards", q, &doc, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_SHARD_NOT_FOUND, "shard %s does not exist", shard);
    }
    SHL_ERR(zone_needs_shard(shard, zone, &needed, st));
    if (needed) {
        SHL_FAIL(st, SHL_CODE_ZONE_STILL_IN_USE,
                 "cannot remove a shard from zone if a chunk range is associated with it");
    }
    u = BCON_NEW("$pull", "{", "tags", BCON_UTF8(zone), "}");
    SHL_ERR(cfg_update("shards", q, u, false, false, &matched, st));
    if (matched == 0) {
        SHL_FAIL(st, SHL_CODE_SHARD_NOT_FOUND, "shard %s no longer exist", shard);
    }
    SHL_LOG_INFO(SHARDING, 4200161, "removed shard from zone", "shard", BCON_UTF8(shard), "zone",
                 BCON_UTF8(zone));
done:
    if (locked) {
        cfg_unlock_ns(ZONES_LOCK);
    }
    if (q != NULL) {
        bson_destroy(q);
    }
    if (u != NULL) {
        bson_destroy(u);
    }
    bson_destroy(&doc);
    return ret;
}

/* ---------------------------------------------------------------- zone key ranges */

/* Whether the field names of 'bound' are, in order, a prefix of those of 'pattern'. */
static bool
is_field_name_prefix(const bson_t *bound, const bson_t *pattern)
{
    bson_iter_t a, b;

    bson_iter_init(&a, bound);
    bson_iter_init(&b, pattern);
    while (shl_iter_next(&a)) {
        if (!shl_iter_next(&b) || strcmp(shl_iter_key(&a), shl_iter_key(&b)) != 0) {
            return false;
        }
    }
    return true;
}

/* *out = 'bound' completed with MinKey for the pattern's fields it lacks (MongoDB's
 * extendRangeBound(bound, false)); 'out' is initialised here. */
void
cfg_extend_bound(const bson_t *bound, const bson_t *pattern, bson_t *out)
{
    bson_iter_t it;
    uint32_t n = 0, i = 0;

    bson_init(out);
    if (bson_iter_init(&it, bound)) {
        while (shl_iter_next(&it)) {
            bson_append_iter(out, NULL, 0, &it);
            n++;
        }
    }
    bson_iter_init(&it, pattern);
    while (shl_iter_next(&it)) {
        if (i++ >= n) {
            BSON_APPEND_MINKEY(out, shl_iter_key(&it));
        }
    }
}

/* The key pattern {f: 1, ...} of an unsharded namespace's range: min and max must name the
 * same fields in the same order (ChunkRange::extractKeyPattern). */
static int
range_key_pattern(const bson_t *min, const bson_t *max, bson_t *out, shl_status_t *st)
{
    bson_iter_t a, b;
    bool more_a, more_b;
    int ret = 0;

    bson_init(out);
    bson_iter_init(&a, min);
    bson_iter_init(&b, max);
    for (;;) {
        more_a = shl_iter_next(&a);
        more_b = shl_iter_next(&b);
        if (!more_a && !more_b) {
            break;
        }
        if (more_a != more_b || strcmp(shl_iter_key(&a), shl_iter_key(&b)) != 0) {
            char *smin = shl_bson_to_string(min), *smax = shl_bson_to_string(max);
            ret = shl_status_set(st, SHL_CODE_SHARD_KEY_NOT_FOUND,
                                 "the shard key of min %s doesn't match with the shard key of "
                                 "max %s",
                                 smin, smax);
            bson_free(smin);
            bson_free(smax);
            goto done;
        }
        BSON_APPEND_INT32(out, shl_iter_key(&a), 1);
    }
done:
    return ret;
}

/* A range's "{ a: 1 } -->> { a: 5 }  on  zone" (ZoneRange::toString). */
static char *
range_string(const bson_t *min, const bson_t *max, const char *zone)
{
    char *a = shl_bson_to_string(min), *b = shl_bson_to_string(max);
    char *s = bson_strdup_printf("%s -->> %s  on  %s", a, b, zone);

    bson_free(a);
    bson_free(b);
    return s;
}

/* Hashed fields of the shard key take only NumberLong, MinKey or MaxKey bounds. */
static int
check_hashed_range(const bson_t *min, const bson_t *max, const bson_t *pattern, shl_status_t *st)
{
    bson_iter_t p, a, b;
    int ret = 0;

    bson_iter_init(&p, pattern);
    bson_iter_init(&a, min);
    bson_iter_init(&b, max);
    while (shl_iter_next(&p)) {
        bool ha = shl_iter_next(&a), hb = shl_iter_next(&b);
        if (BSON_ITER_HOLDS_UTF8(&p) && strcmp(bson_iter_utf8(&p, NULL), "hashed") == 0) {
            bson_type_t ta = ha ? bson_iter_type(&a) : BSON_TYPE_EOD;
            bson_type_t tb = hb ? bson_iter_type(&b) : BSON_TYPE_EOD;
            bool ok_a = ta == BSON_TYPE_INT64 || ta == BSON_TYPE_MINKEY || ta == BSON_TYPE_MAXKEY;
            bool ok_b = tb == BSON_TYPE_INT64 || tb == BSON_TYPE_MINKEY || tb == BSON_TYPE_MAXKEY;
            if (!ok_a || !ok_b) {
                char *smin = shl_bson_to_string(min), *smax = shl_bson_to_string(max);
                char *spat = shl_bson_to_string(pattern);
                ret = shl_status_set(st, SHL_CODE_INVALID_OPTIONS,
                                     "there exists a field in the range %s -->> %s not of type "
                                     "NumberLong, MinKey, or MaxKey which corresponds to a hashed "
                                     "field in the shard key pattern %s",
                                     smin, smax, spat);
                bson_free(smin);
                bson_free(smax);
                bson_free(spat);
                goto done;
            }
        }
    }
done:
    return ret;
}

/*
 * RangeOverlapConflict unless [min, max) of 'zone' fits among the namespace's existing
 * ranges (each extended to the full key): an identical range of the same zone is fine (the
 * request repeats), any other intersection is refused. *same is set for the repeat.
 */
static int
check_overlap(const char *ns, const bson_t *min, const bson_t *max, const char *zone,
              const bson_t *pattern, bool *same, shl_status_t *st)
{
    int ret = 0;
    bson_t *q = BCON_NEW("ns", BCON_UTF8(ns));
    cfg_docs_t d = {0};

    *same = false;
    SHL_ERR(cfg_find("tags", q, NULL, &d, st));
    for (size_t i = 0; i < d.n; i++) {
        bson_t rmin_v, rmax_v, rmin, rmax;
        const char *tag = "";
        bson_iter_t it;
        bool overlap, identical;

        if (!shl_bson_get_subdoc(d.docs[i], "min", &rmin_v) ||
            !shl_bson_get_subdoc(d.docs[i], "max", &rmax_v)) {
            continue;
        }
        if (bson_iter_init_find(&it, d.docs[i], "tag") && BSON_ITER_HOLDS_UTF8(&it)) {
            tag = bson_iter_utf8(&it, NULL);
        }
        cfg_extend_bound(&rmin_v, pattern, &rmin);
        cfg_extend_bound(&rmax_v, pattern, &rmax);
        overlap = shl_shard_key_compare(min, &rmax) < 0 && shl_shard_key_compare(&rmin, max) < 0;
        identical = shl_shard_key_compare(min, &rmin) == 0 &&
                    shl_shard_key_compare(max, &rmax) == 0 && strcmp(tag, zone) == 0;
        if (identical) {
            *same = true;
        } else if (overlap) {
            char *a = range_string(min, max, zone), *b = range_string(&rmin, &rmax, tag);
            ret = shl_status_set(st, SHL_CODE_RANGE_OVERLAP_CONFLICT,
                                 "Zone range: %s is overlapping with existing: %s", a, b);
            bson_free(a);
            bson_free(b);
        }
        bson_destroy(&rmin);
        bson_destroy(&rmax);
        if (ret != 0) {
            goto done;
        }
    }
done:
    cfg_docs_cleanup(&d);
    bson_destroy(q);
    return ret;
}

static int
cmd_update_zone_key_range(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *nsstr = NULL, *zone = NULL;
    shl_ns_t ns;
    bson_t given_min, given_max, min = BSON_INITIALIZER, max = BSON_INITIALIZER;
    bson_t pattern = BSON_INITIALIZER, doc = BSON_INITIALIZER, *q = NULL;
    bson_iter_t it;
    shl_collection_type_t coll;
    bool has_coll = false, ns_locked = false, zones_locked = false, same = false;

    (void)reply;
    memset(&coll, 0, sizeof(coll));
    SHL_ERR(cfg_cmd_string(cmd, &nsstr, st));
    SHL_ERR(shl_ns_parse(&ns, nsstr, st));
    SHL_ERR(object_field(cmd, "min", &given_min, st));
    SHL_ERR(object_field(cmd, "max", &given_max, st));
    if (!bson_iter_init_find(&it, cmd, "zone")) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "Missing expected field \"zone\"");
    }
    if (BSON_ITER_HOLDS_UTF8(&it)) {
        zone = bson_iter_utf8(&it, NULL);
    } else if (!BSON_ITER_HOLDS_NULL(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "\"zone\" had the wrong type. Expected string or null, found %s",
                 shl_bson_type_name(bson_iter_type(&it)));
    }
    if (shl_bson_doc_compare(&given_min, &given_max) >= 0) {
        char *a = shl_bson_to_string(&given_min), *b = shl_bson_to_string(&given_max);
        ret = shl_status_set(st, SHL_CODE_FAILED_TO_PARSE, "min: %s should be less than max: %s", a,
                             b);
        bson_free(a);
        bson_free(b);
        goto done;
    }
    if (zone != NULL) {
        SHL_ERR(shl_shard_key_check_storage(&given_min, st));
        SHL_ERR(shl_shard_key_check_storage(&given_max, st));
    }

    /* The collection's lock (against shardCollection, refine, drop and rename), then the
     * zones' (against a concurrent removal of the zone's last shard). */
    cfg_lock_ns(ns.full);
    ns_locked = true;
    cfg_lock_ns(ZONES_LOCK);
    zones_locked = true;

    if (zone != NULL) {
        bson_t *zq = BCON_NEW("tags", BCON_UTF8(zone));
        bool found = false;
        ret = cfg_find_one("shards", zq, &doc, &found, st);
        bson_destroy(zq);
        if (ret != 0) {
            goto done;
        }
        if (!found) {
            SHL_FAIL(st, SHL_CODE_ZONE_NOT_FOUND, "zone %s does not exist", zone);
        }
    }

    /* A sharded collection's ranges are prefixes of its shard key, stored extended to the
     * full key; an unsharded namespace's (zones may be set up before sharding) as given. */
    SHL_ERR(cfg_get_collection(ns.full, &coll, &has_coll, st));
    if (has_coll && coll.key != NULL) {
        const char *which = NULL;
        const bson_t *bad = NULL;
        if (!is_field_name_prefix(&given_min, coll.key)) {
            which = "min";
            bad = &given_min;
        } else if (!is_field_name_prefix(&given_max, coll.key)) {
            which = "max";
            bad = &given_max;
        }
        if (which != NULL) {
            char *b = shl_bson_to_string(bad), *k = shl_bson_to_string(coll.key);
            ret = shl_status_set(st, SHL_CODE_SHARD_KEY_NOT_FOUND,
                                 "%s: %s is not a prefix of the shard key %s of ns: %s", which, b,
                                 k, ns.full);
            bson_free(b);
            bson_free(k);
            goto done;
        }
        bson_concat(&pattern, coll.key);
        bson_destroy(&min);
        bson_destroy(&max);
        cfg_extend_bound(&given_min, coll.key, &min);
        cfg_extend_bound(&given_max, coll.key, &max);
    } else {
        bson_destroy(&pattern);
        SHL_ERR(range_key_pattern(&given_min, &given_max, &pattern, st));
        bson_concat(&min, &given_min);
        bson_concat(&max, &given_max);
    }

    if (zone == NULL) {
        q = BCON_NEW("ns", BCON_UTF8(ns.full), "min", BCON_DOCUMENT(&min), "max",
                     BCON_DOCUMENT(&max));
        SHL_ERR(cfg_delete("tags", q, true, NULL, st));
        SHL_LOG_INFO(SHARDING, 4200162, "removed zone range", "ns", BCON_UTF8(ns.full), "min",
                     BCON_DOCUMENT(&min), "max", BCON_DOCUMENT(&max));
        goto done;
    }

    SHL_ERR(check_hashed_range(&min, &max, &pattern, st));
    SHL_ERR(check_overlap(ns.full, &min, &max, zone, &pattern, &same, st));
    if (!same) {
        /* Keyed by {ns, min} (the unique index); a new document gets an ObjectId _id. */
        bson_t *u = BCON_NEW("ns", BCON_UTF8(ns.full), "min", BCON_DOCUMENT(&min), "max",
                             BCON_DOCUMENT(&max), "tag", BCON_UTF8(zone));
        q = BCON_NEW("ns", BCON_UTF8(ns.full), "min", BCON_DOCUMENT(&min));
        ret = cfg_update("tags", q, u, true, false, NULL, st);
        bson_destroy(u);
        if (ret != 0) {
            goto done;
        }
    }
    SHL_LOG_INFO(SHARDING, 4200163, "assigned range to zone", "ns", BCON_UTF8(ns.full), "min",
                 BCON_DOCUMENT(&min), "max", BCON_DOCUMENT(&max), "zone", BCON_UTF8(zone));
    (void)op;
done:
    if (zones_locked) {
        cfg_unlock_ns(ZONES_LOCK);
    }
    if (ns_locked) {
        cfg_unlock_ns(ns.full);
    }
    if (has_coll) {
        shl_collection_type_cleanup(&coll);
    }
    if (q != NULL) {
        bson_destroy(q);
    }
    bson_destroy(&min);
    bson_destroy(&max);
    bson_destroy(&pattern);
    bson_destroy(&doc);
    return ret;
}

/* ---------------------------------------------------------------- balancerCollectionStatus */

/* One zone range of the collection, extended to the full shard key. */
typedef struct zrange {
    bson_t min, max;
    char *zone;
} zrange_t;

/* The zone that wholly contains chunk [min, max), or "" (ZoneInfo::getZoneForChunk). */
static const char *
chunk_zone(const zrange_t *r, size_t n, const bson_t *min, const bson_t *max)
{
    for (size_t i = 0; i < n; i++) {
        if (shl_shard_key_compare(&r[i].min, min) <= 0 &&
            shl_shard_key_compare(max, &r[i].max) <= 0) {
            return r[i].zone;
        }
    }
    return "";
}

static bool
shard_in_zone(const shl_shard_type_t *s, const char *zone)
{
    if (zone[0] == '\0') {
        return true;
    }
    for (size_t i = 0; i < s->ntags; i++) {
        if (strcmp(s->tags[i], zone) == 0) {
            return true;
        }
    }
    return false;
}

/* Whether some shard other than 'from' may receive a chunk of 'zone' (not draining, in it). */
static bool
has_receiver(const shl_shard_type_t *shards, size_t n, const char *from, const char *zone)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(shards[i].name, from) != 0 && !shards[i].draining &&
            shard_in_zone(&shards[i], zone)) {
            return true;
        }
    }
    return false;
}

/*
 * The first compliance violation of MongoDB 7.0's balancer for the collection, or NULL:
 * "defragmentingChunks"; "zoneViolation" when a zone boundary falls inside a chunk; then, as
 * BalancerPolicy::balance orders them, "draining" (a chunk on a draining shard that another
 * shard may take), "zoneViolation" (a chunk on a shard outside its zone, with a shard of the
 * zone to take it) and "chunksImbalance" (within a zone, the most loaded shard holds more
 * than the ideal share, the least loaded receiver less, and they differ by at least three
 * maximum chunk sizes). Jumbo chunks are never candidates.
 */
static const char *
first_violation(const shl_collection_type_t *coll, const shl_routing_table_t *rt,
                const zrange_t *ranges, size_t nranges, const shl_shard_type_t *shards,
                size_t nshards, const int64_t *sizes, int64_t chunk_size)
{
    size_t nchunks = shl_routing_table_nchunks(rt);

    if (coll->has_defragment_collection && coll->defragment_collection) {
        return "defragmentingChunks";
    }
    for (size_t c = 0; c < nchunks; c++) {
        bson_t min, max;
        shl_routing_table_chunk_bounds(rt, c, &min, &max);
        for (size_t r = 0; r < nranges; r++) {
            const bson_t *b[2] = {&ranges[r].min, &ranges[r].max};
            for (int k = 0; k < 2; k++) {
                if (shl_shard_key_compare(&min, b[k]) < 0 &&
                    shl_shard_key_compare(b[k], &max) < 0) {
                    return "zoneViolation";
                }
            }
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        for (size_t c = 0; c < nchunks; c++) {
            bson_t min, max;
            const char *owner = shl_routing_table_chunk_shard(rt, c);
            const shl_shard_type_t *s = NULL;
            const char *zone;
            if (shl_routing_table_chunk_jumbo(rt, c)) {
                continue;
            }
            for (size_t i = 0; i < nshards; i++) {
                if (strcmp(shards[i].name, owner) == 0) {
                    s = &shards[i];
                }
            }
            if (s == NULL) {
                continue;
            }
            shl_routing_table_chunk_bounds(rt, c, &min, &max);
            zone = chunk_zone(ranges, nranges, &min, &max);
            if (pass == 0 && s->draining && has_receiver(shards, nshards, owner, zone)) {
                return "draining";
            }
            if (pass == 1 && !s->draining && !shard_in_zone(s, zone) &&
                has_receiver(shards, nshards, owner, zone)) {
                return "zoneViolation";
            }
        }
    }
    /* Per zone ("" is the rest of the key space), over the shards that may hold it. */
    for (size_t z = 0; z <= nranges; z++) {
        const char *zone = z == nranges ? "" : ranges[z].zone;
        int64_t total = 0, count = 0, ideal, from = -1, to = -1;
        bool seen = false;
        for (size_t r = 0; r < z && !seen; r++) {
            seen = strcmp(ranges[r].zone, zone) == 0;
        }
        if (seen) {
            continue; /* a zone with several ranges is balanced once */
        }
        for (size_t i = 0; i < nshards; i++) {
            if (shard_in_zone(&shards[i], zone)) {
                total += sizes[i];
                count++;
            }
        }
        if (count == 0) {
            continue;
        }
        ideal = total / count;
        for (size_t i = 0; i < nshards; i++) {
            bool holds = false;
            for (size_t c = 0; c < nchunks && !holds; c++) {
                bson_t min, max;
                if (strcmp(shl_routing_table_chunk_shard(rt, c), shards[i].name) != 0) {
                    continue;
                }
                shl_routing_table_chunk_bounds(rt, c, &min, &max);
                holds = strcmp(chunk_zone(ranges, nranges, &min, &max), zone) == 0;
            }
            if (holds && (from < 0 || sizes[i] > sizes[from])) {
                from = (int64_t)i;
            }
            if (!shards[i].draining && shard_in_zone(&shards[i], zone) &&
                (to < 0 || sizes[i] < sizes[to])) {
                to = (int64_t)i;
            }
        }
        if (from >= 0 && to >= 0 && from != to && sizes[from] > ideal && sizes[to] < ideal &&
            sizes[from] - sizes[to] >= 3 * chunk_size) {
            return "chunksImbalance";
        }
    }
    return NULL;
}

static int
cmd_balancer_collection_status(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *nsstr = NULL, *violation = NULL;
    shl_ns_t ns;
    shl_collection_type_t coll;
    bool has_coll = false;
    shl_routing_table_t *rt = NULL;
    shl_shard_type_t *shards = NULL;
    size_t nshards = 0, nranges = 0;
    int64_t *sizes = NULL, chunk_size = 0;
    zrange_t *ranges = NULL;
    cfg_docs_t d = {0};
    bson_t *q = NULL, *sort = NULL;

    (void)op;
    memset(&coll, 0, sizeof(coll));
    SHL_ERR(cfg_cmd_string(cmd, &nsstr, st));
    if (shl_ns_parse(&ns, nsstr, st) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid namespace specified '%s'", nsstr);
    }
    SHL_ERR(cfg_get_collection(ns.full, &coll, &has_coll, st));
    if (!has_coll || coll.key == NULL) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_SHARDED, "Collection unsharded or undefined");
    }
    SHL_ERR(cfg_load_routing_table(ns.full, NULL, &rt, st));
    SHL_ERR(cfg_get_shards(&shards, &nshards, st));
    SHL_ERR(cfg_max_chunk_size_bytes(&coll, &chunk_size, st));

    q = BCON_NEW("ns", BCON_UTF8(ns.full));
    sort = BCON_NEW("min", BCON_INT32(1));
    SHL_ERR(cfg_find("tags", q, sort, &d, st));
    ranges = bson_malloc0((d.n + 1) * sizeof(*ranges));
    for (size_t i = 0; i < d.n; i++) {
        bson_t rmin, rmax;
        bson_iter_t it;
        if (!shl_bson_get_subdoc(d.docs[i], "min", &rmin) ||
            !shl_bson_get_subdoc(d.docs[i], "max", &rmax) ||
            !bson_iter_init_find(&it, d.docs[i], "tag") || !BSON_ITER_HOLDS_UTF8(&it)) {
            continue;
        }
        cfg_extend_bound(&rmin, coll.key, &ranges[nranges].min);
        cfg_extend_bound(&rmax, coll.key, &ranges[nranges].max);
        ranges[nranges].zone = bson_strdup(bson_iter_utf8(&it, NULL));
        nranges++;
    }

    /* Data sizes only matter once nothing else is wrong; ask the owning shards for them. */
    sizes = bson_malloc0((nshards + 1) * sizeof(*sizes));
    violation = first_violation(&coll, rt, ranges, nranges, shards, nshards, sizes, INT64_MAX / 4);
    if (violation == NULL) {
        for (size_t i = 0; i < nshards; i++) {
            if (shl_routing_table_shard_version(rt, shards[i].name).major > 0) {
                sizes[i] = cfg_owned_data_size(shards[i].name, ns.full);
            }
        }
        violation = first_violation(&coll, rt, ranges, nranges, shards, nshards, sizes, chunk_size);
    }

    /* chunkSize in MB, rounded up to two decimals as MongoDB reports it. */
    BSON_APPEND_DOUBLE(reply, "chunkSize",
                       ceil((double)chunk_size / (1024.0 * 1024.0) * 100.0) / 100.0);
    BSON_APPEND_BOOL(reply, "balancerCompliant", violation == NULL);
    if (violation != NULL) {
        BSON_APPEND_UTF8(reply, "firstComplianceViolation", violation);
    }
done:
    if (has_coll) {
        shl_collection_type_cleanup(&coll);
    }
    if (rt != NULL) {
        shl_routing_table_release(rt);
    }
    if (shards != NULL) {
        cfg_shards_free(shards, nshards);
    }
    if (ranges != NULL) {
        for (size_t i = 0; i < nranges; i++) {
            bson_destroy(&ranges[i].min);
            bson_destroy(&ranges[i].max);
            bson_free(ranges[i].zone);
        }
        bson_free(ranges);
    }
    bson_free(sizes);
    cfg_docs_cleanup(&d);
    if (q != NULL) {
        bson_destroy(q);
    }
    if (sort != NULL) {
        bson_destroy(sort);
    }
    return ret;
}

static const shl_command_t add_shard_to_zone_cmd = {
    .name = "_configsvrAddShardToZone",
    .run = cmd_add_shard_to_zone,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "add a shard to a zone (config.shards tags)",
};
static const shl_command_t remove_shard_from_zone_cmd = {
    .name = "_configsvrRemoveShardFromZone",
    .run = cmd_remove_shard_from_zone,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "remove a shard from a zone (config.shards tags)",
};
static const shl_command_t update_zone_key_range_cmd = {
    .name = "_configsvrUpdateZoneKeyRange",
    .run = cmd_update_zone_key_range,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "assign a shard key range to a zone, or remove it (config.tags)",
};
static const shl_command_t balancer_collection_status_cmd = {
    .name = "_configsvrBalancerCollectionStatus",
    .run = cmd_balancer_collection_status,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "whether a collection's chunks comply with the balancer policy",
};

void
cfg_register_zone_commands(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &add_shard_to_zone_cmd);
    shl_command_registry_add(reg, &remove_shard_from_zone_cmd);
    shl_command_registry_add(reg, &update_zone_key_range_cmd);
    shl_command_registry_add(reg, &balancer_collection_status_cmd);
}
