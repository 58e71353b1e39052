/*
 * event_split.c -- change stream event fragments ($changeStreamSplitLargeEvent).
 */
#include "bson/event_split.h"

#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "bson/resume_token.h"

/* Room kept in each fragment for its _id and splitEvent (a token is at most a few KB). */
#define FRAGMENT_OVERHEAD (64 * 1024)

bool
shl_event_is_fragment_of(const char *frag_hex, const char *event_hex)
{
    size_t n = strlen(event_hex);
    return n >= 2 && strlen(frag_hex) > n && strncmp(frag_hex, event_hex, n - 2) == 0;
}

/* One fragment: _id (fragment 'i''s token), splitEvent {fragment: i + 1, of}, then the fields
 * [from, to) of 'ev' (counted without _id). */
static bson_t *
fragment_new(const bson_t *ev, const char *event_hex, size_t i, size_t of, size_t from,
             size_t to)
{
    bson_t *f = bson_new(), d;
    bson_iter_t it;
    char *hex = shl_resume_token_fragment_hex(event_hex, (int64_t)i);
    size_t k = 0;

    BSON_APPEND_DOCUMENT_BEGIN(f, "_id", &d);
    BSON_APPEND_UTF8(&d, "_data", hex);
    bson_append_document_end(f, &d);
    BSON_APPEND_DOCUMENT_BEGIN(f, "splitEvent", &d);
    BSON_APPEND_INT32(&d, "fragment", (int32_t)(i + 1));
    BSON_APPEND_INT32(&d, "of", (int32_t)of);
    bson_append_document_end(f, &d);
    bson_iter_init(&it, ev);
    while (shl_iter_next(&it)) {
        bool id = strcmp(shl_iter_key(&it), "_id") == 0;
        if (!id && k >= from && k < to) {
            bson_append_iter(f, NULL, 0, &it);
        }
        k += !id;
    }
    bson_free(hex);
    return f;
}

int
shl_event_split(const bson_t *ev, const char *event_hex, const char *skip_hex, size_t max_size,
                bson_t ***frags, size_t *n, shl_status_t *st)
{
    size_t *bounds = NULL, nb = 0, cur = 5, k = 0;
    bson_iter_t it;
    bool skipping = skip_hex != NULL && shl_event_is_fragment_of(skip_hex, event_hex);
    int ret = 0;

    *frags = NULL;
    *n = 0;
    bounds = bson_malloc0((ev->len / 5 + 2) * sizeof(*bounds));
    bounds[nb++] = 0;
    bson_iter_init(&it, ev);
    while (shl_iter_next(&it)) {
        size_t flen = (size_t)(it.next_off - it.off);
        if (strcmp(shl_iter_key(&it), "_id") == 0) {
            continue;
        }
        if (flen + FRAGMENT_OVERHEAD > max_size) {
            SHL_FAIL(st, SHL_CODE_BSON_OBJECT_TOO_LARGE,
                     "Cannot split the change stream event: its field '%s' alone is %zu bytes, "
                     "more than a fragment can hold",
                     shl_iter_key(&it), flen);
        }
        if (cur + flen + FRAGMENT_OVERHEAD > max_size) {
            bounds[nb++] = k;
            cur = 5;
        }
        cur += flen;
        k++;
    }
    bounds[nb] = k;
    *frags = bson_malloc0(nb * sizeof(**frags));
    for (size_t i = 0; i < nb; i++) {
        bson_t *f = fragment_new(ev, event_hex, i, nb, bounds[i], bounds[i + 1]);
        bson_t id;
        const char *fh;
        if (skipping && shl_bson_get_subdoc(f, "_id", &id) &&
            (fh = shl_resume_token_doc_hex(&id)) != NULL && strcmp(fh, skip_hex) <= 0) {
            bson_destroy(f);
            continue;
        }
        (*frags)[(*n)++] = f;
    }
done:
    bson_free(bounds);
    return ret;
}
