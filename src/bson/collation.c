/*
 * collation.c -- collation specs and ICU collators (collation.h, docs/design/collation.md).
 * The checks and their order follow MongoDB's CollatorFactoryICU: the locale first, then each
 * attribute (given ones set on the ICU collator, missing ones read back from the locale's
 * defaults), unknown fields, then the invalid combinations.
 */
#include "bson/collation.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unicode/ucol.h>
#include <unicode/uloc.h>
#include <unicode/ustring.h>
#include <unicode/uvernum.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"

struct shl_collator {
    atomic_int refs;
    UCollator *ucol; /* only const ICU calls after construction: shared by threads */
    bson_t spec;     /* normalised */
};

const char *
shl_collator_icu_version(void)
{
    return U_ICU_VERSION;
}

/* The attributes of a spec, as parsed or read back from ICU. */
typedef struct {
    bool case_level;
    const char *case_first; /* "upper" | "lower" | "off" */
    int strength;           /* 1..5 */
    bool numeric;
    const char *alternate;    /* "non-ignorable" | "shifted" */
    const char *max_variable; /* "punct" | "space" */
    bool normalization;
    bool backwards;
} coll_attrs_t;

/* bsonExtract*Field's errors: a missing field is absent; a wrong type is TypeMismatch. */
static int
find_field(const bson_t *spec, const char *name, bson_type_t want, const char *want_name,
           bson_iter_t *it, bool *found, shl_status_t *st)
{
    int ret = 0;
    *found = bson_iter_init_find(it, spec, name);
    if (*found && shl_iter_type(it) != want) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "\"%s\" had the wrong type. Expected %s, found %s",
                 name, want_name, shl_bson_type_name(shl_iter_type(it)));
    }
done:
    return ret;
}

static int
get_bool(const bson_t *spec, const char *name, bool *v, bool *found, shl_status_t *st)
{
    bson_iter_t it;
    int ret = find_field(spec, name, BSON_TYPE_BOOL, "bool", &it, found, st);
    if (ret == 0 && *found) {
        *v = bson_iter_bool(&it);
    }
    return ret;
}

static int
get_string(const bson_t *spec, const char *name, const char **v, bool *found, shl_status_t *st)
{
    bson_iter_t it;
    int ret = find_field(spec, name, BSON_TYPE_UTF8, "string", &it, found, st);
    if (ret == 0 && *found) {
        *v = bson_iter_utf8(&it, NULL);
    }
    return ret;
}

/* bsonExtractIntegerField: any number exactly representable as a 64-bit integer. */
static int
get_integer(const bson_t *spec, const char *name, long long *v, bool *found, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    *found = bson_iter_init_find(&it, spec, name);
    if (!*found) {
        goto done;
    }
    switch (shl_iter_type(&it)) {
    case BSON_TYPE_INT32:
        *v = bson_iter_int32(&it);
        break;
    case BSON_TYPE_INT64:
        *v = bson_iter_int64(&it);
        break;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128: {
        double d = shl_iter_type(&it) == BSON_TYPE_DOUBLE ? bson_iter_double(&it)
                                                           : bson_iter_as_double(&it);
        if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) || d != (double)(long long)d) {
            char *s = shl_bson_value_to_string(bson_iter_value(&it));
            ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                                 "Expected field \"%s\" to have a value exactly representable as "
                                 "a 64-bit integer, but found %s: %s",
                                 name, name, s);
            bson_free(s);
            goto done;
        }
        *v = (long long)d;
        break;
    }
    default:
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "Expected field \"%s\" to have numeric type, but found %s", name,
                 shl_bson_type_name(shl_iter_type(&it)));
    }
done:
    return ret;
}

static int
icu_set(UCollator *u, UColAttribute attr, UColAttributeValue v, const char *field,
        const bson_t *spec, shl_status_t *st)
{
    int ret = 0;
    UErrorCode err = U_ZERO_ERROR;
    ucol_setAttribute(u, attr, v, &err);
    if (U_FAILURE(err)) {
        char *s = shl_bson_to_string(spec);
        ret = shl_status_set(st, SHL_CODE_OPERATION_FAILED,
                             "Failed to set '%s' attribute: %s. Collation spec: %s", field,
                             u_errorName(err), s);
        bson_free(s);
    }
    return ret;
}

static UColAttributeValue
icu_get(const UCollator *u, UColAttribute attr)
{
    UErrorCode err = U_ZERO_ERROR;
    UColAttributeValue v = ucol_getAttribute(u, attr, &err);
    return U_FAILURE(err) ? UCOL_DEFAULT : v;
}

static int
parse_bool_attr(const bson_t *spec, const char *name, UCollator *u, UColAttribute attr,
                bool *out, int *nparsed, shl_status_t *st)
{
    int ret = 0;
    bool found = false, v = false;
    SHL_ERR(get_bool(spec, name, &v, &found, st));
    if (found) {
        ++*nparsed;
        *out = v;
        SHL_ERR(icu_set(u, attr, v ? UCOL_ON : UCOL_OFF, name, spec, st));
    } else {
        *out = icu_get(u, attr) == UCOL_ON;
    }
done:
    return ret;
}

static int
parse_attrs(const bson_t *spec, UCollator *u, coll_attrs_t *a, shl_status_t *st)
{
    int ret = 0, nparsed = 1; /* the locale */
    bool found = false;
    const char *s = NULL;
    long long n = 0;

    SHL_ERR(parse_bool_attr(spec, "caseLevel", u, UCOL_CASE_LEVEL, &a->case_level, &nparsed, st));

    SHL_ERR(get_string(spec, "caseFirst", &s, &found, st));
    if (found) {
        UColAttributeValue v;
        ++nparsed;
        if (strcmp(s, "upper") == 0) {
            a->case_first = "upper", v = UCOL_UPPER_FIRST;
        } else if (strcmp(s, "lower") == 0) {
            a->case_first = "lower", v = UCOL_LOWER_FIRST;
        } else if (strcmp(s, "off") == 0) {
            a->case_first = "off", v = UCOL_OFF;
        } else {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "Field 'caseFirst' must be 'upper', 'lower', or 'off'. Got: %s", s);
        }
        SHL_ERR(icu_set(u, UCOL_CASE_FIRST, v, "caseFirst", spec, st));
    } else {
        UColAttributeValue v = icu_get(u, UCOL_CASE_FIRST);
        a->case_first = v == UCOL_UPPER_FIRST ? "upper" : v == UCOL_LOWER_FIRST ? "lower" : "off";
    }

    SHL_ERR(get_integer(spec, "strength", &n, &found, st));
    if (found) {
        static const UColAttributeValue levels[] = {UCOL_PRIMARY, UCOL_SECONDARY, UCOL_TERTIARY,
                                                    UCOL_QUATERNARY, UCOL_IDENTICAL};
        ++nparsed;
        if (n < 1 || n > 5) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "Field 'strength' must be an integer 1 through 5. Got: %lld", n);
        }
        a->strength = (int)n;
        SHL_ERR(icu_set(u, UCOL_STRENGTH, levels[n - 1], "strength", spec, st));
    } else {
        switch (icu_get(u, UCOL_STRENGTH)) {
        case UCOL_PRIMARY:
            a->strength = 1;
            break;
        case UCOL_SECONDARY:
            a->strength = 2;
            break;
        case UCOL_QUATERNARY:
            a->strength = 4;
            break;
        case UCOL_IDENTICAL:
            a->strength = 5;
            break;
        default:
            a->strength = 3;
            break;
        }
    }

    SHL_ERR(parse_bool_attr(spec, "numericOrdering", u, UCOL_NUMERIC_COLLATION, &a->numeric,
                            &nparsed, st));

    SHL_ERR(get_string(spec, "alternate", &s, &found, st));
    if (found) {
        ++nparsed;
        bool shifted = strcmp(s, "shifted") == 0;
        if (!shifted && strcmp(s, "non-ignorable") != 0) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "Field 'alternate' must be 'non-ignorable' or 'shifted'. Got: %s", s);
        }
        a->alternate = shifted ? "shifted" : "non-ignorable";
        SHL_ERR(icu_set(u, UCOL_ALTERNATE_HANDLING, shifted ? UCOL_SHIFTED : UCOL_NON_IGNORABLE,
                        "alternate", spec, st));
    } else {
        a->alternate =
            icu_get(u, UCOL_ALTERNATE_HANDLING) == UCOL_SHIFTED ? "shifted" : "non-ignorable";
    }

    SHL_ERR(get_string(spec, "maxVariable", &s, &found, st));
    if (found) {
        ++nparsed;
        bool space = strcmp(s, "space") == 0;
        if (!space && strcmp(s, "punct") != 0) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "Field 'maxVariable' must be 'punct' or 'space'. Got: %s", s);
        }
        a->max_variable = space ? "space" : "punct";
        UErrorCode err = U_ZERO_ERROR;
        ucol_setMaxVariable(u, space ? UCOL_REORDER_CODE_SPACE : UCOL_REORDER_CODE_PUNCTUATION,
                            &err);
        if (U_FAILURE(err)) {
            char *js = shl_bson_to_string(spec);
            ret = shl_status_set(st, SHL_CODE_OPERATION_FAILED,
                                 "Failed to set 'maxVariable' attribute: %s. Collation spec: %s",
                                 u_errorName(err), js);
            bson_free(js);
            goto done;
        }
    } else {
        a->max_variable = ucol_getMaxVariable(u) == UCOL_REORDER_CODE_SPACE ? "space" : "punct";
    }

    SHL_ERR(parse_bool_attr(spec, "normalization", u, UCOL_NORMALIZATION_MODE, &a->normalization,
                            &nparsed, st));
    SHL_ERR(parse_bool_attr(spec, "backwards", u, UCOL_FRENCH_COLLATION, &a->backwards, &nparsed,
                            st));

    SHL_ERR(get_string(spec, "version", &s, &found, st));
    if (found) {
        ++nparsed;
        if (strcmp(s, U_ICU_VERSION) != 0) {
            char *js = shl_bson_to_string(spec);
            ret = shl_status_set(st, SHL_CODE_INCOMPATIBLE_COLLATION_VERSION,
                                 "Requested collation version %s but the only available "
                                 "collator version was %s. Requested collation spec: %s",
                                 s, U_ICU_VERSION, js);
            bson_free(js);
            goto done;
        }
    }

    if ((uint32_t)nparsed < bson_count_keys(spec)) {
        char *js = shl_bson_to_string(spec);
        ret = shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                             "Collation spec contains unknown field. Collation spec: %s", js);
        bson_free(js);
        goto done;
    }
done:
    return ret;
}

static void
build_spec(bson_t *out, const char *locale, const coll_attrs_t *a)
{
    bson_init(out);
    BSON_APPEND_UTF8(out, "locale", locale);
    BSON_APPEND_BOOL(out, "caseLevel", a->case_level);
    BSON_APPEND_UTF8(out, "caseFirst", a->case_first);
    BSON_APPEND_INT32(out, "strength", a->strength);
    BSON_APPEND_BOOL(out, "numericOrdering", a->numeric);
    BSON_APPEND_UTF8(out, "alternate", a->alternate);
    BSON_APPEND_UTF8(out, "maxVariable", a->max_variable);
    BSON_APPEND_BOOL(out, "normalization", a->normalization);
    BSON_APPEND_BOOL(out, "backwards", a->backwards);
    BSON_APPEND_UTF8(out, "version", U_ICU_VERSION);
}

/* The locale must be one ICU has data for, spelt as ICU spells it ("Did you mean"). */
static int
check_locale(const bson_t *spec, const char *locale, const UCollator *u, shl_status_t *st)
{
    int ret = 0;
    UErrorCode err = U_ZERO_ERROR;
    const char *valid = ucol_getLocaleByType(u, ULOC_VALID_LOCALE, &err);
    char *js = NULL;
    if (U_FAILURE(err) || valid == NULL) {
        js = shl_bson_to_string(spec);
        SHL_FAIL(st, SHL_CODE_OPERATION_FAILED,
                 "Failed to get locale from icu::Collator: %s. Collation spec: %s",
                 u_errorName(err), js);
    }
    if (locale[0] == '\0') {
        js = shl_bson_to_string(spec);
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Field 'locale' cannot be the empty string in: %s", js);
    }
    if (strcmp(locale, valid) != 0) {
        js = shl_bson_to_string(spec);
        if (valid[0] != '\0' && strcmp(valid, "root") != 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Field 'locale' is invalid in: %s. Did you mean '%s'?",
                     js, valid);
        }
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Field 'locale' is invalid in: %s", js);
    }
done:
    bson_free(js);
    return ret;
}

/* Builds a collator from 'spec' (shl_collator_new without the cache). */
static int
collator_build(const bson_t *spec, shl_collator_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    const char *locale = NULL;
    uint32_t locale_len = 0;
    char canon[ULOC_FULLNAME_CAPACITY];
    char *js = NULL;
    UErrorCode err = U_ZERO_ERROR;
    shl_collator_t *c = NULL;
    coll_attrs_t attrs;

    *out = NULL;
    if (bson_empty(spec)) {
        goto done; /* {} is the simple collation, as an omitted one */
    }
    if (!bson_iter_init_find(&it, spec, "locale")) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "Missing expected field \"locale\"");
    }
    if (!BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "\"locale\" had the wrong type. Expected string, found %s",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    locale = bson_iter_utf8(&it, &locale_len);
    if (strlen(locale) != locale_len) {
        js = shl_bson_to_string(spec);
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "Field 'locale' cannot contain null byte. Collation spec: %s", js);
    }
    if (strcmp(locale, "simple") == 0) {
        if (bson_count_keys(spec) > 1) {
            js = shl_bson_to_string(spec);
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "If locale=simple, no other fields should be present in: %s", js);
        }
        goto done;
    }
    uloc_getName(locale, canon, (int32_t)sizeof(canon), &err);
    if (U_FAILURE(err) || err == U_STRING_NOT_TERMINATED_WARNING) {
        js = shl_bson_to_string(spec);
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Field 'locale' is not valid in: %s", js);
    }
    c = calloc(1, sizeof(*c));
    SHL_INVARIANT(c != NULL);
    atomic_init(&c->refs, 1);
    bson_init(&c->spec);
    c->ucol = ucol_open(canon, &err);
    if (U_FAILURE(err) || c->ucol == NULL) {
        js = shl_bson_to_string(spec);
        SHL_FAIL(st, SHL_CODE_OPERATION_FAILED, "Failed to create collator: %s. Collation spec: %s",
                 u_errorName(err), js);
    }
    SHL_ERR(check_locale(spec, locale, c->ucol, st));
    SHL_ERR(parse_attrs(spec, c->ucol, &attrs, st));
    if (attrs.backwards && attrs.strength == 1) {
        bson_t norm;
        build_spec(&norm, canon, &attrs);
        js = shl_bson_to_string(&norm);
        bson_destroy(&norm);
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "'backwards' is invalid with 'strength' of 1 in: %s", js);
    }
    if (strcmp(attrs.case_first, "off") != 0 && !attrs.case_level && attrs.strength < 3) {
        bson_t norm;
        build_spec(&norm, canon, &attrs);
        js = shl_bson_to_string(&norm);
        bson_destroy(&norm);
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "'caseFirst' is invalid unless 'caseLevel' is on or 'strength' is greater than 2 "
                 "in: %s",
                 js);
    }
    bson_destroy(&c->spec);
    build_spec(&c->spec, canon, &attrs);
    *out = c;
    c = NULL;
done:
    bson_free(js);
    shl_collator_release(c);
    return ret;
}

int
shl_collator_from_iter(const bson_iter_t *it, const char *field, shl_collator_t **out,
                       shl_status_t *st)
{
    int ret = 0;
    bson_t view;
    const uint8_t *data = NULL;
    uint32_t len = 0;
    *out = NULL;
    if (!BSON_ITER_HOLDS_DOCUMENT(it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '%s' is the wrong type '%s', expected type 'object'", field,
                 shl_bson_type_name(shl_iter_type(it)));
    }
    bson_iter_document(it, &len, &data);
    if (!bson_init_static(&view, data, len)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "invalid collation document");
    }
    ret = shl_collator_new(&view, out, st);
done:
    return ret;
}

/*
 * The collator cache. Opening an ICU collator and validating its spec costs 30-50 us, paid
 * by every command naming a collation; collators are immutable, so commands share one per
 * spec. Keyed by the spec's bytes as given (a spec spelt in another field order is another
 * entry of the same collator). Only accepted specs are cached; when full, the oldest entry
 * goes (its holders keep their references).
 */
#define COLLATOR_CACHE_SIZE 32

typedef struct {
    uint8_t *spec; /* the spec's bytes as given */
    uint32_t len;
    shl_collator_t *coll; /* a reference; NULL for the simple collation */
} cache_entry_t;

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static cache_entry_t cache[COLLATOR_CACHE_SIZE]; /* guarded by cache_mu */
static size_t cache_next;                        /* guarded by cache_mu: the slot to fill next */

/* Whether the cache holds 'spec'; *out is then a new reference. */
static bool
cache_lookup(const bson_t *spec, shl_collator_t **out)
{
    bool found = false;
    pthread_mutex_lock(&cache_mu);
    for (size_t i = 0; i < COLLATOR_CACHE_SIZE && !found; i++) {
        if (cache[i].spec != NULL && cache[i].len == spec->len &&
            memcmp(cache[i].spec, bson_get_data(spec), spec->len) == 0) {
            *out = shl_collator_ref(cache[i].coll);
            found = true;
        }
    }
    pthread_mutex_unlock(&cache_mu);
    return found;
}

static void
cache_insert(const bson_t *spec, shl_collator_t *c)
{
    shl_collator_t *old = NULL;
    uint8_t *copy = malloc(spec->len);
    SHL_INVARIANT(copy != NULL);
    memcpy(copy, bson_get_data(spec), spec->len);
    pthread_mutex_lock(&cache_mu);
    cache_entry_t *e = &cache[cache_next];
    cache_next = (cache_next + 1) % COLLATOR_CACHE_SIZE;
    free(e->spec);
    old = e->coll;
    e->spec = copy;
    e->len = spec->len;
    e->coll = shl_collator_ref(c);
    pthread_mutex_unlock(&cache_mu);
    shl_collator_release(old);
}

int
shl_collator_new(const bson_t *spec, shl_collator_t **out, shl_status_t *st)
{
    int ret = 0;
    *out = NULL;
    if (!cache_lookup(spec, out)) {
        ret = collator_build(spec, out, st);
        if (ret == 0 && *out != NULL) {
            cache_insert(spec, *out);
        }
    }
    return ret;
}

shl_collator_t *
shl_collator_ref(shl_collator_t *c)
{
    if (c != NULL) {
        atomic_fetch_add(&c->refs, 1);
    }
    return c;
}

void
shl_collator_release(shl_collator_t *c)
{
    if (c != NULL && atomic_fetch_sub(&c->refs, 1) == 1) {
        if (c->ucol != NULL) {
            ucol_close(c->ucol);
        }
        bson_destroy(&c->spec);
        free(c);
    }
}

const bson_t *
shl_collator_spec(const shl_collator_t *c)
{
    return &c->spec;
}

void
shl_collator_append_spec(bson_t *doc, const char *key, const shl_collator_t *c)
{
    if (c != NULL) {
        BSON_APPEND_DOCUMENT(doc, key, &c->spec);
    } else {
        bson_t simple;
        BSON_APPEND_DOCUMENT_BEGIN(doc, key, &simple);
        BSON_APPEND_UTF8(&simple, "locale", "simple");
        bson_append_document_end(doc, &simple);
    }
}

bool
shl_collator_equal(const shl_collator_t *a, const shl_collator_t *b)
{
    if (a == NULL || b == NULL) {
        return a == b;
    }
    return a == b || bson_equal(&a->spec, &b->spec);
}

int
shl_collator_compare(const shl_collator_t *c, const char *a, size_t alen, const char *b,
                     size_t blen)
{
    if (c == NULL) {
        int r = memcmp(a, b, alen < blen ? alen : blen);
        if (r != 0) {
            return r < 0 ? -1 : 1;
        }
        return alen == blen ? 0 : alen < blen ? -1 : 1;
    }
    UErrorCode err = U_ZERO_ERROR;
    UCollationResult r =
        ucol_strcollUTF8(c->ucol, a, (int32_t)alen, b, (int32_t)blen, &err);
    return r == UCOL_LESS ? -1 : r == UCOL_GREATER ? 1 : 0;
}

void
shl_collator_key_append(const shl_collator_t *c, const char *a, size_t alen, bson_string_t *buf)
{
    UChar stack16[256];
    UChar *u16 = stack16;
    int32_t n16 = 0;
    UErrorCode err = U_ZERO_ERROR;
    uint8_t stackkey[512];
    uint8_t *key = stackkey;

    /* UTF-8 to UTF-16, ill-formed sequences as U+FFFD as the comparison does. */
    u_strFromUTF8WithSub(u16, (int32_t)(sizeof(stack16) / sizeof(UChar)), &n16, a, (int32_t)alen,
                         0xFFFD, NULL, &err);
    if (err == U_BUFFER_OVERFLOW_ERROR) {
        err = U_ZERO_ERROR;
        u16 = bson_malloc(((size_t)n16 + 1) * sizeof(UChar));
        u_strFromUTF8WithSub(u16, n16 + 1, &n16, a, (int32_t)alen, 0xFFFD, NULL, &err);
    }
    int32_t klen = ucol_getSortKey(c->ucol, u16, n16, key, (int32_t)sizeof(stackkey));
    if (klen > (int32_t)sizeof(stackkey)) {
        key = bson_malloc((size_t)klen);
        klen = ucol_getSortKey(c->ucol, u16, n16, key, klen);
    }
    if (klen > 0) {
        /* The key ends with a NUL that MongoDB does not store. */
        char *tmp = bson_strndup((const char *)key, (size_t)klen - 1);
        bson_string_append(buf, tmp);
        bson_free(tmp);
    }
    if (key != stackkey) {
        bson_free(key);
    }
    if (u16 != stack16) {
        bson_free(u16);
    }
}

static void value_key_doc(const shl_collator_t *c, const uint8_t *data, uint32_t len, bool array,
                          bson_t *out);

static void
append_key_value(const shl_collator_t *c, bson_t *out, const char *k, const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL: {
        bson_string_t *s = bson_string_new(NULL);
        if (v->value_type == BSON_TYPE_UTF8) {
            shl_collator_key_append(c, v->value.v_utf8.str, v->value.v_utf8.len, s);
        } else {
            shl_collator_key_append(c, v->value.v_symbol.symbol, v->value.v_symbol.len, s);
        }
        bson_append_utf8(out, k, -1, s->str, (int)s->len);
        bson_string_free(s, true);
        break;
    }
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY: {
        bson_t sub;
        bool array = v->value_type == BSON_TYPE_ARRAY;
        value_key_doc(c, v->value.v_doc.data, v->value.v_doc.data_len, array, &sub);
        if (array) {
            bson_append_array(out, k, -1, &sub);
        } else {
            bson_append_document(out, k, -1, &sub);
        }
        bson_destroy(&sub);
        break;
    }
    default:
        bson_append_value(out, k, -1, v);
        break;
    }
}

static void
value_key_doc(const shl_collator_t *c, const uint8_t *data, uint32_t len, bool array, bson_t *out)
{
    bson_iter_t it;
    (void)array;
    bson_init(out);
    if (bson_iter_init_from_data(&it, data, len)) {
        while (bson_iter_next(&it)) {
            append_key_value(c, out, bson_iter_key(&it), bson_iter_value(&it));
        }
    }
}

void
shl_collator_value_key(const shl_collator_t *c, const bson_value_t *in, bson_value_t *out)
{
    if (c == NULL || (in->value_type != BSON_TYPE_UTF8 && in->value_type != BSON_TYPE_SYMBOL &&
                      in->value_type != BSON_TYPE_DOCUMENT && in->value_type != BSON_TYPE_ARRAY)) {
        bson_value_copy(in, out);
        return;
    }
    bson_t tmp = BSON_INITIALIZER;
    bson_iter_t it;
    append_key_value(c, &tmp, "k", in);
    if (bson_iter_init_find(&it, &tmp, "k")) {
        bson_value_copy(bson_iter_value(&it), out);
    } else {
        out->value_type = BSON_TYPE_NULL;
    }
    bson_destroy(&tmp);
}
