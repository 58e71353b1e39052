/*
 * index_text.c -- the text index's key generator and spec normalisation (docs/design/
 * text_search.md): one key per distinct stemmed term of a document, (prefix values, term,
 * score, suffix values), from query/text.h's shl_text_index_terms.
 */
#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_path.h"
#include "bson/keystring.h"
#include "db/db_private.h"
#include "db/index_kinds.h"
#include "query/text.h"

typedef struct text_state {
    shl_text_index_t *ti;
    char **prefix, **suffix; /* the key pattern's fields around _fts/_ftsx */
    size_t nprefix, nsuffix;
} text_state_t;

typedef struct text_emit {
    const text_state_t *s;
    const bson_t *doc;
    shl_keyset_t *keys;
} text_emit_t;

static void
append_path_value(shl_keystring_t *ks, const bson_t *doc, const char *path)
{
    bson_value_t v;
    if (!shl_bson_path_get_value(doc, path, &v)) {
        v.value_type = BSON_TYPE_NULL;
    }
    shl_keystring_append_value(ks, &v, false);
}

static void
emit_term(void *arg, const char *term, size_t len, double score)
{
    text_emit_t *e = arg;
    shl_keystring_t ks;
    bson_value_t t, sc;
    shl_keystring_init(&ks);
    for (size_t i = 0; i < e->s->nprefix; i++) {
        append_path_value(&ks, e->doc, e->s->prefix[i]);
    }
    t.value_type = BSON_TYPE_UTF8;
    t.value.v_utf8.str = (char *)(uintptr_t)term; /* read only by the encoder */
    t.value.v_utf8.len = (uint32_t)len;
    shl_keystring_append_value(&ks, &t, false);
    sc.value_type = BSON_TYPE_DOUBLE;
    sc.value.v_double = score;
    shl_keystring_append_value(&ks, &sc, false);
    for (size_t i = 0; i < e->s->nsuffix; i++) {
        append_path_value(&ks, e->doc, e->s->suffix[i]);
    }
    shl_keyset_add(e->keys, ks.data, ks.len);
    shl_keystring_cleanup(&ks);
}

static int
text_gen(const shl_keygen_t *kg, const bson_t *doc, shl_keyset_t *keys, shl_status_t *st)
{
    const text_state_t *s = kg->state;
    text_emit_t e = {s, doc, keys};
    return shl_text_index_terms(s->ti, doc, emit_term, &e, st);
}

static void
text_dup_key_value(const shl_keygen_t *kg, const bson_t *doc, bson_t *out)
{
    (void)kg;
    (void)doc;
    bson_init(out);
}

static void
strv_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bson_free(v[i]);
    }
    bson_free(v);
}

static void
text_destroy(shl_keygen_t *kg)
{
    text_state_t *s = kg->state;
    shl_text_index_destroy(s->ti);
    strv_free(s->prefix, s->nprefix);
    strv_free(s->suffix, s->nsuffix);
    bson_free(s);
    bson_free(kg);
}

bool
db_index_is_text(const bson_t *spec)
{
    bson_iter_t it, k;
    bool text = false;
    if (bson_iter_init_find(&it, spec, "key") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &k)) {
        while (!text && shl_iter_next(&k)) {
            text = BSON_ITER_HOLDS_UTF8(&k) && strcmp(bson_iter_utf8(&k, NULL), "text") == 0;
        }
    }
    return text;
}

int
db_text_keygen_new(const bson_t *spec, shl_keygen_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_t norm = BSON_INITIALIZER;
    bson_iter_t it, k;
    bool after = false;
    text_state_t *s = bson_malloc0(sizeof(*s));
    shl_keygen_t *kg = NULL;

    *out = NULL;
    SHL_ERR(shl_text_index_new(spec, &s->ti, st));
    /* The normalised key names the prefix and suffix fields around _fts/_ftsx. */
    shl_text_index_append_normalized(s->ti, &norm);
    bson_iter_init_find(&it, &norm, "key");
    bson_iter_recurse(&it, &k);
    while (shl_iter_next(&k)) {
        const char *f = shl_iter_key(&k);
        if (strcmp(f, "_fts") == 0 || strcmp(f, "_ftsx") == 0) {
            after = true;
        } else if (!after) {
            s->prefix = bson_realloc(s->prefix, (s->nprefix + 1) * sizeof(char *));
            s->prefix[s->nprefix++] = bson_strdup(f);
        } else {
            s->suffix = bson_realloc(s->suffix, (s->nsuffix + 1) * sizeof(char *));
            s->suffix[s->nsuffix++] = bson_strdup(f);
        }
    }
    kg = bson_malloc0(sizeof(*kg));
    kg->gen = text_gen;
    kg->dup_key_value = text_dup_key_value;
    kg->destroy = text_destroy;
    kg->state = s;
    s = NULL;
    *out = kg;
done:
    if (s != NULL) {
        shl_text_index_destroy(s->ti);
        strv_free(s->prefix, s->nprefix);
        strv_free(s->suffix, s->nsuffix);
        bson_free(s);
    }
    bson_destroy(&norm);
    return ret;
}

int
db_text_index_normalize(const bson_t *spec, bson_t *out, shl_status_t *st)
{
    static const char *const text_fields[] = {
        "key", "weights", "default_language", "language_override", "textIndexVersion", NULL};
    int ret = 0;
    shl_text_index_t *ti = NULL;
    bson_t norm = BSON_INITIALIZER;
    bson_iter_t it, nit;

    bson_init(out);
    SHL_ERR(shl_text_index_new(spec, &ti, st));
    shl_text_index_append_normalized(ti, &norm);
    /* MongoDB's order: the key where it was, the text options last (listIndexes). */
    bson_iter_init(&it, spec);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bool skip = false;
        for (size_t i = 0; text_fields[i] != NULL && !skip; i++) {
            skip = strcmp(k, text_fields[i]) == 0;
        }
        if (!skip) {
            bson_append_iter(out, k, -1, &it);
        } else if (strcmp(k, "key") == 0 && bson_iter_init_find(&nit, &norm, "key")) {
            bson_append_iter(out, "key", 3, &nit);
        }
    }
    bson_iter_init(&nit, &norm);
    while (shl_iter_next(&nit)) {
        if (strcmp(shl_iter_key(&nit), "key") != 0) {
            bson_append_iter(out, NULL, 0, &nit);
        }
    }
done:
    bson_destroy(&norm);
    shl_text_index_destroy(ti);
    return ret;
}
