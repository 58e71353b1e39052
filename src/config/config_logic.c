/*
 * config_logic.c -- the config server's pure decisions, kept apart so they are unit
 * tested without processes: hashed presplit points, which index can back a shard key,
 * and index names.
 */
#include <string.h>

#include "bson/bson_iter.h"
#include "config/config_private.h"
#include "net/rs_monitor.h"

void
cfg_hashed_split_points(int n, int64_t *out, int *nout)
{
    /* MongoDB's calculateHashedSplitPoints: n chunks spread evenly over the int64 range,
     * symmetric around 0 (0 itself is a point when n is even). */
    /* One chunk has no split point (and INT64_MAX * 2 would overflow). */
    int64_t interval = n > 1 ? (INT64_MAX / n) * 2 : 0;
    int64_t current = 0;
    int k = 0;

    if (n % 2 == 0) {
        out[k++] = 0;
        current += interval;
    } else {
        current += interval / 2;
    }
    for (int i = 0; i < (n - 1) / 2; i++) {
        out[k++] = current;
        out[k++] = -current;
        current += interval;
    }
    /* sort ascending (insertion sort; n is small) */
    for (int i = 1; i < k; i++) {
        int64_t v = out[i];
        int j = i - 1;
        while (j >= 0 && out[j] > v) {
            out[j + 1] = out[j];
            j--;
        }
        out[j + 1] = v;
    }
    *nout = k;
}

/* Whether two key-pattern values mean the same direction/kind (1 == 1.0, "hashed"). */
static bool
same_kind(const bson_iter_t *a, const bson_iter_t *b)
{
    if (BSON_ITER_HOLDS_UTF8(a) || BSON_ITER_HOLDS_UTF8(b)) {
        return BSON_ITER_HOLDS_UTF8(a) && BSON_ITER_HOLDS_UTF8(b) &&
               strcmp(bson_iter_utf8(a, NULL), bson_iter_utf8(b, NULL)) == 0;
    }
    return BSON_ITER_HOLDS_NUMBER(a) && BSON_ITER_HOLDS_NUMBER(b) && bson_iter_as_double(a) > 0 &&
           bson_iter_as_double(b) > 0;
}

bool
cfg_index_backs_key(const bson_t *shard_key, const bson_t *spec)
{
    bson_iter_t it, key, sk;
    bson_t view;
    const uint8_t *data;
    uint32_t len;

    if (!bson_iter_init_find(&it, spec, "key") || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return false;
    }
    /* Sparse, partial and non-simple-collation indexes do not hold every document. */
    {
        bson_iter_t f;
        if (bson_iter_init_find(&f, spec, "sparse") && bson_iter_as_bool(&f)) {
            return false;
        }
        if (bson_iter_init_find(&f, spec, "partialFilterExpression")) {
            return false;
        }
        if (bson_iter_init_find(&f, spec, "hidden") && bson_iter_as_bool(&f)) {
            return false;
        }
        if (bson_iter_init_find(&f, spec, "collation") && BSON_ITER_HOLDS_DOCUMENT(&f)) {
            bson_iter_t loc;
            if (!bson_iter_recurse(&f, &loc) || !bson_iter_find(&loc, "locale") ||
                !BSON_ITER_HOLDS_UTF8(&loc) || strcmp(bson_iter_utf8(&loc, NULL), "simple") != 0) {
                return false;
            }
        }
    }
    bson_iter_document(&it, &len, &data);
    if (!bson_init_static(&view, data, len) || !bson_iter_init(&key, &view) ||
        !bson_iter_init(&sk, shard_key)) {
        return false;
    }
    while (shl_iter_next(&sk)) {
        if (!shl_iter_next(&key) || strcmp(shl_iter_key(&key), shl_iter_key(&sk)) != 0 ||
            !same_kind(&key, &sk)) {
            return false;
        }
    }
    return true;
}

void
cfg_index_name(const bson_t *key, char *out, size_t n)
{
    bson_iter_t it;
    size_t off = 0;

    out[0] = '\0';
    if (!bson_iter_init(&it, key)) {
        return;
    }
    while (shl_iter_next(&it) && off < n) {
        char val[32];
        if (BSON_ITER_HOLDS_UTF8(&it)) {
            snprintf(val, sizeof(val), "%s", bson_iter_utf8(&it, NULL));
        } else {
            snprintf(val, sizeof(val), "%lld", (long long)bson_iter_as_int64(&it));
        }
        off += (size_t)snprintf(out + off, n - off, "%s%s_%s", off > 0 ? "_" : "",
                                shl_iter_key(&it), val);
    }
}

void
cfg_host_of(const char *conn_string, char *out, size_t n)
{
    const char *slash = strchr(conn_string, '/');
    const char *start = slash != NULL ? slash + 1 : conn_string;
    size_t len = strcspn(start, ",");

    snprintf(out, n, "%.*s", (int)len, start);
}

void
cfg_target_of(const char *conn_string, char *out, size_t n)
{
    if (shl_rs_monitor_is_set(conn_string)) {
        snprintf(out, n, "%s", conn_string);
    } else {
        cfg_host_of(conn_string, out, n);
    }
}

void
cfg_keys_plan(uint64_t now, int64_t interval_secs, const uint64_t *valid, size_t nvalid,
              cfg_new_key_t out[2], size_t *n)
{
    int64_t id = (int64_t)now;
    uint64_t current;
    size_t next = 0;

    *n = 0;
    if (nvalid == 0) {
        current = (uint64_t)((int64_t)(now >> 32) + interval_secs) << 32;
        out[(*n)++] = (cfg_new_key_t){id++, current};
    } else {
        current = valid[0];
        next = 1;
    }
    if (next >= nvalid) {
        out[(*n)++] = (cfg_new_key_t){id, (uint64_t)((int64_t)(current >> 32) + interval_secs)
                                              << 32};
    }
}
