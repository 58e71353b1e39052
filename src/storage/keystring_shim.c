/*
 * keystring_shim.c -- the index layer's single door to KeyString encoding
 * (bson/keystring.h): index keys are built in a shl_kbuf_t (a shl_keystring_t) so the
 * storage code never depends on the byte format.
 */
#include "storage/storage_private.h"

#include <string.h>

void
shl_kbuf_init(shl_kbuf_t *b)
{
    shl_keystring_init(b);
}

void
shl_kbuf_cleanup(shl_kbuf_t *b)
{
    shl_keystring_cleanup(b);
}

void
shl_kbuf_append(shl_kbuf_t *b, const void *p, size_t n)
{
    /* Raw bytes (a stored key or a bound) copied into the buffer as they are. */
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 32;
        b->data = bson_realloc(b->data, b->cap);
    }
    if (n > 0) {
        memcpy(b->data + b->len, p, n);
    }
    b->len += n;
}

void
shl_kbuf_value(shl_kbuf_t *b, const bson_value_t *v, bool descending)
{
    shl_keystring_append_value(b, v, descending);
}

void
shl_kbuf_record_id(shl_kbuf_t *b, int64_t rid)
{
    shl_keystring_append_record_id(b, rid);
}
