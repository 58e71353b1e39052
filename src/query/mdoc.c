/*
 * mdoc.c -- the mutable BSON tree of mdoc.h.
 */
#include "bson/bson_iter.h"
#include "query/mdoc.h"

#include <string.h>

#include "bson/bson_compare.h"
#include "query/query_private.h"

mv_t *
mv_new_container(bson_type_t type)
{
    mv_t *m = bson_malloc0(sizeof(*m));
    m->type = type;
    return m;
}

mv_t *
mv_new_null(void)
{
    mv_t *m = bson_malloc0(sizeof(*m));
    m->type = BSON_TYPE_NULL;
    m->v.value_type = BSON_TYPE_NULL;
    return m;
}

static void
fill_container(mv_t *m, const bson_t *b)
{
    bson_iter_t it;
    bson_iter_init(&it, b);
    while (shl_iter_next(&it)) {
        mv_append(m, m->type == BSON_TYPE_DOCUMENT ? shl_iter_key(&it) : NULL,
                  mv_from_value(bson_iter_value(&it)));
    }
}

mv_t *
mv_from_value(const bson_value_t *v)
{
    mv_t *m;
    bson_t view;
    if (v->value_type == BSON_TYPE_DOCUMENT || v->value_type == BSON_TYPE_ARRAY) {
        m = mv_new_container(v->value_type);
        query_bson_view(v, &view);
        fill_container(m, &view);
        return m;
    }
    m = bson_malloc0(sizeof(*m));
    m->type = v->value_type;
    bson_value_copy(v, &m->v);
    return m;
}

mv_t *
mv_from_doc(const bson_t *doc)
{
    mv_t *m = mv_new_container(BSON_TYPE_DOCUMENT);
    fill_container(m, doc);
    return m;
}

mv_t *
mv_clone(const mv_t *m)
{
    mv_t *c;
    if (m->type != BSON_TYPE_DOCUMENT && m->type != BSON_TYPE_ARRAY) {
        c = bson_malloc0(sizeof(*c));
        c->type = m->type;
        bson_value_copy(&m->v, &c->v);
        return c;
    }
    c = mv_new_container(m->type);
    for (size_t i = 0; i < m->n; i++) {
        mv_append(c, m->names[i], mv_clone(m->kids[i]));
    }
    return c;
}

void
mv_free(mv_t *m)
{
    if (m == NULL) {
        return;
    }
    if (m->type == BSON_TYPE_DOCUMENT || m->type == BSON_TYPE_ARRAY) {
        for (size_t i = 0; i < m->n; i++) {
            bson_free(m->names[i]);
            mv_free(m->kids[i]);
        }
        bson_free(m->names);
        bson_free(m->kids);
    } else {
        bson_value_destroy(&m->v);
    }
    bson_free(m);
}

long
mv_find(const mv_t *c, const char *name)
{
    size_t idx;
    if (c->type == BSON_TYPE_DOCUMENT) {
        for (size_t i = 0; i < c->n; i++) {
            if (strcmp(c->names[i], name) == 0) {
                return (long)i;
            }
        }
        return -1;
    }
    if (c->type == BSON_TYPE_ARRAY && query_array_index(name, &idx) && idx < c->n) {
        return (long)idx;
    }
    return -1;
}

static void
grow(mv_t *c)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 4;
        c->kids = bson_realloc(c->kids, c->cap * sizeof(mv_t *));
        c->names = bson_realloc(c->names, c->cap * sizeof(char *));
    }
}

void
mv_append(mv_t *c, const char *name, mv_t *kid)
{
    mv_insert(c, c->n, name, kid);
}

void
mv_insert(mv_t *c, size_t pos, const char *name, mv_t *kid)
{
    grow(c);
    if (pos > c->n) {
        pos = c->n;
    }
    memmove(&c->kids[pos + 1], &c->kids[pos], (c->n - pos) * sizeof(mv_t *));
    memmove(&c->names[pos + 1], &c->names[pos], (c->n - pos) * sizeof(char *));
    c->kids[pos] = kid;
    c->names[pos] = (c->type == BSON_TYPE_DOCUMENT && name != NULL) ? bson_strdup(name) : NULL;
    c->n++;
}

void
mv_remove_at(mv_t *c, size_t i)
{
    bson_free(c->names[i]);
    mv_free(c->kids[i]);
    memmove(&c->kids[i], &c->kids[i + 1], (c->n - i - 1) * sizeof(mv_t *));
    memmove(&c->names[i], &c->names[i + 1], (c->n - i - 1) * sizeof(char *));
    c->n--;
}

void
mv_replace_at(mv_t *c, size_t i, mv_t *kid)
{
    mv_free(c->kids[i]);
    c->kids[i] = kid;
}

static void
serialize_container(const mv_t *m, bson_t *out)
{
    char buf[16];
    const char *k;
    for (size_t i = 0; i < m->n; i++) {
        if (m->type == BSON_TYPE_ARRAY) {
            bson_uint32_to_string((uint32_t)i, &k, buf, sizeof(buf));
            mv_append_to(out, k, m->kids[i]);
        } else {
            mv_append_to(out, m->names[i], m->kids[i]);
        }
    }
}

void
mv_append_to(bson_t *out, const char *key, const mv_t *m)
{
    bson_t child;
    if (m->type == BSON_TYPE_DOCUMENT) {
        bson_append_document_begin(out, key, -1, &child);
        serialize_container(m, &child);
        bson_append_document_end(out, &child);
    } else if (m->type == BSON_TYPE_ARRAY) {
        bson_append_array_begin(out, key, -1, &child);
        serialize_container(m, &child);
        bson_append_array_end(out, &child);
    } else {
        bson_append_value(out, key, -1, &m->v);
    }
}

void
mv_to_bson(const mv_t *doc, bson_t *out)
{
    serialize_container(doc, out);
}

void
mv_to_value(const mv_t *m, bson_value_t *out)
{
    bson_t tmp = BSON_INITIALIZER;
    bson_iter_t it;
    mv_append_to(&tmp, "v", m);
    bson_iter_init_find(&it, &tmp, "v");
    bson_value_copy(bson_iter_value(&it), out);
    bson_destroy(&tmp);
}

int
mv_compare_value(const mv_t *a, const bson_value_t *b)
{
    return mv_compare_value_coll(a, b, NULL); /* NULL: the simple comparison */
}

int
mv_compare_value_coll(const mv_t *a, const bson_value_t *b, const shl_collator_t *coll)
{
    bson_value_t va;
    int c;
    mv_to_value(a, &va);
    c = shl_bson_value_compare_coll(&va, b, coll);
    bson_value_destroy(&va);
    return c;
}

int
mv_compare_coll(const mv_t *a, const mv_t *b, const shl_collator_t *coll)
{
    bson_value_t vb;
    int c;
    mv_to_value(b, &vb);
    c = mv_compare_value_coll(a, &vb, coll);
    bson_value_destroy(&vb);
    return c;
}

int
mv_compare(const mv_t *a, const mv_t *b)
{
    return mv_compare_coll(a, b, NULL);
}

bool
mv_binary_equal(const mv_t *a, const mv_t *b)
{
    bson_t ta = BSON_INITIALIZER, tb = BSON_INITIALIZER;
    bool eq;
    mv_append_to(&ta, "", a);
    mv_append_to(&tb, "", b);
    eq = ta.len == tb.len && memcmp(bson_get_data(&ta), bson_get_data(&tb), ta.len) == 0;
    bson_destroy(&ta);
    bson_destroy(&tb);
    return eq;
}
