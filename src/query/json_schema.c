/*
 * json_schema.c -- the $jsonSchema query operator (MongoDB's draft-4 subset, the form most
 * collection validators take): a schema is parsed once into a tree and evaluated against
 * whole documents. Keywords apply only to values of their kind (minimum to numbers,
 * minLength to strings, properties to objects, items to arrays), as in JSON Schema; a
 * top-level schema whose type excludes "object" matches nothing. Keywords MongoDB names but
 * does not support ($ref, format, ...) and unknown ones are parse errors, never ignored.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <math.h>
#include <pcre2.h>
#include <string.h>

#include "bson/bson_compare.h"
#include "bson/bson_iter.h"
#include "query/query_private.h"

#define JS_MAX_DEPTH 100

typedef struct jschema jschema_t;

/* One "name": schema of properties / dependencies, or one pattern of patternProperties. */
typedef struct jprop {
    char *name;
    pcre2_code *re;    /* patternProperties */
    jschema_t *schema; /* NULL for a dependency that lists fields */
    /* dependencies that list fields: the array, a view into the schema (bson_t views are
     * not copied: the list is reallocated while parsing) */
    const uint8_t *deps_data;
    uint32_t deps_len;
} jprop_t;

struct jschema {
    bool has_type;
    uint32_t types; /* bit per BSON type byte 1..19, plus T_MINKEY / T_MAXKEY */
    bool type_number;
    bool has_min, has_max, min_excl, max_excl;
    bson_value_t minimum, maximum;
    bool has_multiple_of;
    double multiple_of;
    int64_t min_length, max_length; /* -1: none */
    pcre2_code *pattern;
    int64_t min_props, max_props;
    int64_t min_items, max_items;
    bool unique_items;
    char **required;
    size_t nrequired;
    jprop_t *props, *pattern_props, *deps;
    size_t nprops, npattern_props, ndeps;
    int additional_props; /* -1 none, 0 false, 1 true, 2 schema */
    jschema_t *additional_props_schema;
    jschema_t *items;  /* one schema for every element */
    jschema_t **tuple; /* or one per position */
    size_t ntuple;
    int additional_items; /* as additional_props */
    jschema_t *additional_items_schema;
    const bson_value_t *enum_values; /* views into the schema */
    size_t nenum;
    jschema_t **all_of, **any_of, **one_of;
    size_t nall_of, nany_of, none_of;
    jschema_t *not_;
};

#define T_MINKEY 20
#define T_MAXKEY 21

static void prop_list_free(jprop_t *p, size_t n);

void
shl_jschema_destroy(jschema_t *s)
{
    if (s == NULL) {
        return;
    }
    if (s->pattern != NULL) {
        pcre2_code_free(s->pattern);
    }
    for (size_t i = 0; i < s->nrequired; i++) {
        bson_free(s->required[i]);
    }
    bson_free(s->required);
    prop_list_free(s->props, s->nprops);
    prop_list_free(s->pattern_props, s->npattern_props);
    prop_list_free(s->deps, s->ndeps);
    shl_jschema_destroy(s->additional_props_schema);
    shl_jschema_destroy(s->items);
    for (size_t i = 0; i < s->ntuple; i++) {
        shl_jschema_destroy(s->tuple[i]);
    }
    bson_free(s->tuple);
    shl_jschema_destroy(s->additional_items_schema);
    bson_free((void *)(uintptr_t)s->enum_values);
    for (size_t i = 0; i < s->nall_of; i++) {
        shl_jschema_destroy(s->all_of[i]);
    }
    for (size_t i = 0; i < s->nany_of; i++) {
        shl_jschema_destroy(s->any_of[i]);
    }
    for (size_t i = 0; i < s->none_of; i++) {
        shl_jschema_destroy(s->one_of[i]);
    }
    bson_free(s->all_of);
    bson_free(s->any_of);
    bson_free(s->one_of);
    shl_jschema_destroy(s->not_);
    bson_free(s);
}

static void
prop_list_free(jprop_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bson_free(p[i].name);
        if (p[i].re != NULL) {
            pcre2_code_free(p[i].re);
        }
        shl_jschema_destroy(p[i].schema);
    }
    bson_free(p);
}

/* ---------------------------------------------------------------- parsing */

static int parse_schema(const bson_t *doc, int depth, jschema_t **out, shl_status_t *st);

static int
want_doc(const char *kw, const bson_iter_t *it, bson_t *out, shl_status_t *st)
{
    const uint8_t *data;
    uint32_t len;
    if (!BSON_ITER_HOLDS_DOCUMENT(it)) {
        return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                              "$jsonSchema keyword '%s' must be an object", kw);
    }
    bson_iter_document(it, &len, &data);
    bson_init_static(out, data, len);
    return 0;
}

static int
sub_schema(const char *kw, const bson_iter_t *it, int depth, jschema_t **out, shl_status_t *st)
{
    bson_t doc;
    int ret = want_doc(kw, it, &doc, st);
    return ret != 0 ? ret : parse_schema(&doc, depth + 1, out, st);
}

/* An array of schemas (allOf, anyOf, oneOf, tuple items). */
static int
schema_array(const char *kw, const bson_iter_t *it, int depth, bool allow_empty, jschema_t ***out,
             size_t *n, shl_status_t *st)
{
    bson_iter_t sub;
    int ret = 0;

    if (!BSON_ITER_HOLDS_ARRAY(it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "$jsonSchema keyword '%s' must be an array", kw);
    }
    bson_iter_recurse(it, &sub);
    while (shl_iter_next(&sub)) {
        jschema_t *s = NULL;
        if (!BSON_ITER_HOLDS_DOCUMENT(&sub)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "$jsonSchema keyword '%s' must be an array of objects, but found an element "
                     "of type %s",
                     kw, shl_bson_type_name(shl_iter_type(&sub)));
        }
        SHL_ERR(sub_schema(kw, &sub, depth, &s, st));
        *out = bson_realloc(*out, (*n + 1) * sizeof(**out));
        (*out)[(*n)++] = s;
    }
    if (*n == 0 && !allow_empty) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$jsonSchema keyword '%s' must be a non-empty array", kw);
    }
done:
    return ret;
}

static int
nonneg_int(const char *kw, const bson_iter_t *it, int64_t *out, shl_status_t *st)
{
    double d;
    if (!BSON_ITER_HOLDS_NUMBER(it)) {
        return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                              "$jsonSchema keyword '%s' must be a number", kw);
    }
    d = bson_iter_as_double(it);
    if (d < 0 || d != floor(d) || d > 9.2e18) {
        return shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                              "$jsonSchema keyword '%s' must be a non-negative integer "
                              "representable as a long",
                              kw);
    }
    *out = (int64_t)d;
    return 0;
}

static const struct {
    const char *name;
    int code; /* BSON type byte; 0 "number" */
} k_bson_types[] = {
    {"double", 1},      {"string", 2},        {"object", 3},
    {"array", 4},       {"binData", 5},       {"undefined", 6},
    {"objectId", 7},    {"bool", 8},          {"date", 9},
    {"null", 10},       {"regex", 11},        {"dbPointer", 12},
    {"javascript", 13}, {"symbol", 14},       {"javascriptWithScope", 15},
    {"int", 16},        {"timestamp", 17},    {"long", 18},
    {"decimal", 19},    {"minKey", T_MINKEY}, {"maxKey", T_MAXKEY},
    {"number", 0},
};

static const struct {
    const char *name;
    int code;
} k_json_types[] = {
    {"object", 3}, {"array", 4}, {"string", 2}, {"boolean", 8}, {"null", 10}, {"number", 0},
};

static int
add_type_name(jschema_t *s, const char *kw, const char *name, bool json, shl_status_t *st)
{
    if (json) {
        if (strcmp(name, "integer") == 0) {
            return shl_status_set(st, SHL_CODE_BAD_VALUE,
                                  "$jsonSchema type 'integer' is not currently supported.");
        }
        for (size_t i = 0; i < sizeof(k_json_types) / sizeof(k_json_types[0]); i++) {
            if (strcmp(k_json_types[i].name, name) == 0) {
                if (k_json_types[i].code == 0) {
                    s->type_number = true;
                } else {
                    s->types |= 1u << k_json_types[i].code;
                }
                return 0;
            }
        }
        return shl_status_set(st, SHL_CODE_BAD_VALUE, "Unknown type name alias: %s", name);
    }
    for (size_t i = 0; i < sizeof(k_bson_types) / sizeof(k_bson_types[0]); i++) {
        if (strcmp(k_bson_types[i].name, name) == 0) {
            if (k_bson_types[i].code == 0) {
                s->type_number = true;
            } else {
                s->types |= 1u << k_bson_types[i].code;
            }
            return 0;
        }
    }
    (void)kw;
    return shl_status_set(st, SHL_CODE_BAD_VALUE, "Unknown type name alias: %s", name);
}

static int
parse_type(jschema_t *s, const char *kw, const bson_iter_t *it, shl_status_t *st)
{
    bool json = strcmp(kw, "type") == 0;
    bson_iter_t sub;
    int ret = 0;

    s->has_type = true;
    if (BSON_ITER_HOLDS_UTF8(it)) {
        return add_type_name(s, kw, bson_iter_utf8(it, NULL), json, st);
    }
    if (!BSON_ITER_HOLDS_ARRAY(it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "$jsonSchema keyword '%s' must be either a string or an array of strings", kw);
    }
    bson_iter_recurse(it, &sub);
    if (!shl_iter_next(&sub)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "$jsonSchema keyword '%s' must name at least one type", kw);
    }
    do {
        if (!BSON_ITER_HOLDS_UTF8(&sub)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "$jsonSchema keyword '%s' array elements must be strings", kw);
        }
        SHL_ERR(add_type_name(s, kw, bson_iter_utf8(&sub, NULL), json, st));
    } while (shl_iter_next(&sub));
done:
    return ret;
}

static int
compile(const char *kw, const char *pattern, pcre2_code **out, shl_status_t *st)
{
    int errcode = 0;
    PCRE2_SIZE erroff = 0;
    PCRE2_UCHAR buf[256];

    *out = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &errcode, &erroff,
                         NULL);
    if (*out == NULL) {
        pcre2_get_error_message(errcode, buf, sizeof(buf));
        return shl_status_set(st, QC_REGEX_INVALID, "$jsonSchema keyword '%s': invalid regex: %s",
                              kw, (char *)buf);
    }
    return 0;
}

/* properties / patternProperties / dependencies: an object of name -> schema (or list). */
static int
parse_prop_map(const char *kw, const bson_iter_t *it, int depth, jprop_t **out, size_t *n,
               shl_status_t *st)
{
    bson_t doc;
    bson_iter_t sub;
    int ret = 0;
    bool patterns = strcmp(kw, "patternProperties") == 0;
    bool deps = strcmp(kw, "dependencies") == 0;

    SHL_ERR(want_doc(kw, it, &doc, st));
    bson_iter_init(&sub, &doc);
    while (shl_iter_next(&sub)) {
        jprop_t *p;
        *out = bson_realloc(*out, (*n + 1) * sizeof(**out));
        p = &(*out)[(*n)++];
        memset(p, 0, sizeof(*p));
        p->name = bson_strdup(shl_iter_key(&sub));
        if (patterns) {
            SHL_ERR(compile(kw, p->name, &p->re, st));
        }
        if (deps && BSON_ITER_HOLDS_ARRAY(&sub)) {
            const uint8_t *data;
            uint32_t len;
            bson_iter_t f;
            bson_t list;
            bson_iter_array(&sub, &len, &data);
            p->deps_data = data;
            p->deps_len = len;
            bson_init_static(&list, data, len);
            bson_iter_init(&f, &list);
            while (shl_iter_next(&f)) {
                if (!BSON_ITER_HOLDS_UTF8(&f)) {
                    SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                             "property '%s' in $jsonSchema keyword 'dependencies' must be an "
                             "array of strings",
                             p->name);
                }
            }
            continue;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&sub)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "Nested schema for $jsonSchema property '%s' must be an object", p->name);
        }
        SHL_ERR(sub_schema(kw, &sub, depth, &p->schema, st));
    }
done:
    return ret;
}

/* additionalProperties / additionalItems: a boolean or a schema. */
static int
parse_additional(const char *kw, const bson_iter_t *it, int depth, int *mode, jschema_t **schema,
                 shl_status_t *st)
{
    if (BSON_ITER_HOLDS_BOOL(it)) {
        *mode = bson_iter_bool(it) ? 1 : 0;
        return 0;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        *mode = 2;
        return sub_schema(kw, it, depth, schema, st);
    }
    return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                          "$jsonSchema keyword '%s' must be either an object or a boolean", kw);
}

static const char *const k_unsupported[] = {"$ref",   "$schema", "default", "definitions",
                                            "format", "id",      NULL};

static int
parse_schema(const bson_t *doc, int depth, jschema_t **out, shl_status_t *st)
{
    jschema_t *s = bson_malloc0(sizeof(*s));
    bson_iter_t it;
    const bson_iter_t *excl_min = NULL, *excl_max = NULL;
    bson_iter_t emin, emax;
    int ret = 0;

    *out = NULL;
    s->min_length = s->max_length = -1;
    s->min_props = s->max_props = -1;
    s->min_items = s->max_items = -1;
    s->additional_props = s->additional_items = -1;
    if (depth > JS_MAX_DEPTH) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "$jsonSchema is nested too deeply");
    }
    bson_iter_init(&it, doc);
    while (shl_iter_next(&it)) {
        const char *kw = shl_iter_key(&it);
        for (int i = 0; k_unsupported[i] != NULL; i++) {
            if (strcmp(kw, k_unsupported[i]) == 0) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "$jsonSchema keyword '%s' is not currently supported", kw);
            }
        }
        if (strcmp(kw, "bsonType") == 0 || strcmp(kw, "type") == 0) {
            if (s->has_type) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'");
            }
            SHL_ERR(parse_type(s, kw, &it, st));
        } else if (strcmp(kw, "title") == 0 || strcmp(kw, "description") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "$jsonSchema keyword '%s' must be of type string", kw);
            }
        } else if (strcmp(kw, "minimum") == 0 || strcmp(kw, "maximum") == 0) {
            bool min = kw[1] == 'i';
            if (!BSON_ITER_HOLDS_NUMBER(&it) && !BSON_ITER_HOLDS_DECIMAL128(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "$jsonSchema keyword '%s' must be a number",
                         kw);
            }
            *(min ? &s->minimum : &s->maximum) = *bson_iter_value(&it);
            *(min ? &s->has_min : &s->has_max) = true;
        } else if (strcmp(kw, "exclusiveMinimum") == 0 || strcmp(kw, "exclusiveMaximum") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "$jsonSchema keyword '%s' must be a boolean",
                         kw);
            }
            if (strcmp(kw, "exclusiveMinimum") == 0) {
                emin = it;
                excl_min = &emin;
            } else {
                emax = it;
                excl_max = &emax;
            }
        } else if (strcmp(kw, "multipleOf") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it) || !(bson_iter_as_double(&it) > 0)) {
                SHL_FAIL(st,
                         BSON_ITER_HOLDS_NUMBER(&it) ? SHL_CODE_FAILED_TO_PARSE
                                                     : SHL_CODE_TYPE_MISMATCH,
                         "$jsonSchema keyword 'multipleOf' must have a positive value");
            }
            s->has_multiple_of = true;
            s->multiple_of = bson_iter_as_double(&it);
        } else if (strcmp(kw, "minLength") == 0) {
            SHL_ERR(nonneg_int(kw, &it, &s->min_length, st));
        } else if (strcmp(kw, "maxLength") == 0) {
            SHL_ERR(nonneg_int(kw, &it, &s->max_length, st));
        } else if (strcmp(kw, "minProperties") == 0) {
            SHL_ERR(nonneg_int(kw, &it, &s->min_props, st));
        } else if (strcmp(kw, "maxProperties") == 0) {
            SHL_ERR(nonneg_int(kw, &it, &s->max_props, st));
        } else if (strcmp(kw, "minItems") == 0) {
            SHL_ERR(nonneg_int(kw, &it, &s->min_items, st));
        } else if (strcmp(kw, "maxItems") == 0) {
            SHL_ERR(nonneg_int(kw, &it, &s->max_items, st));
        } else if (strcmp(kw, "pattern") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "$jsonSchema keyword 'pattern' must be a string");
            }
            SHL_ERR(compile(kw, bson_iter_utf8(&it, NULL), &s->pattern, st));
        } else if (strcmp(kw, "uniqueItems") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "$jsonSchema keyword 'uniqueItems' must be a boolean");
            }
            s->unique_items = bson_iter_bool(&it);
        } else if (strcmp(kw, "required") == 0) {
            bson_iter_t sub;
            if (!BSON_ITER_HOLDS_ARRAY(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "$jsonSchema keyword 'required' must be an array");
            }
            bson_iter_recurse(&it, &sub);
            while (shl_iter_next(&sub)) {
                if (!BSON_ITER_HOLDS_UTF8(&sub)) {
                    SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                             "$jsonSchema keyword 'required' must contain only strings");
                }
                s->required = bson_realloc(s->required, (s->nrequired + 1) * sizeof(char *));
                s->required[s->nrequired++] = bson_strdup(bson_iter_utf8(&sub, NULL));
            }
            if (s->nrequired == 0) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "$jsonSchema keyword 'required' cannot be an empty array");
            }
        } else if (strcmp(kw, "properties") == 0) {
            SHL_ERR(parse_prop_map(kw, &it, depth, &s->props, &s->nprops, st));
        } else if (strcmp(kw, "patternProperties") == 0) {
            SHL_ERR(parse_prop_map(kw, &it, depth, &s->pattern_props, &s->npattern_props, st));
        } else if (strcmp(kw, "dependencies") == 0) {
            SHL_ERR(parse_prop_map(kw, &it, depth, &s->deps, &s->ndeps, st));
        } else if (strcmp(kw, "additionalProperties") == 0) {
            SHL_ERR(parse_additional(kw, &it, depth, &s->additional_props,
                                     &s->additional_props_schema, st));
        } else if (strcmp(kw, "additionalItems") == 0) {
            SHL_ERR(parse_additional(kw, &it, depth, &s->additional_items,
                                     &s->additional_items_schema, st));
        } else if (strcmp(kw, "items") == 0) {
            if (BSON_ITER_HOLDS_ARRAY(&it)) {
                SHL_ERR(schema_array(kw, &it, depth, true, &s->tuple, &s->ntuple, st));
                if (s->ntuple == 0) {
                    s->tuple = bson_malloc0(sizeof(*s->tuple)); /* [] still means "a tuple" */
                }
            } else if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                SHL_ERR(sub_schema(kw, &it, depth, &s->items, st));
            } else {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "$jsonSchema keyword 'items' must be an array or an object");
            }
        } else if (strcmp(kw, "enum") == 0) {
            bson_iter_t sub;
            bson_value_t *vals = NULL;
            size_t n = 0;
            if (!BSON_ITER_HOLDS_ARRAY(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "$jsonSchema keyword 'enum' must be an array");
            }
            bson_iter_recurse(&it, &sub);
            while (shl_iter_next(&sub)) {
                vals = bson_realloc(vals, (n + 1) * sizeof(*vals));
                vals[n++] = *bson_iter_value(&sub);
            }
            s->enum_values = vals;
            s->nenum = n;
            if (n == 0) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "$jsonSchema keyword 'enum' cannot be an empty array");
            }
        } else if (strcmp(kw, "allOf") == 0) {
            SHL_ERR(schema_array(kw, &it, depth, false, &s->all_of, &s->nall_of, st));
        } else if (strcmp(kw, "anyOf") == 0) {
            SHL_ERR(schema_array(kw, &it, depth, false, &s->any_of, &s->nany_of, st));
        } else if (strcmp(kw, "oneOf") == 0) {
            SHL_ERR(schema_array(kw, &it, depth, false, &s->one_of, &s->none_of, st));
        } else if (strcmp(kw, "not") == 0) {
            SHL_ERR(sub_schema(kw, &it, depth, &s->not_, st));
        } else {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Unknown $jsonSchema keyword: %s", kw);
        }
    }
    if (excl_min != NULL) {
        if (!s->has_min) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "$jsonSchema keyword 'minimum' must be a present if exclusiveMinimum is "
                     "present");
        }
        s->min_excl = bson_iter_bool(excl_min);
    }
    if (excl_max != NULL) {
        if (!s->has_max) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "$jsonSchema keyword 'maximum' must be a present if exclusiveMaximum is "
                     "present");
        }
        s->max_excl = bson_iter_bool(excl_max);
    }
    *out = s;
    s = NULL;
done:
    shl_jschema_destroy(s);
    return ret;
}

int
shl_jschema_parse(const bson_t *schema, jschema_t **out, shl_status_t *st)
{
    return parse_schema(schema, 0, out, st);
}

/* ---------------------------------------------------------------- evaluation */

static bool match_value(const jschema_t *s, const bson_value_t *v);

static bool
is_number(const bson_value_t *v)
{
    return v->value_type == BSON_TYPE_INT32 || v->value_type == BSON_TYPE_INT64 ||
           v->value_type == BSON_TYPE_DOUBLE || v->value_type == BSON_TYPE_DECIMAL128;
}

static bool
type_ok(const jschema_t *s, const bson_value_t *v)
{
    int code;
    if (!s->has_type) {
        return true;
    }
    if (s->type_number && is_number(v)) {
        return true;
    }
    code = v->value_type == BSON_TYPE_MINKEY   ? T_MINKEY
           : v->value_type == BSON_TYPE_MAXKEY ? T_MAXKEY
                                               : (int)v->value_type;
    return code > 0 && code < 32 && (s->types & (1u << code)) != 0;
}

static bool
regex_ok(const pcre2_code *re, const char *s, size_t len)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, len, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

static size_t
utf8_length(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        n += ((unsigned char)s[i] & 0xc0) != 0x80;
    }
    return n;
}

static void
value_doc(const bson_value_t *v, bson_t *out)
{
    bson_init_static(out, v->value.v_doc.data, v->value.v_doc.data_len);
}

static bool
object_ok(const jschema_t *s, const bson_t *obj)
{
    bson_iter_t it;
    int64_t nfields = 0;

    for (size_t i = 0; i < s->nrequired; i++) {
        if (!bson_iter_init_find(&it, obj, s->required[i])) {
            return false;
        }
    }
    bson_iter_init(&it, obj);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bool named = false;
        nfields++;
        for (size_t i = 0; i < s->nprops; i++) {
            if (strcmp(s->props[i].name, k) == 0) {
                named = true;
                if (!match_value(s->props[i].schema, bson_iter_value(&it))) {
                    return false;
                }
            }
        }
        for (size_t i = 0; i < s->npattern_props; i++) {
            if (regex_ok(s->pattern_props[i].re, k, strlen(k))) {
                named = true;
                if (!match_value(s->pattern_props[i].schema, bson_iter_value(&it))) {
                    return false;
                }
            }
        }
        if (!named && s->additional_props == 0) {
            return false;
        }
        if (!named && s->additional_props == 2 &&
            !match_value(s->additional_props_schema, bson_iter_value(&it))) {
            return false;
        }
        for (size_t i = 0; i < s->ndeps; i++) {
            const jprop_t *d = &s->deps[i];
            if (strcmp(d->name, k) != 0) {
                continue;
            }
            if (d->schema == NULL) {
                bson_iter_t f, g;
                bson_t list;
                bson_init_static(&list, d->deps_data, d->deps_len);
                bson_iter_init(&f, &list);
                while (shl_iter_next(&f)) {
                    if (!bson_iter_init_find(&g, obj, bson_iter_utf8(&f, NULL))) {
                        return false;
                    }
                }
            } else {
                bson_value_t whole;
                memset(&whole, 0, sizeof(whole));
                whole.value_type = BSON_TYPE_DOCUMENT;
                whole.value.v_doc.data = (uint8_t *)(uintptr_t)bson_get_data(obj);
                whole.value.v_doc.data_len = obj->len;
                if (!match_value(d->schema, &whole)) {
                    return false;
                }
            }
        }
    }
    if (s->min_props >= 0 && nfields < s->min_props) {
        return false;
    }
    if (s->max_props >= 0 && nfields > s->max_props) {
        return false;
    }
    return true;
}

static bool
array_ok(const jschema_t *s, const bson_t *arr)
{
    bson_iter_t it;
    int64_t n = 0;

    bson_iter_init(&it, arr);
    while (shl_iter_next(&it)) {
        const bson_value_t *e = bson_iter_value(&it);
        if (s->items != NULL && !match_value(s->items, e)) {
            return false;
        }
        if (s->tuple != NULL) {
            if ((size_t)n < s->ntuple) {
                if (!match_value(s->tuple[n], e)) {
                    return false;
                }
            } else if (s->additional_items == 0) {
                return false;
            } else if (s->additional_items == 2 && !match_value(s->additional_items_schema, e)) {
                return false;
            }
        }
        if (s->unique_items) {
            bson_iter_t prev;
            bson_iter_init(&prev, arr);
            for (int64_t j = 0; j < n && shl_iter_next(&prev); j++) {
                if (shl_bson_value_compare(bson_iter_value(&prev), e) == 0) {
                    return false;
                }
            }
        }
        n++;
    }
    if (s->min_items >= 0 && n < s->min_items) {
        return false;
    }
    if (s->max_items >= 0 && n > s->max_items) {
        return false;
    }
    return true;
}

static bool
number_ok(const jschema_t *s, const bson_value_t *v)
{
    if (s->has_min) {
        int c = shl_bson_value_compare(v, &s->minimum);
        if (c < 0 || (c == 0 && s->min_excl)) {
            return false;
        }
    }
    if (s->has_max) {
        int c = shl_bson_value_compare(v, &s->maximum);
        if (c > 0 || (c == 0 && s->max_excl)) {
            return false;
        }
    }
    if (s->has_multiple_of) {
        double d = query_value_as_double(v);
        double r = fmod(d, s->multiple_of);
        if (isnan(d) || isinf(d) || r != 0) {
            return false;
        }
    }
    return true;
}

static bool
match_value(const jschema_t *s, const bson_value_t *v)
{
    if (!type_ok(s, v)) {
        return false;
    }
    if (is_number(v) && !number_ok(s, v)) {
        return false;
    }
    if (v->value_type == BSON_TYPE_UTF8) {
        const char *str = v->value.v_utf8.str;
        size_t len = v->value.v_utf8.len;
        if (s->min_length >= 0 || s->max_length >= 0) {
            int64_t n = (int64_t)utf8_length(str, len);
            if ((s->min_length >= 0 && n < s->min_length) ||
                (s->max_length >= 0 && n > s->max_length)) {
                return false;
            }
        }
        if (s->pattern != NULL && !regex_ok(s->pattern, str, len)) {
            return false;
        }
    }
    if (v->value_type == BSON_TYPE_DOCUMENT) {
        bson_t obj;
        value_doc(v, &obj);
        if (!object_ok(s, &obj)) {
            return false;
        }
    }
    if (v->value_type == BSON_TYPE_ARRAY) {
        bson_t arr;
        value_doc(v, &arr);
        if (!array_ok(s, &arr)) {
            return false;
        }
    }
    if (s->nenum > 0) {
        bool found = false;
        for (size_t i = 0; i < s->nenum && !found; i++) {
            found = shl_bson_value_compare(v, &s->enum_values[i]) == 0 &&
                    (v->value_type == s->enum_values[i].value_type ||
                     (is_number(v) && is_number(&s->enum_values[i])));
        }
        if (!found) {
            return false;
        }
    }
    for (size_t i = 0; i < s->nall_of; i++) {
        if (!match_value(s->all_of[i], v)) {
            return false;
        }
    }
    if (s->nany_of > 0) {
        bool any = false;
        for (size_t i = 0; i < s->nany_of && !any; i++) {
            any = match_value(s->any_of[i], v);
        }
        if (!any) {
            return false;
        }
    }
    if (s->none_of > 0) {
        size_t n = 0;
        for (size_t i = 0; i < s->none_of; i++) {
            n += match_value(s->one_of[i], v) ? 1 : 0;
        }
        if (n != 1) {
            return false;
        }
    }
    if (s->not_ != NULL && match_value(s->not_, v)) {
        return false;
    }
    return true;
}

bool
shl_jschema_match_doc(const jschema_t *s, const bson_t *doc)
{
    bson_value_t whole;

    /* A top-level schema that excludes "object" matches no document. */
    memset(&whole, 0, sizeof(whole));
    whole.value_type = BSON_TYPE_DOCUMENT;
    whole.value.v_doc.data = (uint8_t *)(uintptr_t)bson_get_data(doc);
    whole.value.v_doc.data_len = doc->len;
    return match_value(s, &whole);
}
