/*
 * update_diff.c -- see update_diff.h. The diff is computed by one walk of both documents (the
 * fields of 'after' that keep their relative order in 'before' are updated in place, the rest
 * inserted at the end), applied by one walk of the old document, and described by one walk of
 * the diff.
 */
#include "bson/update_diff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bson/bson_compare.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"

/* Nesting beyond this is left whole (BSON documents nest at most ~100 deep in practice). */
#define MAX_DEPTH 180

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

/* ---------------------------------------------------------------- computing */

static void diff_doc(const bson_t *b, const bson_t *a, bson_t *out, int depth);
static void diff_array(const bson_t *b, const bson_t *a, bson_t *out, int depth);

/*
 * The change of one value 'bv' -> 'av' (different) under 'key': a sub-diff "s<key>" into 'subs'
 * for two documents or two arrays, else the new value under 'key' into 'upd'.
 */
static void
diff_value(const char *key, const bson_iter_t *bv, const bson_iter_t *av, bson_t *upd,
           bson_t *subs, int depth)
{
    bson_t bsub, asub, sd = BSON_INITIALIZER;
    bool docs = BSON_ITER_HOLDS_DOCUMENT(bv) && BSON_ITER_HOLDS_DOCUMENT(av);
    bool arrays = BSON_ITER_HOLDS_ARRAY(bv) && BSON_ITER_HOLDS_ARRAY(av);

    if ((docs || arrays) && depth < MAX_DEPTH && shl_bson_iter_view(bv, &bsub) && shl_bson_iter_view(av, &asub)) {
        char *skey = bson_strdup_printf("s%s", key);
        if (docs) {
            diff_doc(&bsub, &asub, &sd, depth + 1);
        } else {
            diff_array(&bsub, &asub, &sd, depth + 1);
        }
        if (!bson_empty(&sd)) {
            BSON_APPEND_DOCUMENT(subs, skey, &sd);
        }
        bson_free(skey);
    } else {
        bson_append_iter(upd, key, -1, av);
    }
    bson_destroy(&sd);
}

/* Advance 'it' to the next field of 'b' that 'a' keeps; false at the end. */
static bool
next_kept(bson_iter_t *it, const bson_t *a)
{
    bson_iter_t f;
    while (shl_iter_next(it)) {
        if (bson_iter_init_find(&f, a, shl_iter_key(it))) {
            return true;
        }
    }
    return false;
}

static void
diff_doc(const bson_t *b, const bson_t *a, bson_t *out, int depth)
{
    bson_t del = BSON_INITIALIZER, upd = BSON_INITIALIZER, ins = BSON_INITIALIZER;
    bson_t subs = BSON_INITIALIZER;
    bson_iter_t bi, ai, f;
    bool ordered = true, b_more;

    if (bson_iter_init(&bi, b)) {
        while (shl_iter_next(&bi)) {
            if (!bson_iter_init_find(&f, a, shl_iter_key(&bi))) {
                BSON_APPEND_BOOL(&del, shl_iter_key(&bi), false);
            }
        }
    }
    /* bi walks the fields of 'b' that survive, in order, beside the fields of 'a'. */
    b_more = bson_iter_init(&bi, b) && next_kept(&bi, a);
    if (bson_iter_init(&ai, a)) {
        while (shl_iter_next(&ai)) {
            const char *k = shl_iter_key(&ai);
            bool in_b = bson_iter_init_find(&f, b, k);
            if (ordered && in_b && b_more && strcmp(shl_iter_key(&bi), k) == 0) {
                if (!same_value(&bi, &ai)) {
                    diff_value(k, &bi, &ai, &upd, &subs, depth);
                }
                b_more = next_kept(&bi, a);
            } else if (ordered && !in_b && !b_more) {
                bson_append_iter(&ins, k, -1, &ai);
            } else {
                /* Out of order: removed from its place and appended, as are all after it. */
                ordered = false;
                bson_append_iter(&ins, k, -1, &ai);
            }
        }
    }
    if (!bson_empty(&del)) {
        BSON_APPEND_DOCUMENT(out, "d", &del);
    }
    if (!bson_empty(&upd)) {
        BSON_APPEND_DOCUMENT(out, "u", &upd);
    }
    if (!bson_empty(&ins)) {
        BSON_APPEND_DOCUMENT(out, "i", &ins);
    }
    bson_concat(out, &subs);
    bson_destroy(&del);
    bson_destroy(&upd);
    bson_destroy(&ins);
    bson_destroy(&subs);
}

static void
diff_array(const bson_t *b, const bson_t *a, bson_t *out, int depth)
{
    bson_t upd = BSON_INITIALIZER;
    bson_iter_t bi, ai;
    uint32_t nb = 0, na = 0;
    bool b_more = bson_iter_init(&bi, b) && shl_iter_next(&bi);

    if (bson_iter_init(&ai, a)) {
        while (shl_iter_next(&ai)) {
            char key[16];
            snprintf(key, sizeof(key), "%u", na);
            if (!b_more) {
                char ukey[20];
                snprintf(ukey, sizeof(ukey), "u%u", na);
                bson_append_iter(&upd, ukey, -1, &ai);
            } else {
                if (!same_value(&bi, &ai)) {
                    /* diff_value names the update "<index>"; the array form is "u<index>". */
                    bson_t one = BSON_INITIALIZER;
                    diff_value(key, &bi, &ai, &one, &upd, depth);
                    if (!bson_empty(&one)) {
                        char ukey[20];
                        bson_iter_t v;
                        snprintf(ukey, sizeof(ukey), "u%u", na);
                        bson_iter_init(&v, &one);
                        shl_iter_next(&v);
                        bson_append_iter(&upd, ukey, -1, &v);
                    }
                    bson_destroy(&one);
                }
                nb++;
                b_more = shl_iter_next(&bi);
            }
            na++;
        }
    }
    while (b_more) {
        nb++;
        b_more = shl_iter_next(&bi);
    }
    if (na < nb || !bson_empty(&upd)) {
        BSON_APPEND_BOOL(out, "a", true);
        if (na < nb) {
            BSON_APPEND_INT32(out, "l", (int32_t)na);
        }
        bson_concat(out, &upd);
    }
    bson_destroy(&upd);
}

void
shl_update_diff_compute(const bson_t *before, const bson_t *after, bson_t *out)
{
    diff_doc(before, after, out, 0);
}

void
shl_update_diff_entry_o(const bson_t *before, const bson_t *after, bson_t *out)
{
    bson_t diff;

    BSON_APPEND_INT32(out, "$v", 2);
    BSON_APPEND_DOCUMENT_BEGIN(out, "diff", &diff);
    shl_update_diff_compute(before, after, &diff);
    bson_append_document_end(out, &diff);
}

bool
shl_update_diff_of(const bson_t *o, bson_t *diff)
{
    bson_iter_t it;

    if (!bson_iter_init(&it, o) || !shl_iter_next(&it) || strcmp(shl_iter_key(&it), "$v") != 0 ||
        !BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_int64(&it) != 2 || !shl_iter_next(&it) ||
        strcmp(shl_iter_key(&it), "diff") != 0 || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return false;
    }
    return shl_bson_iter_view(&it, diff);
}

/* ---------------------------------------------------------------- applying */

static bool apply_doc(const bson_t *pre, const bson_t *diff, bson_t *out, int depth);
static bool apply_array(const bson_t *pre, const bson_t *diff, bson_t *out, int depth);

/* Whether 'diff' is an array diff (a: true). */
static bool
is_array_diff(const bson_t *diff)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, diff, "a") && BSON_ITER_HOLDS_BOOL(&it) &&
           bson_iter_bool(&it);
}

/* Append under 'key' the value at 'pv' with the sub-diff at 'sv' applied (or 'pv' unchanged
 * when the types do not match, as MongoDB's idempotent application does). */
static bool
append_applied(bson_t *out, const char *key, const bson_iter_t *pv, const bson_iter_t *sv,
               int depth)
{
    bson_t pre, sub, res;
    bool ok = true;

    if (!BSON_ITER_HOLDS_DOCUMENT(sv) || !shl_bson_iter_view(sv, &sub) || depth >= MAX_DEPTH) {
        return false;
    }
    if (!shl_bson_iter_view(pv, &pre) || BSON_ITER_HOLDS_ARRAY(pv) != is_array_diff(&sub)) {
        return bson_append_iter(out, key, -1, pv);
    }
    if (BSON_ITER_HOLDS_ARRAY(pv)) {
        ok = apply_array(&pre, &sub, &res, depth + 1);
        ok = ok && bson_append_array(out, key, -1, &res);
    } else {
        ok = apply_doc(&pre, &sub, &res, depth + 1);
        ok = ok && bson_append_document(out, key, -1, &res);
    }
    bson_destroy(&res);
    return ok;
}

static bool
apply_doc(const bson_t *pre, const bson_t *diff, bson_t *out, int depth)
{
    bson_t del, upd, ins, empty = BSON_INITIALIZER;
    bson_iter_t it, f;
    bool ok = true;

    bson_init(out);
    bson_init_static(&del, bson_get_data(&empty), empty.len);
    bson_init_static(&upd, bson_get_data(&empty), empty.len);
    bson_init_static(&ins, bson_get_data(&empty), empty.len);
    if (!bson_iter_init(&it, diff)) {
        ok = false;
    }
    while (ok && shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bson_t *sect = strcmp(k, "d") == 0   ? &del
                       : strcmp(k, "u") == 0 ? &upd
                       : strcmp(k, "i") == 0 ? &ins
                                             : NULL;
        if (sect != NULL) {
            ok = BSON_ITER_HOLDS_DOCUMENT(&it) && shl_bson_iter_view(&it, sect);
        } else {
            /* "s" alone is the sub-diff of a field named "". */
            ok = k[0] == 's' && BSON_ITER_HOLDS_DOCUMENT(&it);
        }
    }
    if (ok && bson_iter_init(&it, pre)) {
        while (ok && shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (bson_iter_init_find(&f, &del, k) || bson_iter_init_find(&f, &ins, k)) {
                continue;
            }
            if (bson_iter_init_find(&f, &upd, k)) {
                ok = bson_append_iter(out, k, -1, &f);
                continue;
            }
            {
                char *skey = bson_strdup_printf("s%s", k);
                bool has_sub = bson_iter_init_find(&f, diff, skey);
                bson_free(skey);
                ok = has_sub ? append_applied(out, k, &it, &f, depth)
                             : bson_append_iter(out, k, -1, &it);
            }
        }
    }
    /* Updates of fields the document lacks are appended, then the inserts, in order. */
    if (ok && bson_iter_init(&it, &upd)) {
        while (ok && shl_iter_next(&it)) {
            if (!bson_iter_init_find(&f, pre, shl_iter_key(&it))) {
                ok = bson_append_iter(out, shl_iter_key(&it), -1, &it);
            }
        }
    }
    if (ok && bson_iter_init(&it, &ins)) {
        while (ok && shl_iter_next(&it)) {
            ok = bson_append_iter(out, shl_iter_key(&it), -1, &it);
        }
    }
    if (!ok) {
        bson_reinit(out);
    }
    bson_destroy(&empty);
    return ok;
}

/* A decimal array index after the one-letter prefix of 'k' ("u3", "s12"); -1 if none. */
static int64_t
index_of(const char *k)
{
    char *end = NULL;
    long long v;

    if (k[1] < '0' || k[1] > '9') {
        return -1;
    }
    v = strtoll(k + 1, &end, 10);
    return end != NULL && *end == '\0' && v >= 0 && v < INT32_MAX ? (int64_t)v : -1;
}

static bool
apply_array(const bson_t *pre, const bson_t *diff, bson_t *out, int depth)
{
    bson_iter_t it, pi, f;
    int64_t new_len = -1, max_u = -1, nb = 0;
    bool ok = true, p_more;

    bson_init(out);
    if (!bson_iter_init(&it, diff)) {
        ok = false;
    }
    while (ok && shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "a") == 0) {
            continue;
        }
        if (strcmp(k, "l") == 0) {
            ok = BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_int64(&it) >= 0 &&
                 bson_iter_as_int64(&it) < INT32_MAX;
            new_len = ok ? bson_iter_as_int64(&it) : -1;
        } else if ((k[0] == 'u' || k[0] == 's') && index_of(k) >= 0) {
            if (k[0] == 'u' && index_of(k) > max_u) {
                max_u = index_of(k);
            }
        } else {
            ok = false;
        }
    }
    p_more = bson_iter_init(&pi, pre) && shl_iter_next(&pi);
    if (bson_iter_init(&it, pre)) {
        while (shl_iter_next(&it)) {
            nb++;
        }
    }
    if (new_len < 0) {
        new_len = nb > max_u + 1 ? nb : max_u + 1;
    }
    for (int64_t i = 0; ok && i < new_len; i++) {
        char key[24], ukey[24], skey[24];
        snprintf(key, sizeof(key), "%lld", (long long)i);
        snprintf(ukey, sizeof(ukey), "u%lld", (long long)i);
        snprintf(skey, sizeof(skey), "s%lld", (long long)i);
        if (bson_iter_init_find(&f, diff, ukey)) {
            ok = bson_append_iter(out, key, -1, &f);
        } else if (p_more && bson_iter_init_find(&f, diff, skey)) {
            ok = append_applied(out, key, &pi, &f, depth);
        } else if (p_more) {
            ok = bson_append_iter(out, key, -1, &pi);
        } else {
            ok = BSON_APPEND_NULL(out, key);
        }
        p_more = p_more && shl_iter_next(&pi);
    }
    if (!ok) {
        bson_reinit(out);
    }
    return ok;
}

bool
shl_update_diff_apply(const bson_t *pre, const bson_t *diff, bson_t *out)
{
    return apply_doc(pre, diff, out, 0);
}

/* ---------------------------------------------------------------- describing */

typedef struct comp {
    const char *name; /* a field name, or NULL for an array index */
    int64_t index;
} comp_t;

typedef struct describer {
    bson_t upd, rem, trunc, dis;
    uint32_t n_rem, n_trunc;
    bool disambiguate;
    comp_t path[MAX_DEPTH + 2];
    int depth;
} describer_t;

/* A field name that reads as an array index or holds a dot makes its path ambiguous. */
static bool
ambiguous_name(const char *name)
{
    bool digits = name[0] != '\0';
    for (const char *p = name; *p != '\0'; p++) {
        if (*p == '.') {
            return true;
        }
        digits = digits && *p >= '0' && *p <= '9';
    }
    return digits;
}

/* The dotted path of the first 'n' components; bson_free it. Notes it in disambiguatedPaths
 * when ambiguous. */
static char *
path_string(describer_t *d, int n)
{
    bson_string_t *s = bson_string_new(NULL);
    bool ambiguous = false;
    char *out;

    for (int i = 0; i < n; i++) {
        if (i > 0) {
            bson_string_append_c(s, '.');
        }
        if (d->path[i].name != NULL) {
            bson_string_append(s, d->path[i].name);
            ambiguous = ambiguous || ambiguous_name(d->path[i].name);
        } else {
            bson_string_append_printf(s, "%lld", (long long)d->path[i].index);
        }
    }
    out = bson_string_free(s, false);
    if (d->disambiguate && ambiguous && !bson_has_field(&d->dis, out)) {
        bson_t arr;
        BSON_APPEND_ARRAY_BEGIN(&d->dis, out, &arr);
        for (int i = 0; i < n; i++) {
            char key[16];
            snprintf(key, sizeof(key), "%d", i);
            if (d->path[i].name != NULL) {
                BSON_APPEND_UTF8(&arr, key, d->path[i].name);
            } else {
                BSON_APPEND_INT32(&arr, key, (int32_t)d->path[i].index);
            }
        }
        bson_append_array_end(&d->dis, &arr);
    }
    return out;
}

static void
note_updated(describer_t *d, const bson_iter_t *v)
{
    char *p = path_string(d, d->depth + 1);
    bson_append_iter(&d->upd, p, -1, v);
    bson_free(p);
}

static void describe_diff(describer_t *d, const bson_t *diff);

/* The entries of a d/u/i section, each under the current path + its field. */
static void
describe_section(describer_t *d, const bson_iter_t *sect, bool removed)
{
    bson_iter_t it;

    if (!bson_iter_recurse(sect, &it)) {
        return;
    }
    while (shl_iter_next(&it)) {
        d->path[d->depth].name = shl_iter_key(&it);
        if (removed) {
            char key[16], *p = path_string(d, d->depth + 1);
            snprintf(key, sizeof(key), "%u", d->n_rem++);
            BSON_APPEND_UTF8(&d->rem, key, p);
            bson_free(p);
        } else {
            note_updated(d, &it);
        }
    }
}

static void
describe_diff(describer_t *d, const bson_t *diff)
{
    bson_iter_t it;
    bool array = is_array_diff(diff);

    if (d->depth > MAX_DEPTH || !bson_iter_init(&it, diff)) {
        return;
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bson_t sub;
        if (array && strcmp(k, "l") == 0 && BSON_ITER_HOLDS_NUMBER(&it)) {
            bson_t t;
            char key[16], *p = path_string(d, d->depth);
            snprintf(key, sizeof(key), "%u", d->n_trunc++);
            BSON_APPEND_DOCUMENT_BEGIN(&d->trunc, key, &t);
            BSON_APPEND_UTF8(&t, "field", p);
            BSON_APPEND_INT32(&t, "newSize", (int32_t)bson_iter_as_int64(&it));
            bson_append_document_end(&d->trunc, &t);
            bson_free(p);
        } else if (array && k[0] == 'u' && index_of(k) >= 0) {
            d->path[d->depth] = (comp_t){NULL, index_of(k)};
            note_updated(d, &it);
        } else if (!array && (strcmp(k, "u") == 0 || strcmp(k, "i") == 0)) {
            describe_section(d, &it, false);
        } else if (!array && strcmp(k, "d") == 0) {
            describe_section(d, &it, true);
        } else if (k[0] == 's' && BSON_ITER_HOLDS_DOCUMENT(&it) &&
                   shl_bson_iter_view(&it, &sub) && (!array || index_of(k) >= 0)) {
            d->path[d->depth] = array ? (comp_t){NULL, index_of(k)} : (comp_t){k + 1, 0};
            d->depth++;
            describe_diff(d, &sub);
            d->depth--;
        }
    }
}

void
shl_update_diff_describe(const bson_t *diff, bool disambiguate, bson_t *out)
{
    describer_t *d = bson_malloc0(sizeof(*d));

    bson_init(&d->upd);
    bson_init(&d->rem);
    bson_init(&d->trunc);
    bson_init(&d->dis);
    d->disambiguate = disambiguate;
    describe_diff(d, diff);
    BSON_APPEND_DOCUMENT(out, "updatedFields", &d->upd);
    BSON_APPEND_ARRAY(out, "removedFields", &d->rem);
    BSON_APPEND_ARRAY(out, "truncatedArrays", &d->trunc);
    if (disambiguate) {
        BSON_APPEND_DOCUMENT(out, "disambiguatedPaths", &d->dis);
    }
    bson_destroy(&d->upd);
    bson_destroy(&d->rem);
    bson_destroy(&d->trunc);
    bson_destroy(&d->dis);
    bson_free(d);
}
