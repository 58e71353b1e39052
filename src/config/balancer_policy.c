/*
 * balancer_policy.c -- which chunks a balancer round moves (docs/design/balancer.md; seeds/000
 * "What happens during a balancer round"): draining shards first, then zone violations, then
 * the chunk-count distribution per zone. Pure logic over plain arrays; unit-tested in
 * config_test.c.
 */
#include <stdio.h>
#include <string.h>

#include "config/balancer_private.h"

const char *
cfg_bal_reason_name(cfg_bal_reason_t r)
{
    const char *name = "chunksImbalance";

    if (r == CFG_BAL_DRAINING) {
        name = "draining";
    } else if (r == CFG_BAL_ZONE) {
        name = "zoneViolation";
    }
    return name;
}

static bool
in_zone(const shl_shard_type_t *s, const char *zone)
{
    bool in = zone[0] == '\0';

    for (size_t i = 0; i < s->ntags && !in; i++) {
        in = strcmp(s->tags[i], zone) == 0;
    }
    return in;
}

static size_t
shard_index(const shl_shard_type_t *shards, size_t nshards, const char *name)
{
    size_t found = nshards;

    for (size_t i = 0; i < nshards && found == nshards; i++) {
        if (strcmp(shards[i].name, name) == 0) {
            found = i;
        }
    }
    return found;
}

/* The number of the collection's chunks of 'zone' that shard 's' owns. */
static size_t
count_in_zone(const cfg_bal_chunk_t *chunks, size_t nchunks, const char *shard, const char *zone)
{
    size_t n = 0;

    for (size_t c = 0; c < nchunks; c++) {
        if (strcmp(chunks[c].shard, shard) == 0 && strcmp(chunks[c].zone, zone) == 0) {
            n++;
        }
    }
    return n;
}

/*
 * The least loaded shard that may receive a chunk of 'zone' (not draining, not busy, in the
 * zone; ties go to the first in shards' order), or nshards. The load is the shard's number
 * of chunks of the zone, as the seeds' "least loaded" shard.
 */
static size_t
least_loaded(const shl_shard_type_t *shards, size_t nshards, const cfg_bal_chunk_t *chunks,
             size_t nchunks, const bool *busy, const char *zone, size_t *load)
{
    size_t best = nshards, best_load = 0;

    for (size_t i = 0; i < nshards; i++) {
        size_t l;
        if (busy[i] || shards[i].draining || !in_zone(&shards[i], zone)) {
            continue;
        }
        l = count_in_zone(chunks, nchunks, shards[i].name, zone);
        if (best == nshards || l < best_load) {
            best = i;
            best_load = l;
        }
    }
    *load = best_load;
    return best;
}

/* The first chunk of 'zone' on shards[from] that may move, or nchunks. */
static size_t
first_movable(const shl_shard_type_t *shards, const cfg_bal_chunk_t *chunks, size_t nchunks,
              size_t from, const char *zone)
{
    size_t found = nchunks;

    for (size_t c = 0; c < nchunks && found == nchunks; c++) {
        if (!chunks[c].jumbo && strcmp(chunks[c].shard, shards[from].name) == 0 &&
            (zone == NULL || strcmp(chunks[c].zone, zone) == 0)) {
            found = c;
        }
    }
    return found;
}

static void
add_move(cfg_bal_move_t *out, size_t *n, bool *busy, size_t chunk, size_t from, size_t to,
         cfg_bal_reason_t reason)
{
    out[*n].chunk = chunk;
    out[*n].from = from;
    out[*n].to = to;
    out[*n].reason = reason;
    (*n)++;
    busy[from] = true;
    busy[to] = true;
}

/* Even out one zone: repeat donor → recipient pairs over shards not yet busy. */
static void
balance_zone(const shl_shard_type_t *shards, size_t nshards, const cfg_bal_chunk_t *chunks,
             size_t nchunks, const char *zone, bool *busy, cfg_bal_move_t *out, size_t *n,
             size_t max_out)
{
    size_t total = 0, holders = 0, ideal;

    for (size_t i = 0; i < nshards; i++) {
        if (!shards[i].draining && in_zone(&shards[i], zone)) {
            holders++;
            total += count_in_zone(chunks, nchunks, shards[i].name, zone);
        }
    }
    if (holders == 0) {
        return;
    }
    ideal = total / holders + (total % holders != 0 ? 1 : 0);
    while (*n < max_out) {
        size_t from = nshards, from_load = 0, to, to_load = 0, chunk;
        for (size_t i = 0; i < nshards; i++) {
            size_t l;
            if (busy[i] || shards[i].draining) {
                continue;
            }
            l = count_in_zone(chunks, nchunks, shards[i].name, zone);
            if (l > from_load) {
                from = i;
                from_load = l;
            }
        }
        if (from == nshards || from_load <= ideal) {
            break;
        }
        busy[from] = true; /* not its own recipient */
        to = least_loaded(shards, nshards, chunks, nchunks, busy, zone, &to_load);
        busy[from] = false;
        if (to == nshards || to_load >= ideal) {
            break;
        }
        chunk = first_movable(shards, chunks, nchunks, from, zone);
        if (chunk == nchunks) {
            busy[from] = true; /* only jumbo chunks: try the next donor */
            continue;
        }
        add_move(out, n, busy, chunk, from, to, CFG_BAL_IMBALANCE);
    }
}

/* Steps 1 and 2 of both policies: one chunk off each draining shard, then the chunks on a
 * shard outside their zone. Returns the number of moves written. */
static size_t
draining_and_zones(const shl_shard_type_t *shards, size_t nshards, const cfg_bal_chunk_t *chunks,
                   size_t nchunks, bool *busy, cfg_bal_move_t *out, size_t max_out)
{
    size_t n = 0;

    /* 1. One chunk off each draining shard. */
    for (size_t s = 0; s < nshards && n < max_out; s++) {
        if (!shards[s].draining || busy[s]) {
            continue;
        }
        for (size_t c = 0; c < nchunks; c++) {
            size_t to, load;
            if (chunks[c].jumbo || strcmp(chunks[c].shard, shards[s].name) != 0) {
                continue;
            }
            to = least_loaded(shards, nshards, chunks, nchunks, busy, chunks[c].zone, &load);
            if (to != nshards && to != s) {
                add_move(out, &n, busy, c, s, to, CFG_BAL_DRAINING);
                break;
            }
        }
    }
    /* 2. Chunks on a shard outside their zone. */
    for (size_t c = 0; c < nchunks && n < max_out; c++) {
        size_t from = shard_index(shards, nshards, chunks[c].shard), to, load;
        if (chunks[c].jumbo || from == nshards || busy[from] || shards[from].draining ||
            in_zone(&shards[from], chunks[c].zone)) {
            continue;
        }
        to = least_loaded(shards, nshards, chunks, nchunks, busy, chunks[c].zone, &load);
        if (to != nshards) {
            add_move(out, &n, busy, c, from, to, CFG_BAL_ZONE);
        }
    }
    return n;
}

/* Whether zone 'zone' (chunks[c].zone, or "" for c == nchunks) was met before index c, so
 * each zone is balanced once, "" last. */
static bool
zone_seen(const cfg_bal_chunk_t *chunks, size_t nchunks, size_t c)
{
    const char *zone = c == nchunks ? "" : chunks[c].zone;
    bool seen = c < nchunks && zone[0] == '\0';

    for (size_t p = 0; p < c && c < nchunks && !seen; p++) {
        seen = strcmp(chunks[p].zone, zone) == 0;
    }
    return seen;
}

size_t
cfg_balancer_policy(const shl_shard_type_t *shards, size_t nshards, const cfg_bal_chunk_t *chunks,
                    size_t nchunks, bool *busy, cfg_bal_move_t *out, size_t max_out)
{
    size_t n = draining_and_zones(shards, nshards, chunks, nchunks, busy, out, max_out);
    /* Shards marked busy here only because their chunks cannot move are released at the end. */
    bool *blocked = bson_malloc0((nshards + 1) * sizeof(bool));

    /* 3. Per zone, the chunk counts; each zone once, "" (no zone) last. */
    for (size_t c = 0; c <= nchunks && n < max_out; c++) {
        const char *zone = c == nchunks ? "" : chunks[c].zone;
        if (!zone_seen(chunks, nchunks, c)) {
            for (size_t i = 0; i < nshards; i++) {
                blocked[i] = busy[i];
            }
            balance_zone(shards, nshards, chunks, nchunks, zone, busy, out, &n, max_out);
            /* balance_zone marks donors holding only jumbo chunks busy; release them. */
            for (size_t i = 0; i < nshards; i++) {
                bool moving = false;
                for (size_t m = 0; m < n && !moving; m++) {
                    moving = out[m].from == i || out[m].to == i;
                }
                busy[i] = blocked[i] || moving;
            }
        }
    }
    bson_free(blocked);
    return n;
}

/* Whether shard i holds a chunk of 'zone'. */
static bool
holds_zone(const shl_shard_type_t *shards, size_t i, const cfg_bal_chunk_t *chunks, size_t nchunks,
           const char *zone)
{
    return count_in_zone(chunks, nchunks, shards[i].name, zone) > 0;
}

size_t
cfg_balancer_policy_data_size(const shl_shard_type_t *shards, size_t nshards,
                              const cfg_bal_chunk_t *chunks, size_t nchunks, const int64_t *sizes,
                              int64_t chunk_size, bool *busy, cfg_bal_move_t *out, size_t max_out)
{
    size_t n = draining_and_zones(shards, nshards, chunks, nchunks, busy, out, max_out);

    for (size_t c = 0; c <= nchunks && n < max_out; c++) {
        const char *zone = c == nchunks ? "" : chunks[c].zone;
        int64_t total = 0, holders = 0, ideal;
        if (zone_seen(chunks, nchunks, c)) {
            continue;
        }
        for (size_t i = 0; i < nshards; i++) {
            if (!shards[i].draining && in_zone(&shards[i], zone)) {
                total += sizes[i];
                holders++;
            }
        }
        if (holders == 0) {
            continue;
        }
        ideal = total / holders;
        /* Pairs of the most and the least loaded free shards, while they are apart by three
         * chunk sizes or more (MongoDB 7.0's threshold) and on either side of the ideal. */
        while (n < max_out) {
            size_t from = nshards, to = nshards, chunk;
            for (size_t i = 0; i < nshards; i++) {
                if (busy[i] || shards[i].draining) {
                    continue;
                }
                if (holds_zone(shards, i, chunks, nchunks, zone) &&
                    first_movable(shards, chunks, nchunks, i, zone) != nchunks &&
                    (from == nshards || sizes[i] > sizes[from])) {
                    from = i;
                }
                if (in_zone(&shards[i], zone) && (to == nshards || sizes[i] < sizes[to])) {
                    to = i;
                }
            }
            if (from == nshards || to == nshards || from == to || sizes[from] <= ideal ||
                sizes[to] >= ideal || sizes[from] - sizes[to] < 3 * chunk_size) {
                break;
            }
            chunk = first_movable(shards, chunks, nchunks, from, zone);
            add_move(out, &n, busy, chunk, from, to, CFG_BAL_IMBALANCE);
        }
    }
    return n;
}

size_t
cfg_balancer_policy_load_total(const shl_shard_type_t *shards, size_t nshards,
                               const cfg_bal_chunk_t *chunks, size_t nchunks, bool *busy,
                               cfg_bal_move_t *out, size_t max_out, size_t *split_chunk)
{
    size_t n = 0;
    int64_t *load = bson_malloc0((nshards + 1) * sizeof(*load));

    *split_chunk = nchunks;
    while (n < max_out) {
        size_t from = nshards, to = nshards, best = nchunks, hot;
        int64_t diff, best_gap = 0, split_gap;
        memset(load, 0, (nshards + 1) * sizeof(*load));
        for (size_t c = 0; c < nchunks; c++) {
            size_t i = shard_index(shards, nshards, chunks[c].shard);
            if (i < nshards && chunks[c].zone[0] == '\0') {
                load[i] += chunks[c].load;
            }
        }
        for (size_t i = 0; i < nshards; i++) {
            if (busy[i] || shards[i].draining) {
                continue;
            }
            if (from == nshards || load[i] > load[from]) {
                from = i;
            }
            if (to == nshards || load[i] < load[to]) {
                to = i;
            }
        }
        if (from == nshards || to == nshards || from == to || load[from] < CFG_BAL_LOAD_MIN ||
            load[from] * 100 <= (load[from] + load[to]) * CFG_BAL_LOAD_SHARE) {
            break;
        }
        diff = load[from] - load[to];
        hot = nchunks;
        for (size_t c = 0; c < nchunks; c++) {
            int64_t l = chunks[c].load, gap;
            if (chunks[c].jumbo || chunks[c].zone[0] != '\0' || l <= 0 ||
                shard_index(shards, nshards, chunks[c].shard) != from) {
                continue;
            }
            if (hot == nchunks || l > chunks[hot].load) {
                hot = c;
            }
            if (l >= diff) {
                continue;
            }
            gap = diff - 2 * l;
            gap = gap < 0 ? -gap : gap;
            if (best == nchunks || gap < best_gap) {
                best = c;
                best_gap = gap;
            }
        }
        /* Splitting the hottest chunk at its load median and moving a half leaves about
         * |difference - L_hot| apart: split when that beats the best move (a hot range inside
         * one chunk, cold chunks around it: moving cold chunks away would barely help). */
        split_gap = hot != nchunks ? diff - chunks[hot].load : 0;
        split_gap = split_gap < 0 ? -split_gap : split_gap;
        if (best == nchunks || (hot != nchunks && split_gap < best_gap)) {
            *split_chunk = hot;
            break;
        }
        add_move(out, &n, busy, best, from, to, CFG_BAL_IMBALANCE);
    }
    bson_free(load);
    return n;
}

size_t
cfg_balancer_policy_load(const shl_shard_type_t *shards, size_t nshards,
                         const cfg_bal_chunk_t *chunks, size_t nchunks, bool *busy,
                         cfg_bal_move_t *out, size_t max_out, size_t *split_chunk)
{
    size_t n = draining_and_zones(shards, nshards, chunks, nchunks, busy, out, max_out);

    n += cfg_balancer_policy_load_total(shards, nshards, chunks, nchunks, busy, out + n,
                                        max_out - n, split_chunk);
    return n;
}

/* "HH:MM" (or "H:MM") as minutes since midnight, or -1. */
static int
parse_hhmm(const char *s)
{
    int h = -1, m = -1, used = 0;

    if (sscanf(s, "%2d:%2d%n", &h, &m, &used) != 2 || s[used] != '\0' || h < 0 || h > 23 || m < 0 ||
        m > 59 || strchr(s, ':') - s > 2 || strlen(strchr(s, ':') + 1) != 2) {
        return -1;
    }
    return h * 60 + m;
}

int
cfg_balancer_in_window(const char *start, const char *stop, int now_min, bool *in, shl_status_t *st)
{
    int ret = 0;
    int a = parse_hhmm(start), b = parse_hhmm(stop);

    *in = true;
    if (a < 0 || b < 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "activeWindow format is  { start: \"hh:mm\" , stop: \"hh:mm\" }, got %s - %s",
                 start, stop);
    }
    if (a < b) {
        *in = a <= now_min && now_min < b;
    } else if (a > b) {
        *in = now_min >= a || now_min < b;
    }
done:
    return ret;
}
