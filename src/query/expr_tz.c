/*
 * expr_tz.c -- Olson time zones for the date expressions, read from the system's compiled
 * tz database (TZif files under $TZDIR or /usr/share/zoneinfo). A zone is its list of
 * transitions and UTC offsets; instants after the last transition keep the last offset (the
 * TZif footer's POSIX rule is not interpreted; Debian's "fat" files list transitions up to
 * 2037). Loaded zones are cached for the life of the process.
 */
#include "query/expression_private.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct expr_tzzone {
    char *name;
    int64_t *trans; /* transition instants, seconds since the epoch, ascending */
    uint8_t *idx;   /* type index per transition */
    int32_t *utoff; /* UTC offset per type, seconds */
    uint8_t *isdst;
    size_t ntrans, ntypes;
    int first_std; /* the type used before the first transition */
};

#define TZ_CACHE_MAX 512
#define TZ_FILE_MAX (1 << 20)

static pthread_mutex_t tz_lock = PTHREAD_MUTEX_INITIALIZER;
static expr_tzzone_t *tz_cache[TZ_CACHE_MAX]; /* guarded by tz_lock */
static size_t tz_ncache;                      /* guarded by tz_lock */

static uint32_t
be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t
be64(const uint8_t *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

/* A name the tz database could hold: letters, digits, '_', '-', '+', '/', no "..". */
static bool
valid_name(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len > 64 || name[0] == '/' || strstr(name, "..") != NULL) {
        return false;
    }
    for (const char *p = name; *p != '\0'; p++) {
        if (!isalnum((unsigned char)*p) && strchr("_-+/", *p) == NULL) {
            return false;
        }
    }
    return true;
}

static void
zone_free(expr_tzzone_t *z)
{
    if (z != NULL) {
        bson_free(z->name);
        bson_free(z->trans);
        bson_free(z->idx);
        bson_free(z->utoff);
        bson_free(z->isdst);
        bson_free(z);
    }
}

/* Parse a TZif file (version 2 or later: the 64-bit block). */
static expr_tzzone_t *
zone_parse(const char *name, const uint8_t *d, size_t n)
{
    uint32_t isut, isstd, leap, timecnt, typecnt, charcnt;
    size_t skip, off;
    expr_tzzone_t *z;

    if (n < 44 || memcmp(d, "TZif", 4) != 0 || d[4] < '2') {
        return NULL;
    }
    isut = be32(d + 20);
    isstd = be32(d + 24);
    leap = be32(d + 28);
    timecnt = be32(d + 32);
    typecnt = be32(d + 36);
    charcnt = be32(d + 40);
    skip =
        44 + (size_t)timecnt * 5 + (size_t)typecnt * 6 + charcnt + (size_t)leap * 8 + isstd + isut;
    if (skip + 44 > n || memcmp(d + skip, "TZif", 4) != 0) {
        return NULL;
    }
    d += skip;
    n -= skip;
    isut = be32(d + 20);
    isstd = be32(d + 24);
    leap = be32(d + 28);
    timecnt = be32(d + 32);
    typecnt = be32(d + 36);
    charcnt = be32(d + 40);
    if (typecnt == 0 || typecnt > 256 || timecnt > 100000 ||
        44 + (size_t)timecnt * 9 + (size_t)typecnt * 6 > n) {
        return NULL;
    }
    z = bson_malloc0(sizeof(*z));
    z->name = bson_strdup(name);
    z->ntrans = timecnt;
    z->ntypes = typecnt;
    z->trans = bson_malloc0((timecnt + 1) * sizeof(int64_t));
    z->idx = bson_malloc0(timecnt + 1);
    z->utoff = bson_malloc0(typecnt * sizeof(int32_t));
    z->isdst = bson_malloc0(typecnt);
    off = 44;
    for (uint32_t i = 0; i < timecnt; i++, off += 8) {
        z->trans[i] = be64(d + off);
    }
    for (uint32_t i = 0; i < timecnt; i++, off++) {
        z->idx[i] = d[off];
        if (z->idx[i] >= typecnt) {
            zone_free(z);
            return NULL;
        }
    }
    for (uint32_t i = 0; i < typecnt; i++, off += 6) {
        z->utoff[i] = (int32_t)be32(d + off);
        z->isdst[i] = d[off + 4];
    }
    z->first_std = 0;
    for (uint32_t i = 0; i < typecnt; i++) {
        if (!z->isdst[i]) {
            z->first_std = (int)i;
            break;
        }
    }
    (void)charcnt;
    return z;
}

static expr_tzzone_t *
zone_load(const char *name)
{
    const char *dir = getenv("TZDIR");
    char path[512];
    uint8_t *buf = NULL;
    size_t n = 0;
    FILE *f;
    expr_tzzone_t *z = NULL;

    snprintf(path, sizeof(path), "%s/%s",
             dir != NULL && dir[0] != '\0' ? dir : "/usr/share/zoneinfo", name);
    if ((f = fopen(path, "rb")) == NULL) {
        return NULL;
    }
    buf = bson_malloc(TZ_FILE_MAX);
    n = fread(buf, 1, TZ_FILE_MAX, f);
    fclose(f);
    z = zone_parse(name, buf, n);
    bson_free(buf);
    return z;
}

const expr_tzzone_t *
expr_tz_lookup(const char *name)
{
    expr_tzzone_t *z = NULL;
    if (!valid_name(name)) {
        return NULL;
    }
    pthread_mutex_lock(&tz_lock);
    for (size_t i = 0; i < tz_ncache; i++) {
        if (strcmp(tz_cache[i]->name, name) == 0) {
            z = tz_cache[i];
            break;
        }
    }
    if (z == NULL && tz_ncache < TZ_CACHE_MAX && (z = zone_load(name)) != NULL) {
        tz_cache[tz_ncache++] = z;
    }
    pthread_mutex_unlock(&tz_lock);
    return z;
}

int64_t
expr_tz_zone_offset(const expr_tzzone_t *z, int64_t utc_ms)
{
    int64_t secs = utc_ms >= 0 ? utc_ms / 1000 : -((-(utc_ms + 1)) / 1000) - 1;
    size_t lo = 0, hi = z->ntrans;
    if (z->ntrans == 0 || secs < z->trans[0]) {
        return (int64_t)z->utoff[z->first_std] * 1000;
    }
    /* the last transition at or before 'secs' */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->trans[mid] <= secs) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return (int64_t)z->utoff[z->idx[lo]] * 1000;
}
