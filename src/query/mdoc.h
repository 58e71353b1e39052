/*
 * mdoc.h -- a small mutable BSON tree (query-private), the working copy an update edits:
 * documents keep field order, arrays are vectors, scalars own a copy of their value.
 * Parsed from and serialised back to bson_t.
 */
#ifndef SHL_QUERY_MDOC_H
#define SHL_QUERY_MDOC_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

#include "bson/collation.h"

typedef struct mv mv_t;
struct mv {
    bson_type_t type;
    bson_value_t v; /* scalars: an owned copy; unused for documents and arrays */
    char **names;   /* documents: field names (arrays: NULL entries) */
    mv_t **kids;
    size_t n, cap;
};

mv_t *mv_from_value(const bson_value_t *v);
mv_t *mv_from_doc(const bson_t *doc);
mv_t *mv_new_container(bson_type_t type);
mv_t *mv_new_null(void);
mv_t *mv_clone(const mv_t *m);
void mv_free(mv_t *m);

/* mv_find -- index of the child named 'name' (documents) or at position 'name' (arrays),
 * or -1. */
long mv_find(const mv_t *c, const char *name);
void mv_append(mv_t *c, const char *name, mv_t *kid);
void mv_insert(mv_t *c, size_t pos, const char *name, mv_t *kid);
void mv_remove_at(mv_t *c, size_t i);
void mv_replace_at(mv_t *c, size_t i, mv_t *kid);

/* Serialise. mv_to_value's result is owned (bson_value_destroy). */
void mv_append_to(bson_t *out, const char *key, const mv_t *m);
void mv_to_bson(const mv_t *doc, bson_t *out);
void mv_to_value(const mv_t *m, bson_value_t *out);

/* Canonical comparison (bson_compare) and binary equality of two values. */
int mv_compare(const mv_t *a, const mv_t *b);
int mv_compare_value(const mv_t *a, const bson_value_t *b);
/* The same comparisons with strings under 'coll' (NULL: simple). */
int mv_compare_coll(const mv_t *a, const mv_t *b, const shl_collator_t *coll);
int mv_compare_value_coll(const mv_t *a, const bson_value_t *b, const shl_collator_t *coll);
bool mv_binary_equal(const mv_t *a, const mv_t *b);

#endif
