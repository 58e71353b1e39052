/*
 * index.c -- index keys and index tables: key sets, the default key generator (simple
 * and compound key patterns, dotted paths, sparse, basic multikey), DuplicateKey
 * errors in MongoDB's words, key insert/remove with unique enforcement, lookups and
 * bounded cursors. See index.h; DESIGN.md section 5.
 */
#include "bson/bson_iter.h"
#include "bson/collation.h"
#include "storage/storage_private.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/record_store.h"

/* ---------------------------------------------------------------------------------
 * Key sets
 * ------------------------------------------------------------------------------ */

/* Append raw bytes (a stored key or a bound) to a key buffer as they are. */
static void
key_append_raw(shl_keystring_t *b, const void *p, size_t n)
{
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
shl_keyset_init(shl_keyset_t *ks)
{
    memset(ks, 0, sizeof(*ks));
}

void
shl_keyset_cleanup(shl_keyset_t *ks)
{
    bson_free(ks->buf);
    bson_free(ks->offs);
    memset(ks, 0, sizeof(*ks));
}

void
shl_keyset_clear(shl_keyset_t *ks)
{
    ks->len = 0;
    ks->n = 0;
    ks->array_paths = 0;
    ks->num_types = 0;
}

void
shl_keyset_add(shl_keyset_t *ks, const uint8_t *key, size_t len)
{
    if (ks->len + len > ks->cap) {
        ks->cap = (ks->len + len) * 2 + 64;
        ks->buf = bson_realloc(ks->buf, ks->cap);
    }
    if (ks->n + 2 > ks->ncap) {
        ks->ncap = ks->ncap ? ks->ncap * 2 : 8;
        ks->offs = bson_realloc(ks->offs, ks->ncap * sizeof(size_t));
    }
    if (ks->n == 0) {
        ks->offs[0] = 0;
    }
    if (len > 0) {
        memcpy(ks->buf + ks->len, key, len);
    }
    ks->len += len;
    ks->n++;
    ks->offs[ks->n] = ks->len;
}

const uint8_t *
shl_keyset_key(const shl_keyset_t *ks, size_t i, size_t *len)
{
    *len = ks->offs[i + 1] - ks->offs[i];
    return ks->buf + ks->offs[i];
}

static int
key_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c != 0) {
        return c;
    }
    return alen < blen ? -1 : (alen > blen ? 1 : 0);
}

typedef struct key_ref {
    const uint8_t *p;
    size_t len;
} key_ref_t;

static int
key_ref_cmp(const void *a, const void *b)
{
    const key_ref_t *x = a, *y = b;
    return key_cmp(x->p, x->len, y->p, y->len);
}

void
shl_keyset_sort_unique(shl_keyset_t *ks)
{
    key_ref_t *refs;
    shl_keyset_t out;

    if (ks->n < 2) {
        return;
    }
    refs = bson_malloc(ks->n * sizeof(*refs));
    for (size_t i = 0; i < ks->n; i++) {
        refs[i].p = shl_keyset_key(ks, i, &refs[i].len);
    }
    qsort(refs, ks->n, sizeof(*refs), key_ref_cmp);
    shl_keyset_init(&out);
    for (size_t i = 0; i < ks->n; i++) {
        if (i == 0 || key_ref_cmp(&refs[i - 1], &refs[i]) != 0) {
            shl_keyset_add(&out, refs[i].p, refs[i].len);
        }
    }
    bson_free(refs);
    out.array_paths = ks->array_paths;
    out.num_types = ks->num_types;
    shl_keyset_cleanup(ks);
    *ks = out;
}

/* ---------------------------------------------------------------------------------
 * The default key generator
 * ------------------------------------------------------------------------------ */

typedef struct kg_field {
    char *path;
    bool descending;
} kg_field_t;

typedef struct kg_state {
    size_t n;
    kg_field_t *f;
    bool sparse;
    shl_collator_t *coll; /* spec.collation (a reference); NULL: simple */
} kg_state_t;

/* Values found at one path: borrowed views into the document. */
typedef struct kg_values {
    bson_value_t *v;
    size_t n, cap;
    bool from_array;
} kg_values_t;

static void
values_add(kg_values_t *vals, const bson_value_t *v)
{
    if (vals->n == vals->cap) {
        vals->cap = vals->cap ? vals->cap * 2 : 4;
        vals->v = bson_realloc(vals->v, vals->cap * sizeof(*vals->v));
    }
    vals->v[vals->n++] = *v;
}

static bool
is_digits(const char *s, size_t n)
{
    if (n == 0) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return false;
        }
    }
    return true;
}

/*
 * Collect the values at dotted 'path' in the document at 'it' (positioned before
 * its first element). Arrays on the way expand (multikey); a numeric component
 * after an array indexes into it.
 */
static void
collect_path(bson_iter_t *it, const char *path, kg_values_t *vals)
{
    const char *dot = strchr(path, '.');
    size_t clen = dot != NULL ? (size_t)(dot - path) : strlen(path);
    bson_iter_t child;

    if (!bson_iter_find_w_len(it, path, (int)clen)) {
        return;
    }
    if (dot == NULL) {
        if (BSON_ITER_HOLDS_ARRAY(it)) {
            size_t before = vals->n;
            vals->from_array = true;
            if (bson_iter_recurse(it, &child)) {
                while (shl_iter_next(&child)) {
                    values_add(vals, bson_iter_value(&child));
                }
            }
            if (vals->n == before) {
                /* An empty array indexes as undefined, as in MongoDB. */
                bson_value_t undef = {.value_type = BSON_TYPE_UNDEFINED};
                values_add(vals, &undef);
            }
        } else {
            values_add(vals, bson_iter_value(it));
        }
        return;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        if (bson_iter_recurse(it, &child)) {
            collect_path(&child, dot + 1, vals);
        }
    } else if (BSON_ITER_HOLDS_ARRAY(it)) {
        const char *next = dot + 1;
        const char *ndot = strchr(next, '.');
        size_t nlen = ndot != NULL ? (size_t)(ndot - next) : strlen(next);
        if (is_digits(next, nlen)) {
            /* a.0.b: positional */
            if (bson_iter_recurse(it, &child)) {
                collect_path(&child, next, vals);
            }
            return;
        }
        vals->from_array = true;
        if (bson_iter_recurse(it, &child)) {
            while (shl_iter_next(&child)) {
                bson_iter_t sub;
                if (BSON_ITER_HOLDS_DOCUMENT(&child) && bson_iter_recurse(&child, &sub)) {
                    collect_path(&sub, next, vals);
                }
            }
        }
    }
}

static int
kg_gen(const shl_keygen_t *kg, const bson_t *doc, shl_keyset_t *keys, shl_status_t *st)
{
    const kg_state_t *s = kg->state;
    kg_values_t *vals = bson_malloc0(s->n * sizeof(*vals));
    bson_value_t null_v = {.value_type = BSON_TYPE_NULL};
    size_t multi = SIZE_MAX, nmissing = 0;
    shl_keystring_t kb;
    int ret = 0;

    shl_keystring_init(&kb);
    for (size_t i = 0; i < s->n; i++) {
        bson_iter_t it;
        if (bson_iter_init(&it, doc)) {
            collect_path(&it, s->f[i].path, &vals[i]);
        }
        if (vals[i].n == 0) {
            nmissing++;
            values_add(&vals[i], &null_v);
        }
        for (size_t k = 0; k < vals[i].n; k++) {
            int t = -1;
            switch (vals[i].v[k].value_type) {
            case BSON_TYPE_INT32:
                t = 0;
                break;
            case BSON_TYPE_INT64:
                t = 1;
                break;
            case BSON_TYPE_DOUBLE:
                t = 2;
                break;
            case BSON_TYPE_DECIMAL128:
                t = 3;
                break;
            default:
                break;
            }
            if (t >= 0) {
                keys->num_types |= SHL_NUM_TYPE_BIT(i, t);
            }
        }
        if (vals[i].from_array) {
            keys->array_paths |= 1ull << (i < 63 ? i : 63);
            if (multi != SIZE_MAX) {
                SHL_FAIL(st, SHL_CODE_CANNOT_INDEX_PARALLEL_ARRAYS,
                         "cannot index parallel arrays [%s] [%s]", s->f[i].path, s->f[multi].path);
            }
            multi = i;
        }
    }
    if (s->sparse && nmissing == s->n) {
        goto done;
    }
    {
        size_t nkeys = multi == SIZE_MAX ? 1 : vals[multi].n;
        for (size_t k = 0; k < nkeys; k++) {
            kb.len = 0;
            for (size_t i = 0; i < s->n; i++) {
                const bson_value_t *v = i == multi ? &vals[i].v[k] : &vals[i].v[0];
                if (s->coll != NULL) {
                    /* A collated index stores strings as their ICU sort keys, as MongoDB. */
                    bson_value_t ck;
                    shl_collator_value_key(s->coll, v, &ck);
                    shl_keystring_append_value(&kb, &ck, s->f[i].descending);
                    bson_value_destroy(&ck);
                } else {
                    shl_keystring_append_value(&kb, v, s->f[i].descending);
                }
            }
            shl_keyset_add(keys, kb.data, kb.len);
        }
    }
done:
    for (size_t i = 0; i < s->n; i++) {
        bson_free(vals[i].v);
    }
    bson_free(vals);
    shl_keystring_cleanup(&kb);
    return ret;
}

static void
kg_dup_key_value(const shl_keygen_t *kg, const bson_t *doc, bson_t *out)
{
    const kg_state_t *s = kg->state;
    bson_value_t null_v = {.value_type = BSON_TYPE_NULL};

    bson_init(out);
    for (size_t i = 0; i < s->n; i++) {
        kg_values_t vals = {0};
        bson_iter_t it;
        if (bson_iter_init(&it, doc)) {
            collect_path(&it, s->f[i].path, &vals);
        }
        bson_append_value(out, s->f[i].path, -1, vals.n > 0 ? &vals.v[0] : &null_v);
        bson_free(vals.v);
    }
}

static void
kg_destroy(shl_keygen_t *kg)
{
    kg_state_t *s;
    if (kg == NULL) {
        return;
    }
    s = kg->state;
    for (size_t i = 0; s != NULL && i < s->n; i++) {
        bson_free(s->f[i].path);
    }
    if (s != NULL) {
        shl_collator_release(s->coll);
        bson_free(s->f);
        bson_free(s);
    }
    bson_free(kg);
}

int
shl_keygen_default_factory(const bson_t *spec, shl_keygen_t **out, shl_status_t *st)
{
    bson_iter_t it, key;
    kg_state_t *s = bson_malloc0(sizeof(*s));
    shl_keygen_t *kg = NULL;
    uint32_t n = 0;
    int ret = 0;

    *out = NULL;
    if (!bson_iter_init_find(&it, spec, "key") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &key)) {
        SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX, "index spec has no key pattern");
    }
    {
        bson_iter_t cnt = key;
        while (shl_iter_next(&cnt)) {
            n++;
        }
    }
    if (n == 0) {
        SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX, "Index keys cannot be empty.");
    }
    s->f = bson_malloc0(n * sizeof(*s->f));
    while (shl_iter_next(&key)) {
        if (BSON_ITER_HOLDS_UTF8(&key)) {
            SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX, "Index type '%s' is not supported yet",
                     bson_iter_utf8(&key, NULL));
        }
        if (!BSON_ITER_HOLDS_NUMBER(&key) && !BSON_ITER_HOLDS_DECIMAL128(&key)) {
            SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX,
                     "Values in index key pattern must be numbers or strings: %s",
                     shl_iter_key(&key));
        }
        s->f[s->n].path = bson_strdup(shl_iter_key(&key));
        s->f[s->n].descending = BSON_ITER_HOLDS_NUMBER(&key) && bson_iter_as_double(&key) < 0;
        s->n++;
    }
    if (bson_iter_init_find(&it, spec, "partialFilterExpression")) {
        SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX, "partialFilterExpression is not supported yet");
    }
    if (bson_iter_init_find(&it, spec, "sparse")) {
        s->sparse = bson_iter_as_bool(&it);
    }
    if (bson_iter_init_find(&it, spec, "collation")) {
        SHL_ERR(shl_collator_from_iter(&it, "collation", &s->coll, st));
    }
    kg = bson_malloc0(sizeof(*kg));
    kg->gen = kg_gen;
    kg->dup_key_value = kg_dup_key_value;
    kg->destroy = kg_destroy;
    kg->state = s;
    s = NULL;
    *out = kg;
done:
    if (s != NULL) {
        for (size_t i = 0; i < s->n; i++) {
            bson_free(s->f[i].path);
        }
        shl_collator_release(s->coll);
        bson_free(s->f);
        bson_free(s);
    }
    return ret;
}

int
shl_index_keys_for_doc(const shl_index_t *idx, const bson_t *doc, shl_keyset_t *keys,
                       shl_status_t *st)
{
    int ret;
    shl_keyset_clear(keys);
    ret = idx->keygen->gen(idx->keygen, doc, keys, st);
    if (ret == 0) {
        shl_keyset_sort_unique(keys);
    }
    return ret;
}

void
shl_index_id_key(const shl_index_t *idx, const bson_value_t *id, shl_keyset_t *keys)
{
    shl_keystring_t kb;
    shl_keystring_init(&kb);
    if (idx != NULL && idx->collator != NULL) {
        bson_value_t ck;
        shl_collator_value_key(idx->collator, id, &ck);
        shl_keystring_append_value(&kb, &ck, false);
        bson_value_destroy(&ck);
    } else {
        shl_keystring_append_value(&kb, id, false);
    }
    shl_keyset_clear(keys);
    shl_keyset_add(keys, kb.data, kb.len);
    shl_keystring_cleanup(&kb);
}

/* ---------------------------------------------------------------------------------
 * DuplicateKey errors
 * ------------------------------------------------------------------------------ */

static void append_value_str(bson_string_t *s, const bson_value_t *v);

static void
append_doc_str(bson_string_t *s, const uint8_t *data, uint32_t len, bool array)
{
    bson_t doc;
    bson_iter_t it;
    bool first = true;

    bson_string_append(s, array ? "[" : "{");
    if (bson_init_static(&doc, data, len) && bson_iter_init(&it, &doc)) {
        while (shl_iter_next(&it)) {
            bson_string_append(s, first ? " " : ", ");
            first = false;
            if (!array) {
                bson_string_append_printf(s, "%s: ", shl_iter_key(&it));
            }
            append_value_str(s, bson_iter_value(&it));
        }
    }
    bson_string_append(s, first ? (array ? "]" : "}") : (array ? " ]" : " }"));
}

/* A value the way MongoDB prints it in error messages (BSONElement::toString). */
static void
append_value_str(bson_string_t *s, const bson_value_t *v)
{
    char oid[25];
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        bson_string_append_printf(s, "%" PRId32, v->value.v_int32);
        break;
    case BSON_TYPE_INT64:
        bson_string_append_printf(s, "%" PRId64, v->value.v_int64);
        break;
    case BSON_TYPE_DOUBLE: {
        double d = v->value.v_double;
        if (isfinite(d) && d == floor(d) && fabs(d) < 1e15) {
            bson_string_append_printf(s, "%.1f", d);
        } else {
            bson_string_append_printf(s, "%.15g", d);
        }
        break;
    }
    case BSON_TYPE_DECIMAL128: {
        char str[BSON_DECIMAL128_STRING];
        bson_decimal128_to_string(&v->value.v_decimal128, str);
        bson_string_append_printf(s, "NumberDecimal(\"%s\")", str);
        break;
    }
    case BSON_TYPE_UTF8:
        bson_string_append_printf(s, "\"%.*s\"", (int)v->value.v_utf8.len, v->value.v_utf8.str);
        break;
    case BSON_TYPE_OID:
        bson_oid_to_string(&v->value.v_oid, oid);
        bson_string_append_printf(s, "ObjectId('%s')", oid);
        break;
    case BSON_TYPE_BOOL:
        bson_string_append(s, v->value.v_bool ? "true" : "false");
        break;
    case BSON_TYPE_NULL:
        bson_string_append(s, "null");
        break;
    case BSON_TYPE_UNDEFINED:
        bson_string_append(s, "undefined");
        break;
    case BSON_TYPE_DATE_TIME:
        bson_string_append_printf(s, "new Date(%" PRId64 ")", v->value.v_datetime);
        break;
    case BSON_TYPE_TIMESTAMP:
        bson_string_append_printf(s, "Timestamp(%" PRIu32 ", %" PRIu32 ")",
                                  v->value.v_timestamp.timestamp, v->value.v_timestamp.increment);
        break;
    case BSON_TYPE_DOCUMENT:
        append_doc_str(s, v->value.v_doc.data, v->value.v_doc.data_len, false);
        break;
    case BSON_TYPE_ARRAY:
        append_doc_str(s, v->value.v_doc.data, v->value.v_doc.data_len, true);
        break;
    case BSON_TYPE_MINKEY:
        bson_string_append(s, "MinKey");
        break;
    case BSON_TYPE_MAXKEY:
        bson_string_append(s, "MaxKey");
        break;
    case BSON_TYPE_REGEX:
        bson_string_append_printf(s, "/%s/%s", v->value.v_regex.regex, v->value.v_regex.options);
        break;
    case BSON_TYPE_BINARY:
        bson_string_append_printf(s, "BinData(%d, ", (int)v->value.v_binary.subtype);
        for (uint32_t i = 0; i < v->value.v_binary.data_len; i++) {
            bson_string_append_printf(s, "%02X", v->value.v_binary.data[i]);
        }
        bson_string_append(s, ")");
        break;
    default:
        bson_string_append(s, "?");
        break;
    }
}

int
shl_index_dup_key_status(const char *ns, const shl_index_t *idx, const bson_t *doc,
                         shl_status_t *st)
{
    bson_t value, extra = BSON_INITIALIZER;
    bson_string_t *msg = bson_string_new(NULL);
    bson_iter_t it;
    bool first = true;

    idx->keygen->dup_key_value(idx->keygen, doc, &value);
    bson_string_append(msg, "{");
    if (bson_iter_init(&it, &value)) {
        while (shl_iter_next(&it)) {
            bson_string_append_printf(msg, "%s%s: ", first ? " " : ", ", shl_iter_key(&it));
            append_value_str(msg, bson_iter_value(&it));
            first = false;
        }
    }
    bson_string_append(msg, first ? "}" : " }");
    shl_status_set(st, SHL_CODE_DUPLICATE_KEY,
                   "E11000 duplicate key error collection: %s index: %s dup key: %s", ns, idx->name,
                   msg->str);
    BSON_APPEND_DOCUMENT(&extra, "keyPattern", idx->key_pattern);
    BSON_APPEND_DOCUMENT(&extra, "keyValue", &value);
    shl_status_set_extra(st, &extra);
    bson_destroy(&extra);
    bson_destroy(&value);
    bson_string_free(msg, true);
    return SHL_CODE_DUPLICATE_KEY;
}

/* ---------------------------------------------------------------------------------
 * Index table writes
 * ------------------------------------------------------------------------------ */

void
shl_index_full_key(const shl_index_t *idx, const uint8_t *key, size_t len, int64_t rid,
                   shl_keystring_t *out)
{
    out->len = 0;
    key_append_raw(out, key, len);
    if (idx->rid_suffix) {
        /* Versioned: -rid, so that a key's newest version (highest RecordId) sorts first. */
        shl_keystring_append_record_id(out, idx->versioned ? -rid : rid);
    }
}

/* Versioned index: is another RecordId than 'rid' live under 'key' (a duplicate)? */
static int
versioned_taken(shl_storage_txn_t *txn, const shl_index_t *idx, const uint8_t *key, size_t len,
                int64_t rid, bool *dup, shl_status_t *st)
{
    int64_t other = 0;
    bool found = false;
    int ret = shl_index_lookup(txn, idx, key, len, &other, &found, st);
    *dup = ret == 0 && found && other != rid;
    return ret;
}

int
shl_index_insert_keys(shl_storage_txn_t *txn, const shl_index_t *idx, const shl_keyset_t *keys,
                      int64_t rid, size_t *ninserted, bool *dup, shl_status_t *st)
{
    WT_CURSOR *c = NULL;
    shl_keystring_t kb;
    WT_ITEM item;
    int ret = 0, wtret;
    size_t done_n = 0;

    *dup = false;
    shl_keystring_init(&kb);
    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, idx->uri, &c, st));
    for (size_t i = 0; i < keys->n; i++) {
        size_t len;
        const uint8_t *k = shl_keyset_key(keys, i, &len);
        if (idx->versioned) {
            /* Its entries differ by RecordId: uniqueness is a lookup of the live one. */
            SHL_ERR(versioned_taken(txn, idx, k, len, rid, dup, st));
            if (*dup) {
                break;
            }
        }
        shl_index_full_key(idx, k, len, rid, &kb);
        item.data = kb.data;
        item.size = kb.len;
        c->set_key(c, &item);
        c->set_value(c, rid);
        wtret = c->insert(c);
        if (wtret == WT_DUPLICATE_KEY && !idx->rid_suffix) {
            int64_t other = 0;
            /* The same entry already there (replay) is not a duplicate. */
            if (c->search(c) == 0 && c->get_value(c, &other) == 0 && other == rid) {
                continue;
            }
            *dup = true;
            break;
        }
        if (wtret == WT_DUPLICATE_KEY) {
            continue; /* key+rid already present (replay) */
        }
        if (wtret != 0) {
            SHL_ERR(shl_wt_err(st, wtret, "index insert"));
        }
        done_n++;
    }
    if (*dup) {
        /* Take back what this call inserted so the transaction stays usable. */
        for (size_t i = 0; i < keys->n && done_n > 0; i++) {
            size_t len;
            int64_t other = 0;
            const uint8_t *k = shl_keyset_key(keys, i, &len);
            shl_index_full_key(idx, k, len, rid, &kb);
            item.data = kb.data;
            item.size = kb.len;
            c->set_key(c, &item);
            if (c->search(c) == 0 && c->get_value(c, &other) == 0 && other == rid) {
                wtret = c->remove(c);
                if (wtret != 0) {
                    SHL_ERR(shl_wt_err(st, wtret, "index remove"));
                }
                done_n--;
            }
        }
    }
done:
    if (ninserted != NULL) {
        *ninserted = done_n;
    }
    if (c != NULL) {
        shl_wt_cursor_put(txn->sess, idx->uri, c);
    }
    shl_keystring_cleanup(&kb);
    return ret;
}

int
shl_index_remove_keys(shl_storage_txn_t *txn, const shl_index_t *idx, const shl_keyset_t *keys,
                      int64_t rid, shl_status_t *st)
{
    WT_CURSOR *c = NULL;
    shl_keystring_t kb;
    WT_ITEM item;
    int ret = 0, wtret;

    shl_keystring_init(&kb);
    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, idx->uri, &c, st));
    for (size_t i = 0; i < keys->n; i++) {
        size_t len;
        int64_t other = 0;
        const uint8_t *k = shl_keyset_key(keys, i, &len);
        shl_index_full_key(idx, k, len, rid, &kb);
        item.data = kb.data;
        item.size = kb.len;
        c->set_key(c, &item);
        SHL_WT_READ(wtret, c->search(c));
        if (wtret == WT_NOTFOUND) {
            continue; /* already gone (replay) */
        }
        if (wtret == 0) {
            wtret = c->get_value(c, &other);
        }
        if (wtret != 0) {
            SHL_ERR(shl_wt_err(st, wtret, "index search"));
        }
        if (other != rid) {
            continue; /* a unique key now owned by another record */
        }
        wtret = c->remove(c);
        if (wtret != 0) {
            SHL_ERR(shl_wt_err(st, wtret, "index remove"));
        }
    }
done:
    if (c != NULL) {
        shl_wt_cursor_put(txn->sess, idx->uri, c);
    }
    shl_keystring_cleanup(&kb);
    return ret;
}

int
shl_index_move_version(shl_storage_txn_t *txn, const shl_index_t *idx, const uint8_t *key,
                       size_t len, int64_t old_rid, int64_t new_rid, shl_status_t *st)
{
    WT_CURSOR *c = NULL;
    shl_keystring_t kb;
    WT_ITEM item;
    int ret = 0, wtret;

    SHL_INVARIANT(idx->versioned);
    shl_keystring_init(&kb);
    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, idx->uri, &c, st));
    if (old_rid != 0) {
        shl_index_full_key(idx, key, len, old_rid, &kb);
        item.data = kb.data;
        item.size = kb.len;
        c->set_key(c, &item);
        wtret = c->remove(c);
        if (wtret != 0 && wtret != WT_NOTFOUND) {
            SHL_ERR(shl_wt_err(st, wtret, "index remove"));
        }
    }
    shl_index_full_key(idx, key, len, new_rid, &kb);
    item.data = kb.data;
    item.size = kb.len;
    c->set_key(c, &item);
    c->set_value(c, new_rid);
    wtret = c->insert(c);
    if (wtret != 0 && wtret != WT_DUPLICATE_KEY) {
        SHL_ERR(shl_wt_err(st, wtret, "index insert"));
    }
done:
    if (c != NULL) {
        shl_wt_cursor_put(txn->sess, idx->uri, c);
    }
    shl_keystring_cleanup(&kb);
    return ret;
}

/* ---------------------------------------------------------------------------------
 * Reads
 * ------------------------------------------------------------------------------ */

int
shl_index_lookup(shl_storage_txn_t *txn, const shl_index_t *idx, const uint8_t *key, size_t len,
                 int64_t *rid, bool *found, shl_status_t *st)
{
    WT_CURSOR *c = NULL;
    WT_ITEM item = {.data = key, .size = len}, got;
    int ret = 0, wtret, exact = 0;

    *found = false;
    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, idx->uri, &c, st));
    c->set_key(c, &item);
    if (!idx->rid_suffix) {
        SHL_WT_READ(wtret, c->search(c));
        if (wtret == 0) {
            wtret = c->get_value(c, rid);
            *found = wtret == 0;
        }
    } else {
        /* key || RecordId: the first entry with this prefix. For a versioned index that is
         * the newest version; older versions, removed, sort after it, so the cursor does not
         * step over their deleted entries (only over invisible newer ones, if any). */
        SHL_WT_READ(wtret, c->search_near(c, &exact));
        if (wtret == 0 && exact < 0) {
            SHL_WT_READ(wtret, c->next(c));
        }
        if (wtret == 0) {
            wtret = c->get_key(c, &got);
        }
        if (wtret == 0 && got.size == len + SHL_KEYSTRING_RECORD_ID_SIZE &&
            memcmp(got.data, key, len) == 0) {
            wtret = c->get_value(c, rid);
            *found = wtret == 0;
        }
    }
    if (wtret != 0 && wtret != WT_NOTFOUND) {
        SHL_ERR(shl_wt_err(st, wtret, "index lookup"));
    }
done:
    if (c != NULL) {
        shl_wt_cursor_put(txn->sess, idx->uri, c);
    }
    return ret;
}

int
shl_doc_find_by_id(shl_storage_txn_t *txn, const shl_collection_t *coll, const bson_value_t *id,
                   bson_t *out, int64_t *rid, bool *found, shl_status_t *st)
{
    shl_keyset_t keys;
    int64_t r = 0;
    int ret = 0;
    size_t len;
    const uint8_t *k;

    bson_init(out);
    *found = false;
    shl_keyset_init(&keys);
    if (coll->nindexes == 0 || !coll->indexes[0]->is_id) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "collection %s has no _id index", coll->ns);
    }
    shl_index_id_key(coll->indexes[0], id, &keys);
    k = shl_keyset_key(&keys, 0, &len);
    SHL_ERR(shl_index_lookup(txn, coll->indexes[0], k, len, &r, found, st));
    if (*found) {
        bson_destroy(out);
        SHL_ERR(shl_record_get(txn, coll, r, out, found, st));
        if (rid != NULL) {
            *rid = r;
        }
    }
done:
    shl_keyset_cleanup(&keys);
    return ret;
}

struct shl_index_cursor {
    shl_storage_txn_t *txn;
    const shl_index_t *idx;
    WT_CURSOR *c;
    shl_keystring_t start, end;
    bool has_start, has_end;
    bool forward;
    bool started, eof;
};

int
shl_index_cursor_open(shl_storage_txn_t *txn, const shl_index_t *idx, const shl_key_bound_t *start,
                      const shl_key_bound_t *end, bool forward, shl_index_cursor_t **out,
                      shl_status_t *st)
{
    shl_index_cursor_t *ic = bson_malloc0(sizeof(*ic));
    int ret = 0;

    *out = NULL;
    ic->txn = txn;
    ic->idx = idx;
    ic->forward = forward;
    shl_keystring_init(&ic->start);
    shl_keystring_init(&ic->end);
    if (start != NULL && start->data != NULL) {
        ic->has_start = true;
        key_append_raw(&ic->start, start->data, start->len);
    }
    if (end != NULL && end->data != NULL) {
        ic->has_end = true;
        key_append_raw(&ic->end, end->data, end->len);
    }
    /* From the session's cache: several may be open on one table at once. */
    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, idx->uri, &ic->c, st));
    txn->open_cursors++;
    *out = ic;
    ic = NULL;
done:
    if (ic != NULL) {
        shl_keystring_cleanup(&ic->start);
        shl_keystring_cleanup(&ic->end);
        bson_free(ic);
    }
    return ret;
}

int
shl_index_cursor_next(shl_index_cursor_t *ic, int64_t *rid, const uint8_t **key, size_t *key_len,
                      bool *eof, shl_status_t *st)
{
    WT_CURSOR *c = ic->c;
    WT_ITEM got, item;
    int ret = 0, wtret = 0, exact = 0;

    *eof = false;
    if (ic->eof) {
        *eof = true;
        goto done;
    }
    if (!ic->started) {
        ic->started = true;
        if (ic->forward && ic->has_start) {
            item.data = ic->start.data;
            item.size = ic->start.len;
            c->set_key(c, &item);
            SHL_WT_READ(wtret, c->search_near(c, &exact));
            if (wtret == 0 && exact < 0) {
                SHL_WT_READ(wtret, c->next(c));
            }
        } else if (!ic->forward && ic->has_end) {
            item.data = ic->end.data;
            item.size = ic->end.len;
            c->set_key(c, &item);
            SHL_WT_READ(wtret, c->search_near(c, &exact));
            if (wtret == 0 && exact >= 0) {
                SHL_WT_READ(wtret, c->prev(c));
            }
        } else {
            SHL_WT_READ(wtret, ic->forward ? c->next(c) : c->prev(c));
        }
    } else {
        SHL_WT_READ(wtret, ic->forward ? c->next(c) : c->prev(c));
    }
    if (wtret == 0) {
        wtret = c->get_key(c, &got);
    }
    if (wtret == WT_NOTFOUND) {
        ic->eof = *eof = true;
        goto done;
    }
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "index cursor"));
    }
    if (ic->forward && ic->has_end && key_cmp(got.data, got.size, ic->end.data, ic->end.len) >= 0) {
        ic->eof = *eof = true;
        goto done;
    }
    if (!ic->forward && ic->has_start &&
        key_cmp(got.data, got.size, ic->start.data, ic->start.len) < 0) {
        ic->eof = *eof = true;
        goto done;
    }
    wtret = c->get_value(c, rid);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "index cursor value"));
    }
    if (key != NULL) {
        *key = got.data;
    }
    if (key_len != NULL) {
        *key_len = got.size;
    }
done:
    return ret;
}

void
shl_index_cursor_close(shl_index_cursor_t *ic)
{
    if (ic == NULL) {
        return;
    }
    shl_wt_cursor_put(ic->txn->sess, ic->idx->uri, ic->c);
    ic->txn->open_cursors--;
    shl_keystring_cleanup(&ic->start);
    shl_keystring_cleanup(&ic->end);
    bson_free(ic);
}
