/*
 * update_description.c -- see update_description.h. One walk of both documents: a field only
 * in 'before' is removed, one only in 'after' or of another type is updated whole, two
 * documents recurse, two arrays compare element by element (a shorter 'after' is a truncation
 * and its changed elements are updated as "a.<i>").
 */
#include "bson/update_description.h"

#include <stdio.h>
#include <string.h>

#include "bson/bson_compare.h"
#include "bson/bson_iter.h"

typedef struct desc {
    bson_t upd, rem, trunc;
    uint32_t n_rem, n_trunc;
} desc_t;

static void
path_join(char *out, size_t n, const char *prefix, const char *key)
{
    snprintf(out, n, "%s%s%s", prefix, prefix[0] != '\0' ? "." : "", key);
}

/* Same type and the same value (1 and 1.0 differ: the type changed). */
static bool
same_value(const bson_iter_t *a, const bson_iter_t *b)
{
    if (shl_iter_type(a) != shl_iter_type(b)) {
        return false;
    }
    bson_iter_t x = *a, y = *b;
    return shl_bson_value_compare(bson_iter_value(&x), bson_iter_value(&y)) == 0;
}

static void diff_docs(desc_t *d, const bson_iter_t *before, const bson_iter_t *after,
                      const char *prefix, int depth);

static void
diff_arrays(desc_t *d, const bson_iter_t *before, const bson_iter_t *after, const char *path,
            int depth)
{
    bson_iter_t b, a;
    uint32_t n_before = 0, n_after = 0;
    bool b_ok;

    if (!bson_iter_recurse(before, &b) || !bson_iter_recurse(after, &a)) {
        return;
    }
    b_ok = shl_iter_next(&b);
    while (shl_iter_next(&a)) {
        char key[16], sub[1024];
        snprintf(key, sizeof(key), "%u", n_after);
        path_join(sub, sizeof(sub), path, key);
        if (!b_ok) {
            bson_append_iter(&d->upd, sub, -1, &a);
        } else {
            n_before++;
            if (!same_value(&b, &a)) {
                if (BSON_ITER_HOLDS_DOCUMENT(&b) && BSON_ITER_HOLDS_DOCUMENT(&a) && depth < 100) {
                    diff_docs(d, &b, &a, sub, depth + 1);
                } else {
                    bson_append_iter(&d->upd, sub, -1, &a);
                }
            }
            b_ok = shl_iter_next(&b);
        }
        n_after++;
    }
    while (b_ok) {
        n_before++;
        b_ok = shl_iter_next(&b);
    }
    if (n_after < n_before) {
        bson_t t;
        char key[16];
        snprintf(key, sizeof(key), "%u", d->n_trunc++);
        bson_append_document_begin(&d->trunc, key, -1, &t);
        BSON_APPEND_UTF8(&t, "field", path);
        BSON_APPEND_INT32(&t, "newSize", (int32_t)n_after);
        bson_append_document_end(&d->trunc, &t);
    }
}

static void
diff_docs(desc_t *d, const bson_iter_t *before, const bson_iter_t *after, const char *prefix,
          int depth)
{
    bson_iter_t b, a, find;

    if (!bson_iter_recurse(before, &b) || !bson_iter_recurse(after, &a)) {
        return;
    }
    while (shl_iter_next(&b)) {
        const char *k = shl_iter_key(&b);
        if (!bson_iter_recurse(after, &find) || !bson_iter_find(&find, k)) {
            char path[1024], key[16];
            path_join(path, sizeof(path), prefix, k);
            snprintf(key, sizeof(key), "%u", d->n_rem++);
            BSON_APPEND_UTF8(&d->rem, key, path);
        }
    }
    while (shl_iter_next(&a)) {
        const char *k = shl_iter_key(&a);
        char path[1024];
        path_join(path, sizeof(path), prefix, k);
        if (!bson_iter_recurse(before, &find) || !bson_iter_find(&find, k)) {
            bson_append_iter(&d->upd, path, -1, &a);
        } else if (same_value(&find, &a)) {
            continue;
        } else if (BSON_ITER_HOLDS_DOCUMENT(&find) && BSON_ITER_HOLDS_DOCUMENT(&a) && depth < 100) {
            diff_docs(d, &find, &a, path, depth + 1);
        } else if (BSON_ITER_HOLDS_ARRAY(&find) && BSON_ITER_HOLDS_ARRAY(&a) && depth < 100) {
            diff_arrays(d, &find, &a, path, depth + 1);
        } else {
            bson_append_iter(&d->upd, path, -1, &a);
        }
    }
}

void
shl_update_description(const bson_t *before, const bson_t *after, bson_t *out)
{
    desc_t d;
    bson_t wrap = BSON_INITIALIZER;
    bson_iter_t b, a;

    bson_init(&d.upd);
    bson_init(&d.rem);
    bson_init(&d.trunc);
    d.n_rem = d.n_trunc = 0;
    BSON_APPEND_DOCUMENT(&wrap, "b", before);
    BSON_APPEND_DOCUMENT(&wrap, "a", after);
    if (bson_iter_init_find(&b, &wrap, "b") && bson_iter_init_find(&a, &wrap, "a")) {
        diff_docs(&d, &b, &a, "", 0);
    }
    BSON_APPEND_DOCUMENT(out, "updatedFields", &d.upd);
    BSON_APPEND_ARRAY(out, "removedFields", &d.rem);
    BSON_APPEND_ARRAY(out, "truncatedArrays", &d.trunc);
    bson_destroy(&d.upd);
    bson_destroy(&d.rem);
    bson_destroy(&d.trunc);
    bson_destroy(&wrap);
}
