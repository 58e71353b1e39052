/*
 * validation_error.c -- errInfo.details of a DocumentValidationFailure: which parts of the
 * collection's validator a document failed and why, in the shape MongoDB 5.0+ reports
 * (operatorName, specifiedAs, reason, consideredValue/consideredType, clausesNotSatisfied,
 * schemaRulesNotSatisfied, propertiesNotSatisfied, missingProperties). Built only after a
 * document failed: each clause is re-checked on its own with a matcher of its own.
 */
#include "bson/bson_iter.h"
#include "db/db_private.h"

#include <string.h>

#include "bson/bson_path.h"
#include "bson/bson_util.h"
#include "query/matcher.h"

/* Deeper nesting is described by its operator only (a guard against huge errInfo). */
#define MAX_DEPTH 20

static void describe_clause(const char *field, const bson_iter_t *op, const bson_t *doc,
                            int depth, bson_t *out);
static void describe_filter(const bson_t *filter, const bson_t *doc, int depth, bson_t *out);

/* Whether 'doc' matches 'filter' on its own (a filter that fails to parse or to evaluate
 * counts as not matching: its failure is what gets described). */
static bool
matches(const bson_t *filter, const bson_t *doc)
{
    shl_matcher_t *m = NULL;
    shl_status_t st;
    bool ok = false;
    if (shl_matcher_new(filter, SHL_MATCHER_ALLOW_EXPR, &m, &st) == 0 &&
        shl_matcher_match(m, doc, NULL, &ok, &st) != 0) {
        ok = false;
    }
    shl_matcher_destroy(m);
    return ok;
}

static void
view_of(const bson_iter_t *it, bson_t *out)
{
    const uint8_t *data;
    uint32_t len;
    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_document(it, &len, &data);
    } else {
        bson_iter_array(it, &len, &data);
    }
    bson_init_static(out, data, len);
}

/* The one-clause filter {field: {op: v}} ({field: v} for an implicit equality, {op: v}
 * for a top-level operator). */
static void
clause_filter(const char *field, const bson_iter_t *op, bool implicit_eq, bson_t *out)
{
    bson_init(out);
    if (field == NULL) {
        bson_append_iter(out, NULL, 0, op);
    } else if (implicit_eq) {
        bson_append_iter(out, field, -1, op);
    } else {
        bson_t sub;
        BSON_APPEND_DOCUMENT_BEGIN(out, field, &sub);
        bson_append_iter(&sub, NULL, 0, op);
        bson_append_document_end(out, &sub);
    }
}

/*
 * consideredValue(s) / consideredType(s) of the value at 'field' (false when missing): an
 * array is traversed as the predicate traverses it (its elements, one alone is a
 * consideredValue); types are the distinct type names, sorted.
 */
static bool
append_considered(const bson_t *doc, const char *field, bool with_type, bson_t *out)
{
    bson_iter_t v, el;
    bson_t arr, types_arr;
    const char *types[32];
    size_t ntypes = 0, nvals = 0;

    if (!shl_bson_path_get(doc, field, &v)) {
        return false;
    }
    if (!BSON_ITER_HOLDS_ARRAY(&v)) {
        bson_append_value(out, "consideredValue", -1, bson_iter_value(&v));
        if (with_type) {
            BSON_APPEND_UTF8(out, "consideredType", shl_bson_type_name(bson_iter_type(&v)));
        }
        return true;
    }
    {
        const uint8_t *data;
        uint32_t len;
        bson_iter_array(&v, &len, &data);
        bson_init_static(&arr, data, len);
    }
    nvals = bson_count_keys(&arr);
    if (nvals == 1 && bson_iter_init(&el, &arr) && shl_iter_next(&el)) {
        bson_append_value(out, "consideredValue", -1, bson_iter_value(&el));
    } else {
        BSON_APPEND_ARRAY(out, "consideredValues", &arr);
    }
    if (with_type && bson_iter_init(&el, &arr)) {
        while (shl_iter_next(&el) && ntypes < sizeof(types) / sizeof(types[0])) {
            const char *t = shl_bson_type_name(bson_iter_type(&el));
            size_t i = 0;
            while (i < ntypes && strcmp(types[i], t) < 0) {
                i++;
            }
            if (i < ntypes && strcmp(types[i], t) == 0) {
                continue;
            }
            memmove(&types[i + 1], &types[i], (ntypes - i) * sizeof(types[0]));
            types[i] = t;
            ntypes++;
        }
        if (ntypes == 1) {
            BSON_APPEND_UTF8(out, "consideredType", types[0]);
        } else if (ntypes > 1) {
            BSON_APPEND_ARRAY_BEGIN(out, "consideredTypes", &types_arr);
            for (size_t i = 0; i < ntypes; i++) {
                char k[16];
                const char *kp;
                bson_uint32_to_string((uint32_t)i, &kp, k, sizeof(k));
                BSON_APPEND_UTF8(&types_arr, kp, types[i]);
            }
            bson_append_array_end(out, &types_arr);
        }
    }
    return true;
}

/* A leaf predicate on 'field' ({$gt: 5}, {$type: ...}, {$exists: ...}, an equality...). */
static void
describe_leaf(const char *field, const bson_iter_t *op, bool implicit_eq, const bson_t *doc,
              bool inverted, bson_t *out)
{
    const char *name = implicit_eq ? "$eq" : shl_iter_key(op);
    bson_t spec;
    bson_iter_t probe;
    bool present = shl_bson_path_get(doc, field, &probe);

    BSON_APPEND_UTF8(out, "operatorName", name);
    clause_filter(field, op, implicit_eq, &spec);
    BSON_APPEND_DOCUMENT(out, "specifiedAs", &spec);
    bson_destroy(&spec);
    if (strcmp(name, "$exists") == 0) {
        BSON_APPEND_UTF8(out, "reason", present ? "path does exist" : "path does not exist");
        if (present) {
            append_considered(doc, field, false, out);
        }
    } else if (strcmp(name, "$type") == 0) {
        if (!present) {
            BSON_APPEND_UTF8(out, "reason", "field was missing");
        } else {
            BSON_APPEND_UTF8(out, "reason", inverted ? "type did match" : "type did not match");
            append_considered(doc, field, true, out);
        }
    } else if (!present) {
        BSON_APPEND_UTF8(out, "reason", "field was missing");
    } else if (strcmp(name, "$in") == 0 || strcmp(name, "$nin") == 0) {
        /* $nin is the inverse of $in. */
        bool found = (strcmp(name, "$nin") == 0) != inverted;
        BSON_APPEND_UTF8(out, "reason",
                         found ? "matching value found in array" : "no matching value found in array");
        append_considered(doc, field, false, out);
    } else if (strcmp(name, "$regex") == 0) {
        BSON_APPEND_UTF8(out, "reason", inverted ? "regular expression did match"
                                                 : "regular expression did not match");
        append_considered(doc, field, false, out);
    } else {
        BSON_APPEND_UTF8(out, "reason", inverted ? "comparison succeeded" : "comparison failed");
        append_considered(doc, field, false, out);
    }
}

/* The one field predicate of 'filter' ({f: v} or {f: {$op: v}}), if that is all it is. */
static bool
single_leaf(const bson_t *filter, const char **field, bson_iter_t *op, bool *implicit_eq)
{
    bson_iter_t it, sub;
    if (!bson_iter_init(&it, filter) || !shl_iter_next(&it) || shl_iter_key(&it)[0] == '$') {
        return false;
    }
    *field = shl_iter_key(&it);
    *implicit_eq = true;
    *op = it;
    if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub) && shl_iter_next(&sub) &&
        shl_iter_key(&sub)[0] == '$') {
        *implicit_eq = false;
        *op = sub;
        if (shl_iter_next(&sub)) {
            return false;
        }
    }
    return !shl_iter_next(&it);
}

/* $and / $or / $nor: the clauses that decided the failure, by index. */
static void
describe_logical(const bson_iter_t *op, const bson_t *doc, int depth, bson_t *out)
{
    const char *name = shl_iter_key(op);
    bool nor = strcmp(name, "$nor") == 0;
    bson_t arr, clauses;
    bson_iter_t el;
    uint32_t i = 0, n = 0;

    BSON_APPEND_UTF8(out, "operatorName", name);
    if (!BSON_ITER_HOLDS_ARRAY(op)) {
        return;
    }
    view_of(op, &arr);
    BSON_APPEND_ARRAY_BEGIN(out, nor ? "clausesSatisfied" : "clausesNotSatisfied", &clauses);
    if (bson_iter_init(&el, &arr)) {
        while (shl_iter_next(&el)) {
            bson_t c, item, details;
            char key[16];
            const char *k;
            if (!BSON_ITER_HOLDS_DOCUMENT(&el)) {
                i++;
                continue;
            }
            view_of(&el, &c);
            if (matches(&c, doc) != nor) {
                i++;
                continue;
            }
            bson_uint32_to_string(n++, &k, key, sizeof(key));
            BSON_APPEND_DOCUMENT_BEGIN(&clauses, k, &item);
            BSON_APPEND_INT32(&item, "index", (int32_t)i);
            BSON_APPEND_DOCUMENT_BEGIN(&item, "details", &details);
            if (nor) {
                /* What matched, described in the inverted sense. */
                const char *f;
                bson_iter_t o;
                bool eq;
                if (single_leaf(&c, &f, &o, &eq)) {
                    describe_leaf(f, &o, eq, doc, true, &details);
                } else {
                    BSON_APPEND_UTF8(&details, "operatorName", "$and");
                    BSON_APPEND_DOCUMENT(&details, "specifiedAs", &c);
                    BSON_APPEND_UTF8(&details, "reason", "expression did match");
                }
            } else {
                describe_filter(&c, doc, depth + 1, &details);
            }
            bson_append_document_end(&item, &details);
            bson_append_document_end(&clauses, &item);
            i++;
        }
    }
    bson_append_array_end(out, &clauses);
}

/* ---------------------------------------------------------------- $jsonSchema */

static void
kw_spec(const bson_iter_t *kw, bson_t *out)
{
    bson_t spec = BSON_INITIALIZER;
    bson_append_iter(&spec, NULL, 0, kw);
    BSON_APPEND_DOCUMENT(out, "specifiedAs", &spec);
    bson_destroy(&spec);
}

/* Whether the schema {kw} alone (under properties.<prop> when 'prop') accepts 'doc'. */
static bool
schema_kw_ok(const char *prop, const bson_iter_t *kw, const bson_t *doc)
{
    bson_t f = BSON_INITIALIZER, js, props, p;
    bool ok;
    BSON_APPEND_DOCUMENT_BEGIN(&f, "$jsonSchema", &js);
    if (prop != NULL) {
        BSON_APPEND_DOCUMENT_BEGIN(&js, "properties", &props);
        BSON_APPEND_DOCUMENT_BEGIN(&props, prop, &p);
        bson_append_iter(&p, NULL, 0, kw);
        bson_append_document_end(&props, &p);
        bson_append_document_end(&js, &props);
    } else {
        bson_append_iter(&js, NULL, 0, kw);
    }
    bson_append_document_end(&f, &js);
    ok = matches(&f, doc);
    bson_destroy(&f);
    return ok;
}

static const char *
kw_reason(const char *kw)
{
    static const struct {
        const char *kw, *reason;
    } reasons[] = {
        {"bsonType", "type did not match"},
        {"type", "type did not match"},
        {"minimum", "comparison failed"},
        {"maximum", "comparison failed"},
        {"enum", "value was not found in enum"},
        {"minLength", "specified string length was not satisfied"},
        {"maxLength", "specified string length was not satisfied"},
        {"pattern", "regular expression did not match"},
        {"minItems", "array did not match specified length"},
        {"maxItems", "array did not match specified length"},
        {"uniqueItems", "found a duplicate item"},
        {"multipleOf", "considered value is not a multiple of the specified value"},
        {"minProperties", "specified number of properties was not satisfied"},
        {"maxProperties", "specified number of properties was not satisfied"},
        {"not", "child expression matched"},
    };
    for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++) {
        if (strcmp(reasons[i].kw, kw) == 0) {
            return reasons[i].reason;
        }
    }
    return NULL;
}

static void rule_body(const bson_iter_t *kw, const bson_t *schema, const bson_t *doc, int depth,
                      bson_t *rule);

/* The failing keywords of a property's subschema, as an array of rule documents. */
static void
describe_property(const char *prop, const bson_t *sub, const bson_t *doc, int depth, bson_t *arr)
{
    bson_iter_t kw, v;
    uint32_t n = 0;
    bool present = shl_bson_path_get(doc, prop, &v);

    if (!bson_iter_init(&kw, sub)) {
        return;
    }
    while (shl_iter_next(&kw)) {
        const char *k = shl_iter_key(&kw);
        const char *reason = kw_reason(k);
        bson_t rule;
        char key[16];
        const char *ak;
        if (strcmp(k, "description") == 0 || strcmp(k, "title") == 0 ||
            schema_kw_ok(prop, &kw, doc)) {
            continue;
        }
        bson_uint32_to_string(n++, &ak, key, sizeof(key));
        BSON_APPEND_DOCUMENT_BEGIN(arr, ak, &rule);
        BSON_APPEND_UTF8(&rule, "operatorName", k);
        if ((strcmp(k, "properties") == 0 || strcmp(k, "required") == 0 ||
             strcmp(k, "additionalProperties") == 0) &&
            present && BSON_ITER_HOLDS_DOCUMENT(&v) && depth < MAX_DEPTH) {
            /* A nested object: the keyword described over it, as at the top. */
            bson_t inner;
            view_of(&v, &inner);
            rule_body(&kw, sub, &inner, depth + 1, &rule);
        } else {
            kw_spec(&kw, &rule);
            BSON_APPEND_UTF8(&rule, "reason", reason != NULL ? reason : "schema did not match");
            if (present) {
                bson_append_value(&rule, "consideredValue", -1, bson_iter_value(&v));
                if (strcmp(k, "bsonType") == 0 || strcmp(k, "type") == 0) {
                    BSON_APPEND_UTF8(&rule, "consideredType",
                                     shl_bson_type_name(bson_iter_type(&v)));
                }
            }
        }
        bson_append_document_end(arr, &rule);
    }
}

/* A failing keyword's rule, after its operatorName: what MongoDB reports for it ('schema' is
 * the schema holding the keyword, for additionalProperties' list of known properties). */
static void
rule_body(const bson_iter_t *kwp, const bson_t *schema, const bson_t *doc, int depth, bson_t *rule)
{
    bson_iter_t kw = *kwp;
    const char *k = shl_iter_key(&kw);
    bson_t arr;

    if (strcmp(k, "required") == 0 && BSON_ITER_HOLDS_ARRAY(&kw)) {
        bson_t req;
        bson_iter_t r, probe;
        uint32_t m = 0;
        kw_spec(&kw, rule);
        view_of(&kw, &req);
        BSON_APPEND_ARRAY_BEGIN(rule, "missingProperties", &arr);
        if (bson_iter_init(&r, &req)) {
            while (shl_iter_next(&r)) {
                const char *name = BSON_ITER_HOLDS_UTF8(&r) ? bson_iter_utf8(&r, NULL) : NULL;
                char mk[16];
                const char *mkp;
                if (name != NULL && !bson_iter_init_find(&probe, doc, name)) {
                    bson_uint32_to_string(m++, &mkp, mk, sizeof(mk));
                    BSON_APPEND_UTF8(&arr, mkp, name);
                }
            }
        }
        bson_append_array_end(rule, &arr);
    } else if (strcmp(k, "properties") == 0 && BSON_ITER_HOLDS_DOCUMENT(&kw)) {
        bson_t props;
        bson_iter_t p;
        uint32_t m = 0;
        view_of(&kw, &props);
        BSON_APPEND_ARRAY_BEGIN(rule, "propertiesNotSatisfied", &arr);
        if (bson_iter_init(&p, &props)) {
            while (shl_iter_next(&p)) {
                bson_t item, sub, details;
                char pk[16];
                const char *pkp;
                if (!BSON_ITER_HOLDS_DOCUMENT(&p)) {
                    continue;
                }
                view_of(&p, &sub);
                {
                    /* Only the properties that fail on their own. */
                    bson_t one = BSON_INITIALIZER, f = BSON_INITIALIZER, js;
                    bool ok;
                    bson_append_iter(&one, NULL, 0, &p);
                    BSON_APPEND_DOCUMENT_BEGIN(&f, "$jsonSchema", &js);
                    BSON_APPEND_DOCUMENT(&js, "properties", &one);
                    bson_append_document_end(&f, &js);
                    ok = matches(&f, doc);
                    bson_destroy(&f);
                    bson_destroy(&one);
                    if (ok) {
                        continue;
                    }
                }
                bson_uint32_to_string(m++, &pkp, pk, sizeof(pk));
                BSON_APPEND_DOCUMENT_BEGIN(&arr, pkp, &item);
                BSON_APPEND_UTF8(&item, "propertyName", shl_iter_key(&p));
                {
                    /* The subschema's annotations come along, as MongoDB reports them. */
                    bson_iter_t ann;
                    if (bson_iter_init_find(&ann, &sub, "title")) {
                        bson_append_iter(&item, NULL, 0, &ann);
                    }
                    if (bson_iter_init_find(&ann, &sub, "description")) {
                        bson_append_iter(&item, NULL, 0, &ann);
                    }
                }
                BSON_APPEND_ARRAY_BEGIN(&item, "details", &details);
                describe_property(shl_iter_key(&p), &sub, doc, depth, &details);
                bson_append_array_end(&item, &details);
                bson_append_document_end(&arr, &item);
            }
        }
        bson_append_array_end(rule, &arr);
    } else if (strcmp(k, "additionalProperties") == 0 && BSON_ITER_HOLDS_BOOL(&kw)) {
        bson_iter_t d, props, probe;
        bool have_props = bson_iter_init_find(&props, schema, "properties") &&
                          BSON_ITER_HOLDS_DOCUMENT(&props);
        bson_t pv;
        uint32_t m = 0;
        if (have_props) {
            view_of(&props, &pv);
        }
        kw_spec(&kw, rule);
        BSON_APPEND_ARRAY_BEGIN(rule, "additionalProperties", &arr);
        if (bson_iter_init(&d, doc)) {
            while (shl_iter_next(&d)) {
                char ak[16];
                const char *akp;
                if (have_props && bson_iter_init_find(&probe, &pv, shl_iter_key(&d))) {
                    continue;
                }
                bson_uint32_to_string(m++, &akp, ak, sizeof(ak));
                BSON_APPEND_UTF8(&arr, akp, shl_iter_key(&d));
            }
        }
        bson_append_array_end(rule, &arr);
    } else {
        const char *reason = kw_reason(k);
        kw_spec(&kw, rule);
        BSON_APPEND_UTF8(rule, "reason", reason != NULL ? reason : "schema did not match");
        if (strcmp(k, "bsonType") == 0 || strcmp(k, "type") == 0) {
            BSON_APPEND_DOCUMENT(rule, "consideredValue", doc);
            BSON_APPEND_UTF8(rule, "consideredType", "object");
        }
    }
}

/* The failing top-level keywords of 'schema' for 'doc', appended to the array 'rules'. */
static void
describe_schema(const bson_t *schema, const bson_t *doc, int depth, bson_t *rules)
{
    bson_iter_t kw;
    uint32_t n = 0;

    if (!bson_iter_init(&kw, schema)) {
        return;
    }
    while (shl_iter_next(&kw)) {
        const char *k = shl_iter_key(&kw);
        bson_t rule;
        char key[16];
        const char *ak;
        if (strcmp(k, "description") == 0 || strcmp(k, "title") == 0 ||
            schema_kw_ok(NULL, &kw, doc)) {
            continue;
        }
        bson_uint32_to_string(n++, &ak, key, sizeof(key));
        BSON_APPEND_DOCUMENT_BEGIN(rules, ak, &rule);
        BSON_APPEND_UTF8(&rule, "operatorName", k);
        rule_body(&kw, schema, doc, depth, &rule);
        bson_append_document_end(rules, &rule);
    }
}

/* ---------------------------------------------------------------- filters */

/* One clause of a filter: a top-level operator (field NULL) or a field's predicate. */
static void
describe_clause(const char *field, const bson_iter_t *op, const bson_t *doc, int depth, bson_t *out)
{
    const char *name = shl_iter_key(op);

    if (field == NULL) {
        if (depth >= MAX_DEPTH) {
            BSON_APPEND_UTF8(out, "operatorName", name);
        } else if (strcmp(name, "$and") == 0 || strcmp(name, "$or") == 0 ||
                   strcmp(name, "$nor") == 0) {
            describe_logical(op, doc, depth, out);
        } else if (strcmp(name, "$jsonSchema") == 0 && BSON_ITER_HOLDS_DOCUMENT(op)) {
            bson_t schema, rules;
            view_of(op, &schema);
            BSON_APPEND_UTF8(out, "operatorName", "$jsonSchema");
            BSON_APPEND_ARRAY_BEGIN(out, "schemaRulesNotSatisfied", &rules);
            describe_schema(&schema, doc, depth, &rules);
            bson_append_array_end(out, &rules);
        } else if (strcmp(name, "$expr") == 0) {
            bson_t spec;
            BSON_APPEND_UTF8(out, "operatorName", "$expr");
            clause_filter(NULL, op, false, &spec);
            BSON_APPEND_DOCUMENT(out, "specifiedAs", &spec);
            bson_destroy(&spec);
            BSON_APPEND_UTF8(out, "reason", "expression did not match");
            BSON_APPEND_BOOL(out, "expressionResult", false);
        } else {
            bson_t spec;
            BSON_APPEND_UTF8(out, "operatorName", name);
            clause_filter(NULL, op, false, &spec);
            BSON_APPEND_DOCUMENT(out, "specifiedAs", &spec);
            bson_destroy(&spec);
        }
    } else if (strcmp(name, "$not") == 0) {
        /* The child that matched, in the inverted sense, as its details. */
        bson_iter_t sub;
        BSON_APPEND_UTF8(out, "operatorName", "$not");
        if (BSON_ITER_HOLDS_DOCUMENT(op) && bson_iter_recurse(op, &sub) && shl_iter_next(&sub)) {
            bson_t details;
            BSON_APPEND_DOCUMENT_BEGIN(out, "details", &details);
            describe_leaf(field, &sub, false, doc, true, &details);
            bson_append_document_end(out, &details);
        } else {
            BSON_APPEND_UTF8(out, "reason", "child expression matched");
        }
    } else {
        describe_leaf(field, op, false, doc, false, out);
    }
}

/* A filter's clauses, one per top-level operator or field operator ({a: {$gt: 1, $lt: 5}}
 * is two), as MongoDB's parsed tree: one failing clause is described alone, several as
 * the $and of the filter. */
typedef struct clause {
    const char *field; /* NULL: top-level operator */
    bson_iter_t op;
    bool implicit_eq;
} clause_t;

#define MAX_CLAUSES 64

static size_t
collect_clauses(const bson_t *filter, clause_t *c)
{
    bson_iter_t it, sub;
    size_t n = 0;

    if (!bson_iter_init(&it, filter)) {
        return 0;
    }
    while (shl_iter_next(&it) && n < MAX_CLAUSES) {
        const char *k = shl_iter_key(&it);
        bool ops = false;
        if (k[0] == '$') {
            c[n].field = NULL;
            c[n].op = it;
            c[n++].implicit_eq = false;
            continue;
        }
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub) &&
            shl_iter_next(&sub) && shl_iter_key(&sub)[0] == '$') {
            ops = true;
            bson_iter_recurse(&it, &sub);
            while (shl_iter_next(&sub) && n < MAX_CLAUSES) {
                const char *o = shl_iter_key(&sub);
                /* $options belongs to its $regex. */
                if (strcmp(o, "$options") == 0) {
                    continue;
                }
                c[n].field = k;
                c[n].op = sub;
                c[n++].implicit_eq = false;
            }
        }
        if (!ops) {
            c[n].field = k;
            c[n].op = it;
            c[n++].implicit_eq = true;
        }
    }
    return n;
}

static bool
clause_ok(const clause_t *c, const bson_t *doc)
{
    bson_t f;
    bool ok;
    clause_filter(c->field, &c->op, c->implicit_eq, &f);
    ok = matches(&f, doc);
    bson_destroy(&f);
    return ok;
}

static void
describe_one(const clause_t *c, const bson_t *doc, int depth, bson_t *out)
{
    if (c->implicit_eq) {
        describe_leaf(c->field, &c->op, true, doc, false, out);
    } else {
        describe_clause(c->field, &c->op, doc, depth, out);
    }
}

static void
describe_filter(const bson_t *filter, const bson_t *doc, int depth, bson_t *out)
{
    clause_t *c = bson_malloc(MAX_CLAUSES * sizeof(*c));
    size_t n = collect_clauses(filter, c);

    if (n == 1) {
        describe_one(&c[0], doc, depth, out);
    } else {
        bson_t arr;
        uint32_t m = 0;
        BSON_APPEND_UTF8(out, "operatorName", "$and");
        BSON_APPEND_ARRAY_BEGIN(out, "clausesNotSatisfied", &arr);
        for (size_t i = 0; i < n; i++) {
            bson_t item, details;
            char key[16];
            const char *k;
            if (clause_ok(&c[i], doc)) {
                continue;
            }
            bson_uint32_to_string(m++, &k, key, sizeof(key));
            BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &item);
            BSON_APPEND_INT32(&item, "index", (int32_t)i);
            BSON_APPEND_DOCUMENT_BEGIN(&item, "details", &details);
            describe_one(&c[i], doc, depth + 1, &details);
            bson_append_document_end(&item, &details);
            bson_append_document_end(&arr, &item);
        }
        bson_append_array_end(out, &arr);
    }
    bson_free(c);
}

void
db_validation_error_details(const bson_t *validator, const bson_t *doc, bson_t *out)
{
    describe_filter(validator, doc, 0, out);
}
