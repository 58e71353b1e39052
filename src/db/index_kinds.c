/*
 * index_kinds.c -- index kinds beyond the storage layer's btree generator: hashed
 * fields (MongoDB's hash64 of the value, stored as a NumberLong key component) and
 * partial indexes (partialFilterExpression through the query matcher), plus the
 * createIndexes spec validation with MongoDB 7.0's codes and messages.
 */
#include "bson/bson_iter.h"
#include "db/index_kinds.h"
#include "query/text.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bson/bson_hash.h"
#include "bson/bson_util.h"
#include "query/matcher.h"

/* ---------------------------------------------------------------- hashed */

typedef struct hashed_state {
    shl_keygen_t *inner; /* btree generator over the document with the hash substituted */
    char *path;          /* the hashed field */
    char **others;       /* the other fields (sparse presence) */
    size_t nothers;
    bool sparse;
} hashed_state_t;

/*
 * Both wrapping generators (hashed, partial) keep the generator they wrap as the first
 * field of their state; a duplicate key is reported as the wrapped generator reports it.
 */
static void
wrapped_dup_key_value(const shl_keygen_t *kg, const bson_t *doc, bson_t *out)
{
    const shl_keygen_t *inner = *(shl_keygen_t *const *)kg->state;
    inner->dup_key_value(inner, doc, out);
}

/* Whether any value exists at dotted 'path' (arrays traversed). */
static bool
path_present(const bson_t *doc, const char *path)
{
    const char *dot = strchr(path, '.');
    size_t clen = dot != NULL ? (size_t)(dot - path) : strlen(path);
    bson_iter_t it, child;
    bool found = false;

    if (!bson_iter_init(&it, doc) || !bson_iter_find_w_len(&it, path, (int)clen)) {
        return false;
    }
    if (dot == NULL) {
        return true;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it)) {
        const uint8_t *data;
        uint32_t len;
        bson_t sub;
        bson_iter_t probe;
        if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_document(&it, &len, &data);
            bson_init_static(&sub, data, len);
            return path_present(&sub, dot + 1);
        }
        bson_iter_array(&it, &len, &data);
        bson_init_static(&sub, data, len);
        if (path_present(&sub, dot + 1)) {
            return true; /* positional component */
        }
        if (bson_iter_recurse(&it, &child)) {
            while (!found && shl_iter_next(&child)) {
                if (BSON_ITER_HOLDS_DOCUMENT(&child)) {
                    bson_iter_document(&child, &len, &data);
                    bson_init_static(&sub, data, len);
                    found = path_present(&sub, dot + 1);
                }
            }
        }
        (void)probe;
    }
    return found;
}

/*
 * The value at 'path' for hashing: *v (borrowed), *missing when absent (a scalar on the
 * way counts as absent). An array anywhere on the path: 16766.
 */
static int
hashed_value(const bson_t *doc, const char *path, bson_value_t *v, bool *missing, shl_status_t *st)
{
    bson_iter_t it;
    const char *comp = path;
    int ret = 0;

    *missing = true;
    if (!bson_iter_init(&it, doc)) {
        goto done;
    }
    for (;;) {
        const char *dot = strchr(comp, '.');
        size_t clen = dot != NULL ? (size_t)(dot - comp) : strlen(comp);
        bson_iter_t child;
        if (!bson_iter_find_w_len(&it, comp, (int)clen)) {
            goto done;
        }
        if (BSON_ITER_HOLDS_ARRAY(&it)) {
            SHL_FAIL(st, 16766,
                     "Error: hashed indexes do not currently support array values. Found array "
                     "at path: %.*s",
                     (int)(comp - path + clen), path);
        }
        if (dot == NULL) {
            *v = *bson_iter_value(&it);
            *missing = false;
            goto done;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &child)) {
            goto done;
        }
        it = child;
        comp = dot + 1;
    }
done:
    return ret;
}

/* Copy 'doc' into 'out' with the value at dotted 'path' replaced (or added) by 'v'. */
static void
set_path(const bson_t *doc, const char *path, const bson_value_t *v, bson_t *out)
{
    const char *dot = strchr(path, '.');
    size_t clen = dot != NULL ? (size_t)(dot - path) : strlen(path);
    bson_iter_t it;
    bool done = false;

    if (doc != NULL && bson_iter_init(&it, doc)) {
        while (shl_iter_next(&it)) {
            const char *key = shl_iter_key(&it);
            if (done || strlen(key) != clen || memcmp(key, path, clen) != 0) {
                bson_append_value(out, key, -1, bson_iter_value(&it));
                continue;
            }
            done = true;
            if (dot == NULL) {
                bson_append_value(out, key, -1, v);
            } else {
                bson_t child, sub;
                bool is_doc = BSON_ITER_HOLDS_DOCUMENT(&it);
                if (is_doc) {
                    const uint8_t *data;
                    uint32_t len;
                    bson_iter_document(&it, &len, &data);
                    bson_init_static(&sub, data, len);
                }
                bson_append_document_begin(out, key, -1, &child);
                set_path(is_doc ? &sub : NULL, dot + 1, v, &child);
                bson_append_document_end(out, &child);
            }
        }
    }
    if (!done) {
        if (dot == NULL) {
            bson_append_value(out, path, (int)clen, v);
        } else {
            bson_t child;
            bson_append_document_begin(out, path, (int)clen, &child);
            set_path(NULL, dot + 1, v, &child);
            bson_append_document_end(out, &child);
        }
    }
}

static int
hashed_gen(const shl_keygen_t *kg, const bson_t *doc, shl_keyset_t *keys, shl_status_t *st)
{
    const hashed_state_t *s = kg->state;
    bson_value_t v, hv;
    bool missing = false;
    bson_t mod = BSON_INITIALIZER;
    int ret = 0;

    SHL_ERR(hashed_value(doc, s->path, &v, &missing, st));
    if (missing) {
        bool any = false;
        for (size_t i = 0; i < s->nothers && !any; i++) {
            any = path_present(doc, s->others[i]);
        }
        if (s->sparse && !any) {
            goto done;
        }
        v.value_type = BSON_TYPE_NULL;
    }
    hv.value_type = BSON_TYPE_INT64;
    hv.value.v_int64 = shl_bson_hash_value(&v, SHL_BSON_HASH_DEFAULT_SEED);
    set_path(doc, s->path, &hv, &mod);
    SHL_ERR(s->inner->gen(s->inner, &mod, keys, st));
done:
    bson_destroy(&mod);
    return ret;
}

static void
hashed_destroy(shl_keygen_t *kg)
{
    hashed_state_t *s;
    if (kg == NULL) {
        return;
    }
    s = kg->state;
    if (s != NULL) {
        if (s->inner != NULL) {
            s->inner->destroy(s->inner);
        }
        for (size_t i = 0; i < s->nothers; i++) {
            bson_free(s->others[i]);
        }
        bson_free(s->others);
        bson_free(s->path);
        bson_free(s);
    }
    bson_free(kg);
}

/* ---------------------------------------------------------------- partial */

typedef struct partial_state {
    shl_keygen_t *inner; /* first: see wrapped_dup_key_value */
    shl_matcher_t *filter;
} partial_state_t;

static int
partial_gen(const shl_keygen_t *kg, const bson_t *doc, shl_keyset_t *keys, shl_status_t *st)
{
    const partial_state_t *s = kg->state;
    if (!shl_matcher_matches(s->filter, doc)) {
        return 0;
    }
    return s->inner->gen(s->inner, doc, keys, st);
}

static void
partial_destroy(shl_keygen_t *kg)
{
    partial_state_t *s;
    if (kg == NULL) {
        return;
    }
    s = kg->state;
    if (s != NULL) {
        if (s->inner != NULL) {
            s->inner->destroy(s->inner);
        }
        shl_matcher_destroy(s->filter);
        bson_free(s);
    }
    bson_free(kg);
}

/* ---------------------------------------------------------------- factory */

int
db_keygen_factory(const bson_t *spec, shl_keygen_t **out, shl_status_t *st)
{
    bson_t inner_spec = BSON_INITIALIZER, key;
    bson_iter_t it, kit;
    shl_keygen_t *kg = NULL, *wrap = NULL;
    hashed_state_t *hs = NULL;
    partial_state_t *ps = NULL;
    bool has_pfe = false, sparse = false;
    bson_t pfe;
    char *hashed_path = NULL;
    char **others = NULL;
    size_t nothers = 0, nkeys = 0;
    int ret = 0;

    *out = NULL;
    if (!bson_iter_init_find(&it, spec, "key") || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return shl_keygen_default_factory(spec, out, st);
    }
    if (db_index_is_text(spec)) {
        return db_text_keygen_new(spec, out, st);
    }
    bson_iter_init(&it, spec);
    while (shl_iter_next(&it)) {
        const char *name = shl_iter_key(&it);
        if (strcmp(name, "partialFilterExpression") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            const uint8_t *data;
            uint32_t len;
            bson_iter_document(&it, &len, &data);
            bson_init_static(&pfe, data, len);
            has_pfe = true;
            continue;
        }
        if (strcmp(name, "sparse") == 0) {
            sparse = bson_iter_as_bool(&it);
        }
        if (strcmp(name, "key") == 0) {
            bson_append_document_begin(&inner_spec, "key", 3, &key);
            bson_iter_recurse(&it, &kit);
            while (shl_iter_next(&kit)) {
                nkeys++;
                if (BSON_ITER_HOLDS_UTF8(&kit) &&
                    strcmp(bson_iter_utf8(&kit, NULL), "hashed") == 0 && hashed_path == NULL) {
                    hashed_path = bson_strdup(shl_iter_key(&kit));
                    BSON_APPEND_INT32(&key, shl_iter_key(&kit), 1);
                } else {
                    others = bson_realloc(others, (nothers + 1) * sizeof(*others));
                    others[nothers++] = bson_strdup(shl_iter_key(&kit));
                    bson_append_value(&key, shl_iter_key(&kit), -1, bson_iter_value(&kit));
                }
            }
            bson_append_document_end(&inner_spec, &key);
            continue;
        }
        bson_append_value(&inner_spec, name, -1, bson_iter_value(&it));
    }
    (void)nkeys;
    SHL_ERR(shl_keygen_default_factory(&inner_spec, &kg, st));
    if (hashed_path != NULL) {
        hs = bson_malloc0(sizeof(*hs));
        hs->inner = kg;
        hs->path = hashed_path;
        hs->others = others;
        hs->nothers = nothers;
        hs->sparse = sparse;
        hashed_path = NULL;
        others = NULL;
        nothers = 0;
        wrap = bson_malloc0(sizeof(*wrap));
        wrap->gen = hashed_gen;
        wrap->dup_key_value = wrapped_dup_key_value;
        wrap->destroy = hashed_destroy;
        wrap->state = hs;
        kg = wrap;
        wrap = NULL;
    }
    if (has_pfe) {
        ps = bson_malloc0(sizeof(*ps));
        SHL_ERR(shl_matcher_new(&pfe, SHL_MATCHER_NO_SPECIAL, &ps->filter, st));
        ps->inner = kg;
        kg = NULL;
        wrap = bson_malloc0(sizeof(*wrap));
        wrap->gen = partial_gen;
        wrap->dup_key_value = wrapped_dup_key_value;
        wrap->destroy = partial_destroy;
        wrap->state = ps;
        ps = NULL;
        kg = wrap;
        wrap = NULL;
    }
    *out = kg;
    kg = NULL;
done:
    if (ps != NULL) {
        shl_matcher_destroy(ps->filter);
        bson_free(ps);
    }
    if (kg != NULL) {
        kg->destroy(kg);
    }
    for (size_t i = 0; i < nothers; i++) {
        bson_free(others[i]);
    }
    bson_free(others);
    bson_free(hashed_path);
    bson_destroy(&inner_spec);
    return ret;
}

/* ---------------------------------------------------------------- validation */

static const char *const allowed_fields[] = {"key",
                                             "name",
                                             "ns",
                                             "v",
                                             "unique",
                                             "sparse",
                                             "background",
                                             "partialFilterExpression",
                                             "expireAfterSeconds",
                                             "hidden",
                                             "storageEngine",
                                             "collation",
                                             "weights",
                                             "default_language",
                                             "language_override",
                                             "textIndexVersion",
                                             "2dsphereIndexVersion",
                                             "bits",
                                             "min",
                                             "max",
                                             "bucketSize",
                                             "wildcardProjection",
                                             "coarsestIndexedLevel",
                                             "finestIndexedLevel",
                                             "dropDups",
                                             "originalSpec",
                                             "clustered",
                                             "prepareUnique",
                                             "columnstoreProjection",
                                             "columnstoreCompressor",
                                             NULL};

static const char *const id_allowed_fields[] = {"collation", "name", "v", "key", "ns", "_id", NULL};

static const char *const known_plugins[] = {"2d",       "2dsphere",    "text", "hashed",
                                            "wildcard", "columnstore", NULL};

static bool
in_list(const char *const *list, const char *s)
{
    for (size_t i = 0; list[i] != NULL; i++) {
        if (strcmp(list[i], s) == 0) {
            return true;
        }
    }
    return false;
}

static int
fail_with_doc(shl_status_t *st, int code, const char *prefix, const bson_t *doc, const char *suffix)
{
    char *s = shl_bson_to_string(doc);
    shl_status_set(st, code, "%s%s%s", prefix, s, suffix != NULL ? suffix : "");
    bson_free(s);
    return code;
}

static int
check_key_field_name(const char *name, shl_status_t *st)
{
    const char *p = name;
    bool first = true;
    int ret = 0;

    if (name[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX, "Index keys cannot be an empty field.");
    }
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot != NULL ? (size_t)(dot - p) : strlen(p);
        if (len == 0) {
            SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX, "Index keys cannot contain an empty field.");
        }
        if (p[0] == '$') {
            bool dbref = !first && ((len == 3 && memcmp(p, "$id", 3) == 0) ||
                                    (len == 3 && memcmp(p, "$db", 3) == 0) ||
                                    (len == 4 && memcmp(p, "$ref", 4) == 0));
            if (!dbref) {
                SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX,
                         "Index key contains an illegal field name: field name starts with '$'.");
            }
        }
        if (dot == NULL) {
            break;
        }
        p = dot + 1;
        first = false;
    }
done:
    return ret;
}

static int
check_key_pattern(const bson_t *key, int *nhashed, shl_status_t *st)
{
    bson_iter_t it, prev;
    const char *plugin = NULL;
    int ret = 0;

    *nhashed = 0;
    if (bson_empty(key)) {
        SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX, "Index keys cannot be empty.");
    }
    bson_iter_init(&it, key);
    while (shl_iter_next(&it)) {
        if (BSON_ITER_HOLDS_UTF8(&it)) {
            const char *s = bson_iter_utf8(&it, NULL);
            if (s[0] == '\0') {
                SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX,
                         "Values in the index key pattern cannot be empty strings");
            }
            if (!in_list(known_plugins, s)) {
                SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX, "Unknown index plugin '%s'", s);
            }
            if (plugin != NULL && strcmp(plugin, s) != 0) {
                SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX,
                         "Can't use more than one index plugin for a single index.");
            }
            plugin = s;
            if (strcmp(s, "hashed") == 0) {
                (*nhashed)++;
            }
        } else if (BSON_ITER_HOLDS_NUMBER(&it) || BSON_ITER_HOLDS_DECIMAL128(&it)) {
            double d = BSON_ITER_HOLDS_DECIMAL128(&it) ? 1.0 : bson_iter_as_double(&it);
            if (isnan(d)) {
                SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX,
                         "Values in the index key pattern cannot be NaN.");
            }
            if (d == 0.0) {
                SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX,
                         "Values in the index key pattern cannot be 0.");
            }
        } else {
            SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX,
                     "Values in v:2 index key pattern cannot be of type %s. Only numbers > 0, "
                     "numbers < 0, and strings are allowed.",
                     shl_bson_type_name(shl_iter_type(&it)));
        }
        if (strcmp(shl_iter_key(&it), "$**") != 0 || !BSON_ITER_HOLDS_UTF8(&it) ||
            strcmp(bson_iter_utf8(&it, NULL), "text") != 0) {
            /* "$**": "text" indexes every string field */
            SHL_ERR(check_key_field_name(shl_iter_key(&it), st));
        }
        prev = it;
        while (shl_iter_next(&prev)) {
            if (strcmp(shl_iter_key(&prev), shl_iter_key(&it)) == 0) {
                char *s = shl_bson_to_string(key);
                shl_status_set(st, SHL_CODE_BAD_VALUE,
                               "The field '%s' appears multiple times in the index key pattern %s",
                               shl_iter_key(&it), s);
                bson_free(s);
                ret = SHL_CODE_BAD_VALUE;
                goto done;
            }
        }
    }
    if (plugin != NULL && strcmp(plugin, "hashed") != 0 && strcmp(plugin, "text") != 0) {
        SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX, "Index type '%s' is not supported yet", plugin);
    }
    if (*nhashed > 1) {
        char *s = shl_bson_to_string(key);
        shl_status_set(st, 31303,
                       "A maximum of one index field is allowed to be hashed but found %d for "
                       "'key' %s",
                       *nhashed, s);
        bson_free(s);
        ret = 31303;
    }
done:
    return ret;
}

/* MongoDB's partial-filter restrictions: $and/$or at any level of conjunctions, and on
 * fields equality, $eq, $gt(e), $lt(e), $type, $exists: true and $in. */
static bool
partial_expr_ok(const bson_t *filter, char *bad, size_t bad_len)
{
    bson_iter_t it, sub;

    bson_iter_init(&it, filter);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "$and") == 0 || strcmp(k, "$or") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &sub)) {
                return true; /* the matcher reports it */
            }
            while (shl_iter_next(&sub)) {
                if (BSON_ITER_HOLDS_DOCUMENT(&sub)) {
                    const uint8_t *data;
                    uint32_t len;
                    bson_t d;
                    bson_iter_document(&sub, &len, &data);
                    bson_init_static(&d, data, len);
                    if (!partial_expr_ok(&d, bad, bad_len)) {
                        return false;
                    }
                }
            }
            continue;
        }
        if (k[0] == '$') {
            bson_snprintf(bad, bad_len, "%s", k);
            return false;
        }
        if (BSON_ITER_HOLDS_REGEX(&it)) {
            bson_snprintf(bad, bad_len, "%s $regex", k);
            return false;
        }
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub) && shl_iter_next(&sub) &&
            shl_iter_key(&sub)[0] == '$') {
            do {
                const char *op = shl_iter_key(&sub);
                bool ok = strcmp(op, "$eq") == 0 || strcmp(op, "$gt") == 0 ||
                          strcmp(op, "$gte") == 0 || strcmp(op, "$lt") == 0 ||
                          strcmp(op, "$lte") == 0 || strcmp(op, "$type") == 0 ||
                          strcmp(op, "$in") == 0 ||
                          (strcmp(op, "$exists") == 0 && bson_iter_as_bool(&sub));
                if (!ok) {
                    bson_snprintf(bad, bad_len, "%s %s", k, op);
                    return false;
                }
            } while (shl_iter_next(&sub));
        }
    }
    return true;
}

int
db_index_spec_validate(const bson_t *spec, shl_status_t *st)
{
    bson_iter_t it;
    bson_t key;
    int nhashed = 0, nkeys = 0;
    bool unique = false, sparse = false, has_pfe = false, has_ttl = false;
    int ret = 0;

    bson_iter_init(&it, spec);
    while (shl_iter_next(&it)) {
        if (!in_list(allowed_fields, shl_iter_key(&it))) {
            char prefix[256];
            bson_snprintf(prefix, sizeof(prefix),
                          "The field '%s' is not valid for an index specification. "
                          "Specification: ",
                          shl_iter_key(&it));
            ret =
                fail_with_doc(st, SHL_CODE_INVALID_INDEX_SPECIFICATION_OPTION, prefix, spec, NULL);
            goto done;
        }
    }
    if (!bson_iter_init_find(&it, spec, "key") || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        goto done; /* the caller's check */
    }
    {
        const uint8_t *data;
        uint32_t len;
        bson_iter_t kit;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&key, data, len);
        nkeys = (int)bson_count_keys(&key);
        /* The _id index pattern ({_id: 1} exactly) takes fewer options. */
        if (nkeys == 1 && bson_iter_init(&kit, &key) && shl_iter_next(&kit) &&
            strcmp(shl_iter_key(&kit), "_id") == 0 && BSON_ITER_HOLDS_NUMBER(&kit) &&
            bson_iter_as_double(&kit) == 1.0) {
            bson_iter_init(&kit, spec);
            while (shl_iter_next(&kit)) {
                if (!in_list(id_allowed_fields, shl_iter_key(&kit))) {
                    char prefix[256];
                    bson_snprintf(prefix, sizeof(prefix),
                                  "The field '%s' is not valid for an _id index specification. "
                                  "Specification: ",
                                  shl_iter_key(&kit));
                    ret = fail_with_doc(st, SHL_CODE_INVALID_INDEX_SPECIFICATION_OPTION, prefix,
                                        spec, NULL);
                    goto done;
                }
            }
        }
    }
    SHL_ERR(check_key_pattern(&key, &nhashed, st));
    if (db_index_is_text(spec)) {
        shl_text_index_t *ti = NULL;
        SHL_ERR(shl_text_index_new(spec, &ti, st)); /* weights, languages, version */
        shl_text_index_destroy(ti);
    }
    if (bson_iter_init_find(&it, spec, "unique")) {
        unique = bson_iter_as_bool(&it);
    }
    if (bson_iter_init_find(&it, spec, "sparse")) {
        sparse = bson_iter_as_bool(&it);
    }
    if (nhashed > 0 && unique) {
        SHL_FAIL(st, 16764,
                 "Currently hashed indexes cannot guarantee uniqueness. Use a regular index.");
    }
    if (bson_iter_init_find(&it, spec, "partialFilterExpression")) {
        const uint8_t *data;
        uint32_t len;
        bson_t pfe;
        char bad[300];
        shl_matcher_t *m = NULL;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "The field 'partialFilterExpression' must be an object, but got %s",
                     shl_bson_type_name(shl_iter_type(&it)));
        }
        has_pfe = true;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&pfe, data, len);
        SHL_ERR(shl_matcher_new(&pfe, SHL_MATCHER_NO_SPECIAL, &m, st));
        shl_matcher_destroy(m);
        if (!partial_expr_ok(&pfe, bad, sizeof(bad))) {
            SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX,
                     "Expression not supported in partial index: %s", bad);
        }
    }
    if (has_pfe && sparse) {
        SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX,
                 "cannot mix \"partialFilterExpression\" and \"sparse\" options");
    }
    if (bson_iter_init_find(&it, spec, "expireAfterSeconds")) {
        has_ttl = true;
        if (!BSON_ITER_HOLDS_NUMBER(&it)) {
            char prefix[256];
            bson_snprintf(prefix, sizeof(prefix),
                          "TTL index 'expireAfterSeconds' option must be numeric, but received a "
                          "type of '%s'. Index spec: ",
                          shl_bson_type_name(shl_iter_type(&it)));
            ret = fail_with_doc(st, SHL_CODE_CANNOT_CREATE_INDEX, prefix, spec, NULL);
            goto done;
        }
        if (bson_iter_as_double(&it) < 0) {
            ret = fail_with_doc(st, SHL_CODE_CANNOT_CREATE_INDEX,
                                "TTL index 'expireAfterSeconds' option cannot be less than 0. "
                                "Index spec: ",
                                spec, NULL);
            goto done;
        }
        if (bson_iter_as_double(&it) > (double)INT32_MAX || isnan(bson_iter_as_double(&it))) {
            ret = fail_with_doc(st, SHL_CODE_CANNOT_CREATE_INDEX,
                                "TTL index 'expireAfterSeconds' option must be within an "
                                "acceptable range, try a lower number. Index spec: ",
                                spec, NULL);
            goto done;
        }
        if (nkeys > 1) {
            ret = fail_with_doc(st, SHL_CODE_CANNOT_CREATE_INDEX,
                                "TTL indexes are single-field indexes, compound indexes do not "
                                "support TTL. Index spec: ",
                                spec, NULL);
            goto done;
        }
    }
    (void)has_ttl;
done:
    return ret;
}

bool
db_index_ttl_seconds(const bson_t *spec, int64_t *secs, const char **field)
{
    bson_iter_t it, kit;

    if (!bson_iter_init_find(&it, spec, "expireAfterSeconds") || !BSON_ITER_HOLDS_NUMBER(&it)) {
        return false;
    }
    *secs = bson_iter_as_int64(&it);
    if (!bson_iter_init_find(&it, spec, "key") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &kit) || !shl_iter_next(&kit) || BSON_ITER_HOLDS_UTF8(&kit)) {
        return false;
    }
    *field = shl_iter_key(&kit);
    return !shl_iter_next(&kit);
}
