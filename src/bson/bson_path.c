/*
 * bson_path.c -- dotted-path lookup without array expansion (bson_path.h).
 */
#include "bson/bson_iter.h"
#include "bson/bson_path.h"

#include <string.h>

bool
shl_bson_path_is_array_index(const char *comp, size_t len)
{
    if (len == 0 || len > 9 || (len > 1 && comp[0] == '0')) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (comp[i] < '0' || comp[i] > '9') {
            return false;
        }
    }
    return true;
}

/* Position 'it' (initialised on a document) on the element named comp[0..len). */
static bool
find_exact(bson_iter_t *it, const char *comp, size_t len)
{
    while (shl_iter_next(it)) {
        if (shl_iter_key_len(it) == len && memcmp(shl_iter_key(it), comp, len) == 0) {
            return true;
        }
    }
    return false;
}

bool
shl_bson_path_get_n(const bson_t *doc, const char *path, size_t len, bson_iter_t *out)
{
    bson_iter_t it;
    const char *comp = path, *end = path + len;
    bool in_array = false;

    if (!bson_iter_init(&it, doc)) {
        return false;
    }
    for (;;) {
        const char *dot = memchr(comp, '.', (size_t)(end - comp));
        size_t clen = (size_t)((dot ? dot : end) - comp);
        if (in_array && !shl_bson_path_is_array_index(comp, clen)) {
            return false;
        }
        if (!find_exact(&it, comp, clen)) {
            return false;
        }
        if (dot == NULL) {
            *out = it;
            return true;
        }
        bson_type_t t = shl_iter_type(&it);
        bson_iter_t child;
        if ((t != BSON_TYPE_DOCUMENT && t != BSON_TYPE_ARRAY) || !bson_iter_recurse(&it, &child)) {
            return false;
        }
        in_array = t == BSON_TYPE_ARRAY;
        it = child;
        comp = dot + 1;
    }
}

bool
shl_bson_path_get(const bson_t *doc, const char *path, bson_iter_t *out)
{
    return shl_bson_path_get_n(doc, path, strlen(path), out);
}

bool
shl_bson_path_get_value(const bson_t *doc, const char *path, bson_value_t *out)
{
    bson_iter_t it;
    if (!shl_bson_path_get(doc, path, &it)) {
        return false;
    }
    *out = *bson_iter_value(&it);
    return true;
}
