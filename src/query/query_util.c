/*
 * query_util.c -- the helpers declared in query_private.h: dotted paths, pointer
 * vectors, and value utilities shared by the matcher, projection, sort and update code.
 */
#include "query/query_private.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"

void
qpath_init(qpath_t *p, const char *dotted, size_t len)
{
    size_t n = 1, i, k = 0;
    char *buf;

    for (i = 0; i < len; i++) {
        if (dotted[i] == '.') {
            n++;
        }
    }
    p->dotted = bson_strndup(dotted, len);
    p->n = n;
    p->parts = bson_malloc(n * sizeof(char *));
    p->numeric = bson_malloc(n * sizeof(bool));
    /* One buffer holds every component; dots become terminators. */
    buf = bson_strndup(dotted, len);
    p->parts[0] = buf;
    for (i = 0; i < len; i++) {
        if (buf[i] == '.') {
            buf[i] = '\0';
            p->parts[++k] = buf + i + 1;
        }
    }
    for (i = 0; i < n; i++) {
        p->numeric[i] = query_all_digits(p->parts[i]);
    }
}

void
qpath_cleanup(qpath_t *p)
{
    if (p->parts != NULL) {
        bson_free(p->parts[0]);
    }
    bson_free(p->parts);
    bson_free(p->numeric);
    bson_free(p->dotted);
    memset(p, 0, sizeof(*p));
}

void
qpath_copy(qpath_t *dst, const qpath_t *src)
{
    qpath_init(dst, src->dotted, strlen(src->dotted));
}

char *
qpath_dotted_prefix(const qpath_t *p, size_t n)
{
    bson_string_t *s = bson_string_new("");
    for (size_t i = 0; i < n && i < p->n; i++) {
        if (i > 0) {
            bson_string_append_c(s, '.');
        }
        bson_string_append(s, p->parts[i]);
    }
    return bson_string_free(s, false);
}

bool
qpath_is_prefix(const qpath_t *a, const qpath_t *b)
{
    if (a->n > b->n) {
        return false;
    }
    for (size_t i = 0; i < a->n; i++) {
        if (strcmp(a->parts[i], b->parts[i]) != 0) {
            return false;
        }
    }
    return true;
}

bool
query_all_digits(const char *s)
{
    if (*s == '\0') {
        return false;
    }
    for (; *s; s++) {
        if (*s < '0' || *s > '9') {
            return false;
        }
    }
    return true;
}

bool
query_array_index(const char *s, size_t *out)
{
    size_t v = 0;
    if (!query_all_digits(s)) {
        return false;
    }
    for (; *s; s++) {
        if (v > (SIZE_MAX - 9) / 10) {
            return false;
        }
        v = v * 10 + (size_t)(*s - '0');
    }
    *out = v;
    return true;
}

void
ptrvec_push(ptrvec_t *pv, void *p)
{
    if (pv->n == pv->cap) {
        pv->cap = pv->cap ? pv->cap * 2 : 4;
        pv->v = bson_realloc(pv->v, pv->cap * sizeof(void *));
    }
    pv->v[pv->n++] = p;
}

void
ptrvec_cleanup(ptrvec_t *pv)
{
    bson_free(pv->v);
    memset(pv, 0, sizeof(*pv));
}

bool
query_value_is_number(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        return true;
    default:
        return false;
    }
}

double
query_value_as_double(const bson_value_t *v)
{
    char buf[BSON_DECIMAL128_STRING];
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        return v->value.v_int32;
    case BSON_TYPE_INT64:
        return (double)v->value.v_int64;
    case BSON_TYPE_DOUBLE:
        return v->value.v_double;
    case BSON_TYPE_DECIMAL128:
        bson_decimal128_to_string(&v->value.v_decimal128, buf);
        if (strcmp(buf, "NaN") == 0) {
            return NAN;
        }
        if (strcmp(buf, "Infinity") == 0) {
            return INFINITY;
        }
        if (strcmp(buf, "-Infinity") == 0) {
            return -INFINITY;
        }
        return strtod(buf, NULL);
    default:
        return 0;
    }
}

bool
query_value_truthy(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_EOD:
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED:
        return false;
    case BSON_TYPE_BOOL:
        return v->value.v_bool;
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        return query_value_as_double(v) != 0;
    default:
        return true;
    }
}

char *
query_value_to_json(const bson_value_t *v)
{
    bson_t tmp = BSON_INITIALIZER;
    char *json, *out;
    size_t len;

    if (v->value_type == BSON_TYPE_EOD) {
        bson_destroy(&tmp);
        return bson_strdup("missing");
    }
    bson_append_value(&tmp, "v", 1, v);
    json = bson_as_relaxed_extended_json(&tmp, &len);
    /* json is "{ \"v\" : <value> }": keep <value>. */
    if (json != NULL && len > 10) {
        out = bson_strndup(json + 8, len - 10);
    } else {
        /* libbson renders nothing when a name or string is not UTF-8 (the wire accepts
         * them, as MongoDB does): the log renderer's {"v":<value>} then, with U+FFFD. */
        bson_free(json);
        json = shl_log_json_from_bson(&tmp, false, &len);
        out = bson_strndup(json + 5, len - 6);
    }
    bson_destroy(&tmp);
    bson_free(json);
    return out;
}

bool
query_bson_view(const bson_value_t *v, bson_t *view)
{
    static const uint8_t empty[5] = {5, 0, 0, 0, 0};
    if ((v->value_type == BSON_TYPE_DOCUMENT || v->value_type == BSON_TYPE_ARRAY) &&
        bson_init_static(view, v->value.v_doc.data, v->value.v_doc.data_len)) {
        return true;
    }
    /* Not a container, or a malformed one: callers see an empty document, never garbage. */
    bson_init_static(view, empty, sizeof(empty));
    return false;
}

void
query_append_value(bson_t *doc, const char *key, int keylen, const bson_value_t *v)
{
    if (v->value_type == BSON_TYPE_EOD) {
        return;
    }
    bson_append_value(doc, key, keylen, v);
}

int
query_parse_int64(const bson_value_t *v, int64_t *out, const char *what, shl_status_t *st)
{
    char *js;
    int ret = 0;

    switch (v->value_type) {
    case BSON_TYPE_INT32:
        *out = v->value.v_int32;
        break;
    case BSON_TYPE_INT64:
        *out = v->value.v_int64;
        break;
    case BSON_TYPE_DOUBLE: {
        double d = v->value.v_double;
        js = query_value_to_json(v);
        if (isnan(d)) {
            ret = shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                                 "Expected an integer, but found NaN in: %s: %s", what, js);
        } else if (d >= 9223372036854775808.0 || d < -9223372036854775808.0) {
            ret = shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                                 "Cannot represent as a 64-bit integer: %s: %s", what, js);
        } else if (d != (double)(int64_t)d) {
            ret = shl_status_set(st, SHL_CODE_FAILED_TO_PARSE, "Expected an integer: %s: %s", what,
                                 js);
        } else {
            *out = (int64_t)d;
        }
        bson_free(js);
        break;
    }
    case BSON_TYPE_DECIMAL128: {
        double d = query_value_as_double(v);
        if (isnan(d) || d >= 9223372036854775808.0 || d < -9223372036854775808.0 ||
            d != (double)(int64_t)d) {
            js = query_value_to_json(v);
            ret = shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                                 "Cannot represent as a 64-bit integer: %s: %s", what, js);
            bson_free(js);
        } else {
            *out = (int64_t)d;
        }
        break;
    }
    default:
        js = query_value_to_json(v);
        ret =
            shl_status_set(st, SHL_CODE_FAILED_TO_PARSE, "Expected a number in: %s: %s", what, js);
        bson_free(js);
        break;
    }
    return ret;
}
