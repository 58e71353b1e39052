/*
 * bson_iter.h -- inline stepping of libbson's bson_iter_t, for the hot loops.
 *
 * libbson's bson_iter_next, bson_iter_key and bson_iter_type are calls into the shared
 * library (about 90 instructions per element for the first). These do the same work inline
 * and leave the iterator in exactly the state libbson's would (every field, on success and on
 * failure), so any bson_iter_* function can be used on an iterator they stepped, and they can
 * step one libbson started. bson_iter_test.c checks that equivalence against the installed
 * libbson, element by element, on valid and corrupt documents.
 */
#ifndef SHL_BSON_ITER_H
#define SHL_BSON_ITER_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t
shl_iter_u32_at(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return BSON_UINT32_FROM_LE(v);
}

/* shl_iter__invalid -- libbson's "mark invalid": the iterator is spent. */
static inline bool
shl_iter__invalid(bson_iter_t *it, uint32_t err_off)
{
    it->err_off = err_off;
    it->raw = NULL;
    it->len = 0;
    it->next_off = 0;
    return false;
}

/* shl_iter__string -- a length-prefixed, NUL-terminated string at o (utf8, code, symbol). */
static inline bool
shl_iter__string(bson_iter_t *it, uint32_t o, uint32_t len)
{
    uint32_t l;

    if (o + 4 >= len) {
        return shl_iter__invalid(it, o);
    }
    it->d2 = o + 4;
    l = shl_iter_u32_at(it->raw + o);
    if (l > len - (o + 4)) {
        return shl_iter__invalid(it, o);
    }
    it->next_off = o + 4 + l;
    if (l == 0 || it->next_off >= len) {
        return shl_iter__invalid(it, o);
    }
    if (it->raw[it->d2 + l - 1] != '\0') {
        return shl_iter__invalid(it, o + 4 + l - 1);
    }
    return true;
}

/* shl_iter__rare -- the types hot loops seldom meet; defined in bson_iter.c. */
bool shl_iter__rare(bson_iter_t *it, uint32_t o, uint32_t len);

/*
 * shl_iter_next --
 *     bson_iter_next: advance to the next element; false at the end of the document or on
 *     corrupt data (the iterator is then spent, as libbson leaves it).
 */
static inline bool
shl_iter_next(bson_iter_t *it)
{
    const uint8_t *data = it->raw;
    uint32_t len = it->len, o;
    bool ok = true;

    if (data == NULL) {
        return false;
    }
    it->off = it->next_off;
    it->type = it->off;
    it->key = it->off + 1;
    it->d1 = it->d2 = it->d3 = it->d4 = 0;
    for (o = it->key; o < len && data[o] != 0; o++) {
    }
    if (o >= len) {
        return shl_iter__invalid(it, it->err_off);
    }
    it->d1 = ++o;
    switch (data[it->type]) {
    case BSON_TYPE_DATE_TIME:
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT64:
    case BSON_TYPE_TIMESTAMP:
        it->next_off = o + 8;
        break;
    case BSON_TYPE_INT32:
        it->next_off = o + 4;
        break;
    case BSON_TYPE_OID:
        it->next_off = o + 12;
        break;
    case BSON_TYPE_UTF8:
        ok = shl_iter__string(it, o, len);
        break;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY: {
        uint32_t l;
        if (o >= len - 4) {
            return shl_iter__invalid(it, o);
        }
        l = shl_iter_u32_at(data + o);
        if (l > len || l > len - o) {
            return shl_iter__invalid(it, o);
        }
        it->next_off = o + l;
        break;
    }
    case BSON_TYPE_BOOL:
        if (o >= len || (data[o] != 0 && data[o] != 1)) {
            return shl_iter__invalid(it, o);
        }
        it->next_off = o + 1;
        break;
    case BSON_TYPE_NULL:
        it->next_off = o;
        break;
    default:
        ok = shl_iter__rare(it, o, len);
        break;
    }
    if (!ok) {
        return false;
    }
    if (it->next_off >= len) {
        return shl_iter__invalid(it, o);
    }
    it->err_off = 0;
    return true;
}

/* shl_iter_key -- bson_iter_key, inline. */
static inline const char *
shl_iter_key(const bson_iter_t *it)
{
    return (const char *)(it->raw + it->key);
}

/* shl_iter_key_len -- bson_iter_key_len, inline (the key's length without its NUL). */
static inline uint32_t
shl_iter_key_len(const bson_iter_t *it)
{
    return it->d1 - it->key - 1;
}

/* shl_iter_type -- bson_iter_type, inline. */
static inline bson_type_t
shl_iter_type(const bson_iter_t *it)
{
    return (bson_type_t)it->raw[it->type];
}

/* shl_iter_key_is -- whether the current key is exactly 'key' (a NUL-terminated string). */
static inline bool
shl_iter_key_is(const bson_iter_t *it, const char *key)
{
    const char *k = shl_iter_key(it);
    return k[0] == key[0] && strcmp(k, key) == 0;
}

#endif /* SHL_BSON_ITER_H */
