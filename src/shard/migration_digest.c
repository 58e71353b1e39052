/*
 * migration_digest.c -- order-independent digests of a migrated range (migration_digest.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "net/service.h"
#include "shard/migration_digest.h"
#include "shard/migration_private.h"
#include "storage/storage.h"

static uint64_t
mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

uint64_t
mig_doc_hash(const uint8_t *data, size_t len)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)len;
    size_t i = 0;

    /* Little-endian 8-byte words, whatever the host's byte order. */
    for (; i + 8 <= len; i += 8) {
        uint64_t w = 0;
        for (int b = 7; b >= 0; b--) {
            w = (w << 8) | data[i + (size_t)b];
        }
        h = (h ^ mix64(w)) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    if (i < len) {
        uint64_t w = 0;
        for (size_t b = len; b > i; b--) {
            w = (w << 8) | data[b - 1];
        }
        h = (h ^ mix64(w ^ 0xff51afd7ed558ccdULL)) * 0x100000001b3ULL;
    }
    return mix64(h);
}

void
mig_digest_add(mig_digest_t *d, const uint8_t *data, size_t len)
{
    uint64_t h = mig_doc_hash(data, len);

    d->count++;
    d->sum += h;
    d->xor_ ^= h;
}

bool
mig_digest_eq(const mig_digest_t *a, const mig_digest_t *b)
{
    return a->count == b->count && a->sum == b->sum && a->xor_ == b->xor_;
}

void
mig_digest_append(bson_t *doc, const char *field, const mig_digest_t *d)
{
    bson_t sub;

    BSON_APPEND_DOCUMENT_BEGIN(doc, field, &sub);
    BSON_APPEND_INT64(&sub, "count", d->count);
    BSON_APPEND_INT64(&sub, "sum", (int64_t)d->sum);
    BSON_APPEND_INT64(&sub, "xor", (int64_t)d->xor_);
    bson_append_document_end(doc, &sub);
}

int
mig_digest_parse(const bson_t *doc, const char *field, mig_digest_t *d, bool *found,
                 shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, sub;
    int64_t *dst[3];
    int64_t count = 0, sum = 0, x = 0;
    static const char *const names[] = {"count", "sum", "xor"};

    dst[0] = &count;
    dst[1] = &sum;
    dst[2] = &x;
    *found = false;
    if (!bson_iter_init_find(&it, doc, field)) {
        goto done;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &sub)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "%s must be an object", field);
    }
    for (int i = 0; i < 3; i++) {
        bson_iter_t f = sub;
        if (!bson_iter_find(&f, names[i])) {
            SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "%s lacks %s", field, names[i]);
        }
        if (!BSON_ITER_HOLDS_INT64(&f)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "%s.%s must be a long", field, names[i]);
        }
        *dst[i] = bson_iter_int64(&f);
    }
    d->count = count;
    d->sum = (uint64_t)sum;
    d->xor_ = (uint64_t)x;
    *found = true;
done:
    return ret;
}

void
mig_digest_format(const mig_digest_t *d, char *buf, size_t len)
{
    snprintf(buf, len, "count=%" PRId64 " sum=%016" PRIx64 " xor=%016" PRIx64, d->count, d->sum,
             d->xor_);
}

static int
digest_doc(void *arg, const bson_t *doc, shl_status_t *st)
{
    (void)st;
    mig_digest_add(arg, bson_get_data(doc), doc->len);
    return 0;
}

int
mig_range_digest(shard_state_t *s, const char *ns, const shl_uuid_t *uuid, const bson_t *pattern,
                 const bson_t *min, const bson_t *max, mig_digest_t *out, shl_status_t *st)
{
    int ret = 0;
    bool present;
    mig_digest_t d;

    memset(&d, 0, sizeof(d));
    SHL_ERR(mig_range_walk(s, ns, uuid, pattern, min, max, true, digest_doc, &d, &present, st));
    if (!present) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND,
                 "%s was dropped or recreated during the migration", ns);
    }
    *out = d;
done:
    return ret;
}
